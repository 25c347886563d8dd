/*
 * fuzz_shard.c - libFuzzer target: any bytes as an llm.c token shard
 * (header, version 1 or 2 tokens).  A shard that opens must give every
 * window of it with tokens below the vocabulary.
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { VOCAB = 50304, B = 2, T = 8 };
    char err[512];
    merak_data *d;
    if (merak_data_open(fuzz_file(data, size), VOCAB, &d, err, sizeof err) < 0)
        return 0;
    uint64_t w = merak_data_num_windows(d, B, T);
    int32_t ids[B * T], targets[B * T];
    for (uint64_t i = 0; i < w && i < 64; i++) {
        if (merak_data_window(d, i, B, T, ids, targets, err, sizeof err) < 0)
            abort();
        for (int k = 0; k < B * T; k++)
            if (ids[k] < 0 || ids[k] >= VOCAB || targets[k] < 0 || targets[k] >= VOCAB)
                abort();
    }
    merak_data_close(d);
    return 0;
}
