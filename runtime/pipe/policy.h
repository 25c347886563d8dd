/*
 * policy.h - the names a user picks a pipeline schedule and a recomputation
 * policy by, parsed in one place for merak-train, merak-plan, the library
 * and the Slurm plugin (which compiles this file too, so `srun
 * --merak-schedule/--merak-recompute` accept exactly what merak-train does).
 * Depends on nothing but the error formatter and the name tables.
 */
#ifndef MERAK_POLICY_H
#define MERAK_POLICY_H

#include <stddef.h>

#include "schedule_kind.h"

/* "gpipe", "1f1b", "scp", "zb-h1", "interleaved" -> kind; 0, or -1 for
 * another name.  The names for messages: merak_schedule_names() ("gpipe,
 * 1f1b, scp, zb-h1 or interleaved"). */
int merak_schedule_parse(const char *name, merak_schedule_kind *kind);
const char *merak_schedule_name(merak_schedule_kind kind);
const char *merak_schedule_names(void);
/* Model chunks per pipeline stage: `asked` if above 0, else the
 * schedule's default (2 for interleaved, 1 for the others). */
int merak_virtual_stages(merak_schedule_kind kind, int asked);

/* The most sub-batches per micro-batch sub-pipelined tensor parallelism
 * (--tp-overlap) takes. */
#define MERAK_MAX_SUB_BATCHES 64

/* Which layers a pipeline stage recomputes in the backward instead of
 * keeping their activations from the forward.  Layers are a stage's
 * segments between cut points (where one activation crosses). */
typedef enum merak_recompute_kind {
    MERAK_RECOMPUTE_NONE,        /* keep everything */
    MERAK_RECOMPUTE_FULL,        /* every stage recomputes all its layers */
    MERAK_RECOMPUTE_STAGE_AWARE, /* Merak's: stage 0 the fraction r0, later stages less, last none */
    MERAK_RECOMPUTE_BUDGET,      /* per stage, the fewest layers that keep activations under GiB */
} merak_recompute_kind;

typedef struct merak_recompute {
    merak_recompute_kind kind;
    double value;                /* stage-aware: r0 in [0, 1]; budget: GiB > 0 */
} merak_recompute;

#define MERAK_RECOMPUTE_R0_DEFAULT 0.9

/* "none", "full", "stage-aware", "stage-aware=R0", "budget=GB".  0, or -1
 * with one line in err ("recompute 'x' is not none, full, ..."). */
int merak_recompute_parse(const char *s, merak_recompute *out, char *err, size_t errlen);
const char *merak_recompute_names(void);

/* Stage-aware fraction of its layers stage s of S recomputes, given r0:
 * (1 - r_s) (S - 1 - s) = (1 - r0) (S - 1), clamped to [0, 1]; the last
 * stage 0. */
double merak_recompute_stage_aware(double r0, int S, int s);

#endif /* MERAK_POLICY_H */
