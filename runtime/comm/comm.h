/*
 * comm.h - the process grid (dp x tp x pp), its groups, and the operations
 * the runtime needs from communication.
 *
 * Each group carries a table of collectives and one of point-to-point
 * operations (comm_impl.h), filled by a backend: MPI for both, UCX's tag
 * API for point-to-point, and none at all for a group of one rank (a
 * single process runs without MPI: every collective is trivial there).
 * Calls below only count bytes and dispatch.
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

#include "merak/status.h"

/* The ranks this process was launched with and how many share its node,
 * from the launcher's environment before MPI starts (Open MPI's mpirun,
 * srun with PMIx or PMI-2, a PMI launcher such as MPICH's): 1 and 1 when
 * not launched.  0, or -1 with one line in err when the numbers say that
 * nodes hold different numbers of ranks, or a launcher gives none. */
int merak_launch_size(int *world, int *per_node, char *err, size_t errlen);

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
/* MERAK_DP_RANK, MERAK_TP_RANK and MERAK_PP_RANK, where set (the Slurm
 * plugin's), are the coordinates g gives this rank.  0, or -1 with err. */
int merak_grid_check_env(const merak_grid *g, char *err, size_t errlen);

/* ---- groups */
typedef enum merak_group_kind {
    MERAK_GROUP_WORLD, MERAK_GROUP_TP, MERAK_GROUP_DP, MERAK_GROUP_PP, MERAK_GROUP_TIED,
    MERAK_GROUP_COUNT_
} merak_group_kind;

typedef struct merak_group merak_group;

/* A non-blocking operation in flight. */
typedef struct merak_req {
    const struct merak_req_ops *ops;/* the backend that started it: wait, test */
    merak_group *group;
    int peer;                       /* group rank of the other side, or -1 (collective) */
    int active;
    unsigned char impl[32];         /* the backend's request handle */
    struct {                        /* a device buffer staged through host memory */
        merak_group *group;
        void *host, *dev;           /* host: NULL when not staged */
        size_t bytes;
        int back;                   /* copied to dev when the request finishes */
    } staged;
} merak_req;

typedef struct merak_comm merak_comm;

/* The grid and every group.  Launched by mpirun or srun (or asked for more
 * than one rank), over MPI: MPI is initialised if needed, its communicators
 * return errors instead of aborting, and every failed call becomes -1 with
 * merak_comm_error saying which call, group and peer.  Otherwise one
 * process, without MPI: the 1x1x1 grid.  Returns 0, or -1 for a bad layout,
 * with the message in err on MPI rank 0 and an empty err elsewhere (every
 * rank finds the same problem; one reports it).  MPI started here is
 * finalised at exit unless merak_comm_finalize ends it first, so a failing
 * job's ranks stay up until rank 0 has reported. */
int merak_comm_init(merak_comm **out, int dp, int tp, int pp, char *err, size_t errlen);
/* Buffers in device memory that the communication library cannot read (a
 * GPU shared by several ranks, where NCCL cannot run, and an MPI built
 * without CUDA).  Once set, every operation on a buffer for which is_device
 * says 1 copies it into host memory first (to_host) and the result back
 * (to_device), with a request's copy back done by merak_wait or
 * merak_test.  The copies return when the data is there; 0 or -1.
 * merak_allreduce_f64 and merak_comm_agree take host memory only. */
typedef struct merak_devmem {
    int (*is_device)(const void *p);
    int (*to_host)(void *dst, const void *src, size_t bytes);
    int (*to_device)(void *dst, const void *src, size_t bytes);
} merak_devmem;
void merak_comm_set_devmem(merak_comm *c, const merak_devmem *m);
/* Collectives on device buffers: "nccl" opens an NCCL communicator for
 * every group of two or more ranks (collective over the world: every rank
 * calls it with the same name) whose operations follow the work queued on
 * `stream` (the kernels' cudaStream_t; NULL: the legacy default stream)
 * and run on a stream of their own; "mpi" (or NULL) leaves them to MPI,
 * staged through host memory (merak_comm_set_devmem).  Host buffers always
 * go through MPI.  0, or -1 with err (the same line on every rank when the
 * names differ or a communicator cannot be made). */
int merak_comm_set_coll(merak_comm *c, const char *name, void *stream, char *err, size_t errlen);
/* The collective backends' names ("mpi, nccl"; "mpi" alone in a build
 * without CUDA) and whether `name` is one of them (0) or not (-1). */
const char *merak_coll_names(void);
int merak_coll_check(const char *name);
/* Which collectives a job's device buffers take (--coll), decided once:
 * asked is the user's choice (NULL: automatic), host whether tensors live
 * in host memory (the CPU backend), shared whether two ranks of one node
 * share a GPU, nccl_version the NCCL this library was built with (0:
 * none), multi_rank whether NCCL_MULTI_RANK_GPU_ENABLE=1 is set.  Sets
 * *name ("mpi" or "nccl") and why (one phrase for the banner); 0, or
 * MERAK_USAGE with one line in err when the choice asked for cannot run. */
int merak_coll_choose(const char *asked, int host, int world, int shared, int nccl_version, int multi_rank,
                      const char **name, char *why, size_t whylen, char *err, size_t errlen);
/* The version code of the NCCL this library was built with (22809 for
 * 2.28.9), 0 without one. */
int merak_nccl_version(void);
/* 1 when two ranks on one host give the same device id (a GPU's PCI bus id
 * hashed to 52 bits, or any other number naming a device; an id < 0, one
 * that cannot tell, counts as the same as any), else 0; -1 on a failure.
 * Collective over the world. */
int merak_comm_devices_shared(merak_comm *c, double device_id);
/* A blocking collective, or a wait for a transfer, that makes no progress
 * for `seconds` ends this process with one line on stderr naming this
 * rank, the operation and the group's ranks or the peer (the launcher then
 * ends the job): a dead or stopped rank never hangs the others.  0 turns
 * the watchdog off; a job of one process needs none.  0, or -1 with err
 * (seconds out of range, no thread). */
int merak_comm_set_timeout(merak_comm *c, double seconds, char *err, size_t errlen);
/* Ends MPI if merak_comm_init started it. */
void merak_comm_finalize(merak_comm *c);
/* Ends the whole job with status (a failing rank takes every rank down). */
_Noreturn void merak_comm_abort(merak_comm *c, int status);

const merak_grid *merak_comm_grid(const merak_comm *c);
/* Where this rank runs and who placed it (the Slurm plugin, or the rank
 * itself under mpirun: place.c); "" for one process. */
const char *merak_comm_placement(const merak_comm *c);
/* Why the first failed operation failed (later failures are its
 * consequences and do not replace it): one line naming the call, the group
 * and, for point-to-point, the peer's rank and host. */
const char *merak_comm_error(const merak_comm *c);
/* "rank R on HOST" for world rank r, into buf; returns buf. */
const char *merak_comm_where(const merak_comm *c, int rank, char *buf, size_t len);
/* The node of every world rank, node[0..world): ranks on the same host share
 * a number (the same numbers on every rank); 0, or -1 out of memory. */
int merak_comm_nodes(const merak_comm *c, int *node);
/* The group of kind k this rank belongs to; NULL for TIED on ranks that are
 * neither the first nor the last stage, or when pp == 1. */
merak_group *merak_comm_group(const merak_comm *c, merak_group_kind k);
const char *merak_group_name(merak_group_kind k);

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
/* Point-to-point backends by name, in one table: "mpi", "ucx", and in a
 * CUDA build "nccl" (device buffers over NCCL, host ones over MPI:
 * merak_p2p_is_device says 1 for it).  0 if name is one of them;
 * merak_p2p_names lists them ("mpi, ucx or nccl"). */
int merak_p2p_check(const char *name);
int merak_p2p_is_device(const char *name);
const char *merak_p2p_names(void);
/* Which point-to-point a job's pipeline takes (--p2p), decided once after
 * the collectives (merak_coll_choose's coll and why): asked, the user's
 * (NULL: automatic), host and world as there.  Automatically "nccl" when
 * the collectives are NCCL's and there are several ranks, else "mpi";
 * "nccl" asked for needs tensors on GPUs and NCCL's collectives (one rank:
 * nothing to move, accepted).  Sets *name; 0, or MERAK_USAGE with one
 * line in err. */
int merak_p2p_choose(const char *asked, int host, int world, const char *coll, const char *coll_why,
                     const char **name, char *err, size_t errlen);
/* Point-to-point on group g over the named backend (collective over g).
 * "ucx": UCX's tag API, worker addresses exchanged over MPI.  "nccl":
 * device buffers over the group's NCCL (merak_comm_set_coll "nccl" first),
 * one communicator per link (comm_nccl.c), host buffers over MPI.  0, or
 * -1 with err.  "mpi" goes back, also collectively, after every operation
 * on g has finished. */
int merak_group_set_p2p(merak_group *g, const char *name, char *err, size_t errlen);
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
/* Every rank agrees whether a phase failed: st is this rank's status
 * (MERAK_OK, or how it failed: merak/status.h).  Returns MERAK_OK if no
 * rank failed, else the status of the first (lowest) failing rank, whose
 * err becomes everyone's: MERAK_USAGE stays a usage error, every other
 * failure is now every rank's (MERAK_FAILED, also when agreeing failed). */
int merak_comm_agree(merak_comm *c, int st, char *err, size_t errlen);

#endif /* MERAK_COMM_H */
