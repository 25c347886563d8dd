/*
 * optim.cu - AdamW and the sum of squares of the gradient norm.
 *
 * Both 16 bytes a load where the buffers allow.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "cuda_common.cuh"

/* sumsq: a fixed grid, so the summation order does not depend on the GPU
 * (it depends on x's offset within 16 bytes, which the gradients' flat
 * buffer fixes). */
#define SUMSQ_BLOCKS 256

/* torch.optim.AdamW (single-tensor path), scalars formed on the host in
 * double and rounded to float, as torch does with Python-float arguments:
 *   p *= decay (= 1 - lr*wd)
 *   m = lerp(m, g, w1), w1 = 1-b1 (torch's lerp: the weight < 0.5 form and
 *       its mirror, as the CPU backend writes it)
 *   v = v*b2 + c2*g*g, c2 = 1-b2
 *   p += nstep * m / (sqrt(v)/bc2_sqrt + eps), nstep = -lr/(1-b1^t) */
struct adamw_c {
    float decay, w1, c1, b2, c2, nstep, bc2_sqrt, eps;
    bool small;
};

/* One element: the updated p, m and v from p, g, m, v. */
static __device__ __forceinline__ void adamw1(const adamw_c &c, float dec, float &p, float g, float &m, float &v)
{
    m = c.small ? m + c.w1 * (g - m) : g - (g - m) * c.c1;
    v = v * c.b2 + c.c2 * g * g;
    const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
    p = p * dec + c.nstep * m / denom;
}

/* One block per span.  Where the span's p, g, m and v start on 16 bytes
 * (and its compute copies on 8), four elements a thread with 16-byte
 * loads and stores, the last n % 4 one at a time; else one at a time.
 * Elementwise either way: the same bits. */
__global__ void adamw_k(float *p, const float *g, float *m, float *v, const merak_adamw_span *spans, adamw_c c,
                        uint16_t *p16)
{
    const merak_adamw_span sp = spans[blockIdx.x];
    const float dec = sp.decay ? c.decay : 1.0f;
    float *ps = p + sp.at, *ms = m + sp.m_at, *vs = v + sp.m_at;
    const float *gs = g + sp.at;
    uint16_t *cs = p16 ? p16 + sp.at : NULL; /* the bf16 compute copies, rounded in this pass */
    const bool vec = !(((uintptr_t)ps | (uintptr_t)gs | (uintptr_t)ms | (uintptr_t)vs) & 15) &&
                     !((uintptr_t)cs & 7);
    const size_t n4 = vec ? sp.n / 4 : 0;
    for (size_t i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 pv = reinterpret_cast<float4 *>(ps)[i], mv = reinterpret_cast<float4 *>(ms)[i],
               vv = reinterpret_cast<float4 *>(vs)[i];
        const float4 gv = reinterpret_cast<const float4 *>(gs)[i];
        adamw1(c, dec, pv.x, gv.x, mv.x, vv.x);
        adamw1(c, dec, pv.y, gv.y, mv.y, vv.y);
        adamw1(c, dec, pv.z, gv.z, mv.z, vv.z);
        adamw1(c, dec, pv.w, gv.w, mv.w, vv.w);
        reinterpret_cast<float4 *>(ps)[i] = pv;
        reinterpret_cast<float4 *>(ms)[i] = mv;
        reinterpret_cast<float4 *>(vs)[i] = vv;
        if (cs)
            reinterpret_cast<uint2 *>(cs)[i] =
                make_uint2((uint32_t)merak_f32_to_bf16(pv.x) | (uint32_t)merak_f32_to_bf16(pv.y) << 16,
                           (uint32_t)merak_f32_to_bf16(pv.z) | (uint32_t)merak_f32_to_bf16(pv.w) << 16);
    }
    for (size_t i = 4 * n4 + threadIdx.x; i < sp.n; i += blockDim.x) {
        float pi = ps[i], mi = ms[i], vi = vs[i];
        adamw1(c, dec, pi, gs[i], mi, vi);
        ms[i] = mi;
        vs[i] = vi;
        ps[i] = pi;
        if (cs)
            cs[i] = merak_f32_to_bf16(pi);
    }
}

/* Stage 1 of sumsq: SUMSQ_BLOCKS fixed blocks, each a double partial; the
 * elements before x's first 16-byte boundary (head) and past its last
 * whole float4 one at a time, the rest four at a time. */
__global__ void sumsq_partial_k(double *part, const float *x, size_t head, size_t n4, size_t n)
{
    __shared__ double sh[33];
    double acc = 0.0;
    const float4 *x4 = reinterpret_cast<const float4 *>(x + head);
    /* four vectors in flight a thread, added in the order of one at a
     * time (i, i + stride, ...): the same bits */
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 q[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            q[u] = x4[i + u * stride];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            acc += (double)q[u].x * q[u].x;
            acc += (double)q[u].y * q[u].y;
            acc += (double)q[u].z * q[u].z;
            acc += (double)q[u].w * q[u].w;
        }
    }
    for (; i < n4; i += stride) {
        const float4 q = x4[i];
        acc += (double)q.x * q.x;
        acc += (double)q.y * q.y;
        acc += (double)q.z * q.z;
        acc += (double)q.w * q.w;
    }
    GRID_STRIDE(j, n - 4 * n4)
    {
        const double xi = x[j < head ? j : j + 4 * n4];
        acc += xi * xi;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = acc;
}

__global__ void sumsq_final_k(double *result, const double *part)
{
    __shared__ double sh[33];
    double acc = 0.0;
    for (int k = threadIdx.x; k < SUMSQ_BLOCKS; k += blockDim.x)
        acc += part[k];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0)
        *result = acc;
}

extern "C" {

int merak_cuda_launch_adamw(void *stream, float *p, const float *g, float *m, float *v,
                            const merak_adamw_span *spans, int nspans, float decay, float w1,
                            float beta2, float c2, float nstep, float bc2_sqrt, float eps, uint16_t *p16)
{
    if (nspans <= 0)
        return cudaSuccess;
    const adamw_c c = {decay, w1, 1.0f - w1, beta2, c2, nstep, bc2_sqrt, eps, fabsf(w1) < 0.5f};
    adamw_k<<<(unsigned)nspans, NT, 0, STREAM(stream)>>>(p, g, m, v, spans, c, p16);
    return cudaGetLastError();
}

int merak_cuda_launch_sumsq(void *stream, double *result, const float *x, size_t n)
{
    cudaStream_t st = STREAM(stream);
    double *part = (double *)merak_cuda_scratch(SUMSQ_BLOCKS * sizeof(double));
    if (!part)
        return cudaErrorMemoryAllocation;
    size_t head = (size_t)((16 - (uintptr_t)x % 16) % 16) / sizeof(float);
    head = head < n ? head : n;
    const size_t n4 = (n - head) / 4;
    sumsq_partial_k<<<SUMSQ_BLOCKS, NT, 0, st>>>(part, x, head, n4, n);
    sumsq_final_k<<<1, NT, 0, st>>>(result, part);
    return cudaGetLastError();
}

} /* extern "C" */
