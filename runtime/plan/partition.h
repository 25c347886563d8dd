/*
 * partition.h - cutting a model into pipeline stages.
 *
 * The units are blocks: the segments of the graph between its cut points
 * (merak_cut_points: one activation crosses), about one per attention or
 * MLP sub-block, plus the embedding and the head with its loss.  A stage is
 * a contiguous, never empty run of blocks.  Every method works on a block
 * list with per-block costs, so the same code partitions a graph and a
 * list a user gives (merak-plan --partition-costs).
 *
 * Methods (merak_partition_check parses them):
 *   uniform      the same number of blocks per stage (the later stages
 *                take the remainder)
 *   parameters   min-max over each stage's parameter elements
 *                (DeepSpeed's and Merak's `parameters`)
 *   autopipe     the fastest predicted step: AutoPipe's min-max dynamic
 *                programme over forward + backward time as the start, a
 *                local search moving blocks across the boundaries around
 *                the critical stage, then an exact branch and bound over
 *                every partition that can still beat the best found,
 *                within an evaluation budget (Merak's planner ignores
 *                communication; here each cut costs its transfer time).
 *                Its bounds: each stage's own work and the pipeline's
 *                fill and drain around it, the cycles through every run
 *                of stages (a backward waits for a forward that went
 *                through them and back), and a dynamic programme over the
 *                stages not yet cut; on a GPT-2-XL chain of 98 blocks at
 *                8 stages the search ends in milliseconds, exact
 *   custom:S0,S1,...  the user's first block of each stage (S0 = 0)
 *
 * The step time a partition is judged by is the 1F1B schedule's, from an
 * event model of its order on the stages' summed costs (partition.c; the
 * schedule simulator's makespan where every cut costs the same).
 */
#ifndef MERAK_PARTITION_H
#define MERAK_PARTITION_H

#include <stddef.h>

#include "graph/graph.h"

/* A chain of n blocks and what one micro-batch costs on each, in any one
 * unit of time. */
typedef struct merak_blocks {
    int n;
    double *fwd, *bwd;     /* forward; backward (input and weight gradients) */
    double *params;        /* parameter elements each holds (the parameters method) */
    double *comm;          /* comm[i]: moving the activation that crosses the cut
                            * before block i (and its gradient back); comm[0] unused */
    /* Where the ends may be cut (a weight tied between the first and the
     * last stage, the embedding and the LM head, must be read there only):
     * the first stage holds at least blocks [0, first_end), the last one
     * starts at or before block last_start.  merak_blocks_alloc sets 1 and
     * n - 1: no constraint. */
    int first_end, last_start;
    /* autopipe's search budget, in ops its step predictions run (about 5 ns
     * each); 0: 2e8.  Past it, the best partition found so far stands. */
    double budget;
} merak_blocks;

/* n blocks of zero cost; 0, or -1 out of memory. */
int merak_blocks_alloc(merak_blocks *b, int n);
void merak_blocks_free(merak_blocks *b);

/* Checks a method's spelling (see above); 0, or -1 with one line in err. */
int merak_partition_check(const char *method, char *err, size_t errlen);

/* The predicted 1F1B step time of the partition whose stage s starts at
 * block starts[s], for M >= stages micro-batches: 0, or -1 with err. */
int merak_partition_predict(const merak_blocks *b, int stages, int M, const int *starts, double *step,
                            char *err, size_t errlen);

/* The most blocks^2 x stages autopipe takes (its dynamic programmes grow
 * so): 2048 blocks into 256 stages, a few seconds. */
#define MERAK_AUTOPIPE_MAX_WORK (1.0 * (1 << 30))

/* Partitions b into `stages` stages by `method`: starts[0..stages) the
 * first block of each, and the predicted step of M micro-batches in *step
 * (may be NULL).  0; MERAK_FAILED with err; MERAK_USAGE with err when the method cannot
 * work for this chain (more stages than blocks, a custom list that does
 * not fit it: a usage error). */
int merak_partition_blocks(const merak_blocks *b, int stages, int M, const char *method, int *starts,
                           double *step, char *err, size_t errlen);

/* The blocks of graph g: *first (malloc'ed, [n + 1]) the first op of each
 * and then nops; the costs are left zero for the caller (the cost model)
 * except params, and the ends constrained so every block reading a tied
 * parameter falls in the first or the last stage.  0, or -1 out of memory. */
int merak_graph_blocks(const merak_graph *g, merak_blocks *b, int **first, char *err, size_t errlen);

/* Fills bounds[0..stages] (bounds[0] = 0, bounds[stages] = g's ops) so
 * stage s runs ops [bounds[s], bounds[s+1]) of g, and starts[0..stages)
 * with each stage's first block; b (from merak_graph_blocks, its costs
 * filled) and first describe g.  *step (may be NULL) gets the predicted
 * step as merak_partition_blocks's.  Returns the statuses of
 * merak_partition_blocks; more stages than blocks names the graph's cut
 * points. */
int merak_partition_graph(const merak_blocks *b, const int *first, int stages, int M, const char *method,
                          int *starts, int *bounds, double *step, char *err, size_t errlen);

#endif /* MERAK_PARTITION_H */
