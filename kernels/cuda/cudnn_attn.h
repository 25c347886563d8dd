/*
 * cudnn_attn.h - cuDNN's fused causal attention (flash attention through the
 * cudnn-frontend graph API), bf16, forward and backward, as plain C.
 *
 * Built (cudnn_attn.cpp, the project's one C++17 file) when configure finds
 * cuDNN 9 and the cudnn-frontend headers (HAVE_CUDNN_ATTN in config.h), for
 * the CUDA backend's attention (cuda_attention.c) to call on bf16 shapes
 * that merak_cudnn_attn_supported accepts.
 *
 * Tensors (device pointers, bf16 as uint16_t bit patterns, token-major):
 *   q (B,T,·) row stride s->q_stride, head h at column h*hd (nh heads);
 *   k, v (B,T,·) row strides s->k_stride, s->v_stride, nkv heads each, so
 *   q, k, v may point into one fused qkv row (B,T,(nh+2*nkv)*hd);
 *   out, dout (B,T,nh*hd) dense;
 *   stats (B,nh,T) fp32: each query row's natural log-sum-exp of its scaled,
 *   masked scores, max + log(sum exp(score - max)), score = q.k / sqrt(hd),
 *   the kernels.h `lse` convention (the CPU backend's attention saves it too).
 * Query head h reads kv head h / (nh/nkv); query t attends keys 0..t (causal,
 * top-left diagonal); scale 1/sqrt(hd); no RoPE (the caller rotates first),
 * no dropout.
 *
 * Alignment: every pointer 16-byte aligned and every row stride a multiple
 * of 8 elements (cudnn-frontend declares its tensors 16-byte aligned);
 * a call breaking it fails (error recorded).
 *
 * Execution: enqueued on the CUDA backend's stream (merak_cuda_stream), so
 * the calls return before the GPU is done.  One cuDNN handle, made on the
 * first call; libcudnn.so.9 is dlopen'ed then, not linked.  One graph per
 * shape and strides, built on its first call (milliseconds to a second) and
 * kept in a small cache.  The cuDNN workspace is this file's own device
 * buffer, grown on demand (never freed before merak_cudnn_attn_close, so no
 * cudaFree waits for the device in the middle of a step);
 * merak_cuda_scratch is left alone.  One host thread at a time, like the
 * rest of the backend.
 *
 * Errors: 0 or -1; on -1 the first error is recorded with merak_cuda_record
 * and merak_cuda_status reports it.  After any recorded error of the backend
 * the calls do nothing and return -1.  Nothing prints but
 * merak_cudnn_attn_takes' refusals.
 */
#ifndef MERAK_CUDNN_ATTN_H
#define MERAK_CUDNN_ATTN_H

#include <stdint.h>

#include "../kernels.h" /* merak_attn_shape */

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if cuDNN's fused attention takes this shape, else 0: positive sizes,
 * n_kv_head divides n_head, head_dim a multiple of 8 and at most 256,
 * row strides multiples of 8 and wide enough for their heads.  Pure
 * arithmetic: touches neither the GPU nor cuDNN (a supported shape can
 * still fail at the first call, e.g. an older GPU or cuDNN). */
int merak_cudnn_attn_supported(const merak_attn_shape *s);

/* 1 if cuDNN loads and makes its handle on this device, else 0 (nothing
 * recorded; every shape is then refused). */
int merak_cudnn_attn_loadable(void);

/* 1 if cuDNN, on this device, builds the graphs of shape s: its forward
 * and, with gs (the gradients' row strides dq, dk, dv), its backward;
 * else 0, with nothing recorded (the caller goes without cuDNN) and one
 * line on stderr naming the shape and cuDNN's reason.  The answer is the
 * shape's for every batch size and for the rest of the process (asked
 * again, it is not built again: a caller that sized its memory by it
 * keeps the same way); cuDNN that cannot be loaded, or whose handle
 * cannot be made, refuses every shape.  The graphs built are kept for the
 * calls (a call whose graph was dropped from the cache builds it again,
 * and its failure is an error).  Needs the backend's device
 * (merak_cuda_is_open): a plan without one asks merak_cudnn_attn_supported
 * alone. */
int merak_cudnn_attn_takes(const merak_attn_shape *s, const int *gs);

/* out (B,T,nh*hd) = causal softmax(q k^T / sqrt(hd)) v, overwritten;
 * stats (B,nh,T), overwritten (see above), which the backward needs. */
int merak_cudnn_attn_fwd(const merak_attn_shape *s, uint16_t *out, float *stats,
                         const uint16_t *q, const uint16_t *k, const uint16_t *v);

/* dq, dk, dv (row strides dqs, dks, dvs, as supported would take for q,
 * k, v) OVERWRITTEN (not accumulated: the caller adds them where
 * kernels.h wants +=) with the gradients of the forward's out given dout.
 * out and stats are the forward's, unchanged since.  The algorithm is
 * cuDNN's deterministic one: bitwise repeatable run to run.  dq, dk, dv
 * may point into one fused gradient row (strides its width), whatever
 * q, k, v's strides are. */
int merak_cudnn_attn_bwd(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv, int dqs,
                         int dks, int dvs, const uint16_t *dout, const uint16_t *out, const float *stats,
                         const uint16_t *q, const uint16_t *k, const uint16_t *v);

/* Drops the cached graphs, the workspace and the handle (optional; a later
 * call makes them again).  For tests and leak checkers. */
void merak_cudnn_attn_close(void);

#ifdef __cplusplus
}
#endif

#endif /* MERAK_CUDNN_ATTN_H */
