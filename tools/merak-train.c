/*
 * merak-train - trains a GPT-2 or LLaMA model (a preset or a Hugging Face
 * config.json) on llm.c token shards, printing loss, learning rate, gradient
 * norm, throughput and time left at every step.
 *
 * Exit status: 0 on success, 2 for usage errors (flags), 1 for everything
 * else (unreadable or invalid files, numerical failure).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "kernels.h"
#include "merak/merak.h"
#include "pipe/exec.h"
#include "train.h"

#define EXIT_USAGE 2

typedef struct args {
    const char *model, *init, *data, *metrics, *save_weights;
    int micro_batch, micro_batches, seq_len, steps, warmup, threads, log_every;
    float lr, min_lr, weight_decay, beta1, beta2, eps, clip;
    merak_lr_kind schedule;
    uint64_t seed;
} args;

static const char *prog = "merak-train";

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: %s --data GLOB [options]\n"
        "Train a GPT-2 or LLaMA model on llm.c token shards.\n"
        "\n"
        "Model and data:\n"
        "  --model NAME|FILE       preset name or Hugging Face config.json (default tiny-gpt2)\n"
        "  --init FILE             start from Hugging Face weights (.safetensors)\n"
        "  --data GLOB             token shards (llm.c format), matched in sorted order\n"
        "  --micro-batch B         sequences per micro-batch (default 4)\n"
        "  --micro-batches M       micro-batches per step, gradients accumulated (default 1)\n"
        "  --seq-len T             tokens per sequence (default 64)\n"
        "Optimisation:\n"
        "  --steps N               optimizer steps (default 10)\n"
        "  --lr LR                 peak learning rate (default 6e-4)\n"
        "  --warmup N              linear warmup steps, 0 = none (default 0)\n"
        "  --lr-schedule S         constant or cosine (default cosine)\n"
        "  --min-lr LR             final learning rate of the cosine schedule (default 0)\n"
        "  --weight-decay WD       AdamW decay on 2-d parameters (default 0.1)\n"
        "  --beta1 B1              AdamW beta1 (default 0.9)\n"
        "  --beta2 B2              AdamW beta2 (default 0.95)\n"
        "  --eps EPS               AdamW epsilon (default 1e-8)\n"
        "  --clip C                clip the global gradient norm to C, 0 = off (default 1.0)\n"
        "  --seed S                initialisation and dropout seed (default 1337)\n"
        "Running and output:\n"
        "  --threads N             CPU threads for kernels and BLAS (default: all cores)\n"
        "  --metrics FILE          append one JSON object per step to FILE\n"
        "  --log-every N           print every N-th step (default 1)\n"
        "  --save-weights FILE     write the trained weights (.safetensors, Hugging Face names)\n"
        "  --help                  show this help and exit\n"
        "  --version               show the version and exit\n"
        "\n"
        "See merak-train(1).\n", prog);
}

static _Noreturn void die_usage(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see --help)\n");
    exit(EXIT_USAGE);
}

static _Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(EXIT_FAILURE);
}

static long parse_int(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        die_usage("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi)
        die_usage("%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

static float parse_float(const char *flag, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        die_usage("%s: '%s' is not a number", flag, s);
    if (v < lo || v > hi)
        die_usage("%s: %g is out of range [%g, %g]", flag, v, lo, hi);
    return (float)v;
}

enum {
    OPT_MODEL = 256, OPT_INIT, OPT_DATA, OPT_MB, OPT_MBS, OPT_SEQ, OPT_STEPS, OPT_LR,
    OPT_WARMUP, OPT_SCHED, OPT_MINLR, OPT_WD, OPT_B1, OPT_B2, OPT_EPS, OPT_CLIP, OPT_SEED,
    OPT_THREADS, OPT_METRICS, OPT_LOGEVERY, OPT_SAVE, OPT_HELP, OPT_VERSION,
};

static void parse_args(int argc, char **argv, args *a)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, OPT_MODEL},
        {"init", required_argument, 0, OPT_INIT},
        {"data", required_argument, 0, OPT_DATA},
        {"micro-batch", required_argument, 0, OPT_MB},
        {"micro-batches", required_argument, 0, OPT_MBS},
        {"seq-len", required_argument, 0, OPT_SEQ},
        {"steps", required_argument, 0, OPT_STEPS},
        {"lr", required_argument, 0, OPT_LR},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"lr-schedule", required_argument, 0, OPT_SCHED},
        {"min-lr", required_argument, 0, OPT_MINLR},
        {"weight-decay", required_argument, 0, OPT_WD},
        {"beta1", required_argument, 0, OPT_B1},
        {"beta2", required_argument, 0, OPT_B2},
        {"eps", required_argument, 0, OPT_EPS},
        {"clip", required_argument, 0, OPT_CLIP},
        {"seed", required_argument, 0, OPT_SEED},
        {"threads", required_argument, 0, OPT_THREADS},
        {"metrics", required_argument, 0, OPT_METRICS},
        {"log-every", required_argument, 0, OPT_LOGEVERY},
        {"save-weights", required_argument, 0, OPT_SAVE},
        {"help", no_argument, 0, OPT_HELP},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *a = (args){
        .model = "tiny-gpt2", .micro_batch = 4, .micro_batches = 1, .seq_len = 64,
        .steps = 10, .warmup = 0, .threads = ncpu > 0 ? (int)ncpu : 1, .log_every = 1,
        .lr = 6e-4f, .min_lr = 0, .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f,
        .eps = 1e-8f, .clip = 1.0f, .schedule = MERAK_LR_COSINE, .seed = 1337,
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: a->model = optarg; break;
        case OPT_INIT: a->init = optarg; break;
        case OPT_DATA: a->data = optarg; break;
        case OPT_MB: a->micro_batch = (int)parse_int("--micro-batch", optarg, 1, 1 << 20); break;
        case OPT_MBS: a->micro_batches = (int)parse_int("--micro-batches", optarg, 1, 1 << 20); break;
        case OPT_SEQ: a->seq_len = (int)parse_int("--seq-len", optarg, 1, 1 << 24); break;
        case OPT_STEPS: a->steps = (int)parse_int("--steps", optarg, 0, INT_MAX); break;
        case OPT_LR: a->lr = parse_float("--lr", optarg, 0, 10); break;
        case OPT_WARMUP: a->warmup = (int)parse_int("--warmup", optarg, 0, INT_MAX); break;
        case OPT_SCHED:
            if (strcmp(optarg, "constant") == 0)
                a->schedule = MERAK_LR_CONSTANT;
            else if (strcmp(optarg, "cosine") == 0)
                a->schedule = MERAK_LR_COSINE;
            else
                die_usage("--lr-schedule: '%s' is not constant or cosine", optarg);
            break;
        case OPT_MINLR: a->min_lr = parse_float("--min-lr", optarg, 0, 10); break;
        case OPT_WD: a->weight_decay = parse_float("--weight-decay", optarg, 0, 10); break;
        case OPT_B1: a->beta1 = parse_float("--beta1", optarg, 0, 0.999999999); break;
        case OPT_B2: a->beta2 = parse_float("--beta2", optarg, 0, 0.999999999); break;
        case OPT_EPS: a->eps = parse_float("--eps", optarg, 0, 1); break;
        case OPT_CLIP: a->clip = parse_float("--clip", optarg, 0, 1e30); break;
        case OPT_SEED: a->seed = (uint64_t)parse_int("--seed", optarg, 0, LONG_MAX); break;
        case OPT_THREADS: a->threads = (int)parse_int("--threads", optarg, 1, 4096); break;
        case OPT_METRICS: a->metrics = optarg; break;
        case OPT_LOGEVERY: a->log_every = (int)parse_int("--log-every", optarg, 1, INT_MAX); break;
        case OPT_SAVE: a->save_weights = optarg; break;
        case OPT_HELP: usage(stdout); exit(0);
        case OPT_VERSION: printf("merak-train %s\n", MERAK_VERSION_STRING); exit(0);
        case ':': die_usage("%s needs a value", argv[optind - 1]);
        default: die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die_usage("unexpected argument '%s'", argv[optind]);
    if (!a->data)
        die_usage("--data is required");
    if (a->min_lr > a->lr)
        die_usage("--min-lr %g is above --lr %g", a->min_lr, a->lr);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { stop_requested = sig; }

static void fmt_duration(double s, char *buf, size_t len)
{
    if (s < 90)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, len, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(buf, len, "%.0fh%02.0fm", floor(s / 3600), fmod(s / 60, 60));
}

static uint64_t mix_seed(uint64_t seed, uint64_t n)
{
    uint64_t z = seed ^ (n * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 29);
}

int main(int argc, char **argv)
{
    args a;
    char err[512];
    parse_args(argc, argv, &a);

    merak_model_config cfg;
    if (merak_model_config_resolve(a.model, &cfg, err, sizeof err) < 0) {
        /* An unknown preset is a bad flag value; a bad file is not. */
        fprintf(stderr, "%s: %s\n", prog, err);
        return strchr(a.model, '/') || strstr(a.model, ".json") ? EXIT_FAILURE : EXIT_USAGE;
    }
    if (merak_model_config_check(&cfg, err, sizeof err) < 0)
        die("%s: %s", a.model, err);
    if (a.seq_len > cfg.max_positions)
        die_usage("--seq-len %d is beyond the model's %d positions", a.seq_len, cfg.max_positions);

    const merak_kernels *k = merak_kernels_cpu();
    merak_kernels_cpu_set_threads(a.threads);

    int B = a.micro_batch, T = a.seq_len, M = a.micro_batches;
    merak_graph *g = merak_model_build(&cfg, B, T, err, sizeof err);
    if (!g)
        die("%s", err);
    merak_exec *e;
    merak_exec_opts eo = {.op_begin = 0, .op_end = -1, .nslots = 1, .kernels = k};
    if (merak_exec_create(g, &eo, &e, err, sizeof err) < 0)
        die("%s", err);

    merak_data *data;
    if (merak_data_open(a.data, cfg.vocab_size, &data, err, sizeof err) < 0)
        die("%s", err);
    uint64_t W = merak_data_num_windows(data, B, T);
    if (W == 0)
        die("%s: %llu tokens are fewer than one window of %d x %d + 1", a.data,
            (unsigned long long)merak_data_num_tokens(data), B, T);

    if (a.init) {
        if (merak_weights_load(g, e, a.init, err, sizeof err) < 0)
            die("%s", err);
    } else {
        merak_init_params(g, e, a.seed);
    }
    merak_adamw_opts ao = {a.beta1, a.beta2, a.eps, a.weight_decay};
    merak_optim *opt = merak_optim_create(g, e, &ao);
    if (!opt)
        die("out of memory for the optimizer state");
    merak_lr_sched sched = {a.schedule, a.lr, a.min_lr, a.warmup, a.steps};

    FILE *metrics = NULL;
    if (a.metrics && !(metrics = fopen(a.metrics, "a")))
        die("%s: %s", a.metrics, strerror(errno));

    int ids_t = -1, tgt_t = -1;
    for (int t = 0; t < merak_graph_num_tensors(g); t++) {
        /* The builders name their inputs; custom graphs use the C API. */
        const char *name = g->tensors[t].name;
        if (g->tensors[t].kind == MERAK_T_INPUT && strcmp(name, "input_ids") == 0) ids_t = t;
        if (g->tensors[t].kind == MERAK_T_INPUT && strcmp(name, "targets") == 0) tgt_t = t;
    }
    int32_t *ids = merak_exec_tensor(e, 0, ids_t), *tgt = merak_exec_tensor(e, 0, tgt_t);

    printf("merak-train %s | model %s: %d layers, hidden %d, %d heads, vocab %d, %.2fM params\n",
           MERAK_VERSION_STRING, cfg.name, cfg.n_layer, cfg.hidden, cfg.n_head, cfg.vocab_size,
           (double)merak_graph_param_elems(g) / 1e6);
    printf("data %s: %d shard(s), %llu tokens, %llu windows of %dx%d | %d micro-batch(es) per step"
           " | %d thread(s) | activations %.1f MiB\n",
           a.data, merak_data_num_shards(data), (unsigned long long)merak_data_num_tokens(data),
           (unsigned long long)W, B, T, M, a.threads,
           (double)merak_exec_arena_bytes(e) / (1 << 20));
    fflush(stdout);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    merak_exec_set_loss_scale(e, 1.0f / (float)M);
    double t_start = now(), tokens_per_step = (double)B * T * M;
    int step;
    for (step = 0; step < a.steps && !stop_requested; step++) {
        double t0 = now();
        merak_exec_zero_grads(e);
        double loss = 0;
        for (int j = 0; j < M; j++) {
            uint64_t w = ((uint64_t)step * (uint64_t)M + (uint64_t)j) % W;
            if (merak_data_window(data, w, B, T, ids, tgt, err, sizeof err) < 0)
                die("%s", err);
            merak_exec_forward(e, 0, mix_seed(a.seed, (uint64_t)step * M + j));
            merak_exec_backward(e, 0);
            loss += merak_exec_loss(e, 0);
        }
        loss /= M;
        double norm = merak_grad_norm(e, k);
        if (!isfinite(loss) || !isfinite(norm))
            die("step %d: loss %g, gradient norm %g: training diverged", step, loss, norm);
        merak_clip_grads(e, k, norm, a.clip);
        float lr = merak_lr_at(&sched, step);
        merak_optim_step(opt, e, k, lr);

        double dt = now() - t0, elapsed = now() - t_start;
        double tps = tokens_per_step / dt;
        double left = elapsed / (step + 1) * (a.steps - step - 1);
        if (metrics) {
            fprintf(metrics,
                    "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                    "\"tokens_per_s\": %.6g, \"step_ms\": %.6g}\n",
                    step, loss, norm, lr, tps, dt * 1e3);
            if (fflush(metrics) != 0)
                die("%s: %s", a.metrics, strerror(errno));
        }
        if (step % a.log_every == 0 || step == a.steps - 1) {
            char eta[32];
            fmt_duration(left, eta, sizeof eta);
            printf("step %5d/%d | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | %.1f ms | left %s\n",
                   step, a.steps, loss, lr, norm, tps, dt * 1e3, eta);
            fflush(stdout);
        }
    }
    if (stop_requested)
        fprintf(stderr, "%s: stopped by signal %d after %d steps\n", prog, (int)stop_requested, step);

    int rc = 0;
    if (a.save_weights) {
        if (merak_weights_save(g, e, a.save_weights, cfg.name, err, sizeof err) < 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            rc = EXIT_FAILURE;
        } else {
            printf("saved weights to %s\n", a.save_weights);
        }
    }
    if (metrics && fclose(metrics) != 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, a.metrics, strerror(errno));
        rc = EXIT_FAILURE;
    }
    merak_optim_destroy(opt);
    merak_data_close(data);
    merak_exec_destroy(e);
    merak_graph_destroy(g);
    return stop_requested && rc == 0 ? 128 + (int)stop_requested : rc;
}
