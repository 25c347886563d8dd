/*
 * launch.c - the size of the job a process was launched in, read from its
 * launcher's environment before MPI starts (comm.h): what merak-train
 * --auto plans for.  Calls nothing of the runtime.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "errf.h"

/* A whole number in [1, 2^24] from variable `name`: the value, 0 when unset
 * or empty, -1 when it is something else. */
static long count_var(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 1 || v > (1L << 24) ? -1 : v;
}

/* Slurm's tasks per node of a step, "4(x2)" or "4,4" or "3,2(x2)": the
 * count when every node has the same, 0 when they differ, -1 when the text
 * is not of that form. */
static long slurm_per_node(const char *s)
{
    long same = 0;
    while (*s) {
        char *end;
        long n = strtol(s, &end, 10);
        if (end == s || n < 1)
            return -1;
        s = end;
        if (*s == '(') {   /* "(xK)": K nodes of n */
            if (s[1] != 'x' || strtol(s + 2, &end, 10) < 1 || *end != ')')
                return -1;
            s = end + 1;
        }
        if (same && n != same)
            return 0;
        same = n;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return same ? same : -1;
}

int merak_launch_size(int *world, int *per_node, char *err, size_t errlen)
{
    struct {
        const char *size, *local, *launcher;
    } known[] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"},
                 {"SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "srun"},
                 {"PMI_SIZE", "MPI_LOCALNRANKS", "the PMI launcher"}};
    *world = *per_node = 1;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        long n = count_var(known[i].size), local;
        /* srun's step variables count only where MPI will start from them
         * (not in a batch script that runs merak-train alone) */
        if (n == 0 || (i == 1 && !getenv("PMIX_RANK") && !getenv("PMI_RANK")))
            continue;
        if (i == 1) {   /* srun: every node's count, which must agree */
            const char *s = getenv(known[i].local);
            local = s ? slurm_per_node(s) : -1;
            if (local == 0)
                return merak_errf(err, errlen, "srun placed different numbers of tasks on the nodes (%s=%s): tensor "
                                  "parallelism needs the same on each (srun --ntasks-per-node)", known[i].local, s);
        } else {
            local = count_var(known[i].local);
        }
        if (n < 0 || local < 0)
            return merak_errf(err, errlen, "%s=%s, %s=%s: not the sizes of a job", known[i].size,
                              getenv(known[i].size), known[i].local,
                              getenv(known[i].local) ? getenv(known[i].local) : "(unset)");
        if (local == 0)
            local = n;
        if (local > n || n % local)
            return merak_errf(err, errlen, "%s put %ld of the job's %ld ranks on this node, not the same number on "
                              "every node: give --dp, --tp and --pp", known[i].launcher, local, n);
        *world = (int)n;
        *per_node = (int)local;
        return 0;
    }
    if (getenv("PMIX_RANK") || getenv("PMI_RANK"))
        return merak_errf(err, errlen, "the launcher does not say how many ranks the job has (no OMPI_COMM_WORLD_SIZE, "
                          "SLURM_STEP_NUM_TASKS or PMI_SIZE): give --dp, --tp and --pp");
    return 0;
}
