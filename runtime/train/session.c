/*
 * session.c - the runtime of one process: its process grid (merak_init,
 * merak_finalize, merak_abort; one per process, which merak_train runs
 * on) and the backend's kernels on it.
 */
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "trainer_impl.h"

/* The runtime's process grid, from merak_init (or the first merak_train). */
static merak_comm *g_comm;

merak_comm *merak_session_comm(void) { return g_comm; }

/* The backend's kernels for a.device on this grid, or NULL with err.  On
 * a device backend with several ranks, communication goes through MPI in
 * host memory (NCCL is not built yet; it also refuses ranks that share a
 * GPU): *staged says so. */
const merak_kernels *merak_session_kernels(const merak_args *a, int world, int *staged, char *err, size_t errlen)
{
    static merak_devmem devmem;   /* the comm keeps a pointer to it */
    const merak_backend *be = merak_backend_find(a->device);
    const merak_kernels *k = merak_kernels_open(a->device, a->threads, err, errlen);
    *staged = 0;
    const int tf32 = a->dtype && strcmp(a->dtype, "tf32") == 0;
    if (k && tf32 && !k->set_tf32) {   /* merak_args_check refuses it first */
        merak_errf(err, errlen, "dtype tf32: the %s backend has no TF32 products", be->name);
        return NULL;
    }
    if (k && k->set_tf32)
        k->set_tf32(tf32);   /* the backend's state: set either way */
    if (k && world > 1 && !be->host) {
        devmem = (merak_devmem){be->is_device, be->to_host, be->to_device};
        merak_comm_set_devmem(g_comm, &devmem);
        *staged = 1;
    }
    return k;
}

int merak_init(int dp, int tp, int pp, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (g_comm)
        return merak_errf(err, errlen, "merak_init was already called");
    if (dp < 0 || tp < 0 || pp < 0)
        return merak_errf(err, errlen, "degrees dp=%d tp=%d pp=%d must not be negative", dp, tp, pp);
    return merak_comm_init(&g_comm, dp, tp, pp, err, errlen);
}

int merak_rank(void) { return g_comm ? merak_comm_grid(g_comm)->rank : 0; }
int merak_world_size(void) { return g_comm ? merak_comm_grid(g_comm)->world : 1; }

void merak_finalize(void)
{
    merak_comm_finalize(g_comm);
    g_comm = NULL;
}

void merak_abort(int status)
{
    merak_comm_abort(g_comm, status);
}
