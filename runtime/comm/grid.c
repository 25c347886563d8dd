/*
 * grid.c - dp x tp x pp grid arithmetic: rank <-> coordinates, degrees from
 * flags or the environment.  Pure: no MPI.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "comm.h"
#include "errf.h"

int merak_grid_init(merak_grid *g, int dp, int tp, int pp, int world, int rank, char *err,
                    size_t errlen)
{
    if (dp < 1 || tp < 1 || pp < 1)
        return merak_errf(err, errlen, "parallel degrees dp=%d tp=%d pp=%d must be positive", dp, tp, pp);
    if ((long)dp * tp * pp != world)
        return merak_errf(err, errlen, "dp*tp*pp = %d*%d*%d = %ld, but there are %d ranks", dp, tp,
                          pp, (long)dp * tp * pp, world);
    if (rank < 0 || rank >= world)
        return merak_errf(err, errlen, "rank %d is outside 0..%d", rank, world - 1);
    g->dp = dp, g->tp = tp, g->pp = pp;
    g->world = world, g->rank = rank;
    g->tp_rank = rank % tp;
    g->dp_rank = (rank / tp) % dp;
    g->pp_rank = rank / (tp * dp);
    return 0;
}

int merak_grid_rank(const merak_grid *g, int dp_rank, int tp_rank, int pp_rank)
{
    return tp_rank + g->tp * (dp_rank + g->dp * pp_rank);
}

/* A positive integer from the environment variable, 0 if unset, -1 if bad. */
static int env_degree(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > INT_MAX)
        return -1;
    return (int)v;
}

int merak_grid_degrees(int *dp, int *tp, int *pp, int world, char *err, size_t errlen)
{
    const char *names[3] = {"MERAK_DP", "MERAK_TP", "MERAK_PP"};
    int *deg[3] = {dp, tp, pp};
    for (int i = 0; i < 3; i++) {
        if (*deg[i] > 0)
            continue;  /* the flag wins */
        int v = env_degree(names[i]);
        if (v < 0)
            return merak_errf(err, errlen, "%s='%s' is not a positive integer", names[i],
                              getenv(names[i]));
        *deg[i] = v;
    }
    if (*tp == 0)
        *tp = 1;
    if (*pp == 0)
        *pp = 1;
    if (*dp == 0) {
        if (world % (*tp * *pp))
            return merak_errf(err, errlen, "%d ranks are not divisible by tp*pp = %d*%d; change --tp/--pp or the rank count",
                              world, *tp, *pp);
        *dp = world / (*tp * *pp);
    }
    if ((long)*dp * *tp * *pp != world)
        return merak_errf(err, errlen, "dp*tp*pp = %d*%d*%d = %ld, but the job has %d ranks; change --dp/--tp/--pp or -np",
                          *dp, *tp, *pp, (long)*dp * *tp * *pp, world);
    return 0;
}

int merak_grid_check_env(const merak_grid *g, char *err, size_t errlen)
{
    const char *names[3] = {"MERAK_DP_RANK", "MERAK_TP_RANK", "MERAK_PP_RANK"};
    int have[3] = {g->dp_rank, g->tp_rank, g->pp_rank};
    for (int i = 0; i < 3; i++) {
        const char *s = getenv(names[i]);
        char *end;
        if (s && *s && (strtol(s, &end, 10) != have[i] || *end))
            return merak_errf(err, errlen, "%s=%s, but rank %d of dp %d x tp %d x pp %d is at %d (the plugin's "
                              "layout and this one differ)", names[i], s, g->rank, g->dp, g->tp, g->pp, have[i]);
    }
    return 0;
}
