/*
 * comm_nccl.c - NCCL's collectives on device buffers (merak_dcoll_ops,
 * comm_impl.h), in a CUDA build.
 *
 * One communicator per group, made from a unique id that the group's rank
 * 0 broadcasts over the group's MPI communicator; non-blocking
 * (ncclConfig_t.blocking = 0), so that a wait polls its errors instead of
 * hanging inside NCCL, and aborts the communicator itself when the
 * watchdog asks (a timeout): ncclCommAbort is only ever called from the
 * thread that uses the communicator.  Each group has a stream of its own,
 * created non-blocking so that it runs beside the kernels' stream (the
 * legacy default stream synchronises with blocking streams); every
 * operation first waits, on the GPU, for the work already queued on the
 * kernels' stream (an event), so it reads what the kernels wrote.
 *
 * A blocking operation returns when its stream has finished, polling
 * ncclCommGetAsyncError meanwhile; one with a request returns once it is
 * queued, and merak_wait or merak_test finish it (its event).  The caller
 * leaves the buffers alone until then, as with MPI.  An NCCL or CUDA error
 * becomes one line naming the call and the group, and the communicator is
 * aborted (after an error NCCL's communicator cannot be used again), so
 * every later operation on the group fails at once.
 *
 * Sums of float32 (ncclFloat32, ncclSum).  Reduce-scatter and all-gather
 * with equal counts are NCCL's own; with unequal counts (a ZeRO shard that
 * does not divide evenly) one ncclReduce or ncclBroadcast per rank, in one
 * NCCL group.
 */
#include <cuda_runtime_api.h>
/* nccl.h declares functions of no arguments without `void`, which
 * -Wstrict-prototypes -Werror rejects when CUDA's include dir is not a
 * system one (as cublasLt.h, kernels/cuda/cuda_blas.c). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "errf.h"

_Static_assert(sizeof(cudaEvent_t) <= sizeof(((merak_req *)0)->impl), "cudaEvent_t too large");

typedef struct nccl_group {
    ncclComm_t comm;
    cudaStream_t stream;   /* the group's operations (non-blocking) */
    cudaStream_t compute;  /* the kernels' stream, which each operation waits for */
    cudaEvent_t ready;     /* recorded on compute before each operation */
    int broken;            /* aborted after an error */
} nccl_group;

static nccl_group *state(const merak_group *g) { return g->dcoll_state; }

/* ------------------------------------------------------------------ errors */

/* Aborts s's communicator once (ncclCommAbort frees it): only ever from
 * the thread that uses it. */
static void abort_comm(nccl_group *s)
{
    if (s && s->comm && !s->broken) {
        s->broken = 1;
        ncclCommAbort(s->comm);
        s->comm = NULL;
    }
}

/* One line for a failed NCCL call on g ("CALL on the tp group failed:
 * why: NCCL's last error"); the communicator is aborted.  -1. */
static int nccl_fail(merak_group *g, const char *call, ncclResult_t r)
{
    nccl_group *s = state(g);
    const char *last = ncclGetLastError(s ? s->comm : NULL);   /* (process-wide in 2.28) */
    merak_comm_fail(g, "%s on the %s group failed: %s%s%s", call, merak_group_name(g->kind), ncclGetErrorString(r),
                    last && *last ? ": " : "", last ? last : "");
    abort_comm(s);
    return -1;
}

static int cuda_fail(merak_group *g, const char *call, cudaError_t e)
{
    merak_comm_fail(g, "%s for the %s group's NCCL failed: %s", call, merak_group_name(g->kind),
                    cudaGetErrorString(e));
    abort_comm(state(g));
    return -1;
}

/* A query's cudaErrorNotReady is no error: never left as the last error,
 * where the next kernel launch's check would find it. */
static void not_ready_seen(void)
{
    if (cudaPeekAtLastError() == cudaErrorNotReady)
        (void)cudaGetLastError();
}

/* Between polls: a few yields, then 20 microseconds asleep. */
static void pause_poll(unsigned *n)
{
    if ((*n)++ < 256) {
        sched_yield();
        return;
    }
    const struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/* One look while waiting (call names the wait): 0 while the communicator
 * works; -1 recorded when it was aborted before, failed on its own (a peer
 * died, a network error), or the watchdog has timed the wait out (then it
 * is aborted here, on the thread that uses it, and the watchdog told). */
static int still_ok(merak_group *g, const char *call)
{
    nccl_group *s = state(g);
    if (s->broken)
        return merak_comm_fail(g, "%s on the %s group: its NCCL communicator was aborted after an earlier error",
                               call, merak_group_name(g->kind));
    if (merak_abort_asked(g->comm)) {
        abort_comm(s);
        merak_abort_done(g->comm);
        return merak_comm_fail(g, "%s on the %s group: aborted after the communication timeout", call,
                               merak_group_name(g->kind));
    }
    ncclResult_t r = ncclSuccess, q = ncclCommGetAsyncError(s->comm, &r);
    if (q != ncclSuccess)
        return nccl_fail(g, call, q);
    return r == ncclSuccess || r == ncclInProgress ? 0 : nccl_fail(g, call, r);
}

/* A non-blocking communicator may answer a call with ncclInProgress, and
 * then nothing else may be called on it before its asynchronous state has
 * left ncclInProgress.  comm's state once it has (comm NULL: r), or
 * ncclInProgress still when the watchdog asked c to abort meanwhile. */
static ncclResult_t settled(const merak_comm *c, ncclComm_t comm, ncclResult_t r)
{
    unsigned n = 0;
    while (r == ncclInProgress && comm && !merak_abort_asked(c)) {
        pause_poll(&n);
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess)
            r = q;
    }
    return r;
}

/* The same for a call on g's communicator that returned r, as a wait the
 * watchdog may end: 0, or -1 recorded. */
static int settle(merak_group *g, const char *call, ncclResult_t r)
{
    unsigned n = 0;
    while (r == ncclInProgress) {
        if (still_ok(g, call) < 0)
            return -1;
        pause_poll(&n);
        ncclResult_t q = ncclCommGetAsyncError(state(g)->comm, &r);
        if (q != ncclSuccess)
            r = q;
    }
    return r == ncclSuccess ? 0 : nccl_fail(g, call, r);
}

/* ------------------------------------------------------------------ ordering */

/* Before an operation: the group's stream waits for the kernels'.  0 or -1. */
static int begin(merak_group *g, const char *call)
{
    nccl_group *s = state(g);
    if (still_ok(g, call) < 0)
        return -1;
    cudaError_t e = cudaEventRecord(s->ready, s->compute);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(s->stream, s->ready, 0);
    return e == cudaSuccess ? 0 : cuda_fail(g, "cudaEventRecord/cudaStreamWaitEvent", e);
}

/* After a blocking operation: waits for the group's stream, polling the
 * communicator.  0 or -1. */
static int drain(merak_group *g, const char *call)
{
    nccl_group *s = state(g);
    unsigned n = 0;
    for (;;) {
        const cudaError_t e = cudaStreamQuery(s->stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(g, "cudaStreamQuery", e);
        not_ready_seen();
        if (still_ok(g, call) < 0)
            return -1;
        pause_poll(&n);
    }
}

/* ------------------------------------------------------------------ requests */

/* 1 when req's operation has finished (its event destroyed), 0 while it
 * runs (block: never), -1 on an error (a communicator aborted meanwhile,
 * by another operation's failure, fails it: its buffer holds nothing). */
static int req_poll(merak_req *req, int block)
{
    cudaEvent_t ev;
    memcpy(&ev, req->impl, sizeof ev);
    unsigned n = 0;
    int rc;
    for (;;) {
        if (still_ok(req->group, "waiting for a collective") < 0) {
            rc = -1;
            break;
        }
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) {
            rc = 1;
            break;
        }
        if (e != cudaErrorNotReady) {
            rc = cuda_fail(req->group, "cudaEventQuery", e);
            break;
        }
        not_ready_seen();
        if (!block)
            return 0;
        pause_poll(&n);
    }
    cudaEventDestroy(ev);
    req->active = 0;
    return rc;
}

static int req_wait(merak_req *req) { return req_poll(req, 1) < 0 ? -1 : 0; }
static int req_test(merak_req *req) { return req_poll(req, 0); }

static const struct merak_req_ops nccl_req = {req_wait, req_test};

/* The end of an operation queued on the group's stream: a request marks
 * it (an event), else the stream is drained.  0 or -1. */
static int finish(merak_group *g, merak_req *req, const char *call)
{
    if (!req)
        return drain(g, call);
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return cuda_fail(g, "cudaEventCreateWithFlags", e);
    if ((e = cudaEventRecord(ev, state(g)->stream)) != cudaSuccess) {
        cudaEventDestroy(ev);
        return cuda_fail(g, "cudaEventRecord", e);
    }
    req->ops = &nccl_req;
    req->group = g;
    req->peer = -1;
    req->active = 1;
    memcpy(req->impl, &ev, sizeof ev);
    return 0;
}

/* ------------------------------------------------------------------ collectives */

static int nccl_allreduce(merak_group *g, float *buf, size_t n, merak_req *req)
{
    nccl_group *s = state(g);
    if (begin(g, "ncclAllReduce") < 0 ||
        settle(g, "ncclAllReduce", ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, s->comm, s->stream)) < 0)
        return -1;
    return finish(g, req, "ncclAllReduce");
}

static int nccl_broadcast(merak_group *g, void *buf, size_t bytes, int root)
{
    nccl_group *s = state(g);
    if (begin(g, "ncclBroadcast") < 0 ||
        settle(g, "ncclBroadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, s->comm, s->stream)) < 0)
        return -1;
    return finish(g, NULL, "ncclBroadcast");
}

/* Whether every rank has the same count. */
static int equal_counts(const merak_group *g, const int *counts)
{
    for (int r = 1; r < g->size; r++)
        if (counts[r] != counts[0])
            return 0;
    return 1;
}

/* Ends an NCCL group of calls (the first failed call's result, else
 * ncclGroupEnd's), settled.  0 or -1. */
static int group_end(merak_group *g, const char *call, ncclResult_t first)
{
    const ncclResult_t end = ncclGroupEnd();
    return settle(g, call, first != ncclSuccess && first != ncclInProgress ? first : end);
}

static int nccl_reduce_scatter(merak_group *g, const float *send, float *recv, const int *counts)
{
    nccl_group *s = state(g);
    if (begin(g, "ncclReduceScatter") < 0)
        return -1;
    if (equal_counts(g, counts)) {
        if (settle(g, "ncclReduceScatter", ncclReduceScatter(send, recv, (size_t)counts[0], ncclFloat32, ncclSum,
                                                             s->comm, s->stream)) < 0)
            return -1;
        return finish(g, NULL, "ncclReduceScatter");
    }
    ncclResult_t first = ncclGroupStart();
    size_t off = 0;
    for (int r = 0; r < g->size && (first == ncclSuccess || first == ncclInProgress); off += (size_t)counts[r], r++)
        first = ncclReduce(send + off, recv, (size_t)counts[r], ncclFloat32, ncclSum, r, s->comm, s->stream);
    if (group_end(g, "ncclReduce (reduce-scatter of unequal blocks)", first) < 0)
        return -1;
    return finish(g, NULL, "ncclReduce");
}

static int nccl_allgather(merak_group *g, float *buf, const int *counts)
{
    nccl_group *s = state(g);
    if (begin(g, "ncclAllGather") < 0)
        return -1;
    if (equal_counts(g, counts)) {
        const size_t c = (size_t)counts[0];
        if (settle(g, "ncclAllGather", ncclAllGather(buf + c * (size_t)g->rank, buf, c, ncclFloat32, s->comm,
                                                     s->stream)) < 0)
            return -1;
        return finish(g, NULL, "ncclAllGather");
    }
    ncclResult_t first = ncclGroupStart();
    size_t off = 0;
    for (int r = 0; r < g->size && (first == ncclSuccess || first == ncclInProgress); off += (size_t)counts[r], r++)
        first = ncclBroadcast(buf + off, buf + off, (size_t)counts[r], ncclFloat32, r, s->comm, s->stream);
    if (group_end(g, "ncclBroadcast (all-gather of unequal blocks)", first) < 0)
        return -1;
    return finish(g, NULL, "ncclBroadcast");
}

/* ------------------------------------------------------------------ open, close */

static void free_state(nccl_group *s)
{
    if (s->ready)
        cudaEventDestroy(s->ready);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    free(s);
}

static int nccl_open(merak_group *g, void *stream, char *err, size_t errlen)
{
    nccl_group *s = calloc(1, sizeof *s);
    if (!s)
        return merak_errf(err, errlen, "out of memory");
    s->compute = (cudaStream_t)stream;
    /* rank 0's unique id, and whether it has one, to every member */
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    ncclResult_t r = ncclSuccess;
    if (g->rank == 0)
        msg.ok = (r = ncclGetUniqueId(&msg.id)) == ncclSuccess;
    if (g->size > 1 && MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, g->mpi) != MPI_SUCCESS) {
        free_state(s);
        return merak_errf(err, errlen, "broadcasting the %s group's NCCL id over MPI failed", merak_group_name(g->kind));
    }
    if (!msg.ok) {
        free_state(s);
        return merak_errf(err, errlen, "ncclGetUniqueId for the %s group failed on its rank 0%s%s",
                          merak_group_name(g->kind), g->rank == 0 ? ": " : "", g->rank == 0 ? ncclGetErrorString(r) : "");
    }
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free_state(s);
        return merak_errf(err, errlen, "a stream for the %s group's NCCL: %s", merak_group_name(g->kind),
                          cudaGetErrorString(e));
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&s->comm, g->size, msg.id, g->rank, &cfg);
    r = settled(g->comm, s->comm, r);   /* (two statements: s->comm is set by the call) */
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(s->comm);
        merak_errf(err, errlen, "ncclCommInitRankConfig for the %s group (rank %d of %d) failed: %s%s%s",
                   merak_group_name(g->kind), g->rank, g->size, ncclGetErrorString(r), last && *last ? ": " : "",
                   last ? last : "");
        if (s->comm)
            ncclCommAbort(s->comm);
        if (merak_abort_asked(g->comm))
            merak_abort_done(g->comm);
        free_state(s);
        return -1;
    }
    g->dcoll_state = s;
    return 0;
}

static void nccl_close(merak_group *g)
{
    nccl_group *s = state(g);
    if (!s)
        return;
    /* flush what is in flight, then free (abort if that fails); an
     * aborted communicator was freed by ncclCommAbort */
    if (!s->broken) {
        const ncclResult_t r = settled(g->comm, s->comm, ncclCommFinalize(s->comm));
        if (r == ncclSuccess) {
            ncclCommDestroy(s->comm);
        } else {
            ncclCommAbort(s->comm);
            if (merak_abort_asked(g->comm))
                merak_abort_done(g->comm);
        }
    }
    free_state(s);
    g->dcoll_state = NULL;
}

static int nccl_version(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

const merak_dcoll_ops merak_nccl_dcoll = {
    .name = "nccl",
    .open = nccl_open,
    .close = nccl_close,
    .version = nccl_version,
    .ops = {.allreduce = nccl_allreduce,
            .broadcast = nccl_broadcast,
            .reduce_scatter = nccl_reduce_scatter,
            .allgather = nccl_allgather},
};
