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
 * Every row runs with FP32 products (math=fp32), TF32's (--dtype tf32) and
 * BF16's (--dtype bf16; merak_cuda_set_products); attention also takes each of its
 * ways (merak_cuda_set_attention_paths: fused kernels, cuBLASLt products,
 * and with BF16 cuDNN's fused attention where built; its rows include
 * the conversions to and from bf16).
 * FLOPs: 2*N*K*O per linear op; attention counts the causal half that the
 * model needs (2*B*nh*T*T*hd forward, twice that backward), whatever a
 * kernel actually computes.  Inputs are random in [-1,1), never zeros.
 *
 * Then the memory-bound entries (embeddings, norms, elementwise ops,
 * cross-entropy, AdamW, sumsq, scale) at the same shapes, as "roofline"
 * rows against a device-to-device copy (see the roofline section below),
 * to --roofline FILE, else on stdout after the others but cuDNN's
 * attention rows, which come last (an error there stays the backend's).
 *
 * Usage: bench_cuda_ops [--batch B] [--seq-len T] [--reps R] [--min-ms MS]
 *                       [--roofline FILE]
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h" /* HAVE_CUDNN_ATTN */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_kernels.h"
#ifdef HAVE_CUDNN_ATTN
#include "cuda/cudnn_attn.h" /* merak_cudnn_attn_takes: whether cuDNN's path is what runs */
#endif
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
    g_k->linear_bwd_x(a->dinp, a->dout, a->w, a->N, a->K, a->O, 1);
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
    g_k->attention_bwd(&a->s, a->dqkv, a->dqkv + C, a->dqkv + 2 * C, a->dout, a->out, a->lse, NULL,
                       NULL, a->qkv, a->qkv + C, a->qkv + 2 * C, a->scratch, 1);
}

static void bench_attention(int B, int T, int nh, int hd, merak_cuda_attn_path path)
{
    merak_cuda_set_attention_paths(path, path);   /* before the scratch is sized */
    const char *pname = path == MERAK_CUDA_ATTN_FUSED ? "fused" : path == MERAK_CUDA_ATTN_CUDNN ? "cudnn" : "products";
    const int C = nh * hd;
    attn_arg a;
    memset(&a, 0, sizeof a);
    a.s = (merak_attn_shape){.B = B, .T = T, .n_head = nh, .n_kv_head = nh, .head_dim = hd,
                             .q_stride = 3 * C, .k_stride = 3 * C, .v_stride = 3 * C};
#ifdef HAVE_CUDNN_ATTN
    /* the float entries hand cuDNN dense copies: a shape it refuses on this
     * device is timed on the way the backend falls back to, and says so */
    const merak_attn_shape dense = {.B = B, .T = T, .n_head = nh, .n_kv_head = nh, .head_dim = hd,
                                    .q_stride = C, .k_stride = C, .v_stride = C};
    const int gs[3] = {C, C, C};
    if (path == MERAK_CUDA_ATTN_CUDNN && !merak_cudnn_attn_takes(&dense, gs))
        pname = "cudnn-refused";
#endif
    const size_t BT = (size_t)B * T;
    a.qkv = drand(BT * 3 * C, 7);
    a.out = drand(BT * C, 8);
    a.lse = drand((size_t)B * nh * T, 9);   /* the forward, timed first, writes it */
    a.dout = drand(BT * C, 10);
    a.dqkv = drand(BT * 3 * C, 11);
    a.scratch = drand(g_k->attention_scratch_elems(&a.s), 12);
    const double fl = 2.0 * B * nh * (double)T * T * hd; /* causal: half of 4*B*nh*T*T*hd */
    const double f = timeit(attn_fwd, &a), b = timeit(attn_bwd, &a);
    char err[256] = "";
    if (merak_cuda_status(err, sizeof err) < 0)   /* (the last rows: cuDNN's) */
        printf("failed op=attention math=%s path=%s shape=%d,%d,%d,%d: %s\n", g_math, pname, B, T, nh, hd, err);
    else {
        printf("op=attention_fwd math=%s path=%s shape=%d,%d,%d,%d ms=%.4f tflops=%.2f\n", g_math, pname, B, T,
               nh, hd, f, fl / f / 1e9);
        printf("op=attention_bwd math=%s path=%s shape=%d,%d,%d,%d ms=%.4f tflops=%.2f\n", g_math, pname, B, T,
               nh, hd, b, 2 * fl / b / 1e9);
    }
    fflush(stdout);
    float *bufs[] = {a.qkv, a.out, a.lse, a.dout, a.dqkv, a.scratch};
    for (int i = 0; i < 6; i++)
        merak_cuda_free(bufs[i]);
    merak_cuda_set_attention_paths(MERAK_CUDA_ATTN_AUTO, MERAK_CUDA_ATTN_AUTO);
}

/* Attention on bf16 storage (the attention16 entries, what --dtype bf16
 * trains with): cuDNN's fused attention on GPT-2's fused bf16 qkv rows,
 * path=cudnn-bf16, against torch's bf16 SDPA like the rows above. */
typedef struct {
    merak_attn_shape s;
    uint16_t *qkv, *out, *dout, *dqkv;
    float *lse, *ascratch;
} attn16_arg;

/* n random bf16 values on the device (drand's, rounded). */
static uint16_t *drand16(size_t n, uint64_t seed)
{
    float *f = drand(n, seed);
    uint16_t *d = merak_cuda_malloc(n * sizeof *d);
    if (!d)
        die("out of memory");
    g_k->to_bf16(d, f, n);
    merak_cuda_synchronize();
    merak_cuda_free(f);
    return d;
}

static void attn16_fwd(const void *p)
{
    const attn16_arg *a = p;
    const int C = a->s.n_head * a->s.head_dim;
    g_k->attention16_fwd(&a->s, a->out, a->lse, NULL, NULL, a->qkv, a->qkv + C, a->qkv + 2 * C, a->ascratch, NULL);
}
static void attn16_bwd(const void *p)
{
    const attn16_arg *a = p;
    const int C = a->s.n_head * a->s.head_dim;
    g_k->attention16_bwd(&a->s, a->dqkv, a->dqkv + C, a->dqkv + 2 * C, a->dout, a->out, a->lse, NULL, NULL, a->qkv,
                         a->qkv + C, a->qkv + 2 * C, a->ascratch, NULL, 0);   /* written, as a step's */
}

static void bench_attention16(int B, int T, int nh, int hd)
{
    const int C = nh * hd;
    attn16_arg a;
    memset(&a, 0, sizeof a);
    a.s = (merak_attn_shape){.B = B, .T = T, .n_head = nh, .n_kv_head = nh, .head_dim = hd,
                             .q_stride = 3 * C, .k_stride = 3 * C, .v_stride = 3 * C};
    if (!g_k->attention16_supported || !g_k->attention16_supported(&a.s)) {
        printf("failed op=attention math=bf16 path=cudnn-bf16 shape=%d,%d,%d,%d: not taken on this device\n", B, T,
               nh, hd);
        return;
    }
    const size_t BT = (size_t)B * T;
    a.qkv = drand16(BT * 3 * C, 31);
    a.out = drand16(BT * C, 32);
    a.dout = drand16(BT * C, 33);
    a.dqkv = drand16(BT * 3 * C, 34);
    a.lse = drand((size_t)B * nh * T, 35);   /* the forward, timed first, writes it */
    a.ascratch = drand(g_k->attention16_scratch_elems(&a.s), 36);
    const double fl = 2.0 * B * nh * (double)T * T * hd;
    const double f = timeit(attn16_fwd, &a), b = timeit(attn16_bwd, &a);
    char err[256] = "";
    if (merak_cuda_status(err, sizeof err) < 0)
        printf("failed op=attention math=bf16 path=cudnn-bf16 shape=%d,%d,%d,%d: %s\n", B, T, nh, hd, err);
    else {
        printf("op=attention_fwd math=bf16 path=cudnn-bf16 shape=%d,%d,%d,%d ms=%.4f tflops=%.2f\n", B, T, nh, hd,
               f, fl / f / 1e9);
        printf("op=attention_bwd math=bf16 path=cudnn-bf16 shape=%d,%d,%d,%d ms=%.4f tflops=%.2f\n", B, T, nh, hd,
               b, 2 * fl / b / 1e9);
    }
    fflush(stdout);
    void *bufs[] = {a.qkv, a.out, a.dout, a.dqkv, a.lse, a.ascratch};
    for (int i = 0; i < 6; i++)
        merak_cuda_free(bufs[i]);
}

/* The linear layers on bf16 storage (the linear16 entries, what --dtype
 * bf16 trains with: bf16 operands and result, a bias in the epilogue, the
 * weight gradient added to float32), math=bf16 path=bf16-storage, against
 * torch's bf16 products like the math=bf16 rows. */
typedef struct {
    int N, K, O, ld;
    uint16_t *inp, *w, *b, *out, *dout, *dinp;
    float *dw;
} lin16_arg;

static void lin16_fwd(const void *p)
{
    const lin16_arg *a = p;
    g_k->linear16_fwd(a->out, a->inp, a->w, a->b, a->N, a->K, a->O, a->ld, NULL);
}
static void lin16_bwd_x(const void *p)
{
    const lin16_arg *a = p;
    g_k->linear16_bwd_x(a->dinp, a->dout, a->w, a->N, a->K, a->O, a->ld, 0, NULL);
}
static void lin16_bwd_w(const void *p)
{
    const lin16_arg *a = p;
    g_k->linear16_bwd_w(a->dw, NULL, a->dout, a->inp, a->N, a->K, a->O, a->ld, NULL);
}

/* A layer's buffers on the device, random (ld: the rows of out and dout,
 * ld >= O apart: the executor's padded logits), and their release. */
static lin16_arg lin16_make(int N, int K, int O, int ld, int bias)
{
    return (lin16_arg){N, K, O, ld, drand16((size_t)N * K, 41), drand16((size_t)O * K, 42),
                       bias ? drand16((size_t)O, 43) : NULL, drand16((size_t)N * ld, 44), drand16((size_t)N * ld, 45),
                       drand16((size_t)N * K, 46), drand((size_t)O * K, 47)};
}

static void lin16_free(lin16_arg *a)
{
    void *bufs[] = {a->inp, a->w, a->b, a->out, a->dout, a->dinp, a->dw};
    for (int i = 0; i < 7; i++)
        if (bufs[i])
            merak_cuda_free(bufs[i]);
}

static void bench_linear16(const char *name, int N, int K, int O, int ld, int bias)
{
    lin16_arg a = lin16_make(N, K, O, ld, bias);
    const double fl = 2.0 * N * K * O;
    struct { const char *op; op_fn fn; } ops[] = {
        {"linear_fwd", lin16_fwd}, {"linear_bwd_x", lin16_bwd_x}, {"linear_bwd_w", lin16_bwd_w}};
    for (int i = 0; i < 3; i++) {
        const double ms = timeit(ops[i].fn, &a);
        printf("op=%s layer=%s math=bf16 path=bf16-storage bias=%d shape=%d,%d,%d ms=%.4f tflops=%.2f\n", ops[i].op,
               name, i == 0 && bias, N, K, O, ms, fl / ms / 1e9);
        fflush(stdout);
    }
    lin16_free(&a);
}

/* Each of cuBLASLt's heuristic algorithms for a linear16 layer's three
 * products, timed (merak_cuda_gemm16_probe), against the one the backend
 * runs (its pick): what choosing by time would win.  The products as
 * cuda_glue.c's linear16 entries ask them.
 *     gemm_probe op=linear_fwd layer=qkv shape=N,K,O candidates=8 picked=0 picked_ms=... best=3 best_ms=... gain=1.07
 * gain: picked_ms / best_ms (1: the heuristic's pick is the fastest). */
static void probe_linear16(const char *name, int N, int K, int O, int ld, int bias)
{
    lin16_arg a = lin16_make(N, K, O, ld, bias);
    for (int op = 0; op < 3; op++) {
        double ms[8];
        int picked = -1, n;
        if (op == 0)
            n = merak_cuda_gemm16_probe(1, 0, O, N, K, a.w, K, a.inp, K, a.out, 1, ld, 0.0f, a.b, g_reps, ms, 8, &picked);
        else if (op == 1)
            n = merak_cuda_gemm16_probe(0, 0, K, N, O, a.w, K, a.dout, ld, a.dinp, 1, K, 0.0f, NULL, g_reps, ms, 8,
                                        &picked);
        else
            n = merak_cuda_gemm16_probe(0, 1, K, O, N, a.inp, K, a.dout, ld, a.dw, 0, K, 1.0f, NULL, g_reps, ms, 8,
                                        &picked);
        int best = -1;
        for (int i = 0; i < n; i++)
            if (ms[i] >= 0 && (best < 0 || ms[i] < ms[best]))
                best = i;
        static const char *ops[] = {"linear_fwd", "linear_bwd_x", "linear_bwd_w"};
        if (best < 0 || picked < 0 || picked >= n || ms[picked] < 0)
            printf("gemm_probe op=%s layer=%s shape=%d,%d,%d candidates=%d picked=%d: nothing to compare\n", ops[op],
                   name, N, K, O, n, picked);
        else
            printf("gemm_probe op=%s layer=%s shape=%d,%d,%d candidates=%d picked=%d picked_ms=%.4f best=%d "
                   "best_ms=%.4f gain=%.3f\n", ops[op], name, N, K, O, n, picked, ms[picked], best, ms[best],
                   ms[picked] / ms[best]);
        fflush(stdout);
    }
    lin16_free(&a);
}

/* GPT-2's MLP: the first layer and GELU forward (linear16_gelu_fwd),
 * and GELU's input part with the second layer's (linear16_bwd_x_dgelu),
 * each with cuBLASLt's GELU epilogues (epilogue=1) and without (0: the
 * product, then the GELU kernel), the product's rate over the whole:
 *     op=linear_gelu_fwd layer=mlp_fc math=bf16 path=bf16-storage epilogue=1 shape=N,C,F ms=... tflops=...
 * Which is faster says which way merak_cuda_set_gelu_epilogue's default
 * should go. */
typedef struct {
    int N, C, F;
    uint16_t *x, *w1, *b1, *pre, *h, *w2, *dy, *dpre;
} mlp16_arg;

static void mlp16_fwd(const void *p)
{
    const mlp16_arg *a = p;
    g_k->linear16_gelu_fwd(a->pre, a->h, a->x, a->w1, a->b1, a->N, a->C, a->F, NULL);
}
static void mlp16_bwd(const void *p)
{
    const mlp16_arg *a = p;
    g_k->linear16_bwd_x_dgelu(a->dpre, a->dy, a->w2, a->pre, a->N, a->F, a->C, a->C, NULL);
}

static void bench_mlp16(int N, int C, int F)
{
    const size_t nc = (size_t)N * C, nf = (size_t)N * F, cf = (size_t)C * F;
    mlp16_arg a = {N, C, F, drand16(nc, 51), drand16(cf, 52), drand16((size_t)F, 53), drand16(nf, 54),
                   drand16(nf, 55), drand16(cf, 56), drand16(nc, 57), drand16(nf, 58)};
    const double fl = 2.0 * N * C * F;
    const int was = merak_cuda_gelu_epilogue();
    for (int epi = 0; epi < 2; epi++) {
        merak_cuda_set_gelu_epilogue(epi);
        struct { const char *op, *layer; op_fn fn; } ops[] = {{"linear_gelu_fwd", "mlp_fc", mlp16_fwd},
                                                             {"linear_bwd_x_dgelu", "mlp_proj", mlp16_bwd}};
        for (int i = 0; i < 2; i++) {
            const double ms = timeit(ops[i].fn, &a);
            printf("op=%s layer=%s math=bf16 path=bf16-storage epilogue=%d shape=%d,%d,%d ms=%.4f tflops=%.2f\n",
                   ops[i].op, ops[i].layer, epi, N, C, F, ms, fl / ms / 1e9);
            fflush(stdout);
        }
    }
    merak_cuda_set_gelu_epilogue(was);
    void *bufs[] = {a.x, a.w1, a.b1, a.pre, a.h, a.w2, a.dy, a.dpre};
    for (int i = 0; i < 8; i++)
        merak_cuda_free(bufs[i]);
}

/* ------------------------------------------------------------------ roofline
 *
 * The memory-bound entries at GPT-2 124M's shapes against the least
 * traffic their results need: every buffer a kernel must read, read once,
 * every buffer it writes, written once, and an accumulated (+=) output
 * both read and written.  gbs is those bytes over the median time and
 * of_copy that rate over a device-to-device copy's (the first row):
 *     roofline op=layernorm_fwd shape=8192,768 ms=... bytes=... gbs=... of_copy=...
 * Inputs are random as drand's, token ids valid; outputs, accumulated
 * gradients and AdamW's moments start at zero.  Each kernel runs again and
 * again on the same buffers, so a working set that fits the L2 (50 MB on
 * an H100) may be read from there and beat the copy; nothing is flushed
 * between calls. */

static FILE *g_roof;        /* the roofline rows: --roofline FILE, else stdout */
static double g_copy_gbs;   /* the copy row's rate, of_copy's unit */

static void roof_print(const char *op, const char *shape, double bytes, double ms)
{
    const double gbs = bytes / ms / 1e6;
    fprintf(g_roof, "roofline op=%s shape=%s ms=%.4f bytes=%.0f gbs=%.1f of_copy=%.2f\n", op, shape, ms,
            bytes, gbs, gbs / g_copy_gbs);
    fflush(g_roof);
}

/* A row: the kernel (fn calls it with the family's arguments) and its bytes. */
typedef struct {
    const char *op;
    op_fn fn;
    double bytes;
} roof_row;

static void roof_rows(const roof_row *rows, int n, const char *shape, const void *arg)
{
    for (int i = 0; i < n; i++)
        roof_print(rows[i].op, shape, rows[i].bytes, timeit(rows[i].fn, arg));
}

/* A device buffer of n floats, zero (outputs, and moments as a first
 * step finds them). */
static float *dzero(size_t n)
{
    float *d = merak_cuda_malloc(n * sizeof *d);
    if (!d || merak_cuda_memset(d, 0, n * sizeof *d) < 0)
        die("out of memory");
    return d;
}

/* A device buffer of n token ids, random in [0,V) from the same hash as
 * drand's floats; *distinct: how many different ids it holds (the rows of
 * a (V,C) table an embedding must touch). */
static int32_t *dids(size_t n, int V, uint64_t seed, size_t *distinct)
{
    int32_t *h = malloc(n * sizeof *h), *d = merak_cuda_malloc(n * sizeof *d);
    unsigned char *seen = calloc((size_t)V, 1);
    if (!h || !d || !seen)
        die("out of memory");
    *distinct = 0;
    for (size_t i = 0; i < n; i++) {
        h[i] = (int32_t)(merak_mix64(seed + i) % (uint64_t)V);
        *distinct += !seen[h[i]];
        seen[h[i]] = 1;
    }
    if (merak_cuda_memcpy_h2d(d, h, n * sizeof *d) < 0)
        die("copy");
    free(seen);
    free(h);
    return d;
}

/* A device copy of n floats rounded to bf16 storage (bf16 entries take
 * it cast back to their element type). */
static float *dbf16(const float *src, size_t n)
{
    uint16_t *d = merak_cuda_malloc(n * sizeof *d);
    if (!d)
        die("out of memory");
    g_k->to_bf16(d, src, n);
    return (float *)d;
}

static void free_all(float **bufs, int n)
{
    for (int i = 0; i < n; i++)
        merak_cuda_free(bufs[i]);
}

/* ---- the copy: 1 GiB device to device, counted read + written (2 GiB) */

typedef struct {
    float *dst, *src;
    size_t bytes;
} copy_arg;

static void copy_d2d(const void *p)
{
    const copy_arg *a = p;
    if (merak_cuda_memcpy_d2d(a->dst, a->src, a->bytes) < 0)
        die("device-to-device copy");
}

static void bench_copy(void)
{
    const size_t n = ((size_t)1 << 30) / sizeof(float);
    copy_arg a = {dzero(n), drand(n, 20), n * sizeof(float)};
    const double ms = timeit(copy_d2d, &a), bytes = 2.0 * (double)a.bytes;
    char shape[32];
    g_copy_gbs = bytes / ms / 1e6;
    snprintf(shape, sizeof shape, "%zu", n);
    roof_print("copy", shape, bytes, ms);
    merak_cuda_free(a.dst);
    merak_cuda_free(a.src);
}

/* ---- token and position embeddings */

typedef struct {
    int B, T, C, V;
    int32_t *ids;              /* (B*T) in [0,V) */
    float *wte, *dwte;         /* (V,C) */
    float *wpe, *dwpe;         /* (T,C): positions P = T */
    float *tok, *out, *dout;   /* (B,T,C) */
} emb_arg;

static void emb_fwd(const void *p)
{
    const emb_arg *a = p;
    g_k->embedding_fwd(a->tok, a->ids, a->wte, a->B * a->T, a->C, 0, a->V);
}
static void emb_bwd_w(const void *p)
{
    const emb_arg *a = p;
    g_k->embedding_bwd_w(a->dwte, a->dout, a->ids, a->B * a->T, a->C, 0, a->V);
}
static void pos_fwd(const void *p)
{
    const emb_arg *a = p;
    g_k->posemb_fwd(a->out, a->tok, a->wpe, a->B, a->T, a->C);
}
static void pos_bwd_w(const void *p)
{
    const emb_arg *a = p;
    g_k->posemb_bwd_w(a->dwpe, a->dout, a->B, a->T, a->C);
}

static void bench_embeddings(int B, int T, int C, int V)
{
    const size_t N = (size_t)B * T, NC = N * C, TC = (size_t)T * C;
    size_t D; /* distinct ids: the rows of wte read, of dwte read and written */
    emb_arg a = {B, T, C, V, dids(N, V, 21, &D), drand((size_t)V * C, 22), dzero((size_t)V * C),
                 drand(TC, 23), dzero(TC), dzero(NC), dzero(NC), drand(NC, 24)};
    const double f = sizeof(float), dc = (double)D * C;
    const roof_row emb[] = {
        {"embedding_fwd", emb_fwd, 4.0 * N + f * (dc + NC)},            /* ids; D rows of wte; out */
        {"embedding_bwd_w", emb_bwd_w, f * NC + 4.0 * N + f * 2 * dc}}; /* dout; ids; D rows of dwte += */
    const roof_row pos[] = {
        {"posemb_fwd", pos_fwd, f * (2.0 * NC + TC)},      /* inp, wpe; out */
        {"posemb_bwd_w", pos_bwd_w, f * (NC + 2.0 * TC)}}; /* dout; dwpe += */
    char shape[64];
    snprintf(shape, sizeof shape, "%zu,%d,%d", N, C, V);
    roof_rows(emb, 2, shape, &a);
    snprintf(shape, sizeof shape, "%d,%d,%d", B, T, C);
    roof_rows(pos, 2, shape, &a);
    float *bufs[] = {a.wte, a.dwte, a.wpe, a.dwpe, a.tok, a.out, a.dout};
    free_all(bufs, 7);
    merak_cuda_free(a.ids);
}

/* ---- layer norm and RMS norm */

typedef struct {
    int N, C;
    float *inp, *out, *dout, *dinp; /* (N,C) */
    float *w, *b, *dw, *db;         /* (C) */
    float *mean, *rstd;             /* (N) */
} norm_arg;

static void ln_fwd(const void *p)
{
    const norm_arg *a = p;
    g_k->layernorm_fwd(a->out, a->mean, a->rstd, a->inp, a->w, a->b, a->N, a->C, 1e-5f);
}
static void ln_bwd_x(const void *p)
{
    const norm_arg *a = p;
    g_k->layernorm_bwd_x(a->dinp, a->dout, a->inp, a->w, a->mean, a->rstd, a->N, a->C, 1);
}
static void ln_bwd_w(const void *p)
{
    const norm_arg *a = p;
    g_k->layernorm_bwd_w(a->dw, a->db, a->dout, a->inp, a->mean, a->rstd, a->N, a->C);
}
static void rms_fwd(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm_fwd(a->out, a->rstd, a->inp, a->w, a->N, a->C, 1e-5f);
}
static void rms_bwd_x(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm_bwd_x(a->dinp, a->dout, a->inp, a->w, a->rstd, a->N, a->C, 1);
}
static void rms_bwd_w(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm_bwd_w(a->dw, a->dout, a->inp, a->rstd, a->N, a->C);
}

#define B16(p) ((uint16_t *)(p))
static void ln16_fwd(const void *p)
{
    const norm_arg *a = p;
    g_k->layernorm16_fwd(B16(a->out), a->mean, a->rstd, B16(a->inp), B16(a->w), B16(a->b), a->N, a->C, 1e-5f,
                         NULL);
}
static void ln16_bwd_x(const void *p)
{
    const norm_arg *a = p;
    g_k->layernorm16_bwd_x(B16(a->dinp), B16(a->dout), B16(a->inp), B16(a->w), a->mean, a->rstd, a->N, a->C, 1,
                           NULL);
}
static void ln16_bwd_w(const void *p)
{
    const norm_arg *a = p;
    g_k->layernorm16_bwd_w(a->dw, a->db, B16(a->dout), B16(a->inp), a->mean, a->rstd, a->N, a->C, NULL);
}
static void ln16_bwd(const void *p)   /* both parts in one pass, as a step runs them */
{
    const norm_arg *a = p;
    g_k->layernorm16_bwd(B16(a->dinp), a->dw, a->db, B16(a->dout), B16(a->inp), B16(a->w), a->mean, a->rstd, a->N,
                         a->C, 1, NULL);
}
static void rms16_bwd(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm16_bwd(B16(a->dinp), a->dw, B16(a->dout), B16(a->inp), B16(a->w), a->rstd, a->N, a->C, 1, NULL);
}
static void add_ln16_fwd(const void *p)   /* sum (into dinp) = inp + dout, then its norm */
{
    const norm_arg *a = p;
    g_k->add_layernorm16_fwd(B16(a->dinp), B16(a->out), a->mean, a->rstd, B16(a->inp), B16(a->dout), B16(a->w),
                             B16(a->b), a->N, a->C, 1e-5f, NULL);
}
static void add_rms16_fwd(const void *p)
{
    const norm_arg *a = p;
    g_k->add_rmsnorm16_fwd(B16(a->dinp), B16(a->out), a->rstd, B16(a->inp), B16(a->dout), B16(a->w), a->N, a->C,
                           1e-5f, NULL);
}
static void rms16_fwd(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm16_fwd(B16(a->out), a->rstd, B16(a->inp), B16(a->w), a->N, a->C, 1e-5f, NULL);
}
static void rms16_bwd_x(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm16_bwd_x(B16(a->dinp), B16(a->dout), B16(a->inp), B16(a->w), a->rstd, a->N, a->C, 1, NULL);
}
static void rms16_bwd_w(const void *p)
{
    const norm_arg *a = p;
    g_k->rmsnorm16_bwd_w(a->dw, B16(a->dout), B16(a->inp), a->rstd, a->N, a->C, NULL);
}

static void bench_norms(int N, int C)
{
    const size_t NC = (size_t)N * C;
    norm_arg a = {N, C, drand(NC, 25), dzero(NC), drand(NC, 26), dzero(NC),
                  drand(C, 27), drand(C, 28), dzero(C), dzero(C), dzero(N), dzero(N)};
    const double f = sizeof(float), nc = (double)NC;
    /* Each forward runs first: its mean and rstd are the backward's. */
    const roof_row rows[] = {
        {"layernorm_fwd", ln_fwd, f * (2 * nc + 2.0 * C + 2.0 * N)},     /* inp, w, b; out, mean, rstd */
        {"layernorm_bwd_x", ln_bwd_x, f * (4 * nc + C + 2.0 * N)},       /* dout, inp, w, mean, rstd; dinp += */
        {"layernorm_bwd_w", ln_bwd_w, f * (2 * nc + 2.0 * N + 4.0 * C)}, /* dout, inp, mean, rstd; dw, db += */
        {"rmsnorm_fwd", rms_fwd, f * (2 * nc + C + (double)N)},          /* inp, w; out, rstd */
        {"rmsnorm_bwd_x", rms_bwd_x, f * (4 * nc + C + (double)N)},      /* dout, inp, w, rstd; dinp += */
        {"rmsnorm_bwd_w", rms_bwd_w, f * (2 * nc + N + 2.0 * C)}};       /* dout, inp, rstd; dw += */
    char shape[64];
    snprintf(shape, sizeof shape, "%d,%d", N, C);
    roof_rows(rows, 6, shape, &a);
    /* bf16 storage, as --dtype bf16 trains: the same values rounded (mean,
     * rstd and the weight gradients float) */
    norm_arg h = a;
    h.inp = dbf16(a.inp, NC), h.out = dbf16(a.out, NC), h.dout = dbf16(a.dout, NC), h.dinp = dbf16(a.dinp, NC);
    h.w = dbf16(a.w, (size_t)C), h.b = dbf16(a.b, (size_t)C);
    const roof_row rows16[] = {
        {"layernorm16_fwd", ln16_fwd, 2 * (2 * nc + 2.0 * C) + f * 2.0 * N},
        {"layernorm16_bwd_x", ln16_bwd_x, 2 * (4 * nc + C) + f * 2.0 * N},
        {"layernorm16_bwd_w", ln16_bwd_w, 2 * 2 * nc + f * (2.0 * N + 4.0 * C)},
        {"rmsnorm16_fwd", rms16_fwd, 2 * (2 * nc + C) + f * N},
        {"rmsnorm16_bwd_x", rms16_bwd_x, 2 * (4 * nc + C) + f * N},
        {"rmsnorm16_bwd_w", rms16_bwd_w, 2 * 2 * nc + f * (N + 2.0 * C)},
        /* the two parts in one pass: the input part's bytes and dw (db) += */
        {"layernorm16_bwd", ln16_bwd, 2 * (4 * nc + C) + f * (2.0 * N + 4.0 * C)},
        {"rmsnorm16_bwd", rms16_bwd, 2 * (4 * nc + C) + f * (N + 2.0 * C)},
        /* a residual add and the norm of its sum in one pass: a, y; sum, out */
        {"add_layernorm16_fwd", add_ln16_fwd, 2 * (4 * nc + 2.0 * C) + f * 2.0 * N},
        {"add_rmsnorm16_fwd", add_rms16_fwd, 2 * (4 * nc + C) + f * N}};
    roof_rows(rows16, 10, shape, &h);
    float *bufs[] = {a.inp, a.out, a.dout, a.dinp, a.w, a.b, a.dw, a.db, a.mean, a.rstd,
                     h.inp, h.out, h.dout, h.dinp, h.w, h.b};
    free_all(bufs, 16);
}

/* ---- elementwise: the MLP's activations on (N,4C), the residual's ops on (N,C) */

typedef struct {
    size_t n;                            /* elements of each call */
    float *x, *y, *out, *dout, *dx, *dy; /* (N,4C) each; the (N,C) calls use their start */
} pw_arg;

static void gelu_f(const void *p)
{
    const pw_arg *a = p;
    g_k->gelu_fwd(a->out, a->x, a->n);
}
static void gelu_b(const void *p)
{
    const pw_arg *a = p;
    g_k->gelu_bwd(a->dx, a->dout, a->x, a->n, 1);
}
static void gelu_b0(const void *p)
{
    const pw_arg *a = p;
    g_k->gelu_bwd(a->dx, a->dout, a->x, a->n, 0);
}
static void swiglu_f(const void *p)
{
    const pw_arg *a = p;
    g_k->swiglu_fwd(a->out, a->x, a->y, a->n);
}
static void swiglu_b(const void *p)
{
    const pw_arg *a = p;
    g_k->swiglu_bwd(a->dx, a->dy, a->dout, a->x, a->y, a->n, 1);
}
static void swiglu_b0(const void *p)
{
    const pw_arg *a = p;
    g_k->swiglu_bwd(a->dx, a->dy, a->dout, a->x, a->y, a->n, 0);
}
static void add_f(const void *p)
{
    const pw_arg *a = p;
    g_k->add_fwd(a->out, a->x, a->y, a->n);
}
static void accum(const void *p)
{
    const pw_arg *a = p;
    g_k->accumulate(a->dx, a->x, a->n);
}
static void round_b(const void *p)
{
    const pw_arg *a = p;
    g_k->round_bf16(a->dx, a->n);
}
/* bf16 storage's conversions (the executor's staging), into and out of
 * dy's memory as bf16 */
static void to_b(const void *p)
{
    const pw_arg *a = p;
    g_k->to_bf16((uint16_t *)a->dy, a->x, a->n);
}
static void from_b(const void *p)
{
    const pw_arg *a = p;
    g_k->from_bf16(a->out, (const uint16_t *)a->dy, a->n);
}
static void dropout_f(const void *p)
{
    const pw_arg *a = p;
    g_k->dropout_fwd(a->out, a->x, a->n, 0.1f, 1234, 0);
}
static void dropout_b(const void *p)
{
    const pw_arg *a = p;
    g_k->dropout_bwd(a->dx, a->dout, a->n, 0.1f, 1234, 0, 1);
}

static void bench_pointwise(int N, int C)
{
    const size_t n4 = (size_t)N * 4 * C, n1 = (size_t)N * C;
    pw_arg a = {n4, drand(n4, 29), drand(n4, 30), dzero(n4), drand(n4, 31), dzero(n4), dzero(n4)};
    const double f = sizeof(float), e4 = (double)n4, e1 = (double)n1;
    const roof_row mlp[] = {
        {"gelu_fwd", gelu_f, f * 2 * e4},      /* inp; out */
        {"gelu_bwd", gelu_b, f * 4 * e4},      /* dout, inp; dinp += */
        {"gelu_bwd(acc=0)", gelu_b0, f * 3 * e4}, /* dout, inp; dinp = (its first writer) */
        {"swiglu_fwd", swiglu_f, f * 3 * e4},  /* gate, up; out */
        {"swiglu_bwd", swiglu_b, f * 7 * e4},  /* dout, gate, up; dgate +=, dup += */
        {"swiglu_bwd(acc=0)", swiglu_b0, f * 5 * e4}}; /* dout, gate, up; dgate =, dup = */
    const roof_row res[] = {
        {"add_fwd", add_f, f * 3 * e1},          /* a, b; out */
        {"accumulate", accum, f * 3 * e1},       /* src; dst += */
        {"round_bf16", round_b, f * 2 * e1},     /* x = bf16(x) (--dtype bf16 in float storage) */
        {"to_bf16", to_b, 6 * e1},               /* x; bf16 (bf16 storage: after every op) */
        {"from_bf16", from_b, 6 * e1},           /* bf16; out (bf16 storage: before every op) */
        {"dropout_fwd", dropout_f, f * 2 * e1},  /* inp; out (p = 0.1) */
        {"dropout_bwd", dropout_b, f * 3 * e1}}; /* dout; dinp += */
    char shape[64];
    snprintf(shape, sizeof shape, "%d,%d", N, 4 * C);
    roof_rows(mlp, 4, shape, &a);
    pw_arg r = a;
    r.n = n1;
    snprintf(shape, sizeof shape, "%d,%d", N, C);
    roof_rows(res, 7, shape, &r);
    float *bufs[] = {a.x, a.y, a.out, a.dout, a.dx, a.dy};
    free_all(bufs, 6);
}

/* ---- cross-entropy over the whole vocabulary */

typedef struct {
    int N, V;
    float *logits;           /* (N,V) */
    float *lse, *tlogit;     /* (N) */
    int32_t *targets;        /* (N) in [0,V) */
} ce_arg;

static void ce_stats(const void *p)
{
    const ce_arg *a = p;
    g_k->crossentropy_stats(a->lse, a->tlogit, a->logits, a->targets, a->N, a->V, 0);
}
/* in place, as the executor runs it (the gradient over the logits; their
 * values change from call to call, the work does not) */
static void ce_bwd(const void *p)
{
    const ce_arg *a = p;
    g_k->crossentropy_bwd(a->logits, a->logits, a->lse, a->targets, a->N, a->V, 0, 1.0f / a->N);
}

static void ce16_stats(const void *p)
{
    const ce_arg *a = p;
    g_k->crossentropy16_stats(a->lse, a->tlogit, B16(a->logits), a->targets, a->N, a->V, a->V, 0, NULL);
}
static void ce16_bwd(const void *p)
{
    const ce_arg *a = p;
    g_k->crossentropy16_bwd(B16(a->logits), B16(a->logits), a->lse, a->targets, a->N, a->V, a->V, 0, 1.0f / a->N,
                            NULL);
}

/* both in one pass, as a training step runs it (the executor's
 * merak_exec_op_grad_early), in place as ce16_bwd */
static void ce16_fused(const void *p)
{
    const ce_arg *a = p;
    g_k->crossentropy16_fused(a->lse, a->tlogit, B16(a->logits), a->targets, a->N, a->V, a->V, 0, 1.0f / a->N,
                              NULL);
}

static void bench_crossentropy(int N, int V)
{
    const size_t NV = (size_t)N * V;
    size_t D;
    ce_arg a = {N, V, drand(NV, 32), dzero(N), dzero(N), dids(N, V, 33, &D)};
    const double f = sizeof(float), nv = (double)NV;
    /* stats runs first: its lse is the backward's */
    const roof_row rows[] = {
        {"crossentropy_stats", ce_stats, f * (nv + 3.0 * N)},  /* logits, targets; lse, tlogit */
        {"crossentropy_bwd", ce_bwd, f * (2 * nv + 2.0 * N)}}; /* logits, lse, targets; dlogits over the logits */
    char shape[64];
    snprintf(shape, sizeof shape, "%d,%d", N, V);
    roof_rows(rows, 2, shape, &a);
    /* bf16 logits, as --dtype bf16 trains (the gradient over them too) */
    ce_arg h = a;
    h.logits = dbf16(a.logits, NV);
    const roof_row rows16[] = {
        {"crossentropy16_stats", ce16_stats, 2 * nv + f * 3.0 * N},
        {"crossentropy16_bwd", ce16_bwd, 2 * 2 * nv + f * 2.0 * N},
        /* the logits read once and the gradient written over them; targets; lse, tlogit */
        {"crossentropy16_fused", ce16_fused, 2 * 2 * nv + f * 3.0 * N}};
    roof_rows(rows16, 3, shape, &h);
    float *bufs[] = {a.logits, a.lse, a.tlogit, h.logits};
    free_all(bufs, 4);
    merak_cuda_free(a.targets);
}

/* ---- the optimizer step, the gradient norm and clipping over every parameter */

/* runtime/train/optim.c's SPAN: the most elements of one AdamW span */
#define ROOF_SPAN 65536

/* GPT-2 124M's parameters (L layers of width C, V tokens, P positions,
 * the LM head tied to wte) in AdamW spans as runtime/train/optim.c makes
 * them: parameters in the executor's order (first use) and at its offsets
 * (multiples of 16 floats), each cut into spans of at most ROOF_SPAN
 * elements, weight decay on the matrices.  Returns the spans (malloc'ed)
 * and their count; *flat: the floats of the flat buffer they index,
 * *elems: those they cover. */
static merak_adamw_span *gpt2_spans(int L, int C, int V, int P, int *nspans, size_t *flat,
                                    size_t *elems)
{
    typedef struct { size_t n; int decay; } param;
    const size_t c = (size_t)C;
    /* ln_1 w,b; attn.c_attn w,b; attn.c_proj w,b; ln_2 w,b; mlp.c_fc w,b; mlp.c_proj w,b */
    const param layer[] = {{c, 0}, {c, 0}, {3 * c * c, 1}, {3 * c, 0}, {c * c, 1}, {c, 0},
                           {c, 0}, {c, 0}, {4 * c * c, 1}, {4 * c, 0}, {4 * c * c, 1}, {c, 0}};
    const int per = (int)(sizeof layer / sizeof layer[0]), np = 4 + per * L;
    param *ps = malloc((size_t)np * sizeof *ps);
    if (!ps)
        die("out of memory");
    ps[0] = (param){(size_t)V * c, 1}; /* wte */
    ps[1] = (param){(size_t)P * c, 1}; /* wpe */
    for (int l = 0; l < L; l++)
        memcpy(ps + 2 + l * per, layer, sizeof layer);
    ps[np - 2] = ps[np - 1] = (param){c, 0}; /* ln_f w, b */
    int count = 0;
    for (int i = 0; i < np; i++)
        count += (int)((ps[i].n + ROOF_SPAN - 1) / ROOF_SPAN);
    merak_adamw_span *sp = malloc((size_t)count * sizeof *sp);
    if (!sp)
        die("out of memory");
    size_t at = 0;
    int k = 0;
    *elems = 0;
    for (int i = 0; i < np; i++) {
        for (size_t a = 0; a < ps[i].n; a += ROOF_SPAN) {
            const size_t n = ps[i].n - a < ROOF_SPAN ? ps[i].n - a : ROOF_SPAN;
            sp[k++] = (merak_adamw_span){.at = at + a, .m_at = at + a, .n = n, .decay = ps[i].decay};
        }
        *elems += ps[i].n;
        at += (ps[i].n + 15) / 16 * 16;
    }
    free(ps);
    *nspans = count;
    *flat = at;
    return sp;
}

typedef struct {
    size_t n;                /* floats of the flat buffers */
    float *p, *g, *m, *v;    /* (n) */
    merak_adamw_span *spans; /* device memory */
    int nspans;
} opt_arg;

static void opt_adamw(const void *p)
{
    const opt_arg *a = p;
    g_k->adamw(a->p, a->g, a->m, a->v, a->spans, a->nspans, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, NULL);
}
static void opt_sumsq(const void *p)
{
    const opt_arg *a = p;
    (void)g_k->sumsq(a->g, a->n); /* NaN on an error, which timeit's synchronize reports */
}
static void opt_scale(const void *p)
{
    const opt_arg *a = p;
    g_k->scale(a->g, a->n, 1.0f); /* by 1: the gradients stay as they are over the calls */
}

static void bench_optimizer(int T)
{
    int ns;
    size_t n, elems;
    merak_adamw_span *hs = gpt2_spans(12, 768, 50257, T > 1024 ? T : 1024, &ns, &n, &elems);
    opt_arg a = {n, drand(n, 34), drand(n, 35), dzero(n), dzero(n), merak_cuda_malloc((size_t)ns * sizeof *hs), ns};
    if (!a.spans || merak_cuda_memcpy_h2d(a.spans, hs, (size_t)ns * sizeof *hs) < 0)
        die("spans");
    const double f = sizeof(float), e = (double)elems, s = (double)ns * sizeof *hs;
    const roof_row rows[] = {
        {"adamw", opt_adamw, f * 7 * e + s},      /* spans, p, g, m, v; p, m, v */
        {"sumsq", opt_sumsq, f * (double)n},      /* x */
        {"scale", opt_scale, f * 2 * (double)n}}; /* x *= */
    char shape[64];
    snprintf(shape, sizeof shape, "%zu", n);
    roof_rows(rows, 3, shape, &a);
    float *bufs[] = {a.p, a.g, a.m, a.v};
    free_all(bufs, 4);
    merak_cuda_free(a.spans);
    free(hs);
}

int main(int argc, char **argv)
{
    int B = 8, T = 1024;
    const char *roof_path = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq-len"))
            T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            g_reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-ms"))
            g_min_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--roofline"))
            roof_path = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench_cuda_ops [--batch B] [--seq-len T] [--reps R] [--min-ms MS] "
                            "[--roofline FILE]\n");
            return 2;
        }
    }
    if (B < 1 || T < 1 || g_reps < 1 || g_reps > 64 || g_min_ms < 0) {
        fprintf(stderr, "bench_cuda_ops: --batch, --seq-len, --reps (1..64) out of range\n");
        return 2;
    }
    g_roof = roof_path ? fopen(roof_path, "w") : stdout;
    if (!g_roof) {
        perror(roof_path);
        return 1;
    }
    if (!merak_cuda_available() || !(g_k = merak_kernels_cuda()))
        die("no usable CUDA device");
    const int N = B * T;
    static const struct { merak_products p; const char *name; } maths[] = {
        {MERAK_PRODUCTS_FP32, "fp32"}, {MERAK_PRODUCTS_TF32, "tf32"}, {MERAK_PRODUCTS_BF16, "bf16"}};
    for (int m = 0; m < 3; m++) {
        merak_cuda_set_products(maths[m].p);
        g_math = maths[m].name;
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
    /* bf16 storage, as --dtype bf16 trains: GPT-2's shapes, the 8192^3
     * peak of the same path, and the head with its rows of logits dense
     * (50257 apart: all but one off 16 bytes) and padded to 50264 (what the
     * executor does): what the alignment is worth to cuBLASLt */
    merak_cuda_set_products(MERAK_PRODUCTS_BF16);
    bench_linear16("peak16", 8192, 8192, 8192, 8192, 0);
    bench_linear16("qkv", N, 768, 2304, 2304, 1);
    bench_linear16("attn_proj", N, 768, 768, 768, 1);
    bench_linear16("mlp_fc", N, 768, 3072, 3072, 1);
    bench_linear16("mlp_proj", N, 3072, 768, 768, 1);
    bench_linear16("lm_head_dense", N, 768, 50257, 50257, 0);
    bench_linear16("lm_head", N, 768, 50257, 50264, 0);   /* as the executor pads the logits */
    bench_mlp16(N, 768, 3072);
    probe_linear16("qkv", N, 768, 2304, 2304, 1);
    probe_linear16("attn_proj", N, 768, 768, 768, 1);
    probe_linear16("mlp_fc", N, 768, 3072, 3072, 1);
    probe_linear16("mlp_proj", N, 3072, 768, 768, 1);
    probe_linear16("lm_head", N, 768, 50257, 50264, 0);
    merak_cuda_set_products(MERAK_PRODUCTS_FP32);
    bench_copy(); /* first: of_copy's unit */
    bench_embeddings(B, T, 768, 50257);
    bench_norms(N, 768);
    bench_pointwise(N, 768);
    bench_crossentropy(N, 50257);
    bench_optimizer(T);
#ifdef HAVE_CUDNN_ATTN
    /* last: cuDNN's fused attention (bf16's), the newest path; an error
     * stays the backend's for good */
    merak_cuda_set_products(MERAK_PRODUCTS_BF16);
    g_math = "bf16";
    bench_attention(B, T, 12, 64, MERAK_CUDA_ATTN_CUDNN);
    bench_attention(B > 4 ? B / 4 : 1, 4 * T, 12, 64, MERAK_CUDA_ATTN_CUDNN);
    /* and on bf16 storage, as training runs it: the newest of all */
    bench_attention16(B, T, 12, 64);
    bench_attention16(B > 4 ? B / 4 : 1, 4 * T, 12, 64);
    merak_cuda_set_products(MERAK_PRODUCTS_FP32);
#endif
    if (ferror(g_roof) || (g_roof != stdout && fclose(g_roof) != 0))
        die("cannot write the roofline rows");
    return merak_cuda_status(NULL, 0) ? 1 : 0;
}
