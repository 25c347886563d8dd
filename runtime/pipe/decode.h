/*
 * decode.h - runs a model graph for text generation: each call feeds new
 * token positions only, and the keys and values of the earlier positions
 * stay in a cache (one per attention op), so a new token costs one
 * position, not the whole sequence.
 *
 * The graph is a whole model (no tensor-parallel ops) whose loss is a
 * cross-entropy over logits (.., V): the decoder runs every op but the
 * loss, in evaluation mode (dropout keeps every value), and hands out the
 * logits of the last position fed.  It reads only the graph's ops and
 * widths: every activation is a set of rows of its last dimension's width,
 * whatever B and T the graph was built for.  A feed of more positions than
 * a piece holds runs in pieces, in order.
 *
 * Memory (the backend's alloc, at creation): the parameters, a key and a
 * value cache of ctx positions per attention op, and one piece's rows of
 * every activation.
 */
#ifndef MERAK_DECODE_H
#define MERAK_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "merak/merak.h"

typedef struct merak_decoder merak_decoder;

/* A decoder for up to ctx positions (ctx >= 1; at most the rows of a
 * learned position table).  NULL with one line in err when the graph has
 * an op the decoder does not run or memory runs out. */
merak_decoder *merak_decoder_create(const merak_graph *g, const merak_kernels *k, int ctx,
                                    char *err, size_t errlen);
void merak_decoder_destroy(merak_decoder *d);

const merak_kernels *merak_decoder_kernels(const merak_decoder *d);
int merak_decoder_ctx(const merak_decoder *d);
int merak_decoder_vocab(const merak_decoder *d);   /* logits per position */

/* Distinct parameters (ties followed): graph tensor id of the i-th, and
 * its values from host memory (its elements, graph layout); 0 or -1. */
int merak_decoder_num_params(const merak_decoder *d);
int merak_decoder_param_tensor(const merak_decoder *d, int i);
int merak_decoder_param_write(merak_decoder *d, int i, const float *host);

/* Forgets every position: the next feed starts at position 0. */
void merak_decoder_reset(merak_decoder *d);
/* Positions fed since the last reset. */
int merak_decoder_pos(const merak_decoder *d);

/* Feeds n >= 1 tokens at positions pos, pos+1, ... and writes the logits
 * of the last (vocab floats) to host memory.  0, or -1 with one line in
 * err: a token outside the vocabulary, more positions than ctx, a failed
 * copy. */
int merak_decoder_feed(merak_decoder *d, const int32_t *ids, int n, float *logits, char *err,
                       size_t errlen);

#endif /* MERAK_DECODE_H */
