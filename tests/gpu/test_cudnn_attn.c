/*
 * test_cudnn_attn.c - TAP tests of cuDNN's fused attention
 * (kernels/cuda/cudnn_attn.h) against the CPU backend's attention
 * (merak_kernels_cpu) on the same bf16 values.
 *
 * Skipped ("1..0 # SKIP why", the TAP driver's skip) without a CUDA device
 * or when libcudnn.so.9 cannot be loaded.
 *
 * Per shape: q, k, v in one fused qkv buffer (B,T,(nh+2*nkv)*hd), random
 * bf16 values; the CPU runs its float attention on those values (rounded
 * to bf16 first, so both sides see the same inputs):
 *   - out within 1e-2 of the CPU's, relative to the largest |out|;
 *   - stats within 1e-3 (1 + |lse|) of the CPU's lse;
 *   - dq, dk, dv (one fused gradient buffer) within 2e-2 of the CPU's,
 *     relative to each one's largest |value|;
 *   - every output written and finite: out, stats and the gradients start
 *     as NaN;
 *   - the backward twice gives bitwise-identical gradients (deterministic);
 *   - q, k, v untouched.
 * MERAK_TEST_SEED=<n> changes the random values.
 */
#include "cuda/cuda_kernels.h" /* merak_kernels_cuda, device memory helpers */
#include "cuda/cudnn_attn.h"   /* merak_cudnn_attn_* */
#include "kernels.h"           /* merak_kernels_cpu, merak_attn_shape */
#include "bf16.h"              /* merak_f32_to_bf16, merak_bf16_to_f32 */
#include "mix64.h"
#include "../unit/tap.h"
#include "test_mem.h"            /* xmalloc, dmalloc */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_RTOL 1e-2
#define LSE_TOL 1e-3
#define GRAD_RTOL 2e-2
#define BF16_NAN ((uint16_t)0x7fc0)

static uint64_t g_rng = 0x5eedc0ffee11ULL;

static float rng_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((merak_mix64(g_rng += MERAK_GOLDEN) >> 40) * 0x1.0p-24);
}


static void bail_if_failed(const char *what)
{
    char err[512];
    if (merak_cuda_status(err, sizeof err) < 0) {
        printf("not ok %d - %s: %s\n", ++tap_n, what, err);
        printf("Bail out! the CUDA backend stopped at its first error\n");
        exit(1);
    }
}

/* Largest |a| over n values. */
static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* Compares the bf16 columns [c0, c0+w) of rows of `row` values, gpu (bf16)
 * against cpu (float), within rtol of the largest |cpu|; counts non-finite. */
static int cmp_cols(const char *what, const char *name, const uint16_t *gpu, const float *cpu,
                    size_t rows, int row, int c0, int w, double rtol)
{
    double m = 0, err = 0;
    size_t bad = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = c0; c < c0 + w; c++)
            m = fmax(m, fabs(cpu[r * row + c]));
    for (size_t r = 0; r < rows; r++)
        for (int c = c0; c < c0 + w; c++) {
            float g = merak_bf16_to_f32(gpu[r * row + c]);
            if (!isfinite(g))
                bad++;
            else
                err = fmax(err, fabs(g - cpu[r * row + c]));
        }
    return tap_ok(bad == 0 && err <= rtol * m, "%s: %s written, finite and within %g of max |%s| (%zu not; error %.3g of %.3g)",
                  name, what, rtol, what, bad, m > 0 ? err / m : err, m);
}

typedef struct shape_case {
    int B, T, nh, nkv, hd;
} shape_case;

static void test_shape(const shape_case *c)
{
    const merak_kernels *cpu = merak_kernels_cpu();
    const int B = c->B, T = c->T, nh = c->nh, nkv = c->nkv, hd = c->hd;
    const int row = (nh + 2 * nkv) * hd, orow = nh * hd;
    const size_t N = (size_t)B * T;
    merak_attn_shape s;
    memset(&s, 0, sizeof s); /* rope.theta 0: no rotary */
    s.B = B, s.T = T, s.n_head = nh, s.n_kv_head = nkv, s.head_dim = hd;
    s.q_stride = s.k_stride = s.v_stride = row;
    char name[96];
    snprintf(name, sizeof name, "B=%d T=%d nh=%d nkv=%d hd=%d", B, T, nh, nkv, hd);
    tap_ok(merak_cudnn_attn_supported(&s), "%s: supported", name);

    /* host: bf16 inputs and their float values */
    uint16_t *hqkv = xmalloc(N * row * 2), *hdout = xmalloc(N * orow * 2);
    float *fqkv = xmalloc(N * row * 4), *fdout = xmalloc(N * orow * 4);
    for (size_t i = 0; i < N * row; i++) {
        hqkv[i] = merak_f32_to_bf16(rng_uniform(-2.0f, 2.0f));
        fqkv[i] = merak_bf16_to_f32(hqkv[i]);
    }
    for (size_t i = 0; i < N * orow; i++) {
        hdout[i] = merak_f32_to_bf16(rng_uniform(-1.0f, 1.0f));
        fdout[i] = merak_bf16_to_f32(hdout[i]);
    }

    /* CPU reference: out, lse, then dq, dk, dv (accumulated into zeros) */
    float *cout = xmalloc(N * orow * 4), *clse = xmalloc(N * nh * 4), *cdqkv = calloc(N * row, 4);
    float *scratch = xmalloc((cpu->attention_scratch_elems(&s) + 1) * 4);
    if (!cdqkv) {
        printf("Bail out! out of host memory\n");
        exit(1);
    }
    cpu->attention_fwd(&s, cout, clse, NULL, NULL, fqkv, fqkv + orow, fqkv + orow + nkv * hd, scratch);
    cpu->attention_bwd(&s, cdqkv, cdqkv + orow, cdqkv + orow + nkv * hd, fdout, cout, clse, NULL, NULL, fqkv,
                       fqkv + orow, fqkv + orow + nkv * hd, scratch, 1);

    /* device: outputs start as NaN */
    uint16_t *dqkv = dmalloc(N * row * 2), *ddout = dmalloc(N * orow * 2), *dout_ = dmalloc(N * orow * 2);
    uint16_t *ddqkv = dmalloc(N * row * 2), *ddqkv2 = dmalloc(N * row * 2);
    float *dstats = dmalloc(N * nh * 4);
    uint16_t *nanbuf = xmalloc(N * row * 2);
    for (size_t i = 0; i < N * row; i++)
        nanbuf[i] = BF16_NAN;
    float *fnan = xmalloc(N * nh * 4);
    for (size_t i = 0; i < N * nh; i++)
        fnan[i] = NAN;
    merak_cuda_memcpy_h2d(dqkv, hqkv, N * row * 2);
    merak_cuda_memcpy_h2d(ddout, hdout, N * orow * 2);
    merak_cuda_memcpy_h2d(dout_, nanbuf, N * orow * 2);
    merak_cuda_memcpy_h2d(ddqkv, nanbuf, N * row * 2);
    merak_cuda_memcpy_h2d(ddqkv2, nanbuf, N * row * 2);
    merak_cuda_memcpy_h2d(dstats, fnan, N * nh * 4);
    bail_if_failed(name);

    const uint16_t *q = dqkv, *k = dqkv + orow, *v = dqkv + orow + nkv * hd;
    int rf = merak_cudnn_attn_fwd(&s, dout_, dstats, q, k, v);
    int rb = rf ? -1 : merak_cudnn_attn_bwd(&s, ddqkv, ddqkv + orow, ddqkv + orow + nkv * hd, row, row, row,
                                           ddout, dout_, dstats, q, k, v);
    int rb2 = rb ? -1 : merak_cudnn_attn_bwd(&s, ddqkv2, ddqkv2 + orow, ddqkv2 + orow + nkv * hd, row, row,
                                            row, ddout, dout_, dstats, q, k, v);
    tap_ok(rf == 0 && rb == 0 && rb2 == 0, "%s: forward and backward return 0", name);
    merak_cuda_synchronize();
    bail_if_failed(name);

    uint16_t *gout = xmalloc(N * orow * 2), *gdqkv = xmalloc(N * row * 2), *gdqkv2 = xmalloc(N * row * 2);
    uint16_t *gqkv = xmalloc(N * row * 2);
    float *gstats = xmalloc(N * nh * 4);
    merak_cuda_memcpy_d2h(gout, dout_, N * orow * 2);
    merak_cuda_memcpy_d2h(gdqkv, ddqkv, N * row * 2);
    merak_cuda_memcpy_d2h(gdqkv2, ddqkv2, N * row * 2);
    merak_cuda_memcpy_d2h(gqkv, dqkv, N * row * 2);
    merak_cuda_memcpy_d2h(gstats, dstats, N * nh * 4);
    bail_if_failed(name);

    cmp_cols("out", name, gout, cout, N, orow, 0, orow, OUT_RTOL);
    {
        size_t bad = 0;
        double err = 0;
        for (size_t i = 0; i < N * nh; i++) {
            if (!isfinite(gstats[i]))
                bad++;
            else
                err = fmax(err, fabs(gstats[i] - clse[i]) / (1.0 + fabs(clse[i])));
        }
        tap_ok(bad == 0 && err <= LSE_TOL, "%s: stats written, finite, the lse within %g (%zu not; error %.3g; max |lse| %.3g)",
               name, LSE_TOL, bad, err, max_abs(clse, N * nh));
    }
    cmp_cols("dq", name, gdqkv, cdqkv, N, row, 0, orow, GRAD_RTOL);
    cmp_cols("dk", name, gdqkv, cdqkv, N, row, orow, nkv * hd, GRAD_RTOL);
    cmp_cols("dv", name, gdqkv, cdqkv, N, row, orow + nkv * hd, nkv * hd, GRAD_RTOL);
    tap_ok(!memcmp(gdqkv, gdqkv2, N * row * 2), "%s: the backward is bitwise repeatable", name);
    tap_ok(!memcmp(gqkv, hqkv, N * row * 2), "%s: q, k, v untouched", name);

    merak_cuda_free(dqkv), merak_cuda_free(ddout), merak_cuda_free(dout_);
    merak_cuda_free(ddqkv), merak_cuda_free(ddqkv2), merak_cuda_free(dstats);
    free(hqkv), free(hdout), free(fqkv), free(fdout), free(cout), free(clse), free(cdqkv), free(scratch);
    free(nanbuf), free(fnan), free(gout), free(gdqkv), free(gdqkv2), free(gqkv), free(gstats);
}

/* Whether cuDNN loads: a first tiny forward.  Returns 1 (go on), or 0 after
 * printing the skip line when libcudnn cannot be loaded. */
static int cudnn_loads(void)
{
    merak_attn_shape s;
    memset(&s, 0, sizeof s);
    s.B = 1, s.T = 64, s.n_head = 1, s.n_kv_head = 1, s.head_dim = 64;
    s.q_stride = s.k_stride = s.v_stride = 64;
    const size_t n = 64 * 64; /* elements of each of q, k, v, out */
    uint16_t *qkv = dmalloc(4 * n * 2);
    float *stats = dmalloc(64 * 4);
    merak_cuda_memset(qkv, 0, 4 * n * 2);
    int rc = merak_cudnn_attn_fwd(&s, qkv + 3 * n, stats, qkv, qkv + n, qkv + 2 * n);
    char err[512] = "";
    if (rc < 0 && merak_cuda_status(err, sizeof err) < 0 && strstr(err, "loading libcudnn")) {
        printf("1..0 # SKIP cuDNN not loadable (%s)\n", err);
        return 0;
    }
    merak_cuda_synchronize();
    tap_ok(rc == 0, "a first small forward runs%s%s", err[0] ? ": " : "", err);
    bail_if_failed("first forward");
    merak_cuda_free(qkv), merak_cuda_free(stats);
    return 1;
}

int main(void)
{
    if (!merak_cuda_available()) {
        printf("1..0 # SKIP no CUDA device\n");
        return 0;
    }
    if (!merak_kernels_cuda()) {
        char err[256] = "unknown error";
        merak_cuda_status(err, sizeof err);
        printf("not ok 1 - CUDA backend initialises: %s\n1..1\n", err);
        return 1;
    }
    const char *seed = getenv("MERAK_TEST_SEED");
    if (seed)
        g_rng = strtoull(seed, NULL, 10);
    if (!cudnn_loads())
        return 0;
    tap_diag("seed %llu", (unsigned long long)g_rng);

    static const shape_case cases[] = {
        {2, 256, 12, 12, 64}, /* GPT-2 124M's heads */
        {2, 128, 8, 2, 64},   /* grouped-query: 4 query heads per kv head */
        {1, 192, 4, 2, 128},  /* LLaMA's head width, grouped */
        {3, 77, 4, 1, 32},    /* T not a multiple of any tile, multi-query */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_shape(&cases[i]);
    merak_cudnn_attn_close();
    bail_if_failed("close");
    return tap_done();
}
