/*
 * test_schedule.c - pipeline schedule generators and the simulator: every
 * gpipe and 1f1b shape up to 8 stages and 16 micro-batches is deadlock-free
 * under eager and rendezvous sends, takes (M + S - 1) * 3 time units and
 * needs exactly its slot count; every generator, with and without
 * recomputation, for every S in 2..16 and M in S..4S is deadlock-free and
 * within its buffers, scp is shorter than 1f1b with recomputation and zb-h1
 * shorter than 1f1b without, at 1f1b's peak; refusals; and lists broken on
 * purpose are caught, which shows the simulator can fail; evaluation
 * (forward-only) lists of every schedule run deadlock-free; and on every
 * link the receives are posted in the order of the sends (what a
 * transport without tags needs).  And the trace's device time: events
 * stamped while a device is timed take the device's times, a host clock
 * or a failed mark keeps the host's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "pipe/schedule.h"
#include "pipe/trace.h"
#include "tap.h"

#define MAX_S 8
#define MAX_M 16

static char err[1024];

/* Every stage's list; rc: every stage recomputes. */
static int build_rc(merak_schedule_kind kind, int S, int M, int rc, merak_schedule *sch)
{
    unsigned char flags[64];
    memset(flags, rc, sizeof flags);
    merak_schedule_spec sp = {kind, S, M, flags, kind == MERAK_SCHEDULE_INTERLEAVED ? 2 : 1};
    return merak_schedule_build_all(&sp, sch, err, sizeof err);
}

static int build_all(merak_schedule_kind kind, int S, int M, merak_schedule *sch)
{
    return build_rc(kind, S, M, 0, sch);
}

/* Simulates at unit costs; the makespan as a whole number. */
static int simulate(const merak_schedule *sch, int S, int *peak, int *ticks)
{
    merak_sim_result r = {.peak = peak};
    int rc = merak_schedule_simulate(sch, S, NULL, &r, err, sizeof err);
    if (ticks)
        *ticks = (int)r.makespan;
    return rc;
}

static void free_all(merak_schedule *sch, int S)
{
    for (int i = 0; i < S; i++)
        merak_schedule_free(&sch[i]);
}

/* Index of the first (kind, mb) in the list, or -1. */
static int find(const merak_schedule *s, merak_instr_kind kind, int mb)
{
    for (int i = 0; i < s->n; i++)
        if (s->instr[i].kind == kind && s->instr[i].mb == mb)
            return i;
    return -1;
}

static void drop(merak_schedule *s, int at)
{
    memmove(&s->instr[at], &s->instr[at + 1], (size_t)(s->n - at - 1) * sizeof *s->instr);
    s->n--;
}

/* Moves instruction `from` to just after the instruction now at `after`. */
static void move_after(merak_schedule *s, int from, int after)
{
    merak_instr x = s->instr[from];
    drop(s, from);
    if (after > from)
        after--;
    memmove(&s->instr[after + 2], &s->instr[after + 1], (size_t)(s->n - after - 1) * sizeof *s->instr);
    s->instr[after + 1] = x;
    s->n++;
}

static void swap(merak_schedule *s, int a, int b)
{
    merak_instr x = s->instr[a];
    s->instr[a] = s->instr[b];
    s->instr[b] = x;
}

static int one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

static void test_names(void)
{
    int ok = 1;
    for (int k = 0; k < MERAK_I_COUNT_; k++) {
        const char *a = merak_instr_name((merak_instr_kind)k);
        if (!a || !strcmp(a, "?"))
            ok = 0;
        for (int j = 0; j < k; j++)
            if (!strcmp(a, merak_instr_name((merak_instr_kind)j)))
                ok = 0;
    }
    tap_ok(ok, "every instruction has its own name");
    tap_ok(!strcmp(merak_instr_name(MERAK_I_WAIT_SENDS), "WAIT_SENDS") &&
               !strcmp(merak_instr_name(MERAK_I_COUNT_), "?"),
           "instruction names: WAIT_SENDS, out of range is ?");

    merak_schedule_kind k = MERAK_SCHEDULE_1F1B;
    tap_ok(merak_schedule_parse("gpipe", &k) == 0 && k == MERAK_SCHEDULE_GPIPE, "parse gpipe");
    tap_ok(merak_schedule_parse("1f1b", &k) == 0 && k == MERAK_SCHEDULE_1F1B, "parse 1f1b");
    tap_ok(merak_schedule_parse("scp", &k) == 0 && k == MERAK_SCHEDULE_SCP, "parse scp");
    tap_ok(merak_schedule_parse("zb-h1", &k) == 0 && k == MERAK_SCHEDULE_ZB_H1, "parse zb-h1");
    tap_ok(merak_schedule_parse("interleaved", &k) == 0 && k == MERAK_SCHEDULE_INTERLEAVED, "parse interleaved");
    tap_ok(!strcmp(merak_schedule_names(), "gpipe, 1f1b, scp, zb-h1 or interleaved"), "names: %s",
           merak_schedule_names());
    merak_recompute r;
    tap_ok(merak_recompute_parse("none", &r, err, sizeof err) == 0 && r.kind == MERAK_RECOMPUTE_NONE &&
               merak_recompute_parse("full", &r, err, sizeof err) == 0 && r.kind == MERAK_RECOMPUTE_FULL,
           "parse none, full");
    tap_ok(merak_recompute_parse("stage-aware", &r, err, sizeof err) == 0 &&
               r.kind == MERAK_RECOMPUTE_STAGE_AWARE && r.value == MERAK_RECOMPUTE_R0_DEFAULT &&
               merak_recompute_parse("stage-aware=0.5", &r, err, sizeof err) == 0 && r.value == 0.5,
           "parse stage-aware[=R0]");
    tap_ok(merak_recompute_parse("budget=1.5", &r, err, sizeof err) == 0 && r.kind == MERAK_RECOMPUTE_BUDGET &&
               r.value == 1.5, "parse budget=GB");
    const char *bad_rc[] = {"", "some", "stage-aware=", "stage-aware=1.5", "stage-aware=x", "stage-awareX",
                            "budget=", "budget=0", "budget=-1", "budget=1e999", "budget=2GB", "full=1"};
    for (size_t i = 0; i < sizeof bad_rc / sizeof *bad_rc; i++) {
        err[0] = 0;
        tap_ok(merak_recompute_parse(bad_rc[i], &r, err, sizeof err) == -1 && one_line(err) &&
                   strstr(err, "recompute '"), "recompute '%s' refused: %s", bad_rc[i], err);
    }
    /* Merak's example: S = 4, r0 = 0.9 -> 0.90, 0.85, 0.70, 0 */
    double want[4] = {0.9, 0.85, 0.7, 0};
    int good = 1;
    for (int s = 0; s < 4; s++)
        good &= fabs(merak_recompute_stage_aware(0.9, 4, s) - want[s]) < 1e-12;
    tap_ok(good && merak_recompute_stage_aware(0.2, 4, 2) == 0, "stage-aware ratios follow Merak's formula");
    k = MERAK_SCHEDULE_1F1B;
    tap_ok(merak_schedule_parse("pipedream", &k) == -1 && merak_schedule_parse("", &k) == -1 &&
               merak_schedule_parse(NULL, &k) == -1 && k == MERAK_SCHEDULE_1F1B,
           "unknown schedule names are refused and leave the kind alone");
}

/* Shape of one list beyond what the simulator checks: compute order. */
static int order_ok(merak_schedule_kind kind, const merak_schedule *s)
{
    const int S = s->stages, M = s->micro_batches;
    int nf = 0, nb = 0, first_bwd_after = -1;
    for (int i = 0; i < s->n; i++) {
        const merak_instr *in = &s->instr[i];
        if (in->mb >= 0 && in->slot != in->mb % s->nslots)
            return 0;
        if (in->kind == MERAK_I_FWD && in->mb != nf++)
            return 0;
        if (in->kind == MERAK_I_BWD) {
            if (in->mb != nb++)  /* backwards in order 0..M-1 */
                return 0;
            if (first_bwd_after < 0)
                first_bwd_after = nf;
        }
        if (in->kind == MERAK_I_LOAD && s->stage != 0 && s->stage != S - 1)
            return 0;
    }
    int want = kind == MERAK_SCHEDULE_GPIPE ? M : S - s->stage;  /* forwards before the first backward */
    return nf == M && nb == M && first_bwd_after == want;
}

static void test_sweep(merak_schedule_kind kind, const char *name)
{
    for (int S = 1; S <= MAX_S; S++)
        for (int M = kind == MERAK_SCHEDULE_1F1B ? S : 1; M <= MAX_M; M++) {
            merak_schedule sch[MAX_S];
            int peak[MAX_S], ticks = -1, ok = 1;
            err[0] = 0;
            if (build_all(kind, S, M, sch)) {
                tap_ok(0, "%s S=%d M=%d builds: %s", name, S, M, err);
                continue;
            }
            int rc = simulate(sch, S, peak, &ticks);
            for (int i = 0; i < S && rc == 0; i++) {
                int want = kind == MERAK_SCHEDULE_GPIPE ? M : (M < S - i ? M : S - i);
                if (peak[i] != want || sch[i].nslots != want || !order_ok(kind, &sch[i]))
                    ok = 0;
            }
            tap_ok(rc == 0 && ok && ticks == (M + S - 1) * 3,
                   "%s S=%d M=%d: deadlock-free (eager and rendezvous), %d ticks, peak == nslots%s%s",
                   name, S, M, ticks, rc ? ": " : "", rc ? err : "");
            free_all(sch, S);
        }
}

static void test_refusals(void)
{
    merak_schedule s;
    err[0] = 0;
    merak_schedule_spec sp = {MERAK_SCHEDULE_1F1B, 4, 3, NULL, 1};
    int rc = merak_schedule_build(&sp, 0, &s, err, sizeof err);
    tap_ok(rc == -1 && one_line(err) &&
               strstr(err, "1f1b needs at least as many micro-batches (M) as stages (S)") &&
               strstr(err, "M = 3") && strstr(err, "S = 4"),
           "1f1b with M=3 < S=4 refused: %s", err);
    tap_ok(s.instr == NULL && s.n == 0, "a refused build leaves an empty schedule");
    merak_schedule_free(&s);

    struct { int S, stage, M; const char *what; } bad[] = {
        {0, 0, 4, "stages"}, {-1, 0, 4, "stages"}, {4, -1, 4, "stage"}, {4, 4, 4, "stage"},
        {4, 0, 0, "micro-batches"}, {1, 0, -2, "micro-batches"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        for (int kind = 0; kind < MERAK_SCHEDULE_COUNT_; kind++) {
            err[0] = 0;
            sp = (merak_schedule_spec){(merak_schedule_kind)kind, bad[i].S, bad[i].M, NULL,
                                       kind == MERAK_SCHEDULE_INTERLEAVED ? 2 : 1};
            rc = merak_schedule_build(&sp, bad[i].stage, &s, err, sizeof err);
            tap_ok(rc == -1 && one_line(err) && strstr(err, bad[i].what),
                   "%s S=%d stage=%d M=%d refused: %s", merak_schedule_name((merak_schedule_kind)kind),
                   bad[i].S, bad[i].stage, bad[i].M, err);
            merak_schedule_free(&s);
        }
    for (int kind = MERAK_SCHEDULE_SCP; kind <= MERAK_SCHEDULE_ZB_H1; kind++) {
        sp = (merak_schedule_spec){(merak_schedule_kind)kind, 5, 4, NULL, 1};
        rc = merak_schedule_check(&sp, err, sizeof err);
        tap_ok(rc == -1 && one_line(err) && strstr(err, "M = 4, S = 5"), "%s with M < S refused: %s",
               merak_schedule_name((merak_schedule_kind)kind), err);
    }
    sp = (merak_schedule_spec){(merak_schedule_kind)MERAK_SCHEDULE_COUNT_, 2, 2, NULL, 1};
    tap_ok(merak_schedule_check(&sp, err, sizeof err) == -1 && strstr(err, "unknown schedule kind"),
           "an unknown kind is refused: %s", err);
    merak_sim_costs bad_costs[2] = {MERAK_SIM_UNIT_COSTS, {1, 2, 3, 1, 0}};
    merak_schedule two[2];
    build_all(MERAK_SCHEDULE_1F1B, 2, 2, two);
    err[0] = 0;
    rc = merak_schedule_simulate(two, 2, bad_costs, NULL, err, sizeof err);
    tap_ok(rc == -1 && one_line(err) && strstr(err, "stage 1's costs"),
           "a weight share above the backward is refused: %s", err);
    bad_costs[1] = (merak_sim_costs){1, 2, 1, -1, 0};
    rc = merak_schedule_simulate(two, 2, bad_costs, NULL, err, sizeof err);
    tap_ok(rc == -1 && strstr(err, "stage 1's costs"), "a negative cost is refused: %s", err);
    free_all(two, 2);
    err[0] = 0;
    rc = simulate(NULL, 0, NULL, NULL);
    tap_ok(rc == -1 && one_line(err), "simulating nothing is refused: %s", err);

    /* Lists that do not belong together. */
    merak_schedule a[2], b[2];
    build_all(MERAK_SCHEDULE_GPIPE, 2, 4, a);
    build_all(MERAK_SCHEDULE_GPIPE, 2, 5, b);
    merak_schedule mixed[2] = {a[0], b[1]};
    err[0] = 0;
    rc = simulate(mixed, 2, NULL, NULL);
    tap_ok(rc == -1 && one_line(err), "lists with different M are refused: %s", err);
    free_all(a, 2);
    free_all(b, 2);
}

/* Builds S stages of `kind`, lets `mutate` break them, simulates, and
 * expects failure with every needle in the message. */
typedef void (*mutator)(merak_schedule *sch);

static void expect_fail(merak_schedule_kind kind, int S, int M, mutator mutate, const char *what,
                        const char *needle1, const char *needle2)
{
    merak_schedule sch[MAX_S];
    if (build_all(kind, S, M, sch)) {
        tap_ok(0, "%s: build failed: %s", what, err);
        return;
    }
    mutate(sch);
    err[0] = 0;
    int rc = simulate(sch, S, NULL, NULL);
    tap_ok(rc == -1 && one_line(err) && strstr(err, needle1) && (!needle2 || strstr(err, needle2)),
           "%s is caught: %s", what, err);
    free_all(sch, S);
}

/* Stage 0 sends mb 0's activation only after waiting for its gradient. */
static void m_send_after_wait(merak_schedule *sch)
{
    move_after(&sch[0], find(&sch[0], MERAK_I_SEND_ACT, 0), find(&sch[0], MERAK_I_WAIT_GRAD, 0));
}
static void m_drop_send(merak_schedule *sch) { drop(&sch[1], find(&sch[1], MERAK_I_SEND_ACT, 3)); }
static void m_drop_send_grad(merak_schedule *sch) { drop(&sch[2], find(&sch[2], MERAK_I_SEND_GRAD, 5)); }
static void m_send_before_fwd(merak_schedule *sch)
{
    swap(&sch[1], find(&sch[1], MERAK_I_FWD, 2), find(&sch[1], MERAK_I_SEND_ACT, 2));
}
static void m_fwd_before_wait(merak_schedule *sch)
{
    swap(&sch[2], find(&sch[2], MERAK_I_WAIT_ACT, 1), find(&sch[2], MERAK_I_FWD, 1));
}
static void m_bwd_before_wait(merak_schedule *sch)
{
    swap(&sch[1], find(&sch[1], MERAK_I_WAIT_GRAD, 4), find(&sch[1], MERAK_I_BWD, 4));
}
/* The first WAIT_SENDS of stage 1 (1f1b steady state) removed. */
static void m_drop_wait_sends(merak_schedule *sch)
{
    int i = 0;
    while (sch[1].instr[i].kind != MERAK_I_WAIT_SENDS)
        i++;
    drop(&sch[1], i);
}
/* Stage 0 claims one slot fewer than it holds micro-batches. */
static void m_too_few_slots(merak_schedule *sch)
{
    sch[0].nslots--;
    sch[0].chunk_slots[0]--;
    for (int i = 0; i < sch[0].n; i++)
        if (sch[0].instr[i].mb >= 0)
            sch[0].instr[i].slot = sch[0].instr[i].mb % sch[0].nslots;
}
static void m_tail_order(merak_schedule *sch) { swap(&sch[1], sch[1].n - 3, sch[1].n - 2); }
static void m_double_fwd(merak_schedule *sch)
{
    int f = find(&sch[0], MERAK_I_FWD, 1);
    sch[0].instr[find(&sch[0], MERAK_I_FWD, 2)] = sch[0].instr[f];
}
static void m_slot_change(merak_schedule *sch) { sch[1].instr[find(&sch[1], MERAK_I_BWD, 0)].slot = 1; }
static void m_load_middle(merak_schedule *sch)
{
    sch[1].instr[find(&sch[1], MERAK_I_RECV_ACT, 0)].kind = MERAK_I_LOAD;
}

static void test_broken(void)
{
    expect_fail(MERAK_SCHEDULE_1F1B, 4, 8, m_send_after_wait, "SEND_ACT moved after WAIT_GRAD", "deadlock",
                "stage 0 stuck at #");
    expect_fail(MERAK_SCHEDULE_GPIPE, 3, 6, m_drop_send, "a dropped SEND_ACT", "deadlock", "WAIT_ACT mb 3");
    expect_fail(MERAK_SCHEDULE_1F1B, 4, 8, m_drop_send_grad, "a dropped SEND_GRAD", "deadlock",
                "WAIT_GRAD mb 5");
    expect_fail(MERAK_SCHEDULE_1F1B, 3, 5, m_send_before_fwd, "SEND_ACT before FWD", "SEND_ACT before its FWD",
                NULL);
    expect_fail(MERAK_SCHEDULE_GPIPE, 4, 4, m_fwd_before_wait, "FWD before WAIT_ACT", "before its activation",
                NULL);
    expect_fail(MERAK_SCHEDULE_1F1B, 3, 6, m_bwd_before_wait, "BWD before WAIT_GRAD", "before its gradient",
                NULL);
    expect_fail(MERAK_SCHEDULE_1F1B, 4, 8, m_drop_wait_sends, "a missing WAIT_SENDS before slot reuse",
                "missing WAIT_SENDS", NULL);
    expect_fail(MERAK_SCHEDULE_1F1B, 4, 8, m_too_few_slots, "two live micro-batches in one slot",
                "still holds live mb", NULL);
    expect_fail(MERAK_SCHEDULE_GPIPE, 2, 3, m_tail_order, "REDUCE_TIED after REDUCE_DP", "must end with",
                NULL);
    expect_fail(MERAK_SCHEDULE_GPIPE, 2, 4, m_double_fwd, "a micro-batch forwarded twice", "forwarded twice",
                NULL);
    expect_fail(MERAK_SCHEDULE_GPIPE, 2, 4, m_slot_change, "a micro-batch changing slot", "changes slot", NULL);
    expect_fail(MERAK_SCHEDULE_GPIPE, 3, 2, m_load_middle, "LOAD on a middle stage", "middle stage", NULL);
}

/* Fine when sends are buffered, deadlocked when a send completes only
 * against a posted receive: each stage waits for its sends before posting
 * the receive the other stage's send needs. */
static void test_rendezvous_only(void)
{
#define I(k, mb, slot) {MERAK_I_##k, mb, slot, 0}
#define TAIL I(WAIT_SENDS, -1, -1), I(REDUCE_TIED, -1, -1), I(REDUCE_DP, -1, -1), I(OPTIMIZER_STEP, -1, -1)
    merak_instr s0[] = {
        I(LOAD, 0, 0), I(FWD, 0, 0), I(SEND_ACT, 0, 0),
        I(LOAD, 1, 1), I(FWD, 1, 1), I(SEND_ACT, 1, 1),
        I(WAIT_SENDS, -1, -1), I(RECV_GRAD, 0, 0), I(RECV_GRAD, 1, 1),
        I(WAIT_GRAD, 0, 0), I(BWD, 0, 0), I(WAIT_GRAD, 1, 1), I(BWD, 1, 1), TAIL,
    };
    merak_instr s1[] = {
        I(RECV_ACT, 0, 0), I(LOAD, 0, 0), I(WAIT_ACT, 0, 0), I(FWD, 0, 0), I(BWD, 0, 0),
        I(SEND_GRAD, 0, 0), I(WAIT_SENDS, -1, -1),
        I(RECV_ACT, 1, 0), I(LOAD, 1, 0), I(WAIT_ACT, 1, 0), I(FWD, 1, 0), I(BWD, 1, 0),
        I(SEND_GRAD, 1, 0), TAIL,
    };
#undef I
#undef TAIL
    merak_schedule sch[2] = {
        {.stages = 2, .stage = 0, .micro_batches = 2, .chunks = 1, .instr = s0, .n = (int)(sizeof s0 / sizeof *s0),
         .nslots = 2, .chunk_slots = {2}},
        {.stages = 2, .stage = 1, .micro_batches = 2, .chunks = 1, .instr = s1, .n = (int)(sizeof s1 / sizeof *s1),
         .nslots = 1, .chunk_slots = {1}},
    };
    err[0] = 0;
    int rc = simulate(sch, 2, NULL, NULL);
    /* eager runs first, so a rendezvous message means eager passed */
    tap_ok(rc == -1 && strstr(err, "rendezvous") && strstr(err, "deadlock") &&
               strstr(err, "stage 0 stuck at #6 WAIT_SENDS") && strstr(err, "; stage 1 stuck at #6 WAIT_SENDS"),
           "a send-send cycle deadlocks only with rendezvous sends: %s", err);

    /* The same lists with the receives posted first run fine. */
    s0[6] = (merak_instr){MERAK_I_RECV_GRAD, 0, 0, 0};
    s0[7] = (merak_instr){MERAK_I_RECV_GRAD, 1, 1, 0};
    s0[8] = (merak_instr){MERAK_I_WAIT_SENDS, -1, -1, 0};
    int ticks = 0, peak[2];
    rc = simulate(sch, 2, peak, &ticks);
    tap_ok(rc == 0 && peak[0] == 2 && peak[1] == 1, "posting the receive before waiting fixes it (%d ticks)%s%s",
           ticks, rc ? ": " : "", rc ? err : "");
}

/* Every BWD split into BWD_INPUT, then (after the gradient is sent, as a
 * zero-bubble schedule would) BWD_WEIGHT: the simulator's split-backward
 * rules.  The schedule owns the new list. */
static void split_backward(merak_schedule *s, int weight_first)
{
    merak_instr *out = malloc((size_t)(s->n + s->micro_batches) * sizeof *out);
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        merak_instr in = s->instr[i];
        if (in.kind != MERAK_I_BWD) {
            out[n++] = in;
            continue;
        }
        merak_instr bi = {MERAK_I_BWD_INPUT, in.mb, in.slot, in.chunk},
                    bw = {MERAK_I_BWD_WEIGHT, in.mb, in.slot, in.chunk};
        out[n++] = weight_first ? bw : bi;
        if (i + 1 < s->n && s->instr[i + 1].kind == MERAK_I_SEND_GRAD)
            out[n++] = s->instr[++i];
        out[n++] = weight_first ? bi : bw;
    }
    free(s->instr);
    s->instr = out;
    s->n = n;
}

static void test_split_backward(void)
{
    const int S = 3, M = 4;
    merak_schedule sch[3];
    int peak[3], ticks = 0;
    build_all(MERAK_SCHEDULE_GPIPE, S, M, sch);
    for (int i = 0; i < S; i++)
        split_backward(&sch[i], 0);
    int rc = simulate(sch, S, peak, &ticks);
    tap_ok(rc == 0 && peak[0] == M && ticks <= (M + S - 1) * 3,
           "gpipe with split backward (BWD_INPUT, SEND_GRAD, BWD_WEIGHT) runs: %d ticks%s%s", ticks,
           rc ? ": " : "", rc ? err : "");
    free_all(sch, S);

    build_all(MERAK_SCHEDULE_GPIPE, S, M, sch);
    split_backward(&sch[1], 1);
    err[0] = 0;
    rc = simulate(sch, S, NULL, NULL);
    tap_ok(rc == -1 && strstr(err, "BWD_WEIGHT without"), "BWD_WEIGHT before BWD_INPUT is caught: %s", err);
    free_all(sch, S);
}

/* Every generator with and without recomputation, S in 2..16, M in S..4S
 * (interleaved with V = 2): deadlock-free in both send modes, every stage
 * within its slots and recompute buffers; scp beats 1f1b with
 * recomputation, zb-h1 beats 1f1b without, and zb-h1 holds no more
 * micro-batches than 1f1b (S); interleaved beats 1f1b without
 * recomputation whenever S divides M. */
static void test_generators(void)
{
    int bad = 0, cases = 0, worse_scp = 0, worse_zb = 0, worse_il = 0, zb_mem = 0, rc_peak = 0;
    char first_bad[1200] = "";
    for (int S = 2; S <= 16; S++)
        for (int M = S; M <= 4 * S; M++) {
            double t[MERAK_SCHEDULE_COUNT_][2];   /* [kind][recompute] makespans */
            for (int kind = 0; kind < MERAK_SCHEDULE_COUNT_; kind++)
                for (int rc = 0; rc < 2; rc++) {
                    merak_schedule sch[16];
                    int peak[16];
                    merak_sim_result r = {.peak = peak};
                    cases++;
                    if (build_rc((merak_schedule_kind)kind, S, M, rc, sch) ||
                        merak_schedule_simulate(sch, S, NULL, &r, err, sizeof err)) {
                        if (!bad++)
                            snprintf(first_bad, sizeof first_bad, "%s S=%d M=%d recompute=%d: %s",
                                     merak_schedule_name((merak_schedule_kind)kind), S, M, rc, err);
                        continue;
                    }
                    t[kind][rc] = r.makespan;
                    for (int i = 0; i < S; i++) {
                        if (kind == MERAK_SCHEDULE_ZB_H1 && peak[i] > S)
                            zb_mem++;
                        /* a recomputing stage holds one micro-batch's (chunk's) activations */
                        if (rc && sch[i].recompute && kind != MERAK_SCHEDULE_ZB_H1 &&
                            kind != MERAK_SCHEDULE_GPIPE && peak[i] != 1)
                            rc_peak++;
                    }
                    free_all(sch, S);
                }
            if (!bad) {
                worse_scp += t[MERAK_SCHEDULE_SCP][1] >= t[MERAK_SCHEDULE_1F1B][1];
                worse_zb += t[MERAK_SCHEDULE_ZB_H1][0] >= t[MERAK_SCHEDULE_1F1B][0];
                worse_il += M % S == 0 && t[MERAK_SCHEDULE_INTERLEAVED][0] >= t[MERAK_SCHEDULE_1F1B][0];
            }
        }
    tap_ok(bad == 0, "%d generator cases (%d schedules x recompute on/off, S 2..16, M S..4S) simulate%s%s",
           cases, MERAK_SCHEDULE_COUNT_, bad ? ": first failure: " : "", first_bad);
    tap_ok(worse_scp == 0, "scp is shorter than 1f1b with recomputation in every case (%d not)", worse_scp);
    tap_ok(worse_zb == 0, "zb-h1 is shorter than 1f1b without recomputation in every case (%d not)", worse_zb);
    tap_ok(worse_il == 0, "interleaved (V = 2) is shorter than 1f1b without recomputation whenever S divides M "
           "(%d not)", worse_il);
    tap_ok(zb_mem == 0, "zb-h1 never holds more than S micro-batches on a stage (%d over)", zb_mem);
    tap_ok(rc_peak == 0, "1f1b, scp and interleaved recomputing stages hold one micro-batch's (chunk's) "
           "activations (%d not)", rc_peak);

    /* Known values at unit costs: 1f1b (M + S - 1) * 3, with recompute * 4;
     * the last stage of scp keeps its activations. */
    merak_schedule sch[4];
    int peak[4], ticks = 0;
    build_rc(MERAK_SCHEDULE_1F1B, 4, 8, 1, sch);
    int rc = simulate(sch, 4, peak, &ticks);
    tap_ok(rc == 0 && ticks == (8 + 3) * 4 && sch[3].recompute && sch[0].npool == 1,
           "1f1b S=4 M=8 with recompute: %d time units, one recompute buffer", ticks);
    free_all(sch, 4);
    build_rc(MERAK_SCHEDULE_SCP, 4, 8, 1, sch);
    rc = simulate(sch, 4, peak, &ticks);
    tap_ok(rc == 0 && !sch[3].recompute && sch[2].recompute && peak[3] == 1 &&
               find(&sch[2], MERAK_I_RECOMPUTE, 0) < find(&sch[2], MERAK_I_WAIT_GRAD, 0),
           "scp S=4 M=8: last stage keeps its activations, recompute before the wait (%d units)", ticks);
    free_all(sch, 4);
}

/* Interleaved with V = 2, 3, 4 chunks, S in 2..16, M in S..4S, with and
 * without recomputation: deadlock-free, every chunk's micro-batches
 * forwarded and backwarded in order; whenever S divides M the step is
 * Megatron-LM's (M + (S-1)/V) * 3 at unit costs and stage 0 holds
 * (V-1)S + 2(S-1) + 1 chunk units at most (all M*V if fewer).  Refusals:
 * V = 1, V with another schedule, one stage. */
static void test_interleaved(void)
{
    int bad = 0, cases = 0, order = 0, timing = 0, mem = 0;
    char first_bad[1200] = "";
    for (int V = 2; V <= 4; V++)
        for (int S = 2; S <= 16; S++)
            for (int M = S; M <= 4 * S; M++)
                for (int rc = 0; rc < 2; rc++) {
                    unsigned char flags[16];
                    memset(flags, rc, sizeof flags);
                    merak_schedule_spec sp = {MERAK_SCHEDULE_INTERLEAVED, S, M, flags, V};
                    merak_schedule sch[16];
                    int peak[16];
                    merak_sim_result r = {.peak = peak};
                    cases++;
                    if (merak_schedule_build_all(&sp, sch, err, sizeof err) ||
                        merak_schedule_simulate(sch, S, NULL, &r, err, sizeof err)) {
                        if (!bad++)
                            snprintf(first_bad, sizeof first_bad, "V=%d S=%d M=%d recompute=%d: %s", V, S, M,
                                     rc, err);
                        continue;
                    }
                    for (int i = 0; i < S; i++) {
                        int nf[16] = {0}, nb[16] = {0};
                        for (int j = 0; j < sch[i].n; j++) {
                            const merak_instr *in = &sch[i].instr[j];
                            if (in->kind == MERAK_I_FWD && in->mb != nf[in->chunk]++)
                                order++;
                            if (in->kind == MERAK_I_BWD && in->mb != nb[in->chunk]++)
                                order++;
                        }
                    }
                    if (M % S == 0 && fabs(r.makespan - 3.0 * (M + (S - 1.0) / V) * (rc ? 4.0 / 3 : 1)) > 1e-9)
                        timing++;
                    int w0 = (V - 1) * S + 2 * (S - 1) + 1;
                    if (!rc && M % S == 0 && peak[0] != (w0 < M * V ? w0 : M * V))
                        mem++;
                    free_all(sch, S);
                }
    tap_ok(bad == 0, "%d interleaved cases (V 2..4, S 2..16, M S..4S, recompute on/off) simulate%s%s", cases,
           bad ? ": first failure: " : "", first_bad);
    tap_ok(order == 0, "every chunk forwards and backwards its micro-batches in order (%d out of order)", order);
    tap_ok(timing == 0, "when S divides M the step is (M + (S-1)/V) * 3 units, * 4/3 recomputing (%d not)",
           timing);
    tap_ok(mem == 0, "when S divides M stage 0 holds (V-1)S + 2(S-1) + 1 chunks (%d not)", mem);

    merak_schedule s;
    merak_schedule_spec bads[] = {{MERAK_SCHEDULE_INTERLEAVED, 4, 8, NULL, 1},
                                  {MERAK_SCHEDULE_INTERLEAVED, 4, 8, NULL, MERAK_MAX_CHUNKS + 1},
                                  {MERAK_SCHEDULE_1F1B, 4, 8, NULL, 2},
                                  {MERAK_SCHEDULE_INTERLEAVED, 1, 8, NULL, 2},
                                  {MERAK_SCHEDULE_INTERLEAVED, 4, 3, NULL, 2}};
    const char *needle[] = {"2 to 64 virtual stages", "2 to 64 virtual stages", "need the interleaved schedule",
                            "at least 2 pipeline stages", "M = 3, S = 4"};
    for (size_t i = 0; i < sizeof bads / sizeof *bads; i++) {
        err[0] = 0;
        int rc = merak_schedule_build(&bads[i], 0, &s, err, sizeof err);
        tap_ok(rc == -1 && one_line(err) && strstr(err, needle[i]), "%s S=%d M=%d V=%d refused: %s",
               merak_schedule_name(bads[i].kind), bads[i].stages, bads[i].micro_batches, bads[i].virtual_stages,
               err);
        merak_schedule_free(&s);
    }
}

/* Order on the links: the messages one stage sends another (activations
 * and gradients apart: (micro-batch, the receiving chunk)), in the order of
 * its sends, against the receiving stage's receives in their order.  A
 * transport without tags (NCCL's send and receive) pairs them by that
 * order alone.  The number of links whose orders differ; *first says the
 * first. */
static int link_mismatches(const merak_schedule *sch, int S, char *first, size_t flen)
{
    int bad = 0;
    for (int a = 0; a < S; a++)
        for (int b = 0; b < S; b++)
            for (int grad = 0; grad < 2; grad++) {
                int ns = 0, nr = 0, peer, chunk, ok;
                int *sent = malloc((size_t)(2 * sch[a].n + 2) * sizeof *sent);
                int *got = malloc((size_t)(2 * sch[b].n + 2) * sizeof *got);
                for (int i = 0; i < sch[a].n; i++) {
                    const merak_instr *in = &sch[a].instr[i];
                    const int is_grad = in->kind == MERAK_I_SEND_GRAD || in->kind == MERAK_I_RECV_GRAD;
                    if (is_grad == grad && merak_instr_route(in, a, S, &peer, &chunk) == 1 && peer == b)
                        sent[ns++] = in->mb, sent[ns++] = chunk;
                }
                for (int i = 0; i < sch[b].n; i++) {
                    const merak_instr *in = &sch[b].instr[i];
                    const int is_grad = in->kind == MERAK_I_SEND_GRAD || in->kind == MERAK_I_RECV_GRAD;
                    if (is_grad == grad && merak_instr_route(in, b, S, &peer, &chunk) == 0 && peer == a)
                        got[nr++] = in->mb, got[nr++] = chunk;
                }
                ok = ns == nr && !memcmp(sent, got, (size_t)ns * sizeof *sent);
                if (!ok && !bad++) {
                    int k = 0;
                    while (k < ns && k < nr && sent[k] == got[k])
                        k++;
                    k &= ~1;
                    snprintf(first, flen, "%s %d -> %d, message %d: sent mb %d chunk %d, received as mb %d chunk %d",
                             grad ? "gradients" : "activations", a, b, k / 2, k < ns ? sent[k] : -1,
                             k < ns ? sent[k + 1] : -1, k < nr ? got[k] : -1, k < nr ? got[k + 1] : -1);
                }
                free(sent), free(got);
            }
    return bad;
}

/* A device that runs 1 ms behind each mark: mark i is reached i ms after
 * mark 0, whatever the host's clock says.  fake_bad: that mark's time
 * cannot be read; fake_sync_fails: synchronize fails. */
static int fake_n, fake_bad = -1, fake_sync_fails;
static int fake_sync(void) { return fake_sync_fails ? -1 : 0; }
static int fake_mark(void) { return fake_n++; }
static void fake_clear(void) { fake_n = 0; }
static double fake_seconds(int a, int b)
{
    if (a < 0 || b < 0 || a >= fake_n || b >= fake_n || a == fake_bad || b == fake_bad)
        return -1;
    return (b - a) * 1e-3;
}

static void test_trace_device(void)
{
    merak_kernels dev;
    memset(&dev, 0, sizeof dev);
    dev.synchronize = fake_sync;
    dev.mark = fake_mark;
    dev.mark_seconds = fake_seconds;
    dev.marks_clear = fake_clear;

    merak_trace t;
    memset(&t, 0, sizeof t);
    t.origin = 100.0;
    fake_n = 7; /* marks left from an earlier step: begin clears them */
    merak_trace_device_begin(&t, &dev);
    tap_ok(t.dev == &dev && fake_n == 1, "trace: device time begins with mark 0");
    merak_stamp a = merak_trace_stamp(&t), b = merak_trace_stamp(&t);
    merak_trace_add_stamped(&t, 0, MERAK_I_FWD, 0, 0, a, b);                    /* marks 1, 2 */
    merak_stamp c = merak_trace_stamp(&t), d = merak_trace_stamp(&t);
    merak_trace_add_stamped(&t, 0, MERAK_TRACE_TP_ALLREDUCE, 0, 0, c, d);       /* marks 3, 4 */
    merak_trace_add(&t, 0, MERAK_I_SEND_ACT, 0, 0, 200.0, 201.0);               /* host times */
    fake_bad = 6;
    merak_stamp e = merak_trace_stamp(&t), f = merak_trace_stamp(&t);
    merak_trace_add_stamped(&t, 0, MERAK_I_BWD, 0, 0, e, f);                    /* marks 5, 6: 6 unreadable */
    const double host_e = e.host - t.origin, host_f = f.host - t.origin;
    /* in flight: the start the device's (mark 7), the end what the host saw
     * (here before the device's start: then the start) */
    merak_stamp fl = merak_trace_stamp(&t);
    merak_trace_add_stamped(&t, 0, MERAK_TRACE_DP_BUCKETS, -1, 0, fl, (merak_stamp){t.origin + 1e6, -1});
    merak_trace_add_stamped(&t, 0, MERAK_TRACE_DP_BUCKETS, -1, 0, fl, (merak_stamp){t.origin, -1});
    tap_ok(a.mark == 1 && b.mark == 2 && f.mark == 6 && fl.mark == 7 && t.n == 6, "trace: each stamp a mark");
    merak_trace_device_end(&t);
    const double z = t.dev0 - t.origin;
    tap_ok(fabs(t.ev[0].start - (z + 1e-3)) < 1e-12 && fabs(t.ev[0].end - (z + 2e-3)) < 1e-12,
           "trace: a stamped event takes the device's times (%.6f..%.6f, mark 0 at %.6f)", t.ev[0].start,
           t.ev[0].end, z);
    tap_ok(fabs(t.ev[1].start - (z + 3e-3)) < 1e-12 && fabs(t.ev[1].end - (z + 4e-3)) < 1e-12,
           "trace: a nested one too, inside its instruction's");
    tap_ok(t.ev[2].start == 100.0 && t.ev[2].end == 101.0, "trace: an event added with times keeps them");
    tap_ok(t.ev[3].start == host_e && t.ev[3].end == host_f, "trace: a mark that cannot be read keeps the host's times");
    tap_ok(fabs(t.ev[4].start - (z + 7e-3)) < 1e-12 && t.ev[4].end == 1e6 && t.ev[5].end == t.ev[5].start &&
               t.ev[5].start == t.ev[4].start,
           "trace: an end without a mark keeps the host's time, never before the device's start");
    tap_ok(t.dev == NULL && t.nmarked == 0, "trace: device time ends with the step");
    merak_stamp g = merak_trace_stamp(&t);
    tap_ok(g.mark < 0 && fake_n == 8, "trace: no marks between steps");

    /* a device that cannot synchronise, and a host backend: the host's times */
    fake_bad = -1;
    fake_sync_fails = 1;
    merak_trace_device_begin(&t, &dev);
    tap_ok(t.dev == NULL, "trace: no device time when the device cannot synchronise");
    fake_sync_fails = 0;
    merak_kernels host;
    memset(&host, 0, sizeof host);
    host.synchronize = fake_sync;
    merak_trace_device_begin(&t, &host);
    merak_stamp h = merak_trace_stamp(&t), i = merak_trace_stamp(&t);
    merak_trace_add_stamped(&t, 0, MERAK_I_FWD, 1, 0, h, i);
    merak_trace_device_end(&t);
    tap_ok(h.mark < 0 && t.ev[6].start == h.host - t.origin && t.ev[6].end == i.host - t.origin,
           "trace: a backend without marks keeps the host's times");
    merak_stamp none = merak_trace_stamp(NULL);
    merak_trace_add_stamped(NULL, 0, MERAK_I_FWD, 0, 0, none, none);
    merak_trace_device_begin(NULL, &dev);
    merak_trace_device_end(NULL);
    tap_ok(none.mark < 0 && none.host == 0, "trace: a NULL trace is no trace");
    merak_trace_free(&t);
}

static void test_link_order(void)
{
    static const merak_schedule_kind kinds[] = {MERAK_SCHEDULE_GPIPE, MERAK_SCHEDULE_1F1B, MERAK_SCHEDULE_SCP,
                                                MERAK_SCHEDULE_ZB_H1, MERAK_SCHEDULE_INTERLEAVED};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        const int inter = kinds[k] == MERAK_SCHEDULE_INTERLEAVED;
        int cases = 0, bad = 0;
        char first[1400] = "";
        for (int V = inter ? 2 : 1; V <= (inter ? 4 : 1); V++)
            for (int S = 2; S <= MAX_S; S++)
                for (int M = kinds[k] == MERAK_SCHEDULE_GPIPE ? 1 : S; M <= 3 * S; M++)
                    for (int rc = 0; rc < 2; rc++) {
                        unsigned char flags[MAX_S];
                        memset(flags, rc, sizeof flags);
                        merak_schedule_spec sp = {kinds[k], S, M, flags, V};
                        merak_schedule sch[MAX_S], ev[MAX_S];
                        if (merak_schedule_build_all(&sp, sch, err, sizeof err) < 0) {
                            if (!bad++)
                                snprintf(first, sizeof first, "S=%d M=%d V=%d: %s", S, M, V, err);
                            continue;
                        }
                        int built = 0;
                        while (built < S && merak_schedule_build_eval(&sch[built], M, &ev[built], err, sizeof err) == 0)
                            built++;
                        char where[256];
                        cases += 2;
                        if (link_mismatches(sch, S, where, sizeof where) && !bad++)
                            snprintf(first, sizeof first, "S=%d M=%d V=%d recompute=%d: %s", S, M, V, rc, where);
                        if ((built < S || link_mismatches(ev, S, where, sizeof where)) && !bad++)
                            snprintf(first, sizeof first, "S=%d M=%d V=%d evaluation: %s", S, M, V,
                                     built < S ? err : where);
                        free_all(ev, built);
                        free_all(sch, S);
                    }
        tap_ok(bad == 0 && cases > 0, "%s: on every link the receives are posted in the order of the sends (%d lists, "
               "training and evaluation)%s%s", merak_schedule_name(kinds[k]), cases, bad ? ": " : "", first);
    }
    /* the check can fail: two gradient receives swapped */
    merak_schedule sch[4];
    int swapped = build_all(MERAK_SCHEDULE_GPIPE, 4, 4, sch) == 0;
    int a = swapped ? find(&sch[1], MERAK_I_RECV_GRAD, 1) : -1, b = swapped ? find(&sch[1], MERAK_I_RECV_GRAD, 2) : -1;
    char where[256] = "";
    if (a >= 0 && b >= 0)
        swap(&sch[1], a, b);
    tap_ok(a >= 0 && b >= 0 && link_mismatches(sch, 4, where, sizeof where) == 1 &&
               strstr(where, "gradients 2 -> 1, message 1: sent mb 1 chunk 0, received as mb 2"),
           "two gradient receives swapped on stage 1 are one link out of order (%s)", where);
    if (swapped)
        free_all(sch, 4);
}

/* With costs: a slow link and a slow stage lengthen the step as they
 * should, and the bubble and busy times add up. */
static void test_costs(void)
{
    merak_schedule sch[2];
    build_all(MERAK_SCHEDULE_GPIPE, 2, 1, sch);
    merak_sim_costs c[2] = {{1, 2, 1, 1, 0.5}, {3, 6, 3, 3, 0.25}};
    double busy[2];
    merak_sim_result r = {.busy = busy};
    int rc = merak_schedule_simulate(sch, 2, c, &r, err, sizeof err);
    /* F0 [0,1], arrives 1.5, F1 [1.5,4.5], B1 [4.5,10.5], arrives 10.75, B0 [10.75,12.75] */
    tap_ok(rc == 0 && fabs(r.makespan - 12.75) < 1e-12 && busy[0] == 3 && busy[1] == 9 &&
               fabs(r.bubble - (1 - 12 / 25.5)) < 1e-12,
           "one micro-batch over two stages with link delays: makespan %g, bubble %.3f%s%s", r.makespan,
           r.bubble, rc ? ": " : "", rc ? err : "");
    free_all(sch, 2);
}

/* ------------------------------------------------------------------ Merak's scp, the reference */

/* Merak's own full_critical_path_1f1b streams (v1 runtime/schedule.py, as
 * ../shared/notes/merak-algorithms.md s. 3.3 lists them for P = 4, M = 8),
 * written out for any P >= 3 (Merak's deadlocks at P = 2) and M >= max(P,
 * 4), in our instruction set: Merak's p2p is blocking, so each of its send,
 * receive or fused pair is posted and then waited at once; every stage but
 * the last checkpoints every forward (our FWD on a recomputing stage) and
 * recomputes inside the backward, or before the gradient's receive where
 * Merak hoists it (R+RG).  Slots and recompute buffers are per micro-batch
 * (Merak's buffer counts are not what is compared). */
typedef struct mlist {
    merak_schedule *s;
    int cap;
} mlist;

static void m_put(mlist *l, merak_instr_kind k, int mb)
{
    merak_schedule *s = l->s;
    if (s->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        merak_instr *in = realloc(s->instr, (size_t)l->cap * sizeof *s->instr);
        if (!in)
            abort();
        s->instr = in;
    }
    s->instr[s->n++] = (merak_instr){k, mb, mb < 0 ? -1 : mb, 0};
}

/* blocking ops */
static void m_fwd(mlist *l, int k, int P, int s)
{
    if (s == 0 || s == P - 1)
        m_put(l, MERAK_I_LOAD, k);
    m_put(l, MERAK_I_FWD, k);
}
static void m_ra(mlist *l, int k) { m_put(l, MERAK_I_RECV_ACT, k), m_put(l, MERAK_I_WAIT_ACT, k); }
static void m_rg(mlist *l, int k) { m_put(l, MERAK_I_RECV_GRAD, k), m_put(l, MERAK_I_WAIT_GRAD, k); }
static void m_sa(mlist *l, int k) { m_put(l, MERAK_I_SEND_ACT, k), m_put(l, MERAK_I_WAIT_SENDS, k); }
static void m_sg(mlist *l, int k) { m_put(l, MERAK_I_SEND_GRAD, k), m_put(l, MERAK_I_WAIT_SENDS, k); }
static void m_sa_rg(mlist *l, int a, int g)
{
    m_put(l, MERAK_I_SEND_ACT, a), m_put(l, MERAK_I_RECV_GRAD, g);
    m_put(l, MERAK_I_WAIT_GRAD, g), m_put(l, MERAK_I_WAIT_SENDS, a);
}
static void m_sg_ra(mlist *l, int g, int a)
{
    m_put(l, MERAK_I_SEND_GRAD, g), m_put(l, MERAK_I_RECV_ACT, a);
    m_put(l, MERAK_I_WAIT_ACT, a), m_put(l, MERAK_I_WAIT_SENDS, g);
}
/* backward of k: a recompute first on recomputing stages unless hoisted */
static void m_bwd(mlist *l, int k, int rc)
{
    if (rc)
        m_put(l, MERAK_I_RECOMPUTE, k);
    m_put(l, MERAK_I_BWD, k);
}

static void merak_scp_build(int P, int M, int s, merak_schedule *out)
{
    memset(out, 0, sizeof *out);
    out->stages = P, out->stage = s, out->micro_batches = M;
    out->chunks = 1, out->nslots = out->chunk_slots[0] = M, out->npool = M, out->recompute = s < P - 1;
    mlist l = {out, 0};
    int last = s == P - 1, first = s == 0;
    if (last) {
        /* RA0 F0;B0;SG0 RA1 F1;B1;SG1 RA2 F2;B2;SG+RA2/3 F3;B3;...;SG7 */
        for (int k = 0; k < M; k++) {
            if (k == 0)
                m_ra(&l, 0);
            else if (k <= 2)
                m_sg(&l, k - 1), m_ra(&l, k);
            else
                m_sg_ra(&l, k - 1, k);
            m_fwd(&l, k, P, s);
            m_bwd(&l, k, 0);
        }
        m_sg(&l, M - 1);
    } else if (s == P - 2) {
        /* RA0 F*0;SA0;RA1 F*1;RA2 F2;R0+RG0 SA1 B0;SG0 R1+RG1 SA2 B1; then 1F1B */
        if (!first) m_ra(&l, 0);
        m_fwd(&l, 0, P, s);
        m_sa(&l, 0);
        if (!first) m_ra(&l, 1);
        m_fwd(&l, 1, P, s);
        if (!first) m_ra(&l, 2);
        m_fwd(&l, 2, P, s);
        m_put(&l, MERAK_I_RECOMPUTE, 0), m_rg(&l, 0), m_sa(&l, 1), m_bwd(&l, 0, 0);
        if (!first) m_sg(&l, 0);
        m_put(&l, MERAK_I_RECOMPUTE, 1), m_rg(&l, 1), m_sa(&l, 2), m_bwd(&l, 1, 0);
        for (int k = 3; k < M; k++) {
            if (first) m_fwd(&l, k, P, s);
            else m_sg_ra(&l, k - 2, k), m_fwd(&l, k, P, s);
            m_sa_rg(&l, k, k - 1), m_bwd(&l, k - 1, 1);
        }
        if (!first) m_sg(&l, M - 2);
        m_rg(&l, M - 1), m_bwd(&l, M - 1, 1);
        if (!first) m_sg(&l, M - 1);
    } else {
        /* 1F1B; cool-down recomputes hoisted before their receive; on P-3
         * the first fused send+receive split and mb 0 pre-recomputed */
        int w = P - s;   /* forwards before the first backward */
        int j = 0;       /* next backward */
        for (int k = 0; k < M; k++) {
            if (k < w) {
                if (!first) m_ra(&l, k);
            } else {
                if (!first) m_sg_ra(&l, j - 1, k);
            }
            m_fwd(&l, k, P, s);
            if (k < w - 1) {
                m_sa(&l, k);
                continue;
            }
            if (k == w - 1 && s == P - 3) {
                m_sa(&l, k), m_put(&l, MERAK_I_RECOMPUTE, 0), m_rg(&l, 0), m_bwd(&l, 0, 0);
            } else {
                m_sa_rg(&l, k, j), m_bwd(&l, j, 1);
            }
            j++;
        }
        for (; j < M; j++) {
            if (!first) m_sg(&l, j - 1);
            m_put(&l, MERAK_I_RECOMPUTE, j), m_rg(&l, j), m_bwd(&l, j, 0);
        }
        if (!first) m_sg(&l, M - 1);
    }
    m_put(&l, MERAK_I_WAIT_SENDS, -1);
    m_put(&l, MERAK_I_REDUCE_TIED, -1);
    m_put(&l, MERAK_I_REDUCE_DP, -1);
    m_put(&l, MERAK_I_OPTIMIZER_STEP, -1);
}

/* Our scp never takes longer than Merak's own generator under the same
 * costs (the issue's bar): unit costs, a slower backward, slow links, and
 * every stage different. */
static void test_merak_scp(void)
{
    int cases = 0, worse = 0, failed = 0, shorter = 0;
    char first[1200] = "";
    for (int c = 0; c < 4; c++)
        for (int P = 3; P <= 16; P++)
            for (int M = P < 4 ? 4 : P; M <= 4 * P; M++) {
                merak_schedule ours[16], theirs[16];
                merak_sim_costs k[16];
                for (int s = 0; s < P; s++) {
                    static const merak_sim_costs set[3] = {{1, 2, 1, 1, 0}, {1, 3, 1.5, 1, 0}, {1, 2, 1, 1, 0.3}};
                    k[s] = c < 3 ? set[c] : (merak_sim_costs){1 + 0.1 * (s % 3), 2 + 0.15 * (s % 4), 1, 1 + 0.05 * s, 0.1};
                    merak_scp_build(P, M, s, &theirs[s]);
                }
                merak_sim_result a = {0}, b = {0};
                cases++;
                if (build_rc(MERAK_SCHEDULE_SCP, P, M, 1, ours) < 0 ||
                    merak_schedule_simulate(ours, P, k, &a, err, sizeof err) < 0 ||
                    merak_schedule_simulate(theirs, P, k, &b, err, sizeof err) < 0) {
                    if (!failed++)
                        snprintf(first, sizeof first, "costs %d P=%d M=%d: %s", c, P, M, err);
                } else if (a.makespan > b.makespan + 1e-9) {
                    if (!worse++ && !failed)
                        snprintf(first, sizeof first, "costs %d P=%d M=%d: ours %g, Merak's %g", c, P, M,
                                 a.makespan, b.makespan);
                } else {
                    shorter += a.makespan < b.makespan - 1e-9;
                }
                free_all(ours, P);
                free_all(theirs, P);
            }
    tap_ok(failed == 0 && worse == 0,
           "scp is never longer than Merak's own generator: %d cases (4 cost sets, P 3..16, M max(P,4)..4P), "
           "%d shorter, %d longer, %d failed%s%s", cases, shorter, worse, failed, first[0] ? ": " : "", first);
}

/* Recompute instructions broken on purpose. */
static void m_drop_recompute(merak_schedule *sch) { drop(&sch[1], find(&sch[1], MERAK_I_RECOMPUTE, 2)); }
static void m_keep_stage_recomputes(merak_schedule *sch) { sch[1].recompute = 0; }
static void m_small_pool(merak_schedule *sch)
{
    /* two recomputes before the first backward need two buffers */
    move_after(&sch[0], find(&sch[0], MERAK_I_RECOMPUTE, 1), find(&sch[0], MERAK_I_RECOMPUTE, 0));
}

static void test_broken_recompute(void)
{
    struct { mutator m; const char *what, *needle; } cases[] = {
        {m_drop_recompute, "a dropped RECOMPUTE", "without its RECOMPUTE"},
        {m_keep_stage_recomputes, "RECOMPUTE on a stage that keeps its activations", "keeps its activations"},
        {m_small_pool, "more recomputed micro-batches than buffers", "recompute buffers"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        merak_schedule sch[3];
        build_rc(MERAK_SCHEDULE_1F1B, 3, 6, 1, sch);
        cases[i].m(sch);
        err[0] = 0;
        int rc = simulate(sch, 3, NULL, NULL);
        tap_ok(rc == -1 && one_line(err) && strstr(err, cases[i].needle), "%s is caught: %s", cases[i].what,
               err);
        free_all(sch, 3);
    }
}

/* Evaluation: the forward-only lists of every training schedule, with and
 * without recomputation, for 1 to 8 stages and 1 to 9 micro-batches, run
 * deadlock-free in the training list's slots and forward every micro-batch
 * once (makespan at unit costs: the forward of (M + S - 1) stages' worth
 * for one chunk); a backward in one, or a training list beside it, is
 * refused. */
static void test_eval(void)
{
    static const merak_schedule_kind kinds[] = {MERAK_SCHEDULE_GPIPE, MERAK_SCHEDULE_1F1B, MERAK_SCHEDULE_SCP,
                                                MERAK_SCHEDULE_ZB_H1, MERAK_SCHEDULE_INTERLEAVED};
    int cases = 0, bad = 0, slow = 0;
    merak_schedule tr[MAX_S], ev[MAX_S];
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (int S = 1; S <= MAX_S; S++)
            for (int rc = 0; rc < 2; rc++)
                for (int Me = 1; Me <= 9; Me++) {
                    const int M = kinds[k] == MERAK_SCHEDULE_GPIPE ? 3 : 2 * S;
                    if (kinds[k] == MERAK_SCHEDULE_INTERLEAVED && S < 2)
                        continue;
                    if (build_rc(kinds[k], S, M, rc, tr) < 0) {
                        bad++;
                        tap_diag("%s S=%d: %s", merak_schedule_name(kinds[k]), S, err);
                        continue;
                    }
                    int built = 0, ticks = 0;
                    while (built < S && merak_schedule_build_eval(&tr[built], Me, &ev[built], err, sizeof err) == 0)
                        built++;
                    cases++;
                    if (built < S || simulate(ev, S, NULL, &ticks) < 0) {
                        bad++;
                        tap_diag("%s S=%d M=%d recompute=%d: %s", merak_schedule_name(kinds[k]), S, Me, rc, err);
                    } else if (tr[0].chunks == 1 && ticks != Me + S - 1) {
                        slow++;
                        tap_diag("%s S=%d M=%d: evaluation takes %d forwards, not %d", merak_schedule_name(kinds[k]),
                                 S, Me, ticks, Me + S - 1);
                    }
                    free_all(ev, built);
                    free_all(tr, S);
                }
    tap_ok(cases > 500 && bad == 0, "evaluation lists of every schedule are deadlock-free (%d cases)", cases);
    tap_ok(slow == 0, "one chunk: evaluation pipelines its forwards, M + S - 1 forward times");

    /* a backward in a forward-only list, and a mixed set of lists */
    build_all(MERAK_SCHEDULE_1F1B, 2, 2, tr);
    merak_schedule_build_eval(&tr[0], 2, &ev[0], err, sizeof err);
    merak_schedule_build_eval(&tr[1], 2, &ev[1], err, sizeof err);
    merak_instr keep = ev[1].instr[2];
    ev[1].instr[2] = (merak_instr){MERAK_I_BWD, keep.mb, keep.slot, 0};
    tap_ok(simulate(ev, 2, NULL, NULL) < 0 && strstr(err, "forward-only"), "a backward in an evaluation list is refused: %s",
           err);
    ev[1].instr[2] = keep;
    merak_schedule mixed[2] = {ev[0], tr[1]};
    tap_ok(simulate(mixed, 2, NULL, NULL) < 0 && strstr(err, "forward-only"), "a training list beside an evaluation "
           "list is refused: %s", err);
    free_all(ev, 2);
    free_all(tr, 2);
}

int main(void)
{
    test_names();
    test_sweep(MERAK_SCHEDULE_GPIPE, "gpipe");
    test_sweep(MERAK_SCHEDULE_1F1B, "1f1b");
    test_refusals();
    test_broken();
    test_rendezvous_only();
    test_split_backward();
    test_generators();
    test_interleaved();
    test_costs();
    test_merak_scp();
    test_broken_recompute();
    test_eval();
    test_link_order();
    test_trace_device();
    return tap_done();
}
