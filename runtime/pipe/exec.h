/*
 * exec.h - runs a graph, or any contiguous slice of its ops (a pipeline
 * stage), forward and backward, on one backend's kernels.
 *
 * Memory is planned once, at creation: the parameters the slice reads (one
 * flat buffer, and one for their gradients) and, per slot, one arena for the
 * slice's tensors and the ops' saved values and one for their gradients.  A
 * slot holds one micro-batch in flight; gpipe needs M slots, 1f1b at most pp.
 * Nothing is allocated in forward or backward.
 *
 * Gradients live no longer than they must (unless keep_grads).  The
 * slot's own are those of the chunk's inputs and outputs (the pipeline's
 * messages) and, with split, those a weight part reads (its op's output's).
 * Every other activation gradient is made and used up inside one backward
 * pass: it lives from the backward of the last op reading its tensor (the
 * first to add to it, which zeroes it first) to that of the op making it,
 * in one buffer shared by every slot, where gradients never live at once
 * share storage (placed first fit at creation).  merak_exec_grad of such a
 * tensor is valid only during the slot's backward.  The logits (a tensor
 * made in a chunk and read only by its loss op) have no gradient buffer:
 * the loss's backward writes their gradient over them (merak_exec_grad
 * returns the tensor's storage), as nothing reads them after it.  An add
 * (or the position embedding) that writes its inputs' gradients as copies
 * of its output's has them in one place instead, where they live in the
 * shared buffer (ops.h pass_grad; exec.c plan_pass says when the second
 * input's can be): a residual stream's gradient is one buffer from the
 * last layer to the first.  For
 * GPT-2 124M at B = 8, T = 1024 this plans 7.4 GB of activation memory
 * where every gradient its own took 14.3.
 *
 * Ops run one by one, but where the backend can do two in one pass
 * (ops.h): a norm's input and weight parts, when they run together (not
 * apart for a zero-bubble schedule); forward, a residual add and the norm
 * that reads its sum, and a linear layer and the GELU of its output,
 * where both run natively in bf16 storage (in a recompute, where both are
 * re-run); backward, a GELU's input part with that of the linear layer
 * that alone reads its output (GELU's output's gradient never written);
 * and the loss's input part in its training forward, where the logits
 * are in bf16 storage with their gradient over them and kept to the
 * backward (merak_exec_op_grad_early: the logits read once, not twice).
 * All but the first not while merak_exec_time_ops times each op (the
 * calibration times each kind).  Each gives the bits of the ops one by
 * one, but for the order of the norm's weight-gradient sums and where a
 * backend's pair rounds once where the two round twice (kernels.h
 * linear16_gelu_fwd).
 *
 * Chunks: a slice may be several disjoint op ranges (the model chunks an
 * interleaved pipeline stage runs), each with its own slots; the
 * parameters of all of them share the flat buffers, in first-use order
 * chunk by chunk.  A slot belongs to one chunk (chunk c's slots follow
 * chunk c-1's), and forward, recompute and backward of a slot run its
 * chunk's ops.  Chunks exchange activations only through the pipeline:
 * a tensor other than a parameter belongs to one chunk.  All of it is the backend's
 * memory (merak_kernels' alloc): host memory for the CPU, device memory for
 * CUDA; the *_read/_write functions below move values from and to the host.
 *
 * The backward of every op is split into an input-gradient part and a
 * weight-gradient part, which can run at different times (zero-bubble
 * schedules); merak_exec_backward runs both, op by op.
 *
 * Sub-pipelined tensor parallelism (tp_overlap K > 1): every forward,
 * recompute and input backward runs the micro-batch as K sub-batches along
 * its batch (rows [k B/K, (k+1) B/K)); the ops are cut after each
 * tensor-parallel sum into segments, each run sub-batch by sub-batch, and
 * sub-batch k's sum is left in flight while sub-batch k+1 computes and
 * finished where the next segment needs it, also across layers.  Every
 * tensor of the slice but the parameters and the loss must lead with the
 * batch, which K divides.  Results equal the whole micro-batch's up to the
 * order of float sums; dropout masks are the same.  merak_exec_backward
 * runs each op's weight part right after its input part, sub-batch by
 * sub-batch; merak_exec_backward_weight (no sums) runs the micro-batch
 * whole.
 *
 * Recomputation: with recompute_end > op_begin, the ops of [op_begin,
 * recompute_end) whose outputs only ops of that range read drop their
 * outputs, saved values and gradients after the forward (they live in one
 * of npool recompute buffers, which the forward borrows while it runs);
 * merak_exec_recompute re-runs them, with the forward's dropout seed, into a
 * buffer the slot keeps until its backward is done.  What crosses the
 * range's end (and the slice's inputs and outputs) stays in the slot.
 * Each chunk has its own recompute_end; the buffers are shared.
 *
 * Precision (bf16, --dtype bf16; DESIGN.md 7a).  The activations, their
 * gradients and the parameters' compute copies are bf16 storage, 2 bytes
 * an element, where the backend converts (kernels.h to_bf16, from_bf16)
 * and no sub-batches run (tp_overlap); the loss, the ops' saved values,
 * the masters and the weight gradients stay float, and so do the logits
 * (the loss's input, whose gradient takes their storage) unless the
 * backend's cross-entropy reads bf16 (kernels.h crossentropy16_*: else
 * the loss would stage N x V floats).  Where the head and the loss both
 * run natively, the bf16 logits' rows are padded to 16 bytes (exec.c
 * row_ld_of: GPT-2's 50257 columns 50264 apart), as cuBLASLt's fastest
 * products want them; merak_exec_tensor_bytes counts the padding, which
 * nothing reads or writes.  (A TP_COPY sums its
 * output's gradient in the staged copy, where float storage sums it in
 * place: inspected with keep_grads, that gradient is the addends in bf16
 * storage and the sum in float storage; nothing else reads it.)  The
 * kernels compute in fp32.  An op whose kind has bf16 entries in the
 * backend (kernels.h: the linear layers, the embeddings, the norms,
 * the cross-entropy, GELU, SwiGLU, the adds, dropout, and attention where
 * they take its shape), sums nothing, reads no
 * tensor twice and has every float tensor but the loss in bf16 storage
 * reads and writes that storage
 * natively; any other op's bf16 tensors are widened into a staging buffer
 * for its float kernels (exact) and what it writes is rounded back to
 * bf16 storage.  The two ways give the same bits on the CPU, whose bf16
 * entries widen into that buffer.  Elsewhere
 * (sub-batches, float_storage) a value bf16 storage would hold is kept in
 * float storage rounded to the nearest bf16 (ties to even, the backend's
 * round_bf16): the same numbers, bit for bit, in twice the memory.  The
 * rounding points, the definition a GPU's bf16 must reproduce:
 *   - parameters: the ops read compute copies, rounded from the fp32
 *     masters by merak_exec_cast_params (once per step, before the first
 *     forward: after the optimizer, a checkpoint or the initialisation
 *     wrote the masters), or, in bf16 storage, by the optimizer's own
 *     pass over every master (merak_exec_copies_current: the same bits);
 *     merak_exec_param_data and the flat buffer are the masters, which the
 *     optimizer updates in fp32;
 *   - an op's output, after its forward (for an op that sums over the tp
 *     group, after the sum of the rounded partial outputs and the bias its
 *     finish adds: one rounding of the fp32 sum), except the loss;
 *   - the gradients of an op's inputs, after its input-gradient part
 *     (which adds its fp32 contribution to the value there, so a gradient
 *     several ops add to is rounded after each, in the backward's op
 *     order; a TP_COPY's gradient after the sum);
 *   - nothing else: kernels compute in fp32 from rounded inputs (products
 *     accumulate in fp32); weight gradients, their accumulation over
 *     micro-batches and sub-batches, the loss and the ops' saved values
 *     (norm statistics, attention's log-sum-exp and rotated q and k, the
 *     cross-entropy's statistics) stay fp32.
 * What crosses a pipeline cut is an op's output or an input's gradient,
 * already rounded, so a pipeline changes no value (bf16 on the wire loses
 * nothing); recomputation rounds as the forward did, so it reproduces the
 * forward's values bit for bit.  A tensor-parallel sum adds bf16 values
 * (the row-parallel partial outputs, the partial input gradients of a
 * TP_COPY) in fp32 and rounds once: bf16 on the wire, as Megatron's;
 * NCCL's bf16 sum rounds after each add, the same for tp = 2 and not
 * beyond, so a GPU reproducing this bit for bit sums in fp32.  The
 * data-parallel and tied-embedding reductions sum weight gradients: fp32.
 * On a GPU (the CUDA backend: bf16 storage, its linear layers on
 * cuBLASLt with bf16 operands, the embeddings, the norms, the
 * cross-entropy, the elementwise ops and cuDNN's attention native;
 * attention where cuDNN does not take it staged) the products multiply
 * on the tensor cores from bf16 operands (the bf16 entries, or kernels.h
 * MERAK_PRODUCTS_BF16 for staged ones): exact for the operands above, all
 * bf16 values; attention (cuDNN's fused kernels, or products) rounds
 * to bf16 what it makes in between, as flash attention does: its
 * probabilities and their gradient, RoPE's rotated q and k, and with
 * cuDNN the gradients of q, k and v before they are added (the CPU keeps
 * them fp32): the one place a GPU's bf16 departs from this definition by
 * more than the order of sums.
 */
#ifndef MERAK_EXEC_H
#define MERAK_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "merak/merak.h"

typedef struct merak_exec merak_exec;

/* The tensor-parallel group, for graphs made by merak_graph_shard: the
 * executor sums over it in TP_COPY/TP_REDUCE ops and the vocabulary-parallel
 * cross-entropy.  allreduce sums n floats in place on every rank of the
 * group and returns 0 or -1.  Sub-pipelined (tp_overlap K > 1), the sums of
 * TP_REDUCE forwards and TP_COPY backwards are non-blocking: start begins
 * sub-batch k's sum (0 <= k < K; at most one in flight per k), wait ends
 * it (0 or -1), test lets it progress (1 done, 0 in flight, -1 failed). */
typedef struct merak_exec_comm {
    void *ctx;
    int (*allreduce)(void *ctx, float *buf, size_t n);
    int (*start)(void *ctx, float *buf, size_t n, int k);
    int (*wait)(void *ctx, int k);
    int (*test)(void *ctx, int k);
} merak_exec_comm;

typedef struct merak_exec_chunk {
    int op_begin, op_end;    /* ops [op_begin, op_end); 0, -1 = the whole graph */
    int nslots;              /* its micro-batches in flight (>= 1) */
    int recompute_end;       /* ops [op_begin, recompute_end) are recomputed; <= op_begin: none */
} merak_exec_chunk;

typedef struct merak_exec_opts {
    const merak_exec_chunk *chunks; /* [nchunks], in op order, not overlapping */
    int nchunks;             /* >= 1 */
    const merak_kernels *kernels;
    const merak_exec_comm *tp;  /* required when the graph has tp > 1 */
    int npool;               /* recompute buffers (>= 1 when a chunk recomputes) */
    int tp_overlap;          /* sub-batches per micro-batch, 0 or 1: none (see below) */
    int plan_only;           /* plan the memory, allocate nothing (for merak_exec_arena_bytes) */
    int bf16;                /* emulate bf16 (Precision, above): needs the backend's round_bf16 */
    int split;               /* the weight parts may run apart from the input parts
                              * (merak_exec_backward_weight; zero-bubble schedules) */
    int keep_grads;          /* every activation gradient its own storage in the slot,
                              * readable after the backward (inspection; more memory) */
    int float_storage;       /* bf16: keep the bf16 values in float storage even where
                              * bf16 storage could hold them (Precision, above) */
    int zero_first;          /* zero every shared gradient before its first writer adds
                              * to it, none written fresh (merak_exec_op_fresh): the
                              * same bits, more traffic (a check) */
} merak_exec_opts;

int merak_exec_create(const merak_graph *g, const merak_exec_opts *opts, merak_exec **out,
                      char *err, size_t errlen);
void merak_exec_destroy(merak_exec *e);

const merak_kernels *merak_exec_kernels(const merak_exec *e);

/* ---- parameters the slice reads (distinct storage, ties followed): the
 * fp32 masters (a bf16 executor's ops read their compute copies) */
int merak_exec_num_params(const merak_exec *e);
int merak_exec_param_tensor(const merak_exec *e, int i);   /* graph tensor id */
float *merak_exec_param_data(const merak_exec *e, int i);
float *merak_exec_param_grad(const merak_exec *e, int i);
size_t merak_exec_param_elems(const merak_exec *e, int i);
/* The same storage as two flat buffers of n floats (with alignment gaps,
 * which stay zero).  A write of the masters through these pointers must
 * be followed by merak_exec_masters_written. */
float *merak_exec_params_flat(const merak_exec *e, size_t *n);
float *merak_exec_grads_flat(const merak_exec *e, size_t *n);
/* Index of graph tensor t among the params, or -1. */
int merak_exec_param_find(const merak_exec *e, int t);
/* Parameter i's values to / from host memory (param_elems floats); 0 or -1. */
int merak_exec_param_read(const merak_exec *e, int i, float *host);
int merak_exec_param_write(merak_exec *e, int i, const float *host);
/* bf16: rounds the compute copies of the parameters from the masters;
 * call it after writing the masters and before the next forward (the
 * stage does, before each step and evaluation).  Nothing to do in fp32.
 * 0, or -1 if a memory copy failed. */
int merak_exec_cast_params(merak_exec *e);
/* bf16 storage: the parameters' compute copies (bf16, the masters' flat
 * layout: merak_exec_params_flat's offsets), which AdamW may write in its
 * own pass (kernels.h adamw's p16); NULL otherwise. */
uint16_t *merak_exec_copies16(merak_exec *e);
/* Says every compute copy was just rounded from the masters as they now
 * are (AdamW wrote them): the next merak_exec_cast_params, and only it,
 * has nothing to do.  Call it right after that write: a write of the
 * masters before the next cast must not follow it (merak_exec_param_write
 * forgets it). */
void merak_exec_copies_current(merak_exec *e);
/* Says the masters were written through merak_exec_params_flat's or
 * merak_exec_param_data's pointers: the next cast rounds every copy. */
void merak_exec_masters_written(merak_exec *e);

/* ---- tensors of one slot.  Graph inputs (ids, targets) and activations
 * produced before the slice are written here by the caller before forward;
 * the gradient of an activation consumed after the slice is written into
 * merak_exec_grad before backward. */
void *merak_exec_tensor(const merak_exec *e, int slot, int t);
/* (the logits' gradient is their storage, which holds the values until the
 * loss's backward and the gradient after it; a gradient living only inside
 * the backward is valid only while it runs: see the top) */
void *merak_exec_grad(const merak_exec *e, int slot, int t);
/* Bytes of tensor t's storage (and of its gradient's): its elements times
 * 4 (float, int32) or 2 (bf16 storage); 0 if the slice holds no t. */
size_t merak_exec_tensor_bytes(const merak_exec *e, int t);
/* Is tensor t (and its gradient) in bf16 storage?  (merak_bf16_to_f32 of
 * bf16.h reads its elements.) */
int merak_exec_tensor_bf16(const merak_exec *e, int t);
/* The chunk holding tensor t (not a parameter), or -1. */
int merak_exec_tensor_chunk(const merak_exec *e, int t);
/* Does op i of the slice read and write bf16 storage as it is (its kind's
 * bf16 entries), rather than staged through float copies?  (Precision;
 * known with plan_only too.) */
int merak_exec_op_native(const merak_exec *e, int i);
/* Does op i's input part write its input gradients (its kind's fresh
 * entries: merak_op_io.fresh), which are then not zeroed before it, rather
 * than add to them?  (Known with plan_only too.) */
int merak_exec_op_fresh(const merak_exec *e, int i);
/* Does op i, a loss, write its logits' gradient in a training step's
 * forward, in one pass with its statistics (merak_op_kind.forward_grad),
 * its backward then having nothing to do?  Not while evaluating nor while
 * ops are timed one by one (merak_exec_time_ops).  (Known with plan_only
 * too.) */
int merak_exec_op_grad_early(const merak_exec *e, int i);
/* Writes host values (the tensor's elements, 4 bytes each: float or int32;
 * floats rounded to bf16 for a tensor in bf16 storage) into the slot's
 * tensor t; -1 if the slice holds no t or the copy failed. */
int merak_exec_tensor_write(merak_exec *e, int slot, int t, const void *host);
/* Activation memory: every slot's arenas (kept values and their
 * gradients) and the recompute buffers. */
size_t merak_exec_arena_bytes(const merak_exec *e);
/* Everything the executor takes from the backend's alloc: parameters,
 * their gradients, the arenas and the kernels' scratch (known with
 * plan_only too: the planner's memory model). */
size_t merak_exec_device_bytes(const merak_exec *e);

/* ---- running */
/* d(objective)/d(loss) for the loss op's backward, e.g. 1/M with M
 * micro-batches per step; set before the forward, which may write the
 * loss's gradient (merak_exec_op_grad_early). */
void merak_exec_set_loss_scale(merak_exec *e, float scale);
/* Forward of one micro-batch.  `seed` drives dropout; pass a value unique to
 * the (step, micro-batch).  Also zeroes the slot's own activation gradients.
 * Forward and backward return 0, or -1 when a tensor-parallel sum or a
 * memory copy failed (merak_exec_error says which). */
int merak_exec_forward(merak_exec *e, int slot, uint64_t seed);
/* Mean loss of the slot's last forward (only if the slice holds the loss). */
double merak_exec_loss(const merak_exec *e, int slot);
/* Re-runs the slot's dropped ops (recomputing executors only; nothing to
 * do for a chunk that recomputes no op); the backward of a recomputing
 * chunk fails without it.  0 or -1. */
int merak_exec_recompute(merak_exec *e, int slot);
/* The backward's input parts, then its weight parts: only for an
 * executor made with split (-1 otherwise). */
int merak_exec_backward_input(merak_exec *e, int slot);
int merak_exec_backward_weight(merak_exec *e, int slot);
int merak_exec_backward(merak_exec *e, int slot);
/* Why the last forward or backward failed (empty if it did not). */
const char *merak_exec_error(const merak_exec *e);
/* From now on, adds the seconds each op's forward (recomputes too) and
 * backward take to fwd[i] and bwd[i] (i: the op in the graph); NULL
 * stops (calibration).  On a backend with marks (kernels.h mark) an op's
 * time is the device's from the moment it finished the work queued before
 * the op to the moment it finished the op's (its cost in a step, waits
 * for launches included), with nothing synchronised (the ops run as in a
 * step), added when this is called again, which waits for the kernels:
 * call it with NULL before reading the times.  Otherwise the kernels are synchronised
 * around every op and its time added at once.  The marks are the
 * backend's: nothing else may use them meanwhile (merak_trace_device_begin). */
void merak_exec_time_ops(merak_exec *e, double *fwd, double *bwd);
/* Whether the host kept the device fed, over the ops timed by marks so
 * far: at how many op boundaries (each op's start and end: bounds) the
 * device had caught up with the host (caught: it reached the mark less
 * than MERAK_EXEC_CAUGHT_UP seconds after the host recorded it, so it had
 * waited, or was about to wait, for a launch or a read-back), and the
 * mean of how far behind the host it ran there, in seconds.  The device's
 * times are lined up with the host's by a mark recorded while it was
 * idle (merak_exec_time_ops synchronises first).  A host backend's
 * device is the host: every boundary is caught up. */
#define MERAK_EXEC_CAUGHT_UP 50e-6
void merak_exec_ops_lag(const merak_exec *e, size_t *bounds, size_t *caught, double *mean);
/* Forgets the boundaries counted so far (a warm-up pass's). */
void merak_exec_ops_lag_reset(merak_exec *e);
int merak_exec_zero_grads(merak_exec *e);   /* 0 or -1 */

/* Gradient readiness, for reducing gradients while backward still runs:
 * while a hook is set, every weight-gradient step of the backward calls
 * fn(ctx, from) once op by op, where the flat gradient buffer's floats
 * [from, n) will not change again in this backward (parameters are laid out
 * in first-use order, so they complete from the end; with chunks, this holds
 * for a backward of the first chunk once the later chunks' are done, as in
 * the last backward of an interleaved step).  fn NULL removes it. */
void merak_exec_set_grad_hook(merak_exec *e, void (*fn)(void *ctx, size_t from), void *ctx);

/* Polling: while set, fn(ctx) runs after every op of every pass (forward,
 * recompute, backward, weight gradients), so that communication the caller
 * has in flight moves while the slice computes.  MPI moves a large message
 * only while both its ranks are inside MPI (unless the transport copies it
 * in one go, as shared memory's single-copy does), and a stage that posts
 * a send and then computes for a whole forward holds the message up for
 * that long.  fn NULL removes it. */
void merak_exec_set_poll(merak_exec *e, void (*fn)(void *ctx), void *ctx);

/* Evaluation (on 1) or training (0, the default): in evaluation dropout
 * keeps every value, as a model in eval mode does. */
void merak_exec_set_eval(merak_exec *e, int on);

#endif /* MERAK_EXEC_H */
