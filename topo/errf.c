/* errf.c - see errf.h. */
#include "errf.h"

#include <errno.h>  /* errno */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* vsnprintf */

int merak_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        int saved = errno; /* vsnprintf may set it */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        errno = saved;
    }
    return -1;
}
