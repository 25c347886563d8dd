/*
 * cost.c - device profiles and op times (cost.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "errf.h"
#include "file.h"
#include "graph/ops.h"
#include "pipe/exec.h"

double merak_allreduce_time(double bytes, int n, double bw, double latency)
{
    return n > 1 ? 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency : 0;
}

/* Linear layers and attention are timed by their FLOPs, the rest by their bytes. */
static int by_flops(merak_op_type t)
{
    return merak_op_kind_get(t)->cost == MERAK_COST_FLOPS;
}

void merak_op_time(const merak_graph *g, int i, const merak_device *d, double *fwd, double *bwd)
{
    const merak_op *o = &g->ops[i];
    double mem = o->bytes / d->mem_bw;
    double out = 4.0 * (double)merak_tensor_elems(&g->tensors[o->out]);
    const merak_op_cost cost = merak_op_kind_of(o)->cost;
    const int sums = cost == MERAK_COST_SUM_FORWARD || cost == MERAK_COST_SUM_BACKWARD;
    if (d->op_fwd[o->type] > 0 && !sums) {
        double work = by_flops(o->type) ? o->flops : o->bytes;
        *fwd = work / d->op_fwd[o->type];
        *bwd = work / d->op_bwd[o->type];
        return;
    }
    if (cost == MERAK_COST_FLOPS) {
        double t = o->flops / d->matmul;
        *fwd = t > mem ? t : mem;
        *bwd = 2 * *fwd;
    } else if (cost == MERAK_COST_SUM_FORWARD) {   /* sums forward, passes the gradient */
        *fwd = merak_allreduce_time(out, g->tp, d->intra, d->latency) + mem;
        *bwd = 0;
    } else if (cost == MERAK_COST_SUM_BACKWARD) {  /* passes forward, sums the gradient */
        *fwd = 0;
        *bwd = merak_allreduce_time(out, g->tp, d->intra, d->latency);
    } else {
        *fwd = mem;
        *bwd = 2 * mem;
    }
}

double merak_cut_time(const merak_graph *g, int k, const merak_device *d, double link_bw, double elem)
{
    int t = merak_cut_tensor(g, k);
    return t < 0 ? 0 : elem * (double)merak_tensor_elems(&g->tensors[t]) / link_bw + d->latency;
}

void merak_blocks_cost(const merak_graph *g, const int *first, const merak_graph *local, const merak_device *d,
                       double link_bw, double elem, merak_blocks *b)
{
    for (int k = 0; k < b->n; k++) {
        b->fwd[k] = b->bwd[k] = 0;
        int end = merak_cut_map(local, first[k + 1]);
        for (int i = merak_cut_map(local, first[k]); i < end; i++) {
            double f, w;
            merak_op_time(local, i, d, &f, &w);
            b->fwd[k] += f;
            b->bwd[k] += w;
        }
        b->comm[k] = k > 0 ? merak_cut_time(g, first[k], d, link_bw, elem) : 0;
    }
}

/* Runs g's forward and backward reps times with every op timed; fwd and
 * bwd ([nops]) get the seconds per pass. */
static int time_ops(const merak_graph *g, const merak_kernels *k, int reps, double *fwd, double *bwd, char *err,
                    size_t errlen)
{
    merak_exec_chunk whole = {0, -1, 1, 0};
    merak_exec_opts eo = {.chunks = &whole, .nchunks = 1, .kernels = k};
    merak_exec *e = NULL;
    if (g->tp != 1)
        return merak_errf(err, errlen, "calibration runs a whole graph in one process");
    if (merak_exec_create(g, &eo, &e, err, errlen) < 0)
        return -1;
    int rc = 0;
    /* small parameters and token 0 everywhere: the values do not change
     * the time, and no denormals or NaNs slow a kernel down */
    for (int i = 0; i < merak_exec_num_params(e) && rc == 0; i++) {
        size_t n = merak_exec_param_elems(e, i);
        float *v = malloc(n * sizeof *v);
        if (!v)
            rc = merak_errf(err, errlen, "out of memory");
        for (size_t j = 0; v && j < n; j++)
            v[j] = 0.02f * (float)((j * 2654435761u) % 1000) / 1000.0f - 0.01f;
        if (v && merak_exec_param_write(e, i, v) < 0)
            rc = merak_errf(err, errlen, "%s", merak_exec_error(e));
        free(v);
    }
    for (int t = 0; t < g->ntensors && rc == 0; t++)
        if (g->tensors[t].kind == MERAK_T_INPUT) {
            int32_t *z = calloc((size_t)merak_tensor_elems(&g->tensors[t]), sizeof *z);
            if (!z || merak_exec_tensor_write(e, 0, t, z) < 0)
                rc = merak_errf(err, errlen, "calibration inputs: %s", z ? merak_exec_error(e) : "out of memory");
            free(z);
        }
    for (int r = 0; r <= reps && rc == 0; r++) {
        /* the first pass warms the caches and is not counted */
        merak_exec_time_ops(e, r ? fwd : NULL, r ? bwd : NULL);
        if (merak_exec_zero_grads(e) < 0 || merak_exec_forward(e, 0, 1) < 0 || merak_exec_backward(e, 0) < 0)
            rc = merak_errf(err, errlen, "calibration run: %s", merak_exec_error(e));
    }
    for (int i = 0; i < g->nops; i++)
        fwd[i] /= reps, bwd[i] /= reps;
    merak_exec_destroy(e);
    return rc;
}

int merak_device_calibrate(const merak_graph *g, const merak_kernels *k, int reps, merak_device *d, char *err,
                           size_t errlen)
{
    double *fwd = calloc((size_t)g->nops + 1, sizeof *fwd), *bwd = calloc((size_t)g->nops + 1, sizeof *bwd);
    if (!fwd || !bwd) {
        free(fwd), free(bwd);
        return merak_errf(err, errlen, "out of memory");
    }
    int rc = time_ops(g, k, reps < 1 ? 1 : reps, fwd, bwd, err, errlen);
    /* per kind: work over time, forward and backward */
    double work[MERAK_OP_COUNT_] = {0}, tf[MERAK_OP_COUNT_] = {0}, tb[MERAK_OP_COUNT_] = {0};
    for (int i = 0; rc == 0 && i < g->nops; i++) {
        const merak_op *o = &g->ops[i];
        work[o->type] += by_flops(o->type) ? o->flops : o->bytes;
        tf[o->type] += fwd[i];
        tb[o->type] += bwd[i];
    }
    double mem_work = 0, mem_t = 0;
    for (int t = 0; rc == 0 && t < MERAK_OP_COUNT_; t++) {
        if (!(work[t] > 0 && tf[t] > 0 && tb[t] > 0))
            continue;
        d->op_fwd[t] = work[t] / tf[t];
        d->op_bwd[t] = work[t] / tb[t];
        if (merak_op_kind_get((merak_op_type)t)->cost == MERAK_COST_STREAM)
            mem_work += work[t], mem_t += tf[t];
    }
    if (rc == 0 && d->op_fwd[MERAK_OP_LINEAR] > 0)
        d->matmul = d->op_fwd[MERAK_OP_LINEAR];
    if (rc == 0 && mem_t > 0)
        d->mem_bw = mem_work / mem_t;
    free(fwd), free(bwd);
    return rc;
}
