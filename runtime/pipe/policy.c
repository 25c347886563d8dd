/*
 * policy.c - schedule and recomputation policy names (see policy.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "names.h"
#include "policy.h"

/* The schedules' names, in one table (indexed by merak_schedule_kind). */
static const char *const schedule_names[MERAK_SCHEDULE_COUNT_] = {
    [MERAK_SCHEDULE_GPIPE] = "gpipe",
    [MERAK_SCHEDULE_1F1B] = "1f1b",
    [MERAK_SCHEDULE_SCP] = "scp",
    [MERAK_SCHEDULE_ZB_H1] = "zb-h1",
    [MERAK_SCHEDULE_INTERLEAVED] = "interleaved",
};

int merak_schedule_parse(const char *name, merak_schedule_kind *kind)
{
    int i = merak_name_find(schedule_names, MERAK_SCHEDULE_COUNT_, name);
    if (i >= 0)
        *kind = (merak_schedule_kind)i;
    return i < 0 ? -1 : 0;
}

const char *merak_schedule_name(merak_schedule_kind kind)
{
    return (int)kind >= 0 && kind < MERAK_SCHEDULE_COUNT_ ? schedule_names[kind] : "?";
}

const char *merak_schedule_names(void)
{
    static char names[64];
    return merak_names_join(schedule_names, MERAK_SCHEDULE_COUNT_, names, sizeof names);
}

int merak_virtual_stages(merak_schedule_kind kind, int asked)
{
    return asked > 0 ? asked : kind == MERAK_SCHEDULE_INTERLEAVED ? 2 : 1;
}

/* The policies' names as a user writes them; [k] for merak_recompute_kind k. */
static const char *const recompute_forms[] = {
    [MERAK_RECOMPUTE_NONE] = "none",
    [MERAK_RECOMPUTE_FULL] = "full",
    [MERAK_RECOMPUTE_STAGE_AWARE] = "stage-aware[=R0]",
    [MERAK_RECOMPUTE_BUDGET] = "budget=GB",
};
enum { NRECOMPUTE = sizeof recompute_forms / sizeof recompute_forms[0] };

const char *merak_recompute_names(void)
{
    static char names[96];
    return merak_names_join(recompute_forms, NRECOMPUTE, names, sizeof names);
}

/* A whole string as a finite number, or NAN. */
static double number(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    return *s && !*end && isfinite(v) ? v : NAN;
}

int merak_recompute_parse(const char *s, merak_recompute *out, char *err, size_t errlen)
{
    static const char sa[] = "stage-aware", bu[] = "budget=";
    if (!s)
        s = "";
    if (!strcmp(s, "none") || !strcmp(s, "full")) {
        *out = (merak_recompute){s[0] == 'n' ? MERAK_RECOMPUTE_NONE : MERAK_RECOMPUTE_FULL, 0};
        return 0;
    }
    if (!strncmp(s, sa, sizeof sa - 1) && (s[sizeof sa - 1] == 0 || s[sizeof sa - 1] == '=')) {
        double r0 = s[sizeof sa - 1] ? number(s + sizeof sa) : MERAK_RECOMPUTE_R0_DEFAULT;
        if (!(r0 >= 0 && r0 <= 1))
            return merak_errf(err, errlen, "recompute '%s': R0 must be a fraction from 0 to 1", s);
        *out = (merak_recompute){MERAK_RECOMPUTE_STAGE_AWARE, r0};
        return 0;
    }
    if (!strncmp(s, bu, sizeof bu - 1)) {
        double gb = number(s + sizeof bu - 1);
        if (!(gb > 0))
            return merak_errf(err, errlen, "recompute '%s': the budget must be a positive number of GB", s);
        *out = (merak_recompute){MERAK_RECOMPUTE_BUDGET, gb};
        return 0;
    }
    return merak_errf(err, errlen, "recompute '%s' is not %s", s, merak_recompute_names());
}

double merak_recompute_stage_aware(double r0, int S, int s)
{
    if (s >= S - 1)
        return 0;
    double r = 1 - (1 - r0) * (double)(S - 1) / (double)(S - 1 - s);
    return r < 0 ? 0 : r > 1 ? 1 : r;
}
