/*
 * optim.c - AdamW (torch.optim.AdamW semantics) over a range of the
 * executor's flat parameter buffer, and global-norm gradient clipping.
 * The moments live in the executor's backend memory, next to the
 * parameters they update.
 */
#include <stdlib.h>

#include "train.h"

struct merak_optim {
    merak_adamw_opts opts;
    const merak_kernels *k;
    size_t lo, hi;       /* the floats of the flat parameter buffer this state covers */
    float *m, *v;        /* moments of floats [lo, hi) */
    unsigned char *decay; /* [nparams] 1 if weight decay applies */
    int t;               /* steps taken */
};

merak_optim *merak_optim_create(const merak_graph *g, const merak_exec *e,
                                const merak_adamw_opts *opts, size_t lo, size_t hi)
{
    merak_optim *o = calloc(1, sizeof *o);
    size_t n = hi > lo ? hi - lo : 0;
    int np = merak_exec_num_params(e);
    if (!o)
        return NULL;
    o->opts = *opts;
    o->k = merak_exec_kernels(e);
    o->lo = lo;
    o->hi = hi;
    o->m = o->k->alloc((n ? n : 1) * sizeof *o->m);
    o->v = o->k->alloc((n ? n : 1) * sizeof *o->v);
    o->decay = calloc(np ? (size_t)np : 1, 1);
    if (!o->m || !o->v || !o->decay) {
        merak_optim_destroy(o);
        return NULL;
    }
    /* Decay embeddings, heads and projections, never biases or norm gains. */
    for (int i = 0; i < np; i++)
        o->decay[i] = g->tensors[merak_exec_param_tensor(e, i)].ndim >= 2;
    return o;
}

void merak_optim_destroy(merak_optim *o)
{
    if (!o)
        return;
    o->k->free(o->m);
    o->k->free(o->v);
    free(o->decay);
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
    for (int i = 0; i < merak_exec_num_params(e); i++) {
        /* the part of parameter i inside [lo, hi) */
        size_t a = (size_t)(merak_exec_param_data(e, i) - p0), b = a + merak_exec_param_elems(e, i);
        if (a < o->lo)
            a = o->lo;
        if (b > o->hi)
            b = o->hi;
        if (a >= b)
            continue;
        o->k->adamw(p0 + a, g0 + a, o->m + (a - o->lo), o->v + (a - o->lo), b - a, lr, o->opts.beta1,
                    o->opts.beta2, o->opts.eps, o->decay[i] ? o->opts.weight_decay : 0.0f, o->t);
    }
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
