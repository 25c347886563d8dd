/*
 * safetensors.h - reading and writing the safetensors format
 * (8-byte little-endian header length, a JSON header, then raw data).
 *
 * Reading maps the file and validates the whole header up front: JSON syntax,
 * known dtypes, shapes, and data offsets that lie inside the file, match the
 * shape's byte size and do not overlap.  Writing goes through atomic.h, so a
 * crash never leaves half a file.
 */
#ifndef MERAK_SAFETENSORS_H
#define MERAK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "bf16.h" /* merak_f32_to_bf16 */

typedef enum merak_st_dtype {
    MERAK_ST_F32, MERAK_ST_F16, MERAK_ST_BF16, MERAK_ST_F64,
    MERAK_ST_I64, MERAK_ST_I32, MERAK_ST_I16, MERAK_ST_I8, MERAK_ST_U8, MERAK_ST_BOOL,
} merak_st_dtype;

#define MERAK_ST_MAX_DIMS 8

typedef struct merak_st_info {
    const char *path;                  /* the file's, owned by it */
    const char *name;                  /* owned by the file */
    merak_st_dtype dtype;
    int ndim;
    int64_t shape[MERAK_ST_MAX_DIMS];
    const void *data;                  /* inside the mapping */
    size_t nbytes;
} merak_st_info;

typedef struct merak_st_file merak_st_file;

/* Opens and validates PATH.  Returns 0, or -1 with one line in err that names
 * the file and the problem. */
int merak_st_open(const char *path, merak_st_file **out, char *err, size_t errlen);
void merak_st_close(merak_st_file *f);

/* Number of tensors, and the i-th (in header order). */
int merak_st_count(const merak_st_file *f);
const merak_st_info *merak_st_at(const merak_st_file *f, int i);
/* The tensor called NAME, or NULL. */
const merak_st_info *merak_st_find(const merak_st_file *f, const char *name);
/* The value of a string entry of "__metadata__", or NULL. */
const char *merak_st_metadata(const merak_st_file *f, const char *key);

/* Copies tensor INFO into dst as float32, converting F32, F16, BF16 and F64.
 * Returns 0, or -1 with err set for other dtypes. */
int merak_st_to_f32(const merak_st_info *info, float *dst, char *err, size_t errlen);
/* "[d0, d1, ...]" for messages and listings (cut to len). */
void merak_st_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);
/* The index of the first NaN or Inf among x[0, n) (values read from a
 * file, before they are trusted), or -1. */
int64_t merak_nonfinite_at(const float *x, size_t n);

typedef struct merak_st_entry {
    const char *name;
    int ndim;
    int64_t shape[MERAK_ST_MAX_DIMS];
    const float *data;                 /* float32, row-major, prod(shape) elements */
    int bf16;                          /* written as BF16 (rounded to nearest even), else F32 */
} merak_st_entry;

/* Nothing that is not finite is saved (a diverged run's weights would
 * load as garbage, and the loader refuses them): 0 when every element of
 * the n entries is finite, else -1 with err "PATH: not written: tensor
 * NAME holds nan at element K ...". */
int merak_st_finite(const char *path, const merak_st_entry *e, int n, char *err, size_t errlen);

/* Writes N float32 tensors (in the given order) and optional string metadata
 * (meta_keys[i] -> meta_vals[i], nmeta pairs) to PATH atomically.  With crc
 * (and bytes) not NULL, also the file's CRC-32 and size, summed while
 * writing.  Returns 0 or -1 with err set. */
int merak_st_write(const char *path, const merak_st_entry *entries, int n,
                   const char *const *meta_keys, const char *const *meta_vals,
                   int nmeta, uint32_t *crc, uint64_t *bytes, char *err, size_t errlen);

#endif /* MERAK_SAFETENSORS_H */
