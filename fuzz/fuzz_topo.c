/*
 * fuzz_topo.c - libFuzzer target: node topologies and the inputs of a
 * placement that topo parses and acts on.
 *
 * The node is one of: the hwloc XML files of tests/fixtures/topologies
 * (a PCIe server, a POWER8 with NVLink, a DGX-2), loaded once from
 * $FUZZ_TOPOLOGIES (a directory); a synthetic CPU node to which the input
 * adds GPUs and NICs through the API; or the input's own bytes as an hwloc
 * XML file.  hwloc 2.9 crashes on some malformed XML (a NULL cpuset in
 * hwloc_bitmap_compare_first); merak_topo_node_load reads a file in a
 * child process first and refuses one that crashes it, so such a file
 * must come back as an error, never a crash.
 *
 * Input: 4 bytes of request (tasks per node, tp, pp, nodes and the
 * distribution), a byte choosing the node, a length byte L and L bytes of
 * text, then the rest.  The text is tried as every string topo takes
 * (SLURM_TASKS_PER_NODE, --distribution, a CUDA_VISIBLE_DEVICES list,
 * NCCL_IB_HCA's NIC list); the rest is the XML, or for the hand-built node
 * lines of "gpu BUSID NUMA SWITCH" and "nic NAME BUSID NUMA SWITCH".  A
 * node is queried whole and placed; a placement that is made must number
 * every rank once, with coordinates that give the rank, each
 * tensor-parallel group on one node and no GPU given to two tasks.
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merak/topo.h"

enum { MAX_NODES = 3, MAX_TASKS = 16 };

static void strings(const merak_topo_node *node, const char *text)
{
    char err[512];
    int *counts = NULL, n = 0, dist;
    if (merak_topo_tasks_per_node_parse(text, &counts, &n, err, sizeof err) == 0) {
        if (n < 1)
            abort();
        for (int i = 0; i < n; i++)
            if (counts[i] < 1)
                abort();
        free(counts);
    }
    (void)merak_topo_distribution_parse(text, &dist, err, sizeof err);
    int gpus[64];
    const int k = merak_topo_node_parse_visible(node, text, gpus, 64, err, sizeof err);
    merak_topo_node *sub = NULL;
    if (k > 0 && merak_topo_node_restrict_gpus(node, gpus, k < 64 ? k : 64, &sub, err, sizeof err) == 0) {
        if (merak_topo_node_ngpus(sub) != (k < 64 ? k : 64))
            abort();
        merak_topo_node_destroy(sub);
    }
}

/* Every query of every GPU, NUMA node and NIC. */
static void query(const merak_topo_node *node)
{
    char err[512];
    const int ng = merak_topo_node_ngpus(node), nn = merak_topo_node_nnumas(node),
              nk = merak_topo_node_nnics(node);
    if (ng < 0 || nn < 0 || nk < 0 || !merak_topo_node_source(node))
        abort();
    for (int i = 0; i < ng; i++) {
        merak_topo_gpu_info g;
        if (merak_topo_node_gpu(node, i, &g) != 0 || !g.busid || !g.model || !g.cpus)
            abort();
        for (int j = 0; j < ng; j++)
            if (merak_topo_node_gpu_path(node, i, j) < 0)
                abort();
        for (int j = 0; j < nk; j++) {
            int hops;
            if (merak_topo_node_gpu_nic_path(node, i, j, &hops) < 0 || hops < 0)
                abort();
        }
    }
    for (int i = 0; i < nn; i++) {
        merak_topo_numa_info m;
        if (merak_topo_node_numa(node, i, &m) != 0 || !m.cpus || m.ncores < 0)
            abort();
    }
    for (int i = 0; i < nk; i++) {
        merak_topo_nic_info c;
        if (merak_topo_node_nic(node, i, &c) != 0 || !c.name)
            abort();
    }
    if (ng > 0) {
        int *pair = malloc((size_t)ng * sizeof *pair);
        if (!pair)
            abort();
        if (merak_topo_node_pair_nics(node, pair, err, sizeof err) == 0)
            for (int i = 0; i < ng; i++)
                if (pair[i] < -1 || pair[i] >= nk || (nk > 0 && pair[i] < 0))
                    abort();
        free(pair);
    }
}

static void place(const merak_topo_node *node, const uint8_t *r)
{
    const int per = 1 + r[0] % MAX_TASKS, nnodes = 1 + r[3] % MAX_NODES, total = per * nnodes;
    const int tp = 1 + r[1] % per, pp = 1 + r[2] % total;
    const int dp = total % (tp * pp) ? 1 : total / (tp * pp);   /* else refused, as it must be */
    int counts[MAX_NODES];
    const merak_topo_node *nodes[MAX_NODES];
    for (int i = 0; i < nnodes; i++)
        counts[i] = per, nodes[i] = node;
    merak_topo_request req = {nnodes, counts, nodes, dp, tp, pp,
                              r[3] & 0x80 ? MERAK_TOPO_DIST_CYCLIC : MERAK_TOPO_DIST_BLOCK};
    merak_topo_placement *p = NULL;
    char err[512];
    if (merak_topo_place(&req, &p, err, sizeof err) != 0) {
        if (p || !err[0])
            abort();   /* a refusal leaves nothing and says why */
        return;
    }
    if (dp * tp * pp != total || merak_topo_placement_ntasks(p) != total || !merak_topo_placement_score(p))
        abort();
    const int ng = merak_topo_node_ngpus(node);
    int seen[MAX_NODES * MAX_TASKS] = {0}, group_node[MAX_NODES * MAX_TASKS];
    unsigned char *gpu_used = calloc((size_t)nnodes * (size_t)(ng + 1), 1);
    if (!gpu_used)
        abort();
    for (int i = 0; i < total; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        if (!t || t->rank < 0 || t->rank >= total || seen[t->rank]++ || t->node < 0 || t->node >= nnodes ||
            t->tp + tp * (t->dp + dp * t->pp) != t->rank || merak_topo_placement_by_rank(p, t->rank) != t)
            abort();
        const int group = t->dp + dp * t->pp;   /* the tensor-parallel group */
        if (t->tp == 0)
            group_node[group] = t->node;
        if (t->gpu >= ng || (t->gpu >= 0 && gpu_used[t->node * ng + t->gpu]++))
            abort();   /* no such GPU, or one given twice */
    }
    for (int i = 0; i < total; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        if (group_node[t->dp + dp * t->pp] != t->node)
            abort();   /* a tensor-parallel group across nodes */
    }
    free(gpu_used);
    merak_topo_placement_destroy(p);
}

/* The fixture topologies, loaded once. */
static merak_topo_node *fixtures[8];
static int nfixtures;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *dir = getenv("FUZZ_TOPOLOGIES");
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        fprintf(stderr, "fuzz_topo: set FUZZ_TOPOLOGIES to a directory of hwloc XML files\n");
        abort();
    }
    struct dirent *e;
    char path[4096], err[512];
    while ((e = readdir(d)) && nfixtures < 8) {
        const size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".xml") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (merak_topo_node_load(&fixtures[nfixtures], path, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_topo: %s\n", err);
            abort();
        }
        nfixtures++;
    }
    closedir(d);
    if (!nfixtures)
        abort();
    return 0;
}

/* A synthetic CPU node (2 packages, a NUMA node each) with the devices
 * the lines of text ask for; NULL if the synthetic node cannot be built. */
static merak_topo_node *hand_built(char *text)
{
    merak_topo_node *node = NULL;
    char err[512];
    if (merak_topo_node_load_synthetic(&node, "pack:2 [numa] core:4 pu:1", err, sizeof err) != 0)
        abort();   /* a fixed, valid description */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char a[64], b[64], c[64];
        int numa, sw;
        if (sscanf(line, "gpu %63s %d %d", a, &numa, &sw) == 3)
            (void)merak_topo_node_add_gpu(node, a, numa, sw, err, sizeof err);
        else if (sscanf(line, "nic %63s %63s %d %d", b, c, &numa, &sw) == 4)
            (void)merak_topo_node_add_nic(node, b, strcmp(c, "-") ? c : NULL, numa, sw, err, sizeof err);
    }
    return node;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 6 || (size_t)6 + data[5] > size)
        return 0;
    const size_t L = data[5];
    char *text = malloc(L + 1), *rest = malloc(size - 6 - L + 1);
    if (!text || !rest)
        abort();
    memcpy(text, data + 6, L);
    text[L] = '\0';
    memcpy(rest, data + 6 + L, size - 6 - L);
    rest[size - 6 - L] = '\0';
    const int pick = data[4] % (nfixtures + 2);
    merak_topo_node *built = NULL;
    char err[512];
    if (pick == nfixtures) {
        built = hand_built(rest);
    } else if (pick == nfixtures + 1) {
        const int rc = merak_topo_node_load(&built, fuzz_file(data + 6 + L, size - 6 - L), err, sizeof err);
        if ((rc == 0) != (built != NULL) || (rc != 0 && !err[0]))
            abort();   /* a node, or a reason */
        if (!built) {
            free(text);
            free(rest);
            return 0;
        }
    }
    const merak_topo_node *node = built ? built : fixtures[pick];
    query(node);
    place(node, data);
    strings(node, text);
    /* a NIC list keeps some NICs: on a copy (restricting to every GPU copies) */
    merak_topo_node *copy = NULL;
    const int ng = merak_topo_node_ngpus(node);
    int *all = malloc(((size_t)ng + 1) * sizeof *all);
    if (!all)
        abort();
    for (int i = 0; i < ng; i++)
        all[i] = i;
    if (merak_topo_node_restrict_gpus(node, all, ng, &copy, err, sizeof err) != 0)
        abort();   /* every GPU once, in order: always a copy */
    if (merak_topo_node_select_nics(copy, text, err, sizeof err) == 0) {
        query(copy);
        place(copy, data);
    }
    merak_topo_node_destroy(copy);
    merak_topo_node_destroy(built);
    free(all);
    free(text);
    free(rest);
    return 0;
}
