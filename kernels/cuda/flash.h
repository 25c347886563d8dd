/*
 * flash.h - causal attention a tile at a time with an online softmax
 * (flash attention), one row per thread: the arithmetic of the CUDA
 * backend's fused attention kernels (attention.cu), written in the subset
 * of C that C11 and CUDA C++ share, so that tests/unit/test_flash runs the
 * same code on the CPU, block by block and thread by thread between the
 * barriers, against the CPU backend's attention.
 *
 * Three kernels, each block a tile of rows of one (batch row, head), each
 * thread one row, the other side's rows passing through shared memory a
 * tile at a time:
 *
 *   forward  thread = query row i of head h: q (times 1/sqrt(hd)) and the
 *            output accumulator in registers; keys and values of kv head
 *            h / (nh/nkv) in tiles.  Per chunk of FLASH_CH keys: the
 *            scores, the new running max m, the accumulator and the sum l
 *            rescaled by exp(m_old - m).  out = acc / l, lse = m + log l.
 *   dq       thread = query row i: q and dq in registers, dout's row in
 *            shared memory (its own row).  A first pass over the keys sums
 *            D = sum_j P_ij dP_ij (dP = dout V^T, P = exp(S - lse)); the
 *            second adds dS_ij k_j, dS = P (dP - D), into dq.
 *   dk, dv   thread = key row j of kv head g: k and dv in registers, v and
 *            dk in shared memory (its own rows); the queries >= j of the
 *            group's nh/nkv heads, FLASH_DK_QUERIES at a time with their
 *            dout rows, lse and D: dv += P_ij dout_i, dk += dS_ij q_i.
 *
 * No T x T matrix anywhere; no atomics: every sum runs in an order fixed
 * by the shapes, so results are bitwise reproducible.  Head dimensions up
 * to FLASH_HD: the columns past hd are zero in every row, so the loops
 * need no guards.  Scores are (q / sqrt(hd)) . k.
 */
#ifndef MERAK_FLASH_H
#define MERAK_FLASH_H

#ifdef __CUDACC__
#define FLASH_STATIC_ASSERT static_assert
#define FLASH_FN static __device__ __forceinline__
#define FLASH_UNROLL _Pragma("unroll")
typedef float4 flash_f4;
FLASH_FN flash_f4 flash_ld4(const float *p) { return *(const float4 *)p; }
FLASH_FN void flash_st4(float *p, flash_f4 v) { *(float4 *)p = v; }
/* The sums (flash_axpy_*) read the chunk's rows of shared memory again
 * rather than keep them in registers since the scores read them: that
 * would be FLASH_CH * FLASH_HD values, and ptxas, which merges repeated
 * plain loads, spilled kilobytes per thread.  A volatile load is never
 * merged.  Without a "memory" clobber it is ordered against other threads'
 * stores by the __syncthreads between a tile's load and its use, and the
 * thread's own stores (flash_axpy_s) go to other rows. */
FLASH_FN flash_f4 flash_ld4_again(const float *p)
{
    flash_f4 v;
    asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
    return v;
}
#else
#include <math.h>
#include <stddef.h>
#define FLASH_STATIC_ASSERT _Static_assert
#define FLASH_FN static inline
#define FLASH_UNROLL
typedef struct flash_f4 {
    float x, y, z, w;
} flash_f4;
FLASH_FN flash_f4 flash_ld4(const float *p)
{
    flash_f4 v;
    v.x = p[0], v.y = p[1], v.z = p[2], v.w = p[3];
    return v;
}
FLASH_FN void flash_st4(float *p, flash_f4 v) { p[0] = v.x, p[1] = v.y, p[2] = v.z, p[3] = v.w; }
#define flash_ld4_again flash_ld4
#endif

#define FLASH_HD 64 /* the largest head dimension (a multiple of 4) */
#define FLASH_CH 16 /* scores computed at once by a thread */
/* A thread's own row in shared memory: 16-byte aligned, and the float4
 * reads of a warp's 32 own rows hit every bank once per quarter warp. */
#define FLASH_PITCH (FLASH_HD + 4)

#define FLASH_FWD_ROWS 64   /* forward: query rows (threads) of a block */
#define FLASH_FWD_KEYS 64   /* forward: keys and values in shared memory */
#define FLASH_DQ_ROWS 64    /* dq: query rows (threads) of a block */
#define FLASH_DQ_KEYS 32    /* dq: keys and values in shared memory */
#define FLASH_DK_ROWS 64    /* dk, dv: key rows (threads) of a block */
#define FLASH_DK_QUERIES 16 /* dk, dv: queries (with dout, lse, D) in shared memory */

FLASH_STATIC_ASSERT(FLASH_HD % 4 == 0, "rows are read as float4");
FLASH_STATIC_ASSERT(FLASH_FWD_KEYS % FLASH_CH == 0 && FLASH_DQ_KEYS % FLASH_CH == 0,
                    "a chunk never reads past its tile");
FLASH_STATIC_ASSERT(FLASH_DK_QUERIES == FLASH_CH, "flash_dk_tile takes a tile as one chunk");

/* One attention call.  The q, k, v the kernels read have row strides qs,
 * ks, vs (the rotated copies with RoPE); out, dQ (B,T,nh*hd), dK, dV
 * (B,T,nkv*hd) are dense; lse and D are (B,nh,T). */
typedef struct flash_p {
    int T, nh, nkv, hd;
    int qs, ks, vs;
    float scale; /* 1/sqrt(hd) */
} flash_p;

/* ------------------------------------------------------------------ rows and tiles */

/* v[0..FLASH_HD) = a * row t of head `head` of batch row b of X (row
 * stride xs), zero past hd.  v: registers or a row of shared memory. */
FLASH_FN void flash_row_load(float *v, const float *X, int xs, const flash_p *p, int b, int head,
                             int t, float a)
{
    const float *x = X + ((size_t)b * p->T + t) * (size_t)xs + (size_t)head * p->hd;
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        v[d] = d < p->hd ? x[d] * a : 0.0f;
}

/* A tile S (n rows of FLASH_HD) = a * rows [t0, t0+n) of head `head` of
 * batch row b of X; rows past T and columns past hd are zero.  Thread tid
 * of nthr stores every nthr-th element, consecutive threads consecutive
 * columns (coalesced reads). */
FLASH_FN void flash_tile_load(float *S, int n, const float *X, int xs, const flash_p *p, int b,
                              int head, int t0, float a, int tid, int nthr)
{
    for (int e = tid; e < n * FLASH_HD; e += nthr) {
        const int r = e / FLASH_HD, d = e % FLASH_HD, t = t0 + r;
        S[e] = t < p->T && d < p->hd
                   ? X[((size_t)b * p->T + t) * (size_t)xs + (size_t)head * p->hd + d] * a
                   : 0.0f;
    }
}

/* s[c] = a . S[c], c < FLASH_CH, S rows of FLASH_HD in shared memory that
 * the whole warp reads; a in registers (a_own 0) or the thread's own row
 * of shared memory (a_own 1, read as float4, once per step; a register
 * array is read element by element so it stays in registers).  Column-
 * major over the chunk, so each step keeps only the FLASH_CH sums and one
 * float4 alive.  a_own is a constant at every call: inlined, the branch
 * goes away. */
FLASH_FN void flash_scores(float *s, const float *a, int a_own, const float *S)
{
    FLASH_UNROLL
    for (int c = 0; c < FLASH_CH; c++)
        s[c] = 0.0f;
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d += 4) {
        flash_f4 u;
        if (a_own)
            u = flash_ld4(a + d);
        else
            u.x = a[d], u.y = a[d + 1], u.z = a[d + 2], u.w = a[d + 3];
        FLASH_UNROLL
        for (int c = 0; c < FLASH_CH; c++) {
            const flash_f4 v = flash_ld4(S + (size_t)c * FLASH_HD + d);
            s[c] += u.x * v.x;
            s[c] += u.y * v.y;
            s[c] += u.z * v.z;
            s[c] += u.w * v.w;
        }
    }
}

/* r (FLASH_HD, registers) = r * alpha + sum_c w[c] S[c0+c], S rows of FLASH_HD */
FLASH_FN void flash_axpy_r(float *r, float alpha, const float *w, const float *S)
{
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d += 4) {
        float a0 = r[d] * alpha, a1 = r[d + 1] * alpha, a2 = r[d + 2] * alpha,
              a3 = r[d + 3] * alpha;
        FLASH_UNROLL
        for (int c = 0; c < FLASH_CH; c++) {
            const flash_f4 v = flash_ld4_again(S + (size_t)c * FLASH_HD + d);
            a0 += w[c] * v.x;
            a1 += w[c] * v.y;
            a2 += w[c] * v.z;
            a3 += w[c] * v.w;
        }
        r[d] = a0, r[d + 1] = a1, r[d + 2] = a2, r[d + 3] = a3;
    }
}

/* own (FLASH_HD, a thread's row of shared memory) += sum_c w[c] S[c] */
FLASH_FN void flash_axpy_s(float *own, const float *w, const float *S)
{
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d += 4) {
        flash_f4 a = flash_ld4(own + d);
        FLASH_UNROLL
        for (int c = 0; c < FLASH_CH; c++) {
            const flash_f4 v = flash_ld4_again(S + (size_t)c * FLASH_HD + d);
            a.x += w[c] * v.x;
            a.y += w[c] * v.y;
            a.z += w[c] * v.z;
            a.w += w[c] * v.w;
        }
        flash_st4(own + d, a);
    }
}

/* The keys [0, end) that the query rows [i0, i0+rows) see. */
FLASH_FN int flash_keys_end(int i0, int rows, int T) { return i0 + rows < T ? i0 + rows : T; }

/* How many of a tile's n keys, from key j0 on, query i sees (<= 0: none). */
FLASH_FN int flash_seen(int i, int j0, int n) { return i - j0 + 1 < n ? i - j0 + 1 : n; }

/* ------------------------------------------------------------------ forward */

typedef struct flash_fwd_row {
    float q[FLASH_HD];   /* the query row, times scale */
    float acc[FLASH_HD]; /* sum of exp(s_j - m) v_j */
    float m, l;          /* the largest score so far, sum of exp(s_j - m) */
} flash_fwd_row;

FLASH_FN void flash_fwd_begin(flash_fwd_row *r, const float *Q, const flash_p *p, int b, int h,
                              int i)
{
    flash_row_load(r->q, Q, p->qs, p, b, h, i, p->scale);
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        r->acc[d] = 0.0f;
    r->m = -INFINITY;
    r->l = 0.0f;
}

/* Folds the keys j0 + c, c < n, of the tile Ks, Vs into query row i
 * (those with j0 + c <= i). */
FLASH_FN void flash_fwd_tile(flash_fwd_row *r, const float *Ks, const float *Vs, int j0, int n,
                             int i)
{
    const int last = flash_seen(i, j0, n);
    for (int c0 = 0; c0 < last; c0 += FLASH_CH) {
        float s[FLASH_CH];
        float mx = -INFINITY;
        flash_scores(s, r->q, 0, Ks + (size_t)c0 * FLASH_HD);
        FLASH_UNROLL
        for (int c = 0; c < FLASH_CH; c++) {
            if (c0 + c >= last)
                s[c] = -INFINITY;
            mx = fmaxf(mx, s[c]);
        }
        const float m = fmaxf(r->m, mx); /* finite: key c0 is seen */
        const float alpha = expf(r->m - m);
        float ps = 0.0f;
        FLASH_UNROLL
        for (int c = 0; c < FLASH_CH; c++) {
            s[c] = expf(s[c] - m);
            ps += s[c];
        }
        r->l = r->l * alpha + ps;
        r->m = m;
        flash_axpy_r(r->acc, alpha, s, Vs + (size_t)c0 * FLASH_HD);
    }
}

FLASH_FN void flash_fwd_end(const flash_fwd_row *r, float *out, float *lse, const flash_p *p,
                            int b, int h, int i)
{
    float *o = out + ((size_t)b * p->T + i) * ((size_t)p->nh * p->hd) + (size_t)h * p->hd;
    const float inv = 1.0f / r->l;
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        if (d < p->hd)
            o[d] = r->acc[d] * inv;
    lse[((size_t)b * p->nh + h) * p->T + i] = r->m + logf(r->l);
}

/* ------------------------------------------------------------------ backward: dq and D */

typedef struct flash_dq_row {
    float q[FLASH_HD];  /* the query row, times scale */
    float dq[FLASH_HD]; /* sum of dS_ij k_j */
    float lse, D;
} flash_dq_row;

/* dO: the thread's own row of shared memory, which receives dout's row. */
FLASH_FN void flash_dq_begin(flash_dq_row *r, float *dO, const float *Q, const float *dout,
                             const float *lse, const flash_p *p, int b, int h, int i)
{
    flash_row_load(r->q, Q, p->qs, p, b, h, i, p->scale);
    flash_row_load(dO, dout, p->nh * p->hd, p, b, h, i, 1.0f);
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        r->dq[d] = 0.0f;
    r->lse = lse[((size_t)b * p->nh + h) * p->T + i];
    r->D = 0.0f;
}

/* P and dP of the keys c0 + c of the tile against query row i: pr[c] = 0
 * for the keys at or past last (after i, or past the tile's end). */
FLASH_FN void flash_dq_probs(const flash_dq_row *r, const float *dO, const float *Ks,
                             const float *Vs, int c0, int last, float *pr, float *dp)
{
    flash_scores(pr, r->q, 0, Ks + (size_t)c0 * FLASH_HD);
    flash_scores(dp, dO, 1, Vs + (size_t)c0 * FLASH_HD);
    FLASH_UNROLL
    for (int c = 0; c < FLASH_CH; c++)
        pr[c] = c0 + c < last ? expf(pr[c] - r->lse) : 0.0f;
}

/* Folds the tile's keys that row i sees into it: pass 0 sums D = sum of
 * P dP, pass 1 (after every key's pass 0) adds dS k into dq. */
FLASH_FN void flash_dq_tile(flash_dq_row *r, const float *dO, const float *Ks, const float *Vs,
                            int j0, int n, int i, int pass)
{
    const int last = flash_seen(i, j0, n);
    for (int c0 = 0; c0 < last; c0 += FLASH_CH) {
        float pr[FLASH_CH], dp[FLASH_CH];
        flash_dq_probs(r, dO, Ks, Vs, c0, last, pr, dp);
        if (pass == 0) {
            FLASH_UNROLL
            for (int c = 0; c < FLASH_CH; c++)
                r->D += pr[c] * dp[c];
            continue;
        }
        FLASH_UNROLL
        for (int c = 0; c < FLASH_CH; c++)
            pr[c] *= dp[c] - r->D; /* dS */
        flash_axpy_r(r->dq, 1.0f, pr, Ks + (size_t)c0 * FLASH_HD);
    }
}

/* dQ (B,T,nh*hd) row = scale * dq; D (B,nh,T) for the dk, dv kernel. */
FLASH_FN void flash_dq_end(const flash_dq_row *r, float *dQ, float *D, const flash_p *p, int b,
                           int h, int i)
{
    float *o = dQ + ((size_t)b * p->T + i) * ((size_t)p->nh * p->hd) + (size_t)h * p->hd;
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        if (d < p->hd)
            o[d] = r->dq[d] * p->scale;
    D[((size_t)b * p->nh + h) * p->T + i] = r->D;
}

/* ------------------------------------------------------------------ backward: dk, dv */

typedef struct flash_dk_row {
    float k[FLASH_HD];  /* the key row */
    float dv[FLASH_HD]; /* sum of P_ij dout_i */
} flash_dk_row;

/* V, dK: the thread's own rows of shared memory (v's row; dk's sum). */
FLASH_FN void flash_dk_begin(flash_dk_row *r, float *V, float *dK, const float *K,
                             const float *v, const flash_p *p, int b, int g, int j)
{
    flash_row_load(r->k, K, p->ks, p, b, g, j, 1.0f);
    flash_row_load(V, v, p->vs, p, b, g, j, 1.0f);
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        r->dv[d] = dK[d] = 0.0f;
}

/* lse and D of the query rows [i0, i0+FLASH_DK_QUERIES) of head h (0 past
 * T), thread tid of nthr. */
FLASH_FN void flash_dk_stats_load(float *ls, float *Ds, const float *lse, const float *D,
                                  const flash_p *p, int b, int h, int i0, int tid, int nthr)
{
    for (int c = tid; c < FLASH_DK_QUERIES; c += nthr) {
        const int i = i0 + c;
        const size_t at = ((size_t)b * p->nh + h) * p->T + i;
        ls[c] = i < p->T ? lse[at] : 0.0f;
        Ds[c] = i < p->T ? D[at] : 0.0f;
    }
}

/* Folds the queries i0 + c, c < n, of the tile (Qs times scale, dOs, ls,
 * Ds) into key row j (those with i0 + c >= j). */
FLASH_FN void flash_dk_tile(flash_dk_row *r, const float *V, float *dK, const float *Qs,
                            const float *dOs, const float *ls, const float *Ds, int i0, int n,
                            int j)
{
    if (i0 + n <= j)
        return;
    float pr[FLASH_CH], ds[FLASH_CH];
    flash_scores(pr, r->k, 0, Qs);
    flash_scores(ds, V, 1, dOs); /* dP */
    FLASH_UNROLL
    for (int c = 0; c < FLASH_CH; c++) {
        pr[c] = c < n && i0 + c >= j ? expf(pr[c] - ls[c]) : 0.0f;
        ds[c] = pr[c] * (ds[c] - Ds[c]);
    }
    flash_axpy_r(r->dv, 1.0f, pr, dOs);
    flash_axpy_s(dK, ds, Qs);
}

/* dK, dV (B,T,nkv*hd) rows of key j of kv head g. */
FLASH_FN void flash_dk_end(const flash_dk_row *r, const float *dK, float *dKo, float *dVo,
                           const flash_p *p, int b, int g, int j)
{
    const size_t at = ((size_t)b * p->T + j) * ((size_t)p->nkv * p->hd) + (size_t)g * p->hd;
    FLASH_UNROLL
    for (int d = 0; d < FLASH_HD; d++)
        if (d < p->hd) {
            dKo[at + d] = dK[d];
            dVo[at + d] = r->dv[d];
        }
}

#endif /* MERAK_FLASH_H */
