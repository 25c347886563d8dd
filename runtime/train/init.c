/*
 * init.c - deterministic, layout-independent parameter initialisation.
 *
 * A normal draw for element i of parameter P comes from two counter-based
 * uniforms (splitmix64 of a key derived from the seed and P's name, at
 * counters 2i and 2i+1) through Box-Muller.  No generator state is carried
 * from one element to the next, so a tensor-parallel shard or a pipeline
 * stage generates exactly the elements a single process would.
 */
#include <math.h>
#include <string.h>

#include "train.h"

static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return mix64(seed ^ mix64(h));
}

/* Uniform in (0, 1]: 53 random bits, never 0 so log() is finite. */
static double uniform(uint64_t key, uint64_t counter)
{
    return ((double)(mix64(key ^ mix64(counter)) >> 11) + 1.0) * 0x1.0p-53;
}

void merak_init_fill(const merak_tensor *t, uint64_t seed, int64_t first, int64_t count,
                     float *dst)
{
    switch (t->init.kind) {
    case MERAK_INIT_ZEROS:
        memset(dst, 0, (size_t)count * sizeof *dst);
        return;
    case MERAK_INIT_ONES:
        for (int64_t i = 0; i < count; i++)
            dst[i] = 1.0f;
        return;
    case MERAK_INIT_NORMAL: {
        uint64_t key = name_key(seed, t->name);
        for (int64_t i = 0; i < count; i++) {
            uint64_t c = 2 * (uint64_t)(first + i);
            double u1 = uniform(key, c), u2 = uniform(key, c + 1);
            double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
            dst[i] = (float)(z * t->init.std);
        }
        return;
    }
    }
}

typedef struct fill_ctx {
    const merak_tensor *t;
    uint64_t seed;
    float *dst;
} fill_ctx;

static void fill_run(void *ctx, int64_t local, int64_t global, int64_t n)
{
    fill_ctx *c = ctx;
    merak_init_fill(c->t, c->seed, global, n, c->dst + local);
}

void merak_init_params(const merak_graph *g, merak_exec *e, uint64_t seed)
{
    for (int i = 0; i < merak_exec_num_params(e); i++) {
        fill_ctx c = {&g->tensors[merak_exec_param_tensor(e, i)], seed, merak_exec_param_data(e, i)};
        merak_shard_runs(c.t, fill_run, &c);  /* a shard: its elements of the whole tensor */
    }
}
