/*
 * test_kernels.c - TAP tests of the CPU kernels (kernels/cpu).
 *
 * For every op of the kernel table:
 *   - forward (double table) against a naive double reference,
 *   - backward (double table) against central finite differences of
 *     L = sum(out * R), R random, on input and weight gradients,
 *   - accumulate semantics: backward twice adds the gradient twice,
 *     and where an entry takes acc, acc 0 over garbage writes the bits
 *     acc 1 adds to zeros,
 *   - float table against double table on the same inputs,
 *   - float results bitwise identical with 1 and 2 threads.
 * Plus AdamW against a hand-written torch formula, sumsq, scale, dropout
 * properties and the attention's saved log-sum-exp.
 *
 * Shapes and values are random each run.  The seed is printed as a TAP
 * comment; MERAK_TEST_SEED=<n> reproduces a run.
 */
#include "bf16.h"
#include "cpu/cpu_kernels.h"
#include "mix64.h"
#include "tap.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PI 3.14159265358979323846

/* ------------------------------------------------------------------ RNG (splitmix64) */

static uint64_t g_rng;

static uint64_t rng_next(void) { return merak_mix64(g_rng += MERAK_GOLDEN); }

static double rng_unif(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }
static double rng_sym(double a) { return a * (2.0 * rng_unif() - 1.0); }
static int rng_int(int lo, int hi) { return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1)); }

/* ------------------------------------------------------------------ helpers */

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "test_kernels: out of memory\n");
        exit(2);
    }
    return p;
}

static double dmax(double a, double b) { return a > b ? a : b; }

/* normwise relative error: max|a-b| / max|b| */
static double relerr_dd(const double *a, const double *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = dmax(e, fabs(a[i] - b[i]));
        m = dmax(m, fabs(b[i]));
    }
    return m > 0 ? e / m : e;
}

static double relerr_fd(const float *a, const double *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = dmax(e, fabs((double)a[i] - b[i]));
        m = dmax(m, fabs(b[i]));
    }
    return m > 0 ? e / m : e;
}

static const merak_kernels *KF;
static const merak_kernels_f64 *KD;

/* ------------------------------------------------------------------ op cases
 * A case holds its inputs x[i] (each with a gradient g[i]) and outputs o[j];
 * o[0] is the differentiated output, R (size of o[0]) its upstream gradient.
 * Every tensor exists in double (d) and float (f). */
#define MAXT 6

typedef struct opcase opcase;
struct opcase {
    const char *name;
    int nx, no, ncmp; /* ncmp: outputs compared between float and double */
    size_t xn[MAXT], on[MAXT];
    const char *xname[MAXT];
    double *xd[MAXT], *gd[MAXT], *od[MAXT], *Rd;
    float *xf[MAXT], *gf[MAXT], *of[MAXT], *Rf;
    /* shapes and parameters */
    int B, T, C, N, V, K, O, P, bias;
    size_t n;
    float eps, p, scale;
    uint64_t seed;
    int32_t *ids;
    merak_attn_shape as;
    int qi, ki, vi;
    size_t qoff, koff, voff;
    int fresh;          /* the bwd calls pass acc 0 (kernels.h) to the entries taking it */
    unsigned fresh_in;  /* the inputs whose gradients those entries write (bit i: input i) */
    int wrow[MAXT], wcols[MAXT];   /* of those, only columns [0, wcols) of rows wrow wide
                                    * (0: every element) */
    void (*fwd)(opcase *c, int f32);
    void (*bwd)(opcase *c, int f32);
    void (*ref)(const opcase *c, double *out);
};

/* Runs the statements once with the float table (f32) or the double table;
 * they see KT (the table), x, g, o (tensor arrays) and R of that type. */
#define DISPATCH(c, f32, ...)                                                      \
    do {                                                                           \
        if (f32) {                                                                 \
            const merak_kernels *KT = KF;                                          \
            float **x = (c)->xf, **g = (c)->gf, **o = (c)->of, *R = (c)->Rf;       \
            (void)x, (void)g, (void)o, (void)R;                                    \
            __VA_ARGS__;                                                           \
        } else {                                                                   \
            const merak_kernels_f64 *KT = KD;                                      \
            double **x = (c)->xd, **g = (c)->gd, **o = (c)->od, *R = (c)->Rd;      \
            (void)x, (void)g, (void)o, (void)R;                                    \
            __VA_ARGS__;                                                           \
        }                                                                          \
    } while (0)

static void add_x(opcase *c, const char *name, size_t n, double amp)
{
    const int i = c->nx++;
    c->xname[i] = name;
    c->xn[i] = n;
    c->xd[i] = xcalloc(n, sizeof(double));
    c->gd[i] = xcalloc(n, sizeof(double));
    c->xf[i] = xcalloc(n, sizeof(float));
    c->gf[i] = xcalloc(n, sizeof(float));
    for (size_t k = 0; k < n; k++)
        c->xd[i][k] = rng_sym(amp);
}

static void add_o(opcase *c, size_t n)
{
    const int i = c->no++;
    c->on[i] = n;
    c->od[i] = xcalloc(n, sizeof(double));
    c->of[i] = xcalloc(n, sizeof(float));
}

/* after the tensors: R for o[0] */
static void finish(opcase *c)
{
    c->Rd = xcalloc(c->on[0], sizeof(double));
    c->Rf = xcalloc(c->on[0], sizeof(float));
    for (size_t k = 0; k < c->on[0]; k++)
        c->Rd[k] = rng_sym(1.0);
    if (!c->ncmp)
        c->ncmp = c->no;
}

static void free_case(opcase *c)
{
    for (int i = 0; i < c->nx; i++) {
        free(c->xd[i]);
        free(c->gd[i]);
        free(c->xf[i]);
        free(c->gf[i]);
    }
    for (int i = 0; i < c->no; i++) {
        free(c->od[i]);
        free(c->of[i]);
    }
    free(c->Rd);
    free(c->Rf);
    free(c->ids);
    memset(c, 0, sizeof(*c));
}

/* float mirrors of the double inputs (and of R) */
static void to_float(opcase *c)
{
    for (int i = 0; i < c->nx; i++)
        for (size_t k = 0; k < c->xn[i]; k++)
            c->xf[i][k] = (float)c->xd[i][k];
    for (size_t k = 0; k < c->on[0]; k++)
        c->Rf[k] = (float)c->Rd[k];
}

static void zero_grads(opcase *c)
{
    for (int i = 0; i < c->nx; i++) {
        memset(c->gd[i], 0, c->xn[i] * sizeof(double));
        memset(c->gf[i], 0, c->xn[i] * sizeof(float));
    }
}

/* ------------------------------------------------------------------ embedding */

static void emb_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->embedding_fwd(o[0], c->ids, x[0], c->N, c->C, c->P, c->V));
}
static void emb_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->embedding_bwd_w(g[0], R, c->ids, c->N, c->C, c->P, c->V));
}
/* wte holds vocabulary rows P..P+V-1 (a shard); other ids give zero rows */
static void emb_ref(const opcase *c, double *out)
{
    for (int n = 0; n < c->N; n++) {
        const int r = c->ids[n] - c->P;
        for (int k = 0; k < c->C; k++)
            out[(size_t)n * c->C + k] = (r >= 0 && r < c->V) ? c->xd[0][(size_t)r * c->C + k] : 0;
    }
}
static void emb_setup(opcase *c, int big)
{
    c->name = "embedding";
    c->B = big ? 4 : rng_int(1, 3);
    c->T = big ? 64 : rng_int(1, 9);
    c->N = c->B * c->T;
    c->C = big ? 192 : rng_int(1, 24);
    c->V = big ? 50 : rng_int(2, 12); /* few rows: repeated ids */
    c->P = big ? 0 : rng_int(0, 3);   /* shard offset: ids before and after it */
    c->ids = xcalloc((size_t)c->N, sizeof(int32_t));
    for (int n = 0; n < c->N; n++)
        c->ids[n] = rng_int(0, c->V - 1 + 2 * c->P);
    add_x(c, "wte", (size_t)c->V * c->C, 1.0);
    add_o(c, (size_t)c->N * c->C);
    c->fwd = emb_fwd, c->bwd = emb_bwd, c->ref = emb_ref;
    finish(c);
}

/* ------------------------------------------------------------------ positional embedding */

static void pos_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->posemb_fwd(o[0], x[0], x[1], c->B, c->T, c->C));
}
static void pos_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->accumulate(g[0], R, c->xn[0]);
             KT->posemb_bwd_w(g[1], R, c->B, c->T, c->C));
}
static void pos_ref(const opcase *c, double *out)
{
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int k = 0; k < c->C; k++) {
                const size_t i = ((size_t)b * c->T + t) * c->C + k;
                out[i] = c->xd[0][i] + c->xd[1][(size_t)t * c->C + k];
            }
}
static void pos_setup(opcase *c, int big)
{
    c->name = "posemb";
    c->B = big ? 4 : rng_int(1, 3);
    c->T = big ? 64 : rng_int(1, 9);
    c->C = big ? 192 : rng_int(1, 24);
    c->P = c->T + (big ? 0 : rng_int(0, 2)); /* wpe may have more rows than T */
    add_x(c, "inp", (size_t)c->B * c->T * c->C, 1.0);
    add_x(c, "wpe", (size_t)c->P * c->C, 1.0);
    add_o(c, (size_t)c->B * c->T * c->C);
    c->fwd = pos_fwd, c->bwd = pos_bwd, c->ref = pos_ref;
    finish(c);
}

/* ------------------------------------------------------------------ layernorm */

static void ln_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->layernorm_fwd(o[0], o[1], o[2], x[0], x[1], x[2], c->N, c->C, c->eps));
}
static void ln_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->layernorm_bwd_x(g[0], R, x[0], x[1], o[1], o[2], c->N, c->C, !c->fresh);
             KT->layernorm_bwd_w(g[1], g[2], R, x[0], o[1], o[2], c->N, c->C));
}
static void ln_ref(const opcase *c, double *out)
{
    const int C = c->C;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->xd[0] + (size_t)n * C;
        double m = 0, v = 0;
        for (int k = 0; k < C; k++)
            m += x[k];
        m /= C;
        for (int k = 0; k < C; k++)
            v += (x[k] - m) * (x[k] - m);
        v /= C;
        for (int k = 0; k < C; k++)
            out[(size_t)n * C + k] =
                (x[k] - m) / sqrt(v + (double)c->eps) * c->xd[1][k] + c->xd[2][k];
    }
}
static void ln_setup(opcase *c, int big)
{
    c->name = "layernorm";
    c->N = big ? 256 : rng_int(1, 27);
    /* C >= 4: with C <= 2 the normalized row is constant and dinp ~ 0, and
     * with C = 3 float dinp is dominated by cancellation */
    c->C = big ? 192 : rng_int(4, 24);
    c->eps = 1e-5f;
    add_x(c, "inp", (size_t)c->N * c->C, 1.0);
    for (size_t k = 0; k < c->xn[0]; k++)
        c->xd[0][k] += 0.5; /* nonzero mean */
    add_x(c, "w", (size_t)c->C, 1.5);
    add_x(c, "b", (size_t)c->C, 1.0);
    add_o(c, (size_t)c->N * c->C);
    add_o(c, (size_t)c->N);
    add_o(c, (size_t)c->N);
    c->fresh_in = 1;
    c->fwd = ln_fwd, c->bwd = ln_bwd, c->ref = ln_ref;
    finish(c);
}

/* ------------------------------------------------------------------ rmsnorm */

static void rms_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->rmsnorm_fwd(o[0], o[1], x[0], x[1], c->N, c->C, c->eps));
}
static void rms_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->rmsnorm_bwd_x(g[0], R, x[0], x[1], o[1], c->N, c->C, !c->fresh);
             KT->rmsnorm_bwd_w(g[1], R, x[0], o[1], c->N, c->C));
}
static void rms_ref(const opcase *c, double *out)
{
    const int C = c->C;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->xd[0] + (size_t)n * C;
        double ms = 0;
        for (int k = 0; k < C; k++)
            ms += x[k] * x[k];
        ms /= C;
        for (int k = 0; k < C; k++)
            out[(size_t)n * C + k] = x[k] / sqrt(ms + (double)c->eps) * c->xd[1][k];
    }
}
static void rms_setup(opcase *c, int big)
{
    c->name = "rmsnorm";
    c->N = big ? 256 : rng_int(1, 27);
    c->C = big ? 192 : rng_int(2, 24); /* C = 1: out = w*sign(x), dinp ~ 0 */
    c->eps = 1e-6f;
    add_x(c, "inp", (size_t)c->N * c->C, 1.0);
    add_x(c, "w", (size_t)c->C, 1.5);
    add_o(c, (size_t)c->N * c->C);
    add_o(c, (size_t)c->N);
    c->fresh_in = 1;
    c->fwd = rms_fwd, c->bwd = rms_bwd, c->ref = rms_ref;
    finish(c);
}

/* ------------------------------------------------------------------ linear */

static void lin_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->linear_fwd(o[0], x[0], x[1], c->bias ? x[2] : NULL, c->N, c->K, c->O));
}
static void lin_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->linear_bwd_x(g[0], R, x[1], c->N, c->K, c->O, !c->fresh);
             KT->linear_bwd_w(g[1], c->bias ? g[2] : NULL, R, x[0], c->N, c->K, c->O));
}
static void lin_ref(const opcase *c, double *out)
{
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->O; o++) {
            double s = c->bias ? c->xd[2][o] : 0.0;
            for (int k = 0; k < c->K; k++)
                s += c->xd[0][(size_t)n * c->K + k] * c->xd[1][(size_t)o * c->K + k];
            out[(size_t)n * c->O + o] = s;
        }
}
static void lin_setup_common(opcase *c, int big, int bias)
{
    c->bias = bias;
    c->N = big ? 300 : rng_int(1, 12); /* big: several partial GEMM tiles */
    c->K = big ? 96 : rng_int(1, 24);
    c->O = big ? 280 : rng_int(1, 24);
    add_x(c, "inp", (size_t)c->N * c->K, 1.0);
    add_x(c, "w", (size_t)c->O * c->K, 1.0);
    if (bias)
        add_x(c, "b", (size_t)c->O, 1.0);
    add_o(c, (size_t)c->N * c->O);
    c->fresh_in = 1;
    c->fwd = lin_fwd, c->bwd = lin_bwd, c->ref = lin_ref;
    finish(c);
}
static void lin_setup_bias(opcase *c, int big)
{
    c->name = "linear+bias";
    lin_setup_common(c, big, 1);
}
static void lin_setup_nobias(opcase *c, int big)
{
    c->name = "linear (no bias)";
    lin_setup_common(c, big, 0);
}

/* ------------------------------------------------------------------ attention
 * outputs: o[0] out, o[1] lse, o[2] qr, o[3] kr, o[4] scratch */

static void attn_fwd(opcase *c, int f32)
{
    const int rope = c->as.rope.theta > 0;
    DISPATCH(c, f32,
             KT->attention_fwd(&c->as, o[0], o[1], rope ? o[2] : NULL, rope ? o[3] : NULL,
                               x[c->qi] + c->qoff, x[c->ki] + c->koff, x[c->vi] + c->voff, o[4]));
}
static void attn_bwd(opcase *c, int f32)
{
    const int rope = c->as.rope.theta > 0;
    DISPATCH(c, f32,
             KT->attention_bwd(&c->as, g[c->qi] + c->qoff, g[c->ki] + c->koff,
                               g[c->vi] + c->voff, R, o[0], o[1], rope ? o[2] : NULL,
                               rope ? o[3] : NULL, x[c->qi] + c->qoff, x[c->ki] + c->koff,
                               x[c->vi] + c->voff, o[4], !c->fresh));
}

/* Hugging Face's RoPE frequency i of hd-wide heads, in double, written
 * from the library's formulas: theta^(-2i/hd), then for LINEAR divided by
 * factor, for LLAMA3 by wavelength band (divided by factor past the
 * original context / low_freq_factor, kept below it / high_freq_factor,
 * blended linearly in 1/wavelength between). */
static double naive_inv_freq(const merak_rope *r, int i, int hd)
{
    const double f = pow(r->theta, -2.0 * i / hd), wl = 2 * M_PI / f, L = r->original_max_positions;
    if (r->type == MERAK_ROPE_LINEAR)
        return f / r->factor;
    if (r->type != MERAK_ROPE_LLAMA3 || wl < L / r->high_freq_factor)
        return f;
    if (wl > L / r->low_freq_factor)
        return f / r->factor;
    const double smooth = (L / wl - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return f / r->factor + smooth * (f - f / r->factor);
}

/* rotate_half RoPE of one head vector, written as complex rotations of the
 * pairs (x[i], x[i+hd/2]) by angle t * inv_freq(i) */
static void naive_rope(double *y, const double *x, int hd, int t, const merak_rope *r)
{
    const int half = hd / 2;
    for (int i = 0; i < half; i++) {
        const double ang = t * naive_inv_freq(r, i, hd);
        const double re = x[i], im = x[i + half];
        y[i] = re * cos(ang) - im * sin(ang);
        y[i + half] = re * sin(ang) + im * cos(ang);
    }
}

static void attn_ref(const opcase *c, double *out)
{
    const merak_attn_shape *s = &c->as;
    const int B = s->B, T = s->T, nh = s->n_head, nkv = s->n_kv_head, hd = s->head_dim;
    const double *q = c->xd[c->qi] + c->qoff, *k = c->xd[c->ki] + c->koff;
    const double *v = c->xd[c->vi] + c->voff;
    double *qh = xcalloc((size_t)hd, sizeof(double)), *kh = xcalloc((size_t)hd, sizeof(double));
    double *sc = xcalloc((size_t)T, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            const int kvh = h / (nh / nkv);
            for (int t = 0; t < T; t++) {
                const double *qp = q + ((size_t)b * T + t) * s->q_stride + (size_t)h * hd;
                if (s->rope.theta > 0)
                    naive_rope(qh, qp, hd, t, &s->rope);
                else
                    memcpy(qh, qp, (size_t)hd * sizeof(double));
                double mx = -INFINITY, sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *kp = k + ((size_t)b * T + t2) * s->k_stride + (size_t)kvh * hd;
                    if (s->rope.theta > 0)
                        naive_rope(kh, kp, hd, t2, &s->rope);
                    else
                        memcpy(kh, kp, (size_t)hd * sizeof(double));
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += qh[i] * kh[i];
                    sc[t2] = d / sqrt((double)hd);
                    mx = dmax(mx, sc[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++)
                    sum += (sc[t2] = exp(sc[t2] - mx));
                for (int i = 0; i < hd; i++) {
                    double acc = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        acc += sc[t2] / sum *
                               v[((size_t)b * T + t2) * s->v_stride + (size_t)kvh * hd + i];
                    out[((size_t)b * T + t) * nh * hd + (size_t)h * hd + i] = acc;
                }
            }
        }
    free(qh);
    free(kh);
    free(sc);
}

static void attn_common(opcase *c, int B, int T, int nh, int nkv, int hd, int pad,
                        merak_rope rope, int fused)
{
    merak_attn_shape *s = &c->as;
    const size_t BT = (size_t)B * T;
    s->B = B, s->T = T, s->n_head = nh, s->n_kv_head = nkv, s->head_dim = hd;
    s->rope = rope;
    if (fused) {
        const int W = (nh + 2 * nkv) * hd;
        s->q_stride = s->k_stride = s->v_stride = W;
        add_x(c, "qkv", BT * W, 1.5);
        c->qi = c->ki = c->vi = 0;
        c->qoff = 0;
        c->koff = (size_t)nh * hd;
        c->voff = (size_t)(nh + nkv) * hd;
    } else {
        s->q_stride = nh * hd + (pad ? rng_int(0, 3) : 0);
        s->k_stride = nkv * hd + (pad ? rng_int(0, 3) : 0);
        s->v_stride = nkv * hd + (pad ? rng_int(0, 3) : 0);
        add_x(c, "q", BT * s->q_stride, 1.5);
        add_x(c, "k", BT * s->k_stride, 1.5);
        add_x(c, "v", BT * s->v_stride, 1.5);
        c->qi = 0, c->ki = 1, c->vi = 2;
        c->wrow[0] = s->q_stride, c->wcols[0] = nh * hd;   /* not the padding */
        c->wrow[1] = s->k_stride, c->wcols[1] = nkv * hd;
        c->wrow[2] = s->v_stride, c->wcols[2] = nkv * hd;
    }
    c->fresh_in = 1u << c->qi | 1u << c->ki | 1u << c->vi;
    add_o(c, BT * nh * hd);
    add_o(c, (size_t)B * nh * T);
    add_o(c, rope.theta > 0 ? BT * nh * hd : 0);
    add_o(c, rope.theta > 0 ? BT * nkv * hd : 0);
    add_o(c, KD->attention_scratch_elems(s));
    c->ncmp = 4; /* not the scratch */
    c->fwd = attn_fwd, c->bwd = attn_bwd, c->ref = attn_ref;
    finish(c);
}

#define NOROPE ((merak_rope){0})
#define ROPE(th) ((merak_rope){.theta = (th)})

static void attn_setup_mha(opcase *c, int big)
{
    c->name = "attention MHA (strided q,k,v)";
    const int nh = big ? 3 : rng_int(1, 4);
    if (big)
        attn_common(c, 2, 48, nh, nh, 16, 1, NOROPE, 0);
    else
        attn_common(c, rng_int(1, 3), rng_int(1, 9), nh, nh, rng_int(1, 8), 1, NOROPE, 0);
}

static void attn_setup_gqa(opcase *c, int big)
{
    c->name = "attention GQA + RoPE";
    if (big) {
        attn_common(c, 2, 48, 4, 2, 16, 1, ROPE(10000.0f), 0);
    } else {
        const int nkv = rng_int(1, 2), grp = rng_int(2, 3);
        const float thetas[3] = {10000.0f, 500.0f, 10.0f};
        attn_common(c, rng_int(1, 3), rng_int(1, 9), nkv * grp, nkv, 2 * rng_int(1, 4), 1,
                    ROPE(thetas[rng_int(0, 2)]), 0);
    }
}

/* T beyond the kernel's 64-row attention blocks */
static void attn_setup_long(opcase *c, int big)
{
    c->name = "attention GQA + RoPE, long T";
    if (big)
        attn_common(c, 2, 200, 4, 2, 8, 0, ROPE(10000.0f), 0);
    else
        attn_common(c, 1, rng_int(65, 140), 2, 1, 2 * rng_int(1, 3), 1, ROPE(10000.0f), 0);
}

/* Scaled RoPE: linear, and llama3 over an original context whose bands
 * (kept, blended, divided) each hold some of the frequencies */
static void attn_setup_scaled(opcase *c, int big)
{
    const merak_rope linear = {.theta = 10000.0f, .type = MERAK_ROPE_LINEAR, .factor = 4.0f};
    const merak_rope llama3 = {.theta = 10000.0f, .type = MERAK_ROPE_LLAMA3, .factor = 8.0f,
                               .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .original_max_positions = 64};
    const int l3 = big || rng_int(0, 1);
    c->name = l3 ? "attention GQA + llama3-scaled RoPE" : "attention GQA + linearly scaled RoPE";
    if (big)
        attn_common(c, 2, 80, 4, 2, 16, 1, llama3, 0);
    else
        attn_common(c, rng_int(1, 2), rng_int(20, 50), 2, 1, 2 * rng_int(4, 8), 1, l3 ? llama3 : linear, 0);
}

static void attn_setup_fused(opcase *c, int big)
{
    c->name = "attention fused qkv";
    const int nh = big ? 4 : rng_int(1, 4);
    if (big)
        attn_common(c, 2, 32, nh, nh, 16, 0, NOROPE, 1);
    else
        attn_common(c, rng_int(1, 3), rng_int(1, 9), nh, nh, rng_int(1, 8), 0, NOROPE, 1);
}

/* ------------------------------------------------------------------ gelu, swiglu, add */

static void gelu_fwd(opcase *c, int f32) { DISPATCH(c, f32, KT->gelu_fwd(o[0], x[0], c->n)); }
static void gelu_bwd(opcase *c, int f32) { DISPATCH(c, f32, KT->gelu_bwd(g[0], R, x[0], c->n, !c->fresh)); }
static void gelu_ref(const opcase *c, double *out)
{
    for (size_t i = 0; i < c->n; i++) {
        const double x = c->xd[0][i];
        out[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
    }
}
static void gelu_setup(opcase *c, int big)
{
    c->name = "gelu";
    c->n = big ? 65536 : (size_t)rng_int(32, 200);
    add_x(c, "inp", c->n, 4.0);
    add_o(c, c->n);
    c->fresh_in = 1;
    c->fwd = gelu_fwd, c->bwd = gelu_bwd, c->ref = gelu_ref;
    finish(c);
}

static void swiglu_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->swiglu_fwd(o[0], x[0], x[1], c->n));
}
static void swiglu_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->swiglu_bwd(g[0], g[1], R, x[0], x[1], c->n, !c->fresh));
}
static void swiglu_ref(const opcase *c, double *out)
{
    for (size_t i = 0; i < c->n; i++) {
        const double gt = c->xd[0][i];
        out[i] = gt / (1.0 + exp(-gt)) * c->xd[1][i];
    }
}
static void swiglu_setup(opcase *c, int big)
{
    c->name = "swiglu";
    c->n = big ? 65536 : (size_t)rng_int(32, 200);
    add_x(c, "gate", c->n, 4.0);
    add_x(c, "up", c->n, 2.0);
    add_o(c, c->n);
    c->fresh_in = 3;
    c->fwd = swiglu_fwd, c->bwd = swiglu_bwd, c->ref = swiglu_ref;
    finish(c);
}

static void add_fwd(opcase *c, int f32) { DISPATCH(c, f32, KT->add_fwd(o[0], x[0], x[1], c->n)); }
static void add_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->accumulate(g[0], R, c->n); KT->accumulate(g[1], R, c->n));
}
static void add_ref(const opcase *c, double *out)
{
    for (size_t i = 0; i < c->n; i++)
        out[i] = c->xd[0][i] + c->xd[1][i];
}
static void add_setup(opcase *c, int big)
{
    c->name = "add";
    c->n = big ? 65536 : (size_t)rng_int(32, 200);
    add_x(c, "a", c->n, 1.0);
    add_x(c, "b", c->n, 1.0);
    add_o(c, c->n);
    c->fwd = add_fwd, c->bwd = add_bwd, c->ref = add_ref;
    finish(c);
}

/* ------------------------------------------------------------------ dropout */

/* the mask documented in cpu_kernels.h, written out independently */
static uint64_t ref_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static int ref_keep(uint64_t seed, uint64_t i, float p)
{
    const uint64_t G = 0x9E3779B97F4A7C15ULL;
    const uint64_t z = ref_mix64(ref_mix64(seed + G) + (i + 1) * G);
    return (float)(z >> 40) * 0x1.0p-24f >= p;
}

static void drop_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->dropout_fwd(o[0], x[0], c->n, c->p, c->seed, 0));
}
static void drop_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->dropout_bwd(g[0], R, c->n, c->p, c->seed, 0, !c->fresh));
}
static void drop_ref(const opcase *c, double *out)
{
    for (size_t i = 0; i < c->n; i++)
        out[i] = ref_keep(c->seed, i, c->p) ? c->xd[0][i] / (1.0 - (double)c->p) : 0.0;
}
static void drop_setup(opcase *c, int big)
{
    c->name = "dropout p=0.3";
    c->n = big ? 65536 : (size_t)rng_int(50, 300);
    c->p = 0.3f;
    c->seed = 0x5eed0000ULL + (rng_next() & 0xffff);
    add_x(c, "inp", c->n, 1.0);
    add_o(c, c->n);
    c->fresh_in = 1;
    c->fwd = drop_fwd, c->bwd = drop_bwd, c->ref = drop_ref;
    finish(c);
}

/* ------------------------------------------------------------------ cross-entropy
 * L = scale * sum_n losses[n]: R is the constant scale. */

/* o[0] = lse - tlogit (the loss, the whole vocabulary in one shard),
 * o[1] = lse, o[2] = tlogit */
static void ce_fwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->crossentropy_stats(o[1], o[2], x[0], c->ids, c->N, c->V, 0);
             for (int n = 0; n < c->N; n++) o[0][n] = o[1][n] - o[2][n]);
}
static void ce_bwd(opcase *c, int f32)
{
    DISPATCH(c, f32, KT->crossentropy_bwd(g[0], x[0], o[1], c->ids, c->N, c->V, 0, c->scale));
}
static void ce_ref(const opcase *c, double *out)
{
    for (int n = 0; n < c->N; n++) {
        const double *x = c->xd[0] + (size_t)n * c->V;
        const int tg = c->ids[n];
        if (tg < 0) {
            out[n] = 0;
            continue;
        }
        double s = 0;
        for (int j = 0; j < c->V; j++)
            s += exp(x[j]);
        out[n] = log(s) - x[tg];
    }
}
static void ce_setup(opcase *c, int big)
{
    c->name = "crossentropy";
    c->N = big ? 64 : rng_int(1, 12);
    c->V = big ? 1024 : rng_int(2, 50);
    c->scale = (float)(0.1 + 2.0 * rng_unif());
    c->ids = xcalloc((size_t)c->N, sizeof(int32_t));
    for (int n = 0; n < c->N; n++)
        c->ids[n] = rng_int(0, c->V - 1);
    if (c->N >= 3)
        c->ids[rng_int(0, c->N - 1)] = -100; /* ignored row */
    add_x(c, "logits", (size_t)c->N * c->V, 3.0);
    add_o(c, (size_t)c->N);
    add_o(c, (size_t)c->N);
    add_o(c, (size_t)c->N);
    c->ncmp = 1;
    c->fwd = ce_fwd, c->bwd = ce_bwd, c->ref = ce_ref;
    finish(c);
    for (int n = 0; n < c->N; n++)
        c->Rd[n] = c->scale;
}

/* ------------------------------------------------------------------ the ops */

typedef void (*setup_fn)(opcase *c, int big);

static const setup_fn OPS[] = {
    emb_setup,      pos_setup,      ln_setup,         rms_setup,     lin_setup_bias,
    lin_setup_nobias, attn_setup_mha, attn_setup_gqa, attn_setup_long, attn_setup_scaled, attn_setup_fused, gelu_setup,
    swiglu_setup,   add_setup,      drop_setup,       ce_setup,
};
#define NOPS ((int)(sizeof(OPS) / sizeof(OPS[0])))
#define CHECKS_PER_OP 5
#define NEXTRA 24

/* ------------------------------------------------------------------ per-op checks */

static void describe(const opcase *c)
{
    char buf[256];
    int len = 0;
    if (c->as.B) {
        const merak_attn_shape *s = &c->as;
        len = snprintf(buf, sizeof buf,
                       "B=%d T=%d nh=%d nkv=%d hd=%d strides=%d,%d,%d theta=%g scaling %d", s->B, s->T,
                       s->n_head, s->n_kv_head, s->head_dim, s->q_stride, s->k_stride,
                       s->v_stride, (double)s->rope.theta, (int)s->rope.type);
    } else {
        len = snprintf(buf, sizeof buf, "B=%d T=%d N=%d C=%d V=%d K=%d O=%d P=%d n=%zu", c->B,
                       c->T, c->N, c->C, c->V, c->K, c->O, c->P, c->n);
    }
    (void)len;
    tap_diag("%s: %s", c->name, buf);
}

/* forward (double table) against the naive reference */
static void check_ref(opcase *c)
{
    double *want = xcalloc(c->on[0], sizeof(double));
    c->fwd(c, 0);
    c->ref(c, want);
    const double err = relerr_dd(c->od[0], want, c->on[0]);
    tap_ok(err <= 1e-12, "%s: forward matches naive double reference (rel err %.2e)", c->name, err);
    free(want);
}

/* backward (double table): accumulate semantics, then finite differences */
static void check_grad(opcase *c)
{
    const double h = 1e-6;
    double *g0[MAXT], *ana[MAXT];
    double *op = xcalloc(c->on[0], sizeof(double)), *om = xcalloc(c->on[0], sizeof(double));

    for (int i = 0; i < c->nx; i++) {
        g0[i] = xcalloc(c->xn[i], sizeof(double));
        ana[i] = xcalloc(c->xn[i], sizeof(double));
        for (size_t k = 0; k < c->xn[i]; k++)
            c->gd[i][k] = g0[i][k] = rng_sym(1.0);
    }
    c->fwd(c, 0);
    c->bwd(c, 0);
    for (int i = 0; i < c->nx; i++)
        for (size_t k = 0; k < c->xn[i]; k++)
            ana[i][k] = c->gd[i][k] - g0[i][k];
    c->bwd(c, 0);
    double acc_err = 0;
    for (int i = 0; i < c->nx; i++) {
        double m = 1.0, e = 0.0;
        for (size_t k = 0; k < c->xn[i]; k++) {
            m = dmax(m, fabs(c->gd[i][k]));
            e = dmax(e, fabs((c->gd[i][k] - g0[i][k]) - 2.0 * ana[i][k]));
        }
        acc_err = dmax(acc_err, e / m);
    }
    tap_ok(acc_err <= 1e-12, "%s: backward accumulates (twice = 2x gradient, err %.2e)", c->name,
        acc_err);

    /* central differences of L = sum(out * R) on a random subset */
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < c->nx; i++) {
        const size_t n = c->xn[i];
        const int ncoord = n <= 48 ? (int)n : 48;
        double we = 0, gmax = 0;
        for (size_t k = 0; k < n; k++)
            gmax = dmax(gmax, fabs(ana[i][k]));
        for (int j = 0; j < ncoord; j++) {
            const size_t k = n <= 48 ? (size_t)j : (size_t)(rng_next() % n);
            const double save = c->xd[i][k];
            c->xd[i][k] = save + h;
            c->fwd(c, 0);
            memcpy(op, c->od[0], c->on[0] * sizeof(double));
            c->xd[i][k] = save - h;
            c->fwd(c, 0);
            memcpy(om, c->od[0], c->on[0] * sizeof(double));
            c->xd[i][k] = save;
            double num = 0;
            for (size_t r = 0; r < c->on[0]; r++)
                num += (op[r] - om[r]) * c->Rd[r];
            num /= 2 * h;
            const double a = ana[i][k];
            /* relative, floored at 1e-3 and at 1% of the tensor's largest gradient */
            const double e = fabs(a - num) /
                             dmax(dmax(fabs(a), fabs(num)), dmax(1e-3, 1e-2 * gmax));
            if (e > we)
                we = e;
            if (e > 1e-6 && bad++ < 5)
                tap_diag("%s: d%s[%zu] analytic %.12g numeric %.12g", c->name, c->xname[i], k, a,
                     num);
        }
        tap_diag("%s: d%s max rel err %.2e over %d coords", c->name, c->xname[i], we, ncoord);
        worst = dmax(worst, we);
    }
    c->fwd(c, 0);
    tap_ok(worst <= 1e-6, "%s: gradients match finite differences (rel err %.2e)", c->name, worst);

    for (int i = 0; i < c->nx; i++) {
        free(g0[i]);
        free(ana[i]);
    }
    free(op);
    free(om);
}

/* float table against double table on the same (float-representable) inputs */
static void check_f32(opcase *c)
{
    for (int i = 0; i < c->nx; i++)
        for (size_t k = 0; k < c->xn[i]; k++)
            c->xd[i][k] = (double)(float)c->xd[i][k];
    for (size_t k = 0; k < c->on[0]; k++)
        c->Rd[k] = (double)(float)c->Rd[k];
    to_float(c);
    zero_grads(c);
    c->fwd(c, 0);
    c->fwd(c, 1);
    double worst = 0;
    for (int j = 0; j < c->ncmp; j++) {
        const double e = relerr_fd(c->of[j], c->od[j], c->on[j]);
        if (e > 1e-5)
            tap_diag("%s: output %d rel err %.2e", c->name, j, e);
        worst = dmax(worst, e);
    }
    c->bwd(c, 0);
    c->bwd(c, 1);
    for (int i = 0; i < c->nx; i++) {
        const double e = relerr_fd(c->gf[i], c->gd[i], c->xn[i]);
        if (e > 1e-5)
            tap_diag("%s: d%s rel err %.2e", c->name, c->xname[i], e);
        worst = dmax(worst, e);
    }
    tap_ok(worst <= 1e-5, "%s: float table agrees with double table (rel err %.2e)", c->name,
        worst);
}

/* acc 0 (the executor's first writer of a gradient, exec.c plan_fresh):
 * over gradients holding garbage (NaN, infinities, huge values), the
 * entries write what acc 1 adds to zeros, bit for bit, in both tables;
 * the gradients they do not write (weights) still accumulate.  On the
 * shapes of `big` (several GEMM tiles) and of a small case, with 2
 * threads. */
static void check_fresh(setup_fn setup, int big)
{
    opcase c;
    memset(&c, 0, sizeof c);
    setup(&c, big);
    to_float(&c);
    merak_kernels_cpu_set_threads(2);
    int same = 1, untouched_ok = 1;
    for (int f32 = 0; f32 < 2; f32++) {
        zero_grads(&c);
        c.fwd(&c, f32);
        c.fresh = 0;
        c.bwd(&c, f32);
        void *want[MAXT];
        const size_t es = f32 ? sizeof(float) : sizeof(double);
        for (int i = 0; i < c.nx; i++) {
            void *gi = f32 ? (void *)c.gf[i] : (void *)c.gd[i];
            want[i] = xcalloc(c.xn[i], es);
            memcpy(want[i], gi, c.xn[i] * es);
            if (c.fresh_in >> i & 1) {   /* garbage where acc 0 writes */
                for (size_t k = 0; k < c.xn[i]; k++) {
                    if (c.wrow[i] && (int)(k % (size_t)c.wrow[i]) >= c.wcols[i])
                        continue;   /* not its to write: must stay as it is */
                    const double junk = k % 3 == 0 ? NAN : k % 3 == 1 ? -INFINITY : 3e30;
                    if (f32)
                        c.gf[i][k] = (float)junk;
                    else
                        c.gd[i][k] = junk;
                }
            } else {
                memset(gi, 0, c.xn[i] * es);
            }
        }
        c.fresh = 1;
        c.bwd(&c, f32);
        c.fresh = 0;
        for (int i = 0; i < c.nx; i++) {
            const void *gi = f32 ? (const void *)c.gf[i] : (const void *)c.gd[i];
            if (c.fresh_in >> i & 1)
                same &= memcmp(want[i], gi, c.xn[i] * es) == 0;
            else
                untouched_ok &= memcmp(want[i], gi, c.xn[i] * es) == 0;
            free(want[i]);
        }
    }
    merak_kernels_cpu_set_threads(1);
    tap_ok(c.fresh_in && same && untouched_ok,
           "%s%s: acc 0 over garbage writes the gradients acc 1 adds to zeros, bit for bit (float and "
           "double); the others still accumulate", c.name, big ? " (big)" : "");
    free_case(&c);
}

/* float table, 1 thread vs 2 threads, on bigger shapes: bitwise equal */
static void check_threads(setup_fn setup)
{
    opcase c;
    memset(&c, 0, sizeof c);
    setup(&c, 1);
    to_float(&c);
    float *snap[2 * MAXT];
    int ns = 0;

    merak_kernels_cpu_set_threads(1);
    zero_grads(&c);
    c.fwd(&c, 1);
    c.bwd(&c, 1);
    for (int j = 0; j < c.ncmp; j++) {
        snap[ns] = xcalloc(c.on[j], sizeof(float));
        memcpy(snap[ns++], c.of[j], c.on[j] * sizeof(float));
    }
    for (int i = 0; i < c.nx; i++) {
        snap[ns] = xcalloc(c.xn[i], sizeof(float));
        memcpy(snap[ns++], c.gf[i], c.xn[i] * sizeof(float));
    }

    merak_kernels_cpu_set_threads(2);
    zero_grads(&c);
    for (int j = 0; j < c.no; j++)
        memset(c.of[j], 0, c.on[j] * sizeof(float));
    c.fwd(&c, 1);
    c.bwd(&c, 1);
    int same = 1;
    ns = 0;
    for (int j = 0; j < c.ncmp; j++, ns++)
        same &= memcmp(snap[ns], c.of[j], c.on[j] * sizeof(float)) == 0;
    for (int i = 0; i < c.nx; i++, ns++)
        same &= memcmp(snap[ns], c.gf[i], c.xn[i] * sizeof(float)) == 0;
    tap_ok(same, "%s: float fwd+bwd bitwise identical with 1 and 2 threads", c.name);
    for (int j = 0; j < ns; j++)
        free(snap[j]);
    merak_kernels_cpu_set_threads(1);
    free_case(&c);
}

/* ------------------------------------------------------------------ extra checks */

#define TABLE_ENTRIES(X)                                                             \
    X(embedding_fwd) X(embedding_bwd_w) X(posemb_fwd) X(posemb_bwd_w)                \
    X(layernorm_fwd) X(layernorm_bwd_x) X(layernorm_bwd_w) X(rmsnorm_fwd)            \
    X(rmsnorm_bwd_x) X(rmsnorm_bwd_w) X(linear_fwd) X(linear_bwd_x) X(linear_bwd_w)  \
    X(attention_fwd) X(attention_bwd) X(attention_scratch_elems) X(gelu_fwd)         \
    X(attention_cached_fwd) X(attention_cached_scratch_elems)                        \
    X(gelu_bwd) X(swiglu_fwd) X(swiglu_bwd) X(add_fwd) X(accumulate) X(dropout_fwd)  \
    X(dropout_bwd) X(crossentropy_stats) X(crossentropy_bwd) X(adamw) X(sumsq) X(scale)

static void check_table(void)
{
    int missing = 0;
#define CHECK_ENTRY(e)                                                               \
    if (!KF->e || !KD->e) {                                                          \
        missing++;                                                                   \
        tap_diag("missing entry %s", #e);                                                \
    }
    TABLE_ENTRIES(CHECK_ENTRY)
#undef CHECK_ENTRY
    tap_ok(!missing && KF->name && strcmp(KF->name, "cpu") == 0 && KD->name,
        "both tables are complete, the float one is named \"cpu\"");
}

/* The saved log-sum-exp of every query row equals the one of its scores
 * worked out here (with RoPE, from the double table's rotated q and k). */
static void check_lse(void)
{
    opcase c;
    memset(&c, 0, sizeof c);
    attn_setup_gqa(&c, 0);
    to_float(&c);
    c.fwd(&c, 0);
    c.fwd(&c, 1);
    const merak_attn_shape *s = &c.as;
    const int T = s->T, nh = s->n_head, hd = s->head_dim, grp = nh / s->n_kv_head;
    const int rope = s->rope.theta > 0;
    const double *q = rope ? c.od[2] : c.xd[c.qi] + c.qoff, *k = rope ? c.od[3] : c.xd[c.ki] + c.koff;
    const int qs = rope ? nh * hd : s->q_stride, ks = rope ? s->n_kv_head * hd : s->k_stride;
    double e64 = 0, e32 = 0;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < nh; h++)
            for (int t = 0; t < T; t++) {
                const double *qt = q + ((size_t)b * T + t) * qs + (size_t)h * hd;
                double mx = -INFINITY, sum = 0, sc[64];
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *kt = k + ((size_t)b * T + t2) * ks + (size_t)(h / grp) * hd;
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += qt[i] * kt[i];
                    mx = dmax(mx, sc[t2] = d / sqrt((double)hd));
                }
                for (int t2 = 0; t2 <= t; t2++)
                    sum += exp(sc[t2] - mx);
                const double want = mx + log(sum);
                const size_t r = ((size_t)b * nh + h) * T + t;
                e64 = dmax(e64, fabs(c.od[1][r] - want));
                e32 = dmax(e32, fabs(c.of[1][r] - want));
            }
    tap_ok(T <= 64 && e64 <= 1e-12 && e32 <= 1e-5,
        "attention lse: every row's log-sum-exp of its scores (err f64 %.1e, f32 %.1e)", e64, e32);
    free_case(&c);
}

/* Decoding with a key/value cache, the sequence fed in random pieces,
 * gives attention_fwd's output over the whole sequence, and the cache
 * holds its rotated keys (double table: equal up to rounding). */
static void check_cached_attention(void)
{
    merak_attn_shape s;
    s.B = rng_int(1, 2);
    s.T = rng_int(1, 80);
    s.n_kv_head = rng_int(1, 3);
    s.n_head = s.n_kv_head * rng_int(1, 3);
    s.rope = (merak_rope){.theta = rng_int(0, 1) ? 10000.0f : 0.0f};
    if (s.rope.theta > 0 && rng_int(0, 1))
        s.rope = (merak_rope){.theta = 10000.0f, .type = MERAK_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 1.0f,
                              .high_freq_factor = 4.0f, .original_max_positions = 32};
    s.head_dim = s.rope.theta > 0 ? 2 * rng_int(1, 6) : rng_int(1, 12);   /* RoPE needs pairs */
    const int fused = rng_int(0, 1), C = s.n_head * s.head_dim, Ckv = s.n_kv_head * s.head_dim;
    const int W = C + 2 * Ckv, cap = s.T + rng_int(0, 5);
    s.q_stride = s.k_stride = s.v_stride = fused ? W : 0;
    if (!fused)
        s.q_stride = C, s.k_stride = s.v_stride = Ckv;
    const size_t BT = (size_t)s.B * s.T;
    /* q, k, v: fused, three column blocks of one (BT, W) buffer; else three buffers */
    double *x = xcalloc(BT * W, sizeof(double));
    for (size_t i = 0; i < BT * W; i++)
        x[i] = rng_sym(1.0);
    const double *q = x, *k = fused ? x + C : x + BT * C, *v = fused ? x + C + Ckv : k + BT * Ckv;
    double *out = xcalloc(BT * C, sizeof(double)), *lse = xcalloc(BT * s.n_head, sizeof(double));
    double *qr = xcalloc(BT * C, sizeof(double)), *kr = xcalloc(BT * Ckv, sizeof(double));
    double *ascratch = xcalloc(KD->attention_scratch_elems(&s), sizeof(double));
    KD->attention_fwd(&s, out, lse, s.rope.theta > 0 ? qr : NULL, s.rope.theta > 0 ? kr : NULL, q, k, v, ascratch);
    free(ascratch);

    double *kc = xcalloc((size_t)s.B * cap * Ckv, sizeof(double)), *vc = xcalloc((size_t)s.B * cap * Ckv, sizeof(double));
    double *o = xcalloc(BT * C, sizeof(double)), *piece = xcalloc(BT * C, sizeof(double));
    double err = 0, kerr = 0;
    int pieces = 0;
    for (int pos = 0; pos < s.T; pieces++) {
        merak_attn_shape p = s;
        p.T = rng_int(1, s.T - pos);
        /* the piece's rows of every batch row, gathered into (B, p.T, .) */
        const int qs = s.q_stride, ks = s.k_stride;
        double *pq = xcalloc((size_t)s.B * p.T * W, sizeof(double));
        double *pk = fused ? pq + C : pq + (size_t)s.B * p.T * C;
        double *pv = fused ? pq + C + Ckv : pk + (size_t)s.B * p.T * Ckv;
        for (int b = 0; b < s.B; b++)
            for (int t = 0; t < p.T; t++) {
                const size_t src = (size_t)b * s.T + pos + t, dst = (size_t)b * p.T + t;
                memcpy(pq + dst * qs, q + src * qs, (size_t)C * sizeof(double));
                memcpy(pk + dst * ks, k + src * ks, (size_t)Ckv * sizeof(double));
                memcpy(pv + dst * ks, v + src * ks, (size_t)Ckv * sizeof(double));
            }
        double *scratch = xcalloc(KD->attention_cached_scratch_elems(&p, cap), sizeof(double));
        KD->attention_cached_fwd(&p, pos, cap, piece, kc, vc, pq, pk, pv, scratch);
        for (int b = 0; b < s.B; b++)
            memcpy(o + ((size_t)b * s.T + pos) * C, piece + (size_t)b * p.T * C,
                   (size_t)p.T * C * sizeof(double));
        free(scratch);
        free(pq);
        pos += p.T;
    }
    for (size_t i = 0; i < BT * C; i++)
        err = dmax(err, fabs(o[i] - out[i]));
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < s.T; t++)
            for (int c = 0; c < Ckv; c++) {
                const size_t bt = (size_t)b * s.T + t, at = ((size_t)b * cap + t) * Ckv + c;
                const double want = s.rope.theta > 0 ? kr[bt * Ckv + c] : k[bt * s.k_stride + c];
                kerr = dmax(kerr, fabs(kc[at] - want) + fabs(vc[at] - v[bt * s.v_stride + c]));
            }
    tap_ok(err <= 1e-12 && kerr == 0.0,
        "cached attention B=%d T=%d nh=%d nkv=%d hd=%d rope=%g/%d %s in %d pieces = attention_fwd "
        "(err %.1e, cache err %.1e)", s.B, s.T, s.n_head, s.n_kv_head, s.head_dim, s.rope.theta, (int)s.rope.type,
        fused ? "fused" : "strided", pieces, err, kerr);
    free(x), free(out), free(lse), free(qr), free(kr), free(kc), free(vc), free(o), free(piece);
}

/* The vocabulary split in shards (as tensor parallelism splits it): the
 * shards' statistics combined give the whole-vocabulary loss, and the
 * shards' gradients are the columns of the whole gradient. */
static void check_ce_shards(void)
{
    const int N = rng_int(2, 9), V = rng_int(8, 60), S = rng_int(2, 4);
    float *x = xcalloc((size_t)N * V, sizeof(float)), *dx = xcalloc((size_t)N * V, sizeof(float));
    float *ds = xcalloc((size_t)N * V, sizeof(float)), *lse = xcalloc((size_t)N, sizeof(float));
    float *tl = xcalloc((size_t)N, sizeof(float)), *sl = xcalloc((size_t)N * S, sizeof(float));
    float *st = xcalloc((size_t)N * S, sizeof(float)), *shard = xcalloc((size_t)N * V, sizeof(float));
    int32_t *tg = xcalloc((size_t)N, sizeof(int32_t));
    for (int i = 0; i < N * V; i++)
        x[i] = (float)rng_sym(4.0);
    for (int n = 0; n < N; n++)
        tg[n] = rng_int(0, V - 1);
    tg[0] = -100;
    KF->crossentropy_stats(lse, tl, x, tg, N, V, 0);
    KF->crossentropy_bwd(dx, x, lse, tg, N, V, 0, 0.5f);
    /* shard s holds columns [s*V/S, (s+1)*V/S) */
    for (int s = 0; s < S; s++) {
        int v0 = s * V / S, vn = (s + 1) * V / S - v0;
        for (int n = 0; n < N; n++)
            memcpy(shard + (size_t)n * vn, x + (size_t)n * V + v0, (size_t)vn * sizeof(float));
        KF->crossentropy_stats(sl + (size_t)s * N, st + (size_t)s * N, shard, tg, N, vn, v0);
    }
    double err = 0, gerr = 0;
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, sum = 0, t = 0;
        for (int s = 0; s < S; s++)
            mx = dmax(mx, sl[s * N + n]), t += st[s * N + n];
        for (int s = 0; s < S; s++)
            sum += exp(sl[s * N + n] - mx);
        double l = tg[n] < 0 ? 0 : mx + log(sum);
        err = dmax(err, fabs((l - t) - ((double)lse[n] - tl[n])));
        lse[n] = (float)l;
    }
    for (int s = 0; s < S; s++) {
        int v0 = s * V / S, vn = (s + 1) * V / S - v0;
        for (int n = 0; n < N; n++)
            memcpy(shard + (size_t)n * vn, x + (size_t)n * V + v0, (size_t)vn * sizeof(float));
        memset(ds, 0, (size_t)N * vn * sizeof(float));
        KF->crossentropy_bwd(ds, shard, lse, tg, N, vn, v0, 0.5f);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < vn; j++)
                gerr = dmax(gerr, fabs(ds[(size_t)n * vn + j] - dx[(size_t)n * V + v0 + j]));
    }
    tap_ok(err <= 2e-6 && gerr <= 1e-6,
        "cross-entropy over %d vocabulary shards = whole vocabulary (loss err %.1e, grad err %.1e)",
        S, err, gerr);
    free(x), free(dx), free(ds), free(lse), free(tl), free(sl), free(st), free(shard), free(tg);
}

/* In place (dlogits == logits, as the executor runs the classifier) the
 * gradient replaces the logits bit for bit as += gives it on a zeroed
 * buffer, of a shard too; a row whose target is ignored becomes zero. */
static void check_ce_in_place(void)
{
    const int N = rng_int(2, 9), V = rng_int(8, 70), v0 = rng_int(0, 1) * rng_int(1, 30);
    const size_t nv = (size_t)N * V;
    float *x = xcalloc(nv, sizeof(float)), *dx = xcalloc(nv, sizeof(float));
    float *lse = xcalloc((size_t)N, sizeof(float)), *tl = xcalloc((size_t)N, sizeof(float));
    int32_t *tg = xcalloc((size_t)N, sizeof(int32_t));
    for (size_t i = 0; i < nv; i++)
        x[i] = (float)rng_sym(6.0);
    for (int n = 0; n < N; n++)
        tg[n] = v0 + rng_int(-3, V + 2);   /* some targets in other shards */
    tg[rng_int(0, N - 1)] = -100;
    KF->crossentropy_stats(lse, tl, x, tg, N, V, v0);
    KF->crossentropy_bwd(dx, x, lse, tg, N, V, v0, 0.25f);
    KF->crossentropy_bwd(x, x, lse, tg, N, V, v0, 0.25f);
    size_t ignored = 0, zero = 0;
    for (int n = 0; n < N; n++)
        for (int j = 0; tg[n] < 0 && j < V; j++)
            ignored++, zero += x[(size_t)n * V + j] == 0.0f && !signbit(x[(size_t)n * V + j]);
    tap_ok(memcmp(x, dx, nv * sizeof(float)) == 0 && ignored && zero == ignored,
           "cross-entropy backward in place (N=%d V=%d v0=%d): the gradient += gives on zeros, bit for "
           "bit; the ignored row zero", N, V, v0);
    free(x), free(dx), free(lse), free(tl), free(tg);
}

static void check_dropout_p0(void)
{
    const size_t n = (size_t)rng_int(1, 5000);
    float *x = xcalloc(n, sizeof(float)), *y = xcalloc(n, sizeof(float));
    float *d = xcalloc(n, sizeof(float)), *d0 = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rng_sym(1.0), d[i] = d0[i] = (float)rng_sym(1.0);
    KF->dropout_fwd(y, x, n, 0.0f, 42, 0);
    int ok = memcmp(x, y, n * sizeof(float)) == 0;
    KF->dropout_bwd(d, x, n, 0.0f, 42, 0, 1);
    for (size_t i = 0; i < n; i++)
        ok &= d[i] == d0[i] + x[i];
    for (size_t i = 0; i < n; i++)
        d[i] = NAN;
    KF->dropout_bwd(d, x, n, 0.0f, 42, 0, 0);
    for (size_t i = 0; i < n; i++)
        ok &= d[i] == 0.0f + x[i];
    tap_ok(ok, "dropout p=0: forward is a copy, backward adds dout (acc 0: writes it over NaN)");
    free(x), free(y), free(d), free(d0);
}

static void check_dropout_stats(void)
{
    const size_t n = 200000;
    const float p = 0.3f;
    float *x = xcalloc(n, sizeof(float)), *y1 = xcalloc(n, sizeof(float));
    float *y2 = xcalloc(n, sizeof(float)), *y3 = xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(1.0 + rng_unif()); /* never 0 */
    const uint64_t seed = rng_next();
    KF->dropout_fwd(y1, x, n, p, seed, 0);
    /* in three pieces, each told its first element: the same mask */
    const size_t a = n / 3, b = n / 2;
    KF->dropout_fwd(y2, x, a, p, seed, 0);
    KF->dropout_fwd(y2 + a, x + a, b - a, p, seed, a);
    KF->dropout_fwd(y2 + b, x + b, n - b, p, seed, b);
    KF->dropout_fwd(y3, x, n, p, seed + 1, 0);
    size_t kept = 0, differ = 0;
    double scerr = 0;
    int maskok = 1;
    for (size_t i = 0; i < n; i++) {
        const int k = y1[i] != 0.0f;
        kept += (size_t)k;
        differ += (size_t)(k != (y3[i] != 0.0f));
        maskok &= k == ref_keep(seed, i, p);
        if (k)
            scerr = dmax(scerr, fabs(y1[i] - x[i] / (1.0 - p)) / (x[i] / (1.0 - p)));
    }
    const double frac = (double)kept / n, fdiff = (double)differ / n;
    tap_ok(memcmp(y1, y2, n * sizeof(float)) == 0 && maskok && fabs(frac - (1 - p)) < 0.006 &&
            fdiff > 0.3 && scerr < 1e-6,
        "dropout: same seed same mask (also run in pieces), documented hash, keep rate %.4f, %.3f differ "
        "with seed+1, scale err %.1e",
        frac, fdiff, scerr);
    free(x), free(y1), free(y2), free(y3);
}

/* torch.optim.AdamW (single tensor), written straight from the docs */
static void ref_adamw(double *p, const double *g, double *m, double *v, size_t n, double lr,
                      double b1, double b2, double eps, double wd, int t)
{
    const double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

/* One step over random spans of [lo, n): moments of n - lo elements (a
 * ZeRO shard), decay on or off per span; elements outside untouched. */
static void check_adamw(void)
{
    const size_t n = (size_t)rng_int(100, 400), lo = (size_t)rng_int(0, 40), nm = n - lo;
    const int steps = 6;
    const float b1 = 0.9f, b2 = rng_int(0, 1) ? 0.95f : 0.999f, eps = 1e-8f, wd = 0.1f;
    double *pr = xcalloc(n, 8), *mr = xcalloc(nm, 8), *vr = xcalloc(nm, 8), *gr = xcalloc(n, 8);
    double *pd = xcalloc(n, 8), *md = xcalloc(nm, 8), *vd = xcalloc(nm, 8);
    float *pf = xcalloc(n, 4), *mf = xcalloc(nm, 4), *vf = xcalloc(nm, 4), *gf = xcalloc(n, 4);
    uint16_t *cf = xcalloc(n, 2);   /* the bf16 compute copies the float table rounds in its pass */
    for (size_t i = 0; i < n; i++)
        cf[i] = 0xabcd;
    merak_adamw_span sp[8];
    int ns = 0;
    for (size_t a = lo; a < n && ns < 8; ns++) {
        const size_t len = ns == 7 ? n - a : (size_t)rng_int(1, (int)(n - a));
        sp[ns].at = a, sp[ns].m_at = a - lo, sp[ns].n = len, sp[ns].decay = rng_int(0, 1);
        a += len;
    }
    for (size_t i = 0; i < n; i++)
        pf[i] = (float)rng_sym(1.0), pr[i] = pd[i] = pf[i];
    for (int t = 1; t <= steps; t++) {
        const float lr = (float)(1e-4 + 1e-2 * rng_unif());
        for (size_t i = 0; i < n; i++) {
            /* magnitudes from 1e-9 to 1, some exact zeros */
            const double mag = pow(10.0, -9.0 * rng_unif());
            gf[i] = i % 17 == 0 ? 0.0f : (float)rng_sym(mag);
            gr[i] = gf[i];
        }
        for (int k = 0; k < ns; k++)
            ref_adamw(pr + sp[k].at, gr + sp[k].at, mr + sp[k].m_at, vr + sp[k].m_at, sp[k].n, lr,
                      b1, b2, eps, sp[k].decay ? wd : 0.0, t);
        KD->adamw(pd, gr, md, vd, sp, ns, lr, b1, b2, eps, wd, t, NULL);
        KF->adamw(pf, gf, mf, vf, sp, ns, lr, b1, b2, eps, wd, t, cf);
    }
    int copies = 1;   /* each updated element rounded as to_bf16 rounds it; the others untouched */
    for (size_t i = 0; i < n; i++)
        copies &= cf[i] == (i < lo ? 0xabcd : merak_f32_to_bf16(pf[i]));
    const double ed = dmax(relerr_dd(pd, pr, n), dmax(relerr_dd(md, mr, nm), relerr_dd(vd, vr, nm)));
    double ep = 0;
    for (size_t i = 0; i < n; i++)
        ep = dmax(ep, fabs(pf[i] - pr[i]) / dmax(fabs(pr[i]), 1e-2));
    const double ef = dmax(ep, dmax(relerr_fd(mf, mr, nm), relerr_fd(vf, vr, nm)));
    tap_ok(ed <= 1e-12, "adamw (double table) matches torch formula over %d steps, %d spans (err %.1e)",
        steps, ns, ed);
    tap_ok(ef <= 2e-6 && copies, "adamw (float table) matches torch formula over %d steps, %d spans (err %.1e); "
           "its bf16 copies are the updated values rounded (%d)", steps, ns, ef, copies);
    free(pr), free(mr), free(vr), free(gr), free(pd), free(md), free(vd);
    free(pf), free(mf), free(vf), free(gf), free(cf);
}

static void check_sumsq(void)
{
    const size_t n = (size_t)rng_int(1, 300000);
    double *xd = xcalloc(n, 8);
    float *xf = xcalloc(n, 4);
    double want = 0;
    for (size_t i = 0; i < n; i++) {
        xf[i] = (float)rng_sym(2.0);
        xd[i] = xf[i];
        want += xd[i] * xd[i];
    }
    const double sd = KD->sumsq(xd, n), sf = KF->sumsq(xf, n);
    merak_kernels_cpu_set_threads(2);
    const double sf2 = KF->sumsq(xf, n);
    merak_kernels_cpu_set_threads(1);
    const int ok = fabs(sd - want) <= 1e-12 * want && fabs(sf - want) <= 1e-12 * want &&
                   sf2 == sf && KF->sumsq(xf, 0) == 0.0 && KD->sumsq(xd, 1) == xd[0] * xd[0];
    tap_ok(ok, "sumsq (n=%zu) matches a double sum (err %.1e), thread-independent", n,
        fabs(sf - want) / want);
    free(xd), free(xf);
}

static void check_scale(void)
{
    const size_t n = (size_t)rng_int(1, 70000);
    const float s = (float)rng_sym(3.0);
    double *xd = xcalloc(n, 8), *yd = xcalloc(n, 8);
    float *xf = xcalloc(n, 4), *yf = xcalloc(n, 4);
    for (size_t i = 0; i < n; i++)
        xf[i] = yf[i] = (float)rng_sym(1.0), xd[i] = yd[i] = xf[i];
    KF->scale(yf, n, s);
    KD->scale(yd, n, s);
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= yf[i] == xf[i] * s && yd[i] == xd[i] * (double)s;
    tap_ok(ok, "scale: x *= s exactly (n=%zu, s=%g)", n, (double)s);
    free(xd), free(yd), free(xf), free(yf);
}

/* ------------------------------------------------------------------ main */

int main(void)
{
    const char *env = getenv("MERAK_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0)
                                : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    g_rng = seed;
    KF = merak_kernels_cpu();
    KD = merak_kernels_cpu_f64();
    merak_kernels_cpu_set_threads(1);

    tap_plan(NOPS * CHECKS_PER_OP + NEXTRA);
    tap_diag("seed %llu (MERAK_TEST_SEED=%llu reproduces this run)", (unsigned long long)seed,
         (unsigned long long)seed);

    check_table();
    for (int i = 0; i < NOPS; i++) {
        opcase c;
        memset(&c, 0, sizeof c);
        OPS[i](&c, 0);
        describe(&c);
        check_ref(&c);
        check_grad(&c);
        check_f32(&c);
        free_case(&c);
        check_threads(OPS[i]);
    }
    check_fresh(ln_setup, 1);
    check_fresh(rms_setup, 0);
    check_fresh(drop_setup, 1);
    check_fresh(lin_setup_bias, 1);
    check_fresh(attn_setup_mha, 0);
    check_fresh(attn_setup_gqa, 1);
    check_fresh(attn_setup_fused, 0);
    check_fresh(lin_setup_nobias, 0);
    check_fresh(gelu_setup, 0);
    check_fresh(swiglu_setup, 1);
    check_lse();
    for (int i = 0; i < 4; i++)
        check_cached_attention();
    check_ce_shards();
    check_ce_in_place();
    check_dropout_p0();
    check_dropout_stats();
    check_adamw();
    check_sumsq();
    check_scale();

    if (tap_failed)
        tap_diag("seed %llu", (unsigned long long)seed);
    return tap_done();
}
