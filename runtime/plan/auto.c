/*
 * auto.c - the layout search of merak-plan --auto and merak-train --auto
 * (auto.h).
 */
#include <stdlib.h>
#include <string.h>

#include "auto.h"
#include "errf.h"
#include "graph/graph.h"
#include "grow.h"
#include "pipe/policy.h"

/* autopipe's budget per partition in a search (a fiftieth of one run's) */
#define AUTO_SEARCH_WORK 4e6

/* One layout that fits: its plan's lower bound first, its step once
 * simulated. */
typedef struct candidate {
    merak_layout L;
    const char *rc_name;
    double bound, step, tokens_per_s, mfu, peak;
} candidate;

static int by_bound(const void *a, const void *b)
{
    double x = ((const candidate *)a)->bound, y = ((const candidate *)b)->bound;
    return x < y ? -1 : x > y;
}

static int by_step(const void *a, const void *b)
{
    double x = ((const candidate *)a)->step, y = ((const candidate *)b)->step;
    return x < y ? -1 : x > y;
}

/* What a search allocates: the cuts its candidates point to, the shards,
 * the candidates. */
typedef struct search {
    void **kept;
    size_t nkept, capkept;
    merak_graph **shards;   /* [G + 1]: the tp-rank-0 shard of each tp */
    int G;
    candidate *cand;
    size_t ncand, capcand;
} search;

/* p, kept until the search ends; NULL when p is (out of memory). */
static void *keep(search *s, void *p)
{
    if (!p)
        return NULL;
    if (merak_grow((void **)&s->kept, &s->capkept, s->nkept + 1, sizeof *s->kept) < 0) {
        free(p);
        return NULL;
    }
    return s->kept[s->nkept++] = p;
}

static int add_candidate(search *s, const candidate *c)
{
    if (merak_grow((void **)&s->cand, &s->capcand, s->ncand + 1, sizeof *s->cand) < 0)
        return -1;
    s->cand[s->ncand++] = *c;
    return 0;
}

static void search_free(search *s)
{
    for (size_t i = 0; i < s->nkept; i++)
        free(s->kept[i]);
    free(s->kept);
    for (int tp = 0; s->shards && tp <= s->G; tp++)
        merak_graph_destroy(s->shards[tp]);
    free(s->shards);
    free(s->cand);
}

/* The candidates of one dp x tp x pp with V chunks per stage: one cut for
 * all its schedules (each checks its own M in the plan), then every
 * schedule, ZeRO setting and policy the query leaves open, memory and
 * bound only.  0, or MERAK_FAILED / MERAK_USAGE with err. */
static int try_layout(search *s, const merak_graph *g, const merak_auto_query *q, const merak_device *d, int dp,
                      int tp, int pp, int V, merak_auto_result *r, char *err, size_t errlen)
{
    static const char *policies[] = {"none", "stage-aware", "full"};
    const char *const *rcs = q->recompute ? &q->recompute : policies;
    const int nrc = q->recompute ? 1 : 3;
    const long per = (long)dp * q->micro_batch;
    if (q->global_batch / per > MERAK_MAX_MICRO_BATCHES)
        return merak_errf(err, errlen, "--global-batch %ld makes %ld micro-batches per replica, more than %d",
                          q->global_batch, q->global_batch / per, MERAK_MAX_MICRO_BATCHES),
               MERAK_USAGE;
    merak_layout L = {.dp = dp, .tp = tp, .pp = pp, .gpus_per_node = s->G,
                      .schedule = V > 1 ? MERAK_SCHEDULE_INTERLEAVED : MERAK_SCHEDULE_GPIPE, .virtual_stages = V,
                      .recompute = {MERAK_RECOMPUTE_NONE, 0}, .micro_batches = (int)(q->global_batch / per),
                      .zero = q->zero > 0, .partition = q->partition ? q->partition : "autopipe",
                      .rules = q->rules, .nrules = q->nrules, .shard = s->shards[tp],
                      .search_work = AUTO_SEARCH_WORK, .bf16 = q->bf16, .float_storage = q->float_storage};
    const int Q = pp * V;
    int *starts = keep(s, malloc((size_t)Q * sizeof *starts));
    int *bounds = starts ? keep(s, malloc((size_t)(Q + 1) * sizeof *bounds)) : NULL;
    if (!bounds)
        return merak_errf(err, errlen, "out of memory");
    int rc = merak_layout_cut(g, &L, d, starts, bounds, NULL, err, errlen);
    if (rc == MERAK_FAILED)
        return MERAK_FAILED;
    if (rc < 0)
        return 0;   /* the method cannot cut this model so */
    L.starts = starts;
    L.bounds = bounds;
    L.skip_above = 1e-300;   /* memory and bounds only, for now */
    const int nsched = q->schedule >= 0 ? 1 : MERAK_SCHEDULE_COUNT_;
    for (int k = 0; k < nsched; k++) {
        L.schedule = q->schedule >= 0 ? (merak_schedule_kind)q->schedule : (merak_schedule_kind)k;
        if ((V > 1) != (L.schedule == MERAK_SCHEDULE_INTERLEAVED))
            continue;
        /* ZeRO-1 as asked, else both ways when there is a dp group to shard over */
        int zlo = q->zero >= 0 ? q->zero : 0, zhi = q->zero >= 0 ? q->zero : dp > 1;
        for (int z = zlo; z <= zhi; z++)
            for (int i = 0; i < nrc; i++) {
                merak_layout_result lr;
                L.zero = z;
                if (merak_recompute_parse(rcs[i], &L.recompute, err, errlen) < 0)
                    return MERAK_USAGE;
                int st = merak_layout_plan(g, &L, d, &lr, err, errlen);
                if (st == MERAK_FAILED)
                    return MERAK_FAILED;
                if (st < 0)
                    continue;   /* this schedule or policy cannot run here */
                r->tried++;
                double peak = lr.stage[lr.worst].mem_total;
                if (!lr.fits && (r->leanest == 0 || peak < r->leanest))
                    r->leanest = peak;
                int fail = lr.fits && add_candidate(s, &(candidate){L, rcs[i], lr.bound, 0, 0, 0, peak}) < 0;
                merak_layout_result_free(&lr);
                if (fail)
                    return merak_errf(err, errlen, "out of memory");
            }
    }
    return 0;
}

/* Every dp x tp x pp (and V) of the query, into s's candidates. */
static int enumerate(search *s, const merak_graph *g, const merak_auto_query *q, const merak_device *d,
                     merak_auto_result *r, char *err, size_t errlen)
{
    const int blocks = merak_layout_blocks(g), G = s->G, N = q->gpus;
    if (blocks < 1)
        return merak_errf(err, errlen, "out of memory");
    for (int tp = 1; tp <= G; tp++) {
        if (G % tp || N % tp || (q->tp && tp != q->tp))
            continue;
        if (tp > 1 && !(s->shards[tp] = merak_graph_shard(g, tp, 0, q->rules, q->nrules, err, errlen)))
            continue;   /* the model does not split tp ways (heads, vocabulary) */
        for (int pp = 1; pp <= N / tp && pp <= blocks; pp++) {
            int dp = N / tp / pp;
            if ((N / tp) % pp || q->global_batch % ((long)dp * q->micro_batch) || (q->pp && pp != q->pp) ||
                (q->dp && dp != q->dp))
                continue;
            /* one chunk per stage, and interleaved's chunks (virtual_stages, else 2) */
            const int chunks = q->virtual_stages ? q->virtual_stages : 2;
            for (int V = 1; V <= chunks; V += chunks - 1) {
                int fixed = q->schedule;
                if (V > 1 && (pp < 2 || (fixed >= 0 && fixed != MERAK_SCHEDULE_INTERLEAVED) || pp * V > blocks ||
                              (q->layers && q->layers % V)))
                    continue;
                if (V == 1 && fixed == MERAK_SCHEDULE_INTERLEAVED)
                    continue;
                int rc = try_layout(s, g, q, d, dp, tp, pp, V, r, err, errlen);
                if (rc < 0)
                    return rc;
            }
        }
    }
    return 0;
}

int merak_layout_auto(const merak_graph *g, const merak_auto_query *q, const merak_device *d, merak_auto_result *r,
                      char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (q->gpus < 1 || q->gpus_per_node < 1 || q->gpus % q->gpus_per_node || q->micro_batch < 1 || q->global_batch < 1)
        return merak_errf(err, errlen, "%d ranks, %d per node, micro-batch %d, global batch %ld: not a layout question",
                          q->gpus, q->gpus_per_node, q->micro_batch, q->global_batch),
               MERAK_USAGE;
    search s = {.G = q->gpus_per_node};
    if (!(s.shards = calloc((size_t)s.G + 1, sizeof *s.shards)))
        return merak_errf(err, errlen, "out of memory");
    int rc = enumerate(&s, g, q, d, r, err, errlen);
    r->fitting = s.ncand;
    if (rc < 0 || s.ncand == 0) {
        search_free(&s);
        return rc;
    }
    /* simulate in the order of the bounds while one can still make the list */
    qsort(s.cand, s.ncand, sizeof *s.cand, by_bound);
    double cutoff = -1;   /* the MERAK_AUTO_SHOWN-th fastest step simulated so far */
    for (size_t i = 0; i < s.ncand && (cutoff < 0 || s.cand[i].bound < cutoff); i++) {
        merak_layout_result lr;
        candidate *c = &s.cand[i];
        c->L.skip_above = 0;
        if (merak_layout_plan(g, &c->L, d, &lr, err, errlen) < 0) {
            search_free(&s);
            return -1;
        }
        c->step = lr.step, c->tokens_per_s = lr.tokens_per_s, c->mfu = lr.mfu;
        merak_layout_result_free(&lr);
        r->simulated = i + 1;
        if (r->simulated >= MERAK_AUTO_SHOWN) {
            qsort(s.cand, r->simulated, sizeof *s.cand, by_step);
            cutoff = s.cand[MERAK_AUTO_SHOWN - 1].step;
        }
    }
    qsort(s.cand, r->simulated, sizeof *s.cand, by_step);
    r->count = r->simulated < MERAK_AUTO_SHOWN ? (int)r->simulated : MERAK_AUTO_SHOWN;
    /* the choices keep their cuts (the shards are remade when planned) */
    for (int i = 0; i < r->count; i++) {
        const candidate *c = &s.cand[i];
        merak_auto_choice *ch = &r->choice[i];
        const int Q = c->L.pp * c->L.virtual_stages;
        int *starts = malloc((size_t)Q * sizeof *starts), *bounds = malloc((size_t)(Q + 1) * sizeof *bounds);
        if (!starts || !bounds) {
            free(starts), free(bounds);
            r->count = i;
            search_free(&s);
            return merak_errf(err, errlen, "out of memory");
        }
        memcpy(starts, c->L.starts, (size_t)Q * sizeof *starts);
        memcpy(bounds, c->L.bounds, (size_t)(Q + 1) * sizeof *bounds);
        *ch = (merak_auto_choice){c->L, c->rc_name, c->step, c->tokens_per_s, c->mfu, c->peak};
        ch->L.starts = starts, ch->L.bounds = bounds, ch->L.shard = NULL;
    }
    search_free(&s);
    return 0;
}

void merak_auto_result_free(merak_auto_result *r)
{
    for (int i = 0; i < r->count; i++) {
        free((void *)r->choice[i].L.starts);
        free((void *)r->choice[i].L.bounds);
    }
    r->count = 0;
}
