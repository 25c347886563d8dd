/*
 * test_tokenizer.c - decoding round-trips: test_tokenizer TOKENIZER.json
 * FILE... encodes each FILE (and then every byte value 0..255, invalid
 * UTF-8 and all, and a text of added tokens glued to words) and checks that
 * the tokens' bytes give back the input exactly, that every id is inside
 * the vocabulary, and that encoding twice gives the same ids.  TAP.
 */
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
    free(back);
    free(ids);
    free(again);
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc < 2) {
        fprintf(stderr, "usage: test_tokenizer TOKENIZER.json [FILE...]\n");
        return 2;
    }
    if (merak_tokenizer_load(argv[1], &g_tok, err, sizeof err) < 0) {
        printf("not ok 1 - load %s: %s\n1..1\n", argv[1], err);
        return 1;
    }
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
