/*
 * bench_placement.c - how long merak_topo_place() takes for a large job,
 * against the 100 ms budget a Slurm step can afford before its tasks start
 * (the plugin computes the whole job's placement in srun and on every node).
 *
 *   make bench/bench_placement && bench/bench_placement [FIXTURE.xml]
 *
 * 1,024 nodes x 8 tasks of a DGX H100 (tests/fixtures/topologies), dp=128
 * tp=8 pp=8, block and cyclic distribution, once with one shared node summary
 * (what srun and slurmstepd pass: every node the same pointer or unknown)
 * and once with 1,024 distinct summaries (a heterogeneous cluster, one plan
 * per node).  Prints the median of 7 runs of each and its ratio to 100 ms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "merak/topo.h"

enum { NODES = 1024, GPUS = 8, RUNS = 7 };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of RUNS placements of req; -1 if one fails. */
static double time_place(const merak_topo_request *req)
{
    double t[RUNS];
    char err[256];
    for (int r = 0; r < RUNS; r++) {
        merak_topo_placement *p = NULL;
        double t0 = now_ms();
        if (merak_topo_place(req, &p, err, sizeof err) < 0) {
            fprintf(stderr, "bench_placement: %s\n", err);
            return -1;
        }
        t[r] = now_ms() - t0;
        merak_topo_placement_destroy(p);
    }
    qsort(t, RUNS, sizeof *t, cmp);
    return t[RUNS / 2];
}

int main(int argc, char **argv)
{
    const char *xml = argc > 1 ? argv[1] : "tests/fixtures/topologies/authored-dgx-h100-8xH100-8xCX7.xml";
    char err[256];
    merak_topo_node *node = NULL;
    if (merak_topo_node_load(&node, xml, err, sizeof err) < 0) {
        fprintf(stderr, "bench_placement: %s\n", err);
        return 1;
    }
    int *tasks = malloc(NODES * sizeof *tasks);
    const merak_topo_node **same = malloc(NODES * sizeof *same);
    merak_topo_node **copies = calloc(NODES, sizeof *copies);
    int all[GPUS] = {0, 1, 2, 3, 4, 5, 6, 7};
    if (!tasks || !same || !copies)
        return 1;
    for (int n = 0; n < NODES; n++) {
        tasks[n] = GPUS;
        same[n] = node;
        if (merak_topo_node_restrict_gpus(node, all, GPUS, &copies[n], err, sizeof err) < 0) {
            fprintf(stderr, "bench_placement: %s\n", err);
            return 1;
        }
    }
    const char *dists[] = {"block", "cyclic"};
    int status = 0;
    for (int d = 0; d < 2; d++)
        for (int distinct = 0; distinct < 2; distinct++) {
            merak_topo_request req = {NODES, tasks,
                                      distinct ? (const merak_topo_node *const *)copies : same,
                                      128, 8, 8, d};
            double ms = time_place(&req);
            if (ms < 0) {
                status = 1;
                continue;
            }
            printf("bench_placement nodes=%d tasks=%d dp=128 tp=8 pp=8 dist=%s summaries=%s "
                   "median_ms=%.2f ratio_to_100ms_budget=%.3f\n",
                   NODES, NODES * GPUS, dists[d], distinct ? "1024" : "1", ms, ms / 100.0);
        }
    for (int n = 0; n < NODES; n++)
        merak_topo_node_destroy(copies[n]);
    free(copies), free(same), free(tasks);
    merak_topo_node_destroy(node);
    return status;
}
