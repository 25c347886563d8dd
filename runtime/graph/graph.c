/*
 * graph.c - building the model graph: tensors, parameters, ops, shape
 * inference and the per-op cost model (FLOPs and bytes).  Each op kind's
 * builder is its shape rule; everything else about a kind is its entry in
 * the op table (ops.c).
 *
 * Every builder call validates its arguments and either appends exactly one
 * tensor (and op) or changes nothing and leaves a message in g->err.  The
 * first message stays: once a call has failed, every later building call
 * changes nothing and returns -1, so a builder can chain its calls without
 * checking each one and still learn which call went wrong (not the next one,
 * tripping over a -1 tensor id).
 */
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "graph.h"
#include "grow.h"
#include "mix64.h" /* merak_fnv1a */

/* Has a building call on g failed?  Then the graph is final. */
static int failed(const merak_graph *g) { return g->err[0] != 0; }

/* Records why a building call failed; an earlier failure's message wins. */
static int fail(merak_graph *g, const char *fmt, ...)
{
    if (!failed(g)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->err, sizeof g->err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

merak_graph *merak_graph_create(void)
{
    merak_graph *g = calloc(1, sizeof *g);
    if (g) {
        g->loss = -1;
        g->tp = 1;
    }
    return g;
}

void merak_graph_destroy(merak_graph *g)
{
    if (!g)
        return;
    free(g->tensors);
    free(g->ops);
    free(g->names);
    free(g);
}

const char *merak_graph_error(const merak_graph *g) { return g->err; }
int merak_graph_num_ops(const merak_graph *g) { return g->nops; }
int merak_graph_num_tensors(const merak_graph *g) { return g->ntensors; }
int merak_graph_num_params(const merak_graph *g) { return g->nparams; }

int64_t merak_graph_param_elems(const merak_graph *g)
{
    int64_t n = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].kind == MERAK_T_PARAM && g->tensors[i].tied_to < 0)
            n += merak_tensor_elems(&g->tensors[i]);
    return n;
}

double merak_graph_flops(const merak_graph *g)
{
    double f = 0;
    for (int i = 0; i < g->nops; i++)
        f += g->ops[i].flops;
    return f;
}

int merak_graph_find(const merak_graph *g, const char *name)
{
    for (int i = 0; i < g->ntensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return i;
    return -1;
}

int merak_graph_loss_vocab(const merak_graph *g)
{
    if (g->loss < 0)
        return -1;
    const merak_tensor *logits = &g->tensors[g->ops[g->tensors[g->loss].producer].in[0]];
    return (int)logits->shape[logits->ndim - 1];
}

int merak_graph_param_root(const merak_graph *g, int t)
{
    while (g->tensors[t].tied_to >= 0)
        t = g->tensors[t].tied_to;
    return t;
}

int merak_graph_own_params(const merak_graph *g, int *ids)
{
    int n = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].kind == MERAK_T_PARAM && merak_graph_param_root(g, t) == t)
            ids[n++] = t;
    return n;
}

int merak_op_reads(const merak_op *o, int t)
{
    for (int i = 0; i < o->nin; i++)
        if (o->in[i] == t)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ tensors */

static int valid_tensor(const merak_graph *g, int t)
{
    return t >= 0 && t < g->ntensors;
}

/* The slot of name in g's name table: its tensor's, or the empty one it
 * would take (the table is never full). */
static size_t name_slot(const merak_graph *g, const char *name)
{
    const size_t mask = g->names_cap - 1;
    size_t i = (size_t)merak_fnv1a(name, strlen(name)) & mask;
    while (g->names[i] && strcmp(g->tensors[g->names[i] - 1].name, name) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Tensor t (named already) into the name table, which doubles when half
 * full; 0, or -1 out of memory. */
static int name_add(merak_graph *g, int t)
{
    if (2 * ((size_t)t + 1) > g->names_cap) {
        int *old = g->names;
        const size_t old_cap = g->names_cap, cap = old_cap ? 2 * old_cap : 64;
        if (!(g->names = calloc(cap, sizeof *g->names))) {
            g->names = old;
            return -1;
        }
        g->names_cap = cap;
        for (size_t j = 0; j < old_cap; j++)
            if (old[j])
                g->names[name_slot(g, g->tensors[old[j] - 1].name)] = old[j];
        free(old);
    }
    g->names[name_slot(g, g->tensors[t].name)] = t + 1;
    return 0;
}

static int check_name(merak_graph *g, const char *name)
{
    if (!name || !*name)
        return fail(g, "tensor name is empty");
    if (strlen(name) >= MERAK_NAME_MAX)
        return fail(g, "tensor name '%.40s...' is longer than %d characters", name,
                    MERAK_NAME_MAX - 1);
    if (g->names_cap && g->names[name_slot(g, name)])
        return fail(g, "tensor name '%s' is used twice", name);
    return 0;
}

static int check_shape(merak_graph *g, const char *name, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > MERAK_MAX_DIMS)
        return fail(g, "%s: %d dimensions (expected 1 to %d)", name, ndim, MERAK_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0 || shape[i] > ((int64_t)1 << 40))
            return fail(g, "%s: dimension %d is %lld", name, i, (long long)shape[i]);
    return 0;
}

/* Appends a tensor; returns its id or -1 (out of memory). */
static int add_tensor(merak_graph *g, const char *name, merak_tensor_kind kind,
                      merak_dtype dtype, int ndim, const int64_t *shape)
{
    /* its elements must count in an int64_t, with room to spare for bytes */
    int64_t elems = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0 || elems > ((int64_t)1 << 60) / shape[i])
            return fail(g, "%s: more than 2^60 elements", name);
        elems *= shape[i];
    }
    if (g->ntensors == INT_MAX ||
        merak_grow((void **)&g->tensors, &g->cap_tensors, (size_t)g->ntensors + 1, sizeof *g->tensors) < 0)
        return fail(g, "out of memory");
    merak_tensor *t = &g->tensors[g->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->full, shape, (size_t)ndim * sizeof *shape);
    t->shard_dim = -1;
    t->producer = -1;
    t->tied_to = -1;
    t->param_index = -1;
    if (name_add(g, g->ntensors) < 0)
        return fail(g, "out of memory");
    return g->ntensors++;
}

int merak_graph_input(merak_graph *g, const char *name, merak_dtype dtype, int ndim,
                      const int64_t *shape)
{
    if (failed(g) || check_name(g, name) < 0 || check_shape(g, name, ndim, shape) < 0)
        return -1;
    return add_tensor(g, name, MERAK_T_INPUT, dtype, ndim, shape);
}

int merak_graph_param(merak_graph *g, const char *name, int ndim, const int64_t *shape,
                      merak_param_init init, merak_tp_attr tp, merak_hf_layout layout)
{
    if (failed(g) || check_name(g, name) < 0 || check_shape(g, name, ndim, shape) < 0)
        return -1;
    if (init.kind == MERAK_INIT_NORMAL && !(init.std > 0 && isfinite(init.std)))
        return fail(g, "%s: init std %g is not positive", name, init.std);
    if (layout == MERAK_HF_TRANSPOSED && ndim != 2)
        return fail(g, "%s: only 2-d parameters can be stored transposed", name);
    int t = add_tensor(g, name, MERAK_T_PARAM, MERAK_F32, ndim, shape);
    if (t < 0)
        return -1;
    g->tensors[t].init = init;
    g->tensors[t].tp = tp;
    g->tensors[t].layout = layout;
    g->tensors[t].param_index = g->nparams++;
    return t;
}

int merak_graph_tie(merak_graph *g, int alias, int param)
{
    if (failed(g))
        return -1;
    if (!valid_tensor(g, alias) || !valid_tensor(g, param) || alias == param)
        return fail(g, "tie: bad tensor ids %d, %d", alias, param);
    merak_tensor *a = &g->tensors[alias], *p = &g->tensors[param];
    if (a->kind != MERAK_T_PARAM || p->kind != MERAK_T_PARAM)
        return fail(g, "tie: %s and %s must both be parameters", a->name, p->name);
    if (a->tied_to >= 0)
        return fail(g, "tie: %s is already tied", a->name);
    if (a->ndim != p->ndim || memcmp(a->shape, p->shape, (size_t)a->ndim * sizeof *a->shape))
        return fail(g, "tie: %s and %s have different shapes", a->name, p->name);
    int root = merak_graph_param_root(g, param);
    if (root == alias)
        return fail(g, "tie: %s would be tied to itself", a->name);
    /* Renumber the distinct parameters after the alias drops out. */
    int gone = a->param_index;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].param_index > gone)
            g->tensors[i].param_index--;
    a->param_index = -1;
    a->tied_to = root;
    g->nparams--;
    return 0;
}

/* ------------------------------------------------------------------ ops */

/* Checks that t is a tensor of the given kind set and dtype. */
static int want(merak_graph *g, const char *op, int t, merak_dtype dtype, int allow_param)
{
    if (!valid_tensor(g, t))
        return fail(g, "%s: tensor id %d does not exist", op, t);
    const merak_tensor *x = &g->tensors[t];
    if (x->dtype != dtype)
        return fail(g, "%s: %s has the wrong dtype", op, x->name);
    if (!allow_param && x->kind == MERAK_T_PARAM)
        return fail(g, "%s: %s is a parameter, expected an activation", op, x->name);
    if (allow_param == 2 && x->kind != MERAK_T_PARAM)
        return fail(g, "%s: %s is not a parameter", op, x->name);
    return 0;
}

static int want_param(merak_graph *g, const char *op, int t, int ndim)
{
    if (want(g, op, t, MERAK_F32, 2) < 0)
        return -1;
    if (g->tensors[t].ndim != ndim)
        return fail(g, "%s: parameter %s has %d dimensions (expected %d)", op,
                    g->tensors[t].name, g->tensors[t].ndim, ndim);
    return 0;
}

static int64_t last_dim(const merak_graph *g, int t)
{
    return g->tensors[t].shape[g->tensors[t].ndim - 1];
}

static int same_shape(const merak_graph *g, int a, int b)
{
    const merak_tensor *x = &g->tensors[a], *y = &g->tensors[b];
    return x->ndim == y->ndim &&
           !memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape);
}

/* Appends op o producing a new activation of the given shape. */
static int add_op(merak_graph *g, merak_op *o, merak_dtype dtype, int ndim,
                  const int64_t *shape)
{
    char name[MERAK_NAME_MAX];
    int64_t dims[MERAK_MAX_DIMS];
    /* Callers often pass an input's shape, which lives in g->tensors and
     * moves if add_tensor grows the array: copy it first. */
    memcpy(dims, shape, (size_t)ndim * sizeof *dims);
    shape = dims;
    snprintf(name, sizeof name, "%s.%d", merak_op_name(o->type), g->nops);
    if (g->nops == INT_MAX || merak_grow((void **)&g->ops, &g->cap_ops, (size_t)g->nops + 1, sizeof *g->ops) < 0)
        return fail(g, "out of memory");
    int t = add_tensor(g, name, MERAK_T_ACT, dtype, ndim, shape);
    if (t < 0)
        return -1;
    g->tensors[t].producer = g->nops;
    o->out = t;
    /* Bytes: every input read once and the output written once. */
    double bytes = 4.0 * (double)merak_tensor_elems(&g->tensors[t]);
    for (int i = 0; i < o->nin; i++)
        if (o->in[i] >= 0)
            bytes += 4.0 * (double)merak_tensor_elems(&g->tensors[o->in[i]]);
    o->bytes = bytes;
    o->src = g->nops;
    g->ops[g->nops++] = *o;
    return t;
}

static merak_op new_op(merak_op_type type, int nin, const int *in)
{
    merak_op o;
    memset(&o, 0, sizeof o);
    o.type = type;
    o.nin = nin;
    for (int i = 0; i < MERAK_OP_MAX_IN; i++)
        o.in[i] = i < nin ? in[i] : -1;
    return o;
}

int merak_op_embedding(merak_graph *g, int ids, int wte)
{
    if (failed(g) || want(g, "embedding", ids, MERAK_I32, 0) < 0 ||
        want_param(g, "embedding", wte, 2) < 0)
        return -1;
    const merak_tensor *x = &g->tensors[ids];
    if (x->ndim != 2)
        return fail(g, "embedding: ids %s must be (B,T)", x->name);
    int64_t shape[3] = {x->shape[0], x->shape[1], g->tensors[wte].shape[1]};
    merak_op o = new_op(MERAK_OP_EMBEDDING, 2, (int[]){ids, wte});
    return add_op(g, &o, MERAK_F32, 3, shape);
}

int merak_op_pos_embedding(merak_graph *g, int x, int wpe)
{
    if (failed(g) || want(g, "pos_embedding", x, MERAK_F32, 0) < 0 ||
        want_param(g, "pos_embedding", wpe, 2) < 0)
        return -1;
    const merak_tensor *t = &g->tensors[x], *p = &g->tensors[wpe];
    if (t->ndim != 3 || p->shape[1] != t->shape[2])
        return fail(g, "pos_embedding: %s and %s do not match", t->name, p->name);
    if (t->shape[1] > p->shape[0])
        return fail(g, "sequence length %lld is beyond the model's %lld positions",
                    (long long)t->shape[1], (long long)p->shape[0]);
    merak_op o = new_op(MERAK_OP_POS_EMBEDDING, 2, (int[]){x, wpe});
    o.flops = (double)merak_tensor_elems(t);
    return add_op(g, &o, MERAK_F32, 3, t->shape);
}

static int norm_op(merak_graph *g, merak_op_type type, int x, int w, int b, float eps)
{
    const char *name = merak_op_name(type);
    if (failed(g) || want(g, name, x, MERAK_F32, 0) < 0 || want_param(g, name, w, 1) < 0)
        return -1;
    if (b >= 0 && want_param(g, name, b, 1) < 0)
        return -1;
    int64_t C = last_dim(g, x);
    if (g->tensors[w].shape[0] != C || (b >= 0 && g->tensors[b].shape[0] != C))
        return fail(g, "%s: parameters of %s do not have %lld elements", name,
                    g->tensors[x].name, (long long)C);
    if (!(eps > 0))
        return fail(g, "%s: eps must be positive", name);
    merak_op o = new_op(type, b >= 0 ? 3 : 2, (int[]){x, w, b});
    o.eps = eps;
    o.flops = 8.0 * (double)merak_tensor_elems(&g->tensors[x]);
    return add_op(g, &o, MERAK_F32, g->tensors[x].ndim, g->tensors[x].shape);
}

int merak_op_layernorm(merak_graph *g, int x, int w, int b, float eps)
{
    return norm_op(g, MERAK_OP_LAYERNORM, x, w, b, eps);
}

int merak_op_rmsnorm(merak_graph *g, int x, int w, float eps)
{
    return norm_op(g, MERAK_OP_RMSNORM, x, w, -1, eps);
}

int merak_op_linear(merak_graph *g, int x, int w, int b)
{
    if (failed(g) || want(g, "linear", x, MERAK_F32, 0) < 0 || want_param(g, "linear", w, 2) < 0)
        return -1;
    if (b >= 0 && want_param(g, "linear", b, 1) < 0)
        return -1;
    const merak_tensor *t = &g->tensors[x], *W = &g->tensors[w];
    int64_t K = last_dim(g, x), O = W->shape[0];
    if (W->shape[1] != K)
        return fail(g, "linear: %s is (%lld,%lld) but its input %s has %lld features",
                    W->name, (long long)O, (long long)W->shape[1], t->name, (long long)K);
    if (b >= 0 && g->tensors[b].shape[0] != O)
        return fail(g, "linear: bias %s does not have %lld elements", g->tensors[b].name,
                    (long long)O);
    int64_t shape[MERAK_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[t->ndim - 1] = O;
    merak_op o = new_op(MERAK_OP_LINEAR, b >= 0 ? 3 : 2, (int[]){x, w, b});
    o.flops = 2.0 * (double)(merak_tensor_elems(t) / K) * (double)K * (double)O;
    return add_op(g, &o, MERAK_F32, t->ndim, shape);
}

/* A rope the attention of hd-wide heads over T positions can use, with
 * DYNAMIC resolved as the Hugging Face library resolves it for a sequence
 * of T tokens: past original_max_positions, theta grows to
 *   theta * (factor * T / original - (factor - 1))^(hd / (hd - 2))
 * (in double, as Python computes it), else it stays.  0, or -1 naming
 * what is wrong. */
static int rope_resolve(merak_graph *g, const merak_rope *in, int64_t hd, int64_t T, merak_rope *out)
{
    *out = in ? *in : (merak_rope){0};
    if (!(out->theta >= 0) || !isfinite(out->theta))
        return fail(g, "attention: rope theta %g must be 0 (none) or positive", (double)out->theta);
    if (out->theta == 0)
        return 0;
    if (hd % 2)
        return fail(g, "attention: rotary embeddings need an even head size (got %lld)", (long long)hd);
    switch (out->type) {
    case MERAK_ROPE_DEFAULT: return 0;
    case MERAK_ROPE_LINEAR:
    case MERAK_ROPE_DYNAMIC:
    case MERAK_ROPE_LLAMA3: break;
    default: return fail(g, "attention: unknown rope scaling type %d", (int)out->type);
    }
    if (!(out->factor >= 1) || !isfinite(out->factor))
        return fail(g, "attention: rope scaling factor %g must be at least 1", (double)out->factor);
    if (out->type != MERAK_ROPE_LINEAR && out->original_max_positions <= 0)
        return fail(g, "attention: rope scaling needs the original positions (got %d)",
                    out->original_max_positions);
    if (out->type == MERAK_ROPE_LLAMA3 &&
        !(out->low_freq_factor > 0 && out->high_freq_factor > out->low_freq_factor &&
          isfinite(out->high_freq_factor)))
        return fail(g, "attention: llama3 rope scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)",
                    (double)out->low_freq_factor, (double)out->high_freq_factor);
    if (out->type == MERAK_ROPE_DYNAMIC) {
        if (T > out->original_max_positions) {
            if (hd <= 2)
                return fail(g, "attention: dynamic rope scaling needs a head size above 2 (got %lld)",
                            (long long)hd);
            double f = out->factor, grow = f * (double)T / out->original_max_positions - (f - 1);
            double theta = out->theta * pow(grow, (double)hd / (double)(hd - 2));
            if (!(theta < 3.0e38))
                return fail(g, "attention: dynamic rope scaling over %lld positions overflows theta",
                            (long long)T);
            out->theta = (float)theta;
        }
        out->type = MERAK_ROPE_DEFAULT;
    }
    return 0;
}

int merak_op_attention(merak_graph *g, int q, int k, int v, int n_head, int n_kv_head,
                       float rope_theta)
{
    return merak_op_attention_rope(g, q, k, v, n_head, n_kv_head, &(merak_rope){.theta = rope_theta});
}

int merak_op_attention_rope(merak_graph *g, int q, int k, int v, int n_head, int n_kv_head,
                            const merak_rope *rope)
{
    int fused = (k < 0 && v < 0);
    if (failed(g) || want(g, "attention", q, MERAK_F32, 0) < 0)
        return -1;
    if (!fused && (want(g, "attention", k, MERAK_F32, 0) < 0 ||
                   want(g, "attention", v, MERAK_F32, 0) < 0))
        return -1;
    if (n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head)
        return fail(g, "attention: %d heads are not a multiple of %d kv heads", n_head,
                    n_kv_head);
    const merak_tensor *Q = &g->tensors[q];
    if (Q->ndim != 3)
        return fail(g, "attention: %s must be (B,T,features)", Q->name);
    int64_t B = Q->shape[0], T = Q->shape[1], hd;
    if (fused) {
        int64_t width = Q->shape[2], parts = n_head + 2 * (int64_t)n_kv_head;
        if (width % parts)
            return fail(g, "attention: fused qkv width %lld is not divisible by %lld heads",
                        (long long)width, (long long)parts);
        hd = width / parts;
    } else {
        if (Q->shape[2] % n_head)
            return fail(g, "attention: %lld query features are not divisible by %d heads",
                        (long long)Q->shape[2], n_head);
        hd = Q->shape[2] / n_head;
        const int64_t kv_shape[3] = {B, T, hd * n_kv_head};
        for (int i = 0; i < 2; i++) {
            const merak_tensor *X = &g->tensors[i ? v : k];
            if (X->ndim != 3 || memcmp(X->shape, kv_shape, sizeof kv_shape))
                return fail(g, "attention: %s must be (%lld,%lld,%lld)", X->name,
                            (long long)B, (long long)T, (long long)kv_shape[2]);
        }
    }
    merak_rope r;
    if (rope_resolve(g, rope, hd, T, &r) < 0)
        return -1;
    int64_t shape[3] = {B, T, hd * n_head};
    merak_op o = fused ? new_op(MERAK_OP_ATTENTION, 1, (int[]){q})
                       : new_op(MERAK_OP_ATTENTION, 3, (int[]){q, k, v});
    o.n_head = n_head;
    o.n_kv_head = n_kv_head;
    o.head_dim = (int)hd;
    o.rope = r;
    o.fused_qkv = fused;
    /* QK^T and PV over the causal half, plus the softmax. */
    o.flops = (double)B * n_head * ((double)T * (T + 1) / 2) * (4.0 * (double)hd + 5.0);
    return add_op(g, &o, MERAK_F32, 3, shape);
}

static int unary_op(merak_graph *g, merak_op_type type, int x, double flops_per_elem)
{
    if (failed(g) || want(g, merak_op_name(type), x, MERAK_F32, 0) < 0)
        return -1;
    merak_op o = new_op(type, 1, (int[]){x});
    o.flops = flops_per_elem * (double)merak_tensor_elems(&g->tensors[x]);
    return add_op(g, &o, MERAK_F32, g->tensors[x].ndim, g->tensors[x].shape);
}

static int binary_op(merak_graph *g, merak_op_type type, int a, int b, double flops_per_elem)
{
    const char *name = merak_op_name(type);
    if (failed(g) || want(g, name, a, MERAK_F32, 0) < 0 || want(g, name, b, MERAK_F32, 0) < 0)
        return -1;
    if (!same_shape(g, a, b))
        return fail(g, "%s: %s and %s have different shapes", name, g->tensors[a].name,
                    g->tensors[b].name);
    merak_op o = new_op(type, 2, (int[]){a, b});
    o.flops = flops_per_elem * (double)merak_tensor_elems(&g->tensors[a]);
    return add_op(g, &o, MERAK_F32, g->tensors[a].ndim, g->tensors[a].shape);
}

int merak_op_gelu(merak_graph *g, int x) { return unary_op(g, MERAK_OP_GELU, x, 8); }
int merak_op_swiglu(merak_graph *g, int gate, int up)
{
    return binary_op(g, MERAK_OP_SWIGLU, gate, up, 6);
}
int merak_op_add(merak_graph *g, int a, int b) { return binary_op(g, MERAK_OP_ADD, a, b, 1); }

int merak_op_dropout(merak_graph *g, int x, float p)
{
    if (failed(g))
        return -1;
    if (!(p >= 0 && p < 1))
        return fail(g, "dropout: probability %g is not in [0,1)", p);
    int t = unary_op(g, MERAK_OP_DROPOUT, x, 2);
    if (t >= 0)
        g->ops[g->nops - 1].p = p;
    return t;
}

int merak_op_cross_entropy(merak_graph *g, int logits, int targets)
{
    if (failed(g) || want(g, "cross_entropy", logits, MERAK_F32, 0) < 0 ||
        want(g, "cross_entropy", targets, MERAK_I32, 0) < 0)
        return -1;
    const merak_tensor *L = &g->tensors[logits], *Y = &g->tensors[targets];
    if (L->ndim != Y->ndim + 1 || memcmp(L->shape, Y->shape, (size_t)Y->ndim * sizeof *Y->shape))
        return fail(g, "cross_entropy: logits %s and targets %s do not match", L->name,
                    Y->name);
    if (g->loss >= 0)
        return fail(g, "cross_entropy: the graph already has a loss");
    merak_op o = new_op(MERAK_OP_CROSS_ENTROPY, 2, (int[]){logits, targets});
    o.flops = 5.0 * (double)merak_tensor_elems(L);
    int t = add_op(g, &o, MERAK_F32, 1, (int64_t[]){1});
    if (t >= 0)
        g->loss = t;
    return t;
}

int merak_op_tp_copy(merak_graph *g, int x)
{
    return unary_op(g, MERAK_OP_TP_COPY, x, 0);
}

int merak_op_tp_reduce(merak_graph *g, int x, int bias)
{
    if (failed(g) || want(g, "tp_reduce", x, MERAK_F32, 0) < 0)
        return -1;
    if (bias >= 0 && (want_param(g, "tp_reduce", bias, 1) < 0 ||
                      g->tensors[bias].shape[0] != last_dim(g, x)))
        return fail(g, "tp_reduce: bias does not match %s", g->tensors[x].name);
    merak_op o = new_op(MERAK_OP_TP_REDUCE, bias >= 0 ? 2 : 1, (int[]){x, bias});
    o.flops = bias >= 0 ? (double)merak_tensor_elems(&g->tensors[x]) : 0;
    return add_op(g, &o, MERAK_F32, g->tensors[x].ndim, g->tensors[x].shape);
}

/* The shape rule of an op kind is its builder: op o (of another graph)
 * added to g over the inputs in (ids in g), with o's attributes. */
int merak_graph_readd(merak_graph *g, const merak_op *o, const int *in)
{
    switch (o->type) {
    case MERAK_OP_EMBEDDING: return merak_op_embedding(g, in[0], in[1]);
    case MERAK_OP_POS_EMBEDDING: return merak_op_pos_embedding(g, in[0], in[1]);
    case MERAK_OP_LAYERNORM: return merak_op_layernorm(g, in[0], in[1], in[2], o->eps);
    case MERAK_OP_RMSNORM: return merak_op_rmsnorm(g, in[0], in[1], o->eps);
    case MERAK_OP_LINEAR: return merak_op_linear(g, in[0], in[1], in[2]);
    case MERAK_OP_ATTENTION:
        return merak_op_attention_rope(g, in[0], in[1], in[2], o->n_head, o->n_kv_head, &o->rope);
    case MERAK_OP_GELU: return merak_op_gelu(g, in[0]);
    case MERAK_OP_SWIGLU: return merak_op_swiglu(g, in[0], in[1]);
    case MERAK_OP_ADD: return merak_op_add(g, in[0], in[1]);
    case MERAK_OP_DROPOUT: return merak_op_dropout(g, in[0], o->p);
    case MERAK_OP_CROSS_ENTROPY: return merak_op_cross_entropy(g, in[0], in[1]);
    case MERAK_OP_TP_COPY: return merak_op_tp_copy(g, in[0]);
    case MERAK_OP_TP_REDUCE: return merak_op_tp_reduce(g, in[0], in[1]);
    default: return fail(g, "op kind %d is not one this library builds", (int)o->type);
    }
}

/* ------------------------------------------------------------------ tensor-parallel rules */

int merak_graph_set_tp(merak_graph *g, const char *pattern, merak_tp_attr attr)
{
    if (failed(g))
        return -1;
    if (attr < MERAK_TP_REPLICATED || attr > MERAK_TP_VOCAB)
        return fail(g, "tensor-parallel rule '%s': unknown attribute %d", pattern, (int)attr);
    int n = 0;
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].kind == MERAK_T_PARAM && fnmatch(pattern, g->tensors[i].name, 0) == 0) {
            g->tensors[i].tp = attr;
            n++;
        }
    return n;
}

int merak_tp_attr_parse(const char *s, merak_tp_attr *attr)
{
    static const char *const names[] = {"replicated", "column", "row", "vocab"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *attr = (merak_tp_attr)i;
            return 0;
        }
    return -1;
}

/* Reads one line of f (its newline dropped) into line (cap bytes, NUL
 * terminated): its length, or -1 at the end of the file, -2 if it is
 * longer than cap - 2 bytes, -3 if it holds a NUL byte. */
static long rules_line(FILE *f, char *line, size_t cap)
{
    size_t n = 0;
    int c, nul = 0;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (n + 2 > cap)
            return -2;
        nul |= c == 0;
        line[n++] = (char)c;
    }
    line[n] = 0;
    if (c == EOF && n == 0)
        return -1;
    return nul ? -3 : (long)n;
}

int merak_tp_rules_read(const char *path, merak_tp_rule **out, int *nout, char *err,
                        size_t errlen)
{
    *out = NULL;
    *nout = 0;
    char why[512];
    FILE *f = merak_file_fopen(path, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "%s (the tensor-parallel rules file)", why);
        return -1;
    }
    char line[512];
    int lineno = 0, n = 0, rc = 0;
    size_t cap = 0;
    merak_tp_rule *rules = NULL;
    long len;
    while (rc == 0 && (len = rules_line(f, line, sizeof line)) != -1) {
        lineno++;
        if (len < 0) {
            if (len == -2)
                snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 2);
            else
                snprintf(err, errlen, "%s:%d: a NUL byte (not a text file?)", path, lineno);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char pat[MERAK_NAME_MAX], kind[32], extra[2];
        int k = sscanf(line, "%127s %31s %1s", pat, kind, extra);
        if (k <= 0)
            continue;
        merak_tp_attr attr;
        if (k != 2 || strlen(pat) >= sizeof pat - 1) {
            snprintf(err, errlen, "%s:%d: expected 'PATTERN column|row|vocab|replicated'", path, lineno);
            rc = -1;
        } else if (merak_tp_attr_parse(kind, &attr) < 0) {
            snprintf(err, errlen, "%s:%d: unknown kind '%s' (column, row, vocab, replicated)", path,
                     lineno, kind);
            rc = -1;
        } else {
            if (merak_grow((void **)&rules, &cap, (size_t)n + 1, sizeof *rules) < 0) {
                snprintf(err, errlen, "%s: out of memory", path);
                rc = -1;
                break;
            }
            snprintf(rules[n].pattern, sizeof rules[n].pattern, "%s", pat);
            rules[n].attr = attr;
            rules[n].line = lineno;
            n++;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    if (rc == 0 && n == 0) {
        snprintf(err, errlen, "%s: no rules", path);
        rc = -1;
    }
    fclose(f);
    if (rc < 0) {
        free(rules);
        return -1;
    }
    *out = rules;
    *nout = n;
    return 0;
}

int merak_tp_rules_check(const merak_graph *g, const merak_tp_rule *rules, int n,
                         const char *path, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        int hit = 0;
        for (int t = 0; t < g->ntensors && !hit; t++)
            hit = g->tensors[t].kind == MERAK_T_PARAM && fnmatch(rules[i].pattern, g->tensors[t].name, 0) == 0;
        if (!hit) {
            snprintf(err, errlen, "%s:%d: pattern '%s' matches no parameter", path, rules[i].line,
                     rules[i].pattern);
            return -1;
        }
    }
    return 0;
}

merak_tp_attr merak_tp_rules_attr(const merak_tensor *t, const merak_tp_rule *rules, int n)
{
    merak_tp_attr a = t->tp;
    for (int i = 0; i < n; i++)
        if (fnmatch(rules[i].pattern, t->name, 0) == 0)
            a = rules[i].attr;
    return a;
}

int merak_tp_rules_load(const merak_graph *g, const char *path, merak_tp_rule **rules, int *n,
                        char *err, size_t errlen)
{
    if (merak_tp_rules_read(path, rules, n, err, errlen) < 0)
        return -1;
    if (merak_tp_rules_check(g, *rules, *n, path, err, errlen) < 0) {
        free(*rules);
        *rules = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

int merak_graph_load_tp_rules(merak_graph *g, const char *path, char *err, size_t errlen)
{
    if (failed(g)) {
        snprintf(err, errlen, "%s", g->err);
        return -1;
    }
    merak_tp_rule *rules;
    int n;
    if (merak_tp_rules_load(g, path, &rules, &n, err, errlen) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        merak_graph_set_tp(g, rules[i].pattern, rules[i].attr);
    free(rules);
    return 0;
}

/* ------------------------------------------------------------------ printing */

static int shape_str(const merak_tensor *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, "(");
    for (int i = 0; i < t->ndim; i++)
        n += snprintf(buf + n, len > (size_t)n ? len - (size_t)n : 0, "%s%lld", i ? "," : "",
                      (long long)t->shape[i]);
    n += snprintf(buf + n, len > (size_t)n ? len - (size_t)n : 0, ")");
    return n;
}

int merak_graph_print(const merak_graph *g, char *buf, size_t len)
{
    size_t n = 0;
    for (int i = 0; i < g->nops; i++) {
        const merak_op *o = &g->ops[i];
        char s[64];
        shape_str(&g->tensors[o->out], s, sizeof s);
        n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0,
                              "%4d %-14s %-18s", i, merak_op_name(o->type), s);
        for (int j = 0; j < o->nin; j++)
            if (o->in[j] >= 0)
                n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, " %s",
                                      g->tensors[o->in[j]].name);
        n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, "\n");
    }
    return (int)n;
}
