/*
 * test_mem.h - the GPU tests' memory: host or device buffers, or a TAP
 * "Bail out!" line and exit status 1 when there are none.  For the tests
 * of tests/gpu that include it once (static functions).
 */
#ifndef MERAK_TEST_MEM_H
#define MERAK_TEST_MEM_H

#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_kernels.h" /* merak_cuda_malloc */

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("Bail out! out of host memory\n");
        exit(1);
    }
    return p;
}

static void *dmalloc(size_t bytes)
{
    void *p = merak_cuda_malloc(bytes);
    if (!p) {
        printf("Bail out! cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

#endif /* MERAK_TEST_MEM_H */
