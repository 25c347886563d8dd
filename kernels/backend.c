/*
 * backend.c - the kernel backends by name: the one table that turns a
 * --device name into a backend (merak_backend_find) and opens its kernels
 * (merak_kernels_open), choosing the GPU of a rank.  Everything else asks
 * the entry (built, host, profile, device memory) instead of the name.
 */
#include "config.h" /* HAVE_CUDA */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#ifdef HAVE_CUDA
#include "cuda/cuda_kernels.h"
#endif

static const merak_backend backends[] = {
    {.name = "cpu", .label = "CPU", .built = 1, .host = 1, .profile = "cpu", .bf16 = 1},
#ifdef HAVE_CUDA
    {.name = "cuda", .label = "CUDA", .built = 1, .profile = "h100-80g", .bf16 = 1, .tf32 = 1, .is_device = merak_cuda_is_device_ptr,
     .to_host = merak_cuda_memcpy_d2h, .to_device = merak_cuda_memcpy_h2d,
     .stream = merak_cuda_stream_handle, .device_id = merak_cuda_device_id},
#else
    {.name = "cuda", .label = "CUDA", .profile = "h100-80g", .bf16 = 1, .tf32 = 1},
#endif
};
enum { NBACKEND = sizeof backends / sizeof backends[0] };

const merak_backend *merak_backend_find(const char *name)
{
    if (!name)
        return &backends[0];
    for (int i = 0; i < NBACKEND; i++)
        if (strcmp(backends[i].name, name) == 0)
            return &backends[i];
    return NULL;
}

const char *merak_backend_names(void)
{
    static char names[64];
    size_t k = 0;
    for (int i = 0; i < NBACKEND && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i == 0 ? "" : i + 1 < NBACKEND ? ", " : " or ",
                              backends[i].name);
    return names;
}

/* One line into err (may be NULL); returns MERAK_USAGE (a name or a build the arguments cannot use). */
static int say(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return MERAK_USAGE;
}

int merak_backend_check(const char *name, char *err, size_t errlen)
{
    const merak_backend *be = merak_backend_find(name);
    if (!be)
        return say(err, errlen, "device '%s' is not %s", name, merak_backend_names());
    if (!be->built)
        return say(err, errlen, "device %s: this merak was built without %s (configure found no %s toolkit, or "
                   "--without-%s)", be->name, be->label, be->label, be->name);
    return 0;
}

#ifdef HAVE_CUDA
static const merak_kernels *open_cuda(char *err, size_t errlen)
{
    if (!merak_cuda_available()) {
        say(err, errlen, "device cuda: no usable GPU (the CUDA runtime finds no device or no driver)");
        return NULL;
    }
    /* The GPU: MERAK_GPU (the Slurm plugin's placement), else this rank's
     * place on its node (mpirun's or srun's local rank) over the GPUs it
     * sees, else the first. */
    const char *gpu = getenv("MERAK_GPU"), *from = "MERAK_GPU";
    char why[256] = "", pick[32];
    if (!gpu || !*gpu) {
        const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        from = "OMPI_COMM_WORLD_LOCAL_RANK";
        if (!local) {
            local = getenv("SLURM_LOCALID");
            from = "SLURM_LOCALID";
        }
        const int n = merak_cuda_available();
        if (local && *local && n > 0) {
            snprintf(pick, sizeof pick, "%d", atoi(local) % n);
            gpu = pick;
        }
    }
    if (gpu && *gpu && merak_cuda_set_device(atoi(gpu)) < 0) {
        merak_cuda_status(why, sizeof why);
        say(err, errlen, "device cuda: GPU %s (from %s): %s", gpu, from, why);
        return NULL;
    }
    const merak_kernels *k = merak_kernels_cuda();
    if (!k) {
        merak_cuda_status(why, sizeof why);
        say(err, errlen, "device cuda: the backend did not start: %s", why);
    }
    return k;
}
#endif

const merak_kernels *merak_kernels_plan(const char *name)
{
#ifdef HAVE_CUDA
    if (name && strcmp(name, "cuda") == 0)
        return merak_kernels_cuda_plan();
#endif
    (void)name;
    return merak_kernels_cpu();
}

const merak_kernels *merak_kernels_open(const char *name, int threads, char *err, size_t errlen)
{
    if (merak_backend_check(name, err, errlen) < 0)
        return NULL;
    if (merak_backend_find(name)->host) {
        merak_kernels_cpu_set_threads(threads);
        return merak_kernels_cpu();
    }
#ifdef HAVE_CUDA
    return open_cuda(err, errlen);
#else
    return NULL;
#endif
}
