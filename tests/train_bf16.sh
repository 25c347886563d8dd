#!/bin/sh
# --dtype bf16 on the CPU (the emulation, runtime/pipe/exec.h): tiny GPT-2
# and LLaMA train like fp32 (the last losses within 3%, not equal to
# fp32's), deterministically; the banner and metrics say the dtype; bf16
# storage and float storage (MERAK_BF16_STORAGE=float) give the same
# losses bit for bit; an unknown dtype, an unknown storage and tf32 on the
# CPU are usage errors.
. "$(dirname "$0")/lib.sh"
make_shard "$WORK/data.bin"
common="--data $WORK/data.bin --micro-batch 4 --seq-len 32 --lr 3e-3 --warmup 2 --lr-schedule constant
        --threads 2 --micro-batches 2 --steps 40"

# mean of the last 5 losses of metrics file $1
tail_loss() { metric "$1" loss | tail -5 | awk '{ s += $1 } END { printf "%.6f", s / NR }'; }

for model in tiny-gpt2 tiny-llama; do
    for dt in fp32 bf16; do
        "$TRAIN" --model $model $common --dtype $dt --metrics "$WORK/$model.$dt.jsonl" > "$WORK/$model.$dt.log" ||
            fail "$model --dtype $dt: merak-train exited $?"
        grep -q "| dtype $dt |" "$WORK/$model.$dt.log" || fail "$model: the banner does not say dtype $dt"
        [ "$(grep -c "\"dtype\": \"$dt\"" "$WORK/$model.$dt.jsonl")" -eq 40 ] ||
            fail "$model: the metrics lines do not all say dtype $dt"
    done
    f=$(tail_loss "$WORK/$model.fp32.jsonl") b=$(tail_loss "$WORK/$model.bf16.jsonl")
    first=$(metric "$WORK/$model.bf16.jsonl" loss | head -1)
    echo "$model: bf16 loss $first -> $b (last 5 steps), fp32 -> $f"
    awk -v a="$first" -v b="$b" -v f="$f" 'BEGIN { r = (b - f) / f; if (r < 0) r = -r; exit !(a > 5.0 && b < a - 1.0 && r < 0.03 && b != f) }' ||
        fail "$model: bf16 does not train like fp32 ($first -> $b; fp32 $f)"
    "$TRAIN" --model $model $common --dtype bf16 --threads 1 --metrics "$WORK/$model.b1.jsonl" > /dev/null ||
        fail "$model: second bf16 run failed"
    metric "$WORK/$model.bf16.jsonl" loss > "$WORK/a"; metric "$WORK/$model.b1.jsonl" loss > "$WORK/b"
    cmp -s "$WORK/a" "$WORK/b" || fail "$model: bf16 losses differ between identical runs (1 and 2 threads)"
    # MERAK_BF16_STORAGE=float: the same losses and grad norms, bit for
    # bit, from bf16 values in float storage, in larger arenas
    MERAK_BF16_STORAGE=float "$TRAIN" --model $model $common --dtype bf16 --metrics "$WORK/$model.fl.jsonl" \
        > "$WORK/$model.fl.log" || fail "$model: MERAK_BF16_STORAGE=float run failed"
    metric "$WORK/$model.fl.jsonl" loss > "$WORK/c"
    metric "$WORK/$model.bf16.jsonl" grad_norm > "$WORK/gb"; metric "$WORK/$model.fl.jsonl" grad_norm > "$WORK/gf"
    cmp -s "$WORK/a" "$WORK/c" && cmp -s "$WORK/gb" "$WORK/gf" ||
        fail "$model: bf16 storage and float storage train differently"
    ab=$(sed -n 's/.*| arenas \([0-9.]*\) MiB.*/\1/p' "$WORK/$model.bf16.log")
    af=$(sed -n 's/.*| arenas \([0-9.]*\) MiB.*/\1/p' "$WORK/$model.fl.log")
    echo "$model: arenas $ab MiB in bf16 storage, $af MiB in float storage, the same losses"
    awk -v b="$ab" -v f="$af" 'BEGIN { exit !(b > 0 && b < f) }' || fail "$model: bf16 storage takes no less memory"
done
expect_exit 2 "MERAK_BF16_STORAGE 'half' is not bf16 or float" env MERAK_BF16_STORAGE=half "$TRAIN" \
    --data "$WORK/data.bin" --dtype bf16 --steps 1
expect_exit 2 "dtype tf32 on device cpu: TF32 is the tensor-core product format" "$TRAIN" --data "$WORK/data.bin" \
    --dtype tf32
expect_exit 2 "dtype 'fp16' is not fp32, tf32 or bf16" "$TRAIN" --data "$WORK/data.bin" --dtype fp16
echo "train_bf16: ok"
