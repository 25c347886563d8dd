/*
 * merak-topo - show a node's GPUs, NUMA nodes, NICs and NVLink matrix, and
 * the placement the Merak SPANK plugin would make for a job on such nodes.
 *
 *   merak-topo [--input FILE.xml] [--json]
 *   merak-topo [--input FILE.xml] --nodes N --tasks-per-node K
 *              --dp D --tp T --pp P [--distribution block|cyclic] [--json]
 *
 * A thin main over libmerak-topo (include/merak/topo.h); jansson for --json.
 * Exit status: 0 on success, 1 on a runtime error (unreadable topology),
 * 2 on a usage error (bad flags, or a placement the flags make impossible).
 */
#include "merak/topo.h"

#include <errno.h>   /* errno, EINVAL */
#include <getopt.h>  /* getopt_long */
#include <signal.h>  /* SIGXFSZ */
#include <jansson.h> /* json_t, json_dumpf */
#include <limits.h>  /* INT_MAX */
#include <stdio.h>   /* printf, fprintf */
#include <stdlib.h>  /* strtol, free */
#include <string.h>  /* strcmp, memset */

#define VERSION "0.1.0"
#define PROG "merak-topo"

static void usage(FILE *out)
{
    fprintf(
        out,
        "Usage: " PROG " [--input FILE.xml] [--json]\n"
        "       " PROG " [--input FILE.xml] --nodes N --tasks-per-node K --dp D --tp T --pp P\n"
        "                  [--distribution block|cyclic] [--json]\n"
        "Shows a node's GPUs, NUMA nodes, NICs and NVLink matrix (this machine, or an\n"
        "hwloc XML file), or, given a job shape, the placement of every task: Merak\n"
        "rank, dp/tp/pp coordinates, GPU, NUMA node, cores and NIC, and its score.\n"
        "\n"
        "  -i, --input=FILE.xml        hwloc XML topology of the nodes (default: this machine)\n"
        "  -N, --nodes=N               number of nodes of the job (default 1)\n"
        "      --tasks-per-node=K      tasks on each node: a count, a list (8,8,4) or Slurm's\n"
        "                              form (8(x2),4) (default: the node's GPUs)\n"
        "      --dp=D                  data-parallel degree (default: tasks / (tp*pp))\n"
        "      --tp=T                  tensor-parallel degree (default 1)\n"
        "      --pp=P                  pipeline-parallel degree (default 1)\n"
        "  -m, --distribution=block|cyclic\n"
        "                              how Slurm numbers tasks over nodes (default block)\n"
        "  -j, --json                  print JSON instead of tables\n"
        "      --help                  print this help and exit\n"
        "      --version               print the version and exit\n"
        "\n"
        "A job shape that cannot be placed is refused with the srun flags that would\n"
        "work (-N, --ntasks-per-node, --merak-dp, --merak-tp).\n");
}

/* Parses a positive int flag value; prints and returns -1 on error. */
static int parse_pos(const char *flag, const char *s, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || *end) {
        fprintf(stderr, PROG ": --%s: '%s' is not an integer (try --help)\n", flag, s);
        return -1;
    }
    if (errno || x < 1 || x > INT_MAX / 2) {
        fprintf(stderr, PROG ": --%s: %s is out of range [1, %d]\n", flag, s, INT_MAX / 2);
        return -1;
    }
    *v = (int)x;
    return 0;
}

/* ------------------------------------------------------------ node view */

/* GPU g of the node and its NIC (index nic, -1 for none: ni zeroed);
 * returns the GPU-NIC path kind, or -1 without a NIC. */
static int gpu_and_nic(const merak_topo_node *node, int g, int nic, merak_topo_gpu_info *gi,
                       merak_topo_nic_info *ni)
{
    merak_topo_node_gpu(node, g, gi);
    memset(ni, 0, sizeof *ni);
    if (nic < 0)
        return -1;
    merak_topo_node_nic(node, nic, ni);
    return merak_topo_node_gpu_nic_path(node, g, nic, NULL);
}

/* The output written (failed: 1 with one line, such as a full disk). */
static int output_done(int failed)
{
    if (fflush(stdout) != 0 || ferror(stdout) || failed) {
        fprintf(stderr, PROG ": writing the output failed: %s\n", strerror(errno ? errno : EIO));
        return 1;
    }
    return 0;
}

static int show_node_text(const merak_topo_node *node)
{
    int G = merak_topo_node_ngpus(node), M = merak_topo_node_nnumas(node);
    int K = merak_topo_node_nnics(node);
    int *nic = calloc((size_t)G + 1, sizeof(int));
    char err[256];
    if (!nic || merak_topo_node_pair_nics(node, nic, err, sizeof(err))) {
        free(nic);
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    printf("node: %s\n\n", merak_topo_node_source(node));
    printf("NUMA nodes: %d\n  %-5s %-7s %-6s %s\n", M, "NUMA", "socket", "cores", "cpus");
    for (int i = 0; i < M; i++) {
        merak_topo_numa_info n;
        merak_topo_node_numa(node, i, &n);
        printf("  %-5d %-7d %-6d %s\n", n.os_index, n.package, n.ncores, *n.cpus ? n.cpus : "-");
    }
    printf("\nGPUs: %d (bus-id order)\n", G);
    if (G)
        printf("  %-4s %-13s %-26s %-5s %-18s %-9s %s\n", "GPU", "bus id", "model", "NUMA", "cpus",
               "NIC", "path");
    for (int g = 0; g < G; g++) {
        merak_topo_gpu_info gi;
        merak_topo_nic_info ni;
        int path = gpu_and_nic(node, g, nic[g], &gi, &ni);
        printf("  %-4d %-13s %-26.26s %-5d %-18s %-9s %s\n", g, gi.busid, gi.model, gi.numa,
               gi.cpus, ni.name ? ni.name : "-", path >= 0 ? merak_topo_path_name(path) : "-");
    }
    printf("\nNICs: %d\n", K);
    if (K)
        printf("  %-9s %-15s %-13s %-5s %s\n", "NIC", "interface", "bus id", "NUMA", "kind");
    for (int k = 0; k < K; k++) {
        merak_topo_nic_info ni;
        merak_topo_node_nic(node, k, &ni);
        printf("  %-9s %-15s %-13s %-5d %s\n", ni.name, ni.netdev ? ni.netdev : "-",
               ni.busid ? ni.busid : "-", ni.numa, ni.rdma ? "rdma" : "net");
    }
    if (G > 1) {
        int known = merak_topo_node_nvlink_known(node);
        printf("\nGPU links: NV<GB/s> = NVLink%s, else the PCIe path\n",
               known ? "" : " (unknown on this node: hwloc without NVML)");
        printf("  %-6s", "");
        for (int b = 0; b < G; b++) {
            char h[16];
            snprintf(h, sizeof(h), "GPU%d", b);
            printf(" %-7s", h);
        }
        printf("\n");
        for (int a = 0; a < G; a++) {
            char h[16];
            snprintf(h, sizeof(h), "GPU%d", a);
            printf("  %-6s", h);
            for (int b = 0; b < G; b++) {
                char cell[32];
                uint64_t bw = merak_topo_node_nvlink(node, a, b);
                if (a != b && bw)
                    snprintf(cell, sizeof(cell), "NV%llu", (unsigned long long)(bw / 1000));
                else
                    snprintf(cell, sizeof(cell), "%s",
                             merak_topo_path_name(merak_topo_node_gpu_path(node, a, b)));
                printf(" %-7s", cell);
            }
            printf("\n");
        }
    }
    free(nic);
    return output_done(0);
}

static json_t *jstr_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static int show_node_json(const merak_topo_node *node)
{
    int G = merak_topo_node_ngpus(node), M = merak_topo_node_nnumas(node);
    int K = merak_topo_node_nnics(node);
    int *nic = calloc((size_t)G + 1, sizeof(int));
    char err[256];
    json_t *root = json_object(), *numas = json_array(), *gpus = json_array(), *nics = json_array();
    if (!nic || !root || !numas || !gpus || !nics ||
        merak_topo_node_pair_nics(node, nic, err, sizeof(err)))
        goto nomem;
    json_object_set_new(root, "source", json_string(merak_topo_node_source(node)));
    json_object_set_new(root, "numa", numas);
    json_object_set_new(root, "gpus", gpus);
    json_object_set_new(root, "nics", nics);
    for (int i = 0; i < M; i++) {
        merak_topo_numa_info n;
        merak_topo_node_numa(node, i, &n);
        json_array_append_new(numas,
                              json_pack("{s:i, s:i, s:i, s:s}", "os_index", n.os_index, "package",
                                        n.package, "cores", n.ncores, "cpus", n.cpus));
    }
    for (int g = 0; g < G; g++) {
        merak_topo_gpu_info gi;
        merak_topo_nic_info ni;
        int path = gpu_and_nic(node, g, nic[g], &gi, &ni);
        char vid[8], did[8];
        snprintf(vid, sizeof(vid), "%04x", gi.vendor_id & 0xffffu);
        snprintf(did, sizeof(did), "%04x", gi.device_id & 0xffffu);
        json_array_append_new(
            gpus, json_pack("{s:i, s:s, s:s, s:s, s:s, s:o, s:i, s:i, s:s, s:o, s:o}", "index", g,
                            "busid", gi.busid, "vendor", vid, "device", did, "model", gi.model,
                            "uuid", jstr_or_null(gi.uuid), "numa", gi.numa, "package", gi.package,
                            "cpus", gi.cpus, "nic", jstr_or_null(ni.name), "nic_path",
                            path >= 0 ? json_string(merak_topo_path_name(path)) : json_null()));
    }
    for (int k = 0; k < K; k++) {
        merak_topo_nic_info ni;
        merak_topo_node_nic(node, k, &ni);
        json_array_append_new(nics,
                              json_pack("{s:s, s:o, s:o, s:i, s:b}", "name", ni.name, "netdev",
                                        jstr_or_null(ni.netdev), "busid", jstr_or_null(ni.busid),
                                        "numa", ni.numa, "rdma", ni.rdma));
    }
    json_t *nv = json_null(), *paths = json_array();
    if (merak_topo_node_nvlink_known(node)) {
        json_decref(nv);
        nv = json_array();
    }
    for (int a = 0; a < G; a++) {
        json_t *row = json_array(), *prow = json_array();
        for (int b = 0; b < G; b++) {
            if (json_is_array(nv))
                json_array_append_new(row,
                                      json_integer((json_int_t)merak_topo_node_nvlink(node, a, b)));
            json_array_append_new(
                prow, json_string(merak_topo_path_name(merak_topo_node_gpu_path(node, a, b))));
        }
        if (json_is_array(nv))
            json_array_append_new(nv, row);
        else
            json_decref(row);
        json_array_append_new(paths, prow);
    }
    json_object_set_new(root, "nvlink", nv);
    json_object_set_new(root, "gpu_paths", paths);
    int rc = output_done(json_dumpf(root, stdout, JSON_INDENT(2)) != 0 || printf("\n") < 0);
    json_decref(root);
    free(nic);
    return rc;
nomem:
    json_decref(root);
    json_decref(numas);
    json_decref(gpus);
    json_decref(nics);
    free(nic);
    fprintf(stderr, PROG ": out of memory\n");
    return 1;
}

/* ------------------------------------------------------------ placement view */

static int show_placement_text(const merak_topo_placement *p, const merak_topo_request *r)
{
    int n = merak_topo_placement_ntasks(p);
    printf("placement: %d node%s, %d tasks, dp=%d tp=%d pp=%d, distribution %s\n\n", r->nnodes,
           r->nnodes == 1 ? "" : "s", n, r->dp, r->tp, r->pp,
           r->distribution == MERAK_TOPO_DIST_CYCLIC ? "cyclic" : "block");
    printf("%-5s %-5s %-6s %-6s %-5s %-4s %-4s %-4s %-13s %-5s %-9s %s\n", "node", "task", "procid",
           "rank", "dp", "tp", "pp", "gpu", "gpu bus id", "numa", "nic", "cpus");
    for (int i = 0; i < n; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        char gpu[16] = "-", numa[16] = "-";
        if (t->gpu >= 0)
            snprintf(gpu, sizeof(gpu), "%d", t->gpu);
        if (t->numa >= 0)
            snprintf(numa, sizeof(numa), "%d", t->numa);
        printf("%-5d %-5d %-6d %-6d %-5d %-4d %-4d %-4s %-13s %-5s %-9s %s\n", t->node,
               t->local_task, t->procid, t->rank, t->dp, t->tp, t->pp, gpu,
               t->gpu_busid ? t->gpu_busid : "-", numa, t->nic ? t->nic : "-",
               t->cpus ? t->cpus : "-");
    }
    const merak_topo_score *s = merak_topo_placement_score(p);
    printf("\nscore:\n");
    if (s->tp_nvlink_frac >= 0)
        printf("  tp pairs on NVLink       %d of %d (%.2f)\n", s->tp_pairs_nvlink,
               s->tp_pairs_known, s->tp_nvlink_frac);
    else
        printf("  tp pairs on NVLink       unknown (%d pairs; no NVLink matrix)\n", s->tp_pairs);
    printf("  tp groups across nodes   %d\n", s->tp_cross_node);
    printf("  pp links across nodes    %d of %d\n", s->pp_links ? s->pp_cross_node : 0,
           s->pp_links);
    printf("  dp links across nodes    %d of %d, %d of them on the same rail\n", s->dp_cross_node,
           s->dp_links, s->dp_rail_aligned);
    if (s->nic_dist_mean >= 0)
        printf("  mean NIC path            %.2f (1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS), most tasks "
               "per NIC %d\n",
               s->nic_dist_mean, s->nic_max_load);
    else
        printf("  mean NIC path            - (no NIC)\n");
    printf("  renumbered               %s\n",
           s->renumbered ? "yes (ranks differ from task ids)" : "no");
    return output_done(0);
}

static json_t *jreal_or_null(double v)
{
    return v >= 0 ? json_real(v) : json_null();
}

static int show_placement_json(const merak_topo_placement *p, const merak_topo_request *r)
{
    int n = merak_topo_placement_ntasks(p);
    json_t *root = json_object(), *tasks = json_array();
    if (!root || !tasks) {
        json_decref(root);
        json_decref(tasks);
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    json_object_set_new(root, "nodes", json_integer(r->nnodes));
    json_object_set_new(root, "world_size", json_integer(n));
    json_object_set_new(root, "dp", json_integer(r->dp));
    json_object_set_new(root, "tp", json_integer(r->tp));
    json_object_set_new(root, "pp", json_integer(r->pp));
    json_object_set_new(
        root, "distribution",
        json_string(r->distribution == MERAK_TOPO_DIST_CYCLIC ? "cyclic" : "block"));
    json_object_set_new(root, "tasks", tasks);
    for (int i = 0; i < n; i++) {
        const merak_topo_task *t = merak_topo_placement_task(p, i);
        json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:i, s:o, s:o}",
                              "node", t->node, "local_task", t->local_task, "procid", t->procid,
                              "rank", t->rank, "dp", t->dp, "tp", t->tp, "pp", t->pp, "gpu", t->gpu,
                              "gpu_busid", jstr_or_null(t->gpu_busid), "numa", t->numa, "cpus",
                              jstr_or_null(t->cpus), "nic", jstr_or_null(t->nic));
        if (!o || json_array_append_new(tasks, o)) {
            json_decref(root);
            fprintf(stderr, PROG ": out of memory\n");
            return 1;
        }
    }
    const merak_topo_score *s = merak_topo_placement_score(p);
    json_t *sc = json_pack(
        "{s:i, s:i, s:i, s:o, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:o, s:i, s:b}", "tp_pairs",
        s->tp_pairs, "tp_pairs_known", s->tp_pairs_known, "tp_pairs_nvlink", s->tp_pairs_nvlink,
        "tp_nvlink_frac", jreal_or_null(s->tp_nvlink_frac), "tp_cross_node", s->tp_cross_node,
        "pp_links", s->pp_links, "pp_cross_node", s->pp_cross_node, "dp_links", s->dp_links,
        "dp_cross_node", s->dp_cross_node, "dp_rail_aligned", s->dp_rail_aligned, "nic_dist_mean",
        jreal_or_null(s->nic_dist_mean), "nic_hops_mean", jreal_or_null(s->nic_hops_mean),
        "nic_max_load", s->nic_max_load, "renumbered", s->renumbered);
    if (!sc) {
        json_decref(root);
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    json_object_set_new(root, "score", sc);
    int rc = output_done(json_dumpf(root, stdout, JSON_INDENT(1) | JSON_COMPACT) != 0 || printf("\n") < 0);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    signal(SIGXFSZ, SIG_IGN);   /* over ulimit -f: a failed write, reported (as cli_start does) */
    enum { OPT_TPN = 256, OPT_DP, OPT_TP, OPT_PP, OPT_HELP, OPT_VERSION };
    static const struct option longopts[] = {
        {"input", required_argument, NULL, 'i'},
        {"nodes", required_argument, NULL, 'N'},
        {"tasks-per-node", required_argument, NULL, OPT_TPN},
        {"dp", required_argument, NULL, OPT_DP},
        {"tp", required_argument, NULL, OPT_TP},
        {"pp", required_argument, NULL, OPT_PP},
        {"distribution", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const char *input = NULL, *tpn = NULL;
    int nodes = 0, dp = 0, tp = 1, pp = 1, dist = MERAK_TOPO_DIST_BLOCK, json = 0, place = 0;
    char err[512];
    int c;
    opterr = 0; /* we print our own one-line usage errors */
    while ((c = getopt_long(argc, argv, ":i:N:m:j", longopts, NULL)) != -1) {
        switch (c) {
        case 'i':
            input = optarg;
            break;
        case 'N':
            if (parse_pos("nodes", optarg, &nodes))
                return 2;
            place = 1;
            break;
        case OPT_TPN:
            tpn = optarg;
            place = 1;
            break;
        case OPT_DP:
            if (parse_pos("dp", optarg, &dp))
                return 2;
            place = 1;
            break;
        case OPT_TP:
            if (parse_pos("tp", optarg, &tp))
                return 2;
            place = 1;
            break;
        case OPT_PP:
            if (parse_pos("pp", optarg, &pp))
                return 2;
            place = 1;
            break;
        case 'm':
            if (merak_topo_distribution_parse(optarg, &dist, err, sizeof(err))) {
                fprintf(stderr, PROG ": --distribution: %s\n", err);
                return 2;
            }
            place = 1;
            break;
        case 'j':
            json = 1;
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf(PROG " " VERSION "\n");
            return 0;
        case ':':
            fprintf(stderr, PROG ": option '%s' needs a value (try --help)\n", argv[optind - 1]);
            return 2;
        default:
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, PROG ": unknown option '-%c' (try --help)\n", optopt);
            else
                fprintf(stderr, PROG ": unknown option '%s' (try --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s' (try --help)\n", argv[optind]);
        return 2;
    }

    int *counts = NULL, ncounts = 0;
    if (tpn && merak_topo_tasks_per_node_parse(tpn, &counts, &ncounts, err, sizeof(err))) {
        fprintf(stderr, PROG ": --tasks-per-node: %s\n", err);
        return 2;
    }
    if (counts && ncounts > 1 && nodes && nodes != ncounts) {
        fprintf(stderr, PROG ": --tasks-per-node lists %d nodes but --nodes is %d\n", ncounts,
                nodes);
        free(counts);
        return 2;
    }

    merak_topo_node *node;
    if (merak_topo_node_load(&node, input, err, sizeof(err))) {
        fprintf(stderr, PROG ": %s\n", err);
        free(counts);
        return 1;
    }
    if (!place) {
        int rc = json ? show_node_json(node) : show_node_text(node);
        merak_topo_node_destroy(node);
        return rc;
    }

    /* the job shape, with defaults from the node */
    if (!nodes)
        nodes = ncounts > 1 ? ncounts : 1;
    int *tasks = malloc((size_t)nodes * sizeof(int));
    const merak_topo_node **nodev = malloc((size_t)nodes * sizeof(*nodev));
    if (!tasks || !nodev) {
        fprintf(stderr, PROG ": out of memory\n");
        free(tasks);
        free(nodev);
        free(counts);
        merak_topo_node_destroy(node);
        return 1;
    }
    long long total = 0;
    for (int n = 0; n < nodes; n++) {
        int G = merak_topo_node_ngpus(node);
        if (counts)
            tasks[n] = ncounts > 1 ? counts[n] : counts[0];
        else if (dp && (long long)dp * tp * pp % nodes == 0)
            tasks[n] = (int)((long long)dp * tp * pp / nodes);
        else
            tasks[n] = G > 0 ? G : tp;
        nodev[n] = node;
        total += tasks[n];
    }
    free(counts);
    int rc = 0;
    if (!dp) {
        if (total % ((long long)tp * pp) != 0) {
            fprintf(
                stderr,
                PROG
                ": --dp not given, and %lld tasks are not a multiple of tp*pp = %lld; give --dp "
                "or --tasks-per-node\n",
                total, (long long)tp * pp);
            rc = 2;
        }
        dp = (int)(total / ((long long)tp * pp));
    }
    merak_topo_request req = {nodes, tasks, nodev, dp, tp, pp, dist};
    merak_topo_placement *p = NULL;
    if (rc == 0 && merak_topo_place(&req, &p, err, sizeof(err))) {
        rc = errno == EINVAL ? 2 : 1;
        fprintf(stderr, PROG ": %s\n", err);
    }
    if (rc == 0)
        rc = json ? show_placement_json(p, &req) : show_placement_text(p, &req);
    merak_topo_placement_destroy(p);
    free(tasks);
    free(nodev);
    merak_topo_node_destroy(node);
    return rc;
}
