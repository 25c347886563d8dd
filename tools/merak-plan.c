/*
 * merak-plan - answers questions about a training layout before it runs.
 *
 * This release has the schedule simulator: --simulate builds every stage's
 * instruction list with the same generators merak-train runs, executes them
 * together against per-instruction costs (the simulator in
 * runtime/pipe/schedule.c), and reports the step's makespan, bubble
 * fraction and the most micro-batches whose activations each stage holds at
 * once, or the deadlock.  --svg draws the simulated pipeline.
 * --list-models lists the model presets with their parameter counts,
 * counted on their graphs (which hold shapes, never parameter memory).
 * --partition-costs partitions a block list a user gives with any of the
 * partitioners (runtime/plan/partition.h) and predicts its 1F1B step.
 * --calibrate times every op of a model on this machine and writes a
 * device profile with the measured rates (runtime/plan/cost.h).
 *
 * Exit status: 0 on success, 2 for usage errors, 1 otherwise.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"
#include "cli.h"
#include "merak/merak.h"
#include "pipe/schedule.h"
#include "pipesvg.h"
#include "plan/cost.h"
#include "plan/partition.h"


static void usage(FILE *out)
{
    fprintf(out,
        "Usage: %s --simulate --schedule S --stages P --micro-batches M [options]\n"
        "       %s --list-models [--json]\n"
        "       %s --partition-costs FILE [--partition METHOD] [--json]\n"
        "       %s --calibrate FILE [--model M] [--micro-batch B] [--seq-len T] [--threads N]\n"
        "                  [--repeat R] [--device-profile D]\n"
        "Simulate one optimizer step of a pipeline schedule on P equal stages, list the\n"
        "model presets, partition a list of blocks into pipeline stages, or measure\n"
        "this machine's device profile.\n"
        "\n"
        "  --simulate              run the schedule simulator\n"
        "  --list-models           list the model presets: shapes and parameter counts\n"
        "  --partition-costs FILE  partition the blocks FILE lists (JSON: forward, backward,\n"
        "                          stages, micro_batches; optional comm, parameters)\n"
        "  --partition METHOD      uniform, parameters, autopipe or custom:S0,S1,... (default autopipe)\n"
        "  --calibrate FILE        time every op of a model's forward and backward here (CPU\n"
        "                          kernels) and write the measured device profile to FILE\n"
        "  --model M               calibrate on this preset or config.json (default demo-gpt2)\n"
        "  --micro-batch B         sequences per micro-batch to calibrate with (default 4)\n"
        "  --seq-len T             tokens per sequence to calibrate with (default 128)\n"
        "  --threads N             CPU threads for the kernels (default: all cores)\n"
        "  --repeat R              timed passes, after one warm-up (default 3)\n"
        "  --device-profile D      profile whose links the calibrated one keeps (default cpu)\n"
        "  --schedule S            gpipe, 1f1b, scp, zb-h1 or interleaved\n"
        "  --virtual-stages V      model chunks per stage for interleaved (2 to 64, default 2)\n"
        "  --stages P              pipeline stages (1 to 1024)\n"
        "  --micro-batches M       micro-batches per step (1 to 65536)\n"
        "  --fwd F                 forward time of one micro-batch on one stage (default 1)\n"
        "  --bwd B                 backward time, input and weight gradients (default 2)\n"
        "  --bwd-weight W          weight-gradient share of B for zb-h1 (default B/2)\n"
        "  --recompute R           none or full: every stage recomputes its activations (default none)\n"
        "  --recompute-cost C      time of a recompute (default F)\n"
        "  --comm X                time an activation or gradient takes to arrive (default 0)\n"
        "  --json                  print one JSON object instead of text\n"
        "  --svg FILE              draw the pipeline: one row per stage, one box per instruction\n"
        "  --help                  show this help and exit\n"
        "  --version               show the version and exit\n"
        "\n"
        "See merak-plan(1).\n", cli_prog, cli_prog, cli_prog, cli_prog);
}

typedef struct plan_opts {
    int simulate, list_models, json, stages, micro_batches, recompute, virtual_stages;
    int others;   /* options given that only --simulate takes */
    merak_schedule_kind schedule;
    const char *schedule_name, *svg;
    const char *costs_file, *partition;
    const char *calibrate, *model, *base;
    int micro_batch, seq_len, threads, repeat;
    int model_opts;   /* options given that only --calibrate takes */
    merak_sim_costs costs;
    int have_weight, have_rcost;
} plan_opts;

enum { OPT_SIM = 256, OPT_LIST, OPT_PCOSTS, OPT_PART, OPT_CALIB, OPT_MODEL, OPT_MB, OPT_SEQ, OPT_THREADS, OPT_REPEAT,
       OPT_PROFILE, OPT_SCHED, OPT_VIRTUAL, OPT_STAGES, OPT_MBS, OPT_FWD, OPT_BWD, OPT_BWDW, OPT_RC, OPT_RCOST,
       OPT_COMM, OPT_JSON, OPT_SVG, OPT_HELP, OPT_VERSION };

static void parse_args(int argc, char **argv, plan_opts *o)
{
    static const struct option opts[] = {
        {"simulate", no_argument, 0, OPT_SIM},
        {"list-models", no_argument, 0, OPT_LIST},
        {"partition-costs", required_argument, 0, OPT_PCOSTS},
        {"partition", required_argument, 0, OPT_PART},
        {"calibrate", required_argument, 0, OPT_CALIB},
        {"model", required_argument, 0, OPT_MODEL},
        {"micro-batch", required_argument, 0, OPT_MB},
        {"seq-len", required_argument, 0, OPT_SEQ},
        {"threads", required_argument, 0, OPT_THREADS},
        {"repeat", required_argument, 0, OPT_REPEAT},
        {"device-profile", required_argument, 0, OPT_PROFILE},
        {"schedule", required_argument, 0, OPT_SCHED},
        {"virtual-stages", required_argument, 0, OPT_VIRTUAL},
        {"stages", required_argument, 0, OPT_STAGES},
        {"micro-batches", required_argument, 0, OPT_MBS},
        {"fwd", required_argument, 0, OPT_FWD},
        {"bwd", required_argument, 0, OPT_BWD},
        {"bwd-weight", required_argument, 0, OPT_BWDW},
        {"recompute", required_argument, 0, OPT_RC},
        {"recompute-cost", required_argument, 0, OPT_RCOST},
        {"comm", required_argument, 0, OPT_COMM},
        {"json", no_argument, 0, OPT_JSON},
        {"svg", required_argument, 0, OPT_SVG},
        {"help", no_argument, 0, OPT_HELP},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (plan_opts){.costs = {1, 2, 1, 1, 0}, .model = "demo-gpt2", .base = "cpu", .micro_batch = 4, .seq_len = 128,
                     .threads = ncpu > 0 ? (int)ncpu : 1, .repeat = 3};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        o->others |= (c >= OPT_SCHED && c <= OPT_COMM) || c == OPT_SVG;
        o->model_opts |= c >= OPT_MODEL && c <= OPT_PROFILE;
        switch (c) {
        case OPT_SIM: o->simulate = 1; break;
        case OPT_LIST: o->list_models = 1; break;
        case OPT_PCOSTS: o->costs_file = optarg; break;
        case OPT_CALIB: o->calibrate = optarg; break;
        case OPT_MODEL: o->model = optarg; break;
        case OPT_MB: o->micro_batch = (int)cli_parse_int("--micro-batch", optarg, 1, 1 << 16); break;
        case OPT_SEQ: o->seq_len = (int)cli_parse_int("--seq-len", optarg, 1, 1 << 20); break;
        case OPT_THREADS: o->threads = (int)cli_parse_int("--threads", optarg, 1, 4096); break;
        case OPT_REPEAT: o->repeat = (int)cli_parse_int("--repeat", optarg, 1, 1000); break;
        case OPT_PROFILE: o->base = optarg; break;
        case OPT_PART: {
            char err[256];
            if (merak_partition_check(optarg, err, sizeof err) < 0)
                cli_die_usage("--partition: %s", err);
            o->partition = optarg;
            break;
        }
        case OPT_SCHED:
            if (merak_schedule_parse(optarg, &o->schedule) < 0)
                cli_die_usage("--schedule: '%s' is not %s", optarg, merak_schedule_names());
            o->schedule_name = optarg;
            break;
        case OPT_VIRTUAL: o->virtual_stages = (int)cli_parse_int("--virtual-stages", optarg, 1, 1024); break;
        case OPT_STAGES: o->stages = (int)cli_parse_int("--stages", optarg, 1, 1024); break;
        case OPT_MBS: o->micro_batches = (int)cli_parse_int("--micro-batches", optarg, 1, 65536); break;
        case OPT_FWD: o->costs.fwd = cli_parse_double("--fwd", optarg, 0, 1e12); break;
        case OPT_BWD: o->costs.bwd = cli_parse_double("--bwd", optarg, 0, 1e12); break;
        case OPT_BWDW:
            o->costs.bwd_weight = cli_parse_double("--bwd-weight", optarg, 0, 1e12);
            o->have_weight = 1;
            break;
        case OPT_RC:
            if (strcmp(optarg, "none") != 0 && strcmp(optarg, "full") != 0)
                cli_die_usage("--recompute: '%s' is not none or full (the simulator's stages are "
                                "abstract: merak-train picks layers for the other policies)", optarg);
            o->recompute = optarg[0] == 'f';
            break;
        case OPT_RCOST:
            o->costs.recompute = cli_parse_double("--recompute-cost", optarg, 0, 1e12);
            o->have_rcost = 1;
            break;
        case OPT_COMM: o->costs.comm = cli_parse_double("--comm", optarg, 0, 1e12); break;
        case OPT_JSON: o->json = 1; break;
        case OPT_SVG: o->svg = optarg; break;
        case OPT_HELP: usage(stdout); exit(0);
        case OPT_VERSION: printf("merak-plan %s\n", MERAK_VERSION_STRING); exit(0);
        case ':': cli_die_usage("%s needs a value", argv[optind - 1]);
        default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        cli_die_usage("unexpected argument '%s'", argv[optind]);
    if (o->partition && !o->costs_file)
        cli_die_usage("--partition needs --partition-costs");
    if (o->simulate + o->list_models + !!o->costs_file + !!o->calibrate > 1)
        cli_die_usage("give one of --simulate, --list-models, --partition-costs and --calibrate");
    if (o->model_opts && !o->calibrate)
        cli_die_usage("--model, --micro-batch, --seq-len, --threads, --repeat and --device-profile go with --calibrate");
    if (o->list_models || o->costs_file || o->calibrate) {
        if (o->others)
            cli_die_usage("%s takes no simulator options",
                          o->list_models ? "--list-models" : o->costs_file ? "--partition-costs" : "--calibrate");
        if (o->calibrate && o->json)
            cli_die_usage("--calibrate writes its profile to the file it names (no --json)");
        return;
    }
    if (!o->simulate)
        cli_die_usage("nothing to do: give --simulate, --list-models, --partition-costs or --calibrate");
    if (!o->schedule_name || !o->stages || !o->micro_batches)
        cli_die_usage("--simulate needs --schedule, --stages and --micro-batches");
    if (o->virtual_stages && o->schedule != MERAK_SCHEDULE_INTERLEAVED)
        cli_die_usage("--virtual-stages needs --schedule interleaved");
    o->virtual_stages = merak_virtual_stages(o->schedule, o->virtual_stages);
    if (!o->have_weight)
        o->costs.bwd_weight = o->costs.bwd / 2;
    if (!o->have_rcost)
        o->costs.recompute = o->costs.fwd;
    if (o->costs.bwd_weight > o->costs.bwd)
        cli_die_usage("--bwd-weight %g is more than the backward (--bwd %g) it is a share of",
            o->costs.bwd_weight, o->costs.bwd);
    if (o->have_rcost && !o->recompute)
        cli_die_usage("--recompute-cost needs --recompute full");
}

/* ------------------------------------------------------------------ SVG */

static void on_compute(void *ctx, int stage, const merak_instr *in, double start, double end)
{
    merak_trace_add(ctx, stage, in->kind, in->mb, in->chunk, start, end);
}

/* ------------------------------------------------------------------ presets */

/* Every preset's shape and parameter count, counted on its graph (one
 * token: the graph holds shapes, so even gpt3-175b costs no parameter
 * memory). */
static void list_models(int json)
{
    json_t *arr = json ? json_array() : NULL;
    if (!json)
        printf("%-14s %-5s %6s %6s %5s %4s %6s %7s %9s %16s\n", "preset", "arch", "layers", "hidden", "heads",
               "kv", "ffn", "vocab", "positions", "parameters");
    for (const char *const *n = merak_model_preset_names(); *n; n++) {
        merak_model_config c;
        char err[512];
        merak_model_preset(*n, &c);
        merak_graph *g = merak_model_build(&c, 1, 1, err, sizeof err);
        if (!g)
            cli_die("%s: %s", *n, err);
        long long params = (long long)merak_graph_param_elems(g);
        merak_graph_destroy(g);
        const char *arch = c.arch == MERAK_ARCH_GPT2 ? "gpt2" : "llama";
        if (json) {
            json_t *m = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:I}", "name", *n, "arch", arch,
                                  "layers", c.n_layer, "hidden", c.hidden, "heads", c.n_head, "kv_heads", c.n_kv_head,
                                  "ffn", c.ffn_hidden, "vocab", c.vocab_size, "positions", c.max_positions,
                                  "tied_embeddings", c.tie_embeddings, "parameters", (json_int_t)params);
            if (!m || json_array_append_new(arr, m) < 0)
                cli_die("out of memory");
        } else {
            char size[32];
            snprintf(size, sizeof size, params >= 1000000000 ? "%.2fB" : "%.1fM",
                     params >= 1000000000 ? params / 1e9 : params / 1e6);
            printf("%-14s %-5s %6d %6d %5d %4d %6d %7d %9d %16lld  %s\n", *n, arch, c.n_layer, c.hidden, c.n_head,
                   c.n_kv_head, c.ffn_hidden, c.vocab_size, c.max_positions, params, size);
        }
    }
    if (json) {
        json_t *j = json_pack("{s:o}", "models", arr);
        if (!j || json_dumpf(j, stdout, 0) < 0)
            cli_die("cannot write the JSON answer");
        putchar('\n');
        json_decref(j);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the list: %s", strerror(errno));
}

/* ------------------------------------------------------------------ block lists */

/* JSON array key of n numbers >= 0 into out (n = -1: any length, returned);
 * exits 1 naming the file and the key otherwise. */
static int read_numbers(json_t *root, const char *file, const char *key, int n, double **out)
{
    json_t *a = json_object_get(root, key);
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 1000000 ||
        (n >= 0 && (int)json_array_size(a) != n))
        cli_die(n >= 0 ? "%s: \"%s\" must be an array of %d numbers" : "%s: \"%s\" must be a non-empty array of numbers",
                file, key, n);
    n = (int)json_array_size(a);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        double x = json_is_number(v) ? json_number_value(v) : -1;
        if (!(x >= 0 && x < 1e300))
            cli_die("%s: \"%s\"[%d] is not a number >= 0", file, key, i);
        if (out)
            (*out)[i] = x;
    }
    return n;
}

static int read_count(json_t *root, const char *file, const char *key, int lo)
{
    json_t *v = json_object_get(root, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > 1000000)
        cli_die("%s: \"%s\" must be an integer from %d to 1000000", file, key, lo);
    return (int)json_integer_value(v);
}

/* --partition-costs: partition FILE's blocks and print the stage starts,
 * their costs and the predicted 1F1B step. */
static void partition_costs(const plan_opts *o)
{
    json_error_t je;
    const char *file = o->costs_file, *method = o->partition ? o->partition : "autopipe";
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        cli_die("%s:%d: %s", file, je.line, je.text);
    if (!json_is_object(root))
        cli_die("%s: not a JSON object", file);
    const char *known[] = {"forward", "backward", "stages", "micro_batches", "comm", "parameters"};
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        size_t k = 0;
        while (k < sizeof known / sizeof *known && strcmp(key, known[k]) != 0)
            k++;
        if (k == sizeof known / sizeof *known)
            cli_die("%s: unknown key \"%s\" (forward, backward, stages, micro_batches, comm, parameters)", file, key);
    }
    merak_blocks b;
    int n = read_numbers(root, file, "forward", -1, NULL);
    if (merak_blocks_alloc(&b, n) < 0)
        cli_die("out of memory");
    read_numbers(root, file, "forward", n, &b.fwd);
    read_numbers(root, file, "backward", n, &b.bwd);
    if (json_object_get(root, "parameters"))
        read_numbers(root, file, "parameters", n, &b.params);
    else if (strcmp(method, "parameters") == 0)
        cli_die("%s: the parameters method needs \"parameters\" (each block's parameter count)", file);
    if (json_object_get(root, "comm") && n > 1) {
        double *c = b.comm + 1;   /* comm[i]: the cut after block i, before block i + 1 */
        read_numbers(root, file, "comm", n - 1, &c);
    }
    int P = read_count(root, file, "stages", 1), M = read_count(root, file, "micro_batches", 1);
    json_decref(root);
    int *starts = malloc((size_t)P * sizeof *starts);
    if (!starts)
        cli_die("out of memory");
    double step;
    char err[512];
    int rc = merak_partition_blocks(&b, P, M, method, starts, &step, err, sizeof err);
    if (rc == -2)
        cli_die_usage("%s: %s", file, err);
    if (rc < 0)
        cli_die("%s: %s", file, err);
    json_t *js = json_array(), *jc = json_array();
    for (int s = 0; s < P; s++) {
        int e = s + 1 < P ? starts[s + 1] : n;
        double c = 0;
        for (int i = starts[s]; i < e; i++)
            c += b.fwd[i] + b.bwd[i];
        json_array_append_new(js, json_integer(starts[s]));
        json_array_append_new(jc, json_real(c));
    }
    if (o->json) {
        json_t *j = json_pack("{s:s, s:o, s:o, s:f}", "method", method, "starts", js, "stage_costs", jc,
                              "predicted_step", step);
        if (!j || json_dumpf(j, stdout, JSON_REAL_PRECISION(12)) < 0)
            cli_die("cannot write the JSON answer");
        putchar('\n');
        json_decref(j);
    } else {
        printf("%s: %d blocks into %d stages, %d micro-batches: predicted 1F1B step %g\n", method, n, P, M, step);
        printf("%5s %7s %7s %14s\n", "stage", "first", "blocks", "fwd+bwd");
        for (int s = 0; s < P; s++)
            printf("%5d %7d %7d %14g\n", s, starts[s], (s + 1 < P ? starts[s + 1] : n) - starts[s],
                   json_real_value(json_array_get(jc, (size_t)s)));
        json_decref(js), json_decref(jc);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the answer: %s", strerror(errno));
    free(starts);
    merak_blocks_free(&b);
}

/* ------------------------------------------------------------------ calibration */

/* --calibrate: the base profile's links and memory, this machine's
 * measured compute rates, written to the file named. */
static void calibrate(const plan_opts *o)
{
    char err[1024];
    merak_model_config cfg;
    merak_device d;
    cli_model(o->model, &cfg);
    if (o->seq_len > cfg.max_positions)
        cli_die_usage("--seq-len %d is beyond the model's %d positions", o->seq_len, cfg.max_positions);
    int rc = merak_device_load(o->base, &d, err, sizeof err);
    if (rc == -2)
        cli_die_usage("--device-profile: %s", err);
    if (rc < 0)
        cli_die("%s", err);
    merak_graph *g = merak_model_build(&cfg, o->micro_batch, o->seq_len, err, sizeof err);
    if (!g)
        cli_die("%s: %s", o->model, err);
    merak_kernels_cpu_set_threads(o->threads);
    printf("calibrating on %s (micro-batch %d x %d tokens, %d thread(s)), %d timed passes after a warm-up\n",
           o->model, o->micro_batch, o->seq_len, o->threads, o->repeat);
    fflush(stdout);
    if (merak_device_calibrate(g, merak_kernels_cpu(), o->repeat, &d, err, sizeof err) < 0)
        cli_die("%s", err);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)   /* the kernels ran in host memory: its size */
        d.memory = (double)pages * (double)page;
    printf("%-14s %16s %16s  (FLOP/s for linear and attention, bytes/s for the rest)\n", "op", "forward",
           "backward");
    for (int t = 0; t < MERAK_OP_COUNT_; t++)
        if (d.op_fwd[t] > 0)
            printf("%-14s %16.4g %16.4g\n", merak_op_name((merak_op_type)t), d.op_fwd[t], d.op_bwd[t]);
    printf("matrix %.4g TFLOP/s, memory %.4g GB/s, %.1f GB; links and latency from %s\n", d.matmul / 1e12,
           d.mem_bw / 1e9, d.memory / 1e9, o->base);
    merak_atomic *a;
    if (merak_atomic_open(o->calibrate, &a, err, sizeof err) < 0)
        cli_die("%s", err);
    merak_device_write(&d, merak_atomic_file(a));
    if (merak_atomic_commit(a, err, sizeof err) < 0)
        cli_die("%s", err);
    printf("wrote %s\n", o->calibrate);
    merak_graph_destroy(g);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    plan_opts o;
    char err[1024];
    cli_prog = "merak-plan";
    parse_args(argc, argv, &o);
    if (o.list_models) {
        list_models(o.json);
        return 0;
    }
    if (o.costs_file) {
        partition_costs(&o);
        return 0;
    }
    if (o.calibrate) {
        calibrate(&o);
        return 0;
    }

    unsigned char *rc = malloc((size_t)o.stages);
    merak_schedule *sch = calloc((size_t)o.stages, sizeof *sch);
    int *peak = calloc((size_t)o.stages, sizeof *peak);
    const int V = o.virtual_stages, Q = o.stages * V;
    merak_sim_costs *costs = malloc((size_t)Q * sizeof *costs);
    if (!rc || !sch || !peak || !costs)
        cli_die("out of memory");
    memset(rc, o.recompute, (size_t)o.stages);
    /* equal stages; a chunk of one costs 1/V of it, its transfers the same */
    for (int q = 0; q < Q; q++)
        costs[q] = (merak_sim_costs){o.costs.fwd / V, o.costs.bwd / V, o.costs.bwd_weight / V,
                                     o.costs.recompute / V, o.costs.comm};
    merak_schedule_spec sp = {o.schedule, o.stages, o.micro_batches, rc, o.virtual_stages};
    if (merak_schedule_check(&sp, err, sizeof err) < 0)
        cli_die_usage("%s", err);
    if (merak_schedule_build_all(&sp, sch, err, sizeof err) < 0)
        cli_die("%s", err);

    char chunks[48] = "";   /* " (V chunks each)" for interleaved */
    if (o.virtual_stages > 1)
        snprintf(chunks, sizeof chunks, " (%d chunks each)", o.virtual_stages);
    merak_trace bs = {0};
    merak_sim_result r = {.peak = peak};
    if (o.svg) {
        r.on_compute = on_compute;
        r.ctx = &bs;
    }
    if (merak_schedule_simulate(sch, o.stages, costs, &r, err, sizeof err) < 0)
        cli_die("%s", err);
    if (o.svg) {
        char title[256];
        snprintf(title, sizeof title, "%s, %d stages%s, %d micro-batches%s: makespan %g, bubble %.1f%%",
                 o.schedule_name, o.stages, chunks, o.micro_batches, o.recompute ? ", recompute full" : "",
                 r.makespan, 100 * r.bubble);
        if (pipesvg_write(&bs, o.svg, title, o.stages, NULL, 0, r.makespan, "", err, sizeof err) < 0)
            cli_die("%s", err);
    }

    if (o.json) {
        json_t *pk = json_array();
        for (int i = 0; i < o.stages; i++)
            json_array_append_new(pk, peak[i] % o.virtual_stages ? json_real((double)peak[i] / o.virtual_stages)
                                                                 : json_integer(peak[i] / o.virtual_stages));
        json_t *j = json_pack("{s:f, s:f, s:o}", "makespan", r.makespan, "bubble", r.bubble,
                              "peak_activations", pk);
        if (!j || json_dumpf(j, stdout, JSON_REAL_PRECISION(10)) < 0)
            cli_die("cannot write the JSON answer");
        putchar('\n');
        json_decref(j);
    } else {
        printf("%s, %d stages%s, %d micro-batches, recompute %s: forward %g, backward %g (weight %g), "
               "recompute %g, communication %g\n",
               o.schedule_name, o.stages, chunks, o.micro_batches, o.recompute ? "full" : "none", o.costs.fwd,
               o.costs.bwd, o.costs.bwd_weight, o.costs.recompute, o.costs.comm);
        printf("makespan %g | bubble %.2f%% | peak activations (micro-batches) per stage:", r.makespan,
               100 * r.bubble);
        for (int i = 0; i < o.stages; i++)
            printf(" %g", (double)peak[i] / o.virtual_stages);
        printf("\n");
        if (o.svg)
            printf("drew %s\n", o.svg);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the answer: %s", strerror(errno));
    for (int i = 0; i < o.stages; i++)
        merak_schedule_free(&sch[i]);
    merak_trace_free(&bs);
    free(sch), free(peak), free(costs), free(rc);
    return 0;
}
