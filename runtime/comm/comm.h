/*
 * comm.h - the process grid (dp x tp x pp), its groups, and the operations
 * the runtime needs from a communication backend (MPI here).
 *
 * Rank order is tensor-parallel fastest, then data, then pipeline:
 *     rank = tp + TP * (dp + DP * pp)
 * The runtime's world is MPI_COMM_WORLD split by MERAK_RANK when the Slurm
 * plugin set it (it may renumber tasks), else by the MPI rank.
 * Every group counts the bytes it moves.
 */
#ifndef MERAK_COMM_H
#define MERAK_COMM_H

#include <stddef.h>
#include <stdint.h>

/* ---- grid arithmetic (pure) */
typedef struct merak_grid {
    int dp, tp, pp;                 /* degrees */
    int rank, world;                /* world == dp * tp * pp */
    int dp_rank, tp_rank, pp_rank;  /* this rank's coordinates */
} merak_grid;

/* Fills g for `rank` of a dp x tp x pp grid; -1 with err if the numbers do
 * not fit (world != dp*tp*pp, a degree < 1, rank out of range). */
int merak_grid_init(merak_grid *g, int dp, int tp, int pp, int world, int rank, char *err,
                    size_t errlen);
int merak_grid_rank(const merak_grid *g, int dp_rank, int tp_rank, int pp_rank);

/* Degrees from flags (> 0 wins) or MERAK_DP/MERAK_TP/MERAK_PP; dp defaults to
 * world/(tp*pp).  Returns 0 or -1 with err naming the number to change. */
int merak_grid_degrees(int *dp, int *tp, int *pp, int world, char *err, size_t errlen);

/* ---- groups */
typedef enum merak_group_kind {
    MERAK_GROUP_WORLD, MERAK_GROUP_TP, MERAK_GROUP_DP, MERAK_GROUP_PP, MERAK_GROUP_TIED,
    MERAK_GROUP_COUNT_
} merak_group_kind;

typedef struct merak_group merak_group;

/* A non-blocking operation in flight. */
typedef struct merak_req {
    unsigned char impl[32];         /* the backend's request handle */
    int active;
    int ucx;                        /* started by the UCX point-to-point path */
} merak_req;

typedef struct merak_comm merak_comm;

/* Initialises MPI (if needed), the grid and every group.  Returns 0, or -1
 * for a bad layout, with the message in err on MPI rank 0 and an empty err
 * elsewhere (every rank finds the same problem; one reports it).  MPI
 * started here is finalised at exit unless merak_comm_finalize ends it
 * first, so a failing job's ranks stay up until rank 0 has reported. */
int merak_comm_init(merak_comm **out, int dp, int tp, int pp, char *err, size_t errlen);
/* Ends MPI if merak_comm_init started it. */
void merak_comm_finalize(merak_comm *c);
/* Ends the whole job with status (a failing rank takes every rank down). */
_Noreturn void merak_comm_abort(merak_comm *c, int status);

const merak_grid *merak_comm_grid(const merak_comm *c);
/* The group of kind k this rank belongs to; NULL for TIED on ranks that are
 * neither the first nor the last stage, or when pp == 1. */
merak_group *merak_comm_group(const merak_comm *c, merak_group_kind k);
const char *merak_group_name(merak_group_kind k);

int merak_group_size(const merak_group *g);
int merak_group_rank(const merak_group *g);
uint64_t merak_group_bytes(const merak_group *g);   /* bytes this rank sent or reduced */

/* Collectives on float buffers (sum), blocking when req is NULL, else
 * started and finished by merak_wait.  Return 0 or -1. */
int merak_allreduce(merak_group *g, float *buf, size_t n, merak_req *req);
int merak_allreduce_f64(merak_group *g, double *buf, size_t n);  /* blocking */
int merak_broadcast(merak_group *g, void *buf, size_t bytes, int root);
/* Point-to-point in group-rank terms; tag distinguishes micro-batches. */
int merak_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req);
int merak_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req);
int merak_wait(merak_req *req);
/* Point-to-point on group g over UCX's tag API instead of MPI (--p2p ucx):
 * collective over g (worker addresses are exchanged over MPI); 0, or -1 with
 * err on every member.  merak_group_use_mpi goes back, also collectively,
 * after every operation on g has finished. */
int merak_group_use_ucx(merak_group *g, char *err, size_t errlen);
void merak_group_use_mpi(merak_group *g);
/* Lets g's point-to-point backend move data while the caller computes
 * (UCX progresses only when asked; a no-op for MPI). */
void merak_group_progress(merak_group *g);
/* 1 if req has finished (or was never started), 0 if still in flight, -1 on
 * error.  Calling it also lets the backend progress the operation. */
int merak_test(merak_req *req);
/* Sum of every rank's send (n = sum of counts floats), rank r receiving
 * block r (counts[r] floats, blocks in rank order) in recv.  Blocking. */
int merak_reduce_scatter(merak_group *g, const float *send, float *recv, const int *counts);
/* In place: rank r's counts[r] floats, at the sum of the counts before r,
 * are gathered into every rank's buf.  Blocking. */
int merak_allgather(merak_group *g, float *buf, const int *counts);
/* A barrier on the world (for tests and clean shutdown). */
int merak_barrier(merak_comm *c);

#endif /* MERAK_COMM_H */
