/*
 * loss.cu - cross-entropy over (a vocabulary shard of) the logits.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "cuda_common.cuh"

/* One block per row: lse[n] = logsumexp(x) over the shard (max subtracted),
 * tlogit[n] = x[target - v0] if the target is in the shard, else 0; a
 * negative target gives 0 for both. */
__global__ void crossentropy_stats_k(float *lse, float *tlogit, const float *logits,
                                     const int32_t *targets, int V, int v0)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    const float *x = logits + n * V;
    if (tg < 0) {
        if (threadIdx.x == 0)
            lse[n] = tlogit[n] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, x[j]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        s += expf(x[j] - mx);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        lse[n] = logf(s) + mx;
        tlogit[n] = (t >= 0 && t < V) ? x[t] : 0.0f;
    }
}

/* dlogits += (exp(x - lse) - onehot(target - v0)) * scale; in place
 * (dlogits == logits: each thread reads its element before it writes it)
 * the gradient replaces the logits and a row with a negative target
 * becomes zero (kernels.h). */
__global__ void crossentropy_bwd_k(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, int V, int v0, float scale)
{
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    const bool in_place = dlogits == logits;
    const float *x = logits + n * V;
    float *dx = dlogits + n * V;
    if (tg < 0) {
        if (in_place)
            for (int j = threadIdx.x; j < V; j += blockDim.x)
                dx[j] = 0.0f;
        return;
    }
    const float l = lse[n];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float g = (expf(x[j] - l) - (j == t ? 1.0f : 0.0f)) * scale;
        dx[j] = in_place ? g : dx[j] + g;
    }
}

extern "C" {

int merak_cuda_launch_crossentropy_stats(void *stream, float *lse, float *tlogit,
                                         const float *logits, const int32_t *targets, int N,
                                         int V, int v0)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    crossentropy_stats_k<<<N, NT, 0, STREAM(stream)>>>(lse, tlogit, logits, targets, V, v0);
    return cudaGetLastError();
}

int merak_cuda_launch_crossentropy_bwd(void *stream, float *dlogits, const float *logits,
                                       const float *lse, const int32_t *targets, int N, int V,
                                       int v0, float scale)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    crossentropy_bwd_k<<<N, NT, 0, STREAM(stream)>>>(dlogits, logits, lse, targets, V, v0,
                                                     scale);
    return cudaGetLastError();
}

} /* extern "C" */
