/*
 * comm_nccl.c - NCCL's collectives and point-to-point on device buffers
 * (merak_dcoll_ops, comm_impl.h), in a CUDA build.
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
 *
 * Point-to-point (--p2p nccl, the pipeline's activations and gradients):
 * a communicator of two ranks per link, below.  Everything above works on
 * a channel, a communicator and its stream: the group's own or a link's.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "errf.h"

/* A request's handle: the event that marks its end, and the channel it
 * ran on (whose errors its wait polls). */
typedef struct nccl_req {
    cudaEvent_t ev;
    struct nccl_chan *ch;
} nccl_req;
_Static_assert(sizeof(nccl_req) <= sizeof(((merak_req *)0)->impl), "nccl_req too large");

/* One communicator and the stream its operations run on: a group's own
 * (its collectives), or one link of its point-to-point. */
typedef struct nccl_chan {
    ncclComm_t comm;
    cudaStream_t stream;   /* non-blocking */
    int broken;            /* aborted after an error */
    char name[80];         /* "the tp group", "the pp link 0->1 (gradients)" */
} nccl_chan;

typedef struct nccl_group {
    nccl_chan coll;
    cudaStream_t compute;  /* the kernels' stream, which each operation waits for */
    cudaEvent_t ready;     /* recorded on compute before each operation */
    nccl_chan *links;      /* point-to-point (p2p_open), nlinks of them */
    int nlinks;
    int (*link_ends)[3];   /* [nlinks] sender, receiver (group ranks) and kind of each */
} nccl_group;

static nccl_group *state(const merak_group *g) { return g->dcoll_state; }

/* ------------------------------------------------------------------ errors */

/* Aborts ch's communicator once (ncclCommAbort frees it): only ever from
 * the thread that uses it. */
static void abort_chan(nccl_chan *ch)
{
    if (ch && ch->comm && !ch->broken) {
        ch->broken = 1;
        ncclCommAbort(ch->comm);
        ch->comm = NULL;
    }
}

/* One line for a failed NCCL call on ch ("CALL on the tp group failed:
 * why: NCCL's last error"); the communicator is aborted.  -1. */
static int nccl_fail(merak_group *g, nccl_chan *ch, const char *call, ncclResult_t r)
{
    const char *last = ncclGetLastError(ch ? ch->comm : NULL);   /* (process-wide in 2.28) */
    merak_comm_fail(g, "%s on %s failed: %s%s%s", call, ch ? ch->name : merak_group_name(g->kind),
                    ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    abort_chan(ch);
    return -1;
}

static int cuda_fail(merak_group *g, nccl_chan *ch, const char *call, cudaError_t e)
{
    merak_comm_fail(g, "%s for the NCCL of %s failed: %s", call, ch->name, cudaGetErrorString(e));
    abort_chan(ch);
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

/* One look while waiting (call names the wait): 0 while ch works; -1
 * recorded when it was aborted before, failed on its own (a peer died, a
 * network error), or the watchdog has timed the wait out (then it is
 * aborted here, on the thread that uses it, and the watchdog told). */
static int still_ok(merak_group *g, nccl_chan *ch, const char *call)
{
    if (ch->broken)
        return merak_comm_fail(g, "%s on %s: its NCCL communicator was aborted after an earlier error", call,
                               ch->name);
    if (merak_abort_asked(g->comm)) {
        abort_chan(ch);
        merak_abort_done(g->comm);
        return merak_comm_fail(g, "%s on %s: aborted after the communication timeout", call, ch->name);
    }
    ncclResult_t r = ncclSuccess, q = ncclCommGetAsyncError(ch->comm, &r);
    if (q != ncclSuccess)
        return nccl_fail(g, ch, call, q);
    return r == ncclSuccess || r == ncclInProgress ? 0 : nccl_fail(g, ch, call, r);
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

/* The same for a call on ch that returned r, as a wait the watchdog may
 * end: 0, or -1 recorded. */
static int settle(merak_group *g, nccl_chan *ch, const char *call, ncclResult_t r)
{
    unsigned n = 0;
    while (r == ncclInProgress) {
        if (still_ok(g, ch, call) < 0)
            return -1;
        pause_poll(&n);
        ncclResult_t q = ncclCommGetAsyncError(ch->comm, &r);
        if (q != ncclSuccess)
            r = q;
    }
    return r == ncclSuccess ? 0 : nccl_fail(g, ch, call, r);
}

/* ------------------------------------------------------------------ ordering */

/* Before an operation on ch: its stream waits for the kernels'.  0 or -1. */
static int begin(merak_group *g, nccl_chan *ch, const char *call)
{
    nccl_group *s = state(g);
    if (still_ok(g, ch, call) < 0)
        return -1;
    cudaError_t e = cudaEventRecord(s->ready, s->compute);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(ch->stream, s->ready, 0);
    return e == cudaSuccess ? 0 : cuda_fail(g, ch, "cudaEventRecord/cudaStreamWaitEvent", e);
}

/* After a blocking operation: waits for ch's stream, polling its
 * communicator.  0 or -1. */
static int drain(merak_group *g, nccl_chan *ch, const char *call)
{
    unsigned n = 0;
    for (;;) {
        const cudaError_t e = cudaStreamQuery(ch->stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(g, ch, "cudaStreamQuery", e);
        not_ready_seen();
        if (still_ok(g, ch, call) < 0)
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
    nccl_req h;
    memcpy(&h, req->impl, sizeof h);
    const char *what = req->peer < 0 ? "waiting for a collective" : "waiting for a transfer";
    unsigned n = 0;
    int rc;
    for (;;) {
        if (still_ok(req->group, h.ch, what) < 0) {
            rc = -1;
            break;
        }
        const cudaError_t e = cudaEventQuery(h.ev);
        if (e == cudaSuccess) {
            rc = 1;
            break;
        }
        if (e != cudaErrorNotReady) {
            rc = cuda_fail(req->group, h.ch, "cudaEventQuery", e);
            break;
        }
        not_ready_seen();
        if (!block)
            return 0;
        pause_poll(&n);
    }
    cudaEventDestroy(h.ev);
    req->active = 0;
    return rc;
}

static int req_wait(merak_req *req) { return req_poll(req, 1) < 0 ? -1 : 0; }
static int req_test(merak_req *req) { return req_poll(req, 0); }

static const struct merak_req_ops nccl_req_ops = {req_wait, req_test};

/* The end of an operation queued on ch's stream (peer: the group rank of
 * a transfer's other end, -1 for a collective): a request marks it (an
 * event), else the stream is drained.  0 or -1. */
static int finish(merak_group *g, nccl_chan *ch, merak_req *req, int peer, const char *call)
{
    if (!req)
        return drain(g, ch, call);
    nccl_req h = {.ch = ch};
    cudaError_t e = cudaEventCreateWithFlags(&h.ev, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return cuda_fail(g, ch, "cudaEventCreateWithFlags", e);
    if ((e = cudaEventRecord(h.ev, ch->stream)) != cudaSuccess) {
        cudaEventDestroy(h.ev);
        return cuda_fail(g, ch, "cudaEventRecord", e);
    }
    req->ops = &nccl_req_ops;
    req->group = g;
    req->peer = peer;
    req->active = 1;
    memcpy(req->impl, &h, sizeof h);
    return 0;
}

/* ------------------------------------------------------------------ collectives */

static int nccl_allreduce(merak_group *g, float *buf, size_t n, merak_req *req)
{
    nccl_chan *ch = &state(g)->coll;
    if (begin(g, ch, "ncclAllReduce") < 0 ||
        settle(g, ch, "ncclAllReduce", ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, ch->comm, ch->stream)) < 0)
        return -1;
    return finish(g, ch, req, -1, "ncclAllReduce");
}

static int nccl_broadcast(merak_group *g, void *buf, size_t bytes, int root)
{
    nccl_chan *ch = &state(g)->coll;
    if (begin(g, ch, "ncclBroadcast") < 0 ||
        settle(g, ch, "ncclBroadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root, ch->comm, ch->stream)) < 0)
        return -1;
    return finish(g, ch, NULL, -1, "ncclBroadcast");
}

/* Whether every rank has the same count. */
static int equal_counts(const merak_group *g, const int *counts)
{
    for (int r = 1; r < g->size; r++)
        if (counts[r] != counts[0])
            return 0;
    return 1;
}

/* Ends an NCCL group of calls on ch (the first failed call's result, else
 * ncclGroupEnd's), settled.  0 or -1. */
static int group_end(merak_group *g, nccl_chan *ch, const char *call, ncclResult_t first)
{
    const ncclResult_t end = ncclGroupEnd();
    return settle(g, ch, call, first != ncclSuccess && first != ncclInProgress ? first : end);
}

static int nccl_reduce_scatter(merak_group *g, const float *send, float *recv, const int *counts)
{
    nccl_chan *ch = &state(g)->coll;
    if (begin(g, ch, "ncclReduceScatter") < 0)
        return -1;
    if (equal_counts(g, counts)) {
        if (settle(g, ch, "ncclReduceScatter", ncclReduceScatter(send, recv, (size_t)counts[0], ncclFloat32,
                                                                 ncclSum, ch->comm, ch->stream)) < 0)
            return -1;
        return finish(g, ch, NULL, -1, "ncclReduceScatter");
    }
    ncclResult_t first = ncclGroupStart();
    size_t off = 0;
    for (int r = 0; r < g->size && (first == ncclSuccess || first == ncclInProgress); off += (size_t)counts[r], r++)
        first = ncclReduce(send + off, recv, (size_t)counts[r], ncclFloat32, ncclSum, r, ch->comm, ch->stream);
    if (group_end(g, ch, "ncclReduce (reduce-scatter of unequal blocks)", first) < 0)
        return -1;
    return finish(g, ch, NULL, -1, "ncclReduce");
}

static int nccl_allgather(merak_group *g, float *buf, const int *counts)
{
    nccl_chan *ch = &state(g)->coll;
    if (begin(g, ch, "ncclAllGather") < 0)
        return -1;
    if (equal_counts(g, counts)) {
        const size_t c = (size_t)counts[0];
        if (settle(g, ch, "ncclAllGather", ncclAllGather(buf + c * (size_t)g->rank, buf, c, ncclFloat32, ch->comm,
                                                         ch->stream)) < 0)
            return -1;
        return finish(g, ch, NULL, -1, "ncclAllGather");
    }
    ncclResult_t first = ncclGroupStart();
    size_t off = 0;
    for (int r = 0; r < g->size && (first == ncclSuccess || first == ncclInProgress); off += (size_t)counts[r], r++)
        first = ncclBroadcast(buf + off, buf + off, (size_t)counts[r], ncclFloat32, r, ch->comm, ch->stream);
    if (group_end(g, ch, "ncclBroadcast (all-gather of unequal blocks)", first) < 0)
        return -1;
    return finish(g, ch, NULL, -1, "ncclBroadcast");
}

/* ------------------------------------------------------------------ point-to-point
 *
 * One communicator of two ranks per link: a sender, a receiver and a kind
 * of message (tag & 1: activations 0, gradients 1), for every ordered pair
 * of ring neighbours of the group (r and r+1 mod size, both ways: the
 * interleaved schedule's last stage sends to its first), each on a stream
 * of its own.  NCCL's send and receive carry no tag: the k-th send of a
 * link meets its k-th receive, which the schedule keeps (schedule.h); and
 * no link waits behind another's operation, as the transfers of one
 * communicator would (two stages each receiving before sending on a shared
 * communicator would wait for each other for ever).  The sender is rank 0
 * of a link's communicator, the receiver rank 1. */

static nccl_chan *link_for(const merak_group *g, int src, int dst, int kind)
{
    const nccl_group *s = state(g);
    for (int i = 0; s && i < s->nlinks; i++)
        if (s->link_ends[i][0] == src && s->link_ends[i][1] == dst && s->link_ends[i][2] == kind)
            return &s->links[i];
    return NULL;
}

static const char *kind_name(int kind) { return kind ? "gradients" : "activations"; }

static int nccl_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    nccl_chan *ch = link_for(g, g->rank, peer, tag & 1);
    if (!ch)
        return merak_comm_fail(g, "ncclSend of %s to %s rank %d: not a neighbour on the ring (no NCCL link)",
                               kind_name(tag & 1), merak_group_name(g->kind), peer);
    if (begin(g, ch, "ncclSend") < 0 ||
        settle(g, ch, "ncclSend", ncclSend(buf, bytes, ncclUint8, 1, ch->comm, ch->stream)) < 0)
        return -1;
    return finish(g, ch, req, peer, "ncclSend");
}

static int nccl_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    nccl_chan *ch = link_for(g, peer, g->rank, tag & 1);
    if (!ch)
        return merak_comm_fail(g, "ncclRecv of %s from %s rank %d: not a neighbour on the ring (no NCCL link)",
                               kind_name(tag & 1), merak_group_name(g->kind), peer);
    if (begin(g, ch, "ncclRecv") < 0 ||
        settle(g, ch, "ncclRecv", ncclRecv(buf, bytes, ncclUint8, 0, ch->comm, ch->stream)) < 0)
        return -1;
    return finish(g, ch, req, peer, "ncclRecv");
}

/* The links of a group of n ranks, in one order on every rank: ends[i] =
 * sender, receiver, kind.  Returns how many (at most 4n). */
static int ring_links(int n, int (*ends)[3])
{
    int k = 0;
    for (int r = 0; r < n; r++)
        for (int way = 0; way < 2; way++) {
            const int a = way ? (r + 1) % n : r, b = way ? r : (r + 1) % n;
            int seen = a == b;
            for (int i = 0; i < k && !seen; i++)
                seen = ends[i][0] == a && ends[i][1] == b;
            for (int kind = 0; kind < 2 && !seen; kind++, k++) {
                ends[k][0] = a;
                ends[k][1] = b;
                ends[k][2] = kind;
            }
        }
    return k;
}

/* A stream of its own for ch, named; 0, or -1 with err. */
static int chan_stream(nccl_chan *ch, char *err, size_t errlen)
{
    const cudaError_t e = cudaStreamCreateWithFlags(&ch->stream, cudaStreamNonBlocking);
    return e == cudaSuccess ? 0 : merak_errf(err, errlen, "a stream for the NCCL of %s: %s", ch->name,
                                             cudaGetErrorString(e));
}

static void chan_close(merak_comm *c, nccl_chan *ch);

/* Waits for st, polling: 0, or -1 when the watchdog asked c to abort
 * meanwhile or the stream failed (e). */
static int stream_done(const merak_comm *c, cudaStream_t st, cudaError_t *e)
{
    unsigned n = 0;
    for (;;) {
        *e = cudaStreamQuery(st);
        if (*e == cudaSuccess)
            return 0;
        if (*e != cudaErrorNotReady || merak_abort_asked(c))
            return -1;
        not_ready_seen();
        pause_poll(&n);
    }
}

/* NCCL connects two ranks on their first send and receive, and the
 * connecting waits for the peer: a pipeline's first receive on one link
 * (a gradient, say) would wait there while the peer waits for a transfer
 * on another link (an activation) this rank has yet to post.  So every
 * link moves one byte here, all in one NCCL group, while every rank of
 * the group is here.  0, or -1 with err. */
static int links_connect(merak_group *g, char *err, size_t errlen)
{
    nccl_group *s = state(g);
    void *byte = NULL;
    cudaError_t e = cudaMalloc(&byte, 256);
    if (e != cudaSuccess)
        return merak_errf(err, errlen, "cudaMalloc for connecting the %s group's NCCL links: %s",
                          merak_group_name(g->kind), cudaGetErrorString(e));
    int rc = 0;
    ncclResult_t first = ncclGroupStart();
    for (int i = 0; i < s->nlinks && (first == ncclSuccess || first == ncclInProgress); i++) {
        nccl_chan *ch = &s->links[i];
        first = s->link_ends[i][0] == g->rank ? ncclSend(byte, 1, ncclUint8, 1, ch->comm, ch->stream)
                                               : ncclRecv(byte, 1, ncclUint8, 0, ch->comm, ch->stream);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (first == ncclSuccess || first == ncclInProgress)
        first = end;
    for (int i = 0; i < s->nlinks && rc == 0; i++) {
        nccl_chan *ch = &s->links[i];
        ncclResult_t q = settled(g->comm, ch->comm, first == ncclInProgress ? ncclInProgress : first);
        if (q == ncclSuccess && stream_done(g->comm, ch->stream, &e) < 0)
            rc = merak_errf(err, errlen, "connecting %s: %s", ch->name,
                            e != cudaSuccess && e != cudaErrorNotReady ? cudaGetErrorString(e)
                                                                       : "aborted after the communication timeout");
        else if (q != ncclSuccess) {
            const char *last = ncclGetLastError(ch->comm);
            rc = merak_errf(err, errlen, "connecting %s (a first send and receive) failed: %s%s%s", ch->name,
                            ncclGetErrorString(q), last && *last ? ": " : "", last ? last : "");
        }
    }
    if (rc == 0)
        cudaFree(byte);   /* (every stream using it has finished) */
    return rc;            /* (else left allocated: a stream may still use it) */
}

/* Every link this rank is an end of: the senders' unique ids gathered over
 * the group's MPI communicator (each rank makes those of the links it
 * sends on), then their communicators made in one NCCL group call. */
static int nccl_p2p_open(merak_group *g, char *err, size_t errlen)
{
    nccl_group *s = state(g);
    if (s->links)
        return 0;
    const int n = g->size;
    int (*ends)[3] = calloc((size_t)(4 * n), sizeof *ends);
    typedef struct {
        int ok;
        ncclUniqueId id[4];   /* this rank's sending links, in ring_links' order */
    } ids_msg;
    ids_msg *all = calloc((size_t)n, sizeof *all);
    if (!ends || !all) {
        free(ends), free(all);
        return merak_errf(err, errlen, "out of memory");
    }
    const int nl = ring_links(n, ends);
    ids_msg mine;
    memset(&mine, 0, sizeof mine);
    mine.ok = 1;
    ncclResult_t r = ncclSuccess;
    for (int i = 0, j = 0; i < nl && mine.ok; i++)
        if (ends[i][0] == g->rank)
            mine.ok = (r = ncclGetUniqueId(&mine.id[j++])) == ncclSuccess;
    int rc = 0;
    if (MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, g->mpi) != MPI_SUCCESS)
        rc = merak_errf(err, errlen, "gathering the %s group's NCCL link ids over MPI failed",
                        merak_group_name(g->kind));
    for (int q = 0; q < n && rc == 0; q++)
        if (!all[q].ok)
            rc = merak_errf(err, errlen, "ncclGetUniqueId for the %s group's links failed on its rank %d%s%s",
                            merak_group_name(g->kind), q, q == g->rank ? ": " : "",
                            q == g->rank ? ncclGetErrorString(r) : "");
    /* this rank's links, and their communicators */
    int mn = 0;
    for (int i = 0; i < nl; i++)
        mn += ends[i][0] == g->rank || ends[i][1] == g->rank;
    s->links = rc == 0 ? calloc((size_t)(mn ? mn : 1), sizeof *s->links) : NULL;
    s->link_ends = rc == 0 ? calloc((size_t)(mn ? mn : 1), sizeof *s->link_ends) : NULL;
    if (rc == 0 && (!s->links || !s->link_ends))
        rc = merak_errf(err, errlen, "out of memory");
    const int grouped = rc == 0;
    ncclResult_t first = grouped ? ncclGroupStart() : ncclSuccess;
    for (int i = 0, m = 0; i < nl && rc == 0; i++) {
        const int src = ends[i][0], dst = ends[i][1];
        if (src != g->rank && dst != g->rank)
            continue;
        /* the id: the j-th sending link of its sender */
        int j = 0;
        for (int p = 0; p < i; p++)
            j += ends[p][0] == src;
        nccl_chan *ch = &s->links[m];
        memcpy(s->link_ends[m], ends[i], sizeof ends[i]);
        snprintf(ch->name, sizeof ch->name, "the %s link %d->%d (%s)", merak_group_name(g->kind), src, dst,
                 kind_name(ends[i][2]));
        s->nlinks = ++m;
        if (chan_stream(ch, err, errlen) < 0) {
            rc = -1;
            break;
        }
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        const ncclResult_t q = ncclCommInitRankConfig(&ch->comm, 2, all[src].id[j], src == g->rank ? 0 : 1, &cfg);
        if (first == ncclSuccess || first == ncclInProgress)
            first = q;
    }
    if (grouped) {
        const ncclResult_t end = ncclGroupEnd();
        if (first == ncclSuccess || first == ncclInProgress)
            first = end;
    }
    for (int i = 0; i < s->nlinks && rc == 0; i++) {
        nccl_chan *ch = &s->links[i];
        const ncclResult_t q = settled(g->comm, ch->comm, first == ncclInProgress ? ncclInProgress : first);
        if (q != ncclSuccess) {
            const char *last = ncclGetLastError(ch->comm);
            rc = merak_errf(err, errlen, "ncclCommInitRankConfig for %s failed: %s%s%s", ch->name,
                            ncclGetErrorString(q), last && *last ? ": " : "", last ? last : "");
        }
    }
    if (rc == 0)
        rc = links_connect(g, err, errlen);
    if (rc < 0) {
        /* abort, which NCCL allows at any time (a communicator still
         * initialising may not be finalised) */
        for (int i = 0; s->links && i < s->nlinks; i++) {
            abort_chan(&s->links[i]);
            chan_close(g->comm, &s->links[i]);
        }
        free(s->links), free(s->link_ends);
        s->links = NULL, s->link_ends = NULL, s->nlinks = 0;
        if (merak_abort_asked(g->comm))
            merak_abort_done(g->comm);
    }
    free(ends), free(all);
    return rc;
}

/* ------------------------------------------------------------------ open, close */

/* Flushes what is in flight on ch and frees it (aborts it if that fails;
 * an aborted communicator was freed by ncclCommAbort), and its stream. */
static void chan_close(merak_comm *c, nccl_chan *ch)
{
    if (ch->comm && !ch->broken) {
        const ncclResult_t r = settled(c, ch->comm, ncclCommFinalize(ch->comm));
        if (r == ncclSuccess) {
            ncclCommDestroy(ch->comm);
        } else {
            ncclCommAbort(ch->comm);
            if (merak_abort_asked(c))
                merak_abort_done(c);
        }
    }
    ch->comm = NULL;
    if (ch->stream)
        cudaStreamDestroy(ch->stream);
    ch->stream = NULL;
}

static void free_state(merak_comm *c, nccl_group *s)
{
    for (int i = 0; i < s->nlinks; i++)
        chan_close(c, &s->links[i]);
    free(s->links);
    free(s->link_ends);
    chan_close(c, &s->coll);
    if (s->ready)
        cudaEventDestroy(s->ready);
    free(s);
}

static int nccl_open(merak_group *g, void *stream, char *err, size_t errlen)
{
    nccl_group *s = calloc(1, sizeof *s);
    if (!s)
        return merak_errf(err, errlen, "out of memory");
    s->compute = (cudaStream_t)stream;
    snprintf(s->coll.name, sizeof s->coll.name, "the %s group", merak_group_name(g->kind));
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
        free_state(g->comm, s);
        return merak_errf(err, errlen, "broadcasting the %s group's NCCL id over MPI failed", merak_group_name(g->kind));
    }
    if (!msg.ok) {
        free_state(g->comm, s);
        return merak_errf(err, errlen, "ncclGetUniqueId for the %s group failed on its rank 0%s%s",
                          merak_group_name(g->kind), g->rank == 0 ? ": " : "", g->rank == 0 ? ncclGetErrorString(r) : "");
    }
    cudaError_t e = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming);
    if (e != cudaSuccess || chan_stream(&s->coll, err, errlen) < 0) {
        free_state(g->comm, s);
        return e != cudaSuccess ? merak_errf(err, errlen, "an event for the %s group's NCCL: %s",
                                             merak_group_name(g->kind), cudaGetErrorString(e))
                                : -1;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&s->coll.comm, g->size, msg.id, g->rank, &cfg);
    r = settled(g->comm, s->coll.comm, r);   /* (two statements: s->coll.comm is set by the call) */
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(s->coll.comm);
        merak_errf(err, errlen, "ncclCommInitRankConfig for the %s group (rank %d of %d) failed: %s%s%s",
                   merak_group_name(g->kind), g->rank, g->size, ncclGetErrorString(r), last && *last ? ": " : "",
                   last ? last : "");
        if (s->coll.comm)
            ncclCommAbort(s->coll.comm);
        s->coll.comm = NULL;
        if (merak_abort_asked(g->comm))
            merak_abort_done(g->comm);
        free_state(g->comm, s);
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
    free_state(g->comm, s);
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
    .p2p_open = nccl_p2p_open,
    .send = nccl_send,
    .recv = nccl_recv,
};
