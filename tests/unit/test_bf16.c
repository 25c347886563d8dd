/*
 * test_bf16.c - bf16 on the CPU (--dtype bf16, exec.h's Precision): the
 * rounding helper, and one step of a tiny model, whose activations and
 * activation gradients are all bf16 values, whose masters and weight
 * gradients are not rounded, whose loss is within bf16's rounding of
 * fp32's but not equal to it, and whose recomputation gives the same bits;
 * bf16 storage gives the numbers of bf16 values in float storage, bit for
 * bit, in less memory.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h" /* HAVE_CUDA, HAVE_CUDNN_ATTN */
#include "bf16.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "kernels.h"
#include "merak/merak.h"
#include "pipe/exec.h"
#include "preset.h"
#include "tap.h"
#include "train.h"

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static int is_bf16(float x) { return (bits(x) & 0xffffu) == 0; }

static void test_round(void)
{
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even
     * mantissa (1); 1 + 3 * 2^-8 is halfway up to 1 + 2^-6 (even); 3.4e38
     * is past halfway from bf16's largest (0x7f7f, 3.39e38) to 2^128. */
    float x[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 3.4e38f, INFINITY, NAN};
    float want[] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.5f, INFINITY, INFINITY};
    merak_kernels_cpu()->round_bf16(x, 7);
    int good = 1;
    for (int i = 0; i < 6; i++)
        good &= x[i] == want[i];
    tap_ok(good && isnan(x[6]) && merak_f32_to_bf16(-0.0f) == 0x8000u,
           "round_bf16: to nearest, ties to even; past the range to infinity; nan stays nan");
}

/* Token ids and targets of a slot (0 unless said) from the seed. */
static void fill_slot(const merak_graph *g, merak_exec *e, int slot, int V, unsigned seed)
{
    uint64_t z = seed;
    for (int t = 0; t < merak_graph_num_tensors(g); t++) {
        int32_t *p = merak_exec_tensor(e, slot, t);
        if (p && g->tensors[t].dtype == MERAK_I32)
            for (int64_t i = 0; i < merak_tensor_elems(&g->tensors[t]); i++)
                p[i] = (int32_t)((z = z * 6364136223846793005ull + 1442695040888963407ull) >> 33) % V;
    }
}

static void fill_tokens(const merak_graph *g, merak_exec *e, int V, unsigned seed) { fill_slot(g, e, 0, V, seed); }

/* One forward and backward of slot 0 (recomputing first when rc); the loss. */
static double step(merak_exec *e, int rc)
{
    merak_exec_cast_params(e);
    merak_exec_zero_grads(e);
    merak_exec_forward(e, 0, 11);
    if (rc)
        merak_exec_recompute(e, 0);
    merak_exec_backward(e, 0);
    return merak_exec_loss(e, 0);
}

/* Two micro-batches run `how` (preset.h run_two) from parameters of seed
 * 42 and tokens of seeds 5 and 6; their losses. */
static void run_seeded(const merak_graph *g, merak_exec *e, int V, int how, double loss[2])
{
    merak_init_params(g, e, 42, NULL, 0);
    fill_slot(g, e, 0, V, 5);
    fill_slot(g, e, 1, V, 6);
    run_two(e, how);
    loss[0] = merak_exec_loss(e, 0);
    loss[1] = merak_exec_loss(e, 1);
}

static void test_step(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    c.dropout = 0.1f;   /* the dropout masks are the same in both dtypes */
    merak_graph *g = merak_model_build(&c, 2, 16, err, sizeof err);
    const merak_kernels *k = merak_kernels_cpu();
    merak_exec_chunk whole = {0, -1, 1, 0}, rcall = {0, -1, 1, g ? g->nops : 0};
    merak_exec_opts o32 = {.chunks = &whole, .nchunks = 1, .kernels = k}, o16 = o32, orc = o32, ofl = o32;
    o16.bf16 = orc.bf16 = ofl.bf16 = 1;
    o16.keep_grads = ofl.keep_grads = 1;   /* every activation gradient readable after the backward */
    ofl.float_storage = 1;
    orc.chunks = &rcall;
    orc.npool = 1;
    merak_exec *e32 = NULL, *e16 = NULL, *erc = NULL, *efl = NULL;
    if (!g || merak_exec_create(g, &o32, &e32, err, sizeof err) < 0 ||
        merak_exec_create(g, &o16, &e16, err, sizeof err) < 0 || merak_exec_create(g, &orc, &erc, err, sizeof err) < 0 ||
        merak_exec_create(g, &ofl, &efl, err, sizeof err) < 0) {
        tap_ok(0, "%s: bf16 executors: %s", preset, err);
        return;
    }
    merak_exec *e[4] = {e32, e16, erc, efl};
    double loss[4];
    for (int i = 0; i < 4; i++) {
        merak_init_params(g, e[i], 42, NULL, 0);
        fill_tokens(g, e[i], c.vocab_size, 3);
        loss[i] = step(e[i], i == 2);
    }

    /* In float storage every float tensor of the slot and its gradient
     * holds bf16 values (the token ids and the fp32 loss aside).  In bf16
     * storage the same values are there, bit for bit, in half the bytes
     * (the logits too, whose gradient takes their storage). */
    size_t acts = 0, off = 0, half = 0, differ = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const float *v = merak_exec_tensor(efl, 0, t), *d = merak_exec_grad(efl, 0, t);
        const void *v16 = merak_exec_tensor(e16, 0, t), *d16 = merak_exec_grad(e16, 0, t);
        if (!v || g->tensors[t].dtype != MERAK_F32 || t == g->loss)
            continue;
        const int h = merak_exec_tensor_bf16(e16, t);
        half += h && merak_exec_tensor_bytes(e16, t) * 2 == merak_exec_tensor_bytes(efl, t);
        for (int64_t i = 0; i < merak_tensor_elems(&g->tensors[t]); i++) {
            off += !is_bf16(v[i]) + (d && !is_bf16(d[i]));
            acts += 1 + (d != NULL);
            const float w = h ? merak_bf16_to_f32(((const uint16_t *)v16)[i]) : ((const float *)v16)[i];
            const float dw = !d16 ? 0 : h ? merak_bf16_to_f32(((const uint16_t *)d16)[i]) : ((const float *)d16)[i];
            differ += bits(w) != bits(v[i]) || (d && bits(dw) != bits(d[i]));
        }
    }
    tap_ok(acts > 10000 && off == 0, "%s: %zu activation and activation-gradient values in float storage, %zu not bf16",
           preset, acts, off);
    size_t nf, n16;
    const float *gfl = merak_exec_grads_flat(efl, &nf), *gst = merak_exec_grads_flat(e16, &n16);
    tap_ok(half > 10 && differ == 0 && loss[3] == loss[1] && nf == n16 && memcmp(gfl, gst, nf * sizeof *gfl) == 0 &&
               merak_exec_arena_bytes(e16) < merak_exec_arena_bytes(efl),
           "%s: bf16 storage (%zu tensors at 2 bytes) holds the values and gradients of float storage (%zu differ) "
           "and gives its loss and weight gradients, bit for bit, in %zu bytes of arenas instead of %zu",
           preset, half, differ, merak_exec_arena_bytes(e16), merak_exec_arena_bytes(efl));

    /* The masters and the weight gradients are fp32: most of their values
     * have low bits a bf16 would drop; the gradients differ from fp32's. */
    size_t n, master_off = 0, grad_off = 0, grad_diff = 0;
    const float *p = merak_exec_params_flat(e16, &n), *g16 = merak_exec_grads_flat(e16, &n);
    const float *g32 = merak_exec_grads_flat(e32, &n);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) {
        if (g16[i] == 0)
            continue;
        nz++;
        master_off += !is_bf16(p[i]);
        grad_off += !is_bf16(g16[i]);
        grad_diff += g16[i] != g32[i];
    }
    tap_ok(nz > 1000 && master_off > nz / 2 && grad_off > nz / 2 && grad_diff > nz / 2,
           "%s: of %zu weight gradients, %zu are not bf16 values (%zu masters not bf16, %zu differ from fp32's)",
           preset, nz, grad_off, master_off, grad_diff);

    double rel = fabs(loss[1] - loss[0]) / fabs(loss[0]);
    tap_ok(loss[1] != loss[0] && rel < 1e-2, "%s: bf16 loss %.7f, fp32 %.7f (relative %.2g < 1e-2)", preset,
           loss[1], loss[0], rel);

    /* Recomputation rounds as the forward did: the same loss and gradients. */
    const float *grc = merak_exec_grads_flat(erc, &n);
    tap_ok(loss[2] == loss[1] && memcmp(grc, g16, n * sizeof *grc) == 0,
           "%s: bf16 with every layer recomputed gives the same loss and gradients, bit for bit", preset);

    /* Another step from the same masters rounds the same compute copies. */
    tap_ok(step(e16, 0) == loss[1], "%s: compute copies rounded again from the masters give the same loss", preset);

    for (int i = 0; i < 4; i++)
        merak_exec_destroy(e[i]);
    merak_graph_destroy(g);
}

/* The CPU table with its bf16 entries counted (calls[]), and without
 * them (every op staged): the executor's two ways of running bf16
 * storage.  C(i, entry, params, args): a wrapper counting entry i. */
enum { E_LIN_F, E_LIN_X, E_LIN_W, E_EMB_F, E_EMB_W, E_CE_S, E_CE_B, E_POS_F, E_POS_W, E_GELU_F, E_GELU_B,
       E_SWIGLU_F, E_SWIGLU_B, E_ADD_F, E_ACC, E_DROP_F, E_DROP_B, E_LN_F, E_LN_X, E_LN_W, E_RMS_F, E_RMS_X,
       E_RMS_W, E_LN_B, E_RMS_B, E_ADD_LN, E_ADD_RMS, E_ATT_F, E_ATT_B, E_CE_F, E_LG_F, E_LG_B, E_COUNT };
static int calls[E_COUNT];
#define C(i, entry, params, args)                       \
    static void count_##entry params                    \
    {                                                   \
        calls[i]++;                                     \
        merak_kernels_cpu()->entry args;                \
    }
typedef uint16_t h16;
C(E_LIN_F, linear16_fwd,
  (h16 *o, const h16 *x, const h16 *w, const h16 *b, int N, int K, int O, int ld, float *s),
  (o, x, w, b, N, K, O, ld, s))
C(E_LIN_X, linear16_bwd_x, (h16 *dx, const h16 *d, const h16 *w, int N, int K, int O, int ld, int a, float *s),
  (dx, d, w, N, K, O, ld, a, s))
C(E_LIN_W, linear16_bwd_w,
  (float *dw, float *db, const h16 *d, const h16 *x, int N, int K, int O, int ld, float *s),
  (dw, db, d, x, N, K, O, ld, s))
C(E_EMB_F, embedding16_fwd, (h16 *o, const int32_t *ids, const h16 *w, int N, int Cc, int v0, int V),
  (o, ids, w, N, Cc, v0, V))
C(E_EMB_W, embedding16_bwd_w, (float *dw, const h16 *d, const int32_t *ids, int N, int Cc, int v0, int V, float *s),
  (dw, d, ids, N, Cc, v0, V, s))
C(E_CE_S, crossentropy16_stats,
  (float *l, float *t, const h16 *x, const int32_t *tg, int N, int V, int ld, int v0, float *s),
  (l, t, x, tg, N, V, ld, v0, s))
C(E_CE_B, crossentropy16_bwd,
  (h16 *dx, const h16 *x, const float *l, const int32_t *tg, int N, int V, int ld, int v0, float sc, float *s),
  (dx, x, l, tg, N, V, ld, v0, sc, s))
C(E_CE_F, crossentropy16_fused,
  (float *l, float *t, h16 *x, const int32_t *tg, int N, int V, int ld, int v0, float sc, float *s),
  (l, t, x, tg, N, V, ld, v0, sc, s))
C(E_LG_F, linear16_gelu_fwd,
  (h16 *p, h16 *o, const h16 *x, const h16 *w, const h16 *b, int N, int K, int O, float *s), (p, o, x, w, b, N, K, O, s))
C(E_LG_B, linear16_bwd_x_dgelu,
  (h16 *dp, const h16 *d, const h16 *w, const h16 *p, int N, int K, int O, int ld, float *s),
  (dp, d, w, p, N, K, O, ld, s))
C(E_POS_F, posemb16_fwd, (h16 *o, const h16 *x, const h16 *w, int B, int T, int Cc, float *s), (o, x, w, B, T, Cc, s))
C(E_POS_W, posemb16_bwd_w, (float *dw, const h16 *d, int B, int T, int Cc, float *s), (dw, d, B, T, Cc, s))
C(E_GELU_F, gelu16_fwd, (h16 *o, const h16 *x, size_t n, float *s), (o, x, n, s))
C(E_GELU_B, gelu16_bwd, (h16 *dx, const h16 *d, const h16 *x, size_t n, int a, float *s), (dx, d, x, n, a, s))
C(E_SWIGLU_F, swiglu16_fwd, (h16 *o, const h16 *g, const h16 *u, size_t n, float *s), (o, g, u, n, s))
C(E_SWIGLU_B, swiglu16_bwd,
  (h16 *dg, h16 *du, const h16 *d, const h16 *g, const h16 *u, size_t n, int a, float *s),
  (dg, du, d, g, u, n, a, s))
C(E_ADD_F, add16_fwd, (h16 *o, const h16 *a, const h16 *b, size_t n, float *s), (o, a, b, n, s))
C(E_ACC, accumulate16, (h16 *y, const h16 *x, size_t n, float *s), (y, x, n, s))
C(E_DROP_F, dropout16_fwd, (h16 *o, const h16 *x, size_t n, float p, uint64_t sd, uint64_t i0, float *s),
  (o, x, n, p, sd, i0, s))
C(E_DROP_B, dropout16_bwd, (h16 *dx, const h16 *d, size_t n, float p, uint64_t sd, uint64_t i0, int a, float *s),
  (dx, d, n, p, sd, i0, a, s))
C(E_LN_F, layernorm16_fwd,
  (h16 *o, float *m, float *r, const h16 *x, const h16 *w, const h16 *b, int N, int Cc, float eps, float *s),
  (o, m, r, x, w, b, N, Cc, eps, s))
C(E_LN_X, layernorm16_bwd_x,
  (h16 *dx, const h16 *d, const h16 *x, const h16 *w, const float *m, const float *r, int N, int Cc, int a,
   float *s),
  (dx, d, x, w, m, r, N, Cc, a, s))
C(E_LN_W, layernorm16_bwd_w,
  (float *dw, float *db, const h16 *d, const h16 *x, const float *m, const float *r, int N, int Cc, float *s),
  (dw, db, d, x, m, r, N, Cc, s))
C(E_RMS_F, rmsnorm16_fwd, (h16 *o, float *r, const h16 *x, const h16 *w, int N, int Cc, float eps, float *s),
  (o, r, x, w, N, Cc, eps, s))
C(E_RMS_X, rmsnorm16_bwd_x,
  (h16 *dx, const h16 *d, const h16 *x, const h16 *w, const float *r, int N, int Cc, int a, float *s),
  (dx, d, x, w, r, N, Cc, a, s))
C(E_RMS_W, rmsnorm16_bwd_w, (float *dw, const h16 *d, const h16 *x, const float *r, int N, int Cc, float *s),
  (dw, d, x, r, N, Cc, s))
C(E_LN_B, layernorm16_bwd,
  (h16 *dx, float *dw, float *db, const h16 *d, const h16 *x, const h16 *w, const float *m, const float *r, int N,
   int Cc, int a, float *s),
  (dx, dw, db, d, x, w, m, r, N, Cc, a, s))
C(E_RMS_B, rmsnorm16_bwd,
  (h16 *dx, float *dw, const h16 *d, const h16 *x, const h16 *w, const float *r, int N, int Cc, int a, float *s),
  (dx, dw, d, x, w, r, N, Cc, a, s))
C(E_ADD_LN, add_layernorm16_fwd,
  (h16 *sum, h16 *o, float *m, float *r, const h16 *a, const h16 *b, const h16 *w, const h16 *bias, int N, int Cc,
   float eps, float *s),
  (sum, o, m, r, a, b, w, bias, N, Cc, eps, s))
C(E_ADD_RMS, add_rmsnorm16_fwd,
  (h16 *sum, h16 *o, float *r, const h16 *a, const h16 *b, const h16 *w, int N, int Cc, float eps, float *s),
  (sum, o, r, a, b, w, N, Cc, eps, s))
typedef merak_attn_shape ash;
C(E_ATT_F, attention16_fwd,
  (const ash *a, h16 *o, float *l, float *qr, float *kr, const h16 *q, const h16 *k, const h16 *v, float *as, float *s),
  (a, o, l, qr, kr, q, k, v, as, s))
C(E_ATT_B, attention16_bwd,
  (const ash *a, h16 *dq, h16 *dk, h16 *dv, const h16 *d, const h16 *o, const float *l, const float *qr,
   const float *kr, const h16 *q, const h16 *k, const h16 *v, float *as, float *s, int acc),
  (a, dq, dk, dv, d, o, l, qr, kr, q, k, v, as, s, acc))
#undef C
static merak_kernels counted, staged;

/* Both tables; X(entry) lists every bf16 entry. */
#define BF16_ENTRIES(X)                                                                                    \
    X(linear16_fwd) X(linear16_bwd_x) X(linear16_bwd_w) X(embedding16_fwd) X(embedding16_bwd_w)          \
    X(crossentropy16_stats) X(crossentropy16_bwd) X(posemb16_fwd) X(posemb16_bwd_w) X(gelu16_fwd)         \
    X(gelu16_bwd) X(swiglu16_fwd) X(swiglu16_bwd) X(add16_fwd) X(accumulate16) X(dropout16_fwd)           \
    X(dropout16_bwd) X(layernorm16_fwd) X(layernorm16_bwd_x) X(layernorm16_bwd_w) X(rmsnorm16_fwd)            \
    X(rmsnorm16_bwd_x) X(rmsnorm16_bwd_w) X(layernorm16_bwd) X(rmsnorm16_bwd) X(add_layernorm16_fwd)      \
    X(add_rmsnorm16_fwd) X(attention16_fwd) X(attention16_bwd) X(crossentropy16_fused) \
    X(linear16_gelu_fwd) X(linear16_bwd_x_dgelu)
static void tables(void)
{
    counted = staged = *merak_kernels_cpu();
#define SET(entry) counted.entry = count_##entry, staged.entry = NULL;
    BF16_ENTRIES(SET)
#undef SET
}

/* The entries graph g's ops need in executor e: each of its kinds' (1 in
 * need[]); an add's and a position embedding's accumulate16 only where the
 * op adds to its input gradients rather than writing them (fresh, which
 * copies); a norm's backward in one call (layernorm16_bwd, rmsnorm16_bwd)
 * where its parts run together (together), else its two parts'; an add
 * and the norm reading its sum, run natively, forward in one call
 * (add_layernorm16_fwd, add_rmsnorm16_fwd), each by itself otherwise; the
 * loss's statistics and gradient in one call (crossentropy16_fused) where
 * its forward writes the gradient (merak_exec_op_grad_early), else its
 * two; a linear layer and the GELU of its output forward in one call
 * (linear16_gelu_fwd), and the GELU's input part with that of the linear
 * layer reading its output alone (linear16_bwd_x_dgelu), where both run
 * natively and the GELU writes its input's gradient, each GELU call by
 * itself otherwise; never[] (or NULL): the entries not to be called at
 * all (a GELU entry, or a pair's, that no GELU needs). */
static void needed(const merak_graph *g, const merak_exec *e, int together, int *need, int *never)
{
    static const struct { merak_op_type t; int e[3]; } uses[] = {
        {MERAK_OP_LINEAR, {E_LIN_F, E_LIN_X, E_LIN_W}}, {MERAK_OP_EMBEDDING, {E_EMB_F, E_EMB_W, -1}},
        {MERAK_OP_CROSS_ENTROPY, {E_CE_S, E_CE_B, -1}}, {MERAK_OP_POS_EMBEDDING, {E_POS_F, E_POS_W, E_ACC}},
        {MERAK_OP_GELU, {E_GELU_F, E_GELU_B, -1}}, {MERAK_OP_SWIGLU, {E_SWIGLU_F, E_SWIGLU_B, -1}},
        {MERAK_OP_ADD, {E_ADD_F, E_ACC, -1}}, {MERAK_OP_DROPOUT, {E_DROP_F, E_DROP_B, -1}},
        {MERAK_OP_LAYERNORM, {E_LN_F, E_LN_X, E_LN_W}}, {MERAK_OP_RMSNORM, {E_RMS_F, E_RMS_X, E_RMS_W}},
        {MERAK_OP_ATTENTION, {E_ATT_F, E_ATT_B, -1}}};
    memset(need, 0, E_COUNT * sizeof *need);
    for (int i = 0; i < g->nops; i++)
        for (size_t u = 0; u < sizeof uses / sizeof *uses; u++)
            for (int k = 0; k < 3 && g->ops[i].type == uses[u].t; k++)
                if (uses[u].e[k] >= 0 && (uses[u].e[k] != E_ACC || !merak_exec_op_fresh(e, i)))
                    need[uses[u].e[k]] = 1;
    for (int k = 0; together && k < 2; k++)   /* the norms' two parts as one */
        if (need[k ? E_RMS_X : E_LN_X])
            need[k ? E_RMS_X : E_LN_X] = need[k ? E_RMS_W : E_LN_W] = 0, need[k ? E_RMS_B : E_LN_B] = 1;
    need[E_ADD_F] = need[E_LN_F] = need[E_RMS_F] = 0;   /* the forwards, pair by pair */
    need[E_GELU_F] = need[E_GELU_B] = 0;   /* and the GELUs, pair by pair */
    for (int i = 0; i < g->nops; i++) {
        const merak_op *o = &g->ops[i], *p = i > 0 ? &g->ops[i - 1] : NULL, *q = i + 1 < g->nops ? &g->ops[i + 1] : NULL;
        if (o->type != MERAK_OP_GELU)
            continue;
        const int fwd = p && p->type == MERAK_OP_LINEAR && o->in[0] == p->out && merak_exec_op_native(e, i - 1) &&
                        merak_exec_op_native(e, i);
        int readers = 0;
        for (int j = 0; j < g->nops; j++)
            for (int k = 0; k < g->ops[j].nin; k++)
                readers += g->ops[j].in[k] == o->out;
        const int bwd = q && q->type == MERAK_OP_LINEAR && q->in[0] == o->out && readers == 1 &&
                        merak_exec_op_native(e, i) && merak_exec_op_native(e, i + 1) && merak_exec_op_fresh(e, i);
        need[fwd ? E_LG_F : E_GELU_F] = 1;
        need[bwd ? E_LG_B : E_GELU_B] = 1;
    }
    if (never) {
        memset(never, 0, E_COUNT * sizeof *never);
        never[E_GELU_F] = !need[E_GELU_F], never[E_GELU_B] = !need[E_GELU_B];
        never[E_LG_F] = !need[E_LG_F], never[E_LG_B] = !need[E_LG_B];
    }
    for (int i = 0; i < g->nops; i++) {
        if (g->ops[i].type == MERAK_OP_CROSS_ENTROPY && merak_exec_op_grad_early(e, i))
            need[E_CE_S] = need[E_CE_B] = 0, need[E_CE_F] = 1;
        const merak_op *o = &g->ops[i], *p = i > 0 ? &g->ops[i - 1] : NULL, *q = i + 1 < g->nops ? &g->ops[i + 1] : NULL;
        const int rms = o->type == MERAK_OP_RMSNORM;
        if (o->type == MERAK_OP_ADD)
            need[E_ADD_F] |= !(q && (q->type == MERAK_OP_LAYERNORM || q->type == MERAK_OP_RMSNORM) &&
                               q->in[0] == o->out && merak_exec_op_native(e, i) && merak_exec_op_native(e, i + 1));
        else if (o->type == MERAK_OP_LAYERNORM || rms) {
            const int pair = p && p->type == MERAK_OP_ADD && o->in[0] == p->out && merak_exec_op_native(e, i - 1) &&
                             merak_exec_op_native(e, i);
            need[pair ? (rms ? E_ADD_RMS : E_ADD_LN) : (rms ? E_RMS_F : E_LN_F)] = 1;
        }
    }
}

/* bf16 storage against float storage as the runtime runs them (gradients
 * shared, the logits' in place, two micro-batches in flight, dropout):
 * the same losses and weight gradients, bit for bit, with the backward
 * whole, split in zero-bubble order (both input parts, then both weight
 * parts: the weight parts widen from storage) and every layer recomputed;
 * the ops run natively in bf16 storage (the backend's bf16 entries, each
 * one the graph's kinds have called) or staged (a table without them). */
static void test_storage_runs(const char *preset, int wide)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    c.dropout = 0.1f;
    char name[64];
    if (wide == 1) {   /* logits far larger than the rest: the CPU's cross-entropy runs in row blocks */
        c.vocab_size = 4096, c.hidden = 16, c.ffn_hidden = 64, c.n_head = c.n_kv_head = 2;
        preset = "wide-vocabulary gpt2";
    } else if (wide == 2) {   /* rows of logits off 16 bytes: run natively, padded (exec.c row_ld_of) */
        c.vocab_size = 253;
        snprintf(name, sizeof name, "%s of 253 tokens", preset);
        preset = name;
    }
    merak_graph *g = merak_model_build(&c, 2, 16, err, sizeof err);
    tables();
    for (int how = 0; g && how < RUN_WAYS; how++) {
        merak_exec_chunk whole;
        merak_exec_opts o = run_opts(g, how, &whole), os, of;
        o.bf16 = 1;
        os = of = o;
        o.kernels = &counted;
        os.kernels = &staged;
        of.float_storage = 1;
        merak_exec *e[3] = {NULL, NULL, NULL};
        if (merak_exec_create(g, &o, &e[0], err, sizeof err) < 0 || merak_exec_create(g, &of, &e[1], err, sizeof err) < 0 ||
            merak_exec_create(g, &os, &e[2], err, sizeof err) < 0) {
            tap_ok(0, "%s: %s", preset, err);
            merak_exec_destroy(e[0]);
            merak_exec_destroy(e[1]);
            continue;
        }
        /* the logits' rows: padded to 256 natively, as they are staged */
        int logits = -1;
        for (int i = 0; i < g->nops; i++)
            if (g->ops[i].type == MERAK_OP_CROSS_ENTROPY)
                logits = g->ops[i].in[0];
        const size_t rows = 2 * 16, lb[2] = {merak_exec_tensor_bytes(e[0], logits),
                                             merak_exec_tensor_bytes(e[2], logits)};
        const size_t want = rows * (size_t)(wide == 2 ? 256 : c.vocab_size) * 2;
        tap_ok(lb[0] == want && lb[1] == rows * (size_t)c.vocab_size * 4,
               "%s, %s: the logits take %zu bytes run natively (%zu: rows %s), %zu staged (float storage)", preset, run_name(how),
               lb[0], want, wide == 2 ? "padded to 256" : "dense", lb[1]);
        double loss[3][2];
        int ncalls[3], blocks = 0, early[3] = {0, 0, 0};
        for (int i = 0; i < 3; i++) {
            memset(calls, 0, sizeof calls);
            run_seeded(g, e[i], c.vocab_size, how, loss[i]);
            int need[E_COUNT], never[E_COUNT];
            needed(g, e[i], how != RUN_SPLIT, need, never);
            ncalls[i] = 1;
            for (int f = 0; f < E_COUNT; f++)
                ncalls[i] &= (calls[f] > 0 || !need[f]) && (calls[f] == 0 || !never[f]);
            /* the loss's one call where its forward writes the gradient, its two elsewhere, not both */
            for (int op = 0; op < g->nops; op++)
                early[i] |= g->ops[op].type == MERAK_OP_CROSS_ENTROPY && merak_exec_op_grad_early(e[i], op);
            ncalls[i] &= early[i] ? calls[E_CE_S] + calls[E_CE_B] == 0 : calls[E_CE_F] == 0;
            /* and a norm's two parts are not also called apart, nor its one call split */
            ncalls[i] &= how != RUN_SPLIT ? calls[E_LN_X] + calls[E_LN_W] + calls[E_RMS_X] + calls[E_RMS_W] == 0
                                          : calls[E_LN_B] + calls[E_RMS_B] == 0;
            if (i == 0)
                blocks = (calls[E_CE_S] + calls[E_CE_F]) / 2;   /* per micro-batch (a recompute keeps the loss) */
        }
        size_t n;
        const float *g0 = merak_exec_grads_flat(e[0], &n), *g1 = merak_exec_grads_flat(e[1], &n),
                    *g2 = merak_exec_grads_flat(e[2], &n);
        /* (the CPU's bf16 entries widen into the staging buffer: with
         * logits far larger than the rest, N x V floats of it) */
        tap_ok(memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && memcmp(g0, g1, n * sizeof *g0) == 0 &&
                   (wide == 1 || merak_exec_arena_bytes(e[0]) < merak_exec_arena_bytes(e[1])),
               "%s, %s: bf16 storage gives float storage's losses and weight gradients, bit for bit, in %zu bytes "
               "of arenas instead of %zu", preset, run_name(how), merak_exec_arena_bytes(e[0]), merak_exec_arena_bytes(e[1]));
        if (!(ncalls[0] && memcmp(loss[0], loss[2], sizeof loss[0]) == 0 && memcmp(g0, g2, n * sizeof *g0) == 0))
            tap_diag("native: losses %.9g %.9g, every entry called %d; staged: %.9g %.9g; gradients %s", loss[0][0],
                     loss[0][1], ncalls[0], loss[2][0], loss[2][1], memcmp(g0, g2, n * sizeof *g0) ? "differ" : "equal");
        /* the loss's gradient in its forward natively, where the logits
         * are kept to the backward (a recompute of every layer rebuilds them) */
        const int early_ok = early[0] == (how != RUN_RECOMPUTED) && !early[1] && !early[2];
        tap_ok(ncalls[0] && early_ok && memcmp(loss[0], loss[2], sizeof loss[0]) == 0 &&
                   memcmp(g0, g2, n * sizeof *g0) == 0 &&
                   (wide == 1 ? blocks > 1 : merak_exec_device_bytes(e[0]) < merak_exec_device_bytes(e[1])),
               "%s, %s: its ops run natively in bf16 storage (every bf16 entry its kinds have called; the loss "
               "in %d row blocks, its gradient in its forward: %d) as staged, bit for bit; compute copies and logits "
               "in bf16: %zu bytes on the device instead of %zu",
               preset, run_name(how), blocks, early[0], merak_exec_device_bytes(e[0]), merak_exec_device_bytes(e[1]));
        for (int i = 0; i < 3; i++)
            merak_exec_destroy(e[i]);
    }
    merak_graph_destroy(g);
}

/* The loss's gradient written in its forward (merak_exec_op_grad_early)
 * where the layers are recomputed but the head and the loss are not: on,
 * with the staged run's losses and weight gradients, bit for bit.  An
 * evaluation's forward and a forward timed op by op take the statistics
 * alone and leave the logits as a training forward makes them; a
 * training forward writes the gradient over them. */
static void test_loss_early(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    c.dropout = 0.0f;   /* the same logits evaluating and training */
    merak_graph *g = merak_model_build(&c, 2, 16, err, sizeof err);
    tables();
    int lop = -1;
    for (int i = 0; g && i < g->nops; i++)
        if (g->ops[i].type == MERAK_OP_CROSS_ENTROPY)
            lop = i;
    if (!g || lop < 0) {
        tap_ok(0, "%s: a graph with a loss: %s", preset, g ? "none" : err);
        merak_graph_destroy(g);
        return;
    }
    const int logits = g->ops[lop].in[0], head = g->tensors[logits].producer;
    merak_exec_chunk ch = {0, -1, 2, head};   /* ops [0, head) recomputed */
    merak_exec_opts o = {.chunks = &ch, .nchunks = 1, .kernels = &counted, .npool = 2, .bf16 = 1}, os = o;
    os.kernels = &staged;
    merak_exec *e[2] = {NULL, NULL};
    if (merak_exec_create(g, &o, &e[0], err, sizeof err) < 0 || merak_exec_create(g, &os, &e[1], err, sizeof err) < 0) {
        tap_ok(0, "%s: %s", preset, err);
        merak_exec_destroy(e[0]);
        merak_graph_destroy(g);
        return;
    }
    double loss[2][2];
    int fused = 0, two = 0;
    for (int i = 0; i < 2; i++) {
        memset(calls, 0, sizeof calls);
        run_seeded(g, e[i], c.vocab_size, RUN_RECOMPUTED, loss[i]);
        if (i == 0)
            fused = calls[E_CE_F], two = calls[E_CE_S] + calls[E_CE_B];
    }
    size_t n;
    const float *g0 = merak_exec_grads_flat(e[0], &n), *g1 = merak_exec_grads_flat(e[1], &n);
    tap_ok(merak_exec_op_grad_early(e[0], lop) && !merak_exec_op_grad_early(e[1], lop) && fused == 2 && two == 0 &&
               memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && memcmp(g0, g1, n * sizeof *g0) == 0,
           "%s, layers recomputed, the head and the loss kept: the loss's gradient in its forward, one call a "
           "micro-batch (%d), its two entries never (%d); losses %.7g %.7g and weight gradients as staged, bit for "
           "bit", preset, fused, two, loss[0][0], loss[0][1]);

    /* the logits after an evaluation's forward, a timed one and a training one */
    const size_t lb = merak_exec_tensor_bytes(e[0], logits);
    unsigned char *after[3];
    int ce[3][2];
    double *t = calloc(2 * (size_t)g->nops, sizeof *t);
    for (int k = 0; k < 3; k++) {
        memset(calls, 0, sizeof calls);
        merak_exec_set_eval(e[0], k == 0);
        if (k == 1)
            merak_exec_time_ops(e[0], t, t + g->nops);
        merak_exec_forward(e[0], 0, 11);
        if (k == 1)
            merak_exec_time_ops(e[0], NULL, NULL);
        after[k] = malloc(lb);
        memcpy(after[k], merak_exec_tensor(e[0], 0, logits), lb);
        ce[k][0] = calls[E_CE_S], ce[k][1] = calls[E_CE_F];
    }
    merak_exec_set_eval(e[0], 0);
    tap_ok(ce[0][0] == 1 && ce[0][1] == 0 && ce[1][0] == 1 && ce[1][1] == 0 && ce[2][0] == 0 && ce[2][1] == 1 &&
               memcmp(after[0], after[1], lb) == 0 && memcmp(after[0], after[2], lb) != 0,
           "%s: evaluating and timing op by op, the loss's forward takes the statistics alone (calls %d %d, %d %d) "
           "and leaves the logits; training, one pass (%d %d) writes their gradient over them", preset, ce[0][0],
           ce[0][1], ce[1][0], ce[1][1], ce[2][0], ce[2][1]);
    for (int k = 0; k < 3; k++)
        free(after[k]);
    free(t);
    merak_exec_destroy(e[0]);
    merak_exec_destroy(e[1]);
    merak_graph_destroy(g);
}

/* A GELU's input part run with the next linear layer's (linear16_bwd_x_dgelu)
 * writes the GELU's input gradient while the layer's output gradient is
 * still read (by the call, then by the layer's weight part): the two may
 * not share storage.  An MLP as wide as the model, with dropout, is where
 * the shared buffer's plan would otherwise put one over the other. */
static void test_pair_storage(void)
{
    merak_model_config c;
    merak_model_preset("tiny-gpt2", &c);
    c.ffn_hidden = c.hidden;
    c.dropout = 0.1f;
    merak_graph *g = merak_model_build(&c, 2, 16, err, sizeof err);
    tables();
    merak_exec_chunk whole;
    merak_exec_opts o = run_opts(g, RUN_WHOLE, &whole), os;
    o.bf16 = 1;
    os = o;
    o.kernels = &counted;
    os.kernels = &staged;
    merak_exec *e = NULL, *es = NULL;
    if (!g || merak_exec_create(g, &o, &e, err, sizeof err) < 0 || merak_exec_create(g, &os, &es, err, sizeof err) < 0) {
        tap_ok(0, "an MLP as wide as the model: %s", err);
        merak_exec_destroy(e);
        merak_graph_destroy(g);
        return;
    }
    int pairs = 0, clash = 0;
    for (int i = 1; i < g->nops; i++) {
        const merak_op *a = &g->ops[i - 1], *b = &g->ops[i];
        if (a->type != MERAK_OP_GELU || b->type != MERAK_OP_LINEAR || b->in[0] != a->out)
            continue;
        const char *pa = merak_exec_grad(e, 0, a->in[0]), *pb = merak_exec_grad(e, 0, b->out);
        const size_t na = merak_exec_tensor_bytes(e, a->in[0]), nb = merak_exec_tensor_bytes(e, b->out);
        pairs++;
        clash += pa && pb && pa < pb + nb && pb < pa + na;
    }
    double loss[2][2];
    merak_exec *ee[2] = {e, es};
    memset(calls, 0, sizeof calls);
    for (int i = 0; i < 2; i++)
        run_seeded(g, ee[i], c.vocab_size, RUN_WHOLE, loss[i]);
    size_t n;
    const float *g0 = merak_exec_grads_flat(e, &n), *g1 = merak_exec_grads_flat(es, &n);
    tap_ok(pairs > 0 && clash == 0 && calls[E_LG_B] > 0 && memcmp(loss[0], loss[1], sizeof loss[0]) == 0 &&
               memcmp(g0, g1, n * sizeof *g0) == 0,
           "an MLP as wide as the model: %d GELU and linear backward pairs (%d calls), none with the GELU's input "
           "gradient over the layer's output gradient (%d); losses and weight gradients as staged, bit for bit",
           pairs, calls[E_LG_B], clash);
    merak_exec_destroy(e);
    merak_exec_destroy(es);
    merak_graph_destroy(g);
}

/* The CPU's entries on rows ld apart (the executor's padded logits):
 * what they give on dense rows, bit for bit, their padding (NaN) neither
 * read (nothing comes out NaN) nor written. */
static void test_padded_rows(void)
{
    const int N = 5, K = 7, O = 13, ld = 16;
    const merak_kernels *k = merak_kernels_cpu();
    uint16_t x[5 * 7], w[13 * 7], dd[5 * 13], od[5 * 13], dxd[5 * 7], dxp[5 * 7];
    uint16_t dp[5 * 16], op[5 * 16], ld_d[5 * 13], ld_p[5 * 16];
    float dwd[13 * 7] = {0}, dwp[13 * 7] = {0}, sd[10], sp[10], scratch[2048];
    int32_t tg[5] = {3, -1, 12, 0, 7};
    for (int i = 0; i < N * K; i++)
        x[i] = merak_f32_to_bf16(sinf((float)i));
    for (int i = 0; i < O * K; i++)
        w[i] = merak_f32_to_bf16(cosf((float)i) / 4);
    for (int i = 0; i < N * ld; i++)
        dp[i] = op[i] = ld_p[i] = 0xffff;   /* NaN */
    for (int r = 0; r < N; r++)
        for (int c = 0; c < O; c++)
            dd[r * O + c] = dp[r * ld + c] = ld_d[r * O + c] = ld_p[r * ld + c] =
                merak_f32_to_bf16(sinf((float)(3 * r + 5 * c)) * 3);
    k->linear16_fwd(od, x, w, NULL, N, K, O, O, scratch);
    k->linear16_fwd(op, x, w, NULL, N, K, O, ld, scratch);
    k->linear16_bwd_x(dxd, dd, w, N, K, O, O, 0, scratch);
    k->linear16_bwd_x(dxp, dp, w, N, K, O, ld, 0, scratch);
    k->linear16_bwd_w(dwd, NULL, dd, x, N, K, O, O, scratch);
    k->linear16_bwd_w(dwp, NULL, dp, x, N, K, O, ld, scratch);
    k->crossentropy16_stats(sd, sd + N, ld_d, tg, N, O, O, 0, scratch);
    k->crossentropy16_stats(sp, sp + N, ld_p, tg, N, O, ld, 0, scratch);
    k->crossentropy16_bwd(ld_d, ld_d, sd, tg, N, O, O, 0, 0.2f, scratch);
    k->crossentropy16_bwd(ld_p, ld_p, sp, tg, N, O, ld, 0, 0.2f, scratch);
    int same = !memcmp(dxd, dxp, sizeof dxd) && !memcmp(dwd, dwp, sizeof dwd) && !memcmp(sd, sp, sizeof sd), pad = 1;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < ld; c++) {
            if (c < O)
                same &= op[r * ld + c] == od[r * O + c] && ld_p[r * ld + c] == ld_d[r * O + c];
            else
                pad &= op[r * ld + c] == 0xffff && dp[r * ld + c] == 0xffff && ld_p[r * ld + c] == 0xffff;
        }
    tap_ok(same && pad, "linear16 and crossentropy16 on rows %d apart give their dense results bit for bit (%d), "
           "the padding neither read nor written (%d)", ld, same, pad);
}

/* A stand-in tensor-parallel group for one process: a "sum" that doubles
 * (as if the peer held the same values), the same for both executors
 * below, which is all a bitwise comparison needs. */
static int twice(void *ctx, float *buf, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        buf[i] += buf[i];
    return 0;
}

/* Tensor parallelism's sums (the forward's after the row-parallel
 * layers, the backward's before the column-parallel ones' input
 * gradients, the vocabulary-parallel loss) run on the staged floats: a
 * tp = 2 shard gives the same bits in bf16 and float storage. */
static void test_tp_storage(void)
{
    merak_graph *g = build("tiny-gpt2", 2, 16), *sh = g ? merak_graph_shard(g, 2, 0, NULL, 0, err, sizeof err) : NULL;
    merak_exec_chunk whole = {0, -1, 1, 0};
    merak_exec_comm tp = {.allreduce = twice};
    merak_exec_opts o = {.chunks = &whole, .nchunks = 1, .kernels = merak_kernels_cpu(), .tp = &tp, .bf16 = 1,
                         .keep_grads = 1}, of = o;
    of.float_storage = 1;
    merak_exec *e[2] = {NULL, NULL};
    if (!sh || merak_exec_create(sh, &o, &e[0], err, sizeof err) < 0 || merak_exec_create(sh, &of, &e[1], err, sizeof err) < 0) {
        tap_ok(0, "tp shard executors: %s", err);
        merak_graph_destroy(sh);
        merak_graph_destroy(g);
        return;
    }
    double loss[2];
    for (int i = 0; i < 2; i++) {
        merak_init_params(sh, e[i], 42, NULL, 0);
        fill_tokens(sh, e[i], 256, 5);   /* ids of both shards of the vocabulary */
        loss[i] = step(e[i], 0);
    }
    size_t n, differ = 0, half = 0;
    const float *g0 = merak_exec_grads_flat(e[0], &n), *g1 = merak_exec_grads_flat(e[1], &n);
    for (int t = 0; t < sh->ntensors; t++) {
        const void *v = merak_exec_tensor(e[0], 0, t), *d = merak_exec_grad(e[0], 0, t);
        const float *vf = merak_exec_tensor(e[1], 0, t), *df = merak_exec_grad(e[1], 0, t);
        if (!v || !merak_exec_tensor_bf16(e[0], t))
            continue;
        half++;
        /* a TP_COPY sums its output's gradient where its backward reads
         * it: in place in float storage, in the staged copy in bf16
         * storage (the sum is the op's alone: nothing reads it after) */
        const int p = sh->tensors[t].producer;
        if (p >= 0 && merak_op_kind_of(&sh->ops[p])->sum == MERAK_SUM_BACKWARD)
            d = NULL;
        for (int64_t i = 0; i < merak_tensor_elems(&sh->tensors[t]); i++)
            differ += bits(merak_bf16_to_f32(((const uint16_t *)v)[i])) != bits(vf[i]) ||
                      (d && bits(merak_bf16_to_f32(((const uint16_t *)d)[i])) != bits(df[i]));
    }
    tap_ok(half > 10 && differ == 0 && loss[0] == loss[1] && memcmp(g0, g1, n * sizeof *g0) == 0,
           "tp = 2 shard: bf16 storage (%zu tensors) gives float storage's values, gradients, loss and weight "
           "gradients bit for bit (%zu differ)", half, differ);
    merak_exec_destroy(e[0]);
    merak_exec_destroy(e[1]);
    merak_graph_destroy(sh);
    merak_graph_destroy(g);
}

/* A backend without bf16 is refused by name. */
static void test_refused(void)
{
    merak_kernels nobf = *merak_kernels_cpu();
    nobf.round_bf16 = NULL;
    merak_graph *g = build("tiny-gpt2", 1, 8);
    merak_exec_chunk whole = {0, -1, 1, 0};
    merak_exec_opts o = {.chunks = &whole, .nchunks = 1, .kernels = &nobf, .bf16 = 1};
    merak_exec *e = NULL;
    tap_ok(g && merak_exec_create(g, &o, &e, err, sizeof err) < 0 && strstr(err, "has no bf16"),
           "a backend without round_bf16 is refused: %s", err);
    merak_graph_destroy(g);
}

/* The CUDA backend's plan (its table without a device, BF16 products):
 * in bf16 every op of GPT-2 124M and of LLaMA-2 7B reads and writes bf16
 * storage as it is, nothing staged (the memory merak-plan gives), but for
 * attention with a head cuDNN does not take (20 wide), or in a build
 * without cuDNN. */
static void test_cuda_plan(void)
{
#ifndef HAVE_CUDA
    tap_ok(1, "# SKIP a build without CUDA");
#else
#ifdef HAVE_CUDNN_ATTN
    const int cudnn = 1;
#else
    const int cudnn = 0;
#endif
    const merak_kernels *kt = merak_kernels_plan("cuda");
    kt->set_products(MERAK_PRODUCTS_BF16);
    static const char *const names[] = {"gpt2", "llama2-7b", "gpt2 of heads 20 wide"};
    for (int m = 0; m < 3; m++) {
        merak_model_config c;
        merak_model_preset(m == 1 ? "llama2-7b" : "gpt2", &c);
        if (m == 2)
            c.hidden = 640, c.n_head = c.n_kv_head = 32, c.ffn_hidden = 2560;
        merak_graph *g = merak_model_build(&c, 1, 128, err, sizeof err);
        merak_exec_chunk whole = {0, -1, 1, 0};
        merak_exec_opts o = {.chunks = &whole, .nchunks = 1, .kernels = kt, .bf16 = 1, .plan_only = 1};
        merak_exec *e = NULL;
        if (!g || merak_exec_create(g, &o, &e, err, sizeof err) < 0) {
            tap_ok(0, "the cuda plan of %s: %s", names[m], err);
            merak_graph_destroy(g);
            continue;
        }
        int nstaged = 0, wrong = 0;
        for (int i = 0; i < g->nops; i++) {
            const int attn = g->ops[i].type == MERAK_OP_ATTENTION;
            const int want = !attn || (cudnn && m != 2);
            nstaged += !merak_exec_op_native(e, i);
            wrong += merak_exec_op_native(e, i) != want;
        }
        tap_ok(wrong == 0, "the cuda plan of %s in bf16: %d of %d ops staged%s", names[m], nstaged, g->nops,
               m == 2 || !cudnn ? " (attention: cuDNN does not take it)" : "");
        merak_exec_destroy(e);
        merak_graph_destroy(g);
    }
    kt->set_products(MERAK_PRODUCTS_FP32);
#endif
}

int main(void)
{
    test_round();
    test_step("tiny-gpt2");
    test_step("tiny-llama");
    test_storage_runs("tiny-gpt2", 0);
    test_storage_runs("tiny-llama", 0);
    test_storage_runs("tiny-gpt2", 1);
    test_storage_runs("tiny-gpt2", 2);
    test_storage_runs("tiny-llama", 2);
    test_loss_early("tiny-gpt2");
    test_loss_early("tiny-llama");
    test_pair_storage();
    test_padded_rows();
    test_tp_storage();
    test_refused();
    test_cuda_plan();
    return tap_done();
}
