/*
 * pipeline.c - training on a dp x tp x pp grid of MPI ranks: each rank runs
 * its pipeline stage's slice of its tensor-parallel shard of the graph by
 * executing its schedule's instruction list, then reduces gradients and
 * steps the optimizer.
 *
 * Equivalence with one process: with dp replicas of M micro-batches each,
 * step i's global micro-batch k (k < M*dp) reads window (i*M*dp + k) mod W,
 * replica r taking k in [r*M, (r+1)*M); every micro-batch's loss is scaled by
 * 1/(M*dp) and the dp all-reduce sums, so the gradients are those of one
 * process running M*dp micro-batches.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "data.h"
#include "errf.h"
#include "pipeline.h"
#include "plan/partition.h"
#include "schedule.h"
#include "train.h"

typedef struct stage {
    merak_comm *comm;
    const merak_grid *grid;
    merak_group *pp_g, *dp_g, *tied_g, *world_g, *tp_g;
    const merak_graph *g;         /* this rank's graph: shard, or the model when tp = 1 */
    merak_graph *shard;           /* owned: this rank's tensor-parallel shard, or NULL */
    int *bounds, *lbounds;        /* stage bounds in the model and in g ([pp + 1]) */
    merak_optim *opt;
    merak_exec_comm tpc;
    merak_tp_rule *rules;         /* --tp-rules, if given */
    int nrules;
    const merak_kernels *k;
    merak_exec *e;
    merak_schedule sched;
    int first, last;              /* this rank is the first / last stage */
    int in_t, out_t;              /* activation received / sent, or -1 */
    size_t in_bytes, out_bytes;
    int ids_t, tgt_t;             /* inputs this stage loads, or -1 */
    int32_t *ids_tmp, *tgt_tmp;   /* window buffers for inputs the stage does not hold */
    merak_req *act_req, *grad_req;/* per slot */
    merak_req *sends;             /* posted sends, waited by WAIT_SENDS */
    int nsends, cap_sends;
    unsigned char *tied;          /* [nparams] 1 if the param is shared with the other end stage */
    merak_data *data;
    uint64_t windows;
    double loss_sum;              /* this step's micro-batch losses (last stage) */

    /* Data-parallel gradient reduction.  Without ZeRO: buckets of the flat
     * gradient buffer, all-reduced from its end down as the last backward
     * finishes them (parameters complete in reverse first-use order). */
    size_t flat_n, bucket;        /* floats */
    size_t launched;              /* floats [launched, flat_n) are reducing */
    merak_req *breq;              /* one per bucket launched this step */
    size_t *blo, *bhi;            /* (all NULL unless dp > 1 without ZeRO) */
    unsigned char *bdone;
    int nb;
    int last_bwd;                 /* index of the stage's last backward instruction */
    size_t done_early;            /* floats reduced while the backward still ran */
    double wait_s;                /* waiting for the reduction after the backward */
    int dp_failed;
    /* ZeRO-1: this rank updates floats [zlo, zhi) of the flat buffers */
    int *zcounts;                 /* [dp] floats per dp rank; NULL without ZeRO */
    size_t zlo, zhi;              /* without ZeRO: 0, flat_n */
    float *zshard;                /* reduce-scatter target, zhi - zlo floats */
} stage;

/* Is parameter tensor t read by any op in [begin, end)? */
static int range_reads(const merak_graph *g, int begin, int end, int t)
{
    for (int i = begin; i < end; i++)
        for (int j = 0; j < g->ops[i].nin; j++)
            if (g->ops[i].in[j] >= 0 && merak_graph_param_root(g, g->ops[i].in[j]) == t)
                return 1;
    return 0;
}

/* Every rank agrees whether a phase failed: the first failing rank's
 * message becomes everyone's.  Returns 0 if all ranks succeeded. */
static int agree(stage *s, int failed, char *err, size_t errlen)
{
    int world = s->grid->world, first = -1;
    double *hot = calloc((size_t)world, sizeof *hot);  /* one-hot of failing ranks */
    if (!hot)
        return merak_errf(err, errlen, "out of memory");
    if (failed)
        hot[s->grid->rank] = 1;
    merak_allreduce_f64(s->world_g, hot, (size_t)world);
    for (int r = 0; r < world && first < 0; r++)
        if (hot[r] > 0)
            first = r;
    free(hot);
    if (first < 0)
        return 0;
    char msg[512] = "";
    if (s->grid->rank == first)
        snprintf(msg, sizeof msg, "%s", err);
    merak_broadcast(s->world_g, msg, sizeof msg, first);
    if (s->grid->rank != first)
        snprintf(err, errlen, "%s", msg);
    return -1;
}

/* ---- data-parallel reduction */

static int launch_bucket(stage *s, size_t lo, size_t hi)
{
    size_t n;
    float *g = merak_exec_grads_flat(s->e, &n);
    int i = s->nb++;
    s->blo[i] = lo;
    s->bhi[i] = hi;
    s->bdone[i] = 0;
    memset(&s->breq[i], 0, sizeof s->breq[i]);
    return merak_allreduce(s->dp_g, g + lo, hi - lo, &s->breq[i]);
}

/* Lets MPI progress the reductions in flight; counts those finished. */
static void dp_progress(stage *s)
{
    for (int i = 0; i < s->nb; i++)
        if (!s->bdone[i]) {
            int r = merak_test(&s->breq[i]);
            if (r < 0)
                s->dp_failed = 1;
            else if (r == 1) {
                s->bdone[i] = 1;
                s->done_early += s->bhi[i] - s->blo[i];
            }
        }
}

/* Executor hook during the last backward: floats [from, flat_n) are final. */
static void grad_ready(void *ctx, size_t from)
{
    stage *s = ctx;
    while (s->launched >= from + s->bucket) {
        size_t lo = s->launched - s->bucket;
        if (launch_bucket(s, lo, s->launched) < 0)
            s->dp_failed = 1;
        s->launched = lo;
    }
    dp_progress(s);
}

static int reduce_tied(stage *s)
{
    if (!s->tied_g)
        return 0;
    for (int i = 0; i < merak_exec_num_params(s->e); i++)
        if (s->tied[i] && merak_allreduce(s->tied_g, merak_exec_param_grad(s->e, i),
                                           merak_exec_param_elems(s->e, i), NULL) < 0)
            return -1;
    return 0;
}

/* After the flush: the tied embedding's gradient summed over its two stages
 * and the gradients over dp (sums commute, so the order is free): with ZeRO
 * reduce-scattered into this rank's share, else the rest of the buckets
 * launched and all of them awaited. */
static int reduce_grads(stage *s)
{
    double t0 = merak_now();
    int rc = 0;
    if (s->zcounts) {
        size_t n;
        float *g = merak_exec_grads_flat(s->e, &n);
        rc = reduce_tied(s);
        if (rc == 0)
            rc = merak_reduce_scatter(s->dp_g, g, s->zshard, s->zcounts);
        if (rc == 0)
            memcpy(g + s->zlo, s->zshard, (s->zhi - s->zlo) * sizeof *g);
    } else if (s->breq) {
        if (s->launched > 0 && launch_bucket(s, 0, s->launched) < 0)
            rc = -1;
        s->launched = 0;
        for (int i = 0; i < s->nb && rc == 0; i++)
            rc = merak_wait(&s->breq[i]);
        if (rc == 0)
            rc = reduce_tied(s);
    } else {
        rc = reduce_tied(s);
    }
    s->wait_s = merak_now() - t0;
    return rc < 0 || s->dp_failed ? -1 : 0;
}

static int post_send(stage *s, const void *buf, size_t bytes, int peer, int tag)
{
    if (s->nsends == s->cap_sends) {
        int cap = s->cap_sends ? 2 * s->cap_sends : 16;
        merak_req *r = realloc(s->sends, (size_t)cap * sizeof *r);
        if (!r)
            return -1;
        s->sends = r;
        s->cap_sends = cap;
    }
    memset(&s->sends[s->nsends], 0, sizeof *s->sends);
    return merak_send(s->pp_g, buf, bytes, peer, tag, &s->sends[s->nsends++]);
}

/* Runs one instruction; returns 0 or -1 with err. */
static int run_instr(stage *s, const merak_args *a, const merak_instr *in, int step,
                     char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    int slot = in->slot, mb = in->mb, M = a->micro_batches;
    /* global micro-batch number of (step, this replica, mb) */
    uint64_t n = ((uint64_t)step * (uint64_t)gr->dp + (uint64_t)gr->dp_rank) * (uint64_t)M + (uint64_t)mb;
    switch (in->kind) {
    case MERAK_I_LOAD: {
        int32_t *ids = s->ids_t >= 0 ? merak_exec_tensor(s->e, slot, s->ids_t) : s->ids_tmp;
        int32_t *tgt = s->tgt_t >= 0 ? merak_exec_tensor(s->e, slot, s->tgt_t) : s->tgt_tmp;
        if (s->data && merak_data_window(s->data, n % s->windows, a->micro_batch, a->seq_len, ids,
                                         tgt, err, errlen) < 0)
            return -1;
        return 0;
    }
    case MERAK_I_RECV_ACT:
        return merak_recv(s->pp_g, merak_exec_tensor(s->e, slot, s->in_t), s->in_bytes,
                          gr->pp_rank - 1, mb, &s->act_req[slot]);
    case MERAK_I_WAIT_ACT: return merak_wait(&s->act_req[slot]);
    case MERAK_I_FWD:
        if (merak_exec_forward(s->e, slot, merak_mb_seed(a->seed, n)) < 0)
            return merak_errf(err, errlen, "step %d: a tensor-parallel sum failed", step);
        if (s->last)
            s->loss_sum += merak_exec_loss(s->e, slot);
        return 0;
    case MERAK_I_SEND_ACT:
        return post_send(s, merak_exec_tensor(s->e, slot, s->out_t), s->out_bytes, gr->pp_rank + 1, mb);
    case MERAK_I_RECV_GRAD:
        return merak_recv(s->pp_g, merak_exec_grad(s->e, slot, s->out_t), s->out_bytes,
                          gr->pp_rank + 1, mb, &s->grad_req[slot]);
    case MERAK_I_WAIT_GRAD: return merak_wait(&s->grad_req[slot]);
    case MERAK_I_BWD:
    case MERAK_I_BWD_INPUT:
    case MERAK_I_BWD_WEIGHT: {
        /* The stage's last weight gradients: reduce buckets as they finish. */
        int hook = s->breq && in - s->sched.instr == s->last_bwd;
        if (hook)
            merak_exec_set_grad_hook(s->e, grad_ready, s);
        int rc = in->kind == MERAK_I_BWD         ? merak_exec_backward(s->e, slot)
                 : in->kind == MERAK_I_BWD_INPUT ? merak_exec_backward_input(s->e, slot)
                                                 : merak_exec_backward_weight(s->e, slot);
        if (hook)
            merak_exec_set_grad_hook(s->e, NULL, NULL);
        if (s->dp_failed)
            return merak_errf(err, errlen, "step %d: a data-parallel all-reduce failed", step);
        return rc < 0 ? merak_errf(err, errlen, "step %d: a tensor-parallel sum failed", step) : 0;
    }
    case MERAK_I_SEND_GRAD:
        return post_send(s, merak_exec_grad(s->e, slot, s->in_t), s->in_bytes, gr->pp_rank - 1, mb);
    case MERAK_I_WAIT_SENDS:
        for (int i = 0; i < s->nsends; i++)
            if (merak_wait(&s->sends[i]) < 0)
                return -1;
        s->nsends = 0;
        return 0;
    case MERAK_I_REDUCE_TIED: return 0; /* done with the dp reduction, below */
    case MERAK_I_REDUCE_DP:
        if (reduce_grads(s) < 0)
            return merak_errf(err, errlen, "step %d: reducing gradients failed", step);
        return 0;
    case MERAK_I_OPTIMIZER_STEP: return 0; /* done by the caller, which needs the norm */
    default: return merak_errf(err, errlen, "unknown instruction %d", (int)in->kind);
    }
}

static void stage_free(stage *s)
{
    merak_schedule_free(&s->sched);
    merak_exec_destroy(s->e);
    merak_data_close(s->data);
    free(s->ids_tmp), free(s->tgt_tmp);
    free(s->act_req), free(s->grad_req), free(s->sends), free(s->tied);
    free(s->rules);
    free(s->breq), free(s->blo), free(s->bhi), free(s->bdone);
    free(s->zcounts), free(s->zshard);
    free(s->bounds), free(s->lbounds);
    merak_optim_destroy(s->opt);
    merak_graph_destroy(s->shard);
}

/* Builds this rank's stage; returns 0 or -1 with err (this rank only). */
static int tp_allreduce(void *ctx, float *buf, size_t n)
{
    return merak_allreduce(ctx, buf, n, NULL);
}

/* The stage of this rank: ops [bounds[p], bounds[p+1]) of its shard g;
 * `model` is the whole graph (for the vocabulary). */
static int stage_setup(stage *s, const merak_graph *model, const merak_graph *g,
                       const merak_args *a, const int *bounds, merak_sched_kind kind, char *err,
                       size_t errlen)
{
    const merak_grid *gr = s->grid;
    int p = gr->pp_rank, B = a->micro_batch, T = a->seq_len;
    s->first = p == 0;
    s->last = p == gr->pp - 1;
    if (merak_schedule_build(kind, gr->pp, p, a->micro_batches, &s->sched, err, errlen) < 0)
        return -1;
    s->tpc.ctx = s->tp_g;
    s->tpc.allreduce = tp_allreduce;
    merak_exec_opts eo = {bounds[p], bounds[p + 1], s->sched.nslots, s->k, &s->tpc};
    if (merak_exec_create(g, &eo, &s->e, err, errlen) < 0)
        return -1;
    s->in_t = s->first ? -1 : merak_cut_tensor(g, bounds[p]);
    s->out_t = s->last ? -1 : merak_cut_tensor(g, bounds[p + 1]);
    if ((!s->first && s->in_t < 0) || (!s->last && s->out_t < 0))
        return merak_errf(err, errlen, "stage %d: more than one activation crosses its bounds", p);
    if (s->in_t >= 0)
        s->in_bytes = (size_t)merak_tensor_elems(&g->tensors[s->in_t]) * sizeof(float);
    if (s->out_t >= 0)
        s->out_bytes = (size_t)merak_tensor_elems(&g->tensors[s->out_t]) * sizeof(float);
    int ids = merak_graph_find(g, "input_ids"), tgt = merak_graph_find(g, "targets");
    s->ids_t = merak_exec_tensor(s->e, 0, ids) ? ids : -1;
    s->tgt_t = merak_exec_tensor(s->e, 0, tgt) ? tgt : -1;
    s->ids_tmp = malloc((size_t)B * T * sizeof *s->ids_tmp);
    s->tgt_tmp = malloc((size_t)B * T * sizeof *s->tgt_tmp);
    s->act_req = calloc((size_t)s->sched.nslots, sizeof *s->act_req);
    s->grad_req = calloc((size_t)s->sched.nslots, sizeof *s->grad_req);
    s->tied = calloc((size_t)merak_exec_num_params(s->e) + 1, 1);
    if (!s->ids_tmp || !s->tgt_tmp || !s->act_req || !s->grad_req || !s->tied)
        return merak_errf(err, errlen, "out of memory");
    /* Parameters both end stages read (the tied embedding) are reduced over
     * the tied group; the last stage's copy is left out of the norm. */
    if (gr->pp > 1 && (s->first || s->last)) {
        int ob = s->first ? bounds[gr->pp - 1] : 0, oe = s->first ? bounds[gr->pp] : bounds[1];
        for (int i = 0; i < merak_exec_num_params(s->e); i++)
            s->tied[i] = range_reads(g, ob, oe, merak_exec_param_tensor(s->e, i));
    }
    /* Gradient reduction: buckets, or this rank's ZeRO share. */
    merak_exec_grads_flat(s->e, &s->flat_n);
    if (s->flat_n > (size_t)INT32_MAX)
        return merak_errf(err, errlen, "stage %d holds %zu parameter floats, more than MPI counts allow",
                          p, s->flat_n);
    s->zlo = 0;
    s->zhi = s->flat_n;
    if (a->zero && gr->dp > 1) {
        /* dp shares of ceil(flat_n / dp) floats, the last one shorter */
        size_t chunk = (s->flat_n + (size_t)gr->dp - 1) / (size_t)gr->dp;
        s->zcounts = calloc((size_t)gr->dp, sizeof *s->zcounts);
        s->zshard = calloc(chunk + 1, sizeof *s->zshard);
        if (!s->zcounts || !s->zshard)
            return merak_errf(err, errlen, "out of memory");
        for (int r = 0; r < gr->dp; r++) {
            size_t lo = chunk * (size_t)r < s->flat_n ? chunk * (size_t)r : s->flat_n;
            size_t hi = lo + chunk < s->flat_n ? lo + chunk : s->flat_n;
            s->zcounts[r] = (int)(hi - lo);
            if (r == gr->dp_rank)
                s->zlo = lo, s->zhi = hi;
        }
    } else if (gr->dp > 1) {
        double mb = a->bucket_mb > 0 ? a->bucket_mb : 25.0;
        s->bucket = (size_t)(mb * 1048576.0 / sizeof(float));
        if (s->bucket < 1)
            s->bucket = 1;
        size_t nbuckets = s->flat_n / s->bucket + 2;
        s->breq = calloc(nbuckets, sizeof *s->breq);
        s->blo = calloc(nbuckets, sizeof *s->blo);
        s->bhi = calloc(nbuckets, sizeof *s->bhi);
        s->bdone = calloc(nbuckets, 1);
        if (!s->breq || !s->blo || !s->bhi || !s->bdone)
            return merak_errf(err, errlen, "out of memory");
        for (int i = 0; i < s->sched.n; i++)
            if (s->sched.instr[i].kind == MERAK_I_BWD || s->sched.instr[i].kind == MERAK_I_BWD_WEIGHT)
                s->last_bwd = i;
    }
    /* Only stages that read token ids or targets open the data. */
    if (s->ids_t >= 0 || s->tgt_t >= 0) {
        if (merak_data_open(a->data, merak_graph_loss_vocab(model), &s->data, err, errlen) < 0)
            return -1;
        s->windows = merak_data_num_windows(s->data, B, T);
        if (s->windows == 0)
            return merak_errf(err, errlen, "%s: %llu tokens are fewer than one window of %d x %d + 1",
                              a->data, (unsigned long long)merak_data_num_tokens(s->data), B, T);
    }
    if (a->init)
        return merak_weights_load(g, s->e, a->init, err, errlen);
    merak_init_params(g, s->e, a->seed);
    return 0;
}

/* Bytes moved so far by the tp, pp, dp and tied groups. */
static void group_bytes(const stage *s, uint64_t b[4])
{
    merak_group *g[4] = {s->tp_g, s->pp_g, s->dp_g, s->tied_g};
    for (int i = 0; i < 4; i++)
        b[i] = g[i] ? merak_group_bytes(g[i]) : 0;
}

/* This rank's part of the squared gradient norm: every parameter once (the
 * tied copy on the last stage left out, a parameter tensor parallelism
 * keeps whole counted on tp rank 0), over the floats this rank holds
 * reduced: everything on dp rank 0, or its ZeRO share. */
static double grad_sumsq(const stage *s)
{
    const merak_grid *gr = s->grid;
    if (!s->zcounts && gr->dp_rank != 0)
        return 0;
    size_t n;
    const float *g0 = merak_exec_grads_flat(s->e, &n);
    double ss = 0;
    for (int i = 0; i < merak_exec_num_params(s->e); i++) {
        const merak_tensor *t = &s->g->tensors[merak_exec_param_tensor(s->e, i)];
        if ((s->last && s->tied[i]) || (t->shard_dim < 0 && gr->tp_rank != 0))
            continue;
        size_t a = (size_t)(merak_exec_param_grad(s->e, i) - g0), b = a + merak_exec_param_elems(s->e, i);
        a = a < s->zlo ? s->zlo : a;
        b = b > s->zhi ? s->zhi : b;
        if (a < b)
            ss += s->k->sumsq(g0 + a, b - a);
    }
    return ss;
}

/* The parameters ops [begin, end) read, in first-use order: the order
 * merak_exec_create gives them.  Returns the count. */
static int stage_params(const merak_graph *g, int begin, int end, int *roots)
{
    int n = 0;
    for (int i = begin; i < end; i++)
        for (int j = 0; j < g->ops[i].nin; j++) {
            int t = g->ops[i].in[j], seen = 0;
            if (t < 0 || g->tensors[t].kind != MERAK_T_PARAM)
                continue;
            t = merak_graph_param_root(g, t);
            for (int q = 0; q < n; q++)
                seen |= roots[q] == t;
            if (!seen)
                roots[n++] = t;
        }
    return n;
}

/* Gathers every parameter whole on world rank 0, from replica 0's stages and
 * tensor-parallel shards (every replica holds the same values), and writes
 * them.  Rank 0 works out each rank's shard and stage from the whole graph
 * `model` and the stage bounds in it. */
static int save_gathered(stage *s, const merak_graph *model, const int *bounds, const char *path,
                         char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    if (gr->dp_rank != 0)
        return 0;
    if (gr->rank != 0) {
        for (int i = 0; i < merak_exec_num_params(s->e); i++)
            if (merak_send(s->world_g, merak_exec_param_data(s->e, i),
                           merak_exec_param_elems(s->e, i) * sizeof(float), 0, i, NULL) < 0)
                return merak_errf(err, errlen, "sending rank %d's parameters failed", gr->rank);
        return 0;
    }
    int nt = model->ntensors, n = 0, rc = 0;
    int *roots = calloc((size_t)nt, sizeof *roots), *tensors = calloc((size_t)nt, sizeof *tensors);
    float **whole = calloc((size_t)nt, sizeof *whole);   /* by tensor id of model */
    float *buf = NULL;
    if (!roots || !tensors || !whole)
        rc = merak_errf(err, errlen, "out of memory gathering parameters");
    for (int p = 0; p < gr->pp && rc == 0; p++)
        for (int r = 0; r < gr->tp && rc == 0; r++) {
            merak_graph *shard = gr->tp > 1 ? merak_graph_shard(model, gr->tp, r, s->rules, s->nrules,
                                                                err, errlen) : NULL;
            const merak_graph *gl = shard ? shard : model;
            if (gr->tp > 1 && !shard) {
                rc = -1;
                break;
            }
            int count = stage_params(gl, merak_partition_map(gl, bounds[p]),
                                     merak_partition_map(gl, bounds[p + 1]), roots);
            int src = merak_grid_rank(gr, 0, r, p);
            for (int i = 0; i < count && rc == 0; i++) {
                const merak_tensor *lt = &gl->tensors[roots[i]];
                int gt = merak_graph_find(model, lt->name);
                size_t bytes = (size_t)merak_tensor_elems(lt) * sizeof(float);
                float *b = gt < 0 ? NULL : realloc(buf, bytes);
                if (!b) {
                    rc = gt < 0 ? merak_errf(err, errlen, "parameter %s is not in the model", lt->name)
                                : merak_errf(err, errlen, "out of memory gathering parameters");
                    break;
                }
                buf = b;
                if (src == 0)
                    memcpy(buf, merak_exec_param_data(s->e, i), bytes);
                else if (merak_recv(s->world_g, buf, bytes, src, i, NULL) < 0)
                    rc = merak_errf(err, errlen, "receiving rank %d's parameters failed", src);
                if (!whole[gt]) {  /* a tied parameter arrives twice, with equal values */
                    whole[gt] = malloc((size_t)merak_tensor_elems(&model->tensors[gt]) * sizeof(float));
                    if (!whole[gt]) {
                        rc = merak_errf(err, errlen, "out of memory gathering parameters");
                        break;
                    }
                    tensors[n++] = gt;
                }
                merak_shard_place(lt, buf, whole[gt]);
            }
            merak_graph_destroy(shard);
        }
    if (rc == 0) {
        const float **data = calloc((size_t)(n ? n : 1), sizeof *data);
        for (int i = 0; data && i < n; i++)
            data[i] = whole[tensors[i]];
        rc = data ? merak_weights_save_arrays(model, n, tensors, data, path, NULL, err, errlen)
                  : merak_errf(err, errlen, "out of memory gathering parameters");
        free(data);
    }
    for (int i = 0; whole && i < nt; i++)
        free(whole[i]);
    free(roots), free(tensors), free(whole), free(buf);
    return rc;
}

int merak_train_pipeline(merak_comm *comm, const merak_graph *g, const merak_args *a,
                         char *err, size_t errlen)
{
    stage s;
    memset(&s, 0, sizeof s);
    if (errlen)
        err[0] = 0;
    s.comm = comm;
    s.grid = merak_comm_grid(comm);
    s.pp_g = merak_comm_group(comm, MERAK_GROUP_PP);
    s.dp_g = merak_comm_group(comm, MERAK_GROUP_DP);
    s.tied_g = merak_comm_group(comm, MERAK_GROUP_TIED);
    s.world_g = merak_comm_group(comm, MERAK_GROUP_WORLD);
    s.tp_g = merak_comm_group(comm, MERAK_GROUP_TP);
    s.g = g;
    s.k = merak_kernels_cpu();
    merak_kernels_cpu_set_threads(a->threads);
    const merak_grid *gr = s.grid;
    int M = a->micro_batches, failed = 0;

    merak_sched_kind kind;
    merak_partition_kind pkind;
    const char *p2p = a->p2p ? a->p2p : "mpi";
    int ucx = strcmp(p2p, "ucx") == 0;
    /* Stage bounds in the whole graph (the same on every rank) and in this
     * rank's tensor-parallel shard of it. */
    s.last_bwd = -1;
    s.bounds = malloc((size_t)(gr->pp + 1) * sizeof *s.bounds);
    s.lbounds = malloc((size_t)(gr->pp + 1) * sizeof *s.lbounds);
    if (!s.bounds || !s.lbounds)
        failed = merak_errf(err, errlen, "out of memory");
    else if (merak_sched_parse(a->pipe_schedule ? a->pipe_schedule : "1f1b", &kind) < 0)
        failed = merak_errf(err, errlen, "unknown schedule '%s' (gpipe, 1f1b)", a->pipe_schedule);
    else if (!ucx && strcmp(p2p, "mpi") != 0)
        failed = merak_errf(err, errlen, "unknown point-to-point backend '%s' (mpi, ucx)", p2p);
    else if (merak_partition_parse(a->partition ? a->partition : "parameters", &pkind) < 0)
        failed = merak_errf(err, errlen, "unknown partition method '%s' (uniform, parameters)", a->partition);
    else if (merak_partition(g, gr->pp, pkind, s.bounds, err, errlen) < 0)
        failed = -1;
    else if (a->tp_rules && merak_tp_rules_load(g, a->tp_rules, &s.rules, &s.nrules, err, errlen) < 0)
        failed = -1;
    else if (gr->tp > 1 &&
             !(s.shard = merak_graph_shard(g, gr->tp, gr->tp_rank, s.rules, s.nrules, err, errlen)))
        failed = -1;
    if (!failed) {
        s.g = s.shard ? s.shard : g;
        for (int p = 0; p <= gr->pp; p++)
            s.lbounds[p] = merak_partition_map(s.g, s.bounds[p]);
        failed = stage_setup(&s, g, s.g, a, s.lbounds, kind, err, errlen);
    }
    if (agree(&s, failed, err, errlen) < 0) {
        stage_free(&s);
        return -1;
    }
    /* Activations and gradients over UCX: the stage's pipeline group
     * switches backends together (and back at the end). */
    if (ucx && gr->pp > 1 && merak_group_use_ucx(s.pp_g, err, errlen) < 0) {
        stage_free(&s);
        return -1;
    }

    merak_adamw_opts ao = {a->beta1, a->beta2, a->eps, a->weight_decay};
    s.opt = merak_optim_create_range(s.g, s.e, &ao, s.zlo, s.zhi);
    FILE *metrics = NULL;
    int rank0 = gr->rank == 0, step = 0, rc = 0;
    if (!s.opt)
        failed = merak_errf(err, errlen, "out of memory for the optimizer state");
    else if (rank0 && a->metrics && !(metrics = fopen(a->metrics, "a")))
        failed = merak_errf(err, errlen, "%s: cannot open for appending", a->metrics);
    if (agree(&s, failed, err, errlen) < 0) {
        merak_group_use_mpi(s.pp_g);
        stage_free(&s);
        return -1;
    }
    if (rank0 && a->on_start) {
        merak_run_info ri = {gr->dp, gr->tp, gr->pp, gr->world, merak_exec_arena_bytes(s.e)};
        a->on_start(&ri, a->user);
    }

    merak_exec_set_loss_scale(s.e, 1.0f / (float)(M * gr->dp));
    merak_lr_sched sched = {a->lr_schedule, a->lr, a->min_lr, a->warmup, a->steps};
    double t_start = merak_now();
    for (step = 0; step < a->steps; step++) {
        /* Stop together: rank 0's flag decides for everyone. */
        double stop = rank0 && a->stop && *a->stop;
        merak_allreduce_f64(s.world_g, &stop, 1);
        if (stop > 0)
            break;
        double t0 = merak_now();
        uint64_t b0[4];
        group_bytes(&s, b0);
        merak_exec_zero_grads(s.e);
        s.loss_sum = 0;
        s.launched = s.flat_n;
        s.nb = 0;
        s.done_early = 0;
        for (int i = 0; i < s.sched.n && rc == 0; i++) {
            rc = run_instr(&s, a, &s.sched.instr[i], step, err, errlen);
            merak_group_progress(s.pp_g);
        }
        if (rc < 0) {
            if (!err[0])
                merak_errf(err, errlen, "step %d: a pipeline send or receive (over %s) failed", step, p2p);
            /* Only this rank knows; its peers may be blocked on it. */
            stage_free(&s);
            return -2;
        }
        /* Loss: the last stages' sums over all replicas.  Norm: every
         * parameter once (the tied copy on the last stage left out, a
         * parameter tensor parallelism keeps whole counted on tp rank 0). */
        double red[2] = {s.last && gr->tp_rank == 0 ? s.loss_sum : 0, 0};
        red[1] = grad_sumsq(&s);
        merak_allreduce_f64(s.world_g, red, 2);
        double loss = red[0] / (M * gr->dp), norm = sqrt(red[1]);
        if (!isfinite(loss) || !isfinite(norm)) {
            rc = merak_errf(err, errlen, "step %d: loss %g, gradient norm %g: training diverged", step, loss, norm);
            break;
        }
        merak_clip_grads_range(s.e, s.k, norm, a->clip, s.zlo, s.zhi);
        float lr = merak_lr_at(&sched, step);
        merak_optim_step(s.opt, s.e, s.k, lr);
        size_t n;
        if (s.zcounts && merak_allgather(s.dp_g, merak_exec_params_flat(s.e, &n), s.zcounts) < 0) {
            merak_errf(err, errlen, "step %d: gathering the parameters failed", step);
            stage_free(&s);
            return -2;
        }
        double t1 = merak_now();
        uint64_t b1[4];
        group_bytes(&s, b1);
        if (rank0) {
            merak_step_info info = {
                .step = step, .steps = a->steps, .loss = loss, .grad_norm = norm, .lr = lr,
                .tokens_per_s = (double)a->micro_batch * a->seq_len * M * gr->dp / (t1 - t0),
                .step_ms = (t1 - t0) * 1e3,
                .eta_s = (t1 - t_start) / (step + 1) * (a->steps - step - 1),
                .dp_wait_ms = s.wait_s * 1e3,
                .dp_overlap = s.flat_n ? (double)s.done_early / (double)s.flat_n : 0,
                .tp_bytes = (double)(b1[0] - b0[0]),
                .pp_bytes = (double)(b1[1] - b0[1]),
                .dp_bytes = (double)(b1[2] - b0[2]),
                .tied_bytes = (double)(b1[3] - b0[3]),
            };
            if (metrics)
                merak_metrics_write(metrics, &info);
            if (a->on_step)
                a->on_step(&info, a->user);
        }
    }
    if (metrics)
        fclose(metrics);
    failed = rc;
    if (failed == 0 && a->save_weights)
        failed = save_gathered(&s, g, s.bounds, a->save_weights, err, errlen);
    int ok = agree(&s, failed, err, errlen) == 0;
    merak_group_use_mpi(s.pp_g);
    stage_free(&s);
    return ok ? step : -1;
}
