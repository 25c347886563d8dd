/*
 * env.c - a placed task's environment and binding (DESIGN.md section 4):
 * what the Slurm plugin gives each task, and what a rank started by mpirun
 * gives itself, from the same merak_topo_task.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_*_S */
#include "topo_internal.h"

#include <dirent.h>   /* opendir: the process's threads */
#include <sched.h>    /* sched_setaffinity */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* strtol */
#include <string.h>   /* strcmp, strerror */

/* 1 if node's NIC called name is an RDMA device (mlx5_0), 0 if a plain
 * network interface (eth0) or unknown. */
static int nic_is_rdma(const merak_topo_node *node, const char *name)
{
    for (int k = 0; node && k < node->nnics; k++)
        if (node->nics[k].name && strcmp(node->nics[k].name, name) == 0)
            return node->nics[k].rdma;
    return 0;
}

static int set_int(merak_topo_setenv_fn set, void *arg, const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    return set(arg, name, buf, 1);
}

int merak_topo_task_env(const merak_topo_task *t, const merak_topo_node *node, int dp, int tp, int pp,
                        merak_topo_setenv_fn set, void *arg)
{
    if (!t || !set || dp < 1 || tp < 1 || pp < 1) {
        errno = EINVAL;
        return -1;
    }
    const struct {
        const char *name;
        int value;
    } ints[] = {{"MERAK_DP", dp},        {"MERAK_TP", tp},           {"MERAK_PP", pp},
                {"MERAK_RANK", t->rank}, {"MERAK_WORLD_SIZE", dp * tp * pp},
                {"MERAK_DP_RANK", t->dp}, {"MERAK_TP_RANK", t->tp}, {"MERAK_PP_RANK", t->pp}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (set_int(set, arg, ints[i].name, ints[i].value) < 0)
            return -1;
    if (t->gpu >= 0) {
        if (set_int(set, arg, "MERAK_GPU", t->gpu) < 0 ||
            set(arg, "CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0) < 0 || /* CUDA numbers GPUs in bus order */
            (t->gpu_busid && set(arg, "MERAK_GPU_BUSID", t->gpu_busid, 1) < 0))
            return -1;
    }
    if (t->nic) {
        /* RDMA devices are named with a port for UCX; plain NICs by interface. */
        const int rdma = nic_is_rdma(node, t->nic);
        char ucx[96];
        snprintf(ucx, sizeof ucx, rdma ? "%s:1" : "%s", t->nic);
        if (set(arg, "MERAK_NIC", t->nic, 1) < 0 || set(arg, "UCX_NET_DEVICES", ucx, 0) < 0 ||
            (rdma && set(arg, "NCCL_IB_HCA", t->nic, 0) < 0))
            return -1;
    }
    return 0;
}

int merak_topo_bind(const char *list, char *err, size_t errlen)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    cpu_set_t *mask = NULL;
    int rc = -1;
    if (!set)
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    if (!list || hwloc_bitmap_list_sscanf(set, list) < 0 || hwloc_bitmap_weight(set) < 1) {
        rc = topo_errf(err, errlen, EINVAL, "bad core list '%s'", list ? list : "(none)");
        goto out;
    }
    const int last = hwloc_bitmap_last(set);
    mask = CPU_ALLOC(last + 1);
    const size_t size = CPU_ALLOC_SIZE(last + 1);
    if (!mask) {
        rc = topo_errf(err, errlen, ENOMEM, "out of memory");
        goto out;
    }
    CPU_ZERO_S(size, mask);
    unsigned cpu;
    hwloc_bitmap_foreach_begin(cpu, set) {
        CPU_SET_S(cpu, size, mask);
    }
    hwloc_bitmap_foreach_end();
    /* Every thread the process has (MPI's, a BLAS pool's); threads made
     * later inherit the affinity of the one that makes them. */
    int bad = sched_setaffinity(0, size, mask) < 0 ? errno : 0;
    DIR *d = bad ? NULL : opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue;
        if (sched_setaffinity((pid_t)tid, size, mask) < 0 && errno != ESRCH) /* ESRCH: it has ended */
            bad = errno;
    }
    if (d)
        closedir(d);
    rc = bad ? topo_errf(err, errlen, bad, "cannot bind to cores %s: %s (a topology that is not this node's?)",
                         list, strerror(bad))
             : 0;
out:
    if (mask)
        CPU_FREE(mask);
    hwloc_bitmap_free(set);
    return rc;
}

int merak_topo_bound(const merak_topo_node *node)
{
    if (!node || node->ndomains < 1) {
        errno = EINVAL;
        return -1;
    }
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof mask, &mask) < 0)
        return -1;
    unsigned pu;
    int left_out = 0;
    hwloc_bitmap_foreach_begin(pu, node->domains[0].cpuset) {
        if (pu < CPU_SETSIZE && !CPU_ISSET(pu, &mask))
            left_out = 1;
    }
    hwloc_bitmap_foreach_end();
    return left_out;
}
