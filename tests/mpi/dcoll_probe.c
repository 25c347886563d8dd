/*
 * dcoll_probe.c - the core's side of device collectives (comm.c, the
 * watchdog) with an injected backend, on CPUs: a fake "device" table on
 * the dp group of a 2-rank job (tests/mpi/mpi_dcoll.sh), and a fake
 * device buffer (is_device says so for it alone).
 *
 *   dcoll_probe sum     device all-reduce, blocking and with a request, goes
 *                       to the table; a host one to MPI; bytes counted alike
 *   dcoll_probe fail    the table fails: -1, its line is the comm's error
 *   dcoll_probe shared  merak_comm_devices_shared on one host: equal ids,
 *                       different ids, one that cannot tell (< 0)
 *   dcoll_probe hang    the table never finishes (it polls, as NCCL's
 *                       waits do): the watchdog (1 s) writes its line and
 *                       asks it to abort, which it does (a line) before
 *                       the watchdog exits 1
 *   dcoll_probe p2p     --p2p nccl's path on the pp group of a (1,1,2)
 *                       job: merak_group_set_p2p "nccl" opens the table's
 *                       links; a device buffer's send and receive (blocking
 *                       and with a request) go to the table, a host one's to
 *                       MPI; bytes counted alike; "mpi" switches back
 *   dcoll_probe p2p-none  the same without a device table: refused
 *   dcoll_probe p2p-hang  the table's send (with a request) never starts (as
 *                       NCCL's may not while it connects): the watchdog
 *                       (1 s) times its start and asks it to abort
 * Each rank prints "rank R: ..." lines; the script checks them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_impl.h"

static float device_buf[4];   /* "device memory": is_device says 1 for it only */
static int calls, aborted;

static int is_device(const void *p) { return p == device_buf; }
static int no_copy(void *dst, const void *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    return -1;   /* never staged: the table takes device buffers */
}

static void fake_abort(merak_group *g);

/* the fake device all-reduce: the sum of one rank's value, 10 + rank,
 * over two ranks is 21 everywhere; with a request it finishes at once */
static int fake_allreduce(merak_group *g, float *buf, size_t n, merak_req *req)
{
    calls++;
    const char *mode = g->dcoll_state;
    if (!strcmp(mode, "fail"))
        return merak_comm_fail(g, "fakeAllReduce on the %s group failed: injected", merak_group_name(g->kind));
    if (!strcmp(mode, "hang")) {   /* never finishes: polls, as NCCL's waits do */
        const struct timespec ts = {0, 1000000};
        while (!merak_abort_asked(g->comm))
            nanosleep(&ts, NULL);
        fake_abort(g);
        merak_abort_done(g->comm);
        return merak_comm_fail(g, "fakeAllReduce: aborted after the communication timeout");
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = 21.0f;
    if (req)
        req->active = 0;
    return 0;
}

static void fake_abort(merak_group *g)
{
    aborted = 1;
    char line[96];
    int k = snprintf(line, sizeof line, "rank %d: fake dcoll aborted on the %s group\n", g->comm->grid.rank,
                     merak_group_name(g->kind));
    ssize_t rc = write(STDERR_FILENO, line, (size_t)k);
    (void)rc;
}

static void fake_close(merak_group *g) { (void)g; }

/* the fake device point-to-point: MPI underneath, counted */
static int opened, dsends, drecvs;

static int fake_p2p_open(merak_group *g, char *err, size_t errlen)
{
    (void)g, (void)err, (void)errlen;
    opened++;
    return 0;
}

static int fake_send(merak_group *g, const void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    dsends++;
    if (!strcmp((const char *)g->dcoll_state, "p2p-hang")) {   /* polls, as NCCL's waits do */
        const struct timespec ts = {0, 1000000};
        while (!merak_abort_asked(g->comm))
            nanosleep(&ts, NULL);
        fake_abort(g);
        merak_abort_done(g->comm);
        return merak_comm_fail(g, "fakeSend: aborted after the communication timeout");
    }
    if (MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 1000 + tag, g->mpi) != MPI_SUCCESS)
        return merak_comm_fail(g, "fakeSend failed");
    if (req)
        req->active = 0;
    return 0;
}

static int fake_recv(merak_group *g, void *buf, size_t bytes, int peer, int tag, merak_req *req)
{
    drecvs++;
    if (MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 1000 + tag, g->mpi, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return merak_comm_fail(g, "fakeRecv failed");
    if (req)
        req->active = 0;
    return 0;
}

static const merak_dcoll_ops fake_p2p = {.name = "fake", .close = fake_close, .p2p_open = fake_p2p_open,
                                         .send = fake_send, .recv = fake_recv};

static const merak_dcoll_ops fake = {.name = "fake", .close = fake_close, .ops = {.allreduce = fake_allreduce}};

static const merak_devmem mem = {is_device, no_copy, no_copy};

/* The p2p modes (the pipeline group of 2 ranks); 0 or 1. */
static int p2p(const char *mode)
{
    char err[512] = "";
    merak_comm *c = NULL;
    if (merak_comm_init(&c, 1, 1, 2, err, sizeof err) < 0 || merak_comm_set_timeout(c, 1.0, err, sizeof err) < 0) {
        fprintf(stderr, "dcoll_probe: %s\n", err);
        return 1;
    }
    const int rank = merak_comm_grid(c)->rank;
    merak_comm_set_devmem(c, &mem);
    merak_group *g = merak_comm_group(c, MERAK_GROUP_PP);
    if (strcmp(mode, "p2p-none") != 0) {
        g->dcoll = &fake_p2p;
        g->dcoll_state = (void *)mode;
    }
    if (merak_group_set_p2p(g, "nccl", err, sizeof err) < 0) {
        printf("rank %d: refused: %s\n", rank, err);
        g->dcoll = NULL;
        merak_comm_finalize(c);
        return 0;
    }
    float host[4] = {5, 6, 7, 8};
    merak_req req[2];
    int rc[4];
    if (!strcmp(mode, "p2p-hang")) {   /* rank 0's send never starts; rank 1 waits outside any operation */
        if (rank == 0 && merak_send(g, device_buf, sizeof device_buf, 1, 1, &req[0]) == 0)
            merak_wait(&req[0]);
        else if (rank == 1)
            sleep(20);
        printf("rank %d: p2p-hang ended: %s\n", rank, merak_comm_error(c));
        return 1;
    }
    if (rank == 0) {
        for (int i = 0; i < 4; i++)
            device_buf[i] = 1.0f + (float)i;
        rc[0] = merak_send(g, device_buf, sizeof device_buf, 1, 0, NULL);
        rc[1] = merak_send(g, device_buf, sizeof device_buf, 1, 1, &req[0]);
        rc[2] = rc[1] ? -1 : merak_wait(&req[0]);
        rc[3] = merak_send(g, host, sizeof host, 1, 0, NULL);
    } else {
        memset(host, 0, sizeof host);
        rc[0] = merak_recv(g, device_buf, sizeof device_buf, 0, 0, NULL);
        device_buf[0] = device_buf[3] = 0;
        rc[1] = merak_recv(g, device_buf, sizeof device_buf, 0, 1, &req[1]);
        rc[2] = rc[1] ? -1 : merak_wait(&req[1]);
        rc[3] = merak_recv(g, host, sizeof host, 0, 0, NULL);
    }
    const int back = merak_group_set_p2p(g, "mpi", err, sizeof err);
    printf("rank %d: rc %d %d %d %d opened %d sends %d receives %d device %g %g host %g %g bytes %llu back %d %d\n",
           rank, rc[0], rc[1], rc[2], rc[3], opened, dsends, drecvs, (double)device_buf[0], (double)device_buf[3],
           (double)host[0], (double)host[3], (unsigned long long)merak_group_bytes(g), back, g->dp2p);
    fflush(stdout);
    g->dcoll = NULL;
    merak_comm_finalize(c);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "sum";
    char err[512] = "";
    merak_comm *c = NULL;
    if (!strncmp(mode, "p2p", 3))
        return p2p(mode);
    if (merak_comm_init(&c, 2, 1, 1, err, sizeof err) < 0 || merak_comm_set_timeout(c, 1.0, err, sizeof err) < 0) {
        fprintf(stderr, "dcoll_probe: %s\n", err);
        return 1;
    }
    const int rank = merak_comm_grid(c)->rank;
    if (!strcmp(mode, "shared")) {
        const int same = merak_comm_devices_shared(c, 7.0);
        const int apart = merak_comm_devices_shared(c, 7.0 + rank);
        const int unknown = merak_comm_devices_shared(c, rank ? 8.0 : -1.0);
        printf("rank %d: shared %d %d %d\n", rank, same, apart, unknown);
        merak_comm_finalize(c);
        return 0;
    }
    merak_comm_set_devmem(c, &mem);
    merak_group *g = merak_comm_group(c, MERAK_GROUP_DP);
    g->dcoll = &fake;
    g->dcoll_state = (void *)mode;
    for (int i = 0; i < 4; i++)
        device_buf[i] = 10.0f + (float)rank;
    float host[4] = {1, 2, 3, 4};
    int rc = merak_allreduce(g, device_buf, 4, NULL);
    if (!strcmp(mode, "fail")) {
        printf("rank %d: rc %d calls %d error: %s\n", rank, rc, calls, merak_comm_error(c));
    } else {
        merak_req req;
        const int rc2 = merak_allreduce(g, device_buf, 4, &req);
        const int rc3 = rc2 == 0 ? merak_wait(&req) : -1;
        const int rc4 = merak_allreduce(g, host, 4, NULL);
        printf("rank %d: rc %d %d %d %d calls %d device %g host %g %g bytes %llu\n", rank, rc, rc2, rc3, rc4, calls,
               (double)device_buf[3], (double)host[0], (double)host[3], (unsigned long long)merak_group_bytes(g));
    }
    fflush(stdout);
    g->dcoll = NULL;
    merak_comm_finalize(c);
    return aborted;
}
