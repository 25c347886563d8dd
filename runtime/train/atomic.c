/*
 * atomic.c - write a file through a temporary and a rename (see atomic.h).
 *
 * The temporary is created with O_EXCL under a random name rather than with
 * mkstemp(3): mkstemp's mode 0600 would become the mode of the committed file,
 * while O_CREAT's 0666 lets the umask decide, as for any plain fopen.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* fsync, O_DIRECTORY, clock_gettime */
#endif

#include "atomic.h"
#include "errf.h"
#include "mix64.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h> /* crc32_z */

struct merak_atomic {
    FILE *fp;   /* on tmp */
    char *path; /* the target */
    char *tmp;  /* DIR/.NAME.XXXXXX */
    char *dir;  /* PATH's directory, synced after the rename */
    int werr;   /* errno of the first failed merak_atomic_write, or 0 */
    int summing;        /* merak_atomic_checksum was called */
    uint32_t crc;       /* CRC-32 of the bytes merak_atomic_write took */
    uint64_t bytes;     /* and how many */
};

static void atomic_free(merak_atomic *a)
{
    free(a->path);
    free(a->tmp);
    free(a->dir);
    free(a);
}

/* splitmix64: spreads a seed over all 64 bits. */
static uint64_t mix64(uint64_t x) { return merak_mix64(x + MERAK_GOLDEN); }

/* Creates a->tmp (whose last 6 characters are replaced) exclusively; returns
 * the descriptor, or -1 with errno set. */
static int create_tmp(merak_atomic *a)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    struct timespec ts = {0, 0};
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
                    (uint64_t)(uintptr_t)a;
    char *x = a->tmp + strlen(a->tmp) - 6;
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t r = mix64(seed + (uint64_t)attempt);
        for (int i = 0; i < 6; i++, r /= 62)
            x[i] = chars[r % 62];
        int fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1; /* errno is EEXIST */
}

int merak_atomic_open(const char *path, merak_atomic **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!path || !*path)
        return merak_errf(err, errlen, "no file name given");
    /* a device, a FIFO or a directory is not replaced by a file */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return merak_errf(err, errlen, "%s: not a regular file, so it cannot be written", path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0; /* "/x": the directory is "/" */
    size_t tlen = strlen(path) + sizeof("..XXXXXX");
    merak_atomic *a = calloc(1, sizeof(*a));
    if (!a || !(a->path = strdup(path)) || !(a->dir = malloc(dlen + 2)) ||
        !(a->tmp = malloc(tlen))) {
        if (a)
            atomic_free(a);
        return merak_errf(err, errlen, "%s: out of memory", path);
    }
    if (slash) {
        memcpy(a->dir, path, dlen ? dlen : 1);
        a->dir[dlen ? dlen : 1] = '\0';
    } else {
        strcpy(a->dir, ".");
    }
    snprintf(a->tmp, tlen, "%.*s.%s.XXXXXX", (int)(base - path), path, base);

    int fd = create_tmp(a);
    if (fd < 0) {
        merak_errf(err, errlen, "%s: cannot create a file in %s: %s", path, a->dir,
                   strerror(errno));
        atomic_free(a);
        return -1;
    }
    if (!(a->fp = fdopen(fd, "wb"))) {
        merak_errf(err, errlen, "%s: cannot open a stream: %s", path, strerror(errno));
        close(fd);
        unlink(a->tmp);
        atomic_free(a);
        return -1;
    }
    *out = a;
    return 0;
}

FILE *merak_atomic_file(merak_atomic *a) { return a->fp; }

int merak_atomic_write(merak_atomic *a, const void *buf, size_t len)
{
    if (a->werr)
        return -1;
    if (len > 0 && fwrite(buf, 1, len, a->fp) != len) {
        a->werr = errno ? errno : EIO;
        return -1;
    }
    if (a->summing) {
        a->crc = (uint32_t)crc32_z(a->crc, buf, len);
        a->bytes += len;
    }
    return 0;
}

void merak_atomic_checksum(merak_atomic *a)
{
    a->summing = 1;
    a->crc = (uint32_t)crc32_z(0, Z_NULL, 0);
    a->bytes = 0;
}

void merak_atomic_sum(const merak_atomic *a, uint32_t *crc, uint64_t *bytes)
{
    *crc = a->crc;
    *bytes = a->bytes;
}

/* Makes the rename durable.  Filesystems that cannot sync a directory say
 * EINVAL; there the rename is as durable as it gets. */
static int sync_dir(const merak_atomic *a, char *err, size_t errlen)
{
    int fd = open(a->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return merak_errf(err, errlen, "%s: cannot open directory %s to sync it: %s", a->path,
                          a->dir, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = merak_errf(err, errlen, "%s: cannot sync directory %s: %s", a->path, a->dir,
                        strerror(errno));
    close(fd);
    return rc;
}

int merak_atomic_commit(merak_atomic *a, char *err, size_t errlen)
{
    if (!a)
        return merak_errf(err, errlen, "commit of a file that was never opened");
    /* fsync before the rename: otherwise a crash can leave the new name
     * pointing at a file whose data never reached the disk. */
    int e = a->werr;
    if (fflush(a->fp) != 0 && !e)
        e = errno;
    if (ferror(a->fp) && !e)
        e = EIO; /* a write through merak_atomic_file() failed; its errno is gone */
    if (!e && fsync(fileno(a->fp)) != 0)
        e = errno;
    if (fclose(a->fp) != 0 && !e)
        e = errno;
    int rc;
    if (e) {
        rc = merak_errf(err, errlen, "%s: write failed: %s", a->path, strerror(e));
        unlink(a->tmp);
    } else if (rename(a->tmp, a->path) != 0) {
        rc = merak_errf(err, errlen, "%s: cannot rename %s over it: %s", a->path, a->tmp,
                        strerror(errno));
        unlink(a->tmp);
    } else {
        rc = sync_dir(a, err, errlen);
    }
    atomic_free(a);
    return rc;
}

void merak_atomic_abort(merak_atomic *a)
{
    if (!a)
        return;
    fclose(a->fp);
    unlink(a->tmp);
    atomic_free(a);
}

int merak_atomic_probe(const char *path, char *err, size_t errlen)
{
    merak_atomic *a;
    if (merak_atomic_open(path, &a, err, errlen) < 0)
        return -1;
    merak_atomic_abort(a);
    return 0;
}
