/*
 * trace.c - a rank's timeline in memory (see trace.h).
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "grow.h"
#include "kernels.h"
#include "trace.h"

const char *merak_trace_kind_name(int kind)
{
    switch (kind) {
    case MERAK_TRACE_TP_ALLREDUCE: return "TP_ALLREDUCE";
    case MERAK_TRACE_STEP_ALLREDUCE: return "STEP_ALLREDUCE";
    case MERAK_TRACE_DP_BUCKETS: return "DP_BUCKETS";
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
    case MERAK_TRACE_DP_BUCKETS: return MERAK_TRACK_FLIGHT;
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
    free(t->marked);
    memset(t, 0, sizeof *t);
}

void merak_trace_device_begin(merak_trace *t, const merak_kernels *k)
{
    if (!t)
        return;
    t->dev = NULL;
    t->nmarked = 0;
    if (!k || !k->mark || !k->mark_seconds || !k->marks_clear || k->synchronize() < 0)
        return;
    k->marks_clear();
    t->dev0 = merak_now();
    if (k->mark() == 0)
        t->dev = k;
}

merak_stamp merak_trace_stamp(merak_trace *t)
{
    if (!t)
        return (merak_stamp){0, -1};
    return (merak_stamp){merak_now(), t->dev ? t->dev->mark() : -1};
}

void merak_trace_add_stamped(merak_trace *t, int lane, int kind, int mb, int chunk, merak_stamp start,
                             merak_stamp end)
{
    if (!t)
        return;
    const size_t n = t->n;
    merak_trace_add(t, lane, kind, mb, chunk, start.host, end.host);
    if (t->n == n || !t->dev || start.mark < 0)
        return;
    if (merak_grow((void **)&t->marked, &t->cap_marked, t->nmarked + 1, sizeof *t->marked) < 0)
        return;   /* that event keeps the host's times */
    t->marked[t->nmarked++] = (merak_trace_marked){n, start.mark, end.mark};
}

void merak_trace_device_end(merak_trace *t)
{
    if (!t || !t->dev)
        return;
    for (size_t i = 0; i < t->nmarked; i++) {
        const merak_trace_marked *m = &t->marked[i];
        merak_trace_event *v = &t->ev[m->ev];
        const double a = t->dev->mark_seconds(0, m->m0), b = m->m1 < 0 ? 0 : t->dev->mark_seconds(0, m->m1);
        if (a < 0 || (m->m1 >= 0 && b < a))
            continue;
        v->start = t->dev0 + a - t->origin;
        v->end = m->m1 >= 0 ? t->dev0 + b - t->origin : v->end > v->start ? v->end : v->start;
    }
    t->dev = NULL;
    t->nmarked = 0;
}
