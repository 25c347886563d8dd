/*
 * pipeline.h - training on a dp x pp grid: every rank runs its stage of the
 * graph by its schedule's instruction list (see pipeline.c).
 */
#ifndef MERAK_PIPELINE_H
#define MERAK_PIPELINE_H

#include <stddef.h>

#include "comm/comm.h"
#include "merak/merak.h"

/* Trains g on comm's grid.  Every rank returns the same value: the steps run,
 * or -1 with the same one-line message in err. */
int merak_train_pipeline(merak_comm *comm, const merak_graph *g, const merak_args *a,
                         char *err, size_t errlen);

#endif
