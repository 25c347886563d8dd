/*
 * rowwise.h - the per-thread arithmetic of the CUDA backend's row kernels
 * that move 16 bytes a load, written in the subset of C that C11 and CUDA
 * C++ share, so that tests/unit/test_rowwise runs the same code on the
 * CPU, thread by thread, against the CPU backend:
 *
 *   the norms (norm.cu)  a warp a row, the row in registers: layer norm's
 *            and RMS norm's forward and input gradient, float or bf16
 *            storage, where a row is a whole number of 16-byte vectors
 *            (C a multiple of 4 floats or 8 bf16, every buffer 16-byte
 *            aligned) and at most RW_VMAX of them fall to a lane.  Lane l
 *            holds vectors l, l + 32, ...; each sum over the row is a
 *            lane's partial sum, then the warp's xor-shuffle tree (every
 *            lane gets the same bits).  The row is read from memory once
 *            and written once.
 *   the column sums (norm.cu)  the norms' weight gradients and the
 *            linear layers' bias gradients: a thread a vector of columns,
 *            8 row lanes a block, chunks of rows summed in chunk order.
 *   the embeddings (embed.cu)  a 16-byte vector a thread: the token
 *            and position embeddings forward, the position embedding's
 *            weight gradient, the runs of equal ids of the token
 *            embedding's.
 *   attention's gradients (attention.cu)  the dense dQ, dK, dV added into
 *            the strided dq, dk, dv after the backward (with RoPE brought
 *            back through the rotation): a 16-byte vector a thread.
 *   the cross-entropy (loss.cu)  a block a row (a row of logits is long,
 *            50257 for GPT-2, and starts anywhere within 16 bytes): the
 *            elements before the row's first 16-byte boundary and after
 *            its last vector one at a time, the vectors between 16 bytes
 *            at a time.  Statistics in one pass (an online log-sum-exp:
 *            each thread's running maximum and sum, merged over the block
 *            in a fixed tree); the gradient in one more.
 *
 * Elements are float, or bf16 bit patterns (b16: widened exactly as read,
 * rounded once to nearest even as written, bf16.h).  Where a kernel takes
 * b16 or a lane count as a template constant, the branches on them go
 * away.  The other shapes (widths that are not whole vectors, buffers off
 * 16 bytes) take each file's one-element-a-thread kernels, whose
 * arithmetic is the same up to the order of sums (the same bits where an
 * element is computed alone: the embeddings, attention's adds, AdamW).
 */
#ifndef MERAK_ROWWISE_H
#define MERAK_ROWWISE_H

#include <stddef.h>
#include <stdint.h>

#include "bf16.h"
#include "rope.h"

#ifdef __CUDACC__
#define RW_FN static __device__ __forceinline__
#define RW_HOST_FN static __host__ __device__ __forceinline__
#define RW_UNROLL _Pragma("unroll")
typedef uint4 rw_u4;
RW_FN rw_u4 rw_ld(const void *p) { return *(const uint4 *)p; }
RW_FN void rw_st(void *p, rw_u4 v) { *(uint4 *)p = v; }
RW_FN float rw_f32(uint32_t u) { return __uint_as_float(u); }
RW_FN uint32_t rw_bits(float x) { return __float_as_uint(x); }
RW_FN float rw_exp(float x) { return expf(x); }
/* A product rounded on its own: never contracted into an fma with a sum,
 * which would make a + b of two products depend on which comes first. */
RW_FN float rw_mul(float a, float b) { return __fmul_rn(a, b); }
#else
#include <math.h>
#include <string.h>
#define RW_FN static inline
#define RW_HOST_FN static inline
#define RW_UNROLL
/* A GPU faults on a 16-byte access off 16 bytes; the CPU would not: a
 * test defines this to catch one. */
#ifndef RW_ALIGN_CHECK
#define RW_ALIGN_CHECK(p) ((void)0)
#endif
typedef struct rw_u4 {
    uint32_t x, y, z, w;
} rw_u4;
RW_FN rw_u4 rw_ld(const void *p)
{
    rw_u4 v;
    RW_ALIGN_CHECK(p);
    memcpy(&v, p, sizeof v);
    return v;
}
RW_FN void rw_st(void *p, rw_u4 v)
{
    RW_ALIGN_CHECK(p);
    memcpy(p, &v, sizeof v);
}
RW_FN float rw_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
RW_FN uint32_t rw_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
RW_FN float rw_exp(float x) { return expf(x); }
RW_FN float rw_mul(float a, float b) { return a * b; }
#endif

#define RW_LANES 32 /* a warp */
#define RW_VMAX 8   /* 16-byte vectors of a row a lane holds, at most */
#define RW_WARPS 4  /* rows (warps) of a norm kernel's block */

/* Elements in 16 bytes, and bytes of one. */
#define RW_E(b16) ((b16) ? 8 : 4)
#define RW_ES(b16) ((b16) ? 2 : 4)

/* ------------------------------------------------------------------ 16-byte vectors */

RW_FN uint32_t rw_word(rw_u4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/* Element e (< RW_E(b16)) of vector v as a float (bf16: element 2k is
 * word k's low half, little-endian as both the host and the GPU are). */
RW_FN float rw_get(rw_u4 v, int e, int b16)
{
    if (!b16)
        return rw_f32(rw_word(v, e));
    const uint32_t w = rw_word(v, e >> 1);
    return rw_f32(e & 1 ? w & 0xffff0000u : w << 16);
}

/* The vector of f[0 .. RW_E(b16)) in storage (bf16: each rounded once). */
RW_FN rw_u4 rw_pack(const float *f, int b16)
{
    uint32_t w[4];
    RW_UNROLL
    for (int i = 0; i < 4; i++)
        w[i] = b16 ? (uint32_t)merak_f32_to_bf16(f[2 * i]) | (uint32_t)merak_f32_to_bf16(f[2 * i + 1]) << 16
                   : rw_bits(f[i]);
    rw_u4 v;
    v.x = w[0], v.y = w[1], v.z = w[2], v.w = w[3];
    return v;
}

/* Element i of a row p in storage, as a float, and written. */
RW_FN float rw_elem(const void *p, size_t i, int b16)
{
    return b16 ? merak_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

RW_FN void rw_put(void *p, size_t i, float x, int b16)
{
    if (b16)
        ((uint16_t *)p)[i] = merak_f32_to_bf16(x);
    else
        ((float *)p)[i] = x;
}

/* ------------------------------------------------------------------ the norms: a warp a row */

/* The vectors of a row a lane holds: vector lane + RW_LANES * i, i < vmax
 * (vmax <= RW_VMAX), those below nv. */
typedef struct rw_row {
    rw_u4 v[RW_VMAX];
} rw_row;

/* Does a lane own vector slot i?  (A constant after unrolling, but for nv.) */
RW_FN int rw_has(int i, int lane, int nv, int vmax) { return i < vmax && lane + RW_LANES * i < nv; }

/* r = lane's vectors of row p (nv vectors). */
RW_FN void rw_load(rw_row *r, const void *p, int nv, int lane, int vmax)
{
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax))
            r->v[i] = rw_ld((const char *)p + 16 * (size_t)(lane + RW_LANES * i));
}

/* x = the lane's vectors of x + y, each element rounded as storage holds
 * it (bf16: once, as the add's own kernel rounds), also stored at sum:
 * a residual add whose sum a norm then reads, in one pass. */
RW_FN void rw_add_round(rw_row *x, const rw_row *y, void *sum, int nv, int lane, int vmax, int b16)
{
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            float o[8];
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++)
                o[e] = rw_get(x->v[i], e, b16) + rw_get(y->v[i], e, b16);
            x->v[i] = rw_pack(o, b16);
            rw_st((char *)sum + 16 * (size_t)(lane + RW_LANES * i), x->v[i]);
        }
}

/* The lane's part of sum (x - m) (sq 0) or sum (x - m)^2 (sq 1). */
RW_FN float rw_sum(const rw_row *x, float m, int sq, int nv, int lane, int vmax, int b16)
{
    float s = 0.0f;
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                const float d = rw_get(x->v[i], e, b16) - m;
                s += sq ? d * d : d;
            }
        }
    return s;
}

/* The lane's vectors of the output: y = (x - m) * r * w (+ b), b may be
 * NULL (RMS norm: m = 0, b NULL: x * r * w, the same bits). */
RW_FN void rw_norm_store(void *y, const rw_row *x, const void *w, const void *b, float m, float r, int nv,
                         int lane, int vmax, int b16)
{
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            const size_t at = 16 * (size_t)(lane + RW_LANES * i);
            const rw_u4 wv = rw_ld((const char *)w + at);
            rw_u4 bv = wv;
            if (b)
                bv = rw_ld((const char *)b + at);
            float o[8];
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                o[e] = (rw_get(x->v[i], e, b16) - m) * r * rw_get(wv, e, b16);
                if (b)
                    o[e] += rw_get(bv, e, b16);
            }
            rw_st((char *)y + at, rw_pack(o, b16));
        }
}

/* The lane's parts of the backward's two sums, with dn = dout * w and
 * nrm = (x - m) * r: a = sum dn, bb = sum dn * nrm (RMS norm: m = 0,
 * r = 1, so bb = sum dout * w * x). */
RW_FN void rw_norm_bwd_sums(float *a, float *bb, const rw_row *x, const rw_row *g, const void *w, float m,
                            float r, int nv, int lane, int vmax, int b16)
{
    float sa = 0.0f, sb = 0.0f;
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            const rw_u4 wv = rw_ld((const char *)w + 16 * (size_t)(lane + RW_LANES * i));
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                const float dn = rw_get(g->v[i], e, b16) * rw_get(wv, e, b16);
                sa += dn;
                sb += dn * ((rw_get(x->v[i], e, b16) - m) * r);
            }
        }
    *a = sa;
    *bb = sb;
}

/* The lane's vectors of the input gradient, added to dx (acc 1) or
 * written (acc 0, dx unread):
 *   layer norm (rms 0): (dn - a - nrm * bb) * r, a and bb the means
 *   RMS norm (rms 1):   r * dout * w - x * k, k = mean(dout w x) r^3 */
RW_FN void rw_norm_bwd_store(void *dx, const rw_row *x, const rw_row *g, const void *w, float m, float r,
                             float a, float bb, int rms, int acc, int nv, int lane, int vmax, int b16)
{
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            const size_t at = 16 * (size_t)(lane + RW_LANES * i);
            const rw_u4 wv = rw_ld((const char *)w + at);
            rw_u4 dv = wv;
            if (acc)
                dv = rw_ld((const char *)dx + at);
            float o[8];
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                const float xe = rw_get(x->v[i], e, b16), ge = rw_get(g->v[i], e, b16),
                            we = rw_get(wv, e, b16);
                const float d = rms ? r * ge * we - xe * bb : (ge * we - a - (xe - m) * r * bb) * r;
                o[e] = (acc ? rw_get(dv, e, b16) : 0.0f) + d;
            }
            rw_st((char *)dx + at, rw_pack(o, b16));
        }
}

/* Can rows of C elements take 16-byte vectors: C whole vectors (C > 0)
 * and each of the n buffers 16-byte aligned (NULL: absent)?  What every
 * vector path below asks first. */
RW_HOST_FN int rw_vec_ok(int C, int b16, const void *const *bufs, int n)
{
    if (C <= 0 || C % RW_E(b16))
        return 0;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)bufs[i] & 15)
            return 0;
    return 1;
}

/* The lanes per row a norm of C columns needs (1, 2, 4 or 8 vectors a
 * lane: the kernels' template argument), or 0 if it cannot take the row
 * kernels: not rw_vec_ok, or more than RW_VMAX vectors a lane. */
RW_HOST_FN int rw_norm_vmax(int C, int b16, const void *const *bufs, int nbufs)
{
    if (!rw_vec_ok(C, b16, bufs, nbufs))
        return 0;
    const int per = (C / RW_E(b16) + RW_LANES - 1) / RW_LANES;
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= RW_VMAX ? RW_VMAX : 0;
}

/* ------------------------------------------------------------------ column sums: a vector of columns a thread */

/* The norms' weight gradients and the linear layers' bias gradients sum
 * columns over rows: a block is 32 vectors of columns by RW_CR_Y row
 * lanes over a chunk of rows; its sums go to a partial row per chunk,
 * which norm.cu adds up in chunk order. */
#define RW_CR_Y 8     /* row lanes of a block */
#define RW_CR_ROWS 64 /* rows of a chunk (a shape-only choice: doubled past the grid's limit) */

enum { RW_COLSUM = 0, RW_LAYERNORM = 1, RW_RMSNORM = 2 };

#define RW_CR_U 4      /* rows a row lane has in flight */

/* Adds row r's vector (d of dout, x of inp) to the sums (as below). */
RW_FN void rw_colred_row(float *s0, float *s1, int mode, rw_u4 d, rw_u4 x, const float *mean, const float *rstd,
                         int r, int b16)
{
    RW_UNROLL
    for (int e = 0; e < RW_E(b16); e++) {
        const float g = rw_get(d, e, b16);
        if (mode == RW_COLSUM) {
            s0[e] += g;
        } else if (mode == RW_LAYERNORM) {
            s0[e] += g * ((rw_get(x, e, b16) - mean[r]) * rstd[r]);
            s1[e] += g;
        } else {
            s0[e] += g * (rw_get(x, e, b16) * rstd[r]);
        }
    }
}

/* Row lane ty's sums over the rows r0 + ty, r0 + ty + RW_CR_Y, ... < r1
 * of the RW_E(b16) columns of vector j (16 bytes at 16 j of each row of C
 * columns), in s0 and s1:
 *   COLSUM     dout                                  (s0)
 *   LAYERNORM  dout * (x - mean) * rstd, dout        (s0, s1)
 *   RMSNORM    dout * x * rstd                       (s0)  */
RW_FN void rw_colred(float *s0, float *s1, int mode, const void *dout, const void *inp, const float *mean,
                     const float *rstd, int C, int j, int r0, int r1, int ty, int b16)
{
    RW_UNROLL
    for (int e = 0; e < 8; e++)
        s0[e] = s1[e] = 0.0f;
    /* RW_CR_U rows' vectors in flight at a time, added in row order */
    int r = r0 + ty;
    for (; r + (RW_CR_U - 1) * RW_CR_Y < r1; r += RW_CR_U * RW_CR_Y) {
        rw_u4 d[RW_CR_U], x[RW_CR_U];
        RW_UNROLL
        for (int u = 0; u < RW_CR_U; u++) {
            const size_t at = (size_t)(r + u * RW_CR_Y) * C * RW_ES(b16) + 16 * (size_t)j;
            d[u] = rw_ld((const char *)dout + at);
            x[u] = d[u];
            if (mode != RW_COLSUM)
                x[u] = rw_ld((const char *)inp + at);
        }
        RW_UNROLL
        for (int u = 0; u < RW_CR_U; u++)
            rw_colred_row(s0, s1, mode, d[u], x[u], mean, rstd, r + u * RW_CR_Y, b16);
    }
    for (; r < r1; r += RW_CR_Y) {
        const size_t at = (size_t)r * C * RW_ES(b16) + 16 * (size_t)j;
        const rw_u4 d = rw_ld((const char *)dout + at);
        rw_u4 x = d;
        if (mode != RW_COLSUM)
            x = rw_ld((const char *)inp + at);
        rw_colred_row(s0, s1, mode, d, x, mean, rstd, r, b16);
    }
}

/* Can the column sums of C columns take 16-byte vectors (rw_vec_ok)? */
RW_HOST_FN int rw_colred_takes(int C, int b16, const void *dout, const void *inp)
{
    const void *const bufs[] = {dout, inp};
    return rw_vec_ok(C, b16, bufs, 2);
}

/* ------------------------------------------------------------------ a norm's whole backward: a block a chunk of rows */

/* Where a norm's input and weight gradients are computed together (both
 * parts of its backward at once), one kernel reads each row once: block
 * k runs rows [k rows, (k + 1) rows) a warp a row (warp w: rows w, w +
 * RW_WARPS, ... of the chunk), each lane adding the weight gradients of
 * its columns over its rows in registers; the block's warps add theirs,
 * warp by warp, into a partial row of the chunk, and the chunks' partial
 * rows are summed as the column sums' are (rw_colred_final). */
#define RW_NB_ROWS 16      /* rows of a chunk, doubled past RW_NB_CHUNKS chunks (shape-only) */
#define RW_NB_CHUNKS 1024

RW_HOST_FN int rw_nb_rows(int N)
{
    int rows = RW_NB_ROWS;
    while ((N + rows - 1) / rows > RW_NB_CHUNKS)
        rows *= 2;
    return rows;
}

/* Adds one row to a lane's weight-gradient sums of its columns (element
 * e of its vector i at 8 i + e), as rw_colred adds them:
 *   layer norm (rms 0): pw += dout * (x - m) * r, pb += dout
 *   RMS norm (rms 1):   pw += dout * x * r */
RW_FN void rw_norm_wgrad(float *pw, float *pb, const rw_row *x, const rw_row *g, float m, float r, int rms,
                         int nv, int lane, int vmax, int b16)
{
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                const float ge = rw_get(g->v[i], e, b16), xe = rw_get(x->v[i], e, b16);
                if (rms) {
                    pw[8 * i + e] += ge * (xe * r);
                } else {
                    pw[8 * i + e] += ge * ((xe - m) * r);
                    pb[8 * i + e] += ge;
                }
            }
        }
}

/* A lane's sums into the block's partial rows red (C floats) and, for
 * layer norm, red + C: written (add 0: the block's first warp) or added. */
RW_FN void rw_norm_wgrad_put(float *red, const float *pw, const float *pb, int add, int rms, int C, int nv,
                             int lane, int vmax, int b16)
{
    RW_UNROLL
    for (int i = 0; i < RW_VMAX; i++)
        if (rw_has(i, lane, nv, vmax)) {
            const int c0 = (lane + RW_LANES * i) * RW_E(b16);
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                red[c0 + e] = (add ? red[c0 + e] : 0.0f) + pw[8 * i + e];
                if (!rms)
                    red[C + c0 + e] = (add ? red[C + c0 + e] : 0.0f) + pb[8 * i + e];
            }
        }
}

/* The second stage of every column sum: dst0[c] (dst1[c]) += the sum over
 * nchunks partial rows (rows C apart) of column c.  Thread (c, y) of
 * RW_FIN_Y adds rows y, y + RW_FIN_Y, ... in order, then the y's are added
 * in order. */
#define RW_FIN_Y 16

RW_FN float rw_fin_lane(const float *part, int nchunks, int C, int c, int y)
{
    float t = 0.0f;
    for (int k = y; k < nchunks; k += RW_FIN_Y)
        t += part[(size_t)k * C + c];
    return t;
}

/* ------------------------------------------------------------------ embeddings: a vector a thread */

/* The embeddings (embed.cu) where C is whole vectors and the buffers are
 * 16-byte aligned: element e of a vector is column E * j + e of a row.
 * Vector v of out (N, C): row v / (C/E) of the token rows. */

/* out's vector v = wte's row ids[n] - v0 at the same columns, or zero
 * outside the shard [v0, v0 + V): the bits copied. */
RW_FN void rw_embedding_fwd(void *out, const int32_t *ids, const void *wte, int C, int v0, int V, size_t v,
                            int b16)
{
    const size_t nvr = (size_t)(C / RW_E(b16)), n = v / nvr, j = v % nvr;
    const long long r = (long long)ids[n] - v0;
    rw_u4 q;
    q.x = q.y = q.z = q.w = 0u;
    if (r >= 0 && r < V)
        q = rw_ld((const char *)wte + ((size_t)r * C * RW_ES(b16) + 16 * j));
    rw_st((char *)out + 16 * v, q);
}

/* out's vector v = inp's + wpe's at position (v's element) % TC (T x C, a
 * whole number of vectors), rounded once in bf16 storage. */
RW_FN void rw_posemb_fwd(void *out, const void *inp, const void *wpe, size_t TC, size_t v, int b16)
{
    const size_t E = (size_t)RW_E(b16), w = (v * E % TC) / E;
    const rw_u4 a = rw_ld((const char *)inp + 16 * v), b = rw_ld((const char *)wpe + 16 * w);
    float o[8];
    RW_UNROLL
    for (int e = 0; e < RW_E(b16); e++)
        o[e] = rw_get(a, e, b16) + rw_get(b, e, b16);
    rw_st((char *)out + 16 * v, rw_pack(o, b16));
}

/* dwpe (float) at the elements of dout's vector v of a T x C position
 * block += the sum over b (in order) of dout[b] there. */
RW_FN void rw_posemb_bwd_w(float *dwpe, const void *dout, int B, size_t TC, size_t v, int b16)
{
    const size_t E = (size_t)RW_E(b16), tcb = TC * RW_ES(b16);
    float acc[8];
    RW_UNROLL
    for (int e = 0; e < 8; e++)
        acc[e] = 0.0f;
    for (int b = 0; b < B; b++) {
        const rw_u4 q = rw_ld((const char *)dout + (size_t)b * tcb + 16 * v);
        RW_UNROLL
        for (int e = 0; e < RW_E(b16); e++)
            acc[e] += rw_get(q, e, b16);
    }
    /* E floats of dwpe: one or two 16-byte vectors */
    RW_UNROLL
    for (int h = 0; h < RW_E(b16) / 4; h++) {
        float *d = dwpe + v * E + 4 * (size_t)h;
        const rw_u4 q = rw_ld(d);
        float o[4];
        RW_UNROLL
        for (int e = 0; e < 4; e++)
            o[e] = rw_get(q, e, 0) + acc[4 * h + e];
        rw_st(d, rw_pack(o, 0));
    }
}

/* A run [p, q) of equal ids (sorted, stable) added into the float row dst
 * of dwte: the column vector j, rows rows[p..q) of dout in that order. */
RW_FN void rw_embedding_bwd_run(float *dst, const void *dout, const int32_t *rows, int p, int q, int C, int j,
                                int b16)
{
    const int E = RW_E(b16);
    float acc[8];
    RW_UNROLL
    for (int h = 0; h < RW_E(b16) / 4; h++) {
        const rw_u4 d = rw_ld(dst + (size_t)j * E + 4 * h);
        RW_UNROLL
        for (int e = 0; e < 4; e++)
            acc[4 * h + e] = rw_get(d, e, 0);
    }
    for (int r = p; r < q; r++) {
        const rw_u4 g = rw_ld((const char *)dout + ((size_t)rows[r] * C * RW_ES(b16) + 16 * (size_t)j));
        RW_UNROLL
        for (int e = 0; e < RW_E(b16); e++)
            acc[e] += rw_get(g, e, b16);
    }
    RW_UNROLL
    for (int h = 0; h < RW_E(b16) / 4; h++)
        rw_st(dst + (size_t)j * E + 4 * h, rw_pack(acc + 4 * h, 0));
}

/* Can the embeddings of width C take vectors (rw_vec_ok)? */
RW_HOST_FN int rw_embed_takes(int C, int b16, const void *a, const void *b, const void *c)
{
    const void *const bufs[] = {a, b, c};
    return rw_vec_ok(C, b16, bufs, 3);
}

/* ------------------------------------------------------------------ attention's gradients: a vector a thread */

/* The vector at d (+)= the vector at g (acc 0: d unread), rounded once. */
RW_FN void rw_add_vec(void *d, const void *g, int acc, int b16)
{
    const rw_u4 a = rw_ld(g);
    rw_u4 b = a;
    if (acc)
        b = rw_ld(d);
    float o[8];
    RW_UNROLL
    for (int e = 0; e < RW_E(b16); e++)
        o[e] = (acc ? rw_get(b, e, b16) : 0.0f) + rw_get(a, e, b16);
    rw_st(d, rw_pack(o, b16));
}

/* The dense gradients cuDNN's or the fused kernels' backward leaves, dQ
 * (rows, C), dK and dV (rows, Ckv), added to (acc 1) or written over (acc
 * 0) dq, dk, dv at their row strides (GPT-2's: one fused q|k|v row),
 * without RoPE: vector v of a row's C + 2 Ckv elements, the segments in
 * that order.  Widths and strides whole vectors, every buffer 16-byte
 * aligned (rw_attn_add_takes). */
RW_FN void rw_attn_add(void *dq, void *dk, void *dv, const void *dQ, const void *dK, const void *dV, int C,
                       int Ckv, int dqs, int dks, int dvs, int acc, size_t v, int b16)
{
    const size_t E = (size_t)RW_E(b16), es = (size_t)RW_ES(b16), nq = (size_t)C / E, nk = (size_t)Ckv / E;
    const size_t row = v / (nq + 2 * nk);
    size_t j = v % (nq + 2 * nk);
    char *d;
    const char *g;
    if (j < nq) {
        d = (char *)dq + (row * (size_t)dqs + j * E) * es;
        g = (const char *)dQ + (row * (size_t)C + j * E) * es;
    } else if ((j -= nq) < nk) {
        d = (char *)dk + (row * (size_t)dks + j * E) * es;
        g = (const char *)dK + (row * (size_t)Ckv + j * E) * es;
    } else {
        j -= nk;
        d = (char *)dv + (row * (size_t)dvs + j * E) * es;
        g = (const char *)dV + (row * (size_t)Ckv + j * E) * es;
    }
    rw_add_vec(d, g, acc, b16);
}

/* With RoPE (rope->theta > 0): the gradient of q's and k's rotated values
 * brought back through the rotation at the row's position t = row % T,
 *   d[j]        (+)= g[j] cos + g[j + hd/2] sin
 *   d[j + hd/2] (+)= g[j + hd/2] cos - g[j] sin,   j < hd/2,
 * cos and sin of t * inv_freq[j] (rope.h) in float; v's as rw_attn_add.
 * Vector v of a row's (nh + nkv) hd/2 / E rotated pairs of vectors, then
 * its Ckv / E of v. */
RW_FN void rw_attn_add_rope(void *dq, void *dk, void *dv, const void *dQ, const void *dK, const void *dV, int nh,
                            int nkv, int hd, int T, const merak_rope *rope, int dqs, int dks, int dvs, int acc,
                            size_t v, int b16)
{
    const size_t E = (size_t)RW_E(b16), es = (size_t)RW_ES(b16), half = (size_t)hd / 2, ph = half / E;
    const size_t nrot = (size_t)(nh + nkv) * ph, Ckv = (size_t)nkv * hd, per = nrot + Ckv / E;
    const size_t row = v / per, j = v % per;
    if (j >= nrot) { /* v: a plain sum */
        const size_t c = (j - nrot) * E;
        rw_add_vec((char *)dv + (row * (size_t)dvs + c) * es, (const char *)dV + (row * Ckv + c) * es, acc, b16);
        return;
    }
    const size_t head = j / ph, j0 = (j % ph) * E;
    const int isq = head < (size_t)nh;
    const size_t hh = isq ? head : head - (size_t)nh, gw = isq ? (size_t)nh * hd : Ckv;
    char *d = (char *)(isq ? dq : dk) + (row * (size_t)(isq ? dqs : dks) + hh * hd + j0) * es;
    const char *g = (const char *)(isq ? dQ : dK) + (row * gw + hh * hd + j0) * es;
    const rw_u4 g0 = rw_ld(g), g1 = rw_ld(g + half * es);
    rw_u4 d0 = g0, d1 = g1;
    if (acc)
        d0 = rw_ld(d), d1 = rw_ld(d + half * es);
    const int t = (int)(row % (size_t)T);
    float o0[8], o1[8];
    RW_UNROLL
    for (int e = 0; e < RW_E(b16); e++) {
        const float ang = (float)t * merak_rope_inv_freq(rope, (int)j0 + e, hd);
        const float c = cosf(ang), sn = sinf(ang), a0 = rw_get(g0, e, b16), a1 = rw_get(g1, e, b16);
        o0[e] = (acc ? rw_get(d0, e, b16) : 0.0f) + (a0 * c + a1 * sn);
        o1[e] = (acc ? rw_get(d1, e, b16) : 0.0f) + (a1 * c - a0 * sn);
    }
    rw_st(d, rw_pack(o0, b16));
    rw_st(d + half * es, rw_pack(o1, b16));
}

/* Can rw_attn_add (rw_attn_add_rope: hd a multiple of 2 E) take these?
 * C, Ckv: the q and k|v widths. */
RW_HOST_FN int rw_attn_add_takes(int C, int Ckv, int dqs, int dks, int dvs, int b16, const void *const *bufs)
{
    const int E = RW_E(b16);
    return rw_vec_ok(C, b16, bufs, 6) && rw_vec_ok(Ckv, b16, bufs, 0) && dqs % E == 0 && dks % E == 0 &&
           dvs % E == 0;
}

/* ------------------------------------------------------------------ the cross-entropy: a block a row */

/* Row p of n elements as the kernels walk it: *head elements before its
 * first 16-byte boundary, *nv vectors, then the rest one at a time. */
RW_FN void rw_split(const void *p, int n, int b16, int *head, int *nv)
{
    int h = (int)(((16 - ((uintptr_t)p & 15)) & 15) / RW_ES(b16));
    if (h > n)
        h = n;
    *head = h;
    *nv = (n - h) / RW_E(b16);
}

/* The online log-sum-exp: (m, s) stands for s * exp(m), the sum of exp of
 * the elements seen; m = -inf, s = 0 for none.  A -inf element adds
 * nothing (exp(-inf - -inf) would be a NaN). */
RW_FN void rw_lse_add(float *m, float *s, float x)
{
    if (x == -INFINITY)
        return;
    if (x > *m) {
        *s = *s * rw_exp(*m - x) + 1.0f;
        *m = x;
    } else {
        *s += rw_exp(x - *m);
    }
}

/* The same for the elements of vector v: its maximum first, so the sum
 * is rescaled at most once and the exponentials are independent. */
RW_FN void rw_lse_add_vec(float *m, float *s, rw_u4 v, int b16)
{
    float vm = rw_get(v, 0, b16);
    RW_UNROLL
    for (int e = 1; e < RW_E(b16); e++) {
        const float x = rw_get(v, e, b16);
        vm = x > vm ? x : vm;
    }
    if (vm == -INFINITY)
        return; /* all -inf (a NaN is never < or >: it goes on, and spreads) */
    if (vm > *m) {
        *s *= rw_exp(*m - vm);
        *m = vm;
    }
    float t = 0.0f;
    RW_UNROLL
    for (int e = 0; e < RW_E(b16); e++)
        t += rw_exp(rw_get(v, e, b16) - *m);
    *s += t;
}

/* (m, s) merged with (m2, s2): the same bits whichever comes first (the
 * products rounded apart, their sum commutative), so every lane of an
 * xor-shuffle tree ends with the same pair. */
RW_FN void rw_lse_merge(float *m, float *s, float m2, float s2)
{
    const float M = *m > m2 ? *m : m2;
    if (M == -INFINITY)
        return; /* both empty */
    *s = rw_mul(*s, rw_exp(*m - M)) + rw_mul(s2, rw_exp(m2 - M));
    *m = M;
}

/* A thread's vectors of a long row (the cross-entropy's) are loaded
 * RW_CE_U at a time, all in flight before the first is used, then used
 * in order (vectors j, j + nthr, ...: the order, and so the bits, of one
 * at a time).  One 16-byte load in flight a thread is too few bytes in
 * flight to reach the copy rate. */
#define RW_CE_U 4

/* Thread tid of nthr: its (m, s) over its elements of row x (n elements);
 * keep (or NULL): where its 16-byte vectors go as they are read (vector j
 * of the row's nv at keep[j], rw_split), for rw_ce_grad's `from`. */
RW_FN void rw_ce_partial(float *m, float *s, const void *x, int n, int b16, int tid, int nthr, rw_u4 *keep)
{
    int h, nv;
    rw_split(x, n, b16, &h, &nv);
    const int E = RW_E(b16), rest = n - h - nv * E;
    float pm = -INFINITY, ps = 0.0f;
    if (tid < h)
        rw_lse_add(&pm, &ps, rw_elem(x, (size_t)tid, b16));
    const char *xv = (const char *)x + (size_t)h * RW_ES(b16);
    int j = tid;
    for (; j + (RW_CE_U - 1) * nthr < nv; j += RW_CE_U * nthr) {
        rw_u4 v[RW_CE_U];
        RW_UNROLL
        for (int u = 0; u < RW_CE_U; u++)
            v[u] = rw_ld(xv + 16 * (size_t)(j + u * nthr));
        RW_UNROLL
        for (int u = 0; u < RW_CE_U; u++) {
            rw_lse_add_vec(&pm, &ps, v[u], b16);
            if (keep)
                keep[j + u * nthr] = v[u];
        }
    }
    for (; j < nv; j += nthr) {
        const rw_u4 v = rw_ld(xv + 16 * (size_t)j);
        rw_lse_add_vec(&pm, &ps, v, b16);
        if (keep)
            keep[j] = v;
    }
    if (tid < rest)
        rw_lse_add(&pm, &ps, rw_elem(x, (size_t)(h + nv * E + tid), b16));
    *m = pm;
    *s = ps;
}

/* One element's gradient: (exp(x - l) - [j == t]) * scale. */
RW_FN float rw_ce_grad1(float x, int j, long long t, float l, float scale)
{
    return (rw_exp(x - l) - (j == t ? 1.0f : 0.0f)) * scale;
}

/* Thread tid of nthr: its elements of the gradient of row x (n elements,
 * target t relative to the row, l its log-sum-exp), written over x
 * (dx == x) or added to dx (dx at the same offset within 16 bytes as x);
 * zero (zero 1: a row without a target, in place) instead.  from (or
 * NULL): x's 16-byte vectors as the same thread's rw_ce_partial kept them,
 * read there instead of from x (in place: the bits of reading x). */
RW_FN void rw_ce_grad(void *dx, const void *x, int n, long long t, float l, float scale, int zero, int b16,
                      int tid, int nthr, const rw_u4 *from)
{
    const int add = dx != x;
    int h, nv;
    rw_split(x, n, b16, &h, &nv);
    const int E = RW_E(b16), rest = n - h - nv * E;
    if (tid < h) {
        const float g = zero ? 0.0f : rw_ce_grad1(rw_elem(x, (size_t)tid, b16), tid, t, l, scale);
        rw_put(dx, (size_t)tid, add ? rw_elem(dx, (size_t)tid, b16) + g : g, b16);
    }
    const size_t vb = (size_t)h * RW_ES(b16);
    int j = tid;
    for (; j + (RW_CE_U - 1) * nthr < nv; j += RW_CE_U * nthr) {   /* RW_CE_U vectors in flight */
        rw_u4 v[RW_CE_U], d[RW_CE_U];
        RW_UNROLL
        for (int u = 0; u < RW_CE_U; u++) {
            v[u] = from ? from[j + u * nthr] : rw_ld((const char *)x + vb + 16 * (size_t)(j + u * nthr));
            d[u] = v[u];
            if (add)
                d[u] = rw_ld((const char *)dx + vb + 16 * (size_t)(j + u * nthr));
        }
        RW_UNROLL
        for (int u = 0; u < RW_CE_U; u++) {
            const int j0 = h + (j + u * nthr) * E;
            float o[8];
            RW_UNROLL
            for (int e = 0; e < RW_E(b16); e++) {
                const float g = zero ? 0.0f : rw_ce_grad1(rw_get(v[u], e, b16), j0 + e, t, l, scale);
                o[e] = add ? rw_get(d[u], e, b16) + g : g;
            }
            rw_st((char *)dx + vb + 16 * (size_t)(j + u * nthr), rw_pack(o, b16));
        }
    }
    for (; j < nv; j += nthr) {
        const int j0 = h + j * E;
        const rw_u4 v = from ? from[j] : rw_ld((const char *)x + vb + 16 * (size_t)j);
        rw_u4 d = v;
        if (add)
            d = rw_ld((const char *)dx + vb + 16 * (size_t)j);
        float o[8];
        RW_UNROLL
        for (int e = 0; e < RW_E(b16); e++) {
            const float g = zero ? 0.0f : rw_ce_grad1(rw_get(v, e, b16), j0 + e, t, l, scale);
            o[e] = add ? rw_get(d, e, b16) + g : g;
        }
        rw_st((char *)dx + vb + 16 * (size_t)j, rw_pack(o, b16));
    }
    if (tid < rest) {
        const int k = h + nv * E + tid;
        const float g = zero ? 0.0f : rw_ce_grad1(rw_elem(x, (size_t)k, b16), k, t, l, scale);
        rw_put(dx, (size_t)k, add ? rw_elem(dx, (size_t)k, b16) + g : g, b16);
    }
}

#endif /* MERAK_ROWWISE_H */
