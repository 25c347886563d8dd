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
    merak_init init;
    merak_tp_attr tp;
    merak_hf_layout layout;
    int tied_to;             /* tensor id whose storage this shares, or -1 */
    int param_index;         /* index among distinct parameters, or -1 */
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
    float rope_theta;
    int fused_qkv;             /* attention with one [q|k|v] input */
    /* cost model, per micro-batch */
    double flops;              /* forward */
    double bytes;              /* bytes read and written by the forward */
} merak_op;

struct merak_graph {
    merak_tensor *tensors;
    int ntensors, cap_tensors;
    merak_op *ops;
    int nops, cap_ops;
    int nparams;               /* distinct (untied) parameters */
    int loss;                  /* tensor id of the loss, or -1 */
    char err[256];
};

const char *merak_op_name(merak_op_type t);

/* Number of elements of a tensor. */
int64_t merak_tensor_elems(const merak_tensor *t);

/* The tensor whose storage a parameter uses (follows ties). */
int merak_graph_param_root(const merak_graph *g, int tensor);

/* The vocabulary of the graph's loss: its logits' last dimension, or -1
 * without a loss.  Token ids and targets must lie below it. */
int merak_graph_loss_vocab(const merak_graph *g);

/* Is tensor t an input of op o? */
int merak_op_reads(const merak_op *o, int t);

#endif /* MERAK_GRAPH_H */
