/*
 * trace.h - a rank's timeline: every instruction it ran and the
 * collectives inside them, with start and end times, kept in memory
 * while the steps run (merak-train --trace).  The step loop merges the
 * ranks' timelines on rank 0 and writes them as one Chrome trace
 * (train/tracefile.c); merak-trace draws one.
 *
 * Each event belongs to a track: compute (LOAD, FWD, RECOMPUTE, the
 * backwards, OPTIMIZER_STEP) or communication (posting and waiting for
 * point-to-point transfers, the gradient reductions, and the collectives
 * that run inside a compute instruction and so overlap it in time).
 */
#ifndef MERAK_TRACE_H
#define MERAK_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* Event kinds: the instruction kinds, then the collectives that run
 * inside a compute instruction: the tensor-parallel all-reduces of a FWD or
 * BWD, and OPTIMIZER_STEP's sum of the loss and gradient norm over the
 * grid (where a stage waits for the slowest one). */
enum {
    MERAK_TRACE_TP_ALLREDUCE = MERAK_I_COUNT_,
    MERAK_TRACE_STEP_ALLREDUCE,
    MERAK_TRACE_KINDS_
};

typedef enum merak_track { MERAK_TRACK_COMPUTE, MERAK_TRACK_COMM } merak_track;

typedef struct merak_trace_event {
    double start, end;    /* seconds since the trace's origin */
    int32_t kind;         /* merak_instr_kind or MERAK_TRACE_* */
    int32_t mb;           /* micro-batch, or -1 */
    int32_t chunk;        /* model chunk of the stage (interleaved), else 0 */
    int32_t step;
    int32_t lane;         /* the row a picture draws it in (a recording rank: 0) */
} merak_trace_event;

typedef struct merak_trace {
    merak_trace_event *ev;
    size_t n, cap;
    double origin;        /* merak_now() at time 0 */
    int step;             /* stamped on the events added from now on */
    int failed;           /* out of memory: events were lost */
} merak_trace;

/* The kind's name ("FWD", "TP_ALLREDUCE"; "?" if unknown), its track, and
 * the kind a name belongs to (-1 if none). */
const char *merak_trace_kind_name(int kind);
merak_track merak_trace_track(int kind);
int merak_trace_nested(int kind);   /* 1: runs inside a compute instruction */
int merak_trace_kind_find(const char *name);

/* Records an event between two merak_now() readings (or any times, with
 * origin 0). */
void merak_trace_add(merak_trace *t, int lane, int kind, int mb, int chunk, double start, double end);
void merak_trace_free(merak_trace *t);

#endif /* MERAK_TRACE_H */
