/*
 * device.c - device profiles in JSON (device.h).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h> /* nextafter, HUGE_VAL */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* access */

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

/* The keys of the measured rates' tables (merak_rates). */
static const char *const ops_key[MERAK_RATES_COUNT_] = {"ops", "ops_bf16"};

static int read_profile(json_t *o, const char *file, const char *name, merak_device *d, char *err,
                        size_t errlen)
{
    memset(d, 0, sizeof *d);   /* padding too: a profile compares with memcmp (fuzz_device) */
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
    /* (which names a backend is the planner's to say: merak_layout_plan) */
    json_t *bv = json_object_get(o, "backend");
    const char *bn = bv ? json_string_value(bv) : "cpu";
    if (!bn || !*bn || strlen(bn) >= sizeof d->backend ||
        strspn(bn, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(bn))
        return merak_errf(err, errlen, "%s: device '%s': backend must be a backend's name (lower-case letters, "
                          "digits, '_' and '-', under 16)", file, name);
    strcpy(d->backend, bn);
    if (d->reserved >= d->memory)
        return merak_errf(err, errlen, "%s: device '%s': reserved_gb must be less than memory_gb", file, name);
    for (int r = 0; r < MERAK_RATES_COUNT_; r++) {
        json_t *ops = json_object_get(o, ops_key[r]);
        if (ops && !json_is_object(ops))
            return merak_errf(err, errlen, "%s: device '%s': \"%s\" is not an object", file, name, ops_key[r]);
        const char *key;
        json_t *v;
        json_object_foreach(ops, key, v) {
            int t = 0;
            while (t < MERAK_OP_COUNT_ && strcmp(merak_op_name((merak_op_type)t), key) != 0)
                t++;
            if (t == MERAK_OP_COUNT_)
                return merak_errf(err, errlen, "%s: device '%s': %s: '%s' is not an op kind", file, name, ops_key[r],
                                  key);
            json_t *f = json_object_get(v, "forward"), *b = json_object_get(v, "backward");
            double x = json_is_number(f) ? json_number_value(f) : -1, y = json_is_number(b) ? json_number_value(b) : -1;
            if (!(x > 0 && x < 1e30 && y > 0 && y < 1e30))
                return merak_errf(err, errlen, "%s: device '%s': %s: %s needs positive \"forward\" and \"backward\" "
                                  "rates", file, name, ops_key[r], key);
            d->op_fwd[r][t] = x;
            d->op_bwd[r][t] = y;
        }
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
    fprintf(f, "  \"backend\": \"%s\",\n", d->backend[0] ? d->backend : "cpu");
    if (d->reserved > 0) {
        fprintf(f, "  \"reserved_gb\": ");
        put_number(f, d->reserved, 1e9);
        fprintf(f, ",\n");
    }
    /* "ops" always (the last member but for a measured bf16 table) */
    for (int r = 0; r < MERAK_RATES_COUNT_; r++) {
        int n = 0;
        for (int t = 0; t < MERAK_OP_COUNT_; t++)
            n += d->op_fwd[r][t] > 0 && d->op_bwd[r][t] > 0;
        if (r && !n)
            continue;
        fprintf(f, "%s  \"%s\": {", r ? ",\n" : "", ops_key[r]);
        for (int t = 0, k = 0; t < MERAK_OP_COUNT_; t++)
            if (d->op_fwd[r][t] > 0 && d->op_bwd[r][t] > 0) {
                fprintf(f, "%s\n    \"%s\": {\"forward\": ", k++ ? "," : "", merak_op_name((merak_op_type)t));
                put_number(f, d->op_fwd[r][t], 1);
                fprintf(f, ", \"backward\": ");
                put_number(f, d->op_bwd[r][t], 1);
                fprintf(f, "}");
            }
        fprintf(f, "\n  }");
    }
    fprintf(f, "\n}\n");
    return ferror(f) ? -1 : 0;
}

/* The JSON of a file (NULL with err naming it). */
static json_t *load_file(const char *file, char *err, size_t errlen)
{
    char why[512];
    FILE *f = merak_file_fopen(file, why, sizeof why);
    if (!f) {
        merak_errf(err, errlen, "device profiles: %s", why);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root)
        merak_errf(err, errlen, "%s:%d: %s", file, je.line, je.text);
    return root;
}

/* A profile named by path: a file of one profile, or a devices table whose
 * only entry is taken. */
static int load_path(const char *path, merak_device *d, char *err, size_t errlen)
{
    json_t *root = load_file(path, err, errlen);
    if (!root)
        return -1;
    json_t *table = json_object_get(root, "devices");
    int rc;
    if (!table) {
        const char *base = strrchr(path, '/');
        rc = read_profile(root, path, base ? base + 1 : path, d, err, errlen);
    } else if (!json_is_object(table)) {
        rc = merak_errf(err, errlen, "%s: no \"devices\" object", path);
    } else {
        const char *key = json_object_size(table) == 1 ? json_object_iter_key(json_object_iter(table)) : NULL;
        rc = key ? read_profile(json_object_get(table, key), path, key, d, err, errlen)
                 : merak_errf(err, errlen, "%s: %zu devices; give one of them by name", path, json_object_size(table));
    }
    json_decref(root);
    return rc;
}

/* A profile named by key, looked up in three tables, the first that has it
 * winning: the file MERAK_DEVICES names (it must be readable), the
 * installed $(pkgdatadir)/devices.json (skipped when absent, as in a build
 * tree), and the built-in copy of data/devices.json. */
static int load_named(const char *name, merak_device *d, char *err, size_t errlen)
{
    const char *env = getenv("MERAK_DEVICES");
    enum { ENV, INSTALLED, BUILTIN, NSRC };
    struct {
        const char *file;
        json_t *root, *table;
    } src[NSRC] = {{env && *env ? env : NULL, NULL, NULL}, {MERAK_PKGDATADIR "/devices.json", NULL, NULL},
                   {"built-in devices.json", NULL, NULL}};
    int rc = 1;   /* 1: not found yet */
    for (int i = 0; i < NSRC && rc == 1; i++) {
        if (!src[i].file || (i == INSTALLED && access(src[i].file, F_OK) != 0 && errno == ENOENT))
            continue;
        if (i == BUILTIN) {
            json_error_t je;
            src[i].root = json_loads(merak_devices_builtin, JSON_REJECT_DUPLICATES, &je);
            if (!src[i].root)   /* data/devices.json is checked by the build's tests */
                rc = merak_errf(err, errlen, "%s:%d: %s", src[i].file, je.line, je.text);
        } else if (!(src[i].root = load_file(src[i].file, err, errlen))) {
            rc = -1;
        }
        if (rc != 1)
            break;
        src[i].table = json_object_get(src[i].root, "devices");
        if (!json_is_object(src[i].table))
            rc = merak_errf(err, errlen, "%s: no \"devices\" object", src[i].file);
        else if (json_object_get(src[i].table, name))
            rc = read_profile(json_object_get(src[i].table, name), src[i].file, name, d, err, errlen);
    }
    if (rc == 1) {   /* every table read, none has it: say which were and what they hold */
        char where[1024] = "", known[512] = "";
        for (int i = 0; i < NSRC; i++) {
            if (!src[i].table)
                continue;
            int later = 0;   /* "A, B or C" */
            for (int j = i + 1; j < NSRC; j++)
                later += src[j].table != NULL;
            size_t w = strlen(where);
            snprintf(where + w, sizeof where - w, "%s%s%s", !w ? "" : later ? ", " : " or ",
                     i == BUILTIN ? "the built-in profiles" : src[i].file, i == ENV ? " (MERAK_DEVICES)" : "");
            const char *key;
            json_t *v;
            json_object_foreach(src[i].table, key, v) {
                int dup = 0;
                for (int j = 0; j < i && !dup; j++)
                    dup = src[j].table && json_object_get(src[j].table, key);
                size_t k = strlen(known);
                if (!dup)
                    snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "", key);
            }
        }
        merak_errf(err, errlen, "device profile '%s' is not in %s (known: %s)", name, where, known);
        rc = MERAK_USAGE;
    }
    for (int i = 0; i < NSRC; i++)
        json_decref(src[i].root);
    return rc;
}

int merak_device_load(const char *name, merak_device *d, char *err, size_t errlen)
{
    size_t len = strlen(name);
    if (strchr(name, '/') || (len > 5 && strcmp(name + len - 5, ".json") == 0))
        return load_path(name, d, err, errlen);
    return load_named(name, d, err, errlen);
}
