/*
 * generate.c - sampling and the generation loop (see generate.h).
 */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "graph/graph.h"
#include "grow.h"
#include "mix64.h"
#include "pipe/stage.h"
#include "tokenizer.h"

int merak_sampling_check(const merak_sampling *s, char *err, size_t errlen)
{
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return merak_errf(err, errlen, "--temperature must be a number >= 0 (0: greedy), not %g", s->temperature);
    if (s->top_k < 0)
        return merak_errf(err, errlen, "--top-k must be >= 0 (0: every token), not %d", s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return merak_errf(err, errlen, "--top-p must be in (0, 1], not %g", s->top_p);
    return 0;
}

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct merak_sampler {
    merak_sampling opts;
    uint64_t rng;
    int V;
    cand *c;        /* the candidates, most likely first */
    double *p;      /* their unnormalised probabilities */
};

merak_sampler *merak_sampler_create(const merak_sampling *s, int V)
{
    merak_sampler *sm = calloc(1, sizeof *sm);
    if (!sm)
        return NULL;
    sm->opts = *s;
    sm->rng = merak_mix64(s->seed);
    sm->V = V;
    sm->c = malloc((size_t)V * sizeof *sm->c);
    sm->p = malloc((size_t)V * sizeof *sm->p);
    if (V < 1 || !sm->c || !sm->p) {
        merak_sampler_free(sm);
        return NULL;
    }
    return sm;
}

void merak_sampler_free(merak_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->p);
    free(s);
}

/* Most likely first; equal logits by id. */
static int by_logit(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Uniform in [0, 1), from the sampler's counter. */
static double uniform(merak_sampler *s)
{
    s->rng += MERAK_GOLDEN;
    return (double)(merak_mix64(s->rng) >> 11) * 0x1.0p-53;
}

/* The index of p[0..m) that u (uniform in [0, the sum of p)) falls on; the
 * last one that can be drawn (p > 0) when rounding leaves u past the end. */
static int pick(const double *p, int m, double u)
{
    double cum = 0.0;
    int last = 0;
    for (int i = 0; i < m; i++) {
        cum += p[i];
        if (u < cum)
            return i;
        last = p[i] > 0 ? i : last;
    }
    return last;
}

/* Top-p over the whole vocabulary first sorts this many of the most likely. */
enum { TOP_P_FIRST = 1024 };

/* 1 if candidate a is less likely than b (by_logit's order, reversed). */
static int worse(const cand *a, const cand *b) { return by_logit(a, b) > 0; }

/* Moves the k most likely of c[0..n) to c[0..k), most likely first: a heap
 * of the k best seen, its worst at the root (n log k, not a sort of n). */
static void keep_best(cand *c, int n, int k)
{
    for (int i = 0; i < n; i++) {
        if (i >= k && !worse(&c[0], &c[i]))
            continue;
        int at;
        if (i < k) {               /* grow the heap: sift c[i] up */
            const cand x = c[i];
            for (at = i; at > 0 && worse(&x, &c[(at - 1) / 2]); at = (at - 1) / 2)
                c[at] = c[(at - 1) / 2];
            c[at] = x;
            continue;
        }
        const cand x = c[i];       /* replace the worst: sift x down */
        for (at = 0;;) {
            int child = 2 * at + 1;
            if (child >= k)
                break;
            if (child + 1 < k && worse(&c[child + 1], &c[child]))
                child++;
            if (!worse(&c[child], &x))
                break;
            c[at] = c[child];
            at = child;
        }
        c[at] = x;
    }
    qsort(c, (size_t)k, sizeof *c, by_logit);
}

int32_t merak_sampler_next(merak_sampler *s, const float *logits)
{
    const int V = s->V;
    const float t = s->opts.temperature;
    /* A temperature so small that a logit over it overflows is the limit
     * of the distribution as t -> 0: the largest logit (else inf - inf
     * made every weight NaN and picked token 0). */
    int tiny = 0;
    for (int i = 0; t > 0.0f && i < V && !tiny; i++)
        tiny = !isfinite(logits[i] / t);
    if (t == 0.0f || tiny) {
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    int m = s->opts.top_k > 0 && s->opts.top_k < V ? s->opts.top_k : V;
    if (m == V && s->opts.top_p >= 1.0f) {
        /* every token: drawn in id order, no sort */
        float top = logits[0];
        for (int i = 1; i < V; i++)
            top = logits[i] > top ? logits[i] : top;
        double sum = 0.0;
        for (int i = 0; i < V; i++)
            sum += s->p[i] = exp((double)(logits[i] / t) - (double)(top / t));
        return pick(s->p, V, uniform(s) * sum);
    }
    for (int i = 0; i < V; i++)
        s->c[i] = (cand){logits[i] / t, i};
    double sum = 0.0;
    int sorted = 0;
    if (m == V && V > TOP_P_FIRST) {
        /* top-p alone: a trained model's nucleus is usually a few hundred
         * tokens, so the TOP_P_FIRST most likely are sorted first, and all
         * only when they hold less than top_p of the probability (at once
         * when even TOP_P_FIRST tokens as likely as the first could not) */
        float top = s->c[0].logit;
        for (int i = 1; i < V; i++)
            top = s->c[i].logit > top ? s->c[i].logit : top;
        for (int i = 0; i < V; i++)
            sum += exp((double)s->c[i].logit - (double)top);
        if (s->opts.top_p * sum <= TOP_P_FIRST) {
            keep_best(s->c, V, TOP_P_FIRST);
            double cum = 0.0;
            for (int i = 0; i < TOP_P_FIRST && !sorted; i++) {
                cum += s->p[i] = exp((double)s->c[i].logit - (double)top);
                if (cum >= s->opts.top_p * sum)
                    m = i + 1, sum = cum, sorted = 1;
            }
            if (!sorted)   /* keep_best dropped the others: all of them again */
                for (int i = 0; i < V; i++)
                    s->c[i] = (cand){logits[i] / t, i};
        }
    }
    if (!sorted) {
        if (m < V)
            keep_best(s->c, V, m);
        else
            qsort(s->c, (size_t)V, sizeof *s->c, by_logit);
        sum = 0.0;
        for (int i = 0; i < m; i++)
            sum += s->p[i] = exp((double)s->c[i].logit - (double)s->c[0].logit);
        if (s->opts.top_p < 1.0f) {
            double cum = 0.0;
            for (int i = 0; i < m; i++) {
                cum += s->p[i];
                if (cum >= s->opts.top_p * sum) {
                    m = i + 1, sum = cum;
                    break;
                }
            }
        }
    }
    return s->c[pick(s->p, m, uniform(s) * sum)].id;
}

int merak_generate(merak_decoder *d, merak_sampler *s, const int32_t *prompt, int n, int max_tokens,
                   int64_t eot, int no_cache, int (*emit)(void *ctx, int32_t id), void *ctx, char *err,
                   size_t errlen)
{
    if (max_tokens <= 0)
        return 0;
    const int V = merak_decoder_vocab(d);
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *seq = no_cache ? malloc(((size_t)n + (size_t)max_tokens) * sizeof *seq) : NULL;
    if (!logits || (no_cache && !seq)) {
        free(logits);
        free(seq);
        return merak_errf(err, errlen, "out of memory");
    }
    if (seq)
        for (int i = 0; i < n; i++)
            seq[i] = prompt[i];
    int made = 0, len = n;
    merak_decoder_reset(d);
    int rc = merak_decoder_feed(d, prompt, n, logits, err, errlen);
    while (rc == 0) {
        const int32_t id = merak_sampler_next(s, logits);
        made++;
        if (emit(ctx, id) < 0 || id == eot || made == max_tokens)
            break;
        if (seq) {   /* recompute everything, the new token last */
            seq[len++] = id;
            merak_decoder_reset(d);
            rc = merak_decoder_feed(d, seq, len, logits, err, errlen);
        } else {
            rc = merak_decoder_feed(d, &id, 1, logits, err, errlen);
        }
    }
    free(logits);
    free(seq);
    return rc < 0 ? -1 : made;
}

/* ------------------------------------------------------------------ text */

int merak_prompt_encode(merak_tokenizer *tok, const char *text, size_t n, int32_t **ids, int *len, char *err,
                        size_t errlen)
{
    if (n > (size_t)INT32_MAX)
        return merak_errf(err, errlen, "the prompt is too long (%zu bytes)", n);
    int32_t *out = malloc((n ? n : 1) * sizeof *out);   /* a token per byte at most */
    if (!out)
        return merak_errf(err, errlen, "out of memory");
    if (!tok) {
        for (size_t i = 0; i < n; i++)
            out[i] = (unsigned char)text[i];
        *ids = out;
        *len = (int)n;
        return 0;
    }
    uint32_t *u = NULL;
    size_t m = 0, cap = 0;
    if (merak_tokenizer_encode(tok, text, n, &u, &m, &cap, err, errlen) != 0) {
        free(out);
        free(u);
        return -1;
    }
    for (size_t i = 0; i < m; i++)
        out[i] = (int32_t)u[i];
    free(u);
    *ids = out;
    *len = (int)m;
    return 0;
}

int merak_prompt_start(int32_t **ids, int *n, int64_t eot, char *err, size_t errlen)
{
    if (*n > 0)
        return 0;
    if (eot < 0)
        return merak_errf(err, errlen, "the prompt is empty and there is no end-of-text token to start a "
                                       "document from");
    int32_t *one = realloc(*ids, sizeof *one);
    if (!one)
        return merak_errf(err, errlen, "out of memory");
    one[0] = (int32_t)eot;
    *ids = one;
    *n = 1;
    return 0;
}

int merak_model_tokenizer(const char *path, int vocab, merak_tokenizer **out, char *err, size_t errlen)
{
    if (merak_tokenizer_load(path, out, err, errlen) != 0)
        return -1;
    if (merak_tokenizer_vocab_size(*out) <= (uint32_t)vocab)
        return 0;
    merak_errf(err, errlen, "%s: its %u tokens are more than the vocabulary of %d of the model", path,
               merak_tokenizer_vocab_size(*out), vocab);
    merak_tokenizer_free(*out);
    *out = NULL;
    return -1;
}

const unsigned char *merak_token_text(const merak_tokenizer *tok, int32_t id, unsigned char *byte, size_t *len)
{
    static const unsigned char replacement[] = {0xEF, 0xBF, 0xBD};   /* U+FFFD */
    const unsigned char *b = NULL;
    if (tok) {
        b = merak_tokenizer_bytes(tok, (uint32_t)id, len);
    } else if (id >= 0 && id < 256) {
        *byte = (unsigned char)id;
        b = byte;
        *len = 1;
    }
    if (!b) {
        b = replacement;
        *len = sizeof replacement;
    }
    return b;
}

int merak_decode_after(const merak_tokenizer *tok, const int32_t *ids, int nprompt, int n, char **text, size_t *len,
                       char *err, size_t errlen)
{
    uint32_t *u = malloc((n ? (size_t)n : 1) * sizeof *u);
    char *before = NULL, *all = NULL;
    size_t nbefore = 0, nall = 0;
    if (!u)
        return merak_errf(err, errlen, "out of memory");
    for (int i = 0; i < n; i++)
        u[i] = (uint32_t)ids[i];
    int rc = merak_tokenizer_decode(tok, u, (size_t)nprompt, 0, &before, &nbefore, err, errlen);
    if (rc == 0)
        rc = merak_tokenizer_decode(tok, u, (size_t)n, 0, &all, &nall, err, errlen);
    free(u);
    if (rc == 0) {   /* the prompt's text, unless decoding the whole changed it */
        const size_t skip = nbefore <= nall && !memcmp(before, all, nbefore) ? nbefore : 0;
        memmove(all, all + skip, nall - skip + 1);
        *text = all;
        *len = nall - skip;
    } else {
        free(all);
    }
    free(before);
    return rc;
}

/* ------------------------------------------------------------------ samples during training */

struct merak_train_sampler {
    merak_decoder *d;
    merak_tokenizer *tok;
    merak_sampling opts;
    int32_t *prompt;
    int n, tokens;
    int64_t eot;
};

void merak_train_sampler_free(merak_train_sampler *s)
{
    if (!s)
        return;
    merak_decoder_destroy(s->d);
    merak_tokenizer_free(s->tok);
    free(s->prompt);
    free(s);
}

merak_train_sampler *merak_train_sampler_create(const merak_graph *g, const merak_kernels *k, const char *prompt,
                                                const char *tokenizer, int tokens, uint64_t seed, char *err,
                                                size_t errlen)
{
    merak_train_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        merak_errf(err, errlen, "out of memory");
        return NULL;
    }
    s->opts = (merak_sampling){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = seed};
    s->tokens = tokens;
    s->eot = -1;
    const int vocab = merak_graph_loss_vocab(g);
    if (tokenizer) {
        if (merak_model_tokenizer(tokenizer, vocab, &s->tok, err, errlen) < 0)
            goto fail;
        s->eot = merak_tokenizer_eot(s->tok);
    }
    const char *text = prompt ? prompt : "";
    if (merak_prompt_encode(s->tok, text, strlen(text), &s->prompt, &s->n, err, errlen) < 0 ||
        merak_prompt_start(&s->prompt, &s->n, s->eot, err, errlen) < 0)
        goto fail;
    for (int i = 0; i < s->n; i++)
        if (s->prompt[i] >= vocab) {
            merak_errf(err, errlen, "the sample's prompt has token %d, outside the model's vocabulary of %d",
                       (int)s->prompt[i], vocab);
            goto fail;
        }
    /* the decoder refuses more positions than a learned position table has */
    if (!(s->d = merak_decoder_create(g, k, s->n + s->tokens - 1, err, errlen)))
        goto fail;
    return s;
fail:
    merak_train_sampler_free(s);
    return NULL;
}

typedef struct text_buf {
    const merak_tokenizer *tok;
    int64_t eot;
    char *v;
    size_t n, cap;
    int32_t *ids; /* with a tokenizer: the prompt's and the tokens', decoded at the end */
    size_t nids, idcap;
    int oom;
} text_buf;

static int append_token(void *ctx, int32_t id)
{
    text_buf *b = ctx;
    if (id == b->eot)
        return 0;
    if (b->tok) {
        if (merak_grow((void **)&b->ids, &b->idcap, b->nids + 1, sizeof *b->ids) != 0) {
            b->oom = 1;
            return -1;
        }
        b->ids[b->nids++] = id;
        return 0;
    }
    unsigned char byte;
    size_t len;
    const unsigned char *p = merak_token_text(b->tok, id, &byte, &len);
    if (merak_grow((void **)&b->v, &b->cap, b->n + len + 1, 1) != 0) {
        b->oom = 1;
        return -1;
    }
    memcpy(b->v + b->n, p, len);
    b->n += len;
    b->v[b->n] = '\0';
    return 0;
}

int merak_train_sample(merak_train_sampler *s, const merak_gathered *w, char **text, size_t *len, char *err,
                       size_t errlen)
{
    for (int i = 0; i < merak_decoder_num_params(s->d); i++) {
        const int t = merak_decoder_param_tensor(s->d, i);
        int j = 0;
        while (j < w->n && w->tensors[j] != t)
            j++;
        if (j == w->n)
            return merak_errf(err, errlen, "sampling: parameter %d of the model was not gathered", t);
        if (merak_decoder_param_write(s->d, i, w->data[j]) < 0)
            return merak_errf(err, errlen, "sampling: copying parameters to the %s backend failed",
                              merak_decoder_kernels(s->d)->name);
    }
    merak_sampler *sm = merak_sampler_create(&s->opts, merak_decoder_vocab(s->d));
    text_buf b = {s->tok, s->eot, NULL, 0, 0, NULL, 0, 0, 0};
    if (!sm || merak_grow((void **)&b.v, &b.cap, 1, 1) != 0 ||
        (s->tok && merak_grow((void **)&b.ids, &b.idcap, (size_t)s->n, sizeof *b.ids) != 0)) {
        merak_sampler_free(sm);
        free(b.v);
        free(b.ids);
        return merak_errf(err, errlen, "out of memory");
    }
    b.v[0] = '\0';
    if (s->tok) {
        memcpy(b.ids, s->prompt, (size_t)s->n * sizeof *b.ids);
        b.nids = (size_t)s->n;
    }
    int made = merak_generate(s->d, sm, s->prompt, s->n, s->tokens, s->eot, 0, append_token, &b, err, errlen);
    merak_sampler_free(sm);
    if (made >= 0 && !b.oom && s->tok) {   /* the tokenizer's decoder's text of the continuation */
        free(b.v);
        b.v = NULL;
        if (merak_decode_after(s->tok, b.ids, s->n, (int)b.nids, &b.v, &b.n, err, errlen) < 0)
            made = -1;
    }
    free(b.ids);
    if (made < 0 || b.oom) {
        free(b.v);
        return made < 0 ? -1 : merak_errf(err, errlen, "sampling: out of memory");
    }
    *text = b.v;
    *len = b.n;
    return 0;
}
