/*
 * merak-generate - text from a trained model: a config (preset or
 * config.json) and Hugging Face safetensors weights (or merak-train's
 * --save-weights), a prompt, and sampled or greedy tokens with a key/value
 * cache.  See merak-generate(1).
 *
 * Exit status: 0 on success, 1 on a bad file or prompt, 2 on a usage error.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "internal.h"
#include "merak/merak.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: merak-generate --model M --weights FILE [--prompt TEXT] [options]\n"
            "Continues a prompt (--prompt, else standard input) with a model's tokens.\n"
            "\n"
            "  --model M          a preset (tiny-gpt2, gpt2, tiny-llama, ...) or a config.json\n"
            "  --weights FILE     safetensors weights with Hugging Face names (or the\n"
            "                     shards an index.json, or its directory, names)\n"
            "  --prompt TEXT      the prompt (default: standard input)\n"
            "  --tokenizer FILE   a Hugging Face tokenizer.json (BPE, byte-level or\n"
            "                     SentencePiece-style, or Unigram); without\n"
            "                     it, a token is a byte\n"
            "  --ids              the prompt and the output are token ids, separated by\n"
            "                     white space\n"
            "  --max-tokens N     tokens to generate (default 64)\n"
            "  --temperature T    0 for greedy; default 1\n"
            "  --top-k K          sample among the K most likely tokens (default 0: all)\n"
            "  --top-p P          ... and the fewest whose probabilities reach P (default 1)\n"
            "  --seed S           the sampling seed (default 0)\n"
            "  --eot ID           stop after token ID (default: the tokenizer's\n"
            "                     end-of-text token; -1: never)\n"
            "  --no-cache         recompute the whole sequence for every token (slow;\n"
            "                     checks the key/value cache)\n"
            "  --device D         cpu (default) or cuda\n"
            "  --threads N        CPU threads for the kernels (default: the cores it may run on)\n"
            "  --help, --version\n");
}

typedef struct opts {
    const char *model, *weights, *prompt, *tokenizer, *device;
    int ids, max_tokens, no_cache, threads;
    long long eot;   /* LLONG_MIN: the tokenizer's */
    merak_sampling sampling;
} opts;

static void parse(int argc, char **argv, opts *o)
{
    enum {
        OPT_MODEL = 256, OPT_WEIGHTS, OPT_PROMPT, OPT_TOKENIZER, OPT_IDS, OPT_MAX, OPT_TEMP, OPT_TOPK,
        OPT_TOPP, OPT_SEED, OPT_EOT, OPT_NOCACHE, OPT_DEVICE, OPT_THREADS, OPT_HELP, OPT_VERSION
    };
    static const struct option longopts[] = {
        {"model", required_argument, 0, OPT_MODEL},
        {"weights", required_argument, 0, OPT_WEIGHTS},
        {"prompt", required_argument, 0, OPT_PROMPT},
        {"tokenizer", required_argument, 0, OPT_TOKENIZER},
        {"ids", no_argument, 0, OPT_IDS},
        {"max-tokens", required_argument, 0, OPT_MAX},
        {"temperature", required_argument, 0, OPT_TEMP},
        {"top-k", required_argument, 0, OPT_TOPK},
        {"top-p", required_argument, 0, OPT_TOPP},
        {"seed", required_argument, 0, OPT_SEED},
        {"eot", required_argument, 0, OPT_EOT},
        {"no-cache", no_argument, 0, OPT_NOCACHE},
        {"device", required_argument, 0, OPT_DEVICE},
        {"threads", required_argument, 0, OPT_THREADS},
        {"help", no_argument, 0, OPT_HELP},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    *o = (opts){.device = "cpu", .max_tokens = 64, .threads = cli_default_threads(), .eot = LLONG_MIN,
                .sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 0}};
    int c, threads_given = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o->model = optarg; break;
        case OPT_WEIGHTS: o->weights = optarg; break;
        case OPT_PROMPT: o->prompt = optarg; break;
        case OPT_TOKENIZER: o->tokenizer = optarg; break;
        case OPT_IDS: o->ids = 1; break;
        case OPT_MAX: o->max_tokens = (int)cli_parse_int("--max-tokens", optarg, 0, INT_MAX / 2); break;
        case OPT_TEMP: o->sampling.temperature = cli_parse_float("--temperature", optarg, 0, 1e6); break;
        case OPT_TOPK: o->sampling.top_k = (int)cli_parse_int("--top-k", optarg, 0, INT_MAX); break;
        case OPT_TOPP: o->sampling.top_p = cli_parse_float("--top-p", optarg, 1e-9, 1); break;
        case OPT_SEED: o->sampling.seed = (uint64_t)cli_parse_int("--seed", optarg, 0, LONG_MAX); break;
        case OPT_EOT: o->eot = cli_parse_int("--eot", optarg, -1, INT32_MAX); break;
        case OPT_NOCACHE: o->no_cache = 1; break;
        case OPT_DEVICE: o->device = optarg; break;
        case OPT_THREADS:
            o->threads = (int)cli_parse_int("--threads", optarg, 1, 4096);
            threads_given = 1;
            break;
        case OPT_HELP: usage(stdout); exit(0);
        case OPT_VERSION: printf("merak-generate " MERAK_VERSION_STRING "\n"); exit(0);
        case ':': cli_die_usage("option '%s' needs an argument", argv[optind - 1]);
        default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        cli_die_usage("unexpected argument '%s'", argv[optind]);
    if (!o->model)
        cli_die_usage("no model: give --model (a preset or a config.json)");
    if (!o->weights)
        cli_die_usage("no weights: give --weights FILE (safetensors)");
    const merak_backend *be = merak_backend_find(o->device);
    if (!be)
        cli_die_usage("--device must be %s, not '%s'", merak_backend_names(), o->device);
    if (threads_given && !be->host)
        cli_die_usage("--threads is for the cpu kernels (not --device %s)", o->device);
    if (o->ids && o->tokenizer)
        cli_die_usage("--ids and --tokenizer do not go together (--ids reads and writes token ids)");
}

/* Token ids in text (white space between them); a usage error for the
 * flag's text (from_flag), else exit 1. */
static int32_t *parse_ids(const char *text, int vocab, int from_flag, int *n)
{
    int32_t *ids = NULL;
    size_t len = 0, cap = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        const size_t tok = strcspn(p, " \t\r\n");
        if (end != p + tok || errno || v < 0 || v >= vocab) {
            const char *where = from_flag ? "--prompt" : "the prompt";
            if (from_flag)
                cli_die_usage("%s: '%.*s' is not a token id of the model (0..%d)", where, (int)tok, p, vocab - 1);
            cli_die("%s: '%.*s' is not a token id of the model (0..%d)", where, (int)tok, p, vocab - 1);
        }
        if (merak_grow((void **)&ids, &cap, len + 1, sizeof *ids) != 0)
            cli_die("out of memory");
        ids[len++] = (int32_t)v;
        p = end;
    }
    *n = (int)len;
    return ids;
}

/* The prompt's tokens: ids, a tokenizer's, or bytes. */
static int32_t *prompt_ids(const opts *o, const char *text, size_t nbytes, merak_tokenizer *tok, int vocab, int *n)
{
    if (o->ids)
        return parse_ids(text, vocab, o->prompt != NULL, n);
    int32_t *ids;
    char err[512];
    if (merak_prompt_encode(tok, text, nbytes, &ids, n, err, sizeof err) < 0)
        cli_die("the prompt: %s", err);
    return ids;
}

typedef struct out_ctx {
    const opts *o;
    merak_tokenizer *tok;
    int64_t eot;
    int written, failed;
    int32_t *ids; /* with a tokenizer: the prompt's and the tokens so far */
    int nprompt, n;
    size_t shown; /* bytes of their text written */
} out_ctx;

/* With a tokenizer: writes the text the tokens so far add (all of it when
 * final; else that of the tokens whose text is settled, held back while it
 * ends in U+FFFD, a character whose bytes have not all come). */
static int write_text(out_ctx *c, int final)
{
    char err[512], *text;
    size_t len;
    int n = c->n;
    if (!final) {   /* (ids are never negative: C lets uint32_t read them) */
        n = (int)merak_tokenizer_settled(c->tok, (const uint32_t *)c->ids, (size_t)n);
        n = n < c->nprompt ? c->nprompt : n;
    }
    if (merak_decode_after(c->tok, c->ids, c->nprompt, n, &text, &len, err, sizeof err) < 0)
        cli_die("%s", err);
    size_t end = len;
    while (!final && end >= 3 && !memcmp(text + end - 3, "\xef\xbf\xbd", 3))
        end -= 3;
    const int rc = end > c->shown && fwrite(text + c->shown, 1, end - c->shown, stdout) != end - c->shown ? -1 : 0;
    if (end > c->shown)
        c->shown = end;
    free(text);
    return rc;
}

/* Writes one generated token: its id, or its text (the end-of-text token
 * ends the text without being written). */
static int emit(void *ctx, int32_t id)
{
    out_ctx *c = ctx;
    int rc;
    if (c->o->ids) {
        rc = printf("%s%d", c->written ? " " : "", (int)id);
    } else if (id == c->eot) {
        rc = 0;
    } else if (c->tok) {
        c->ids[c->n++] = id;
        rc = write_text(c, 0);
    } else {
        unsigned char byte;
        size_t len;
        const unsigned char *b = merak_token_text(c->tok, id, &byte, &len);
        rc = fwrite(b, 1, len, stdout) == len ? 0 : -1;
    }
    c->written++;
    if (rc < 0 || fflush(stdout) != 0)
        c->failed = 1;
    return c->failed ? -1 : 0;
}

int main(int argc, char **argv)
{
    cli_start("merak-generate");
    opts o;
    parse(argc, argv, &o);
    char err[512];
    if (merak_sampling_check(&o.sampling, err, sizeof err) < 0)
        cli_die_usage("%s", err);
    merak_model_config cfg;
    cli_model(o.model, &cfg);

    merak_tokenizer *tok = NULL;
    if (o.tokenizer) {
        if (merak_model_tokenizer(o.tokenizer, cfg.vocab_size, &tok, err, sizeof err) < 0)
            cli_die("%s", err);
    } else if (!o.ids && cfg.vocab_size < 256) {
        cli_die("model %s has a vocabulary of %d, too small for a token per byte (give --tokenizer or --ids)",
                o.model, cfg.vocab_size);
    }
    const int64_t eot = o.eot != LLONG_MIN ? (int64_t)o.eot : tok ? merak_tokenizer_eot(tok) : -1;
    if (eot >= cfg.vocab_size)
        cli_die_usage("--eot %lld is outside the model's vocabulary of %d", (long long)eot, cfg.vocab_size);

    /* the prompt */
    char *text = NULL;
    size_t nbytes = 0;
    if (o.prompt) {
        text = strdup(o.prompt);
        nbytes = strlen(o.prompt);
        if (!text)
            cli_die("out of memory");
    } else if (merak_file_read_all("-", &text, &nbytes, err, sizeof err) != 0) {
        cli_die("%s", err);
    }
    int n;
    int32_t *prompt = prompt_ids(&o, text, nbytes, tok, cfg.vocab_size, &n);
    free(text);
    if (merak_prompt_start(&prompt, &n, eot, err, sizeof err) < 0)   /* an empty prompt starts a document */
        cli_die("%s", err);
    const int P = cfg.max_positions;
    if (n > P)
        cli_die("the prompt's %d tokens are more than the %d positions of model %s", n, P, o.model);
    int max_tokens = o.max_tokens;
    if (max_tokens > P - n + 1) {
        fprintf(stderr, "merak-generate: %d tokens reach the model's %d positions; generating %d\n", max_tokens, P,
                P - n + 1);
        max_tokens = P - n + 1;
    }

    /* the model */
    merak_graph *g = merak_model_build(&cfg, 1, 1, err, sizeof err);
    if (!g)
        cli_die("model %s: %s", o.model, err);
    const merak_kernels *k = merak_kernels_open(o.device, o.threads, err, sizeof err);
    if (!k)
        cli_die("%s", err);
    const int ctx = n + (max_tokens > 0 ? max_tokens - 1 : 0);
    merak_decoder *d = merak_decoder_create(g, k, ctx, err, sizeof err);
    if (!d)
        cli_die("%s", err);
    if (merak_weights_load_decoder(g, d, o.weights, err, sizeof err) < 0 ||
        merak_weights_extra(g, o.weights, err, sizeof err) < 0)
        cli_die("%s", err);
    merak_sampler *s = merak_sampler_create(&o.sampling, merak_decoder_vocab(d));
    if (!s)
        cli_die("out of memory");

    out_ctx oc = {&o, tok, eot, 0, 0, NULL, n, n, 0};
    if (tok && !o.ids) {   /* room for the prompt and every token */
        if (!(oc.ids = malloc((size_t)(n + max_tokens + 1) * sizeof *oc.ids)))
            cli_die("out of memory");
        memcpy(oc.ids, prompt, (size_t)n * sizeof *oc.ids);
    }
    const double t0 = merak_now();
    int made = merak_generate(d, s, prompt, n, max_tokens, eot, o.no_cache, emit, &oc, err, sizeof err);
    const double secs = merak_now() - t0;
    if (made < 0)
        cli_die("%s", err);
    if (oc.ids && write_text(&oc, 1) < 0)
        oc.failed = 1;
    free(oc.ids);
    if (oc.failed)
        cli_die("writing the output failed: %s", strerror(errno));
    if (printf("\n") < 0 || fflush(stdout) != 0)
        cli_die("writing the output failed: %s", strerror(errno));
    fprintf(stderr, "merak-generate: %d prompt tokens, %d generated in %.2f s (%.1f tokens/s, %s%s)\n", n, made,
            secs, secs > 0 ? made / secs : 0.0, k->name, o.no_cache ? ", no cache" : "");
    merak_sampler_free(s);
    merak_decoder_destroy(d);
    merak_graph_destroy(g);
    merak_tokenizer_free(tok);
    free(prompt);
    return 0;
}
