/*
 * cuda_kernels.h - the CUDA backend of the op-kernel table (kernels.h).
 *
 * merak_kernels_cuda() returns a table whose entries take device pointers and
 * have the semantics documented in kernels.h (forward overwrites, backward
 * accumulates, NULL bias = no bias, bitwise run-to-run determinism: no float
 * atomics, every reduction has a fixed order that depends on the shapes only).
 *
 * Execution model: every kernel is enqueued on one stream the backend owns
 * (the legacy default stream), so the table's functions return before the
 * GPU is done, except sumsq, which copies its scalar back and therefore
 * synchronises.  The merak_cuda_memcpy_* helpers are ordered after the
 * kernels already enqueued.  The backend keeps global state (a cuBLASLt
 * handle, a workspace, a scratch arena) and must be driven by one host thread
 * at a time.
 *
 * Errors: the table's functions return void, so the first CUDA or cuBLASLt
 * error is remembered (and every later call becomes a no-op; sumsq returns
 * NaN).  Callers check merak_cuda_status() at convenient points (after a
 * step, after a test).  Nothing here prints or aborts.
 *
 * Built from cuda_glue.c (gcc: the table and the wrappers its entries
 * are), cuda_blas.c (gcc: cuBLASLt GEMMs), cuda_attention.c (gcc: the
 * attention around fused kernels or GEMMs), cuda_mem.c (gcc: device,
 * memory, stream, errors) and one .cu file per op family, embed.cu to
 * optim.cu (nvcc: the device kernels and their launchers).
 */
#ifndef MERAK_CUDA_KERNELS_H
#define MERAK_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How many devices the CUDA runtime sees (so nonzero when one is usable);
 * 0 without a driver (cudaGetDeviceCount fails).  Safe on any machine. */
int merak_cuda_available(void);

/* Makes `device` (an index among the visible devices) the backend's device.
 * Call it before the first merak_kernels_cuda(); returns 0 or -1 (error
 * recorded).  Without it the backend uses the CUDA runtime's current device
 * (device 0 unless the calling thread chose another). */
int merak_cuda_set_device(int device);

/* The CUDA table for the current device, or NULL if no device is usable or
 * the backend could not initialise (cuBLASLt handle, workspace).  The first
 * call initialises the backend; later calls return the same table. */
const merak_kernels *merak_kernels_cuda(void);
/* The table without the device (kernels.h merak_kernels_plan): for plans only. */
const merak_kernels *merak_kernels_cuda_plan(void);

/* 0 if no CUDA/cuBLASLt error has happened so far, else -1 with one line in
 * err (may be NULL) naming the first failing call.  Does not synchronise: an
 * error inside a running kernel shows up after the next synchronising call
 * (sumsq, merak_cuda_synchronize, a memcpy). */
int merak_cuda_status(char *err, size_t errlen);

/* Device memory helpers (cudaMalloc & co.).  They return NULL / -1 on
 * failure and also record the error for merak_cuda_status.  memcpy_h2d
 * returns once src may be reused: up to 1 MiB through page-locked staging
 * buffers without waiting for the device, more after the transfer. */
void *merak_cuda_malloc(size_t bytes);
void merak_cuda_free(void *dptr);
int merak_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
int merak_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
int merak_cuda_memcpy_d2d(void *dst, const void *src, size_t bytes);
int merak_cuda_memset(void *dst, int value, size_t bytes);
/* 1 if p points into device memory (cudaMalloc'ed), 0 for host memory. */
int merak_cuda_is_device_ptr(const void *p);
/* Waits for every kernel enqueued by the backend; returns 0 or -1. */
int merak_cuda_synchronize(void);
/* The table's device time (kernels.h mark): CUDA events recorded on the
 * stream, made as needed and kept for the process. */
int merak_cuda_mark(void);
double merak_cuda_mark_seconds(int a, int b);
void merak_cuda_marks_clear(void);
/* The stream the backend queues everything on (a cudaStream_t; NULL: the
 * legacy default stream), for communication that must follow its work. */
void *merak_cuda_stream_handle(void);
/* The current device's PCI bus id, hashed to 52 bits (exact in a double):
 * two ranks with the same number share a GPU.  -1 if it cannot tell. */
double merak_cuda_device_id(void);

/* The products' math (kernels.h merak_products; the table's set_products):
 * every later GEMM of the backend (the linear layers, attention's products)
 * in FP32 (CUBLAS_COMPUTE_32F, the default), TF32 (--dtype tf32, ..._FAST_
 * TF32) or BF16 (--dtype bf16, ..._FAST_16BF: the inputs rounded to bfloat16
 * on the tensor cores), accumulating and storing FP32.  merak_cuda_products
 * says which is on. */
void merak_cuda_set_products(merak_products p);
merak_products merak_cuda_products(void);

/* Whether the linear layers' bf16 entries with GELU (kernels.h
 * linear16_gelu_fwd, linear16_bwd_x_dgelu) take cuBLASLt's epilogues (on)
 * or a product and the GELU kernel (off, the default: the two ways'
 * speeds are compared in bench_cuda_ops before either is the default).
 * MERAK_CUDA_GELU_EPILOGUE (0 or 1) sets it when the backend starts. */
void merak_cuda_set_gelu_epilogue(int on);
int merak_cuda_gelu_epilogue(void);

/* Whether the linear layers' bf16 products choose their cuBLASLt
 * algorithm by timing (on): each new product's candidates (the heuristic's
 * up to 8, those it may keep) timed once on the call's operands, the
 * fastest kept for the process; off (the default), the heuristic's pick.
 * Timing may choose differently from run to run, and two algorithms may
 * differ in the last bits of a product, so a tuned run is not bit for bit
 * repeatable across processes.  MERAK_CUDA_GEMM_TUNE (0 or 1) sets it when
 * the backend starts. */
void merak_cuda_set_gemm_tune(int on);
int merak_cuda_gemm_tune(void);
/* A bf16 product as the linear layers' bf16 entries ask it (cuda_blas.c
 * gemm16: C (m,n) = op(A) op(B) + beta C [+ bias], column-major, bf16 A
 * and B, C bf16 if c16 else float) asked of each of cuBLASLt's heuristic
 * algorithms for it (at most max, best first: ms[i] the median of reps
 * timed runs, < 0 where it failed) on the buffers given (C is written: a
 * benchmark's), *picked the one the backend runs; nothing cached.
 * Returns how many were timed, or -1 on an error (recorded).  For
 * bench_cuda_ops: what timing the candidates would win over the
 * heuristic's choice. */
int merak_cuda_gemm16_probe(int ta, int tb, int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                            int ldb, void *C, int c16, int ldc, float beta, const void *bias, int reps, double *ms,
                            int max, int *picked);

/* Attention's ways (cuda_attention.c): the fused kernels of flash.h (head
 * dims up to FLASH_HD), cuBLASLt products around softmax kernels over T x T
 * buffers, or cuDNN's fused attention in bf16 (a build with it,
 * cudnn_attn.h).  AUTO, the default, is the rule of cuda_attention.c (with
 * BF16 products cuDNN's for the shapes it takes; else the products while
 * their buffers stay under MERAK_CUDA_ATTN_PRODUCTS_BYTES, except the
 * forward with FP32 products: fused); tests and benchmarks force one way
 * for the forward and one for the backward (CUDNN: both, the forward's
 * says), which must then be the way the scratch was sized for
 * (attention_scratch_elems asks after this call).  FUSED for a head wider
 * than FLASH_HD takes the products; CUDNN for a shape cuDNN does not take
 * follows AUTO's rule but for cuDNN. */
typedef enum merak_cuda_attn_path {
    MERAK_CUDA_ATTN_AUTO = 0,
    MERAK_CUDA_ATTN_FUSED,
    MERAK_CUDA_ATTN_PRODUCTS,
    MERAK_CUDA_ATTN_CUDNN   /* cuDNN's fused attention, bf16 (both ways at once) */
} merak_cuda_attn_path;
void merak_cuda_set_attention_paths(merak_cuda_attn_path fwd, merak_cuda_attn_path bwd);
/* The backward's T x T buffers (probabilities and their gradient, one
 * batch row at a time) the AUTO rule allows: 2 * n_head * T^2 floats. */
#define MERAK_CUDA_ATTN_PRODUCTS_BYTES ((size_t)1 << 30)

#ifdef MERAK_CUDA_INTERNAL
#include <cuda_runtime_api.h> /* cudaError_t, cudaStream_t */
/* ---------------------------------------------------------------------------
 * Internal: the launchers of the .cu files, called by cuda_glue.c and
 * cuda_attention.c, the device state they share (cuda_mem.c), the GEMMs
 * (cuda_blas.c) and the attention (cuda_attention.c).
 * Each enqueues its kernels on `stream` (a cudaStream_t) and returns the
 * cudaError_t of the launch (0 = cudaSuccess).  Shapes and semantics are
 * those of the kernels.h entry of the same name.
 * ------------------------------------------------------------------------- */

/* cuda_mem.c, which calls none of the others.  Scratch device memory
 * shared by the launchers: valid until the next call; NULL on failure.
 * Stream-ordered use only. */
void *merak_cuda_scratch(size_t bytes);
/* The backend's first error: record keeps the first (what: the call;
 * detail: why); ok records e unless it is cudaSuccess and says whether it
 * was; failed: one has been recorded (merak_cuda_status reads it). */
void merak_cuda_record(const char *what, const char *detail);
/* merak_kernels_cuda started the backend on a device (mark_open, once):
 * what may ask a library about this device (a plan alone may not). */
void merak_cuda_mark_open(void);
int merak_cuda_is_open(void);
int merak_cuda_ok(cudaError_t e, const char *what);
int merak_cuda_failed(void);
/* The stream every launch and copy is queued on. */
cudaStream_t merak_cuda_stream(void);
#ifndef __CUDACC__
/* For the host files that launch: a launcher's stream argument, and one
 * launch, enqueued unless an error already happened, its error recorded. */
#define STREAM ((void *)merak_cuda_stream())
#define LAUNCH(name, call)                                \
    do {                                                  \
        if (!merak_cuda_failed())                         \
            merak_cuda_ok((cudaError_t)(call), name);     \
    } while (0)
#endif

/* cuda_blas.c, which calls cuda_mem.c only: cuBLASLt.  open loads it
 * and makes its handle and workspace (0, or -1 recorded).  gemm: C (m,n)
 * = alpha op(A) op(B) + beta C [+ bias (m)], column-major, FP32;
 * bt.count such products at strides bt.sa, bt.sb, bt.sc (no bias then).
 * Returns 0, 1 when no algorithm exists for this combination (only asked
 * with a bias: the caller retries without), or -1 on an error (recorded).
 * ptr_align: the largest power of two (2 to 256) p is aligned to. */
typedef struct merak_cuda_batch {
    int count;
    long long sa, sb, sc;
} merak_cuda_batch;
#define MERAK_CUDA_ONE ((merak_cuda_batch){1, 0, 0, 0})
int merak_cuda_blas_open(void);
int merak_cuda_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                    const float *B, int ldb, float *C, int ldc, float beta, const float *bias,
                    merak_cuda_batch bt);
/* gemm16: the same (one product) with bf16 A and B (uint16_t bit
 * patterns) and C (and the bias) bf16 if c16, else float: products in
 * FP32 whatever set_products says, a bf16 C rounded once. */
int merak_cuda_gemm16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, void *C, int c16, int ldc, float beta, const void *bias);
/* gemm16_gelu, gemm16_dgelu: a bf16 C = op(A) op(B) (alpha 1, beta 0)
 * with GELU in cuBLASLt's epilogue, on the fp32 sum before C's one
 * rounding: gelu, C = gelu(AB [+ bias]) and pre = AB [+ bias] (rounded:
 * the pre-activations); dgelu, C = gelu'(pre) * AB.  pre: C's shape,
 * ldpre apart, 16-byte aligned.  Return as gemm (1: no algorithm for the
 * epilogue, the caller composes the two). */
int merak_cuda_gemm16_gelu(int ta, int tb, int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                           int ldb, uint16_t *C, int ldc, const uint16_t *bias, uint16_t *pre, int ldpre);
int merak_cuda_gemm16_dgelu(int ta, int tb, int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                            int ldb, uint16_t *C, int ldc, const uint16_t *pre, int ldpre);
int merak_cuda_ptr_align(const void *p);

/* cuda_attention.c, which calls cuda_blas.c and cuda_mem.c: the table's
 * attention entries (kernels.h). */
void merak_cuda_attention_fwd(const merak_attn_shape *s, float *out, float *lse, float *qr, float *kr,
                              const float *q, const float *k, const float *v, float *scratch);
void merak_cuda_attention_bwd(const merak_attn_shape *s, float *dq, float *dk, float *dv, const float *dout,
                              const float *out, const float *lse, const float *qr, const float *kr, const float *q,
                              const float *k, const float *v, float *scratch, int acc);
size_t merak_cuda_attention_scratch_elems(const merak_attn_shape *s);
void merak_cuda_attention_cached_fwd(const merak_attn_shape *s, int pos, int cap, float *out, float *kc, float *vc,
                                     const float *q, const float *k, const float *v, float *scratch);
size_t merak_cuda_attention_cached_scratch_elems(const merak_attn_shape *s, int cap);
/* ... on bf16 storage (cuDNN's way only: attention16_supported says where) */
int merak_cuda_attention16_supported(const merak_attn_shape *s);
void merak_cuda_attention16_fwd(const merak_attn_shape *s, uint16_t *out, float *lse, float *qr, float *kr,
                                const uint16_t *q, const uint16_t *k, const uint16_t *v, float *ascratch,
                                float *scratch);
void merak_cuda_attention16_bwd(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                const uint16_t *dout, const uint16_t *out, const float *lse, const float *qr,
                                const float *kr, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                float *ascratch, float *scratch, int acc);
size_t merak_cuda_attention16_scratch_elems(const merak_attn_shape *s);

int merak_cuda_launch_embedding_fwd(void *stream, float *out, const int32_t *ids,
                                    const float *wte, int N, int C, int v0, int V);
int merak_cuda_launch_embedding_bwd_w(void *stream, float *dwte, const float *dout,
                                      const int32_t *ids, int N, int C, int v0, int V);
/* the same on bf16 storage (kernels.h embedding16_fwd, embedding16_bwd_w) */
int merak_cuda_launch_embedding16_fwd(void *stream, uint16_t *out, const int32_t *ids,
                                      const uint16_t *wte, int N, int C, int v0, int V);
int merak_cuda_launch_embedding16_bwd_w(void *stream, float *dwte, const uint16_t *dout,
                                        const int32_t *ids, int N, int C, int v0, int V);
int merak_cuda_launch_posemb_fwd(void *stream, float *out, const float *inp,
                                 const float *wpe, int B, int T, int C);
int merak_cuda_launch_posemb_bwd_w(void *stream, float *dwpe, const float *dout,
                                   int B, int T, int C);
/* the same on bf16 storage (kernels.h posemb16_*) */
int merak_cuda_launch_posemb16_fwd(void *stream, uint16_t *out, const uint16_t *inp, const uint16_t *wpe, int B,
                                   int T, int C);
int merak_cuda_launch_posemb16_bwd_w(void *stream, float *dwpe, const uint16_t *dout, int B, int T, int C);
int merak_cuda_launch_layernorm_fwd(void *stream, float *out, float *mean, float *rstd,
                                    const float *inp, const float *w, const float *b,
                                    int N, int C, float eps);
int merak_cuda_launch_layernorm_bwd_x(void *stream, float *dinp, const float *dout,
                                      const float *inp, const float *w,
                                      const float *mean, const float *rstd, int N, int C, int acc);
int merak_cuda_launch_layernorm_bwd_w(void *stream, float *dw, float *db,
                                      const float *dout, const float *inp,
                                      const float *mean, const float *rstd, int N, int C);
int merak_cuda_launch_rmsnorm_fwd(void *stream, float *out, float *rstd, const float *inp,
                                  const float *w, int N, int C, float eps);
int merak_cuda_launch_rmsnorm_bwd_x(void *stream, float *dinp, const float *dout,
                                    const float *inp, const float *w, const float *rstd,
                                    int N, int C, int acc);
int merak_cuda_launch_rmsnorm_bwd_w(void *stream, float *dw, const float *dout,
                                    const float *inp, const float *rstd, int N, int C);
/* the norms on bf16 storage (kernels.h layernorm16_*, rmsnorm16_*) */
int merak_cuda_launch_layernorm16_fwd(void *stream, uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                                      const uint16_t *w, const uint16_t *b, int N, int C, float eps);
int merak_cuda_launch_layernorm16_bwd_x(void *stream, uint16_t *dinp, const uint16_t *dout, const uint16_t *inp,
                                        const uint16_t *w, const float *mean, const float *rstd, int N, int C,
                                        int acc);
int merak_cuda_launch_layernorm16_bwd_w(void *stream, float *dw, float *db, const uint16_t *dout,
                                        const uint16_t *inp, const float *mean, const float *rstd, int N, int C);
/* sum = a + b (bf16, rounded), then the norm of sum, as add16_fwd and
 * layernorm16_fwd (rmsnorm16_fwd) give them: one pass where the row
 * kernels take the shape, else the two */
int merak_cuda_launch_add_layernorm16_fwd(void *stream, uint16_t *sum, uint16_t *out, float *mean, float *rstd,
                                          const uint16_t *a, const uint16_t *b, const uint16_t *w,
                                          const uint16_t *bias, int N, int C, float eps);
int merak_cuda_launch_add_rmsnorm16_fwd(void *stream, uint16_t *sum, uint16_t *out, float *rstd, const uint16_t *a,
                                        const uint16_t *b, const uint16_t *w, int N, int C, float eps);
/* bwd_x and bwd_w in one call (dw, db NULL: not wanted): one pass over
 * the rows where the row kernels take the shape (the same dinp bits as
 * bwd_x; the weight gradients' sums in another order), else the two */
int merak_cuda_launch_layernorm16_bwd(void *stream, uint16_t *dinp, float *dw, float *db, const uint16_t *dout,
                                      const uint16_t *inp, const uint16_t *w, const float *mean, const float *rstd,
                                      int N, int C, int acc);
int merak_cuda_launch_rmsnorm16_fwd(void *stream, uint16_t *out, float *rstd, const uint16_t *inp,
                                    const uint16_t *w, int N, int C, float eps);
int merak_cuda_launch_rmsnorm16_bwd_x(void *stream, uint16_t *dinp, const uint16_t *dout, const uint16_t *inp,
                                      const uint16_t *w, const float *rstd, int N, int C, int acc);
int merak_cuda_launch_rmsnorm16_bwd_w(void *stream, float *dw, const uint16_t *dout, const uint16_t *inp,
                                      const float *rstd, int N, int C);
int merak_cuda_launch_rmsnorm16_bwd(void *stream, uint16_t *dinp, float *dw, const uint16_t *dout,
                                    const uint16_t *inp, const uint16_t *w, const float *rstd, int N, int C, int acc);
/* out (N,O) += b[o] (the linear bias when the cuBLASLt epilogue is not used) */
int merak_cuda_launch_bias_add(void *stream, float *out, const float *b, int N, int O);
/* db (O) += column sums of dout (N,O) */
int merak_cuda_launch_colsum(void *stream, float *db, const float *dout, int N, int O);
/* bf16 storage: db (O) += column sums of bf16 dout (N,O), as colsum's
 * order; out (N,O), rows ldo apart, = bf16(acc + b[o]) from dense fp32 acc
 * and a bf16 bias (the linear bias when no epilogue takes it: one rounding;
 * b NULL: acc rounded) */
int merak_cuda_launch_colsum16(void *stream, float *db, const uint16_t *dout, int N, int O);
int merak_cuda_launch_bias_round16(void *stream, uint16_t *out, int ldo, const float *acc, const uint16_t *b,
                                   int N, int O);
/* Attention's pointwise parts; its GEMMs are cuBLASLt's (cuda_glue.c).
 * rope_fwd: qr, kr = the RoPE rotation of q, k (strides of s).
 * attn_softmax: rows of L scores -> causal softmax rows (row r is query
 * pos + r % T; zeros after it; training has L = T, pos = 0), and each
 * row's log-sum-exp into lse unless NULL.  attn_probs: rows of T scores ->
 * the same probabilities, rebuilt from lse (the backward).  kv_append
 * (decoding): rows [pos, pos+T) of the caches kc, vc (B,cap,nkv*hd) from
 * k and v, and with RoPE, k rotated and Q (B,T,nh*hd) = q rotated (Q is
 * not written without it).  attn_dsoftmax: dS (holding dP) :=
 * P (dP - rowsum(P dP)) scale, causal.  attn_bwd_add: dq += rot^T(dQ),
 * dk += rot^T(dK), dv += dV from dense (B,T,heads*hd) gradients (acc 0:
 * = 0 + ..., dq, dk, dv unread). */
int merak_cuda_launch_rope_fwd(void *stream, const merak_attn_shape *s, float *qr, float *kr,
                               const float *q, const float *k);
int merak_cuda_launch_attn_softmax(void *stream, float *P, float *lse, size_t rows, int T, int L,
                                   int pos);
int merak_cuda_launch_attn_probs(void *stream, float *P, const float *lse, size_t rows, int T);
int merak_cuda_launch_kv_append(void *stream, const merak_attn_shape *s, int pos, int cap,
                                float *Q, float *kc, float *vc, const float *q, const float *k,
                                const float *v);
int merak_cuda_launch_attn_dsoftmax(void *stream, float *dS, const float *P, size_t rows,
                                    int T, float scale);
int merak_cuda_launch_attn_bwd_add(void *stream, const merak_attn_shape *s, float *dq,
                                   float *dk, float *dv, const float *dQ, const float *dK,
                                   const float *dV, int acc);
/* For cuDNN's attention (bfloat16 in and out): attn_bwd_add_bf16 is
 * attn_bwd_add from bfloat16 dQ, dK, dV, attn_bwd_add16 into bfloat16 dq,
 * dk, dv too (each sum rounded); rope16_fwd is rope_fwd from bfloat16 q,
 * k; rows_to_bf16: dst (rows, w) dense
 * bfloat16 = src's rows (stride ss) rounded to nearest, ties to even;
 * rows_from_bf16: dst's rows (stride ds) = src (rows, w), exactly. */
int merak_cuda_launch_attn_bwd_add_bf16(void *stream, const merak_attn_shape *s, float *dq,
                                        float *dk, float *dv, const uint16_t *dQ, const uint16_t *dK,
                                        const uint16_t *dV, int acc);
int merak_cuda_launch_attn_bwd_add16(void *stream, const merak_attn_shape *s, uint16_t *dq, uint16_t *dk,
                                    uint16_t *dv, const uint16_t *dQ, const uint16_t *dK, const uint16_t *dV,
                                    int acc);
int merak_cuda_launch_rope16_fwd(void *stream, const merak_attn_shape *s, float *qr, float *kr,
                                 const uint16_t *q, const uint16_t *k);
int merak_cuda_launch_rows_to_bf16(void *stream, uint16_t *dst, const float *src, size_t rows, int w,
                                   int ss);
int merak_cuda_launch_rows_from_bf16(void *stream, float *dst, int ds, const uint16_t *src, size_t rows,
                                     int w);
/* The fused attention (flash.h), head_dim <= FLASH_HD; q, k are the
 * rotated copies with RoPE (row strides qs, ks), v has s->v_stride.
 * flash_fwd: out (B,T,nh*hd) and lse (B,nh,T).  flash_bwd: dense dQ
 * (B,T,nh*hd), dK and dV (B,T,nkv*hd) overwritten, with respect to the
 * q and k given; D (B,nh,T) is its working space. */
int merak_cuda_launch_flash_fwd(void *stream, const merak_attn_shape *s, float *out, float *lse,
                                const float *q, int qs, const float *k, int ks, const float *v);
int merak_cuda_launch_flash_bwd(void *stream, const merak_attn_shape *s, float *dQ, float *dK,
                                float *dV, float *D, const float *dout, const float *lse,
                                const float *q, int qs, const float *k, int ks, const float *v);
int merak_cuda_launch_gelu_fwd(void *stream, float *out, const float *inp, size_t n);
int merak_cuda_launch_gelu_bwd(void *stream, float *dinp, const float *dout,
                               const float *inp, size_t n, int acc);
int merak_cuda_launch_swiglu_fwd(void *stream, float *out, const float *gate,
                                 const float *up, size_t n);
int merak_cuda_launch_swiglu_bwd(void *stream, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n, int acc);
int merak_cuda_launch_add_fwd(void *stream, float *out, const float *a, const float *b,
                              size_t n);
int merak_cuda_launch_accumulate(void *stream, float *dst, const float *src, size_t n);
int merak_cuda_launch_dropout_fwd(void *stream, float *out, const float *inp, size_t n,
                                  float p, uint64_t seed, uint64_t i0);
int merak_cuda_launch_dropout_bwd(void *stream, float *dinp, const float *dout, size_t n,
                                  float p, uint64_t seed, uint64_t i0, int acc);
/* the elementwise ops on bf16 storage (kernels.h gelu16_fwd, ...) */
int merak_cuda_launch_gelu16_fwd(void *stream, uint16_t *out, const uint16_t *inp, size_t n);
int merak_cuda_launch_gelu16_bwd(void *stream, uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n,
                                 int acc);
int merak_cuda_launch_swiglu16_fwd(void *stream, uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n);
int merak_cuda_launch_swiglu16_bwd(void *stream, uint16_t *dgate, uint16_t *dup, const uint16_t *dout,
                                   const uint16_t *gate, const uint16_t *up, size_t n, int acc);
int merak_cuda_launch_add16_fwd(void *stream, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
int merak_cuda_launch_accumulate16(void *stream, uint16_t *dst, const uint16_t *src, size_t n);
int merak_cuda_launch_dropout16_fwd(void *stream, uint16_t *out, const uint16_t *inp, size_t n, float p,
                                    uint64_t seed, uint64_t i0);
int merak_cuda_launch_dropout16_bwd(void *stream, uint16_t *dinp, const uint16_t *dout, size_t n, float p,
                                    uint64_t seed, uint64_t i0, int acc);
int merak_cuda_launch_crossentropy_stats(void *stream, float *lse, float *tlogit,
                                         const float *logits, const int32_t *targets, int N,
                                         int V, int v0);
int merak_cuda_launch_crossentropy_bwd(void *stream, float *dlogits, const float *logits,
                                       const float *lse, const int32_t *targets, int N, int V,
                                       int v0, float scale);
/* the same on bf16 logits, rows ld apart (kernels.h crossentropy16_*) */
int merak_cuda_launch_crossentropy16_stats(void *stream, float *lse, float *tlogit, const uint16_t *logits,
                                           const int32_t *targets, int N, int V, int ld, int v0);
int merak_cuda_launch_crossentropy16_bwd(void *stream, uint16_t *dlogits, const uint16_t *logits,
                                         const float *lse, const int32_t *targets, int N, int V, int ld, int v0,
                                         float scale);
/* ... both in one pass, the gradient over the logits (a block's shared
 * memory holds its row; rows too long for it take the two kernels) */
int merak_cuda_launch_crossentropy16_fused(void *stream, float *lse, float *tlogit, uint16_t *logits,
                                           const int32_t *targets, int N, int V, int ld, int v0, float scale);
/* One AdamW step over the spans (device memory), a block each; the scalars
 * are computed on the host as torch does (decay for the spans with decay set):
 * decay = 1-lr*wd, w1 = 1-beta1, c2 = 1-beta2, nstep = -lr/(1-beta1^t),
 * bc2_sqrt = sqrt(1-beta2^t); p16: NULL or the bf16 compute copies, each
 * updated element rounded into it. */
int merak_cuda_launch_adamw(void *stream, float *p, const float *g, float *m, float *v,
                            const merak_adamw_span *spans, int nspans, float decay, float w1,
                            float beta2, float c2, float nstep, float bc2_sqrt, float eps, uint16_t *p16);
/* *result (a device double) = sum of x^2, in a fixed order. */
int merak_cuda_launch_sumsq(void *stream, double *result, const float *x, size_t n);
int merak_cuda_launch_scale(void *stream, float *x, size_t n, float s);
/* x (any alignment) = its nearest bf16 values (kernels.h round_bf16) */
int merak_cuda_launch_round_bf16(void *stream, float *x, size_t n);
#endif /* MERAK_CUDA_INTERNAL */

#ifdef __cplusplus
}
#endif

#endif /* MERAK_CUDA_KERNELS_H */
