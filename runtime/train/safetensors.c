/*
 * safetensors.c - reading and writing the safetensors format.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON, then the
 * data area.  The JSON maps tensor names to {"dtype", "shape",
 * "data_offsets": [begin, end]} with offsets relative to the data area, plus
 * an optional "__metadata__" object of strings.
 *
 * A file comes from outside (a download, another program), so open() trusts
 * nothing: every offset, size and shape is checked before a tensor is handed
 * out, and a tensor that is handed out is known to lie inside the mapping.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "safetensors.h"
#include "atomic.h"
#include "errf.h"
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

/* Tensor data is handed out and written in host byte order; the format is
 * little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* The reference implementation refuses headers above 100 MB; a bigger one is
 * almost certainly a corrupt length, and jansson would need several times
 * that in memory. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

struct merak_st_file {
    char *path;
    void *map;          /* the whole file, read-only */
    size_t map_len;
    int n;
    merak_st_info *info; /* header order; names are strdup'ed */
    int nmeta;
    char **meta_keys;
    char **meta_vals;
};

static const struct {
    const char *name;
    merak_st_dtype dtype;
    size_t size;
} dtypes[] = {
    {"F32", MERAK_ST_F32, 4}, {"F16", MERAK_ST_F16, 2}, {"BF16", MERAK_ST_BF16, 2},
    {"F64", MERAK_ST_F64, 8}, {"I64", MERAK_ST_I64, 8}, {"I32", MERAK_ST_I32, 4},
    {"I16", MERAK_ST_I16, 2}, {"I8", MERAK_ST_I8, 1},   {"U8", MERAK_ST_U8, 1},
    {"BOOL", MERAK_ST_BOOL, 1},
};
#define NDTYPES ((int)(sizeof(dtypes) / sizeof(dtypes[0])))

static int dtype_lookup(const char *name, merak_st_dtype *dt, size_t *size)
{
    for (int i = 0; i < NDTYPES; i++) {
        if (strcmp(dtypes[i].name, name) == 0) {
            *dt = dtypes[i].dtype;
            *size = dtypes[i].size;
            return 0;
        }
    }
    return -1;
}

static const char *dtype_name(merak_st_dtype dt)
{
    for (int i = 0; i < NDTYPES; i++)
        if (dtypes[i].dtype == dt)
            return dtypes[i].name;
    return "?";
}

static size_t dtype_size(merak_st_dtype dt)
{
    for (int i = 0; i < NDTYPES; i++)
        if (dtypes[i].dtype == dt)
            return dtypes[i].size;
    return 0;
}

/* a * b, or -1 if it overflows uint64_t. */
static int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

void merak_st_close(merak_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    for (int i = 0; i < f->n; i++)
        free((char *)f->info[i].name);
    free(f->info);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->path);
    free(f);
}

/* Reads "__metadata__": an object whose values must all be strings. */
static int parse_metadata(merak_st_file *f, json_t *meta, char *err, size_t errlen)
{
    if (!json_is_object(meta)) {
        merak_errf(err, errlen, "%s: \"__metadata__\" is not a JSON object", f->path);
        return -1;
    }
    size_t n = json_object_size(meta);
    f->meta_keys = calloc(n ? n : 1, sizeof(char *));
    f->meta_vals = calloc(n ? n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals) {
        merak_errf(err, errlen, "%s: out of memory reading metadata", f->path);
        return -1;
    }
    const char *key;
    json_t *val;
    json_object_foreach(meta, key, val) {
        if (!json_is_string(val)) {
            merak_errf(err, errlen, "%s: metadata entry '%.64s' is not a string", f->path, key);
            return -1;
        }
        char *k = strdup(key), *v = strdup(json_string_value(val));
        if (!k || !v) {
            free(k);
            free(v);
            merak_errf(err, errlen, "%s: out of memory reading metadata", f->path);
            return -1;
        }
        f->meta_keys[f->nmeta] = k;
        f->meta_vals[f->nmeta] = v;
        f->nmeta++;
    }
    return 0;
}

/* Fills info from one header entry and checks it against the data area of
 * data_len bytes.  begin/end receive the data offsets for the overlap check. */
static int parse_tensor(const merak_st_file *f, const char *name, json_t *desc,
                        const uint8_t *data, uint64_t data_len, merak_st_info *info,
                        uint64_t *begin_out, uint64_t *end_out, char *err, size_t errlen)
{
    const char *p = f->path;
    if (!json_is_object(desc)) {
        merak_errf(err, errlen, "%s: tensor '%.64s': entry is not a JSON object", p, name);
        return -1;
    }

    json_t *jdtype = json_object_get(desc, "dtype");
    if (!json_is_string(jdtype)) {
        merak_errf(err, errlen, "%s: tensor '%.64s': \"dtype\" missing or not a string", p, name);
        return -1;
    }
    size_t esize;
    if (dtype_lookup(json_string_value(jdtype), &info->dtype, &esize) != 0) {
        merak_errf(err, errlen, "%s: tensor '%.64s': unknown dtype '%.16s'", p, name,
               json_string_value(jdtype));
        return -1;
    }

    json_t *jshape = json_object_get(desc, "shape");
    if (!json_is_array(jshape)) {
        merak_errf(err, errlen, "%s: tensor '%.64s': \"shape\" missing or not an array", p, name);
        return -1;
    }
    size_t ndim = json_array_size(jshape);
    if (ndim > MERAK_ST_MAX_DIMS) {
        merak_errf(err, errlen, "%s: tensor '%.64s': %zu dimensions (at most %d supported)", p,
               name, ndim, MERAK_ST_MAX_DIMS);
        return -1;
    }
    uint64_t nelem = 1;
    for (size_t d = 0; d < ndim; d++) {
        json_t *jd = json_array_get(jshape, d);
        if (!json_is_integer(jd) || json_integer_value(jd) < 0) {
            merak_errf(err, errlen, "%s: tensor '%.64s': shape[%zu] is not a non-negative integer",
                   p, name, d);
            return -1;
        }
        info->shape[d] = (int64_t)json_integer_value(jd);
        if (mul_u64(nelem, (uint64_t)info->shape[d], &nelem) != 0) {
            merak_errf(err, errlen, "%s: tensor '%.64s': shape's element count overflows", p, name);
            return -1;
        }
    }
    info->ndim = (int)ndim;
    uint64_t nbytes;
    if (mul_u64(nelem, esize, &nbytes) != 0) {
        merak_errf(err, errlen, "%s: tensor '%.64s': shape's byte size overflows", p, name);
        return -1;
    }

    json_t *joff = json_object_get(desc, "data_offsets");
    json_t *jb = json_array_get(joff, 0), *je = json_array_get(joff, 1);
    if (!json_is_array(joff) || json_array_size(joff) != 2 || !json_is_integer(jb) ||
        !json_is_integer(je) || json_integer_value(jb) < 0 || json_integer_value(je) < 0) {
        merak_errf(err, errlen,
               "%s: tensor '%.64s': \"data_offsets\" must be two non-negative integers", p,
               name);
        return -1;
    }
    uint64_t begin = (uint64_t)json_integer_value(jb), end = (uint64_t)json_integer_value(je);
    if (begin > end) {
        merak_errf(err, errlen, "%s: tensor '%.64s': data_offsets [%llu, %llu] end before they begin",
               p, name, (unsigned long long)begin, (unsigned long long)end);
        return -1;
    }
    if (end > data_len) {
        merak_errf(err, errlen,
               "%s: tensor '%.64s': data_offsets [%llu, %llu] run past the data area (%llu bytes)",
               p, name, (unsigned long long)begin, (unsigned long long)end,
               (unsigned long long)data_len);
        return -1;
    }
    if (end - begin != nbytes) {
        merak_errf(err, errlen,
               "%s: tensor '%.64s': data_offsets span %llu bytes but %s shape needs %llu", p,
               name, (unsigned long long)(end - begin), dtype_name(info->dtype),
               (unsigned long long)nbytes);
        return -1;
    }
    info->data = data + begin;
    info->nbytes = (size_t)nbytes;
    *begin_out = begin;
    *end_out = end;
    return 0;
}

typedef struct span {
    uint64_t begin, end;
    int index;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parses and validates the JSON header; fills f->info and the metadata. */
static int parse_header(merak_st_file *f, const char *hdr, size_t hdr_len, const uint8_t *data,
                        uint64_t data_len, char *err, size_t errlen)
{
    json_error_t jerr;
    /* Duplicate names would make "the tensor called X" ambiguous. */
    json_t *root = json_loadb(hdr, hdr_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        merak_errf(err, errlen, "%s: header is not valid JSON (line %d, column %d: %s)", f->path,
               jerr.line, jerr.column, jerr.text);
        return -1;
    }
    int rc = -1;
    span *spans = NULL;
    if (!json_is_object(root)) {
        merak_errf(err, errlen, "%s: header is not a JSON object", f->path);
        goto out;
    }

    size_t total = json_object_size(root);
    if (total > (size_t)INT32_MAX) {
        merak_errf(err, errlen, "%s: too many header entries", f->path);
        goto out;
    }
    f->info = calloc(total ? total : 1, sizeof(*f->info));
    spans = calloc(total ? total : 1, sizeof(*spans));
    if (!f->info || !spans) {
        merak_errf(err, errlen, "%s: out of memory reading the header", f->path);
        goto out;
    }

    /* jansson (>= 2.8) iterates objects in insertion order, i.e. header order. */
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_metadata(f, val, err, errlen) != 0)
                goto out;
            continue;
        }
        merak_st_info *info = &f->info[f->n];
        if (parse_tensor(f, key, val, data, data_len, info, &spans[f->n].begin,
                         &spans[f->n].end, err, errlen) != 0)
            goto out;
        info->path = f->path;
        if (!(info->name = strdup(key))) {
            merak_errf(err, errlen, "%s: out of memory reading the header", f->path);
            goto out;
        }
        spans[f->n].index = f->n;
        f->n++;
    }

    /* Overlapping tensors would alias each other's storage: sort by offset and
     * check each begins where (or after) the previous one ends.  Empty
     * tensors occupy no bytes and cannot overlap anything. */
    qsort(spans, (size_t)f->n, sizeof(*spans), span_cmp);
    uint64_t prev_end = 0;
    int prev = -1;
    for (int i = 0; i < f->n; i++) {
        if (spans[i].begin == spans[i].end)
            continue;
        if (prev >= 0 && spans[i].begin < prev_end) {
            merak_errf(err, errlen, "%s: tensors '%.64s' and '%.64s' overlap (bytes %llu..%llu)",
                   f->path, f->info[prev].name, f->info[spans[i].index].name,
                   (unsigned long long)spans[i].begin, (unsigned long long)prev_end);
            goto out;
        }
        prev_end = spans[i].end;
        prev = spans[i].index;
    }
    /* The data area is the tensors, packed: a byte no tensor owns (a hole
     * between two, or anything after the last) is refused, as the
     * safetensors format itself does. */
    prev_end = 0;
    for (int i = 0; i < f->n; i++) {
        if (spans[i].begin == spans[i].end)
            continue;
        if (spans[i].begin != prev_end) {
            merak_errf(err, errlen, "%s: bytes %llu..%llu of the data belong to no tensor (a hole before '%.64s')",
                       f->path, (unsigned long long)prev_end, (unsigned long long)spans[i].begin,
                       f->info[spans[i].index].name);
            goto out;
        }
        prev_end = spans[i].end;
    }
    if (prev_end != data_len) {
        merak_errf(err, errlen, "%s: %llu bytes after the last tensor's data belong to no tensor", f->path,
                   (unsigned long long)(data_len - prev_end));
        goto out;
    }
    rc = 0;
out:
    free(spans);
    json_decref(root);
    return rc;
}

int merak_st_open(const char *path, merak_st_file **out, char *err, size_t errlen)
{
    *out = NULL;
    merak_st_file *f = calloc(1, sizeof(*f));
    if (!f || !(f->path = strdup(path))) {
        free(f);
        merak_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }

    int fd = merak_file_open(path, err, errlen);
    if (fd < 0)
        goto fail;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        merak_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        merak_errf(err, errlen, "%s: truncated: %llu bytes, too short for the 8-byte header length",
               path, (unsigned long long)size);
        close(fd);
        goto fail;
    }
    if (size > SIZE_MAX) {
        merak_errf(err, errlen, "%s: too large to map", path);
        close(fd);
        goto fail;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    /* The mapping keeps the file alive; the descriptor is no longer needed. */
    if (close(fd) != 0 && map != MAP_FAILED) {
        merak_errf(err, errlen, "%s: close: %s", path, strerror(errno));
        munmap(map, (size_t)size);
        goto fail;
    }
    if (map == MAP_FAILED) {
        merak_errf(err, errlen, "%s: mmap: %s", path, strerror(map_errno));
        goto fail;
    }
    f->map = map;
    f->map_len = (size_t)size;

    const uint8_t *bytes = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    if (hlen > size - 8) {
        merak_errf(err, errlen, "%s: header length %llu is larger than the file (%llu bytes)", path,
               (unsigned long long)hlen, (unsigned long long)size);
        goto fail;
    }
    if (hlen < 2 || hlen > ST_MAX_HEADER) {
        merak_errf(err, errlen, "%s: implausible header length %llu (expected 2..%llu)", path,
               (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        goto fail;
    }
    if (parse_header(f, (const char *)bytes + 8, (size_t)hlen, bytes + 8 + hlen,
                     size - 8 - hlen, err, errlen) != 0)
        goto fail;
    *out = f;
    return 0;
fail:
    merak_st_close(f);
    return -1;
}

int merak_st_count(const merak_st_file *f) { return f->n; }

const merak_st_info *merak_st_at(const merak_st_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->info[i] : NULL;
}

const merak_st_info *merak_st_find(const merak_st_file *f, const char *name)
{
    /* Linear: checkpoints hold hundreds of tensors, looked up once each. */
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->info[i].name, name) == 0)
            return &f->info[i];
    return NULL;
}

const char *merak_st_metadata(const merak_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_vals[i];
    return NULL;
}

/* ------------------------------------------------------------------ conversion */

static float bits_to_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* IEEE half -> single.  Every half value is exactly representable. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or nan with its payload kept (so it stays a nan) */
        return bits_to_f32(sign | 0x7f800000u | mant << 13);
    if (exp == 0) {
        if (mant == 0)
            return bits_to_f32(sign); /* signed zero */
        /* Subnormal: mant * 2^-24.  Shift the leading 1 up to the implicit
         * bit position, lowering the exponent to match. */
        exp = 127 - 15 + 1;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            exp--;
        }
        mant &= 0x3ffu;
        return bits_to_f32(sign | exp << 23 | mant << 13);
    }
    return bits_to_f32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

int merak_st_to_f32(const merak_st_info *info, float *dst, char *err, size_t errlen)
{
    /* The data may sit at any alignment inside the mapping (the header length
     * need not be a multiple of 8), so elements are read with memcpy. */
    const uint8_t *src = info->data;
    size_t esize = dtype_size(info->dtype);
    size_t n = esize ? info->nbytes / esize : 0;
    switch (info->dtype) {
    case MERAK_ST_F32:
        if (n > 0)
            memcpy(dst, src, n * sizeof(float));
        return 0;
    case MERAK_ST_F16:
    case MERAK_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            dst[i] = info->dtype == MERAK_ST_F16 ? f16_to_f32(h) : merak_bf16_to_f32(h);
        }
        return 0;
    case MERAK_ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, sizeof(d));
            dst[i] = (float)d;
        }
        return 0;
    default:
        merak_errf(err, errlen, "%s: tensor '%.64s' is %s: weights must be floating point (F32, F16, BF16 or "
                   "F64)", info->path ? info->path : "safetensors", info->name, dtype_name(info->dtype));
        return -1;
    }
}

/* ------------------------------------------------------------------ writing */

/* Builds the JSON header for merak_st_write, padded with spaces so the data
 * area starts at a multiple of 8 bytes.  Returns a malloc'ed string. */
static char *build_header(const char *path, const merak_st_entry *entries, int n,
                          const char *const *meta_keys, const char *const *meta_vals,
                          int nmeta, size_t *len_out, char *err, size_t errlen)
{
    char *text = NULL, *padded = NULL;
    json_t *root = json_object();
    if (!root)
        goto oom;

    if (nmeta > 0) {
        json_t *meta = json_object();
        if (!meta || json_object_set_new(root, "__metadata__", meta) != 0)
            goto oom;
        for (int i = 0; i < nmeta; i++) {
            if (!meta_keys || !meta_vals || !meta_keys[i] || !meta_vals[i]) {
                merak_errf(err, errlen, "%s: metadata entry %d is NULL", path, i);
                goto fail;
            }
            json_t *s = json_string(meta_vals[i]);
            if (!s) {
                merak_errf(err, errlen, "%s: metadata value for '%.64s' is not valid UTF-8", path,
                       meta_keys[i]);
                goto fail;
            }
            if (json_object_set_new(meta, meta_keys[i], s) != 0) {
                merak_errf(err, errlen, "%s: metadata key '%.64s' is not valid UTF-8", path,
                       meta_keys[i]);
                goto fail;
            }
        }
    }

    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const merak_st_entry *e = &entries[i];
        if (!e->name || strcmp(e->name, "__metadata__") == 0) {
            merak_errf(err, errlen, "%s: tensor %d has no usable name", path, i);
            goto fail;
        }
        if (json_object_get(root, e->name)) {
            merak_errf(err, errlen, "%s: duplicate tensor name '%.64s'", path, e->name);
            goto fail;
        }
        if (e->ndim < 0 || e->ndim > MERAK_ST_MAX_DIMS) {
            merak_errf(err, errlen, "%s: tensor '%.64s': ndim %d out of range 0..%d", path, e->name,
                   e->ndim, MERAK_ST_MAX_DIMS);
            goto fail;
        }
        json_t *shape = json_array();
        json_t *desc = json_object();
        if (!shape || !desc) {
            json_decref(shape);
            json_decref(desc);
            goto oom;
        }
        if (json_object_set_new(root, e->name, desc) != 0) {
            json_decref(shape);
            merak_errf(err, errlen, "%s: tensor name '%.64s' is not valid UTF-8", path, e->name);
            goto fail;
        }
        if (json_object_set_new(desc, "dtype", json_string(e->bf16 ? "BF16" : "F32")) != 0 ||
            json_object_set_new(desc, "shape", shape) != 0)
            goto oom;
        uint64_t nelem = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0 || mul_u64(nelem, (uint64_t)e->shape[d], &nelem) != 0) {
                merak_errf(err, errlen, "%s: tensor '%.64s': bad shape[%d] = %lld", path, e->name,
                       d, (long long)e->shape[d]);
                goto fail;
            }
            if (json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) != 0)
                goto oom;
        }
        uint64_t nbytes;
        if (mul_u64(nelem, e->bf16 ? 2 : sizeof(float), &nbytes) != 0 || nbytes > (uint64_t)INT64_MAX - offset) {
            merak_errf(err, errlen, "%s: tensor '%.64s': too large", path, e->name);
            goto fail;
        }
        if (nbytes > 0 && !e->data) {
            merak_errf(err, errlen, "%s: tensor '%.64s' has no data", path, e->name);
            goto fail;
        }
        json_t *offs = json_pack("[II]", (json_int_t)offset, (json_int_t)(offset + nbytes));
        if (!offs || json_object_set_new(desc, "data_offsets", offs) != 0)
            goto oom;
        offset += nbytes;
    }

    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        goto oom;
    size_t len = strlen(text);
    size_t plen = (len + 7) / 8 * 8;
    if (!(padded = malloc(plen)))
        goto oom;
    memcpy(padded, text, len);
    memset(padded + len, ' ', plen - len);
    free(text);
    json_decref(root);
    *len_out = plen;
    return padded;

oom:
    merak_errf(err, errlen, "%s: out of memory building the header", path);
fail:
    free(text);
    json_decref(root);
    return NULL;
}

int merak_st_write(const char *path, const merak_st_entry *entries, int n,
                   const char *const *meta_keys, const char *const *meta_vals, int nmeta,
                   uint32_t *crc, uint64_t *bytes, char *err, size_t errlen)
{
    if (n < 0 || nmeta < 0 || (n > 0 && !entries)) {
        merak_errf(err, errlen, "%s: bad tensor or metadata count", path);
        return -1;
    }
    size_t hlen;
    char *hdr = build_header(path, entries, n, meta_keys, meta_vals, nmeta, &hlen, err, errlen);
    if (!hdr)
        return -1;

    merak_atomic *a;
    if (merak_atomic_open(path, &a, err, errlen) < 0) {
        free(hdr);
        return -1;
    }
    if (crc)
        merak_atomic_checksum(a);
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    merak_atomic_write(a, lenbuf, 8);
    merak_atomic_write(a, hdr, hlen);
    free(hdr);
    for (int i = 0; i < n; i++) {
        size_t nelem = 1;
        for (int d = 0; d < entries[i].ndim; d++)
            nelem *= (size_t)entries[i].shape[d]; /* checked in build_header */
        if (nelem > 0 && !entries[i].bf16)
            merak_atomic_write(a, entries[i].data, nelem * sizeof(float));
        for (size_t k = 0; entries[i].bf16 && k < nelem;) {   /* little-endian halves, a chunk at a time */
            uint8_t chunk[8192];
            size_t m = 0;
            for (; k < nelem && m < sizeof chunk; k++, m += 2) {
                const uint16_t h = merak_f32_to_bf16(entries[i].data[k]);
                chunk[m] = (uint8_t)h, chunk[m + 1] = (uint8_t)(h >> 8);
            }
            merak_atomic_write(a, chunk, m);
        }
    }
    if (crc)
        merak_atomic_sum(a, crc, bytes);
    return merak_atomic_commit(a, err, errlen);
}

int64_t merak_nonfinite_at(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return (int64_t)i;
    return -1;
}

void merak_st_shape_str(const int64_t *shape, int ndim, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

int merak_st_finite(const char *path, const merak_st_entry *e, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        size_t elems = 1;
        for (int d = 0; d < e[i].ndim; d++)
            elems *= (size_t)e[i].shape[d];
        for (size_t k = 0; k < elems; k++) {
            if (!isfinite(e[i].data[k]))
                return merak_errf(err, errlen, "%s: not written: tensor '%s' holds %g at element %zu (the run "
                                  "diverged; weights that are not finite are never saved)", path, e[i].name,
                                  (double)e[i].data[k], k);
            if (e[i].bf16 && (merak_f32_to_bf16(e[i].data[k]) & 0x7f80u) == 0x7f80u)
                return merak_errf(err, errlen, "%s: not written: tensor '%s' holds %g at element %zu, past "
                                  "bfloat16's range (save it as fp32)", path, e[i].name, (double)e[i].data[k], k);
        }
    }
    return 0;
}
