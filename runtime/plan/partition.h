/*
 * partition.h - cutting the graph into pipeline stages.
 *
 * A cut goes only between ops where exactly one activation crosses (Merak's
 * rule: a skip connection never crosses a cut).  Graph inputs are not
 * activations: each stage loads the inputs it reads.
 */
#ifndef MERAK_PARTITION_H
#define MERAK_PARTITION_H

#include <stddef.h>

#include "graph/graph.h"

typedef enum merak_partition_kind {
    MERAK_PARTITION_UNIFORM,     /* balance the number of ops */
    MERAK_PARTITION_PARAMETERS,  /* balance the parameter elements each stage holds */
} merak_partition_kind;

int merak_partition_parse(const char *name, merak_partition_kind *kind);

/* The one activation crossing a cut before op k, or -1 if k is not a cut
 * point (none or several cross). */
int merak_cut_tensor(const merak_graph *g, int k);

/* The cut points k with begin < k < end into cuts (room for end - begin
 * entries); returns their number, or -1 out of memory.  A stage's layers,
 * for recomputation, are its segments between them. */
int merak_cut_points(const merak_graph *g, int begin, int end, int *cuts);

/* Fills bounds[0..pp] (bounds[0] = 0, bounds[pp] = number of ops) so stage s
 * runs ops [bounds[s], bounds[s+1]), minimising the largest stage's cost.
 * Returns 0, or -1 with err if the graph has fewer than pp-1 cut points. */
int merak_partition(const merak_graph *g, int pp, merak_partition_kind kind, int *bounds,
                    char *err, size_t errlen);

/* Where a cut before op k of a graph falls in its tensor-parallel shard
 * (merak_graph_shard): the first op of `local` that comes from op k or
 * later, so the ops inserted for tensor parallelism stay with the op they
 * serve. */
int merak_partition_map(const merak_graph *local, int k);

#endif /* MERAK_PARTITION_H */
