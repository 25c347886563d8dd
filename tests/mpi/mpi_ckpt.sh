#!/bin/sh
# Checkpoints on 8 ranks: a (dp 2, tp 2, pp 2) run with ZeRO-1 resumed
# from its step-3 checkpoint in the same layout trains bit for bit like
# the unbroken run; a checkpoint resharded through (2,2,2) ZeRO-1 ->
# (1,4,2) -> (1,1,1) -> (2,2,2) without ZeRO goes on with the unbroken
# run's losses (1e-5 relative) and ends with its weights (1e-5 relative
# norm); and SIGTERM to rank 5 alone stops every rank after the same
# step with a checkpoint and exit 0, from which --resume latest goes on
# bitwise.  And weights saved past --shard-size are the same shards from a
# two-stage interleaved run as from one rank.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
command -v pgrep >/dev/null 2>&1 || skip "no pgrep"
PY=$PY3
make_shard "$WORK/data.bin"
C="--data $WORK/data.bin --micro-batch 2 --seq-len 16 --threads 1 --lr 3e-3 --warmup 2"
L222="--dp 2 --tp 2 --pp 2 --micro-batches 2"
losses() { cat "$@" | sed 's/"tokens_per_s".*//'; }
run() { "$WRAP" "$@" > "$WORK/out" 2>&1 || { tail -5 "$WORK/out" >&2; fail "$*: failed"; }; }

# 1. The same layout: bitwise.
run 8 "$TRAIN" $C $L222 --zero 1 --steps 6 --save "$WORK/a" --save-every 3 --metrics "$WORK/full.jsonl" \
    --save-weights "$WORK/full.st"
[ "$(ls "$WORK/a/step_00000003" | wc -l)" -eq 11 ] || fail "step 3 should hold 8 shard files, config.json, manifest and DONE"
run 8 "$TRAIN" $C $L222 --zero 1 --steps 6 --resume "$WORK/a/step_00000003" --metrics "$WORK/r.jsonl" \
    --save-weights "$WORK/r.st"
[ "$(losses "$WORK/r.jsonl")" = "$(tail -3 "$WORK/full.jsonl" | sed 's/"tokens_per_s".*//')" ] ||
    fail "resumed losses differ"
cmp "$WORK/full.st" "$WORK/r.st" || fail "resumed weights differ"
echo "ok: (2,2,2) ZeRO-1 resumed at step 3, bitwise equal"

# 2. Resharding: the unbroken run, then the chain of layouts (a constant
# learning rate after the warmup: each run of the chain has its own --steps).
C="$C --lr-schedule constant"
run 8 "$TRAIN" $C $L222 --zero 1 --steps 8 --metrics "$WORK/ref.jsonl" --save-weights "$WORK/ref.st"
run 8 "$TRAIN" $C $L222 --zero 1 --steps 2 --save "$WORK/c1"
run 8 "$TRAIN" $C --tp 4 --pp 2 --micro-batches 4 --steps 4 --resume latest --save "$WORK/c1" --metrics "$WORK/chain.jsonl"
grep -q "dp 1 tp 4 pp 2" "$WORK/out" || fail "the second run is not (1,4,2)"
"$TRAIN" $C --micro-batches 4 --steps 6 --resume latest --save "$WORK/c1" --metrics "$WORK/chain.jsonl" \
    > "$WORK/out" 2>&1 || { tail -5 "$WORK/out"; fail "(1,1,1) from (1,4,2) failed"; }
run 8 "$TRAIN" $C $L222 --steps 8 --resume latest --save "$WORK/c1" --metrics "$WORK/chain.jsonl" \
    --save-weights "$WORK/chain.st"
"$PY" - "$WORK/ref.jsonl" "$WORK/chain.jsonl" "$WORK/ref.st" "$WORK/chain.st" <<'PYEOF' || fail "resharded run differs"
import json, struct, sys
import numpy as np
ref = [json.loads(l) for l in open(sys.argv[1])][2:]
got = [json.loads(l) for l in open(sys.argv[2])]
assert [g["step"] for g in got] == list(range(2, 8)), [g["step"] for g in got]
worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ref, got))
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype="<f4")
            for k, v in hdr.items() if k != "__metadata__"}
R, G = tensors(sys.argv[3]), tensors(sys.argv[4])
assert sorted(R) == sorted(G)
d = np.concatenate([G[k] - R[k] for k in sorted(R)])
pw = float(np.linalg.norm(d) / np.linalg.norm(np.concatenate([R[k] for k in sorted(R)])))
print("resharded (2,2,2) z1 -> (1,4,2) -> (1,1,1) -> (2,2,2): losses %.6f .. %.6f, worst relative difference %.2e;"
      " weights %.2e" % (got[0]["loss"], got[-1]["loss"], worst, pw))
assert worst <= 1e-5 and pw <= 1e-5
PYEOF

# 3. SIGTERM to rank 5 alone: every rank stops after the same step.
K="$C $L222 --lr-schedule constant"
marker=$WORK/s.jsonl
MERAK_MPI_TIMEOUT=120 "$WRAP" 8 "$TRAIN" $K --steps 1000000 --save "$WORK/s" --metrics "$marker" \
    > "$WORK/out" 2> "$WORK/err" &
job=$!
wait_lines "$marker" 5 $job
victim=$(rank_pid "$marker" 5 $job) || exit 1
kill -TERM "$victim"
set +e; wait $job; rc=$?; set -e
[ "$rc" -eq 0 ] || { cat "$WORK/err"; fail "SIGTERM to rank 5: the job exited $rc"; }
stop=$(stopped_at 15 "$WORK/s")
n=$((stop + 2))
run 8 "$TRAIN" $K --steps $n --save "$WORK/s" --resume latest --metrics "$marker"
run 8 "$TRAIN" $K --steps $n --metrics "$WORK/u.jsonl"
[ "$(losses "$marker")" = "$(losses "$WORK/u.jsonl")" ] || fail "stopped at $stop and resumed: losses differ"
echo "ok: SIGTERM to rank 5 stopped all 8 ranks after step $stop, exit 0; resumed to $n bitwise"

# 4. A shard truncated under the 8-rank run: every rank stops before the
# same step, rank 0 names the shard in one line (exit 1), and the
# checkpoint of the last good step is written by all of them.
cp "$WORK/data.bin" "$WORK/moving.bin"
marker=$WORK/mv.jsonl
MERAK_MPI_TIMEOUT=120 "$WRAP" 8 "$TRAIN" --data "$WORK/moving.bin" --micro-batch 2 --seq-len 16 --threads 1 \
    $L222 --lr-schedule constant --steps 1000000 --save "$WORK/mv" --metrics "$marker" > "$WORK/out" 2> "$WORK/err" &
job=$!
wait_lines "$marker" 3 $job
truncate -s 2000 "$WORK/moving.bin"
set +e; wait $job; rc=$?; set -e
at=$(sed -n 's/^merak-train: step \([0-9]*\): .*moving.bin: the shard changed while training.*; the checkpoint of step \1, the last good one, is in .*mv$/\1/p' "$WORK/err")
[ "$rc" -ne 0 ] && [ -n "$at" ] && [ "$(grep -c '^merak-train:' "$WORK/err")" -eq 1 ] &&
    [ "$(ls "$(printf '%s/mv/step_%08d' "$WORK" "$at")" | wc -l)" -eq 11 ] ||
    { cat "$WORK/err" >&2; fail "shard truncated under 8 ranks: exit $rc"; }
echo "ok: shard truncated under 8 ranks: all stopped before step $at, one line, its checkpoint written by all"

# 4. Weights past --shard-size are the same files from every layout: a
# two-stage interleaved run gathers its parameters in another order (chunks
# 0 and 2 first), but the shards hold them in the model's, the order the
# preflight planned their names in.
mkdir "$WORK/s1" "$WORK/s2"
S="--model tiny-llama --steps 0 --shard-size 200KB --save-weights"
"$TRAIN" $C $S "$WORK/s1/model.safetensors" > /dev/null || fail "the one-rank sharded save failed"
run 2 "$TRAIN" $C --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2 $S "$WORK/s2/model.safetensors"
for f in model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors \
         model.safetensors.index.json; do
    cmp -s "$WORK/s1/$f" "$WORK/s2/$f" || fail "$f of a (1,1,2) interleaved run differs from one rank's"
done
echo "ok: the shards and index of a (1,1,2) interleaved run are one rank's, byte for byte"
