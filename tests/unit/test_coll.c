/*
 * test_coll.c - which collectives a job's device buffers take
 * (merak_coll_choose, runtime/comm/backends.c): every case of the rule, the
 * phrase the banner prints and the usage errors of --coll; and which
 * point-to-point its pipeline takes after them (merak_p2p_choose, --p2p).
 * A build without CUDA has no "nccl": asking for it is then an unknown
 * name.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "merak/status.h"
#include "tap.h"

typedef struct choice {
    const char *asked;
    int host, world, shared, version, multi;
    int status;          /* MERAK_OK or MERAK_USAGE */
    const char *name;    /* the backend chosen (status OK) */
    const char *phrase;  /* in why (OK) or err (USAGE) */
} choice;

static void check(const choice *c)
{
    const int have_nccl = merak_coll_check("nccl") == 0;
    const char *name = "?";
    char why[256] = "", err[256] = "", label[160];
    snprintf(label, sizeof label, "asked %s, %s, world %d%s, NCCL %d%s", c->asked ? c->asked : "(auto)",
             c->host ? "host" : "device", c->world, c->shared ? ", shared GPU" : "", c->version,
             c->multi ? ", NCCL_MULTI_RANK_GPU_ENABLE=1" : "");
    const int st = merak_coll_choose(c->asked, c->host, c->world, c->shared, c->version, c->multi, &name, why,
                                     sizeof why, err, sizeof err);
    if (c->asked && !strcmp(c->asked, "nccl") && !have_nccl) {   /* no such name in this build */
        tap_ok(st == MERAK_USAGE && strstr(err, "coll 'nccl' is not mpi"), "%s: unknown here (%s)", label, err);
        return;
    }
    if (c->status == MERAK_USAGE) {
        if (!tap_ok(st == MERAK_USAGE && strstr(err, c->phrase), "%s: usage error", label))
            tap_diag("status %d, err '%s', want '%s'", st, err, c->phrase);
        return;
    }
    if (!tap_ok(st == MERAK_OK && !strcmp(name, c->name) && strstr(why, c->phrase), "%s: %s", label, c->name))
        tap_diag("status %d, name %s, why '%s', err '%s', want '%s'", st, name, why, err, c->phrase);
}

typedef struct p2p_choice {
    const char *asked;
    int host, world;
    const char *coll, *coll_why;
    int status;
    const char *name;     /* status OK */
    const char *phrase;   /* in err (USAGE) */
} p2p_choice;

static void check_p2p(const p2p_choice *c)
{
    const int have_nccl = merak_p2p_check("nccl") == 0;
    const char *name = "?";
    char err[256] = "", label[160];
    snprintf(label, sizeof label, "p2p asked %s, %s, world %d, collectives %s", c->asked ? c->asked : "(auto)",
             c->host ? "host" : "device", c->world, c->coll);
    const int st = merak_p2p_choose(c->asked, c->host, c->world, c->coll, c->coll_why, &name, err, sizeof err);
    if (c->asked && !strcmp(c->asked, "nccl") && !have_nccl) {
        tap_ok(st == MERAK_USAGE && strstr(err, "p2p 'nccl' is not mpi"), "%s: unknown here (%s)", label, err);
        return;
    }
    if (c->status == MERAK_USAGE) {
        if (!tap_ok(st == MERAK_USAGE && strstr(err, c->phrase), "%s: usage error", label))
            tap_diag("status %d, err '%s', want '%s'", st, err, c->phrase);
        return;
    }
    if (!tap_ok(st == MERAK_OK && !strcmp(name, c->name), "%s: %s", label, c->name))
        tap_diag("status %d, name %s, err '%s'", st, name, err);
}

int main(void)
{
    static const p2p_choice p2p[] = {
        {NULL, 1, 4, "mpi", "tensors in host memory", MERAK_OK, "mpi", NULL},
        {"ucx", 1, 4, "mpi", "tensors in host memory", MERAK_OK, "ucx", NULL},
        {"nccl", 1, 4, "mpi", "tensors in host memory", MERAK_USAGE, NULL, "p2p nccl needs tensors on GPUs"},
        {"nccl", 1, 1, "mpi", "one rank", MERAK_USAGE, NULL, "p2p nccl needs tensors on GPUs"},
        {"tcp", 0, 4, "nccl", "", MERAK_USAGE, NULL, "p2p 'tcp' is not mpi"},
        {NULL, 0, 4, "nccl", "NCCL 2.28.9", MERAK_OK, "nccl", NULL},
        {"mpi", 0, 4, "nccl", "NCCL 2.28.9", MERAK_OK, "mpi", NULL},
        {"ucx", 0, 4, "nccl", "NCCL 2.28.9", MERAK_OK, "ucx", NULL},
        {"nccl", 0, 4, "nccl", "NCCL 2.28.9", MERAK_OK, "nccl", NULL},
        {NULL, 0, 8, "mpi", "ranks of one node share a GPU", MERAK_OK, "mpi", NULL},
        {"nccl", 0, 8, "mpi", "ranks of one node share a GPU, which NCCL 2.28.9 refuses", MERAK_USAGE, NULL,
         "p2p nccl needs NCCL's collectives, which this job does not take: ranks of one node share a GPU"},
        {NULL, 0, 1, "mpi", "one rank: no collectives", MERAK_OK, "mpi", NULL},
        {"nccl", 0, 1, "mpi", "one rank: no collectives", MERAK_OK, "nccl", NULL},
    };
    for (size_t i = 0; i < sizeof p2p / sizeof p2p[0]; i++)
        check_p2p(&p2p[i]);
    tap_ok(merak_p2p_is_device("nccl") == (merak_p2p_check("nccl") == 0) && !merak_p2p_is_device("mpi") &&
               !merak_p2p_is_device(NULL),
           "p2p: nccl is the device one exactly where it is a name (%s)", merak_p2p_names());
    static const choice cases[] = {
        {NULL, 1, 4, 0, 22809, 0, MERAK_OK, "mpi", "tensors in host memory"},
        {"mpi", 1, 4, 0, 22809, 0, MERAK_OK, "mpi", "tensors in host memory"},
        {"nccl", 1, 4, 0, 22809, 0, MERAK_USAGE, NULL, "coll nccl needs tensors on GPUs"},
        {"gloo", 0, 4, 0, 22809, 0, MERAK_USAGE, NULL, "coll 'gloo' is not mpi"},
        {NULL, 0, 1, 0, 22809, 0, MERAK_OK, "mpi", "one rank"},
        {NULL, 0, 4, 0, 0, 0, MERAK_OK, "mpi", "built without NCCL (configure --with-cuda finds it): device buffers staged"},
        {"nccl", 0, 4, 0, 0, 0, MERAK_USAGE, NULL, "built without NCCL"},
        {NULL, 0, 4, 0, 22809, 0, MERAK_OK, "nccl", "NCCL 2.28.9; each rank has its own GPU"},
        {"nccl", 0, 4, 0, 22809, 0, MERAK_OK, "nccl", "NCCL 2.28.9; asked for (--coll nccl)"},
        {"mpi", 0, 4, 0, 22809, 0, MERAK_OK, "mpi", "asked for (--coll mpi)"},
        /* NCCL before 2.30 refuses ranks sharing a GPU, the variable or not */
        {NULL, 0, 8, 1, 22809, 1, MERAK_OK, "mpi", "which NCCL 2.28.9 refuses (2.30 and later allow it"},
        {"nccl", 0, 8, 1, 22809, 0, MERAK_USAGE, NULL, "ranks of one node share a GPU, which NCCL 2.28.9 refuses"},
        /* 2.30 and later: with NCCL_MULTI_RANK_GPU_ENABLE=1 only */
        {NULL, 0, 8, 1, 23000, 0, MERAK_OK, "mpi", "refuses without NCCL_MULTI_RANK_GPU_ENABLE=1"},
        {"nccl", 0, 8, 1, 23001, 0, MERAK_USAGE, NULL, "2.30.1 refuses without NCCL_MULTI_RANK_GPU_ENABLE=1"},
        {NULL, 0, 8, 1, 23000, 1, MERAK_OK, "nccl", "ranks share a GPU (NCCL_MULTI_RANK_GPU_ENABLE=1)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(&cases[i]);
    tap_ok(merak_coll_check("mpi") == 0 && merak_coll_check("MPI") < 0 && merak_coll_check("") < 0,
           "names: mpi is one, MPI and the empty name are not");
    tap_ok(!strncmp(merak_coll_names(), "mpi", 3), "merak_coll_names starts with mpi (%s)", merak_coll_names());
    tap_ok((merak_nccl_version() > 0) == (merak_coll_check("nccl") == 0),
           "an NCCL version (%d) exactly when nccl is a name", merak_nccl_version());
    return tap_done();
}
