#!/bin/sh
# merak-train end to end on both architectures: the loss falls, runs are
# bitwise deterministic, metrics are written, and weights exported to
# safetensors load back exactly.
. "$(dirname "$0")/lib.sh"
make_shard "$WORK/data.bin"
common="--data $WORK/data.bin --micro-batch 4 --seq-len 32 --lr 3e-3 --warmup 2 --lr-schedule constant --threads 2"

for model in tiny-gpt2 tiny-llama; do
    "$TRAIN" --model $model $common --micro-batches 2 --steps 40 --metrics "$WORK/$model.a.jsonl" \
        > "$WORK/$model.log" || fail "$model: merak-train exited $?"
    [ "$(wc -l < "$WORK/$model.a.jsonl")" -eq 40 ] || fail "$model: expected 40 metrics lines"
    first=$(metric "$WORK/$model.a.jsonl" loss | head -1)
    last=$(metric "$WORK/$model.a.jsonl" loss | tail -1)
    echo "$model: loss $first -> $last"
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < a - 1.0) }' ||
        fail "$model: loss did not fall ($first -> $last)"
    grep -q "tok/s" "$WORK/$model.log" || fail "$model: no throughput on screen"

    # Determinism: same seed, same bits, whatever the thread count.
    "$TRAIN" --model $model $common --threads 1 --micro-batches 2 --steps 40 \
        --metrics "$WORK/$model.b.jsonl" > /dev/null || fail "$model: second run failed"
    metric "$WORK/$model.a.jsonl" loss > "$WORK/a"; metric "$WORK/$model.b.jsonl" loss > "$WORK/b"
    cmp -s "$WORK/a" "$WORK/b" || fail "$model: losses differ between identical runs"

    # Export then import: starting from saved initial weights must give the
    # same losses as starting from the seed.
    "$TRAIN" --model $model $common --steps 0 --save-weights "$WORK/$model.init.safetensors" \
        > /dev/null || fail "$model: --steps 0 --save-weights failed"
    metric "$WORK/$model.a.jsonl" loss | head -5 > "$WORK/a"
    "$TRAIN" --model $model $common --micro-batches 2 --steps 5 --seed 99 \
        --init "$WORK/$model.init.safetensors" --metrics "$WORK/$model.d.jsonl" > /dev/null
    metric "$WORK/$model.d.jsonl" loss > "$WORK/d"
    cmp -s "$WORK/a" "$WORK/d" || fail "$model: weights saved and loaded back train differently"
done
echo "train_smoke: ok"
