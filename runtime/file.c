/*
 * file.c - regular files for reading (file.h).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "errf.h"
#include "file.h"
#include "grow.h"

int merak_file_open(const char *path, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return merak_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return merak_errf(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return merak_errf(err, errlen, "%s: not a regular file", path);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        return merak_errf(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    return fd;
}

FILE *merak_file_fopen(const char *path, char *err, size_t errlen)
{
    int fd = merak_file_open(path, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        merak_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int merak_file_read_all(const char *path, char **data, size_t *n, char *err, size_t errlen)
{
    const int is_stdin = strcmp(path, "-") == 0;
    FILE *fp = is_stdin ? stdin : merak_file_fopen(path, err, errlen);
    if (!fp)
        return -1;
    const char *name = is_stdin ? "standard input" : path;
    char *buf = NULL;
    size_t len = 0, cap = 0, m = 0;
    int rc = 0;
    do {
        if (merak_grow((void **)&buf, &cap, len + 65536 + 1, 1) != 0) {
            rc = merak_errf(err, errlen, "%s: out of memory", name);
            break;
        }
        m = fread(buf + len, 1, 65536, fp);
        len += m;
    } while (m > 0);
    if (rc == 0 && ferror(fp))
        rc = merak_errf(err, errlen, "%s: read error: %s", name, strerror(errno));
    if (!is_stdin && fclose(fp) != 0 && rc == 0)
        rc = merak_errf(err, errlen, "%s: close: %s", name, strerror(errno));
    if (rc < 0) {
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    *data = buf;
    *n = len;
    return 0;
}

int merak_file_crc32(const char *path, uint32_t *crc, uint64_t *bytes, char *err, size_t errlen)
{
    int fd = merak_file_open(path, err, errlen);
    if (fd < 0)
        return -1;
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    uLong c = crc32(0L, Z_NULL, 0);
    uint64_t total = 0;
    ssize_t got = 0;
    while (buf && (got = read(fd, buf, CHUNK)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        c = crc32(c, buf, (uInt)got);
        total += (uint64_t)got;
    }
    int e = errno;
    free(buf);
    close(fd);
    if (!buf)
        return merak_errf(err, errlen, "%s: out of memory reading it", path);
    if (got < 0)
        return merak_errf(err, errlen, "%s: cannot read: %s", path, strerror(e));
    *crc = (uint32_t)c;
    *bytes = total;
    return 0;
}

int merak_file_same(const char *out, const char *in)
{
    struct stat x, y;
    return out && in && stat(out, &x) == 0 && stat(in, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int merak_file_not_input(const char *flag, const char *out, const char *what, const char *in, char *err,
                         size_t errlen)
{
    if (!merak_file_same(out, in))
        return 0;
    if (strcmp(out, in) == 0)
        return merak_errf(err, errlen, "%s %s is %s, which it reads: it would be overwritten", flag, out, what);
    return merak_errf(err, errlen, "%s %s is %s (%s), which it reads: it would be overwritten", flag, out, what,
                      in);
}

int merak_file_not_in_dir(const char *flag, const char *out, const char *what, const char *dir, char *err,
                          size_t errlen)
{
    DIR *d = dir ? opendir(dir) : NULL;
    int rc = 0;
    for (struct dirent *e; rc == 0 && d && (e = readdir(d));) {
        char path[PATH_MAX];
        if (e->d_name[0] != '.' && snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path)
            rc = merak_file_not_input(flag, out, what, path, err, errlen);
    }
    if (d)
        closedir(d);
    return rc;
}
