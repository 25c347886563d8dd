#!/usr/bin/env python3
"""Independent PyTorch reference for merak-train.

GPT-2 and LLaMA written from scratch in plain torch (float32, CPU), reading a
Hugging Face config.json and Hugging Face-named safetensors weights (one file,
or the shards a model.safetensors.index.json names).

Subcommands:
  init     create HF-named weights and write a safetensors file
  train    train on an llm.c token shard, write per-step metrics as JSONL
  bench    time training steps on random data
  generate greedy generation from weights (token ids in and out)
  selftest compare the vectorised models against naive, loop-based versions

Always run with Debian's python: /usr/bin/python3 tests/ref/torch_ref.py ...
No transformers or safetensors package is used.
"""

import argparse
import json
import math
import os
import struct
import sys
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# config


def warn(msg):
    print("torch_ref: warning: " + msg, file=sys.stderr)


def die(msg):
    print("torch_ref: error: " + msg, file=sys.stderr)
    sys.exit(1)


class Config:
    """Normalised view of a HF config.json for gpt2 or llama."""

    def __init__(self, d):
        self.raw = d
        mt = d.get("model_type")
        if mt is None:
            mt = "gpt2" if "n_embd" in d else "llama"
        if mt not in ("gpt2", "llama", "mistral", "qwen2"):
            die("unsupported model_type %r (want gpt2, llama, mistral or qwen2)" % mt)
        # Mistral and Qwen2 are LLaMA's architecture; Qwen2 adds q, k, v biases
        self.arch = "gpt2" if mt == "gpt2" else "llama"
        self.qkv_bias = mt == "qwen2"
        if mt == "qwen2" and d.get("use_sliding_window"):
            die("use_sliding_window is not implemented")
        self.vocab = int(d["vocab_size"])
        self.init_std = float(d.get("initializer_range", 0.02))
        if mt == "gpt2":
            self.C = int(d["n_embd"])
            self.L = int(d["n_layer"])
            self.nh = int(d["n_head"])
            self.nkv = self.nh
            self.P = int(d.get("n_positions", d.get("n_ctx", 1024)))
            ni = d.get("n_inner")
            self.F = int(ni) if ni is not None else 4 * self.C
            self.eps = float(d.get("layer_norm_epsilon", 1e-5))
            self.tied = True
            act = d.get("activation_function", "gelu_new")
            if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
                warn("activation_function %r: using the tanh GELU anyway" % act)
            for k in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
                if d.get(k):
                    warn("%s is not implemented (ignored)" % k)
            if d.get("scale_attn_weights") is False:
                warn("scale_attn_weights=false is not implemented (scaling anyway)")
            if d.get("tie_word_embeddings") is False:
                warn("GPT-2 with tie_word_embeddings=false: head is tied anyway")
        else:
            self.C = int(d["hidden_size"])
            self.L = int(d["num_hidden_layers"])
            self.nh = int(d["num_attention_heads"])
            nkv = d.get("num_key_value_heads")
            self.nkv = int(nkv) if nkv is not None else self.nh
            self.P = int(d.get("max_position_embeddings", 2048))
            self.F = int(d["intermediate_size"])
            self.eps = float(d.get("rms_norm_eps", 1e-6))
            self.theta = float(d.get("rope_theta", 10000.0))
            self.tied = bool(d.get("tie_word_embeddings", False))
            self.rope = dict(d.get("rope_scaling") or {})
            kind = self.rope.setdefault("rope_type", self.rope.get("type", "default"))
            if kind not in ("default", "linear", "dynamic", "llama3"):
                die("rope_scaling type %r is not implemented" % kind)
            if d.get("attention_bias") or d.get("mlp_bias"):
                die("attention_bias / mlp_bias are not supported")
            act = d.get("hidden_act", "silu")
            if act != "silu":
                die("hidden_act %r not supported (want silu)" % act)
            if self.nh % self.nkv:
                die("num_attention_heads must be a multiple of num_key_value_heads")
        hd = d.get("head_dim")
        self.hd = int(hd) if hd is not None else self.C // self.nh
        if self.arch == "gpt2" and self.hd * self.nh != self.C:
            die("n_embd must be divisible by n_head")

    @staticmethod
    def load(path):
        with open(path) as f:
            return Config(json.load(f))


# ---------------------------------------------------------------------------
# parameter names, shapes, init


def param_specs(cfg):
    """Ordered list of (hf_name, shape, init) with init in
    ('normal', std) | ('zeros',) | ('ones',)."""
    s = cfg.init_std
    C, F_, V = cfg.C, cfg.F, cfg.vocab
    out = []
    if cfg.arch == "gpt2":
        sp = s / math.sqrt(2 * cfg.L)
        out.append(("transformer.wte.weight", [V, C], ("normal", s)))
        out.append(("transformer.wpe.weight", [cfg.P, C], ("normal", s)))
        for i in range(cfg.L):
            p = "transformer.h.%d." % i
            out += [
                (p + "ln_1.weight", [C], ("ones",)),
                (p + "ln_1.bias", [C], ("zeros",)),
                (p + "attn.c_attn.weight", [C, 3 * C], ("normal", s)),
                (p + "attn.c_attn.bias", [3 * C], ("zeros",)),
                (p + "attn.c_proj.weight", [C, C], ("normal", sp)),
                (p + "attn.c_proj.bias", [C], ("zeros",)),
                (p + "ln_2.weight", [C], ("ones",)),
                (p + "ln_2.bias", [C], ("zeros",)),
                (p + "mlp.c_fc.weight", [C, F_], ("normal", s)),
                (p + "mlp.c_fc.bias", [F_], ("zeros",)),
                (p + "mlp.c_proj.weight", [F_, C], ("normal", sp)),
                (p + "mlp.c_proj.bias", [C], ("zeros",)),
            ]
        out.append(("transformer.ln_f.weight", [C], ("ones",)))
        out.append(("transformer.ln_f.bias", [C], ("zeros",)))
    else:
        nh, nkv, hd = cfg.nh, cfg.nkv, cfg.hd
        out.append(("model.embed_tokens.weight", [V, C], ("normal", s)))
        for i in range(cfg.L):
            p = "model.layers.%d." % i
            out += [
                (p + "input_layernorm.weight", [C], ("ones",)),
                (p + "self_attn.q_proj.weight", [nh * hd, C], ("normal", s)),
                (p + "self_attn.k_proj.weight", [nkv * hd, C], ("normal", s)),
                (p + "self_attn.v_proj.weight", [nkv * hd, C], ("normal", s)),
            ]
            if cfg.qkv_bias:
                # Qwen2's biases; not zeros (as the library's init), so that a
                # comparison from these weights exercises them from step 0
                out += [(p + "self_attn.%s_proj.bias" % x, [n * hd], ("normal", s))
                        for x, n in (("q", nh), ("k", nkv), ("v", nkv))]
            out += [
                (p + "self_attn.o_proj.weight", [C, nh * hd], ("normal", s)),
                (p + "post_attention_layernorm.weight", [C], ("ones",)),
                (p + "mlp.gate_proj.weight", [F_, C], ("normal", s)),
                (p + "mlp.up_proj.weight", [F_, C], ("normal", s)),
                (p + "mlp.down_proj.weight", [C, F_], ("normal", s)),
            ]
        out.append(("model.norm.weight", [C], ("ones",)))
        if not cfg.tied:
            out.append(("lm_head.weight", [V, C], ("normal", s)))
    return out


def init_params(cfg, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    params = OrderedDict()
    for name, shape, ini in param_specs(cfg):
        if ini[0] == "normal":
            t = torch.empty(shape, dtype=torch.float32).normal_(0.0, ini[1])
        elif ini[0] == "zeros":
            t = torch.zeros(shape, dtype=torch.float32)
        else:
            t = torch.ones(shape, dtype=torch.float32)
        params[name] = t.to(dtype)
    return params


# ---------------------------------------------------------------------------
# safetensors I/O


def write_safetensors(path, tensors):
    header = OrderedDict()
    header["__metadata__"] = {"format": "pt"}
    blobs = []
    off = 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().to(torch.float32).cpu().numpy()).astype("<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((-len(hj)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = OrderedDict()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        dt = info["dtype"]
        shape = info["shape"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dt == "F64":
            a = np.frombuffer(raw, dtype="<f8").astype(np.float32)
        elif dt == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            die("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        out[name] = torch.from_numpy(a.reshape(shape).copy())
    return out


def read_weights(path):
    """The tensors of a safetensors file, or of the shards a Hugging Face
    model.safetensors.index.json names (given as the index, or as the
    directory holding it or a model.safetensors), each tensor from the
    file its weight_map says and from no other."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        path = index if os.path.exists(index) else os.path.join(path, "model.safetensors")
    if not path.endswith(".json"):
        return read_safetensors(path)
    with open(path) as f:
        wmap = json.load(f)["weight_map"]
    out = OrderedDict()
    for file in sorted(set(wmap.values())):
        for name, t in read_safetensors(os.path.join(os.path.dirname(path), file)).items():
            if wmap.get(name) != file or name in out:
                die("%s: tensor %s is in %s, but the index puts it in %s" % (path, name, file, wmap.get(name)))
            out[name] = t
    missing = sorted(set(wmap) - set(out))
    if missing:
        die("%s: tensor %s is in no file" % (path, missing[0]))
    return out


def load_params(cfg, path):
    raw = read_weights(path)
    params = OrderedDict()
    for name, shape, _ in param_specs(cfg):
        t = raw.get(name)
        if t is None and name.startswith("transformer."):
            t = raw.get(name[len("transformer."):])
        if t is None:
            die("%s: missing tensor %s" % (path, name))
        if list(t.shape) != list(shape):
            die("%s: tensor %s has shape %s, want %s" % (path, name, list(t.shape), shape))
        params[name] = t.to(torch.float32)
    return params


# ---------------------------------------------------------------------------
# models (functional, over an ordered dict of HF-named parameters)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def causal_attention(q, k, v):
    """q [B,H,T,hd], k/v [B,H,S,hd] -> [B,H,T,hd]: the T queries are the
    last T of the S positions (S > T when earlier keys come from a cache)."""
    T, S = q.shape[-2], k.shape[-2]
    hd = q.shape[-1]
    att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(T, S, dtype=torch.bool).triu(1 + S - T)
    att = att.masked_fill(mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    return torch.matmul(att, v)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rope_inv_freq(cfg, T, ct):
    """The frequencies for positions [0, T), as transformers' rope init
    functions compute them (default, linear, dynamic, llama3)."""
    hd, rs, theta = cfg.hd, cfg.rope, cfg.theta
    kind = rs["rope_type"]
    if kind == "dynamic":  # from max_position_embeddings, as transformers
        orig = cfg.P
        if T > orig:
            f = rs["factor"]
            theta = theta * ((f * T / orig) - (f - 1)) ** (hd / (hd - 2))
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(ct) / hd))
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":
        f, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / f, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / f + smooth * scaled
        medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rope_cos_sin(cfg, T, dtype):
    # computed in float32 as HF does (float64 only for the float64 selftest)
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = rope_inv_freq(cfg, T, ct)
    pos = torch.arange(T, dtype=ct)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    x1 = x[..., :h]
    x2 = x[..., h:]
    return torch.cat((-x2, x1), dim=-1)


class KVCache:
    """Each layer's keys and values of the positions run so far: forward()
    given one runs only the new positions."""
    def __init__(self):
        self.pos, self.kv = 0, {}

    def extend(self, i, k, v):
        if i in self.kv:
            k = torch.cat((self.kv[i][0], k), dim=-2)
            v = torch.cat((self.kv[i][1], v), dim=-2)
        self.kv[i] = (k, v)
        return k, v


def gpt2_forward(cfg, p, ids, cache=None):
    B, T = ids.shape
    C, nh, hd = cfg.C, cfg.nh, cfg.hd
    t0 = cache.pos if cache is not None else 0
    if t0 + T > cfg.P:
        die("seq-len %d exceeds n_positions %d" % (t0 + T, cfg.P))
    wte = p["transformer.wte.weight"]
    x = wte[ids] + p["transformer.wpe.weight"][t0:t0 + T].unsqueeze(0)
    for i in range(cfg.L):
        pre = "transformer.h.%d." % i
        h = F.layer_norm(x, (C,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], cfg.eps)
        qkv = torch.matmul(h, p[pre + "attn.c_attn.weight"]) + p[pre + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.reshape(B, T, nh, hd).transpose(1, 2)
        k = k.reshape(B, T, nh, hd).transpose(1, 2)
        v = v.reshape(B, T, nh, hd).transpose(1, 2)
        if cache is not None:
            k, v = cache.extend(i, k, v)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + torch.matmul(y, p[pre + "attn.c_proj.weight"]) + p[pre + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], cfg.eps)
        h = gelu_tanh(torch.matmul(h, p[pre + "mlp.c_fc.weight"]) + p[pre + "mlp.c_fc.bias"])
        x = x + torch.matmul(h, p[pre + "mlp.c_proj.weight"]) + p[pre + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], cfg.eps)
    if cache is not None:
        cache.pos += T
    return torch.matmul(x, wte.t())


def llama_forward(cfg, p, ids, cache=None):
    B, T = ids.shape
    nh, nkv, hd = cfg.nh, cfg.nkv, cfg.hd
    rep = nh // nkv
    t0 = cache.pos if cache is not None else 0
    x = p["model.embed_tokens.weight"][ids]
    cos, sin = rope_cos_sin(cfg, t0 + T, x.dtype)
    cos, sin = cos[t0:], sin[t0:]
    for i in range(cfg.L):
        pre = "model.layers.%d." % i
        h = rms_norm(x, p[pre + "input_layernorm.weight"], cfg.eps)
        q, k, v = (F.linear(h, p[pre + "self_attn.%s_proj.weight" % x], p.get(pre + "self_attn.%s_proj.bias" % x))
                   for x in "qkv")
        q = q.reshape(B, T, nh, hd).transpose(1, 2)
        k = k.reshape(B, T, nkv, hd).transpose(1, 2)
        v = v.reshape(B, T, nkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.extend(i, k, v)
        if rep > 1:  # head h uses kv head h // rep
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, nh * hd)
        x = x + torch.matmul(y, p[pre + "self_attn.o_proj.weight"].t())
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], cfg.eps)
        g = torch.matmul(h, p[pre + "mlp.gate_proj.weight"].t())
        u = torch.matmul(h, p[pre + "mlp.up_proj.weight"].t())
        x = x + torch.matmul(F.silu(g) * u, p[pre + "mlp.down_proj.weight"].t())
    x = rms_norm(x, p["model.norm.weight"], cfg.eps)
    if cache is not None:
        cache.pos += T
    head = p["model.embed_tokens.weight"] if cfg.tied else p["lm_head.weight"]
    return torch.matmul(x, head.t())


def forward(cfg, p, ids, cache=None):
    if cfg.arch == "gpt2":
        return gpt2_forward(cfg, p, ids, cache)
    return llama_forward(cfg, p, ids, cache)


# ---------------------------------------------------------------------------
# data


class Shard:
    def __init__(self, path):
        with open(path, "rb") as f:
            hdr = np.frombuffer(f.read(256 * 4), dtype="<i4")
            if len(hdr) != 256 or hdr[0] != 20240520:
                die("%s: bad magic (want 20240520)" % path)
            ver, n = int(hdr[1]), int(hdr[2])
            if ver == 1:
                dt, sz = "<u2", 2
            elif ver == 2:
                dt, sz = "<u4", 4
            else:
                die("%s: unsupported version %d" % (path, ver))
            buf = f.read(n * sz)
            if len(buf) != n * sz:
                die("%s: truncated (header says %d tokens)" % (path, n))
        self.tokens = torch.from_numpy(np.frombuffer(buf, dtype=dt).astype(np.int64))
        self.n = n

    def windows(self, B, T):
        W = (self.n - 1) // (B * T)
        if W < 1:
            die("shard too small: %d tokens for B=%d T=%d" % (self.n, B, T))
        return W

    def batch(self, w, B, T):
        s = w * B * T
        buf = self.tokens[s:s + B * T + 1]
        return buf[:-1].view(B, T), buf[1:].view(B, T)


# ---------------------------------------------------------------------------
# training


def make_optimizer(params, lr, b1, b2, eps, wd):
    decay = [t for t in params.values() if t.dim() >= 2]
    nodecay = [t for t in params.values() if t.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd},
              {"params": nodecay, "weight_decay": 0.0}]
    kw = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    try:
        return torch.optim.AdamW(groups, foreach=False, **kw)
    except TypeError:
        return torch.optim.AdamW(groups, **kw)


def lr_at(i, lr, warmup, steps, schedule, min_lr):
    if warmup > 0 and i < warmup:
        return lr * (i + 1) / warmup
    if schedule == "constant":
        return lr
    progress = (i - warmup) / max(1, steps - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def grad_norm_and_clip(plist, clip):
    if clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(plist, clip))
    norms = [p.grad.detach().norm(2) for p in plist if p.grad is not None]
    if not norms:
        return 0.0
    return float(torch.norm(torch.stack(norms), 2))


def train_step(cfg, params, opt, get_batch, M, clip):
    """One optimizer step over M micro-batches. Returns (loss, grad_norm)."""
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for j in range(M):
        x, y = get_batch(j)
        logits = forward(cfg, params, x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        (loss / M).backward()
        total += loss.item()
    gn = grad_norm_and_clip(list(params.values()), clip)
    opt.step()
    return total / M, gn


def eval_loss(cfg, params, shard, K, B, T):
    """Mean cross-entropy over windows 0..K-1 of shard (forward only)."""
    with torch.no_grad():
        total = 0.0
        for w in range(K):
            x, y = shard.batch(w, B, T)
            logits = forward(cfg, params, x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    return total / K


def setup_torch(threads):
    if threads and threads > 0:
        torch.set_num_threads(threads)
    if hasattr(torch, "use_deterministic_algorithms"):
        torch.use_deterministic_algorithms(True)


def cmd_init(a):
    cfg = Config.load(a.config)
    params = init_params(cfg, a.seed)
    write_safetensors(a.out, params)
    n = sum(t.numel() for t in params.values())
    print("torch_ref init: %s %d tensors %d params -> %s" % (cfg.arch, len(params), n, a.out))


def cmd_train(a):
    setup_torch(a.threads)
    torch.manual_seed(0)
    cfg = Config.load(a.config)
    params = load_params(cfg, a.init)
    for t in params.values():
        t.requires_grad_(True)
    shard = Shard(a.data)
    B, T, M = a.micro_batch, a.seq_len, a.micro_batches
    W = shard.windows(B, T)
    opt = make_optimizer(params, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay)
    mf = open(a.metrics, "w") if a.metrics else None
    ntok = B * T * M
    val = Shard(a.val_data) if a.val_data else None
    if val and val.windows(B, T) < a.eval_batches:
        die("%s: fewer than %d windows" % (a.val_data, a.eval_batches))
    for i in range(a.steps):
        lr_i = lr_at(i, a.lr, a.warmup, a.steps, a.lr_schedule, a.min_lr)
        for g in opt.param_groups:
            g["lr"] = lr_i
        t0 = time.perf_counter()
        loss, gn = train_step(cfg, params, opt,
                              lambda j: shard.batch((i * M + j) % W, B, T), M, a.clip)
        dt = time.perf_counter() - t0
        tps = ntok / dt if dt > 0 else 0.0
        rec = {"step": i, "loss": loss, "grad_norm": gn, "lr": lr_i, "tokens_per_s": tps}
        if val and ((a.eval_every and (i + 1) % a.eval_every == 0) or i + 1 == a.steps):
            rec["val_loss"] = eval_loss(cfg, params, val, a.eval_batches, B, T)
        if mf:
            mf.write(json.dumps(rec) + "\n")
            mf.flush()
        print("step %5d | loss %.6f | grad_norm %.6f | lr %.6e | %.0f tok/s" % (i, loss, gn, lr_i, tps),
              flush=True)
    if mf:
        mf.close()
    if a.save_weights:
        write_safetensors(a.save_weights, params)


def cmd_bench(a):
    setup_torch(a.threads)
    cfg = Config.load(a.config)
    params = init_params(cfg, 1234)
    for t in params.values():
        t.requires_grad_(True)
    B, T, M = a.micro_batch, a.seq_len, a.micro_batches
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, cfg.vocab, (M, B, T + 1), generator=g)
    opt = make_optimizer(params, 1e-4, 0.9, 0.95, 1e-8, 0.1)

    def get_batch(j):
        return data[j, :, :-1], data[j, :, 1:]

    for _ in range(a.warmup_steps):
        train_step(cfg, params, opt, get_batch, M, 1.0)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        train_step(cfg, params, opt, get_batch, M, 1.0)
    dt = time.perf_counter() - t0
    step_s = dt / max(1, a.steps)
    print("torch tokens_per_s=%.1f step_ms=%.3f" % (B * T * M / step_s, step_s * 1e3))


def cmd_generate(a):
    """Greedy generation, the whole sequence recomputed for every token
    (with --cache, a key/value cache: the prompt once, then one position
    per token): the token ids, and on stderr the smallest gap between the
    two largest logits seen (how close a step came to a tie) and the rate.
    With --check, the reference follows the given tokens and checks each
    was a greedy choice: a float rounding may break a near-tie either way,
    a bug picks a token clearly below the maximum."""
    setup_torch(a.threads)
    cfg = Config.load(a.config)
    p = load_params(cfg, a.weights)
    ids = [int(x) for x in a.prompt.split()]
    if not ids:
        die("empty prompt")
    check = [int(x) for x in a.check.split()] if a.check is not None else None
    steps = len(check) if check is not None else a.max_tokens
    out, gap, worst = [], float("inf"), 0.0
    cache = KVCache() if a.cache else None
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(steps):
            new = ids[cache.pos:] if cache is not None else ids
            logits = forward(cfg, p, torch.tensor([new], dtype=torch.long), cache)[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            nxt = int(torch.argmax(logits))   # the first of equal maxima
            out.append(nxt)
            if check is not None:   # teacher-forced: follow the tokens checked
                worst = max(worst, float(top[0] - logits[check[i]]))
                nxt = check[i]
            ids.append(nxt)
    secs = time.perf_counter() - t0
    print(" ".join(str(t) for t in out))
    print("torch_ref: smallest top-2 logit gap %.3e" % gap, file=sys.stderr)
    print("torch_ref: %d tokens in %.3f s (%.2f tokens/s%s)"
          % (steps, secs, steps / secs if secs > 0 else 0.0, ", cache" if a.cache else ""), file=sys.stderr)
    if check is not None:
        same = sum(1 for x, y in zip(out, check) if x == y)
        print("torch_ref: %d of %d checked tokens are the greedy choice; the largest logit is at most "
              "%.3e above theirs (tolerance %.1e)" % (same, steps, worst, a.tolerance), file=sys.stderr)
        if worst > a.tolerance:
            sys.exit(1)


# ---------------------------------------------------------------------------
# selftest: naive, loop-based formulations compared with the vectorised ones


def naive_attention(q, k, v, kv_of_head):
    """q [T,H,hd] per-head python loops; k/v [T,Hkv,hd]."""
    T, H, hd = q.shape
    out = torch.zeros_like(q)
    for h in range(H):
        kh = kv_of_head(h)
        for t in range(T):
            scores = [float((q[t, h] * k[s, kh]).sum()) / math.sqrt(hd) for s in range(t + 1)]
            m = max(scores)
            e = [math.exp(x - m) for x in scores]
            z = sum(e)
            acc = torch.zeros(hd, dtype=q.dtype)
            for s in range(t + 1):
                acc = acc + (e[s] / z) * v[s, kh]
            out[t, h] = acc
    return out


def naive_layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def naive_gelu(x):
    # same tanh formula written via erf-free sigmoid identity: 0.5(1+tanh(z)) = sigmoid(2z)
    z = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
    return x * torch.sigmoid(2.0 * z)


def naive_gpt2_row(cfg, p, ids):
    """ids: 1-D list. Works position by position, weights in Conv1D layout."""
    T = len(ids)
    C, nh, hd = cfg.C, cfg.nh, cfg.hd
    x = torch.stack([p["transformer.wte.weight"][ids[t]] + p["transformer.wpe.weight"][t] for t in range(T)])
    for i in range(cfg.L):
        pre = "transformer.h.%d." % i
        h = naive_layernorm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], cfg.eps)
        W, bb = p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"]
        q = (h @ W[:, :C] + bb[:C]).view(T, nh, hd)
        k = (h @ W[:, C:2 * C] + bb[C:2 * C]).view(T, nh, hd)
        v = (h @ W[:, 2 * C:] + bb[2 * C:]).view(T, nh, hd)
        y = naive_attention(q, k, v, lambda hh: hh).reshape(T, C)
        x = x + y @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
        h = naive_layernorm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], cfg.eps)
        h = naive_gelu(h @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"])
        x = x + h @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"]
    x = naive_layernorm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], cfg.eps)
    return x @ p["transformer.wte.weight"].t()


def naive_freq(cfg, j, T):
    """Frequency j for T positions, one Python float at a time: theta^(-2j/hd)
    (dynamic: theta grown past the original positions), then linear divides
    it by the factor, llama3 by wavelength band (divided, kept, or between
    them in proportion to original/wavelength)."""
    rs, hd, theta = cfg.rope, cfg.hd, cfg.theta
    kind, f = rs["rope_type"], rs.get("factor", 1.0)
    orig = rs.get("original_max_position_embeddings", cfg.P) if kind == "llama3" else cfg.P
    if kind == "dynamic" and T > orig:
        theta *= (f * T / orig - f + 1) ** (hd / (hd - 2))
    w = theta ** (-2.0 * j / hd)
    if kind == "linear":
        return w / f
    if kind != "llama3":
        return w
    ratio = orig * w / (2 * math.pi)  # original context / wavelength
    lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
    if ratio < lo:
        return w / f
    if ratio > hi:
        return w
    a = (ratio - lo) / (hi - lo)
    return a * w + (1 - a) * w / f


def naive_rope(x, t, cfg, T):
    """x [H,hd] at position t of T. HF (half-split) convention: dimension j
    pairs with j+hd/2 and rotates by angle t*freq(j); done with complex numbers."""
    H, hd = x.shape
    half = hd // 2
    out = torch.empty_like(x)
    for j in range(half):
        ang = t * naive_freq(cfg, j, T)
        c = complex(math.cos(ang), math.sin(ang))
        for h in range(H):
            z = complex(float(x[h, j]), float(x[h, j + half])) * c
            out[h, j] = z.real
            out[h, j + half] = z.imag
    return out


def naive_llama_row(cfg, p, ids):
    T = len(ids)
    C, nh, nkv, hd = cfg.C, cfg.nh, cfg.nkv, cfg.hd
    rep = nh // nkv

    def rms(x, w):
        return torch.stack([w * r / math.sqrt(float((r * r).sum()) / C + cfg.eps) for r in x])

    x = torch.stack([p["model.embed_tokens.weight"][i] for i in ids])
    for i in range(cfg.L):
        pre = "model.layers.%d." % i
        h = rms(x, p[pre + "input_layernorm.weight"])
        q = h @ p[pre + "self_attn.q_proj.weight"].t()
        k = h @ p[pre + "self_attn.k_proj.weight"].t()
        v = h @ p[pre + "self_attn.v_proj.weight"].t()
        if cfg.qkv_bias:
            q = q + p[pre + "self_attn.q_proj.bias"]
            k = k + p[pre + "self_attn.k_proj.bias"]
            v = v + p[pre + "self_attn.v_proj.bias"]
        q, k, v = q.view(T, nh, hd), k.view(T, nkv, hd), v.view(T, nkv, hd)
        q = torch.stack([naive_rope(q[t], t, cfg, T) for t in range(T)])
        k = torch.stack([naive_rope(k[t], t, cfg, T) for t in range(T)])
        y = naive_attention(q, k, v, lambda hh: hh // rep).reshape(T, nh * hd)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].t()
        h = rms(x, p[pre + "post_attention_layernorm.weight"])
        g = h @ p[pre + "mlp.gate_proj.weight"].t()
        u = h @ p[pre + "mlp.up_proj.weight"].t()
        x = x + ((g / (1 + torch.exp(-g))) * u) @ p[pre + "mlp.down_proj.weight"].t()
    x = rms(x, p["model.norm.weight"])
    head = p["model.embed_tokens.weight"] if cfg.tied else p["lm_head.weight"]
    return x @ head.t()


def naive_adamw(params, grads, state, lr, b1, b2, eps, wd, step):
    for n in params:
        w, g = params[n], grads[n]
        m, v = state.setdefault(n, (torch.zeros_like(w), torch.zeros_like(w)))
        d = wd if w.dim() >= 2 else 0.0
        w = w * (1 - lr * d)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh = m / (1 - b1 ** step)
        vh = v / (1 - b2 ** step)
        params[n] = w - lr * mh / (torch.sqrt(vh) + eps)
        state[n] = (m, v)


def cmd_selftest(a):
    setup_torch(a.threads)
    ok = True

    def check(what, x, y, tol):
        nonlocal ok
        err = float((x - y).abs().max())
        good = err <= tol
        ok = ok and good
        print("%-40s max|diff| = %.3e  %s" % (what, err, "ok" if good else "FAIL"))

    cfgs = [
        Config({"model_type": "gpt2", "vocab_size": 50, "n_positions": 16, "n_embd": 24,
                "n_layer": 2, "n_head": 3, "n_inner": None, "layer_norm_epsilon": 1e-5,
                "initializer_range": 0.2}),
        Config({"model_type": "llama", "vocab_size": 50, "hidden_size": 32,
                "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "tie_word_embeddings": False, "initializer_range": 0.2}),
        Config({"model_type": "llama", "vocab_size": 50, "hidden_size": 32,
                "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
                "num_key_value_heads": 4, "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
                "rope_theta": 500.0, "tie_word_embeddings": True, "initializer_range": 0.2}),
        # Qwen2 (q, k, v biases) with LLaMA 3.1's RoPE over an original
        # context of 64 (of its 4 frequencies one kept, two blended, one divided)
        Config({"model_type": "qwen2", "vocab_size": 50, "hidden_size": 32,
                "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 16, "rms_norm_eps": 1e-6,
                "rope_theta": 100.0, "tie_word_embeddings": False, "initializer_range": 0.2,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
        # linear, and dynamic past the original positions (T = 8 > 4)
        Config({"model_type": "llama", "vocab_size": 50, "hidden_size": 32,
                "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
                "max_position_embeddings": 16, "rope_theta": 100.0, "initializer_range": 0.2,
                "rope_scaling": {"type": "linear", "factor": 2.5}}),
        Config({"model_type": "llama", "vocab_size": 50, "hidden_size": 32,
                "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
                "max_position_embeddings": 4, "rope_theta": 100.0, "initializer_range": 0.2,
                "rope_scaling": {"type": "dynamic", "factor": 2.0}}),
    ]
    for cfg in cfgs:
        p = init_params(cfg, 7, torch.float64)
        # perturb norm gains/biases so they matter
        g = torch.Generator().manual_seed(3)
        for n, t in p.items():
            if t.dim() == 1:
                p[n] = t + 0.1 * torch.randn(t.shape, generator=g, dtype=torch.float64)
        ids = torch.randint(0, cfg.vocab, (2, 9), generator=g)
        fast = forward(cfg, p, ids)
        naive_fn = naive_gpt2_row if cfg.arch == "gpt2" else naive_llama_row
        slow = torch.stack([naive_fn(cfg, p, ids[b].tolist()) for b in range(ids.shape[0])])
        tag = "%s nh=%d nkv=%d tied=%s" % (cfg.arch, cfg.nh, cfg.nkv, cfg.tied)
        if cfg.arch == "llama":
            tag += " rope=%s%s" % (cfg.rope["rope_type"], " qkv_bias" if cfg.qkv_bias else "")
        check("logits " + tag, fast, slow, 1e-10)

        # safetensors round trip
        path = "/tmp/torch_ref_selftest_%d.safetensors" % os.getpid()
        p32 = OrderedDict((n, t.float()) for n, t in p.items())
        write_safetensors(path, p32)
        back = load_params(cfg, path)
        os.unlink(path)
        check("safetensors round trip " + cfg.arch,
              torch.cat([t.flatten() for t in back.values()]),
              torch.cat([t.flatten() for t in p32.values()]), 0.0)

        # AdamW (torch, two groups) vs hand-written, 3 steps with clipping
        lr, b1, b2, eps, wd = 1e-2, 0.9, 0.95, 1e-8, 0.1
        tp = OrderedDict((n, t.clone().requires_grad_(True)) for n, t in p.items())
        opt = make_optimizer(tp, lr, b1, b2, eps, wd)
        ref = OrderedDict((n, t.clone()) for n, t in p.items())
        st = {}
        for s in range(3):
            x, y = ids[:, :-1], ids[:, 1:]
            for gg in opt.param_groups:
                gg["lr"] = lr
            _, gn = train_step(cfg, tp, opt, lambda j: (x, y), 1, 0.5)
            rp = OrderedDict((n, t.clone().requires_grad_(True)) for n, t in ref.items())
            loss = F.cross_entropy(forward(cfg, rp, x).reshape(-1, cfg.vocab), y.reshape(-1))
            loss.backward()
            tot = math.sqrt(sum(float((t.grad ** 2).sum()) for t in rp.values()))
            scale = min(1.0, 0.5 / (tot + 1e-6))
            grads = OrderedDict((n, t.grad * scale) for n, t in rp.items())
            check("grad_norm step %d %s" % (s, cfg.arch), torch.tensor(gn, dtype=torch.float64), torch.tensor(tot, dtype=torch.float64), 1e-9)
            naive_adamw(ref, grads, st, lr, b1, b2, eps, wd, s + 1)
        check("AdamW 3 steps " + tag,
              torch.cat([t.detach().flatten() for t in tp.values()]),
              torch.cat([t.flatten() for t in ref.values()]), 1e-10)

    # gradient check of the float64 forward (autograd vs finite differences)
    cfg = cfgs[1]
    p = init_params(cfg, 9, torch.float64)
    ids = torch.randint(0, cfg.vocab, (1, 6), generator=torch.Generator().manual_seed(5))
    name = "model.layers.0.self_attn.k_proj.weight"
    w = p[name].clone().requires_grad_(True)

    def f(wk):
        q = OrderedDict(p)
        q[name] = wk
        lg = forward(cfg, q, ids[:, :-1])
        return F.cross_entropy(lg.reshape(-1, cfg.vocab), ids[:, 1:].reshape(-1))
    gc = torch.autograd.gradcheck(f, (w,), eps=1e-6, atol=1e-7)
    print("%-40s %s" % ("gradcheck llama k_proj", "ok" if gc else "FAIL"))
    ok = ok and gc

    # lr schedule spot checks
    sch = [lr_at(i, 1.0, 2, 10, "cosine", 0.1) for i in range(10)]
    exp = [0.5, 1.0] + [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (i - 2) / 8)) for i in range(2, 10)]
    check("lr schedule cosine", torch.tensor(sch, dtype=torch.float64), torch.tensor(exp, dtype=torch.float64), 1e-15)

    print("selftest: %s" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


# ---------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(prog="torch_ref.py", description=__doc__.split("\n")[1])
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("init", help="create HF-named initial weights")
    s.add_argument("--config", required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_init)

    s = sub.add_parser("train", help="train on an llm.c token shard")
    s.add_argument("--config", required=True)
    s.add_argument("--init", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--micro-batch", type=int, required=True)
    s.add_argument("--micro-batches", type=int, default=1)
    s.add_argument("--seq-len", type=int, required=True)
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--lr", type=float, required=True)
    s.add_argument("--warmup", type=int, default=0)
    s.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant")
    s.add_argument("--min-lr", type=float, default=0.0)
    s.add_argument("--weight-decay", type=float, default=0.0)
    s.add_argument("--beta1", type=float, default=0.9)
    s.add_argument("--beta2", type=float, default=0.999)
    s.add_argument("--eps", type=float, default=1e-8)
    s.add_argument("--clip", type=float, default=0.0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--metrics", default=None)
    s.add_argument("--val-data", default=None, help="shard whose first --eval-batches windows give val_loss")
    s.add_argument("--eval-every", type=int, default=0)
    s.add_argument("--eval-batches", type=int, default=4)
    s.add_argument("--save-weights", default=None)
    s.add_argument("--dropout-off", action="store_true",
                   help="accepted for symmetry; dropout is always off")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("bench", help="time training steps on random data")
    s.add_argument("--config", required=True)
    s.add_argument("--micro-batch", type=int, required=True)
    s.add_argument("--micro-batches", type=int, default=1)
    s.add_argument("--seq-len", type=int, required=True)
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--warmup-steps", type=int, default=2)
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("generate", help="greedy tokens, recomputing the whole sequence or with --cache")
    s.add_argument("--config", required=True)
    s.add_argument("--weights", required=True)
    s.add_argument("--prompt", required=True, help="token ids separated by spaces")
    s.add_argument("--max-tokens", type=int, default=0)
    s.add_argument("--check", default=None,
                   help="token ids another implementation generated greedily: each must be the greedy "
                        "choice after the ones before it, up to --tolerance (exit 1 if not)")
    s.add_argument("--tolerance", type=float, default=1e-4)
    s.add_argument("--cache", action="store_true",
                   help="a key/value cache: each token runs one position, not the whole sequence")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(fn=cmd_generate)

    s = sub.add_parser("selftest", help="check against naive loop formulations")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(fn=cmd_selftest)

    a = ap.parse_args(argv)
    a.fn(a)


if __name__ == "__main__":
    main()
