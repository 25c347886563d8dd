/*
 * mix64.h - the one 64-bit mixing function of Merak: splitmix64's finalizer
 * and its increment.  Counter-based randomness everywhere derives from it:
 * parameter initialisation, dropout seeds of micro-batches and ops, and the
 * dropout mask itself (CPU and CUDA, bit for bit), so results do not depend
 * on the layout, the thread count or the device.
 *
 * Header-only so host C and CUDA device code share the one definition.
 */
#ifndef MERAK_MIX64_H
#define MERAK_MIX64_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MERAK_HOST_DEVICE __host__ __device__
#else
#define MERAK_HOST_DEVICE
#endif

/* splitmix64's increment (2^64 / golden ratio) */
#define MERAK_GOLDEN 0x9E3779B97F4A7C15ULL

static inline MERAK_HOST_DEVICE uint64_t merak_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* FNV-1a over n bytes: turns a name (a parameter's, a token's text) into
 * 64 bits, which merak_mix64 then spreads (initialisation keys) or a hash
 * table indexes (the tokenizer's).  A hash that grows a byte at a time
 * starts at MERAK_FNV1A_BASIS and takes each byte with merak_fnv1a_step. */
#define MERAK_FNV1A_BASIS 1469598103934665603ull
static inline uint64_t merak_fnv1a_step(uint64_t h, unsigned char c) { return (h ^ c) * 1099511628211ull; }

static inline uint64_t merak_fnv1a(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = MERAK_FNV1A_BASIS;
    for (size_t i = 0; i < n; i++)
        h = merak_fnv1a_step(h, b[i]);
    return h;
}

#endif /* MERAK_MIX64_H */
