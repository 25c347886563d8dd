/*
 * stage.h - one rank's pipeline stage and the instruction interpreter.
 *
 * A stage is this rank's slice of its tensor-parallel shard of the model
 * (ops [bounds[p], bounds[p+1]) of the shard, bounds cut on the whole
 * graph; interleaved, V such chunks: virtual stages p, p+pp, ...), its
 * executor, its schedule's instruction list, and the state of
 * the gradient reductions over its groups.  merak_stage_run executes the
 * list of one optimizer step, every instruction as what it says: LOAD and
 * OPTIMIZER_STEP call back into the step loop (train/), which owns data
 * and the optimizer; everything else is the executor and the groups.
 * A single process is the 1x1x1 grid: one stage, groups of one.
 */
#ifndef MERAK_STAGE_H
#define MERAK_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "exec.h"
#include "graph/graph.h"
#include "schedule.h"
#include "trace.h"

typedef struct merak_stage merak_stage;

typedef struct merak_stage_opts {
    merak_schedule_kind schedule;
    merak_recompute recompute;    /* which layers each stage recomputes */
    const int *bounds;            /* [pp*V + 1]: virtual stage q runs ops [bounds[q],
                                   * bounds[q+1]) of the model, each bound a cut point
                                   * (plan/partition.h) */
    const merak_tp_rule *rules;   /* tensor-parallel rules over the graph's own, or NULL */
    int nrules;
    int micro_batches;            /* M per replica */
    int virtual_stages;           /* interleaved: model chunks per stage (0: 2); others 0 or 1 */
    int tp_overlap;               /* sub-batches per micro-batch, sub-pipelining the
                                   * tensor-parallel sums (exec.h); 0 or 1: none */
    int zero;                     /* 1: ZeRO-1 over dp (reduce-scatter, share, all-gather) */
    double bucket_mb;             /* dp all-reduce buckets (0: 25 MiB) */
    const merak_kernels *kernels;
    const merak_graph *shard;     /* tp > 1: this rank's shard of the model made by the caller
                                   * (merak_graph_shard with these rules), or NULL: the stage
                                   * makes it */
    int bf16;                     /* emulated bf16 (exec.h, Precision): compute copies of the
                                   * parameters rounded before each step and evaluation */
    int float_storage;            /* bf16 values in float storage (merak_bf16_storage_env) */
} merak_stage_opts;

/* MERAK_BF16_STORAGE (merak-train(1)): *float_storage 1 for "float", 0 for
 * "bf16" or unset; MERAK_USAGE with one line for another value, else 0. */
int merak_bf16_storage_env(int *float_storage, char *err, size_t errlen);

/* What the step loop provides to the interpreter. */
typedef struct merak_stage_hooks {
    void *ctx;
    /* LOAD: micro-batch mb's token ids and targets (B*T each, host) */
    int (*load)(void *ctx, int mb, int32_t *ids, int32_t *targets, char *err, size_t errlen);
    /* the dropout seed of micro-batch mb */
    uint64_t (*seed)(void *ctx, int mb);
    /* OPTIMIZER_STEP: gradients are reduced; update floats [lo, hi) of the
     * flat parameter buffer (merak_stage_share).  The stage all-gathers the
     * ZeRO shares afterwards. */
    int (*optimizer_step)(void *ctx, char *err, size_t errlen);
} merak_stage_hooks;

/* Builds this rank's stage of `model` (which must outlive it) on comm's
 * grid at the bounds o gives: shard, recomputation, schedule, executor
 * (parameters uninitialised).  Not collective; 0, or MERAK_FAILED with err for this
 * rank, or MERAK_USAGE when the options cannot work for this model and layout (a usage error:
 * a schedule that needs more micro-batches, a recompute budget no number of
 * recomputed layers reaches). */
int merak_stage_create(merak_comm *comm, const merak_graph *model, const merak_stage_opts *o,
                       merak_stage **out, char *err, size_t errlen);
void merak_stage_destroy(merak_stage *s);

/* What the stage of grid position gr (its dp, tp and pp rank) would hold,
 * worked out by the same code merak_stage_create runs, allocating no
 * backend memory and needing no communicator: the planner's memory model
 * is the runtime's own plan.  All sizes in bytes but share. */
typedef struct merak_stage_mem {
    size_t params;        /* the flat parameter buffer; the gradients' is as big */
    size_t param_elems;   /* parameter elements in it (without alignment gaps) */
    size_t activations;   /* the slots' arenas and the recompute buffers */
    size_t device;        /* everything the stage takes from the backend's alloc */
    size_t share;         /* floats of the flat buffer this rank updates (ZeRO share) */
    size_t in_bytes, out_bytes; /* one micro-batch's activations received and sent, all chunks */
    size_t tied;          /* parameters it shares with the other end stage (all-reduced) */
    int layers, recomputed;
    int chunks;
    merak_exec_chunk chunk[MERAK_MAX_CHUNKS]; /* the executor's op ranges, in the shard */
} merak_stage_mem;
int merak_stage_plan(const merak_grid *gr, const merak_graph *model, const merak_stage_opts *o,
                     merak_stage_mem *m, char *err, size_t errlen);

merak_exec *merak_stage_exec(const merak_stage *s);
const merak_graph *merak_stage_graph(const merak_stage *s);  /* this rank's shard, or the model */
const merak_graph *merak_stage_model(const merak_stage *s);  /* the whole model */
/* 1 if the stage reads token ids or targets (and so needs data). */
int merak_stage_loads(const merak_stage *s);
/* Model chunks on this rank (virtual stages: interleaved), else 1. */
int merak_stage_chunks(const merak_stage *s);
/* This stage's activation memory (bytes of its slots and recompute
 * buffers), its layers and how many of them it recomputes. */
void merak_stage_memory(const merak_stage *s, size_t *bytes, int *layers, int *recomputed);
/* Floats [lo, hi) of the flat buffers this rank updates (ZeRO share). */
void merak_stage_share(const merak_stage *s, size_t *lo, size_t *hi);
/* buf (host, the flat buffer's size) holds this rank's share [lo, hi) of
 * something per parameter float (AdamW's moments): the other dp ranks'
 * shares are gathered into it, so it holds the whole stage's.  Without
 * ZeRO the share is everything and nothing moves.  Collective over dp;
 * 0, or -1 with err. */
int merak_stage_allgather_share(merak_stage *s, float *buf, char *err, size_t errlen);

/* Records every instruction and tensor-parallel all-reduce of the steps
 * run from now on into t (NULL: stop recording). */
void merak_stage_set_trace(merak_stage *s, merak_trace *t);

/* Runs one step's instruction list.  0, or -1 with err: this rank failed
 * (its peers may be blocked on it).  The failing instruction, the group
 * call and the peer are named. */
int merak_stage_run(merak_stage *s, const merak_stage_hooks *h, char *err, size_t errlen);

/* Forward only, no gradients, dropout off: M micro-batches (LOAD gets
 * mb = 0..M-1) through every chunk of the pipeline, one after another, and
 * *loss_sum the sum of their mean losses on the last stage's tensor-parallel
 * rank 0 (0 elsewhere).  Every rank of the replica calls it with the same M.
 * 0, or -1 with err naming the instruction. */
int merak_stage_eval(merak_stage *s, const merak_stage_hooks *h, int M, double *loss_sum,
                     char *err, size_t errlen);

/* After merak_stage_run: this rank's part of the step's loss sum (the
 * last stage's tensor-parallel rank 0 holds it; 0 elsewhere) and of the
 * squared gradient norm (every parameter once over the grid). */
double merak_stage_loss_sum(const merak_stage *s);
double merak_stage_grad_sumsq(const merak_stage *s);
/* The step's data-parallel wait and overlap, and the bytes each group
 * moved since merak_stage_run began, into info. */
void merak_stage_step_stats(const merak_stage *s, merak_step_info *info);

/* Every parameter whole on world rank 0, from replica 0's stages and
 * shards (collective over the world).  On rank 0: n parameters, tensors[i]
 * their ids in the model, data[i] their values (host).  0 or -1 with err. */
typedef struct merak_gathered {
    int n;
    int *tensors;
    float **data;
} merak_gathered;
int merak_stage_gather(merak_stage *s, merak_gathered *out, char *err, size_t errlen);
void merak_gathered_free(merak_gathered *g);

#endif /* MERAK_STAGE_H */
