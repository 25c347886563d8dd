/*
 * test_tokenizer.c - decoding round-trips: test_tokenizer TOKENIZER.json
 * FILE... (without arguments: the fixture tokenizer, and the ids the
 * tokenizers library gives for a few texts, hard-coded) encodes each FILE
 * (and then every byte value 0..255, invalid UTF-8 and all, and a text of
 * added tokens glued to words) and checks that the tokens' bytes, and the
 * decoding of the ids, give back the input exactly, that every id is
 * inside the vocabulary, and that encoding twice gives the same ids.
 *
 * test_tokenizer --library DIR TOKENIZER.json FILE... checks decoding
 * where it cannot give the input back (SentencePiece-style and Unigram
 * tokenizers: normalization, unknown pieces): each FILE's ids decode to
 * what the tokenizers library's decode gave, DIR/NAME.all with the special
 * tokens and DIR/NAME.skip without (NAME: the FILE's base name).  TAP.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "tap.h"
#include "tokenizer.h"

static merak_tokenizer *g_tok;

static void round_trip(const char *what, const char *text, size_t n)
{
    char err[512] = "";
    uint32_t *ids = NULL, *again = NULL;
    size_t len = 0, cap = 0, len2 = 0, cap2 = 0;
    if (!tap_ok(merak_tokenizer_encode(g_tok, text, n, &ids, &len, &cap, err, sizeof err) == 0 &&
                    merak_tokenizer_encode(g_tok, text, n, &again, &len2, &cap2, err, sizeof err) == 0,
                "%s: encodes (%s)", what, err)) {
        free(ids);
        free(again);
        return;
    }
    tap_ok(len == len2 && (len == 0 || !memcmp(ids, again, len * sizeof *ids)),
           "%s: encoding twice gives the same %zu ids", what, len);
    unsigned char *back = malloc(n + 1);
    size_t m = 0, bad = 0;
    int fits = 1;
    for (size_t i = 0; i < len; i++) {
        size_t k;
        const unsigned char *b = merak_tokenizer_bytes(g_tok, ids[i], &k);
        if (!b || ids[i] >= merak_tokenizer_vocab_size(g_tok)) {
            bad++;
            continue;
        }
        if (m + k > n) {
            fits = 0;
            break;
        }
        memcpy(back + m, b, k);
        m += k;
    }
    tap_ok(bad == 0, "%s: every id is in the vocabulary (%zu are not)", what, bad);
    tap_ok(fits && m == n && !memcmp(back, text, n), "%s: %zu tokens decode to the %zu bytes", what,
           len, n);
    char *dec = NULL;
    size_t ndec = 0;
    tap_ok(merak_tokenizer_decode(g_tok, ids, len, 0, &dec, &ndec, err, sizeof err) == 0 && ndec == n &&
               !memcmp(dec, text, n) && dec[n] == '\0',
           "%s: merak_tokenizer_decode gives back the %zu bytes (%zu) %s", what, n, ndec, err);
    free(dec);
    free(back);
    free(ids);
    free(again);
}

/* Without arguments (make check): the fixture tokenizer (every byte a
 * token, merges "Ġ t" and "Ġt h", the added token <|endoftext|>) gives the
 * ids the Hugging Face tokenizers library (0.20.3) gave for these texts,
 * with no Python needed to check them. */
static void fixed_ids(void)
{
    static const struct {
        const char *what, *text;
        int n;
        uint32_t ids[16];
    } cases[] = {
        {"' the thin one'", " the thin one", 9, {257, 68, 257, 72, 77, 220, 78, 77, 68}},
        {"'the<|endoftext|> then'", "the<|endoftext|> then", 7, {83, 71, 68, 258, 257, 68, 77}},
        {"'a', two newlines, two spaces, 'b'", "a\n\n  b", 6, {64, 198, 198, 220, 220, 65}},
        {"' tthh'", " tthh", 4, {256, 83, 71, 71}},
        {"'caf\xc3\xa9 \xf0\x9f\x98\x80 42'", "caf\xc3\xa9 \xf0\x9f\x98\x80 42", 13,
         {66, 64, 69, 127, 102, 220, 172, 253, 246, 222, 220, 19, 17}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char err[512] = "";
        uint32_t *ids = NULL;
        size_t len = 0, cap = 0;
        int rc = merak_tokenizer_encode(g_tok, cases[c].text, strlen(cases[c].text), &ids, &len, &cap, err,
                                        sizeof err);
        char got[256] = "";
        for (size_t i = 0, k = 0; i < len && k < sizeof got - 12; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%u", i ? " " : "", (unsigned)ids[i]);
        tap_ok(rc == 0 && len == (size_t)cases[c].n && !memcmp(ids, cases[c].ids, len * sizeof *ids),
               "fixture: %s encodes to the library's %d ids (got %s%s)", cases[c].what, cases[c].n, got, err);
        free(ids);
    }
}

/* FILE's ids decode as the library's decode did: DIR/NAME.all with the
 * special tokens, DIR/NAME.skip without. */
static void against_library(const char *dir, const char *file)
{
    char err[512] = "", path[4096];
    char *text = NULL, *want = NULL, *got = NULL;
    size_t n = 0, nwant = 0, ngot = 0, len = 0, cap = 0;
    uint32_t *ids = NULL;
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    if (!tap_ok(merak_file_read_all(file, &text, &n, err, sizeof err) == 0 &&
                    merak_tokenizer_encode(g_tok, text, n, &ids, &len, &cap, err, sizeof err) == 0,
                "%s: read and encoded (%s)", base, err))
        goto out;
    for (int skip = 0; skip < 2; skip++) {
        snprintf(path, sizeof path, "%s/%s.%s", dir, base, skip ? "skip" : "all");
        if (!tap_ok(merak_file_read_all(path, &want, &nwant, err, sizeof err) == 0 &&
                        merak_tokenizer_decode(g_tok, ids, len, skip, &got, &ngot, err, sizeof err) == 0,
                    "%s: decoded, and the library's read (%s)", path, err))
            goto out;
        size_t k = 0;
        while (k < ngot && k < nwant && got[k] == want[k])
            k++;
        tap_ok(ngot == nwant && k == ngot, "%s: %zu ids decode to the library's %zu bytes%s (first difference at "
               "byte %zu: '%.20s' against '%.20s')", path, len, nwant, skip ? ", special tokens skipped" : "", k,
               got + k, want + k);
        free(want);
        free(got);
        want = got = NULL;
    }
out:
    free(want);
    free(got);
    free(text);
    free(ids);
}

int main(int argc, char **argv)
{
    if (argc > 3 && !strcmp(argv[1], "--library")) {
        char err[512];
        if (merak_tokenizer_load(argv[3], &g_tok, err, sizeof err) < 0) {
            printf("not ok 1 - load %s: %s\n1..1\n", argv[3], err);
            return 1;
        }
        for (int i = 4; i < argc; i++)
            against_library(argv[2], argv[i]);
        merak_tokenizer_free(g_tok);
        return tap_done();
    }
    char err[512], fixture[4096];
    const char *path = argc > 1 ? argv[1] : NULL;
    if (!path) {
        const char *src = getenv("MERAK_SRCDIR");
        snprintf(fixture, sizeof fixture, "%s/tests/fixtures/tokenizer-bytes.json", src ? src : ".");
        path = fixture;
    }
    if (merak_tokenizer_load(path, &g_tok, err, sizeof err) < 0) {
        printf("not ok 1 - load %s: %s\n1..1\n", path, err);
        return 1;
    }
    if (argc < 2)
        fixed_ids();
    for (int i = 2; i < argc; i++) {
        char *buf = NULL;
        size_t n = 0;
        if (tap_ok(merak_file_read_all(argv[i], &buf, &n, err, sizeof err) == 0, "read %s", argv[i]))
            round_trip(argv[i], buf, n);
        free(buf);
    }
    char bytes[512];
    for (int i = 0; i < 512; i++)
        bytes[i] = (char)(i % 2 ? 255 - i / 2 : i / 2);
    round_trip("every byte value", bytes, sizeof bytes);
    const char *glued = "<|endoftext|>word<|endoftext|><|endoftext|> word\xff\xfe<|endoftext";
    round_trip("added tokens glued to words", glued, strlen(glued));
    round_trip("nothing", "", 0);
    merak_tokenizer_free(g_tok);
    return tap_done();
}
