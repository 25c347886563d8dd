/*
 * bench_cuda_ops.c - times the CUDA kernel table's GEMM-heavy ops at GPT-2
 * 124M's shapes (the linear layers at N = B*T token rows, causal attention),
 * for bench_cuda_ops.sh, which times PyTorch on the same shapes.
 *
 * Each op runs once to warm up (cuBLASLt's heuristic, module load), then is
 * repeated until a sample lasts MIN_MS; the median of REPS samples is printed
 * as one line:
 *     op=linear_fwd layer=qkv math=fp32 shape=N,K,O ms=... tflops=...
 *     op=attention_bwd math=tf32 path=products shape=B,T,nh,hd ms=... tflops=...
 * Every row runs with FP32 products (math=fp32) and with TF32's
 * (merak_cuda_set_tf32, --dtype tf32); attention also takes each of its
 * ways (merak_cuda_set_attention_paths: fused kernels, cuBLASLt products).
 * FLOPs: 2*N*K*O per linear op; attention counts the causal half that the
 * model needs (2*B*nh*T*T*hd forward, twice that backward), whatever a
 * kernel actually computes.  Inputs are random in [-1,1), never zeros.
 *
 * Usage: bench_cuda_ops [--batch B] [--seq-len T] [--reps R] [--min-ms MS]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_kernels.h"
#include "kernels.h"
#include "mix64.h"

static int g_reps = 5;
static double g_min_ms = 50;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const char *what)
{
    char err[256] = "";
    merak_cuda_status(err, sizeof err);
    fprintf(stderr, "bench_cuda_ops: %s%s%s\n", what, *err ? ": " : "", err);
    exit(1);
}

/* A device buffer of n floats, random in [-1,1). */
static float *drand(size_t n, uint64_t seed)
{
    float *h = malloc(n * sizeof *h), *d = merak_cuda_malloc(n * sizeof *d);
    if (!h || !d)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((double)(merak_mix64(seed + i) >> 11) / 9007199254740992.0 * 2 - 1);
    if (merak_cuda_memcpy_h2d(d, h, n * sizeof *d) < 0)
        die("copy");
    free(h);
    return d;
}

typedef void (*op_fn)(const void *arg);

/* median ms of one call of fn */
static double timeit(op_fn fn, const void *arg)
{
    double s[64];
    fn(arg);
    if (merak_cuda_synchronize() < 0)
        die("warm-up");
    for (int r = 0; r < g_reps && r < 64; r++) {
        int n = 0;
        double t0 = now_ms(), t;
        do {
            fn(arg);
            n++;
            if (merak_cuda_synchronize() < 0)
                die("timed call");
            t = now_ms() - t0;
        } while (t < g_min_ms);
        s[r] = t / n;
    }
    for (int i = 1; i < g_reps; i++) /* insertion sort */
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double x = s[j];
            s[j] = s[j - 1], s[j - 1] = x;
        }
    return s[g_reps / 2];
}

static const merak_kernels *g_k;

typedef struct {
    int N, K, O;
    float *inp, *w, *out, *dout, *dinp, *dw;
} lin_arg;

static void lin_fwd(const void *p)
{
    const lin_arg *a = p;
    g_k->linear_fwd(a->out, a->inp, a->w, NULL, a->N, a->K, a->O);
}
static void lin_bwd_x(const void *p)
{
    const lin_arg *a = p;
    g_k->linear_bwd_x(a->dinp, a->dout, a->w, a->N, a->K, a->O);
}
static void lin_bwd_w(const void *p)
{
    const lin_arg *a = p;
    g_k->linear_bwd_w(a->dw, NULL, a->dout, a->inp, a->N, a->K, a->O);
}

static const char *g_math = "fp32";   /* the products' arithmetic, for the lines */

static void bench_linear(const char *name, int N, int K, int O)
{
    lin_arg a = {N, K, O, drand((size_t)N * K, 1), drand((size_t)O * K, 2),
                 drand((size_t)N * O, 3), drand((size_t)N * O, 4), drand((size_t)N * K, 5),
                 drand((size_t)O * K, 6)};
    const double fl = 2.0 * N * K * O;
    struct { const char *op; op_fn fn; } ops[] = {
        {"linear_fwd", lin_fwd}, {"linear_bwd_x", lin_bwd_x}, {"linear_bwd_w", lin_bwd_w}};
    for (int i = 0; i < 3; i++) {
        const double ms = timeit(ops[i].fn, &a);
        printf("op=%s layer=%s math=%s shape=%d,%d,%d ms=%.4f tflops=%.2f\n", ops[i].op, name, g_math, N,
               K, O, ms, fl / ms / 1e9);
        fflush(stdout);
    }
    float *bufs[] = {a.inp, a.w, a.out, a.dout, a.dinp, a.dw};
    for (int i = 0; i < 6; i++)
        merak_cuda_free(bufs[i]);
}

typedef struct {
    merak_attn_shape s;
    float *qkv, *out, *lse, *dout, *dqkv, *scratch;
} attn_arg;

static void attn_fwd(const void *p)
{
    const attn_arg *a = p;
    const int C = a->s.n_head * a->s.head_dim;
    g_k->attention_fwd(&a->s, a->out, a->lse, NULL, NULL, a->qkv, a->qkv + C, a->qkv + 2 * C, a->scratch);
}
static void attn_bwd(const void *p)
{
    const attn_arg *a = p;
    const int C = a->s.n_head * a->s.head_dim;
    g_k->attention_bwd(&a->s, a->dqkv, a->dqkv + C, a->dqkv + 2 * C, a->dout, a->lse, NULL,
                       NULL, a->qkv, a->qkv + C, a->qkv + 2 * C, a->scratch);
}

static void bench_attention(int B, int T, int nh, int hd, merak_cuda_attn_path path)
{
    merak_cuda_set_attention_paths(path, path);   /* before the scratch is sized */
    const char *pname = path == MERAK_CUDA_ATTN_FUSED ? "fused" : "products";
    const int C = nh * hd;
    attn_arg a;
    memset(&a, 0, sizeof a);
    a.s = (merak_attn_shape){.B = B, .T = T, .n_head = nh, .n_kv_head = nh, .head_dim = hd,
                             .q_stride = 3 * C, .k_stride = 3 * C, .v_stride = 3 * C};
    const size_t BT = (size_t)B * T;
    a.qkv = drand(BT * 3 * C, 7);
    a.out = drand(BT * C, 8);
    a.lse = drand((size_t)B * nh * T, 9);   /* the forward, timed first, writes it */
    a.dout = drand(BT * C, 10);
    a.dqkv = drand(BT * 3 * C, 11);
    a.scratch = drand(g_k->attention_scratch_elems(&a.s), 12);
    const double fl = 2.0 * B * nh * (double)T * T * hd; /* causal: half of 4*B*nh*T*T*hd */
    const double f = timeit(attn_fwd, &a), b = timeit(attn_bwd, &a);
    printf("op=attention_fwd math=%s path=%s shape=%d,%d,%d,%d ms=%.4f tflops=%.2f\n", g_math, pname, B, T,
           nh, hd, f, fl / f / 1e9);
    printf("op=attention_bwd math=%s path=%s shape=%d,%d,%d,%d ms=%.4f tflops=%.2f\n", g_math, pname, B, T,
           nh, hd, b, 2 * fl / b / 1e9);
    fflush(stdout);
    float *bufs[] = {a.qkv, a.out, a.lse, a.dout, a.dqkv, a.scratch};
    for (int i = 0; i < 6; i++)
        merak_cuda_free(bufs[i]);
    merak_cuda_set_attention_paths(MERAK_CUDA_ATTN_AUTO, MERAK_CUDA_ATTN_AUTO);
}

int main(int argc, char **argv)
{
    int B = 8, T = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq-len"))
            T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            g_reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-ms"))
            g_min_ms = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_cuda_ops [--batch B] [--seq-len T] [--reps R] [--min-ms MS]\n");
            return 2;
        }
    }
    if (B < 1 || T < 1 || g_reps < 1 || g_reps > 64 || g_min_ms < 0) {
        fprintf(stderr, "bench_cuda_ops: --batch, --seq-len, --reps (1..64) out of range\n");
        return 2;
    }
    if (!merak_cuda_available() || !(g_k = merak_kernels_cuda()))
        die("no usable CUDA device");
    const int N = B * T;
    for (int tf32 = 0; tf32 < 2; tf32++) {
        merak_cuda_set_tf32(tf32);
        g_math = tf32 ? "tf32" : "fp32";
        bench_linear("peak", 8192, 8192, 8192);
        bench_linear("qkv", N, 768, 2304);
        bench_linear("attn_proj", N, 768, 768);
        bench_linear("mlp_fc", N, 768, 3072);
        bench_linear("mlp_proj", N, 3072, 768);
        bench_linear("lm_head", N, 768, 50257);
        for (int p = 0; p < 2; p++) {
            const merak_cuda_attn_path path = p ? MERAK_CUDA_ATTN_PRODUCTS : MERAK_CUDA_ATTN_FUSED;
            bench_attention(B, T, 12, 64, path);
            bench_attention(B > 4 ? B / 4 : 1, 4 * T, 12, 64, path);
        }
    }
    return merak_cuda_status(NULL, 0) ? 1 : 0;
}
