/*
 * preflight.c - the checks merak_train makes before the first step, each
 * naming what is wrong in one line: the graph, the checkpoint to resume,
 * the stages' cut and whether they fit in memory, the outputs, the data
 * of a resumed run; and the stages' table the run reports.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errf.h"
#include "trainer_impl.h"

/* Checks the graph has what the step loop feeds and reads; returns the
 * vocabulary size (the loss's logits width) or -1. */
int merak_check_graph(const merak_graph *g, const merak_args *a, char *err, size_t errlen)
{
    if (merak_graph_error(g)[0])
        return merak_errf(err, errlen, "the graph was not built: %s", merak_graph_error(g));
    int ids = merak_graph_find(g, "input_ids"), targets = merak_graph_find(g, "targets");
    if (ids < 0 || targets < 0 || g->tensors[ids].kind != MERAK_T_INPUT ||
        g->tensors[targets].kind != MERAK_T_INPUT)
        return merak_errf(err, errlen, "the graph needs inputs named 'input_ids' and 'targets'");
    if (g->loss < 0)
        return merak_errf(err, errlen, "the graph has no loss (add merak_op_cross_entropy)");
    const merak_tensor *x = &g->tensors[ids], *y = &g->tensors[targets];
    if (x->ndim != 2 || x->shape[0] != a->micro_batch || x->shape[1] != a->seq_len ||
        y->ndim != 2 || y->shape[0] != a->micro_batch || y->shape[1] != a->seq_len)
        return merak_errf(err, errlen,
                          "the graph's input_ids and targets are not (%d,%d), the micro-batch and sequence length",
                          a->micro_batch, a->seq_len);
    return merak_graph_loss_vocab(g);
}

/* The checkpoint to resume from, found by rank 0 and told to every rank
 * (r->resume; empty when "latest" has none yet).  Collective; 0, or -1
 * with err (every rank alike). */
int merak_find_resume(merak_run *r, char *err, size_t errlen)
{
    const merak_args *a = r->a;
    int found = 0;
    if (!a->resume)
        return 0;
    if (r->grid->rank == 0)
        found = merak_ckpt_find(a->resume, a->save, r->resume, sizeof r->resume, err, errlen);
    if (merak_comm_agree(r->comm, found < 0 ? MERAK_FAILED : MERAK_OK, err, errlen) < 0)
        return MERAK_FAILED;
    if (merak_broadcast(r->world, r->resume, sizeof r->resume, 0) < 0)
        return merak_errf(err, errlen, "%s", merak_comm_error(r->comm));
    return 0;
}

void merak_stage_table_free(stage_table *t)
{
    free(t->bytes);
    free(t->layers);
}

int merak_stage_table_fill(merak_run *r, stage_table *t, char *err, size_t errlen)
{
    const merak_grid *gr = r->grid;
    int pp = gr->pp;
    t->bytes = calloc((size_t)(4 * pp), sizeof *t->bytes);
    t->layers = calloc((size_t)(2 * pp), sizeof *t->layers);
    if (!t->bytes || !t->layers)
        return merak_errf(err, errlen, "out of memory");
    t->recomputed = t->layers + pp;
    if (gr->dp_rank == 0 && gr->tp_rank == 0) {
        size_t bytes;
        int layers, rc;
        merak_stage_memory(r->stage, &bytes, &layers, &rc);
        t->bytes[gr->pp_rank] = (double)bytes;
        t->bytes[pp + gr->pp_rank] = layers;
        t->bytes[2 * pp + gr->pp_rank] = rc;
        /* everything is allocated before the first step: what it holds */
        size_t in_use = 0, peak;
        const merak_kernels *k = merak_exec_kernels(r->e);
        if (k->memory)
            k->memory(&in_use, &peak);
        t->bytes[3 * pp + gr->pp_rank] = (double)in_use;
    }
    if (merak_allreduce_f64(r->world, t->bytes, (size_t)(4 * pp)) < 0)
        return merak_errf(err, errlen, "%s", merak_comm_error(r->comm));
    for (int i = 0; i < 2 * pp; i++)
        t->layers[i] = (int)t->bytes[pp + i];
    return 0;
}

typedef struct init_out {
    const char *flag, *out;
    char *err;
    size_t errlen;
} init_out;

/* merak_weights_each_file's fn: 1 (err set) when file is the output. */
static int init_file(void *ctx, const char *file)
{
    init_out *c = ctx;
    return merak_file_not_input(c->flag, c->out, "a file of the --init weights", file, c->err, c->errlen) < 0;
}

/* Output FLAG OUT is none of the files the run reads: the --init weights,
 * data and validation shards, the tokenizer, the tp-rules, the device
 * profiles MERAK_DEVICES names, every file of the checkpoint it resumes.
 * 0, or -1 with err naming both. */
static int not_an_input(const merak_run *r, const char *flag, const char *out, char *err, size_t errlen)
{
    const merak_args *a = r->a;
    /* every file of sharded weights (and its index); weights that cannot be
     * opened are compared as the path given (loading them says why) */
    init_out c = {flag, out, err, errlen};
    char ignored[256];
    const int in_init = a->init ? merak_weights_each_file(a->init, init_file, &c, ignored, sizeof ignored) : 0;
    if (in_init > 0 || (in_init < 0 && merak_file_not_input(flag, out, "the --init weights", a->init, err, errlen) < 0))
        return -1;
    if (merak_file_not_input(flag, out, "the --tokenizer file", a->tokenizer, err, errlen) < 0 ||
        merak_file_not_input(flag, out, "the --tp-rules file", a->tp_rules, err, errlen) < 0 ||
        merak_file_not_input(flag, out, "the device profiles file (MERAK_DEVICES)", getenv("MERAK_DEVICES"), err,
                             errlen) < 0)
        return -1;
    for (int s = 0; r->data && s < merak_data_num_shards(r->data); s++)
        if (merak_file_not_input(flag, out, "a data shard", merak_data_shard_path(r->data, s), err, errlen) < 0)
            return -1;
    for (int s = 0; r->val && s < merak_data_num_shards(r->val); s++)
        if (merak_file_not_input(flag, out, "a validation shard", merak_data_shard_path(r->val, s), err, errlen) < 0)
            return -1;
    return merak_file_not_in_dir(flag, out, "a file of the checkpoint it resumes", r->resume[0] ? r->resume : NULL,
                                 err, errlen);
}

/* On rank 0, which reads the token ids: a resumed run reads what the
 * saved one read (merak_ckpt_data_differs), or says so: refused, or with
 * resume_data_change noted for on_checkpoint; the checkpoint's arithmetic
 * is noted too where it is not this run's (dtype_was).  And the
 * checkpoints it writes record its shards.  0, or -1 with err. */
int merak_resumed_data(merak_run *r, char *err, size_t errlen)
{
    if (r->ckpt && r->data)
        merak_ckpt_writer_data(r->ckpt, r->data);
    if (!r->resume[0])
        return 0;
    char was[sizeof r->dtype_was];
    if (merak_ckpt_dtype(r->resume, was, sizeof was, err, errlen) < 0)
        return -1;
    if (strcmp(was, merak_args_dtype(r->a)) != 0)
        snprintf(r->dtype_was, sizeof r->dtype_was, "%s", was);
    char why[400];
    int rc = merak_ckpt_data_differs(r->resume, r->a, r->data, why, sizeof why, err, errlen);
    if (rc <= 0)
        return rc;
    if (!r->a->resume_data_change)
        return merak_errf(err, errlen, "%s: this run does not read what the checkpoint's did: %s (its next batches "
                          "would be others; --resume-data-change goes on anyway)", r->resume, why);
    snprintf(r->data_change, sizeof r->data_change, "%s", why);
    return 0;
}

/* An output file and what it is checked against: the earlier outputs
 * out[0, n), given by flags flag[0, n). */
typedef struct output_check {
    const merak_run *r;
    const char *flag;
    const char *const *out, *const *oflag;
    int n;
    char *err;
    size_t errlen;
} output_check;

/* file, written for c->flag: writable, no input, none of the earlier
 * outputs.  0, or -1 with err (a merak_weights_each_output fn). */
static int check_output(void *ctx, const char *file)
{
    output_check *c = ctx;
    if (not_an_input(c->r, c->flag, file, c->err, c->errlen) < 0 || merak_atomic_probe(file, c->err, c->errlen) < 0)
        return -1;
    for (int j = 0; j < c->n; j++)
        if (c->out[j] && (merak_file_same(file, c->out[j]) || strcmp(file, c->out[j]) == 0))
            return merak_errf(c->err, c->errlen, "%s %s is also the %s file", c->flag, file, c->oflag[j]);
    return 0;
}

/* Before the first step, on rank 0, which writes them: every file the run
 * will write (each shard of the weights and their index: the model's
 * parameter sizes say how many) can be written (merak_atomic_probe), and
 * none is a file it reads (not_an_input) or another of its outputs, so
 * that a finished run is never lost to its last write, nor its data to
 * its metrics.  0, or -1 with err. */
int merak_check_outputs(merak_run *r, const merak_graph *g, char *err, size_t errlen)
{
    const merak_args *a = r->a;
    if (a->save) {
        /* the checkpoint directory: made now, and it must take files */
        struct stat st;
        char probe[4096 + 16];
        if (mkdir(a->save, 0777) != 0 && errno != EEXIST)
            return merak_errf(err, errlen, "--save %s: cannot make the directory: %s", a->save, strerror(errno));
        if (stat(a->save, &st) != 0 || !S_ISDIR(st.st_mode))
            return merak_errf(err, errlen, "--save %s: not a directory", a->save);
        if (merak_ckpt_lock(a->save, &r->lock_fd, err, errlen) < 0)
            return -1;
        snprintf(probe, sizeof probe, "%s/step_probe", a->save);
        if (merak_atomic_probe(probe, err, errlen) < 0)
            return -1;
        /* its checkpoints must be this run's past: a newer one would be
         * what --resume latest picks, and pruning would keep it over ours */
        int newest = merak_ckpt_newest(a->save);
        if (newest > r->step0 || (newest == r->step0 && !r->resume[0]))
            return merak_errf(err, errlen, "--save %s already holds a checkpoint of step %d and this run starts at "
                              "step %d: resume from it (--resume latest), or move it away, or save elsewhere",
                              a->save, newest, r->step0);
    }
    /* the weights last: they may be several files (shards and an index),
     * each held against the single-file outputs before it */
    const char *out[] = {a->metrics, a->trace, a->save_weights};
    const char *flag[] = {"--metrics", "--trace", "--save-weights"};
    for (int i = 0; i < 3; i++) {
        output_check c = {r, flag[i], out, flag, i, err, errlen};
        if (out[i] && (i < 2 ? check_output(&c, out[i])
                             : merak_weights_each_output(g, out[i], a->save_dtype && !strcmp(a->save_dtype, "bf16"),
                                                         a->save_shard_size, check_output, &c, err, errlen)) != 0)
            return -1;
    }
    return 0;
}

/* Before anything is allocated: will every rank's stage fit where it
 * runs?  Each rank plans its stage as merak_stage_create will build it
 * (merak_stage_plan) and adds AdamW's two floats per parameter it
 * updates; the needs and the memory free are gathered, and the ranks of
 * one host (CPU: they share its memory) or each rank (a GPU of its own)
 * are held against it.  Collective; every rank gets the same answer: 0,
 * or MERAK_FAILED with the first host or rank that does not fit in err
 * (MERAK_USAGE if a stage cannot be built with these options, as
 * merak_stage_create). */
int merak_check_memory(merak_run *r, const merak_graph *g, const merak_stage_opts *so, char *err, size_t errlen)
{
    const merak_grid *gr = r->grid;
    const merak_backend *be = merak_backend_find(so->kernels->name);
    const int n = gr->world, shared = be && be->host;
    merak_stage_mem m;
    size_t free_b, total_b;
    double *v = calloc(2 * (size_t)n, sizeof *v);
    int *node = malloc((size_t)n * sizeof *node);
    /* a stage that cannot be built is refused here, before any allocation;
     * every rank enters the agreement, whatever failed on it */
    int planned = !v || !node || merak_comm_nodes(r->comm, node) < 0 ? merak_errf(err, errlen, "out of memory")
                                                                      : merak_stage_plan(gr, g, so, &m, err, errlen);
    int rc = merak_comm_agree(r->comm, planned < 0 ? planned : MERAK_OK, err, errlen);
    if (rc != 0) {
        free(v), free(node);
        return rc;
    }
    v[gr->rank] = (double)m.device + merak_adamw_bytes(m.share);
    /* checkpoints copy the parameters (dp rank 0, which writes them) and
     * the whole stage's moments (ZeRO: every rank, for the gather) to host
     * memory */
    if (r->a->save && shared)
        v[gr->rank] += (double)m.params * (gr->dp_rank == 0 ? 3 : r->a->zero ? 2 : 0);
    v[n + gr->rank] = so->kernels->capacity && so->kernels->capacity(&free_b, &total_b) == 0 ? (double)free_b : -1;
    if (merak_allreduce_f64(r->world, v, 2 * (size_t)n) < 0)
        rc = merak_errf(err, errlen, "%s", merak_comm_error(r->comm));
    for (int i = 0; i < n && rc == 0; i++) {
        /* the ranks sharing i's memory: its host's (CPU), or i alone */
        double need = 0;
        int count = 0, first = i;
        for (int j = 0; j < n; j++)
            if (j == i || (shared && node[j] == node[i])) {
                need += v[j], count++;
                first = j < first ? j : first;
            }
        if (first != i || v[n + i] < 0 || need <= v[n + i])
            continue;   /* each host once; memory it cannot tell is not checked */
        char where[96];
        merak_comm_where(r->comm, i, where, sizeof where);
        if (count > 1)
            merak_errf(err, errlen, "not enough memory: %s and the %d other rank(s) on its host need %.2f GB "
                       "(parameters, gradients, optimizer state, activations; rank %d alone %.2f GB), but the host "
                       "has %.2f GB available", where, count - 1, need / 1e9, i, v[i] / 1e9, v[n + i] / 1e9);
        else
            merak_errf(err, errlen, "not enough memory: %s needs %.2f GB (parameters, gradients, optimizer state, "
                       "activations), but its %s has %.2f GB %s", where, need / 1e9, shared ? "host" : "GPU",
                       v[n + i] / 1e9, shared ? "available" : "free");
        rc = MERAK_FAILED;
    }
    free(v), free(node);
    return rc;
}

/* The virtual stage bounds in g of the grid's pp x V stages, cut as
 * merak-plan cuts them (merak_layout_cut: autopipe times ops from the
 * device profile on the tensor-parallel shard this grid runs, each cut
 * over the links this job's placement on its nodes gives).  0,
 * MERAK_FAILED, or MERAK_USAGE for options that cannot work for this model. */
int merak_partition_stages(const merak_graph *g, const merak_args *a, const merak_grid *gr,
                            merak_schedule_kind kind, int V, const merak_tp_rule *rules, int nrules, int *starts,
                            int *bounds, double *step, char *err, size_t errlen)
{
    const char *method = a->partition ? a->partition : MERAK_PARTITION_DEFAULT;
    merak_device dev;
    int *nodes = malloc((size_t)gr->world * sizeof *nodes);
    if (!nodes || merak_comm_nodes(merak_session_comm(), nodes) < 0) {
        free(nodes);
        return merak_errf(err, errlen, "out of memory");
    }
    merak_layout L = {.dp = gr->dp, .tp = gr->tp, .pp = gr->pp, .gpus_per_node = gr->world, .node_of = nodes,
                      .schedule = kind, .virtual_stages = V, .micro_batches = a->micro_batches,
                      .partition = method, .rules = rules, .nrules = nrules,
                      /* bf16 storage moves 2 bytes an element between stages (not
                       * with sub-batches, which keep float storage) */
                      .bf16 = merak_args_bf16(a), .float_storage = merak_args_float_storage(a)};
    /* one stage is the whole graph whatever the method: no costs needed,
     * but a profile asked for is still read (and refused if bad) */
    int rc = 0, costed = strcmp(method, "autopipe") == 0 && (gr->pp * V > 1 || a->profile);
    merak_graph *shard = NULL;
    if (costed) {
        rc = merak_device_load(merak_args_profile(a), &dev, err, errlen);
        /* the shard autopipe times, made here: a model that does not split
         * is the runtime error it is everywhere else (the stage's too) */
        if (rc == 0 && gr->tp > 1 && !(shard = merak_graph_shard(g, gr->tp, 0, rules, nrules, err, errlen)))
            rc = MERAK_FAILED;
        L.shard = shard;
    }
    if (rc == 0)
        rc = merak_layout_cut(g, &L, costed ? &dev : NULL, starts, bounds, step, err, errlen);
    merak_graph_destroy(shard);
    free(nodes);
    return rc;
}
