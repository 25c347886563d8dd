/*
 * spank_args.h - the SPANK plugin's option and plugstack-argument parsing,
 * kept free of Slurm so that it is unit-tested and fuzzed on its own.
 */
#ifndef MERAK_SPANK_ARGS_H
#define MERAK_SPANK_ARGS_H

#include <stddef.h>

/* The plugin's options, as the `val` of their spank_option entries. */
enum merak_spank_opt {
    MERAK_OPT_DP = 1, MERAK_OPT_TP, MERAK_OPT_PP, MERAK_OPT_MICROBATCHES, MERAK_OPT_SCHEDULE,
    MERAK_OPT_RECOMPUTE, MERAK_OPT_BIND, MERAK_OPT_VERBOSE, MERAK_OPT_VIRTUAL_STAGES, MERAK_OPT_TP_OVERLAP
};

enum merak_spank_bind { MERAK_BIND_UNSET = -1, MERAK_BIND_NONE = 0, MERAK_BIND_CLOSEST = 1 };

/* What the user asked for (0, "" or MERAK_BIND_UNSET: not given). */
typedef struct merak_spank_opts {
    int dp, tp, pp, microbatches;
    char schedule[16];          /* a schedule name (runtime/pipe/policy.h) */
    int virtual_stages;         /* interleaved: model chunks per stage (2 to MERAK_MAX_CHUNKS) */
    int tp_overlap;             /* sub-batches per micro-batch (1 to MERAK_MAX_SUB_BATCHES) */
    char recompute[32];         /* a recomputation policy (runtime/pipe/policy.h) */
    int bind;                   /* enum merak_spank_bind */
    int verbose;
    int given;                  /* any --merak-* option given: the plugin is active */
} merak_spank_opts;

/* The site's plugstack.conf arguments. */
typedef struct merak_spank_site {
    int bind;                   /* default policy (closest unless bind=none) */
    int max_tp;                 /* 0: no limit */
    char topology[1024];        /* hwloc XML used instead of the live node, or "" */
    char nics[256];             /* NCCL_IB_HCA-style NIC selection, or "" */
} merak_spank_site;

void merak_spank_opts_init(merak_spank_opts *o);
void merak_spank_site_init(merak_spank_site *s);

/* Applies --<option>=value (value NULL for a flag).  A later value
 * replaces an earlier one, as with Slurm's own options: sbatch's command
 * line over the script's #SBATCH lines, an inner srun's over its job's.
 * Returns 0, or -1 with one line in err naming the option and what it
 * accepts (the earlier value then stays). */
int merak_spank_set_option(merak_spank_opts *o, int which, const char *value, char *err, size_t errlen);

/* Applies one plugstack.conf argument ("bind=none", "max_tp=8",
 * "topology=/etc/merak/node.xml", "nics=^mlx5_4").  Returns 0 or -1 with err. */
int merak_spank_site_arg(merak_spank_site *s, const char *arg, char *err, size_t errlen);

/* Checks the degrees against the step's ntasks and the site's limits and
 * fills in dp (ntasks/(tp*pp) when not given), tp and pp (1 when not given).
 * Returns 0, or -1 with err saying which number or srun flag to change. */
int merak_spank_resolve(const merak_spank_opts *o, const merak_spank_site *s, int ntasks, int *dp,
                        int *tp, int *pp, char *err, size_t errlen);

#endif /* MERAK_SPANK_ARGS_H */
