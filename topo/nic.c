/*
 * nic.c - pairing devices (GPUs, or the cores of CPU-only tasks) with NICs.
 *
 * A per-device greedy is wrong: on a DGX A100, GPU0 is PXB to both mlx5_0
 * and mlx5_1 while mlx5_0 is PIX to GPU1, so asking GPU0 first gives both
 * GPUs mlx5_0.  Here all (device, NIC) pairs are sorted once, closest path
 * first, then fewest PCIe hops, and taken in that order, each NIC up to a cap
 * of ceil(devices / NICs).  Only NICs within PXB of some device count (so
 * storage NICs on their own root ports do not lower the cap), unless no NIC is
 * that close.
 */
#include "topo_internal.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc, qsort */

typedef struct pair {
    int cls, hops, dev, nic;
} pair;

static int pair_cmp(const void *pa, const void *pb)
{
    const pair *a = pa, *b = pb;
    if (a->cls != b->cls)
        return a->cls < b->cls ? -1 : 1;
    if (a->hops != b->hops)
        return a->hops < b->hops ? -1 : 1;
    if (a->dev != b->dev)
        return a->dev < b->dev ? -1 : 1;
    return (a->nic > b->nic) - (a->nic < b->nic);
}

int topo_nic_greedy(int ndev, int nnics, const int *cls, const int *hops, int *out, int *load)
{
    for (int d = 0; d < ndev; d++)
        out[d] = -1;
    for (int k = 0; load && k < nnics; k++)
        load[k] = 0;
    if (ndev == 0 || nnics == 0)
        return 0;
    unsigned char *cand = calloc((size_t)nnics, 1);
    int *used = calloc((size_t)nnics, sizeof(int));
    pair *pairs = malloc((size_t)ndev * (size_t)nnics * sizeof(pair));
    if (!cand || !used || !pairs) {
        free(cand);
        free(used);
        free(pairs);
        errno = ENOMEM;
        return -1;
    }
    int ncand = 0;
    for (int k = 0; k < nnics; k++)
        for (int d = 0; d < ndev; d++)
            if (cls[(size_t)d * nnics + k] <= MERAK_TOPO_PATH_PXB) {
                cand[k] = 1;
                ncand++;
                break;
            }
    if (ncand == 0) {
        for (int k = 0; k < nnics; k++)
            cand[k] = 1;
        ncand = nnics;
    }
    int cap = (ndev + ncand - 1) / ncand;
    size_t np = 0;
    for (int d = 0; d < ndev; d++)
        for (int k = 0; k < nnics; k++)
            if (cand[k])
                pairs[np++] = (pair){cls[(size_t)d * nnics + k], hops[(size_t)d * nnics + k], d, k};
    qsort(pairs, np, sizeof(pair), pair_cmp);
    for (size_t i = 0; i < np; i++)
        if (out[pairs[i].dev] < 0 && used[pairs[i].nic] < cap) {
            out[pairs[i].dev] = pairs[i].nic;
            used[pairs[i].nic]++;
        }
    for (int k = 0; load && k < nnics; k++)
        load[k] = used[k];
    free(cand);
    free(used);
    free(pairs);
    return 0;
}

int merak_topo_node_pair_nics(const merak_topo_node *node, int *nic, char *err, size_t errlen)
{
    if (!node || (!nic && node->ngpus))
        return topo_errf(err, errlen, EINVAL, "pair_nics: bad arguments");
    int G = node->ngpus, N = node->nnics;
    int *cls = malloc(((size_t)G * N + 1) * sizeof(int));
    int *hops = malloc(((size_t)G * N + 1) * sizeof(int));
    if (!cls || !hops) {
        free(cls);
        free(hops);
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    }
    for (int g = 0; g < G; g++)
        for (int k = 0; k < N; k++)
            cls[(size_t)g * N + k] =
                merak_topo_node_gpu_nic_path(node, g, k, &hops[(size_t)g * N + k]);
    int rc = topo_nic_greedy(G, N, cls, hops, nic, NULL);
    free(cls);
    free(hops);
    if (rc)
        return topo_errf(err, errlen, ENOMEM, "out of memory");
    return 0;
}
