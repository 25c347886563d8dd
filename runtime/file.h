/* file.h - how the runtime opens a file it reads (shards, weights, configs,
 * rules, profiles, checkpoints): a regular file only.  A FIFO is refused, never waited
 * on (its open does not block), and so is a directory or a device. */
#ifndef MERAK_FILE_H
#define MERAK_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A descriptor of PATH for reading, or -1 with one line in err:
 * "PATH: cannot open: REASON" or "PATH: not a regular file". */
int merak_file_open(const char *path, char *err, size_t errlen);
/* The same as a stream ("rb"), or NULL with err. */
FILE *merak_file_fopen(const char *path, char *err, size_t errlen);

/* Every byte of PATH ("-": standard input, which may be a pipe) into
 * *data (malloc'd, with a NUL after the *n bytes): 0, or -1 with one line
 * in err naming PATH. */
int merak_file_read_all(const char *path, char **data, size_t *n, char *err, size_t errlen);

/* Outputs never overwrite inputs.  Is OUT the existing file IN (the same
 * device and inode, through links)?  1 or 0 (0 when either is NULL or
 * does not exist). */
int merak_file_same(const char *out, const char *in);
/* Refuses an output FLAG OUT (flag: "--metrics", "-o") that is input IN
 * (what: "the --init weights", "a data shard"): 0, or -1 with one line in
 * err naming both.  IN NULL: nothing to check. */
int merak_file_not_input(const char *flag, const char *out, const char *what, const char *in, char *err,
                         size_t errlen);
/* The same for every file in directory DIR (what: "a file of the
 * checkpoint it resumes"); DIR NULL or unreadable: nothing to check. */
int merak_file_not_in_dir(const char *flag, const char *out, const char *what, const char *dir, char *err,
                          size_t errlen);

/* The CRC-32 (zlib's, as gzip and zip use) and the size of regular file
 * PATH, read through once: 0, or -1 with err naming PATH. */
int merak_file_crc32(const char *path, uint32_t *crc, uint64_t *bytes, char *err, size_t errlen);

#endif /* MERAK_FILE_H */
