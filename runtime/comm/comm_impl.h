/*
 * comm_impl.h - inside runtime/comm: the group and comm objects and the
 * operation tables each backend fills.  comm.c dispatches through them
 * and names no backend; backends.c is the one list of them by name;
 * comm_mpi.c (the world, collectives, point-to-point) and comm_ucx.c
 * (point-to-point) implement them; group.c holds what all of them say
 * about groups (and calls none of them).
 */
#ifndef MERAK_COMM_IMPL_H
#define MERAK_COMM_IMPL_H

#include <mpi.h>
#include <stdatomic.h>

#include "comm.h"

typedef struct merak_watchdog merak_watchdog;

/* Collectives of a group of two or more ranks (a group of one needs none). */
typedef struct merak_coll_ops {
    int (*allreduce)(merak_group *g, float *buf, size_t n, merak_req *req);
    int (*allreduce_f64)(merak_group *g, double *buf, size_t n);
    int (*broadcast)(merak_group *g, void *buf, size_t bytes, int root);
    int (*reduce_scatter)(merak_group *g, const float *send, float *recv, const int *counts);
    int (*allgather)(merak_group *g, float *buf, const int *counts);
} merak_coll_ops;

/* Collectives on device buffers (NCCL), per group: open makes the group's
 * state (collective over the group, over its MPI communicator; 0, or -1
 * with err on every member) in g->dcoll_state, ordering every operation
 * after the work already queued on `stream` (the kernels' stream, a
 * cudaStream_t; NULL: the legacy default stream); close ends it after the
 * operations in flight.  ops' allreduce, broadcast, reduce_scatter and
 * allgather take device buffers (comm.c sends host ones to g->coll);
 * ops.allreduce_f64 is NULL.  Every wait inside them polls, and when the
 * watchdog asks (merak_abort_asked: a timeout) the waiting thread aborts
 * the communicator itself, says so (merak_abort_done) and fails; NCCL's
 * abort is never called from another thread.  version: the library's
 * version code (e.g. 22809 for 2.28.9). */
typedef struct merak_dcoll_ops {
    const char *name;
    int (*open)(merak_group *g, void *stream, char *err, size_t errlen);
    void (*close)(merak_group *g);
    int (*version)(void);
    merak_coll_ops ops;
    /* Point-to-point on device buffers, for a group it is open on (NULL:
     * the table has none).  p2p_open, collective over g (after open; 0,
     * or -1 with err on every member), readies what send and recv need;
     * close ends it too.  send and recv (blocking when req is NULL) move
     * the k-th message of a link, a sender, a receiver and a kind (tag &
     * 1), to the link's k-th receive: transports without tags (NCCL's)
     * rely on the schedule posting them in one order at both ends
     * (runtime/pipe/schedule.h, merak_instr_route). */
    int (*p2p_open)(merak_group *g, char *err, size_t errlen);
    int (*send)(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req);
    int (*recv)(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req);
} merak_dcoll_ops;

/* Point-to-point; blocking when req is NULL.  A backend with state of its
 * own on a group opens it (collective over the group's MPI communicator:
 * 0, or -1 with err on every member) into g->p2p_state and closes it
 * (flushes and waits for every peer); NULL when there is none. */
typedef struct merak_p2p_ops {
    const char *name;                   /* merak_group_set_p2p's, --p2p's */
    int (*open)(merak_group *g, char *err, size_t errlen);
    void (*close)(merak_group *g);
    int (*send)(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req);
    int (*recv)(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req);
    void (*progress)(merak_group *g);   /* lets transfers move; may be a no-op */
} merak_p2p_ops;

/* What a request in flight needs from the backend that started it. */
struct merak_req_ops {
    int (*wait)(merak_req *req);        /* 0 or -1 (error recorded); req inactive after */
    int (*test)(merak_req *req);        /* 1 done, 0 in flight, -1 failed */
};

struct merak_group {
    merak_group_kind kind;
    merak_comm *comm;
    int size, rank;
    int *world;                      /* [size] world rank of each member */
    uint64_t bytes;
    const merak_coll_ops *coll;      /* NULL for a group of one */
    const merak_p2p_ops *p2p;        /* NULL for a group of one */
    MPI_Comm mpi;                    /* MPI_COMM_NULL without MPI */
    void *p2p_state;                 /* the point-to-point backend's own (its open), or NULL */
    const merak_dcoll_ops *dcoll;    /* collectives on device buffers, or NULL (staged) */
    void *dcoll_state;               /* dcoll's own (its open) */
    int dp2p;                        /* dcoll's send and recv take device buffers (its p2p_open) */
};

struct merak_comm {
    merak_grid grid;
    int mpi;                         /* the groups run over MPI */
    int started_mpi;                 /* we called MPI_Init, so we finalize */
    MPI_Comm world;
    merak_group groups[MERAK_GROUP_COUNT_];
    int have[MERAK_GROUP_COUNT_];
    char (*hosts)[64];               /* [world size] host of each world rank */
    const merak_devmem *devmem;      /* device buffers staged through host memory; NULL: none */
    merak_watchdog *watchdog;        /* the communication timeout (watchdog.c), or NULL */
    atomic_int abort_asked;          /* the watchdog timed out: a device collective's wait aborts */
    atomic_int abort_done;           /* ... and has aborted its communicator */
    char place[384];                 /* where this rank runs, and who placed it (place.c) */
    char err[512];
};

/* The process world of a job launched by mpirun or srun: its groups,
 * their collectives and point-to-point, and the host of every rank (init:
 * 0, or -1 with err); free ends what init began. */
typedef struct merak_world_ops {
    const char *name;
    int (*init)(merak_comm *c, int dp, int tp, int pp, char *err, size_t errlen);
    void (*free)(merak_comm *c);
} merak_world_ops;

/* The backends (comm_mpi.c, comm_ucx.c, comm_nccl.c in a CUDA build),
 * named in backends.c only. */
extern const merak_coll_ops merak_mpi_coll;
extern const merak_p2p_ops merak_mpi_p2p, merak_ucx_p2p;
extern const merak_world_ops merak_mpi_world;
extern const merak_dcoll_ops merak_nccl_dcoll;

/* backends.c: the point-to-point backend named `name` (NULL: the
 * world's own), or NULL; the world's backend; the device collectives
 * named `name` ("nccl"), or NULL (also for "mpi": staged, no table). */
const merak_p2p_ops *merak_p2p_find(const char *name);
const merak_world_ops *merak_world_backend(void);
const merak_dcoll_ops *merak_dcoll_find(const char *name);

/* place.c.  Under mpirun (no rank has MERAK_RANK: the Slurm plugin placed
 * nothing), places this rank among the dp x tp x pp of world as the plugin
 * would: its environment (MERAK_RANK, MERAK_GPU unless the user set it,
 * MERAK_NIC, UCX_NET_DEVICES, ...) and, unless MERAK_BIND=none or
 * something bound it already, its binding (MERAK_CPUS).  Collective over
 * world.  note says what was done, or why nothing was (no topology, a
 * layout the placement refuses: the rank keeps MPI's order, as before).
 * 0, or -1 with err (MPI failed; a bad MERAK_BIND). */
int merak_place_self(MPI_Comm world, int dp, int tp, int pp, char *note, size_t notelen, char *err, size_t errlen);

/* group.c.  Records why an operation on g failed (one line; the first
 * failure stays, later ones are its consequences) and returns -1. */
int merak_comm_fail(merak_group *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "pipeline rank 1 (rank 5 on host)" for group rank r, into buf. */
const char *merak_group_peer(const merak_group *g, int r, char *buf, size_t len);

/* The communication timeout (watchdog.c): a blocking operation on g (what:
 * a string literal, "all-reduce"; peer: the group rank waited for, or -1)
 * begins and ends; no-ops without a timeout.  merak_watch_stop ends the
 * watchdog thread (merak_comm_finalize does). */
void merak_watch_enter(merak_group *g, const char *what, int peer);
void merak_watch_leave(merak_group *g);
void merak_watch_stop(merak_comm *c);
/* The watchdog's request to a thread polling in a device collective (set
 * once it has timed out), and that thread's answer once it has aborted its
 * communicator: the watchdog waits a moment for it before it ends the
 * process. */
static inline int merak_abort_asked(const merak_comm *c) { return atomic_load(&c->abort_asked); }
static inline void merak_abort_done(merak_comm *c) { atomic_store(&c->abort_done, 1); }


#endif /* MERAK_COMM_IMPL_H */
