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

/* A calibration's roofline: per op kind, the seconds of a micro-batch's
 * forward and backward and their work (FLOPs for linear and attention,
 * twice the forward's backward; for the others their operands' bytes at
 * the run's element size, forward, and twice that backward: the least
 * their passes move), and the peaks measured beside them with the same
 * kernels: a large product's FLOP/s in the run's arithmetic (n x n by
 * n x n) and a device-to-device copy's bytes/s (read and written). */
typedef struct merak_roofline {
    double fwd_s[MERAK_OP_COUNT_], bwd_s[MERAK_OP_COUNT_];
    double fwd_work[MERAK_OP_COUNT_], bwd_work[MERAK_OP_COUNT_];
    unsigned char flops[MERAK_OP_COUNT_];   /* 1: its work is FLOPs (against the product) */
    double product, copy;    /* FLOP/s, bytes/s; 0 when not measured (why says why) */
    int product_n;
    double copy_bytes;
    /* on a backend with marks (kernels.h mark): the op boundaries timed,
     * those where the device had caught up with the host, and how far
     * behind it ran on average, in seconds (merak_exec_ops_lag); else 0 */
    size_t lag_bounds, lag_caught;
    double lag_mean, lag_threshold;   /* (caught up: under lag_threshold behind) */
    char why[256];
} merak_roofline;

/* Measures the local device with kernels k (their products already set
 * for the arithmetic): runs the forward and backward of g (in one
 * process, its micro-batch shape; with `rates` BF16 in bf16 storage, or
 * its values in float storage with float_storage) `reps` times after one
 * warm-up, timing every op, and sets d's measured rates of every op kind
 * in that arithmetic (d->op_fwd[rates], op_bwd[rates]), and for FP32 its
 * matrix rate (linear layers) and memory rate (the element-wise ops); the
 * rest of d is left as it was.  With roof, fills it too (the peaks
 * measured after the ops, a smaller product and copy on a device short
 * of memory; none, with why, when they fail).  0, or -1 with err. */
int merak_device_calibrate(const merak_graph *g, const merak_kernels *k, int reps, merak_rates rates,
                           int float_storage, merak_device *d, merak_roofline *roof, char *err, size_t errlen);

/* Seconds a ring all-reduce of `bytes` over n ranks takes on links of bw
 * bytes/s with `latency` per message (0 for n = 1). */
double merak_allreduce_time(double bytes, int n, double bw, double latency);

/* Seconds of op i of g (a shard for tp > 1: its TP ops are all-reduces
 * over tp ranks on intra-node links) on device d, forward and backward:
 * by d's measured rates of d->rates for its kind, else fp32's, else its
 * matrix and memory rates. */
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
