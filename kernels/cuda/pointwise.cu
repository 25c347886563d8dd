/*
 * pointwise.cu - elementwise ops: GELU, SwiGLU, add, accumulate, scale,
 * dropout, and the bf16 rounding of --dtype bf16.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "bf16.h"
#include "mix64.h"
#include "cuda_common.cuh"

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

__global__ void gelu_fwd_k(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

__global__ void gelu_bwd_k(float *dinp, const float *dout, const float *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float x = inp[i];
        const float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        const float t = tanhf(u);
        const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        const float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
        dinp[i] += g * dout[i];
    }
}

__global__ void swiglu_fwd_k(float *out, const float *gate, const float *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float g = gate[i];
        const float sg = 1.0f / (1.0f + expf(-g));
        out[i] = g * sg * up[i];
    }
}

/* d/dgate silu(g) = s (1 + g (1 - s)) */
__global__ void swiglu_bwd_k(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, size_t n)
{
    GRID_STRIDE(i, n)
    {
        const float g = gate[i], u = up[i], d = dout[i];
        const float sg = 1.0f / (1.0f + expf(-g));
        if (dgate)
            dgate[i] += d * u * sg * (1.0f + g * (1.0f - sg));
        if (dup)
            dup[i] += d * g * sg;
    }
}

__global__ void add_k(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void accumulate_k(float *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ void scale_k(float *x, size_t n, float s)
{
    GRID_STRIDE(i, n) x[i] *= s;
}

/* x = the nearest bf16 values, in float storage (kernels.h round_bf16):
 * bf16.h's rounding, the CPU backend's bit for bit.  x is 16-byte aligned
 * here: four floats a thread, one 16-byte load and store. */
__device__ __forceinline__ float round_bf16_1(float x) { return merak_bf16_round(x); }

__global__ void round_bf16_v4_k(float4 *x, size_t n4)
{
    GRID_STRIDE(i, n4)
    {
        float4 v = x[i];
        v.x = round_bf16_1(v.x);
        v.y = round_bf16_1(v.y);
        v.z = round_bf16_1(v.z);
        v.w = round_bf16_1(v.w);
        x[i] = v;
    }
}

__global__ void round_bf16_k(float *x, size_t n)
{
    GRID_STRIDE(i, n) x[i] = round_bf16_1(x[i]);
}

/* ------------------------------------------------------------------ dropout
 *
 * The mask is the one of kernels/cpu/cpu_kernels.h, reproduced bit for bit:
 * element i of a call with seed s and first index i0 is kept iff u >= p, where
 *
 *     key = mix64(s + GOLDEN)
 *     z   = mix64(key + (i0 + i + 1) * GOLDEN)     (uint64 arithmetic)
 *     u   = (float)(z >> 40) * 2^-24               (uniform in [0, 1), exact)
 *
 * GOLDEN and mix64 are those of kernels/mix64.h (splitmix64).  Kept
 * elements are scaled by 1/(1-p) (computed in float).  Only integer
 * arithmetic decides the mask, so CPU and GPU masks agree exactly.
 */
__device__ __forceinline__ bool dropout_keep(uint64_t key, uint64_t i, float p)
{
    const uint64_t z = merak_mix64(key + (i + 1) * MERAK_GOLDEN);
    return (float)(z >> 40) * 0x1.0p-24f >= p;
}

__global__ void dropout_fwd_k(float *out, const float *inp, size_t n, float p, float sc,
                              uint64_t key, uint64_t i0)
{
    GRID_STRIDE(i, n) out[i] = dropout_keep(key, i0 + i, p) ? inp[i] * sc : 0.0f;
}

__global__ void dropout_bwd_k(float *dinp, const float *dout, size_t n, float p, float sc,
                              uint64_t key, uint64_t i0)
{
    GRID_STRIDE(i, n)
    {
        if (dropout_keep(key, i0 + i, p))
            dinp[i] += dout[i] * sc;
    }
}

extern "C" {

int merak_cuda_launch_gelu_fwd(void *stream, float *out, const float *inp, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    gelu_fwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, inp, n);
    return cudaGetLastError();
}

int merak_cuda_launch_gelu_bwd(void *stream, float *dinp, const float *dout,
                               const float *inp, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    gelu_bwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(dinp, dout, inp, n);
    return cudaGetLastError();
}

int merak_cuda_launch_swiglu_fwd(void *stream, float *out, const float *gate,
                                 const float *up, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    swiglu_fwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, gate, up, n);
    return cudaGetLastError();
}

int merak_cuda_launch_swiglu_bwd(void *stream, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    swiglu_bwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(dgate, dup, dout, gate, up, n);
    return cudaGetLastError();
}

int merak_cuda_launch_add_fwd(void *stream, float *out, const float *a, const float *b,
                              size_t n)
{
    if (n == 0)
        return cudaSuccess;
    add_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, a, b, n);
    return cudaGetLastError();
}

int merak_cuda_launch_accumulate(void *stream, float *dst, const float *src, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    accumulate_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(dst, src, n);
    return cudaGetLastError();
}

int merak_cuda_launch_dropout_fwd(void *stream, float *out, const float *inp, size_t n,
                                  float p, uint64_t seed, uint64_t i0)
{
    if (n == 0)
        return cudaSuccess;
    const float sc = 1.0f / (1.0f - p);
    dropout_fwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, inp, n, p, sc,
                                                         merak_mix64(seed + MERAK_GOLDEN), i0);
    return cudaGetLastError();
}

int merak_cuda_launch_dropout_bwd(void *stream, float *dinp, const float *dout, size_t n,
                                  float p, uint64_t seed, uint64_t i0)
{
    if (n == 0)
        return cudaSuccess;
    const float sc = 1.0f / (1.0f - p);
    dropout_bwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(dinp, dout, n, p, sc,
                                                         merak_mix64(seed + MERAK_GOLDEN), i0);
    return cudaGetLastError();
}

/* The aligned body four at a time, a misaligned head and the tail one at
 * a time (an executor's sub-batch can start anywhere). */
int merak_cuda_launch_round_bf16(void *stream, float *x, size_t n)
{
    size_t head = (size_t)((16 - (uintptr_t)x % 16) % 16) / sizeof(float);
    if ((uintptr_t)x % sizeof(float) || head > n)
        head = n;
    const size_t n4 = (n - head) / 4, tail = n - head - 4 * n4;
    if (head)
        round_bf16_k<<<ew_grid(head), NT, 0, STREAM(stream)>>>(x, head);
    if (n4)
        round_bf16_v4_k<<<ew_grid(n4), NT, 0, STREAM(stream)>>>((float4 *)(x + head), n4);
    if (tail)
        round_bf16_k<<<ew_grid(tail), NT, 0, STREAM(stream)>>>(x + head + 4 * n4, tail);
    return cudaGetLastError();
}

int merak_cuda_launch_scale(void *stream, float *x, size_t n, float s)
{
    if (n == 0)
        return cudaSuccess;
    scale_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(x, n, s);
    return cudaGetLastError();
}

} /* extern "C" */
