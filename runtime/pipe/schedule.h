/*
 * schedule.h - pipeline schedules as per-stage instruction lists, and the
 * simulator that checks them before any process runs one (DESIGN.md s. 7).
 *
 * A generator emits, for each stage, the list of instructions that stage
 * runs for one optimizer step of M micro-batches.  One executor runs any
 * list; the simulator runs all stages' lists together against an abstract
 * network and proves a schedule deadlock-free, in dependency order, and
 * within its activation-memory bound.
 */
#ifndef MERAK_SCHEDULE_H
#define MERAK_SCHEDULE_H

#include <stddef.h>

typedef enum merak_instr_kind {
    MERAK_I_LOAD,          /* read micro-batch mb's inputs (first stage: ids; last: targets) */
    MERAK_I_RECV_ACT,      /* post the receive of mb's activation from stage-1 */
    MERAK_I_WAIT_ACT,      /* wait for that receive */
    MERAK_I_FWD,           /* forward of mb */
    MERAK_I_SEND_ACT,      /* post the send of mb's activation to stage+1 */
    MERAK_I_RECV_GRAD,     /* post the receive of mb's output gradient from stage+1 */
    MERAK_I_WAIT_GRAD,     /* wait for that receive */
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
} merak_instr;

typedef enum merak_schedule_kind { MERAK_SCHEDULE_GPIPE, MERAK_SCHEDULE_1F1B } merak_schedule_kind;

typedef struct merak_schedule {
    int stages, stage, micro_batches;
    merak_instr *instr;
    int n;
    int nslots;            /* activation slots this stage needs (peak in-flight micro-batches) */
} merak_schedule;

const char *merak_instr_name(merak_instr_kind k);
/* "gpipe" / "1f1b" -> kind; returns 0 or -1 for an unknown name.  The
 * names for messages: merak_schedule_names() (merak.h). */
int merak_schedule_parse(const char *name, merak_schedule_kind *kind);

/* Builds stage `stage`'s list.  1F1B needs micro_batches >= stages.
 * Returns 0, or -1 with one line in err. */
int merak_schedule_build(merak_schedule_kind kind, int stages, int stage, int micro_batches,
                         merak_schedule *out, char *err, size_t errlen);
void merak_schedule_free(merak_schedule *s);

/* Runs all stages' lists together.  Sends complete when the matching
 * receive is posted (rendezvous) or immediately (eager), both are checked;
 * waits block.  Checks: no deadlock; every mb's FWD after its LOAD/activation
 * arrives and before its SEND_ACT; BWD after its gradient arrives (or its
 * FWD on the last stage) and before SEND_GRAD; every mb forwarded and
 * backwarded exactly once per stage; slots never hold two live micro-batches;
 * REDUCE/OPTIMIZER_STEP last.  Fills peak[stage] with the most micro-batches
 * whose activations were live at once, and *ticks with the simulated length
 * (unit-time FWD and BWD, free communication).  Returns 0 or -1 with err. */
int merak_schedule_simulate(const merak_schedule *stages, int nstages, int *peak, int *ticks,
                            char *err, size_t errlen);

#endif /* MERAK_SCHEDULE_H */
