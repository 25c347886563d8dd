/*
 * trace.c - a rank's timeline in memory (see trace.h).
 */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "trace.h"

const char *merak_trace_kind_name(int kind)
{
    switch (kind) {
    case MERAK_TRACE_TP_ALLREDUCE: return "TP_ALLREDUCE";
    case MERAK_TRACE_STEP_ALLREDUCE: return "STEP_ALLREDUCE";
    default: return merak_instr_name((merak_instr_kind)kind);
    }
}

int merak_trace_nested(int kind)
{
    return kind == MERAK_TRACE_TP_ALLREDUCE || kind == MERAK_TRACE_STEP_ALLREDUCE;
}

merak_track merak_trace_track(int kind)
{
    switch (kind) {
    case MERAK_I_LOAD:
    case MERAK_I_FWD:
    case MERAK_I_RECOMPUTE:
    case MERAK_I_BWD:
    case MERAK_I_BWD_INPUT:
    case MERAK_I_BWD_WEIGHT:
    case MERAK_I_OPTIMIZER_STEP: return MERAK_TRACK_COMPUTE;
    default: return MERAK_TRACK_COMM;
    }
}

int merak_trace_kind_find(const char *name)
{
    for (int k = 0; name && k < MERAK_TRACE_KINDS_; k++)
        if (strcmp(merak_trace_kind_name(k), name) == 0)
            return k;
    return -1;
}

void merak_trace_add(merak_trace *t, int lane, int kind, int mb, int chunk, double start, double end)
{
    if (t->failed)
        return;
    if (merak_grow((void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev) < 0) {
        t->failed = 1;
        return;
    }
    t->ev[t->n++] = (merak_trace_event){start - t->origin, end - t->origin, kind, mb, chunk, t->step, lane};
}

void merak_trace_free(merak_trace *t)
{
    free(t->ev);
    memset(t, 0, sizeof *t);
}
