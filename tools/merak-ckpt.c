/*
 * merak-ckpt - looks into merak-train's checkpoints and moves weights in and
 * out of them: inspect (what a checkpoint holds, every file verified),
 * export (a Hugging Face safetensors file, or shards and their index past
 * --shard-size), import (a checkpoint at step 0 from either).
 *
 * Exit status: 0 on success, 2 for usage errors, 1 otherwise (a damaged,
 * incomplete or unreadable checkpoint or file, an unwritable output).
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "internal.h"
#include "merak/merak.h"

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: %s inspect CKPT\n"
        "       %s export CKPT -o OUT.safetensors [--save-dtype fp32|bf16] [--shard-size SIZE]\n"
        "       %s import FILE.safetensors|INDEX|DIR --model NAME|FILE -o DIR [--seed S]\n"
        "Inspect merak-train checkpoints, and move weights in and out of them.\n"
        "\n"
        "CKPT is a checkpoint directory (DIR/step_N) or a directory of them (its newest\n"
        "complete one).\n"
        "  inspect         step, model, layout, data position, every file with its size and\n"
        "                  CRC-32 (each verified), and every tensor with its place\n"
        "  export          every parameter whole, with Hugging Face names and layouts, into\n"
        "                  one safetensors file, or shards and their index past --shard-size\n"
        "                  (merak-train and transformers start from either)\n"
        "  import          a checkpoint DIR/step_00000000 of the model with these weights and\n"
        "                  zero optimizer state; merak-train resumed from DIR trains on from it\n"
        "Options:\n"
        "  -o, --output P  the file (export) or checkpoint directory (import) to write\n"
        "  --model M       import: preset name or Hugging Face config.json of the weights\n"
        "  --seed S        import: the dropout seed the checkpoint carries (default 1337)\n"
        "  --save-dtype D  export: fp32 (default) or bf16 values, as the hub publishes them\n"
        "  --shard-size S  export: weights larger than S are written as OUT-00001-of-0000N.safetensors\n"
        "                  ... and OUT.safetensors.index.json (default 5GB; KB, MB, GB, TB:\n"
        "                  powers of 1000; KiB, MiB, GiB, TiB: of 1024)\n"
        "  --help          show this help and exit\n"
        "  --version       show the version and exit\n"
        "\n"
        "See merak-ckpt(1).\n", cli_prog, cli_prog, cli_prog);
}

/* The checkpoint CKPT names (a directory of them: the newest complete). */
static merak_ckpt *open_ckpt(const char *spec, const merak_model_config *model, char *dir, size_t len)
{
    char err[1024];
    merak_ckpt *c;
    int found = merak_ckpt_find(spec, NULL, dir, len, err, sizeof err);
    if (found < 0)
        cli_die("%s", err);
    if (merak_ckpt_open(dir, model, 0, 1, &c, err, sizeof err) < 0)
        cli_die("%s", err);
    return c;
}

/* The model of the checkpoint's config.json, built (B = T = 1). */
static merak_graph *ckpt_model(const merak_ckpt *c, const char *dir, merak_model_config *cfg)
{
    char err[1024];
    const char *path = merak_ckpt_config_path(c);
    if (!path)
        cli_die("%s: the checkpoint has no config.json, so its model is unknown", dir);
    if (merak_model_config_load(path, cfg, err, sizeof err) < 0)
        cli_die("%s", err);
    merak_graph *g = merak_model_build(cfg, 1, 1, err, sizeof err);
    if (!g)
        cli_die("%s: %s", path, err);
    return g;
}

static int inspect(const char *spec)
{
    char dir[PATH_MAX], err[1024];
    merak_ckpt *c = open_ckpt(spec, NULL, dir, sizeof dir);
    const merak_ckpt_meta *m = merak_ckpt_meta_of(c);
    printf("checkpoint %s: step %d, written by %s\n", dir, m->st.step, m->producer[0] ? m->producer : "?");
    printf("layout: dp %d tp %d pp %d, schedule %s", m->dp, m->tp, m->pp, m->schedule[0] ? m->schedule : "?");
    if (m->virtual_stages > 1)
        printf(" (%d chunks per stage)", m->virtual_stages);
    printf(", ZeRO-%d, %d micro-batch(es) of %d x %d tokens per replica\n", m->zero, m->micro_batches,
           m->micro_batch, m->seq_len);
    printf("data %s: %llu micro-batches read | seed %llu | AdamW step %d\n", m->data[0] ? m->data : "?",
           (unsigned long long)m->st.consumed, (unsigned long long)m->st.seed, m->st.adam_steps);
    double total = 0;
    int nt = 0;
    for (int i = 0; i < merak_ckpt_num_files(c); i++)
        total += (double)merak_ckpt_file_at(c, i)->bytes;
    printf("files: %d, %.1f MB, every CRC-32 verified\n", merak_ckpt_num_files(c), total / 1e6);
    for (int i = 0; i < merak_ckpt_num_files(c); i++) {
        const merak_ckpt_file *f = merak_ckpt_file_at(c, i);
        const merak_st_file *st = merak_ckpt_st(c, i);
        printf("  %-32s %12llu bytes  crc32 %08x  ok", f->name, (unsigned long long)f->bytes, (unsigned)f->crc);
        printf(st ? ", %d tensors\n" : "\n", st ? merak_st_count(st) : 0);
        for (int k = 0; st && k < merak_st_count(st); k++) {
            const merak_st_info *info = merak_st_at(st, k);
            const char *place = merak_st_metadata(st, info->name);
            char shape[96];
            merak_st_shape_str(info->shape, info->ndim, shape, sizeof shape);
            printf("    %-48s %-16s %s\n", info->name, shape, place ? place : "");
            nt++;
        }
    }
    /* with the model known, every parameter and moment must assemble whole */
    if (merak_ckpt_config_path(c)) {
        merak_model_config cfg;
        merak_graph *g = ckpt_model(c, dir, &cfg);
        int *ids = calloc((size_t)g->ntensors, sizeof *ids), n = ids ? merak_graph_own_params(g, ids) : 0;
        size_t most = 1;
        for (int i = 0; i < n; i++)
            most = (size_t)merak_tensor_elems(&g->tensors[ids[i]]) > most
                       ? (size_t)merak_tensor_elems(&g->tensors[ids[i]]) : most;
        float *buf = malloc(most * sizeof *buf);
        if (!ids || !buf)
            cli_die("out of memory");
        int64_t elems = 0;
        if (merak_ckpt_check_names(c, g, err, sizeof err) < 0)
            cli_die("%s", err);
        for (int i = 0; i < n; i++) {
            for (int mom = -1; mom < 2; mom++)
                if (merak_ckpt_read(c, &g->tensors[ids[i]], mom, buf, err, sizeof err) < 0)
                    cli_die("%s", err);
            elems += merak_tensor_elems(&g->tensors[ids[i]]);
        }
        printf("model %s (config.json): %d parameters, %lld elements, each whole with its two moments\n",
               cfg.name, n, (long long)elems);
        free(buf), free(ids);
        merak_graph_destroy(g);
    }
    merak_ckpt_close(c);
    return 0;
}

/* An output of export and the checkpoint it must not be in; and what was
 * written. */
typedef struct export_files {
    const char *dir;
    char *err;
    size_t errlen;
    cli_saved saved;
} export_files;

/* merak_weights_each_output's fn: -1 (err set) when file is in the checkpoint. */
static int not_in_ckpt(void *ctx, const char *file)
{
    export_files *x = ctx;
    cli_saved_note(&x->saved, file);
    return merak_file_not_in_dir("-o", file, "a file of the checkpoint", x->dir, x->err, x->errlen);
}

static int export(const char *spec, const char *out, int bf16, int64_t shard_size)
{
    char dir[PATH_MAX], err[1024];
    merak_model_config cfg;
    merak_ckpt *c = open_ckpt(spec, NULL, dir, sizeof dir);
    if (merak_file_not_in_dir("-o", out, "a file of the checkpoint", dir, err, sizeof err) < 0)
        cli_die("%s", err);
    merak_graph *g = ckpt_model(c, dir, &cfg);
    /* every file it writes (shards and index), before anything is read */
    export_files files = {.dir = dir, .err = err, .errlen = sizeof err};
    if (merak_weights_each_output(g, out, bf16, shard_size, not_in_ckpt, &files, err, sizeof err) != 0)
        cli_die("%s", err);
    int *ids = calloc((size_t)g->ntensors, sizeof *ids), n = ids ? merak_graph_own_params(g, ids) : 0;
    float **data = calloc((size_t)n + 1, sizeof *data);
    if (!ids || !data)
        cli_die("out of memory");
    if (merak_ckpt_check_names(c, g, err, sizeof err) < 0)
        cli_die("%s", err);
    for (int i = 0; i < n; i++) {
        if (!(data[i] = malloc((size_t)merak_tensor_elems(&g->tensors[ids[i]]) * sizeof(float))))
            cli_die("out of memory");
        if (merak_ckpt_read(c, &g->tensors[ids[i]], -1, data[i], err, sizeof err) < 0)
            cli_die("%s", err);
    }
    if (merak_weights_save_arrays(g, n, ids, (const float *const *)data, out, NULL, bf16, shard_size, err,
                                  sizeof err) < 0)
        cli_die("%s", err);
    char said[3 * PATH_MAX];
    printf("exported %d parameters of step %d from %s to %s\n", n, merak_ckpt_meta_of(c)->st.step, dir,
           cli_saved_say(&files.saved, said, sizeof said));
    for (int i = 0; i < n; i++)
        free(data[i]);
    free(data), free(ids);
    merak_graph_destroy(g);
    merak_ckpt_close(c);
    return 0;
}

static int import(const char *file, const char *model, const char *out, uint64_t seed)
{
    char err[1024];
    merak_model_config cfg;
    cli_model(model, &cfg);
    merak_graph *g = merak_model_build(&cfg, 1, 1, err, sizeof err);
    if (!g)
        cli_die("%s", err);
    int *ids = calloc((size_t)g->ntensors, sizeof *ids), n = ids ? merak_graph_own_params(g, ids) : 0;
    float **data = calloc((size_t)n + 1, sizeof *data);
    if (!ids || !data)
        cli_die("out of memory");
    for (int i = 0; i < n; i++)
        if (!(data[i] = malloc((size_t)merak_tensor_elems(&g->tensors[ids[i]]) * sizeof(float))))
            cli_die("out of memory");
    if (merak_weights_read(g, n, ids, file, data, err, sizeof err) < 0 ||
        merak_weights_extra(g, file, err, sizeof err) < 0 ||
        merak_ckpt_write_whole(out, g, n, ids, (const float *const *)data, &cfg, seed, err, sizeof err) < 0)
        cli_die("%s", err);
    printf("imported %d parameters of %s from %s into %s/step_00000000\n", n, cfg.name, file, out);
    for (int i = 0; i < n; i++)
        free(data[i]);
    free(data), free(ids);
    merak_graph_destroy(g);
    return 0;
}

int main(int argc, char **argv)
{
    enum { OPT_MODEL = 256, OPT_SEED, OPT_DTYPE, OPT_SHARD_SIZE, OPT_HELP, OPT_VERSION };
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},
        {"model", required_argument, 0, OPT_MODEL},
        {"seed", required_argument, 0, OPT_SEED},
        {"save-dtype", required_argument, 0, OPT_DTYPE},
        {"shard-size", required_argument, 0, OPT_SHARD_SIZE},
        {"help", no_argument, 0, OPT_HELP},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    const char *out = NULL, *model = NULL, *dtype = NULL;
    uint64_t seed = 1337;
    int64_t shard_size = MERAK_SHARD_SIZE_DEFAULT;
    int c, seed_given = 0, shard_given = 0;
    cli_start("merak-ckpt");
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case OPT_MODEL: model = optarg; break;
        case OPT_SEED:
            seed = (uint64_t)cli_parse_int("--seed", optarg, 0, LONG_MAX);
            seed_given = 1;
            break;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "bf16") != 0)
                cli_die_usage("--save-dtype: '%s' is not fp32 or bf16", optarg);
            dtype = optarg;
            break;
        case OPT_SHARD_SIZE:
            shard_size = cli_parse_size("--shard-size", optarg);
            shard_given = 1;
            break;
        case OPT_HELP: usage(stdout); return 0;
        case OPT_VERSION: printf("merak-ckpt %s\n", MERAK_VERSION_STRING); return 0;
        case ':': cli_die_usage("%s needs a value", argv[optind - 1]);
        default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        cli_die_usage("no command (inspect, export or import)");
    const char *cmd = argv[optind];
    if (argc - optind != 2)
        cli_die_usage("%s takes one %s", cmd, strcmp(cmd, "import") == 0 ? "safetensors file" : "checkpoint");
    const char *arg = argv[optind + 1];
    int is_import = strcmp(cmd, "import") == 0, is_export = strcmp(cmd, "export") == 0;
    if (!is_import && !is_export && strcmp(cmd, "inspect") != 0)
        cli_die_usage("unknown command '%s' (inspect, export or import)", cmd);
    if ((is_import || is_export) && !out)
        cli_die_usage("%s needs -o %s", cmd, is_import ? "DIR" : "OUT.safetensors");
    if (!is_import && out && !is_export)
        cli_die_usage("-o does not go with inspect");
    if (is_import && !model)
        cli_die_usage("import needs --model (the weights' preset or config.json)");
    if (!is_import && (model || seed_given))
        cli_die_usage("--%s goes only with import", model ? "model" : "seed");
    if (!is_export && (dtype || shard_given))
        cli_die_usage("--%s goes only with export", dtype ? "save-dtype" : "shard-size");
    if (out && !*out)
        cli_die_usage("-o: an empty name");
    int rc = is_import ? import(arg, model, out, seed)
             : is_export ? export(arg, out, dtype && !strcmp(dtype, "bf16"), shard_size)
                         : inspect(arg);
    cli_stdout_done();
    return rc;
}
