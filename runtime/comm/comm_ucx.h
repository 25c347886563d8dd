/*
 * comm_ucx.h - point-to-point over UCX's ucp tag API, for one MPI group
 * (the pipeline's): worker addresses are exchanged over the group's MPI
 * communicator, then sends and receives go straight to UCX.  Internal to
 * runtime/comm; the rest of the runtime reaches it through comm.h.
 */
#ifndef MERAK_COMM_UCX_H
#define MERAK_COMM_UCX_H

#include <stddef.h>

#include <mpi.h>

#include "comm.h"

typedef struct merak_ucx merak_ucx;

/* Collective over comm: every rank starts a UCX worker, then, if all did,
 * they exchange addresses and connect.  Returns 0, or -1 with err on every
 * rank (the rank whose UCX failed says why; the others say a peer failed). */
int merak_ucx_open(merak_ucx **out, MPI_Comm comm, char *err, size_t errlen);
/* Collective over the comm given to open: flushes and closes the endpoints
 * while progressing, waits for every peer to finish, frees everything. */
void merak_ucx_close(merak_ucx *u);

/* As merak_send/merak_recv, in ranks of the group's communicator; blocking
 * when req is NULL.  A receive of a message of another size fails. */
int merak_ucx_send(merak_ucx *u, const void *buf, size_t bytes, int peer, int tag, merak_req *req);
int merak_ucx_recv(merak_ucx *u, void *buf, size_t bytes, int peer, int tag, merak_req *req);
/* For requests with req->ucx set. */
int merak_ucx_wait(merak_req *req);
int merak_ucx_test(merak_req *req);
/* One round of progress (lets transfers move while the caller computes). */
void merak_ucx_progress(merak_ucx *u);

#endif /* MERAK_COMM_UCX_H */
