/*
 * optim.cu - AdamW and the sum of squares of the gradient norm.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "cuda_common.cuh"

/* sumsq: a fixed grid, so the summation order does not depend on the GPU. */
#define SUMSQ_BLOCKS 256

/* torch.optim.AdamW (single-tensor path), scalars formed on the host in
 * double and rounded to float, as torch does with Python-float arguments:
 *   p *= decay (= 1 - lr*wd)
 *   m = lerp(m, g, w1), w1 = 1-b1 (torch's lerp: the weight < 0.5 form and
 *       its mirror, as the CPU backend writes it)
 *   v = v*b2 + c2*g*g, c2 = 1-b2
 *   p += nstep * m / (sqrt(v)/bc2_sqrt + eps), nstep = -lr/(1-b1^t) */
__global__ void adamw_k(float *p, const float *g, float *m, float *v,
                        const merak_adamw_span *spans, float decay, float w1, float b2, float c2,
                        float nstep, float bc2_sqrt, float eps, uint16_t *p16)
{
    const merak_adamw_span sp = spans[blockIdx.x]; /* one block per span */
    const bool small = fabsf(w1) < 0.5f;
    const float c1 = 1.0f - w1, dec = sp.decay ? decay : 1.0f;
    float *ps = p + sp.at, *ms = m + sp.m_at, *vs = v + sp.m_at;
    const float *gs = g + sp.at;
    uint16_t *cs = p16 ? p16 + sp.at : NULL;   /* the bf16 compute copies, rounded in this pass */
    for (size_t i = threadIdx.x; i < sp.n; i += blockDim.x) {
        const float gi = gs[i];
        float mi = ms[i];
        mi = small ? mi + w1 * (gi - mi) : gi - (gi - mi) * c1;
        const float vi = vs[i] * b2 + c2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        ms[i] = mi;
        vs[i] = vi;
        const float pi = ps[i] * dec + nstep * mi / denom;
        ps[i] = pi;
        if (cs)
            cs[i] = merak_f32_to_bf16(pi);
    }
}

/* Stage 1 of sumsq: SUMSQ_BLOCKS fixed blocks, each a double partial. */
__global__ void sumsq_partial_k(double *part, const float *x, size_t n)
{
    __shared__ double sh[33];
    double acc = 0.0;
    GRID_STRIDE(i, n)
    {
        const double xi = x[i];
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
    adamw_k<<<(unsigned)nspans, NT, 0, STREAM(stream)>>>(p, g, m, v, spans, decay, w1, beta2, c2,
                                                        nstep, bc2_sqrt, eps, p16);
    return cudaGetLastError();
}

int merak_cuda_launch_sumsq(void *stream, double *result, const float *x, size_t n)
{
    cudaStream_t st = STREAM(stream);
    double *part = (double *)merak_cuda_scratch(SUMSQ_BLOCKS * sizeof(double));
    if (!part)
        return cudaErrorMemoryAllocation;
    sumsq_partial_k<<<SUMSQ_BLOCKS, NT, 0, st>>>(part, x, n);
    sumsq_final_k<<<1, NT, 0, st>>>(result, part);
    return cudaGetLastError();
}

} /* extern "C" */
