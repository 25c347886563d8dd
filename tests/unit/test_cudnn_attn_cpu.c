/*
 * test_cudnn_attn_cpu.c - TAP tests of cuDNN's fused attention
 * (kernels/cuda/cudnn_attn.h) that need no GPU: which shapes it takes, and
 * that its calls fail cleanly (-1, the error recorded for merak_cuda_status,
 * nothing thrown or printed) where they cannot run.
 *
 * The graphs themselves cannot be checked here: cudnn-frontend's validate()
 * of an SDPA graph asks the CUDA runtime for the device's properties
 * (cudaGetDeviceProperties), and building one needs a cuDNN handle, which
 * needs a device.  tests/gpu/test_cudnn_attn.c checks them on a GPU.
 *
 * Built with the cuDNN attention (HAVE_CUDNN_ATTN); runs on any machine.
 * Without a device, a supported call goes as far as loading libcudnn and
 * making its handle, and must fail there cleanly, and a probe
 * (merak_cudnn_attn_takes) must refuse without recording anything; with
 * one, those cases are skipped (the GPU test runs the real thing).
 */
#include "cuda/cuda_kernels.h" /* merak_cuda_available, merak_cuda_status */
#include "cuda/cudnn_attn.h"   /* merak_cudnn_attn_* */
#include "tap.h"

#include <stdint.h>
#include <string.h>

static merak_attn_shape shape(int B, int T, int nh, int nkv, int hd, int qs, int ks, int vs)
{
    merak_attn_shape s;
    memset(&s, 0, sizeof s);
    s.B = B, s.T = T, s.n_head = nh, s.n_kv_head = nkv, s.head_dim = hd;
    s.q_stride = qs, s.k_stride = ks, s.v_stride = vs;
    return s;
}

/* A fused qkv row: (nh + 2 nkv) hd for every stride. */
static merak_attn_shape fused(int B, int T, int nh, int nkv, int hd)
{
    const int row = (nh + 2 * nkv) * hd;
    return shape(B, T, nh, nkv, hd, row, row, row);
}

static void test_supported(void)
{
    merak_attn_shape s;
    s = fused(4, 1024, 12, 12, 64);
    tap_ok(merak_cudnn_attn_supported(&s) == 1, "GPT-2 124M (12 heads of 64, fused qkv) is supported");
    s = fused(1, 8192, 32, 8, 128);
    tap_ok(merak_cudnn_attn_supported(&s) == 1, "LLaMA-3 8B (32 heads, 8 kv heads of 128) is supported");
    s = fused(2, 77, 4, 1, 256);
    tap_ok(merak_cudnn_attn_supported(&s) == 1, "head_dim 256, multi-query, odd T is supported");
    s = shape(2, 64, 8, 2, 64, 512, 128, 128);
    tap_ok(merak_cudnn_attn_supported(&s) == 1, "separate dense q, k, v are supported");
    s = fused(2, 64, 4, 4, 264);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "head_dim 264 (> 256) is not");
    s = fused(2, 64, 4, 4, 36);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "head_dim 36 (not a multiple of 8) is not");
    s = fused(2, 64, 6, 4, 64);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "n_kv_head 4 not dividing n_head 6 is not");
    s = shape(2, 64, 4, 4, 64, 260, 256, 256);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "a q stride of 260 (rows not 16-byte aligned) is not");
    s = shape(2, 64, 4, 4, 64, 128, 256, 256);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "a q stride narrower than its heads is not");
    s = fused(0, 64, 4, 4, 64);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "B = 0 is not");
    s = fused(1, 0, 4, 4, 64);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "T = 0 is not");
    tap_ok(merak_cudnn_attn_supported(NULL) == 0, "NULL is not");
    s = fused(64, 65536, 32, 8, 128);
    tap_ok(merak_cudnn_attn_supported(&s) == 0, "more than 2^31 elements of qkv is not");
}

/* The first error of the backend sticks, so each failing call below is
 * checked against the message it must have recorded, in this order. */
static void test_errors(void)
{
    char err[512] = "";
    merak_attn_shape bad = fused(2, 64, 4, 4, 36);
    uint16_t *p = (uint16_t *)(uintptr_t)0x10000; /* never dereferenced on the host */
    int rc = merak_cudnn_attn_fwd(&bad, p, (float *)p, p, p, p);
    tap_ok(rc == -1 && merak_cuda_status(err, sizeof err) == -1 && strstr(err, "not supported"),
           "an unsupported shape fails, recorded: %s", err);
    rc = merak_cudnn_attn_bwd(&bad, p, p, p, 256, 256, 256, p, p, (float *)p, p, p, p);
    tap_ok(rc == -1, "after an error every call fails at once");
}

/* A probe where cuDNN cannot run is a refusal, not an error: 0, nothing
 * recorded (the backend goes on without cuDNN), and no second try. */
static void test_takes_no_device(void)
{
    char err[512] = "";
    merak_attn_shape s = fused(1, 64, 2, 2, 64);
    const int gs[3] = {128, 128, 128};
    int a = merak_cudnn_attn_takes(&s, gs), b = merak_cudnn_attn_takes(&s, NULL);
    tap_ok(a == 0 && b == 0 && merak_cuda_status(err, sizeof err) == 0,
           "without a device cuDNN does not take a shape, and nothing is recorded: %s", err[0] ? err : "ok");
    merak_attn_shape bad = fused(2, 64, 4, 4, 36);
    tap_ok(merak_cudnn_attn_takes(&bad, NULL) == 0 && merak_cuda_status(err, sizeof err) == 0,
           "nor a shape it never supports");
}

/* A separate process would be needed for both; run this one first when
 * there is no device (see main). */
static void test_no_device(void)
{
    char err[512] = "";
    merak_attn_shape s = fused(1, 64, 2, 2, 64);
    uint16_t *p = (uint16_t *)(uintptr_t)0x10000;
    int rc = merak_cudnn_attn_fwd(&s, p, (float *)p, p, p, p);
    tap_ok(rc == -1 && merak_cuda_status(err, sizeof err) == -1 &&
               (strstr(err, "cudnn") || strstr(err, "libcudnn")),
           "without a device a forward fails cleanly in cuDNN: %s", err);
}

int main(void)
{
    test_supported();
    if (merak_cuda_available()) {
        tap_ok(1, "# SKIP a device is present: tests/gpu/test_cudnn_attn runs the graphs");
        test_errors();
    } else {
        test_takes_no_device();
        test_no_device();
        /* the backend is stopped now: the sticky-error check still holds */
        merak_attn_shape bad = fused(2, 64, 4, 4, 36);
        uint16_t *p = (uint16_t *)(uintptr_t)0x10000;
        tap_ok(merak_cudnn_attn_bwd(&bad, p, p, p, 256, 256, 256, p, p, (float *)p, p, p, p) == -1,
               "after an error every call fails at once");
    }
    return tap_done();
}
