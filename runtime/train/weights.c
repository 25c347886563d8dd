/*
 * weights.c - Hugging Face weights in and out (safetensors).
 *
 * The graph keeps linear weights as [out, in]; parameters marked
 * MERAK_HF_TRANSPOSED (GPT-2's Conv1D) are [in, out] in the file and are
 * transposed on the way in and out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "train.h"
#include "errf.h"

/* The file's shape of parameter t. */
static void hf_shape(const merak_tensor *t, int64_t *shape)
{
    memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    if (t->layout == MERAK_HF_TRANSPOSED) {
        shape[0] = t->shape[1];
        shape[1] = t->shape[0];
    }
}

static void shape_str(const int64_t *s, int n, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

/* dst (cols, rows) = src (rows, cols)^T */
static void transpose(float *dst, const float *src, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = src[r * cols + c];
}

static const merak_st_info *find_param(const merak_st_file *f, const char *name)
{
    const merak_st_info *info = merak_st_find(f, name);
    const char *prefix = "transformer.";
    /* GPT2Model checkpoints (e.g. the original "gpt2") omit the prefix. */
    if (!info && strncmp(name, prefix, strlen(prefix)) == 0)
        info = merak_st_find(f, name + strlen(prefix));
    return info;
}

int merak_weights_load(const merak_graph *g, merak_exec *e, const char *path, char *err,
                       size_t errlen)
{
    merak_st_file *f;
    if (merak_st_open(path, &f, err, errlen) < 0)
        return -1;
    int rc = 0;
    float *tmp = NULL;
    size_t tmp_n = 0;
    for (int i = 0; i < merak_exec_num_params(e) && rc == 0; i++) {
        const merak_tensor *t = &g->tensors[merak_exec_param_tensor(e, i)];
        const merak_st_info *info = find_param(f, t->name);
        if (!info) {
            rc = merak_errf(err, errlen, "%s: tensor '%s' is missing", path, t->name);
            break;
        }
        int64_t want[MERAK_MAX_DIMS];
        hf_shape(t, want);
        if (info->ndim != t->ndim ||
            memcmp(info->shape, want, (size_t)t->ndim * sizeof *want) != 0) {
            char a[96], b[96];
            shape_str(info->shape, info->ndim, a, sizeof a);
            shape_str(want, t->ndim, b, sizeof b);
            rc = merak_errf(err, errlen, "%s: tensor '%s' has shape %s (expected %s)", path, t->name,
                      a, b);
            break;
        }
        float *dst = merak_exec_param_data(e, i);
        size_t n = merak_exec_param_elems(e, i);
        if (t->layout != MERAK_HF_TRANSPOSED) {
            rc = merak_st_to_f32(info, dst, err, errlen);
            continue;
        }
        if (n > tmp_n) {
            float *p = realloc(tmp, n * sizeof *p);
            if (!p) {
                rc = merak_errf(err, errlen, "%s: out of memory reading '%s'", path, t->name);
                break;
            }
            tmp = p;
            tmp_n = n;
        }
        rc = merak_st_to_f32(info, tmp, err, errlen);
        if (rc == 0)
            transpose(dst, tmp, want[0], want[1]);
    }
    free(tmp);
    merak_st_close(f);
    return rc;
}

int merak_weights_save_arrays(const merak_graph *g, int n, const int *tensors,
                              const float *const *data, const char *path, const char *model_name,
                              char *err, size_t errlen)
{
    merak_st_entry *entries = calloc((size_t)n, sizeof *entries);
    float **copies = calloc((size_t)n, sizeof *copies);
    if (!entries || !copies) {
        free(entries);
        free(copies);
        return merak_errf(err, errlen, "%s: out of memory", path);
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const merak_tensor *t = &g->tensors[tensors[i]];
        merak_st_entry *en = &entries[i];
        en->name = t->name;
        en->ndim = t->ndim;
        hf_shape(t, en->shape);
        en->data = data[i];
        if (t->layout == MERAK_HF_TRANSPOSED) {
            copies[i] = malloc((size_t)merak_tensor_elems(t) * sizeof(float));
            if (!copies[i]) {
                rc = merak_errf(err, errlen, "%s: out of memory", path);
                break;
            }
            transpose(copies[i], en->data, t->shape[0], t->shape[1]);
            en->data = copies[i];
        }
    }
    if (rc == 0) {
        const char *keys[] = {"format", "producer", "model"};
        const char *vals[] = {"pt", "merak " MERAK_VERSION_STRING, model_name ? model_name : ""};
        rc = merak_st_write(path, entries, n, keys, vals, 3, err, errlen);
    }
    for (int i = 0; i < n; i++)
        free(copies[i]);
    free(copies);
    free(entries);
    return rc;
}

int merak_weights_save(const merak_graph *g, const merak_exec *e, const char *path,
                       const char *model_name, char *err, size_t errlen)
{
    int n = merak_exec_num_params(e);
    int *tensors = malloc((size_t)(n ? n : 1) * sizeof *tensors);
    const float **data = malloc((size_t)(n ? n : 1) * sizeof *data);
    int rc = -1;
    if (!tensors || !data) {
        merak_errf(err, errlen, "%s: out of memory", path);
    } else {
        for (int i = 0; i < n; i++) {
            tensors[i] = merak_exec_param_tensor(e, i);
            data[i] = merak_exec_param_data(e, i);
        }
        rc = merak_weights_save_arrays(g, n, tensors, data, path, model_name, err, errlen);
    }
    free(tensors);
    free(data);
    return rc;
}
