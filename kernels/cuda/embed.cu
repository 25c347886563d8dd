/*
 * embed.cu - token and position embeddings, forward and weight gradient:
 * 16 bytes a load where the width is whole vectors and the buffers are
 * aligned (rowwise.h), else an element a thread.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include <cub/device/device_radix_sort.cuh> /* stable sort of token ids (embedding_bwd_w) */

#include "cuda_common.cuh"
#include "rowwise.h"

/* The vectorised kernels (rowwise.h): a 16-byte vector a thread. */
template <int B16>
__global__ void embedding_fwd_v_k(void *out, const int32_t *ids, const void *wte, int C, int v0, int V, size_t nv)
{
    GRID_STRIDE(v, nv) rw_embedding_fwd(out, ids, wte, C, v0, V, v, B16);
}

template <int B16>
__global__ void posemb_fwd_v_k(void *out, const void *inp, const void *wpe, size_t TC, size_t nv)
{
    GRID_STRIDE(v, nv) rw_posemb_fwd(out, inp, wpe, TC, v, B16);
}

template <int B16>
__global__ void posemb_bwd_w_v_k(float *dwpe, const void *dout, int B, size_t TC, size_t nv)
{
    GRID_STRIDE(v, nv) rw_posemb_bwd_w(dwpe, dout, B, TC, v, B16);
}

/* out (N,C) = wte[ids - v0] ; wte (V,C), a shard of the vocabulary: ids
 * outside [v0, v0+V) give zero rows.  T: float, or uint16_t (bf16
 * storage: the bits copied) */
template <typename T>
__global__ void embedding_fwd_k(T *out, const int32_t *ids, const T *wte, int N, int C, int v0,
                                int V)
{
    const size_t n = (size_t)N * C;
    GRID_STRIDE(i, n)
    {
        size_t row = i / C, c = i % C;
        const long long r = (long long)ids[row] - v0;
        out[i] = (r >= 0 && r < V) ? wte[(size_t)r * C + c] : (T)0;
    }
}

__global__ void iota_k(int32_t *x, int N)
{
    GRID_STRIDE(i, (size_t)N) x[i] = (int32_t)i;
}

/* One block per position p of the stably sorted ids; the block at the start
 * of a run of equal ids adds the rows of that run, in increasing row order
 * (the order a sequential loop over rows would use), into dwte[id]: a
 * vector of columns a thread (VEC), else a column. */
template <typename T, int VEC>
__global__ void embedding_bwd_runs_k(float *dwte, const T *dout, const int32_t *keys,
                                     const int32_t *rows, int N, int C, int v0, int V)
{
    const int p = blockIdx.x;
    const int32_t id = keys[p];
    if ((p > 0 && keys[p - 1] == id) || (long long)id - v0 < 0 || (long long)id - v0 >= V)
        return;
    int q = p + 1;
    while (q < N && keys[q] == id)
        q++;
    float *dst = dwte + (size_t)(id - v0) * C;
    if (VEC) {
        for (int j = threadIdx.x; j < C / RW_E(sizeof(T) == 2); j += blockDim.x)
            rw_embedding_bwd_run(dst, dout, rows, p, q, C, j, sizeof(T) == 2);
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = dst[c];
            for (int r = p; r < q; r++)
                acc += as_f32(dout[(size_t)rows[r] * C + c]);
            dst[c] = acc;
        }
    }
}

/* out (B,T,C) = inp + wpe[t] (T: float, or bf16 storage rounded once) */
template <typename T>
__global__ void posemb_fwd_k(T *out, const T *inp, const T *wpe, size_t n, size_t TC)
{
    GRID_STRIDE(i, n) put(out + i, as_f32(inp[i]) + as_f32(wpe[i % TC]));
}

/* dwpe[t,c] += sum over b (in order) of dout[b,t,c] */
template <typename T>
__global__ void posemb_bwd_w_k(float *dwpe, const T *dout, int B, size_t TC)
{
    GRID_STRIDE(i, TC)
    {
        float acc = 0.0f;
        for (int b = 0; b < B; b++)
            acc += as_f32(dout[(size_t)b * TC + i]);
        dwpe[i] += acc;
    }
}

template <typename T>
static int posemb_fwd(cudaStream_t st, T *out, const T *inp, const T *wpe, int B, int T_, int C)
{
    const size_t TC = (size_t)T_ * C, n = (size_t)B * TC;
    if (n == 0)
        return cudaSuccess;
    const int B16 = sizeof(T) == 2;
    if (rw_embed_takes(C, B16, out, inp, wpe)) {
        const size_t nv = n / RW_E(B16);
        posemb_fwd_v_k<sizeof(T) == 2><<<ew_grid(nv), NT, 0, st>>>(out, inp, wpe, TC, nv);
    } else {
        posemb_fwd_k<T><<<ew_grid(n), NT, 0, st>>>(out, inp, wpe, n, TC);
    }
    return cudaGetLastError();
}

template <typename T>
static int posemb_bwd_w(cudaStream_t st, float *dwpe, const T *dout, int B, int T_, int C)
{
    const size_t TC = (size_t)T_ * C;
    if (TC == 0 || B <= 0)
        return cudaSuccess;
    const int B16 = sizeof(T) == 2;
    if (rw_embed_takes(C, B16, dwpe, dout, NULL)) {
        const size_t nv = TC / RW_E(B16);
        posemb_bwd_w_v_k<sizeof(T) == 2><<<ew_grid(nv), NT, 0, st>>>(dwpe, dout, B, TC, nv);
    } else {
        posemb_bwd_w_k<T><<<ew_grid(TC), NT, 0, st>>>(dwpe, dout, B, TC);
    }
    return cudaGetLastError();
}

template <typename T>
static int embedding_fwd(cudaStream_t st, T *out, const int32_t *ids, const T *wte, int N, int C,
                         int v0, int V)
{
    const size_t n = (size_t)N * C;
    if (n == 0)
        return cudaSuccess;
    const int B16 = sizeof(T) == 2;
    if (rw_embed_takes(C, B16, out, wte, NULL)) {
        const size_t nv = n / RW_E(B16);
        embedding_fwd_v_k<sizeof(T) == 2><<<ew_grid(nv), NT, 0, st>>>(out, ids, wte, C, v0, V, nv);
    } else {
        embedding_fwd_k<T><<<ew_grid(n), NT, 0, st>>>(out, ids, wte, N, C, v0, V);
    }
    return cudaGetLastError();
}

/* dwte (V,C) += dout (N,C) scattered by ids: a stable radix sort of the ids
 * (rows keep their order within an id), then one block per run of equal ids. */
template <typename T>
static int embedding_bwd_w(cudaStream_t st, float *dwte, const T *dout, const int32_t *ids, int N,
                           int C, int v0, int V)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    size_t temp = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(NULL, temp, (const int32_t *)NULL,
                                                    (int32_t *)NULL, (const int32_t *)NULL,
                                                    (int32_t *)NULL, N, 0, 32, st);
    if (e != cudaSuccess)
        return e;
    const size_t a = align256((size_t)N * sizeof(int32_t));
    char *ws = (char *)merak_cuda_scratch(3 * a + align256(temp));
    if (!ws)
        return cudaErrorMemoryAllocation;
    int32_t *keys = (int32_t *)ws, *rows_in = (int32_t *)(ws + a),
            *rows = (int32_t *)(ws + 2 * a);
    void *tmp = ws + 3 * a;
    iota_k<<<ew_grid((size_t)N), NT, 0, st>>>(rows_in, N);
    e = cub::DeviceRadixSort::SortPairs(tmp, temp, ids, keys, rows_in, rows, N, 0, 32, st);
    if (e != cudaSuccess)
        return e;
    if (rw_embed_takes(C, sizeof(T) == 2, dwte, dout, NULL))
        embedding_bwd_runs_k<T, 1><<<N, NT, 0, st>>>(dwte, dout, keys, rows, N, C, v0, V);
    else
        embedding_bwd_runs_k<T, 0><<<N, NT, 0, st>>>(dwte, dout, keys, rows, N, C, v0, V);
    return cudaGetLastError();
}

extern "C" {

int merak_cuda_launch_embedding_fwd(void *stream, float *out, const int32_t *ids,
                                    const float *wte, int N, int C, int v0, int V)
{
    return embedding_fwd<float>(STREAM(stream), out, ids, wte, N, C, v0, V);
}

int merak_cuda_launch_embedding16_fwd(void *stream, uint16_t *out, const int32_t *ids,
                                      const uint16_t *wte, int N, int C, int v0, int V)
{
    return embedding_fwd<uint16_t>(STREAM(stream), out, ids, wte, N, C, v0, V);
}

int merak_cuda_launch_embedding_bwd_w(void *stream, float *dwte, const float *dout,
                                      const int32_t *ids, int N, int C, int v0, int V)
{
    return embedding_bwd_w<float>(STREAM(stream), dwte, dout, ids, N, C, v0, V);
}

int merak_cuda_launch_embedding16_bwd_w(void *stream, float *dwte, const uint16_t *dout,
                                        const int32_t *ids, int N, int C, int v0, int V)
{
    return embedding_bwd_w<uint16_t>(STREAM(stream), dwte, dout, ids, N, C, v0, V);
}

int merak_cuda_launch_posemb_fwd(void *stream, float *out, const float *inp,
                                 const float *wpe, int B, int T, int C)
{
    return posemb_fwd<float>(STREAM(stream), out, inp, wpe, B, T, C);
}

int merak_cuda_launch_posemb_bwd_w(void *stream, float *dwpe, const float *dout, int B,
                                   int T, int C)
{
    return posemb_bwd_w<float>(STREAM(stream), dwpe, dout, B, T, C);
}

int merak_cuda_launch_posemb16_fwd(void *stream, uint16_t *out, const uint16_t *inp, const uint16_t *wpe, int B,
                                   int T, int C)
{
    return posemb_fwd<uint16_t>(STREAM(stream), out, inp, wpe, B, T, C);
}

int merak_cuda_launch_posemb16_bwd_w(void *stream, float *dwpe, const uint16_t *dout, int B, int T, int C)
{
    return posemb_bwd_w<uint16_t>(STREAM(stream), dwpe, dout, B, T, C);
}

} /* extern "C" */
