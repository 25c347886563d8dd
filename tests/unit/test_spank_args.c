/*
 * test_spank_args.c - the SPANK plugin's option and plugstack-argument
 * parsing, and the degree checks srun makes before launch; then a fuzz
 * loop of random values (no crash, no accepted garbage).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../spank/spank_args.h"
#include "tap.h"

static int opt(merak_spank_opts *o, int which, const char *v, char *err)
{
    return merak_spank_set_option(o, which, v, err, 256);
}

static void test_options(void)
{
    merak_spank_opts o;
    char err[256];
    merak_spank_opts_init(&o);
    tap_ok(!o.given, "no option given: plugin inactive");
    tap_ok(opt(&o, MERAK_OPT_TP, "4", err) == 0 && o.tp == 4 && o.given, "--merak-tp=4");
    tap_ok(opt(&o, MERAK_OPT_TP, "4", err) == 0, "the same value twice (Slurm calls back twice) is fine");
    tap_ok(opt(&o, MERAK_OPT_TP, "2", err) == 0 && o.tp == 2,
           "a later value wins (sbatch's command line over #SBATCH lines)");
    tap_ok(opt(&o, MERAK_OPT_TP, "x", err) < 0 && o.tp == 2, "a bad later value is refused and changes nothing");
    const char *bad[] = {"abc", "0", "-2", "", "3x", " 3", "1e3", "99999999999999999999", "+4", NULL};
    for (int i = 0; bad[i]; i++) {
        merak_spank_opts_init(&o);
        tap_ok(opt(&o, MERAK_OPT_PP, bad[i], err) < 0 && strstr(err, "--merak-pp") && !o.given,
               "--merak-pp='%s' refused: %s", bad[i], err);
    }
    merak_spank_opts_init(&o);
    tap_ok(opt(&o, MERAK_OPT_DP, NULL, err) < 0, "a number option without value is refused");
    tap_ok(opt(&o, MERAK_OPT_SCHEDULE, "1f1b", err) == 0 && strcmp(o.schedule, "1f1b") == 0, "--merak-schedule=1f1b");
    tap_ok(opt(&o, MERAK_OPT_SCHEDULE, "zb", err) < 0 && strstr(err, "gpipe, 1f1b, scp, zb-h1 or interleaved"),
           "unknown schedule: %s", err);
    tap_ok(opt(&o, MERAK_OPT_RECOMPUTE, "stage-aware", err) == 0, "--merak-recompute=stage-aware");
    tap_ok(opt(&o, MERAK_OPT_RECOMPUTE, "some", err) < 0 && strstr(err, "none, full, stage-aware[=R0] or budget=GB"),
           "unknown recompute refused: %s", err);
    /* the same set as merak-train: every policy form, with its value */
    merak_spank_opts_init(&o);
    tap_ok(opt(&o, MERAK_OPT_RECOMPUTE, "budget=2.5", err) == 0 && strcmp(o.recompute, "budget=2.5") == 0,
           "--merak-recompute=budget=2.5");
    merak_spank_opts_init(&o);
    tap_ok(opt(&o, MERAK_OPT_RECOMPUTE, "stage-aware=0.75", err) == 0, "--merak-recompute=stage-aware=0.75");
    tap_ok(opt(&o, MERAK_OPT_RECOMPUTE, "stage-aware=1.5", err) < 0, "stage-aware=1.5 refused: %s", err);
    merak_spank_opts_init(&o);
    tap_ok(opt(&o, MERAK_OPT_SCHEDULE, "zb-h1", err) == 0 && opt(&o, MERAK_OPT_SCHEDULE, "scp", err) == 0 &&
               strcmp(o.schedule, "scp") == 0, "--merak-schedule=zb-h1, then scp: scp");
    tap_ok(opt(&o, MERAK_OPT_BIND, "none", err) == 0 && o.bind == MERAK_BIND_NONE, "--merak-bind=none");
    tap_ok(opt(&o, MERAK_OPT_BIND, "closest", err) == 0 && o.bind == MERAK_BIND_CLOSEST, "--merak-bind changed: the later wins");
    tap_ok(opt(&o, MERAK_OPT_MICROBATCHES, "16", err) == 0 && o.microbatches == 16, "--merak-microbatches=16");
    tap_ok(opt(&o, MERAK_OPT_VERBOSE, NULL, err) == 0 && o.verbose, "--merak-verbose");
    /* merak-train's range for --virtual-stages with interleaved: 2 to 64 */
    tap_ok(opt(&o, MERAK_OPT_VIRTUAL_STAGES, "4", err) == 0 && o.virtual_stages == 4, "--merak-virtual-stages=4");
    tap_ok(opt(&o, MERAK_OPT_VIRTUAL_STAGES, "2", err) == 0 && o.virtual_stages == 2,
           "--merak-virtual-stages changed: the later wins");
    const char *bad_v[] = {"1", "65", "0", "x", NULL};
    for (int i = 0; bad_v[i]; i++) {
        merak_spank_opts_init(&o);
        tap_ok(opt(&o, MERAK_OPT_VIRTUAL_STAGES, bad_v[i], err) < 0 && strstr(err, "from 2 to 64") && !o.given,
               "--merak-virtual-stages=%s refused: %s", bad_v[i], err);
    }
    /* merak-train's range for --tp-overlap: 1 to 64 */
    merak_spank_opts_init(&o);
    tap_ok(opt(&o, MERAK_OPT_TP_OVERLAP, "4", err) == 0 && o.tp_overlap == 4 && o.given, "--merak-tp-overlap=4");
    tap_ok(opt(&o, MERAK_OPT_TP_OVERLAP, "2", err) == 0 && o.tp_overlap == 2,
           "--merak-tp-overlap changed: the later wins");
    const char *bad_k[] = {"0", "65", "-1", "2x", "", NULL};
    for (int i = 0; bad_k[i]; i++) {
        merak_spank_opts_init(&o);
        tap_ok(opt(&o, MERAK_OPT_TP_OVERLAP, bad_k[i], err) < 0 && strstr(err, "from 1 to 64") && !o.given,
               "--merak-tp-overlap=%s refused: %s", bad_k[i], err);
    }
    tap_ok(opt(&o, 99, "1", err) < 0, "unknown option number refused");
}

static void test_site(void)
{
    merak_spank_site s;
    char err[256];
    merak_spank_site_init(&s);
    tap_ok(s.bind == MERAK_BIND_CLOSEST && s.max_tp == 0, "site defaults: bind closest, no tp limit");
    tap_ok(merak_spank_site_arg(&s, "bind=none", err, sizeof err) == 0 && s.bind == MERAK_BIND_NONE, "bind=none");
    tap_ok(merak_spank_site_arg(&s, "max_tp=8", err, sizeof err) == 0 && s.max_tp == 8, "max_tp=8");
    tap_ok(merak_spank_site_arg(&s, "topology=/x/node.xml", err, sizeof err) == 0 &&
               strcmp(s.topology, "/x/node.xml") == 0, "topology=FILE");
    tap_ok(merak_spank_site_arg(&s, "nics=^mlx5_4", err, sizeof err) == 0 && strcmp(s.nics, "^mlx5_4") == 0,
           "nics=^mlx5_4");
    const char *bad[] = {"bogus=1", "bind=fast", "max_tp=0", "max_tp=x", "topology=", "check", "=3", "nics=", NULL};
    for (int i = 0; bad[i]; i++)
        tap_ok(merak_spank_site_arg(&s, bad[i], err, sizeof err) < 0, "plugstack '%s' refused: %s", bad[i], err);
}

static void test_resolve(void)
{
    merak_spank_opts o;
    merak_spank_site s;
    char err[256];
    int dp, tp, pp;
    merak_spank_opts_init(&o);
    merak_spank_site_init(&s);
    o.tp = 4, o.pp = 2, o.given = 1;
    tap_ok(merak_spank_resolve(&o, &s, 16, &dp, &tp, &pp, err, sizeof err) == 0 && dp == 2 && tp == 4 && pp == 2,
           "16 tasks, tp 4, pp 2: dp 2");
    tap_ok(merak_spank_resolve(&o, &s, 12, &dp, &tp, &pp, err, sizeof err) < 0 && strstr(err, "srun -n 16"),
           "12 tasks not divisible by 8: %s", err);
    o.dp = 3;
    tap_ok(merak_spank_resolve(&o, &s, 16, &dp, &tp, &pp, err, sizeof err) < 0 && strstr(err, "3*4*2 = 24"),
           "product differs from tasks: %s", err);
    o.dp = 0;
    s.max_tp = 2;
    tap_ok(merak_spank_resolve(&o, &s, 16, &dp, &tp, &pp, err, sizeof err) < 0 && strstr(err, "limit of 2"),
           "site max_tp: %s", err);
    merak_spank_opts_init(&o);
    o.given = 1;
    merak_spank_site_init(&s);
    tap_ok(merak_spank_resolve(&o, &s, 5, &dp, &tp, &pp, err, sizeof err) == 0 && dp == 5 && tp == 1 && pp == 1,
           "only --merak-verbose: pure data parallelism");
}

/* Random bytes as option and plugstack values: every call returns 0 or -1
 * with a message; an accepted number is in range. */
static void fuzz(void)
{
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        char v[24];
        int n = (int)(x % 12);
        for (int k = 0; k < n; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            v[k] = (char)(x % 3 == 0 ? '0' + x % 10 : 1 + x % 127);
        }
        v[n] = 0;
        merak_spank_opts o;
        merak_spank_site s;
        merak_spank_opts_init(&o);
        merak_spank_site_init(&s);
        char err[128] = "";
        int which = 1 + (int)(x % 8);
        int rc = merak_spank_set_option(&o, which, v, err, sizeof err);
        if (rc == 0 && (o.dp < 0 || o.tp < 0 || o.pp < 0 || o.microbatches < 0))
            bad++;
        if (rc < 0 && !err[0])
            bad++;
        err[0] = 0;
        if (merak_spank_site_arg(&s, v, err, sizeof err) < 0 && !err[0])
            bad++;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    }
    tap_ok(bad == 0, "fuzz: 20000 random values, every refusal has a message (%d bad)", bad);
}

int main(void)
{
    test_options();
    test_site();
    test_resolve();
    fuzz();
    return tap_done();
}
