/*
 * cuda_glue.c - the CUDA backend's table and its cuBLASLt GEMMs (linear,
 * attention).  Its device, memory, stream and error state are in
 * cuda_mem.c; the device kernels are in one .cu file per op family
 * (cuda_common.cuh lists them).
 *
 * GEMMs: row-major tensors are handed to column-major cuBLASLt as their
 * transposes (a row-major (r,c) buffer is a column-major (c,r) matrix), FP32
 * in, FP32 out, CUBLAS_COMPUTE_32F (no TF32).  The algorithm of a shape is
 * chosen once by the heuristic and cached, so repeated calls run the same
 * kernel: cuBLASLt is bitwise reproducible for a fixed algorithm on the same
 * GPU model.  The linear bias uses the BIAS epilogue when a 16-byte-aligned
 * bias and an algorithm for it exist, else a separate (deterministic) kernel.
 * cuBLASLt itself is dlopen'ed when the backend starts (lt_load).
 */
#include "config.h" /* MERAK_CUDA_LIBDIR */

/* cublasLt.h declares `cublasLtLoggerForceDisable()` without `void`, which
 * -Wstrict-prototypes -Werror rejects when CUDA's include dir is not a system
 * one (-I, not -isystem). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h> /* cublasLtMatmul & co. (types; the functions are dlopen'ed) */
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpyAsync, streams, errors */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"
#include "flash.h" /* FLASH_HD: the widest head the fused attention takes */
#include "memcount.h"

/* cuBLASLt workspace (NVIDIA recommends 32 MiB on Hopper). */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
/* Cached GEMM algorithms (one per distinct shape/layout/alignment). */
#define LT_CACHE 64

typedef struct lt_key {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int bias;        /* BIAS epilogue */
    int beta_zero;   /* beta == 0 */
    int al_a, al_b, al_c; /* pointer alignments (bytes) */
    int batch;            /* strided-batched products (1: one) */
    long long sa, sb, sc; /* their strides (elements) */
} lt_key;

typedef struct lt_entry {
    lt_key key;
    int found; /* 0: the heuristic had no algorithm for it */
    cublasLtMatmulAlgo_t algo;
} lt_entry;

/* The backend's cuBLASLt state (cuda_mem.c holds the device's, its stream
 * and the first error). */
static struct cuda_backend {
    int initialised, usable;
    cublasLtHandle_t lt;
    void *lt_ws;
    double *d_sumsq; /* sumsq's device result */
    lt_entry cache[LT_CACHE];
    int ncache;
    unsigned evict;   /* with the cache full, the next slot a new shape replaces */
} cb;

/* cuBLASLt is loaded when the backend starts, not linked: the library alone
 * costs a process about 210 MB of resident memory, which every tool of a
 * CUDA build (the planner on a login node too) would otherwise pay. */
#define LT_FUNCTIONS(X) X(Create) X(GetStatusString) X(Matmul) X(MatmulAlgoGetHeuristic) X(MatmulDescCreate) X(MatmulDescDestroy) X(MatmulDescSetAttribute) X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy) X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy) X(MatrixLayoutSetAttribute)
#define LT_POINTER(name) __typeof__(cublasLt##name) *name;
static struct { LT_FUNCTIONS(LT_POINTER) } lt;
#undef LT_POINTER

/* ------------------------------------------------------------------ errors */

static int lt_ok(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 1;
    merak_cuda_record(what, lt.GetStatusString(st));
    return 0;
}

/* ------------------------------------------------------------------ cuBLASLt */

static int ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 4 && a % (uintptr_t)al)
        al >>= 1;
    return al;
}

/* The cached algorithm for key, asking the heuristic on a miss.  Returns the
 * entry (found = 0 when no algorithm exists), or NULL on an error. */
static const lt_entry *lt_algo(const lt_key *key, cublasLtMatmulDesc_t op,
                               cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                               cublasLtMatrixLayout_t lc)
{
    for (int i = 0; i < cb.ncache; i++)
        if (!memcmp(&cb.cache[i].key, key, sizeof *key))
            return &cb.cache[i];

    lt_entry fresh, *e = &fresh;
    memset(e, 0, sizeof *e);
    e->key = *key;

    cublasLtMatmulPreference_t pref = NULL;
    if (!lt_ok(lt.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"))
        return NULL;
    uint64_t ws = LT_WORKSPACE_BYTES;
    uint32_t al[3] = {(uint32_t)key->al_a, (uint32_t)key->al_b, (uint32_t)key->al_c};
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    const lt_entry *ret = e;
    if (!lt_ok(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]),
               "cublasLtMatmulPreferenceSetAttribute")) {
        ret = NULL;
    } else {
        cublasStatus_t st =
            lt.MatmulAlgoGetHeuristic(cb.lt, op, la, lb, lc, lc, pref, 1, &res, &nres);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && nres < 1)) {
            e->found = 0;
        } else if (!lt_ok(st, "cublasLtMatmulAlgoGetHeuristic")) {
            ret = NULL;
        } else {
            e->found = 1;
            e->algo = res.algo;
        }
    }
    lt.MatmulPreferenceDestroy(pref);
    if (!ret)
        return NULL;
    /* kept in a free slot, else in place of the oldest (decoding asks for
     * a new shape every token; training's shapes come back) */
    lt_entry *slot = &cb.cache[cb.ncache < LT_CACHE ? cb.ncache++ : (int)(cb.evict++ % LT_CACHE)];
    *slot = fresh;
    return slot;
}

/* How many products one lt_matmul call does, and their strides. */
typedef struct lt_batch {
    int count;
    long long sa, sb, sc;
} lt_batch;
static const lt_batch LT_ONE = {1, 0, 0, 0};

/* Sets the batch attributes of a layout (count > 1). */
static int lt_layout_batch(cublasLtMatrixLayout_t l, int count, long long stride)
{
    const int32_t c = count;
    const int64_t st = stride;
    return lt_ok(lt.MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof c),
                 "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)") &&
           lt_ok(lt.MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st,
                                             sizeof st),
                 "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
}

/* C (m,n) = alpha op(A) op(B) + beta C [+ bias (m)], column-major, FP32;
 * bt.count such products at strides bt.sa, bt.sb, bt.sc (no bias then).
 * Returns 0, 1 when no algorithm exists for this combination (only asked
 * with a bias: the caller retries without), or -1 on an error (recorded). */
static int lt_matmul(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                     const float *B, int ldb, float *C, int ldc, float beta,
                     const float *bias, lt_batch bt)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int rc = -1;

    if (!lt_ok(lt.MatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate") ||
        !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa),
               "cublasLtMatmulDescSetAttribute(TRANSA)") ||
        !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb),
               "cublasLtMatmulDescSetAttribute(TRANSB)"))
        goto out;
    if (bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        if (!lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE)") ||
            !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias),
                   "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"))
            goto out;
    }
    if (!lt_ok(lt.MatrixLayoutCreate(&la, CUDA_R_32F, ta ? k : m, ta ? m : k, lda),
               "cublasLtMatrixLayoutCreate(A)") ||
        !lt_ok(lt.MatrixLayoutCreate(&lb, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb),
               "cublasLtMatrixLayoutCreate(B)") ||
        !lt_ok(lt.MatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc),
               "cublasLtMatrixLayoutCreate(C)"))
        goto out;
    if (bt.count > 1 && !(lt_layout_batch(la, bt.count, bt.sa) &&
                          lt_layout_batch(lb, bt.count, bt.sb) &&
                          lt_layout_batch(lc, bt.count, bt.sc)))
        goto out;

    lt_key key;
    memset(&key, 0, sizeof key); /* padding-free, but memcmp'd: be explicit */
    key.ta = ta;
    key.tb = tb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.bias = bias != NULL;
    key.beta_zero = beta == 0.0f;
    key.al_a = ptr_align(A);
    key.al_b = ptr_align(B);
    key.al_c = ptr_align(C);
    key.batch = bt.count;
    key.sa = bt.sa;
    key.sb = bt.sb;
    key.sc = bt.sc;
    const lt_entry *e = lt_algo(&key, op, la, lb, lc);
    if (!e)
        goto out;
    if (!e->found) {
        if (bias)
            rc = 1;
        else
            merak_cuda_record("cublasLtMatmulAlgoGetHeuristic", "no algorithm for this GEMM");
        goto out;
    }
    if (lt_ok(lt.Matmul(cb.lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &e->algo,
                             cb.lt_ws, LT_WORKSPACE_BYTES, merak_cuda_stream()),
              "cublasLtMatmul"))
        rc = 0;
out:
    if (lc)
        lt.MatrixLayoutDestroy(lc);
    if (lb)
        lt.MatrixLayoutDestroy(lb);
    if (la)
        lt.MatrixLayoutDestroy(la);
    if (op)
        lt.MatmulDescDestroy(op);
    return rc;
}

/* ------------------------------------------------------------------ the table */

#define STREAM ((void *)merak_cuda_stream())
/* Enqueues one launcher unless an error already happened; records its error. */
#define LAUNCH(name, call)                                                    \
    do {                                                                      \
        if (!merak_cuda_failed())                                                       \
            merak_cuda_ok((cudaError_t)(call), name);                               \
    } while (0)

static void k_embedding_fwd(float *out, const int32_t *ids, const float *wte, int N, int C,
                            int v0, int V)
{
    LAUNCH("embedding_fwd",
           merak_cuda_launch_embedding_fwd(STREAM, out, ids, wte, N, C, v0, V));
}

static void k_embedding_bwd_w(float *dwte, const float *dout, const int32_t *ids, int N,
                              int C, int v0, int V)
{
    LAUNCH("embedding_bwd_w",
           merak_cuda_launch_embedding_bwd_w(STREAM, dwte, dout, ids, N, C, v0, V));
}

static void k_posemb_fwd(float *out, const float *inp, const float *wpe, int B, int T, int C)
{
    LAUNCH("posemb_fwd", merak_cuda_launch_posemb_fwd(STREAM, out, inp, wpe, B, T, C));
}

static void k_posemb_bwd_w(float *dwpe, const float *dout, int B, int T, int C)
{
    LAUNCH("posemb_bwd_w", merak_cuda_launch_posemb_bwd_w(STREAM, dwpe, dout, B, T, C));
}

static void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C, float eps)
{
    LAUNCH("layernorm_fwd",
           merak_cuda_launch_layernorm_fwd(STREAM, out, mean, rstd, inp, w, b, N, C, eps));
}

static void k_layernorm_bwd_x(float *dinp, const float *dout, const float *inp,
                              const float *w, const float *mean, const float *rstd, int N,
                              int C)
{
    LAUNCH("layernorm_bwd_x",
           merak_cuda_launch_layernorm_bwd_x(STREAM, dinp, dout, inp, w, mean, rstd, N, C));
}

static void k_layernorm_bwd_w(float *dw, float *db, const float *dout, const float *inp,
                              const float *mean, const float *rstd, int N, int C)
{
    LAUNCH("layernorm_bwd_w",
           merak_cuda_launch_layernorm_bwd_w(STREAM, dw, db, dout, inp, mean, rstd, N, C));
}

static void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N,
                          int C, float eps)
{
    LAUNCH("rmsnorm_fwd", merak_cuda_launch_rmsnorm_fwd(STREAM, out, rstd, inp, w, N, C, eps));
}

static void k_rmsnorm_bwd_x(float *dinp, const float *dout, const float *inp, const float *w,
                            const float *rstd, int N, int C)
{
    LAUNCH("rmsnorm_bwd_x",
           merak_cuda_launch_rmsnorm_bwd_x(STREAM, dinp, dout, inp, w, rstd, N, C));
}

static void k_rmsnorm_bwd_w(float *dw, const float *dout, const float *inp,
                            const float *rstd, int N, int C)
{
    LAUNCH("rmsnorm_bwd_w", merak_cuda_launch_rmsnorm_bwd_w(STREAM, dw, dout, inp, rstd, N, C));
}

/* out (N,O) = inp (N,K) @ w^T + b.  Column-major: out^T (O,N) = W (O,K) inp^T,
 * where the row-major w buffer is W^T (K,O) with ld K (so op A = T) and the
 * inp buffer is inp^T (K,N) with ld K. */
static void k_linear_fwd(float *out, const float *inp, const float *w, const float *b, int N,
                         int K, int O)
{
    if (merak_cuda_failed() || N <= 0 || O <= 0)
        return;
    if (K <= 0) { /* empty sum: out = b (or 0) */
        if (merak_cuda_memset(out, 0, (size_t)N * O * sizeof(float)) == 0 && b)
            LAUNCH("linear_fwd(bias)", merak_cuda_launch_bias_add(STREAM, out, b, N, O));
        return;
    }
    const float *eb = b && ptr_align(b) >= 16 ? b : NULL; /* epilogue bias */
    int bias_kernel = b && !eb;
    int rc = lt_matmul(1, 0, O, N, K, 1.0f, w, K, inp, K, out, O, 0.0f, eb, LT_ONE);
    if (rc == 1) { /* no algorithm with the epilogue: plain GEMM + bias kernel */
        rc = lt_matmul(1, 0, O, N, K, 1.0f, w, K, inp, K, out, O, 0.0f, NULL, LT_ONE);
        bias_kernel = 1;
    }
    if (rc == 0 && bias_kernel)
        LAUNCH("linear_fwd(bias)", merak_cuda_launch_bias_add(STREAM, out, b, N, O));
}

/* dinp (N,K) += dout (N,O) @ w (O,K).  Column-major: dinp^T (K,N) += W^T (K,O) dout^T (O,N). */
static void k_linear_bwd_x(float *dinp, const float *dout, const float *w, int N, int K, int O)
{
    if (merak_cuda_failed() || N <= 0 || K <= 0 || O <= 0)
        return;
    (void)lt_matmul(0, 0, K, N, O, 1.0f, w, K, dout, O, dinp, K, 1.0f, NULL, LT_ONE);
}

/* dw (O,K) += dout^T @ inp.  Column-major: dw^T (K,O) += inp^T (K,N) dout (N,O), where
 * the dout buffer is dout^T (O,N) with ld O (so op B = T).  db (O) += colsum(dout). */
static void k_linear_bwd_w(float *dw, float *db, const float *dout, const float *inp, int N,
                           int K, int O)
{
    if (merak_cuda_failed() || N <= 0 || O <= 0)
        return;
    if (K > 0 && dw)
        (void)lt_matmul(0, 1, K, O, N, 1.0f, inp, K, dout, O, dw, K, 1.0f, NULL, LT_ONE);
    if (db)
        LAUNCH("linear_bwd_w(db)", merak_cuda_launch_colsum(STREAM, db, dout, N, O));
}

/* ------------------------------------------------------------------ attention
 * Head dimensions up to FLASH_HD: the fused kernels of flash.h (forward:
 * out and lse; backward: dense dQ, dK, dV in scratch with D, each row's
 * sum of P dP), no T x T matrix.  Scratch: D (B,nh,T), dQ (B,T,nh*hd),
 * dK (B,T,nkv*hd), dV (B,T,nkv*hd).
 *
 * Wider heads (and decoding, below), as GEMMs, the CPU backend's
 * arithmetic (kernels/cpu):
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
 * Both end with dq += rot^T(dQ), dk += rot^T(dK), dv += dV (rot = RoPE,
 * or the identity). */

/* Row-major C (M,N) = alpha op(A) op(B) + beta C over bt.count products:
 * cuBLASLt, column-major, computes C^T = op(B)^T op(A)^T. */
static int rm_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   long long sa, const float *B, int ldb, long long sb, float beta, float *C,
                   int ldc, long long sc, int count)
{
    const lt_batch bt = {count, sb, sa, sc};
    return lt_matmul(tb, ta, N, M, K, alpha, B, ldb, A, lda, C, ldc, beta, NULL, bt);
}

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

static void k_attention_fwd(const merak_attn_shape *s, float *out, float *lse, float *qr,
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
    if (s->rope_theta > 0) {
        LAUNCH("attention_fwd(rope)", merak_cuda_launch_rope_fwd(STREAM, s, qr, kr, q, k));
        Q = qr, qs = C;
        K = kr, ks = nkv * hd;
    }
    if (hd <= FLASH_HD) {
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
static void k_attention_cached_fwd(const merak_attn_shape *s, int pos, int cap, float *out,
                                   float *kc, float *vc, const float *q, const float *k,
                                   const float *v, float *scratch)
{
    if (merak_cuda_failed() || !attn_shape_ok(s, "attention_cached_fwd") || s->B <= 0 || s->T <= 0 ||
        s->head_dim <= 0)
        return;
    const int T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int C = nh * hd, Ckv = nkv * hd, L = pos + T;
    /* the queries: rotated into scratch with RoPE, else q itself */
    const int rope = s->rope_theta > 0;
    float *S = scratch + (size_t)s->B * T * C;
    LAUNCH("attention_cached_fwd(append)",
           merak_cuda_launch_kv_append(STREAM, s, pos, cap, scratch, kc, vc, q, k, v));
    if (attn_scores(s, L, rope ? scratch : q, rope ? C : s->q_stride, kc, Ckv, (size_t)cap * Ckv, S) < 0)
        return;
    LAUNCH("attention_cached_fwd(softmax)",
           merak_cuda_launch_attn_softmax(STREAM, S, NULL, (size_t)s->B * nh * T, T, L, pos));
    (void)attn_mix(s, L, S, vc, Ckv, (size_t)cap * Ckv, out);
}

static size_t k_attention_cached_scratch_elems(const merak_attn_shape *s, int cap)
{
    const size_t B = (size_t)s->B, T = (size_t)s->T, nh = (size_t)s->n_head;
    return B * T * nh * (size_t)s->head_dim + B * nh * T * (size_t)cap;
}

static size_t k_attention_scratch_elems(const merak_attn_shape *s)
{
    const size_t B = (size_t)s->B, T = (size_t)s->T;
    const size_t grads = B * T * (size_t)(s->n_head + 2 * s->n_kv_head) * (size_t)s->head_dim;
    if (s->head_dim <= FLASH_HD)
        return B * (size_t)s->n_head * T + grads;
    return 2 * (size_t)s->n_head * T * T + grads;
}

static void k_attention_bwd(const merak_attn_shape *s, float *dq, float *dk, float *dv,
                            const float *dout, const float *lse, const float *qr,
                            const float *kr, const float *q, const float *k, const float *v,
                            float *scratch)
{
    if (merak_cuda_failed() || !attn_shape_ok(s, "attention_bwd") || s->B <= 0 || s->T <= 0 ||
        s->head_dim <= 0)
        return;
    const int B = s->B, T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int rep = nh / nkv, C = nh * hd, Ckv = nkv * hd, vs = s->v_stride;
    const int rope = s->rope_theta > 0;
    const float *Q = rope ? qr : q, *K = rope ? kr : k;
    const int qs = rope ? C : s->q_stride, ks = rope ? Ckv : s->k_stride;
    if (hd <= FLASH_HD) {
        float *D = scratch, *dQ = D + (size_t)B * nh * T;
        float *dK = dQ + (size_t)B * T * C, *dV = dK + (size_t)B * T * Ckv;
        LAUNCH("attention_bwd(fused)", merak_cuda_launch_flash_bwd(STREAM, s, dQ, dK, dV, D, dout,
                                                                   lse, Q, qs, K, ks, v));
        LAUNCH("attention_bwd(add)",
               merak_cuda_launch_attn_bwd_add(STREAM, s, dq, dk, dv, dQ, dK, dV));
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
           merak_cuda_launch_attn_bwd_add(STREAM, s, dq, dk, dv, dQ, dK, dV));
}

static void k_gelu_fwd(float *out, const float *inp, size_t n)
{
    LAUNCH("gelu_fwd", merak_cuda_launch_gelu_fwd(STREAM, out, inp, n));
}

static void k_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n)
{
    LAUNCH("gelu_bwd", merak_cuda_launch_gelu_bwd(STREAM, dinp, dout, inp, n));
}

static void k_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    LAUNCH("swiglu_fwd", merak_cuda_launch_swiglu_fwd(STREAM, out, gate, up, n));
}

static void k_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n)
{
    LAUNCH("swiglu_bwd", merak_cuda_launch_swiglu_bwd(STREAM, dgate, dup, dout, gate, up, n));
}

static void k_add_fwd(float *out, const float *a, const float *b, size_t n)
{
    LAUNCH("add_fwd", merak_cuda_launch_add_fwd(STREAM, out, a, b, n));
}

static void k_accumulate(float *dst, const float *src, size_t n)
{
    LAUNCH("accumulate", merak_cuda_launch_accumulate(STREAM, dst, src, n));
}

static void k_dropout_fwd(float *out, const float *inp, size_t n, float p, uint64_t seed,
                          uint64_t i0)
{
    LAUNCH("dropout_fwd", merak_cuda_launch_dropout_fwd(STREAM, out, inp, n, p, seed, i0));
}

static void k_dropout_bwd(float *dinp, const float *dout, size_t n, float p, uint64_t seed,
                          uint64_t i0)
{
    LAUNCH("dropout_bwd", merak_cuda_launch_dropout_bwd(STREAM, dinp, dout, n, p, seed, i0));
}

static void k_crossentropy_stats(float *lse, float *tlogit, const float *logits,
                                 const int32_t *targets, int N, int V, int v0)
{
    LAUNCH("crossentropy_stats",
           merak_cuda_launch_crossentropy_stats(STREAM, lse, tlogit, logits, targets, N, V, v0));
}

static void k_crossentropy_bwd(float *dlogits, const float *logits, const float *lse,
                               const int32_t *targets, int N, int V, int v0, float scale)
{
    LAUNCH("crossentropy_bwd", merak_cuda_launch_crossentropy_bwd(STREAM, dlogits, logits, lse,
                                                                  targets, N, V, v0, scale));
}

/* torch.optim.AdamW: the scalars in double on the host, as torch's
 * Python-float hyperparameters are, then rounded to float for the step;
 * one launch for all the spans. */
static void k_adamw(float *p, const float *g, float *m, float *v, const merak_adamw_span *spans,
                    int nspans, float lr, float beta1, float beta2, float eps, float weight_decay,
                    int t)
{
    const double b1 = beta1, b2 = beta2;
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float w1 = (float)(1.0 - b1), c2 = (float)(1.0 - b2);
    const float nstep = (float)(-(double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    LAUNCH("adamw", merak_cuda_launch_adamw(STREAM, p, g, m, v, spans, nspans, decay, w1, beta2,
                                            c2, nstep, bc2_sqrt, eps));
}

/* Synchronises: the scalar is copied back. */
static double k_sumsq(const float *x, size_t n)
{
    double r = NAN;
    LAUNCH("sumsq", merak_cuda_launch_sumsq(STREAM, cb.d_sumsq, x, n));
    if (merak_cuda_failed() || merak_cuda_memcpy_d2h(&r, cb.d_sumsq, sizeof r) != 0)
        return NAN;
    return r;
}

static void k_scale(float *x, size_t n, float s)
{
    LAUNCH("scale", merak_cuda_launch_scale(STREAM, x, n, s));
}

/* ------------------------------------------------------------------ memory hooks */

static merak_memcount cuda_count = MERAK_MEMCOUNT_INIT;

/* cudaMalloc memory is not zeroed; the table's contract is. */
static void *m_alloc(size_t bytes)
{
    void *p = merak_cuda_malloc(bytes);
    if (p && (merak_cuda_memset(p, 0, bytes) < 0 || merak_memcount_add(&cuda_count, p, bytes) < 0)) {
        merak_cuda_free(p);
        return NULL;
    }
    return p;
}

static void m_free(void *p)
{
    merak_memcount_remove(&cuda_count, p);
    merak_cuda_free(p);
}

static void m_memory(size_t *in_use, size_t *peak) { merak_memcount_get(&cuda_count, in_use, peak); }

/* A question, not an operation: a failure is "cannot tell", never the
 * backend's error. */
static int m_capacity(size_t *free_bytes, size_t *total_bytes)
{
    if (cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return -1;
}

static int m_zero(void *p, size_t bytes) { return merak_cuda_memset(p, 0, bytes); }

static int m_copy(void *dst, const void *src, size_t bytes, merak_copy_kind kind)
{
    switch (kind) {
    case MERAK_COPY_H2D: return merak_cuda_memcpy_h2d(dst, src, bytes);
    case MERAK_COPY_D2H: return merak_cuda_memcpy_d2h(dst, src, bytes);
    case MERAK_COPY_D2D: return merak_cuda_memcpy_d2d(dst, src, bytes);
    }
    return -1;
}

static const merak_kernels cuda_table = {
    .name = "cuda",
    .alloc = m_alloc,
    .free = m_free,
    .zero = m_zero,
    .copy = m_copy,
    .synchronize = merak_cuda_synchronize,
    .memory = m_memory,
    .capacity = m_capacity,
    .embedding_fwd = k_embedding_fwd,
    .embedding_bwd_w = k_embedding_bwd_w,
    .posemb_fwd = k_posemb_fwd,
    .posemb_bwd_w = k_posemb_bwd_w,
    .layernorm_fwd = k_layernorm_fwd,
    .layernorm_bwd_x = k_layernorm_bwd_x,
    .layernorm_bwd_w = k_layernorm_bwd_w,
    .rmsnorm_fwd = k_rmsnorm_fwd,
    .rmsnorm_bwd_x = k_rmsnorm_bwd_x,
    .rmsnorm_bwd_w = k_rmsnorm_bwd_w,
    .linear_fwd = k_linear_fwd,
    .linear_bwd_x = k_linear_bwd_x,
    .linear_bwd_w = k_linear_bwd_w,
    .attention_fwd = k_attention_fwd,
    .attention_bwd = k_attention_bwd,
    .attention_scratch_elems = k_attention_scratch_elems,
    .attention_cached_fwd = k_attention_cached_fwd,
    .attention_cached_scratch_elems = k_attention_cached_scratch_elems,
    .gelu_fwd = k_gelu_fwd,
    .gelu_bwd = k_gelu_bwd,
    .swiglu_fwd = k_swiglu_fwd,
    .swiglu_bwd = k_swiglu_bwd,
    .add_fwd = k_add_fwd,
    .accumulate = k_accumulate,
    .dropout_fwd = k_dropout_fwd,
    .dropout_bwd = k_dropout_bwd,
    .crossentropy_stats = k_crossentropy_stats,
    .crossentropy_bwd = k_crossentropy_bwd,
    .adamw = k_adamw,
    .sumsq = k_sumsq,
    .scale = k_scale,
};

/* ------------------------------------------------------------------ init */

/* dlopen's name of cuBLASLt: its soname, then the toolkit's directory. */
#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)
#define LT_SONAME "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

/* Resolves every cuBLASLt function the backend calls; 0, or -1 recorded. */
static int lt_load(void)
{
    void *h = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef MERAK_CUDA_LIBDIR
    if (!h)
        h = dlopen(MERAK_CUDA_LIBDIR "/" LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) {
        const char *why = dlerror();
        merak_cuda_record("loading " LT_SONAME, why ? why : "not found");
        return -1;
    }
#define LT_RESOLVE(name)                                                   \
    if (!(*(void **)&lt.name = dlsym(h, "cublasLt" #name))) {             \
        merak_cuda_record("loading " LT_SONAME, "cublasLt" #name " is missing");       \
        dlclose(h);                                                        \
        return -1;                                                         \
    }
    LT_FUNCTIONS(LT_RESOLVE)
#undef LT_RESOLVE
    return 0;   /* h stays open for the process */
}

static int backend_init(void)
{
    if (!merak_cuda_available() || lt_load() < 0)
        return -1;
    if (!lt_ok(lt.Create(&cb.lt), "cublasLtCreate"))
        return -1;
    if (!merak_cuda_ok(cudaMalloc(&cb.lt_ws, LT_WORKSPACE_BYTES), "cudaMalloc(cuBLASLt workspace)") ||
        !merak_cuda_ok(cudaMalloc((void **)&cb.d_sumsq, sizeof(double)), "cudaMalloc(sumsq)"))
        return -1;
    return 0;
}

const merak_kernels *merak_kernels_cuda(void)
{
    if (!cb.initialised) {
        cb.initialised = 1;
        cb.usable = backend_init() == 0;
    }
    return cb.usable ? &cuda_table : NULL;
}
