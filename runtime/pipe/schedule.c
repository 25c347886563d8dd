/*
 * schedule.c - pipeline schedule generators (gpipe, 1f1b, scp, zb-h1,
 * interleaved) and the simulator that checks and times any set of
 * per-stage instruction lists (DESIGN.md s. 7).
 *
 * Generators.  Every schedule is built the same way: first the order of
 * the stage's compute (forwards and backwards per micro-batch, see
 * compute_order), then the communication and recomputation around it by
 * fixed rules:
 *
 *   - LOAD on the first and the last stage, just before the forward;
 *   - RECV_ACT posted early: the receive of micro-batch k+1 is posted before
 *     waiting for k (so it overlaps FWD k), if k+1's slot is free by then;
 *     otherwise right after the backward that frees the slot;
 *   - WAIT_ACT right before FWD, WAIT_GRAD right before the backward (BWD,
 *     or BWD_INPUT when it is split; BWD_WEIGHT needs no message);
 *   - SEND_ACT right after FWD, then the gradient receives that are due,
 *     in the order the next stage will send them (its backwards' order):
 *     that of the micro-batch just forwarded, unless (interleaved: the
 *     backwards take the chunks in reverse) an earlier one of that order
 *     is still to be forwarded.  A gradient receive is never posted before
 *     its forward, because the executor's forward zeroes the slot's
 *     gradient buffers;
 *   - SEND_GRAD right after the backward (its input part);
 *   - on a recomputing stage, RECOMPUTE right after WAIT_GRAD (gpipe, 1f1b,
 *     zb-h1: the recompute is part of the backward, as in Megatron-LM), or
 *     right before it (scp: the recompute fills the wait for the gradient,
 *     and since it needs nothing from the wait, it never starts later).
 *
 * Slots.  Micro-batch mb on chunk c uses slot base(c) + mb % n(c), n(c)
 * being the most of the chunk's micro-batches forwarded and not yet fully
 * backwarded at once (without chunks: slot mb % nslots).  Every compute
 * order forwards each chunk's micro-batches in order and finishes their
 * backwards in order, so the micro-batches holding a chunk's slots are a
 * window of consecutive ids and mb % n(c) never collides.  The simulator
 * re-checks this for every list.
 *
 * Units.  The generator and the simulator track micro-batch mb on chunk c
 * as unit c*M + mb; a message goes from a unit to the same unit on the
 * next stage, or from the last stage's chunk c to the first stage's chunk
 * c+1 (and gradients back the same way).
 *
 * WAIT_SENDS rule.  A posted send reads its micro-batch's slot until it is
 * waited for.  Before the first instruction that writes into a slot for a new
 * micro-batch (its RECV_ACT, LOAD or FWD, whichever comes first) the
 * generator emits WAIT_SENDS of the previous occupant (the instruction
 * carries that micro-batch and slot, and waits for its sends only) if it
 * has a send not waited for yet; and a WAIT_SENDS of everything at the end,
 * before REDUCE_TIED.  Nothing else waits early: a micro-batch's own later
 * writes (RECV_GRAD, RECOMPUTE and the backward write gradient buffers and
 * dropped activations) never touch what its SEND_ACT reads.  The wait does
 * not stall: by the time a slot is reused, stage-1 has long posted the
 * receive of the old occupant's gradient and stage+1 the receive of its
 * activation (it did so before sending back that micro-batch's gradient,
 * which the backward that freed the slot used).  gpipe never reuses a
 * slot, so it waits only at the end.
 *
 * Backwards run in the order of the forwards (0..M-1) on every stage, so
 * gradients travel in the same order as activations (the interleaved
 * schedule's backwards take the chunks in reverse).  On every link (one
 * stage to the next for activations, back for gradients) the receives are
 * posted in the order the sender posts its sends, so a transport that
 * matches messages by order alone, without tags (NCCL's send and
 * receive), pairs them as tags do; test_schedule checks it for every
 * schedule.  The simulator checks that each receive is for the
 * micro-batch it expects.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "schedule.h"

static const char *const instr_names[MERAK_I_COUNT_] = {
    [MERAK_I_LOAD] = "LOAD",
    [MERAK_I_RECV_ACT] = "RECV_ACT",
    [MERAK_I_WAIT_ACT] = "WAIT_ACT",
    [MERAK_I_FWD] = "FWD",
    [MERAK_I_SEND_ACT] = "SEND_ACT",
    [MERAK_I_RECV_GRAD] = "RECV_GRAD",
    [MERAK_I_WAIT_GRAD] = "WAIT_GRAD",
    [MERAK_I_RECOMPUTE] = "RECOMPUTE",
    [MERAK_I_BWD] = "BWD",
    [MERAK_I_BWD_INPUT] = "BWD_INPUT",
    [MERAK_I_BWD_WEIGHT] = "BWD_WEIGHT",
    [MERAK_I_SEND_GRAD] = "SEND_GRAD",
    [MERAK_I_WAIT_SENDS] = "WAIT_SENDS",
    [MERAK_I_REDUCE_TIED] = "REDUCE_TIED",
    [MERAK_I_REDUCE_DP] = "REDUCE_DP",
    [MERAK_I_OPTIMIZER_STEP] = "OPTIMIZER_STEP",
};

const char *merak_instr_name(merak_instr_kind k)
{
    if ((int)k < 0 || k >= MERAK_I_COUNT_)
        return "?";
    return instr_names[k];
}

/* Instructions that carry a micro-batch (and its slot). */
static int has_mb(merak_instr_kind k) { return k <= MERAK_I_SEND_GRAD; }

int merak_schedule_check(const merak_schedule_spec *sp, char *err, size_t errlen)
{
    const int S = sp->stages, M = sp->micro_batches;
    const int V = sp->virtual_stages > 0 ? sp->virtual_stages : 1;
    if ((int)sp->kind < 0 || (int)sp->kind >= MERAK_SCHEDULE_COUNT_)
        return merak_errf(err, errlen, "schedule: unknown schedule kind %d", (int)sp->kind);
    if (S < 1)
        return merak_errf(err, errlen, "schedule: %d pipeline stages (need at least 1)", S);
    if (M < 1)
        return merak_errf(err, errlen, "schedule: %d micro-batches (need at least 1)", M);
    if (sp->kind != MERAK_SCHEDULE_GPIPE && M < S)
        return merak_errf(err, errlen,
                          "schedule: %s needs at least as many micro-batches (M) as stages (S): "
                          "M = %d, S = %d", merak_schedule_name(sp->kind), M, S);
    if (sp->kind == MERAK_SCHEDULE_INTERLEAVED) {
        if (S < 2)
            return merak_errf(err, errlen, "schedule: interleaved needs at least 2 pipeline stages (S = %d)", S);
        if (V < 2 || V > MERAK_MAX_CHUNKS)
            return merak_errf(err, errlen, "schedule: interleaved needs 2 to %d virtual stages per stage (V = %d)",
                              MERAK_MAX_CHUNKS, V);
    } else if (V != 1) {
        return merak_errf(err, errlen, "schedule: %d virtual stages need the interleaved schedule (not %s)", V,
                          merak_schedule_name(sp->kind));
    }
    if ((size_t)M * (size_t)V > 1u << 24)
        return merak_errf(err, errlen, "schedule: %d micro-batches x %d virtual stages is too many", M, V);
    return 0;
}

/* ------------------------------------------------------------------ generator
 *
 * A list is made in two passes.  First the order of the stage's compute:
 * forwards (F), whole backwards (B), or split ones (BI, the input-gradient
 * part, and BW, the weight part), per unit (micro-batch mb on chunk c is
 * unit c*M + mb; without chunks, the micro-batch).  Then the communication
 * and recomputation around it by the rules in this file's header comment.
 */

typedef enum { C_F, C_B, C_BI, C_BW } cop;
typedef struct cstep {
    cop op;
    int u;
} cstep;

/* The k-th (chunk, micro-batch) of the interleaved order (forward, or
 * backward: chunks from the last) for a multiple of S micro-batches:
 * groups of S micro-batches through chunk 0, then chunk 1, ...  Returns
 * the micro-batch, *c the chunk. */
static int interleaved_unit(int k, int S, int V, int backward, int *c)
{
    int g = k / (S * V), r = k % (S * V);
    *c = backward ? V - 1 - r / S : r / S;
    return g * S + r % S;
}

/* Appends the k-th op of the interleaved order to c, unless its
 * micro-batch does not exist. */
static void interleaved_push(cstep *c, int *n, cop op, int k, int S, int V, int M)
{
    int chunk, mb = interleaved_unit(k, S, V, op != C_F, &chunk);
    if (mb < M)
        c[(*n)++] = (cstep){op, chunk * M + mb};
}

/* The compute order of stage s; returns its length (2MV or 3M). */
static int compute_order(merak_schedule_kind kind, int S, int s, int M, int V, cstep *c)
{
    int n = 0;
    if (kind == MERAK_SCHEDULE_GPIPE) {
        for (int k = 0; k < M; k++)
            c[n++] = (cstep){C_F, k};
        for (int k = 0; k < M; k++)
            c[n++] = (cstep){C_B, k};
        return n;
    }
    if (kind == MERAK_SCHEDULE_INTERLEAVED) {
        /* Megatron-LM's order for Mp, M rounded up to a multiple of S,
         * with the micro-batches past M left out: a subsequence of a
         * deadlock-free order on every stage, so itself deadlock-free (what
         * waited for what is unchanged).  Groups of S keep the last stage's
         * output in time for the first stage's next chunk; a smaller group
         * in the steady state would stall stage 0 on a forward while its
         * peers wait for its backward.  Warm-up of stage s: the chunk
         * forwards before its first backward's gradient can be back. */
        const int Mp = (M + S - 1) / S * S, total = Mp * V;
        int w = 2 * (S - s - 1) + (V - 1) * S;
        if (w > total)
            w = total;
        for (int k = 0; k < w; k++)
            interleaved_push(c, &n, C_F, k, S, V, M);
        for (int k = w; k < total; k++) {
            interleaved_push(c, &n, C_F, k, S, V, M);
            interleaved_push(c, &n, C_B, k - w, S, V, M);
        }
        for (int k = total - w; k < total; k++)
            interleaved_push(c, &n, C_B, k, S, V, M);
        return n;
    }
    /* w warm-up forwards, then one forward and one backward per step, then
     * the cool-down's backwards.  scp on stage S-2 (S >= 3) runs Merak's
     * extra warm-up forward: forward 2 before backward 0, then backwards 0
     * and 1 together, then 1f1b's steady state.  The last stage works on
     * micro-batch 0 while forward 2 runs, so forward 2 is off the critical
     * path there, and stage S-1 gets activation 2 (and so every later one)
     * one forward earlier: the step is one forward shorter than 1f1b's
     * order for every S >= 3 and M >= S at unit costs.  (Keeping the extra
     * micro-batch in flight through the steady state instead would make
     * stage S-2 wait for activation k+2 before it can send gradient k.) */
    int w = S - s - 1;
    if (kind == MERAK_SCHEDULE_SCP && S >= 3 && s == S - 2 && M >= 3) {
        c[n++] = (cstep){C_F, 0};
        c[n++] = (cstep){C_F, 1};
        c[n++] = (cstep){C_F, 2};
        c[n++] = (cstep){C_B, 0};
        c[n++] = (cstep){C_B, 1};
        for (int k = 3; k < M; k++) {
            c[n++] = (cstep){C_F, k};
            c[n++] = (cstep){C_B, k - 1};
        }
        c[n++] = (cstep){C_B, M - 1};
        return n;
    }
    if (kind != MERAK_SCHEDULE_ZB_H1) {
        for (int k = 0; k < w; k++)
            c[n++] = (cstep){C_F, k};
        for (int k = w; k < M; k++) {
            c[n++] = (cstep){C_F, k};
            c[n++] = (cstep){C_B, k - w};
        }
        for (int k = M - w; k < M; k++)
            c[n++] = (cstep){C_B, k};
        return n;
    }
    /* zb-h1: weight parts run oldest first and wait while fewer than s are
     * pending; in the cool-down each input part is followed by one weight
     * part (they fill the time the gradients take to come back), and the
     * rest come last.  In flight (forwarded, weight part not done): at most
     * w + 1 + s = S. */
    int wdone = 0, idone = 0;
    for (int k = 0; k < w; k++)
        c[n++] = (cstep){C_F, k};
    for (int k = w; k < M; k++) {
        c[n++] = (cstep){C_F, k};
        c[n++] = (cstep){C_BI, idone++};
        if (idone - wdone > s)
            c[n++] = (cstep){C_BW, wdone++};
    }
    while (idone < M) {
        c[n++] = (cstep){C_BI, idone++};
        if (idone - wdone > s)
            c[n++] = (cstep){C_BW, wdone++};
    }
    while (wdone < M)
        c[n++] = (cstep){C_BW, wdone++};
    return n;
}

/* Slots per chunk (most units of the chunk forwarded and not fully
 * backwarded at once) and recompute buffers (most units recomputed and not
 * fully backwarded, plus one while a forward runs) of a compute order. */
static void count_buffers(const cstep *c, int n, int M, int V, int recompute, int *slots, int *npool)
{
    int live[MERAK_MAX_CHUNKS] = {0}, held = 0;
    for (int v = 0; v < V; v++)
        slots[v] = 1;
    *npool = 0;
    for (int i = 0; i < n; i++) {
        int v = c[i].u / M;
        if (c[i].op == C_F) {
            if (++live[v] > slots[v])
                slots[v] = live[v];
            if (recompute && held + 1 > *npool)
                *npool = held + 1;
            continue;
        }
        if (c[i].op != C_BW && recompute && ++held > *npool)  /* B, BI: recomputed first */
            *npool = held;
        if (c[i].op != C_BI) {  /* B, BW: the unit is done */
            live[v]--;
            held -= recompute;
        }
    }
}

typedef struct gen {
    merak_schedule *s;
    int cap;
    int first, last;          /* stage role */
    int pre_recompute;        /* recompute before waiting for the gradient */
    const int *fwd;           /* the units in forward order */
    int next_fwd;             /* index into fwd of the next forward */
    int base[MERAK_MAX_CHUNKS]; /* first slot of each chunk */
    int *owner;               /* [nslots] unit that last claimed the slot, or -1 */
    unsigned char *done;      /* [units] backward emitted: its slot may be reused */
    unsigned char *posted;    /* [units] RECV_ACT emitted */
    unsigned char *unwaited;  /* [units] has a send not yet covered by a WAIT_SENDS */
    unsigned char *fwded;     /* [units] FWD emitted */
    const int *bwd;           /* the units in backward (input part) order */
    int nbwd, next_recv_grad; /* bwd[next_recv_grad]: the next gradient receive to post */
} gen;

static int unit_slot(const gen *g, int u)
{
    int M = g->s->micro_batches, c = u / M;
    return g->base[c] + u % M % g->s->chunk_slots[c];
}

/* The unit enters the pipeline here (the first stage's first chunk) or
 * leaves it (the last stage's last chunk). */
static int unit_first(const gen *g, int u) { return g->first && u < g->s->micro_batches; }
static int unit_last(const gen *g, int u)
{
    return g->last && u >= (g->s->chunks - 1) * g->s->micro_batches;
}

static void emit(gen *g, merak_instr_kind kind, int u)
{
    merak_schedule *s = g->s;
    /* cap is a proven bound (12 per unit + 4); see merak_schedule_build */
    if (s->n >= g->cap)
        abort();
    s->instr[s->n++] = u >= 0 ? (merak_instr){kind, u % s->micro_batches, unit_slot(g, u), u / s->micro_batches}
                              : (merak_instr){kind, -1, -1, 0};
}

/* WAIT_SENDS for unit u's sends, or (u = -1) for all of them. */
static void wait_sends(gen *g, int u)
{
    emit(g, MERAK_I_WAIT_SENDS, u);
    if (u >= 0)
        g->unwaited[u] = 0;
    else
        memset(g->unwaited, 0, (size_t)g->s->micro_batches * (size_t)g->s->chunks);
}

static int slot_free_for(const gen *g, int u)
{
    int j = g->owner[unit_slot(g, u)];
    return j < 0 || j == u || g->done[j];
}

/* First write of u into its slot: retire the previous occupant's sends. */
static void claim(gen *g, int u)
{
    int slot = unit_slot(g, u), j = g->owner[slot];
    if (j >= 0 && j != u && g->unwaited[j])
        wait_sends(g, j);
    g->owner[slot] = u;
}

/* Posts the receive of the k-th forward's activation if it is due and can. */
static void post_recv_act(gen *g, int k)
{
    if (k >= g->s->micro_batches * g->s->chunks)
        return;
    int u = g->fwd[k];
    if (unit_first(g, u) || g->posted[u] || !slot_free_for(g, u))
        return;
    claim(g, u);
    emit(g, MERAK_I_RECV_ACT, u);
    g->posted[u] = 1;
}

/* Posts the gradient receives that are due, in the order the next stage
 * sends them (its backwards' order, which is this stage's), each once its
 * unit's forward has run (the forward zeroes the gradient buffers the
 * receive writes).  The interleaved schedule's backwards run chunks in the
 * reverse order of its forwards, so its receives wait for the forward of
 * the unit whose gradient comes first. */
static void post_recv_grads(gen *g)
{
    for (; g->next_recv_grad < g->nbwd; g->next_recv_grad++) {
        const int u = g->bwd[g->next_recv_grad];
        if (unit_last(g, u))
            continue;   /* its gradient starts here: nothing to receive */
        if (!g->fwded[u])
            return;
        emit(g, MERAK_I_RECV_GRAD, u);
    }
}

/* The k-th forward. */
static void emit_fwd(gen *g, int k)
{
    int u = g->fwd[k];
    post_recv_act(g, k);  /* no-op if posted early; the slot is free by construction */
    if (unit_first(g, u) || unit_last(g, u)) {
        claim(g, u);
        emit(g, MERAK_I_LOAD, u);
    }
    g->next_fwd = k + 1;
    post_recv_act(g, k + 1);  /* overlaps our wait and this forward */
    if (!unit_first(g, u))
        emit(g, MERAK_I_WAIT_ACT, u);
    claim(g, u);
    emit(g, MERAK_I_FWD, u);
    if (!unit_last(g, u)) {
        emit(g, MERAK_I_SEND_ACT, u);
        g->unwaited[u] = 1;
    }
    g->fwded[u] = 1;
    post_recv_grads(g);
}

/* The input-gradient side of a backward (the whole of it for C_B). */
static void emit_bwd_input(gen *g, int u, merak_instr_kind kind)
{
    if (g->s->recompute && g->pre_recompute)
        emit(g, MERAK_I_RECOMPUTE, u);
    if (!unit_last(g, u))
        emit(g, MERAK_I_WAIT_GRAD, u);
    if (g->s->recompute && !g->pre_recompute)
        emit(g, MERAK_I_RECOMPUTE, u);
    emit(g, kind, u);
    if (!unit_first(g, u)) {
        emit(g, MERAK_I_SEND_GRAD, u);
        g->unwaited[u] = 1;
    }
}

/* The unit's backward is complete: its slot is free. */
static void bwd_done(gen *g, int u)
{
    g->done[u] = 1;
    post_recv_act(g, g->next_fwd);  /* the slot this backward freed */
}

int merak_instr_route(const merak_instr *in, int p, int S, int *peer, int *chunk)
{
    const int next = p + 1 < S ? p + 1 : 0, prev = p > 0 ? p - 1 : S - 1, c = in->chunk;
    switch (in->kind) {
    case MERAK_I_SEND_ACT: *peer = next, *chunk = p + 1 < S ? c : c + 1; return 1;
    case MERAK_I_RECV_GRAD: *peer = next, *chunk = c; return 0;
    case MERAK_I_RECV_ACT: *peer = prev, *chunk = c; return 0;
    case MERAK_I_SEND_GRAD: *peer = prev, *chunk = p > 0 ? c : c - 1; return 1;
    default: return -1;
    }
}

int merak_schedule_build(const merak_schedule_spec *sp, int stage, merak_schedule *out, char *err,
                         size_t errlen)
{
    const int S = sp->stages, M = sp->micro_batches;
    memset(out, 0, sizeof *out);
    if (merak_schedule_check(sp, err, errlen) < 0)
        return -1;
    if (stage < 0 || stage >= S)
        return merak_errf(err, errlen, "schedule: stage %d out of range 0..%d", stage, S - 1);
    const int V = sp->virtual_stages > 0 ? sp->virtual_stages : 1, U = M * V;

    out->stages = S;
    out->stage = stage;
    out->micro_batches = M;
    out->chunks = V;
    out->recompute = sp->recompute && sp->recompute[stage] &&
                     !(sp->kind == MERAK_SCHEDULE_SCP && stage == S - 1);

    gen g = {.s = out, .first = stage == 0, .last = stage == S - 1,
             .pre_recompute = sp->kind == MERAK_SCHEDULE_SCP};
    /* At most 12 instructions per unit (RECV_ACT LOAD WAIT_ACT FWD SEND_ACT
     * RECV_GRAD WAIT_GRAD RECOMPUTE BWD_INPUT BWD_WEIGHT SEND_GRAD and one
     * WAIT_SENDS before its slot is claimed) plus the final 4. */
    g.cap = 12 * U + 4;
    cstep *c = malloc((size_t)(3 * U) * sizeof *c);
    int *fwd = malloc((size_t)U * sizeof *fwd), *bwd = malloc((size_t)U * sizeof *bwd);
    out->instr = malloc((size_t)g.cap * sizeof *out->instr);
    g.done = calloc((size_t)U, 4);
    int nc = 0;
    if (c && fwd && bwd && out->instr && g.done) {
        nc = compute_order(sp->kind, S, stage, M, V, c);
        count_buffers(c, nc, M, V, out->recompute, out->chunk_slots, &out->npool);
        for (int v = 0; v < V; v++) {
            g.base[v] = out->nslots;
            out->nslots += out->chunk_slots[v];
        }
        g.owner = malloc((size_t)out->nslots * sizeof *g.owner);
    }
    if (!g.owner) {
        free(c), free(fwd), free(bwd), free(g.done);
        merak_schedule_free(out);
        return merak_errf(err, errlen, "schedule: out of memory");
    }
    g.posted = g.done + U;
    g.unwaited = g.done + 2 * U;
    g.fwded = g.done + 3 * U;
    for (int i = 0; i < out->nslots; i++)
        g.owner[i] = -1;
    for (int i = 0, k = 0; i < nc; i++)
        if (c[i].op == C_F)
            fwd[k++] = c[i].u;
        else if (c[i].op == C_B || c[i].op == C_BI)
            bwd[g.nbwd++] = c[i].u;
    g.fwd = fwd;
    g.bwd = bwd;

    for (int i = 0, k = 0; i < nc; i++) {
        switch (c[i].op) {
        case C_F: emit_fwd(&g, k++); break;
        case C_B:
            emit_bwd_input(&g, c[i].u, MERAK_I_BWD);
            bwd_done(&g, c[i].u);
            break;
        case C_BI: emit_bwd_input(&g, c[i].u, MERAK_I_BWD_INPUT); break;
        case C_BW:
            emit(&g, MERAK_I_BWD_WEIGHT, c[i].u);
            bwd_done(&g, c[i].u);
            break;
        }
    }
    wait_sends(&g, -1);
    emit(&g, MERAK_I_REDUCE_TIED, -1);
    emit(&g, MERAK_I_REDUCE_DP, -1);
    emit(&g, MERAK_I_OPTIMIZER_STEP, -1);

    free(c);
    free(fwd);
    free(bwd);
    free(g.owner);
    free(g.done);
    return 0;
}

int merak_schedule_build_eval(const merak_schedule *train, int M, merak_schedule *out, char *err,
                              size_t errlen)
{
    memset(out, 0, sizeof *out);
    const int S = train->stages, V = train->chunks, p = train->stage;
    if (V < 1 || V > MERAK_MAX_CHUNKS || train->nslots < V)
        return merak_errf(err, errlen, "schedule: the training list has %d chunks and %d slots", V, train->nslots);
    if (M < 1 || (size_t)M * (size_t)V > 1u << 24)   /* the simulator's bound */
        return merak_errf(err, errlen, "schedule: %d evaluation micro-batches of %d chunks", M, V);
    out->stages = S;
    out->stage = p;
    out->micro_batches = M;
    out->chunks = V;
    out->nslots = train->nslots;
    memcpy(out->chunk_slots, train->chunk_slots, sizeof out->chunk_slots);
    out->recompute = train->recompute;
    out->npool = train->npool;
    out->forward_only = 1;
    /* at most 7 per unit, and the last WAIT_SENDS */
    if (!(out->instr = malloc(((size_t)7 * (size_t)M * (size_t)V + 1) * sizeof *out->instr)))
        return merak_errf(err, errlen, "schedule: out of memory");
    int base[MERAK_MAX_CHUNKS];
    for (int c = 0, b = 0; c < V; b += train->chunk_slots[c++])
        base[c] = b;
    for (int mb = 0; mb < M; mb++)
        for (int c = 0; c < V; c++) {
            const int slot = base[c] + mb % train->chunk_slots[c];
            const int loads = (p == 0 && c == 0) || (p == S - 1 && c == V - 1);
            const int recv = p > 0 || c > 0, send = p < S - 1 || c < V - 1;
#define EVAL_EMIT(k) (out->instr[out->n++] = (merak_instr){(k), mb, slot, c})
            if (loads)
                EVAL_EMIT(MERAK_I_LOAD);
            if (recv) {
                EVAL_EMIT(MERAK_I_RECV_ACT);
                EVAL_EMIT(MERAK_I_WAIT_ACT);
            }
            EVAL_EMIT(MERAK_I_FWD);
            if (send) {
                EVAL_EMIT(MERAK_I_SEND_ACT);
                EVAL_EMIT(MERAK_I_WAIT_SENDS);
            }
#undef EVAL_EMIT
        }
    out->instr[out->n++] = (merak_instr){MERAK_I_WAIT_SENDS, -1, -1, 0};
    return 0;
}

int merak_schedule_check_all(const merak_schedule_spec *sp, char *err, size_t errlen)
{
    if (merak_schedule_check(sp, err, errlen) < 0)
        return -1;
    const size_t units = (size_t)sp->stages * (size_t)sp->micro_batches *
                         (size_t)(sp->virtual_stages > 0 ? sp->virtual_stages : 1);
    if (units > MERAK_SIM_MAX_UNITS)
        return merak_errf(err, errlen, "schedule: %d stages x %d micro-batches%s = %zu units, more than the %d every "
                          "stage's lists may hold together", sp->stages, sp->micro_batches,
                          sp->virtual_stages > 1 ? " x chunks" : "", units, MERAK_SIM_MAX_UNITS);
    return 0;
}

int merak_schedule_build_all(const merak_schedule_spec *sp, merak_schedule *out, char *err,
                             size_t errlen)
{
    if (merak_schedule_check_all(sp, err, errlen) < 0)
        return -1;
    for (int i = 0; i < sp->stages; i++)
        if (merak_schedule_build(sp, i, &out[i], err, errlen) < 0) {
            while (i-- > 0)
                merak_schedule_free(&out[i]);
            return -1;
        }
    return 0;
}

void merak_schedule_free(merak_schedule *s)
{
    if (!s)
        return;
    free(s->instr);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------ simulator
 *
 * All stages run their lists as concurrent processes in continuous time.
 * FWD, BWD, BWD_INPUT, BWD_WEIGHT and RECOMPUTE take their stage's costs;
 * everything else is instantaneous.  Messages are matched by (direction,
 * micro-batch) and arrive `comm` after they were posted; a WAIT blocks until
 * the matching message arrived.  Sends are either eager (complete at once)
 * or rendezvous (complete once the peer has posted the matching receive),
 * which only changes when WAIT_SENDS blocks.  Any send is "in flight" for
 * the slot-reuse check until a WAIT_SENDS, in both modes, because the
 * executor may only reuse a send buffer after waiting on it.  A
 * micro-batch holds its slot from its first write (LOAD, RECV_ACT or FWD)
 * until its backward is done.  Its full activations are held from FWD to
 * the end of its backward, or on a recomputing stage from RECOMPUTE to the
 * end of its backward and for the length of its FWD (peak, and the
 * recompute buffers).
 */

/* Per (stage, unit) progress flags. */
enum {
    F_LOADED = 1 << 0,
    F_RECV_ACT = 1 << 1,     /* activation receive posted */
    F_ACT_IN = 1 << 2,       /* ... and waited for */
    F_FWD = 1 << 3,
    F_SENT_ACT = 1 << 4,
    F_RECV_GRAD = 1 << 5,
    F_GRAD_IN = 1 << 6,
    F_BWD_IN = 1 << 7,       /* input gradient computed (BWD or BWD_INPUT) */
    F_BWD_W = 1 << 8,        /* weight gradient computed (BWD or BWD_WEIGHT) */
    F_BWD_FUSED = 1 << 9,    /* it was a BWD (not the split pair) */
    F_SENT_GRAD = 1 << 10,
    F_ACT_UNWAITED = 1 << 11, /* SEND_ACT posted, no WAIT_SENDS since */
    F_GRAD_UNWAITED = 1 << 12,
    F_RECOMPUTED = 1 << 13,
};

typedef struct simstage {
    const merak_schedule *s;
    merak_sim_costs c[MERAK_MAX_CHUNKS]; /* per chunk */
    int pc;
    double busy_until, busy;
    int live, peak;          /* micro-batches whose full activations are held */
    unsigned *st;            /* [U] flags per unit (micro-batch mb on chunk c: c*M + mb) */
    double *sent_act, *sent_grad; /* [U] when the send was posted */
    int *owner;              /* [nslots] unit holding the slot, or -1 */
} simstage;

typedef struct sim {
    simstage *st;
    int S, M, V, U;          /* stages, micro-batches, chunks per stage, M*V */
    int rendezvous;
    double wake;             /* earliest arrival a blocked wait waits for, or -1 */
    merak_sim_result *res;   /* where timings go (the reported run), or NULL */
    char *err;
    size_t errlen;
} sim;

/* An instruction's time. */
static double cost(const merak_sim_costs *c, merak_instr_kind k)
{
    switch (k) {
    case MERAK_I_FWD: return c->fwd;
    case MERAK_I_BWD: return c->bwd;
    case MERAK_I_BWD_INPUT: return c->bwd - c->bwd_weight;
    case MERAK_I_BWD_WEIGHT: return c->bwd_weight;
    case MERAK_I_RECOMPUTE: return c->recompute;
    default: return 0;
    }
}

/* Where unit u of stage i sends its activation (*j, return value: the
 * unit there) and its input gradient: the next and previous virtual
 * stage (the chunk after the last stage's is the first stage's next). */
static int unit_next(const sim *m, int i, int u, int *j)
{
    *j = i + 1 < m->S ? i + 1 : 0;
    return i + 1 < m->S ? u : u + m->M;
}
static int unit_prev(const sim *m, int i, int u, int *j)
{
    *j = i > 0 ? i - 1 : m->S - 1;
    return i > 0 ? u : u - m->M;
}
static int sim_first(const sim *m, int i, int u) { return i == 0 && u < m->M; }
static int sim_last(const sim *m, int i, int u) { return i == m->S - 1 && u >= m->U - m->M; }

static const char *mode_name(const sim *m) { return m->rendezvous ? "rendezvous" : "eager"; }

/* Error at stage i's current instruction. */
static int sfail(sim *m, int i, const char *what)
{
    const simstage *p = &m->st[i];
    const merak_instr *in = &p->s->instr[p->pc];
    if (m->V > 1)
        return merak_errf(m->err, m->errlen, "schedule (%s sends): stage %d, instruction %d (%s mb %d chunk %d): %s",
                          mode_name(m), i, p->pc, merak_instr_name(in->kind), in->mb, in->chunk, what);
    return merak_errf(m->err, m->errlen, "schedule (%s sends): stage %d, instruction %d (%s mb %d): %s",
                mode_name(m), i, p->pc, merak_instr_name(in->kind), in->mb, what);
}

/* Unit u writes into its slot: the slot must be free or already u's, and
 * no send of the previous occupant may still be reading it. */
static int occupy(sim *m, int i, int u, int slot)
{
    simstage *p = &m->st[i];
    int j = p->owner[slot];
    char why[128];
    if (j >= 0 && j != u) {
        if (!(p->st[j] & (p->s->forward_only ? F_FWD : F_BWD_W))) {
            snprintf(why, sizeof why, "slot %d still holds live mb %d (chunk %d)", slot, j % m->M, j / m->M);
            return sfail(m, i, why);
        }
        if (p->st[j] & (F_ACT_UNWAITED | F_GRAD_UNWAITED)) {
            snprintf(why, sizeof why,
                     "slot %d reused while a send of mb %d (chunk %d) is in flight (missing WAIT_SENDS)",
                     slot, j % m->M, j / m->M);
            return sfail(m, i, why);
        }
    }
    p->owner[slot] = u;
    return 0;
}

/* `now` micro-batches' full activations are held on stage i: the peak, and
 * on a recomputing stage the recompute buffers they take. */
static int account(sim *m, int i, int now)
{
    simstage *p = &m->st[i];
    if (now > p->peak)
        p->peak = now;
    if (p->s->recompute && now > p->s->npool) {
        char why[96];
        snprintf(why, sizeof why, "needs %d recompute buffers, the list has %d", now, p->s->npool);
        return sfail(m, i, why);
    }
    return 0;
}

/* Has the message sent at `at` arrived by t?  If not, the wake-up time. */
static int arrived(sim *m, double at, double comm, double t)
{
    if (at + comm <= t)
        return 1;
    if (m->wake < 0 || at + comm < m->wake)
        m->wake = at + comm;
    return 0;
}

enum { STEP_ERR = -1, STEP_BLOCKED = 0, STEP_DONE = 1 };

/* Tries stage i's next instruction at time t. */
static int step(sim *m, int i, double t)
{
    simstage *p = &m->st[i];
    const merak_instr *in = &p->s->instr[p->pc];
    const int mb = in->mb, slot = in->slot, u = mb >= 0 ? in->chunk * m->M + mb : -1;
    const int first = u >= 0 && sim_first(m, i, u), last = u >= 0 && sim_last(m, i, u);
    unsigned *f = u >= 0 ? &p->st[u] : NULL;
    int j, v;   /* the peer stage and its unit */

    switch (in->kind) {
    case MERAK_I_LOAD:
        if (*f & F_LOADED)
            return sfail(m, i, "loaded twice");
        if (occupy(m, i, u, slot))
            return STEP_ERR;
        *f |= F_LOADED;
        break;
    case MERAK_I_RECV_ACT:
        if (*f & F_RECV_ACT)
            return sfail(m, i, "receive posted twice");
        if (occupy(m, i, u, slot))
            return STEP_ERR;
        *f |= F_RECV_ACT;
        break;
    case MERAK_I_WAIT_ACT:
        if (!(*f & F_RECV_ACT))
            return sfail(m, i, "waits for an activation whose receive was never posted");
        if (*f & F_ACT_IN)
            return sfail(m, i, "waits twice");
        v = unit_prev(m, i, u, &j);
        if (!(m->st[j].st[v] & F_SENT_ACT) || !arrived(m, m->st[j].sent_act[v], m->st[j].c[v / m->M].comm, t))
            return STEP_BLOCKED;
        *f |= F_ACT_IN;
        break;
    case MERAK_I_FWD:
        if (*f & F_FWD)
            return sfail(m, i, "forwarded twice");
        if ((first || last) && !(*f & F_LOADED))
            return sfail(m, i, "FWD before its LOAD");
        if (!first && !(*f & F_ACT_IN))
            return sfail(m, i, "FWD before its activation arrived (WAIT_ACT)");
        if (occupy(m, i, u, slot))
            return STEP_ERR;
        *f |= F_FWD;
        /* a recomputing stage holds the activations only while the forward runs */
        if (account(m, i, p->live + 1))
            return STEP_ERR;
        p->live += !p->s->recompute && !p->s->forward_only;   /* evaluation keeps nothing */
        break;
    case MERAK_I_SEND_ACT:
        if (!(*f & F_FWD))
            return sfail(m, i, "SEND_ACT before its FWD");
        if (*f & F_SENT_ACT)
            return sfail(m, i, "sent twice");
        *f |= F_SENT_ACT | F_ACT_UNWAITED;
        p->sent_act[u] = t;
        break;
    case MERAK_I_RECV_GRAD:
        if (!(*f & F_FWD))
            return sfail(m, i, "gradient receive posted before the FWD (which clears the slot's gradients)");
        if (*f & F_RECV_GRAD)
            return sfail(m, i, "receive posted twice");
        if (p->owner[slot] != u)
            return sfail(m, i, "receive lands in a slot held by another micro-batch");
        *f |= F_RECV_GRAD;
        break;
    case MERAK_I_WAIT_GRAD:
        if (!(*f & F_RECV_GRAD))
            return sfail(m, i, "waits for a gradient whose receive was never posted");
        if (*f & F_GRAD_IN)
            return sfail(m, i, "waits twice");
        v = unit_next(m, i, u, &j);
        if (!(m->st[j].st[v] & F_SENT_GRAD) || !arrived(m, m->st[j].sent_grad[v], m->st[j].c[v / m->M].comm, t))
            return STEP_BLOCKED;
        *f |= F_GRAD_IN;
        break;
    case MERAK_I_RECOMPUTE:
        if (!p->s->recompute)
            return sfail(m, i, "RECOMPUTE on a stage that keeps its activations");
        if (!(*f & F_FWD))
            return sfail(m, i, "RECOMPUTE before its FWD");
        if (*f & (F_RECOMPUTED | F_BWD_IN))
            return sfail(m, i, "RECOMPUTE twice or after the backward");
        *f |= F_RECOMPUTED;
        if (account(m, i, ++p->live))
            return STEP_ERR;
        break;
    case MERAK_I_BWD:
    case MERAK_I_BWD_INPUT:
        if (*f & F_BWD_IN)
            return sfail(m, i, "backwarded twice");
        if (!(*f & F_FWD))
            return sfail(m, i, "backward before its FWD");
        if (p->s->recompute && !(*f & F_RECOMPUTED))
            return sfail(m, i, "backward of a dropped forward without its RECOMPUTE");
        if (!last && !(*f & F_GRAD_IN))
            return sfail(m, i, "backward before its gradient arrived (WAIT_GRAD)");
        *f |= F_BWD_IN;
        if (in->kind == MERAK_I_BWD) {
            *f |= F_BWD_W | F_BWD_FUSED;
            p->live--;
        }
        break;
    case MERAK_I_BWD_WEIGHT:
        if (!(*f & F_BWD_IN) || (*f & F_BWD_FUSED))
            return sfail(m, i, "BWD_WEIGHT without its own BWD_INPUT before it");
        if (*f & F_BWD_W)
            return sfail(m, i, "backwarded twice");
        *f |= F_BWD_W;
        p->live--;
        break;
    case MERAK_I_SEND_GRAD:
        if (!(*f & F_BWD_IN))
            return sfail(m, i, "SEND_GRAD before its backward");
        if (*f & F_SENT_GRAD)
            return sfail(m, i, "sent twice");
        *f |= F_SENT_GRAD | F_GRAD_UNWAITED;
        p->sent_grad[u] = t;
        break;
    case MERAK_I_WAIT_SENDS: {
        /* u's sends (its slot's), or all.  Rendezvous: a send completes
         * once the peer has posted its receive. */
        int lo = u >= 0 ? u : 0, hi = u >= 0 ? u + 1 : m->U;
        if (m->rendezvous)
            for (int k = lo; k < hi; k++) {
                if ((p->st[k] & F_ACT_UNWAITED) && (v = unit_next(m, i, k, &j), !(m->st[j].st[v] & F_RECV_ACT)))
                    return STEP_BLOCKED;
                if ((p->st[k] & F_GRAD_UNWAITED) && (v = unit_prev(m, i, k, &j), !(m->st[j].st[v] & F_RECV_GRAD)))
                    return STEP_BLOCKED;
            }
        for (int k = lo; k < hi; k++)
            p->st[k] &= ~(unsigned)(F_ACT_UNWAITED | F_GRAD_UNWAITED);
        break;
    }
    case MERAK_I_REDUCE_TIED:
    case MERAK_I_REDUCE_DP:
    case MERAK_I_OPTIMIZER_STEP:
        for (int k = 0; k < m->U; k++)
            if (!(p->st[k] & F_BWD_W)) {
                char why[96];
                snprintf(why, sizeof why, "mb %d (chunk %d) has not finished its backward", k % m->M, k / m->M);
                return sfail(m, i, why);
            }
        break;
    default:
        return sfail(m, i, "unknown instruction");
    }
    double d = u >= 0 ? cost(&p->c[in->chunk], in->kind) : 0;
    if (d > 0 && m->res && m->res->on_compute)
        m->res->on_compute(m->res->ctx, i, in, t, t + d);
    p->busy_until = t + d;
    p->busy += d;
    p->pc++;
    return STEP_DONE;
}

/* Checks that need no execution, for stage i's list: it belongs here, ids in
 * range, one slot per unit, inside its chunk's slots (slot_of: [M*V]
 * scratch), instructions that make sense on this stage, the final four. */
static int check_list(const merak_schedule *s, int i, int S, int M, int V, int *slot_of, char *err,
                      size_t errlen)
{
    static const merak_instr_kind tail[4] = {MERAK_I_WAIT_SENDS, MERAK_I_REDUCE_TIED,
                                             MERAK_I_REDUCE_DP, MERAK_I_OPTIMIZER_STEP};
    if (s->stages != S || s->stage != i || s->micro_batches != M || s->chunks != V)
        return merak_errf(err, errlen,
                    "schedule: list %d is for stage %d of %d with %d micro-batches and %d chunks "
                    "(expected stage %d of %d with %d and %d)",
                    i, s->stage, s->stages, s->micro_batches, s->chunks, i, S, M, V);
    if (s->nslots < 1 || !s->instr || s->n < (s->forward_only ? 1 : 4))
        return merak_errf(err, errlen, "schedule: stage %d: empty list or no slots", i);
    int lo[MERAK_MAX_CHUNKS], hi[MERAK_MAX_CHUNKS], nslots = 0;   /* chunk c's slots [lo, hi) */
    for (int c = 0; c < V; c++) {
        if (s->chunk_slots[c] < 1 || s->chunk_slots[c] > s->nslots)
            return merak_errf(err, errlen, "schedule: stage %d: chunk %d has %d slots", i, c, s->chunk_slots[c]);
        lo[c] = nslots;
        nslots += s->chunk_slots[c];
        hi[c] = nslots;
    }
    if (nslots != s->nslots)
        return merak_errf(err, errlen, "schedule: stage %d: %d slots, but its chunks have %d", i, s->nslots,
                          nslots);
    /* the final four (evaluation: the final WAIT_SENDS) */
    const int ntail = s->forward_only ? 1 : 4;
    for (int j = 4 - ntail; j < 4; j++)
        if (s->instr[s->n - 4 + j].kind != (s->forward_only ? MERAK_I_WAIT_SENDS : tail[j]) ||
            s->instr[s->n - 4 + j].mb != -1)
            return merak_errf(err, errlen, "schedule: stage %d must end with %s (instruction %d is %s)", i,
                              s->forward_only ? "WAIT_SENDS" : "WAIT_SENDS REDUCE_TIED REDUCE_DP OPTIMIZER_STEP",
                              s->n - 4 + j, merak_instr_name(s->instr[s->n - 4 + j].kind));
    for (int k = 0; k < M * V; k++)
        slot_of[k] = -1;
    for (int pc = 0; pc < s->n; pc++) {
        const merak_instr *in = &s->instr[pc];
        const merak_instr_kind k = in->kind;
        const int unit = has_mb(k) || in->mb >= 0, c = in->chunk;
        const int first = i == 0 && c == 0, last = i == S - 1 && c == V - 1;
        const char *bad = NULL;
        if ((int)k < 0 || k >= MERAK_I_COUNT_)
            bad = "unknown instruction";
        else if (has_mb(k) && (in->mb < 0 || in->mb >= M))
            bad = "micro-batch out of range";
        else if (unit && (c < 0 || c >= V))
            bad = "chunk out of range";
        else if (has_mb(k) && (in->slot < lo[c] || in->slot >= hi[c]))
            bad = "slot out of range of its chunk's";
        else if (k == MERAK_I_WAIT_SENDS && in->mb >= M)
            bad = "micro-batch out of range";
        else if (k == MERAK_I_WAIT_SENDS && in->mb >= 0 &&
                 in->slot != lo[c] + in->mb % (hi[c] - lo[c]))
            bad = "waits for another slot than its micro-batch's";
        else if (!has_mb(k) && k != MERAK_I_WAIT_SENDS && (in->mb != -1 || in->slot != -1))
            bad = "takes no micro-batch or slot";
        else if (k == MERAK_I_WAIT_SENDS && in->mb < 0 && (in->mb != -1 || in->slot != -1))
            bad = "takes a micro-batch and its slot, or neither";
        else if (k >= MERAK_I_REDUCE_TIED && pc < s->n - 3)
            bad = "only allowed in the final four";
        else if (s->forward_only && k != MERAK_I_LOAD && k != MERAK_I_RECV_ACT && k != MERAK_I_WAIT_ACT &&
                 k != MERAK_I_FWD && k != MERAK_I_SEND_ACT && k != MERAK_I_WAIT_SENDS)
            bad = "a forward-only list holds no backward, reduction or step";
        else if (k == MERAK_I_LOAD && !first && !last)
            bad = V > 1 ? "LOAD on a chunk that neither starts nor ends the model" : "LOAD on a middle stage";
        else if (first && (k == MERAK_I_RECV_ACT || k == MERAK_I_WAIT_ACT || k == MERAK_I_SEND_GRAD))
            bad = "the first stage has no previous stage";
        else if (last && (k == MERAK_I_SEND_ACT || k == MERAK_I_RECV_GRAD || k == MERAK_I_WAIT_GRAD))
            bad = "the last stage has no next stage";
        else if (has_mb(k) && slot_of[c * M + in->mb] >= 0 && slot_of[c * M + in->mb] != in->slot)
            bad = "micro-batch changes slot";
        if (bad)
            return merak_errf(err, errlen, "schedule: stage %d, instruction %d (%s mb %d slot %d): %s", i,
                        pc, merak_instr_name(k), in->mb, in->slot, bad);
        if (has_mb(k))
            slot_of[c * M + in->mb] = in->slot;
    }
    return 0;
}

static int check_static(const merak_schedule *stages, int S, char *err, size_t errlen)
{
    const int M = stages[0].micro_batches, V = stages[0].chunks;
    if (M < 1 || V < 1 || V > MERAK_MAX_CHUNKS || (size_t)M * (size_t)V > 1u << 24)
        return merak_errf(err, errlen, "schedule: %d micro-batches, %d chunks", M, V);
    int *slot_of = malloc((size_t)M * (size_t)V * sizeof *slot_of);
    if (!slot_of)
        return merak_errf(err, errlen, "schedule: out of memory");
    int rc = 0;
    for (int i = 0; i < S && rc == 0; i++)
        rc = stages[i].forward_only != stages[0].forward_only
                 ? merak_errf(err, errlen, "schedule: stage 0's list is %s, stage %d's %s",
                              stages[0].forward_only ? "forward-only" : "a training list", i,
                              stages[i].forward_only ? "forward-only" : "a training list")
                 : check_list(&stages[i], i, S, M, V, slot_of, err, errlen);
    free(slot_of);
    return rc;
}

/* Every unit went through everything its stage owes it. */
static int check_end(sim *m)
{
    for (int i = 0; i < m->S; i++) {
        for (int k = 0; k < m->U; k++) {
            const int first = sim_first(m, i, k), last = sim_last(m, i, k);
            unsigned f = m->st[i].st[k];
            const char *miss = NULL;
            int j = 0, v = last ? 0 : unit_next(m, i, k, &j);
            const int fwd_only = m->st[i].s->forward_only;
            if (!(f & F_FWD))
                miss = "never forwarded";
            else if (!fwd_only && !(f & F_BWD_W))
                miss = "never (fully) backwarded";
            else if (!last && !(f & F_SENT_ACT))
                miss = "activation never sent";
            else if (!fwd_only && !first && !(f & F_SENT_GRAD))
                miss = "gradient never sent";
            else if ((f & F_RECV_ACT) && !(f & F_ACT_IN))
                miss = "activation receive never waited for";
            else if ((f & F_RECV_GRAD) && !(f & F_GRAD_IN))
                miss = "gradient receive never waited for";
            else if (!last && !(m->st[j].st[v] & F_RECV_ACT))
                miss = "activation sent but never received";
            if (miss && m->V > 1)
                return merak_errf(m->err, m->errlen, "schedule (%s sends): stage %d, mb %d chunk %d: %s",
                                  mode_name(m), i, k % m->M, k / m->M, miss);
            if (miss)
                return merak_errf(m->err, m->errlen, "schedule (%s sends): stage %d, mb %d: %s",
                            mode_name(m), i, k, miss);
        }
    }
    return 0;
}

static int run(const merak_schedule *stages, int S, const merak_sim_costs *costs, int rendezvous,
               merak_sim_result *res, char *err, size_t errlen)
{
    const int M = stages[0].micro_batches, V = stages[0].chunks;
    sim m = {.S = S, .M = M, .V = V, .U = M * V, .rendezvous = rendezvous, .res = res, .err = err,
             .errlen = errlen};
    int rc = -1;
    m.st = calloc((size_t)S, sizeof *m.st);
    if (!m.st)
        return merak_errf(err, errlen, "schedule: out of memory");
    for (int i = 0; i < S; i++) {
        simstage *p = &m.st[i];
        p->s = &stages[i];
        for (int c = 0; c < V; c++) {
            /* without costs: unit costs per stage, shared by its chunks */
            merak_sim_costs u = MERAK_SIM_UNIT_COSTS;
            p->c[c] = costs ? costs[c * S + i]
                            : (merak_sim_costs){u.fwd / V, u.bwd / V, u.bwd_weight / V, u.recompute / V, u.comm};
        }
        p->st = calloc((size_t)m.U, sizeof *p->st);
        p->sent_act = calloc((size_t)m.U, 2 * sizeof *p->sent_act);
        p->owner = malloc((size_t)p->s->nslots * sizeof *p->owner);
        if (!p->st || !p->sent_act || !p->owner) {
            merak_errf(err, errlen, "schedule: out of memory");
            goto out;
        }
        p->sent_grad = p->sent_act + m.U;
        for (int j = 0; j < p->s->nslots; j++)
            p->owner[j] = -1;
    }

    /* At each time t, run every idle stage's instructions until it starts a
     * compute, blocks or ends; repeat until nothing moves (an instantaneous
     * send may unblock a stage already visited); then jump to the next
     * compute completion or message arrival. */
    for (double t = 0;;) {
        int moved;
        m.wake = -1;
        do {
            moved = 0;
            for (int i = 0; i < S; i++) {
                simstage *p = &m.st[i];
                while (p->pc < p->s->n && p->busy_until <= t) {
                    int r = step(&m, i, t);
                    if (r == STEP_ERR)
                        goto out;
                    if (r == STEP_BLOCKED)
                        break;
                    moved = 1;
                }
            }
        } while (moved);

        int finished = 1;
        double next = m.wake;
        for (int i = 0; i < S; i++) {
            const simstage *p = &m.st[i];
            if (p->pc < p->s->n)
                finished = 0;
            if (p->busy_until > t && (next < 0 || p->busy_until < next))
                next = p->busy_until;
        }
        if (finished && next < 0) {
            if (check_end(&m))
                goto out;
            if (res) {
                double busy = 0;
                res->makespan = t;
                for (int i = 0; i < S; i++) {
                    busy += m.st[i].busy;
                    if (res->peak)
                        res->peak[i] = m.st[i].peak;
                    if (res->busy)
                        res->busy[i] = m.st[i].busy;
                }
                res->bubble = t > 0 ? 1 - busy / (t * S) : 0;
            }
            rc = 0;
            goto out;
        }
        if (next < 0) {
            /* Nobody computes, nothing is on the wire, nobody can move:
             * name every stuck stage. */
            int len = snprintf(err, errlen, "schedule (%s sends): deadlock at t=%g:", mode_name(&m), t);
            const char *sep = " ";
            for (int i = 0; i < S && err && len >= 0 && (size_t)len < errlen; i++) {
                const simstage *p = &m.st[i];
                if (p->pc >= p->s->n)
                    continue;
                const merak_instr *in = &p->s->instr[p->pc];
                len += snprintf(err + len, errlen - (size_t)len, "%sstage %d stuck at #%d %s mb %d",
                                sep, i, p->pc, merak_instr_name(in->kind), in->mb);
                sep = "; ";
            }
            goto out;
        }
        t = next;
    }
out:
    for (int i = 0; i < S; i++) {
        free(m.st[i].st);
        free(m.st[i].sent_act);
        free(m.st[i].owner);
    }
    free(m.st);
    return rc;
}

int merak_schedule_simulate(const merak_schedule *stages, int nstages, const merak_sim_costs *costs,
                            merak_sim_result *res, char *err, size_t errlen)
{
    if (!stages || nstages < 1)
        return merak_errf(err, errlen, "schedule: %d stages to simulate", nstages);
    if (check_static(stages, nstages, err, errlen))
        return -1;
    for (int i = 0; costs && i < nstages * stages[0].chunks; i++) {
        const merak_sim_costs *c = &costs[i];
        if (!(c->fwd >= 0 && c->bwd >= 0 && c->bwd_weight >= 0 && c->bwd_weight <= c->bwd &&
              c->recompute >= 0 && c->comm >= 0) ||
            !isfinite(c->fwd + c->bwd + c->recompute + c->comm))
            return merak_errf(err, errlen,
                              "schedule: stage %d's costs are not usable (each must be finite and >= 0, "
                              "the weight share at most the backward)", i);
    }
    /* A schedule must work whether the transport buffers sends (eager) or
     * completes them only against a posted receive (rendezvous, e.g. large
     * MPI messages); the latter is stricter for WAIT_SENDS, so its timing is
     * the one reported. */
    if (run(stages, nstages, costs, 0, NULL, err, errlen))
        return -1;
    return run(stages, nstages, costs, 1, res, err, errlen);
}
