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
 * grid (where a stage waits for the slowest one); then the data-parallel
 * gradient buckets in flight, from the first one's launch in the last
 * backward to the moment the rank saw the last one done (they overlap the
 * compute: that is their point). */
enum {
    MERAK_TRACE_TP_ALLREDUCE = MERAK_I_COUNT_,
    MERAK_TRACE_STEP_ALLREDUCE,
    MERAK_TRACE_DP_BUCKETS,
    MERAK_TRACE_KINDS_
};

/* A track is a thread of the Chrome trace (its tid). */
typedef enum merak_track { MERAK_TRACK_COMPUTE, MERAK_TRACK_COMM, MERAK_TRACK_FLIGHT } merak_track;

typedef struct merak_trace_event {
    double start, end;    /* seconds since the trace's origin */
    int32_t kind;         /* merak_instr_kind or MERAK_TRACE_* */
    int32_t mb;           /* micro-batch, or -1 */
    int32_t chunk;        /* model chunk of the stage (interleaved), else 0 */
    int32_t step;
    int32_t lane;         /* the row a picture draws it in (a recording rank: 0) */
} merak_trace_event;

struct merak_kernels;

/* An event waiting for its device times (merak_trace_device_end). */
typedef struct merak_trace_marked {
    size_t ev;            /* its index in ev */
    int m0, m1;           /* the backend's marks at its start and end */
} merak_trace_marked;

typedef struct merak_trace {
    merak_trace_event *ev;
    size_t n, cap;
    double origin;        /* merak_now() at time 0 */
    int step;             /* stamped on the events added from now on */
    int failed;           /* out of memory: events were lost */
    /* device time (merak_trace_device_begin): the backend whose marks
     * time this step's events, or NULL; the host's time of its mark 0 */
    const struct merak_kernels *dev;
    double dev0;
    merak_trace_marked *marked;
    size_t nmarked, cap_marked;
} merak_trace;

/* A moment on the trace's clock: the host's time and, while the trace
 * times a device, a mark on the device's stream (else -1). */
typedef struct merak_stamp {
    double host;
    int mark;
} merak_stamp;

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

/* Device time.  On a backend whose kernels run behind the host (a GPU:
 * kernels.h mark), the host's clock only says when work was queued.  For
 * one step, from device_begin (which waits for the device, then records
 * mark 0 as the host reads its clock) to device_end (after the device
 * has reached every mark: the step's synchronize), each event added with
 * stamps takes the times at which the device's stream reached its start
 * and its end: what the device waited for and worked on.  A host backend
 * (no mark), a NULL trace or a mark that fails keeps the host's times; an
 * end stamped without a mark keeps the host's time (what the host saw
 * finish), the start the device's (not before it). */
void merak_trace_device_begin(merak_trace *t, const struct merak_kernels *k);
void merak_trace_device_end(merak_trace *t);
/* now (t may be NULL: {0, -1}) */
merak_stamp merak_trace_stamp(merak_trace *t);
void merak_trace_add_stamped(merak_trace *t, int lane, int kind, int mb, int chunk, merak_stamp start,
                             merak_stamp end);

#endif /* MERAK_TRACE_H */
