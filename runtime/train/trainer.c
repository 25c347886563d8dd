/*
 * trainer.c - the one step loop, for every layout: arguments and graph
 * checked once, the stage built on the process grid (one process is the
 * 1x1x1 grid), data, weights, optimizer and metrics around it, then every
 * step runs the stage's instruction list, whose LOAD and OPTIMIZER_STEP
 * call back here.
 *
 * Data: with dp replicas of M micro-batches each, step i's global
 * micro-batch k (k < M*dp) reads window (i*M*dp + k) mod W, replica r
 * taking k in [r*M, (r+1)*M), so every layout sees the batches one process
 * running M*dp micro-batches sees.  The reported loss is the mean over the
 * step's micro-batches, before the update.  A run resumed at step i0 from
 * a checkpoint that had read C micro-batches counts from there: step i's
 * k reads window C + (i - i0)*M*dp + k, and dropout follows the same
 * micro-batch numbers, so the run goes on as if it had not stopped.
 *
 * Failures: a problem every rank finds alike (bad arguments, divergence)
 * ends every rank with MERAK_FAILED (MERAK_USAGE for arguments that cannot
 * work) and rank 0's message; a rank failing alone (a peer died, a write
 * failed) returns MERAK_FAILED_HERE with the rank and host named, and the
 * caller ends the job.  The checks before the first step are
 * preflight.c's, the process grid session.c's (trainer_impl.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#include "trainer_impl.h"

/* ------------------------------------------------------------------ the step loop */

/* Micro-batches read over all replicas before step `step`. */
static uint64_t consumed_at(const merak_run *r, int step)
{
    return r->consumed0 + (uint64_t)(step - r->step0) * (uint64_t)r->grid->dp * (uint64_t)r->a->micro_batches;
}

/* Global number of micro-batch mb of this step on this replica. */
static uint64_t mb_number(const merak_run *r, int mb)
{
    return consumed_at(r, r->step) + (uint64_t)r->grid->dp_rank * (uint64_t)r->a->micro_batches + (uint64_t)mb;
}

/* This rank's windows of step r->step, before it starts: a shard that
 * shrank or changed under the run is found while every rank can still
 * stop together at the step boundary (and checkpoint the last good step),
 * not inside a step its peers wait on.  A status. */
static int read_step(merak_run *r, char *err, size_t errlen)
{
    if (!r->step_ids)
        return MERAK_OK;
    const size_t n = (size_t)r->a->micro_batch * (size_t)r->a->seq_len;
    for (int mb = 0; mb < r->a->micro_batches; mb++)
        if (merak_data_window(r->data, mb_number(r, mb) % r->windows, r->a->micro_batch, r->a->seq_len,
                              r->step_ids + (size_t)mb * n, r->step_tgt + (size_t)mb * n, err, errlen) < 0)
            return MERAK_FAILED;
    return MERAK_OK;
}

static int hook_load(void *ctx, int mb, int32_t *ids, int32_t *targets, char *err, size_t errlen)
{
    merak_run *r = ctx;
    (void)err, (void)errlen;
    const size_t n = (size_t)r->a->micro_batch * (size_t)r->a->seq_len;
    memcpy(ids, r->step_ids + (size_t)mb * n, n * sizeof *ids);
    memcpy(targets, r->step_tgt + (size_t)mb * n, n * sizeof *targets);
    return 0;
}

/* Dropout seed of the micro-batch: the same in every layout. */
static uint64_t hook_seed(void *ctx, int mb)
{
    merak_run *r = ctx;
    return merak_mix64(r->seed ^ (mb_number(r, mb) * MERAK_GOLDEN));
}

/* Validation window mb of this replica's share: replica d evaluates
 * windows d*K/dp .. (d+1)*K/dp - 1, the same ones at every evaluation. */
static int hook_val_load(void *ctx, int mb, int32_t *ids, int32_t *targets, char *err, size_t errlen)
{
    merak_run *r = ctx;
    const uint64_t w = (uint64_t)r->grid->dp_rank * (uint64_t)(r->eval_batches / r->grid->dp) + (uint64_t)mb;
    return merak_data_window(r->val, w, r->a->micro_batch, r->a->seq_len, ids, targets, err, errlen);
}

static uint64_t hook_val_seed(void *ctx, int mb)
{
    (void)ctx, (void)mb;
    return 0; /* evaluation runs without dropout */
}

/* The mean validation loss over the grid's eval_batches windows, on every
 * rank (collective over the world).  0, or -1 with err. */
static int evaluate(merak_run *r, double *val, char *err, size_t errlen)
{
    const merak_stage_hooks h = {r, hook_val_load, hook_val_seed, NULL};
    double sum = 0;
    if (merak_stage_eval(r->stage, &h, r->eval_batches / r->grid->dp, &sum, err, errlen) < 0)
        return -1;
    if (merak_allreduce_f64(r->world, &sum, 1) < 0)
        return merak_errf(err, errlen, "summing the validation loss: %s", merak_comm_error(r->comm));
    *val = sum / r->eval_batches;
    return 0;
}

/* OPTIMIZER_STEP: loss and gradient norm over the grid, clipping, AdamW on
 * this rank's share. */
static int hook_optimizer_step(void *ctx, char *err, size_t errlen)
{
    merak_run *r = ctx;
    const merak_args *a = r->a;
    double red[2] = {merak_stage_loss_sum(r->stage), merak_stage_grad_sumsq(r->stage)};
    merak_trace *tr = a->trace ? &r->trace : NULL;
    merak_stamp t0 = merak_trace_stamp(tr);
    int rc = merak_allreduce_f64(r->world, red, 2);
    merak_trace_add_stamped(tr, 0, MERAK_TRACE_STEP_ALLREDUCE, -1, 0, t0, merak_trace_stamp(tr));
    if (rc < 0)
        return merak_errf(err, errlen, "summing the loss and gradient norm: %s", merak_comm_error(r->comm));
    r->loss = red[0] / (a->micro_batches * r->grid->dp);
    r->norm = sqrt(red[1]);
    r->step_lr = merak_lr_at(&r->lr, r->step);
    /* a cross-entropy is never below zero (a few rounding units at most):
     * one that is comes of a bug, or of ids past the checks, and is not
     * trained on whatever --on-nan says */
    if (r->loss < -1e-3) {
        r->diverged = 1;
        return merak_errf(err, errlen, "loss %g is below zero, which a cross-entropy cannot be (a bug; no update "
                          "was made)", r->loss);
    }
    r->skipped = !isfinite(r->loss) || !isfinite(r->norm);
    if (r->skipped && !a->on_nan_skip) {
        r->diverged = 1;
        return merak_errf(err, errlen, "loss %g, gradient norm %g: not finite, training diverged (--on-nan skip "
                          "would skip such a step)", r->loss, r->norm);
    }
    if (r->skipped)
        return 0;   /* no update: the parameters stay as they were */
    size_t lo, hi;
    merak_stage_share(r->stage, &lo, &hi);
    merak_clip_grads(r->e, r->norm, a->clip, lo, hi);
    merak_optim_step(r->opt, r->e, r->step_lr);
    return 0;
}

/* 1 when checkpoint directory path lies in directory dir (compared as
 * files: through links, whatever the spelling). */
static int ckpt_in(const char *path, const char *dir)
{
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", path);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        parent[1] = 0;
    else
        *slash = 0;
    return merak_file_same(parent, dir);
}

/* This rank's setup after the stage: data, weights, optimizer. */
static int setup(merak_run *r, int vocab, char *err, size_t errlen)
{
    const merak_args *a = r->a;
    const merak_graph *lg = merak_stage_graph(r->stage);
    int B = a->micro_batch, T = a->seq_len;
    /* Only stages that read token ids or targets open the data. */
    if (merak_stage_loads(r->stage)) {
        if (merak_data_open(a->data, vocab, &r->data, err, errlen) < 0)
            return -1;
        r->windows = merak_data_num_windows(r->data, B, T);
        if (r->windows == 0)
            return merak_errf(err, errlen, "%s: %llu tokens are fewer than one window of %d x %d + 1",
                              a->data, (unsigned long long)merak_data_num_tokens(r->data), B, T);
        const size_t n = (size_t)a->micro_batches * (size_t)B * (size_t)T;
        r->step_ids = malloc(n * sizeof *r->step_ids);
        r->step_tgt = malloc(n * sizeof *r->step_tgt);
        if (!r->step_ids || !r->step_tgt)
            return merak_errf(err, errlen, "out of memory for a step's %zu tokens", n);
        if (a->val_data) {
            if (merak_data_open(a->val_data, vocab, &r->val, err, errlen) < 0)
                return -1;
            const uint64_t w = merak_data_num_windows(r->val, B, T);
            if (w < (uint64_t)r->eval_batches)
                return merak_errf(err, errlen, "%s: %llu windows of %d x %d + 1 tokens, fewer than the %d "
                                  "the evaluation takes (--eval-batches)", a->val_data,
                                  (unsigned long long)w, B, T, r->eval_batches);
        }
    }
    merak_adamw_opts ao = {a->beta1, a->beta2, a->eps, a->weight_decay};
    size_t lo, hi;
    merak_stage_share(r->stage, &lo, &hi);
    if (!(r->opt = merak_optim_create(lg, r->e, &ao, lo, hi)))
        return merak_errf(err, errlen, "out of memory for the optimizer state");
    if (a->save && !(r->ckpt = merak_ckpt_writer_create(a->save, a->keep_last)))
        return merak_errf(err, errlen, "out of memory");
    if (r->resume[0]) {
        merak_ckpt_state st;
        double t0 = merak_now();
        if (merak_ckpt_load(r->resume, r->stage, r->opt, a->model, r->grid->rank, r->grid->world, &st,
                            &r->resume_bytes, err, errlen) < 0)
            return -1;
        r->resume_s = merak_now() - t0;
        r->step0 = st.step;
        /* a checkpoint of this step in --save: a stop before the next step
         * writes nothing; one elsewhere is written there */
        r->saved = a->save && ckpt_in(r->resume, a->save) ? st.step : -1;
        r->consumed0 = st.consumed;
        r->seed = st.seed;
        return 0;
    }
    if (!a->init)
        return merak_init_params(lg, r->e, a->seed, err, errlen);
    /* what is missing first (another model's file says so), then what is too much */
    if (merak_weights_load(lg, r->e, a->init, err, errlen) < 0)
        return -1;
    if (a->init_extra || merak_weights_extra(merak_stage_model(r->stage), a->init, err, errlen) == 0)
        return 0;
    size_t len = strlen(err);
    snprintf(err + len, errlen - len, " (--init-extra loads the model's tensors from a file that has others)");
    return -1;
}


static void report(const merak_run *r, merak_checkpoint_event ev, int step, const char *path, double bytes,
                   double seconds, const char *error)
{
    if (r->grid->rank == 0 && r->a->on_checkpoint) {
        merak_checkpoint_info ci = {ev, step, path, bytes, seconds, error,
                                    ev == MERAK_CHECKPOINT_RESUMED && r->saved == step,
                                    ev == MERAK_CHECKPOINT_RESUMED && r->dtype_was[0] ? r->dtype_was : NULL};
        r->a->on_checkpoint(&ci, r->a->user);
    }
}

/* A finished save (done->path set) to rank 0's callback; a failed one
 * (rc < 0) too, and then it ends the run unless the user said continue
 * and it is not the run's last (a run whose end was never saved has lost
 * it).  Returns 0 to go on, -1 (every rank alike) to stop. */
static int saved(merak_run *r, int rc, const merak_ckpt_done *done, char *err, size_t errlen)
{
    if (rc == 0) {
        if (done->path[0])
            report(r, MERAK_CHECKPOINT_SAVED, done->step, done->path, done->bytes, done->seconds, NULL);
        return 0;
    }
    if (r->final_save && r->a->save_error_continue && err[0]) {
        char why[1024];
        snprintf(why, sizeof why, "%s", err);
        merak_errf(err, errlen, "%s (the run's last checkpoint: a failure to write it ends the run even with "
                   "--on-save-error continue)", why);
    }
    if (!r->a->save_error_continue || r->final_save)
        return -1;   /* the run ends with the error */
    report(r, MERAK_CHECKPOINT_FAILED, r->saved, NULL, 0, 0, err);
    err[0] = 0;
    return 0;
}

/* Finishes the save in flight, if any (collective). */
static int checkpoint_finish(merak_run *r, char *err, size_t errlen)
{
    merak_ckpt_done done;
    if (!r->ckpt || !merak_ckpt_in_flight(r->ckpt))
        return 0;
    int rc = merak_ckpt_finish(r->ckpt, r->comm, &done, err, errlen);
    return saved(r, rc, &done, err, errlen);
}

/* Starts the checkpoint after `step` steps, once a save in flight is
 * finished; last: the run's last (saved() fails the run when it cannot be
 * written).  Collective; 0, or -1 (every rank alike). */
static int checkpoint(merak_run *r, int step, int last, char *err, size_t errlen)
{
    merak_ckpt_state st = {step, consumed_at(r, step), r->seed, merak_optim_steps(r->opt)};
    if (checkpoint_finish(r, err, errlen) < 0)
        return -1;
    r->saved = step;
    r->final_save = last;
    const merak_ckpt_run saved_run = merak_ckpt_run_of(r->a, r->grid->dp, r->grid->tp, r->grid->pp);
    int rc = merak_ckpt_save(r->ckpt, r->comm, r->stage, r->opt, &saved_run, &st, err, errlen);
    return saved(r, rc, &(merak_ckpt_done){0}, err, errlen);
}

/* "rank R on HOST: step S: why" for a failure of this rank alone; MERAK_FAILED_HERE. */
static int alone(merak_run *r, char *err, size_t errlen)
{
    char where[128], why[400];
    snprintf(why, sizeof why, "%s", err);
    merak_comm_where(r->comm, r->grid->rank, where, sizeof where);
    merak_errf(err, errlen, "%s: step %d: %s", where, r->step, why);
    return MERAK_FAILED_HERE;
}

static void run_free(merak_run *r)
{
    merak_train_sampler_free(r->sampler);
    merak_ckpt_writer_destroy(r->ckpt);
    merak_optim_destroy(r->opt);
    merak_data_close(r->data);
    merak_data_close(r->val);
    free(r->step_ids);
    free(r->step_tgt);
    merak_stage_destroy(r->stage);
    merak_trace_free(&r->trace);
    merak_ckpt_unlock(r->lock_fd);
}

/* The stop signal every rank reports: the highest number any rank
 * received (sig: this rank's, 0 if none).  Collective, once, when some
 * rank has one; -1 with err when the reduction fails. */
static int agree_signal(merak_run *r, int sig)
{
    enum { MAXSIG = 64 };
    double seen[MAXSIG + 1] = {0};
    if (sig > 0)
        seen[sig < MAXSIG ? sig : MAXSIG] = 1;
    if (merak_allreduce_f64(r->world, seen, MAXSIG + 1) < 0)
        return -1;
    for (int s = MAXSIG; s > 0; s--)
        if (seen[s] > 0)
            return s;
    return sig;
}

/* The parameters whole on rank 0 (collective over the world), and there
 * a sample's text (*text malloc'd; NULL elsewhere).  0 or -1 with err. */
static int take_sample(merak_run *r, char **text, size_t *len, char *err, size_t errlen)
{
    merak_gathered w;
    int rc = merak_stage_gather(r->stage, &w, err, errlen);
    if (rc == 0 && r->sampler)
        rc = merak_train_sample(r->sampler, &w, text, len, err, errlen);
    merak_gathered_free(&w);
    return rc;
}

/* The data of step r->step failed on some rank (data_st and data_err
 * here): every rank agrees on the first failure's line (rank 0 reports
 * it), the checkpoint of the last good step is written when --save is set
 * and not written yet, and the run ends: MERAK_FAILED. */
static int data_failed(merak_run *r, int data_st, const char *data_err, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", data_err);
    merak_comm_agree(r->comm, data_st, err, errlen);
    char why[600];
    snprintf(why, sizeof why, "step %d: %s", r->step, err);
    char ck[512] = "";
    if (r->ckpt && r->saved != r->step) {
        r->final_save = 1;
        if (checkpoint(r, r->step, 1, ck, sizeof ck) < 0 || checkpoint_finish(r, ck, sizeof ck) < 0)
            return merak_errf(err, errlen, "%s; and the checkpoint of step %d failed: %s", why, r->step, ck);
    }
    if (r->ckpt)
        return merak_errf(err, errlen, "%s; the checkpoint of step %d, the last good one, is in %s", why, r->step,
                          r->a->save);
    return merak_errf(err, errlen, "%s", why);
}

/* The steps; returns the steps run, MERAK_FAILED (every rank alike) or
 * MERAK_FAILED_HERE (this rank alone). */
static int steps(merak_run *r, merak_metrics *metrics, char *err, size_t errlen)
{
    const merak_args *a = r->a;
    int rank0 = r->grid->rank == 0, M = a->micro_batches;
    merak_stage_hooks hooks = {r, hook_load, hook_seed, hook_optimizer_step};
    double t_start = merak_now();
    int metrics_failed = 0;
    for (r->step = r->step0; r->step < a->steps; r->step++) {
        /* Stop together: a signal on any rank and rank 0's metrics decide
         * for everyone; a checkpoint whose writers are all done is finished. */
        int sig = a->stop ? *a->stop : 0;
        char data_err[512] = "";
        const int data_st = read_step(r, data_err, sizeof data_err);
        double flags[4] = {sig != 0, metrics_failed, r->ckpt && merak_ckpt_busy(r->ckpt), data_st != MERAK_OK};
        if (merak_allreduce_f64(r->world, flags, 4) < 0) {
            merak_errf(err, errlen, "%s", merak_comm_error(r->comm));
            return alone(r, err, errlen);
        }
        if (flags[1] > 0)
            return -1;   /* rank 0 has the message */
        if (flags[3] > 0)   /* the data failed on some rank: the last good step is kept */
            return data_failed(r, data_st, data_err, err, errlen);
        if (flags[2] == 0 && checkpoint_finish(r, err, errlen) < 0)
            return -1;
        if (flags[0] > 0) {
            int agreed = agree_signal(r, sig);
            if (agreed < 0) {
                merak_errf(err, errlen, "%s", merak_comm_error(r->comm));
                return alone(r, err, errlen);
            }
            if (a->stop)
                *a->stop = agreed;   /* the signal, on every rank */
            break;
        }
        double t0 = merak_now();
        if (r->step == r->step0)
            r->trace.origin = t0;   /* every rank just left the same collective */
        r->trace.step = r->step;
        if (merak_stage_run(r->stage, &hooks, err, errlen) < 0) {
            if (!r->diverged)
                return alone(r, err, errlen);
            char why[400];
            snprintf(why, sizeof why, "%s", err);
            return merak_errf(err, errlen, "step %d: %s", r->step, why);
        }
        /* a periodic checkpoint: its copy (and a wait for the previous
         * one's writers) counts in the step's time */
        if (r->ckpt && a->save_every && (r->step + 1) % a->save_every == 0 && r->step + 1 < a->steps &&
            checkpoint(r, r->step + 1, 0, err, errlen) < 0)
            return -1;
        double t1 = merak_now();
        /* the step's numbers, before the evaluation and the sample move
         * bytes of their own */
        merak_step_info info = {
            .step = r->step, .steps = a->steps, .loss = r->loss, .grad_norm = r->norm,
            .lr = r->step_lr, .skipped = r->skipped, .val_loss = NAN,
            .tokens_per_s = (double)a->micro_batch * a->seq_len * M * r->grid->dp / (t1 - t0),
            .step_ms = (t1 - t0) * 1e3,
            .eta_s = (t1 - t_start) / (r->step - r->step0 + 1) * (a->steps - r->step - 1),
        };
        merak_stage_step_stats(r->stage, &info);
        /* the validation set, after every eval_every-th update and the last */
        info.evaluated = a->val_data && ((a->eval_every && (r->step + 1) % a->eval_every == 0) ||
                                         r->step + 1 == a->steps);
        if (info.evaluated && evaluate(r, &info.val_loss, err, errlen) < 0)
            return alone(r, err, errlen);
        /* a sample, after every sample_every-th update and the last */
        char *sample = NULL;
        size_t sample_len = 0;
        if (a->sample_every && ((r->step + 1) % a->sample_every == 0 || r->step + 1 == a->steps) &&
            take_sample(r, &sample, &sample_len, err, errlen) < 0)
            return alone(r, err, errlen);
        if (!rank0)
            continue;
        if (metrics && merak_metrics_write(metrics, &info, err, errlen) < 0) {
            metrics_failed = 1;   /* everyone stops at the next agreement */
            free(sample);
            continue;
        }
        if (a->on_step)
            a->on_step(&info, a->user);
        if (sample && a->on_sample)
            a->on_sample(r->step, sample, sample_len, a->user);
        free(sample);
    }
    /* after the last step (or a stop) metrics can still have failed */
    double failed = metrics_failed;
    if (merak_allreduce_f64(r->world, &failed, 1) < 0) {
        merak_errf(err, errlen, "%s", merak_comm_error(r->comm));
        return alone(r, err, errlen);
    }
    if (failed > 0)
        return MERAK_FAILED;   /* rank 0 has the message */
    /* the end, or a stop: the last checkpoint, written through */
    if (r->ckpt && r->saved != r->step && checkpoint(r, r->step, 1, err, errlen) < 0)
        return MERAK_FAILED;
    r->final_save = 1;   /* also when the last step's save was already in flight */
    if (checkpoint_finish(r, err, errlen) < 0)
        return MERAK_FAILED;
    return r->step;
}

/* The pipeline's messages have the size of the activations' storage: every
 * rank keeps bf16 in the storage rank 0 keeps (MERAK_BF16_STORAGE alike
 * everywhere), or the ranks end with the one naming its own.  Collective. */
static int agree_storage(merak_run *r, int mine, int st, char *err, size_t errlen)
{
    if (r->grid->world == 1)
        return st;
    int first = mine;
    if (merak_broadcast(r->world, &first, sizeof first, 0) < 0)
        return merak_errf(err, errlen, "%s", merak_comm_error(r->comm)), MERAK_FAILED;
    if (st == MERAK_OK && first != mine)
        st = (merak_errf(err, errlen, "rank %d keeps bf16 in %s storage and rank 0 in %s: set MERAK_BF16_STORAGE "
                         "alike on every rank", merak_rank(), mine ? "float" : "bf16", first ? "float" : "bf16"),
              MERAK_USAGE);
    return merak_comm_agree(r->comm, st, err, errlen);
}

int merak_train(const merak_graph *g, const merak_args *a, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!merak_session_comm() && merak_init(a->dp, a->tp, a->pp, err, errlen) < 0)
        return MERAK_FAILED;
    merak_comm *const comm = merak_session_comm();
    const merak_grid *gr = merak_comm_grid(comm);
    int rank0 = gr->rank == 0, vocab = -1;
    /* The same checks on every rank, so every rank fails alike; st: this
     * rank's status, the first failure's, until the ranks agree. */
    int st = merak_args_check(a, err, errlen);
    if (st == MERAK_OK && (vocab = merak_check_graph(g, a, err, errlen)) < 0)
        st = MERAK_FAILED;
    else if (st == MERAK_OK && ((a->dp && a->dp != gr->dp) || (a->tp && a->tp != gr->tp) || (a->pp && a->pp != gr->pp)))
        st = merak_errf(err, errlen, "the arguments ask for dp=%d tp=%d pp=%d but merak_init made dp=%d tp=%d pp=%d",
                        a->dp, a->tp, a->pp, gr->dp, gr->tp, gr->pp);
    if (st < 0) {
        if (!rank0)
            err[0] = 0;
        return st;
    }

    merak_run r = {.a = a, .comm = comm, .grid = gr, .world = merak_comm_group(comm, MERAK_GROUP_WORLD),
             .seed = a->seed, .saved = -1, .lock_fd = -1,
             .eval_batches = a->eval_batches > 0 ? a->eval_batches : 4 * gr->dp};
    r.lr = (merak_lr){a->lr_schedule, a->lr, a->min_lr, a->warmup, a->steps};
    merak_stage_opts so = {.micro_batches = a->micro_batches, .virtual_stages = a->virtual_stages,
                           .tp_overlap = a->tp_overlap, .zero = a->zero, .bucket_mb = a->bucket_mb,
                           .bf16 = merak_args_bf16(a), .float_storage = merak_args_float_storage(a)};
    merak_tp_rule *rules = NULL;
    merak_schedule_parse(a->schedule ? a->schedule : "1f1b", &so.schedule);
    merak_recompute_parse(a->recompute ? a->recompute : "none", &so.recompute, NULL, 0);
    const int V = merak_args_virtual_stages(a);
    int *bounds = malloc((size_t)(gr->pp * V + 1) * sizeof *bounds);
    int *starts = malloc((size_t)(gr->pp * V) * sizeof *starts);
    double predicted = 0;
    merak_comm_path path = {.coll = "mpi"};
    if (!bounds || !starts)
        st = merak_errf(err, errlen, "out of memory");
    else if (merak_comm_set_timeout(comm, a->comm_timeout, err, errlen) < 0)
        st = MERAK_FAILED;
    else if ((st = merak_session_kernels(a, gr->world, &so.kernels, &path, err, errlen)) != MERAK_OK)
        ;
    else if ((st = agree_storage(&r, so.float_storage, MERAK_OK, err, errlen)) != MERAK_OK)
        ;
    else if (a->tp_rules && merak_tp_rules_load(g, a->tp_rules, &rules, &so.nrules, err, errlen) < 0)
        st = MERAK_FAILED;
    else if ((so.rules = rules, (st = merak_partition_stages(g, a, gr, so.schedule, V, rules, so.nrules, starts, bounds,
                                                       &predicted, err, errlen)) < 0))
        ;   /* MERAK_USAGE for options that cannot work here */
    else if (a->val_data && r.eval_batches % gr->dp != 0) {
        merak_errf(err, errlen, "--eval-batches %d is not a multiple of dp %d (the replicas split "
                   "the validation windows)", r.eval_batches, gr->dp);
        st = MERAK_USAGE;
    }
    so.bounds = bounds;
    /* every rank reaches the memory check, the collective it is */
    if ((st = merak_comm_agree(comm, st, err, errlen)) < 0)
        ;
    else if (merak_find_resume(&r, err, errlen) < 0)
        st = MERAK_FAILED;
    else if ((st = merak_check_memory(&r, g, &so, err, errlen)) < 0)
        ;
    else if ((st = merak_stage_create(comm, g, &so, &r.stage, err, errlen)) < 0)
        ;
    else
        r.e = merak_stage_exec(r.stage);
    if (st == MERAK_OK && setup(&r, vocab, err, errlen) < 0)
        st = MERAK_FAILED;
    merak_metrics *metrics = NULL;
    if (st == MERAK_OK && rank0 && merak_check_outputs(&r, g, err, errlen) < 0)
        st = MERAK_FAILED;
    if (st == MERAK_OK && rank0 && merak_resumed_data(&r, err, errlen) < 0)
        st = MERAK_FAILED;
    if (st == MERAK_OK && rank0 && a->metrics && !(metrics = merak_metrics_open(a->metrics, merak_args_dtype(a), err, errlen)))
        st = MERAK_FAILED;
    if (st == MERAK_OK && rank0 && a->sample_every &&
        !(r.sampler = merak_train_sampler_create(g, so.kernels, a->sample_prompt, a->tokenizer,
                                                 a->sample_tokens > 0 ? a->sample_tokens : 64, a->seed, err, errlen)))
        st = MERAK_FAILED;
    merak_group *pp_g = merak_comm_group(comm, MERAK_GROUP_PP);
    /* Activations and gradients over the asked backend: the stage's
     * pipeline group switches together (and back at the end). */
    int n = merak_comm_agree(comm, st, err, errlen);   /* the steps, or the status */
    stage_table table = {0};
    if (n == MERAK_OK)
        n = merak_stage_table_fill(&r, &table, err, errlen) < 0 ? MERAK_FAILED : MERAK_OK;
    if (n == MERAK_OK)   /* every rank switches, or none goes on */
        n = merak_comm_agree(comm, merak_group_set_p2p(pp_g, path.p2p, err, errlen) < 0 ? MERAK_FAILED : MERAK_OK,
                             err, errlen);
    if (n == MERAK_OK) {
        if (a->trace)
            merak_stage_set_trace(r.stage, &r.trace);
        if (rank0 && a->on_start) {
            merak_run_info ri = {gr->dp, gr->tp, gr->pp, gr->world, merak_exec_arena_bytes(r.e),
                                 table.bytes, table.layers, table.recomputed, starts, predicted,
                                 table.bytes + 3 * gr->pp, path.staged, merak_comm_placement(comm), path.coll,
                                 path.why, path.p2p};
            a->on_start(&ri, a->user);
        }
        if (r.resume[0])
            report(&r, MERAK_CHECKPOINT_RESUMED, r.step0, r.resume, r.resume_bytes, r.resume_s,
                   r.data_change[0] ? r.data_change : NULL);
        else if (a->resume)
            report(&r, MERAK_CHECKPOINT_NONE, 0, a->save, 0, 0, NULL);
        n = steps(&r, metrics, err, errlen);
        if (n != MERAK_FAILED_HERE) {
            st = merak_metrics_close(metrics, err, errlen) < 0 || n < 0 ? MERAK_FAILED : MERAK_OK;
            metrics = NULL;
            if (merak_comm_agree(comm, st, err, errlen) < 0)
                n = MERAK_FAILED;
        }
        if (n >= 0 && a->save_weights) {
            merak_gathered w;
            st = merak_stage_gather(r.stage, &w, err, errlen) < 0 ||
                         (rank0 && merak_weights_save_arrays(g, w.n, w.tensors, (const float *const *)w.data,
                                                             a->save_weights, NULL,
                                                             a->save_dtype && !strcmp(a->save_dtype, "bf16"),
                                                             a->save_shard_size, err, errlen) < 0)
                     ? MERAK_FAILED
                     : MERAK_OK;
            merak_gathered_free(&w);
            if (merak_comm_agree(comm, st, err, errlen) < 0)
                n = MERAK_FAILED;
        }
        if (n >= 0 && a->trace) {
            st = merak_trace_write(comm, &r.trace, a->trace, merak_schedule_name(so.schedule), a->micro_batches,
                                   merak_stage_chunks(r.stage), err, errlen) < 0
                     ? MERAK_FAILED
                     : MERAK_OK;
            if (merak_comm_agree(comm, st, err, errlen) < 0)
                n = MERAK_FAILED;
        }
        if (n != MERAK_FAILED_HERE)
            merak_group_set_p2p(pp_g, "mpi", NULL, 0);
    }
    merak_metrics_close(metrics, NULL, 0);
    run_free(&r);
    free(rules);
    free(bounds);
    free(starts);
    merak_stage_table_free(&table);
    if (n < 0 && n != MERAK_FAILED_HERE && !rank0)
        err[0] = 0;   /* every rank failed alike: rank 0 reports */
    return n;
}

/* ------------------------------------------------------------------ trainer object */

struct merak_trainer {
    const merak_graph *g;
    merak_args args;
};

merak_trainer *merak_trainer_create(const merak_graph *g, const merak_args *a, char *err,
                                    size_t errlen)
{
    if (merak_args_check(a, err, errlen) < 0 || merak_check_graph(g, a, err, errlen) < 0)
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
