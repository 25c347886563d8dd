#!/bin/sh
# merak-train --device cuda against the CPU backend: 50 steps of each tiny
# model in fp32 give the same loss at every step within 1e-4, and two GPU
# runs give bitwise-identical losses.  --dtype tf32 (products on the tensor
# cores): two runs bitwise identical, different from fp32's, within 2e-2 of
# the CPU's fp32 losses.  --dtype bf16: two runs bitwise identical, within
# 2e-2 of the CPU's bf16 (its emulation, the reference), also with a
# vocabulary of 253 (padded rows of logits).  --trace times
# the device: GPT-2 124M's compute instructions follow one another on the
# stream and each backward takes longer than its forward (host times would
# give the forward the wait for the loss and the backward only its
# launches).  Skipped without a CUDA build or a GPU.
. "$(dirname "$0")/../lib.sh"
grep -q '^#define HAVE_CUDA 1' "$MERAK_BUILDDIR/config.h" || skip "built without CUDA"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
make_shard "$WORK/data.bin"

# gpu_runs MODEL DTYPE: two GPU runs of $A in DTYPE, their losses into
# $WORK/DTYPE.a and .b, which must be 50 and the same bit for bit.
gpu_runs() {
    for run in a b; do
        "$TRAIN" $A --device cuda --dtype "$2" --metrics "$WORK/$1.$2.$run.jsonl" > "$WORK/cuda.out" 2>&1 ||
            { cat "$WORK/cuda.out" >&2; fail "$1 --dtype $2 on the GPU"; }
        metric "$WORK/$1.$2.$run.jsonl" loss > "$WORK/$2.$run"
    done
    grep -q "\"dtype\": \"$2\"" "$WORK/$1.$2.a.jsonl" || fail "$1: the metrics do not say dtype $2"
    [ "$(wc -l < "$WORK/$2.a")" -eq 50 ] || fail "$1: the $2 GPU run reported $(wc -l < "$WORK/$2.a") losses, not 50"
    cmp -s "$WORK/$2.a" "$WORK/$2.b" || fail "$1: two $2 GPU runs gave different losses"
}

# near MODEL DTYPE TOL [CPU_DTYPE]: the GPU's DTYPE losses within TOL of
# the CPU's CPU_DTYPE (fp32) ones, $WORK/cpu.CPU_DTYPE.
near() {
    ref=${4:-fp32}
    paste "$WORK/cpu.$ref" "$WORK/$2.a" | awk -v m="$1" -v dt="$2" -v ref="$ref" -v tol="$3" '
        { d = $1 - $2; if (d < 0) d = -d; if (d > worst) { worst = d; at = NR } }
        $2 != $2 + 0 { bad = 1 }
        END { printf "%s: largest |cpu %s - cuda %s| loss difference %.3g (step %d of %d)\n", m, ref, dt, worst, at, NR
              exit !(NR == 50 && !bad && worst <= tol) }' ||
        fail "$1: the GPU's $2 losses differ from the CPU's $ref by more than $3"
}

for model in tiny-gpt2 tiny-llama; do
    A="--model $model --data $WORK/data.bin --micro-batch 4 --micro-batches 2 --seq-len 32 --steps 50 --lr 1e-3 --warmup 5"
    for dt in fp32 bf16; do
        "$TRAIN" $A --threads 2 --dtype $dt --metrics "$WORK/$model.cpu.$dt.jsonl" > "$WORK/cpu.out" 2>&1 ||
            { cat "$WORK/cpu.out" >&2; fail "$model --dtype $dt on the cpu"; }
        metric "$WORK/$model.cpu.$dt.jsonl" loss > "$WORK/cpu.$dt"
    done
    gpu_runs $model fp32
    near $model fp32 1e-4
    gpu_runs $model tf32
    ! cmp -s "$WORK/tf32.a" "$WORK/fp32.a" || fail "$model: tf32's losses equal fp32's bit for bit (TF32 not applied?)"
    near $model tf32 2e-2
    gpu_runs $model bf16
    ! cmp -s "$WORK/bf16.a" "$WORK/fp32.a" || fail "$model: bf16's losses equal fp32's bit for bit (bf16 not applied?)"
    near $model bf16 2e-2 bf16
done

# A vocabulary of 253 tokens: rows of bf16 logits off 16 bytes, which the
# executor pads (exec.c row_ld_of); the GPU's bf16 within 2e-2 of the
# CPU's (which pads them too), on ASCII text (every id under 253).
cat > "$WORK/v253.json" <<'JSON'
{"model_type": "gpt2", "vocab_size": 253, "n_positions": 256, "n_embd": 64, "n_inner": 256, "n_layer": 2,
 "n_head": 4, "tie_word_embeddings": true, "activation_function": "gelu_new"}
JSON
LC_ALL=C tr -cd '\11\12\40-\176' < "$WORK/corpus.txt" > "$WORK/ascii.txt"
"$SHARD" -o "$WORK/ascii.bin" "$WORK/ascii.txt" > /dev/null || fail "merak-shard of the ASCII text"
model=v253
A="--model $WORK/v253.json --data $WORK/ascii.bin --micro-batch 4 --micro-batches 2 --seq-len 32 --steps 50 --lr 1e-3 --warmup 5"
"$TRAIN" $A --threads 2 --dtype bf16 --metrics "$WORK/v253.cpu.jsonl" > "$WORK/cpu.out" 2>&1 ||
    { cat "$WORK/cpu.out" >&2; fail "v253 --dtype bf16 on the cpu"; }
metric "$WORK/v253.cpu.jsonl" loss > "$WORK/cpu.bf16"
gpu_runs $model bf16
near $model bf16 2e-2 bf16

"$TRAIN" --model gpt2 --data "$WORK/data.bin" --micro-batch 4 --micro-batches 2 --seq-len 256 --steps 3 \
    --device cuda --trace "$WORK/gpt2.trace.json" > "$WORK/cuda.out" 2>&1 ||
    { cat "$WORK/cuda.out" >&2; fail "gpt2 --trace on the GPU"; }
"$PY3" - "$WORK/gpt2.trace.json" <<'PYEOF' || fail "the GPU's trace is not timed on the device"
import json, sys
xs = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
comp = sorted((e for e in xs if e["tid"] == 0), key=lambda e: e["ts"])
for a, b in zip(comp, comp[1:]):
    assert a["dur"] >= 0 and a["ts"] + a["dur"] <= b["ts"] + 0.01, (a, b)   # (ts and dur each rounded to 1 ns)
for mb in (0, 1):
    f = [e["dur"] for e in comp if e["name"] == "FWD" and e["args"]["mb"] == mb and e["args"]["step"] > 0]
    b = [e["dur"] for e in comp if e["name"] == "BWD" and e["args"]["mb"] == mb and e["args"]["step"] > 0]
    print("micro-batch %d: FWD %s us, BWD %s us" % (mb, f, b))
    assert len(f) == 2 and len(b) == 2 and all(y > 1.2 * x for x, y in zip(f, b)), (f, b)
PYEOF
