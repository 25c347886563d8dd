#!/bin/sh
# Validation loss (--val-data, --eval-every, --eval-batches): the same
# windows, forward only and without dropout, give the same val_loss in every
# layout as in one process (within 1e-6 relative; the replicas split the
# windows, pipelines run forward only, tensor parallelism sums partial
# results), and the one-process value equals the independent PyTorch
# reference's on the same windows (within 1e-5).  Samples while training
# (--sample-every) run in a 3D layout.  Bad options and too small a
# validation set are refused.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
make_shard "$WORK/data.bin"
find "$MERAK_SRCDIR/man" -name '*.[178]' | sort | xargs cat > "$WORK/val.txt"
"$SHARD" -o "$WORK/val.bin" "$WORK/val.txt" > /dev/null
M=4
# a GPT-2 with dropout: evaluation must turn it off in every layout alike
printf '{"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 4, "n_head": 2,
  "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}\n' > "$WORK/drop.json"
common="--model $WORK/drop.json --data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 6 --lr 3e-3
        --threads 1 --val-data $WORK/val.bin --eval-every 2 --eval-batches 8"

# same REF.jsonl GOT.jsonl NAME: val_loss at the same steps within 1e-6
same() {
    "$PY3" - "$@" <<'PYEOF'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
rv = [(r["step"], r["val_loss"]) for r in ref if "val_loss" in r]
gv = [(g["step"], g["val_loss"]) for g in got if "val_loss" in g]
assert [s for s, _ in rv] == [1, 3, 5] and [s for s, _ in gv] == [1, 3, 5], (rv, gv)
worst = max(abs(a - b) / abs(a) for (_, a), (_, b) in zip(rv, gv))
print("%s: val_loss at steps 1, 3, 5, largest relative difference %.3g" % (sys.argv[3], worst))
sys.exit(0 if worst <= 1e-6 else 1)
PYEOF
}
for layout in "1 1 1" "2 1 1" "1 2 1" "1 1 2" "2 2 2" "1 1 2 interleaved" "2 1 2 zb-h1" "1 2 2 1f1b 2"; do
    set -- $layout
    dp=$1 tp=$2 pp=$3 np=$(($1 * $2 * $3)) sched=${4:-1f1b} overlap=${5:-1}
    ref=$WORK/ref$dp
    if [ ! -f "$ref.jsonl" ]; then
        "$TRAIN" $common --micro-batches $((M * dp)) --metrics "$ref.jsonl" > /dev/null ||
            fail "reference run (dp $dp) failed"
    fi
    [ "$np" -gt 1 ] || continue
    rm -f "$WORK/got.jsonl"   # --metrics appends
    "$WRAP" $np "$TRAIN" $common --micro-batches $M --dp $dp --tp $tp --pp $pp --schedule $sched \
        --tp-overlap $overlap --metrics "$WORK/got.jsonl" > "$WORK/got.out" 2>&1 ||
        { cat "$WORK/got.out" >&2; fail "($dp,$tp,$pp) $sched failed"; }
    same "$ref.jsonl" "$WORK/got.jsonl" "($dp,$tp,$pp) $sched tp-overlap $overlap" ||
        fail "($dp,$tp,$pp) $sched tp-overlap $overlap: val_loss differs"
done
grep -q "| val loss [0-9.]* |" "$WORK/got.out" || fail "the progress line has no val loss"

# samples while training (--sample-every): every rank takes part (the
# parameters gathered whole on rank 0), rank 0 prints after steps 2 and 5
"$WRAP" 8 "$TRAIN" $common --micro-batches $M --dp 2 --tp 2 --pp 2 --sample-every 3 --prompt "int " \
    --sample-tokens 16 > "$WORK/sample.out" 2>&1 || { cat "$WORK/sample.out" >&2; fail "(2,2,2) with samples failed"; }
[ "$(grep -c "^sample after step [25]: " "$WORK/sample.out")" -eq 2 ] ||
    { cat "$WORK/sample.out" >&2; fail "(2,2,2): not one sample after steps 2 and 5"; }
echo "(2,2,2): samples after steps 2 and 5"

# the PyTorch reference on the same windows (no dropout there: the preset model)
PY=${TORCH_PYTHON:-/usr/bin/python3}
if [ "$PY" != none ] && "$PY" -c 'import torch' 2>/dev/null; then
    cfg=$MERAK_SRCDIR/tests/fixtures/ref-gpt2.json
    hyper="--micro-batch 2 --micro-batches 2 --seq-len 16 --steps 4 --lr 1e-3 --lr-schedule constant
           --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --clip 1.0
           --threads 1 --val-data $WORK/val.bin --eval-every 2 --eval-batches 4"
    "$PY" "$MERAK_SRCDIR/tests/ref/torch_ref.py" init --config "$cfg" --seed 7 --out "$WORK/init.safetensors" > /dev/null &&
        "$PY" "$MERAK_SRCDIR/tests/ref/torch_ref.py" train --config "$cfg" --init "$WORK/init.safetensors" \
            --data "$WORK/data.bin" $hyper --metrics "$WORK/torch.jsonl" > /dev/null || fail "torch_ref.py failed"
    "$TRAIN" --model "$cfg" --init "$WORK/init.safetensors" --data "$WORK/data.bin" $hyper \
        --metrics "$WORK/merak.jsonl" > /dev/null || fail "merak-train with the reference's weights failed"
    "$PY" - "$WORK/torch.jsonl" "$WORK/merak.jsonl" <<'PYEOF' || fail "val_loss differs from PyTorch's"
import json, sys
t = [(r["step"], r["val_loss"]) for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
m = [(r["step"], r["val_loss"]) for r in map(json.loads, open(sys.argv[2])) if "val_loss" in r]
assert [s for s, _ in t] == [s for s, _ in m] == [1, 3], (t, m)
worst = max(abs(a - b) / abs(a) for (_, a), (_, b) in zip(t, m))
print("PyTorch reference: val_loss at steps 1, 3, largest relative difference %.3g" % worst)
sys.exit(0 if worst <= 1e-5 else 1)
PYEOF
fi

# refused
expect_exit 2 "--eval-every needs --val-data GLOB" "$TRAIN" --data "$WORK/data.bin" --eval-every 2
expect_exit 2 "--eval-batches needs --val-data GLOB" "$TRAIN" --data "$WORK/data.bin" --eval-batches 2
expect_exit 2 "eval-batches.*out of range" "$TRAIN" --data "$WORK/data.bin" --val-data "$WORK/val.bin" --eval-batches 0
printf 'tiny' > "$WORK/small.txt"
"$SHARD" -o "$WORK/small.bin" "$WORK/small.txt" > /dev/null
expect_exit 1 "small.bin: 0 windows of 2 x 16 + 1 tokens, fewer than the 4 the evaluation takes (--eval-batches)" \
    "$TRAIN" --data "$WORK/data.bin" --val-data "$WORK/small.bin" --micro-batch 2 --seq-len 16 --steps 1 --threads 1
expect_job_fails merak-train "--eval-batches 3 is not a multiple of dp 2" \
    "$WRAP" 2 "$TRAIN" --data "$WORK/data.bin" --val-data "$WORK/val.bin" --eval-batches 3 --dp 2 \
    --micro-batch 2 --seq-len 16 --steps 1 --threads 1
