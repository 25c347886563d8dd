/*
 * pointwise.cu - elementwise ops: GELU, SwiGLU, add, accumulate, scale,
 * dropout, and the bf16 rounding of --dtype bf16.
 *
 * One kernel runs them all (ew_k): an op is a functor that computes element
 * e from its inputs' values and its outputs' (read first where the op
 * accumulates, +=), in float, on float buffers or on bf16 storage (the
 * *16 launchers: read widened, written rounded once).  Where every buffer
 * of a call sits at the same offset within 16 bytes, each thread moves four
 * floats or eight bf16 with one 16-byte load per input and one store per
 * output (ld.global.v4 / st.global.v4: what
 * the roofline asks of a memory-bound kernel); the elements before the
 * first 16-byte boundary and after the last are done one at a time.  An
 * element's arithmetic is the same either way, so results do not depend
 * on alignment.
 *
 * Conventions shared by every kernel file: cuda_common.cuh.
 */
#include "bf16.h"
#include "mix64.h"
#include "cuda_common.cuh"

/* ------------------------------------------------------------------ the kernel */

/* A call's buffers: up to 3 inputs, up to 2 outputs (NULL: absent), of
 * elements T: float, or uint16_t for bf16 storage (widened as read,
 * rounded once as written). */
template <typename T>
struct ew_bufs {
    const T *in[3];
    T *out[2];
};

/* 16 bytes of T: four floats, or eight bf16. */
template <typename T> struct ew_vec;
template <> struct ew_vec<float> {
    typedef float4 V;
    static const int W = 4;
};
template <> struct ew_vec<uint16_t> {
    typedef uint4 V;
    static const int W = 8;
};

/* Elements [0, head) and [head + W n4, n) one at a time, [head, head +
 * W n4) W at a time (every buffer 16-byte aligned there).  Op: static
 * NI inputs, NO outputs, RMW (the outputs are read first), and
 *   __device__ void operator()(size_t e, const float *x, float *y) const
 * with x[NI] the inputs' values of element e and y[NO] its outputs'. */
template <class Op, typename T>
__global__ void ew_k(Op op, ew_bufs<T> b, size_t head, size_t n4, size_t n)
{
    typedef typename ew_vec<T>::V V;
    const int W = ew_vec<T>::W;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = tid; i < n4; i += stride) {
        V x[Op::NI > 0 ? Op::NI : 1], y[Op::NO];
#pragma unroll
        for (int k = 0; k < Op::NI; k++)
            x[k] = reinterpret_cast<const V *>(b.in[k] + head)[i];
#pragma unroll
        for (int k = 0; k < Op::NO; k++)
            if (Op::RMW && b.out[k])
                y[k] = reinterpret_cast<const V *>(b.out[k] + head)[i];
#pragma unroll
        for (int l = 0; l < W; l++) {
            float xs[Op::NI > 0 ? Op::NI : 1], ys[Op::NO];
#pragma unroll
            for (int k = 0; k < Op::NI; k++)
                xs[k] = as_f32(reinterpret_cast<const T *>(&x[k])[l]);
#pragma unroll
            for (int k = 0; k < Op::NO; k++)
                ys[k] = Op::RMW && b.out[k] ? as_f32(reinterpret_cast<const T *>(&y[k])[l]) : 0.0f;
            op(head + (size_t)W * i + l, xs, ys);
#pragma unroll
            for (int k = 0; k < Op::NO; k++)
                put(reinterpret_cast<T *>(&y[k]) + l, ys[k]);
        }
#pragma unroll
        for (int k = 0; k < Op::NO; k++)
            if (b.out[k])
                reinterpret_cast<V *>(b.out[k] + head)[i] = y[k];
    }
    /* the rest one at a time: the head, then the tail */
    const size_t rest = n - (size_t)W * n4;
    for (size_t j = tid; j < rest; j += stride) {
        const size_t e = j < head ? j : j + (size_t)W * n4;
        float xs[Op::NI > 0 ? Op::NI : 1], ys[Op::NO];
#pragma unroll
        for (int k = 0; k < Op::NI; k++)
            xs[k] = as_f32(b.in[k][e]);
#pragma unroll
        for (int k = 0; k < Op::NO; k++)
            ys[k] = Op::RMW && b.out[k] ? as_f32(b.out[k][e]) : 0.0f;
        op(e, xs, ys);
#pragma unroll
        for (int k = 0; k < Op::NO; k++)
            if (b.out[k])
                put(b.out[k] + e, ys[k]);
    }
}

/* Launches op over n elements of b: W at a time where every buffer has
 * the same offset within 16 bytes (an executor's sub-batch can start
 * anywhere), after the elements before the first boundary. */
template <class Op, typename T>
static int ew(void *stream, const Op &op, ew_bufs<T> b, size_t n)
{
    const size_t W = (size_t)ew_vec<T>::W;
    if (n == 0)
        return cudaSuccess;
    const void *p[5] = {b.in[0], b.in[1], b.in[2], b.out[0], b.out[1]};
    long off = -1;   /* the common offset within 16 bytes, in bytes */
    int same = 1;
    for (int k = 0; k < 5; k++)
        if (p[k]) {
            const long o = (long)((uintptr_t)p[k] % 16);
            same &= off < 0 || o == off;
            off = off < 0 ? o : off;
        }
    size_t head = n, n4 = 0;
    if (same && off >= 0 && off % (long)sizeof(T) == 0) {
        head = (size_t)((16 - off) % 16) / sizeof(T);
        if (head > n)
            head = n;
        n4 = (n - head) / W;
    }
    const size_t work = n4 > n - W * n4 ? n4 : n - W * n4;
    ew_k<Op, T><<<ew_grid(work), NT, 0, STREAM(stream)>>>(op, b, head, n4, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ the ops */

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

struct gelu_fwd_op {
    static const int NI = 1, NO = 1, RMW = 0;
    __device__ void operator()(size_t, const float *x, float *y) const
    {
        const float v = x[0];
        const float u = GELU_K0 * (v + GELU_K1 * v * v * v);
        y[0] = 0.5f * v * (1.0f + tanhf(u));
    }
};

/* x: dout, inp; y: dinp += (ACC 0: dinp = 0 + ..., dinp unread) */
template <int ACC>
struct gelu_bwd_op {
    static const int NI = 2, NO = 1, RMW = ACC;
    __device__ void operator()(size_t, const float *x, float *y) const
    {
        const float v = x[1];
        const float u = GELU_K0 * (v + GELU_K1 * v * v * v);
        const float t = tanhf(u);
        const float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
        const float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        y[0] += g * x[0];
    }
};

/* x: gate, up; y: out = silu(gate) * up */
struct swiglu_fwd_op {
    static const int NI = 2, NO = 1, RMW = 0;
    __device__ void operator()(size_t, const float *x, float *y) const
    {
        const float g = x[0];
        const float sg = 1.0f / (1.0f + expf(-g));
        y[0] = g * sg * x[1];
    }
};

/* x: dout, gate, up; y: dgate +=, dup += (either absent; ACC as GELU's).
 * d/dgate silu(g) = s (1 + g (1 - s)) */
template <int ACC>
struct swiglu_bwd_op {
    static const int NI = 3, NO = 2, RMW = ACC;
    __device__ void operator()(size_t, const float *x, float *y) const
    {
        const float d = x[0], g = x[1], u = x[2];
        const float sg = 1.0f / (1.0f + expf(-g));
        y[0] += d * u * sg * (1.0f + g * (1.0f - sg));
        y[1] += d * g * sg;
    }
};

struct add_op {
    static const int NI = 2, NO = 1, RMW = 0;
    __device__ void operator()(size_t, const float *x, float *y) const { y[0] = x[0] + x[1]; }
};

struct accumulate_op {
    static const int NI = 1, NO = 1, RMW = 1;
    __device__ void operator()(size_t, const float *x, float *y) const { y[0] += x[0]; }
};

struct scale_op {
    static const int NI = 0, NO = 1, RMW = 1;
    float s;
    __device__ void operator()(size_t, const float *, float *y) const { y[0] *= s; }
};

/* x = the nearest bf16 value, in float storage (kernels.h round_bf16):
 * bf16.h's rounding, the CPU backend's bit for bit. */
struct round_bf16_op {
    static const int NI = 0, NO = 1, RMW = 1;
    __device__ void operator()(size_t, const float *, float *y) const { y[0] = merak_bf16_round(y[0]); }
};

/* ------------------------------------------------------------------ dropout
 *
 * The mask is the one of kernels/cpu/cpu_kernels.h, reproduced bit for bit:
 * element i of a call with seed s and first index i0 is kept iff u >= p, where
 *
 *     key = mix64(s + GOLDEN)
 *     z   = mix64(key + (i0 + i + 1) * GOLDEN)     (uint64 arithmetic)
 *     u   = (float)(z >> 40) * 2^-24               (uniform in [0, 1), exact)
 *
 * GOLDEN and mix64 are those of kernels/mix64.h (splitmix64).  Kept
 * elements are scaled by 1/(1-p) (computed in float).  Only integer
 * arithmetic decides the mask, so CPU and GPU masks agree exactly.
 */
__device__ __forceinline__ bool dropout_keep(uint64_t key, uint64_t i, float p)
{
    const uint64_t z = merak_mix64(key + (i + 1) * MERAK_GOLDEN);
    return (float)(z >> 40) * 0x1.0p-24f >= p;
}

/* x: inp; y: out */
struct dropout_fwd_op {
    static const int NI = 1, NO = 1, RMW = 0;
    float p, sc;
    uint64_t key, i0;
    __device__ void operator()(size_t e, const float *x, float *y) const
    {
        y[0] = dropout_keep(key, i0 + e, p) ? x[0] * sc : 0.0f;
    }
};

/* x: dout; y: dinp += (kept elements only) */
template <int ACC>   /* ACC 0: dinp written (0 where dropped), unread */
struct dropout_bwd_op {
    static const int NI = 1, NO = 1, RMW = ACC;
    float p, sc;
    uint64_t key, i0;
    __device__ void operator()(size_t e, const float *x, float *y) const
    {
        if (dropout_keep(key, i0 + e, p))
            y[0] += x[0] * sc;
    }
};

/* ------------------------------------------------------------------ launchers */

/* A dropout op of a call: probability p, the call's seed and first index. */
template <class Op>
static Op dropout_op(float p, uint64_t seed, uint64_t i0)
{
    Op op;
    op.p = p;
    op.sc = 1.0f / (1.0f - p);
    op.key = merak_mix64(seed + MERAK_GOLDEN);
    op.i0 = i0;
    return op;
}

template <typename T>
static ew_bufs<T> bufs(const T *a, const T *b, const T *c, T *y0, T *y1)
{
    ew_bufs<T> r = {{a, b, c}, {y0, y1}};
    return r;
}

extern "C" {

int merak_cuda_launch_gelu_fwd(void *stream, float *out, const float *inp, size_t n)
{
    return ew(stream, gelu_fwd_op(), bufs<float>(inp, NULL, NULL, out, NULL), n);
}

int merak_cuda_launch_gelu_bwd(void *stream, float *dinp, const float *dout,
                               const float *inp, size_t n, int acc)
{
    const ew_bufs<float> b = bufs<float>(dout, inp, NULL, dinp, NULL);
    return acc ? ew(stream, gelu_bwd_op<1>(), b, n) : ew(stream, gelu_bwd_op<0>(), b, n);
}

int merak_cuda_launch_swiglu_fwd(void *stream, float *out, const float *gate,
                                 const float *up, size_t n)
{
    return ew(stream, swiglu_fwd_op(), bufs<float>(gate, up, NULL, out, NULL), n);
}

int merak_cuda_launch_swiglu_bwd(void *stream, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n, int acc)
{
    const ew_bufs<float> b = bufs<float>(dout, gate, up, dgate, dup);
    return acc ? ew(stream, swiglu_bwd_op<1>(), b, n) : ew(stream, swiglu_bwd_op<0>(), b, n);
}

int merak_cuda_launch_add_fwd(void *stream, float *out, const float *a, const float *b,
                              size_t n)
{
    return ew(stream, add_op(), bufs<float>(a, b, NULL, out, NULL), n);
}

int merak_cuda_launch_accumulate(void *stream, float *dst, const float *src, size_t n)
{
    return ew(stream, accumulate_op(), bufs<float>(src, NULL, NULL, dst, NULL), n);
}

int merak_cuda_launch_dropout_fwd(void *stream, float *out, const float *inp, size_t n,
                                  float p, uint64_t seed, uint64_t i0)
{
    return ew(stream, dropout_op<dropout_fwd_op>(p, seed, i0), bufs<float>(inp, NULL, NULL, out, NULL), n);
}

int merak_cuda_launch_dropout_bwd(void *stream, float *dinp, const float *dout, size_t n,
                                  float p, uint64_t seed, uint64_t i0, int acc)
{
    const ew_bufs<float> b = bufs<float>(dout, NULL, NULL, dinp, NULL);
    return acc ? ew(stream, dropout_op<dropout_bwd_op<1> >(p, seed, i0), b, n)
               : ew(stream, dropout_op<dropout_bwd_op<0> >(p, seed, i0), b, n);
}

int merak_cuda_launch_round_bf16(void *stream, float *x, size_t n)
{
    return ew(stream, round_bf16_op(), bufs<float>(NULL, NULL, NULL, x, NULL), n);
}

int merak_cuda_launch_gelu16_fwd(void *stream, uint16_t *out, const uint16_t *inp, size_t n)
{
    return ew(stream, gelu_fwd_op(), bufs<uint16_t>(inp, NULL, NULL, out, NULL), n);
}

int merak_cuda_launch_gelu16_bwd(void *stream, uint16_t *dinp, const uint16_t *dout, const uint16_t *inp, size_t n,
                                 int acc)
{
    const ew_bufs<uint16_t> b = bufs<uint16_t>(dout, inp, NULL, dinp, NULL);
    return acc ? ew(stream, gelu_bwd_op<1>(), b, n) : ew(stream, gelu_bwd_op<0>(), b, n);
}

int merak_cuda_launch_swiglu16_fwd(void *stream, uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n)
{
    return ew(stream, swiglu_fwd_op(), bufs<uint16_t>(gate, up, NULL, out, NULL), n);
}

int merak_cuda_launch_swiglu16_bwd(void *stream, uint16_t *dgate, uint16_t *dup, const uint16_t *dout,
                                   const uint16_t *gate, const uint16_t *up, size_t n, int acc)
{
    const ew_bufs<uint16_t> b = bufs<uint16_t>(dout, gate, up, dgate, dup);
    return acc ? ew(stream, swiglu_bwd_op<1>(), b, n) : ew(stream, swiglu_bwd_op<0>(), b, n);
}

int merak_cuda_launch_add16_fwd(void *stream, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n)
{
    return ew(stream, add_op(), bufs<uint16_t>(a, b, NULL, out, NULL), n);
}

int merak_cuda_launch_accumulate16(void *stream, uint16_t *dst, const uint16_t *src, size_t n)
{
    return ew(stream, accumulate_op(), bufs<uint16_t>(src, NULL, NULL, dst, NULL), n);
}

int merak_cuda_launch_dropout16_fwd(void *stream, uint16_t *out, const uint16_t *inp, size_t n, float p,
                                    uint64_t seed, uint64_t i0)
{
    return ew(stream, dropout_op<dropout_fwd_op>(p, seed, i0), bufs<uint16_t>(inp, NULL, NULL, out, NULL), n);
}

int merak_cuda_launch_dropout16_bwd(void *stream, uint16_t *dinp, const uint16_t *dout, size_t n, float p,
                                    uint64_t seed, uint64_t i0, int acc)
{
    const ew_bufs<uint16_t> b = bufs<uint16_t>(dout, NULL, NULL, dinp, NULL);
    return acc ? ew(stream, dropout_op<dropout_bwd_op<1> >(p, seed, i0), b, n)
               : ew(stream, dropout_op<dropout_bwd_op<0> >(p, seed, i0), b, n);
}

int merak_cuda_launch_scale(void *stream, float *x, size_t n, float s)
{
    scale_op op;
    op.s = s;
    return ew(stream, op, bufs<float>(NULL, NULL, NULL, x, NULL), n);
}

} /* extern "C" */
