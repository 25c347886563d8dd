/*
 * optim.c - AdamW (torch.optim.AdamW semantics) over a range of the
 * executor's flat parameter buffer, and global-norm gradient clipping.
 * The moments live in the executor's backend memory, next to the
 * parameters they update, and so does the list of spans a step runs over
 * (made once: each parameter's part of the range, cut into spans of at
 * most SPAN elements), so that a step is one kernel call.
 */
#include <stdlib.h>

#include "grow.h"
#include "train.h"

/* Elements of a span at most: enough blocks for a GPU to fill every
 * multiprocessor (GPT-2 124M: about 1900), few enough for a CPU thread to
 * take a cache's worth at once. */
#define SPAN 65536

struct merak_optim {
    merak_adamw_opts opts;
    const merak_kernels *k;
    size_t lo, hi;       /* the floats of the flat parameter buffer this state covers */
    float *m, *v;        /* moments of floats [lo, hi) */
    merak_adamw_span *spans; /* backend memory */
    int nspans;
    int t;               /* steps taken */
};

/* The spans of [lo, hi) in parameter order; NULL with *n = 0 if none,
 * or NULL and *n = -1 when out of memory. */
static merak_adamw_span *make_spans(const merak_graph *g, const merak_exec *e, size_t lo, size_t hi,
                                   int *n)
{
    size_t total;
    float *p0 = merak_exec_params_flat(e, &total);
    merak_adamw_span *sp = NULL;
    size_t cap = 0;
    int count = 0;
    *n = 0;
    for (int i = 0; i < merak_exec_num_params(e); i++) {
        /* the part of parameter i inside [lo, hi) */
        size_t a = (size_t)(merak_exec_param_data(e, i) - p0), b = a + merak_exec_param_elems(e, i);
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        /* Decay embeddings, heads and projections, never biases or norm gains. */
        const int decay = g->tensors[merak_exec_param_tensor(e, i)].ndim >= 2;
        for (; a < b; a += SPAN) {
            if (merak_grow((void **)&sp, &cap, (size_t)count + 1, sizeof *sp) < 0) {
                free(sp);
                *n = -1;
                return NULL;
            }
            sp[count].at = a;
            sp[count].m_at = a - lo;
            sp[count].n = b - a < SPAN ? b - a : SPAN;
            sp[count++].decay = decay;
        }
    }
    *n = count;
    return sp;
}

merak_optim *merak_optim_create(const merak_graph *g, const merak_exec *e,
                                const merak_adamw_opts *opts, size_t lo, size_t hi)
{
    merak_optim *o = calloc(1, sizeof *o);
    size_t n = hi > lo ? hi - lo : 0;
    if (!o)
        return NULL;
    o->opts = *opts;
    o->k = merak_exec_kernels(e);
    o->lo = lo;
    o->hi = hi;
    o->m = o->k->alloc((n ? n : 1) * sizeof *o->m);
    o->v = o->k->alloc((n ? n : 1) * sizeof *o->v);
    merak_adamw_span *spans = make_spans(g, e, lo, hi, &o->nspans);
    const size_t bytes = (o->nspans > 0 ? (size_t)o->nspans : 1) * sizeof *spans;
    o->spans = o->nspans >= 0 ? o->k->alloc(bytes) : NULL;
    if (!o->m || !o->v || !o->spans ||
        (o->nspans > 0 && o->k->copy(o->spans, spans, bytes, MERAK_COPY_H2D) < 0)) {
        free(spans);
        merak_optim_destroy(o);
        return NULL;
    }
    free(spans);
    return o;
}

void merak_optim_destroy(merak_optim *o)
{
    if (!o)
        return;
    o->k->free(o->m);
    o->k->free(o->v);
    o->k->free(o->spans);
    free(o);
}

float merak_clip_grads(merak_exec *e, double norm, float clip, size_t lo, size_t hi)
{
    if (clip <= 0)
        return 1.0f;
    float coef = (float)(clip / (norm + 1e-6));
    if (coef >= 1.0f)
        return 1.0f;
    size_t n;
    float *g = merak_exec_grads_flat(e, &n);
    merak_exec_kernels(e)->scale(g + lo, hi - lo, coef);
    return coef;
}

void merak_optim_step(merak_optim *o, merak_exec *e, float lr)
{
    o->t++;
    size_t n;
    float *p0 = merak_exec_params_flat(e, &n), *g0 = merak_exec_grads_flat(e, &n);
    /* bf16 storage, every parameter this state's (no ZeRO shard): the
     * compute copies rounded in AdamW's pass, the next step's cast spared
     * (a read of every master) */
    uint16_t *p16 = o->lo == 0 && o->hi >= n ? merak_exec_copies16(e) : NULL;
    o->k->adamw(p0, g0, o->m, o->v, o->spans, o->nspans, lr, o->opts.beta1, o->opts.beta2,
                o->opts.eps, o->opts.weight_decay, o->t, p16);
    if (p16)
        merak_exec_copies_current(e);
}

int merak_optim_read(const merak_optim *o, float *m, float *v)
{
    size_t bytes = (o->hi - o->lo) * sizeof(float);
    if (!bytes)
        return 0;
    return o->k->copy(m, o->m, bytes, MERAK_COPY_D2H) < 0 || o->k->copy(v, o->v, bytes, MERAK_COPY_D2H) < 0 ? -1 : 0;
}

int merak_optim_write(merak_optim *o, const float *m, const float *v, int steps)
{
    size_t bytes = (o->hi - o->lo) * sizeof(float);
    o->t = steps;
    if (!bytes)
        return 0;
    return o->k->copy(o->m, m, bytes, MERAK_COPY_H2D) < 0 || o->k->copy(o->v, v, bytes, MERAK_COPY_H2D) < 0 ? -1 : 0;
}

int merak_optim_steps(const merak_optim *o) { return o->t; }
