/*
 * kernels.h - the op kernels behind one table of function pointers per backend.
 *
 * Every op of the model graph (runtime/graph) maps onto a few entries of this
 * table: a forward, an input-gradient part (bwd_x) and a weight-gradient part
 * (bwd_w).  Zero-bubble schedules run the two backward parts at different
 * times, so they never depend on each other.
 *
 * Conventions, for every backend:
 *   - N is the number of token rows (B*T); tensors are row-major, contiguous
 *     unless a stride is given.
 *   - Forward kernels overwrite their outputs.
 *   - Backward kernels ACCUMULATE (+=) into every gradient they are given:
 *     a tensor read by several ops gets the sum of their contributions, and
 *     weight gradients add up over micro-batches.  Callers zero them.
 *     The input-gradient entries that take `acc` (the norms, linear,
 *     attention, GELU, SwiGLU, dropout)
 *     add when acc is 1; when it is 0 they write the gradient as if it had
 *     been zero (0 + the contribution, the same bits) without reading it,
 *     so its first writer spares the caller a pass zeroing it and itself
 *     a pass reading the zeros.
 *   - A NULL bias (or bias gradient) means "no bias".
 *   - Results are deterministic: the same inputs give bitwise-identical
 *     outputs whatever the thread count.
 *   - Pointers are host pointers for the CPU backend, device pointers for CUDA.
 *   - Memory the kernels work on comes from the table's own memory hooks
 *     (alloc, zero, copy, ...), so code above this layer never touches it
 *     with libc and runs unchanged on any backend.
 *
 * Nothing here knows about MPI, graphs or files.
 */
#ifndef MERAK_KERNELS_H
#define MERAK_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "merak/rope.h"
#include "merak/status.h"

/* Shape of one causal attention call (multi-head or grouped-query). */
typedef struct merak_attn_shape {
    int B, T;           /* batch rows, sequence length */
    int n_head;         /* query heads */
    int n_kv_head;      /* key/value heads; n_head % n_kv_head == 0 */
    int head_dim;       /* hd */
    /* Row strides (elements between token rows) of q, k, v and of their
     * gradients.  For a fused GPT-2 qkv tensor [B,T,(nh+2*nkv)*hd] the three
     * pointers point into one row and all strides are (nh+2*nkv)*hd. */
    int q_stride, k_stride, v_stride;
    /* RoPE (Hugging Face rotate_half convention; rope.h computes each
     * frequency); rope.theta 0 = no rotary. */
    merak_rope rope;
} merak_attn_shape;

/* A stretch of one AdamW step: n elements of p and g from element at, of
 * m and v from element m_at (the moments may cover a shard of p), with
 * weight decay iff decay.  A step over many parameters is one call over
 * their spans (one launch on a GPU, which runs a block per span). */
typedef struct merak_adamw_span {
    size_t at, m_at, n;
    int decay;
} merak_adamw_span;

/*
 * One backend's kernels for one element type.  REAL is float for the table the
 * runtime uses; the CPU backend also instantiates a double-precision copy for
 * gradient checks (see cpu/cpu_kernels.h).
 */
#define MERAK_KERNEL_TABLE(REAL)                                                   \
    /* out (N,C) = wte[ids - v0] ; ids (N), wte (V,C) rows v0.. of the          \
     * vocabulary (a tensor-parallel shard); ids outside give zero rows */        \
    void (*embedding_fwd)(REAL *out, const int32_t *ids, const REAL *wte,          \
                          int N, int C, int v0, int V);                            \
    /* dwte (V,C) += scatter of dout (N,C) by ids - v0, in-shard ids only */      \
    void (*embedding_bwd_w)(REAL *dwte, const REAL *dout, const int32_t *ids,      \
                            int N, int C, int v0, int V);                          \
    /* out (B,T,C) = inp + wpe[t] ; wpe (P>=T, C).  bwd_x is accumulate(). */      \
    void (*posemb_fwd)(REAL *out, const REAL *inp, const REAL *wpe,                \
                       int B, int T, int C);                                       \
    /* dwpe[t] += sum_b dout[b,t] */                                               \
    void (*posemb_bwd_w)(REAL *dwpe, const REAL *dout, int B, int T, int C);       \
    /* out (N,C) = (inp-mean)*rstd*w + b ; saves mean (N), rstd (N) */             \
    void (*layernorm_fwd)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,      \
                          const REAL *w, const REAL *b, int N, int C, float eps);  \
    void (*layernorm_bwd_x)(REAL *dinp, const REAL *dout, const REAL *inp,         \
                            const REAL *w, const REAL *mean, const REAL *rstd,     \
                            int N, int C, int acc);                                \
    void (*layernorm_bwd_w)(REAL *dw, REAL *db, const REAL *dout,                  \
                            const REAL *inp, const REAL *mean, const REAL *rstd,   \
                            int N, int C);                                         \
    /* out (N,C) = inp * rstd * w, rstd = 1/sqrt(mean(inp^2)+eps) ; saves rstd */ \
    void (*rmsnorm_fwd)(REAL *out, REAL *rstd, const REAL *inp, const REAL *w,     \
                        int N, int C, float eps);                                  \
    void (*rmsnorm_bwd_x)(REAL *dinp, const REAL *dout, const REAL *inp,           \
                          const REAL *w, const REAL *rstd, int N, int C, int acc); \
    void (*rmsnorm_bwd_w)(REAL *dw, const REAL *dout, const REAL *inp,             \
                          const REAL *rstd, int N, int C);                         \
    /* out (N,O) = inp (N,K) @ w^T + b ; w (O,K) as nn.Linear, b (O) or NULL */     \
    void (*linear_fwd)(REAL *out, const REAL *inp, const REAL *w, const REAL *b,   \
                       int N, int K, int O);                                       \
    /* dinp (N,K) += dout (N,O) @ w (O,K); acc 0: dinp = dout @ w */             \
    void (*linear_bwd_x)(REAL *dinp, const REAL *dout, const REAL *w,              \
                         int N, int K, int O, int acc);                            \
    /* dw (O,K) += dout^T @ inp ; db (O) += colsum(dout) if db != NULL */           \
    void (*linear_bwd_w)(REAL *dw, REAL *db, const REAL *dout, const REAL *inp,    \
                         int N, int K, int O);                                     \
    /* Causal softmax attention.  out (B,T,nh*hd); lse (B,nh,T) saved: each  \
     * query row's log-sum-exp of its scaled scores, from which the backward  \
     * rebuilds the probabilities (no T x T matrix is kept from forward to     \
     * backward).  With rope.theta > 0, qr (B,T,nh*hd) and kr (B,T,nkv*hd)     \
     * receive the rotated q and k (saved for backward); otherwise they are    \
     * unused (NULL).  Scores are scaled by 1/sqrt(hd); query head h uses kv   \
     * head h / (nh/nkv).  scratch holds attention_scratch_elems(s) elements, \
     * for the forward and the backward alike. */                              \
    void (*attention_fwd)(const merak_attn_shape *s, REAL *out, REAL *lse,         \
                          REAL *qr, REAL *kr, const REAL *q, const REAL *k,        \
                          const REAL *v, REAL *scratch);                           \
    /* dq, dk, dv have the strides of q, k, v.  out and lse are the          \
     * forward's (out (B,T,nh*hd): cuDNN's backward reads it; the other       \
     * kernels rebuild what they need from lse).  acc 0: dq, dk, dv written  \
     * (the rows' columns of q, k and v only). */                             \
    void (*attention_bwd)(const merak_attn_shape *s, REAL *dq, REAL *dk,           \
                          REAL *dv, const REAL *dout, const REAL *out,             \
                          const REAL *lse, const REAL *qr, const REAL *kr,         \
                          const REAL *q, const REAL *k, const REAL *v,             \
                          REAL *scratch, int acc);                                 \
    size_t (*attention_scratch_elems)(const merak_attn_shape *s);                  \
    /* Decoding (forward only): causal attention of s->T new positions       \
     * [pos, pos+T) of each batch row against a key/value cache.  kc, vc      \
     * (B, cap, nkv*hd) hold the keys (rotated with RoPE) and values of       \
     * positions [0, pos); this writes rows [pos, pos+T) of them from k and   \
     * v, and out (B,T,nh*hd), query t attending positions [0, pos+t].        \
     * pos + T <= cap.  The result equals attention_fwd's over positions      \
     * [0, pos+T) in those rows, up to the order of float sums.  scratch      \
     * holds attention_cached_scratch_elems(s, cap) elements. */             \
    void (*attention_cached_fwd)(const merak_attn_shape *s, int pos, int cap,      \
                                 REAL *out, REAL *kc, REAL *vc, const REAL *q,     \
                                 const REAL *k, const REAL *v, REAL *scratch);     \
    size_t (*attention_cached_scratch_elems)(const merak_attn_shape *s, int cap);  \
    /* GELU, tanh approximation (GPT-2's gelu_new) */                             \
    void (*gelu_fwd)(REAL *out, const REAL *inp, size_t n);                        \
    void (*gelu_bwd)(REAL *dinp, const REAL *dout, const REAL *inp, size_t n,      \
                     int acc);                                                     \
    /* out = silu(gate) * up */                                                    \
    void (*swiglu_fwd)(REAL *out, const REAL *gate, const REAL *up, size_t n);     \
    void (*swiglu_bwd)(REAL *dgate, REAL *dup, const REAL *dout,                   \
                       const REAL *gate, const REAL *up, size_t n, int acc);       \
    /* out = a + b */                                                              \
    void (*add_fwd)(REAL *out, const REAL *a, const REAL *b, size_t n);            \
    /* dst += src (the input-gradient of add and of posemb) */                     \
    void (*accumulate)(REAL *dst, const REAL *src, size_t n);                      \
    /* Inverted dropout with a counter-based mask: element i is kept iff         \
     * hash(seed, i0 + i) >= p, so backward regenerates the same mask and a     \
     * tensor's rows can be run in pieces (i0: the piece's first element). */   \
    void (*dropout_fwd)(REAL *out, const REAL *inp, size_t n, float p,             \
                        uint64_t seed, uint64_t i0);                               \
    void (*dropout_bwd)(REAL *dinp, const REAL *dout, size_t n, float p,           \
                        uint64_t seed, uint64_t i0, int acc);                      \
    /* Cross-entropy over logits (N,V), columns v0.. of the vocabulary (a     \
     * tensor-parallel shard).  lse (N) = logsumexp over the shard; tlogit (N) \
     * = logits[n][targets[n]-v0] if in the shard, else 0; target < 0 is      \
     * ignored (both 0).  The loss of a row is lse - tlogit when one shard     \
     * holds the whole vocabulary. */                                          \
    void (*crossentropy_stats)(REAL *lse, REAL *tlogit, const REAL *logits,        \
                               const int32_t *targets, int N, int V, int v0);      \
    /* dlogits += (exp(logits - lse[n]) - onehot(targets[n]-v0)) * scale, lse      \
     * the logsumexp over the whole vocabulary; target < 0 rows untouched.         \
     * In place (dlogits == logits) the gradient replaces the logits, as +=        \
     * on zeroed dlogits would give, bit for bit (target < 0 rows: zero): the      \
     * executor's classifier keeps no second N x V buffer. */                      \
    void (*crossentropy_bwd)(REAL *dlogits, const REAL *logits, const REAL *lse,   \
                             const int32_t *targets, int N, int V, int v0,         \
                             float scale);                                         \
    /* torch.optim.AdamW, one step (t >= 1) over the spans (see             \
     * merak_adamw_span; an array from alloc, filled through copy).  p16:   \
     * NULL, or the parameters' bf16 compute copies (p's layout), each       \
     * updated element rounded into it in the same pass, as to_bf16 would    \
     * round it (the float table's only; the double table takes NULL) */     \
    void (*adamw)(REAL *p, const REAL *g, REAL *m, REAL *v,                        \
                  const merak_adamw_span *spans, int nspans, float lr,             \
                  float beta1, float beta2, float eps, float weight_decay, int t,  \
                  uint16_t *p16);                                                  \
    /* sum of squares, accumulated in double */                                    \
    double (*sumsq)(const REAL *x, size_t n);                                      \
    /* x *= s */                                                                   \
    void (*scale)(REAL *x, size_t n, float s);

/* How the float entries' linear and attention products multiply (kernels
 * set_products; the bf16 entries' products are of bf16 operands already,
 * in fp32 whatever it says):
 *   FP32  float32 inputs and products (the exact reference; the default);
 *   TF32  the inputs rounded to TF32 (10 bits of mantissa) on the tensor
 *         cores, for --dtype tf32;
 *   BF16  the inputs rounded to bfloat16 on the tensor cores, for --dtype
 *         bf16: exact for operands that are bf16 values already (the
 *         executor's activations, gradients and compute copies), a
 *         rounding for the ones a product makes from them in between
 *         (attention's probabilities and their gradient, as flash
 *         attention rounds them).
 * Every one accumulates and stores float32. */
typedef enum merak_products {
    MERAK_PRODUCTS_FP32 = 0, MERAK_PRODUCTS_TF32, MERAK_PRODUCTS_BF16
} merak_products;

/* Direction of a copy through a backend's memory hooks: "host" is ordinary
 * process memory, "device" is memory from the backend's alloc. */
typedef enum merak_copy_kind {
    MERAK_COPY_H2D, MERAK_COPY_D2H, MERAK_COPY_D2D
} merak_copy_kind;

typedef struct merak_kernels {
    const char *name; /* "cpu", "cuda" */
    /* ---- memory.  Every buffer a kernel reads or writes comes from alloc.
     * The backend orders these calls after the kernels already launched
     * (one stream); a copy to the host returns when the data is there. */
    void *(*alloc)(size_t bytes);       /* zeroed, 64-byte aligned; NULL when out of memory */
    void (*free)(void *p);              /* NULL is a no-op */
    int (*zero)(void *p, size_t bytes);
    int (*copy)(void *dst, const void *src, size_t bytes, merak_copy_kind kind);
    int (*synchronize)(void);           /* waits for every launched kernel; 0 or -1 */
    /* bytes from alloc not freed yet, and the most at once since the
     * process started (what a run really holds: its report and the
     * planner's check) */
    void (*memory)(size_t *in_use, size_t *peak);
    /* the device's memory: what is free now and its size, in bytes (host
     * memory for the CPU); 0, or -1 if it cannot tell */
    int (*capacity)(size_t *free_bytes, size_t *total_bytes);
    /* ---- device time: where a backend's kernels run behind the host (a
     * GPU's stream), the host's clock says only when work was queued.
     * mark records a mark on the kernels' stream, reached when every
     * kernel launched before it has finished (a host backend's kernels
     * are done when their call returns: its mark is the clock's reading),
     * and returns its number (0, 1, ... since the last marks_clear), or
     * -1 on an error; mark_seconds(a, b), once the device has reached
     * both (after synchronize), is the time from mark a to mark b in
     * seconds, or < 0 on an error.  NULL: the host's clock times the
     * kernels. */
    int (*mark)(void);
    double (*mark_seconds)(int a, int b);
    void (*marks_clear)(void);
    /* ---- precision.  x[i] = the bfloat16 value nearest x[i] (to nearest,
     * ties to even: merak_bf16_round of bf16.h), kept in float storage:
     * how the executor emulates bf16 storage (--dtype bf16, exec.h).  NULL
     * where the backend has no bf16. */
    void (*round_bf16)(float *x, size_t n);
    /* bf16 storage: dst[i] = src[i] rounded to bfloat16 as round_bf16
     * does (merak_f32_to_bf16), and back (merak_bf16_to_f32: exact); the
     * executor's activations in bf16 storage, widened for the kernels and
     * narrowed after them.  NULL where the backend has no bf16 storage
     * (the executor then keeps bf16 values in float storage). */
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
    void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
    /* The products' math from now on (merak_products): the backend's
     * state, for every later linear and attention product.  NULL where the
     * products are always FP32 (the CPU: its FP32 products of bf16 values
     * are already what BF16 products compute, up to the order of sums). */
    void (*set_products)(merak_products p);
    /* ---- bf16 storage, run natively.  The executor's tensors in bf16
     * storage (exec.h, Precision: activations, their gradients and the
     * parameters' compute copies) are bfloat16 bit patterns (uint16_t); an
     * op whose kind has its entries here reads and writes them as they
     * are, any other op runs its float entries on copies widened into a
     * staging buffer.  Each entry computes in fp32 from the widened values
     * (products accumulate in fp32) and rounds what it writes to bf16 once
     * (merak_f32_to_bf16), a bf16 gradient as its float entry accumulates
     * (widened, += in fp32, rounded); weight gradients (dw, db) are float.
     * So an entry gives, bit for bit, what its float entry gives on the
     * widened values with the written tensor narrowed, up to the order of
     * fp32 sums (the CPU's are exactly that: they widen into scratch and
     * call the float entries).  scratch: with bf16_scratch, floats for the
     * call's bf16 operands, each rounded up to 16 (what the executor's
     * staging of the op holds); else unused (may be NULL).  NULL entries:
     * that op kind is staged.  Shapes as the float entries'. */
    int bf16_scratch;
    /* (the linear layers; out and dout have rows of O elements ldo apart,
     * ldo >= O, the padding neither read nor written: the executor pads
     * the rows of the logits, which have no bias (b and db NULL where ldo
     * > O), to 16 bytes, as cuBLASLt's fastest products want them) */
    void (*linear16_fwd)(uint16_t *out, const uint16_t *inp, const uint16_t *w, const uint16_t *b,
                         int N, int K, int O, int ldo, float *scratch);
    void (*linear16_bwd_x)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N, int K,
                           int O, int ldo, int acc, float *scratch);
    void (*linear16_bwd_w)(float *dw, float *db, const uint16_t *dout, const uint16_t *inp, int N,
                           int K, int O, int ldo, float *scratch);
    /* (a linear layer and the GELU of its output, O columns dense: the
     * forward, pre = linear16_fwd, out = gelu16_fwd(pre); the input part
     * from the gradient of the GELU's output, dpre = gelu16_bwd(bf16(dout
     * @ w), pre), written (acc 0).  The CPU's are the two entries', bit
     * for bit; a backend may apply the GELU to the product before its
     * rounding instead, within a bf16 rounding of them (cuBLASLt's
     * epilogues: cuda_kernels.h merak_cuda_set_gelu_epilogue).  NULL:
     * the two one by one) */
    void (*linear16_gelu_fwd)(uint16_t *pre, uint16_t *out, const uint16_t *inp, const uint16_t *w,
                              const uint16_t *b, int N, int K, int O, float *scratch);
    void (*linear16_bwd_x_dgelu)(uint16_t *dpre, const uint16_t *dout, const uint16_t *w, const uint16_t *pre,
                                 int N, int K, int O, int ldo, float *scratch);
    /* (rows of wte copied: exact; ids outside the shard give zero rows) */
    void (*embedding16_fwd)(uint16_t *out, const int32_t *ids, const uint16_t *wte, int N, int C,
                            int v0, int V);
    void (*embedding16_bwd_w)(float *dwte, const uint16_t *dout, const int32_t *ids, int N, int C,
                              int v0, int V, float *scratch);
    /* (the cross-entropy on bf16 logits, rows of V elements ld apart, ld
     * >= V, the padding neither read nor written; its backward in place,
     * dlogits == logits, writes the gradient over them) */
    void (*crossentropy16_stats)(float *lse, float *tlogit, const uint16_t *logits,
                                 const int32_t *targets, int N, int V, int ld, int v0, float *scratch);
    void (*crossentropy16_bwd)(uint16_t *dlogits, const uint16_t *logits, const float *lse,
                               const int32_t *targets, int N, int V, int ld, int v0, float scale,
                               float *scratch);
    /* (crossentropy16_stats, then crossentropy16_bwd in place over the
     * logits, the same bits, reading the logits once where the backend
     * can: a training step's loss whose backward is sure to follow; NULL:
     * the backend has only the two) */
    void (*crossentropy16_fused)(float *lse, float *tlogit, uint16_t *logits, const int32_t *targets, int N,
                                 int V, int ld, int v0, float scale, float *scratch);
    /* (the position embedding and the elementwise ops) */
    void (*posemb16_fwd)(uint16_t *out, const uint16_t *inp, const uint16_t *wpe, int B, int T, int C,
                         float *scratch);
    void (*posemb16_bwd_w)(float *dwpe, const uint16_t *dout, int B, int T, int C, float *scratch);
    void (*gelu16_fwd)(uint16_t *out, const uint16_t *inp, size_t n, float *scratch);
    void (*gelu16_bwd)(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n, int acc,
                       float *scratch);
    void (*swiglu16_fwd)(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n,
                         float *scratch);
    void (*swiglu16_bwd)(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                         const uint16_t *up, size_t n, int acc, float *scratch);
    void (*add16_fwd)(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n, float *scratch);
    void (*accumulate16)(uint16_t *dst, const uint16_t *src, size_t n, float *scratch);
    void (*dropout16_fwd)(uint16_t *out, const uint16_t *inp, size_t n, float p, uint64_t seed,
                          uint64_t i0, float *scratch);
    void (*dropout16_bwd)(uint16_t *dinp, const uint16_t *dout, size_t n, float p, uint64_t seed,
                          uint64_t i0, int acc, float *scratch);
    /* (the norms: their saved mean and rstd float) */
    void (*layernorm16_fwd)(uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                            const uint16_t *w, const uint16_t *b, int N, int C, float eps,
                            float *scratch);
    void (*layernorm16_bwd_x)(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *w, const float *mean, const float *rstd, int N, int C,
                              int acc, float *scratch);
    void (*layernorm16_bwd_w)(float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                              const float *mean, const float *rstd, int N, int C, float *scratch);
    void (*rmsnorm16_fwd)(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w, int N,
                          int C, float eps, float *scratch);
    void (*rmsnorm16_bwd_x)(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp,
                            const uint16_t *w, const float *rstd, int N, int C, int acc, float *scratch);
    void (*rmsnorm16_bwd_w)(float *dw, const uint16_t *dout, const uint16_t *inp, const float *rstd,
                            int N, int C, float *scratch);
    /* (a norm's whole backward in one call, where the executor runs its
     * input and weight parts together: bwd_x then bwd_w, up to the order
     * of the weight gradients' fp32 sums (dinp the same bits), dw and db
     * NULL where not wanted; a backend may read each row once) */
    void (*layernorm16_bwd)(uint16_t *dinp, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                            const uint16_t *w, const float *mean, const float *rstd, int N, int C, int acc,
                            float *scratch);
    void (*rmsnorm16_bwd)(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                          const uint16_t *w, const float *rstd, int N, int C, int acc, float *scratch);
    /* (a residual add and the norm that reads its sum, forward, in one
     * call, where the executor runs them together: sum = a + b rounded,
     * as add16_fwd writes it, then out, mean, rstd as layernorm16_fwd
     * (rmsnorm16_fwd) of sum gives them, bit for bit; a backend may read
     * the rows once) */
    void (*add_layernorm16_fwd)(uint16_t *sum, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                const uint16_t *b, const uint16_t *w, const uint16_t *bias, int N, int C, float eps,
                                float *scratch);
    void (*add_rmsnorm16_fwd)(uint16_t *sum, uint16_t *out, float *rstd, const uint16_t *a, const uint16_t *b,
                              const uint16_t *w, int N, int C, float eps, float *scratch);
    /* (causal attention, as attention_fwd and attention_bwd: q, k, v and
     * dq, dk, dv bf16 at the shape's strides, out and dout bf16 dense, dq,
     * dk, dv accumulated; lse, and with RoPE the rotated qr and kr, float
     * as theirs.  attention16_supported: 1 if the entries take shape s,
     * else the executor stages the op for the float entries (NULL: every
     * shape).  ascratch: attention16_scratch_elems(s) floats, in place of
     * the float entries' scratch; scratch as above, for the widened q, k,
     * v, out and their gradients (each dense).  The exception to "rounds
     * once": a backend whose fused kernel writes bf16 gradients (CUDA's
     * cuDNN) rounds dq, dk, dv there, and again when it adds them in) */
    int (*attention16_supported)(const merak_attn_shape *s);
    void (*attention16_fwd)(const merak_attn_shape *s, uint16_t *out, float *lse, float *qr, float *kr,
                            const uint16_t *q, const uint16_t *k, const uint16_t *v, float *ascratch,
                            float *scratch);
    void (*attention16_bwd)(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                            const uint16_t *dout, const uint16_t *out, const float *lse, const float *qr,
                            const float *kr, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                            float *ascratch, float *scratch, int acc);
    size_t (*attention16_scratch_elems)(const merak_attn_shape *s);
    MERAK_KERNEL_TABLE(float)
} merak_kernels;

/* The CPU backend (kernels/cpu).  Never NULL. */
const merak_kernels *merak_kernels_cpu(void);

/* Threads the CPU kernels and BLAS may use (>= 1). */
void merak_kernels_cpu_set_threads(int nthreads);

/* ---------------------------------------------------------------------------
 * The backends by name (backend.c): the one place a name (--device) picks
 * one.  Everything else asks the entry.
 * ------------------------------------------------------------------------- */
typedef struct merak_backend {
    const char *name;       /* "cpu", "cuda" */
    const char *label;      /* for messages: "CPU", "CUDA" */
    int built;              /* compiled into this library */
    int host;               /* runs on the host: tensors in process memory (the
                             * ranks of a node share it), --threads sets its threads */
    const char *profile;    /* the device profile (data/devices.json) assumed for it */
    int bf16;               /* its kernels have round_bf16: --dtype bf16 runs on it */
    int tf32;               /* its products have TF32 (set_products): --dtype tf32 runs on it */
    /* device memory seen from the host, for data that must pass through
     * host memory (NULL for a host backend): is p the backend's memory;
     * copies that return when the data is there, 0 or -1 */
    int (*is_device)(const void *p);
    int (*to_host)(void *dst, const void *src, size_t bytes);
    int (*to_device)(void *dst, const void *src, size_t bytes);
    /* the kernels' stream (what communication must follow; NULL for a
     * host backend, or the legacy default stream) and a number naming this
     * process's device (equal numbers on one host: a shared device; < 0:
     * cannot tell); NULL for a host backend */
    void *(*stream)(void);
    double (*device_id)(void);
} merak_backend;

/* The backend named `name` (NULL: "cpu"), built or not; NULL if no
 * backend has that name. */
const merak_backend *merak_backend_find(const char *name);
/* "cpu or cuda", for messages. */
const char *merak_backend_names(void);
/* Can backend `name` (NULL: "cpu") run here?  0; MERAK_USAGE with one
 * line in err when no backend has that name or this library was built
 * without it. */
int merak_backend_check(const char *name, char *err, size_t errlen);
/* The table a plan of backend `name` (NULL: "cpu") sees: which entries it
 * has, its bf16_scratch and its scratch queries, on which the executor's
 * memory depends (a plan calls its set_products: the attention's
 * scratch depends on it; that is the backend's state, which a caller
 * that plans after opening the kernels sets again).  No device is opened, and nothing else may be
 * called (a plan_only executor calls no kernel or memory hook); where the
 * kernels are open already, CUDA's support queries ask cuDNN on the device
 * (cudnn_attn.h merak_cudnn_attn_takes).  The
 * CPU's for a backend this library was built without (an estimate: its
 * staging covers every op, its attention's scratch differs). */
const merak_kernels *merak_kernels_plan(const char *name);
/* The kernels of backend `name` (NULL: "cpu"): the CPU's with `threads`
 * threads, or a GPU's (the one MERAK_GPU names, else this rank's place on
 * its node over the GPUs it sees, else the current one) when this library
 * was built with CUDA and a GPU answers; NULL with one line in err
 * otherwise. */
const merak_kernels *merak_kernels_open(const char *name, int threads, char *err, size_t errlen);

#endif /* MERAK_KERNELS_H */
