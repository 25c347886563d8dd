/*
 * place_probe.c - one line per rank: where merak_init placed it under
 * mpirun (tests/mpi/mpi_place.sh).  Usage: place_probe DP TP PP.
 * Prints "mpi M rank R gpu G nic N ucx U hca H cpus C affinity A" (each
 * "-" when unset; affinity: the cores this rank may run on, as a list).
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "merak/merak.h"

static const char *env(const char *name)
{
    const char *s = getenv(name);
    return s && *s ? s : "-";
}

/* The cores of the calling thread's affinity as "0-3,8" into buf. */
static const char *affinity(char *buf, size_t len)
{
    cpu_set_t m;
    size_t used = 0;
    buf[0] = 0;
    if (sched_getaffinity(0, sizeof m, &m) < 0)
        return "?";
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &m) || (c > 0 && CPU_ISSET(c - 1, &m)))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &m))
            e++;
        int n = e > c ? snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, e)
                      : snprintf(buf + used, len - used, "%s%d", used ? "," : "", c);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: place_probe DP TP PP\n");
        return 2;
    }
    char err[512], aff[512];
    const char *mpi = env("OMPI_COMM_WORLD_RANK");
    if (merak_init(atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), err, sizeof err) < 0) {
        if (err[0])
            fprintf(stderr, "place_probe: %s\n", err);
        return 1;
    }
    printf("mpi %s rank %d gpu %s nic %s ucx %s hca %s cpus %s affinity %s\n", mpi, merak_rank(),
           env("MERAK_GPU"), env("MERAK_NIC"), env("UCX_NET_DEVICES"), env("NCCL_IB_HCA"), env("MERAK_CPUS"),
           affinity(aff, sizeof aff));
    fflush(stdout);
    merak_finalize();
    return 0;
}
