/*
 * test_graph.c - the model graph, the executor and the training pieces
 * around it: parameter counts of real models, shape errors, memory of huge
 * graphs, whole-model gradients against finite differences, split and
 * multi-slot backward, layout-independent initialisation, LR schedules.
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "merak/merak.h"
#include "graph/ops.h"
#include "pipe/exec.h"
#include "preset.h"
#include "tap.h"
#include "train.h"


static void test_param_counts(void)
{
    /* Published sizes: GPT-2 small 124,439,808 (tied head, with wpe);
     * LLaMA-2 7B 6,738,415,616; LLaMA-2 70B 68,976,648,192. */
    struct { const char *name; int64_t params; } known[] = {
        {"gpt2", 124439808LL}, {"llama2-7b", 6738415616LL}, {"llama2-70b", 68976648192LL},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        merak_graph *g = build(known[i].name, 1, 16);
        tap_ok(g && merak_graph_param_elems(g) == known[i].params, "%s has %lld parameters (got %lld)",
               known[i].name, (long long)known[i].params, g ? (long long)merak_graph_param_elems(g) : -1LL);
        merak_graph_destroy(g);
    }
}

static void test_no_parameter_memory(void)
{
    /* A GPT-3 175B-sized graph is shapes only: a few MB at most. */
    merak_model_config c;
    merak_model_preset("gpt3-13b", &c);
    c.hidden = 12288, c.n_head = 96, c.n_kv_head = 96, c.n_layer = 96, c.ffn_hidden = 4 * 12288;
    struct mallinfo2 before = mallinfo2();
    merak_graph *g = merak_model_build(&c, 8, 2048, err, sizeof err);
    struct mallinfo2 after = mallinfo2();
    size_t used = after.uordblks - before.uordblks;
    tap_ok(g && merak_graph_param_elems(g) > 174000000000LL && used < (8u << 20),
           "a %.0fB-parameter graph takes %.2f MB to build", g ? merak_graph_param_elems(g) / 1e9 : 0,
           used / 1e6);
    tap_ok(g && merak_graph_flops(g) > 0, "the graph counts forward FLOPs (%.3g)", g ? merak_graph_flops(g) : 0);
    merak_graph_destroy(g);
}

/* ids (2,8), wte (50,16), x = embedding(ids, wte) (2,8,16), w (32,24) and
 * pos (4,16): five tensors and one op, the material for refused calls.  A
 * graph stops at its first error, so every refusal gets a fresh one. */
typedef struct small_graph {
    merak_graph *g;
    int ids, wte, x, w, pos;
} small_graph;

static small_graph small(void)
{
    small_graph s = {merak_graph_create(), -1, -1, -1, -1, -1};
    merak_param_init in = {MERAK_INIT_NORMAL, 0.02f};
    s.ids = merak_graph_input(s.g, "ids", MERAK_I32, 2, (int64_t[]){2, 8});
    s.wte = merak_graph_param(s.g, "wte", 2, (int64_t[]){50, 16}, in, MERAK_TP_VOCAB, MERAK_HF_AS_IS);
    s.x = merak_op_embedding(s.g, s.ids, s.wte);
    s.w = merak_graph_param(s.g, "w", 2, (int64_t[]){32, 24}, in, MERAK_TP_COLUMN, MERAK_HF_AS_IS);
    s.pos = merak_graph_param(s.g, "pos", 2, (int64_t[]){4, 16}, in, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
    return s;
}

/* rc is the result of one call on the fresh graph s: it must be refused
 * with a message containing `why`, and leave the graph as it was. */
static void refused(small_graph *s, int rc, const char *why, const char *what)
{
    const char *e = merak_graph_error(s->g);
    tap_ok(rc < 0 && strstr(e, why) && merak_graph_num_ops(s->g) == 1 &&
               merak_graph_num_tensors(s->g) == 5,
           "%s is refused, the graph unchanged: %s", what, e);
    merak_graph_destroy(s->g);
}

static void test_shape_errors(void)
{
    small_graph s = small();
    tap_ok(s.x >= 0 && s.pos >= 0 && merak_graph_num_ops(s.g) == 1 && !*merak_graph_error(s.g),
           "embedding infers (2,8,16)");
    merak_graph_destroy(s.g);
    s = small();
    refused(&s, merak_op_linear(s.g, s.x, s.w, -1), "16 features", "linear with a mismatched weight");
    s = small();
    refused(&s, merak_graph_input(s.g, "ids", MERAK_I32, 2, (int64_t[]){2, 8}), "used twice",
            "a duplicate name");
    s = small();
    refused(&s, merak_op_attention(s.g, s.x, -1, -1, 3, 3, 0), "not divisible by 9 heads",
            "16 fused features in 9 heads");
    s = small();
    refused(&s, merak_op_attention(s.g, s.x, -1, -1, 4, 3, 0), "not a multiple of 3 kv heads",
            "4 heads over 3 kv heads");
    s = small();
    refused(&s, merak_op_gelu(s.g, s.w), "is a parameter", "an op on a parameter");
    s = small();
    refused(&s, merak_op_pos_embedding(s.g, s.x, s.pos), "positions", "8 tokens beyond 4 positions");

    merak_model_config c;
    merak_model_preset("tiny-gpt2", &c);
    merak_graph *bad = merak_model_build(&c, 2, c.max_positions + 1, err, sizeof err);
    tap_ok(!bad && strstr(err, "positions"), "a sequence beyond the model's positions: %s", err);
}

/* RoPE scaling on the attention op: DYNAMIC grows theta as the library
 * does for a sequence past the original positions and leaves it within
 * them; a rope that cannot work is refused naming what is wrong. */
static void test_rope_ops(void)
{
    const merak_rope dyn = {.theta = 10000.0f, .type = MERAK_ROPE_DYNAMIC, .factor = 2.0f, .original_max_positions = 4};
    for (int orig = 4; orig <= 8; orig += 4) {
        merak_rope r = dyn;
        r.original_max_positions = orig;
        small_graph s = small(); /* x is (2, 8, 16): 8 positions, heads of 4 */
        int a = merak_op_attention_rope(s.g, s.x, -1, -1, 2, 1, &r);
        const merak_op *o = a >= 0 ? &s.g->ops[merak_graph_num_ops(s.g) - 1] : NULL;
        /* theta * (factor * T / original - factor + 1) ^ (hd / (hd - 2)), T = 8, hd = 4 */
        float want = orig == 4 ? (float)(10000.0 * pow(2.0 * 8 / 4 - 1, 4.0 / 2)) : 10000.0f;
        tap_ok(o && o->rope.type == MERAK_ROPE_DEFAULT && o->rope.theta == want,
               "dynamic rope over 8 positions, original %d: theta %g (want %g)", orig, o ? (double)o->rope.theta : 0.0,
               (double)want);
        merak_graph_destroy(s.g);
    }
    const struct {
        merak_rope r;
        const char *why;
    } bad[] = {
        {{.theta = -1.0f}, "rope theta -1 must be 0 (none) or positive"},
        {{.theta = 100.0f, .type = 7}, "unknown rope scaling type 7"},
        {{.theta = 100.0f, .type = MERAK_ROPE_LINEAR, .factor = 0.5f}, "factor 0.5 must be at least 1"},
        {{.theta = 100.0f, .type = MERAK_ROPE_DYNAMIC, .factor = 2.0f}, "needs the original positions"},
        {{.theta = 100.0f, .type = MERAK_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 4.0f, .high_freq_factor = 1.0f,
          .original_max_positions = 64},
         "low_freq_factor (4) < high_freq_factor (1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        small_graph s = small();
        refused(&s, merak_op_attention_rope(s.g, s.x, -1, -1, 2, 1, &bad[i].r), bad[i].why, bad[i].why);
    }
}

/* The first failed building call decides the graph's error: later calls,
 * whether they trip over its -1 or are valid on their own, change nothing,
 * return -1 and leave the message alone. */
static void test_first_error_kept(void)
{
    small_graph s = small();
    merak_graph *g = s.g;
    int a = merak_op_attention(g, s.x, -1, -1, 4, 3, 0);  /* 4 heads over 3 kv heads */
    char first[256];
    snprintf(first, sizeof first, "%s", merak_graph_error(g));
    tap_ok(a < 0 && strstr(first, "attention:"), "a bad attention fails: %s", first);

    /* The rest of a block, written without checks, on the attention's -1. */
    int h = merak_op_gelu(g, a);
    tap_ok(h < 0 && strcmp(merak_graph_error(g), first) == 0,
           "a gelu on its -1 reports the attention, not itself: %s", merak_graph_error(g));
    h = merak_op_add(g, s.x, h);
    int y = merak_op_linear(g, h, s.w, -1);
    tap_ok(y < 0 && strcmp(merak_graph_error(g), first) == 0,
           "an add and a linear after it keep the attention's message");

    /* Calls that would succeed on a healthy graph are no-ops now. */
    merak_param_init in = {MERAK_INIT_NORMAL, 0.02f};
    int ok_ops = merak_op_gelu(g, s.x) < 0 && merak_op_add(g, s.x, s.x) < 0 &&
                 merak_op_dropout(g, s.x, 0.1f) < 0 &&
                 merak_op_layernorm(g, s.x, s.pos, -1, 1e-5f) < 0;
    tap_ok(ok_ops, "valid ops on a failed graph return -1");
    int ok_tensors = merak_graph_input(g, "more_ids", MERAK_I32, 2, (int64_t[]){2, 8}) < 0 &&
                     merak_graph_param(g, "more_w", 1, (int64_t[]){16}, in, MERAK_TP_REPLICATED,
                                       MERAK_HF_AS_IS) < 0 &&
                     merak_graph_tie(g, s.pos, s.wte) < 0 &&
                     merak_graph_set_tp(g, "w", MERAK_TP_ROW) < 0;
    tap_ok(ok_tensors, "valid inputs, parameters, ties and tp rules on a failed graph return -1");
    tap_ok(merak_op_cross_entropy(g, s.x, s.ids) < 0 && merak_graph_num_ops(g) == 1 &&
               merak_graph_num_tensors(g) == 5 && merak_graph_num_params(g) == 3,
           "the graph is as it was before the attention");
    /* A second bad call of its own does not replace the first message. */
    tap_ok(merak_op_linear(g, s.x, s.w, -1) < 0 && strcmp(merak_graph_error(g), first) == 0,
           "a second error keeps the first message: %s", merak_graph_error(g));
    char rerr[256] = "";
    tap_ok(merak_graph_load_tp_rules(g, "/nonexistent/rules.txt", rerr, sizeof rerr) < 0 &&
               strcmp(rerr, first) == 0,
           "a rules file on a failed graph reports the first error: %s", rerr);
    merak_graph_destroy(g);

    /* The model builders call on unchecked, so their first error must win
     * too: a zero init std fails the first parameter, not the loss. */
    merak_model_config c;
    merak_model_preset("tiny-llama", &c);
    c.init_std = 0;
    merak_graph *bad = merak_model_build(&c, 2, 8, err, sizeof err);
    tap_ok(!bad && strstr(err, "model.embed_tokens.weight: init std 0"),
           "a LLaMA whose first parameter fails says so: %s", err);
    merak_model_preset("tiny-gpt2", &c);
    c.init_std = 0;
    bad = merak_model_build(&c, 2, 8, err, sizeof err);
    tap_ok(!bad && strstr(err, "transformer.wte.weight: init std 0"),
           "a GPT-2 whose first parameter fails says so: %s", err);
}

/* Loads random tokens into slot s. */
static void fill_tokens(const merak_graph *g, merak_exec *e, int s, int V, unsigned seed)
{
    srand(seed);
    for (int t = 0; t < merak_graph_num_tensors(g); t++) {
        int32_t *p = merak_exec_tensor(e, s, t);
        if (p && (strcmp(g->tensors[t].name, "input_ids") == 0 ||
                  strcmp(g->tensors[t].name, "targets") == 0))
            for (int64_t i = 0; i < merak_tensor_elems(&g->tensors[t]); i++)
                p[i] = rand() % V;
    }
}

static double loss_of(merak_exec *e) { merak_exec_forward(e, 0, 7); return merak_exec_loss(e, 0); }

/* An executor poll that counts its calls. */
static void count_poll(void *ctx) { ++*(int *)ctx; }

static void test_model_gradients(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    merak_exec *e;
    merak_exec_chunk whole = {.op_begin = 0, .op_end = -1, .nslots = 2};
    merak_exec_opts o = {.chunks = &whole, .nchunks = 1, .kernels = merak_kernels_cpu(), .split = 1};
    if (!g || merak_exec_create(g, &o, &e, err, sizeof err) < 0) {
        tap_ok(0, "%s: %s", preset, err);
        return;
    }
    merak_init_params(g, e, 42, NULL, 0);
    fill_tokens(g, e, 0, c.vocab_size, 1);
    merak_exec_zero_grads(e);
    merak_exec_forward(e, 0, 7);
    merak_exec_backward(e, 0);

    /* Finite differences of the float model on the largest gradients of
     * several parameters: wiring errors give O(1) relative errors. */
    int checked = 0, bad = 0;
    double worst = 0;
    for (int i = 0; i < merak_exec_num_params(e); i += 3) {
        float *p = merak_exec_param_data(e, i), *gr = merak_exec_param_grad(e, i);
        size_t n = merak_exec_param_elems(e, i), best = 0;
        for (size_t j = 1; j < n; j++)
            if (fabsf(gr[j]) > fabsf(gr[best]))
                best = j;
        if (fabsf(gr[best]) < 1e-3f)
            continue;
        float keep = p[best], h = 1e-2f * fmaxf(1.0f, fabsf(keep));
        p[best] = keep + h;
        double up = loss_of(e);
        p[best] = keep - h;
        double down = loss_of(e);
        p[best] = keep;
        double fd = (up - down) / (2 * h), rel = fabs(fd - gr[best]) / fabs(gr[best]);
        checked++;
        if (rel > worst)
            worst = rel;
        if (rel > 0.05)
            bad++;
    }
    tap_ok(checked >= 5 && bad == 0, "%s: %d parameter gradients agree with finite differences (worst %.2g)",
           preset, checked, worst);

    /* Split backward (all input gradients, then all weight gradients) gives
     * the same bits as the fused one. */
    size_t n;
    float *grads = merak_exec_grads_flat(e, &n), *ref = malloc(n * sizeof *ref);
    memcpy(ref, grads, n * sizeof *ref);
    merak_exec_zero_grads(e);
    int polls[3] = {0, 0, 0};
    merak_exec_set_poll(e, count_poll, &polls[0]);
    merak_exec_forward(e, 0, 7);
    merak_exec_set_poll(e, count_poll, &polls[1]);
    merak_exec_backward_input(e, 0);
    merak_exec_set_poll(e, count_poll, &polls[2]);
    merak_exec_backward_weight(e, 0);
    merak_exec_set_poll(e, NULL, NULL);
    tap_ok(memcmp(ref, grads, n * sizeof *ref) == 0, "%s: split backward equals fused backward bitwise", preset);
    tap_ok(polls[0] == g->nops && polls[1] == g->nops && polls[2] == g->nops,
           "%s: the poll ran after each of the %d ops of the forward, input and weight passes (%d, %d, %d)", preset,
           g->nops, polls[0], polls[1], polls[2]);

    /* Two micro-batches in two slots, both forwards before the backwards
     * (gpipe order), equal the two run one after the other. */
    fill_tokens(g, e, 0, c.vocab_size, 2);
    merak_exec_zero_grads(e);
    merak_exec_forward(e, 0, 7);
    merak_exec_backward(e, 0);
    fill_tokens(g, e, 0, c.vocab_size, 1);
    merak_exec_forward(e, 0, 7);
    merak_exec_backward(e, 0);
    memcpy(ref, grads, n * sizeof *ref);
    fill_tokens(g, e, 0, c.vocab_size, 1);
    fill_tokens(g, e, 1, c.vocab_size, 2);
    merak_exec_zero_grads(e);
    merak_exec_forward(e, 0, 7);
    merak_exec_forward(e, 1, 7);
    merak_exec_backward(e, 1);
    merak_exec_backward(e, 0);
    tap_ok(memcmp(ref, grads, n * sizeof *ref) == 0,
           "%s: two slots in flight accumulate exactly like sequential micro-batches", preset);
    free(ref);
    merak_exec_destroy(e);
    merak_graph_destroy(g);
}

/* The graph run as two slices (pipeline stages), the crossing activation
 * and its gradient carried by hand, gives the whole graph's loss and
 * gradients; the tied embedding's gradient is the sum of both stages'. */
/* The logits have no gradient buffer: the loss's backward writes their
 * gradient, (softmax - onehot) / rows, over them (zero in a row whose
 * target is ignored).  No other float tensor's gradient is its storage. */
static void test_logits_in_place(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    merak_exec *e;
    merak_exec_chunk whole = {.op_begin = 0, .op_end = -1, .nslots = 2};
    merak_exec_opts o = {.chunks = &whole, .nchunks = 1, .kernels = merak_kernels_cpu()};
    if (!g || merak_exec_create(g, &o, &e, err, sizeof err) < 0) {
        tap_ok(0, "%s: %s", preset, err);
        return;
    }
    const merak_op *lo = &g->ops[g->tensors[g->loss].producer];
    const int lt = lo->in[0], tt = lo->in[1];
    int shared = 0, own = 0;
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < g->ntensors; t++) {
            const void *v = merak_exec_tensor(e, s, t), *d = merak_exec_grad(e, s, t);
            if (v && d)
                (t == lt ? &shared : &own)[0] += v == d;
        }
    merak_init_params(g, e, 42, NULL, 0);
    fill_tokens(g, e, 1, c.vocab_size, 3);
    merak_exec_forward(e, 1, 7);
    const int N = 16, V = (int)g->tensors[lt].shape[g->tensors[lt].ndim - 1];
    float *z = malloc((size_t)N * V * sizeof *z);
    int32_t *tg = merak_exec_tensor(e, 1, tt);
    tg[3] = -100;   /* ignore_index */
    merak_exec_forward(e, 1, 7);
    memcpy(z, merak_exec_tensor(e, 1, lt), (size_t)N * V * sizeof *z);
    merak_exec_backward(e, 1);
    const float *d = merak_exec_grad(e, 1, lt);
    double worst = 0;
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, z[(size_t)n * V + j]);
        for (int j = 0; j < V; j++)
            sum += exp(z[(size_t)n * V + j] - mx);
        for (int j = 0; j < V; j++) {
            double want = tg[n] < 0 ? 0 : (exp(z[(size_t)n * V + j] - mx) / sum - (j == tg[n])) / N;
            worst = fmax(worst, fabs(d[(size_t)n * V + j] - want));
        }
    }
    tap_ok(shared == 2 && own == 0 && worst < 1e-7,
           "%s: the logits' gradient is their storage in both slots (%d), no other tensor's (%d); after the "
           "backward it holds (softmax - onehot) / %d, zero where the target is ignored (worst error %.2g)", preset, shared, own, N, worst);
    free(z);
    merak_exec_destroy(e);
    merak_graph_destroy(g);
}

/* Gradients that never live at once share storage, and that changes no
 * bit: two micro-batches in gpipe order, against an executor keeping
 * every gradient, give the same losses and weight gradients with less
 * memory, with the backward whole, split in zero-bubble order (both
 * input parts, then both weight parts) and with every layer recomputed;
 * two gradients whose lifetimes (from the last op reading the tensor to
 * the op making it) overlap never overlap in memory, and some that do
 * not, do. */
/* The root of t's group in grp (union-find without ranks). */
static int group_of(int *grp, int t)
{
    while (grp[t] != t)
        t = grp[t] = grp[grp[t]];
    return t;
}

static void test_shared_grads(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    c.dropout = 0.1f;
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    for (int how = 0; g && how < RUN_WAYS; how++) {
        merak_exec *e[2] = {NULL, NULL};
        merak_exec_chunk whole;
        merak_exec_opts o = run_opts(g, how, &whole), ok = o;
        ok.keep_grads = 1;
        if (merak_exec_create(g, &o, &e[0], err, sizeof err) < 0 || merak_exec_create(g, &ok, &e[1], err, sizeof err) < 0) {
            tap_ok(0, "%s: %s", preset, err);
            merak_exec_destroy(e[0]);
            continue;
        }
        double loss[2][2];
        for (int i = 0; i < 2; i++) {
            merak_init_params(g, e[i], 42, NULL, 0);
            fill_tokens(g, e[i], 0, c.vocab_size, 5);
            fill_tokens(g, e[i], 1, c.vocab_size, 6);
            run_two(e[i], how);
            loss[i][0] = merak_exec_loss(e[i], 0);
            loss[i][1] = merak_exec_loss(e[i], 1);
        }
        size_t n;
        const float *g0 = merak_exec_grads_flat(e[0], &n), *g1 = merak_exec_grads_flat(e[1], &n);
        size_t b0 = merak_exec_arena_bytes(e[0]), b1 = merak_exec_arena_bytes(e[1]);
        tap_ok(memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && memcmp(g0, g1, n * sizeof *g0) == 0 && b0 < b1,
               "%s, %s: shared gradients give the losses and weight gradients of kept ones, bit for bit, in %zu "
               "bytes of arenas instead of %zu", preset, run_name(how), b0, b1);
        if (how == RUN_WHOLE) {
            int *last = malloc((size_t)g->ntensors * sizeof *last), shared = 0, clash = 0, reuse = 0, passed = 0;
            int *grp = malloc((size_t)g->ntensors * sizeof *grp);
            merak_graph_last_uses(g, last, NULL);
            /* the groups of gradients passed through adds: an add's input
             * whose gradient is its output's storage joins its group */
            for (int t = 0; t < g->ntensors; t++)
                grp[t] = t;
            for (int i = 0; i < g->nops; i++) {
                const merak_op *op = &g->ops[i];
                for (int j = 0; j < 2 && j < op->nin; j++)
                    if ((op->type == MERAK_OP_ADD || op->type == MERAK_OP_POS_EMBEDDING) && op->in[j] >= 0 &&
                        merak_exec_grad(e[0], 0, op->in[j]) &&
                        merak_exec_grad(e[0], 0, op->in[j]) == merak_exec_grad(e[0], 0, op->out))
                        grp[group_of(grp, op->in[j])] = group_of(grp, op->out);
            }
            for (int a = 0; a < g->ntensors; a++) {
                const float *pa = merak_exec_grad(e[0], 0, a);
                if (!pa || pa != merak_exec_grad(e[0], 1, a))
                    continue;   /* the slot's own */
                shared++;
                for (int b = 0; b < g->ntensors; b++) {
                    const float *pb = merak_exec_grad(e[0], 0, b);
                    if (b == a || !pb || pb != merak_exec_grad(e[0], 1, b))
                        continue;
                    const int live = g->tensors[a].producer <= last[b] && g->tensors[b].producer <= last[a];
                    const int mem = pa < pb + merak_tensor_elems(&g->tensors[b]) &&
                                    pb < pa + merak_tensor_elems(&g->tensors[a]);
                    /* gradients an add passes on in its output's storage
                     * (exec.c plan_pass): one buffer, by design */
                    const int pass = pa == pb && group_of(grp, a) == group_of(grp, b);
                    clash += live && mem && !pass;
                    passed += live && mem && pass;
                    reuse += !live && mem;
                }
            }
            tap_ok(shared > 10 && clash == 0 && reuse > 0 && passed > 0,
                   "%s: %d gradients in the shared buffer; %d pairs living at once overlap in memory (but for %d "
                   "passed on by adds, in one buffer), %d pairs not living at once do", preset, shared,
                   clash, passed / 2, reuse);
            free(last);
            free(grp);
        }
        merak_exec_destroy(e[0]);
        merak_exec_destroy(e[1]);
    }
    merak_graph_destroy(g);
}

/* The zero hook, counting the bytes it zeroes (test_fresh_grads). */
static size_t zeroed;
static int count_zero(void *p, size_t bytes)
{
    zeroed += bytes;
    return merak_kernels_cpu()->zero(p, bytes);
}

/* The first op to add to a shared gradient writes it instead, unzeroed
 * (exec.c plan_fresh): with the whole backward every op but the
 * embedding and the loss (which has its gradient in place) that is the last to read each of its inputs does (LLaMA's
 * q and k projections read the norm's output before v's: they add to
 * what v's wrote); the losses and weight gradients are those of zeroing
 * every gradient first (zero_first), bit for bit, whole, split and
 * recomputed, with fewer bytes zeroed. */
static void test_fresh_grads(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    c.dropout = 0.1f;
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    merak_kernels counting = *merak_kernels_cpu();
    counting.zero = count_zero;
    for (int how = 0; g && how < RUN_WAYS; how++) {
        merak_exec *e[2] = {NULL, NULL};
        merak_exec_chunk whole;
        merak_exec_opts o = run_opts(g, how, &whole), oz;
        o.kernels = &counting;
        oz = o;
        oz.zero_first = 1;
        if (merak_exec_create(g, &o, &e[0], err, sizeof err) < 0 || merak_exec_create(g, &oz, &e[1], err, sizeof err) < 0) {
            tap_ok(0, "%s: %s", preset, err);
            merak_exec_destroy(e[0]);
            continue;
        }
        double loss[2][2];
        size_t bytes[2];
        int fresh[2] = {0, 0}, kinds = 0, passes[2] = {0, 0}, adds = 0;
        int *last = malloc((size_t)g->ntensors * sizeof *last);
        merak_graph_last_uses(g, last, NULL);
        for (int i = 0; i < g->nops; i++) {
            const merak_op *op = &g->ops[i];
            /* every kind with input gradients but the loss (its own in place) */
            int first = op->type != MERAK_OP_EMBEDDING && op->type != MERAK_OP_CROSS_ENTROPY;
            for (int j = 0; j < op->nin; j++)
                first &= op->in[j] < 0 || g->tensors[op->in[j]].kind == MERAK_T_PARAM || last[op->in[j]] == i;
            kinds += first;
            fresh[0] += merak_exec_op_fresh(e[0], i);
            fresh[1] += merak_exec_op_fresh(e[1], i);
            /* the adds pass their output's gradient to both inputs in
             * its storage, the position embedding to its first
             * (plan_pass) */
            adds += op->type == MERAK_OP_ADD ? 2 : op->type == MERAK_OP_POS_EMBEDDING;
            for (int k = 0; k < 2; k++)
                for (int j = 0; j < 2 && j < op->nin; j++)
                    passes[k] += op->in[j] >= 0 && merak_exec_grad(e[k], 0, op->in[j]) &&
                                 merak_exec_grad(e[k], 0, op->in[j]) == merak_exec_grad(e[k], 0, op->out);
        }
        free(last);
        for (int i = 0; i < 2; i++) {
            merak_init_params(g, e[i], 42, NULL, 0);
            fill_tokens(g, e[i], 0, c.vocab_size, 5);
            fill_tokens(g, e[i], 1, c.vocab_size, 6);
            zeroed = 0;
            run_two(e[i], how);
            bytes[i] = zeroed;
            loss[i][0] = merak_exec_loss(e[i], 0);
            loss[i][1] = merak_exec_loss(e[i], 1);
        }
        size_t n;
        const float *g0 = merak_exec_grads_flat(e[0], &n), *g1 = merak_exec_grads_flat(e[1], &n);
        tap_ok(memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && memcmp(g0, g1, n * sizeof *g0) == 0 &&
                   bytes[0] < bytes[1] && fresh[0] > 0 && fresh[1] == 0 && (how != RUN_WHOLE || fresh[0] == kinds) &&
                   passes[1] == 0 && (how == RUN_SPLIT || passes[0] == adds),
               "%s, %s: %d ops write their input gradients (of %d ops but the embedding and the loss first to add "
               "to theirs), %d of the %d inputs of adds get theirs passed through: the losses and "
               "weight gradients of zeroing first, bit for bit, with %zu bytes zeroed instead of %zu",
               preset, run_name(how), fresh[0], kinds, passes[0], adds, bytes[0], bytes[1]);
        merak_exec_destroy(e[0]);
        merak_exec_destroy(e[1]);
    }
    merak_graph_destroy(g);
}

/* Adds whose second input's gradient must not be passed through (exec.c
 * plan_pass), in graphs of embeddings, linear layers and layer norms:
 *   0  y = linear(x); out = x + y: y's producer reads x, and its
 *      backward adds into x's gradient while it reads y's;
 *   1  u = a + b (passed into u); out = t + u, t's norm read after a's
 *      producer: the norm's backward would add into the buffer a's
 *      linear has yet to read;
 *   2  m = linear(x) made first; h = x + linear(ln(x)); out = h + m: x
 *      (passed into h) is read by the norm after m's producer.
 * The first input's gradient passes (but split, and in 1 neither: u's
 * group is taken); the losses and weight gradients equal zeroing every
 * gradient first, bit for bit, whole and split. */
static void test_pass_refused(int which)
{
    static const char *name[] = {"an add after a linear of its first input",
                                 "an add of a sum of two branches to a norm's input",
                                 "an add of an early branch to a later residual"};
    merak_graph *g = merak_graph_create();
    merak_param_init in = {MERAK_INIT_NORMAL, 0.5f}, one = {MERAK_INIT_ONES, 0}, zero = {MERAK_INIT_ZEROS, 0};
    const int V = 50, C = 16;
    const int ids = merak_graph_input(g, "input_ids", MERAK_I32, 2, (int64_t[]){2, 8});
    const int tg = merak_graph_input(g, "targets", MERAK_I32, 2, (int64_t[]){2, 8});
    const int wte = merak_graph_param(g, "wte", 2, (int64_t[]){V, C}, in, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
    int w[4], lw = merak_graph_param(g, "ln.w", 1, (int64_t[]){C}, one, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
    const int lb = merak_graph_param(g, "ln.b", 1, (int64_t[]){C}, zero, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
    for (int k = 0; k < 4; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "w%d", k);
        w[k] = merak_graph_param(g, nm, 2, (int64_t[]){C, C}, in, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
    }
    const int head = merak_graph_param(g, "head", 2, (int64_t[]){V, C}, in, MERAK_TP_REPLICATED, MERAK_HF_AS_IS);
    const int x = merak_op_embedding(g, ids, wte);
    int first = x, second, out;   /* the last add's inputs */
    if (which == 0) {
        second = merak_op_linear(g, x, w[0], -1);
    } else if (which == 1) {
        first = merak_op_linear(g, x, w[0], -1);                     /* t */
        const int a = merak_op_linear(g, x, w[1], -1);
        const int b = merak_op_linear(g, merak_op_layernorm(g, first, lw, lb, 1e-5f), w[2], -1);
        second = merak_op_add(g, a, b);                               /* u */
    } else {
        second = merak_op_linear(g, x, w[0], -1);                    /* m */
        const int a = merak_op_linear(g, merak_op_layernorm(g, x, lw, lb, 1e-5f), w[1], -1);
        first = merak_op_add(g, x, a);                                /* h */
    }
    out = merak_op_add(g, first, second);
    merak_op_cross_entropy(g, merak_op_linear(g, out, head, -1), tg);
    for (int how = RUN_WHOLE; how <= RUN_SPLIT && !merak_graph_error(g)[0]; how++) {
        merak_exec *e[2] = {NULL, NULL};
        merak_exec_chunk whole;
        merak_exec_opts o = run_opts(g, how, &whole), oz = o;
        oz.zero_first = 1;
        if (merak_exec_create(g, &o, &e[0], err, sizeof err) < 0 || merak_exec_create(g, &oz, &e[1], err, sizeof err) < 0) {
            tap_ok(0, "%s: %s", name[which], err);
            merak_exec_destroy(e[0]);
            break;
        }
        double loss[2][2];
        for (int i = 0; i < 2; i++) {
            merak_init_params(g, e[i], 42, NULL, 0);
            fill_tokens(g, e[i], 0, V, 5);
            fill_tokens(g, e[i], 1, V, 6);
            run_two(e[i], how);
            loss[i][0] = merak_exec_loss(e[i], 0);
            loss[i][1] = merak_exec_loss(e[i], 1);
        }
        size_t n;
        const float *g0 = merak_exec_grads_flat(e[0], &n), *g1 = merak_exec_grads_flat(e[1], &n);
        const int p1 = merak_exec_grad(e[0], 0, first) == merak_exec_grad(e[0], 0, out);
        const int p2 = merak_exec_grad(e[0], 0, second) == merak_exec_grad(e[0], 0, out);
        const int same = memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && memcmp(g0, g1, n * sizeof *g0) == 0;
        tap_ok(same && !p2 && (how == RUN_SPLIT || which == 1 || p1),
               "%s, %s: the first input's gradient passed through %d, the second's %d (must not be); the losses "
               "and weight gradients of zeroing first, bit for bit %d", name[which], run_name(how), p1, p2, same);
        merak_exec_destroy(e[0]);
        merak_exec_destroy(e[1]);
    }
    if (merak_graph_error(g)[0])
        tap_ok(0, "%s: %s", name[which], merak_graph_error(g));
    merak_graph_destroy(g);
}

static void test_two_stages(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    int n = merak_graph_num_ops(g), cut = -1, cross = -1;
    /* The cut after the first block's last op: where exactly one activation
     * produced before it is read after it. */
    for (int k = n / 2; k < n && cut < 0; k++) {
        int count = 0, last = -1;
        for (int t = 0; t < merak_graph_num_tensors(g); t++) {
            const merak_tensor *x = &g->tensors[t];
            if (x->kind != MERAK_T_ACT || x->producer >= k)
                continue;
            for (int i = k; i < n; i++)
                if (merak_op_reads(&g->ops[i], t)) {
                    count++, last = t;
                    break;
                }
        }
        if (count == 1)
            cut = k, cross = last;
    }
    merak_exec *whole, *s0, *s1;
    const merak_kernels *k = merak_kernels_cpu();
    merak_exec_chunk cw = {0, -1, 1, 0}, c0 = {0, cut, 1, 0}, c1 = {cut, n, 1, 0};
    merak_exec_opts ow = {.chunks = &cw, .nchunks = 1, .kernels = k};
    merak_exec_opts o0 = {.chunks = &c0, .nchunks = 1, .kernels = k};
    merak_exec_opts o1 = {.chunks = &c1, .nchunks = 1, .kernels = k};
    if (cut < 0 || merak_exec_create(g, &ow, &whole, err, sizeof err) < 0 ||
        merak_exec_create(g, &o0, &s0, err, sizeof err) < 0 ||
        merak_exec_create(g, &o1, &s1, err, sizeof err) < 0) {
        tap_ok(0, "%s: two stages: %s", preset, cut < 0 ? "no single-tensor cut" : err);
        return;
    }
    merak_init_params(g, whole, 5, NULL, 0);
    merak_init_params(g, s0, 5, NULL, 0);
    merak_init_params(g, s1, 5, NULL, 0);
    fill_tokens(g, whole, 0, c.vocab_size, 3);
    fill_tokens(g, s0, 0, c.vocab_size, 3);
    int targets = merak_graph_find(g, "targets");
    size_t bt = 2 * 8;
    tap_ok(merak_exec_tensor(s1, 0, merak_graph_find(g, "input_ids")) == NULL &&
           merak_exec_tensor(s0, 0, targets) == NULL,
           "%s: only the first stage holds token ids, only the last targets", preset);
    memcpy(merak_exec_tensor(s1, 0, targets), merak_exec_tensor(whole, 0, targets), bt * 4);

    merak_exec_zero_grads(whole);
    merak_exec_zero_grads(s0);
    merak_exec_zero_grads(s1);
    merak_exec_forward(whole, 0, 1);
    merak_exec_backward(whole, 0);
    size_t act = (size_t)merak_tensor_elems(&g->tensors[cross]) * sizeof(float);
    merak_exec_forward(s0, 0, 1);
    memcpy(merak_exec_tensor(s1, 0, cross), merak_exec_tensor(s0, 0, cross), act);   /* send act */
    merak_exec_forward(s1, 0, 1);
    merak_exec_backward(s1, 0);
    memcpy(merak_exec_grad(s0, 0, cross), merak_exec_grad(s1, 0, cross), act);       /* send grad */
    merak_exec_backward(s0, 0);
    tap_ok(merak_exec_loss(s1, 0) == merak_exec_loss(whole, 0), "%s: cut at op %d of %d, same loss %.6f",
           preset, cut, n, merak_exec_loss(s1, 0));

    /* Every parameter's gradient: from its stage, or summed over both. */
    double worst = 0;
    int missing = 0;
    for (int i = 0; i < merak_exec_num_params(whole); i++) {
        int t = merak_exec_param_tensor(whole, i);
        int i0 = merak_exec_param_find(s0, t), i1 = merak_exec_param_find(s1, t);
        const float *gw = merak_exec_param_grad(whole, i);
        if (i0 < 0 && i1 < 0)
            missing++;
        for (size_t j = 0; j < merak_exec_param_elems(whole, i); j++) {
            double sum = (i0 >= 0 ? merak_exec_param_grad(s0, i0)[j] : 0) +
                         (i1 >= 0 ? merak_exec_param_grad(s1, i1)[j] : 0);
            worst = fmax(worst, fabs(sum - gw[j]) / (fabs(gw[j]) + 1e-6));
        }
    }
    tap_ok(!missing && worst < 1e-5, "%s: stage gradients equal the whole graph's (worst relative %.2g)",
           preset, worst);
    merak_exec_destroy(whole);
    merak_exec_destroy(s0);
    merak_exec_destroy(s1);
    merak_graph_destroy(g);
}

/* Recomputation: a slice that drops its activations and recomputes them
 * (with dropout, two micro-batches in flight) gives bitwise the gradients
 * and losses of one that keeps them, in less memory; misuse is refused. */
static void test_recompute(const char *preset)
{
    merak_model_config c;
    merak_model_preset(preset, &c);
    c.dropout = 0.1f;
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    const merak_kernels *k = merak_kernels_cpu();
    int n = g ? g->nops : 0, half = 0, cuts[256];
    int ncut = g ? merak_cut_points(g, 0, n, cuts) : 0;
    if (ncut > 0)
        half = cuts[ncut / 2];
    merak_exec_chunk ck = {0, -1, 2, 0}, crc = {0, -1, 2, n}, chalf = {0, -1, 2, half};
    merak_exec_opts ok = {.chunks = &ck, .nchunks = 1, .kernels = k};
    merak_exec_opts orc = ok, ohalf = ok;
    orc.chunks = &crc;
    orc.npool = 1;
    ohalf.chunks = &chalf;
    ohalf.npool = 1;
    merak_exec *keep, *rc, *part;
    if (!g || ncut < 1 || merak_exec_create(g, &ok, &keep, err, sizeof err) < 0 ||
        merak_exec_create(g, &orc, &rc, err, sizeof err) < 0 ||
        merak_exec_create(g, &ohalf, &part, err, sizeof err) < 0) {
        tap_ok(0, "%s: recompute executors: %s", preset, err);
        return;
    }
    merak_exec *e[3] = {keep, rc, part};
    for (int i = 0; i < 3; i++) {
        merak_init_params(g, e[i], 9, NULL, 0);
        fill_tokens(g, e[i], 0, c.vocab_size, 4);
        fill_tokens(g, e[i], 1, c.vocab_size, 5);
        merak_exec_zero_grads(e[i]);
        merak_exec_forward(e[i], 0, 11);
        merak_exec_forward(e[i], 1, 12);
    }
    tap_ok(merak_exec_backward(rc, 1) == -1 && strstr(merak_exec_error(rc), "not recomputed"),
           "%s: a backward without its recompute is refused: %s", preset, merak_exec_error(rc));
    tap_ok(merak_exec_recompute(keep, 0) == -1 && strstr(merak_exec_error(keep), "nothing to recompute"),
           "%s: recomputing a slice that keeps everything is refused", preset);
    int okrc = merak_exec_recompute(rc, 1) == 0;
    tap_ok(okrc && merak_exec_recompute(rc, 0) == -1 && strstr(merak_exec_error(rc), "no free recompute buffer"),
           "%s: a second recompute with one buffer busy is refused: %s", preset, merak_exec_error(rc));
    merak_exec_backward(keep, 1);
    merak_exec_backward(rc, 1);
    merak_exec_recompute(part, 1);
    merak_exec_backward(part, 1);
    merak_exec_backward(keep, 0);
    merak_exec_recompute(rc, 0);
    merak_exec_backward(rc, 0);
    merak_exec_recompute(part, 0);
    merak_exec_backward(part, 0);
    size_t nf;
    const float *gk = merak_exec_grads_flat(keep, &nf), *gr = merak_exec_grads_flat(rc, &nf),
                *gp = merak_exec_grads_flat(part, &nf);
    double sum = 0;
    for (size_t i = 0; i < nf; i++)
        sum += fabs(gk[i]);
    tap_ok(sum > 0 && !memcmp(gk, gr, nf * sizeof *gk) && !memcmp(gk, gp, nf * sizeof *gk) &&
               merak_exec_loss(keep, 0) == merak_exec_loss(rc, 0) && merak_exec_loss(keep, 1) == merak_exec_loss(rc, 1),
           "%s: recomputing all or half the layers (cut at op %d of %d) gives bitwise the same gradients "
           "with dropout 0.1", preset, half, n);
    size_t bk = merak_exec_arena_bytes(keep), br = merak_exec_arena_bytes(rc), bp = merak_exec_arena_bytes(part);
    tap_ok(br < bp && bp < bk, "%s: activation memory %zu (all recomputed) < %zu (half) < %zu (none) bytes", preset,
           br, bp, bk);
    orc.plan_only = 1;
    merak_exec *plan;
    tap_ok(merak_exec_create(g, &orc, &plan, err, sizeof err) == 0 && merak_exec_arena_bytes(plan) == br &&
               merak_exec_params_flat(plan, &nf) == NULL,
           "%s: a plan-only executor gives the same memory and allocates nothing", preset);
    merak_exec_destroy(plan);
    orc.plan_only = 0;
    orc.npool = 0;
    tap_ok(merak_exec_create(g, &orc, &plan, err, sizeof err) == -1 && strstr(err, "recompute buffer"),
           "%s: recomputing without a buffer is refused: %s", preset, err);
    /* Chunks: adjacent ones would share the activation between them;
     * ranges out of order or overlapping are refused. */
    merak_exec_chunk two[2] = {{0, half, 1, 0}, {half, n, 1, 0}};
    merak_exec_opts oc = {.chunks = two, .nchunks = 2, .kernels = k};
    tap_ok(merak_exec_create(g, &oc, &plan, err, sizeof err) == -1 && strstr(err, "is used by chunks 0 and 1"),
           "%s: chunks sharing an activation are refused: %s", preset, err);
    two[1] = (merak_exec_chunk){half - 1, n, 1, 0};
    tap_ok(merak_exec_create(g, &oc, &plan, err, sizeof err) == -1 && strstr(err, "after the chunk before it"),
           "%s: overlapping chunks are refused: %s", preset, err);
    two[1] = (merak_exec_chunk){half + 1, n, 0, 0};
    tap_ok(merak_exec_create(g, &oc, &plan, err, sizeof err) == -1 && strstr(err, "chunk 1 has 0 slots"),
           "%s: a chunk without slots is refused: %s", preset, err);
    for (int i = 0; i < 3; i++)
        merak_exec_destroy(e[i]);
    merak_graph_destroy(g);
}

static void test_init(void)
{
    merak_tensor t = {.name = "h.0.w", .init = {MERAK_INIT_NORMAL, 0.5f}};
    enum { N = 20000 };
    static float all[N], part[N];
    merak_init_fill(&t, 9, 0, N, all);
    merak_init_fill(&t, 9, 12345, 1000, part);
    tap_ok(memcmp(all + 12345, part, 1000 * sizeof *part) == 0,
           "a slice of a parameter initialises to the same values as the whole");
    double s = 0, ss = 0;
    for (int i = 0; i < N; i++)
        s += all[i], ss += (double)all[i] * all[i];
    double mean = s / N, sd = sqrt(ss / N - mean * mean);
    tap_ok(fabs(mean) < 0.02 && fabs(sd - 0.5) < 0.02, "normal init has mean %.4f and std %.4f (0, 0.5)",
           mean, sd);
    merak_tensor u = t;
    snprintf(u.name, sizeof u.name, "h.1.w");
    merak_init_fill(&u, 9, 0, 1000, part);
    tap_ok(memcmp(all, part, 1000 * sizeof *part) != 0, "different parameters get different values");
}

/* Weights that are not finite are never saved: one NaN in one tensor
 * refuses the file, naming the tensor and the element, and writes
 * nothing; the same finite tensors are written. */
static void test_save_finite(void)
{
    merak_graph *g = build("tiny-gpt2", 2, 8);
    int p = -1;
    for (int t = 0; g && t < g->ntensors && p < 0; t++)
        if (g->tensors[t].kind == MERAK_T_PARAM && g->tensors[t].layout != MERAK_HF_TRANSPOSED)
            p = t;
    size_t n = p >= 0 ? (size_t)merak_tensor_elems(&g->tensors[p]) : 0;
    float *w = calloc(n ? n : 1, sizeof *w);
    char path[] = "/tmp/merak-test-finite-XXXXXX";
    err[0] = 0;
    int fd = mkstemp(path);
    if (!g || p < 0 || !w || fd < 0) {
        tap_ok(0, "save finite: set-up failed");
        free(w), merak_graph_destroy(g);
        return;
    }
    close(fd);
    unlink(path);
    const float *data[1] = {w};
    int ok = merak_weights_save_arrays(g, 1, &p, data, path, NULL, 0, 0, err, sizeof err) == 0 && access(path, F_OK) == 0;
    unlink(path);
    w[n / 2] = NAN;
    int refused = merak_weights_save_arrays(g, 1, &p, data, path, NULL, 0, 0, err, sizeof err) < 0 &&
                  strstr(err, g->tensors[p].name) && strstr(err, "nan") && access(path, F_OK) != 0;
    tap_ok(ok && refused, "weights with a NaN are not saved: %s", err);
    free(w);
    merak_graph_destroy(g);
}

static void test_lr(void)
{
    merak_lr s = {MERAK_LR_COSINE, 1e-3f, 1e-4f, 10, 110};
    tap_ok(fabsf(merak_lr_at(&s, 0) - 1e-4f) < 1e-9f && fabsf(merak_lr_at(&s, 9) - 1e-3f) < 1e-9f,
           "warmup rises linearly to the peak");
    tap_ok(fabsf(merak_lr_at(&s, 10) - 1e-3f) < 1e-9f && fabsf(merak_lr_at(&s, 60) - 5.5e-4f) < 1e-8f &&
           fabsf(merak_lr_at(&s, 110) - 1e-4f) < 1e-9f, "cosine falls from the peak to min-lr");
    s.kind = MERAK_LR_CONSTANT;
    s.warmup = 0;
    tap_ok(merak_lr_at(&s, 0) == 1e-3f && merak_lr_at(&s, 100) == 1e-3f, "constant stays at the peak");
}

/* ------------------------------------------------------------------ tensor parallelism */

static int count_ops(const merak_graph *g, merak_op_type t)
{
    int n = 0;
    for (int i = 0; i < g->nops; i++)
        n += g->ops[i].type == t;
    return n;
}

static void cover(void *ctx, int64_t local, int64_t global, int64_t n)
{
    (void)local;
    unsigned char *hits = ctx;
    for (int64_t i = 0; i < n; i++)
        hits[global + i]++;
}

/* Every element of every parameter is held by exactly one rank (split
 * parameters) or by all (whole ones); shard shapes add up. */
static int shards_cover(const merak_graph *g, merak_graph **sh, int tp)
{
    int ok = 1;
    for (int t = 0; t < g->ntensors && ok; t++) {
        const merak_tensor *w = &g->tensors[t];
        if (w->kind != MERAK_T_PARAM || w->tied_to >= 0)
            continue;
        int64_t n = merak_tensor_elems(w);
        unsigned char *hits = calloc((size_t)n, 1);
        int split = 0;
        for (int r = 0; r < tp; r++) {
            int lt = merak_graph_find(sh[r], w->name);
            if (lt < 0) {
                ok = 0;
                break;
            }
            split |= sh[r]->tensors[lt].shard_dim >= 0;
            merak_shard_runs(&sh[r]->tensors[lt], cover, hits);
        }
        for (int64_t i = 0; i < n && ok; i++)
            ok = hits[i] == (split ? 1 : tp);
        free(hits);
    }
    return ok;
}

static void test_tp_shard(void)
{
    merak_model_config c;
    merak_graph *sh[4] = {0};
    merak_model_preset("tiny-gpt2", &c);   /* C 64, 4 heads of 16 */
    merak_graph *g = merak_model_build(&c, 2, 8, err, sizeof err);
    for (int r = 0; r < 2; r++)
        sh[r] = merak_graph_shard(g, 2, r, NULL, 0, err, sizeof err);
    tap_ok(sh[0] && sh[1], "tiny-gpt2 shards two ways: %s", sh[0] && sh[1] ? "ok" : err);
    if (sh[0] && sh[1]) {
        const merak_tensor *qkv = &sh[1]->tensors[merak_graph_find(sh[1], "transformer.h.0.attn.c_attn.weight")];
        tap_ok(qkv->shape[0] == 96 && qkv->full[0] == 192 && qkv->shard_dim == 0 && qkv->nseg == 3 &&
               qkv->seg_start[0] == 32 && qkv->seg_start[1] == 96 && qkv->seg_start[2] == 160 &&
               qkv->seg_len[0] == 32 && qkv->seg_len[2] == 32,
               "fused q|k|v split head-aligned: rank 1 holds rows 32-63, 96-127, 160-191");
        const merak_tensor *pr = &sh[1]->tensors[merak_graph_find(sh[1], "transformer.h.0.attn.c_proj.weight")];
        const merak_tensor *wte = &sh[1]->tensors[merak_graph_find(sh[1], "transformer.wte.weight")];
        tap_ok(pr->shard_dim == 1 && pr->shape[1] == 32 && wte->shard_dim == 0 && wte->shape[0] == 128,
               "row-parallel projection splits its input features, the embedding its vocabulary");
        tap_ok(count_ops(sh[0], MERAK_OP_TP_COPY) == 5 && count_ops(sh[0], MERAK_OP_TP_REDUCE) == 5,
               "Megatron's f and g: 2 copies and 2 reductions per layer, 1 each for embedding and head");
        tap_ok(shards_cover(g, sh, 2), "the two shards hold every parameter element once");
        int mono = 1;
        for (int i = 1; i < sh[0]->nops; i++)
            mono &= sh[0]->ops[i].src >= sh[0]->ops[i - 1].src;
        tap_ok(mono, "shard ops keep the order of the ops they come from");
    }
    for (int r = 0; r < 4; r++)
        merak_graph_destroy(sh[r]), sh[r] = NULL;

    /* A vocabulary that does not divide: 257 rows as 128 + 129. */
    c.vocab_size = 257;
    merak_graph *g2 = merak_model_build(&c, 2, 8, err, sizeof err);
    for (int r = 0; r < 2; r++)
        sh[r] = merak_graph_shard(g2, 2, r, NULL, 0, err, sizeof err);
    tap_ok(sh[0] && sh[1] &&
           sh[0]->tensors[merak_graph_find(sh[0], "transformer.wte.weight")].shape[0] == 128 &&
           sh[1]->tensors[merak_graph_find(sh[1], "transformer.wte.weight")].shape[0] == 129 &&
           shards_cover(g2, sh, 2), "an uneven vocabulary splits 128 + 129");
    for (int r = 0; r < 2; r++)
        merak_graph_destroy(sh[r]), sh[r] = NULL;
    merak_graph_destroy(g2);

    /* Refusals name the number to change. */
    merak_graph *bad = merak_graph_shard(g, 3, 0, NULL, 0, err, sizeof err);
    tap_ok(!bad && strstr(err, "tp=3 does not divide the 4 attention heads") && strstr(err, "{1, 2, 4}"),
           "tp=3 on 4 heads is refused: %s", err);
    merak_graph_destroy(bad);
    merak_model_preset("tiny-llama", &c);   /* 8 heads, 4 kv heads */
    merak_graph *gl = merak_model_build(&c, 2, 8, err, sizeof err);
    bad = merak_graph_shard(gl, 8, 0, NULL, 0, err, sizeof err);
    tap_ok(!bad && strstr(err, "4 key/value heads"), "tp=8 on 4 kv heads is refused: %s", err);
    merak_graph_destroy(bad);
    for (int r = 0; r < 4; r++)
        sh[r] = merak_graph_shard(gl, 4, r, NULL, 0, err, sizeof err);
    tap_ok(sh[3] && shards_cover(gl, sh, 4), "tiny-llama shards four ways, every element once");
    for (int r = 0; r < 4; r++)
        merak_graph_destroy(sh[r]);
    /* Rules override the model's own: whole MLPs need no reduction there. */
    merak_tp_rule rule = {"*.mlp.*", MERAK_TP_REPLICATED, 1};
    merak_graph *r0 = merak_graph_shard(g, 2, 0, &rule, 1, err, sizeof err);
    tap_ok(r0 && count_ops(r0, MERAK_OP_TP_REDUCE) == 3, "a rule keeps the MLPs whole");
    merak_graph_destroy(r0);
    merak_graph_destroy(gl);
    merak_graph_destroy(g);
}

/* The op table: one complete entry per kind, whose properties agree. */
static void test_op_table(void)
{
    int complete = 1, names = 1, sums = 1, decode = 1;
    for (int t = 0; t < MERAK_OP_COUNT_; t++) {
        const merak_op_kind *k = merak_op_kind_get((merak_op_type)t);
        if (!k || !k->name || !k->forward) {
            complete = 0;
            tap_diag("kind %d: incomplete entry", t);
            continue;
        }
        if (strcmp(merak_op_name((merak_op_type)t), k->name) != 0)
            names = 0;
        for (int u = 0; u < t; u++)
            if (strcmp(merak_op_kind_get((merak_op_type)u)->name, k->name) == 0)
                names = 0;
        /* a sum over the tp group: made by the tp pass, timed as a sum, not generated with */
        int sum_cost = k->cost == MERAK_COST_SUM_FORWARD || k->cost == MERAK_COST_SUM_BACKWARD;
        if ((k->sum != MERAK_SUM_NONE) != sum_cost || (k->sum != MERAK_SUM_NONE && k->shard != MERAK_SHARD_NONE) ||
            (k->finish && k->sum != MERAK_SUM_FORWARD))
            sums = 0, tap_diag("%s: sum, cost and shard rule disagree", k->name);
        if ((k->decode == NULL) != (k->loss || k->sum != MERAK_SUM_NONE) || (k->decode_plan && !k->decode))
            decode = 0, tap_diag("%s: decode entry", k->name);
    }
    tap_ok(complete, "every op kind has an entry with a name and a forward");
    tap_ok(names, "names are the entries' and distinct");
    tap_ok(sums, "the tp sums: kinds with a sum are timed as one and made only by the tp pass");
    tap_ok(decode, "generation runs every kind but the loss and the tp sums");
    tap_ok(!merak_op_kind_get(MERAK_OP_COUNT_) && !merak_op_kind_get((merak_op_type)-1) &&
               strcmp(merak_op_name(MERAK_OP_COUNT_), "?") == 0,
           "no entry outside the kinds");
}

/* One status set for every layer (merak/status.h): a name no table has
 * is a usage error wherever it is checked. */
static void test_status(void)
{
    char msg[256] = "";
    merak_args a;
    merak_args_default(&a);
    a.data = "-";
    tap_ok(merak_args_check(&a, msg, sizeof msg) == MERAK_OK, "the default arguments pass: %s", msg);
    a.schedule = "nope";
    tap_ok(merak_args_check(&a, msg, sizeof msg) == MERAK_USAGE && strstr(msg, "nope"),
           "an unknown schedule is a usage error: %s", msg);
    merak_args_default(&a);
    a.data = "-";
    a.micro_batch = 0;
    tap_ok(merak_args_check(&a, msg, sizeof msg) == MERAK_USAGE, "a zero micro-batch is a usage error: %s", msg);
    tap_ok(merak_backend_check("tpu", msg, sizeof msg) == MERAK_USAGE && strstr(msg, "tpu"),
           "an unknown device is a usage error: %s", msg);
    if (!merak_have_cuda()) {
        merak_args_default(&a);
        a.data = "-";
        a.device = "cuda";
        tap_ok(merak_args_check(&a, msg, sizeof msg) == MERAK_USAGE && strstr(msg, "built without"),
               "cuda in a build without it is a usage error: %s", msg);
    }
}

/* The arithmetic a run gets when --dtype is not given: bf16 on a GPU
 * backend this build has, fp32 on the CPU; a dtype given is kept. */
static void test_dtype_default(void)
{
    merak_args a;
    merak_args_default(&a);
    tap_ok(strcmp(merak_args_dtype(&a), "fp32") == 0 && !merak_args_bf16(&a), "the CPU's default is fp32: %s",
           merak_args_dtype(&a));
    a.dtype = "bf16";
    tap_ok(strcmp(merak_args_dtype(&a), "bf16") == 0 && merak_args_bf16(&a), "bf16 asked for on the CPU is bf16");
    a.dtype = NULL;
    a.device = "cuda";
    const char *want = merak_have_cuda() ? "bf16" : "fp32";
    tap_ok(strcmp(merak_args_dtype(&a), want) == 0 && merak_args_bf16(&a) == merak_have_cuda(),
           "--device cuda's default is %s in this build (%s with CUDA, else fp32: the device is refused)",
           merak_args_dtype(&a), want);
    a.dtype = "fp32";
    tap_ok(strcmp(merak_args_dtype(&a), "fp32") == 0 && !merak_args_bf16(&a), "fp32 asked for with cuda is fp32");
    a.dtype = "tf32";
    tap_ok(strcmp(merak_args_dtype(&a), "tf32") == 0 && !merak_args_bf16(&a), "tf32 asked for with cuda is tf32");
}

int main(void)
{
    test_op_table();
    test_status();
    test_dtype_default();
    test_param_counts();
    test_no_parameter_memory();
    test_shape_errors();
    test_rope_ops();
    test_first_error_kept();
    test_model_gradients("tiny-gpt2");
    test_model_gradients("tiny-llama");
    test_logits_in_place("tiny-gpt2");
    test_logits_in_place("tiny-llama");
    test_shared_grads("tiny-gpt2");
    test_shared_grads("tiny-llama");
    test_fresh_grads("tiny-gpt2");
    test_fresh_grads("tiny-llama");
    for (int k = 0; k < 3; k++)
        test_pass_refused(k);
    test_two_stages("tiny-gpt2");
    test_two_stages("tiny-llama");
    test_recompute("tiny-gpt2");
    test_recompute("tiny-llama");
    test_init();
    test_save_finite();
    test_lr();
    test_tp_shard();
    return tap_done();
}
