/*
 * schedule.c - pipeline schedule generators (gpipe, 1f1b) and the simulator
 * that checks any set of per-stage instruction lists (DESIGN.md s. 7).
 *
 * Generators.  Both schedules are built the same way: first the order of the
 * stage's compute (FWD/BWD per micro-batch), then the communication around
 * it by fixed rules:
 *
 *   - LOAD on the first and the last stage, just before the forward;
 *   - RECV_ACT posted early: the receive of micro-batch k+1 is posted before
 *     waiting for k (so it overlaps FWD k), if k+1's slot is free by then;
 *     otherwise right after the backward that frees the slot;
 *   - WAIT_ACT right before FWD, WAIT_GRAD right before BWD;
 *   - SEND_ACT right after FWD, then at once RECV_GRAD of the same
 *     micro-batch.  The gradient receive is never posted before the forward,
 *     because the executor's forward zeroes the slot's gradient buffers;
 *   - SEND_GRAD right after BWD.
 *
 * Slots.  Micro-batch mb uses slot mb % nslots.  gpipe needs M slots (no
 * reuse).  1f1b on stage s runs w = S - s - 1 warm-up forwards, then
 * alternates forward k / backward k - w; at any time the micro-batches
 * holding a slot are a window of at most w + 1 consecutive ids, so mb %
 * (w + 1) never collides.  The simulator re-checks this for every list.
 *
 * WAIT_SENDS rule.  A posted send reads its micro-batch's slot until it is
 * waited for.  Before the first instruction that writes into a slot for a new
 * micro-batch (its RECV_ACT, LOAD or FWD, whichever comes first) the
 * generator emits WAIT_SENDS if a send posted from that slot by the previous
 * occupant has not been waited for yet; and once at the end, before
 * REDUCE_TIED.  Nothing else waits early: a micro-batch's own later writes
 * (RECV_GRAD and BWD write gradient buffers) never touch what its SEND_ACT
 * reads.  In 1f1b this puts one WAIT_SENDS per steady-state step, right
 * after SEND_GRAD of the backward that freed the slot; it does not stall,
 * since by then stage-1 has long posted that gradient's receive and stage+1
 * has posted the receive of our last activation (it did so when it sent us
 * the gradient we just used).  gpipe never reuses a slot, so it waits only
 * at the end.
 *
 * gpipe backward order: 0..M-1, the order of the forwards, on every stage,
 * so gradients travel in the same order as activations (and as in 1f1b).
 * Messages are matched by micro-batch id, so any order would match; the
 * simulator checks that each receive is for the micro-batch it expects.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "merak/merak.h"
#include "names.h"
#include "schedule.h"

static const char *const instr_names[MERAK_I_COUNT_] = {
    [MERAK_I_LOAD] = "LOAD",
    [MERAK_I_RECV_ACT] = "RECV_ACT",
    [MERAK_I_WAIT_ACT] = "WAIT_ACT",
    [MERAK_I_FWD] = "FWD",
    [MERAK_I_SEND_ACT] = "SEND_ACT",
    [MERAK_I_RECV_GRAD] = "RECV_GRAD",
    [MERAK_I_WAIT_GRAD] = "WAIT_GRAD",
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

/* The schedules' names, in one table (indexed by merak_schedule_kind). */
static const char *const schedule_names[] = {[MERAK_SCHEDULE_GPIPE] = "gpipe",
                                             [MERAK_SCHEDULE_1F1B] = "1f1b"};
enum { NSCHED = sizeof schedule_names / sizeof schedule_names[0] };

int merak_schedule_parse(const char *name, merak_schedule_kind *kind)
{
    int i = merak_name_find(schedule_names, NSCHED, name);
    if (i >= 0)
        *kind = (merak_schedule_kind)i;
    return i < 0 ? -1 : 0;
}

const char *merak_schedule_names(void)
{
    static char names[64];
    return merak_names_join(schedule_names, NSCHED, names, sizeof names);
}

/* Instructions that carry a micro-batch (and its slot). */
static int has_mb(merak_instr_kind k) { return k <= MERAK_I_SEND_GRAD; }

/* ------------------------------------------------------------------ generator */

typedef struct gen {
    merak_schedule *s;
    int cap;
    int first, last, loads;   /* stage role */
    int next_fwd;             /* next micro-batch to forward */
    int *owner;               /* [nslots] micro-batch that last claimed the slot, or -1 */
    unsigned char *done;      /* [M] backward emitted: its slot may be reused */
    unsigned char *posted;    /* [M] RECV_ACT emitted */
    unsigned char *unwaited;  /* [M] has a send not yet covered by a WAIT_SENDS */
} gen;

static void emit(gen *g, merak_instr_kind kind, int mb)
{
    merak_schedule *s = g->s;
    /* cap is a proven bound (10 per micro-batch + 4); see merak_schedule_build */
    if (s->n >= g->cap)
        abort();
    s->instr[s->n++] = (merak_instr){kind, mb, mb >= 0 ? mb % s->nslots : -1};
}

static void wait_sends(gen *g)
{
    emit(g, MERAK_I_WAIT_SENDS, -1);
    memset(g->unwaited, 0, (size_t)g->s->micro_batches);
}

static int slot_free_for(const gen *g, int mb)
{
    int j = g->owner[mb % g->s->nslots];
    return j < 0 || j == mb || g->done[j];
}

/* First write of mb into its slot: retire the previous occupant's sends. */
static void claim(gen *g, int mb)
{
    int slot = mb % g->s->nslots, j = g->owner[slot];
    if (j >= 0 && j != mb && g->unwaited[j])
        wait_sends(g);
    g->owner[slot] = mb;
}

static void post_recv_act(gen *g, int mb)
{
    if (g->first || mb >= g->s->micro_batches || g->posted[mb] || !slot_free_for(g, mb))
        return;
    claim(g, mb);
    emit(g, MERAK_I_RECV_ACT, mb);
    g->posted[mb] = 1;
}

static void emit_fwd(gen *g, int mb)
{
    post_recv_act(g, mb);  /* no-op if posted early; the slot is free in both schedules */
    if (g->loads) {
        claim(g, mb);
        emit(g, MERAK_I_LOAD, mb);
    }
    g->next_fwd = mb + 1;
    post_recv_act(g, mb + 1);  /* overlaps our wait and FWD mb */
    if (!g->first)
        emit(g, MERAK_I_WAIT_ACT, mb);
    claim(g, mb);
    emit(g, MERAK_I_FWD, mb);
    if (!g->last) {
        emit(g, MERAK_I_SEND_ACT, mb);
        g->unwaited[mb] = 1;
        emit(g, MERAK_I_RECV_GRAD, mb);
    }
}

static void emit_bwd(gen *g, int mb)
{
    if (!g->last)
        emit(g, MERAK_I_WAIT_GRAD, mb);
    emit(g, MERAK_I_BWD, mb);
    g->done[mb] = 1;
    if (!g->first) {
        emit(g, MERAK_I_SEND_GRAD, mb);
        g->unwaited[mb] = 1;
    }
    post_recv_act(g, g->next_fwd);  /* the slot this backward freed */
}

int merak_schedule_build(merak_schedule_kind kind, int stages, int stage, int micro_batches,
                         merak_schedule *out, char *err, size_t errlen)
{
    const int S = stages, M = micro_batches;
    memset(out, 0, sizeof *out);
    if (S < 1)
        return merak_errf(err, errlen, "schedule: %d pipeline stages (need at least 1)", S);
    if (stage < 0 || stage >= S)
        return merak_errf(err, errlen, "schedule: stage %d out of range 0..%d", stage, S - 1);
    if (M < 1)
        return merak_errf(err, errlen, "schedule: %d micro-batches (need at least 1)", M);
    if (kind != MERAK_SCHEDULE_GPIPE && kind != MERAK_SCHEDULE_1F1B)
        return merak_errf(err, errlen, "schedule: unknown schedule kind %d", (int)kind);
    if (kind == MERAK_SCHEDULE_1F1B && M < S)
        return merak_errf(err, errlen,
                    "schedule: 1f1b needs at least as many micro-batches (M) as stages (S): "
                    "M = %d, S = %d", M, S);

    out->stages = S;
    out->stage = stage;
    out->micro_batches = M;
    out->nslots = kind == MERAK_SCHEDULE_GPIPE ? M : S - stage;  /* min(M, S - stage), M >= S */

    gen g = {.s = out, .first = stage == 0, .last = stage == S - 1};
    g.loads = g.first || g.last;
    /* At most 10 instructions per micro-batch (RECV_ACT LOAD WAIT_ACT FWD
     * SEND_ACT RECV_GRAD WAIT_GRAD BWD SEND_GRAD and one WAIT_SENDS before
     * its slot is claimed) plus the final 4. */
    g.cap = 10 * M + 4;
    out->instr = malloc((size_t)g.cap * sizeof *out->instr);
    g.owner = malloc((size_t)out->nslots * sizeof *g.owner);
    g.done = calloc((size_t)M, 3);
    if (!out->instr || !g.owner || !g.done) {
        free(g.owner);
        free(g.done);
        merak_schedule_free(out);
        return merak_errf(err, errlen, "schedule: out of memory");
    }
    g.posted = g.done + M;
    g.unwaited = g.done + 2 * M;
    for (int i = 0; i < out->nslots; i++)
        g.owner[i] = -1;

    if (kind == MERAK_SCHEDULE_GPIPE) {
        for (int k = 0; k < M; k++)
            emit_fwd(&g, k);
        for (int k = 0; k < M; k++)
            emit_bwd(&g, k);
    } else {
        int w = S - stage - 1;  /* warm-up forwards; < M since M >= S */
        for (int k = 0; k < w; k++)
            emit_fwd(&g, k);
        for (int k = w; k < M; k++) {  /* steady state: one forward, one backward */
            emit_fwd(&g, k);
            emit_bwd(&g, k - w);
        }
        for (int k = M - w; k < M; k++)  /* cool-down */
            emit_bwd(&g, k);
    }
    wait_sends(&g);
    emit(&g, MERAK_I_REDUCE_TIED, -1);
    emit(&g, MERAK_I_REDUCE_DP, -1);
    emit(&g, MERAK_I_OPTIMIZER_STEP, -1);

    free(g.owner);
    free(g.done);
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
 * All stages run their lists as concurrent processes in discrete time.  FWD
 * costs 1, BWD 2, BWD_INPUT and BWD_WEIGHT 1 each; everything else is
 * instantaneous.  Messages are matched by (direction, micro-batch) and arrive
 * at once; a WAIT blocks until the peer posted the matching send.  Sends are
 * either eager (complete at once) or rendezvous (complete once the peer has
 * posted the matching receive), which only changes when WAIT_SENDS blocks.
 * Any send is "in flight" for the slot-reuse check until a WAIT_SENDS, in
 * both modes, because the executor may only reuse a send buffer after
 * waiting on it.  A micro-batch holds its slot from its first write (LOAD,
 * RECV_ACT or FWD) until its backward is done; its activations count as live
 * (peak) from FWD to the end of its backward.
 */

/* Per (stage, micro-batch) progress flags. */
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
};

typedef struct simstage {
    const merak_schedule *s;
    int pc, busy_until;
    int live, peak;
    unsigned *st;            /* [M] flags */
    int *owner;              /* [nslots] micro-batch holding the slot, or -1 */
} simstage;

typedef struct sim {
    simstage *st;
    int S, M;
    int rendezvous;
    char *err;
    size_t errlen;
} sim;

static int cost(merak_instr_kind k)
{
    switch (k) {
    case MERAK_I_FWD: return 1;
    case MERAK_I_BWD: return 2;
    case MERAK_I_BWD_INPUT: return 1;
    case MERAK_I_BWD_WEIGHT: return 1;
    default: return 0;
    }
}

static const char *mode_name(const sim *m) { return m->rendezvous ? "rendezvous" : "eager"; }

/* Error at stage i's current instruction. */
static int sfail(sim *m, int i, const char *what)
{
    const simstage *p = &m->st[i];
    const merak_instr *in = &p->s->instr[p->pc];
    return merak_errf(m->err, m->errlen, "schedule (%s sends): stage %d, instruction %d (%s mb %d): %s",
                mode_name(m), i, p->pc, merak_instr_name(in->kind), in->mb, what);
}

/* mb writes into its slot: the slot must be free or already mb's, and no
 * send of the previous occupant may still be reading it. */
static int occupy(sim *m, int i, int mb, int slot)
{
    simstage *p = &m->st[i];
    int j = p->owner[slot];
    char why[128];
    if (j >= 0 && j != mb) {
        if (!(p->st[j] & F_BWD_W)) {
            snprintf(why, sizeof why, "slot %d still holds live mb %d", slot, j);
            return sfail(m, i, why);
        }
        if (p->st[j] & (F_ACT_UNWAITED | F_GRAD_UNWAITED)) {
            snprintf(why, sizeof why,
                     "slot %d reused while a send of mb %d is in flight (missing WAIT_SENDS)",
                     slot, j);
            return sfail(m, i, why);
        }
    }
    p->owner[slot] = mb;
    return 0;
}

/* The micro-batch's activations are freed when its weight gradient is done. */
static void backward_done(simstage *p) { p->live--; }

enum { STEP_ERR = -1, STEP_BLOCKED = 0, STEP_DONE = 1 };

/* Tries stage i's next instruction at time t. */
static int step(sim *m, int i, int t)
{
    simstage *p = &m->st[i];
    const merak_instr *in = &p->s->instr[p->pc];
    const int first = i == 0, last = i == m->S - 1;
    const int mb = in->mb, slot = in->slot;
    unsigned *f = has_mb(in->kind) ? &p->st[mb] : NULL;

    switch (in->kind) {
    case MERAK_I_LOAD:
        if (*f & F_LOADED)
            return sfail(m, i, "loaded twice");
        if (occupy(m, i, mb, slot))
            return STEP_ERR;
        *f |= F_LOADED;
        break;
    case MERAK_I_RECV_ACT:
        if (*f & F_RECV_ACT)
            return sfail(m, i, "receive posted twice");
        if (occupy(m, i, mb, slot))
            return STEP_ERR;
        *f |= F_RECV_ACT;
        break;
    case MERAK_I_WAIT_ACT:
        if (!(*f & F_RECV_ACT))
            return sfail(m, i, "waits for an activation whose receive was never posted");
        if (*f & F_ACT_IN)
            return sfail(m, i, "waits twice");
        if (!(m->st[i - 1].st[mb] & F_SENT_ACT))
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
        if (occupy(m, i, mb, slot))
            return STEP_ERR;
        *f |= F_FWD;
        if (++p->live > p->peak)
            p->peak = p->live;
        break;
    case MERAK_I_SEND_ACT:
        if (!(*f & F_FWD))
            return sfail(m, i, "SEND_ACT before its FWD");
        if (*f & F_SENT_ACT)
            return sfail(m, i, "sent twice");
        *f |= F_SENT_ACT | F_ACT_UNWAITED;
        break;
    case MERAK_I_RECV_GRAD:
        if (!(*f & F_FWD))
            return sfail(m, i, "gradient receive posted before the FWD (which clears the slot's gradients)");
        if (*f & F_RECV_GRAD)
            return sfail(m, i, "receive posted twice");
        if (p->owner[slot] != mb)
            return sfail(m, i, "receive lands in a slot held by another micro-batch");
        *f |= F_RECV_GRAD;
        break;
    case MERAK_I_WAIT_GRAD:
        if (!(*f & F_RECV_GRAD))
            return sfail(m, i, "waits for a gradient whose receive was never posted");
        if (*f & F_GRAD_IN)
            return sfail(m, i, "waits twice");
        if (!(m->st[i + 1].st[mb] & F_SENT_GRAD))
            return STEP_BLOCKED;
        *f |= F_GRAD_IN;
        break;
    case MERAK_I_BWD:
    case MERAK_I_BWD_INPUT:
        if (*f & F_BWD_IN)
            return sfail(m, i, "backwarded twice");
        if (!(*f & F_FWD))
            return sfail(m, i, "backward before its FWD");
        if (!last && !(*f & F_GRAD_IN))
            return sfail(m, i, "backward before its gradient arrived (WAIT_GRAD)");
        *f |= F_BWD_IN;
        if (in->kind == MERAK_I_BWD) {
            *f |= F_BWD_W | F_BWD_FUSED;
            backward_done(p);
        }
        break;
    case MERAK_I_BWD_WEIGHT:
        if (!(*f & F_BWD_IN) || (*f & F_BWD_FUSED))
            return sfail(m, i, "BWD_WEIGHT without its own BWD_INPUT before it");
        if (*f & F_BWD_W)
            return sfail(m, i, "backwarded twice");
        *f |= F_BWD_W;
        backward_done(p);
        break;
    case MERAK_I_SEND_GRAD:
        if (!(*f & F_BWD_IN))
            return sfail(m, i, "SEND_GRAD before its backward");
        if (*f & F_SENT_GRAD)
            return sfail(m, i, "sent twice");
        *f |= F_SENT_GRAD | F_GRAD_UNWAITED;
        break;
    case MERAK_I_WAIT_SENDS:
        /* Rendezvous: a send completes once the peer has posted its receive. */
        if (m->rendezvous)
            for (int k = 0; k < m->M; k++) {
                if ((p->st[k] & F_ACT_UNWAITED) && !(m->st[i + 1].st[k] & F_RECV_ACT))
                    return STEP_BLOCKED;
                if ((p->st[k] & F_GRAD_UNWAITED) && !(m->st[i - 1].st[k] & F_RECV_GRAD))
                    return STEP_BLOCKED;
            }
        for (int k = 0; k < m->M; k++)
            p->st[k] &= ~(unsigned)(F_ACT_UNWAITED | F_GRAD_UNWAITED);
        break;
    case MERAK_I_REDUCE_TIED:
    case MERAK_I_REDUCE_DP:
    case MERAK_I_OPTIMIZER_STEP:
        for (int k = 0; k < m->M; k++)
            if (!(p->st[k] & F_BWD_W)) {
                char why[96];
                snprintf(why, sizeof why, "mb %d has not finished its backward", k);
                return sfail(m, i, why);
            }
        break;
    default:
        return sfail(m, i, "unknown instruction");
    }
    p->busy_until = t + cost(in->kind);
    p->pc++;
    return STEP_DONE;
}

/* Checks that need no execution, for stage i's list: it belongs here, ids in
 * range, one slot per micro-batch (slot_of: [M] scratch), instructions that
 * make sense on this stage, the final four. */
static int check_list(const merak_schedule *s, int i, int S, int M, int *slot_of, char *err,
                      size_t errlen)
{
    static const merak_instr_kind tail[4] = {MERAK_I_WAIT_SENDS, MERAK_I_REDUCE_TIED,
                                             MERAK_I_REDUCE_DP, MERAK_I_OPTIMIZER_STEP};
    const int first = i == 0, last = i == S - 1;
    if (s->stages != S || s->stage != i || s->micro_batches != M)
        return merak_errf(err, errlen,
                    "schedule: list %d is for stage %d of %d with %d micro-batches "
                    "(expected stage %d of %d with %d)",
                    i, s->stage, s->stages, s->micro_batches, i, S, M);
    if (s->nslots < 1 || !s->instr || s->n < 4)
        return merak_errf(err, errlen, "schedule: stage %d: empty list or no slots", i);
    for (int j = 0; j < 4; j++)
        if (s->instr[s->n - 4 + j].kind != tail[j])
            return merak_errf(err, errlen,
                        "schedule: stage %d must end with WAIT_SENDS REDUCE_TIED REDUCE_DP "
                        "OPTIMIZER_STEP (instruction %d is %s)",
                        i, s->n - 4 + j, merak_instr_name(s->instr[s->n - 4 + j].kind));
    for (int k = 0; k < M; k++)
        slot_of[k] = -1;
    for (int pc = 0; pc < s->n; pc++) {
        const merak_instr *in = &s->instr[pc];
        const merak_instr_kind k = in->kind;
        const char *bad = NULL;
        if ((int)k < 0 || k >= MERAK_I_COUNT_)
            bad = "unknown instruction";
        else if (has_mb(k) && (in->mb < 0 || in->mb >= M))
            bad = "micro-batch out of range";
        else if (has_mb(k) && (in->slot < 0 || in->slot >= s->nslots))
            bad = "slot out of range";
        else if (!has_mb(k) && (in->mb != -1 || in->slot != -1))
            bad = "takes no micro-batch or slot";
        else if (k >= MERAK_I_REDUCE_TIED && pc < s->n - 3)
            bad = "only allowed in the final four";
        else if (k == MERAK_I_LOAD && !first && !last)
            bad = "LOAD on a middle stage";
        else if (first && (k == MERAK_I_RECV_ACT || k == MERAK_I_WAIT_ACT || k == MERAK_I_SEND_GRAD))
            bad = "the first stage has no previous stage";
        else if (last && (k == MERAK_I_SEND_ACT || k == MERAK_I_RECV_GRAD || k == MERAK_I_WAIT_GRAD))
            bad = "the last stage has no next stage";
        else if (has_mb(k) && slot_of[in->mb] >= 0 && slot_of[in->mb] != in->slot)
            bad = "micro-batch changes slot";
        if (bad)
            return merak_errf(err, errlen, "schedule: stage %d, instruction %d (%s mb %d slot %d): %s", i,
                        pc, merak_instr_name(k), in->mb, in->slot, bad);
        if (has_mb(k))
            slot_of[in->mb] = in->slot;
    }
    return 0;
}

static int check_static(const merak_schedule *stages, int S, char *err, size_t errlen)
{
    const int M = stages[0].micro_batches;
    if (M < 1)
        return merak_errf(err, errlen, "schedule: %d micro-batches", M);
    int *slot_of = malloc((size_t)M * sizeof *slot_of);
    if (!slot_of)
        return merak_errf(err, errlen, "schedule: out of memory");
    int rc = 0;
    for (int i = 0; i < S && rc == 0; i++)
        rc = check_list(&stages[i], i, S, M, slot_of, err, errlen);
    free(slot_of);
    return rc;
}

/* Every micro-batch went through everything its stage owes it. */
static int check_end(sim *m)
{
    for (int i = 0; i < m->S; i++) {
        const int first = i == 0, last = i == m->S - 1;
        for (int k = 0; k < m->M; k++) {
            unsigned f = m->st[i].st[k];
            const char *miss = NULL;
            if (!(f & F_FWD))
                miss = "never forwarded";
            else if (!(f & F_BWD_W))
                miss = "never (fully) backwarded";
            else if (!last && !(f & F_SENT_ACT))
                miss = "activation never sent";
            else if (!first && !(f & F_SENT_GRAD))
                miss = "gradient never sent";
            else if ((f & F_RECV_ACT) && !(f & F_ACT_IN))
                miss = "activation receive never waited for";
            else if ((f & F_RECV_GRAD) && !(f & F_GRAD_IN))
                miss = "gradient receive never waited for";
            else if (!last && !(m->st[i + 1].st[k] & F_RECV_ACT))
                miss = "activation sent but never received";
            if (miss)
                return merak_errf(m->err, m->errlen, "schedule (%s sends): stage %d, mb %d: %s",
                            mode_name(m), i, k, miss);
        }
    }
    return 0;
}

static int run(const merak_schedule *stages, int S, int rendezvous, int *peak, int *ticks,
               char *err, size_t errlen)
{
    const int M = stages[0].micro_batches;
    sim m = {.S = S, .M = M, .rendezvous = rendezvous, .err = err, .errlen = errlen};
    int rc = -1;
    m.st = calloc((size_t)S, sizeof *m.st);
    if (!m.st)
        return merak_errf(err, errlen, "schedule: out of memory");
    for (int i = 0; i < S; i++) {
        simstage *p = &m.st[i];
        p->s = &stages[i];
        p->st = calloc((size_t)M, sizeof *p->st);
        p->owner = malloc((size_t)p->s->nslots * sizeof *p->owner);
        if (!p->st || !p->owner) {
            merak_errf(err, errlen, "schedule: out of memory");
            goto out;
        }
        for (int j = 0; j < p->s->nslots; j++)
            p->owner[j] = -1;
    }

    /* Discrete time: at each t, run every idle stage's instructions until it
     * starts a compute, blocks or ends; repeat until nothing moves (an
     * instantaneous send may unblock a stage already visited); then jump to
     * the next compute completion. */
    for (int t = 0;;) {
        int moved;
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

        int finished = 1, next = -1;
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
            for (int i = 0; i < S; i++)
                if (peak)
                    peak[i] = m.st[i].peak;
            if (ticks)
                *ticks = t;
            rc = 0;
            goto out;
        }
        if (next < 0) {
            /* Nobody computes and nobody can move: name every stuck stage. */
            int len = snprintf(err, errlen, "schedule (%s sends): deadlock at t=%d:", mode_name(&m), t);
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
        free(m.st[i].owner);
    }
    free(m.st);
    return rc;
}

int merak_schedule_simulate(const merak_schedule *stages, int nstages, int *peak, int *ticks,
                            char *err, size_t errlen)
{
    if (!stages || nstages < 1)
        return merak_errf(err, errlen, "schedule: %d stages to simulate", nstages);
    if (check_static(stages, nstages, err, errlen))
        return -1;
    /* A schedule must work whether the transport buffers sends (eager) or
     * completes them only against a posted receive (rendezvous, e.g. large
     * MPI messages); the latter is stricter for WAIT_SENDS, so its timing is
     * the one reported (they agree for the generated schedules). */
    int t_eager = 0, t_rdv = 0;
    if (run(stages, nstages, 0, NULL, &t_eager, err, errlen))
        return -1;
    if (run(stages, nstages, 1, peak, &t_rdv, err, errlen))
        return -1;
    if (ticks)
        *ticks = t_rdv > t_eager ? t_rdv : t_eager;
    return 0;
}
