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
 * (replacement, prepend_scheme always/first/never, split).  And the
 * Unigram model (T5's kind): vocab [[piece, score], ...], unk_id,
 * byte_fallback, each word cut into the pieces of the highest total score
 * (Viterbi; the unknown piece at the lowest score less 10 for a character
 * without a piece of its own, consecutive unknown pieces fused).  The
 * decoder (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, in a
 * Sequence) is read for merak_tokenizer_decode.  The Unicode normalizers
 * NFC, NFD, NFKC and NFKD (utf8proc, Unicode 15; the library's tables are
 * older, so characters new since Unicode 12, and combining marks new since
 * 10, may normalize otherwise: man merak-shard), alone or in a Sequence
 * with Prepend and Replace, with any model and pre-tokenizer; they keep
 * bytes that are not UTF-8 and normalize each run of UTF-8 between them
 * on its own.
 * Anything else (WordPiece, normalizers such as Precompiled or Lowercase,
 * other pre-tokenizers or decoders, a dropout) is refused by name.  Split
 * patterns run on PCRE2 (UTF, Unicode properties, JIT); bytes that are not
 * UTF-8 never match a pattern and are tokenized as bytes.
 *
 * Encoding gives the ids the `tokenizers` library gives for the same text
 * (Tokenizer.encode(text).ids, with the special tokens a TemplateProcessing
 * post-processor puts around it: LLaMA's <s> or <|begin_of_text|>);
 * decoding an id sequence gives the library's Tokenizer.decode (for a
 * byte-level BPE, the bytes that made it).
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
 * without add_prefix_space or normalizer); 0 where decoding gives more or
 * other bytes: a prefix space, a Unicode normalizer's changes, a
 * SentencePiece-style tokenizer's (its normalizer's changes, "▁" for a space, the unknown token for a character it lacks)
 * or one whose post-processor adds special tokens. */
int merak_tokenizer_exact(const merak_tokenizer *t);

/* The bytes id stands for (*len of them), or NULL for an id it does not
 * have.  Alone, as the token's own text: "<0xXX>" is byte XX and the meta
 * text a space, but no decoder runs (decode an id sequence for text). */
const unsigned char *merak_tokenizer_bytes(const merak_tokenizer *t, uint32_t id, size_t *len);

/* The text of ids[0, n) as the tokenizer.json's decoder makes it, the
 * library's Tokenizer.decode(ids, skip_special_tokens): special added
 * tokens left out when skip_special; each id's token text through the
 * decoder's steps (ByteLevel, Replace, ByteFallback, Fuse, Strip,
 * Metaspace, or a Sequence of them) and joined.  Two differences, both to
 * keep every byte: ByteLevel gives the bytes as they are where the library
 * replaces those that are not UTF-8 by U+FFFD, and a file without a
 * decoder gives each id's bytes (merak_tokenizer_bytes) joined, where the
 * library joins the token texts with spaces.  An id the tokenizer does
 * not have becomes U+FFFD.  Into *text (malloc'd, NUL-terminated, *len
 * bytes before the NUL); 0, or -1 with err (out of memory). */
int merak_tokenizer_decode(const merak_tokenizer *t, const uint32_t *ids, size_t n, int skip_special, char **text,
                           size_t *len, char *err, size_t errlen);

/* How many of ids[0, n) decode to text that no id after them can change
 * (for writing text as it is generated): all of them, less a trailing run
 * of <0xXX> tokens when the decoder has a ByteFallback step, which decodes
 * a run as one text (a run that is not UTF-8 becomes a U+FFFD for each of
 * its tokens, so one more byte can change every character of it). */
size_t merak_tokenizer_settled(const merak_tokenizer *t, const uint32_t *ids, size_t n);

#endif /* MERAK_TOKENIZER_H */
