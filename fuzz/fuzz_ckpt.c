/*
 * fuzz_ckpt.c - libFuzzer target: checkpoints read with hostile contents.
 * The input's first byte picks what is hostile:
 *   even: the rest is manifest.json, next to valid files (tiny GPT-2's
 *         parameters and moments, its config.json);
 *   odd:  the rest is the parameter file, which a valid manifest lists
 *         with the right size and CRC-32, so the tensors' places in the
 *         whole tensors (metadata) and their shapes are what is tried.
 * A checkpoint that opens is read as merak-train would: every parameter
 * and moment whole and as tensor-parallel shard 1 of 2; and its record of
 * the data (shards, sizes, CRC-32s, micro-batch, sequence length) is held
 * against a real shard as a resume does; any refusal or difference must
 * say why.  Never a crash, leak or undefined behaviour.
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "data.h"
#include "file.h"
#include "graph/graph.h"
#include "merak/merak.h"
#include "safetensors.h"

static merak_graph *model, *shard;
static merak_data *tokens;   /* a valid shard of 2048 tokens, as a resume reads it */
static char dir[64];
static uint8_t *valid;   /* the valid parameter file */
static size_t valid_n;

static void put(const char *name, const void *data, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
        abort();
}

/* A tensor entry of every parameter of g (and its moments), whole. */
static void write_files(void)
{
    char err[512];
    int n = 0, ids[256];
    for (int t = 0; t < model->ntensors && n < 256; t++)
        if (model->tensors[t].kind == MERAK_T_PARAM && merak_graph_param_root(model, t) == t)
            ids[n++] = t;
    static float zeros[1 << 16];
    merak_st_entry pe[256], oe[512];
    const char *keys[256];
    char *vals[256], names[512][160];
    for (int i = 0; i < n; i++) {
        const merak_tensor *t = &model->tensors[ids[i]];
        merak_st_entry e = {.name = t->name, .ndim = t->ndim, .data = zeros};
        char full[96] = "";
        for (int d = 0; d < t->ndim; d++) {
            e.shape[d] = t->shape[d];
            snprintf(full + strlen(full), sizeof full - strlen(full), "%s%lld", d ? "," : "", (long long)t->shape[d]);
        }
        if (merak_tensor_elems(t) > (1 << 16))
            abort();
        pe[i] = e;
        keys[i] = t->name;
        vals[i] = malloc(160);
        snprintf(vals[i], 160, "{\"full\":[%s],\"dim\":-1,\"segs\":[]}", full);
        for (int m = 0; m < 2; m++) {
            snprintf(names[2 * i + m], sizeof names[0], "%s%s", t->name, merak_ckpt_moment_suffix[m]);
            oe[2 * i + m] = e;
            oe[2 * i + m].name = names[2 * i + m];
        }
    }
    char p[128];
    snprintf(p, sizeof p, "%s/model-pp000-tp000.safetensors", dir);
    if (merak_st_write(p, pe, n, keys, (const char *const *)vals, n, NULL, NULL, err, sizeof err) < 0)
        abort();
    snprintf(p, sizeof p, "%s/optim-pp000-tp000.safetensors", dir);
    if (merak_st_write(p, oe, 2 * n, keys, (const char *const *)vals, n, NULL, NULL, err, sizeof err) < 0)
        abort();
    for (int i = 0; i < n; i++)
        free(vals[i]);
    merak_model_config cfg;
    merak_model_preset("tiny-gpt2", &cfg);
    char *json = merak_model_config_json(&cfg);
    put("config.json", json, strlen(json));
    free(json);
}

/* The manifest listing the three files with their real sizes and CRCs. */
static void write_manifest(void)
{
    const char *files[3] = {"model-pp000-tp000.safetensors", "optim-pp000-tp000.safetensors", "config.json"};
    const char *kinds[3] = {"model", "optim", "config"};
    char text[2048], err[512];
    int k = snprintf(text, sizeof text, "{\"format\": \"%s\", \"version\": %d, \"step\": 3, \"data\": {\"consumed\": 3}, "
                     "\"rng\": {\"seed\": 1}, \"optimizer\": {\"steps\": 3}, \"files\": [", MERAK_CKPT_FORMAT,
                     MERAK_CKPT_VERSION);
    for (int i = 0; i < 3; i++) {
        char p[128];
        uint32_t crc;
        uint64_t bytes;
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (merak_file_crc32(p, &crc, &bytes, err, sizeof err) < 0)
            abort();
        k += snprintf(text + k, sizeof text - (size_t)k, "%s{\"name\": \"%s\", \"kind\": \"%s\", \"bytes\": %llu, "
                      "\"crc32\": \"%08x\"}", i ? ", " : "", files[i], kinds[i], (unsigned long long)bytes,
                      (unsigned)crc);
    }
    snprintf(text + k, sizeof text - (size_t)k, "]}\n");
    put("manifest.json", text, strlen(text));
}

/* Everything merak-train would read; any refusal has its message. */
static void read_all(void)
{
    char err[512] = "";
    merak_ckpt *c;
    merak_model_config cfg;
    merak_model_preset("tiny-gpt2", &cfg);
    if (merak_ckpt_open(dir, &cfg, 0, 1, &c, err, sizeof err) < 0) {
        if (!err[0])
            abort();
        return;
    }
    static float buf[1 << 16];
    if (merak_ckpt_check_names(c, model, err, sizeof err) == 0)
        for (const merak_graph *g = model; g; g = g == model ? shard : NULL)
            for (int t = 0; t < g->ntensors; t++) {
                if (g->tensors[t].kind != MERAK_T_PARAM || merak_graph_param_root(g, t) != t)
                    continue;
                for (int m = -1; m < 2; m++) {
                    err[0] = 0;
                    if (merak_ckpt_read(c, &g->tensors[t], m, buf, err, sizeof err) < 0 && !err[0])
                        abort();
                }
            }
    else if (!err[0])
        abort();
    merak_ckpt_close(c);
    /* what a resume compares: -1 with err, or 1 with why */
    merak_args a = {.micro_batch = 1, .seq_len = 8};   /* the seed checkpoint's (tests/fuzz.sh) */
    char why[400] = "";
    err[0] = 0;
    int rc = merak_ckpt_data_differs(dir, &a, tokens, why, sizeof why, err, sizeof err);
    if ((rc < 0 && !err[0]) || (rc > 0 && !why[0]))
        abort();
}

static void cleanup(void)
{
    const char *files[] = {"model-pp000-tp000.safetensors", "optim-pp000-tp000.safetensors", "config.json",
                           "manifest.json", "data.bin"};
    merak_data_close(tokens);
    char p[128];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    remove(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    if (!model) {
        merak_model_config cfg;
        snprintf(dir, sizeof dir, "/tmp/merak-fuzz-ckpt.%d", (int)getpid());
        mkdir(dir, 0700);
        atexit(cleanup);
        if (merak_model_preset("tiny-gpt2", &cfg) < 0 || !(model = merak_model_build(&cfg, 1, 8, err, sizeof err)) ||
            !(shard = merak_graph_shard(model, 2, 1, NULL, 0, err, sizeof err)))
            abort();
        write_files();
        static uint8_t toks[MERAK_SHARD_HEADER_INTS * 4 + 2048 * 2];   /* little-endian, as llm.c writes */
        const int32_t head[3] = {MERAK_SHARD_MAGIC, 1, 2048};
        for (int i = 0; i < 3; i++)
            for (int b = 0; b < 4; b++)
                toks[4 * i + b] = (uint8_t)((uint32_t)head[i] >> (8 * b));
        for (int i = 0; i < 2048; i++)
            toks[MERAK_SHARD_HEADER_INTS * 4 + 2 * i] = (uint8_t)(i % 256);
        put("data.bin", toks, sizeof toks);
        char dp[128];
        snprintf(dp, sizeof dp, "%s/data.bin", dir);
        if (merak_data_open(dp, 256, &tokens, err, sizeof err) < 0)
            abort();
        char p[128];
        snprintf(p, sizeof p, "%s/model-pp000-tp000.safetensors", dir);
        FILE *f = fopen(p, "rb");
        if (!f || fseek(f, 0, SEEK_END) != 0 || (long)(valid_n = (size_t)ftell(f)) <= 0 ||
            !(valid = malloc(valid_n)) || fseek(f, 0, SEEK_SET) != 0 || fread(valid, 1, valid_n, f) != valid_n)
            abort();
        fclose(f);
    }
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        put("model-pp000-tp000.safetensors", data + 1, size - 1);
        write_manifest();
    } else {
        put("model-pp000-tp000.safetensors", valid, valid_n);
        put("manifest.json", data + 1, size - 1);
    }
    read_all();
    return 0;
}
