/*
 * test_plan.c - the planner: stage cuts, the partitioners against a
 * brute-force search of every contiguous partition, AutoPipe never behind
 * the simpler methods on real and unbalanced graphs, method spelling,
 * device profiles and op times.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "merak/merak.h"
#include "comm/comm.h"
#include "plan/cost.h"
#include "pipe/schedule.h"
#include "plan/layout.h"
#include "plan/partition.h"
#include "preset.h"
#include "tap.h"


/* A small deterministic generator (tests must not depend on libc's rand). */
static unsigned long long rng = 88172645463325252ULL;
static double uniform01(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* ------------------------------------------------------------------ cuts */

/* Stage cuts fall only where one activation crosses; every method covers
 * the graph with non-empty stages; more stages than blocks are refused. */
static void test_graph_partition(void)
{
    merak_graph *g = build("tiny-llama", 2, 8);
    merak_device d;
    merak_blocks b;
    int *first = NULL, bounds[5], starts[4], n = g ? merak_graph_num_ops(g) : 0;
    if (!g || merak_graph_blocks(g, &b, &first, err, sizeof err) < 0 || merak_device_load("cpu", &d, err, sizeof err) < 0) {
        tap_ok(0, "tiny-llama blocks and the cpu profile: %s", err);
        merak_graph_destroy(g);
        return;
    }
    merak_blocks_cost(g, first, g, &d, d.intra, 4.0, &b);
    const char *methods[] = {"uniform", "parameters", "autopipe", "custom:0,2,4,6"};
    for (int m = 0; m < 4; m++) {
        int rc = merak_partition_graph(&b, first, 4, 8, methods[m], starts, bounds, NULL, err, sizeof err);
        int ok = rc == 0;
        for (int s = 0; ok && s < 4; s++)
            ok &= bounds[s] == first[starts[s]];
        ok &= bounds[0] == 0 && bounds[4] == n;
        for (int s = 1; ok && s < 4; s++)
            ok &= bounds[s] > bounds[s - 1] && merak_cut_tensor(g, bounds[s]) >= 0;
        tap_ok(ok, "%s cuts tiny-llama (%d blocks) into 4 stages at single activations: %d %d %d %d %d",
               methods[m], b.n, bounds[0], bounds[1], bounds[2], bounds[3], bounds[4]);
    }
    tap_ok(merak_cut_tensor(g, 1) < 0 || merak_cut_tensor(g, 2) < 0,
           "a cut inside a block (skip connection alive) is not a cut point");
    int many[65];
    tap_ok(merak_partition_graph(&b, first, 64, 64, "uniform", many, many, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "cut points, so at most"), "64 stages are refused as a usage error: %s", err);
    merak_blocks_free(&b);
    free(first);
    merak_graph_destroy(g);
}

/* GPT-2's embedding and LM head share one weight, which only the first and
 * the last stage may hold: every method keeps to it, a custom cut that
 * does not is refused, and so are more stages than fit around it. */
static void test_tied_ends(void)
{
    merak_graph *g = build("tiny-gpt2", 2, 8);
    merak_blocks b;
    int *first = NULL, st[9], ok = 1;
    if (!g || merak_graph_blocks(g, &b, &first, err, sizeof err) < 0) {
        tap_ok(0, "tiny-gpt2 blocks: %s", err);
        merak_graph_destroy(g);
        return;
    }
    for (int i = 0; i < b.n; i++)
        b.fwd[i] = 1, b.bwd[i] = 2;
    b.fwd[b.n - 1] = 0.01, b.bwd[b.n - 1] = 0.02;   /* a loss that would gladly be a stage of its own */
    const char *methods[] = {"uniform", "parameters", "autopipe"};
    for (int P = 2; P <= 8; P++)
        for (int m = 0; m < 3; m++)
            ok &= merak_partition_blocks(&b, P, 2 * P, methods[m], st, NULL, err, sizeof err) == 0 &&
                  st[1] >= b.first_end && st[P - 1] <= b.last_start;
    tap_ok(ok && b.first_end == 1 && b.last_start == b.n - 2,
           "tiny-gpt2: the head's block %d stays on the last stage for every method and 2..8 stages", b.last_start);
    tap_ok(merak_partition_blocks(&b, 4, 4, "custom:0,6,7,8", st, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "the last stage blocks 7-8"), "a custom cut leaving the head elsewhere: %s", err);
    tap_ok(merak_partition_blocks(&b, 9, 9, "uniform", st, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "9 stages do not fit"), "9 stages around the tied ends: %s", err);
    merak_blocks_free(&b);
    free(first);
    merak_graph_destroy(g);
}

/* ------------------------------------------------------------------ methods */

static void test_methods(void)
{
    struct { const char *m; const char *want; } bad[] = {
        {"bogus", "is not uniform, parameters, autopipe or custom:S0,S1,..."},
        {"custom:1,4", "the first stage starts at block 0"},
        {"custom:0,4,4", "stage starts must increase"},
        {"custom:0,x", "'x' is not a block number"},
        {"custom:0,-3", "'-3' is not a block number"},
        {"custom:", "'' is not a block number"},
        {"custom:0,,2", "'' is not a block number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        tap_ok(merak_partition_check(bad[i].m, err, sizeof err) < 0 && strstr(err, bad[i].want),
               "partition '%s' is refused: %s", bad[i].m, err);
    tap_ok(merak_partition_check("autopipe", err, sizeof err) == 0 &&
               merak_partition_check("custom:0,6,12", err, sizeof err) == 0, "autopipe and custom:0,6,12 parse");

    merak_blocks b;
    int starts[4];
    merak_blocks_alloc(&b, 6);
    for (int i = 0; i < 6; i++)
        b.fwd[i] = 1, b.bwd[i] = 2;
    tap_ok(merak_partition_blocks(&b, 3, 4, "custom:0,2", starts, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "starts 2 stages, not 3"), "a custom list of the wrong length: %s", err);
    tap_ok(merak_partition_blocks(&b, 2, 4, "custom:0,6", starts, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "past the last (6 blocks)"), "a custom start past the chain: %s", err);
    tap_ok(merak_partition_blocks(&b, 4, 4, "custom:0,1,2,3,4,5", starts, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "starts 6 stages, not 4"), "a custom list longer than the stages: %s", err);
    tap_ok(merak_partition_check("custom:0, 3", err, sizeof err) < 0 && strstr(err, "' 3' is not a block number") &&
               merak_partition_check("custom:0,+3", err, sizeof err) < 0,
           "a space or a sign in a custom list is refused: %s", err);
    {
        merak_blocks u;
        int st[4];
        merak_blocks_alloc(&u, 10);
        int rc = merak_partition_blocks(&u, 4, 4, "uniform", st, NULL, err, sizeof err);
        tap_ok(rc == 0 && st[1] == 2 && st[2] == 4 && st[3] == 7,
               "uniform cuts 10 blocks 2, 2, 3, 3 (starts 0 %d %d %d)", st[1], st[2], st[3]);
        for (int i = 0; i < 10; i++)
            u.fwd[i] = 9e299, u.bwd[i] = 9e299;
        rc = merak_partition_blocks(&u, 2, 2, "autopipe", st, NULL, err, sizeof err);
        tap_ok(rc == 0 && st[0] == 0 && st[1] > 0 && st[1] < 10, "costs whose sums overflow still get a partition");
        tap_ok(merak_partition_blocks(&u, 2, 100000000, "autopipe", st, NULL, err, sizeof err) == MERAK_USAGE &&
                   strstr(err, "more than the 1F1B model's"), "a model too large to evaluate: %s", err);
        merak_blocks_free(&u);
    }
    tap_ok(merak_partition_blocks(&b, 7, 8, "uniform", starts, NULL, err, sizeof err) == MERAK_USAGE &&
               strstr(err, "7 stages, but the chain has 6 blocks"), "more stages than blocks: %s", err);
    b.bwd[3] = -1;
    tap_ok(merak_partition_blocks(&b, 2, 4, "autopipe", starts, NULL, err, sizeof err) == -1 &&
               strstr(err, "block 3: costs must be finite"), "a negative cost: %s", err);
    b.bwd[3] = 2;
    /* Two equal stages of F = 3, B = 6, M = 2: (M - 1) * 9 + 2 * 9 = 27. */
    double t = 0;
    int rc = merak_partition_blocks(&b, 2, 2, "uniform", starts, &t, err, sizeof err);
    tap_ok(rc == 0 && starts[1] == 3 && t == 27, "uniform halves 6 equal blocks; 1F1B of M = 2 takes 27 (got %g, "
           "start %d)", t, starts[1]);
    tap_ok(merak_partition_blocks(&b, 2, 1, "uniform", starts, &t, err, sizeof err) == MERAK_USAGE && strstr(err, "1f1b"),
           "the 1F1B prediction needs M >= stages: %s", err);
    merak_blocks_free(&b);
}

/* ------------------------------------------------------------------ the 1F1B model */

/* The partitioners' step prediction is the schedule simulator's makespan
 * of the 1f1b lists merak-train runs, on the stages' summed costs. */
static void test_model_is_simulator(void)
{
    int cases = 0, same = 0;
    char where[700] = "";
    for (int P = 1; P <= 9; P += 2)
        for (int M = P; M <= 3 * P + 1; M += P + 1)
            for (int rep = 0; rep < 4; rep++) {
                int n = P + 5, st[16];
                merak_blocks b;
                merak_blocks_alloc(&b, n);
                for (int i = 0; i < n; i++) {
                    b.fwd[i] = 0.2 + uniform01();
                    b.bwd[i] = b.fwd[i] * (1 + 2 * uniform01());
                    b.comm[i] = 0;
                }
                /* the same cost on every cut: the simulator charges one per sender */
                double link = rep & 1 ? 0.5 * uniform01() : 0;
                for (int i = 1; i < n; i++)
                    b.comm[i] = link;
                /* random non-empty stages */
                st[0] = 0;
                for (int s = 1; s < P; s++)
                    st[s] = st[s - 1] + 1 + (uniform01() < 0.3 && n - (st[s - 1] + 2) > P - s);
                merak_schedule sch[16];
                merak_sim_costs c[16];
                merak_sim_result r = {0};
                merak_schedule_spec sp = {MERAK_SCHEDULE_1F1B, P, M, NULL, 1};
                for (int s = 0; s < P; s++) {
                    int e = s + 1 < P ? st[s + 1] : n;
                    double f = 0, w = 0;
                    for (int i = st[s]; i < e; i++)
                        f += b.fwd[i], w += b.bwd[i];
                    c[s] = (merak_sim_costs){f, w, w / 2, 0, s + 1 < P ? b.comm[e] : s > 0 ? b.comm[st[s]] : 0};
                }
                double t = -1;
                int ok = merak_schedule_build_all(&sp, sch, err, sizeof err) == 0 &&
                         merak_schedule_simulate(sch, P, c, &r, err, sizeof err) == 0 &&
                         merak_partition_predict(&b, P, M, st, &t, err, sizeof err) == 0;
                if (ok)
                    for (int s = 0; s < P; s++)
                        merak_schedule_free(&sch[s]);
                cases++;
                if (ok && fabs(t - r.makespan) <= 1e-9 * r.makespan)
                    same++;
                else if (!where[0])
                    snprintf(where, sizeof where, " (first miss: P %d M %d comm %d: %g vs %g %s)", P, M, rep & 1, t,
                             r.makespan, ok ? "" : err);
                merak_blocks_free(&b);
            }
    tap_ok(same == cases, "the 1F1B model equals the simulator's 1f1b makespan in %d of %d cases%s", same, cases,
           where);
}

/* ------------------------------------------------------------------ brute force */

/* The best 1F1B step over every way to cut n blocks into P non-empty
 * stages, by enumerating the starts. */
static double brute_force(const merak_blocks *b, int P, int M, int *best)
{
    int s[16] = {0};
    double top = INFINITY;
    for (int k = 1; k < P; k++)
        s[k] = k;
    for (;;) {
        double t;
        if (merak_partition_predict(b, P, M, s, &t, err, sizeof err) < 0)
            return -1;
        if (t < top)
            top = t, memcpy(best, s, sizeof s);
        /* next combination of starts 1..P-1 among blocks 1..n-1 */
        int k = P - 1;
        while (k >= 1 && s[k] == b->n - (P - k))
            k--;
        if (k < 1)
            return top;
        s[k]++;
        for (int j = k + 1; j < P; j++)
            s[j] = s[j - 1] + 1;
    }
}

static void random_chain(merak_blocks *b, int n, int shape)
{
    merak_blocks_alloc(b, n);
    for (int i = 0; i < n; i++) {
        double f = shape == 0 || shape == 3 ? 0.5 + uniform01()  /* mild */
                 : shape == 1 ? (uniform01() < 0.2 ? 6 : 1) * (0.5 + uniform01())  /* a few heavy blocks */
                              : 0.05 + 3 * uniform01() * uniform01();               /* skewed */
        b->fwd[i] = f;
        b->bwd[i] = f * (1.5 + uniform01());                 /* backward 1.5x to 2.5x */
        b->params[i] = floor(1000 * uniform01());
        /* links: none, some (skewed), as slow as a block (link-bound) */
        b->comm[i] = i == 0 ? 0 : shape == 2 ? 0.3 * uniform01() : shape == 3 ? 1.5 * uniform01() : 0;
    }
}

/* On small chains AutoPipe finds the optimum of the same cost model (so
 * its search's bounds never cut the best partition off), and neither
 * uniform nor parameters ever beats it.  M = P + 1 is odd. */
static void test_brute_force(void)
{
    int cases = 0, exact = 0, never_worse = 0;
    double worst = 0;
    char where[160] = "";
    for (int shape = 0; shape < 4; shape++)
        for (int P = 2; P <= 5; P++)
            for (int n = P; n <= P + 7; n++)
                for (int Mk = 0; Mk <= 3; Mk++) {
                    merak_blocks b;
                    random_chain(&b, n, shape);
                    int M = Mk ? Mk * P : P + 1, got[16], want[16], u[16];
                    double ta, tb, tu, tp;
                    cases++;
                    tb = brute_force(&b, P, M, want);
                    if (merak_partition_blocks(&b, P, M, "autopipe", got, &ta, err, sizeof err) < 0 || tb < 0 ||
                        merak_partition_blocks(&b, P, M, "uniform", u, &tu, err, sizeof err) < 0 ||
                        merak_partition_blocks(&b, P, M, "parameters", u, &tp, err, sizeof err) < 0) {
                        tap_ok(0, "shape %d P %d n %d M %d: %s", shape, P, n, M, err);
                        merak_blocks_free(&b);
                        return;
                    }
                    exact += fabs(ta - tb) <= 1e-9 * tb;
                    never_worse += ta <= tu * (1 + 1e-12) && ta <= tp * (1 + 1e-12);
                    if ((ta - tb) / tb > worst) {
                        worst = (ta - tb) / tb;
                        snprintf(where, sizeof where, " (worst: shape %d P %d n %d M %d, %g vs %g)", shape, P, n, M,
                                 ta, tb);
                    }
                    merak_blocks_free(&b);
                }
    tap_ok(exact == cases, "autopipe matches the brute-force optimum in %d of %d small chains%s", exact, cases,
           where);
    tap_ok(never_worse == cases, "autopipe is never slower than uniform or parameters (%d of %d)", never_worse,
           cases);
}

/* ------------------------------------------------------------------ real graphs */

/* GPT-2 and LLaMA graphs timed on an H100 profile, and a chain with one
 * block far heavier than the rest: autopipe's predicted step is never
 * behind uniform's or parameters', and no stage is empty. */
static void test_real_graphs(void)
{
    merak_device d;
    if (merak_device_load("h100-80g", &d, err, sizeof err) < 0) {
        tap_ok(0, "h100-80g profile: %s", err);
        return;
    }
    const char *models[] = {"gpt2", "gpt2-medium", "llama2-7b"};
    for (int m = 0; m < 3; m++) {
        merak_graph *g = build(models[m], 4, 1024);
        merak_blocks b;
        int *first = NULL, ok = g != NULL, lines = 0;
        char detail[256] = "";
        if (ok && merak_graph_blocks(g, &b, &first, err, sizeof err) < 0)
            ok = 0;
        if (ok)
            merak_blocks_cost(g, first, g, &d, d.inter, 4.0, &b);
        for (int P = 2; ok && P <= 8; P *= 2) {
            int st[8];
            double t[3];
            const char *meth[] = {"uniform", "parameters", "autopipe"};
            for (int k = 0; ok && k < 3; k++) {
                ok &= merak_partition_blocks(&b, P, 2 * P, meth[k], st, &t[k], err, sizeof err) == 0;
                for (int s = 1; ok && s < P; s++)
                    ok &= st[s] > st[s - 1];
            }
            ok &= t[2] <= t[0] * (1 + 1e-12) && t[2] <= t[1] * (1 + 1e-12);
            if (lines++ < 3) {
                size_t k = strlen(detail);
                snprintf(detail + k, sizeof detail - k, " P=%d %.4g/%.4g/%.4g", P, t[0], t[1], t[2]);
            }
        }
        tap_ok(ok, "%s (%d blocks): autopipe <= uniform, parameters (s, uniform/parameters/autopipe):%s%s%s",
               models[m], ok ? b.n : 0, detail, ok ? "" : ": ", ok ? "" : err);
        if (first)
            merak_blocks_free(&b);
        free(first);
        merak_graph_destroy(g);
    }
    /* unbalanced: 30 light blocks with one 12x block among them */
    merak_blocks b;
    merak_blocks_alloc(&b, 31);
    for (int i = 0; i < 31; i++)
        b.fwd[i] = i == 9 ? 12 : 1, b.bwd[i] = 2 * b.fwd[i], b.params[i] = 1;
    int st[8];
    double t[3];
    int ok = 1;
    const char *meth[] = {"uniform", "parameters", "autopipe"};
    for (int k = 0; k < 3; k++)
        ok &= merak_partition_blocks(&b, 8, 16, meth[k], st, &t[k], err, sizeof err) == 0;
    tap_ok(ok && t[2] < t[0] && t[2] < t[1], "one heavy block: autopipe %g beats uniform %g and parameters %g", t[2],
           t[0], t[1]);
    merak_blocks_free(&b);
}

/* ------------------------------------------------------------------ Merak's costs */

/* Merak's AutoPipe planner on its own cost vectors: a GPT-2-like chain of
 * the embedding (no FLOPs), L attention and L MLP blocks and the LM head,
 * each costing what Merak's FLOPs profiler counts (its linear layers,
 * 2 x tokens x in x out: attention 8 s h^2, MLP 16 s h^2, head 2 s h V),
 * backward 3x forward, no transfer cost, M = 2P.  autopipe's default
 * budget must find the optimum an unlimited search finds (it did not on
 * the 98-block chain at 8 stages before the search's bound took in the
 * stages not yet cut: 0.45% slower, first cut at 13 blocks, not 14), and
 * never lose to the min-max partition AutoPipe starts from. */
static void test_merak_vectors(void)
{
    const struct { int L; double h; } gpt[] = {{12, 768}, {24, 1024}, {36, 1280}, {48, 1600}};
    const double s = 1024, V = 50257;
    int cases = 0, exact = 0, never_worse = 0;
    char xl[160] = "";
    for (int m = 0; m < 4; m++)
        for (int P = 2; P <= 8; P *= 2) {
            merak_blocks b;
            int n = 2 * gpt[m].L + 2, got[8], all[8], seed[8];
            double h = gpt[m].h, t_got, t_all, t_seed;
            if (merak_blocks_alloc(&b, n) < 0) {
                tap_ok(0, "out of memory");
                return;
            }
            for (int l = 0; l < gpt[m].L; l++)
                b.fwd[1 + 2 * l] = 8 * s * h * h / 1e6, b.fwd[2 + 2 * l] = 16 * s * h * h / 1e6;
            b.fwd[n - 1] = 2 * s * h * V / 1e6;
            for (int i = 0; i < n; i++)
                b.bwd[i] = 3 * b.fwd[i], b.params[i] = b.fwd[i];   /* parameters: the min-max seed's weights */
            int ok = merak_partition_blocks(&b, P, 2 * P, "autopipe", got, &t_got, err, sizeof err) == 0;
            ok = ok && merak_partition_blocks(&b, P, 2 * P, "parameters", seed, &t_seed, err, sizeof err) == 0;
            b.budget = 1e13;
            ok = ok && merak_partition_blocks(&b, P, 2 * P, "autopipe", all, &t_all, err, sizeof err) == 0;
            merak_blocks_free(&b);
            if (!ok) {
                tap_ok(0, "GPT-2 %d layers, %d stages: %s", gpt[m].L, P, err);
                return;
            }
            cases++;
            exact += t_got <= t_all * (1 + 1e-12);
            never_worse += t_got <= t_seed * (1 + 1e-12);
            if (n == 98 && P == 8) {
                int k = snprintf(xl, sizeof xl, "; 98 blocks, 8 stages: %.6g Mflop-times, starts", t_got);
                for (int i = 0; i < P && k > 0 && (size_t)k < sizeof xl; i++)
                    k += snprintf(xl + k, sizeof xl - (size_t)k, "%s%d", i ? "," : " ", got[i]);
            }
        }
    tap_ok(exact == cases && never_worse == cases,
           "Merak's cost vectors (GPT-2 12 to 48 layers, 2 to 8 stages): autopipe's default budget finds the "
           "optimum in %d of %d, never behind the min-max start in %d%s", exact, cases, never_worse, xl);
}

/* ------------------------------------------------------------------ profiles */

/* The built-in table is data/devices.json byte for byte; MERAK_DEVICES
 * overrides its entries by name and adds to them. */
static void test_profile_tables(void)
{
    merak_device d;
    const char *src = getenv("MERAK_SRCDIR");
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/data/devices.json", src ? src : ".");
    FILE *f = fopen(path, "rb");
    size_t n = 0;
    if (f && (text = calloc(1, 1 << 20)))
        n = fread(text, 1, (1 << 20) - 1, f);
    if (f)
        fclose(f);
    tap_ok(n > 0 && strcmp(text, merak_devices_builtin) == 0, "the built-in profiles are %s (%zu bytes)", path, n);
    free(text);

    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/merak-test-devices-%d.json", dir, (int)getpid());
    f = fopen(path, "w");
    fputs("{\"devices\": {\"cpu\": {\"memory_gb\": 3, \"matmul_tflops\": 0.5, \"memory_gbps\": 10, "
          "\"intra_node_gbps\": 5, \"inter_node_gbps\": 1, \"latency_us\": 1},\n"
          "\"tpu9\": {\"memory_gb\": 32, \"matmul_tflops\": 100, \"memory_gbps\": 900, "
          "\"intra_node_gbps\": 50, \"inter_node_gbps\": 10, \"latency_us\": 2}}}", f);
    fclose(f);
    setenv("MERAK_DEVICES", path, 1);
    int rc = merak_device_load("cpu", &d, err, sizeof err);
    tap_ok(rc == 0 && d.memory == 3e9, "MERAK_DEVICES overrides a built-in profile (cpu: %g GB)", d.memory / 1e9);
    tap_ok(merak_device_load("tpu9", &d, err, sizeof err) == 0 && d.matmul == 100e12, "MERAK_DEVICES adds a profile");
    tap_ok(merak_device_load("h100-80g", &d, err, sizeof err) == 0 && d.matmul == 400e12,
           "a profile MERAK_DEVICES lacks comes from below it");
    rc = merak_device_load("tpu10", &d, err, sizeof err);
    tap_ok(rc == MERAK_USAGE && strstr(err, "(MERAK_DEVICES)") && strstr(err, "built-in") && strstr(err, "(known: cpu, tpu9, a100-80g, h100-80g, h200)"),
           "an unknown name lists every table and every profile once: %s", err);
    f = fopen(path, "w");
    fputs("{\"devices\": [1]}", f);
    fclose(f);
    tap_ok(merak_device_load("cpu", &d, err, sizeof err) == -1 && strstr(err, "no \"devices\" object"),
           "a bad MERAK_DEVICES file is an error, not skipped: %s", err);
    remove(path);
    tap_ok(merak_device_load("cpu", &d, err, sizeof err) == -1 && strstr(err, "cannot open"),
           "a missing MERAK_DEVICES file is an error: %s", err);
    unsetenv("MERAK_DEVICES");
}

/* The job size --auto plans for, from each launcher's variables. */
static void test_launch_size(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_NUM_TASKS",
                                 "SLURM_STEP_TASKS_PER_NODE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"};
    enum { NV = sizeof vars / sizeof *vars };
    static const struct {
        const char *set[NV];   /* a value per variable, NULL: unset */
        int rc, world, per_node;
        const char *why;
    } cases[] = {
        {{NULL}, 0, 1, 1, "not launched: one rank"},
        {{"8", "4"}, 0, 8, 4, "mpirun: 8 ranks, 4 on this node"},
        {{"8"}, 0, 8, 8, "mpirun without a local size: one node"},
        {{"8", "3"}, -1, 0, 0, "mpirun: 3 here of 8 cannot be the same on every node"},
        {{"x", "4"}, -1, 0, 0, "mpirun: a size that is no number"},
        {{NULL, NULL, "16", "4(x4)", "0"}, 0, 16, 4, "srun with PMIx: 4(x4)"},
        {{NULL, NULL, "8", "4,4", NULL, "3"}, 0, 8, 4, "srun with PMI-2: 4,4"},
        {{NULL, NULL, "6", "4,2", "0"}, -1, 0, 0, "srun: 4 and 2 tasks on two nodes"},
        {{NULL, NULL, "8", "4(y2)", "0"}, -1, 0, 0, "srun: a malformed tasks-per-node"},
        {{NULL, NULL, "8", "4(x2)"}, 0, 1, 1, "srun's variables in a batch script without MPI: one rank"},
        {{NULL, NULL, NULL, NULL, NULL, "0", "6", "2"}, 0, 6, 2, "a PMI launcher: 6 ranks, 2 here"},
        {{NULL, NULL, NULL, NULL, "0"}, -1, 0, 0, "PMIx without a size: refused, not guessed"},
    };
    char *saved[NV];
    for (int v = 0; v < NV; v++) {
        const char *s = getenv(vars[v]);
        saved[v] = s ? strdup(s) : NULL;
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int v = 0; v < NV; v++)
            cases[i].set[v] ? setenv(vars[v], cases[i].set[v], 1) : unsetenv(vars[v]);
        int world = 0, per_node = 0;
        int rc = merak_launch_size(&world, &per_node, err, sizeof err);
        tap_ok(rc == cases[i].rc && (rc < 0 ? err[0] != 0 : world == cases[i].world && per_node == cases[i].per_node),
               "launch size, %s: %d, %d x %d%s%s", cases[i].why, rc, world, per_node, rc ? ": " : "", rc ? err : "");
    }
    for (int v = 0; v < NV; v++) {
        saved[v] ? setenv(vars[v], saved[v], 1) : unsetenv(vars[v]);
        free(saved[v]);
    }
}

static void test_profiles(void)
{
    merak_device d;
    tap_ok(merak_device_load("h100-80g", &d, err, sizeof err) == 0 && d.memory == 80e9 && d.matmul == 400e12 &&
               fabs(d.latency - 8e-6) < 1e-15 && !strcmp(d.backend, "cuda"), "h100-80g: 80 GB, 400 TFLOP/s, 8 us, cuda");
    tap_ok(merak_device_load("tpu9", &d, err, sizeof err) == MERAK_USAGE && strstr(err, "device profile 'tpu9' is not in") &&
               strstr(err, "a100-80g"), "an unknown device lists the known ones: %s", err);
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/merak-test-profile-%d.json", dir, (int)getpid());
    struct { const char *text, *want; } bad[] = {
        {"{\"memory_gb\": 8}", "matmul_tflops must be a positive number"},
        {"{\"memory_gb\": 8, \"matmul_tflops\": -1}", "matmul_tflops must be a positive number"},
        {"{\"devices\": {\"a\": {}, \"b\": {}}}", "2 devices; give one of them by name"},
        {"{\"memory_gb\": ", "merak-test-profile"},
        {"{\"memory_gb\": 2, \"matmul_tflops\": 0.5, \"memory_gbps\": 10, "
         "\"intra_node_gbps\": 5, \"inter_node_gbps\": 1, \"latency_us\": 0, \"backend\": 7}", "backend must be a backend's name"},
        {"{\"memory_gb\": 2, \"matmul_tflops\": 0.5, \"memory_gbps\": 10, \"intra_node_gbps\": 5, "
         "\"inter_node_gbps\": 1, \"latency_us\": 0, \"backend\": \"a\\\"b\"}", "backend must be a backend's name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i].text, f);
        fclose(f);
        tap_ok(merak_device_load(path, &d, err, sizeof err) == -1 && strstr(err, bad[i].want),
               "profile file %zu is refused: %s", i, err);
    }
    FILE *f = fopen(path, "w");
    fputs("{\"memory_gb\": 2, \"matmul_tflops\": 0.5, \"memory_gbps\": 10, \"intra_node_gbps\": 5, "
          "\"inter_node_gbps\": 1, \"latency_us\": 0}", f);
    fclose(f);
    int rc = merak_device_load(path, &d, err, sizeof err);
    tap_ok(rc == 0 && d.matmul == 0.5e12 && d.latency == 0 && !strcmp(d.backend, "cpu"),
           "a profile file of one device loads, its backend cpu when it names none%s%s", rc ? ": " : "", rc ? err : "");
    remove(path);

    /* A linear op's forward is its FLOPs at the matrix rate (compute-bound
     * here), its backward twice that. */
    merak_graph *g = build("gpt2", 4, 256);
    int lin = -1;
    for (int i = 0; g && i < merak_graph_num_ops(g) && lin < 0; i++)
        if (g->ops[i].type == MERAK_OP_LINEAR)
            lin = i;
    double fw = 0, bw = 0;
    if (lin >= 0)
        merak_op_time(g, lin, &d, &fw, &bw);
    tap_ok(lin >= 0 && fabs(fw - g->ops[lin].flops / d.matmul) < 1e-12 * fw && bw == 2 * fw,
           "a linear op: forward %.3g s = FLOPs / rate, backward twice", fw);
    merak_graph_destroy(g);
}

/* Calibration times every op kind of tiny GPT-2 on the CPU kernels, in
 * fp32 then in bf16 (each into its own table; fp32's also sets the matrix
 * and memory rates, bf16's leaves them); the roofline's peaks and work;
 * the profile written and read back times ops by the measured rates of
 * the plan's arithmetic, else fp32's. */
static void test_calibrate(void)
{
    merak_graph *g = build("tiny-gpt2", 2, 16);
    merak_device d, back;
    if (merak_device_load("cpu", &d, err, sizeof err) < 0) {
        tap_ok(0, "the cpu profile loads: %s", err);
        merak_graph_destroy(g);
        return;
    }
    merak_kernels_cpu_set_threads(1);
    merak_roofline rl;
    memset(&rl, 0, sizeof rl);
    const double *f32 = d.op_fwd[MERAK_RATES_FP32], *b32 = d.op_bwd[MERAK_RATES_FP32];
    const double *f16 = d.op_fwd[MERAK_RATES_BF16];
    int rc = g ? merak_device_calibrate(g, merak_kernels_cpu(), 1, MERAK_RATES_FP32, 0, &d, &rl, err, sizeof err) : -1;
    tap_ok(rc == 0 && f32[MERAK_OP_LINEAR] > 0 && b32[MERAK_OP_ATTENTION] > 0 && f32[MERAK_OP_CROSS_ENTROPY] > 0 &&
               d.matmul == f32[MERAK_OP_LINEAR] && d.mem_bw > 0 && f16[MERAK_OP_LINEAR] == 0,
           "calibration measures linear %.3g GFLOP/s, attention backward %.3g GFLOP/s, memory %.3g GB/s "
           "(fp32's table only): %s", f32[MERAK_OP_LINEAR] / 1e9, b32[MERAK_OP_ATTENTION] / 1e9, d.mem_bw / 1e9,
           rc ? err : "ok");
    /* the roofline: the linear layers' FLOPs, the norms' bytes at 4 bytes
     * an element, the backward's work twice the forward's */
    double flops = 0, ln_bytes = 0;
    for (int i = 0; g && i < g->nops; i++)
        flops += g->ops[i].type == MERAK_OP_LINEAR ? g->ops[i].flops : 0,
            ln_bytes += g->ops[i].type == MERAK_OP_LAYERNORM ? g->ops[i].bytes : 0;
    tap_ok(rc == 0 && rl.product > 0 && rl.copy > 0 && rl.product_n == 1024 && rl.flops[MERAK_OP_LINEAR] &&
               !rl.flops[MERAK_OP_LAYERNORM] && rl.fwd_work[MERAK_OP_LINEAR] == flops &&
               rl.bwd_work[MERAK_OP_LINEAR] == 2 * flops && rl.fwd_work[MERAK_OP_LAYERNORM] == ln_bytes &&
               rl.fwd_s[MERAK_OP_LINEAR] > 0 && rl.bwd_s[MERAK_OP_GELU] > 0,
           "the roofline: product %.3g GFLOP/s, copy %.3g GB/s; linear %.3g FLOP forward, layernorm %.3g bytes",
           rl.product / 1e9, rl.copy / 1e9, rl.fwd_work[MERAK_OP_LINEAR], rl.fwd_work[MERAK_OP_LAYERNORM]);
    const double matmul = d.matmul, lin32 = f32[MERAK_OP_LINEAR];
    rc = g ? merak_device_calibrate(g, merak_kernels_cpu(), 1, MERAK_RATES_BF16, 0, &d, &rl, err, sizeof err) : -1;
    tap_ok(rc == 0 && f16[MERAK_OP_LINEAR] > 0 && d.op_bwd[MERAK_RATES_BF16][MERAK_OP_ATTENTION] > 0 &&
               f32[MERAK_OP_LINEAR] == lin32 && d.matmul == matmul &&
               rl.fwd_work[MERAK_OP_LAYERNORM] == ln_bytes / 2,
           "a bf16 calibration fills bf16's table (linear %.3g GFLOP/s), keeps fp32's and the matrix rate, and "
           "counts bytes at 2 an element: %s", f16[MERAK_OP_LINEAR] / 1e9, rc ? err : "ok");
    char path[512];
    snprintf(path, sizeof path, "%s/merak-test-calib-%d.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    FILE *f = fopen(path, "w");
    int wrote = f && merak_device_write(&d, f) == 0;
    if (f)
        fclose(f);
    int same = wrote && merak_device_load(path, &back, err, sizeof err) == 0;
    for (int r = 0; same && r < MERAK_RATES_COUNT_; r++)
        for (int t = 0; same && t < MERAK_OP_COUNT_; t++)
            same &= back.op_fwd[r][t] == d.op_fwd[r][t] && back.op_bwd[r][t] == d.op_bwd[r][t];
    same &= same && !strcmp(back.backend, d.backend[0] ? d.backend : "cpu") && back.rates == MERAK_RATES_FP32;
    /* a measured rate in TFLOP/s may not come back to the last bit (d /
     * 1e12 * 1e12); what was read from a file does (fuzz/fuzz_device.c) */
    tap_ok(same && fabs(back.matmul - d.matmul) <= 1e-15 * d.matmul, "the profile reads back as written: %s",
           same ? "ok" : err);
    remove(path);
    int lin = -1;
    for (int i = 0; g && i < g->nops && lin < 0; i++)
        if (g->ops[i].type == MERAK_OP_LINEAR)
            lin = i;
    double fw = 0, bw = 0, fw16 = 0, bw16 = 0;
    if (lin >= 0) {
        merak_op_time(g, lin, &d, &fw, &bw);
        d.rates = MERAK_RATES_BF16;
        merak_op_time(g, lin, &d, &fw16, &bw16);
    }
    tap_ok(lin >= 0 && fabs(fw - g->ops[lin].flops / f32[MERAK_OP_LINEAR]) <= 1e-12 * fw &&
               fabs(bw - g->ops[lin].flops / b32[MERAK_OP_LINEAR]) <= 1e-12 * bw &&
               fabs(fw16 - g->ops[lin].flops / f16[MERAK_OP_LINEAR]) <= 1e-12 * fw16 &&
               fabs(bw16 - g->ops[lin].flops / d.op_bwd[MERAK_RATES_BF16][MERAK_OP_LINEAR]) <= 1e-12 * bw16,
           "a linear op is timed by the measured rates of the plan's arithmetic: fp32 %.3g s + %.3g s, bf16 %.3g s "
           "+ %.3g s", fw, bw, fw16, bw16);
    /* a kind bf16's table lacks: fp32's rate */
    d.op_fwd[MERAK_RATES_BF16][MERAK_OP_LINEAR] = d.op_bwd[MERAK_RATES_BF16][MERAK_OP_LINEAR] = 0;
    if (lin >= 0)
        merak_op_time(g, lin, &d, &fw16, &bw16);
    tap_ok(lin >= 0 && fw16 == fw && bw16 == bw, "a kind bf16's table lacks is timed by fp32's rate");
    merak_graph_destroy(g);
}

/* A device slow_s behind each mark (mark i reached i * slow_s after mark 0). */
static int slow_n;
static double slow_s;
static int slow_mark(void) { return slow_n++; }
static void slow_clear(void) { slow_n = 0; }
static double slow_seconds(int a, int b)
{
    return a < 0 || b < 0 || a >= slow_n || b >= slow_n ? -1 : (b - a) * slow_s;
}

/* A backend with marks times each op by them, forward and backward,
 * nothing else (the CPU's kernels under a device clock of 1 ms a mark);
 * a device far behind the host never catches up with it, the CPU (whose
 * device is the host) always has. */
static void test_calibrate_marks(void)
{
    merak_graph *g = build("tiny-llama", 2, 16);
    merak_device d;
    merak_kernels slow = *merak_kernels_cpu();
    slow.mark = slow_mark, slow.mark_seconds = slow_seconds, slow.marks_clear = slow_clear;
    merak_roofline rl;
    memset(&rl, 0, sizeof rl);
    slow_s = 1e-3;
    int rc = !g || merak_device_load("cpu", &d, err, sizeof err) < 0 ? -1
             : merak_device_calibrate(g, &slow, 2, MERAK_RATES_FP32, 0, &d, &rl, err, sizeof err);
    int count[MERAK_OP_COUNT_] = {0}, bad = 0;
    for (int i = 0; g && i < g->nops; i++)
        count[g->ops[i].type]++;
    for (int t = 0; t < MERAK_OP_COUNT_; t++)
        bad += fabs(rl.fwd_s[t] - count[t] * 1e-3) > 1e-12 || fabs(rl.bwd_s[t] - count[t] * 1e-3) > 1e-12;
    tap_ok(rc == 0 && !bad && count[MERAK_OP_RMSNORM] > 0,
           "a calibration on a backend with marks times each op by them: %d rmsnorm ops take %.6f s forward, "
           "%.6f s backward: %s", count[MERAK_OP_RMSNORM], rl.fwd_s[MERAK_OP_RMSNORM], rl.bwd_s[MERAK_OP_RMSNORM],
           rc ? err : "ok");
    /* each op's start and end in the forward and the backward of 2 passes */
    const size_t bounds = g ? 8 * (size_t)g->nops : 0;
    slow_s = 1.0;
    rc = g ? merak_device_calibrate(g, &slow, 2, MERAK_RATES_FP32, 0, &d, &rl, err, sizeof err) : -1;
    tap_ok(rc == 0 && rl.lag_bounds == bounds && rl.lag_caught == 0 && rl.lag_mean > 1.0,
           "a device far behind the host never caught up at %zu of %zu op boundaries (%.3g s behind on average)",
           rl.lag_caught, rl.lag_bounds, rl.lag_mean);
    rc = g ? merak_device_calibrate(g, merak_kernels_cpu(), 2, MERAK_RATES_FP32, 0, &d, &rl, err, sizeof err) : -1;
    tap_ok(rc == 0 && rl.lag_bounds == bounds && rl.lag_caught == bounds && rl.lag_mean < rl.lag_threshold,
           "the CPU, its own device, has caught up at every op boundary (%zu of %zu)", rl.lag_caught, rl.lag_bounds);
    merak_graph_destroy(g);
}

/* merak_layout_plan's lower bound never exceeds the simulated step (so
 * --auto may skip a layout by it), for every schedule, recomputation
 * policy and ZeRO setting over small layouts of both architectures, on a
 * device whose links cost time; a layout skipped by skip_above reports
 * its bound, and its memory is the simulated one's. */
static void test_layout_bound(void)
{
    merak_device d;
    if (merak_device_load("cpu", &d, err, sizeof err) < 0) {
        tap_ok(0, "the cpu profile loads: %s", err);
        return;
    }
    static const char *models[] = {"tiny-gpt2", "tiny-llama"}, *rcs[] = {"none", "full", "stage-aware"};
    int cases = 0, below = 0, skipped_ok = 0, failed = 0;
    double worst = 0;
    for (int mi = 0; mi < 2; mi++) {
        merak_graph *g = build(models[mi], 2, 16);
        for (int tp = 1; g && tp <= 2; tp++)
            for (int pp = 1; pp <= 4; pp++)
                for (int dp = 1; dp <= 2; dp++)
                    for (int k = 0; k < MERAK_SCHEDULE_COUNT_; k++)
                        for (int M = pp; M <= 2 * pp + 1; M += pp + 1)
                            for (int ri = 0; ri < 3; ri++) {
                                merak_layout L = {.dp = dp, .tp = tp, .pp = pp, .gpus_per_node = 2,
                                                  .schedule = (merak_schedule_kind)k, .micro_batches = M,
                                                  .zero = dp > 1 && ri == 1, .partition = "autopipe"};
                                merak_recompute_parse(rcs[ri], &L.recompute, NULL, 0);
                                merak_layout_result r, q;
                                int rc = merak_layout_plan(g, &L, &d, &r, err, sizeof err);
                                if (rc == MERAK_USAGE)
                                    continue;   /* interleaved on one stage, and the like */
                                if (rc < 0) {
                                    failed++;
                                    continue;
                                }
                                cases++;
                                below += r.simulated && r.bound <= r.step * (1 + 1e-12);
                                if (r.bound / r.step > worst)
                                    worst = r.bound / r.step;
                                L.skip_above = r.bound;
                                if (merak_layout_plan(g, &L, &d, &q, err, sizeof err) == 0) {
                                    skipped_ok += !q.simulated && q.step == r.bound &&
                                                  q.stage[q.worst].mem_total == r.stage[r.worst].mem_total;
                                    merak_layout_result_free(&q);
                                }
                                merak_layout_result_free(&r);
                            }
        merak_graph_destroy(g);
    }
    tap_ok(failed == 0 && cases > 300 && below == cases,
           "the layout bound is below the simulated step in %d of %d layouts (largest bound/step %.3f)%s%s", below,
           cases, worst, failed ? ": " : "", failed ? err : "");
    tap_ok(skipped_ok == cases, "skip_above reports the bound and the same memory without simulating (%d of %d)",
           skipped_ok, cases);
}

int main(void)
{
    unsetenv("MERAK_DEVICES");   /* the built-in and installed tables only */
    test_graph_partition();
    test_tied_ends();
    test_methods();
    test_model_is_simulator();
    test_brute_force();
    test_merak_vectors();
    test_real_graphs();
    test_profiles();
    test_profile_tables();
    test_launch_size();
    test_calibrate();
    test_calibrate_marks();
    test_layout_bound();
    return tap_done();
}
