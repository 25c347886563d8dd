/*
 * trainer.c - the training loop: data windows, forward and backward over
 * micro-batches, gradient norm and clipping, learning-rate schedule, AdamW,
 * metrics, and weights in and out.
 *
 * Step i uses windows (i*M + j) mod W for micro-batch j; the reported loss is
 * the mean over the step's positions, before the update.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "data.h"
#include "errf.h"
#include "pipe/pipeline.h"
#include "train.h"

void merak_args_default(merak_args *a)
{
    memset(a, 0, sizeof *a);
    a->micro_batch = 4;
    a->seq_len = 64;
    a->micro_batches = 1;
    a->steps = 10;
    a->lr = 6e-4f;
    a->lr_schedule = MERAK_SCHEDULE_COSINE;
    a->weight_decay = 0.1f;
    a->beta1 = 0.9f;
    a->beta2 = 0.95f;
    a->eps = 1e-8f;
    a->clip = 1.0f;
    a->seed = 1337;
    a->threads = 1;
}

double merak_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t merak_mb_seed(uint64_t seed, uint64_t n)
{
    uint64_t z = seed ^ (n * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 29);
}

int merak_metrics_write(FILE *f, const merak_step_info *i)
{
    fprintf(f,
            "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
            "\"tokens_per_s\": %.6g, \"step_ms\": %.6g, \"dp_wait_ms\": %.6g, \"dp_overlap\": %.4g, "
            "\"bytes\": {\"tp\": %.0f, \"pp\": %.0f, \"dp\": %.0f, \"tied\": %.0f}}\n",
            i->step, i->loss, i->grad_norm, i->lr, i->tokens_per_s, i->step_ms, i->dp_wait_ms,
            i->dp_overlap, i->tp_bytes, i->pp_bytes, i->dp_bytes, i->tied_bytes);
    /* Flushed every step: a crash loses nothing already reported. */
    return fflush(f) == 0 ? 0 : -1;
}

/* Checks the graph has what the trainer feeds and reads; returns the
 * vocabulary size (the loss's logits width) or -1. */
static int check_graph(const merak_graph *g, const merak_args *a, int *ids, int *targets,
                       char *err, size_t errlen)
{
    *ids = merak_graph_find(g, "input_ids");
    *targets = merak_graph_find(g, "targets");
    if (*ids < 0 || *targets < 0 || g->tensors[*ids].kind != MERAK_T_INPUT ||
        g->tensors[*targets].kind != MERAK_T_INPUT)
        return merak_errf(err, errlen, "the graph needs inputs named 'input_ids' and 'targets'");
    if (g->loss < 0)
        return merak_errf(err, errlen, "the graph has no loss (add merak_op_cross_entropy)");
    const merak_tensor *x = &g->tensors[*ids];
    if (x->ndim != 2 || x->shape[0] != a->micro_batch || x->shape[1] != a->seq_len)
        return merak_errf(err, errlen, "the graph's input_ids are not (%d,%d), the micro-batch and sequence length",
                    a->micro_batch, a->seq_len);
    return merak_graph_loss_vocab(g);
}

static int check_args(const merak_args *a, char *err, size_t errlen)
{
    if (!a->data)
        return merak_errf(err, errlen, "no data given");
    if (a->micro_batch < 1 || a->seq_len < 1 || a->micro_batches < 1 || a->steps < 0 ||
        a->warmup < 0 || a->threads < 1)
        return merak_errf(err, errlen, "micro-batch, sequence length, micro-batches and threads must be positive");
    if (!(a->lr >= 0) || !(a->min_lr >= 0) || a->min_lr > a->lr)
        return merak_errf(err, errlen, "learning rates %g (min %g) are not usable", a->lr, a->min_lr);
    if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1) || !(a->eps >= 0) ||
        !(a->weight_decay >= 0) || !(a->clip >= 0))
        return merak_errf(err, errlen, "AdamW settings out of range");
    return 0;
}

/* Started by mpirun or srun (Open MPI, PMIx or PMI environment)? */
static int launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* The runtime's process grid, from merak_init (or the first merak_train). */
static merak_comm *g_comm;
static int g_inited;   /* merak_init succeeded: g_comm, or one process */

int merak_init(int dp, int tp, int pp, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (g_inited)
        return merak_errf(err, errlen, "merak_init was already called");
    if (dp < 0 || tp < 0 || pp < 0)
        return merak_errf(err, errlen, "degrees dp=%d tp=%d pp=%d must not be negative", dp, tp, pp);
    if (launched_by_mpi() || dp > 1 || tp > 1 || pp > 1) {
        if (merak_comm_init(&g_comm, dp, tp, pp, err, errlen) < 0)
            return -1;
    }
    g_inited = 1;
    return 0;
}

int merak_rank(void) { return g_comm ? merak_comm_grid(g_comm)->rank : 0; }
int merak_world_size(void) { return g_comm ? merak_comm_grid(g_comm)->world : 1; }

void merak_finalize(void)
{
    merak_comm_finalize(g_comm);
    g_comm = NULL;
    g_inited = 0;
}

static int train_parallel(const merak_graph *g, const merak_args *a, char *err, size_t errlen)
{
    const merak_grid *gr = merak_comm_grid(g_comm);
    /* Degrees asked for here must be the ones the grid was made with. */
    if ((a->dp && a->dp != gr->dp) || (a->tp && a->tp != gr->tp) || (a->pp && a->pp != gr->pp)) {
        merak_errf(err, errlen, "the arguments ask for dp=%d tp=%d pp=%d but merak_init made dp=%d tp=%d pp=%d",
                   a->dp, a->tp, a->pp, gr->dp, gr->tp, gr->pp);
        if (gr->rank != 0)
            err[0] = 0;
        return -1;
    }
    int steps = merak_train_pipeline(g_comm, g, a, err, errlen);
    if (steps == -1 && gr->rank != 0)
        err[0] = 0; /* rank 0 reports */
    return steps;  /* -2: this rank failed mid-step; the caller ends the job */
}

void merak_abort(int status)
{
    merak_comm_abort(NULL, status);
}

static int train_single(const merak_graph *g, const merak_args *a, char *err, size_t errlen);

int merak_train(const merak_graph *g, const merak_args *a, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!g_inited && merak_init(a->dp, a->tp, a->pp, err, errlen) < 0)
        return -1;
    if (g_comm)
        return train_parallel(g, a, err, errlen);
    if (a->dp > 1 || a->tp > 1 || a->pp > 1)
        return merak_errf(err, errlen, "dp=%d tp=%d pp=%d need MPI, but merak_init started one process",
                          a->dp, a->tp, a->pp);
    return train_single(g, a, err, errlen);
}

/* ------------------------------------------------------------------ trainer object */

struct merak_trainer {
    const merak_graph *g;
    merak_args args;
};

merak_trainer *merak_trainer_create(const merak_graph *g, const merak_args *a, char *err,
                                    size_t errlen)
{
    int ids, tgt;
    if (check_args(a, err, errlen) < 0 || check_graph(g, a, &ids, &tgt, err, errlen) < 0)
        return NULL;
    merak_trainer *t = calloc(1, sizeof *t);
    if (!t) {
        merak_errf(err, errlen, "out of memory");
        return NULL;
    }
    t->g = g;
    t->args = *a;
    return t;
}

int merak_trainer_train(merak_trainer *t, char *err, size_t errlen)
{
    return merak_train(t->g, &t->args, err, errlen);
}

void merak_trainer_destroy(merak_trainer *t) { free(t); }

static int train_single(const merak_graph *g, const merak_args *a, char *err, size_t errlen)
{
    int ids_t, tgt_t;
    if (check_args(a, err, errlen) < 0)
        return -1;
    int vocab = check_graph(g, a, &ids_t, &tgt_t, err, errlen);
    if (vocab < 0)
        return -1;

    const merak_kernels *k = merak_kernels_cpu();
    merak_kernels_cpu_set_threads(a->threads);
    int B = a->micro_batch, T = a->seq_len, M = a->micro_batches;

    merak_exec *e = NULL;
    merak_data *data = NULL;
    merak_optim *opt = NULL;
    FILE *metrics = NULL;
    int step = -1;
    merak_exec_opts eo = {.op_begin = 0, .op_end = -1, .nslots = 1, .kernels = k};
    if (merak_exec_create(g, &eo, &e, err, errlen) < 0)
        goto out;
    if (merak_data_open(a->data, vocab, &data, err, errlen) < 0)
        goto out;
    uint64_t W = merak_data_num_windows(data, B, T);
    if (W == 0) {
        merak_errf(err, errlen, "%s: %llu tokens are fewer than one window of %d x %d + 1", a->data,
             (unsigned long long)merak_data_num_tokens(data), B, T);
        goto out;
    }
    if (a->init) {
        if (merak_weights_load(g, e, a->init, err, errlen) < 0)
            goto out;
    } else {
        merak_init_params(g, e, a->seed);
    }
    merak_adamw_opts ao = {a->beta1, a->beta2, a->eps, a->weight_decay};
    if (!(opt = merak_optim_create(g, e, &ao))) {
        merak_errf(err, errlen, "out of memory for the optimizer state");
        goto out;
    }
    if (a->metrics && !(metrics = fopen(a->metrics, "a"))) {
        merak_errf(err, errlen, "%s: %s", a->metrics, strerror(errno));
        goto out;
    }

    if (a->on_start) {
        merak_run_info ri = {1, 1, 1, 1, merak_exec_arena_bytes(e)};
        a->on_start(&ri, a->user);
    }
    merak_lr_sched sched = {a->lr_schedule, a->lr, a->min_lr, a->warmup, a->steps};
    int32_t *ids = merak_exec_tensor(e, 0, ids_t), *tgt = merak_exec_tensor(e, 0, tgt_t);
    merak_exec_set_loss_scale(e, 1.0f / (float)M);
    double t_start = merak_now();
    for (step = 0; step < a->steps && !(a->stop && *a->stop); step++) {
        double t0 = merak_now(), loss = 0;
        merak_exec_zero_grads(e);
        for (int j = 0; j < M; j++) {
            uint64_t n = (uint64_t)step * (uint64_t)M + (uint64_t)j;
            if (merak_data_window(data, n % W, B, T, ids, tgt, err, errlen) < 0)
                goto out;
            merak_exec_forward(e, 0, merak_mb_seed(a->seed, n));
            merak_exec_backward(e, 0);
            loss += merak_exec_loss(e, 0);
        }
        loss /= M;
        double norm = merak_grad_norm(e, k);
        if (!isfinite(loss) || !isfinite(norm)) {
            merak_errf(err, errlen, "step %d: loss %g, gradient norm %g: training diverged", step, loss, norm);
            goto out;
        }
        merak_clip_grads(e, k, norm, a->clip);
        float lr = merak_lr_at(&sched, step);
        merak_optim_step(opt, e, k, lr);

        double t1 = merak_now();
        merak_step_info info = {
            .step = step, .steps = a->steps, .loss = loss, .grad_norm = norm, .lr = lr,
            .tokens_per_s = (double)B * T * M / (t1 - t0), .step_ms = (t1 - t0) * 1e3,
            .eta_s = (t1 - t_start) / (step + 1) * (a->steps - step - 1),
        };
        if (metrics && merak_metrics_write(metrics, &info) < 0) {
            merak_errf(err, errlen, "%s: %s", a->metrics, strerror(errno));
            goto out;
        }
        if (a->on_step)
            a->on_step(&info, a->user);
    }
    if (a->save_weights && merak_weights_save(g, e, a->save_weights, NULL, err, errlen) < 0)
        goto out;
    if (metrics) {
        FILE *f = metrics;
        metrics = NULL;
        if (fclose(f) != 0) {
            merak_errf(err, errlen, "%s: %s", a->metrics, strerror(errno));
            goto out;
        }
    }
    merak_optim_destroy(opt);
    merak_data_close(data);
    merak_exec_destroy(e);
    return step;
out:
    if (metrics)
        fclose(metrics);
    merak_optim_destroy(opt);
    merak_data_close(data);
    merak_exec_destroy(e);
    return -1;
}
