/*
 * comm.c - the communication calls the runtime makes: byte counting, the
 * trivial case of a group of one rank, and dispatch to the group's
 * backend tables (comm_impl.h).  Also the one-process grid, which needs no
 * MPI at all, and the agreement on failures every phase of a job uses.
 * What every part of runtime/comm says about groups is in group.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_impl.h"
#include "errf.h"

/* ------------------------------------------------------------------ the comm */

static void close_dcoll(merak_comm *c);

/* Started by mpirun or srun (Open MPI, PMIx or PMI environment)? */
static int launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* One process: every group has one member and no backend. */
static int init_single(merak_comm *c, char *err, size_t errlen)
{
    static int zero;
    /* the environment must describe one process too: MERAK_DP/TP/PP of
     * more than one rank, or a MERAK_RANK of another, are errors, never a
     * silent run of something else */
    int dp = 0, tp = 0, pp = 0;
    const char *vars[2] = {"MERAK_RANK", "MERAK_WORLD_SIZE"}, *want[2] = {"0", "1"};
    if (merak_grid_degrees(&dp, &tp, &pp, 1, err, errlen) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s && strcmp(s, want[i]) != 0)
            return merak_errf(err, errlen, "%s=%s, but this is one process (not started by mpirun or srun --mpi)",
                              vars[i], s);
    }
    if (merak_grid_init(&c->grid, 1, 1, 1, 1, 0, err, errlen) < 0 || merak_grid_check_env(&c->grid, err, errlen) < 0)
        return -1;
    c->hosts = calloc(1, sizeof *c->hosts);
    if (!c->hosts)
        return merak_errf(err, errlen, "out of memory");
    if (gethostname(c->hosts[0], sizeof c->hosts[0]) != 0)
        snprintf(c->hosts[0], sizeof c->hosts[0], "%s", "localhost");
    c->hosts[0][sizeof c->hosts[0] - 1] = 0;   /* gethostname may not terminate a cut name */
    c->world = MPI_COMM_NULL;
    for (int k = 0; k < MERAK_GROUP_COUNT_; k++) {
        if (k == MERAK_GROUP_TIED)
            continue;   /* no first and last stage to tie */
        c->groups[k] = (merak_group){.kind = k, .comm = c, .size = 1, .rank = 0, .world = &zero,
                                     .mpi = MPI_COMM_NULL};
        c->have[k] = 1;
    }
    return 0;
}

int merak_comm_init(merak_comm **out, int dp, int tp, int pp, char *err, size_t errlen)
{
    *out = NULL;
    merak_comm *c = calloc(1, sizeof *c);
    if (!c)
        return merak_errf(err, errlen, "out of memory");
    int over_mpi = launched_by_mpi() || dp > 1 || tp > 1 || pp > 1;
    if ((over_mpi ? merak_world_backend()->init(c, dp, tp, pp, err, errlen)
                  : init_single(c, err, errlen)) < 0) {
        c->started_mpi = 0;   /* MPI ends at exit, after rank 0 has reported */
        merak_comm_finalize(c);
        return -1;
    }
    *out = c;
    return 0;
}

void merak_comm_finalize(merak_comm *c)
{
    if (!c)
        return;
    close_dcoll(c);   /* timed: a dead peer must not hang the finalize */
    merak_watch_stop(c);
    if (c->mpi)
        merak_world_backend()->free(c);   /* ends MPI if we started it */
    free(c->hosts);
    free(c);
}

const merak_grid *merak_comm_grid(const merak_comm *c) { return &c->grid; }
const char *merak_comm_error(const merak_comm *c) { return c->err; }
const char *merak_comm_placement(const merak_comm *c) { return c->place; }

typedef struct host_rank {
    const char *host;
    int rank;
} host_rank;

/* by host name, then rank */
static int by_host(const void *a, const void *b)
{
    const host_rank *x = a, *y = b;
    int c = strcmp(x->host, y->host);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int merak_comm_nodes(const merak_comm *c, int *node)
{
    const int n = c->grid.world;
    host_rank *hr = malloc((size_t)n * sizeof *hr);
    if (!hr)
        return -1;
    for (int r = 0; r < n; r++)
        hr[r] = (host_rank){c->hosts ? c->hosts[r] : "", r};
    qsort(hr, (size_t)n, sizeof *hr, by_host);
    /* numbered in the order of the host names: the same on every rank */
    for (int i = 0, id = 0; i < n; i++) {
        id += i > 0 && strcmp(hr[i].host, hr[i - 1].host) != 0;
        node[hr[i].rank] = id;
    }
    free(hr);
    return 0;
}

merak_group *merak_comm_group(const merak_comm *c, merak_group_kind k)
{
    return c->have[k] ? (merak_group *)&c->groups[k] : NULL;
}

uint64_t merak_group_bytes(const merak_group *g) { return g->bytes; }

int merak_comm_agree(merak_comm *c, int st, char *err, size_t errlen)
{
    merak_group *w = merak_comm_group(c, MERAK_GROUP_WORLD);
    int world = c->grid.world, first = -1;
    double *hot = calloc((size_t)world, sizeof *hot);  /* per rank: minus its status */
    if (!hot)
        return merak_errf(err, errlen, "out of memory");
    if (st < 0)
        hot[c->grid.rank] = st == MERAK_USAGE ? -MERAK_USAGE : -MERAK_FAILED;
    int rc = merak_allreduce_f64(w, hot, (size_t)world), hot_code = MERAK_FAILED;
    for (int r = 0; r < world && first < 0; r++)
        if (hot[r] > 0) {
            first = r;
            hot_code = -(int)hot[r];
        }
    free(hot);
    if (rc < 0)
        return merak_errf(err, errlen, "%s", c->err);
    if (first < 0)
        return 0;
    char msg[512] = "";
    if (c->grid.rank == first)
        snprintf(msg, sizeof msg, "%s", err);
    if (merak_broadcast(w, msg, sizeof msg, first) < 0)
        return merak_errf(err, errlen, "%s", c->err);
    if (c->grid.rank != first)
        snprintf(err, errlen, "%s", msg);
    return hot_code;
}

/* ------------------------------------------------------------------ device staging */

void merak_comm_set_devmem(merak_comm *c, const merak_devmem *m) { c->devmem = m; }

/* 1 if p is device memory that must be staged through the host. */
static int on_device(const merak_group *g, const void *p)
{
    const merak_devmem *m = g->comm->devmem;
    return m && p && m->is_device(p);
}

/* A host copy of the device buffer dev (copied in when in is set), or NULL
 * with the failure recorded. */
static void *stage_in(merak_group *g, const void *dev, size_t bytes, int in)
{
    void *h = malloc(bytes ? bytes : 1);
    if (!h) {
        merak_comm_fail(g, "staging %zu bytes of device memory: out of host memory", bytes);
        return NULL;
    }
    if (in && g->comm->devmem->to_host(h, dev, bytes) < 0) {
        free(h);
        merak_comm_fail(g, "copying %zu bytes from the device to stage them", bytes);
        return NULL;
    }
    return h;
}

/* Copies the staged h back into dev (when back) and frees it; 0 or -1. */
static int stage_out(merak_group *g, void *dev, void *h, size_t bytes, int back)
{
    const int rc = back ? g->comm->devmem->to_device(dev, h, bytes) : 0;
    free(h);
    return rc < 0 ? merak_comm_fail(g, "copying %zu staged bytes back to the device", bytes) : 0;
}

/* After a blocking operation on staged memory h (rc its result), or the
 * start of one with req: the request finishes the staging later. */
static int staged(merak_group *g, merak_req *req, int rc, void *dev, void *h, size_t bytes,
                  int back)
{
    if (rc < 0 || !req) {
        const int out = stage_out(g, dev, h, bytes, rc < 0 ? 0 : back);
        return rc < 0 ? rc : out;
    }
    req->staged.group = g;
    req->staged.host = h;
    req->staged.dev = dev;
    req->staged.bytes = bytes;
    req->staged.back = back;
    return 0;
}

/* A request's end: its staged copy goes back (unless rc says it failed). */
static int finish(merak_req *req, int rc)
{
    if (!req->staged.host)
        return rc;
    const int out = stage_out(req->staged.group, req->staged.dev, req->staged.host,
                              req->staged.bytes, rc < 0 ? 0 : req->staged.back);
    req->staged.host = NULL;
    return rc < 0 ? rc : out < 0 ? -1 : rc;
}

/* ------------------------------------------------------------------ dispatch */

/* A request that finished at once (a group of one). */
static int done(merak_req *req)
{
    if (req)
        req->active = 0;
    return 0;
}

/* Every operation that takes a request starts it unstaged. */
static void fresh(merak_req *req)
{
    if (req)
        req->staged.host = NULL;
}

/* The collectives an operation on buf takes: the group's device
 * collectives for device memory where it has them, else its own (host
 * memory, or device memory staged through it). */
static const merak_coll_ops *coll_for(const merak_group *g, const void *buf)
{
    return g->dcoll && on_device(g, buf) ? &g->dcoll->ops : g->coll;
}

/* Device memory that no backend reads where it is: staged through host memory. */
static int must_stage(const merak_group *g, const void *buf)
{
    return on_device(g, buf) && !g->dcoll;
}

/* The backend's collectives and blocking point-to-point, timed by the
 * watchdog while they block (a request only starts the operation:
 * merak_wait is timed). */
static int coll_allreduce(merak_group *g, const merak_coll_ops *ops, float *buf, size_t n, merak_req *req)
{
    merak_watch_enter(g, req ? "starting an all-reduce" : "all-reduce", -1);
    const int rc = ops->allreduce(g, buf, n, req);
    merak_watch_leave(g);
    return rc;
}

static int coll_broadcast(merak_group *g, const merak_coll_ops *ops, void *buf, size_t bytes, int root)
{
    merak_watch_enter(g, "broadcast", -1);
    const int rc = ops->broadcast(g, buf, bytes, root);
    merak_watch_leave(g);
    return rc;
}

static int coll_reduce_scatter(merak_group *g, const merak_coll_ops *ops, const float *send, float *recv,
                               const int *counts)
{
    merak_watch_enter(g, "reduce-scatter", -1);
    const int rc = ops->reduce_scatter(g, send, recv, counts);
    merak_watch_leave(g);
    return rc;
}

static int coll_allgather(merak_group *g, const merak_coll_ops *ops, float *buf, const int *counts)
{
    merak_watch_enter(g, "all-gather", -1);
    const int rc = ops->allgather(g, buf, counts);
    merak_watch_leave(g);
    return rc;
}

static int p2p_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    if (!req)
        merak_watch_enter(g, "a send", peer);
    const int rc = g->p2p->send(g, buf, bytes, peer, tag, req);
    merak_watch_leave(g);
    return rc;
}

static int p2p_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    if (!req)
        merak_watch_enter(g, "a receive", peer);
    const int rc = g->p2p->recv(g, buf, bytes, peer, tag, req);
    merak_watch_leave(g);
    return rc;
}

/* The same on device buffers, through the group's device table (dp2p),
 * timed even when they only start a transfer: a device library's start
 * may wait for its peer (NCCL's, while it connects). */
static int dev_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    merak_watch_enter(g, req ? "starting a send" : "a send", peer);
    const int rc = g->dcoll->send(g, buf, bytes, peer, tag, req);
    merak_watch_leave(g);
    return rc;
}

static int dev_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    merak_watch_enter(g, req ? "starting a receive" : "a receive", peer);
    const int rc = g->dcoll->recv(g, buf, bytes, peer, tag, req);
    merak_watch_leave(g);
    return rc;
}

int merak_allreduce(merak_group *g, float *buf, size_t n, merak_req *req)
{
    fresh(req);
    g->bytes += n * sizeof *buf;
    if (g->size == 1)
        return done(req);
    if (!must_stage(g, buf))
        return coll_allreduce(g, coll_for(g, buf), buf, n, req);
    float *h = stage_in(g, buf, n * sizeof *buf, 1);
    return h ? staged(g, req, coll_allreduce(g, g->coll, h, n, req), buf, h, n * sizeof *buf, 1) : -1;
}

int merak_allreduce_f64(merak_group *g, double *buf, size_t n)
{
    if (g->size == 1)
        return 0;
    merak_watch_enter(g, "all-reduce", -1);
    const int rc = g->coll->allreduce_f64(g, buf, n);
    merak_watch_leave(g);
    return rc;
}

int merak_broadcast(merak_group *g, void *buf, size_t bytes, int root)
{
    if (g->rank == root)
        g->bytes += bytes;
    if (g->size == 1)
        return 0;
    if (!must_stage(g, buf))
        return coll_broadcast(g, coll_for(g, buf), buf, bytes, root);
    void *h = stage_in(g, buf, bytes, g->rank == root);
    /* only the receivers' buffers change */
    return h ? staged(g, NULL, coll_broadcast(g, g->coll, h, bytes, root), buf, h, bytes, g->rank != root) : -1;
}

int merak_reduce_scatter(merak_group *g, const float *send, float *recv, const int *counts)
{
    size_t n = 0;
    for (int r = 0; r < g->size; r++)
        n += (size_t)counts[r];
    g->bytes += n * sizeof *send;
    const size_t mine = (size_t)counts[g->rank] * sizeof *recv;
    if (!on_device(g, send)) {
        if (g->size == 1) { /* host buffers: the sum of one is a copy */
            memmove(recv, send, n * sizeof *send);
            return 0;
        }
        return coll_reduce_scatter(g, g->coll, send, recv, counts);
    }
    if (g->dcoll)   /* (never for a group of one) */
        return coll_reduce_scatter(g, &g->dcoll->ops, send, recv, counts);
    float *hs = stage_in(g, send, n * sizeof *send, 1);
    if (!hs)
        return -1;
    if (g->size == 1) /* the sum of one: the copy back is the result */
        return staged(g, NULL, 0, recv, hs, mine, 1);
    float *hr = stage_in(g, recv, mine, 0);
    int rc = hr ? coll_reduce_scatter(g, g->coll, hs, hr, counts) : -1;
    free(hs);
    return hr ? staged(g, NULL, rc, recv, hr, mine, 1) : -1;
}

int merak_allgather(merak_group *g, float *buf, const int *counts)
{
    size_t n = 0;
    for (int r = 0; r < g->size; r++)
        n += (size_t)counts[r];
    g->bytes += n * sizeof *buf;
    if (g->size == 1)
        return 0;
    if (!must_stage(g, buf))
        return coll_allgather(g, coll_for(g, buf), buf, counts);
    float *h = stage_in(g, buf, n * sizeof *buf, 1);
    return h ? staged(g, NULL, coll_allgather(g, g->coll, h, counts), buf, h, n * sizeof *buf, 1) : -1;
}

int merak_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    char who[128];
    fresh(req);
    g->bytes += bytes;
    if (!g->p2p || peer < 0 || peer >= g->size || peer == g->rank)
        return merak_comm_fail(g, "send to %s: no such peer", merak_group_peer(g, peer, who, sizeof who));
    if (!on_device(g, buf))
        return p2p_send(g, buf, bytes, peer, tag, req);
    if (g->dp2p)
        return dev_send(g, buf, bytes, peer, tag, req);
    void *h = stage_in(g, buf, bytes, 1);
    return h ? staged(g, req, p2p_send(g, h, bytes, peer, tag, req), NULL, h, bytes, 0) : -1;
}

int merak_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    char who[128];
    fresh(req);
    if (!g->p2p || peer < 0 || peer >= g->size || peer == g->rank)
        return merak_comm_fail(g, "receive from %s: no such peer",
                               merak_group_peer(g, peer, who, sizeof who));
    if (!on_device(g, buf))
        return p2p_recv(g, buf, bytes, peer, tag, req);
    if (g->dp2p)
        return dev_recv(g, buf, bytes, peer, tag, req);
    void *h = stage_in(g, buf, bytes, 0);
    return h ? staged(g, req, p2p_recv(g, h, bytes, peer, tag, req), buf, h, bytes, 1) : -1;
}

int merak_wait(merak_req *req)
{
    if (!req->active)
        return finish(req, 0);
    merak_watch_enter(req->group, req->peer < 0 ? "waiting for a collective" : "waiting for a transfer", req->peer);
    const int rc = req->ops->wait(req);
    merak_watch_leave(req->group);
    return finish(req, rc);
}

int merak_test(merak_req *req)
{
    const int rc = req->active ? req->ops->test(req) : 1;
    return rc == 0 ? 0 : finish(req, rc);
}

void merak_group_progress(merak_group *g)
{
    if (g->p2p && g->p2p->progress)
        g->p2p->progress(g);
}

/* "nccl": host buffers keep the world's own point-to-point, device ones
 * take the group's device table, whose links open here. */
int merak_group_set_p2p(merak_group *g, const char *name, char *err, size_t errlen)
{
    const int dev = merak_p2p_is_device(name);
    const merak_p2p_ops *ops = dev ? merak_p2p_find(NULL) : merak_p2p_find(name);
    if (!ops || (name && merak_p2p_check(name) < 0))
        return merak_errf(err, errlen, "p2p '%s' is not %s", name, merak_p2p_names());
    if (g->size == 1)
        return 0;
    if (dev && !(g->dcoll && g->dcoll->p2p_open))
        return merak_errf(err, errlen, "p2p %s on the %s group: its device collectives are not %s's (--coll %s)",
                          name, merak_group_name(g->kind), name, name);
    g->dp2p = 0;
    if (g->p2p != ops) {
        if (g->p2p->close)
            g->p2p->close(g);
        g->p2p = merak_p2p_find(NULL);   /* the world's own, until ops is open */
        if (ops->open && ops->open(g, err, errlen) < 0)
            return -1;
        g->p2p = ops;
    }
    if (dev) {
        merak_watch_enter(g, "opening NCCL's links", -1);
        const int rc = g->dcoll->p2p_open(g, err, errlen);
        merak_watch_leave(g);
        if (rc < 0)
            return -1;
        g->dp2p = 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ device collectives */

/* Ends every group's device collectives (after what is in flight). */
static void close_dcoll(merak_comm *c)
{
    for (int k = 0; k < MERAK_GROUP_COUNT_; k++) {
        merak_group *g = &c->groups[k];
        if (c->have[k] && g->dcoll) {
            merak_watch_enter(g, "closing NCCL", -1);
            g->dcoll->close(g);
            merak_watch_leave(g);
            g->dcoll = NULL;
            g->dcoll_state = NULL;
            g->dp2p = 0;
        }
    }
}

int merak_comm_set_coll(merak_comm *c, const char *name, void *stream, char *err, size_t errlen)
{
    const merak_dcoll_ops *d = NULL;
    if (name && strcmp(name, "mpi") != 0 && !(d = merak_dcoll_find(name)))
        return merak_errf(err, errlen, "coll '%s' is not %s", name, merak_coll_names());
    close_dcoll(c);
    /* every group of two or more but the world (whose collectives carry
     * host memory: agreements, messages), in the same order on every rank */
    int st = MERAK_OK;
    char why[512] = "";
    for (int k = 0; d && k < MERAK_GROUP_COUNT_ && st == MERAK_OK; k++) {
        merak_group *g = &c->groups[k];
        if (k == MERAK_GROUP_WORLD || !c->have[k] || g->size < 2)
            continue;
        merak_watch_enter(g, "opening NCCL", -1);
        if (d->open(g, stream, why, sizeof why) < 0)
            st = MERAK_FAILED;
        else
            g->dcoll = d;
        merak_watch_leave(g);
    }
    snprintf(err, errlen, "%s", why);
    st = merak_comm_agree(c, st, err, errlen);
    if (st != MERAK_OK)
        close_dcoll(c);
    return st == MERAK_OK ? 0 : -1;
}

int merak_comm_devices_shared(merak_comm *c, double device_id)
{
    const int world = c->grid.world;
    double *ids = calloc((size_t)world, sizeof *ids);
    if (!ids)
        return -1;
    ids[c->grid.rank] = device_id;   /* the sum of the others' zeros: every rank's exact id */
    int shared = merak_allreduce_f64(merak_comm_group(c, MERAK_GROUP_WORLD), ids, (size_t)world) < 0 ? -1 : 0;
    for (int r = 0; r < world && shared == 0; r++)
        for (int q = r + 1; q < world && shared == 0; q++)   /* an id < 0: cannot tell, so maybe */
            shared = (ids[r] == ids[q] || ids[r] < 0 || ids[q] < 0) && c->hosts &&
                     strcmp(c->hosts[r], c->hosts[q]) == 0;
    free(ids);
    return shared;
}
