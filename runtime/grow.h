/* grow.h - the runtime's growable arrays: one helper for every buffer that
 * grows as it fills (tokenizer, checkpoint reader, merak-shard). */
#ifndef MERAK_GROW_H
#define MERAK_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Makes *p (an array of elem-byte items, *cap of them allocated) hold at
 * least need items, doubling from 64 (realloc: what it held stays).
 * 0, or -1 out of memory (*p and *cap unchanged). */
static inline int merak_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return -1;
        c *= 2;
    }
    if (c > SIZE_MAX / elem)
        return -1;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

#endif /* MERAK_GROW_H */
