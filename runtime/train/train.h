/*
 * train.h - the training pieces around the executor: seeded parameter
 * initialisation, Hugging Face weight import/export, AdamW with global-norm
 * clipping, and learning-rate schedules.
 */
#ifndef MERAK_TRAIN_H
#define MERAK_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/graph.h"
#include "pipe/exec.h"

/* ---- initialisation
 * Element i of a parameter is a pure function of (seed, parameter name, i):
 * counter-based, so any shard of a parameter can be generated on its own and
 * every layout starts from the same weights. */
void merak_init_fill(const merak_tensor *t, uint64_t seed, int64_t first, int64_t count,
                     float *dst);
/* Initialises every parameter of the executor. */
void merak_init_params(const merak_graph *g, merak_exec *e, uint64_t seed);

/* ---- Hugging Face weights (safetensors)
 * Import: every parameter of the executor must be in the file with its shape
 * (GPT-2's Conv1D weights as [in, out]); names may lack GPT-2's
 * "transformer." prefix.  Returns 0 or -1 with err naming the file and the
 * tensor. */
int merak_weights_load(const merak_graph *g, merak_exec *e, const char *path, char *err,
                       size_t errlen);
/* A tensor-parallel shard's elements taken from / put into the whole
 * tensor (both in graph layout); for a tensor held whole, a copy. */
void merak_shard_slice(const merak_tensor *t, const float *whole, float *shard);
void merak_shard_place(const merak_tensor *t, const float *shard, float *whole);

/* Export with Hugging Face names and layouts; a tied head is not written. */
int merak_weights_save(const merak_graph *g, const merak_exec *e, const char *path,
                       const char *model_name, char *err, size_t errlen);

/* The same from arrays: data[i] holds the whole parameter tensors[i] in
 * graph layout. */
int merak_weights_save_arrays(const merak_graph *g, int n, const int *tensors,
                              const float *const *data, const char *path, const char *model_name,
                              char *err, size_t errlen);

/* ---- AdamW */
typedef struct merak_adamw_opts {
    float beta1, beta2, eps, weight_decay;
} merak_adamw_opts;

typedef struct merak_optim merak_optim;

/* Optimizer state for the executor's parameters; weight decay applies only
 * to parameters with two or more dimensions. */
merak_optim *merak_optim_create(const merak_graph *g, const merak_exec *e,
                                const merak_adamw_opts *opts);
/* The same for floats [lo, hi) of the flat parameter buffer only (ZeRO-1:
 * each data-parallel rank keeps the state of its share). */
merak_optim *merak_optim_create_range(const merak_graph *g, const merak_exec *e,
                                      const merak_adamw_opts *opts, size_t lo, size_t hi);
void merak_optim_destroy(merak_optim *o);
/* Global L2 norm of the gradients (a tied weight once). */
double merak_grad_norm(const merak_exec *e, const merak_kernels *k);
/* Multiplies gradients by clip/(norm+1e-6) when that is below 1 (clip > 0).
 * Returns the factor used. */
float merak_clip_grads(merak_exec *e, const merak_kernels *k, double norm, float clip);
/* The same on floats [lo, hi) of the flat gradient buffer only (a ZeRO
 * share; norm is still the global one). */
float merak_clip_grads_range(merak_exec *e, const merak_kernels *k, double norm, float clip,
                             size_t lo, size_t hi);
/* One AdamW step at learning rate lr (the step counter advances). */
void merak_optim_step(merak_optim *o, merak_exec *e, const merak_kernels *k, float lr);

/* ---- shared by the trainers */
double merak_now(void);                              /* monotonic seconds */
uint64_t merak_mb_seed(uint64_t seed, uint64_t n);   /* dropout seed of micro-batch n */
/* One JSON line per step, flushed; 0 or -1 (errno set). */
int merak_metrics_write(FILE *f, const merak_step_info *info);

/* ---- learning-rate schedules */
typedef struct merak_lr_sched {
    merak_schedule_kind kind;
    float lr, min_lr;
    int warmup, steps;
} merak_lr_sched;
/* lr*(i+1)/warmup for step i < warmup; then constant, or cosine:
 * min_lr + (lr - min_lr) * (1 + cos(pi * (i - warmup) / max(1, steps - warmup))) / 2,
 * which reaches min_lr at step `steps` (one past the last step run). */
float merak_lr_at(const merak_lr_sched *s, int step);

#endif /* MERAK_TRAIN_H */
