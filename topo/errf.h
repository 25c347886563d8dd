/* errf.h - the one way Merak's libraries report an error: one line into the
 * caller's buffer and -1 back.  Nothing in a library prints.
 *
 * It lives in topo/, the lowest layer that needs it (runtime -> topo,
 * spank -> topo; topo depends on nothing of Merak's).  libmerak-topo and
 * the SPANK plugin get it from libmerak-topo-core; libmerak compiles the
 * same file.  Hidden: no library exports it. */
#ifndef MERAK_ERRF_H
#define MERAK_ERRF_H

#include <stddef.h> /* size_t */

/* Formats into err (if err and errlen are non-zero) and returns -1.  errno
 * is left as it was, so a caller may read it after or set it (topo_errf). */
__attribute__((visibility("hidden"), format(printf, 3, 4)))
int merak_errf(char *err, size_t errlen, const char *fmt, ...);

#endif
