/*
 * exec.c - the executor: memory plan, then forward and split backward over a
 * slice of the graph's ops, each op run through its entry of the op table
 * (graph/ops.h) on the sub-batch's parts of its tensors; the executor adds
 * what needs its state: the tensor-parallel sums, the loss's reduction.
 *
 * Tensor memory is the backend's (its alloc, zero and copy hooks), so the
 * same executor runs on host or device memory.  Only small per-row values
 * come to the host: the cross-entropy statistics, to sum the loss and to
 * combine vocabulary shards.
 */
#include <limits.h> /* INT_MAX */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "errf.h"
#include "exec.h"
#include "graph/graph.h"
#include "grow.h"
#include "bf16.h"
#include "graph/ops.h"
#include "mix64.h"


/* One op range of the slice, with its slots' arenas: slot slot0 + j's
 * values are act_bytes bytes at act + act_base + j * act_bytes (and its
 * gradients likewise).  Every size and offset of the arenas is in bytes:
 * a tensor's elements take 4 bytes (float, int32) or 2 (bf16 storage). */
typedef struct chunk {
    int begin, end, rc_end;   /* ops; [begin, rc_end) recomputed */
    int slot0, nslots;
    size_t act_bytes, grad_bytes, act_base, grad_base;
} chunk;

/* An op's bf16 tensor widened to float for its kernels (stage_in): its
 * storage, and the float copy in the executor's staging buffer. */
typedef struct staged {
    void *raw;
    float *f;
    size_t n;
} staged;
#define MAX_STAGED 8   /* an op's values and gradients: 3 inputs and its output, twice */

struct merak_exec {
    const merak_graph *g;
    const merak_kernels *k;
    double *op_fwd, *op_bwd;   /* per-op seconds accumulated (merak_exec_time_ops), or NULL */
    struct op_mark {           /* an op timed by the backend's marks, not added yet */
        double *to;
        int m0, m1;
        double h0, h1;         /* the host's clock as it recorded them */
    } *op_marks;
    size_t nop_marks, cap_op_marks;
    int ref_mark;              /* a mark recorded with the device idle, or -1 */
    double ref_host;           /* ... and the host's clock then */
    size_t lag_n, lag_caught;  /* op boundaries timed, and those where the device had caught up (merak_exec_ops_lag) */
    double lag_sum;
    int nchunks, nslots;
    int eval;                  /* merak_exec_set_eval: dropout off */
    chunk *ch;
    int *slot_chunk;       /* [nslots] */
    int *tensor_chunk;     /* [ntensors] chunk holding a tensor that is not a parameter, or -1 */

    /* parameters: distinct roots read by the slice, carved from two flat buffers */
    int nparams;
    int *param_tensor;     /* [nparams] graph tensor id (a root) */
    size_t *param_off;     /* [nparams] offset in floats */
    size_t *param_n;       /* [nparams] elements */
    int *param_of;         /* [ntensors] param index for any tensor tied to it, or -1 */
    float *params, *grads;
    size_t flat_n;
    int bf16;              /* emulated bf16 (exec.h, Precision) */
    void *cparams;         /* bf16: the compute copies of params (flat_n elements, bf16
                            * storage with store16, else float), which the ops read */

    /* per-slot arenas: tensor values, ops' saved values, tensor gradients */
    int64_t *t_off;        /* [ntensors] offset in its chunk's slot arena (bytes) or -1 */
    int64_t *g_off;        /* [ntensors] offset in the gradient arena, or in gshared, or t_off
                            * for an in-place gradient (bytes); or -1 */
    unsigned char *in_place;   /* [ntensors] the gradient replaces the value (grad_in_place) */
    unsigned char *g_shared;   /* [ntensors] the gradient lives in gshared (share_grads) */
    int *last_use;         /* [ntensors] the last op reading a tensor, or -1 */
    int *grad_via;         /* [ntensors] t's gradient is tensor grad_via[t]'s, in its storage (a
                            * gradient passed through: plan_pass), or -1 */
    int split;             /* weight parts may run apart (merak_exec_opts.split) */
    int keep_grads;        /* every gradient its own (merak_exec_opts.keep_grads) */
    int zero_first;        /* no fresh writes (merak_exec_opts.zero_first) */
    int copies_current;    /* the compute copies were rounded from the masters as they are
                            * (merak_exec_copies_current): the next cast has nothing to do */
    int store16;           /* bf16 storage (exec.h, Precision): the activations, their
                            * gradients and the compute copies take 2 bytes */
    unsigned char *half;   /* [ntensors] this tensor's values and gradient are bf16 storage
                            * (a parameter: its compute copy) */
    unsigned char *native; /* [nops] its calls read and write bf16 storage as it is (the
                            * kind's bf16 entries, merak_op_io.b16), unstaged */
    int *row_ld;           /* [ntensors] its rows' stride in elements where they are padded
                            * (row_ld_of: the logits), else 0 */
    unsigned char *fresh;  /* [nops] its input part writes its input gradients, unzeroed
                            * (plan_fresh, merak_op_io.fresh) */
    float *stage;          /* staging: the bf16 tensors of the op running, widened */
    size_t stage_floats;
    staged st[MAX_STAGED];
    int nst;
    size_t st_used;        /* floats of stage in use */
    int st_mode, st_slot, st_op, st_k;   /* the call they were staged for (op_io) */
    int64_t *save_off;     /* [nops] offset of the op's saved values or -1 */
    size_t act_bytes, grad_bytes;     /* all slots */
    unsigned char *act, *gradarena;
    size_t gshared_bytes;             /* the backward's buffer of short-lived gradients */
    unsigned char *gshared;
    size_t scratch_n, tpbuf_n;        /* floats of the kernels' scratch and the tp sum buffer */

    /* recomputation: a chunk's ops [begin, rc_end) whose output no later op
     * reads ("dropped" ops) keep their outputs, saved values and gradients in
     * a recompute buffer instead of the slot's arenas (offsets then count
     * from the buffer).  A forward borrows a buffer while it runs; RECOMPUTE
     * takes one for the micro-batch until its backward is done. */
    int npool;
    unsigned char *pooled;      /* [ntensors] lives in a recompute buffer */
    unsigned char *dropped;     /* [nops] op re-run by merak_exec_recompute */
    size_t pool_act, pool_grad; /* bytes per buffer (the largest chunk's) */
    unsigned char *pact, *pgrad;   /* npool buffers each */
    int *pool_of;               /* [nslots] buffer the slot holds, or -1 */
    unsigned char *pool_busy;   /* [npool] */
    float *scratch;        /* the attention kernels', shared by all slots */

    float loss_scale;
    uint64_t *seed;        /* [nslots] dropout seed of the slot's forward */
    double *loss;          /* [nslots] */
    unsigned char *grad_early;   /* [nslots] the loss's forward wrote its input part's gradient
                                  * (loss_grad_early): its backward skips that part */

    /* tensor parallelism */
    const merak_exec_comm *tp;
    int K;                 /* sub-batches per micro-batch (sub-pipelined tp), >= 1 */
    int *pending;          /* [K] scratch of a sub-pipelined pass */
    float *tpbuf;          /* the vocabulary-parallel cross-entropy's shard statistics */
    float *host;           /* host copies of the cross-entropy's per-row values */

    char err[256];         /* why the last forward or backward failed */

    /* gradient readiness: ready[i] = first float of the flat gradients
     * that no op of the slice before op i touches */
    size_t *ready;
    void (*hook)(void *ctx, size_t from);
    void *hook_ctx;
    void (*poll)(void *ctx);   /* after every op (merak_exec_set_poll) */
    void *poll_ctx;
};

static size_t round_up(size_t n) { return merak_align_floats(n); }
/* bytes rounded up to the arenas' alignment (MERAK_ALIGN_FLOATS floats) */
static size_t round_bytes(size_t b) { return round_up((b + sizeof(float) - 1) / sizeof(float)) * sizeof(float); }

/* What the backend is asked for: n floats, or b bytes (never a zero-size
 * request), zeroed. */
static size_t alloc_bytes(size_t n) { return (n ? n : MERAK_ALIGN_FLOATS) * sizeof(float); }
static float *alloc_floats(const merak_kernels *k, size_t n) { return k->alloc(alloc_bytes(n)); }
static size_t alloc_size(size_t b) { return b ? b : MERAK_ALIGN_FLOATS * sizeof(float); }
static void *alloc_raw(const merak_kernels *k, size_t b) { return k->alloc(alloc_size(b)); }

/* Bytes of the parameters' compute copies (bf16). */
static size_t cparams_bytes(const merak_exec *e) { return e->flat_n * (e->store16 ? sizeof(uint16_t) : sizeof(float)); }

/* Bytes of an element of tensor t in the arenas. */
static size_t esize(const merak_exec *e, int t) { return e->half[t] ? sizeof(uint16_t) : sizeof(float); }
/* Rows N, feature width C of a (.., C) tensor. */
static int64_t rows_of(const merak_tensor *t) { return merak_tensor_elems(t) / t->shape[t->ndim - 1]; }
static int64_t cols_of(const merak_tensor *t) { return t->shape[t->ndim - 1]; }

/* Bytes of tensor t's values (of its gradient too): its rows row_ld
 * apart where they are padded. */
static size_t tbytes(const merak_exec *e, int t)
{
    const merak_tensor *x = &e->g->tensors[t];
    const size_t n = e->row_ld[t] ? (size_t)rows_of(x) * (size_t)e->row_ld[t] : (size_t)merak_tensor_elems(x);
    return n * esize(e, t);
}

/* Records why a forward or backward failed; returns -1. */
static int fail(merak_exec *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The pass's first failure is the one kept (each pass starts with an
 * empty e->err); returns MERAK_FAILED. */
static int fail(merak_exec *e, const char *fmt, ...)
{
    if (!e->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, sizeof e->err, fmt, ap);
        va_end(ap);
    }
    return MERAK_FAILED;
}

/* Checks the chunks (op ranges in order, slots) into e->ch. */
static int set_chunks(merak_exec *e, const merak_exec_opts *opts, char *err, size_t errlen)
{
    const merak_graph *g = e->g;
    int prev_end = 0;
    for (int c = 0; c < opts->nchunks; c++) {
        const merak_exec_chunk *in = &opts->chunks[c];
        chunk *ch = &e->ch[c];
        int begin = in->op_begin, end = in->op_end < 0 ? g->nops : in->op_end;
        if (begin < prev_end || begin >= end || end > g->nops)
            return merak_errf(err, errlen,
                              "executor: chunk %d's op range [%d,%d) is not inside the graph's %d ops after "
                              "the chunk before it", c, begin, end, g->nops);
        if (in->nslots < 1)
            return merak_errf(err, errlen, "executor: chunk %d has %d slots (need at least 1)", c, in->nslots);
        prev_end = end;
        ch->begin = begin;
        ch->end = end;
        ch->rc_end = in->recompute_end > begin ? (in->recompute_end < end ? in->recompute_end : end) : begin;
        ch->slot0 = e->nslots;
        ch->nslots = in->nslots;
        e->nslots += in->nslots;
        if (ch->rc_end > begin && opts->npool < 1)
            return merak_errf(err, errlen, "executor: recomputation needs at least one recompute buffer");
        if (ch->rc_end > begin)
            e->npool = opts->npool;
    }
    return 0;
}

/* Does tensor t's gradient take its value's storage?  The logits: made
 * in chunk ch and read only by its loss op, whose backward writes the
 * gradient over them in place (kernels.h crossentropy_bwd, or
 * crossentropy16_bwd over bf16 logits), as nothing
 * reads them after it; that saves an N x V buffer (1.6 GB for GPT-2 at
 * B=8, T=1024) and zeroing it every micro-batch.  nuse[t]: the ops that
 * read t, last_use[t] the last of them. */
static int grad_in_place(const merak_exec *e, const chunk *ch, int t, const int *nuse, const int *last_use)
{
    const merak_graph *g = e->g;
    const int p = g->tensors[t].producer, u = last_use[t];
    return !e->keep_grads && nuse[t] == 1 && p >= ch->begin && p < ch->end && u >= ch->begin && u < ch->end &&
           merak_op_kind_of(&g->ops[u])->loss && g->ops[u].in[0] == t &&
           !merak_op_kind_of(&g->ops[p])->reads_output;   /* its producer's backward reads the values */
}

/* The stride of tensor t's rows, padded to 16 bytes, when t is logits in
 * bf16 storage that both their ops read and write natively (kernels.h:
 * linear16_*, crossentropy16_* take a row stride), else 0.  50257 columns
 * (GPT-2's vocabulary) leave every row but one off 16 bytes, and
 * cuBLASLt's fastest products (Hopper's tensor-memory loads and stores)
 * want every row on 16 bytes; the padding is never read or written.  t:
 * made by a linear layer without a bias, read once, by the loss as its
 * logits, in one chunk of one sub-batch.  The ops' native[] is decided
 * later (plan_chunk); merak_exec_create checks it agrees. */
static int row_ld_of(const merak_exec *e, const chunk *ch, int t, const int *nuse, const int *last_use)
{
    const merak_graph *g = e->g;
    const merak_tensor *x = &g->tensors[t];
    const int p = x->producer, u = last_use[t], w = x->ndim ? (int)x->shape[x->ndim - 1] : 0;
    const int E = 16 / (int)sizeof(uint16_t);
    if (!e->store16 || e->K > 1 || x->dtype != MERAK_F32 || w <= 0 || w % E == 0 || w > INT_MAX - E ||
        nuse[t] != 1 || p < ch->begin || p >= ch->end || u < ch->begin || u >= ch->end)
        return 0;
    const merak_op *po = &g->ops[p], *uo = &g->ops[u];
    const merak_op_kind *pk = merak_op_kind_of(po), *uk = merak_op_kind_of(uo);
    if (po->type != MERAK_OP_LINEAR || (po->nin > 2 && po->in[2] >= 0) || !uk->loss || uo->in[0] != t ||
        pk->sum != MERAK_SUM_NONE || uk->sum != MERAK_SUM_NONE || !pk->bf16 || !pk->bf16(g, po, e->k) ||
        !uk->bf16 || !uk->bf16(g, uo, e->k))
        return 0;
    return (w + E - 1) / E * E;
}

/* Can tensor t's gradient live in the backward's shared buffer?  It must
 * live only inside one backward pass of its chunk: t made and read there
 * (not a pipeline message), and no weight part run apart from the input
 * parts (split) reads it.  Sub-batches (K > 1) run the ops of a segment
 * once per sub-batch, so lifetimes are not op intervals: none shares. */
static int grad_shareable(const merak_exec *e, const chunk *ch, int t)
{
    const merak_graph *g = e->g;
    const int p = g->tensors[t].producer, u = e->last_use[t];
    if (e->K > 1 || e->keep_grads || e->in_place[t] || p < ch->begin || u <= p || u >= ch->end)
        return 0;
    return !(e->split && merak_op_kind_of(&g->ops[p])->backward_weight);
}

/* One gradient of the shared buffer: live from the backward of op hi (the
 * last reader of its tensor, the first to add to it) to that of op lo (its
 * producer, the last to read it), both included; n bytes at off. */
typedef struct live {
    int t, lo, hi;
    size_t n, off;
} live;

static int by_start(const void *a, const void *b)
{
    const live *x = a, *y = b;
    return x->hi != y->hi ? (x->hi < y->hi ? 1 : -1) : (x->t > y->t) - (x->t < y->t);
}

static int by_offset(const void *a, const void *b)
{
    const live *x = *(live *const *)a, *y = *(live *const *)b;
    return (x->off > y->off) - (x->off < y->off);
}

/* The tensor whose gradient's storage t's gradient takes, through the
 * passes of plan_pass (t itself where none). */
static int pass_root(const merak_exec *e, int t)
{
    while (e->grad_via[t] >= 0)
        t = e->grad_via[t];
    return t;
}

static int op_fresh_ok(const merak_exec *e, int i);

/* Does op i's input part run with op i - 1's in one call (backward_pair:
 * the earlier's kind's backward_input_next), op i - 1 in the chunk from
 * begin?  Op i reads op i - 1's output as its in[0] and is its only
 * reader, neither sums over the tp group nor is the loss, both run
 * natively in bf16 storage, op i - 1 writes its input gradient (fresh),
 * the micro-batch in one call.  (The kinds may still decline a call, and
 * timed ops run one by one.) */
static int pairs_back(const merak_exec *e, int i, int begin)
{
    if (i - 1 < begin || e->K != 1)
        return 0;
    const merak_op *a = &e->g->ops[i - 1], *b = &e->g->ops[i];
    const merak_op_kind *ka = merak_op_kind_of(a), *kb = merak_op_kind_of(b);
    return ka->backward_input_next && b->nin >= 1 && b->in[0] == a->out && e->last_use[a->out] == i &&
           ka->sum == MERAK_SUM_NONE && kb->sum == MERAK_SUM_NONE && !ka->loss && !kb->loss && e->native[i - 1] &&
           e->native[i] && op_fresh_ok(e, i - 1);
}

/* Places chunk ch's shareable gradients in the shared buffer: in the order
 * the backward starts them (the reverse of op order), each at the lowest
 * offset no live one holds (first fit), a gradient being dead once its
 * producer's backward has run.  A gradient starts at its last reader's
 * backward, or at the next op's where the two run their input parts in one
 * call (pairs_back: written there, while that op's own gradients are
 * read).  Raises e->gshared_floats to the chunk's peak.  0, or -1 out of
 * memory. */
static int share_grads(merak_exec *e, const chunk *ch)
{
    const merak_graph *g = e->g;
    int n = 0, nact = 0;
    live *v = malloc((size_t)g->ntensors * sizeof *v);
    live **act = malloc((size_t)g->ntensors * sizeof *act);
    if (!v || !act) {
        free(v);
        free(act);
        return -1;
    }
    for (int t = 0; t < g->ntensors; t++)
        if (e->g_shared[t] && e->tensor_chunk[t] == ch - e->ch && e->grad_via[t] < 0) {
            int hi = e->last_use[t];
            if (hi + 1 < ch->end && g->ops[hi].nin > 0 && g->ops[hi].in[0] == t && pairs_back(e, hi + 1, ch->begin))
                hi++;
            v[n++] = (live){t, g->tensors[t].producer, hi, round_bytes(tbytes(e, t)), 0};
        }
    /* a gradient passed through lives on in its output's: that one's life
     * reaches back to its producer's backward */
    for (int t = 0; t < g->ntensors; t++)
        if (e->g_shared[t] && e->tensor_chunk[t] == ch - e->ch && e->grad_via[t] >= 0)
            for (int i = 0; i < n; i++)
                if (v[i].t == pass_root(e, t) && g->tensors[t].producer < v[i].lo)
                    v[i].lo = g->tensors[t].producer;
    qsort(v, (size_t)n, sizeof *v, by_start);
    for (int i = 0; i < n; i++) {
        int k = 0;
        for (int j = 0; j < nact; j++)   /* drop the dead */
            if (act[j]->lo <= v[i].hi)
                act[k++] = act[j];
        nact = k;
        qsort(act, (size_t)nact, sizeof *act, by_offset);
        size_t off = 0;
        for (int j = 0; j < nact && act[j]->off < off + v[i].n; j++)
            if (act[j]->off + act[j]->n > off)
                off = act[j]->off + act[j]->n;
        v[i].off = off;
        act[nact++] = &v[i];
        e->g_off[v[i].t] = (int64_t)off;
        if (off + v[i].n > e->gshared_bytes)
            e->gshared_bytes = off + v[i].n;
    }
    for (int t = 0; t < g->ntensors; t++)
        if (e->g_shared[t] && e->tensor_chunk[t] == ch - e->ch && e->grad_via[t] >= 0)
            e->g_off[t] = e->g_off[pass_root(e, t)];
    free(v);
    free(act);
    return 0;
}

/* Which ops write their input gradients rather than add to them: an op
 * whose kind can (merak_op_kind.fresh) and that is the first to add to
 * every input gradient it is given, each in the shared buffer (which the
 * executor would otherwise zero for it: zero_shared) and each a tensor of
 * its own.  The others' gradients are zeroed first, as before.  That
 * spares a pass writing zeros over each such gradient and the first
 * writer's pass reading them back (for GPT-2's layer, 18 of its rows'
 * widths of the 18 its activation gradients take). */
static int op_fresh_ok(const merak_exec *e, int i)
{
    const merak_op *o = &e->g->ops[i];
    int ok = merak_op_kind_of(o)->fresh && !e->zero_first, any = 0;
    for (int j = 0; ok && j < o->nin; j++) {
        const int t = o->in[j];
        if (t < 0 || e->param_of[t] >= 0)
            continue;   /* no gradient: token ids, a parameter */
        ok = j < 3 && e->g_shared[t] && e->last_use[t] == i;
        for (int l = 0; ok && l < j; l++)
            ok = o->in[l] != t;
        any = 1;
    }
    return ok && any;
}

static void plan_fresh(merak_exec *e)
{
    for (int i = 0; i < e->g->nops; i++)
        e->fresh[i] = (unsigned char)op_fresh_ok(e, i);
}

/* Gradients passed through: an op whose input part gives its first input
 * the output's gradient unchanged (merak_op_kind.pass_grad: the residual
 * adds, the position embedding), writing it fresh (op_fresh_ok), with
 * both gradients in the shared buffer, of one size and storage, has its
 * input's gradient placed in its output's: the output's gradient is
 * complete when the op's backward runs, and dead after it, which is where
 * its input's starts.  So the op copies nothing there, and a residual
 * stream's gradient is one buffer from the last layer to the first (for
 * GPT-2's layer, 2 of the 18 row widths its gradients move).  Staged ops
 * (bf16 storage through float copies) keep their copies: the staging
 * widens a buffer once per call.  Chunk ch's, before share_grads.  (Its
 * second input's too, under the conditions below.) */
static int passable(const merak_exec *e, int i, int t)
{
    const int y = e->g->ops[i].out;
    return t >= 0 && e->param_of[t] < 0 && e->g_shared[t] && e->g_shared[y] && e->half[t] == e->half[y] &&
           tbytes(e, t) == tbytes(e, y) && (!e->half[y] || e->native[i]);
}

/* Does an op of [from, to) read tensor t? */
static int read_in(const merak_graph *g, int t, int from, int to)
{
    for (int k = from; k < to; k++)
        for (int j = 0; j < g->ops[k].nin; j++)
            if (g->ops[k].in[j] == t)
                return 1;
    return 0;
}

static void plan_pass(merak_exec *e, const chunk *ch, const int *nuse)
{
    const merak_graph *g = e->g;
    for (int i = ch->begin; i < ch->end; i++) {
        const merak_op *o = &g->ops[i];
        if (!merak_op_kind_of(o)->pass_grad || !op_fresh_ok(e, i))
            continue;
        const int t = o->nin > 0 ? o->in[0] : -1, u = o->nin > 1 ? o->in[1] : -1;
        if (passable(e, i, t))
            e->grad_via[t] = o->out;
        /* The second input too (a residual add's branch), where its
         * gradient is this op's alone (no other op reads it, none passes
         * into it) and its producer's backward, reading it, is done
         * before any op adds to the first input's gradient in the same
         * buffer: the first input made before it (so every other tensor
         * passed into the first input is read before it too), and none of
         * the first input's other readers at or after it. */
        const int pu = u >= 0 ? g->tensors[u].producer : -1;
        int into_u = 0;   /* (only u's producer can have passed a gradient into u) */
        for (int j = 0; pu >= 0 && j < g->ops[pu].nin; j++)
            into_u |= g->ops[pu].in[j] >= 0 && e->grad_via[g->ops[pu].in[j]] == u;
        if (passable(e, i, u) && nuse[u] == 1 && !into_u &&
            (e->grad_via[t] < 0 || (g->tensors[t].producer < pu && !read_in(g, t, pu, i))))
            e->grad_via[u] = o->out;
    }
}

/* Plans chunk c's slot arena and recompute buffer and the parameters its
 * ops read (in first-use order after those of the chunks before it). */
static int plan_chunk(merak_exec *e, int c, const int *nuse, const int *last_use, int *first_use,
                      size_t *scratch_n, size_t *tpbuf_n, size_t *host_n, char *err, size_t errlen)
{
    const merak_graph *g = e->g;
    chunk *ch = &e->ch[c];
    size_t pool_act = 0, pool_grad = 0;   /* bytes */
    for (int i = ch->begin; i < ch->end; i++) {
        const merak_op *o = &g->ops[i];
        int uses[MERAK_OP_MAX_IN + 1];
        int nu = 0;
        for (int j = 0; j < o->nin; j++)
            if (o->in[j] >= 0)
                uses[nu++] = o->in[j];
        uses[nu++] = o->out;
        for (int j = 0; j < nu; j++) {
            int t = uses[j];
            const merak_tensor *x = &g->tensors[t];
            size_t n = (size_t)merak_tensor_elems(x);
            if (x->kind == MERAK_T_PARAM) {
                int root = merak_graph_param_root(g, t);
                if (e->param_of[root] < 0) {
                    int p = e->nparams++;
                    e->param_tensor[p] = root;
                    e->param_n[p] = n;
                    e->param_off[p] = e->flat_n;
                    e->flat_n += round_up(n);
                    e->param_of[root] = p;
                    first_use[p] = i;
                }
                e->param_of[t] = e->param_of[root];
                e->half[t] = e->half[root] = (unsigned char)e->store16;
            } else if (e->tensor_chunk[t] >= 0 && e->tensor_chunk[t] != c) {
                return merak_errf(err, errlen,
                                  "executor: tensor %s is used by chunks %d and %d (chunks exchange "
                                  "activations through the pipeline only)", x->name, e->tensor_chunk[t], c);
            } else if (e->t_off[t] < 0) {
                /* made by a recomputed op and read by recomputed ops only */
                e->tensor_chunk[t] = c;
                e->pooled[t] = x->producer >= ch->begin && x->producer < ch->rc_end && last_use[t] >= 0 &&
                               last_use[t] < ch->rc_end;
                size_t *av = e->pooled[t] ? &pool_act : &ch->act_bytes;
                size_t *gv = e->pooled[t] ? &pool_grad : &ch->grad_bytes;
                e->in_place[t] = x->dtype == MERAK_F32 && grad_in_place(e, ch, t, nuse, last_use);
                /* bf16 storage for the activations: not the loss, nor the
                 * logits (the loss's input, whose gradient takes their
                 * storage where their head is in the chunk) unless the
                 * backend's cross-entropy reads bf16 (else the loss would
                 * stage them whole, N x V floats; they stay float storage
                 * holding bf16 values) */
                const merak_op_kind *lk = last_use[t] >= 0 ? merak_op_kind_of(&g->ops[last_use[t]]) : NULL;
                e->half[t] = e->store16 && x->dtype == MERAK_F32 && t != g->loss &&
                             !(lk && lk->loss && !(lk->bf16 && lk->bf16(g, &g->ops[last_use[t]], e->k)));
                e->row_ld[t] = e->half[t] ? row_ld_of(e, ch, t, nuse, last_use) : 0;
                e->t_off[t] = (int64_t)*av;
                *av += round_bytes(tbytes(e, t));
                if (e->in_place[t]) {
                    e->g_off[t] = e->t_off[t];
                } else if (x->dtype == MERAK_F32 && grad_shareable(e, ch, t)) {
                    e->g_shared[t] = 1;   /* placed by share_grads */
                } else if (x->dtype == MERAK_F32) {
                    e->g_off[t] = (int64_t)*gv;
                    *gv += round_bytes(tbytes(e, t));
                }
            }
        }
        /* An op whose output is kept keeps its saved values too and is not
         * re-run: the recompute only rebuilds what was dropped. */
        e->dropped[i] = e->pooled[o->out];
        const merak_op_kind *kd = merak_op_kind_of(o);
        size_t sv = kd->saved_floats ? kd->saved_floats(g, o) : 0;
        if (sv) {
            size_t *av = e->dropped[i] ? &pool_act : &ch->act_bytes;
            e->save_off[i] = (int64_t)*av;
            *av += round_up(sv) * sizeof(float);
        }
        /* bf16 storage run natively: a kind with bf16 entries in the
         * backend, summing nothing, all of whose float tensors but the
         * loss are bf16, none read twice (staging adds an op's two
         * contributions to one gradient before rounding, its entries
         * would round after each) */
        int all16 = e->store16 && kd->bf16 && kd->bf16(g, o, e->k) && kd->sum == MERAK_SUM_NONE;
        for (int j = 0; j < nu && all16; j++) {
            all16 = g->tensors[uses[j]].dtype != MERAK_F32 || e->half[uses[j]] || uses[j] == g->loss;
            for (int q = 0; q < j && all16; q++)
                all16 = uses[q] != uses[j];
        }
        e->native[i] = (unsigned char)all16;
        /* staging: the op's bf16 tensors, values and gradients (a
         * parameter, or a gradient in its value's storage: once),
         * widened for the op's float kernels; run natively, the scratch
         * of its bf16 entries where they want one (what the kind says, if
         * it says, else the same) */
        size_t stf = 0;
        if (e->native[i] && e->k->bf16_scratch && kd->bf16_scratch_floats)
            stf = kd->bf16_scratch_floats(g, o);
        else if (!e->native[i] || e->k->bf16_scratch)
            for (int j = 0; j < nu; j++)
                if (e->half[uses[j]])
                    stf += (g->tensors[uses[j]].kind == MERAK_T_PARAM || e->in_place[uses[j]] ? 1 : 2) *
                           round_up((size_t)merak_tensor_elems(&g->tensors[uses[j]]));
        if (stf > e->stage_floats)
            e->stage_floats = stf;
        size_t sn = kd->scratch_floats ? kd->scratch_floats(g, o, e->k, e->native[i]) : 0;
        if (sn > *scratch_n)
            *scratch_n = sn;
        if (kd->loss) {
            /* host: lse, target logits and targets per row, then the
             * vocabulary shards' statistics */
            size_t rows = (size_t)rows_of(&g->tensors[o->in[0]]);
            if (o->vocab_parallel)
                *tpbuf_n = 2 * (size_t)g->tp * rows;
            *host_n = 3 * rows + *tpbuf_n;
        }
    }
    ch->act_base = e->act_bytes;
    ch->grad_base = e->grad_bytes;
    e->act_bytes += ch->act_bytes * (size_t)ch->nslots;
    e->grad_bytes += ch->grad_bytes * (size_t)ch->nslots;
    e->pool_act = pool_act > e->pool_act ? pool_act : e->pool_act;
    e->pool_grad = pool_grad > e->pool_grad ? pool_grad : e->pool_grad;
    plan_pass(e, ch, nuse);
    if (share_grads(e, ch) < 0)
        return merak_errf(err, errlen, "executor: out of memory");
    return 0;
}

/* Sub-batches need every tensor of the slice but the parameters and the
 * loss to lead with one batch dimension that K divides. */
static int check_batch(const merak_exec *e, char *err, size_t errlen)
{
    const merak_graph *g = e->g;
    int64_t B = -1;
    if (e->K == 1)
        return 0;
    for (int t = 0; t < g->ntensors; t++) {
        const merak_tensor *x = &g->tensors[t];
        if (e->t_off[t] < 0 || t == g->loss)
            continue;   /* a parameter, the loss, or outside the slice */
        if (B < 0)
            B = x->shape[0];
        if (x->ndim < 2 || x->shape[0] != B || B % e->K)
            return merak_errf(err, errlen,
                              "executor: %d sub-batches: tensor %s does not lead with a batch of %lld rows "
                              "that %d divides", e->K, x->name, (long long)B, e->K);
    }
    return 0;
}

int merak_exec_create(const merak_graph *g, const merak_exec_opts *opts, merak_exec **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    if (opts->nchunks < 1 || !opts->chunks)
        return merak_errf(err, errlen, "executor: %d op ranges (need at least 1)", opts->nchunks);
    if (!opts->kernels || !opts->kernels->alloc)
        return merak_errf(err, errlen, "executor: no kernels");
    if (g->tp > 1 && (!opts->tp || !opts->tp->allreduce))
        return merak_errf(err, errlen, "executor: a graph sharded %d ways needs its tp group", g->tp);
    if (opts->tp_overlap < 0)
        return merak_errf(err, errlen, "executor: %d sub-batches", opts->tp_overlap);
    if (opts->tp_overlap > 1 && g->tp > 1 && (!opts->tp->start || !opts->tp->wait || !opts->tp->test))
        return merak_errf(err, errlen, "executor: sub-pipelined tensor parallelism needs non-blocking sums");
    if (opts->bf16 && !opts->kernels->round_bf16)
        return merak_errf(err, errlen, "executor: the %s backend has no bf16 yet (fp32 only)", opts->kernels->name);

    merak_exec *e = calloc(1, sizeof *e);
    if (!e)
        return merak_errf(err, errlen, "executor: out of memory");
    e->g = g;
    e->k = opts->kernels;
    e->nchunks = opts->nchunks;
    e->loss_scale = 1.0f;
    e->ref_mark = -1;
    e->tp = opts->tp;
    e->K = opts->tp_overlap > 1 ? opts->tp_overlap : 1;
    e->bf16 = opts->bf16 != 0;
    e->split = opts->split != 0;
    e->keep_grads = opts->keep_grads != 0;
    e->zero_first = opts->zero_first != 0;
    /* bf16 storage where the backend converts and no sub-batches split the
     * op's rows (their sums stay in flight across ops); else bf16 values in
     * float storage, which give the same numbers */
    e->store16 = e->bf16 && !opts->float_storage && e->K == 1 && opts->kernels->to_bf16 &&
                 opts->kernels->from_bf16;
    int nt = g->ntensors;
    e->ch = calloc((size_t)e->nchunks, sizeof *e->ch);
    if (!e->ch) {
        merak_exec_destroy(e);
        return merak_errf(err, errlen, "executor: out of memory");
    }
    if (set_chunks(e, opts, err, errlen) < 0) {
        merak_exec_destroy(e);
        return -1;
    }
    e->param_tensor = calloc((size_t)nt, sizeof *e->param_tensor);
    e->param_off = calloc((size_t)nt, sizeof *e->param_off);
    e->param_n = calloc((size_t)nt, sizeof *e->param_n);
    e->param_of = malloc((size_t)nt * sizeof *e->param_of);
    e->tensor_chunk = malloc((size_t)nt * sizeof *e->tensor_chunk);
    e->t_off = malloc((size_t)nt * sizeof *e->t_off);
    e->g_off = malloc((size_t)nt * sizeof *e->g_off);
    e->in_place = calloc((size_t)nt, 1);
    e->g_shared = calloc((size_t)nt, 1);
    e->half = calloc((size_t)nt, 1);
    e->row_ld = calloc((size_t)nt, sizeof *e->row_ld);
    e->native = calloc((size_t)g->nops, 1);
    e->fresh = calloc((size_t)g->nops, 1);
    e->grad_via = malloc((size_t)nt * sizeof *e->grad_via);
    e->save_off = malloc((size_t)g->nops * sizeof *e->save_off);
    e->slot_chunk = malloc((size_t)e->nslots * sizeof *e->slot_chunk);
    e->seed = calloc((size_t)e->nslots, sizeof *e->seed);
    e->loss = calloc((size_t)e->nslots, sizeof *e->loss);
    e->grad_early = calloc((size_t)e->nslots, 1);
    e->ready = calloc((size_t)g->nops, sizeof *e->ready);
    e->pooled = calloc((size_t)nt, 1);
    e->dropped = calloc((size_t)g->nops, 1);
    e->pool_of = malloc((size_t)e->nslots * sizeof *e->pool_of);
    e->pool_busy = calloc((size_t)e->npool + 1, 1);
    e->pending = calloc((size_t)e->K, sizeof *e->pending);
    int *first_use = calloc((size_t)nt, sizeof *first_use);  /* by param index */
    int *last_use = e->last_use = malloc((size_t)nt * sizeof *last_use);   /* over the whole graph */
    int *nuse = calloc((size_t)nt, sizeof *nuse);             /* ops reading a tensor */
    if (!e->param_tensor || !e->param_off || !e->param_n || !e->param_of || !e->tensor_chunk || !e->t_off ||
        !e->g_off || !e->in_place || !e->g_shared || !e->half || !e->row_ld || !e->native || !e->fresh || !e->grad_via || !e->save_off || !e->slot_chunk || !e->seed || !e->loss || !e->grad_early || !e->ready ||
        !first_use || !last_use || !nuse || !e->pooled || !e->dropped || !e->pool_of || !e->pool_busy ||
        !e->pending) {
        free(first_use);
        free(nuse);
        merak_exec_destroy(e);
        return merak_errf(err, errlen, "executor: out of memory");
    }
    for (int c = 0; c < e->nchunks; c++)
        for (int j = 0; j < e->ch[c].nslots; j++)
            e->slot_chunk[e->ch[c].slot0 + j] = c;
    for (int i = 0; i < e->nslots; i++)
        e->pool_of[i] = -1;
    merak_graph_last_uses(g, last_use, nuse);
    for (int t = 0; t < nt; t++)
        e->param_of[t] = -1, e->tensor_chunk[t] = -1, e->t_off[t] = -1, e->g_off[t] = -1, e->grad_via[t] = -1;
    for (int i = 0; i < g->nops; i++)
        e->save_off[i] = -1;

    /* Parameters in first-use order; tensors and saved values carved from
     * their chunk's slot arena, gradients of float tensors from its
     * gradient arena. */
    size_t scratch_n = 0, tpbuf_n = 0, host_n = 0;
    int rc = 0;
    for (int c = 0; c < e->nchunks && rc == 0; c++)
        rc = plan_chunk(e, c, nuse, last_use, first_use, &scratch_n, &tpbuf_n, &host_n, err, errlen);
    /* Parameters first used at or after op i complete once i's weight
     * gradient is done: a suffix of the flat buffer. */
    for (int c = 0, p = 0; c < e->nchunks && rc == 0; c++)
        for (int i = e->ch[c].begin; i < e->ch[c].end; i++) {
            while (p < e->nparams && first_use[p] < i)
                p++;
            e->ready[i] = p < e->nparams ? e->param_off[p] : e->flat_n;
        }
    free(first_use);
    free(nuse);
    /* padded rows (row_ld_of) are read and written by native calls only */
    for (int t = 0; t < nt && rc == 0; t++)
        if (e->row_ld[t] && !(e->native[g->tensors[t].producer] && e->native[e->last_use[t]]))
            rc = merak_errf(err, errlen, "executor: tensor %s has padded rows but op %d or %d is staged",
                            g->tensors[t].name, g->tensors[t].producer, e->last_use[t]);
    if (rc == 0)
        plan_fresh(e);
    e->scratch_n = scratch_n;
    e->tpbuf_n = tpbuf_n;
    if (rc == 0)
        rc = check_batch(e, err, errlen);
    if (rc < 0) {
        merak_exec_destroy(e);
        return -1;
    }
    if (opts->plan_only) {
        *out = e;
        return 0;
    }
    const merak_kernels *k = e->k;
    e->pact = alloc_raw(k, e->pool_act * (size_t)e->npool);
    e->pgrad = alloc_raw(k, e->pool_grad * (size_t)e->npool);
    e->params = alloc_floats(k, e->flat_n);
    e->cparams = e->bf16 ? alloc_raw(k, cparams_bytes(e)) : NULL;
    e->grads = alloc_floats(k, e->flat_n);
    e->act = alloc_raw(k, e->act_bytes);
    e->gradarena = alloc_raw(k, e->grad_bytes);
    e->gshared = alloc_raw(k, e->gshared_bytes);
    e->stage = alloc_floats(k, e->stage_floats);
    e->scratch = alloc_floats(k, scratch_n);
    e->tpbuf = alloc_floats(k, tpbuf_n);
    e->host = malloc((host_n ? host_n : 1) * sizeof *e->host);
    if (!e->params || (e->bf16 && !e->cparams) || !e->grads || !e->act || !e->gradarena || !e->gshared ||
        !e->stage || !e->scratch || !e->tpbuf || !e->host || !e->pact || !e->pgrad) {
        size_t mb = merak_exec_device_bytes(e) >> 20;
        merak_exec_destroy(e);
        return merak_errf(err, errlen, "executor: cannot allocate %zu MiB for parameters and activations", mb);
    }
    *out = e;
    return 0;
}

void merak_exec_destroy(merak_exec *e)
{
    if (!e)
        return;
    free(e->ch);
    free(e->slot_chunk);
    free(e->tensor_chunk);
    free(e->param_tensor);
    free(e->param_off);
    free(e->param_n);
    free(e->param_of);
    free(e->t_off);
    free(e->g_off);
    free(e->in_place);
    free(e->g_shared);
    free(e->half);
    free(e->row_ld);
    free(e->native);
    free(e->fresh);
    free(e->grad_via);
    free(e->last_use);
    free(e->save_off);
    free(e->op_marks);
    if (e->k) {
        e->k->free(e->params);
        e->k->free(e->cparams);
        e->k->free(e->grads);
        e->k->free(e->act);
        e->k->free(e->gradarena);
        e->k->free(e->gshared);
        e->k->free(e->stage);
        e->k->free(e->scratch);
        e->k->free(e->tpbuf);
        e->k->free(e->pact);
        e->k->free(e->pgrad);
    }
    free(e->pooled);
    free(e->dropped);
    free(e->pool_of);
    free(e->pool_busy);
    free(e->pending);
    free(e->host);
    free(e->seed);
    free(e->loss);
    free(e->grad_early);
    free(e->ready);
    free(e);
}

/* ------------------------------------------------------------------ accessors */

int merak_exec_num_params(const merak_exec *e) { return e->nparams; }
int merak_exec_param_tensor(const merak_exec *e, int i) { return e->param_tensor[i]; }
float *merak_exec_param_data(const merak_exec *e, int i) { return e->params + e->param_off[i]; }
float *merak_exec_param_grad(const merak_exec *e, int i) { return e->grads + e->param_off[i]; }
size_t merak_exec_param_elems(const merak_exec *e, int i) { return e->param_n[i]; }

float *merak_exec_params_flat(const merak_exec *e, size_t *n)
{
    *n = e->flat_n;
    return e->params;
}

float *merak_exec_grads_flat(const merak_exec *e, size_t *n)
{
    *n = e->flat_n;
    return e->grads;
}

int merak_exec_param_find(const merak_exec *e, int t)
{
    return (t >= 0 && t < e->g->ntensors) ? e->param_of[t] : -1;
}

const merak_kernels *merak_exec_kernels(const merak_exec *e) { return e->k; }
const char *merak_exec_error(const merak_exec *e) { return e->err; }

int merak_exec_param_read(const merak_exec *e, int i, float *host)
{
    return e->k->copy(host, merak_exec_param_data(e, i), e->param_n[i] * sizeof(float),
                      MERAK_COPY_D2H);
}

uint16_t *merak_exec_copies16(merak_exec *e)
{
    return e->store16 ? (uint16_t *)e->cparams : NULL;
}

void merak_exec_copies_current(merak_exec *e)
{
    e->copies_current = e->store16;
}

void merak_exec_masters_written(merak_exec *e) { e->copies_current = 0; }

int merak_exec_param_write(merak_exec *e, int i, const float *host)
{
    e->copies_current = 0;
    return e->k->copy(merak_exec_param_data(e, i), host, e->param_n[i] * sizeof(float),
                      MERAK_COPY_H2D);
}

int merak_exec_tensor_write(merak_exec *e, int slot, int t, const void *host)
{
    void *dst = merak_exec_tensor(e, slot, t);
    if (!dst)
        return -1;
    const size_t n = (size_t)merak_tensor_elems(&e->g->tensors[t]);
    if (!e->half[t])   /* int32 ids and floats are both 4 bytes an element */
        return e->k->copy(dst, host, n * 4, MERAK_COPY_H2D);
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    if (!h)
        return -1;
    for (size_t i = 0; i < n; i++)
        h[i] = merak_f32_to_bf16(((const float *)host)[i]);
    int rc = e->k->copy(dst, h, n * sizeof *h, MERAK_COPY_H2D);
    free(h);
    return rc;
}

size_t merak_exec_tensor_bytes(const merak_exec *e, int t)
{
    return t >= 0 && t < e->g->ntensors && e->t_off[t] >= 0 ? tbytes(e, t) : 0;
}

int merak_exec_tensor_bf16(const merak_exec *e, int t)
{
    return t >= 0 && t < e->g->ntensors && e->half[t] && e->param_of[t] < 0;
}

int merak_exec_op_native(const merak_exec *e, int i)
{
    return i >= 0 && i < e->g->nops && e->native[i];
}

int merak_exec_op_fresh(const merak_exec *e, int i)
{
    return i >= 0 && i < e->g->nops && e->fresh[i];
}

/* The recompute buffer slot holds, or -1. */
static int pool_index(const merak_exec *e, int slot) { return e->pool_of[slot]; }

int merak_exec_tensor_chunk(const merak_exec *e, int t)
{
    return t >= 0 && t < e->g->ntensors ? e->tensor_chunk[t] : -1;
}

/* The slot's chunk, and the start of its value and gradient arenas. */
static const chunk *chunk_of(const merak_exec *e, int slot) { return &e->ch[e->slot_chunk[slot]]; }
static unsigned char *slot_act(const merak_exec *e, int slot)
{
    const chunk *c = chunk_of(e, slot);
    return e->act + c->act_base + (size_t)(slot - c->slot0) * c->act_bytes;
}
static unsigned char *slot_grad(const merak_exec *e, int slot)
{
    const chunk *c = chunk_of(e, slot);
    return e->gradarena + c->grad_base + (size_t)(slot - c->slot0) * c->grad_bytes;
}

void *merak_exec_tensor(const merak_exec *e, int slot, int t)
{
    if (e->t_off[t] < 0 || e->tensor_chunk[t] != e->slot_chunk[slot])
        return NULL;
    if (e->pooled[t]) {
        int p = pool_index(e, slot);
        return p < 0 ? NULL : e->pact + (size_t)p * e->pool_act + e->t_off[t];
    }
    return slot_act(e, slot) + e->t_off[t];
}

void *merak_exec_grad(const merak_exec *e, int slot, int t)
{
    if (e->g_off[t] < 0 || e->tensor_chunk[t] != e->slot_chunk[slot])
        return NULL;
    if (e->in_place[t])
        return merak_exec_tensor(e, slot, t);
    if (e->g_shared[t])
        return e->gshared + e->g_off[t];
    if (e->pooled[t]) {
        int p = pool_index(e, slot);
        return p < 0 ? NULL : e->pgrad + (size_t)p * e->pool_grad + e->g_off[t];
    }
    return slot_grad(e, slot) + e->g_off[t];
}

size_t merak_exec_arena_bytes(const merak_exec *e)
{
    return e->act_bytes + e->grad_bytes + e->gshared_bytes + (e->pool_act + e->pool_grad) * (size_t)e->npool +
           (e->store16 ? alloc_bytes(e->stage_floats) : 0);
}

size_t merak_exec_device_bytes(const merak_exec *e)
{
    return 2 * alloc_bytes(e->flat_n) + (e->bf16 ? alloc_size(cparams_bytes(e)) : 0) + alloc_size(e->act_bytes) + alloc_size(e->grad_bytes) +
           alloc_size(e->gshared_bytes) + alloc_bytes(e->stage_floats) +
           alloc_size(e->pool_act * (size_t)e->npool) + alloc_size(e->pool_grad * (size_t)e->npool) +
           alloc_bytes(e->scratch_n) + alloc_bytes(e->tpbuf_n);
}

void merak_exec_set_loss_scale(merak_exec *e, float scale) { e->loss_scale = scale; }
double merak_exec_loss(const merak_exec *e, int slot) { return e->loss[slot]; }

void merak_exec_set_eval(merak_exec *e, int on) { e->eval = on; }

void merak_exec_set_grad_hook(merak_exec *e, void (*fn)(void *ctx, size_t from), void *ctx)
{
    e->hook = fn;
    e->hook_ctx = ctx;
}

void merak_exec_set_poll(merak_exec *e, void (*fn)(void *ctx), void *ctx)
{
    e->poll = fn;
    e->poll_ctx = ctx;
}

int merak_exec_zero_grads(merak_exec *e)
{
    return e->k->zero(e->grads, e->flat_n * sizeof(float));
}

int merak_exec_cast_params(merak_exec *e)
{
    if (!e->bf16)
        return 0;
    if (e->copies_current) {   /* the optimizer's pass wrote them */
        e->copies_current = 0;
        return 0;
    }
    if (e->store16) {
        e->k->to_bf16(e->cparams, e->params, e->flat_n);
        return 0;
    }
    if (e->k->copy(e->cparams, e->params, e->flat_n * sizeof(float), MERAK_COPY_D2D) < 0)
        return -1;
    e->k->round_bf16(e->cparams, e->flat_n);
    return 0;
}

/* Value of tensor t in the slot: a parameter's data (its compute copy in
 * bf16) or the arena buffer (bf16 storage for a half tensor). */
static void *val(const merak_exec *e, int slot, int t)
{
    if (t < 0)
        return NULL;
    int p = e->param_of[t];
    if (p >= 0 && e->store16)
        return (uint16_t *)e->cparams + e->param_off[p];
    if (p >= 0)
        return (e->bf16 ? (float *)e->cparams : e->params) + e->param_off[p];
    return merak_exec_tensor(e, slot, t);
}

/* Gradient of tensor t: a parameter's gradient or the slot's buffer. */
static void *grad(const merak_exec *e, int slot, int t)
{
    if (t < 0)
        return NULL;
    int p = e->param_of[t];
    if (p >= 0)
        return e->grads + e->param_off[p];
    return merak_exec_grad(e, slot, t);
}

static float *saved(const merak_exec *e, int slot, int op)
{
    if (e->dropped[op])
        return (float *)(e->pact + (size_t)pool_index(e, slot) * e->pool_act + e->save_off[op]);
    return (float *)(slot_act(e, slot) + e->save_off[op]);
}

/* Per-op dropout seed derived from the slot's seed. */
static uint64_t op_seed(uint64_t seed, int op)
{
    return merak_mix64(seed + MERAK_GOLDEN * (uint64_t)(op + 1));
}

/* ------------------------------------------------------------------ sub-batches
 *
 * With tp_overlap K > 1 a micro-batch runs as K sub-batches along the
 * batch: sub-batch k is the k-th K-th of every tensor's rows.  Every
 * tensor but the parameters and the loss leads with the batch (checked at
 * creation), and so do the ops' per-row saved values, so a sub-batch's
 * part is contiguous, k/K of the way in. */
typedef struct sub {
    int k, K;
} sub;

static const sub WHOLE = {0, 1};

/* First element of the sub-batch's part of n elements. */
static size_t part(size_t n, sub sb) { return n / (size_t)sb.K * (size_t)sb.k; }

static void *sub_of(const merak_exec *e, void *p, int t, sub sb)
{
    if (!p || e->param_of[t] >= 0 || t == e->g->loss)
        return p;
    return (unsigned char *)p + part((size_t)merak_tensor_elems(&e->g->tensors[t]), sb) * esize(e, t);
}

static void *sval(const merak_exec *e, int slot, int t, sub sb) { return sub_of(e, val(e, slot, t), t, sb); }
static void *sgrad(const merak_exec *e, int slot, int t, sub sb) { return sub_of(e, grad(e, slot, t), t, sb); }

/* ------------------------------------------------------------------ tensor parallelism */

static int tp_sum(merak_exec *e, float *buf, size_t n, int op)
{
    if (e->tp->allreduce(e->tp->ctx, buf, n) < 0)
        return fail(e, "op %d: the tensor-parallel sum failed", op);
    return 0;
}

static int copy(merak_exec *e, void *dst, const void *src, size_t bytes, merak_copy_kind kind,
                int op)
{
    if (e->k->copy(dst, src, bytes, kind) < 0)
        return fail(e, "op %d: a %s memory copy failed", op, e->k->name);
    return 0;
}

/* The vocabulary-parallel cross-entropy: every rank's shard statistics
 * (lse, tlogit per row, in the backend's memory) are gathered by one sum
 * over a [tp][2][N] buffer where each rank fills its own block, then
 * combined on the host in rank order into lse_h and tl_h, so every rank
 * computes the same whole-vocabulary lse and target logit; the combined lse
 * goes back for the backward. */
static int vocab_combine(merak_exec *e, int op, float *lse, const float *tlogit, float *lse_h,
                         float *tl_h, int N)
{
    int tp = e->g->tp, r = e->g->tp_rank;
    size_t n = 2 * (size_t)tp * (size_t)N, row = (size_t)N * sizeof(float);
    float *hb = e->host + 3 * (size_t)N;   /* host copy of the [tp][2][N] buffer */
    if (e->k->zero(e->tpbuf, n * sizeof(float)) < 0 ||
        copy(e, e->tpbuf + (size_t)(2 * r) * N, lse, row, MERAK_COPY_D2D, op) < 0 ||
        copy(e, e->tpbuf + (size_t)(2 * r + 1) * N, tlogit, row, MERAK_COPY_D2D, op) < 0 ||
        tp_sum(e, e->tpbuf, n, op) < 0 ||
        copy(e, hb, e->tpbuf, n * sizeof(float), MERAK_COPY_D2H, op) < 0)
        return -1;
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, sum = 0, tl = 0;
        for (int s = 0; s < tp; s++)
            if (hb[(size_t)(2 * s) * N + i] > mx)
                mx = hb[(size_t)(2 * s) * N + i];
        for (int s = 0; s < tp; s++) {
            sum += exp(hb[(size_t)(2 * s) * N + i] - mx);
            tl += hb[(size_t)(2 * s + 1) * N + i];
        }
        lse_h[i] = (float)(mx + log(sum));
        tl_h[i] = (float)tl;
    }
    return copy(e, lse, lse_h, row, MERAK_COPY_H2D, op);
}

/* The loss op's forward after its kernels: the rows' statistics to the
 * host (the vocabulary shards' combined), the loss summed there (ignored
 * targets count as 0); the micro-batch's last sub-batch writes the mean. */
static int loss_reduce(merak_exec *e, int slot, int op, const merak_op_io *io)
{
    const int N = io->rows, Nall = io->rows_all;
    size_t row = (size_t)N * sizeof(float);
    float *lse, *tlogit;
    merak_op_loss_rows(io, &lse, &tlogit);
    float *lse_h = e->host, *tl_h = lse_h + N;
    int32_t *tg_h = (int32_t *)(tl_h + N);
    if (io->o->vocab_parallel ? vocab_combine(e, op, lse, tlogit, lse_h, tl_h, N) < 0
                              : copy(e, lse_h, lse, row, MERAK_COPY_D2H, op) < 0 ||
                                    copy(e, tl_h, tlogit, row, MERAK_COPY_D2H, op) < 0)
        return -1;
    if (copy(e, tg_h, io->x[1], (size_t)N * sizeof *tg_h, MERAK_COPY_D2H, op) < 0)
        return -1;
    double sum = io->part ? e->loss[slot] : 0;
    for (int r = 0; r < N; r++)
        sum += tg_h[r] < 0 ? 0 : (double)lse_h[r] - (double)tl_h[r];
    e->loss[slot] = sum;
    if (io->part < Nall / N - 1)
        return 0;
    e->loss[slot] = sum / Nall;
    float loss = (float)e->loss[slot];
    return copy(e, io->y, &loss, sizeof loss, MERAK_COPY_H2D, op);
}

/* ------------------------------------------------------------------ bf16 storage
 *
 * The kernels compute in float.  Before an op's kernels run, the op's
 * tensors in bf16 storage that its pass reads are widened into the staging
 * buffer (exact: a bf16 value is a float), and its kernel call points
 * there; after them, what the pass wrote is narrowed back to storage,
 * rounded to nearest even: the rounding of exec.h's Precision (an op's
 * output after its forward, its inputs' gradients after its input part),
 * so bf16 storage gives the numbers of bf16 values in float storage, bit
 * for bit.  A tensor is staged once per call, however many of the call's
 * pointers name it; a weight part stages no parameter (it reads none).
 * An op run natively (e->native: op_io16) stages nothing. */

/* What an op's call is for: which of its buffers it reads and writes. */
typedef enum io_mode { IO_FORWARD, IO_INPUT, IO_WEIGHT } io_mode;

/* raw (tensor t's storage, or its gradient's; NULL: none) for the call:
 * itself in float storage, else its float copy in the staging buffer,
 * widened from storage if `widen`. */
static float *stage(merak_exec *e, void *raw, int t, size_t n, int widen)
{
    if (!raw || !e->half[t])
        return raw;
    for (int i = 0; i < e->nst; i++)
        if (e->st[i].raw == raw)
            return e->st[i].f;
    staged *s = &e->st[e->nst++];
    *s = (staged){raw, e->stage + e->st_used, n};
    e->st_used += round_up(n);
    if (widen)
        e->k->from_bf16(s->f, raw, n);
    return s->f;
}

/* The staged copy of raw back to its bf16 storage, rounded (nothing if
 * the call did not stage raw). */
static void narrow(merak_exec *e, const void *raw)
{
    for (int i = 0; i < e->nst; i++)
        if (e->st[i].raw == raw)
            e->k->to_bf16(e->st[i].raw, e->st[i].f, e->st[i].n);
}

/* A buffer in bf16 storage of tensor t, or NULL (a float one goes to *f). */
static uint16_t *b16_or(const merak_exec *e, int t, void *raw, float **f)
{
    if (t >= 0 && e->half[t])
        return raw;
    *f = raw;
    return NULL;
}

/* op_io for an op run natively in bf16 storage (e->native): its buffers as
 * they are, nothing staged. */
static merak_op_io op_io16(merak_exec *e, int slot, int i, sub sb, io_mode mode, merak_op_io io)
{
    const merak_op *o = &e->g->ops[i];
    e->nst = 0, e->st_used = 0, e->st_op = -1;   /* nothing staged for this call */
    io.b16 = 1;
    io.scratch16 = e->stage;
    io.scratch16_n = e->stage_floats;
    for (int j = 0; j < o->nin && j < 3; j++) {
        const int t = o->in[j];
        if (mode != IO_WEIGHT || t < 0 || e->param_of[t] < 0)
            io.x16[j] = b16_or(e, t, sval(e, slot, t, sb), &io.x[j]);
        if (mode == IO_INPUT && t >= 0 && e->param_of[t] < 0)
            io.dx16[j] = b16_or(e, t, sgrad(e, slot, t, sb), &io.dx[j]);
        if (j > 0 && t >= 0 && e->param_of[t] >= 0)
            io.dw[j - 1] = grad(e, slot, t);
    }
    /* row strides: the padded ones, else the rows' width */
    const int x0 = o->nin > 0 ? o->in[0] : -1;
    io.ldx = x0 < 0 ? 0 : e->row_ld[x0] ? e->row_ld[x0] : (int)cols_of(&e->g->tensors[x0]);
    io.ldy = e->row_ld[o->out] ? e->row_ld[o->out] : (int)cols_of(&e->g->tensors[o->out]);
    if (mode == IO_FORWARD || merak_op_kind_of(o)->reads_output)
        io.y16 = b16_or(e, o->out, sval(e, slot, o->out, sb), &io.y);
    if (mode != IO_FORWARD) {
        float *dy = NULL;
        io.dy16 = b16_or(e, o->out, sgrad(e, slot, o->out, sb), &dy);
        io.dy = dy;
    }
    return io;
}

/* Op i's kernel call for the slot's sub-batch: the sub-batch's parts of
 * its tensors and their gradients, parameters whole (ops.h); in bf16
 * storage, the float copies the mode's kernels read and write. */
static merak_op_io op_io(merak_exec *e, int slot, int i, sub sb, io_mode mode)
{
    const merak_graph *g = e->g;
    const merak_op *o = &g->ops[i];
    const merak_tensor *x = &g->tensors[o->in[0]];
    merak_op_io io = {.g = g, .o = o, .k = e->k, .scratch = e->scratch, .part = sb.k, .eval = e->eval,
                      .loss_scale = e->loss_scale, .seed = op_seed(e->seed[slot], o->src)};
    /* a row: a row of a float tensor's last dimension, an element of token ids */
    io.rows_all = (int)(merak_tensor_elems(x) / (x->dtype == MERAK_I32 ? 1 : cols_of(x)));
    io.rows = io.rows_all / sb.K;
    io.seq = x->ndim >= 2 ? (int)x->shape[1] : 1;
    io.saved = e->save_off[i] >= 0 ? saved(e, slot, i) : NULL;
    io.fresh = mode == IO_INPUT && e->fresh[i];
    if (e->native[i])
        return op_io16(e, slot, i, sb, mode, io);
    /* the weight part right after the input part of the same call finds
     * the values and the output's gradient staged already */
    const int again = mode == IO_WEIGHT && e->st_mode == IO_INPUT && e->st_slot == slot && e->st_op == i &&
                      e->st_k == sb.k;
    if (!again)
        e->nst = 0, e->st_used = 0;
    e->st_mode = mode, e->st_slot = slot, e->st_op = i, e->st_k = sb.k;
    for (int j = 0; j < o->nin && j < 3; j++) {
        const int t = o->in[j];
        const size_t n = t < 0 ? 0 : (size_t)merak_tensor_elems(&g->tensors[t]) / (size_t)sb.K;
        if (mode != IO_WEIGHT || t < 0 || e->param_of[t] < 0)
            io.x[j] = stage(e, sval(e, slot, t, sb), t, n, 1);
        if (mode == IO_INPUT && t >= 0 && e->param_of[t] < 0)   /* written whole if fresh: not widened */
            io.dx[j] = stage(e, sgrad(e, slot, t, sb), t, n, !io.fresh);
        if (j > 0 && t >= 0 && e->param_of[t] >= 0)
            io.dw[j - 1] = grad(e, slot, t);
    }
    const size_t n = (size_t)merak_tensor_elems(&g->tensors[o->out]) / (size_t)sb.K;
    if (mode == IO_FORWARD || merak_op_kind_of(o)->reads_output)
        io.y = stage(e, sval(e, slot, o->out, sb), o->out, n, mode != IO_FORWARD);
    if (mode != IO_FORWARD)
        io.dy = stage(e, sgrad(e, slot, o->out, sb), o->out, n, 1);
    return io;
}

/* What an op that sums over the tp group sums, in place: its output
 * forward, its output's gradient backward; n: its floats. */
static float *sum_buffer(const merak_exec *e, int slot, int i, sub sb, int backward, size_t *n)
{
    const int out = e->g->ops[i].out;
    *n = (size_t)merak_tensor_elems(&e->g->tensors[out]) / (size_t)sb.K;
    return backward ? sgrad(e, slot, out, sb) : sval(e, slot, out, sb);
}

/* ------------------------------------------------------------------ bf16
 *
 * The rounding points of exec.h's Precision: what an op writes, rounded
 * after its forward (the loss aside) and after its input-gradient part. */

static void round_output(merak_exec *e, int slot, int i, sub sb)
{
    if (!e->bf16 || merak_op_kind_of(&e->g->ops[i])->loss)
        return;
    const int out = e->g->ops[i].out;
    if (e->half[out]) {
        narrow(e, sval(e, slot, out, sb));
        return;
    }
    size_t n;
    float *y = sum_buffer(e, slot, i, sb, 0, &n);
    e->k->round_bf16(y, n);
}

static void round_input_grads(merak_exec *e, int slot, int i, sub sb)
{
    const merak_op *o = &e->g->ops[i];
    for (int j = 0; e->bf16 && j < o->nin && j < 3; j++) {   /* the inputs op_io passes */
        const int t = o->in[j];
        void *dx = t >= 0 && e->param_of[t] < 0 ? sgrad(e, slot, t, sb) : NULL;
        if (dx && e->half[t])
            narrow(e, dx);
        else if (dx)
            e->k->round_bf16(dx, (size_t)merak_tensor_elems(&e->g->tensors[t]) / (size_t)sb.K);
    }
}

static int forward_kernels(merak_exec *e, int i, const merak_op_kind *kd, const merak_op_io *io)
{
    if (kd->forward(io) < 0)
        return fail(e, "op %d: a %s memory copy failed", i, e->k->name);
    return 0;
}

/* ------------------------------------------------------------------ forward */

/* Slot takes a free recompute buffer; -1 if none is free. */
static int pool_take(merak_exec *e, int slot)
{
    for (int p = 0; p < e->npool; p++)
        if (!e->pool_busy[p]) {
            e->pool_busy[p] = 1;
            e->pool_of[slot] = p;
            return 0;
        }
    return fail(e, "no free recompute buffer for slot %d (the schedule holds more than %d)", slot,
                e->npool);
}

static void pool_release(merak_exec *e, int slot)
{
    int p = pool_index(e, slot);
    if (p >= 0) {
        e->pool_busy[p] = 0;
        e->pool_of[slot] = -1;
    }
}

/* The ops whose tensor-parallel sum a sub-pipelined pass overlaps: the
 * forward's TP_REDUCE, the backward's TP_COPY.  Their work is split in two:
 * coll_start (up to starting the sum) and coll_finish (what follows it). */
static int overlapped(const merak_exec *e, int i, int backward)
{
    return e->K > 1 && merak_op_kind_of(&e->g->ops[i])->sum == (backward ? MERAK_SUM_BACKWARD : MERAK_SUM_FORWARD);
}

/* Can op i, a loss, write its input part's gradient in its training
 * forward (merak_op_kind.forward_grad)?  Where the logits' gradient takes
 * their storage (grad_in_place: nothing else reads them), both kept from
 * the forward to the backward (not rebuilt by a recompute, which would
 * write the values over the gradient), run natively in bf16 storage, over
 * the whole vocabulary (no shards' statistics to combine first) and the
 * whole micro-batch in one call. */
static int grad_early_op(const merak_exec *e, int i)
{
    const merak_op *o = &e->g->ops[i];
    const merak_op_kind *kd = merak_op_kind_of(o);
    const int t = o->nin > 0 ? o->in[0] : -1;
    return kd->loss && kd->forward_grad && t >= 0 && e->K == 1 && e->native[i] && e->in_place[t] &&
           !e->pooled[t] && !o->vocab_parallel && kd->forward_grad(e->k, 1);
}

/* ... and does it now: a training step's forward, whose backward is sure
 * to follow (not evaluating), not timed op by op (the calibration times
 * the forward and the backward apart). */
static int loss_grad_early(const merak_exec *e, int i) { return !e->eval && !e->op_fwd && grad_early_op(e, i); }

int merak_exec_op_grad_early(const merak_exec *e, int i) { return i >= 0 && i < e->g->nops && grad_early_op(e, i); }

/* Forward of op i for the sub-batch (blocking sums). */
static int op_forward(merak_exec *e, int slot, int i, sub sb)
{
    const merak_op_kind *kd = merak_op_kind_of(&e->g->ops[i]);
    merak_op_io io = op_io(e, slot, i, sb, IO_FORWARD);
    const int early = loss_grad_early(e, i);
    if (early) {   /* the logits' gradient: their storage (in_place) */
        const int t = e->g->ops[i].in[0];
        io.dx16[0] = b16_or(e, t, sgrad(e, slot, t, sb), &io.dx[0]);
    }
    if (forward_kernels(e, i, kd, &io) < 0)
        return -1;
    if (kd->loss)
        e->grad_early[slot] = (unsigned char)early;
    if (kd->sum == MERAK_SUM_FORWARD) {   /* the output, staged in bf16 storage */
        const size_t n = (size_t)merak_tensor_elems(&e->g->tensors[e->g->ops[i].out]) / (size_t)sb.K;
        if (tp_sum(e, io.y, n, i) < 0)
            return -1;
        if (kd->finish)
            kd->finish(&io);
    }
    round_output(e, slot, i, sb);
    return kd->loss ? loss_reduce(e, slot, i, &io) : 0;
}

/* ------------------------------------------------------------------ backward */

/* The shared gradients op i is the first to add to (it reads their
 * tensors last), zeroed: the buffer held others' before; unless op i
 * writes them (plan_fresh).  0 or -1. */
static int zero_shared(merak_exec *e, int i)
{
    const merak_op *o = &e->g->ops[i];
    for (int j = 0; j < o->nin && !e->fresh[i]; j++) {
        const int t = o->in[j];
        if (t >= 0 && e->g_shared[t] && e->last_use[t] == i &&
            e->k->zero(e->gshared + e->g_off[t], tbytes(e, t)) < 0)
            return fail(e, "op %d: zeroing a %s gradient failed", i, e->k->name);
    }
    return 0;
}

/* Input-gradient part of op i's backward for the sub-batch (blocking sums). */
static int op_backward_input(merak_exec *e, int slot, int i, sub sb)
{
    const merak_op_kind *kd = merak_op_kind_of(&e->g->ops[i]);
    if (zero_shared(e, i) < 0)
        return -1;
    if (kd->sum != MERAK_SUM_BACKWARD && !kd->backward_input)
        return 0;
    const merak_op_io io = op_io(e, slot, i, sb, IO_INPUT);
    if (kd->sum == MERAK_SUM_BACKWARD) {   /* the output's gradient, staged in bf16 storage */
        const size_t n = (size_t)merak_tensor_elems(&e->g->tensors[e->g->ops[i].out]) / (size_t)sb.K;
        if (tp_sum(e, (float *)io.dy, n, i) < 0)
            return -1;
    }
    if (kd->backward_input) {
        kd->backward_input(&io);
        round_input_grads(e, slot, i, sb);
    }
    return 0;
}

/* Weight-gradient part of op i's backward for the sub-batch: accumulates
 * into the parameters' gradients. */
static void op_backward_weight(merak_exec *e, int slot, int i, sub sb)
{
    const merak_op_kind *kd = merak_op_kind_of(&e->g->ops[i]);
    if (kd->backward_weight) {
        const merak_op_io io = op_io(e, slot, i, sb, IO_WEIGHT);
        kd->backward_weight(&io);
    }
}

/* The readiness hook after op i's weight part (on the micro-batch's last
 * sub-batch, when op i's parameters have their whole gradient). */
static void weight_ready(merak_exec *e, int i, sub sb)
{
    if (e->hook && sb.k == sb.K - 1)
        e->hook(e->hook_ctx, e->ready[i]);
}

/* The weight part of op i, then the readiness hook. */
static void weight_step(merak_exec *e, int slot, int i, sub sb)
{
    op_backward_weight(e, slot, i, sb);
    weight_ready(e, i, sb);
}

/* Both parts of op i's backward in one call of its kind's backward (a
 * kind that sums nothing in its backward), then the readiness hook. */
static int op_backward_both(merak_exec *e, int slot, int i, sub sb)
{
    if (zero_shared(e, i) < 0)
        return -1;
    const merak_op_io io = op_io(e, slot, i, sb, IO_INPUT);
    merak_op_kind_of(&e->g->ops[i])->backward(&io);
    round_input_grads(e, slot, i, sb);
    weight_ready(e, i, sb);
    return 0;
}

/* ------------------------------------------------------------------ passes
 *
 * A pass runs a chunk's ops for one slot: forwards (all, or the dropped
 * ones of a recompute), or backwards in reverse (input parts, or input and
 * weight parts op by op).  Sub-pipelined (K > 1), the ops are cut after
 * each overlapped op into segments, and each segment runs sub-batch by
 * sub-batch: sub-batch k starts the sum that ends its segment and goes on
 * to the next sub-batch while it is in flight; the next segment first
 * finishes sub-batch k's sum, so one sub-batch's sum overlaps the others'
 * compute, also from one layer into the next.  At most one sum per
 * sub-batch is in flight; every rank of the tp group starts them in the
 * same order. */
typedef enum pass { P_FORWARD, P_RECOMPUTE, P_BACKWARD_INPUT, P_BACKWARD } pass;

static int run_op(merak_exec *e, int slot, int i, sub sb, pass ps)
{
    if (ps <= P_RECOMPUTE)
        return op_forward(e, slot, i, sb);
    const merak_op_kind *kd = merak_op_kind_of(&e->g->ops[i]);
    if (kd->loss && e->grad_early[slot]) {   /* its input part done by its forward */
        e->grad_early[slot] = 0;
        if (ps == P_BACKWARD)
            weight_step(e, slot, i, sb);
        return 0;
    }
    if (ps == P_BACKWARD && kd->backward && kd->sum != MERAK_SUM_BACKWARD)
        return op_backward_both(e, slot, i, sb);
    if (op_backward_input(e, slot, i, sb) < 0)
        return -1;
    if (ps == P_BACKWARD)
        weight_step(e, slot, i, sb);
    return 0;
}

/* Forward ops i and i + 1 (< end) in one call, the second's kind's
 * forward_after, where they can be: the second reads the first's output,
 * neither sums over the tp group nor is the loss, both run natively in
 * bf16 storage (nothing staged, nothing to round after), both re-run by a
 * recompute (ps), and the ops are not timed one by one
 * (merak_exec_time_ops: the calibration times each kind).  1 if done,
 * else 0. */
static int forward_pair(merak_exec *e, int slot, int i, int end, pass ps)
{
    const merak_graph *g = e->g;
    if (e->op_fwd || i + 1 >= end || (ps == P_RECOMPUTE && !(e->dropped[i] && e->dropped[i + 1])))
        return 0;
    const merak_op *a = &g->ops[i], *b = &g->ops[i + 1];
    const merak_op_kind *ka = merak_op_kind_of(a), *kb = merak_op_kind_of(b);
    if (!kb->forward_after || b->nin < 1 || b->in[0] != a->out || ka->sum != MERAK_SUM_NONE ||
        kb->sum != MERAK_SUM_NONE || ka->loss || kb->loss || !e->native[i] || !e->native[i + 1])
        return 0;
    const merak_op_io pa = op_io(e, slot, i, WHOLE, IO_FORWARD), pb = op_io(e, slot, i + 1, WHOLE, IO_FORWARD);
    if (!kb->forward_after(&pa, &pb))
        return 0;
    if (e->poll)
        e->poll(e->poll_ctx);
    return 1;
}

/* Backward input parts of ops i and i - 1 (>= begin) in one call, the
 * earlier's kind's backward_input_next, where they can be (pairs_back)
 * and the ops are not timed one by one.  The gradient of op i - 1's output
 * is then never written; in a whole backward the weight parts follow, op
 * i's then op i - 1's.  1 if done, else 0. */
static int backward_pair(merak_exec *e, int slot, int i, int begin, pass ps)
{
    if (e->op_fwd || !pairs_back(e, i, begin))
        return 0;
    const merak_op_kind *ka = merak_op_kind_of(&e->g->ops[i - 1]);
    const merak_op_io pa = op_io(e, slot, i - 1, WHOLE, IO_INPUT), pb = op_io(e, slot, i, WHOLE, IO_INPUT);
    if (!ka->backward_input_next(&pa, &pb))
        return 0;
    if (ps == P_BACKWARD) {
        weight_step(e, slot, i, WHOLE);
        weight_step(e, slot, i - 1, WHOLE);
    }
    if (e->poll)
        e->poll(e->poll_ctx);
    return 1;
}

/* The kernels done, the clock (timing ops). */
static double synced_now(const merak_exec *e)
{
    if (e->k->synchronize)
        e->k->synchronize();
    return merak_now();
}

static int step_op(merak_exec *e, int slot, int i, sub sb, pass ps)
{
    double *to = e->op_fwd ? &(ps <= P_RECOMPUTE ? e->op_fwd : e->op_bwd)[i] : NULL;
    const int marks = to && e->k->mark && e->k->mark_seconds;
    const int m0 = marks ? e->k->mark() : -1;
    const double h0 = marks ? merak_now() : 0, t0 = to && !marks ? synced_now(e) : 0;
    int rc = run_op(e, slot, i, sb, ps);
    if (marks) {
        const int m1 = e->k->mark();
        const double h1 = merak_now();
        if (m0 >= 0 && m1 >= 0 &&
            merak_grow((void **)&e->op_marks, &e->cap_op_marks, e->nop_marks + 1, sizeof *e->op_marks) == 0)
            e->op_marks[e->nop_marks++] = (struct op_mark){to, m0, m1, h0, h1};
    } else if (to) {
        *to += synced_now(e) - t0;
    }
    if (e->poll)
        e->poll(e->poll_ctx);
    return rc;
}

void merak_exec_ops_lag_reset(merak_exec *e)
{
    e->lag_n = e->lag_caught = 0;
    e->lag_sum = 0;
}

void merak_exec_ops_lag(const merak_exec *e, size_t *bounds, size_t *caught, double *mean)
{
    *bounds = e->lag_n;
    *caught = e->lag_caught;
    *mean = e->lag_n ? e->lag_sum / (double)e->lag_n : 0;
}

/* How far behind the host the device reached mark m, recorded at host
 * time h: its time from the idle reference mark, less the host's; 0, or
 * -1 when the mark cannot be read. */
static int lag_of(const merak_exec *e, int m, double h, double *lag)
{
    const double d = e->k->mark_seconds(e->ref_mark, m);
    *lag = d - (h - e->ref_host);
    return d < 0 ? -1 : 0;
}

void merak_exec_time_ops(merak_exec *e, double *fwd, double *bwd)
{
    const int marks = e->k->mark && e->k->mark_seconds && e->k->marks_clear;
    if (e->nop_marks && e->k->synchronize() == 0)
        for (size_t j = 0; j < e->nop_marks; j++) {
            const struct op_mark *m = &e->op_marks[j];
            const double s = e->k->mark_seconds(m->m0, m->m1);
            if (s >= 0)
                *m->to += s;
            for (int b = 0; b < 2 && e->ref_mark >= 0; b++) {
                double lag;
                if ((b ? lag_of(e, m->m1, m->h1, &lag) : lag_of(e, m->m0, m->h0, &lag)) < 0)
                    continue;
                e->lag_n++;
                e->lag_sum += lag > 0 ? lag : 0;
                e->lag_caught += lag < MERAK_EXEC_CAUGHT_UP;
            }
        }
    e->nop_marks = 0;
    e->ref_mark = -1;
    if (marks)
        e->k->marks_clear();
    e->op_fwd = fwd && bwd ? fwd : NULL;
    e->op_bwd = fwd && bwd ? bwd : NULL;
    /* the reference: a mark the idle device reaches as it is recorded */
    if (marks && e->op_fwd && e->k->synchronize() == 0) {
        e->ref_mark = e->k->mark();
        e->ref_host = merak_now();
    }
}

/* Overlapped op i, sub-batch sb: everything up to starting its sum (in
 * float storage: sub-batches keep bf16 values there). */
static int coll_start(merak_exec *e, int slot, int i, sub sb, pass ps)
{
    const int back = ps >= P_BACKWARD_INPUT;
    if (!back) {
        const merak_op_io io = op_io(e, slot, i, sb, IO_FORWARD);
        if (forward_kernels(e, i, merak_op_kind_of(&e->g->ops[i]), &io) < 0)
            return -1;
    }
    size_t n;
    float *buf = sum_buffer(e, slot, i, sb, back, &n);
    if (e->tp->start(e->tp->ctx, buf, n, sb.k) < 0)
        return fail(e, "op %d: starting the tensor-parallel sum of sub-batch %d failed", i, sb.k);
    return 0;
}

/* Overlapped op i, sub-batch sb: waits for its sum and does the rest. */
static int coll_finish(merak_exec *e, int slot, int i, sub sb, pass ps)
{
    if (e->tp->wait(e->tp->ctx, sb.k) < 0)
        return fail(e, "op %d: the tensor-parallel sum of sub-batch %d failed", i, sb.k);
    const merak_op_kind *kd = merak_op_kind_of(&e->g->ops[i]);
    const merak_op_io io = op_io(e, slot, i, sb, ps < P_BACKWARD_INPUT ? IO_FORWARD : IO_INPUT);
    if (ps < P_BACKWARD_INPUT) {
        if (kd->finish)
            kd->finish(&io);
        round_output(e, slot, i, sb);
    } else if (kd->backward_input) {
        kd->backward_input(&io);
        round_input_grads(e, slot, i, sb);
    }
    if (ps == P_BACKWARD)
        weight_step(e, slot, i, sb);
    return 0;
}

/* Lets the sums in flight move while the caller computes; 0, or -1 if
 * one failed (a failed sum is over: its wait would not see it). */
static int progress(merak_exec *e, int *pending)
{
    for (int k = 0; k < e->K; k++)
        if (pending[k] >= 0 && e->tp->test(e->tp->ctx, k) < 0) {
            fail(e, "op %d: the tensor-parallel sum of sub-batch %d failed", pending[k], k);
            pending[k] = -1;
            return -1;
        }
    return 0;
}

/* Ops [begin, end) of the slot, in the pass's direction. */
static int run_pass(merak_exec *e, int slot, int begin, int end, pass ps)
{
    const int back = ps >= P_BACKWARD_INPUT, dir = back ? -1 : 1;
    const int first = back ? end - 1 : begin, stop = back ? begin - 1 : end;
    if (e->K == 1) {
        for (int i = first; i != stop; i += dir) {
            if (!back && forward_pair(e, slot, i, end, ps))
                i++;   /* its forward done with op i's */
            else if (back && backward_pair(e, slot, i, begin, ps))
                i--;   /* its input part done with op i's */
            else if ((ps != P_RECOMPUTE || e->dropped[i]) && step_op(e, slot, i, WHOLE, ps) < 0)
                return -1;
        }
        return 0;
    }
    int *pending = e->pending;   /* [K]: the overlapped op whose sum sub-batch k has in flight, or -1 */
    int rc = 0;
    for (int k = 0; k < e->K; k++)
        pending[k] = -1;
    for (int s0 = first; s0 != stop && rc == 0;) {
        int s1 = s0;   /* the segment: [s0, s1] in pass order, ending at an overlapped op */
        while (s1 + dir != stop && !overlapped(e, s1, back))
            s1 += dir;
        for (int k = 0; k < e->K && rc == 0; k++) {
            sub sb = {k, e->K};
            if (pending[k] >= 0) {
                rc = coll_finish(e, slot, pending[k], sb, ps);
                pending[k] = -1;
            }
            for (int i = s0; i != s1 + dir && rc == 0; i += dir) {
                if (ps == P_RECOMPUTE && !e->dropped[i])
                    continue;
                if (overlapped(e, i, back)) {
                    rc = coll_start(e, slot, i, sb, ps);
                    pending[k] = rc == 0 ? i : -1;
                } else if ((rc = step_op(e, slot, i, sb, ps)) == 0) {
                    rc = progress(e, pending);
                }
            }
        }
        s0 = s1 + dir;
    }
    /* the last sums; after a failure, still wait for every sum in flight */
    for (int k = 0; k < e->K; k++)
        if (pending[k] >= 0) {
            if (rc == 0)
                rc = coll_finish(e, slot, pending[k], (sub){k, e->K}, ps);
            else
                e->tp->wait(e->tp->ctx, k);
        }
    return rc;
}

/* Does the slot's chunk drop (and recompute) activations? */
static int drops(const merak_exec *e, int slot)
{
    const chunk *c = chunk_of(e, slot);
    return c->rc_end > c->begin;
}

int merak_exec_forward(merak_exec *e, int slot, uint64_t seed)
{
    const merak_kernels *k = e->k;
    const chunk *c = chunk_of(e, slot);
    e->seed[slot] = seed;
    e->err[0] = 0;
    e->grad_early[slot] = 0;
    if (k->zero(slot_grad(e, slot), c->grad_bytes) < 0)
        return fail(e, "zeroing the %s gradient arena failed", k->name);
    /* a recomputing chunk borrows a buffer for what it drops */
    if (drops(e, slot) && pool_take(e, slot) < 0)
        return -1;
    int rc = run_pass(e, slot, c->begin, c->end, P_FORWARD);
    pool_release(e, slot);
    return rc;
}

int merak_exec_recompute(merak_exec *e, int slot)
{
    e->err[0] = 0;
    if (!e->npool)
        return fail(e, "slot %d: this slice keeps its activations, there is nothing to recompute", slot);
    if (!drops(e, slot))
        return 0;   /* this chunk keeps its activations */
    if (pool_index(e, slot) >= 0)
        return fail(e, "slot %d recomputed twice", slot);
    if (pool_take(e, slot) < 0)
        return -1;
    int p = pool_index(e, slot);
    if (e->k->zero(e->pgrad + (size_t)p * e->pool_grad, e->pool_grad) < 0)
        return fail(e, "zeroing a %s recompute buffer failed", e->k->name);
    return run_pass(e, slot, chunk_of(e, slot)->begin, chunk_of(e, slot)->rc_end, P_RECOMPUTE);
}

/* A recomputing chunk's backward needs the slot's recompute. */
static int check_recomputed(merak_exec *e, int slot)
{
    e->err[0] = 0;
    if (drops(e, slot) && pool_index(e, slot) < 0)
        return fail(e, "slot %d: backward of a dropped forward that was not recomputed", slot);
    return 0;
}

int merak_exec_backward_input(merak_exec *e, int slot)
{
    if (check_recomputed(e, slot) < 0)
        return -1;
    if (!e->split)   /* the weight parts would find the gradients they read gone */
        return fail(e, "slot %d: input parts apart from the weight parts need an executor made with split", slot);
    return run_pass(e, slot, chunk_of(e, slot)->begin, chunk_of(e, slot)->end, P_BACKWARD_INPUT);
}

/* The weight parts sum no activation over the group: the whole micro-batch at once. */
int merak_exec_backward_weight(merak_exec *e, int slot)
{
    if (check_recomputed(e, slot) < 0)
        return -1;
    if (!e->split)
        return fail(e, "slot %d: weight parts apart from the input parts need an executor made with split", slot);
    const chunk *c = chunk_of(e, slot);
    for (int i = c->end - 1; i >= c->begin; i--) {
        weight_step(e, slot, i, WHOLE);
        if (e->poll)
            e->poll(e->poll_ctx);
    }
    pool_release(e, slot);
    return 0;
}

int merak_exec_backward(merak_exec *e, int slot)
{
    if (check_recomputed(e, slot) < 0)
        return -1;
    int rc = run_pass(e, slot, chunk_of(e, slot)->begin, chunk_of(e, slot)->end, P_BACKWARD);
    if (rc == 0)
        pool_release(e, slot);
    return rc;
}
