/*
 * parse.c - the Slurm-shaped inputs of a placement: the task distribution
 * ("block", "cyclic", "block:cyclic") and tasks per node ("8", "8,8,4",
 * SLURM_TASKS_PER_NODE's "8(x2),4").
 */
#include "topo_internal.h"

#include <ctype.h>  /* isdigit */
#include <errno.h>  /* EINVAL, ENOMEM */
#include <stdlib.h> /* realloc, free, strtol */
#include <string.h> /* strncmp, strcspn */

int merak_topo_distribution_parse(const char *s, int *dist, char *err, size_t errlen)
{
    if (!s || !dist)
        return topo_errf(err, errlen, EINVAL, "no distribution");
    size_t len = strcspn(s, ":");
    if (len == 5 && !strncmp(s, "block", 5))
        *dist = MERAK_TOPO_DIST_BLOCK;
    else if (len == 6 && !strncmp(s, "cyclic", 6))
        *dist = MERAK_TOPO_DIST_CYCLIC;
    else
        return topo_errf(err, errlen, EINVAL, "distribution '%s' is not block or cyclic", s);
    return 0;
}

/* Reads a positive decimal int at *p, advancing it.  0 or -1. */
static int read_count(const char **p, int *v)
{
    if (!isdigit((unsigned char)**p))
        return -1;
    char *end;
    errno = 0;
    long x = strtol(*p, &end, 10);
    if (errno || x < 1 || x > 1 << 24)
        return -1;
    *v = (int)x;
    *p = end;
    return 0;
}

int merak_topo_tasks_per_node_parse(const char *s, int **counts, int *nnodes, char *err,
                                    size_t errlen)
{
    if (!s || !counts || !nnodes)
        return topo_errf(err, errlen, EINVAL, "no tasks per node");
    *counts = NULL;
    *nnodes = 0;
    int *v = NULL, n = 0;
    const char *p = s;
    for (;;) {
        int k, rep = 1;
        if (read_count(&p, &k))
            goto bad;
        if (*p == '(') { /* "(xR)" */
            p++;
            if (*p++ != 'x' || read_count(&p, &rep) || *p++ != ')')
                goto bad;
        }
        if (n + rep > 1 << 20)
            goto bad;
        int *nv = realloc(v, (size_t)(n + rep) * sizeof(int));
        if (!nv) {
            free(v);
            return topo_errf(err, errlen, ENOMEM, "out of memory");
        }
        v = nv;
        for (int i = 0; i < rep; i++)
            v[n++] = k;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            goto bad;
    }
    *counts = v;
    *nnodes = n;
    return 0;
bad:
    free(v);
    return topo_errf(err, errlen, EINVAL,
                     "tasks per node '%s' is not a count (8), a list (8,8,4) or Slurm's form "
                     "(8(x2),4) of counts from 1",
                     s);
}
