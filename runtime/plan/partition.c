/*
 * partition.c - stage cuts: the single-activation cut points of the graph,
 * and a min-max dynamic programme over them.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "merak/merak.h"
#include "names.h"
#include "partition.h"

/* The methods' names, in one table (indexed by merak_partition_kind). */
static const char *const partition_names[] = {[MERAK_PARTITION_UNIFORM] = "uniform",
                                              [MERAK_PARTITION_PARAMETERS] = "parameters"};
enum { NPART = sizeof partition_names / sizeof partition_names[0] };

int merak_partition_parse(const char *name, merak_partition_kind *kind)
{
    int i = merak_name_find(partition_names, NPART, name);
    if (i >= 0)
        *kind = (merak_partition_kind)i;
    return i < 0 ? -1 : 0;
}

const char *merak_partition_names(void)
{
    static char names[64];
    return merak_names_join(partition_names, NPART, names, sizeof names);
}

/* last_use[t]: the last op reading activation t (or -1). */
static int *last_uses(const merak_graph *g)
{
    int *last = malloc((size_t)g->ntensors * sizeof *last);
    if (!last)
        return NULL;
    for (int t = 0; t < g->ntensors; t++)
        last[t] = -1;
    for (int i = 0; i < g->nops; i++)
        for (int j = 0; j < g->ops[i].nin; j++)
            if (g->ops[i].in[j] >= 0)
                last[g->ops[i].in[j]] = i;
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
    int *last = last_uses(g);
    if (!last)
        return -1;
    int n = 0;
    for (int k = begin + 1; k < end; k++)
        if (crossing(g, last, k) >= 0)
            cuts[n++] = k;
    free(last);
    return n;
}

/* Cost of op i under the partition kind. */
static double op_cost(const merak_graph *g, int i, merak_partition_kind kind)
{
    if (kind == MERAK_PARTITION_UNIFORM)
        return 1.0;
    double c = 0;
    for (int j = 0; j < g->ops[i].nin; j++) {
        int t = g->ops[i].in[j];
        if (t >= 0 && g->tensors[t].kind == MERAK_T_PARAM)
            c += (double)merak_tensor_elems(&g->tensors[t]);
    }
    return c + 1e-9; /* ops without parameters still count a little */
}

int merak_partition(const merak_graph *g, int pp, merak_partition_kind kind, int *bounds,
                    char *err, size_t errlen)
{
    int n = g->nops;
    if (pp < 1)
        return merak_errf(err, errlen, "%d pipeline stages", pp);
    bounds[0] = 0;
    bounds[pp] = n;
    if (pp == 1)
        return 0;
    int *cand = malloc((size_t)(n + 1) * sizeof *cand);
    double *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    /* Candidate boundaries: 0, the cut points, n. */
    int nc = cand && prefix ? merak_cut_points(g, 0, n, cand + 1) : -1;
    if (nc < 0) {
        free(cand), free(prefix);
        return merak_errf(err, errlen, "out of memory partitioning the graph");
    }
    cand[0] = 0;
    nc++;
    cand[nc++] = n;
    prefix[0] = 0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + op_cost(g, i, kind);
    if (nc - 2 < pp - 1) {
        free(cand), free(prefix);
        return merak_errf(err, errlen, "the graph has %d cut points, so at most %d pipeline stages (got --pp %d)",
                          nc - 2, nc - 1, pp);
    }
    /* best[s][j]: smallest max-stage cost splitting ops [0, cand[j]) into s
     * stages ending at candidate j; from[s][j] the previous boundary. */
    double *best = malloc((size_t)(pp + 1) * (size_t)nc * sizeof *best);
    int *from = malloc((size_t)(pp + 1) * (size_t)nc * sizeof *from);
    if (!best || !from) {
        free(cand), free(prefix), free(best), free(from);
        return merak_errf(err, errlen, "out of memory partitioning the graph");
    }
    for (int i = 0; i < (pp + 1) * nc; i++)
        best[i] = DBL_MAX, from[i] = -1;
    best[0] = 0; /* zero stages cover [0, cand[0] = 0) */
    for (int s = 1; s <= pp; s++)
        for (int j = s; j < nc; j++)
            for (int i = s - 1; i < j; i++) {
                if (best[(s - 1) * nc + i] == DBL_MAX)
                    continue;
                double stage = prefix[cand[j]] - prefix[cand[i]];
                double m = best[(s - 1) * nc + i] > stage ? best[(s - 1) * nc + i] : stage;
                /* Ties go to the later cut, which keeps early stages lighter. */
                if (m <= best[s * nc + j]) {
                    best[s * nc + j] = m;
                    from[s * nc + j] = i;
                }
            }
    int j = nc - 1;
    for (int s = pp; s > 0; s--) {
        bounds[s] = cand[j];
        j = from[s * nc + j];
    }
    free(cand), free(prefix), free(best), free(from);
    return 0;
}

int merak_partition_map(const merak_graph *local, int k)
{
    int i = 0;
    while (i < local->nops && local->ops[i].src < k)
        i++;
    return i;
}
