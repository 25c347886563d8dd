/*
 * merak-shard - turn text files into one llm.c-format token shard: one token
 * per byte (vocabulary 0..255), or the ids of a Hugging Face tokenizer
 * (tokenizer.json: BPE or Unigram), one document per file with the tokenizer's
 * end-of-text token between documents.
 *
 *   merak-shard [--tokenizer tokenizer.json] -o OUT.bin INPUT...
 *
 * Exit status: 0 on success, 1 on an I/O error or a bad tokenizer, 2 on a
 * usage error.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "internal.h"

#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION "0.1.0"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: merak-shard [--tokenizer FILE] -o OUT.bin INPUT...\n"
            "Writes the INPUT files (\"-\" for standard input) as a single token shard\n"
            "(llm.c format): one token per byte, or with --tokenizer the ids of a Hugging\n"
            "Face tokenizer, one document per file and the end-of-text\n"
            "token between documents (version 2 of the header when an id is over 65535).\n"
            "\n"
            "  -o, --output=FILE     the shard to write (required)\n"
            "  -t, --tokenizer=FILE  a tokenizer.json (BPE, byte-level or SentencePiece-style;\n"
            "                        Unigram)\n"
            "      --help            print this help and exit\n"
            "      --version         print the version and exit\n");
}

int main(int argc, char **argv)
{
    signal(SIGXFSZ, SIG_IGN);   /* over ulimit -f: a failed write, reported (as cli_start does) */
    enum { OPT_HELP = 256, OPT_VERSION };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"tokenizer", required_argument, NULL, 't'},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL, *tokfile = NULL;
    int c;
    opterr = 0; /* we print our own one-line usage errors */
    while ((c = getopt_long(argc, argv, ":o:t:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 't':
            tokfile = optarg;
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("merak-shard " VERSION "\n");
            return 0;
        case ':':
            fprintf(stderr, "merak-shard: option '%s' needs an argument (try --help)\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, "merak-shard: unknown option '-%c' (try --help)\n", optopt);
            else
                fprintf(stderr, "merak-shard: unknown option '%s' (try --help)\n",
                        argv[optind - 1]);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "merak-shard: no output file: give -o OUT.bin (try --help)\n");
        return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "merak-shard: no input files (try --help)\n");
        return 2;
    }

    char err[512];
    int same = merak_file_not_input("-o", out, "the --tokenizer file", tokfile, err, sizeof err);
    for (int i = optind; i < argc && same == 0; i++)
        same = merak_file_not_input("-o", out, "an input", argv[i], err, sizeof err);
    if (same < 0) {
        fprintf(stderr, "merak-shard: %s\n", err);
        return 1;
    }
    merak_tokenizer *tok = NULL;
    if (tokfile && merak_tokenizer_load(tokfile, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "merak-shard: %s\n", err);
        return 1;
    }
    const int64_t eot = tok ? merak_tokenizer_eot(tok) : -1;
    if (tok && eot < 0 && argc - optind > 1) {
        fprintf(stderr, "merak-shard: %s has no end-of-text token to put between the %d documents\n",
                tokfile, argc - optind);
        merak_tokenizer_free(tok);
        return 1;
    }
    char *text = NULL;          /* the file being read */
    size_t ntext = 0;
    uint32_t *ids = NULL;       /* every token so far */
    size_t nids = 0, cap = 0;
    uint64_t bytes = 0;
    int rc = 0;
    const double t0 = merak_now();
    for (int i = optind; i < argc && rc == 0; i++) {
        free(text);
        text = NULL;
        if (merak_file_read_all(argv[i], &text, &ntext, err, sizeof err) != 0) {
            fprintf(stderr, "merak-shard: %s\n", err);
            rc = 1;
            break;
        }
        bytes += ntext;
        /* room for the file as bytes, or for the separator (the encoder grows the rest) */
        if (merak_grow((void **)&ids, &cap, nids + (tok ? 1 : ntext), sizeof *ids) != 0) {
            fprintf(stderr, "merak-shard: %s: out of memory\n", argv[i]);
            rc = 1;
            break;
        }
        if (!tok) { /* a byte per token */
            for (size_t j = 0; j < ntext; j++)
                ids[nids++] = (unsigned char)text[j];
            continue;
        }
        if (i > optind) /* the documents' separator */
            ids[nids++] = (uint32_t)eot;
        if (merak_tokenizer_encode(tok, text, ntext, &ids, &nids, &cap, err, sizeof err) != 0) {
            fprintf(stderr, "merak-shard: %s: %s\n", argv[i], err);
            rc = 1;
        }
    }
    const double secs = merak_now() - t0;
    if (rc == 0 && merak_shard_write(out, ids, nids, err, sizeof(err)) != 0) {
        fprintf(stderr, "merak-shard: %s\n", err);
        rc = 1;
    }
    if (rc == 0 && tok)
        rc = printf("merak-shard: wrote %llu tokens to %s (%llu bytes of text, %d document%s, "
                    "vocabulary %u, %.1f MB/s)\n",
                    (unsigned long long)nids, out, (unsigned long long)bytes, argc - optind,
                    argc - optind == 1 ? "" : "s", merak_tokenizer_vocab_size(tok),
                    secs > 0 ? bytes / secs / 1e6 : 0.0) < 0;
    else if (rc == 0)
        rc = printf("merak-shard: wrote %llu tokens to %s\n", (unsigned long long)nids, out) < 0;
    if (rc == 0 && fflush(stdout) != 0)
        rc = 1;
    free(text);
    free(ids);
    merak_tokenizer_free(tok);
    return rc;
}
