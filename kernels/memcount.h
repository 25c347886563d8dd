/*
 * memcount.h - what a backend's alloc has handed out and not taken back:
 * the bytes in use and the most at once, so a run reports the memory it
 * really allocated (merak_kernels.memory) and the planner's model can be
 * checked against it.  One registry per backend, safe across threads.
 */
#ifndef MERAK_MEMCOUNT_H
#define MERAK_MEMCOUNT_H

#include <pthread.h>
#include <stddef.h>

typedef struct merak_memcount {
    pthread_mutex_t lock;
    void **ptr;
    size_t *bytes;
    size_t n, cap;
    size_t in_use, peak;
} merak_memcount;

#define MERAK_MEMCOUNT_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0, 0}

/* Records that p holds `bytes`; 0, or -1 out of memory (p is then not
 * counted and the caller should free it and fail). */
int merak_memcount_add(merak_memcount *c, void *p, size_t bytes);
/* Forgets p (NULL or an unknown pointer: nothing). */
void merak_memcount_remove(merak_memcount *c, void *p);
void merak_memcount_get(merak_memcount *c, size_t *in_use, size_t *peak);

#endif /* MERAK_MEMCOUNT_H */
