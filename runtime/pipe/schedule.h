/*
 * schedule.h - pipeline schedules as per-stage instruction lists, and the
 * simulator that checks and times them before any process runs one
 * (DESIGN.md s. 7).
 *
 * A generator emits, for each stage, the list of instructions that stage
 * runs for one optimizer step of M micro-batches.  One executor runs any
 * list; the simulator runs all stages' lists together against an abstract
 * network and proves a schedule deadlock-free, in dependency order and
 * within its slots, and gives its makespan, bubble and activation peaks
 * under per-stage costs.
 */
#ifndef MERAK_SCHEDULE_H
#define MERAK_SCHEDULE_H

#include <stddef.h>

#include "policy.h"

typedef enum merak_instr_kind {
    MERAK_I_LOAD,          /* read micro-batch mb's inputs (first stage: ids; last: targets) */
    MERAK_I_RECV_ACT,      /* post the receive of mb's activation from stage-1 */
    MERAK_I_WAIT_ACT,      /* wait for that receive */
    MERAK_I_FWD,           /* forward of mb (a recomputing stage drops the activations) */
    MERAK_I_SEND_ACT,      /* post the send of mb's activation to stage+1 */
    MERAK_I_RECV_GRAD,     /* post the receive of mb's output gradient from stage+1 */
    MERAK_I_WAIT_GRAD,     /* wait for that receive */
    MERAK_I_RECOMPUTE,     /* re-run mb's dropped forward before its backward */
    MERAK_I_BWD,           /* backward of mb (input and weight parts together) */
    MERAK_I_BWD_INPUT,     /* input-gradient part only (zero-bubble schedules) */
    MERAK_I_BWD_WEIGHT,    /* weight-gradient part only */
    MERAK_I_SEND_GRAD,     /* post the send of mb's input gradient to stage-1 */
    MERAK_I_WAIT_SENDS,    /* wait for every send posted so far */
    MERAK_I_REDUCE_TIED,   /* all-reduce tied-weight gradients (first and last stage) */
    MERAK_I_REDUCE_DP,     /* finish the data-parallel gradient reduction */
    MERAK_I_OPTIMIZER_STEP,
    MERAK_I_COUNT_
} merak_instr_kind;

typedef struct merak_instr {
    merak_instr_kind kind;
    int mb;                /* micro-batch, or -1 */
    int slot;              /* activation slot the micro-batch occupies on this stage, or -1 */
    int chunk;             /* model chunk of this stage it runs on (interleaved), else 0 */
} merak_instr;

/* The schedules (schedule_kind.h; names in policy.h):
 * gpipe: all forwards, then all backwards.
 * 1f1b: PipeDream-flush; a recomputing stage recomputes after the gradient
 *   arrived (inside the backward, as Megatron-LM and DeepSpeed do).
 * scp: Merak's shifted critical path: the last stage never recomputes; every
 *   recompute runs before the wait for its gradient (in the time the stage
 *   would idle); stage S-2 (S >= 3) runs Merak's extra warm-up forward.
 * zb-h1: zero bubble H1 (Qi et al. 2024): the backward split into its input
 *   and weight parts, stage s delaying up to s weight parts into the
 *   cool-down's bubbles; the most micro-batches in flight is 1f1b's (S).
 * interleaved: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): the
 *   model cut into S*V virtual stages, stage s holding chunks s, s+S, ...,
 *   s+(V-1)S (chunk c of stage s is virtual stage c*S+s; the last stage's
 *   chunk c sends to the first stage's chunk c+1).  Micro-batches go
 *   through in groups of S: the group's forwards on chunk 0, then chunk 1,
 *   ...; backwards the same from the last chunk (M not a multiple of S:
 *   the order for M rounded up, without the micro-batches past M).
 *   Warm-up of stage s: 2(S-s-1) + (V-1)S chunk forwards.  The bubble shrinks by V at the price
 *   of V times the messages and (1 + 1/V)S micro-batches' activations on
 *   the first stage.
 *
 * Micro-batch mb on chunk c is the list's unit c*M + mb; one chunk's units
 * run in micro-batch order, forwards and backwards. */

/* What to generate.  recompute[s] != 0: stage s drops its (recomputed
 * layers') activations after each forward and recomputes them before the
 * backward (scp ignores it on the last stage).  NULL: no stage does.  A
 * generator reads only its own stage's entry. */
typedef struct merak_schedule_spec {
    merak_schedule_kind kind;
    int stages, micro_batches;
    const unsigned char *recompute;
    int virtual_stages;    /* chunks per stage: interleaved >= 2; others 1 (0 counts as 1) */
} merak_schedule_spec;

/* Activation slots come chunk by chunk: chunk c's are chunk_slots[c] slots
 * from slot_base(c) = chunk_slots[0] + ... + chunk_slots[c-1], and
 * micro-batch mb on chunk c uses slot slot_base(c) + mb % chunk_slots[c]
 * (MERAK_MAX_CHUNKS: schedule_kind.h). */

typedef struct merak_schedule {
    int stages, stage, micro_batches;
    int chunks;            /* model chunks on this stage (V) */
    merak_instr *instr;
    int n;
    int nslots;            /* activation slots this stage needs (peak in-flight micro-batches) */
    int chunk_slots[MERAK_MAX_CHUNKS]; /* [chunks] of them per chunk */
    int recompute;         /* 1: FWD drops activations, RECOMPUTE restores them */
    int npool;             /* recompute buffers held at once (0 without recompute) */
    int forward_only;      /* evaluation (merak_schedule_build_eval): no backward */
} merak_schedule;

const char *merak_instr_name(merak_instr_kind k);

/* Where a transfer of stage p of S goes or comes from: SEND_ACT to, and
 * RECV_GRAD from, the next stage; RECV_ACT from, and SEND_GRAD to, the
 * previous one (the last stage's next is the first, and the reverse).
 * Sets *peer and *chunk, the chunk of the receiving stage the message is
 * for (chunk c's activation goes to the next stage's chunk c, or from the
 * last stage to the first stage's chunk c+1; gradients come back the same
 * way), and returns 1 for a send, 0 for a receive; -1 for an instruction
 * that moves nothing.  The executor (stage_run.c) and the tests route by
 * it. */
int merak_instr_route(const merak_instr *in, int p, int S, int *peer, int *chunk);

/* Checks the spec (stage and micro-batch counts; every schedule but gpipe
 * needs M >= S; interleaved needs S >= 2 and 2 <= V <= MERAK_MAX_CHUNKS, the
 * others V = 1).  0, or -1 with one line in err. */
int merak_schedule_check(const merak_schedule_spec *sp, char *err, size_t errlen);

/* The most units (stages x micro-batches x chunks) the lists of every
 * stage may hold together, for the simulator and whoever builds them all:
 * at most about 5 s and 400 MB on one core. */
#define MERAK_SIM_MAX_UNITS (1 << 21)
/* merak_schedule_check, and every stage's lists within MERAK_SIM_MAX_UNITS
 * (merak_schedule_build_all, the simulator's callers).  0, or -1 with one
 * line in err. */
int merak_schedule_check_all(const merak_schedule_spec *sp, char *err, size_t errlen);

/* Builds stage `stage`'s list.  Returns 0, or -1 with one line in err. */
int merak_schedule_build(const merak_schedule_spec *sp, int stage, merak_schedule *out, char *err,
                         size_t errlen);
/* The forward-only schedule (evaluation) of M micro-batches on the stage
 * whose training list is `train`, in its slots (micro-batch mb on chunk c
 * in slot slot_base(c) + mb % chunk_slots[c], as in training): per
 * micro-batch and chunk, in the same order on every stage, LOAD where the
 * model starts or ends, RECV_ACT and WAIT_ACT, FWD, SEND_ACT and the
 * WAIT_SENDS of its slot; then WAIT_SENDS.  No backward, no reduction, no
 * step.  0, or -1 with one line in err. */
int merak_schedule_build_eval(const merak_schedule *train, int M, merak_schedule *out, char *err,
                              size_t errlen);
/* Every stage's list into out[0..stages-1] (merak_schedule_check_all
 * first); on failure none is left built. */
int merak_schedule_build_all(const merak_schedule_spec *sp, merak_schedule *out, char *err,
                             size_t errlen);
void merak_schedule_free(merak_schedule *s);

/* Costs of one stage's (with chunks: one chunk's) instructions, per
 * micro-batch, in any time unit.  bwd is the whole backward; bwd_weight
 * its weight-gradient share (a split backward costs bwd - bwd_weight and
 * bwd_weight); comm is the time an activation or gradient it sends takes
 * to arrive. */
typedef struct merak_sim_costs {
    double fwd, bwd, bwd_weight, recompute, comm;
} merak_sim_costs;
/* forward 1, backward 2 (weight share 1), recompute 1, free communication */
#define MERAK_SIM_UNIT_COSTS ((merak_sim_costs){1, 2, 1, 1, 0})

typedef struct merak_sim_result {
    double makespan;       /* the step, first instruction to last */
    double bubble;         /* idle fraction of stages x makespan */
    int *peak;             /* [stages] if non-NULL: most micro-batches whose full
                            * activations were held at once (with V chunks, most
                            * chunk units: V of them make one micro-batch) */
    double *busy;          /* [stages] if non-NULL: compute time per stage */
    /* If non-NULL, called for every instruction that takes time, in start
     * order per stage (for timelines). */
    void (*on_compute)(void *ctx, int stage, const merak_instr *in, double start, double end);
    void *ctx;
} merak_sim_result;

/* Runs all stages' lists together.  costs: one per virtual stage,
 * [nstages * V], chunk c of stage i at c * nstages + i (without chunks:
 * [nstages]); NULL: unit costs for every stage, split evenly over its
 * chunks.  Sends complete when the matching receive is posted
 * (rendezvous) or immediately (eager), both are checked; waits block.
 * Checks: no deadlock; every mb's FWD after its LOAD/activation arrives and
 * before its SEND_ACT; RECOMPUTE only on a recomputing stage, after its FWD
 * and before its backward, which needs it; backward after its gradient
 * arrives (or its FWD on the last stage) and before SEND_GRAD; every mb
 * forwarded and backwarded exactly once per stage; slots never hold two
 * live micro-batches; recompute buffers within npool; REDUCE/OPTIMIZER_STEP
 * last.  A forward-only list (every stage's or none) owes each micro-batch
 * its forward and sends, and holds no backward instruction.  The rendezvous run's timing is reported (the stricter one).
 * Returns 0 or -1 with one line in err (a deadlock names every stuck
 * stage's instruction). */
int merak_schedule_simulate(const merak_schedule *stages, int nstages, const merak_sim_costs *costs,
                            merak_sim_result *res, char *err, size_t errlen);

#endif /* MERAK_SCHEDULE_H */
