/*
 * backends.c - the communication backends by name: the one list of them
 * (comm.c dispatches through the tables and names none).  The world is
 * MPI's; point-to-point is MPI's or UCX's, per group, and NCCL's for
 * device buffers; collectives on device buffers are NCCL's (in a CUDA
 * build) or MPI's, staged; and the rules that pick those
 * (merak_coll_choose, merak_p2p_choose).
 */
#include <stdio.h>
#include <string.h>

#include "config.h" /* HAVE_CUDA */
#include "comm_impl.h"
#include "errf.h"
#include "names.h"

static const merak_p2p_ops *const p2p_backends[] = {&merak_mpi_p2p, &merak_ucx_p2p};
enum { NP2P = sizeof p2p_backends / sizeof p2p_backends[0] };

const merak_world_ops *merak_world_backend(void) { return &merak_mpi_world; }

/* The --p2p names: the host tables', then the device one's ("nccl", in a
 * CUDA build: device buffers over NCCL, host ones over MPI). */
#ifdef HAVE_CUDA
#define NDEV_P2P 1
#else
#define NDEV_P2P 0
#endif
static const char *const *p2p_names(void)
{
    static const char *names[NP2P + 1];
    for (int i = 0; i < NP2P; i++)
        names[i] = p2p_backends[i]->name;
    names[NP2P] = "nccl";
    return names;
}

const merak_p2p_ops *merak_p2p_find(const char *name)
{
    if (!name)
        return &merak_mpi_p2p;
    int i = merak_name_find(p2p_names(), NP2P, name);
    return i < 0 ? NULL : p2p_backends[i];
}

int merak_p2p_check(const char *name) { return merak_name_find(p2p_names(), NP2P + NDEV_P2P, name) < 0 ? -1 : 0; }

int merak_p2p_is_device(const char *name) { return NDEV_P2P && name && strcmp(name, "nccl") == 0; }

const char *merak_p2p_names(void)
{
    static char names[64];
    return merak_names_join(p2p_names(), NP2P + NDEV_P2P, names, sizeof names);
}

/* ------------------------------------------------------------------ collectives */

/* "mpi" has no device table: device buffers go through host memory. */
static const char *const coll_names[] = {"mpi",
#ifdef HAVE_CUDA
                                         "nccl",
#endif
};
enum { NCOLL = sizeof coll_names / sizeof coll_names[0] };

const merak_dcoll_ops *merak_dcoll_find(const char *name)
{
#ifdef HAVE_CUDA
    if (name && strcmp(name, merak_nccl_dcoll.name) == 0)
        return &merak_nccl_dcoll;
#else
    (void)name;
#endif
    return NULL;
}

int merak_coll_check(const char *name) { return merak_name_find(coll_names, NCOLL, name) < 0 ? -1 : 0; }

const char *merak_coll_names(void)
{
    static char names[32];
    return merak_names_join(coll_names, NCOLL, names, sizeof names);
}

int merak_nccl_version(void)
{
    const merak_dcoll_ops *d = merak_dcoll_find("nccl");
    return d ? d->version() : 0;
}

/* merak_errf's line, and a usage error. */
#define USAGE(...) (merak_errf(__VA_ARGS__), MERAK_USAGE)

int merak_coll_choose(const char *asked, int host, int world, int shared, int nccl_version, int multi_rank,
                      const char **name, char *why, size_t whylen, char *err, size_t errlen)
{
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100);
    const int want_nccl = asked && strcmp(asked, "nccl") == 0;
    /* NCCL 2.30 is the first to allow ranks sharing a GPU (with the variable) */
    const int may_share = nccl_version >= 23000 && multi_rank;
    *name = "mpi";
    if (asked && merak_coll_check(asked) < 0)
        return USAGE(err, errlen, "coll '%s' is not %s", asked, merak_coll_names());
    if (host) {
        if (want_nccl)
            return USAGE(err, errlen, "coll nccl needs tensors on GPUs (device cuda); the CPU's go through MPI");
        snprintf(why, whylen, "tensors in host memory");
        return 0;
    }
    if (asked && !want_nccl) {
        snprintf(why, whylen, "asked for (--coll mpi): device buffers staged through host memory");
        return 0;
    }
    if (world == 1) {
        *name = want_nccl ? "nccl" : "mpi";
        snprintf(why, whylen, "one rank: no collectives");
        return 0;
    }
    /* why NCCL cannot take the device buffers here, if it cannot */
    char cannot[192] = "";
    if (!nccl_version)
        snprintf(cannot, sizeof cannot, "this library was built without NCCL (configure --with-cuda finds it)");
    else if (shared && !may_share)
        snprintf(cannot, sizeof cannot, "ranks of one node share a GPU, which NCCL %s refuses%s", v,
                 nccl_version >= 23000 ? " without NCCL_MULTI_RANK_GPU_ENABLE=1"
                                       : " (2.30 and later allow it with NCCL_MULTI_RANK_GPU_ENABLE=1)");
    if (*cannot) {
        if (want_nccl)
            return USAGE(err, errlen, "coll nccl: %s%s", cannot, shared ? "; give each rank its own GPU, or --coll mpi" : "");
        snprintf(why, whylen, "%s: device buffers staged through host memory", cannot);
        return 0;
    }
    *name = "nccl";
    snprintf(why, whylen, "NCCL %s; %s%s", v, want_nccl ? "asked for (--coll nccl)" : "each rank has its own GPU",
             shared ? "; ranks share a GPU (NCCL_MULTI_RANK_GPU_ENABLE=1)" : "");
    return 0;
}

int merak_p2p_choose(const char *asked, int host, int world, const char *coll, const char *coll_why,
                     const char **name, char *err, size_t errlen)
{
    *name = "mpi";
    if (asked && merak_p2p_check(asked) < 0)
        return USAGE(err, errlen, "p2p '%s' is not %s", asked, merak_p2p_names());
    const int want_dev = merak_p2p_is_device(asked);
    if (want_dev && host)
        return USAGE(err, errlen, "p2p %s needs tensors on GPUs (device cuda); the CPU's go through mpi or ucx",
                     asked);
    if (asked && (!want_dev || world == 1)) {
        *name = asked;
        return 0;
    }
    const int nccl_coll = !host && coll && strcmp(coll, "nccl") == 0;
    if (want_dev && !nccl_coll)
        return USAGE(err, errlen, "p2p %s needs NCCL's collectives, which this job does not take: %s", asked,
                     coll_why && *coll_why ? coll_why : "--coll mpi");
    *name = nccl_coll && world > 1 ? "nccl" : "mpi";
    return 0;
}
