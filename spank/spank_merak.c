/*
 * spank_merak.c - the Slurm SPANK plugin: srun/sbatch/salloc options
 * --merak-dp/tp/pp/... , validation in srun before any task starts, and on
 * each task the environment contract of DESIGN.md section 4 (MERAK_*), CPU
 * binding and the task's NIC for UCX and NCCL, from libmerak-topo's
 * placement of the whole step.
 *
 * Where each piece runs (Slurm 22.05):
 *   slurm_spank_init             every context: site arguments, options registered
 *                                for srun (local), sbatch/salloc (allocator) and
 *                                slurmstepd (remote), so all three accept them
 *   option callback              srun/sbatch while parsing, slurmstepd again:
 *                                values checked (bad value: srun fails, rc 255)
 *   slurm_spank_local_user_init  srun, allocation known, no task started: degrees
 *                                against the task count and tasks per node; the
 *                                rank table with --merak-verbose
 *   slurm_spank_user_init        slurmstepd, once per node: topology + placement;
 *                                a failure is only remembered (Slurm ignores
 *                                user_init errors, SchedMD bug 7573) ...
 *   slurm_spank_task_init        ... and reported here, in each task before exec,
 *                                where Slurm fails the step with our message
 * A job without any --merak option is not touched.  Batch, interactive and
 * extern steps only get the degrees the user gave (for an inner srun).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "merak/topo.h"
#include "spank_args.h"

SPANK_PLUGIN(merak, 1);

static merak_spank_opts opts;
static merak_spank_site site;

/* What slurmstepd worked out for this node in user_init. */
static struct {
    int done, failed;
    char err[512];
    merak_topo_placement *p;
    merak_topo_node *node;          /* this node, for its NICs' kinds */
    int node_id, dp, tp, pp;
} here;

static int opt_cb(int val, const char *optarg, int remote)
{
    (void)remote;
    char err[256];
    if (merak_spank_set_option(&opts, val, optarg, err, sizeof err) < 0) {
        slurm_error("merak: %s", err);
        return -1;
    }
    return 0;
}

static struct spank_option options[] = {
    {"merak-dp", "N", "[merak] data-parallel replicas (default: tasks / (tp * pp))", 1, MERAK_OPT_DP, opt_cb},
    {"merak-tp", "N", "[merak] tensor-parallel degree; each tp group stays inside one node (default 1)", 1,
     MERAK_OPT_TP, opt_cb},
    {"merak-pp", "N", "[merak] pipeline stages (default 1)", 1, MERAK_OPT_PP, opt_cb},
    {"merak-microbatches", "M", "[merak] micro-batches per step (sets MERAK_MICROBATCHES)", 1,
     MERAK_OPT_MICROBATCHES, opt_cb},
    {"merak-schedule", "S", "[merak] pipeline schedule: gpipe, 1f1b, scp, zb-h1 or interleaved (sets MERAK_SCHEDULE)", 1,
     MERAK_OPT_SCHEDULE, opt_cb},
    {"merak-virtual-stages", "V", "[merak] interleaved: model chunks per stage, 2 to 64 (sets MERAK_VIRTUAL_STAGES)",
     1, MERAK_OPT_VIRTUAL_STAGES, opt_cb},
    {"merak-tp-overlap", "K", "[merak] sub-batches per micro-batch whose tensor-parallel all-reduces overlap "
     "compute, 1 to 64 (sets MERAK_TP_OVERLAP)", 1, MERAK_OPT_TP_OVERLAP, opt_cb},
    {"merak-recompute", "R", "[merak] recomputation: none, full, stage-aware[=R0] or budget=GB (sets MERAK_RECOMPUTE)", 1,
     MERAK_OPT_RECOMPUTE, opt_cb},
    {"merak-bind", "closest|none", "[merak] bind each task to the cores next to its GPU (default closest)", 1,
     MERAK_OPT_BIND, opt_cb},
    {"merak-verbose", NULL, "[merak] print the placement of every task", 0, MERAK_OPT_VERBOSE, opt_cb},
    SPANK_OPTIONS_TABLE_END
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    char err[256];
    merak_spank_opts_init(&opts);
    merak_spank_site_init(&site);
    for (int i = 0; i < ac; i++)
        if (merak_spank_site_arg(&site, av[i], err, sizeof err) < 0) {
            slurm_error("merak: %s", err);
            return -1;
        }
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
    for (int i = 0; options[i].name; i++) {
        spank_err_t rc = spank_option_register(sp, &options[i]);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("merak: cannot register --%s: %s", options[i].name, spank_strerror(rc));
            return -1;
        }
    }
    return 0;
}

/* A step variable: srun's own environment in local context, the job's in
 * slurmstepd.  Returns buf, or NULL when unset. */
static const char *step_env(spank_t sp, const char *name, char *buf, size_t len)
{
    if (spank_remote(sp))
        return spank_getenv(sp, name, buf, (int)len) == ESPANK_SUCCESS ? buf : NULL;
    const char *v = getenv(name);
    if (!v)
        return NULL;
    snprintf(buf, len, "%s", v);
    return buf;
}

/* The step's tasks per node and distribution, then the placement with
 * topology `node` for node `node_id` (NULL: ranks only).  0 or -1 with err. */
static int place(spank_t sp, int nnodes, int ntasks, int dp, int tp, int pp, int node_id,
                 const merak_topo_node *node, merak_topo_placement **out, char *err, size_t errlen)
{
    char tpn[1024], dist_s[64];
    int *counts = NULL, ncounts = 0, dist = MERAK_TOPO_DIST_BLOCK, rc = -1;
    const char *t = step_env(sp, "SLURM_STEP_TASKS_PER_NODE", tpn, sizeof tpn);
    if (!t)
        t = step_env(sp, "SLURM_TASKS_PER_NODE", tpn, sizeof tpn);
    if (!t) {
        /* srun before launch: block layout of ntasks over nnodes, as Slurm
         * deals them by default (the first ntasks % nnodes nodes get one more). */
        size_t used = 0;
        for (int n = 0; n < nnodes && used < sizeof tpn; n++)
            used += (size_t)snprintf(tpn + used, sizeof tpn - used, "%s%d", n ? "," : "",
                                     ntasks / nnodes + (n < ntasks % nnodes));
        t = tpn;
    }
    if (merak_topo_tasks_per_node_parse(t, &counts, &ncounts, err, errlen) < 0)
        return -1;
    const char *d = step_env(sp, "SLURM_DISTRIBUTION", dist_s, sizeof dist_s);
    if (d && merak_topo_distribution_parse(d, &dist, err, errlen) < 0) {
        snprintf(err, errlen, "distribution '%s' is not supported; use srun -m block or -m cyclic", d);
        goto out;
    }
    if (ncounts != nnodes) {
        snprintf(err, errlen, "tasks per node '%.64s' lists %d nodes, the step has %d", t, ncounts, nnodes);
        goto out;
    }
    const merak_topo_node **nodes = calloc((size_t)nnodes, sizeof *nodes);
    if (!nodes) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (node && node_id >= 0 && node_id < nnodes)
        nodes[node_id] = node;
    merak_topo_request req = {nnodes, counts, nodes, dp, tp, pp, dist};
    rc = merak_topo_place(&req, out, err, errlen);
    free(nodes);
out:
    free(counts);
    return rc;
}

static int is_special_step(uint32_t step)
{
    return step == SLURM_BATCH_SCRIPT || step == SLURM_INTERACTIVE_STEP || step == SLURM_EXTERN_CONT;
}

/* srun, after the allocation and before launch: refuse what cannot work. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!opts.given || spank_context() != S_CTX_LOCAL)
        return 0;
    uint32_t ntasks = 0, nnodes = 0;
    if (spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_NNODES, &nnodes) != ESPANK_SUCCESS || nnodes < 1) {
        slurm_error("merak: srun cannot tell the step's task and node counts");
        return -1;
    }
    char err[512];
    int dp, tp, pp;
    merak_topo_placement *p = NULL;
    if (merak_spank_resolve(&opts, &site, (int)ntasks, &dp, &tp, &pp, err, sizeof err) < 0 ||
        place(sp, (int)nnodes, (int)ntasks, dp, tp, pp, -1, NULL, &p, err, sizeof err) < 0) {
        slurm_error("merak: %s", err);
        return -1;
    }
    if (opts.verbose) {
        const merak_topo_score *s = merak_topo_placement_score(p);
        fprintf(stderr, "merak: dp=%d tp=%d pp=%d on %u tasks, %u node(s)%s\n", dp, tp, pp, ntasks, nnodes,
                s->renumbered ? "; ranks renumbered so tp groups stay inside nodes" : "");
        fprintf(stderr, "merak: %5s %5s %5s %5s %4s %4s %4s\n", "node", "task", "procid", "rank", "dp", "tp",
                "pp");
        for (int i = 0; i < merak_topo_placement_ntasks(p); i++) {
            const merak_topo_task *t = merak_topo_placement_task(p, i);
            fprintf(stderr, "merak: %5d %5d %6d %5d %4d %4d %4d\n", t->node, t->local_task, t->procid, t->rank,
                    t->dp, t->tp, t->pp);
        }
    }
    merak_topo_placement_destroy(p);
    return 0;
}

/* This node's topology: the site's XML or the live node, restricted to the
 * step's GPUs and the site's NICs. */
static int load_node(spank_t sp, merak_topo_node **out, char *err, size_t errlen)
{
    merak_topo_node *node = NULL;
    if (merak_topo_node_load(&node, site.topology[0] ? site.topology : NULL, err, errlen) < 0)
        return -1;
    char buf[1024];
    const char *nics = site.nics[0] ? site.nics : step_env(sp, "NCCL_IB_HCA", buf, sizeof buf);
    if (nics && *nics && merak_topo_node_select_nics(node, nics, err, errlen) < 0)
        goto fail;
    /* Slurm's global GPU ids (gres.conf order, normally bus order). */
    const char *gpus = step_env(sp, "SLURM_STEP_GPUS", buf, sizeof buf);
    if (!gpus)
        gpus = step_env(sp, "SLURM_JOB_GPUS", buf, sizeof buf);
    if (gpus && merak_topo_node_ngpus(node) > 0) {
        int ids[256], n = merak_topo_node_parse_visible(node, gpus, ids, 256, err, errlen);
        merak_topo_node *sub = NULL;
        if (n < 0 || n > 256 || merak_topo_node_restrict_gpus(node, ids, n, &sub, err, errlen) < 0)
            goto fail;
        merak_topo_node_destroy(node);
        node = sub;
    }
    *out = node;
    return 0;
fail:
    merak_topo_node_destroy(node);
    return -1;
}

/* slurmstepd, once per node, before the tasks fork: the placement. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!opts.given || !spank_remote(sp))
        return 0;
    uint32_t step = 0, nnodes = 0, node_id = 0, ntasks = 0;
    here.done = 1;
    if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || is_special_step(step))
        return 0;
    if (spank_get_item(sp, S_JOB_NNODES, &nnodes) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_NODEID, &node_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS) {
        here.failed = 1;
        snprintf(here.err, sizeof here.err, "slurmstepd cannot tell the step's nodes and tasks");
        return 0;
    }
    merak_topo_node *node = NULL;
    here.node_id = (int)node_id;
    char err[480];
    if (merak_spank_resolve(&opts, &site, (int)ntasks, &here.dp, &here.tp, &here.pp, err, sizeof err) < 0 ||
        load_node(sp, &node, err, sizeof err) < 0 ||
        place(sp, (int)nnodes, (int)ntasks, here.dp, here.tp, here.pp, (int)node_id, node, &here.p, err,
              sizeof err) < 0) {
        here.failed = 1;
        snprintf(here.err, sizeof here.err, "%s", err);
    }
    here.node = node;
    return 0;
}

static int set(spank_t sp, const char *name, const char *value, int overwrite)
{
    spank_err_t rc = spank_setenv(sp, name, value, overwrite);
    if (rc != ESPANK_SUCCESS && !(rc == ESPANK_ENV_EXISTS && !overwrite)) {
        slurm_error("merak: cannot set %s: %s", name, spank_strerror(rc));
        return -1;
    }
    return 0;
}

/* set() for merak_topo_task_env */
static int set_env(void *sp, const char *name, const char *value, int overwrite)
{
    return set(sp, name, value, overwrite);
}

static int set_int(spank_t sp, const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    return set(sp, name, buf, 1);
}

/* The defaults merak-train takes from the environment, when given. */
static int set_passthrough(spank_t sp)
{
    int rc = 0;
    if (opts.microbatches)
        rc |= set_int(sp, "MERAK_MICROBATCHES", opts.microbatches);
    if (opts.schedule[0])
        rc |= set(sp, "MERAK_SCHEDULE", opts.schedule, 1);
    if (opts.recompute[0])
        rc |= set(sp, "MERAK_RECOMPUTE", opts.recompute, 1);
    if (opts.virtual_stages)
        rc |= set_int(sp, "MERAK_VIRTUAL_STAGES", opts.virtual_stages);
    if (opts.tp_overlap)
        rc |= set_int(sp, "MERAK_TP_OVERLAP", opts.tp_overlap);
    return rc ? -1 : 0;
}

/* Batch, interactive and extern steps: the degrees the user gave, for an
 * srun inside them, and the pass-through defaults. */
static int set_requested(spank_t sp)
{
    int rc = set_passthrough(sp);
    if (opts.dp)
        rc |= set_int(sp, "MERAK_DP", opts.dp);
    if (opts.tp)
        rc |= set_int(sp, "MERAK_TP", opts.tp);
    if (opts.pp)
        rc |= set_int(sp, "MERAK_PP", opts.pp);
    return rc ? -1 : 0;
}

/* Each task, before exec: its environment and binding. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac, (void)av;
    if (!opts.given || !spank_remote(sp))
        return 0;
    uint32_t step = 0;
    if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
        slurm_error("merak: cannot read the step id");
        return -1;
    }
    if (is_special_step(step))
        return set_requested(sp);
    if (!here.done || here.failed) {
        slurm_error("merak: %s", here.done ? here.err : "no placement was computed for this node");
        return -1;
    }
    int local = 0;
    if (spank_get_item(sp, S_TASK_ID, &local) != ESPANK_SUCCESS) {
        slurm_error("merak: cannot read the task's local id");
        return -1;
    }
    const merak_topo_task *t = merak_topo_placement_find(here.p, here.node_id, local);
    if (!t) {
        slurm_error("merak: no place for task %d of node %d", local, here.node_id);
        return -1;
    }
    int rc = set_passthrough(sp);
    rc |= merak_topo_task_env(t, here.node, here.dp, here.tp, here.pp, set_env, sp);
    if (t->cpus)
        rc |= set(sp, "MERAK_CPUS", t->cpus, 1);
    if (rc)
        return -1;
    int bind = opts.bind != MERAK_BIND_UNSET ? opts.bind : site.bind;
    char err[256];
    if (bind == MERAK_BIND_CLOSEST && t->cpus && merak_topo_bind(t->cpus, err, sizeof err) < 0) {
        slurm_error("merak: rank %d: %s", t->rank, err);
        return -1;
    }
    if (opts.verbose) {
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        fprintf(stderr, "merak: rank %d (dp %d, tp %d, pp %d) on %s task %d: gpu %d%s%s, cpus %s%s, nic %s\n",
                t->rank, t->dp, t->tp, t->pp, host, local, t->gpu, t->gpu_busid ? " " : "",
                t->gpu_busid ? t->gpu_busid : "", t->cpus ? t->cpus : "-",
                bind == MERAK_BIND_CLOSEST && t->cpus ? " (bound)" : "", t->nic ? t->nic : "-");
    }
    return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp, (void)ac, (void)av;
    merak_topo_placement_destroy(here.p);
    merak_topo_node_destroy(here.node);
    here.p = NULL;
    here.node = NULL;
    return 0;
}
