/*
 * ops.c - the op table (ops.h): one entry per op kind, and the functions
 * its entries point to, which call the backend's kernels on the buffers
 * a caller resolved (merak_op_io).  Nothing here allocates or knows about
 * slots, sub-batches' memory or communication: the executor and the
 * decoder (runtime/pipe) own those.
 */
#include "ops.h"

#include "errf.h"

static int width(const merak_tensor *t) { return (int)t->shape[t->ndim - 1]; }
static const merak_tensor *in_tensor(const merak_op_io *io, int j) { return &io->g->tensors[io->o->in[j]]; }
static const merak_tensor *out_tensor(const merak_op_io *io) { return &io->g->tensors[io->o->out]; }
/* Columns of input 0 (the width every kernel of a row-wise op runs over). */
static int cols(const merak_op_io *io) { return width(in_tensor(io, 0)); }
/* Elements of the rows of a float tensor as wide as input 0. */
static size_t elems(const merak_op_io *io) { return (size_t)io->rows * (size_t)cols(io); }
/* The call's part of per-row saved values (rows_all of them). */
static float *saved_rows(const merak_op_io *io) { return io->saved + (size_t)io->rows * (size_t)io->part; }

merak_attn_shape merak_op_attn_shape(const merak_graph *g, const merak_op *o)
{
    const merak_tensor *q = &g->tensors[o->in[0]];
    merak_attn_shape s;
    s.B = (int)q->shape[0];
    s.T = (int)q->shape[1];
    s.n_head = o->n_head;
    s.n_kv_head = o->n_kv_head;
    s.head_dim = o->head_dim;
    if (o->fused_qkv) {
        s.q_stride = s.k_stride = s.v_stride = (int)q->shape[2];
    } else {
        s.q_stride = o->n_head * o->head_dim;
        s.k_stride = s.v_stride = o->n_kv_head * o->head_dim;
    }
    s.rope = o->rope;
    return s;
}

/* Where k and v start in a row of a fused qkv tensor (0: not fused). */
static int fused_offsets(const merak_op *o, size_t *k_at, size_t *v_at)
{
    *k_at = (size_t)o->n_head * (size_t)o->head_dim;
    *v_at = (size_t)(o->n_head + o->n_kv_head) * (size_t)o->head_dim;
    return o->fused_qkv;
}

void merak_op_attn_qkv(const merak_op *o, float *base_q, float *base_k, float *base_v, float **q, float **k,
                       float **v)
{
    size_t ka, va;
    if (fused_offsets(o, &ka, &va))
        base_k = base_q ? base_q + ka : NULL, base_v = base_q ? base_q + va : NULL;
    *q = base_q, *k = base_k, *v = base_v;
}

/* ------------------------------------------------------------------ embeddings */

static int vocab_rows(const merak_op_io *io) { return (int)in_tensor(io, 1)->shape[0]; }

/* ids: every element is a row */
static int embedding_forward(const merak_op_io *io)
{
    const int32_t *ids = (const int32_t *)io->x[0];
    if (io->b16)
        io->k->embedding16_fwd(io->y16, ids, io->x16[1], io->rows, width(out_tensor(io)), io->o->v0,
                               vocab_rows(io));
    else
        io->k->embedding_fwd(io->y, ids, io->x[1], io->rows, width(out_tensor(io)), io->o->v0,
                             vocab_rows(io));
    return 0;
}

static void embedding_backward_weight(const merak_op_io *io)
{
    const int32_t *ids = (const int32_t *)io->x[0];
    if (io->b16)
        io->k->embedding16_bwd_w(io->dw[0], io->dy16, ids, io->rows, width(out_tensor(io)), io->o->v0,
                                 vocab_rows(io), io->scratch16);
    else
        io->k->embedding_bwd_w(io->dw[0], io->dy, ids, io->rows, width(out_tensor(io)), io->o->v0,
                               vocab_rows(io));
}

static int embedding_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->embedding16_fwd && k->embedding16_bwd_w;
}

/* (B,T,C) + wpe rows [pos, pos + T) */
static int posemb_forward(const merak_op_io *io)
{
    const int C = cols(io);
    const size_t at = (size_t)io->pos * (size_t)C;
    if (io->b16)
        io->k->posemb16_fwd(io->y16, io->x16[0], io->x16[1] + at, io->rows / io->seq, io->seq, C, io->scratch16);
    else
        io->k->posemb_fwd(io->y, io->x[0], io->x[1] + at, io->rows / io->seq, io->seq, C);
    return 0;
}

/* dx[j] += dy, or (fresh) a copy of dy, or nothing where (fresh) dx[j]
 * is dy's storage (a gradient passed through, ops.h pass_grad); a failed
 * copy is the backend's sticky error, as a failed kernel is */
static void pass_gradient(const merak_op_io *io, int j)
{
    void *dx = io->b16 ? (void *)io->dx16[j] : (void *)io->dx[j];
    const void *dy = io->b16 ? (const void *)io->dy16 : (const void *)io->dy;
    if (!dx || (io->fresh && dx == dy))
        return;
    if (io->fresh)
        (void)io->k->copy(dx, dy, elems(io) * (io->b16 ? sizeof(uint16_t) : sizeof(float)), MERAK_COPY_D2D);
    else if (io->b16)
        io->k->accumulate16(io->dx16[j], io->dy16, elems(io), io->scratch16);
    else
        io->k->accumulate(io->dx[j], io->dy, elems(io));
}

static void accumulate_input(const merak_op_io *io) { pass_gradient(io, 0); }

static void posemb_backward_weight(const merak_op_io *io)
{
    if (io->b16)
        io->k->posemb16_bwd_w(io->dw[0], io->dy16, io->rows / io->seq, io->seq, cols(io), io->scratch16);
    else
        io->k->posemb_bwd_w(io->dw[0], io->dy, io->rows / io->seq, io->seq, cols(io));
}

static int posemb_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->posemb16_fwd && k->posemb16_bwd_w && k->accumulate16;
}

static int posemb_decode_plan(const merak_graph *g, const merak_op *o, const merak_kernels *k, int rows, int ctx,
                              size_t *cache, size_t *scratch, char *err, size_t errlen)
{
    (void)k, (void)rows, (void)cache, (void)scratch;
    const merak_tensor *wpe = &g->tensors[o->in[1]];
    if (wpe->shape[0] < ctx)
        return merak_errf(err, errlen, "generation needs %d positions (prompt and tokens), more than the "
                          "model's %lld ('%s')", ctx, (long long)wpe->shape[0], wpe->name);
    return 0;
}

/* ------------------------------------------------------------------ norms */

static size_t layernorm_saved(const merak_graph *g, const merak_op *o)   /* mean, rstd per row */
{
    const merak_tensor *x = &g->tensors[o->in[0]];
    return 2 * (size_t)(merak_tensor_elems(x) / width(x));
}

static int layernorm_forward(const merak_op_io *io)
{
    float *s = saved_rows(io);
    if (io->b16)
        io->k->layernorm16_fwd(io->y16, s, s + io->rows_all, io->x16[0], io->x16[1], io->x16[2], io->rows, cols(io),
                               io->o->eps, io->scratch16);
    else
        io->k->layernorm_fwd(io->y, s, s + io->rows_all, io->x[0], io->x[1], io->x[2], io->rows, cols(io),
                             io->o->eps);
    return 0;
}

/* A residual add and the norm of its sum, natively in bf16 storage: one
 * call (kernels.h add_layernorm16_fwd, add_rmsnorm16_fwd). */
static int norm_forward_after(const merak_op_io *prev, const merak_op_io *io)
{
    const int rms = io->o->type == MERAK_OP_RMSNORM;
    if (prev->o->type != MERAK_OP_ADD || !prev->b16 || !io->b16 || prev->y16 != io->x16[0] ||
        (rms ? !io->k->add_rmsnorm16_fwd : !io->k->add_layernorm16_fwd))
        return 0;
    float *s = saved_rows(io);
    if (rms)
        io->k->add_rmsnorm16_fwd(prev->y16, io->y16, s, prev->x16[0], prev->x16[1], io->x16[1], io->rows, cols(io),
                                 io->o->eps, io->scratch16);
    else
        io->k->add_layernorm16_fwd(prev->y16, io->y16, s, s + io->rows_all, prev->x16[0], prev->x16[1], io->x16[1],
                                   io->x16[2], io->rows, cols(io), io->o->eps, io->scratch16);
    return 1;
}

static void layernorm_backward_input(const merak_op_io *io)
{
    float *s = saved_rows(io);
    if (io->b16 && io->dx16[0])
        io->k->layernorm16_bwd_x(io->dx16[0], io->dy16, io->x16[0], io->x16[1], s, s + io->rows_all, io->rows,
                                 cols(io), !io->fresh, io->scratch16);
    else if (!io->b16 && io->dx[0])
        io->k->layernorm_bwd_x(io->dx[0], io->dy, io->x[0], io->x[1], s, s + io->rows_all, io->rows, cols(io),
                               !io->fresh);
}

static void layernorm_backward_weight(const merak_op_io *io)
{
    float *s = saved_rows(io);
    if (io->b16)
        io->k->layernorm16_bwd_w(io->dw[0], io->dw[1], io->dy16, io->x16[0], s, s + io->rows_all, io->rows, cols(io),
                                 io->scratch16);
    else
        io->k->layernorm_bwd_w(io->dw[0], io->dw[1], io->dy, io->x[0], s, s + io->rows_all, io->rows, cols(io));
}

static void layernorm_backward(const merak_op_io *io)
{
    float *s = saved_rows(io);
    if (io->b16 && io->dx16[0] && io->k->layernorm16_bwd) {
        io->k->layernorm16_bwd(io->dx16[0], io->dw[0], io->dw[1], io->dy16, io->x16[0], io->x16[1], s,
                               s + io->rows_all, io->rows, cols(io), !io->fresh, io->scratch16);
    } else {
        layernorm_backward_input(io);
        layernorm_backward_weight(io);
    }
}

static int layernorm_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->layernorm16_fwd && k->layernorm16_bwd_x && k->layernorm16_bwd_w;
}

static size_t rmsnorm_saved(const merak_graph *g, const merak_op *o)   /* rstd per row */
{
    const merak_tensor *x = &g->tensors[o->in[0]];
    return (size_t)(merak_tensor_elems(x) / width(x));
}

static int rmsnorm_forward(const merak_op_io *io)
{
    if (io->b16)
        io->k->rmsnorm16_fwd(io->y16, saved_rows(io), io->x16[0], io->x16[1], io->rows, cols(io), io->o->eps,
                             io->scratch16);
    else
        io->k->rmsnorm_fwd(io->y, saved_rows(io), io->x[0], io->x[1], io->rows, cols(io), io->o->eps);
    return 0;
}

static void rmsnorm_backward_input(const merak_op_io *io)
{
    if (io->b16 && io->dx16[0])
        io->k->rmsnorm16_bwd_x(io->dx16[0], io->dy16, io->x16[0], io->x16[1], saved_rows(io), io->rows, cols(io),
                               !io->fresh, io->scratch16);
    else if (!io->b16 && io->dx[0])
        io->k->rmsnorm_bwd_x(io->dx[0], io->dy, io->x[0], io->x[1], saved_rows(io), io->rows, cols(io),
                             !io->fresh);
}

static void rmsnorm_backward_weight(const merak_op_io *io)
{
    if (io->b16)
        io->k->rmsnorm16_bwd_w(io->dw[0], io->dy16, io->x16[0], saved_rows(io), io->rows, cols(io), io->scratch16);
    else
        io->k->rmsnorm_bwd_w(io->dw[0], io->dy, io->x[0], saved_rows(io), io->rows, cols(io));
}

static void rmsnorm_backward(const merak_op_io *io)
{
    if (io->b16 && io->dx16[0] && io->k->rmsnorm16_bwd) {
        io->k->rmsnorm16_bwd(io->dx16[0], io->dw[0], io->dy16, io->x16[0], io->x16[1], saved_rows(io), io->rows,
                             cols(io), !io->fresh, io->scratch16);
    } else {
        rmsnorm_backward_input(io);
        rmsnorm_backward_weight(io);
    }
}

static int rmsnorm_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->rmsnorm16_fwd && k->rmsnorm16_bwd_x && k->rmsnorm16_bwd_w;
}

/* ------------------------------------------------------------------ linear */

static int linear_forward(const merak_op_io *io)
{
    const int N = io->rows, K = cols(io), O = width(out_tensor(io));
    if (io->b16)
        io->k->linear16_fwd(io->y16, io->x16[0], io->x16[1], io->x16[2], N, K, O, io->ldy, io->scratch16);
    else
        io->k->linear_fwd(io->y, io->x[0], io->x[1], io->x[2], N, K, O);
    return 0;
}

static void linear_backward_input(const merak_op_io *io)
{
    const int N = io->rows, K = cols(io), O = width(out_tensor(io));
    if (io->b16 && io->dx16[0])
        io->k->linear16_bwd_x(io->dx16[0], io->dy16, io->x16[1], N, K, O, io->ldy, !io->fresh, io->scratch16);
    else if (!io->b16 && io->dx[0])
        io->k->linear_bwd_x(io->dx[0], io->dy, io->x[1], N, K, O, !io->fresh);
}

static void linear_backward_weight(const merak_op_io *io)
{
    const int N = io->rows, K = cols(io), O = width(out_tensor(io));
    if (io->b16)
        io->k->linear16_bwd_w(io->dw[0], io->dw[1], io->dy16, io->x16[0], N, K, O, io->ldy, io->scratch16);
    else
        io->k->linear_bwd_w(io->dw[0], io->dw[1], io->dy, io->x[0], N, K, O);
}

static int linear_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->linear16_fwd && k->linear16_bwd_x && k->linear16_bwd_w;
}

/* ------------------------------------------------------------------ attention
 *
 * Saved values, for the whole micro-batch: lse (B,nh,T), then with RoPE
 * the rotated qr (B,T,nh*hd) and kr (B,T,nkv*hd), each part aligned; a
 * call of rows / seq sequences runs its part of each. */

static size_t attention_saved(const merak_graph *g, const merak_op *o)
{
    merak_attn_shape s = merak_op_attn_shape(g, o);
    size_t n = merak_align_floats((size_t)s.B * s.n_head * s.T);
    if (s.rope.theta > 0)
        n += merak_align_floats((size_t)s.B * s.T * s.n_head * s.head_dim) +
             (size_t)s.B * s.T * s.n_kv_head * s.head_dim;
    return n;
}

static size_t attention_scratch(const merak_graph *g, const merak_op *o, const merak_kernels *k, int b16)
{
    merak_attn_shape s = merak_op_attn_shape(g, o);
    return b16 ? k->attention16_scratch_elems(&s) : k->attention_scratch_elems(&s);
}

static int attention_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    if (!k->attention16_fwd || !k->attention16_bwd || !k->attention16_scratch_elems)
        return 0;
    merak_attn_shape s = merak_op_attn_shape(g, o);
    return !k->attention16_supported || k->attention16_supported(&s);
}

/* What the bf16 entries widen with bf16_scratch (kernels.h): q, k, v,
 * out and their gradients, each dense. */
static size_t attention_bf16_scratch(const merak_graph *g, const merak_op *o)
{
    merak_attn_shape s = merak_op_attn_shape(g, o);
    const size_t BT = (size_t)s.B * (size_t)s.T, C = (size_t)s.n_head * (size_t)s.head_dim;
    const size_t Ckv = (size_t)s.n_kv_head * (size_t)s.head_dim;
    return 2 * (2 * merak_align_floats(BT * C) + 2 * merak_align_floats(BT * Ckv));
}

/* The call's shape (its rows / seq sequences) and saved values. */
static merak_attn_shape attention_call(const merak_op_io *io, float **lse, float **qr, float **kr)
{
    merak_attn_shape s = merak_op_attn_shape(io->g, io->o);
    const size_t B = (size_t)io->rows / (size_t)io->seq, Ball = (size_t)io->rows_all / (size_t)io->seq;
    const size_t np = B * s.n_head * s.T, nq = B * s.T * s.n_head * s.head_dim;
    const size_t nk = B * s.T * s.n_kv_head * s.head_dim, part = (size_t)io->part;
    *lse = io->saved + np * part;
    *qr = *kr = NULL;
    if (s.rope.theta > 0) {
        float *q0 = io->saved + merak_align_floats(Ball * s.n_head * s.T);
        *qr = q0 + nq * part;
        *kr = q0 + merak_align_floats(Ball * s.T * s.n_head * s.head_dim) + nk * part;
    }
    s.B = (int)B;
    return s;
}

/* merak_op_attn_qkv for bf16 storage. */
static void attn_qkv16(const merak_op *o, uint16_t *base_q, uint16_t *base_k, uint16_t *base_v, uint16_t **q,
                       uint16_t **k, uint16_t **v)
{
    size_t ka, va;
    if (fused_offsets(o, &ka, &va))
        base_k = base_q ? base_q + ka : NULL, base_v = base_q ? base_q + va : NULL;
    *q = base_q, *k = base_k, *v = base_v;
}

static int attention_forward(const merak_op_io *io)
{
    float *lse, *qr, *kr;
    merak_attn_shape s = attention_call(io, &lse, &qr, &kr);
    if (io->b16) {
        uint16_t *q, *k, *v;
        attn_qkv16(io->o, (uint16_t *)io->x16[0], (uint16_t *)io->x16[1], (uint16_t *)io->x16[2], &q, &k, &v);
        io->k->attention16_fwd(&s, io->y16, lse, qr, kr, q, k, v, io->scratch, io->scratch16);
    } else {
        float *q, *k, *v;
        merak_op_attn_qkv(io->o, io->x[0], io->x[1], io->x[2], &q, &k, &v);
        io->k->attention_fwd(&s, io->y, lse, qr, kr, q, k, v, io->scratch);
    }
    return 0;
}

static void attention_backward_input(const merak_op_io *io)
{
    float *lse, *qr, *kr;
    merak_attn_shape s = attention_call(io, &lse, &qr, &kr);
    if (io->b16) {
        uint16_t *q, *k, *v, *dq, *dk, *dv;
        attn_qkv16(io->o, (uint16_t *)io->x16[0], (uint16_t *)io->x16[1], (uint16_t *)io->x16[2], &q, &k, &v);
        attn_qkv16(io->o, io->dx16[0], io->dx16[1], io->dx16[2], &dq, &dk, &dv);
        if (dq)
            io->k->attention16_bwd(&s, dq, dk, dv, io->dy16, io->y16, lse, qr, kr, q, k, v, io->scratch,
                                   io->scratch16, !io->fresh);
    } else {
        float *q, *k, *v, *dq, *dk, *dv;
        merak_op_attn_qkv(io->o, io->x[0], io->x[1], io->x[2], &q, &k, &v);
        merak_op_attn_qkv(io->o, io->dx[0], io->dx[1], io->dx[2], &dq, &dk, &dv);
        if (dq)
            io->k->attention_bwd(&s, dq, dk, dv, io->dy, io->y, lse, qr, kr, q, k, v, io->scratch, !io->fresh);
    }
}

/* the new positions of one sequence against the caches */
static int attention_decode(const merak_op_io *io)
{
    float *q, *k, *v;
    merak_attn_shape s = merak_op_attn_shape(io->g, io->o);
    s.B = 1, s.T = io->rows;
    merak_op_attn_qkv(io->o, io->x[0], io->x[1], io->x[2], &q, &k, &v);
    io->k->attention_cached_fwd(&s, io->pos, io->ctx, io->y, io->kcache, io->vcache, q, k, v, io->scratch);
    return 0;
}

static int attention_decode_plan(const merak_graph *g, const merak_op *o, const merak_kernels *k, int rows,
                                 int ctx, size_t *cache, size_t *scratch, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    merak_attn_shape s = merak_op_attn_shape(g, o);
    s.B = 1, s.T = rows;
    *cache = (size_t)ctx * (size_t)(o->n_kv_head * o->head_dim);
    *scratch = k->attention_cached_scratch_elems(&s, ctx);
    return 0;
}

/* ------------------------------------------------------------------ elementwise */

static int gelu_forward(const merak_op_io *io)
{
    if (io->b16)
        io->k->gelu16_fwd(io->y16, io->x16[0], elems(io), io->scratch16);
    else
        io->k->gelu_fwd(io->y, io->x[0], elems(io));
    return 0;
}

static void gelu_backward_input(const merak_op_io *io)
{
    if (io->b16 && io->dx16[0])
        io->k->gelu16_bwd(io->dx16[0], io->dy16, io->x16[0], elems(io), !io->fresh, io->scratch16);
    else if (!io->b16 && io->dx[0])
        io->k->gelu_bwd(io->dx[0], io->dy, io->x[0], elems(io), !io->fresh);
}

/* A linear layer and the GELU of its output, natively in bf16 storage:
 * one call forward (kernels.h linear16_gelu_fwd), and one from the
 * gradient of the GELU's output, through the next linear layer that reads
 * it, to the gradient of the GELU's input (linear16_bwd_x_dgelu). */
static int gelu_forward_after(const merak_op_io *prev, const merak_op_io *io)
{
    if (prev->o->type != MERAK_OP_LINEAR || io->o->in[0] != prev->o->out || !prev->b16 || !io->b16 ||
        prev->ldy != cols(io) || !io->k->linear16_gelu_fwd)
        return 0;
    io->k->linear16_gelu_fwd(prev->y16, io->y16, prev->x16[0], prev->x16[1], prev->x16[2], prev->rows, cols(prev),
                             width(out_tensor(prev)), io->scratch16);
    return 1;
}

static int gelu_backward_input_next(const merak_op_io *io, const merak_op_io *next)
{
    if (next->o->type != MERAK_OP_LINEAR || next->o->in[0] != io->o->out || !io->b16 || !next->b16 ||
        !io->dx16[0] || !io->fresh || !io->k->linear16_bwd_x_dgelu)
        return 0;
    io->k->linear16_bwd_x_dgelu(io->dx16[0], next->dy16, next->x16[1], io->x16[0], next->rows, cols(next),
                                width(out_tensor(next)), next->ldy, io->scratch16);
    return 1;
}

static int gelu_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->gelu16_fwd && k->gelu16_bwd;
}

static int swiglu_forward(const merak_op_io *io)
{
    if (io->b16)
        io->k->swiglu16_fwd(io->y16, io->x16[0], io->x16[1], elems(io), io->scratch16);
    else
        io->k->swiglu_fwd(io->y, io->x[0], io->x[1], elems(io));
    return 0;
}

static void swiglu_backward_input(const merak_op_io *io)
{
    if (io->b16 && io->dx16[0])
        io->k->swiglu16_bwd(io->dx16[0], io->dx16[1], io->dy16, io->x16[0], io->x16[1], elems(io), !io->fresh,
                            io->scratch16);
    else if (!io->b16 && io->dx[0])
        io->k->swiglu_bwd(io->dx[0], io->dx[1], io->dy, io->x[0], io->x[1], elems(io), !io->fresh);
}

static int swiglu_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->swiglu16_fwd && k->swiglu16_bwd;
}

static int add_forward(const merak_op_io *io)
{
    if (io->b16)
        io->k->add16_fwd(io->y16, io->x16[0], io->x16[1], elems(io), io->scratch16);
    else
        io->k->add_fwd(io->y, io->x[0], io->x[1], elems(io));
    return 0;
}

static void add_backward_input(const merak_op_io *io)
{
    for (int j = 0; j < 2; j++)
        pass_gradient(io, j);
}

static int add_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->add16_fwd && k->accumulate16;
}

/* The mask of element i is a hash of the seed and i: a part of the rows
 * starts at its first element. */
static int dropout_forward(const merak_op_io *io)
{
    const size_t n = elems(io), i0 = n * (size_t)io->part;
    const float p = io->eval ? 0.0f : io->o->p;
    if (io->b16)
        io->k->dropout16_fwd(io->y16, io->x16[0], n, p, io->seed, i0, io->scratch16);
    else
        io->k->dropout_fwd(io->y, io->x[0], n, p, io->seed, i0);
    return 0;
}

static void dropout_backward_input(const merak_op_io *io)
{
    const size_t n = elems(io), i0 = n * (size_t)io->part;
    if (io->b16 && io->dx16[0])
        io->k->dropout16_bwd(io->dx16[0], io->dy16, n, io->o->p, io->seed, i0, !io->fresh, io->scratch16);
    else if (!io->b16 && io->dx[0])
        io->k->dropout_bwd(io->dx[0], io->dy, n, io->o->p, io->seed, i0, !io->fresh);
}

static int dropout_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->dropout16_fwd && k->dropout16_bwd;
}

/* ------------------------------------------------------------------ the loss
 *
 * Saved: lse (rows_all), then the target logits (rows_all).  The forward
 * leaves the shard's statistics; the executor combines the vocabulary
 * shards', writes the whole lse back, and reduces the loss (its mean over
 * the micro-batch's rows, which the backward's scale undoes). */

static size_t loss_saved(const merak_graph *g, const merak_op *o)
{
    const merak_tensor *x = &g->tensors[o->in[0]];
    return 2 * (size_t)(merak_tensor_elems(x) / width(x));
}

void merak_op_loss_rows(const merak_op_io *io, float **lse, float **tlogit)
{
    *lse = saved_rows(io);
    *tlogit = *lse + io->rows_all;
}

/* bf16 logits: a backend whose bf16 entries widen into scratch runs the
 * rows in blocks that fit it (two rows' logits at least: the values and,
 * not in place, their gradient), so the scratch need not hold N x V
 * floats. */
static size_t loss_bf16_scratch(const merak_graph *g, const merak_op *o)
{
    return 2 * merak_align_floats((size_t)width(&g->tensors[o->in[0]]));
}

static int loss_block(const merak_op_io *io)
{
    const size_t V = (size_t)cols(io);
    if (!io->k->bf16_scratch)
        return io->rows;
    const size_t b = io->scratch16_n / 2 > MERAK_ALIGN_FLOATS ? (io->scratch16_n / 2 - MERAK_ALIGN_FLOATS) / V : 0;
    return b < 1 ? 1 : b > (size_t)io->rows ? io->rows : (int)b;
}

static int loss_forward(const merak_op_io *io)
{
    float *lse, *tlogit;
    merak_op_loss_rows(io, &lse, &tlogit);
    const int32_t *tg = (const int32_t *)io->x[1];
    const int V = cols(io);
    if (!io->b16) {
        io->k->crossentropy_stats(lse, tlogit, io->x[0], tg, io->rows, V, io->o->v0);
        return 0;
    }
    const int ld = io->ldx;
    const float scale = io->loss_scale / (float)io->rows_all;
    for (int r = 0, blk = loss_block(io); r < io->rows; r += blk) {
        const int n = io->rows - r < blk ? io->rows - r : blk;
        if (io->dx16[0])   /* the gradient too, over the logits (loss_forward_grad) */
            io->k->crossentropy16_fused(lse + r, tlogit + r, io->dx16[0] + (size_t)r * ld, tg + r, n, V, ld,
                                        io->o->v0, scale, io->scratch16);
        else
            io->k->crossentropy16_stats(lse + r, tlogit + r, io->x16[0] + (size_t)r * ld, tg + r, n, V, ld,
                                        io->o->v0, io->scratch16);
    }
    return 0;
}

static int loss_forward_grad(const merak_kernels *k, int b16) { return b16 && k->crossentropy16_fused; }

static void loss_backward_input(const merak_op_io *io)
{
    const int32_t *tg = (const int32_t *)io->x[1];
    const int V = cols(io);
    const float scale = io->loss_scale / (float)io->rows_all, *lse = saved_rows(io);
    if (!io->b16 && io->dx[0])
        io->k->crossentropy_bwd(io->dx[0], io->x[0], lse, tg, io->rows, V, io->o->v0, scale);
    const int ld = io->ldx;
    for (int r = 0, blk = loss_block(io); io->b16 && io->dx16[0] && r < io->rows; r += blk) {
        const int n = io->rows - r < blk ? io->rows - r : blk;
        const size_t at = (size_t)r * ld;
        io->k->crossentropy16_bwd(io->dx16[0] + at, io->x16[0] + at, lse + r, tg + r, n, V, ld, io->o->v0, scale,
                                  io->scratch16);
    }
}

static int loss_bf16(const merak_graph *g, const merak_op *o, const merak_kernels *k)
{
    (void)g, (void)o;
    return k->crossentropy16_stats && k->crossentropy16_bwd;
}

/* ------------------------------------------------------------------ tensor-parallel boundaries
 *
 * TP_COPY passes forward; its backward's input part passes on the
 * gradient the executor summed.  TP_REDUCE's forward copies its input to
 * its output, which the executor sums, and finishes by adding the bias
 * once; its backward passes the gradient, and the bias's is its column
 * sums. */

static int pass_forward(const merak_op_io *io)
{
    return io->k->copy(io->y, io->x[0], elems(io) * sizeof(float), MERAK_COPY_D2D);
}

static void bias_finish(const merak_op_io *io)
{
    if (io->x[1])   /* a (N,C) + (1,C) broadcast */
        io->k->posemb_fwd(io->y, io->y, io->x[1], io->rows, 1, cols(io));
}

static void bias_backward_weight(const merak_op_io *io)
{
    if (io->dw[0])
        io->k->posemb_bwd_w(io->dw[0], io->dy, io->rows, 1, cols(io));
}

/* ------------------------------------------------------------------ the table */

static const merak_op_kind kinds[MERAK_OP_COUNT_] = {
    [MERAK_OP_EMBEDDING] = {.name = "embedding", .shard = MERAK_SHARD_EMBEDDING, .cost = MERAK_COST_BYTES,
                            .forward = embedding_forward, .backward_weight = embedding_backward_weight,
                            .bf16 = embedding_bf16, .decode = embedding_forward},
    [MERAK_OP_POS_EMBEDDING] = {.name = "pos_embedding", .shard = MERAK_SHARD_WHOLE, .cost = MERAK_COST_STREAM,
                                .forward = posemb_forward, .backward_input = accumulate_input,
                                .backward_weight = posemb_backward_weight, .decode = posemb_forward,
                                .decode_plan = posemb_decode_plan, .bf16 = posemb_bf16,
                                .fresh = 1, .pass_grad = 1},
    [MERAK_OP_LAYERNORM] = {.name = "layernorm", .shard = MERAK_SHARD_WHOLE, .cost = MERAK_COST_STREAM,
                            .saved_floats = layernorm_saved, .forward = layernorm_forward,
                            .forward_after = norm_forward_after,
                            .backward_input = layernorm_backward_input,
                            .backward_weight = layernorm_backward_weight, .backward = layernorm_backward,
                            .decode = layernorm_forward,
                            .bf16 = layernorm_bf16,
                            .fresh = 1},
    [MERAK_OP_RMSNORM] = {.name = "rmsnorm", .shard = MERAK_SHARD_WHOLE, .cost = MERAK_COST_STREAM,
                          .saved_floats = rmsnorm_saved, .forward = rmsnorm_forward,
                          .forward_after = norm_forward_after,
                          .backward_input = rmsnorm_backward_input, .backward_weight = rmsnorm_backward_weight,
                          .backward = rmsnorm_backward, .decode = rmsnorm_forward, .bf16 = rmsnorm_bf16,
                          .fresh = 1},
    /* the weight gradient is one of the backward's two matmuls */
    [MERAK_OP_LINEAR] = {.name = "linear", .shard = MERAK_SHARD_LINEAR, .cost = MERAK_COST_FLOPS,
                         .weight_share = 0.5, .forward = linear_forward, .backward_input = linear_backward_input,
                         .backward_weight = linear_backward_weight, .bf16 = linear_bf16,
                         .decode = linear_forward,
                         .fresh = 1},
    [MERAK_OP_ATTENTION] = {.name = "attention", .shard = MERAK_SHARD_ATTENTION, .cost = MERAK_COST_FLOPS,
                            .saved_floats = attention_saved, .scratch_floats = attention_scratch,
                            .forward = attention_forward, .backward_input = attention_backward_input,
                            .bf16 = attention_bf16, .bf16_scratch_floats = attention_bf16_scratch,
                            .reads_output = 1, .decode = attention_decode, .decode_plan = attention_decode_plan,
                            .fresh = 1},
    [MERAK_OP_GELU] = {.name = "gelu", .shard = MERAK_SHARD_ELEMENTWISE, .cost = MERAK_COST_STREAM,
                       .forward = gelu_forward, .forward_after = gelu_forward_after,
                       .backward_input_next = gelu_backward_input_next, .backward_input = gelu_backward_input,
                       .decode = gelu_forward, .bf16 = gelu_bf16,
                       .fresh = 1},
    [MERAK_OP_SWIGLU] = {.name = "swiglu", .shard = MERAK_SHARD_ELEMENTWISE, .cost = MERAK_COST_STREAM,
                         .forward = swiglu_forward, .backward_input = swiglu_backward_input,
                         .decode = swiglu_forward, .bf16 = swiglu_bf16,
                         .fresh = 1},
    [MERAK_OP_ADD] = {.name = "add", .shard = MERAK_SHARD_ELEMENTWISE, .cost = MERAK_COST_STREAM,
                      .forward = add_forward, .backward_input = add_backward_input, .decode = add_forward,
                      .bf16 = add_bf16,
                      .fresh = 1, .pass_grad = 1},
    [MERAK_OP_DROPOUT] = {.name = "dropout", .shard = MERAK_SHARD_ELEMENTWISE, .cost = MERAK_COST_STREAM,
                          .forward = dropout_forward, .backward_input = dropout_backward_input,
                          .decode = dropout_forward, .bf16 = dropout_bf16,
                          .fresh = 1},
    [MERAK_OP_CROSS_ENTROPY] = {.name = "cross_entropy", .shard = MERAK_SHARD_LOSS, .cost = MERAK_COST_BYTES,
                                .loss = 1, .saved_floats = loss_saved, .forward = loss_forward,
                                .forward_grad = loss_forward_grad, .backward_input = loss_backward_input,
                                .bf16 = loss_bf16,
                                .bf16_scratch_floats = loss_bf16_scratch},
    [MERAK_OP_TP_COPY] = {.name = "tp_copy", .shard = MERAK_SHARD_NONE, .cost = MERAK_COST_SUM_BACKWARD,
                          .sum = MERAK_SUM_BACKWARD, .forward = pass_forward, .backward_input = accumulate_input,
                          .fresh = 1},
    [MERAK_OP_TP_REDUCE] = {.name = "tp_reduce", .shard = MERAK_SHARD_NONE, .cost = MERAK_COST_SUM_FORWARD,
                            .sum = MERAK_SUM_FORWARD, .forward = pass_forward, .finish = bias_finish,
                            .backward_input = accumulate_input, .backward_weight = bias_backward_weight,
                            .fresh = 1},
};

const merak_op_kind *merak_op_kind_get(merak_op_type t)
{
    return t >= 0 && t < MERAK_OP_COUNT_ ? &kinds[t] : NULL;
}

const merak_op_kind *merak_op_kind_of(const merak_op *o) { return &kinds[o->type]; }

const char *merak_op_name(merak_op_type t)
{
    const merak_op_kind *k = merak_op_kind_get(t);
    return k ? k->name : "?";
}
