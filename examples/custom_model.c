/*
 * custom_model.c - a model of your own, built from Merak's ops through the
 * public C API and trained in 3D (data, tensor and pipeline parallel).
 *
 * The model is a small pre-norm transformer variant that is neither GPT-2
 * nor LLaMA: LayerNorm without bias, grouped-query attention (4 query heads,
 * 2 key/value heads) with rotary embeddings, and a GELU MLP with biases, two
 * layers, a tied head.  Beyond the model, parallelism takes merak_init(),
 * five tensor-parallel rules and the trainer; the graph is cut into stages
 * and sharded automatically.
 *
 * Usage: custom_model SHARD.bin [STEPS [DP TP PP]]
 *        mpirun -np 8 custom_model SHARD.bin 30 2 2 2
 * (make a shard with: merak-shard -o SHARD.bin some.txt)
 */
#include <stdio.h>
#include <stdlib.h>

#include "merak/merak.h"

enum { V = 256, C = 64, H = 4, KV = 2, F = 192, LAYERS = 2, B = 4, T = 32, M = 4 };

static int param(merak_graph *g, const char *name, int ndim, int64_t d0, int64_t d1, merak_init_kind kind)
{
    int64_t shape[2] = {d0, d1};
    merak_param_init init = {kind, 0.02f};
    return merak_graph_param(g, name, ndim, shape, init, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
}

/* Returns the graph, or NULL after printing why. */
static merak_graph *build(void)
{
    merak_graph *g = merak_graph_create();
    if (!g) {
        fprintf(stderr, "custom_model: out of memory\n");
        return NULL;
    }
    int64_t bt[2] = {B, T};
    int hd = C / H;
    char name[64];
    int ids = merak_graph_input(g, "input_ids", MERAK_I32, 2, bt);
    int targets = merak_graph_input(g, "targets", MERAK_I32, 2, bt);
    int wte = param(g, "embed.weight", 2, V, C, MERAK_INIT_NORMAL);
    int x = merak_op_embedding(g, ids, wte);                         /* (B,T,C) */
    for (int l = 0; l < LAYERS; l++) {
        snprintf(name, sizeof name, "layer%d.norm1.weight", l);
        int n1 = param(g, name, 1, C, 0, MERAK_INIT_ONES);
        snprintf(name, sizeof name, "layer%d.q.weight", l);
        int wq = param(g, name, 2, C, C, MERAK_INIT_NORMAL);
        snprintf(name, sizeof name, "layer%d.k.weight", l);
        int wk = param(g, name, 2, KV * hd, C, MERAK_INIT_NORMAL);
        snprintf(name, sizeof name, "layer%d.v.weight", l);
        int wv = param(g, name, 2, KV * hd, C, MERAK_INIT_NORMAL);
        snprintf(name, sizeof name, "layer%d.out.weight", l);
        int wo = param(g, name, 2, C, C, MERAK_INIT_NORMAL);
        snprintf(name, sizeof name, "layer%d.norm2.weight", l);
        int n2 = param(g, name, 1, C, 0, MERAK_INIT_ONES);
        snprintf(name, sizeof name, "layer%d.up.weight", l);
        int wu = param(g, name, 2, F, C, MERAK_INIT_NORMAL);
        snprintf(name, sizeof name, "layer%d.up.bias", l);
        int bu = param(g, name, 1, F, 0, MERAK_INIT_ZEROS);
        snprintf(name, sizeof name, "layer%d.down.weight", l);
        int wd = param(g, name, 2, C, F, MERAK_INIT_NORMAL);

        int h = merak_op_layernorm(g, x, n1, -1, 1e-5f);
        int q = merak_op_linear(g, h, wq, -1);                       /* (B,T,C) */
        int k = merak_op_linear(g, h, wk, -1);                       /* (B,T,KV*hd) */
        int v = merak_op_linear(g, h, wv, -1);
        int a = merak_op_attention(g, q, k, v, H, KV, 10000.0f);     /* GQA + RoPE */
        x = merak_op_add(g, x, merak_op_linear(g, a, wo, -1));
        h = merak_op_layernorm(g, x, n2, -1, 1e-5f);
        h = merak_op_gelu(g, merak_op_linear(g, h, wu, bu));         /* (B,T,F) */
        x = merak_op_add(g, x, merak_op_linear(g, h, wd, -1));
    }
    int nf = param(g, "norm.weight", 1, C, 0, MERAK_INIT_ONES);
    x = merak_op_layernorm(g, x, nf, -1, 1e-5f);
    int logits = merak_op_linear(g, x, wte, -1);                     /* tied head (B,T,V) */
    if (merak_op_cross_entropy(g, logits, targets) < 0) {
        /* After the first error every call returns -1 and changes nothing,
         * so one check here is enough; the message names the failed call. */
        fprintf(stderr, "custom_model: %s\n", merak_graph_error(g));
        merak_graph_destroy(g);
        return NULL;
    }
    return g;
}

static void report(const merak_step_info *i, void *user)
{
    (void)user;
    printf("step %3d | loss %.4f | grad norm %.3f | %.0f tok/s\n", i->step, i->loss, i->grad_norm,
           i->tokens_per_s);
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3 && argc != 6) {
        fprintf(stderr, "usage: %s SHARD.bin [STEPS [DP TP PP]]\n", argv[0]);
        return 2;
    }
    char err[256];
    /* 0 = from MERAK_DP/TP/PP or the rank count; one process without MPI. */
    int dp = argc == 6 ? atoi(argv[3]) : 0, tp = argc == 6 ? atoi(argv[4]) : 0;
    int pp = argc == 6 ? atoi(argv[5]) : 0;
    if (merak_init(dp, tp, pp, err, sizeof err) < 0) {
        if (err[0]) /* rank 0 reports */
            fprintf(stderr, "custom_model: %s\n", err);
        return 1;
    }
    merak_graph *g = build();
    if (!g)
        return 1;
    /* Tensor parallelism: which weights split how (Merak's feature dict). */
    merak_graph_set_tp(g, "embed.weight", MERAK_TP_VOCAB);
    merak_graph_set_tp(g, "layer*.[qkv].weight", MERAK_TP_COLUMN);
    merak_graph_set_tp(g, "layer*.up.weight", MERAK_TP_COLUMN);
    merak_graph_set_tp(g, "layer*.out.weight", MERAK_TP_ROW);
    merak_graph_set_tp(g, "layer*.down.weight", MERAK_TP_ROW);
    if (merak_rank() == 0)
        printf("custom model: %d ops, %d parameters (%.3fM values) on %d rank(s)\n",
               merak_graph_num_ops(g), merak_graph_num_params(g),
               (double)merak_graph_param_elems(g) / 1e6, merak_world_size());

    merak_args a;
    merak_args_default(&a);
    a.data = argv[1];
    a.micro_batch = B;
    a.seq_len = T;
    a.micro_batches = M;
    a.steps = argc > 2 ? atoi(argv[2]) : 30;
    a.lr = 3e-3f;
    a.warmup = 3;
    a.on_step = report;
    merak_trainer *t = merak_trainer_create(g, &a, err, sizeof err);
    int steps = t ? merak_trainer_train(t, err, sizeof err) : -1;
    merak_trainer_destroy(t);
    merak_graph_destroy(g);
    if (steps == -2) { /* this rank failed alone: take the job down */
        fprintf(stderr, "custom_model: %s\n", err);
        merak_abort(1);
    }
    if (steps < 0) {
        if (err[0])
            fprintf(stderr, "custom_model: %s\n", err);
        return 1;
    }
    merak_finalize();
    return 0;
}
