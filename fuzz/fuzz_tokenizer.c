/*
 * fuzz_tokenizer.c - libFuzzer target: the first two bytes (big-endian) are
 * the length of a tokenizer.json that follows, the rest is a text.  A
 * tokenizer that loads must encode the text into ids whose bytes give the
 * text back (unless it adds prefix spaces, has a normalizer, or is
 * SentencePiece-style or Unigram), and the ids must decode
 * (merak_tokenizer_decode).
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t cut = 2 + ((size_t)data[0] << 8 | data[1]);
    if (cut > size)
        cut = size;
    char err[512];
    merak_tokenizer *t;
    if (merak_tokenizer_load(fuzz_file(data + 2, cut - 2), &t, err, sizeof err) < 0)
        return 0;
    const char *text = (const char *)data + cut;
    const size_t n = size - cut;
    uint32_t *ids = NULL;
    size_t len = 0, cap = 0;
    /* with a prefix space or a normalizer (Unicode forms, SentencePiece's
     * Prepend and Replace), pieces may gain or change bytes: no exact round
     * trip */
    if (merak_tokenizer_encode(t, text, n, &ids, &len, &cap, err, sizeof err) == 0 &&
        merak_tokenizer_exact(t)) {
        size_t m = 0;
        for (size_t i = 0; i < len; i++) {
            size_t k;
            const unsigned char *b = merak_tokenizer_bytes(t, ids[i], &k);
            if (!b || m + k > n || memcmp(text + m, b, k) != 0)
                abort(); /* every token is a piece of the text, in order */
            m += k;
        }
        if (m != n)
            abort();
    }
    /* decoding any ids, known or not, gives a NUL-terminated text */
    char *dec = NULL;
    size_t ndec = 0;
    if (merak_tokenizer_decode(t, ids, len, (int)(n & 1), &dec, &ndec, err, sizeof err) == 0 && dec[ndec] != '\0')
        abort();
    free(dec);
    free(ids);
    merak_tokenizer_free(t);
    return 0;
}
