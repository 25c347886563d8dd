/*
 * ckpt_read.c - reading checkpoints (see ckpt.h): the manifest, every file
 * verified, and any tensor of any tensor-parallel shard assembled from the
 * files that hold its parts.  No communication and no executor: the
 * trainer's loader (ckpt.c), merak-ckpt and the fuzz target share it.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "data.h"
#include "errf.h"
#include "file.h"
#include "grow.h"
#include "safetensors.h"

#define MOMENTS MERAK_CKPT_MOMENTS
#define moment_suffix merak_ckpt_moment_suffix

const char *const merak_ckpt_moment_suffix[MERAK_CKPT_MOMENTS] = {".exp_avg", ".exp_avg_sq"};

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
        if (a < 0 || n < 1 || a > t->full[dim] || n > t->full[dim] - a || n > t->shape[dim] - held) {
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

/* ------------------------------------------------------------------ reading */

#define FILE_PATH (PATH_MAX + 300)   /* a checkpoint directory and a file name in it */

struct merak_ckpt {
    char dir[PATH_MAX];
    merak_ckpt_meta meta;
    char config[FILE_PATH];    /* the model's config.json, or "" */
    int nfiles;                /* in the manifest */
    merak_ckpt_file *files;    /* [nfiles]; names owned */
    merak_st_file **st;        /* [nfiles]: the safetensors opened, NULL for config */
    char (*path)[FILE_PATH];   /* [nfiles]: DIR/name */
    float *tmp;                /* one stored part, as float32 */
    size_t tmp_n;
    float *whole;              /* one whole tensor */
    size_t whole_n;
    unsigned char *seen;       /* the indices placed, per dimension */
    size_t seen_n;
};

void merak_ckpt_close(merak_ckpt *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nfiles; i++) {
        merak_st_close(c->st[i]);
        free((char *)c->files[i].name);
    }
    free(c->files), free(c->st), free(c->path), free(c->tmp), free(c->whole), free(c->seen);
    free(c);
}

const merak_ckpt_meta *merak_ckpt_meta_of(const merak_ckpt *c) { return &c->meta; }
const char *merak_ckpt_config_path(const merak_ckpt *c) { return c->config[0] ? c->config : NULL; }
int merak_ckpt_num_files(const merak_ckpt *c) { return c->nfiles; }
const merak_ckpt_file *merak_ckpt_file_at(const merak_ckpt *c, int i) { return &c->files[i]; }
const merak_st_file *merak_ckpt_st(const merak_ckpt *c, int i) { return c->st[i]; }

/* Checks the checkpoint's model (its config.json) against this run's. */
static int check_model(const char *path, const merak_model_config *c, char *err, size_t errlen)
{
    merak_model_config k;
    if (!path[0] || !c)
        return 0;
    if (merak_model_config_load(path, &k, err, errlen) < 0)
        return -1;
    const char *arch = k.arch == MERAK_ARCH_LLAMA ? "llama" : "gpt2";
    const char *my_arch = c->arch == MERAK_ARCH_LLAMA ? "llama" : "gpt2";
    if (k.arch != c->arch)
        return merak_errf(err, errlen, "%s: the checkpoint is of a %s model, this run trains a %s model", path, arch,
                          my_arch);
    const char *field[] = {"vocab_size", "max_positions", "hidden", "n_layer", "n_head", "n_kv_head", "ffn_hidden",
                           "tie_embeddings", "qkv_bias"};
    int v[] = {k.vocab_size, k.max_positions, k.hidden, k.n_layer, k.n_head, k.n_kv_head, k.ffn_hidden,
               k.tie_embeddings, k.qkv_bias};
    int mine[] = {c->vocab_size, c->max_positions, c->hidden, c->n_layer, c->n_head, c->n_kv_head, c->ffn_hidden,
                  c->tie_embeddings, c->qkv_bias};
    for (int i = 0; i < 9; i++)
        if (v[i] != mine[i])
            return merak_errf(err, errlen, "%s: the checkpoint's model has %s %d, this run's %d (model %s)", path,
                              field[i], v[i], mine[i], c->name);
    return 0;
}

/* The manifest's fields beside the files (meta; optional ones left as
 * they are).  0, or -1 with err. */
static int read_meta(const char *path, json_t *m, merak_ckpt_meta *mt, char *err, size_t errlen)
{
    const char *format = NULL, *producer = "", *schedule = "", *data = "";
    int version = 0;
    json_int_t consumed = -1, seed = -1, step = -1, adam = -1;
    merak_ckpt_state *st = &mt->st;
    if (json_unpack(m, "{s:s, s:i, s:I, s:{s:I}, s:{s:I}, s:{s:I}}", "format", &format, "version", &version,
                    "step", &step, "data", "consumed", &consumed, "rng", "seed", &seed, "optimizer", "steps",
                    &adam) != 0 ||
        strcmp(format, MERAK_CKPT_FORMAT) != 0)
        return merak_errf(err, errlen, "%s: not a merak checkpoint manifest (format, version, step, data.consumed, "
                                       "rng.seed, optimizer.steps and files are required)", path);
    if (version != MERAK_CKPT_VERSION)
        return merak_errf(err, errlen, "%s: checkpoint format version %d; this merak reads version %d", path, version,
                          MERAK_CKPT_VERSION);
    if (step < 0 || consumed < 0 || seed < 0 || adam < 0 || step > INT_MAX || adam > INT_MAX)
        return merak_errf(err, errlen, "%s: step, data.consumed, rng.seed and optimizer.steps must not be negative, "
                          "the steps at most %d", path, INT_MAX);
    st->step = (int)step;
    st->adam_steps = (int)adam;
    st->consumed = (uint64_t)consumed;
    st->seed = (uint64_t)seed;
    /* the layout it was written in (what inspect and the resume's message
     * say): each number, when there, a size a run can have */
    json_int_t lay[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    const char *lay_name[8] = {"dp", "tp", "pp", "virtual_stages", "zero", "micro_batches", "micro_batch", "seq_len"};
    if (json_unpack(m, "{s?s, s?{s?s}, s?{s?I, s?I, s?I, s?s, s?I, s?I, s?I, s?I, s?I}}", "producer", &producer,
                    "data", "pattern", &data, "layout", "dp", &lay[0], "tp", &lay[1], "pp", &lay[2], "schedule",
                    &schedule, "virtual_stages", &lay[3], "zero", &lay[4], "micro_batches", &lay[5], "micro_batch",
                    &lay[6], "seq_len", &lay[7]) != 0)
        return merak_errf(err, errlen, "%s: producer, data.pattern and layout's fields have the wrong types", path);
    int *dst[8] = {&mt->dp, &mt->tp, &mt->pp, &mt->virtual_stages, &mt->zero, &mt->micro_batches, &mt->micro_batch,
                   &mt->seq_len};
    for (int i = 0; i < 8; i++) {
        if (lay[i] == -1 && !json_object_get(json_object_get(m, "layout"), lay_name[i]))
            continue;   /* absent: left as it was */
        if (lay[i] < (i == 4 ? 0 : 1) || lay[i] > (i == 4 ? 1 : INT_MAX))
            return merak_errf(err, errlen, "%s: layout.%s %lld is not a size a run has", path, lay_name[i],
                              (long long)lay[i]);
        *dst[i] = (int)lay[i];
    }
    snprintf(mt->producer, sizeof mt->producer, "%s", producer);
    snprintf(mt->schedule, sizeof mt->schedule, "%s", schedule);
    snprintf(mt->data, sizeof mt->data, "%s", data);
    return 0;
}

/* The manifest is the one DONE vouches for (its CRC-32 and size, when
 * there is a DONE that holds them): an edit of it is refused, never used.
 * 0, or -1 with err. */
static int manifest_vouched(const char *dir, const char *manifest, char *err, size_t errlen)
{
    char path[FILE_PATH], *done = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/DONE", dir);
    if (access(path, F_OK) != 0)
        return 0;   /* no DONE: whether the checkpoint is complete is judged where that matters */
    if (merak_file_read_all(path, &done, &n, err, errlen) < 0)
        return -1;
    const char *line = strstr(done, MERAK_CKPT_DONE_MANIFEST);
    unsigned want_crc;
    unsigned long long want_bytes;
    int vouched = line && sscanf(line + strlen(MERAK_CKPT_DONE_MANIFEST), "%8x bytes %llu", &want_crc,
                                 &want_bytes) == 2;
    free(done);
    if (!line)
        return 0;   /* a DONE from before DONE held the manifest's checksum */
    if (!vouched)
        return merak_errf(err, errlen, "%s: its manifest line is damaged", path);
    uint32_t crc;
    uint64_t bytes;
    if (merak_file_crc32(manifest, &crc, &bytes, err, errlen) < 0)
        return -1;
    if (crc != want_crc || bytes != want_bytes)
        return merak_errf(err, errlen, "%s: changed after the checkpoint was written (CRC-32 %08x, %llu bytes; DONE "
                          "says %08x, %llu bytes): it is not used", manifest, (unsigned)crc, (unsigned long long)bytes,
                          want_crc, want_bytes);
    return 0;
}

int merak_ckpt_dir_step(const char *name)
{
    int step, n = -1;
    if (sscanf(name, "step_%8d%n", &step, &n) != 1 || n != 13 || name[n] || step < 0)
        return -1;
    return step;
}

/* A directory named step_N whose manifest says another step (renamed, or
 * copied over another's name) is refused, naming both: "latest" and the
 * pruning go by the names, the run by the manifest.  0, or -1 with err. */
static int name_agrees(const char *dir, int step, char *err, size_t errlen)
{
    char name[FILE_PATH];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    const char *base = dir + len;
    while (base > dir && base[-1] != '/')
        base--;
    snprintf(name, sizeof name, "%.*s", (int)(dir + len - base), base);
    const int named = merak_ckpt_dir_step(name);
    if (named >= 0 && named != step)
        return merak_errf(err, errlen, "%s: the directory's name says step %d, its manifest step %d (renamed? name it "
                          "step_%08d)", dir, named, step, step);
    return 0;
}

/* DIR's manifest (path: its path), the one DONE vouches for, parsed; NULL
 * with err. */
static json_t *manifest_load(const char *dir, char *path, size_t pathlen, char *err, size_t errlen)
{
    snprintf(path, pathlen, "%s/manifest.json", dir);
    if (manifest_vouched(dir, path, err, errlen) < 0)
        return NULL;
    FILE *fp = merak_file_fopen(path, err, errlen);
    if (!fp)
        return NULL;
    json_error_t je;
    json_t *m = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (!m)
        merak_errf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    return m;
}

int merak_ckpt_data_differs(const char *dir, const merak_args *a, const merak_data *d, char *why, size_t whylen,
                            char *err, size_t errlen)
{
    char path[FILE_PATH];
    json_t *m = manifest_load(dir, path, sizeof path, err, errlen);
    if (!m)
        return -1;
    json_t *layout = json_object_get(m, "layout"), *shards = json_object_get(json_object_get(m, "data"), "shards");
    const json_int_t mb = json_integer_value(json_object_get(layout, "micro_batch")),
                     T = json_integer_value(json_object_get(layout, "seq_len"));
    int rc = 0;
    if (json_integer_value(json_object_get(json_object_get(m, "data"), "consumed")) <= 0)
        ;   /* no batch read yet (step 0, an import): whatever it reads next is its first */
    else if (mb != a->micro_batch)
        rc = 1, snprintf(why, whylen, "the micro-batch: %d now, %lld in the checkpoint", a->micro_batch, (long long)mb);
    else if (T != a->seq_len)
        rc = 1, snprintf(why, whylen, "the sequence length: %d now, %lld in the checkpoint", a->seq_len, (long long)T);
    else if (d && json_is_array(shards)) {
        const int n = merak_data_num_shards(d), was = (int)json_array_size(shards);
        for (int i = 0; rc == 0 && i < (n > was ? n : was); i++) {
            json_t *e = json_array_get(shards, (size_t)i);
            const char *p = json_string_value(json_object_get(e, "path"));
            const json_int_t tok = json_integer_value(json_object_get(e, "tokens"));
            const char *c;
            if (i >= n)
                rc = 1, snprintf(why, whylen, "the data: %d shard(s) now, %d in the checkpoint (%s is missing)", n,
                                 was, p ? p : "?");
            else if (i >= was)
                rc = 1, snprintf(why, whylen, "the data: %d shard(s) now, %d in the checkpoint (%s is new)", n, was,
                                 merak_data_shard_path(d, i));
            else if ((uint64_t)tok != merak_data_shard_tokens(d, i))
                rc = 1, snprintf(why, whylen, "the data: shard %d, %s, has %llu tokens now; the checkpoint's, %s, had "
                                 "%lld", i, merak_data_shard_path(d, i),
                                 (unsigned long long)merak_data_shard_tokens(d, i), p ? p : "?", (long long)tok);
            else if ((c = json_string_value(json_object_get(e, "crc32"))) &&   /* older checkpoints have none */
                     strtoul(c, NULL, 16) != merak_data_shard_crc(d, i))
                rc = 1, snprintf(why, whylen, "the data: shard %d, %s, holds other tokens now (CRC-32 %08x; the "
                                 "checkpoint's, %s, had %s)", i, merak_data_shard_path(d, i),
                                 (unsigned)merak_data_shard_crc(d, i), p ? p : "?", c);
        }
    }
    json_decref(m);
    return rc;
}

int merak_ckpt_dtype(const char *dir, char *buf, size_t n, char *err, size_t errlen)
{
    char path[FILE_PATH];
    json_t *m = manifest_load(dir, path, sizeof path, err, errlen);
    if (!m)
        return -1;
    const char *d = json_string_value(json_object_get(m, "dtype"));
    snprintf(buf, n, "%s", d ? d : "fp32");
    json_decref(m);
    return 0;
}

int merak_ckpt_open(const char *dir, const merak_model_config *model, int rank, int world, merak_ckpt **out,
                    char *err, size_t errlen)
{
    char path[FILE_PATH];
    *out = NULL;
    json_t *m = manifest_load(dir, path, sizeof path, err, errlen), *files;
    if (!m)
        return -1;
    merak_ckpt *c = calloc(1, sizeof *c);
    int rc = -1;
    if (!c) {
        merak_errf(err, errlen, "out of memory");
        goto out;
    }
    if ((size_t)snprintf(c->dir, sizeof c->dir, "%s", dir) >= sizeof c->dir) {
        merak_errf(err, errlen, "%s: the path is too long", path);
        goto out;
    }
    if (read_meta(path, m, &c->meta, err, errlen) < 0 || name_agrees(dir, c->meta.st.step, err, errlen) < 0)
        goto out;
    if (!json_is_array(files = json_object_get(m, "files"))) {
        merak_errf(err, errlen, "%s: \"files\" is not a list of the checkpoint's files", path);
        goto out;
    }
    int n = (int)json_array_size(files);
    c->files = calloc((size_t)n + 1, sizeof *c->files);
    c->st = calloc((size_t)n + 1, sizeof *c->st);
    c->path = calloc((size_t)n + 1, sizeof *c->path);
    if (!c->files || !c->st || !c->path) {
        merak_errf(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *kind = NULL, *crc = NULL;
        json_int_t bytes = -1;
        char *end = NULL;
        if (json_unpack(json_array_get(files, (size_t)i), "{s:s, s:s, s:I, s:s}", "name", &name, "kind", &kind,
                        "bytes", &bytes, "crc32", &crc) != 0 ||
            (strcmp(kind, "model") != 0 && strcmp(kind, "optim") != 0 && strcmp(kind, "config") != 0) ||
            !name[0] || strchr(name, '/') || name[0] == '.' || strlen(name) > 255 || bytes < 0 ||
            (strtoul(crc, &end, 16), !*crc || *end || strlen(crc) > 8)) {
            merak_errf(err, errlen, "%s: files[%d] is not {name, kind model|optim|config, bytes, crc32} of a file "
                       "in it", path, i);
            goto out;
        }
        merak_ckpt_file *f = &c->files[i];
        if (!(f->name = strdup(name))) {
            merak_errf(err, errlen, "out of memory");
            goto out;
        }
        c->nfiles = i + 1;
        f->kind = kind[0] == 'm' ? MERAK_CKPT_MODEL : kind[0] == 'o' ? MERAK_CKPT_OPTIM : MERAK_CKPT_CONFIG;
        f->bytes = (uint64_t)bytes;
        f->crc = (uint32_t)strtoul(crc, NULL, 16);
        char *fpath = c->path[i];
        if ((size_t)snprintf(fpath, FILE_PATH, "%s/%s", c->dir, name) >= FILE_PATH) {
            merak_errf(err, errlen, "%s: files[%d]: the path is too long", path, i);
            goto out;
        }
        if (i % world == rank) {
            uint32_t got;
            uint64_t size;
            if (merak_file_crc32(fpath, &got, &size, err, errlen) < 0)
                goto out;
            if (size != f->bytes || got != f->crc) {
                merak_errf(err, errlen, "%s: damaged: %llu bytes with CRC-32 %08x, the manifest says %llu bytes "
                           "with %08x", fpath, (unsigned long long)size, (unsigned)got,
                           (unsigned long long)f->bytes, (unsigned)f->crc);
                goto out;
            }
        }
        if (f->kind == MERAK_CKPT_CONFIG)
            snprintf(c->config, sizeof c->config, "%s", fpath);
        else if (merak_st_open(fpath, &c->st[i], err, errlen) < 0)
            goto out;
    }
    if (check_model(c->config, model, err, errlen) < 0)
        goto out;
    *out = c;
    rc = 0;
out:
    json_decref(m);
    if (rc < 0)
        merak_ckpt_close(c);
    return rc;
}

int merak_ckpt_check_names(const merak_ckpt *c, const merak_graph *model, char *err, size_t errlen)
{
    for (int i = 0; i < c->nfiles; i++)
        for (int k = 0; c->st[i] && k < merak_st_count(c->st[i]); k++) {
            const char *name = merak_st_at(c->st[i], k)->name;
            int optim = c->files[i].kind == MERAK_CKPT_OPTIM, ok = !optim;
            char base[MERAK_NAME_MAX + 16];
            snprintf(base, sizeof base, "%s", name);
            for (int m = 0; optim && m < MOMENTS; m++) {
                size_t a = strlen(base), b = strlen(moment_suffix[m]);
                if (a > b && strcmp(base + a - b, moment_suffix[m]) == 0) {
                    base[a - b] = 0;
                    ok = 1;
                    break;
                }
            }
            int t = ok ? merak_graph_find(model, base) : -1;
            if (t < 0 || model->tensors[t].kind != MERAK_T_PARAM || merak_graph_param_root(model, t) != t)
                return merak_errf(err, errlen, "%s/%s: tensor '%s' is not a parameter of this model%s", c->dir,
                                  c->files[i].name, name,
                                  ok ? "" : " (an optimizer file holds NAME.exp_avg and NAME.exp_avg_sq)");
        }
    return 0;
}

/* Does part src hold exactly what t holds (the same dimension, the same
 * ranges of it)?  Then it is read straight into t's memory. */
static int same_place(const merak_tensor *src, const merak_tensor *t)
{
    if (src->shard_dim != t->shard_dim || (t->shard_dim >= 0 && src->nseg != t->nseg))
        return 0;
    for (int k = 0; t->shard_dim >= 0 && k < t->nseg; k++)
        if (src->seg_start[k] != t->seg_start[k] || src->seg_len[k] != t->seg_len[k])
            return 0;
    return 1;
}

/* Tensor `name` read into local: every value finite, or -1 naming it. */
static int finite(const merak_ckpt *c, const merak_tensor *t, const char *name, const float *local, char *err,
                  size_t errlen)
{
    int64_t at = merak_nonfinite_at(local, (size_t)merak_tensor_elems(t));
    if (at >= 0)
        return merak_errf(err, errlen, "%s: tensor '%s' holds %g at element %lld of %s", c->dir, name, local[at],
                          (long long)at, t->shard_dim >= 0 ? "this rank's part" : "it");
    return 0;
}

int merak_ckpt_read(merak_ckpt *c, const merak_tensor *t, int moment, float *local, char *err, size_t errlen)
{
    char name[MERAK_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s%s", t->name, moment < 0 ? "" : moment_suffix[moment]);
    merak_ckpt_kind kind = moment < 0 ? MERAK_CKPT_MODEL : MERAK_CKPT_OPTIM;
    int64_t full_n = 1;
    for (int d = 0; d < t->ndim; d++)
        full_n *= t->full[d];
    /* what the parts cover, along the dimension each splits (a part holds
     * every index of the others), one row of marks per dimension: a part
     * held whole covers everything */
    int64_t covered = 0, width = 1;
    for (int d = 0; d < t->ndim; d++)
        width = t->full[d] > width ? t->full[d] : width;
    size_t marks = (size_t)(t->ndim ? t->ndim : 1) * (size_t)width;
    if (merak_grow((void **)&c->whole, &c->whole_n, (size_t)full_n, sizeof(float)) < 0 ||
        merak_grow((void **)&c->seen, &c->seen_n, marks, 1) < 0)
        return merak_errf(err, errlen, "out of memory loading '%s'", name);
    memset(c->seen, 0, marks);
    int64_t left[MERAK_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        left[d] = t->full[d];
    for (int i = 0; i < c->nfiles && !covered; i++) {
        const merak_st_info *info = c->files[i].kind == kind ? merak_st_find(c->st[i], name) : NULL;
        if (!info)
            continue;
        const char *fpath = c->path[i];
        merak_tensor src;
        if (place_parse(fpath, info, merak_st_metadata(c->st[i], t->name), &src, err, errlen) < 0)
            return -1;
        int64_t src_full = 1;
        for (int d = 0; d < src.ndim; d++)
            src_full *= src.full[d];
        if (src.ndim != t->ndim || memcmp(src.full, t->full, (size_t)t->ndim * sizeof *t->full) != 0)
            return merak_errf(err, errlen, "%s: tensor '%s' is part of a %d-dimensional tensor of %lld elements; "
                              "this model's is %d-dimensional, %lld elements", fpath, name, src.ndim,
                              (long long)src_full, t->ndim, (long long)full_n);
        if (same_place(&src, t))   /* the layout that wrote it */
            return merak_st_to_f32(info, local, err, errlen) < 0 ? -1 : finite(c, t, name, local, err, errlen);
        if (merak_grow((void **)&c->tmp, &c->tmp_n, (size_t)merak_tensor_elems(&src), sizeof(float)) < 0)
            return merak_errf(err, errlen, "out of memory loading '%s'", name);
        if (merak_st_to_f32(info, c->tmp, err, errlen) < 0)
            return -1;
        merak_shard_place(&src, c->tmp, c->whole);
        if (src.shard_dim < 0) {
            covered = 1;
            break;
        }
        unsigned char *mark = c->seen + (size_t)src.shard_dim * (size_t)width;
        for (int k = 0; k < src.nseg; k++)
            for (int64_t x = src.seg_start[k]; x < src.seg_start[k] + src.seg_len[k]; x++)
                if (!mark[x])
                    mark[x] = 1, covered = --left[src.shard_dim] == 0;
    }
    if (!covered) {
        for (int d = 0; d < t->ndim; d++)
            if (left[d] < t->full[d])
                return merak_errf(err, errlen, "%s: the checkpoint lacks %lld of the %lld indices along dimension %d "
                                  "of tensor '%s'", c->dir, (long long)left[d], (long long)t->full[d], d, name);
        return merak_errf(err, errlen, "%s: the checkpoint lacks tensor '%s'", c->dir, name);
    }
    merak_shard_slice(t, c->whole, local);
    return finite(c, t, name, local, err, errlen);
}
