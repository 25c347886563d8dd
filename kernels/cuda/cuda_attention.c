/*
 * cuda_attention.c - the CUDA backend's causal attention (the table's
 * attention entries, kernels.h): the fused kernels of flash.h (heads up
 * to FLASH_HD) or cuBLASLt GEMMs (cuda_blas.c) around softmax kernels
 * (attention.cu), chosen by shape; decoding against a key/value cache.
 * Calls cuda_blas.c and cuda_mem.c; the table (cuda_glue.c) calls it.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "config.h" /* HAVE_CUDNN_ATTN */

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"
#ifdef HAVE_CUDNN_ATTN
#include "cudnn_attn.h"
#endif
#include "flash.h" /* FLASH_HD: the widest head the fused attention takes */

/* ------------------------------------------------------------------ attention
 * Which way (merak_cuda_set_attention_paths may force one): with BF16
 * products (--dtype bf16), cuDNN's fused attention (cudnn_attn.h) for the
 * shapes it takes, in a build that has it; otherwise, with FP32
 * products the forward takes the fused kernel for heads up to FLASH_HD;
 * the backward, and with TF32 or BF16 products (merak_cuda_products) the
 * forward too, take the products while their two T x T buffers (2 n_head
 * T^2 floats) stay within MERAK_CUDA_ATTN_PRODUCTS_BYTES, else the fused
 * kernels (FP32 arithmetic on the CUDA cores whatever the products' math).
 * On the device, cuDNN's way is also what cuDNN takes there
 * (merak_cudnn_attn_takes builds a shape's graphs once; its answer holds
 * for the process).
 * Measured on an H100, GPT-2's 12 heads of 64 at B = 8, T = 1024, FP32
 * (bench/RESULTS.md): fused forward 1.22 ms, products 1.31; fused backward
 * 7.88 ms, products 2.42; the tensor cores take the products' FLOPs (half
 * their time in FP32) several times faster.  The choice depends on the
 * shape, the math and (once) cuDNN's answer, so runs stay bitwise
 * repeatable.
 *
 * Head dimensions up to FLASH_HD: the fused kernels of flash.h (forward:
 * out and lse; backward: dense dQ, dK, dV in scratch with D, each row's
 * sum of P dP), no T x T matrix.  Scratch: D (B,nh,T), dQ (B,T,nh*hd),
 * dK (B,T,nkv*hd), dV (B,T,nkv*hd).
 *
 * The products (wider heads, the backward by the rule above, decoding
 * below), as GEMMs, the CPU backend's arithmetic (kernels/cpu):
 *   fwd  S = scale Q K^T ; P = causal softmax(S) (zeros above the diagonal,
 *        in scratch) ; lse = each row's log-sum-exp (saved) ; out = P V
 *   bwd  P = exp(scale Q K^T - lse), rebuilt in scratch ; dP = dout V^T ;
 *        dS = P (dP - rowsum(P dP)) scale ;
 *        dQ = dS K ; dK = sum over the group's heads dS^T Q ;
 *        dV = sum over the group's heads P^T dout.
 * Query head h = g*rep + r reads kv head g.  One strided-batched cuBLASLt
 * product covers the nkv heads with the same r of one batch row (their
 * strides are uniform: rep*hd apart in q, hd apart in k and v, rep*T*T apart
 * in P), so a product is B*rep calls; the group's heads are summed in r
 * order (beta 0, then 1).
 * Batch rows go one at a time through the T x T buffers.
 * scratch: P (nh,T,T), dS (nh,T,T), then dQ (B,T,nh*hd), dK (B,T,nkv*hd),
 * dV (B,T,nkv*hd).
 *
 * cuDNN's (bf16 in and out, fp32 inside): q, k, v (rotated with RoPE)
 * rounded to bf16 into dense (B,T,heads*hd) buffers in scratch (exact for
 * the executor's bf16 values; RoPE's rotated q and k, fp32, round here),
 *   fwd  out = cuDNN's output, widened to fp32 (exact); lse = its stats;
 *   bwd  the forward's out back to bf16 (exact: bf16 values) and lse,
 *        dout rounded to bf16, then cuDNN's deterministic backward: dQ,
 *        dK, dV in bf16.
 * scratch: q, k, v, o, dout, dQ, dK, dV (bf16, each 16-byte aligned),
 * then the stats (B,nh,T) fp32.
 *
 * All end with dq += rot^T(dQ), dk += rot^T(dK), dv += dV (rot = RoPE,
 * or the identity).
 *
 * On bf16 storage (the attention16 entries, at the end): cuDNN's way on
 * the operands as they are, nothing widened. */

/* Row-major C (M,N) = alpha op(A) op(B) + beta C over bt.count products:
 * cuBLASLt, column-major, computes C^T = op(B)^T op(A)^T. */
static int rm_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   long long sa, const float *B, int ldb, long long sb, float beta, float *C,
                   int ldc, long long sc, int count)
{
    const merak_cuda_batch bt = {count, sb, sa, sc};
    return merak_cuda_gemm(tb, ta, N, M, K, alpha, B, ldb, A, lda, C, ldc, beta, NULL, bt);
}

static merak_cuda_attn_path g_fwd_path, g_bwd_path;   /* AUTO */

void merak_cuda_set_attention_paths(merak_cuda_attn_path fwd, merak_cuda_attn_path bwd)
{
    g_fwd_path = fwd;
    g_bwd_path = bwd;
}

/* The products' T x T buffers: P and dS of one batch row. */
static size_t products_bytes(const merak_attn_shape *s)
{
    return 2 * (size_t)s->n_head * (size_t)s->T * (size_t)s->T * sizeof(float);
}

static int fused_fwd(const merak_attn_shape *s)
{
    if (s->head_dim > FLASH_HD || g_fwd_path == MERAK_CUDA_ATTN_PRODUCTS)
        return 0;
    return g_fwd_path == MERAK_CUDA_ATTN_FUSED || merak_cuda_products() == MERAK_PRODUCTS_FP32 ||
           products_bytes(s) > MERAK_CUDA_ATTN_PRODUCTS_BYTES;
}

static int fused_bwd(const merak_attn_shape *s)
{
    if (s->head_dim > FLASH_HD || g_bwd_path == MERAK_CUDA_ATTN_PRODUCTS)
        return 0;
    return g_bwd_path == MERAK_CUDA_ATTN_FUSED || products_bytes(s) > MERAK_CUDA_ATTN_PRODUCTS_BYTES;
}

/* ------------------------------------------------------------------ cuDNN */

#ifdef HAVE_CUDNN_ATTN
/* s as cuDNN's call sees it: dense bf16 rows of q, k, v. */
static merak_attn_shape cudnn_shape(const merak_attn_shape *s)
{
    merak_attn_shape p = *s;
    p.q_stride = s->n_head * s->head_dim;
    p.k_stride = p.v_stride = s->n_kv_head * s->head_dim;
    p.rope.theta = 0.0f;
    return p;
}

/* cuDNN takes shape p (its calls' shape, dense gradients): by its sizes
 * alone in a plan, and on the device by building its graphs there. */
static int cudnn_takes(const merak_attn_shape *p)
{
    const int gs[3] = {p->n_head * p->head_dim, p->n_kv_head * p->head_dim, p->n_kv_head * p->head_dim};
    return merak_cudnn_attn_supported(p) && (!merak_cuda_is_open() || merak_cudnn_attn_takes(p, gs));
}

/* cuDNN's way is wanted: with BF16 products unless another way is forced. */
static int cudnn_wanted(void)
{
    return g_fwd_path == MERAK_CUDA_ATTN_CUDNN ||
           (g_fwd_path == MERAK_CUDA_ATTN_AUTO && merak_cuda_products() == MERAK_PRODUCTS_BF16);
}
#endif

/* cuDNN's way: wanted, for the shapes it takes, in a build that has it. */
static int cudnn_way(const merak_attn_shape *s)
{
#ifdef HAVE_CUDNN_ATTN
    const merak_attn_shape p = cudnn_shape(s);
    return cudnn_wanted() && cudnn_takes(&p);
#else
    (void)s;
    return 0;
#endif
}

typedef struct cudnn_bufs {
    uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;   /* bf16 */
    float *stats;                                    /* (B,nh,T) */
} cudnn_bufs;

/* cudnn_bufs' bf16 buffers, as bits of a layout's `need` */
enum { B_Q = 1, B_K = 2, B_V = 4, B_O = 8, B_DOUT = 16, B_DQ = 32, B_DK = 64, B_DV = 128, B_ALL = 255 };

/* The scratch of cuDNN's way, the buffers of `need` (the others NULL)
 * then the stats, laid out from scratch into b (NULL: only counted): its
 * size in floats. */
static size_t cudnn_layout(const merak_attn_shape *s, unsigned need, float *scratch, cudnn_bufs *b)
{
    const size_t BT = (size_t)s->B * (size_t)s->T, C = (size_t)s->n_head * (size_t)s->head_dim;
    const size_t Ckv = (size_t)s->n_kv_head * (size_t)s->head_dim;
    const size_t n[8] = {BT * C, BT * Ckv, BT * Ckv, BT * C, BT * C, BT * C, BT * Ckv, BT * Ckv};
    uint16_t **at[8] = {NULL};
    if (b) {
        uint16_t **p[8] = {&b->q, &b->k, &b->v, &b->o, &b->dout, &b->dq, &b->dk, &b->dv};
        memcpy(at, p, sizeof at);
    }
    size_t off = 0;   /* bf16 elements, a multiple of 8 (16 bytes) */
    for (int i = 0; i < 8; i++) {
        if (b)
            *at[i] = need & (1u << i) ? (uint16_t *)scratch + off : NULL;
        if (need & (1u << i))
            off += (n[i] + 7) / 8 * 8;
    }
    if (b)
        b->stats = scratch + off / 2;
    return off / 2 + (size_t)s->B * (size_t)s->n_head * (size_t)s->T;
}

#ifdef HAVE_CUDNN_ATTN
/* q, k, v (Q, K with RoPE: the rotated copies, of strides qs, ks) into
 * b's bf16 buffers.  0, or -1 after an error. */
static int cudnn_inputs(const merak_attn_shape *s, const cudnn_bufs *b, const float *Q, int qs, const float *K,
                        int ks, const float *v)
{
    const size_t BT = (size_t)s->B * (size_t)s->T;
    const int C = s->n_head * s->head_dim, Ckv = s->n_kv_head * s->head_dim;
    LAUNCH("attention(q to bf16)", merak_cuda_launch_rows_to_bf16(STREAM, b->q, Q, BT, C, qs));
    LAUNCH("attention(k to bf16)", merak_cuda_launch_rows_to_bf16(STREAM, b->k, K, BT, Ckv, ks));
    LAUNCH("attention(v to bf16)", merak_cuda_launch_rows_to_bf16(STREAM, b->v, v, BT, Ckv, s->v_stride));
    return merak_cuda_failed() ? -1 : 0;
}
#endif

static int attn_shape_ok(const merak_attn_shape *s, const char *what)
{
    if (s->n_kv_head > 0 && s->n_head > 0 && s->n_head % s->n_kv_head == 0)
        return 1;
    merak_cuda_record(what, "n_head is not a positive multiple of n_kv_head");
    return 0;
}

/* S (B,nh,T,L) = Q K^T / sqrt(hd) over L keys, query head h = g*rep + r
 * against kv head g: Q (B,T,.) with row stride qs; K rows of stride ks,
 * batch row b's first at K + b*kb.  0, or -1 when a product failed. */
static int attn_scores(const merak_attn_shape *s, int L, const float *Q, int qs, const float *K, int ks,
                       size_t kb, float *S)
{
    const int T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim, rep = nh / nkv;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const long long TL = (long long)T * L;
    for (int b = 0; b < s->B && !merak_cuda_failed(); b++)
        for (int r = 0; r < rep; r++)
            if (rm_gemm(0, 1, T, L, hd, scale, Q + ((size_t)b * T * qs + (size_t)r * hd), qs,
                        (long long)rep * hd, K + (size_t)b * kb, ks, hd, 0.0f,
                        S + ((size_t)b * nh + r) * TL, L, rep * TL, nkv) < 0)
                return -1;
    return merak_cuda_failed() ? -1 : 0;
}

/* out (B,T,nh*hd) = P V per head, P (B,nh,T,L): V rows of stride vs, batch
 * row b's first at V + b*vb.  0 or -1. */
static int attn_mix(const merak_attn_shape *s, int L, const float *P, const float *V, int vs, size_t vb,
                    float *out)
{
    const int T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim, rep = nh / nkv;
    const int C = nh * hd;
    const long long TL = (long long)T * L;
    for (int b = 0; b < s->B && !merak_cuda_failed(); b++)
        for (int r = 0; r < rep; r++)
            if (rm_gemm(0, 0, T, hd, L, 1.0f, P + ((size_t)b * nh + r) * TL, L, rep * TL,
                        V + (size_t)b * vb, vs, hd, 0.0f, out + ((size_t)b * T * C + (size_t)r * hd), C,
                        (long long)rep * hd, nkv) < 0)
                return -1;
    return merak_cuda_failed() ? -1 : 0;
}

void merak_cuda_attention_fwd(const merak_attn_shape *s, float *out, float *lse, float *qr,
                            float *kr, const float *q, const float *k, const float *v,
                            float *scratch)
{
    if (merak_cuda_failed() || !attn_shape_ok(s, "attention_fwd") || s->B <= 0 || s->T <= 0 ||
        s->head_dim <= 0)
        return;
    const int T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int C = nh * hd, vs = s->v_stride;
    const float *Q = q, *K = k;
    int qs = s->q_stride, ks = s->k_stride;
    if (s->rope.theta > 0) {
        LAUNCH("attention_fwd(rope)", merak_cuda_launch_rope_fwd(STREAM, s, qr, kr, q, k));
        Q = qr, qs = C;
        K = kr, ks = nkv * hd;
    }
#ifdef HAVE_CUDNN_ATTN
    if (cudnn_way(s)) {
        cudnn_bufs b;
        cudnn_layout(s, B_ALL, scratch, &b);
        const merak_attn_shape p = cudnn_shape(s);
        if (cudnn_inputs(s, &b, Q, qs, K, ks, v) < 0 || merak_cudnn_attn_fwd(&p, b.o, b.stats, b.q, b.k, b.v) < 0)
            return;
        LAUNCH("attention_fwd(out from bf16)", merak_cuda_launch_rows_from_bf16(STREAM, out, C, b.o, (size_t)s->B * T, C));
        merak_cuda_memcpy_d2d(lse, b.stats, (size_t)s->B * nh * T * sizeof(float));
        return;
    }
#endif
    if (fused_fwd(s)) {
        LAUNCH("attention_fwd(fused)",
               merak_cuda_launch_flash_fwd(STREAM, s, out, lse, Q, qs, K, ks, v));
        return;
    }
    /* one batch row at a time: its probabilities P (nh,T,T) in scratch */
    merak_attn_shape one = *s;
    one.B = 1;
    float *P = scratch;
    for (int b = 0; b < s->B && !merak_cuda_failed(); b++) {
        if (attn_scores(&one, T, Q + (size_t)b * T * qs, qs, K + (size_t)b * T * ks, ks, 0, P) < 0)
            return;
        LAUNCH("attention_fwd(softmax)",
               merak_cuda_launch_attn_softmax(STREAM, P, lse + (size_t)b * nh * T, (size_t)nh * T, T, T, 0));
        if (attn_mix(&one, T, P, v + (size_t)b * T * vs, vs, 0, out + (size_t)b * T * C) < 0)
            return;
    }
}

/* Decoding against a key/value cache: kv_append writes rows [pos, pos+T)
 * of kc, vc (and with RoPE the rotated queries Q, in scratch); then attention_fwd's two
 * products over L = pos+T cached keys, and the softmax of query t over
 * [0, pos+t].  scratch: Q (B,T,nh*hd), S (B,nh,T,cap). */
void merak_cuda_attention_cached_fwd(const merak_attn_shape *s, int pos, int cap, float *out,
                                   float *kc, float *vc, const float *q, const float *k,
                                   const float *v, float *scratch)
{
    if (merak_cuda_failed() || !attn_shape_ok(s, "attention_cached_fwd") || s->B <= 0 || s->T <= 0 ||
        s->head_dim <= 0)
        return;
    const int T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int C = nh * hd, Ckv = nkv * hd, L = pos + T;
    /* the queries: rotated into scratch with RoPE, else q itself */
    const int rope = s->rope.theta > 0;
    float *S = scratch + (size_t)s->B * T * C;
    LAUNCH("attention_cached_fwd(append)",
           merak_cuda_launch_kv_append(STREAM, s, pos, cap, scratch, kc, vc, q, k, v));
    if (attn_scores(s, L, rope ? scratch : q, rope ? C : s->q_stride, kc, Ckv, (size_t)cap * Ckv, S) < 0)
        return;
    LAUNCH("attention_cached_fwd(softmax)",
           merak_cuda_launch_attn_softmax(STREAM, S, NULL, (size_t)s->B * nh * T, T, L, pos));
    (void)attn_mix(s, L, S, vc, Ckv, (size_t)cap * Ckv, out);
}

size_t merak_cuda_attention_cached_scratch_elems(const merak_attn_shape *s, int cap)
{
    const size_t B = (size_t)s->B, T = (size_t)s->T, nh = (size_t)s->n_head;
    return B * T * nh * (size_t)s->head_dim + B * nh * T * (size_t)cap;
}

size_t merak_cuda_attention_scratch_elems(const merak_attn_shape *s)
{
    if (cudnn_way(s))
        return cudnn_layout(s, B_ALL, NULL, NULL);
    const size_t B = (size_t)s->B, T = (size_t)s->T;
    const size_t grads = B * T * (size_t)(s->n_head + 2 * s->n_kv_head) * (size_t)s->head_dim;
    const size_t tt = fused_fwd(s) && fused_bwd(s) ? 0 : 2 * (size_t)s->n_head * T * T;
    const size_t d = fused_bwd(s) ? B * (size_t)s->n_head * T : 0;   /* the fused backward's D */
    return (tt > d ? tt : d) + grads;
}

void merak_cuda_attention_bwd(const merak_attn_shape *s, float *dq, float *dk, float *dv,
                            const float *dout, const float *out, const float *lse, const float *qr,
                            const float *kr, const float *q, const float *k, const float *v,
                            float *scratch, int acc)
{
    if (merak_cuda_failed() || !attn_shape_ok(s, "attention_bwd") || s->B <= 0 || s->T <= 0 ||
        s->head_dim <= 0)
        return;
    const int B = s->B, T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int rep = nh / nkv, C = nh * hd, Ckv = nkv * hd, vs = s->v_stride;
    const int rope = s->rope.theta > 0;
    const float *Q = rope ? qr : q, *K = rope ? kr : k;
    const int qs = rope ? C : s->q_stride, ks = rope ? Ckv : s->k_stride;
#ifndef HAVE_CUDNN_ATTN
    (void)out;   /* cuDNN's backward reads it, the others rebuild from lse */
#else
    if (cudnn_way(s)) {
        cudnn_bufs b;
        cudnn_layout(s, B_ALL, scratch, &b);
        const merak_attn_shape p = cudnn_shape(s);
        if (cudnn_inputs(s, &b, Q, qs, K, ks, v) < 0)
            return;
        /* the forward's output (bf16 values: exact) and stats, where cuDNN
         * wants them: dense, 16-byte aligned */
        LAUNCH("attention_bwd(out to bf16)", merak_cuda_launch_rows_to_bf16(STREAM, b.o, out, (size_t)B * T, C, C));
        merak_cuda_memcpy_d2d(b.stats, lse, (size_t)B * nh * T * sizeof(float));
        LAUNCH("attention_bwd(dout to bf16)",
               merak_cuda_launch_rows_to_bf16(STREAM, b.dout, dout, (size_t)B * T, C, C));
        if (merak_cuda_failed() ||
            merak_cudnn_attn_bwd(&p, b.dq, b.dk, b.dv, C, Ckv, Ckv, b.dout, b.o, b.stats, b.q, b.k, b.v) < 0)
            return;
        LAUNCH("attention_bwd(add)", merak_cuda_launch_attn_bwd_add_bf16(STREAM, s, dq, dk, dv, b.dq, b.dk, b.dv, acc));
        return;
    }
#endif
    if (fused_bwd(s)) {
        float *D = scratch, *dQ = D + (size_t)B * nh * T;
        float *dK = dQ + (size_t)B * T * C, *dV = dK + (size_t)B * T * Ckv;
        LAUNCH("attention_bwd(fused)", merak_cuda_launch_flash_bwd(STREAM, s, dQ, dK, dV, D, dout,
                                                                   lse, Q, qs, K, ks, v));
        LAUNCH("attention_bwd(add)",
               merak_cuda_launch_attn_bwd_add(STREAM, s, dq, dk, dv, dQ, dK, dV, acc));
        return;
    }
    const float scale = (float)(1.0 / sqrt((double)hd));
    const long long TT = (long long)T * T;
    float *P = scratch;                       /* one batch row's (nh,T,T) */
    float *dS = P + (size_t)nh * TT;          /* (nh,T,T) */
    float *dQ = dS + (size_t)nh * TT;         /* (B,T,nh*hd) */
    float *dK = dQ + (size_t)B * T * C;       /* (B,T,nkv*hd) */
    float *dV = dK + (size_t)B * T * Ckv;     /* (B,T,nkv*hd) */
    merak_attn_shape one = *s;
    one.B = 1;

    for (int b = 0; b < B && !merak_cuda_failed(); b++) {
        const float *Qb = Q + (size_t)b * T * qs, *Kb = K + (size_t)b * T * ks;
        const float *Gb = dout + (size_t)b * T * C;
        /* P rebuilt from the scores and lse; dP = dout V^T; dS */
        if (attn_scores(&one, T, Qb, qs, Kb, ks, 0, P) < 0)
            return;
        LAUNCH("attention_bwd(probs)",
               merak_cuda_launch_attn_probs(STREAM, P, lse + (size_t)b * nh * T, (size_t)nh * T, T));
        for (int r = 0; r < rep; r++)
            if (rm_gemm(0, 1, T, T, hd, 1.0f, Gb + (size_t)r * hd, C, (long long)rep * hd,
                        v + (size_t)b * T * vs, vs, hd, 0.0f, dS + (size_t)r * TT, T, rep * TT, nkv) < 0)
                return;
        LAUNCH("attention_bwd(softmax)",
               merak_cuda_launch_attn_dsoftmax(STREAM, dS, P, (size_t)nh * T, T, scale));
        /* dQ = dS K ; dK = sum_r dS^T Q ; dV = sum_r P^T dout */
        for (int r = 0; r < rep && !merak_cuda_failed(); r++) {
            const float *Sr = dS + (size_t)r * TT, *Pr = P + (size_t)r * TT;
            const float beta = r ? 1.0f : 0.0f;
            if (rm_gemm(0, 0, T, hd, T, 1.0f, Sr, T, rep * TT, Kb, ks, hd, 0.0f,
                        dQ + ((size_t)b * T * C + (size_t)r * hd), C, (long long)rep * hd, nkv) < 0 ||
                rm_gemm(1, 0, T, hd, T, 1.0f, Sr, T, rep * TT, Qb + (size_t)r * hd, qs, (long long)rep * hd,
                        beta, dK + (size_t)b * T * Ckv, Ckv, hd, nkv) < 0 ||
                rm_gemm(1, 0, T, hd, T, 1.0f, Pr, T, rep * TT, Gb + (size_t)r * hd, C, (long long)rep * hd,
                        beta, dV + (size_t)b * T * Ckv, Ckv, hd, nkv) < 0)
                return;
        }
    }
    LAUNCH("attention_bwd(add)",
           merak_cuda_launch_attn_bwd_add(STREAM, s, dq, dk, dv, dQ, dK, dV, acc));
}

/* ------------------------------------------------------------------ bf16 storage
 * The attention16 entries (kernels.h): cuDNN's way on the operands as they
 * are, for the shapes where it is the way (merak_cuda_attention16_supported;
 * the executor stages the others for the float entries).  q, k, v are read
 * at their strides, out and dout dense; with RoPE, q and k rotated into
 * the saved qr, kr (float, as the float entries keep them) and rounded into
 * dense bf16 buffers.  The stats are the saved lse where it is 16-byte
 * aligned, else a copy.  The backward's dQ, dK, dV (cuDNN overwrites) go
 * to scratch, then dq += rot^T(dQ), dk += rot^T(dK), dv += dV on the bf16
 * gradients, each sum rounded once; where they are written (acc 0), with
 * no RoPE, cuDNN writes them in place.  ascratch: (RoPE: q, k,) dQ, dK, dV
 * bf16, then the stats. */

#ifdef HAVE_CUDNN_ATTN
/* The shape cuDNN's call sees: q, k at their strides or, rotated, dense. */
static merak_attn_shape native_shape(const merak_attn_shape *s)
{
    merak_attn_shape p = *s;
    if (s->rope.theta > 0) {
        p.q_stride = s->n_head * s->head_dim;
        p.k_stride = s->n_kv_head * s->head_dim;
    }
    p.rope.theta = 0.0f;
    return p;
}
#endif

static unsigned native_need(const merak_attn_shape *s)
{
    return (s->rope.theta > 0 ? B_Q | B_K : 0u) | B_DQ | B_DK | B_DV;
}

int merak_cuda_attention16_supported(const merak_attn_shape *s)
{
#ifdef HAVE_CUDNN_ATTN
    const merak_attn_shape p = native_shape(s);
    return cudnn_wanted() && cudnn_takes(&p);
#else
    (void)s;
    return 0;
#endif
}

size_t merak_cuda_attention16_scratch_elems(const merak_attn_shape *s)
{
    return cudnn_layout(s, native_need(s), NULL, NULL);
}

/* 1 if the call can go on: nothing failed, a shape to run. */
static int native_ok(const merak_attn_shape *s, const char *what)
{
    if (merak_cuda_failed() || !attn_shape_ok(s, what))
        return 0;
#ifdef HAVE_CUDNN_ATTN
    return s->B > 0 && s->T > 0 && s->head_dim > 0;
#else
    merak_cuda_record(what, "this build has no cuDNN attention");
    return 0;
#endif
}

#ifdef HAVE_CUDNN_ATTN
/* With RoPE, the rotated qr, kr rounded into b's q, k (which *Q, *K then
 * name); else *Q, *K stay q, k.  0, or -1 after an error. */
static int native_qk(const merak_attn_shape *s, const cudnn_bufs *b, const float *qr, const float *kr,
                     const uint16_t **Q, const uint16_t **K)
{
    if (s->rope.theta > 0) {
        const size_t BT = (size_t)s->B * (size_t)s->T;
        const int C = s->n_head * s->head_dim, Ckv = s->n_kv_head * s->head_dim;
        LAUNCH("attention16(q to bf16)", merak_cuda_launch_rows_to_bf16(STREAM, b->q, qr, BT, C, C));
        LAUNCH("attention16(k to bf16)", merak_cuda_launch_rows_to_bf16(STREAM, b->k, kr, BT, Ckv, Ckv));
        *Q = b->q, *K = b->k;
    }
    return merak_cuda_failed() ? -1 : 0;
}
#endif

void merak_cuda_attention16_fwd(const merak_attn_shape *s, uint16_t *out, float *lse, float *qr, float *kr,
                                const uint16_t *q, const uint16_t *k, const uint16_t *v, float *ascratch,
                                float *scratch)
{
    (void)scratch;
    if (!native_ok(s, "attention16_fwd"))
        return;
#ifdef HAVE_CUDNN_ATTN
    cudnn_bufs b;
    cudnn_layout(s, native_need(s), ascratch, &b);
    const merak_attn_shape p = native_shape(s);
    const size_t nstats = (size_t)s->B * (size_t)s->n_head * (size_t)s->T * sizeof(float);
    float *stats = merak_cuda_ptr_align(lse) >= 16 ? lse : b.stats;
    if (s->rope.theta > 0)
        LAUNCH("attention16_fwd(rope)", merak_cuda_launch_rope16_fwd(STREAM, s, qr, kr, q, k));
    if (native_qk(s, &b, qr, kr, &q, &k) < 0 || merak_cudnn_attn_fwd(&p, out, stats, q, k, v) < 0)
        return;
    if (stats != lse)
        merak_cuda_memcpy_d2d(lse, stats, nstats);
#else
    (void)out, (void)lse, (void)qr, (void)kr, (void)q, (void)k, (void)v, (void)ascratch;
#endif
}

void merak_cuda_attention16_bwd(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                const uint16_t *dout, const uint16_t *out, const float *lse, const float *qr,
                                const float *kr, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                float *ascratch, float *scratch, int acc)
{
    (void)scratch;
    if (!native_ok(s, "attention16_bwd"))
        return;
#ifdef HAVE_CUDNN_ATTN
    cudnn_bufs b;
    cudnn_layout(s, native_need(s), ascratch, &b);
    const merak_attn_shape p = native_shape(s);
    const float *stats = lse;
    if (merak_cuda_ptr_align(lse) < 16) {
        merak_cuda_memcpy_d2d(b.stats, lse, (size_t)s->B * (size_t)s->n_head * (size_t)s->T * sizeof(float));
        stats = b.stats;
    }
    if (native_qk(s, &b, qr, kr, &q, &k) < 0)
        return;
    /* Written, not added to, and no rotation to bring back (GPT-2's fresh
     * gradient of its fused q|k|v row): cuDNN writes dq, dk, dv where they
     * are, at q's, k's and v's strides, and no pass adds scratch into them
     * (75 MB a layer of GPT-2 124M at B = 8, T = 1024). */
    const int gs[3] = {s->q_stride, s->k_stride, s->v_stride};
    if (!acc && s->rope.theta <= 0 && merak_cuda_ptr_align(dq) >= 16 && merak_cuda_ptr_align(dk) >= 16 &&
        merak_cuda_ptr_align(dv) >= 16 && merak_cudnn_attn_takes(&p, gs)) {
        (void)merak_cudnn_attn_bwd(&p, dq, dk, dv, gs[0], gs[1], gs[2], dout, out, stats, q, k, v);
        return;
    }
    if (merak_cudnn_attn_bwd(&p, b.dq, b.dk, b.dv, p.n_head * p.head_dim, p.n_kv_head * p.head_dim,
                             p.n_kv_head * p.head_dim, dout, out, stats, q, k, v) < 0)
        return;
    LAUNCH("attention16_bwd(add)", merak_cuda_launch_attn_bwd_add16(STREAM, s, dq, dk, dv, b.dq, b.dk, b.dv, acc));
#else
    (void)dq, (void)dk, (void)dv, (void)dout, (void)out, (void)lse, (void)qr, (void)kr, (void)q, (void)k, (void)v;
    (void)ascratch, (void)acc;
#endif
}
