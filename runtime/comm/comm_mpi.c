/*
 * comm_mpi.c - the grid's groups and operations over MPI.
 *
 * Groups are MPI_Comm_split of the runtime's world by the coordinates they
 * share: tp (same dp, pp), dp (same tp, pp), pp (same dp, tp), tied (first
 * and last stage of the same dp, tp).
 */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm.h"
#include "comm_ucx.h"
#include "errf.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((merak_req *)0)->impl), "MPI_Request too large");

struct merak_group {
    merak_group_kind kind;
    MPI_Comm comm;
    int size, rank;
    uint64_t bytes;
    merak_ucx *ucx;                  /* point-to-point over UCX, or NULL */
};

struct merak_comm {
    merak_grid grid;
    int started_mpi;                 /* we called MPI_Init, so we finalize */
    MPI_Comm world;
    merak_group groups[MERAK_GROUP_COUNT_];
    int have[MERAK_GROUP_COUNT_];
};

static const char *const group_names[MERAK_GROUP_COUNT_] = {"world", "tp", "dp", "pp", "tied"};

const char *merak_group_name(merak_group_kind k) { return group_names[k]; }

/* MERAK_RANK from the Slurm plugin orders the world; else the MPI rank. */
static int merak_rank_of(int mpi_rank)
{
    const char *s = getenv("MERAK_RANK");
    if (!s || !*s)
        return mpi_rank;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0) ? mpi_rank : (int)v;
}

static int make_group(merak_comm *c, merak_group_kind k, int color, int key)
{
    merak_group *g = &c->groups[k];
    g->kind = k;
    if (MPI_Comm_split(c->world, color, key, &g->comm) != MPI_SUCCESS)
        return -1;
    if (g->comm == MPI_COMM_NULL)
        return 0;
    MPI_Comm_size(g->comm, &g->size);
    MPI_Comm_rank(g->comm, &g->rank);
    c->have[k] = 1;
    return 0;
}

/* MPI started here ends at exit, after the caller has printed whatever it
 * had to say: a rank that ends MPI first waits in MPI_Finalize for the
 * others, so no rank is torn down before rank 0 reports an error. */
static void end_mpi(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Finalize();
}

static void free_groups(merak_comm *c)
{
    for (int k = MERAK_GROUP_TP; k < MERAK_GROUP_COUNT_; k++)
        if (c->have[k]) {
            merak_group_use_mpi(&c->groups[k]);
            MPI_Comm_free(&c->groups[k].comm);
        }
    if (c->have[MERAK_GROUP_WORLD])
        MPI_Comm_free(&c->world);
}

int merak_comm_init(merak_comm **out, int dp, int tp, int pp, char *err, size_t errlen)
{
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS)
            return merak_errf(err, errlen, "MPI_Init failed");
        atexit(end_mpi);
    }
    merak_comm *c = calloc(1, sizeof *c);
    if (!c)
        return merak_errf(err, errlen, "out of memory");
    c->started_mpi = !inited;
    int mpi_rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* The same degrees everywhere: every rank computes them from the same
     * flags and environment, and reports the same error. */
    if (merak_grid_degrees(&dp, &tp, &pp, world, err, errlen) < 0 ||
        merak_grid_init(&c->grid, dp, tp, pp, world, merak_rank_of(mpi_rank), err, errlen) < 0) {
        if (mpi_rank != 0 && err && errlen)
            err[0] = 0; /* one report per job */
        free(c);    /* MPI itself ends at exit */
        return -1;
    }
    const merak_grid *g = &c->grid;
    int ok = MPI_Comm_split(MPI_COMM_WORLD, 0, g->rank, &c->world) == MPI_SUCCESS;
    c->groups[MERAK_GROUP_WORLD] = (merak_group){MERAK_GROUP_WORLD, c->world, world, g->rank, 0, NULL};
    c->have[MERAK_GROUP_WORLD] = 1;
    /* Colours: one per set of shared coordinates; keys order members. */
    ok = ok && make_group(c, MERAK_GROUP_TP, g->dp_rank + g->dp * g->pp_rank, g->tp_rank) == 0;
    ok = ok && make_group(c, MERAK_GROUP_DP, g->tp_rank + g->tp * g->pp_rank, g->dp_rank) == 0;
    ok = ok && make_group(c, MERAK_GROUP_PP, g->tp_rank + g->tp * g->dp_rank, g->pp_rank) == 0;
    int end_stage = g->pp > 1 && (g->pp_rank == 0 || g->pp_rank == g->pp - 1);
    ok = ok && make_group(c, MERAK_GROUP_TIED, end_stage ? g->tp_rank + g->tp * g->dp_rank : MPI_UNDEFINED,
                          g->pp_rank) == 0;
    if (!ok) {
        free_groups(c);
        free(c);
        return merak_errf(err, errlen, "cannot create the process groups");
    }
    *out = c;
    return 0;
}

void merak_comm_finalize(merak_comm *c)
{
    if (!c)
        return;
    free_groups(c);
    int started = c->started_mpi;
    free(c);
    if (started)
        MPI_Finalize();
}

_Noreturn void merak_comm_abort(merak_comm *c, int status)
{
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, status);
    exit(status); /* MPI_Abort does not return; this satisfies _Noreturn */
}

const merak_grid *merak_comm_grid(const merak_comm *c) { return &c->grid; }

merak_group *merak_comm_group(const merak_comm *c, merak_group_kind k)
{
    return c->have[k] ? (merak_group *)&c->groups[k] : NULL;
}

int merak_group_size(const merak_group *g) { return g->size; }
int merak_group_rank(const merak_group *g) { return g->rank; }
uint64_t merak_group_bytes(const merak_group *g) { return g->bytes; }

/* Records a started request (r must already be written: pass it only
 * after the MPI call returned). */
static int finish(int rc, merak_req *req, MPI_Request r)
{
    if (rc != MPI_SUCCESS)
        return -1;
    if (req) {
        memcpy(req->impl, &r, sizeof r);
        req->active = 1;
        req->ucx = 0;
    }
    return 0;
}

int merak_allreduce(merak_group *g, float *buf, size_t n, merak_req *req)
{
    if (n > (size_t)INT32_MAX)
        return -1;
    g->bytes += n * sizeof *buf;
    if (g->size == 1)
        return finish(MPI_SUCCESS, req, MPI_REQUEST_NULL);
    if (!req)
        return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->comm) == MPI_SUCCESS ? 0 : -1;
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->comm, &r);
    return finish(rc, req, r);
}

int merak_allreduce_f64(merak_group *g, double *buf, size_t n)
{
    if (g->size == 1)
        return 0;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, g->comm) == MPI_SUCCESS ? 0 : -1;
}

int merak_broadcast(merak_group *g, void *buf, size_t bytes, int root)
{
    if (g->rank == root)
        g->bytes += bytes;
    return MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, g->comm) == MPI_SUCCESS ? 0 : -1;
}

int merak_group_use_ucx(merak_group *g, char *err, size_t errlen)
{
    return g->ucx ? 0 : merak_ucx_open(&g->ucx, g->comm, err, errlen);
}

void merak_group_use_mpi(merak_group *g)
{
    merak_ucx_close(g->ucx);
    g->ucx = NULL;
}

void merak_group_progress(merak_group *g)
{
    if (g->ucx)
        merak_ucx_progress(g->ucx);
}

int merak_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    MPI_Request r;
    g->bytes += bytes;
    if (g->ucx)
        return merak_ucx_send(g->ucx, buf, bytes, peer, tag, req);
    if (!req)
        return MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, g->comm) == MPI_SUCCESS ? 0 : -1;
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, g->comm, &r);
    return finish(rc, req, r);
}

int merak_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    MPI_Request r;
    if (g->ucx)
        return merak_ucx_recv(g->ucx, buf, bytes, peer, tag, req);
    if (!req)
        return MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, g->comm, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : -1;
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, g->comm, &r);
    return finish(rc, req, r);
}

int merak_wait(merak_req *req)
{
    if (!req->active)
        return 0;
    if (req->ucx)
        return merak_ucx_wait(req);
    MPI_Request r;
    memcpy(&r, req->impl, sizeof r);
    req->active = 0;
    return MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : -1;
}

int merak_test(merak_req *req)
{
    if (!req->active)
        return 1;
    if (req->ucx)
        return merak_ucx_test(req);
    MPI_Request r;
    memcpy(&r, req->impl, sizeof r);
    int done = 0;
    if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return -1;
    memcpy(req->impl, &r, sizeof r);
    if (done)
        req->active = 0;
    return done;
}

int merak_reduce_scatter(merak_group *g, const float *send, float *recv, const int *counts)
{
    size_t n = 0;
    for (int r = 0; r < g->size; r++)
        n += (size_t)counts[r];
    g->bytes += n * sizeof *send;
    if (g->size == 1) {
        memcpy(recv, send, n * sizeof *send);
        return 0;
    }
    return MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, g->comm) == MPI_SUCCESS ? 0 : -1;
}

int merak_allgather(merak_group *g, float *buf, const int *counts)
{
    int *displs = malloc((size_t)g->size * sizeof *displs);
    if (!displs)
        return -1;
    size_t n = 0;
    for (int r = 0; r < g->size; r++) {
        displs[r] = (int)n;
        n += (size_t)counts[r];
    }
    g->bytes += n * sizeof *buf;
    int rc = g->size == 1 ? MPI_SUCCESS
                          : MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                                           MPI_FLOAT, g->comm);
    free(displs);
    return rc == MPI_SUCCESS ? 0 : -1;
}

int merak_barrier(merak_comm *c)
{
    return MPI_Barrier(c->world) == MPI_SUCCESS ? 0 : -1;
}
