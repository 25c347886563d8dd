/*
 * optim.c - AdamW (torch.optim.AdamW semantics) over the executor's flat
 * parameter buffer, global-norm gradient clipping.
 */
#include <math.h>
#include <stdlib.h>

#include "train.h"

struct merak_optim {
    merak_adamw_opts opts;
    float *m, *v;        /* moments, laid out like the flat parameter buffer */
    unsigned char *decay; /* [nparams] 1 if weight decay applies */
    int t;               /* steps taken */
};

merak_optim *merak_optim_create(const merak_graph *g, const merak_exec *e,
                                const merak_adamw_opts *opts)
{
    merak_optim *o = calloc(1, sizeof *o);
    size_t n;
    merak_exec_params_flat(e, &n);
    int np = merak_exec_num_params(e);
    if (!o)
        return NULL;
    o->opts = *opts;
    o->m = calloc(n ? n : 1, sizeof *o->m);
    o->v = calloc(n ? n : 1, sizeof *o->v);
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
    free(o->m);
    free(o->v);
    free(o->decay);
    free(o);
}

double merak_grad_norm(const merak_exec *e, const merak_kernels *k)
{
    double ss = 0;
    for (int i = 0; i < merak_exec_num_params(e); i++)
        ss += k->sumsq(merak_exec_param_grad(e, i), merak_exec_param_elems(e, i));
    return sqrt(ss);
}

float merak_clip_grads(merak_exec *e, const merak_kernels *k, double norm, float clip)
{
    if (clip <= 0)
        return 1.0f;
    float coef = (float)(clip / (norm + 1e-6));
    if (coef >= 1.0f)
        return 1.0f;
    size_t n;
    float *g = merak_exec_grads_flat(e, &n);
    k->scale(g, n, coef);
    return coef;
}

void merak_optim_step(merak_optim *o, merak_exec *e, const merak_kernels *k, float lr)
{
    o->t++;
    size_t n;
    float *p0 = merak_exec_params_flat(e, &n);
    for (int i = 0; i < merak_exec_num_params(e); i++) {
        float *p = merak_exec_param_data(e, i);
        size_t off = (size_t)(p - p0);
        k->adamw(p, merak_exec_param_grad(e, i), o->m + off, o->v + off,
                 merak_exec_param_elems(e, i), lr, o->opts.beta1, o->opts.beta2, o->opts.eps,
                 o->decay[i] ? o->opts.weight_decay : 0.0f, o->t);
    }
}
