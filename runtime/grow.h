/* grow.h - the runtime's growable arrays: one helper for every buffer that
 * grows as it fills (tokenizer, checkpoint reader, merak-shard). */
#ifndef MERAK_GROW_H
#define MERAK_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* Makes *p (an array of elem-byte items, *cap of them allocated) hold at
 * least need items (realloc: what it held stays): twice what it had, at
 * least 64, or need itself when that is more, so appends cost amortised
 * O(1) and a buffer sized once for a large tensor is not rounded up.
 * 0, or -1 out of memory (*p and *cap unchanged). */
static inline int merak_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? (*cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * *cap) : 64;
    if (c < need || c > SIZE_MAX / elem)
        c = need;
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
