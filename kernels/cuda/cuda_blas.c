/*
 * cuda_blas.c - the CUDA backend's GEMMs: cuBLASLt, dlopen'ed when the
 * backend starts, with one algorithm cached per shape (cuda_kernels.h,
 * merak_cuda_gemm).  The linear layers (cuda_glue.c) and the attention
 * (cuda_attention.c) call it; it calls only cuda_mem.c (errors, stream).
 *
 * GEMMs: row-major tensors are handed to column-major cuBLASLt as their
 * transposes (a row-major (r,c) buffer is a column-major (c,r) matrix), FP32
 * in, FP32 out (merak_cuda_gemm), or bf16 in, bf16 or FP32 out
 * (merak_cuda_gemm16: bf16 storage's linear layers, CUBLAS_COMPUTE_32F,
 * a bf16 result rounded once).  The FP32 products' math
 * (merak_cuda_set_products): FP32,
 * CUBLAS_COMPUTE_32F; TF32 (--dtype tf32), CUBLAS_COMPUTE_32F_FAST_TF32: the
 * tensor cores multiply the inputs rounded to TF32 (10 bits of mantissa);
 * BF16 (--dtype bf16), CUBLAS_COMPUTE_32F_FAST_16BF: the tensor cores
 * multiply the inputs rounded to bfloat16, which changes nothing for a
 * bf16 executor's operands (already bf16 values); every one accumulates in
 * FP32.  The algorithm of a shape is chosen once by the heuristic and
 * cached, so repeated calls run the same kernel: cuBLASLt is bitwise
 * reproducible for a fixed algorithm on the same GPU model.
 */
#include "config.h" /* MERAK_CUDA_LIBDIR */

/* cublasLt.h declares `cublasLtLoggerForceDisable()` without `void`, which
 * -Wstrict-prototypes -Werror rejects when CUDA's include dir is not a system
 * one (-I, not -isystem). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h> /* cublasLtMatmul & co. (types; the functions are dlopen'ed) */
#pragma GCC diagnostic pop
#include <cuda_runtime_api.h> /* cudaMalloc */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h> /* qsort */
#include <string.h>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"

/* cuBLASLt workspace (NVIDIA recommends 32 MiB on Hopper). */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
/* Cached GEMM algorithms (one per distinct shape/layout/alignment). */
#define LT_CACHE 64

typedef struct lt_key {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int bias;        /* BIAS epilogue */
    int beta_zero;   /* beta == 0 */
    int al_a, al_b, al_c; /* pointer alignments (bytes) */
    int batch;            /* strided-batched products (1: one) */
    long long sa, sb, sc; /* their strides (elements) */
    int math;             /* merak_cuda_products: the compute type */
    int ab, cd;           /* the operands' types: A and B, C and D (cudaDataType) */
    int epi;              /* lt_epi_kind: GELU's epilogues */
    int al_aux, ld_aux;   /* their aux matrix's alignment and ld (the heuristic reads the pointer) */
    int al_bias;          /* the bias's alignment (likewise) */
    int tuned;            /* chosen by timing the candidates (merak_cuda_set_gemm_tune); the
                           * struct has no padding (it is memcmp'd, and copies need not
                           * keep padding bytes) */
} lt_key;
_Static_assert(sizeof(lt_key) == 22 * sizeof(int) + 3 * sizeof(long long), "lt_key has padding");

typedef struct lt_entry {
    lt_key key;
    int found; /* 0: the heuristic had no algorithm for it */
    cublasLtMatmulAlgo_t algo;
} lt_entry;

/* The backend's cuBLASLt state (cuda_mem.c holds the device's, its stream
 * and the first error). */
static struct cuda_blas {
    cublasLtHandle_t lt;
    void *lt_ws;
    lt_entry cache[LT_CACHE];
    int ncache;
    unsigned evict;   /* with the cache full, the next slot a new shape replaces */
    merak_products math;   /* the products' math (merak_cuda_set_products) */
    int tune;              /* merak_cuda_set_gemm_tune */
} cb;

void merak_cuda_set_gemm_tune(int on) { cb.tune = on != 0; }
int merak_cuda_gemm_tune(void) { return cb.tune; }

void merak_cuda_set_products(merak_products p)
{
    cb.math = p == MERAK_PRODUCTS_TF32 || p == MERAK_PRODUCTS_BF16 ? p : MERAK_PRODUCTS_FP32;
}

merak_products merak_cuda_products(void) { return cb.math; }

static cublasComputeType_t compute_type(merak_products p)
{
    switch (p) {
    case MERAK_PRODUCTS_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MERAK_PRODUCTS_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}

/* cuBLASLt is loaded when the backend starts, not linked: the library alone
 * costs a process about 210 MB of resident memory, which every tool of a
 * CUDA build (the planner on a login node too) would otherwise pay. */
#define LT_FUNCTIONS(X) X(Create) X(GetStatusString) X(Matmul) X(MatmulAlgoConfigGetAttribute) X(MatmulAlgoGetHeuristic) X(MatmulDescCreate) X(MatmulDescDestroy) X(MatmulDescSetAttribute) X(MatmulPreferenceCreate) X(MatmulPreferenceDestroy) X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate) X(MatrixLayoutDestroy) X(MatrixLayoutSetAttribute)
#define LT_POINTER(name) __typeof__(cublasLt##name) *name;
static struct { LT_FUNCTIONS(LT_POINTER) } lt;
#undef LT_POINTER

/* ------------------------------------------------------------------ errors */

static int lt_ok(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 1;
    merak_cuda_record(what, lt.GetStatusString(st));
    return 0;
}

/* ------------------------------------------------------------------ cuBLASLt */

int merak_cuda_ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 2 && a % (uintptr_t)al)
        al >>= 1;
    return al;
}

/* How many of the heuristic's algorithms lt_algo looks at. */
#define LT_CANDIDATES 8

/* Which of the heuristic's n candidates (best first) a shape keeps: the
 * first, except where a bf16 result has something added to the product
 * (a bias epilogue, beta 1 on a bf16 C).  There the first candidate with
 * no K split (lt_unsplit: may a candidate be kept; with no addend, any).
 * Why: on an H200, of all the bf16 products tested only small ones with
 * an addend (N = 33-40, the summed dimension under 100)
 * came out about 3 bf16 roundings from the CPU's one (bench/RESULTS.md
 * 14k), as if the addend met a product already rounded; small products
 * are where the heuristic splits K.  That cause is inferred, not yet
 * seen: CUBLASLT_LOG_LEVEL=2 on a GPU prints the algorithm chosen.  An
 * unsplit algorithm adds in the epilogue, in fp32, and rounds once.
 * With none unsplit, the first. */
static int lt_unsplit(const lt_key *key, const cublasLtMatmulHeuristicResult_t *r)
{
    int32_t splits = 1;
    size_t got = 0;
    return (key->cd != (int)CUDA_R_16BF || (!key->bias && key->beta_zero)) ||
           (r->state == CUBLAS_STATUS_SUCCESS &&
            lt.MatmulAlgoConfigGetAttribute(&r->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
                                            &got) == CUBLAS_STATUS_SUCCESS &&
            splits <= 1);
}

static int lt_pick(const lt_key *key, const cublasLtMatmulHeuristicResult_t *res, int n)
{
    for (int i = 0; i < n; i++)
        if (lt_unsplit(key, &res[i]))
            return i;
    return 0;
}

/* The heuristic's algorithms for key (best first, at most LT_CANDIDATES):
 * *nres of them (0: none exists), and 0; or -1 on an error (recorded). */
static int lt_heuristic(const lt_key *key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                        cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatmulHeuristicResult_t *res,
                        int *nres)
{
    *nres = 0;
    cublasLtMatmulPreference_t pref = NULL;
    if (!lt_ok(lt.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"))
        return -1;
    uint64_t ws = LT_WORKSPACE_BYTES;
    uint32_t al[3] = {(uint32_t)key->al_a, (uint32_t)key->al_b, (uint32_t)key->al_c};
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; /* (no split is always allowed) */
    int rc = 0;
    if (!lt_ok(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        !lt_ok(lt.MatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]),
               "cublasLtMatmulPreferenceSetAttribute") ||
        /* a bf16 result is rounded once: a split-K reduction may keep its
         * partial sums in the compute type (fp32, in the workspace), not
         * in the output (INPLACE) or its type (OUTPUT_TYPE), which would
         * round them to bf16 on the way */
        (key->cd == (int)CUDA_R_16BF &&
         !lt_ok(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red,
                                                sizeof red),
                "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)"))) {
        rc = -1;
    } else {
        cublasStatus_t st =
            lt.MatmulAlgoGetHeuristic(cb.lt, op, la, lb, lc, lc, pref, LT_CANDIDATES, res, nres);
        const uint32_t all = CUBLASLT_REDUCTION_SCHEME_MASK;
        if (key->cd == (int)CUDA_R_16BF &&
            (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && *nres < 1)) &&
            lt_ok(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &all, sizeof all),
                  "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)"))
            /* no algorithm without a split in the output's type: any (a
             * shape the tests never meet; rounding more than once beats
             * failing) */
            st = lt.MatmulAlgoGetHeuristic(cb.lt, op, la, lb, lc, lc, pref, LT_CANDIDATES, res, nres);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && *nres < 1))
            *nres = 0;
        else if (!lt_ok(st, "cublasLtMatmulAlgoGetHeuristic"))
            rc = -1;
    }
    lt.MatmulPreferenceDestroy(pref);
    return rc;
}

/* A benchmark's question (merak_cuda_gemm16_probe): each of the
 * heuristic's algorithms for a product timed on its buffers. */
typedef struct lt_probe {
    int reps, max;
    double *ms;    /* [max]: each one's median milliseconds, < 0 where it failed */
    int n, picked; /* how many were timed; the one lt_algo keeps */
} lt_probe;

static int by_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One call of algorithm `algo` timed `reps` times on the stream: the
 * median milliseconds, or -1 where a call failed (not recorded: a
 * candidate the device refuses is a benchmark's answer, not an error). */
static double lt_time_one(cublasLtMatmulDesc_t op, const cublasLtMatmulAlgo_t *algo, float alpha, const void *A,
                          cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, float beta, void *C,
                          cublasLtMatrixLayout_t lc, int reps)
{
    double t[32];
    reps = reps < 1 ? 1 : reps > 32 ? 32 : reps;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double ms = -1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        goto out;
    for (int r = -1; r < reps; r++) {   /* r = -1: a warm-up */
        float f = 0;
        if (cudaEventRecord(e0, merak_cuda_stream()) != cudaSuccess ||
            lt.Matmul(cb.lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, cb.lt_ws, LT_WORKSPACE_BYTES,
                      merak_cuda_stream()) != CUBLAS_STATUS_SUCCESS ||
            cudaEventRecord(e1, merak_cuda_stream()) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&f, e0, e1) != cudaSuccess)
            goto out;
        if (r >= 0)
            t[r] = f;
    }
    qsort(t, (size_t)reps, sizeof *t, by_double);
    ms = t[reps / 2];
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    (void)cudaGetLastError();   /* a refused launch leaves no error behind */
    return ms;
}

/* A product's operands, for timing its candidates (a tuned key). */
typedef struct lt_call {
    float alpha, beta;
    const void *A, *B;
    void *C;
    size_t cbytes;   /* C's extent */
} lt_call;

/* Of the heuristic's n candidates that lt_pick may keep (lt_unsplit), the
 * fastest on the call's operands (three timed runs each, after one): on C
 * itself where beta is 0 (the call writes it after), else on a scratch
 * matrix of C's size (stream-ordered: nothing waits for the whole device),
 * whose values do not change a product's time.  lt_pick's where none ran. */
static int lt_fastest(const lt_key *key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const cublasLtMatmulHeuristicResult_t *res,
                      int n, const lt_call *c)
{
    int pick = lt_pick(key, res, n);
    void *tc = c->C, *tmp = NULL;
    if (!key->beta_zero && (c->cbytes == 0 || cudaMallocAsync(&tmp, c->cbytes, merak_cuda_stream()) != cudaSuccess)) {
        (void)cudaGetLastError();   /* no room to time: the heuristic's */
        return pick;
    }
    if (tmp)
        tc = tmp;
    double best = -1;
    for (int i = 0; i < n; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || !lt_unsplit(key, &res[i]))
            continue;
        const double ms = lt_time_one(op, &res[i].algo, c->alpha, c->A, la, c->B, lb, c->beta, tc, lc, 3);
        if (ms >= 0 && (best < 0 || ms < best))
            best = ms, pick = i;
    }
    if (tmp && cudaFreeAsync(tmp, merak_cuda_stream()) != cudaSuccess)
        (void)cudaGetLastError();   /* (the scratch is the pool's again at exit) */
    return pick;
}

/* The cached algorithm for key, asking the heuristic on a miss (and, a
 * tuned key, timing its candidates on the call c).  Returns the entry
 * (found = 0 when no algorithm exists), or NULL on an error. */
static const lt_entry *lt_algo(const lt_key *key, cublasLtMatmulDesc_t op,
                               cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                               cublasLtMatrixLayout_t lc, const lt_call *c)
{
    for (int i = 0; i < cb.ncache; i++)
        if (!memcmp(&cb.cache[i].key, key, sizeof *key))
            return &cb.cache[i];
    lt_entry fresh;
    memset(&fresh, 0, sizeof fresh);
    fresh.key = *key;
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int nres = 0;
    if (lt_heuristic(key, op, la, lb, lc, res, &nres) < 0)
        return NULL;
    /* an error already pending is the backend's, not a candidate's (those
     * the timing drops) */
    if (key->tuned && nres > 1 && !merak_cuda_ok(cudaGetLastError(), "before timing a GEMM's algorithms"))
        return NULL;
    fresh.found = nres > 0;
    if (nres > 0)
        fresh.algo = res[key->tuned && nres > 1 ? lt_fastest(key, op, la, lb, lc, res, nres, c)
                                                : lt_pick(key, res, nres)].algo;
    /* kept in a free slot, else in place of the oldest (decoding asks for
     * a new shape every token; training's shapes come back) that was not
     * chosen by timing (timed again, a choice could change within the
     * run), unless every one was */
    int at = cb.ncache < LT_CACHE ? cb.ncache++ : -1;
    for (int tries = 0; at < 0 && tries < LT_CACHE; tries++) {
        const int j = (int)(cb.evict++ % LT_CACHE);
        if (!cb.cache[j].key.tuned || tries == LT_CACHE - 1)
            at = j;
    }
    lt_entry *slot = &cb.cache[at];
    *slot = fresh;
    return slot;
}

/* Sets the batch attributes of a layout (count > 1). */
static int lt_layout_batch(cublasLtMatrixLayout_t l, int count, long long stride)
{
    const int32_t c = count;
    const int64_t st = stride;
    return lt_ok(lt.MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof c),
                 "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)") &&
           lt_ok(lt.MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st,
                                             sizeof st),
                 "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
}

/* A GELU epilogue: its kind, and the aux matrix (the pre-activations,
 * of C's type and shape, ld apart). */
typedef enum lt_epi_kind { LT_EPI_NONE = 0, LT_EPI_GELU_AUX, LT_EPI_DGELU } lt_epi_kind;
typedef struct lt_epi {
    lt_epi_kind kind;
    const void *aux;   /* written by GELU_AUX, read by DGELU */
    long long ld;
} lt_epi;
#define LT_NO_EPI ((lt_epi){LT_EPI_NONE, NULL, 0})

/* Its cuBLASLt epilogue with the bias or without. */
static cublasLtEpilogue_t lt_epilogue(lt_epi_kind kind, int bias)
{
    switch (kind) {
    case LT_EPI_GELU_AUX: return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case LT_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* C = alpha op(A) op(B) + beta C [+ bias], A and B of type ab, C (and
 * the bias) of type cd; FP32 operands multiply as set_products says,
 * bf16 ones in FP32 (CUBLAS_COMPUTE_32F: bf16 products on the tensor
 * cores, accumulated in fp32, rounded to a bf16 C once); ep's GELU
 * epilogue applied to that sum before its rounding. */
static int gemm(int ta, int tb, int m, int n, int k, float alpha, const void *A, int lda, const void *B,
                int ldb, void *C, int ldc, float beta, const void *bias, merak_cuda_batch bt,
                cudaDataType_t ab, cudaDataType_t cd, lt_epi ep, lt_probe *probe)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int rc = -1;

    const merak_products math = ab == CUDA_R_32F ? cb.math : MERAK_PRODUCTS_FP32;
    if (!lt_ok(lt.MatmulDescCreate(&op, compute_type(math), CUDA_R_32F),
               "cublasLtMatmulDescCreate") ||
        !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa),
               "cublasLtMatmulDescSetAttribute(TRANSA)") ||
        !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb),
               "cublasLtMatmulDescSetAttribute(TRANSB)"))
        goto out;
    if (bias || ep.kind != LT_EPI_NONE) {
        const cublasLtEpilogue_t epi = lt_epilogue(ep.kind, bias != NULL);
        if (!lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE)") ||
            (bias && !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                      sizeof bias),
                            "cublasLtMatmulDescSetAttribute(BIAS_POINTER)")))
            goto out;
    }
    if (ep.kind != LT_EPI_NONE) {
        const int64_t ld = ep.ld;
        if (!lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux,
                                             sizeof ep.aux),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)") ||
            !lt_ok(lt.MatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
                   "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)"))
            goto out;
    }
    if (!lt_ok(lt.MatrixLayoutCreate(&la, ab, ta ? k : m, ta ? m : k, lda),
               "cublasLtMatrixLayoutCreate(A)") ||
        !lt_ok(lt.MatrixLayoutCreate(&lb, ab, tb ? n : k, tb ? k : n, ldb),
               "cublasLtMatrixLayoutCreate(B)") ||
        !lt_ok(lt.MatrixLayoutCreate(&lc, cd, m, n, ldc),
               "cublasLtMatrixLayoutCreate(C)"))
        goto out;
    if (bt.count > 1 && !(lt_layout_batch(la, bt.count, bt.sa) &&
                          lt_layout_batch(lb, bt.count, bt.sb) &&
                          lt_layout_batch(lc, bt.count, bt.sc)))
        goto out;

    lt_key key;
    memset(&key, 0, sizeof key); /* memcmp'd: every byte set */
    key.ta = ta;
    key.tb = tb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.bias = bias != NULL;
    key.beta_zero = beta == 0.0f;
    key.al_a = merak_cuda_ptr_align(A);
    key.al_b = merak_cuda_ptr_align(B);
    key.al_c = merak_cuda_ptr_align(C);
    key.batch = bt.count;
    key.sa = bt.sa;
    key.sb = bt.sb;
    key.sc = bt.sc;
    key.math = (int)math;
    key.ab = (int)ab;
    key.cd = (int)cd;
    key.epi = (int)ep.kind;
    key.al_aux = ep.aux ? merak_cuda_ptr_align(ep.aux) : 0;
    key.ld_aux = ep.aux ? (int)ep.ld : 0;
    key.al_bias = bias ? merak_cuda_ptr_align(bias) : 0;
    key.tuned = cb.tune && ab == CUDA_R_16BF && bt.count == 1 && !probe;
    if (probe) {   /* every candidate timed, none cached */
        cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
        int nres = 0;
        if (lt_heuristic(&key, op, la, lb, lc, res, &nres) < 0)
            goto out;
        probe->n = nres < probe->max ? nres : probe->max;
        probe->picked = nres > 0 ? lt_pick(&key, res, nres) : -1;
        for (int i = 0; i < probe->n; i++)
            probe->ms[i] = res[i].state != CUBLAS_STATUS_SUCCESS
                               ? -1
                               : lt_time_one(op, &res[i].algo, alpha, A, la, B, lb, beta, C, lc, probe->reps);
        rc = 0;
        goto out;
    }
    const size_t es = cd == CUDA_R_16BF ? 2 : 4;   /* C's extent: n - 1 columns ldc apart, then m */
    const lt_call call = {alpha, beta, A, B, C, ((size_t)ldc * (size_t)(n > 0 ? n - 1 : 0) + (size_t)m) * es};
    const lt_entry *e = lt_algo(&key, op, la, lb, lc, &call);
    if (!e)
        goto out;
    if (!e->found) {
        if (bias || ep.kind != LT_EPI_NONE)
            rc = 1;
        else
            merak_cuda_record("cublasLtMatmulAlgoGetHeuristic", "no algorithm for this GEMM");
        goto out;
    }
    if (lt_ok(lt.Matmul(cb.lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &e->algo,
                             cb.lt_ws, LT_WORKSPACE_BYTES, merak_cuda_stream()),
              "cublasLtMatmul"))
        rc = 0;
out:
    if (lc)
        lt.MatrixLayoutDestroy(lc);
    if (lb)
        lt.MatrixLayoutDestroy(lb);
    if (la)
        lt.MatrixLayoutDestroy(la);
    if (op)
        lt.MatmulDescDestroy(op);
    return rc;
}

int merak_cuda_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                    const float *B, int ldb, float *C, int ldc, float beta, const float *bias,
                    merak_cuda_batch bt)
{
    return gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, C, ldc, beta, bias, bt, CUDA_R_32F, CUDA_R_32F, LT_NO_EPI, NULL);
}

int merak_cuda_gemm16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, void *C, int c16, int ldc, float beta, const void *bias)
{
    return gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, C, ldc, beta, bias, MERAK_CUDA_ONE, CUDA_R_16BF,
                c16 ? CUDA_R_16BF : CUDA_R_32F, LT_NO_EPI, NULL);
}

int merak_cuda_gemm16_probe(int ta, int tb, int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                            int ldb, void *C, int c16, int ldc, float beta, const void *bias, int reps, double *ms,
                            int max, int *picked)
{
    lt_probe p = {reps, max < LT_CANDIDATES ? max : LT_CANDIDATES, ms, 0, -1};
    *picked = -1;
    if (max < 1)
        return 0;
    /* an error already pending is the backend's, not a candidate's (those
     * the timing drops) */
    if (!merak_cuda_ok(cudaGetLastError(), "before the GEMM probe") ||
        gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, C, ldc, beta, bias, MERAK_CUDA_ONE, CUDA_R_16BF,
             c16 ? CUDA_R_16BF : CUDA_R_32F, LT_NO_EPI, &p) < 0)
        return -1;
    *picked = p.picked;
    return p.n;
}

int merak_cuda_gemm16_gelu(int ta, int tb, int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                           int ldb, uint16_t *C, int ldc, const uint16_t *bias, uint16_t *pre, int ldpre)
{
    return gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, C, ldc, 0.0f, bias, MERAK_CUDA_ONE, CUDA_R_16BF, CUDA_R_16BF,
                (lt_epi){LT_EPI_GELU_AUX, pre, ldpre}, NULL);
}

int merak_cuda_gemm16_dgelu(int ta, int tb, int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                            int ldb, uint16_t *C, int ldc, const uint16_t *pre, int ldpre)
{
    return gemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, C, ldc, 0.0f, NULL, MERAK_CUDA_ONE, CUDA_R_16BF, CUDA_R_16BF,
                (lt_epi){LT_EPI_DGELU, pre, ldpre}, NULL);
}

/* ------------------------------------------------------------------ loading */

/* dlopen's name of cuBLASLt: its soname, then the toolkit's directory. */
#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)
#define LT_SONAME "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

/* Resolves every cuBLASLt function the backend calls; 0, or -1 recorded. */
static int lt_load(void)
{
    void *h = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef MERAK_CUDA_LIBDIR
    if (!h)
        h = dlopen(MERAK_CUDA_LIBDIR "/" LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) {
        const char *why = dlerror();
        merak_cuda_record("loading " LT_SONAME, why ? why : "not found");
        return -1;
    }
#define LT_RESOLVE(name)                                                   \
    if (!(*(void **)&lt.name = dlsym(h, "cublasLt" #name))) {             \
        merak_cuda_record("loading " LT_SONAME, "cublasLt" #name " is missing");       \
        dlclose(h);                                                        \
        return -1;                                                         \
    }
    LT_FUNCTIONS(LT_RESOLVE)
#undef LT_RESOLVE
    return 0;   /* h stays open for the process */
}

int merak_cuda_blas_open(void)
{
    if (lt_load() < 0 || !lt_ok(lt.Create(&cb.lt), "cublasLtCreate"))
        return -1;
    return merak_cuda_ok(cudaMalloc(&cb.lt_ws, LT_WORKSPACE_BYTES), "cudaMalloc(cuBLASLt workspace)") ? 0 : -1;
}
