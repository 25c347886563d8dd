/*
 * cpu_kernels.c - the CPU backend: the kernels of cpu_ops_impl.h instantiated
 * for float (merak_kernels_cpu) and double (merak_kernels_cpu_f64).
 *
 * Threads: OpenMP loops only where every iteration writes its own outputs, and
 * no reduction is ever split across threads, so results are bitwise identical
 * whatever the thread count.  GEMMs go through CBLAS (OpenBLAS) as
 * single-threaded calls on fixed output tiles, run by OpenMP threads: OpenBLAS
 * is kept at one thread (its own threading changes the bits with the thread
 * count, and would oversubscribe inside OpenMP loops).
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include "cpu_kernels.h"

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../rope.h"
#include "bf16.h"
#include "memcount.h"
#include "mix64.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Declared by OpenBLAS's cblas.h, but not by every cblas.h. */
void openblas_set_num_threads(int num_threads);

/* ------------------------------------------------------------------ shared helpers */

#ifdef _OPENMP
#define OMP_PRAGMA_(x) _Pragma(#x)
#define OMP(x) OMP_PRAGMA_(omp x)
#else
#define OMP(x)
#endif

/* Loops over less work than this (elements touched) stay on one thread. */
#define PAR_MIN 32768
/* Column block of the weight-gradient reductions (one thread per block). */
#define COLBLK 64
/* GEMM tiles (rows x columns of the output), one BLAS call each. */
#define GEMM_MT 128
#define GEMM_NT 256
/* Query rows per attention GEMM block. */
#define ATT_BLK 64
/* Fixed chunks of sumsq: partial sums are combined in chunk order. */
#define SUMSQ_CHUNKS 64

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

static inline int imin(int a, int b) { return a < b ? a : b; }

static inline float dropout_u(uint64_t key, uint64_t i)
{
    uint64_t z = merak_mix64(key + (i + 1) * MERAK_GOLDEN);
    return (float)(z >> 40) * 0x1.0p-24f;
}

uint64_t merak_dropout_key(uint64_t seed) { return merak_mix64(seed + MERAK_GOLDEN); }

/* ------------------------------------------------------------------ memory
 * Host memory: "device" and "host" are the same address space. */

static merak_memcount cpu_count = MERAK_MEMCOUNT_INIT;

static void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64))
        return NULL;
    if (merak_memcount_add(&cpu_count, p, bytes) < 0) {
        free(p);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *p)
{
    merak_memcount_remove(&cpu_count, p);
    free(p);
}

static void cpu_memory(size_t *in_use, size_t *peak) { merak_memcount_get(&cpu_count, in_use, peak); }

/* The number after `key` in the first line of `path` that has it, or -1. */
static long long read_number(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    long long v = -1;
    size_t n = strlen(key);
    while (v < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && sscanf(line + n, "%lld", &v) != 1)
            v = -1;
    fclose(f);
    return v;
}

/* limit - usage of the cgroup files at dir (limit file, usage file), or -1
 * when there is no limit (v2 "max", v1's 2^63 rounded down to a page). */
static long long cgroup_files(const char *dir, const char *limit_file, const char *usage_file)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, limit_file);
    long long max = read_number(path, "");
    snprintf(path, sizeof path, "%s/%s", dir, usage_file);
    long long cur = read_number(path, "");
    if (max < 0 || cur < 0 || max >= (1LL << 62))
        return -1;
    return max > cur ? max - cur : 0;
}

/* What this process's memory cgroup (v2, else v1) still lets it
 * allocate, or -1 when no limit holds it (a batch system's is one). */
static long long cgroup_left(void)
{
    char v2[400] = "", v1[400] = "", line[400], dir[512];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        const char *mem = strstr(line, ":memory:");
        if (strncmp(line, "0::", 3) == 0)
            snprintf(v2, sizeof v2, "%s", line + 3);
        else if (mem)
            snprintf(v1, sizeof v1, "%s", mem + 8);
    }
    fclose(f);
    long long left = -1;
    if (v2[0]) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", v2);
        left = cgroup_files(dir, "memory.max", "memory.current");
    }
    if (left < 0 && v1[0]) {
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory%s", v1);
        left = cgroup_files(dir, "memory.limit_in_bytes", "memory.usage_in_bytes");
    }
    return left;
}

/* Host memory: MemAvailable (what can be allocated without swapping, page
 * cache included), within this process's cgroup limit. */
static int cpu_capacity(size_t *free_bytes, size_t *total_bytes)
{
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES);
    long long avail = read_number("/proc/meminfo", "MemAvailable:"), left = cgroup_left();
    if (page <= 0 || total <= 0)
        return -1;
    avail = avail >= 0 ? avail * 1024 : (long long)sysconf(_SC_AVPHYS_PAGES) * page;
    if (left >= 0 && left < avail)
        avail = left;
    if (avail < 0)
        return -1;
    *free_bytes = (size_t)avail;
    *total_bytes = (size_t)total * (size_t)page;
    return 0;
}

static int cpu_zero(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
    return 0;
}

static int cpu_copy(void *dst, const void *src, size_t bytes, merak_copy_kind kind)
{
    (void)kind;
    if (bytes && dst != src)
        memcpy(dst, src, bytes);
    return 0;
}

static int cpu_synchronize(void) { return 0; }

/* Device time on the host: a kernel is done when its call returns, so a
 * mark is the clock's reading when it is made. */
static struct {
    double *t;
    int n, cap;
} cpu_marks;

static int cpu_mark(void)
{
    if (cpu_marks.n == cpu_marks.cap) {
        int cap = cpu_marks.cap ? 2 * cpu_marks.cap : 256;
        double *t = realloc(cpu_marks.t, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        cpu_marks.t = t;
        cpu_marks.cap = cap;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    cpu_marks.t[cpu_marks.n] = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return cpu_marks.n++;
}

static double cpu_mark_seconds(int a, int b)
{
    if (a < 0 || b < 0 || a >= cpu_marks.n || b >= cpu_marks.n)
        return -1;
    return cpu_marks.t[b] - cpu_marks.t[a];
}

static void cpu_marks_clear(void) { cpu_marks.n = 0; }

/* bf16 storage emulated in float storage: every value the nearest bf16. */
static void cpu_round_bf16(float *x, size_t n)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        x[i] = merak_bf16_round(x[i]);
}

/* bf16 storage: narrowed as cpu_round_bf16 rounds, widened exactly. */
static void cpu_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        dst[i] = merak_f32_to_bf16(src[i]);
}

static void cpu_from_bf16(float *dst, const uint16_t *src, size_t n)
{
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t i = 0; i < (ptrdiff_t)n; i++)
        dst[i] = merak_bf16_to_f32(src[i]);
}

float merak_dropout_uniform(uint64_t key, uint64_t i) { return dropout_u(key, i); }

/* bf16 storage run natively (kernels.h): defined after the float table,
 * whose kernels they call. */
static void cpu_linear16_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *w, const uint16_t *b,
                             int N, int K, int O, int ldo, float *scratch);
static void cpu_linear16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N, int K,
                               int O, int ldo, int acc, float *scratch);
static void cpu_linear16_bwd_w(float *dw, float *db, const uint16_t *dout, const uint16_t *inp, int N,
                               int K, int O, int ldo, float *scratch);
static void cpu_embedding16_fwd(uint16_t *out, const int32_t *ids, const uint16_t *wte, int N, int C,
                                int v0, int V);
static void cpu_embedding16_bwd_w(float *dwte, const uint16_t *dout, const int32_t *ids, int N, int C,
                                  int v0, int V, float *scratch);
static void cpu_crossentropy16_stats(float *lse, float *tlogit, const uint16_t *logits, const int32_t *targets,
                                     int N, int V, int ld, int v0, float *scratch);
static void cpu_crossentropy16_bwd(uint16_t *dlogits, const uint16_t *logits, const float *lse,
                                   const int32_t *targets, int N, int V, int ld, int v0, float scale, float *scratch);
static void cpu_crossentropy16_fused(float *lse, float *tlogit, uint16_t *logits, const int32_t *targets, int N,
                                     int V, int ld, int v0, float scale, float *scratch);
static void cpu_posemb16_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *wpe, int B, int T, int C,
                             float *scratch);
static void cpu_posemb16_bwd_w(float *dwpe, const uint16_t *dout, int B, int T, int C, float *scratch);
static void cpu_gelu16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float *scratch);
static void cpu_linear16_gelu_fwd(uint16_t *pre, uint16_t *out, const uint16_t *inp, const uint16_t *w,
                                  const uint16_t *b, int N, int K, int O, float *scratch);
static void cpu_linear16_bwd_x_dgelu(uint16_t *dpre, const uint16_t *dout, const uint16_t *w, const uint16_t *pre,
                                     int N, int K, int O, int ldo, float *scratch);
static void cpu_gelu16_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n, int acc,
                           float *scratch);
static void cpu_swiglu16_fwd(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n, float *scratch);
static void cpu_swiglu16_bwd(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                             const uint16_t *up, size_t n, int acc, float *scratch);
static void cpu_add16_fwd(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n, float *scratch);
static void cpu_accumulate16(uint16_t *dst, const uint16_t *src, size_t n, float *scratch);
static void cpu_dropout16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float p, uint64_t seed, uint64_t i0,
                              float *scratch);
static void cpu_dropout16_bwd(uint16_t *dinp, const uint16_t *dout, size_t n, float p, uint64_t seed, uint64_t i0,
                              int acc, float *scratch);
static void cpu_layernorm16_fwd(uint16_t *out, float *mean, float *rstd, const uint16_t *inp, const uint16_t *w,
                                const uint16_t *b, int N, int C, float eps, float *scratch);
static void cpu_layernorm16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                  const float *mean, const float *rstd, int N, int C, int acc, float *scratch);
static void cpu_layernorm16_bwd_w(float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                                  const float *mean, const float *rstd, int N, int C, float *scratch);
static void cpu_layernorm16_bwd(uint16_t *dinp, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                                const uint16_t *w, const float *mean, const float *rstd, int N, int C, int acc,
                                float *scratch);
static void cpu_rmsnorm16_bwd(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *w, const float *rstd, int N, int C, int acc, float *scratch);
static void cpu_rmsnorm16_fwd(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w, int N, int C,
                              float eps, float *scratch);
static void cpu_add_layernorm16_fwd(uint16_t *sum, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                    const uint16_t *b, const uint16_t *w, const uint16_t *bias, int N, int C,
                                    float eps, float *scratch);
static void cpu_add_rmsnorm16_fwd(uint16_t *sum, uint16_t *out, float *rstd, const uint16_t *a, const uint16_t *b,
                                  const uint16_t *w, int N, int C, float eps, float *scratch);
static void cpu_rmsnorm16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                const float *rstd, int N, int C, int acc, float *scratch);
static void cpu_rmsnorm16_bwd_w(float *dw, const uint16_t *dout, const uint16_t *inp, const float *rstd, int N,
                                int C, float *scratch);
static void cpu_attention16_fwd(const merak_attn_shape *s, uint16_t *out, float *lse, float *qr, float *kr,
                                const uint16_t *q, const uint16_t *k, const uint16_t *v, float *ascratch,
                                float *scratch);
static void cpu_attention16_bwd(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                const uint16_t *dout, const uint16_t *out, const float *lse, const float *qr,
                                const float *kr, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                float *ascratch, float *scratch, int acc);
static size_t cpu_attention16_scratch_elems(const merak_attn_shape *s);

/* ------------------------------------------------------------------ float */

#define REAL float
#define SFX _f32
#define GEMM cblas_sgemm
#define R_EXP expf
#define R_SQRT sqrtf
#define R_TANH tanhf
#define R_COS cosf
#define R_SIN sinf
#define R_INV_FREQ merak_rope_inv_freq
#define TABLE_T merak_kernels
#define TABLE_NAME "cpu"
#define TABLE_MEMORY .alloc = cpu_alloc, .free = cpu_free, .zero = cpu_zero, .copy = cpu_copy, \
                     .synchronize = cpu_synchronize, .memory = cpu_memory, .capacity = cpu_capacity, \
                     .mark = cpu_mark, .mark_seconds = cpu_mark_seconds, .marks_clear = cpu_marks_clear, \
                     .round_bf16 = cpu_round_bf16, .to_bf16 = cpu_to_bf16, .from_bf16 = cpu_from_bf16, \
                     .bf16_scratch = 1, .linear16_fwd = cpu_linear16_fwd, \
                     .linear16_bwd_x = cpu_linear16_bwd_x, .linear16_bwd_w = cpu_linear16_bwd_w, \
                     .linear16_gelu_fwd = cpu_linear16_gelu_fwd, .linear16_bwd_x_dgelu = cpu_linear16_bwd_x_dgelu, \
                     .embedding16_fwd = cpu_embedding16_fwd, .embedding16_bwd_w = cpu_embedding16_bwd_w, \
                     .crossentropy16_stats = cpu_crossentropy16_stats, \
                     .crossentropy16_bwd = cpu_crossentropy16_bwd, \
                     .crossentropy16_fused = cpu_crossentropy16_fused, .posemb16_fwd = cpu_posemb16_fwd, \
                     .posemb16_bwd_w = cpu_posemb16_bwd_w, .gelu16_fwd = cpu_gelu16_fwd, \
                     .gelu16_bwd = cpu_gelu16_bwd, .swiglu16_fwd = cpu_swiglu16_fwd, \
                     .swiglu16_bwd = cpu_swiglu16_bwd, .add16_fwd = cpu_add16_fwd, \
                     .accumulate16 = cpu_accumulate16, .dropout16_fwd = cpu_dropout16_fwd, \
                     .dropout16_bwd = cpu_dropout16_bwd, .layernorm16_fwd = cpu_layernorm16_fwd, \
                     .layernorm16_bwd_x = cpu_layernorm16_bwd_x, .layernorm16_bwd_w = cpu_layernorm16_bwd_w, \
                     .rmsnorm16_fwd = cpu_rmsnorm16_fwd, .rmsnorm16_bwd_x = cpu_rmsnorm16_bwd_x, \
                     .rmsnorm16_bwd_w = cpu_rmsnorm16_bwd_w, .layernorm16_bwd = cpu_layernorm16_bwd, \
                     .rmsnorm16_bwd = cpu_rmsnorm16_bwd, .add_layernorm16_fwd = cpu_add_layernorm16_fwd, \
                     .add_rmsnorm16_fwd = cpu_add_rmsnorm16_fwd, .attention16_fwd = cpu_attention16_fwd, \
                     .attention16_bwd = cpu_attention16_bwd, \
                     .attention16_scratch_elems = cpu_attention16_scratch_elems,
#include "cpu_ops_impl.h"
#undef TABLE_MEMORY
#undef REAL
#undef SFX
#undef GEMM
#undef R_EXP
#undef R_SQRT
#undef R_TANH
#undef R_COS
#undef R_SIN
#undef R_INV_FREQ
#undef TABLE_T
#undef TABLE_NAME

/* ------------------------------------------------------------------ bf16 storage
 *
 * The float kernels on widened copies in scratch, what they write rounded
 * back once: bit for bit what the executor's staging gives (exec.h), which
 * is what makes the CPU the reference of a GPU's native bf16 kernels.  The
 * scratch holds the operands one after another, each rounded up to 64
 * bytes: no more than the operands' elements plus 16 floats each. */

/* The next n floats of scratch at *at, widened from src if given. */
static float *widen(float *scratch, size_t *at, const uint16_t *src, size_t n)
{
    float *f = scratch + *at;
    *at += (n + 15) / 16 * 16;
    if (src)
        cpu_from_bf16(f, src, n);
    return f;
}

/* rows of w elements, ss (ds) apart in bf16 storage, widened dense into
 * the next floats of scratch (src NULL: not read), and narrowed back: the
 * logits' padded rows, attention's strided q, k, v. */
static float *widen_rows(float *scratch, size_t *at, const uint16_t *src, size_t rows, int w, int ss)
{
    if (ss == w)
        return widen(scratch, at, src, rows * (size_t)w);
    float *f = widen(scratch, at, NULL, rows * (size_t)w);
    const size_t n = src ? rows * (size_t)w : 0;
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t e = 0; e < (ptrdiff_t)n; e++)
        f[e] = merak_bf16_to_f32(src[(size_t)e / (size_t)w * (size_t)ss + (size_t)e % (size_t)w]);
    return f;
}

static void narrow_rows(uint16_t *dst, int ds, const float *f, size_t rows, int w)
{
    const size_t n = rows * (size_t)w;
    if (ds == w) {
        cpu_to_bf16(dst, f, n);
        return;
    }
    OMP(parallel for if (n >= PAR_MIN) schedule(static))
    for (ptrdiff_t e = 0; e < (ptrdiff_t)n; e++)
        dst[(size_t)e / (size_t)w * (size_t)ds + (size_t)e % (size_t)w] = merak_f32_to_bf16(f[e]);
}

static void cpu_linear16_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *w, const uint16_t *b,
                             int N, int K, int O, int ldo, float *scratch)
{
    if (N <= 0 || O <= 0)
        return;
    size_t at = 0;
    const size_t nk = (size_t)N * (size_t)(K > 0 ? K : 0), ok = (size_t)O * (size_t)(K > 0 ? K : 0);
    const float *fi = widen(scratch, &at, inp, nk), *fw = widen(scratch, &at, w, ok);
    const float *fb = b ? widen(scratch, &at, b, (size_t)O) : NULL;
    float *fo = widen(scratch, &at, NULL, (size_t)N * O);
    linear_fwd_f32(fo, fi, fw, fb, N, K, O);
    narrow_rows(out, ldo, fo, (size_t)N, O);
}

static void cpu_linear16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N, int K,
                               int O, int ldo, int acc, float *scratch)
{
    if (N <= 0 || K <= 0 || (O <= 0 && acc))
        return;
    O = O < 0 ? 0 : O;
    size_t at = 0;
    const float *fd = widen_rows(scratch, &at, dout, (size_t)N, O, ldo), *fw = widen(scratch, &at, w, (size_t)O * K);
    float *fx = widen(scratch, &at, acc ? dinp : NULL, (size_t)N * K);
    linear_bwd_x_f32(fx, fd, fw, N, K, O, acc);
    cpu_to_bf16(dinp, fx, (size_t)N * K);
}

static void cpu_linear16_bwd_w(float *dw, float *db, const uint16_t *dout, const uint16_t *inp, int N,
                               int K, int O, int ldo, float *scratch)
{
    if (N <= 0 || O <= 0)
        return;
    size_t at = 0;
    const float *fd = widen_rows(scratch, &at, dout, (size_t)N, O, ldo);
    const float *fi = dw && K > 0 ? widen(scratch, &at, inp, (size_t)N * K) : NULL;
    linear_bwd_w_f32(fi ? dw : NULL, db, fd, fi, N, K, O);
}

/* Rows of wte as they are: what widening, copying and narrowing give. */
static void cpu_embedding16_fwd(uint16_t *out, const int32_t *ids, const uint16_t *wte, int N, int C,
                                int v0, int V)
{
    OMP(parallel for if ((size_t)N * C >= PAR_MIN) schedule(static))
    for (int n = 0; n < N; n++) {
        const int64_t r = (int64_t)ids[n] - v0;
        if (r >= 0 && r < V)
            memcpy(out + (size_t)n * C, wte + (size_t)r * C, (size_t)C * sizeof *out);
        else
            memset(out + (size_t)n * C, 0, (size_t)C * sizeof *out);
    }
}

static void cpu_embedding16_bwd_w(float *dwte, const uint16_t *dout, const int32_t *ids, int N, int C,
                                  int v0, int V, float *scratch)
{
    if (N <= 0 || C <= 0)
        return;
    size_t at = 0;
    embedding_bwd_w_f32(dwte, widen(scratch, &at, dout, (size_t)N * C), ids, N, C, v0, V);
}

static void cpu_crossentropy16_stats(float *lse, float *tlogit, const uint16_t *logits, const int32_t *targets,
                                     int N, int V, int ld, int v0, float *scratch)
{
    if (N <= 0 || V <= 0)
        return;
    size_t at = 0;
    crossentropy_stats_f32(lse, tlogit, widen_rows(scratch, &at, logits, (size_t)N, V, ld), targets, N, V, v0);
}

/* In place, the one widened copy is the float kernel's in-place buffer. */
static void cpu_crossentropy16_bwd(uint16_t *dlogits, const uint16_t *logits, const float *lse,
                                   const int32_t *targets, int N, int V, int ld, int v0, float scale, float *scratch)
{
    if (N <= 0 || V <= 0)
        return;
    size_t at = 0;
    float *fx = widen_rows(scratch, &at, logits, (size_t)N, V, ld);
    float *fd = dlogits == logits ? fx : widen_rows(scratch, &at, dlogits, (size_t)N, V, ld);
    crossentropy_bwd_f32(fd, fx, lse, targets, N, V, v0, scale);
    narrow_rows(dlogits, ld, fd, (size_t)N, V);
}

/* The two above on one widened copy. */
static void cpu_crossentropy16_fused(float *lse, float *tlogit, uint16_t *logits, const int32_t *targets, int N,
                                     int V, int ld, int v0, float scale, float *scratch)
{
    if (N <= 0 || V <= 0)
        return;
    size_t at = 0;
    float *fx = widen_rows(scratch, &at, logits, (size_t)N, V, ld);
    crossentropy_stats_f32(lse, tlogit, fx, targets, N, V, v0);
    crossentropy_bwd_f32(fx, fx, lse, targets, N, V, v0, scale);
    narrow_rows(logits, ld, fx, (size_t)N, V);
}

/* The position embedding: wpe's first T rows widened (of its P). */
static void cpu_posemb16_fwd(uint16_t *out, const uint16_t *inp, const uint16_t *wpe, int B, int T, int C,
                             float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)B * T * C;
    const float *x = widen(scratch, &at, inp, n), *p = widen(scratch, &at, wpe, (size_t)T * C);
    float *y = widen(scratch, &at, NULL, n);
    posemb_fwd_f32(y, x, p, B, T, C);
    cpu_to_bf16(out, y, n);
}

static void cpu_posemb16_bwd_w(float *dwpe, const uint16_t *dout, int B, int T, int C, float *scratch)
{
    size_t at = 0;
    posemb_bwd_w_f32(dwpe, widen(scratch, &at, dout, (size_t)B * T * C), B, T, C);
}

/* The elementwise ops: an elementwise call's n-element inputs in[0..ni)
 * widened into f[], then its output, widened too where the op adds to it
 * (acc), else made in scratch; the caller narrows the output after the
 * float kernel. */
static float *ew16(float *scratch, const uint16_t *const *in, int ni, const float **f, const uint16_t *acc,
                   size_t n)
{
    size_t at = 0;
    for (int i = 0; i < ni; i++)
        f[i] = widen(scratch, &at, in[i], n);
    return widen(scratch, &at, acc, n);
}

static void cpu_gelu16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float *scratch)
{
    const float *f[1];
    float *y = ew16(scratch, (const uint16_t *const[]){inp}, 1, f, NULL, n);
    gelu_fwd_f32(y, f[0], n);
    cpu_to_bf16(out, y, n);
}

static void cpu_gelu16_bwd(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n, int acc,
                           float *scratch)
{
    const float *f[2];
    float *dx = ew16(scratch, (const uint16_t *const[]){dout, inp}, 2, f, acc ? dinp : NULL, n);
    gelu_bwd_f32(dx, f[0], f[1], n, acc);
    cpu_to_bf16(dinp, dx, n);
}

/* The linear layer's entry, then GELU's: the two calls' bits (the
 * product's gradient rounded into dpre, then GELU's backward over it in
 * place: each element read before it is written). */
static void cpu_linear16_gelu_fwd(uint16_t *pre, uint16_t *out, const uint16_t *inp, const uint16_t *w,
                                  const uint16_t *b, int N, int K, int O, float *scratch)
{
    cpu_linear16_fwd(pre, inp, w, b, N, K, O, O, scratch);
    if (N > 0 && O > 0)
        cpu_gelu16_fwd(out, pre, (size_t)N * O, scratch);
}

static void cpu_linear16_bwd_x_dgelu(uint16_t *dpre, const uint16_t *dout, const uint16_t *w, const uint16_t *pre,
                                     int N, int K, int O, int ldo, float *scratch)
{
    if (N <= 0 || K <= 0)
        return;
    cpu_linear16_bwd_x(dpre, dout, w, N, K, O, ldo, 0, scratch);
    cpu_gelu16_bwd(dpre, dpre, pre, (size_t)N * K, 0, scratch);
}

static void cpu_swiglu16_fwd(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n, float *scratch)
{
    const float *f[2];
    float *y = ew16(scratch, (const uint16_t *const[]){gate, up}, 2, f, NULL, n);
    swiglu_fwd_f32(y, f[0], f[1], n);
    cpu_to_bf16(out, y, n);
}

static void cpu_swiglu16_bwd(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                             const uint16_t *up, size_t n, int acc, float *scratch)
{
    size_t at = 0;
    const float *d = widen(scratch, &at, dout, n), *g = widen(scratch, &at, gate, n), *u = widen(scratch, &at, up, n);
    float *dg = dgate ? widen(scratch, &at, acc ? dgate : NULL, n) : NULL;
    float *du = dup ? widen(scratch, &at, acc ? dup : NULL, n) : NULL;
    swiglu_bwd_f32(dg, du, d, g, u, n, acc);
    if (dg)
        cpu_to_bf16(dgate, dg, n);
    if (du)
        cpu_to_bf16(dup, du, n);
}

static void cpu_add16_fwd(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n, float *scratch)
{
    const float *f[2];
    float *y = ew16(scratch, (const uint16_t *const[]){a, b}, 2, f, NULL, n);
    add_fwd_f32(y, f[0], f[1], n);
    cpu_to_bf16(out, y, n);
}

static void cpu_accumulate16(uint16_t *dst, const uint16_t *src, size_t n, float *scratch)
{
    const float *f[1];
    float *y = ew16(scratch, (const uint16_t *const[]){src}, 1, f, dst, n);
    accumulate_f32(y, f[0], n);
    cpu_to_bf16(dst, y, n);
}

static void cpu_dropout16_fwd(uint16_t *out, const uint16_t *inp, size_t n, float p, uint64_t seed, uint64_t i0,
                              float *scratch)
{
    const float *f[1];
    float *y = ew16(scratch, (const uint16_t *const[]){inp}, 1, f, NULL, n);
    dropout_fwd_f32(y, f[0], n, p, seed, i0);
    cpu_to_bf16(out, y, n);
}

static void cpu_dropout16_bwd(uint16_t *dinp, const uint16_t *dout, size_t n, float p, uint64_t seed, uint64_t i0,
                              int acc, float *scratch)
{
    const float *f[1];
    float *dx = ew16(scratch, (const uint16_t *const[]){dout}, 1, f, acc ? dinp : NULL, n);
    dropout_bwd_f32(dx, f[0], n, p, seed, i0, acc);
    cpu_to_bf16(dinp, dx, n);
}

/* The norms: (N,C) rows and C-wide weights widened. */
static void cpu_layernorm16_fwd(uint16_t *out, float *mean, float *rstd, const uint16_t *inp, const uint16_t *w,
                                const uint16_t *b, int N, int C, float eps, float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)N * C;
    const float *x = widen(scratch, &at, inp, n), *fw = widen(scratch, &at, w, (size_t)C);
    const float *fb = b ? widen(scratch, &at, b, (size_t)C) : NULL;
    float *y = widen(scratch, &at, NULL, n);
    layernorm_fwd_f32(y, mean, rstd, x, fw, fb, N, C, eps);
    cpu_to_bf16(out, y, n);
}

static void cpu_layernorm16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                  const float *mean, const float *rstd, int N, int C, int acc, float *scratch)
{
    cpu_layernorm16_bwd(dinp, NULL, NULL, dout, inp, w, mean, rstd, N, C, acc, scratch);
}

static void cpu_layernorm16_bwd_w(float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                                  const float *mean, const float *rstd, int N, int C, float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)N * C;
    const float *d = widen(scratch, &at, dout, n), *x = widen(scratch, &at, inp, n);
    layernorm_bwd_w_f32(dw, db, d, x, mean, rstd, N, C);
}

/* Both parts from one widening of dout, inp and w: the two entries' work
 * and bits (dw, db NULL: the input part alone, which bwd_x is). */
static void cpu_layernorm16_bwd(uint16_t *dinp, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                                const uint16_t *w, const float *mean, const float *rstd, int N, int C, int acc,
                                float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)N * C;
    const float *d = widen(scratch, &at, dout, n), *x = widen(scratch, &at, inp, n),
                *fw = widen(scratch, &at, w, (size_t)C);
    float *dx = widen(scratch, &at, acc ? dinp : NULL, n);
    layernorm_bwd_x_f32(dx, d, x, fw, mean, rstd, N, C, acc);
    cpu_to_bf16(dinp, dx, n);
    if (dw || db)
        layernorm_bwd_w_f32(dw, db, d, x, mean, rstd, N, C);
}

static void cpu_rmsnorm16_fwd(uint16_t *out, float *rstd, const uint16_t *inp, const uint16_t *w, int N, int C,
                              float eps, float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)N * C;
    const float *x = widen(scratch, &at, inp, n), *fw = widen(scratch, &at, w, (size_t)C);
    float *y = widen(scratch, &at, NULL, n);
    rmsnorm_fwd_f32(y, rstd, x, fw, N, C, eps);
    cpu_to_bf16(out, y, n);
}

static void cpu_rmsnorm16_bwd_x(uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                                const float *rstd, int N, int C, int acc, float *scratch)
{
    cpu_rmsnorm16_bwd(dinp, NULL, dout, inp, w, rstd, N, C, acc, scratch);
}

static void cpu_rmsnorm16_bwd_w(float *dw, const uint16_t *dout, const uint16_t *inp, const float *rstd, int N,
                                int C, float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)N * C;
    const float *d = widen(scratch, &at, dout, n), *x = widen(scratch, &at, inp, n);
    rmsnorm_bwd_w_f32(dw, d, x, rstd, N, C);
}

static void cpu_rmsnorm16_bwd(uint16_t *dinp, float *dw, const uint16_t *dout, const uint16_t *inp,
                              const uint16_t *w, const float *rstd, int N, int C, int acc, float *scratch)
{
    size_t at = 0;
    const size_t n = (size_t)N * C;
    const float *d = widen(scratch, &at, dout, n), *x = widen(scratch, &at, inp, n),
                *fw = widen(scratch, &at, w, (size_t)C);
    float *dx = widen(scratch, &at, acc ? dinp : NULL, n);
    rmsnorm_bwd_x_f32(dx, d, x, fw, rstd, N, C, acc);
    cpu_to_bf16(dinp, dx, n);
    if (dw)
        rmsnorm_bwd_w_f32(dw, d, x, rstd, N, C);
}

/* The add, then the norm of its rounded sum: the two entries' bits (the
 * scratch is each one's in turn). */
static void cpu_add_layernorm16_fwd(uint16_t *sum, uint16_t *out, float *mean, float *rstd, const uint16_t *a,
                                    const uint16_t *b, const uint16_t *w, const uint16_t *bias, int N, int C,
                                    float eps, float *scratch)
{
    cpu_add16_fwd(sum, a, b, (size_t)N * C, scratch);
    cpu_layernorm16_fwd(out, mean, rstd, sum, w, bias, N, C, eps, scratch);
}

static void cpu_add_rmsnorm16_fwd(uint16_t *sum, uint16_t *out, float *rstd, const uint16_t *a, const uint16_t *b,
                                  const uint16_t *w, int N, int C, float eps, float *scratch)
{
    cpu_add16_fwd(sum, a, b, (size_t)N * C, scratch);
    cpu_rmsnorm16_fwd(out, rstd, sum, w, N, C, eps, scratch);
}

/* Attention: q, k, v (rows at the shape's strides), out and the
 * gradients widened dense (widen_rows); the float kernels on the dense
 * shape (their arithmetic does not depend on the strides); what they wrote
 * narrowed back to its rows. */
static merak_attn_shape dense_shape(const merak_attn_shape *s)
{
    merak_attn_shape d = *s;
    d.q_stride = s->n_head * s->head_dim;
    d.k_stride = d.v_stride = s->n_kv_head * s->head_dim;
    return d;
}

static size_t cpu_attention16_scratch_elems(const merak_attn_shape *s)
{
    return attention_scratch_elems_f32(s);
}

static void cpu_attention16_fwd(const merak_attn_shape *s, uint16_t *out, float *lse, float *qr, float *kr,
                                const uint16_t *q, const uint16_t *k, const uint16_t *v, float *ascratch,
                                float *scratch)
{
    if (s->B <= 0 || s->T <= 0)
        return;
    const merak_attn_shape d = dense_shape(s);
    const size_t BT = (size_t)s->B * (size_t)s->T;
    size_t at = 0;
    const float *fq = widen_rows(scratch, &at, q, BT, d.q_stride, s->q_stride);
    const float *fk = widen_rows(scratch, &at, k, BT, d.k_stride, s->k_stride);
    const float *fv = widen_rows(scratch, &at, v, BT, d.v_stride, s->v_stride);
    float *fo = widen(scratch, &at, NULL, BT * (size_t)d.q_stride);
    attention_fwd_f32(&d, fo, lse, qr, kr, fq, fk, fv, ascratch);
    cpu_to_bf16(out, fo, BT * (size_t)d.q_stride);
}

static void cpu_attention16_bwd(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                const uint16_t *dout, const uint16_t *out, const float *lse, const float *qr,
                                const float *kr, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                float *ascratch, float *scratch, int acc)
{
    if (s->B <= 0 || s->T <= 0)
        return;
    const merak_attn_shape d = dense_shape(s);
    const size_t BT = (size_t)s->B * (size_t)s->T, C = (size_t)d.q_stride;
    size_t at = 0;
    const float *fq = widen_rows(scratch, &at, q, BT, d.q_stride, s->q_stride);
    const float *fk = widen_rows(scratch, &at, k, BT, d.k_stride, s->k_stride);
    const float *fv = widen_rows(scratch, &at, v, BT, d.v_stride, s->v_stride);
    const float *fo = widen(scratch, &at, out, BT * C), *fd = widen(scratch, &at, dout, BT * C);
    float *gq = widen_rows(scratch, &at, acc ? dq : NULL, BT, d.q_stride, s->q_stride);
    float *gk = widen_rows(scratch, &at, acc ? dk : NULL, BT, d.k_stride, s->k_stride);
    float *gv = widen_rows(scratch, &at, acc ? dv : NULL, BT, d.v_stride, s->v_stride);
    attention_bwd_f32(&d, gq, gk, gv, fd, fo, lse, qr, kr, fq, fk, fv, ascratch, acc);
    narrow_rows(dq, s->q_stride, gq, BT, d.q_stride);
    narrow_rows(dk, s->k_stride, gk, BT, d.k_stride);
    narrow_rows(dv, s->v_stride, gv, BT, d.v_stride);
}

/* ------------------------------------------------------------------ double */

#define REAL double
#define SFX _f64
#define GEMM cblas_dgemm
#define R_EXP exp
#define R_SQRT sqrt
#define R_TANH tanh
#define R_COS cos
#define R_SIN sin
#define R_INV_FREQ merak_rope_inv_freq_f64
#define TABLE_T merak_kernels_f64
#define TABLE_NAME "cpu_f64"
#include "cpu_ops_impl.h"
#undef REAL
#undef SFX
#undef GEMM
#undef R_EXP
#undef R_SQRT
#undef R_TANH
#undef R_COS
#undef R_SIN
#undef R_INV_FREQ
#undef TABLE_T
#undef TABLE_NAME

/* ------------------------------------------------------------------ public */

/* Getting a table pins BLAS to one thread (see the top of this file). */
const merak_kernels *merak_kernels_cpu(void)
{
    openblas_set_num_threads(1);
    return &cpu_table_f32;
}

const merak_kernels_f64 *merak_kernels_cpu_f64(void)
{
    openblas_set_num_threads(1);
    return &cpu_table_f64;
}

/* nthreads OpenMP threads run the kernels (GEMM tiles included); each BLAS
 * call stays single-threaded. */
void merak_kernels_cpu_set_threads(int nthreads)
{
    if (nthreads < 1)
        nthreads = 1;
#ifdef _OPENMP
    omp_set_num_threads(nthreads);
#endif
    openblas_set_num_threads(1);
}
