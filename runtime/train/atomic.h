/*
 * atomic.h - the one way the runtime writes a file: into a temporary next to
 * the target, then renamed over it, so a crash or a failed write at any
 * moment leaves either the old file or the complete new one, never a part.
 *
 *   merak_atomic *a;
 *   if (merak_atomic_open(path, &a, err, errlen) < 0) return -1;
 *   merak_atomic_write(a, header, n);          (or fprintf(merak_atomic_file(a), ...))
 *   merak_atomic_write(a, data, m);
 *   return merak_atomic_commit(a, err, errlen);
 *
 * Commit flushes and fsyncs the temporary, closes it (checked), renames it
 * over PATH and fsyncs PATH's directory, so the new name survives a crash too.
 * On any failure, and on abort, the temporary is removed and an existing PATH
 * is left as it was.  The temporary is ".NAME.XXXXXX" in PATH's directory:
 * hidden from globs such as 'train_*.bin', and unique per writer.
 */
#ifndef MERAK_ATOMIC_H
#define MERAK_ATOMIC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct merak_atomic merak_atomic;

/* Creates the temporary for PATH (mode 0666 less the umask).  Returns 0 and a
 * handle in *out, or -1 with one line in err naming PATH and the reason (a
 * PATH that is there and is not a regular file, such as a device, a FIFO
 * or a directory, is refused: a commit would replace it). */
int merak_atomic_open(const char *path, merak_atomic **out, char *err, size_t errlen);

/* The stream on the temporary, owned by the handle: write to it, never close
 * it.  A failed write on it is found by commit (ferror). */
FILE *merak_atomic_file(merak_atomic *a);

/* Writes LEN bytes.  The first failure is kept and reported by commit; later
 * writes do nothing, so callers need not check each one.  Returns 0 or -1. */
int merak_atomic_write(merak_atomic *a, const void *buf, size_t len);

/* From now on keeps the CRC-32 (zlib's, as merak_file_crc32 computes it)
 * and the count of the bytes merak_atomic_write takes, so a caller that
 * writes a whole file through it has the file's checksum without reading
 * it back (bytes written to merak_atomic_file's stream are not counted).
 * merak_atomic_sum gives them, before commit. */
void merak_atomic_checksum(merak_atomic *a);
void merak_atomic_sum(const merak_atomic *a, uint32_t *crc, uint64_t *bytes);

/* Makes the written bytes PATH (see above) and frees the handle.  Returns 0,
 * or -1 with one line in err naming PATH and strerror.  A failure to sync the
 * directory comes after the rename: PATH is then the new file, but the
 * rename may not survive a crash. */
int merak_atomic_commit(merak_atomic *a, char *err, size_t errlen);

/* Removes the temporary and frees the handle; PATH is untouched.  NULL is a
 * no-op. */
void merak_atomic_abort(merak_atomic *a);

/* Fails now (0, or -1 with one line in err) if PATH could not be written
 * later: its directory takes no new file, or PATH is there and is not a
 * regular file (a directory, a FIFO) that a commit could replace.  The
 * temporary it tries is removed. */
int merak_atomic_probe(const char *path, char *err, size_t errlen);

#endif /* MERAK_ATOMIC_H */
