/*
 * test_cuda_kernels.c - TAP tests of the CUDA kernel table (kernels/cuda)
 * against the CPU table (kernels/cpu).
 *
 * Without a usable CUDA device (no driver, cudaGetDeviceCount fails or finds
 * none) the whole file is skipped: "1..0 # SKIP no CUDA device".
 *
 * With a device, every op of the table runs on the CPU table (host buffers)
 * and twice on the CUDA table (device buffers, same initial contents):
 *   - every output agrees with the CPU's: |gpu - cpu| <= RTOL*|cpu| + ATOL*max|cpu|;
 *   - the two CUDA runs are bitwise identical (determinism);
 *   - forward outputs start as NaN (they must be overwritten everywhere),
 *     gradients start random (they must be accumulated into, +=);
 *   - the CUDA run leaves its inputs untouched.
 * Shapes are small and odd on purpose (unaligned GEMM sizes and bias, fused
 * strided qkv, grouped-query attention with RoPE, head dims that do not
 * divide the block, T larger than a block).  Attention runs as the backend
 * chooses (fused forward and products backward for head dims up to FLASH_HD
 * = 64: 8, 16, 64; products for 96, 320), then with each way forced for
 * both directions.  The linear and attention cases run again with TF32
 * products (--dtype tf32) and with BF16's (--dtype bf16: attention by
 * cuDNN's fused kernels where the build has them, and by the products),
 * within their tolerances, and must differ from the float32 products somewhere; BF16's
 * product of bf16 values must not (beyond float32's tolerance).  round_bf16
 * must equal the CPU's bit for bit.  bf16 storage's entries (linear16,
 * embedding16, crossentropy16, the norms, the pointwise ops) are compared
 * with the CPU's within one bf16 rounding of what they write (attention16:
 * BF16's tolerance) (fp32's tolerance for the fp32 weight
 * gradients and statistics).  MERAK_TEST_SEED=<n> changes the random
 * values.
 */
#include "config.h"            /* HAVE_CUDNN_ATTN */
#include "cuda/cuda_kernels.h" /* merak_kernels_cuda, device memory helpers */
#ifdef HAVE_CUDNN_ATTN
#include "cuda/cudnn_attn.h" /* merak_cudnn_attn_loadable */
#endif
#include "kernels.h"           /* merak_kernels, merak_kernels_cpu */
#include "../unit/tap.h"
#include "test_mem.h"            /* xmalloc, dmalloc */
#include "mix64.h"
#include "bf16.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tolerances of the float32 products, of TF32's (the products' inputs
 * rounded to 10 bits of mantissa) and of BF16's (to 7; merak_cuda_set_
 * products).  A NumPy emulation of TF32 (inputs rounded to nearest, or
 * truncated; float64 sums) over this file's linear and attention shapes
 * reaches at most 0.35 of the TF32 tolerances; one of BF16 (every product's
 * operands rounded to nearest bf16, attention's probabilities and dS too)
 * at most 0.27 of the BF16 ones. */
#define RTOL 1e-4
#define ATOL 5e-5 /* times the largest |cpu| of the buffer */
#define RTOL_TF32 5e-3
#define ATOL_TF32 2e-3
#define RTOL_BF16 2e-2
#define ATOL_BF16 1e-2
static double g_rtol = RTOL, g_atol = ATOL;

/* ------------------------------------------------------------------ RNG */

static uint64_t g_rng = 0x5eed1234abcdULL;

static uint64_t rng_u64(void) { return merak_mix64(g_rng += MERAK_GOLDEN); }

static float rng_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * 0x1.0p-24);
}


/* ------------------------------------------------------------------ harness */

enum buf_kind {
    IN_F,    /* float input, random in [lo,hi] */
    IN_I,    /* int32 input, random in [lo,hi) */
    OUT_FWD, /* forward output: starts NaN, must be overwritten */
    OUT_ACC, /* gradient / state: starts random in [lo,hi], read-modify-write */
};

/* One buffer of a case.  Every element is 4 bytes (float or int32).  n == 0
 * means "absent" (the op gets NULL).  preset, when set, is the initial
 * content (owned by the caller). */
typedef struct buf {
    const char *name;
    int kind;
    size_t n;
    float lo, hi;
    const void *preset;
    /* filled by run_case */
    void *init, *cpu, *dev, *gpu[2];
} buf;

/* Runs the op with table K on the buffers p (host pointers for the CPU
 * table, device pointers for CUDA); may store a scalar result in *ret. */
typedef void (*op_fn)(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                      double *ret);

static const merak_kernels *g_cpu, *g_gpu;

static void fill_init(buf *b)
{
    b->init = xmalloc(b->n * 4);
    if (b->preset) {
        memcpy(b->init, b->preset, b->n * 4);
        return;
    }
    if (b->kind == OUT_FWD) {
        memset(b->init, 0xff, b->n * 4); /* NaN */
    } else if (b->kind == IN_I) {
        int32_t *x = b->init;
        const int lo = (int)b->lo, span = (int)b->hi - (int)b->lo;
        for (size_t i = 0; i < b->n; i++)
            x[i] = lo + (int)(rng_u64() % (uint64_t)span);
    } else {
        float *x = b->init;
        for (size_t i = 0; i < b->n; i++)
            x[i] = rng_uniform(b->lo, b->hi);
    }
}

/* max |a-c| over the allowed error, > 1 fails; NaN anywhere fails. */
static double compare(const float *g, const float *c, size_t n, size_t *worst)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)c[i]) > m)
            m = fabs((double)c[i]);
    double r = 0.0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double allowed = g_rtol * fabs((double)c[i]) + g_atol * m + 1e-30;
        const double e = fabs((double)g[i] - (double)c[i]) / allowed;
        if (!(e <= r)) { /* also catches NaN */
            r = isnan(e) ? INFINITY : e;
            *worst = i;
            if (isinf(r))
                break;
        }
    }
    return r;
}

/* flags */
#define EXACT 1   /* outputs must equal the CPU's bit for bit */
#define HAS_RET 2 /* the op returns a scalar (sumsq) */

static void run_case(const char *name, buf *bufs, int nb, op_fn fn, const void *arg,
                     int flags)
{
    void *cp[16], *dp[16];
    double ret_cpu = 0.0, ret_gpu[2] = {0.0, 0.0};
    char err[256];

    for (int i = 0; i < nb; i++) {
        buf *b = &bufs[i];
        b->init = b->cpu = b->dev = b->gpu[0] = b->gpu[1] = NULL;
        if (!b->n) {
            cp[i] = dp[i] = NULL;
            continue;
        }
        fill_init(b);
        b->cpu = xmalloc(b->n * 4);
        memcpy(b->cpu, b->init, b->n * 4);
        b->dev = dmalloc(b->n * 4);
        b->gpu[0] = xmalloc(b->n * 4);
        b->gpu[1] = xmalloc(b->n * 4);
        cp[i] = b->cpu;
        dp[i] = b->dev;
    }

    fn(g_cpu, 0, cp, arg, &ret_cpu);

    int inputs_ok = 1;
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < nb; i++)
            if (bufs[i].n && merak_cuda_memcpy_h2d(bufs[i].dev, bufs[i].init, bufs[i].n * 4))
                break;
        fn(g_gpu, 1, dp, arg, &ret_gpu[rep]);
        merak_cuda_synchronize();
        for (int i = 0; i < nb; i++)
            if (bufs[i].n)
                merak_cuda_memcpy_d2h(bufs[i].gpu[rep], bufs[i].dev, bufs[i].n * 4);
        for (int i = 0; i < nb; i++)
            if (bufs[i].n && (bufs[i].kind == IN_F || bufs[i].kind == IN_I) &&
                memcmp(bufs[i].gpu[rep], bufs[i].init, bufs[i].n * 4))
                inputs_ok = 0;
    }
    if (merak_cuda_status(err, sizeof err)) {
        tap_ok(0, "%s: CUDA error: %s", name, err);
        printf("Bail out! the CUDA backend is in an error state\n");
        exit(1);
    }
    tap_ok(inputs_ok, "%s: inputs untouched", name);

    for (int i = 0; i < nb; i++) {
        buf *b = &bufs[i];
        if (!b->n || b->kind == IN_F || b->kind == IN_I)
            continue;
        if (flags & EXACT) {
            tap_ok(!memcmp(b->gpu[0], b->cpu, b->n * 4), "%s: %s bitwise equal to cpu", name,
                b->name);
        } else {
            size_t w;
            const double r = compare(b->gpu[0], b->cpu, b->n, &w);
            if (!tap_ok(r <= 1.0, "%s: %s matches cpu (err/tol %.3g)", name, b->name, r))
                tap_diag("%s[%zu]: cuda %.9g cpu %.9g", b->name, w,
                     (double)((float *)b->gpu[0])[w], (double)((float *)b->cpu)[w]);
        }
        tap_ok(!memcmp(b->gpu[0], b->gpu[1], b->n * 4), "%s: %s bitwise reproducible", name,
            b->name);
    }
    if (flags & HAS_RET) {
        const double tol = 1e-12 * fabs(ret_cpu) + 1e-300;
        if (!tap_ok(fabs(ret_gpu[0] - ret_cpu) <= tol, "%s: result matches cpu", name))
            tap_diag("cuda %.17g cpu %.17g", ret_gpu[0], ret_cpu);
        tap_ok(!memcmp(&ret_gpu[0], &ret_gpu[1], sizeof(double)), "%s: result bitwise reproducible",
            name);
    }

    for (int i = 0; i < nb; i++) {
        free(bufs[i].init);
        free(bufs[i].cpu);
        free(bufs[i].gpu[0]);
        free(bufs[i].gpu[1]);
        merak_cuda_free(bufs[i].dev);
    }
}

#define F(p) ((float *)(p))
#define I(p) ((int32_t *)(p))
#define NB(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------ embedding, posemb */

typedef struct {
    int N, C, V, v0; /* wte holds rows v0..v0+V-1 of the vocabulary */
} emb_arg;

static void op_embedding_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                             double *ret)
{
    const emb_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->embedding_fwd(F(p[0]), I(p[1]), F(p[2]), a->N, a->C, a->v0, a->V);
}

static void op_embedding_bwd_w(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                               double *ret)
{
    const emb_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->embedding_bwd_w(F(p[0]), F(p[1]), I(p[2]), a->N, a->C, a->v0, a->V);
}

/* A shard of the vocabulary starting at v0: ids are drawn from [0, V + 2*v0)
 * so some fall before and some after the shard. */
static void test_embedding(int N, int C, int V, int v0)
{
    const emb_arg a = {N, C, V, v0};
    char name[96];
    buf fwd[] = {
        {.name = "out", .kind = OUT_FWD, .n = (size_t)N * C},
        {.name = "ids", .kind = IN_I, .n = (size_t)N, .lo = 0, .hi = (float)(V + 2 * v0)},
        {.name = "wte", .kind = IN_F, .n = (size_t)V * C, .lo = -1, .hi = 1},
    };
    snprintf(name, sizeof name, "embedding_fwd N=%d C=%d V=%d v0=%d", N, C, V, v0);
    run_case(name, fwd, NB(fwd), op_embedding_fwd, &a, EXACT);
    buf bwd[] = {
        {.name = "dwte", .kind = OUT_ACC, .n = (size_t)V * C, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "ids", .kind = IN_I, .n = (size_t)N, .lo = 0, .hi = (float)(V + 2 * v0)},
    };
    snprintf(name, sizeof name, "embedding_bwd_w N=%d C=%d V=%d v0=%d", N, C, V, v0);
    run_case(name, bwd, NB(bwd), op_embedding_bwd_w, &a, 0);
}

typedef struct {
    int B, T, C;
} pos_arg;

static void op_posemb_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                          double *ret)
{
    const pos_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->posemb_fwd(F(p[0]), F(p[1]), F(p[2]), a->B, a->T, a->C);
}

static void op_posemb_bwd_w(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                            double *ret)
{
    const pos_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->posemb_bwd_w(F(p[0]), F(p[1]), a->B, a->T, a->C);
}

static void test_posemb(int B, int T, int C, int P)
{
    const pos_arg a = {B, T, C};
    buf fwd[] = {
        {.name = "out", .kind = OUT_FWD, .n = (size_t)B * T * C},
        {.name = "inp", .kind = IN_F, .n = (size_t)B * T * C, .lo = -1, .hi = 1},
        {.name = "wpe", .kind = IN_F, .n = (size_t)P * C, .lo = -1, .hi = 1},
    };
    run_case("posemb_fwd", fwd, NB(fwd), op_posemb_fwd, &a, EXACT);
    buf bwd[] = {
        {.name = "dwpe", .kind = OUT_ACC, .n = (size_t)P * C, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)B * T * C, .lo = -1, .hi = 1},
    };
    run_case("posemb_bwd_w", bwd, NB(bwd), op_posemb_bwd_w, &a, 0);
}

/* ------------------------------------------------------------------ layernorm, rmsnorm */

typedef struct {
    int N, C;
    float eps;
    int acc;   /* bwd_x's acc */
} norm_arg;

static void op_layernorm_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                             double *ret)
{
    const norm_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->layernorm_fwd(F(p[0]), F(p[1]), F(p[2]), F(p[3]), F(p[4]), F(p[5]), a->N, a->C,
                     a->eps);
}

static void op_layernorm_bwd_x(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                               double *ret)
{
    const norm_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->layernorm_bwd_x(F(p[0]), F(p[1]), F(p[2]), F(p[3]), F(p[4]), F(p[5]), a->N, a->C, a->acc);
}

static void op_layernorm_bwd_w(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                               double *ret)
{
    const norm_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->layernorm_bwd_w(F(p[0]), F(p[1]), F(p[2]), F(p[3]), F(p[4]), F(p[5]), a->N, a->C);
}

static float *rand_array(size_t n, float lo, float hi)
{
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform(lo, hi);
    return x;
}

static void test_layernorm(int N, int C, int with_bias)
{
    const norm_arg a = {N, C, 1e-5f, 1}, a0 = {N, C, 1e-5f, 0};
    char name[96];
    float *inp = rand_array((size_t)N * C, -2.0f, 3.0f); /* non-zero mean */
    float *w = rand_array((size_t)C, 0.5f, 1.5f);
    float *out = xmalloc((size_t)N * C * sizeof(float));
    float *mean = xmalloc((size_t)N * sizeof(float)), *rstd = xmalloc((size_t)N * sizeof(float));
    g_cpu->layernorm_fwd(out, mean, rstd, inp, w, NULL, N, C, a.eps);

    buf fwd[] = {
        {.name = "out", .kind = OUT_FWD, .n = (size_t)N * C},
        {.name = "mean", .kind = OUT_FWD, .n = (size_t)N},
        {.name = "rstd", .kind = OUT_FWD, .n = (size_t)N},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * C, .preset = inp},
        {.name = "w", .kind = IN_F, .n = (size_t)C, .preset = w},
        {.name = "b", .kind = IN_F, .n = with_bias ? (size_t)C : 0, .lo = -1, .hi = 1},
    };
    snprintf(name, sizeof name, "layernorm_fwd N=%d C=%d%s", N, C, with_bias ? "" : " no bias");
    run_case(name, fwd, NB(fwd), op_layernorm_fwd, &a, 0);

    buf bx[] = {
        {.name = "dinp", .kind = OUT_ACC, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * C, .preset = inp},
        {.name = "w", .kind = IN_F, .n = (size_t)C, .preset = w},
        {.name = "mean", .kind = IN_F, .n = (size_t)N, .preset = mean},
        {.name = "rstd", .kind = IN_F, .n = (size_t)N, .preset = rstd},
    };
    snprintf(name, sizeof name, "layernorm_bwd_x N=%d C=%d", N, C);
    run_case(name, bx, NB(bx), op_layernorm_bwd_x, &a, 0);
    bx[0].kind = OUT_FWD;   /* acc 0: dinp starts NaN and is written, unread */
    snprintf(name, sizeof name, "layernorm_bwd_x acc=0 N=%d C=%d", N, C);
    run_case(name, bx, NB(bx), op_layernorm_bwd_x, &a0, 0);

    buf bw[] = {
        {.name = "dw", .kind = OUT_ACC, .n = (size_t)C, .lo = -1, .hi = 1},
        {.name = "db", .kind = OUT_ACC, .n = with_bias ? (size_t)C : 0, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * C, .preset = inp},
        {.name = "mean", .kind = IN_F, .n = (size_t)N, .preset = mean},
        {.name = "rstd", .kind = IN_F, .n = (size_t)N, .preset = rstd},
    };
    snprintf(name, sizeof name, "layernorm_bwd_w N=%d C=%d%s", N, C,
             with_bias ? "" : " db=NULL");
    run_case(name, bw, NB(bw), op_layernorm_bwd_w, &a, 0);
    free(inp), free(w), free(out), free(mean), free(rstd);
}

static void op_rmsnorm_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                           double *ret)
{
    const norm_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->rmsnorm_fwd(F(p[0]), F(p[1]), F(p[2]), F(p[3]), a->N, a->C, a->eps);
}

static void op_rmsnorm_bwd_x(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                             double *ret)
{
    const norm_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->rmsnorm_bwd_x(F(p[0]), F(p[1]), F(p[2]), F(p[3]), F(p[4]), a->N, a->C, a->acc);
}

static void op_rmsnorm_bwd_w(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                             double *ret)
{
    const norm_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->rmsnorm_bwd_w(F(p[0]), F(p[1]), F(p[2]), F(p[3]), a->N, a->C);
}

static void test_rmsnorm(int N, int C)
{
    const norm_arg a = {N, C, 1e-6f, 1}, a0 = {N, C, 1e-6f, 0};
    char name[96];
    float *inp = rand_array((size_t)N * C, -2.0f, 2.0f);
    float *w = rand_array((size_t)C, 0.5f, 1.5f);
    float *out = xmalloc((size_t)N * C * sizeof(float)), *rstd = xmalloc((size_t)N * sizeof(float));
    g_cpu->rmsnorm_fwd(out, rstd, inp, w, N, C, a.eps);

    buf fwd[] = {
        {.name = "out", .kind = OUT_FWD, .n = (size_t)N * C},
        {.name = "rstd", .kind = OUT_FWD, .n = (size_t)N},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * C, .preset = inp},
        {.name = "w", .kind = IN_F, .n = (size_t)C, .preset = w},
    };
    snprintf(name, sizeof name, "rmsnorm_fwd N=%d C=%d", N, C);
    run_case(name, fwd, NB(fwd), op_rmsnorm_fwd, &a, 0);
    buf bx[] = {
        {.name = "dinp", .kind = OUT_ACC, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * C, .preset = inp},
        {.name = "w", .kind = IN_F, .n = (size_t)C, .preset = w},
        {.name = "rstd", .kind = IN_F, .n = (size_t)N, .preset = rstd},
    };
    snprintf(name, sizeof name, "rmsnorm_bwd_x N=%d C=%d", N, C);
    run_case(name, bx, NB(bx), op_rmsnorm_bwd_x, &a, 0);
    bx[0].kind = OUT_FWD;
    snprintf(name, sizeof name, "rmsnorm_bwd_x acc=0 N=%d C=%d", N, C);
    run_case(name, bx, NB(bx), op_rmsnorm_bwd_x, &a0, 0);
    buf bw[] = {
        {.name = "dw", .kind = OUT_ACC, .n = (size_t)C, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * C, .lo = -1, .hi = 1},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * C, .preset = inp},
        {.name = "rstd", .kind = IN_F, .n = (size_t)N, .preset = rstd},
    };
    snprintf(name, sizeof name, "rmsnorm_bwd_w N=%d C=%d", N, C);
    run_case(name, bw, NB(bw), op_rmsnorm_bwd_w, &a, 0);
    free(inp), free(w), free(out), free(rstd);
}

/* ------------------------------------------------------------------ linear */

typedef struct {
    int N, K, O;
    int bias;     /* 0: NULL bias / db */
    int bias_off; /* elements: 1 gives a bias pointer that is only 4-byte aligned */
    int acc;      /* linear_bwd_x's acc */
} lin_arg;

static void op_linear_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                          double *ret)
{
    const lin_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->linear_fwd(F(p[0]), F(p[1]), F(p[2]), a->bias ? F(p[3]) + a->bias_off : NULL, a->N,
                  a->K, a->O);
}

static void op_linear_bwd_x(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                            double *ret)
{
    const lin_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->linear_bwd_x(F(p[0]), F(p[1]), F(p[2]), a->N, a->K, a->O, a->acc);
}

static void op_linear_bwd_w(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                            double *ret)
{
    const lin_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->linear_bwd_w(F(p[0]), a->bias ? F(p[1]) + a->bias_off : NULL, F(p[2]), F(p[3]), a->N,
                    a->K, a->O);
}

static void test_linear(const char *pre, int N, int K, int O, int bias, int bias_off)
{
    const lin_arg a = {N, K, O, bias, bias_off, 1}, a0 = {N, K, O, bias, bias_off, 0};
    char name[128];
    const char *tag = !bias ? " no bias" : bias_off ? " unaligned bias" : "";
    buf fwd[] = {
        {.name = "out", .kind = OUT_FWD, .n = (size_t)N * O},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * K, .lo = -1, .hi = 1},
        {.name = "w", .kind = IN_F, .n = (size_t)O * K, .lo = -1, .hi = 1},
        {.name = "b", .kind = IN_F, .n = bias ? (size_t)O + 1 : 0, .lo = -1, .hi = 1},
    };
    snprintf(name, sizeof name, "%slinear_fwd N=%d K=%d O=%d%s", pre, N, K, O, tag);
    run_case(name, fwd, NB(fwd), op_linear_fwd, &a, 0);
    buf bx[] = {
        {.name = "dinp", .kind = OUT_ACC, .n = (size_t)N * K, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * O, .lo = -1, .hi = 1},
        {.name = "w", .kind = IN_F, .n = (size_t)O * K, .lo = -1, .hi = 1},
    };
    snprintf(name, sizeof name, "%slinear_bwd_x N=%d K=%d O=%d", pre, N, K, O);
    run_case(name, bx, NB(bx), op_linear_bwd_x, &a, 0);
    bx[0].kind = OUT_FWD;   /* acc 0: dinp starts NaN and is written, unread */
    snprintf(name, sizeof name, "%slinear_bwd_x acc=0 N=%d K=%d O=%d", pre, N, K, O);
    run_case(name, bx, NB(bx), op_linear_bwd_x, &a0, 0);
    buf bw[] = {
        {.name = "dw", .kind = OUT_ACC, .n = (size_t)O * K, .lo = -1, .hi = 1},
        {.name = "db", .kind = OUT_ACC, .n = bias ? (size_t)O + 1 : 0, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = (size_t)N * O, .lo = -1, .hi = 1},
        {.name = "inp", .kind = IN_F, .n = (size_t)N * K, .lo = -1, .hi = 1},
    };
    snprintf(name, sizeof name, "%slinear_bwd_w N=%d K=%d O=%d%s", pre, N, K, O, tag);
    run_case(name, bw, NB(bw), op_linear_bwd_w, &a, 0);
}

/* ------------------------------------------------------------------ attention */

typedef struct {
    merak_attn_shape s;
    int fused; /* q, k, v (and dq, dk, dv) are column ranges of one qkv buffer */
    int acc;   /* attention_bwd's acc */
} attn_arg;

/* q, k, v pointers from the buffers (q0 holds the whole qkv when fused) */
static void attn_split(const attn_arg *a, float *q0, float *k0, float *v0, float **q,
                       float **k, float **v)
{
    const int hd = a->s.head_dim;
    if (a->fused) {
        *q = q0;
        *k = q0 + (size_t)a->s.n_head * hd;
        *v = q0 + (size_t)(a->s.n_head + a->s.n_kv_head) * hd;
    } else {
        *q = q0, *k = k0, *v = v0;
    }
}

/* The attention kernels' scratch, on the side the call runs. */
static float *attn_scratch(const merak_kernels *K, int on_gpu, const attn_arg *a)
{
    const size_t ns = K->attention_scratch_elems(&a->s) * sizeof(float);
    return on_gpu ? dmalloc(ns) : xmalloc(ns);
}

static void attn_scratch_free(int on_gpu, float *scratch)
{
    if (on_gpu) {
        merak_cuda_synchronize(); /* the kernels use scratch until they finish */
        merak_cuda_free(scratch);
    } else
        free(scratch);
}

/* buffers: out, lse, qr, kr, q(kv), k, v */
static void op_attention_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                             double *ret)
{
    const attn_arg *a = arg;
    float *q, *k, *v;
    (void)ret;
    attn_split(a, F(p[4]), F(p[5]), F(p[6]), &q, &k, &v);
    float *scratch = attn_scratch(K, on_gpu, a);
    K->attention_fwd(&a->s, F(p[0]), F(p[1]), F(p[2]), F(p[3]), q, k, v, scratch);
    attn_scratch_free(on_gpu, scratch);
}

/* buffers: dq(kv), dk, dv, dout, out, lse, qr, kr, q(kv), k, v */
static void op_attention_bwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                             double *ret)
{
    const attn_arg *a = arg;
    float *q, *k, *v, *dq, *dk, *dv;
    (void)ret;
    attn_split(a, F(p[8]), F(p[9]), F(p[10]), &q, &k, &v);
    attn_split(a, F(p[0]), F(p[1]), F(p[2]), &dq, &dk, &dv);
    float *scratch = attn_scratch(K, on_gpu, a);
    K->attention_bwd(&a->s, dq, dk, dv, F(p[3]), F(p[4]), F(p[5]), F(p[6]), F(p[7]), q, k, v, scratch, a->acc);
    attn_scratch_free(on_gpu, scratch);
}

/* Decoding: the T new positions [pos, pos+T) against caches whose first
 * pos rows hold random keys and values. */
typedef struct {
    attn_arg a;
    int pos, cap;
} cached_arg;

/* buffers: out, kc, vc, q(kv), k, v */
static void op_attention_cached_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                                    double *ret)
{
    const cached_arg *c = arg;
    float *q, *k, *v;
    (void)ret;
    attn_split(&c->a, F(p[3]), F(p[4]), F(p[5]), &q, &k, &v);
    const size_t ns = K->attention_cached_scratch_elems(&c->a.s, c->cap) * sizeof(float);
    float *scratch = on_gpu ? dmalloc(ns) : xmalloc(ns);
    K->attention_cached_fwd(&c->a.s, c->pos, c->cap, F(p[0]), F(p[1]), F(p[2]), q, k, v, scratch);
    if (on_gpu) {
        merak_cuda_synchronize();
        merak_cuda_free(scratch);
    } else
        free(scratch);
}

#define ROPE(th) ((merak_rope){.theta = (th)})
/* LLaMA 3.1's scaling over an original context of 64: with hd 64 every
 * band (kept, blended, divided) holds some of the frequencies */
#define LLAMA3_ROPE                                                                                   \
    ((merak_rope){.theta = 10000.0f, .type = MERAK_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 1.0f, \
                  .high_freq_factor = 4.0f, .original_max_positions = 64})

static void test_attention_cached(const char *tag, int B, int T, int pos, int nh, int nkv, int hd,
                                  merak_rope rope, int fused)
{
    cached_arg c;
    char name[160];
    memset(&c, 0, sizeof c);
    c.a.s.B = B, c.a.s.T = T, c.a.s.n_head = nh, c.a.s.n_kv_head = nkv, c.a.s.head_dim = hd;
    c.a.s.rope = rope;
    c.a.fused = fused;
    c.pos = pos, c.cap = pos + T + 3;
    const size_t BT = (size_t)B * T, C = (size_t)nh * hd, Ckv = (size_t)nkv * hd;
    size_t nq, nk;
    if (fused) {
        c.a.s.q_stride = c.a.s.k_stride = c.a.s.v_stride = (int)(C + 2 * Ckv);
        nq = BT * (C + 2 * Ckv), nk = 0;
    } else {
        c.a.s.q_stride = (int)C, c.a.s.k_stride = c.a.s.v_stride = (int)Ckv;
        nq = BT * C, nk = BT * Ckv;
    }
    const size_t ncache = (size_t)B * c.cap * Ckv;
    buf bufs[] = {
        {.name = "out", .kind = OUT_FWD, .n = BT * C},
        {.name = "kc", .kind = OUT_ACC, .n = ncache, .lo = -1, .hi = 1},
        {.name = "vc", .kind = OUT_ACC, .n = ncache, .lo = -1, .hi = 1},
        {.name = fused ? "qkv" : "q", .kind = IN_F, .n = nq, .lo = -1, .hi = 1},
        {.name = "k", .kind = IN_F, .n = nk, .lo = -1, .hi = 1},
        {.name = "v", .kind = IN_F, .n = nk, .lo = -1, .hi = 1},
    };
    snprintf(name, sizeof name, "attention_cached_fwd %s B=%d T=%d pos=%d nh=%d nkv=%d hd=%d rope=%g %s",
             tag, B, T, pos, nh, nkv, hd, (double)rope.theta, fused ? "fused qkv" : "separate q,k,v");
    run_case(name, bufs, NB(bufs), op_attention_cached_fwd, &c, 0);
}

static void test_attention(const char *tag, int B, int T, int nh, int nkv, int hd, merak_rope rope,
                           int fused)
{
    attn_arg a;
    char name[160];
    memset(&a, 0, sizeof a);
    a.s.B = B, a.s.T = T, a.s.n_head = nh, a.s.n_kv_head = nkv, a.s.head_dim = hd;
    a.s.rope = rope;
    a.fused = fused;
    a.acc = 1;
    const size_t BT = (size_t)B * T, C = (size_t)nh * hd, Ckv = (size_t)nkv * hd;
    size_t nq, nk;
    if (fused) {
        a.s.q_stride = a.s.k_stride = a.s.v_stride = (int)(C + 2 * Ckv);
        nq = BT * (C + 2 * Ckv), nk = 0;
    } else {
        a.s.q_stride = (int)C, a.s.k_stride = a.s.v_stride = (int)Ckv;
        nq = BT * C, nk = BT * Ckv;
    }
    const int rotary = rope.theta > 0.0f;

    /* inputs, and the CPU forward whose saved tensors feed both backwards */
    float *q0 = rand_array(nq, -1, 1), *k0 = nk ? rand_array(nk, -1, 1) : NULL;
    float *v0 = nk ? rand_array(nk, -1, 1) : NULL;
    float *out = xmalloc(BT * C * sizeof(float));
    float *lse = xmalloc((size_t)B * nh * T * sizeof(float));
    float *qr = rotary ? xmalloc(BT * C * sizeof(float)) : NULL;
    float *kr = rotary ? xmalloc(BT * Ckv * sizeof(float)) : NULL;
    float *q, *k, *v;
    attn_split(&a, q0, k0, v0, &q, &k, &v);
    float *scratch = attn_scratch(g_cpu, 0, &a);
    g_cpu->attention_fwd(&a.s, out, lse, qr, kr, q, k, v, scratch);
    free(scratch);

    const char *kind = fused ? "fused qkv" : "separate q,k,v";
    buf fwd[] = {
        {.name = "out", .kind = OUT_FWD, .n = BT * C},
        {.name = "lse", .kind = OUT_FWD, .n = (size_t)B * nh * T},
        {.name = "qr", .kind = OUT_FWD, .n = rotary ? BT * C : 0},
        {.name = "kr", .kind = OUT_FWD, .n = rotary ? BT * Ckv : 0},
        {.name = fused ? "qkv" : "q", .kind = IN_F, .n = nq, .preset = q0},
        {.name = "k", .kind = IN_F, .n = nk, .preset = k0},
        {.name = "v", .kind = IN_F, .n = nk, .preset = v0},
    };
    snprintf(name, sizeof name, "attention_fwd %s B=%d T=%d nh=%d nkv=%d hd=%d rope=%g %s", tag,
             B, T, nh, nkv, hd, (double)rope.theta, kind);
    run_case(name, fwd, NB(fwd), op_attention_fwd, &a, 0);

    buf bwd[] = {
        {.name = fused ? "dqkv" : "dq", .kind = OUT_ACC, .n = nq, .lo = -1, .hi = 1},
        {.name = "dk", .kind = OUT_ACC, .n = nk, .lo = -1, .hi = 1},
        {.name = "dv", .kind = OUT_ACC, .n = nk, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = BT * C, .lo = -1, .hi = 1},
        {.name = "out", .kind = IN_F, .n = BT * C, .preset = out},
        {.name = "lse", .kind = IN_F, .n = (size_t)B * nh * T, .preset = lse},
        {.name = "qr", .kind = IN_F, .n = rotary ? BT * C : 0, .preset = qr},
        {.name = "kr", .kind = IN_F, .n = rotary ? BT * Ckv : 0, .preset = kr},
        {.name = fused ? "qkv" : "q", .kind = IN_F, .n = nq, .preset = q0},
        {.name = "k", .kind = IN_F, .n = nk, .preset = k0},
        {.name = "v", .kind = IN_F, .n = nk, .preset = v0},
    };
    snprintf(name, sizeof name, "attention_bwd %s B=%d T=%d nh=%d nkv=%d hd=%d rope=%g %s", tag,
             B, T, nh, nkv, hd, (double)rope.theta, kind);
    run_case(name, bwd, NB(bwd), op_attention_bwd, &a, 0);
    attn_arg a0 = a;   /* acc 0: the gradients start NaN and are written, unread */
    a0.acc = 0;
    bwd[0].kind = bwd[1].kind = bwd[2].kind = OUT_FWD;
    snprintf(name, sizeof name, "attention_bwd acc=0 %s B=%d T=%d nh=%d nkv=%d hd=%d rope=%g %s", tag,
             B, T, nh, nkv, hd, (double)rope.theta, kind);
    run_case(name, bwd, NB(bwd), op_attention_bwd, &a0, 0);
    free(q0), free(k0), free(v0), free(out), free(lse), free(qr), free(kr);
}

/* ------------------------------------------------------------------ pointwise */

typedef struct {
    size_t n;
    float p, s;
    uint64_t seed, i0;  /* dropout: the mask's first element */
    int null_first; /* swiglu_bwd: dgate NULL */
    int acc;        /* gelu_bwd, swiglu_bwd: acc */
} pw_arg;

static void op_gelu_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                        double *ret)
{
    (void)on_gpu, (void)ret;
    K->gelu_fwd(F(p[0]), F(p[1]), ((const pw_arg *)arg)->n);
}

static void op_gelu_bwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                        double *ret)
{
    (void)on_gpu, (void)ret;
    K->gelu_bwd(F(p[0]), F(p[1]), F(p[2]), ((const pw_arg *)arg)->n, ((const pw_arg *)arg)->acc);
}

static void op_swiglu_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                          double *ret)
{
    (void)on_gpu, (void)ret;
    K->swiglu_fwd(F(p[0]), F(p[1]), F(p[2]), ((const pw_arg *)arg)->n);
}

static void op_swiglu_bwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                          double *ret)
{
    const pw_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->swiglu_bwd(F(p[0]), F(p[1]), F(p[2]), F(p[3]), F(p[4]), a->n, a->acc);
}

static void op_add_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                       double *ret)
{
    (void)on_gpu, (void)ret;
    K->add_fwd(F(p[0]), F(p[1]), F(p[2]), ((const pw_arg *)arg)->n);
}

static void op_accumulate(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                          double *ret)
{
    (void)on_gpu, (void)ret;
    K->accumulate(F(p[0]), F(p[1]), ((const pw_arg *)arg)->n);
}

static void op_scale(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                     double *ret)
{
    const pw_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->scale(F(p[0]), a->n, a->s);
}

static void op_dropout_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                           double *ret)
{
    const pw_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->dropout_fwd(F(p[0]), F(p[1]), a->n, a->p, a->seed, a->i0);
}

static void op_dropout_bwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                           double *ret)
{
    const pw_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->dropout_bwd(F(p[0]), F(p[1]), a->n, a->p, a->seed, a->i0, a->acc);
}

static void op_sumsq(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                     double *ret)
{
    (void)on_gpu;
    *ret = K->sumsq(F(p[0]), ((const pw_arg *)arg)->n);
}

static void test_pointwise(size_t n)
{
    pw_arg a = {.n = n, .p = 0.0f, .s = -0.37f, .seed = 0, .acc = 1}, a0 = a;
    a0.acc = 0;
    char name[96];

    buf gf[] = {
        {.name = "out", .kind = OUT_FWD, .n = n},
        {.name = "inp", .kind = IN_F, .n = n, .lo = -6, .hi = 6},
    };
    run_case("gelu_fwd", gf, NB(gf), op_gelu_fwd, &a, 0);
    buf gb[] = {
        {.name = "dinp", .kind = OUT_ACC, .n = n, .lo = -1, .hi = 1},
        {.name = "dout", .kind = IN_F, .n = n, .lo = -1, .hi = 1},
        {.name = "inp", .kind = IN_F, .n = n, .lo = -6, .hi = 6},
    };
    run_case("gelu_bwd", gb, NB(gb), op_gelu_bwd, &a, 0);
    gb[0].kind = OUT_FWD;   /* acc 0: dinp starts NaN and is written, unread */
    run_case("gelu_bwd acc=0", gb, NB(gb), op_gelu_bwd, &a0, 0);

    buf sf[] = {
        {.name = "out", .kind = OUT_FWD, .n = n},
        {.name = "gate", .kind = IN_F, .n = n, .lo = -8, .hi = 8},
        {.name = "up", .kind = IN_F, .n = n, .lo = -2, .hi = 2},
    };
    run_case("swiglu_fwd", sf, NB(sf), op_swiglu_fwd, &a, 0);
    for (int variant = 0; variant < 2; variant++) {
        buf sb[] = {
            {.name = "dgate", .kind = OUT_ACC, .n = variant ? 0 : n, .lo = -1, .hi = 1},
            {.name = "dup", .kind = OUT_ACC, .n = n, .lo = -1, .hi = 1},
            {.name = "dout", .kind = IN_F, .n = n, .lo = -1, .hi = 1},
            {.name = "gate", .kind = IN_F, .n = n, .lo = -8, .hi = 8},
            {.name = "up", .kind = IN_F, .n = n, .lo = -2, .hi = 2},
        };
        run_case(variant ? "swiglu_bwd dgate=NULL" : "swiglu_bwd", sb, NB(sb), op_swiglu_bwd,
                 &a, 0);
        sb[0].kind = sb[1].kind = OUT_FWD;
        run_case(variant ? "swiglu_bwd acc=0 dgate=NULL" : "swiglu_bwd acc=0", sb, NB(sb), op_swiglu_bwd,
                 &a0, 0);
    }

    buf af[] = {
        {.name = "out", .kind = OUT_FWD, .n = n},
        {.name = "a", .kind = IN_F, .n = n, .lo = -1, .hi = 1},
        {.name = "b", .kind = IN_F, .n = n, .lo = -1, .hi = 1},
    };
    run_case("add_fwd", af, NB(af), op_add_fwd, &a, EXACT);
    buf ac[] = {
        {.name = "dst", .kind = OUT_ACC, .n = n, .lo = -1, .hi = 1},
        {.name = "src", .kind = IN_F, .n = n, .lo = -1, .hi = 1},
    };
    run_case("accumulate", ac, NB(ac), op_accumulate, &a, EXACT);
    buf sc[] = {{.name = "x", .kind = OUT_ACC, .n = n, .lo = -1, .hi = 1}};
    run_case("scale", sc, NB(sc), op_scale, &a, EXACT);

    /* the mask must be the CPU's bit for bit: the forward is exact */
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
    for (int i = 0; i < NB(ps); i++) {
        a.p = ps[i];
        a.seed = 0x1234567ULL * (uint64_t)(i + 1);
        a.i0 = (uint64_t)i * 1000003;   /* a piece of a larger tensor from p = 0.1 on */
        buf df[] = {
            {.name = "out", .kind = OUT_FWD, .n = n},
            {.name = "inp", .kind = IN_F, .n = n, .lo = 0.5f, .hi = 1.5f},
        };
        snprintf(name, sizeof name, "dropout_fwd p=%g i0=%llu", (double)a.p, (unsigned long long)a.i0);
        run_case(name, df, NB(df), op_dropout_fwd, &a, EXACT);
        buf db[] = {
            {.name = "dinp", .kind = OUT_ACC, .n = n, .lo = -1, .hi = 1},
            {.name = "dout", .kind = IN_F, .n = n, .lo = 0.5f, .hi = 1.5f},
        };
        snprintf(name, sizeof name, "dropout_bwd p=%g i0=%llu", (double)a.p, (unsigned long long)a.i0);
        run_case(name, db, NB(db), op_dropout_bwd, &a, 0);
        pw_arg d0 = a;   /* acc 0: dinp starts NaN, written (0 where dropped), unread */
        d0.acc = 0;
        db[0].kind = OUT_FWD;
        snprintf(name, sizeof name, "dropout_bwd acc=0 p=%g i0=%llu", (double)a.p, (unsigned long long)a.i0);
        run_case(name, db, NB(db), op_dropout_bwd, &d0, 0);
    }

    const size_t ns[] = {0, 1, 1000, n, 3 * n + 17};
    for (int i = 0; i < NB(ns); i++) {
        pw_arg b = {.n = ns[i]};
        buf sq[] = {{.name = "x", .kind = IN_F, .n = ns[i], .lo = -3, .hi = 3}};
        snprintf(name, sizeof name, "sumsq n=%zu", ns[i]);
        run_case(name, sq, NB(sq), op_sumsq, &b, HAS_RET);
    }
}

/* ------------------------------------------------------------------ cross-entropy */

typedef struct {
    int N, V, v0;
    float scale;
} ce_arg;

static void op_ce_fwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                      double *ret)
{
    const ce_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->crossentropy_stats(F(p[0]), F(p[1]), F(p[2]), I(p[3]), a->N, a->V, a->v0);
}

static void op_ce_bwd(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                      double *ret)
{
    const ce_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->crossentropy_bwd(F(p[0]), F(p[1]), F(p[2]), I(p[3]), a->N, a->V, a->v0, a->scale);
}

/* In place, as the executor runs it: the gradient replaces the logits. */
static void op_ce_bwd_in_place(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                               double *ret)
{
    const ce_arg *a = arg;
    (void)on_gpu, (void)ret;
    K->crossentropy_bwd(F(p[0]), F(p[0]), F(p[1]), I(p[2]), a->N, a->V, a->v0, a->scale);
}

/* Logits of a vocabulary shard starting at v0; targets from [0, V + v0), so
 * some rows' targets lie outside the shard. */
static void test_crossentropy(int N, int V, int v0)
{
    const ce_arg a = {N, V, v0, 1.0f / (float)N};
    char name[96];
    int32_t *tg = xmalloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)(rng_u64() % (uint64_t)(V + v0));
    tg[N / 2] = -100; /* ignore_index: loss 0, no gradient */
    buf fwd[] = {
        {.name = "lse", .kind = OUT_FWD, .n = (size_t)N},
        {.name = "tlogit", .kind = OUT_FWD, .n = (size_t)N},
        {.name = "logits", .kind = IN_F, .n = (size_t)N * V, .lo = -8, .hi = 8},
        {.name = "targets", .kind = IN_I, .n = (size_t)N, .preset = tg},
    };
    snprintf(name, sizeof name, "crossentropy_stats N=%d V=%d v0=%d", N, V, v0);
    run_case(name, fwd, NB(fwd), op_ce_fwd, &a, 0);
    buf bwd[] = {
        {.name = "dlogits", .kind = OUT_ACC, .n = (size_t)N * V, .lo = -1, .hi = 1},
        {.name = "logits", .kind = IN_F, .n = (size_t)N * V, .lo = -8, .hi = 8},
        {.name = "lse", .kind = IN_F, .n = (size_t)N, .lo = 8, .hi = 12},
        {.name = "targets", .kind = IN_I, .n = (size_t)N, .preset = tg},
    };
    snprintf(name, sizeof name, "crossentropy_bwd N=%d V=%d v0=%d", N, V, v0);
    run_case(name, bwd, NB(bwd), op_ce_bwd, &a, 0);
    buf inp[] = {
        {.name = "logits", .kind = OUT_ACC, .n = (size_t)N * V, .lo = -8, .hi = 8},
        {.name = "lse", .kind = IN_F, .n = (size_t)N, .lo = 8, .hi = 12},
        {.name = "targets", .kind = IN_I, .n = (size_t)N, .preset = tg},
    };
    snprintf(name, sizeof name, "crossentropy_bwd in place N=%d V=%d v0=%d", N, V, v0);
    run_case(name, inp, NB(inp), op_ce_bwd_in_place, &a, 0);
    free(tg);
}

/* ------------------------------------------------------------------ adamw */

typedef struct {
    size_t n;
    float lr, b1, b2, eps, wd;
    int t;
} adam_arg;

/* Spans over [n/10, n) as a ZeRO shard's: moments of the shard only
 * (m_at from 0), decay off on the second of three. */
static void op_adamw(const merak_kernels *K, int on_gpu, void **p, const void *arg,
                     double *ret)
{
    const adam_arg *a = arg;
    const size_t lo = a->n / 10, third = (a->n - lo) / 3;
    merak_adamw_span sp[3];
    for (int k = 0; k < 3; k++) {
        sp[k].at = lo + (size_t)k * third;
        sp[k].m_at = (size_t)k * third;
        sp[k].n = k < 2 ? third : a->n - lo - 2 * third;
        sp[k].decay = k != 1;
    }
    merak_adamw_span *spans = sp;
    (void)ret;
    if (on_gpu) {
        spans = dmalloc(sizeof sp);
        merak_cuda_memcpy_h2d(spans, sp, sizeof sp);
    }
    K->adamw(F(p[0]), F(p[1]), F(p[2]), F(p[3]), spans, 3, a->lr, a->b1, a->b2, a->eps, a->wd,
             a->t, NULL);
    if (on_gpu) {
        merak_cuda_synchronize();
        merak_cuda_free(spans);
    }
}

static void *to_dev(const void *h, size_t bytes);

static void test_adamw(size_t n)
{
    const int ts[] = {1, 7};
    for (int i = 0; i < NB(ts); i++) {
        const adam_arg a = {n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, ts[i]};
        char name[64];
        buf b[] = {
            {.name = "p", .kind = OUT_ACC, .n = n, .lo = -1, .hi = 1},
            {.name = "g", .kind = IN_F, .n = n, .lo = -1, .hi = 1},
            {.name = "m", .kind = OUT_ACC, .n = n, .lo = -0.1f, .hi = 0.1f},
            {.name = "v", .kind = OUT_ACC, .n = n, .lo = 0.0f, .hi = 0.01f},
        };
        snprintf(name, sizeof name, "adamw t=%d", ts[i]);
        run_case(name, b, NB(b), op_adamw, &a, 0);
    }
    /* the bf16 compute copies written in the same pass: the GPU's updated
     * values rounded as to_bf16 rounds them, elements outside the spans
     * untouched */
    float *p = rand_array(n, -1, 1), *g = rand_array(n, -1, 1), *m = rand_array(n, -0.1f, 0.1f),
          *v = rand_array(n, 0, 0.01f);
    const size_t lo = n / 5, third = (n - lo) / 3;
    merak_adamw_span sp[3];
    for (int k = 0; k < 3; k++)
        sp[k] = (merak_adamw_span){lo + (size_t)k * third, (size_t)k * third, k < 2 ? third : n - lo - 2 * third, k != 1};
    float *dp = to_dev(p, n * 4), *dg = to_dev(g, n * 4), *dm = to_dev(m, n * 4), *dv = to_dev(v, n * 4);
    uint16_t *d16 = dmalloc(n * 2), *c16 = xmalloc(n * 2);
    merak_adamw_span *dsp = to_dev(sp, sizeof sp);
    merak_cuda_memset(d16, 0xab, n * 2);
    g_gpu->adamw(dp, dg, dm, dv, dsp, 3, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, d16);
    merak_cuda_memcpy_d2h(p, dp, n * 4);
    merak_cuda_memcpy_d2h(c16, d16, n * 2);
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same &= c16[i] == (i < lo ? 0xabab : merak_f32_to_bf16(p[i]));
    tap_ok(same, "adamw n=%zu writes the bf16 compute copies of what it updates, rounded, "
           "and only those", n);
    merak_cuda_free(dp), merak_cuda_free(dg), merak_cuda_free(dm), merak_cuda_free(dv), merak_cuda_free(d16);
    merak_cuda_free(dsp);
    free(p), free(g), free(m), free(v), free(c16);
    /* the same values through a span on 16 bytes (four at a time) and one
     * a float past it (one at a time): the same bits, copies included */
    {
        const size_t L = 258, W = 2 * L + 1;
        float *hv[4] = {rand_array(W, -1, 1), rand_array(W, -1, 1), rand_array(W, -0.1f, 0.1f),
                        rand_array(W, 0, 0.01f)};
        float *dq[4];
        for (int k = 0; k < 4; k++) {
            memcpy(hv[k] + L + 1, hv[k], L * sizeof(float));
            dq[k] = to_dev(hv[k], W * sizeof(float));
        }
        const merak_adamw_span two[2] = {{0, 0, L, 1}, {L + 1, L + 1, L, 1}};
        merak_adamw_span *dtwo = to_dev(two, sizeof two);
        uint16_t *e16 = dmalloc(W * 2), *h16 = xmalloc(W * 2);
        g_gpu->adamw(dq[0], dq[1], dq[2], dq[3], dtwo, 2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, e16);
        int bits = 1;
        for (int k = 0; k < 4; k++) {
            merak_cuda_memcpy_d2h(hv[k], dq[k], W * sizeof(float));
            bits &= memcmp(hv[k], hv[k] + L + 1, L * sizeof(float)) == 0;
            merak_cuda_free(dq[k]);
            free(hv[k]);
        }
        merak_cuda_memcpy_d2h(h16, e16, W * 2);
        bits &= memcmp(h16, h16 + L + 1, L * 2) == 0;
        tap_ok(bits, "adamw: a span four elements at a time and one an element at a time give the same bits "
               "(p, m, v and the bf16 copies)");
        merak_cuda_free(dtwo), merak_cuda_free(e16);
        free(h16);
    }
    /* the gradient norm's sum of squares off 16 bytes: a head of 3 one at
     * a time, then 16-byte loads, then a tail; and shorter than its head */
    float *h = rand_array(1003, -3, 3), *d = to_dev(h, 1003 * sizeof *h);
    const double s_gpu = g_gpu->sumsq(d + 1, 1001), s_cpu = g_cpu->sumsq(h + 1, 1001);
    const double t_gpu = g_gpu->sumsq(d + 1, 2), t_cpu = g_cpu->sumsq(h + 1, 2);
    tap_ok(fabs(s_gpu - s_cpu) <= 1e-10 * s_cpu && fabs(t_gpu - t_cpu) <= 1e-10 * t_cpu,
           "sumsq from a float past 16 bytes: n=1001 %.17g against %.17g, n=2 %.17g against %.17g", s_gpu, s_cpu,
           t_gpu, t_cpu);
    merak_cuda_free(d);
    free(h);
}

/* ------------------------------------------------------------------ main */

/* ------------------------------------------------------------------ sets, TF32, BF16 */

static void test_linear_sets(const char *tag)
{
    test_linear(tag, 13, 24, 17, 1, 0);
    test_linear(tag, 13, 24, 17, 1, 1);
    test_linear(tag, 13, 24, 17, 0, 0);
    test_linear(tag, 64, 96, 80, 1, 0);
    test_linear(tag, 300, 33, 7, 1, 0);
}

static void test_attention_sets(const char *tag)
{
    char t[7][64];
    static const char *const names[7] = {"gpt2", "llama3-scaled", "llama-gqa", "gqa-rope-fused", "long",
                                         "batched-gqa", "wide-head"};
    for (int i = 0; i < 7; i++)
        snprintf(t[i], sizeof t[i], "%s%s", tag, names[i]);
    test_attention(t[0], 2, 7, 3, 3, 8, ROPE(0.0f), 1);
    test_attention(t[1], 2, 80, 4, 2, 64, LLAMA3_ROPE, 0);
    test_attention(t[2], 2, 9, 4, 2, 16, ROPE(10000.0f), 0);
    test_attention(t[3], 1, 70, 4, 1, 96, ROPE(500000.0f), 1);
    test_attention(t[4], 1, 300, 2, 2, 64, ROPE(10000.0f), 0);
    test_attention(t[5], 3, 129, 6, 2, 64, ROPE(10000.0f), 0);
    test_attention(t[6], 1, 5, 2, 1, 320, ROPE(10000.0f), 1);
}

/* The same product in float32 and in the math m: they differ (the switch
 * reaches cuBLASLt), by no more than m's tolerance (the caller's).  BF16
 * then multiplies bf16 values exactly: inputs that are bf16 values give
 * float32's product within float32's tolerance (only the order of the
 * sums differs), which is why the executor's bf16 (every operand already a
 * bf16 value) loses nothing in its products. */
static void test_math_differs(merak_products m, const char *tag)
{
    const int N = 64, K = 96, O = 80;
    float *x = rand_array((size_t)N * K, -1, 1), *w = rand_array((size_t)O * K, -1, 1);
    float *dx = dmalloc((size_t)N * K * 4), *dw = dmalloc((size_t)O * K * 4), *dy = dmalloc((size_t)N * O * 4);
    float *y[2] = {xmalloc((size_t)N * O * 4), xmalloc((size_t)N * O * 4)};
    size_t worst;
    for (int rounded = 0; rounded < (m == MERAK_PRODUCTS_BF16 ? 2 : 1); rounded++) {
        if (rounded) {
            g_cpu->round_bf16(x, (size_t)N * K);
            g_cpu->round_bf16(w, (size_t)O * K);
        }
        merak_cuda_memcpy_h2d(dx, x, (size_t)N * K * 4);
        merak_cuda_memcpy_h2d(dw, w, (size_t)O * K * 4);
        for (int t = 0; t < 2; t++) {
            merak_cuda_set_products(t ? m : MERAK_PRODUCTS_FP32);
            g_gpu->linear_fwd(dy, dx, dw, NULL, N, K, O);
            merak_cuda_memcpy_d2h(y[t], dy, (size_t)N * O * 4);
        }
        tap_ok(merak_cuda_products() == m, "merak_cuda_products says %s is on", tag);
        if (!rounded) {
            tap_ok(memcmp(y[0], y[1], (size_t)N * O * 4) != 0, "%s: a 64x96x80 product differs from float32's", tag);
            tap_ok(compare(y[1], y[0], (size_t)N * O, &worst) <= 1.0, "%s: ... within %s's tolerance of it", tag, tag);
        } else {
            const double rt = g_rtol, at = g_atol;
            g_rtol = RTOL, g_atol = ATOL;
            tap_ok(compare(y[1], y[0], (size_t)N * O, &worst) <= 1.0,
                   "%s: a product of bf16 values equals float32's within float32's tolerance", tag);
            g_rtol = rt, g_atol = at;
        }
    }
    merak_cuda_set_products(m);
    merak_cuda_free(dx), merak_cuda_free(dw), merak_cuda_free(dy);
    free(x), free(w), free(y[0]), free(y[1]);
}

/* The linear and attention sets with TF32's or BF16's products, at their
 * tolerances; the table's set_products turns them off again. */
static void test_math(merak_products m, const char *tag, double rtol, double atol)
{
    char pre[32];
    snprintf(pre, sizeof pre, "%s ", tag);
    g_rtol = rtol, g_atol = atol;
    test_math_differs(m, tag);
    test_linear_sets(pre);
    test_attention_sets(pre);   /* BF16: cuDNN's where built, for the shapes it takes */
    if (m == MERAK_PRODUCTS_BF16) {
        snprintf(pre, sizeof pre, "%s [products] ", tag);
        merak_cuda_set_attention_paths(MERAK_CUDA_ATTN_PRODUCTS, MERAK_CUDA_ATTN_PRODUCTS);
        test_attention_sets(pre);
        merak_cuda_set_attention_paths(MERAK_CUDA_ATTN_AUTO, MERAK_CUDA_ATTN_AUTO);
    }
    g_gpu->set_products(MERAK_PRODUCTS_FP32);
    tap_ok(merak_cuda_products() == MERAK_PRODUCTS_FP32, "the table's set_products(FP32) turns %s off", tag);
    g_rtol = RTOL, g_atol = ATOL;
}

/* round_bf16 on the GPU equals the CPU's bit for bit: ties to even, the
 * range's edge, infinities and nans, subnormals; at every alignment (the
 * launcher's misaligned head, 16-byte body and tail). */
static void test_round_bf16(void)
{
    static const uint32_t special[] = {
        0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu, /* ties to even, down and up; near ties */
        0x7f7fffffu, 0xff7f8000u, 0x7f800000u, 0xff800000u, /* largest float: to inf; -inf */
        0x7fc00001u, 0xffa00000u, 0x00000001u, 0x80018000u, /* nans (quiet, signalling); subnormals */
        0x00000000u, 0x80000000u};
    const size_t n = 1003;
    float *h = xmalloc((n + 3) * 4), *c = xmalloc((n + 3) * 4), *g = xmalloc((n + 3) * 4);
    float *d = dmalloc((n + 3) * 4);
    for (size_t i = 0; i < n + 3; i++)
        h[i] = rng_uniform(-1000, 1000) * (i % 7 == 0 ? 1e-30f : 1.0f);
    memcpy(h + 17, special, sizeof special);
    int same = 1;
    for (size_t off = 0; off < 4; off++) {
        const size_t m = n - off;
        memcpy(c, h, (n + 3) * 4);
        g_cpu->round_bf16(c + off, m);
        merak_cuda_memcpy_h2d(d, h, (n + 3) * 4);
        g_gpu->round_bf16(d + off, m);
        merak_cuda_memcpy_d2h(g, d, (n + 3) * 4);
        same &= memcmp(c, g, (n + 3) * 4) == 0;
    }
    tap_ok(same, "round_bf16 equals the CPU's bit for bit (specials, 4 alignments, nothing outside touched)");

    /* bf16 storage's conversions: to_bf16 the CPU's bits, from_bf16 back
     * exactly, at 4 alignments of each side (nothing outside written) */
    uint16_t *b = xmalloc((n + 3) * 2), *bg = xmalloc((n + 3) * 2), *db = dmalloc((n + 3) * 2);
    same = 1;
    for (size_t off = 0; off < 4; off++)
        for (size_t ob = 0; ob < 4; ob++) {
            const size_t m = n - (off > ob ? off : ob);
            memset(b, 0xab, (n + 3) * 2);
            g_cpu->to_bf16(b + ob, h + off, m);
            merak_cuda_memcpy_h2d(d, h, (n + 3) * 4);
            merak_cuda_memcpy_h2d(db, b, (n + 3) * 2);   /* what the CPU wrote, and its filler around */
            g_gpu->zero(db + ob, m * 2);
            g_gpu->to_bf16(db + ob, d + off, m);
            merak_cuda_memcpy_d2h(bg, db, (n + 3) * 2);
            same &= memcmp(b, bg, (n + 3) * 2) == 0;
            memcpy(c, h, (n + 3) * 4);
            g_cpu->from_bf16(c + off, b + ob, m);
            merak_cuda_memcpy_h2d(d, h, (n + 3) * 4);
            g_gpu->from_bf16(d + off, db + ob, m);
            merak_cuda_memcpy_d2h(g, d, (n + 3) * 4);
            same &= memcmp(c, g, (n + 3) * 4) == 0;
        }
    tap_ok(same, "to_bf16 and from_bf16 equal the CPU's bit for bit (16 alignments, nothing outside touched)");
    merak_cuda_free(d), merak_cuda_free(db);
    free(h), free(c), free(g), free(b), free(bg);
}

/* ------------------------------------------------------------------ bf16 storage */

/* n random bf16 values in [lo, hi) as bit patterns, in host memory. */
static uint16_t *rand_bf16(size_t n, float lo, float hi)
{
    uint16_t *x = xmalloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = merak_f32_to_bf16(rng_uniform(lo, hi));
    return x;
}

static void *to_dev(const void *h, size_t bytes)
{
    void *d = dmalloc(bytes ? bytes : 1);
    merak_cuda_memcpy_h2d(d, h, bytes);
    return d;
}

/* max over n of |g - c| / (rtol |c| + atol max|c|): > 1 fails; g, c as
 * floats (bf16 widened by the caller), NaN fails. */
static double worst(const float *g, const float *c, size_t n, double rtol, double atol)
{
    double m = 0, w = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(c[i]) > m ? fabs(c[i]) : m;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)g[i] - c[i]) / (rtol * fabs(c[i]) + atol * m + 1e-30);
        w = isnan(g[i]) || isnan(e) ? INFINITY : e > w ? e : w;
    }
    return w;
}

static float *widened(const uint16_t *b, size_t n)
{
    float *f = xmalloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = merak_bf16_to_f32(b[i]);
    return f;
}

/* n rows of w bf16 values ld apart from dense src (NULL: none), the
 * padding set to pad. */
static uint16_t *padded(const uint16_t *src, size_t n, int w, int ld, uint16_t pad)
{
    uint16_t *p = xmalloc((n ? n : 1) * (size_t)ld * sizeof *p);
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < ld; c++)
            p[r * (size_t)ld + (size_t)c] = c < w ? (src ? src[r * (size_t)w + (size_t)c] : pad) : pad;
    return p;
}

/* Dense rows of p (rows ld apart, widened); *pad_kept &= every padding
 * element equals pad. */
static float *unpadded(const uint16_t *p, size_t n, int w, int ld, uint16_t pad, int *pad_kept)
{
    float *f = xmalloc((n ? n : 1) * (size_t)w * sizeof *f);
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < ld; c++) {
            if (c < w)
                f[r * (size_t)w + (size_t)c] = merak_bf16_to_f32(p[r * (size_t)ld + (size_t)c]);
            else
                *pad_kept &= p[r * (size_t)ld + (size_t)c] == pad;
        }
    return f;
}

/* The linear layer's bf16 entries against the CPU's (which are its float
 * kernels on the widened values, rounded once): a bf16 result within one
 * rounding (2^-8 relative) of the CPU's, weight gradients within fp32's
 * tolerance, two GPU runs bitwise equal.  bias: 0 none, 1 in the
 * epilogue, 2 misaligned (the bias kernel after an fp32 product).  out
 * and dout have rows ldo apart (ldo > O: the executor's padded logits);
 * their padding holds NaN, which must be neither read nor written. */
static void test_linear16(int N, int K, int O, int ldo, int bias)
{
    const size_t nk = (size_t)N * K, ok = (size_t)O * K, no = (size_t)N * O, nl = (size_t)N * ldo;
    const uint16_t NAN16 = 0xffff;
    uint16_t *inp = rand_bf16(nk, -1, 1), *w = rand_bf16(ok, -0.5f, 0.5f), *b = rand_bf16(O + 1, -1, 1);
    uint16_t *dout_d = rand_bf16(no, -1, 1), *dinp0 = rand_bf16(nk, -1, 1);
    uint16_t *dout = padded(dout_d, (size_t)N, O, ldo, NAN16);
    float *dw0 = rand_array(ok, -1, 1), *db0 = rand_array(O, -1, 1);
    const uint16_t *hb = bias ? b + (bias == 2) : NULL;
    float *scratch = xmalloc((nk + ok + no + (size_t)O + 64) * sizeof(float));
    /* the CPU */
    uint16_t *out_c = padded(NULL, (size_t)N, O, ldo, NAN16), *dinp_c = xmalloc(nk * 2);
    float *dw_c = xmalloc(ok * 4), *db_c = xmalloc((size_t)O * 4);
    memcpy(dinp_c, dinp0, nk * 2), memcpy(dw_c, dw0, ok * 4), memcpy(db_c, db0, (size_t)O * 4);
    g_cpu->linear16_fwd(out_c, inp, w, hb, N, K, O, ldo, scratch);
    g_cpu->linear16_bwd_x(dinp_c, dout, w, N, K, O, ldo, 1, scratch);
    uint16_t *dinp_c0 = xmalloc(nk * 2), *dinp_g0 = xmalloc(nk * 2);   /* acc 0 over garbage */
    memset(dinp_c0, 0xff, nk * 2);
    g_cpu->linear16_bwd_x(dinp_c0, dout, w, N, K, O, ldo, 0, scratch);
    const int want_db = ldo == O;   /* (kernels.h: padded rows have no bias) */
    g_cpu->linear16_bwd_w(dw_c, want_db ? db_c : NULL, dout, inp, N, K, O, ldo, scratch);
    /* the GPU, twice */
    uint16_t *out_g[2], *dinp_g[2];
    float *dw_g[2], *db_g[2];
    uint16_t *d_inp = to_dev(inp, nk * 2), *d_w = to_dev(w, ok * 2), *d_b = to_dev(b, (size_t)(O + 1) * 2),
             *d_dout = to_dev(dout, nl * 2);
    for (int r = 0; r < 2; r++) {
        uint16_t *d_out = to_dev(out_c, nl * 2), *d_dinp = to_dev(dinp0, nk * 2);
        float *d_dw = to_dev(dw0, ok * 4), *d_db = to_dev(db0, (size_t)O * 4);
        merak_cuda_memset(d_out, 0xff, nl * 2);   /* NaN: every element must be written, no padding */
        g_gpu->linear16_fwd(d_out, d_inp, d_w, bias ? d_b + (bias == 2) : NULL, N, K, O, ldo, NULL);
        g_gpu->linear16_bwd_x(d_dinp, d_dout, d_w, N, K, O, ldo, 1, NULL);
        g_gpu->linear16_bwd_w(d_dw, want_db ? d_db : NULL, d_dout, d_inp, N, K, O, ldo, NULL);
        out_g[r] = xmalloc(nl * 2), dinp_g[r] = xmalloc(nk * 2), dw_g[r] = xmalloc(ok * 4), db_g[r] = xmalloc((size_t)O * 4);
        merak_cuda_memcpy_d2h(out_g[r], d_out, nl * 2);
        merak_cuda_memcpy_d2h(dinp_g[r], d_dinp, nk * 2);
        merak_cuda_memcpy_d2h(dw_g[r], d_dw, ok * 4);
        merak_cuda_memcpy_d2h(db_g[r], d_db, (size_t)O * 4);
        merak_cuda_free(d_out), merak_cuda_free(d_dinp), merak_cuda_free(d_dw), merak_cuda_free(d_db);
    }
    {
        uint16_t *d_dinp0 = dmalloc(nk * 2);
        merak_cuda_memset(d_dinp0, 0xff, nk * 2);   /* NaN: written, never read */
        g_gpu->linear16_bwd_x(d_dinp0, d_dout, d_w, N, K, O, ldo, 0, NULL);
        merak_cuda_memcpy_d2h(dinp_g0, d_dinp0, nk * 2);
        merak_cuda_free(d_dinp0);
    }
    float *x0c = widened(dinp_c0, nk), *x0g = widened(dinp_g0, nk);
    const double e_x0 = worst(x0g, x0c, nk, 8e-3, 1e-4);
    free(x0c), free(x0g), free(dinp_c0), free(dinp_g0);
    int pad = 1;
    float *oc = unpadded(out_c, (size_t)N, O, ldo, NAN16, &pad), *og = unpadded(out_g[0], (size_t)N, O, ldo, NAN16, &pad),
          *xc = widened(dinp_c, nk), *xg = widened(dinp_g[0], nk);
    const double e_out = worst(og, oc, no, 8e-3, 1e-4), e_x = worst(xg, xc, nk, 8e-3, 1e-4),
                 e_w = worst(dw_g[0], dw_c, ok, RTOL, ATOL),
                 e_b = worst(db_g[0], db_c, (size_t)O, RTOL, ATOL);
    const int same = !memcmp(out_g[0], out_g[1], nl * 2) && !memcmp(dinp_g[0], dinp_g[1], nk * 2) &&
                     !memcmp(dw_g[0], dw_g[1], ok * 4) && !memcmp(db_g[0], db_g[1], (size_t)O * 4);
    tap_ok(e_out <= 1 && e_x <= 1 && e_x0 <= 1 && e_w <= 1 && e_b <= 1 && same && pad,
           "linear16 N=%d K=%d O=%d (rows %d apart) bias=%s: out %.2f, dinp %.2f (acc 0 over NaN: %.2f), dw %.2f, "
           "db %.2f of the tolerance; repeatable %d; padding untouched %d",
           N, K, O, ldo, bias == 0 ? "none" : bias == 1 ? "epilogue" : "misaligned", e_out, e_x, e_x0, e_w, e_b,
           same, pad);
    for (int r = 0; r < 2; r++)
        free(out_g[r]), free(dinp_g[r]), free(dw_g[r]), free(db_g[r]);
    free(oc), free(og), free(xc), free(xg);
    merak_cuda_free(d_inp), merak_cuda_free(d_w), merak_cuda_free(d_b), merak_cuda_free(d_dout);
    free(inp), free(w), free(b), free(dout), free(dout_d), free(dinp0), free(dw0), free(db0), free(scratch);
    free(out_c), free(dinp_c), free(dw_c), free(db_c);
}

/* The embedding's bf16 entries: rows copied bit for bit, the weight
 * gradient within fp32's tolerance of the CPU's. */
static void test_embedding16(int N, int C, int V, int v0)
{
    uint16_t *wte = rand_bf16((size_t)V * C, -1, 1), *dout = rand_bf16((size_t)N * C, -1, 1);
    int32_t *ids = xmalloc((size_t)N * sizeof *ids);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)(rng_u64() % (uint64_t)(V + v0 + 3));
    float *dw0 = rand_array((size_t)V * C, -1, 1), *dw_c = xmalloc((size_t)V * C * 4), *dw_g = xmalloc((size_t)V * C * 4);
    uint16_t *out_c = xmalloc((size_t)N * C * 2), *out_g = xmalloc((size_t)N * C * 2);
    memcpy(dw_c, dw0, (size_t)V * C * 4);
    g_cpu->embedding16_fwd(out_c, ids, wte, N, C, v0, V);
    float *scratch = xmalloc(((size_t)N * C + 16) * sizeof(float));
    g_cpu->embedding16_bwd_w(dw_c, dout, ids, N, C, v0, V, scratch);
    free(scratch);
    uint16_t *d_wte = to_dev(wte, (size_t)V * C * 2), *d_dout = to_dev(dout, (size_t)N * C * 2),
             *d_out = dmalloc((size_t)N * C * 2);
    int32_t *d_ids = to_dev(ids, (size_t)N * 4);
    float *d_dw = to_dev(dw0, (size_t)V * C * 4);
    merak_cuda_memset(d_out, 0xff, (size_t)N * C * 2);
    g_gpu->embedding16_fwd(d_out, d_ids, d_wte, N, C, v0, V);
    g_gpu->embedding16_bwd_w(d_dw, d_dout, d_ids, N, C, v0, V, NULL);
    merak_cuda_memcpy_d2h(out_g, d_out, (size_t)N * C * 2);
    merak_cuda_memcpy_d2h(dw_g, d_dw, (size_t)V * C * 4);
    const double e = worst(dw_g, dw_c, (size_t)V * C, RTOL, ATOL);
    tap_ok(!memcmp(out_c, out_g, (size_t)N * C * 2) && e <= 1,
           "embedding16 N=%d C=%d V=%d v0=%d: rows bit for bit, dwte %.2f of the tolerance", N, C, V, v0, e);
    merak_cuda_free(d_wte), merak_cuda_free(d_dout), merak_cuda_free(d_out), merak_cuda_free(d_ids), merak_cuda_free(d_dw);
    free(wte), free(dout), free(ids), free(dw0), free(dw_c), free(dw_g), free(out_c), free(out_g);
}

/* A linear layer with GELU after it (kernels.h linear16_gelu_fwd,
 * linear16_bwd_x_dgelu) against the CPU's (its two entries' bits), every
 * element written (the buffers start NaN): without cuBLASLt's epilogues
 * the device's own two entries' bits, within a bf16 rounding of the CPU;
 * with them (merak_cuda_set_gelu_epilogue) GELU meets the fp32 product,
 * within two. */
static void test_linear16_gelu(int N, int K, int O, int O2, int bias)
{
    const size_t nk = (size_t)N * K, ok = (size_t)O * K, no = (size_t)N * O, o2 = (size_t)O2 * O,
                 n2 = (size_t)N * O2;
    uint16_t *inp = rand_bf16(nk, -1, 1), *w = rand_bf16(ok, -0.5f, 0.5f), *b = rand_bf16((size_t)O, -1, 1);
    uint16_t *w2 = rand_bf16(o2, -0.5f, 0.5f), *dout = rand_bf16(n2, -1, 1);
    const uint16_t *hb = bias ? b : NULL;
    float *scratch = xmalloc((nk + ok + 3 * no + o2 + n2 + (size_t)O + 64) * sizeof(float));
    uint16_t *pre_c = xmalloc(no * 2), *out_c = xmalloc(no * 2), *dpre_c = xmalloc(no * 2);
    g_cpu->linear16_gelu_fwd(pre_c, out_c, inp, w, hb, N, K, O, scratch);
    g_cpu->linear16_bwd_x_dgelu(dpre_c, dout, w2, pre_c, N, O, O2, O2, scratch);
    uint16_t *d_inp = to_dev(inp, nk * 2), *d_w = to_dev(w, ok * 2), *d_b = to_dev(b, (size_t)O * 2),
             *d_w2 = to_dev(w2, o2 * 2), *d_dout = to_dev(dout, n2 * 2), *d_pre_c = to_dev(pre_c, no * 2);
    uint16_t *d_pre = dmalloc(no * 2), *d_out = dmalloc(no * 2), *d_dpre = dmalloc(no * 2);
    uint16_t *g[3][3];   /* [off, two entries, on][pre, out, dpre] */
    for (int m = 0; m < 3; m++) {
        merak_cuda_set_gelu_epilogue(m == 2);
        merak_cuda_memset(d_pre, 0xff, no * 2), merak_cuda_memset(d_out, 0xff, no * 2);
        merak_cuda_memset(d_dpre, 0xff, no * 2);
        if (m == 1) {
            g_gpu->linear16_fwd(d_pre, d_inp, d_w, bias ? d_b : NULL, N, K, O, O, NULL);
            g_gpu->gelu16_fwd(d_out, d_pre, no, NULL);
            g_gpu->linear16_bwd_x(d_dpre, d_dout, d_w2, N, O, O2, O2, 0, NULL);
            g_gpu->gelu16_bwd(d_dpre, d_dpre, d_pre_c, no, 0, NULL);
        } else {
            g_gpu->linear16_gelu_fwd(d_pre, d_out, d_inp, d_w, bias ? d_b : NULL, N, K, O, NULL);
            g_gpu->linear16_bwd_x_dgelu(d_dpre, d_dout, d_w2, d_pre_c, N, O, O2, O2, NULL);
        }
        for (int t = 0; t < 3; t++) {
            g[m][t] = xmalloc(no * 2);
            merak_cuda_memcpy_d2h(g[m][t], t == 0 ? d_pre : t == 1 ? d_out : d_dpre, no * 2);
        }
    }
    merak_cuda_set_gelu_epilogue(0);
    const int same = !memcmp(g[0][0], g[1][0], no * 2) && !memcmp(g[0][1], g[1][1], no * 2) &&
                     !memcmp(g[0][2], g[1][2], no * 2);
    /* the epilogues ran where the rows allow them: GELU on the unrounded
     * product changes some of the results' last bits */
    size_t moved = 0;
    for (size_t j = 0; j < no; j++)
        moved += g[2][1][j] != g[0][1][j] || g[2][2][j] != g[0][2][j];
    const int ran = O % 8 != 0 || moved > 0;
    const uint16_t *cpu[3] = {pre_c, out_c, dpre_c};
    double e[2][3];
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < 3; t++) {
            float *a = widened(g[2 * m][t], no), *c = widened(cpu[t], no);
            e[m][t] = worst(a, c, no, m ? 1.6e-2 : 8e-3, m ? 2e-4 : 1e-4);
            free(a), free(c);
        }
    tap_ok(same && ran && e[0][0] <= 1 && e[0][1] <= 1 && e[0][2] <= 1 && e[1][0] <= 1 && e[1][1] <= 1 &&
               e[1][2] <= 1,
           "linear16 with GELU N=%d K=%d O=%d (then O=%d) bias=%d: the two entries' bits %d; pre %.2f, out %.2f, "
           "dpre %.2f of a bf16 rounding from the CPU; with cuBLASLt's epilogues %.2f, %.2f, %.2f of two (%zu "
           "results moved)",
           N, K, O, O2, bias, same, e[0][0], e[0][1], e[0][2], e[1][0], e[1][1], e[1][2], moved);
    for (int m = 0; m < 3; m++)
        for (int t = 0; t < 3; t++)
            free(g[m][t]);
    merak_cuda_free(d_inp), merak_cuda_free(d_w), merak_cuda_free(d_b), merak_cuda_free(d_w2), merak_cuda_free(d_dout);
    merak_cuda_free(d_pre_c), merak_cuda_free(d_pre), merak_cuda_free(d_out), merak_cuda_free(d_dpre);
    free(inp), free(w), free(b), free(w2), free(dout), free(scratch), free(pre_c), free(out_c), free(dpre_c);
}

/* The benchmarks' GEMM probe (merak_cuda_gemm16_probe): the heuristic's
 * candidates for a linear16 forward each timed, the backend's pick among
 * them, and every one that ran wrote the product (within a bf16 rounding
 * of the CPU's linear16_fwd). */
static void test_gemm_probe(int N, int K, int O)
{
    const size_t nk = (size_t)N * K, ok = (size_t)O * K, no = (size_t)N * O;
    uint16_t *inp = rand_bf16(nk, -1, 1), *w = rand_bf16(ok, -0.5f, 0.5f), *out_c = xmalloc(no * 2),
             *out_g = xmalloc(no * 2);
    float *scratch = xmalloc((nk + ok + no + 64) * sizeof(float));
    g_cpu->linear16_fwd(out_c, inp, w, NULL, N, K, O, O, scratch);
    uint16_t *d_inp = to_dev(inp, nk * 2), *d_w = to_dev(w, ok * 2), *d_out = dmalloc(no * 2);
    merak_cuda_memset(d_out, 0xff, no * 2);
    double ms[8];
    int picked = -1;
    const int n = merak_cuda_gemm16_probe(1, 0, O, N, K, d_w, K, d_inp, K, d_out, 1, O, 0.0f, NULL, 3, ms, 8, &picked);
    merak_cuda_memcpy_d2h(out_g, d_out, no * 2);
    int timed = 0;
    for (int i = 0; i < n; i++)
        timed += ms[i] > 0;
    float *a = widened(out_g, no), *c = widened(out_c, no);
    const double e = worst(a, c, no, 8e-3, 1e-4);
    tap_ok(n >= 1 && n <= 8 && picked >= 0 && picked < n && ms[picked] > 0 && timed >= 1 && e <= 1 &&
               merak_cuda_status(NULL, 0) == 0,
           "gemm16 probe N=%d K=%d O=%d: %d candidates (%d timed), the backend's pick %d at %.4f ms; the last run's "
           "product %.2f of a bf16 rounding from the CPU", N, K, O, n, timed, picked, picked >= 0 && picked < n ? ms[picked] : -1.0, e);
    free(a), free(c);
    merak_cuda_free(d_inp), merak_cuda_free(d_w), merak_cuda_free(d_out);
    free(inp), free(w), free(out_c), free(out_g), free(scratch);
}

/* The linear16 products with their algorithms chosen by timing
 * (merak_cuda_set_gemm_tune): within a bf16 rounding of the CPU's, the
 * weight gradient (beta 1: timed on scratch, so added to once) within
 * fp32's, and a second call of each the first's bits (the choice kept). */
static void test_linear16_tuned(int N, int K, int O)
{
    const size_t nk = (size_t)N * K, ok = (size_t)O * K, no = (size_t)N * O;
    uint16_t *inp = rand_bf16(nk, -1, 1), *w = rand_bf16(ok, -0.5f, 0.5f), *b = rand_bf16((size_t)O, -1, 1);
    uint16_t *dout = rand_bf16(no, -1, 1);
    float *dw0 = rand_array(ok, -1, 1), *scratch = xmalloc((nk + ok + 2 * no + (size_t)O + 64) * sizeof(float));
    uint16_t *out_c = xmalloc(no * 2), *dinp_c = xmalloc(nk * 2);
    float *dw_c = xmalloc(ok * 4);
    memcpy(dw_c, dw0, ok * 4);
    g_cpu->linear16_fwd(out_c, inp, w, b, N, K, O, O, scratch);
    g_cpu->linear16_bwd_x(dinp_c, dout, w, N, K, O, O, 0, scratch);
    g_cpu->linear16_bwd_w(dw_c, NULL, dout, inp, N, K, O, O, scratch);
    uint16_t *d_inp = to_dev(inp, nk * 2), *d_w = to_dev(w, ok * 2), *d_b = to_dev(b, (size_t)O * 2),
             *d_dout = to_dev(dout, no * 2), *d_out = dmalloc(no * 2), *d_dinp = dmalloc(nk * 2);
    uint16_t *out_g[2] = {xmalloc(no * 2), xmalloc(no * 2)}, *dinp_g[2] = {xmalloc(nk * 2), xmalloc(nk * 2)};
    float *dw_g[2] = {xmalloc(ok * 4), xmalloc(ok * 4)};
    merak_cuda_set_gemm_tune(1);
    for (int r = 0; r < 2; r++) {
        float *d_dw = to_dev(dw0, ok * 4);
        merak_cuda_memset(d_out, 0xff, no * 2), merak_cuda_memset(d_dinp, 0xff, nk * 2);
        g_gpu->linear16_fwd(d_out, d_inp, d_w, d_b, N, K, O, O, NULL);
        g_gpu->linear16_bwd_x(d_dinp, d_dout, d_w, N, K, O, O, 0, NULL);
        g_gpu->linear16_bwd_w(d_dw, NULL, d_dout, d_inp, N, K, O, O, NULL);
        merak_cuda_memcpy_d2h(out_g[r], d_out, no * 2);
        merak_cuda_memcpy_d2h(dinp_g[r], d_dinp, nk * 2);
        merak_cuda_memcpy_d2h(dw_g[r], d_dw, ok * 4);
        merak_cuda_free(d_dw);
    }
    merak_cuda_set_gemm_tune(0);
    float *oc = widened(out_c, no), *og = widened(out_g[0], no), *xc = widened(dinp_c, nk), *xg = widened(dinp_g[0], nk);
    const double e_out = worst(og, oc, no, 8e-3, 1e-4), e_x = worst(xg, xc, nk, 8e-3, 1e-4),
                 e_w = worst(dw_g[0], dw_c, ok, RTOL, ATOL);
    const int same = !memcmp(out_g[0], out_g[1], no * 2) && !memcmp(dinp_g[0], dinp_g[1], nk * 2) &&
                     !memcmp(dw_g[0], dw_g[1], ok * 4);
    tap_ok(e_out <= 1 && e_x <= 1 && e_w <= 1 && same && merak_cuda_status(NULL, 0) == 0,
           "linear16 N=%d K=%d O=%d, algorithms chosen by timing: out %.2f, dinp %.2f, dw %.2f of the tolerance; the "
           "second calls the first's bits %d", N, K, O, e_out, e_x, e_w, same);
    free(oc), free(og), free(xc), free(xg);
    for (int r = 0; r < 2; r++)
        free(out_g[r]), free(dinp_g[r]), free(dw_g[r]);
    merak_cuda_free(d_inp), merak_cuda_free(d_w), merak_cuda_free(d_b), merak_cuda_free(d_dout);
    merak_cuda_free(d_out), merak_cuda_free(d_dinp);
    free(inp), free(w), free(b), free(dout), free(dw0), free(scratch), free(out_c), free(dinp_c), free(dw_c);
}

/* The cross-entropy's bf16 entries against the CPU's: the statistics
 * within fp32's tolerance, the gradient within one bf16 rounding, in place
 * (over the logits, rows of an ignored target zero) and accumulated.
 * Rows ld apart (ld > V: the executor's padded logits), the padding NaN,
 * neither read nor written. */
static void test_crossentropy16(int N, int V, int ld, int v0)
{
    const size_t n = (size_t)N * V, nl = (size_t)N * ld;
    const uint16_t NAN16 = 0xffff;
    uint16_t *xd = rand_bf16(n, -4, 4), *d0d = rand_bf16(n, -1, 1);
    uint16_t *x = padded(xd, (size_t)N, V, ld, NAN16), *d0 = padded(d0d, (size_t)N, V, ld, NAN16);
    int32_t *tg = xmalloc((size_t)N * sizeof *tg);
    for (int i = 0; i < N; i++)
        tg[i] = i % 5 == 3 ? -1 : (int32_t)(rng_u64() % (uint64_t)(V + v0));
    float *scratch = xmalloc((2 * n + 32) * sizeof(float));
    float *st_c = xmalloc((size_t)N * 2 * sizeof(float)), *st_g = xmalloc((size_t)N * 2 * sizeof(float));
    uint16_t *in_c = xmalloc(nl * 2), *acc_c = xmalloc(nl * 2), *in_g = xmalloc(nl * 2), *acc_g = xmalloc(nl * 2);
    const float scale = 1.0f / (float)N;
    g_cpu->crossentropy16_stats(st_c, st_c + N, x, tg, N, V, ld, v0, scratch);
    memcpy(in_c, x, nl * 2), memcpy(acc_c, d0, nl * 2);
    g_cpu->crossentropy16_bwd(in_c, in_c, st_c, tg, N, V, ld, v0, scale, scratch);
    g_cpu->crossentropy16_bwd(acc_c, x, st_c, tg, N, V, ld, v0, scale, scratch);
    uint16_t *d_x = to_dev(x, nl * 2), *d_in = to_dev(x, nl * 2), *d_acc = to_dev(d0, nl * 2);
    int32_t *d_tg = to_dev(tg, (size_t)N * 4);
    float *d_st = dmalloc((size_t)N * 2 * sizeof(float));
    g_gpu->crossentropy16_stats(d_st, d_st + N, d_x, d_tg, N, V, ld, v0, NULL);
    merak_cuda_memcpy_d2h(st_g, d_st, (size_t)N * 2 * sizeof(float));
    /* the backward from the CPU's statistics: the gradient alone compared */
    merak_cuda_memcpy_h2d(d_st, st_c, (size_t)N * 2 * sizeof(float));
    g_gpu->crossentropy16_bwd(d_in, d_in, d_st, d_tg, N, V, ld, v0, scale, NULL);
    g_gpu->crossentropy16_bwd(d_acc, d_x, d_st, d_tg, N, V, ld, v0, scale, NULL);
    merak_cuda_memcpy_d2h(in_g, d_in, nl * 2);
    merak_cuda_memcpy_d2h(acc_g, d_acc, nl * 2);
    /* added to a gradient 2 bytes past the logits' offset within 16 bytes:
     * the element-a-thread kernel (the others take 16 bytes a load) */
    uint16_t *d_off = dmalloc((nl + 1) * 2), *off_g = xmalloc(nl * 2);
    merak_cuda_memcpy_h2d(d_off + 1, d0, nl * 2);
    g_gpu->crossentropy16_bwd(d_off + 1, d_x, d_st, d_tg, N, V, ld, v0, scale, NULL);
    merak_cuda_memcpy_d2h(off_g, d_off + 1, nl * 2);
    int pad = 1;
    float *a = unpadded(in_c, (size_t)N, V, ld, NAN16, &pad), *b = unpadded(in_g, (size_t)N, V, ld, NAN16, &pad),
          *c = unpadded(acc_c, (size_t)N, V, ld, NAN16, &pad), *d = unpadded(acc_g, (size_t)N, V, ld, NAN16, &pad),
          *o = unpadded(off_g, (size_t)N, V, ld, NAN16, &pad);
    const double e_st = worst(st_g, st_c, (size_t)N * 2, RTOL, ATOL), e_in = worst(b, a, n, 8e-3, 1e-4),
                 e_acc = fmax(worst(d, c, n, 8e-3, 1e-4), worst(o, c, n, 8e-3, 1e-4));
    merak_cuda_free(d_off);
    free(off_g), free(o);
    /* both in one pass (the logits read once, the gradient over them): the
     * device's two entries' bits, from the device's own statistics */
    uint16_t *d_f = to_dev(x, nl * 2), *d_two = to_dev(x, nl * 2), *f_g = xmalloc(nl * 2), *two_g = xmalloc(nl * 2);
    float *d_stf = dmalloc((size_t)N * 2 * sizeof(float)), *stf_g = xmalloc((size_t)N * 2 * sizeof(float));
    merak_cuda_memcpy_h2d(d_st, st_g, (size_t)N * 2 * sizeof(float));
    g_gpu->crossentropy16_bwd(d_two, d_two, d_st, d_tg, N, V, ld, v0, scale, NULL);
    g_gpu->crossentropy16_fused(d_stf, d_stf + N, d_f, d_tg, N, V, ld, v0, scale, NULL);
    merak_cuda_memcpy_d2h(f_g, d_f, nl * 2);
    merak_cuda_memcpy_d2h(two_g, d_two, nl * 2);
    merak_cuda_memcpy_d2h(stf_g, d_stf, (size_t)N * 2 * sizeof(float));
    const int fused = !memcmp(f_g, two_g, nl * 2) && !memcmp(stf_g, st_g, (size_t)N * 2 * sizeof(float));
    merak_cuda_free(d_f), merak_cuda_free(d_two), merak_cuda_free(d_stf);
    free(f_g), free(two_g), free(stf_g);
    int zero = 1;
    for (int r = 0; r < N; r++)
        for (int j = 0; tg[r] < 0 && j < V; j++)
            zero &= in_g[(size_t)r * ld + j] == 0;
    tap_ok(e_st <= 1 && e_in <= 1 && e_acc <= 1 && zero && pad && fused,
           "crossentropy16 N=%d V=%d (rows %d apart) v0=%d: statistics %.2f, in place %.2f, accumulated (16 bytes a "
           "load, and off the logits' offset) %.2f of the tolerance; ignored rows zero %d; padding untouched %d; "
           "in one pass the two entries' bits %d",
           N, V, ld, v0, e_st, e_in, e_acc, zero, pad, fused);
    free(xd), free(d0d);
    merak_cuda_free(d_x), merak_cuda_free(d_in), merak_cuda_free(d_acc), merak_cuda_free(d_tg), merak_cuda_free(d_st);
    free(x), free(d0), free(tg), free(scratch), free(st_c), free(st_g), free(in_c), free(acc_c), free(in_g);
    free(acc_g), free(a), free(b), free(c), free(d);
}

/* The elementwise and position-embedding bf16 entries against the CPU's
 * over n elements, the inputs at an offset of `off` elements and the
 * outputs `skew` more (the vectorised body, the one-at-a-time head and
 * tail, and with a skew the buffers' offsets within 16 bytes differ: all
 * one at a time): outputs within one bf16 rounding, dwpe within fp32's
 * tolerance. */
static void test_pointwise16(size_t n, size_t off, size_t skew)
{
    enum { GELU_F, GELU_B, SWIGLU_F, SWIGLU_B, ADD, ACC, DROP_F, DROP_B, POS_F, POS_W, GELU_B0, SWIGLU_B0, DROP_B0, NOPS };
    static const char *names[NOPS] = {"gelu16_fwd", "gelu16_bwd", "swiglu16_fwd", "swiglu16_bwd", "add16_fwd",
                                      "accumulate16", "dropout16_fwd", "dropout16_bwd", "posemb16_fwd",
                                      "posemb16_bwd_w", "gelu16_bwd acc=0", "swiglu16_bwd acc=0",
                                      "dropout16_bwd acc=0"};
    const int Cc = 40, T = (int)(n / 2 / Cc), B = 2;   /* posemb: (B, T, C) within n */
    const size_t m = n + off + skew;
    uint16_t *in[3], *o0 = rand_bf16(m, -1, 1), *o1 = rand_bf16(m, -1, 1);
    for (int k = 0; k < 3; k++)
        in[k] = rand_bf16(m, -3, 3);
    float *dw0 = rand_array((size_t)T * Cc, -1, 1), *scratch = xmalloc((6 * m + 128) * sizeof(float));
    uint16_t *d_in[3], *d_o[2];
    for (int k = 0; k < 3; k++)
        d_in[k] = to_dev(in[k], m * 2);
    float *d_dw = dmalloc((size_t)T * Cc * 4);
    double worst_e = 0;
    const char *worst_op = "";
    for (int op = 0; op < NOPS; op++) {
        uint16_t *c[2] = {xmalloc(m * 2), xmalloc(m * 2)}, *g[2] = {xmalloc(m * 2), xmalloc(m * 2)};
        float *cw = xmalloc((size_t)T * Cc * 4), *gw = xmalloc((size_t)T * Cc * 4);
        memcpy(c[0], o0, m * 2), memcpy(c[1], o1, m * 2), memcpy(cw, dw0, (size_t)T * Cc * 4);
        d_o[0] = to_dev(o0, m * 2), d_o[1] = to_dev(o1, m * 2);
        merak_cuda_memcpy_h2d(d_dw, dw0, (size_t)T * Cc * 4);
        for (int side = 0; side < 2; side++) {
            const merak_kernels *K = side ? g_gpu : g_cpu;
            uint16_t *const *x = side ? d_in : in;
            uint16_t *y0 = (side ? d_o[0] : c[0]) + off + skew, *y1 = (side ? d_o[1] : c[1]) + off + skew;
            float *sc = side ? NULL : scratch, *dw = side ? d_dw : cw;
            const uint16_t *a = x[0] + off, *b = x[1] + off, *z = x[2] + off;
            switch (op) {
            case GELU_F: K->gelu16_fwd(y0, a, n, sc); break;
            case GELU_B: K->gelu16_bwd(y0, a, b, n, 1, sc); break;
            case GELU_B0: K->gelu16_bwd(y0, a, b, n, 0, sc); break;
            case SWIGLU_F: K->swiglu16_fwd(y0, a, b, n, sc); break;
            case SWIGLU_B: K->swiglu16_bwd(y0, y1, a, b, z, n, 1, sc); break;
            case SWIGLU_B0: K->swiglu16_bwd(y0, y1, a, b, z, n, 0, sc); break;
            case ADD: K->add16_fwd(y0, a, b, n, sc); break;
            case ACC: K->accumulate16(y0, a, n, sc); break;
            case DROP_F: K->dropout16_fwd(y0, a, n, 0.3f, 77, 5, sc); break;
            case DROP_B: K->dropout16_bwd(y0, a, n, 0.3f, 77, 5, 1, sc); break;
            case DROP_B0: K->dropout16_bwd(y0, a, n, 0.3f, 77, 5, 0, sc); break;
            case POS_F: K->posemb16_fwd(y0, a, b, B, T, Cc, sc); break;
            case POS_W: K->posemb16_bwd_w(dw, a, B, T, Cc, sc); break;
            }
        }
        merak_cuda_memcpy_d2h(g[0], d_o[0], m * 2);
        merak_cuda_memcpy_d2h(g[1], d_o[1], m * 2);
        merak_cuda_memcpy_d2h(gw, d_dw, (size_t)T * Cc * 4);
        for (int k = 0; k < 2; k++) {
            float *cf = widened(c[k], m), *gf = widened(g[k], m);
            const double e = worst(gf, cf, m, 8e-3, 1e-4);
            if (e > worst_e || isnan(e))
                worst_e = e, worst_op = names[op];
            free(cf), free(gf);
        }
        const double e = worst(gw, cw, (size_t)T * Cc, RTOL, ATOL);
        if (e > worst_e || isnan(e))
            worst_e = e, worst_op = names[op];
        merak_cuda_free(d_o[0]), merak_cuda_free(d_o[1]);
        free(c[0]), free(c[1]), free(g[0]), free(g[1]), free(cw), free(gw);
    }
    tap_ok(worst_e <= 1, "pointwise bf16 entries n=%zu at offset %zu, outputs %zu further: within %.2f of the tolerance "
           "(worst: %s)", n, off, skew, worst_e, worst_op);
    for (int k = 0; k < 3; k++)
        merak_cuda_free(d_in[k]), free(in[k]);
    merak_cuda_free(d_dw);
    free(o0), free(o1), free(dw0), free(scratch);
}

/* The norms' bf16 entries against the CPU's: outputs and input gradients
 * within one bf16 rounding, the saved statistics and weight gradients
 * within fp32's tolerance. */
static void test_norms16(int N, int C)
{
    const size_t n = (size_t)N * C;
    uint16_t *x = rand_bf16(n, -2, 2), *w = rand_bf16((size_t)C, 0.5f, 1.5f), *b = rand_bf16((size_t)C, -1, 1);
    uint16_t *d = rand_bf16(n, -1, 1), *dx0 = rand_bf16(n, -1, 1);
    float *dw0 = rand_array((size_t)C, -1, 1), *scratch = xmalloc((4 * n + 3 * (size_t)C + 128) * sizeof(float));
    uint16_t *d_x = to_dev(x, n * 2), *d_w = to_dev(w, (size_t)C * 2), *d_b = to_dev(b, (size_t)C * 2),
             *d_d = to_dev(d, n * 2);
    double worst_e = 0;
    for (int v = 0; v < 4; v++) {   /* layernorm, rmsnorm; adding to dx, then acc 0 over NaN */
        const int rms = v & 1, acc = v < 2;
        uint16_t *yc = xmalloc(n * 2), *yg = xmalloc(n * 2), *xc = xmalloc(n * 2), *xg = xmalloc(n * 2);
        float *st_c = xmalloc((size_t)N * 2 * 4), *st_g = xmalloc((size_t)N * 2 * 4);
        float *wc = xmalloc((size_t)C * 4), *bc = xmalloc((size_t)C * 4), *wg = xmalloc((size_t)C * 4),
              *bg = xmalloc((size_t)C * 4);
        memcpy(xc, dx0, n * 2), memcpy(wc, dw0, (size_t)C * 4), memcpy(bc, dw0, (size_t)C * 4);
        uint16_t *d_y = dmalloc(n * 2), *d_dx = to_dev(dx0, n * 2);
        float *d_st = dmalloc((size_t)N * 2 * 4), *d_dw = to_dev(dw0, (size_t)C * 4), *d_db = to_dev(dw0, (size_t)C * 4);
        if (!acc)
            memset(xc, 0xff, n * 2), merak_cuda_memset(d_dx, 0xff, n * 2);
        if (rms) {
            g_cpu->rmsnorm16_fwd(yc, st_c, x, w, N, C, 1e-5f, scratch);
            g_cpu->rmsnorm16_bwd_x(xc, d, x, w, st_c, N, C, acc, scratch);
            g_cpu->rmsnorm16_bwd_w(wc, d, x, st_c, N, C, scratch);
            g_gpu->rmsnorm16_fwd(d_y, d_st, d_x, d_w, N, C, 1e-5f, NULL);
            g_gpu->rmsnorm16_bwd_x(d_dx, d_d, d_x, d_w, d_st, N, C, acc, NULL);
            g_gpu->rmsnorm16_bwd_w(d_dw, d_d, d_x, d_st, N, C, NULL);
        } else {
            g_cpu->layernorm16_fwd(yc, st_c, st_c + N, x, w, b, N, C, 1e-5f, scratch);
            g_cpu->layernorm16_bwd_x(xc, d, x, w, st_c, st_c + N, N, C, acc, scratch);
            g_cpu->layernorm16_bwd_w(wc, bc, d, x, st_c, st_c + N, N, C, scratch);
            g_gpu->layernorm16_fwd(d_y, d_st, d_st + N, d_x, d_w, d_b, N, C, 1e-5f, NULL);
            g_gpu->layernorm16_bwd_x(d_dx, d_d, d_x, d_w, d_st, d_st + N, N, C, acc, NULL);
            g_gpu->layernorm16_bwd_w(d_dw, d_db, d_d, d_x, d_st, d_st + N, N, C, NULL);
        }
        merak_cuda_memcpy_d2h(yg, d_y, n * 2);
        merak_cuda_memcpy_d2h(xg, d_dx, n * 2);
        merak_cuda_memcpy_d2h(st_g, d_st, (size_t)N * 2 * 4);
        merak_cuda_memcpy_d2h(wg, d_dw, (size_t)C * 4);
        merak_cuda_memcpy_d2h(bg, d_db, (size_t)C * 4);
        /* the whole backward in one call: dx the same bits as bwd_x's,
         * the weight gradients within fp32's tolerance of the CPU's; then
         * without weight gradients (dw, db NULL): the same dx */
        uint16_t *xf = xmalloc(n * 2), *xn = xmalloc(n * 2);
        float *wf = xmalloc((size_t)C * 4), *bf = xmalloc((size_t)C * 4);
        for (int wgt = 1; wgt >= 0; wgt--) {
            float *dw = wgt ? d_dw : NULL, *db = wgt ? d_db : NULL;
            merak_cuda_memcpy_h2d(d_dw, dw0, (size_t)C * 4);
            merak_cuda_memcpy_h2d(d_db, dw0, (size_t)C * 4);
            if (acc)
                merak_cuda_memcpy_h2d(d_dx, dx0, n * 2);
            else
                merak_cuda_memset(d_dx, 0xff, n * 2);
            if (rms)
                g_gpu->rmsnorm16_bwd(d_dx, dw, d_d, d_x, d_w, d_st, N, C, acc, NULL);
            else
                g_gpu->layernorm16_bwd(d_dx, dw, db, d_d, d_x, d_w, d_st, d_st + N, N, C, acc, NULL);
            merak_cuda_memcpy_d2h(wgt ? xf : xn, d_dx, n * 2);
            if (wgt) {
                merak_cuda_memcpy_d2h(wf, d_dw, (size_t)C * 4);
                merak_cuda_memcpy_d2h(bf, d_db, (size_t)C * 4);
            }
        }
        if (memcmp(xn, xg, n * 2)) {
            tap_diag("%s16_bwd N=%d C=%d acc %d: dx without weight gradients differs from bwd_x's",
                     rms ? "rmsnorm" : "layernorm", N, C, acc);
            worst_e = INFINITY;
        }
        free(xn);
        /* a residual add and the norm of its sum in one call: the two
         * calls' bits (layer norm with a bias and without) */
        for (int nb = 0; acc && nb < (rms ? 1 : 2); nb++) {
            const uint16_t *bias = nb ? NULL : d_b;
            uint16_t *d_r = to_dev(dx0, n * 2), *d_s = dmalloc(n * 2), *d_s2 = dmalloc(n * 2), *d_y2 = dmalloc(n * 2);
            float *d_st2 = dmalloc((size_t)N * 2 * 4);
            merak_cuda_memset(d_s2, 0xff, n * 2), merak_cuda_memset(d_y2, 0xff, n * 2);
            g_gpu->add16_fwd(d_s, d_x, d_r, n, NULL);
            if (rms) {
                g_gpu->rmsnorm16_fwd(d_y, d_st, d_s, d_w, N, C, 1e-5f, NULL);
                g_gpu->add_rmsnorm16_fwd(d_s2, d_y2, d_st2, d_x, d_r, d_w, N, C, 1e-5f, NULL);
            } else {
                g_gpu->layernorm16_fwd(d_y, d_st, d_st + N, d_s, d_w, bias, N, C, 1e-5f, NULL);
                g_gpu->add_layernorm16_fwd(d_s2, d_y2, d_st2, d_st2 + N, d_x, d_r, d_w, bias, N, C, 1e-5f, NULL);
            }
            uint16_t *h[4] = {xmalloc(n * 2), xmalloc(n * 2), xmalloc(n * 2), xmalloc(n * 2)};
            float *hs[2] = {xmalloc((size_t)N * 2 * 4), xmalloc((size_t)N * 2 * 4)};
            merak_cuda_memcpy_d2h(h[0], d_s, n * 2), merak_cuda_memcpy_d2h(h[1], d_s2, n * 2);
            merak_cuda_memcpy_d2h(h[2], d_y, n * 2), merak_cuda_memcpy_d2h(h[3], d_y2, n * 2);
            merak_cuda_memcpy_d2h(hs[0], d_st, (size_t)N * (rms ? 1 : 2) * 4);
            merak_cuda_memcpy_d2h(hs[1], d_st2, (size_t)N * (rms ? 1 : 2) * 4);
            if (memcmp(h[0], h[1], n * 2) || memcmp(h[2], h[3], n * 2) ||
                memcmp(hs[0], hs[1], (size_t)N * (rms ? 1 : 2) * 4)) {
                tap_diag("add_%s16_fwd N=%d C=%d%s: not add16_fwd's and the norm's bits",
                         rms ? "rmsnorm" : "layernorm", N, C, nb ? " (no bias)" : "");
                worst_e = INFINITY;
            }
            for (int k = 0; k < 4; k++)
                free(h[k]);
            free(hs[0]), free(hs[1]);
            merak_cuda_free(d_r), merak_cuda_free(d_s), merak_cuda_free(d_s2), merak_cuda_free(d_y2);
            merak_cuda_free(d_st2);
        }
        if (memcmp(xf, xg, n * 2)) {
            tap_diag("%s16_bwd N=%d C=%d acc %d: dx differs from bwd_x's", rms ? "rmsnorm" : "layernorm", N, C, acc);
            worst_e = INFINITY;
        }
        float *a = widened(yc, n), *a2 = widened(yg, n), *g1 = widened(xc, n), *g2 = widened(xg, n);
        const double e[7] = {worst(a2, a, n, 8e-3, 1e-4), worst(g2, g1, n, 8e-3, 1e-4),
                             worst(st_g, st_c, (size_t)N * (rms ? 1 : 2), RTOL, ATOL),
                             worst(wg, wc, (size_t)C, RTOL, ATOL), rms ? 0 : worst(bg, bc, (size_t)C, RTOL, ATOL),
                             worst(wf, wc, (size_t)C, RTOL, ATOL), rms ? 0 : worst(bf, bc, (size_t)C, RTOL, ATOL)};
        for (int k = 0; k < 7; k++)
            worst_e = e[k] > worst_e || isnan(e[k]) ? e[k] : worst_e;
        free(xf), free(wf), free(bf);
        merak_cuda_free(d_y), merak_cuda_free(d_dx), merak_cuda_free(d_st), merak_cuda_free(d_dw), merak_cuda_free(d_db);
        free(yc), free(yg), free(xc), free(xg), free(st_c), free(st_g), free(wc), free(bc), free(wg), free(bg);
        free(a), free(a2), free(g1), free(g2);
    }
    tap_ok(worst_e <= 1, "layernorm16 and rmsnorm16 N=%d C=%d (input gradients added to and, acc 0, written over "
           "NaN; the backward's two parts apart and in one call, dx the same bits; a residual add and the norm "
           "in one call, the same bits): within %.2f of the tolerance",
           N, C, worst_e);
    merak_cuda_free(d_x), merak_cuda_free(d_w), merak_cuda_free(d_b), merak_cuda_free(d_d);
    free(x), free(w), free(b), free(d), free(dx0), free(dw0), free(scratch);
}

/* The attention's bf16 entries against the CPU's (its float kernels on the
 * widened values): cuDNN's fused attention on q, k, v as they are (a fused
 * qkv row's strides, or dense), out, the input gradients (accumulated into
 * random values, or with `zero` into zeros) and lse within BF16's
 * tolerance (cuDNN rounds the probabilities, and with RoPE the rotated q
 * and k, to bf16), the rotated qr, kr within fp32's; two GPU runs bitwise
 * equal.  misalign: lse one float off 16 bytes (its copy through
 * scratch).  A shape cuDNN does not take (head_dim 5) is not supported. */
static void test_attention16(const char *tag, int B, int T, int nh, int nkv, int hd, merak_rope rope, int fused,
                             int misalign, int zero)
{
    merak_attn_shape s = {.B = B, .T = T, .n_head = nh, .n_kv_head = nkv, .head_dim = hd, .rope = rope};
    const size_t BT = (size_t)B * T, C = (size_t)nh * hd, Ckv = (size_t)nkv * hd, W = C + 2 * Ckv;
    const size_t nq = BT * C, nkv_ = BT * Ckv, nl = (size_t)B * nh * T, nall = BT * W;
    s.q_stride = fused ? (int)W : (int)C;
    s.k_stride = s.v_stride = fused ? (int)W : (int)Ckv;
    g_gpu->set_products(MERAK_PRODUCTS_BF16);
    if (!g_gpu->attention16_supported(&s)) {
#ifdef HAVE_CUDNN_ATTN
        if (!merak_cudnn_attn_loadable())
            tap_ok(1, "attention16 %s # SKIP cuDNN cannot be loaded on this machine", tag);
        else
            tap_ok(hd % 8 != 0, "attention16 %s: cuDNN's way %s the shape (head_dim %d)", tag,
                   hd % 8 ? "refuses" : "wrongly refuses", hd);
#else
        tap_ok(1, "attention16 %s # SKIP this build has no cuDNN attention", tag);
#endif
        g_gpu->set_products(MERAK_PRODUCTS_FP32);
        return;
    }
    /* q, k, v in one buffer: a fused row's column blocks, or three dense blocks */
    const size_t ko = fused ? C : nq, vo = fused ? C + Ckv : nq + nkv_;
    uint16_t *qkv = rand_bf16(nall, -1, 1), *dout = rand_bf16(nq, -1, 1), *dqkv0 = rand_bf16(nall, -1, 1);
    if (zero)   /* 1: gradients from zero; 2: acc 0 over NaN (written, never read) */
        memset(dqkv0, zero == 2 ? 0xff : 0, nall * 2);
    const int acc = zero != 2;
    const size_t n16 = 2 * (2 * (nq + 16) + 2 * (nkv_ + 16));
    float *ascr = xmalloc((g_cpu->attention16_scratch_elems(&s) + 1) * 4), *scr = xmalloc(n16 * 4);
    uint16_t *out_c = xmalloc(nq * 2), *dqkv_c = xmalloc(nall * 2);
    float *lse_c = xmalloc(nl * 4), *qr_c = xmalloc(nq * 4), *kr_c = xmalloc(nkv_ * 4);
    memcpy(dqkv_c, dqkv0, nall * 2);
    g_cpu->attention16_fwd(&s, out_c, lse_c, qr_c, kr_c, qkv, qkv + ko, qkv + vo, ascr, scr);
    g_cpu->attention16_bwd(&s, dqkv_c, dqkv_c + ko, dqkv_c + vo, dout, out_c, lse_c, qr_c, kr_c, qkv, qkv + ko,
                           qkv + vo, ascr, scr, acc);
    uint16_t *out_g[2], *dqkv_g[2];
    float *lse_g[2], *qr_g = xmalloc(nq * 4), *kr_g = xmalloc(nkv_ * 4);
    uint16_t *d_qkv = to_dev(qkv, nall * 2), *d_dout = to_dev(dout, nq * 2);
    float *d_ascr = dmalloc(g_gpu->attention16_scratch_elems(&s) * 4);
    for (int r = 0; r < 2; r++) {
        uint16_t *d_out = dmalloc(nq * 2), *d_dqkv = to_dev(dqkv0, nall * 2);
        float *d_lse = dmalloc((nl + 4) * 4), *d_qr = dmalloc(nq * 4), *d_kr = dmalloc(nkv_ * 4);
        float *lse = d_lse + (misalign ? 1 : 0);
        merak_cuda_memset(d_out, 0xff, nq * 2);   /* NaN: every element must be written */
        merak_cuda_memset(d_lse, 0xff, (nl + 4) * 4);
        g_gpu->attention16_fwd(&s, d_out, lse, d_qr, d_kr, d_qkv, d_qkv + ko, d_qkv + vo, d_ascr, NULL);
        g_gpu->attention16_bwd(&s, d_dqkv, d_dqkv + ko, d_dqkv + vo, d_dout, d_out, lse, d_qr, d_kr, d_qkv,
                               d_qkv + ko, d_qkv + vo, d_ascr, NULL, acc);
        out_g[r] = xmalloc(nq * 2), dqkv_g[r] = xmalloc(nall * 2), lse_g[r] = xmalloc(nl * 4);
        merak_cuda_memcpy_d2h(out_g[r], d_out, nq * 2);
        merak_cuda_memcpy_d2h(dqkv_g[r], d_dqkv, nall * 2);
        merak_cuda_memcpy_d2h(lse_g[r], lse, nl * 4);
        if (rope.theta > 0) {
            merak_cuda_memcpy_d2h(qr_g, d_qr, nq * 4);
            merak_cuda_memcpy_d2h(kr_g, d_kr, nkv_ * 4);
        }
        merak_cuda_free(d_out), merak_cuda_free(d_dqkv), merak_cuda_free(d_lse), merak_cuda_free(d_qr);
        merak_cuda_free(d_kr);
    }
    float *oc = widened(out_c, nq), *og = widened(out_g[0], nq), *gc = widened(dqkv_c, nall),
          *gg = widened(dqkv_g[0], nall);
    const double e_out = worst(og, oc, nq, RTOL_BF16, ATOL_BF16), e_g = worst(gg, gc, nall, RTOL_BF16, ATOL_BF16),
                 e_lse = worst(lse_g[0], lse_c, nl, RTOL_BF16, ATOL_BF16),
                 e_r = rope.theta > 0 ? fmax(worst(qr_g, qr_c, nq, RTOL, ATOL), worst(kr_g, kr_c, nkv_, RTOL, ATOL))
                                      : 0;
    const int same = !memcmp(out_g[0], out_g[1], nq * 2) && !memcmp(dqkv_g[0], dqkv_g[1], nall * 2) &&
                     !memcmp(lse_g[0], lse_g[1], nl * 4);
    tap_ok(e_out <= 1 && e_g <= 1 && e_lse <= 1 && e_r <= 1 && same,
           "attention16 %s B=%d T=%d heads %d/%d of %d%s%s%s: out %.2f, dq dk dv %.2f, lse %.2f, rotated %.2f of the "
           "tolerance; repeatable %d", tag, B, T, nh, nkv, hd, fused ? ", fused qkv" : "",
           misalign ? ", lse misaligned" : "", zero == 2 ? ", acc 0 over NaN" : zero ? ", gradients from zero" : "",
           e_out, e_g, e_lse, e_r, same);
    for (int r = 0; r < 2; r++)
        free(out_g[r]), free(dqkv_g[r]), free(lse_g[r]);
    free(oc), free(og), free(gc), free(gg), free(qr_g), free(kr_g);
    merak_cuda_free(d_qkv), merak_cuda_free(d_dout), merak_cuda_free(d_ascr);
    free(qkv), free(dout), free(dqkv0), free(ascr), free(scr), free(out_c), free(dqkv_c), free(lse_c), free(qr_c);
    free(kr_c);
    g_gpu->set_products(MERAK_PRODUCTS_FP32);
}

int main(void)
{
    if (!merak_cuda_available()) {
        printf("1..0 # SKIP no CUDA device\n");
        return 0;
    }
    g_gpu = merak_kernels_cuda();
    if (!g_gpu) {
        char err[256] = "unknown error";
        merak_cuda_status(err, sizeof err);
        printf("not ok 1 - CUDA backend initialises: %s\n1..1\n", err);
        return 1;
    }
    g_cpu = merak_kernels_cpu();
    const char *seed = getenv("MERAK_TEST_SEED");
    if (seed)
        g_rng = strtoull(seed, NULL, 10);
    tap_diag("seed %llu", (unsigned long long)g_rng);
    tap_ok(g_gpu->name && !strcmp(g_gpu->name, "cuda"), "table name is \"cuda\"");

    test_embedding(37, 50, 11, 0);
    test_embedding(60, 20, 7, 5); /* a shard: ids before and after it */
    test_embedding(700, 33, 40, 0); /* long runs of equal ids; C not whole vectors */
    test_embedding(700, 40, 40, 5); /* long runs, 16 bytes a load */
    test_posemb(3, 5, 40, 7);       /* 16 bytes a load */
    test_posemb(3, 5, 30, 7);       /* an element a thread */

    test_layernorm(300, 70, 1); /* two column chunks; rows off 16 bytes: a block a row */
    test_layernorm(5, 1000, 0); /* C > block; whole vectors: a warp a row (rowwise.h) */
    test_layernorm(70, 768, 1); /* GPT-2's width, 6 vectors of a lane's 8 */
    test_rmsnorm(300, 70);
    test_rmsnorm(5, 1000);
    test_rmsnorm(9, 2048);      /* LLaMA 1B's width: 16 vectors a lane, a block a row */

    test_linear_sets("");
    test_attention_sets("");
    static const merak_cuda_attn_path ways[] = {MERAK_CUDA_ATTN_FUSED, MERAK_CUDA_ATTN_PRODUCTS};
    for (int w = 0; w < 2; w++) {
        merak_cuda_set_attention_paths(ways[w], ways[w]);
        test_attention_sets(w ? "[products] " : "[fused] ");
    }
    merak_cuda_set_attention_paths(MERAK_CUDA_ATTN_AUTO, MERAK_CUDA_ATTN_AUTO);
    test_math(MERAK_PRODUCTS_TF32, "tf32", RTOL_TF32, ATOL_TF32);
    test_round_bf16();
    test_attention_cached("gpt2-token", 2, 1, 37, 3, 3, 8, ROPE(0.0f), 1);
    test_attention_cached("llama-prompt", 1, 19, 0, 4, 2, 16, ROPE(10000.0f), 0);
    test_attention_cached("llama-token", 3, 1, 200, 6, 2, 64, ROPE(500000.0f), 0);
    test_attention_cached("chunk", 2, 33, 70, 4, 1, 96, ROPE(10000.0f), 1);
    test_attention_cached("odd-head", 2, 3, 11, 3, 3, 5, ROPE(0.0f), 1);
    test_attention_cached("llama3-scaled", 1, 1, 150, 4, 2, 64, LLAMA3_ROPE, 0);

    test_pointwise(100003);
    test_crossentropy(9, 1000, 0);
    test_crossentropy(3, 50257, 0);
    test_crossentropy(7, 300, 100);
    test_adamw(1000);
    test_adamw(1003);               /* spans off 16 bytes, a tail of 1 */
    /* bf16 storage's entries (new, unmeasured: after the others) */
    test_embedding16(37, 50, 11, 0);
    test_embedding16(700, 64, 40, 5);
    test_linear16(64, 768, 2304, 2304, 1);   /* GPT-2's qkv */
    test_linear16(40, 64, 96, 96, 2);
    test_linear16(33, 48, 80, 80, 0);
    test_linear16(8, 0, 24, 24, 1);          /* K = 0: the bias alone */
    test_norms16(300, 70);
    test_norms16(5, 1000);
    test_norms16(70, 768);      /* GPT-2's width: 3 vectors of a lane's 4 */
    test_norms16(9, 2048);      /* LLaMA 1B's: 8 vectors a lane */
    test_norms16(16500, 64);    /* the one-pass backward's chunks past RW_NB_CHUNKS: bigger ones */
    test_pointwise16(100003, 0, 0);
    test_pointwise16(4003, 3, 0);       /* 6-byte offset: a head of 5, then vectorised */
    test_pointwise16(4000, 8, 0);       /* 16-byte offset: vectorised from the start */
    test_pointwise16(4001, 0, 1);       /* outputs 2 bytes off the inputs: one at a time */
    test_crossentropy16(9, 1000, 1000, 0);
    test_crossentropy16(7, 50257, 50257, 100);
    test_crossentropy16(7, 50257, 50264, 100);   /* GPT-2's padded logits */
    test_crossentropy16(5, 13, 16, 3);
    test_crossentropy16(3, 128256, 128256, 0);   /* a row past a block's shared memory: one pass falls back to two */
    test_linear16(37, 53, 29, 29, 1);        /* odd leading dimensions: rows 2-byte aligned */
    /* the executor's padded logits: rows of O a multiple of 8 apart */
    test_linear16(37, 53, 29, 32, 0);
    test_linear16(64, 768, 50257, 50264, 0); /* GPT-2's head */
    test_linear16(9, 0, 13, 16, 0);          /* K = 0: zeros, padding kept */
    test_linear16_gelu(64, 96, 384, 96, 1);     /* an MLP's two layers, rows on 16 bytes */
    test_linear16_gelu(64, 96, 384, 96, 0);
    test_linear16_gelu(256, 768, 3072, 768, 1); /* GPT-2's, 256 rows */
    test_linear16_gelu(33, 40, 100, 36, 1);     /* rows off 16 bytes: the epilogues refused, composed */
    test_gemm_probe(256, 768, 2304);
    test_linear16_tuned(512, 768, 3072);
    /* last: an error is the backend's for good, and cuDNN's attention
     * (bf16's) is the newest path */
    test_math(MERAK_PRODUCTS_BF16, "bf16", RTOL_BF16, ATOL_BF16);
    /* cuDNN's attention on bf16 storage, the newest */
    test_attention16("gpt2", 2, 64, 4, 4, 64, ROPE(0.0f), 1, 0, 1);
    test_attention16("gpt2", 1, 33, 2, 2, 64, ROPE(0.0f), 1, 0, 0);
    test_attention16("llama-gqa", 2, 80, 4, 2, 64, LLAMA3_ROPE, 0, 1, 0);
    test_attention16("gqa-rope-fused", 1, 70, 4, 1, 32, ROPE(500000.0f), 1, 0, 1);
    test_attention16("odd-head", 1, 9, 2, 2, 5, ROPE(0.0f), 1, 0, 0);
    test_attention16("gpt2", 2, 64, 4, 4, 64, ROPE(0.0f), 1, 0, 2);
    test_attention16("llama-gqa", 2, 80, 4, 2, 64, LLAMA3_ROPE, 0, 0, 2);
    test_attention16("gpt2-dense", 1, 33, 2, 2, 64, ROPE(0.0f), 0, 0, 2);

    char err[256] = "";
    tap_ok(merak_cuda_status(err, sizeof err) == 0, "no CUDA error recorded %s", err);
    return tap_done();
}
