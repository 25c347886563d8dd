/*
 * cost.h - the planner's cost model: what each op of a graph costs on a
 * device (device.h gives its rates), and measuring those rates.
 *
 * An op's forward takes the longer of its FLOPs at the matrix rate (linear
 * and attention; other ops do no matrix work) and its bytes at the memory
 * rate; its backward does twice the work (the input and the weight
 * gradients; attention and the element-wise ops read and write twice as
 * much).  A tensor-parallel sum is a ring all-reduce over the node's links.
 */
#ifndef MERAK_COST_H
#define MERAK_COST_H

#include <stddef.h>

#include "device.h"
#include "graph/graph.h"
#include "kernels.h"
#include "partition.h"

/* Measures the local device with kernels k: runs the forward and backward
 * of g (in one process, its micro-batch shape) `reps` times after one
 * warm-up, timing every op, and sets d's matrix rate (linear layers), its
 * memory rate (the element-wise ops) and every op kind's measured rates;
 * the rest of d is left as it was.  0, or -1 with err. */
int merak_device_calibrate(const merak_graph *g, const merak_kernels *k, int reps, merak_device *d, char *err,
                           size_t errlen);

/* Seconds a ring all-reduce of `bytes` over n ranks takes on links of bw
 * bytes/s with `latency` per message (0 for n = 1). */
double merak_allreduce_time(double bytes, int n, double bw, double latency);

/* Seconds of op i of g (a shard for tp > 1: its TP ops are all-reduces
 * over tp ranks on intra-node links) on device d, forward and backward. */
void merak_op_time(const merak_graph *g, int i, const merak_device *d, double *fwd, double *bwd);

/* Seconds the activation crossing cut k of g (merak_cut_tensor; 0 if none
 * does) takes over a link of link_bw bytes/s, elem bytes an element (4, or
 * 2 in bf16 storage). */
double merak_cut_time(const merak_graph *g, int k, const merak_device *d, double link_bw, double elem);

/* Fills b's forward and backward times (seconds per micro-batch) for the
 * blocks of g (merak_graph_blocks; first[] their first ops) from the ops
 * of `local`, g's tensor-parallel shard (or g itself), and the time to
 * move each cut's activation (elem bytes an element) over a link of
 * link_bw bytes/s. */
void merak_blocks_cost(const merak_graph *g, const int *first, const merak_graph *local, const merak_device *d,
                       double link_bw, double elem, merak_blocks *b);

#endif /* MERAK_COST_H */
