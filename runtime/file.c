/*
 * file.c - regular files for reading (file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errf.h"
#include "file.h"

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
