/*
 * layout.c - partitions, memory and step time of a training layout
 * (layout.h).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "errf.h"
#include "graph/ops.h"
#include "layout.h"
#include "pipe/schedule.h"
#include "pipe/stage.h"

int merak_layout_check(const merak_layout *L, char *err, size_t errlen)
{
    if (L->dp < 1 || L->tp < 1 || L->pp < 1)
        return merak_errf(err, errlen, "dp, tp and pp must be at least 1 (dp=%d tp=%d pp=%d)", L->dp, L->tp,
                          L->pp), MERAK_USAGE;
    if ((double)L->dp * L->tp * L->pp > 1 << 24)
        return merak_errf(err, errlen, "dp*tp*pp = %.0f ranks, more than %d", (double)L->dp * L->tp * L->pp,
                          1 << 24), MERAK_USAGE;
    if (L->gpus_per_node < 1 || L->gpus_per_node % L->tp != 0)
        return merak_errf(err, errlen, "tp=%d does not divide the %d GPUs of a node (a tensor-parallel group "
                          "stays inside one node)", L->tp, L->gpus_per_node), MERAK_USAGE;
    int V = merak_virtual_stages(L->schedule, L->virtual_stages);
    merak_schedule_spec sp = {L->schedule, L->pp, L->micro_batches, NULL, V};
    if (merak_schedule_check(&sp, err, errlen) < 0)
        return MERAK_USAGE;
    if (merak_partition_check(L->partition ? L->partition : "autopipe", err, errlen) < 0)
        return MERAK_USAGE;
    return 0;
}

/* partition_graph on blocks b (first: their first ops) whose
 * costs are filled. */
static int partition_blocks(merak_blocks *b, const int *first, const char *method, int pp, int V, int M,
                            int *starts, int *bounds, double *step, char *err, size_t errlen)
{
    const int Q = pp * V;
    if (step)
        *step = 0;
    if (V > 1 && Q > b->n)
        return merak_errf(err, errlen, "pp %d x %d virtual stages = %d model chunks, but the graph can be cut "
                          "into %d at most", pp, V, Q, b->n), MERAK_USAGE;
    /* The 1F1B model the partition is judged by needs M >= stages: with
     * fewer (gpipe, interleaved), autopipe balances for M = stages, and
     * no step is predicted. */
    int predict = strcmp(method, "autopipe") == 0 && M >= Q;
    return merak_partition_graph(b, first, Q, M > Q ? M : Q, method, starts, bounds, predict ? step : NULL, err,
                                 errlen);
}

/* The blocks of g costed from the ops of `local` on d (NULL: no costs, for
 * the methods that need none), cut by `method` into pp * V stages. */
static int partition_graph(const merak_graph *g, const merak_graph *local, const char *method, const merak_device *d,
                           double link_bw, double elem, int pp, int V, int M, double budget, int *starts,
                           int *bounds, double *step, char *err, size_t errlen)
{
    merak_blocks b;
    int *first = NULL;
    if (merak_graph_blocks(g, &b, &first, err, errlen) < 0)
        return -1;
    b.budget = budget;
    if (d)
        merak_blocks_cost(g, first, local, d, link_bw, elem, &b);
    int rc = strcmp(method, "autopipe") == 0 && !d && pp * V > 1
                 ? merak_errf(err, errlen, "autopipe needs a device profile")
                 : partition_blocks(&b, first, method, pp, V, M, starts, bounds, step, err, errlen);
    merak_blocks_free(&b);
    free(first);
    return rc;
}

/* Bytes of an activation's element on the pipeline's links. */
static double layout_elem(const merak_layout *L) { return L->bf16 && !L->float_storage ? 2.0 : 4.0; }

double merak_adamw_bytes(size_t share) { return 2.0 * (double)(share ? share : 1) * sizeof(float); }

int merak_layout_blocks(const merak_graph *g)
{
    int *cuts = malloc((size_t)g->nops * sizeof *cuts);
    int n = cuts ? merak_cut_points(g, 0, g->nops, cuts) + 1 : 0;
    free(cuts);
    return n;
}

void merak_layout_result_free(merak_layout_result *r)
{
    free(r->stage);
    free(r->starts);
    memset(r, 0, sizeof *r);
}

/* The links the layout's groups use (world rank = t + tp (j + dp p)): a
 * group inside one node talks over intra, else inter. */
typedef struct links {
    double pp, dp, tied;
} links;

static links layout_links(const merak_layout *L, int V, const merak_device *d)
{
    const long G = L->gpus_per_node, tp = L->tp, per_stage = tp * L->dp;
#define NODE(r) (L->node_of ? (long)L->node_of[r] : (r) / G)
    /* each search ends at the first pair of ranks on two nodes: O(world)
     * only when every group stays inside a node */
    int pp_out = 0, dp_out = 0;
    for (long p = 0; p < L->pp && !(pp_out && dp_out); p++) {
        /* to the next stage; interleaved, the last one sends to the first */
        long next = p + 1 < L->pp ? p + 1 : V > 1 && L->pp > 1 ? 0 : -1;
        for (long i = 0; i < per_stage && next >= 0 && !pp_out; i++)
            pp_out = NODE(p * per_stage + i) != NODE(next * per_stage + i);
        for (long t = 0; t < tp && !dp_out; t++)   /* the dp group of (t, p) */
            for (long j = 1; j < L->dp && !dp_out; j++)
                dp_out = NODE(p * per_stage + t + j * tp) != NODE(p * per_stage + t);
    }
    int tied_out = 0;   /* the end stages' tied groups */
    for (long i = 0; i < per_stage && L->pp > 1 && !tied_out; i++)
        tied_out = NODE(i) != NODE((L->pp - 1) * per_stage + i);
#undef NODE
    return (links){pp_out ? d->inter : d->intra, dp_out ? d->inter : d->intra, tied_out ? d->inter : d->intra};
}

/* Plans pipeline stage p's rank (dp rank 0, tp rank 0): memory, and the
 * simulator's costs of its chunks into costs[c * pp + p]. */
static int plan_stage(const merak_graph *g, const merak_graph *local, const merak_layout *L, int V, const int *bounds,
                      const merak_device *d, const links *ln, int p, merak_layout_stage *st, merak_sim_costs *costs,
                      merak_stage_mem *m, char *err, size_t errlen)
{
    merak_grid gr;
    int world = L->dp * L->tp * L->pp;
    if (merak_grid_init(&gr, L->dp, L->tp, L->pp, world, 0, err, errlen) < 0 ||
        merak_grid_init(&gr, L->dp, L->tp, L->pp, world, merak_grid_rank(&gr, 0, 0, p), err, errlen) < 0)
        return MERAK_USAGE;
    /* the profile's backend's table, its products as the run's (the
     * attention's scratch depends on them) */
    const merak_kernels *kt = merak_kernels_plan(d->backend);
    if (kt->set_products)
        kt->set_products(L->bf16 ? MERAK_PRODUCTS_BF16 : MERAK_PRODUCTS_FP32);
    merak_stage_opts so = {.schedule = L->schedule, .recompute = L->recompute, .bounds = bounds, .rules = L->rules,
                           .nrules = L->nrules, .micro_batches = L->micro_batches, .virtual_stages = V,
                           .zero = L->zero, .kernels = kt, .shard = L->tp > 1 ? local : NULL,
                           .bf16 = L->bf16, .float_storage = L->float_storage};
    int rc = merak_stage_plan(&gr, g, &so, m, err, errlen);
    if (rc < 0)
        return rc;
    st->layers = m->layers;
    st->recomputed = m->recomputed;
    st->params = (double)m->param_elems;
    st->mem_params = st->mem_grads = (double)m->params;
    st->mem_optimizer = merak_adamw_bytes(m->share);
    st->mem_activations = (double)m->activations;
    st->mem_other = (double)m->device - 2.0 * (double)m->params - (double)m->activations + d->reserved;
    st->mem_total = (double)m->device + st->mem_optimizer + d->reserved;
    const int Q = L->pp * V;
    for (int c = 0; c < m->chunks; c++) {
        merak_sim_costs k = {0};
        for (int i = m->chunk[c].op_begin; i < m->chunk[c].op_end; i++) {
            double f, b;
            merak_op_time(local, i, d, &f, &b);
            k.fwd += f;
            k.bwd += b;
            k.bwd_weight += b * merak_op_kind_of(&local->ops[i])->weight_share;
            if (i < m->chunk[c].recompute_end)
                k.recompute += f;
        }
        int q = c * L->pp + p;
        k.comm = q + 1 < Q ? merak_cut_time(g, bounds[q + 1], d, ln->pp, layout_elem(L)) : 0;
        costs[q] = k;
        st->fwd += k.fwd;
        st->bwd += k.bwd;
        st->recompute += k.recompute;
        st->bwd_weight += k.bwd_weight;
    }
    return 0;
}

/* The step: the schedule simulated on the stages' costs, then the
 * reductions and the optimizer. */
static int time_step(const merak_layout *L, int V, const merak_sim_costs *costs, const unsigned char *recompute,
                     merak_layout_result *r, char *err, size_t errlen)
{
    merak_schedule_spec sp = {L->schedule, L->pp, L->micro_batches, recompute, V};
    merak_schedule *sched = calloc((size_t)L->pp, sizeof *sched);
    if (!sched)
        return merak_errf(err, errlen, "out of memory");
    merak_sim_result res = {0};
    if (merak_schedule_check_all(&sp, err, errlen) < 0) {   /* too large to plan: this layout cannot be asked */
        free(sched);
        return MERAK_USAGE;
    }
    int rc = merak_schedule_build_all(&sp, sched, err, errlen);
    if (rc == 0) {
        rc = merak_schedule_simulate(sched, L->pp, costs, &res, err, errlen);
        for (int p = 0; p < L->pp; p++)
            merak_schedule_free(&sched[p]);
    }
    free(sched);
    r->pipeline = res.makespan;
    r->bubble = res.bubble;
    return rc;
}

/* L's shard for tp rank 0: L->shard, or one made into *made (MERAK_USAGE: the
 * model cannot be cut tp ways, the layout's fault). */
static int layout_shard(const merak_graph *g, const merak_layout *L, merak_graph **made, const merak_graph **local,
                        char *err, size_t errlen)
{
    *made = NULL;
    *local = g;
    if (L->tp == 1)
        return 0;
    if (!L->shard && !(*made = merak_graph_shard(g, L->tp, 0, L->rules, L->nrules, err, errlen)))
        return MERAK_USAGE;
    *local = L->shard ? L->shard : *made;
    return 0;
}

/* d as the layout's arithmetic times it: bf16's measured rates for bf16. */
static merak_device layout_device(const merak_layout *L, const merak_device *d)
{
    merak_device v = *d;
    v.rates = L->bf16 ? MERAK_RATES_BF16 : MERAK_RATES_FP32;
    return v;
}

int merak_layout_cut(const merak_graph *g, const merak_layout *L, const merak_device *dev, int *starts,
                     int *bounds, double *step, char *err, size_t errlen)
{
    const merak_device view = dev ? layout_device(L, dev) : (merak_device){0}, *d = dev ? &view : NULL;
    const char *method = L->partition ? L->partition : "autopipe";
    const int V = merak_virtual_stages(L->schedule, L->virtual_stages);
    merak_graph *made = NULL;
    const merak_graph *local = g;
    int rc = 0;
    if (d && strcmp(method, "autopipe") == 0)   /* only autopipe reads the shard's op times */
        rc = layout_shard(g, L, &made, &local, err, errlen);
    if (rc == 0)
        rc = partition_graph(g, local, method, d, d ? layout_links(L, V, d).pp : 0, layout_elem(L), L->pp, V,
                             L->micro_batches, L->search_work, starts, bounds, step, err, errlen);
    merak_graph_destroy(made);
    return rc;
}

int merak_layout_plan(const merak_graph *g, const merak_layout *L, const merak_device *dev,
                      merak_layout_result *r, char *err, size_t errlen)
{
    const merak_device view = layout_device(L, dev), *d = &view;
    memset(r, 0, sizeof *r);
    int rc = merak_layout_check(L, err, errlen);
    if (rc < 0)
        return rc;
    if (d->backend[0] && !merak_backend_find(d->backend))
        return merak_errf(err, errlen, "device profile: backend '%s' is not %s", d->backend, merak_backend_names());
    const int V = merak_virtual_stages(L->schedule, L->virtual_stages), Q = L->pp * V;
    merak_graph *shard;
    const merak_graph *local;
    if ((rc = layout_shard(g, L, &shard, &local, err, errlen)) < 0)
        return rc;
    links ln = layout_links(L, V, d);
    int *bounds = calloc((size_t)Q + 1, sizeof *bounds);
    merak_sim_costs *costs = calloc((size_t)Q, sizeof *costs);
    unsigned char *recompute = calloc((size_t)L->pp, 1);
    r->stage = calloc((size_t)L->pp, sizeof *r->stage);
    r->starts = calloc((size_t)Q, sizeof *r->starts);
    r->stages = L->pp;
    r->chunks = V;
    r->blocks = merak_layout_blocks(g);
    if (!bounds || !costs || !recompute || !r->stage || !r->starts || r->blocks < 1)
        rc = merak_errf(err, errlen, "out of memory");
    else if (!L->bounds != !L->starts)
        rc = merak_errf(err, errlen, "layout: give both the stage starts and bounds, or neither");
    else if (L->bounds) {
        memcpy(bounds, L->bounds, (size_t)(Q + 1) * sizeof *bounds);
        memcpy(r->starts, L->starts, (size_t)Q * sizeof *r->starts);
    } else {
        merak_layout full = *L;
        full.shard = local;
        rc = merak_layout_cut(g, &full, d, r->starts, bounds, NULL, err, errlen);
    }
    double reduce = 0, optimizer = 0, busiest = 0;
    for (int p = 0; p < L->pp && rc == 0; p++) {
        merak_stage_mem m;
        merak_layout_stage *st = &r->stage[p];
        if ((rc = plan_stage(g, local, L, V, bounds, d, &ln, p, st, costs, &m, err, errlen)) < 0)
            break;
        st->first_block = r->starts[p];
        recompute[p] = m.recomputed > 0;
        double red = merak_allreduce_time((double)m.params, L->dp, ln.dp, d->latency) +
                     (L->pp > 1 ? merak_allreduce_time((double)m.tied, 2, ln.tied, d->latency) : 0);
        double opt = 7.0 * sizeof(float) * (double)m.share / d->mem_bw;
        reduce = red > reduce ? red : reduce;
        optimizer = opt > optimizer ? opt : optimizer;
        if (st->mem_total > r->stage[r->worst].mem_total)
            r->worst = p;
    }
    /* Stage p works M forwards and backwards (and recomputes, but scp's
     * last stage), after the first micro-batch's forwards on the stages
     * before it and, but in zb-h1 (whose stages end with delayed weight
     * parts that may overlap it), before the last backward's input
     * gradients on them.  Chunks interleave: no fill there. */
    double fill = 0;
    for (int p = 0; p < L->pp && rc == 0; p++) {
        const merak_layout_stage *st = &r->stage[p];
        int skips = L->schedule == MERAK_SCHEDULE_SCP && p == L->pp - 1;
        double work = (double)L->micro_batches * (st->fwd + st->bwd + (recompute[p] && !skips ? st->recompute : 0));
        work += V == 1 ? fill : 0;
        busiest = work > busiest ? work : busiest;
        fill += st->fwd + (L->schedule == MERAK_SCHEDULE_ZB_H1 ? 0 : st->bwd - st->bwd_weight);
    }
    r->bound = busiest + reduce + optimizer;
    r->simulated = !(L->skip_above > 0 && r->bound >= L->skip_above);
    if (rc == 0 && r->simulated)
        rc = time_step(L, V, costs, recompute, r, err, errlen);
    if (rc == 0) {
        r->reduce = reduce;
        r->optimizer = optimizer;
        r->step = r->simulated ? r->pipeline + reduce + optimizer : r->bound;
        double flops = 0;
        for (int i = 0; i < g->nops; i++)
            flops += g->ops[i].flops;
        const double replicas = (double)L->micro_batches * L->dp, world = (double)L->dp * L->tp * L->pp;
        int ids = merak_graph_find(g, "input_ids");
        double tokens = ids >= 0 ? (double)merak_tensor_elems(&g->tensors[ids]) : 0;
        r->model_flops = 3.0 * flops * replicas;
        r->tokens_per_s = r->step > 0 ? tokens * replicas / r->step : 0;
        r->mfu = r->step > 0 ? r->model_flops / (r->step * world * d->matmul) : 0;
        r->available = d->memory;
        r->fits = r->stage[r->worst].mem_total <= r->available;
    }
    free(bounds);
    free(costs);
    free(recompute);
    merak_graph_destroy(shard);
    if (rc < 0)
        merak_layout_result_free(r);
    return rc;
}
