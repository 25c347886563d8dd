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
#include <unistd.h>

#include "cli.h"
#include "internal.h"
#include "merak/merak.h"


/* merak-train's own options; everything else goes into merak_args. */
typedef struct tool_opts {
    const char *model;
    int log_every;
    int autoplan;            /* --auto */
    long global_batch;       /* --global-batch, 0: none */
    int zero_given, mbs_given;
    int threads_given;       /* --threads */
} tool_opts;


static void usage(FILE *out)
{
    fprintf(out,
        "Usage: %s --data GLOB [options]\n"
        "Train a GPT-2 or LLaMA model on llm.c token shards.\n"
        "\n"
        "Model and data:\n"
        "  --model NAME|FILE       preset name or Hugging Face config.json (default tiny-gpt2)\n"
        "  --init FILE|INDEX|DIR   start from Hugging Face weights (.safetensors, or the\n"
        "                          shards a model.safetensors.index.json names)\n"
        "  --init-extra            let --init FILE hold tensors the model does not have\n"
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
        "Parallelism (under mpirun -np N or srun --mpi=pmix):\n"
        "  --auto                  choose dp, tp, pp, the schedule, recomputation and ZeRO as\n"
        "                          merak-plan --auto would for the ranks launched (the flags\n"
        "                          below that are given constrain it); prints the choice\n"
        "  --global-batch S        sequences per step over all replicas: micro-batches per\n"
        "                          replica S/(dp*B) (--auto default: B per rank)\n"
        "  --dp N                  data-parallel replicas (default MERAK_DP, else ranks/(tp*pp))\n"
        "  --tp N                  tensor-parallel degree (default MERAK_TP, else 1)\n"
        "  --tp-rules FILE         tensor-parallel rules: 'PATTERN column|row|vocab|replicated' lines\n"
        "  --pp N                  pipeline stages (default MERAK_PP, else 1)\n"
        "  --schedule S            gpipe, 1f1b, scp, zb-h1 or interleaved (default MERAK_SCHEDULE,\n"
        "                          else 1f1b)\n"
        "  --virtual-stages V      interleaved: model chunks per pipeline stage (default\n"
        "                          MERAK_VIRTUAL_STAGES, else 2)\n"
        "  --tp-overlap K          split each micro-batch into K sub-batches so the tensor-parallel\n"
        "                          all-reduce of one overlaps the compute of the next (default\n"
        "                          MERAK_TP_OVERLAP, else 1: off)\n"
        "  --recompute R           none, full, stage-aware[=R0] or budget=GB: layers whose activations\n"
        "                          are recomputed in the backward (default MERAK_RECOMPUTE, else none)\n"
        "  --partition P           uniform, parameters, autopipe or custom:S0,S1,... (first block of\n"
        "                          each stage): how the layers are cut into stages (default autopipe)\n"
        "  --device-profile D      device profile autopipe times ops with: a name in the devices\n"
        "                          file or a profile file (default cpu, or h100-80g with --device cuda)\n"
        "  --zero N                1: shard the optimizer state over dp (ZeRO-1); 0: off (default 0)\n"
        "  --bucket-mb X           dp all-reduce bucket size in MiB, launched during backward (default 25)\n"
        "  --p2p B                 pipeline send/receive over mpi, ucx (UCX tag API) or nccl (GPU buffers;\n"
        "                          default nccl where the collectives are NCCL's, else mpi)\n"
        "  --coll C                collectives on GPU buffers over nccl or mpi (staged in host memory);\n"
        "                          default nccl when every rank has its own GPU, else mpi\n"
        "  --comm-timeout S        a rank blocked S seconds in one collective or transfer ends the job,\n"
        "                          naming the peers (0: never; default MERAK_COMM_TIMEOUT, else 600)\n"
        "Running and output:\n"
        "  --device D              cpu or cuda: where tensors live and kernels run (default cpu)\n"
        "  --dtype T               bf16 (the default with --device cuda): bf16 activations, their\n"
        "                          gradients and weight copies over fp32 master weights, moments\n"
        "                          and weight gradients (the CPU emulates it); fp32 (the default\n"
        "                          on the CPU), the exact reference; tf32 (cuda: fp32 with the\n"
        "                          products on the tensor cores in TF32)\n"
        "  --threads N             CPU threads for kernels and BLAS (default: the cores\n"
        "                          this process may run on)\n"
        "  --metrics FILE          append one JSON object per step to FILE\n"
        "  --val-data GLOB         validation shards: their first --eval-batches windows are\n"
        "                          evaluated (forward only, no dropout) as val_loss\n"
        "  --eval-every N          evaluate after every N-th step (default 0: only after the last)\n"
        "  --eval-batches K        validation windows of --micro-batch x --seq-len tokens, a multiple\n"
        "                          of dp (default 4 per replica)\n"
        "  --sample-every N        print a sample of the model's text after every N-th step and\n"
        "                          the last (rank 0; temperature 1, the run's --seed)\n"
        "  --prompt TEXT           what the samples continue (default: the start of a document)\n"
        "  --sample-tokens N       tokens per sample (default 64)\n"
        "  --tokenizer FILE        a tokenizer.json that encodes --prompt and decodes the samples\n"
        "                          (default: a token is a byte)\n"
        "  --log-every N           print every N-th step (default 1)\n"
        "  --save-weights FILE     write the trained weights (.safetensors, Hugging Face names)\n"
        "  --save-dtype fp32|bf16  their values (default fp32; bf16 as the hub publishes them)\n"
        "  --shard-size SIZE       weights larger than SIZE are written as Hugging Face shards\n"
        "                          NAME-00001-of-0000N.safetensors ... and NAME.safetensors.index.json\n"
        "                          for FILE NAME.safetensors (default 5GB; KB, MB, GB, TB: powers of\n"
        "                          1000; KiB, MiB, GiB, TiB: of 1024)\n"
        "Checkpoints:\n"
        "  --save DIR              write checkpoints DIR/step_N (at the end, when stopped by a signal,\n"
        "                          and every --save-every steps), in the background\n"
        "  --save-every N          a checkpoint every N steps (default 0: only at the end and on stop)\n"
        "  --keep-last K           keep the newest K checkpoints (default 0: all)\n"
        "  --resume DIR|latest     go on from a checkpoint (or the newest in DIR); latest: the newest\n"
        "                          in --save DIR, or step 0 when there is none yet\n"
        "  --resume-data-change    resume although the data, micro-batch or sequence length are not\n"
        "                          the checkpoint's (saying what differs; refused otherwise)\n"
        "  --on-save-error A       stop or continue when a checkpoint cannot be written (default stop)\n"
        "  --on-nan A              abort or skip a step whose loss or gradient norm is NaN or Inf\n"
        "                          (skip: no update, the step reported skipped; default abort)\n"
        "  --trace FILE            write every rank's instructions and collectives as one Chrome\n"
        "                          trace JSON (opens in Perfetto; merak-trace(1) draws it)\n"
        "  --help                  show this help and exit\n"
        "  --version               show the version and exit\n"
        "\n"
        "See merak-train(1).\n", cli_prog);
}


enum {
    OPT_MODEL = 256, OPT_INIT, OPT_DATA, OPT_MB, OPT_MBS, OPT_SEQ, OPT_STEPS, OPT_LR,
    OPT_WARMUP, OPT_SCHED, OPT_MINLR, OPT_WD, OPT_B1, OPT_B2, OPT_EPS, OPT_CLIP, OPT_SEED,
    OPT_THREADS, OPT_METRICS, OPT_LOGEVERY, OPT_SAVE, OPT_SAVE_DTYPE, OPT_DTYPE, OPT_SHARD_SIZE, OPT_HELP, OPT_VERSION,
    OPT_DP, OPT_TP, OPT_PP, OPT_PSCHED, OPT_VIRTUAL, OPT_PART, OPT_PROFILE, OPT_TPRULES, OPT_ZERO, OPT_BUCKET, OPT_P2P, OPT_COLL,
    OPT_DEVICE, OPT_RECOMPUTE, OPT_TRACE, OPT_TPOVERLAP, OPT_CKPT, OPT_CKPT_EVERY, OPT_KEEP, OPT_RESUME,
    OPT_ON_SAVE_ERROR, OPT_RESUME_DATA_CHANGE, OPT_ON_NAN, OPT_INIT_EXTRA, OPT_VAL_DATA, OPT_EVAL_EVERY, OPT_EVAL_BATCHES,
    OPT_SAMPLE_EVERY, OPT_PROMPT, OPT_SAMPLE_TOKENS, OPT_TOKENIZER, OPT_COMM_TIMEOUT, OPT_AUTO, OPT_GBATCH,
};

static void set_schedule(merak_args *a, const char *v) { a->schedule = v; }
static void set_recompute(merak_args *a, const char *v) { a->recompute = v; }

/* The value of environment variable VAR for a name argument the flags left
 * unset (given == NULL), checked by the library as the flag would be (set
 * stores it into an otherwise default probe); a bad value is a usage error
 * named with its variable. */
static const char *env_name(const char *var, const char *given, void (*set)(merak_args *, const char *))
{
    const char *v = getenv(var);
    if (given || !v || !*v)
        return given;
    merak_args probe;
    merak_args_default(&probe);
    probe.data = "-";
    set(&probe, v);
    char err[512];
    if (merak_args_check(&probe, err, sizeof err) < 0)
        cli_die_usage("%s: %s", var, err);
    return v;
}

/* The value of environment variable VAR for an integer option the flags
 * left unset (given 0); a value that is not a positive integer is a usage
 * error named with its variable. */
static void env_int(const char *var, int given, int *slot)
{
    const char *v = getenv(var);
    if (!given && v && *v)
        *slot = (int)cli_parse_int(var, v, 1, 1 << 20);
}

static void parse_args(int argc, char **argv, merak_args *a, tool_opts *t)
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
        {"save-dtype", required_argument, 0, OPT_SAVE_DTYPE},
        {"shard-size", required_argument, 0, OPT_SHARD_SIZE},
        {"auto", no_argument, 0, OPT_AUTO},
        {"global-batch", required_argument, 0, OPT_GBATCH},
        {"dp", required_argument, 0, OPT_DP},
        {"tp", required_argument, 0, OPT_TP},
        {"pp", required_argument, 0, OPT_PP},
        {"schedule", required_argument, 0, OPT_PSCHED},
        {"virtual-stages", required_argument, 0, OPT_VIRTUAL},
        {"tp-overlap", required_argument, 0, OPT_TPOVERLAP},
        {"recompute", required_argument, 0, OPT_RECOMPUTE},
        {"trace", required_argument, 0, OPT_TRACE},
        {"partition", required_argument, 0, OPT_PART},
        {"device-profile", required_argument, 0, OPT_PROFILE},
        {"tp-rules", required_argument, 0, OPT_TPRULES},
        {"zero", required_argument, 0, OPT_ZERO},
        {"bucket-mb", required_argument, 0, OPT_BUCKET},
        {"p2p", required_argument, 0, OPT_P2P},
        {"coll", required_argument, 0, OPT_COLL},
        {"comm-timeout", required_argument, 0, OPT_COMM_TIMEOUT},
        {"device", required_argument, 0, OPT_DEVICE},
        {"dtype", required_argument, 0, OPT_DTYPE},
        {"save", required_argument, 0, OPT_CKPT},
        {"save-every", required_argument, 0, OPT_CKPT_EVERY},
        {"keep-last", required_argument, 0, OPT_KEEP},
        {"resume", required_argument, 0, OPT_RESUME},
        {"resume-data-change", no_argument, 0, OPT_RESUME_DATA_CHANGE},
        {"on-save-error", required_argument, 0, OPT_ON_SAVE_ERROR},
        {"on-nan", required_argument, 0, OPT_ON_NAN},
        {"init-extra", no_argument, 0, OPT_INIT_EXTRA},
        {"val-data", required_argument, 0, OPT_VAL_DATA},
        {"eval-every", required_argument, 0, OPT_EVAL_EVERY},
        {"eval-batches", required_argument, 0, OPT_EVAL_BATCHES},
        {"sample-every", required_argument, 0, OPT_SAMPLE_EVERY},
        {"prompt", required_argument, 0, OPT_PROMPT},
        {"sample-tokens", required_argument, 0, OPT_SAMPLE_TOKENS},
        {"tokenizer", required_argument, 0, OPT_TOKENIZER},
        {"help", no_argument, 0, OPT_HELP},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    merak_args_default(a);
    a->threads = cli_default_threads();
    *t = (tool_opts){.model = "tiny-gpt2", .log_every = 1};
    opterr = 0;
    int c, mbs_given = 0, vs_given = 0, tpo_given = 0, timeout_given = 0, shard_given = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: t->model = optarg; break;
        case OPT_INIT: a->init = optarg; break;
        case OPT_DATA: a->data = optarg; break;
        case OPT_MB: a->micro_batch = (int)cli_parse_int("--micro-batch", optarg, 1, 1 << 20); break;
        case OPT_MBS:
            a->micro_batches = (int)cli_parse_int("--micro-batches", optarg, 1, 1 << 20);
            mbs_given = 1;
            break;
        case OPT_SEQ: a->seq_len = (int)cli_parse_int("--seq-len", optarg, 1, 1 << 24); break;
        case OPT_STEPS: a->steps = (int)cli_parse_int("--steps", optarg, 0, INT_MAX); break;
        case OPT_LR: a->lr = cli_parse_float("--lr", optarg, 0, 10); break;
        case OPT_WARMUP: a->warmup = (int)cli_parse_int("--warmup", optarg, 0, INT_MAX); break;
        case OPT_SCHED:
            if (merak_lr_parse(optarg, &a->lr_schedule) < 0)
                cli_die_usage("--lr-schedule: '%s' is not %s", optarg, merak_lr_names());
            break;
        case OPT_MINLR: a->min_lr = cli_parse_float("--min-lr", optarg, 0, 10); break;
        case OPT_WD: a->weight_decay = cli_parse_float("--weight-decay", optarg, 0, 10); break;
        case OPT_B1: a->beta1 = cli_parse_float_in("--beta1", optarg, 0, 0, 1, 1); break;
        case OPT_B2: a->beta2 = cli_parse_float_in("--beta2", optarg, 0, 0, 1, 1); break;
        case OPT_EPS: a->eps = cli_parse_float_in("--eps", optarg, 0, 1, 1, 0); break;
        case OPT_CLIP: a->clip = cli_parse_float("--clip", optarg, 0, 1e30); break;
        case OPT_SEED: a->seed = (uint64_t)cli_parse_int("--seed", optarg, 0, LONG_MAX); break;
        case OPT_THREADS:
            a->threads = (int)cli_parse_int("--threads", optarg, 1, 4096);
            t->threads_given = 1;
            break;
        case OPT_METRICS: a->metrics = optarg; break;
        case OPT_LOGEVERY: t->log_every = (int)cli_parse_int("--log-every", optarg, 1, INT_MAX); break;
        case OPT_SAVE: a->save_weights = optarg; break;
        case OPT_SAVE_DTYPE: a->save_dtype = optarg; break;
        case OPT_SHARD_SIZE:
            a->save_shard_size = cli_parse_size("--shard-size", optarg);
            shard_given = 1;
            break;
        case OPT_TRACE: a->trace = optarg; break;
        case OPT_DP: a->dp = (int)cli_parse_int("--dp", optarg, 1, 1 << 20); break;
        case OPT_TP: a->tp = (int)cli_parse_int("--tp", optarg, 1, 1 << 20); break;
        case OPT_PP: a->pp = (int)cli_parse_int("--pp", optarg, 1, 1 << 20); break;
        case OPT_PSCHED: a->schedule = optarg; break;
        case OPT_VIRTUAL:
            a->virtual_stages = (int)cli_parse_int("--virtual-stages", optarg, 1, 1 << 20);
            vs_given = 1;
            break;
        case OPT_TPOVERLAP:
            a->tp_overlap = (int)cli_parse_int("--tp-overlap", optarg, 1, 1 << 20);
            tpo_given = 1;
            break;
        case OPT_RECOMPUTE: a->recompute = optarg; break;
        case OPT_PART: a->partition = optarg; break;
        case OPT_PROFILE: a->profile = optarg; break;
        case OPT_TPRULES: a->tp_rules = optarg; break;
        case OPT_ZERO:
            a->zero = (int)cli_parse_int("--zero", optarg, 0, 1);
            t->zero_given = 1;
            break;
        case OPT_AUTO: t->autoplan = 1; break;
        case OPT_GBATCH: t->global_batch = cli_parse_int("--global-batch", optarg, 1, 1L << 40); break;
        case OPT_BUCKET: a->bucket_mb = cli_parse_float("--bucket-mb", optarg, 1e-6, 1e6); break;
        case OPT_P2P: a->p2p = optarg; break;
        case OPT_COLL: a->coll = optarg; break;
        case OPT_COMM_TIMEOUT:
            a->comm_timeout = cli_parse_double("--comm-timeout", optarg, 0, 1e9);
            timeout_given = 1;
            break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_DTYPE: a->dtype = optarg; break;
        case OPT_CKPT: a->save = optarg; break;
        case OPT_CKPT_EVERY: a->save_every = (int)cli_parse_int("--save-every", optarg, 1, INT_MAX); break;
        case OPT_KEEP: a->keep_last = (int)cli_parse_int("--keep-last", optarg, 1, INT_MAX); break;
        case OPT_RESUME: a->resume = optarg; break;
        case OPT_RESUME_DATA_CHANGE: a->resume_data_change = 1; break;
        case OPT_ON_SAVE_ERROR:
            if (strcmp(optarg, "stop") != 0 && strcmp(optarg, "continue") != 0)
                cli_die_usage("--on-save-error: '%s' is not stop or continue", optarg);
            a->save_error_continue = strcmp(optarg, "continue") == 0;
            break;
        case OPT_INIT_EXTRA: a->init_extra = 1; break;
        case OPT_VAL_DATA: a->val_data = optarg; break;
        case OPT_EVAL_EVERY: a->eval_every = (int)cli_parse_int("--eval-every", optarg, 0, 1 << 30); break;
        case OPT_EVAL_BATCHES: a->eval_batches = (int)cli_parse_int("--eval-batches", optarg, 1, 1 << 20); break;
        case OPT_SAMPLE_EVERY: a->sample_every = (int)cli_parse_int("--sample-every", optarg, 1, INT_MAX); break;
        case OPT_PROMPT: a->sample_prompt = optarg; break;
        case OPT_SAMPLE_TOKENS: a->sample_tokens = (int)cli_parse_int("--sample-tokens", optarg, 1, 1 << 20); break;
        case OPT_TOKENIZER: a->tokenizer = optarg; break;
        case OPT_ON_NAN:
            if (strcmp(optarg, "skip") != 0 && strcmp(optarg, "abort") != 0)
                cli_die_usage("--on-nan: '%s' is not skip or abort", optarg);
            a->on_nan_skip = strcmp(optarg, "skip") == 0;
            break;
        case OPT_HELP: usage(stdout); exit(0);
        case OPT_VERSION: printf("merak-train %s\n", MERAK_VERSION_STRING); exit(0);
        case ':': cli_die_usage("%s needs a value", argv[optind - 1]);
        default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        cli_die_usage("unexpected argument '%s'", argv[optind]);
    /* Defaults the Slurm plugin passes on (--merak-schedule,
     * --merak-microbatches, --merak-recompute, --merak-virtual-stages,
     * --merak-tp-overlap); flags win. */
    a->schedule = env_name("MERAK_SCHEDULE", a->schedule, set_schedule);
    a->recompute = env_name("MERAK_RECOMPUTE", a->recompute, set_recompute);
    env_int("MERAK_MICROBATCHES", mbs_given, &a->micro_batches);
    const char *mbs_env = getenv("MERAK_MICROBATCHES");
    t->mbs_given = mbs_given || (mbs_env && *mbs_env);
    env_int("MERAK_VIRTUAL_STAGES", vs_given, &a->virtual_stages);
    env_int("MERAK_TP_OVERLAP", tpo_given, &a->tp_overlap);
    const char *timeout = getenv("MERAK_COMM_TIMEOUT");
    if (!timeout_given && timeout && *timeout)
        a->comm_timeout = cli_parse_double("MERAK_COMM_TIMEOUT", timeout, 0, 1e9);
    /* the degrees too (the plugin's layout): a bad value is the usage
     * error the flag's would be */
    /* MERAK_BIND (placement under mpirun): merak_init refuses a bad one too,
     * but by then it is not a usage error */
    const char *bind = getenv("MERAK_BIND");
    if (bind && *bind && strcmp(bind, "closest") != 0 && strcmp(bind, "none") != 0)
        cli_die_usage("MERAK_BIND=%s: expected closest or none", bind);
    /* the plugin's other numbers: a malformed one is a usage error; whether
     * it fits the job is the runtime's to say (exit status 1) */
    const char *const numbers[] = {"MERAK_RANK", "MERAK_DP_RANK", "MERAK_TP_RANK", "MERAK_PP_RANK", "MERAK_GPU",
                                   "MERAK_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
        const char *v = getenv(numbers[i]);
        if (v && *v)
            cli_parse_int(numbers[i], v, i == 5 ? 1 : 0, 1 << 24);
    }
    env_int("MERAK_DP", a->dp, &a->dp);
    env_int("MERAK_TP", a->tp, &a->tp);
    env_int("MERAK_PP", a->pp, &a->pp);
    if (!a->data)
        cli_die_usage("--data is required");
    if (t->global_batch && t->mbs_given)
        cli_die_usage("--global-batch and --micro-batches (or MERAK_MICROBATCHES) both set the batch: give one");
    if (t->autoplan && t->mbs_given)
        cli_die_usage("--auto chooses the micro-batches: give --global-batch instead of --micro-batches");
    if (!a->save_weights && shard_given)
        cli_die_usage("--shard-size goes with --save-weights FILE");
    if (!a->save && (a->save_every || a->keep_last))
        cli_die_usage("%s needs --save DIR", a->save_every ? "--save-every" : "--keep-last");
    if (a->resume_data_change && !a->resume)
        cli_die_usage("--resume-data-change goes with --resume");
    if (a->resume && strcmp(a->resume, "latest") == 0 && !a->save)
        cli_die_usage("--resume latest needs --save DIR to look in");
    if (!a->val_data && (a->eval_every || a->eval_batches))
        cli_die_usage("%s needs --val-data GLOB", a->eval_every ? "--eval-every" : "--eval-batches");
    if (!a->sample_every && (a->sample_prompt || a->sample_tokens || a->tokenizer))
        cli_die_usage("%s needs --sample-every N", a->sample_prompt ? "--prompt"
                                                   : a->sample_tokens ? "--sample-tokens" : "--tokenizer");
    if (a->min_lr > a->lr)
        cli_die_usage("--min-lr %g is above --lr %g", a->min_lr, a->lr);
    /* Names (schedule, partition, p2p, device) checked against the
     * library's tables; a value given by flag is a usage error. */
    char err[512];
    if (merak_args_check(a, err, sizeof err) < 0)
        cli_die_usage("%s", err);
}

/* The first SIGTERM, SIGUSR1, SIGHUP or SIGINT asks every rank to stop
 * after the step (and checkpoint); a second one ends this process at once. */
static volatile int stop_requested;       /* the trainer sets it too: the agreed signal */
static volatile sig_atomic_t signals_seen; /* this process's own deliveries */
static void on_signal(int sig)
{
    if (signals_seen++)
        _exit(128 + sig);
    stop_requested = sig;
}

/* Ours for the stop signals; SIGPIPE ignored (output to a closed pipe
 * fails quietly instead of killing training), and SIGXFSZ (a file over
 * the size limit, ulimit -f, is a failed write with EFBIG, reported like
 * a full disk). */
static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;   /* a write the signal lands in goes on */
    const int stops[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP};
    for (size_t i = 0; i < sizeof stops / sizeof *stops; i++)
        sigaction(stops[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
}

static void fmt_duration(double s, char *buf, size_t len)
{
    if (s < 90)
        snprintf(buf, len, "%.0fs", s);
    else if (s < 5400)
        snprintf(buf, len, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(buf, len, "%.0fh%02.0fm", floor(s / 3600), fmod(s / 60, 60));
}

typedef struct banner_ctx {
    const merak_args *a;
    const tool_opts *t;
    const merak_model_config *cfg;
    const merak_graph *g;
    int printed;   /* this process is the one that reports (rank 0) */
    int saved;     /* the step of the last checkpoint completed (or resumed
                    * from in --save), or -1 */
} banner_ctx;

/* What is about to run, printed once by rank 0. */
static void print_banner(const merak_run_info *ri, void *user)
{
    banner_ctx *c = user;
    c->printed = 1;
    printf("merak-train %s | model %s: %d layers, hidden %d, %d heads (%d kv), vocab %d, %.2fM params\n",
           MERAK_VERSION_STRING, c->cfg->name, c->cfg->n_layer, c->cfg->hidden, c->cfg->n_head,
           c->cfg->n_kv_head, c->cfg->vocab_size, (double)merak_graph_param_elems(c->g) / 1e6);
    char chunks[96] = "";
    if (merak_args_virtual_stages(c->a) > 1)
        snprintf(chunks, sizeof chunks, " (%d chunks per stage)", merak_args_virtual_stages(c->a));
    if (c->a->tp_overlap > 1)
        snprintf(chunks + strlen(chunks), sizeof chunks - strlen(chunks), ", %d sub-batches per micro-batch",
                 c->a->tp_overlap);
    printf("data %s | micro-batch %d x %d tokens, %d micro-batch(es) per step per replica | "
           "dp %d tp %d pp %d on %d rank(s)%s%s%s | %d thread(s) | dtype %s | arenas %.1f MiB\n",
           c->a->data, c->a->micro_batch, c->a->seq_len, c->a->micro_batches, ri->dp, ri->tp, ri->pp,
           ri->world, ri->pp > 1 ? ", schedule " : "",
           ri->pp > 1 ? (c->a->schedule ? c->a->schedule : "1f1b") : "", chunks, c->a->threads,
           merak_args_dtype(c->a), (double)ri->arena_bytes / (1 << 20));
    /* each stage's peak activation memory: its slots and recompute buffers */
    printf("activations (recompute %s):", c->a->recompute ? c->a->recompute : "none");
    for (int p = 0; p < ri->pp; p++)
        printf("%s stage %d %.2f MiB, %d/%d layers recomputed", p ? " |" : "", p,
               ri->stage_bytes[p] / (1 << 20), ri->stage_recomputed[p], ri->stage_layers[p]);
    printf("\n");
    /* what each stage really allocated: parameters, gradients, optimizer, activations, buffers */
    printf("memory (allocated):");
    for (int p = 0; p < ri->pp; p++)
        printf("%s stage %d %.3f MiB", p ? " |" : "", p, ri->stage_device_bytes[p] / (1 << 20));
    printf("\n");
    if (ri->placement && *ri->placement)
        printf("placement (rank 0): %s\n", ri->placement);
    if (ri->world > 1 && ri->coll) {
        /* a GPU pipeline's transfers: over NCCL, or staged (a CPU's: neither) */
        const int nccl = ri->p2p && !strcmp(ri->p2p, "nccl"), dev = ri->pp > 1 && (nccl || ri->staged_comm);
        printf("collectives: %s (%s)%s%s%s\n", ri->coll, ri->coll_why, dev ? "; pipeline transfers: " : "",
               dev ? (ri->p2p ? ri->p2p : "mpi") : "", dev && !nccl ? ", staged in host memory" : "");
    }
    if (ri->pp > 1) {
        int Q = ri->pp * merak_args_virtual_stages(c->a);
        printf("partition %s: stages start at blocks", c->a->partition ? c->a->partition : MERAK_PARTITION_DEFAULT);
        for (int q = 0; q < Q; q++)
            printf("%s%d", q ? "," : " ", ri->stage_first_block[q]);
        if (ri->predicted_step_s > 0)
            printf(" | predicted %s pipeline %.1f ms", Q == ri->pp ? "1F1B" : "1F1B (of the virtual stages)",
                   1e3 * ri->predicted_step_s);
        printf("\n");
    }
    fflush(stdout);
}

/* A checkpoint saved, failed or resumed from, on rank 0. */
static void print_checkpoint(const merak_checkpoint_info *ci, void *user)
{
    switch (ci->event) {
    case MERAK_CHECKPOINT_SAVED:
        ((banner_ctx *)user)->saved = ci->step;
        printf("checkpoint step %d saved to %s (%.1f MB in %.2f s, %.0f MB/s, in the background)\n", ci->step,
               ci->path, ci->bytes / 1e6, ci->seconds, ci->seconds > 0 ? ci->bytes / 1e6 / ci->seconds : 0);
        break;
    case MERAK_CHECKPOINT_FAILED:
        fprintf(stderr, "%s: warning: %s (training goes on, earlier checkpoints are kept)\n", cli_prog, ci->error);
        break;
    case MERAK_CHECKPOINT_RESUMED:
        if (ci->in_save)
            ((banner_ctx *)user)->saved = ci->step;   /* a stop before the next step keeps it */
        printf("resumed from %s at step %d (%.1f MB, loaded in %.2f s)\n", ci->path, ci->step, ci->bytes / 1e6,
               ci->seconds);
        if (ci->error)
            fprintf(stderr, "%s: note: --resume-data-change: %s\n", cli_prog, ci->error);
        if (ci->dtype_was)
            fprintf(stderr, "%s: note: the checkpoint was trained in %s; this run goes on from its float32 masters "
                    "in %s (--dtype %s keeps its arithmetic)\n", cli_prog, ci->dtype_was,
                    merak_args_dtype(((banner_ctx *)user)->a), ci->dtype_was);
        if (ci->step >= ((banner_ctx *)user)->a->steps)
            fprintf(stderr, "%s: note: nothing to train: the checkpoint is at step %d and --steps is %d (the "
                    "steps in all, not more of them)\n", cli_prog, ci->step, ((banner_ctx *)user)->a->steps);
        break;
    case MERAK_CHECKPOINT_NONE:
        printf("no checkpoint in %s yet: starting at step 0\n", ci->path);
        break;
    }
    fflush(stdout);
}

/* The screen line of a step, every --log-every steps and at the last. */
static void print_step(const merak_step_info *i, void *user)
{
    int every = ((const banner_ctx *)user)->t->log_every;
    if (i->step % every && i->step != i->steps - 1 && !i->skipped && !i->evaluated)
        return;
    char eta[32];
    fmt_duration(i->eta_s, eta, sizeof eta);
    char val[48] = "";
    if (i->evaluated)
        snprintf(val, sizeof val, " | val loss %.6f", i->val_loss);
    printf("step %5d/%d | loss %.6f%s | lr %.3e | grad norm %.4f | %.0f tok/s | %.1f ms | left %s%s\n",
           i->step, i->steps, i->loss, val, i->lr, i->grad_norm, i->tokens_per_s, i->step_ms, eta,
           i->skipped ? " | skipped: not finite, no update" : "");
    fflush(stdout);
}

/* A sample of the model's text, between the step lines. */
static void print_sample(int step, const char *text, size_t len, void *user)
{
    (void)user;
    printf("sample after step %d: ", step);
    fwrite(text, 1, len, stdout);
    printf("\n");
    fflush(stdout);
}

/* --auto's choice and its runners-up, as merak-plan --auto ranks them. */
static void print_auto(const merak_auto_report *r)
{
    printf("auto: %zu layouts of %d rank(s) (%d per node) on %s (%.2f GB each): %zu fit, %zu simulated\n", r->tried,
           r->world, r->per_node, r->profile, r->memory / 1e9, r->fitting, r->simulated);
    for (int i = 0; i < r->count; i++) {
        const merak_auto_layout *l = &r->layout[i];
        char sched[40];
        snprintf(sched, sizeof sched, l->virtual_stages > 1 ? "%s/%d" : "%s", l->schedule, l->virtual_stages);
        printf("%s dp %d x tp %d x pp %d, %s, recompute %s, zero %d, %d micro-batch(es) per replica | "
               "predicted step %.4g s, %.4g tokens/s, peak %.3g GB\n", i ? "  runner-up" : "auto: chose",
               l->dp, l->tp, l->pp, sched, l->recompute, l->zero, l->micro_batches, l->step_s, l->tokens_per_s,
               l->peak_bytes / 1e9);
    }
    fflush(stdout);
}

static int save_bf16(const merak_args *a) { return a->save_dtype && strcmp(a->save_dtype, "bf16") == 0; }

/* An output of the weights and the --model file it must not be. */
typedef struct model_out {
    const char *model;
    char *err;
    size_t errlen;
} model_out;

/* merak_weights_each_output's fn: -1 (err set) when file is the model's config.json. */
static int weights_not_model(void *ctx, const char *file)
{
    model_out *m = ctx;
    return merak_file_not_input("--save-weights", file, "the --model config file", m->model, m->err, m->errlen);
}

static int note_file(void *ctx, const char *file)
{
    cli_saved_note(ctx, file);
    return 0;
}

/* What --save-weights wrote: the file, or the index and its shards. */
static void print_saved(const merak_graph *g, const merak_args *a)
{
    cli_saved s = {0};
    char err[512], said[3 * 4096 + 64];
    if (merak_weights_each_output(g, a->save_weights, save_bf16(a), a->save_shard_size, note_file, &s, err,
                                  sizeof err) != 0)
        printf("saved weights to %s\n", a->save_weights);
    else
        printf("saved weights to %s\n", cli_saved_say(&s, said, sizeof said));
}

int main(int argc, char **argv)
{
    merak_args ta;
    tool_opts t;
    char err[512];
    cli_start("merak-train");
    /* MPI and UCX may install handlers of their own as they start: ours
     * from the start (a signal during set-up is a stop at the first step)
     * and again after merak_init, so a signal asks for a stop, never a crash. */
    catch_signals();
    parse_args(argc, argv, &ta, &t);

    merak_model_config cfg;
    cli_model(t.model, &cfg);
    if (cfg.window && ta.seq_len > cfg.window)
        cli_die_usage("--seq-len %d is longer than the model's sliding_window %d: sliding-window attention is not "
                      "implemented (within the window it is causal attention)", ta.seq_len, cfg.window);
    if (ta.seq_len > cfg.max_positions)
        cli_die_usage("--seq-len %d is beyond the model's %d positions", ta.seq_len, cfg.max_positions);
    /* interleaved: each model chunk the same number of transformer layers */
    int V = merak_args_virtual_stages(&ta);
    if (V > 1 && cfg.n_layer % V)
        cli_die_usage("--virtual-stages %d does not divide the model's %d layers", V, cfg.n_layer);
    merak_graph *g = merak_model_build(&cfg, ta.micro_batch, ta.seq_len, err, sizeof err);
    if (!g)
        cli_die("%s", err);
    /* the model's config.json is an input too (the library checks the rest) */
    const char *outs[] = {ta.metrics, ta.trace}, *flags[] = {"--metrics", "--trace"};
    for (int i = 0; i < 2; i++)
        if (merak_file_not_input(flags[i], outs[i], "the --model config file", t.model, err, sizeof err) < 0)
            cli_die("%s", err);
    model_out mo = {t.model, err, sizeof err};
    if (ta.save_weights && merak_weights_each_output(g, ta.save_weights, save_bf16(&ta), ta.save_shard_size,
                                                     weights_not_model, &mo, err, sizeof err) != 0)
        cli_die("%s", err);

    banner_ctx ctx = {&ta, &t, &cfg, g, 0, -1};
    ta.on_start = print_banner;
    ta.on_step = print_step;
    ta.on_sample = print_sample;
    ta.on_checkpoint = print_checkpoint;
    ta.user = &ctx;
    ta.stop = &stop_requested;
    ta.model = &cfg;

    /* --auto: every rank runs the same search alone (plan/auto.h) */
    merak_auto_report rep;
    if (t.autoplan) {
        if (!t.zero_given)
            ta.zero = -1;   /* searched */
        int rc = merak_args_auto(&ta, g, t.global_batch, &rep, err, sizeof err);
        if (rc == MERAK_USAGE)
            cli_die_usage("--auto: %s", err);
        if (rc < 0)
            cli_die("--auto: %s", err);
    }

    if (merak_init(ta.dp, ta.tp, ta.pp, err, sizeof err) < 0) {
        merak_graph_destroy(g);
        if (err[0])
            fprintf(stderr, "%s: %s\n", cli_prog, err);
        return EXIT_FAILURE;
    }
    catch_signals();
    /* merak_init may have bound this rank (its placement under mpirun):
     * the default threads are the cores it may run on now */
    if (!t.threads_given)
        ta.threads = cli_default_threads();
    if (t.autoplan && merak_rank() == 0)
        print_auto(&rep);
    if (t.global_batch && !t.autoplan) {
        /* the replicas the grid has: every rank knows its degrees */
        int tp = ta.tp ? ta.tp : 1, pp = ta.pp ? ta.pp : 1;
        long dp = ta.dp ? ta.dp : merak_world_size() / (tp * pp), per = dp * ta.micro_batch;
        if (t.global_batch % per || t.global_batch / per > (1 << 20))
            cli_die_usage("--global-batch %ld is not a whole number (up to %d) of dp x micro-batch = %ld x %d "
                          "sequences", t.global_batch, 1 << 20, dp, ta.micro_batch);
        ta.micro_batches = (int)(t.global_batch / per);
    }

    int steps = merak_train(g, &ta, err, sizeof err);
    if (steps == MERAK_FAILED_HERE) {
        fprintf(stderr, "%s: %s\n", cli_prog, err);
        merak_abort(EXIT_FAILURE);
    }
    if (steps < 0) {
        merak_graph_destroy(g);
        if (err[0])
            fprintf(stderr, "%s: %s\n", cli_prog, err);
        return steps == MERAK_USAGE ? EXIT_USAGE : EXIT_FAILURE;
    }
    if (ta.save_weights && ctx.printed)
        print_saved(g, &ta);
    merak_graph_destroy(g);
    if (stop_requested) {
        /* with its checkpoint written the stop is an orderly end: requeue
         * and resume (rank 0 hears of the checkpoint; the others follow it) */
        int kept = ta.save && (!ctx.printed || ctx.saved == steps);
        if (ctx.printed)
            fprintf(stderr, "%s: stopped by signal %d after step %d%s\n", cli_prog, (int)stop_requested, steps,
                    kept ? "; resume with --resume latest"
                         : ta.save ? " (its checkpoint could not be written)" : " (no --save: nothing checkpointed)");
        return kept ? 0 : 128 + (int)stop_requested;
    }
    return 0;
}
