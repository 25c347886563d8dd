/*
 * cost.h - the planner's cost model: what a device does per second, and
 * what each op of a graph costs on it.
 *
 * Device profiles live in an editable JSON file (data/devices.json,
 * installed as $(pkgdatadir)/devices.json; MERAK_DEVICES names another):
 *   {"devices": {"h100-80g": {"memory_gb": 80, "matmul_tflops": 400,
 *     "memory_gbps": 2700, "intra_node_gbps": 360, "inter_node_gbps": 45,
 *     "latency_us": 8}, ...}}
 * A profile file of its own (merak-plan --calibrate writes one) holds one
 * device object at the top level.  A profile may also hold measured rates
 * per op kind, "ops": {"linear": {"forward": r, "backward": r}, ...}, in
 * FLOP/s for linear and attention and bytes/s for the others (forward
 * bytes, for the backward too); an op kind it lists is timed by them.
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

#include <stdio.h>

#include "graph/graph.h"
#include "kernels.h"
#include "partition.h"

typedef struct merak_device {
    double memory;           /* bytes per device */
    double matmul;           /* FLOP/s of linear and attention */
    double mem_bw;           /* bytes/s the element-wise ops see */
    double intra, inter;     /* bytes/s one way: a link inside a node, between nodes */
    double latency;          /* seconds per message */
    double reserved;         /* bytes the device's context and libraries take (optional
                              * "reserved_gb"; 0 if absent) */
    /* measured work per second of each op kind's forward and backward
     * (FLOP/s for linear and attention, bytes/s for the rest); 0: from the
     * rates above */
    double op_fwd[MERAK_OP_COUNT_], op_bwd[MERAK_OP_COUNT_];
} merak_device;

/* The device profile `name`: a key of the devices file (MERAK_DEVICES, else
 * the installed one), or a path (containing '/' or ending in .json) to a
 * file holding one profile or a devices table (whose only or `name`d
 * entry is taken).  0, or -1 with one line naming the file and the field;
 * -2 for a name the devices file lacks (the line lists the known ones). */
int merak_device_load(const char *name, merak_device *d, char *err, size_t errlen);

/* Writes d as a profile file's JSON (one device at the top level); 0, or
 * -1 if the stream failed. */
int merak_device_write(const merak_device *d, FILE *f);

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
 * does) takes over a link of link_bw bytes/s. */
double merak_cut_time(const merak_graph *g, int k, const merak_device *d, double link_bw);

/* Fills b's forward and backward times (seconds per micro-batch) for the
 * blocks of g (merak_graph_blocks; first[] their first ops) from the ops
 * of `local`, g's tensor-parallel shard (or g itself), and the time to
 * move each cut's activation over a link of link_bw bytes/s. */
void merak_blocks_cost(const merak_graph *g, const int *first, const merak_graph *local, const merak_device *d,
                       double link_bw, merak_blocks *b);

#endif /* MERAK_COST_H */
