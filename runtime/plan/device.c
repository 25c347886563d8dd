/*
 * device.c - device profiles in JSON (device.h).
 */
#include <jansson.h>
#include <math.h> /* nextafter, HUGE_VAL */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "errf.h"
#include "file.h"

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

/* Writes d / unit in the fewest digits whose number, read back and
 * multiplied by unit, is d again (the quotient or a neighbour of it: a
 * value read from a file comes back exactly); else in 17 digits. */
static void put_number(FILE *f, double d, double unit)
{
    const double q = d / unit, near[3] = {q, nextafter(q, HUGE_VAL), nextafter(q, -HUGE_VAL)};
    char buf[40];
    for (int digits = 1; digits <= 17; digits++)
        for (int i = 0; i < 3; i++) {
            snprintf(buf, sizeof buf, "%.*g", digits, near[i]);
            if (strtod(buf, NULL) * unit == d) {
                fputs(buf, f);
                return;
            }
        }
    fprintf(f, "%.17g", q);
}

int merak_device_write(const merak_device *d, FILE *f)
{
    fprintf(f, "{\n");
    for (int i = 0; i < NFIELD; i++) {
        fprintf(f, "  \"%s\": ", fields[i].key);
        put_number(f, *(const double *)((const char *)d + fields[i].off), fields[i].unit);
        fprintf(f, ",\n");
    }
    if (d->reserved > 0) {
        fprintf(f, "  \"reserved_gb\": ");
        put_number(f, d->reserved, 1e9);
        fprintf(f, ",\n");
    }
    fprintf(f, "  \"ops\": {");
    for (int t = 0, n = 0; t < MERAK_OP_COUNT_; t++)
        if (d->op_fwd[t] > 0 && d->op_bwd[t] > 0) {
            fprintf(f, "%s\n    \"%s\": {\"forward\": ", n++ ? "," : "", merak_op_name((merak_op_type)t));
            put_number(f, d->op_fwd[t], 1);
            fprintf(f, ", \"backward\": ");
            put_number(f, d->op_bwd[t], 1);
            fprintf(f, "}");
        }
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
