/*
 * topo_internal.h - the node summary that topo/ shares between its files:
 * discover.c fills it from hwloc, node.c builds, copies and queries it,
 * place.c reads it.  Not installed.
 */
#ifndef MERAK_TOPO_INTERNAL_H
#define MERAK_TOPO_INTERNAL_H

#include "merak/topo.h" /* public types */

#include "errf.h" /* merak_errf */

#include <errno.h>  /* errno, for topo_errf */
#include <hwloc.h>  /* hwloc_bitmap_t */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#define TOPO_INTERNAL __attribute__((visibility("hidden")))

#define TOPO_MAX_BRIDGES 16 /* PCI bridges kept between a device and its host bridge */
#define TOPO_BUSID_LEN 16   /* "0000:1b:00.0" + NUL */

/* The bridges above a PCI device, nearest first; the host bridge, when there
 * is one, is last.  Ids are hwloc gp_index values (or made-up ones for
 * synthetic devices), unique within one node. */
typedef struct topo_pcipath {
    int n;
    uint64_t id[TOPO_MAX_BRIDGES];
    unsigned char host[TOPO_MAX_BRIDGES]; /* 1 for a host bridge */
} topo_pcipath;

/* A set of cores with one locality: the whole machine, a NUMA node, or the
 * CPU-side object a device hangs under (package, NUMA group, cache). */
typedef struct topo_domain {
    hwloc_bitmap_t cpuset;  /* usable PUs */
    hwloc_bitmap_t nodeset; /* NUMA nodes (OS indexes) */
    int ncores;
    hwloc_bitmap_t *cores;  /* [ncores] each core's usable PUs, topology order */
    int numa;               /* first NUMA OS index, -1 */
    int package;            /* package OS index, -1 */
    char *cpus;             /* cpuset as a list */
} topo_domain;

typedef struct topo_gpu {
    char busid[TOPO_BUSID_LEN];
    unsigned vendor, device, class_id;
    char *model;
    char *uuid; /* NULL if unknown */
    int domain; /* index into node->domains */
    topo_pcipath path;
} topo_gpu;

typedef struct topo_nic {
    char *name;
    char *netdev; /* NULL if none */
    char busid[TOPO_BUSID_LEN]; /* "" if unknown */
    int rdma;
    int domain;
    topo_pcipath path;
} topo_nic;

struct merak_topo_node {
    char *source;
    int this_system;      /* 1: loaded from the machine this process runs on */
    int ndomains, cap_domains;
    topo_domain *domains; /* [0] is the whole machine */
    int nnumas;
    int *numa_domain;     /* [nnumas] domain of each NUMA node */
    int ngpus, cap_gpus;
    topo_gpu *gpus;       /* bus-id order */
    int nnics, cap_nics;
    topo_nic *nics;
    int nvlink_known;
    uint64_t *nvlink;     /* [ngpus * ngpus] or NULL */
    uint64_t next_id;     /* next made-up bridge id for synthetic devices */
};

/* Formats one line into err (when err && errlen), sets errno to errnum and
 * returns -1: merak_errf plus the errno that topo.h promises.  merak_errf
 * leaves errno alone, so errnum may be errno itself. */
static inline int topo_set_errno(int errnum)
{
    errno = errnum;
    return -1;
}
#define topo_errf(err, errlen, errnum, ...) \
    (merak_errf((err), (errlen), __VA_ARGS__), topo_set_errno(errnum))

/* node.c */
TOPO_INTERNAL merak_topo_node *topo_node_new(const char *source);
/* Adds a domain with copies of cpuset and nodeset (or finds an equal one) and
 * returns its index; cores are filled by the caller.  -1 on ENOMEM. */
TOPO_INTERNAL int topo_node_domain(merak_topo_node *node, hwloc_const_bitmap_t cpuset,
                                   hwloc_const_bitmap_t nodeset, int *created);
/* Appends a GPU or NIC slot (zeroed) and returns it, NULL on ENOMEM. */
TOPO_INTERNAL topo_gpu *topo_node_push_gpu(merak_topo_node *node);
TOPO_INTERNAL topo_nic *topo_node_push_nic(merak_topo_node *node);
/* Normalizes a bus id to "dddd:bb:dd.f"; returns 0 or -1 if malformed. */
TOPO_INTERNAL int topo_busid_normalize(const char *in, char out[TOPO_BUSID_LEN]);
/* Path class (enum merak_topo_path) between two devices; hops when not NULL. */
TOPO_INTERNAL int topo_path_class(const merak_topo_node *node, const topo_pcipath *a, int dom_a,
                                  const topo_pcipath *b, int dom_b, int *hops);
/* Same, between the cores of domain dom and a NIC (NODE or SYS). */
TOPO_INTERNAL int topo_domain_nic_class(const merak_topo_node *node, int dom, const topo_nic *nic);

/* nic.c: cls, hops are [ndev * nnics], the path class and PCIe hops from
 * device d to NIC k.  Writes out[ndev] (NIC index or -1) and, when load is
 * not NULL, load[nnics] (devices per NIC).  Returns 0 or -1 (ENOMEM). */
TOPO_INTERNAL int topo_nic_greedy(int ndev, int nnics, const int *cls, const int *hops, int *out,
                                  int *load);

/* partition.c: chooses ngroups disjoint groups of tp GPUs among n, the best
 * by (lowest pair score in any group, then sum of pair scores); ties go to
 * the first in lexicographic order, so identical inputs give identical
 * groups.  score is [n * n], symmetric.  Writes groups[ngroups * tp], each
 * group ascending, groups ordered by their first GPU.  Returns 0, or -1
 * (ENOMEM, or EINVAL when ngroups * tp > n). */
TOPO_INTERNAL int topo_partition(int n, const int64_t *score, int tp, int ngroups, int *groups);

#endif
