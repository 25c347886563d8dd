/*
 * args.c - merak_args: the defaults and the checks that need no graph and
 * no process grid (merak.h), below both the step loop (trainer.c) and the
 * checkpoints (ckpt.c), which read them.
 */
#include <string.h>

#include "comm/comm.h"
#include "errf.h"
#include "kernels.h"
#include "merak/merak.h"
#include "pipe/policy.h"
#include "pipe/stage.h"
#include "trainer_impl.h"
#include "plan/partition.h"

void merak_args_default(merak_args *a)
{
    memset(a, 0, sizeof *a);
    a->micro_batch = 4;
    a->seq_len = 64;
    a->micro_batches = 1;
    a->steps = 10;
    a->lr = 6e-4f;
    a->lr_schedule = MERAK_LR_COSINE;
    a->weight_decay = 0.1f;
    a->beta1 = 0.9f;
    a->beta2 = 0.95f;
    a->eps = 1e-8f;
    a->clip = 1.0f;
    a->seed = 1337;
    a->threads = 1;
    a->comm_timeout = MERAK_COMM_TIMEOUT_DEFAULT;
    a->save_shard_size = MERAK_SHARD_SIZE_DEFAULT;
}

int merak_have_cuda(void) { return merak_backend_find("cuda")->built; }

const char *merak_args_dtype(const merak_args *a)
{
    if (a->dtype)
        return a->dtype;
    const merak_backend *be = merak_backend_find(a->device);
    return be && be->built && !be->host && be->bf16 ? "bf16" : "fp32";
}

int merak_args_bf16(const merak_args *a) { return strcmp(merak_args_dtype(a), "bf16") == 0; }

int merak_args_virtual_stages(const merak_args *a)
{
    merak_schedule_kind sk;
    if (merak_schedule_parse(a->schedule ? a->schedule : "1f1b", &sk) < 0)
        return 1;
    return merak_virtual_stages(sk, a->virtual_stages);
}

/* merak_args_check's checks: 0, or < 0 with the line. */
static int check(const merak_args *a, char *err, size_t errlen)
{
    merak_schedule_kind sk;
    if (!a->data)
        return merak_errf(err, errlen, "no data given");
    if (a->micro_batch < 1 || a->seq_len < 1 || a->micro_batches < 1 || a->steps < 0 ||
        a->warmup < 0 || a->threads < 1)
        return merak_errf(err, errlen, "micro-batch, sequence length, micro-batches and threads must be positive");
    if (!(a->lr >= 0) || !(a->min_lr >= 0) || a->min_lr > a->lr)
        return merak_errf(err, errlen, "learning rates %g (min %g) are not usable", a->lr, a->min_lr);
    if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1) || !(a->weight_decay >= 0) ||
        !(a->clip >= 0))
        return merak_errf(err, errlen, "AdamW settings out of range (beta1 %g and beta2 %g in [0, 1), weight decay "
                          "%g and clip %g not negative)", a->beta1, a->beta2, a->weight_decay, a->clip);
    if (a->save_dtype && strcmp(a->save_dtype, "fp32") != 0 && strcmp(a->save_dtype, "bf16") != 0)
        return merak_errf(err, errlen, "save dtype '%s' is not fp32 or bf16", a->save_dtype);
    if (a->dtype && strcmp(a->dtype, "fp32") != 0 && strcmp(a->dtype, "tf32") != 0 && !merak_args_bf16(a))
        return merak_errf(err, errlen, "dtype '%s' is not fp32, tf32 or bf16", a->dtype);
    if (a->save_shard_size < 0)
        return merak_errf(err, errlen, "shard size %lld bytes is negative (0: one file whatever the size)",
                          (long long)a->save_shard_size);
    if (!(a->eps > 0))   /* 0: a parameter whose gradient stays 0 divides 0 by 0 */
        return merak_errf(err, errlen, "AdamW epsilon %g must be positive", a->eps);
    if (!(a->comm_timeout >= 0 && a->comm_timeout <= 1e9))
        return merak_errf(err, errlen, "communication timeout %g s is out of range (0: none, up to 1e9)",
                          a->comm_timeout);
    if (a->dp < 0 || a->tp < 0 || a->pp < 0 || a->zero < 0 || a->zero > 1 || !(a->bucket_mb >= 0))
        return merak_errf(err, errlen, "parallel settings out of range (dp=%d tp=%d pp=%d zero=%d bucket %g MiB)",
                          a->dp, a->tp, a->pp, a->zero, a->bucket_mb);
    if (merak_schedule_parse(a->schedule ? a->schedule : "1f1b", &sk) < 0)
        return merak_errf(err, errlen, "schedule '%s' is not %s", a->schedule, merak_schedule_names());
    int interleaved = sk == MERAK_SCHEDULE_INTERLEAVED;
    if (a->virtual_stages < 0 || a->virtual_stages > MERAK_MAX_CHUNKS ||
        (interleaved && a->virtual_stages == 1))
        return merak_errf(err, errlen, "virtual stages %d: the interleaved schedule takes 2 to %d",
                          a->virtual_stages, MERAK_MAX_CHUNKS);
    if (!interleaved && a->virtual_stages > 1)
        return merak_errf(err, errlen, "virtual stages %d need the interleaved schedule (not %s)",
                          a->virtual_stages, a->schedule ? a->schedule : "1f1b");
    if (a->tp_overlap < 0 || a->tp_overlap > MERAK_MAX_SUB_BATCHES)
        return merak_errf(err, errlen, "tp-overlap %d: 1 to %d sub-batches per micro-batch", a->tp_overlap,
                          MERAK_MAX_SUB_BATCHES);
    if (a->tp_overlap > 1 && a->micro_batch % a->tp_overlap)
        return merak_errf(err, errlen, "tp-overlap %d does not divide the micro-batch of %d sequences",
                          a->tp_overlap, a->micro_batch);
    if (a->save_every < 0 || a->keep_last < 0)
        return merak_errf(err, errlen, "save-every %d and keep-last %d must not be negative", a->save_every,
                          a->keep_last);
    if (!a->save && (a->save_every || a->keep_last))
        return merak_errf(err, errlen, "save-every and keep-last need a checkpoint directory (save)");
    if (a->resume && strcmp(a->resume, "latest") == 0 && !a->save)
        return merak_errf(err, errlen, "resume latest needs a checkpoint directory (save) to look in");
    if (a->sample_every < 0 || a->sample_tokens < 0)
        return merak_errf(err, errlen, "sample-every %d and sample-tokens %d must not be negative", a->sample_every,
                          a->sample_tokens);
    merak_recompute rp;
    if (a->recompute && merak_recompute_parse(a->recompute, &rp, err, errlen) < 0)
        return -1;
    if (a->partition && merak_partition_check(a->partition, err, errlen) < 0)
        return -1;
    const char *method = a->partition ? a->partition : MERAK_PARTITION_DEFAULT;
    if (a->profile && strcmp(method, "autopipe") != 0)
        return merak_errf(err, errlen, "device profile '%s': only the autopipe partition uses one (partition %s)",
                          a->profile, method);
    if (a->p2p && merak_p2p_check(a->p2p) < 0)
        return merak_errf(err, errlen, "p2p '%s' is not %s", a->p2p, merak_p2p_names());
    if (a->coll && merak_coll_check(a->coll) < 0)
        return merak_errf(err, errlen, "coll '%s' is not %s", a->coll, merak_coll_names());
    if (merak_backend_check(a->device, err, errlen) < 0)
        return -1;
    const merak_backend *be = merak_backend_find(a->device);
    if (merak_args_bf16(a) && !be->bf16)
        return merak_errf(err, errlen, "dtype bf16 on device %s is not implemented yet (the CPU emulates bf16: "
                          "--device cpu; or --dtype fp32)", be->name);
    if (strcmp(merak_args_dtype(a), "tf32") == 0 && !be->tf32)
        return merak_errf(err, errlen, "dtype tf32 on device %s: TF32 is the tensor-core product format of NVIDIA "
                          "GPUs (--device cuda); here --dtype fp32, or bf16 (emulated)", be->name);
    int fs;
    if (merak_args_bf16(a) && merak_bf16_storage_env(&fs, err, errlen) < 0)
        return -1;
    return 0;
}

int merak_args_float_storage(const merak_args *a)
{
    int fs = 0;
    if (merak_args_bf16(a) && merak_bf16_storage_env(&fs, NULL, 0) < 0)
        fs = 0;   /* merak_args_check refused it */
    return merak_args_bf16(a) && (fs || a->tp_overlap > 1);
}

int merak_args_check(const merak_args *a, char *err, size_t errlen)
{
    return check(a, err, errlen) < 0 ? MERAK_USAGE : MERAK_OK;
}
