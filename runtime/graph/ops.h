/*
 * ops.h - the op table: per op kind, everything the layers above need to
 * know about it, in one entry (ops.c).
 *
 *   name             merak_op_name
 *   tensor-parallel  which rule of the tp pass (tp.c) shards it
 *   cost             what the planner (runtime/plan/cost.c) times it by
 *   memory           the floats it keeps from forward to backward, its
 *                    scratch, and for generation its caches
 *   dispatch         forward, backward (input and weight parts) and
 *                    decode: the backend's kernels called on the buffers
 *                    the executor (runtime/pipe/exec.c) or the decoder
 *                    (decode.c) resolved for it (merak_op_io)
 *
 * The shape rule of each kind is its builder (merak_op_linear, ... in
 * graph.c), which infers the output's shape, FLOPs and bytes;
 * merak_graph_readd calls it for an op of another graph.
 *
 * Adding an op kind: its builder in graph.c, one entry here, and its
 * kernels in every backend (kernels/kernels.h).  Adding a dtype: the
 * entries' dispatch functions.
 */
#ifndef MERAK_OPS_H
#define MERAK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "kernels.h"

/* Alignment of every buffer the executor carves from an arena, and of
 * the parts of an op's saved values. */
#define MERAK_ALIGN_FLOATS 16

static inline size_t merak_align_floats(size_t n)
{
    return (n + MERAK_ALIGN_FLOATS - 1) / MERAK_ALIGN_FLOATS * MERAK_ALIGN_FLOATS;
}

/* The tensor-parallel pass's rule for a kind (see tp.c). */
typedef enum merak_op_shard {
    MERAK_SHARD_WHOLE,         /* inputs whole, parameters whole (norms, positions) */
    MERAK_SHARD_ELEMENTWISE,   /* the output is held like the inputs */
    MERAK_SHARD_LINEAR,        /* column or row parallel by its weight */
    MERAK_SHARD_EMBEDDING,     /* vocabulary-parallel table */
    MERAK_SHARD_ATTENTION,     /* heads divided by tp */
    MERAK_SHARD_LOSS,          /* vocabulary-parallel cross-entropy */
    MERAK_SHARD_NONE,          /* made by the pass: a sharded graph is not sharded again */
} merak_op_shard;

/* What the planner times an op by (cost.c). */
typedef enum merak_op_cost {
    MERAK_COST_STREAM,       /* its bytes at the memory's rate (and calibrates that rate) */
    MERAK_COST_BYTES,        /* its bytes, but a gather: not a stream (embedding, loss) */
    MERAK_COST_FLOPS,        /* its FLOPs at the matrix units' rate */
    MERAK_COST_SUM_FORWARD,  /* a sum over the tp group in the forward */
    MERAK_COST_SUM_BACKWARD, /* a sum over the tp group in the backward */
} merak_op_cost;

/* Which pass of an op sums over the tensor-parallel group: the executor
 * sums the op's output (forward) or its output's gradient (backward), in
 * place, between the op's two parts (see merak_op_kind). */
typedef enum merak_op_sum {
    MERAK_SUM_NONE, MERAK_SUM_FORWARD, MERAK_SUM_BACKWARD
} merak_op_sum;

/* One call of an op's kernels: the buffers its caller resolved, in the
 * backend's memory.  The caller runs `rows` token rows of the op (a
 * sub-batch's, or generation's new positions): the values are those rows'
 * parts of the tensors, parameters whole.  A row is a token position: a
 * row of every float tensor's last dimension, an element of token ids. */
typedef struct merak_op_io {
    const merak_graph *g;
    const merak_op *o;
    const merak_kernels *k;
    float *x[3];           /* values of in[0..2]; NULL where absent (and a
                            * parameter's in the weight part, which reads none) */
    float *y;              /* the output's value */
    float *dx[3];          /* input gradients to accumulate into; NULL where none is wanted
                            * (parameters, token ids) */
    int fresh;             /* the input part: dx (dx16) hold nothing yet, and the backward
                            * writes them (0 + its contribution) without reading them; set
                            * only for a kind with merak_op_kind.fresh */
    const float *dy;       /* the output's gradient */
    float *dw[2];          /* weight part: gradients of in[1], in[2] (whole), or NULL */
    float *saved;          /* the op's saved values for all rows_all rows */
    float *scratch;        /* attention's (scratch_floats), bf16 or not */
    int rows;              /* rows this call runs */
    int rows_all;          /* rows of the micro-batch (the saved values' layout) */
    int part;              /* the rows are part `part` of rows_all / rows */
    int seq;               /* positions per sequence (rows / seq sequences) */
    uint64_t seed;         /* dropout's */
    int eval;              /* dropout off */
    float loss_scale;      /* the loss's gradient scale (mixed precision) */
    /* bf16 storage run natively (the executor, when the kind's bf16
     * entries exist: merak_op_kind.bf16): the tensors in bf16 storage in
     * these instead of x, y, dx and dy (NULL there); token ids, weight
     * gradients and saved values where they always are */
    int b16;
    const uint16_t *x16[3];
    uint16_t *y16, *dx16[3];
    const uint16_t *dy16;
    int ldx, ldy;          /* the row strides of x16[0] and dx16[0], of y16 and dy16, in
                            * elements: their width, or more where the executor pads
                            * the rows (the logits, exec.c row_ld_of) */
    float *scratch16;      /* for the backend's bf16 entries (kernels.h bf16_scratch) */
    size_t scratch16_n;    /* its floats */
    /* generation (decode) */
    int pos, ctx;          /* the rows are positions [pos, pos + rows) of ctx */
    float *kcache, *vcache;
} merak_op_io;

typedef struct merak_op_kind {
    const char *name;
    merak_op_shard shard;
    merak_op_cost cost;
    double weight_share;   /* share of its backward's time that is the weight part */
    merak_op_sum sum;
    int loss;              /* its output is the graph's loss: the forward leaves
                            * per-row statistics (merak_op_loss_rows) the
                            * executor reduces */
    int reads_output;      /* its backward reads its forward's output (io->y);
                            * the others get NULL there */
    int pass_grad;         /* its input part gives in[0] the output's gradient as it is
                            * (an add, the position embedding): with fresh, the executor
                            * may hand it one buffer for both (dx[0] == dy), which it
                            * then leaves as it is (exec.c plan_pass) */
    int fresh;             /* its backward_input honours merak_op_io.fresh: it writes
                            * every input gradient it is given, whole, so a gradient it
                            * is the first to add to need not be zeroed first */
    /* 1 if backend k has this kind's bf16 entries (kernels.h) and they
     * take op o of graph g: its calls then read and write bf16 storage
     * natively (merak_op_io.b16), when every float tensor it names but the
     * loss is in bf16 storage, none twice, and it sums nothing over the tp
     * group; NULL: never */
    int (*bf16)(const merak_graph *g, const merak_op *o, const merak_kernels *k);
    /* floats of scratch its bf16 entries need on a backend with
     * bf16_scratch: at least (the loss's calls split their rows to fit),
     * or for the whole micro-batch (attention's); NULL: its bf16
     * tensors', values and gradients, a parameter or a gradient stored
     * over its value once, each call whole */
    size_t (*bf16_scratch_floats)(const merak_graph *g, const merak_op *o);
    /* floats kept from forward to backward (one micro-batch), and of
     * scratch (its calls' io->scratch; b16: run natively); NULL: none */
    size_t (*saved_floats)(const merak_graph *g, const merak_op *o);
    size_t (*scratch_floats)(const merak_graph *g, const merak_op *o, const merak_kernels *k, int b16);
    /* the forward: 0, or -1 if a memory hook failed; before the sum for
     * MERAK_SUM_FORWARD, finish after it (NULL: nothing) */
    int (*forward)(const merak_op_io *io);
    void (*finish)(const merak_op_io *io);
    /* its forward together with the op just before it, whose output is its
     * in[0] (prev: that op's call), both summing nothing, where the backend
     * can run the two in one call: 1 if it did (the two forwards' results,
     * bit for bit), 0 if not (the executor runs them one by one); NULL:
     * never */
    int (*forward_after)(const merak_op_io *prev, const merak_op_io *io);
    /* a loss that can write its input part's gradient in its forward, in
     * one pass with its statistics, on backend k in bf16 storage (b16):
     * where the executor knows the backward follows and nothing else reads
     * the logits before it, it hands the forward dx16[0], the logits'
     * gradient over them in place, which the forward then writes as the
     * input part would (the same bits), and skips the input part; NULL:
     * never */
    int (*forward_grad)(const merak_kernels *k, int b16);
    /* its input part together with the input part of the op just after it
     * (next: that op's call), which reads its output as in[0] and no
     * other op does, both summing nothing and writing their input
     * gradients (fresh), where the backend can do the two in one call:
     * from next's output gradient to its own input's, the gradient of its
     * output never written; 1 if it did, 0 if not (the executor runs them
     * one by one); NULL: never.  next's weight part is the executor's. */
    int (*backward_input_next)(const merak_op_io *io, const merak_op_io *next);
    /* the backward's input part (after the sum for MERAK_SUM_BACKWARD) and
     * weight part; NULL: nothing to do */
    void (*backward_input)(const merak_op_io *io);
    void (*backward_weight)(const merak_op_io *io);
    /* both parts at once, where the executor runs them together (not apart
     * for a zero-bubble schedule), on the input part's io (which has the
     * weight part's buffers too): what backward_input then backward_weight
     * give, which a backend may compute reading its tensors once; NULL:
     * the two.  Only for a kind whose backward sums nothing. */
    void (*backward)(const merak_op_io *io);
    /* generation: the forward over new positions (NULL: the kind cannot
     * be generated with), and what it needs for a context of ctx
     * positions run `rows` at a time: floats of each of its key and value
     * caches and of scratch; 0, or -1 with err (NULL: nothing) */
    int (*decode)(const merak_op_io *io);
    int (*decode_plan)(const merak_graph *g, const merak_op *o, const merak_kernels *k, int rows,
                       int ctx, size_t *cache, size_t *scratch, char *err, size_t errlen);
} merak_op_kind;

/* The entry of op o's kind (never NULL for an op of a graph). */
const merak_op_kind *merak_op_kind_of(const merak_op *o);
/* ... and by kind; NULL outside the enum. */
const merak_op_kind *merak_op_kind_get(merak_op_type t);

/* A loss op's per-row statistics after its forward: the log-sum-exp over
 * the whole vocabulary and the target's logit (in the saved values; the
 * executor combines vocabulary shards' in lse, which the backward reads). */
void merak_op_loss_rows(const merak_op_io *io, float **lse, float **tlogit);

/* The attention op's kernel arguments: its shape for the whole
 * micro-batch, and q, k, v from the buffers of its inputs (a fused op:
 * three column blocks of the one input's rows). */
merak_attn_shape merak_op_attn_shape(const merak_graph *g, const merak_op *o);
void merak_op_attn_qkv(const merak_op *o, float *in0, float *in1, float *in2, float **q, float **k,
                       float **v);

#endif /* MERAK_OPS_H */
