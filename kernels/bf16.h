/*
 * bf16.h - bfloat16, the one definition: float32 to bfloat16 rounded to
 * nearest, ties to even (what a GPU's __float2bfloat16_rn and PyTorch's
 * .to(torch.bfloat16) do), and back.  --save-dtype bf16 writes these
 * values; --dtype bf16 rounds activations to them (the CPU backend's
 * emulation keeps them in float storage: a bf16 value is a float whose
 * low 16 bits are zero).
 *
 * Header-only so host C and CUDA device code share the one definition.
 */
#ifndef MERAK_BF16_H
#define MERAK_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MERAK_BF16_FN static inline __host__ __device__
#else
#define MERAK_BF16_FN static inline
#endif

/* x rounded to bfloat16 (to nearest, ties to even; a nan stays a quiet
 * nan, a value past bfloat16's range becomes an infinity). */
MERAK_BF16_FN uint16_t merak_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* bfloat16 is the top half of a float32: exact for every value. */
MERAK_BF16_FN float merak_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to the nearest bfloat16 value, as a float. */
MERAK_BF16_FN float merak_bf16_round(float x) { return merak_bf16_to_f32(merak_f32_to_bf16(x)); }

#endif /* MERAK_BF16_H */
