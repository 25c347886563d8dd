/*
 * comm_ucx.c - the pipeline group's point-to-point over UCX (ucp tag API).
 *
 * Every member starts one worker; the workers' addresses travel over the
 * group's MPI communicator (an all-gather) and each rank connects an
 * endpoint to every other member.  A message from group rank s with tag t
 * carries the UCX tag (s << 32) | t and is received with a full mask, which
 * is MPI's (source, tag) matching.  UCX moves data only when progressed, so
 * waiting progresses the worker; when nothing moves for a while the waiter
 * yields the core, so ranks that outnumber cores do not starve the peer
 * they are waiting for.
 */
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "comm_impl.h"
#include "errf.h"

typedef struct merak_ucx merak_ucx;
struct merak_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    MPI_Comm comm;
    int size, rank;
    ucp_ep_h *eps;                   /* [size], NULL for this rank */
    unsigned idle;                   /* waiting progress calls in a row that moved nothing */
};

/* What a request in flight keeps in merak_req.impl. */
typedef struct pending {
    void *request;                   /* UCX's request */
    size_t expect;                   /* receive: its size; send: SIZE_MAX */
} pending;
_Static_assert(sizeof(pending) <= sizeof(((merak_req *)0)->impl), "merak_req.impl too small");

/* After this many idle progress calls, each further one yields the core. */
enum { SPIN_BEFORE_YIELD = 64 };

static ucp_tag_t make_tag(int src, int tag)
{
    return ((ucp_tag_t)(uint32_t)src << 32) | (uint32_t)tag;
}

/* Lets transfers move (between other work: a test, a poll); did any? */
static int progress(merak_ucx *u) { return ucp_worker_progress(u->worker) != 0; }

/* The same while waiting: when nothing moves for a while, yields the core
 * (to the ranks sharing it) on every further call. */
static void wait_progress(merak_ucx *u)
{
    if (progress(u))
        u->idle = 0;
    else if (++u->idle >= SPIN_BEFORE_YIELD)
        sched_yield();
}

static void free_ucx(merak_ucx *u)
{
    if (!u)
        return;
    if (u->addr)
        ucp_worker_release_address(u->worker, u->addr);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    free(u->eps);
    free(u);
}

/* This rank's context, worker and address; 0 or -1 with why. */
static int start_worker(merak_ucx *u, char *why, size_t len)
{
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return merak_errf(why, len, "UCX: reading its configuration (UCX_* variables) failed: %s",
                          ucs_status_string(st));
    ucp_params_t cp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        .features = UCP_FEATURE_TAG,
        .estimated_num_eps = (size_t)u->size,
    };
    st = ucp_init(&cp, cfg, &u->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        u->ctx = NULL;
        const char *tls = getenv("UCX_TLS"), *dev = getenv("UCX_NET_DEVICES");
        return merak_errf(why, len, "UCX: ucp_init failed: %s (UCX_TLS=%s, UCX_NET_DEVICES=%s)",
                          ucs_status_string(st), tls ? tls : "unset", dev ? dev : "unset");
    }
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,   /* only the main thread communicates */
    };
    if ((st = ucp_worker_create(u->ctx, &wp, &u->worker)) != UCS_OK) {
        u->worker = NULL;
        return merak_errf(why, len, "UCX: cannot create a worker: %s", ucs_status_string(st));
    }
    if ((st = ucp_worker_get_address(u->worker, &u->addr, &u->addr_len)) != UCS_OK) {
        u->addr = NULL;
        return merak_errf(why, len, "UCX: cannot get the worker's address: %s", ucs_status_string(st));
    }
    if (u->addr_len > INT32_MAX)
        return merak_errf(why, len, "UCX: worker address of %zu bytes", u->addr_len);
    return 0;
}

/* Every member's address, then an endpoint to each peer. */
static int connect_peers(merak_ucx *u, char *why, size_t len)
{
    int n = u->size, rc = -1;
    int *lens = malloc((size_t)n * sizeof *lens), *displs = malloc((size_t)n * sizeof *displs);
    unsigned char *all = NULL;
    int mine = (int)u->addr_len;
    if (!lens || !displs ||
        MPI_Allgather(&mine, 1, MPI_INT, lens, 1, MPI_INT, u->comm) != MPI_SUCCESS)
        goto out;
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        displs[r] = (int)total;
        total += (size_t)lens[r];
    }
    if (total > INT32_MAX || !(all = malloc(total)) ||
        MPI_Allgatherv(u->addr, mine, MPI_BYTE, all, lens, displs, MPI_BYTE, u->comm) != MPI_SUCCESS)
        goto out;
    for (int r = 0; r < n; r++) {
        if (r == u->rank)
            continue;
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            .address = (const ucp_address_t *)(all + displs[r]),
            .err_mode = UCP_ERR_HANDLING_MODE_NONE,
        };
        ucs_status_t st = ucp_ep_create(u->worker, &ep, &u->eps[r]);
        if (st != UCS_OK) {
            u->eps[r] = NULL;
            merak_errf(why, len, "UCX: cannot connect to pipeline rank %d: %s", r, ucs_status_string(st));
            goto out;
        }
    }
    rc = 0;
out:
    if (rc < 0 && !why[0])
        merak_errf(why, len, "UCX: exchanging worker addresses failed (out of memory or MPI error)");
    free(lens), free(displs), free(all);
    return rc;
}

/* Did every member succeed?  Reports this rank's reason, or the peers'. */
static int all_ok(merak_ucx *u, int ok, const char *why, char *err, size_t errlen)
{
    int all = ok;
    if (MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, u->comm) != MPI_SUCCESS)
        all = 0;
    if (all)
        return 0;
    return ok ? merak_errf(err, errlen, "UCX: another rank of the pipeline group could not start UCX")
              : merak_errf(err, errlen, "%s", why);
}

/* Waits for requests to finish, progressing; frees them. */
static void drain(merak_ucx *u, void **reqs, int n)
{
    for (int i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        while (ucp_request_check_status(reqs[i]) == UCS_INPROGRESS)
            wait_progress(u);
        ucp_request_free(reqs[i]);
    }
}

static void close_ucx(merak_ucx *u);

static int ucx_open(merak_group *g, char *err, size_t errlen)
{
    MPI_Comm comm = g->mpi;
    merak_ucx *u = calloc(1, sizeof *u);
    if (!u)
        return merak_errf(err, errlen, "out of memory");
    u->comm = comm;
    MPI_Comm_size(comm, &u->size);
    MPI_Comm_rank(comm, &u->rank);
    char why[256] = "";
    int ok = (u->eps = calloc((size_t)u->size, sizeof *u->eps)) != NULL;
    if (!ok)
        merak_errf(why, sizeof why, "out of memory");
    ok = ok && start_worker(u, why, sizeof why) == 0;
    if (all_ok(u, ok, why, err, errlen) < 0) {
        free_ucx(u);
        return -1;
    }
    ok = connect_peers(u, why, sizeof why) == 0;
    if (all_ok(u, ok, why, err, errlen) < 0) {
        close_ucx(u);
        return -1;
    }
    g->p2p_state = u;
    return 0;
}

static void ucx_close(merak_group *g)
{
    close_ucx(g->p2p_state);
    g->p2p_state = NULL;
}

static void close_ucx(merak_ucx *u)
{
    if (!u)
        return;
    /* Flush and close every endpoint, then leave together: a rank that
     * destroyed its worker early could strand a peer's last flush. */
    void **reqs = calloc((size_t)u->size, sizeof *reqs);
    for (int r = 0; r < u->size; r++) {
        if (!u->eps[r])
            continue;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = 0};
        void *q = ucp_ep_close_nbx(u->eps[r], &p);
        if (!q || UCS_PTR_IS_ERR(q))
            continue;
        if (reqs)
            reqs[r] = q;    /* all closes in flight at once */
        else
            drain(u, &q, 1);
    }
    if (reqs)
        drain(u, reqs, u->size);
    free(reqs);
    MPI_Request b;
    if (MPI_Ibarrier(u->comm, &b) == MPI_SUCCESS) {
        int done = 0;
        while (MPI_Test(&b, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
            wait_progress(u);
    }
    free_ucx(u);
}

/* "UCX send to pipeline rank 1 (rank 5 on host) failed: why"; -1 */
static int fail(merak_group *g, int send, int peer, const char *why)
{
    char who[128];
    return merak_comm_fail(g, "UCX %s %s failed: %s", send ? "send to" : "receive from",
                           merak_group_peer(g, peer, who, sizeof who), why);
}

/* 1 finished (freed, req inactive), 0 in flight, -1 failed (freed, recorded). */
static int check(merak_req *req)
{
    pending p;
    memcpy(&p, req->impl, sizeof p);
    ucp_tag_recv_info_t info = {0};
    int send = p.expect == SIZE_MAX;
    ucs_status_t st = send ? ucp_request_check_status(p.request)
                           : ucp_tag_recv_request_test(p.request, &info);
    if (st == UCS_INPROGRESS)
        return 0;
    ucp_request_free(p.request);
    req->active = 0;
    if (st != UCS_OK)
        return fail(req->group, send, req->peer, ucs_status_string(st));
    if (!send && info.length != p.expect) {
        char why[96];
        snprintf(why, sizeof why, "%zu bytes arrived, %zu expected", info.length, p.expect);
        return fail(req->group, 0, req->peer, why);
    }
    return 1;
}

static int req_wait(merak_req *req)
{
    int rc;
    while ((rc = check(req)) == 0)
        wait_progress((merak_ucx *)req->group->p2p_state);
    return rc < 0 ? -1 : 0;
}

static int req_test(merak_req *req)
{
    (void)progress((merak_ucx *)req->group->p2p_state);
    return check(req);
}

static const struct merak_req_ops ucx_req = {req_wait, req_test};

/* Records UCX's answer to a send or receive in req, or waits for it when
 * the caller asked for a blocking operation. */
static int started(merak_group *g, ucs_status_ptr_t r, int peer, size_t expect, merak_req *req)
{
    if (UCS_PTR_IS_ERR(r))
        return fail(g, expect == SIZE_MAX, peer, ucs_status_string(UCS_PTR_STATUS(r)));
    if (!r) { /* a send finished at once (receives always return a request) */
        if (req)
            req->active = 0;
        return expect == SIZE_MAX ? 0 : fail(g, 0, peer, "no request for a receive");
    }
    pending p = {r, expect};
    merak_req tmp, *q = req ? req : &tmp;
    memset(q, 0, sizeof *q);
    q->ops = &ucx_req;
    q->group = g;
    q->peer = peer;
    memcpy(q->impl, &p, sizeof p);
    q->active = 1;
    return req ? 0 : req_wait(q);
}

static int ucx_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    merak_ucx *u = g->p2p_state;
    if (!u->eps[peer])
        return fail(g, 1, peer, "no endpoint");
    ucp_request_param_t p = {.op_attr_mask = 0};
    ucs_status_ptr_t r = ucp_tag_send_nbx(u->eps[peer], buf, bytes, make_tag(u->rank, tag), &p);
    return started(g, r, peer, SIZE_MAX, req);
}

static int ucx_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    if (bytes == SIZE_MAX)
        return fail(g, 0, peer, "message too large");
    /* Always a request (UCX 1.13 leaves recv_info unfilled when a receive
     * completes at once), so the received length can be checked. */
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
    ucs_status_ptr_t r = ucp_tag_recv_nbx(((merak_ucx *)g->p2p_state)->worker, buf, bytes, make_tag(peer, tag),
                                          (ucp_tag_t)-1, &p);
    return started(g, r, peer, bytes, req);
}

static void ucx_progress(merak_group *g) { (void)progress(g->p2p_state); }

const merak_p2p_ops merak_ucx_p2p = {.name = "ucx", .open = ucx_open, .close = ucx_close, .send = ucx_send,
                                     .recv = ucx_recv, .progress = ucx_progress};
