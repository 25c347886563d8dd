/*
 * auto_layout.c - merak-train --auto: the training arguments' layout from
 * the planner's search (plan/auto.h, the one merak-plan --auto runs) for
 * the ranks the launcher started (merak.h, merak_args_auto).
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "errf.h"
#include "kernels.h"
#include "merak/merak.h"
#include "pipe/policy.h"
#include "plan/auto.h"
#include "plan/device.h"
#include "trainer_impl.h"

const char *merak_args_profile(const merak_args *a)
{
    const merak_backend *be = merak_backend_find(a->device);
    return a->profile ? a->profile : be ? be->profile : "cpu";
}

int merak_args_auto(merak_args *a, const merak_graph *g, long global_batch, merak_auto_report *rep, char *err,
                    size_t errlen)
{
    merak_auto_report mine;
    rep = rep ? rep : &mine;
    memset(rep, 0, sizeof *rep);
    int world, per_node;
    if (merak_launch_size(&world, &per_node, err, errlen) < 0)
        return MERAK_USAGE;
    merak_device d;
    const char *profile = merak_args_profile(a);
    int rc = merak_device_load(profile, &d, err, errlen);
    if (rc < 0)
        return rc;
    /* memory as the kernels this run opens plan it, whatever the profile says */
    const merak_backend *be = merak_backend_find(a->device);
    if (be)
        snprintf(d.backend, sizeof d.backend, "%s", be->name);
    merak_schedule_kind kind = MERAK_SCHEDULE_1F1B;
    if (a->schedule && merak_schedule_parse(a->schedule, &kind) < 0)
        return merak_errf(err, errlen, "schedule '%s' is not one of %s", a->schedule, merak_schedule_names()), MERAK_USAGE;
    if (a->micro_batch < 1)
        return merak_errf(err, errlen, "micro-batch %d must be at least 1", a->micro_batch), MERAK_USAGE;
    *rep = (merak_auto_report){.world = world, .per_node = per_node, .profile = profile, .memory = d.memory,
                               .global_batch = global_batch ? global_batch : (long)a->micro_batch * world};
    merak_auto_query q = {.gpus = world, .gpus_per_node = per_node, .micro_batch = a->micro_batch,
                          .global_batch = rep->global_batch, .dp = a->dp, .tp = a->tp, .pp = a->pp,
                          .schedule = a->schedule ? (int)kind : -1, .virtual_stages = a->virtual_stages,
                          .layers = a->model ? a->model->n_layer : 0,
                          .recompute = a->recompute, .zero = a->zero, .partition = a->partition,
                          .bf16 = merak_args_bf16(a), .float_storage = merak_args_float_storage(a)};
    merak_auto_result r;
    rc = merak_layout_auto(g, &q, &d, &r, err, errlen);
    rep->tried = r.tried, rep->fitting = r.fitting, rep->simulated = r.simulated;
    if (rc == 0 && r.count == 0) {
        if (r.leanest == 0)
            rc = (merak_errf(err, errlen, "no layout of %d rank(s) can run this model with a global batch of %ld "
                             "(micro-batch %d)", world, rep->global_batch, a->micro_batch), MERAK_USAGE);
        else
            rc = merak_errf(err, errlen, "no layout of %d rank(s) fits this model: the leanest of the %zu tried "
                            "needs %.2f GB, a %s has %.2f GB", world, r.tried, r.leanest / 1e9, profile,
                            d.memory / 1e9);
    }
    if (rc < 0) {
        merak_auto_result_free(&r);
        return rc;
    }
    rep->count = r.count < MERAK_AUTO_LAYOUTS ? r.count : MERAK_AUTO_LAYOUTS;
    for (int i = 0; i < rep->count; i++) {
        const merak_auto_choice *c = &r.choice[i];
        rep->layout[i] = (merak_auto_layout){c->L.dp, c->L.tp, c->L.pp, merak_schedule_name(c->L.schedule),
                                             merak_virtual_stages(c->L.schedule, c->L.virtual_stages), c->recompute,
                                             c->L.zero, c->L.micro_batches, c->step, c->tokens_per_s, c->mfu,
                                             c->peak};
    }
    const merak_auto_layout *best = &rep->layout[0];
    a->dp = best->dp, a->tp = best->tp, a->pp = best->pp;
    a->schedule = best->schedule;
    a->virtual_stages = best->virtual_stages > 1 ? best->virtual_stages : 0;
    a->recompute = best->recompute;
    a->zero = best->zero;
    a->micro_batches = best->micro_batches;
    merak_auto_result_free(&r);
    return 0;
}
