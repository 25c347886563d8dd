/*
 * bad_graph.c - a program of the C API that hands merak_train a graph the
 * step loop cannot feed, under mpirun with pp = 2 (tests/mpi/mpi_bad_graph.sh):
 *   bad_graph SHARD noids   the token input is not called input_ids
 *   bad_graph SHARD shape   input_ids is (2,16), the arguments say (4,16)
 * Every rank must fail alike: rank 0 prints one line, all exit 1.
 */
#include <stdio.h>
#include <string.h>

#include "merak/merak.h"

enum { V = 256, C = 32, F = 64, T = 16 };

static int param(merak_graph *g, const char *name, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    merak_param_init init = {d1 ? MERAK_INIT_NORMAL : MERAK_INIT_ONES, 0.02f};
    return merak_graph_param(g, name, d1 ? 2 : 1, shape, init, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "noids") && strcmp(argv[2], "shape"))) {
        fprintf(stderr, "usage: %s SHARD noids|shape\n", argv[0]);
        return 2;
    }
    int noids = strcmp(argv[2], "noids") == 0;
    char err[512];
    if (merak_init(0, 0, 2, err, sizeof err) < 0) {
        if (err[0])
            fprintf(stderr, "bad_graph: %s\n", err);
        return 1;
    }
    merak_graph *g = merak_graph_create();
    int64_t bt[2] = {2, T};
    int ids = merak_graph_input(g, noids ? "tokens" : "input_ids", MERAK_I32, 2, bt);
    int targets = merak_graph_input(g, "targets", MERAK_I32, 2, bt);
    int wte = param(g, "wte", V, C);
    int x = merak_op_embedding(g, ids, wte);                                   /* (B,T,C) */
    x = merak_op_layernorm(g, x, param(g, "ln.weight", C, 0), -1, 1e-5f);
    x = merak_op_gelu(g, merak_op_linear(g, x, param(g, "up.weight", F, C), -1));  /* (B,T,F) */
    x = merak_op_linear(g, x, param(g, "down.weight", C, F), -1);              /* (B,T,C) */
    if (merak_op_cross_entropy(g, merak_op_linear(g, x, wte, -1), targets) < 0) {
        fprintf(stderr, "bad_graph: %s\n", merak_graph_error(g));
        return 1;
    }
    merak_args a;
    merak_args_default(&a);
    a.data = argv[1];
    a.micro_batch = noids ? 2 : 4;
    a.seq_len = T;
    a.micro_batches = 2;
    a.steps = 2;
    int steps = merak_train(g, &a, err, sizeof err);
    merak_graph_destroy(g);
    if (steps == -2) {
        fprintf(stderr, "bad_graph: %s\n", err);
        merak_abort(1);
    }
    if (steps < 0) {
        if (err[0])
            fprintf(stderr, "bad_graph: %s\n", err);
        return 1;
    }
    return 0;
}
