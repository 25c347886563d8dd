/*
 * tokenizer.c - Hugging Face byte-level BPE tokenizers: tokenizer.json
 * (jansson), split patterns (PCRE2), byte-pair merges by rank.  See
 * tokenizer.h for what is supported.
 *
 * Encoding a text: added tokens are cut out first (leftmost, then longest);
 * every piece between them goes through the pre-tokenizer's stages in order
 * (a Split regex isolates its matches and the gaps between them; ByteLevel
 * prepends a space when asked and splits by GPT-2's pattern when use_regex);
 * each final piece becomes bytes, each byte its token, and the adjacent
 * pair with the lowest merge rank is merged (leftmost first) until no pair
 * has a merge.  Pieces seen before come from a cache.
 *
 * SentencePiece-style BPE (LLaMA 2, Mistral): the text between added
 * tokens is normalized first (Prepend, Replace: " " becomes "▁"), the
 * Metaspace pre-tokenizer does the same in newer files, and a piece's
 * symbols are its characters (a character the vocabulary lacks becomes
 * its bytes' <0xXX> tokens with byte_fallback, else the unknown token,
 * consecutive ones fused), merged by rank as above.
 *
 * Unicode normalizers (NFC, NFD, NFKC, NFKD) run on utf8proc, with any
 * model and pre-tokenizer; each maximal run of valid UTF-8 is normalized
 * on its own and bytes that are not UTF-8 stay as they are
 * (norm_unicode()).
 *
 * Unigram: the same normalizers and pre-tokenizers; each word is cut by
 * Viterbi over its characters into the pieces of the highest total score
 * (unigram()).  Decoding runs the tokenizer.json's decoder steps over the
 * list of token texts (merak_tokenizer_decode).
 */
#define _GNU_SOURCE /* memmem */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>   /* utf8proc_map: Unicode normalization forms */

#include "errf.h"
#include "file.h"
#include "grow.h"
#include "mix64.h"

/* GPT-2's pre-tokenizer pattern (ByteLevel with use_regex). */
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define MAX_STAGES 8
#define CACHE_SLOTS (1u << 17)
#define CACHE_BYTES ((size_t)64 << 20)
/* Token ids index tables of the whole id range: an id far past any real
 * vocabulary (the largest have some 256k tokens) is a broken file, not a
 * reason to map gigabytes. */
#define MAX_ID ((1 << 24) - 1)

typedef struct stage {
    pcre2_code *re;    /* NULL: no split */
    int prefix_space;  /* ByteLevel's add_prefix_space */
    int byte_level;    /* ByteLevel */
    /* Metaspace: spaces become meta (its replacement), which is put first
     * (prepend: 0 never, 1 always, 2 first: at the start of the text only),
     * and, with split, every piece starts at a meta */
    const char *meta;
    int prepend, split;
} stage;

/* A normalizer step: Prepend a (text not empty), Replace every a by b, or
 * a Unicode normalization form (utf8proc_map's options for it). */
typedef enum { NORM_PREPEND, NORM_REPLACE, NORM_UNICODE } norm_kind;
typedef struct norm_op {
    norm_kind kind;
    const char *a, *b;
    size_t na, nb;
    utf8proc_option_t options;
} norm_op;
#define MAX_NORM 8

typedef struct added {
    const char *text;
    size_t len;
    uint32_t id;
    int special;
} added;

typedef struct merge_slot {
    uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
    uint32_t rank, id;
} merge_slot;

/* A Unigram piece, or a prefix of one (id -1): pieces are found by
 * extending a match a byte at a time, which stops at the first text that
 * starts no piece (the library's trie). */
typedef struct piece_slot {
    const char *s; /* NULL = empty */
    uint64_t hash;
    size_t len;
    int64_t id;
} piece_slot;

/* Unigram's best segmentation of a word's first `at` bytes: its score and
 * its last piece, [from, at) with id. */
typedef struct lattice_node {
    double score;
    size_t from; /* SIZE_MAX: not reached yet */
    uint32_t id;
} lattice_node;

/* A decoder step (tokenizer.json's "decoder"), applied to the whole list
 * of token texts in order. */
enum dec_kind { DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE, DEC_BYTE_LEVEL };
typedef struct dec_step {
    enum dec_kind kind;
    const char *a, *b; /* Replace a by b; Strip's and Metaspace's character (a) */
    size_t na, nb;
    size_t start, stop; /* Strip: at most so many a's from each end */
    int first;          /* Metaspace: the first token loses its a's (prepend_scheme not never) */
} dec_step;
#define MAX_DEC 8

typedef struct cache_slot {
    uint64_t hash; /* 0 = empty */
    size_t off, len, ids, nids;
} cache_slot;

struct merak_tokenizer {
    json_t *root;
    json_t *vocab;                 /* the model's vocab object (token -> id) */
    json_t *own_vocab;             /* Unigram: that object, built from its list (ours to free) */
    uint32_t nvocab;               /* largest id + 1 */
    unsigned char **bytes;         /* [nvocab] what each id stands for */
    size_t *nbytes;
    const char **text;             /* [nvocab] each id's token text (in root), or NULL */
    int *special;                  /* [nvocab] an added token marked special */
    int64_t byte_id[256];          /* the token of each byte, -1 if none */
    uint32_t b2u[256];             /* GPT-2's byte -> code point map */
    int u2b[324];                  /* its inverse (-1: no byte) */
    merge_slot *merges;
    size_t merge_cap;              /* power of two */
    int ignore_merges;
    stage stages[MAX_STAGES];
    int nstages;
    norm_op norm[MAX_NORM];
    int nnorm;
    int sp;                        /* SentencePiece-style: characters, not bytes */
    int unigram;                   /* the Unigram model, not BPE */
    double *score;                 /* Unigram: [nvocab] each piece's score */
    double unk_score;              /* Unigram: the lowest score less 10 */
    piece_slot *pieces;            /* Unigram: the pieces and their prefixes */
    size_t piece_cap, npieces;     /* power of two; used slots */
    lattice_node *lattice;         /* Unigram encoding: [word length + 1] */
    size_t lattice_cap;
    dec_step dec[MAX_DEC];
    int ndec;
    int has_decoder;               /* the file has one (else: each id's bytes) */
    int byte_fallback;             /* sp: a missing character as its <0xXX> tokens */
    int64_t unk;                   /* sp: the unknown token, or -1 */
    int fuse_unk;
    const char *meta;              /* sp: what stands for a space in token texts */
    const char *start;             /* encoding: where the text starts (Metaspace's "first"), or NULL */
    uint32_t *pre, *post;          /* the post-processor's ids before and after a text's */
    size_t npre, npost;
    added *adds;
    int nadds;
    int64_t eot;
    pcre2_match_data *md;
    /* encode state */
    cache_slot *cache;
    unsigned char *arena;          /* cached pieces' bytes */
    size_t arena_len, arena_cap;
    uint32_t *cids;                /* cached pieces' ids */
    size_t cids_len, cids_cap;
    size_t ncached;
    uint32_t *sym;                 /* BPE working symbols */
    size_t sym_cap;
    size_t *link;                  /* BPE: the symbols' next and prev (2 n) */
    size_t link_cap;
    struct bpe_pair *heap;         /* BPE: candidate merges, the best first */
    size_t heap_cap;
    char *mapped;                  /* a piece as vocab text */
    size_t mapped_cap;
    char *err;
    size_t errlen;
};

/* ------------------------------------------------------------------ helpers */

/* One line into the caller's buffer the tokenizer keeps; -1. */
#define fail(t, ...) merak_errf((t)->err, (t)->errlen, __VA_ARGS__)

/* Never 0: a slot's 0 means empty. */
static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    const uint64_t h = merak_fnv1a(p, n);
    return h ? h : 1;
}

/* UTF-8 of code point c into out (4 bytes room); its length. */
static size_t utf8_put(char *out, uint32_t c)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    out[0] = (char)(0xe0 | c >> 12);
    out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[2] = (char)(0x80 | (c & 0x3f));
    return 3; /* the byte map stays below U+0800 */
}

/* The next code point of s[i..n) (advancing *i), or -1 if not UTF-8. */
static int32_t utf8_get(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n)
        return -1;
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < len; k++) {
        if ((u[*i + k] & 0xc0) != 0x80)
            return -1;
        v = v << 6 | (u[*i + k] & 0x3f);
    }
    *i += (size_t)len;
    return (int32_t)v;
}

/* ------------------------------------------------------------------ merges */

static merge_slot *merge_find(const merak_tokenizer *t, uint32_t a, uint32_t b)
{
    const uint64_t key = ((uint64_t)a << 32 | b) + 1;
    for (size_t i = merak_mix64(key) & (t->merge_cap - 1);; i = (i + 1) & (t->merge_cap - 1)) {
        merge_slot *s = &t->merges[i];
        if (s->key == key || s->key == 0)
            return s;
    }
}

/* The vocab id of token text s[0, n), or -1. */
static int64_t vocab_id(const merak_tokenizer *t, const char *s, size_t n)
{
    json_t *v = json_object_getn(t->vocab, s, n);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* ------------------------------------------------------------------ Unigram pieces */

/* The slot of text s[0, n) (hash h): its own, or the empty one it would take. */
static piece_slot *piece_find(piece_slot *tab, size_t cap, const char *s, size_t n, uint64_t h)
{
    for (size_t i = merak_mix64(h) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        piece_slot *p = &tab[i];
        if (!p->s || (p->hash == h && p->len == n && !memcmp(p->s, s, n)))
            return p;
    }
}

/* Doubles the piece table (1024 slots to start). */
static int pieces_grow(merak_tokenizer *t)
{
    const size_t cap = t->piece_cap ? 2 * t->piece_cap : 1024;
    piece_slot *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return fail(t, "out of memory");
    for (size_t i = 0; i < t->piece_cap; i++)
        if (t->pieces[i].s)
            *piece_find(tab, cap, t->pieces[i].s, t->pieces[i].len, t->pieces[i].hash) = t->pieces[i];
    free(t->pieces);
    t->pieces = tab;
    t->piece_cap = cap;
    return 0;
}

/* Piece s[0, n) with its id, and each of its prefixes; a later piece of the
 * same text takes its id (the library's map keeps the last). */
static int piece_add(merak_tokenizer *t, const char *s, size_t n, uint32_t id)
{
    uint64_t h = MERAK_FNV1A_BASIS;
    for (size_t k = 1; k <= n; k++) {
        if (2 * (t->npieces + 1) > t->piece_cap && pieces_grow(t) < 0)
            return -1;
        h = merak_fnv1a_step(h, (unsigned char)s[k - 1]);
        piece_slot *p = piece_find(t->pieces, t->piece_cap, s, k, h);
        if (!p->s) {
            *p = (piece_slot){s, h, k, -1};
            t->npieces++;
        }
        if (k == n)
            p->id = id;
    }
    return 0;
}

/* ------------------------------------------------------------------ loading */

/* A pre-tokenizer stage from its JSON (one of a Sequence, or the whole). */
static int add_stage(merak_tokenizer *t, const char *path, json_t *p)
{
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return fail(t, "%s: a pre_tokenizer has no type", path);
    if (t->nstages == MAX_STAGES)
        return fail(t, "%s: more than %d pre-tokenizer stages", path, MAX_STAGES);
    stage *st = &t->stages[t->nstages];
    const char *pattern = NULL;
    if (!strcmp(type, "ByteLevel")) {
        json_t *ur = json_object_get(p, "use_regex");
        st->byte_level = 1;
        st->prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
        if (!ur || json_is_true(ur))
            pattern = GPT2_PATTERN;
    } else if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        const char *behavior = json_string_value(json_object_get(p, "behavior"));
        pattern = json_string_value(json_object_get(pat, "Regex"));
        if (!pattern)
            return fail(t, "%s: a Split pre-tokenizer without a Regex pattern is not supported", path);
        if (!behavior || strcmp(behavior, "Isolated") != 0)
            return fail(t, "%s: Split behavior '%s' is not supported (Isolated only)", path,
                        behavior ? behavior : "(none)");
        if (json_is_true(json_object_get(p, "invert")))
            return fail(t, "%s: an inverted Split is not supported", path);
    } else if (!strcmp(type, "Metaspace")) {
        const char *rep = json_string_value(json_object_get(p, "replacement"));
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        st->meta = rep && *rep ? rep : "\xe2\x96\x81";
        st->split = !json_is_false(json_object_get(p, "split"));
        if (scheme)
            st->prepend = !strcmp(scheme, "always") ? 1 : !strcmp(scheme, "first") ? 2 : !strcmp(scheme, "never") ? 0 : -1;
        else   /* older files: add_prefix_space */
            st->prepend = json_is_false(json_object_get(p, "add_prefix_space")) ? 0 : 1;
        if (st->prepend < 0)
            return fail(t, "%s: Metaspace prepend_scheme '%s' is not always, first or never", path, scheme);
        t->sp = 1;
        t->meta = st->meta;
    } else {
        return fail(t, "%s: pre-tokenizer '%s' is not supported (ByteLevel, Split, Metaspace)", path, type);
    }
    if (pattern) {
        int code;
        PCRE2_SIZE off;
        st->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
        if (!st->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            return fail(t, "%s: split pattern at offset %zu: %s", path, (size_t)off, (char *)msg);
        }
        (void)pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE); /* the interpreter if no JIT */
    }
    t->nstages++;
    return 0;
}

/* One normalizer step: Prepend, Replace of a string, or a Unicode
 * normalization form.  Prepend and Replace make a tokenizer
 * SentencePiece-style (its texts are characters with "▁" for a space); a
 * normalization form goes with any model. */
static int add_norm(merak_tokenizer *t, const char *path, json_t *n)
{
    /* utf8proc's options for each form, as its utf8proc_NFC() etc. use them */
    static const struct {
        const char *name;
        utf8proc_option_t options;
    } forms[] = {
        {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
        {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
        {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
        {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT},
    };
    const char *type = json_string_value(json_object_get(n, "type"));
    if (t->nnorm == MAX_NORM)
        return fail(t, "%s: more than %d normalizers", path, MAX_NORM);
    norm_op *op = &t->norm[t->nnorm];
    for (size_t i = 0; type && i < sizeof forms / sizeof *forms; i++)
        if (!strcmp(type, forms[i].name)) {
            op->kind = NORM_UNICODE;
            op->options = forms[i].options;
            t->nnorm++;
            return 0;
        }
    if (type && !strcmp(type, "Prepend")) {
        op->kind = NORM_PREPEND;
        op->a = json_string_value(json_object_get(n, "prepend"));
        if (!op->a || !*op->a)
            return fail(t, "%s: a Prepend normalizer without its text", path);
    } else if (type && !strcmp(type, "Replace")) {
        op->kind = NORM_REPLACE;
        op->a = json_string_value(json_object_get(json_object_get(n, "pattern"), "String"));
        op->b = json_string_value(json_object_get(n, "content"));
        if (!op->a || !*op->a || !op->b)
            return fail(t, "%s: a Replace normalizer must replace a String by a content (a Regex pattern is not "
                        "supported)", path);
        op->nb = strlen(op->b);
        if (!strcmp(op->a, " "))
            t->meta = op->b;   /* what a space becomes in the vocabulary's texts */
    } else {
        return fail(t, "%s: normalizer '%s' is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace)", path,
                    type ? type : "?");
    }
    op->na = strlen(op->a);
    t->nnorm++;
    t->sp = 1;
    return 0;
}

/* A normalizer or pre-tokenizer j: a Sequence of them (its list under
 * key), or one, each through add. */
static int load_each(merak_tokenizer *t, const char *path, json_t *j, const char *key,
                     int (*add)(merak_tokenizer *, const char *, json_t *))
{
    if (!j || json_is_null(j))
        return 0;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type || strcmp(type, "Sequence") != 0)
        return add(t, path, j);
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(j, key), i, e)
        if (add(t, path, e) < 0)
            return -1;
    return 0;
}

/* One decoder step: ByteLevel, Replace (of a string), ByteFallback, Fuse,
 * Strip, Metaspace. */
static int add_dec(merak_tokenizer *t, const char *path, json_t *d)
{
    const char *type = json_string_value(json_object_get(d, "type"));
    if (t->ndec == MAX_DEC)
        return fail(t, "%s: more than %d decoders", path, MAX_DEC);
    dec_step *st = &t->dec[t->ndec];
    if (type && !strcmp(type, "ByteLevel")) {
        st->kind = DEC_BYTE_LEVEL;
    } else if (type && !strcmp(type, "ByteFallback")) {
        st->kind = DEC_BYTE_FALLBACK;
    } else if (type && !strcmp(type, "Fuse")) {
        st->kind = DEC_FUSE;
    } else if (type && !strcmp(type, "Replace")) {
        st->kind = DEC_REPLACE;
        st->a = json_string_value(json_object_get(json_object_get(d, "pattern"), "String"));
        st->b = json_string_value(json_object_get(d, "content"));
        if (!st->a || !*st->a || !st->b)
            return fail(t, "%s: a Replace decoder must replace a String by a content (a Regex pattern is not "
                        "supported)", path);
        st->nb = strlen(st->b);
    } else if (type && !strcmp(type, "Strip")) {
        json_t *start = json_object_get(d, "start"), *stop = json_object_get(d, "stop");
        size_t i = 0;
        st->kind = DEC_STRIP;
        st->a = json_string_value(json_object_get(d, "content"));
        if (!st->a || utf8_get(st->a, strlen(st->a), &i) < 0 || i != strlen(st->a) || !json_is_integer(start) ||
            json_integer_value(start) < 0 || !json_is_integer(stop) || json_integer_value(stop) < 0)
            return fail(t, "%s: a Strip decoder needs a content of one character and a start and a stop of 0 or "
                        "more", path);
        st->start = (size_t)json_integer_value(start);
        st->stop = (size_t)json_integer_value(stop);
    } else if (type && !strcmp(type, "Metaspace")) {
        const char *rep = json_string_value(json_object_get(d, "replacement"));
        const char *scheme = json_string_value(json_object_get(d, "prepend_scheme"));
        st->kind = DEC_METASPACE;
        st->a = rep && *rep ? rep : "\xe2\x96\x81";
        if (scheme && strcmp(scheme, "always") != 0 && strcmp(scheme, "first") != 0 && strcmp(scheme, "never") != 0)
            return fail(t, "%s: Metaspace decoder prepend_scheme '%s' is not always, first or never", path, scheme);
        st->first = scheme ? strcmp(scheme, "never") != 0 : !json_is_false(json_object_get(d, "add_prefix_space"));
    } else {
        return fail(t, "%s: decoder '%s' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)",
                    path, type ? type : "?");
    }
    if (st->a)
        st->na = strlen(st->a);
    t->ndec++;
    return 0;
}

/* The post-processor: the special tokens TemplateProcessing's "single"
 * puts before and after a text ($A), in a Sequence or alone; ByteLevel
 * adds none. */
static int load_post(merak_tokenizer *t, const char *path, json_t *p)
{
    if (!p || json_is_null(p))
        return 0;
    const char *type = json_string_value(json_object_get(p, "type"));
    json_t *e;
    size_t i;
    if (type && !strcmp(type, "ByteLevel"))
        return 0;
    if (type && !strcmp(type, "Sequence")) {
        json_array_foreach(json_object_get(p, "processors"), i, e)
            if (load_post(t, path, e) < 0)
                return -1;
        return 0;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return fail(t, "%s: post-processor '%s' is not supported (ByteLevel, TemplateProcessing)", path,
                    type ? type : "?");
    json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
    int seen_a = 0;
    if (!json_is_array(single))
        return fail(t, "%s: TemplateProcessing has no \"single\" template", path);
    json_array_foreach(single, i, e) {
        json_t *sp = json_object_get(e, "SpecialToken"), *seq = json_object_get(e, "Sequence");
        if (seq) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            if (!id || strcmp(id, "A") != 0 || seen_a)
                return fail(t, "%s: TemplateProcessing's single template must hold $A once", path);
            seen_a = 1;
            continue;
        }
        const char *name = json_string_value(json_object_get(sp, "id"));
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *v;
        size_t k;
        if (!name || !json_is_array(ids))
            return fail(t, "%s: TemplateProcessing names special token '%s', which its special_tokens lack", path,
                        name ? name : "?");
        json_array_foreach(ids, k, v) {
            const json_int_t id = json_integer_value(v);
            uint32_t **list = seen_a ? &t->post : &t->pre;
            size_t *n = seen_a ? &t->npost : &t->npre;
            if (!json_is_integer(v) || id < 0 || id > MAX_ID)
                return fail(t, "%s: special token '%s' of the post-processor has no valid id", path, name);
            uint32_t *grown = realloc(*list, (*n + 1) * sizeof **list);
            if (!grown)
                return fail(t, "out of memory");
            *list = grown;
            (*list)[(*n)++] = (uint32_t)id;
        }
    }
    if (!seen_a)
        return fail(t, "%s: TemplateProcessing's single template must hold $A once", path);
    return 0;
}

/* The score the library reads for d, written as the shortest decimal that
 * gives d (as the library and Python write it): serde_json, without its
 * float_roundtrip feature, takes the digits as an integer and multiplies
 * or divides it by a power of ten, which can land a unit in the last place
 * away from d, and a tie between two segmentations can turn on it. */
static double library_score(double d)
{
    char s[40];
    for (int p = 1; p <= 17; p++)
        if (strtod((snprintf(s, sizeof s, "%.*e", p - 1, d), s), NULL) == d)
            break;
    uint64_t digits = 0;
    int ndigits = 0;
    const char *c = s + (s[0] == '-');
    for (; *c && *c != 'e'; c++)
        if (*c != '.')
            digits = digits * 10 + (uint64_t)(*c - '0'), ndigits++;
    long exp = strtol(c + 1, NULL, 10) - (ndigits - 1);
    double f = (double)digits;
    char pow10[24];
    while (labs(exp) > 308 && f != 0) {   /* only a tiny score: 308 at a time */
        f /= 1e308;
        exp += 308;
    }
    if (labs(exp) <= 308) {
        const double pw = strtod((snprintf(pow10, sizeof pow10, "1e%ld", labs(exp)), pow10), NULL);
        f = exp >= 0 ? f * pw : f / pw;
    }
    return s[0] == '-' ? -f : f;
}

/* The Unigram model: vocab [[piece, score], ...] (a piece's id is its
 * place in the list), unk_id (or none), byte_fallback.  A map of piece
 * texts to ids stands in for BPE's vocab object. */
static int load_unigram(merak_tokenizer *t, const char *path, json_t *m)
{
    json_t *list = json_object_get(m, "vocab"), *unk = json_object_get(m, "unk_id"), *e;
    json_t *fallback = json_object_get(m, "byte_fallback");
    if (!json_is_array(list))
        return fail(t, "%s: the Unigram model's vocab is not a list of [piece, score]", path);
    if (json_array_size(list) > (size_t)MAX_ID + 1)
        return fail(t, "%s: the Unigram vocab has %zu pieces, more than merak takes (%d)", path,
                    json_array_size(list), MAX_ID + 1);
    if (fallback && !json_is_null(fallback) && !json_is_boolean(fallback))
        return fail(t, "%s: the Unigram model's byte_fallback is not true or false", path);
    t->nvocab = (uint32_t)json_array_size(list);
    t->vocab = t->own_vocab = json_object();
    t->score = malloc((t->nvocab ? t->nvocab : 1) * sizeof *t->score);
    if (!t->vocab || !t->score || pieces_grow(t) < 0)
        return fail(t, "out of memory");
    double low = INFINITY;
    size_t i;
    json_array_foreach(list, i, e) {
        const char *piece = json_string_value(json_array_get(e, 0));
        json_t *score = json_array_get(e, 1);
        if (json_array_size(e) != 2 || !piece || !json_is_number(score))
            return fail(t, "%s: Unigram vocab entry %zu is not [piece, score]", path, i);
        t->score[i] = library_score(json_number_value(score));
        if (t->score[i] < low)
            low = t->score[i];
        if (json_object_set_new(t->vocab, piece, json_integer((json_int_t)i)) < 0)
            return fail(t, "out of memory");
        if (piece_add(t, piece, strlen(piece), (uint32_t)i) < 0)
            return -1;
    }
    t->unk_score = low - 10;   /* the library's K_UNK_PENALTY */
    t->unk = -1;
    if (unk && !json_is_null(unk)) {
        if (!json_is_integer(unk) || json_integer_value(unk) < 0 || json_integer_value(unk) >= (json_int_t)t->nvocab)
            return fail(t, "%s: the Unigram model's unk_id is not the id of one of its %u pieces", path, t->nvocab);
        t->unk = (int64_t)json_integer_value(unk);
    }
    t->byte_fallback = json_is_true(fallback);
    t->unigram = t->sp = 1;
    return 0;
}

static int load_model(merak_tokenizer *t, const char *path, json_t *m)
{
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!type)
        return fail(t, "%s: no model type", path);
    if (!strcmp(type, "Unigram"))
        return load_unigram(t, path, m);
    if (strcmp(type, "BPE") != 0)
        return fail(t, "%s: model type '%s' is not supported (BPE: byte-level or SentencePiece-style; Unigram)",
                    path, type);
    json_t *d = json_object_get(m, "dropout");
    if (d && !json_is_null(d) && json_number_value(d) != 0)
        return fail(t, "%s: BPE dropout is not supported", path);
    t->byte_fallback = json_is_true(json_object_get(m, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(m, "fuse_unk"));
    const char *pre = json_string_value(json_object_get(m, "continuing_subword_prefix"));
    const char *suf = json_string_value(json_object_get(m, "end_of_word_suffix"));
    if ((pre && *pre) || (suf && *suf))
        return fail(t, "%s: subword prefixes and suffixes are not supported", path);
    t->ignore_merges = json_is_true(json_object_get(m, "ignore_merges"));
    t->vocab = json_object_get(m, "vocab");
    if (!json_is_object(t->vocab))
        return fail(t, "%s: model.vocab is not an object", path);
    const char *key;
    json_t *v;
    json_object_foreach(t->vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0)
            return fail(t, "%s: vocab entry '%s' has no valid id", path, key);
        if (id > MAX_ID)
            return fail(t, "%s: vocab entry '%s' has id %lld, past the largest id merak takes (%d)", path, key,
                        (long long)id, MAX_ID);
        if ((uint32_t)id + 1 > t->nvocab)
            t->nvocab = (uint32_t)id + 1;
    }
    json_t *merges = json_object_get(m, "merges");
    if (!json_is_array(merges))
        return fail(t, "%s: model.merges is not an array", path);
    size_t n = json_array_size(merges);
    t->merge_cap = 1024;
    while (t->merge_cap < 2 * n)
        t->merge_cap *= 2;
    if (!(t->merges = calloc(t->merge_cap, sizeof *t->merges)))
        return fail(t, "out of memory");
    char *buf = NULL;
    size_t bcap = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        const char *s = json_string_value(e);
        const char *sp = s ? strchr(s, ' ') : NULL;
        if (sp && sp > s && sp[1]) {
            a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(sp + 1);
        } else if (json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            la = strlen(a), lb = strlen(b);
        } else {
            free(buf);
            return fail(t, "%s: merge %zu is not \"a b\" or [a, b]", path, i);
        }
        if (merak_grow((void **)&buf, &bcap, la + lb + 1, 1) < 0) {
            free(buf);
            return fail(t, "out of memory");
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        const int64_t ia = vocab_id(t, a, la), ib = vocab_id(t, b, lb), im = vocab_id(t, buf, la + lb);
        if (ia < 0 || ib < 0 || im < 0) {
            free(buf);
            return fail(t, "%s: merge %zu ('%.*s' '%.*s') names a token not in the vocabulary",
                        path, i, (int)la, a, (int)lb, b);
        }
        merge_slot *slot = merge_find(t, (uint32_t)ia, (uint32_t)ib);
        if (slot->key == 0) { /* the first rank of a pair counts */
            slot->key = ((uint64_t)ia << 32 | (uint64_t)ib) + 1;
            slot->rank = (uint32_t)i;
            slot->id = (uint32_t)im;
        }
    }
    free(buf);
    return 0;
}

static int load_added(merak_tokenizer *t, const char *path, json_t *list)
{
    size_t n = json_array_size(list), i;
    json_t *e;
    if (n && !(t->adds = calloc(n, sizeof *t->adds)))
        return fail(t, "out of memory");
    json_array_foreach(list, i, e) {
        const char *c = json_string_value(json_object_get(e, "content"));
        json_t *id = json_object_get(e, "id");
        if (!c || !*c || !json_is_integer(id) || json_integer_value(id) < 0)
            return fail(t, "%s: added token %zu has no content or id", path, i);
        if (json_integer_value(id) > MAX_ID)
            return fail(t, "%s: added token '%s' has id %lld, past the largest id merak takes (%d)", path, c,
                        (long long)json_integer_value(id), MAX_ID);
        if (json_is_true(json_object_get(e, "lstrip")) || json_is_true(json_object_get(e, "rstrip")) ||
            json_is_true(json_object_get(e, "single_word")))
            return fail(t, "%s: added token '%s': lstrip, rstrip and single_word are not supported",
                        path, c);
        added *a = &t->adds[t->nadds++];
        a->text = c;
        a->len = strlen(c);
        a->id = (uint32_t)json_integer_value(id);
        a->special = json_is_true(json_object_get(e, "special"));
        if (a->id + 1 > t->nvocab)
            t->nvocab = a->id + 1;
    }
    return 0;
}

/* id's bytes from its token text key: through the inverse byte map u2b
 * (a token that is not byte-level text keeps its UTF-8), or SentencePiece's
 * way ("<0xXX>" is byte XX, the meta text a space).  An id names one text:
 * two vocab tokens with one id are refused (decoding could not be right). */
static int set_token(merak_tokenizer *t, const char *path, const int *u2b, uint32_t id, const char *key)
{
    const size_t n = strlen(key);
    unsigned char *out = malloc(n + 1);
    if (!out)
        return fail(t, "out of memory");
    size_t i = 0, m = 0;
    unsigned hex;
    char tail;
    if (t->sp && n == 6 && sscanf(key, "<0x%2X%c", &hex, &tail) == 2 && tail == '>') {
        out[m++] = (unsigned char)hex;
    } else if (t->sp) {
        const size_t nm = strlen(t->meta);
        while (i < n)
            if (nm && i + nm <= n && !memcmp(key + i, t->meta, nm))
                out[m++] = ' ', i += nm;
            else
                out[m++] = (unsigned char)key[i++];
    } else {
        while (i < n) {
            int32_t c = utf8_get(key, n, &i);
            if (c < 0 || c >= 324 || u2b[c] < 0) {
                memcpy(out, key, m = n);
                break;
            }
            out[m++] = (unsigned char)u2b[c];
        }
    }
    if (t->bytes[id]) {
        free(out);
        return fail(t, "%s: vocab token '%s' has id %u, which another token has too", path, key, id);
    }
    t->bytes[id] = out;
    t->nbytes[id] = m;
    t->text[id] = key;
    return 0;
}

/* Each id's bytes and text: the vocabulary's tokens (set_token), added
 * tokens as written.  An added token on the id of another text is refused. */
static int build_bytes(merak_tokenizer *t, const char *path)
{
    const int *u2b = t->u2b;
    if (!(t->bytes = calloc(t->nvocab, sizeof *t->bytes)) ||
        !(t->nbytes = calloc(t->nvocab, sizeof *t->nbytes)) || !(t->text = calloc(t->nvocab, sizeof *t->text)) ||
        !(t->special = calloc(t->nvocab, sizeof *t->special)))
        return fail(t, "out of memory");
    if (t->unigram) {   /* a piece's id is its place in the list */
        json_t *list = json_object_get(json_object_get(t->root, "model"), "vocab"), *e;
        size_t i;
        json_array_foreach(list, i, e)
            if (set_token(t, path, u2b, (uint32_t)i, json_string_value(json_array_get(e, 0))) < 0)
                return -1;
    } else {
        const char *key;
        json_t *v;
        json_object_foreach(t->vocab, key, v)
            if (set_token(t, path, u2b, (uint32_t)json_integer_value(v), key) < 0)
                return -1;
    }
    for (int i = 0; i < t->nadds; i++) {
        added *a = &t->adds[i];
        t->special[a->id] |= a->special;
        if (t->bytes[a->id]) { /* a token of the vocabulary: the same text, or a clash */
            if (t->nbytes[a->id] == a->len && !memcmp(t->bytes[a->id], a->text, a->len))
                continue;
            return fail(t, "%s: added token '%s' has id %u, which is another token's", path, a->text,
                        a->id);
        }
        unsigned char *out = malloc(a->len + 1);
        if (!out)
            return fail(t, "out of memory");
        memcpy(out, a->text, a->len);
        t->bytes[a->id] = out;
        t->nbytes[a->id] = a->len;
        t->text[a->id] = a->text;
    }
    return 0;
}

int merak_tokenizer_load(const char *path, merak_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    merak_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return merak_errf(err, errlen, "out of memory");
    t->err = err, t->errlen = errlen;
    json_error_t je;
    int rc = -1;
    FILE *fp = merak_file_fopen(path, err, errlen); /* a regular file, or why not */
    if (!fp)
        goto out;
    t->root = json_loadf(fp, 0, &je);
    fclose(fp);
    if (!t->root) {
        merak_errf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
        goto out;
    }
    if (load_each(t, path, json_object_get(t->root, "normalizer"), "normalizers", add_norm) < 0)
        goto out;
    t->has_decoder = json_object_get(t->root, "decoder") && !json_is_null(json_object_get(t->root, "decoder"));
    /* GPT-2's map: printable bytes are themselves, the rest 256, 257, ... */
    for (int b = 0, n = 0; b < 256; b++)
        t->b2u[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174
                        ? (uint32_t)b
                        : (uint32_t)(256 + n++);
    for (int i = 0; i < 324; i++)
        t->u2b[i] = -1;
    for (int b = 0; b < 256; b++)
        t->u2b[t->b2u[b]] = b;
    if (load_model(t, path, json_object_get(t->root, "model")) < 0 ||
        load_each(t, path, json_object_get(t->root, "pre_tokenizer"), "pretokenizers", add_stage) < 0 ||
        load_added(t, path, json_object_get(t->root, "added_tokens")) < 0 ||
        load_each(t, path, json_object_get(t->root, "decoder"), "decoders", add_dec) < 0 ||
        load_post(t, path, json_object_get(t->root, "post_processor")) < 0)
        goto out;
    t->sp |= t->byte_fallback;
    for (int i = 0; t->sp && i < t->nstages; i++)
        if (t->stages[i].byte_level) {
            fail(t, "%s: a ByteLevel pre-tokenizer with a SentencePiece-style tokenizer (Unigram, byte_fallback, "
                 "a Prepend or Replace normalizer, Metaspace) is not supported", path);
            goto out;
        }
    if (t->sp && !t->meta)
        t->meta = "\xe2\x96\x81";   /* U+2581, SentencePiece's */
    if (build_bytes(t, path) < 0)
        goto out;
    for (size_t i = 0; i < t->npre + t->npost; i++) {
        const uint32_t id = i < t->npre ? t->pre[i] : t->post[i - t->npre];
        if (id >= t->nvocab || !t->bytes[id]) {
            fail(t, "%s: the post-processor adds id %u, which no token has", path, id);
            goto out;
        }
    }
    for (int b = 0; b < 256; b++) {
        char s[8];
        t->byte_id[b] = t->sp ? vocab_id(t, s, (size_t)snprintf(s, sizeof s, "<0x%02X>", b))
                              : vocab_id(t, s, utf8_put(s, t->b2u[b]));
    }
    const char *unk = json_string_value(json_object_get(json_object_get(t->root, "model"), "unk_token"));
    if (!t->unigram)   /* Unigram's is its unk_id */
        t->unk = unk ? vocab_id(t, unk, strlen(unk)) : -1;
    t->eot = -1;
    for (int i = 0; i < t->nadds && t->eot < 0; i++)
        if (!strcmp(t->adds[i].text, "<|endoftext|>") || !strcmp(t->adds[i].text, "<|end_of_text|>") ||
            !strcmp(t->adds[i].text, "</s>"))
            t->eot = t->adds[i].id;
    for (int i = 0; i < t->nadds && t->eot < 0; i++)
        if (t->adds[i].special)
            t->eot = t->adds[i].id;
    if (!(t->md = pcre2_match_data_create(4, NULL)) ||
        !(t->cache = calloc(CACHE_SLOTS, sizeof *t->cache))) {
        fail(t, "out of memory");
        goto out;
    }
    rc = 0;
out:
    t->err = NULL, t->errlen = 0;
    if (rc < 0)
        merak_tokenizer_free(t);
    else
        *out = t;
    return rc;
}

void merak_tokenizer_free(merak_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nstages; i++)
        pcre2_code_free(t->stages[i].re);
    if (t->bytes)
        for (uint32_t i = 0; i < t->nvocab; i++)
            free(t->bytes[i]);
    free(t->bytes);
    free(t->nbytes);
    free(t->merges);
    free(t->score);
    free(t->pieces);
    free(t->lattice);
    free(t->text);
    free(t->special);
    json_decref(t->own_vocab);
    free(t->adds);
    free(t->pre);
    free(t->post);
    pcre2_match_data_free(t->md);
    free(t->cache);
    free(t->arena);
    free(t->cids);
    free(t->sym);
    free(t->link);
    free(t->heap);
    free(t->mapped);
    json_decref(t->root);
    free(t);
}

uint32_t merak_tokenizer_vocab_size(const merak_tokenizer *t) { return t->nvocab; }
int64_t merak_tokenizer_eot(const merak_tokenizer *t) { return t->eot; }

int merak_tokenizer_exact(const merak_tokenizer *t)
{
    for (int i = 0; i < t->nstages; i++)
        if (t->stages[i].prefix_space)
            return 0;
    return !t->sp && !t->nnorm && !t->npre && !t->npost;
}

const unsigned char *merak_tokenizer_bytes(const merak_tokenizer *t, uint32_t id, size_t *len)
{
    if (id >= t->nvocab || !t->bytes[id])
        return NULL;
    *len = t->nbytes[id];
    return t->bytes[id];
}

/* ------------------------------------------------------------------ decoding */

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

/* A list of token texts: token i is buf[i ? end[i - 1] : 0, end[i]). */
typedef struct toks {
    char *buf;
    size_t len, cap;
    size_t *end;
    size_t n, ncap;
} toks;

static int toks_put(toks *l, const void *s, size_t n)
{
    if (merak_grow((void **)&l->buf, &l->cap, l->len + n + 1, 1) < 0)
        return -1;
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    return 0;
}

/* Ends the token being written. */
static int toks_end(toks *l)
{
    if (merak_grow((void **)&l->end, &l->ncap, l->n + 1, sizeof *l->end) < 0)
        return -1;
    l->end[l->n++] = l->len;
    return 0;
}

/* The length of the character at s[i] if it is UTF-8 as Rust's
 * String::from_utf8 takes it (no overlong forms, no surrogates, nothing
 * past U+10FFFF), else 0. */
static size_t utf8_valid_char(const unsigned char *s, size_t n, size_t i)
{
    const size_t at = i;
    const int32_t c = utf8_get((const char *)s, n, &i);
    const size_t len = i - at;
    if (c < 0 || (len == 2 && c < 0x80) || (len == 3 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) ||
        (len == 4 && (c < 0x10000 || c > 0x10ffff)))
        return 0;
    return len;
}

/* 1 if s[0, n) is UTF-8 as Rust's String::from_utf8 takes it. */
static int utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_valid_char(s, n, i)))
            return 0;
    return 1;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The byte of a "<0xXX>" token s[0, n), or -1 (the library parses XX with
 * u8::from_str_radix, which takes "+X" too). */
static int fallback_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    const int hi = s[3] == '+' ? 0 : hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* ByteFallback's flush: the pending bytes as one token if they are UTF-8,
 * else a U+FFFD token for each. */
static int flush_bytes(toks *out, const unsigned char *b, size_t n)
{
    if (!n)
        return 0;
    if (utf8_valid(b, n))
        return toks_put(out, b, n) < 0 || toks_end(out) < 0 ? -1 : 0;
    for (size_t i = 0; i < n; i++)
        if (toks_put(out, REPLACEMENT, 3) < 0 || toks_end(out) < 0)
            return -1;
    return 0;
}

/* Strip's token s[0, n): at most st->start of its first characters and
 * st->stop of its last that are st->a, taken off; into out. */
static int strip(const dec_step *st, toks *out, const char *s, size_t n)
{
    size_t from = 0, to = n, chars = 0, lead = 0;
    for (size_t i = 0; i < n; chars++)
        if (utf8_get(s, n, &i) < 0)
            i++;
    while (lead < st->start && lead < chars && n - from >= st->na && !memcmp(s + from, st->a, st->na))
        from += st->na, lead++;
    for (size_t k = 0; k < st->stop && k < chars - lead && to - from >= st->na && !memcmp(s + to - st->na, st->a, st->na); k++)
        to -= st->na;
    return toks_put(out, s + from, to - from) < 0 || toks_end(out) < 0 ? -1 : 0;
}

/* One decoder step from in to out (emptied first). */
static int dec_apply(const merak_tokenizer *t, const dec_step *st, const toks *in, toks *out)
{
    unsigned char *pending = NULL;   /* ByteFallback's bytes so far */
    size_t npending = 0;
    out->len = out->n = 0;
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const char *s = in->buf + (i ? in->end[i - 1] : 0);
        const size_t n = in->buf + in->end[i] - s;
        switch (st->kind) {
        case DEC_FUSE:
            rc = toks_put(out, s, n);
            continue;   /* one token, ended after the loop */
        case DEC_BYTE_FALLBACK: {
            const int b = fallback_byte(s, n);
            if (b >= 0) {
                pending = pending ? pending : malloc(in->n);
                if (!pending)
                    rc = -1;
                else
                    pending[npending++] = (unsigned char)b;
                continue;
            }
            rc = flush_bytes(out, pending, npending);
            npending = 0;
            if (rc == 0)
                rc = toks_put(out, s, n);
            break;
        }
        case DEC_STRIP:
            rc = strip(st, out, s, n);
            continue;
        case DEC_REPLACE:
        case DEC_METASPACE: /* st->a becomes st->b (Replace), a space or nothing in the first token (Metaspace) */
            for (size_t j = 0; j < n && rc == 0;)
                if (n - j >= st->na && !memcmp(s + j, st->a, st->na)) {
                    if (st->kind == DEC_REPLACE)
                        rc = toks_put(out, st->b, st->nb);
                    else if (!(i == 0 && st->first))
                        rc = toks_put(out, " ", 1);
                    j += st->na;
                } else {
                    rc = toks_put(out, s + j++, 1);
                }
            break;
        case DEC_BYTE_LEVEL: { /* each character its byte, or the token as it is if one has none */
            size_t j = 0;
            const size_t at = out->len;
            while (j < n && rc == 0) {
                const int32_t c = utf8_get(s, n, &j);
                if (c < 0 || c >= 324 || t->u2b[c] < 0) {
                    out->len = at;
                    rc = toks_put(out, s, n);
                    break;
                }
                const unsigned char b = (unsigned char)t->u2b[c];
                rc = toks_put(out, &b, 1);
            }
            continue;   /* one token of all the bytes (the library's; it then replaces bytes that are not UTF-8) */
        }
        }
        if (rc == 0)
            rc = toks_end(out);
    }
    if (rc == 0 && st->kind == DEC_BYTE_FALLBACK)
        rc = flush_bytes(out, pending, npending);
    if (rc == 0 && (st->kind == DEC_FUSE || st->kind == DEC_BYTE_LEVEL) && in->n)
        rc = toks_end(out);
    free(pending);
    return rc;
}

int merak_tokenizer_decode(const merak_tokenizer *t, const uint32_t *ids, size_t n, int skip_special, char **text,
                           size_t *len, char *err, size_t errlen)
{
    toks a = {0}, b = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const uint32_t id = ids[i];
        if (id < t->nvocab && skip_special && t->special[id])
            continue;
        if (id >= t->nvocab || !t->text[id])
            rc = toks_put(&a, REPLACEMENT, 3);
        else if (t->has_decoder)
            rc = toks_put(&a, t->text[id], strlen(t->text[id]));
        else   /* no decoder: each id's bytes */
            rc = toks_put(&a, t->bytes[id], t->nbytes[id]);
        if (rc == 0)
            rc = toks_end(&a);
    }
    for (int k = 0; k < t->ndec && rc == 0; k++) {
        rc = dec_apply(t, &t->dec[k], &a, &b);
        const toks swap = a;
        a = b;
        b = swap;
    }
    free(b.buf);
    free(b.end);
    free(a.end);
    if (rc == 0 && !a.buf && !(a.buf = malloc(1)))
        rc = -1;
    if (rc < 0) {
        free(a.buf);
        return merak_errf(err, errlen, "out of memory");
    }
    a.buf[a.len] = '\0';   /* toks_put keeps a byte of room */
    *text = a.buf;
    *len = a.len;
    return 0;
}

size_t merak_tokenizer_settled(const merak_tokenizer *t, const uint32_t *ids, size_t n)
{
    int joins = 0;
    for (int k = 0; k < t->ndec; k++)
        joins |= t->dec[k].kind == DEC_BYTE_FALLBACK;
    while (joins && n > 0 && ids[n - 1] < t->nvocab && t->text[ids[n - 1]] &&
           fallback_byte(t->text[ids[n - 1]], strlen(t->text[ids[n - 1]])) >= 0)
        n--;
    return n;
}

/* ------------------------------------------------------------------ encoding */

typedef struct out_ids {
    uint32_t **ids;
    size_t *len, *cap;
} out_ids;

static int emit(merak_tokenizer *t, out_ids *o, const uint32_t *v, size_t n)
{
    if (merak_grow((void **)o->ids, o->cap, *o->len + n, sizeof **o->ids) < 0)
        return fail(t, "out of memory");
    memcpy(*o->ids + *o->len, v, n * sizeof *v);
    *o->len += n;
    return 0;
}

/* The ids of one piece by byte-pair merges, into t->sym[0, *n). */
/* A candidate merge of the symbols at positions left and right (right is
 * left's neighbour when it was pushed; a, b their ids then). */
typedef struct bpe_pair {
    uint32_t rank, id, a, b;
    size_t left, right;
} bpe_pair;

/* Heap order: the lowest rank, then the leftmost (the merge a left-to-right
 * scan for the lowest rank picks). */
static int pair_before(const bpe_pair *x, const bpe_pair *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->left < y->left;
}

static void heap_push(merak_tokenizer *t, size_t *len, bpe_pair e)
{
    size_t i = (*len)++;
    for (; i > 0 && pair_before(&e, &t->heap[(i - 1) / 2]); i = (i - 1) / 2)
        t->heap[i] = t->heap[(i - 1) / 2];
    t->heap[i] = e;
}

static bpe_pair heap_pop(merak_tokenizer *t, size_t *len)
{
    const bpe_pair top = t->heap[0], last = t->heap[--*len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *len)
            break;
        if (c + 1 < *len && pair_before(&t->heap[c + 1], &t->heap[c]))
            c++;
        if (!pair_before(&t->heap[c], &last))
            break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (*len)
        t->heap[i] = last;
    return top;
}

/* Pushes the merge of the symbols at left and right, if there is one. */
static void push_pair(merak_tokenizer *t, size_t *len, size_t left, size_t right)
{
    const merge_slot *m = merge_find(t, t->sym[left], t->sym[right]);
    if (m->key)
        heap_push(t, len, (bpe_pair){m->rank, m->id, t->sym[left], t->sym[right], left, right});
}

/* SentencePiece-style symbols of piece p[0, n) into t->sym: each
 * character's token; a character the vocabulary lacks as its bytes'
 * <0xXX> tokens (byte_fallback, when it has them all), else the unknown
 * token (consecutive ones one, with fuse_unk).  Their count, or SIZE_MAX
 * with the error (no unknown token to stand for a character). */
static size_t chars(merak_tokenizer *t, const unsigned char *p, size_t n)
{
    size_t m = 0;
    int last_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        if (utf8_get((const char *)p, n, &j) < 0)
            j = i + 1;   /* not UTF-8: the byte alone */
        const int64_t id = vocab_id(t, (const char *)p + i, j - i);
        int fell_back = 0;
        if (id >= 0) {
            t->sym[m++] = (uint32_t)id;
        } else if (t->byte_fallback) {
            fell_back = 1;
            for (size_t k = i; k < j; k++)
                fell_back &= t->byte_id[p[k]] >= 0;
            for (size_t k = i; fell_back && k < j; k++)
                t->sym[m++] = (uint32_t)t->byte_id[p[k]];
        }
        if (id < 0 && !fell_back) {
            if (t->unk < 0) {
                fail(t, "'%.*s' is not in the vocabulary, which has no unknown token (unk_token)", (int)(j - i),
                     (const char *)p + i);
                return SIZE_MAX;
            }
            if (!(t->fuse_unk && last_unk))
                t->sym[m++] = (uint32_t)t->unk;
        }
        last_unk = id < 0 && !fell_back;
        i = j;
    }
    return m;
}

/* The ids of one piece into t->sym[0, *nout): its bytes' tokens, merged by
 * rank, the lowest first and the leftmost among equals, until no pair
 * merges.  A linked list of symbols and a heap of candidate merges (stale
 * ones skipped when they come up) make it O(n log n) in the piece's length. */
static int bpe(merak_tokenizer *t, const unsigned char *p, size_t n, size_t *nout)
{
    if (merak_grow((void **)&t->sym, &t->sym_cap, n ? n : 1, sizeof *t->sym) < 0 ||
        merak_grow((void **)&t->link, &t->link_cap, 2 * n + 1, sizeof *t->link) < 0 ||
        merak_grow((void **)&t->heap, &t->heap_cap, 2 * n + 1, sizeof *t->heap) < 0)
        return fail(t, "out of memory");
    if (t->ignore_merges) { /* a piece that is a token is that token */
        if (merak_grow((void **)&t->mapped, &t->mapped_cap, 3 * n + 1, 1) < 0)
            return fail(t, "out of memory");
        size_t m = 0;
        if (t->sp)
            memcpy(t->mapped, p, m = n);
        else
            for (size_t i = 0; i < n; i++)
                m += utf8_put(t->mapped + m, t->b2u[p[i]]);
        const int64_t id = vocab_id(t, t->mapped, m);
        if (id >= 0) {
            t->sym[0] = (uint32_t)id;
            *nout = 1;
            return 0;
        }
    }
    const size_t nsym = t->sp ? chars(t, p, n) : n;
    if (nsym == SIZE_MAX)
        return -1;
    /* next[i], prev[i]: the live neighbours (nsym and SIZE_MAX at the
     * ends); a symbol merged into its left neighbour gets next = SIZE_MAX */
    size_t *next = t->link, *prev = t->link + n;
    for (size_t i = 0; i < nsym; i++) {
        if (!t->sp) {
            if (t->byte_id[p[i]] < 0)
                return fail(t, "byte 0x%02x has no token in the vocabulary", p[i]);
            t->sym[i] = (uint32_t)t->byte_id[p[i]];
        }
        next[i] = i + 1;
        prev[i] = i ? i - 1 : SIZE_MAX;
    }
    n = nsym;
    size_t heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(t, &heap, i, i + 1);
    while (heap) {
        const bpe_pair e = heap_pop(t, &heap);
        const size_t l = e.left, r = e.right;
        /* stale: a side was merged away or changed since it was pushed */
        if (next[l] != r || t->sym[l] != e.a || t->sym[r] != e.b)
            continue;
        t->sym[l] = e.id;
        next[l] = next[r];
        next[r] = SIZE_MAX;
        if (next[l] < n) {
            prev[next[l]] = l;
            push_pair(t, &heap, l, next[l]);
        }
        if (prev[l] != SIZE_MAX)
            push_pair(t, &heap, prev[l], l);
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i = next[i])
        t->sym[m++] = t->sym[i];
    *nout = m;
    return 0;
}

/* Unigram: consecutive unknown pieces p[0, n), fused, into t->sym from m:
 * the piece of that text if there is one, else its bytes' <0xXX> pieces
 * (byte_fallback, when the vocabulary has them all), else the unknown
 * piece.  The new count. */
static size_t unknown_run(merak_tokenizer *t, const unsigned char *p, size_t n, size_t m)
{
    const int64_t id = vocab_id(t, (const char *)p, n);
    int bytes = id < 0 && t->byte_fallback;
    for (size_t k = 0; bytes && k < n; k++)
        bytes = t->byte_id[p[k]] >= 0;
    if (id >= 0)
        t->sym[m++] = (uint32_t)id;
    else if (bytes)
        for (size_t k = 0; k < n; k++)
            t->sym[m++] = (uint32_t)t->byte_id[p[k]];
    else
        t->sym[m++] = (uint32_t)t->unk;
    return m;
}

/* Unigram: the ids of word p[0, n) into t->sym[0, *nout): the pieces of
 * the highest total score (Viterbi over the word's characters, the first
 * of equal scores kept, as the library's encode_optimized).  A character
 * that starts no piece of exactly itself may also be the unknown piece, at
 * the lowest score less 10; consecutive unknown pieces are fused
 * (unknown_run).  A byte that is not UTF-8 counts as a character. */
static int unigram(merak_tokenizer *t, const unsigned char *p, size_t n, size_t *nout)
{
    if (merak_grow((void **)&t->sym, &t->sym_cap, n ? n : 1, sizeof *t->sym) < 0 ||
        merak_grow((void **)&t->link, &t->link_cap, n + 1, sizeof *t->link) < 0 ||
        merak_grow((void **)&t->lattice, &t->lattice_cap, n + 1, sizeof *t->lattice) < 0)
        return fail(t, "out of memory");
    lattice_node *best = t->lattice;
    best[0] = (lattice_node){0, 0, 0};
    for (size_t i = 1; i <= n; i++)
        best[i].from = SIZE_MAX;
    for (size_t at = 0, next; at < n; at = next) {
        next = at;
        if (utf8_get((const char *)p, n, &next) < 0)
            next = at + 1;
        if (best[at].from == SIZE_MAX)   /* inside a character: no piece ends here */
            continue;
        int single = 0;   /* a piece of exactly this character */
        uint64_t h = MERAK_FNV1A_BASIS;
        for (size_t k = 1; at + k <= n; k++) {
            h = merak_fnv1a_step(h, p[at + k - 1]);
            const piece_slot *ps = piece_find(t->pieces, t->piece_cap, (const char *)p + at, k, h);
            if (!ps->s)
                break;   /* no piece starts with p[at, at + k) */
            if (ps->id < 0)
                continue;
            const double score = best[at].score + t->score[ps->id];
            lattice_node *to = &best[at + k];
            if (to->from == SIZE_MAX || score > to->score)
                *to = (lattice_node){score, at, (uint32_t)ps->id};
            single |= at + k == next;
        }
        const double score = best[at].score + t->unk_score;
        if (!single && (best[next].from == SIZE_MAX || score > best[next].score)) {
            if (t->unk < 0)
                return fail(t, "'%.*s' is not in the vocabulary, which has no unknown piece (unk_id)",
                            (int)(next - at), (const char *)p + at);
            best[next] = (lattice_node){score, at, (uint32_t)t->unk};
        }
    }
    if (best[n].from == SIZE_MAX)
        return fail(t, "'%.*s' has no segmentation into pieces", (int)n, (const char *)p);
    /* the path back from the end, then forward: bound[0] = 0 < ... < bound[np] = n */
    size_t *bound = t->link, np = 0;
    for (size_t at = n; at > 0; at = best[at].from)
        bound[np++] = at;
    bound[np] = 0;
    for (size_t i = 0; i < (np + 1) / 2; i++) {
        const size_t x = bound[i];
        bound[i] = bound[np - i];
        bound[np - i] = x;
    }
    size_t m = 0;
    for (size_t k = 0; k < np;) {
        const size_t from = bound[k];
        const uint32_t id = best[bound[++k]].id;
        if (t->unk < 0 || id != (uint32_t)t->unk) {
            t->sym[m++] = id;
            continue;
        }
        while (k < np && best[bound[k + 1]].id == (uint32_t)t->unk)
            k++;
        m = unknown_run(t, p + from, bound[k] - from, m);
    }
    *nout = m;
    return 0;
}

/* One final piece: from the cache, or merged and cached. */
static int piece(merak_tokenizer *t, out_ids *o, const unsigned char *p, size_t n)
{
    if (!n)
        return 0;
    const uint64_t h = hash_bytes(p, n);
    size_t i = (size_t)(merak_mix64(h) & (CACHE_SLOTS - 1));
    for (; t->cache[i].hash; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const cache_slot *c = &t->cache[i];
        if (c->hash == h && c->len == n && !memcmp(t->arena + c->off, p, n))
            return emit(t, o, t->cids + c->ids, c->nids);
    }
    size_t m = 0;
    if ((t->unigram ? unigram(t, p, n, &m) : bpe(t, p, n, &m)) < 0 || emit(t, o, t->sym, m) < 0)
        return -1;
    if (t->ncached >= CACHE_SLOTS / 2 || t->arena_len + n > CACHE_BYTES) { /* start over */
        memset(t->cache, 0, CACHE_SLOTS * sizeof *t->cache);
        t->ncached = t->arena_len = t->cids_len = 0;
        for (i = (size_t)(merak_mix64(h) & (CACHE_SLOTS - 1)); t->cache[i].hash; i = (i + 1) & (CACHE_SLOTS - 1))
            ;
    }
    if (merak_grow((void **)&t->arena, &t->arena_cap, t->arena_len + n, 1) < 0 ||
        merak_grow((void **)&t->cids, &t->cids_cap, t->cids_len + m, sizeof *t->cids) < 0)
        return 0; /* no room to cache: the ids are out already */
    cache_slot *c = &t->cache[i];
    c->hash = h, c->off = t->arena_len, c->len = n, c->ids = t->cids_len, c->nids = m;
    memcpy(t->arena + t->arena_len, p, n);
    memcpy(t->cids + t->cids_len, t->sym, m * sizeof *t->sym);
    t->arena_len += n, t->cids_len += m;
    t->ncached++;
    return 0;
}

static int pretokenize(merak_tokenizer *t, out_ids *o, int k, const char *s, size_t n);

/* Metaspace stage k on s[0, n): spaces become the meta text, which is put
 * first (always; or, for "first", when s starts the text) unless s starts
 * with it; with split, a piece starts at every meta. */
static int metaspace(merak_tokenizer *t, out_ids *o, int k, const char *s, size_t n)
{
    const stage *st = &t->stages[k];
    const size_t nm = strlen(st->meta);
    int spaces = 0;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    char *b = malloc(n + (size_t)(spaces + 1) * nm + 1);
    if (!b)
        return fail(t, "out of memory");
    size_t m = 0;
    if ((st->prepend == 1 || (st->prepend == 2 && s == t->start)) && !(n >= nm && !memcmp(s, st->meta, nm)) &&
        !(n && s[0] == ' '))
        memcpy(b, st->meta, nm), m = nm;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ' ')
            memcpy(b + m, st->meta, nm), m += nm;
        else
            b[m++] = s[i];
    int rc = 0;
    if (!st->split) {
        rc = pretokenize(t, o, k + 1, b, m);
    } else {   /* each piece runs to the next meta (merged with what follows it) */
        size_t from = 0;
        for (size_t i = 1; i + nm <= m && rc == 0; i++)
            if (!memcmp(b + i, st->meta, nm)) {
                rc = pretokenize(t, o, k + 1, b + from, i - from);
                from = i;
                i += nm - 1;
            }
        if (rc == 0)
            rc = pretokenize(t, o, k + 1, b + from, m - from);
    }
    free(b);
    return rc;
}

/* s[0, n) through pre-tokenizer stages k.. and then into pieces. */
static int pretokenize(merak_tokenizer *t, out_ids *o, int k, const char *s, size_t n)
{
    if (!n)
        return 0;
    if (k == t->nstages)
        return piece(t, o, (const unsigned char *)s, n);
    const stage *st = &t->stages[k];
    if (st->meta)
        return metaspace(t, o, k, s, n);
    char *own = NULL;
    if (st->prefix_space && s[0] != ' ') {
        if (!(own = malloc(n + 1)))
            return fail(t, "out of memory");
        own[0] = ' ';
        memcpy(own + 1, s, n);
        s = own, n++;
    }
    int rc = 0;
    if (!st->re) {
        rc = pretokenize(t, o, k + 1, s, n);
    } else {
        size_t pos = 0, from = 0;
        while (rc == 0 && from < n) {
            int r = pcre2_match(st->re, (PCRE2_SPTR)s, n, from, 0, t->md, NULL);
            if (r == PCRE2_ERROR_NOMATCH)
                break;
            if (r < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(r, msg, sizeof msg);
                rc = fail(t, "split pattern: %s", (char *)msg);
                break;
            }
            /* the match's bounds, copied: the next stage reuses the match data */
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
            const size_t m0 = ov[0], m1 = ov[1];
            if (m1 == m0) {
                /* an empty match splits there (its own piece is empty) and
                 * the search goes on a character later, as the library's
                 * Oniguruma does: "" isolates every character */
                if (m0 > pos)
                    rc = pretokenize(t, o, k + 1, s + pos, m0 - pos);
                pos = m0;
                size_t i = m0;
                if (utf8_get(s, n, &i) < 0)
                    i = m0 + 1;
                from = i;
                continue;
            }
            if (m0 > pos)
                rc = pretokenize(t, o, k + 1, s + pos, m0 - pos);
            if (rc == 0)
                rc = pretokenize(t, o, k + 1, s + m0, m1 - m0);
            pos = from = m1;
        }
        if (rc == 0 && pos < n)
            rc = pretokenize(t, o, k + 1, s + pos, n - pos);
    }
    free(own);
    return rc;
}

/* s[0, n) in Unicode normalization form options (utf8proc_map's) into
 * *out (malloc'd, *nout bytes).  The library's normalizers take a Rust
 * string, which cannot hold bytes that are not UTF-8; here each maximal
 * run of valid UTF-8 is normalized on its own and any other byte is kept
 * as it is, so no character composes across such a byte.  0, or -1 with
 * the error. */
static int norm_unicode(merak_tokenizer *t, utf8proc_option_t options, const unsigned char *s, size_t n, char **out,
                        size_t *nout)
{
    char *w = NULL;
    size_t len = 0, cap = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i, k;
        while (j < n && (k = utf8_valid_char(s, n, j)))
            j += k;
        utf8proc_uint8_t *norm = NULL;
        utf8proc_ssize_t m = 0;
        if (j > i && (m = utf8proc_map(s + i, (utf8proc_ssize_t)(j - i), &norm, options)) < 0) {
            free(w);
            return fail(t, "normalizing text: %s", utf8proc_errmsg(m));
        }
        const size_t bad = j < n ? 1 : 0;   /* the byte that ends the run */
        if (merak_grow((void **)&w, &cap, len + (size_t)m + bad, 1) < 0) {
            free(norm);
            free(w);
            return fail(t, "out of memory");
        }
        if (m)
            memcpy(w + len, norm, (size_t)m);
        free(norm);
        len += (size_t)m;
        if (bad)
            w[len++] = (char)s[j];
        i = j + bad;
    }
    *out = w;
    *nout = len;
    return 0;
}

/* s[0, n) through normalizer step op into *out (malloc'd, *nout bytes). */
static int normalize(merak_tokenizer *t, const norm_op *op, const char *s, size_t n, char **out, size_t *nout)
{
    if (op->kind == NORM_UNICODE)
        return norm_unicode(t, op->options, (const unsigned char *)s, n, out, nout);
    size_t hits = 0;
    for (size_t j = 0; op->kind == NORM_REPLACE && j + op->na <= n; j++)
        if (!memcmp(s + j, op->a, op->na))
            hits++, j += op->na - 1;
    char *nb = malloc(n + (op->kind == NORM_REPLACE ? hits * op->nb : op->na) + 1), *w = nb;
    if (!nb)
        return fail(t, "out of memory");
    if (op->kind == NORM_PREPEND) {
        memcpy(w, op->a, op->na), w += op->na;
        memcpy(w, s, n), w += n;
    } else {
        for (size_t j = 0; j < n;)
            if (j + op->na <= n && !memcmp(s + j, op->a, op->na))
                memcpy(w, op->b, op->nb), w += op->nb, j += op->na;
            else
                *w++ = s[j++];
    }
    *out = nb;
    *nout = (size_t)(w - nb);
    return 0;
}

/* A segment of text between added tokens (first: it starts the text):
 * normalized (each step in order), then pre-tokenized. */
static int segment(merak_tokenizer *t, out_ids *o, const char *s, size_t n, int first)
{
    if (!n)
        return 0;
    char *buf = NULL;
    for (int i = 0; i < t->nnorm; i++) {
        char *nb = NULL;
        size_t nn = 0;
        if (normalize(t, &t->norm[i], s, n, &nb, &nn) < 0) {
            free(buf);
            return -1;
        }
        free(buf);
        buf = nb;
        s = nb, n = nn;
    }
    t->start = first ? s : NULL;
    int rc = pretokenize(t, o, 0, s, n);
    free(buf);
    return rc;
}

int merak_tokenizer_encode(merak_tokenizer *t, const char *text, size_t n, uint32_t **ids,
                           size_t *len, size_t *cap, char *err, size_t errlen)
{
    out_ids o = {ids, len, cap};
    t->err = err, t->errlen = errlen;
    /* where each added token next occurs (n: nowhere), found again only
     * once the text before it has been encoded */
    size_t *next = t->nadds ? malloc((size_t)t->nadds * sizeof *next) : NULL;
    int rc = t->nadds && !next ? fail(t, "out of memory") : 0;
    for (int i = 0; i < t->nadds && next; i++)
        next[i] = SIZE_MAX;
    if (rc == 0 && t->npre)
        rc = emit(t, &o, t->pre, t->npre);
    size_t pos = 0;
    while (rc == 0 && pos < n) {
        const added *best = NULL;
        size_t at = n;
        for (int i = 0; i < t->nadds; i++) {
            const added *a = &t->adds[i];
            if (next[i] == SIZE_MAX || (next[i] < n && next[i] < pos)) {
                const char *f = a->len <= n - pos ? memmem(text + pos, n - pos, a->text, a->len) : NULL;
                next[i] = f ? (size_t)(f - text) : n;
            }
            if (next[i] < at || (next[i] == at && next[i] < n && a->len > best->len))
                best = a, at = next[i];
        }
        rc = segment(t, &o, text + pos, at - pos, pos == 0);
        if (rc == 0 && best) {
            rc = emit(t, &o, &best->id, 1);
            at += best->len;
        }
        pos = at;
    }
    if (rc == 0 && t->npost)
        rc = emit(t, &o, t->post, t->npost);
    free(next);
    t->err = NULL, t->errlen = 0;
    return rc;
}
