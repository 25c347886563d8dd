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
 * --gpus plans a layout of a model: each stage's memory and the predicted
 * step (runtime/plan/layout.h); with --auto, the fastest layout.
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

#include "cli.h"
#include "internal.h"
#include "merak/merak.h"
#include "pipesvg.h"


static void usage(FILE *out)
{
    fprintf(out,
        "Usage: %s --gpus N --model M [--dp D --tp T --pp P | --auto] [layout options]\n"
        "       %s --simulate --schedule S --stages P --micro-batches M [options]\n"
        "       %s --list-models [--json]\n"
        "       %s --partition-costs FILE [--partition METHOD] [--json]\n"
        "       %s --calibrate FILE [--model M] [--micro-batch B] [--seq-len T] [--threads N]\n"
        "                  [--repeat R] [--device cpu|cuda] [--dtype fp32|bf16] [--device-profile D]\n"
        "Plan a training layout (memory per stage, step time) or find the fastest, simulate\n"
        "a pipeline schedule, list the model presets, partition a list of blocks into\n"
        "pipeline stages, or measure this machine's device profile.\n"
        "\n"
        "  --gpus N                plan a layout of N GPUs (a multiple of --gpus-per-node, or fewer)\n"
        "  --model M               preset or config.json (calibration default: demo-gpt2)\n"
        "  --dp D, --tp T, --pp P  the layout (tp, pp default 1; dp N/(tp*pp))\n"
        "  --auto                  try every layout, schedule, recompute policy and ZeRO setting not\n"
        "                          fixed by a flag; print the fastest that fits and its runners-up\n"
        "  --gpus-per-node G       GPUs per node; tp stays inside one (default 8)\n"
        "  --gpu DEVICE            device profile: name or file (default h100-80g)\n"
        "  --global-batch S        sequences per step over all replicas (default micro-batch x N)\n"
        "  --micro-batch B         sequences per micro-batch (layouts: default 1; calibration: 4)\n"
        "  --seq-len T             tokens per sequence (layouts: default the model's positions;\n"
        "                          calibration: 128)\n"
        "  --zero Z                1: ZeRO-1 optimizer sharding over dp; 0: off (default 0)\n"
        "  --dtype T               fp32 (default), tf32 (planned as fp32) or bf16 (activations in\n"
        "                          bf16 storage: half the activation memory and pipeline transfers);\n"
        "                          calibration: the arithmetic timed (fp32 or bf16)\n"
        "  --simulate              run the schedule simulator\n"
        "  --list-models           list the model presets: shapes and parameter counts\n"
        "  --partition-costs FILE  partition the blocks FILE lists (JSON: forward, backward,\n"
        "                          stages, micro_batches; optional comm, parameters)\n"
        "  --partition METHOD      uniform, parameters, autopipe or custom:S0,S1,... (default autopipe)\n"
        "  --calibrate FILE        time every op of a model's forward and backward here, print\n"
        "                          their roofline, and write the measured device profile to FILE\n"
        "  --device D              calibrate the cpu (default) or the cuda kernels\n"
        "  --threads N             CPU threads for the kernels (default: the cores it may\n"
        "                          run on)\n"
        "  --repeat R              timed passes, after one warm-up (default 3)\n"
        "  --device-profile D      profile whose links the calibrated one keeps (default cpu;\n"
        "                          h100-80g with --device cuda)\n"
        "  --schedule S            gpipe, 1f1b, scp, zb-h1 or interleaved (layouts: default 1f1b;\n"
        "                          --auto: all of them)\n"
        "  --virtual-stages V      model chunks per stage for interleaved (2 to 64, default 2)\n"
        "  --stages P              pipeline stages (1 to 1024)\n"
        "  --micro-batches M       micro-batches per step (1 to 65536)\n"
        "  --fwd F                 forward time of one micro-batch on one stage (default 1)\n"
        "  --bwd B                 backward time, input and weight gradients (default 2)\n"
        "  --bwd-weight W          weight-gradient share of B for zb-h1 (default B/2)\n"
        "  --recompute R           layouts: none, full, stage-aware[=R0] or budget=GB (default none);\n"
        "                          simulator: none or full, every stage recomputes its activations\n"
        "  --recompute-cost C      time of a recompute (default F)\n"
        "  --comm X                time an activation or gradient takes to arrive (default 0)\n"
        "  --json                  print one JSON object instead of text\n"
        "  --svg FILE              draw the pipeline: one row per stage, one box per instruction\n"
        "  --help                  show this help and exit\n"
        "  --version               show the version and exit\n"
        "\n"
        "See merak-plan(1).\n", cli_prog, cli_prog, cli_prog, cli_prog, cli_prog);
}

typedef struct plan_opts {
    int mode;     /* one of the MODE_* bits */
    int json, stages, micro_batches, virtual_stages;
    merak_schedule_kind schedule;
    const char *schedule_name, *svg, *recompute_name;
    const char *costs_file, *partition;
    const char *calibrate, *model, *base, *gpu, *device;
    int micro_batch, seq_len, threads, repeat;
    int gpus, gpus_per_node, dp, tp, pp, zero, zero_given, autoplan;
    const char *dtype;     /* "fp32", "tf32" or "bf16" */
    int bf16, float_storage;   /* float_storage: MERAK_BF16_STORAGE=float */
    long global_batch;
    merak_sim_costs costs;
    int have_weight, have_rcost;
} plan_opts;

/* What merak-plan does: one mode per run, named by its option. */
enum { MODE_SIM = 1, MODE_LIST = 2, MODE_PCOSTS = 4, MODE_CALIB = 8, MODE_LAYOUT = 16 };

enum { OPT_SIM = 256, OPT_LIST, OPT_PCOSTS, OPT_CALIB, OPT_GPUS, OPT_PART, OPT_MODEL, OPT_MB, OPT_SEQ,
       OPT_THREADS, OPT_REPEAT, OPT_PROFILE, OPT_DEVICE, OPT_GPN, OPT_GPU, OPT_GBATCH, OPT_DP, OPT_TP, OPT_PP, OPT_ZERO,
       OPT_AUTO, OPT_SCHED, OPT_VIRTUAL, OPT_STAGES, OPT_MBS, OPT_FWD, OPT_BWD, OPT_BWDW, OPT_RC, OPT_RCOST,
       OPT_COMM, OPT_JSON, OPT_SVG, OPT_DTYPE, OPT_HELP, OPT_VERSION, OPT_END_ };

/* The modes each option goes with. */
static int option_modes(int opt)
{
    switch (opt) {
    case OPT_SIM: case OPT_STAGES: case OPT_MBS: case OPT_FWD: case OPT_BWD: case OPT_BWDW: case OPT_RCOST:
    case OPT_COMM: case OPT_SVG: return MODE_SIM;
    case OPT_LIST: return MODE_LIST;
    case OPT_PCOSTS: return MODE_PCOSTS;
    case OPT_PART: return MODE_PCOSTS | MODE_LAYOUT;
    case OPT_CALIB: case OPT_THREADS: case OPT_REPEAT: case OPT_PROFILE: case OPT_DEVICE: return MODE_CALIB;
    case OPT_MODEL: case OPT_MB: case OPT_SEQ: case OPT_DTYPE: return MODE_CALIB | MODE_LAYOUT;
    case OPT_GPUS: case OPT_GPN: case OPT_GPU: case OPT_GBATCH: case OPT_DP: case OPT_TP: case OPT_PP:
    case OPT_ZERO: case OPT_AUTO: return MODE_LAYOUT;
    case OPT_SCHED: case OPT_VIRTUAL: case OPT_RC: return MODE_SIM | MODE_LAYOUT;
    case OPT_JSON: return MODE_SIM | MODE_LIST | MODE_PCOSTS | MODE_LAYOUT;
    }
    return 0;
}

static const char *mode_flag(int mode)
{
    return mode == MODE_SIM ? "--simulate" : mode == MODE_LIST ? "--list-models" : mode == MODE_PCOSTS
           ? "--partition-costs" : mode == MODE_CALIB ? "--calibrate" : "--gpus";
}

static void parse_args(int argc, char **argv, plan_opts *o)
{
    static const struct option opts[] = {
        {"simulate", no_argument, 0, OPT_SIM},
        {"list-models", no_argument, 0, OPT_LIST},
        {"partition-costs", required_argument, 0, OPT_PCOSTS},
        {"partition", required_argument, 0, OPT_PART},
        {"calibrate", required_argument, 0, OPT_CALIB},
        {"gpus", required_argument, 0, OPT_GPUS},
        {"gpus-per-node", required_argument, 0, OPT_GPN},
        {"gpu", required_argument, 0, OPT_GPU},
        {"global-batch", required_argument, 0, OPT_GBATCH},
        {"dp", required_argument, 0, OPT_DP},
        {"tp", required_argument, 0, OPT_TP},
        {"pp", required_argument, 0, OPT_PP},
        {"zero", required_argument, 0, OPT_ZERO},
        {"dtype", required_argument, 0, OPT_DTYPE},
        {"auto", no_argument, 0, OPT_AUTO},
        {"model", required_argument, 0, OPT_MODEL},
        {"micro-batch", required_argument, 0, OPT_MB},
        {"seq-len", required_argument, 0, OPT_SEQ},
        {"threads", required_argument, 0, OPT_THREADS},
        {"repeat", required_argument, 0, OPT_REPEAT},
        {"device-profile", required_argument, 0, OPT_PROFILE},
        {"device", required_argument, 0, OPT_DEVICE},
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
    *o = (plan_opts){.costs = {1, 2, 1, 1, 0}, .model = "demo-gpt2", .gpu = "h100-80g", .device = "cpu",
                     .threads = cli_default_threads(), .repeat = 3, .gpus_per_node = 8};
    unsigned char given[OPT_END_ - OPT_SIM] = {0};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (c >= OPT_SIM && c < OPT_END_)
            given[c - OPT_SIM] = 1;
        switch (c) {
        case OPT_SIM: o->mode |= MODE_SIM; break;
        case OPT_LIST: o->mode |= MODE_LIST; break;
        case OPT_PCOSTS: o->mode |= MODE_PCOSTS, o->costs_file = optarg; break;
        case OPT_CALIB: o->mode |= MODE_CALIB, o->calibrate = optarg; break;
        case OPT_GPUS: o->mode |= MODE_LAYOUT, o->gpus = (int)cli_parse_int("--gpus", optarg, 1, 1 << 24); break;
        case OPT_GPN: o->gpus_per_node = (int)cli_parse_int("--gpus-per-node", optarg, 1, 1024); break;
        case OPT_GPU: o->gpu = optarg; break;
        case OPT_GBATCH: o->global_batch = cli_parse_int("--global-batch", optarg, 1, 1L << 30); break;
        case OPT_DP: o->dp = (int)cli_parse_int("--dp", optarg, 1, 1 << 24); break;
        case OPT_TP: o->tp = (int)cli_parse_int("--tp", optarg, 1, 1024); break;
        case OPT_PP: o->pp = (int)cli_parse_int("--pp", optarg, 1, 1024); break;
        case OPT_ZERO: o->zero = (int)cli_parse_int("--zero", optarg, 0, 1), o->zero_given = 1; break;
        case OPT_AUTO: o->autoplan = 1; break;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "tf32") != 0 && strcmp(optarg, "bf16") != 0)
                cli_die_usage("--dtype: '%s' is not fp32, tf32 or bf16", optarg);
            o->dtype = optarg;
            o->bf16 = strcmp(optarg, "bf16") == 0;
            break;
        case OPT_MODEL: o->model = optarg; break;
        case OPT_MB: o->micro_batch = (int)cli_parse_int("--micro-batch", optarg, 1, 1 << 16); break;
        case OPT_SEQ: o->seq_len = (int)cli_parse_int("--seq-len", optarg, 1, 1 << 20); break;
        case OPT_THREADS: o->threads = (int)cli_parse_int("--threads", optarg, 1, 4096); break;
        case OPT_REPEAT: o->repeat = (int)cli_parse_int("--repeat", optarg, 1, 1000); break;
        case OPT_PROFILE: o->base = optarg; break;
        case OPT_DEVICE:
            if (!merak_backend_find(optarg))
                cli_die_usage("--device: '%s' is not %s", optarg, merak_backend_names());
            o->device = optarg;
            break;
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
        case OPT_RC: o->recompute_name = optarg; break;
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
    if (o->mode == 0)
        cli_die_usage("nothing to do: give --simulate, --list-models, --partition-costs, --calibrate or --gpus");
    if (o->mode & (o->mode - 1))
        cli_die_usage("give one of --simulate, --list-models, --partition-costs, --calibrate and --gpus");
    for (int i = 0; opts[i].name; i++)
        if (given[opts[i].val - OPT_SIM] && !(option_modes(opts[i].val) & o->mode))
            cli_die_usage("--%s does not go with %s", opts[i].name, mode_flag(o->mode));
    if (o->bf16) {
        char err[256];
        if (merak_bf16_storage_env(&o->float_storage, err, sizeof err) < 0)
            cli_die_usage("%s", err);
    }
    if (o->mode == MODE_CALIB) {
        const merak_backend *be = merak_backend_find(o->device);
        if (given[OPT_THREADS - OPT_SIM] && !be->host)
            cli_die_usage("--threads is for the cpu kernels (not --device %s)", o->device);
        if (o->dtype && strcmp(o->dtype, "tf32") == 0)
            cli_die_usage("--calibrate --dtype tf32: calibrate fp32 or bf16 (tf32 plans use fp32's rates)");
        if (o->bf16 && !be->bf16)
            cli_die_usage("--calibrate --dtype bf16: the %s kernels have no bf16", be->name);
        if (!o->base)   /* the links a GPU's profile keeps: the H100's, as merak-train's default */
            o->base = be->profile;
        o->micro_batch = o->micro_batch ? o->micro_batch : 4;
        o->seq_len = o->seq_len ? o->seq_len : 128;
    }
    if (o->mode == MODE_LAYOUT) {
        if (o->schedule_name && o->virtual_stages && o->schedule != MERAK_SCHEDULE_INTERLEAVED)
            cli_die_usage("--virtual-stages needs --schedule interleaved");
        if (!given[OPT_MODEL - OPT_SIM])
            cli_die_usage("--gpus needs --model");
        if (o->virtual_stages && (o->virtual_stages < 2 || o->virtual_stages > MERAK_MAX_CHUNKS))
            cli_die_usage("--virtual-stages %d: interleaved needs 2 to %d model chunks per stage", o->virtual_stages,
                          MERAK_MAX_CHUNKS);
        o->micro_batch = o->micro_batch ? o->micro_batch : 1;
        return;
    }
    if (o->mode != MODE_SIM)
        return;
    if (o->recompute_name && strcmp(o->recompute_name, "none") != 0 && strcmp(o->recompute_name, "full") != 0)
        cli_die_usage("--recompute: '%s' is not none or full (the simulator's stages are "
                      "abstract: merak-train picks layers for the other policies)", o->recompute_name);
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
    if (o->have_rcost && !(o->recompute_name && o->recompute_name[0] == 'f'))
        cli_die_usage("--recompute-cost needs --recompute full");
}

/* ------------------------------------------------------------------ SVG */

static void on_compute(void *ctx, int stage, const merak_instr *in, double start, double end)
{
    merak_trace_add(ctx, stage, in->kind, in->mb, in->chunk, start, end);
}

/* ------------------------------------------------------------------ presets */

/* One JSON answer on its own line (flags: json_dumpf's); j is taken.
 * Exits 1 if it cannot be built or written. */
static void put_json(json_t *j, size_t flags)
{
    if (!j || json_dumpf(j, stdout, flags) < 0)
        cli_die("cannot write the JSON answer");
    putchar('\n');
    json_decref(j);
}

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
        put_json(json_pack("{s:o}", "models", arr), 0);
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
    char why[512];
    FILE *fp = merak_file_fopen(file, why, sizeof why);
    if (!fp)
        cli_die("%s", why);
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
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
    if (rc == MERAK_USAGE)
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
        put_json(json_pack("{s:s, s:o, s:o, s:f}", "method", method, "starts", js, "stage_costs", jc,
                           "predicted_step", step), JSON_REAL_PRECISION(12));
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

/* v in the unit's SI multiple, as "12.3 G" + unit. */
static const char *si(char *buf, size_t n, double v, const char *unit)
{
    static const char pre[] = " kMGTP";
    int i = 0;
    while (v >= 999.5 && i < 5)   /* (what %.3g would print as 1e+03) */
        v /= 1000, i++;
    snprintf(buf, n, "%.3g %s%s", v, i ? (char[]){pre[i], 0} : "", unit);
    return buf;
}

/* The roofline: each op kind's passes, their work and rate, and the share
 * of the peak it reaches (the product's for linear and attention, the
 * copy's for the rest); under 60% is marked. */
static void print_roofline(const merak_roofline *r, const char *arith, int host)
{
    char a[32], b[32];
    if (r->product > 0 && r->copy > 0)
        printf("peaks (%s): a %d x %d product %s, a %.0f MiB copy %s (read and written)\n", arith, r->product_n,
               r->product_n, si(a, sizeof a, r->product, "FLOP/s"), r->copy_bytes / 1048576.0,
               si(b, sizeof b, r->copy, "B/s"));
    else
        printf("peaks (%s): not measured (%s)\n", arith, r->why);
    printf("%-14s %-8s %10s %14s %16s %8s\n", "op", "pass", "ms", "work", "rate", "of peak");
    for (int t = 0; t < MERAK_OP_COUNT_; t++)
        for (int p = 0; p < 2; p++) {
            const double s = p ? r->bwd_s[t] : r->fwd_s[t], w = p ? r->bwd_work[t] : r->fwd_work[t];
            if (!(s > 0 && w > 0))
                continue;
            const int flops = r->flops[t];
            const double peak = flops ? r->product : r->copy, frac = peak > 0 ? w / s / peak : 0;
            char share[16] = "-";
            if (peak > 0)
                snprintf(share, sizeof share, "%.0f%%", 100 * frac);
            printf("%-14s %-8s %10.3f %14s %16s %8s%s\n", merak_op_name((merak_op_type)t), p ? "backward" : "forward",
                   1e3 * s, si(a, sizeof a, w, flops ? "FLOP" : "B"), si(b, sizeof b, w / s, flops ? "FLOP/s" : "B/s"),
                   share, peak > 0 && frac < 0.6 ? "  under 60%" : "");
        }
    if (r->lag_bounds > 0 && !host)
        printf("launches: the device ran %.3f ms behind the host on average; at %zu of %zu op starts and ends it "
               "had caught up (under %.0f us behind: it waited for a launch or a read-back)\n",
               1e3 * r->lag_mean, r->lag_caught, r->lag_bounds, 1e6 * r->lag_threshold);
}

/* --calibrate: the base profile's links and memory, this machine's
 * measured compute rates, written to the file named. */
static void calibrate(const plan_opts *o)
{
    char err[1024];
    merak_model_config cfg;
    merak_device d;
    /* the profile tables it reads, a profile or model given as a file */
    if (merak_file_not_input("--calibrate", o->calibrate, "the device profiles file (MERAK_DEVICES)",
                             getenv("MERAK_DEVICES"), err, sizeof err) < 0 ||
        merak_file_not_input("--calibrate", o->calibrate, "the installed device profiles",
                             MERAK_PKGDATADIR "/devices.json", err, sizeof err) < 0 ||
        merak_file_not_input("--calibrate", o->calibrate, "the --device-profile file", o->base, err, sizeof err) < 0 ||
        merak_file_not_input("--calibrate", o->calibrate, "the --model config file", o->model, err, sizeof err) < 0)
        cli_die("%s", err);
    /* the profile can be written: found now, not after the measuring */
    if (merak_atomic_probe(o->calibrate, err, sizeof err) < 0)
        cli_die("--calibrate %s", err);
    cli_model(o->model, &cfg);
    if (o->seq_len > cfg.max_positions)
        cli_die_usage("--seq-len %d is beyond the model's %d positions", o->seq_len, cfg.max_positions);
    int rc = merak_device_load(o->base, &d, err, sizeof err);
    if (rc == MERAK_USAGE)
        cli_die_usage("--device-profile: %s", err);
    if (rc < 0)
        cli_die("%s", err);
    merak_graph *g = merak_model_build(&cfg, o->micro_batch, o->seq_len, err, sizeof err);
    if (!g)
        cli_die("%s: %s", o->model, err);
    const merak_kernels *k = merak_kernels_open(o->device, o->threads, err, sizeof err);
    if (!k)
        cli_die("%s", err);
    /* the device's memory; on a GPU what its runtime already holds (context,
     * cuBLASLt's workspace) is reserved, nothing of ours being allocated yet */
    size_t free_b = 0, total_b = 0;
    if (k->capacity && k->capacity(&free_b, &total_b) == 0) {
        d.memory = (double)total_b;
        if (!merak_backend_find(k->name)->host)
            d.reserved = (double)(total_b - free_b);
    }
    const merak_rates rates = o->bf16 ? MERAK_RATES_BF16 : MERAK_RATES_FP32;
    const char *arith = o->bf16 ? "bf16" : "fp32";
    if (k->set_products)
        k->set_products(o->bf16 ? MERAK_PRODUCTS_BF16 : MERAK_PRODUCTS_FP32);
    if (merak_backend_find(k->name)->host)
        printf("calibrating on %s in %s (micro-batch %d x %d tokens, %d thread(s)), %d timed passes after a warm-up\n",
               o->model, arith, o->micro_batch, o->seq_len, o->threads, o->repeat);
    else
        printf("calibrating on %s in %s with the %s kernels (micro-batch %d x %d tokens), %d timed passes after a "
               "warm-up\n", o->model, arith, k->name, o->micro_batch, o->seq_len, o->repeat);
    fflush(stdout);
    /* the base's measured rates are kept beside the new table only when
     * they are this backend's */
    const char *bk = merak_backend_find(k->name)->name;
    if (strcmp(d.backend[0] ? d.backend : "cpu", bk) != 0) {
        int had = 0;
        for (int r = 0; r < MERAK_RATES_COUNT_; r++)
            for (int t = 0; t < MERAK_OP_COUNT_; t++)
                had |= d.op_fwd[r][t] > 0;
        if (had)
            printf("(the measured rates of %s are the %s backend's, not %s's: not kept)\n", o->base, d.backend, bk);
        memset(d.op_fwd, 0, sizeof d.op_fwd);
        memset(d.op_bwd, 0, sizeof d.op_bwd);
    }
    merak_roofline rl;
    if (merak_device_calibrate(g, k, o->repeat, rates, o->float_storage, &d, &rl, err, sizeof err) < 0)
        cli_die("%s", err);
    snprintf(d.backend, sizeof d.backend, "%s", bk);
    print_roofline(&rl, arith, merak_backend_find(k->name)->host);
    printf("%s rates measured (\"%s\"); matrix %.4g TFLOP/s and memory %.4g GB/s %s; %.1f GB (%.2f GB "
           "reserved); links and latency from %s\n", arith, rates ? "ops_bf16" : "ops", d.matmul / 1e12,
           d.mem_bw / 1e9, rates ? "as the base profile has them" : "from them", d.memory / 1e9, d.reserved / 1e9,
           o->base);
    merak_atomic *a;
    if (merak_atomic_open(o->calibrate, &a, err, sizeof err) < 0)
        cli_die("%s", err);
    merak_device_write(&d, merak_atomic_file(a));
    if (merak_atomic_commit(a, err, sizeof err) < 0)
        cli_die("%s", err);
    printf("wrote %s\n", o->calibrate);
    merak_graph_destroy(g);
}

/* ------------------------------------------------------------------ layouts */


/* What every layout of a run shares: the model, built for one
 * micro-batch, the device and the batch. */
typedef struct plan_ctx {
    const plan_opts *o;
    merak_model_config cfg;
    merak_graph *g;
    merak_device d;
    int seq_len, gpus_per_node;
    long global_batch;
} plan_ctx;

static void plan_setup(const plan_opts *o, plan_ctx *c)
{
    char err[1024];
    memset(c, 0, sizeof *c);
    c->o = o;
    cli_model(o->model, &c->cfg);
    c->seq_len = o->seq_len ? o->seq_len : c->cfg.max_positions;
    if (c->seq_len > c->cfg.max_positions)
        cli_die_usage("--seq-len %d is beyond the model's %d positions", c->seq_len, c->cfg.max_positions);
    int rc = merak_device_load(o->gpu, &c->d, err, sizeof err);
    if (rc == MERAK_USAGE)
        cli_die_usage("--gpu: %s", err);
    if (rc < 0)
        cli_die("%s", err);
    c->gpus_per_node = o->gpus < o->gpus_per_node ? o->gpus : o->gpus_per_node;
    if (o->gpus % c->gpus_per_node != 0)
        cli_die_usage("--gpus %d is not a whole number of nodes of %d (--gpus-per-node)", o->gpus, o->gpus_per_node);
    c->global_batch = o->global_batch ? o->global_batch : (long)o->micro_batch * o->gpus;
    if (!(c->g = merak_model_build(&c->cfg, o->micro_batch, c->seq_len, err, sizeof err)))
        cli_die("%s: %s", o->model, err);
}

/* The layout dp x tp x pp of the run's GPUs with its options; exits 2 if
 * the batch does not split into it. */
static merak_layout plan_layout_of(const plan_ctx *c, int dp, int tp, int pp, merak_schedule_kind kind,
                                   const merak_recompute *rc)
{
    const plan_opts *o = c->o;
    long per = (long)dp * o->micro_batch;
    if (c->global_batch % per != 0)
        cli_die_usage("--global-batch %ld is not a multiple of dp x micro-batch = %d x %d", c->global_batch, dp,
                      o->micro_batch);
    if (c->global_batch / per > MERAK_MAX_MICRO_BATCHES)
        cli_die_usage("--global-batch %ld makes %ld micro-batches per replica, more than %d", c->global_batch,
                      c->global_batch / per, MERAK_MAX_MICRO_BATCHES);
    return (merak_layout){.dp = dp, .tp = tp, .pp = pp, .gpus_per_node = c->gpus_per_node, .schedule = kind,
                          .virtual_stages = o->virtual_stages, .recompute = *rc,
                          .micro_batches = (int)(c->global_batch / per),
                          .zero = o->zero, .partition = o->partition ? o->partition : "autopipe",
                          .bf16 = o->bf16, .float_storage = o->float_storage};
}

static double gb(double bytes) { return bytes / 1e9; }

/* Which of a profile's rates time a plan's ops (merak_op_time): "bf16"
 * or "fp32" (measured), or "nominal" (its matrix and memory rates). */
static const char *op_rates(const merak_device *d, int bf16)
{
    int has[MERAK_RATES_COUNT_] = {0};
    for (int r = 0; r < MERAK_RATES_COUNT_; r++)
        for (int t = 0; t < MERAK_OP_COUNT_; t++)
            has[r] |= d->op_fwd[r][t] > 0;
    return bf16 && has[MERAK_RATES_BF16] ? "bf16" : has[MERAK_RATES_FP32] ? "fp32" : "nominal";
}

/* The --json answer for one planned layout. */
static json_t *layout_json(const plan_ctx *c, const merak_layout *L, const char *rc_name, const merak_layout_result *r)
{
    const plan_opts *o = c->o;
    json_t *st = json_array();
    for (int p = 0; p < r->stages; p++) {
        const merak_layout_stage *s = &r->stage[p];
        json_t *mem = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "params", s->mem_params, "grads", s->mem_grads,
                                "optimizer", s->mem_optimizer, "activations", s->mem_activations, "other",
                                s->mem_other, "total", s->mem_total);
        json_array_append_new(st, json_pack("{s:i, s:i, s:i, s:f, s:o, s:f, s:f, s:f}", "first_block",
                                            s->first_block, "layers", s->layers, "recomputed", s->recomputed,
                                            "parameters", s->params, "memory", mem, "forward_s", s->fwd,
                                            "backward_s", s->bwd, "recompute_s", s->recompute));
    }
    return json_pack("{s:s, s:i, s:i, s:s, s:i, s:i, s:i, s:s, s:i, s:s, s:b, s:i, s:i, s:i, s:I, s:s, s:s, "
                     "s:s, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}",
                     "model", o->model, "gpus", L->dp * L->tp * L->pp, "gpus_per_node", L->gpus_per_node,
                     "gpu", o->gpu, "dp", L->dp, "tp", L->tp, "pp", L->pp, "schedule",
                     merak_schedule_name(L->schedule), "virtual_stages", r->chunks, "recompute", rc_name, "zero",
                     L->zero, "micro_batch", o->micro_batch, "seq_len", c->seq_len, "micro_batches",
                     L->micro_batches, "global_batch", (json_int_t)c->global_batch, "partition", L->partition,
                     "dtype", o->dtype ? o->dtype : "fp32", "op_rates", op_rates(&c->d, o->bf16),
                     "stages", st, "step_s", r->step, "pipeline_s", r->pipeline, "reduce_s", r->reduce,
                     "optimizer_s", r->optimizer, "bubble", r->bubble, "tokens_per_s", r->tokens_per_s, "mfu",
                     r->mfu, "memory_available", r->available, "fits", r->fits);
}

/* One planned layout: --json's object, or the text table. */
static void print_layout(const plan_ctx *c, const merak_layout *L, const char *rc_name, const merak_layout_result *r)
{
    const plan_opts *o = c->o;
    const char *sched = merak_schedule_name(L->schedule);
    if (o->json) {
        put_json(layout_json(c, L, rc_name, r), JSON_REAL_PRECISION(15));
        return;
    }
    printf("%s on %d x %s (%d per node): dp %d x tp %d x pp %d, %s", o->model, L->dp * L->tp * L->pp, o->gpu,
           L->gpus_per_node, L->dp, L->tp, L->pp, sched);
    if (r->chunks > 1)
        printf(" (%d chunks per stage)", r->chunks);
    printf(", recompute %s%s%s%s\n", rc_name, L->zero ? ", ZeRO-1" : "", o->bf16 ? ", dtype " : "",
           o->bf16 ? o->dtype : "");
    printf("batch: %ld sequences of %d tokens = %d micro-batches of %d per replica; partition %s over %d blocks\n",
           c->global_batch, c->seq_len, L->micro_batches, o->micro_batch, L->partition, r->blocks);
    const char *rates = op_rates(&c->d, o->bf16);
    printf("op times: %s\n", strcmp(rates, "nominal") == 0 ? "the profile's matrix and memory rates"
                              : strcmp(rates, "bf16") == 0 ? "the profile's measured bf16 rates"
                              : o->bf16 ? "the profile's measured fp32 rates (it has no bf16 rates)"
                                        : "the profile's measured fp32 rates");
    printf("%5s %6s %7s %9s %11s %9s %9s %11s %7s %9s\n", "stage", "first", "layers", "recompute", "parameters",
           "params GB", "grads GB", "optimizer GB", "acts GB", "total GB");
    for (int p = 0; p < r->stages; p++) {
        const merak_layout_stage *s = &r->stage[p];
        printf("%5d %6d %7d %9d %11.4g %9.3f %9.3f %12.3f %7.3f %9.3f\n", p, s->first_block, s->layers, s->recomputed,
               s->params, gb(s->mem_params), gb(s->mem_grads), gb(s->mem_optimizer), gb(s->mem_activations),
               gb(s->mem_total));
    }
    printf("step %.4g s (pipeline %.4g s, bubble %.1f%%; reductions %.4g s; optimizer %.4g s) | %.4g tokens/s | "
           "MFU %.1f%%\n", r->step, r->pipeline, 100 * r->bubble, r->reduce, r->optimizer, r->tokens_per_s,
           100 * r->mfu);
    printf("memory: stage %d needs the most, %.2f GB of %.2f GB: %s\n", r->worst, gb(r->stage[r->worst].mem_total),
           gb(r->available), r->fits ? "fits" : "does not fit");
}

/* --gpus with --dp/--tp/--pp: plan that layout. */
static void plan_layout(const plan_opts *o)
{
    char err[1024];
    plan_ctx c;
    plan_setup(o, &c);
    int tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1;
    if (o->gpus % ((long)tp * pp) != 0)
        cli_die_usage("--gpus %d is not divisible by tp x pp = %d x %d", o->gpus, tp, pp);
    int dp = o->dp ? o->dp : o->gpus / (tp * pp);
    if ((long)dp * tp * pp != o->gpus)
        cli_die_usage("dp x tp x pp = %d x %d x %d = %ld, but --gpus is %d", dp, tp, pp, (long)dp * tp * pp, o->gpus);
    merak_schedule_kind kind = MERAK_SCHEDULE_1F1B;
    if (o->schedule_name)
        kind = o->schedule;
    merak_recompute rc = {MERAK_RECOMPUTE_NONE, 0};
    const char *rc_name = o->recompute_name ? o->recompute_name : "none";
    if (merak_recompute_parse(rc_name, &rc, err, sizeof err) < 0)
        cli_die_usage("--recompute: %s", err);
    merak_layout L = plan_layout_of(&c, dp, tp, pp, kind, &rc);
    merak_layout_result r;
    int st = merak_layout_plan(c.g, &L, &c.d, &r, err, sizeof err);
    if (st == MERAK_USAGE)
        cli_die_usage("%s", err);
    if (st < 0)
        cli_die("%s", err);
    print_layout(&c, &L, rc_name, &r);
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the answer: %s", strerror(errno));
    if (!r.fits)
        cli_die("the layout does not fit: stage %d needs %.2f GB, a %s has %.2f GB", r.worst,
                gb(r.stage[r.worst].mem_total), o->gpu, gb(r.available));
    merak_layout_result_free(&r);
    merak_graph_destroy(c.g);
}

/* --auto: the library's search (plan/auto.h, as merak-train --auto asks
 * it) over every layout of the GPUs (--dp, --tp, --pp fix a degree) and
 * every schedule, recomputation policy and ZeRO setting not fixed by a
 * flag; the fastest printed in full, then its runners-up. */
static void plan_auto(const plan_opts *o)
{
    char err[1024];
    plan_ctx c;
    plan_setup(o, &c);
    merak_recompute check;
    if (o->recompute_name && merak_recompute_parse(o->recompute_name, &check, err, sizeof err) < 0)
        cli_die_usage("--recompute: %s", err);
    merak_auto_query q = {.gpus = o->gpus, .gpus_per_node = c.gpus_per_node, .micro_batch = o->micro_batch,
                          .global_batch = c.global_batch, .dp = o->dp, .tp = o->tp, .pp = o->pp,
                          .schedule = o->schedule_name ? (int)o->schedule : -1, .virtual_stages = o->virtual_stages,
                          .layers = c.cfg.n_layer, .recompute = o->recompute_name,
                          .zero = o->zero_given ? o->zero : -1, .partition = o->partition, .bf16 = o->bf16,
                          .float_storage = o->float_storage};
    merak_auto_result res;
    int rc = merak_layout_auto(c.g, &q, &c.d, &res, err, sizeof err);
    if (rc == MERAK_USAGE)
        cli_die_usage("%s", err);
    if (rc < 0)
        cli_die("%s", err);
    if (res.count == 0) {
        if (res.leanest == 0)
            cli_die_usage("no layout of %d GPUs can run %s with a global batch of %ld (micro-batch %d)", o->gpus,
                          o->model, c.global_batch, o->micro_batch);
        cli_die("no layout of %d GPUs fits %s: the leanest of the %zu tried needs %.2f GB on a %s of %.2f GB",
                o->gpus, o->model, res.tried, gb(res.leanest), o->gpu, gb(c.d.memory));
    }
    /* the winner, planned in full */
    const merak_auto_choice *best = &res.choice[0];
    merak_layout_result r;
    if (merak_layout_plan(c.g, &best->L, &c.d, &r, err, sizeof err) < 0)
        cli_die("%s", err);
    if (o->json) {
        json_t *ru = json_array();
        for (int i = 1; i < res.count; i++) {
            const merak_auto_choice *b = &res.choice[i];
            json_array_append_new(ru, json_pack("{s:i, s:i, s:i, s:s, s:i, s:s, s:b, s:i, s:f, s:f, s:f, s:f}", "dp",
                                                b->L.dp, "tp", b->L.tp, "pp", b->L.pp, "schedule",
                                                merak_schedule_name(b->L.schedule), "virtual_stages",
                                                merak_virtual_stages(b->L.schedule, b->L.virtual_stages), "recompute",
                                                b->recompute, "zero", b->L.zero, "micro_batches", b->L.micro_batches,
                                                "step_s", b->step, "tokens_per_s", b->tokens_per_s, "mfu", b->mfu,
                                                "peak_memory", b->peak));
        }
        put_json(json_pack("{s:I, s:I, s:I, s:o, s:o}", "layouts_tried", (json_int_t)res.tried, "layouts_fitting",
                           (json_int_t)res.fitting, "layouts_simulated", (json_int_t)res.simulated, "runners_up", ru,
                           "best", layout_json(&c, &best->L, best->recompute, &r)),
                 JSON_REAL_PRECISION(15));
    } else {
        printf("auto: %zu layouts tried, %zu fit, %zu simulated (the rest cannot be faster); the fastest:\n",
               res.tried, res.fitting, res.simulated);
        print_layout(&c, &best->L, best->recompute, &r);
    }
    if (!o->json && res.count > 1) {
        printf("runners-up:\n%5s %4s %4s %-14s %-13s %4s %5s %10s %12s %6s %9s\n", "dp", "tp", "pp", "schedule",
               "recompute", "zero", "M", "step s", "tokens/s", "MFU", "peak GB");
        for (int i = 1; i < res.count; i++) {
            const merak_auto_choice *b = &res.choice[i];
            char sched[32];   /* interleaved/V: its chunks per stage */
            int V = merak_virtual_stages(b->L.schedule, b->L.virtual_stages);
            snprintf(sched, sizeof sched, V > 1 ? "%s/%d" : "%s", merak_schedule_name(b->L.schedule), V);
            printf("%5d %4d %4d %-14s %-13s %4d %5d %10.4g %12.4g %5.1f%% %9.2f\n", b->L.dp, b->L.tp, b->L.pp, sched,
                   b->recompute, b->L.zero, b->L.micro_batches, b->step, b->tokens_per_s, 100 * b->mfu, gb(b->peak));
        }
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the answer: %s", strerror(errno));
    merak_layout_result_free(&r);
    merak_auto_result_free(&res);
    merak_graph_destroy(c.g);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    plan_opts o;
    char err[1024];
    cli_start("merak-plan");
    parse_args(argc, argv, &o);
    if (o.mode == MODE_LIST) {
        list_models(o.json);
        return 0;
    }
    if (o.mode == MODE_PCOSTS) {
        partition_costs(&o);
        return 0;
    }
    if (o.mode == MODE_CALIB) {
        calibrate(&o);
        return 0;
    }
    if (o.mode == MODE_LAYOUT) {
        if (o.autoplan)
            plan_auto(&o);
        else
            plan_layout(&o);
        return 0;
    }

    unsigned char *rc = malloc((size_t)o.stages);
    merak_schedule *sch = calloc((size_t)o.stages, sizeof *sch);
    int *peak = calloc((size_t)o.stages, sizeof *peak);
    const int V = o.virtual_stages, Q = o.stages * V;
    merak_sim_costs *costs = malloc((size_t)Q * sizeof *costs);
    if (!rc || !sch || !peak || !costs)
        cli_die("out of memory");
    int full = o.recompute_name && o.recompute_name[0] == 'f';
    memset(rc, full, (size_t)o.stages);
    /* equal stages; a chunk of one costs 1/V of it, its transfers the same */
    for (int q = 0; q < Q; q++)
        costs[q] = (merak_sim_costs){o.costs.fwd / V, o.costs.bwd / V, o.costs.bwd_weight / V,
                                     o.costs.recompute / V, o.costs.comm};
    merak_schedule_spec sp = {o.schedule, o.stages, o.micro_batches, rc, o.virtual_stages};
    if (merak_schedule_check_all(&sp, err, sizeof err) < 0)
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
                 o.schedule_name, o.stages, chunks, o.micro_batches, full ? ", recompute full" : "",
                 r.makespan, 100 * r.bubble);
        if (pipesvg_write(&bs, o.svg, title, o.stages, NULL, 0, r.makespan, "", err, sizeof err) < 0)
            cli_die("%s", err);
    }

    if (o.json) {
        json_t *pk = json_array();
        for (int i = 0; i < o.stages; i++)
            json_array_append_new(pk, peak[i] % o.virtual_stages ? json_real((double)peak[i] / o.virtual_stages)
                                                                 : json_integer(peak[i] / o.virtual_stages));
        put_json(json_pack("{s:f, s:f, s:o}", "makespan", r.makespan, "bubble", r.bubble, "peak_activations", pk),
                 JSON_REAL_PRECISION(10));
    } else {
        printf("%s, %d stages%s, %d micro-batches, recompute %s: forward %g, backward %g (weight %g), "
               "recompute %g, communication %g\n",
               o.schedule_name, o.stages, chunks, o.micro_batches, full ? "full" : "none", o.costs.fwd,
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
