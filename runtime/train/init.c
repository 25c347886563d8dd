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
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "mix64.h"
#include "train.h"

/* splitmix64: the finalizer of the next counter value */
static uint64_t mix64(uint64_t z) { return merak_mix64(z + MERAK_GOLDEN); }

static uint64_t name_key(uint64_t seed, const char *name)
{
    return mix64(seed ^ mix64(merak_fnv1a(name, strlen(name))));
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

int merak_init_params(const merak_graph *g, merak_exec *e, uint64_t seed, char *err,
                      size_t errlen)
{
    size_t most = 0;
    for (int i = 0; i < merak_exec_num_params(e); i++)
        if (merak_exec_param_elems(e, i) > most)
            most = merak_exec_param_elems(e, i);
    float *host = malloc((most ? most : 1) * sizeof *host);
    if (!host)
        return merak_errf(err, errlen, "out of memory initialising the parameters");
    int rc = 0;
    for (int i = 0; i < merak_exec_num_params(e) && rc == 0; i++) {
        fill_ctx c = {&g->tensors[merak_exec_param_tensor(e, i)], seed, host};
        merak_shard_runs(c.t, fill_run, &c);  /* a shard: its elements of the whole tensor */
        if (merak_exec_param_write(e, i, host) < 0)
            rc = merak_errf(err, errlen, "copying parameter '%s' to the %s backend failed",
                            c.t->name, merak_exec_kernels(e)->name);
    }
    free(host);
    return rc;
}
