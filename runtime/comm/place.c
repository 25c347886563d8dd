/*
 * place.c - where a rank runs when mpirun started it: the placement the
 * Slurm plugin computes for srun (DESIGN.md sections 4 and 5), computed by
 * the ranks themselves.  Nodes are the ranks that share memory
 * (MPI_Comm_split_type), numbered by their lowest MPI rank; each rank
 * reads its own node with hwloc (topo/), places the whole job with every
 * other node unknown (ranks and coordinates never depend on topologies,
 * so every rank computes the same ones), and takes its task's environment
 * (merak_topo_task_env: MERAK_RANK, MERAK_GPU, MERAK_NIC, UCX_NET_DEVICES,
 * ...) and binding, as the plugin would give them.  Calls MPI and topo/
 * only; comm_mpi.c calls it before it numbers the world.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merak/topo.h"
#include "comm_impl.h"
#include "errf.h"

/* merak_topo_task_env's setter: the process's own environment, where a
 * value the user gave stays (MERAK_GPU still chooses the GPU; a stray
 * MERAK_WORLD_SIZE or MERAK_TP_RANK is still checked against the grid). */
static int set_env(void *arg, const char *name, const char *value, int overwrite)
{
    (void)arg, (void)overwrite;
    return setenv(name, value, 0);
}

/* The nodes of the job: node index and tasks per node from every rank's
 * node leader (its lowest MPI rank on the node).  Collective over world;
 * 0, or -1 when MPI failed. */
static int job_nodes(MPI_Comm world, MPI_Comm local, int *node, int *nnodes, int **tasks_per_node)
{
    int me, world_size, leader;
    MPI_Comm_rank(world, &me);
    MPI_Comm_size(world, &world_size);
    leader = me;
    int *all = malloc((size_t)world_size * sizeof *all), *counts = calloc((size_t)world_size, sizeof *counts);
    int ok = all && counts && MPI_Bcast(&leader, 1, MPI_INT, 0, local) == MPI_SUCCESS &&
             MPI_Allgather(&leader, 1, MPI_INT, all, 1, MPI_INT, world) == MPI_SUCCESS;
    /* a leader is the lowest rank of its node: node index = leaders below it */
    int n = 0;
    for (int r = 0; ok && r < world_size; r++) {
        if (all[r] == r)
            n++;
        counts[all[r]]++;
    }
    int *tpn = ok ? malloc((size_t)(n > 0 ? n : 1) * sizeof *tpn) : NULL;
    ok = ok && tpn;
    for (int r = 0, k = 0; ok && r < world_size; r++)
        if (all[r] == r) {
            if (r == leader)
                *node = k;
            tpn[k++] = counts[r];
        }
    free(all), free(counts);
    if (!ok) {
        free(tpn);
        return -1;
    }
    *nnodes = n;
    *tasks_per_node = tpn;
    return 0;
}

/* This machine, with the GPUs CUDA_VISIBLE_DEVICES leaves; without any
 * when the node's ranks outnumber them (ranks then share GPUs, which the
 * placement does not do: each takes its node-local rank modulo the GPUs,
 * as without a placement).  NULL with note. */
static merak_topo_node *this_node(int local_size, char *note, size_t notelen)
{
    merak_topo_node *node = NULL, *sub = NULL;
    char err[256];
    if (merak_topo_node_load(&node, NULL, err, sizeof err) < 0) {
        merak_errf(note, notelen, "not placed: no topology (%s)", err);
        return NULL;
    }
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    int ids[256], n = -1;
    if (visible && merak_topo_node_ngpus(node) > 0) {
        n = merak_topo_node_parse_visible(node, visible, ids, 256, err, sizeof err);
        if (n < 0 || n > 256) {
            merak_errf(note, notelen, "not placed: CUDA_VISIBLE_DEVICES: %s", n < 0 ? err : "more than 256 GPUs");
            merak_topo_node_destroy(node);
            return NULL;
        }
    }
    if ((n < 0 ? merak_topo_node_ngpus(node) : n) < local_size)
        n = 0;   /* fewer GPUs than ranks: place none */
    if (n >= 0) {
        if (merak_topo_node_restrict_gpus(node, ids, n, &sub, err, sizeof err) < 0) {
            merak_errf(note, notelen, "not placed: %s", err);
            sub = NULL;
        }
        merak_topo_node_destroy(node);
        node = sub;
    }
    return node;
}

/* MERAK_BIND: 1 closest (the default), 0 none, -1 anything else. */
static int bind_wanted(void)
{
    const char *s = getenv("MERAK_BIND");
    if (!s || !*s || strcmp(s, "closest") == 0)
        return 1;
    return strcmp(s, "none") == 0 ? 0 : -1;
}

/* Binds this rank to t's cores when nothing bound it before, its node's
 * cores are this machine's and enough for one each; says which in how. */
static void bind_self(const merak_topo_task *t, const merak_topo_node *node, int local_size, char *how,
                      size_t howlen)
{
    char err[256];
    const int pus = merak_topo_node_npus(node);
    if (!t->cpus)
        merak_errf(how, howlen, "not bound (no cores known)");
    else if (!merak_topo_node_is_this_system(node))
        merak_errf(how, howlen, "not bound (the topology is %s, not this machine)", merak_topo_node_source(node));
    else if (merak_topo_bound(node) != 0)
        merak_errf(how, howlen, "not bound by Merak (already bound: mpirun --bind-to or alike)");
    else if (pus < local_size)
        merak_errf(how, howlen, "not bound (%d ranks on %d cores)", local_size, pus);
    else if (merak_topo_bind(t->cpus, err, sizeof err) < 0)
        merak_errf(how, howlen, "not bound (%s)", err);
    else if (setenv("MERAK_CPUS", t->cpus, 1) == 0)
        merak_errf(how, howlen, "bound to cores %s", t->cpus);
}

int merak_place_self(MPI_Comm world, int dp, int tp, int pp, char *note, size_t notelen, char *err, size_t errlen)
{
    merak_errf(note, notelen, "placed by the Slurm plugin");
    /* The plugin placed the job when any rank has MERAK_RANK (world_rank
     * checks that they all do); every rank must agree before anything
     * collective. */
    const char *r = getenv("MERAK_RANK");
    const int bind = bind_wanted();
    int me;
    MPI_Comm_rank(world, &me);
    /* [0]: some rank has MERAK_RANK; [1]: the last MPI rank + 1 with a bad
     * MERAK_BIND, which every rank refuses alike */
    int mine[2] = {r && *r, bind < 0 ? me + 1 : 0}, any[2];
    if (MPI_Allreduce(mine, any, 2, MPI_INT, MPI_MAX, world) != MPI_SUCCESS)
        return merak_errf(err, errlen, "MPI_Allreduce of MERAK_RANK's presence failed");
    if (any[1] && bind < 0)
        return merak_errf(err, errlen, "MERAK_BIND=%s: expected closest or none", getenv("MERAK_BIND"));
    if (any[1])
        return merak_errf(err, errlen, "MERAK_BIND of MPI rank %d is not closest or none", any[1] - 1);
    if (any[0])
        return 0;

    MPI_Comm local;
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &local) != MPI_SUCCESS)
        return merak_errf(err, errlen, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
    int local_rank, local_size, node_id = 0, nnodes = 0, *tpn = NULL;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_size(local, &local_size);
    int rc = job_nodes(world, local, &node_id, &nnodes, &tpn);
    MPI_Comm_free(&local);
    if (rc < 0)
        return merak_errf(err, errlen, "gathering the ranks' nodes failed");

    merak_topo_node *node = this_node(local_size, note, notelen);
    const merak_topo_node **nodes = calloc((size_t)nnodes, sizeof *nodes);
    merak_topo_placement *p = NULL;
    char why[256];
    if (node && nodes) {
        nodes[node_id] = node;
        merak_topo_request req = {nnodes, tpn, nodes, dp, tp, pp, MERAK_TOPO_DIST_BLOCK};
        if (merak_topo_place(&req, &p, why, sizeof why) < 0)
            merak_errf(note, notelen, "not placed: %s", why);
    } else if (node) {
        merak_errf(note, notelen, "not placed: out of memory");
    }
    const merak_topo_task *t = p ? merak_topo_placement_find(p, node_id, local_rank) : NULL;
    /* all ranks placed, or none: a rank numbered by MPI beside ranks
     * numbered by the placement would make a wrong world */
    int placed = t != NULL, all = 0;
    if (MPI_Allreduce(&placed, &all, 1, MPI_INT, MPI_MIN, world) != MPI_SUCCESS)
        rc = merak_errf(err, errlen, "MPI_Allreduce of the ranks' placements failed");
    else if (!all && t)
        merak_errf(note, notelen, "not placed: another rank could not place itself");
    if (rc == 0 && all) {
        const char *g = getenv("MERAK_GPU");
        const int user_gpu = g && *g;
        char how[320] = "not bound (MERAK_BIND=none)";
        if (merak_topo_task_env(t, node, dp, tp, pp, set_env, NULL) < 0)
            rc = merak_errf(err, errlen, "cannot set this rank's environment: out of memory");
        else if (bind)
            bind_self(t, node, local_size, how, sizeof how);
        g = getenv("MERAK_GPU");
        merak_errf(note, notelen, "node %d of %d, task %d of %d: gpu %s%s, nic %s, %s", node_id, nnodes,
                   local_rank, local_size, g ? g : "-", user_gpu ? " (MERAK_GPU)" : "", t->nic ? t->nic : "-",
                   how);
    }
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(node);
    free(nodes);
    free(tpn);
    return rc;
}
