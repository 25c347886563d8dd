/*
 * backends.c - the communication backends by name: the one list of them
 * (comm.c dispatches through the tables and names none).  The world is
 * MPI's; point-to-point is MPI's or UCX's, per group.
 */
#include "comm_impl.h"
#include "names.h"

static const merak_p2p_ops *const p2p_backends[] = {&merak_mpi_p2p, &merak_ucx_p2p};
enum { NP2P = sizeof p2p_backends / sizeof p2p_backends[0] };

const merak_world_ops *merak_world_backend(void) { return &merak_mpi_world; }

/* The backends' names, in the table's order. */
static const char *const *p2p_names(void)
{
    static const char *names[NP2P];
    for (int i = 0; i < NP2P; i++)
        names[i] = p2p_backends[i]->name;
    return names;
}

const merak_p2p_ops *merak_p2p_find(const char *name)
{
    if (!name)
        return &merak_mpi_p2p;
    int i = merak_name_find(p2p_names(), NP2P, name);
    return i < 0 ? NULL : p2p_backends[i];
}

int merak_p2p_check(const char *name) { return merak_p2p_find(name) ? 0 : -1; }

const char *merak_p2p_names(void)
{
    static char names[64];
    return merak_names_join(p2p_names(), NP2P, names, sizeof names);
}
