/*
 * cost.c - device profiles and op times (cost.h).
 */
#include <math.h> /* exp, log */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cost.h"
#include "errf.h"
#include "file.h"
#include "graph/ops.h"
#include "mix64.h"
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
    const merak_rates want = d->rates < MERAK_RATES_COUNT_ ? d->rates : MERAK_RATES_FP32;
    const merak_rates r = d->op_fwd[want][o->type] > 0 ? want : MERAK_RATES_FP32;
    if (d->op_fwd[r][o->type] > 0 && !sums) {
        double work = by_flops(o->type) ? o->flops : o->bytes;
        *fwd = work / d->op_fwd[r][o->type];
        *bwd = work / d->op_bwd[r][o->type];
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
static int time_ops(const merak_graph *g, const merak_kernels *k, int reps, int bf16, int float_storage,
                    double *fwd, double *bwd, size_t *bounds, size_t *caught, double *lag, char *err,
                    size_t errlen)
{
    *bounds = *caught = 0;
    *lag = 0;
    merak_exec_chunk whole = {0, -1, 1, 0};
    merak_exec_opts eo = {.chunks = &whole, .nchunks = 1, .kernels = k, .bf16 = bf16,
                          .float_storage = float_storage};
    merak_exec *e = NULL;
    if (g->tp != 1)
        return merak_errf(err, errlen, "calibration runs a whole graph in one process");
    if (merak_exec_create(g, &eo, &e, err, errlen) < 0)
        return -1;
    int rc = 0;
    /* small parameters, and tokens spread over the vocabulary as text
     * spreads them (id k about as often as 1/(k+1), Zipf's law: 0 is a
     * few percent of them): the values do not change a kernel's time (no
     * denormals or NaNs slow one down), but the tokens do the embedding's
     * backward, whose rows of one token add up in turn (all one token:
     * one long run; all different: none) */
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
    int64_t vocab = 0;   /* the token embedding's rows and the loss's: ids and targets stay below both */
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].type == MERAK_OP_EMBEDDING && g->tensors[g->ops[i].in[1]].shape[0] > vocab)
            vocab = g->tensors[g->ops[i].in[1]].shape[0];
    const int lv = merak_graph_loss_vocab(g);
    if (lv > 0 && (vocab == 0 || lv < vocab))
        vocab = lv;
    const double lnv = log((double)(vocab > 1 ? vocab : 1));
    for (int t = 0; t < g->ntensors && rc == 0; t++)
        if (g->tensors[t].kind == MERAK_T_INPUT) {
            const size_t n = (size_t)merak_tensor_elems(&g->tensors[t]);
            int32_t *z = malloc((n ? n : 1) * sizeof *z);
            for (size_t j = 0; z && j < n; j++) {   /* (a float input: zeros) */
                const double u = (double)(merak_mix64(j + 1) >> 11) * 0x1p-53;   /* [0, 1) */
                const int64_t id = (int64_t)exp(u * lnv) - 1;
                z[j] = g->tensors[t].dtype == MERAK_I32 && vocab > 1 ? (int32_t)(id < vocab ? id : vocab - 1) : 0;
            }
            if (!z || merak_exec_tensor_write(e, 0, t, z) < 0)
                rc = merak_errf(err, errlen, "calibration inputs: %s", z ? merak_exec_error(e) : "out of memory");
            free(z);
        }
    /* the first pass warms the caches and is not counted; it is timed op
     * by op too (into warm[]), so it runs the kernels the counted passes
     * run (a step's one-pass pairs are not: exec.h), each loaded before
     * it is timed */
    double *warm = calloc(2 * (size_t)g->nops, sizeof *warm);
    if (!warm && rc == 0)
        rc = merak_errf(err, errlen, "out of memory");
    for (int r = 0; r <= reps && rc == 0; r++) {
        merak_exec_time_ops(e, r ? fwd : warm, r ? bwd : warm + g->nops);
        if (r == 1)   /* the warm-up's times are in: its op boundaries do not count either */
            merak_exec_ops_lag_reset(e);
        if (merak_exec_zero_grads(e) < 0 || merak_exec_forward(e, 0, 1) < 0 || merak_exec_backward(e, 0) < 0)
            rc = merak_errf(err, errlen, "calibration run: %s", merak_exec_error(e));
    }
    merak_exec_time_ops(e, NULL, NULL);   /* the last pass's times added */
    free(warm);
    for (int i = 0; i < g->nops; i++)
        fwd[i] /= reps, bwd[i] /= reps;
    merak_exec_ops_lag(e, bounds, caught, lag);
    merak_exec_destroy(e);
    return rc;
}

/* Seconds per call of `call` on k's device: one warm-up, then reps calls
 * between two synchronisations; -1 when a synchronisation fails (a
 * kernel did). */
#define TIMED(k, reps, t, call)                                                        \
    do {                                                                              \
        call;                                                                         \
        const int ok0_ = (k)->synchronize() == 0;                                     \
        const double t0_ = merak_now();                                               \
        for (int r_ = 0; r_ < (reps); r_++)                                           \
            call;                                                                     \
        (t) = ok0_ && (k)->synchronize() == 0 ? (merak_now() - t0_) / (reps) : -1.0; \
    } while (0)

/* The roofline's peaks with k: a product of n x n matrices (the bf16
 * entry with bf16, else the float one in the products set) and a copy. */
static int measure_peaks(const merak_kernels *k, int bf16, int reps, merak_roofline *rf, char *err, size_t errlen)
{
    const merak_backend *be = merak_backend_find(k->name);
    const int host = !be || be->host;
    int n = host ? 1024 : 8192;
    size_t cb = host ? (size_t)64 << 20 : (size_t)1 << 30;
    /* a device short of memory: a quarter of each (what the ops needed
     * is free again) */
    size_t free_b = 0, total_b = 0;
    if (!host && k->capacity && k->capacity(&free_b, &total_b) == 0 &&
        free_b < 2 * ((size_t)5 * n * n * 4 + 2 * cb))
        n /= 2, cb /= 4;
    reps = reps > 5 ? 5 : reps;
    const size_t nn = (size_t)n * (size_t)n;
    const int b16 = bf16 && k->linear16_fwd && k->to_bf16;
    float *hx = malloc(nn * sizeof *hx);
    float *a = k->alloc(nn * sizeof(float)), *w = k->alloc(nn * sizeof(float)), *out = k->alloc(nn * sizeof(float));
    float *scratch = b16 && k->bf16_scratch ? k->alloc((3 * nn + 48) * sizeof(float)) : NULL;
    void *src = k->alloc(cb), *dst = k->alloc(cb);
    int rc = 0;
    if (!hx || !a || !w || !out || !src || !dst || (b16 && k->bf16_scratch && !scratch))
        rc = merak_errf(err, errlen, "calibration: out of memory for the peaks (%d x %d products, a %zu MiB copy)",
                        n, n, cb >> 20);
    for (size_t i = 0; rc == 0 && i < nn; i++)
        hx[i] = 0.02f * (float)((i * 2654435761u) % 1000) / 1000.0f - 0.01f;
    if (rc == 0 && (k->copy(a, hx, nn * sizeof(float), MERAK_COPY_H2D) < 0 ||
                    k->copy(w, hx, nn * sizeof(float), MERAK_COPY_H2D) < 0 || k->zero(src, cb) < 0))
        rc = merak_errf(err, errlen, "calibration: the peaks' buffers could not be written");
    double tp = 0, tc = 0;
    uint16_t *a16 = rc == 0 && b16 ? k->alloc(nn * 2) : NULL, *w16 = rc == 0 && b16 ? k->alloc(nn * 2) : NULL;
    if (rc == 0 && b16 && (!a16 || !w16))
        rc = merak_errf(err, errlen, "calibration: out of memory for the peaks' bf16 operands");
    if (rc == 0 && b16) {
        k->to_bf16(a16, a, nn);
        k->to_bf16(w16, w, nn);
        TIMED(k, reps, tp, k->linear16_fwd((uint16_t *)out, a16, w16, NULL, n, n, n, n, scratch));
    } else if (rc == 0) {
        TIMED(k, reps, tp, k->linear_fwd(out, a, w, NULL, n, n, n));
    }
    if (rc == 0)
        TIMED(k, reps, tc, k->copy(dst, src, cb, MERAK_COPY_D2D));
    if (rc == 0 && !(tp > 0 && tc > 0))
        rc = merak_errf(err, errlen, "calibration: the peaks failed or took no measurable time");
    if (rc == 0) {
        rf->product = 2.0 * (double)nn * (double)n / tp;
        rf->product_n = n;
        rf->copy = 2.0 * (double)cb / tc;
        rf->copy_bytes = (double)cb;
    }
    free(hx);
    k->free(a), k->free(w), k->free(out), k->free(scratch), k->free(src), k->free(dst), k->free(a16), k->free(w16);
    return rc;
}

int merak_device_calibrate(const merak_graph *g, const merak_kernels *k, int reps, merak_rates rates,
                           int float_storage, merak_device *d, merak_roofline *roof, char *err, size_t errlen)
{
    double *fwd = calloc((size_t)g->nops + 1, sizeof *fwd), *bwd = calloc((size_t)g->nops + 1, sizeof *bwd);
    if (!fwd || !bwd) {
        free(fwd), free(bwd);
        return merak_errf(err, errlen, "out of memory");
    }
    const int bf16 = rates == MERAK_RATES_BF16;
    size_t bounds, caught;
    double lag;
    int rc = time_ops(g, k, reps < 1 ? 1 : reps, bf16, float_storage, fwd, bwd, &bounds, &caught, &lag, err, errlen);
    /* per kind: work over time, forward and backward; bytes at the run's
     * element size for the roofline (the rates stay in 4-byte bytes, as
     * the graph counts them) */
    const double elem = bf16 && !float_storage && k->to_bf16 ? 2.0 : 4.0;
    double work[MERAK_OP_COUNT_] = {0}, tf[MERAK_OP_COUNT_] = {0}, tb[MERAK_OP_COUNT_] = {0};
    merak_roofline rl;
    memset(&rl, 0, sizeof rl);
    rl.lag_bounds = bounds, rl.lag_caught = caught, rl.lag_mean = lag, rl.lag_threshold = MERAK_EXEC_CAUGHT_UP;
    for (int i = 0; rc == 0 && i < g->nops; i++) {
        const merak_op *o = &g->ops[i];
        work[o->type] += by_flops(o->type) ? o->flops : o->bytes;
        tf[o->type] += fwd[i];
        tb[o->type] += bwd[i];
        const double w = by_flops(o->type) ? o->flops : o->bytes * elem / 4.0;
        rl.fwd_work[o->type] += w;
        rl.bwd_work[o->type] += 2.0 * w;
    }
    double mem_work = 0, mem_t = 0;
    for (int t = 0; rc == 0 && t < MERAK_OP_COUNT_; t++) {
        rl.fwd_s[t] = tf[t], rl.bwd_s[t] = tb[t];
        rl.flops[t] = (unsigned char)by_flops((merak_op_type)t);
        if (!(work[t] > 0 && tf[t] > 0 && tb[t] > 0))
            continue;
        d->op_fwd[rates][t] = work[t] / tf[t];
        d->op_bwd[rates][t] = work[t] / tb[t];
        if (merak_op_kind_get((merak_op_type)t)->cost == MERAK_COST_STREAM)
            mem_work += work[t], mem_t += tf[t];
    }
    if (rc == 0 && rates == MERAK_RATES_FP32 && d->op_fwd[rates][MERAK_OP_LINEAR] > 0)
        d->matmul = d->op_fwd[rates][MERAK_OP_LINEAR];
    if (rc == 0 && rates == MERAK_RATES_FP32 && mem_t > 0)
        d->mem_bw = mem_work / mem_t;
    /* the peaks: a roofline without them (0) when they cannot be had */
    if (rc == 0 && roof) {
        if (measure_peaks(k, bf16, reps < 1 ? 1 : reps, &rl, rl.why, sizeof rl.why) < 0)
            rl.product = rl.copy = 0;
        *roof = rl;
    }
    free(fwd), free(bwd);
    return rc;
}
