/*
 * spank_args.c - parsing and checking the SPANK plugin's options and
 * plugstack.conf arguments (no Slurm here; see spank_args.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/pipe/policy.h" /* the schedule and recompute names merak-train takes */
#include "../topo/errf.h"           /* merak_errf, from libmerak-topo-core */
#include "spank_args.h"

/* A whole decimal number in [1, max]; -1 otherwise. */
static long positive(const char *s, long max)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > max)
        return -1;
    return v;
}

static int one_of(const char *s, const char *const *words)
{
    for (int i = 0; s && words[i]; i++)
        if (strcmp(s, words[i]) == 0)
            return i;
    return -1;
}

void merak_spank_opts_init(merak_spank_opts *o)
{
    memset(o, 0, sizeof *o);
    o->bind = MERAK_BIND_UNSET;
}

void merak_spank_site_init(merak_spank_site *s)
{
    memset(s, 0, sizeof *s);
    s->bind = MERAK_BIND_CLOSEST;
}

static const char *const binds[] = {"none", "closest", NULL};

/* Stores an integer option in [min, max]. */
static int set_int(int *slot, const char *name, const char *value, long min, long max, char *err, size_t errlen)
{
    long v = positive(value, max);
    if (v < min)
        return merak_errf(err, errlen, "invalid --%s value '%s' (expected a whole number from %ld to %ld)", name,
                    value ? value : "", min, max);
    *slot = (int)v;
    return 0;
}

/* Stores a value merak-train's parser accepted (valid: 0 or -1), refusing
 * one that does not fit. */
static int set_word(char *slot, size_t cap, const char *name, const char *value, int valid, const char *accepted,
                    char *err, size_t errlen)
{
    if (valid < 0 || strlen(value) >= cap)
        return merak_errf(err, errlen, "invalid --%s value '%s' (expected %s)", name, value ? value : "", accepted);
    snprintf(slot, cap, "%s", value);
    return 0;
}

int merak_spank_set_option(merak_spank_opts *o, int which, const char *value, char *err, size_t errlen)
{
    int rc;
    switch (which) {
    case MERAK_OPT_DP: rc = set_int(&o->dp, "merak-dp", value, 1, 1 << 24, err, errlen); break;
    case MERAK_OPT_TP: rc = set_int(&o->tp, "merak-tp", value, 1, 1 << 16, err, errlen); break;
    case MERAK_OPT_PP: rc = set_int(&o->pp, "merak-pp", value, 1, 1 << 16, err, errlen); break;
    case MERAK_OPT_MICROBATCHES:
        rc = set_int(&o->microbatches, "merak-microbatches", value, 1, 1 << 20, err, errlen);
        break;
    case MERAK_OPT_VIRTUAL_STAGES: /* the range merak-train takes with the interleaved schedule */
        rc = set_int(&o->virtual_stages, "merak-virtual-stages", value, 2, MERAK_MAX_CHUNKS, err, errlen);
        break;
    case MERAK_OPT_TP_OVERLAP: /* merak-train's range for --tp-overlap */
        rc = set_int(&o->tp_overlap, "merak-tp-overlap", value, 1, MERAK_MAX_SUB_BATCHES, err, errlen);
        break;
    case MERAK_OPT_SCHEDULE: {
        merak_schedule_kind k;
        int valid = value ? merak_schedule_parse(value, &k) : -1;
        rc = set_word(o->schedule, sizeof o->schedule, "merak-schedule", value, valid, merak_schedule_names(),
                      err, errlen);
        break;
    }
    case MERAK_OPT_RECOMPUTE: {
        merak_recompute r;
        int valid = value ? merak_recompute_parse(value, &r, NULL, 0) : -1;
        rc = set_word(o->recompute, sizeof o->recompute, "merak-recompute", value, valid,
                      merak_recompute_names(), err, errlen);
        break;
    }
    case MERAK_OPT_BIND: {
        int b = one_of(value, binds);
        if (b < 0)
            return merak_errf(err, errlen, "invalid --merak-bind value '%s' (expected closest or none)",
                        value ? value : "");
        o->bind = b;
        rc = 0;
        break;
    }
    case MERAK_OPT_VERBOSE: o->verbose = 1; rc = 0; break;
    default: return merak_errf(err, errlen, "unknown option number %d", which);
    }
    if (rc == 0)
        o->given = 1;
    return rc;
}

int merak_spank_site_arg(merak_spank_site *s, const char *arg, char *err, size_t errlen)
{
    const char *eq = arg ? strchr(arg, '=') : NULL;
    if (!eq)
        return merak_errf(err, errlen, "plugstack.conf argument '%s' is not KEY=VALUE (bind, max_tp, topology, nics)",
                    arg ? arg : "");
    size_t klen = (size_t)(eq - arg);
    const char *v = eq + 1;
    if (klen == 4 && strncmp(arg, "bind", 4) == 0) {
        int b = one_of(v, binds);
        if (b < 0)
            return merak_errf(err, errlen, "plugstack.conf: bind=%s (expected closest or none)", v);
        s->bind = b;
    } else if (klen == 6 && strncmp(arg, "max_tp", 6) == 0) {
        long m = positive(v, 1 << 16);
        if (m < 0)
            return merak_errf(err, errlen, "plugstack.conf: max_tp=%s (expected a whole number >= 1)", v);
        s->max_tp = (int)m;
    } else if (klen == 8 && strncmp(arg, "topology", 8) == 0) {
        if (!*v || strlen(v) >= sizeof s->topology)
            return merak_errf(err, errlen, "plugstack.conf: topology= needs an hwloc XML path (under %zu bytes)",
                        sizeof s->topology);
        snprintf(s->topology, sizeof s->topology, "%s", v);
    } else if (klen == 4 && strncmp(arg, "nics", 4) == 0) {
        if (!*v || strlen(v) >= sizeof s->nics)
            return merak_errf(err, errlen, "plugstack.conf: nics= needs a NIC list such as mlx5_0,mlx5_1 or ^mlx5_4");
        snprintf(s->nics, sizeof s->nics, "%s", v);
    } else {
        return merak_errf(err, errlen, "unknown plugstack.conf argument '%.*s' (bind, max_tp, topology, nics)",
                    (int)klen, arg);
    }
    return 0;
}

int merak_spank_resolve(const merak_spank_opts *o, const merak_spank_site *s, int ntasks, int *dp,
                        int *tp, int *pp, char *err, size_t errlen)
{
    int t = o->tp ? o->tp : 1, p = o->pp ? o->pp : 1;
    if (ntasks < 1)
        return merak_errf(err, errlen, "the step has no tasks");
    if (s->max_tp && t > s->max_tp)
        return merak_errf(err, errlen, "--merak-tp=%d is above this site's limit of %d (max_tp in plugstack.conf)", t,
                    s->max_tp);
    long tpp = (long)t * p;
    if (o->dp) {
        if ((long)o->dp * tpp != ntasks)
            return merak_errf(err, errlen,
                        "dp*tp*pp = %d*%d*%d = %ld, but the step has %d tasks; use srun -n %ld or change --merak-dp",
                        o->dp, t, p, (long)o->dp * tpp, ntasks, (long)o->dp * tpp);
        *dp = o->dp;
    } else {
        if (ntasks % tpp)
            return merak_errf(err, errlen, "the step's %d tasks are not divisible by tp*pp = %d*%d = %ld; use srun -n %ld",
                        ntasks, t, p, tpp, tpp * (ntasks / tpp + 1));
        *dp = (int)(ntasks / tpp);
    }
    *tp = t;
    *pp = p;
    return 0;
}
