/*
 * attention.cu - causal attention: the fused kernels (flash.h: forward,
 * dq, dk and dv, one row per thread, no T x T matrix) for head dimensions
 * up to FLASH_HD, and for the others and for decoding the pieces around
 * cuBLASLt products (cuda_glue.c): the causal softmax and its backward;
 * for both, RoPE, the key/value cache and the gradients brought back to
 * q, k and v; for cuDNN's fused attention (--dtype bf16), the rows of q, k,
 * v and their gradients to and from bfloat16.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "bf16.h"
#include "cuda_common.cuh"
#include "rowwise.h"
#include "flash.h"
#include "rope.h"

struct attn_p {
    int B, T, nh, nkv, hd;
    merak_rope rope; /* rope.theta 0: none */
};

/* cos/sin of the RoPE angle t * inv_freq[j] (rope.h), all in float as
 * Hugging Face (and the CPU backend) compute them. */
__device__ __forceinline__ void rope_cs(const merak_rope &rope, int t, int j, int hd, float *c,
                                        float *s)
{
    const float inv = merak_rope_inv_freq(&rope, j, hd);
    const float ang = (float)t * inv;
    *c = cosf(ang);
    *s = sinf(ang);
}

/* row (hd) += g, the gradient of a row at position t taken with respect to
 * its rotated values, brought back through the rotation (with rope.theta > 0):
 *   row[j] += g[j] cos + g[j+hd/2] sin ; row[j+hd/2] += g[j+hd/2] cos - g[j] sin
 * in float, row and g in float or bfloat16 storage (row's sums rounded).
 * Block-wide; g may be in shared memory. */
template <typename D, typename G>
__device__ void rope_bwd_add(D *row, const G *g, const merak_rope &rope, int t, int hd, int acc)
{
    if (rope.theta > 0.0f) {
        const int half = hd / 2;
        for (int j = threadIdx.x; j < half; j += blockDim.x) {
            float c, s;
            rope_cs(rope, t, j, hd, &c, &s);
            const float g0 = as_f32(g[j]), g1 = as_f32(g[j + half]);
            put(row + j, (acc ? as_f32(row[j]) : 0.0f) + (g0 * c + g1 * s));
            put(row + j + half, (acc ? as_f32(row[j + half]) : 0.0f) + (g1 * c - g0 * s));
        }
    } else {
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            put(row + d, (acc ? as_f32(row[d]) : 0.0f) + as_f32(g[d]));
    }
}

/* The rows [pos, pos+T) of every batch row of a cache (B, cap, C) from
 * src (B*T rows of stride ss): element e of those B*T*C. */
template <typename X>
__device__ __forceinline__ void cache_put(float *cache, const X *src, size_t e, int C, int ss, int T, int pos,
                                          int cap)
{
    const size_t bt = e / C, row = bt / T * cap + pos + bt % T;
    const int c = (int)(e % C);
    cache[row * C + c] = as_f32(src[bt * ss + c]);
}

/* Queries and keys of B*T token rows at positions pos + t.  With RoPE
 * (rope.theta > 0): Q (B,T,nh*hd) = q rotated and kc's rows [pos, pos+T) (kc
 * (B,cap,nkv*hd)) = k rotated, pair by pair:
 *   x'[j] = x[j] cos - x[j+hd/2] sin ; x'[j+hd/2] = x[j+hd/2] cos + x[j] sin
 * Without RoPE, Q is not written (the queries are q) and k is copied into
 * kc element by element.  With vc, v goes into vc's rows the same way.
 * q, k, v have row strides qs, ks, vs.  Training's RoPE: pos 0, cap T, no
 * vc (qr, kr saved for the backward); decoding: the key/value cache. */
template <typename X>
__global__ void qkv_rows_k(float *Q, float *kc, float *vc, const X *q, const X *k, const X *v, attn_p p, int qs,
                           int ks, int vs, int pos, int cap)
{
    const int half = p.hd / 2, heads = p.nh + p.nkv, Ckv = p.nkv * p.hd;
    const size_t BT = (size_t)p.B * p.T;
    const size_t nrot = p.rope.theta > 0.0f ? BT * heads * half : 0, nk = p.rope.theta > 0.0f ? 0 : BT * Ckv;
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
        const X *src;
        float *dst;
        if (hh < p.nh) {
            src = q + bt * qs + (size_t)hh * p.hd;
            dst = Q + bt * p.nh * p.hd + (size_t)hh * p.hd;
        } else {
            src = k + bt * ks + (size_t)(hh - p.nh) * p.hd;
            dst = kc + (bt / p.T * cap + t) * Ckv + (size_t)(hh - p.nh) * p.hd;
        }
        float c, s;
        rope_cs(p.rope, t, j, p.hd, &c, &s);
        const float x0 = as_f32(src[j]), x1 = as_f32(src[j + half]);
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
 * head (plain adds without RoPE), dv += dV; acc 0: 0 + each, dq, dk and
 * dv unread.  dQ (B,T,nh*hd), dK and dV (B,T,nkv*hd) are dense; dq, dk,
 * dv have the row strides of q, k, v. */
template <typename D, typename G>
__global__ void attn_bwd_add_k(D *dq, D *dk, D *dv, const G *dQ, const G *dK, const G *dV, attn_p p, int dqs,
                               int dks, int dvs, int acc)
{
    const size_t bt = blockIdx.x;
    const int t = (int)(bt % (size_t)p.T), hd = p.hd, C = p.nh * hd, Ckv = p.nkv * hd;
    for (int h = 0; h < p.nh; h++)
        rope_bwd_add(dq + bt * dqs + (size_t)h * hd, dQ + bt * C + (size_t)h * hd, p.rope, t,
                     hd, acc);
    for (int g = 0; g < p.nkv; g++)
        rope_bwd_add(dk + bt * dks + (size_t)g * hd, dK + bt * Ckv + (size_t)g * hd, p.rope,
                     t, hd, acc);
    for (int c = threadIdx.x; c < Ckv; c += blockDim.x)
        put(dv + bt * dvs + c, (acc ? as_f32(dv[bt * dvs + c]) : 0.0f) + as_f32(dV[bt * Ckv + c]));
}

/* dst (rows, w) bfloat16, dense = src's rows (row stride ss) rounded to
 * nearest, ties to even (bf16.h); four at a time where both are aligned. */
__global__ void rows_to_bf16_k(uint16_t *dst, const float *src, size_t rows, int w, int ss)
{
    GRID_STRIDE(e, rows * (size_t)w)
    {
        const size_t r = e / (size_t)w;
        dst[e] = merak_f32_to_bf16(src[r * (size_t)ss + e % (size_t)w]);
    }
}

__global__ void rows_to_bf16_v4_k(ushort4 *dst, const float *src, size_t rows, int w4, int ss)
{
    GRID_STRIDE(e, rows * (size_t)w4)
    {
        const size_t r = e / (size_t)w4;
        const float4 x = *(const float4 *)(src + r * (size_t)ss + 4 * (e % (size_t)w4));
        dst[e] = make_ushort4(merak_f32_to_bf16(x.x), merak_f32_to_bf16(x.y), merak_f32_to_bf16(x.z),
                              merak_f32_to_bf16(x.w));
    }
}

/* dst's rows (row stride ds) = src (rows, w) bfloat16, dense: exact. */
__global__ void rows_from_bf16_k(float *dst, int ds, const uint16_t *src, size_t rows, int w)
{
    GRID_STRIDE(e, rows * (size_t)w)
    {
        const size_t r = e / (size_t)w;
        dst[r * (size_t)ds + e % (size_t)w] = merak_bf16_to_f32(src[e]);
    }
}

__global__ void rows_from_bf16_v4_k(float *dst, int ds, const ushort4 *src, size_t rows, int w4)
{
    GRID_STRIDE(e, rows * (size_t)w4)
    {
        const size_t r = e / (size_t)w4;
        const ushort4 b = src[e];
        *(float4 *)(dst + r * (size_t)ds + 4 * (e % (size_t)w4)) =
            make_float4(merak_bf16_to_f32(b.x), merak_bf16_to_f32(b.y), merak_bf16_to_f32(b.z),
                        merak_bf16_to_f32(b.w));
    }
}

static attn_p attn_params(const merak_attn_shape *s)
{
    attn_p p;
    p.B = s->B;
    p.T = s->T;
    p.nh = s->n_head;
    p.nkv = s->n_kv_head;
    p.hd = s->head_dim;
    p.rope = s->rope;
    return p;
}

/* Training's RoPE: qr, kr (float, dense) = q, k (stored as X) rotated. */
template <typename X>
static int rope_fwd(void *stream, const merak_attn_shape *s, float *qr, float *kr, const X *q, const X *k)
{
    const attn_p p = attn_params(s);
    const size_t n = (size_t)p.B * p.T * (p.nh + p.nkv) * (p.hd / 2);
    if (n)
        qkv_rows_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(qr, kr, NULL, q, k, (const X *)NULL, p, s->q_stride,
                                                           s->k_stride, 0, 0, p.T);
    return cudaGetLastError();
}

/* attn_bwd_add_k's sums without RoPE, a 16-byte vector a thread (rowwise.h). */
template <int B16>
__global__ void attn_bwd_add_v_k(void *dq, void *dk, void *dv, const void *dQ, const void *dK, const void *dV,
                                 int C, int Ckv, int dqs, int dks, int dvs, int acc, size_t nv)
{
    GRID_STRIDE(v, nv) rw_attn_add(dq, dk, dv, dQ, dK, dV, C, Ckv, dqs, dks, dvs, acc, v, B16);
}

/* ... and with RoPE. */
template <int B16>
__global__ void attn_bwd_add_rope_v_k(void *dq, void *dk, void *dv, const void *dQ, const void *dK, const void *dV,
                                      attn_p p, int dqs, int dks, int dvs, int acc, size_t nv)
{
    GRID_STRIDE(v, nv)
    rw_attn_add_rope(dq, dk, dv, dQ, dK, dV, p.nh, p.nkv, p.hd, p.T, &p.rope, dqs, dks, dvs, acc, v, B16);
}

/* attn_bwd_add_k over the B*T token rows, into gradients stored as D from
 * gradients stored as G: 16 bytes a load where D is G and the widths,
 * strides and buffers allow (with RoPE, half a head whole vectors). */
template <typename D, typename G>
static int bwd_add(void *stream, const merak_attn_shape *s, D *dq, D *dk, D *dv, const G *dQ, const G *dK,
                   const G *dV, int acc)
{
    const attn_p p = attn_params(s);
    const size_t rows = (size_t)p.B * p.T;
    const int B16 = sizeof(G) == 2, C = p.nh * p.hd, Ckv = p.nkv * p.hd;
    const void *bufs[6] = {dq, dk, dv, dQ, dK, dV};
    if (!rows)
        return cudaSuccess;
    const int vec = sizeof(D) == sizeof(G) && rw_attn_add_takes(C, Ckv, s->q_stride, s->k_stride, s->v_stride,
                                                                 B16, bufs);
    if (vec && p.rope.theta <= 0.0f) {
        const size_t nv = rows * (size_t)((C + 2 * Ckv) / RW_E(B16));
        attn_bwd_add_v_k<sizeof(G) == 2><<<ew_grid(nv), NT, 0, STREAM(stream)>>>(
            dq, dk, dv, dQ, dK, dV, C, Ckv, s->q_stride, s->k_stride, s->v_stride, acc, nv);
    } else if (vec && p.hd % (2 * RW_E(B16)) == 0) {
        const size_t nv = rows * ((size_t)(p.nh + p.nkv) * (p.hd / 2 / RW_E(B16)) + (size_t)Ckv / RW_E(B16));
        attn_bwd_add_rope_v_k<sizeof(G) == 2><<<ew_grid(nv), NT, 0, STREAM(stream)>>>(
            dq, dk, dv, dQ, dK, dV, p, s->q_stride, s->k_stride, s->v_stride, acc, nv);
    } else {
        attn_bwd_add_k<<<(unsigned)rows, NT, 0, STREAM(stream)>>>(dq, dk, dv, dQ, dK, dV, p, s->q_stride,
                                                                 s->k_stride, s->v_stride, acc);
    }
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ fused (flash.h) */

/* Forward: block = FLASH_FWD_ROWS query rows of head h of batch row b,
 * the longest (last) rows first; keys and values FLASH_FWD_KEYS at a time. */
__global__ void __launch_bounds__(FLASH_FWD_ROWS)
    flash_fwd_k(float *out, float *lse, const float *Q, const float *K, const float *V, flash_p p)
{
    __shared__ __align__(16) float Ks[FLASH_FWD_KEYS * FLASH_HD];
    __shared__ __align__(16) float Vs[FLASH_FWD_KEYS * FLASH_HD];
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * FLASH_FWD_ROWS;
    const int h = blockIdx.y, b = blockIdx.z, g = h / (p.nh / p.nkv);
    const int i = i0 + threadIdx.x;
    const bool on = i < p.T;
    flash_fwd_row r;
    if (on)
        flash_fwd_begin(&r, Q, &p, b, h, i);
    const int end = flash_keys_end(i0, FLASH_FWD_ROWS, p.T);
    for (int j0 = 0; j0 < end; j0 += FLASH_FWD_KEYS) {
        __syncthreads(); /* nobody reads the previous tile any more */
        flash_tile_load(Ks, FLASH_FWD_KEYS, K, p.ks, &p, b, g, j0, 1.0f, threadIdx.x, blockDim.x);
        flash_tile_load(Vs, FLASH_FWD_KEYS, V, p.vs, &p, b, g, j0, 1.0f, threadIdx.x, blockDim.x);
        __syncthreads();
        if (on)
            flash_fwd_tile(&r, Ks, Vs, j0, min(FLASH_FWD_KEYS, p.T - j0), i);
    }
    if (on)
        flash_fwd_end(&r, out, lse, &p, b, h, i);
}

/* dq and D: block = FLASH_DQ_ROWS query rows, each thread's dout row in
 * shared memory; two passes over the keys (D, then dq). */
__global__ void __launch_bounds__(FLASH_DQ_ROWS)
    flash_dq_k(float *dQ, float *D, const float *dout, const float *lse, const float *Q,
               const float *K, const float *V, flash_p p)
{
    __shared__ __align__(16) float Ks[FLASH_DQ_KEYS * FLASH_HD];
    __shared__ __align__(16) float Vs[FLASH_DQ_KEYS * FLASH_HD];
    __shared__ __align__(16) float dOs[FLASH_DQ_ROWS * FLASH_PITCH];
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * FLASH_DQ_ROWS;
    const int h = blockIdx.y, b = blockIdx.z, g = h / (p.nh / p.nkv);
    const int i = i0 + threadIdx.x;
    const bool on = i < p.T;
    float *dO = dOs + threadIdx.x * FLASH_PITCH;
    flash_dq_row r;
    if (on)
        flash_dq_begin(&r, dO, Q, dout, lse, &p, b, h, i);
    const int end = flash_keys_end(i0, FLASH_DQ_ROWS, p.T);
    for (int pass = 0; pass < 2; pass++)
        for (int j0 = 0; j0 < end; j0 += FLASH_DQ_KEYS) {
            __syncthreads();
            flash_tile_load(Ks, FLASH_DQ_KEYS, K, p.ks, &p, b, g, j0, 1.0f, threadIdx.x, blockDim.x);
            flash_tile_load(Vs, FLASH_DQ_KEYS, V, p.vs, &p, b, g, j0, 1.0f, threadIdx.x, blockDim.x);
            __syncthreads();
            if (on)
                flash_dq_tile(&r, dO, Ks, Vs, j0, min(FLASH_DQ_KEYS, p.T - j0), i, pass);
        }
    if (on)
        flash_dq_end(&r, dQ, D, &p, b, h, i);
}

/* dk, dv: block = FLASH_DK_ROWS key rows of kv head g, the first (which
 * the most queries see) first; each thread's v row and dk sum in shared
 * memory; the queries of the group's heads FLASH_DK_QUERIES at a time. */
__global__ void __launch_bounds__(FLASH_DK_ROWS)
    flash_dkv_k(float *dK, float *dV, const float *dout, const float *lse, const float *D,
                const float *Q, const float *K, const float *V, flash_p p)
{
    __shared__ __align__(16) float Qs[FLASH_DK_QUERIES * FLASH_HD];
    __shared__ __align__(16) float dOs[FLASH_DK_QUERIES * FLASH_HD];
    __shared__ float ls[FLASH_DK_QUERIES], Ds[FLASH_DK_QUERIES];
    __shared__ __align__(16) float own[2 * FLASH_DK_ROWS * FLASH_PITCH];
    const int j0 = (int)blockIdx.x * FLASH_DK_ROWS;
    const int g = blockIdx.y, b = blockIdx.z, rep = p.nh / p.nkv;
    const int j = j0 + threadIdx.x;
    const bool on = j < p.T;
    float *Vown = own + threadIdx.x * FLASH_PITCH;
    float *dKown = own + (FLASH_DK_ROWS + threadIdx.x) * FLASH_PITCH;
    flash_dk_row r;
    if (on)
        flash_dk_begin(&r, Vown, dKown, K, V, &p, b, g, j);
    for (int rr = 0; rr < rep; rr++) {
        const int h = g * rep + rr;
        for (int i0 = j0; i0 < p.T; i0 += FLASH_DK_QUERIES) {
            __syncthreads();
            flash_tile_load(Qs, FLASH_DK_QUERIES, Q, p.qs, &p, b, h, i0, p.scale, threadIdx.x,
                            blockDim.x);
            flash_tile_load(dOs, FLASH_DK_QUERIES, dout, p.nh * p.hd, &p, b, h, i0, 1.0f,
                            threadIdx.x, blockDim.x);
            flash_dk_stats_load(ls, Ds, lse, D, &p, b, h, i0, threadIdx.x, blockDim.x);
            __syncthreads();
            if (on)
                flash_dk_tile(&r, Vown, dKown, Qs, dOs, ls, Ds, i0, min(FLASH_DK_QUERIES, p.T - i0), j);
        }
    }
    if (on)
        flash_dk_end(&r, dKown, dK, dV, &p, b, g, j);
}

static flash_p flash_params(const merak_attn_shape *s, int qs, int ks)
{
    flash_p p;
    p.T = s->T;
    p.nh = s->n_head;
    p.nkv = s->n_kv_head;
    p.hd = s->head_dim;
    p.qs = qs;
    p.ks = ks;
    p.vs = s->v_stride;
    p.scale = (float)(1.0 / sqrt((double)s->head_dim));
    return p;
}

extern "C" {

int merak_cuda_launch_rope_fwd(void *stream, const merak_attn_shape *s, float *qr, float *kr,
                               const float *q, const float *k)
{
    return rope_fwd(stream, s, qr, kr, q, k);
}

int merak_cuda_launch_rope16_fwd(void *stream, const merak_attn_shape *s, float *qr, float *kr,
                                 const uint16_t *q, const uint16_t *k)
{
    return rope_fwd(stream, s, qr, kr, q, k);
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
    const int rows = p.rope.theta > 0.0f ? (p.nh + p.nkv) * (p.hd / 2) : p.nkv * p.hd; /* q, k */
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
                                   const float *dV, int acc)
{
    return bwd_add(stream, s, dq, dk, dv, dQ, dK, dV, acc);
}

int merak_cuda_launch_attn_bwd_add_bf16(void *stream, const merak_attn_shape *s, float *dq,
                                        float *dk, float *dv, const uint16_t *dQ, const uint16_t *dK,
                                        const uint16_t *dV, int acc)
{
    return bwd_add(stream, s, dq, dk, dv, dQ, dK, dV, acc);
}

int merak_cuda_launch_attn_bwd_add16(void *stream, const merak_attn_shape *s, uint16_t *dq, uint16_t *dk,
                                    uint16_t *dv, const uint16_t *dQ, const uint16_t *dK, const uint16_t *dV,
                                    int acc)
{
    return bwd_add(stream, s, dq, dk, dv, dQ, dK, dV, acc);
}

/* Four at a time when the widths, the stride and both pointers allow. */
static int v4_ok(const void *a, const void *b, int w, int stride)
{
    return w % 4 == 0 && stride % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 8 == 0;
}

int merak_cuda_launch_rows_to_bf16(void *stream, uint16_t *dst, const float *src, size_t rows, int w,
                                   int ss)
{
    if (!rows || w <= 0)
        return cudaSuccess;
    if (v4_ok(src, dst, w, ss))
        rows_to_bf16_v4_k<<<ew_grid(rows * (size_t)(w / 4)), NT, 0, STREAM(stream)>>>((ushort4 *)dst, src,
                                                                                     rows, w / 4, ss);
    else
        rows_to_bf16_k<<<ew_grid(rows * (size_t)w), NT, 0, STREAM(stream)>>>(dst, src, rows, w, ss);
    return cudaGetLastError();
}

int merak_cuda_launch_rows_from_bf16(void *stream, float *dst, int ds, const uint16_t *src, size_t rows,
                                     int w)
{
    if (!rows || w <= 0)
        return cudaSuccess;
    if (v4_ok(dst, src, w, ds))
        rows_from_bf16_v4_k<<<ew_grid(rows * (size_t)(w / 4)), NT, 0, STREAM(stream)>>>(
            dst, ds, (const ushort4 *)src, rows, w / 4);
    else
        rows_from_bf16_k<<<ew_grid(rows * (size_t)w), NT, 0, STREAM(stream)>>>(dst, ds, src, rows, w);
    return cudaGetLastError();
}

int merak_cuda_launch_flash_fwd(void *stream, const merak_attn_shape *s, float *out, float *lse,
                                const float *q, int qs, const float *k, int ks, const float *v)
{
    const flash_p p = flash_params(s, qs, ks);
    if (s->B > 0 && s->T > 0) {
        const dim3 grid((unsigned)((s->T + FLASH_FWD_ROWS - 1) / FLASH_FWD_ROWS),
                        (unsigned)s->n_head, (unsigned)s->B);
        flash_fwd_k<<<grid, FLASH_FWD_ROWS, 0, STREAM(stream)>>>(out, lse, q, k, v, p);
    }
    return cudaGetLastError();
}

int merak_cuda_launch_flash_bwd(void *stream, const merak_attn_shape *s, float *dQ, float *dK,
                                float *dV, float *D, const float *dout, const float *lse,
                                const float *q, int qs, const float *k, int ks, const float *v)
{
    const flash_p p = flash_params(s, qs, ks);
    if (s->B > 0 && s->T > 0) {
        const dim3 gq((unsigned)((s->T + FLASH_DQ_ROWS - 1) / FLASH_DQ_ROWS),
                      (unsigned)s->n_head, (unsigned)s->B);
        flash_dq_k<<<gq, FLASH_DQ_ROWS, 0, STREAM(stream)>>>(dQ, D, dout, lse, q, k, v, p);
        const dim3 gk((unsigned)((s->T + FLASH_DK_ROWS - 1) / FLASH_DK_ROWS),
                      (unsigned)s->n_kv_head, (unsigned)s->B);
        flash_dkv_k<<<gk, FLASH_DK_ROWS, 0, STREAM(stream)>>>(dK, dV, dout, lse, D, q, k, v, p);
    }
    return cudaGetLastError();
}

} /* extern "C" */
