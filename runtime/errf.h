/* errf.h - the runtime's one way to report an error: merak_errf, one line
 * into the caller's buffer.  Nothing in the library prints.  The formatter
 * is topo's (runtime -> topo), shared with libmerak-topo and the plugin. */
#ifndef MERAK_RUNTIME_ERRF_H
#define MERAK_RUNTIME_ERRF_H

#include "../topo/errf.h" /* merak_errf */

#endif
