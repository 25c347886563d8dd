/*
 * test_nccl.c - NCCL's device collectives (runtime/comm/comm_nccl.c) on a
 * group of one rank, the most one GPU gives with NCCL before 2.30: the
 * communicator opens, every operation returns the sum of one (the buffer
 * as the kernels' stream left it: each follows the work queued there),
 * blocking and with a request; asked by the watchdog (a timeout) an
 * operation aborts the communicator and fails, and every later one fails
 * at once, each with one line naming the group.  Skipped without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "cuda/cuda_kernels.h"
#include "kernels.h"
#include "../unit/tap.h"

enum { N = 1 << 20 };   /* 4 MiB: several NCCL chunks */

static float *host_ramp(size_t n)
{
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((i * 7919) % 1000) / 8.0f - 60.0f;
    return h;
}

/* The device buffer equals scale * h element for element. */
static int equals(const float *d, const float *h, size_t n, float scale)
{
    float *got = malloc(n * sizeof *got);
    int ok = merak_cuda_memcpy_d2h(got, d, n * sizeof *got) == 0;
    for (size_t i = 0; ok && i < n; i++)
        ok = got[i] == scale * h[i];
    free(got);
    return ok;
}

int main(void)
{
    if (!merak_cuda_available()) {
        printf("1..0 # SKIP no CUDA device\n");
        return 0;
    }
    const merak_kernels *k = merak_kernels_cuda();
    char err[512] = "";
    merak_comm *c = NULL;
    if (!k || merak_comm_init(&c, 1, 1, 1, err, sizeof err) < 0) {
        printf("not ok 1 - the CUDA backend and a one-process comm start: %s\n1..1\n", err);
        return 1;
    }
    tap_diag("NCCL %d", merak_nccl_version());
    merak_group *g = merak_comm_group(c, MERAK_GROUP_TP);
    const merak_dcoll_ops *d = &merak_nccl_dcoll;
    if (!tap_ok(d->open(g, merak_cuda_stream_handle(), err, sizeof err) == 0, "a one-rank communicator opens")) {
        tap_diag("%s", err);
        return tap_done();
    }
    g->dcoll = d;

    float *h = host_ramp(N), *x = merak_cuda_malloc(N * sizeof *x), *y = merak_cuda_malloc(N * sizeof *y);
    merak_cuda_memcpy_h2d(x, h, N * sizeof *x);

    /* each operation reads what the kernels' stream wrote before it */
    k->scale(x, N, 2.0f);
    tap_ok(d->ops.allreduce(g, x, N, NULL) == 0 && equals(x, h, N, 2.0f), "all-reduce after a kernel");
    k->scale(x, N, 0.5f);
    merak_req req = {0};
    int rc = d->ops.allreduce(g, x, N, &req);
    tap_ok(rc == 0 && req.active && merak_wait(&req) == 0 && !req.active && equals(x, h, N, 1.0f),
           "all-reduce with a request, finished by merak_wait");
    rc = d->ops.allreduce(g, x, N, &req);
    int t = 0;
    for (int i = 0; i < 10000000 && rc == 0 && (t = merak_test(&req)) == 0; i++)
        ;
    tap_ok(rc == 0 && t == 1 && equals(x, h, N, 1.0f), "all-reduce with a request, finished by merak_test");
    k->scale(x, N, 4.0f);
    tap_ok(d->ops.broadcast(g, x, N * sizeof *x, 0) == 0 && equals(x, h, N, 4.0f), "broadcast");
    const int counts[1] = {N};
    merak_cuda_memset(y, 0, N * sizeof *y);
    tap_ok(d->ops.reduce_scatter(g, x, y, counts) == 0 && equals(y, h, N, 4.0f), "reduce-scatter");
    k->scale(y, N, 0.25f);
    tap_ok(d->ops.allgather(g, y, counts) == 0 && equals(y, h, N, 1.0f), "all-gather");

    /* the watchdog's request (a timeout): the operation aborts the
     * communicator itself, says so, and fails; later ones fail at once */
    atomic_store(&c->abort_asked, 1);
    rc = d->ops.allreduce(g, x, N, NULL);
    if (!tap_ok(rc < 0 && atomic_load(&c->abort_done) &&
                    strstr(merak_comm_error(c), "the tp group: aborted after the communication timeout"),
                "asked by the watchdog, an all-reduce aborts the communicator and fails"))
        tap_diag("rc %d, error '%s'", rc, merak_comm_error(c));
    c->err[0] = 0;   /* (the comm keeps its first error) */
    rc = d->ops.broadcast(g, x, N * sizeof *x, 0);
    if (!tap_ok(rc < 0 && strstr(merak_comm_error(c), "its NCCL communicator was aborted after an earlier error"),
                "after the abort a broadcast fails at once"))
        tap_diag("rc %d, error '%s'", rc, merak_comm_error(c));
    d->close(g);
    g->dcoll = NULL;
    tap_ok(g->dcoll_state == NULL, "close frees the group's state");

    merak_cuda_free(x), merak_cuda_free(y), free(h);
    tap_ok(merak_cuda_status(err, sizeof err) == 0, "no CUDA error recorded %s", err);
    merak_comm_finalize(c);
    return tap_done();
}
