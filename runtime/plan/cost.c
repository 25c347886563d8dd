/*
 * cost.c - device profiles and op times (cost.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "errf.h"

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
    snprintf(d->name, sizeof d->name, "%s", name);
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
    return 0;
}

int merak_device_load(const char *name, merak_device *d, char *err, size_t errlen)
{
    size_t len = strlen(name);
    int is_path = strchr(name, '/') || (len > 5 && strcmp(name + len - 5, ".json") == 0);
    const char *file = is_path ? name : getenv("MERAK_DEVICES");
    if (!file || !*file)
        file = MERAK_PKGDATADIR "/devices.json";
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root && je.line < 1)   /* jansson names the file */
        return merak_errf(err, errlen, "device profiles: %s", je.text);
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

/* A ring all-reduce of `bytes` over n ranks on links of bw bytes/s. */
static double allreduce_time(double bytes, int n, double bw, double latency)
{
    return n > 1 ? 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency : 0;
}

void merak_op_time(const merak_graph *g, int i, const merak_device *d, double *fwd, double *bwd)
{
    const merak_op *o = &g->ops[i];
    double mem = o->bytes / d->mem_bw;
    double out = 4.0 * (double)merak_tensor_elems(&g->tensors[o->out]);
    switch (o->type) {
    case MERAK_OP_LINEAR:
    case MERAK_OP_ATTENTION: {
        double t = o->flops / d->matmul;
        *fwd = t > mem ? t : mem;
        *bwd = 2 * *fwd;
        break;
    }
    case MERAK_OP_TP_REDUCE:   /* sums forward, passes the gradient */
        *fwd = allreduce_time(out, g->tp, d->intra, d->latency) + mem;
        *bwd = 0;
        break;
    case MERAK_OP_TP_COPY:     /* passes forward, sums the gradient */
        *fwd = 0;
        *bwd = allreduce_time(out, g->tp, d->intra, d->latency);
        break;
    default:
        *fwd = mem;
        *bwd = 2 * mem;
        break;
    }
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
        int t = k > 0 ? merak_cut_tensor(g, first[k]) : -1;
        b->comm[k] = t < 0 ? 0 : 4.0 * (double)merak_tensor_elems(&g->tensors[t]) / link_bw + d->latency;
    }
}
