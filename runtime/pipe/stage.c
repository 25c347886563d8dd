/*
 * stage.c - one rank's pipeline stage: its slice of its tensor-parallel
 * shard of the graph, run by executing its schedule's instruction list,
 * with the gradient reductions over the dp and tied groups (see stage.h).
 *
 * Equivalence with one process: with dp replicas of M micro-batches each,
 * every micro-batch's loss is scaled by 1/(M*dp) and the dp all-reduce
 * sums, so the gradients are those of one process running M*dp
 * micro-batches (the step loop numbers the micro-batches to match).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "errf.h"
#include "grow.h"
#include "stage.h"
#include "trace.h"

struct merak_stage {
    merak_comm *comm;
    const merak_grid *grid;
    merak_group *pp_g, *dp_g, *tied_g, *world_g, *tp_g;
    const merak_graph *model;     /* the whole graph */
    const merak_graph *g;         /* this rank's graph: shard, or the model when tp = 1 */
    merak_graph *shard;           /* owned: this rank's tensor-parallel shard, or NULL */
    const merak_tp_rule *rules;
    int nrules;
    int V;                        /* model chunks on this rank (interleaved), else 1 */
    int M;                        /* micro-batches per step */
    int *bounds;                  /* virtual stage bounds in the model ([pp*V + 1]); chunk c
                                   * of pp rank p is virtual stage c*pp + p */
    const merak_kernels *k;
    merak_exec_comm tpc;
    int tp_overlap;               /* sub-batches per micro-batch (1: the whole) */
    merak_req tp_req[MERAK_MAX_SUB_BATCHES]; /* sub-batch k's tensor-parallel sum in flight */
    merak_exec *e;
    merak_exec_chunk xc[MERAK_MAX_CHUNKS]; /* the executor's op ranges */
    merak_schedule sched;
    int first, last;              /* this rank is the first / last stage */
    int in_t[MERAK_MAX_CHUNKS], out_t[MERAK_MAX_CHUNKS]; /* per chunk: activation received / sent, or -1 */
    size_t in_bytes[MERAK_MAX_CHUNKS], out_bytes[MERAK_MAX_CHUNKS];
    int ids_t, tgt_t;             /* inputs this stage holds, or -1 */
    int loads;                    /* reads ids or targets */
    int32_t *ids_h, *tgt_h;       /* host window buffers (B*T) */
    merak_req *act_req, *grad_req;/* per slot */
    merak_req *sends;             /* posted sends, waited by WAIT_SENDS */
    int *send_slot;               /* [nsends] the slot each send reads */
    int nsends;
    size_t cap_sends, cap_slots;  /* sends' and send_slot's (merak_grow) */
    int layers, recomputed;       /* this stage's layers, and how many it recomputes */
    unsigned char *tied;          /* [nparams] 1 if the param is shared with the other end stage */
    double loss_sum;              /* this step's micro-batch losses (last stage) */
    merak_trace *trace;           /* records the timeline, or NULL */
    int cur_mb, cur_chunk;        /* micro-batch and chunk of the instruction running */
    uint64_t b0[4];               /* group bytes when the step began */

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
    double wait_s;                /* waiting for the reductions after the backward */
    int dp_failed;
    int pp_failed;                /* a pipeline transfer failed while polled */
    /* ZeRO-1: this rank updates floats [zlo, zhi) of the flat buffers */
    int *zcounts;                 /* [dp] floats per dp rank; NULL without ZeRO */
    size_t zlo, zhi;              /* without ZeRO: 0, flat_n */
    float *zshard;                /* reduce-scatter target, zhi - zlo floats (backend memory) */
    size_t zshard_bytes;
    int plan_only;                /* merak_stage_plan: plan the memory, allocate no backend memory */
};

/* Is parameter tensor t read by any op in [begin, end)? */
static int range_reads(const merak_graph *g, int begin, int end, int t)
{
    for (int i = begin; i < end; i++)
        for (int j = 0; j < g->ops[i].nin; j++)
            if (g->ops[i].in[j] >= 0 && merak_graph_param_root(g, g->ops[i].in[j]) == t)
                return 1;
    return 0;
}

/* -1 with err = "WHAT: the comm layer's reason". */
static int comm_failed(merak_stage *s, const char *what, char *err, size_t errlen)
{
    return merak_errf(err, errlen, "%s: %s", what, merak_comm_error(s->comm));
}

/* ------------------------------------------------------------------ data-parallel reduction */

static int launch_bucket(merak_stage *s, size_t lo, size_t hi)
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
static void dp_progress(merak_stage *s)
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
    merak_stage *s = ctx;
    while (s->launched >= from + s->bucket) {
        size_t lo = s->launched - s->bucket;
        if (launch_bucket(s, lo, s->launched) < 0)
            s->dp_failed = 1;
        s->launched = lo;
    }
}

/* Buckets: launches the rest of the flat buffer and waits for every bucket. */
static int finish_buckets(merak_stage *s)
{
    if (!s->breq)
        return 0;
    if (s->launched > 0 && launch_bucket(s, 0, s->launched) < 0)
        return -1;
    s->launched = 0;
    for (int i = 0; i < s->nb; i++)
        if (merak_wait(&s->breq[i]) < 0)
            return -1;
    return s->dp_failed ? -1 : 0;
}

/* REDUCE_TIED: the tied embedding's gradient summed over its two stages.
 * Buckets sum over dp first (they may hold it in flight); with ZeRO the
 * tied sum comes first, while every rank still holds the whole buffer. */
static int reduce_tied(merak_stage *s)
{
    if (!s->tied_g)
        return 0;
    if (finish_buckets(s) < 0)
        return -1;
    for (int i = 0; i < merak_exec_num_params(s->e); i++)
        if (s->tied[i] && merak_allreduce(s->tied_g, merak_exec_param_grad(s->e, i),
                                           merak_exec_param_elems(s->e, i), NULL) < 0)
            return -1;
    return 0;
}

/* REDUCE_DP: the gradients over dp: the rest of the buckets, or with ZeRO
 * reduce-scattered into this rank's share. */
static int reduce_dp(merak_stage *s)
{
    if (!s->zcounts)
        return finish_buckets(s);
    size_t n;
    float *g = merak_exec_grads_flat(s->e, &n);
    if (merak_reduce_scatter(s->dp_g, g, s->zshard, s->zcounts) < 0)
        return -1;
    return s->k->copy(g + s->zlo, s->zshard, (s->zhi - s->zlo) * sizeof *g, MERAK_COPY_D2D);
}

static int post_send(merak_stage *s, int slot, const void *buf, size_t bytes, int peer, int tag)
{
    if (merak_grow((void **)&s->sends, &s->cap_sends, (size_t)s->nsends + 1, sizeof *s->sends) < 0 ||
        merak_grow((void **)&s->send_slot, &s->cap_slots, (size_t)s->nsends + 1, sizeof *s->send_slot) < 0)
        return -1;
    memset(&s->sends[s->nsends], 0, sizeof *s->sends);
    s->send_slot[s->nsends] = slot;
    return merak_send(s->pp_g, buf, bytes, peer, tag, &s->sends[s->nsends++]);
}

/* WAIT_SENDS: the sends reading `slot`, or (slot -1) all of them. */
static int wait_sends(merak_stage *s, int slot)
{
    int kept = 0;
    for (int i = 0; i < s->nsends; i++) {
        if (slot >= 0 && s->send_slot[i] != slot) {
            s->sends[kept] = s->sends[i];
            s->send_slot[kept++] = s->send_slot[i];
        } else if (merak_wait(&s->sends[i]) < 0) {
            return -1;
        }
    }
    s->nsends = kept;
    return 0;
}

/* The inputs the slot's chunk reads (ids on the first chunk of the first
 * stage, targets on the last chunk of the last). */
static int load(merak_stage *s, const merak_stage_hooks *h, int mb, int slot, char *err,
                size_t errlen)
{
    if (h->load(h->ctx, mb, s->ids_h, s->tgt_h, err, errlen) < 0)
        return -1;
    int ids = s->ids_t >= 0 && merak_exec_tensor(s->e, slot, s->ids_t);
    int tgt = s->tgt_t >= 0 && merak_exec_tensor(s->e, slot, s->tgt_t);
    if ((ids && merak_exec_tensor_write(s->e, slot, s->ids_t, s->ids_h) < 0) ||
        (tgt && merak_exec_tensor_write(s->e, slot, s->tgt_t, s->tgt_h) < 0))
        return merak_errf(err, errlen, "copying micro-batch %d's tokens to the %s backend failed", mb,
                          s->k->name);
    return 0;
}

static int backward(merak_stage *s, const merak_instr *in, char *err, size_t errlen)
{
    /* The stage's last weight gradients: reduce buckets as they finish. */
    int hook = s->breq && in - s->sched.instr == s->last_bwd;
    if (hook)
        merak_exec_set_grad_hook(s->e, grad_ready, s);
    int rc = in->kind == MERAK_I_BWD         ? merak_exec_backward(s->e, in->slot)
             : in->kind == MERAK_I_BWD_INPUT ? merak_exec_backward_input(s->e, in->slot)
                                             : merak_exec_backward_weight(s->e, in->slot);
    if (hook)
        merak_exec_set_grad_hook(s->e, NULL, NULL);
    if (s->dp_failed)
        return comm_failed(s, "a data-parallel all-reduce", err, errlen);
    if (rc < 0)
        return merak_errf(err, errlen, "%s", merak_exec_error(s->e));
    return 0;
}

/* OPTIMIZER_STEP: the step loop's update, then the ZeRO shares gathered. */
static int optimizer_step(merak_stage *s, const merak_stage_hooks *h, char *err, size_t errlen)
{
    if (h->optimizer_step(h->ctx, err, errlen) < 0)
        return -1;
    size_t n;
    if (s->zcounts && merak_allgather(s->dp_g, merak_exec_params_flat(s->e, &n), s->zcounts) < 0)
        return comm_failed(s, "gathering the parameters", err, errlen);
    return 0;
}

/* Executor poll, after every op: the pipeline receives and sends and the
 * data-parallel buckets in flight move while this stage computes (MPI
 * moves a large message only while both ranks are inside MPI: without
 * this, where shared memory has no single-copy, an activation sent before
 * a forward waited for the end of it, and every stage ran at the pace of
 * those waits; bench/RESULTS.md section 9).  A transfer that fails here is
 * over; pp_failed reports it after the instruction. */
static void poll_req(merak_stage *s, merak_req *r)
{
    if (r->active && merak_test(r) < 0)
        s->pp_failed = 1;
}

static void poll_comm(void *ctx)
{
    merak_stage *s = ctx;
    for (int i = 0; i < s->sched.nslots; i++) {
        poll_req(s, &s->act_req[i]);
        poll_req(s, &s->grad_req[i]);
    }
    for (int i = 0; i < s->nsends; i++)
        poll_req(s, &s->sends[i]);
    dp_progress(s);
}

/* Message tags: an activation or (grad 1) a gradient of micro-batch mb
 * for the receiver's chunk c. */
static int tag(const merak_stage *s, int c, int mb, int grad) { return (c * s->M + mb) * 2 + grad; }

/* Runs one instruction; returns 0 or -1 with err.  Chunk c's activation
 * goes to the next stage's chunk c, or from the last stage to the first
 * stage's chunk c+1; gradients come back the same way. */
static int dispatch(merak_stage *s, const merak_stage_hooks *h, const merak_instr *in, char *err,
                    size_t errlen)
{
    const int slot = in->slot, mb = in->mb, c = in->chunk, p = s->grid->pp_rank, pp = s->grid->pp;
    const int prev = p > 0 ? p - 1 : pp - 1, next = p + 1 < pp ? p + 1 : 0;
    const int next_c = p + 1 < pp ? c : c + 1, prev_c = p > 0 ? c : c - 1;
    switch (in->kind) {
    case MERAK_I_LOAD: return load(s, h, mb, slot, err, errlen);
    case MERAK_I_RECV_ACT:
        return merak_recv(s->pp_g, merak_exec_tensor(s->e, slot, s->in_t[c]), s->in_bytes[c], prev,
                          tag(s, c, mb, 0), &s->act_req[slot]);
    case MERAK_I_WAIT_ACT: return merak_wait(&s->act_req[slot]);
    case MERAK_I_FWD:
        if (merak_exec_forward(s->e, slot, h->seed(h->ctx, mb)) < 0)
            return merak_errf(err, errlen, "%s", merak_exec_error(s->e));
        if (s->last && c == s->V - 1)
            s->loss_sum += merak_exec_loss(s->e, slot);
        return 0;
    case MERAK_I_SEND_ACT:
        return post_send(s, slot, merak_exec_tensor(s->e, slot, s->out_t[c]), s->out_bytes[c], next,
                         tag(s, next_c, mb, 0));
    case MERAK_I_RECV_GRAD:
        return merak_recv(s->pp_g, merak_exec_grad(s->e, slot, s->out_t[c]), s->out_bytes[c], next,
                          tag(s, c, mb, 1), &s->grad_req[slot]);
    case MERAK_I_WAIT_GRAD: return merak_wait(&s->grad_req[slot]);
    case MERAK_I_RECOMPUTE:
        if (merak_exec_recompute(s->e, slot) < 0)
            return merak_errf(err, errlen, "%s", merak_exec_error(s->e));
        return 0;
    case MERAK_I_BWD:
    case MERAK_I_BWD_INPUT:
    case MERAK_I_BWD_WEIGHT: return backward(s, in, err, errlen);
    case MERAK_I_SEND_GRAD:
        return post_send(s, slot, merak_exec_grad(s->e, slot, s->in_t[c]), s->in_bytes[c], prev,
                         tag(s, prev_c, mb, 1));
    case MERAK_I_WAIT_SENDS: return wait_sends(s, slot);
    case MERAK_I_REDUCE_TIED:
    case MERAK_I_REDUCE_DP: {
        double t0 = merak_now();
        int rc = in->kind == MERAK_I_REDUCE_TIED ? reduce_tied(s) : reduce_dp(s);
        s->wait_s += merak_now() - t0;
        return rc;
    }
    case MERAK_I_OPTIMIZER_STEP: return optimizer_step(s, h, err, errlen);
    default: return merak_errf(err, errlen, "unknown instruction %d", (int)in->kind);
    }
}

/* Runs one instruction, and reports a transfer that its polls saw fail. */
static int run_instr(merak_stage *s, const merak_stage_hooks *h, const merak_instr *in, char *err,
                     size_t errlen)
{
    int rc = dispatch(s, h, in, err, errlen);
    if (rc == 0 && s->pp_failed)
        rc = comm_failed(s, "a pipeline transfer", err, errlen);
    return rc;
}

/* Bytes moved so far by the tp, pp, dp and tied groups. */
static void group_bytes(const merak_stage *s, uint64_t b[4])
{
    merak_group *g[4] = {s->tp_g, s->pp_g, s->dp_g, s->tied_g};
    for (int i = 0; i < 4; i++)
        b[i] = g[i] ? merak_group_bytes(g[i]) : 0;
}

/* Runs the list sc (the step's, or an evaluation's); 0, or -1 with err
 * naming the instruction (after `what`, "" or "evaluating: "). */
static int run_list(merak_stage *s, const merak_stage_hooks *h, const merak_schedule *sc, const char *what,
                    char *err, size_t errlen)
{
    for (int i = 0; i < sc->n; i++) {
        const merak_instr *in = &sc->instr[i];
        double t0 = s->trace ? merak_now() : 0;
        s->cur_mb = in->mb;
        s->cur_chunk = in->chunk;
        int rc = run_instr(s, h, in, err, errlen);
        if (s->trace && !sc->forward_only)
            merak_trace_add(s->trace, 0, in->kind, in->mb, in->chunk, t0, merak_now());
        merak_group_progress(s->pp_g);
        if (rc < 0) {
            /* name the instruction; a group call's reason if nothing else said why */
            char why[400];
            snprintf(why, sizeof why, "%s", err[0] ? err : merak_comm_error(s->comm));
            if (in->mb >= 0 && s->V > 1)
                merak_errf(err, errlen, "%s%s of micro-batch %d (chunk %d): %s", what, merak_instr_name(in->kind),
                           in->mb, in->chunk, why);
            else if (in->mb >= 0)
                merak_errf(err, errlen, "%s%s of micro-batch %d: %s", what, merak_instr_name(in->kind), in->mb,
                           why);
            else
                merak_errf(err, errlen, "%s%s: %s", what, merak_instr_name(in->kind), why);
            return -1;
        }
    }
    return 0;
}

int merak_stage_run(merak_stage *s, const merak_stage_hooks *h, char *err, size_t errlen)
{
    if (errlen)
        err[0] = 0;
    group_bytes(s, s->b0);
    s->loss_sum = 0;
    s->launched = s->flat_n;
    s->nb = 0;
    s->done_early = 0;
    s->wait_s = 0;
    if (merak_exec_zero_grads(s->e) < 0)
        return merak_errf(err, errlen, "zeroing the gradients on the %s backend failed", s->k->name);
    if (run_list(s, h, &s->sched, "", err, errlen) < 0)
        return -1;
    /* The step's device work is done (its time counts) and its errors show. */
    if (s->k->synchronize() < 0)
        return merak_errf(err, errlen, "the %s backend failed during the step", s->k->name);
    return 0;
}

/* The forward-only list of schedule.c (merak_schedule_build_eval, which
 * the simulator checks), run by the same interpreter in evaluation mode. */
int merak_stage_eval(merak_stage *s, const merak_stage_hooks *h, int M, double *loss_sum,
                     char *err, size_t errlen)
{
    if (errlen)
        err[0] = 0;
    merak_schedule ev;
    if (merak_schedule_build_eval(&s->sched, M, &ev, err, errlen) < 0)
        return -1;
    s->loss_sum = 0;
    merak_exec_set_eval(s->e, 1);
    int rc = run_list(s, h, &ev, "evaluating: ", err, errlen);
    merak_exec_set_eval(s->e, 0);
    merak_schedule_free(&ev);
    if (rc == 0 && s->k->synchronize() < 0)
        rc = merak_errf(err, errlen, "the %s backend failed during the evaluation", s->k->name);
    *loss_sum = merak_stage_loss_sum(s);
    return rc;
}

/* ------------------------------------------------------------------ results */

double merak_stage_loss_sum(const merak_stage *s)
{
    return s->last && s->grid->tp_rank == 0 ? s->loss_sum : 0;
}

/* Every parameter once (the tied copy on the last stage left out, a
 * parameter tensor parallelism keeps whole counted on tp rank 0), over the
 * floats this rank holds reduced: everything on dp rank 0, or its ZeRO
 * share.  Parameters counted one after another are summed as one range of
 * the flat buffer (its alignment gaps hold zeros): a device backend reads
 * back one number per range, not per parameter. */
double merak_stage_grad_sumsq(const merak_stage *s)
{
    const merak_grid *gr = s->grid;
    if (!s->zcounts && gr->dp_rank != 0)
        return 0;
    const int np = merak_exec_num_params(s->e);
    size_t n, lo = 0, hi = 0;   /* the range gathered so far, [lo, hi) (empty: lo == hi) */
    const float *g0 = merak_exec_grads_flat(s->e, &n);
    double ss = 0;
    for (int i = 0; i < np; i++) {
        const merak_tensor *t = &s->g->tensors[merak_exec_param_tensor(s->e, i)];
        size_t a = (size_t)(merak_exec_param_grad(s->e, i) - g0), b = a + merak_exec_param_elems(s->e, i);
        a = a < s->zlo ? s->zlo : a;
        b = b > s->zhi ? s->zhi : b;
        if (a >= b)
            continue;   /* none of it in this rank's share */
        const int counted = !(s->last && s->tied[i]) && !(t->shard_dim < 0 && gr->tp_rank != 0);
        if (counted && lo < hi && a >= hi) {
            hi = b;     /* the next parameter of the flat buffer: the range grows */
            continue;
        }
        if (lo < hi)
            ss += s->k->sumsq(g0 + lo, hi - lo);
        lo = counted ? a : 0;
        hi = counted ? b : 0;
    }
    if (lo < hi)
        ss += s->k->sumsq(g0 + lo, hi - lo);
    return ss;
}

void merak_stage_step_stats(const merak_stage *s, merak_step_info *info)
{
    uint64_t b1[4];
    group_bytes(s, b1);
    info->dp_wait_ms = s->wait_s * 1e3;
    info->dp_overlap = s->breq && s->flat_n ? (double)s->done_early / (double)s->flat_n : 0;
    info->tp_bytes = (double)(b1[0] - s->b0[0]);
    info->pp_bytes = (double)(b1[1] - s->b0[1]);
    info->dp_bytes = (double)(b1[2] - s->b0[2]);
    info->tied_bytes = (double)(b1[3] - s->b0[3]);
}

void merak_stage_set_trace(merak_stage *s, merak_trace *t) { s->trace = t; }
merak_exec *merak_stage_exec(const merak_stage *s) { return s->e; }
int merak_stage_chunks(const merak_stage *s) { return s->V; }
const merak_graph *merak_stage_graph(const merak_stage *s) { return s->g; }
int merak_stage_loads(const merak_stage *s) { return s->loads; }

void merak_stage_memory(const merak_stage *s, size_t *bytes, int *layers, int *recomputed)
{
    *bytes = merak_exec_arena_bytes(s->e);
    *layers = s->layers;
    *recomputed = s->recomputed;
}

const merak_graph *merak_stage_model(const merak_stage *s) { return s->model; }

int merak_stage_allgather_share(merak_stage *s, float *buf, char *err, size_t errlen)
{
    if (s->zcounts && merak_allgather(s->dp_g, buf, s->zcounts) < 0)
        return comm_failed(s, "gathering the optimizer state's shares", err, errlen);
    return 0;
}

void merak_stage_share(const merak_stage *s, size_t *lo, size_t *hi)
{
    *lo = s->zlo;
    *hi = s->zhi;
}

/* ------------------------------------------------------------------ building */

void merak_stage_destroy(merak_stage *s)
{
    if (!s)
        return;
    merak_schedule_free(&s->sched);
    if (s->k)
        s->k->free(s->zshard);
    merak_exec_destroy(s->e);
    free(s->ids_h), free(s->tgt_h);
    free(s->act_req), free(s->grad_req), free(s->sends), free(s->send_slot), free(s->tied);
    free(s->breq), free(s->blo), free(s->bhi), free(s->bdone);
    free(s->zcounts);
    free(s->bounds);
    merak_graph_destroy(s->shard);
    free(s);
}

/* The executor's tensor-parallel sums.  The trace records the time the
 * compute waits in them: a blocking sum whole; a non-blocking one (a
 * sub-batch's) from the start call and the wait, not while it is in
 * flight behind other sub-batches' compute. */
static void tp_traced(merak_stage *s, double t0)
{
    if (s->trace)
        merak_trace_add(s->trace, 0, MERAK_TRACE_TP_ALLREDUCE, s->cur_mb, s->cur_chunk, t0, merak_now());
}

static int tp_allreduce(void *ctx, float *buf, size_t n)
{
    merak_stage *s = ctx;
    double t0 = s->trace ? merak_now() : 0;
    int rc = merak_allreduce(s->tp_g, buf, n, NULL);
    tp_traced(s, t0);
    return rc;
}

static int tp_start(void *ctx, float *buf, size_t n, int k)
{
    merak_stage *s = ctx;
    double t0 = s->trace ? merak_now() : 0;
    int rc = merak_allreduce(s->tp_g, buf, n, &s->tp_req[k]);
    tp_traced(s, t0);
    return rc;
}

static int tp_wait(void *ctx, int k)
{
    merak_stage *s = ctx;
    double t0 = s->trace ? merak_now() : 0;
    int rc = merak_wait(&s->tp_req[k]);
    tp_traced(s, t0);
    return rc;
}

static int tp_test(void *ctx, int k) { return merak_test(&((merak_stage *)ctx)->tp_req[k]); }

/* Gradient reduction over dp: this rank's ZeRO share, or buckets. */
static int setup_dp(merak_stage *s, const merak_stage_opts *o, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    merak_exec_grads_flat(s->e, &s->flat_n);
    if (s->flat_n > (size_t)INT32_MAX) {   /* the layout cannot work: more stages or tp */
        merak_errf(err, errlen, "stage %d holds %zu parameter floats, more than MPI counts allow",
                   gr->pp_rank, s->flat_n);
        return MERAK_USAGE;
    }
    s->zlo = 0;
    s->zhi = s->flat_n;
    s->last_bwd = -1;
    if (gr->dp == 1)
        return 0;
    if (o->zero) {
        /* dp shares of ceil(flat_n / dp) floats, the last one shorter */
        size_t chunk = (s->flat_n + (size_t)gr->dp - 1) / (size_t)gr->dp;
        s->zcounts = calloc((size_t)gr->dp, sizeof *s->zcounts);
        s->zshard_bytes = (chunk + 1) * sizeof *s->zshard;
        if (!s->plan_only)
            s->zshard = s->k->alloc(s->zshard_bytes);
        if (!s->zcounts || (!s->zshard && !s->plan_only))
            return merak_errf(err, errlen, "out of memory");
        for (int r = 0; r < gr->dp; r++) {
            size_t lo = chunk * (size_t)r < s->flat_n ? chunk * (size_t)r : s->flat_n;
            size_t hi = lo + chunk < s->flat_n ? lo + chunk : s->flat_n;
            s->zcounts[r] = (int)(hi - lo);
            if (r == gr->dp_rank)
                s->zlo = lo, s->zhi = hi;
        }
        return 0;
    }
    double mb = o->bucket_mb > 0 ? o->bucket_mb : 25.0;
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
    /* the executor's readiness is for a last backward on the first chunk */
    if (s->last_bwd >= 0 && s->sched.instr[s->last_bwd].chunk != 0)
        s->last_bwd = -1;
    return 0;
}

/* The stage's layers, chunk by chunk: chunk c has nl[c] layers, layer j
 * of the stage (counting through the chunks) ending at local op ends[j]. */
typedef struct stage_layers {
    int nl[MERAK_MAX_CHUNKS];
    int *ends;
    int total;
} stage_layers;

/* Of n recomputed layers, chunk c's share: the same fraction of every
 * chunk (whole layers; they add up to n). */
static int chunk_share(const stage_layers *ly, int n, int c)
{
    long before = 0;
    for (int j = 0; j < c; j++)
        before += ly->nl[j];
    return (int)((long)n * (before + ly->nl[c]) / ly->total - (long)n * before / ly->total);
}

/* The schedule, and the executor's options, for recomputing n of the
 * stage's layers (each chunk its first chunk_share). */
static int plan_layers(merak_stage *s, const merak_stage_opts *o, const int *lb, const stage_layers *ly, int n,
                       merak_exec_opts *eo, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    int p = gr->pp_rank;
    merak_schedule_spec sp = {o->schedule, gr->pp, o->micro_batches, NULL, s->V};
    /* the generator reads only this stage's entry */
    unsigned char *flags = calloc((size_t)gr->pp, 1);
    if (!flags)
        return merak_errf(err, errlen, "out of memory");
    flags[p] = n > 0;
    sp.recompute = flags;
    merak_schedule_free(&s->sched);
    int r = merak_schedule_build(&sp, p, &s->sched, err, errlen);
    free(flags);
    if (r < 0)
        return MERAK_USAGE;   /* the spec was checked: only M < S gets here */
    *eo = (merak_exec_opts){.chunks = s->xc, .nchunks = s->V, .kernels = s->k, .tp = &s->tpc,
                            .tp_overlap = s->tp_overlap};
    for (int c = 0, first = 0; c < s->V; first += ly->nl[c++]) {
        int q = c * gr->pp + p, k = s->sched.recompute ? chunk_share(ly, n, c) : 0;
        s->xc[c] = (merak_exec_chunk){lb[q], lb[q + 1], s->sched.chunk_slots[c], k ? ly->ends[first + k - 1] : 0};
    }
    if (s->sched.recompute)
        eo->npool = s->sched.npool;
    s->recomputed = s->sched.recompute ? n : 0;
    return 0;
}

/* Which of its layers this stage recomputes (the policy), its schedule, and
 * the executor's options for both. */
static int plan_recompute(merak_stage *s, const merak_stage_opts *o, const int *lb, merak_exec_opts *eo,
                          char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    const int S = gr->pp, p = gr->pp_rank;
    const merak_recompute *rp = &o->recompute;
    stage_layers ly = {.total = 0};
    int nops = 0;
    for (int c = 0; c < s->V; c++)
        nops += s->bounds[c * S + p + 1] - s->bounds[c * S + p];
    ly.ends = malloc((size_t)(nops + s->V) * sizeof *ly.ends);
    if (!ly.ends)
        return merak_errf(err, errlen, "out of memory");
    /* layer j of a chunk ends at the j-th cut point inside it, the last at its end */
    for (int c = 0; c < s->V; c++) {
        int q = c * S + p, *ends = ly.ends + ly.total;
        int ncut = merak_cut_points(s->model, s->bounds[q], s->bounds[q + 1], ends);
        if (ncut < 0) {
            free(ly.ends);
            return merak_errf(err, errlen, "out of memory");
        }
        for (int j = 0; j < ncut; j++)
            ends[j] = merak_cut_map(s->g, ends[j]);
        ends[ncut] = lb[q + 1];
        ly.nl[c] = ncut + 1;
        ly.total += ncut + 1;
    }
    s->layers = ly.total;

    int n = 0, rc = 0;
    switch (rp->kind) {
    case MERAK_RECOMPUTE_NONE: break;
    case MERAK_RECOMPUTE_FULL: n = s->layers; break;
    case MERAK_RECOMPUTE_STAGE_AWARE: {
        /* scp holds one more micro-batch on stage S-2 (as Merak's does): it takes
         * stage S-3's ratio there; the same rule keeps the plans alike. */
        int q = o->schedule == MERAK_SCHEDULE_SCP && S > 2 && p == S - 2 ? S - 3 : p;
        n = (int)floor(s->layers * merak_recompute_stage_aware(rp->value, S, q) + 1e-9);
        break;
    }
    case MERAK_RECOMPUTE_BUDGET: {
        /* the fewest recomputed layers whose activations fit */
        double budget = rp->value * 1073741824.0, need = 0;
        for (n = 0; n <= s->layers; n++) {
            merak_exec *plan = NULL;
            if ((rc = plan_layers(s, o, lb, &ly, n, eo, err, errlen)) < 0)
                break;
            eo->plan_only = 1;
            if ((rc = merak_exec_create(s->g, eo, &plan, err, errlen)) < 0)
                break;
            need = (double)merak_exec_arena_bytes(plan);
            merak_exec_destroy(plan);
            eo->plan_only = 0;
            if (need <= budget)
                break;
        }
        if (rc == 0 && n > s->layers) {
            merak_errf(err, errlen,
                       "recompute budget=%g: stage %d needs %.4f GB of activations even when it "
                       "recomputes every layer %s lets it recompute, more than the budget",
                       rp->value, p, need / 1073741824.0, merak_schedule_name(o->schedule));
            rc = MERAK_USAGE;
        }
        break;
    }
    }
    if (rc == 0)
        rc = plan_layers(s, o, lb, &ly, n, eo, err, errlen);
    free(ly.ends);
    return rc;
}

/* This rank's chunks of its graph g: chunk c runs ops [lb[q], lb[q+1]) of
 * virtual stage q = c*pp + p. */
static int setup(merak_stage *s, const merak_stage_opts *o, const int *lb, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    const merak_graph *g = s->g;
    const int p = gr->pp_rank, S = gr->pp, Q = S * s->V;
    s->first = p == 0;
    s->last = p == S - 1;
    s->tpc = (merak_exec_comm){s, tp_allreduce, tp_start, tp_wait, tp_test};
    merak_exec_opts eo;
    int rc = plan_recompute(s, o, lb, &eo, err, errlen);
    if (rc < 0)
        return rc;
    eo.plan_only = s->plan_only;
    if (merak_exec_create(g, &eo, &s->e, err, errlen) < 0)
        return -1;
    if (gr->pp > 1 || gr->dp > 1)
        merak_exec_set_poll(s->e, poll_comm, s);
    merak_exec_set_loss_scale(s->e, 1.0f / (float)(o->micro_batches * gr->dp));
    for (int c = 0; c < s->V; c++) {
        int q = c * S + p;
        s->in_t[c] = q == 0 ? -1 : merak_cut_tensor(g, lb[q]);
        s->out_t[c] = q == Q - 1 ? -1 : merak_cut_tensor(g, lb[q + 1]);
        if ((q > 0 && s->in_t[c] < 0) || (q < Q - 1 && s->out_t[c] < 0))
            return merak_errf(err, errlen, "stage %d: more than one activation crosses its bounds", q);
        s->in_bytes[c] = s->in_t[c] < 0 ? 0 : (size_t)merak_tensor_elems(&g->tensors[s->in_t[c]]) * sizeof(float);
        s->out_bytes[c] = s->out_t[c] < 0 ? 0 : (size_t)merak_tensor_elems(&g->tensors[s->out_t[c]]) * sizeof(float);
    }
    int ids = merak_graph_find(g, "input_ids"), tgt = merak_graph_find(g, "targets");
    s->ids_t = merak_exec_tensor_chunk(s->e, ids) >= 0 ? ids : -1;
    s->tgt_t = merak_exec_tensor_chunk(s->e, tgt) >= 0 ? tgt : -1;
    s->loads = s->ids_t >= 0 || s->tgt_t >= 0;
    size_t bt = ids >= 0 ? (size_t)merak_tensor_elems(&g->tensors[ids]) : 1;
    s->ids_h = malloc(bt * sizeof *s->ids_h);
    s->tgt_h = malloc(bt * sizeof *s->tgt_h);
    s->act_req = calloc((size_t)s->sched.nslots, sizeof *s->act_req);
    s->grad_req = calloc((size_t)s->sched.nslots, sizeof *s->grad_req);
    s->tied = calloc((size_t)merak_exec_num_params(s->e) + 1, 1);
    if (!s->ids_h || !s->tgt_h || !s->act_req || !s->grad_req || !s->tied)
        return merak_errf(err, errlen, "out of memory");
    /* Parameters both end stages read (the tied embedding) are reduced over
     * the tied group; the last stage's copy is left out of the norm. */
    if (S > 1 && (s->first || s->last)) {
        int ob = s->first ? lb[Q - 1] : 0, oe = s->first ? lb[Q] : lb[1];
        for (int i = 0; i < merak_exec_num_params(s->e); i++)
            s->tied[i] = range_reads(g, ob, oe, merak_exec_param_tensor(s->e, i));
    }
    /* Only the first and the last stage may share a parameter (the tied
     * group is theirs); the partitioners keep to it for a weight read in
     * two places, this catches the rest: the layout cannot work (MERAK_USAGE). */
    if (!s->first && !s->last) {
        unsigned char *mine = calloc((size_t)g->ntensors, 1);
        if (!mine)
            return merak_errf(err, errlen, "out of memory");
        for (int i = 0; i < merak_exec_num_params(s->e); i++)
            mine[merak_exec_param_tensor(s->e, i)] = 1;
        for (int q = 0; q < Q; q++)
            for (int i = lb[q]; i < lb[q + 1] && q % S != p; i++)
                for (int j = 0; j < g->ops[i].nin; j++) {
                    int t = g->ops[i].in[j];
                    if (t < 0 || g->tensors[t].kind != MERAK_T_PARAM || !mine[merak_graph_param_root(g, t)])
                        continue;
                    t = merak_graph_param_root(g, t);
                    merak_errf(err, errlen, "stage %d reads %s, which another stage reads too: only the first and "
                               "the last stage may share a weight", p, g->tensors[t].name);
                    free(mine);
                    return MERAK_USAGE;
                }
        free(mine);
    }
    return setup_dp(s, o, err, errlen);
}

/* The stage of grid position gr: everything merak_stage_create does but
 * the groups (s->plan_only: no backend memory either). */
static int build(merak_stage *s, const merak_grid *gr, const merak_graph *model, const merak_stage_opts *o,
                 char *err, size_t errlen)
{
    s->grid = gr;
    s->model = s->g = model;
    s->rules = o->rules;
    s->nrules = o->nrules;
    s->k = o->kernels;
    s->M = o->micro_batches;
    s->tp_overlap = o->tp_overlap > 1 ? o->tp_overlap : 1;
    if (s->tp_overlap > MERAK_MAX_SUB_BATCHES) {
        merak_errf(err, errlen, "stage: %d sub-batches per micro-batch, more than %d", s->tp_overlap,
                   MERAK_MAX_SUB_BATCHES);
        return MERAK_USAGE;
    }
    s->V = merak_virtual_stages(o->schedule, o->virtual_stages);
    merak_schedule_spec sp = {o->schedule, gr->pp, o->micro_batches, NULL, s->V};
    if (merak_schedule_check(&sp, err, errlen) < 0)
        return MERAK_USAGE;
    /* Virtual stage bounds in the whole graph (the same on every rank),
     * then in this rank's tensor-parallel shard of it. */
    const int Q = gr->pp * s->V;
    int *lb = malloc((size_t)(Q + 1) * sizeof *lb);
    s->bounds = malloc((size_t)(Q + 1) * sizeof *s->bounds);
    int rc = 0;
    if (!lb || !s->bounds)
        rc = merak_errf(err, errlen, "out of memory");
    else if (gr->tp > 1 && !o->shard &&
             !(s->shard = merak_graph_shard(model, gr->tp, gr->tp_rank, o->rules, o->nrules, err, errlen)))
        rc = -1;
    if (rc == 0) {
        memcpy(s->bounds, o->bounds, (size_t)(Q + 1) * sizeof *s->bounds);
        s->g = gr->tp == 1 ? model : o->shard ? o->shard : s->shard;
        for (int q = 0; q <= Q; q++)
            lb[q] = merak_cut_map(s->g, s->bounds[q]);
        rc = setup(s, o, lb, err, errlen);
    }
    free(lb);
    return rc;
}

int merak_stage_create(merak_comm *comm, const merak_graph *model, const merak_stage_opts *o,
                       merak_stage **out, char *err, size_t errlen)
{
    *out = NULL;
    merak_stage *s = calloc(1, sizeof *s);
    if (!s)
        return merak_errf(err, errlen, "out of memory");
    s->comm = comm;
    s->pp_g = merak_comm_group(comm, MERAK_GROUP_PP);
    s->dp_g = merak_comm_group(comm, MERAK_GROUP_DP);
    s->tied_g = merak_comm_group(comm, MERAK_GROUP_TIED);
    s->world_g = merak_comm_group(comm, MERAK_GROUP_WORLD);
    s->tp_g = merak_comm_group(comm, MERAK_GROUP_TP);
    int rc = build(s, merak_comm_grid(comm), model, o, err, errlen);
    if (rc < 0) {
        merak_stage_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

int merak_stage_plan(const merak_grid *gr, const merak_graph *model, const merak_stage_opts *o,
                     merak_stage_mem *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    merak_stage *s = calloc(1, sizeof *s);
    if (!s)
        return merak_errf(err, errlen, "out of memory");
    s->plan_only = 1;
    int rc = build(s, gr, model, o, err, errlen);
    if (rc == 0) {
        size_t n;
        merak_exec_params_flat(s->e, &n);
        m->params = n * sizeof(float);
        for (int i = 0; i < merak_exec_num_params(s->e); i++) {
            m->param_elems += merak_exec_param_elems(s->e, i);
            if (s->tied[i])
                m->tied += merak_exec_param_elems(s->e, i) * sizeof(float);
        }
        m->activations = merak_exec_arena_bytes(s->e);
        m->device = merak_exec_device_bytes(s->e) + s->zshard_bytes;
        m->share = s->zhi - s->zlo;
        m->layers = s->layers;
        m->recomputed = s->recomputed;
        m->chunks = s->V;
        for (int c = 0; c < s->V; c++)
            m->chunk[c] = s->xc[c];
        m->in_bytes = m->out_bytes = 0;
        for (int c = 0; c < s->V; c++)
            m->in_bytes += s->in_bytes[c], m->out_bytes += s->out_bytes[c];
    }
    merak_stage_destroy(s);
    return rc;
}

/* ------------------------------------------------------------------ gathering */

/* The parameters pp rank p's chunks read in g (a shard of the model
 * whose virtual stage bounds are `bounds`), in first-use order: the order
 * merak_exec_create gives them.  Returns the count. */
static int stage_params(const merak_graph *g, const int *bounds, int p, int pp, int V, int *roots)
{
    int n = 0;
    for (int c = 0; c < V; c++) {
        int end = merak_cut_map(g, bounds[c * pp + p + 1]);
        for (int i = merak_cut_map(g, bounds[c * pp + p]); i < end; i++)
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
    }
    return n;
}

void merak_gathered_free(merak_gathered *w)
{
    for (int i = 0; w->data && i < w->n; i++)
        free(w->data[i]);
    free(w->data);
    free(w->tensors);
    memset(w, 0, sizeof *w);
}

/* Sends this rank's parameters to world rank 0 (host copies). */
static int send_params(merak_stage *s, char *err, size_t errlen)
{
    size_t most = 0;
    for (int i = 0; i < merak_exec_num_params(s->e); i++)
        if (merak_exec_param_elems(s->e, i) > most)
            most = merak_exec_param_elems(s->e, i);
    float *buf = malloc((most ? most : 1) * sizeof *buf);
    int rc = buf ? 0 : merak_errf(err, errlen, "out of memory gathering parameters");
    for (int i = 0; i < merak_exec_num_params(s->e) && rc == 0; i++) {
        if (merak_exec_param_read(s->e, i, buf) < 0)
            rc = merak_errf(err, errlen, "copying parameters from the %s backend failed", s->k->name);
        else if (merak_send(s->world_g, buf, merak_exec_param_elems(s->e, i) * sizeof(float), 0, i,
                            NULL) < 0)
            rc = comm_failed(s, "sending parameters to rank 0", err, errlen);
    }
    free(buf);
    return rc;
}

/* Rank 0 works out each rank's shard and stage from the whole graph and
 * the stage bounds in it, and receives (or copies) every parameter. */
int merak_stage_gather(merak_stage *s, merak_gathered *w, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    const merak_graph *model = s->model;
    memset(w, 0, sizeof *w);
    if (gr->dp_rank != 0)
        return 0;
    if (gr->rank != 0)
        return send_params(s, err, errlen);
    int nt = model->ntensors, rc = 0;
    int *roots = calloc((size_t)nt, sizeof *roots);
    float **whole = calloc((size_t)nt, sizeof *whole);   /* by tensor id of model */
    float *buf = NULL;
    w->tensors = calloc((size_t)nt, sizeof *w->tensors);
    if (!roots || !w->tensors || !whole)
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
            int count = stage_params(gl, s->bounds, p, gr->pp, s->V, roots);
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
                if (src == 0 && merak_exec_param_read(s->e, i, buf) < 0)
                    rc = merak_errf(err, errlen, "copying parameters from the %s backend failed",
                                    s->k->name);
                else if (src != 0 && merak_recv(s->world_g, buf, bytes, src, i, NULL) < 0)
                    rc = comm_failed(s, "receiving parameters", err, errlen);
                if (rc == 0 && !whole[gt]) {  /* a tied parameter arrives twice, with equal values */
                    whole[gt] = malloc((size_t)merak_tensor_elems(&model->tensors[gt]) * sizeof(float));
                    if (!whole[gt])
                        rc = merak_errf(err, errlen, "out of memory gathering parameters");
                    else
                        w->tensors[w->n++] = gt;
                }
                if (rc == 0)
                    merak_shard_place(lt, buf, whole[gt]);
            }
            merak_graph_destroy(shard);
        }
    if (rc == 0 && !(w->data = calloc((size_t)(w->n ? w->n : 1), sizeof *w->data)))
        rc = merak_errf(err, errlen, "out of memory gathering parameters");
    for (int i = 0; rc == 0 && i < w->n; i++) {
        w->data[i] = whole[w->tensors[i]];
        whole[w->tensors[i]] = NULL;
    }
    for (int i = 0; whole && i < nt; i++)
        free(whole[i]);
    free(roots), free(whole), free(buf);
    if (rc < 0)
        merak_gathered_free(w);
    return rc;
}
