/*
 * data.h - token shards in llm.c's format and the window convention.
 *
 * A shard is a header of 256 little-endian int32 (magic 20240520, version,
 * token count) followed by the tokens: uint16 for version 1, uint32 for
 * version 2.  A shard with n tokens holds W = (n - 1) / (B*T) windows; window
 * w is buf = tokens[w*B*T, w*B*T + B*T + 1), row r's input is buf[r*T, r*T+T)
 * and its target buf[r*T+1, r*T+T+1).  With several shards (a glob, matched
 * in sorted order) the windows of all shards are numbered one after another.
 */
#ifndef MERAK_DATA_H
#define MERAK_DATA_H

#include <stddef.h>
#include <stdint.h>

#define MERAK_SHARD_MAGIC 20240520
#define MERAK_SHARD_HEADER_INTS 256

typedef struct merak_data merak_data;

/* Opens every file matching PATTERN (glob(3), sorted) and validates it:
 * header magic and version, file size equal to header + count * token
 * size, every token < vocab_size.  Returns 0, or -1 with one line in err
 * naming the file and the problem (for a bad token: its position and
 * value).  The files stay open until merak_data_close. */
int merak_data_open(const char *pattern, int vocab_size, merak_data **out,
                    char *err, size_t errlen);
void merak_data_close(merak_data *d);

int merak_data_num_shards(const merak_data *d);
const char *merak_data_shard_path(const merak_data *d, int i);
uint64_t merak_data_shard_tokens(const merak_data *d, int i);   /* 0 for no shard i */
uint32_t merak_data_shard_crc(const merak_data *d, int i);      /* CRC-32 of the file as opened; 0 for none */
uint64_t merak_data_num_tokens(const merak_data *d);   /* over all shards */

/* Windows of B*T tokens over all shards (0 if no shard has B*T+1 tokens). */
uint64_t merak_data_num_windows(const merak_data *d, int B, int T);

/* Fills inputs and targets (B*T each) from global window w (taken mod the
 * number of windows), read from its shard now.  Returns 0, or -1 with err
 * set if there is no window, or if the shard changed since it was opened
 * (shorter, or a token no longer below the vocabulary: named). */
int merak_data_window(const merak_data *d, uint64_t w, int B, int T,
                      int32_t *inputs, int32_t *targets, char *err, size_t errlen);

/* Writes tokens as a shard at PATH (version 1 if every token < 65536, else 2),
 * atomically (atomic.h).  Returns 0 or -1 with err set. */
int merak_shard_write(const char *path, const uint32_t *tokens, uint64_t n,
                      char *err, size_t errlen);

#endif /* MERAK_DATA_H */
