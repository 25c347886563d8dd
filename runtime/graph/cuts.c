/*
 * cuts.c - where a graph can be cut into pipeline stages: between ops
 * where exactly one activation crosses (DESIGN.md s. 6).
 */
#include <stdlib.h>

#include "graph.h"

/* last_use[t]: the last op reading activation t (or -1). */
void merak_graph_last_uses(const merak_graph *g, int *last, int *nuse)
{
    for (int t = 0; t < g->ntensors; t++) {
        last[t] = -1;
        if (nuse)
            nuse[t] = 0;
    }
    for (int i = 0; i < g->nops; i++)
        for (int j = 0; j < g->ops[i].nin; j++)
            if (g->ops[i].in[j] >= 0) {
                last[g->ops[i].in[j]] = i;
                if (nuse)
                    nuse[g->ops[i].in[j]]++;
            }
}

static int *last_uses(const merak_graph *g)
{
    int *last = malloc((size_t)g->ntensors * sizeof *last);
    if (last)
        merak_graph_last_uses(g, last, NULL);
    return last;
}

/* The activation crossing cut k given last uses, or -1. */
static int crossing(const merak_graph *g, const int *last, int k)
{
    int found = -1;
    for (int t = 0; t < g->ntensors; t++) {
        const merak_tensor *x = &g->tensors[t];
        if (x->kind != MERAK_T_ACT || x->producer >= k || last[t] < k)
            continue;
        if (found >= 0)
            return -1;
        found = t;
    }
    return found;
}

int merak_cut_tensor(const merak_graph *g, int k)
{
    if (k <= 0 || k >= g->nops)
        return -1;
    int *last = last_uses(g);
    if (!last)
        return -1;
    int t = crossing(g, last, k);
    free(last);
    return t;
}

int merak_cut_points(const merak_graph *g, int begin, int end, int *cuts)
{
    /* live[k]: the activations crossing cut k (made before op k, read at
     * or after it), by one sweep over a difference array */
    int *last = last_uses(g), *live = calloc((size_t)g->nops + 2, sizeof *live);
    if (!last || !live) {
        free(last);
        free(live);
        return -1;
    }
    for (int t = 0; t < g->ntensors; t++) {
        const merak_tensor *x = &g->tensors[t];
        if (x->kind != MERAK_T_ACT || last[t] <= x->producer)
            continue;
        live[x->producer + 1 > 0 ? x->producer + 1 : 0]++;
        live[last[t] + 1]--;
    }
    int n = 0;
    for (int k = 0, sum = 0; k < end; k++) {
        sum += live[k];
        if (k > begin && sum == 1)
            cuts[n++] = k;
    }
    free(last);
    free(live);
    return n;
}

int merak_cut_map(const merak_graph *local, int k)
{
    /* the first op whose src is k or later: ops keep their sources' order */
    int lo = 0, hi = local->nops;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (local->ops[mid].src < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
