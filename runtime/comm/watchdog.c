/*
 * watchdog.c - the communication timeout (comm.h, merak_comm_set_timeout).
 *
 * A rank blocked in a collective or in waiting for a transfer cannot tell
 * a slow peer from a dead or stopped one, and neither MPI nor UCX gives
 * up on its own.  Each blocking operation notes when it started, what it
 * is, on which group and with which peer (comm.c: merak_watch_enter and
 * merak_watch_leave, plain atomic stores); a thread of this rank looks
 * four times a second and, once one operation has waited longer than the
 * timeout, writes one line naming this rank, its host, the operation and
 * the group's ranks (or the peer with its host) and ends the process with
 * status 1.  The launcher (mpirun, srun) then ends the job; the other
 * ranks waiting on the same peer time out the same way if it does not.
 * The waiting thread is stuck inside MPI, so the watchdog cannot return
 * an error through it: exiting is the one way out.  A thread waiting in
 * NCCL (whose waits poll) is first asked to abort its communicator.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "comm_impl.h"
#include "errf.h"

struct merak_watchdog {
    merak_comm *comm;
    double timeout;                  /* seconds */
    _Atomic double since;            /* merak_now() when the wait began; 0: none */
    _Atomic(const char *) what;      /* "all-reduce" ... (a string literal) */
    _Atomic(merak_group *) group;
    atomic_int peer;                 /* group rank of the other side, or -1 */
    atomic_int stop;
    pthread_t thread;
};

/* The line for a wait that timed out, into buf. */
static void describe(const merak_watchdog *w, const char *what, const merak_group *g, int peer, double waited,
                     char *buf, size_t len)
{
    char me[96], other[192], ranks[96] = "";
    merak_comm_where(w->comm, w->comm->grid.rank, me, sizeof me);
    if (peer >= 0) {
        char who[128];
        snprintf(other, sizeof other, " with %s", merak_group_peer(g, peer, who, sizeof who));
    } else {
        size_t k = 0;
        for (int r = 0; r < g->size && r < 12 && k < sizeof ranks; r++)
            k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", r ? "," : "", g->world[r]);
        snprintf(other, sizeof other, " of the %s group (world ranks %s%s)", merak_group_name(g->kind), ranks,
                 g->size > 12 ? ",..." : "");
    }
    snprintf(buf, len,
             "merak: %s: no progress for %.0f s in %s%s: a rank there has died or is stuck; ending this "
             "process (communication timeout %g s: --comm-timeout, MERAK_COMM_TIMEOUT)\n",
             me, waited, what, other, w->timeout);
}

/* Asks the thread waiting in a device collective (NCCL's: it polls, it is
 * not stuck inside the library) to abort its communicator, and gives it up
 * to two seconds to say it has, so that none is left holding the network
 * or the GPU when the process ends.  Without device collectives, nothing. */
static void abort_device(merak_comm *c)
{
    int any = 0;
    for (int k = 0; k < MERAK_GROUP_COUNT_; k++)
        any |= c->have[k] && c->groups[k].dcoll != NULL;
    if (!any)
        return;
    atomic_store(&c->abort_asked, 1);
    const struct timespec ts = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 100 && !atomic_load(&c->abort_done); i++)
        nanosleep(&ts, NULL);
}

static void *watch(void *arg)
{
    merak_watchdog *w = arg;
    const double tick = w->timeout >= 1 ? 0.25 : w->timeout >= 0.004 ? w->timeout / 4 : 0.001;
    const struct timespec ts = {(time_t)tick, (long)((tick - (double)(time_t)tick) * 1e9)};
    while (!atomic_load(&w->stop)) {
        nanosleep(&ts, NULL);
        const double since = atomic_load(&w->since);
        if (since <= 0 || merak_now() - since <= w->timeout)
            continue;
        const char *what = atomic_load(&w->what);
        merak_group *g = atomic_load(&w->group);
        const int peer = atomic_load(&w->peer);
        if (since != atomic_load(&w->since) || !what || !g)
            continue;   /* it ended (and another began) while we looked */
        char line[640];
        describe(w, what, g, peer, merak_now() - since, line, sizeof line);
        ssize_t rc = write(STDERR_FILENO, line, strlen(line));
        (void)rc;
        /* A rank waiting for one that waits for the stuck one may time
         * out first, and the launcher ends every rank when one exits: a
         * second (the timeout, if shorter) lets the others stuck say so. */
        const double grace = w->timeout < 1 ? w->timeout : 1.0;
        const struct timespec gs = {(time_t)grace, (long)((grace - (double)(time_t)grace) * 1e9)};
        nanosleep(&gs, NULL);
        abort_device(w->comm);
        _exit(1);
    }
    return NULL;
}

int merak_comm_set_timeout(merak_comm *c, double seconds, char *err, size_t errlen)
{
    if (!(seconds >= 0 && seconds <= 1e9))
        return merak_errf(err, errlen, "communication timeout %g s: give seconds from 0 (none) to 1e9", seconds);
    merak_watch_stop(c);
    if (seconds == 0 || c->grid.world == 1)
        return 0;   /* one process never waits for another */
    merak_watchdog *w = calloc(1, sizeof *w);
    if (!w)
        return merak_errf(err, errlen, "out of memory");
    w->comm = c;
    w->timeout = seconds;
    const int e = pthread_create(&w->thread, NULL, watch, w);
    if (e) {
        free(w);
        return merak_errf(err, errlen, "cannot start the communication watchdog thread: %s", strerror(e));
    }
    c->watchdog = w;
    return 0;
}

void merak_watch_stop(merak_comm *c)
{
    merak_watchdog *w = c->watchdog;
    if (!w)
        return;
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    free(w);
    c->watchdog = NULL;
}

void merak_watch_enter(merak_group *g, const char *what, int peer)
{
    merak_watchdog *w = g->comm->watchdog;
    if (!w)
        return;
    atomic_store(&w->since, 0.0);
    atomic_store(&w->what, what);
    atomic_store(&w->group, g);
    atomic_store(&w->peer, peer);
    atomic_store(&w->since, merak_now());
}

void merak_watch_leave(merak_group *g)
{
    if (g->comm->watchdog)
        atomic_store(&g->comm->watchdog->since, 0.0);
}
