/*
 * models.c - GPT-2 and LLaMA (with its relatives: Mistral, Qwen2's q, k and
 * v biases, scaled RoPE) as graphs, with Hugging Face parameter names.
 *
 * Linear weights are kept as [out, in] (nn.Linear).  GPT-2's Hugging Face
 * checkpoints store Conv1D weights as [in, out]; those parameters are marked
 * MERAK_HF_TRANSPOSED so import and export transpose them.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"

/* A parameter named by printf-style format; std 0 means the rule's default. */
static int param(merak_graph *g, merak_param_init init, merak_tp_attr tp, merak_hf_layout layout,
                 int ndim, const int64_t *shape, const char *fmt, ...)
{
    char name[MERAK_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return merak_graph_param(g, name, ndim, shape, init, tp, layout);
}

#define P1(n) 1, (int64_t[]){(n)}
#define P2(a, c) 2, (int64_t[]){(a), (c)}

static const merak_param_init ZEROS = {MERAK_INIT_ZEROS, 0};
static const merak_param_init ONES = {MERAK_INIT_ONES, 0};
static merak_param_init normal(float std) { return (merak_param_init){MERAK_INIT_NORMAL, std}; }

static int maybe_dropout(merak_graph *g, int x, float p)
{
    return p > 0 ? merak_op_dropout(g, x, p) : x;
}

/* The builders below check nothing call by call: the graph keeps its first
 * error and ignores every later call (graph.c), and merak_model_build looks
 * at it once at the end. */

static void build_gpt2(merak_graph *g, const merak_model_config *c, int ids, int targets)
{
    int64_t V = c->vocab_size, P = c->max_positions, C = c->hidden, F = c->ffn_hidden;
    float std = c->init_std;
    /* GPT-2 scales the residual projections by 1/sqrt(2 * n_layer). */
    float proj_std = std / sqrtf(2.0f * (float)c->n_layer);

    int wte = param(g, normal(std), MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(V, C), "transformer.wte.weight");
    int wpe = param(g, normal(std), MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(P, C), "transformer.wpe.weight");
    int x = merak_op_embedding(g, ids, wte);                  /* (B,T,C) */
    x = merak_op_pos_embedding(g, x, wpe);
    x = maybe_dropout(g, x, c->dropout);
    for (int l = 0; l < c->n_layer; l++) {
        const char *h = "transformer.h";
        int ln1w = param(g, ONES, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.ln_1.weight", h, l);
        int ln1b = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.ln_1.bias", h, l);
        int qkvw = param(g, normal(std), MERAK_TP_REPLICATED, MERAK_HF_TRANSPOSED, P2(3 * C, C), "%s.%d.attn.c_attn.weight", h, l);
        int qkvb = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(3 * C), "%s.%d.attn.c_attn.bias", h, l);
        int prw = param(g, normal(proj_std), MERAK_TP_REPLICATED, MERAK_HF_TRANSPOSED, P2(C, C), "%s.%d.attn.c_proj.weight", h, l);
        int prb = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.attn.c_proj.bias", h, l);
        int ln2w = param(g, ONES, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.ln_2.weight", h, l);
        int ln2b = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.ln_2.bias", h, l);
        int fcw = param(g, normal(std), MERAK_TP_REPLICATED, MERAK_HF_TRANSPOSED, P2(F, C), "%s.%d.mlp.c_fc.weight", h, l);
        int fcb = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(F), "%s.%d.mlp.c_fc.bias", h, l);
        int mpw = param(g, normal(proj_std), MERAK_TP_REPLICATED, MERAK_HF_TRANSPOSED, P2(C, F), "%s.%d.mlp.c_proj.weight", h, l);
        int mpb = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.mlp.c_proj.bias", h, l);
        /* attention block: x + proj(attn(qkv(ln_1(x)))) */
        int a = merak_op_layernorm(g, x, ln1w, ln1b, c->norm_eps);
        a = merak_op_linear(g, a, qkvw, qkvb);                  /* (B,T,3C) */
        a = merak_op_attention(g, a, -1, -1, c->n_head, c->n_head, 0);
        a = merak_op_linear(g, a, prw, prb);
        a = maybe_dropout(g, a, c->dropout);
        x = merak_op_add(g, x, a);
        /* MLP block: x + proj(gelu(fc(ln_2(x)))) */
        int m = merak_op_layernorm(g, x, ln2w, ln2b, c->norm_eps);
        m = merak_op_linear(g, m, fcw, fcb);                    /* (B,T,F) */
        m = merak_op_gelu(g, m);
        m = merak_op_linear(g, m, mpw, mpb);
        m = maybe_dropout(g, m, c->dropout);
        x = merak_op_add(g, x, m);
    }
    int lnfw = param(g, ONES, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "transformer.ln_f.weight");
    int lnfb = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "transformer.ln_f.bias");
    /* The LM head is the token embedding unless the config unties it. */
    int head = c->tie_embeddings ? wte
                                 : param(g, normal(std), MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(V, C), "lm_head.weight");
    x = merak_op_layernorm(g, x, lnfw, lnfb, c->norm_eps);
    x = merak_op_linear(g, x, head, -1);                        /* logits (B,T,V) */
    merak_op_cross_entropy(g, x, targets);
}

static void build_llama(merak_graph *g, const merak_model_config *c, int ids, int targets)
{
    int64_t V = c->vocab_size, C = c->hidden, F = c->ffn_hidden;
    int64_t hd = C / c->n_head, QD = hd * c->n_head, KVD = hd * c->n_kv_head;
    merak_param_init w = normal(c->init_std);
    const merak_rope rope = {.theta = c->rope_theta,
                             .type = c->rope_type,
                             .factor = c->rope_factor,
                             .low_freq_factor = c->rope_low_freq_factor,
                             .high_freq_factor = c->rope_high_freq_factor,
                             .original_max_positions = c->rope_original_positions};

    int wte = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(V, C), "model.embed_tokens.weight");
    int x = merak_op_embedding(g, ids, wte);                  /* (B,T,C) */
    x = maybe_dropout(g, x, c->dropout);
    for (int l = 0; l < c->n_layer; l++) {
        const char *L = "model.layers";
        int n1 = param(g, ONES, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.input_layernorm.weight", L, l);
        int wq = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(QD, C), "%s.%d.self_attn.q_proj.weight", L, l);
        int wk = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(KVD, C), "%s.%d.self_attn.k_proj.weight", L, l);
        int wv = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(KVD, C), "%s.%d.self_attn.v_proj.weight", L, l);
        int bq = -1, bk = -1, bv = -1; /* Qwen2's */
        if (c->qkv_bias) {
            bq = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(QD), "%s.%d.self_attn.q_proj.bias", L, l);
            bk = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(KVD), "%s.%d.self_attn.k_proj.bias", L, l);
            bv = param(g, ZEROS, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(KVD), "%s.%d.self_attn.v_proj.bias", L, l);
        }
        int wo = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(C, QD), "%s.%d.self_attn.o_proj.weight", L, l);
        int n2 = param(g, ONES, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "%s.%d.post_attention_layernorm.weight", L, l);
        int wg = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(F, C), "%s.%d.mlp.gate_proj.weight", L, l);
        int wu = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(F, C), "%s.%d.mlp.up_proj.weight", L, l);
        int wd = param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(C, F), "%s.%d.mlp.down_proj.weight", L, l);
        /* attention block: x + o(attn(q(h), k(h), v(h))), h = rmsnorm(x) */
        int h = merak_op_rmsnorm(g, x, n1, c->norm_eps);
        int q = merak_op_linear(g, h, wq, bq);                  /* (B,T,nh*hd) */
        int k = merak_op_linear(g, h, wk, bk);                  /* (B,T,nkv*hd) */
        int v = merak_op_linear(g, h, wv, bv);
        int a = merak_op_attention_rope(g, q, k, v, c->n_head, c->n_kv_head, &rope);
        a = merak_op_linear(g, a, wo, -1);
        a = maybe_dropout(g, a, c->dropout);
        x = merak_op_add(g, x, a);
        /* MLP block: x + down(silu(gate(h)) * up(h)), h = rmsnorm(x) */
        h = merak_op_rmsnorm(g, x, n2, c->norm_eps);
        int gt = merak_op_linear(g, h, wg, -1);                 /* (B,T,F) */
        int up = merak_op_linear(g, h, wu, -1);
        int m = merak_op_swiglu(g, gt, up);
        m = merak_op_linear(g, m, wd, -1);
        m = maybe_dropout(g, m, c->dropout);
        x = merak_op_add(g, x, m);
    }
    int nf = param(g, ONES, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P1(C), "model.norm.weight");
    int head = c->tie_embeddings ? wte
                                 : param(g, w, MERAK_TP_REPLICATED, MERAK_HF_AS_IS, P2(V, C), "lm_head.weight");
    x = merak_op_rmsnorm(g, x, nf, c->norm_eps);
    x = merak_op_linear(g, x, head, -1);                        /* (B,T,V) */
    merak_op_cross_entropy(g, x, targets);
}

/* Tensor-parallel rules (Merak's feature dict): parameter-name patterns and
 * how each is split.  Biases follow their weight; everything else stays
 * whole.  The graph pass (merak_graph_shard) does the rest from the graph. */
typedef struct tp_rule {
    const char *pattern;
    merak_tp_attr attr;
} tp_rule;

static const tp_rule gpt2_rules[] = {
    {"*wte.weight", MERAK_TP_VOCAB},
    {"lm_head.weight", MERAK_TP_VOCAB},
    {"*.attn.c_attn.weight", MERAK_TP_COLUMN},  /* fused q|k|v: split head-aligned */
    {"*.attn.c_proj.weight", MERAK_TP_ROW},
    {"*.mlp.c_fc.weight", MERAK_TP_COLUMN},
    {"*.mlp.c_proj.weight", MERAK_TP_ROW},
    {NULL, 0},
};

static const tp_rule llama_rules[] = {
    {"model.embed_tokens.weight", MERAK_TP_VOCAB},
    {"lm_head.weight", MERAK_TP_VOCAB},
    {"*.self_attn.[qkv]_proj.weight", MERAK_TP_COLUMN},
    {"*.self_attn.o_proj.weight", MERAK_TP_ROW},
    {"*.mlp.gate_proj.weight", MERAK_TP_COLUMN},
    {"*.mlp.up_proj.weight", MERAK_TP_COLUMN},
    {"*.mlp.down_proj.weight", MERAK_TP_ROW},
    {NULL, 0},
};

merak_graph *merak_model_build(const merak_model_config *cfg, int B, int T, char *err,
                               size_t errlen)
{
    if (merak_model_config_check(cfg, err, errlen) < 0)
        return NULL;
    if (B <= 0 || T <= 0) {
        snprintf(err, errlen, "micro-batch %d and sequence length %d must be positive", B, T);
        return NULL;
    }
    if (T > cfg->max_positions) {
        snprintf(err, errlen, "sequence length %d is beyond the model's %d positions", T,
                 cfg->max_positions);
        return NULL;
    }
    merak_graph *g = merak_graph_create();
    if (!g) {
        snprintf(err, errlen, "out of memory building the graph");
        return NULL;
    }
    int64_t bt[2] = {B, T};
    int ids = merak_graph_input(g, "input_ids", MERAK_I32, 2, bt);
    int targets = merak_graph_input(g, "targets", MERAK_I32, 2, bt);
    if (cfg->arch == MERAK_ARCH_GPT2)
        build_gpt2(g, cfg, ids, targets);
    else
        build_llama(g, cfg, ids, targets);
    const tp_rule *rules = cfg->arch == MERAK_ARCH_GPT2 ? gpt2_rules : llama_rules;
    for (int i = 0; rules[i].pattern; i++)
        merak_graph_set_tp(g, rules[i].pattern, rules[i].attr);
    if (g->err[0]) {
        snprintf(err, errlen, "building %s: %s", cfg->name, g->err);
        merak_graph_destroy(g);
        return NULL;
    }
    return g;
}
