/* preset.h - the unit tests' model graphs: a preset built at a micro-batch
 * shape, with the last error in `err` (which the tests also use); and two
 * micro-batches run through an executor the ways the runtime runs them. */
#ifndef MERAK_TEST_PRESET_H
#define MERAK_TEST_PRESET_H

#include "kernels.h"
#include "merak/merak.h"
#include "pipe/exec.h"

static char err[512];

static merak_graph *build(const char *preset, int B, int T)
{
    merak_model_config c;
    if (merak_model_preset(preset, &c) < 0)
        return NULL;
    return merak_model_build(&c, B, T, err, sizeof err);
}

/* How run_two runs the backward: whole, split in zero-bubble order (both
 * input parts, then both weight parts), or with every layer recomputed. */
enum { RUN_WHOLE, RUN_SPLIT, RUN_RECOMPUTED, RUN_WAYS };

static inline const char *run_name(int how)
{
    return how == RUN_SPLIT ? "split backward" : how == RUN_RECOMPUTED ? "recomputed" : "whole backward";
}

/* Two slots of g's whole graph, and the executor options `how` needs. */
static inline merak_exec_opts run_opts(const merak_graph *g, int how, merak_exec_chunk *whole)
{
    *whole = (merak_exec_chunk){0, -1, 2, how == RUN_RECOMPUTED ? g->nops : 0};
    return (merak_exec_opts){.chunks = whole, .nchunks = 1, .kernels = merak_kernels_cpu(), .split = how == RUN_SPLIT,
                             .npool = how == RUN_RECOMPUTED ? 2 : 0};
}

/* Two micro-batches in gpipe order (both forwards, then both backwards,
 * the later first), from zeroed gradients and rounded compute copies. */
static inline void run_two(merak_exec *e, int how)
{
    merak_exec_cast_params(e);
    merak_exec_zero_grads(e);
    merak_exec_forward(e, 0, 11);
    merak_exec_forward(e, 1, 12);
    for (int s = 1; s >= 0; s--) {
        if (how == RUN_RECOMPUTED)
            merak_exec_recompute(e, s);
        if (how == RUN_SPLIT)
            merak_exec_backward_input(e, s);
        else
            merak_exec_backward(e, s);
    }
    for (int s = 1; how == RUN_SPLIT && s >= 0; s--)
        merak_exec_backward_weight(e, s);
}

#endif
