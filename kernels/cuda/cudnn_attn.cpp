/*
 * cudnn_attn.cpp - cuDNN's fused causal attention, bf16, forward and
 * backward, behind the plain C functions of cudnn_attn.h, for the CUDA
 * backend's attention (cuda_attention.c, bf16 shapes); it calls cuda_mem.c
 * (the stream, the first error) and cuDNN through NVIDIA's cudnn-frontend,
 * a header-only C++17 library (the reason this is the project's one C++
 * file; configure finds the headers, scripts/install-deps.sh brings them).
 *
 * The frontend is compiled with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: it
 * calls cuDNN through dlsym on cudnn_frontend::cudnn_dlhandle (and the CUDA
 * runtime through its own dlopen of libcudart.so.12 or .13, the one this
 * process already has), so libcudnn.so.9 (and the some 450 MB of
 * sub-libraries it loads itself) comes in on the first call, not in every
 * tool of a CUDA build - as cuda_blas.c does with cuBLASLt.
 *
 * Graphs, as the frontend's SDPA samples build them (io bf16, intermediate
 * and compute fp32), with tensors (b, h, s, d) over the caller's strides:
 *   q (B,nh,T,hd) strides (T*qs, hd, qs, 1); k, v (B,nkv,T,hd) likewise;
 *   o, do (B,nh,T,hd) strides (T*nh*hd, hd, nh*hd, 1);
 *   stats (B,nh,T,1) fp32 strides (nh*T, T, 1, 1).
 *   fwd: sdpa(q, k, v) generate_stats, causal (top-left), attn_scale value
 *        -> o, stats.  The frontend's softmax writes stats = M + log(Z)
 *        (max and sum of exp of the scaled, masked scores; natural log):
 *        the lse of kernels.h.
 *   bwd: sdpa_backward(q, k, v, o, do, stats), same mask and scale,
 *        deterministic -> dq, dk, dv (row strides dqs, dks, dvs: the
 *        caller's), overwritten.
 * A graph is built (heuristics mode A, its first plan) once per key below
 * and cached; the workspace is one device buffer shared by all graphs,
 * grown to the largest a graph asks for.
 *
 * Every frontend call that can fail returns an error_t or throws; both end
 * as merak_cuda_record("cudnn ...", message) and -1, except in a probe
 * (merak_cudnn_attn_takes), whose refusal records nothing and prints one
 * line.  Nothing else prints.
 */
#include "config.h"

/* The frontend: cuDNN through dlsym (see above); no JSON (serialisation),
 * which saves compile time and a third-party header. */
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h> /* cudnn_frontend::graph::Graph, SDPA_attributes & co. */

#include <cuda_runtime_api.h> /* cudaMalloc, cudaFree, cudaStreamSynchronize */
#include <dlfcn.h>            /* dlopen */

#include <cmath>   /* std::sqrt */
#include <cstdio>  /* snprintf, fprintf (a probe's refusal) */
#include <cstdint>
#include <cstring> /* memcmp */
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#define MERAK_CUDA_INTERNAL
#include "cuda_kernels.h" /* merak_cuda_record, merak_cuda_ok, merak_cuda_failed, merak_cuda_stream */
#include "cudnn_attn.h"

namespace fe = cudnn_frontend;

/* The frontend's handle on libcudnn (it declares it extern under dynamic
 * loading; the program defines it). */
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

/* Cached graphs: one per distinct key; training has two per layer shape
 * (fwd, bwd), decoding none. */
constexpr int CACHE = 16;

/* Tensor uids of the variant pack. */
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

/* What a graph depends on: the shape and the strides (pointers only by
 * their alignment, which every call checks to be 16 bytes: the frontend
 * declares its tensors 16-byte aligned, so no other alignment needs a
 * graph of its own). */
struct attn_key {
    int bwd;
    int B, T, nh, nkv, hd;
    int qs, ks, vs;
    int dqs, dks, dvs; /* the backward's gradients' (0 in a forward's key) */
};

struct attn_entry {
    attn_key key;
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace; /* bytes it needs */
};

/* The state: made on the first call, dropped by merak_cudnn_attn_close.  On
 * the heap, so that no destructor runs at exit after the CUDA context. */
struct attn_state {
    cudnnHandle_t handle = nullptr;
    attn_entry cache[CACHE];
    int ncache = 0;
    unsigned evict = 0; /* with the cache full, the slot a new key replaces */
    void *ws = nullptr; /* workspace, ws_bytes long */
    size_t ws_bytes = 0;
    std::vector<void *> retired; /* smaller workspaces, freed by merak_cudnn_attn_close */
    /* graphs dropped from the cache, kept until merak_cudnn_attn_close:
     * launches of theirs may still be queued (a step's few shapes never
     * leave the cache; tests' many shapes do) */
    std::vector<std::shared_ptr<fe::graph::Graph>> retired_graphs;
};
attn_state *g_state;

/* While a probe runs (merak_cudnn_attn_takes), where an error goes
 * instead of the backend's record: a refusal is not a failure. */
char *g_quiet;
size_t g_quiet_n;

void note(const char *what, const char *why)
{
    if (g_quiet)
        snprintf(g_quiet, g_quiet_n, "%s: %s", what, why);
    else
        merak_cuda_record(what, why);
}

void record(const char *what, const std::string &why)
{
    note(what, why.c_str());
}

/* 1 if the frontend call went well, else records it. */
int fe_ok(fe::error_t e, const char *what)
{
    if (e.is_good())
        return 1;
    record(what, e.get_message());
    return 0;
}

/* ------------------------------------------------------------------ loading */

/* dlopen's name of cuDNN: its soname, then the directory configure found it in. */
#define CUDNN_STR_(x) #x
#define CUDNN_STR(x) CUDNN_STR_(x)
#define CUDNN_SONAME "libcudnn.so." CUDNN_STR(CUDNN_MAJOR)

int cudnn_load()
{
    if (fe::cudnn_dlhandle)
        return 0;
    void *h = dlopen(CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef MERAK_CUDNN_LIBDIR
    if (!h)
        h = dlopen(MERAK_CUDNN_LIBDIR "/" CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) {
        const char *why = dlerror();
        note("loading " CUDNN_SONAME, why ? why : "not found");
        return -1;
    }
    fe::cudnn_dlhandle = h; /* stays open for the process */
    /* The graphs use what the headers of this build know: an older library
     * would fail later, with less clear messages. */
    if (fe::detail::get_backend_version() < CUDNN_VERSION) {
        note("loading " CUDNN_SONAME, ("version " + std::to_string(fe::detail::get_backend_version()) +
                                        " is older than the headers' " + std::to_string(CUDNN_VERSION))
                                           .c_str());
        fe::cudnn_dlhandle = nullptr; /* not used, even after a refusal that recorded nothing */
        return -1;
    }
    return 0;
}

/* The state with its handle; nullptr on an error (recorded). */
attn_state *state()
{
    if (g_state)
        return g_state;
    if (cudnn_load() < 0)
        return nullptr;
    auto *st = new attn_state;
    cudnnStatus_t rc = fe::detail::create_handle(&st->handle);
    if (rc != CUDNN_STATUS_SUCCESS) {
        record("cudnnCreate", fe::detail::get_error_string(rc));
        delete st;
        return nullptr;
    }
    g_state = st;
    return st;
}

/* ------------------------------------------------------------------ graphs */

using fe::graph::Tensor_attributes;
using TensorPtr = std::shared_ptr<Tensor_attributes>;

/* A bf16 tensor (b, h, s, d) over token rows `row` elements apart. */
TensorPtr bhsd(fe::graph::Graph &g, const char *name, int64_t uid, int64_t B, int64_t H, int64_t T,
               int64_t hd, int64_t row)
{
    return g.tensor(Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({B, H, T, hd})
                        .set_stride({T * row, hd, row, 1})
                        .set_data_type(fe::DataType_t::BFLOAT16));
}

void set_bhsd(const TensorPtr &t, int64_t uid, int64_t B, int64_t H, int64_t T, int64_t hd,
              int64_t row)
{
    t->set_output(true)
        .set_uid(uid)
        .set_dim({B, H, T, hd})
        .set_stride({T * row, hd, row, 1})
        .set_data_type(fe::DataType_t::BFLOAT16);
}

/* The graph of key k, unbuilt. */
std::shared_ptr<fe::graph::Graph> describe(const attn_key &k)
{
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t B = k.B, T = k.T, nh = k.nh, nkv = k.nkv, hd = k.hd, orow = nh * hd;
    const float scale = 1.0f / std::sqrt((float)k.hd);

    auto Q = bhsd(*g, "q", UID_Q, B, nh, T, hd, k.qs);
    auto K = bhsd(*g, "k", UID_K, B, nkv, T, hd, k.ks);
    auto V = bhsd(*g, "v", UID_V, B, nkv, T, hd, k.vs);
    if (!k.bwd) {
        auto opts = fe::graph::SDPA_attributes()
                        .set_name("sdpa")
                        .set_generate_stats(true)
                        .set_causal_mask(true)
                        .set_attn_scale(scale);
        auto [O, Stats] = g->sdpa(Q, K, V, opts);
        set_bhsd(O, UID_O, B, nh, T, hd, orow);
        Stats->set_output(true)
            .set_uid(UID_STATS)
            .set_dim({B, nh, T, 1})
            .set_stride({nh * T, T, 1, 1})
            .set_data_type(fe::DataType_t::FLOAT);
    } else {
        auto O = bhsd(*g, "o", UID_O, B, nh, T, hd, orow);
        auto dO = bhsd(*g, "do", UID_DO, B, nh, T, hd, orow);
        auto Stats = g->tensor(Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(UID_STATS)
                                   .set_dim({B, nh, T, 1})
                                   .set_stride({nh * T, T, 1, 1})
                                   .set_data_type(fe::DataType_t::FLOAT));
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("sdpa_backward")
                        .set_causal_mask(true)
                        .set_attn_scale(scale)
                        .set_deterministic_algorithm(true);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
        set_bhsd(dQ, UID_DQ, B, nh, T, hd, k.dqs);
        set_bhsd(dK, UID_DK, B, nkv, T, hd, k.dks);
        set_bhsd(dV, UID_DV, B, nkv, T, hd, k.dvs);
    }
    return g;
}

/* The cached, built graph of key, building it on a miss; nullptr on an
 * error (recorded). */
const attn_entry *graph_for(attn_state *st, const attn_key &key)
{
    for (int i = 0; i < st->ncache; i++)
        if (!std::memcmp(&st->cache[i].key, &key, sizeof key))
            return &st->cache[i];

    attn_entry e;
    e.key = key;
    e.graph = describe(key);
    fe::graph::Graph &g = *e.graph;
    if (!fe_ok(g.validate(), "cudnn graph validate") ||
        !fe_ok(g.build_operation_graph(st->handle), "cudnn build_operation_graph") ||
        !fe_ok(g.create_execution_plans({fe::HeurMode_t::A}), "cudnn create_execution_plans") ||
        !fe_ok(g.check_support(st->handle), "cudnn check_support") ||
        !fe_ok(g.build_plans(st->handle), "cudnn build_plans") ||
        !fe_ok(g.get_workspace_size(e.workspace), "cudnn get_workspace_size"))
        return nullptr;

    /* a free slot, else the oldest (a few shapes come back every step) */
    attn_entry &slot = st->cache[st->ncache < CACHE ? st->ncache++ : (int)(st->evict++ % CACHE)];
    if (slot.graph)
        st->retired_graphs.push_back(std::move(slot.graph));
    slot = std::move(e);
    return &slot;
}

/* Points *ws at a workspace at least bytes long (NULL for none); 0, or -1
 * on an error (recorded).  A smaller one is kept, not freed, until
 * merak_cudnn_attn_close: cudaFree waits for the whole device, NCCL's
 * kernels too, which may be waiting for a peer that waits for this rank
 * (the first backward asks for more than the forwards did). */
int workspace(attn_state *st, size_t bytes, void **ws)
{
    if (bytes > st->ws_bytes) {
        void *fresh = nullptr;
        if (!merak_cuda_ok(cudaMalloc(&fresh, bytes), "cudaMalloc(cudnn workspace)"))
            return -1;
        if (st->ws)
            st->retired.push_back(st->ws);   /* graphs already enqueued may still use it */
        st->ws = fresh;
        st->ws_bytes = bytes;
    }
    *ws = st->ws;
    return 0;
}

int aligned16(const void *p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

/* The key of s's forward (gs NULL) or of its backward with gradient strides gs. */
attn_key key_of(const merak_attn_shape *s, const int *gs)
{
    const int bwd = gs != nullptr;
    return attn_key{bwd,         s->B,        s->T,        s->n_head,  s->n_kv_head,
                    s->head_dim, s->q_stride, s->k_stride, s->v_stride, bwd ? gs[0] : 0,
                    bwd ? gs[1] : 0, bwd ? gs[2] : 0};
}

/* s with the gradients' strides gs in place of q's, k's and v's. */
merak_attn_shape grad_shape(const merak_attn_shape *s, const int *gs)
{
    merak_attn_shape g = *s;
    g.q_stride = gs[0], g.k_stride = gs[1], g.v_stride = gs[2];
    return g;
}

/* Probes' answers, which never change: the keys (B 0: an answer holds
 * for every batch size) cuDNN took or refused, and whether it could not
 * be loaded at all (then every probe is refused). */
constexpr int ANSWERS = 64;
struct answer {
    attn_key key;
    int takes;
};
answer g_answers[ANSWERS];
int g_nanswers;
int g_no_cudnn;

/* The answer for key k (any B), or -1. */
int answered(attn_key k)
{
    k.B = 0;
    for (int i = 0; i < g_nanswers; i++)
        if (!std::memcmp(&g_answers[i].key, &k, sizeof k))
            return g_answers[i].takes;
    return -1;
}

void answer_is(attn_key k, int takes)
{
    k.B = 0;
    if (g_nanswers < ANSWERS)
        g_answers[g_nanswers++] = answer{k, takes};
}

/* Runs the graph of key over the tensors of vp (uid -> device pointer). */
int run(const merak_attn_shape *s, const int *gs, std::unordered_map<int64_t, void *> &vp)
{
    const int bwd = gs != nullptr;
    if (merak_cuda_failed())
        return -1;
    const merak_attn_shape g = bwd ? grad_shape(s, gs) : *s;   /* checked as q's, k's, v's are */
    if (!merak_cudnn_attn_supported(s) || !merak_cudnn_attn_supported(&g)) {
        merak_cuda_record(bwd ? "merak_cudnn_attn_bwd" : "merak_cudnn_attn_fwd",
                          "shape not supported (merak_cudnn_attn_supported)");
        return -1;
    }
    for (auto const &t : vp)
        if (!t.second || !aligned16(t.second)) {
            merak_cuda_record(bwd ? "merak_cudnn_attn_bwd" : "merak_cudnn_attn_fwd",
                              "a tensor pointer is NULL or not 16-byte aligned");
            return -1;
        }
    try {
        attn_state *st = state();
        if (!st)
            return -1;
        const attn_entry *e = graph_for(st, key_of(s, gs));
        if (!e)
            return -1;
        void *ws = nullptr;
        if (workspace(st, (size_t)e->workspace, &ws) < 0)
            return -1;
        cudnnStatus_t rc = fe::detail::set_stream(st->handle, merak_cuda_stream());
        if (rc != CUDNN_STATUS_SUCCESS) {
            record("cudnnSetStream", fe::detail::get_error_string(rc));
            return -1;
        }
        return fe_ok(e->graph->execute(st->handle, vp, ws), bwd ? "cudnn sdpa_backward execute" : "cudnn sdpa execute")
                   ? 0
                   : -1;
    } catch (const std::exception &ex) {
        record(bwd ? "cudnn sdpa_backward" : "cudnn sdpa", ex.what());
    } catch (...) {
        merak_cuda_record(bwd ? "cudnn sdpa_backward" : "cudnn sdpa", "unknown C++ exception");
    }
    return -1;
}

void *dev(const void *p)
{
    return const_cast<void *>(p);
}

} // namespace

/* ------------------------------------------------------------------ the C API */

extern "C" int merak_cudnn_attn_supported(const merak_attn_shape *s)
{
    if (!s || s->B <= 0 || s->T <= 0 || s->n_head <= 0 || s->n_kv_head <= 0 || s->head_dim <= 0)
        return 0;
    if (s->n_head % s->n_kv_head != 0)
        return 0;
    /* Hopper's and Ampere's limit (Blackwell's is 128 unless 192/128). */
    if (s->head_dim % 8 != 0 || s->head_dim > 256)
        return 0;
    /* 16-byte rows; each a row of its heads at least. */
    if (s->q_stride % 8 != 0 || s->k_stride % 8 != 0 || s->v_stride % 8 != 0)
        return 0;
    if (s->q_stride < s->n_head * s->head_dim || s->k_stride < s->n_kv_head * s->head_dim ||
        s->v_stride < s->n_kv_head * s->head_dim)
        return 0;
    /* element offsets the frontend computes stay in int64, ours in int */
    if ((long long)s->B * s->T * s->q_stride > INT32_MAX || (long long)s->B * s->T * s->k_stride > INT32_MAX ||
        (long long)s->B * s->T * s->v_stride > INT32_MAX)
        return 0;
    return 1;
}

extern "C" int merak_cudnn_attn_loadable(void)
{
    if (merak_cuda_failed() || g_no_cudnn)
        return 0;
    char why[512] = "";
    g_quiet = why, g_quiet_n = sizeof why;
    try {
        g_no_cudnn = state() == nullptr;
    } catch (...) {
        g_no_cudnn = 1;
    }
    g_quiet = nullptr;
    if (g_no_cudnn)
        (void)cudaGetLastError();
    return !g_no_cudnn;
}

extern "C" int merak_cudnn_attn_takes(const merak_attn_shape *s, const int *gs)
{
    if (merak_cuda_failed() || !merak_cudnn_attn_supported(s) || g_no_cudnn)
        return 0;
    if (gs) {
        const merak_attn_shape g = grad_shape(s, gs);
        if (!merak_cudnn_attn_supported(&g))
            return 0;
    }
    const attn_key fk = key_of(s, nullptr), bk = gs ? key_of(s, gs) : fk;
    const int af = answered(fk), ab = answered(bk);
    if (af == 0 || ab == 0 || (af == 1 && ab == 1))
        return af == 1 && ab == 1;
    char why[512] = "";
    g_quiet = why, g_quiet_n = sizeof why;
    int built_fwd = 0, built_bwd = 0;
    try {
        attn_state *st = state();
        g_no_cudnn = st == nullptr;
        built_fwd = st && (af == 1 || graph_for(st, fk) != nullptr);
        built_bwd = built_fwd && (!gs || ab == 1 || graph_for(st, bk) != nullptr);
    } catch (const std::exception &ex) {
        snprintf(why, sizeof why, "%s", ex.what());
    } catch (...) {
        snprintf(why, sizeof why, "unknown C++ exception");
    }
    g_quiet = nullptr;
    if (!g_no_cudnn) {
        answer_is(fk, built_fwd);
        if (built_fwd && gs)
            answer_is(bk, built_bwd);
    }
    if (!built_bwd) {
        (void)cudaGetLastError(); /* what the frontend's CUDA calls left is not a later kernel's error */
        char grads[64] = "";
        if (built_fwd && gs)
            snprintf(grads, sizeof grads, ", gradient rows %d/%d/%d apart", gs[0], gs[1], gs[2]);
        fprintf(stderr, "merak: cuDNN's fused attention does not take %sB=%d T=%d, %d/%d heads of %d, rows %d/%d/%d "
                "apart%s (%s); that way is not taken\n", built_fwd ? "the backward of " : "", s->B, s->T,
                s->n_head, s->n_kv_head, s->head_dim, s->q_stride, s->k_stride, s->v_stride, grads, why);
    }
    return built_bwd;
}

extern "C" int merak_cudnn_attn_fwd(const merak_attn_shape *s, uint16_t *out, float *stats,
                                    const uint16_t *q, const uint16_t *k, const uint16_t *v)
{
    std::unordered_map<int64_t, void *> vp = {
        {UID_Q, dev(q)}, {UID_K, dev(k)}, {UID_V, dev(v)}, {UID_O, out}, {UID_STATS, stats}};
    return run(s, nullptr, vp);
}

extern "C" int merak_cudnn_attn_bwd(const merak_attn_shape *s, uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                    int dqs, int dks, int dvs, const uint16_t *dout, const uint16_t *out,
                                    const float *stats, const uint16_t *q, const uint16_t *k, const uint16_t *v)
{
    std::unordered_map<int64_t, void *> vp = {
        {UID_Q, dev(q)},   {UID_K, dev(k)},         {UID_V, dev(v)},   {UID_O, dev(out)}, {UID_DO, dev(dout)},
        {UID_STATS, dev(stats)}, {UID_DQ, dq}, {UID_DK, dk}, {UID_DV, dv}};
    const int gs[3] = {dqs, dks, dvs};
    return run(s, gs, vp);
}

extern "C" void merak_cudnn_attn_close(void)
{
    attn_state *st = g_state;
    if (!st)
        return;
    g_state = nullptr;
    try {
        if (st->ws || !st->retired.empty() || !st->retired_graphs.empty())
            merak_cuda_ok(cudaStreamSynchronize(merak_cuda_stream()), "cudaStreamSynchronize(cudnn close)");
        if (st->ws)
            merak_cuda_ok(cudaFree(st->ws), "cudaFree(cudnn workspace)");
        for (void *p : st->retired)
            merak_cuda_ok(cudaFree(p), "cudaFree(cudnn workspace)");
        for (int i = 0; i < st->ncache; i++)
            st->cache[i].graph.reset();
        st->retired_graphs.clear();
        fe::detail::destroy_handle(st->handle);
    } catch (const std::exception &ex) {
        record("cudnn close", ex.what());
    }
    delete st;
}
