/*
 * data.c - token shards in llm.c's format and the window convention
 * (see data.h).
 *
 * Shards are validated completely when opened, including a scan of every
 * token against the vocabulary: an out-of-range token would otherwise
 * surface hours later as an out-of-bounds embedding lookup.  They stay
 * open and each window is read with pread, its length and tokens checked
 * again: a shard truncated or rewritten while a run reads it is an error
 * naming it, never a SIGBUS (a mapping's pages past a shrunken end) or
 * ids past the vocabulary fed to the model.
 */
#include "data.h"
#include "atomic.h"
#include "errf.h"
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define HEADER_BYTES (MERAK_SHARD_HEADER_INTS * 4)

typedef struct shard {
    char *path;
    int fd;               /* open for the run; -1 once closed */
    uint64_t n;           /* token count */
    int tok_bytes;        /* 2 (version 1) or 4 (version 2) */
    uint32_t crc;         /* CRC-32 of the whole file as it was opened */
} shard;

struct merak_data {
    char *pattern;
    int nshard;
    shard *shards;
    uint64_t ntokens;
    int vocab_size;
};

static uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Token i of a buffer of tokens of tok_bytes each. */
static uint32_t token_in(const uint8_t *buf, int tok_bytes, uint64_t i)
{
    const uint8_t *p = buf + i * (uint64_t)tok_bytes;
    return tok_bytes == 2 ? (uint32_t)(p[0] | p[1] << 8) : load_u32(p);
}

static int path_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads n bytes of s at offset off into buf: 0; -1 with err when the file
 * ends first (it was truncated after it was opened) or the read fails. */
static int read_at(const shard *s, void *buf, size_t n, uint64_t off, const char *when, char *err,
                   size_t errlen)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(s->fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return merak_errf(err, errlen, "%s: read failed %s: %s", s->path, when, strerror(errno));
        if (r == 0) {
            struct stat st;
            long long now = fstat(s->fd, &st) == 0 ? (long long)st.st_size : -1;
            return merak_errf(err, errlen, "%s: the shard changed %s: it is %lld bytes now, %llu when it was "
                              "opened (rewrite shards beside a run, not under it)", s->path, when, now,
                              (unsigned long long)(HEADER_BYTES + s->n * (uint64_t)s->tok_bytes));
        }
        got += (size_t)r;
    }
    return 0;
}

/* The first token of buf[0..n) (tokens of s) not below vocab_size: its
 * index, or n when all are. */
static uint64_t first_bad(const shard *s, const uint8_t *buf, uint64_t n, int vocab_size)
{
    for (uint64_t i = 0; i < n; i++)
        if (token_in(buf, s->tok_bytes, i) >= (uint32_t)vocab_size)
            return i;
    return n;
}

/* Opens and validates one shard into s (s->path already set). */
static int open_shard(shard *s, int vocab_size, char *err, size_t errlen)
{
    const char *path = s->path;
    s->fd = merak_file_open(path, err, errlen);
    if (s->fd < 0)
        return -1;
    struct stat st;
    if (fstat(s->fd, &st) != 0)
        return merak_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    if (size < HEADER_BYTES)
        return merak_errf(err, errlen, "%s: truncated: %llu bytes, shorter than the %d-byte header", path,
                          (unsigned long long)size, HEADER_BYTES);
    uint8_t h[HEADER_BYTES];
    if (read_at(s, h, sizeof h, 0, "while it was opened", err, errlen) < 0)
        return -1;
    int32_t magic = (int32_t)load_u32(h), version = (int32_t)load_u32(h + 4);
    int32_t count = (int32_t)load_u32(h + 8);
    if (magic != MERAK_SHARD_MAGIC)
        return merak_errf(err, errlen, "%s: bad magic %d (expected %d)", path, magic, MERAK_SHARD_MAGIC);
    if (version != 1 && version != 2)
        return merak_errf(err, errlen, "%s: unsupported version %d (expected 1 or 2)", path, version);
    if (count < 0)
        return merak_errf(err, errlen, "%s: negative token count %d in the header", path, count);
    s->tok_bytes = version == 1 ? 2 : 4;
    s->n = (uint64_t)count;
    uint64_t expect = HEADER_BYTES + s->n * (uint64_t)s->tok_bytes;
    if (size != expect)
        return merak_errf(err, errlen, "%s: %s: %llu bytes, but the header's %llu tokens need %llu", path,
                          size < expect ? "truncated" : "oversized", (unsigned long long)size,
                          (unsigned long long)s->n, (unsigned long long)expect);
    /* every token against the vocabulary, a chunk at a time, and the
     * file's CRC-32 (what a checkpoint records of it) on the way */
    s->crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, sizeof h);
    enum { CHUNK = 1 << 16 };
    uint8_t *buf = malloc((size_t)CHUNK * (size_t)s->tok_bytes);
    if (!buf)
        return merak_errf(err, errlen, "%s: out of memory", path);
    int rc = 0;
    for (uint64_t i = 0; i < s->n && rc == 0; i += CHUNK) {
        uint64_t m = s->n - i < CHUNK ? s->n - i : CHUNK;
        rc = read_at(s, buf, (size_t)m * (size_t)s->tok_bytes, HEADER_BYTES + i * (uint64_t)s->tok_bytes,
                     "while it was opened", err, errlen);
        uint64_t bad = rc == 0 ? first_bad(s, buf, m, vocab_size) : m;
        if (rc == 0)
            s->crc = (uint32_t)crc32(s->crc, buf, (uInt)((size_t)m * (size_t)s->tok_bytes));
        if (bad < m)
            rc = merak_errf(err, errlen, "%s: token %llu is %u, not below the vocab size %d "
                            "(the model's; the shard's tokenizer has a larger vocabulary)", path,
                            (unsigned long long)(i + bad), token_in(buf, s->tok_bytes, bad), vocab_size);
    }
    free(buf);
    return rc;
}

void merak_data_close(merak_data *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->nshard; i++) {
        if (d->shards[i].fd >= 0)
            close(d->shards[i].fd);
        free(d->shards[i].path);
    }
    free(d->shards);
    free(d->pattern);
    free(d);
}

int merak_data_open(const char *pattern, int vocab_size, merak_data **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (vocab_size <= 0) {
        merak_errf(err, errlen, "%s: vocab size %d must be positive", pattern, vocab_size);
        return -1;
    }
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOMATCH) {
        merak_errf(err, errlen, "no file matches '%s'", pattern);
        return -1;
    }
    if (grc != 0) {
        merak_errf(err, errlen, "%s: glob failed (%s)", pattern,
               grc == GLOB_NOSPACE ? "out of memory" : "read error");
        globfree(&g);
        return -1;
    }
    if (g.gl_pathc > (size_t)INT32_MAX) {
        merak_errf(err, errlen, "%s: too many matching files", pattern);
        globfree(&g);
        return -1;
    }
    /* glob sorts with strcoll; strcmp makes the order (and hence the window
     * numbering) independent of the locale. */
    qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), path_cmp);

    merak_data *d = calloc(1, sizeof(*d));
    if (d)
        d->vocab_size = vocab_size;
    if (!d || !(d->pattern = strdup(pattern)) ||
        !(d->shards = calloc(g.gl_pathc, sizeof(*d->shards)))) {
        merak_errf(err, errlen, "%s: out of memory", pattern);
        goto fail;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        shard *s = &d->shards[d->nshard];
        s->fd = -1;
        if (!(s->path = strdup(g.gl_pathv[i]))) {
            merak_errf(err, errlen, "%s: out of memory", g.gl_pathv[i]);
            goto fail;
        }
        d->nshard++;
        if (open_shard(s, vocab_size, err, errlen) != 0)
            goto fail;
        d->ntokens += s->n;
    }
    globfree(&g);
    *out = d;
    return 0;
fail:
    globfree(&g);
    merak_data_close(d);
    return -1;
}

int merak_data_num_shards(const merak_data *d) { return d->nshard; }

const char *merak_data_shard_path(const merak_data *d, int i)
{
    return i >= 0 && i < d->nshard ? d->shards[i].path : NULL;
}

uint64_t merak_data_num_tokens(const merak_data *d) { return d->ntokens; }

uint64_t merak_data_shard_tokens(const merak_data *d, int i)
{
    return i >= 0 && i < d->nshard ? d->shards[i].n : 0;
}

uint32_t merak_data_shard_crc(const merak_data *d, int i)
{
    return i >= 0 && i < d->nshard ? d->shards[i].crc : 0;
}

/* Windows of shard s: each needs B*T tokens plus one for the last target. */
static uint64_t shard_windows(const shard *s, uint64_t bt)
{
    return s->n == 0 ? 0 : (s->n - 1) / bt;
}

uint64_t merak_data_num_windows(const merak_data *d, int B, int T)
{
    if (B <= 0 || T <= 0)
        return 0;
    uint64_t bt = (uint64_t)B * (uint64_t)T, total = 0;
    for (int i = 0; i < d->nshard; i++)
        total += shard_windows(&d->shards[i], bt);
    return total;
}

int merak_data_window(const merak_data *d, uint64_t w, int B, int T, int32_t *inputs,
                      int32_t *targets, char *err, size_t errlen)
{
    if (B <= 0 || T <= 0) {
        merak_errf(err, errlen, "%s: bad window size B=%d T=%d", d->pattern, B, T);
        return -1;
    }
    uint64_t bt = (uint64_t)B * (uint64_t)T;
    uint64_t total = merak_data_num_windows(d, B, T);
    if (total == 0) {
        merak_errf(err, errlen,
               "%s: no shard holds B*T+1 = %llu tokens (%llu tokens in %d shard(s)); "
               "use more data or a smaller B or T",
               d->pattern, (unsigned long long)(bt + 1), (unsigned long long)d->ntokens,
               d->nshard);
        return -1;
    }
    w %= total;
    const shard *s = NULL;
    for (int i = 0; i < d->nshard; i++) {
        uint64_t ws = shard_windows(&d->shards[i], bt);
        if (w < ws) {
            s = &d->shards[i];
            break;
        }
        w -= ws;
    }
    if (!s) { /* unreachable: w < total */
        merak_errf(err, errlen, "%s: window lookup failed", d->pattern);
        return -1;
    }
    /* Read again, and checked again: the shard may have changed since it
     * was opened.  Below the vocabulary (an int), tokens fit in int32_t. */
    const uint64_t base = w * bt, bytes = (bt + 1) * (uint64_t)s->tok_bytes;
    uint8_t *buf = bytes <= SIZE_MAX ? malloc((size_t)bytes) : NULL;
    if (!buf)
        return merak_errf(err, errlen, "%s: out of memory reading a window of %llu tokens", s->path,
                          (unsigned long long)(bt + 1));
    char when[64];
    snprintf(when, sizeof when, "while training (its window %llu)", (unsigned long long)w);
    int rc = read_at(s, buf, (size_t)bytes, HEADER_BYTES + base * (uint64_t)s->tok_bytes, when, err, errlen);
    uint64_t bad = rc == 0 ? first_bad(s, buf, bt + 1, d->vocab_size) : bt + 1;
    if (bad <= bt)
        rc = merak_errf(err, errlen, "%s: the shard changed while training: token %llu is %u now, not below the "
                        "vocab size %d (rewrite shards beside a run, not under it)", s->path,
                        (unsigned long long)(base + bad), token_in(buf, s->tok_bytes, bad), d->vocab_size);
    for (uint64_t i = 0; rc == 0 && i < bt; i++) {
        inputs[i] = (int32_t)token_in(buf, s->tok_bytes, i);
        targets[i] = (int32_t)token_in(buf, s->tok_bytes, i + 1);
    }
    free(buf);
    return rc;
}

static void store_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

int merak_shard_write(const char *path, const uint32_t *tokens, uint64_t n, char *err,
                      size_t errlen)
{
    /* llm.c keeps the count in an int32 header slot. */
    if (n > (uint64_t)INT32_MAX) {
        merak_errf(err, errlen, "%s: %llu tokens do not fit one shard (at most %d)", path,
               (unsigned long long)n, INT32_MAX);
        return -1;
    }
    if (n > 0 && !tokens) {
        merak_errf(err, errlen, "%s: no tokens given", path);
        return -1;
    }
    int version = 1;
    for (uint64_t i = 0; i < n; i++) {
        if (tokens[i] > 0xffffu) {
            version = 2;
            break;
        }
    }
    int tok_bytes = version == 1 ? 2 : 4;

    merak_atomic *a;
    if (merak_atomic_open(path, &a, err, errlen) < 0)
        return -1;
    uint8_t header[HEADER_BYTES] = {0};
    store_u32(header, MERAK_SHARD_MAGIC);
    store_u32(header + 4, (uint32_t)version);
    store_u32(header + 8, (uint32_t)n);
    merak_atomic_write(a, header, sizeof(header));

    /* Encode little-endian through a buffer, a chunk at a time. */
    enum { CHUNK = 4096 };
    uint8_t buf[CHUNK * 4];
    for (uint64_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? (size_t)(n - i) : CHUNK;
        for (size_t j = 0; j < m; j++) {
            uint32_t t = tokens[i + j];
            if (tok_bytes == 2) {
                buf[2 * j] = (uint8_t)t;
                buf[2 * j + 1] = (uint8_t)(t >> 8);
            } else {
                store_u32(buf + 4 * j, t);
            }
        }
        if (merak_atomic_write(a, buf, m * (size_t)tok_bytes) < 0)
            break; /* commit reports it */
    }
    return merak_atomic_commit(a, err, errlen);
}
