/*
 * cuda_ops.cu - the device kernels of the CUDA backend and their launchers.
 *
 * Only kernels and the extern "C" launchers that enqueue them live here; the
 * table, cuBLASLt (the GEMMs of linear and attention), memory and error state are in
 * cuda_glue.c.  Shapes and semantics: kernels.h.
 *
 * Determinism: no kernel uses atomics on floats.  Every reduction runs in an
 * order fixed by the shapes alone (block size constants, fixed row chunks,
 * xor-shuffle trees), never by the device or the timing, so a call repeated
 * on the same inputs gives bitwise-identical outputs.  Backward kernels read
 * the gradient they accumulate into once and write it once (+=).
 */
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh> /* stable sort of token ids (embedding_bwd_w) */
#include <math.h>
#include <stdint.h>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"
#include "mix64.h"

/* Threads of every 1-D block (a multiple of 32; the reductions rely on it). */
#define NT 256
/* Column reductions: 32 columns x CR_Y row lanes per block, CR_ROWS rows per
 * chunk; the chunk partial sums are then added in chunk order. */
#define CR_Y 8
#define CR_ROWS 256
/* sumsq: a fixed grid, so the summation order does not depend on the GPU. */
#define SUMSQ_BLOCKS 256

#define STREAM(s) ((cudaStream_t)(s))

/* ------------------------------------------------------------------ helpers */

static unsigned ew_grid(size_t n)
{
    size_t b = (n + NT - 1) / NT;
    if (b > (1u << 20))
        b = 1u << 20;
    return b ? (unsigned)b : 1u;
}

#define GRID_STRIDE(i, n)                                                     \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);  \
         i += (size_t)gridDim.x * blockDim.x)

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
template <typename T> __device__ T block_sum(T v, T *sh)
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

__device__ float block_max(float v, float *sh)
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

/* ------------------------------------------------------------------ embedding */

/* out (N,C) = wte[ids - v0] ; wte (V,C), a shard of the vocabulary: ids
 * outside [v0, v0+V) give zero rows */
__global__ void embedding_fwd_k(float *out, const int32_t *ids, const float *wte, int N,
                                int C, int v0, int V)
{
    const size_t n = (size_t)N * C;
    GRID_STRIDE(i, n)
    {
        size_t row = i / C, c = i % C;
        const long long r = (long long)ids[row] - v0;
        out[i] = (r >= 0 && r < V) ? wte[(size_t)r * C + c] : 0.0f;
    }
}

__global__ void iota_k(int32_t *x, int N)
{
    GRID_STRIDE(i, (size_t)N) x[i] = (int32_t)i;
}

/* One block per position p of the stably sorted ids; the block at the start
 * of a run of equal ids adds the rows of that run, in increasing row order
 * (the order a sequential loop over rows would use), into dwte[id]. */
__global__ void embedding_bwd_runs_k(float *dwte, const float *dout, const int32_t *keys,
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
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dst[c];
        for (int r = p; r < q; r++)
            acc += dout[(size_t)rows[r] * C + c];
        dst[c] = acc;
    }
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* ------------------------------------------------------------------ posemb */

/* out (B,T,C) = inp + wpe[t] */
__global__ void posemb_fwd_k(float *out, const float *inp, const float *wpe, size_t n,
                             size_t TC)
{
    GRID_STRIDE(i, n) out[i] = inp[i] + wpe[i % TC];
}

/* dwpe[t,c] += sum over b (in order) of dout[b,t,c] */
__global__ void posemb_bwd_w_k(float *dwpe, const float *dout, int B, size_t TC)
{
    GRID_STRIDE(i, TC)
    {
        float acc = 0.0f;
        for (int b = 0; b < B; b++)
            acc += dout[(size_t)b * TC + i];
        dwpe[i] += acc;
    }
}

/* ------------------------------------------------------------------ norms */

/* One block per row n: out (N,C) = (x-mean)*rstd*w + b (two-pass variance). */
__global__ void layernorm_fwd_k(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int C, float eps)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const float *x = inp + n * C;
    float *y = out + n * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += x[c];
    const float m = block_sum(s, sh) / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = x[c] - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(block_sum(v, sh) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float o = (x[c] - m) * r * w[c];
        y[c] = b ? o + b[c] : o;
    }
    if (threadIdx.x == 0) {
        if (mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = r;
    }
}

/* dinp += (dnorm - mean(dnorm) - norm * mean(dnorm*norm)) * rstd, dnorm = dout*w */
__global__ void layernorm_bwd_x_k(float *dinp, const float *dout, const float *inp,
                                  const float *w, const float *mean, const float *rstd,
                                  int C)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const float *x = inp + n * C, *g = dout + n * C;
    float *dx = dinp + n * C;
    const float m = mean[n], r = rstd[n];
    float a = 0.0f, bb = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (x[c] - m) * r, dn = g[c] * w[c];
        a += dn;
        bb += dn * norm;
    }
    a = block_sum(a, sh) / C;
    bb = block_sum(bb, sh) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (x[c] - m) * r, dn = g[c] * w[c];
        dx[c] += (dn - a - norm * bb) * r;
    }
}

/* One block per row: rstd = 1/sqrt(mean(x^2)+eps), out = x*rstd*w */
__global__ void rmsnorm_fwd_k(float *out, float *rstd, const float *inp, const float *w,
                              int C, float eps)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const float *x = inp + n * C;
    float *y = out + n * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += x[c] * x[c];
    const float r = 1.0f / sqrtf(block_sum(s, sh) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        y[c] = x[c] * r * w[c];
    if (threadIdx.x == 0 && rstd)
        rstd[n] = r;
}

/* dinp += rstd*dout*w - x * rstd^3 * mean(dout*w*x) */
__global__ void rmsnorm_bwd_x_k(float *dinp, const float *dout, const float *inp,
                                const float *w, const float *rstd, int C)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const float *x = inp + n * C, *g = dout + n * C;
    float *dx = dinp + n * C;
    const float r = rstd[n];
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += g[c] * w[c] * x[c];
    const float k = block_sum(s, sh) / C * r * r * r;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dx[c] += r * g[c] * w[c] - x[c] * k;
}

/* ------------------------------------------------------------------ column reductions */

enum { CR_COLSUM = 0, CR_LAYERNORM = 1, CR_RMSNORM = 2 };

/* Stage 1: block (32 columns, CR_Y row lanes) x chunk of `rows` rows.
 * part0/part1 (nchunks, C): the chunk's partial sums of
 *   COLSUM:    dout                                   (part0)
 *   LAYERNORM: dout*(x-mean)*rstd (dw), dout (db)     (part0, part1)
 *   RMSNORM:   dout*x*rstd (dw)                       (part0)  */
template <int MODE>
__global__ void colred_partial_k(float *part0, float *part1, const float *dout,
                                 const float *inp, const float *mean, const float *rstd,
                                 int N, int C, int rows)
{
    __shared__ float s0[CR_Y][33], s1[CR_Y][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    const int r0 = blockIdx.y * rows;
    const int r1 = min(N, r0 + rows);
    float a0 = 0.0f, a1 = 0.0f;
    if (c < C) {
        for (int r = r0 + ty; r < r1; r += CR_Y) {
            const size_t idx = (size_t)r * C + c;
            const float d = dout[idx];
            if (MODE == CR_COLSUM) {
                a0 += d;
            } else if (MODE == CR_LAYERNORM) {
                a0 += d * ((inp[idx] - mean[r]) * rstd[r]);
                a1 += d;
            } else {
                a0 += d * (inp[idx] * rstd[r]);
            }
        }
    }
    s0[ty][tx] = a0;
    s1[ty][tx] = a1;
    __syncthreads();
    if (ty == 0 && c < C) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int y = 0; y < CR_Y; y++) {
            t0 += s0[y][tx];
            t1 += s1[y][tx];
        }
        part0[(size_t)blockIdx.y * C + c] = t0;
        if (MODE == CR_LAYERNORM)
            part1[(size_t)blockIdx.y * C + c] = t1;
    }
}

/* Stage 2: dst[c] += sum over chunks (in order) of part[k, c]; dst1 may be NULL. */
__global__ void colred_final_k(float *dst0, float *dst1, const float *part0,
                               const float *part1, int nchunks, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float t0 = 0.0f, t1 = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        t0 += part0[(size_t)k * C + c];
        if (dst1)
            t1 += part1[(size_t)k * C + c];
    }
    if (dst0)
        dst0[c] += t0;
    if (dst1)
        dst1[c] += t1;
}

/* Runs both stages; the chunking depends on N only. */
template <int MODE>
static int colred(cudaStream_t st, float *dst0, float *dst1, const float *dout,
                  const float *inp, const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    int rows = CR_ROWS;
    int nchunks = (N + rows - 1) / rows;
    while (nchunks > 65535) { /* gridDim.y limit: bigger chunks, still shape-only */
        rows *= 2;
        nchunks = (N + rows - 1) / rows;
    }
    const int nq = MODE == CR_LAYERNORM ? 2 : 1;
    float *part = (float *)merak_cuda_scratch((size_t)nq * nchunks * C * sizeof(float));
    if (!part)
        return cudaErrorMemoryAllocation;
    float *part1 = nq == 2 ? part + (size_t)nchunks * C : NULL;
    dim3 grid((C + 31) / 32, nchunks), block(32, CR_Y);
    colred_partial_k<MODE><<<grid, block, 0, st>>>(part, part1, dout, inp, mean, rstd, N, C,
                                                   rows);
    colred_final_k<<<(C + NT - 1) / NT, NT, 0, st>>>(dst0, MODE == CR_LAYERNORM ? dst1 : NULL,
                                                     part, part1, nchunks, C);
    return cudaGetLastError();
}

/* out (N,O) += b[o] */
__global__ void bias_add_k(float *out, const float *b, size_t n, int O)
{
    GRID_STRIDE(i, n) out[i] += b[i % O];
}

/* ------------------------------------------------------------------ attention */

struct attn_p {
    int B, T, nh, nkv, hd;
    float theta;   /* rope base, 0 = none */
};

/* cos/sin of the RoPE angle t * inv_freq[j], inv_freq[j] = 1/theta^(2j/hd),
 * all in float as Hugging Face (and the CPU backend) compute them. */
__device__ __forceinline__ void rope_cs(float theta, int t, int j, int hd, float *c,
                                        float *s)
{
    const float inv = 1.0f / powf(theta, (float)(2 * j) / (float)hd);
    const float ang = (float)t * inv;
    *c = cosf(ang);
    *s = sinf(ang);
}

/* row (hd) += g, the gradient of a row at position t taken with respect to
 * its rotated values, brought back through the rotation (with theta > 0):
 *   row[j] += g[j] cos + g[j+hd/2] sin ; row[j+hd/2] += g[j+hd/2] cos - g[j] sin
 * Block-wide; g may be in shared memory. */
__device__ void rope_bwd_add(float *row, const float *g, float theta, int t, int hd)
{
    if (theta > 0.0f) {
        const int half = hd / 2;
        for (int j = threadIdx.x; j < half; j += blockDim.x) {
            float c, s;
            rope_cs(theta, t, j, hd, &c, &s);
            const float g0 = g[j], g1 = g[j + half];
            row[j] += g0 * c + g1 * s;
            row[j + half] += g1 * c - g0 * s;
        }
    } else {
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            row[d] += g[d];
    }
}

/* The rows [pos, pos+T) of every batch row of a cache (B, cap, C) from
 * src (B*T rows of stride ss): element e of those B*T*C. */
__device__ __forceinline__ void cache_put(float *cache, const float *src, size_t e, int C, int ss,
                                          int T, int pos, int cap)
{
    const size_t bt = e / C, row = bt / T * cap + pos + bt % T;
    const int c = (int)(e % C);
    cache[row * C + c] = src[bt * ss + c];
}

/* Queries and keys of B*T token rows at positions pos + t.  With RoPE
 * (theta > 0): Q (B,T,nh*hd) = q rotated and kc's rows [pos, pos+T) (kc
 * (B,cap,nkv*hd)) = k rotated, pair by pair:
 *   x'[j] = x[j] cos - x[j+hd/2] sin ; x'[j+hd/2] = x[j+hd/2] cos + x[j] sin
 * Without RoPE, Q is not written (the queries are q) and k is copied into
 * kc element by element.  With vc, v goes into vc's rows the same way.
 * q, k, v have row strides qs, ks, vs.  Training's RoPE: pos 0, cap T, no
 * vc (qr, kr saved for the backward); decoding: the key/value cache. */
__global__ void qkv_rows_k(float *Q, float *kc, float *vc, const float *q, const float *k,
                           const float *v, attn_p p, int qs, int ks, int vs, int pos, int cap)
{
    const int half = p.hd / 2, heads = p.nh + p.nkv, Ckv = p.nkv * p.hd;
    const size_t BT = (size_t)p.B * p.T;
    const size_t nrot = p.theta > 0.0f ? BT * heads * half : 0, nk = p.theta > 0.0f ? 0 : BT * Ckv;
    const size_t n = nrot + nk + (vc ? BT * Ckv : 0);
    GRID_STRIDE(i, n)
    {
        if (i >= nrot + nk) {
            cache_put(vc, v, i - nrot - nk, Ckv, vs, p.T, pos, cap);
            continue;
        }
        if (i >= nrot) {
            cache_put(kc, k, i - nrot, Ckv, ks, p.T, pos, cap);
            continue;
        }
        const int j = (int)(i % half);
        const size_t rest = i / half;
        const int hh = (int)(rest % heads);
        const size_t bt = rest / heads;
        const int t = pos + (int)(bt % p.T);
        const float *src;
        float *dst;
        if (hh < p.nh) {
            src = q + bt * qs + (size_t)hh * p.hd;
            dst = Q + bt * p.nh * p.hd + (size_t)hh * p.hd;
        } else {
            src = k + bt * ks + (size_t)(hh - p.nh) * p.hd;
            dst = kc + (bt / p.T * cap + t) * Ckv + (size_t)(hh - p.nh) * p.hd;
        }
        float c, s;
        rope_cs(p.theta, t, j, p.hd, &c, &s);
        const float x0 = src[j], x1 = src[j + half];
        dst[j] = x0 * c - x1 * s;
        dst[j + half] = x1 * c + x0 * s;
    }
}

/* Causal softmax of the score rows P (rows of L scores; row r is query
 * i = pos + r % T), in place: P[0..i] becomes softmax(P[0..i]), P[i+1..L)
 * zero; lse[r] (unless NULL) = the log-sum-exp of P[0..i].  Training: L = T,
 * pos = 0.  One block per row; each thread reads and writes its own
 * elements. */
__global__ void attn_softmax_k(float *P, float *lse, int T, int L, int pos)
{
    __shared__ float red[33];
    const size_t row = blockIdx.x;
    const int i = pos + (int)(row % (size_t)T);
    float *p = P + row * (size_t)L;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= i; j += blockDim.x)
        mx = fmaxf(mx, p[j]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float e = expf(p[j] - mx);
        p[j] = e;
        sum += e;
    }
    const float tot = block_sum(sum, red), inv = 1.0f / tot;
    if (lse && threadIdx.x == 0)
        lse[row] = mx + logf(tot);
    for (int j = threadIdx.x; j < L; j += blockDim.x)
        p[j] = j <= i ? p[j] * inv : 0.0f;
}

/* The probabilities rebuilt from the scores (rows of T) and each row's
 * log-sum-exp, in place: P[j] = exp(P[j] - lse[r]) for j <= i = r % T,
 * zero after.  One block per row. */
__global__ void attn_probs_k(float *P, const float *lse, int T)
{
    const size_t row = blockIdx.x;
    const int i = (int)(row % (size_t)T);
    const float l = lse[row];
    float *p = P + row * (size_t)T;
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        p[j] = j <= i ? expf(p[j] - l) : 0.0f;
}

/* dS (rows of T, holding dP = dout V^T) := P (dP - sum_j P dP) scale on the
 * causal part, zero above it.  One block per row. */
__global__ void attn_dsoftmax_k(float *dS, const float *P, int T, float scale)
{
    __shared__ float red[33];
    const size_t row = blockIdx.x;
    const int i = (int)(row % (size_t)T);
    const float *p = P + row * (size_t)T;
    float *ds = dS + row * (size_t)T;
    float acc = 0.0f;
    for (int j = threadIdx.x; j <= i; j += blockDim.x)
        acc += p[j] * ds[j];
    const float tot = block_sum(acc, red);
    for (int j = threadIdx.x; j < T; j += blockDim.x)
        ds[j] = j <= i ? p[j] * (ds[j] - tot) * scale : 0.0f;
}

/* One block per token row bt: dq += rot^T(dQ), dk += rot^T(dK) for every
 * head (plain adds without RoPE), dv += dV.  dQ (B,T,nh*hd), dK and dV
 * (B,T,nkv*hd) are dense; dq, dk, dv have the row strides of q, k, v. */
__global__ void attn_bwd_add_k(float *dq, float *dk, float *dv, const float *dQ,
                               const float *dK, const float *dV, attn_p p, int dqs, int dks,
                               int dvs)
{
    const size_t bt = blockIdx.x;
    const int t = (int)(bt % (size_t)p.T), hd = p.hd, C = p.nh * hd, Ckv = p.nkv * hd;
    for (int h = 0; h < p.nh; h++)
        rope_bwd_add(dq + bt * dqs + (size_t)h * hd, dQ + bt * C + (size_t)h * hd, p.theta, t,
                     hd);
    for (int g = 0; g < p.nkv; g++)
        rope_bwd_add(dk + bt * dks + (size_t)g * hd, dK + bt * Ckv + (size_t)g * hd, p.theta,
                     t, hd);
    for (int c = threadIdx.x; c < Ckv; c += blockDim.x)
        dv[bt * dvs + c] += dV[bt * Ckv + c];
}

static attn_p attn_params(const merak_attn_shape *s)
{
    attn_p p;
    p.B = s->B;
    p.T = s->T;
    p.nh = s->n_head;
    p.nkv = s->n_kv_head;
    p.hd = s->head_dim;
    p.theta = s->rope_theta;
    return p;
}

/* ------------------------------------------------------------------ pointwise */

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


/* ------------------------------------------------------------------ cross-entropy */

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

/* dlogits += (exp(x - lse) - onehot(target - v0)) * scale */
__global__ void crossentropy_bwd_k(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, int V, int v0, float scale)
{
    const size_t n = blockIdx.x;
    const long long tg = targets[n], t = tg - v0;
    if (tg < 0)
        return;
    const float *x = logits + n * V;
    float *dx = dlogits + n * V;
    const float l = lse[n];
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        dx[j] += (expf(x[j] - l) - (j == t ? 1.0f : 0.0f)) * scale;
}

/* ------------------------------------------------------------------ optimizer, norms */

/* torch.optim.AdamW (single-tensor path), scalars formed on the host in
 * double and rounded to float, as torch does with Python-float arguments:
 *   p *= decay (= 1 - lr*wd)
 *   m = lerp(m, g, w1), w1 = 1-b1 (torch's lerp: the weight < 0.5 form and
 *       its mirror, as the CPU backend writes it)
 *   v = v*b2 + c2*g*g, c2 = 1-b2
 *   p += nstep * m / (sqrt(v)/bc2_sqrt + eps), nstep = -lr/(1-b1^t) */
__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float decay,
                        float w1, float b2, float c2, float nstep, float bc2_sqrt, float eps)
{
    const bool small = fabsf(w1) < 0.5f;
    const float c1 = 1.0f - w1;
    GRID_STRIDE(i, n)
    {
        const float gi = g[i];
        float mi = m[i];
        mi = small ? mi + w1 * (gi - mi) : gi - (gi - mi) * c1;
        const float vi = v[i] * b2 + c2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay + nstep * mi / denom;
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

/* ================================================================== launchers */

extern "C" {

int merak_cuda_launch_embedding_fwd(void *stream, float *out, const int32_t *ids,
                                    const float *wte, int N, int C, int v0, int V)
{
    const size_t n = (size_t)N * C;
    if (n == 0)
        return cudaSuccess;
    embedding_fwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, ids, wte, N, C, v0, V);
    return cudaGetLastError();
}

/* dwte (V,C) += dout (N,C) scattered by ids: a stable radix sort of the ids
 * (rows keep their order within an id), then one block per run of equal ids. */
int merak_cuda_launch_embedding_bwd_w(void *stream, float *dwte, const float *dout,
                                      const int32_t *ids, int N, int C, int v0, int V)
{
    cudaStream_t st = STREAM(stream);
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
    embedding_bwd_runs_k<<<N, NT, 0, st>>>(dwte, dout, keys, rows, N, C, v0, V);
    return cudaGetLastError();
}

int merak_cuda_launch_posemb_fwd(void *stream, float *out, const float *inp,
                                 const float *wpe, int B, int T, int C)
{
    const size_t TC = (size_t)T * C, n = (size_t)B * TC;
    if (n == 0)
        return cudaSuccess;
    posemb_fwd_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, inp, wpe, n, TC);
    return cudaGetLastError();
}

int merak_cuda_launch_posemb_bwd_w(void *stream, float *dwpe, const float *dout, int B,
                                   int T, int C)
{
    const size_t TC = (size_t)T * C;
    if (TC == 0 || B <= 0)
        return cudaSuccess;
    posemb_bwd_w_k<<<ew_grid(TC), NT, 0, STREAM(stream)>>>(dwpe, dout, B, TC);
    return cudaGetLastError();
}

int merak_cuda_launch_layernorm_fwd(void *stream, float *out, float *mean, float *rstd,
                                    const float *inp, const float *w, const float *b,
                                    int N, int C, float eps)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    layernorm_fwd_k<<<N, NT, 0, STREAM(stream)>>>(out, mean, rstd, inp, w, b, C, eps);
    return cudaGetLastError();
}

int merak_cuda_launch_layernorm_bwd_x(void *stream, float *dinp, const float *dout,
                                      const float *inp, const float *w,
                                      const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    layernorm_bwd_x_k<<<N, NT, 0, STREAM(stream)>>>(dinp, dout, inp, w, mean, rstd, C);
    return cudaGetLastError();
}

int merak_cuda_launch_layernorm_bwd_w(void *stream, float *dw, float *db,
                                      const float *dout, const float *inp,
                                      const float *mean, const float *rstd, int N, int C)
{
    return colred<CR_LAYERNORM>(STREAM(stream), dw, db, dout, inp, mean, rstd, N, C);
}

int merak_cuda_launch_rmsnorm_fwd(void *stream, float *out, float *rstd, const float *inp,
                                  const float *w, int N, int C, float eps)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    rmsnorm_fwd_k<<<N, NT, 0, STREAM(stream)>>>(out, rstd, inp, w, C, eps);
    return cudaGetLastError();
}

int merak_cuda_launch_rmsnorm_bwd_x(void *stream, float *dinp, const float *dout,
                                    const float *inp, const float *w, const float *rstd,
                                    int N, int C)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    rmsnorm_bwd_x_k<<<N, NT, 0, STREAM(stream)>>>(dinp, dout, inp, w, rstd, C);
    return cudaGetLastError();
}

int merak_cuda_launch_rmsnorm_bwd_w(void *stream, float *dw, const float *dout,
                                    const float *inp, const float *rstd, int N, int C)
{
    return colred<CR_RMSNORM>(STREAM(stream), dw, NULL, dout, inp, NULL, rstd, N, C);
}

int merak_cuda_launch_bias_add(void *stream, float *out, const float *b, int N, int O)
{
    const size_t n = (size_t)N * O;
    if (n == 0)
        return cudaSuccess;
    bias_add_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, b, n, O);
    return cudaGetLastError();
}

int merak_cuda_launch_colsum(void *stream, float *db, const float *dout, int N, int O)
{
    return colred<CR_COLSUM>(STREAM(stream), db, NULL, dout, NULL, NULL, NULL, N, O);
}

int merak_cuda_launch_rope_fwd(void *stream, const merak_attn_shape *s, float *qr, float *kr,
                               const float *q, const float *k)
{
    const attn_p p = attn_params(s);
    const size_t n = (size_t)p.B * p.T * (p.nh + p.nkv) * (p.hd / 2);
    if (n)
        qkv_rows_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(qr, kr, NULL, q, k, NULL, p, s->q_stride,
                                                           s->k_stride, 0, 0, p.T);
    return cudaGetLastError();
}

int merak_cuda_launch_attn_softmax(void *stream, float *P, float *lse, size_t rows, int T, int L,
                                   int pos)
{
    if (rows)
        attn_softmax_k<<<(unsigned)rows, NT, 0, STREAM(stream)>>>(P, lse, T, L, pos);
    return cudaGetLastError();
}

int merak_cuda_launch_attn_probs(void *stream, float *P, const float *lse, size_t rows, int T)
{
    if (rows)
        attn_probs_k<<<(unsigned)rows, NT, 0, STREAM(stream)>>>(P, lse, T);
    return cudaGetLastError();
}

int merak_cuda_launch_kv_append(void *stream, const merak_attn_shape *s, int pos, int cap,
                                float *Q, float *kc, float *vc, const float *q, const float *k,
                                const float *v)
{
    const attn_p p = attn_params(s);
    const int rows = p.theta > 0.0f ? (p.nh + p.nkv) * (p.hd / 2) : p.nkv * p.hd; /* q, k */
    const size_t n = (size_t)p.B * p.T * (rows + p.nkv * p.hd);
    if (n)
        qkv_rows_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(Q, kc, vc, q, k, v, p, s->q_stride,
                                                           s->k_stride, s->v_stride, pos, cap);
    return cudaGetLastError();
}

int merak_cuda_launch_attn_dsoftmax(void *stream, float *dS, const float *P, size_t rows,
                                    int T, float scale)
{
    if (rows)
        attn_dsoftmax_k<<<(unsigned)rows, NT, 0, STREAM(stream)>>>(dS, P, T, scale);
    return cudaGetLastError();
}

int merak_cuda_launch_attn_bwd_add(void *stream, const merak_attn_shape *s, float *dq,
                                   float *dk, float *dv, const float *dQ, const float *dK,
                                   const float *dV)
{
    const attn_p p = attn_params(s);
    const size_t rows = (size_t)p.B * p.T;
    if (rows)
        attn_bwd_add_k<<<(unsigned)rows, NT, 0, STREAM(stream)>>>(
            dq, dk, dv, dQ, dK, dV, p, s->q_stride, s->k_stride, s->v_stride);
    return cudaGetLastError();
}

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

int merak_cuda_launch_adamw(void *stream, float *p, const float *g, float *m, float *v,
                            size_t n, float decay, float w1, float beta2, float c2,
                            float nstep, float bc2_sqrt, float eps)
{
    if (n == 0)
        return cudaSuccess;
    adamw_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(p, g, m, v, n, decay, w1, beta2, c2,
                                                   nstep, bc2_sqrt, eps);
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

int merak_cuda_launch_scale(void *stream, float *x, size_t n, float s)
{
    if (n == 0)
        return cudaSuccess;
    scale_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(x, n, s);
    return cudaGetLastError();
}

} /* extern "C" */
