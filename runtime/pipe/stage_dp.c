/*
 * stage_dp.c - a stage's gradient reductions (stage_impl.h): over the
 * tied group at REDUCE_TIED, over dp at REDUCE_DP (Megatron's
 * finalize_model_grads).  Without ZeRO the flat gradient buffer goes in
 * buckets, all-reduced from its end down as the last backward finishes
 * them (parameters complete in reverse first-use order); with ZeRO-1 it
 * is reduce-scattered into this rank's share, whose parameters the
 * optimizer updates and the step then gathers.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "graph/ops.h" /* merak_align_floats */
#include "stage_impl.h"
#include "trace.h"


static int launch_bucket(merak_stage *s, size_t lo, size_t hi)
{
    size_t n;
    float *g = merak_exec_grads_flat(s->e, &n);
    int i = s->nb++;
    if (i == 0) {
        s->bfirst = merak_trace_stamp(s->trace);
        s->blast = merak_now();
    }
    s->blo[i] = lo;
    s->bhi[i] = hi;
    s->bdone[i] = 0;
    memset(&s->breq[i], 0, sizeof s->breq[i]);
    return merak_allreduce(s->dp_g, g + lo, hi - lo, &s->breq[i]);
}

/* Lets MPI progress the reductions in flight; counts those finished. */
void merak_stage_dp_progress(merak_stage *s)
{
    for (int i = 0; i < s->nb; i++)
        if (!s->bdone[i]) {
            int r = merak_test(&s->breq[i]);
            if (r < 0)
                s->dp_failed = 1;
            else if (r == 1) {
                s->bdone[i] = 1;
                s->done_early += s->bhi[i] - s->blo[i];
                s->blast = merak_now();
            }
        }
}

/* Executor hook during the last backward: floats [from, flat_n) are final. */
void merak_stage_dp_ready(void *ctx, size_t from)
{
    merak_stage *s = ctx;
    while (s->launched >= from + s->bucket) {
        size_t lo = s->launched - s->bucket;
        if (launch_bucket(s, lo, s->launched) < 0)
            s->dp_failed = 1;
        s->launched = lo;
    }
}

/* Buckets: launches the rest of the flat buffer and waits for every
 * bucket; the first time in a step, the trace gets them in flight (the
 * host's times: from the first one's launch to the last one seen done). */
static int finish_buckets(merak_stage *s)
{
    if (!s->breq)
        return 0;
    if (s->launched > 0 && launch_bucket(s, 0, s->launched) < 0)
        return -1;
    s->launched = 0;
    for (int i = 0; i < s->nb; i++) {
        if (merak_wait(&s->breq[i]) < 0)
            return -1;
        if (!s->bdone[i])
            s->bdone[i] = 1, s->blast = merak_now();
    }
    if (s->trace && s->nb > 0 && !s->btraced)
        merak_trace_add_stamped(s->trace, 0, MERAK_TRACE_DP_BUCKETS, -1, 0, s->bfirst, (merak_stamp){s->blast, -1});
    s->btraced = 1;
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

int merak_stage_dp_reduce(merak_stage *s, int tied)
{
    double t0 = merak_now();
    int rc = tied ? reduce_tied(s) : reduce_dp(s);
    s->wait_s += merak_now() - t0;
    return rc;
}

void merak_stage_dp_begin(merak_stage *s)
{
    s->launched = s->flat_n;
    s->nb = 0;
    s->btraced = 0;
    s->done_early = 0;
    s->wait_s = 0;
}

int merak_stage_dp_after_step(merak_stage *s, char *err, size_t errlen)
{
    size_t n;
    if (!s->zcounts)
        return 0;
    merak_exec_masters_written(s->e);   /* the other ranks' shares: the copies are cast again */
    if (merak_allgather(s->dp_g, merak_exec_params_flat(s->e, &n), s->zcounts) < 0)
        return merak_stage_comm_failed(s, "gathering the parameters", err, errlen);
    return 0;
}

int merak_stage_allgather_share(merak_stage *s, float *buf, char *err, size_t errlen)
{
    if (s->zcounts && merak_allgather(s->dp_g, buf, s->zcounts) < 0)
        return merak_stage_comm_failed(s, "gathering the optimizer state's shares", err, errlen);
    return 0;
}

void merak_stage_share(const merak_stage *s, size_t *lo, size_t *hi)
{
    *lo = s->zlo;
    *hi = s->zhi;
}


int merak_stage_dp_setup(merak_stage *s, const merak_stage_opts *o, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    merak_exec_grads_flat(s->e, &s->flat_n);
    if (s->flat_n > (size_t)INT32_MAX) {   /* the layout cannot work (--auto skips it): more stages or tp */
        merak_errf(err, errlen, "stage %d holds %zu parameters, more than one stage may (2147483647, the "
                   "counts of MPI and of the kernels): split the model over more pipeline stages (--pp) or "
                   "tensor-parallel ranks (--tp)", gr->pp_rank, s->flat_n);
        return MERAK_USAGE;
    }
    s->zlo = 0;
    s->zhi = s->flat_n;
    s->last_bwd = -1;
    if (gr->dp == 1)
        return 0;
    if (o->zero) {
        /* dp shares of ceil(flat_n / dp) floats rounded up to whole
         * arena alignments (so every share starts on 64 bytes, where the
         * optimizer's kernels take 16-byte vectors), the last ones shorter
         * or empty; every rank's count only for a stage that runs (a plan,
         * which the planner makes for up to millions of ranks, needs this
         * one's) */
        const size_t chunk = merak_align_floats((s->flat_n + (size_t)gr->dp - 1) / (size_t)gr->dp);
#define SHARE_LO(r) (chunk * (size_t)(r) < s->flat_n ? chunk * (size_t)(r) : s->flat_n)
#define SHARE_HI(r) (SHARE_LO(r) + chunk < s->flat_n ? SHARE_LO(r) + chunk : s->flat_n)
        s->zlo = SHARE_LO(gr->dp_rank);
        s->zhi = SHARE_HI(gr->dp_rank);
        s->zshard_bytes = (chunk + 1) * sizeof *s->zshard;
        if (s->plan_only)
            return 0;
        s->zcounts = calloc((size_t)gr->dp, sizeof *s->zcounts);
        s->zshard = s->k->alloc(s->zshard_bytes);
        if (!s->zcounts || !s->zshard)
            return merak_errf(err, errlen, "out of memory");
        for (int r = 0; r < gr->dp; r++)
            s->zcounts[r] = (int)(SHARE_HI(r) - SHARE_LO(r));
#undef SHARE_LO
#undef SHARE_HI
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
