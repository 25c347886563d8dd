/*
 * cpu_kernels.h - the CPU backend beyond what kernels.h declares.
 *
 * The CPU kernels are written once (cpu_ops_impl.h) and instantiated for
 * float (merak_kernels_cpu(), the table the runtime uses) and for double
 * (merak_kernels_cpu_f64(), for gradient checks against finite differences).
 */
#ifndef MERAK_CPU_KERNELS_H
#define MERAK_CPU_KERNELS_H

#include "../kernels.h"

/* The same table as merak_kernels, over double. */
typedef struct merak_kernels_f64 {
    const char *name; /* "cpu_f64" */
    MERAK_KERNEL_TABLE(double)
} merak_kernels_f64;

/* The double-precision CPU table.  Never NULL. */
const merak_kernels_f64 *merak_kernels_cpu_f64(void);

/*
 * The dropout mask, shared by both tables (and to be reproduced bit for bit
 * by any other backend): element i of a call with seed s is kept iff
 *
 *     key = mix64(s + GOLDEN)
 *     z   = mix64(key + (i + 1) * GOLDEN)          (uint64 arithmetic)
 *     u   = (float)(z >> 40) * 2^-24               (uniform in [0, 1))
 *     keep = u >= p
 *
 * where GOLDEN and mix64 are MERAK_GOLDEN and merak_mix64 (kernels/mix64.h,
 * splitmix64's increment and finalizer).  Kept elements are scaled by 1/(1-p).
 */
uint64_t merak_dropout_key(uint64_t seed);
float merak_dropout_uniform(uint64_t key, uint64_t i);

#endif /* MERAK_CPU_KERNELS_H */
