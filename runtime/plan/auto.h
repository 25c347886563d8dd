/*
 * auto.h - the layout search merak-plan --auto and merak-train --auto
 * share, so the same question gets the same answer from both: every
 * dp x tp x pp of a job's ranks with tp inside a node, every schedule,
 * recomputation policy and ZeRO setting the question leaves open, each
 * planned by layout.h's memory and step model; the fastest that fits and
 * its runners-up.
 *
 * Every layout's memory and a lower bound of its step come first (no
 * simulation); then the fitting ones are simulated in the order of their
 * bounds until no bound can beat the MERAK_AUTO_SHOWN-th fastest step: the
 * same answer as simulating them all.  Deterministic: every rank of a job
 * that asks it alone gets the same layout, with no communication.
 */
#ifndef MERAK_AUTO_H
#define MERAK_AUTO_H

#include <stddef.h>

#include "device.h"
#include "layout.h"

enum { MERAK_AUTO_SHOWN = 6 };   /* the fastest and its runners-up */

typedef struct merak_auto_query {
    int gpus;                    /* the job's ranks */
    int gpus_per_node;           /* ranks per node (at most gpus, dividing it): tp stays inside one */
    int micro_batch;             /* sequences per micro-batch: the graph's batch */
    long global_batch;           /* sequences per step over all replicas */
    /* What the asker fixed; 0 (or NULL, or -1 where said) is searched. */
    int dp, tp, pp;
    int schedule;                /* a merak_schedule_kind, or -1 */
    int virtual_stages;          /* interleaved's chunks per stage (0: 2) */
    int layers;                  /* > 0: interleaved's chunks per stage must divide this many
                                  * transformer layers (merak-train's rule) */
    const char *recompute;       /* a policy (policy.h); NULL: none, stage-aware and full */
    int zero;                    /* 0 or 1; -1: both where there is a dp group to shard over */
    int bf16;                    /* plan --dtype bf16 (merak_layout.bf16) */
    int float_storage;           /* ... in float storage (merak_layout.float_storage) */
    const char *partition;       /* the partition method (partition.h); NULL: autopipe */
    const merak_tp_rule *rules;  /* tensor-parallel rules over the graph's own, or NULL */
    int nrules;
} merak_auto_query;

typedef struct merak_auto_choice {
    /* The layout, with the stage cut the search made (starts and bounds,
     * owned by the result); plan it with merak_layout_plan for its stages
     * and memory (skip_above 0: simulated). */
    merak_layout L;
    const char *recompute;       /* the policy's name (the query's, or a static one) */
    double step, tokens_per_s, mfu;
    double peak;                 /* bytes its fullest rank holds */
} merak_auto_choice;

typedef struct merak_auto_result {
    size_t tried;                /* layouts that can run (memory and bound planned) */
    size_t fitting;              /* of which fit in the device's memory */
    size_t simulated;            /* of which were simulated */
    int count;                   /* choices made: 0 when none fits */
    merak_auto_choice choice[MERAK_AUTO_SHOWN];   /* the fastest first */
    /* count 0: the least memory (bytes) a layout tried needs, or 0 when no
     * layout of the ranks can run the question at all (a usage error) */
    double leanest;
} merak_auto_result;

/* Searches the layouts of g (built for one micro-batch: the query's
 * micro_batch) on device d that the query leaves open, into r (free with
 * merak_auto_result_free, also after an error).  0 (r->count 0: nothing
 * fits); MERAK_USAGE with one line in err for a query that cannot be
 * asked (ranks per node, a policy name); MERAK_FAILED with err otherwise. */
int merak_layout_auto(const merak_graph *g, const merak_auto_query *q, const merak_device *d, merak_auto_result *r,
                      char *err, size_t errlen);
void merak_auto_result_free(merak_auto_result *r);

#endif /* MERAK_AUTO_H */
