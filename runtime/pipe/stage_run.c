/*
 * stage_run.c - a stage's instruction interpreter (stage_impl.h): the
 * step's list and evaluation's forward-only one (schedule.c), each
 * instruction on the executor, the pipeline group or the dp hook
 * (stage_dp.c); and what a step leaves: its loss, gradient norm, bytes.
 *
 * Equivalence with one process: with dp replicas of M micro-batches each,
 * every micro-batch's loss is scaled by 1/(M*dp) and the dp all-reduce
 * sums, so the gradients are those of one process running M*dp
 * micro-batches (the step loop numbers the micro-batches to match).
 */
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "grow.h"
#include "stage_impl.h"
#include "trace.h"

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
        merak_exec_set_grad_hook(s->e, merak_stage_dp_ready, s);
    int rc = in->kind == MERAK_I_BWD         ? merak_exec_backward(s->e, in->slot)
             : in->kind == MERAK_I_BWD_INPUT ? merak_exec_backward_input(s->e, in->slot)
                                             : merak_exec_backward_weight(s->e, in->slot);
    if (hook)
        merak_exec_set_grad_hook(s->e, NULL, NULL);
    if (s->dp_failed)
        return merak_stage_comm_failed(s, "a data-parallel all-reduce", err, errlen);
    if (rc < 0)
        return merak_errf(err, errlen, "%s", merak_exec_error(s->e));
    return 0;
}

/* OPTIMIZER_STEP: the step loop's update, then the ZeRO shares gathered. */
static int optimizer_step(merak_stage *s, const merak_stage_hooks *h, char *err, size_t errlen)
{
    if (h->optimizer_step(h->ctx, err, errlen) < 0)
        return -1;
    return merak_stage_dp_after_step(s, err, errlen);
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

void merak_stage_poll(void *ctx)
{
    merak_stage *s = ctx;
    for (int i = 0; i < s->sched.nslots; i++) {
        poll_req(s, &s->act_req[i]);
        poll_req(s, &s->grad_req[i]);
    }
    for (int i = 0; i < s->nsends; i++)
        poll_req(s, &s->sends[i]);
    merak_stage_dp_progress(s);
}

/* Message tags: an activation or (grad 1) a gradient of micro-batch mb
 * for the receiver's chunk c. */
static int tag(const merak_stage *s, int c, int mb, int grad) { return (c * s->M + mb) * 2 + grad; }

/* Runs one instruction; returns 0 or -1 with err.  Transfers go where
 * merak_instr_route says, tagged with the receiving chunk. */
static int dispatch(merak_stage *s, const merak_stage_hooks *h, const merak_instr *in, char *err,
                    size_t errlen)
{
    const int slot = in->slot, mb = in->mb, c = in->chunk;
    int peer = -1, to_c = 0;   /* the transfer's stage, and the chunk there its message is for */
    merak_instr_route(in, s->grid->pp_rank, s->grid->pp, &peer, &to_c);
    switch (in->kind) {
    case MERAK_I_LOAD: return load(s, h, mb, slot, err, errlen);
    case MERAK_I_RECV_ACT:
        return merak_recv(s->pp_g, merak_exec_tensor(s->e, slot, s->in_t[c]), s->in_bytes[c], peer,
                          tag(s, to_c, mb, 0), &s->act_req[slot]);
    case MERAK_I_WAIT_ACT: return merak_wait(&s->act_req[slot]);
    case MERAK_I_FWD:
        if (merak_exec_forward(s->e, slot, h->seed(h->ctx, mb)) < 0)
            return merak_errf(err, errlen, "%s", merak_exec_error(s->e));
        if (s->last && c == s->V - 1)
            s->loss_sum += merak_exec_loss(s->e, slot);
        return 0;
    case MERAK_I_SEND_ACT:
        return post_send(s, slot, merak_exec_tensor(s->e, slot, s->out_t[c]), s->out_bytes[c], peer,
                         tag(s, to_c, mb, 0));
    case MERAK_I_RECV_GRAD:
        return merak_recv(s->pp_g, merak_exec_grad(s->e, slot, s->out_t[c]), s->out_bytes[c], peer,
                          tag(s, to_c, mb, 1), &s->grad_req[slot]);
    case MERAK_I_WAIT_GRAD: return merak_wait(&s->grad_req[slot]);
    case MERAK_I_RECOMPUTE:
        if (merak_exec_recompute(s->e, slot) < 0)
            return merak_errf(err, errlen, "%s", merak_exec_error(s->e));
        return 0;
    case MERAK_I_BWD:
    case MERAK_I_BWD_INPUT:
    case MERAK_I_BWD_WEIGHT: return backward(s, in, err, errlen);
    case MERAK_I_SEND_GRAD:
        return post_send(s, slot, merak_exec_grad(s->e, slot, s->in_t[c]), s->in_bytes[c], peer,
                         tag(s, to_c, mb, 1));
    case MERAK_I_WAIT_SENDS: return wait_sends(s, slot);
    case MERAK_I_REDUCE_TIED:
    case MERAK_I_REDUCE_DP: return merak_stage_dp_reduce(s, in->kind == MERAK_I_REDUCE_TIED);
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
        rc = merak_stage_comm_failed(s, "a pipeline transfer", err, errlen);
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
        merak_stamp t0 = merak_trace_stamp(s->trace);
        s->cur_mb = in->mb;
        s->cur_chunk = in->chunk;
        int rc = run_instr(s, h, in, err, errlen);
        if (!sc->forward_only)
            merak_trace_add_stamped(s->trace, 0, in->kind, in->mb, in->chunk, t0, merak_trace_stamp(s->trace));
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
    merak_stage_dp_begin(s);
    if (merak_exec_zero_grads(s->e) < 0)
        return merak_errf(err, errlen, "zeroing the gradients on the %s backend failed", s->k->name);
    /* the masters the last step (or a checkpoint, or the initialisation) wrote */
    if (merak_exec_cast_params(s->e) < 0)
        return merak_errf(err, errlen, "rounding the parameters' bf16 copies on the %s backend failed", s->k->name);
    merak_trace_device_begin(s->trace, s->k);
    if (run_list(s, h, &s->sched, "", err, errlen) < 0)
        return -1;
    /* The step's device work is done (its time counts) and its errors show. */
    if (s->k->synchronize() < 0)
        return merak_errf(err, errlen, "the %s backend failed during the step", s->k->name);
    merak_trace_device_end(s->trace);
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
    if (merak_exec_cast_params(s->e) < 0) {
        merak_schedule_free(&ev);
        return merak_errf(err, errlen, "rounding the parameters' bf16 copies on the %s backend failed", s->k->name);
    }
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
