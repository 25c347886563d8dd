/*
 * stage.c - one rank's pipeline stage (see stage.h): building it, its
 * slice of its tensor-parallel shard of the graph, the layers it
 * recomputes, its schedule and executor.  The interpreter that runs it is
 * stage_run.c, its gradient reductions stage_dp.c, the gathering of the
 * model's parameters stage_gather.c (stage_impl.h holds what they share).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "grow.h"
#include "stage_impl.h"
#include "trace.h"

/* Is parameter tensor t read by any op in [begin, end)? */
static int range_reads(const merak_graph *g, int begin, int end, int t)
{
    for (int i = begin; i < end; i++)
        for (int j = 0; j < g->ops[i].nin; j++)
            if (g->ops[i].in[j] >= 0 && merak_graph_param_root(g, g->ops[i].in[j]) == t)
                return 1;
    return 0;
}

void merak_stage_destroy(merak_stage *s)
{
    if (!s)
        return;
    merak_schedule_free(&s->sched);
    if (s->k)
        s->k->free(s->zshard);
    merak_exec_destroy(s->e);
    free(s->ids_h), free(s->tgt_h);
    free(s->act_req), free(s->grad_req), free(s->sends), free(s->send_slot), free(s->tied);
    free(s->breq), free(s->blo), free(s->bhi), free(s->bdone);
    free(s->zcounts);
    free(s->bounds);
    merak_graph_destroy(s->shard);
    free(s);
}

/* The executor's tensor-parallel sums.  The trace records the time the
 * compute waits in them: a blocking sum whole; a non-blocking one (a
 * sub-batch's) from the start call and the wait, not while it is in
 * flight behind other sub-batches' compute. */
static void tp_traced(merak_stage *s, merak_stamp t0)
{
    merak_trace_add_stamped(s->trace, 0, MERAK_TRACE_TP_ALLREDUCE, s->cur_mb, s->cur_chunk, t0,
                            merak_trace_stamp(s->trace));
}

static int tp_allreduce(void *ctx, float *buf, size_t n)
{
    merak_stage *s = ctx;
    merak_stamp t0 = merak_trace_stamp(s->trace);
    int rc = merak_allreduce(s->tp_g, buf, n, NULL);
    tp_traced(s, t0);
    return rc;
}

static int tp_start(void *ctx, float *buf, size_t n, int k)
{
    merak_stage *s = ctx;
    merak_stamp t0 = merak_trace_stamp(s->trace);
    int rc = merak_allreduce(s->tp_g, buf, n, &s->tp_req[k]);
    tp_traced(s, t0);
    return rc;
}

static int tp_wait(void *ctx, int k)
{
    merak_stage *s = ctx;
    merak_stamp t0 = merak_trace_stamp(s->trace);
    int rc = merak_wait(&s->tp_req[k]);
    tp_traced(s, t0);
    return rc;
}

static int tp_test(void *ctx, int k) { return merak_test(&((merak_stage *)ctx)->tp_req[k]); }

/* Gradient reduction over dp: this rank's ZeRO share, or buckets. */

/* The stage's layers, chunk by chunk: chunk c has nl[c] layers, layer j
 * of the stage (counting through the chunks) ending at local op ends[j]. */
typedef struct stage_layers {
    int nl[MERAK_MAX_CHUNKS];
    int *ends;
    int total;
} stage_layers;

/* Of n recomputed layers, chunk c's share: the same fraction of every
 * chunk (whole layers; they add up to n). */
static int chunk_share(const stage_layers *ly, int n, int c)
{
    long before = 0;
    for (int j = 0; j < c; j++)
        before += ly->nl[j];
    return (int)((long)n * (before + ly->nl[c]) / ly->total - (long)n * before / ly->total);
}

int merak_bf16_storage_env(int *float_storage, char *err, size_t errlen)
{
    const char *st = getenv("MERAK_BF16_STORAGE");
    *float_storage = st && strcmp(st, "float") == 0;
    if (st && !*float_storage && strcmp(st, "bf16") != 0)
        return merak_errf(err, errlen, "MERAK_BF16_STORAGE '%.32s' is not bf16 or float", st), MERAK_USAGE;
    return 0;
}

/* The schedule, and the executor's options, for recomputing n of the
 * stage's layers (each chunk its first chunk_share). */
static int plan_layers(merak_stage *s, const merak_stage_opts *o, const int *lb, const stage_layers *ly, int n,
                       merak_exec_opts *eo, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    int p = gr->pp_rank;
    merak_schedule_spec sp = {o->schedule, gr->pp, o->micro_batches, NULL, s->V};
    /* the generator reads only this stage's entry */
    unsigned char *flags = calloc((size_t)gr->pp, 1);
    if (!flags)
        return merak_errf(err, errlen, "out of memory");
    flags[p] = n > 0;
    sp.recompute = flags;
    merak_schedule_free(&s->sched);
    int r = merak_schedule_build(&sp, p, &s->sched, err, errlen);
    free(flags);
    if (r < 0)
        return MERAK_USAGE;   /* the spec was checked: only M < S gets here */
    *eo = (merak_exec_opts){.chunks = s->xc, .nchunks = s->V, .kernels = s->k, .tp = &s->tpc,
                            .tp_overlap = s->tp_overlap, .bf16 = o->bf16};
    for (int i = 0; i < s->sched.n; i++)   /* zero-bubble: weight parts run apart */
        eo->split |= s->sched.instr[i].kind == MERAK_I_BWD_WEIGHT;
    eo->float_storage = o->float_storage;
    for (int c = 0, first = 0; c < s->V; first += ly->nl[c++]) {
        int q = c * gr->pp + p, k = s->sched.recompute ? chunk_share(ly, n, c) : 0;
        s->xc[c] = (merak_exec_chunk){lb[q], lb[q + 1], s->sched.chunk_slots[c], k ? ly->ends[first + k - 1] : 0};
    }
    if (s->sched.recompute)
        eo->npool = s->sched.npool;
    s->recomputed = s->sched.recompute ? n : 0;
    return 0;
}

/* Which of its layers this stage recomputes (the policy), its schedule, and
 * the executor's options for both. */
static int plan_recompute(merak_stage *s, const merak_stage_opts *o, const int *lb, merak_exec_opts *eo,
                          char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    const int S = gr->pp, p = gr->pp_rank;
    const merak_recompute *rp = &o->recompute;
    stage_layers ly = {.total = 0};
    int nops = 0;
    for (int c = 0; c < s->V; c++)
        nops += s->bounds[c * S + p + 1] - s->bounds[c * S + p];
    ly.ends = malloc((size_t)(nops + s->V) * sizeof *ly.ends);
    if (!ly.ends)
        return merak_errf(err, errlen, "out of memory");
    /* layer j of a chunk ends at the j-th cut point inside it, the last at its end */
    for (int c = 0; c < s->V; c++) {
        int q = c * S + p, *ends = ly.ends + ly.total;
        int ncut = merak_cut_points(s->model, s->bounds[q], s->bounds[q + 1], ends);
        if (ncut < 0) {
            free(ly.ends);
            return merak_errf(err, errlen, "out of memory");
        }
        for (int j = 0; j < ncut; j++)
            ends[j] = merak_cut_map(s->g, ends[j]);
        ends[ncut] = lb[q + 1];
        ly.nl[c] = ncut + 1;
        ly.total += ncut + 1;
    }
    s->layers = ly.total;

    int n = 0, rc = 0;
    switch (rp->kind) {
    case MERAK_RECOMPUTE_NONE: break;
    case MERAK_RECOMPUTE_FULL: n = s->layers; break;
    case MERAK_RECOMPUTE_STAGE_AWARE: {
        /* scp holds one more micro-batch on stage S-2 (as Merak's does): it takes
         * stage S-3's ratio there; the same rule keeps the plans alike. */
        int q = o->schedule == MERAK_SCHEDULE_SCP && S > 2 && p == S - 2 ? S - 3 : p;
        n = (int)floor(s->layers * merak_recompute_stage_aware(rp->value, S, q) + 1e-9);
        break;
    }
    case MERAK_RECOMPUTE_BUDGET: {
        /* the fewest recomputed layers whose activations fit */
        double budget = rp->value * 1073741824.0, need = 0;
        for (n = 0; n <= s->layers; n++) {
            merak_exec *plan = NULL;
            if ((rc = plan_layers(s, o, lb, &ly, n, eo, err, errlen)) < 0)
                break;
            eo->plan_only = 1;
            if ((rc = merak_exec_create(s->g, eo, &plan, err, errlen)) < 0)
                break;
            need = (double)merak_exec_arena_bytes(plan);
            merak_exec_destroy(plan);
            eo->plan_only = 0;
            if (need <= budget)
                break;
        }
        if (rc == 0 && n > s->layers) {
            merak_errf(err, errlen,
                       "recompute budget=%g: stage %d needs %.4f GB of activations even when it "
                       "recomputes every layer %s lets it recompute, more than the budget",
                       rp->value, p, need / 1073741824.0, merak_schedule_name(o->schedule));
            rc = MERAK_USAGE;
        }
        break;
    }
    }
    if (rc == 0)
        rc = plan_layers(s, o, lb, &ly, n, eo, err, errlen);
    free(ly.ends);
    return rc;
}

/* This rank's chunks of its graph g: chunk c runs ops [lb[q], lb[q+1]) of
 * virtual stage q = c*pp + p. */
static int setup(merak_stage *s, const merak_stage_opts *o, const int *lb, char *err, size_t errlen)
{
    const merak_grid *gr = s->grid;
    const merak_graph *g = s->g;
    const int p = gr->pp_rank, S = gr->pp, Q = S * s->V;
    s->first = p == 0;
    s->last = p == S - 1;
    s->tpc = (merak_exec_comm){s, tp_allreduce, tp_start, tp_wait, tp_test};
    merak_exec_opts eo;
    int rc = plan_recompute(s, o, lb, &eo, err, errlen);
    if (rc < 0)
        return rc;
    eo.plan_only = s->plan_only;
    if (merak_exec_create(g, &eo, &s->e, err, errlen) < 0)
        return -1;
    if (gr->pp > 1 || gr->dp > 1)
        merak_exec_set_poll(s->e, merak_stage_poll, s);
    merak_exec_set_loss_scale(s->e, 1.0f / (float)(o->micro_batches * gr->dp));
    for (int c = 0; c < s->V; c++) {
        int q = c * S + p;
        s->in_t[c] = q == 0 ? -1 : merak_cut_tensor(g, lb[q]);
        s->out_t[c] = q == Q - 1 ? -1 : merak_cut_tensor(g, lb[q + 1]);
        if ((q > 0 && s->in_t[c] < 0) || (q < Q - 1 && s->out_t[c] < 0))
            return merak_errf(err, errlen, "stage %d: more than one activation crosses its bounds", q);
        /* bf16 storage moves 2 bytes an element */
        s->in_bytes[c] = merak_exec_tensor_bytes(s->e, s->in_t[c]);
        s->out_bytes[c] = merak_exec_tensor_bytes(s->e, s->out_t[c]);
    }
    int ids = merak_graph_find(g, "input_ids"), tgt = merak_graph_find(g, "targets");
    s->ids_t = merak_exec_tensor_chunk(s->e, ids) >= 0 ? ids : -1;
    s->tgt_t = merak_exec_tensor_chunk(s->e, tgt) >= 0 ? tgt : -1;
    s->loads = s->ids_t >= 0 || s->tgt_t >= 0;
    size_t bt = ids >= 0 ? (size_t)merak_tensor_elems(&g->tensors[ids]) : 1;
    s->ids_h = malloc(bt * sizeof *s->ids_h);
    s->tgt_h = malloc(bt * sizeof *s->tgt_h);
    s->act_req = calloc((size_t)s->sched.nslots, sizeof *s->act_req);
    s->grad_req = calloc((size_t)s->sched.nslots, sizeof *s->grad_req);
    s->tied = calloc((size_t)merak_exec_num_params(s->e) + 1, 1);
    if (!s->ids_h || !s->tgt_h || !s->act_req || !s->grad_req || !s->tied)
        return merak_errf(err, errlen, "out of memory");
    /* Parameters both end stages read (the tied embedding) are reduced over
     * the tied group; the last stage's copy is left out of the norm. */
    if (S > 1 && (s->first || s->last)) {
        int ob = s->first ? lb[Q - 1] : 0, oe = s->first ? lb[Q] : lb[1];
        for (int i = 0; i < merak_exec_num_params(s->e); i++)
            s->tied[i] = range_reads(g, ob, oe, merak_exec_param_tensor(s->e, i));
    }
    /* Only the first and the last stage may share a parameter (the tied
     * group is theirs); the partitioners keep to it for a weight read in
     * two places, this catches the rest: the layout cannot work (MERAK_USAGE). */
    if (!s->first && !s->last) {
        unsigned char *mine = calloc((size_t)g->ntensors, 1);
        if (!mine)
            return merak_errf(err, errlen, "out of memory");
        for (int i = 0; i < merak_exec_num_params(s->e); i++)
            mine[merak_exec_param_tensor(s->e, i)] = 1;
        for (int q = 0; q < Q; q++)
            for (int i = lb[q]; i < lb[q + 1] && q % S != p; i++)
                for (int j = 0; j < g->ops[i].nin; j++) {
                    int t = g->ops[i].in[j];
                    if (t < 0 || g->tensors[t].kind != MERAK_T_PARAM || !mine[merak_graph_param_root(g, t)])
                        continue;
                    t = merak_graph_param_root(g, t);
                    merak_errf(err, errlen, "stage %d reads %s, which another stage reads too: only the first and "
                               "the last stage may share a weight", p, g->tensors[t].name);
                    free(mine);
                    return MERAK_USAGE;
                }
        free(mine);
    }
    return merak_stage_dp_setup(s, o, err, errlen);
}

/* The stage of grid position gr: everything merak_stage_create does but
 * the groups (s->plan_only: no backend memory either). */
static int build(merak_stage *s, const merak_grid *gr, const merak_graph *model, const merak_stage_opts *o,
                 char *err, size_t errlen)
{
    s->grid = gr;
    s->model = s->g = model;
    s->rules = o->rules;
    s->nrules = o->nrules;
    s->k = o->kernels;
    s->M = o->micro_batches;
    s->tp_overlap = o->tp_overlap > 1 ? o->tp_overlap : 1;
    if (s->tp_overlap > MERAK_MAX_SUB_BATCHES) {
        merak_errf(err, errlen, "stage: %d sub-batches per micro-batch, more than %d", s->tp_overlap,
                   MERAK_MAX_SUB_BATCHES);
        return MERAK_USAGE;
    }
    s->V = merak_virtual_stages(o->schedule, o->virtual_stages);
    merak_schedule_spec sp = {o->schedule, gr->pp, o->micro_batches, NULL, s->V};
    if (merak_schedule_check(&sp, err, errlen) < 0)
        return MERAK_USAGE;
    /* Virtual stage bounds in the whole graph (the same on every rank),
     * then in this rank's tensor-parallel shard of it. */
    const int Q = gr->pp * s->V;
    int *lb = malloc((size_t)(Q + 1) * sizeof *lb);
    s->bounds = malloc((size_t)(Q + 1) * sizeof *s->bounds);
    int rc = 0;
    if (!lb || !s->bounds)
        rc = merak_errf(err, errlen, "out of memory");
    else if (gr->tp > 1 && !o->shard &&
             !(s->shard = merak_graph_shard(model, gr->tp, gr->tp_rank, o->rules, o->nrules, err, errlen)))
        rc = -1;
    if (rc == 0) {
        memcpy(s->bounds, o->bounds, (size_t)(Q + 1) * sizeof *s->bounds);
        s->g = gr->tp == 1 ? model : o->shard ? o->shard : s->shard;
        for (int q = 0; q <= Q; q++)
            lb[q] = merak_cut_map(s->g, s->bounds[q]);
        rc = setup(s, o, lb, err, errlen);
    }
    free(lb);
    return rc;
}

int merak_stage_create(merak_comm *comm, const merak_graph *model, const merak_stage_opts *o,
                       merak_stage **out, char *err, size_t errlen)
{
    *out = NULL;
    merak_stage *s = calloc(1, sizeof *s);
    if (!s)
        return merak_errf(err, errlen, "out of memory");
    s->comm = comm;
    s->pp_g = merak_comm_group(comm, MERAK_GROUP_PP);
    s->dp_g = merak_comm_group(comm, MERAK_GROUP_DP);
    s->tied_g = merak_comm_group(comm, MERAK_GROUP_TIED);
    s->world_g = merak_comm_group(comm, MERAK_GROUP_WORLD);
    s->tp_g = merak_comm_group(comm, MERAK_GROUP_TP);
    int rc = build(s, merak_comm_grid(comm), model, o, err, errlen);
    if (rc < 0) {
        merak_stage_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

int merak_stage_plan(const merak_grid *gr, const merak_graph *model, const merak_stage_opts *o,
                     merak_stage_mem *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    merak_stage *s = calloc(1, sizeof *s);
    if (!s)
        return merak_errf(err, errlen, "out of memory");
    s->plan_only = 1;
    int rc = build(s, gr, model, o, err, errlen);
    if (rc == 0) {
        size_t n;
        merak_exec_params_flat(s->e, &n);
        m->params = n * sizeof(float);
        for (int i = 0; i < merak_exec_num_params(s->e); i++) {
            m->param_elems += merak_exec_param_elems(s->e, i);
            if (s->tied[i])
                m->tied += merak_exec_param_elems(s->e, i) * sizeof(float);
        }
        m->activations = merak_exec_arena_bytes(s->e);
        m->device = merak_exec_device_bytes(s->e) + s->zshard_bytes;
        m->share = s->zhi - s->zlo;
        m->layers = s->layers;
        m->recomputed = s->recomputed;
        m->chunks = s->V;
        for (int c = 0; c < s->V; c++)
            m->chunk[c] = s->xc[c];
        m->in_bytes = m->out_bytes = 0;
        for (int c = 0; c < s->V; c++)
            m->in_bytes += s->in_bytes[c], m->out_bytes += s->out_bytes[c];
    }
    merak_stage_destroy(s);
    return rc;
}
