#!/bin/sh
# merak-train --device cuda against the CPU backend: 50 steps of each tiny
# model in fp32 give the same loss at every step within 1e-4, and two GPU
# runs give bitwise-identical losses.  --dtype tf32 (products on the tensor
# cores): two runs bitwise identical, different from fp32's, within 2e-2 of
# the CPU's fp32 losses.  Skipped without a CUDA build or a GPU.
. "$(dirname "$0")/../lib.sh"
grep -q '^#define HAVE_CUDA 1' "$MERAK_BUILDDIR/config.h" || skip "built without CUDA"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
make_shard "$WORK/data.bin"
for model in tiny-gpt2 tiny-llama; do
    A="--model $model --data $WORK/data.bin --micro-batch 4 --micro-batches 2 --seq-len 32 --steps 50 --lr 1e-3 --warmup 5"
    "$TRAIN" $A --threads 2 --metrics "$WORK/$model.cpu.jsonl" > "$WORK/cpu.out" 2>&1 || { cat "$WORK/cpu.out" >&2; fail "$model on the cpu"; }
    for run in a b; do
        "$TRAIN" $A --device cuda --metrics "$WORK/$model.cuda.$run.jsonl" > "$WORK/cuda.out" 2>&1 ||
            { cat "$WORK/cuda.out" >&2; fail "$model on the GPU"; }
    done
    metric "$WORK/$model.cpu.jsonl" loss > "$WORK/cpu"
    metric "$WORK/$model.cuda.a.jsonl" loss > "$WORK/a"
    metric "$WORK/$model.cuda.b.jsonl" loss > "$WORK/b"
    [ "$(wc -l < "$WORK/a")" -eq 50 ] || fail "$model: the GPU run reported $(wc -l < "$WORK/a") losses, not 50"
    cmp -s "$WORK/a" "$WORK/b" || fail "$model: two GPU runs gave different losses"
    paste "$WORK/cpu" "$WORK/a" | awk -v m="$model" '
        { d = $1 - $2; if (d < 0) d = -d; if (d > worst) { worst = d; at = NR } }
        $2 != $2 + 0 { bad = 1 }
        END { printf "%s: largest |cpu - cuda| loss difference %.3g (step %d of %d)\n", m, worst, at, NR
              exit !(NR == 50 && !bad && worst <= 1e-4) }' ||
        fail "$model: the GPU's losses differ from the CPU's by more than 1e-4"
    for run in a b; do
        "$TRAIN" $A --device cuda --dtype tf32 --metrics "$WORK/$model.tf32.$run.jsonl" > "$WORK/cuda.out" 2>&1 ||
            { cat "$WORK/cuda.out" >&2; fail "$model --dtype tf32 on the GPU"; }
    done
    grep -q '"dtype": "tf32"' "$WORK/$model.tf32.a.jsonl" || fail "$model: the metrics do not say dtype tf32"
    metric "$WORK/$model.tf32.a.jsonl" loss > "$WORK/ta"
    metric "$WORK/$model.tf32.b.jsonl" loss > "$WORK/tb"
    cmp -s "$WORK/ta" "$WORK/tb" || fail "$model: two tf32 runs gave different losses"
    ! cmp -s "$WORK/ta" "$WORK/a" || fail "$model: tf32's losses equal fp32's bit for bit (TF32 not applied?)"
    paste "$WORK/cpu" "$WORK/ta" | awk -v m="$model" '
        { d = $1 - $2; if (d < 0) d = -d; if (d > worst) { worst = d; at = NR } }
        $2 != $2 + 0 { bad = 1 }
        END { printf "%s tf32: largest |cpu fp32 - cuda tf32| loss difference %.3g (step %d of %d)\n", m, worst, at, NR
              exit !(NR == 50 && !bad && worst <= 2e-2) }' ||
        fail "$model: tf32's losses differ from the CPU's fp32 by more than 2e-2"
done
