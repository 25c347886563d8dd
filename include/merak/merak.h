/*
 * merak.h - the Merak runtime's public C API.
 *
 * A model is a graph of ops over tensors with static shapes (section 6 of
 * DESIGN.md).  Building a graph allocates no parameter memory: parameters are
 * shapes, names and init rules until an executor allocates the slice of the
 * graph it runs.
 *
 * Errors: functions that can fail return a negative value (or NULL) and write
 * one line into the caller's error buffer, or, for graph-building calls, into
 * the graph's error string (merak_graph_error).  Nothing here prints.
 * Graph building stops at its first error (see merak_graph_error), so a model
 * is written as a plain sequence of calls and checked once at the end.
 */
#ifndef MERAK_MERAK_H
#define MERAK_MERAK_H

#include <stddef.h>
#include <stdint.h>

#include "merak/rope.h"
#include "merak/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MERAK_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------ model config */

typedef enum merak_arch {
    MERAK_ARCH_GPT2 = 1,  /* learned positions, LayerNorm, GELU(tanh), fused QKV, biases, tied head */
    MERAK_ARCH_LLAMA = 2, /* RMSNorm, RoPE, SwiGLU, GQA, no biases, untied head */
} merak_arch;

typedef struct merak_model_config {
    merak_arch arch;
    char name[64];         /* preset name, or the config file's model_type */
    int vocab_size;
    int max_positions;     /* n_positions / max_position_embeddings */
    int hidden;            /* n_embd / hidden_size */
    int n_layer;
    int n_head;
    int n_kv_head;         /* == n_head for GPT-2 */
    int ffn_hidden;        /* n_inner (default 4*hidden) / intermediate_size */
    float norm_eps;        /* layer_norm_epsilon / rms_norm_eps */
    float rope_theta;      /* LLaMA only */
    int tie_embeddings;    /* 1: the LM head is the token embedding */
    float init_std;        /* initializer_range */
    float dropout;         /* residual/embedding dropout probability (0 = off) */
    int window;            /* Mistral's sliding_window when shorter than its positions, which
                            * it then bounds (0: none) */
    /* rope_scaling (LLaMA family; merak/rope.h): MERAK_ROPE_DEFAULT when
     * the config has none, the other fields then unused */
    merak_rope_type rope_type;
    float rope_factor;
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int rope_original_positions; /* dynamic, llama3 */
    int qkv_bias;          /* Qwen2: biases on q_proj, k_proj and v_proj (LLaMA family) */
} merak_model_config;

/* Fills cfg from a preset name ("gpt2", "gpt2-medium", "tiny-gpt2",
 * "llama2-7b", "tiny-llama", ...).  Returns 0, or -1 if the name is unknown. */
int merak_model_preset(const char *name, merak_model_config *cfg);

/* NULL-terminated list of the preset names. */
const char *const *merak_model_preset_names(void);

/* Reads a Hugging Face config.json (GPT2Config or LlamaConfig fields).
 * Returns 0, or -1 with one line in err naming the file and the problem. */
int merak_model_config_load(const char *path, merak_model_config *cfg,
                            char *err, size_t errlen);

/* cfg as a Hugging Face config.json (GPT2Config or LlamaConfig fields),
 * which merak_model_config_load reads back as the same model (its name
 * becomes the model type).  malloc'd text, or NULL when out of memory. */
char *merak_model_config_json(const merak_model_config *cfg);

/* Loads `spec`: a preset name, or a path to a config.json (anything that
 * contains '/' or ends in ".json").  Returns 0 or -1 with err set. */
int merak_model_config_resolve(const char *spec, merak_model_config *cfg,
                               char *err, size_t errlen);

/* Checks the numbers are usable (positive, heads divide hidden, ...).
 * Returns 0 or -1 with err set. */
int merak_model_config_check(const merak_model_config *cfg, char *err, size_t errlen);

/* ------------------------------------------------------------------ graph */

typedef struct merak_graph merak_graph;

typedef enum merak_dtype { MERAK_F32 = 0, MERAK_I32 = 1 } merak_dtype;

/* How a parameter is initialised (deterministically, from the seed and the
 * parameter's name, so any shard of it can be generated on its own). */
typedef enum merak_init_kind {
    MERAK_INIT_NORMAL = 0, /* N(0, std^2) */
    MERAK_INIT_ZEROS = 1,
    MERAK_INIT_ONES = 2,
} merak_init_kind;

typedef struct merak_param_init {
    merak_init_kind kind;
    float std;
} merak_param_init;

/* Tensor-parallel attribute of a parameter. */
typedef enum merak_tp_attr {
    MERAK_TP_REPLICATED = 0,
    MERAK_TP_COLUMN = 1,  /* output features split */
    MERAK_TP_ROW = 2,     /* input features split */
    MERAK_TP_VOCAB = 3,   /* vocabulary rows split */
} merak_tp_attr;

/* How a parameter is laid out in Hugging Face files: the graph keeps every
 * linear weight as [out, in] (nn.Linear); GPT-2's Conv1D stores [in, out]. */
typedef enum merak_hf_layout {
    MERAK_HF_AS_IS = 0,
    MERAK_HF_TRANSPOSED = 1,
} merak_hf_layout;

#define MERAK_MAX_DIMS 4
#define MERAK_NAME_MAX 128
/* The most layers a model config may have (merak_model_config_check). */
#define MERAK_MAX_LAYERS 2048

/* An empty graph.  NULL on out-of-memory. */
merak_graph *merak_graph_create(void);
void merak_graph_destroy(merak_graph *g);

/* The first graph-building error (an empty string if none); owned by g.
 *
 * The building calls are merak_graph_input, merak_graph_param, the
 * merak_op_* calls, merak_graph_tie, merak_graph_set_tp and
 * merak_graph_load_tp_rules.  The first one that fails leaves its message
 * here and the graph as it was; from then on every building call changes
 * nothing, returns -1 and keeps that message.  So the -1 that a failed op
 * returns can be passed on to the next op without a check: the error still
 * names the op that went wrong, not the one that got -1 as its input.
 * Check once at the end (the last call's result, or this string). */
const char *merak_graph_error(const merak_graph *g);

/* Graph inputs and parameters.  Return a tensor id (>= 0), or -1
 * (merak_graph_error says why). */
int merak_graph_input(merak_graph *g, const char *name, merak_dtype dtype,
                      int ndim, const int64_t *shape);
int merak_graph_param(merak_graph *g, const char *name, int ndim,
                      const int64_t *shape, merak_param_init init, merak_tp_attr tp,
                      merak_hf_layout layout);

/* Ops.  Each takes tensor ids, infers the output's shape, and returns the
 * output's id (>= 0), or -1 with merak_graph_error() set (or already set by
 * an earlier failure).  Pass -1 for an absent optional parameter (bias). */
int merak_op_embedding(merak_graph *g, int ids, int wte);          /* (B,T) -> (B,T,C) */
int merak_op_pos_embedding(merak_graph *g, int x, int wpe);        /* x + wpe[t] */
int merak_op_layernorm(merak_graph *g, int x, int w, int b, float eps);
int merak_op_rmsnorm(merak_graph *g, int x, int w, float eps);
int merak_op_linear(merak_graph *g, int x, int w, int b);          /* w (O,K) */
/* Causal attention.  With k == v == -1, q is a fused (B,T,(nh+2*nkv)*hd)
 * tensor [q | k | v]; otherwise q (B,T,nh*hd), k and v (B,T,nkv*hd).
 * rope_theta > 0 applies rotary embeddings to q and k. */
int merak_op_attention(merak_graph *g, int q, int k, int v, int n_head,
                       int n_kv_head, float rope_theta);
/* The same with the rotary embeddings rope describes (NULL or theta 0:
 * none), scaled as its type says (merak/rope.h); DYNAMIC is resolved for
 * the graph's sequence length as the Hugging Face library does. */
int merak_op_attention_rope(merak_graph *g, int q, int k, int v, int n_head,
                            int n_kv_head, const merak_rope *rope);
int merak_op_gelu(merak_graph *g, int x);
int merak_op_swiglu(merak_graph *g, int gate, int up);             /* silu(gate)*up */
int merak_op_add(merak_graph *g, int a, int b);
int merak_op_dropout(merak_graph *g, int x, float p);
/* Mean cross-entropy over all rows; logits (B,T,V), targets (B,T) int32.
 * The output is a scalar (shape [1]) and the graph's loss. */
int merak_op_cross_entropy(merak_graph *g, int logits, int targets);

/* Makes parameter `alias` share storage with `param` (tied weights).
 * Shapes must match.  Returns 0 or -1 (merak_graph_error says why). */
int merak_graph_tie(merak_graph *g, int alias, int param);

/* Tensor-parallel rules: sets the attribute of every parameter whose name
 * matches the shell pattern (fnmatch(3)).  Only linear weights (column, row)
 * and embedding tables (vocab) can be split; a linear's bias follows its
 * weight.  Returns the number of parameters matched, or -1 (an unknown
 * attribute, or an earlier building error; merak_graph_error says which). */
int merak_graph_set_tp(merak_graph *g, const char *pattern, merak_tp_attr attr);
/* Applies a rules file: one "PATTERN column|row|vocab|replicated" per line,
 * '#' starts a comment.  Returns 0, or -1 with err naming file and line (the
 * graph is unchanged), or -1 with the graph's first error copied to err when
 * its building had already failed. */
int merak_graph_load_tp_rules(merak_graph *g, const char *path, char *err, size_t errlen);
/* "column" -> MERAK_TP_COLUMN, ...; 0 or -1. */
int merak_tp_attr_parse(const char *s, merak_tp_attr *attr);

/* Introspection. */
int merak_graph_num_ops(const merak_graph *g);
int merak_graph_num_tensors(const merak_graph *g);
int merak_graph_num_params(const merak_graph *g);   /* distinct parameters */
int64_t merak_graph_param_elems(const merak_graph *g); /* distinct parameter elements */
double merak_graph_flops(const merak_graph *g);     /* forward FLOPs */
/* A one-op-per-line description, for --help-graph style dumps. */
int merak_graph_print(const merak_graph *g, char *buf, size_t len);

/* The tensor called NAME (input, parameter or op output "op.N"), or -1. */
int merak_graph_find(const merak_graph *g, const char *name);

/* Builds GPT-2 or LLaMA for micro-batch B and sequence length T.
 * Returns NULL with err set if the config or T is not usable. */
merak_graph *merak_model_build(const merak_model_config *cfg, int B, int T,
                               char *err, size_t errlen);

/* ------------------------------------------------------------------ training */

/* The learning-rate curve after warmup ("schedule" alone means the
 * pipeline schedule). */
typedef enum merak_lr_kind {
    MERAK_LR_CONSTANT = 0,
    MERAK_LR_COSINE = 1,
} merak_lr_kind;
/* "constant" / "cosine" -> kind; 0, or -1 for another name.  The names
 * for messages ("constant or cosine"): merak_lr_names(). */
int merak_lr_parse(const char *name, merak_lr_kind *kind);
const char *merak_lr_names(void);

/* What the trainer reports after every optimizer step. */
typedef struct merak_step_info {
    int step, steps;
    double loss;            /* mean cross-entropy of the step, before the update */
    double grad_norm;       /* global L2 norm before clipping */
    float lr;
    double tokens_per_s, step_ms;
    double eta_s;           /* estimated seconds left */
    /* Data parallelism (dp > 1, rank 0's view): milliseconds waited for the
     * gradient reduction after the backward, and the fraction of gradient
     * bytes whose all-reduce had finished while the backward still ran. */
    double dp_wait_ms, dp_overlap;
    /* Bytes rank 0 moved this step per group (sent, or the buffer size of a
     * collective it took part in): tensor-parallel sums, pipeline sends,
     * data-parallel reduction, tied-embedding reduction. */
    double tp_bytes, pp_bytes, dp_bytes, tied_bytes;
    /* 1 when the loss or the gradient norm was not finite and on_nan_skip
     * skipped the update (loss and grad_norm are then NaN or Inf) */
    int skipped;
    /* 1 when the validation set was evaluated after this step's update
     * (every eval_every steps and the last): val_loss is then its mean
     * cross-entropy over the eval_batches windows */
    int evaluated;
    double val_loss;
} merak_step_info;

/* What the trainer reports once, before the first step. */
typedef struct merak_run_info {
    int dp, tp, pp, world;
    size_t arena_bytes;     /* rank 0's activation and gradient arenas */
    /* [pp] per pipeline stage (its first rank's): activation memory (the
     * slots' arenas and the recompute buffers, bytes), layers, and layers
     * recomputed */
    const double *stage_bytes;
    const int *stage_layers, *stage_recomputed;
    /* [pp * virtual stages]: the first block (piece between cut points) of
     * each stage; the autopipe partition's predicted 1F1B step (seconds,
     * from the device profile; 0 for the other methods) */
    const int *stage_first_block;
    double predicted_step_s;
    /* [pp] per pipeline stage (its first rank's): the memory it holds from
     * the backend's allocator (parameters, gradients, optimizer state,
     * activations, buffers; bytes), measured when training starts, by
     * which time the runtime has allocated all it will */
    const double *stage_device_bytes;
    /* 1 when device buffers go through host memory (the cuda device with
     * several ranks: the collectives unless coll is "nccl", the pipeline's
     * transfers unless p2p is "nccl") */
    int staged_comm;
    /* where rank 0 runs and who placed it: the Slurm plugin, or under
     * mpirun the ranks themselves (GPU, NIC and cores as the plugin would
     * choose them; merak-train(1), ENVIRONMENT); "" for one process */
    const char *placement;
    /* the collectives' backend ("nccl" or "mpi"; merak_args.coll) and why
     * it was chosen, one phrase */
    const char *coll, *coll_why;
    /* the pipeline transfers' backend ("nccl", "mpi" or "ucx";
     * merak_args.p2p): device buffers over NCCL with "nccl", staged
     * through host memory otherwise */
    const char *p2p;
} merak_run_info;

/* What the trainer reports about checkpoints, on rank 0. */
typedef enum merak_checkpoint_event {
    MERAK_CHECKPOINT_SAVED = 0,    /* path is complete (DONE written) */
    MERAK_CHECKPOINT_FAILED = 1,   /* error says why; earlier checkpoints are kept */
    MERAK_CHECKPOINT_RESUMED = 2,  /* training goes on from path, at step */
    MERAK_CHECKPOINT_NONE = 3,     /* resume "latest" found none yet: step 0 */
} merak_checkpoint_event;
typedef struct merak_checkpoint_info {
    merak_checkpoint_event event;
    int step;               /* steps done at the checkpoint */
    const char *path;       /* its directory (NONE: the directory searched) */
    double bytes, seconds;  /* SAVED: every file; from the copy to the last byte on disk;
                             * RESUMED: every file; rank 0's time to load its part */
    const char *error;      /* FAILED; RESUMED: what differs from the checkpoint's data
                             * (resume_data_change), or NULL */
    int in_save;            /* RESUMED: the checkpoint lies in the save directory (where
                             * "latest" finds it), so a stop before the next step loses
                             * nothing and writes nothing */
    const char *dtype_was;  /* RESUMED: the arithmetic the checkpoint was trained in
                             * ("fp32", "tf32", "bf16") where this run's differs (it goes
                             * on from the same float32 masters), else NULL */
} merak_checkpoint_info;

/* Training arguments (the MerakArguments of the paper).  Start from
 * merak_args_default() and change what you need. */
typedef struct merak_args {
    const char *data;          /* token shard glob (llm.c format), required */
    const char *init;          /* Hugging Face safetensors to start from, or NULL; a tensor
                                * in it that the model does not have is an error unless
                                * init_extra */
    int init_extra;
    const char *save_weights;  /* safetensors written at the end, or NULL */
    const char *save_dtype;    /* its values: "fp32" (NULL: the default) or "bf16", as the
                                * Hugging Face hub publishes weights */
    int64_t save_shard_size;   /* bytes of tensor data per file of save_weights (default
                                * MERAK_SHARD_SIZE_DEFAULT; 0: one file whatever the size):
                                * more are written as Hugging Face shards and their index */
    const char *metrics;       /* JSON-lines file, one object per step, or NULL */
    const char *trace;         /* Chrome trace JSON of every rank's instructions and
                                * collectives, merged and written by rank 0 at the end; or NULL */
    int micro_batch;           /* B: must match the graph's input_ids (B,T) */
    int seq_len;               /* T */
    int micro_batches;         /* M: gradient accumulation steps */
    int steps;
    float lr, min_lr;
    int warmup;                /* linear warmup steps; 0 = none */
    merak_lr_kind lr_schedule;
    float weight_decay, beta1, beta2, eps;
    float clip;                /* global-norm clipping; 0 = off */
    uint64_t seed;             /* initialisation and dropout */
    int threads;               /* CPU threads for kernels and BLAS */
    /* Parallel layout: degrees (0 = from MERAK_DP/TP/PP, dp from the rank
     * count), the pipeline schedule ("gpipe", "1f1b", "scp", "zb-h1",
     * "interleaved"; NULL = 1f1b) and the
     * partition method ("uniform", "parameters", "autopipe" or
     * "custom:S0,S1,..."; NULL = MERAK_PARTITION_DEFAULT; see merak-train(1)).  Runs
     * over MPI when launched by mpirun/srun or when a degree is above 1;
     * one process is the 1x1x1 grid of the same step loop. */
    int dp, tp, pp;
    const char *schedule;
    const char *partition;
    /* The device profile the autopipe partition times ops with: a name in
     * the devices file or a profile file (merak-plan --calibrate writes
     * one); NULL = "cpu", or "h100-80g" with device "cuda". */
    const char *profile;
    /* Interleaved schedule: model chunks per pipeline stage (virtual
     * stages, V >= 2 dividing the model's layers; 0 = 2).  Other schedules
     * take 0 or 1. */
    int virtual_stages;
    /* Sub-pipelined tensor parallelism: each micro-batch runs as tp_overlap
     * sub-batches along the batch, so one sub-batch's tensor-parallel sum
     * overlaps the next one's compute (0 or 1: the whole micro-batch; at
     * most 64, dividing micro_batch). */
    int tp_overlap;
    /* Activation recomputation: "none" (NULL), "full", "stage-aware[=R0]"
     * (Merak's: stage 0 recomputes the fraction R0 of its layers, default
     * 0.9, later stages less, the last none) or "budget=GB" (each stage the
     * fewest layers that keep its activation memory under GB GiB). */
    const char *recompute;
    /* A tensor-parallel rules file applied over the graph's own attributes
     * (see merak_graph_load_tp_rules), or NULL. */
    const char *tp_rules;
    /* Data parallelism: zero = 1 shards the optimizer state over dp (ZeRO
     * stage 1: reduce-scatter the gradients, update a 1/dp share, all-gather
     * the parameters); zero = 0 all-reduces the gradients in buckets of
     * bucket_mb MiB (0: 25), each launched during the backward as soon as
     * its gradients are final. */
    int zero;
    double bucket_mb;
    /* Point-to-point between pipeline stages: "mpi", "ucx" (UCX's tag API,
     * worker addresses exchanged over MPI; UCX_* variables apply) or
     * "nccl" (GPU buffers over NCCL, one communicator per link; needs the
     * collectives to be NCCL's), or NULL: "nccl" where the collectives are
     * NCCL's, else "mpi". */
    const char *p2p;
    /* Collectives on device buffers: "nccl" (NCCL's communicators, one per
     * group), "mpi" (through host memory), or NULL: NCCL when every rank has
     * a GPU of its own (or NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1),
     * else MPI.  Host tensors always take MPI. */
    const char *coll;
    /* Seconds a rank may wait in one collective or transfer before it
     * decides a peer has died or stopped: it writes one line naming itself,
     * the operation and the group or peer, and exits with status 1, which
     * ends the job (0: wait for ever; MERAK_COMM_TIMEOUT_DEFAULT unless
     * set).  It must be longer than any pause of one rank that the others
     * wait through (a large save_weights written by rank 0). */
    double comm_timeout;
    /* Where tensors live and kernels run: "cpu" (NULL) or "cuda" (one
     * process, on the GPU MERAK_GPU names, else the first). */
    const char *device;
    /* Called once on rank 0 before the first step (may be NULL). */
    void (*on_start)(const struct merak_run_info *info, void *user);
    /* Called after every step on rank 0 (may be NULL). */
    void (*on_step)(const merak_step_info *info, void *user);
    /* Samples while training: every sample_every steps and after the last
     * (0: never), rank 0 continues sample_prompt (NULL or "": the start of
     * a document, the tokenizer's end-of-text token) with sample_tokens
     * tokens (0: 64) drawn at temperature 1 from the run's seed, and hands
     * the text to on_sample after that step's on_step.  tokenizer (a
     * tokenizer.json, or NULL: a token is a byte) encodes the prompt and
     * decodes the sample.  Every rank takes part (the parameters are
     * gathered whole on rank 0). */
    int sample_every, sample_tokens;
    const char *sample_prompt, *tokenizer;
    void (*on_sample)(int step, const char *text, size_t len, void *user);
    void *user;
    /* If non-NULL, training stops after the step during which it becomes
     * non-zero on any rank (set from a signal handler to the signal's
     * number): the ranks agree on it every step, so all stop after the
     * same one, with *stop set on every rank; a checkpoint is written when
     * `save` is set, and weights are still saved. */
    volatile int *stop;
    /* Checkpoints (see merak-train(1)): a directory `save`/step_N every
     * save_every steps (0: only at the end and when stopped), written in
     * the background while training goes on, keeping the newest keep_last
     * (0: all).  resume: a checkpoint directory, a directory of them (its
     * newest complete one), or "latest" (the newest under `save`; none
     * yet: training starts at step 0); the run goes on to `steps` steps in
     * all, bit for bit as if it had never stopped in the same layout, and
     * in any other layout from the same state.  A failed save ends the run
     * (every rank alike) unless save_error_continue, when it is reported
     * and training goes on. */
    const char *save;
    int save_every, keep_last;
    /* A step whose loss or gradient norm is not finite (NaN or Inf, on any
     * rank: they are reduced over the grid): 0 ends the run naming the
     * step (every rank alike); 1 skips its update and goes on (the step's
     * data is consumed; on_step reports it skipped). */
    int on_nan_skip;
    /* Validation: shards (a glob) whose first eval_batches windows of
     * micro_batch x seq_len tokens (0: 4 per replica; a multiple of dp,
     * the replicas splitting them) are evaluated, forward only and without
     * dropout, after every eval_every-th step (0: only the last) and after
     * the last; NULL: none. */
    const char *val_data;
    int eval_every, eval_batches;
    const char *resume;
    /* A resumed run reads what the saved one read: the same micro-batch,
     * sequence length and shards (in order, with their token counts), or
     * it is refused naming the difference; 1 goes on anyway, on_checkpoint
     * saying what differs (RESUMED, in error). */
    int resume_data_change;
    int save_error_continue;
    /* The model's configuration, recorded in checkpoints and checked
     * against theirs on resume (may be NULL). */
    const merak_model_config *model;
    /* Called on rank 0 for every checkpoint saved, failed or resumed from
     * (may be NULL). */
    void (*on_checkpoint)(const merak_checkpoint_info *info, void *user);
    /* Arithmetic (NULL: bf16 on a GPU backend, fp32 on the CPU;
     * merak_args_dtype): "fp32", the exact reference; "tf32" (device
     * cuda only): fp32, with every product on the tensor cores with its
     * inputs rounded to TF32; or "bf16": bf16
     * activations, activation gradients and compute copies of the weights
     * over fp32 master weights, moments and weight gradients (DESIGN.md
     * 7a; runtime/pipe/exec.h says where values round).  The CPU backend
     * emulates bf16 (the reference); device cuda runs it on the tensor
     * cores.
     * Checkpoints hold the fp32 masters whatever the dtype. */
    const char *dtype;
} merak_args;

/* The partition method when merak_args.partition is NULL: the planner's
 * fastest predicted step. */
#define MERAK_PARTITION_DEFAULT "autopipe"
/* merak_args.comm_timeout's default, seconds (PyTorch's NCCL default). */
#define MERAK_COMM_TIMEOUT_DEFAULT 600.0
/* merak_args.save_shard_size's default, bytes: Hugging Face's
 * max_shard_size="5GB" (transformers counts GB as 10^9 bytes). */
#define MERAK_SHARD_SIZE_DEFAULT 5000000000LL

void merak_args_default(merak_args *a);
/* Checks every argument that does not need the graph or the files: ranges,
 * and the names of the schedule, partition method, point-to-point backend
 * and device (also "cuda" in a build without CUDA).  MERAK_OK, or
 * MERAK_USAGE with one line in err naming the argument.  merak_train runs
 * the same check. */
int merak_args_check(const merak_args *a, char *err, size_t errlen);
/* The run's arithmetic: dtype, else the device's default ("bf16" on a
 * device backend with bf16 kernels, cuda; "fp32" on the CPU). */
const char *merak_args_dtype(const merak_args *a);
/* 1 when the run is bf16 (merak_args_dtype), else 0 (fp32 or tf32). */
int merak_args_bf16(const merak_args *a);
/* Model chunks per pipeline stage the arguments ask for: virtual_stages,
 * or the schedule's default (2 for interleaved, else 1). */
int merak_args_virtual_stages(const merak_args *a);
/* The names of the pipeline schedules, recomputation policies and
 * partition methods, for messages ("gpipe, 1f1b, scp, zb-h1 or
 * interleaved"). */
const char *merak_schedule_names(void);
const char *merak_recompute_names(void);
const char *merak_partition_names(void);
/* 1 if this build has the CUDA backend. */
int merak_have_cuda(void);
/* The device profile the arguments time operations with: profile, else
 * "h100-80g" with device "cuda", else "cpu". */
const char *merak_args_profile(const merak_args *a);

/* ---- automated 3D parallelism (merak-train --auto) */
enum { MERAK_AUTO_LAYOUTS = 6 };

/* One layout the search planned. */
typedef struct merak_auto_layout {
    int dp, tp, pp;
    const char *schedule;        /* its name */
    int virtual_stages;          /* interleaved's model chunks per stage, else 1 */
    const char *recompute;       /* the policy's name */
    int zero;                    /* 1: ZeRO-1 */
    int micro_batches;           /* per replica and step */
    double step_s, tokens_per_s, mfu;
    double peak_bytes;           /* what its fullest rank holds */
} merak_auto_layout;

typedef struct merak_auto_report {
    int world, per_node;         /* the ranks planned for, and per node */
    const char *profile;         /* the device profile (merak_args_profile) */
    double memory;               /* bytes one device holds, by the profile */
    long global_batch;           /* sequences per step */
    size_t tried, fitting, simulated;   /* layouts that can run, fit, were simulated */
    int count;                   /* layouts below: the chosen one, then its runners-up */
    merak_auto_layout layout[MERAK_AUTO_LAYOUTS];
} merak_auto_report;

/* Chooses the layout of a for the ranks this process was launched with
 * (read from the launcher's environment, so every rank finds the same
 * answer alone, before merak_init), as merak-plan --auto answers the same
 * question: of every dp x tp x pp with tp inside a node, and every
 * schedule, recomputation policy and ZeRO setting a leaves open (dp, tp,
 * pp 0; schedule and recompute NULL; zero -1), the fastest step the
 * planner predicts on a's device profile whose every rank fits in the
 * device's memory, for global_batch sequences per step of micro_batch
 * each (0: micro_batch per rank).  g is the model built for one
 * micro-batch.  Sets a's dp, tp, pp, schedule, virtual_stages, recompute,
 * zero and micro_batches; fills rep (may be NULL).  MERAK_OK; MERAK_USAGE
 * with one line in err for a question that cannot be asked (the batch does
 * not split over any layout, a bad name); MERAK_FAILED with err when no
 * layout fits (the line says the least memory one needs) or on another
 * failure. */
int merak_args_auto(merak_args *a, const merak_graph *g, long global_batch, merak_auto_report *rep, char *err,
                    size_t errlen);

/* Starts the runtime on a dp x tp x pp grid of ranks (Merak's
 * merak.init(dp, tp, pp)); 0 for a degree takes it from MERAK_DP/TP/PP, dp
 * from the rank count.  Under mpirun or srun every rank calls it and MPI is
 * started; otherwise (all degrees <= 1) the run is one process.  Returns 0,
 * or -1 with the message on rank 0 (err is empty on the others).  merak_train
 * calls it with the arguments' degrees if nobody did. */
int merak_init(int dp, int tp, int pp, char *err, size_t errlen);
/* This process's rank (0 without MPI) and the number of ranks. */
int merak_rank(void);
int merak_world_size(void);
/* Ends the runtime (and MPI, if merak_init started it).  Optional: it also
 * happens at exit, after the program has printed its messages. */
void merak_finalize(void);

/* Trains graph g (its inputs named "input_ids" and "targets", its loss a
 * cross-entropy) on a.data.  Returns the steps done (>= 0; a resumed run
 * counts the checkpoint's); or MERAK_FAILED when every rank failed alike
 * (rank 0 gets the one-line message in err, other ranks an empty err); or
 * MERAK_USAGE likewise, when the arguments cannot work for this model and
 * layout (a schedule that needs more micro-batches than given, a recompute
 * budget no stage can meet); or MERAK_FAILED_HERE when this rank failed
 * alone mid-step (err says why): the caller reports it and calls
 * merak_abort(), since the other ranks may be waiting on this one. */
int merak_train(const merak_graph *g, const merak_args *a, char *err, size_t errlen);

/* The same as an object (Merak's MerakTrainer): checks the arguments and
 * the graph at creation (NULL with err), trains on merak_trainer_train (the
 * return values of merak_train).  The graph must outlive the trainer. */
typedef struct merak_trainer merak_trainer;
merak_trainer *merak_trainer_create(const merak_graph *g, const merak_args *a, char *err,
                                    size_t errlen);
int merak_trainer_train(merak_trainer *t, char *err, size_t errlen);
void merak_trainer_destroy(merak_trainer *t);

/* Ends the whole job (every rank) with status. */
void merak_abort(int status) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

#endif /* MERAK_MERAK_H */
