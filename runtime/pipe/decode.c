/*
 * decode.c - the generation decoder (see decode.h): the graph's ops over
 * the rows of new positions, attention against a key/value cache, each op
 * run by its op table entry's decode (graph/ops.h).
 */
#include "decode.h"

#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "exec.h"
#include "graph/graph.h"
#include "graph/ops.h"

/* Rows of new positions one piece runs at once. */
#define PIECE_ROWS 64

struct merak_decoder {
    const merak_graph *g;
    const merak_kernels *k;
    int ctx, rows, pos, vocab;
    int loss_op, logits;     /* the cross-entropy op (not run); its logits tensor */
    void **buf;              /* per tensor: a parameter's storage (ties share it),
                              * an activation's rows, the token ids; NULL if unused */
    int *params;             /* distinct parameters' tensor ids */
    int nparams;
    float **kc, **vc;        /* per op: an attention op's caches (ctx rows) */
    float *scratch;          /* attention_cached_fwd's */
    float *stats;            /* a norm's mean and rstd (2 * rows) */
};

static int64_t width(const merak_tensor *t) { return t->shape[t->ndim - 1]; }

/* Is op i run (every op but the loss)? */
static int runs(const merak_decoder *d, int i) { return i != d->loss_op; }

/* The graph is one the decoder runs: a whole model with a cross-entropy
 * loss, ops it knows, token ids as its only inputs.  0 or -1 with err. */
static int check_graph(merak_decoder *d, char *err, size_t errlen)
{
    const merak_graph *g = d->g;
    if (g->tp != 1)
        return merak_errf(err, errlen, "generation runs a whole model, not a %d-way tensor-parallel shard", g->tp);
    if (g->loss < 0 || g->tensors[g->loss].producer < 0 ||
        !merak_op_kind_of(&g->ops[g->tensors[g->loss].producer])->loss)
        return merak_errf(err, errlen, "the model has no cross-entropy loss, whose logits generation samples");
    d->loss_op = g->tensors[g->loss].producer;
    d->logits = g->ops[d->loss_op].in[0];
    d->vocab = (int)width(&g->tensors[d->logits]);
    for (int i = 0; i < g->nops; i++) {
        const merak_op *o = &g->ops[i];
        if (!runs(d, i))
            continue;
        if (!merak_op_kind_of(o)->decode)
            return merak_errf(err, errlen, "generation cannot run op %d (%s) of the model", i, merak_op_name(o->type));
        for (int j = 0; j < o->nin; j++) {
            const merak_tensor *t = o->in[j] >= 0 ? &g->tensors[o->in[j]] : NULL;
            if (t && t->kind == MERAK_T_INPUT && t->dtype != MERAK_I32)
                return merak_errf(err, errlen, "model input '%s' is not token ids", t->name);
        }
    }
    return 0;
}

static void *alloc_floats(merak_decoder *d, size_t n) { return d->k->alloc(n * sizeof(float)); }

static int allocate(merak_decoder *d, char *err, size_t errlen)
{
    const merak_graph *g = d->g;
    const size_t rows = (size_t)d->rows;
    d->buf = calloc((size_t)g->ntensors, sizeof *d->buf);
    d->params = calloc((size_t)g->ntensors, sizeof *d->params);
    d->kc = calloc((size_t)g->nops, sizeof *d->kc);
    d->vc = calloc((size_t)g->nops, sizeof *d->vc);
    d->stats = alloc_floats(d, 2 * rows);
    if (!d->buf || !d->params || !d->kc || !d->vc || !d->stats)
        goto oom;
    /* what the run ops read and write */
    size_t scratch = 0;
    for (int i = 0; i < g->nops; i++) {
        const merak_op *o = &g->ops[i];
        if (!runs(d, i))
            continue;
        for (int j = 0; j < o->nin; j++) {
            const int t = o->in[j];
            if (t < 0 || d->buf[t])
                continue;
            const merak_tensor *x = &g->tensors[t];
            if (x->kind == MERAK_T_PARAM) {
                const int root = merak_graph_param_root(g, t);
                if (!d->buf[root]) {
                    d->buf[root] = alloc_floats(d, (size_t)merak_tensor_elems(&g->tensors[root]));
                    d->params[d->nparams++] = root;
                }
                d->buf[t] = d->buf[root];
            } else if (x->kind == MERAK_T_INPUT) {
                d->buf[t] = d->k->alloc(rows * sizeof(int32_t));   /* ids: one per row */
            }
            if (!d->buf[t])
                goto oom;
        }
        if (!(d->buf[o->out] = alloc_floats(d, rows * (size_t)width(&g->tensors[o->out]))))
            goto oom;
        const merak_op_kind *kd = merak_op_kind_of(o);
        size_t cache = 0, n = 0;
        if (kd->decode_plan && kd->decode_plan(g, o, d->k, d->rows, d->ctx, &cache, &n, err, errlen) < 0)
            return -1;
        if (cache && (!(d->kc[i] = alloc_floats(d, cache)) || !(d->vc[i] = alloc_floats(d, cache))))
            goto oom;
        scratch = n > scratch ? n : scratch;
    }
    if (scratch && !(d->scratch = alloc_floats(d, scratch)))
        goto oom;
    return 0;
oom:
    return merak_errf(err, errlen, "out of %s memory for generation with %d positions", d->k->name, d->ctx);
}

merak_decoder *merak_decoder_create(const merak_graph *g, const merak_kernels *k, int ctx, char *err,
                                    size_t errlen)
{
    merak_decoder *d = calloc(1, sizeof *d);
    if (!d) {
        merak_errf(err, errlen, "out of memory");
        return NULL;
    }
    d->g = g;
    d->k = k;
    d->ctx = ctx;
    d->rows = ctx < PIECE_ROWS ? ctx : PIECE_ROWS;
    d->loss_op = -1;
    if (ctx < 1) {
        merak_errf(err, errlen, "generation needs at least one position (got %d)", ctx);
        merak_decoder_destroy(d);
        return NULL;
    }
    if (check_graph(d, err, errlen) < 0 || allocate(d, err, errlen) < 0) {
        merak_decoder_destroy(d);
        return NULL;
    }
    return d;
}

void merak_decoder_destroy(merak_decoder *d)
{
    if (!d)
        return;
    const merak_graph *g = d->g;
    if (d->buf)
        for (int t = 0; t < g->ntensors; t++)
            /* a tie's storage is freed with its root */
            if (d->buf[t] && (g->tensors[t].kind != MERAK_T_PARAM || merak_graph_param_root(g, t) == t))
                d->k->free(d->buf[t]);
    for (int i = 0; d->kc && i < g->nops; i++) {
        d->k->free(d->kc[i]);
        d->k->free(d->vc[i]);
    }
    d->k->free(d->stats);
    d->k->free(d->scratch);
    free(d->buf);
    free(d->params);
    free(d->kc);
    free(d->vc);
    free(d);
}

const merak_kernels *merak_decoder_kernels(const merak_decoder *d) { return d->k; }
int merak_decoder_ctx(const merak_decoder *d) { return d->ctx; }
int merak_decoder_vocab(const merak_decoder *d) { return d->vocab; }
int merak_decoder_num_params(const merak_decoder *d) { return d->nparams; }
int merak_decoder_param_tensor(const merak_decoder *d, int i) { return d->params[i]; }

int merak_decoder_param_write(merak_decoder *d, int i, const float *host)
{
    const int t = d->params[i];
    return d->k->copy(d->buf[t], host, (size_t)merak_tensor_elems(&d->g->tensors[t]) * sizeof(float),
                      MERAK_COPY_H2D);
}

void merak_decoder_reset(merak_decoder *d) { d->pos = 0; }
int merak_decoder_pos(const merak_decoder *d) { return d->pos; }

/* Op i over the N rows of positions [pos, pos+N). */
static void run_op(merak_decoder *d, int i, int N)
{
    const merak_op *o = &d->g->ops[i];
    merak_op_io io = {.g = d->g, .o = o, .k = d->k, .y = d->buf[o->out], .saved = d->stats,
                      .scratch = d->scratch, .rows = N, .rows_all = d->rows, .seq = N, .eval = 1,
                      .pos = d->pos, .ctx = d->ctx, .kcache = d->kc[i], .vcache = d->vc[i]};
    for (int j = 0; j < o->nin && j < 3; j++)
        io.x[j] = o->in[j] >= 0 ? d->buf[o->in[j]] : NULL;
    merak_op_kind_of(o)->decode(&io);   /* check_graph let no other op through */
}

int merak_decoder_feed(merak_decoder *d, const int32_t *ids, int n, float *logits, char *err,
                       size_t errlen)
{
    const merak_graph *g = d->g;
    if (n < 1)
        return merak_errf(err, errlen, "nothing to feed");
    if (n > d->ctx - d->pos)
        return merak_errf(err, errlen, "%d more tokens after %d are over the context of %d positions", n, d->pos,
                          d->ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= d->vocab)
            return merak_errf(err, errlen, "token %d is outside the model's vocabulary of %d", (int)ids[i],
                              d->vocab);
    int N = 0;
    for (int done = 0; done < n; done += N) {
        N = n - done < d->rows ? n - done : d->rows;
        for (int t = 0; t < g->ntensors; t++)
            if (g->tensors[t].kind == MERAK_T_INPUT && d->buf[t] &&
                d->k->copy(d->buf[t], ids + done, (size_t)N * sizeof(int32_t), MERAK_COPY_H2D) < 0)
                return merak_errf(err, errlen, "copying token ids to the %s backend failed", d->k->name);
        for (int i = 0; i < g->nops; i++)
            if (runs(d, i))
                run_op(d, i, N);
        d->pos += N;
    }
    const float *last = (const float *)d->buf[d->logits] + (size_t)(N - 1) * (size_t)d->vocab;
    if (d->k->copy(logits, last, (size_t)d->vocab * sizeof(float), MERAK_COPY_D2H) < 0)
        return merak_errf(err, errlen, "the %s backend failed while generating", d->k->name);
    return 0;
}
