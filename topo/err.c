/* err.c - topo/'s one way to report an error: one line into the caller's
 * buffer, errno set, -1 returned.  Nothing in the library prints. */
#include "topo_internal.h"

#include <errno.h>  /* errno */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* vsnprintf */

int topo_errf(char *err, size_t errlen, int errnum, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    errno = errnum;
    return -1;
}
