/*
 * cuda_common.cuh - what every kernel file of the CUDA backend shares: the
 * block size, the launch grid of elementwise kernels, and the warp and block
 * reductions (fixed xor-shuffle trees, so results do not depend on timing).
 *
 * Layout of kernels/cuda: cuda_glue.c holds the kernel table and cuBLASLt
 * (the GEMMs of linear and attention), cuda_mem.c the device, memory, the
 * stream and the error state; one .cu file per op family holds its device kernels and the extern "C" launchers that
 * enqueue them (declared in cuda_kernels.h): embed.cu, norm.cu, attention.cu,
 * pointwise.cu, loss.cu, optim.cu.  Shapes and semantics: kernels.h.
 *
 * Determinism, for every file: no kernel uses atomics on floats.  Every
 * reduction runs in an order fixed by the shapes alone (block size
 * constants, fixed row chunks, xor-shuffle trees), never by the device or
 * the timing, so a call repeated on the same inputs gives bitwise-identical
 * outputs.  Backward kernels read the gradient they accumulate into once and
 * write it once (+=).
 */
#ifndef MERAK_CUDA_COMMON_CUH
#define MERAK_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"
#include "bf16.h"

/* Threads of every 1-D block (a multiple of 32; the reductions rely on it). */
#define NT 256

#define STREAM(s) ((cudaStream_t)(s))

static inline unsigned ew_grid(size_t n)
{
    size_t b = (n + NT - 1) / NT;
    if (b > (1u << 20))
        b = 1u << 20;
    return b ? (unsigned)b : 1u;
}

static inline size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

#define GRID_STRIDE(i, n)                                                     \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);  \
         i += (size_t)gridDim.x * blockDim.x)

/* An element as float: a float, or a bfloat16 bit pattern (bf16 storage)
 * widened, exactly (bf16.h, the one definition); and *p = v in p's
 * storage (a bf16 one rounded as merak_f32_to_bf16 rounds). */
__device__ __forceinline__ float as_f32(float x) { return x; }
__device__ __forceinline__ float as_f32(uint16_t b) { return merak_bf16_to_f32(b); }
__device__ __forceinline__ void put(float *p, float v) { *p = v; }
__device__ __forceinline__ void put(uint16_t *p, float v) { *p = merak_f32_to_bf16(v); }

template <typename T> __device__ __forceinline__ T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32); every thread gets the
 * result.  sh holds 33 elements.  A fixed tree: deterministic. */
template <typename T> __device__ __forceinline__ T block_sum(T v, T *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous reduction */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        T r = lane < nw ? sh[lane] : (T)0;
        r = warp_sum(r);
        if (lane == 0)
            sh[32] = r;
    }
    __syncthreads();
    return sh[32];
}

static __device__ __forceinline__ float block_max(float v, float *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float r = lane < nw ? sh[lane] : -INFINITY;
        r = warp_max(r);
        if (lane == 0)
            sh[32] = r;
    }
    __syncthreads();
    return sh[32];
}

#endif /* MERAK_CUDA_COMMON_CUH */
