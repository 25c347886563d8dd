/* errf.h - the runtime's one way to report an error: one line into the
 * caller's buffer.  Nothing in the library prints. */
#ifndef MERAK_ERRF_H
#define MERAK_ERRF_H

#include <stddef.h>

/* Formats into err (if err and errlen are non-zero) and returns -1. */
int merak_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
