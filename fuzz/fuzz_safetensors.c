/*
 * fuzz_safetensors.c - libFuzzer target: any bytes as a safetensors file.
 * Opening validates the whole header; every tensor it accepts must then
 * convert to float32 within its declared size, and its metadata be
 * readable, without a crash, a leak or undefined behaviour.
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    merak_st_file *f;
    if (merak_st_open(fuzz_file(data, size), &f, err, sizeof err) < 0)
        return 0;
    for (int i = 0; i < merak_st_count(f); i++) {
        const merak_st_info *t = merak_st_at(f, i);
        if (merak_st_find(f, t->name) != t)
            abort();   /* a name must find its own tensor */
        merak_st_metadata(f, t->name);
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++)
            n *= (size_t)t->shape[d];
        if (n > (1u << 20))
            continue;   /* valid, but not worth converting here */
        float *dst = malloc((n ? n : 1) * sizeof *dst);
        if (dst)
            merak_st_to_f32(t, dst, err, sizeof err);
        free(dst);
    }
    merak_st_close(f);
    return 0;
}
