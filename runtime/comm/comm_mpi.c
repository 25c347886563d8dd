/*
 * comm_mpi.c - the grid's groups over MPI, and the MPI backend of the
 * collective and point-to-point tables.
 *
 * Groups are MPI_Comm_split of the runtime's world by the coordinates they
 * share: tp (same dp, pp), dp (same tp, pp), pp (same dp, tp), tied (first
 * and last stage of the same dp, tp).  Every communicator returns errors
 * (MPI_ERRORS_RETURN, inherited from the world), so a failed call becomes
 * one line naming the call, the group and the peer instead of an abort
 * inside MPI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include "comm_impl.h"
#include "errf.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((merak_req *)0)->impl), "MPI_Request too large");

/* This process's rank in the world: MERAK_RANK (the Slurm plugin's
 * numbering) when set, else the MPI rank; every rank's gathered, and
 * checked to number the world 0..world-1 once each (a MERAK_RANK that
 * repeats or is out of range would order the grid wrongly).  Collective;
 * 0 with *rank, or -1 with the same message on every rank. */
static int world_rank(int mpi_rank, int world, int *rank, char *err, size_t errlen)
{
    const char *s = getenv("MERAK_RANK");
    long v = mpi_rank;
    if (s && *s) {
        char *end;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || *end || v < 0 || v >= world)
            v = -1;   /* named below, once every rank knows */
    }
    int mine = (int)v, *all = malloc((size_t)world * sizeof *all), *seen = calloc((size_t)world, sizeof *seen);
    int ok = all && seen && MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS;
    int rc = ok ? 0 : merak_errf(err, errlen, "gathering every rank's MERAK_RANK failed");
    for (int r = 0; r < world && rc == 0; r++) {
        if (all[r] < 0)
            rc = merak_errf(err, errlen, "MERAK_RANK of MPI rank %d is not a rank of this job (0 to %d)", r,
                            world - 1);
        else if (seen[all[r]])
            rc = merak_errf(err, errlen, "MERAK_RANK=%d is set on MPI ranks %d and %d: each rank needs its own "
                            "(the Slurm plugin numbers them; unset MERAK_RANK under mpirun)", all[r],
                            seen[all[r]] - 1, r);
        else
            seen[all[r]] = r + 1;
    }
    free(all), free(seen);
    *rank = mine;
    if (rc == 0 && (s = getenv("MERAK_WORLD_SIZE")) && *s && atol(s) != world)
        rc = merak_errf(err, errlen, "MERAK_WORLD_SIZE=%s, but the job has %d ranks", s, world);
    return rc;
}


/* 0 for MPI_SUCCESS, else -1 with "CALL on the G group failed: why". */
static int check(merak_group *g, int rc, const char *call)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char why[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, why, &len);
    return merak_comm_fail(g, "%s on the %s group failed: %s", call, merak_group_name(g->kind), why);
}

/* The same for a point-to-point call, naming the peer. */
static int check_p2p(merak_group *g, int rc, const char *call, int peer)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char why[MPI_MAX_ERROR_STRING] = "", who[128];
    int len = 0;
    MPI_Error_string(rc, why, &len);
    return merak_comm_fail(g, "%s with %s failed: %s", call, merak_group_peer(g, peer, who, sizeof who),
                           why);
}

/* ------------------------------------------------------------------ requests */

static int req_wait(merak_req *req)
{
    MPI_Request r;
    memcpy(&r, req->impl, sizeof r);
    req->active = 0;
    int rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    return req->peer < 0 ? check(req->group, rc, "MPI_Wait")
                         : check_p2p(req->group, rc, "MPI_Wait", req->peer);
}

static int req_test(merak_req *req)
{
    MPI_Request r;
    memcpy(&r, req->impl, sizeof r);
    int done = 0, rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if ((req->peer < 0 ? check(req->group, rc, "MPI_Test")
                       : check_p2p(req->group, rc, "MPI_Test", req->peer)) < 0) {
        req->active = 0;
        return -1;
    }
    memcpy(req->impl, &r, sizeof r);
    if (done)
        req->active = 0;
    return done;
}

static const struct merak_req_ops mpi_req = {req_wait, req_test};

/* Records a started request (pass r only after the MPI call returned). */
static void started(merak_group *g, merak_req *req, MPI_Request r, int peer)
{
    req->ops = &mpi_req;
    req->group = g;
    req->peer = peer;
    req->active = 1;
    memcpy(req->impl, &r, sizeof r);
}

/* ------------------------------------------------------------------ collectives */

static int mpi_allreduce(merak_group *g, float *buf, size_t n, merak_req *req)
{
    if (n > (size_t)INT32_MAX)
        return merak_comm_fail(g, "all-reduce of %zu floats is beyond MPI's counts", n);
    if (!req)
        return check(g, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->mpi),
                     "MPI_Allreduce");
    MPI_Request r;
    if (check(g, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->mpi, &r),
              "MPI_Iallreduce") < 0)
        return -1;
    started(g, req, r, -1);
    return 0;
}

static int mpi_allreduce_f64(merak_group *g, double *buf, size_t n)
{
    return check(g, MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, g->mpi),
                 "MPI_Allreduce");
}

static int mpi_broadcast(merak_group *g, void *buf, size_t bytes, int root)
{
    return check(g, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, g->mpi), "MPI_Bcast");
}

static int mpi_reduce_scatter(merak_group *g, const float *send, float *recv, const int *counts)
{
    return check(g, MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, g->mpi),
                 "MPI_Reduce_scatter");
}

static int mpi_allgather(merak_group *g, float *buf, const int *counts)
{
    int *displs = malloc((size_t)g->size * sizeof *displs);
    if (!displs)
        return merak_comm_fail(g, "out of memory");
    size_t n = 0;
    for (int r = 0; r < g->size; r++) {
        displs[r] = (int)n;
        n += (size_t)counts[r];
    }
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT,
                            g->mpi);
    free(displs);
    return check(g, rc, "MPI_Allgatherv");
}

const merak_coll_ops merak_mpi_coll = {
    mpi_allreduce, mpi_allreduce_f64, mpi_broadcast, mpi_reduce_scatter, mpi_allgather,
};

/* ------------------------------------------------------------------ point-to-point */

static int mpi_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    if (bytes > (size_t)INT32_MAX)
        return merak_comm_fail(g, "a message of %zu bytes is beyond MPI's counts", bytes);
    if (!req)
        return check_p2p(g, MPI_Send(buf, (int)bytes, MPI_BYTE, peer, tag, g->mpi), "MPI_Send", peer);
    MPI_Request r;
    if (check_p2p(g, MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, g->mpi, &r), "MPI_Isend",
                  peer) < 0)
        return -1;
    started(g, req, r, peer);
    return 0;
}

static int mpi_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    if (bytes > (size_t)INT32_MAX)
        return merak_comm_fail(g, "a message of %zu bytes is beyond MPI's counts", bytes);
    if (!req)
        return check_p2p(g, MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, tag, g->mpi, MPI_STATUS_IGNORE),
                         "MPI_Recv", peer);
    MPI_Request r;
    if (check_p2p(g, MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, g->mpi, &r), "MPI_Irecv",
                  peer) < 0)
        return -1;
    started(g, req, r, peer);
    return 0;
}

const merak_p2p_ops merak_mpi_p2p = {.name = "mpi", .send = mpi_send, .recv = mpi_recv};

/* ------------------------------------------------------------------ groups */

/* Fills group k from a split of the world; a rank outside it (colour
 * MPI_UNDEFINED) has no such group. */
static int make_group(merak_comm *c, merak_group_kind k, MPI_Comm comm)
{
    merak_group *g = &c->groups[k];
    *g = (merak_group){.kind = k, .comm = c, .mpi = comm, .coll = &merak_mpi_coll, .p2p = &merak_mpi_p2p};
    if (comm == MPI_COMM_NULL)
        return 0;
    MPI_Comm_size(comm, &g->size);
    MPI_Comm_rank(comm, &g->rank);
    c->have[k] = 1;
    g->world = malloc((size_t)g->size * sizeof *g->world);
    if (!g->world)
        return -1;
    /* world rank of every member: this group's ranks translated */
    int *mine = malloc((size_t)g->size * sizeof *mine);
    MPI_Group gg, wg;
    int ok = mine && MPI_Comm_group(comm, &gg) == MPI_SUCCESS;
    if (ok && MPI_Comm_group(c->world, &wg) == MPI_SUCCESS) {
        for (int r = 0; r < g->size; r++)
            mine[r] = r;
        ok = MPI_Group_translate_ranks(gg, g->size, mine, wg, g->world) == MPI_SUCCESS;
        MPI_Group_free(&wg);
    }
    if (mine)
        MPI_Group_free(&gg);
    free(mine);
    return ok ? 0 : -1;
}

static int split_group(merak_comm *c, merak_group_kind k, int color, int key)
{
    MPI_Comm comm;
    if (MPI_Comm_split(c->world, color, key, &comm) != MPI_SUCCESS)
        return -1;
    return make_group(c, k, comm);
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

/* Every world rank's host name, for messages about peers. */
static int gather_hosts(merak_comm *c)
{
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(name, &len);
    c->hosts = calloc((size_t)c->grid.world, sizeof *c->hosts);
    if (!c->hosts)
        return -1;
    char mine[sizeof *c->hosts];
    snprintf(mine, sizeof mine, "%.63s", name);   /* host names past 63 bytes are cut */
    return MPI_Allgather(mine, (int)sizeof mine, MPI_CHAR, c->hosts, (int)sizeof mine, MPI_CHAR,
                         c->world) == MPI_SUCCESS ? 0 : -1;
}

static int mpi_world_init(merak_comm *c, int dp, int tp, int pp, char *err, size_t errlen)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(NULL, NULL) != MPI_SUCCESS)
            return merak_errf(err, errlen, "MPI_Init failed");
        atexit(end_mpi);
    }
    c->mpi = 1;
    c->started_mpi = !inited;
    c->world = MPI_COMM_NULL;
    /* Errors come back to the caller, which reports them with the rank and
     * host; communicators split from the world inherit this. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int mpi_rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    /* The same degrees everywhere: every rank computes them from the same
     * flags and environment, and reports the same error. */
    int rank;
    if (merak_grid_degrees(&dp, &tp, &pp, world, err, errlen) < 0 ||
        merak_place_self(MPI_COMM_WORLD, dp, tp, pp, c->place, sizeof c->place, err, errlen) < 0 ||
        world_rank(mpi_rank, world, &rank, err, errlen) < 0 ||
        merak_grid_init(&c->grid, dp, tp, pp, world, rank, err, errlen) < 0) {
        if (mpi_rank != 0 && err && errlen)
            err[0] = 0; /* one report per job */
        return -1;
    }
    /* The same degrees on every rank, checked: flags, environment or
     * merak-train --auto's search (each node's view of the job) could
     * differ, and a grid built from two layouts would not fit together. */
    int have[3] = {c->grid.dp, c->grid.tp, c->grid.pp}, lo[3], hi[3];
    if (MPI_Allreduce(have, lo, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Allreduce(have, hi, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return merak_errf(err, errlen, "MPI_Allreduce of the degrees failed");
    if (memcmp(lo, hi, sizeof lo) != 0) {
        merak_errf(err, errlen, "the ranks disagree on the layout (dp %d to %d, tp %d to %d, pp %d to %d): their "
                   "flags, MERAK_* variables or nodes differ", lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]);
        if (mpi_rank != 0 && err && errlen)
            err[0] = 0; /* one report per job */
        return -1;
    }
    /* a rank alone: its message, then every rank's agreement below */
    char mine[512] = "";
    int bad = merak_grid_check_env(&c->grid, mine, sizeof mine) < 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        /* the lowest bad rank's message, to MPI rank 0 */
        int who = bad ? mpi_rank : world, first = world;
        MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (first != 0 && mpi_rank == first)
            MPI_Send(mine, (int)sizeof mine, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        if (mpi_rank == 0 && first != 0)
            MPI_Recv(mine, (int)sizeof mine, MPI_CHAR, first, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (err && errlen)
            snprintf(err, errlen, "%s", mpi_rank == 0 ? mine : "");
        return -1;
    }
    const merak_grid *g = &c->grid;
    MPI_Comm w;
    int ok = MPI_Comm_split(MPI_COMM_WORLD, 0, g->rank, &w) == MPI_SUCCESS;
    if (ok)
        c->world = w;
    ok = ok && make_group(c, MERAK_GROUP_WORLD, w) == 0 && gather_hosts(c) == 0;
    /* Colours: one per set of shared coordinates; keys order members. */
    ok = ok && split_group(c, MERAK_GROUP_TP, g->dp_rank + g->dp * g->pp_rank, g->tp_rank) == 0;
    ok = ok && split_group(c, MERAK_GROUP_DP, g->tp_rank + g->tp * g->pp_rank, g->dp_rank) == 0;
    ok = ok && split_group(c, MERAK_GROUP_PP, g->tp_rank + g->tp * g->dp_rank, g->pp_rank) == 0;
    int end_stage = g->pp > 1 && (g->pp_rank == 0 || g->pp_rank == g->pp - 1);
    ok = ok && split_group(c, MERAK_GROUP_TIED,
                           end_stage ? g->tp_rank + g->tp * g->dp_rank : MPI_UNDEFINED, g->pp_rank) == 0;
    return ok ? 0 : merak_errf(err, errlen, "cannot create the process groups");
}

static void mpi_world_free(merak_comm *c)
{
    for (int k = MERAK_GROUP_TP; k < MERAK_GROUP_COUNT_; k++) {
        merak_group *g = &c->groups[k];
        if (!c->have[k])
            continue;
        if (g->p2p && g->p2p->close)
            g->p2p->close(g);
        MPI_Comm_free(&g->mpi);
        free(g->world);
    }
    free(c->groups[MERAK_GROUP_WORLD].world);
    if (c->world != MPI_COMM_NULL)
        MPI_Comm_free(&c->world);
    if (c->started_mpi)
        MPI_Finalize();
}

const merak_world_ops merak_mpi_world = {.name = "mpi", .init = mpi_world_init, .free = mpi_world_free};

_Noreturn void merak_comm_abort(merak_comm *c, int status)
{
    (void)c;
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited)
        MPI_Abort(MPI_COMM_WORLD, status);
    exit(status); /* one process without MPI, or MPI_Abort returned */
}
