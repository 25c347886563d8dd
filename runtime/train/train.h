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

#include "clock.h"
#include "graph/graph.h"
#include "pipe/decode.h"
#include "pipe/exec.h"

/* ---- initialisation
 * Element i of a parameter is a pure function of (seed, parameter name, i):
 * counter-based, so any shard of a parameter can be generated on its own and
 * every layout starts from the same weights. */
void merak_init_fill(const merak_tensor *t, uint64_t seed, int64_t first, int64_t count,
                     float *dst);
/* Initialises every parameter of the executor; 0 or -1 with err. */
int merak_init_params(const merak_graph *g, merak_exec *e, uint64_t seed, char *err,
                      size_t errlen);

/* ---- Hugging Face weights (safetensors)
 * PATH is a safetensors file, a model.safetensors.index.json (any name
 * ending in .json) whose weight_map names a file for every tensor, or a
 * directory holding either (the index, else model.safetensors).  An index's
 * files are opened once each and every tensor must be in the file the index
 * names and in no other.
 * Import: every parameter of the executor must be in the weights with its
 * shape (GPT-2's Conv1D weights as [in, out]); names may lack GPT-2's
 * "transformer." prefix.  Returns 0 or -1 with err naming the file and the
 * tensor. */
int merak_weights_load(const merak_graph *g, merak_exec *e, const char *path, char *err,
                       size_t errlen);

/* The same into a generation decoder's parameters (decode.h). */
int merak_weights_load_decoder(const merak_graph *g, merak_decoder *d, const char *path, char *err,
                               size_t errlen);

/* Every tensor in the weights file PATH is a parameter of model (by its
 * Hugging Face name, or a buffer such files carry: GPT-2's attn.bias,
 * LLaMA's rotary inv_freq).  0, or -1 with err naming the file and the
 * first tensor that is not. */
int merak_weights_extra(const merak_graph *model, const char *path, char *err, size_t errlen);

/* fn(ctx, file) for the index and every file the weights at PATH read
 * (one file: itself); stops at the first nonzero return, which it
 * returns; -1 with err when PATH cannot be opened. */
int merak_weights_each_file(const char *path, int (*fn)(void *ctx, const char *file), void *ctx, char *err,
                            size_t errlen);

/* The same into host arrays: tensors[i] of g (whole, or a shard's part)
 * into data[i], graph layout, for i < n. */
int merak_weights_read(const merak_graph *g, int n, const int *tensors, const char *path, float *const *data,
                       char *err, size_t errlen);

/* Export with Hugging Face names and layouts, from host arrays: data[i]
 * holds the whole parameter tensors[i] in graph layout; a tied head is not
 * written.  bf16: as BF16 (rounded to nearest even; a value past its range
 * is refused), else F32.  Weights of more than shard_bytes (in that dtype;
 * 0: no limit) are written as transformers' save_pretrained shards them:
 * PATH less ".safetensors" then "-00001-of-0000N.safetensors" ... (each
 * tensor whole, in tensor-id order, a file filled until the next tensor
 * would take it past shard_bytes; a larger tensor alone), each with the
 * single file's metadata, then PATH.index.json naming every tensor's file
 * (written last).  Every file is written atomically; files of an earlier
 * save that this one does not write are left as they are.  0, or -1 with
 * err (nothing not finite is written; see merak_weights_each_output for
 * what else is refused). */
int merak_weights_save_arrays(const merak_graph *g, int n, const int *tensors,
                              const float *const *data, const char *path, const char *model_name, int bf16,
                              int64_t shard_bytes, char *err, size_t errlen);

/* fn(ctx, file) for every file merak_weights_save_arrays writes when it
 * saves every parameter of g (those with storage of their own, as
 * merak-train and merak-ckpt export do) at path: the path alone, or the
 * shards then the index.  Stops at the first nonzero return (fn sets err),
 * which it returns; -1 with err when the save would be refused: more than
 * 99999 shards, a path too long, or one file with PATH.index.json of an
 * earlier sharded save beside it (a reader given the directory would take
 * that index, not the new file). */
int merak_weights_each_output(const merak_graph *g, const char *path, int bf16, int64_t shard_bytes,
                              int (*fn)(void *ctx, const char *file), void *ctx, char *err, size_t errlen);

/* ---- AdamW */
typedef struct merak_adamw_opts {
    float beta1, beta2, eps, weight_decay;
} merak_adamw_opts;

typedef struct merak_optim merak_optim;

/* Optimizer state for floats [lo, hi) of the executor's flat parameter
 * buffer (all of it, or a ZeRO-1 share), in the executor's backend memory.
 * Weight decay applies only to parameters with two or more dimensions.
 * NULL when out of memory. */
merak_optim *merak_optim_create(const merak_graph *g, const merak_exec *e,
                                const merak_adamw_opts *opts, size_t lo, size_t hi);
void merak_optim_destroy(merak_optim *o);
/* Multiplies floats [lo, hi) of the flat gradient buffer by
 * clip/(norm+1e-6) when that is below 1 (clip > 0; norm is the global one).
 * Returns the factor used. */
float merak_clip_grads(merak_exec *e, double norm, float clip, size_t lo, size_t hi);
/* One AdamW step at learning rate lr (the step counter advances). */
void merak_optim_step(merak_optim *o, merak_exec *e, float lr);
/* The moments of the floats [lo, hi) it covers to host arrays of hi - lo
 * floats each, or back from them with the step counter (checkpoints);
 * 0, or -1 when the backend's copy failed. */
int merak_optim_read(const merak_optim *o, float *m, float *v);
int merak_optim_write(merak_optim *o, const float *m, const float *v, int steps);
int merak_optim_steps(const merak_optim *o);

/* ---- the step loop's metrics */
typedef struct merak_metrics merak_metrics;
/* Opens PATH for appending one JSON object per step; NULL with err. */
merak_metrics *merak_metrics_open(const char *path, const char *dtype, char *err, size_t errlen);
/* Writes and flushes one line; 0 or -1 with err naming the file. */
int merak_metrics_write(merak_metrics *m, const merak_step_info *info, char *err, size_t errlen);
/* Closes (NULL is a no-op); 0 or -1 with err if the last writes failed. */
int merak_metrics_close(merak_metrics *m, char *err, size_t errlen);

/* ---- the timeline (--trace)
 * Every rank's recorded events to rank 0, which writes them to PATH as one
 * Chrome trace (collective over the world).  0, or -1 with err. */

struct merak_comm;
struct merak_trace;
int merak_trace_write(struct merak_comm *comm, const struct merak_trace *t, const char *path,
                      const char *schedule, int micro_batches, int virtual_stages, char *err,
                      size_t errlen);

/* ---- learning-rate schedules */
typedef struct merak_lr {
    merak_lr_kind kind;
    float lr, min_lr;
    int warmup, steps;
} merak_lr;
/* lr*(i+1)/warmup for step i < warmup; then constant, or cosine:
 * min_lr + (lr - min_lr) * (1 + cos(pi * (i - warmup) / max(1, steps - warmup))) / 2,
 * which reaches min_lr at step `steps` (one past the last step run). */
float merak_lr_at(const merak_lr *s, int step);

#endif /* MERAK_TRAIN_H */
