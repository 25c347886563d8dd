/*
 * memcount.c - the allocation registry of memcount.h.  A backend holds a
 * few dozen buffers at once (the executor's, the optimizer's), so a list
 * searched from its newest entry is enough.
 */
#include "memcount.h"

#include <stdlib.h>

int merak_memcount_add(merak_memcount *c, void *p, size_t bytes)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        void **ptr = realloc(c->ptr, cap * sizeof *ptr);
        if (ptr)
            c->ptr = ptr;
        size_t *by = ptr ? realloc(c->bytes, cap * sizeof *by) : NULL;
        if (by)
            c->bytes = by, c->cap = cap;
        else
            rc = -1;
    }
    if (rc == 0) {
        c->ptr[c->n] = p;
        c->bytes[c->n++] = bytes;
        c->in_use += bytes;
        if (c->in_use > c->peak)
            c->peak = c->in_use;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void merak_memcount_remove(merak_memcount *c, void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&c->lock);
    for (size_t i = c->n; i-- > 0;)
        if (c->ptr[i] == p) {
            c->in_use -= c->bytes[i];
            c->ptr[i] = c->ptr[--c->n];
            c->bytes[i] = c->bytes[c->n];
            break;
        }
    pthread_mutex_unlock(&c->lock);
}

void merak_memcount_get(merak_memcount *c, size_t *in_use, size_t *peak)
{
    pthread_mutex_lock(&c->lock);
    *in_use = c->in_use;
    *peak = c->peak;
    pthread_mutex_unlock(&c->lock);
}
