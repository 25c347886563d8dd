/*
 * loss.cu - cross-entropy over (a vocabulary shard of) the logits: a block
 * a row, 16 bytes a load (rowwise.h), the statistics in one pass; the
 * element-a-thread kernels below them take a backward whose gradient and
 * logits sit at different offsets within 16 bytes.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "cuda_common.cuh"
#include "rowwise.h"

/* The block's (m, s) pairs of the online log-sum-exp merged (rw_lse_merge:
 * within a warp by an xor-shuffle tree, then the warps' in warp 0); every
 * thread gets the result.  sh holds 2 * 32 floats. */
static __device__ __forceinline__ void block_lse(float *m, float *s, float *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, *m, o), s2 = __shfl_xor_sync(0xffffffffu, *s, o);
        rw_lse_merge(m, s, m2, s2);
    }
    if (lane == 0)
        sh[w] = *m, sh[32 + w] = *s;
    __syncthreads();
    if (w == 0) {
        float a = lane < nw ? sh[lane] : -INFINITY, b = lane < nw ? sh[32 + lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            const float a2 = __shfl_xor_sync(0xffffffffu, a, o), b2 = __shfl_xor_sync(0xffffffffu, b, o);
            rw_lse_merge(&a, &b, a2, b2);
        }
        if (lane == 0)
            sh[0] = a, sh[32] = b; /* warp 0 alone has read sh, and is done with it */
    }
    __syncthreads();
    *m = sh[0];
    *s = sh[32];
}

/* One block per row: lse[n] = logsumexp(x) over the shard, tlogit[n] =
 * x[target - v0] if the target is in the shard, else 0; a negative target
 * gives 0 for both.  One pass over the row, 16 bytes a load. */
template <int B16>
__global__ void ce_stats_v_k(float *lse, float *tlogit, const void *logits, const int32_t *targets, int V,
                             int ld, int v0)
{
    __shared__ float sh[64];
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    const char *x = (const char *)logits + n * (size_t)ld * RW_ES(B16);
    if (tg < 0) {
        if (threadIdx.x == 0)
            lse[n] = tlogit[n] = 0.0f;
        return;
    }
    float m, s;
    rw_ce_partial(&m, &s, x, V, B16, threadIdx.x, blockDim.x, NULL);
    block_lse(&m, &s, sh);
    if (threadIdx.x == 0) {
        lse[n] = logf(s) + m;
        tlogit[n] = (t >= 0 && t < V) ? rw_elem(x, (size_t)t, B16) : 0.0f;
    }
}

/* crossentropy_bwd_k below, 16 bytes a load (dlogits at logits' offset
 * within 16 bytes; in place or not). */
template <int B16>
__global__ void ce_bwd_v_k(void *dlogits, const void *logits, const float *lse, const int32_t *targets, int V,
                           int ld, int v0, float scale)
{
    const size_t n = blockIdx.x;
    const long long tg = targets[n];
    const size_t at = n * (size_t)ld * RW_ES(B16);
    if (tg < 0 && dlogits != logits)
        return; /* a row without a target is left as it is, or zeroed in place */
    rw_ce_grad((char *)dlogits + at, (const char *)logits + at, V, tg - v0, tg < 0 ? 0.0f : lse[n], scale,
               tg < 0, B16, threadIdx.x, blockDim.x, NULL);
}

/* ce_stats_v_k, then ce_bwd_v_k in place, in one pass over the row: each
 * thread keeps the 16-byte vectors it reads for the statistics in shared
 * memory (keep: the row's vectors, launched with room for them) and
 * computes its gradient from there, so the logits are read once; the
 * same threads, order and arithmetic as the two kernels, so the same
 * bits.  The target's logit is read before the block's barrier (in
 * block_lse), ahead of any thread's write. */
template <int B16>
__global__ void ce_fused_v_k(float *lse, float *tlogit, void *logits, const int32_t *targets, int V, int ld,
                             int v0, float scale)
{
    extern __shared__ rw_u4 keep[];
    __shared__ float sh[64];
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    char *x = (char *)logits + n * (size_t)ld * RW_ES(B16);
    if (tg < 0) {
        if (threadIdx.x == 0)
            lse[n] = tlogit[n] = 0.0f;
        rw_ce_grad(x, x, V, t, 0.0f, scale, 1, B16, threadIdx.x, blockDim.x, NULL);
        return;
    }
    const float tl = threadIdx.x == 0 && t >= 0 && t < V ? rw_elem(x, (size_t)t, B16) : 0.0f;
    float m, s;
    rw_ce_partial(&m, &s, x, V, B16, threadIdx.x, blockDim.x, keep);
    block_lse(&m, &s, sh);
    const float l = logf(s) + m;
    if (threadIdx.x == 0)
        lse[n] = l, tlogit[n] = tl;
    rw_ce_grad(x, x, V, t, l, scale, 0, B16, threadIdx.x, blockDim.x, keep);
}

/* dlogits += (exp(x - lse) - onehot(target - v0)) * scale; in place
 * (dlogits == logits: each thread reads its element before it writes it)
 * the gradient replaces the logits and a row with a negative target
 * becomes zero (kernels.h).  bf16 logits: the gradient rounded once. */
template <typename T>
__global__ void crossentropy_bwd_k(T *dlogits, const T *logits, const float *lse,
                                   const int32_t *targets, int V, int ld, int v0, float scale)
{
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    const bool in_place = dlogits == logits;
    const T *x = logits + n * (size_t)ld;
    T *dx = dlogits + n * (size_t)ld;
    if (tg < 0) {
        if (in_place)
            for (int j = threadIdx.x; j < V; j += blockDim.x)
                dx[j] = (T)0;
        return;
    }
    const float l = lse[n];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float g = (expf(as_f32(x[j]) - l) - (j == t ? 1.0f : 0.0f)) * scale;
        put(dx + j, in_place ? g : as_f32(dx[j]) + g);
    }
}

template <typename T>
static int ce_stats(cudaStream_t st, float *lse, float *tlogit, const T *logits, const int32_t *targets, int N,
                    int V, int ld, int v0)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    ce_stats_v_k<sizeof(T) == 2><<<N, NT, 0, st>>>(lse, tlogit, logits, targets, V, ld, v0);
    return cudaGetLastError();
}

template <typename T>
static int ce_bwd(cudaStream_t st, T *dlogits, const T *logits, const float *lse, const int32_t *targets, int N,
                  int V, int ld, int v0, float scale)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    if ((((uintptr_t)dlogits - (uintptr_t)logits) & 15) == 0)
        ce_bwd_v_k<sizeof(T) == 2><<<N, NT, 0, st>>>(dlogits, logits, lse, targets, V, ld, v0, scale);
    else
        crossentropy_bwd_k<T><<<N, NT, 0, st>>>(dlogits, logits, lse, targets, V, ld, v0, scale);
    return cudaGetLastError();
}

/* The dynamic shared memory ce_fused_v_k needs for rows of V bf16 (every
 * vector of a row however it sits within 16 bytes), or 0 where the device
 * cannot give a block that much beside the kernel's own (sh[]).  Past the
 * 48 KB a block gets without asking, the opt-in limit is asked for once
 * per larger size. */
static size_t ce_fused_smem(int V)
{
    static int optin = -1;
    static size_t stat, granted;   /* the kernel's static shared memory; dynamic bytes allowed */
    const size_t need = ((size_t)V / RW_E(1) + 2) * 16;
    if (optin < 0) {
        int dev = 0, v = 0;
        cudaFuncAttributes fa;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
            cudaFuncGetAttributes(&fa, ce_fused_v_k<1>) != cudaSuccess)
            return (void)cudaGetLastError(), 0;
        optin = v;
        stat = fa.sharedSizeBytes;
        granted = (48 << 10) > stat ? (48 << 10) - stat : 0;
    }
    if (need <= granted)
        return need;
    if (need + stat > (size_t)optin ||
        cudaFuncSetAttribute(ce_fused_v_k<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need) != cudaSuccess)
        return (void)cudaGetLastError(), 0;
    granted = need;
    return need;
}

extern "C" {

int merak_cuda_launch_crossentropy_stats(void *stream, float *lse, float *tlogit,
                                         const float *logits, const int32_t *targets, int N,
                                         int V, int v0)
{
    return ce_stats<float>(STREAM(stream), lse, tlogit, logits, targets, N, V, V, v0);
}

int merak_cuda_launch_crossentropy_bwd(void *stream, float *dlogits, const float *logits,
                                       const float *lse, const int32_t *targets, int N, int V,
                                       int v0, float scale)
{
    return ce_bwd<float>(STREAM(stream), dlogits, logits, lse, targets, N, V, V, v0, scale);
}

int merak_cuda_launch_crossentropy16_stats(void *stream, float *lse, float *tlogit, const uint16_t *logits,
                                           const int32_t *targets, int N, int V, int ld, int v0)
{
    return ce_stats<uint16_t>(STREAM(stream), lse, tlogit, logits, targets, N, V, ld, v0);
}

int merak_cuda_launch_crossentropy16_bwd(void *stream, uint16_t *dlogits, const uint16_t *logits,
                                         const float *lse, const int32_t *targets, int N, int V, int ld, int v0,
                                         float scale)
{
    return ce_bwd<uint16_t>(STREAM(stream), dlogits, logits, lse, targets, N, V, ld, v0, scale);
}

int merak_cuda_launch_crossentropy16_fused(void *stream, float *lse, float *tlogit, uint16_t *logits,
                                           const int32_t *targets, int N, int V, int ld, int v0, float scale)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    const size_t smem = ce_fused_smem(V);
    if (!smem) {   /* a row larger than a block's shared memory: the two kernels */
        const int rc = ce_stats<uint16_t>(STREAM(stream), lse, tlogit, logits, targets, N, V, ld, v0);
        return rc != cudaSuccess ? rc : ce_bwd<uint16_t>(STREAM(stream), logits, logits, lse, targets, N, V, ld, v0, scale);
    }
    ce_fused_v_k<1><<<N, NT, smem, STREAM(stream)>>>(lse, tlogit, logits, targets, V, ld, v0, scale);
    return cudaGetLastError();
}

} /* extern "C" */
