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

/* 1 when NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30 and later: ranks may
 * share a GPU). */
static int multi_rank_env(void)
{
    const char *s = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    return s && strcmp(s, "1") == 0;
}

/* Which collectives the device buffers take, the same on every rank (rank
 * 0's choice; a rank whose environment chose otherwise is named), and
 * NCCL's communicators when that is NCCL.  Collective over the world. */
static int choose_coll(const merak_args *a, const merak_backend *be, int world, merak_comm_path *path, char *err,
                       size_t errlen)
{
    static merak_devmem devmem;   /* the comm keeps a pointer to it */
    int shared = 0;
    if (!be->host && world > 1) {
        devmem = (merak_devmem){be->is_device, be->to_host, be->to_device};
        merak_comm_set_devmem(g_comm, &devmem);
        if ((shared = merak_comm_devices_shared(g_comm, be->device_id ? be->device_id() : -1)) < 0)
            return merak_errf(err, errlen, "%s", merak_comm_error(g_comm)), MERAK_FAILED;
    }
    int st = merak_coll_choose(a->coll, be->host, world, shared, merak_nccl_version(), multi_rank_env(), &path->coll,
                               path->why, sizeof path->why, err, errlen);
    if (world > 1) {
        const int mine = st == MERAK_OK && strcmp(path->coll, "nccl") == 0;
        int first = mine;
        merak_group *w = merak_comm_group(g_comm, MERAK_GROUP_WORLD);
        if (merak_broadcast(w, &first, sizeof first, 0) < 0)
            return merak_errf(err, errlen, "%s", merak_comm_error(g_comm)), MERAK_FAILED;
        if (st == MERAK_OK && first != mine)
            st = (merak_errf(err, errlen, "rank %d would take %s collectives and rank 0 %s: set "
                             "NCCL_MULTI_RANK_GPU_ENABLE alike on every rank", merak_rank(), path->coll,
                             first ? "nccl" : "mpi"), MERAK_USAGE);
        if ((st = merak_comm_agree(g_comm, st, err, errlen)) != MERAK_OK)
            return st;
    }
    if (st != MERAK_OK)
        return st;
    if ((st = merak_p2p_choose(a->p2p, be->host, world, path->coll, path->why, &path->p2p, err, errlen)) !=
        MERAK_OK)
        return st;   /* the same on every rank: from rank 0's collectives */
    if (world > 1 && strcmp(path->coll, "nccl") == 0 &&
        merak_comm_set_coll(g_comm, "nccl", be->stream ? be->stream() : NULL, err, errlen) < 0)
        return MERAK_FAILED;
    path->staged = world > 1 && !be->host && !(strcmp(path->coll, "nccl") == 0 && merak_p2p_is_device(path->p2p));
    return MERAK_OK;
}

int merak_session_kernels(const merak_args *a, int world, const merak_kernels **kp, merak_comm_path *path,
                          char *err, size_t errlen)
{
    const merak_backend *be = merak_backend_find(a->device);
    const merak_kernels *k = merak_kernels_open(a->device, a->threads, err, errlen);
    int st = k ? MERAK_OK : MERAK_FAILED;
    const int tf32 = strcmp(merak_args_dtype(a), "tf32") == 0;
    *kp = NULL;
    memset(path, 0, sizeof *path);
    path->coll = path->p2p = "mpi";
    if (k && tf32 && !k->set_products)   /* merak_args_check refuses it first */
        st = (merak_errf(err, errlen, "dtype tf32: the %s backend has no TF32 products", be->name), MERAK_USAGE);
    else if (k && k->set_products)   /* the backend's state: set either way */
        k->set_products(tf32 ? MERAK_PRODUCTS_TF32 : merak_args_bf16(a) ? MERAK_PRODUCTS_BF16 : MERAK_PRODUCTS_FP32);
    /* every rank has its kernels (its GPU chosen) before the collectives */
    if (world > 1 && (st = merak_comm_agree(g_comm, st, err, errlen)) != MERAK_OK)
        return st;
    if (st != MERAK_OK || (st = choose_coll(a, be, world, path, err, errlen)) != MERAK_OK)
        return st;
    *kp = k;
    return MERAK_OK;
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
