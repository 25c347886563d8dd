/*
 * graph.h - the model graph's internal representation (runtime only).
 *
 * Tensors and ops live in two growable arrays; ops are kept in the order they
 * were added, which is a topological order (an op can only use tensors that
 * already exist).  A pipeline stage is a contiguous range of that order.
 * Nothing here holds parameter or activation memory: see runtime/pipe/exec.h.
 */
#ifndef MERAK_GRAPH_H
#define MERAK_GRAPH_H

#include <stdint.h>

#include "merak/merak.h"

#define MERAK_TP_MAX_SEGS 3   /* q, k and v of a fused projection */

typedef enum merak_tensor_kind {
    MERAK_T_INPUT = 0,   /* graph input: token ids, targets */
    MERAK_T_PARAM = 1,   /* trainable parameter */
    MERAK_T_ACT = 2,     /* activation produced by an op */
} merak_tensor_kind;

typedef struct merak_tensor {
    char name[MERAK_NAME_MAX];
    merak_tensor_kind kind;
    merak_dtype dtype;
    int ndim;
    int64_t shape[MERAK_MAX_DIMS];
    int producer;            /* op index for MERAK_T_ACT, else -1 */
    /* parameters only */
    merak_param_init init;
    merak_tp_attr tp;
    merak_hf_layout layout;
    int tied_to;             /* tensor id whose storage this shares, or -1 */
    int param_index;         /* index among distinct parameters, or -1 */
    /* A tensor-parallel shard (graphs made by merak_graph_shard): the whole
     * parameter has shape `full`; along dimension shard_dim this rank holds
     * the concatenation of nseg ranges [seg_start, seg_start + seg_len) of
     * the whole.  shard_dim is -1 for a tensor held whole. */
    int64_t full[MERAK_MAX_DIMS];
    int shard_dim;
    int nseg;
    int64_t seg_start[MERAK_TP_MAX_SEGS], seg_len[MERAK_TP_MAX_SEGS];
} merak_tensor;

typedef enum merak_op_type {
    MERAK_OP_EMBEDDING,
    MERAK_OP_POS_EMBEDDING,
    MERAK_OP_LAYERNORM,
    MERAK_OP_RMSNORM,
    MERAK_OP_LINEAR,
    MERAK_OP_ATTENTION,
    MERAK_OP_GELU,
    MERAK_OP_SWIGLU,
    MERAK_OP_ADD,
    MERAK_OP_DROPOUT,
    MERAK_OP_CROSS_ENTROPY,
    /* Tensor-parallel communication (inserted by merak_graph_shard):
     * TP_COPY is identity forward and sums the gradient over the tp group
     * (Megatron's f); TP_REDUCE sums over the tp group forward, adds an
     * optional bias, and passes the gradient through (Megatron's g). */
    MERAK_OP_TP_COPY,
    MERAK_OP_TP_REDUCE,
    MERAK_OP_COUNT_
} merak_op_type;

#define MERAK_OP_MAX_IN 4

typedef struct merak_op {
    merak_op_type type;
    int in[MERAK_OP_MAX_IN];   /* tensor ids; -1 for an absent optional input */
    int nin;
    int out;                   /* tensor id */
    /* attributes */
    float eps;                 /* norms */
    float p;                   /* dropout */
    int n_head, n_kv_head, head_dim;
    merak_rope rope;           /* attention: DYNAMIC already resolved (theta 0: none) */
    int fused_qkv;             /* attention with one [q|k|v] input */
    int v0;                    /* embedding, cross-entropy: first vocabulary row held */
    int vocab_parallel;        /* cross-entropy over logits split by vocabulary */
    int src;                   /* the op of the unsharded graph this op comes from
                                * (its own index there): seeds dropout, maps
                                * pipeline cuts */
    /* cost model, per micro-batch */
    double flops;              /* forward */
    double bytes;              /* bytes read and written by the forward */
} merak_op;

struct merak_graph {
    int tp, tp_rank;           /* 1, 0 unless made by merak_graph_shard */
    merak_tensor *tensors;
    int ntensors;
    size_t cap_tensors;
    merak_op *ops;
    int nops;
    size_t cap_ops;
    int nparams;               /* distinct (untied) parameters */
    int loss;                  /* tensor id of the loss, or -1 */
    int *names;                /* tensor ids + 1 by name, open addressing (0: empty) */
    size_t names_cap;          /* a power of two, at least twice ntensors */
    char err[256];             /* the first building error; once set, building
                                * calls change nothing and return -1 */
};

/* The op kind's name (the op table, ops.h). */
const char *merak_op_name(merak_op_type t);

/* Op o of another graph added to g over inputs in (ids in g; in[j] for
 * o->in[j]), with o's attributes, by its kind's builder (the shape rule):
 * the new output's id, or -1 with g's error. */
int merak_graph_readd(merak_graph *g, const merak_op *o, const int *in);

/* Number of elements of a tensor. */
static inline int64_t merak_tensor_elems(const merak_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* The tensor whose storage a parameter uses (follows ties). */
int merak_graph_param_root(const merak_graph *g, int tensor);
/* The parameters with storage of their own (not tied aliases), in tensor
 * order, into ids (room for g->ntensors); how many. */
int merak_graph_own_params(const merak_graph *g, int *ids);

/* The vocabulary of the graph's loss: its logits' last dimension, or -1
 * without a loss.  Token ids and targets must lie below it. */
int merak_graph_loss_vocab(const merak_graph *g);

/* A tensor-parallel rules file, read into memory (see
 * merak_graph_load_tp_rules): rules apply in order, the last match wins. */
typedef struct merak_tp_rule {
    char pattern[MERAK_NAME_MAX];
    merak_tp_attr attr;
    int line;
} merak_tp_rule;
/* 0, or -1 with err naming file and line; *rules is malloc'ed. */
int merak_tp_rules_read(const char *path, merak_tp_rule **rules, int *n, char *err,
                        size_t errlen);
/* A rule matching no parameter of g is an error (0 or -1 with err). */
int merak_tp_rules_check(const merak_graph *g, const merak_tp_rule *rules, int n,
                         const char *path, char *err, size_t errlen);
/* Read and check against g in one go (on failure *rules is NULL). */
int merak_tp_rules_load(const merak_graph *g, const char *path, merak_tp_rule **rules, int *n,
                        char *err, size_t errlen);
/* Parameter t's attribute with the rules applied over its own. */
merak_tp_attr merak_tp_rules_attr(const merak_tensor *t, const merak_tp_rule *rules, int n);

/* Tensor-parallel communication ops (see merak_op_type); bias may be -1. */
int merak_op_tp_copy(merak_graph *g, int x);
int merak_op_tp_reduce(merak_graph *g, int x, int bias);

/* The graph one rank of a tp-way tensor-parallel group runs: parameters
 * split by their tp attribute (column: output features, with a fused q|k|v
 * projection split so each rank holds whole heads of q, k and v; row: input
 * features; vocab: rows of an embedding table, which need not divide
 * evenly), head counts divided by tp, and TP_COPY/TP_REDUCE ops where
 * activations change between whole and split.  Every op keeps `src`, its
 * index in g.  Returns NULL with one line in err (naming the number to
 * change) when g cannot be split that way.  rules (may be NULL) override
 * the parameters' own attributes. */
merak_graph *merak_graph_shard(const merak_graph *g, int tp, int rank,
                               const merak_tp_rule *rules, int nrules, char *err, size_t errlen);

/* Calls fn for each contiguous run of a shard's elements: n elements at
 * `local` in the shard are at `global` in the whole tensor. */
void merak_shard_runs(const merak_tensor *t,
                      void (*fn)(void *ctx, int64_t local, int64_t global, int64_t n),
                      void *ctx);
/* A shard's elements taken from / put into the whole tensor (both in graph
 * layout, host memory); for a tensor held whole, a copy. */
void merak_shard_slice(const merak_tensor *t, const float *whole, float *shard);
void merak_shard_place(const merak_tensor *t, const float *shard, float *whole);

/* Is tensor t an input of op o? */
int merak_op_reads(const merak_op *o, int t);

/* Pipeline cuts (cuts.c).  A cut goes only between ops where exactly one
 * activation crosses (Merak's rule: a skip connection never crosses a
 * cut).  Graph inputs are not activations: each stage loads the inputs it
 * reads. */

/* The one activation crossing a cut before op k, or -1 if k is not a cut
 * point (none or several cross). */
int merak_cut_tensor(const merak_graph *g, int k);
/* last[t] = the last op reading tensor t (-1: none) and, unless nuse is
 * NULL, nuse[t] = how many op inputs name t; both [g->ntensors]. */
void merak_graph_last_uses(const merak_graph *g, int *last, int *nuse);

/* The cut points k with begin < k < end into cuts (room for end - begin
 * entries); returns their number, or -1 out of memory.  The segments
 * between them are the graph's blocks: a stage's layers, for
 * recomputation, and the partitioners' units. */
int merak_cut_points(const merak_graph *g, int begin, int end, int *cuts);

/* Where a cut before op k of a graph falls in its tensor-parallel shard
 * (merak_graph_shard): the first op of `local` that comes from op k or
 * later, so the ops inserted for tensor parallelism stay with the op they
 * serve. */
int merak_cut_map(const merak_graph *local, int k);

#endif /* MERAK_GRAPH_H */
