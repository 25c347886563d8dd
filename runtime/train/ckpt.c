/*
 * ckpt.c - training checkpoints (see ckpt.h): save with a background
 * writer, finish with manifest and DONE, find, and load into any layout.
 */
#define _XOPEN_SOURCE 700
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "ckpt.h"
#include "clock.h"
#include "data.h"
#include "errf.h"
#include "file.h"
#include "grow.h"
#include "safetensors.h"

#define MOMENTS MERAK_CKPT_MOMENTS
#define moment_suffix merak_ckpt_moment_suffix

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

/* Is name one of the files a checkpoint directory holds (its config,
 * manifest, DONE and shard files), or the temporary of one (atomic.h:
 * ".NAME.XXXXXX")? */
static int ckpt_own(const char *name)
{
    char base[NAME_MAX + 1];
    size_t n = strlen(name);
    if (name[0] == '.' && n > 8 && name[n - 7] == '.' && n - 8 < sizeof base) {
        memcpy(base, name + 1, n - 8);
        base[n - 8] = '\0';
        name = base;
    }
    if (!strcmp(name, "DONE") || !strcmp(name, "config.json") || !strcmp(name, "manifest.json"))
        return 1;
    int pp, tp, end = 0;
    char kind[8], again[64];
    if (sscanf(name, "%5[a-z]-pp%3d-tp%3d.safetensors%n", kind, &pp, &tp, &end) != 3 || name[end] ||
        (strcmp(kind, "model") && strcmp(kind, "optim")))
        return 0;
    file_name(strcmp(kind, "optim") == 0, pp, tp, again, sizeof again);
    return strcmp(again, name) == 0;
}

/* The first entry of checkpoint directory dir that a checkpoint does not
 * write, into other (empty if none); -1 if dir cannot be read. */
static int ckpt_foreign(const char *dir, char *other, size_t len)
{
    other[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) && !other[0])
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !ckpt_own(de->d_name))
            snprintf(other, len, "%s", de->d_name);
    closedir(d);
    return 0;
}

/* Removes a checkpoint directory: the files a checkpoint writes, then the
 * directory if that empties it.  Anything else in it (a user's file) is
 * kept, and so is the directory then (best effort). */
static void rm_ckpt_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (ckpt_own(de->d_name)) {
            char p[PATH_MAX + NAME_MAX + 2];
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(path);
}

static int is_file(const char *dir, const char *name)
{
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
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
        int step = merak_ckpt_dir_step(de->d_name);
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

int merak_ckpt_newest(const char *root)
{
    newest_ctx c = {-1, ""};
    scan(root, newest_fn, &c);
    return c.step;
}

int merak_ckpt_lock(const char *root, int *fd, char *err, size_t errlen)
{
    char path[PATH_MAX], holder[256] = "";
    if ((size_t)snprintf(path, sizeof path, "%s/.lock", root) >= sizeof path)
        return merak_errf(err, errlen, "checkpoint directory %s: the path is too long", root);
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (*fd < 0)
        return merak_errf(err, errlen, "checkpoint directory %s: cannot open %s: %s", root, path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(*fd, F_SETLK, &fl) != 0) {
        int e = errno;
        ssize_t n = pread(*fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(*fd);
        *fd = -1;
        if (e == EACCES || e == EAGAIN)
            return merak_errf(err, errlen, "checkpoint directory %s: another run writes checkpoints there (%s): "
                              "save elsewhere, or wait for it to end", root, holder[0] ? holder : "its lock file names none");
        if (e == ENOLCK || e == ENOSYS || e == EOPNOTSUPP || e == EINVAL)
            return 0;   /* a file system without locks (NFS without lockd): the run goes on unguarded */
        return merak_errf(err, errlen, "checkpoint directory %s: cannot lock %s: %s", root, path, strerror(e));
    }
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    char since[32] = "?";
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int len = snprintf(holder, sizeof holder, "pid %ld on %s, since %s\n", (long)getpid(), host, since);
    /* the note of the holder is for another run's message: the lock holds without it */
    int noted = ftruncate(*fd, 0) == 0 && pwrite(*fd, holder, (size_t)len, 0) == len;
    (void)noted;
    return 0;
}

void merak_ckpt_unlock(int fd)
{
    if (fd >= 0)
        close(fd);   /* releases the lock */
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
    const char *base = strrchr(where, '/') ? strrchr(where, '/') + 1 : where;
    if (is_file(where, "manifest.json") || merak_ckpt_dir_step(base) >= 0) {
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
    const merak_data *data;           /* rank 0: the run's shards, for the manifest; or NULL */
    char *config;                     /* rank 0: the model's config.json, or NULL */
    job job;
    pthread_t thread;
    int thread_started;
    atomic_int busy;
};

/* Ends a save's job: its tables go, its host buffers stay for the next
 * save (the same size every time: no new pages to fault in while training
 * waits for the copy). */
static void job_reset(job *j)
{
    for (int i = 0; j->names && i < MOMENTS * j->nparams; i++)
        free(j->names[i]);
    for (int i = 0; j->vals && i < j->nparams; i++)
        free(j->vals[i]);
    free(j->names), free(j->keys), free(j->vals);
    free(j->entries[0]), free(j->entries[1]);
    float *P = j->P, *m = j->mom[0], *v = j->mom[1];
    memset(j, 0, sizeof *j);
    j->P = P, j->mom[0] = m, j->mom[1] = v;
}

static void job_free(job *j)
{
    job_reset(j);
    free(j->P), free(j->mom[0]), free(j->mom[1]);
    memset(j, 0, sizeof *j);
}

static void *write_files(void *arg)
{
    merak_ckpt_writer *w = arg;
    job *j = &w->job;
    int n[2] = {j->nparams, MOMENTS * j->nparams};
    for (int f = 0; f < 2 && !j->failed; f++)
        if (merak_st_finite(j->path[f], j->entries[f], n[f], j->err, sizeof j->err) < 0 ||
            merak_st_write(j->path[f], j->entries[f], n[f], j->keys, (const char *const *)j->vals, j->nparams,
                           &j->crc[f], &j->bytes[f], j->err, sizeof j->err) < 0)
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
    free(w->config);
    free(w);
}

int merak_ckpt_busy(const merak_ckpt_writer *w) { return atomic_load(&w->busy); }
void merak_ckpt_writer_data(merak_ckpt_writer *w, const merak_data *d) { w->data = d; }
int merak_ckpt_in_flight(const merak_ckpt_writer *w) { return w->in_flight; }

merak_ckpt_run merak_ckpt_run_of(const merak_args *a, int dp, int tp, int pp)
{
    return (merak_ckpt_run){.dp = dp, .tp = tp, .pp = pp, .schedule = a->schedule ? a->schedule : "1f1b",
                            .virtual_stages = merak_args_virtual_stages(a), .zero = a->zero,
                            .micro_batches = a->micro_batches, .micro_batch = a->micro_batch, .seq_len = a->seq_len,
                            .data = a->data ? a->data : "", .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps,
                            .weight_decay = a->weight_decay, .clip = a->clip, .model = a->model,
                            .dtype = merak_args_dtype(a)};
}

/* Rank 0's manifest of this save, its files added when they are written. */
static json_t *manifest_new(const merak_ckpt_run *r, const merak_ckpt_state *st)
{
    json_t *m = json_pack(
        "{s:s, s:i, s:s, s:i, s:{s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:i}, s:{s:s, s:I}, s:{s:I, s:I}, "
        "s:{s:s, s:i, s:f, s:f, s:f, s:f, s:f}}",
        "format", MERAK_CKPT_FORMAT, "version", MERAK_CKPT_VERSION, "producer", "merak " MERAK_VERSION_STRING, "step",
        st->step, "layout", "dp", r->dp, "tp", r->tp, "pp", r->pp, "schedule", r->schedule, "virtual_stages",
        r->virtual_stages, "zero", r->zero, "micro_batches", r->micro_batches, "micro_batch", r->micro_batch,
        "seq_len", r->seq_len, "data", "pattern", r->data, "consumed", (json_int_t)st->consumed, "rng", "seed",
        (json_int_t)st->seed, "next_micro_batch", (json_int_t)st->consumed, "optimizer", "kind", "adamw", "steps",
        st->adam_steps, "beta1", r->beta1, "beta2", r->beta2, "eps", r->eps, "weight_decay", r->weight_decay, "clip",
        r->clip);
    if (m)
        json_object_set_new(m, "dtype", json_string(r->dtype ? r->dtype : "fp32"));
    if (m && r->model)
        json_object_set_new(m, "model", json_pack("{s:s, s:s}", "name", r->model->name, "config", "config.json"));
    if (m)
        json_object_set_new(m, "files", json_array());
    return m;
}

/* The entries and metadata of a job of np parameters. */
static int job_tables(job *j, int np, char *err, size_t errlen)
{
    j->nparams = np;
    j->entries[0] = calloc((size_t)np + 1, sizeof(merak_st_entry));
    j->entries[1] = calloc((size_t)(MOMENTS * np) + 1, sizeof(merak_st_entry));
    j->names = calloc((size_t)(MOMENTS * np) + 1, sizeof *j->names);
    j->keys = calloc((size_t)np + 1, sizeof *j->keys);
    j->vals = calloc((size_t)np + 1, sizeof *j->vals);
    if (!j->entries[0] || !j->entries[1] || !j->names || !j->keys || !j->vals)
        return merak_errf(err, errlen, "out of memory describing the checkpoint's tensors");
    return 0;
}

/* Parameter i of the job: tensor t (of the model, or a tensor-parallel
 * shard of it) with values p and moments m, v (t's elements each). */
static int job_entry(job *j, int i, const merak_tensor *t, const float *p, const float *m, const float *v, char *err,
                     size_t errlen)
{
    merak_st_entry en = {.name = t->name, .ndim = t->ndim, .data = p};
    const float *mom[MOMENTS] = {m, v};
    for (int d = 0; d < t->ndim; d++)
        en.shape[d] = t->shape[d];
    j->entries[0][i] = en;
    j->keys[i] = t->name;
    if (!(j->vals[i] = place_format(t)))
        return merak_errf(err, errlen, "out of memory describing '%s'", t->name);
    for (int k = 0; k < MOMENTS; k++) {
        size_t len = strlen(t->name) + strlen(moment_suffix[k]) + 1;
        char *name = j->names[MOMENTS * i + k] = malloc(len);
        if (!name)
            return merak_errf(err, errlen, "out of memory naming the moments of '%s'", t->name);
        snprintf(name, len, "%s%s", t->name, moment_suffix[k]);
        en.name = name;
        en.data = mom[k];
        j->entries[1][MOMENTS * i + k] = en;
    }
    return 0;
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
    /* kept from the last save when there was one: the stage does not change */
    for (int m = 0; m < MOMENTS; m++)
        if (!j->mom[m] && !(j->mom[m] = malloc((n ? n : 1) * sizeof(float))))
            return merak_errf(err, errlen, "out of memory copying the optimizer state for the checkpoint");
    if (!writer)
        return 0;
    if (!j->P && !(j->P = malloc((n ? n : 1) * sizeof(float))))
        return merak_errf(err, errlen, "out of memory copying the parameters for the checkpoint");
    return job_tables(j, np, err, errlen);
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
        size_t off = (size_t)(merak_exec_param_data(e, i) - p0);
        if (job_entry(j, i, &g->tensors[merak_exec_param_tensor(e, i)], j->P + off, j->mom[0] + off,
                      j->mom[1] + off, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* Rank 0: ROOT/step_N ready and empty.  0, or -1 with err. */
static int make_dir(merak_ckpt_writer *w, char *err, size_t errlen)
{
    if (mkdir(w->root, 0777) != 0 && errno != EEXIST)
        return merak_errf(err, errlen, "checkpoint directory %s: cannot make the directory: %s", w->root, strerror(errno));
    struct stat st;
    char other[NAME_MAX + 1];
    if (stat(w->dir, &st) == 0) {   /* an incomplete one from a run that died, or a step saved again */
        if (!S_ISDIR(st.st_mode) || ckpt_foreign(w->dir, other, sizeof other) < 0)
            return merak_errf(err, errlen, "%s: is there and is not a readable directory: move it away", w->dir);
        if (other[0])
            return merak_errf(err, errlen, "%s holds %s, which a checkpoint does not write: move it away (nothing "
                              "was deleted)", w->dir, other);
        rm_ckpt_dir(w->dir);
    }
    if (mkdir(w->dir, 0777) != 0)
        return merak_errf(err, errlen, "%s: cannot make the checkpoint directory: %s", w->dir, strerror(errno));
    return 0;
}

int merak_ckpt_save(merak_ckpt_writer *w, merak_comm *comm, merak_stage *s, const merak_optim *o,
                    const merak_ckpt_run *run, const merak_ckpt_state *st, char *err, size_t errlen)
{
    const merak_grid *gr = merak_comm_grid(comm);
    merak_ckpt_done prev;
    if (merak_ckpt_finish(w, comm, &prev, err, errlen) < 0)
        return -1;   /* callers finish first, to hear how it went */
    w->step = st->step;
    int failed = step_dir(w->root, st->step, w->dir, sizeof w->dir) < 0
                     ? merak_errf(err, errlen, "checkpoint directory %s: the path is too long", w->root) < 0
                     : 0;
    if (gr->rank == 0 && !failed) {
        json_decref(w->manifest);
        free(w->config);
        w->manifest = manifest_new(run, st);
        if (w->manifest && w->data) {   /* the shards, in window order, with their tokens */
            json_t *list = json_array();
            for (int i = 0; list && i < merak_data_num_shards(w->data); i++) {
                char crc[16];
                snprintf(crc, sizeof crc, "%08x", (unsigned)merak_data_shard_crc(w->data, i));
                json_array_append_new(list, json_pack("{s:s, s:I, s:s}", "path", merak_data_shard_path(w->data, i),
                                                      "tokens", (json_int_t)merak_data_shard_tokens(w->data, i),
                                                      "crc32", crc));
            }
            json_object_set_new(json_object_get(w->manifest, "data"), "shards", list);
        }
        w->config = run->model ? merak_model_config_json(run->model) : NULL;
        failed = !w->manifest || (run->model && !w->config)
                     ? merak_errf(err, errlen, "out of memory writing the manifest") < 0
                     : make_dir(w, err, errlen) < 0;
    }
    job *j = &w->job;
    job_reset(j);
    int writer = gr->dp_rank == 0;
    if (!failed)
        failed = job_alloc(j, s, writer, err, errlen) < 0;
    if (merak_comm_agree(comm, failed ? MERAK_FAILED : MERAK_OK, err, errlen) < 0) {
        if (gr->rank == 0)
            rm_ckpt_dir(w->dir);
        job_reset(j);
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
        /* the writer blocks every signal: a stop signal goes to the
         * training thread, never interrupts a write */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        atomic_store(&w->busy, 1);
        if (pthread_create(&w->thread, NULL, write_files, w) != 0) {
            atomic_store(&w->busy, 0);
            failed = merak_errf(err, errlen, "cannot start the checkpoint writer thread") < 0;
        } else {
            w->thread_started = 1;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
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
    int *steps, n;
    char (*paths)[PATH_MAX];
    size_t cap_steps, cap_paths;
} prune_ctx;

static void prune_fn(void *ctx, int step, int complete, const char *path)
{
    prune_ctx *c = ctx;
    if (step >= c->now)
        return;   /* the one just written (nothing newer is in ROOT: merak-train checks) */
    if (!complete) {
        rm_ckpt_dir(path);   /* never loadable: a write that died */
        return;
    }
    if (merak_grow((void **)&c->steps, &c->cap_steps, (size_t)c->n + 1, sizeof *c->steps) < 0 ||
        merak_grow((void **)&c->paths, &c->cap_paths, (size_t)c->n + 1, sizeof *c->paths) < 0)
        return;
    c->steps[c->n] = step;
    snprintf(c->paths[c->n++], PATH_MAX, "%s", path);
}

/* Removes all but the newest keep complete checkpoints, and incomplete
 * ones older than step now. */
static void prune(const char *root, int keep, int now)
{
    prune_ctx c = {.keep = keep, .now = now};
    if (scan(root, prune_fn, &c) == 0 && keep > 0)
        for (int removed = 0; removed < c.n - (keep - 1); removed++) {   /* and the new one */
            int oldest = -1;
            for (int i = 0; i < c.n; i++)
                if (c.steps[i] >= 0 && (oldest < 0 || c.steps[i] < c.steps[oldest]))
                    oldest = i;
            rm_ckpt_dir(c.paths[oldest]);
            c.steps[oldest] = -1;
        }
    free(c.steps);
    free(c.paths);
}

/* Writes text to PATH atomically; 0, or -1 with err. */
static int write_text(const char *path, const char *text, char *err, size_t errlen)
{
    merak_atomic *af;
    if (merak_atomic_open(path, &af, err, errlen) < 0)
        return -1;
    merak_atomic_write(af, text, strlen(text));
    merak_atomic_write(af, "\n", 1);
    return merak_atomic_commit(af, err, errlen);
}

/* Rank 0: the model's config.json, the manifest with every file, then DONE. */
static int write_manifest(merak_ckpt_writer *w, const merak_grid *gr, const double *v, char *err, size_t errlen)
{
    json_t *files = json_object_get(w->manifest, "files");
    char path[PATH_MAX + 32];
    if (w->config) {
        uint32_t crc;
        uint64_t bytes;
        char hex[16];
        snprintf(path, sizeof path, "%s/config.json", w->dir);
        if (write_text(path, w->config, err, errlen) < 0 || merak_file_crc32(path, &crc, &bytes, err, errlen) < 0)
            return -1;
        snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
        json_array_append_new(files, json_pack("{s:s, s:s, s:I, s:s}", "name", "config.json", "kind", "config",
                                               "bytes", (json_int_t)bytes, "crc32", hex));
    }
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
    snprintf(path, sizeof path, "%s/manifest.json", w->dir);
    char *text = json_dumps(w->manifest, JSON_INDENT(2) | JSON_REAL_PRECISION(9)), done[128];
    if (!text)
        return merak_errf(err, errlen, "out of memory writing the manifest");
    int rc = write_text(path, text, err, errlen);
    free(text);
    /* DONE vouches for the manifest, which vouches for every other file */
    uint32_t crc;
    uint64_t bytes;
    if (rc < 0 || merak_file_crc32(path, &crc, &bytes, err, errlen) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/DONE", w->dir);
    snprintf(done, sizeof done, "step %d\n" MERAK_CKPT_DONE_MANIFEST "%08x bytes %llu", w->step, (unsigned)crc,
             (unsigned long long)bytes);
    return write_text(path, done, err, errlen);
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
    double *v = calloc(5 * (size_t)gr->world, sizeof *v);
    if (!v && !j->failed) {
        j->failed = 1;
        snprintf(j->err, sizeof j->err, "out of memory finishing the checkpoint");
    }
    if (j->failed)
        snprintf(err, errlen, "checkpoint step %d: %s", w->step, j->err);
    int rc = merak_comm_agree(comm, j->failed ? MERAK_FAILED : MERAK_OK, err, errlen);
    if (rc == 0) {
        double *mine = v + 5 * gr->rank;
        for (int f = 0; f < 2 && gr->dp_rank == 0; f++)
            mine[2 * f] = j->crc[f], mine[2 * f + 1] = (double)j->bytes[f];
        mine[4] = j->seconds;
        if (merak_allreduce_f64(merak_comm_group(comm, MERAK_GROUP_WORLD), v, 5 * (size_t)gr->world) < 0)
            rc = merak_errf(err, errlen, "%s", merak_comm_error(comm));
        int failed = rc == 0 && gr->rank == 0 && write_manifest(w, gr, v, err, errlen) < 0;
        if (rc == 0)
            rc = merak_comm_agree(comm, failed ? MERAK_FAILED : MERAK_OK, err, errlen);
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
        rm_ckpt_dir(w->dir);   /* never half a checkpoint; the previous ones stay */
    }
    free(v);
    job_reset(j);
    return rc < 0 ? -1 : 0;
}

int merak_ckpt_write_whole(const char *root, const merak_graph *g, int n, const int *tensors,
                           const float *const *data, const merak_model_config *model, uint64_t seed, char *err,
                           size_t errlen)
{
    const merak_grid gr = {.dp = 1, .tp = 1, .pp = 1, .world = 1};
    merak_args a;   /* an export records the default run, on one process */
    merak_ckpt_state st = {0, 0, seed, 0};
    merak_ckpt_writer *w = merak_ckpt_writer_create(root, 0);
    float *zeros = NULL;
    int rc = -1;
    merak_args_default(&a);
    if (!w)
        return merak_errf(err, errlen, "out of memory");
    job *j = &w->job;
    size_t most = 1;
    for (int i = 0; i < n; i++)
        most = (size_t)merak_tensor_elems(&g->tensors[tensors[i]]) > most
                   ? (size_t)merak_tensor_elems(&g->tensors[tensors[i]]) : most;
    merak_ckpt_run run = merak_ckpt_run_of(&a, 1, 1, 1);
    run.model = model;
    w->manifest = manifest_new(&run, &st);
    w->config = model ? merak_model_config_json(model) : NULL;
    if (!w->manifest || (model && !w->config) || !(zeros = calloc(most, sizeof *zeros))) {
        merak_errf(err, errlen, "out of memory");
        goto out;
    }
    /* a new checkpoint directory: step 0 in one with newer steps would never be picked */
    DIR *d = opendir(root);
    struct dirent *de;
    int used = 0;
    while (d && !used && (de = readdir(d)))
        used = strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    if (d)
        closedir(d);
    if (used) {
        merak_errf(err, errlen, "%s: not empty; import writes a new checkpoint directory", root);
        goto out;
    }
    if (step_dir(root, 0, w->dir, sizeof w->dir) < 0 || make_dir(w, err, errlen) < 0 ||
        job_tables(j, n, err, errlen) < 0)
        goto out;
    for (int i = 0; i < n; i++)
        if (job_entry(j, i, &g->tensors[tensors[i]], data[i], zeros, zeros, err, errlen) < 0)
            goto out;
    for (int f = 0; f < 2; f++) {
        char name[64];
        file_name(f, 0, 0, name, sizeof name);
        if ((size_t)snprintf(j->path[f], sizeof j->path[f], "%s/%s", w->dir, name) >= sizeof j->path[f]) {
            merak_errf(err, errlen, "%s: the path is too long", w->dir);
            goto out;
        }
    }
    write_files(w);
    if (j->failed) {
        merak_errf(err, errlen, "%s", j->err);
        goto out;
    }
    double v[5] = {j->crc[0], (double)j->bytes[0], j->crc[1], (double)j->bytes[1], j->seconds};
    rc = write_manifest(w, &gr, v, err, errlen);
out:
    if (rc < 0 && w->dir[0])
        rm_ckpt_dir(w->dir);
    free(zeros);
    merak_ckpt_writer_destroy(w);
    return rc;
}

int merak_ckpt_load(const char *dir, merak_stage *s, merak_optim *o, const merak_model_config *model, int rank,
                    int world, merak_ckpt_state *st, double *bytes, char *err, size_t errlen)
{
    merak_ckpt *c;
    merak_exec *e = merak_stage_exec(s);
    const merak_graph *g = merak_stage_graph(s);
    size_t n, lo, hi;
    float *p0 = merak_exec_params_flat(e, &n), *local = NULL;
    float *mom[MOMENTS] = {NULL, NULL};
    merak_stage_share(s, &lo, &hi);
    if (merak_ckpt_open(dir, model, rank, world, &c, err, errlen) < 0)
        return -1;
    *st = merak_ckpt_meta_of(c)->st;
    *bytes = 0;
    for (int i = 0; i < merak_ckpt_num_files(c); i++)
        *bytes += (double)merak_ckpt_file_at(c, i)->bytes;
    int rc = merak_ckpt_check_names(c, merak_stage_model(s), err, errlen);
    size_t most = 1;
    for (int i = 0; i < merak_exec_num_params(e); i++)
        most = merak_exec_param_elems(e, i) > most ? merak_exec_param_elems(e, i) : most;
    if (rc == 0) {
        local = malloc(most * sizeof *local);
        for (int m = 0; m < MOMENTS; m++)
            mom[m] = calloc(hi > lo ? hi - lo : 1, sizeof(float));
        if (!local || !mom[0] || !mom[1])
            rc = merak_errf(err, errlen, "out of memory loading the checkpoint");
    }
    for (int i = 0; rc == 0 && i < merak_exec_num_params(e); i++) {
        const merak_tensor *t = &g->tensors[merak_exec_param_tensor(e, i)];
        size_t a = (size_t)(merak_exec_param_data(e, i) - p0), b = a + merak_exec_param_elems(e, i);
        rc = merak_ckpt_read(c, t, -1, local, err, errlen);
        if (rc == 0 && merak_exec_param_write(e, i, local) < 0)
            rc = merak_errf(err, errlen, "copying '%s' to the %s backend failed", t->name,
                            merak_exec_kernels(e)->name);
        /* the moments of the part of it this rank updates */
        size_t ca = a > lo ? a : lo, cb = b < hi ? b : hi;
        for (int m = 0; rc == 0 && m < MOMENTS && ca < cb; m++)
            if ((rc = merak_ckpt_read(c, t, m, local, err, errlen)) == 0)
                memcpy(mom[m] + (ca - lo), local + (ca - a), (cb - ca) * sizeof(float));
    }
    if (rc == 0 && merak_optim_write(o, mom[0], mom[1], st->adam_steps) < 0)
        rc = merak_errf(err, errlen, "copying the optimizer state to the %s backend failed",
                        merak_exec_kernels(e)->name);
    merak_ckpt_close(c);
    free(local), free(mom[0]), free(mom[1]);
    return rc;
}
