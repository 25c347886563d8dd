/*
 * fuzz_config.c - libFuzzer target: any bytes as a Hugging Face
 * config.json.  A config that loads and passes its check must come back
 * the same from the config.json Merak writes for it (checkpoints carry
 * that file).
 */
#include "memfile.h" /* first: it asks for _GNU_SOURCE */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "merak/merak.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    merak_model_config a, b;
    if (merak_model_config_load(fuzz_file(data, size), &a, err, sizeof err) < 0 ||
        merak_model_config_check(&a, err, sizeof err) < 0)
        return 0;
    char *text = merak_model_config_json(&a);
    if (!text)
        abort();
    if (merak_model_config_load(fuzz_file((const uint8_t *)text, strlen(text)), &b, err, sizeof err) < 0)
        abort();   /* what Merak writes, it reads */
    if (a.arch != b.arch || a.vocab_size != b.vocab_size || a.max_positions != b.max_positions ||
        a.hidden != b.hidden || a.n_layer != b.n_layer || a.n_head != b.n_head || a.n_kv_head != b.n_kv_head ||
        a.ffn_hidden != b.ffn_hidden || a.tie_embeddings != b.tie_embeddings || a.norm_eps != b.norm_eps ||
        a.rope_theta != b.rope_theta || a.init_std != b.init_std || a.dropout != b.dropout ||
        a.rope_type != b.rope_type || a.rope_factor != b.rope_factor ||
        a.rope_low_freq_factor != b.rope_low_freq_factor || a.rope_high_freq_factor != b.rope_high_freq_factor ||
        a.rope_original_positions != b.rope_original_positions || a.qkv_bias != b.qkv_bias)
        abort();   /* and it is the same model */
    free(text);
    return 0;
}
