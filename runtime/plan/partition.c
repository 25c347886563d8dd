/*
 * partition.c - the partitioners (partition.h): a min-max dynamic
 * programme over block weights, the 1F1B step model, and AutoPipe's
 * search for the fastest partition.
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "merak/merak.h"
#include "names.h"
#include "partition.h"

/* The methods by name; the last entry only spells custom's form for messages. */
#define CUSTOM_PREFIX "custom:"
static const char *const method_names[] = {"uniform", "parameters", "autopipe", CUSTOM_PREFIX "S0,S1,..."};
enum { UNIFORM, PARAMETERS, AUTOPIPE, CUSTOM, NMETHOD = CUSTOM };

/* The search's budget, in ops the predictions run (about 5 ns each) and
 * cut positions the exact search tries: past it, the best partition found
 * so far stands. */
#define SEARCH_WORK 2e8
#define SEARCH_STEPS 4000000
/* The most stages x micro-batches the 1F1B model takes (16 bytes each). */
#define MODEL_OPS 1e8
/* The chain's budget: its own, or SEARCH_WORK (SEARCH_STEPS scales with it). */
static double work_budget(const merak_blocks *b) { return b->budget > 0 ? b->budget : SEARCH_WORK; }

/* Local search rounds, at most (each moves one boundary by one block). */
#define DESCENT_ROUNDS 4096

const char *merak_partition_names(void)
{
    static char names[96];
    return merak_names_join(method_names, NMETHOD + 1, names, sizeof names);
}

int merak_blocks_alloc(merak_blocks *b, int n)
{
    *b = (merak_blocks){.n = n};
    size_t k = (size_t)(n > 0 ? n : 1);
    b->fwd = calloc(k, sizeof *b->fwd);
    b->bwd = calloc(k, sizeof *b->bwd);
    b->params = calloc(k, sizeof *b->params);
    b->comm = calloc(k, sizeof *b->comm);
    b->first_end = 1;
    b->last_start = n - 1;
    if (b->fwd && b->bwd && b->params && b->comm)
        return 0;
    merak_blocks_free(b);
    return -1;
}

void merak_blocks_free(merak_blocks *b)
{
    free(b->fwd), free(b->bwd), free(b->params), free(b->comm);
    *b = (merak_blocks){0};
}

/* ------------------------------------------------------------------ methods */

/* custom:S0,S1,... into starts (NULL: only check); returns the count, or -1
 * with err. */
static int parse_custom(const char *list, int *starts, int max, char *err, size_t errlen)
{
    int n = 0;
    long prev = -1;
    const char *p = list;
    for (;;) {
        char *end;
        errno = 0;
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;   /* digits only: no sign, no space */
        if (v < 0 || errno || v > INT_MAX || (*end && *end != ','))
            return merak_errf(err, errlen, "partition '" CUSTOM_PREFIX "%s': '%.*s' is not a block number", list,
                              (int)strcspn(p, ","), p);
        if (n == 0 && v != 0)
            return merak_errf(err, errlen, "partition '" CUSTOM_PREFIX "%s': the first stage starts at block 0",
                              list);
        if (n > 0 && v <= prev)
            return merak_errf(err, errlen, "partition '" CUSTOM_PREFIX "%s': stage starts must increase", list);
        if (starts && n < max)
            starts[n] = (int)v;
        prev = v;
        n++;
        if (!*end)
            return n;
        p = end + 1;
    }
}

/* The method's index, CUSTOM, or -1 with err. */
static int parse_method(const char *method, char *err, size_t errlen)
{
    if (!method)
        return merak_errf(err, errlen, "no partition method");
    int i = merak_name_find(method_names, NMETHOD, method);
    if (i >= 0)
        return i;
    if (strncmp(method, CUSTOM_PREFIX, strlen(CUSTOM_PREFIX)) == 0)
        return CUSTOM;
    return merak_errf(err, errlen, "partition '%s' is not %s", method, merak_partition_names());
}

int merak_partition_check(const char *method, char *err, size_t errlen)
{
    int m = parse_method(method, err, errlen);
    if (m != CUSTOM)
        return m < 0 ? -1 : 0;
    return parse_custom(method + strlen(CUSTOM_PREFIX), NULL, 0, err, errlen) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ min-max */

/* Can stage s (of P) start at block j, or stage 1 at j for s = 1 (where
 * the first stage ends)?  The ends' constraints (merak_blocks). */
static int start_ok(const merak_blocks *b, int P, int s, int j)
{
    return (s != 1 || j >= b->first_end) && (s != P - 1 || j <= b->last_start);
}

/* -1 with err: WHAT breaks the ends' constraints. */
static int ends_error(const merak_blocks *b, const char *what, char *err, size_t errlen)
{
    return merak_errf(err, errlen, "%s: the first stage must hold blocks 0-%d and the last stage blocks %d-%d "
                      "(they read a weight tied between them)", what, b->first_end - 1, b->last_start, b->n - 1);
}

/* starts[0..P) minimising the largest stage sum of w (prefix sums pre[0..n]),
 * every stage at least one block, within the ends' constraints; of equal
 * maxima the earliest start wins, so later stages take as many blocks as
 * they can (Merak's reconstruction).  0, or -1 out of memory. */
static int minmax(const merak_blocks *b, const double *pre, int P, int *starts)
{
    const int n = b->n;
    /* best[s][j]: smallest max over s stages covering blocks [0, j);
     * from[s][j]: where the last of them starts. */
    size_t cells = (size_t)(P + 1) * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best);
    int *from = malloc(cells * sizeof *from);
    if (!best || !from) {
        free(best), free(from);
        return -1;
    }
    for (size_t i = 0; i < cells; i++)
        best[i] = DBL_MAX, from[i] = -1;
    best[0] = 0;
    for (int s = 1; s <= P; s++)
        for (int j = s; j <= n - (P - s); j++) {
            if (s < P && !start_ok(b, P, s, j))   /* j starts stage s */
                continue;
            for (int i = s - 1; i < j; i++) {
                double prev = best[(size_t)(s - 1) * (n + 1) + i];
                if (prev == DBL_MAX)
                    continue;
                double stage = pre[j] - pre[i], m = prev > stage ? prev : stage;
                if (m < best[(size_t)s * (n + 1) + j]) {
                    best[(size_t)s * (n + 1) + j] = m;
                    from[(size_t)s * (n + 1) + j] = i;
                }
            }
        }
    for (int s = P, j = n; s > 0; s--) {
        j = from[(size_t)s * (n + 1) + j];
        starts[s - 1] = j;
    }
    free(best), free(from);
    return 0;
}

/* The same number of blocks per stage, the last n mod P stages one more;
 * 1 if that keeps the ends' constraints (else the caller balances block
 * counts by min-max within them). */
static int uniform(const merak_blocks *b, int P, int *starts)
{
    const int q = b->n / P, r = b->n % P;
    for (int s = 0; s < P; s++)
        starts[s] = s * q + (s > P - r ? s - (P - r) : 0);
    for (int s = 1; s < P; s++)
        if (!start_ok(b, P, s, starts[s]))
            return 0;
    return 1;
}

/* starts[0..P) by a method that balances a weight: UNIFORM (block counts,
 * evenly where the ends allow), PARAMETERS, or AUTOPIPE's seed (forward +
 * backward).  0, or -1 out of memory. */
static int balance(const merak_blocks *b, int P, int m, int *starts)
{
    if (m == UNIFORM && uniform(b, P, starts))
        return 0;
    double *pre = malloc((size_t)(b->n + 1) * sizeof *pre);
    if (!pre)
        return -1;
    pre[0] = 0;
    for (int i = 0; i < b->n; i++)   /* blocks without parameters still count a little */
        pre[i + 1] = pre[i] + (m == UNIFORM ? 1 : m == PARAMETERS ? b->params[i] + 1e-9 : b->fwd[i] + b->bwd[i]);
    int rc = minmax(b, pre, P, starts);
    free(pre);
    return rc;
}

/* ------------------------------------------------------------------ prediction */

/* The 1F1B model a partition is judged by: stage s runs min(P - 1 - s, M)
 * warm-up forwards, then one forward and one backward at a time, then the
 * cool-down's backwards (PipeDream-flush, the order runtime/pipe/schedule.c
 * generates); an op starts when its stage is free and its input has
 * arrived, the transfer time of the cut it crosses after the sender
 * finished.  Where every cut costs the same, exactly the schedule
 * simulator's makespan for the 1f1b lists (test_plan checks it; the
 * simulator charges one cost per sending stage), in O(P M) time and no
 * allocation per partition, so the search can compare tens of thousands. */
typedef struct predictor {
    const merak_blocks *b;
    int P, M;
    double *pf, *pb;         /* prefix sums of fwd and bwd, [n + 1] */
    double *F, *B, *C;       /* per stage: forward, backward; C[s]: the cut before stage s */
    double *fend, *bend;     /* [P * M]: when each forward / backward ended */
    int *pc;                 /* [P]: next op of each stage's order */
    double *free_at;         /* [P] */
    double work;             /* ops run by the predictions so far */
} predictor;

static void predictor_free(predictor *p)
{
    free(p->pf), free(p->pb), free(p->F), free(p->B), free(p->C), free(p->fend), free(p->bend), free(p->pc),
        free(p->free_at);
}

/* Can the model run P stages of M micro-batches?  0, or -1 with err. */
static int model_check(int P, int M, char *err, size_t errlen)
{
    if ((double)P * M > MODEL_OPS)
        return merak_errf(err, errlen, "%d stages x %d micro-batches: more than the 1F1B model's %.0f", P, M,
                          MODEL_OPS);
    if (M < P)
        return merak_errf(err, errlen, "the 1f1b model needs at least as many micro-batches (M) as stages (S): "
                          "M = %d, S = %d", M, P);
    return 0;
}

static int predictor_init(predictor *p, const merak_blocks *b, int P, int M, char *err, size_t errlen)
{
    *p = (predictor){.b = b, .P = P, .M = M};
    if (model_check(P, M, err, errlen) < 0)
        return -1;
    size_t PM = (size_t)P * (size_t)M;
    p->pf = malloc((size_t)(b->n + 1) * sizeof *p->pf);
    p->pb = malloc((size_t)(b->n + 1) * sizeof *p->pb);
    p->F = malloc((size_t)P * sizeof *p->F);
    p->B = malloc((size_t)P * sizeof *p->B);
    p->C = malloc((size_t)P * sizeof *p->C);
    p->fend = malloc(PM * sizeof *p->fend);
    p->bend = malloc(PM * sizeof *p->bend);
    p->pc = malloc((size_t)P * sizeof *p->pc);
    p->free_at = malloc((size_t)P * sizeof *p->free_at);
    if (!p->pf || !p->pb || !p->F || !p->B || !p->C || !p->fend || !p->bend || !p->pc || !p->free_at) {
        predictor_free(p);
        return merak_errf(err, errlen, "out of memory");
    }
    p->pf[0] = p->pb[0] = 0;
    for (int i = 0; i < b->n; i++) {
        if (!(b->fwd[i] >= 0 && b->bwd[i] >= 0 && b->comm[i] >= 0 && b->fwd[i] + b->bwd[i] + b->comm[i] < DBL_MAX)) {
            predictor_free(p);
            return merak_errf(err, errlen, "block %d: costs must be finite and not negative", i);
        }
        p->pf[i + 1] = p->pf[i] + b->fwd[i];
        p->pb[i + 1] = p->pb[i] + b->bwd[i];
    }
    return 0;
}

/* Stage s's k-th op of 2M: 1 for the backward of *mb, 0 for a forward. */
static int op_at(int P, int M, int s, int k, int *mb)
{
    int w = P - 1 - s < M ? P - 1 - s : M;
    if (k < w)
        return *mb = k, 0;
    if (k >= 2 * M - w)
        return *mb = k - M, 1;
    int j = k - w;                     /* steady: F(w + j/2), B(j/2) */
    *mb = j % 2 ? j / 2 : w + j / 2;
    return j % 2;
}

/* The step time of the partition starts[0..P). */
static double predict(predictor *p, const int *starts)
{
    const merak_blocks *b = p->b;
    const int P = p->P, M = p->M;
    for (int s = 0; s < P; s++) {
        int a = starts[s], e = s + 1 < P ? starts[s + 1] : b->n;
        p->F[s] = p->pf[e] - p->pf[a];
        p->B[s] = p->pb[e] - p->pb[a];
        p->C[s] = s > 0 ? b->comm[a] : 0;   /* activation in, gradient back out */
        p->pc[s] = 0;
        p->free_at[s] = 0;
    }
    p->work += 2.0 * P * M;
    for (size_t k = 0; k < (size_t)P * M; k++)
        p->fend[k] = p->bend[k] = -1;   /* not yet run */
    /* Sweep the stages, running each one's ops while their inputs are
     * there; 1F1B never deadlocks, so every sweep runs at least one op. */
    double end = 0;
    for (long left = 2L * P * M, before = -1; left > 0 && left != before;) {
        before = left;
        for (int s = 0; s < P; s++)
            for (; p->pc[s] < 2 * M; p->pc[s]++, left--) {
                int mb, bwd = op_at(P, M, s, p->pc[s], &mb);
                /* the input: the forward before, or the backward after */
                double in = 0, *from = NULL;
                if (!bwd && s > 0)
                    from = &p->fend[(size_t)(s - 1) * M + mb], in = p->C[s];
                else if (bwd && s + 1 < P)
                    from = &p->bend[(size_t)(s + 1) * M + mb], in = p->C[s + 1];
                if (from && *from < 0)
                    break;
                double ready = from ? *from + in : 0;
                double t = (ready > p->free_at[s] ? ready : p->free_at[s]) + (bwd ? p->B[s] : p->F[s]);
                p->free_at[s] = t;
                (bwd ? p->bend : p->fend)[(size_t)s * M + mb] = t;
                if (t > end)
                    end = t;
            }
    }
    return end;
}

int merak_partition_predict(const merak_blocks *b, int stages, int M, const int *starts, double *step,
                            char *err, size_t errlen)
{
    for (int s = 0; s < stages; s++)
        if (starts[s] < 0 || starts[s] >= b->n || (s == 0 && starts[s] != 0) || (s > 0 && starts[s] <= starts[s - 1]))
            return merak_errf(err, errlen, "stage %d's first block %d: stages must start at 0 and increase below %d",
                              s, starts[s], b->n);
        else if (!start_ok(b, stages, s, starts[s])) {
            char what[64];
            snprintf(what, sizeof what, "stage %d's first block %d", s, starts[s]);
            return ends_error(b, what, err, errlen);
        }
    predictor p;
    if (predictor_init(&p, b, stages, M, err, errlen) < 0)
        return -1;
    *step = predict(&p, starts);
    predictor_free(&p);
    return 0;
}

/* ------------------------------------------------------------------ AutoPipe */

typedef struct search {
    predictor *p;
    int *cur, *best;
    double best_t;
    double *rest;            /* [(P + 1) * (n + 1)]: rest[r * (n + 1) + i], see rest_bounds */
    double *cin;             /* [P]: the transfer costs of the cuts up to cur[k] (branch) */
    long steps;              /* cut positions tried */
    int have;                /* best holds a partition */
} search;

/* Keeps cand if it beats the best (or is the first). */
static void consider(search *s, const int *cand)
{
    double t = predict(s->p, cand);
    if (t < s->best_t || !s->have) {
        s->have = 1;
        s->best_t = t;
        memcpy(s->best, cand, (size_t)s->p->P * sizeof *cand);
    }
}

/* Steepest descent from s->best: move one boundary by one block while that
 * shortens the step. */
static void descend(search *s)
{
    const int P = s->p->P, n = s->p->b->n;
    int *cand = s->cur;
    for (int round = 0; round < DESCENT_ROUNDS && s->p->work < work_budget(s->p->b); round++) {
        double before = s->best_t;
        int move_s = -1, move_d = 0;
        for (int k = 1; k < P; k++)
            for (int d = -1; d <= 1; d += 2) {
                int v = s->best[k] + d, hi = k + 1 < P ? s->best[k + 1] : n;
                if (v <= s->best[k - 1] || v >= hi || !start_ok(s->p->b, P, k, v))
                    continue;
                memcpy(cand, s->best, (size_t)P * sizeof *cand);
                cand[k] = v;
                double t = predict(s->p, cand);
                if (t < s->best_t - 1e-12 * s->best_t && (move_s < 0 || t < before)) {
                    before = t;
                    move_s = k, move_d = d;
                }
            }
        if (move_s < 0)
            return;
        s->best[move_s] += move_d;
        s->best_t = before;
    }
}

/* A lower bound on the step from stage k alone, holding blocks [a, e):
 * its first forward cannot start before the stages before it ran
 * micro-batch 0's (F<), its first backward not before that micro-batch
 * went through the stages after it and back (F> + B>) nor before its own
 * P - k warm-up and first steady forwards; then it runs the rest of its M
 * forwards and M backwards one at a time, and its last backward still has
 * the earlier stages' backwards to go (B<):
 *   step >= F< + B< + M (F_k + B_k) + max(0, F> + B> - (P - 1 - k) F_k).
 * A transfer is paid twice on each path through its cut (the activation
 * one way, its gradient back): cin sums the cuts known before stage k's
 * end (its own included), cout those known after it. */
static double stage_bound(const predictor *p, int k, int a, int e, double cin, double cout)
{
    const int n = p->b->n;
    const double F = p->pf[e] - p->pf[a], B = p->pb[e] - p->pb[a];
    const double after = p->pf[n] - p->pf[e] + p->pb[n] - p->pb[e] + 2 * cout;
    const double idle = after - (p->P - 1 - k) * F;
    return p->pf[a] + p->pb[a] + 2 * cin + p->M * (F + B) + (idle > 0 ? idle : 0);
}

/* The transfer cost of the cut before block i when a stage starts there
 * (none before the first). */
static double cut_cost(const predictor *p, int i) { return i > 0 && i < p->b->n ? p->b->comm[i] : 0; }

/* rest[r * (n + 1) + i]: the least, over every way to cut blocks [i, n)
 * into the last r stages (within the ends' constraints), of the largest
 * stage_bound among them, each stage knowing the cuts at its own two ends
 * only; DBL_MAX where none exists.  A dynamic programme over the suffixes,
 * O(P n^2); the exact search's bound for the stages it has not cut yet.
 * 0, or -1 out of memory. */
static int rest_bounds(search *s)
{
    const predictor *p = s->p;
    const int P = p->P, n = p->b->n;
    s->rest = malloc((size_t)(P + 1) * (size_t)(n + 1) * sizeof *s->rest);
    if (!s->rest)
        return -1;
    double *g = s->rest;
    for (int r = 0; r <= P; r++)
        for (int i = 0; i <= n; i++)
            g[(size_t)r * (n + 1) + i] = r == 0 && i == n ? 0 : DBL_MAX;
    for (int r = 1; r <= P; r++) {
        const int k = P - r;   /* the stage that starts at i */
        for (int i = k; i <= n - r; i++) {
            if (k > 0 && !start_ok(p->b, P, k, i))
                continue;
            double best = DBL_MAX;
            for (int e = i + 1; e <= n - (r - 1); e++) {
                double next = g[(size_t)(r - 1) * (n + 1) + e];
                if (next == DBL_MAX)
                    continue;
                double mine = stage_bound(p, k, i, e, cut_cost(p, i), cut_cost(p, e)), m = mine > next ? mine : next;
                if (m < best)
                    best = m;
            }
            g[(size_t)r * (n + 1) + i] = best;
        }
    }
    return 0;
}

/* A lower bound on the step from stages i..k of s->cur (stage k ends
 * before block e; more cuts after it cost cout at least), through the
 * cycle that links them: stage i's backward of micro-batch x precedes its
 * forward of x + P - i, which runs through stages i+1..k, whose last runs
 * the backward of x + L (L = k - i + 1 stages) after it, which comes back
 * to stage i.  So stage i's backwards x and x + L start at least D apart,
 * D the window's forwards, backwards and transfers both ways, while stage
 * i's forward of x + P - i exists; the rest as in stage_bound, of which
 * this is the one-stage case (i = k). */
static double window_bound(const search *s, int i, int k, int e, double cout)
{
    predictor *p = s->p;
    p->work += 4;   /* about as long as 4 of a prediction's ops */
    const int n = p->b->n, a = s->cur[i], end = i < k ? s->cur[i + 1] : e, w = p->P - 1 - i, L = k - i + 1;
    const double M = p->M, F = p->pf[end] - p->pf[a], B = p->pb[end] - p->pb[a];
    const double after = p->pf[n] - p->pf[end] + p->pb[n] - p->pb[end] + 2 * (s->cin[k] - s->cin[i] + cout);
    const double D = p->pf[e] + p->pb[e] - p->pf[a] - p->pb[a] + 2 * (s->cin[k] - s->cin[i]);
    /* the first backward: after micro-batch 0 went through and back, and
     * after the warm-up's forwards */
    double t = p->pf[a] + s->cin[i] + (F + after > (w + 1) * F ? F + after : (w + 1) * F);
    const int m = M - 2 - w >= 0 ? (p->M - 2 - w) / L + 1 : 0;   /* jumps of L backwards */
    const double fwd_left = M - 1 - w - (double)m * L;
    t += m * D + (M - (double)m * L) * B + (fwd_left > 0 ? fwd_left * F : 0);
    return t + p->pb[a] + s->cin[i];   /* the last backward's way back to stage 0 */
}

/* Branch and bound over the starts of stages k.. given stages 0..k-1 in
 * s->cur (stage k starts at block a; lb the largest bound of stages
 * 0..k-1).  Each stage's bound over the windows that end at it
 * (window_bound) and rest_bounds' for the stages after it (every one of
 * which also pays the cuts up to a twice) prune; within the budget the
 * search is exact: the partition it returns has the least predicted step
 * of all. */
static void branch(search *s, int k, int a, double lb)
{
    predictor *p = s->p;
    const int P = p->P, n = p->b->n;
    const double limit = s->best_t * (1 - 1e-12);
    if (p->work >= work_budget(p->b) || s->steps >= SEARCH_STEPS * work_budget(p->b) / SEARCH_WORK)
        return;
    s->cur[k] = a;
    s->cin[k] = k > 0 ? s->cin[k - 1] + cut_cost(p, a) : 0;
    const double cin = s->cin[k], before = p->pf[a] + p->pb[a] + 2 * cin;
    if (k == P - 1) {
        double mine = lb;
        for (int i = k; i >= 0 && mine < limit; i--) {
            double x = window_bound(s, i, k, n, 0);
            mine = x > mine ? x : mine;
        }
        if (mine < limit)
            consider(s, s->cur);
        return;
    }
    for (int e = a + 1; e <= n - (P - k - 1) && s->steps++ < SEARCH_STEPS * work_budget(p->b) / SEARCH_WORK; e++) {
        if (!start_ok(p->b, P, k + 1, e))
            continue;
        if (before + p->M * (p->pf[e] + p->pb[e] - p->pf[a] - p->pb[a]) >= limit)
            break;   /* longer stages only cost more */
        if (s->rest[(size_t)(P - k - 1) * (n + 1) + e] + 2 * cin >= limit)
            continue;
        double mine = lb;
        for (int i = k; i >= 0 && mine < limit; i--) {
            double x = window_bound(s, i, k, e, cut_cost(p, e));
            mine = x > mine ? x : mine;
        }
        if (mine < limit)
            branch(s, k + 1, e, mine);
    }
}

static int autopipe(const merak_blocks *b, int P, int M, int *starts, double *step, char *err, size_t errlen)
{
    predictor p;
    if (predictor_init(&p, b, P, M, err, errlen) < 0)
        return -1;
    search s = {.p = &p, .cur = malloc((size_t)P * sizeof *s.cur), .cin = malloc((size_t)P * sizeof *s.cin),
                .best = starts, .best_t = DBL_MAX};
    int rc = s.cur && s.cin ? 0 : merak_errf(err, errlen, "out of memory");
    /* Seeds: the min-max of forward + backward (AutoPipe's), uniform's and
     * parameters' partitions. */
    const int seeds[] = {AUTOPIPE, UNIFORM, PARAMETERS};
    for (int k = 0; k < 3 && rc == 0; k++)
        if (balance(b, P, seeds[k], s.cur) < 0)
            rc = merak_errf(err, errlen, "out of memory");
        else
            consider(&s, s.cur);
    if (rc == 0) {
        descend(&s);
        if (rest_bounds(&s) < 0)
            rc = merak_errf(err, errlen, "out of memory");
        else
            branch(&s, 0, 0, 0);
    }
    if (rc == 0 && step)
        *step = s.best_t;
    free(s.cur), free(s.cin), free(s.rest);
    predictor_free(&p);
    return rc;
}

/* ------------------------------------------------------------------ entry points */

int merak_partition_blocks(const merak_blocks *b, int stages, int M, const char *method, int *starts,
                           double *step, char *err, size_t errlen)
{
    int m = parse_method(method, err, errlen);
    if (m < 0)
        return MERAK_USAGE;
    if (stages < 1) {
        merak_errf(err, errlen, "%d pipeline stages", stages);
        return MERAK_USAGE;
    }
    if (stages > b->n) {
        merak_errf(err, errlen, "%d stages, but the chain has %d blocks (every stage needs one)", stages, b->n);
        return MERAK_USAGE;
    }
    if (stages > 1 && (b->first_end > b->last_start || b->last_start - b->first_end < stages - 2)) {
        merak_errf(err, errlen, "%d stages do not fit: the first must hold blocks 0-%d and the last blocks %d-%d "
                   "(they read a weight tied between them), leaving %d blocks for %d stages", stages,
                   b->first_end - 1, b->last_start, b->n - 1, b->last_start - b->first_end, stages - 2);
        return MERAK_USAGE;
    }
    if ((m == AUTOPIPE || step) && model_check(stages, M, err, errlen) < 0)
        return MERAK_USAGE;
    if (m == AUTOPIPE && (double)b->n * (double)b->n * stages > MERAK_AUTOPIPE_MAX_WORK) {
        merak_errf(err, errlen, "autopipe: %d blocks into %d stages is more than it answers in seconds (blocks^2 x "
                   "stages at most 2^30; the uniform partition takes any chain)", b->n, stages);
        return MERAK_USAGE;
    }
    if (m == AUTOPIPE)
        return autopipe(b, stages, M, starts, step, err, errlen);
    if (m == CUSTOM) {
        const char *list = method + strlen(CUSTOM_PREFIX);
        int n = parse_custom(list, starts, stages, err, errlen);
        if (n >= 0 && n != stages)
            merak_errf(err, errlen, "partition '%s' starts %d stages, not %d", method, n, stages);
        else if (n >= 0 && starts[n - 1] >= b->n)
            merak_errf(err, errlen, "partition '%s': block %d is past the last (%d blocks)", method, starts[n - 1],
                       b->n);
        if (n < 0 || n != stages || starts[n - 1] >= b->n)
            return MERAK_USAGE;
        for (int k = 1; k < stages; k++)
            if (!start_ok(b, stages, k, starts[k])) {
                char what[300];
                snprintf(what, sizeof what, "partition '%s'", method);
                ends_error(b, what, err, errlen);
                return MERAK_USAGE;
            }
    } else if (balance(b, stages, m, starts) < 0) {
        return merak_errf(err, errlen, "out of memory");
    }
    return step ? merak_partition_predict(b, stages, M, starts, step, err, errlen) : 0;
}

int merak_graph_blocks(const merak_graph *g, merak_blocks *b, int **first, char *err, size_t errlen)
{
    *first = malloc((size_t)(g->nops + 2) * sizeof **first);
    int ncut = *first ? merak_cut_points(g, 0, g->nops, *first + 1) : -1;
    if (ncut < 0 || merak_blocks_alloc(b, ncut + 1) < 0) {
        free(*first);
        *first = NULL;
        return merak_errf(err, errlen, "out of memory");
    }
    (*first)[0] = 0;
    (*first)[b->n] = g->nops;
    /* A tied parameter (one storage, several tensors) is read by its
     * first block's stage and its last block's: they must be the first and
     * the last stage, which the tied group reduces over. */
    int *lo = malloc((size_t)g->ntensors * sizeof *lo), *hi = malloc((size_t)g->ntensors * sizeof *hi);
    if (!lo || !hi) {
        free(lo), free(hi), free(*first);
        *first = NULL;
        merak_blocks_free(b);
        return merak_errf(err, errlen, "out of memory");
    }
    for (int t = 0; t < g->ntensors; t++)
        lo[t] = hi[t] = -1;
    for (int k = 0; k < b->n; k++)
        for (int i = (*first)[k]; i < (*first)[k + 1]; i++)
            for (int j = 0; j < g->ops[i].nin; j++) {
                int t = g->ops[i].in[j];
                if (t < 0 || g->tensors[t].kind != MERAK_T_PARAM)
                    continue;
                b->params[k] += (double)merak_tensor_elems(&g->tensors[t]);
                int r = merak_graph_param_root(g, t);
                if (lo[r] < 0)
                    lo[r] = k;
                hi[r] = k;
            }
    for (int t = 0; t < g->ntensors; t++)
        if (lo[t] >= 0 && lo[t] != hi[t]) {
            if (lo[t] + 1 > b->first_end)
                b->first_end = lo[t] + 1;
            if (hi[t] < b->last_start)
                b->last_start = hi[t];
        }
    free(lo), free(hi);
    return 0;
}

int merak_partition_graph(const merak_blocks *b, const int *first, int stages, int M, const char *method,
                          int *starts, int *bounds, double *step, char *err, size_t errlen)
{
    if (stages > b->n) {
        merak_errf(err, errlen, "the graph has %d cut points, so at most %d pipeline stages (got %d)", b->n - 1,
                   b->n, stages);
        return MERAK_USAGE;
    }
    int rc = merak_partition_blocks(b, stages, M, method, starts, step, err, errlen);
    if (rc < 0)
        return rc;
    for (int s = 0; s < stages; s++)
        bounds[s] = first[starts[s]];
    bounds[stages] = first[b->n];
    return 0;
}
