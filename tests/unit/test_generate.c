/*
 * test_generate.c - the sampler (runtime/train/generate.h): greedy picks,
 * the distributions that temperature, top-k and top-p give (frequencies
 * of seeded draws against the exact probabilities, within 5 standard
 * deviations), the top-k selection against a full sort on a
 * large vocabulary with ties, top-p over a large vocabulary in each of the
 * sampler's three paths, and reproducibility by seed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "tap.h"

/* Draws per distribution: small vocabularies, and the large ones (each
 * draw there costs a pass over the vocabulary, ASan builds run the suite,
 * and the frequencies that matter are still thousands of draws). */
enum { DRAWS = 200000, DRAWS_LARGE = 40000 };

/* Draws n tokens; freq[V] gets their frequencies.  0, or -1 if a draw is
 * out of range. */
static int draw_n(const merak_sampling *o, const float *logits, int V, double *freq, int n)
{
    merak_sampler *s = merak_sampler_create(o, V);
    if (!s)
        return -1;
    memset(freq, 0, (size_t)V * sizeof *freq);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int32_t t = merak_sampler_next(s, logits);
        if (t < 0 || t >= V)
            rc = -1;
        else
            freq[t] += 1.0 / n;
    }
    merak_sampler_free(s);
    return rc;
}

static int draw(const merak_sampling *o, const float *logits, int V, double *freq)
{
    return draw_n(o, logits, V, freq, DRAWS);
}

/* The largest |freq - want| in standard deviations of a frequency of n
 * draws (a zero probability must never be drawn: infinity if it was). */
static double worst_sigma_n(const double *freq, const double *want, int V, int n)
{
    double w = 0;
    for (int i = 0; i < V; i++) {
        double sd = sqrt(want[i] * (1 - want[i]) / n);
        double z = sd > 0 ? fabs(freq[i] - want[i]) / sd : (freq[i] > 0 ? INFINITY : 0);
        w = z > w ? z : w;
    }
    return w;
}

static double worst_sigma(const double *freq, const double *want, int V)
{
    return worst_sigma_n(freq, want, V, DRAWS);
}

/* The same over at most 64 bins of consecutive ranks of the first n ids of
 * order[] (most likely first): thousands of tokens of a few draws each
 * are judged by the mass of each stretch of ranks, where 5 sd means
 * something. */
static double worst_sigma_ranks(const double *freq, const double *want, const int *order, int n, int draws)
{
    const int nb = n < 64 ? n : 64;
    double w = 0;
    for (int b = 0; b < nb; b++) {
        double f = 0, p = 0;
        for (int r = (int)((long)b * n / nb); r < (int)((long)(b + 1) * n / nb); r++)
            f += freq[order[r]], p += want[order[r]];
        double z = fabs(f - p) / sqrt(p * (1 - p) / draws);
        w = z > w ? z : w;
    }
    return w;
}

/* softmax(logits / t) over the ids keep[] says (NULL: all) into p. */
static void softmax(const float *logits, int V, float t, const int *keep, double *p)
{
    double top = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        if (!keep || keep[i])
            top = fmax(top, logits[i] / t);
    for (int i = 0; i < V; i++)
        sum += p[i] = !keep || keep[i] ? exp(logits[i] / t - top) : 0;
    for (int i = 0; i < V; i++)
        p[i] /= sum;
}

static void test_greedy(void)
{
    const float l[5] = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f};
    merak_sampling o = {0.0f, 0, 1.0f, 1};
    merak_sampler *s = merak_sampler_create(&o, 5);
    int32_t a = s ? merak_sampler_next(s, l) : -1, b = s ? merak_sampler_next(s, l) : -1;
    tap_ok(a == 1 && b == 1, "temperature 0 takes the largest logit, the lower id of two equal ones (got %d, %d)",
           a, b);
    merak_sampler_free(s);
    /* a temperature at which the logits over it overflow: greedy, its limit */
    const float big[5] = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f};
    o.temperature = 1e-45f;
    s = merak_sampler_create(&o, 5);
    a = s ? merak_sampler_next(s, big) : -1;
    o.top_k = 2, o.top_p = 0.5f;
    merak_sampler *s2 = merak_sampler_create(&o, 5);
    b = s2 ? merak_sampler_next(s2, big) : -1;
    tap_ok(a == 3 && b == 3, "temperature 1e-45 (logits over it overflow) takes the largest logit, as 0 does "
           "(got %d, %d)", a, b);
    merak_sampler_free(s), merak_sampler_free(s2);
}

static void test_distributions(void)
{
    const float l[5] = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f};
    double f[5], want[5];
    const float temps[2] = {1.0f, 0.5f};
    for (int k = 0; k < 2; k++) {
        merak_sampling o = {temps[k], 0, 1.0f, 11};
        softmax(l, 5, temps[k], NULL, want);
        int rc = draw(&o, l, 5, f);
        double z = worst_sigma(f, want, 5);
        tap_ok(rc == 0 && z < 5, "temperature %g: frequencies %.4f %.4f %.4f %.4f %.4f, softmax %.4f %.4f %.4f %.4f "
               "%.4f (worst %.2f sd)", temps[k], f[0], f[1], f[2], f[3], f[4], want[0], want[1], want[2], want[3],
               want[4], z);
    }
    /* top-k 2: the two equal largest, half each */
    merak_sampling o = {1.0f, 2, 1.0f, 12};
    int keep2[5] = {0, 1, 0, 1, 0};
    softmax(l, 5, 1.0f, keep2, want);
    int rc = draw(&o, l, 5, f);
    tap_ok(rc == 0 && worst_sigma(f, want, 5) < 5, "top-k 2 draws ids 1 and 3 only, half each (%.4f, %.4f; others "
           "%.4f %.4f %.4f)", f[1], f[3], f[0], f[2], f[4]);
    /* top-p: probabilities 0.5, 0.3, 0.15, 0.05 (most likely first); 0.7
     * keeps the first two (0.8 >= 0.7), 0.45 the first alone */
    const double p4[4] = {0.5, 0.3, 0.15, 0.05};
    float lp[4];
    for (int i = 0; i < 4; i++)
        lp[i] = (float)log(p4[i]);
    double g[4], w4[4] = {0.625, 0.375, 0, 0};
    merak_sampling op = {1.0f, 0, 0.7f, 13};
    rc = draw(&op, lp, 4, g);
    tap_ok(rc == 0 && worst_sigma(g, w4, 4) < 5,
           "top-p 0.7 keeps the two most likely, 0.625 and 0.375 (%.4f %.4f %.4f %.4f)", g[0], g[1], g[2], g[3]);
    op.top_p = 0.45f;
    rc = draw(&op, lp, 4, g);
    tap_ok(rc == 0 && fabs(g[0] - 1.0) < 1e-9, "top-p 0.45 keeps the most likely alone (%.4f)", g[0]);
    /* top-k then top-p: k 3 leaves 0.5, 0.3, 0.15 (sum 0.95); p 0.8 of that
     * (0.76) needs the first two */
    merak_sampling okp = {1.0f, 3, 0.8f, 14};
    rc = draw(&okp, lp, 4, g);
    tap_ok(rc == 0 && worst_sigma(g, w4, 4) < 5, "top-k 3 then top-p 0.8 keeps the two most likely (%.4f %.4f %.4f "
           "%.4f)", g[0], g[1], g[2], g[3]);
}

/* Top-k on a vocabulary of 50257 with many equal logits: every draw is one
 * of the k that a full sort (ties by id) puts first, at softmax's odds. */
static void test_top_k_selection(void)
{
    enum { V = 50257, K = 40 };
    float *l = malloc(V * sizeof *l);
    double *f = malloc(V * sizeof *f), *want = malloc(V * sizeof *want);
    int *keep = calloc(V, sizeof *keep);
    if (!l || !f || !want || !keep) {
        tap_ok(0, "top-k selection: out of memory");
        return;
    }
    uint64_t x = 7;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        l[i] = (float)((x >> 40) % 64) * 0.125f;   /* 64 values: many ties */
    }
    /* the true top K: the largest logits, the lower ids among equals */
    for (int n = 0; n < K; n++) {
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!keep[i] && (best < 0 || l[i] > l[best]))
                best = i;
        keep[best] = 1;
    }
    merak_sampling o = {1.0f, K, 1.0f, 15};
    softmax(l, V, 1.0f, keep, want);
    int rc = draw_n(&o, l, V, f, DRAWS_LARGE);
    int outside = 0;
    for (int i = 0; i < V; i++)
        outside += !keep[i] && f[i] > 0;
    double z = worst_sigma_n(f, want, V, DRAWS_LARGE);
    tap_ok(rc == 0 && outside == 0 && z < 5, "top-k %d of %d with ties: every draw among the top %d (%d outside), "
           "worst %.2f sd from softmax", K, V, K, outside, z);
    free(l), free(f), free(want), free(keep);
}

/* For sorting ids by logit, most likely first, equal logits by id. */
static const float *g_logits;
static int by_logit_desc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (g_logits[x] != g_logits[y])
        return g_logits[x] > g_logits[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* Top-p on a vocabulary of V = 5000 (past the 1024 the sampler sorts
 * first) in three shapes: a peaked distribution whose nucleus is a few
 * dozen tokens, one whose nucleus of 1362 needs more than the first 1024,
 * and a flat one.  Draws must follow the nucleus a full sort gives. */
static void test_top_p_large(void)
{
    enum { V = 5000 };
    float *l = malloc(V * sizeof *l);
    double *f = malloc(V * sizeof *f), *want = malloc(V * sizeof *want);
    int *keep = malloc(V * sizeof *keep), *order = malloc(V * sizeof *order);
    if (!l || !f || !want || !keep || !order) {
        tap_ok(0, "top-p: out of memory");
        return;
    }
    const char *shape[3] = {"peaked", "a nucleus past 1024", "flat"};
    const float top_p[3] = {0.9f, 0.85f, 0.9f};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < V; i++) {
            int r = (int)((i * 2654435761u) % V);   /* ids not in logit order */
            l[i] = k == 0 ? -0.05f * (float)r : k == 1 ? (r < 1000 ? 0.0f : -3.0f) : 0.1f * (float)sin(r * 0.7);
            order[i] = i;
        }
        g_logits = l;
        qsort(order, V, sizeof *order, by_logit_desc);
        double total = 0, cum = 0;
        for (int i = 0; i < V; i++)
            total += exp(l[i] - l[order[0]]);
        memset(keep, 0, V * sizeof *keep);
        int n = 0;
        while (n < V) {
            cum += exp(l[order[n]] - l[order[0]]);
            keep[order[n++]] = 1;
            if (cum >= top_p[k] * total)
                break;
        }
        softmax(l, V, 1.0f, keep, want);
        merak_sampling o = {1.0f, 0, top_p[k], 16 + (uint64_t)k};
        int rc = draw_n(&o, l, V, f, DRAWS_LARGE);
        int outside = 0;
        for (int i = 0; i < V; i++)
            outside += !keep[i] && f[i] > 0;
        double z = worst_sigma_ranks(f, want, order, n, DRAWS_LARGE);
        tap_ok(rc == 0 && outside == 0 && z < 5, "top-p %g on %d tokens, %s: nucleus of %d, %d draws outside it, "
               "worst %.2f sd over %d stretches of ranks", top_p[k], V, shape[k], n, outside, z, n < 64 ? n : 64);
    }
    free(l), free(f), free(want), free(keep), free(order);
}

static void test_seeds(void)
{
    enum { V = 300, N = 64 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)sin(i * 0.37) * 3.0f;
    int32_t a[N], b[N], c[N];
    const merak_sampling opts[3] = {{1.0f, 0, 1.0f, 5}, {0.8f, 20, 1.0f, 5}, {1.2f, 0, 0.9f, 5}};
    for (int k = 0; k < 3; k++) {
        merak_sampling o = opts[k], other = opts[k];
        other.seed = 6;
        merak_sampler *s1 = merak_sampler_create(&o, V), *s2 = merak_sampler_create(&o, V),
                      *s3 = merak_sampler_create(&other, V);
        for (int i = 0; i < N && s1 && s2 && s3; i++)
            a[i] = merak_sampler_next(s1, l), b[i] = merak_sampler_next(s2, l), c[i] = merak_sampler_next(s3, l);
        tap_ok(s1 && s2 && s3 && !memcmp(a, b, sizeof a) && memcmp(a, c, sizeof a),
               "temperature %g top-k %d top-p %g: seed 5 twice gives the same %d tokens, seed 6 others",
               o.temperature, o.top_k, o.top_p, N);
        merak_sampler_free(s1), merak_sampler_free(s2), merak_sampler_free(s3);
    }
}

int main(void)
{
    test_greedy();
    test_distributions();
    test_top_k_selection();
    test_top_p_large();
    test_seeds();
    return tap_done();
}
