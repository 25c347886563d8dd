/*
 * test_topo.c - libmerak-topo on the hwloc XML fixtures (tests/fixtures/
 * topologies) and synthetic nodes: discovery (GPUs, NICs, NVLink, cores),
 * placement rules (tp groups in a node and on one socket, vendor NIC pairing,
 * pipeline neighbours, rails), refusals, renumbering, rank order, and the
 * time to place 1,024 nodes x 8 GPUs.  TAP output.
 *
 * Fixtures are found under $MERAK_SRCDIR/tests/fixtures/topologies (default:
 * the current directory as the source tree).
 */
#include "merak/topo.h"
#include "tap.h"

#include <errno.h>  /* errno, EINVAL */
#include <hwloc.h>  /* bitmaps, to compare cpusets */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* getenv, setenv, free */
#include <string.h> /* strcmp, strstr */
#include <time.h>   /* clock_gettime */

#define H100 "authored-dgx-h100-8xH100-8xCX7.xml"
#define A100 "authored-dgx-a100-8xA100-from-nccl-dump.xml"
#define PCIE "authored-pcie-2s-8xL40S-4xCX6.xml"
#define DGX2 "real-hwloc-test-nvidiaDGX2-reduced.xml"
#define DGX2H "real-nvidia-dgx2h-16xV100-10xIB.xml"
#define POWER8 "real-hwloc-test-power8-4xP100-nvlink.xml"

static char errbuf[512];

static const char *fixture(const char *name)
{
    static char path[4096];
    const char *src = getenv("MERAK_SRCDIR");
    snprintf(path, sizeof(path), "%s/tests/fixtures/topologies/%s", src && *src ? src : ".", name);
    return path;
}

static merak_topo_node *load(const char *name)
{
    merak_topo_node *node = NULL;
    if (merak_topo_node_load(&node, fixture(name), errbuf, sizeof(errbuf)))
        printf("# load %s: %s\n", name, errbuf);
    return node;
}

/* Places a job of nnodes copies of node (NULL: unknown), K tasks each. */
static merak_topo_placement *place(const merak_topo_node *node, int nnodes, int K, int dp, int tp,
                                   int pp, int dist)
{
    int *tasks = malloc((size_t)nnodes * sizeof(int));
    const merak_topo_node **nodes = malloc((size_t)nnodes * sizeof(*nodes));
    for (int n = 0; n < nnodes; n++) {
        tasks[n] = K;
        nodes[n] = node;
    }
    merak_topo_request req = {nnodes, tasks, nodes, dp, tp, pp, dist};
    merak_topo_placement *p = NULL;
    errbuf[0] = '\0';
    if (merak_topo_place(&req, &p, errbuf, sizeof(errbuf)))
        p = NULL;
    free(tasks);
    free(nodes);
    return p;
}

/* Rank order and grid invariants: ranks are a permutation, rank = tp +
 * TP*(dp + DP*pp), and every tp group (ranks r..r+TP-1) sits on one node. */
static int grid_ok(const merak_topo_placement *p, int DP, int TP, int PP)
{
    int n = merak_topo_placement_ntasks(p);
    if (n != DP * TP * PP)
        return 0;
    for (int i = 0; i < n; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        if (t->rank != t->tp + TP * (t->dp + DP * t->pp) || t->tp >= TP || t->dp >= DP ||
            t->pp >= PP)
            return 0;
        if (merak_topo_placement_by_rank(p, t->rank) != t)
            return 0;
        if (merak_topo_placement_find(p, t->node, t->local_task) != t)
            return 0;
        const merak_topo_task *lead = merak_topo_placement_by_rank(p, t->rank - t->tp);
        if (lead->node != t->node || lead->dp != t->dp || lead->pp != t->pp)
            return 0;
    }
    return 1;
}

/* No two tasks of a node share a PU. */
static int cpus_disjoint(const merak_topo_placement *p)
{
    int n = merak_topo_placement_ntasks(p), ok = 1;
    hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc();
    for (int i = 0; ok && i < n; i++)
        for (int j = i + 1; ok && j < n; j++) {
            const merak_topo_task *s = merak_topo_placement_task(p, i),
                                  *t = merak_topo_placement_task(p, j);
            if (s->node != t->node)
                continue;
            hwloc_bitmap_list_sscanf(a, s->cpus);
            hwloc_bitmap_list_sscanf(b, t->cpus);
            ok = !hwloc_bitmap_intersects(a, b);
        }
    hwloc_bitmap_free(a);
    hwloc_bitmap_free(b);
    return ok;
}

/* Is list sub included in list sup? */
static int cpus_within(const char *sub, const char *sup)
{
    hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc();
    int ok = sub && sup && hwloc_bitmap_list_sscanf(a, sub) == 0 &&
             hwloc_bitmap_list_sscanf(b, sup) == 0 && !hwloc_bitmap_iszero(a) &&
             hwloc_bitmap_isincluded(a, b);
    hwloc_bitmap_free(a);
    hwloc_bitmap_free(b);
    return ok;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------ discovery */

static void test_fixtures_load(void)
{
    static const struct {
        const char *name;
        int gpus, nics, numas;
    } want[] = {
        {A100, 8, 12, 8}, {H100, 8, 12, 2},   {PCIE, 8, 4, 2},
        {DGX2, 16, 0, 2}, {DGX2H, 16, 11, 2}, {POWER8, 4, 0, 2},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        merak_topo_node *node = load(want[i].name);
        int sorted = node != NULL;
        for (int g = 1; node && g < merak_topo_node_ngpus(node); g++) {
            merak_topo_gpu_info a, b;
            merak_topo_node_gpu(node, g - 1, &a);
            merak_topo_node_gpu(node, g, &b);
            sorted &= strcmp(a.busid, b.busid) < 0;
        }
        tap_ok(node && merak_topo_node_ngpus(node) == want[i].gpus &&
                   merak_topo_node_nnics(node) == want[i].nics &&
                   merak_topo_node_nnumas(node) == want[i].numas && sorted,
               "%s: %d GPUs in bus-id order, %d NICs, %d NUMA nodes", want[i].name, want[i].gpus,
               want[i].nics, want[i].numas);
        /* the minimal XML parser sees the same node */
        setenv("HWLOC_LIBXML_IMPORT", "0", 1);
        merak_topo_node *m = load(want[i].name);
        unsetenv("HWLOC_LIBXML_IMPORT");
        int same = node && m && merak_topo_node_ngpus(m) == merak_topo_node_ngpus(node) &&
                   merak_topo_node_nnics(m) == merak_topo_node_nnics(node) &&
                   merak_topo_node_nvlink_known(m) == merak_topo_node_nvlink_known(node);
        for (int g = 0; same && g < merak_topo_node_ngpus(node); g++) {
            merak_topo_gpu_info a, b;
            merak_topo_node_gpu(node, g, &a);
            merak_topo_node_gpu(m, g, &b);
            same = !strcmp(a.busid, b.busid) && !strcmp(a.cpus, b.cpus) &&
                   merak_topo_node_nvlink(node, 0, g) == merak_topo_node_nvlink(m, 0, g);
        }
        tap_ok(same, "%s: the minimal XML parser gives the same GPUs, cores and NVLink",
               want[i].name);
        merak_topo_node_destroy(m);
        merak_topo_node_destroy(node);
    }
}

static void test_h100_node(void)
{
    static const char *const bus[] = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0",
                                      "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0",
                                      "0000:d1:00.0", "0000:df:00.0"};
    static const char *const nic[] = {"mlx5_0", "mlx5_3", "mlx5_4",  "mlx5_5",
                                      "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"};
    merak_topo_node *node = load(H100);
    if (!tap_ok(node != NULL, "H100: loads"))
        return;
    int ok = 1, nvok = 1, nicok = 1, pairs[8];
    merak_topo_node_pair_nics(node, pairs, errbuf, sizeof(errbuf));
    for (int g = 0; g < 8; g++) {
        merak_topo_gpu_info gi;
        merak_topo_nic_info ni;
        merak_topo_node_gpu(node, g, &gi);
        ok &= !strcmp(gi.busid, bus[g]) && gi.numa == g / 4 && gi.package == g / 4 &&
              !strcmp(gi.cpus, g < 4 ? "0-55,112-167" : "56-111,168-223");
        nicok &= pairs[g] >= 0 && merak_topo_node_nic(node, pairs[g], &ni) == 0 &&
                 !strcmp(ni.name, nic[g]) &&
                 merak_topo_node_gpu_nic_path(node, g, pairs[g], NULL) == MERAK_TOPO_PATH_PIX;
        for (int h = 0; h < 8; h++)
            nvok &= merak_topo_node_nvlink(node, g, h) == (g == h ? 0 : 900000);
    }
    tap_ok(ok, "H100: bus ids 1b,43,52,61,9d,c3,d1,df; GPU0-3 on socket 0, GPU4-7 on socket 1");
    tap_ok(nicok, "H100: GPU i pairs with mlx5_{0,3,4,5,6,9,10,11}[i], all PIX (vendor table)");
    tap_ok(nvok && merak_topo_node_nvlink_known(node),
           "H100: NVLink 900000 between all pairs (NVSwitch)");
    merak_topo_node_destroy(node);
}

static void test_other_nodes(void)
{
    merak_topo_node *a = load(A100);
    static const char *const anic[] = {"mlx5_1", "mlx5_0", "mlx5_3", "mlx5_2",
                                       "mlx5_7", "mlx5_6", "mlx5_9", "mlx5_8"};
    static const int anuma[] = {3, 3, 1, 1, 7, 7, 5, 5};
    int ok = a != NULL, pairs[16];
    if (a)
        merak_topo_node_pair_nics(a, pairs, errbuf, sizeof(errbuf));
    for (int g = 0; ok && g < 8; g++) {
        merak_topo_gpu_info gi;
        merak_topo_nic_info ni;
        merak_topo_node_gpu(a, g, &gi);
        merak_topo_node_nic(a, pairs[g], &ni);
        ok = !strcmp(ni.name, anic[g]) && gi.numa == anuma[g] &&
             merak_topo_node_gpu_nic_path(a, g, pairs[g], NULL) ==
                 (g % 2 ? MERAK_TOPO_PATH_PIX : MERAK_TOPO_PATH_PXB);
    }
    tap_ok(ok, "A100: NUMA 3,3,1,1,7,7,5,5; global greedy gives GPU0 mlx5_1 (PXB), GPU1 mlx5_0 "
               "(PIX), ...");
    merak_topo_node_destroy(a);

    merak_topo_node *d = load(DGX2H);
    static const char *const dnic[] = {"mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4",
                                       "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_10"};
    ok = d != NULL;
    if (d)
        merak_topo_node_pair_nics(d, pairs, errbuf, sizeof(errbuf));
    for (int g = 0; ok && g < 16; g++) {
        merak_topo_nic_info ni;
        merak_topo_node_nic(d, pairs[g], &ni);
        ok = !strcmp(ni.name, dnic[g / 2]) &&
             merak_topo_node_gpu_nic_path(d, g, pairs[g], NULL) == MERAK_TOPO_PATH_PIX;
    }
    tap_ok(ok, "DGX-2H: GPU pairs share mlx5_{1,2,3,4,7,8,9,10}, all PIX");
    merak_topo_node_destroy(d);

    merak_topo_node *r = load(DGX2);
    ok = r && merak_topo_node_nvlink_known(r);
    for (int g = 0; ok && g < 16; g++)
        for (int h = 0; h < 16; h++)
            ok &= merak_topo_node_nvlink(r, g, h) == (g == h ? 0u : 150000u);
    tap_ok(ok, "DGX-2 (hwloc test): NVSwitch closure gives 150000 between all 16 GPUs");
    merak_topo_node_destroy(r);

    merak_topo_node *w = load(POWER8);
    ok = w && merak_topo_node_nvlink_known(w);
    for (int g = 0; ok && g < 4; g++)
        for (int h = 0; h < 4; h++)
            ok &= merak_topo_node_nvlink(w, g, h) == (g != h && g / 2 == h / 2 ? 40000u : 0u);
    tap_ok(ok, "POWER8: no NVSwitch, no closure: NVLink only for pairs 0-1 and 2-3");
    merak_topo_node_destroy(w);

    merak_topo_node *c = load(PCIE);
    tap_ok(c && !merak_topo_node_nvlink_known(c) &&
               merak_topo_node_gpu_path(c, 0, 1) == MERAK_TOPO_PATH_PIX &&
               merak_topo_node_gpu_path(c, 0, 2) == MERAK_TOPO_PATH_NODE &&
               merak_topo_node_gpu_path(c, 0, 4) == MERAK_TOPO_PATH_SYS,
           "PCIe node: NVLink unknown; paths PIX (same switch), NODE (same socket), SYS");
    merak_topo_node_destroy(c);

    merak_topo_node *x = NULL;
    int rc = merak_topo_node_load(&x, fixture("no-such-node.xml"), errbuf, sizeof(errbuf));
    tap_ok(rc == -1 && !x && strstr(errbuf, "no-such-node.xml") && strstr(errbuf, "cannot read"),
           "a missing XML file is an error naming it: %s", errbuf);
    rc = merak_topo_node_load(&x, fixture("make_gpu_node_xml.py"), errbuf, sizeof(errbuf));
    tap_ok(rc == -1 && !x && strstr(errbuf, "not an hwloc XML"),
           "a file that is not XML is refused: %s", errbuf);
    rc = merak_topo_node_load_synthetic(&x, "bogus:3", errbuf, sizeof(errbuf));
    tap_ok(rc == -1 && errno == EINVAL && !x, "a bad synthetic description is refused: %s", errbuf);
    rc = merak_topo_node_load(&x, NULL, errbuf, sizeof(errbuf));
    tap_ok(rc == 0 && x && merak_topo_node_nnumas(x) >= 1,
           "the live machine loads (%d GPUs, %d NICs)", merak_topo_node_ngpus(x),
           merak_topo_node_nnics(x));
    merak_topo_node_destroy(x);
}

/* ------------------------------------------------------------ placement */

static void test_h100_tp8(void)
{
    static const char *const nic[] = {"mlx5_0", "mlx5_3", "mlx5_4",  "mlx5_5",
                                      "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"};
    merak_topo_node *node = load(H100);
    merak_topo_placement *p = place(node, 4, 8, 2, 8, 2, MERAK_TOPO_DIST_BLOCK);
    if (!tap_ok(p != NULL, "H100 x4, dp=2 tp=8 pp=2: placed (%s)", errbuf)) {
        merak_topo_node_destroy(node);
        return;
    }
    tap_ok(grid_ok(p, 2, 8, 2), "H100 tp=8: rank = tp + 8*(dp + 2*pp), each tp group on one node");
    int onenode = 1, gpus = 1, nics = 1, socket = 1;
    for (int i = 0; i < 32; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        const merak_topo_task *lead = merak_topo_placement_by_rank(p, t->rank - t->tp);
        onenode &= lead->node == t->node && t->tp == t->local_task; /* a node is one group */
        gpus &= t->gpu == t->local_task;
        nics &= t->nic && !strcmp(t->nic, nic[t->gpu]) && t->nic_path == MERAK_TOPO_PATH_PIX;
        socket &= cpus_within(t->cpus, t->gpu < 4 ? "0-55,112-167" : "56-111,168-223") &&
                  t->numa == t->gpu / 4;
    }
    tap_ok(onenode, "H100 tp=8: every node holds exactly one tp group");
    tap_ok(gpus, "H100 tp=8: local task i runs on GPU i");
    tap_ok(nics, "H100 tp=8: every GPU gets its paired NIC from the vendor table (PIX)");
    tap_ok(socket && cpus_disjoint(p), "H100 tp=8: cores on the GPU's own socket, none shared");
    const merak_topo_task *t0 = merak_topo_placement_task(p, 0),
                          *t7 = merak_topo_placement_task(p, 7);
    tap_ok(!strcmp(t0->cpus, "0-13,112-125") && !strcmp(t7->cpus, "98-111,210-223") &&
               !strcmp(t0->gpu_busid, "0000:1b:00.0"),
           "H100 tp=8: 14 cores + HT siblings per GPU (task 0 %s, task 7 %s)", t0->cpus, t7->cpus);
    const merak_topo_score *s = merak_topo_placement_score(p);
    tap_ok(s->tp_pairs == 4 * 28 && s->tp_pairs_nvlink == 4 * 28 && s->tp_nvlink_frac == 1.0 &&
               s->tp_cross_node == 0,
           "H100 tp=8 score: %d of %d tp pairs on NVLink", s->tp_pairs_nvlink, s->tp_pairs);
    tap_ok(s->dp_cross_node == s->dp_links && s->dp_rail_aligned == s->dp_cross_node &&
               s->dp_links == 16,
           "H100 tp=8: dp peers on other nodes, all on the same rail (%d of %d)",
           s->dp_rail_aligned, s->dp_cross_node);
    tap_ok(s->pp_links == 16 && s->pp_cross_node == 16 && !s->renumbered && s->nic_dist_mean == 1.0,
           "H100 tp=8: pp links cross nodes (one group per node), ranks = task ids, NIC path PIX");
    merak_topo_placement_destroy(p);

    /* tp=4, pp=2 on two nodes: the pipeline pair shares a node */
    p = place(node, 2, 8, 2, 4, 2, MERAK_TOPO_DIST_BLOCK);
    s = p ? merak_topo_placement_score(p) : NULL;
    tap_ok(p && grid_ok(p, 2, 4, 2) && s->pp_cross_node == 0 && s->pp_links == 8 && s->renumbered &&
               s->dp_rail_aligned == s->dp_cross_node && s->dp_cross_node == 8,
           "H100 x2, dp=2 tp=4 pp=2: pipeline neighbours on one node, dp peers on the same rail");
    merak_topo_placement_destroy(p);

    /* 4 tasks on a node: GPUs 0-3 and their own NICs */
    p = place(node, 2, 4, 2, 4, 1, MERAK_TOPO_DIST_BLOCK);
    int ok = p && grid_ok(p, 2, 4, 1);
    for (int i = 0; ok && i < 8; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        ok = t->gpu == t->local_task && !strcmp(t->nic, nic[t->gpu]) &&
             cpus_within(t->cpus, "0-55,112-167");
    }
    tap_ok(ok && cpus_disjoint(p),
           "H100 with 4 tasks per node: GPUs 0-3, their NICs, socket 0 split in 4");
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(node);
}

static void test_pcie_tp4(void)
{
    merak_topo_node *node = load(PCIE);
    merak_topo_placement *p = place(node, 2, 8, 4, 4, 1, MERAK_TOPO_DIST_BLOCK);
    int ok = p && grid_ok(p, 4, 4, 1);
    for (int i = 0; ok && i < 16; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        const merak_topo_task *lead = merak_topo_placement_by_rank(p, t->rank - t->tp);
        merak_topo_gpu_info a, b;
        merak_topo_node_gpu(node, t->gpu, &a);
        merak_topo_node_gpu(node, lead->gpu, &b);
        ok = a.package == b.package && cpus_within(t->cpus, a.cpus);
    }
    const merak_topo_score *s = p ? merak_topo_placement_score(p) : NULL;
    tap_ok(ok && cpus_disjoint(p),
           "PCIe 2-socket node, tp=4: every tp group on one socket, cores local");
    tap_ok(s && s->tp_nvlink_frac == -1.0 && s->tp_pairs_known == 0 && s->nic_max_load == 2 &&
               s->nic_dist_mean == 1.0,
           "PCIe node: tp NVLink fraction unknown (not 0); 2 GPUs per NIC, all PIX");
    merak_topo_placement_destroy(p);

    p = place(node, 1, 8, 4, 2, 1, MERAK_TOPO_DIST_BLOCK);
    ok = p != NULL;
    for (int i = 0; ok && i < 8; i += 2) {
        const merak_topo_task *t = merak_topo_placement_task(p, i),
                              *u = merak_topo_placement_task(p, i + 1);
        ok = t->tp == 0 && u->tp == 1 &&
             merak_topo_node_gpu_path(node, t->gpu, u->gpu) == MERAK_TOPO_PATH_PIX;
    }
    tap_ok(ok, "PCIe node, tp=2: every tp pair under one PCIe switch");
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(node);
}

/* GPUs whose bus-id order alternates sockets, so consecutive groups are wrong. */
static void test_synthetic_partition(void)
{
    merak_topo_node *node = NULL;
    int ok = merak_topo_node_load_synthetic(&node, "pack:2 [numa] core:8 pu:2", errbuf,
                                            sizeof(errbuf)) == 0;
    for (int g = 0; ok && g < 8; g++) {
        char bus[32];
        snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x10 + g);
        ok = merak_topo_node_add_gpu(node, bus, g % 2, -1, errbuf, sizeof(errbuf)) == g;
    }
    tap_ok(ok && merak_topo_node_ngpus(node) == 8,
           "synthetic node with 8 GPUs alternating sockets (%s)", ok ? "ok" : errbuf);
    tap_ok(merak_topo_node_add_gpu(node, "0000:05:00.0", 0, -1, errbuf, sizeof(errbuf)) == -1 &&
               merak_topo_node_add_gpu(node, "0000:40:00.0", 7, -1, errbuf, sizeof(errbuf)) == -1,
           "add_gpu refuses a bus id out of order and an unknown NUMA node");
    merak_topo_placement *p = place(node, 1, 8, 2, 4, 1, MERAK_TOPO_DIST_BLOCK);
    ok = p && grid_ok(p, 2, 4, 1);
    for (int i = 0; ok && i < 8; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        ok = t->gpu % 2 == i / 4 && t->numa == i / 4;
    }
    tap_ok(ok && cpus_disjoint(p),
           "synthetic, tp=4: groups {0,2,4,6} and {1,3,5,7}, one per socket");
    merak_topo_placement_destroy(p);

    /* NVLink outranks PCIe locality: link 0-3 and 1-2 */
    merak_topo_node *q = NULL;
    ok = merak_topo_node_load_synthetic(&q, "pack:1 [numa] core:8 pu:1", errbuf, sizeof(errbuf)) ==
         0;
    for (int g = 0; ok && g < 4; g++) {
        char bus[32];
        snprintf(bus, sizeof(bus), "%02x:00.0", 0x20 + g);
        ok = merak_topo_node_add_gpu(q, bus, 0, g / 2, errbuf, sizeof(errbuf)) == g;
    }
    ok = ok && merak_topo_node_set_nvlink(q, 0, 3, 50000, errbuf, sizeof(errbuf)) == 0 &&
         merak_topo_node_set_nvlink(q, 1, 2, 50000, errbuf, sizeof(errbuf)) == 0 &&
         merak_topo_node_set_nvlink(q, 1, 1, 5, errbuf, sizeof(errbuf)) == -1;
    p = ok ? place(q, 1, 4, 2, 2, 1, MERAK_TOPO_DIST_BLOCK) : NULL;
    const merak_topo_task *t[4];
    for (int i = 0; p && i < 4; i++)
        t[i] = merak_topo_placement_task(p, i);
    tap_ok(p && t[0]->gpu == 0 && t[1]->gpu == 3 && t[2]->gpu == 1 && t[3]->gpu == 2 &&
               merak_topo_placement_score(p)->tp_nvlink_frac == 1.0,
           "synthetic, NVLink 0-3 and 1-2: tp pairs follow NVLink, not the PCIe switches");
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(q);

    /* 16 GPUs, 8 per socket, 2 per switch, tp=4: groups of two switches on one socket */
    merak_topo_node *b = NULL;
    ok = merak_topo_node_load_synthetic(&b, "pack:2 [numa] core:16 pu:1", errbuf, sizeof(errbuf)) ==
         0;
    for (int g = 0; ok && g < 16; g++) {
        char bus[32];
        snprintf(bus, sizeof(bus), "%02x:00.0", 0x10 + 8 * g);
        ok = merak_topo_node_add_gpu(b, bus, g / 8, g / 2, errbuf, sizeof(errbuf)) == g;
    }
    double t0 = now_ms();
    p = ok ? place(b, 1, 16, 4, 4, 1, MERAK_TOPO_DIST_BLOCK) : NULL;
    double ms = now_ms() - t0;
    ok = p != NULL;
    for (int i = 0; ok && i < 16; i++) {
        const merak_topo_task *u = merak_topo_placement_task(p, i);
        ok = u->gpu / 8 == i / 8 &&
             merak_topo_node_gpu_path(b, u->gpu, u->gpu ^ 1) == MERAK_TOPO_PATH_PIX;
    }
    tap_ok(ok, "synthetic 16 GPUs, tp=4: groups stay on one socket (partition search %.2f ms)", ms);
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(b);
    merak_topo_node_destroy(node);
}

static void test_refusals(void)
{
    merak_topo_node *node = load(H100);
    merak_topo_placement *p = place(node, 2, 4, 1, 8, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(!p && errno == EINVAL && strstr(errbuf, "--merak-tp=8 needs 8 tasks on one node") &&
               strstr(errbuf, "--ntasks-per-node=8 (or a multiple of 8)") && !strchr(errbuf, '\n'),
           "tp=8 with 4 tasks per node is refused: %s", errbuf);
    p = place(node, 2, 6, 3, 4, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(!p && strstr(errbuf, "multiple of 4") && strstr(errbuf, "-N 3 --ntasks-per-node=4"),
           "tp=4 with 6 tasks per node is refused: %s", errbuf);
    p = place(node, 3, 8, 2, 8, 2, MERAK_TOPO_DIST_BLOCK);
    tap_ok(!p && strstr(errbuf, "dp*tp*pp = 2*8*2 = 32") &&
               strstr(errbuf, "-N 4 --ntasks-per-node=8"),
           "a grid that does not match the tasks is refused: %s", errbuf);
    p = place(node, 3, 8, 2, 8, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(!p && strstr(errbuf, "-N 2 --ntasks-per-node=8, or --merak-dp=3"),
           "the refusal also names the dp that fits: %s", errbuf);
    p = place(node, 1, 16, 2, 8, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(!p && strstr(errbuf, "16 tasks but 8 GPUs") &&
               strstr(errbuf, "-N 2 --ntasks-per-node=8"),
           "more tasks than GPUs is refused: %s", errbuf);
    p = place(node, 1, 8, 0, 8, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(!p && strstr(errbuf, "at least 1"), "dp=0 is refused: %s", errbuf);
    p = place(node, 1, 8, 1, 8, 1, 7);
    tap_ok(!p && strstr(errbuf, "distribution"), "an unknown distribution is refused: %s", errbuf);
    merak_topo_node_destroy(node);
}

static void test_cyclic_and_uneven(void)
{
    merak_topo_node *node = load(H100);
    merak_topo_placement *p = place(node, 2, 8, 2, 8, 1, MERAK_TOPO_DIST_CYCLIC);
    int ok = p && grid_ok(p, 2, 8, 1), cyclic = p != NULL;
    for (int i = 0; cyclic && i < 16; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        cyclic = t->procid == 2 * t->local_task + t->node && t->gpu == t->local_task;
    }
    tap_ok(
        ok && cyclic && merak_topo_placement_score(p)->renumbered,
        "cyclic distribution (task ids alternate nodes): renumbered so tp groups stay on one node");
    merak_topo_placement_destroy(p);

    /* the same with unknown topologies gives the same ranks */
    merak_topo_placement *a = place(node, 4, 8, 4, 4, 2, MERAK_TOPO_DIST_CYCLIC);
    merak_topo_placement *b = place(NULL, 4, 8, 4, 4, 2, MERAK_TOPO_DIST_CYCLIC);
    ok = a && b;
    for (int i = 0; ok && i < 32; i++) {
        const merak_topo_task *s = merak_topo_placement_task(a, i),
                              *t = merak_topo_placement_task(b, i);
        ok = s->rank == t->rank && s->procid == t->procid && t->gpu == -1 && !t->cpus && !t->nic &&
             s->gpu >= 0;
    }
    tap_ok(ok && grid_ok(b, 4, 4, 2),
           "ranks do not depend on topologies (unknown nodes: ranks only)");
    merak_topo_placement_destroy(a);
    merak_topo_placement_destroy(b);

    int tasks[3] = {8, 4, 4};
    const merak_topo_node *nodes[3] = {node, node, node};
    merak_topo_request req = {3, tasks, nodes, 2, 4, 2, MERAK_TOPO_DIST_BLOCK};
    p = NULL;
    ok = merak_topo_place(&req, &p, errbuf, sizeof(errbuf)) == 0 && grid_ok(p, 2, 4, 2);
    const merak_topo_score *s = ok ? merak_topo_placement_score(p) : NULL;
    tap_ok(ok && s->pp_links == 8 && s->pp_cross_node == 4 && cpus_disjoint(p),
           "uneven 8,4,4 tasks, tp=4 pp=2: one pipeline inside node 0, one across nodes 1-2");
    merak_topo_placement_destroy(p);

    int bad[2] = {8, 6};
    merak_topo_request rq = {2, bad, NULL, 7, 2, 1, MERAK_TOPO_DIST_BLOCK};
    tap_ok(merak_topo_place(&rq, &p, errbuf, sizeof(errbuf)) == 0 && grid_ok(p, 7, 2, 1),
           "uneven 8,6 tasks with tp=2 and unknown nodes");
    merak_topo_placement_destroy(p);
    rq.tp = 4;
    rq.dp = 7;
    rq.pp = 1;
    int four[2] = {8, 6};
    rq.tasks_per_node = four;
    tap_ok(merak_topo_place(&rq, &p, errbuf, sizeof(errbuf)) == -1,
           "uneven 8,6 tasks with tp=4 is refused");

    /* determinism */
    a = place(node, 8, 8, 8, 4, 2, MERAK_TOPO_DIST_BLOCK);
    b = place(node, 8, 8, 8, 4, 2, MERAK_TOPO_DIST_BLOCK);
    ok = a && b;
    for (int i = 0; ok && i < 64; i++) {
        const merak_topo_task *x = merak_topo_placement_task(a, i),
                              *y = merak_topo_placement_task(b, i);
        ok = x->rank == y->rank && x->gpu == y->gpu && !strcmp(x->cpus, y->cpus) &&
             !strcmp(x->nic, y->nic);
    }
    tap_ok(ok, "placement is deterministic");
    merak_topo_placement_destroy(a);
    merak_topo_placement_destroy(b);
    merak_topo_node_destroy(node);
}

static void test_cpu_only(void)
{
    merak_topo_node *node = NULL;
    int ok = merak_topo_node_load_synthetic(&node, "pack:2 [numa] core:8 pu:2", errbuf,
                                            sizeof(errbuf)) == 0;
    merak_topo_placement *p = ok ? place(node, 2, 4, 2, 2, 2, MERAK_TOPO_DIST_BLOCK) : NULL;
    ok = p && grid_ok(p, 2, 2, 2) && cpus_disjoint(p);
    for (int i = 0; ok && i < 8; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        hwloc_bitmap_t b = hwloc_bitmap_alloc();
        hwloc_bitmap_list_sscanf(b, t->cpus);
        ok = t->gpu == -1 && !t->gpu_busid && !t->nic && t->numa == t->local_task / 2 &&
             hwloc_bitmap_weight(b) == 8;
        hwloc_bitmap_free(b);
    }
    tap_ok(ok, "CPU-only node, 4 tasks: no GPU, 4 cores (8 PUs) each, 2 tasks per NUMA node");
    merak_topo_placement_destroy(p);
    p = place(node, 1, 1, 1, 1, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(p && !strcmp(merak_topo_placement_task(p, 0)->cpus, "0-31"),
           "CPU-only node, 1 task: all NUMA nodes (%s)",
           p ? merak_topo_placement_task(p, 0)->cpus : "-");
    merak_topo_placement_destroy(p);
    ok =
        merak_topo_node_add_nic(node, "mlx5_0", "0000:10:00.0", 0, -1, errbuf, sizeof(errbuf)) ==
            0 &&
        merak_topo_node_add_nic(node, "mlx5_1", "0000:90:00.0", 1, -1, errbuf, sizeof(errbuf)) == 1;
    p = ok ? place(node, 1, 4, 2, 2, 1, MERAK_TOPO_DIST_BLOCK) : NULL;
    ok = p != NULL;
    for (int i = 0; ok && i < 4; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        ok = t->nic && !strcmp(t->nic, i < 2 ? "mlx5_0" : "mlx5_1") &&
             t->nic_path == MERAK_TOPO_PATH_NODE;
    }
    tap_ok(ok, "CPU-only node: each task gets the NIC of its NUMA node");
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(node);
}

static void test_visible_and_nics(void)
{
    merak_topo_node *node = load(H100);
    int v[8], n;
    n = merak_topo_node_parse_visible(node, "4,5", v, 8, errbuf, sizeof(errbuf));
    merak_topo_node *sub = NULL;
    int ok = n == 2 && v[0] == 4 && v[1] == 5 &&
             merak_topo_node_restrict_gpus(node, v, n, &sub, errbuf, sizeof(errbuf)) == 0;
    merak_topo_placement *p = ok ? place(sub, 1, 2, 1, 2, 1, MERAK_TOPO_DIST_BLOCK) : NULL;
    ok = p && merak_topo_node_ngpus(sub) == 2 && merak_topo_node_nvlink(sub, 0, 1) == 900000;
    const merak_topo_task *t0 = ok ? merak_topo_placement_task(p, 0) : NULL;
    const merak_topo_task *t1 = ok ? merak_topo_placement_task(p, 1) : NULL;
    tap_ok(ok && t0->gpu == 0 && t1->gpu == 1 && !strcmp(t0->gpu_busid, "0000:9d:00.0") &&
               !strcmp(t1->gpu_busid, "0000:c3:00.0") && !strcmp(t0->nic, "mlx5_6") &&
               !strcmp(t1->nic, "mlx5_9") && cpus_within(t0->cpus, "56-111,168-223"),
           "CUDA_VISIBLE_DEVICES=4,5: GPUs 0,1 of the visible subset are 9d, c3 with their NICs "
           "and socket");
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(sub);

    n = merak_topo_node_parse_visible(node, "3,1", v, 8, errbuf, sizeof(errbuf));
    ok = n == 2 && v[0] == 3 && v[1] == 1 &&
         merak_topo_node_restrict_gpus(node, v, n, &sub, errbuf, sizeof(errbuf)) == 0;
    merak_topo_gpu_info gi;
    tap_ok(ok && merak_topo_node_gpu(sub, 0, &gi) == 0 && !strcmp(gi.busid, "0000:61:00.0"),
           "a visible list keeps its order (CUDA numbers devices in list order)");
    merak_topo_node_destroy(sub);
    merak_topo_gpu_info g2;
    merak_topo_node_gpu(node, 2, &g2);
    n = g2.uuid ? merak_topo_node_parse_visible(node, g2.uuid, v, 8, errbuf, sizeof(errbuf)) : -1;
    tap_ok(n == 1 && v[0] == 2, "a GPU UUID selects that GPU (%s)", g2.uuid ? g2.uuid : "no UUID");
    tap_ok(
        merak_topo_node_parse_visible(node, "", v, 8, errbuf, sizeof(errbuf)) == 0 &&
            merak_topo_node_parse_visible(node, "8", v, 8, errbuf, sizeof(errbuf)) == -1 &&
            merak_topo_node_parse_visible(node, "1,1", v, 8, errbuf, sizeof(errbuf)) == -1 &&
            merak_topo_node_parse_visible(node, "GPU-", v, 8, errbuf, sizeof(errbuf)) == -1 &&
            merak_topo_node_parse_visible(node, "MIG-1", v, 8, errbuf, sizeof(errbuf)) == -1,
        "visible lists: empty is none; out of range, repeated, ambiguous UUID and MIG are refused");

    merak_topo_node *c = NULL;
    v[0] = 0;
    ok = merak_topo_node_restrict_gpus(node, v, 1, &c, errbuf, sizeof(errbuf)) == 0 &&
         merak_topo_node_select_nics(c, "^mlx5_1,mlx5_2:1,=mlx5_7,mlx5_8", errbuf,
                                     sizeof(errbuf)) == 0 &&
         merak_topo_node_nnics(c) == 8 &&
         merak_topo_node_select_nics(c, "mlx5_0,ibp64s0,nosuch", errbuf, sizeof(errbuf)) == 0 &&
         merak_topo_node_nnics(c) == 2 &&
         merak_topo_node_select_nics(c, "a,,b", errbuf, sizeof(errbuf)) == -1;
    merak_topo_nic_info ni;
    tap_ok(ok && merak_topo_node_nic(c, 1, &ni) == 0 && !strcmp(ni.name, "mlx5_3") &&
               merak_topo_node_nnics(node) == 12,
           "select_nics: '^' drops storage NICs, a list keeps names or interfaces; the original is "
           "unchanged");
    merak_topo_node_destroy(c);
    merak_topo_node_destroy(node);
}

static void test_parsers(void)
{
    int *c = NULL, n = 0, d = -1;
    int ok = merak_topo_tasks_per_node_parse("8(x2),4", &c, &n, errbuf, sizeof(errbuf)) == 0 &&
             n == 3 && c[0] == 8 && c[1] == 8 && c[2] == 4;
    free(c);
    ok = ok && merak_topo_tasks_per_node_parse("6", &c, &n, errbuf, sizeof(errbuf)) == 0 &&
         n == 1 && c[0] == 6;
    free(c);
    c = NULL;
    ok = ok && merak_topo_tasks_per_node_parse("8(x2", &c, &n, errbuf, sizeof(errbuf)) == -1 &&
         merak_topo_tasks_per_node_parse("0", &c, &n, errbuf, sizeof(errbuf)) == -1 &&
         merak_topo_tasks_per_node_parse("4,", &c, &n, errbuf, sizeof(errbuf)) == -1 && !c;
    tap_ok(ok, "tasks per node: 8(x2),4 and 6 parse; 8(x2, 0 and 4, are refused");
    ok = merak_topo_distribution_parse("block:cyclic", &d, errbuf, sizeof(errbuf)) == 0 &&
         d == MERAK_TOPO_DIST_BLOCK &&
         merak_topo_distribution_parse("cyclic", &d, errbuf, sizeof(errbuf)) == 0 &&
         d == MERAK_TOPO_DIST_CYCLIC &&
         merak_topo_distribution_parse("plane=4", &d, errbuf, sizeof(errbuf)) == -1;
    tap_ok(ok, "distribution: block:cyclic and cyclic parse, plane is refused");
    tap_ok(!strcmp(merak_topo_path_name(MERAK_TOPO_PATH_PIX), "PIX") &&
               !strcmp(merak_topo_path_name(9), "?"),
           "path names");
}

static void test_other_fixture_placements(void)
{
    merak_topo_node *a = load(A100);
    merak_topo_placement *p = place(a, 2, 8, 2, 8, 1, MERAK_TOPO_DIST_BLOCK);
    const merak_topo_score *s = p ? merak_topo_placement_score(p) : NULL;
    int ok = p && grid_ok(p, 2, 8, 1) && cpus_disjoint(p);
    for (int i = 0; ok && i < 16; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        merak_topo_gpu_info gi;
        merak_topo_node_gpu(a, t->gpu, &gi);
        hwloc_bitmap_t b = hwloc_bitmap_alloc();
        hwloc_bitmap_list_sscanf(b, t->cpus);
        ok = cpus_within(t->cpus, gi.cpus) && t->numa == gi.numa && hwloc_bitmap_weight(b) == 16;
        hwloc_bitmap_free(b);
    }
    tap_ok(
        ok && s->nic_dist_mean == 1.5 && s->tp_nvlink_frac == 1.0,
        "A100 tp=8: 8 cores + HT per GPU on its NPS4 quadrant; NICs half PIX half PXB (mean %.2f)",
        s ? s->nic_dist_mean : -1);
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(a);

    merak_topo_node *d = load(DGX2H);
    p = place(d, 2, 16, 1, 16, 2, MERAK_TOPO_DIST_BLOCK);
    s = p ? merak_topo_placement_score(p) : NULL;
    tap_ok(p && grid_ok(p, 1, 16, 2) && s->nic_max_load == 2 && s->nic_dist_mean == 1.0 &&
               s->tp_nvlink_frac == 1.0 && cpus_disjoint(p),
           "DGX-2H tp=16: one node per group, 2 GPUs per NIC, all PIX, 3 cores + HT per GPU");
    merak_topo_placement_destroy(p);
    merak_topo_node_destroy(d);

    merak_topo_node *w = load(POWER8);
    p = place(w, 1, 4, 2, 2, 1, MERAK_TOPO_DIST_BLOCK);
    merak_topo_placement *q = place(w, 1, 4, 1, 4, 1, MERAK_TOPO_DIST_BLOCK);
    tap_ok(p && q && merak_topo_placement_score(p)->tp_nvlink_frac == 1.0 &&
               merak_topo_placement_score(q)->tp_pairs_nvlink == 2 &&
               merak_topo_placement_score(q)->tp_pairs_known == 6 &&
               !strcmp(merak_topo_placement_task(p, 0)->cpus, "0-1,8-9") &&
               !strcmp(merak_topo_placement_task(p, 3)->cpus, "96-97,104-105"),
           "POWER8: tp=2 pairs on NVLink (1.00), tp=4 has 2 of 6 pairs on NVLink; 2 cores per GPU");
    merak_topo_placement_destroy(p);
    merak_topo_placement_destroy(q);
    merak_topo_node_destroy(w);
}

/* Not a timing assertion: prints the time, fails only if absurd. */
static void test_scale(void)
{
    enum { NODES = 1024 };
    merak_topo_node *node = load(H100);
    double t0 = now_ms();
    merak_topo_placement *p = place(node, NODES, 8, 128, 8, 8, MERAK_TOPO_DIST_BLOCK);
    double same = now_ms() - t0;
    int ok = p && grid_ok(p, 128, 8, 8);
    merak_topo_placement_destroy(p);

    /* 1,024 distinct (identical) node summaries: one plan per node */
    merak_topo_node **copies = calloc(NODES, sizeof(*copies));
    int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int n = 0; n < NODES; n++)
        ok &= merak_topo_node_restrict_gpus(node, all, 8, &copies[n], errbuf, sizeof(errbuf)) == 0;
    int *tasks = malloc(NODES * sizeof(int));
    for (int n = 0; n < NODES; n++)
        tasks[n] = 8;
    merak_topo_request req = {
        NODES, tasks, (const merak_topo_node *const *)copies, 128, 8, 8, MERAK_TOPO_DIST_CYCLIC};
    t0 = now_ms();
    ok &= merak_topo_place(&req, &p, errbuf, sizeof(errbuf)) == 0;
    double distinct = now_ms() - t0;
    ok = ok && grid_ok(p, 128, 8, 8) && merak_topo_placement_score(p)->tp_nvlink_frac == 1.0;
    printf("# place 1024 nodes x 8 GPUs (dp=128 tp=8 pp=8): %.2f ms with one node summary, "
           "%.2f ms with 1024 summaries\n",
           same, distinct);
    tap_ok(ok && same < 10000 && distinct < 10000, "1024 x 8 placement (%.1f ms, %.1f ms)", same,
           distinct);
    merak_topo_placement_destroy(p);
    for (int n = 0; n < NODES; n++)
        merak_topo_node_destroy(copies[n]);
    free(copies);
    free(tasks);
    merak_topo_node_destroy(node);
}

int main(void)
{
    test_fixtures_load();
    test_h100_node();
    test_other_nodes();
    test_h100_tp8();
    test_pcie_tp4();
    test_synthetic_partition();
    test_refusals();
    test_cyclic_and_uneven();
    test_cpu_only();
    test_visible_and_nics();
    test_parsers();
    test_other_fixture_placements();
    test_scale();
    return tap_done();
}
