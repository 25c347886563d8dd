/*
 * norm.cu - layer norm and RMS norm, and the column reductions their
 * weight gradients and linear biases need.  The norms' forward and input
 * gradient run a warp a row with 16-byte loads where the shape allows
 * (rowwise.h), else a block a row an element a thread.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "cuda_common.cuh"
#include "rowwise.h"

/* The kernels below take T = float, or uint16_t for bf16 storage (the
 * activations, their gradients and the weights read widened, what they
 * write rounded once; mean and rstd float either way). */

/* One block per row n: out (N,C) = (x-mean)*rstd*w + b (two-pass variance). */
template <typename T>
__global__ void layernorm_fwd_k(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int C,
                                float eps)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const T *x = inp + n * C;
    T *y = out + n * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += as_f32(x[c]);
    const float m = block_sum(s, sh) / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = as_f32(x[c]) - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(block_sum(v, sh) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float o = (as_f32(x[c]) - m) * r * as_f32(w[c]);
        put(y + c, b ? o + as_f32(b[c]) : o);
    }
    if (threadIdx.x == 0) {
        if (mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = r;
    }
}

/* dinp += (dnorm - mean(dnorm) - norm * mean(dnorm*norm)) * rstd, dnorm = dout*w
 * (acc 0: =, dinp unread; likewise RMSNorm's) */
template <typename T>
__global__ void layernorm_bwd_x_k(T *dinp, const T *dout, const T *inp, const T *w, const float *mean,
                                  const float *rstd, int C, int acc)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const T *x = inp + n * C, *g = dout + n * C;
    T *dx = dinp + n * C;
    const float m = mean[n], r = rstd[n];
    float a = 0.0f, bb = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (as_f32(x[c]) - m) * r, dn = as_f32(g[c]) * as_f32(w[c]);
        a += dn;
        bb += dn * norm;
    }
    a = block_sum(a, sh) / C;
    bb = block_sum(bb, sh) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (as_f32(x[c]) - m) * r, dn = as_f32(g[c]) * as_f32(w[c]);
        put(dx + c, (acc ? as_f32(dx[c]) : 0.0f) + (dn - a - norm * bb) * r);
    }
}

/* One block per row: rstd = 1/sqrt(mean(x^2)+eps), out = x*rstd*w */
template <typename T>
__global__ void rmsnorm_fwd_k(T *out, float *rstd, const T *inp, const T *w, int C, float eps)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const T *x = inp + n * C;
    T *y = out + n * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += as_f32(x[c]) * as_f32(x[c]);
    const float r = 1.0f / sqrtf(block_sum(s, sh) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        put(y + c, as_f32(x[c]) * r * as_f32(w[c]));
    if (threadIdx.x == 0 && rstd)
        rstd[n] = r;
}

/* dinp += rstd*dout*w - x * rstd^3 * mean(dout*w*x) */
template <typename T>
__global__ void rmsnorm_bwd_x_k(T *dinp, const T *dout, const T *inp, const T *w, const float *rstd, int C,
                                int acc)
{
    __shared__ float sh[33];
    const size_t n = blockIdx.x;
    const T *x = inp + n * C, *g = dout + n * C;
    T *dx = dinp + n * C;
    const float r = rstd[n];
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        s += as_f32(g[c]) * as_f32(w[c]) * as_f32(x[c]);
    const float k = block_sum(s, sh) / C * r * r * r;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        put(dx + c, (acc ? as_f32(dx[c]) : 0.0f) + (r * as_f32(g[c]) * as_f32(w[c]) - as_f32(x[c]) * k));
}

/* ------------------------------------------------------------------ a warp a row (rowwise.h) */

/* The norms where a row is whole 16-byte vectors: warp w of block x is
 * row x * RW_WARPS + w, read once into registers (VM vectors a lane at
 * most), written once.  B16: bf16 storage; RMS: RMS norm (no mean, no
 * bias). */
template <int B16, int VM, int RMS>
static __device__ __forceinline__ void norm_fwd_row(void *out, float *mean, float *rstd, const rw_row *x,
                                                    const void *w, const void *b, int n, int C, float eps, int lane)
{
    const int nv = C / RW_E(B16);
    const size_t at = (size_t)n * C * RW_ES(B16);
    const float m = RMS ? 0.0f : warp_sum(rw_sum(x, 0.0f, 0, nv, lane, VM, B16)) / C;
    const float r = 1.0f / sqrtf(warp_sum(rw_sum(x, m, 1, nv, lane, VM, B16)) / C + eps);
    rw_norm_store((char *)out + at, x, w, RMS ? NULL : b, m, r, nv, lane, VM, B16);
    if (lane == 0) {
        if (!RMS && mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = r;
    }
}

template <int B16, int VM, int RMS>
__global__ void __launch_bounds__(RW_LANES * RW_WARPS)
    norm_fwd_v_k(void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b, int N,
                 int C, float eps)
{
    const int lane = threadIdx.x % RW_LANES;
    const int n = blockIdx.x * RW_WARPS + threadIdx.x / RW_LANES;
    if (n >= N)
        return; /* the whole warp */
    rw_row x;
    rw_load(&x, (const char *)inp + (size_t)n * C * RW_ES(B16), C / RW_E(B16), lane, VM);
    norm_fwd_row<B16, VM, RMS>(out, mean, rstd, &x, w, b, n, C, eps, lane);
}

/* A residual add and the norm of its sum: sum = a + y rounded (written),
 * then the norm of the rounded row, as norm_fwd_v_k reading sum gives it. */
template <int B16, int VM, int RMS>
__global__ void __launch_bounds__(RW_LANES * RW_WARPS)
    norm_add_fwd_v_k(void *out, float *mean, float *rstd, const void *a, const void *w, const void *b, int N,
                     int C, float eps, void *sum, const void *y)
{
    const int lane = threadIdx.x % RW_LANES;
    const int n = blockIdx.x * RW_WARPS + threadIdx.x / RW_LANES;
    if (n >= N)
        return; /* the whole warp */
    const int nv = C / RW_E(B16);
    const size_t at = (size_t)n * C * RW_ES(B16);
    rw_row x, r;
    rw_load(&x, (const char *)a + at, nv, lane, VM);
    rw_load(&r, (const char *)y + at, nv, lane, VM);
    rw_add_round(&x, &r, (char *)sum + at, nv, lane, VM, B16);
    norm_fwd_row<B16, VM, RMS>(out, mean, rstd, &x, w, b, n, C, eps, lane);
}

/* Warp's row n of the input gradient: loads its x and dout (left in *x,
 * *g, with its mean and rstd in *m, *r, for the weight gradients) and
 * writes (adds to) its dinp. */
template <int B16, int VM, int RMS>
static __device__ __forceinline__ void norm_bwd_row(void *dinp, rw_row *x, rw_row *g, float *m, float *r,
                                                    const void *dout, const void *inp, const void *w,
                                                    const float *mean, const float *rstd, int n, int C, int acc,
                                                    int lane)
{
    const int nv = C / RW_E(B16);
    const size_t at = (size_t)n * C * RW_ES(B16);
    rw_load(x, (const char *)inp + at, nv, lane, VM);
    rw_load(g, (const char *)dout + at, nv, lane, VM);
    *m = RMS ? 0.0f : mean[n];
    *r = rstd[n];
    float a, bb;
    rw_norm_bwd_sums(&a, &bb, x, g, w, *m, RMS ? 1.0f : *r, nv, lane, VM, B16);
    if (!RMS)
        a = warp_sum(a) / C;
    bb = warp_sum(bb) / C;
    if (RMS)
        bb = bb * *r * *r * *r;
    rw_norm_bwd_store((char *)dinp + at, x, g, w, *m, *r, a, bb, RMS, acc, nv, lane, VM, B16);
}

template <int B16, int VM, int RMS>
__global__ void __launch_bounds__(RW_LANES * RW_WARPS)
    norm_bwd_x_v_k(void *dinp, const void *dout, const void *inp, const void *w, const float *mean,
                   const float *rstd, int N, int C, int acc)
{
    const int lane = threadIdx.x % RW_LANES;
    const int n = blockIdx.x * RW_WARPS + threadIdx.x / RW_LANES;
    if (n >= N)
        return;
    rw_row x, g;
    float m, r;
    norm_bwd_row<B16, VM, RMS>(dinp, &x, &g, &m, &r, dout, inp, w, mean, rstd, n, C, acc, lane);
}

#define RW_LAUNCH(K, VM, ...) K<B16, VM, RMS><<<grid, RW_LANES * RW_WARPS, 0, st>>>(__VA_ARGS__)
#define RW_SWITCH(vm, K, ...)                                                                     \
    switch (vm) {                                                                                 \
    case 1: RW_LAUNCH(K, 1, __VA_ARGS__); return true;                                            \
    case 2: RW_LAUNCH(K, 2, __VA_ARGS__); return true;                                            \
    case 4: RW_LAUNCH(K, 4, __VA_ARGS__); return true;                                            \
    case RW_VMAX: RW_LAUNCH(K, RW_VMAX, __VA_ARGS__); return true;                                \
    default: return false;                                                                        \
    }

/* Launches the row kernels if the shape and the buffers take them. */
template <int B16, int RMS>
static bool norm_fwd_v(cudaStream_t st, void *out, float *mean, float *rstd, const void *inp, const void *w,
                       const void *b, int N, int C, float eps)
{
    const void *bufs[4] = {out, inp, w, RMS ? NULL : b};
    const unsigned grid = (unsigned)((N + RW_WARPS - 1) / RW_WARPS);
    RW_SWITCH(rw_norm_vmax(C, B16, bufs, 4), norm_fwd_v_k, out, mean, rstd, inp, w, b, N, C, eps)
}

template <int B16, int RMS>
static bool norm_add_fwd_v(cudaStream_t st, void *sum, void *out, float *mean, float *rstd, const void *a,
                           const void *y, const void *w, const void *b, int N, int C, float eps)
{
    const void *bufs[6] = {sum, out, a, y, w, RMS ? NULL : b};
    const unsigned grid = (unsigned)((N + RW_WARPS - 1) / RW_WARPS);
    RW_SWITCH(rw_norm_vmax(C, B16, bufs, 6), norm_add_fwd_v_k, out, mean, rstd, a, w, b, N, C, eps, sum, y)
}

template <int B16, int RMS>
static bool norm_bwd_x_v(cudaStream_t st, void *dinp, const void *dout, const void *inp, const void *w,
                         const float *mean, const float *rstd, int N, int C, int acc)
{
    const void *bufs[4] = {dinp, dout, inp, w};
    const unsigned grid = (unsigned)((N + RW_WARPS - 1) / RW_WARPS);
    RW_SWITCH(rw_norm_vmax(C, B16, bufs, 4), norm_bwd_x_v_k, dinp, dout, inp, w, mean, rstd, N, C, acc)
}

/* Column reductions: 32 columns x CR_Y row lanes per block, CR_ROWS rows per
 * chunk; the chunk partial sums are then added in chunk order. */
#define CR_Y 8
#define CR_ROWS 256


/* Stage 1: block (32 columns, CR_Y row lanes) x chunk of `rows` rows.
 * part0/part1 (nchunks, C): the chunk's partial sums of
 *   COLSUM:    dout                                   (part0)
 *   LAYERNORM: dout*(x-mean)*rstd (dw), dout (db)     (part0, part1)
 *   RMSNORM:   dout*x*rstd (dw)                       (part0)  */
template <int MODE, typename D>
__global__ void colred_partial_k(float *part0, float *part1, const D *dout,
                                 const D *inp, const float *mean, const float *rstd,
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
            const float d = as_f32(dout[idx]);
            if (MODE == RW_COLSUM) {
                a0 += d;
            } else if (MODE == RW_LAYERNORM) {
                a0 += d * ((as_f32(inp[idx]) - mean[r]) * rstd[r]);
                a1 += d;
            } else {
                a0 += d * (as_f32(inp[idx]) * rstd[r]);
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
        if (MODE == RW_LAYERNORM)
            part1[(size_t)blockIdx.y * C + c] = t1;
    }
}

/* Stage 2: dst0[c] (dst1[c], may be NULL) += the sum over the chunks'
 * partial rows of column c: block (32 columns, RW_FIN_Y chunk lanes), each
 * lane's chunks in order, then the lanes in order (rowwise.h
 * rw_fin_lane): a block's loads spread over RW_FIN_Y rows at once. */
__global__ void __launch_bounds__(32 * RW_FIN_Y)
    colred_final_k(float *dst0, float *dst1, const float *part0, const float *part1, int nchunks, int C)
{
    __shared__ float s0[RW_FIN_Y][33], s1[RW_FIN_Y][33];
    const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    s0[ty][tx] = c < C && dst0 ? rw_fin_lane(part0, nchunks, C, c, ty) : 0.0f;
    s1[ty][tx] = c < C && dst1 ? rw_fin_lane(part1, nchunks, C, c, ty) : 0.0f;
    __syncthreads();
    if (ty != 0 || c >= C)
        return;
    float t0 = 0.0f, t1 = 0.0f;
    for (int y = 0; y < RW_FIN_Y; y++)
        t0 += s0[y][tx], t1 += s1[y][tx];
    if (dst0)
        dst0[c] += t0;
    if (dst1)
        dst1[c] += t1;
}

static void colred_final(cudaStream_t st, float *dst0, float *dst1, const float *part0, const float *part1,
                         int nchunks, int C)
{
    colred_final_k<<<(C + 31) / 32, dim3(32, RW_FIN_Y), 0, st>>>(dst0, dst1, part0, part1, nchunks, C);
}

/* Stage 1 with 16-byte loads (rowwise.h): block (32 vectors of columns,
 * RW_CR_Y row lanes) x chunk of `rows` rows. */
template <int MODE, int B16>
__global__ void __launch_bounds__(32 * RW_CR_Y)
    colred_v_k(float *part0, float *part1, const void *dout, const void *inp, const float *mean,
               const float *rstd, int N, int C, int rows)
{
    const int E = RW_E(B16);
    __shared__ float sh0[RW_CR_Y * 32 * E], sh1[MODE == RW_LAYERNORM ? RW_CR_Y * 32 * E : 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int j = blockIdx.x * 32 + tx; /* the thread's vector of columns */
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    const bool on = j < C / E;
    float s0[8], s1[8];
    if (on)
        rw_colred(s0, s1, MODE, dout, inp, mean, rstd, C, j, r0, r1, ty, B16);
    /* shared memory [e][ty][tx]: a warp's 32 stores and loads hit 32 banks */
#pragma unroll
    for (int e = 0; e < E; e++) {
        sh0[(e * RW_CR_Y + ty) * 32 + tx] = on ? s0[e] : 0.0f;
        if (MODE == RW_LAYERNORM)
            sh1[(e * RW_CR_Y + ty) * 32 + tx] = on ? s1[e] : 0.0f;
    }
    __syncthreads();
    if (ty == 0 && on) {
        float *p0 = part0 + (size_t)blockIdx.y * C + (size_t)j * E;
#pragma unroll
        for (int e = 0; e < E; e++) {
            float t0 = 0.0f, t1 = 0.0f;
            for (int y = 0; y < RW_CR_Y; y++) {
                t0 += sh0[(e * RW_CR_Y + y) * 32 + tx];
                if (MODE == RW_LAYERNORM)
                    t1 += sh1[(e * RW_CR_Y + y) * 32 + tx];
            }
            p0[e] = t0;
            if (MODE == RW_LAYERNORM)
                part1[(size_t)blockIdx.y * C + (size_t)j * E + e] = t1;
        }
    }
}

/* Runs both stages; the chunking depends on N only (and on whether the
 * shape takes 16-byte vectors). */
template <int MODE, typename D>
static int colred(cudaStream_t st, float *dst0, float *dst1, const D *dout,
                  const D *inp, const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    const int B16 = sizeof(D) == 2, vec = rw_colred_takes(C, B16, dout, MODE == RW_COLSUM ? NULL : inp);
    int rows = vec ? RW_CR_ROWS : CR_ROWS;
    int nchunks = (N + rows - 1) / rows;
    while (nchunks > 65535) { /* gridDim.y limit: bigger chunks, still shape-only */
        rows *= 2;
        nchunks = (N + rows - 1) / rows;
    }
    const int nq = MODE == RW_LAYERNORM ? 2 : 1;
    float *part = (float *)merak_cuda_scratch((size_t)nq * nchunks * C * sizeof(float));
    if (!part)
        return cudaErrorMemoryAllocation;
    float *part1 = nq == 2 ? part + (size_t)nchunks * C : NULL;
    if (vec) {
        const int nvec = C / RW_E(B16);
        dim3 grid((nvec + 31) / 32, nchunks), block(32, RW_CR_Y);
        colred_v_k<MODE, sizeof(D) == 2><<<grid, block, 0, st>>>(part, part1, dout, inp, mean, rstd, N, C, rows);
    } else {
        dim3 grid((C + 31) / 32, nchunks), block(32, CR_Y);
        colred_partial_k<MODE, D><<<grid, block, 0, st>>>(part, part1, dout, inp, mean, rstd, N, C, rows);
    }
    colred_final(st, dst0, MODE == RW_LAYERNORM ? dst1 : NULL, part, part1, nchunks, C);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ a norm's whole backward (rowwise.h) */

/* Both parts of a norm's backward where a row is whole 16-byte vectors:
 * block k runs chunk k's rows a warp a row, writes dinp as norm_bwd_x_v_k
 * does (the same bits) and its partial rows of the weight gradients into
 * part (dw's, then for layer norm db's, nchunks x C each), which
 * colred_final adds to dw and db: each row is read once, where the two
 * parts apart read it twice. */
template <int B16, int VM, int RMS>
__global__ void __launch_bounds__(RW_LANES * RW_WARPS)
    norm_bwd_v_k(void *dinp, float *part, const void *dout, const void *inp, const void *w, const float *mean,
                 const float *rstd, int N, int C, int rows, int nchunks, int acc)
{
    __shared__ float red[2 * RW_VMAX * RW_LANES * 8];   /* the block's partial rows: dw's, db's */
    const int lane = threadIdx.x % RW_LANES, wp = threadIdx.x / RW_LANES;
    const int nv = C / RW_E(B16);
    const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    float pw[VM * 8], pb[VM * 8];
#pragma unroll
    for (int i = 0; i < VM * 8; i++)
        pw[i] = pb[i] = 0.0f;
    for (int n = r0 + wp; n < r1; n += RW_WARPS) {
        rw_row x, g;
        float m, r;
        norm_bwd_row<B16, VM, RMS>(dinp, &x, &g, &m, &r, dout, inp, w, mean, rstd, n, C, acc, lane);
        rw_norm_wgrad(pw, pb, &x, &g, m, r, RMS, nv, lane, VM, B16);
    }
    for (int k = 0; k < RW_WARPS; k++) {   /* warp by warp, in order */
        if (wp == k)
            rw_norm_wgrad_put(red, pw, pb, k > 0, RMS, C, nv, lane, VM, B16);
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += RW_LANES * RW_WARPS) {
        part[(size_t)blockIdx.x * C + c] = red[c];
        if (!RMS)
            part[((size_t)nchunks + blockIdx.x) * C + c] = red[C + c];
    }
}

/* Launches norm_bwd_v_k and the final sums if the shape and the buffers
 * take the row kernels: true, or false (nothing launched) if they do not
 * or the partial rows find no memory (*nomem). */
template <int B16, int RMS>
static bool norm_bwd_v(cudaStream_t st, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                       const void *w, const float *mean, const float *rstd, int N, int C, int acc, bool *nomem)
{
    const void *bufs[4] = {dinp, dout, inp, w};
    const int vm = rw_norm_vmax(C, B16, bufs, 4);
    *nomem = false;
    if (!vm || N <= 0)
        return false;
    const int rows = rw_nb_rows(N), nchunks = (N + rows - 1) / rows;
    float *part = (float *)merak_cuda_scratch((size_t)(RMS ? 1 : 2) * nchunks * C * sizeof(float));
    if (!part) {
        *nomem = true;
        return false;
    }
    const unsigned grid = (unsigned)nchunks;
#define NB_LAUNCH(V)                                                                                             \
    norm_bwd_v_k<B16, V, RMS><<<grid, RW_LANES * RW_WARPS, 0, st>>>(dinp, part, dout, inp, w, mean, rstd, N, C, \
                                                                     rows, nchunks, acc)
    switch (vm) {
    case 1: NB_LAUNCH(1); break;
    case 2: NB_LAUNCH(2); break;
    case 4: NB_LAUNCH(4); break;
    default: NB_LAUNCH(RW_VMAX); break;
    }
#undef NB_LAUNCH
    colred_final(st, dw, RMS ? NULL : db, part, RMS ? NULL : part + (size_t)nchunks * C, nchunks, C);
    return true;
}

/* out (N,O) += b[o] */
__global__ void bias_add_k(float *out, const float *b, size_t n, int O)
{
    GRID_STRIDE(i, n) out[i] += b[i % O];
}

/* out (N,O), rows ldo apart, = bf16(acc + b[o]) (acc dense; b NULL: none):
 * bf16 storage's bias, one rounding */
__global__ void bias_round16_k(uint16_t *out, int ldo, const float *acc, const uint16_t *b, size_t n, int O)
{
    GRID_STRIDE(i, n) put(out + i / O * ldo + i % O, acc[i] + (b ? as_f32(b[i % O]) : 0.0f));
}

template <typename T>
static int layernorm_fwd(cudaStream_t st, T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b,
                         int N, int C, float eps)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    if (!norm_fwd_v<sizeof(T) == 2, 0>(st, out, mean, rstd, inp, w, b, N, C, eps))
        layernorm_fwd_k<T><<<N, NT, 0, st>>>(out, mean, rstd, inp, w, b, C, eps);
    return cudaGetLastError();
}

template <typename T>
static int layernorm_bwd_x(cudaStream_t st, T *dinp, const T *dout, const T *inp, const T *w, const float *mean,
                           const float *rstd, int N, int C, int acc)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    if (!norm_bwd_x_v<sizeof(T) == 2, 0>(st, dinp, dout, inp, w, mean, rstd, N, C, acc))
        layernorm_bwd_x_k<T><<<N, NT, 0, st>>>(dinp, dout, inp, w, mean, rstd, C, acc);
    return cudaGetLastError();
}

template <typename T>
static int rmsnorm_fwd(cudaStream_t st, T *out, float *rstd, const T *inp, const T *w, int N, int C, float eps)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    if (!norm_fwd_v<sizeof(T) == 2, 1>(st, out, NULL, rstd, inp, w, NULL, N, C, eps))
        rmsnorm_fwd_k<T><<<N, NT, 0, st>>>(out, rstd, inp, w, C, eps);
    return cudaGetLastError();
}

template <typename T>
static int rmsnorm_bwd_x(cudaStream_t st, T *dinp, const T *dout, const T *inp, const T *w, const float *rstd,
                         int N, int C, int acc)
{
    if (N <= 0 || C <= 0)
        return cudaSuccess;
    if (!norm_bwd_x_v<sizeof(T) == 2, 1>(st, dinp, dout, inp, w, NULL, rstd, N, C, acc))
        rmsnorm_bwd_x_k<T><<<N, NT, 0, st>>>(dinp, dout, inp, w, rstd, C, acc);
    return cudaGetLastError();
}

extern "C" {

int merak_cuda_launch_layernorm_fwd(void *stream, float *out, float *mean, float *rstd,
                                    const float *inp, const float *w, const float *b,
                                    int N, int C, float eps)
{
    return layernorm_fwd<float>(STREAM(stream), out, mean, rstd, inp, w, b, N, C, eps);
}

int merak_cuda_launch_layernorm_bwd_x(void *stream, float *dinp, const float *dout,
                                      const float *inp, const float *w,
                                      const float *mean, const float *rstd, int N, int C, int acc)
{
    return layernorm_bwd_x<float>(STREAM(stream), dinp, dout, inp, w, mean, rstd, N, C, acc);
}

int merak_cuda_launch_layernorm_bwd_w(void *stream, float *dw, float *db,
                                      const float *dout, const float *inp,
                                      const float *mean, const float *rstd, int N, int C)
{
    return colred<RW_LAYERNORM, float>(STREAM(stream), dw, db, dout, inp, mean, rstd, N, C);
}

int merak_cuda_launch_rmsnorm_fwd(void *stream, float *out, float *rstd, const float *inp,
                                  const float *w, int N, int C, float eps)
{
    return rmsnorm_fwd<float>(STREAM(stream), out, rstd, inp, w, N, C, eps);
}

int merak_cuda_launch_rmsnorm_bwd_x(void *stream, float *dinp, const float *dout,
                                    const float *inp, const float *w, const float *rstd,
                                    int N, int C, int acc)
{
    return rmsnorm_bwd_x<float>(STREAM(stream), dinp, dout, inp, w, rstd, N, C, acc);
}

int merak_cuda_launch_rmsnorm_bwd_w(void *stream, float *dw, const float *dout,
                                    const float *inp, const float *rstd, int N, int C)
{
    return colred<RW_RMSNORM, float>(STREAM(stream), dw, NULL, dout, inp, NULL, rstd, N, C);
}

int merak_cuda_launch_layernorm16_fwd(void *stream, uint16_t *out, float *mean, float *rstd, const uint16_t *inp,
                                      const uint16_t *w, const uint16_t *b, int N, int C, float eps)
{
    return layernorm_fwd<uint16_t>(STREAM(stream), out, mean, rstd, inp, w, b, N, C, eps);
}

int merak_cuda_launch_layernorm16_bwd_x(void *stream, uint16_t *dinp, const uint16_t *dout, const uint16_t *inp,
                                        const uint16_t *w, const float *mean, const float *rstd, int N, int C,
                                        int acc)
{
    return layernorm_bwd_x<uint16_t>(STREAM(stream), dinp, dout, inp, w, mean, rstd, N, C, acc);
}

int merak_cuda_launch_layernorm16_bwd_w(void *stream, float *dw, float *db, const uint16_t *dout,
                                        const uint16_t *inp, const float *mean, const float *rstd, int N, int C)
{
    return colred<RW_LAYERNORM, uint16_t>(STREAM(stream), dw, db, dout, inp, mean, rstd, N, C);
}

int merak_cuda_launch_add_layernorm16_fwd(void *stream, uint16_t *sum, uint16_t *out, float *mean, float *rstd,
                                          const uint16_t *a, const uint16_t *b, const uint16_t *w,
                                          const uint16_t *bias, int N, int C, float eps)
{
    if (N > 0 && norm_add_fwd_v<1, 0>(STREAM(stream), sum, out, mean, rstd, a, b, w, bias, N, C, eps))
        return cudaGetLastError();
    int rc = merak_cuda_launch_add16_fwd(stream, sum, a, b, (size_t)N * (size_t)C);
    return rc == cudaSuccess ? layernorm_fwd<uint16_t>(STREAM(stream), out, mean, rstd, sum, w, bias, N, C, eps) : rc;
}

int merak_cuda_launch_add_rmsnorm16_fwd(void *stream, uint16_t *sum, uint16_t *out, float *rstd, const uint16_t *a,
                                        const uint16_t *b, const uint16_t *w, int N, int C, float eps)
{
    if (N > 0 && norm_add_fwd_v<1, 1>(STREAM(stream), sum, out, NULL, rstd, a, b, w, NULL, N, C, eps))
        return cudaGetLastError();
    int rc = merak_cuda_launch_add16_fwd(stream, sum, a, b, (size_t)N * (size_t)C);
    return rc == cudaSuccess ? rmsnorm_fwd<uint16_t>(STREAM(stream), out, rstd, sum, w, N, C, eps) : rc;
}

int merak_cuda_launch_layernorm16_bwd(void *stream, uint16_t *dinp, float *dw, float *db, const uint16_t *dout,
                                      const uint16_t *inp, const uint16_t *w, const float *mean, const float *rstd,
                                      int N, int C, int acc)
{
    bool nomem = false;
    if ((dw || db) && norm_bwd_v<1, 0>(STREAM(stream), dinp, dw, db, dout, inp, w, mean, rstd, N, C, acc, &nomem))
        return cudaGetLastError();
    int rc = nomem ? cudaErrorMemoryAllocation
                   : layernorm_bwd_x<uint16_t>(STREAM(stream), dinp, dout, inp, w, mean, rstd, N, C, acc);
    if (rc == cudaSuccess && (dw || db))
        rc = colred<RW_LAYERNORM, uint16_t>(STREAM(stream), dw, db, dout, inp, mean, rstd, N, C);
    return rc;
}

int merak_cuda_launch_rmsnorm16_fwd(void *stream, uint16_t *out, float *rstd, const uint16_t *inp,
                                    const uint16_t *w, int N, int C, float eps)
{
    return rmsnorm_fwd<uint16_t>(STREAM(stream), out, rstd, inp, w, N, C, eps);
}

int merak_cuda_launch_rmsnorm16_bwd_x(void *stream, uint16_t *dinp, const uint16_t *dout, const uint16_t *inp,
                                      const uint16_t *w, const float *rstd, int N, int C, int acc)
{
    return rmsnorm_bwd_x<uint16_t>(STREAM(stream), dinp, dout, inp, w, rstd, N, C, acc);
}

int merak_cuda_launch_rmsnorm16_bwd_w(void *stream, float *dw, const uint16_t *dout, const uint16_t *inp,
                                      const float *rstd, int N, int C)
{
    return colred<RW_RMSNORM, uint16_t>(STREAM(stream), dw, NULL, dout, inp, NULL, rstd, N, C);
}

int merak_cuda_launch_rmsnorm16_bwd(void *stream, uint16_t *dinp, float *dw, const uint16_t *dout,
                                    const uint16_t *inp, const uint16_t *w, const float *rstd, int N, int C, int acc)
{
    bool nomem = false;
    if (dw && norm_bwd_v<1, 1>(STREAM(stream), dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C, acc, &nomem))
        return cudaGetLastError();
    int rc = nomem ? cudaErrorMemoryAllocation
                   : rmsnorm_bwd_x<uint16_t>(STREAM(stream), dinp, dout, inp, w, rstd, N, C, acc);
    if (rc == cudaSuccess && dw)
        rc = colred<RW_RMSNORM, uint16_t>(STREAM(stream), dw, NULL, dout, inp, NULL, rstd, N, C);
    return rc;
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
    return colred<RW_COLSUM, float>(STREAM(stream), db, NULL, dout, NULL, NULL, NULL, N, O);
}

int merak_cuda_launch_colsum16(void *stream, float *db, const uint16_t *dout, int N, int O)
{
    return colred<RW_COLSUM, uint16_t>(STREAM(stream), db, NULL, dout, NULL, NULL, NULL, N, O);
}

int merak_cuda_launch_bias_round16(void *stream, uint16_t *out, int ldo, const float *acc, const uint16_t *b,
                                   int N, int O)
{
    const size_t n = (size_t)N * O;
    if (n == 0)
        return cudaSuccess;
    bias_round16_k<<<ew_grid(n), NT, 0, STREAM(stream)>>>(out, ldo, acc, b, n, O);
    return cudaGetLastError();
}

} /* extern "C" */
