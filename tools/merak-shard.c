/*
 * merak-shard - turn text files into one llm.c-format token shard with a
 * byte-level vocabulary (every byte is a token 0..255).
 *
 *   merak-shard -o OUT.bin INPUT...
 *
 * Exit status: 0 on success, 1 on an I/O error, 2 on a usage error.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "data.h"
#include "file.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION "0.1.0"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: merak-shard -o OUT.bin INPUT...\n"
            "Writes the bytes of the INPUT files (\"-\" for standard input), one token\n"
            "per byte, as a single token shard (llm.c format, version 1).\n"
            "\n"
            "  -o, --output=FILE  the shard to write (required)\n"
            "      --help         print this help and exit\n"
            "      --version      print the version and exit\n");
}

/* A growable token array. */
typedef struct tokens {
    uint32_t *v;
    uint64_t n, cap;
} tokens;

static int push_bytes(tokens *t, const unsigned char *buf, size_t m)
{
    if (t->n + m > t->cap) {
        uint64_t cap = t->cap ? t->cap : 1 << 16;
        while (cap < t->n + m)
            cap *= 2;
        if (cap > SIZE_MAX / sizeof(uint32_t))
            return -1;
        uint32_t *v = realloc(t->v, (size_t)cap * sizeof(uint32_t));
        if (!v)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    for (size_t i = 0; i < m; i++)
        t->v[t->n++] = buf[i];
    return 0;
}

/* Appends the bytes of PATH ("-": stdin).  Returns 0 or -1 after printing. */
static int read_input(const char *path, tokens *t)
{
    int is_stdin = strcmp(path, "-") == 0;
    char why[512];
    FILE *fp = is_stdin ? stdin : merak_file_fopen(path, why, sizeof why);
    if (!fp) {
        fprintf(stderr, "merak-shard: %s\n", why);
        return -1;
    }
    unsigned char buf[65536];
    size_t m;
    int rc = 0;
    while ((m = fread(buf, 1, sizeof(buf), fp)) > 0) {
        if (push_bytes(t, buf, m) != 0) {
            fprintf(stderr, "merak-shard: %s: out of memory\n", path);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(fp)) {
        fprintf(stderr, "merak-shard: %s: read error: %s\n", path, strerror(errno));
        rc = -1;
    }
    if (!is_stdin && fclose(fp) != 0 && rc == 0) {
        fprintf(stderr, "merak-shard: %s: close: %s\n", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    enum { OPT_HELP = 256, OPT_VERSION };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL;
    int c;
    opterr = 0; /* we print our own one-line usage errors */
    while ((c = getopt_long(argc, argv, ":o:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
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

    tokens t = {0};
    for (int i = optind; i < argc; i++) {
        if (read_input(argv[i], &t) != 0) {
            free(t.v);
            return 1;
        }
    }
    char err[512];
    if (merak_shard_write(out, t.v, t.n, err, sizeof(err)) != 0) {
        fprintf(stderr, "merak-shard: %s\n", err);
        free(t.v);
        return 1;
    }
    free(t.v);
    if (printf("merak-shard: wrote %llu tokens to %s\n", (unsigned long long)t.n, out) < 0 ||
        fflush(stdout) != 0)
        return 1;
    return 0;
}
