/*
 * weights.c - Hugging Face weights in and out (safetensors).
 *
 * The graph keeps linear weights as [out, in]; parameters marked
 * MERAK_HF_TRANSPOSED (GPT-2's Conv1D) are [in, out] in the file and are
 * transposed on the way in and out.  Weights come from one safetensors
 * file, or from the shards a model.safetensors.index.json names (the hub's
 * form for models of more than a few GB), given as the index or as the
 * directory that holds it.  They are written the same two ways: one file,
 * or, past a shard size, shards and their index as transformers'
 * save_pretrained writes them.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic.h"
#include "safetensors.h"
#include "train.h"
#include "errf.h"

#define INDEX_NAME "model.safetensors.index.json"

/* Where weights come from: files f[0..n) (their paths beside them), and
 * the index that named them, or NULL for a single file. */
typedef struct weights_src {
    int n;
    merak_st_file **f;
    char **path;
    char *index;
} weights_src;

static void src_close(weights_src *s)
{
    for (int i = 0; i < s->n; i++) {
        merak_st_close(s->f[i]);
        free(s->path[i]);
    }
    free(s->f);
    free(s->path);
    free(s->index);
    *s = (weights_src){0};
}

/* Opens file path as s's next file. */
static int src_add(weights_src *s, const char *path, char *err, size_t errlen)
{
    merak_st_file **f = realloc(s->f, (size_t)(s->n + 1) * sizeof *f);
    if (f)
        s->f = f;
    char **p = realloc(s->path, (size_t)(s->n + 1) * sizeof *p);
    if (p)
        s->path = p;
    if (!f || !p || !(s->path[s->n] = strdup(path)))
        return merak_errf(err, errlen, "%s: out of memory", path);
    if (merak_st_open(path, &s->f[s->n], err, errlen) < 0) {
        free(s->path[s->n]);
        return -1;
    }
    s->n++;
    return 0;
}

/* The index at path: every file its weight_map names, opened once, each
 * tensor in the file the index says and in no other (a tensor listed
 * twice, missing from its file, or in a file the index does not name it
 * for is refused by name). */
static int src_index(weights_src *s, const char *path, char *err, size_t errlen)
{
    json_error_t je;
    /* a key listed twice in weight_map would say two things of one tensor */
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *map;
    if (!root)
        return merak_errf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    int rc = 0;
    if (!json_is_object(map = json_object_get(root, "weight_map")) || json_object_size(map) == 0)
        rc = merak_errf(err, errlen, "%s: no \"weight_map\" of tensor names to files", path);
    if (rc == 0 && !(s->index = strdup(path)))
        rc = merak_errf(err, errlen, "%s: out of memory", path);
    const char *slash = strrchr(path, '/');
    const int dirlen = slash ? (int)(slash - path) : 1;
    const char *dir = slash ? path : ".";
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        const char *file = json_string_value(v);
        if (rc < 0)
            break;
        if (!file || !*file || file[0] == '/' || strstr(file, ".."))
            rc = merak_errf(err, errlen, "%s: tensor '%s' is mapped to '%s', not a file name beside the index",
                            path, name, file ? file : "(not a string)");
        char full[4096];
        if (rc == 0 && (size_t)snprintf(full, sizeof full, "%.*s/%s", dirlen, dir, file) >= sizeof full)
            rc = merak_errf(err, errlen, "%s: the path of %s is too long", path, file);
        int at = -1;
        for (int i = 0; rc == 0 && i < s->n && at < 0; i++)
            if (strcmp(s->path[i], full) == 0)
                at = i;
        if (rc == 0 && at < 0 && (rc = src_add(s, full, err, errlen)) == 0)
            at = s->n - 1;
        if (rc == 0 && !merak_st_find(s->f[at], name))
            rc = merak_errf(err, errlen, "%s: the index puts tensor '%s' in %s, which does not hold it", path, name,
                            full);
    }
    /* every tensor of every file is the index's, for that file */
    for (int i = 0; rc == 0 && i < s->n; i++)
        for (int k = 0; rc == 0 && k < merak_st_count(s->f[i]); k++) {
            const char *t = merak_st_at(s->f[i], k)->name, *file = json_string_value(json_object_get(map, t));
            const char *base = strrchr(s->path[i], '/');
            base = base ? base + 1 : s->path[i];
            if (!file)
                rc = merak_errf(err, errlen, "%s: %s holds tensor '%s', which the index does not name", path,
                                s->path[i], t);
            else if (strcmp(file, base) != 0)
                rc = merak_errf(err, errlen, "%s: tensor '%s' is in %s too, but the index puts it in %s", path, t,
                                s->path[i], file);
        }
    json_decref(root);
    return rc;
}

/* The weights at path: a safetensors file, an index (a .json file), or a
 * directory with an index or a model.safetensors. */
static int src_open(const char *path, weights_src *s, char *err, size_t errlen)
{
    *s = (weights_src){0};
    struct stat st;
    size_t n = strlen(path);
    int rc;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char p[4096];
        if ((size_t)snprintf(p, sizeof p, "%s/" INDEX_NAME, path) >= sizeof p)
            return merak_errf(err, errlen, "%s: the path is too long", path);
        char one[4096];
        snprintf(one, sizeof one, "%s/model.safetensors", path);   /* not longer than p */
        if (stat(p, &st) == 0)
            rc = src_index(s, p, err, errlen);
        else if (stat(one, &st) == 0)
            rc = src_add(s, one, err, errlen);
        else
            rc = merak_errf(err, errlen, "%s: a directory without " INDEX_NAME " or model.safetensors", path);
    } else if (n > 5 && strcmp(path + n - 5, ".json") == 0) {
        rc = src_index(s, path, err, errlen);
    } else {
        rc = src_add(s, path, err, errlen);
    }
    if (rc < 0)
        src_close(s);
    return rc;
}

/* What messages name the weights by: the index, or the file. */
static const char *src_name(const weights_src *s) { return s->index ? s->index : s->path[0]; }

int merak_weights_each_file(const char *path, int (*fn)(void *ctx, const char *file), void *ctx, char *err,
                            size_t errlen)
{
    weights_src s;
    if (src_open(path, &s, err, errlen) < 0)
        return -1;
    int rc = s.index ? fn(ctx, s.index) : 0;
    for (int i = 0; i < s.n && rc == 0; i++)
        rc = fn(ctx, s.path[i]);
    src_close(&s);
    return rc;
}

/* The file's shape of parameter t (the whole tensor for a shard). */
static void hf_shape(const merak_tensor *t, int64_t *shape)
{
    memcpy(shape, t->full, (size_t)t->ndim * sizeof *shape);
    if (t->layout == MERAK_HF_TRANSPOSED) {
        shape[0] = t->full[1];
        shape[1] = t->full[0];
    }
}

static int64_t full_elems(const merak_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->full[i];
    return n;
}

/* dst (cols, rows) = src (rows, cols)^T */
static void transpose(float *dst, const float *src, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = src[r * cols + c];
}

/* Tensor name in s (*path: its file), or NULL. */
static const merak_st_info *find_param(const weights_src *s, const char *name, const char **path)
{
    const char *prefix = "transformer.";
    for (int i = 0; i < s->n; i++) {
        const merak_st_info *info = merak_st_find(s->f[i], name);
        /* GPT2Model checkpoints (e.g. the original "gpt2") omit the prefix. */
        if (!info && strncmp(name, prefix, strlen(prefix)) == 0)
            info = merak_st_find(s->f[i], name + strlen(prefix));
        if (info) {
            *path = s->path[i];
            return info;
        }
    }
    return NULL;
}

/* Reusable buffers of the reads. */
typedef struct read_bufs {
    float *tmp, *whole;   /* as stored; transposed to graph layout */
    size_t n;
} read_bufs;

/* Parameter t (of the model or a tensor-parallel shard: its part of the
 * whole tensor) from s into dst, graph layout; *path: the file it was in.
 * 0, or -1 with err naming the file and the tensor. */
static int read_param(const weights_src *s, const char **path, const merak_tensor *t, float *dst, read_bufs *b,
                      char *err, size_t errlen);

/* read_param, then every value finite: a NaN or Inf in a weights file is
 * named with the file and the tensor rather than found as a diverged step. */
static int read_finite(const weights_src *s, const merak_tensor *t, float *dst, read_bufs *b, char *err,
                       size_t errlen)
{
    const char *path = src_name(s);
    if (read_param(s, &path, t, dst, b, err, errlen) < 0)
        return -1;
    int64_t at = merak_nonfinite_at(dst, (size_t)merak_tensor_elems(t));
    if (at >= 0)
        return merak_errf(err, errlen, "%s: tensor '%s' holds %g at element %lld of %s", path, t->name, dst[at],
                          (long long)at, t->shard_dim >= 0 ? "this rank's part" : "it");
    return 0;
}

static int read_param(const weights_src *s, const char **file, const merak_tensor *t, float *dst, read_bufs *b,
                      char *err, size_t errlen)
{
    const merak_st_info *info = find_param(s, t->name, file);
    const char *path = *file;
    if (!info)
        return merak_errf(err, errlen, "%s: tensor '%s' is missing", src_name(s), t->name);
    int64_t want[MERAK_MAX_DIMS];
    hf_shape(t, want);
    if (info->ndim != t->ndim || memcmp(info->shape, want, (size_t)t->ndim * sizeof *want) != 0) {
        char a[96], w[96];
        merak_st_shape_str(info->shape, info->ndim, a, sizeof a);
        merak_st_shape_str(want, t->ndim, w, sizeof w);
        return merak_errf(err, errlen, "%s: tensor '%s' has shape %s (expected %s)", path, t->name, a, w);
    }
    int transposed = t->layout == MERAK_HF_TRANSPOSED, sharded = t->shard_dim >= 0;
    if (!transposed && !sharded)
        return merak_st_to_f32(info, dst, err, errlen);
    /* Read into tmp; a transposed tensor turns into graph layout in whole
     * (or straight into dst when it is not a shard). */
    size_t n = (size_t)full_elems(t);
    if (n > b->n) {
        float *p = realloc(b->tmp, n * sizeof *p), *q = p ? realloc(b->whole, n * sizeof *q) : NULL;
        if (p)
            b->tmp = p;
        if (q)
            b->whole = q;
        if (!p || !q)
            return merak_errf(err, errlen, "%s: out of memory reading '%s'", path, t->name);
        b->n = n;
    }
    if (merak_st_to_f32(info, b->tmp, err, errlen) < 0)
        return -1;
    const float *graph_layout = b->tmp;
    if (transposed) {
        transpose(sharded ? b->whole : dst, b->tmp, want[0], want[1]);
        graph_layout = b->whole;
    }
    if (sharded)
        merak_shard_slice(t, graph_layout, dst);
    return 0;
}

/* The n parameters of an executor or a decoder (obj) from the file: the
 * i-th is graph tensor tensor(obj, i) of g, read in graph layout (host
 * memory) and handed to put(obj, i, values), which copies it to the
 * backend `backend` names. */
static int load_each(const merak_graph *g, const char *path, int n, int (*tensor)(const void *obj, int i),
                     int (*put)(void *obj, int i, const float *host), void *obj, const char *backend, char *err,
                     size_t errlen)
{
    weights_src f;
    if (src_open(path, &f, err, errlen) < 0)
        return -1;
    int rc = 0;
    read_bufs b = {0};
    float *dst = NULL;                  /* the parameter (host), then put */
    size_t dst_n = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const merak_tensor *t = &g->tensors[tensor(obj, i)];
        size_t pn = (size_t)merak_tensor_elems(t);
        if (pn > dst_n) {
            float *p = realloc(dst, pn * sizeof *p);
            if (!p) {
                rc = merak_errf(err, errlen, "%s: out of memory reading '%s'", path, t->name);
                break;
            }
            dst = p;
            dst_n = pn;
        }
        rc = read_finite(&f, t, dst, &b, err, errlen);
        if (rc == 0 && put(obj, i, dst) < 0)
            rc = merak_errf(err, errlen, "%s: copying '%s' to the %s backend failed", path, t->name, backend);
    }
    free(b.tmp);
    free(b.whole);
    free(dst);
    src_close(&f);
    return rc;
}

static int exec_tensor(const void *e, int i) { return merak_exec_param_tensor(e, i); }
static int exec_put(void *e, int i, const float *host) { return merak_exec_param_write(e, i, host); }
static int decoder_tensor(const void *d, int i) { return merak_decoder_param_tensor(d, i); }
static int decoder_put(void *d, int i, const float *host) { return merak_decoder_param_write(d, i, host); }

int merak_weights_load(const merak_graph *g, merak_exec *e, const char *path, char *err,
                       size_t errlen)
{
    return load_each(g, path, merak_exec_num_params(e), exec_tensor, exec_put, e, merak_exec_kernels(e)->name,
                     err, errlen);
}

int merak_weights_load_decoder(const merak_graph *g, merak_decoder *d, const char *path, char *err,
                               size_t errlen)
{
    return load_each(g, path, merak_decoder_num_params(d), decoder_tensor, decoder_put, d,
                     merak_decoder_kernels(d)->name, err, errlen);
}

/* Buffers Hugging Face files carry beside the parameters, which the model
 * computes itself: GPT-2's causal masks, LLaMA's rotary frequencies. */
static int is_buffer(const char *name)
{
    static const char *const suffix[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        size_t k = strlen(suffix[i]);
        if (n > k && strcmp(name + n - k, suffix[i]) == 0)
            return 1;
    }
    return 0;
}

int merak_weights_extra(const merak_graph *model, const char *path, char *err, size_t errlen)
{
    weights_src s;
    if (src_open(path, &s, err, errlen) < 0)
        return -1;
    int rc = 0;
    for (int k = 0; k < s.n && rc == 0; k++)
        for (int i = 0; i < merak_st_count(s.f[k]) && rc == 0; i++) {
            const char *name = merak_st_at(s.f[k], i)->name;
            char prefixed[MERAK_NAME_MAX + 16];
            snprintf(prefixed, sizeof prefixed, "transformer.%s", name);   /* GPT2Model files */
            int t = merak_graph_find(model, name);
            if (t < 0)
                t = merak_graph_find(model, prefixed);
            if ((t < 0 || model->tensors[t].kind != MERAK_T_PARAM) && !is_buffer(name))
                rc = merak_errf(err, errlen, "%s: tensor '%s' is not a parameter of the model", s.path[k], name);
        }
    src_close(&s);
    return rc;
}

int merak_weights_read(const merak_graph *g, int n, const int *tensors, const char *path, float *const *data,
                       char *err, size_t errlen)
{
    weights_src s;
    if (src_open(path, &s, err, errlen) < 0)
        return -1;
    read_bufs b = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = read_finite(&s, &g->tensors[tensors[i]], data[i], &b, err, errlen);
    free(b.tmp);
    free(b.whole);
    src_close(&s);
    return rc;
}

/* ------------------------------------------------------------------ writing */

/* How a save of n tensors of g is laid out in files, as transformers'
 * save_pretrained lays it out: tensors whole, each file filled in order
 * until the next tensor would take it past shard_bytes (a tensor larger
 * than that gets a file of its own). */
typedef struct save_plan {
    int nfiles;        /* 1: the path itself; else that many shards and their index */
    int *order;        /* [n]: the entries in the order written */
    int *first;        /* [nfiles + 1]: file k holds order[first[k] .. first[k + 1]) */
    uint64_t total;    /* bytes of tensor data in all files (the index's total_size) */
} save_plan;

/* The most shards a save takes: their names count them in 5 digits. */
#define MAX_SHARDS 99999

static void plan_free(save_plan *p)
{
    free(p->order);
    free(p->first);
    *p = (save_plan){0};
}

/* Tensor t's bytes in the file: 2 per value in bf16, else 4. */
static uint64_t file_bytes(const merak_tensor *t, int bf16) { return (uint64_t)full_elems(t) * (bf16 ? 2 : 4); }

/* Shard k (from 0) of nfiles of path: path less ".safetensors", then
 * "-0000K-of-0000N.safetensors" (K from 1), as transformers names them. */
static int shard_path(const char *path, int k, int nfiles, char *buf, size_t len)
{
    size_t n = strlen(path), ext = strlen(".safetensors");
    int stem = (int)(n > ext && strcmp(path + n - ext, ".safetensors") == 0 ? n - ext : n);
    return (size_t)snprintf(buf, len, "%.*s-%05d-of-%05d.safetensors", stem, path, k + 1, nfiles) < len ? 0 : -1;
}

/* The index of path's shards: path ".index.json" (model.safetensors.index.json). */
static int index_path(const char *path, char *buf, size_t len)
{
    return (size_t)snprintf(buf, len, "%s.index.json", path) < len ? 0 : -1;
}

/* The plan of saving tensors[0, n) of g at path in the dtype bf16 says,
 * at most shard_bytes of tensor data per file (0: one file whatever the
 * size).  0, or -1 with err: more than MAX_SHARDS files, a path too long,
 * or (one file) an index of an earlier sharded save beside it, which a
 * reader given the directory would take instead of the file. */
static int plan_save(const merak_graph *g, int n, const int *tensors, const char *path, int bf16,
                     int64_t shard_bytes, save_plan *p, char *err, size_t errlen)
{
    *p = (save_plan){0};
    p->order = malloc((size_t)(n ? n : 1) * sizeof *p->order);
    p->first = malloc((size_t)(n + 2) * sizeof *p->first);
    if (!p->order || !p->first) {
        plan_free(p);
        return merak_errf(err, errlen, "%s: out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        p->order[i] = i;
        p->total += file_bytes(&g->tensors[tensors[i]], bf16);
    }
    p->nfiles = 1;
    p->first[0] = 0;
    if (shard_bytes > 0 && p->total > (uint64_t)shard_bytes) {
        /* by tensor id, so the split is the same whatever order the
         * parameters were gathered in (every layout, and the preflight,
         * which plans from the graph alone) */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && tensors[p->order[j - 1]] > tensors[p->order[j]]; j--) {
                int x = p->order[j];
                p->order[j] = p->order[j - 1], p->order[j - 1] = x;
            }
        uint64_t filled = 0;
        p->nfiles = 0;
        for (int i = 0; i < n; i++) {
            uint64_t b = file_bytes(&g->tensors[tensors[p->order[i]]], bf16);
            if (i == 0 || filled + b > (uint64_t)shard_bytes) {
                p->first[p->nfiles++] = i;
                filled = 0;
            }
            filled += b;
        }
    }
    p->first[p->nfiles] = n;
    char name[4096];
    struct stat st;
    int rc = 0;
    if (p->nfiles > MAX_SHARDS)
        rc = merak_errf(err, errlen, "%s: the weights (%llu bytes) would take %d shards, more than %d: give a "
                        "larger shard size", path, (unsigned long long)p->total, p->nfiles, MAX_SHARDS);
    else if (index_path(path, name, sizeof name) < 0 || shard_path(path, 0, p->nfiles, name, sizeof name) < 0)
        rc = merak_errf(err, errlen, "%s: the path is too long", path);
    else if (p->nfiles == 1 && index_path(path, name, sizeof name) == 0 && stat(name, &st) == 0)
        rc = merak_errf(err, errlen, "%s: %s of an earlier sharded save is beside it, and a reader given the "
                        "directory would take that index rather than this file: move it away, or save elsewhere",
                        path, name);
    if (rc < 0)
        plan_free(p);
    return rc;
}

int merak_weights_each_output(const merak_graph *g, const char *path, int bf16, int64_t shard_bytes,
                              int (*fn)(void *ctx, const char *file), void *ctx, char *err, size_t errlen)
{
    int *ids = malloc((size_t)(g->ntensors ? g->ntensors : 1) * sizeof *ids);
    if (!ids)
        return merak_errf(err, errlen, "%s: out of memory", path);
    const int n = merak_graph_own_params(g, ids);
    save_plan p;
    int rc = plan_save(g, n, ids, path, bf16, shard_bytes, &p, err, errlen);
    free(ids);
    if (rc < 0)
        return -1;
    char name[4096];
    if (p.nfiles == 1)
        rc = fn(ctx, path);
    for (int k = 0; p.nfiles > 1 && k < p.nfiles && rc == 0; k++) {
        shard_path(path, k, p.nfiles, name, sizeof name);   /* fits: plan_save tried the longest */
        rc = fn(ctx, name);
    }
    if (p.nfiles > 1 && rc == 0) {
        index_path(path, name, sizeof name);
        rc = fn(ctx, name);
    }
    plan_free(&p);
    return rc;
}

/* The index of plan p's shards of path, entries as written: total_size and
 * each tensor's file (its base name), keys sorted and indented as
 * transformers writes them.  Written last, so no reader meets an index
 * that names a file not yet there. */
static int write_index(const char *path, const save_plan *p, const merak_st_entry *entries, char *err,
                       size_t errlen)
{
    char name[4096], file[4096];
    index_path(path, name, sizeof name);
    json_t *map = json_object(), *root = json_object(), *meta = json_object();
    int rc = !map || !root || !meta;
    for (int k = 0; !rc && k < p->nfiles; k++) {
        shard_path(path, k, p->nfiles, file, sizeof file);
        const char *base = strrchr(file, '/');
        for (int i = p->first[k]; !rc && i < p->first[k + 1]; i++)
            rc = json_object_set_new(map, entries[p->order[i]].name, json_string(base ? base + 1 : file));
    }
    if (!rc)
        rc = json_object_set_new(meta, "total_size", json_integer((json_int_t)p->total)) ||
             json_object_set(root, "metadata", meta) || json_object_set(root, "weight_map", map);
    char *text = rc ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(map), json_decref(meta), json_decref(root);
    if (!text)
        return merak_errf(err, errlen, "%s: out of memory building the index", name);
    merak_atomic *a;
    rc = merak_atomic_open(name, &a, err, errlen);
    if (rc == 0) {
        merak_atomic_write(a, text, strlen(text));
        merak_atomic_write(a, "\n", 1);
        rc = merak_atomic_commit(a, err, errlen);
    }
    free(text);
    return rc;
}

int merak_weights_save_arrays(const merak_graph *g, int n, const int *tensors,
                              const float *const *data, const char *path, const char *model_name, int bf16,
                              int64_t shard_bytes, char *err, size_t errlen)
{
    save_plan plan;
    if (plan_save(g, n, tensors, path, bf16, shard_bytes, &plan, err, errlen) < 0)
        return -1;
    merak_st_entry *entries = calloc((size_t)n + 1, sizeof *entries), *part = calloc((size_t)n + 1, sizeof *part);
    float **copies = calloc((size_t)n + 1, sizeof *copies);
    if (!entries || !part || !copies) {
        free(entries), free(part), free(copies);
        plan_free(&plan);
        return merak_errf(err, errlen, "%s: out of memory", path);
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const merak_tensor *t = &g->tensors[tensors[i]];
        merak_st_entry *en = &entries[i];
        en->name = t->name;
        en->ndim = t->ndim;
        en->bf16 = bf16;
        hf_shape(t, en->shape);
        en->data = data[i];
        if (t->layout == MERAK_HF_TRANSPOSED) {
            copies[i] = malloc((size_t)full_elems(t) * sizeof(float));
            if (!copies[i]) {
                rc = merak_errf(err, errlen, "%s: out of memory", path);
                break;
            }
            transpose(copies[i], en->data, t->full[0], t->full[1]);
            en->data = copies[i];
        }
    }
    /* every value is checked before the first file is written */
    if (rc == 0)
        rc = merak_st_finite(path, entries, n, err, errlen);
    /* each shard carries the metadata the single file does */
    const char *keys[] = {"format", "producer", "model"};
    const char *vals[] = {"pt", "merak " MERAK_VERSION_STRING, model_name ? model_name : ""};
    if (rc == 0 && plan.nfiles == 1)
        rc = merak_st_write(path, entries, n, keys, vals, 3, NULL, NULL, err, errlen);
    for (int k = 0; rc == 0 && plan.nfiles > 1 && k < plan.nfiles; k++) {
        char file[4096];
        int m = 0;
        for (int i = plan.first[k]; i < plan.first[k + 1]; i++)
            part[m++] = entries[plan.order[i]];
        shard_path(path, k, plan.nfiles, file, sizeof file);
        rc = merak_st_write(file, part, m, keys, vals, 3, NULL, NULL, err, errlen);
    }
    if (rc == 0 && plan.nfiles > 1)
        rc = write_index(path, &plan, entries, err, errlen);
    for (int i = 0; i < n; i++)
        free(copies[i]);
    free(copies), free(part), free(entries);
    plan_free(&plan);
    return rc;
}
