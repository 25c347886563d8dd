/*
 * merak-trace - reads the Chrome trace merak-train --trace wrote and says
 * where one step's time went on every rank: compute, tensor-parallel
 * all-reduces (inside the compute), waits for pipeline transfers and
 * gradient reductions, and idle time; --svg draws the step as a pipeline.
 *
 * Exit status: 0 on success, 2 for usage errors, 1 otherwise (an unreadable
 * or malformed trace, an unwritable picture).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "internal.h"
#include "merak/merak.h"
#include "pipesvg.h"

static void usage(FILE *out)
{
    fprintf(out,
        "Usage: %s FILE.json [--step N] [--svg OUT.svg] [--simulate] [--json]\n"
        "Summarise one step of a merak-train --trace file, rank by rank.\n"
        "\n"
        "  --step N        the step to look at (default: the last one in the trace)\n"
        "  --svg OUT.svg   draw the step: one row per rank, one box per instruction\n"
        "  --simulate      also run the schedule simulator on the step's measured per-stage\n"
        "                  costs and compare its pipeline time with the measured one\n"
        "  --json          print the summary as one JSON object\n"
        "  --help          show this help and exit\n"
        "  --version       show the version and exit\n"
        "\n"
        "See merak-trace(1).\n", cli_prog);
}

typedef struct trace {
    merak_trace ev;        /* the events; lane: the rank's row; times in milliseconds */
    int nrows;
    int *pid;              /* [nrows] sorted */
    char **label;          /* [nrows] */
    int first_step, last_step;
    char about[256];       /* layout and schedule, from otherData */
    int pp, micro_batches; /* from otherData (0 if absent) */
    int virtual_stages;    /* from otherData (1 if absent) */
    char schedule[32];
    int *stage;            /* [nrows] pipeline stage of the rank, from its name, or -1 */
} trace;

static int int_of(json_t *v, long lo, long hi, long *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return -1;
    *out = (long)json_integer_value(v);
    return 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int row_of(const trace *t, int pid)
{
    int *p = bsearch(&pid, t->pid, (size_t)t->nrows, sizeof *t->pid, cmp_int);
    return p ? (int)(p - t->pid) : -1;
}

/* Compute events by rank, then start (merak-trace's own ordering). */
static const merak_trace_event *g_sort_ev;
static int cmp_lane_start(const void *a, const void *b)
{
    const merak_trace_event *x = &g_sort_ev[*(const size_t *)a], *y = &g_sort_ev[*(const size_t *)b];
    if (x->lane != y->lane)
        return (x->lane > y->lane) - (x->lane < y->lane);
    return (x->start > y->start) - (x->start < y->start);
}

/* A rank runs one compute instruction at a time: events of its compute
 * thread that overlap (beyond the rounding of the file's microseconds)
 * are not a trace merak-train wrote, and would make its sums nonsense. */
static void check_sequential(const trace *t, const char *path)
{
    size_t n = 0, *ix = malloc((t->ev.n + 1) * sizeof *ix);
    if (!ix)
        cli_die("out of memory reading %s", path);
    for (size_t i = 0; i < t->ev.n; i++)
        if (merak_trace_track(t->ev.ev[i].kind) == MERAK_TRACK_COMPUTE)
            ix[n++] = i;
    g_sort_ev = t->ev.ev;
    qsort(ix, n, sizeof *ix, cmp_lane_start);
    const merak_trace_event *a = NULL, *b = NULL;
    for (size_t i = 1; i < n && !a; i++)
        if (t->ev.ev[ix[i]].lane == t->ev.ev[ix[i - 1]].lane && t->ev.ev[ix[i]].start < t->ev.ev[ix[i - 1]].end - 1e-5)
            a = &t->ev.ev[ix[i - 1]], b = &t->ev.ev[ix[i]];
    free(ix);
    if (a)
        cli_die("%s: rank %d runs %s and %s at once (%.3f ms and %.3f ms): its compute instructions overlap", path,
                t->pid[a->lane], merak_trace_kind_name(a->kind), merak_trace_kind_name(b->kind), a->start, b->start);
}

/* Loads and checks the trace; any problem ends the tool naming the file
 * and the event. */
static void load(const char *path, trace *t)
{
    json_error_t je;
    char why[512];
    FILE *fp = merak_file_fopen(path, why, sizeof why);
    if (!fp)
        cli_die("%s", why);
    json_t *root = json_loadf(fp, 0, &je);
    fclose(fp);
    if (!root)
        cli_die("%s: line %d: %s", path, je.line, je.text);
    json_t *evs = json_object_get(root, "traceEvents");
    if (!json_is_array(evs))
        cli_die("%s: not a Chrome trace (no \"traceEvents\" array)", path);
    size_t n = json_array_size(evs);
    memset(t, 0, sizeof *t);
    t->virtual_stages = 1;
    t->pid = calloc(n + 1, sizeof *t->pid);
    if (!t->pid)
        cli_die("out of memory reading %s", path);
    /* the ranks: every pid an event names */
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(evs, i);
        long pid;
        if (!json_is_object(e) || int_of(json_object_get(e, "pid"), 0, INT_MAX, &pid) < 0)
            cli_die("%s: event %zu: no \"pid\" (a rank number)", path, i);
        t->pid[t->nrows++] = (int)pid;
    }
    qsort(t->pid, (size_t)t->nrows, sizeof *t->pid, cmp_int);
    int k = 0;
    for (int i = 0; i < t->nrows; i++)
        if (i == 0 || t->pid[i] != t->pid[k - 1])
            t->pid[k++] = t->pid[i];
    t->nrows = k;
    t->label = calloc((size_t)k + 1, sizeof *t->label);
    t->stage = malloc(((size_t)k + 1) * sizeof *t->stage);
    if (!t->label || !t->stage)
        cli_die("out of memory reading %s", path);
    t->first_step = INT_MAX;
    t->last_step = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(evs, i), *args = json_object_get(e, "args");
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        int row = row_of(t, (int)json_integer_value(json_object_get(e, "pid")));
        if (!ph || !name)
            cli_die("%s: event %zu: no \"ph\" or \"name\"", path, i);
        if (strcmp(ph, "M") == 0) {
            const char *label = json_string_value(json_object_get(args, "name"));
            if (strcmp(name, "process_name") == 0 && label && !t->label[row] && !(t->label[row] = strdup(label)))
                cli_die("out of memory reading %s", path);
            continue;
        }
        if (strcmp(ph, "X") != 0)
            cli_die("%s: event %zu: phase '%s' (merak-train writes complete events, \"X\")", path, i, ph);
        long step, mb, chunk = 0;
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
        int kind = merak_trace_kind_find(name);
        if (kind < 0)
            cli_die("%s: event %zu: '%s' is not an instruction or collective merak-train records", path, i,
                    name);
        if (!json_is_number(ts) || !json_is_number(dur) || json_number_value(dur) < 0)
            cli_die("%s: event %zu: \"ts\" and \"dur\" must be numbers (dur not negative)", path, i);
        if (!json_is_object(args) || int_of(json_object_get(args, "step"), 0, INT_MAX, &step) < 0 ||
            int_of(json_object_get(args, "mb"), -1, INT_MAX, &mb) < 0 ||
            (json_object_get(args, "chunk") && int_of(json_object_get(args, "chunk"), 0, 1 << 20, &chunk) < 0))
            cli_die("%s: event %zu: \"args\" must hold the step (>= 0), micro-batch (>= -1) and chunk (>= 0, "
                    "if given)", path, i);
        double start = json_number_value(ts) / 1e3;
        t->ev.step = (int)step;
        merak_trace_add(&t->ev, row, kind, (int)mb, (int)chunk, start, start + json_number_value(dur) / 1e3);
        t->first_step = t->ev.step < t->first_step ? t->ev.step : t->first_step;
        t->last_step = t->ev.step > t->last_step ? t->ev.step : t->last_step;
    }
    if (t->ev.failed)
        cli_die("out of memory reading %s", path);
    if (t->ev.n == 0)
        cli_die("%s: the trace holds no instructions", path);
    check_sequential(t, path);
    json_t *o = json_object_get(root, "otherData");
    const char *sched = json_string_value(json_object_get(o, "schedule"));
    if (json_is_object(o) && sched) {
        long pp = 0, m = 0, v = 1, dp = 0, tp = 0;
        if (int_of(json_object_get(o, "dp"), 1, 1 << 20, &dp) < 0 ||
            int_of(json_object_get(o, "tp"), 1, 1 << 20, &tp) < 0 ||
            int_of(json_object_get(o, "pp"), 1, 1 << 20, &pp) < 0 ||
            int_of(json_object_get(o, "micro_batches"), 1, 1 << 20, &m) < 0)
            cli_die("%s: \"otherData\": \"dp\", \"tp\", \"pp\" and \"micro_batches\" must be integers from 1 to %d",
                    path, 1 << 20);
        if (dp * tp * pp != t->nrows)
            cli_die("%s: \"otherData\": dp %ld x tp %ld x pp %ld is not the %d ranks the trace holds", path, dp, tp, pp,
                    t->nrows);
        if (json_object_get(o, "virtual_stages") &&
            int_of(json_object_get(o, "virtual_stages"), 1, MERAK_MAX_CHUNKS, &v) < 0)
            cli_die("%s: \"otherData\": \"virtual_stages\" must be an integer from 1 to %d", path, MERAK_MAX_CHUNKS);
        t->pp = (int)pp;
        t->micro_batches = (int)m;
        t->virtual_stages = (int)v;
        snprintf(t->schedule, sizeof t->schedule, "%s", sched);
        char chunks[48] = "";
        if (t->virtual_stages > 1)
            snprintf(chunks, sizeof chunks, " (%d chunks each)", t->virtual_stages);
        snprintf(t->about, sizeof t->about, "dp %ld tp %ld pp %d%s, %s, %d micro-batches", dp, tp, t->pp, chunks,
                 t->schedule, t->micro_batches);
    }
    /* "rank R (dp D, tp T, pp P)": the stage; a rank the trace does not
     * name is "rank PID" */
    for (int r = 0; r < t->nrows; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank %d", t->pid[r]);
        if (!t->label[r] && !(t->label[r] = strdup(name)))
            cli_die("out of memory reading %s", path);
        const char *pp = strstr(t->label[r], "pp ");
        long st;
        char *end;
        t->stage[r] = -1;
        if (pp && (st = strtol(pp + 3, &end, 10)) >= 0 && st < t->pp && *end == ')')
            t->stage[r] = (int)st;
    }
    json_decref(root);
}

/* Where one rank's time went in the step (milliseconds). */
typedef struct rank_sum {
    double compute;     /* compute instructions less the collectives inside them */
    double tp;          /* tensor-parallel all-reduces */
    double wait;        /* waiting for transfers, gradient reductions and the
                         * step's loss and norm sum */
    double flight;      /* the data-parallel buckets in flight (DP_BUCKETS) */
    double hidden;      /* ... of which while the rank computed */
} rank_sum;

/* The milliseconds of [a0, a1] inside [b0, b1]. */
static double overlap(double a0, double a1, double b0, double b1)
{
    double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* Mean per-micro-batch costs of each pipeline stage (with chunks, each
 * virtual stage) in the step, from every rank of the stage. */
typedef struct stage_cost {
    double sum[MERAK_TRACE_KINDS_];
    int n[MERAK_TRACE_KINDS_];
} stage_cost;

static double mean(const stage_cost *c, int kind) { return c->n[kind] ? c->sum[kind] / c->n[kind] : 0; }

/* The simulator on the step's measured costs: *sim its pipeline time (first
 * instruction to last backward), *meas the measured one, costs[] per
 * virtual stage (chunk c of stage s at c*pp + s; without chunks, per stage)
 * in ms.  Any trace this cannot model ends the tool with one line. */
static void simulate(const trace *t, int step, double *sim, double *meas, merak_sim_costs *costs)
{
    merak_schedule_kind kind;
    char err[1024];
    if (!t->pp || !t->micro_batches || merak_schedule_parse(t->schedule, &kind) < 0)
        cli_die("--simulate: the trace does not name its pipeline stages, micro-batches and schedule "
                "(\"otherData\")");
    const int P = t->pp, V = t->virtual_stages;
    stage_cost *c = calloc((size_t)P * (size_t)V, sizeof *c);
    unsigned char *rc = calloc((size_t)P, 1);
    merak_schedule *sch = calloc((size_t)P, sizeof *sch);
    if (!c || !rc || !sch)
        cli_die("out of memory");
    double lo = 0, hi = 0;
    int any = 0;
    for (size_t i = 0; i < t->ev.n; i++) {
        const merak_trace_event *v = &t->ev.ev[i];
        int st = t->stage[v->lane];
        if (v->step != step || merak_trace_track(v->kind) != MERAK_TRACK_COMPUTE || v->kind == MERAK_I_LOAD ||
            v->kind == MERAK_I_OPTIMIZER_STEP)
            continue;
        if (st < 0)
            cli_die("--simulate: rank %d's name does not say its pipeline stage", t->pid[v->lane]);
        if (v->chunk < 0 || v->chunk >= V)
            cli_die("--simulate: an event of rank %d is on chunk %d of %d", t->pid[v->lane], v->chunk, V);
        stage_cost *q = &c[v->chunk * P + st];
        q->sum[v->kind] += v->end - v->start;
        q->n[v->kind]++;
        lo = any && lo < v->start ? lo : v->start;
        hi = any && hi > v->end ? hi : v->end;
        any = 1;
    }
    for (int q = 0; q < P * V; q++) {
        merak_sim_costs *k = &costs[q];
        k->fwd = mean(&c[q], MERAK_I_FWD);
        k->bwd_weight = mean(&c[q], MERAK_I_BWD_WEIGHT);
        k->bwd = c[q].n[MERAK_I_BWD] ? mean(&c[q], MERAK_I_BWD) : mean(&c[q], MERAK_I_BWD_INPUT) + k->bwd_weight;
        if (!c[q].n[MERAK_I_BWD_WEIGHT])
            k->bwd_weight = k->bwd / 2;
        k->recompute = mean(&c[q], MERAK_I_RECOMPUTE);
        k->comm = 0;
        rc[q % P] |= c[q].n[MERAK_I_RECOMPUTE] > 0;
        if (!c[q].n[MERAK_I_FWD])
            cli_die("--simulate: stage %d (chunk %d) ran no forward in step %d", q % P, q / P, step);
    }
    merak_schedule_spec sp = {kind, P, t->micro_batches, rc, V};
    merak_sim_result res = {0};
    if (merak_schedule_build_all(&sp, sch, err, sizeof err) < 0 ||
        merak_schedule_simulate(sch, P, costs, &res, err, sizeof err) < 0)
        cli_die("--simulate: %s", err);
    *sim = res.makespan;
    *meas = hi - lo;
    for (int s = 0; s < P; s++)
        merak_schedule_free(&sch[s]);
    free(sch), free(c), free(rc);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"step", required_argument, 0, 's'}, {"svg", required_argument, 0, 'g'},
        {"json", no_argument, 0, 'j'},       {"help", no_argument, 0, 'h'},
        {"simulate", no_argument, 0, 'S'},
        {"version", no_argument, 0, 'V'},    {0, 0, 0, 0},
    };
    cli_start("merak-trace");
    const char *svg = NULL;
    long want = -1;
    int json = 0, sim = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 's': want = cli_parse_int("--step", optarg, 0, INT_MAX); break;
        case 'g': svg = optarg; break;
        case 'j': json = 1; break;
        case 'S': sim = 1; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("merak-trace %s\n", MERAK_VERSION_STRING); exit(0);
        case ':': cli_die_usage("%s needs a value", argv[optind - 1]);
        default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        cli_die_usage(optind == argc ? "which trace? give one FILE.json" : "one trace at a time ('%s' is extra)",
                      argv[optind + 1 < argc ? optind + 1 : optind]);
    const char *path = argv[optind];
    char ferr[512];
    if (merak_file_not_input("--svg", svg, "the trace", path, ferr, sizeof ferr) < 0)
        cli_die("%s", ferr);
    trace t;
    load(path, &t);
    int step = want >= 0 ? (int)want : t.last_step;
    double t0 = 0, t1 = 0;
    int found = 0;
    for (size_t i = 0; i < t.ev.n; i++) {
        const merak_trace_event *v = &t.ev.ev[i];
        if (v->step == step) {
            t0 = found && t0 < v->start ? t0 : v->start;
            t1 = found && t1 > v->end ? t1 : v->end;
            found = 1;
        }
    }
    if (!found)
        cli_die_usage("--step %d: the trace holds steps %d to %d", step, t.first_step, t.last_step);
    rank_sum *sum = calloc((size_t)t.nrows, sizeof *sum);
    merak_trace pic = {0};
    if (!sum)
        cli_die("out of memory");
    for (size_t i = 0; i < t.ev.n; i++) {
        const merak_trace_event *v = &t.ev.ev[i];
        if (v->step != step)
            continue;
        double d = v->end - v->start;
        rank_sum *s = &sum[v->lane];
        if (merak_trace_nested(v->kind)) {
            s->compute -= d;   /* it ran inside a compute instruction */
            if (v->kind == MERAK_TRACE_TP_ALLREDUCE)
                s->tp += d;
            else
                s->wait += d;
        } else if (merak_trace_track(v->kind) == MERAK_TRACK_COMPUTE)
            s->compute += d;
        else if (v->kind == MERAK_I_WAIT_ACT || v->kind == MERAK_I_WAIT_GRAD || v->kind == MERAK_I_WAIT_SENDS ||
                 v->kind == MERAK_I_REDUCE_TIED || v->kind == MERAK_I_REDUCE_DP)
            s->wait += d;
        if (v->kind == MERAK_TRACE_DP_BUCKETS) {
            s->flight += d;
            for (size_t j = 0; j < t.ev.n; j++) {
                const merak_trace_event *u = &t.ev.ev[j];
                if (u->step == step && u->lane == v->lane && merak_trace_track(u->kind) == MERAK_TRACK_COMPUTE)
                    s->hidden += overlap(v->start, v->end, u->start, u->end);
            }
        }
        if (svg)
            merak_trace_add(&pic, v->lane, v->kind, v->mb, v->chunk, v->start, v->end);
    }
    double span = t1 - t0, sim_ms = 0, pipe_ms = 0;
    merak_sim_costs *costs = NULL;
    if (sim) {
        if (!(costs = calloc((size_t)t.pp * (size_t)t.virtual_stages + 1, sizeof *costs)))
            cli_die("out of memory");
        simulate(&t, step, &sim_ms, &pipe_ms, costs);
    }
    if (svg) {
        char title[512], err[600];
        snprintf(title, sizeof title, "step %d%s%s: %.2f ms", step, t.about[0] ? " of " : "", t.about, span);
        if (pipesvg_write(&pic, svg, title, t.nrows, (const char *const *)t.label, t0, span, " ms", err,
                          sizeof err) < 0)
            cli_die("%s", err);
    }
    if (json) {
        json_t *ranks = json_array();
        for (int r = 0; r < t.nrows; r++)
            json_array_append_new(ranks, json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "rank", t.pid[r],
                                                   "compute_ms", sum[r].compute, "tp_allreduce_ms", sum[r].tp,
                                                   "wait_ms", sum[r].wait, "idle",
                                                   span > 0 ? 1 - sum[r].compute / span : 0, "dp_flight_ms",
                                                   sum[r].flight, "dp_hidden",
                                                   sum[r].flight > 0 ? sum[r].hidden / sum[r].flight : 0));
        json_t *j = json_pack("{s:i, s:f, s:o}", "step", step, "step_ms", span, "ranks", ranks);
        if (j && sim) {
            json_object_set_new(j, "pipeline_ms", json_real(pipe_ms));
            json_object_set_new(j, "simulated_ms", json_real(sim_ms));
        }
        if (!j || json_dumpf(j, stdout, JSON_REAL_PRECISION(6)) < 0)
            cli_die("cannot write the JSON summary");
        putchar('\n');
        json_decref(j);
    } else {
        printf("%s: step %d of %d to %d%s%s: %.2f ms, first instruction to last\n", path, step, t.first_step,
               t.last_step, t.about[0] ? ", " : "", t.about, span);
        printf("%-28s %12s %16s %10s %7s\n", "rank", "compute ms", "tp all-reduce ms", "waits ms", "idle");
        int flights = 0;
        for (int r = 0; r < t.nrows; r++) {
            printf("%-28s %12.2f %16.2f %10.2f %6.1f%%\n", t.label[r], sum[r].compute,
                   sum[r].tp, sum[r].wait, span > 0 ? 100 * (1 - sum[r].compute / span) : 0.0);
            flights += sum[r].flight > 0;
        }
        if (flights) {
            printf("%-28s %12s %16s\n", "dp buckets in flight", "ms", "behind compute");
            for (int r = 0; r < t.nrows; r++)
                if (sum[r].flight > 0)
                    printf("%-28s %12.2f %15.1f%%\n", t.label[r], sum[r].flight, 100 * sum[r].hidden / sum[r].flight);
        }
        if (sim) {
            printf("simulated on the measured per-%sstage costs (forward/backward/recompute ms per micro-batch:",
                   t.virtual_stages > 1 ? "virtual " : "");
            for (int q = 0; q < t.pp * t.virtual_stages; q++)
                printf(" %.2f/%.2f/%.2f", costs[q].fwd, costs[q].bwd, costs[q].recompute);
            printf("; transfers free):\npipeline, first forward to last backward: measured %.2f ms, simulated "
                   "%.2f ms, measured/simulated %.3f\n", pipe_ms, sim_ms, sim_ms > 0 ? pipe_ms / sim_ms : 0.0);
        }
        if (svg)
            printf("drew %s\n", svg);
    }
    if (fflush(stdout) != 0 || ferror(stdout))
        cli_die("writing the summary: %s", strerror(errno));
    for (int r = 0; r < t.nrows; r++)
        free(t.label[r]);
    merak_trace_free(&t.ev);
    free(t.label), free(t.pid), free(t.stage), free(sum), free(costs);
    merak_trace_free(&pic);
    return 0;
}
