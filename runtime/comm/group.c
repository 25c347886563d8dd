/*
 * group.c - what every part of runtime/comm says about a group and its
 * ranks: group names, "pipeline rank 1 (rank 5 on host)", and a failure
 * recorded on the comm.  The core (comm.c), the backends (comm_mpi.c,
 * comm_ucx.c) and the watchdog call these; they call nothing back.
 */
#include <stdarg.h>
#include <stdio.h>

#include "comm_impl.h"

static const char *const group_names[MERAK_GROUP_COUNT_] = {"world", "tp", "dp", "pp", "tied"};

const char *merak_group_name(merak_group_kind k) { return group_names[k]; }

const char *merak_comm_where(const merak_comm *c, int rank, char *buf, size_t len)
{
    snprintf(buf, len, "rank %d on %s", rank, c->hosts ? c->hosts[rank] : "?");
    return buf;
}

const char *merak_group_peer(const merak_group *g, int r, char *buf, size_t len)
{
    char where[96];
    if (r < 0 || r >= g->size)
        snprintf(buf, len, "%s rank %d (not in the group)", group_names[g->kind], r);
    else
        snprintf(buf, len, "%s rank %d (%s)", group_names[g->kind], r,
                 merak_comm_where(g->comm, g->world[r], where, sizeof where));
    return buf;
}

int merak_comm_fail(merak_group *g, const char *fmt, ...)
{
    if (g->comm->err[0])
        return -1;   /* the first failure is the cause; what follows it, its echo */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->comm->err, sizeof g->comm->err, fmt, ap);
    va_end(ap);
    return -1;
}
