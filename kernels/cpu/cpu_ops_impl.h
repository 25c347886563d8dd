/*
 * cpu_ops_impl.h - the CPU kernels, written once over an element type.
 *
 * Included by cpu_kernels.c once per type, with these macros defined:
 *   REAL        element type (float, double)
 *   SFX         suffix of every function name (_f32, _f64), via FN(name)
 *   GEMM        cblas_sgemm / cblas_dgemm
 *   R_EXP, R_SQRT, R_TANH, R_COS, R_SIN, R_INV_FREQ  math of that type
 *   TABLE_T     the table type (merak_kernels, merak_kernels_f64)
 *   TABLE_NAME  the table's name
 * and defines the table FN(cpu_table).  No include guard, on purpose.
 *
 * Conventions (kernels.h): forward kernels overwrite, backward kernels
 * accumulate (+=).  Statistics (means, variances, sums of exponentials) are
 * accumulated in double.  Every OpenMP loop writes disjoint outputs and every
 * reduction runs on one thread in a fixed order: results do not depend on the
 * thread count.  Nothing here allocates.
 */

/* ============================================================== embedding
 * fwd: out (N,C) = wte (V,C) [ids (N) - v0]; ids outside [v0, v0+V) (rows of
 *      another tensor-parallel shard) give zero rows
 * bwd: dwte (V,C) += scatter-add of dout (N,C) by ids - v0 (in-shard rows only).
 *      Threads own column blocks, so rows sharing an id are added by one
 *      thread, in row order. */
static void FN(embedding_fwd)(REAL *out, const int32_t *ids, const REAL *wte,
                              int N, int C, int v0, int V)
{
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int n = 0; n < N; n++) {
        const int64_t r = (int64_t)ids[n] - v0;
        if (r >= 0 && r < V)
            memcpy(out + (size_t)n * C, wte + (size_t)r * C, (size_t)C * sizeof(REAL));
        else
            memset(out + (size_t)n * C, 0, (size_t)C * sizeof(REAL));
    }
}

static void FN(embedding_bwd_w)(REAL *dwte, const REAL *dout, const int32_t *ids,
                                int N, int C, int v0, int V)
{
    const int nblk = (C + COLBLK - 1) / COLBLK;
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int cb = 0; cb < nblk; cb++) {
        const int c0 = cb * COLBLK, c1 = imin(C, c0 + COLBLK);
        for (int n = 0; n < N; n++) {
            const int64_t r = (int64_t)ids[n] - v0;
            if (r < 0 || r >= V)
                continue;
            REAL *d = dwte + (size_t)r * C;
            const REAL *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++)
                d[c] += g[c];
        }
    }
}

/* ============================================================== positional embedding
 * fwd: out (B,T,C) = inp (B,T,C) + wpe[t] ; wpe (P>=T, C)
 * bwd: dinp += dout is accumulate(); dwpe[t] += sum_b dout[b,t] */
static void FN(posemb_fwd)(REAL *out, const REAL *inp, const REAL *wpe,
                           int B, int T, int C)
{
    const ptrdiff_t rows = (ptrdiff_t)B * T;
    OMP(parallel for if ((size_t)rows * C >= PAR_MIN) schedule(static))
    for (ptrdiff_t r = 0; r < rows; r++) {
        const REAL *x = inp + (size_t)r * C, *p = wpe + (size_t)(r % T) * C;
        REAL *o = out + (size_t)r * C;
        for (int c = 0; c < C; c++)
            o[c] = x[c] + p[c];
    }
}

static void FN(posemb_bwd_w)(REAL *dwpe, const REAL *dout, int B, int T, int C)
{
    const int nblk = (C + COLBLK - 1) / COLBLK;
    const ptrdiff_t tasks = (ptrdiff_t)T * nblk;
    OMP(parallel for if ((size_t)B * T * C >= PAR_MIN) schedule(static))
    for (ptrdiff_t task = 0; task < tasks; task++) {
        const int t = (int)(task / nblk), c0 = (int)(task % nblk) * COLBLK;
        const int c1 = imin(C, c0 + COLBLK);
        double acc[COLBLK] = {0};
        for (int b = 0; b < B; b++) {
            const REAL *g = dout + ((size_t)b * T + t) * C;
            for (int c = c0; c < c1; c++)
                acc[c - c0] += g[c];
        }
        REAL *d = dwpe + (size_t)t * C;
        for (int c = c0; c < c1; c++)
            d[c] += (REAL)acc[c - c0];
    }
}

/* ============================================================== layernorm
 * fwd: out (N,C) = (inp - mean) * rstd * w + b ; mean, rstd (N) saved.
 *      Biased variance, eps inside the sqrt (torch.nn.functional.layer_norm).
 * bwd_x: norm = (x-mean)*rstd, dnorm = dout*w,
 *        dinp += (dnorm - mean(dnorm) - norm*mean(dnorm*norm)) * rstd
 * bwd_w: dw += sum_n dout*norm ; db += sum_n dout (db may be NULL) */
static void FN(layernorm_fwd)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                              const REAL *w, const REAL *b, int N, int C, float eps)
{
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int n = 0; n < N; n++) {
        const REAL *x = inp + (size_t)n * C;
        REAL *o = out + (size_t)n * C;
        double s = 0.0;
        for (int c = 0; c < C; c++)
            s += x[c];
        const double m = s / C;
        double v = 0.0;
        for (int c = 0; c < C; c++) {
            const double d = x[c] - m;
            v += d * d;
        }
        v /= C;
        const REAL mr = (REAL)m, rr = (REAL)(1.0 / sqrt(v + (double)eps));
        if (b) {
            for (int c = 0; c < C; c++)
                o[c] = (x[c] - mr) * rr * w[c] + b[c];
        } else {
            for (int c = 0; c < C; c++)
                o[c] = (x[c] - mr) * rr * w[c];
        }
        if (mean)
            mean[n] = mr;
        if (rstd)
            rstd[n] = rr;
    }
}

static void FN(layernorm_bwd_x)(REAL *dinp, const REAL *dout, const REAL *inp,
                                const REAL *w, const REAL *mean, const REAL *rstd,
                                int N, int C, int acc)
{
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int n = 0; n < N; n++) {
        const REAL *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        REAL *d = dinp + (size_t)n * C;
        const REAL m = mean[n], r = rstd[n];
        double s1 = 0.0, s2 = 0.0;
        for (int c = 0; c < C; c++) {
            const REAL norm = (x[c] - m) * r, dn = w[c] * g[c];
            s1 += dn;
            s2 += (double)dn * norm;
        }
        const REAL dmean = (REAL)(s1 / C), dnmean = (REAL)(s2 / C);
        for (int c = 0; c < C; c++) {
            const REAL norm = (x[c] - m) * r, dn = w[c] * g[c];
            d[c] = (acc ? d[c] : 0) + (dn - dmean - norm * dnmean) * r;
        }
    }
}

static void FN(layernorm_bwd_w)(REAL *dw, REAL *db, const REAL *dout,
                                const REAL *inp, const REAL *mean, const REAL *rstd,
                                int N, int C)
{
    const int nblk = (C + COLBLK - 1) / COLBLK;
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int cb = 0; cb < nblk; cb++) {
        const int c0 = cb * COLBLK, c1 = imin(C, c0 + COLBLK);
        double aw[COLBLK] = {0}, ab[COLBLK] = {0};
        for (int n = 0; n < N; n++) {
            const REAL *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            const REAL m = mean[n], r = rstd[n];
            for (int c = c0; c < c1; c++) {
                const REAL norm = (x[c] - m) * r;
                aw[c - c0] += (double)g[c] * norm;
                ab[c - c0] += g[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            if (dw)
                dw[c] += (REAL)aw[c - c0];
            if (db)
                db[c] += (REAL)ab[c - c0];
        }
    }
}

/* ============================================================== rmsnorm
 * fwd: rstd (N) = 1/sqrt(mean(inp^2) + eps) ; out (N,C) = (inp*rstd) * w
 *      (Hugging Face LlamaRMSNorm)
 * bwd_x: norm = x*rstd, dnorm = dout*w,
 *        dinp += (dnorm - norm*mean(dnorm*norm)) * rstd
 * bwd_w: dw += sum_n dout*norm */
static void FN(rmsnorm_fwd)(REAL *out, REAL *rstd, const REAL *inp, const REAL *w,
                            int N, int C, float eps)
{
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int n = 0; n < N; n++) {
        const REAL *x = inp + (size_t)n * C;
        REAL *o = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++)
            ss += (double)x[c] * x[c];
        const REAL r = (REAL)(1.0 / sqrt(ss / C + (double)eps));
        for (int c = 0; c < C; c++)
            o[c] = w[c] * (x[c] * r);
        if (rstd)
            rstd[n] = r;
    }
}

static void FN(rmsnorm_bwd_x)(REAL *dinp, const REAL *dout, const REAL *inp,
                              const REAL *w, const REAL *rstd, int N, int C, int acc)
{
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int n = 0; n < N; n++) {
        const REAL *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        REAL *d = dinp + (size_t)n * C;
        const REAL r = rstd[n];
        double s = 0.0;
        for (int c = 0; c < C; c++)
            s += (double)(w[c] * g[c]) * (x[c] * r);
        const REAL dnmean = (REAL)(s / C);
        for (int c = 0; c < C; c++)
            d[c] = (acc ? d[c] : 0) + (w[c] * g[c] - (x[c] * r) * dnmean) * r;
    }
}

static void FN(rmsnorm_bwd_w)(REAL *dw, const REAL *dout, const REAL *inp,
                              const REAL *rstd, int N, int C)
{
    const int nblk = (C + COLBLK - 1) / COLBLK;
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int cb = 0; cb < nblk; cb++) {
        const int c0 = cb * COLBLK, c1 = imin(C, c0 + COLBLK);
        double aw[COLBLK] = {0};
        for (int n = 0; n < N; n++) {
            const REAL *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            const REAL r = rstd[n];
            for (int c = c0; c < c1; c++)
                aw[c - c0] += (double)g[c] * (x[c] * r);
        }
        for (int c = c0; c < c1; c++)
            dw[c] += (REAL)aw[c - c0];
    }
}

/* ============================================================== GEMM
 * C (M,N) = beta*C + op(A) (M,Kd) @ op(B) (Kd,N), row-major, as single-threaded
 * BLAS calls on a grid of GEMM_MT x GEMM_NT tiles of C, one OpenMP iteration
 * per tile.  The grid depends on the shape only, so each element of C comes
 * out of the same BLAS call whatever the thread count (a multi-threaded BLAS
 * call is not bitwise reproducible across thread counts).  The inner dimension
 * is never split. */
static void FN(gemm_tiled)(int ta, int tb, int M, int N, int Kd, const REAL *A, int lda,
                           const REAL *B, int ldb, REAL beta, REAL *C, int ldc)
{
    const int mt = (M + GEMM_MT - 1) / GEMM_MT, nt = (N + GEMM_NT - 1) / GEMM_NT;
    const ptrdiff_t tiles = (ptrdiff_t)mt * nt;
    OMP(parallel for if (tiles > 1) schedule(dynamic, 1))
    for (ptrdiff_t tl = 0; tl < tiles; tl++) {
        const int i0 = (int)(tl / nt) * GEMM_MT, j0 = (int)(tl % nt) * GEMM_NT;
        const int m = imin(GEMM_MT, M - i0), n = imin(GEMM_NT, N - j0);
        const REAL *a = ta ? A + i0 : A + (size_t)i0 * lda;
        const REAL *b = tb ? B + (size_t)j0 * ldb : B + j0;
        GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
             m, n, Kd, 1, a, lda, b, ldb, beta, C + (size_t)i0 * ldc + j0, ldc);
    }
}

/* ============================================================== linear
 * fwd:   out (N,O) = inp (N,K) @ w^T + b ; w (O,K) as nn.Linear, b (O) or NULL
 * bwd_x: dinp (N,K) += dout (N,O) @ w (O,K)  (acc 0: =; BLAS's beta 0, which
 *        zeroes dinp before adding the product in, as beta 1 adds it to zeros)
 * bwd_w: dw (O,K) += dout^T @ inp ; db (O) += colsum(dout) if db != NULL */
static void FN(linear_fwd)(REAL *out, const REAL *inp, const REAL *w, const REAL *b,
                           int N, int K, int O)
{
    if (N <= 0 || O <= 0)
        return;
    if (b) {
        OMP(parallel for if ((size_t)N * O >= PAR_MIN) schedule(static))
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * O, b, (size_t)O * sizeof(REAL));
    }
    if (K <= 0) {
        if (!b)
            memset(out, 0, (size_t)N * O * sizeof(REAL));
        return;
    }
    FN(gemm_tiled)(0, 1, N, O, K, inp, K, w, K, b ? 1 : 0, out, O);
}

static void FN(linear_bwd_x)(REAL *dinp, const REAL *dout, const REAL *w,
                             int N, int K, int O, int acc)
{
    if (N <= 0 || K <= 0)
        return;
    if (O <= 0) {
        if (!acc)
            memset(dinp, 0, (size_t)N * K * sizeof(REAL));
        return;
    }
    FN(gemm_tiled)(0, 0, N, K, O, dout, O, w, K, acc ? 1 : 0, dinp, K);
}

static void FN(linear_bwd_w)(REAL *dw, REAL *db, const REAL *dout, const REAL *inp,
                             int N, int K, int O)
{
    if (N <= 0 || O <= 0)
        return;
    if (dw && K > 0)
        FN(gemm_tiled)(1, 0, O, K, N, dout, O, inp, K, 1, dw, K);
    if (db) {
        const int nblk = (O + COLBLK - 1) / COLBLK;
        OMP(parallel for if ((size_t)N * O >= PAR_MIN) schedule(static))
        for (int cb = 0; cb < nblk; cb++) {
            const int c0 = cb * COLBLK, c1 = imin(O, c0 + COLBLK);
            double acc[COLBLK] = {0};
            for (int n = 0; n < N; n++) {
                const REAL *g = dout + (size_t)n * O;
                for (int c = c0; c < c1; c++)
                    acc[c - c0] += g[c];
            }
            for (int c = c0; c < c1; c++)
                db[c] += (REAL)acc[c - c0];
        }
    }
}

/* ============================================================== rotary embedding
 * Hugging Face LLaMA convention (rotate_half), as torch computes it: the
 * frequencies (R_INV_FREQ, ../rope.h), the angle and its cosine and sine,
 * all in REAL:
 *   angle = t * inv_freq[i], i < hd/2
 *   x'[i]      = x[i]      * cos - x[i+hd/2] * sin
 *   x'[i+hd/2] = x[i+hd/2] * cos + x[i]      * sin
 * One token row holds nheads heads of hd each. */
static inline void FN(rope_cs)(REAL *cs, REAL *sn, int i, int hd, int t, const merak_rope *rope)
{
    const REAL inv = R_INV_FREQ(rope, i, hd);
    const REAL ang = (REAL)t * inv;
    *cs = R_COS(ang);
    *sn = R_SIN(ang);
}

/* dst (nheads*hd) = rotate(src) */
static void FN(rope_row_fwd)(REAL *dst, const REAL *src, int nheads, int hd, int t,
                             const merak_rope *rope)
{
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        REAL c, s;
        FN(rope_cs)(&c, &s, i, hd, t, rope);
        for (int h = 0; h < nheads; h++) {
            const REAL x0 = src[h * hd + i], x1 = src[h * hd + i + half];
            dst[h * hd + i] = x0 * c - x1 * s;
            dst[h * hd + i + half] = x1 * c + x0 * s;
        }
    }
}

/* dst (nheads*hd) += rotate^T(src): the gradient of rope_row_fwd */
static void FN(rope_row_bwd)(REAL *dst, const REAL *src, int nheads, int hd, int t,
                             const merak_rope *rope)
{
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        REAL c, s;
        FN(rope_cs)(&c, &s, i, hd, t, rope);
        for (int h = 0; h < nheads; h++) {
            const REAL g0 = src[h * hd + i], g1 = src[h * hd + i + half];
            dst[h * hd + i] += g0 * c + g1 * s;
            dst[h * hd + i + half] += g1 * c - g0 * s;
        }
    }
}

/* ============================================================== attention
 * Causal softmax attention, grouped-query: query head h reads kv head
 * g = h / (nh/nkv).  q (B,T,.) has row stride q_stride, head h at column h*hd;
 * k, v likewise with nkv heads.  Work goes in blocks of ATT_BLK query rows
 * (single-threaded BLAS calls, one OpenMP task per head), a block computing
 * only the columns t2 < its last row + 1; no T x T matrix is ever whole.
 * fwd, per (b,h): [rope: qr (B,T,nh*hd) = rot(q), kr (B,T,nkv*hd) = rot(k);
 *                  Q,K = qr,kr]
 *      S = Q[t].K[t2] / sqrt(hd) ; P = softmax_{t2<=t}(S), 0 above diag
 *      lse (B,nh,T) = log sum_{t2<=t} exp(S[t,t2])   (saved)
 *      out (B,T,nh*hd) = P @ V
 * bwd, per (b,g), the group's heads in order, block by block:
 *      P = exp(S - lse) rebuilt from Q, K ; dP = dout @ V^T
 *      dS = P * (dP - rowsum(P*dP)) / sqrt(hd)
 *      dQ = dS @ K ; dK += dS^T @ Q ; dV += P^T @ dout
 *      rope: dq += rot^T(dQ), dk += rot^T(dK), else dq += dQ, dk += dK;
 *      dv += dV (acc 0: each row of dq, dk, dv zeroed first, unread).
 * scratch: fwd, a block of scores per (b,h); bwd, two blocks (P, dS) per
 * (b,g), then dQ (B,T,nh*hd), dK (B,T,nkv*hd), dV (B,T,nkv*hd).  Indexed by
 * head, not thread, so results do not depend on the thread count. */
static size_t FN(attention_block_elems)(const merak_attn_shape *s)
{
    return (size_t)imin(s->T, ATT_BLK) * (size_t)s->T;
}

static size_t FN(attention_scratch_elems)(const merak_attn_shape *s)
{
    const size_t B = (size_t)s->B, T = (size_t)s->T, blk = FN(attention_block_elems)(s);
    const size_t fwd = B * (size_t)s->n_head * blk;
    const size_t bwd = B * (size_t)s->n_kv_head * 2 * blk +
                       B * T * (size_t)(s->n_head + 2 * s->n_kv_head) * (size_t)s->head_dim;
    return fwd > bwd ? fwd : bwd;
}

/* p (n >= t+1) := softmax(p[0..t]) in place, zeros after t up to n; returns
 * the log-sum-exp of p[0..t] (the sum of exps in double) */
static REAL FN(softmax_causal_row)(REAL *p, int t, int n)
{
    REAL mx = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++)
        if (p[t2] > mx)
            mx = p[t2];
    double sum = 0.0;
    for (int t2 = 0; t2 <= t; t2++) {
        p[t2] = R_EXP(p[t2] - mx);
        sum += p[t2];
    }
    const REAL inv = (REAL)(1.0 / sum);
    for (int t2 = 0; t2 <= t; t2++)
        p[t2] *= inv;
    for (int t2 = t + 1; t2 < n; t2++)
        p[t2] = 0;
    return mx + (REAL)log(sum);
}

/* Rows [r0, r1) of a head's scores: S[0:m, 0:r1] = scale * Q[r0:r1] @ K[0:r1]^T
 * (row stride ld) */
static void FN(attn_scores)(REAL *S, int ld, int r0, int r1, int hd, REAL scale, const REAL *Qh, int qs,
                            const REAL *Kg, int ks)
{
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hd, scale, Qh + (size_t)r0 * qs, qs, Kg, ks, 0,
         S, ld);
}

static void FN(attention_fwd)(const merak_attn_shape *s, REAL *out, REAL *lse,
                              REAL *qr, REAL *kr, const REAL *q, const REAL *k,
                              const REAL *v, REAL *scratch)
{
    const int B = s->B, T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int C = nh * hd, Ckv = nkv * hd, grp = nh / nkv;
    const REAL *Q = q, *K = k;
    int qs = s->q_stride, ks = s->k_stride;
    const int vs = s->v_stride;
    const ptrdiff_t BT = (ptrdiff_t)B * T;
    const size_t blk = FN(attention_block_elems)(s);

    if (s->rope.theta > 0) {
        OMP(parallel for if ((size_t)BT * (C + Ckv) >= PAR_MIN / 4) schedule(static))
        for (ptrdiff_t bt = 0; bt < BT; bt++) {
            const int t = (int)(bt % T);
            FN(rope_row_fwd)(qr + (size_t)bt * C, q + (size_t)bt * qs, nh, hd, t, &s->rope);
            FN(rope_row_fwd)(kr + (size_t)bt * Ckv, k + (size_t)bt * ks, nkv, hd, t, &s->rope);
        }
        Q = qr, qs = C;
        K = kr, ks = Ckv;
    }

    const REAL scale = (REAL)(1.0 / sqrt((double)hd));
    const ptrdiff_t heads = (ptrdiff_t)B * nh;
    OMP(parallel for if (heads > 1 && (size_t)BT * T * hd >= PAR_MIN) schedule(dynamic, 1))
    for (ptrdiff_t bh = 0; bh < heads; bh++) {
        const size_t b = (size_t)(bh / nh);
        const int h = (int)(bh % nh), g = h / grp;
        const REAL *Qh = Q + b * T * qs + (size_t)h * hd;
        const REAL *Kg = K + b * T * ks + (size_t)g * hd;
        const REAL *Vg = v + b * T * vs + (size_t)g * hd;
        REAL *P = scratch + (size_t)bh * blk, *L = lse + (size_t)bh * T;
        REAL *O = out + b * T * C + (size_t)h * hd;
        for (int r0 = 0; r0 < T; r0 += ATT_BLK) {
            const int r1 = imin(T, r0 + ATT_BLK), m = r1 - r0;
            FN(attn_scores)(P, r1, r0, r1, hd, scale, Qh, qs, Kg, ks);
            for (int t = r0; t < r1; t++)
                L[t] = FN(softmax_causal_row)(P + (size_t)(t - r0) * r1, t, r1);
            /* O[r0:r1] = P[0:m, 0:r1] @ V[0:r1] */
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, r1, 1, P, r1, Vg, vs, 0,
                 O + (size_t)r0 * C, C);
        }
    }
}

static void FN(attention_bwd)(const merak_attn_shape *s, REAL *dq, REAL *dk,
                              REAL *dv, const REAL *dout, const REAL *out,
                              const REAL *lse, const REAL *qr, const REAL *kr,
                              const REAL *q, const REAL *k, const REAL *v, REAL *scratch, int acc)
{
    (void)out;   /* P is rebuilt from lse */
    const int B = s->B, T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int C = nh * hd, Ckv = nkv * hd, grp = nh / nkv;
    const int rope = s->rope.theta > 0;
    const REAL *Q = rope ? qr : q, *K = rope ? kr : k;
    const int qs = rope ? C : s->q_stride, ks = rope ? Ckv : s->k_stride;
    const int vs = s->v_stride;
    const ptrdiff_t BT = (ptrdiff_t)B * T;
    const REAL scale = (REAL)(1.0 / sqrt((double)hd));
    const size_t blk = FN(attention_block_elems)(s);
    const ptrdiff_t kvheads = (ptrdiff_t)B * nkv;

    REAL *dQ = scratch + (size_t)kvheads * 2 * blk;  /* (B,T,nh*hd) */
    REAL *dK = dQ + (size_t)BT * C;                   /* (B,T,nkv*hd) */
    REAL *dV = dK + (size_t)BT * Ckv;                 /* (B,T,nkv*hd) */
    const int par = (size_t)BT * T * hd >= PAR_MIN;  /* worth threads */
    (void)par; /* without OpenMP */

    /* per (b,g): every head of the group, block by block */
    OMP(parallel for if (par && kvheads > 1) schedule(dynamic, 1))
    for (ptrdiff_t bg = 0; bg < kvheads; bg++) {
        const size_t b = (size_t)(bg / nkv);
        const int g = (int)(bg % nkv);
        const REAL *Kg = K + b * T * ks + (size_t)g * hd;
        const REAL *Vg = v + b * T * vs + (size_t)g * hd;
        REAL *P = scratch + (size_t)bg * 2 * blk, *S = P + blk;
        REAL *DK = dK + b * T * Ckv + (size_t)g * hd;
        REAL *DV = dV + b * T * Ckv + (size_t)g * hd;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < hd; i++)
                DK[(size_t)t * Ckv + i] = DV[(size_t)t * Ckv + i] = 0;
        for (int j = 0; j < grp; j++) {
            const int h = g * grp + j;
            const REAL *Qh = Q + b * T * qs + (size_t)h * hd;
            const REAL *G = dout + b * T * C + (size_t)h * hd;
            const REAL *L = lse + (b * nh + (size_t)h) * T;
            REAL *DQ = dQ + b * T * C + (size_t)h * hd;
            for (int r0 = 0; r0 < T; r0 += ATT_BLK) {
                const int r1 = imin(T, r0 + ATT_BLK), m = r1 - r0;
                /* P[0:m, 0:r1] = exp(S - lse), rebuilt; dP = dout[r0:r1] @ V[0:r1]^T */
                FN(attn_scores)(P, r1, r0, r1, hd, scale, Qh, qs, Kg, ks);
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hd, 1, G + (size_t)r0 * C, C, Vg, vs, 0,
                     S, r1);
                for (int t = r0; t < r1; t++) {
                    REAL *p = P + (size_t)(t - r0) * r1, *ds = S + (size_t)(t - r0) * r1;
                    double pdp_sum = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        p[t2] = R_EXP(p[t2] - L[t]);
                        pdp_sum += (double)p[t2] * ds[t2];
                    }
                    const REAL pdp = (REAL)pdp_sum;
                    for (int t2 = 0; t2 <= t; t2++)
                        ds[t2] = p[t2] * (ds[t2] - pdp) * scale;
                    for (int t2 = t + 1; t2 < r1; t2++)
                        p[t2] = ds[t2] = 0;
                }
                /* dQ[r0:r1] = dS @ K[0:r1] ; dK[0:r1] += dS^T @ Q[r0:r1] ;
                 * dV[0:r1] += P^T @ dout[r0:r1] */
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, r1, 1, S, r1, Kg, ks, 0,
                     DQ + (size_t)r0 * C, C);
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, m, 1, S, r1, Qh + (size_t)r0 * qs, qs, 1,
                     DK, Ckv);
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, m, 1, P, r1, G + (size_t)r0 * C, C, 1,
                     DV, Ckv);
            }
        }
    }

    /* per token row: accumulate into dq, dk, dv */
    const size_t dqs = (size_t)s->q_stride, dks = (size_t)s->k_stride;
    OMP(parallel for if ((size_t)BT * (C + 2 * Ckv) >= PAR_MIN) schedule(static))
    for (ptrdiff_t bt = 0; bt < BT; bt++) {
        const REAL *gq = dQ + (size_t)bt * C, *gk = dK + (size_t)bt * Ckv;
        const REAL *gv = dV + (size_t)bt * Ckv;
        REAL *oq = dq + (size_t)bt * dqs, *ok = dk + (size_t)bt * dks;
        REAL *ov = dv + (size_t)bt * vs;
        if (!acc) {
            memset(oq, 0, (size_t)C * sizeof *oq);
            memset(ok, 0, (size_t)Ckv * sizeof *ok);
            memset(ov, 0, (size_t)Ckv * sizeof *ov);
        }
        if (rope) {
            const int t = (int)(bt % T);
            FN(rope_row_bwd)(oq, gq, nh, hd, t, &s->rope);
            FN(rope_row_bwd)(ok, gk, nkv, hd, t, &s->rope);
        } else {
            for (int c = 0; c < C; c++)
                oq[c] += gq[c];
            for (int c = 0; c < Ckv; c++)
                ok[c] += gk[c];
        }
        for (int c = 0; c < Ckv; c++)
            ov[c] += gv[c];
    }
}

/* ============================================================== cached attention
 * Decoding against a key/value cache: rows [pos, pos+T) of kc (rotated)
 * and vc come from k and v; the queries Q are q rotated at positions pos+t
 * (in scratch, B,T,nh*hd), or q itself without RoPE; then per (b,h), as
 * attention_fwd, over L = pos+T keys:
 *   S (T,L) = Q_h Kc_g^T / sqrt(hd) ; row t softmax over [0, pos+t] ;
 *   out_h = S Vc_g.
 * scratch: Q (B,T,nh*hd), then S (B,nh,T,cap). */
static size_t FN(attention_cached_scratch_elems)(const merak_attn_shape *s, int cap)
{
    const size_t B = (size_t)s->B, T = (size_t)s->T, nh = (size_t)s->n_head;
    return B * T * nh * (size_t)s->head_dim + B * nh * T * (size_t)cap;
}

static void FN(attention_cached_fwd)(const merak_attn_shape *s, int pos, int cap, REAL *out,
                                     REAL *kc, REAL *vc, const REAL *q, const REAL *k,
                                     const REAL *v, REAL *scratch)
{
    const int B = s->B, T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const int C = nh * hd, Ckv = nkv * hd, grp = nh / nkv, L = pos + T;
    const ptrdiff_t BT = (ptrdiff_t)B * T;
    const int rope = s->rope.theta > 0;
    /* the queries: rotated into scratch with RoPE, else q itself */
    REAL *Q = scratch, *S = scratch + (size_t)BT * C;
    const REAL *Qry = rope ? Q : q;
    const int qld = rope ? C : s->q_stride;

    OMP(parallel for if ((size_t)BT * (C + Ckv) >= PAR_MIN / 4) schedule(static))
    for (ptrdiff_t bt = 0; bt < BT; bt++) {
        const size_t b = (size_t)(bt / T);
        const int t = pos + (int)(bt % T);
        REAL *krow = kc + (b * (size_t)cap + (size_t)t) * Ckv;
        REAL *vrow = vc + (b * (size_t)cap + (size_t)t) * Ckv;
        const REAL *qs = q + (size_t)bt * s->q_stride, *ks = k + (size_t)bt * s->k_stride;
        if (rope) {
            FN(rope_row_fwd)(Q + (size_t)bt * C, qs, nh, hd, t, &s->rope);
            FN(rope_row_fwd)(krow, ks, nkv, hd, t, &s->rope);
        } else {
            memcpy(krow, ks, (size_t)Ckv * sizeof(REAL));
        }
        memcpy(vrow, v + (size_t)bt * s->v_stride, (size_t)Ckv * sizeof(REAL));
    }

    const REAL scale = (REAL)(1.0 / sqrt((double)hd));
    const ptrdiff_t heads = (ptrdiff_t)B * nh;
    OMP(parallel for if (heads > 1 && (size_t)BT * L * hd >= PAR_MIN) schedule(dynamic, 1))
    for (ptrdiff_t bh = 0; bh < heads; bh++) {
        const size_t b = (size_t)(bh / nh);
        const int h = (int)(bh % nh), g = h / grp;
        const REAL *Kg = kc + b * (size_t)cap * Ckv + (size_t)g * hd;
        const REAL *Vg = vc + b * (size_t)cap * Ckv + (size_t)g * hd;
        REAL *P = S + (size_t)bh * T * L;
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, T, L, hd, scale,
             Qry + b * T * qld + (size_t)h * hd, qld, Kg, Ckv, 0, P, L);
        for (int t = 0; t < T; t++)
            FN(softmax_causal_row)(P + (size_t)t * L, pos + t, L);
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, L, 1, P, L, Vg, Ckv, 0,
             out + b * T * C + (size_t)h * hd, C);
    }
}

/* ============================================================== GELU (tanh)
 * fwd: out = 0.5*x*(1 + tanh(k0*(x + k1*x^3))), k0 = sqrt(2/pi), k1 = 0.044715
 * bwd: dinp += dout * (0.5*(1+th) + 0.5*x*(1-th^2)*k0*(1 + 3*k1*x^2))
 *      (acc 0: dinp = 0 + that, dinp unread; likewise SwiGLU's) */
static void FN(gelu_fwd)(REAL *out, const REAL *inp, size_t n)
{
    const REAL k0 = (REAL)0.7978845608028654, k1 = (REAL)0.044715;
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++) {
        const REAL x = inp[i];
        out[i] = (REAL)0.5 * x * (1 + R_TANH(k0 * (x + k1 * (x * x * x))));
    }
}

static void FN(gelu_bwd)(REAL *dinp, const REAL *dout, const REAL *inp, size_t n, int acc)
{
    const REAL k0 = (REAL)0.7978845608028654, k1 = (REAL)0.044715;
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++) {
        const REAL x = inp[i], x2 = x * x;
        const REAL th = R_TANH(k0 * (x + k1 * (x2 * x)));
        const REAL left = (REAL)0.5 * x, right = 1 + th;
        const REAL dleft = (REAL)0.5 * right;
        const REAL dright = left * (1 - th * th) * (k0 * (1 + 3 * k1 * x2));
        dinp[i] = (acc ? dinp[i] : 0) + dout[i] * (dleft + dright);
    }
}

/* ============================================================== SwiGLU
 * fwd: out = silu(gate) * up, silu(g) = g * sigmoid(g)
 * bwd: dgate += dout*up*sig*(1 + g*(1-sig)) ; dup += dout*silu(gate) */
static void FN(swiglu_fwd)(REAL *out, const REAL *gate, const REAL *up, size_t n)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++) {
        const REAL g = gate[i];
        out[i] = g / (1 + R_EXP(-g)) * up[i];
    }
}

static void FN(swiglu_bwd)(REAL *dgate, REAL *dup, const REAL *dout,
                           const REAL *gate, const REAL *up, size_t n, int acc)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++) {
        const REAL g = gate[i], sig = 1 / (1 + R_EXP(-g));
        if (dgate)
            dgate[i] = (acc ? dgate[i] : 0) + dout[i] * up[i] * (sig * (1 + g * (1 - sig)));
        if (dup)
            dup[i] = (acc ? dup[i] : 0) + dout[i] * (g * sig);
    }
}

/* ============================================================== add / accumulate
 * add_fwd: out = a + b          accumulate: dst += src */
static void FN(add_fwd)(REAL *out, const REAL *a, const REAL *b, size_t n)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        out[i] = a[i] + b[i];
}

static void FN(accumulate)(REAL *dst, const REAL *src, size_t n)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        dst[i] += src[i];
}

/* ============================================================== dropout
 * fwd: out = keep(i) ? inp/(1-p) : 0 ; bwd: dinp += keep(i) ? dout/(1-p) : 0 (acc 0: =)
 * keep(i) = merak_dropout_uniform(key(seed), i0 + i) >= p (see cpu_kernels.h).
 * p == 0 is the identity. */
static void FN(dropout_fwd)(REAL *out, const REAL *inp, size_t n, float p,
                            uint64_t seed, uint64_t i0)
{
    if (p <= 0.0f) {
        if (out != inp)
            memcpy(out, inp, n * sizeof(REAL));
        return;
    }
    const uint64_t key = merak_dropout_key(seed);
    const REAL sc = p < 1.0f ? (REAL)1 / ((REAL)1 - (REAL)p) : 0;
    OMP(parallel for if (n >= PAR_MIN / 4) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        out[i] = dropout_u(key, i0 + (uint64_t)i) >= p ? inp[i] * sc : 0;
}

static void FN(dropout_bwd)(REAL *dinp, const REAL *dout, size_t n, float p,
                            uint64_t seed, uint64_t i0, int acc)
{
    if (p <= 0.0f && acc) {
        FN(accumulate)(dinp, dout, n);
        return;
    }
    const uint64_t key = merak_dropout_key(seed);
    const REAL sc = p < 1.0f ? (REAL)1 / ((REAL)1 - (REAL)p) : 0;
    OMP(parallel for if (n >= PAR_MIN / 4) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++) {   /* p = 0 keeps all, sc = 1 */
        const REAL base = acc ? dinp[i] : 0;
        dinp[i] = dropout_u(key, i0 + (uint64_t)i) >= p ? base + dout[i] * sc : base;
    }
}

/* ============================================================== cross-entropy
 * The logits may be one tensor-parallel shard (columns [v0, v0+V) of the
 * vocabulary); the runtime combines the shards' statistics.
 * stats: lse[n] = logsumexp(logits[n]) over the shard (max subtracted, sum of
 *        exponentials in double); tlogit[n] = logits[n][targets[n] - v0] when
 *        the target lies in the shard, else 0.  A negative target (torch's
 *        ignore_index -100) gives lse = tlogit = 0.
 * bwd:   dlogits[n][j] += (exp(logits[n][j] - lse[n]) - [j == targets[n] - v0])
 *        * scale, with lse the row's logsumexp over the whole vocabulary;
 *        rows with a negative target get no gradient.  In place (dlogits ==
 *        logits) the gradient replaces the logits, which is what += gives
 *        on a zeroed dlogits, bit for bit: d = 0 + g is g (g is never -0),
 *        and rows with a negative target become zero. */
static void FN(crossentropy_stats)(REAL *lse, REAL *tlogit, const REAL *logits,
                                   const int32_t *targets, int N, int V, int v0)
{
    OMP(parallel for if ((size_t)N * V >= PAR_MIN / 4) schedule(static))
    for (int n = 0; n < N; n++) {
        const REAL *x = logits + (size_t)n * V;
        const int64_t tg = targets[n], t = tg - v0;
        if (tg < 0) {
            lse[n] = tlogit[n] = 0;
            continue;
        }
        REAL mx = -INFINITY;
        for (int j = 0; j < V; j++)
            if (x[j] > mx)
                mx = x[j];
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += R_EXP(x[j] - mx);
        lse[n] = (REAL)((double)mx + log(sum));
        tlogit[n] = (t >= 0 && t < V) ? x[t] : 0;
    }
}

static void FN(crossentropy_bwd)(REAL *dlogits, const REAL *logits, const REAL *lse,
                                 const int32_t *targets, int N, int V, int v0, float scale)
{
    const int in_place = dlogits == logits;
    OMP(parallel for if ((size_t)N * V >= PAR_MIN / 4) schedule(static))
    for (int n = 0; n < N; n++) {
        const REAL *x = logits + (size_t)n * V;
        REAL *d = dlogits + (size_t)n * V;
        const int64_t tg = targets[n], t = tg - v0;
        if (tg < 0) {
            if (in_place)
                memset(d, 0, (size_t)V * sizeof *d);
            continue;
        }
        const REAL l = lse[n], sc = (REAL)scale;
        if (in_place)
            for (int j = 0; j < V; j++)
                d[j] = (R_EXP(x[j] - l) - (j == t ? 1 : 0)) * sc;
        else
            for (int j = 0; j < V; j++)
                d[j] += (R_EXP(x[j] - l) - (j == t ? 1 : 0)) * sc;
    }
}

/* ============================================================== AdamW
 * torch.optim.AdamW, single-tensor path, step t >= 1:
 *   p *= 1 - lr*wd
 *   m  = lerp(m, g, 1-b1)            v = v*b2 + (1-b2)*g*g
 *   denom = sqrt(v)/sqrt(1-b2^t) + eps
 *   p += (-lr/(1-b1^t)) * m / denom
 * Scalars are formed in double and rounded to REAL, as torch does with
 * Python-float hyperparameters. */
static void FN(adamw)(REAL *p, const REAL *g, REAL *m, REAL *v, const merak_adamw_span *spans,
                      int nspans, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int t, uint16_t *p16)
{
    const double b1 = beta1, b2 = beta2;
    const double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    const REAL decay = (REAL)(1.0 - (double)lr * (double)weight_decay);
    const REAL w1 = (REAL)(1.0 - b1), c1 = 1 - w1;
    const REAL rb2 = (REAL)b2, c2 = (REAL)(1.0 - b2);
    const REAL bc2s = (REAL)sqrt(bc2), reps = (REAL)eps;
    const REAL nstep = (REAL)(-(double)lr / bc1);
    const int small = fabs((double)w1) < 0.5;
    size_t total = 0;
    for (int s = 0; s < nspans; s++)
        total += spans[s].n;
    /* elementwise: any split over threads gives the same bits */
    OMP(parallel for if (nspans > 1 && total >= PAR_MIN) schedule(static))
    for (int s = 0; s < nspans; s++) {
        REAL *ps = p + spans[s].at, *ms = m + spans[s].m_at, *vs = v + spans[s].m_at;
        const REAL *gs = g + spans[s].at;
        const REAL dec = spans[s].decay ? decay : 1;
        uint16_t *cs = p16 ? p16 + spans[s].at : NULL;
        for (size_t i = 0; i < spans[s].n; i++) {
            const REAL gi = gs[i];
            REAL mi = ms[i];
            mi = small ? mi + w1 * (gi - mi) : gi - (gi - mi) * c1;
            const REAL vi = vs[i] * rb2 + c2 * gi * gi;
            const REAL denom = R_SQRT(vi) / bc2s + reps;
            ms[i] = mi;
            vs[i] = vi;
            ps[i] = ps[i] * dec + nstep * mi / denom;
            if (cs)
                cs[i] = merak_f32_to_bf16((float)ps[i]);
        }
    }
}

/* ============================================================== sumsq, scale
 * sumsq = sum x^2 in double, over SUMSQ_CHUNKS fixed chunks added in order.
 * scale: x *= s */
static double FN(sumsq)(const REAL *x, size_t n)
{
    double part[SUMSQ_CHUNKS];
    const size_t chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (int c = 0; c < SUMSQ_CHUNKS; c++) {
        const size_t lo = (size_t)c * chunk < n ? (size_t)c * chunk : n;
        const size_t hi = lo + chunk < n ? lo + chunk : n;
        double acc = 0.0;
        for (size_t i = lo; i < hi; i++)
            acc += (double)x[i] * x[i];
        part[c] = acc;
    }
    double tot = 0.0;
    for (int c = 0; c < SUMSQ_CHUNKS; c++)
        tot += part[c];
    return tot;
}

static void FN(scale)(REAL *x, size_t n, float s)
{
    const REAL rs = (REAL)s;
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        x[i] *= rs;
}

/* ============================================================== the table */
static const TABLE_T FN(cpu_table) = {
    .name = TABLE_NAME,
#ifdef TABLE_MEMORY
    TABLE_MEMORY
#endif
    .embedding_fwd = FN(embedding_fwd),
    .embedding_bwd_w = FN(embedding_bwd_w),
    .posemb_fwd = FN(posemb_fwd),
    .posemb_bwd_w = FN(posemb_bwd_w),
    .layernorm_fwd = FN(layernorm_fwd),
    .layernorm_bwd_x = FN(layernorm_bwd_x),
    .layernorm_bwd_w = FN(layernorm_bwd_w),
    .rmsnorm_fwd = FN(rmsnorm_fwd),
    .rmsnorm_bwd_x = FN(rmsnorm_bwd_x),
    .rmsnorm_bwd_w = FN(rmsnorm_bwd_w),
    .linear_fwd = FN(linear_fwd),
    .linear_bwd_x = FN(linear_bwd_x),
    .linear_bwd_w = FN(linear_bwd_w),
    .attention_fwd = FN(attention_fwd),
    .attention_bwd = FN(attention_bwd),
    .attention_scratch_elems = FN(attention_scratch_elems),
    .attention_cached_fwd = FN(attention_cached_fwd),
    .attention_cached_scratch_elems = FN(attention_cached_scratch_elems),
    .gelu_fwd = FN(gelu_fwd),
    .gelu_bwd = FN(gelu_bwd),
    .swiglu_fwd = FN(swiglu_fwd),
    .swiglu_bwd = FN(swiglu_bwd),
    .add_fwd = FN(add_fwd),
    .accumulate = FN(accumulate),
    .dropout_fwd = FN(dropout_fwd),
    .dropout_bwd = FN(dropout_bwd),
    .crossentropy_stats = FN(crossentropy_stats),
    .crossentropy_bwd = FN(crossentropy_bwd),
    .adamw = FN(adamw),
    .sumsq = FN(sumsq),
    .scale = FN(scale),
};
