/*
 * test_rowwise.c - the row kernels of the CUDA backend (kernels/cuda/
 * rowwise.h: the norms a warp a row, the cross-entropy a block a row, 16
 * bytes a load) run on the CPU, against the CPU backend.
 *
 * rowwise.h holds the per-thread arithmetic in C that gcc and nvcc both
 * compile; this test drives it as norm.cu's and loss.cu's kernels do:
 * every lane of a warp in turn up to a reduction, the warp's xor-shuffle
 * tree, then every lane again.  So
 * the lanes' vectors, the bf16 unpacking and rounding, the head and tail
 * of a row that starts off 16 bytes, acc 0 and 1, in place and not, are
 * checked on every build; what is left to the GPU (tests/gpu/
 * test_cuda_kernels: the kernels at these widths and vocabularies, and
 * the fallbacks for rows off 16 bytes) is the launch and the hardware.
 *
 * Tolerances: float results within 1e-5 of the CPU's relative to the
 * largest (the sums run in another order), bf16 ones within one bf16
 * rounding of it (8e-3 relative, 1e-4 of the largest), the statistics
 * within 1e-5.  Every 16-byte load and store must be 16-byte aligned, as
 * a GPU requires.  MERAK_TEST_SEED reproduces a run.
 */
#include <stdint.h>

static long g_misaligned; /* 16-byte accesses off 16 bytes */
#define RW_ALIGN_CHECK(p) (g_misaligned += ((uintptr_t)(p) & 15) != 0)

#include "cuda/rowwise.h"
#include "kernels.h"
#include "mix64.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t g_rng;

static double urand(void)
{
    g_rng += MERAK_GOLDEN;
    return (double)(merak_mix64(g_rng) >> 11) * 0x1.0p-53;
}

static void *xmalloc(size_t n)
{
    /* 16-byte aligned, as cudaMalloc's are (and more) */
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    return p;
}

static void fill(void *p, size_t n, int b16, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        rw_put(p, i, (float)(lo + (hi - lo) * urand()), b16);
}

static void fill_nan(void *p, size_t n, int b16)
{
    for (size_t i = 0; i < n; i++)
        rw_put(p, i, NAN, b16);
}

/* max over i of |a - ref| / (rtol |ref| + atol max|ref|): at most 1 passes */
static double worst(const void *a, const void *ref, size_t n, int b16, double rtol, double atol)
{
    double mx = 0, w = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(rw_elem(ref, i, b16)));
    for (size_t i = 0; i < n; i++) {
        const double r = rw_elem(ref, i, b16), d = fabs(rw_elem(a, i, b16) - r);
        const double e = d / (rtol * fabs(r) + atol * mx + 1e-30);
        w = d == d ? fmax(w, e) : INFINITY;
    }
    return w;
}

static double worst_b16(const void *a, const void *ref, size_t n, int b16)
{
    return b16 ? worst(a, ref, n, 1, 8e-3, 1e-4) : worst(a, ref, n, 0, 1e-5, 1e-5);
}

/* The warp's xor-shuffle tree over the lanes' values (warp_sum of
 * cuda_common.cuh): lane 0's result (every lane's is the same, the sum of
 * two floats being commutative). */
static float warp_sum_emu(const float *v)
{
    float a[RW_LANES], b[RW_LANES];
    memcpy(a, v, sizeof a);
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < RW_LANES; l++)
            b[l] = a[l] + a[l ^ o];
        memcpy(a, b, sizeof a);
    }
    return a[0];
}

/* ------------------------------------------------------------------ the norms */

/* norm.cu's norm_fwd_v_k and norm_bwd_x_v_k over N rows, warp by warp. */
static void emu_norm_fwd(int rms, int b16, int vm, void *out, float *mean, float *rstd, const void *inp,
                         const void *w, const void *b, int N, int C, float eps)
{
    static rw_row x[RW_LANES];
    float part[RW_LANES];
    const int nv = C / RW_E(b16);
    for (int n = 0; n < N; n++) {
        const size_t at = (size_t)n * C * RW_ES(b16);
        for (int l = 0; l < RW_LANES; l++) {
            rw_load(&x[l], (const char *)inp + at, nv, l, vm);
            part[l] = rw_sum(&x[l], 0.0f, 0, nv, l, vm, b16);
        }
        const float m = rms ? 0.0f : warp_sum_emu(part) / C;
        for (int l = 0; l < RW_LANES; l++)
            part[l] = rw_sum(&x[l], m, 1, nv, l, vm, b16);
        const float r = 1.0f / sqrtf(warp_sum_emu(part) / C + eps);
        for (int l = 0; l < RW_LANES; l++)
            rw_norm_store((char *)out + at, &x[l], w, rms ? NULL : b, m, r, nv, l, vm, b16);
        if (!rms && mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = r;
    }
}

/* norm.cu's norm_bwd_row: a warp's row n of the input gradient, lane by
 * lane; x and g (a row a lane) keep the row for the weight gradients. */
static void emu_norm_bwd_row(int rms, int b16, int vm, void *dinp, rw_row *x, rw_row *g, const void *dout,
                             const void *inp, const void *w, const float *mean, const float *rstd, int n, int C,
                             int acc)
{
    float pa[RW_LANES], pb[RW_LANES];
    const int nv = C / RW_E(b16);
    const size_t at = (size_t)n * C * RW_ES(b16);
    const float m = rms ? 0.0f : mean[n], r = rstd[n];
    for (int l = 0; l < RW_LANES; l++) {
        rw_load(&x[l], (const char *)inp + at, nv, l, vm);
        rw_load(&g[l], (const char *)dout + at, nv, l, vm);
        rw_norm_bwd_sums(&pa[l], &pb[l], &x[l], &g[l], w, m, rms ? 1.0f : r, nv, l, vm, b16);
    }
    const float a = rms ? 0.0f : warp_sum_emu(pa) / C;
    float bb = warp_sum_emu(pb) / C;
    if (rms)
        bb = bb * r * r * r;
    for (int l = 0; l < RW_LANES; l++)
        rw_norm_bwd_store((char *)dinp + at, &x[l], &g[l], w, m, r, a, bb, rms, acc, nv, l, vm, b16);
}

static void emu_norm_bwd_x(int rms, int b16, int vm, void *dinp, const void *dout, const void *inp,
                           const void *w, const float *mean, const float *rstd, int N, int C, int acc)
{
    static rw_row x[RW_LANES], g[RW_LANES];
    for (int n = 0; n < N; n++)
        emu_norm_bwd_row(rms, b16, vm, dinp, x, g, dout, inp, w, mean, rstd, n, C, acc);
}

/* norm.cu's colred_final_k: dst0 (dst1, may be NULL) += the sums of the
 * columns of nchunks partial rows, chunk lane by chunk lane. */
static void emu_final(float *dst0, float *dst1, const float *p0, const float *p1, int nchunks, int C)
{
    for (int c = 0; c < C; c++) {
        float t0 = 0.0f, t1 = 0.0f;
        for (int y = 0; y < RW_FIN_Y; y++) {
            t0 += rw_fin_lane(p0, nchunks, C, c, y);
            if (dst1)
                t1 += rw_fin_lane(p1, nchunks, C, c, y);
        }
        dst0[c] += t0;
        if (dst1)
            dst1[c] += t1;
    }
}

/* norm.cu's norm_bwd_v_k then colred_final_k: a norm's whole backward,
 * block (chunk) by block, warp by warp of it, lane by lane: dinp as
 * emu_norm_bwd_x writes it, dw (db) += the weight gradients. */
static void emu_norm_bwd(int rms, int b16, int vm, void *dinp, float *dw, float *db, const void *dout,
                         const void *inp, const void *w, const float *mean, const float *rstd, int N, int C, int acc)
{
    static rw_row x[RW_LANES], g[RW_LANES];
    static float pw[RW_WARPS][RW_LANES][RW_VMAX * 8], pb[RW_WARPS][RW_LANES][RW_VMAX * 8];
    const int nv = C / RW_E(b16), rows = rw_nb_rows(N), nchunks = (N + rows - 1) / rows;
    float *red = xmalloc(2 * (size_t)C * sizeof(float));
    float *part = xmalloc(2 * (size_t)nchunks * C * sizeof(float));
    for (int k = 0; k < nchunks; k++) {
        memset(pw, 0, sizeof pw), memset(pb, 0, sizeof pb);
        const int r0 = k * rows, r1 = r0 + rows < N ? r0 + rows : N;
        for (int wp = 0; wp < RW_WARPS; wp++)
            for (int n = r0 + wp; n < r1; n += RW_WARPS) {
                emu_norm_bwd_row(rms, b16, vm, dinp, x, g, dout, inp, w, mean, rstd, n, C, acc);
                for (int l = 0; l < RW_LANES; l++)
                    rw_norm_wgrad(pw[wp][l], pb[wp][l], &x[l], &g[l], rms ? 0.0f : mean[n], rstd[n], rms, nv, l,
                                  vm, b16);
            }
        for (int wp = 0; wp < RW_WARPS; wp++)
            for (int l = 0; l < RW_LANES; l++)
                rw_norm_wgrad_put(red, pw[wp][l], pb[wp][l], wp > 0, rms, C, nv, l, vm, b16);
        memcpy(part + (size_t)k * C, red, (size_t)C * sizeof(float));
        if (!rms)
            memcpy(part + ((size_t)nchunks + k) * C, red + C, (size_t)C * sizeof(float));
    }
    emu_final(dw, rms ? NULL : db, part, part + (size_t)nchunks * C, nchunks, C);
    free(red), free(part);
}

/* norm.cu's norm_add_fwd_v_k: the rows of a + y rounded into sum, then
 * emu_norm_fwd's arithmetic on them, lane by lane. */
static void emu_add_norm_fwd(int rms, int b16, int vm, void *sum, void *out, float *mean, float *rstd, const void *a,
                             const void *y, const void *w, const void *b, int N, int C, float eps)
{
    static rw_row x[RW_LANES], r[RW_LANES];
    float part[RW_LANES];
    const int nv = C / RW_E(b16);
    for (int n = 0; n < N; n++) {
        const size_t at = (size_t)n * C * RW_ES(b16);
        for (int l = 0; l < RW_LANES; l++) {
            rw_load(&x[l], (const char *)a + at, nv, l, vm);
            rw_load(&r[l], (const char *)y + at, nv, l, vm);
            rw_add_round(&x[l], &r[l], (char *)sum + at, nv, l, vm, b16);
            part[l] = rw_sum(&x[l], 0.0f, 0, nv, l, vm, b16);
        }
        const float m = rms ? 0.0f : warp_sum_emu(part) / C;
        for (int l = 0; l < RW_LANES; l++)
            part[l] = rw_sum(&x[l], m, 1, nv, l, vm, b16);
        const float rs = 1.0f / sqrtf(warp_sum_emu(part) / C + eps);
        for (int l = 0; l < RW_LANES; l++)
            rw_norm_store((char *)out + at, &x[l], w, rms ? NULL : b, m, rs, nv, l, vm, b16);
        if (!rms && mean)
            mean[n] = m;
        if (rstd)
            rstd[n] = rs;
    }
}

/* One norm (rms 0: layer norm, with a bias or not) of N x C in a storage:
 * forward, then the input gradient added to dx and written over NaN, each
 * against the CPU backend; vm the lanes' vectors the launcher picks. */
static void norm_case(int rms, int b16, int bias, int N, int C)
{
    const size_t n = (size_t)N * C, es = RW_ES(b16);
    void *x = xmalloc(n * es), *w = xmalloc((size_t)C * es), *b = xmalloc((size_t)C * es);
    void *dy = xmalloc(n * es), *dx0 = xmalloc(n * es);
    void *y_c = xmalloc(n * es), *y_e = xmalloc(n * es), *dx_c = xmalloc(n * es), *dx_e = xmalloc(n * es);
    float *st_c = xmalloc(2 * (size_t)N * sizeof(float)), *st_e = xmalloc(2 * (size_t)N * sizeof(float));
    float *scratch = xmalloc((4 * n + 3 * (size_t)C + 128) * sizeof(float));
    fill(x, n, b16, -2, 2), fill(w, (size_t)C, b16, 0.5, 1.5), fill(b, (size_t)C, b16, -1, 1);
    fill(dy, n, b16, -1, 1), fill(dx0, n, b16, -1, 1);
    const void *bufs[4] = {y_e, x, w, bias ? b : NULL};
    const int vm = rw_norm_vmax(C, b16, bufs, 4);
    const merak_kernels *k = merak_kernels_cpu();
    const float eps = 1e-5f;
    const void *bp = bias ? b : NULL;
    /* the CPU's */
    if (b16 && rms)
        k->rmsnorm16_fwd(y_c, st_c + N, x, w, N, C, eps, scratch);
    else if (b16)
        k->layernorm16_fwd(y_c, st_c, st_c + N, x, w, bp, N, C, eps, scratch);
    else if (rms)
        k->rmsnorm_fwd(y_c, st_c + N, x, w, N, C, eps);
    else
        k->layernorm_fwd(y_c, st_c, st_c + N, x, w, bp, N, C, eps);
    memset(st_e, 0, 2 * (size_t)N * sizeof(float));
    emu_norm_fwd(rms, b16, vm, y_e, st_e, st_e + N, x, w, bp, N, C, eps);
    const double e_y = worst_b16(y_e, y_c, n, b16);
    double e_st = worst(st_e + N, st_c + N, (size_t)N, 0, 1e-5, 1e-6);
    if (!rms)
        e_st = fmax(e_st, worst(st_e, st_c, (size_t)N, 0, 1e-5, 1e-5));
    /* the input gradient from the CPU's statistics, added then written */
    double e_dx = 0;
    for (int acc = 1; acc >= 0; acc--) {
        /* the CPU's: added to dx0, or to zeros (what acc 0 must write) */
        if (acc)
            memcpy(dx_c, dx0, n * es), memcpy(dx_e, dx0, n * es);
        else
            memset(dx_c, 0, n * es), fill_nan(dx_e, n, b16);
        if (b16 && rms)
            k->rmsnorm16_bwd_x(dx_c, dy, x, w, st_c + N, N, C, 1, scratch);
        else if (b16)
            k->layernorm16_bwd_x(dx_c, dy, x, w, st_c, st_c + N, N, C, 1, scratch);
        else if (rms)
            k->rmsnorm_bwd_x(dx_c, dy, x, w, st_c + N, N, C, 1);
        else
            k->layernorm_bwd_x(dx_c, dy, x, w, st_c, st_c + N, N, C, 1);
        emu_norm_bwd_x(rms, b16, vm, dx_e, dy, x, w, st_c, st_c + N, N, C, acc);
        e_dx = fmax(e_dx, worst_b16(dx_e, dx_c, n, b16));
    }
    tap_ok(vm > 0 && e_y <= 1 && e_st <= 1 && e_dx <= 1 && !g_misaligned,
           "%s %s%s N=%d C=%d (%d vectors a lane): out %.2f, statistics %.2f, dx (added, written over NaN) "
           "%.2f of the tolerance; misaligned accesses %ld",
           rms ? "rmsnorm" : "layernorm", b16 ? "bf16" : "f32", !rms && !bias ? " no bias" : "", N, C, vm, e_y,
           e_st, e_dx, g_misaligned);
    g_misaligned = 0;
    if (b16) {   /* a residual add, then the norm of its sum, in one pass: the CPU's add, bit for bit,
                  * and the norm of it as above, bit for bit */
        void *r = xmalloc(n * es), *s_c = xmalloc(n * es), *s_e = xmalloc(n * es), *y_f = xmalloc(n * es);
        void *y_s = xmalloc(n * es);
        float *st_f = xmalloc(2 * (size_t)N * sizeof(float)), *st_s = xmalloc(2 * (size_t)N * sizeof(float));
        fill(r, n, b16, -2, 2);
        k->add16_fwd(s_c, x, r, n, scratch);
        memset(st_f, 0, 2 * (size_t)N * sizeof(float)), memset(st_s, 0, 2 * (size_t)N * sizeof(float));
        fill_nan(s_e, n, b16), fill_nan(y_f, n, b16);
        emu_add_norm_fwd(rms, b16, vm, s_e, y_f, st_f, st_f + N, x, r, w, bp, N, C, eps);
        emu_norm_fwd(rms, b16, vm, y_s, st_s, st_s + N, s_c, w, bp, N, C, eps);
        const int same = !memcmp(s_e, s_c, n * es) && !memcmp(y_f, y_s, n * es) &&
                         !memcmp(st_f, st_s, 2 * (size_t)N * sizeof(float));
        tap_ok(same && !g_misaligned,
               "%s bf16%s N=%d C=%d, a residual add and the norm of its sum in one pass: the add's and the "
               "norm's bits %d; misaligned accesses %ld", rms ? "rmsnorm" : "layernorm",
               !rms && !bias ? " no bias" : "", N, C, same, g_misaligned);
        g_misaligned = 0;
        free(r), free(s_c), free(s_e), free(y_f), free(y_s), free(st_f), free(st_s);
    }
    if (b16) {   /* the whole backward in one pass (bf16 storage's): dx as above, bit for bit */
        void *dx_f = xmalloc(n * es);
        float *w_c = xmalloc(2 * (size_t)C * sizeof(float)), *w_e = xmalloc(2 * (size_t)C * sizeof(float));
        int same = 1;
        double e_w = 0;
        for (int acc = 1; acc >= 0; acc--) {
            fill(w_c, 2 * (size_t)C, 0, -1, 1);
            memcpy(w_e, w_c, 2 * (size_t)C * sizeof(float));
            if (acc)
                memcpy(dx_c, dx0, n * es), memcpy(dx_e, dx0, n * es), memcpy(dx_f, dx0, n * es);
            else
                memset(dx_c, 0, n * es), fill_nan(dx_e, n, b16), fill_nan(dx_f, n, b16);
            if (rms)
                k->rmsnorm16_bwd(dx_c, w_c, dy, x, w, st_c + N, N, C, acc, scratch);
            else
                k->layernorm16_bwd(dx_c, w_c, w_c + C, dy, x, w, st_c, st_c + N, N, C, acc, scratch);
            emu_norm_bwd_x(rms, b16, vm, dx_e, dy, x, w, st_c, st_c + N, N, C, acc);
            emu_norm_bwd(rms, b16, vm, dx_f, w_e, w_e + C, dy, x, w, st_c, st_c + N, N, C, acc);
            same &= !memcmp(dx_f, dx_e, n * es);
            e_w = fmax(e_w, worst(w_e, w_c, rms ? (size_t)C : 2 * (size_t)C, 0, 1e-5, 1e-5));
            e_w = fmax(e_w, worst_b16(dx_f, dx_c, n, b16));
        }
        tap_ok(same && e_w <= 1 && !g_misaligned,
               "%s bf16%s N=%d C=%d, the whole backward in one pass (%d rows a block): dx as apart, bit for bit %d; "
               "dx and the weight gradients %.2f of the tolerance; misaligned accesses %ld",
               rms ? "rmsnorm" : "layernorm", !rms && !bias ? " no bias" : "", N, C, rw_nb_rows(N), same, e_w,
               g_misaligned);
        free(dx_f), free(w_c), free(w_e);
    }
    g_misaligned = 0;
    free(x), free(w), free(b), free(dy), free(dx0), free(y_c), free(y_e), free(dx_c), free(dx_e);
    free(st_c), free(st_e), free(scratch);
}

/* Which shapes the launcher gives the row kernels. */
static void vmax_cases(void)
{
    static float buf[64] __attribute__((aligned(16)));
    const void *ok[2] = {buf, buf + 4}, *off[2] = {buf, (char *)buf + 2};
    const struct {
        int C, b16, want;
        const void *const *bufs;
    } c[] = {
        {768, 1, 4, ok},  {768, 0, 8, ok},   {1024, 1, 4, ok}, {2048, 1, 8, ok}, {2048, 0, 0, ok},
        {128, 0, 1, ok},  {256, 0, 2, ok},   {64, 1, 1, ok},   {70, 0, 0, ok},   {100, 1, 0, ok},
        {768, 1, 0, off}, {4096, 1, 0, ok}, {8, 1, 1, ok},    {0, 0, 0, ok},
    };
    int good = 1;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const int got = rw_norm_vmax(c[i].C, c[i].b16, c[i].bufs, 2);
        if (got != c[i].want) {
            tap_diag("rw_norm_vmax(C=%d, b16=%d) = %d, want %d", c[i].C, c[i].b16, got, c[i].want);
            good = 0;
        }
    }
    tap_ok(good, "the row kernels take whole 16-byte vectors, aligned buffers, at most %d vectors a lane",
           RW_VMAX);
}

/* ------------------------------------------------------------------ column sums */

/* norm.cu's colred_v_k then colred_final_k: dst0 (dst1) += the column
 * sums, block by block, chunk by chunk. */
static void emu_colred(int mode, int b16, float *dst0, float *dst1, const void *dout, const void *inp,
                       const float *mean, const float *rstd, int N, int C)
{
    const int E = RW_E(b16), nvec = C / E, rows = RW_CR_ROWS, nchunks = (N + rows - 1) / rows;
    float *p0 = xmalloc((size_t)nchunks * C * sizeof(float)), *p1 = xmalloc((size_t)nchunks * C * sizeof(float));
    float s0[RW_CR_Y][8], s1[RW_CR_Y][8];
    for (int k = 0; k < nchunks; k++)
        for (int j = 0; j < nvec; j++) {
            for (int ty = 0; ty < RW_CR_Y; ty++)
                rw_colred(s0[ty], s1[ty], mode, dout, inp, mean, rstd, C, j, k * rows,
                          k * rows + rows < N ? k * rows + rows : N, ty, b16);
            for (int e = 0; e < E; e++) {
                float t0 = 0.0f, t1 = 0.0f;
                for (int y = 0; y < RW_CR_Y; y++)
                    t0 += s0[y][e], t1 += s1[y][e];
                p0[(size_t)k * C + (size_t)j * E + e] = t0;
                p1[(size_t)k * C + (size_t)j * E + e] = t1;
            }
        }
    emu_final(dst0, dst1, p0, p1, nchunks, C);
    free(p0), free(p1);
}

/* The weight gradients of the norms and the bias gradient of a linear
 * layer (its weight part with K = 0), added to gradients already there,
 * against the CPU backend's (float either way). */
static void colred_case(int mode, int b16, int N, int C)
{
    const size_t n = (size_t)N * C, es = RW_ES(b16);
    void *x = xmalloc(n * es), *dy = xmalloc(n * es);
    float *mean = xmalloc((size_t)N * sizeof(float)), *rstd = xmalloc((size_t)N * sizeof(float));
    float *d0 = xmalloc((size_t)C * sizeof(float)), *d1 = xmalloc((size_t)C * sizeof(float));
    float *c0 = xmalloc((size_t)C * sizeof(float)), *c1 = xmalloc((size_t)C * sizeof(float));
    float *scratch = xmalloc((4 * n + 3 * (size_t)C + 128) * sizeof(float));
    fill(x, n, b16, -2, 2), fill(dy, n, b16, -1, 1);
    fill(mean, (size_t)N, 0, -0.5, 0.5), fill(rstd, (size_t)N, 0, 0.5, 2);
    fill(d0, (size_t)C, 0, -1, 1), fill(d1, (size_t)C, 0, -1, 1);
    memcpy(c0, d0, (size_t)C * sizeof(float)), memcpy(c1, d1, (size_t)C * sizeof(float));
    const merak_kernels *k = merak_kernels_cpu();
    const int takes = rw_colred_takes(C, b16, dy, mode == RW_COLSUM ? NULL : x);
    static const char *names[] = {"colsum (a bias gradient)", "layernorm_bwd_w", "rmsnorm_bwd_w"};
    if (mode == RW_COLSUM && b16)
        k->linear16_bwd_w(NULL, c0, dy, x, N, 0, C, C, scratch);
    else if (mode == RW_COLSUM)
        k->linear_bwd_w(NULL, c0, dy, x, N, 0, C);
    else if (mode == RW_LAYERNORM && b16)
        k->layernorm16_bwd_w(c0, c1, dy, x, mean, rstd, N, C, scratch);
    else if (mode == RW_LAYERNORM)
        k->layernorm_bwd_w(c0, c1, dy, x, mean, rstd, N, C);
    else if (b16)
        k->rmsnorm16_bwd_w(c0, dy, x, rstd, N, C, scratch);
    else
        k->rmsnorm_bwd_w(c0, dy, x, rstd, N, C);
    emu_colred(mode, b16, d0, mode == RW_LAYERNORM ? d1 : NULL, dy, x, mean, rstd, N, C);
    double e = worst(d0, c0, (size_t)C, 0, 1e-5, 1e-5);
    if (mode == RW_LAYERNORM)
        e = fmax(e, worst(d1, c1, (size_t)C, 0, 1e-5, 1e-5));
    tap_ok(takes && e <= 1 && !g_misaligned, "%s %s N=%d C=%d (%d chunks): %.2f of the tolerance; misaligned accesses %ld",
           names[mode], b16 ? "bf16" : "f32", N, C, (N + RW_CR_ROWS - 1) / RW_CR_ROWS, e, g_misaligned);
    g_misaligned = 0;
    free(x), free(dy), free(mean), free(rstd), free(d0), free(d1), free(c0), free(c1), free(scratch);
}

/* ------------------------------------------------------------------ embeddings */

typedef struct {
    int32_t id, row;
} id_row;

static int by_id_then_row(const void *a, const void *b)
{
    const id_row *x = a, *y = b;
    return x->id != y->id ? (x->id > y->id) - (x->id < y->id) : (x->row > y->row) - (x->row < y->row);
}

/* embed.cu's vectorised kernels, vector by vector, against the CPU
 * backend: the token embedding of a shard [v0, v0 + V) (ids outside give
 * zero rows) and its weight gradient by runs of equal ids (a stable sort,
 * as cub's), the position embedding and its weight gradient over B rows
 * of T positions. */
static void embed_case(int b16, int B, int T, int C, int V, int v0)
{
    const int N = B * T;
    const size_t nc = (size_t)N * C, es = RW_ES(b16), E = RW_E(b16), tc = (size_t)T * C;
    void *wte = xmalloc((size_t)V * C * es), *wpe = xmalloc(tc * es), *dout = xmalloc(nc * es);
    void *out_c = xmalloc(nc * es), *out_e = xmalloc(nc * es), *pos_c = xmalloc(nc * es), *pos_e = xmalloc(nc * es);
    float *dwte_c = xmalloc((size_t)V * C * sizeof(float)), *dwte_e = xmalloc((size_t)V * C * sizeof(float));
    float *dwpe_c = xmalloc(tc * sizeof(float)), *dwpe_e = xmalloc(tc * sizeof(float));
    float *scratch = xmalloc((2 * nc + 2 * tc + 64) * sizeof(float));
    int32_t *ids = xmalloc((size_t)N * sizeof *ids);
    id_row *sorted = xmalloc((size_t)N * sizeof *sorted);
    fill(wte, (size_t)V * C, b16, -1, 1), fill(wpe, tc, b16, -1, 1), fill(dout, nc, b16, -1, 1);
    fill(dwte_c, (size_t)V * C, 0, -1, 1), fill(dwpe_c, tc, 0, -1, 1);
    memcpy(dwte_e, dwte_c, (size_t)V * C * sizeof(float)), memcpy(dwpe_e, dwpe_c, tc * sizeof(float));
    for (int n = 0; n < N; n++) /* repeats, and ids before and after the shard */
        ids[n] = (int32_t)(urand() * (v0 + V + 3)) / (n % 3 ? 1 : 4);
    const merak_kernels *k = merak_kernels_cpu();
    const int takes = rw_embed_takes(C, b16, wte, out_e, dout) && rw_embed_takes(C, b16, wpe, dwpe_e, dwte_e);
    if (b16) {
        k->embedding16_fwd(out_c, ids, wte, N, C, v0, V);
        k->embedding16_bwd_w(dwte_c, dout, ids, N, C, v0, V, scratch);
        k->posemb16_fwd(pos_c, out_c, wpe, B, T, C, scratch);
        k->posemb16_bwd_w(dwpe_c, dout, B, T, C, scratch);
    } else {
        k->embedding_fwd(out_c, ids, wte, N, C, v0, V);
        k->embedding_bwd_w(dwte_c, dout, ids, N, C, v0, V);
        k->posemb_fwd(pos_c, out_c, wpe, B, T, C);
        k->posemb_bwd_w(dwpe_c, dout, B, T, C);
    }
    for (size_t v = 0; v < nc / E; v++)
        rw_embedding_fwd(out_e, ids, wte, C, v0, V, v, b16);
    for (size_t v = 0; v < nc / E; v++)
        rw_posemb_fwd(pos_e, out_e, wpe, tc, v, b16);
    for (size_t v = 0; v < tc / E; v++)
        rw_posemb_bwd_w(dwpe_e, dout, B, tc, v, b16);
    for (int n = 0; n < N; n++)
        sorted[n].id = ids[n], sorted[n].row = n;
    qsort(sorted, (size_t)N, sizeof *sorted, by_id_then_row);
    int32_t *rows = xmalloc((size_t)N * sizeof *rows);
    for (int n = 0; n < N; n++)
        rows[n] = sorted[n].row;
    for (int p = 0; p < N; p++) { /* embedding_bwd_runs_k's block p */
        const int32_t id = sorted[p].id;
        if ((p > 0 && sorted[p - 1].id == id) || id - v0 < 0 || id - v0 >= V)
            continue;
        int q = p + 1;
        while (q < N && sorted[q].id == id)
            q++;
        for (int j = 0; j < C / (int)E; j++)
            rw_embedding_bwd_run(dwte_e + (size_t)(id - v0) * C, dout, rows, p, q, C, j, b16);
    }
    const int fwd_same = memcmp(out_e, out_c, nc * es) == 0, pos_same = memcmp(pos_e, pos_c, nc * es) == 0;
    const double e_wte = worst(dwte_e, dwte_c, (size_t)V * C, 0, 1e-5, 1e-6),
                 e_wpe = worst(dwpe_e, dwpe_c, tc, 0, 1e-5, 1e-6);
    tap_ok(takes && fwd_same && pos_same && e_wte <= 1 && e_wpe <= 1 && !g_misaligned,
           "embeddings %s B=%d T=%d C=%d, a shard of %d from %d: token and position rows the CPU's bits %d %d; "
           "dwte %.2f, dwpe %.2f of the tolerance; misaligned accesses %ld",
           b16 ? "bf16" : "f32", B, T, C, V, v0, fwd_same, pos_same, e_wte, e_wpe, g_misaligned);
    g_misaligned = 0;
    free(wte), free(wpe), free(dout), free(out_c), free(out_e), free(pos_c), free(pos_e), free(dwte_c);
    free(dwte_e), free(dwpe_c), free(dwpe_e), free(scratch), free(ids), free(sorted), free(rows);
}

/* ------------------------------------------------------------------ attention's gradients */

/* attention.cu's attn_bwd_add_v_k, vector by vector, against the one-
 * element sums of attn_bwd_add_k without RoPE (dst = (acc ? dst : 0) +
 * src, rounded once): bit for bit.  fused: dq, dk, dv in one q|k|v row
 * (GPT-2's), else three buffers with padded strides. */
static void attn_add_case(int b16, int rows, int C, int Ckv, int fused, int acc)
{
    const int E = RW_E(b16), pad = fused ? 0 : E, W = C + 2 * Ckv;
    const size_t es = RW_ES(b16);
    const int dqs = fused ? W : C + pad, dks = fused ? W : Ckv + pad, dvs = fused ? W : Ckv + 2 * pad;
    const size_t nq = (size_t)rows * dqs, nk = (size_t)rows * dks, nvv = (size_t)rows * dvs;
    char *dst_e = xmalloc((nq + nk + nvv) * es), *dst_r = xmalloc((nq + nk + nvv) * es);
    void *dQ = xmalloc((size_t)rows * C * es), *dK = xmalloc((size_t)rows * Ckv * es),
         *dV = xmalloc((size_t)rows * Ckv * es);
    fill(dst_e, nq + nk + nvv, b16, -1, 1);
    if (!acc) /* must be written, never read */
        fill_nan(dst_e, fused ? nq : nq + nk + nvv, b16);
    memcpy(dst_r, dst_e, (nq + nk + nvv) * es);
    fill(dQ, (size_t)rows * C, b16, -1, 1), fill(dK, (size_t)rows * Ckv, b16, -1, 1);
    fill(dV, (size_t)rows * Ckv, b16, -1, 1);
    char *q_e = dst_e, *k_e = fused ? dst_e + C * es : dst_e + nq * es,
         *v_e = fused ? dst_e + (size_t)(C + Ckv) * es : dst_e + (nq + nk) * es;
    char *q_r = dst_r + (q_e - dst_e), *k_r = dst_r + (k_e - dst_e), *v_r = dst_r + (v_e - dst_e);
    const void *bufs[6] = {q_e, k_e, v_e, dQ, dK, dV};
    const int takes = rw_attn_add_takes(C, Ckv, dqs, dks, dvs, b16, bufs);
    const size_t nvec = (size_t)rows * (size_t)(W / E);
    for (size_t v = 0; v < nvec; v++)
        rw_attn_add(q_e, k_e, v_e, dQ, dK, dV, C, Ckv, dqs, dks, dvs, acc, v, b16);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < C; c++) {
            const size_t d = (size_t)r * dqs + c;
            rw_put(q_r, d, (acc ? rw_elem(q_r, d, b16) : 0.0f) + rw_elem(dQ, (size_t)r * C + c, b16), b16);
        }
        for (int c = 0; c < Ckv; c++) {
            const size_t dk = (size_t)r * dks + c, dv = (size_t)r * dvs + c;
            rw_put(k_r, dk, (acc ? rw_elem(k_r, dk, b16) : 0.0f) + rw_elem(dK, (size_t)r * Ckv + c, b16), b16);
            rw_put(v_r, dv, (acc ? rw_elem(v_r, dv, b16) : 0.0f) + rw_elem(dV, (size_t)r * Ckv + c, b16), b16);
        }
    }
    /* bit for bit, the padding columns (NaN when written) left as they were */
    const int same = memcmp(dst_e, dst_r, (nq + nk + nvv) * es) == 0;
    tap_ok(takes && same && !g_misaligned,
           "attention's gradient add %s rows=%d C=%d Ckv=%d %s acc=%d: the one-element sums' bits %d; misaligned "
           "accesses %ld",
           b16 ? "bf16" : "f32", rows, C, Ckv, fused ? "fused q|k|v" : "separate, padded", acc, same, g_misaligned);
    g_misaligned = 0;
    free(dst_e), free(dst_r), free(dQ), free(dK), free(dV);
}

/* attention.cu's attn_bwd_add_rope_v_k against rope_bwd_add's one-element
 * sums (attn_bwd_add_k with RoPE: cos and sin of t inv_freq[j] in float):
 * bit for bit; nh query heads and nkv key/value heads of hd, rows of T
 * positions, one fused q|k|v row. */
static void attn_rope_case(int b16, int rows, int T, int nh, int nkv, int hd, const merak_rope *rope, int acc)
{
    const int C = nh * hd, Ckv = nkv * hd, W = C + 2 * Ckv, half = hd / 2;
    const size_t es = RW_ES(b16), n = (size_t)rows * W;
    char *dst_e = xmalloc(n * es), *dst_r = xmalloc(n * es);
    void *dQ = xmalloc((size_t)rows * C * es), *dK = xmalloc((size_t)rows * Ckv * es),
         *dV = xmalloc((size_t)rows * Ckv * es);
    if (acc)
        fill(dst_e, n, b16, -1, 1);
    else
        fill_nan(dst_e, n, b16);
    memcpy(dst_r, dst_e, n * es);
    fill(dQ, (size_t)rows * C, b16, -1, 1), fill(dK, (size_t)rows * Ckv, b16, -1, 1);
    fill(dV, (size_t)rows * Ckv, b16, -1, 1);
    char *k_e = dst_e + (size_t)C * es, *v_e = dst_e + (size_t)(C + Ckv) * es;
    const void *bufs[6] = {dst_e, k_e, v_e, dQ, dK, dV};
    const int takes = rw_attn_add_takes(C, Ckv, W, W, W, b16, bufs) && hd % (2 * RW_E(b16)) == 0;
    const size_t nvec = (size_t)rows * ((size_t)(nh + nkv) * (size_t)(half / RW_E(b16)) + (size_t)(Ckv / RW_E(b16)));
    for (size_t v = 0; v < nvec; v++)
        rw_attn_add_rope(dst_e, k_e, v_e, dQ, dK, dV, nh, nkv, hd, T, rope, W, W, W, acc, v, b16);
    for (int r = 0; r < rows; r++) {
        const int t = r % T;
        for (int h = 0; h < nh + nkv; h++) {
            const size_t d0 = (size_t)r * W + (size_t)h * hd; /* q heads, then k heads: contiguous in the row */
            const void *g = h < nh ? dQ : dK;
            const size_t g0 = h < nh ? (size_t)r * C + (size_t)h * hd : (size_t)r * Ckv + (size_t)(h - nh) * hd;
            for (int j = 0; j < half; j++) {
                const float ang = (float)t * merak_rope_inv_freq(rope, j, hd), c = cosf(ang), sn = sinf(ang);
                const float a0 = rw_elem(g, g0 + j, b16), a1 = rw_elem(g, g0 + j + half, b16);
                rw_put(dst_r, d0 + j, (acc ? rw_elem(dst_r, d0 + j, b16) : 0.0f) + (a0 * c + a1 * sn), b16);
                rw_put(dst_r, d0 + j + half, (acc ? rw_elem(dst_r, d0 + j + half, b16) : 0.0f) + (a1 * c - a0 * sn),
                       b16);
            }
        }
        for (int c = 0; c < Ckv; c++) {
            const size_t d = (size_t)r * W + C + Ckv + c;
            rw_put(dst_r, d, (acc ? rw_elem(dst_r, d, b16) : 0.0f) + rw_elem(dV, (size_t)r * Ckv + c, b16), b16);
        }
    }
    const int same = memcmp(dst_e, dst_r, n * es) == 0;
    tap_ok(takes && same && !g_misaligned,
           "attention's gradient add with RoPE %s rows=%d T=%d heads %d/%d of %d acc=%d: the one-element sums' "
           "bits %d; misaligned accesses %ld",
           b16 ? "bf16" : "f32", rows, T, nh, nkv, hd, acc, same, g_misaligned);
    g_misaligned = 0;
    free(dst_e), free(dst_r), free(dQ), free(dK), free(dV);
}

/* ------------------------------------------------------------------ the cross-entropy */

/* block_lse of loss.cu: each warp's xor tree of rw_lse_merge, then warp
 * 0's over the warps' pairs (lane 0's result each time). */
static void block_lse_emu(float *m, float *s, int nthr)
{
    float a[RW_LANES], b[RW_LANES], wm[RW_LANES], ws[RW_LANES];
    const int nw = nthr / RW_LANES;
    for (int w = 0; w <= nw; w++) {
        /* warps 0..nw-1 over the threads' pairs; "warp" nw: warp 0 over the warps' */
        for (int l = 0; l < RW_LANES; l++) {
            a[l] = w < nw ? m[w * RW_LANES + l] : l < nw ? wm[l] : -INFINITY;
            b[l] = w < nw ? s[w * RW_LANES + l] : l < nw ? ws[l] : 0.0f;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float a2[RW_LANES], b2[RW_LANES];
            for (int l = 0; l < RW_LANES; l++) {
                a2[l] = a[l], b2[l] = b[l];
                rw_lse_merge(&a2[l], &b2[l], a[l ^ o], b[l ^ o]);
            }
            memcpy(a, a2, sizeof a), memcpy(b, b2, sizeof b);
        }
        if (w < nw)
            wm[w] = a[0], ws[w] = b[0];
        else
            *m = a[0], *s = b[0];
    }
}

/* loss.cu's ce_stats_v_k and ce_bwd_v_k over N rows of V logits, nthr
 * threads a block. */
static void emu_ce_stats(int b16, int nthr, float *lse, float *tlogit, const void *logits, const int32_t *tg,
                         int N, int V, int v0)
{
    float *m = xmalloc((size_t)nthr * sizeof(float)), *s = xmalloc((size_t)nthr * sizeof(float));
    for (int n = 0; n < N; n++) {
        const char *x = (const char *)logits + (size_t)n * V * RW_ES(b16);
        const long long t = (long long)tg[n] - v0;
        if (tg[n] < 0) {
            lse[n] = tlogit[n] = 0.0f;
            continue;
        }
        for (int i = 0; i < nthr; i++)
            rw_ce_partial(&m[i], &s[i], x, V, b16, i, nthr, NULL);
        block_lse_emu(m, s, nthr);
        lse[n] = logf(s[0]) + m[0];
        tlogit[n] = t >= 0 && t < V ? rw_elem(x, (size_t)t, b16) : 0.0f;
    }
    free(m), free(s);
}

static void emu_ce_bwd(int b16, int nthr, void *dlogits, const void *logits, const float *lse, const int32_t *tg,
                       int N, int V, int v0, float scale)
{
    for (int n = 0; n < N; n++) {
        const size_t at = (size_t)n * V * RW_ES(b16);
        if (tg[n] < 0 && dlogits != logits)
            continue;
        for (int i = 0; i < nthr; i++)
            rw_ce_grad((char *)dlogits + at, (const char *)logits + at, V, (long long)tg[n] - v0,
                       tg[n] < 0 ? 0.0f : lse[n], scale, tg[n] < 0, b16, i, nthr, NULL);
    }
}

/* loss.cu's ce_fused_v_k, lane by lane: the statistics keeping each
 * lane's vectors in a row's shared buffer, then the gradient in place
 * from there (every lane's reads before any lane's writes: the block's
 * barrier). */
static void emu_ce_fused(int b16, int nthr, float *lse, float *tlogit, void *logits, const int32_t *tg, int N, int V,
                         int v0, float scale)
{
    float *m = xmalloc((size_t)nthr * sizeof(float)), *s = xmalloc((size_t)nthr * sizeof(float));
    rw_u4 *keep = xmalloc(((size_t)V / RW_E(b16) + 2) * sizeof *keep);
    for (int n = 0; n < N; n++) {
        char *x = (char *)logits + (size_t)n * V * RW_ES(b16);
        const long long t = (long long)tg[n] - v0;
        if (tg[n] < 0) {
            lse[n] = tlogit[n] = 0.0f;
            for (int i = 0; i < nthr; i++)
                rw_ce_grad(x, x, V, t, 0.0f, scale, 1, b16, i, nthr, NULL);
            continue;
        }
        const float tl = t >= 0 && t < V ? rw_elem(x, (size_t)t, b16) : 0.0f;
        for (int i = 0; i < nthr; i++)
            rw_ce_partial(&m[i], &s[i], x, V, b16, i, nthr, keep);
        block_lse_emu(m, s, nthr);
        const float l = logf(s[0]) + m[0];
        lse[n] = l, tlogit[n] = tl;
        for (int i = 0; i < nthr; i++)
            rw_ce_grad(x, x, V, t, l, scale, 0, b16, i, nthr, keep);
    }
    free(m), free(s), free(keep);
}

/* N rows of V logits starting `off` elements past a 64-byte boundary (so
 * rows start anywhere within 16 bytes), targets in and out of the shard
 * [v0, v0 + V) and ignored (-1): the statistics, the gradient in place and
 * added to another buffer at the same offset, against the CPU backend. */
static void ce_case(int b16, int nthr, int N, int V, int v0, int off, int ninf)
{
    const size_t n = (size_t)N * V, es = RW_ES(b16);
    char *xb = xmalloc((n + 8) * es), *ib = xmalloc((n + 8) * es), *ab = xmalloc((n + 8) * es);
    char *icb = xmalloc((n + 8) * es), *acb = xmalloc((n + 8) * es);
    void *x = xb + off * es, *in_e = ib + off * es, *acc_e = ab + off * es, *in_c = icb + off * es,
         *acc_c = acb + off * es;
    int32_t *tg = xmalloc((size_t)N * sizeof *tg);
    float *st_c = xmalloc(2 * (size_t)N * sizeof(float)), *st_e = xmalloc(2 * (size_t)N * sizeof(float));
    float *scratch = xmalloc((2 * n + 32) * sizeof(float));
    fill(x, n, b16, -4, 4);
    fill(acc_c, n, b16, -1, 1);
    memcpy(acc_e, acc_c, n * es);
    for (int i = 0; i < N; i++)
        tg[i] = i % 5 == 3 ? -1 : (int32_t)(urand() * (V + v0 + (v0 ? 7 : 0)));
    /* masked logits: -inf over the first 20 of odd rows (a whole vector, a
     * thread's first elements) and here and there, never at the target */
    for (int i = 0; i < N && ninf; i++)
        for (int j = 0; j < V; j++)
            if (((i % 2 && j < 20) || urand() < 0.01) && j != tg[i] - v0)
                rw_put(x, (size_t)i * V + j, -INFINITY, b16);
    const merak_kernels *k = merak_kernels_cpu();
    const float scale = 1.0f / (float)N;
    memcpy(in_c, x, n * es), memcpy(in_e, x, n * es);
    if (b16) {
        k->crossentropy16_stats(st_c, st_c + N, x, tg, N, V, V, v0, scratch);
        k->crossentropy16_bwd(in_c, in_c, st_c, tg, N, V, V, v0, scale, scratch);
        k->crossentropy16_bwd(acc_c, x, st_c, tg, N, V, V, v0, scale, scratch);
    } else {
        k->crossentropy_stats(st_c, st_c + N, x, tg, N, V, v0);
        k->crossentropy_bwd(in_c, in_c, st_c, tg, N, V, v0, scale);
        k->crossentropy_bwd(acc_c, x, st_c, tg, N, V, v0, scale);
    }
    emu_ce_stats(b16, nthr, st_e, st_e + N, x, tg, N, V, v0);
    emu_ce_bwd(b16, nthr, in_e, in_e, st_c, tg, N, V, v0, scale);
    emu_ce_bwd(b16, nthr, acc_e, x, st_c, tg, N, V, v0, scale);
    const double e_st = worst(st_e, st_c, 2 * (size_t)N, 0, 1e-5, 1e-6);
    const double e_in = worst_b16(in_e, in_c, n, b16), e_acc = worst_b16(acc_e, acc_c, n, b16);
    int zero = 1;
    for (int r = 0; r < N; r++)
        for (int j = 0; tg[r] < 0 && j < V; j++)
            zero &= rw_elem(in_e, (size_t)r * V + j, b16) == 0.0f &&
                    memcmp((char *)acc_e + ((size_t)r * V + j) * es, (char *)acc_c + ((size_t)r * V + j) * es, es) == 0;
    tap_ok(e_st <= 1 && e_in <= 1 && e_acc <= 1 && zero && !g_misaligned,
           "crossentropy %s N=%d V=%d v0=%d, rows from element %d, %d threads%s: statistics %.2f, in place %.2f, "
           "added %.2f of the tolerance; ignored rows zeroed in place, untouched added: %d; misaligned accesses %ld",
           b16 ? "bf16" : "f32", N, V, v0, off, nthr, ninf ? ", -inf logits" : "", e_st, e_in, e_acc, zero,
           g_misaligned);
    g_misaligned = 0;

    /* the one-pass kernel: the two kernels' bits (statistics, and the
     * gradient in place from them); the CPU's one entry the same as its two */
    char *fb = xmalloc((n + 8) * es), *rb = xmalloc((n + 8) * es), *cb = xmalloc((n + 8) * es);
    void *fz = fb + off * es, *ref = rb + off * es, *cz = cb + off * es;
    float *st_f = xmalloc(2 * (size_t)N * sizeof(float)), *st_cf = xmalloc(2 * (size_t)N * sizeof(float));
    memcpy(fz, x, n * es), memcpy(ref, x, n * es), memcpy(cz, x, n * es);
    emu_ce_fused(b16, nthr, st_f, st_f + N, fz, tg, N, V, v0, scale);
    emu_ce_bwd(b16, nthr, ref, ref, st_e, tg, N, V, v0, scale);
    int cpu_same = 1;
    if (b16) {
        k->crossentropy16_fused(st_cf, st_cf + N, cz, tg, N, V, V, v0, scale, scratch);
        cpu_same = !memcmp(st_cf, st_c, 2 * (size_t)N * sizeof(float)) && !memcmp(cz, in_c, n * es);
    }
    tap_ok(!memcmp(st_f, st_e, 2 * (size_t)N * sizeof(float)) && !memcmp(fz, ref, n * es) && cpu_same &&
               !g_misaligned,
           "crossentropy %s N=%d V=%d v0=%d, rows from element %d, %d threads%s, in one pass (vectors kept): the "
           "statistics and the gradient in place bit for bit the two kernels'; the CPU's one entry its two's: %d",
           b16 ? "bf16" : "f32", N, V, v0, off, nthr, ninf ? ", -inf logits" : "", cpu_same);
    g_misaligned = 0;
    free(fb), free(rb), free(cb), free(st_f), free(st_cf);
    free(xb), free(ib), free(ab), free(icb), free(acb), free(tg), free(st_c), free(st_e), free(scratch);
}

/* The online log-sum-exp against the two-pass one on values whose scale
 * would overflow a plain sum of exponentials. */
static void lse_case(void)
{
    float m = -INFINITY, s = 0.0f, mx = -INFINITY;
    static float v[1000];
    for (int i = 0; i < 1000; i++) {
        /* -inf first (a whole vector and more) and here and there */
        v[i] = i < 11 || urand() < 0.05 ? -INFINITY : (float)(200.0 * urand() - 50.0);
        mx = fmaxf(mx, v[i]);
    }
    double ref = 0;
    for (int i = 0; i < 1000; i++)
        ref += v[i] == -INFINITY ? 0.0 : exp((double)v[i] - mx);
    ref = log(ref) + mx;
    for (int i = 0; i < 1000; i++) {
        if (i % 8 == 0 && i + 8 <= 1000) {
            rw_u4 q = rw_pack(v + i, 0), q2 = rw_pack(v + i + 4, 0);
            rw_lse_add_vec(&m, &s, q, 0);
            rw_lse_add_vec(&m, &s, q2, 0);
            i += 7;
        } else {
            rw_lse_add(&m, &s, v[i]);
        }
    }
    float m2 = -INFINITY, s2 = 0.0f;
    rw_lse_merge(&m2, &s2, -INFINITY, 0.0f); /* empty with empty stays empty */
    const int empty = m2 == -INFINITY && s2 == 0.0f;
    rw_lse_merge(&m2, &s2, m, s);
    const double got = log((double)s2) + m2;
    tap_ok(fabs(got - ref) <= 1e-5 * fabs(ref) && empty,
           "online log-sum-exp of 1000 values in [-50, 150] and -inf: %.9g against %.9g; empty pairs merge to empty %d",
           got, ref, empty);
}

int main(void)
{
    const char *env = getenv("MERAK_TEST_SEED");
    g_rng = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    printf("# seed %llu (MERAK_TEST_SEED reproduces)\n", (unsigned long long)g_rng);
    merak_kernels_cpu_set_threads(1);

    vmax_cases();
    lse_case();
    /* GPT-2's widths (124M, 350M), LLaMA 1B's, and lanes left idle */
    for (int b16 = 0; b16 <= 1; b16++) {
        norm_case(0, b16, 1, 37, 768);
        norm_case(0, b16, 0, 5, 1024);
        norm_case(1, b16, 0, 9, 1024);
        norm_case(0, b16, 1, 3, 40);
        norm_case(1, b16, 0, 4, 64);
        norm_case(0, b16, 1, 7, b16 ? 1008 : 1000);
    }
    norm_case(0, 1, 1, 3, 2048);
    norm_case(1, 1, 0, 3, 2048);
    norm_case(1, 0, 0, 3, 1024);
    norm_case(1, 1, 0, 16500, 64);   /* past RW_NB_CHUNKS chunks of RW_NB_ROWS: bigger chunks */
    /* column sums: GPT-2's widths (the norms, the projections' biases), a
     * last chunk of a few rows, a last block of a few vectors */
    for (int b16 = 0; b16 <= 1; b16++) {
        colred_case(RW_LAYERNORM, b16, 200, 768);
        colred_case(RW_RMSNORM, b16, 70, 1024);
        colred_case(RW_COLSUM, b16, 130, 2304);
        colred_case(RW_COLSUM, b16, 5, 8 * RW_E(b16) + 32 * RW_E(b16));
    }
    /* the embeddings: GPT-2's width, a narrow one (a vector a row in bf16) */
    for (int b16 = 0; b16 <= 1; b16++) {
        embed_case(b16, 3, 37, 768, 50, 0);
        embed_case(b16, 2, 9, 8, 20, 7);
        embed_case(b16, 4, 5, 40, 300, 100);
    }
    /* attention's gradient add: GPT-2's fused rows, grouped-query widths */
    for (int b16 = 0; b16 <= 1; b16++)
        for (int acc = 0; acc <= 1; acc++) {
            attn_add_case(b16, 9, 768, 768, 1, acc);
            attn_add_case(b16, 5, 64, 16, 0, acc);
        }
    const merak_rope llama2 = {.theta = 10000.0f}, llama3 = {.theta = 500000.0f, .type = MERAK_ROPE_LLAMA3,
                                                              .factor = 8.0f, .low_freq_factor = 1.0f,
                                                              .high_freq_factor = 4.0f,
                                                              .original_max_positions = 8192};
    for (int b16 = 0; b16 <= 1; b16++)
        for (int acc = 0; acc <= 1; acc++) {
            attn_rope_case(b16, 12, 6, 4, 2, 64, &llama2, acc);
            attn_rope_case(b16, 7, 7, 2, 1, 128, &llama3, acc);
        }
    /* the cross-entropy: GPT-2's vocabulary (rows at every offset within
     * 16 bytes), a shard, rows shorter than a vector's head */
    for (int b16 = 0; b16 <= 1; b16++) {
        ce_case(b16, 256, 5, 50257, 0, 0, 0);
        ce_case(b16, 64, 6, 1000, 0, 3, 0);
        ce_case(b16, 64, 7, 300, 100, 1, 0);
        ce_case(b16, 32, 9, 5, 0, 1, 0);
        ce_case(b16, 128, 4, 4099, 2, 5, 0);
        ce_case(b16, 64, 6, 1000, 0, 2, 1);
        ce_case(b16, 256, 3, 50257, 0, 0, 1);
    }
    return tap_done();
}
