/*
 * internal.h - what merak's own tools (tools/) use beyond the public API
 * (include/merak/merak.h): the one internal header they include.
 *
 * Not installed and not a stable interface.  The tools and the tests link
 * libmerak-core, the convenience library the shared libmerak is made of;
 * libmerak itself exports only the public API (Makefile.am, libmerak.sym),
 * so a program outside this tree sees merak.h and nothing else.
 *
 *   file.h            paths: outputs never overwrite inputs
 *   clock.h, grow.h   a monotonic clock; growable arrays
 *   atomic.h          files written whole or not at all
 *   train.h           the step loop's pieces: metrics, weights, safetensors
 *   ckpt.h            checkpoints: open, export (merak-ckpt)
 *   data.h            token shards (merak-shard)
 *   tokenizer.h       tokenizers (merak-shard, merak-generate)
 *   generate.h        sampling with a key/value cache (merak-generate)
 *   graph/graph.h     the graph's tensors (merak-ckpt's export)
 *   pipe/schedule.h   schedules and the simulator (merak-plan, merak-trace)
 *   pipe/stage.h      MERAK_BF16_STORAGE (merak-plan)
 *   pipe/trace.h      timelines (merak-trace)
 *   plan/auto.h, cost.h, layout.h, partition.h
 *                     costs, partitions, layouts and the --auto search (merak-plan)
 */
#ifndef MERAK_INTERNAL_H
#define MERAK_INTERNAL_H

#include "merak/merak.h"

#include "atomic.h"
#include "ckpt.h"
#include "clock.h"
#include "data.h"
#include "file.h"
#include "generate.h"
#include "graph/graph.h"
#include "grow.h"
#include "pipe/schedule.h"
#include "pipe/stage.h"
#include "pipe/trace.h"
#include "plan/auto.h"
#include "plan/cost.h"
#include "plan/layout.h"
#include "plan/partition.h"
#include "tokenizer.h"
#include "train.h"

#endif /* MERAK_INTERNAL_H */
