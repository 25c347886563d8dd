/*
 * cuda_glue.c - the CUDA backend's table (kernels.h): each entry a small
 * wrapper that enqueues a launcher of the .cu files, the linear layers on
 * cuBLASLt (cuda_blas.c), the attention entries of cuda_attention.c, and
 * the memory hooks.  The device, memory, stream and error state are in
 * cuda_mem.c; the device kernels are in one .cu file per op family
 * (cuda_common.cuh lists them).
 *
 * The linear bias uses the BIAS epilogue when a 16-byte-aligned bias and
 * an algorithm for it exist, else a separate (deterministic) kernel.
 */
#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpyAsync, streams, errors */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h> /* getenv */
#include <string.h>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"
#include "memcount.h"

/* The backend's state beside cuBLASLt's (cuda_blas.c) and the device's
 * (cuda_mem.c). */
static struct cuda_backend {
    int initialised, usable;
    double *d_sumsq; /* sumsq's device result */
} cb;

/* ------------------------------------------------------------------ the table */

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
                              int C, int acc)
{
    LAUNCH("layernorm_bwd_x",
           merak_cuda_launch_layernorm_bwd_x(STREAM, dinp, dout, inp, w, mean, rstd, N, C, acc));
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
                            const float *rstd, int N, int C, int acc)
{
    LAUNCH("rmsnorm_bwd_x",
           merak_cuda_launch_rmsnorm_bwd_x(STREAM, dinp, dout, inp, w, rstd, N, C, acc));
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
    const float *eb = b && merak_cuda_ptr_align(b) >= 16 ? b : NULL; /* epilogue bias */
    int bias_kernel = b && !eb;
    int rc = merak_cuda_gemm(1, 0, O, N, K, 1.0f, w, K, inp, K, out, O, 0.0f, eb, MERAK_CUDA_ONE);
    if (rc == 1) { /* no algorithm with the epilogue: plain GEMM + bias kernel */
        rc = merak_cuda_gemm(1, 0, O, N, K, 1.0f, w, K, inp, K, out, O, 0.0f, NULL, MERAK_CUDA_ONE);
        bias_kernel = 1;
    }
    if (rc == 0 && bias_kernel)
        LAUNCH("linear_fwd(bias)", merak_cuda_launch_bias_add(STREAM, out, b, N, O));
}

/* dinp (N,K) += dout (N,O) @ w (O,K) (acc 0: =, beta 0: cuBLASLt does not read C).
 * Column-major: dinp^T (K,N) += W^T (K,O) dout^T (O,N). */
static void k_linear_bwd_x(float *dinp, const float *dout, const float *w, int N, int K, int O, int acc)
{
    if (merak_cuda_failed() || N <= 0 || K <= 0)
        return;
    if (O <= 0) {
        if (!acc)
            (void)merak_cuda_memset(dinp, 0, (size_t)N * (size_t)K * sizeof(float));
        return;
    }
    (void)merak_cuda_gemm(0, 0, K, N, O, 1.0f, w, K, dout, O, dinp, K, acc ? 1.0f : 0.0f, NULL, MERAK_CUDA_ONE);
}

/* dw (O,K) += dout^T @ inp.  Column-major: dw^T (K,O) += inp^T (K,N) dout (N,O), where
 * the dout buffer is dout^T (O,N) with ld O (so op B = T).  db (O) += colsum(dout). */
static void k_linear_bwd_w(float *dw, float *db, const float *dout, const float *inp, int N,
                           int K, int O)
{
    if (merak_cuda_failed() || N <= 0 || O <= 0)
        return;
    if (K > 0 && dw)
        (void)merak_cuda_gemm(0, 1, K, O, N, 1.0f, inp, K, dout, O, dw, K, 1.0f, NULL, MERAK_CUDA_ONE);
    if (db)
        LAUNCH("linear_bwd_w(db)", merak_cuda_launch_colsum(STREAM, db, dout, N, O));
}

static void k_gelu_fwd(float *out, const float *inp, size_t n)
{
    LAUNCH("gelu_fwd", merak_cuda_launch_gelu_fwd(STREAM, out, inp, n));
}

static void k_gelu_bwd(float *dinp, const float *dout, const float *inp, size_t n, int acc)
{
    LAUNCH("gelu_bwd", merak_cuda_launch_gelu_bwd(STREAM, dinp, dout, inp, n, acc));
}

static void k_swiglu_fwd(float *out, const float *gate, const float *up, size_t n)
{
    LAUNCH("swiglu_fwd", merak_cuda_launch_swiglu_fwd(STREAM, out, gate, up, n));
}

static void k_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                         const float *up, size_t n, int acc)
{
    LAUNCH("swiglu_bwd", merak_cuda_launch_swiglu_bwd(STREAM, dgate, dup, dout, gate, up, n, acc));
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
                          uint64_t i0, int acc)
{
    LAUNCH("dropout_bwd", merak_cuda_launch_dropout_bwd(STREAM, dinp, dout, n, p, seed, i0, acc));
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
                    int t, uint16_t *p16)
{
    const double b1 = beta1, b2 = beta2;
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float w1 = (float)(1.0 - b1), c2 = (float)(1.0 - b2);
    const float nstep = (float)(-(double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    LAUNCH("adamw", merak_cuda_launch_adamw(STREAM, p, g, m, v, spans, nspans, decay, w1, beta2,
                                            c2, nstep, bc2_sqrt, eps, p16));
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

/* ---- bf16 storage (kernels.h): the linear layers' GEMMs with bf16
 * operands (products in FP32, a bf16 result rounded once) and the
 * embedding on bf16 rows; no scratch asked of the executor. */

/* out = bf16(inp @ w^T + b): the bias in the epilogue, else the fp32
 * product in the backend's scratch and a kernel adding the bias and
 * rounding (one rounding either way).  That fallback (K = 0, or no
 * epilogue algorithm: the executor's biases are 32-byte aligned) takes
 * N x O floats of merak_cuda_scratch, which nothing plans. */
static void k_linear16_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *w, const uint16_t *b,
                           int N, int K, int O, int ldo, float *scratch)
{
    (void)scratch;
    if (merak_cuda_failed() || N <= 0 || O <= 0)
        return;
    const uint16_t *eb = b && merak_cuda_ptr_align(b) >= 16 ? b : NULL;
    if (K > 0 && (!b || eb)) {
        const int rc = merak_cuda_gemm16(1, 0, O, N, K, 1.0f, w, K, inp, K, out, 1, ldo, 0.0f, eb);
        if (rc != 1)
            return;
    }
    const size_t bytes = (size_t)N * O * sizeof(float);
    float *acc = merak_cuda_scratch(bytes);
    if (!acc) {
        merak_cuda_record("linear16_fwd", "out of device memory for the product");
        return;
    }
    if (K <= 0 ? merak_cuda_memset(acc, 0, bytes) < 0
               : merak_cuda_gemm16(1, 0, O, N, K, 1.0f, w, K, inp, K, acc, 0, O, 0.0f, NULL) != 0)
        return;
    if (b || ldo != O)
        LAUNCH("linear16_fwd(bias)", merak_cuda_launch_bias_round16(STREAM, out, ldo, acc, b, N, O));
    else
        LAUNCH("linear16_fwd(round)", merak_cuda_launch_rows_to_bf16(STREAM, out, acc, (size_t)N, O, O));
}

/* dinp = bf16(dinp + dout @ w): beta 1 on the bf16 C, summed in fp32 (acc 0:
 * bf16(dout @ w), beta 0) */
static void k_linear16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N, int K,
                             int O, int ldo, int acc, float *scratch)
{
    (void)scratch;
    if (merak_cuda_failed() || N <= 0 || K <= 0)
        return;
    if (O <= 0) {
        if (!acc)
            (void)merak_cuda_memset(dinp, 0, (size_t)N * (size_t)K * sizeof(uint16_t));
        return;
    }
    (void)merak_cuda_gemm16(0, 0, K, N, O, 1.0f, w, K, dout, ldo, dinp, 1, K, acc ? 1.0f : 0.0f, NULL);
}

/* dw (float) += dout^T @ inp from bf16 operands; db += colsum(dout) */
static void k_linear16_bwd_w(float *dw, float *db, const uint16_t *dout, const uint16_t *inp, int N,
                             int K, int O, int ldo, float *scratch)
{
    (void)scratch;
    if (merak_cuda_failed() || N <= 0 || O <= 0)
        return;
    if (db && ldo != O) {   /* (kernels.h: padded rows have no bias) */
        merak_cuda_record("linear16_bwd_w", "a bias gradient over padded rows is not implemented");
        return;
    }
    if (K > 0 && dw)
        (void)merak_cuda_gemm16(0, 1, K, O, N, 1.0f, inp, K, dout, ldo, dw, 0, K, 1.0f, NULL);
    if (db)
        LAUNCH("linear16_bwd_w(db)", merak_cuda_launch_colsum16(STREAM, db, dout, N, O));
}

/* A linear layer with GELU after it (kernels.h linear16_gelu_fwd,
 * linear16_bwd_x_dgelu): cuBLASLt's GELU epilogues where they are on
 * (merak_cuda_set_gelu_epilogue) and take the buffers (16-byte aligned
 * rows of pre-activations and results), else the product and the GELU
 * kernel, as the two entries one by one. */
static int gelu_epi = -1;   /* -1: MERAK_CUDA_GELU_EPILOGUE not read yet */

void merak_cuda_set_gelu_epilogue(int on) { gelu_epi = on != 0; }
int merak_cuda_gelu_epilogue(void) { return gelu_epi > 0; }

static int gelu_rows_ok(const void *a, const void *b, int cols)
{
    return gelu_epi > 0 && cols % 8 == 0 && merak_cuda_ptr_align(a) >= 16 && merak_cuda_ptr_align(b) >= 16;
}

static void k_gelu16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float *scratch);
static void k_gelu16_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n, int acc,
                         float *scratch);

static void k_linear16_gelu_fwd(uint16_t *pre, uint16_t *out, const uint16_t *inp, const uint16_t *w,
                                const uint16_t *b, int N, int K, int O, float *scratch)
{
    if (merak_cuda_failed() || N <= 0 || O <= 0)
        return;
    if (K > 0 && gelu_rows_ok(pre, out, O) && (!b || merak_cuda_ptr_align(b) >= 16) &&
        merak_cuda_gemm16_gelu(1, 0, O, N, K, w, K, inp, K, out, O, b, pre, O) != 1)
        return;   /* done, or the error recorded */
    k_linear16_fwd(pre, inp, w, b, N, K, O, O, scratch);
    k_gelu16_fwd(out, pre, (size_t)N * O, scratch);
}

static void k_linear16_bwd_x_dgelu(uint16_t *dpre, const uint16_t *dout, const uint16_t *w, const uint16_t *pre,
                                   int N, int K, int O, int ldo, float *scratch)
{
    if (merak_cuda_failed() || N <= 0 || K <= 0)
        return;
    if (O > 0 && gelu_rows_ok(dpre, pre, K) && merak_cuda_gemm16_dgelu(0, 0, K, N, O, w, K, dout, ldo, dpre, K, pre, K) != 1)
        return;
    k_linear16_bwd_x(dpre, dout, w, N, K, O, ldo, 0, scratch);
    k_gelu16_bwd(dpre, dpre, pre, (size_t)N * K, 0, scratch);
}

static void k_embedding16_fwd(uint16_t *out, const int32_t *ids, const uint16_t *wte, int N, int C, int v0,
                              int V)
{
    LAUNCH("embedding16_fwd", merak_cuda_launch_embedding16_fwd(STREAM, out, ids, wte, N, C, v0, V));
}

static void k_embedding16_bwd_w(float *dwte, const uint16_t *dout, const int32_t *ids, int N, int C, int v0,
                                int V, float *scratch)
{
    (void)scratch;
    LAUNCH("embedding16_bwd_w", merak_cuda_launch_embedding16_bwd_w(STREAM, dwte, dout, ids, N, C, v0, V));
}

static void k_crossentropy16_stats(float *lse, float *tlogit, const uint16_t *logits, const int32_t *targets,
                                   int N, int V, int ld, int v0, float *scratch)
{
    (void)scratch;
    LAUNCH("crossentropy16_stats",
           merak_cuda_launch_crossentropy16_stats(STREAM, lse, tlogit, logits, targets, N, V, ld, v0));
}

static void k_crossentropy16_bwd(uint16_t *dlogits, const uint16_t *logits, const float *lse,
                                 const int32_t *targets, int N, int V, int ld, int v0, float scale, float *scratch)
{
    (void)scratch;
    LAUNCH("crossentropy16_bwd",
           merak_cuda_launch_crossentropy16_bwd(STREAM, dlogits, logits, lse, targets, N, V, ld, v0, scale));
}

static void k_crossentropy16_fused(float *lse, float *tlogit, uint16_t *logits, const int32_t *targets, int N,
                                   int V, int ld, int v0, float scale, float *scratch)
{
    (void)scratch;
    LAUNCH("crossentropy16_fused",
           merak_cuda_launch_crossentropy16_fused(STREAM, lse, tlogit, logits, targets, N, V, ld, v0, scale));
}

static void k_posemb16_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *wpe, int B, int T, int C,
                           float *scratch)
{
    (void)scratch;
    LAUNCH("posemb16_fwd", merak_cuda_launch_posemb16_fwd(STREAM, out, inp, wpe, B, T, C));
}

static void k_posemb16_bwd_w(float *dwpe, const uint16_t *dout, int B, int T, int C, float *scratch)
{
    (void)scratch;
    LAUNCH("posemb16_bwd_w", merak_cuda_launch_posemb16_bwd_w(STREAM, dwpe, dout, B, T, C));
}

static void k_gelu16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float *scratch)
{
    (void)scratch;
    LAUNCH("gelu16_fwd", merak_cuda_launch_gelu16_fwd(STREAM, out, inp, n));
}

static void k_gelu16_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n, int acc,
                         float *scratch)
{
    (void)scratch;
    LAUNCH("gelu16_bwd", merak_cuda_launch_gelu16_bwd(STREAM, dinp, dout, inp, n, acc));
}

static void k_swiglu16_fwd(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n, float *scratch)
{
    (void)scratch;
    LAUNCH("swiglu16_fwd", merak_cuda_launch_swiglu16_fwd(STREAM, out, gate, up, n));
}

static void k_swiglu16_bwd(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                           const uint16_t *up, size_t n, int acc, float *scratch)
{
    (void)scratch;
    LAUNCH("swiglu16_bwd", merak_cuda_launch_swiglu16_bwd(STREAM, dgate, dup, dout, gate, up, n, acc));
}

static void k_add16_fwd(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n, float *scratch)
{
    (void)scratch;
    LAUNCH("add16_fwd", merak_cuda_launch_add16_fwd(STREAM, out, a, b, n));
}

static void k_accumulate16(uint16_t *dst, const uint16_t *src, size_t n, float *scratch)
{
    (void)scratch;
    LAUNCH("accumulate16", merak_cuda_launch_accumulate16(STREAM, dst, src, n));
}

static void k_dropout16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float p, uint64_t seed, uint64_t i0,
                            float *scratch)
{
    (void)scratch;
    LAUNCH("dropout16_fwd", merak_cuda_launch_dropout16_fwd(STREAM, out, inp, n, p, seed, i0));
}

static void k_dropout16_bwd(uint16_t *dinp, const uint16_t *dout, size_t n, float p, uint64_t seed, uint64_t i0,
                            int acc, float *scratch)
{
    (void)scratch;
    LAUNCH("dropout16_bwd", merak_cuda_launch_dropout16_bwd(STREAM, dinp, dout, n, p, seed, i0, acc));
}

static void k_layernorm16_fwd(uint16_t *out, float *mean, float *rstd, const uint16_t *inp, const uint16_t *w,
                              const uint16_t *b, int N, int C, float eps, float *scratch)
{
    (void)scratch;
    LAUNCH("layernorm16_fwd", merak_cuda_launch_layernorm16_fwd(STREAM, out, mean, rstd, inp, w, b, N, C, eps));
}

static void k_layernorm16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                const float *mean, const float *rstd, int N, int C, int acc, float *scratch)
{
    (void)scratch;
    LAUNCH("layernorm16_bwd_x",
           merak_cuda_launch_layernorm16_bwd_x(STREAM, dinp, dout, inp, w, mean, rstd, N, C, acc));
}

static void k_layernorm16_bwd_w(float *dw, float *db, const uint16_t *dout, const uint16_t *inp, const float *mean,
                                const float *rstd, int N, int C, float *scratch)
{
    (void)scratch;
    LAUNCH("layernorm16_bwd_w",
           merak_cuda_launch_layernorm16_bwd_w(STREAM, dw, db, dout, inp, mean, rstd, N, C));
}

static void k_layernorm16_bwd(uint16_t *dinp, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *w, const float *mean, const float *rstd, int N, int C, int acc,
                              float *scratch)
{
    (void)scratch;
    LAUNCH("layernorm16_bwd",
           merak_cuda_launch_layernorm16_bwd(STREAM, dinp, dw, db, dout, inp, w, mean, rstd, N, C, acc));
}

static void k_rmsnorm16_fwd(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w, int N, int C,
                            float eps, float *scratch)
{
    (void)scratch;
    LAUNCH("rmsnorm16_fwd", merak_cuda_launch_rmsnorm16_fwd(STREAM, out, rstd, inp, w, N, C, eps));
}

static void k_rmsnorm16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                              const float *rstd, int N, int C, int acc, float *scratch)
{
    (void)scratch;
    LAUNCH("rmsnorm16_bwd_x", merak_cuda_launch_rmsnorm16_bwd_x(STREAM, dinp, dout, inp, w, rstd, N, C, acc));
}

static void k_rmsnorm16_bwd_w(float *dw, const uint16_t *dout, const uint16_t *inp, const float *rstd, int N, int C,
                              float *scratch)
{
    (void)scratch;
    LAUNCH("rmsnorm16_bwd_w", merak_cuda_launch_rmsnorm16_bwd_w(STREAM, dw, dout, inp, rstd, N, C));
}

static void k_rmsnorm16_bwd(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                            const uint16_t *w, const float *rstd, int N, int C, int acc, float *scratch)
{
    (void)scratch;
    LAUNCH("rmsnorm16_bwd", merak_cuda_launch_rmsnorm16_bwd(STREAM, dinp, dw, dout, inp, w, rstd, N, C, acc));
}

static void k_add_layernorm16_fwd(uint16_t *sum, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                  const uint16_t *b, const uint16_t *w, const uint16_t *bias, int N, int C, float eps,
                                  float *scratch)
{
    (void)scratch;
    LAUNCH("add_layernorm16_fwd",
           merak_cuda_launch_add_layernorm16_fwd(STREAM, sum, out, mean, rstd, a, b, w, bias, N, C, eps));
}

static void k_add_rmsnorm16_fwd(uint16_t *sum, uint16_t *out, float *rstd, const uint16_t *a, const uint16_t *b,
                                const uint16_t *w, int N, int C, float eps, float *scratch)
{
    (void)scratch;
    LAUNCH("add_rmsnorm16_fwd", merak_cuda_launch_add_rmsnorm16_fwd(STREAM, sum, out, rstd, a, b, w, N, C, eps));
}

static void k_round_bf16(float *x, size_t n)
{
    LAUNCH("round_bf16", merak_cuda_launch_round_bf16(STREAM, x, n));
}

/* bf16 storage: flat n elements as rows of at most 2^30 (the kernels take
 * an int width), four at a time over the multiple of 4 and the rest after. */
#define CONV_W ((size_t)1 << 30)

static void k_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t at = 0; at < n;) {
        const size_t w = n - at < CONV_W ? n - at : CONV_W, w4 = w / 4 * 4, w1 = w4 ? w4 : w;
        LAUNCH("to_bf16", merak_cuda_launch_rows_to_bf16(STREAM, dst + at, src + at, 1, (int)w1, (int)w1));
        at += w1;
    }
}

static void k_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    for (size_t at = 0; at < n;) {
        const size_t w = n - at < CONV_W ? n - at : CONV_W, w4 = w / 4 * 4, w1 = w4 ? w4 : w;
        LAUNCH("from_bf16", merak_cuda_launch_rows_from_bf16(STREAM, dst + at, (int)w1, src + at, 1, (int)w1));
        at += w1;
    }
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
    .mark = merak_cuda_mark,
    .mark_seconds = merak_cuda_mark_seconds,
    .marks_clear = merak_cuda_marks_clear,
    .round_bf16 = k_round_bf16,
    .to_bf16 = k_to_bf16,
    .from_bf16 = k_from_bf16,
    .set_products = merak_cuda_set_products,
    .bf16_scratch = 0,
    .linear16_fwd = k_linear16_fwd,
    .linear16_bwd_x = k_linear16_bwd_x,
    .linear16_bwd_w = k_linear16_bwd_w,
    .linear16_gelu_fwd = k_linear16_gelu_fwd,
    .linear16_bwd_x_dgelu = k_linear16_bwd_x_dgelu,
    .embedding16_fwd = k_embedding16_fwd,
    .embedding16_bwd_w = k_embedding16_bwd_w,
    .crossentropy16_stats = k_crossentropy16_stats,
    .crossentropy16_bwd = k_crossentropy16_bwd,
    .crossentropy16_fused = k_crossentropy16_fused,
    .posemb16_fwd = k_posemb16_fwd,
    .posemb16_bwd_w = k_posemb16_bwd_w,
    .gelu16_fwd = k_gelu16_fwd,
    .gelu16_bwd = k_gelu16_bwd,
    .swiglu16_fwd = k_swiglu16_fwd,
    .swiglu16_bwd = k_swiglu16_bwd,
    .add16_fwd = k_add16_fwd,
    .accumulate16 = k_accumulate16,
    .dropout16_fwd = k_dropout16_fwd,
    .dropout16_bwd = k_dropout16_bwd,
    .layernorm16_fwd = k_layernorm16_fwd,
    .layernorm16_bwd_x = k_layernorm16_bwd_x,
    .layernorm16_bwd_w = k_layernorm16_bwd_w,
    .rmsnorm16_fwd = k_rmsnorm16_fwd,
    .rmsnorm16_bwd_x = k_rmsnorm16_bwd_x,
    .rmsnorm16_bwd_w = k_rmsnorm16_bwd_w,
    .layernorm16_bwd = k_layernorm16_bwd,
    .rmsnorm16_bwd = k_rmsnorm16_bwd,
    .add_layernorm16_fwd = k_add_layernorm16_fwd,
    .add_rmsnorm16_fwd = k_add_rmsnorm16_fwd,
    .attention16_supported = merak_cuda_attention16_supported,
    .attention16_fwd = merak_cuda_attention16_fwd,
    .attention16_bwd = merak_cuda_attention16_bwd,
    .attention16_scratch_elems = merak_cuda_attention16_scratch_elems,
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
    .attention_fwd = merak_cuda_attention_fwd,
    .attention_bwd = merak_cuda_attention_bwd,
    .attention_scratch_elems = merak_cuda_attention_scratch_elems,
    .attention_cached_fwd = merak_cuda_attention_cached_fwd,
    .attention_cached_scratch_elems = merak_cuda_attention_cached_scratch_elems,
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

/* *v from environment variable name: 0 unset or "0", 1 for "1"; another
 * value is recorded and -1. */
static int env01(const char *name, int *v)
{
    const char *s = getenv(name);
    if (s && strcmp(s, "0") != 0 && strcmp(s, "1") != 0) {
        merak_cuda_record(name, "not 0 or 1");
        return -1;
    }
    *v = s && strcmp(s, "1") == 0;
    return 0;
}

static int backend_init(void)
{
    int tune = 0;
    if ((gelu_epi < 0 && env01("MERAK_CUDA_GELU_EPILOGUE", &gelu_epi) < 0) ||   /* (a test may have set it) */
        env01("MERAK_CUDA_GEMM_TUNE", &tune) < 0)
        return -1;
    if (tune)
        merak_cuda_set_gemm_tune(1);
    if (!merak_cuda_available() || merak_cuda_blas_open() < 0)
        return -1;
    if (!merak_cuda_ok(cudaMalloc((void **)&cb.d_sumsq, sizeof(double)), "cudaMalloc(sumsq)"))
        return -1;
    merak_cuda_mark_open();
    return 0;
}

const merak_kernels *merak_kernels_cuda_plan(void) { return &cuda_table; }

const merak_kernels *merak_kernels_cuda(void)
{
    if (!cb.initialised) {
        cb.initialised = 1;
        cb.usable = backend_init() == 0;
    }
    return cb.usable ? &cuda_table : NULL;
}
