/*
 * layout.h - what a training layout costs before it runs: the stages a
 * partitioner gives, each rank's memory and the step time.
 *
 * A layout is dp x tp x pp ranks (world rank = tp_rank + tp (dp_rank +
 * dp pp_rank), the runtime's grid), gpus_per_node of them to a node, with
 * a schedule, a recomputation policy, M micro-batches per replica and
 * optionally ZeRO-1.  merak_layout_plan partitions the model as the
 * trainer would and then, for every pipeline stage:
 *
 * Memory: the runtime's own plan of the stage (merak_stage_plan: the same
 * code that builds it, allocating nothing): parameters, their gradients,
 * the activation slots the schedule keeps and the recompute buffers, the
 * kernels' scratch, the ZeRO shard; plus AdamW's two floats per parameter
 * the rank updates (its ZeRO share) and the device's reserved memory.
 * The stage of dp rank 0 (the largest ZeRO share).  Values are float32,
 * as the runtime trains, but for bf16's (L->bf16): the activations and
 * their gradients in bf16 storage, the weights' bf16 copies, and 2 bytes
 * an element on the pipeline's links.
 *
 * Time: each virtual stage's forward, backward (its weight share: half
 * the linear layers' backward), recompute and send times from the cost
 * model (cost.h, the tensor-parallel sums included) go through the schedule
 * simulator with the schedule's real instruction lists; the step adds the
 * slowest stage's data-parallel gradient all-reduce (ring; ZeRO's
 * reduce-scatter and all-gather move as much), the tied-weight all-reduce
 * of the end stages and AdamW's update (7 floats read or written per
 * parameter at the memory rate), none overlapped.  Links: a group inside
 * one node uses intra, else inter (the pipeline's, if any cut crosses
 * nodes).
 */
#ifndef MERAK_LAYOUT_H
#define MERAK_LAYOUT_H

#include <stddef.h>

#include "cost.h"
#include "graph/graph.h"
#include "pipe/policy.h"

/* The most micro-batches per replica a layout plans (as merak-train takes). */
#define MERAK_MAX_MICRO_BATCHES (1 << 20)

typedef struct merak_layout {
    int dp, tp, pp;
    int gpus_per_node;           /* ranks per node; tp must divide it */
    const int *node_of;          /* [dp*tp*pp] the node of each world rank (merak_comm_nodes),
                                  * or NULL: rank / gpus_per_node */
    merak_schedule_kind schedule;
    int virtual_stages;          /* interleaved: chunks per stage (0: 2); others 0 or 1 */
    merak_recompute recompute;
    int micro_batches;           /* M per replica */
    int zero;                    /* 1: ZeRO-1 over dp */
    int bf16;                    /* --dtype bf16: activations in bf16 storage, weight copies
                                  * (the runtime's plan) and bf16 pipeline transfers */
    int float_storage;           /* bf16 values kept in float storage (MERAK_BF16_STORAGE=float,
                                  * or sub-batches): 4 bytes an element on the links */
    const char *partition;       /* method (partition.h); NULL: autopipe */
    const merak_tp_rule *rules;  /* tensor-parallel rules over the graph's own, or NULL */
    int nrules;
    /* Optional, to plan many layouts of one model quickly: the graph's
     * shard for tp rank 0 (merak_graph_shard with the rules; NULL: made
     * here), and the virtual stages' first blocks [pp*V] and op bounds
     * [pp*V + 1] from merak_layout_cut for this layout's dp, tp, pp, V
     * and M (NULL: cut here) */
    const merak_graph *shard;
    const int *starts, *bounds;
    /* > 0: when the step cannot be shorter than this (its lower bound,
     * below, is at least this), the schedule is not simulated: a search
     * skips what cannot win */
    double skip_above;
    double search_work;          /* autopipe's search budget (partition.h); 0: the default */
} merak_layout;

typedef struct merak_layout_stage {
    int first_block;             /* its first chunk's first block */
    int layers, recomputed;
    double params;               /* parameter elements one of its ranks holds */
    /* bytes one of its ranks holds: parameters, gradients, AdamW state,
     * activations (slots and recompute buffers), the rest of what the
     * runtime allocates (scratch, ZeRO shard, alignment) and the device's
     * reserved memory; total their sum */
    double mem_params, mem_grads, mem_optimizer, mem_activations, mem_other, mem_total;
    double fwd, bwd, recompute;  /* seconds per micro-batch, all its chunks */
    double bwd_weight;           /* the weight-gradient share of bwd */
} merak_layout_stage;

typedef struct merak_layout_result {
    int stages;                  /* pp */
    merak_layout_stage *stage;   /* [pp] */
    int *starts;                 /* [pp * V] first block of each virtual stage */
    int chunks;                  /* V */
    int blocks;                  /* the model's blocks */
    double pipeline;             /* simulated makespan of the schedule, seconds */
    double reduce;               /* data-parallel and tied-weight reductions */
    double optimizer;            /* AdamW's update */
    double step;                 /* their sum (the lower bound when not simulated) */
    double bound;                /* a lower bound of step: the busiest stage's forwards and
                                  * backwards of M micro-batches, and the rest */
    int simulated;               /* 0: step is the bound (skip_above) */
    double bubble;               /* idle fraction of the pipeline */
    double tokens_per_s;
    double model_flops;          /* per step: forward and backward, no recompute */
    double mfu;                  /* model_flops / (step x ranks x matmul rate) */
    double available;            /* bytes a rank may use (the device's memory) */
    int worst;                   /* the stage with the most memory */
    int fits;                    /* every stage's total within available */
} merak_layout_result;

/* Checks the layout's numbers against each other (degrees, tp dividing
 * the node, M for the schedule, the partition method; whether the model
 * splits tp ways is merak_layout_plan's): 0, or MERAK_USAGE with one line in err. */
int merak_layout_check(const merak_layout *L, char *err, size_t errlen);

/* Cuts g for layout L as merak_layout_plan does, and as merak-train does:
 * pp*V stages by L's partition method for L's M micro-batches (autopipe
 * balancing for M = pp*V when M is smaller); autopipe times the ops of
 * L's shard on d and each cut's activation over the pipeline's link (a
 * node's intra-node links if no pipeline cut leaves a node, else the
 * inter-node ones), within L's search budget.  d may be NULL for the other
 * methods and for one stage.  starts [pp*V] the first block of each,
 * bounds [pp*V + 1] their ops; *step (may be NULL) autopipe's predicted
 * 1F1B pipeline when M >= pp*V, else 0.  0, MERAK_FAILED, or MERAK_USAGE when the method
 * cannot work for this model and layout (a usage error). */
int merak_layout_cut(const merak_graph *g, const merak_layout *L, const merak_device *d, int *starts, int *bounds,
                     double *step, char *err, size_t errlen);

/* Plans layout L of g (built for one micro-batch: its input_ids' shape)
 * on device d into r (free with merak_layout_result_free).  A layout
 * that does not fit is planned all the same (r->fits 0).  0; MERAK_FAILED
 * with err; MERAK_USAGE with err when the layout cannot run (merak_layout_check, a schedule
 * or recompute budget that cannot work). */
int merak_layout_plan(const merak_graph *g, const merak_layout *L, const merak_device *d,
                      merak_layout_result *r, char *err, size_t errlen);
void merak_layout_result_free(merak_layout_result *r);

/* Bytes of AdamW's state over `share` parameter floats: its two moments,
 * as merak_optim_create allocates them (one float each at least). */
double merak_adamw_bytes(size_t share);

/* The blocks g can be cut into (its cut points + 1); 0 out of memory. */
int merak_layout_blocks(const merak_graph *g);

#endif /* MERAK_LAYOUT_H */
