/*
 * ckpt.c - training checkpoints (see ckpt.h): save with a background
 * writer, finish with manifest and DONE, find, and load into any layout.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "ckpt.h"
#include "clock.h"
#include "errf.h"
#include "file.h"
#include "safetensors.h"

#define CKPT_FORMAT "merak-checkpoint"
#define CKPT_VERSION 1
#define MOMENTS 2
static const char *const moment_suffix[MOMENTS] = {".exp_avg", ".exp_avg_sq"};

/* ------------------------------------------------------------------ names and places */

/* ROOT/step_N in out; 0, or -1 when it does not fit. */
static int step_dir(const char *root, int step, char *out, size_t len)
{
    return (size_t)snprintf(out, len, "%s/step_%08d", root, step) < len ? 0 : -1;
}

/* "model-pp000-tp000.safetensors" (kind 0) or "optim-..." (kind 1). */
static void file_name(int kind, int pp, int tp, char *out, size_t len)
{
    snprintf(out, len, "%s-pp%03d-tp%03d.safetensors", kind ? "optim" : "model", pp, tp);
}

/* t's place in its whole tensor as the metadata's JSON string (malloc'd). */
static char *place_format(const merak_tensor *t)
{
    json_t *full = json_array(), *segs = json_array();
    for (int i = 0; i < t->ndim; i++)
        json_array_append_new(full, json_integer(t->full[i]));
    for (int s = 0; t->shard_dim >= 0 && s < t->nseg; s++)
        json_array_append_new(segs, json_pack("[II]", (json_int_t)t->seg_start[s], (json_int_t)t->seg_len[s]));
    json_t *o = json_pack("{s:o, s:i, s:o}", "full", full, "dim", t->shard_dim, "segs", segs);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* A tensor of the file (info, its place in metadata string s) as a
 * merak_tensor whose shape is the stored one and full/dim/segs say where
 * it lies.  0, or -1 with err naming file and tensor. */
static int place_parse(const char *file, const merak_st_info *info, const char *s, merak_tensor *t, char *err,
                       size_t errlen)
{
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *o = s ? json_loads(s, 0, &je) : NULL, *full, *segs;
    int dim = -2, rc = -1;
    if (!o || json_unpack(o, "{s:o, s:i, s:o}", "full", &full, "dim", &dim, "segs", &segs) != 0 ||
        !json_is_array(full) || !json_is_array(segs)) {
        merak_errf(err, errlen, "%s: tensor '%s': its place in the whole tensor is %s", file, info->name,
                   s ? "not {\"full\", \"dim\", \"segs\"}" : "missing from the metadata");
        goto out;
    }
    t->ndim = info->ndim;
    t->shard_dim = dim;
    int nseg = (int)json_array_size(segs);
    if (info->ndim < 1 || info->ndim > MERAK_MAX_DIMS || (int)json_array_size(full) != info->ndim ||
        dim < -1 || dim >= info->ndim || (dim >= 0) != (nseg > 0) || nseg > MERAK_TP_MAX_SEGS) {
        merak_errf(err, errlen, "%s: tensor '%s': its place (dim %d, %d segments, %zu dimensions) does not fit "
                   "its %d dimensions", file, info->name, dim, nseg, json_array_size(full), info->ndim);
        goto out;
    }
    int64_t held = 0;
    for (int i = 0; i < info->ndim; i++) {
        json_t *x = json_array_get(full, (size_t)i);
        t->shape[i] = info->shape[i];
        t->full[i] = json_is_integer(x) ? json_integer_value(x) : -1;
        if (t->full[i] < 1 || (i != dim && t->full[i] != t->shape[i])) {
            merak_errf(err, errlen, "%s: tensor '%s': dimension %d is %lld in the file but %lld in its whole tensor",
                       file, info->name, i, (long long)t->shape[i], (long long)t->full[i]);
            goto out;
        }
    }
    t->nseg = nseg;
    for (int k = 0; k < nseg; k++) {
        json_int_t a = -1, n = -1;
        json_unpack(json_array_get(segs, (size_t)k), "[II]", &a, &n);
        if (a < 0 || n < 1 || a + n > t->full[dim]) {
            merak_errf(err, errlen, "%s: tensor '%s': segment %d [%lld, +%lld) is outside its whole tensor's %lld",
                       file, info->name, k, (long long)a, (long long)n, (long long)t->full[dim]);
            goto out;
        }
        t->seg_start[k] = a, t->seg_len[k] = n;
        held += n;
    }
    if (dim >= 0 && held != t->shape[dim]) {
        merak_errf(err, errlen, "%s: tensor '%s': its segments hold %lld of dimension %d, the file %lld", file,
                   info->name, (long long)held, dim, (long long)t->shape[dim]);
        goto out;
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* Removes a checkpoint directory and everything in it (best effort). */
static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}
static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int is_file(const char *dir, const char *name)
{
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The step of "step_NNNNNNNN", or -1. */
static int dir_step(const char *name)
{
    int step, n = -1;
    if (sscanf(name, "step_%8d%n", &step, &n) != 1 || n != 13 || name[n] || step < 0)
        return -1;
    return step;
}

/* Checkpoint steps under root, with DONE (complete) or not: calls fn for
 * each.  0, or -1 (root unreadable; errno set). */
static int scan(const char *root, void (*fn)(void *ctx, int step, int complete, const char *path), void *ctx)
{
    DIR *d = opendir(root);
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        int step = dir_step(de->d_name);
        if (step < 0)
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        fn(ctx, step, is_file(p, "DONE"), p);
    }
    closedir(d);
    return 0;
}

typedef struct newest_ctx {
    int step;
    char path[PATH_MAX];
} newest_ctx;

static void newest_fn(void *ctx, int step, int complete, const char *path)
{
    newest_ctx *c = ctx;
    if (complete && step > c->step) {
        c->step = step;
        snprintf(c->path, sizeof c->path, "%s", path);
    }
}

int merak_ckpt_find(const char *spec, const char *root, char *out, size_t outlen, char *err, size_t errlen)
{
    int latest = strcmp(spec, "latest") == 0;
    const char *where = latest ? root : spec;
    if (!where)
        return merak_errf(err, errlen, "--resume latest: no --save directory to look in");
    struct stat st;
    if (stat(where, &st) != 0) {
        if (latest && errno == ENOENT)
            return 0;   /* the first run of a job that will be requeued */
        return merak_errf(err, errlen, "%s: cannot read the checkpoint: %s", where, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return merak_errf(err, errlen, "%s: not a checkpoint directory", where);
    if (is_file(where, "manifest.json") || dir_step(strrchr(where, '/') ? strrchr(where, '/') + 1 : where) >= 0) {
        if (!is_file(where, "DONE"))
            return merak_errf(err, errlen, "%s: the checkpoint is incomplete (no DONE: its writing was "
                                           "interrupted); resume from an earlier one", where);
        snprintf(out, outlen, "%s", where);
        return 1;
    }
    newest_ctx c = {-1, ""};
    if (scan(where, newest_fn, &c) < 0)
        return merak_errf(err, errlen, "%s: cannot read the checkpoint directory: %s", where, strerror(errno));
    if (c.step < 0)
        return latest ? 0 : merak_errf(err, errlen, "%s: holds no complete checkpoint (step_N with DONE)", where);
    snprintf(out, outlen, "%s", c.path);
    return 1;
}

/* ------------------------------------------------------------------ saving */

/* One rank's files of one save: the host copies and the thread writing them. */
typedef struct job {
    int nparams;
    float *P, *mom[MOMENTS];          /* flat parameters and moments (the whole stage) */
    merak_st_entry *entries[2];       /* model: nparams; optim: MOMENTS * nparams */
    char **names;                     /* the moments' tensor names */
    const char **keys;                /* metadata: parameter names -> places */
    char **vals;
    char path[2][PATH_MAX];
    /* results, read after join */
    int failed;
    char err[512];
    uint32_t crc[2];
    uint64_t bytes[2];
    double t0, seconds;
} job;

struct merak_ckpt_writer {
    char root[PATH_MAX];
    int keep_last;
    int in_flight, step;
    char dir[PATH_MAX];
    json_t *manifest;                 /* rank 0: the manifest but its files */
    job job;
    pthread_t thread;
    int thread_started;
    atomic_int busy;
};

static void job_free(job *j)
{
    free(j->P);
    for (int k = 0; k < MOMENTS; k++)
        free(j->mom[k]);
    for (int i = 0; j->names && i < MOMENTS * j->nparams; i++)
        free(j->names[i]);
    for (int i = 0; j->vals && i < j->nparams; i++)
        free(j->vals[i]);
    free(j->names), free(j->keys), free(j->vals);
    free(j->entries[0]), free(j->entries[1]);
    memset(j, 0, sizeof *j);
}

static void *write_files(void *arg)
{
    merak_ckpt_writer *w = arg;
    job *j = &w->job;
    int n[2] = {j->nparams, MOMENTS * j->nparams};
    for (int f = 0; f < 2 && !j->failed; f++)
        if (merak_st_write(j->path[f], j->entries[f], n[f], j->keys, (const char *const *)j->vals, j->nparams,
                           j->err, sizeof j->err) < 0 ||
            merak_file_crc32(j->path[f], &j->crc[f], &j->bytes[f], j->err, sizeof j->err) < 0)
            j->failed = 1;
    j->seconds = merak_now() - j->t0;
    atomic_store(&w->busy, 0);
    return NULL;
}

merak_ckpt_writer *merak_ckpt_writer_create(const char *root, int keep_last)
{
    merak_ckpt_writer *w = calloc(1, sizeof *w);
    if (w) {
        snprintf(w->root, sizeof w->root, "%s", root);
        w->keep_last = keep_last;
    }
    return w;
}

static void join(merak_ckpt_writer *w)
{
    if (w->thread_started)
        pthread_join(w->thread, NULL);
    w->thread_started = 0;
}

void merak_ckpt_writer_destroy(merak_ckpt_writer *w)
{
    if (!w)
        return;
    join(w);
    job_free(&w->job);
    json_decref(w->manifest);
    free(w);
}

int merak_ckpt_busy(const merak_ckpt_writer *w) { return atomic_load(&w->busy); }
int merak_ckpt_in_flight(const merak_ckpt_writer *w) { return w->in_flight; }

static json_t *model_json(const merak_model_config *c)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:f, s:f}", "arch",
                     c->arch == MERAK_ARCH_LLAMA ? "llama" : "gpt2", "name", c->name, "vocab_size", c->vocab_size,
                     "max_positions", c->max_positions, "hidden", c->hidden, "n_layer", c->n_layer, "n_head",
                     c->n_head, "n_kv_head", c->n_kv_head, "ffn_hidden", c->ffn_hidden, "norm_eps",
                     (double)c->norm_eps, "rope_theta", (double)c->rope_theta, "tie_embeddings",
                     c->tie_embeddings, "init_std", (double)c->init_std, "dropout", (double)c->dropout);
}

/* Rank 0's manifest of this save, its files added when they are written. */
static json_t *manifest_new(const merak_grid *gr, const merak_args *a, const merak_ckpt_state *st,
                            const merak_model_config *model)
{
    json_t *m = json_pack(
        "{s:s, s:i, s:s, s:i, s:{s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:i}, s:{s:s, s:I}, s:{s:I, s:I}, "
        "s:{s:s, s:i, s:f, s:f, s:f, s:f, s:f}}",
        "format", CKPT_FORMAT, "version", CKPT_VERSION, "producer", "merak " MERAK_VERSION_STRING, "step",
        st->step, "layout", "dp", gr->dp, "tp", gr->tp, "pp", gr->pp, "schedule", a->schedule ? a->schedule : "1f1b",
        "virtual_stages", merak_args_virtual_stages(a), "zero", a->zero, "micro_batches", a->micro_batches,
        "micro_batch", a->micro_batch, "seq_len", a->seq_len, "data", "pattern", a->data ? a->data : "",
        "consumed", (json_int_t)st->consumed, "rng", "seed", (json_int_t)st->seed, "next_micro_batch",
        (json_int_t)st->consumed, "optimizer", "kind", "adamw", "steps", st->adam_steps, "beta1", (double)a->beta1,
        "beta2", (double)a->beta2, "eps", (double)a->eps, "weight_decay", (double)a->weight_decay, "clip",
        (double)a->clip);
    if (m && model)
        json_object_set_new(m, "model", model_json(model));
    if (m)
        json_object_set_new(m, "files", json_array());
    return m;
}

/* The host buffers of this rank's copy: the moments of the whole stage
 * (a ZeRO share is gathered into them; without ZeRO only the writer needs
 * them) and, on a writer, the parameters and the entries.  0, or -1. */
static int job_alloc(job *j, merak_stage *s, int writer, char *err, size_t errlen)
{
    merak_exec *e = merak_stage_exec(s);
    size_t n, lo, hi;
    merak_exec_params_flat(e, &n);
    merak_stage_share(s, &lo, &hi);
    int np = j->nparams = merak_exec_num_params(e);
    if (!writer && lo == 0 && hi == n)
        return 0;
    for (int m = 0; m < MOMENTS; m++)
        j->mom[m] = calloc(n ? n : 1, sizeof(float));
    if (!j->mom[0] || !j->mom[1])
        return merak_errf(err, errlen, "out of memory copying the optimizer state for the checkpoint");
    if (!writer)
        return 0;
    j->P = malloc((n ? n : 1) * sizeof(float));
    j->entries[0] = calloc((size_t)np + 1, sizeof(merak_st_entry));
    j->entries[1] = calloc((size_t)(MOMENTS * np) + 1, sizeof(merak_st_entry));
    j->names = calloc((size_t)(MOMENTS * np) + 1, sizeof *j->names);
    j->keys = calloc((size_t)np + 1, sizeof *j->keys);
    j->vals = calloc((size_t)np + 1, sizeof *j->vals);
    if (!j->P || !j->entries[0] || !j->entries[1] || !j->names || !j->keys || !j->vals)
        return merak_errf(err, errlen, "out of memory copying the parameters for the checkpoint");
    return 0;
}

/* Copies the state into the buffers job_alloc made (every rank of a ZeRO
 * group takes part in the gather, whatever failed on it).  0, or -1. */
static int job_copy(job *j, merak_stage *s, const merak_optim *o, int writer, char *err, size_t errlen)
{
    merak_exec *e = merak_stage_exec(s);
    const merak_graph *g = merak_stage_graph(s);
    const merak_kernels *k = merak_exec_kernels(e);
    size_t n, lo, hi;
    float *p0 = merak_exec_params_flat(e, &n);
    merak_stage_share(s, &lo, &hi);
    int np = j->nparams, rc = 0;
    if (!j->mom[0])
        return 0;   /* a replica without ZeRO: the writer has it all */
    if (merak_optim_read(o, j->mom[0] + lo, j->mom[1] + lo) < 0)
        rc = merak_errf(err, errlen, "copying the optimizer state from the %s backend failed", k->name);
    for (int m = 0; m < MOMENTS; m++)
        if (merak_stage_allgather_share(s, j->mom[m], err, errlen) < 0)
            return -1;
    if (!writer || rc < 0)
        return rc;
    if (k->copy(j->P, p0, n * sizeof(float), MERAK_COPY_D2H) < 0)
        return merak_errf(err, errlen, "copying the parameters from the %s backend failed", k->name);
    for (int i = 0; i < np; i++) {
        const merak_tensor *t = &g->tensors[merak_exec_param_tensor(e, i)];
        size_t off = (size_t)(merak_exec_param_data(e, i) - p0);
        merak_st_entry en = {.name = t->name, .ndim = t->ndim, .data = j->P + off};
        for (int d = 0; d < t->ndim; d++)
            en.shape[d] = t->shape[d];
        j->entries[0][i] = en;
        j->keys[i] = t->name;
        if (!(j->vals[i] = place_format(t)))
            return merak_errf(err, errlen, "out of memory describing '%s'", t->name);
        for (int m = 0; m < MOMENTS; m++) {
            size_t len = strlen(t->name) + strlen(moment_suffix[m]) + 1;
            char *name = j->names[MOMENTS * i + m] = malloc(len);
            if (!name)
                return merak_errf(err, errlen, "out of memory naming the moments of '%s'", t->name);
            snprintf(name, len, "%s%s", t->name, moment_suffix[m]);
            en.name = name;
            en.data = j->mom[m] + off;
            j->entries[1][MOMENTS * i + m] = en;
        }
    }
    return 0;
}

/* Rank 0: ROOT/step_N ready and empty.  0, or -1 with err. */
static int make_dir(merak_ckpt_writer *w, char *err, size_t errlen)
{
    if (mkdir(w->root, 0777) != 0 && errno != EEXIST)
        return merak_errf(err, errlen, "--save %s: cannot make the directory: %s", w->root, strerror(errno));
    struct stat st;
    if (stat(w->dir, &st) == 0)
        rm_tree(w->dir);   /* an incomplete one from a run that died, or a step saved again */
    if (mkdir(w->dir, 0777) != 0)
        return merak_errf(err, errlen, "%s: cannot make the checkpoint directory: %s", w->dir, strerror(errno));
    return 0;
}

int merak_ckpt_save(merak_ckpt_writer *w, merak_comm *comm, merak_stage *s, const merak_optim *o,
                    const merak_args *a, const merak_ckpt_state *st, char *err, size_t errlen)
{
    const merak_grid *gr = merak_comm_grid(comm);
    merak_ckpt_done prev;
    if (merak_ckpt_finish(w, comm, &prev, err, errlen) < 0)
        return -1;   /* callers finish first, to hear how it went */
    w->step = st->step;
    int failed = step_dir(w->root, st->step, w->dir, sizeof w->dir) < 0
                     ? merak_errf(err, errlen, "--save %s: the path is too long", w->root) < 0
                     : 0;
    if (gr->rank == 0 && !failed) {
        json_decref(w->manifest);
        w->manifest = manifest_new(gr, a, st, a->model);
        failed = !w->manifest ? merak_errf(err, errlen, "out of memory writing the manifest") < 0
                              : make_dir(w, err, errlen) < 0;
    }
    job *j = &w->job;
    job_free(j);
    int writer = gr->dp_rank == 0;
    if (!failed)
        failed = job_alloc(j, s, writer, err, errlen) < 0;
    if (merak_comm_agree(comm, failed, err, errlen) < 0) {
        if (gr->rank == 0)
            rm_tree(w->dir);
        job_free(j);
        return -1;
    }
    j->t0 = merak_now();
    failed = job_copy(j, s, o, writer, err, errlen) < 0;
    if (!failed && writer) {
        for (int f = 0; f < 2; f++) {
            char name[64];
            file_name(f, gr->pp_rank, gr->tp_rank, name, sizeof name);
            if ((size_t)snprintf(j->path[f], sizeof j->path[f], "%s/%s", w->dir, name) >= sizeof j->path[f])
                failed = merak_errf(err, errlen, "%s: the path is too long", w->dir) < 0;
        }
    }
    if (!failed && writer) {
        atomic_store(&w->busy, 1);
        if (pthread_create(&w->thread, NULL, write_files, w) != 0) {
            atomic_store(&w->busy, 0);
            failed = merak_errf(err, errlen, "cannot start the checkpoint writer thread") < 0;
        } else {
            w->thread_started = 1;
        }
    }
    if (!writer || failed) {
        for (int m = 0; m < MOMENTS; m++)   /* non-writers only needed them for the gather */
            free(j->mom[m]), j->mom[m] = NULL;
    }
    w->in_flight = 1;
    if (failed) {
        j->failed = 1;
        snprintf(j->err, sizeof j->err, "%s", err);
    }
    return 0;
}

typedef struct prune_ctx {
    int keep, now;
    int *steps, n, cap;
    char (*paths)[PATH_MAX];
} prune_ctx;

static void prune_fn(void *ctx, int step, int complete, const char *path)
{
    prune_ctx *c = ctx;
    if (!complete) {
        if (step < c->now)
            rm_tree(path);   /* never loadable: a write that died */
        return;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        int *s = realloc(c->steps, (size_t)cap * sizeof *s);
        char(*p)[PATH_MAX] = s ? realloc(c->paths, (size_t)cap * sizeof *p) : NULL;
        if (s)
            c->steps = s;
        if (!p)
            return;
        c->paths = p, c->cap = cap;
    }
    c->steps[c->n] = step;
    snprintf(c->paths[c->n++], PATH_MAX, "%s", path);
}

/* Removes all but the newest keep complete checkpoints, and incomplete
 * ones older than step now. */
static void prune(const char *root, int keep, int now)
{
    prune_ctx c = {keep, now, NULL, 0, 0, NULL};
    if (scan(root, prune_fn, &c) == 0 && keep > 0)
        for (int removed = 0; removed < c.n - keep; removed++) {
            int oldest = -1;
            for (int i = 0; i < c.n; i++)
                if (c.steps[i] >= 0 && (oldest < 0 || c.steps[i] < c.steps[oldest]))
                    oldest = i;
            rm_tree(c.paths[oldest]);
            c.steps[oldest] = -1;
        }
    free(c.steps);
    free(c.paths);
}

/* Rank 0: the manifest with every writer's files, then DONE. */
static int write_manifest(merak_ckpt_writer *w, const merak_grid *gr, const double *v, char *err, size_t errlen)
{
    json_t *files = json_object_get(w->manifest, "files");
    for (int p = 0; p < gr->pp; p++)
        for (int t = 0; t < gr->tp; t++) {
            int r = merak_grid_rank(gr, 0, t, p);
            for (int f = 0; f < 2; f++) {
                char name[64], crc[16];
                file_name(f, p, t, name, sizeof name);
                snprintf(crc, sizeof crc, "%08x", (unsigned)v[5 * r + 2 * f]);
                json_array_append_new(files, json_pack("{s:s, s:s, s:i, s:i, s:I, s:s}", "name", name, "kind",
                                                       f ? "optim" : "model", "pp", p, "tp", t, "bytes",
                                                       (json_int_t)v[5 * r + 2 * f + 1], "crc32", crc));
            }
        }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/manifest.json", w->dir);
    char *text = json_dumps(w->manifest, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    merak_atomic *af;
    if (!text)
        return merak_errf(err, errlen, "out of memory writing the manifest");
    int rc = merak_atomic_open(path, &af, err, errlen);
    if (rc == 0) {
        merak_atomic_write(af, text, strlen(text));
        merak_atomic_write(af, "\n", 1);
        rc = merak_atomic_commit(af, err, errlen);
    }
    free(text);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/DONE", w->dir);
        if ((rc = merak_atomic_open(path, &af, err, errlen)) == 0) {
            fprintf(merak_atomic_file(af), "step %d\n", w->step);
            rc = merak_atomic_commit(af, err, errlen);
        }
    }
    return rc;
}

int merak_ckpt_finish(merak_ckpt_writer *w, merak_comm *comm, merak_ckpt_done *done, char *err, size_t errlen)
{
    memset(done, 0, sizeof *done);
    if (!w->in_flight)
        return 0;
    const merak_grid *gr = merak_comm_grid(comm);
    join(w);
    w->in_flight = 0;
    job *j = &w->job;
    if (j->failed)
        snprintf(err, errlen, "checkpoint step %d: %s", w->step, j->err);
    int rc = merak_comm_agree(comm, j->failed, err, errlen);
    double *v = rc == 0 ? calloc(5 * (size_t)gr->world, sizeof *v) : NULL;
    if (rc == 0 && !v)
        rc = merak_errf(err, errlen, "out of memory finishing the checkpoint");
    if (rc == 0) {
        double *mine = v + 5 * gr->rank;
        for (int f = 0; f < 2 && gr->dp_rank == 0; f++)
            mine[2 * f] = j->crc[f], mine[2 * f + 1] = (double)j->bytes[f];
        mine[4] = j->seconds;
        if (merak_allreduce_f64(merak_comm_group(comm, MERAK_GROUP_WORLD), v, 5 * (size_t)gr->world) < 0)
            rc = merak_errf(err, errlen, "%s", merak_comm_error(comm));
        int failed = rc == 0 && gr->rank == 0 && write_manifest(w, gr, v, err, errlen) < 0;
        if (rc == 0)
            rc = merak_comm_agree(comm, failed, err, errlen);
    }
    if (rc == 0) {
        done->step = w->step;
        snprintf(done->path, sizeof done->path, "%s", w->dir);
        for (int r = 0; r < gr->world; r++) {
            done->bytes += v[5 * r + 1] + v[5 * r + 3];
            done->seconds = v[5 * r + 4] > done->seconds ? v[5 * r + 4] : done->seconds;
        }
        if (gr->rank == 0)
            prune(w->root, w->keep_last, w->step);
    } else if (gr->rank == 0) {
        rm_tree(w->dir);   /* never half a checkpoint; the previous ones stay */
    }
    free(v);
    job_free(j);
    return rc < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ loading */

typedef struct ckpt_files {
    const char *dir;
    int n;
    merak_st_file **f;    /* [n] */
    char (*path)[PATH_MAX];
    int *kind;            /* 0 model, 1 optim */
} ckpt_files;

static void files_close(ckpt_files *F)
{
    for (int i = 0; i < F->n; i++)
        merak_st_close(F->f[i]);
    free(F->f), free(F->path), free(F->kind);
}

static int bad_manifest(const char *path, const char *what, char *err, size_t errlen)
{
    return merak_errf(err, errlen, "%s: %s", path, what);
}

/* Checks the manifest's model against this run's. */
static int check_model(const char *path, json_t *jm, const merak_model_config *c, char *err, size_t errlen)
{
    if (!jm || !c)
        return 0;
    const char *arch = NULL;
    int v[7] = {0};
    if (json_unpack(jm, "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "arch", &arch, "vocab_size", &v[0],
                    "max_positions", &v[1], "hidden", &v[2], "n_layer", &v[3], "n_head", &v[4], "n_kv_head",
                    &v[5], "ffn_hidden", &v[6]) != 0)
        return bad_manifest(path, "\"model\" lacks arch, vocab_size, max_positions, hidden, n_layer, n_head, "
                                  "n_kv_head or ffn_hidden", err, errlen);
    const char *field[] = {"vocab_size", "max_positions", "hidden", "n_layer", "n_head", "n_kv_head", "ffn_hidden"};
    int mine[] = {c->vocab_size, c->max_positions, c->hidden, c->n_layer, c->n_head, c->n_kv_head, c->ffn_hidden};
    const char *my_arch = c->arch == MERAK_ARCH_LLAMA ? "llama" : "gpt2";
    if (strcmp(arch, my_arch) != 0)
        return merak_errf(err, errlen, "%s: the checkpoint is of a %s model, this run trains a %s model", path, arch,
                          my_arch);
    for (int i = 0; i < 7; i++)
        if (v[i] != mine[i])
            return merak_errf(err, errlen, "%s: the checkpoint's model has %s %d, this run's %d (model %s)", path,
                              field[i], v[i], mine[i], c->name);
    return 0;
}

/* Reads DIR/manifest.json: state, model check, files (opened, checked
 * against their CRC when this rank verifies them). */
static int read_manifest(const char *dir, const merak_model_config *model, int rank, int world, merak_ckpt_state *st,
                         ckpt_files *F, char *err, size_t errlen)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *fp = merak_file_fopen(path, err, errlen);
    if (!fp)
        return -1;
    json_error_t je;
    json_t *m = json_loadf(fp, JSON_REJECT_DUPLICATES, &je), *files = NULL, *jm = NULL;
    fclose(fp);
    if (!m)
        return merak_errf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    const char *format = NULL;
    int version = 0, rc = -1;
    json_int_t consumed = -1, seed = -1;
    if (json_unpack(m, "{s:s, s:i, s:i, s:{s:I}, s:{s:I}, s:{s:i}, s:o, s?o}", "format", &format, "version", &version,
                    "step", &st->step, "data", "consumed", &consumed, "rng", "seed", &seed, "optimizer", "steps",
                    &st->adam_steps, "files", &files, "model", &jm) != 0 ||
        strcmp(format, CKPT_FORMAT) != 0 || !json_is_array(files)) {
        bad_manifest(path, "not a merak checkpoint manifest (format, version, step, data.consumed, rng.seed, "
                           "optimizer.steps and files are required)", err, errlen);
        goto out;
    }
    if (version != CKPT_VERSION) {
        merak_errf(err, errlen, "%s: checkpoint format version %d; this merak reads version %d", path, version,
                   CKPT_VERSION);
        goto out;
    }
    if (st->step < 0 || consumed < 0 || seed < 0 || st->adam_steps < 0) {
        bad_manifest(path, "step, data.consumed, rng.seed and optimizer.steps must not be negative", err, errlen);
        goto out;
    }
    st->consumed = (uint64_t)consumed;
    st->seed = (uint64_t)seed;
    if (check_model(path, jm, model, err, errlen) < 0)
        goto out;
    int n = (int)json_array_size(files);
    F->f = calloc((size_t)n + 1, sizeof *F->f);
    F->path = calloc((size_t)n + 1, sizeof *F->path);
    F->kind = calloc((size_t)n + 1, sizeof *F->kind);
    if (!F->f || !F->path || !F->kind) {
        merak_errf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *kind = NULL, *crc = NULL;
        json_int_t bytes = -1;
        if (json_unpack(json_array_get(files, (size_t)i), "{s:s, s:s, s:I, s:s}", "name", &name, "kind", &kind,
                        "bytes", &bytes, "crc32", &crc) != 0 ||
            (strcmp(kind, "model") != 0 && strcmp(kind, "optim") != 0) || strchr(name, '/') || name[0] == '.') {
            merak_errf(err, errlen, "%s: files[%d] is not {name, kind model|optim, bytes, crc32} of a file in it",
                       path, i);
            goto out;
        }
        snprintf(F->path[i], PATH_MAX, "%s/%s", dir, name);
        F->kind[i] = strcmp(kind, "optim") == 0;
        if (i % world == rank) {
            uint32_t got;
            uint64_t size;
            if (merak_file_crc32(F->path[i], &got, &size, err, errlen) < 0)
                goto out;
            if ((json_int_t)size != bytes || strtoul(crc, NULL, 16) != got) {
                merak_errf(err, errlen, "%s: damaged: %llu bytes with CRC-32 %08x, the manifest says %lld bytes "
                           "with %s", F->path[i], (unsigned long long)size, (unsigned)got, (long long)bytes, crc);
                goto out;
            }
        }
        if (merak_st_open(F->path[i], &F->f[i], err, errlen) < 0)
            goto out;
        F->n = i + 1;
    }
    rc = 0;
out:
    json_decref(m);
    return rc;
}

/* Every tensor of every file is a parameter of the model (or its moment). */
static int check_names(const ckpt_files *F, const merak_graph *model, char *err, size_t errlen)
{
    for (int i = 0; i < F->n; i++)
        for (int k = 0; k < merak_st_count(F->f[i]); k++) {
            const char *name = merak_st_at(F->f[i], k)->name;
            char base[MERAK_NAME_MAX + 16];
            snprintf(base, sizeof base, "%s", name);
            int ok = !F->kind[i];
            for (int m = 0; F->kind[i] && m < MOMENTS; m++) {
                size_t a = strlen(base), b = strlen(moment_suffix[m]);
                if (a > b && strcmp(base + a - b, moment_suffix[m]) == 0) {
                    base[a - b] = 0;
                    ok = 1;
                    break;
                }
            }
            int t = ok ? merak_graph_find(model, base) : -1;
            if (t < 0 || merak_graph_param_root(model, t) != t)
                return merak_errf(err, errlen, "%s: tensor '%s' is not a parameter of this model%s", F->path[i],
                                  name, ok ? "" : " (an optimizer file holds NAME.exp_avg and NAME.exp_avg_sq)");
        }
    return 0;
}

typedef struct cover {
    unsigned char *seen;   /* [elements of the whole tensor] */
    int64_t added;
} cover;

static void cover_run(void *ctx, int64_t local, int64_t global, int64_t n)
{
    cover *c = ctx;
    (void)local;
    for (int64_t e = global; e < global + n; e++)
        if (!c->seen[e])
            c->seen[e] = 1, c->added++;
}

/* Tensor `name` (parameter t's own, or a moment of it) whole in `whole`,
 * from every file of kind that holds a part of it, then t's shard of it
 * in local.  0, or -1 with err when a part is missing or does not fit. */
static int assemble(const ckpt_files *F, int kind, const char *name, const merak_tensor *t, float *whole,
                    float **tmp, size_t *tmp_n, float *local, char *err, size_t errlen)
{
    int64_t full_n = 1;
    for (int d = 0; d < t->ndim; d++)
        full_n *= t->full[d];
    cover cv = {calloc((size_t)full_n, 1), 0};
    if (!cv.seen)
        return merak_errf(err, errlen, "out of memory loading '%s'", name);
    int rc = 0;
    for (int i = 0; i < F->n && rc == 0 && cv.added < full_n; i++) {
        const merak_st_info *info = F->kind[i] == kind ? merak_st_find(F->f[i], name) : NULL;
        if (!info)
            continue;
        merak_tensor src;
        if (place_parse(F->path[i], info, merak_st_metadata(F->f[i], t->name), &src, err, errlen) < 0) {
            rc = -1;
            break;
        }
        int64_t src_full = 1;
        for (int d = 0; d < src.ndim; d++)
            src_full *= src.full[d];
        if (src.ndim != t->ndim || memcmp(src.full, t->full, (size_t)t->ndim * sizeof *t->full) != 0) {
            rc = merak_errf(err, errlen, "%s: tensor '%s' is part of a %d-dimensional tensor of %lld elements; "
                            "this model's is %d-dimensional, %lld elements", F->path[i], name, src.ndim,
                            (long long)src_full, t->ndim, (long long)full_n);
            break;
        }
        size_t n = (size_t)merak_tensor_elems(&src);
        if (n > *tmp_n) {
            float *p = realloc(*tmp, n * sizeof *p);
            if (!p) {
                rc = merak_errf(err, errlen, "out of memory loading '%s'", name);
                break;
            }
            *tmp = p, *tmp_n = n;
        }
        if (merak_st_to_f32(info, *tmp, err, errlen) < 0) {
            rc = -1;
            break;
        }
        merak_shard_place(&src, *tmp, whole);
        merak_shard_runs(&src, cover_run, &cv);
    }
    free(cv.seen);
    if (rc == 0 && cv.added < full_n)
        rc = merak_errf(err, errlen, "%s: the checkpoint lacks %lld of the %lld elements of tensor '%s'",
                        F->dir, (long long)(full_n - cv.added), (long long)full_n, name);
    if (rc == 0)
        merak_shard_slice(t, whole, local);
    return rc;
}

int merak_ckpt_load(const char *dir, merak_stage *s, merak_optim *o, const merak_model_config *model, int rank,
                    int world, merak_ckpt_state *st, char *err, size_t errlen)
{
    ckpt_files F = {.dir = dir};
    merak_exec *e = merak_stage_exec(s);
    const merak_graph *g = merak_stage_graph(s);
    size_t n, lo, hi, tmp_n = 0;
    float *p0 = merak_exec_params_flat(e, &n), *tmp = NULL, *whole = NULL, *local = NULL;
    float *mom[MOMENTS] = {NULL, NULL};
    merak_stage_share(s, &lo, &hi);
    int rc = read_manifest(dir, model, rank, world, st, &F, err, errlen);
    if (rc == 0)
        rc = check_names(&F, merak_stage_model(s), err, errlen);
    int64_t most = 1;
    for (int i = 0; rc == 0 && i < merak_exec_num_params(e); i++) {
        const merak_tensor *t = &g->tensors[merak_exec_param_tensor(e, i)];
        int64_t f = 1;
        for (int d = 0; d < t->ndim; d++)
            f *= t->full[d];
        most = f > most ? f : most;
    }
    if (rc == 0) {
        whole = malloc((size_t)most * sizeof *whole);
        local = malloc((size_t)most * sizeof *local);
        for (int m = 0; m < MOMENTS; m++)
            mom[m] = calloc(hi > lo ? hi - lo : 1, sizeof(float));
        if (!whole || !local || !mom[0] || !mom[1])
            rc = merak_errf(err, errlen, "out of memory loading the checkpoint");
    }
    for (int i = 0; rc == 0 && i < merak_exec_num_params(e); i++) {
        const merak_tensor *t = &g->tensors[merak_exec_param_tensor(e, i)];
        size_t a = (size_t)(merak_exec_param_data(e, i) - p0), b = a + merak_exec_param_elems(e, i);
        rc = assemble(&F, 0, t->name, t, whole, &tmp, &tmp_n, local, err, errlen);
        if (rc == 0 && merak_exec_param_write(e, i, local) < 0)
            rc = merak_errf(err, errlen, "copying '%s' to the %s backend failed", t->name,
                            merak_exec_kernels(e)->name);
        /* the moments of the part of it this rank updates */
        size_t ca = a > lo ? a : lo, cb = b < hi ? b : hi;
        for (int m = 0; rc == 0 && m < MOMENTS && ca < cb; m++) {
            char name[MERAK_NAME_MAX + 16];
            snprintf(name, sizeof name, "%s%s", t->name, moment_suffix[m]);
            rc = assemble(&F, 1, name, t, whole, &tmp, &tmp_n, local, err, errlen);
            if (rc == 0)
                memcpy(mom[m] + (ca - lo), local + (ca - a), (cb - ca) * sizeof(float));
        }
    }
    if (rc == 0 && merak_optim_write(o, mom[0], mom[1], st->adam_steps) < 0)
        rc = merak_errf(err, errlen, "copying the optimizer state to the %s backend failed",
                        merak_exec_kernels(e)->name);
    files_close(&F);
    free(tmp), free(whole), free(local), free(mom[0]), free(mom[1]);
    return rc;
}
