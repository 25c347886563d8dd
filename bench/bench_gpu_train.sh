#!/bin/sh
# bench_gpu_train.sh [BUILDDIR] - single-GPU training throughput and memory,
# merak-train --device cuda against PyTorch on the same GPU, same model, same
# batch.
#
# For each model (GPT-2 presets; gpt2-v50304: GPT-2 124M with its
# vocabulary padded to 50304, both sides, to show what rows of logits
# aligned to 16 bytes are worth; and llama-1b: a LLaMA-style 1.1B with
# grouped-query attention, RoPE and SwiGLU, TinyLlama-1.1B's shape: 22
# layers of 2048, 32 heads over 4 key/value heads, 5632 wide MLP, 32000
# tokens; run it at T=2048) at sequence length T both sides train
# WARMUP + STEPS optimizer steps of M micro-batches of B sequences from the
# same token shard; the median step time of the timed steps is reported.
# merak trains in each of MERAK_DTYPES (--dtype fp32, tf32, bf16; bf16-float: bf16
# values in float storage, MERAK_BF16_STORAGE=float; bf16-gelu: bf16 with GELU in
# cuBLASLt's epilogues, MERAK_CUDA_GELU_EPILOGUE=1; bf16-tune: bf16 with GEMM
# algorithms chosen by timing, MERAK_CUDA_GEMM_TUNE=1).  PyTorch runs a
# nanoGPT-style GPT-2 (nn.Linear, F.scaled_dot_product_attention with
# is_causal, fused AdamW, clip_grad_norm_; for llama-1b nn.RMSNorm,
# rotate-half RoPE, SDPA with enable_gqa, SwiGLU, no biases) in four modes:
#   fp32          float32 everywhere, TF32 off: merak's --dtype fp32;
#   tf32          float32 with TF32 products (allow_tf32): merak's --dtype tf32;
#   bf16          autocast to bfloat16 with float32 master weights (eager);
#   bf16-compile  the same under torch.compile.
# One line per run:
#   bench_gpu_train model=gpt2 T=1024 mode=merak-fp32 step_ms=... tok_s=... mfu=... peak_mib=...
# and a '#' line with the step-time ratio of each torch mode over merak's
# run in the same arithmetic (the bf16 modes: over merak's bf16, else its
# fastest).
# Each merak run is traced (--trace: on a GPU, the device's times; it costs
# one synchronisation at each step's start and two CUDA events per
# instruction, a few microseconds a step) and a
# '#' line gives the mean milliseconds of its timed steps' FWD, BWD and
# OPTIMIZER_STEP and the device's idle time between them (where a step
# goes, for the next change to aim at).
# MFU counts PaLM's 6*N + 12*L*T*C floating-point operations per token (N
# parameters, L layers, hidden C) against PEAK_TFLOPS (bf16 dense, H100 SXM)
# for the bf16 modes, PEAK_TF32_TFLOPS (TF32 dense, H100 SXM) for tf32 and
# PEAK_FP32_TFLOPS (H100 SXM, no tensor cores) for fp32.  Peak memory: torch.cuda.max_memory_allocated, and merak-train's
# planned allocation ("memory (allocated)").
#
# Environment: MODELS [gpt2 gpt2-medium; or gpt2-v50304, llama-1b]  T [1024]  B [8]  M [1]  STEPS [20]
#   WARMUP [5]  MODES [fp32 tf32 bf16 bf16-compile]  MERAK_DTYPES [fp32 tf32 bf16 bf16-gelu bf16-tune bf16-float]
#   PYTHON [python3]  PEAK_TFLOPS [989.4]  PEAK_TF32_TFLOPS [494.7]
#   PEAK_FP32_TFLOPS [66.9]
set -eu

BUILDDIR=${1:-.}
MODELS=${MODELS:-"gpt2 gpt2-medium"}
T=${T:-1024}
B=${B:-8}
M=${M:-1}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
MODES=${MODES:-"fp32 tf32 bf16 bf16-compile"}
MERAK_DTYPES=${MERAK_DTYPES:-"fp32 tf32 bf16 bf16-gelu bf16-tune bf16-float"}
PYTHON=${PYTHON:-python3}
PEAK_TFLOPS=${PEAK_TFLOPS:-989.4}
PEAK_FP32_TFLOPS=${PEAK_FP32_TFLOPS:-66.9}
PEAK_TF32_TFLOPS=${PEAK_TF32_TFLOPS:-494.7}

. "$(dirname "$0")/lib.sh"
bench_setup bench_gpu_train "$BUILDDIR" merak-train merak-shard
if ! "$PYTHON" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' >/dev/null 2>&1; then
    echo "bench_gpu_train: skipped: $PYTHON has no torch with a CUDA device"
    exit 0
fi

# GPT-2's vocabulary over the project's text: byte values are valid token ids.
find "$SRCDIR" \( -name .git -o -name autom4te.cache \) -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.md' -o -name '*.[17]' \) -print |
    LC_ALL=C sort > "$TMP/files.txt"
# shellcheck disable=SC2046
"$BUILDDIR/merak-shard" -o "$TMP/shard.bin" $(cat "$TMP/files.txt") >/dev/null

cat > "$TMP/torch_gpt2.py" <<'EOF'
import sys, time, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
name, shard, B, M, T, n, mode = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7]), sys.argv[7]
llama = name == "llama-1b"
if llama:
    L, C, H, KV, FF, V = 22, 2048, 32, 4, 5632, 32000
else:
    L, C, H = {"gpt2": (12, 768, 12), "gpt2-v50304": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
               "gpt2-large": (36, 1280, 20)}[name]
    V = 50304 if name == "gpt2-v50304" else 50257
torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
torch.backends.cudnn.allow_tf32 = mode == "tf32"
torch.manual_seed(1234)
dev = "cuda"
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc, s.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x):
        b, t, _ = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(b, t, C))
        return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))
class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(1024, C)
        s.h = nn.ModuleList(Block() for _ in range(L))
        s.lnf = nn.LayerNorm(C)
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in s.h:
            x = blk(x)
        logits = s.lnf(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))
hd = C // H
class LBlock(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1, s.n2 = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        s.q, s.kv, s.o = nn.Linear(C, C, bias=False), nn.Linear(C, 2 * KV * hd, bias=False), nn.Linear(C, C, bias=False)
        s.gate, s.up, s.down = nn.Linear(C, FF, bias=False), nn.Linear(C, FF, bias=False), nn.Linear(FF, C, bias=False)
    def forward(s, x, cos, sin):
        b, t, _ = x.shape
        h = s.n1(x)
        q = s.q(h).view(b, t, H, hd).transpose(1, 2)
        k, v = s.kv(h).view(b, t, 2, KV, hd).permute(2, 0, 3, 1, 4)
        c, sn = cos.to(q.dtype), sin.to(q.dtype)   # as Hugging Face: in the activations' dtype
        rot = lambda z: z * c + torch.cat((-z[..., hd // 2:], z[..., :hd // 2]), -1) * sn
        y = F.scaled_dot_product_attention(rot(q), rot(k), v, is_causal=True, enable_gqa=True)
        x = x + s.o(y.transpose(1, 2).reshape(b, t, C))
        h = s.n2(x)
        return x + s.down(F.silu(s.gate(h)) * s.up(h))
class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, C)
        s.h = nn.ModuleList(LBlock() for _ in range(L))
        s.norm, s.head = nn.RMSNorm(C, eps=1e-5), nn.Linear(C, V, bias=False)
        f = torch.outer(torch.arange(T, dtype=torch.float32), 1.0 / 10000.0 ** (torch.arange(0, hd, 2) / hd))
        s.register_buffer("cos", torch.cat((f, f), -1).cos(), persistent=False)
        s.register_buffer("sin", torch.cat((f, f), -1).sin(), persistent=False)
    def forward(s, idx, tgt):
        x = s.emb(idx)
        for blk in s.h:
            x = blk(x, s.cos, s.sin)
        logits = s.head(s.norm(x))
        return F.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))
model = (Llama() if llama else GPT()).to(dev)
nparams = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
step_fn = model
if mode == "bf16-compile":
    step_fn = torch.compile(model)
tok = np.memmap(shard, dtype=np.uint16, mode="r", offset=1024)
W = (len(tok) - 1) // T
def batch(i):
    rows = [np.asarray(tok[((i * B + r) % W) * T:((i * B + r) % W) * T + T + 1], dtype=np.int64) for r in range(B)]
    a = torch.from_numpy(np.stack(rows)).pin_memory().to(dev, non_blocking=True)
    return a[:, :-1], a[:, 1:]
times = []
for i in range(n):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for j in range(M):
        x, y = batch(i * M + j)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode.startswith("bf16")):
            loss = step_fn(x, y) / M
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); opt.zero_grad(set_to_none=True)
    lv = loss.item()
    torch.cuda.synchronize(); times.append((time.perf_counter() - t0) * 1e3)
print("params %d" % nparams)
print("peak_mib %.0f" % (torch.cuda.max_memory_allocated() / 2**20))
for t in times: print("ms %.4f" % t)
EOF
NSTEPS=$((WARMUP + STEPS))
TOK=$((B * M * T))
echo "# bench_gpu_train: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), torch $("$PYTHON" -c 'import torch; print(torch.__version__)'), B=$B M=$M T=$T ($TOK tokens/step), $WARMUP warm-up + $STEPS timed steps"

# line MODEL MODE MS PARAMS PEAK LAYERS HIDDEN -> one result line
line() {
    awk -v model="$1" -v mode="$2" -v ms="$3" -v N="$4" -v peak="$5" -v L="$6" -v C="$7" \
        -v tok="$TOK" -v T="$T" -v pk="$PEAK_TFLOPS" -v pk32="$PEAK_FP32_TFLOPS" -v pktf="$PEAK_TF32_TFLOPS" 'BEGIN {
        tps = tok / (ms / 1e3); fl = 6 * N + 12 * L * T * C;
        p = (mode ~ /fp32/ ? pk32 : mode ~ /tf32/ ? pktf : pk) * 1e12;
        printf "bench_gpu_train model=%s T=%d mode=%s step_ms=%.1f tok_s=%.0f mfu=%.3f peak_mib=%s\n", model, T, mode, ms, tps, tps * fl / p, peak }'
}

for model in $MODELS; do
    case $model in
    gpt2|gpt2-v50304) L=12 C=768 ;; gpt2-medium) L=24 C=1024 ;; gpt2-large) L=36 C=1280 ;;
    llama-1b) L=22 C=2048 ;;
    *) die "model '$model': gpt2, gpt2-v50304, gpt2-medium, gpt2-large or llama-1b" ;;
    esac
    if [ "$model" = gpt2-v50304 ]; then
        # GPT-2 124M with its vocabulary padded to 50304 (a multiple of 64,
        # as nanoGPT pads it; the data's ids stay below 50257): the logits'
        # rows 16-byte aligned in bf16, which 50257 columns are not.  Both
        # sides train it: the step-time difference from gpt2 is what the
        # alignment is worth to each.
        cat > "$TMP/gpt2-v50304.json" <<'JSON'
{"model_type": "gpt2", "vocab_size": 50304, "n_positions": 1024, "n_embd": 768, "n_inner": 3072,
 "n_layer": 12, "n_head": 12, "layer_norm_epsilon": 1e-05, "tie_word_embeddings": true,
 "activation_function": "gelu_new"}
JSON
        spec=$TMP/gpt2-v50304.json
        N=$(( $("$BUILDDIR/merak-plan" --list-models | awk '$1 == "gpt2" {print $10}') + (50304 - 50257) * 768 ))
    elif [ "$model" = llama-1b ]; then
        # TinyLlama-1.1B's shape as a Hugging Face config (merak-train --model FILE)
        cat > "$TMP/llama-1b.json" <<'JSON'
{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
 "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu"}
JSON
        spec=$TMP/llama-1b.json
        # embeddings and head; per layer q, k and v (4 of 32 heads), o, the MLP and two norms; the final norm
        N=$((2 * 32000 * 2048 + 22 * (2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048) + 2048))
    else
        spec=$model
        N=$("$BUILDDIR/merak-plan" --list-models | awk -v m="$model" '$1 == m {print $10}')
    fi
    best= ms_fp32= ms_tf32= ms_bf16= ms_bf16_float= ms_bf16_gelu= ms_bf16_tune=
    for dt in $MERAK_DTYPES; do
        rm -f "$TMP/m.jsonl"
        case $dt in
        bf16-float) flag=bf16 storage=float gelu=0 tune=0 ;;
        bf16-gelu) flag=bf16 storage=bf16 gelu=1 tune=0 ;;
        bf16-tune) flag=bf16 storage=bf16 gelu=0 tune=1 ;;
        *) flag=$dt storage=bf16 gelu=0 tune=0 ;;
        esac
        # a run that fails is reported and the others go on (a GPU's minutes are few)
        if ! env MERAK_BF16_STORAGE=$storage MERAK_CUDA_GELU_EPILOGUE=$gelu MERAK_CUDA_GEMM_TUNE=$tune "$BUILDDIR/merak-train" --model "$spec" --device cuda --dtype "$flag" \
            --data "$TMP/shard.bin" \
            --micro-batch "$B" --micro-batches "$M" --seq-len "$T" --steps "$NSTEPS" --lr 1e-4 \
            --lr-schedule constant --clip 1.0 --log-every 1000000 --metrics "$TMP/m.jsonl" \
            --trace "$TMP/trace.json" > "$TMP/merak.out" 2>&1; then
            tail -5 "$TMP/merak.out" >&2
            echo "bench_gpu_train model=$model T=$T mode=merak-$dt failed: $(tail -1 "$TMP/merak.out" | cut -c1-160)"
            continue
        fi
        mms=$(sed -n 's/.*"step": \([0-9]*\),.*"step_ms": \([0-9.eE+-]*\).*/\1 \2/p' "$TMP/m.jsonl" |
              awk -v w="$WARMUP" '$1 >= w {print $2}' | median)
        mpeak=$(sed -n 's/^memory (allocated): stage 0 \([0-9.]*\) MiB.*/\1/p' "$TMP/merak.out" | head -1)
        line "$model" "merak-$dt" "$mms" "$N" "${mpeak:-?}" "$L" "$C"
        "$PYTHON" - "$TMP/trace.json" "$WARMUP" "$model" "$dt" <<'PYEOF' || true
import json, sys
w = int(sys.argv[2])
xs = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X" and e["args"]["step"] >= w]
steps = sorted({e["args"]["step"] for e in xs})
comp = [e for e in xs if e["tid"] == 0]
ms = lambda k: sum(e["dur"] for e in comp if e["name"] == k) / 1e3 / max(len(steps), 1)
busy, span = 0.0, 0.0
for s in steps:
    c = [e for e in comp if e["args"]["step"] == s]
    busy += sum(e["dur"] for e in c)
    span += max(e["ts"] + e["dur"] for e in c) - min(e["ts"] for e in c)
print("# %s merak-%s trace (device times, mean of %d steps): FWD %.2f ms, BWD %.2f ms, OPTIMIZER_STEP %.2f ms, "
      "idle between instructions %.2f ms" % (sys.argv[3], sys.argv[4], len(steps), ms("FWD"), ms("BWD"),
      ms("OPTIMIZER_STEP"), (span - busy) / 1e3 / max(len(steps), 1)))
PYEOF
        eval "ms_$(echo "$dt" | tr - _)=\$mms"
        if [ -z "$best" ] || awk -v a="$mms" -v b="$best" 'BEGIN {exit !(a < b)}'; then best=$mms; fi
    done
    for mode in $MODES; do
        if ! "$PYTHON" "$TMP/torch_gpt2.py" "$model" "$TMP/shard.bin" "$B" "$M" "$T" "$NSTEPS" "$mode" > "$TMP/t.out" 2>&1; then
            tail -20 "$TMP/t.out" >&2
            echo "bench_gpu_train model=$model T=$T mode=torch-$mode failed: $(tail -1 "$TMP/t.out" | cut -c1-160)"
            continue
        fi
        tms=$(sed -n 's/^ms //p' "$TMP/t.out" | tail -n +"$((WARMUP + 1))" | median)
        tpeak=$(sed -n 's/^peak_mib //p' "$TMP/t.out")
        line "$model" "torch-$mode" "$tms" "$N" "$tpeak" "$L" "$C"
        case $mode in
        fp32|tf32) eval "mms=\${ms_$mode:-}"; against="merak-$mode" ;;
        *) mms=${ms_bf16:-$best}; against=${ms_bf16:+merak-bf16}; against=${against:-"merak's fastest"} ;;
        esac
        if [ -n "$mms" ]; then
            echo "# $model torch-$mode: $against/torch step-time ratio $(awk -v a="$tms" -v b="$mms" 'BEGIN {printf "%.3f", a / b}') (above 1: merak faster)"
        fi
    done
done
