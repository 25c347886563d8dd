#!/bin/sh
# The planner's memory model against what merak-train really allocates.
# merak-train's "memory (allocated)" line is each stage's peak of the
# backend's allocator (the CPU kernels count every buffer they hand out:
# parameters, gradients, AdamW's moments, activation arenas, recompute
# buffers, scratch, the ZeRO shard); merak-plan --gpus predicts it from the
# runtime's own plan of each stage.  Five layouts of tiny GPT-2 on 4 ranks
# (1f1b, gpipe, interleaved, dp 2 with ZeRO-1 and autopipe, tp 2 with
# stage-aware recomputation) must agree within 10% on every stage, and
# both must cut the model at the same blocks.  Then
# GPT-2 124M on 4 pipeline stages: each rank allocates its stage, which the
# plan predicts, and well under half of what the whole model's parameters,
# gradients and moments take (16 bytes x 124,439,808): a rank holds its
# shard, not the model.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
PY=$PY3
PLAN=$MERAK_BUILDDIR/merak-plan
make_shard "$WORK/data.bin"

# compare NAME MODEL B T M "TRAIN ARGS" "PLAN ARGS": one layout, both ways
compare() {
    name=$1 model=$2 b=$3 t=$4 m=$5
    "$WRAP" 4 "$TRAIN" --model "$model" --data "$WORK/data.bin" --micro-batch "$b" --seq-len "$t" --steps 1 \
        --threads 1 --micro-batches "$m" $6 > "$WORK/$name.out" 2>&1 ||
        { tail -5 "$WORK/$name.out" >&2; fail "$name: merak-train failed"; }
    "$PLAN" --model "$model" --gpus 4 --gpus-per-node 4 --gpu cpu --micro-batch "$b" --seq-len "$t" $7 --json \
        > "$WORK/$name.json" || fail "$name: merak-plan failed: $(cat "$WORK/$name.json")"
    "$PY" - "$name" "$WORK/$name.out" "$WORK/$name.json" "$m" "${8:-0}" <<'PYEOF' || fail "$name: prediction and allocation differ"
import json, re, sys
name, out, plan, m, whole = sys.argv[1], open(sys.argv[2]).read(), json.load(open(sys.argv[3])), int(sys.argv[4]), float(sys.argv[5])
line = re.search(r"^memory \(allocated\):(.*)$", out, re.M).group(1)
measured = [float(x) * 2**20 for x in re.findall(r"stage \d+ ([0-9.]+) MiB", line)]
predicted = [s["memory"]["total"] for s in plan["stages"]]
assert plan["micro_batches"] == m, plan["micro_batches"]
cut = re.search(r"stages start at blocks ([0-9,]+)", out)
if cut and plan["virtual_stages"] == 1:   # merak-train cuts the model where merak-plan does
    assert [int(x) for x in cut.group(1).split(",")] == [s["first_block"] for s in plan["stages"]], (cut.group(1), plan)
assert len(measured) == len(predicted), (measured, predicted)
worst = max(abs(p - a) / a for p, a in zip(predicted, measured))
assert worst <= 0.10, (measured, predicted)
if whole:
    assert max(measured) < whole / 2, (max(measured), whole)
print("ok: %s: allocated %s MiB, predicted %s MiB (worst difference %.2f%%)%s" % (name,
      " ".join("%.3f" % (a / 2**20) for a in measured), " ".join("%.3f" % (p / 2**20) for p in predicted),
      100 * worst, ", the whole model's training state %.0f MiB" % (whole / 2**20) if whole else ""))
PYEOF
}

compare pp4-1f1b tiny-gpt2 2 16 4 "--pp 4 --partition parameters" "--pp 4 --global-batch 8 --partition parameters"
compare pp2-gpipe tiny-gpt2 2 16 4 "--pp 2 --schedule gpipe --partition uniform" \
    "--pp 2 --global-batch 16 --schedule gpipe --partition uniform"
compare pp2-interleaved tiny-gpt2 2 16 4 "--pp 2 --schedule interleaved --recompute full --partition parameters" \
    "--pp 2 --global-batch 16 --schedule interleaved --recompute full --partition parameters"
compare dp2-zero tiny-gpt2 2 16 2 "--pp 2 --zero 1 --partition autopipe" "--pp 2 --global-batch 8 --zero 1"
compare tp2-stage-aware tiny-llama 2 16 4 "--tp 2 --pp 2 --recompute stage-aware --schedule scp --partition parameters" \
    "--tp 2 --pp 2 --global-batch 8 --recompute stage-aware --schedule scp --partition parameters"
compare gpt2-pp4 gpt2 1 16 4 "--pp 4 --partition parameters" "--pp 4 --global-batch 4 --partition parameters" \
    $((16 * 124439808))
echo "mpi_memory: ok"
