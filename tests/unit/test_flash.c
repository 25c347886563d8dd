/*
 * test_flash.c - the fused attention of the CUDA backend (kernels/cuda/flash.h)
 * run on the CPU, against the CPU backend's attention.
 *
 * flash.h holds the per-thread arithmetic of the three kernels (forward,
 * dq, dk and dv) in C that gcc and nvcc both compile.  This test drives it
 * as attention.cu's kernels do: the same grid and the same tile loops,
 * every thread of a block in turn between two barriers (a thread reads and
 * writes only its own state and its own rows of shared memory between
 * barriers, so any order of the threads gives the same result).  The
 * indexing, causal masking, online softmax, grouped-query mapping, strides
 * and tile edges are therefore checked here on every build; what is left to
 * the GPU (tests/gpu/test_cuda_kernels) is the launch and the hardware.
 *
 * Each case: random q, k, v (separate or one fused qkv buffer, with
 * strides), out and lse of the forward, and dq, dk, dv of the backward for
 * a random dout, all against merak_kernels_cpu() with the tolerance of
 * tests/gpu/test_cuda_kernels (|flash - cpu| <= 1e-4 |cpu| + 5e-5 max|cpu|,
 * plus 1e-6 for rounding where the result is zero).
 * With RoPE the CPU forward's rotated qr, kr are what the kernels read
 * (attention.cu rotates them first, as cuda_glue.c does).  MERAK_TEST_SEED
 * reproduces a run.
 */
#include "cuda/flash.h"
#include "kernels.h"
#include "mix64.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RTOL 1e-4
#define ATOL 5e-5
#define FLOOR 1e-6

static uint64_t g_rng;

static double urand(void)
{
    g_rng += MERAK_GOLDEN;
    return (double)(merak_mix64(g_rng) >> 11) * 0x1.0p-53;
}

static int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); }

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    return p;
}

static float *rand_array(size_t n)
{
    float *x = xcalloc(n, sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * urand() - 1.0);
    return x;
}

static int imin(int a, int b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ the three kernels */

/* flash_fwd_k of attention.cu, block by block. */
static void emu_fwd(const flash_p *p, int B, float *out, float *lse, const float *Q,
                    const float *K, const float *V)
{
    static float Ks[FLASH_FWD_KEYS * FLASH_HD], Vs[FLASH_FWD_KEYS * FLASH_HD];
    flash_fwd_row *r = xcalloc(FLASH_FWD_ROWS, sizeof *r);
    const int nblk = (p->T + FLASH_FWD_ROWS - 1) / FLASH_FWD_ROWS;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < p->nh; h++)
            for (int bx = 0; bx < nblk; bx++) {
                const int i0 = (nblk - 1 - bx) * FLASH_FWD_ROWS, g = h / (p->nh / p->nkv);
                for (int t = 0; t < FLASH_FWD_ROWS; t++)
                    if (i0 + t < p->T)
                        flash_fwd_begin(&r[t], Q, p, b, h, i0 + t);
                const int end = flash_keys_end(i0, FLASH_FWD_ROWS, p->T);
                for (int j0 = 0; j0 < end; j0 += FLASH_FWD_KEYS) {
                    for (int t = 0; t < FLASH_FWD_ROWS; t++) {
                        flash_tile_load(Ks, FLASH_FWD_KEYS, K, p->ks, p, b, g, j0, 1.0f, t,
                                        FLASH_FWD_ROWS);
                        flash_tile_load(Vs, FLASH_FWD_KEYS, V, p->vs, p, b, g, j0, 1.0f, t,
                                        FLASH_FWD_ROWS);
                    }
                    for (int t = 0; t < FLASH_FWD_ROWS; t++)
                        if (i0 + t < p->T)
                            flash_fwd_tile(&r[t], Ks, Vs, j0, imin(FLASH_FWD_KEYS, p->T - j0),
                                           i0 + t);
                }
                for (int t = 0; t < FLASH_FWD_ROWS; t++)
                    if (i0 + t < p->T)
                        flash_fwd_end(&r[t], out, lse, p, b, h, i0 + t);
            }
    free(r);
}

/* flash_dq_k, then flash_dkv_k. */
static void emu_bwd(const flash_p *p, int B, float *dQ, float *dK, float *dV, float *D,
                    const float *dout, const float *lse, const float *Q, const float *K,
                    const float *V)
{
    static float Ks[FLASH_DQ_KEYS * FLASH_HD], Vs[FLASH_DQ_KEYS * FLASH_HD];
    static float dOs[FLASH_DQ_ROWS * FLASH_PITCH];
    flash_dq_row *r = xcalloc(FLASH_DQ_ROWS, sizeof *r);
    int nblk = (p->T + FLASH_DQ_ROWS - 1) / FLASH_DQ_ROWS;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < p->nh; h++)
            for (int bx = 0; bx < nblk; bx++) {
                const int i0 = (nblk - 1 - bx) * FLASH_DQ_ROWS, g = h / (p->nh / p->nkv);
                for (int t = 0; t < FLASH_DQ_ROWS; t++)
                    if (i0 + t < p->T)
                        flash_dq_begin(&r[t], dOs + t * FLASH_PITCH, Q, dout, lse, p, b, h,
                                       i0 + t);
                const int end = flash_keys_end(i0, FLASH_DQ_ROWS, p->T);
                for (int pass = 0; pass < 2; pass++)
                    for (int j0 = 0; j0 < end; j0 += FLASH_DQ_KEYS) {
                        for (int t = 0; t < FLASH_DQ_ROWS; t++) {
                            flash_tile_load(Ks, FLASH_DQ_KEYS, K, p->ks, p, b, g, j0, 1.0f, t,
                                            FLASH_DQ_ROWS);
                            flash_tile_load(Vs, FLASH_DQ_KEYS, V, p->vs, p, b, g, j0, 1.0f, t,
                                            FLASH_DQ_ROWS);
                        }
                        for (int t = 0; t < FLASH_DQ_ROWS; t++)
                            if (i0 + t < p->T)
                                flash_dq_tile(&r[t], dOs + t * FLASH_PITCH, Ks, Vs, j0,
                                              imin(FLASH_DQ_KEYS, p->T - j0), i0 + t, pass);
                    }
                for (int t = 0; t < FLASH_DQ_ROWS; t++)
                    if (i0 + t < p->T)
                        flash_dq_end(&r[t], dQ, D, p, b, h, i0 + t);
            }
    free(r);

    static float Qs[FLASH_DK_QUERIES * FLASH_HD], dOt[FLASH_DK_QUERIES * FLASH_HD];
    static float ls[FLASH_DK_QUERIES], Ds[FLASH_DK_QUERIES];
    static float own[2 * FLASH_DK_ROWS * FLASH_PITCH];
    flash_dk_row *kr = xcalloc(FLASH_DK_ROWS, sizeof *kr);
    const int rep = p->nh / p->nkv;
    nblk = (p->T + FLASH_DK_ROWS - 1) / FLASH_DK_ROWS;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < p->nkv; g++)
            for (int bx = 0; bx < nblk; bx++) {
                const int j0 = bx * FLASH_DK_ROWS;
                for (int t = 0; t < FLASH_DK_ROWS; t++)
                    if (j0 + t < p->T)
                        flash_dk_begin(&kr[t], own + t * FLASH_PITCH,
                                       own + (FLASH_DK_ROWS + t) * FLASH_PITCH, K, V, p, b, g,
                                       j0 + t);
                for (int rr = 0; rr < rep; rr++) {
                    const int h = g * rep + rr;
                    for (int i0 = j0; i0 < p->T; i0 += FLASH_DK_QUERIES) {
                        for (int t = 0; t < FLASH_DK_ROWS; t++) {
                            flash_tile_load(Qs, FLASH_DK_QUERIES, Q, p->qs, p, b, h, i0, p->scale,
                                            t, FLASH_DK_ROWS);
                            flash_tile_load(dOt, FLASH_DK_QUERIES, dout, p->nh * p->hd, p, b, h,
                                            i0, 1.0f, t, FLASH_DK_ROWS);
                            flash_dk_stats_load(ls, Ds, lse, D, p, b, h, i0, t, FLASH_DK_ROWS);
                        }
                        for (int t = 0; t < FLASH_DK_ROWS; t++)
                            if (j0 + t < p->T)
                                flash_dk_tile(&kr[t], own + t * FLASH_PITCH,
                                              own + (FLASH_DK_ROWS + t) * FLASH_PITCH, Qs, dOt, ls,
                                              Ds, i0, imin(FLASH_DK_QUERIES, p->T - i0), j0 + t);
                    }
                }
                for (int t = 0; t < FLASH_DK_ROWS; t++)
                    if (j0 + t < p->T)
                        flash_dk_end(&kr[t], own + (FLASH_DK_ROWS + t) * FLASH_PITCH, dK, dV, p,
                                     b, g, j0 + t);
            }
    free(kr);
}

/* ------------------------------------------------------------------ comparison */

/* Largest |got - want| / (RTOL |want| + ATOL max|want| + FLOOR) over the
 * rows of `width` columns at strides gs, ws (1.0 and below pass; NaN
 * fails).  FLOOR is float rounding in sums of the O(1) inputs, which is
 * all there is where the exact result is zero (T = 1: one key, P = 1, so
 * dS = P (dP - D) = 0 and dq = dk = 0 up to rounding on both sides). */
static double worst(const float *got, int gs, const float *want, int ws, size_t rows, int width)
{
    double m = 0.0, r = 0.0;
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < width; c++)
            m = fmax(m, fabs((double)want[i * ws + c]));
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < width; c++) {
            const double w = want[i * ws + c], g = got[i * gs + c];
            const double e = fabs(g - w) / (RTOL * fabs(w) + ATOL * m + FLOOR);
            if (!(e <= r))
                r = isnan(e) ? INFINITY : e;
        }
    return r;
}

static void check(const char *name, const char *what, double r)
{
    tap_ok(r <= 1.0, "%s: %s matches the cpu (err/tol %.3g)", name, what, r);
}

static void run_case(int B, int T, int nh, int nkv, int hd, float theta, int fused)
{
    const merak_kernels *cpu = merak_kernels_cpu();
    const int C = nh * hd, Ckv = nkv * hd, row = fused ? C + 2 * Ckv : 0;
    const size_t BT = (size_t)B * T;
    merak_attn_shape s;
    memset(&s, 0, sizeof s);
    s.B = B, s.T = T, s.n_head = nh, s.n_kv_head = nkv, s.head_dim = hd, s.rope = (merak_rope){.theta = theta};
    s.q_stride = fused ? row : C;
    s.k_stride = s.v_stride = fused ? row : Ckv;
    char name[160];
    snprintf(name, sizeof name, "B=%d T=%d nh=%d nkv=%d hd=%d rope=%g %s", B, T, nh, nkv, hd,
             (double)theta, fused ? "fused qkv" : "separate q,k,v");

    float *qkv = rand_array(fused ? BT * row : BT * C);
    float *k = fused ? qkv + C : rand_array(BT * Ckv), *v = fused ? qkv + C + Ckv : rand_array(BT * Ckv);
    float *out = xcalloc(BT * C, sizeof(float)), *lse = xcalloc(BT * nh, sizeof(float));
    float *qr = theta > 0 ? xcalloc(BT * C, sizeof(float)) : NULL;
    float *kr = theta > 0 ? xcalloc(BT * Ckv, sizeof(float)) : NULL;
    float *scratch = xcalloc(cpu->attention_scratch_elems(&s), sizeof(float));
    cpu->attention_fwd(&s, out, lse, qr, kr, qkv, k, v, scratch);

    /* what the kernels read: the rotated copies with RoPE */
    const float *Q = qr ? qr : qkv, *K = kr ? kr : k;
    flash_p p;
    p.T = T, p.nh = nh, p.nkv = nkv, p.hd = hd;
    p.qs = qr ? C : s.q_stride;
    p.ks = kr ? Ckv : s.k_stride;
    p.vs = s.v_stride;
    p.scale = (float)(1.0 / sqrt((double)hd));

    float *fout = xcalloc(BT * C, sizeof(float)), *flse = xcalloc(BT * nh, sizeof(float));
    for (size_t i = 0; i < BT * C; i++)
        fout[i] = NAN; /* every element must be written */
    emu_fwd(&p, B, fout, flse, Q, K, v);
    check(name, "out", worst(fout, C, out, C, BT, C));
    check(name, "lse", worst(flse, 1, lse, 1, BT * nh, 1));

    /* the backward with respect to the q and k the kernels read: the CPU's
     * over the same (rotated) q, k without RoPE */
    merak_attn_shape s0 = s;
    s0.rope.theta = 0.0f;
    s0.q_stride = p.qs, s0.k_stride = p.ks;
    float *dout = rand_array(BT * C);
    float *dq = xcalloc(BT * C, sizeof(float)), *dk = xcalloc(BT * Ckv, sizeof(float));
    float *dv = xcalloc(BT * Ckv, sizeof(float));
    /* q, k, v, dq, dk, dv of s0: dq, dk, dv dense here, so strides of Q, K
     * must be dense too for the CPU's gradients: copy them out */
    float *Qd = xcalloc(BT * C, sizeof(float)), *Kd = xcalloc(BT * Ckv, sizeof(float));
    float *Vd = xcalloc(BT * Ckv, sizeof(float));
    for (size_t t = 0; t < BT; t++) {
        memcpy(Qd + t * C, Q + t * p.qs, (size_t)C * sizeof(float));
        memcpy(Kd + t * Ckv, K + t * p.ks, (size_t)Ckv * sizeof(float));
        memcpy(Vd + t * Ckv, v + t * p.vs, (size_t)Ckv * sizeof(float));
    }
    s0.q_stride = C, s0.k_stride = s0.v_stride = Ckv;
    cpu->attention_bwd(&s0, dq, dk, dv, dout, NULL, lse, NULL, NULL, Qd, Kd, Vd, scratch, 1);

    float *fdq = xcalloc(BT * C, sizeof(float)), *fdk = xcalloc(BT * Ckv, sizeof(float));
    float *fdv = xcalloc(BT * Ckv, sizeof(float)), *D = xcalloc(BT * nh, sizeof(float));
    for (size_t i = 0; i < BT * C; i++)
        fdq[i] = NAN;
    for (size_t i = 0; i < BT * Ckv; i++)
        fdk[i] = fdv[i] = NAN;
    emu_bwd(&p, B, fdq, fdk, fdv, D, dout, lse, Q, K, v);
    check(name, "dq", worst(fdq, C, dq, C, BT, C));
    check(name, "dk", worst(fdk, Ckv, dk, Ckv, BT, Ckv));
    check(name, "dv", worst(fdv, Ckv, dv, Ckv, BT, Ckv));

    free(qkv);
    if (!fused)
        free(k), free(v);
    free(out), free(lse), free(qr), free(kr), free(scratch), free(fout), free(flse);
    free(dout), free(dq), free(dk), free(dv), free(Qd), free(Kd), free(Vd);
    free(fdq), free(fdk), free(fdv), free(D);
}

int main(void)
{
    const char *env = getenv("MERAK_TEST_SEED");
    g_rng = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    printf("# seed %llu (MERAK_TEST_SEED reproduces)\n", (unsigned long long)g_rng);
    merak_kernels_cpu_set_threads(1);

    /* the shapes of tests/gpu/test_cuda_kernels that take the fused path */
    run_case(2, 7, 3, 3, 8, 0.0f, 1);
    run_case(2, 9, 4, 2, 16, 10000.0f, 0);
    run_case(1, 300, 2, 2, 64, 10000.0f, 0);
    run_case(3, 129, 6, 2, 64, 10000.0f, 0);
    /* tile edges: one row, exactly one and two forward tiles, one past */
    run_case(1, 1, 2, 1, 5, 0.0f, 1);
    run_case(1, 64, 2, 2, 64, 0.0f, 1);
    run_case(2, 128, 1, 1, 33, 0.0f, 0);
    run_case(1, 65, 4, 1, 12, 500000.0f, 1);
    /* random shapes */
    for (int c = 0; c < 6; c++) {
        const int nkv = irand(1, 3), rep = irand(1, 3), hd = irand(1, FLASH_HD);
        const float theta = hd % 2 == 0 && irand(0, 1) ? 10000.0f : 0.0f; /* RoPE pairs columns */
        run_case(irand(1, 2), irand(1, 200), nkv * rep, nkv, hd, theta, irand(0, 1));
    }
    return tap_done();
}
