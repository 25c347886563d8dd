/*
 * cuda_mem.c - the CUDA backend's device, memory and error state: the
 * first error (every call after it is a no-op until the caller reads it),
 * device memory, page-locked staging of small copies, the launchers'
 * scratch arena and the one stream.  The table (cuda_glue.c) and the .cu
 * launchers call it; it calls neither.
 */
#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpyAsync, streams, errors */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h"
#include "mix64.h" /* merak_fnv1a */

/* Copies to the device of at most STAGE_BYTES (a micro-batch's token ids,
 * a span table) go through NSTAGE page-locked buffers in turn: the source
 * is copied into the next buffer once that buffer's previous transfer has
 * finished (its event), and the transfer is queued on the stream, so the
 * host goes on queueing work instead of waiting for the device to drain.
 * Larger copies (weights) wait for their transfer. */
#define STAGE_BYTES ((size_t)1 << 20)
#define NSTAGE 4

typedef struct stage_buf {
    void *host;        /* page-locked, STAGE_BYTES */
    cudaEvent_t done;  /* recorded after its last transfer */
    int pending;       /* a transfer from it was queued */
} stage_buf;

/* The device side of the backend: one device, one stream, one host thread. */
static struct cuda_mem {
    cudaStream_t stream; /* NULL: the legacy default stream */
    void *scratch;
    size_t scratch_bytes;
    int failed;
    char err[256];
    stage_buf stage[NSTAGE];
    int nstage;       /* buffers made so far; -1: page-locked memory refused, copies wait */
    int stage_next;
    cudaEvent_t *marks; /* the device-time marks: nmarks recorded since the last clear */
    int nmarks, cap_marks;
} cb;

cudaStream_t merak_cuda_stream(void) { return cb.stream; }

int merak_cuda_failed(void) { return cb.failed; }

/* The backend's device is in use (merak_kernels_cuda started it). */
static int g_open;
void merak_cuda_mark_open(void) { g_open = 1; }
int merak_cuda_is_open(void) { return g_open; }

/* ------------------------------------------------------------------ errors */

void merak_cuda_record(const char *what, const char *detail)
{
    if (cb.failed)
        return;
    cb.failed = 1;
    snprintf(cb.err, sizeof cb.err, "cuda backend: %s: %s", what, detail);
}

int merak_cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    merak_cuda_record(what, cudaGetErrorString(e));
    return 0;
}

int merak_cuda_status(char *err, size_t errlen)
{
    if (!cb.failed)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", cb.err);
    return -1;
}

/* ------------------------------------------------------------------ device, memory */

int merak_cuda_available(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not an error here */
        return 0;
    }
    return n > 0 ? n : 0;
}

int merak_cuda_set_device(int device)
{
    return merak_cuda_ok(cudaSetDevice(device), "cudaSetDevice") ? 0 : -1;
}

void *merak_cuda_malloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* out of memory is not sticky: caller handles NULL */
        return NULL;
    }
    return p;
}

void merak_cuda_free(void *dptr)
{
    if (dptr)
        merak_cuda_ok(cudaFree(dptr), "cudaFree");
}

/* The staging buffer for the next small copy, made on first use; NULL
 * when page-locked memory is refused (the copy then waits). */
static stage_buf *stage_take(void)
{
    if (cb.nstage < 0)
        return NULL;
    stage_buf *b = &cb.stage[cb.stage_next];
    if (cb.stage_next == cb.nstage) { /* not made yet */
        if (cudaHostAlloc(&b->host, STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError(); /* not sticky: plain copies still work */
            if (b->host)
                cudaFreeHost(b->host);
            b->host = NULL;
            cb.nstage = -1;
            return NULL;
        }
        cb.nstage++;
    }
    cb.stage_next = (cb.stage_next + 1) % NSTAGE;
    return b;
}

int merak_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    stage_buf *b = bytes <= STAGE_BYTES ? stage_take() : NULL;
    if (b) {
        if (b->pending && !merak_cuda_ok(cudaEventSynchronize(b->done), "cudaEventSynchronize(staging)"))
            return -1;
        memcpy(b->host, src, bytes);
        b->pending = 1;
        if (!merak_cuda_ok(cudaMemcpyAsync(dst, b->host, bytes, cudaMemcpyHostToDevice, cb.stream),
                     "cudaMemcpyAsync(h2d, staged)") ||
            !merak_cuda_ok(cudaEventRecord(b->done, cb.stream), "cudaEventRecord(staging)"))
            return -1;
        return 0;
    }
    if (!merak_cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb.stream),
                 "cudaMemcpyAsync(h2d)") ||
        !merak_cuda_ok(cudaStreamSynchronize(cb.stream), "cudaStreamSynchronize"))
        return -1;
    return 0;
}

int merak_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    if (!merak_cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb.stream),
                 "cudaMemcpyAsync(d2h)") ||
        !merak_cuda_ok(cudaStreamSynchronize(cb.stream), "cudaStreamSynchronize"))
        return -1;
    return 0;
}

int merak_cuda_memcpy_d2d(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    return merak_cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb.stream),
                   "cudaMemcpyAsync(d2d)")
               ? 0
               : -1;
}

int merak_cuda_memset(void *dst, int value, size_t bytes)
{
    if (!bytes)
        return 0;
    return merak_cuda_ok(cudaMemsetAsync(dst, value, bytes, cb.stream), "cudaMemsetAsync") ? 0 : -1;
}

int merak_cuda_is_device_ptr(const void *p)
{
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* an unknown pointer: host memory */
        return 0;
    }
    return at.type == cudaMemoryTypeDevice;
}

void *merak_cuda_stream_handle(void) { return (void *)cb.stream; }

double merak_cuda_device_id(void)
{
    int d;
    char bus[32];
    if (cudaGetDevice(&d) != cudaSuccess || cudaDeviceGetPCIBusId(bus, (int)sizeof bus, d) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return (double)(merak_fnv1a(bus, strlen(bus)) >> 12);   /* 52 bits: exact in a double */
}

int merak_cuda_synchronize(void)
{
    return merak_cuda_ok(cudaStreamSynchronize(cb.stream), "cudaStreamSynchronize") ? 0 : -1;
}

/* ------------------------------------------------------------------ device time */

int merak_cuda_mark(void)
{
    if (cb.failed)
        return -1;
    if (cb.nmarks == cb.cap_marks) {
        int cap = cb.cap_marks ? 2 * cb.cap_marks : 256;
        cudaEvent_t *m = realloc(cb.marks, (size_t)cap * sizeof *m);
        if (!m)
            return -1;
        cb.marks = m;
        for (; cb.cap_marks < cap; cb.cap_marks++)
            if (!merak_cuda_ok(cudaEventCreate(&cb.marks[cb.cap_marks]), "cudaEventCreate(mark)"))
                return -1;
    }
    if (!merak_cuda_ok(cudaEventRecord(cb.marks[cb.nmarks], cb.stream), "cudaEventRecord(mark)"))
        return -1;
    return cb.nmarks++;
}

double merak_cuda_mark_seconds(int a, int b)
{
    float ms = 0;
    if (cb.failed || a < 0 || b < 0 || a >= cb.nmarks || b >= cb.nmarks)
        return -1;
    if (cudaEventElapsedTime(&ms, cb.marks[a], cb.marks[b]) != cudaSuccess) {
        (void)cudaGetLastError(); /* a mark not reached yet: no time, not a failure of the kernels */
        return -1;
    }
    return ms * 1e-3;
}

void merak_cuda_marks_clear(void) { cb.nmarks = 0; }

/* Grows geometrically.  The old arena is kept, never freed: enqueued
 * kernels may still read it, and cudaFree waits for the whole device,
 * NCCL's kernels too, which may be waiting for a peer that waits for this
 * rank.  Sizes settle in the first step, so what is kept stays under the
 * arena's own size (doublings). */
void *merak_cuda_scratch(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes <= cb.scratch_bytes)
        return cb.scratch;
    size_t want = cb.scratch_bytes * 2 > bytes ? cb.scratch_bytes * 2 : bytes;
    void *fresh = NULL;
    if (!merak_cuda_ok(cudaMalloc(&fresh, want), "cudaMalloc(scratch)"))
        return NULL;
    cb.scratch = fresh;   /* (the old one, if any, stays allocated: above) */
    cb.scratch_bytes = want;
    return cb.scratch;
}
