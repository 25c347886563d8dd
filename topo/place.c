/*
 * place.c - the placement: which Merak rank, GPU, cores and NIC every task
 * of a job gets (DESIGN.md section 5).  A pure function of the request.
 *
 * Two levels:
 *  - a node plan, per distinct (node, task count): the node's tasks fill
 *    "positions" q = s*TP + t, group s of the node's tp groups, member t.
 *    Position q takes GPU groups[q] of the best partition of the node's GPUs
 *    (partition.c), cores split from its GPU's locality, and a NIC from the
 *    global greedy (nic.c).  Local task l sits at position l.
 *  - the job layout: the nodes' tp-group slots, in node order, get the
 *    (dp, pp) pairs.  Two candidate orders: dp fastest (rank = task id under
 *    a block distribution) and pp fastest (pipeline neighbours on one node).
 *    The one with fewer pipeline links across nodes wins, then the one with
 *    more dp peers at the same position (rail), then dp fastest.  The layout
 *    depends only on the task counts, never on topologies, so a node that
 *    knows only its own topology computes the same ranks as everyone else.
 */
#include "topo_internal.h"

#include <errno.h>  /* EINVAL, ENOMEM */
#include <limits.h> /* INT_MAX */
#include <stdlib.h> /* calloc, free, malloc */
#include <string.h> /* strcmp, strdup, strncmp */

#define MAX_TASKS (1 << 24)

/* What the tasks of one kind of node get, by position. */
typedef struct plan {
    const merak_topo_node *node; /* cache key only: never read after merak_topo_place() */
    int ntasks;
    int *gpu, *numa, *nic_path, *nic_hops;
    char **busid, **cpus, **nic;
    int tp_pairs, tp_known, tp_nvlink;
    int nic_max_load;
} plan;

struct merak_topo_placement {
    int ntasks, nnodes;
    merak_topo_task *tasks; /* (node, local_task) order */
    int *node_first;        /* [nnodes + 1] index of each node's first task */
    int *by_rank;           /* [ntasks] task index of each rank */
    merak_topo_score score;
    int nplans, cap_plans;
    plan *plans;
};

/* ------------------------------------------------------------ node plans */

static void plan_free(plan *pl)
{
    for (int q = 0; q < pl->ntasks; q++) {
        if (pl->busid)
            free(pl->busid[q]);
        if (pl->cpus)
            free(pl->cpus[q]);
        if (pl->nic)
            free(pl->nic[q]);
    }
    free(pl->gpu);
    free(pl->numa);
    free(pl->nic_path);
    free(pl->nic_hops);
    free(pl->busid);
    free(pl->cpus);
    free(pl->nic);
}

/* Pair score for grouping GPUs i and j: NVLink bandwidth (relative to the
 * node's best) dominates; then the PCIe path; then the socket. */
static int64_t pair_score(const merak_topo_node *node, int i, int j, uint64_t maxbw)
{
    static const int level[] = {6, 5, 4, 3, 2, 0}; /* SELF PIX PXB PHB NODE SYS */
    int64_t nv = 0;
    if (node->nvlink && maxbw) {
        uint64_t bw = node->nvlink[(size_t)i * node->ngpus + j];
        if (bw)
            nv = 1 + (int64_t)((double)bw * 1000.0 / (double)maxbw);
    }
    int cls = merak_topo_node_gpu_path(node, i, j);
    int lv = level[cls];
    int pi = node->domains[node->gpus[i].domain].package;
    int pj = node->domains[node->gpus[j].domain].package;
    if (cls == MERAK_TOPO_PATH_SYS && pi >= 0 && pi == pj)
        lv = 1;
    return nv * 8 + lv;
}

/* Sets out to the share i of n of domain d's cores: whole cores when there
 * are enough, else PUs, else one PU shared round-robin. */
static int split_cores(const topo_domain *d, int n, int i, hwloc_bitmap_t out)
{
    int C = d->ncores;
    hwloc_bitmap_zero(out);
    if (C >= n) {
        int lo = (int)((int64_t)i * C / n), hi = (int)((int64_t)(i + 1) * C / n);
        for (int c = lo; c < hi; c++)
            if (hwloc_bitmap_or(out, out, d->cores[c]))
                return -1;
        return 0;
    }
    int P = 0;
    for (int c = 0; c < C; c++)
        P += hwloc_bitmap_weight(d->cores[c]);
    if (P == 0)
        return 0;
    int lo, hi;
    if (P >= n) {
        lo = (int)((int64_t)i * P / n);
        hi = (int)((int64_t)(i + 1) * P / n);
    } else {
        lo = i % P;
        hi = lo + 1;
    }
    int k = 0;
    for (int c = 0; c < C; c++) {
        int pu;
        hwloc_bitmap_foreach_begin(pu, d->cores[c])
        {
            if (k >= lo && k < hi && hwloc_bitmap_set(out, (unsigned)pu))
                return -1;
            k++;
        }
        hwloc_bitmap_foreach_end();
    }
    return 0;
}

/* OS index of the NUMA node holding PU pu, else fallback. */
static int numa_of_pu(const merak_topo_node *node, int pu, int fallback)
{
    if (pu < 0)
        return fallback;
    for (int i = 0; i < node->nnumas; i++) {
        const topo_domain *d = &node->domains[node->numa_domain[i]];
        if (hwloc_bitmap_isset(d->cpuset, (unsigned)pu))
            return d->numa;
    }
    return fallback;
}

/* GPUs of positions 0..K-1 (tp groups of the best partition). */
static int plan_gpus(plan *pl, const merak_topo_node *node, int K, int TP, int *dom)
{
    int G = node->ngpus;
    int64_t *score = malloc((size_t)G * G * sizeof(int64_t));
    if (!score)
        return -1;
    uint64_t maxbw = 0;
    for (size_t i = 0; node->nvlink && i < (size_t)G * G; i++)
        if (node->nvlink[i] > maxbw)
            maxbw = node->nvlink[i];
    for (int i = 0; i < G; i++)
        for (int j = 0; j < G; j++)
            score[(size_t)i * G + j] = i == j ? 0 : pair_score(node, i, j, maxbw);
    int rc = topo_partition(G, score, TP, K / TP, pl->gpu);
    free(score);
    if (rc)
        return -1;
    for (int q = 0; q < K; q++) {
        const topo_gpu *g = &node->gpus[pl->gpu[q]];
        dom[q] = node->domains[g->domain].ncores ? g->domain : 0;
        pl->busid[q] = strdup(g->busid);
        if (!pl->busid[q])
            return -1;
    }
    for (int s = 0; s < K / TP; s++)
        for (int a = 0; a < TP; a++)
            for (int b = a + 1; b < TP; b++) {
                if (!node->nvlink_known)
                    continue;
                pl->tp_known++;
                pl->tp_nvlink +=
                    merak_topo_node_nvlink(node, pl->gpu[s * TP + a], pl->gpu[s * TP + b]) > 0;
            }
    return 0;
}

/* Cores of every position: split each locality among the positions on it.
 * CPU-only nodes deal positions over the NUMA nodes in blocks (or, with
 * fewer tasks than NUMA nodes, give each task several). */
static int plan_cpus(plan *pl, const merak_topo_node *node, int K, int *dom)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int *ndom = NULL, nd = 0, rc = -1;
    if (!set)
        return -1;
    if (node->ngpus == 0) {
        ndom = malloc(((size_t)node->nnumas + 1) * sizeof(int));
        if (!ndom)
            goto out;
        for (int i = 0; i < node->nnumas; i++)
            if (node->domains[node->numa_domain[i]].ncores)
                ndom[nd++] = node->numa_domain[i];
        if (nd == 0)
            ndom[nd++] = 0;
        for (int q = 0; q < K; q++)
            dom[q] = K <= nd ? -1 : ndom[(int64_t)q * nd / K];
    }
    for (int q = 0; q < K; q++) {
        if (dom[q] < 0) { /* several whole NUMA nodes */
            int lo = (int)((int64_t)q * nd / K), hi = (int)((int64_t)(q + 1) * nd / K);
            hwloc_bitmap_zero(set);
            for (int i = lo; i < hi; i++)
                if (hwloc_bitmap_or(set, set, node->domains[ndom[i]].cpuset))
                    goto out;
            dom[q] = ndom[lo];
        } else {
            int n = 0, idx = 0;
            for (int r = 0; r < K; r++)
                if (dom[r] == dom[q]) {
                    idx += r < q;
                    n++;
                }
            if (split_cores(&node->domains[dom[q]], n, idx, set))
                goto out;
        }
        if (hwloc_bitmap_list_asprintf(&pl->cpus[q], set) < 0)
            goto out;
        pl->numa[q] = numa_of_pu(node, hwloc_bitmap_first(set), node->domains[dom[q]].numa);
    }
    rc = 0;
out:
    hwloc_bitmap_free(set);
    free(ndom);
    return rc;
}

/* NIC of every position: the global greedy over (position, NIC) pairs. */
static int plan_nics(plan *pl, const merak_topo_node *node, int K, const int *dom)
{
    int N = node->nnics;
    if (N == 0)
        return 0;
    int *cls = malloc((size_t)K * N * sizeof(int));
    int *hops = malloc((size_t)K * N * sizeof(int));
    int *pick = malloc((size_t)K * sizeof(int));
    int *load = malloc((size_t)N * sizeof(int));
    int rc = -1;
    if (!cls || !hops || !pick || !load)
        goto out;
    for (int q = 0; q < K; q++)
        for (int k = 0; k < N; k++) {
            size_t i = (size_t)q * N + k;
            if (pl->gpu[q] >= 0) {
                cls[i] = merak_topo_node_gpu_nic_path(node, pl->gpu[q], k, &hops[i]);
            } else {
                cls[i] = topo_domain_nic_class(node, dom[q], &node->nics[k]);
                hops[i] = 0;
            }
        }
    if (topo_nic_greedy(K, N, cls, hops, pick, load))
        goto out;
    for (int q = 0; q < K; q++) {
        if (pick[q] < 0)
            continue;
        pl->nic[q] = strdup(node->nics[pick[q]].name);
        if (!pl->nic[q])
            goto out;
        pl->nic_path[q] = cls[(size_t)q * N + pick[q]];
        pl->nic_hops[q] = pl->gpu[q] >= 0 ? hops[(size_t)q * N + pick[q]] : -1;
    }
    for (int k = 0; k < N; k++)
        if (load[k] > pl->nic_max_load)
            pl->nic_max_load = load[k];
    rc = 0;
out:
    free(cls);
    free(hops);
    free(pick);
    free(load);
    return rc;
}

/* Works out the plan of K tasks on node (NULL: unknown). 0 or -1 (ENOMEM). */
static int plan_build(plan *pl, const merak_topo_node *node, int K, int TP)
{
    memset(pl, 0, sizeof(*pl));
    pl->node = node;
    pl->ntasks = K;
    pl->gpu = malloc((size_t)K * sizeof(int));
    pl->numa = malloc((size_t)K * sizeof(int));
    pl->nic_path = malloc((size_t)K * sizeof(int));
    pl->nic_hops = malloc((size_t)K * sizeof(int));
    pl->busid = calloc((size_t)K, sizeof(char *));
    pl->cpus = calloc((size_t)K, sizeof(char *));
    pl->nic = calloc((size_t)K, sizeof(char *));
    int *dom = calloc((size_t)K, sizeof(int));
    if (!pl->gpu || !pl->numa || !pl->nic_path || !pl->nic_hops || !pl->busid || !pl->cpus ||
        !pl->nic || !dom)
        goto fail;
    for (int q = 0; q < K; q++)
        pl->gpu[q] = pl->numa[q] = pl->nic_path[q] = pl->nic_hops[q] = -1;
    pl->tp_pairs = K / TP * (TP * (TP - 1) / 2);
    if (node) {
        if (node->ngpus && plan_gpus(pl, node, K, TP, dom))
            goto fail;
        if (plan_cpus(pl, node, K, dom) || plan_nics(pl, node, K, dom))
            goto fail;
    }
    free(dom);
    return 0;
fail:
    free(dom);
    plan_free(pl);
    return -1;
}

/* Index of the plan for (node, K), made on first use (plans may move as
 * the array grows: keep indices).  -1 on ENOMEM. */
static int plan_get(merak_topo_placement *p, const merak_topo_node *node, int K, int TP)
{
    for (int i = p->nplans - 1; i >= 0; i--)
        if (p->plans[i].node == node && p->plans[i].ntasks == K)
            return i;
    if (p->nplans == p->cap_plans) {
        int cap = p->cap_plans ? 2 * p->cap_plans : 4;
        plan *np = realloc(p->plans, (size_t)cap * sizeof(plan));
        if (!np)
            return -1;
        p->plans = np;
        p->cap_plans = cap;
    }
    if (plan_build(&p->plans[p->nplans], node, K, TP))
        return -1;
    return p->nplans++;
}

/* ------------------------------------------------------------ checks */

/* The largest multiple of TP, at most cap, that divides W (TP always does). */
static int tasks_per_node_hint(long long W, int TP, int cap)
{
    int best = TP;
    for (int m = TP; m <= cap; m += TP)
        if (W % m == 0)
            best = m;
    return best;
}

static int check_request(const merak_topo_request *r, long long *world, char *err, size_t errlen)
{
    if (r->nnodes < 1 || !r->tasks_per_node)
        return topo_errf(err, errlen, EINVAL, "the job has no nodes");
    if (r->dp < 1 || r->tp < 1 || r->pp < 1)
        return topo_errf(err, errlen, EINVAL,
                         "dp, tp and pp must be at least 1 (got dp=%d tp=%d pp=%d)", r->dp, r->tp,
                         r->pp);
    if (r->distribution != MERAK_TOPO_DIST_BLOCK && r->distribution != MERAK_TOPO_DIST_CYCLIC)
        return topo_errf(err, errlen, EINVAL, "unknown task distribution %d", r->distribution);
    long long W = 0;
    int maxK = 0, uniform = 1;
    for (int n = 0; n < r->nnodes; n++) {
        int K = r->tasks_per_node[n];
        if (K < 1)
            return topo_errf(err, errlen, EINVAL,
                             "node %d has %d tasks; every node needs at least 1", n, K);
        W += K;
        if (W > MAX_TASKS)
            return topo_errf(err, errlen, EINVAL, "the job has more than %d tasks", MAX_TASKS);
        uniform &= K == r->tasks_per_node[0];
        if (K > maxK)
            maxK = K;
    }
    long long grid = (long long)r->dp * r->tp * r->pp;
    if (grid != W) {
        char alt[96] = "";
        if (W % ((long long)r->tp * r->pp) == 0)
            snprintf(alt, sizeof(alt), ", or --merak-dp=%lld", W / ((long long)r->tp * r->pp));
        int K0 = r->tasks_per_node[0];
        if (uniform && grid % K0 == 0 && grid <= MAX_TASKS)
            return topo_errf(
                err, errlen, EINVAL,
                "dp*tp*pp = %d*%d*%d = %lld ranks but the job has %lld tasks; use -N %lld "
                "--ntasks-per-node=%d%s",
                r->dp, r->tp, r->pp, grid, W, grid / K0, K0, alt);
        return topo_errf(
            err, errlen, EINVAL,
            "dp*tp*pp = %d*%d*%d = %lld ranks but the job has %lld tasks; use -n %lld%s", r->dp,
            r->tp, r->pp, grid, W, grid, alt);
    }
    int TP = r->tp;
    for (int n = 0; n < r->nnodes; n++) {
        int K = r->tasks_per_node[n];
        if (K < TP)
            return topo_errf(
                err, errlen, EINVAL,
                "--merak-tp=%d needs %d tasks on one node (node %d has %d); use -N %lld "
                "--ntasks-per-node=%d (or a multiple of %d)",
                TP, TP, n, K, W / TP, TP, TP);
    }
    for (int n = 0; n < r->nnodes; n++) {
        int K = r->tasks_per_node[n];
        if (K % TP) {
            int m = tasks_per_node_hint(W, TP, maxK);
            return topo_errf(err, errlen, EINVAL,
                             "--merak-tp=%d needs a multiple of %d tasks on every node, so that no "
                             "tensor-parallel group spans nodes (node %d has %d); use -N %lld "
                             "--ntasks-per-node=%d (or a multiple of %d)",
                             TP, TP, n, K, W / m, m, TP);
        }
    }
    for (int n = 0; r->nodes && n < r->nnodes; n++) {
        const merak_topo_node *node = r->nodes[n];
        int K = r->tasks_per_node[n];
        if (!node || node->ngpus == 0 || K <= node->ngpus)
            continue;
        if (node->ngpus < TP)
            return topo_errf(err, errlen, EINVAL,
                             "--merak-tp=%d needs %d GPUs on one node, but node %d has %d GPUs", TP,
                             TP, n, node->ngpus);
        int m = tasks_per_node_hint(W, TP, node->ngpus);
        return topo_errf(err, errlen, EINVAL,
                         "node %d has %d tasks but %d GPUs; use -N %lld --ntasks-per-node=%d (one "
                         "task per GPU)",
                         n, K, node->ngpus, W / m, m);
    }
    *world = W;
    return 0;
}

/* ------------------------------------------------------------ job layout */

/* The slots (tp groups) of the job in node order: slot -> node, and its
 * index among its node's slots. */
typedef struct layout {
    int nslots, DP, PP;
    const int *slot_node, *slot_local;
    int pp_fastest;
} layout;

static int slot_of(const layout *L, int dp, int pp)
{
    return L->pp_fastest ? pp + L->PP * dp : dp + L->DP * pp;
}

static void coords_of(const layout *L, int slot, int *dp, int *pp)
{
    if (L->pp_fastest) {
        *pp = slot % L->PP;
        *dp = slot / L->PP;
    } else {
        *dp = slot % L->DP;
        *pp = slot / L->DP;
    }
}

/* Pipeline links across nodes, and dp links across nodes at different
 * positions, counted per slot pair. */
static void layout_cost(const layout *L, long *pp_cross, long *dp_off_rail)
{
    *pp_cross = *dp_off_rail = 0;
    for (int d = 0; d < L->DP; d++)
        for (int s = 0; s + 1 < L->PP; s++)
            *pp_cross += L->slot_node[slot_of(L, d, s)] != L->slot_node[slot_of(L, d, s + 1)];
    for (int s = 0; s < L->PP; s++)
        for (int d = 0; d + 1 < L->DP; d++) {
            int a = slot_of(L, d, s), b = slot_of(L, d + 1, s);
            *dp_off_rail +=
                L->slot_node[a] != L->slot_node[b] && L->slot_local[a] != L->slot_local[b];
        }
}

/* ------------------------------------------------------------ the score */

static void compute_score(merak_topo_placement *p, const merak_topo_request *r,
                          const int *node_plan)
{
    merak_topo_score *sc = &p->score;
    int TP = r->tp, DP = r->dp;
    memset(sc, 0, sizeof(*sc));
    for (int n = 0; n < r->nnodes; n++) {
        const plan *pl = &p->plans[node_plan[n]];
        sc->tp_pairs += pl->tp_pairs;
        sc->tp_pairs_known += pl->tp_known;
        sc->tp_pairs_nvlink += pl->tp_nvlink;
        if (pl->nic_max_load > sc->nic_max_load)
            sc->nic_max_load = pl->nic_max_load;
    }
    sc->tp_nvlink_frac =
        sc->tp_pairs_known ? (double)sc->tp_pairs_nvlink / sc->tp_pairs_known : -1.0;
    long nic_n = 0, nic_sum = 0, hop_n = 0, hop_sum = 0;
    for (int i = 0; i < p->ntasks; i++) {
        const merak_topo_task *t = &p->tasks[i];
        sc->renumbered |= t->rank != t->procid;
        if (t->nic_path >= 0) {
            nic_n++;
            nic_sum += t->nic_path;
        }
        const plan *pl = &p->plans[node_plan[t->node]];
        if (pl->nic_hops[t->local_task] >= 0) {
            hop_n++;
            hop_sum += pl->nic_hops[t->local_task];
        }
        if (t->pp + 1 < r->pp) {
            const merak_topo_task *u = &p->tasks[p->by_rank[t->rank + TP * DP]];
            sc->pp_links++;
            sc->pp_cross_node += u->node != t->node;
        }
        if (t->dp + 1 < DP) {
            const merak_topo_task *u = &p->tasks[p->by_rank[t->rank + TP]];
            sc->dp_links++;
            if (u->node != t->node) {
                sc->dp_cross_node++;
                sc->dp_rail_aligned +=
                    t->gpu >= 0 || u->gpu >= 0 ? t->gpu == u->gpu : t->local_task == u->local_task;
            }
        }
    }
    sc->nic_dist_mean = nic_n ? (double)nic_sum / nic_n : -1.0;
    sc->nic_hops_mean = hop_n ? (double)hop_sum / hop_n : -1.0;
}

/* ------------------------------------------------------------ placement */

void merak_topo_placement_destroy(merak_topo_placement *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nplans; i++)
        plan_free(&p->plans[i]);
    free(p->plans);
    free(p->tasks);
    free(p->node_first);
    free(p->by_rank);
    free(p);
}

int merak_topo_place(const merak_topo_request *req, merak_topo_placement **out, char *err,
                     size_t errlen)
{
    if (!req || !out)
        return topo_errf(err, errlen, EINVAL, "place: no request or result pointer");
    *out = NULL;
    long long W = 0;
    if (check_request(req, &W, err, errlen))
        return -1;
    int N = req->nnodes, TP = req->tp, DP = req->dp, PP = req->pp;
    int S = DP * PP;
    merak_topo_placement *p = calloc(1, sizeof(*p));
    int *slot_node = malloc((size_t)S * sizeof(int));
    int *slot_local = malloc((size_t)S * sizeof(int));
    int *node_plan = calloc((size_t)N, sizeof(int));
    if (!p || !slot_node || !slot_local || !node_plan)
        goto nomem;
    p->ntasks = (int)W;
    p->nnodes = N;
    p->tasks = calloc((size_t)W, sizeof(merak_topo_task));
    p->node_first = malloc(((size_t)N + 1) * sizeof(int));
    p->by_rank = malloc((size_t)W * sizeof(int));
    if (!p->tasks || !p->node_first || !p->by_rank)
        goto nomem;

    /* slots in node order */
    int nslot = 0;
    p->node_first[0] = 0;
    for (int n = 0; n < N; n++) {
        int K = req->tasks_per_node[n];
        p->node_first[n + 1] = p->node_first[n] + K;
        for (int s = 0; s < K / TP; s++) {
            slot_node[nslot] = n;
            slot_local[nslot++] = s;
        }
    }
    layout L = {S, DP, PP, slot_node, slot_local, 0};
    long pp0, rail0, pp1, rail1;
    layout_cost(&L, &pp0, &rail0);
    L.pp_fastest = 1;
    layout_cost(&L, &pp1, &rail1);
    L.pp_fastest = pp1 < pp0 || (pp1 == pp0 && rail1 < rail0);

    /* tasks */
    for (int n = 0; n < N; n++) {
        int K = req->tasks_per_node[n];
        node_plan[n] = plan_get(p, req->nodes ? req->nodes[n] : NULL, K, TP);
        if (node_plan[n] < 0)
            goto nomem;
    }
    for (int n = 0, slot0 = 0; n < N; n++) {
        const plan *pl = &p->plans[node_plan[n]];
        int K = req->tasks_per_node[n];
        for (int l = 0; l < K; l++) {
            merak_topo_task *t = &p->tasks[p->node_first[n] + l];
            int dp, pp;
            coords_of(&L, slot0 + l / TP, &dp, &pp);
            t->node = n;
            t->local_task = l;
            t->procid = p->node_first[n] + l;
            t->dp = dp;
            t->tp = l % TP;
            t->pp = pp;
            t->rank = t->tp + TP * (dp + DP * pp);
            t->gpu = pl->gpu[l];
            t->gpu_busid = pl->busid[l];
            t->numa = pl->numa[l];
            t->cpus = pl->cpus[l];
            t->nic = pl->nic[l];
            t->nic_path = pl->nic_path[l];
            p->by_rank[t->rank] = p->node_first[n] + l;
        }
        slot0 += K / TP;
    }
    if (req->distribution == MERAK_TOPO_DIST_CYCLIC) { /* task ids dealt over the nodes */
        int id = 0;
        for (int round = 0; id < W; round++)
            for (int n = 0; n < N; n++)
                if (round < req->tasks_per_node[n])
                    p->tasks[p->node_first[n] + round].procid = id++;
    }
    compute_score(p, req, node_plan);
    free(slot_node);
    free(slot_local);
    free(node_plan);
    *out = p;
    return 0;
nomem:
    free(slot_node);
    free(slot_local);
    free(node_plan);
    merak_topo_placement_destroy(p);
    return topo_errf(err, errlen, ENOMEM, "out of memory placing %lld tasks", W);
}

int merak_topo_placement_ntasks(const merak_topo_placement *p)
{
    return p ? p->ntasks : 0;
}

const merak_topo_task *merak_topo_placement_task(const merak_topo_placement *p, int i)
{
    return p && i >= 0 && i < p->ntasks ? &p->tasks[i] : NULL;
}

const merak_topo_task *merak_topo_placement_find(const merak_topo_placement *p, int node,
                                                 int local_task)
{
    if (!p || node < 0 || node >= p->nnodes || local_task < 0 ||
        local_task >= p->node_first[node + 1] - p->node_first[node])
        return NULL;
    return &p->tasks[p->node_first[node] + local_task];
}

const merak_topo_task *merak_topo_placement_by_rank(const merak_topo_placement *p, int rank)
{
    return p && rank >= 0 && rank < p->ntasks ? &p->tasks[p->by_rank[rank]] : NULL;
}

const merak_topo_score *merak_topo_placement_score(const merak_topo_placement *p)
{
    return p ? &p->score : NULL;
}
