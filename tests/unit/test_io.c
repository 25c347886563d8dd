/*
 * test_io.c - TAP tests for the file formats: safetensors, token shards and
 * model configurations (presets and Hugging Face config.json), and the one
 * file writer under them all (atomic.h).
 *
 * Besides round trips and one test per refusal, both binary readers get a
 * seeded mutation fuzz loop: every mutated file must either be refused with
 * a message or be accepted with every tensor/token inside the file.  The
 * loops are deterministic and meant to run under ASan/UBSan.
 *
 * Fixtures are read from $MERAK_SRCDIR/tests/fixtures (MERAK_SRCDIR defaults
 * to ".").  Temporary files live in a mkdtemp directory that is removed at
 * the end.
 */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, setrlimit */
#endif

#include "atomic.h"
#include "data.h"
#include "file.h"
#include "merak/merak.h"
#include "safetensors.h"
#include "tap.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

/* ------------------------------------------------------------------ TAP */

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* True if err names PATH and contains WORD; prints err when not. */
static int err_mentions(const char *err, const char *path, const char *word)
{
    int good = (!path || strstr(err, path)) && (!word || strstr(err, word));
    if (!good)
        diag("unexpected message: %s", err);
    return good;
}

/* ------------------------------------------------------------------ files */

static char tmpdir[4096];

static const char *tmp_path(const char *name)
{
    static char buf[8][4200];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
    return p;
}

static int write_bytes(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return -1;
    int good = fwrite(buf, 1, len, fp) == len;
    return fclose(fp) == 0 && good ? 0 : -1;
}

/* Reads PATH into a malloc'ed buffer; NULL on failure. */
static uint8_t *read_bytes(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    uint8_t *buf = NULL;
    long size;
    if (fseek(fp, 0, SEEK_END) == 0 && (size = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)size + 1)) && fread(buf, 1, (size_t)size, fp) == (size_t)size) {
        *len = (size_t)size;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    return buf;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* True if DIR holds exactly N entries (besides . and ..); lists them when not,
 * so a temporary left behind shows in the log. */
static int listing_is(const char *dir, int n)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int count = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then list if the count is wrong */
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (pass == 0)
                count++;
            else
                diag("in %s: %s", dir, e->d_name);
        }
        if (count == n)
            break;
        rewinddir(d);
    }
    closedir(d);
    return count == n;
}

/* True if DIR holds no hidden entry (no temporary left behind). */
static int no_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int none = 1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            diag("left behind in %s: %s", dir, e->d_name);
            none = 0;
        }
    }
    closedir(d);
    return none;
}

/* True if PATH holds exactly the string TEXT. */
static int holds(const char *path, const char *text)
{
    size_t len = 0;
    uint8_t *b = read_bytes(path, &len);
    int same = b && len == strlen(text) && memcmp(b, text, len) == 0;
    free(b);
    return same;
}

/* Writes a safetensors file from a header string and a data area.  HLEN
 * overrides the header-length field when not (uint64_t)-1. */
static int write_st_raw(const char *path, const char *hdr, uint64_t hlen, const void *data,
                        size_t dlen)
{
    size_t n = strlen(hdr);
    uint64_t field = hlen == (uint64_t)-1 ? n : hlen;
    uint8_t *buf = malloc(8 + n + dlen);
    if (!buf)
        return -1;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(field >> (8 * i));
    memcpy(buf + 8, hdr, n);
    if (dlen)
        memcpy(buf + 8 + n, data, dlen);
    int rc = write_bytes(path, buf, 8 + n + dlen);
    free(buf);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Deterministic xorshift64* so fuzz failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t rng_below(size_t n) { return n ? (size_t)(rng() % n) : 0; }

/* ------------------------------------------------------------------ safetensors */

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof(float)) == 0; }

static void test_st_roundtrip(void)
{
    char err[512];
    float wte[12], h0[8], scalar = 3.25f;
    for (int i = 0; i < 12; i++)
        wte[i] = (float)i * 0.5f - 2.0f;
    for (int i = 0; i < 8; i++)
        h0[i] = 1.0f / (float)(i + 1);
    merak_st_entry e[4] = {
        {.name = "wte", .ndim = 2, .shape = {4, 3}, .data = wte},
        {.name = "scalar", .ndim = 0, .data = &scalar},
        {.name = "empty", .ndim = 2, .shape = {0, 5}, .data = NULL},
        {.name = "h.0.w", .ndim = 3, .shape = {2, 2, 2}, .data = h0},
    };
    const char *keys[] = {"format", "step"}, *vals[] = {"pt", "42"};
    const char *path = tmp_path("round.safetensors");
    uint32_t crc = 0, file_crc = 1;
    uint64_t summed = 0, file_bytes = 1;
    int rc = merak_st_write(path, e, 4, keys, vals, 2, &crc, &summed, err, sizeof(err));
    tap_ok(rc == 0, "safetensors: write 4 tensors + metadata%s%s", rc ? ": " : "", rc ? err : "");
    tap_ok(no_temporaries(tmpdir), "safetensors: no temporary file left behind");
    const int read_back = merak_file_crc32(path, &file_crc, &file_bytes, err, sizeof(err));
    tap_ok(read_back == 0 && crc == file_crc && summed == file_bytes,
           "safetensors: the CRC-32 summed while writing is the file's (%08x, %llu bytes; read back %08x, %llu)",
           (unsigned)crc, (unsigned long long)summed, (unsigned)file_crc, (unsigned long long)file_bytes);

    size_t len = 0;
    uint8_t *raw = read_bytes(path, &len);
    uint64_t hlen = 0;
    for (int i = 7; raw && len >= 8 && i >= 0; i--)
        hlen = hlen << 8 | raw[i];
    tap_ok(raw && hlen % 8 == 0 && raw[8] == '{' && 8 + hlen + (12 + 1 + 8) * 4 == len,
       "safetensors: header padded to a multiple of 8, data follows (%zu bytes)", len);
    free(raw);

    merak_st_file *f = NULL;
    rc = merak_st_open(path, &f, err, sizeof(err));
    tap_ok(rc == 0, "safetensors: reopen%s%s", rc ? ": " : "", rc ? err : "");
    if (rc != 0)
        return;
    tap_ok(merak_st_count(f) == 4, "safetensors: 4 tensors");
    int order = 1, shapes = 1, bytes = 1;
    for (int i = 0; i < 4 && i < merak_st_count(f); i++) {
        const merak_st_info *t = merak_st_at(f, i);
        order &= strcmp(t->name, e[i].name) == 0;
        shapes &= t->dtype == MERAK_ST_F32 && t->ndim == e[i].ndim;
        size_t nelem = 1;
        for (int d = 0; d < e[i].ndim; d++) {
            shapes &= t->shape[d] == e[i].shape[d];
            nelem *= (size_t)e[i].shape[d];
        }
        shapes &= t->nbytes == nelem * sizeof(float);
        bytes &= nelem == 0 || memcmp(t->data, e[i].data, nelem * sizeof(float)) == 0;
    }
    tap_ok(order, "safetensors: names in written order");
    tap_ok(shapes, "safetensors: dtypes, shapes and sizes survive");
    tap_ok(bytes, "safetensors: data bytes survive");
    tap_ok(merak_st_at(f, 4) == NULL && merak_st_at(f, -1) == NULL, "safetensors: at() bounds");
    const merak_st_info *t = merak_st_find(f, "h.0.w");
    tap_ok(t && t->shape[2] == 2 && merak_st_find(f, "nope") == NULL, "safetensors: find by name");
    const char *fmt = merak_st_metadata(f, "format"), *step = merak_st_metadata(f, "step");
    tap_ok(fmt && step && strcmp(fmt, "pt") == 0 && strcmp(step, "42") == 0 &&
           merak_st_metadata(f, "other") == NULL,
       "safetensors: metadata survives");
    float back[12];
    rc = t ? merak_st_to_f32(merak_st_find(f, "wte"), back, err, sizeof(err)) : -1;
    tap_ok(rc == 0 && memcmp(back, wte, sizeof(wte)) == 0, "safetensors: to_f32 of F32 copies");
    merak_st_close(f);

    /* Duplicate names are refused and nothing is written. */
    merak_st_entry dup[2] = {
        {.name = "a", .ndim = 1, .shape = {2}, .data = h0},
        {.name = "a", .ndim = 1, .shape = {2}, .data = h0},
    };
    const char *dpath = tmp_path("dup.safetensors");
    rc = merak_st_write(dpath, dup, 2, NULL, NULL, 0, NULL, NULL, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, dpath, "duplicate") && !exists(dpath) &&
           no_temporaries(tmpdir),
       "safetensors: write refuses duplicate names");
    merak_st_entry meta_name = {.name = "__metadata__", .ndim = 1, .shape = {2}, .data = h0};
    rc = merak_st_write(dpath, &meta_name, 1, NULL, NULL, 0, NULL, NULL, err, sizeof(err));
    tap_ok(rc != 0 && !exists(dpath), "safetensors: write refuses a tensor named __metadata__");
    merak_st_entry negdim = {.name = "x", .ndim = 1, .shape = {-1}, .data = h0};
    rc = merak_st_write(dpath, &negdim, 1, NULL, NULL, 0, NULL, NULL, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, dpath, "shape"), "safetensors: write refuses a bad shape");
    rc = merak_st_write(tmp_path("no/such/dir/x.safetensors"), e, 1, NULL, NULL, 0, NULL, NULL, err,
                        sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "no/such/dir", NULL),
       "safetensors: write into a missing directory fails cleanly");
}

static void test_st_convert(void)
{
    char err[512];
    /* F16 and BF16 bit patterns, little-endian, with the float each must give. */
    static const uint16_t h[] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff,
                                 0x0400, 0x7c00, 0xfc00, 0x3555, 0x8001};
    static const float hv[] = {0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1.ff8p-15f,
                               0x1p-14f, INFINITY, -INFINITY, 0x1.554p-2f, -0x1p-24f};
    static const uint16_t b[] = {0x3f80, 0xc040, 0x0001, 0x7f80, 0xff80, 0x4049, 0x8000, 0x0080};
    static const float bv[] = {1.0f, -3.0f, 0x1p-133f, INFINITY, -INFINITY, 3.140625f, -0.0f,
                               0x1p-126f};
    static const double dv[] = {1.5, -2.25, 1e-300, 3.0e38};
    enum { NH = 12, NB = 8, ND = 4, NNAN = 2 };

    uint8_t data[NH * 2 + NB * 2 + ND * 8 + NNAN * 2 + 4];
    size_t o = 0;
    for (int i = 0; i < NH; i++, o += 2)
        data[o] = (uint8_t)h[i], data[o + 1] = (uint8_t)(h[i] >> 8);
    for (int i = 0; i < NB; i++, o += 2)
        data[o] = (uint8_t)b[i], data[o + 1] = (uint8_t)(b[i] >> 8);
    memcpy(data + o, dv, sizeof(dv)); /* little-endian host */
    o += sizeof(dv);
    data[o++] = 0x00, data[o++] = 0x7e; /* F16 quiet nan */
    data[o++] = 0xc0, data[o++] = 0x7f; /* BF16 quiet nan */
    data[o++] = 1, data[o++] = 0, data[o++] = 0, data[o++] = 0;

    /* The header length (odd on purpose) leaves the data misaligned. */
    char hdr[1024];
    snprintf(hdr, sizeof(hdr),
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%d,%d]},"
             "\"d\":{\"dtype\":\"F64\",\"shape\":[%d],\"data_offsets\":[%d,%d]},"
             "\"hn\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[%d,%d]},"
             "\"bn\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[%d,%d]},"
             "\"i\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[%d,%d]} }",
             NH, NH * 2, NB, NH * 2, NH * 2 + NB * 2, ND, NH * 2 + NB * 2,
             NH * 2 + NB * 2 + ND * 8, (int)o - 8, (int)o - 6, (int)o - 6, (int)o - 4,
             (int)o - 4, (int)o);
    const char *path = tmp_path("convert.safetensors");
    merak_st_file *f = NULL;
    int rc = write_st_raw(path, hdr, (uint64_t)-1, data, o) == 0 &&
                     merak_st_open(path, &f, err, sizeof(err)) == 0
                 ? 0
                 : -1;
    tap_ok(rc == 0, "convert: open a file with F16/BF16/F64/I32 tensors%s%s", rc ? ": " : "",
       rc ? err : "");
    if (rc != 0)
        return;

    float out[NH];
    int good = merak_st_to_f32(merak_st_find(f, "h"), out, err, sizeof(err)) == 0;
    for (int i = 0; good && i < NH; i++)
        if (!same_bits(out[i], hv[i])) {
            diag("f16 0x%04x -> %a, expected %a", h[i], (double)out[i], (double)hv[i]);
            good = 0;
        }
    tap_ok(good, "convert: f16 zeros, normals, max, subnormals, infinities");

    good = merak_st_to_f32(merak_st_find(f, "b"), out, err, sizeof(err)) == 0;
    for (int i = 0; good && i < NB; i++)
        if (!same_bits(out[i], bv[i])) {
            diag("bf16 0x%04x -> %a, expected %a", b[i], (double)out[i], (double)bv[i]);
            good = 0;
        }
    tap_ok(good, "convert: bf16 normals, subnormal, infinities, signed zero");

    good = merak_st_to_f32(merak_st_find(f, "d"), out, err, sizeof(err)) == 0;
    for (int i = 0; good && i < ND; i++)
        good = same_bits(out[i], (float)dv[i]);
    tap_ok(good, "convert: f64");

    float n1 = 0, n2 = 0;
    good = merak_st_to_f32(merak_st_find(f, "hn"), &n1, err, sizeof(err)) == 0 &&
           merak_st_to_f32(merak_st_find(f, "bn"), &n2, err, sizeof(err)) == 0;
    tap_ok(good && isnan(n1) && isnan(n2), "convert: f16 and bf16 nan stay nan");

    rc = merak_st_to_f32(merak_st_find(f, "i"), out, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, NULL, "I32"), "convert: I32 is refused");
    merak_st_close(f);
}

/* One refusal: writes HDR (+ DLEN zero bytes of data) and expects open to fail
 * with a message naming the file and containing WORD. */
static void st_refuse(const char *what, const char *hdr, uint64_t hlen, size_t dlen,
                      const char *word)
{
    char err[512] = "";
    uint8_t zeros[64] = {0};
    const char *path = tmp_path("bad.safetensors");
    merak_st_file *f = NULL;
    int rc = write_st_raw(path, hdr, hlen, zeros, dlen < sizeof(zeros) ? dlen : sizeof(zeros));
    rc = rc == 0 ? merak_st_open(path, &f, err, sizeof(err)) : 0;
    tap_ok(rc != 0 && f == NULL && err_mentions(err, path, word), "safetensors refuses %s", what);
    merak_st_close(f);
}

static void test_st_refusals(void)
{
    char err[512];
    merak_st_file *f = NULL;
    const char *path = tmp_path("short.safetensors");
    write_bytes(path, "\x10\x00\x00", 3);
    int rc = merak_st_open(path, &f, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, path, "truncated"), "safetensors refuses a 3-byte file");
    rc = merak_st_open(tmp_path("missing.safetensors"), &f, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "missing.safetensors", "cannot open"),
       "safetensors refuses a missing file");

    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    st_refuse("a truncated data area", good, (uint64_t)-1, 12, "past the data area");
    st_refuse("a header length larger than the file", good, 1000, 16, "larger than the file");
    st_refuse("a huge header length", good, (uint64_t)1 << 62, 16, "larger than the file");
    st_refuse("invalid JSON", "{\"a\":{\"dtype\":\"F32\",", (uint64_t)-1, 16, "not valid JSON");
    st_refuse("a JSON array header", "[1, 2, 3]", (uint64_t)-1, 16, "not a JSON object");
    st_refuse("an unknown dtype",
              "{\"a\":{\"dtype\":\"F8\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
              (uint64_t)-1, 16, "unknown dtype");
    st_refuse("a missing dtype", "{\"a\":{\"shape\":[2,2],\"data_offsets\":[0,16]}}",
              (uint64_t)-1, 16, "dtype");
    st_refuse("offsets out of range",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}",
              (uint64_t)-1, 16, "past the data area");
    st_refuse("offsets that end before they begin",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", (uint64_t)-1,
              16, "end before");
    st_refuse("negative offsets",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", (uint64_t)-1,
              16, "data_offsets");
    st_refuse("a size that does not match the shape",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
              (uint64_t)-1, 16, "needs 16");
    st_refuse("a negative dimension",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,2],\"data_offsets\":[0,16]}}",
              (uint64_t)-1, 16, "shape[0]");
    st_refuse("a shape whose size overflows",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
              "\"data_offsets\":[0,16]}}",
              (uint64_t)-1, 16, "overflows");
    st_refuse("too many dimensions",
              "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
              (uint64_t)-1, 16, "dimensions");
    st_refuse("overlapping tensors",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
              (uint64_t)-1, 16, "overlap");
    st_refuse("two tensors on the same bytes",
              "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              (uint64_t)-1, 16, "overlap");
    st_refuse("a hole between tensors",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
              (uint64_t)-1, 12, "belong to no tensor (a hole before 'b')");
    st_refuse("bytes after the last tensor",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
              (uint64_t)-1, 12, "4 bytes after the last tensor's data belong to no tensor");
    st_refuse("duplicate tensor names",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              (uint64_t)-1, 16, "duplicate");
    st_refuse("non-string metadata", "{\"__metadata__\":{\"step\":42}}", (uint64_t)-1, 0,
              "metadata");
}

/* After a successful open of the bytes BUF, checks every tensor against an
 * independent reading of the header: its bytes must be the file's bytes at
 * its data offsets, which must lie inside the file. */
static int st_accepted_ok(merak_st_file *f, const uint8_t *buf, size_t len)
{
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, 0, NULL);
    int good = root != NULL;
    for (int i = 0; good && i < merak_st_count(f); i++) {
        const merak_st_info *t = merak_st_at(f, i);
        json_t *offs = json_object_get(json_object_get(root, t->name), "data_offsets");
        json_int_t b = json_integer_value(json_array_get(offs, 0));
        json_int_t e = json_integer_value(json_array_get(offs, 1));
        good = b >= 0 && e >= b && (uint64_t)e <= len - 8 - hlen &&
               (size_t)(e - b) == t->nbytes &&
               (t->nbytes == 0 || memcmp(t->data, buf + 8 + hlen + b, t->nbytes) == 0);
        if (good && (t->dtype == MERAK_ST_F32 || t->dtype == MERAK_ST_F16 ||
                     t->dtype == MERAK_ST_BF16 || t->dtype == MERAK_ST_F64)) {
            size_t esize = t->dtype == MERAK_ST_F32 ? 4 : t->dtype == MERAK_ST_F64 ? 8 : 2;
            float *tmp = malloc(t->nbytes / esize * sizeof(float) + 1);
            good = tmp && merak_st_to_f32(t, tmp, NULL, 0) == 0;
            free(tmp);
        }
    }
    json_decref(root);
    return good;
}

static void test_st_fuzz(void)
{
    char err[512];
    float w[6] = {1, 2, 3, 4, 5, 6}, v[2] = {-1, 1};
    merak_st_entry e[3] = {
        {.name = "w", .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "v", .ndim = 1, .shape = {2}, .data = v},
        {.name = "s", .ndim = 0, .data = v},
    };
    const char *k[] = {"note"}, *vals[] = {"fuzz seed"};
    const char *src = tmp_path("fuzz_src.safetensors"), *path = tmp_path("fuzz.safetensors");
    size_t len = 0;
    uint8_t *orig = NULL;
    if (merak_st_write(src, e, 3, k, vals, 1, NULL, NULL, err, sizeof(err)) != 0 ||
        !(orig = read_bytes(src, &len))) {
        tap_ok(0, "safetensors fuzz: set up (%s)", err);
        return;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | orig[i];

    static const char pieces[] = "{}[],:\"0123456789-eE. F32F16BF16I64U8BOOL";
    uint8_t *buf = malloc(len + 64);
    int accepted = 0, refused = 0, bad = 0;
    rng_state = 0x5eed0001ull;
    for (int iter = 0; iter < 4000 && buf; iter++) {
        memcpy(buf, orig, len);
        size_t n = len;
        int edits = 1 + (int)rng_below(3);
        for (int j = 0; j < edits; j++) {
            switch (rng_below(6)) {
            case 0: /* flip a bit anywhere */
                buf[rng_below(n)] ^= (uint8_t)(1u << rng_below(8));
                break;
            case 1: /* truncate */
                n = rng_below(n + 1);
                break;
            case 2: { /* a new header length, near the real one or random */
                uint64_t hl = rng_below(2) ? hlen + rng_below(17) - 8 : rng();
                for (int i = 0; i < 8 && n >= 8; i++)
                    buf[i] = (uint8_t)(hl >> (8 * i));
                break;
            }
            case 3: /* replace a header byte with JSON-ish text */
                if (n > 8 && hlen > 0)
                    buf[8 + rng_below(hlen < n - 8 ? hlen : n - 8)] =
                        (uint8_t)pieces[rng_below(sizeof(pieces) - 1)];
                break;
            case 4: /* change a digit in the header (offsets and shapes) */
                for (int tries = 0; tries < 32 && n > 8; tries++) {
                    size_t p = 8 + rng_below(hlen < n - 8 ? hlen : n - 8);
                    if (buf[p] >= '0' && buf[p] <= '9') {
                        buf[p] = (uint8_t)('0' + rng_below(10));
                        break;
                    }
                }
                break;
            case 5: /* append garbage */
                if (n < len + 32) {
                    size_t m = 1 + rng_below(32);
                    for (size_t i = 0; i < m; i++)
                        buf[n + i] = (uint8_t)rng();
                    n += m;
                }
                break;
            }
        }
        if (write_bytes(path, buf, n) != 0) {
            bad++;
            break;
        }
        merak_st_file *f = NULL;
        err[0] = '\0';
        if (merak_st_open(path, &f, err, sizeof(err)) == 0) {
            accepted++;
            if (!st_accepted_ok(f, buf, n)) {
                diag("iteration %d: accepted a tensor outside the file", iter);
                bad++;
            }
            merak_st_close(f);
        } else {
            refused++;
            if (f != NULL || !strstr(err, path)) {
                diag("iteration %d: unclean refusal: %s", iter, err);
                bad++;
            }
        }
    }
    free(buf);
    free(orig);
    diag("safetensors fuzz: %d accepted, %d refused", accepted, refused);
    tap_ok(bad == 0 && accepted > 0 && refused > 0,
       "safetensors fuzz: 4000 mutations accepted soundly or refused cleanly");
}

/* ------------------------------------------------------------------ shards */

/* Window w of one shard's tokens, by the convention in data.h. */
static void ref_window(const uint32_t *tok, uint64_t w, int B, int T, int32_t *in, int32_t *tg)
{
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)tok[w * (uint64_t)(B * T) + (uint64_t)i];
        tg[i] = (int32_t)tok[w * (uint64_t)(B * T) + (uint64_t)i + 1];
    }
}

static int32_t read_i32(const char *path, long off)
{
    size_t len = 0;
    uint8_t *b = read_bytes(path, &len);
    int32_t v = -1;
    if (b && len >= (size_t)off + 4)
        v = (int32_t)((uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 |
                      (uint32_t)b[off + 3] << 24);
    free(b);
    return v;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void test_shards(void)
{
    char err[512];
    /* Two shards; the second needs version 2 (a token above 65535). */
    uint32_t t0[13], t1[10];
    for (int i = 0; i < 13; i++)
        t0[i] = 100u + (uint32_t)i * 7u;
    for (int i = 0; i < 10; i++)
        t1[i] = 1000u + (uint32_t)i;
    t1[4] = 70000;
    if (mkdir(tmp_path("shards"), 0700) != 0)
        diag("mkdir failed");
    const char *p0 = tmp_path("shards/train_000.bin"), *p1 = tmp_path("shards/train_001.bin");
    /* Written out of order: opening must sort. */
    int rc = merak_shard_write(p1, t1, 10, err, sizeof(err));
    rc = rc ? rc : merak_shard_write(p0, t0, 13, err, sizeof(err));
    tap_ok(rc == 0, "shards: write two shards%s%s", rc ? ": " : "", rc ? err : "");
    tap_ok(read_i32(p0, 0) == MERAK_SHARD_MAGIC && read_i32(p0, 4) == 1 && read_i32(p0, 8) == 13 &&
           file_size(p0) == 1024 + 13 * 2,
       "shards: small tokens are written as version 1");
    tap_ok(read_i32(p1, 4) == 2 && read_i32(p1, 8) == 10 && file_size(p1) == 1024 + 10 * 4,
       "shards: a token >= 65536 makes version 2");
    tap_ok(no_temporaries(tmp_path("shards")), "shards: no temporary file left behind");

    merak_data *d = NULL;
    rc = merak_data_open(tmp_path("shards/train_*.bin"), 100000, &d, err, sizeof(err));
    tap_ok(rc == 0, "shards: open a two-shard glob%s%s", rc ? ": " : "", rc ? err : "");
    if (rc != 0)
        return;
    tap_ok(merak_data_num_shards(d) == 2 && strcmp(merak_data_shard_path(d, 0), p0) == 0 &&
           strcmp(merak_data_shard_path(d, 1), p1) == 0 && merak_data_shard_path(d, 2) == NULL,
       "shards: matched in sorted order");
    tap_ok(merak_data_num_tokens(d) == 23, "shards: 23 tokens in all");
    /* B=2, T=3: shard 0 has (13-1)/6 = 2 windows, shard 1 (10-1)/6 = 1. */
    tap_ok(merak_data_num_windows(d, 2, 3) == 3, "shards: 3 windows for B=2 T=3");
    tap_ok(merak_data_num_windows(d, 1, 12) == 1, "shards: 1 window for B=1 T=12");
    tap_ok(merak_data_num_windows(d, 1, 13) == 0, "shards: no window for B*T=13");

    int32_t in[6], tg[6], rin[6], rtg[6];
    const uint32_t *src[3] = {t0, t0, t1};
    const uint64_t local[3] = {0, 1, 0};
    int good = 1;
    for (uint64_t w = 0; w < 9; w++) { /* three times around */
        rc = merak_data_window(d, w, 2, 3, in, tg, err, sizeof(err));
        ref_window(src[w % 3], local[w % 3], 2, 3, rin, rtg);
        good &= rc == 0 && memcmp(in, rin, sizeof(in)) == 0 && memcmp(tg, rtg, sizeof(tg)) == 0;
    }
    tap_ok(good, "shards: windows 0..8 follow the global numbering, mod 3");
    rc = merak_data_window(d, 2, 2, 3, in, tg, err, sizeof(err));
    tap_ok(rc == 0 && in[0] == 1000 && in[4] == 70000 && tg[3] == 70000 && tg[5] == 1006 &&
           in[3] == 1003,
       "shards: window 2 is the second shard's first (rows split at T)");
    rc = merak_data_window(d, UINT64_MAX, 2, 3, in, tg, err, sizeof(err));
    ref_window(src[UINT64_MAX % 3], local[UINT64_MAX % 3], 2, 3, rin, rtg);
    tap_ok(rc == 0 && memcmp(in, rin, sizeof(in)) == 0, "shards: window UINT64_MAX wraps");
    rc = merak_data_window(d, 0, 1, 13, in, tg, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "train_*.bin", "14"),
       "shards: a window larger than every shard is refused");
    merak_data_close(d);

    /* Too few tokens: no window at all. */
    uint32_t few[5] = {1, 2, 3, 4, 5};
    const char *pf = tmp_path("few.bin");
    rc = merak_shard_write(pf, few, 5, err, sizeof(err));
    rc = rc ? rc : merak_data_open(pf, 256, &d, err, sizeof(err));
    tap_ok(rc == 0 && merak_data_num_windows(d, 2, 3) == 0, "shards: 5 tokens hold no B=2 T=3 window");
    rc = rc ? rc : merak_data_window(d, 0, 2, 3, in, tg, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "few.bin", "B*T+1"), "shards: window fails with no windows");
    merak_data_close(d);

    /* An empty shard is valid but has no windows. */
    const char *pe = tmp_path("empty.bin");
    rc = merak_shard_write(pe, NULL, 0, err, sizeof(err));
    rc = rc ? rc : merak_data_open(pe, 256, &d, err, sizeof(err));
    tap_ok(rc == 0 && merak_data_num_tokens(d) == 0 && merak_data_num_windows(d, 1, 1) == 0,
       "shards: an empty shard opens with no windows");
    merak_data_close(d);
}

/* Patches the 4-byte little-endian value at OFF of PATH, or truncates/extends
 * the file to NEWLEN when OFF < 0. */
static int patch_file(const char *path, long off, uint32_t val, long newlen)
{
    size_t len = 0;
    uint8_t *b = read_bytes(path, &len);
    if (!b)
        return -1;
    int rc;
    if (off >= 0) {
        for (int i = 0; i < 4; i++)
            b[off + i] = (uint8_t)(val >> (8 * i));
        rc = write_bytes(path, b, len);
    } else {
        uint8_t *nb = calloc((size_t)newlen + 1, 1);
        if (nb)
            memcpy(nb, b, (size_t)newlen < len ? (size_t)newlen : len);
        rc = nb ? write_bytes(path, nb, (size_t)newlen) : -1;
        free(nb);
    }
    free(b);
    return rc;
}

static void shard_refuse(const char *what, long off, uint32_t val, long newlen,
                         const char *word1, const char *word2)
{
    char err[512] = "";
    uint32_t tok[20];
    for (int i = 0; i < 20; i++)
        tok[i] = (uint32_t)i;
    const char *path = tmp_path("bad.bin");
    merak_data *d = NULL;
    int rc = merak_shard_write(path, tok, 20, err, sizeof(err));
    rc = rc ? 0 : patch_file(path, off, val, newlen) ? 0 : merak_data_open(path, 256, &d, err,
                                                                           sizeof(err));
    tap_ok(rc != 0 && d == NULL && err_mentions(err, path, word1) && err_mentions(err, path, word2),
       "shards refuse %s", what);
    merak_data_close(d);
}

/* A shard that changes under a run is an error naming it when a window
 * of it is read, never a SIGBUS or ids past the vocabulary: rewritten in
 * place with a token past the vocabulary, then truncated (windows before
 * the cut still read).  A shard replaced by a new file (merak-shard
 * renames one into place) reads as it was when it was opened. */
static void test_shard_changes(void)
{
    char err[512] = "";
    uint32_t tok[40], other[40];
    for (int i = 0; i < 40; i++)
        tok[i] = (uint32_t)i, other[i] = 200;
    const char *path = tmp_path("live.bin");
    merak_data *d = NULL;
    int32_t in[8], tg[8];
    int rc = merak_shard_write(path, tok, 40, err, sizeof(err));
    rc = rc ? rc : merak_data_open(path, 256, &d, err, sizeof(err));
    rc = rc ? rc : merak_data_window(d, 3, 1, 8, in, tg, err, sizeof(err));
    tap_ok(rc == 0 && in[0] == 24 && tg[7] == 32, "a live shard: window 3 reads tokens 24-32%s%s", rc ? ": " : "",
           rc ? err : "");
    if (rc != 0) {
        merak_data_close(d);
        return;
    }
    /* tokens 30 and 31 become 300 and 0: 300 is past the vocabulary */
    rc = patch_file(path, 1024 + 30 * 2, 300, -1) ? -2 : merak_data_window(d, 3, 1, 8, in, tg, err, sizeof(err));
    tap_ok(rc == -1 && err_mentions(err, path, "changed while training") && strstr(err, "300"),
           "a shard rewritten in place under a run: %s", err);
    rc = patch_file(path, -1, 0, 1024 + 20 * 2) ? -2 : merak_data_window(d, 3, 1, 8, in, tg, err, sizeof(err));
    tap_ok(rc == -1 && err_mentions(err, path, "1064 bytes now"), "a shard truncated under a run: %s", err);
    rc = merak_data_window(d, 1, 1, 8, in, tg, err, sizeof(err));
    tap_ok(rc == 0 && in[0] == 8 && tg[7] == 16, "a truncated shard's windows before the cut still read%s%s",
           rc ? ": " : "", rc ? err : "");
    merak_data_close(d);
    d = NULL;
    rc = merak_shard_write(path, tok, 40, err, sizeof(err));
    rc = rc ? rc : merak_data_open(path, 256, &d, err, sizeof(err));
    rc = rc ? rc : merak_shard_write(path, other, 40, err, sizeof(err));
    rc = rc ? rc : merak_data_window(d, 3, 1, 8, in, tg, err, sizeof(err));
    tap_ok(rc == 0 && in[0] == 24, "a shard replaced by a new file: the run reads the one it opened%s%s",
           rc ? ": " : "", rc ? err : "");
    merak_data_close(d);
}

static void test_shard_refusals(void)
{
    char err[512];
    merak_data *d = NULL;
    shard_refuse("a bad magic", 0, 12345, 0, "bad magic 12345", "20240520");
    shard_refuse("a bad version", 4, 3, 0, "version 3", "version");
    shard_refuse("a truncated file", -1, 0, 1024 + 39, "truncated", "1063 bytes");
    shard_refuse("an oversized file", -1, 0, 1024 + 42, "oversized", "1064");
    shard_refuse("a count larger than the file", 8, 21, 0, "truncated", "1066");
    shard_refuse("a negative count", 8, 0xffffffffu, 0, "negative", "-1");
    shard_refuse("a file shorter than the header", -1, 0, 100, "truncated", "100 bytes");

    uint32_t tok[8] = {1, 2, 3, 4, 5, 300, 7, 8};
    const char *path = tmp_path("vocab.bin");
    int rc = merak_shard_write(path, tok, 8, err, sizeof(err));
    rc = rc ? 0 : merak_data_open(path, 256, &d, err, sizeof(err));
    tap_ok(rc != 0 && d == NULL && err_mentions(err, path, "token 5 is 300") &&
           err_mentions(err, path, "256"),
       "shards refuse a token >= vocab size, naming position and value");
    rc = merak_data_open(tmp_path("nothing_*.bin"), 256, &d, err, sizeof(err));
    tap_ok(rc != 0 && d == NULL && err_mentions(err, "nothing_*.bin", "no file matches"),
       "shards: no matching file is an error");
    rc = merak_data_open(path, 0, &d, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, path, "vocab"), "shards: vocab size 0 is refused");
    /* A directory that matches the pattern is not a shard. */
    rc = merak_data_open(tmp_path("shards"), 256, &d, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "shards", "regular file"), "shards refuse a directory");
    rc = merak_shard_write(tmp_path("no/such/dir/x.bin"), tok, 8, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "no/such/dir", NULL),
       "shards: writing into a missing directory fails cleanly");
}

static void test_shard_fuzz(void)
{
    char err[512];
    uint32_t tok[50];
    for (int i = 0; i < 50; i++)
        tok[i] = (uint32_t)(i * 37 % 200);
    const char *src = tmp_path("fuzz_src.bin"), *path = tmp_path("fuzz.bin");
    size_t len = 0;
    uint8_t *orig = NULL;
    if (merak_shard_write(src, tok, 50, err, sizeof(err)) != 0 ||
        !(orig = read_bytes(src, &len))) {
        tap_ok(0, "shard fuzz: set up (%s)", err);
        return;
    }
    uint8_t *buf = malloc(len + 256);
    int accepted = 0, refused = 0, bad = 0;
    rng_state = 0x5eed0002ull;
    for (int iter = 0; iter < 3000 && buf; iter++) {
        memcpy(buf, orig, len);
        size_t n = len;
        int edits = 1 + (int)rng_below(2);
        for (int j = 0; j < edits; j++) {
            switch (rng_below(5)) {
            case 0: /* flip a bit in the first header words */
                buf[rng_below(12 < n ? 12 : n)] ^= (uint8_t)(1u << rng_below(8));
                break;
            case 1: /* flip a bit in a token */
                if (n > 1024)
                    buf[1024 + rng_below(n - 1024)] ^= (uint8_t)(1u << rng_below(8));
                break;
            case 2: /* truncate */
                n = rng_below(n + 1);
                break;
            case 3: { /* a new count, version or magic, near or random */
                size_t off = 4 * rng_below(3);
                uint32_t v = rng_below(2) ? (uint32_t)(rng_below(120)) : (uint32_t)rng();
                if (off + 4 <= n)
                    for (int i = 0; i < 4; i++)
                        buf[off + i] = (uint8_t)(v >> (8 * i));
                break;
            }
            case 4: /* append */
                if (n < len + 200) {
                    size_t m = 1 + rng_below(50);
                    memset(buf + n, (int)rng_below(256), m);
                    n += m;
                }
                break;
            }
        }
        if (write_bytes(path, buf, n) != 0) {
            bad++;
            break;
        }
        merak_data *d = NULL;
        err[0] = '\0';
        if (merak_data_open(path, 256, &d, err, sizeof(err)) == 0) {
            accepted++;
            /* Accepted: the size must match the header, and every window's
             * tokens must equal the file's and be in the vocabulary. */
            int version = buf[4], tb = version == 1 ? 2 : 4;
            uint64_t nt = merak_data_num_tokens(d);
            int good = n == 1024 + nt * (uint64_t)tb;
            uint64_t nw = merak_data_num_windows(d, 1, 4);
            int32_t in[4], tg[4];
            for (uint64_t w = 0; good && w < nw; w++) {
                good = merak_data_window(d, w, 1, 4, in, tg, err, sizeof(err)) == 0;
                for (int i = 0; good && i < 4; i++) {
                    size_t p = 1024 + (size_t)(w * 4 + (uint64_t)i) * (size_t)tb;
                    uint32_t want = buf[p] | (uint32_t)buf[p + 1] << 8;
                    if (tb == 4)
                        want |= (uint32_t)buf[p + 2] << 16 | (uint32_t)buf[p + 3] << 24;
                    good = in[i] == (int32_t)want && in[i] >= 0 && in[i] < 256 && tg[i] >= 0 &&
                           tg[i] < 256;
                }
            }
            if (!good) {
                diag("iteration %d: accepted shard reads wrong", iter);
                bad++;
            }
            merak_data_close(d);
        } else {
            refused++;
            if (d != NULL || !strstr(err, path)) {
                diag("iteration %d: unclean refusal: %s", iter, err);
                bad++;
            }
        }
    }
    free(buf);
    free(orig);
    diag("shard fuzz: %d accepted, %d refused", accepted, refused);
    tap_ok(bad == 0 && accepted > 0 && refused > 0,
       "shard fuzz: 3000 mutations accepted soundly or refused cleanly");
}

/* ------------------------------------------------------------------ configs */

static const char *fixture(const char *name)
{
    static char buf[4][4200];
    static int next;
    const char *src = getenv("MERAK_SRCDIR");
    char *p = buf[next++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/tests/fixtures/%s", src && *src ? src : ".", name);
    return p;
}

static int close_to(double a, double b)
{
    double d = a - b, m = b < 0 ? -b : b;
    return (d < 0 ? -d : d) <= 1e-6 * m + 1e-12;
}

static void test_presets(void)
{
    char err[512];
    const char *const *names = merak_model_preset_names();
    int n = 0, resolved = 0, checked = 0, named = 0;
    for (; names[n]; n++) {
        merak_model_config c;
        memset(&c, 0, sizeof(c));
        if (merak_model_config_resolve(names[n], &c, err, sizeof(err)) == 0) {
            resolved++;
            named += strcmp(c.name, names[n]) == 0;
            if (merak_model_config_check(&c, err, sizeof(err)) == 0)
                checked++;
            else
                diag("%s", err);
        }
    }
    tap_ok(n == 21 && resolved == n, "presets: all %d resolve", n);
    tap_ok(checked == n, "presets: all pass merak_model_config_check");
    tap_ok(named == n, "presets: name is the preset name");

    merak_model_config c;
    int good = merak_model_preset("tiny-gpt2", &c) == 0 && c.arch == MERAK_ARCH_GPT2 &&
               c.vocab_size == 256 && c.max_positions == 256 && c.hidden == 64 &&
               c.n_layer == 2 && c.n_head == 4 && c.n_kv_head == 4 && c.ffn_hidden == 256 &&
               c.tie_embeddings == 1 && c.dropout == 0.0f && close_to(c.norm_eps, 1e-5) &&
               close_to(c.init_std, 0.02);
    tap_ok(good, "presets: tiny-gpt2 numbers");
    good = merak_model_preset("tiny-llama", &c) == 0 && c.arch == MERAK_ARCH_LLAMA &&
           c.hidden == 64 && c.n_head == 8 && c.n_kv_head == 4 && c.ffn_hidden == 176 &&
           c.tie_embeddings == 0 && c.rope_theta == 10000.0f;
    tap_ok(good, "presets: tiny-llama numbers");
    good = merak_model_preset("llama3-8b", &c) == 0 && c.vocab_size == 128256 &&
           c.max_positions == 8192 && c.n_kv_head == 8 && c.ffn_hidden == 14336 &&
           c.rope_theta == 500000.0f;
    good &= merak_model_preset("gpt2-xl", &c) == 0 && c.hidden == 1600 && c.n_head == 25 &&
            c.n_layer == 48 && c.ffn_hidden == 6400;
    good &= merak_model_preset("llama2-70b", &c) == 0 && c.hidden == 8192 && c.n_kv_head == 8;
    tap_ok(good, "presets: llama3-8b, gpt2-xl, llama2-70b numbers");
    good = merak_model_preset("llama3.1-8b", &c) == 0 && c.max_positions == 131072 && c.rope_theta == 500000.0f &&
           c.rope_type == MERAK_ROPE_LLAMA3 && c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f &&
           c.rope_high_freq_factor == 4.0f && c.rope_original_positions == 8192 && c.qkv_bias == 0;
    good &= merak_model_preset("qwen2-7b", &c) == 0 && c.vocab_size == 152064 && c.hidden == 3584 &&
            c.n_head == 28 && c.n_kv_head == 4 && c.ffn_hidden == 18944 && c.qkv_bias == 1 &&
            close_to(c.norm_eps, 1e-6) && c.rope_type == MERAK_ROPE_DEFAULT && c.tie_embeddings == 0;
    tap_ok(good, "presets: llama3.1-8b (rope_scaling llama3) and qwen2-7b (q, k, v biases) numbers");

    tap_ok(merak_model_preset("gpt5", &c) != 0, "presets: unknown name returns -1");
    int rc = merak_model_config_resolve("gpt5", &c, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "'gpt5'", "tiny-gpt2") && err_mentions(err, NULL, "llama3-8b"),
       "resolve: unknown preset lists the presets");
    rc = merak_model_config_resolve("nowhere/config.json", &c, err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, "nowhere/config.json", "cannot open"),
       "resolve: a path is loaded as a file");

    /* The checks name the field and the fix. */
    struct {
        const char *what, *word;
        const char *preset;
        int field, value;
        float fvalue;
    } bad[] = {
        {"hidden not divisible by n_head", "multiple of n_head", "tiny-gpt2", 0, 66, 0},
        {"n_kv_head not dividing n_head", "n_kv_head", "tiny-llama", 1, 3, 0},
        {"odd LLaMA head_dim", "RoPE", "tiny-llama", 0, 40, 0},
        {"zero layers", "n_layer", "tiny-gpt2", 2, 0, 0},
        {"dropout of 1", "dropout", "tiny-gpt2", 3, 0, 1.0f},
        {"zero norm_eps", "norm_eps", "tiny-llama", 4, 0, 0.0f},
        {"GQA in GPT-2", "n_kv_head", "tiny-gpt2", 1, 2, 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        merak_model_preset(bad[i].preset, &c);
        switch (bad[i].field) {
        case 0: c.hidden = bad[i].value; break;
        case 1: c.n_kv_head = bad[i].value; break;
        case 2: c.n_layer = bad[i].value; break;
        case 3: c.dropout = bad[i].fvalue; break;
        case 4: c.norm_eps = bad[i].fvalue; break;
        }
        rc = merak_model_config_check(&c, err, sizeof(err));
        tap_ok(rc != 0 && err_mentions(err, bad[i].preset, bad[i].word), "check refuses %s",
           bad[i].what);
    }
}

static void test_config_files(void)
{
    char err[512];
    merak_model_config c;
    const char *p = fixture("config_gpt2.json");
    int rc = merak_model_config_load(p, &c, err, sizeof(err));
    tap_ok(rc == 0, "config: load the GPT-2 config.json%s%s", rc ? ": " : "", rc ? err : "");
    tap_ok(rc == 0 && c.arch == MERAK_ARCH_GPT2 && strcmp(c.name, "gpt2") == 0 &&
           c.vocab_size == 50257 && c.max_positions == 1024 && c.hidden == 768 &&
           c.n_layer == 12 && c.n_head == 12 && c.n_kv_head == 12 && c.ffn_hidden == 3072 &&
           close_to(c.norm_eps, 1e-5) && close_to(c.init_std, 0.02) && c.tie_embeddings == 1 &&
           close_to(c.dropout, 0.1),
       "config: GPT-2 numbers (n_inner null -> 4*n_embd, dropout 0.1)");
    tap_ok(rc == 0 && merak_model_config_check(&c, err, sizeof(err)) == 0,
       "config: GPT-2 passes check");

    p = fixture("config_llama_gqa.json");
    rc = merak_model_config_resolve(p, &c, err, sizeof(err));
    tap_ok(rc == 0, "config: resolve the LLaMA config.json%s%s", rc ? ": " : "", rc ? err : "");
    tap_ok(rc == 0 && c.arch == MERAK_ARCH_LLAMA && strcmp(c.name, "llama") == 0 &&
           c.vocab_size == 32000 && c.max_positions == 2048 && c.hidden == 2048 &&
           c.n_layer == 22 && c.n_head == 32 && c.n_kv_head == 4 && c.ffn_hidden == 5632 &&
           close_to(c.norm_eps, 1e-5) && c.rope_theta == 10000.0f && c.tie_embeddings == 0 &&
           close_to(c.init_std, 0.02) && c.dropout == 0.0f,
       "config: LLaMA numbers (GQA 32/4)");
    tap_ok(rc == 0 && merak_model_config_check(&c, err, sizeof(err)) == 0,
       "config: LLaMA passes check");

    /* The hub's config.json files of LLaMA 3.1 8B and Qwen2 7B are their
     * presets, and come back the same from the config.json merak writes */
    const struct {
        const char *file, *preset;
    } hub[] = {{"config_llama31.json", "llama3.1-8b"}, {"config_qwen2.json", "qwen2-7b"}};
    for (size_t i = 0; i < sizeof hub / sizeof hub[0]; i++) {
        merak_model_config want, back;
        merak_model_preset(hub[i].preset, &want);
        rc = merak_model_config_load(fixture(hub[i].file), &c, err, sizeof(err));
        memcpy(c.name, want.name, sizeof c.name);
        tap_ok(rc == 0 && memcmp(&c, &want, sizeof c) == 0, "config: %s is the %s preset%s%s", hub[i].file,
               hub[i].preset, rc ? ": " : "", rc ? err : "");
        char *text = merak_model_config_json(&want);
        const char *again = tmp_path("again.json");
        FILE *f = text ? fopen(again, "w") : NULL;
        rc = f && fputs(text, f) >= 0 && fclose(f) == 0 ? merak_model_config_load(again, &back, err, sizeof(err)) : -1;
        memcpy(back.name, want.name, sizeof back.name);
        tap_ok(rc == 0 && memcmp(&back, &want, sizeof back) == 0, "config: %s written and read back is itself",
               hub[i].preset);
        free(text);
    }

    struct {
        const char *file, *word, *what;
    } bad[] = {
        {"config_bad_malformed.json", "line 5", "malformed JSON (with line number)"},
        {"config_bad_missing.json", "n_layer", "a missing field"},
        {"config_bad_type.json", "hidden_size", "a field of the wrong type"},
        {"config_bad_model_type.json", "bert", "an unknown model_type"},
        {"config_bad_negative.json", "-12", "a negative value"},
        {"config_bad_rope_scaling.json", "rope_scaling: missing required field 'low_freq_factor'",
         "a llama3 rope_scaling without low_freq_factor"},
        {"no_such_config.json", "cannot open", "a missing file"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = fixture(bad[i].file);
        merak_model_config before, after;
        memset(&before, 0x5a, sizeof(before));
        after = before;
        err[0] = '\0';
        rc = merak_model_config_load(p, &after, err, sizeof(err));
        tap_ok(rc != 0 && err_mentions(err, p, bad[i].word) && strchr(err, '\n') == NULL &&
               memcmp(&before, &after, sizeof(before)) == 0,
           "config refuses %s", bad[i].what);
    }
}

/* ------------------------------------------------------------------ atomic writer */

/* Writes TEXT to PATH through the atomic writer; returns commit's status. */
static int atomic_put(const char *path, const char *text, char *err, size_t errlen)
{
    merak_atomic *a;
    if (merak_atomic_open(path, &a, err, errlen) < 0)
        return -1;
    merak_atomic_write(a, text, strlen(text));
    return merak_atomic_commit(a, err, errlen);
}

static void test_atomic(void)
{
    char err[512] = "";
    const char *dir = tmp_path("atomic");
    if (mkdir(dir, 0700) != 0)
        diag("mkdir %s failed", dir);
    const char *path = tmp_path("atomic/out.txt");

    int rc = atomic_put(path, "first\n", err, sizeof(err));
    tap_ok(rc == 0 && holds(path, "first\n") && listing_is(dir, 1),
           "atomic: commit makes the file, nothing else in its directory%s%s", rc ? ": " : "",
           rc ? err : "");

    /* Streaming through the FILE*, over an existing file. */
    merak_atomic *a = NULL;
    rc = merak_atomic_open(path, &a, err, sizeof(err));
    if (rc == 0) {
        fprintf(merak_atomic_file(a), "second %d\n", 2);
        merak_atomic_write(a, "more\n", 5);
        tap_ok(holds(path, "first\n") && listing_is(dir, 2),
               "atomic: before commit, the target is untouched and the temporary sits beside it");
        rc = merak_atomic_commit(a, err, sizeof(err));
    } else {
        tap_ok(0, "atomic: open over an existing file: %s", err);
    }
    tap_ok(rc == 0 && holds(path, "second 2\nmore\n") && listing_is(dir, 1),
           "atomic: commit replaces an existing file%s%s", rc ? ": " : "", rc ? err : "");

    rc = merak_atomic_open(path, &a, err, sizeof(err));
    if (rc == 0) {
        merak_atomic_write(a, "never\n", 6);
        merak_atomic_abort(a);
    }
    tap_ok(rc == 0 && holds(path, "second 2\nmore\n") && listing_is(dir, 1),
           "atomic: abort keeps the old content and removes the temporary");
    merak_atomic_abort(NULL);

    /* A relative name: the temporary goes to the current directory. */
    char cwd[4096];
    rc = -1;
    if (getcwd(cwd, sizeof(cwd)) && chdir(dir) == 0) {
        rc = atomic_put("rel.txt", "relative\n", err, sizeof(err));
        if (chdir(cwd) != 0)
            diag("cannot go back to %s", cwd);
    }
    tap_ok(rc == 0 && holds(tmp_path("atomic/rel.txt"), "relative\n") && listing_is(dir, 2),
           "atomic: a name without a directory is written in the current one");
    remove(tmp_path("atomic/rel.txt"));

    /* Failures: one line naming the target and the reason; old file kept. */
    const char *missing = tmp_path("atomic/no/such/dir/out.txt");
    err[0] = '\0';
    rc = atomic_put(missing, "x", err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, missing, strerror(ENOENT)) && !strchr(err, '\n') &&
               listing_is(dir, 1),
           "atomic: a missing directory fails, naming the path and the reason");

    /* A write that fails (the file size limit stands in for a full disk). */
    struct rlimit old;
    if (getrlimit(RLIMIT_FSIZE, &old) == 0) {
        struct rlimit small = old;
        small.rlim_cur = 1 << 20;
        static uint8_t chunk[1 << 16];
        memset(chunk, 'y', sizeof(chunk));
        err[0] = '\0';
        fflush(stdout); /* nothing is printed while the limit holds */
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        rc = merak_atomic_open(path, &a, err, sizeof(err));
        if (rc == 0 && setrlimit(RLIMIT_FSIZE, &small) == 0) {
            for (int i = 0; i < 32; i++) /* 2 MiB */
                merak_atomic_write(a, chunk, sizeof(chunk));
            rc = merak_atomic_commit(a, err, sizeof(err));
            setrlimit(RLIMIT_FSIZE, &old);
        } else if (rc == 0) {
            merak_atomic_abort(a);
            rc = 0;
        }
        signal(SIGXFSZ, prev);
        tap_ok(rc != 0 && err_mentions(err, path, strerror(EFBIG)) &&
                   holds(path, "second 2\nmore\n") && listing_is(dir, 1),
               "atomic: a failed write keeps the old file, removes the temporary, names the path");
    } else {
        tap_ok(0, "atomic: getrlimit: %s", strerror(errno));
    }

    /* A rename that fails: the target became a directory after the open. */
    const char *sub = tmp_path("atomic/sub");
    err[0] = '\0';
    merak_atomic *ra = NULL;
    rc = merak_atomic_open(sub, &ra, err, sizeof(err));
    if (mkdir(sub, 0700) != 0)
        diag("mkdir %s failed", sub);
    if (rc == 0) {
        merak_atomic_write(ra, "x", 1);
        rc = merak_atomic_commit(ra, err, sizeof(err));
    }
    struct stat st;
    tap_ok(rc != 0 && err_mentions(err, sub, "rename") && stat(sub, &st) == 0 &&
               S_ISDIR(st.st_mode) && listing_is(dir, 2),
           "atomic: a failed rename leaves the target and no temporary");
    /* ... and a target that is a directory (a FIFO, a device) already is
     * refused at the open */
    err[0] = '\0';
    rc = atomic_put(sub, "x", err, sizeof(err));
    tap_ok(rc != 0 && err_mentions(err, sub, "not a regular file") && stat(sub, &st) == 0 && S_ISDIR(st.st_mode) &&
               listing_is(dir, 2),
           "atomic: a target that is not a regular file is refused at the open: %s", err);

    /* A directory without write permission (root writes anyway). */
    if (geteuid() == 0) {
        tap_ok(1, "atomic: a read-only directory fails cleanly # SKIP running as root");
    } else {
        err[0] = '\0';
        const char *ro = tmp_path("atomic/sub/out.txt");
        rc = chmod(sub, 0500) == 0 ? atomic_put(ro, "x", err, sizeof(err)) : 0;
        tap_ok(rc != 0 && err_mentions(err, ro, strerror(EACCES)) && listing_is(sub, 0),
               "atomic: a read-only directory fails, naming the path and the reason");
        if (chmod(sub, 0700) != 0)
            diag("chmod %s failed", sub);
    }
}

/* ------------------------------------------------------------------ main */

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/merak-test-io-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! cannot create a temporary directory under %s\n",
               base && *base ? base : "/tmp");
        return 1;
    }

    test_atomic();
    test_st_roundtrip();
    test_st_convert();
    test_st_refusals();
    test_st_fuzz();
    test_shards();
    test_shard_refusals();
    test_shard_changes();
    test_shard_fuzz();
    test_presets();
    test_config_files();

    if (nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        diag("could not remove %s", tmpdir);
    return tap_done();
}
