/*
 * ckpt.h - training checkpoints: everything a run needs to go on exactly
 * where it stopped, in any layout.
 *
 *   ROOT/step_00000100/                  one directory per step reached
 *       model-pp000-tp000.safetensors    parameters of pipeline stage 0, tensor shard 0
 *       optim-pp000-tp000.safetensors    AdamW's moments of the same tensors
 *       ...                              (dp rank 0 of every stage and shard writes its pair)
 *       manifest.json                    model, layout, step, data position, RNG, optimizer,
 *                                        library version, every file with its size and CRC-32
 *       DONE                             written last: the checkpoint is complete; holds
 *                                        the step and the manifest's CRC-32 and size
 *
 * Tensors carry the model's (Hugging Face) names in graph layout (linear
 * weights [out, in]); a moment is NAME.exp_avg or NAME.exp_avg_sq.  Each
 * file's metadata gives, under each parameter's name, its place in the
 * whole tensor: {"full": [...], "dim": d, "segs": [[start, len], ...]}
 * (dim -1: held whole).  Loading assembles each tensor of this rank from
 * whichever files hold its parts, so a checkpoint of one layout loads
 * into any other (resharding) and into the same one bit for bit.
 *
 * Every file goes through atomic.h (temporary, fsync, rename) and DONE
 * comes after all of them and the manifest, so a crash at any moment
 * leaves the previous checkpoints loadable and this one without DONE,
 * which nothing picks.  Writing overlaps training: merak_ckpt_save copies
 * the state into host buffers and a background thread writes them while
 * the next steps run; the checkpoint is finished (manifest, DONE, older
 * ones pruned) by the first merak_ckpt_finish after every thread is done.
 */
#ifndef MERAK_CKPT_H
#define MERAK_CKPT_H

/* DONE's second line, before the manifest's CRC-32 (8 hex digits) and
 * size: "manifest.json crc32 1a2b3c4d bytes 2048".  A manifest that
 * does not match is refused; a DONE without the line (merak before
 * 2026-11-28) is taken as it is. */
#define MERAK_CKPT_DONE_MANIFEST "manifest.json crc32 "

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "merak/merak.h"
#include "pipe/stage.h"
#include "safetensors.h"
#include "train.h"

/* The format: manifest.json's "format" and "version", and the names of
 * AdamW's two moments of parameter NAME (NAME + suffix) in optim files. */
#define MERAK_CKPT_FORMAT "merak-checkpoint"
#define MERAK_CKPT_VERSION 1
#define MERAK_CKPT_MOMENTS 2
extern const char *const merak_ckpt_moment_suffix[MERAK_CKPT_MOMENTS];

/* The training state beside the tensors. */
typedef struct merak_ckpt_state {
    int step;              /* optimizer steps done */
    uint64_t consumed;     /* micro-batches (data windows) read so far, over all replicas */
    uint64_t seed;         /* initialisation and dropout (counter-based: the dropout of
                            * micro-batch k depends only on seed and k) */
    int adam_steps;        /* AdamW's step counter */
} merak_ckpt_state;

/* The run a manifest describes beside its state: the layout and batch
 * (its "layout" entry), the data it reads, AdamW's settings, the model. */
typedef struct merak_ckpt_run {
    int dp, tp, pp;
    const char *schedule;          /* the schedule's name */
    int virtual_stages, zero, micro_batches, micro_batch, seq_len;
    const char *data;              /* the shards' pattern, "" for none */
    double beta1, beta2, eps, weight_decay, clip;
    const merak_model_config *model;   /* its config.json; NULL: none */
    const char *dtype;             /* "fp32", "tf32" or "bf16": the run's arithmetic (the files hold
                                    * fp32 masters and moments either way) */
} merak_ckpt_run;
/* The run arguments a describe on a dp x tp x pp grid. */
merak_ckpt_run merak_ckpt_run_of(const merak_args *a, int dp, int tp, int pp);

/* What one save wrote, for the caller's report. */
typedef struct merak_ckpt_done {
    int step;
    char path[4096];       /* the checkpoint's directory */
    double bytes;          /* every file */
    double seconds;        /* from the copy to the last byte on disk (slowest writer) */
} merak_ckpt_done;

typedef struct merak_ckpt_writer merak_ckpt_writer;

/* A writer of checkpoints under ROOT, keeping the newest keep_last
 * complete ones (0: all).  NULL when out of memory. */
merak_ckpt_writer *merak_ckpt_writer_create(const char *root, int keep_last);
/* Waits for a write in flight (without finishing it) and frees. */
void merak_ckpt_writer_destroy(merak_ckpt_writer *w);

/* Starts the checkpoint of state st (collective over the world), after
 * the caller has finished a save in flight (merak_ckpt_finish; one still
 * in flight is finished here, its result lost); rank 0 makes ROOT/step_N (replacing an incomplete one);
 * every rank copies its parameters and its share of the moments to host
 * memory (ZeRO shares gathered over dp) and the writers start their
 * thread.  run describes the run in the manifest.  0, or -1 with err
 * (every rank alike) when this one cannot start. */
int merak_ckpt_save(merak_ckpt_writer *w, merak_comm *comm, merak_stage *s, const merak_optim *o,
                    const merak_ckpt_run *run, const merak_ckpt_state *st, char *err, size_t errlen);
/* 1 while this rank's writing thread still runs, else 0 (not collective:
 * the step loop sums it over the world with its other flags). */
int merak_ckpt_busy(const merak_ckpt_writer *w);
/* 1 if a save was started and not finished (the same on every rank). */
int merak_ckpt_in_flight(const merak_ckpt_writer *w);
/* Finishes the save in flight (collective): waits for this rank's thread,
 * agrees on failure, and rank 0 writes the manifest with every file's CRC,
 * then DONE, then removes checkpoints beyond keep_last.  0 with *done
 * (done->step 0 when nothing was in flight), or -1 with err (every rank
 * alike): the incomplete directory is removed, older checkpoints are
 * untouched. */
int merak_ckpt_finish(merak_ckpt_writer *w, merak_comm *comm, merak_ckpt_done *done, char *err,
                      size_t errlen);

/* The data the run reads (rank 0's, which reads token ids): its shards,
 * with their token counts, go into every manifest after this call, so a
 * resume can tell whether it reads what the saved run read. */
struct merak_data;
void merak_ckpt_writer_data(merak_ckpt_writer *w, const struct merak_data *d);

/* What decides the next batches of a run resumed from DIR: its micro-batch
 * and sequence length, and (when the manifest lists them) its shards, in
 * order, with their token counts, against a's and d's.  0 when they are
 * the same or the checkpoint had read no batch yet; 1 with what differs in why ("the data: train_001.bin has 1000
 * tokens, the checkpoint's had 900"); -1 with err when the manifest
 * cannot be read. */
int merak_ckpt_data_differs(const char *dir, const merak_args *a, const struct merak_data *d, char *why,
                            size_t whylen, char *err, size_t errlen);

/* The arithmetic the run that saved DIR trained in (its manifest's
 * "dtype"; "fp32" where it says none), into buf: 0, or -1 with err when
 * the manifest cannot be read. */
int merak_ckpt_dtype(const char *dir, char *buf, size_t n, char *err, size_t errlen);

/* The step a checkpoint directory's name "step_NNNNNNNN" says, or -1 for
 * another name (ckpt_read.c). */
int merak_ckpt_dir_step(const char *name);

/* The step of the newest complete checkpoint under ROOT, or -1. */
int merak_ckpt_newest(const char *root);

/* Claims ROOT for this run (its rank 0 calls it before it writes there):
 * a POSIX record lock (fcntl, which NFS and Lustre keep) on ROOT/.lock,
 * which names its holder, held until merak_ckpt_unlock or the process
 * ends, so two runs never write into one directory (a file system
 * without record locks: 0 and *fd -1, unguarded).  0 with *fd; -1 with
 * err naming the other run when it holds ROOT, or why the lock failed. */
int merak_ckpt_lock(const char *root, int *fd, char *err, size_t errlen);
void merak_ckpt_unlock(int fd);

/* The checkpoint SPEC names: a checkpoint directory (it must be complete),
 * or a directory of them ("latest" is ROOT), whose newest complete one is
 * taken.  1 with its path in out; 0 when ROOT holds none yet; -1 with err
 * (SPEC unreadable, or a checkpoint directory without DONE). */
int merak_ckpt_find(const char *spec, const char *root, char *out, size_t outlen, char *err,
                    size_t errlen);

/* ---- reading */
typedef enum merak_ckpt_kind { MERAK_CKPT_MODEL, MERAK_CKPT_OPTIM, MERAK_CKPT_CONFIG } merak_ckpt_kind;
typedef struct merak_ckpt_file {
    const char *name;          /* in the checkpoint's directory */
    merak_ckpt_kind kind;
    uint64_t bytes;
    uint32_t crc;              /* zlib's CRC-32 of the whole file */
} merak_ckpt_file;
/* What the manifest says beside the files (layout fields 0 and strings
 * empty when it does not say). */
typedef struct merak_ckpt_meta {
    merak_ckpt_state st;
    int dp, tp, pp, virtual_stages, zero, micro_batches, micro_batch, seq_len;
    char schedule[32], producer[64], data[512];
} merak_ckpt_meta;
typedef struct merak_ckpt merak_ckpt;

/* Opens checkpoint DIR: its manifest, every file in it (safetensors
 * opened and validated), the CRC-32 of files rank, rank + world, ... (0
 * of 1: all) compared with the manifest's, and the model of its
 * config.json against `model` (NULL: not compared).  0, or -1 with one
 * line in err naming the file. */
int merak_ckpt_open(const char *dir, const merak_model_config *model, int rank, int world, merak_ckpt **out,
                    char *err, size_t errlen);
void merak_ckpt_close(merak_ckpt *c);
const merak_ckpt_meta *merak_ckpt_meta_of(const merak_ckpt *c);
/* The checkpoint's config.json (Hugging Face), or NULL if it has none. */
const char *merak_ckpt_config_path(const merak_ckpt *c);
int merak_ckpt_num_files(const merak_ckpt *c);
const merak_ckpt_file *merak_ckpt_file_at(const merak_ckpt *c, int i);
/* File i's tensors (NULL for the config). */
const merak_st_file *merak_ckpt_st(const merak_ckpt *c, int i);
/* Every tensor of every file is a parameter of model (its storage: a tied
 * alias is never written) or a moment of one.  0, or -1 naming the file
 * and the tensor. */
int merak_ckpt_check_names(const merak_ckpt *c, const merak_graph *model, char *err, size_t errlen);
/* Parameter t (a tensor of the model or of any tensor-parallel shard of
 * it: its full shape and its place in it say what to read), or its moment
 * (0: exp_avg, 1: exp_avg_sq; -1: the parameter), assembled from every
 * file holding a part of it, into local (t's elements, graph layout).  0,
 * or -1 with err when a part is missing or does not fit. */
int merak_ckpt_read(merak_ckpt *c, const merak_tensor *t, int moment, float *local, char *err, size_t errlen);

/* Writes a checkpoint of a model from whole parameters (n tensors of g,
 * data[i] the values of tensors[i] in graph layout) at step 0 with zero
 * moments, as ROOT/step_00000000 (merak-ckpt import): training resumed
 * from it in any layout starts from these weights.  0, or -1 with err. */
int merak_ckpt_write_whole(const char *root, const merak_graph *g, int n, const int *tensors,
                           const float *const *data, const merak_model_config *model, uint64_t seed, char *err,
                           size_t errlen);

/* Loads checkpoint DIR into this rank's stage and optimizer (every
 * parameter and its moments assembled from the files that hold its parts,
 * whatever layout wrote them) and returns its state.  Rank `rank` of
 * `world` verifies the CRC of files rank, rank + world, ...  The stage's
 * model must be the checkpoint's (every parameter there whole, with its
 * full shape; nothing else there; its config.json compared with `model`
 * when given).  Not collective; 0, or -1
 * with err naming the file and the tensor; bytes: the size of its files. */
int merak_ckpt_load(const char *dir, merak_stage *s, merak_optim *o, const merak_model_config *model,
                    int rank, int world, merak_ckpt_state *st, double *bytes, char *err, size_t errlen);

#endif /* MERAK_CKPT_H */
