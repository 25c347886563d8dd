/*
 * cost.c - device profiles and op times (cost.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "errf.h"
#include "file.h"
#include "pipe/exec.h"

/* The profile fields: name in the file, unit, where it goes. */
static const struct field {
    const char *key;
    double unit;
    size_t off;
} fields[] = {
    {"memory_gb", 1e9, offsetof(merak_device, memory)},
    {"matmul_tflops", 1e12, offsetof(merak_device, matmul)},
    {"memory_gbps", 1e9, offsetof(merak_device, mem_bw)},
    {"intra_node_gbps", 1e9, offsetof(merak_device, intra)},
    {"inter_node_gbps", 1e9, offsetof(merak_device, inter)},
    {"latency_us", 1e-6, offsetof(merak_device, latency)},
};
enum { NFIELD = sizeof fields / sizeof fields[0] };

static int read_profile(json_t *o, const char *file, const char *name, merak_device *d, char *err,
                        size_t errlen)
{
    *d = (merak_device){0};
    if (!json_is_object(o))
        return merak_errf(err, errlen, "%s: device '%s' is not an object", file, name);
    for (int i = 0; i < NFIELD; i++) {
        json_t *v = json_object_get(o, fields[i].key);
        double x = json_is_number(v) ? json_number_value(v) : -1;
        /* latency may be 0; every rate and the memory must be positive */
        if (!v || !(x > 0 || (x == 0 && fields[i].unit < 1)) || x > 1e12)
            return merak_errf(err, errlen, "%s: device '%s': %s must be a positive number", file, name,
                              fields[i].key);
        *(double *)((char *)d + fields[i].off) = x * fields[i].unit;
    }
    json_t *rv = json_object_get(o, "reserved_gb");
    if (rv && !(json_is_number(rv) && json_number_value(rv) >= 0 && json_number_value(rv) < 1e6))
        return merak_errf(err, errlen, "%s: device '%s': reserved_gb must be a number from 0", file, name);
    d->reserved = rv ? json_number_value(rv) * 1e9 : 0;
    if (d->reserved >= d->memory)
        return merak_errf(err, errlen, "%s: device '%s': reserved_gb must be less than memory_gb", file, name);
    json_t *ops = json_object_get(o, "ops");
    if (ops && !json_is_object(ops))
        return merak_errf(err, errlen, "%s: device '%s': \"ops\" is not an object", file, name);
    const char *key;
    json_t *v;
    json_object_foreach(ops, key, v) {
        int t = 0;
        while (t < MERAK_OP_COUNT_ && strcmp(merak_op_name((merak_op_type)t), key) != 0)
            t++;
        if (t == MERAK_OP_COUNT_)
            return merak_errf(err, errlen, "%s: device '%s': ops: '%s' is not an op kind", file, name, key);
        json_t *f = json_object_get(v, "forward"), *b = json_object_get(v, "backward");
        double x = json_is_number(f) ? json_number_value(f) : -1, y = json_is_number(b) ? json_number_value(b) : -1;
        if (!(x > 0 && x < 1e30 && y > 0 && y < 1e30))
            return merak_errf(err, errlen, "%s: device '%s': ops: %s needs positive \"forward\" and \"backward\" rates",
                              file, name, key);
        d->op_fwd[t] = x;
        d->op_bwd[t] = y;
    }
    return 0;
}

int merak_device_write(const merak_device *d, FILE *f)
{
    fprintf(f, "{\n");
    for (int i = 0; i < NFIELD; i++)
        fprintf(f, "  \"%s\": %.6g,\n", fields[i].key, *(const double *)((const char *)d + fields[i].off) / fields[i].unit);
    if (d->reserved > 0)
        fprintf(f, "  \"reserved_gb\": %.6g,\n", d->reserved / 1e9);
    fprintf(f, "  \"ops\": {");
    for (int t = 0, n = 0; t < MERAK_OP_COUNT_; t++)
        if (d->op_fwd[t] > 0 && d->op_bwd[t] > 0)
            fprintf(f, "%s\n    \"%s\": {\"forward\": %.6g, \"backward\": %.6g}", n++ ? "," : "",
                    merak_op_name((merak_op_type)t), d->op_fwd[t], d->op_bwd[t]);
    fprintf(f, "\n  }\n}\n");
    return ferror(f) ? -1 : 0;
}

int merak_device_load(const char *name, merak_device *d, char *err, size_t errlen)
{
    size_t len = strlen(name);
    int is_path = strchr(name, '/') || (len > 5 && strcmp(name + len - 5, ".json") == 0);
    const char *file = is_path ? name : getenv("MERAK_DEVICES");
    if (!file || !*file)
        file = MERAK_PKGDATADIR "/devices.json";
    json_error_t je;
    char why[512];
    FILE *f = merak_file_fopen(file, why, sizeof why);
    if (!f)
        return merak_errf(err, errlen, "device profiles: %s", why);
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        return merak_errf(err, errlen, "%s:%d: %s", file, je.line, je.text);
    json_t *table = json_object_get(root, "devices");
    int rc;
    if (is_path && !table) {   /* one profile at the top level */
        const char *base = strrchr(name, '/');
        rc = read_profile(root, file, base ? base + 1 : name, d, err, errlen);
    } else if (!json_is_object(table)) {
        rc = merak_errf(err, errlen, "%s: no \"devices\" object", file);
    } else if (is_path) {      /* a table given by path: its only entry */
        const char *key = json_object_size(table) == 1 ? json_object_iter_key(json_object_iter(table)) : NULL;
        rc = key ? read_profile(json_object_get(table, key), file, key, d, err, errlen)
                 : merak_errf(err, errlen, "%s: %zu devices; give one of them by name", file,
                              json_object_size(table));
    } else if (json_object_get(table, name)) {
        rc = read_profile(json_object_get(table, name), file, name, d, err, errlen);
    } else {
        char known[256] = "";
        const char *key;
        json_t *v;
        json_object_foreach(table, key, v) {
            (void)v;
            size_t k = strlen(known);
            snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "", key);
        }
        merak_errf(err, errlen, "device profile '%s' is not in %s (%s)", name, file, known);
        rc = -2;
    }
    json_decref(root);
    return rc;
}

double merak_allreduce_time(double bytes, int n, double bw, double latency)
{
    return n > 1 ? 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency : 0;
}

/* Linear layers and attention are timed by their FLOPs, the rest by their bytes. */
static int by_flops(merak_op_type t)
{
    return t == MERAK_OP_LINEAR || t == MERAK_OP_ATTENTION;
}

void merak_op_time(const merak_graph *g, int i, const merak_device *d, double *fwd, double *bwd)
{
    const merak_op *o = &g->ops[i];
    double mem = o->bytes / d->mem_bw;
    double out = 4.0 * (double)merak_tensor_elems(&g->tensors[o->out]);
    if (d->op_fwd[o->type] > 0 && o->type != MERAK_OP_TP_REDUCE && o->type != MERAK_OP_TP_COPY) {
        double work = by_flops(o->type) ? o->flops : o->bytes;
        *fwd = work / d->op_fwd[o->type];
        *bwd = work / d->op_bwd[o->type];
        return;
    }
    switch (o->type) {
    case MERAK_OP_LINEAR:
    case MERAK_OP_ATTENTION: {
        double t = o->flops / d->matmul;
        *fwd = t > mem ? t : mem;
        *bwd = 2 * *fwd;
        break;
    }
    case MERAK_OP_TP_REDUCE:   /* sums forward, passes the gradient */
        *fwd = merak_allreduce_time(out, g->tp, d->intra, d->latency) + mem;
        *bwd = 0;
        break;
    case MERAK_OP_TP_COPY:     /* passes forward, sums the gradient */
        *fwd = 0;
        *bwd = merak_allreduce_time(out, g->tp, d->intra, d->latency);
        break;
    default:
        *fwd = mem;
        *bwd = 2 * mem;
        break;
    }
}

double merak_cut_time(const merak_graph *g, int k, const merak_device *d, double link_bw)
{
    int t = merak_cut_tensor(g, k);
    return t < 0 ? 0 : 4.0 * (double)merak_tensor_elems(&g->tensors[t]) / link_bw + d->latency;
}

void merak_blocks_cost(const merak_graph *g, const int *first, const merak_graph *local, const merak_device *d,
                       double link_bw, merak_blocks *b)
{
    for (int k = 0; k < b->n; k++) {
        b->fwd[k] = b->bwd[k] = 0;
        int end = merak_cut_map(local, first[k + 1]);
        for (int i = merak_cut_map(local, first[k]); i < end; i++) {
            double f, w;
            merak_op_time(local, i, d, &f, &w);
            b->fwd[k] += f;
            b->bwd[k] += w;
        }
        b->comm[k] = k > 0 ? merak_cut_time(g, first[k], d, link_bw) : 0;
    }
}

/* Runs g's forward and backward reps times with every op timed; fwd and
 * bwd ([nops]) get the seconds per pass. */
static int time_ops(const merak_graph *g, const merak_kernels *k, int reps, double *fwd, double *bwd, char *err,
                    size_t errlen)
{
    merak_exec_chunk whole = {0, -1, 1, 0};
    merak_exec_opts eo = {.chunks = &whole, .nchunks = 1, .kernels = k};
    merak_exec *e = NULL;
    if (g->tp != 1)
        return merak_errf(err, errlen, "calibration runs a whole graph in one process");
    if (merak_exec_create(g, &eo, &e, err, errlen) < 0)
        return -1;
    int rc = 0;
    /* small parameters and token 0 everywhere: the values do not change
     * the time, and no denormals or NaNs slow a kernel down */
    for (int i = 0; i < merak_exec_num_params(e) && rc == 0; i++) {
        size_t n = merak_exec_param_elems(e, i);
        float *v = malloc(n * sizeof *v);
        if (!v)
            rc = merak_errf(err, errlen, "out of memory");
        for (size_t j = 0; v && j < n; j++)
            v[j] = 0.02f * (float)((j * 2654435761u) % 1000) / 1000.0f - 0.01f;
        if (v && merak_exec_param_write(e, i, v) < 0)
            rc = merak_errf(err, errlen, "%s", merak_exec_error(e));
        free(v);
    }
    for (int t = 0; t < g->ntensors && rc == 0; t++)
        if (g->tensors[t].kind == MERAK_T_INPUT) {
            int32_t *z = calloc((size_t)merak_tensor_elems(&g->tensors[t]), sizeof *z);
            if (!z || merak_exec_tensor_write(e, 0, t, z) < 0)
                rc = merak_errf(err, errlen, "calibration inputs: %s", z ? merak_exec_error(e) : "out of memory");
            free(z);
        }
    for (int r = 0; r <= reps && rc == 0; r++) {
        /* the first pass warms the caches and is not counted */
        merak_exec_time_ops(e, r ? fwd : NULL, r ? bwd : NULL);
        if (merak_exec_zero_grads(e) < 0 || merak_exec_forward(e, 0, 1) < 0 || merak_exec_backward(e, 0) < 0)
            rc = merak_errf(err, errlen, "calibration run: %s", merak_exec_error(e));
    }
    for (int i = 0; i < g->nops; i++)
        fwd[i] /= reps, bwd[i] /= reps;
    merak_exec_destroy(e);
    return rc;
}

int merak_device_calibrate(const merak_graph *g, const merak_kernels *k, int reps, merak_device *d, char *err,
                           size_t errlen)
{
    double *fwd = calloc((size_t)g->nops + 1, sizeof *fwd), *bwd = calloc((size_t)g->nops + 1, sizeof *bwd);
    if (!fwd || !bwd) {
        free(fwd), free(bwd);
        return merak_errf(err, errlen, "out of memory");
    }
    int rc = time_ops(g, k, reps < 1 ? 1 : reps, fwd, bwd, err, errlen);
    /* per kind: work over time, forward and backward */
    double work[MERAK_OP_COUNT_] = {0}, tf[MERAK_OP_COUNT_] = {0}, tb[MERAK_OP_COUNT_] = {0};
    for (int i = 0; rc == 0 && i < g->nops; i++) {
        const merak_op *o = &g->ops[i];
        work[o->type] += by_flops(o->type) ? o->flops : o->bytes;
        tf[o->type] += fwd[i];
        tb[o->type] += bwd[i];
    }
    double mem_work = 0, mem_t = 0;
    for (int t = 0; rc == 0 && t < MERAK_OP_COUNT_; t++) {
        if (!(work[t] > 0 && tf[t] > 0 && tb[t] > 0))
            continue;
        d->op_fwd[t] = work[t] / tf[t];
        d->op_bwd[t] = work[t] / tb[t];
        if (!by_flops((merak_op_type)t) && t != MERAK_OP_EMBEDDING && t != MERAK_OP_CROSS_ENTROPY)
            mem_work += work[t], mem_t += tf[t];
    }
    if (rc == 0 && d->op_fwd[MERAK_OP_LINEAR] > 0)
        d->matmul = d->op_fwd[MERAK_OP_LINEAR];
    if (rc == 0 && mem_t > 0)
        d->mem_bw = mem_work / mem_t;
    free(fwd), free(bwd);
    return rc;
}
