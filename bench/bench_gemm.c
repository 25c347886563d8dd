/*
 * bench_gemm.c - the kernel table's linear ops against raw cblas_sgemm.
 *
 * For the GEMM-heavy layers of gpt2 (124M), demo-gpt2 and demo-llama at
 * N = B*T = 1024 token rows, times
 *     linear_fwd    out (N,O)  = inp (N,K) @ w (O,K)^T
 *     linear_bwd_x  dinp (N,K) += dout (N,O) @ w (O,K)
 *     linear_bwd_w  dw (O,K)   += dout^T @ inp
 * through merak_kernels_cpu() (bias and bias gradient NULL, so both sides do
 * exactly one GEMM), and the equivalent single cblas_sgemm call on the same
 * buffers, in the same process, with the same thread count:
 *   - kernel table: merak_kernels_cpu_set_threads(K) - K OpenMP threads, each
 *     running single-threaded OpenBLAS calls on 128x256 output tiles;
 *   - raw sgemm:    openblas_set_num_threads(K) - one OpenBLAS call, threaded
 *     by OpenBLAS itself.
 * With K > 1 the program sleeps 0.3 s whenever it switches between the two,
 * so that neither runtime's spinning idle threads slow the other down.
 * Each figure is the median over REPS samples (default 3) after one warm-up
 * call; a sample repeats the call until it lasts at least MIN_MS (default
 * 100 ms).  GFLOP/s counts 2*N*K*O flops per call.  A first line gives
 * sgemm's rate on a 2048^3 square (NoTrans/NoTrans) as the machine's
 * reference peak, and every shape is checked once: kernel and sgemm results
 * must agree to 1e-4 (relative to the largest magnitude).
 *
 * Build (from the repository root, against a build in /tmp/benchbuild):
 *   gcc -O2 -std=c11 -Ikernels -I/usr/include/x86_64-linux-gnu/openblas-pthread \
 *       bench/bench_gemm.c -o /tmp/bench_gemm \
 *       -L/tmp/benchbuild/.libs -Wl,-rpath,/tmp/benchbuild/.libs -lmerak \
 *       -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas -lm
 *
 * Usage: bench_gemm [--threads K] [--reps R] [--min-ms MS] [--model NAME]...
 *   NAME: gpt2, demo-gpt2, demo-llama, peak (default: all of them)
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

typedef struct shape {
    const char *model, *layer;
    int N, K, O;
} shape;

static const shape shapes[] = {
    {"demo-gpt2", "qkv", 1024, 192, 576},
    {"demo-gpt2", "attn_proj", 1024, 192, 192},
    {"demo-gpt2", "fc", 1024, 192, 768},
    {"demo-gpt2", "mlp_proj", 1024, 768, 192},
    {"demo-gpt2", "lm_head", 1024, 192, 256},
    {"demo-llama", "q_proj", 1024, 192, 192},
    {"demo-llama", "k_proj", 1024, 192, 64},
    {"demo-llama", "gate_proj", 1024, 192, 512},
    {"demo-llama", "down_proj", 1024, 512, 192},
    {"demo-llama", "lm_head", 1024, 192, 256},
    {"gpt2", "qkv", 1024, 768, 2304},
    {"gpt2", "attn_proj", 1024, 768, 768},
    {"gpt2", "fc", 1024, 768, 3072},
    {"gpt2", "mlp_proj", 1024, 3072, 768},
    {"gpt2", "lm_head", 1024, 768, 50257},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

enum { OP_FWD, OP_BWD_X, OP_BWD_W, NOPS };
static const char *op_names[NOPS] = {"fwd", "bwd_x", "bwd_w"};

static int nthreads = 1, reps = 3;
static double min_ms = 100;
static const merak_kernels *kt;

/* the buffers of one shape */
typedef struct bufs {
    float *inp, *w, *out, *dout, *dinp, *dw;
} bufs;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_rand(size_t n, unsigned *seed)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = ((float)(*seed >> 8) * 0x1.0p-24f - 0.5f) * 0.2f;
    }
    return p;
}

static void run_op(int op, int raw, const shape *s, bufs *b)
{
    const int N = s->N, K = s->K, O = s->O;
    if (!raw) {
        switch (op) {
        case OP_FWD: kt->linear_fwd(b->out, b->inp, b->w, NULL, N, K, O); break;
        case OP_BWD_X: kt->linear_bwd_x(b->dinp, b->dout, b->w, N, K, O, 1); break;
        case OP_BWD_W: kt->linear_bwd_w(b->dw, NULL, b->dout, b->inp, N, K, O); break;
        }
        return;
    }
    switch (op) {
    case OP_FWD: /* out (N,O) = inp (N,K) @ w (O,K)^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, K, 1.0f, b->inp, K, b->w,
                    K, 0.0f, b->out, O);
        break;
    case OP_BWD_X: /* dinp (N,K) += dout (N,O) @ w (O,K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, K, O, 1.0f, b->dout, O, b->w,
                    K, 1.0f, b->dinp, K);
        break;
    case OP_BWD_W: /* dw (O,K) += dout^T (O,N) @ inp (N,K) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, K, N, 1.0f, b->dout, O, b->inp,
                    K, 1.0f, b->dw, K);
        break;
    }
}

/* Who runs the GEMMs: the kernel table pins OpenBLAS to one thread under K
 * OpenMP threads; raw sgemm gets K OpenBLAS threads. */
static void set_mode(int raw)
{
    static int cur = -1;
    if (raw)
        openblas_set_num_threads(nthreads);
    else
        merak_kernels_cpu_set_threads(nthreads);
    if (raw != cur && nthreads > 1) {
        /* Let the other runtime's idle threads stop spinning first (OpenBLAS
         * workers spin for about 0.1 s after a call, OpenMP workers for a
         * while after a parallel region): with both pools awake, 2 cores run
         * 3+ threads and the OpenMP barriers of the kernel table stall for
         * whole scheduler slices. */
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    cur = raw;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median seconds per call */
typedef void (*call_fn)(void *ctx);

static double time_call(call_fn f, void *ctx)
{
    double t0 = now_s();
    f(ctx); /* warm-up, also sizes the samples */
    double one = now_s() - t0;
    int iters = one > 0 ? (int)ceil(min_ms * 1e-3 / one) : 1;
    if (iters < 1)
        iters = 1;
    double *samp = malloc((size_t)reps * sizeof *samp);
    for (int r = 0; r < reps; r++) {
        t0 = now_s();
        for (int i = 0; i < iters; i++)
            f(ctx);
        samp[r] = (now_s() - t0) / iters;
    }
    qsort(samp, (size_t)reps, sizeof *samp, cmp_double);
    double med = reps % 2 ? samp[reps / 2] : 0.5 * (samp[reps / 2 - 1] + samp[reps / 2]);
    free(samp);
    return med;
}

typedef struct op_ctx {
    int op, raw;
    const shape *s;
    bufs *b;
} op_ctx;

static void op_call(void *p)
{
    op_ctx *c = p;
    run_op(c->op, c->raw, c->s, c->b);
}

typedef struct sq_ctx {
    int n;
    float *a, *b, *c;
} sq_ctx;

static void sq_call(void *p)
{
    sq_ctx *c = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->n, c->n, c->n, 1.0f, c->a, c->n,
                c->b, c->n, 0.0f, c->c, c->n);
}

/* result of op for a check: zeroed outputs, one call; returns the output */
static const float *check_out(int op, int raw, const shape *s, bufs *b, size_t *n)
{
    size_t no = (size_t)s->N * s->O, ni = (size_t)s->N * s->K, nw = (size_t)s->O * s->K;
    set_mode(raw);
    switch (op) {
    case OP_FWD: memset(b->out, 0, no * sizeof(float)); *n = no; break;
    case OP_BWD_X: memset(b->dinp, 0, ni * sizeof(float)); *n = ni; break;
    default: memset(b->dw, 0, nw * sizeof(float)); *n = nw; break;
    }
    run_op(op, raw, s, b);
    return op == OP_FWD ? b->out : op == OP_BWD_X ? b->dinp : b->dw;
}

static int bench_shape(const shape *s)
{
    unsigned seed = 12345;
    const size_t N = (size_t)s->N, K = (size_t)s->K, O = (size_t)s->O;
    bufs b = {
        .inp = alloc_rand(N * K, &seed), .w = alloc_rand(O * K, &seed),
        .out = alloc_rand(N * O, &seed), .dout = alloc_rand(N * O, &seed),
        .dinp = alloc_rand(N * K, &seed), .dw = alloc_rand(O * K, &seed),
    };
    int bad = 0;
    const double gflop = 2.0 * (double)N * (double)K * (double)O * 1e-9;
    for (int op = 0; op < NOPS; op++) {
        /* correctness: the two sides compute the same thing */
        size_t n;
        const float *r = check_out(op, 1, s, &b, &n);
        float *ref = malloc(n * sizeof *ref);
        memcpy(ref, r, n * sizeof *ref);
        const float *k = check_out(op, 0, s, &b, &n);
        double maxabs = 0, maxdiff = 0;
        for (size_t i = 0; i < n; i++) {
            maxabs = fmax(maxabs, fabs(ref[i]));
            maxdiff = fmax(maxdiff, fabs((double)ref[i] - k[i]));
        }
        free(ref);
        double rel = maxabs > 0 ? maxdiff / maxabs : maxdiff;
        if (rel > 1e-4) {
            fprintf(stderr, "bench_gemm: %s %s %s: kernel and sgemm differ (rel %.3g)\n",
                    s->model, s->layer, op_names[op], rel);
            bad = 1;
        }

        double t[2];
        for (int raw = 0; raw < 2; raw++) {
            op_ctx c = {op, raw, s, &b};
            set_mode(raw);
            t[raw] = time_call(op_call, &c);
        }
        double gk = gflop / t[0], gs = gflop / t[1];
        printf("bench_gemm threads=%d model=%s layer=%s N=%d K=%d O=%d op=%s "
               "kernel_gflops=%.1f sgemm_gflops=%.1f ratio=kernel/sgemm=%.3f kernel_ms=%.3f sgemm_ms=%.3f\n",
               nthreads, s->model, s->layer, s->N, s->K, s->O, op_names[op], gk, gs, gk / gs,
               t[0] * 1e3, t[1] * 1e3);
        fflush(stdout);
    }
    free(b.inp); free(b.w); free(b.out); free(b.dout); free(b.dinp); free(b.dw);
    return bad;
}

static void bench_peak(void)
{
    unsigned seed = 777;
    const int n = 2048;
    sq_ctx c = {n, alloc_rand((size_t)n * n, &seed), alloc_rand((size_t)n * n, &seed),
                alloc_rand((size_t)n * n, &seed)};
    set_mode(1);
    double t = time_call(sq_call, &c);
    printf("bench_gemm threads=%d peak sgemm M=N=K=%d gflops=%.1f ms=%.3f\n", nthreads, n,
           2.0 * n * (double)n * n * 1e-9 / t, t * 1e3);
    fflush(stdout);
    free(c.a); free(c.b); free(c.c);
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "Usage: bench_gemm [--threads K] [--reps R] [--min-ms MS] [--model NAME]...\n"
               "  NAME: gpt2, demo-gpt2, demo-llama, peak (default: all)\n");
    return rc;
}

int main(int argc, char **argv)
{
    const char *only[8];
    int nonly = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--help") == 0)
            return usage(stdout, 0);
        if (!v)
            return usage(stderr, 2);
        if (strcmp(argv[i], "--threads") == 0)
            nthreads = atoi(v);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(v);
        else if (strcmp(argv[i], "--min-ms") == 0)
            min_ms = atof(v);
        else if (strcmp(argv[i], "--model") == 0 && nonly < 8)
            only[nonly++] = v;
        else
            return usage(stderr, 2);
        i++;
    }
    if (nthreads < 1 || reps < 1 || !(min_ms >= 0))
        return usage(stderr, 2);

    kt = merak_kernels_cpu();
    printf("# bench_gemm: %d thread(s), median of %d samples of >= %.0f ms, OpenBLAS %s (core %s)\n",
           nthreads, reps, min_ms, openblas_get_config(), openblas_get_corename());

    int want_peak = nonly == 0, bad = 0;
    for (int j = 0; j < nonly; j++)
        want_peak |= strcmp(only[j], "peak") == 0;
    if (want_peak)
        bench_peak();
    for (int i = 0; i < NSHAPES; i++) {
        int want = nonly == 0;
        for (int j = 0; j < nonly; j++)
            want |= strcmp(only[j], shapes[i].model) == 0;
        if (want)
            bad |= bench_shape(&shapes[i]);
    }
    return bad;
}
