/*
 * pipesvg.h - a pipeline drawn as an SVG picture, for merak-plan --svg
 * (a simulated step) and merak-trace --svg (a measured one): one row per
 * stage or rank, time left to right, one box per instruction coloured by
 * kind, and the grey background showing through where a row idles.
 * Communication (waits and collectives) is a thin strip along the bottom
 * of its row, under the compute it overlaps.
 */
#ifndef MERAK_PIPESVG_H
#define MERAK_PIPESVG_H

#include <stddef.h>

#include "pipe/trace.h"

/* Writes the picture of the events of p (row: their lane; rows [0,
 * nrows)) over times [t0, t0 + span) to PATH (atomically).  labels[row]
 * names a row (NULL: "stage N"); unit names the time unit on the axis (""
 * for abstract units).  0, or -1 with err naming PATH (or saying that
 * events were lost). */
int pipesvg_write(const merak_trace *p, const char *path, const char *title, int nrows,
                  const char *const *labels, double t0, double span, const char *unit, char *err,
                  size_t errlen);

#endif /* MERAK_PIPESVG_H */
