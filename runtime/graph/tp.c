/*
 * tp.c - tensor parallelism as a graph pass.
 *
 * merak_graph_shard walks the graph once, in op order, and builds the graph
 * one rank of the tp group runs.  Every activation is either whole (the
 * same on every rank) or split along its last dimension into the ranges of
 * the whole width this rank holds.  The parameters' tp attributes (set by
 * rules, see models.c) decide where activations change state:
 *
 *   column linear  whole -> split: TP_COPY before it (sums the input's
 *                  gradient over the group), weight and bias rows split;
 *   row linear     split -> whole: weight columns split like its input,
 *                  TP_REDUCE after it (sums the partial outputs, then adds
 *                  the bias, which stays whole);
 *   vocab table    embedding: rows split, TP_REDUCE after the lookup;
 *                  LM head: split like a column linear, and the
 *                  cross-entropy combines the shards' statistics;
 *   attention      split in, split out, with heads divided by tp;
 *   elementwise    keep their input's state (both inputs must agree).
 *
 * A column linear whose output is a fused q|k|v attention input is split in
 * three ranges, so every rank holds whole heads of q, k and v (Hugging Face
 * GPT-2 weights then load by plain slicing).  Anything else that would need
 * a split tensor whole (norms, positions, residual adds with a whole tensor)
 * is refused, naming the op and the parameter.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "ops.h"

/* How an activation of the whole graph is held on this rank. */
typedef struct tstate {
    int split;                              /* 0: whole */
    int nseg;
    int64_t start[MERAK_TP_MAX_SEGS], len[MERAK_TP_MAX_SEGS];
} tstate;

typedef struct pass {
    const merak_graph *g;
    merak_graph *l;
    int tp, rank;
    int *map;          /* [g->ntensors] local tensor id, or -1 */
    int *copy_of;      /* [g->ntensors] local TP_COPY output of a whole tensor, or -1 */
    tstate *st;        /* [g->ntensors] */
    merak_tp_attr *attr;  /* [g->ntensors] parameters' attributes, rules applied */
    char *err;
    size_t errlen;
} pass;

static int failf(pass *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "1, 2, 4" : the tp degrees that divide n, for messages. */
static const char *divisors(int64_t n, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (int64_t d = 1; d <= n && d <= 1024 && k < len; d++)
        if (n % d == 0)
            k += (size_t)snprintf(buf + k, len - k, "%s%lld", k ? ", " : "", (long long)d);
    return buf;
}

/* This rank's share of n split evenly (n % tp == 0 checked by the caller)
 * or, for vocabularies, as evenly as possible. */
static void share(const pass *p, int64_t n, int64_t *start, int64_t *len)
{
    *start = n * p->rank / p->tp;
    *len = n * (p->rank + 1) / p->tp - *start;
}

static int is_split(const tstate *s) { return s->split; }

static int same_state(const tstate *a, const tstate *b)
{
    if (a->split != b->split)
        return 0;
    if (!a->split)
        return 1;
    if (a->nseg != b->nseg)
        return 0;
    for (int i = 0; i < a->nseg; i++)
        if (a->start[i] != b->start[i] || a->len[i] != b->len[i])
            return 0;
    return 1;
}

/* The local copy of parameter t (ties followed), split along dim as `s`
 * says (s NULL or whole: not split).  A parameter used twice must be split
 * the same way both times. */
static int param(pass *p, int t, int dim, const tstate *s)
{
    const merak_graph *g = p->g;
    int root = merak_graph_param_root(g, t);
    const merak_tensor *w = &g->tensors[root];
    int split = s && s->split;
    if (p->map[root] >= 0) {
        const merak_tensor *lw = &p->l->tensors[p->map[root]];
        int ok = split ? lw->shard_dim == dim && lw->nseg == s->nseg : lw->shard_dim < 0;
        for (int i = 0; ok && split && i < s->nseg; i++)
            ok = lw->seg_start[i] == s->start[i] && lw->seg_len[i] == s->len[i];
        if (!ok)
            return failf(p, "tp=%d: parameter %s is used by two ops that split it differently; "
                         "mark it replicated or untie it", p->tp, w->name);
        return p->map[root];
    }
    int64_t shape[MERAK_MAX_DIMS];
    memcpy(shape, w->shape, sizeof shape);
    if (split) {
        shape[dim] = 0;
        for (int i = 0; i < s->nseg; i++)
            shape[dim] += s->len[i];
    }
    int lt = merak_graph_param(p->l, w->name, w->ndim, shape, w->init, p->attr[root], w->layout);
    if (lt < 0)
        return failf(p, "tp=%d: %s", p->tp, merak_graph_error(p->l));
    merak_tensor *lw = &p->l->tensors[lt];
    memcpy(lw->full, w->shape, sizeof lw->full);
    if (split) {
        lw->shard_dim = dim;
        lw->nseg = s->nseg;
        for (int i = 0; i < s->nseg; i++)
            lw->seg_start[i] = s->start[i], lw->seg_len[i] = s->len[i];
    }
    p->map[root] = lt;
    return lt;
}

/* Local id of activation or input t, for an op that wants it whole. */
static int whole(pass *p, int op, int t)
{
    if (t < 0)
        return -1;
    if (is_split(&p->st[t]))
        return failf(p, "tp=%d: op %d (%s) needs %s whole, but tensor parallelism splits it; "
                     "check the tensor-parallel rules of the parameters before it",
                     p->tp, op, merak_op_name(p->g->ops[op].type), p->g->tensors[t].name);
    return p->map[t];
}

/* A whole tensor as the input of a column-parallel op: its TP_COPY. */
static int copied(pass *p, int op, int t)
{
    if (whole(p, op, t) < 0)
        return -1;
    if (p->copy_of[t] < 0) {
        int c = merak_op_tp_copy(p->l, p->map[t]);
        if (c < 0)
            return failf(p, "tp=%d: %s", p->tp, merak_graph_error(p->l));
        p->l->ops[p->l->nops - 1].src = op;
        p->copy_of[t] = c;
    }
    return p->copy_of[t];
}

/* Parameters may be split only where an op knows how. */
static int check_whole_param(pass *p, int op, int t)
{
    if (t < 0)
        return 0;
    int root = merak_graph_param_root(p->g, t);
    const merak_tensor *w = &p->g->tensors[root];
    if (p->attr[root] != MERAK_TP_REPLICATED)
        return failf(p, "tp=%d: parameter %s is marked for splitting, but op %d (%s) cannot "
                     "split it; only linear weights and embedding tables can be split",
                     p->tp, w->name, op, merak_op_name(p->g->ops[op].type));
    return 0;
}

/* Does a fused attention op read activation t? */
static const merak_op *fused_reader(const merak_graph *g, int t)
{
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].type == MERAK_OP_ATTENTION && g->ops[i].fused_qkv && g->ops[i].in[0] == t)
            return &g->ops[i];
    return NULL;
}

static int heads_divide(pass *p, int op, const merak_op *a)
{
    char buf[128];
    if (a->n_head % p->tp)
        return failf(p, "tp=%d does not divide the %d attention heads (op %d); use tp in {%s}",
                     p->tp, a->n_head, op, divisors(a->n_head, buf, sizeof buf));
    if (a->n_kv_head % p->tp)
        return failf(p, "tp=%d does not divide the %d key/value heads (op %d); use tp in {%s}",
                     p->tp, a->n_kv_head, op, divisors(a->n_kv_head, buf, sizeof buf));
    return 0;
}

/* Records the state of global tensor t's local version lt. */
static int set_out(pass *p, int t, int lt, const tstate *s)
{
    if (lt < 0)
        return failf(p, "tp=%d: %s", p->tp, merak_graph_error(p->l));
    p->map[t] = lt;
    if (s)
        p->st[t] = *s;
    return 0;
}

static int last_op_src(pass *p, int op, int lt)
{
    if (lt >= 0)
        p->l->ops[p->l->nops - 1].src = op;
    return lt;
}

static int linear(pass *p, int i)
{
    const merak_graph *g = p->g;
    const merak_op *o = &g->ops[i];
    int x = o->in[0], w = o->in[1], b = o->nin > 2 ? o->in[2] : -1;
    const merak_tensor *W = &g->tensors[merak_graph_param_root(g, w)];
    merak_tp_attr attr = p->attr[merak_graph_param_root(g, w)];
    int64_t O = W->shape[0];
    tstate s = {0};
    char buf[128];
    switch (attr) {
    case MERAK_TP_COLUMN:
    case MERAK_TP_VOCAB: {
        int lx = copied(p, i, x);
        if (lx < 0)
            return -1;
        s.split = 1;
        const merak_op *a = attr == MERAK_TP_COLUMN ? fused_reader(g, o->out) : NULL;
        if (a) {  /* q | k | v, each split by heads */
            if (heads_divide(p, i, a) < 0)
                return -1;
            int64_t hd = a->head_dim, q = (int64_t)a->n_head * hd, kv = (int64_t)a->n_kv_head * hd;
            int64_t base[3] = {0, q, q + kv}, width[3] = {q, kv, kv};
            s.nseg = 3;
            for (int k = 0; k < 3; k++)
                s.start[k] = base[k] + width[k] / p->tp * p->rank, s.len[k] = width[k] / p->tp;
        } else {
            if (attr == MERAK_TP_COLUMN && O % p->tp)
                return failf(p, "tp=%d does not divide the %lld output features of %s; use tp in {%s}",
                             p->tp, (long long)O, W->name, divisors(O, buf, sizeof buf));
            s.nseg = 1;
            share(p, O, &s.start[0], &s.len[0]);
        }
        int lw = param(p, w, 0, &s), lb = b >= 0 ? param(p, b, 0, &s) : -1;
        if (lw < 0 || (b >= 0 && lb < 0))
            return -1;
        return set_out(p, o->out, last_op_src(p, i, merak_op_linear(p->l, lx, lw, lb)), &s);
    }
    case MERAK_TP_ROW: {
        const tstate *in = &p->st[x];
        if (!in->split)
            return failf(p, "tp=%d: %s is row-parallel but its input %s is whole; mark the "
                         "linear before it column-parallel", p->tp, W->name, g->tensors[x].name);
        int lw = param(p, w, 1, in), lb = b >= 0 ? param(p, b, 0, NULL) : -1;
        if (lw < 0 || (b >= 0 && lb < 0))
            return -1;
        int part = last_op_src(p, i, merak_op_linear(p->l, p->map[x], lw, -1));
        if (part < 0)
            return set_out(p, o->out, -1, NULL);
        return set_out(p, o->out, last_op_src(p, i, merak_op_tp_reduce(p->l, part, lb)), &s);
    }
    default: {
        int lx = whole(p, i, x);
        if (lx < 0)
            return -1;
        int lw = param(p, w, 0, NULL), lb = b >= 0 ? param(p, b, 0, NULL) : -1;
        if (lw < 0 || (b >= 0 && lb < 0))
            return -1;
        return set_out(p, o->out, last_op_src(p, i, merak_op_linear(p->l, lx, lw, lb)), &s);
    }
    }
}

static int embedding(pass *p, int i)
{
    const merak_graph *g = p->g;
    const merak_op *o = &g->ops[i];
    const merak_tensor *W = &g->tensors[merak_graph_param_root(g, o->in[1])];
    tstate s = {0};
    if (p->attr[merak_graph_param_root(g, o->in[1])] != MERAK_TP_VOCAB) {
        if (check_whole_param(p, i, o->in[1]) < 0)
            return -1;
        int lw = param(p, o->in[1], 0, NULL);
        if (lw < 0)
            return -1;
        return set_out(p, o->out, last_op_src(p, i, merak_op_embedding(p->l, p->map[o->in[0]], lw)), &s);
    }
    tstate rows = {.split = 1, .nseg = 1};
    share(p, W->shape[0], &rows.start[0], &rows.len[0]);
    int lw = param(p, o->in[1], 0, &rows);
    if (lw < 0)
        return -1;
    int part = last_op_src(p, i, merak_op_embedding(p->l, p->map[o->in[0]], lw));
    if (part < 0)
        return set_out(p, o->out, -1, NULL);
    p->l->ops[p->l->nops - 1].v0 = (int)rows.start[0];
    return set_out(p, o->out, last_op_src(p, i, merak_op_tp_reduce(p->l, part, -1)), &s);
}

static int attention(pass *p, int i)
{
    const merak_graph *g = p->g;
    const merak_op *o = &g->ops[i];
    int nin = o->fused_qkv ? 1 : 3, split = is_split(&p->st[o->in[0]]);
    for (int k = 1; k < nin; k++)
        if (is_split(&p->st[o->in[k]]) != split)
            return failf(p, "tp=%d: attention op %d reads q, k and v split differently; mark "
                         "all three projections column-parallel or none", p->tp, i);
    tstate s = {0};
    int nh = o->n_head, nkv = o->n_kv_head;
    if (split) {
        if (heads_divide(p, i, o) < 0)
            return -1;
        int64_t hd = o->head_dim;
        /* q (and k, v) must hold whole heads: rank r's heads, in order */
        const tstate *q = &p->st[o->in[0]];
        int64_t want0 = (int64_t)nh / p->tp * hd * p->rank;
        if (q->start[0] != want0 || (o->fused_qkv && q->nseg != 3) ||
            (!o->fused_qkv && q->nseg != 1))
            return failf(p, "tp=%d: the input of attention op %d is not split by heads", p->tp, i);
        nh /= p->tp, nkv /= p->tp;
        s.split = 1;
        s.nseg = 1;
        s.start[0] = (int64_t)nh * hd * p->rank;
        s.len[0] = (int64_t)nh * hd;
    }
    int lq = p->map[o->in[0]];
    int lk = o->fused_qkv ? -1 : p->map[o->in[1]], lv = o->fused_qkv ? -1 : p->map[o->in[2]];
    return set_out(p, o->out,
                   last_op_src(p, i, merak_op_attention_rope(p->l, lq, lk, lv, nh, nkv, &o->rope)), &s);
}

static int cross_entropy(pass *p, int i)
{
    const merak_op *o = &p->g->ops[i];
    const tstate *s = &p->st[o->in[0]];
    if (s->split && s->nseg != 1)
        return failf(p, "tp=%d: the logits of op %d are not split by vocabulary rows", p->tp, i);
    int t = last_op_src(p, i, merak_op_cross_entropy(p->l, p->map[o->in[0]], p->map[o->in[1]]));
    if (t >= 0 && s->split) {
        p->l->ops[p->l->nops - 1].v0 = (int)s->start[0];
        p->l->ops[p->l->nops - 1].vocab_parallel = 1;
    }
    tstate w = {0};
    return set_out(p, o->out, t, &w);
}

/* Ops whose inputs must be whole and whose parameters stay whole. */
static int whole_op(pass *p, int i)
{
    const merak_op *o = &p->g->ops[i];
    int in[MERAK_OP_MAX_IN];
    for (int k = 0; k < MERAK_OP_MAX_IN; k++) {
        int t = k < o->nin ? o->in[k] : -1;
        in[k] = -1;
        if (t < 0)
            continue;
        if (p->g->tensors[t].kind == MERAK_T_PARAM) {
            if (check_whole_param(p, i, t) < 0 || (in[k] = param(p, t, 0, NULL)) < 0)
                return -1;
        } else if ((in[k] = whole(p, i, t)) < 0) {
            return -1;
        }
    }
    int t = merak_graph_readd(p->l, o, in);
    tstate s = {0};
    return set_out(p, o->out, last_op_src(p, i, t), &s);
}

/* Elementwise ops: the output is held like the inputs. */
static int elementwise(pass *p, int i)
{
    const merak_op *o = &p->g->ops[i];
    const tstate *s = &p->st[o->in[0]];
    if (o->nin > 1 && !same_state(s, &p->st[o->in[1]]))
        return failf(p, "tp=%d: op %d (%s) adds a split tensor to a whole one; check the "
                     "tensor-parallel rules", p->tp, i, merak_op_name(o->type));
    int in[MERAK_OP_MAX_IN];
    for (int k = 0; k < MERAK_OP_MAX_IN; k++)
        in[k] = k < o->nin && o->in[k] >= 0 ? p->map[o->in[k]] : -1;
    int t = merak_graph_readd(p->l, o, in);
    tstate copy = *s;
    return set_out(p, o->out, last_op_src(p, i, t), &copy);
}

merak_graph *merak_graph_shard(const merak_graph *g, int tp, int rank,
                               const merak_tp_rule *rules, int nrules, char *err, size_t errlen)
{
    pass p = {.g = g, .tp = tp, .rank = rank, .err = err, .errlen = errlen};
    if (tp < 1 || rank < 0 || rank >= tp) {
        snprintf(err, errlen, "tensor parallelism: rank %d of tp=%d", rank, tp);
        return NULL;
    }
    p.l = merak_graph_create();
    p.map = malloc((size_t)g->ntensors * sizeof *p.map);
    p.copy_of = malloc((size_t)g->ntensors * sizeof *p.copy_of);
    p.st = calloc((size_t)g->ntensors, sizeof *p.st);
    p.attr = calloc((size_t)g->ntensors, sizeof *p.attr);
    int rc = 0;
    if (!p.l || !p.map || !p.copy_of || !p.st || !p.attr)
        rc = failf(&p, "out of memory sharding the graph");
    for (int t = 0; rc == 0 && t < g->ntensors; t++)
        if (g->tensors[t].kind == MERAK_T_PARAM)
            p.attr[t] = merak_tp_rules_attr(&g->tensors[t], rules, nrules);
    for (int t = 0; rc == 0 && t < g->ntensors; t++) {
        p.map[t] = p.copy_of[t] = -1;
        const merak_tensor *x = &g->tensors[t];
        if (x->kind == MERAK_T_INPUT &&
            (p.map[t] = merak_graph_input(p.l, x->name, x->dtype, x->ndim, x->shape)) < 0)
            rc = failf(&p, "tp=%d: %s", tp, merak_graph_error(p.l));
    }
    if (rc == 0) {
        p.l->tp = tp;
        p.l->tp_rank = rank;
    }
    for (int i = 0; rc == 0 && i < g->nops; i++) {
        switch (merak_op_kind_of(&g->ops[i])->shard) {
        case MERAK_SHARD_LINEAR: rc = linear(&p, i); break;
        case MERAK_SHARD_EMBEDDING: rc = embedding(&p, i); break;
        case MERAK_SHARD_ATTENTION: rc = attention(&p, i); break;
        case MERAK_SHARD_LOSS: rc = cross_entropy(&p, i); break;
        case MERAK_SHARD_ELEMENTWISE: rc = elementwise(&p, i); break;
        case MERAK_SHARD_WHOLE: rc = whole_op(&p, i); break;
        case MERAK_SHARD_NONE:
            rc = failf(&p, "tp=%d: op %d (%s) cannot be sharded", tp, i, merak_op_name(g->ops[i].type));
            break;
        }
    }
    free(p.map);
    free(p.copy_of);
    free(p.st);
    free(p.attr);
    if (rc < 0) {
        merak_graph_destroy(p.l);
        return NULL;
    }
    return p.l;
}

void merak_shard_runs(const merak_tensor *t,
                      void (*fn)(void *ctx, int64_t local, int64_t global, int64_t n), void *ctx)
{
    if (t->shard_dim < 0) {
        fn(ctx, 0, 0, merak_tensor_elems(t));
        return;
    }
    int d = t->shard_dim;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++)
        outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++)
        inner *= t->shape[i];
    int64_t full_w = t->full[d], local = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int s = 0; s < t->nseg; s++) {
            fn(ctx, local, (o * full_w + t->seg_start[s]) * inner, t->seg_len[s] * inner);
            local += t->seg_len[s] * inner;
        }
}

typedef struct slice_ctx {
    float *dst;
    const float *src;
} slice_ctx;

static void slice_run(void *ctx, int64_t local, int64_t global, int64_t n)
{
    slice_ctx *c = ctx;
    memcpy(c->dst + local, c->src + global, (size_t)n * sizeof(float));
}

static void place_run(void *ctx, int64_t local, int64_t global, int64_t n)
{
    slice_ctx *c = ctx;
    memcpy(c->dst + global, c->src + local, (size_t)n * sizeof(float));
}

void merak_shard_slice(const merak_tensor *t, const float *whole, float *shard)
{
    slice_ctx c = {shard, whole};
    merak_shard_runs(t, slice_run, &c);
}

void merak_shard_place(const merak_tensor *t, const float *shard, float *whole)
{
    slice_ctx c = {whole, shard};
    merak_shard_runs(t, place_run, &c);
}
