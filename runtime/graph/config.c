/*
 * config.c - model configurations: built-in presets, Hugging Face config.json
 * files, and the checks that a configuration can be built.
 *
 * Loading is strict: a field of the wrong type, an unsupported feature
 * (a rope_scaling of type yarn, biases on LLaMA's output projection, a
 * different activation) or a value that
 * makes no sense is refused with one line, rather than silently building a
 * model that differs from the one the file describes.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "merak/merak.h"
#include "errf.h"
#include "file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ------------------------------------------------------------------ presets */

#define GPT2(nm, V, P, C, L, H, F)                                                         \
    {.arch = MERAK_ARCH_GPT2, .name = nm, .vocab_size = V, .max_positions = P, .hidden = C, \
     .n_layer = L, .n_head = H, .n_kv_head = H, .ffn_hidden = F, .norm_eps = 1e-5f,        \
     .rope_theta = 0.0f, .tie_embeddings = 1, .init_std = 0.02f, .dropout = 0.0f}

#define LLAMA(nm, V, P, C, L, H, KV, F, THETA)                                              \
    {.arch = MERAK_ARCH_LLAMA, .name = nm, .vocab_size = V, .max_positions = P, .hidden = C, \
     .n_layer = L, .n_head = H, .n_kv_head = KV, .ffn_hidden = F, .norm_eps = 1e-5f,        \
     .rope_theta = THETA, .tie_embeddings = 0, .init_std = 0.02f, .dropout = 0.0f}

/* LLaMA 3.1's RoPE: rope_scaling llama3 with factor 8 over an original
 * context of 8192 (low_freq_factor 1, high_freq_factor 4). */
#define LLAMA31(nm, V, P, C, L, H, KV, F, THETA)                                            \
    {.arch = MERAK_ARCH_LLAMA, .name = nm, .vocab_size = V, .max_positions = P, .hidden = C, \
     .n_layer = L, .n_head = H, .n_kv_head = KV, .ffn_hidden = F, .norm_eps = 1e-5f,        \
     .rope_theta = THETA, .tie_embeddings = 0, .init_std = 0.02f, .dropout = 0.0f,          \
     .rope_type = MERAK_ROPE_LLAMA3, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f,     \
     .rope_high_freq_factor = 4.0f, .rope_original_positions = 8192}

/* Qwen2: LLaMA's architecture with biases on q, k and v, rms_norm_eps 1e-6. */
#define QWEN2(nm, V, P, C, L, H, KV, F, THETA)                                              \
    {.arch = MERAK_ARCH_LLAMA, .name = nm, .vocab_size = V, .max_positions = P, .hidden = C, \
     .n_layer = L, .n_head = H, .n_kv_head = KV, .ffn_hidden = F, .norm_eps = 1e-6f,        \
     .rope_theta = THETA, .tie_embeddings = 0, .init_std = 0.02f, .dropout = 0.0f, .qkv_bias = 1}

/* The one list of presets: X(ARCH, name, sizes...) per preset, with ARCH's
 * arguments above.  The configurations and the NULL-terminated list of names
 * (merak_model_preset_names, the "unknown model" message) both expand it, so
 * a preset is named in one place. */
#define PRESETS(X)                                                                              \
    /* small models for tests and demos (byte-level vocabulary) */                              \
    X(GPT2, "tiny-gpt2", 256, 256, 64, 2, 4, 256)                                               \
    X(GPT2, "demo-gpt2", 256, 512, 192, 4, 6, 768)                                              \
    X(LLAMA, "tiny-llama", 256, 256, 64, 2, 8, 4, 176, 10000.0f) /* GQA, splits up to tp=4 */   \
    X(LLAMA, "demo-llama", 256, 512, 192, 4, 6, 2, 512, 10000.0f)                               \
    /* published sizes */                                                                       \
    X(GPT2, "gpt2", 50257, 1024, 768, 12, 12, 3072)                                             \
    X(GPT2, "gpt2-medium", 50257, 1024, 1024, 24, 16, 4096)                                     \
    X(GPT2, "gpt2-large", 50257, 1024, 1280, 36, 20, 5120)                                      \
    X(GPT2, "gpt2-xl", 50257, 1024, 1600, 48, 25, 6400)                                         \
    /* Megatron-LM's 2.5B and 8.3B GPT-2 (Shoeybi et al. 2019, tables 1-2; the   \
     * 8.3B model it trained has 24 heads), two of the Merak paper's sizes */     \
    X(GPT2, "megatron-2.5b", 50257, 1024, 1920, 54, 20, 7680)                                   \
    X(GPT2, "megatron-8.3b", 50257, 1024, 3072, 72, 24, 12288)                                  \
    /* GPT-3 (Brown et al. 2020, table 2.1; 13B with 40 heads of 128, i.e.      \
     * d_model 5120 where the table prints 5140) */                              \
    X(GPT2, "gpt3-6.7b", 50257, 2048, 4096, 32, 32, 16384)                                      \
    X(GPT2, "gpt3-13b", 50257, 2048, 5120, 40, 40, 20480)                                       \
    X(GPT2, "gpt3-175b", 50257, 2048, 12288, 96, 96, 49152)                                     \
    X(LLAMA, "llama2-7b", 32000, 4096, 4096, 32, 32, 32, 11008, 10000.0f)                       \
    X(LLAMA, "llama2-13b", 32000, 4096, 5120, 40, 40, 40, 13824, 10000.0f)                      \
    X(LLAMA, "llama2-70b", 32000, 4096, 8192, 80, 64, 8, 28672, 10000.0f)                       \
    X(LLAMA, "llama3-8b", 128256, 8192, 4096, 32, 32, 8, 14336, 500000.0f)                      \
    X(LLAMA, "llama3-70b", 128256, 8192, 8192, 80, 64, 8, 28672, 500000.0f)                     \
    X(LLAMA31, "llama3.1-8b", 128256, 131072, 4096, 32, 32, 8, 14336, 500000.0f)                \
    /* Mistral 7B v0.3: LLaMA's architecture (no sliding window since v0.2) */   \
    X(LLAMA, "mistral-7b", 32768, 32768, 4096, 32, 32, 8, 14336, 1000000.0f)                    \
    X(QWEN2, "qwen2-7b", 152064, 131072, 3584, 28, 28, 4, 18944, 1000000.0f)

#define PRESET_CONFIG(ARCH, ...) ARCH(__VA_ARGS__),
#define PRESET_NAME(ARCH, nm, ...) nm,

static const merak_model_config presets[] = {PRESETS(PRESET_CONFIG)};
#define NPRESETS ((int)(sizeof(presets) / sizeof(presets[0])))

static const char *const preset_names[] = {PRESETS(PRESET_NAME) NULL};

int merak_model_preset(const char *name, merak_model_config *cfg)
{
    for (int i = 0; name && i < NPRESETS; i++) {
        if (strcmp(presets[i].name, name) == 0) {
            *cfg = presets[i];
            return 0;
        }
    }
    return -1;
}

const char *const *merak_model_preset_names(void) { return preset_names; }

/* ------------------------------------------------------------------ config.json */

typedef struct loader {
    const char *path;
    json_t *root;
    char *err;
    size_t errlen;
} loader;

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* The value of KEY, or NULL if it is absent or null (both mean "not set" in
 * Hugging Face configs). */
static json_t *field(const loader *L, const char *key)
{
    json_t *v = json_object_get(L->root, key);
    return json_is_null(v) ? NULL : v;
}

static int missing(const loader *L, const char *key)
{
    merak_errf(L->err, L->errlen, "%s: missing required field '%s'", L->path, key);
    return -1;
}

static int wrong_type(const loader *L, const char *key, const char *want, const json_t *v)
{
    merak_errf(L->err, L->errlen, "%s: field '%s' must be %s, got %s", L->path, key, want,
           json_type_name(v));
    return -1;
}

/* A positive integer; DFLT is used when absent, or if DFLT < 0 the field is
 * required. */
static int get_pos_int(const loader *L, const char *key, int dflt, int *out)
{
    json_t *v = field(L, key);
    if (!v) {
        if (dflt < 0)
            return missing(L, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return wrong_type(L, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x <= 0 || x > INT_MAX) {
        merak_errf(L->err, L->errlen, "%s: field '%s' must be a positive integer, got %lld", L->path,
               key, (long long)x);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A number (integer or real), DFLT when absent. */
static int get_num(const loader *L, const char *key, double dflt, double *out)
{
    json_t *v = field(L, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return wrong_type(L, key, "a number", v);
    *out = json_number_value(v);
    return 0;
}

static int get_positive_num(const loader *L, const char *key, double dflt, double *out)
{
    if (get_num(L, key, dflt, out) != 0)
        return -1;
    if (!(*out > 0) || !isfinite(*out) || *out > 3.0e38 || *out < 1.2e-38) {
        merak_errf(L->err, L->errlen, "%s: field '%s' must be a positive number a float holds (1.2e-38 to 3e38), "
                   "got %g", L->path, key, *out);
        return -1;
    }
    return 0;
}

static int get_bool(const loader *L, const char *key, int dflt, int *out)
{
    json_t *v = field(L, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return wrong_type(L, key, "true or false", v);
    *out = json_is_true(v);
    return 0;
}

/* KEY, if present, must be the string ALLOWED1 or ALLOWED2 (may be NULL). */
static int expect_string(const loader *L, const char *key, const char *allowed1,
                         const char *allowed2)
{
    json_t *v = field(L, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return wrong_type(L, key, "a string", v);
    const char *s = json_string_value(v);
    if (strcmp(s, allowed1) == 0 || (allowed2 && strcmp(s, allowed2) == 0))
        return 0;
    merak_errf(L->err, L->errlen, "%s: %s '%.40s' is not supported (expected '%s'%s%s%s)", L->path,
           key, s, allowed1, allowed2 ? " or '" : "", allowed2 ? allowed2 : "",
           allowed2 ? "'" : "");
    return -1;
}

/* initializer_range: the standard deviation of the initial weights. */
static int check_init_std(const loader *L, double std)
{
    if (std >= 0 && std < 1e30)
        return 0;
    return merak_errf(L->err, L->errlen, "%s: initializer_range %g must be at least 0 and below 1e30", L->path,
                      std);
}

/* KEY, if present, must be the boolean WANT (a feature Merak does not have). */
static int expect_bool(const loader *L, const char *key, int want)
{
    int b = want;
    if (get_bool(L, key, want, &b) != 0)
        return -1;
    if (b != want) {
        merak_errf(L->err, L->errlen, "%s: %s = %s is not supported", L->path, key,
               b ? "true" : "false");
        return -1;
    }
    return 0;
}

static int load_gpt2(const loader *L, merak_model_config *c)
{
    c->arch = MERAK_ARCH_GPT2;
    if (get_pos_int(L, "vocab_size", -1, &c->vocab_size) != 0 ||
        get_pos_int(L, "n_embd", -1, &c->hidden) != 0 ||
        get_pos_int(L, "n_layer", -1, &c->n_layer) != 0 ||
        get_pos_int(L, "n_head", -1, &c->n_head) != 0)
        return -1;
    /* n_ctx is the older name of n_positions. */
    const char *pos_key = field(L, "n_positions") || !field(L, "n_ctx") ? "n_positions" : "n_ctx";
    if (get_pos_int(L, pos_key, -1, &c->max_positions) != 0)
        return -1;
    int dflt_ffn = c->hidden <= INT_MAX / 4 ? 4 * c->hidden : INT_MAX;
    if (get_pos_int(L, "n_inner", dflt_ffn, &c->ffn_hidden) != 0)
        return -1;
    c->n_kv_head = c->n_head;

    double eps, std, resid, embd;
    if (get_positive_num(L, "layer_norm_epsilon", 1e-5, &eps) != 0 ||
        get_num(L, "initializer_range", 0.02, &std) != 0 ||
        get_bool(L, "tie_word_embeddings", 1, &c->tie_embeddings) != 0 ||
        expect_string(L, "activation_function", "gelu_new", "gelu_pytorch_tanh") != 0 ||
        expect_bool(L, "scale_attn_by_inverse_layer_idx", 0) != 0 ||
        expect_bool(L, "scale_attn_weights", 1) != 0 ||
        get_num(L, "resid_pdrop", -1.0, &resid) != 0 ||
        get_num(L, "embd_pdrop", -1.0, &embd) != 0)
        return -1;
    /* Merak has one dropout probability for residual and embedding dropout
     * (attention-probability dropout, attn_pdrop, is not modelled). */
    if (field(L, "resid_pdrop") && field(L, "embd_pdrop") && resid != embd) {
        merak_errf(L->err, L->errlen,
               "%s: resid_pdrop (%g) and embd_pdrop (%g) differ; Merak uses one dropout "
               "probability for both",
               L->path, resid, embd);
        return -1;
    }
    double p = field(L, "resid_pdrop") ? resid : field(L, "embd_pdrop") ? embd : 0.0;
    if (!(p >= 0 && p < 1)) {
        merak_errf(L->err, L->errlen, "%s: dropout probability %g must be in [0, 1)", L->path, p);
        return -1;
    }
    if (check_init_std(L, std) < 0)
        return -1;
    c->norm_eps = (float)eps;
    c->init_std = (float)std;
    c->dropout = (float)p;
    c->rope_theta = 0.0f;
    return 0;
}

/* rope_scaling, or transformers 5's rope_parameters (which hold rope_theta
 * too), as the library reads them: the type ("rope_type", or its older
 * name "type") and that type's numbers; any other key is refused by name,
 * as is a type merak does not compute (yarn, longrope, ...).  Dynamic's
 * original positions are max_position_embeddings, as the library's. */
static int load_rope(const loader *L, const char *key, merak_model_config *c)
{
    static const struct {
        const char *name;
        merak_rope_type type;
        const char *keys[4]; /* the keys the type reads, the required ones first */
        int required;
    } kinds[] = {
        {"default", MERAK_ROPE_DEFAULT, {NULL}, 0},
        {"linear", MERAK_ROPE_LINEAR, {"factor"}, 1},
        {"dynamic", MERAK_ROPE_DYNAMIC, {"factor", "original_max_position_embeddings"}, 1},
        {"llama3", MERAK_ROPE_LLAMA3, {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"}, 4},
    };
    json_t *rs = field(L, key);
    if (!rs)
        return 0;
    if (!json_is_object(rs))
        return wrong_type(L, key, "an object", rs);
    char where[1024];
    snprintf(where, sizeof where, "%s: %s", L->path, key);
    const loader R = {.path = where, .root = rs, .err = L->err, .errlen = L->errlen};
    const char *tkey = field(&R, "rope_type") ? "rope_type" : "type";
    json_t *t = field(&R, tkey);
    if (!t)
        return missing(&R, "rope_type");
    if (!json_is_string(t))
        return wrong_type(&R, tkey, "a string", t);
    const char *tname = json_string_value(t);
    size_t k = 0, nk = sizeof kinds / sizeof kinds[0];
    while (k < nk && strcmp(kinds[k].name, tname) != 0)
        k++;
    if (k == nk)
        return merak_errf(L->err, L->errlen, "%s: rope_type '%.40s' is not supported (default, linear, dynamic or llama3)",
                          where, tname);
    const char *name;
    json_t *v;
    json_object_foreach(rs, name, v) {
        int known = strcmp(name, "rope_type") == 0 || strcmp(name, "type") == 0 ||
                    (strcmp(name, "rope_theta") == 0 && strcmp(key, "rope_parameters") == 0);
        for (int i = 0; i < 4 && kinds[k].keys[i] && !known; i++)
            known = strcmp(name, kinds[k].keys[i]) == 0;
        if (!known && !json_is_null(v))
            return merak_errf(L->err, L->errlen, "%s: '%.40s' is not supported with rope_type '%s'", where, name,
                              tname);
    }
    for (int i = 0; i < kinds[k].required; i++)
        if (!field(&R, kinds[k].keys[i]))
            return missing(&R, kinds[k].keys[i]);
    double theta = c->rope_theta, factor = 1, lo = 0, hi = 0;
    int original = c->max_positions;
    if (get_positive_num(&R, "rope_theta", theta, &theta) != 0 || get_positive_num(&R, "factor", 1, &factor) != 0 ||
        get_positive_num(&R, "low_freq_factor", 1, &lo) != 0 ||
        get_positive_num(&R, "high_freq_factor", 1, &hi) != 0 ||
        get_pos_int(&R, "original_max_position_embeddings", original, &original) != 0)
        return -1;
    if (kinds[k].type != MERAK_ROPE_DEFAULT && factor < 1)
        return merak_errf(L->err, L->errlen, "%s: factor %g must be at least 1", where, factor);
    /* the library's dynamic scaling counts from max_position_embeddings
     * (it reads no original_max_position_embeddings there) */
    if (kinds[k].type == MERAK_ROPE_DYNAMIC && original != c->max_positions)
        return merak_errf(L->err, L->errlen,
                          "%s: original_max_position_embeddings %d differs from max_position_embeddings %d, which "
                          "dynamic scaling counts from", where, original, c->max_positions);
    if (kinds[k].type == MERAK_ROPE_LLAMA3 && !(hi > lo))
        return merak_errf(L->err, L->errlen, "%s: high_freq_factor %g must be above low_freq_factor %g", where, hi,
                          lo);
    c->rope_theta = (float)theta;
    c->rope_type = kinds[k].type;
    if (c->rope_type != MERAK_ROPE_DEFAULT) {
        c->rope_factor = (float)factor;
        c->rope_original_positions = c->rope_type == MERAK_ROPE_LINEAR ? 0 : original;
    }
    if (c->rope_type == MERAK_ROPE_LLAMA3) {
        c->rope_low_freq_factor = (float)lo;
        c->rope_high_freq_factor = (float)hi;
    }
    return 0;
}

static int load_llama(const loader *L, merak_model_config *c)
{
    c->arch = MERAK_ARCH_LLAMA;
    if (get_pos_int(L, "vocab_size", -1, &c->vocab_size) != 0 ||
        get_pos_int(L, "hidden_size", -1, &c->hidden) != 0 ||
        get_pos_int(L, "intermediate_size", -1, &c->ffn_hidden) != 0 ||
        get_pos_int(L, "num_hidden_layers", -1, &c->n_layer) != 0 ||
        get_pos_int(L, "num_attention_heads", -1, &c->n_head) != 0 ||
        get_pos_int(L, "num_key_value_heads", c->n_head, &c->n_kv_head) != 0 ||
        get_pos_int(L, "max_position_embeddings", -1, &c->max_positions) != 0)
        return -1;

    /* Newer configs spell head_dim out; Merak derives it as hidden / n_head. */
    int head_dim = 0;
    if (field(L, "head_dim") && get_pos_int(L, "head_dim", -1, &head_dim) != 0)
        return -1;
    if (field(L, "head_dim") && (int64_t)head_dim * c->n_head != c->hidden) {
        merak_errf(L->err, L->errlen,
               "%s: head_dim %d is not hidden_size / num_attention_heads (%d / %d); not supported",
               L->path, head_dim, c->hidden, c->n_head);
        return -1;
    }

    double eps, theta, std;
    if (get_positive_num(L, "rms_norm_eps", 1e-6, &eps) != 0 ||
        get_positive_num(L, "rope_theta", 10000.0, &theta) != 0 ||
        get_num(L, "initializer_range", 0.02, &std) != 0 ||
        get_bool(L, "tie_word_embeddings", 0, &c->tie_embeddings) != 0 ||
        expect_string(L, "hidden_act", "silu", NULL) != 0 ||
        expect_bool(L, "attention_bias", 0) != 0 || expect_bool(L, "mlp_bias", 0) != 0)
        return -1;
    if (check_init_std(L, std) < 0)
        return -1;
    double partial;
    if (get_num(L, "partial_rotary_factor", 1.0, &partial) != 0)
        return -1;
    if (partial != 1.0)
        return merak_errf(L->err, L->errlen, "%s: partial_rotary_factor %g is not supported (1 only)", L->path,
                          partial);
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    if (load_rope(L, "rope_scaling", c) != 0 || load_rope(L, "rope_parameters", c) != 0)
        return -1;
    c->init_std = (float)std;
    c->dropout = 0.0f; /* LLaMA has no residual or embedding dropout */
    return 0;
}

/* Mistral is LLaMA's architecture with sliding-window attention: a token
 * attends to the sliding_window tokens before it.  Within the window that
 * is the causal attention merak computes, so the model's positions are
 * the window's (null, or a window past max_position_embeddings: all of
 * them); a longer sequence is refused as one past the positions. */
static int load_window(const loader *L, merak_model_config *c)
{
    json_t *w = field(L, "sliding_window");
    if (!w || json_is_null(w))
        return 0;
    int window;
    if (get_pos_int(L, "sliding_window", -1, &window) != 0)
        return -1;
    if (window < c->max_positions)
        c->max_positions = c->window = window;
    return 0;
}

int merak_model_config_load(const char *path, merak_model_config *cfg, char *err,
                            size_t errlen)
{
    FILE *fp = merak_file_fopen(path, err, errlen);
    if (!fp)
        return -1;
    json_error_t jerr;
    json_t *root = json_loadf(fp, 0, &jerr);
    int close_rc = fclose(fp);
    if (!root) {
        merak_errf(err, errlen, "%s: malformed JSON at line %d, column %d: %s", path, jerr.line,
               jerr.column, jerr.text);
        return -1;
    }
    int rc = -1;
    loader L = {.path = path, .root = root, .err = err, .errlen = errlen};
    merak_model_config c;
    memset(&c, 0, sizeof(c));
    if (close_rc != 0) {
        merak_errf(err, errlen, "%s: close: %s", path, strerror(errno));
        goto out;
    }
    if (!json_is_object(root)) {
        merak_errf(err, errlen, "%s: top level is %s, not a JSON object", path,
               json_type_name(root));
        goto out;
    }
    json_t *mt = field(&L, "model_type");
    if (!mt) {
        missing(&L, "model_type");
        goto out;
    }
    if (!json_is_string(mt)) {
        wrong_type(&L, "model_type", "a string", mt);
        goto out;
    }
    const char *type = json_string_value(mt);
    if (strcmp(type, "gpt2") == 0) {
        if (load_gpt2(&L, &c) != 0)
            goto out;
    } else if (strcmp(type, "llama") == 0) {
        if (load_llama(&L, &c) != 0)
            goto out;
    } else if (strcmp(type, "mistral") == 0) {
        if (load_llama(&L, &c) != 0 || load_window(&L, &c) != 0)
            goto out;
    } else if (strcmp(type, "qwen2") == 0) {
        /* LLaMA's architecture with biases on q, k and v; its sliding
         * window is off unless use_sliding_window says otherwise */
        if (load_llama(&L, &c) != 0 || expect_bool(&L, "use_sliding_window", 0) != 0)
            goto out;
        c.qkv_bias = 1;
    } else {
        merak_errf(err, errlen, "%s: model_type '%.40s' is not supported (expected gpt2, llama, mistral or qwen2)",
               path, type);
        goto out;
    }
    snprintf(c.name, sizeof(c.name), "%s", type);
    *cfg = c;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int merak_model_config_resolve(const char *spec, merak_model_config *cfg, char *err,
                               size_t errlen)
{
    if (!spec || !*spec) {
        merak_errf(err, errlen, "empty model name (give a preset or a config.json path)");
        return -1;
    }
    size_t len = strlen(spec);
    if (strchr(spec, '/') || (len >= 5 && strcmp(spec + len - 5, ".json") == 0))
        return merak_model_config_load(spec, cfg, err, errlen);
    if (merak_model_preset(spec, cfg) == 0)
        return 0;

    char list[512] = "";
    size_t used = 0;
    for (int i = 0; preset_names[i] && used < sizeof(list); i++) {
        int k = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                         preset_names[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
    merak_errf(err, errlen, "unknown model '%.64s' (presets: %s)", spec, list);
    return -1;
}

/* The LLaMA family's extras in config.json o: Qwen2's model type (its q, k
 * and v biases) and rope_scaling.  0, or -1 out of memory. */
static int rope_json(json_t *o, const merak_model_config *c)
{
    static const char *const type_names[] = {"default", "linear", "dynamic", "llama3"};
    if (c->qkv_bias && (json_object_set_new(o, "model_type", json_string("qwen2")) != 0 ||
                        json_object_set_new(o, "architectures", json_pack("[s]", "Qwen2ForCausalLM")) != 0))
        return -1;
    if (c->rope_type == MERAK_ROPE_DEFAULT)
        return 0;
    json_t *rs = json_pack("{s:s, s:f}", "rope_type", type_names[c->rope_type], "factor", (double)c->rope_factor);
    if (rs && c->rope_type != MERAK_ROPE_LINEAR &&
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_original_positions)) != 0)
        return json_decref(rs), -1;
    if (rs && c->rope_type == MERAK_ROPE_LLAMA3 &&
        (json_object_set_new(rs, "low_freq_factor", json_real(c->rope_low_freq_factor)) != 0 ||
         json_object_set_new(rs, "high_freq_factor", json_real(c->rope_high_freq_factor)) != 0))
        return json_decref(rs), -1;
    return rs ? json_object_set_new(o, "rope_scaling", rs) : -1;
}

char *merak_model_config_json(const merak_model_config *c)
{
    json_t *o;
    if (c->arch == MERAK_ARCH_LLAMA)
        o = json_pack("{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:b, s:s}", "model_type",
                      "llama", "architectures", "LlamaForCausalLM", "vocab_size", c->vocab_size,
                      "max_position_embeddings", c->max_positions, "hidden_size", c->hidden, "intermediate_size",
                      c->ffn_hidden, "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head,
                      "num_key_value_heads", c->n_kv_head, "rms_norm_eps", (double)c->norm_eps, "rope_theta",
                      (double)c->rope_theta, "initializer_range", (double)c->init_std, "tie_word_embeddings",
                      c->tie_embeddings, "hidden_act", "silu");
    else
        o = json_pack("{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:b, s:s}", "model_type",
                      "gpt2", "architectures", "GPT2LMHeadModel", "vocab_size", c->vocab_size, "n_positions",
                      c->max_positions, "n_embd", c->hidden, "n_inner", c->ffn_hidden, "n_layer", c->n_layer,
                      "n_head", c->n_head, "layer_norm_epsilon", (double)c->norm_eps, "initializer_range",
                      (double)c->init_std, "resid_pdrop", (double)c->dropout, "embd_pdrop", (double)c->dropout,
                      "attn_pdrop", 0.0, "tie_word_embeddings", c->tie_embeddings, "activation_function",
                      "gelu_new");
    if (o && c->arch == MERAK_ARCH_LLAMA && rope_json(o, c) != 0) {
        json_decref(o);
        return NULL;
    }
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return text;
}

/* ------------------------------------------------------------------ checks */

/* The rope_scaling fields a preset or a caller filled in (load_rope
 * checks a file's with the file's names). */
static int check_rope(const merak_model_config *c, const char *nm, char *err, size_t errlen)
{
    switch (c->rope_type) {
    case MERAK_ROPE_DEFAULT: return 0;
    case MERAK_ROPE_LINEAR:
    case MERAK_ROPE_DYNAMIC:
    case MERAK_ROPE_LLAMA3: break;
    default: return merak_errf(err, errlen, "%s: unknown rope_type %d", nm, (int)c->rope_type);
    }
    if (!(c->rope_factor >= 1) || !isfinite(c->rope_factor))
        return merak_errf(err, errlen, "%s: rope_scaling factor %g must be at least 1", nm, (double)c->rope_factor);
    if (c->rope_type != MERAK_ROPE_LINEAR && c->rope_original_positions <= 0)
        return merak_errf(err, errlen, "%s: rope_scaling original_max_position_embeddings %d must be positive", nm,
                          c->rope_original_positions);
    if (c->rope_type == MERAK_ROPE_LLAMA3 &&
        !(c->rope_low_freq_factor > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
          isfinite(c->rope_high_freq_factor)))
        return merak_errf(err, errlen, "%s: rope_scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)", nm,
                          (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor);
    return 0;
}

int merak_model_config_check(const merak_model_config *c, char *err, size_t errlen)
{
    const char *nm = c->name[0] ? c->name : "model";
    if (c->arch != MERAK_ARCH_GPT2 && c->arch != MERAK_ARCH_LLAMA) {
        merak_errf(err, errlen, "%s: unknown architecture %d (expected GPT2 or LLAMA)", nm,
               (int)c->arch);
        return -1;
    }
    const struct {
        const char *field;
        int value;
    } sizes[] = {
        {"vocab_size", c->vocab_size}, {"max_positions", c->max_positions},
        {"hidden", c->hidden},         {"n_layer", c->n_layer},
        {"n_head", c->n_head},         {"n_kv_head", c->n_kv_head},
        {"ffn_hidden", c->ffn_hidden},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (sizes[i].value <= 0) {
            merak_errf(err, errlen, "%s: %s is %d; it must be positive", nm, sizes[i].field,
                   sizes[i].value);
            return -1;
        }
    }
    /* deeper than any model trained (DeepNet's 1000 layers): the planner's
     * partitions take time in the square of the layers */
    if (c->n_layer > MERAK_MAX_LAYERS) {
        merak_errf(err, errlen, "%s: n_layer %d is more than %d, the deepest model merak builds", nm, c->n_layer,
                   MERAK_MAX_LAYERS);
        return -1;
    }
    if (c->hidden % c->n_head != 0) {
        merak_errf(err, errlen,
               "%s: hidden %d is not a multiple of n_head %d; change hidden or n_head", nm,
               c->hidden, c->n_head);
        return -1;
    }
    if (c->n_kv_head > c->n_head || c->n_head % c->n_kv_head != 0) {
        merak_errf(err, errlen,
               "%s: n_head %d is not a multiple of n_kv_head %d; pick n_kv_head dividing n_head",
               nm, c->n_head, c->n_kv_head);
        return -1;
    }
    if (c->arch == MERAK_ARCH_GPT2 && c->n_kv_head != c->n_head) {
        merak_errf(err, errlen,
               "%s: GPT-2 has no grouped-query attention; set n_kv_head to n_head (%d)", nm,
               c->n_head);
        return -1;
    }
    if (c->arch == MERAK_ARCH_LLAMA) {
        int head_dim = c->hidden / c->n_head;
        if (head_dim % 2 != 0) {
            merak_errf(err, errlen,
                   "%s: head_dim = hidden / n_head = %d is odd; RoPE needs an even head_dim, "
                   "change hidden or n_head",
                   nm, head_dim);
            return -1;
        }
        if (!(c->rope_theta > 0) || !isfinite(c->rope_theta)) {
            merak_errf(err, errlen, "%s: rope_theta %g must be positive", nm, (double)c->rope_theta);
            return -1;
        }
        if (check_rope(c, nm, err, errlen) < 0)
            return -1;
    } else if (c->rope_type != MERAK_ROPE_DEFAULT || c->qkv_bias) {
        merak_errf(err, errlen, "%s: GPT-2 has no rope_scaling and no q, k, v biases of their own", nm);
        return -1;
    }
    if (c->qkv_bias != 0 && c->qkv_bias != 1) {
        merak_errf(err, errlen, "%s: qkv_bias %d must be 0 or 1", nm, c->qkv_bias);
        return -1;
    }
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps)) {
        merak_errf(err, errlen, "%s: norm_eps %g must be positive", nm, (double)c->norm_eps);
        return -1;
    }
    if (!(c->dropout >= 0 && c->dropout < 1)) {
        merak_errf(err, errlen, "%s: dropout %g must be in [0, 1)", nm, (double)c->dropout);
        return -1;
    }
    if (!(c->init_std >= 0) || !isfinite(c->init_std)) {
        merak_errf(err, errlen, "%s: init_std %g must be a non-negative number", nm,
               (double)c->init_std);
        return -1;
    }
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1) {
        merak_errf(err, errlen, "%s: tie_embeddings %d must be 0 or 1", nm, c->tie_embeddings);
        return -1;
    }
    return 0;
}
