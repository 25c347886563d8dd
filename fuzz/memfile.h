/*
 * memfile.h - the fuzz targets' input as a file: the runtime's parsers read
 * paths (regular files, mapped or streamed), so each input is written into
 * one memfd (a regular file in memory) and handed over as /proc/self/fd/N.
 */
#ifndef MERAK_FUZZ_MEMFILE_H
#define MERAK_FUZZ_MEMFILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a file holding exactly data[0, size); aborts if memfd fails
 * (the harness, not the parser, is broken then). */
static const char *fuzz_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("merak-fuzz", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    return path;
}

#endif
