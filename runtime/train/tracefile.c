/*
 * tracefile.c - every rank's timeline merged on rank 0 into one Chrome
 * trace (the JSON object format: Perfetto and chrome://tracing open it).
 *
 * One process per rank (pid = world rank, named with its coordinates), two
 * threads in each: tid 0 compute, tid 1 communication.  Every event is a
 * complete event ("ph": "X") with its step, micro-batch and model chunk
 * (interleaved; else 0) in args; times
 * in microseconds from the moment every rank left the first step's
 * agreement (the ranks' clocks are aligned by that collective, to within
 * its exit skew).  "otherData" names the layout and schedule.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "atomic.h"
#include "comm/comm.h"
#include "errf.h"
#include "pipe/trace.h"
#include "train.h"

enum { TAG_HEAD = 1, TAG_EVENTS = 2 };

static void write_rank(FILE *f, int rank, const merak_grid *gr, const merak_trace_event *ev, size_t n,
                       int *first)
{
    merak_grid c;
    merak_grid_init(&c, gr->dp, gr->tp, gr->pp, gr->world, rank, NULL, 0);
    fprintf(f,
            "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d (dp %d, tp %d, pp %d)\"}},"
            "\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}},"
            "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},"
            "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}},"
            "\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"reductions in flight\"}}",
            *first ? "" : ",", rank, rank, c.dp_rank, c.tp_rank, c.pp_rank, rank, rank, rank, rank, rank);
    *first = 0;
    for (size_t i = 0; i < n; i++) {
        const merak_trace_event *e = &ev[i];
        merak_track tr = merak_trace_track(e->kind);
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                "\"dur\":%.3f,\"args\":{\"step\":%d,\"mb\":%d,\"chunk\":%d}}",
                merak_trace_kind_name(e->kind),
                tr == MERAK_TRACK_COMPUTE ? "compute" : tr == MERAK_TRACK_COMM ? "comm" : "flight", rank, (int)tr,
                e->start * 1e6, (e->end - e->start) * 1e6, e->step, e->mb, e->chunk);
    }
}

/* Events travel in chunks of at most this many, so that rank 0 can drain
 * every sender even when it has no memory left to keep what arrives. */
#define CHUNK 4096

int merak_trace_write(merak_comm *comm, const merak_trace *t, const char *path, const char *schedule,
                      int micro_batches, int virtual_stages, char *err, size_t errlen)
{
    const merak_grid *gr = merak_comm_grid(comm);
    merak_group *world = merak_comm_group(comm, MERAK_GROUP_WORLD);
    uint64_t head[2] = {t->n, (uint64_t)t->failed};
    if (gr->rank != 0) {
        int rc = merak_send(world, head, sizeof head, 0, TAG_HEAD, NULL);
        for (size_t i = 0; rc == 0 && i < t->n; i += CHUNK) {
            size_t k = t->n - i < CHUNK ? t->n - i : CHUNK;
            rc = merak_send(world, t->ev + i, k * sizeof *t->ev, 0, TAG_EVENTS, NULL);
        }
        if (rc < 0)
            return merak_errf(err, errlen, "sending the trace to rank 0: %s", merak_comm_error(comm));
        return 0;
    }
    /* Rank 0 receives every rank's events (all of them, so that no sender
     * is left blocked), then writes. */
    merak_trace_event **ev = calloc((size_t)gr->world, sizeof *ev);
    size_t *n = calloc((size_t)gr->world, sizeof *n);
    static merak_trace_event chunk[CHUNK];
    int rc = ev && n ? 0 : merak_errf(err, errlen, "out of memory merging the trace");
    int lost = t->failed, broken = 0;
    for (int r = 1; r < gr->world && !broken; r++) {
        uint64_t h[2];
        if (merak_recv(world, h, sizeof h, r, TAG_HEAD, NULL) < 0) {
            rc = merak_errf(err, errlen, "receiving the trace of rank %d: %s", r, merak_comm_error(comm));
            break;
        }
        lost |= h[1] != 0;
        merak_trace_event *mine = rc == 0 && h[0] ? malloc(h[0] * sizeof *mine) : NULL;
        if (rc == 0 && h[0] && !mine)
            rc = merak_errf(err, errlen, "out of memory merging the trace of rank %d", r);
        for (uint64_t i = 0; i < h[0]; i += CHUNK) {
            size_t k = h[0] - i < CHUNK ? (size_t)(h[0] - i) : CHUNK;
            if (merak_recv(world, mine ? mine + i : chunk, k * sizeof *chunk, r, TAG_EVENTS, NULL) < 0) {
                rc = merak_errf(err, errlen, "receiving the trace of rank %d: %s", r, merak_comm_error(comm));
                broken = 1;
                break;
            }
        }
        if (mine && (broken || !ev)) {
            free(mine);
        } else if (mine) {
            ev[r] = mine;
            n[r] = h[0];
        }
    }
    if (rc == 0 && lost)
        rc = merak_errf(err, errlen, "%s: out of memory while recording the trace: events were lost", path);
    merak_atomic *a = NULL;
    if (rc == 0 && (rc = merak_atomic_open(path, &a, err, errlen)) == 0) {
        FILE *f = merak_atomic_file(a);
        fprintf(f,
                "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"merak_version\":\"%s\",\"dp\":%d,\"tp\":%d,"
                "\"pp\":%d,\"schedule\":\"%s\",\"micro_batches\":%d,\"virtual_stages\":%d},\n\"traceEvents\":[",
                MERAK_VERSION_STRING, gr->dp, gr->tp, gr->pp, schedule, micro_batches, virtual_stages);
        int first = 1;
        for (int r = 0; r < gr->world; r++)
            write_rank(f, r, gr, r ? ev[r] : t->ev, r ? n[r] : t->n, &first);
        fprintf(f, "\n]}\n");
        rc = merak_atomic_commit(a, err, errlen);
    }
    for (int r = 0; ev && r < gr->world; r++)
        free(ev[r]);
    free(ev);
    free(n);
    return rc;
}
