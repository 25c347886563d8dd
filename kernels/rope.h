/*
 * rope.h - RoPE's inverse frequencies, one function for the CPU and CUDA
 * kernels, computed in float as the Hugging Face library computes them
 * (and in double for the CPU's double-precision table):
 *   inv_freq[j] = 1 / theta^(2j/hd), j < hd/2, then by r->type
 *   LINEAR:  inv_freq / factor
 *   LLAMA3:  with wavelen = 2 pi / inv_freq, lo = original / low_freq_factor
 *            and hi = original / high_freq_factor: inv_freq / factor where
 *            wavelen > lo, inv_freq where wavelen < hi, between them
 *            (1 - s) inv_freq / factor + s inv_freq with
 *            s = (original / wavelen - low_freq_factor) / (high - low)
 *   DYNAMIC: theta was already grown for the sequence (merak_rope_resolve
 *            in the graph), so as DEFAULT.
 */
#ifndef MERAK_KERNELS_ROPE_H
#define MERAK_KERNELS_ROPE_H

#include "merak/rope.h"

#include <math.h>

#ifdef __CUDACC__
#define MERAK_ROPE_FN static __host__ __device__ __forceinline__
#else
#define MERAK_ROPE_FN static inline
#endif

/* The function, written once over its type R (POW: R's pow). */
#define MERAK_ROPE_INV_FREQ(NAME, R, POW)                                                           \
    MERAK_ROPE_FN R NAME(const merak_rope *r, int j, int hd)                                        \
    {                                                                                               \
        const R inv = (R)1 / POW((R)r->theta, (R)(2 * j) / (R)hd);                                  \
        if (r->type == MERAK_ROPE_LINEAR)                                                           \
            return inv / (R)r->factor;                                                              \
        if (r->type != MERAK_ROPE_LLAMA3)                                                           \
            return inv;                                                                             \
        const R original = (R)r->original_max_positions;                                            \
        const R lo = original / (R)r->low_freq_factor, hi = original / (R)r->high_freq_factor;      \
        const R wavelen = (R)6.283185307179586 / inv;                                               \
        if (wavelen > lo)                                                                           \
            return inv / (R)r->factor;                                                              \
        if (wavelen < hi)                                                                           \
            return inv;                                                                             \
        const R s = (original / wavelen - (R)r->low_freq_factor) /                                  \
                    ((R)r->high_freq_factor - (R)r->low_freq_factor);                               \
        return ((R)1 - s) * inv / (R)r->factor + s * inv;                                           \
    }

/* float, as Hugging Face and the GPU compute it; double for the CPU
 * backend's double-precision table (gradient checks). */
MERAK_ROPE_INV_FREQ(merak_rope_inv_freq, float, powf)
#ifndef __CUDACC__
MERAK_ROPE_INV_FREQ(merak_rope_inv_freq_f64, double, pow)
#endif

#endif /* MERAK_KERNELS_ROPE_H */
