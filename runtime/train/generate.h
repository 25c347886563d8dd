/*
 * generate.h - text generation over the decoder (pipe/decode.h): sampling
 * and the loop merak-generate and merak-train --sample-every share.
 */
#ifndef MERAK_GENERATE_H
#define MERAK_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "pipe/decode.h"

typedef struct merak_sampling {
    float temperature;   /* 0: greedy (the largest logit, the lowest id among equals) */
    int top_k;           /* keep the k most likely tokens; 0: all */
    float top_p;         /* then the fewest whose probabilities add up to top_p; 1: all */
    uint64_t seed;       /* the same seed, logits and options give the same tokens */
} merak_sampling;

/* Options a user gave: temperature >= 0, top_k >= 0, 0 < top_p <= 1.  0,
 * or -1 with one line in err naming the flag. */
int merak_sampling_check(const merak_sampling *s, char *err, size_t errlen);

typedef struct merak_sampler merak_sampler;
/* A sampler over a vocabulary of V tokens; NULL when out of memory. */
merak_sampler *merak_sampler_create(const merak_sampling *s, int V);
void merak_sampler_free(merak_sampler *s);
/* The next token from logits (V floats, host memory, left as they are). */
int32_t merak_sampler_next(merak_sampler *s, const float *logits);

/* Generation: feeds the prompt (n >= 1 ids), then samples up to
 * max_tokens tokens, each handed to emit(ctx, id) as soon as it is drawn
 * (emit returning -1 stops it), stopping after the token eot (when
 * eot >= 0).  With no_cache every new token recomputes the whole sequence
 * from position 0 (slow; for checking the cache).  The decoder needs
 * n + max_tokens - 1 positions.  Returns the number of tokens generated,
 * or -1 with one line in err. */
int merak_generate(merak_decoder *d, merak_sampler *s, const int32_t *prompt, int n, int max_tokens,
                   int64_t eot, int no_cache, int (*emit)(void *ctx, int32_t id), void *ctx, char *err,
                   size_t errlen);

/* ---- text in and out: a Hugging Face tokenizer, or a byte per token */
struct merak_tokenizer;
/* The prompt's tokens: text[0, n) encoded by tok, or its bytes (tok NULL),
 * into *ids (malloc'd, *len of them).  0, or -1 with err. */
int merak_prompt_encode(struct merak_tokenizer *tok, const char *text, size_t n, int32_t **ids, int *len,
                        char *err, size_t errlen);
/* An empty prompt (*n == 0) starts a document: *ids becomes the token eot
 * alone.  0, or -1 with err when there is none (eot < 0). */
int merak_prompt_start(int32_t **ids, int *n, int64_t eot, char *err, size_t errlen);
/* The tokenizer at path (tokenizer.json) for a model of vocab tokens:
 * 0, or -1 with err when it cannot be read or has more ids than that. */
int merak_model_tokenizer(const char *path, int vocab, struct merak_tokenizer **out, char *err, size_t errlen);
/* The bytes token id stands for (*len of them): tok's, or the byte id
 * (tok NULL); U+FFFD for an id that has none. */
const unsigned char *merak_token_text(const struct merak_tokenizer *tok, int32_t id, unsigned char *byte,
                                      size_t *len);
/* The text tokens ids[nprompt, n) add after the prompt ids[0, nprompt):
 * tok's decoding of them all past its decoding of the prompt (all of it
 * if that changed), so that a decoder's first-token rules (LLaMA 2's Strip
 * of a space, Metaspace's) apply to the prompt, not to the continuation.
 * Into *text (malloc'd, NUL-terminated); 0, or -1 with err. */
int merak_decode_after(const struct merak_tokenizer *tok, const int32_t *ids, int nprompt, int n, char **text,
                       size_t *len, char *err, size_t errlen);

/* ---- samples during training (merak-train --sample-every)
 * Rank 0 continues a prompt with the model being trained, from its
 * parameters gathered whole (merak_stage_gather). */
struct merak_gathered;
typedef struct merak_train_sampler merak_train_sampler;
/* A decoder of the whole model g on kernels k; the prompt (NULL or "": the
 * start of a document, which needs the tokenizer's end-of-text token) and
 * tokenizer (a tokenizer.json, or NULL: bytes); `tokens` tokens sampled at
 * temperature 1 with `seed`.  NULL with one line in err. */
merak_train_sampler *merak_train_sampler_create(const merak_graph *g, const merak_kernels *k, const char *prompt,
                                                const char *tokenizer, int tokens, uint64_t seed, char *err,
                                                size_t errlen);
void merak_train_sampler_free(merak_train_sampler *s);
/* A sample from the parameters w: *text (malloc'd, *len bytes, NUL after
 * them).  0, or -1 with err. */
int merak_train_sample(merak_train_sampler *s, const struct merak_gathered *w, char **text, size_t *len,
                       char *err, size_t errlen);

#endif /* MERAK_GENERATE_H */
