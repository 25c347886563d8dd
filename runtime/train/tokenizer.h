/*
 * tokenizer.h - Hugging Face byte-level BPE tokenizers (tokenizer.json), as
 * GPT-2's, LLaMA-3's or one trained with the `tokenizers` library.
 *
 * What is read: model.type "BPE" (its vocab, merges as "a b" strings or
 * [a, b] pairs, ignore_merges), the pre-tokenizer ByteLevel (GPT-2's split
 * pattern when use_regex, add_prefix_space) or a Sequence of Split (a regex,
 * behavior Isolated) and ByteLevel, no normalizer (or an empty Sequence),
 * and added_tokens, which are matched in the text before anything else.
 * SentencePiece-style BPE too (LLaMA 2, Mistral): byte_fallback to the
 * vocabulary's <0xXX> tokens, unk_token and fuse_unk, a normalizer Sequence
 * of Prepend and Replace (of a string), the Metaspace pre-tokenizer
 * (replacement, prepend_scheme always/first/never, split).
 * Anything else (WordPiece, Unigram, other normalizers or pre-tokenizers,
 * a dropout) is refused by name.  Split patterns run on PCRE2 (UTF,
 * Unicode properties, JIT); bytes that are not UTF-8 never match a pattern
 * and are tokenized as bytes.
 *
 * Encoding gives the ids the `tokenizers` library gives for the same text
 * (Tokenizer.encode(text).ids, with the special tokens a TemplateProcessing
 * post-processor puts around it: LLaMA's <s> or <|begin_of_text|>);
 * decoding an id sequence gives back the bytes that made it.
 */
#ifndef MERAK_TOKENIZER_H
#define MERAK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct merak_tokenizer merak_tokenizer;

/* Loads path; 0, or -1 with one line in err (file, what is wrong). */
int merak_tokenizer_load(const char *path, merak_tokenizer **out, char *err, size_t errlen);
void merak_tokenizer_free(merak_tokenizer *t);

/* The largest id plus one (the vocabulary a model needs). */
uint32_t merak_tokenizer_vocab_size(const merak_tokenizer *t);

/* The end-of-text token: the added token "<|endoftext|>" or
 * "<|end_of_text|>", else the first special added token; -1 if none. */
int64_t merak_tokenizer_eot(const merak_tokenizer *t);

/* Appends the ids of text[0, n) to ids (a growable array of *len ids, *cap
 * allocated).  0, or -1 with err (out of memory, a regex failure). */
int merak_tokenizer_encode(merak_tokenizer *t, const char *text, size_t n, uint32_t **ids,
                           size_t *len, size_t *cap, char *err, size_t errlen);

/* 1 if the bytes of the ids of any text are that text (a byte-level BPE
 * without add_prefix_space); 0 where decoding gives more or other bytes: a
 * prefix space, a SentencePiece-style tokenizer's (its normalizer's
 * changes, "▁" for a space, the unknown token for a character it lacks)
 * or one whose post-processor adds special tokens. */
int merak_tokenizer_exact(const merak_tokenizer *t);

/* The bytes id stands for (*len of them), or NULL for an id it does not
 * have. */
const unsigned char *merak_tokenizer_bytes(const merak_tokenizer *t, uint32_t id, size_t *len);

#endif /* MERAK_TOKENIZER_H */
