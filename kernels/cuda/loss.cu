/*
 * loss.cu - cross-entropy over (a vocabulary shard of) the logits.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "cuda_common.cuh"

/* One block per row: lse[n] = logsumexp(x) over the shard (max subtracted),
 * tlogit[n] = x[target - v0] if the target is in the shard, else 0; a
 * negative target gives 0 for both.  T: float, or uint16_t (bf16 logits,
 * widened as they are read). */
template <typename T>
__global__ void crossentropy_stats_k(float *lse, float *tlogit, const T *logits,
                                     const int32_t *targets, int V, int v0)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    const T *x = logits + n * V;
    if (tg < 0) {
        if (threadIdx.x == 0)
            lse[n] = tlogit[n] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, as_f32(x[j]));
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        s += expf(as_f32(x[j]) - mx);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        lse[n] = logf(s) + mx;
        tlogit[n] = (t >= 0 && t < V) ? as_f32(x[t]) : 0.0f;
    }
}

/* dlogits += (exp(x - lse) - onehot(target - v0)) * scale; in place
 * (dlogits == logits: each thread reads its element before it writes it)
 * the gradient replaces the logits and a row with a negative target
 * becomes zero (kernels.h).  bf16 logits: the gradient rounded once. */
template <typename T>
__global__ void crossentropy_bwd_k(T *dlogits, const T *logits, const float *lse,
                                   const int32_t *targets, int V, int v0, float scale)
{
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    const bool in_place = dlogits == logits;
    const T *x = logits + n * V;
    T *dx = dlogits + n * V;
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
                    int V, int v0)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    crossentropy_stats_k<T><<<N, NT, 0, st>>>(lse, tlogit, logits, targets, V, v0);
    return cudaGetLastError();
}

template <typename T>
static int ce_bwd(cudaStream_t st, T *dlogits, const T *logits, const float *lse, const int32_t *targets, int N,
                  int V, int v0, float scale)
{
    if (N <= 0 || V <= 0)
        return cudaSuccess;
    crossentropy_bwd_k<T><<<N, NT, 0, st>>>(dlogits, logits, lse, targets, V, v0, scale);
    return cudaGetLastError();
}

extern "C" {

int merak_cuda_launch_crossentropy_stats(void *stream, float *lse, float *tlogit,
                                         const float *logits, const int32_t *targets, int N,
                                         int V, int v0)
{
    return ce_stats<float>(STREAM(stream), lse, tlogit, logits, targets, N, V, v0);
}

int merak_cuda_launch_crossentropy_bwd(void *stream, float *dlogits, const float *logits,
                                       const float *lse, const int32_t *targets, int N, int V,
                                       int v0, float scale)
{
    return ce_bwd<float>(STREAM(stream), dlogits, logits, lse, targets, N, V, v0, scale);
}

int merak_cuda_launch_crossentropy16_stats(void *stream, float *lse, float *tlogit, const uint16_t *logits,
                                           const int32_t *targets, int N, int V, int v0)
{
    return ce_stats<uint16_t>(STREAM(stream), lse, tlogit, logits, targets, N, V, v0);
}

int merak_cuda_launch_crossentropy16_bwd(void *stream, uint16_t *dlogits, const uint16_t *logits,
                                         const float *lse, const int32_t *targets, int N, int V, int v0,
                                         float scale)
{
    return ce_bwd<uint16_t>(STREAM(stream), dlogits, logits, lse, targets, N, V, v0, scale);
}

} /* extern "C" */
