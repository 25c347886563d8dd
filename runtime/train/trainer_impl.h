/*
 * trainer_impl.h - what the step loop's files share (not callers: they
 * see merak.h):
 *   session.c    the process grid and the backend's kernels
 *   preflight.c  the checks before the first step: the graph, the
 *                checkpoint to resume, the stages' cut and memory, the
 *                outputs, the data of a resumed run; the stages' table
 *   trainer.c    merak_train: the run set up, the steps, checkpoints
 * Calls go trainer -> preflight -> session and trainer -> session.
 */
#ifndef MERAK_TRAINER_IMPL_H
#define MERAK_TRAINER_IMPL_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "atomic.h"
#include "ckpt.h"
#include "comm/comm.h"
#include "data.h"
#include "errf.h"
#include "file.h"
#include "generate.h"
#include "kernels.h"
#include "mix64.h"
#include "pipe/stage.h"
#include "plan/cost.h"
#include "plan/layout.h"
#include "train.h"

typedef struct merak_run {
    const merak_args *a;
    merak_comm *comm;
    const merak_grid *grid;
    merak_group *world;
    merak_stage *stage;
    merak_exec *e;
    merak_data *data;
    uint64_t windows;
    /* the step's windows, read before it starts (stages that load them):
     * [micro-batches * micro_batch * seq_len] each, or NULL */
    int32_t *step_ids, *step_tgt;
    merak_data *val;              /* the validation shards (a.val_data), or NULL */
    int eval_batches;             /* windows evaluated over all replicas */
    merak_optim *opt;
    merak_lr lr;
    int step;
    int step0;                    /* the first step: the checkpoint's, or 0 */
    uint64_t consumed0;           /* micro-batches the run had read at step0 */
    uint64_t seed;                /* dropout (the checkpoint's when resumed) */
    merak_ckpt_writer *ckpt;      /* when a->save */
    int saved;                    /* the step of the last checkpoint started, or -1 */
    int final_save;               /* the save in flight is the run's last: it must be written */
    int lock_fd;                  /* rank 0's lock on --save (merak_ckpt_lock), or -1 */
    char resume[4096];            /* the checkpoint resumed from, or "" */
    char data_change[512];        /* rank 0: how its data differ (resume_data_change), or "" */
    char dtype_was[16];           /* rank 0: the checkpoint's arithmetic where it is not this
                                   * run's, or "" */
    double resume_bytes, resume_s; /* its files' size, and this rank's time to load it */
    int diverged;                 /* every rank found the same bad loss or norm */
    int skipped;                  /* and skipped the step's update (on_nan_skip) */
    double loss, norm;            /* of the step, after the optimizer step's reduction */
    float step_lr;
    merak_trace trace;            /* the timeline, when a->trace */
    merak_train_sampler *sampler; /* rank 0, when a->sample_every */
} merak_run;


/* ---- session.c: the process grid (NULL before merak_init), and the
 * kernels of a.device on it with the way their buffers travel: the
 * collectives' backend ("nccl" or "mpi", merak_coll_choose) and why, the
 * pipeline's ("nccl", "mpi" or "ucx", merak_p2p_choose), and whether
 * device buffers go through host memory (staged: the collectives unless
 * NCCL's, the pipeline's transfers unless NCCL's).  Collective over the
 * world: MERAK_OK with *kp, or the status with err (the same on every
 * rank). */
typedef struct merak_comm_path {
    const char *coll, *p2p;
    char why[256];
    int staged;
} merak_comm_path;
merak_comm *merak_session_comm(void);
int merak_session_kernels(const merak_args *a, int world, const merak_kernels **kp, merak_comm_path *path,
                          char *err, size_t errlen);

/* ---- preflight.c */
/* Every stage's activation memory, layers and recomputed layers, on every
 * rank (collective over the world). */
typedef struct stage_table {
    double *bytes;            /* [3 * pp]: bytes, then layers and recomputed as doubles */
    int *layers, *recomputed; /* [pp] each, one allocation */
} stage_table;
/* The graph has what the step loop feeds and reads: the vocabulary size
 * (the loss's logits width), or -1 with err. */
int merak_check_graph(const merak_graph *g, const merak_args *a, char *err, size_t errlen);
/* 1 when a bf16 run keeps its bf16 values in float storage
 * (MERAK_BF16_STORAGE=float, or sub-batches: --tp-overlap > 1). */
int merak_args_float_storage(const merak_args *a);
/* The checkpoint to resume from, into r->resume (collective): 0 or -1. */
int merak_find_resume(merak_run *r, char *err, size_t errlen);
/* The stages' memory, layers and recomputed layers on every rank (collective). */
int merak_stage_table_fill(merak_run *r, stage_table *t, char *err, size_t errlen);
void merak_stage_table_free(stage_table *t);
/* Rank 0: a resumed run reads what the saved one read, or says so. */
int merak_resumed_data(merak_run *r, char *err, size_t errlen);
/* Rank 0: every output can be written and is no input. */
int merak_check_outputs(merak_run *r, const merak_graph *g, char *err, size_t errlen);
/* Every rank's stage fits where it runs (collective): a status. */
int merak_check_memory(merak_run *r, const merak_graph *g, const merak_stage_opts *so, char *err, size_t errlen);
/* The virtual stage bounds of the grid's pp x V stages: a status. */
int merak_partition_stages(const merak_graph *g, const merak_args *a, const merak_grid *gr,
                           merak_schedule_kind kind, int V, const merak_tp_rule *rules, int nrules, int *starts,
                           int *bounds, double *step, char *err, size_t errlen);

#endif /* MERAK_TRAINER_IMPL_H */
