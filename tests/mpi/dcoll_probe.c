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

static const merak_dcoll_ops fake = {.name = "fake", .close = fake_close, .ops = {.allreduce = fake_allreduce}};

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "sum";
    char err[512] = "";
    merak_comm *c = NULL;
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
    static const merak_devmem mem = {is_device, no_copy, no_copy};
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
