/*
 * device.h - device profiles: what a device does per second and holds,
 * read from and written to JSON (the planner's cost model, cost.h, times
 * ops with them).
 *
 * Profiles live in editable JSON files.  data/devices.json is compiled into
 * libmerak (merak_devices_builtin below), so programs find it in the build
 * tree and installed alike; make install also puts it in
 * $(pkgdatadir)/devices.json, where a site edits or adds profiles, and
 * MERAK_DEVICES names a file of one's own.  A name is looked up in
 * MERAK_DEVICES, then the installed file, then the built-in table: each
 * file extends the tables below it and overrides their entries by name.
 *   {"devices": {"h100-80g": {"memory_gb": 80, "matmul_tflops": 400,
 *     "memory_gbps": 2700, "intra_node_gbps": 360, "inter_node_gbps": 45,
 *     "latency_us": 8}, ...}}
 * A profile file of its own (merak-plan --calibrate writes one) holds one
 * device object at the top level.  A profile may also hold measured rates
 * per op kind, "ops": {"linear": {"forward": r, "backward": r}, ...}, in
 * FLOP/s for linear and attention and bytes/s for the others (forward
 * bytes at 4 bytes an element, for the backward too): fp32's (which tf32
 * plans use too), and "ops_bf16" likewise, measured in bf16 (merak-plan
 * --calibrate --dtype bf16); an op kind the plan's arithmetic's table
 * lists is timed by it, else by fp32's, else by the rates below.
 */
#ifndef MERAK_DEVICE_H
#define MERAK_DEVICE_H

#include <stdio.h>

#include "graph/graph.h"

/* The arithmetic of a table of measured op rates: "ops" (fp32, and tf32
 * plans), "ops_bf16". */
typedef enum merak_rates { MERAK_RATES_FP32, MERAK_RATES_BF16, MERAK_RATES_COUNT_ } merak_rates;

typedef struct merak_device {
    double memory;           /* bytes per device */
    double matmul;           /* FLOP/s of linear and attention */
    double mem_bw;           /* bytes/s the element-wise ops see */
    double intra, inter;     /* bytes/s one way: a link inside a node, between nodes */
    double latency;          /* seconds per message */
    double reserved;         /* bytes the device's context and libraries take (optional
                              * "reserved_gb"; 0 if absent) */
    /* measured work per second of each op kind's forward and backward
     * (FLOP/s for linear and attention, bytes/s for the rest) in each
     * arithmetic (merak_rates); 0: not measured */
    double op_fwd[MERAK_RATES_COUNT_][MERAK_OP_COUNT_], op_bwd[MERAK_RATES_COUNT_][MERAK_OP_COUNT_];
    /* the table a plan times with (the planner sets it from its dtype;
     * a loaded profile has FP32) */
    merak_rates rates;
    /* the kernels' backend it is ("backend": "cpu" or "cuda"; "cpu" when
     * absent), whose table the executor's memory is planned with
     * (merak_kernels_plan: which ops run natively in bf16 storage); a
     * name no backend has is refused by merak_layout_plan */
    char backend[16];
} merak_device;

/* The text of data/devices.json, made into C by the build (Makefile.am). */
extern const char merak_devices_builtin[];

/* The device profile `name`: a key of the devices tables (MERAK_DEVICES,
 * the installed file, the built-in table; the first that has it), or a path (containing '/' or ending in .json) to a
 * file holding one profile or a devices table (whose only or `name`d
 * entry is taken).  0, or MERAK_FAILED with one line naming the file and
 * the field; MERAK_USAGE for a name no table has (the line names the tables read and every
 * profile they hold).  A MERAK_DEVICES file that cannot be read, or an
 * installed file that exists but cannot, is an error (MERAK_FAILED), never skipped. */
int merak_device_load(const char *name, merak_device *d, char *err, size_t errlen);

/* Writes d as a profile file's JSON (one device at the top level), every
 * number in the fewest digits that read back as the same double: what
 * merak_device_load reads from it is d.  0, or -1 if the stream failed. */
int merak_device_write(const merak_device *d, FILE *f);

#endif
