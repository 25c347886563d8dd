/*
 * fuzz_tp_rules.c - libFuzzer target: any bytes as a tensor-parallel rules
 * file (--tp-rules).  Rules that parse and pass the check against tiny
 * GPT-2 are applied: the model is split for tp = 2 (or the split refused
 * with a message), never a crash.
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>

#include "graph/graph.h"
#include "merak/merak.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static merak_graph *g;
    char err[512];
    if (!g) {
        merak_model_config cfg;
        if (merak_model_preset("tiny-gpt2", &cfg) < 0 || !(g = merak_model_build(&cfg, 2, 8, err, sizeof err)))
            abort();
    }
    merak_tp_rule *rules = NULL;
    int n = 0;
    const char *path = fuzz_file(data, size);
    if (merak_tp_rules_load(g, path, &rules, &n, err, sizeof err) == 0) {
        merak_graph *s = merak_graph_shard(g, 2, 1, rules, n, err, sizeof err);
        if (!s && !err[0])
            abort();   /* a refusal says why */
        merak_graph_destroy(s);
    }
    free(rules);
    return 0;
}
