/*
 * partition.c - split a node's GPUs into tensor-parallel groups.
 *
 * Exact branch and bound over the canonical partitions (each group listed
 * from its lowest GPU, groups by their lowest GPU), maximizing first the
 * weakest pair inside any group (collectives run at the slowest link), then
 * the sum of pair scores.  Ties keep the first partition found, which is the
 * lexicographically smallest, so on uniform nodes (NVSwitch) the groups are
 * consecutive GPUs.  Sizes: 8 GPUs in groups of 4 is 35 partitions, of 2 is
 * 105; 16 GPUs in groups of 4 is 2.6 million, which the bound prunes to a
 * few on real nodes; a step limit keeps the worst case bounded (and still
 * deterministic).  Done once per distinct node, not per node of a job.
 */
#include "topo_internal.h"

#include <errno.h>  /* EINVAL, ENOMEM */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memcpy */

#define STEP_LIMIT 2000000L
#define NO_PAIR INT64_MAX /* the "weakest pair" of a group without pairs (tp = 1) */

typedef struct search {
    int n, tp, ngroups;
    const int64_t *score; /* [n * n] */
    int64_t group_ub;     /* best possible pair-score sum of one group */
    unsigned char *state; /* 0 free, 1 in a group, 2 left out */
    int *cur, *best;      /* [ngroups * tp] */
    int have_best;
    int64_t best_min, best_sum;
    long steps;
} search;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static void next_group(search *S, int g, int64_t cur_min, int64_t cur_sum, int skips);

/* Adds members k..tp-1 to group g, each above the last one added. */
static void add_members(search *S, int g, int k, int64_t g_min, int64_t g_sum, int64_t cur_min,
                        int64_t cur_sum, int skips)
{
    if (k == S->tp) {
        next_group(S, g + 1, min64(cur_min, g_min), cur_sum + g_sum, skips);
        return;
    }
    int *grp = S->cur + (size_t)g * S->tp;
    for (int c = grp[k - 1] + 1; c < S->n; c++) {
        if (S->state[c])
            continue;
        int64_t m = g_min, s = g_sum;
        for (int j = 0; j < k; j++) {
            int64_t v = S->score[(size_t)c * S->n + grp[j]];
            m = min64(m, v);
            s += v;
        }
        if (S->have_best && min64(cur_min, m) < S->best_min)
            continue; /* this group is already weaker than the best partition */
        S->state[c] = 1;
        grp[k] = c;
        add_members(S, g, k + 1, m, s, cur_min, cur_sum, skips);
        S->state[c] = 0;
        if (S->steps > STEP_LIMIT && S->have_best)
            return;
    }
}

/* Starts group g from the lowest free GPU, or leaves that GPU out. */
static void next_group(search *S, int g, int64_t cur_min, int64_t cur_sum, int skips)
{
    S->steps++;
    if (g == S->ngroups) {
        if (!S->have_best || cur_min > S->best_min ||
            (cur_min == S->best_min && cur_sum > S->best_sum)) {
            memcpy(S->best, S->cur, (size_t)S->ngroups * S->tp * sizeof(int));
            S->best_min = cur_min;
            S->best_sum = cur_sum;
            S->have_best = 1;
        }
        return;
    }
    if (S->have_best) {
        if (S->steps > STEP_LIMIT || cur_min < S->best_min)
            return;
        if (cur_min == S->best_min && cur_sum + (S->ngroups - g) * S->group_ub <= S->best_sum)
            return;
    }
    int a = 0;
    while (a < S->n && S->state[a])
        a++;
    if (a == S->n)
        return;
    S->state[a] = 1;
    S->cur[(size_t)g * S->tp] = a;
    add_members(S, g, 1, NO_PAIR, 0, cur_min, cur_sum, skips);
    S->state[a] = 0;
    if (skips > 0) {
        S->state[a] = 2;
        next_group(S, g, cur_min, cur_sum, skips - 1);
        S->state[a] = 0;
    }
}

int topo_partition(int n, const int64_t *score, int tp, int ngroups, int *groups)
{
    if (tp < 1 || ngroups < 0 || (int64_t)ngroups * tp > n) {
        errno = EINVAL;
        return -1;
    }
    if (ngroups == 0)
        return 0;
    int64_t maxpair = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && score[(size_t)i * n + j] > maxpair)
                maxpair = score[(size_t)i * n + j];
    search S = {.n = n, .tp = tp, .ngroups = ngroups, .score = score};
    S.group_ub = maxpair * ((int64_t)tp * (tp - 1) / 2);
    S.state = calloc((size_t)n, 1);
    S.cur = calloc((size_t)ngroups * tp, sizeof(int));
    S.best = calloc((size_t)ngroups * tp, sizeof(int));
    if (!S.state || !S.cur || !S.best) {
        free(S.state);
        free(S.cur);
        free(S.best);
        errno = ENOMEM;
        return -1;
    }
    next_group(&S, 0, NO_PAIR, 0, n - ngroups * tp);
    memcpy(groups, S.best, (size_t)ngroups * tp * sizeof(int));
    free(S.state);
    free(S.cur);
    free(S.best);
    return 0;
}
