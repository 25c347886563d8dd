/*
 * stage_impl.h - the stage's state, shared by its files (not by callers:
 * they see stage.h):
 *   stage.c         building: shard, layers, recomputation, schedule,
 *                   executor (merak_stage_create, merak_stage_plan)
 *   stage_run.c     the instruction interpreter: the step's list and
 *                   evaluation's, transfers, results
 *   stage_dp.c      the gradients' reductions over dp and the tied group,
 *                   ZeRO-1's shares: the hook the interpreter calls at
 *                   REDUCE_TIED, REDUCE_DP and after the optimizer step
 *   stage_gather.c  the whole model's parameters to rank 0
 * Calls go run -> dp and create -> dp; dp and gather call no other.
 */
#ifndef MERAK_STAGE_IMPL_H
#define MERAK_STAGE_IMPL_H

#include "errf.h"
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
    merak_stamp bfirst;           /* the trace's: the first bucket's launch, */
    double blast;                 /* the last seen done (the host's clock) */
    int btraced;                  /* this step's buckets are in the trace */
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

/* MERAK_FAILED with err = "WHAT: the comm layer's reason". */
static inline int merak_stage_comm_failed(merak_stage *s, const char *what, char *err, size_t errlen)
{
    return merak_errf(err, errlen, "%s: %s", what, merak_comm_error(s->comm));
}

/* ---- stage_run.c: the executor's poll while the stage computes (every
 * transfer and reduction in flight moves; see stage_run.c). */
void merak_stage_poll(void *ctx);

/* ---- stage_dp.c: the data-parallel hook (Megatron's finalize_model_grads).
 * setup: buckets (without ZeRO), or the ZeRO-1 shares, for dp > 1;
 * MERAK_USAGE for a stage too large to reduce.  begin: a step starts.
 * progress: lets the reductions in flight move (the executor's poll).
 * ready: the executor's gradient hook during the last backward (floats
 * [from, flat_n) are final: launch their buckets).  reduce: REDUCE_TIED
 * (tied 1) or REDUCE_DP (0), 0 or -1.  after_step: ZeRO's shares of the
 * parameters gathered after the optimizer step. */
int merak_stage_dp_setup(merak_stage *s, const merak_stage_opts *o, char *err, size_t errlen);
void merak_stage_dp_begin(merak_stage *s);
void merak_stage_dp_progress(merak_stage *s);
void merak_stage_dp_ready(void *ctx, size_t from);
int merak_stage_dp_reduce(merak_stage *s, int tied);
int merak_stage_dp_after_step(merak_stage *s, char *err, size_t errlen);

#endif /* MERAK_STAGE_IMPL_H */
