#!/bin/sh
# bench_tp_overlap.sh [BUILDDIR] [TP] [B] - sub-pipelined tensor parallelism
# (merak-train --tp-overlap K) against the blocking all-reduces of K = 1,
# in the same script.
#
# demo-gpt2 (C 192, 4 layers) on TP ranks (default 2; one core per rank),
# one thread each, micro-batches of B sequences (default 8) of 128 tokens,
# 2 micro-batches per step, 7 steps traced; steps 2 to 6 are averaged.
# merak-trace reports per rank the time its forwards and backwards spent
# in tensor-parallel all-reduces (blocking: the whole call; sub-pipelined:
# starting them and waiting for them).  Per K the script prints the step
# time, compute and all-reduce time (mean over ranks), the step time
# against K = 1 and the share of K = 1's all-reduce time that K hides:
# 1 - allreduce(K) / allreduce(1).
set -eu
BUILDDIR=${1:-.}
TP=${2:-2}
B=${3:-8}
. "$(dirname "$0")/lib.sh"
bench_setup bench_tp_overlap "$BUILDDIR" merak-train merak-shard merak-trace
bench_shard "$TMP/d.bin"
for K in 1 2 4; do
    [ $((B % K)) -eq 0 ] || continue
    quiet mpirun -np "$TP" --bind-to none "$BUILDDIR/merak-train" --model demo-gpt2 --data "$TMP/d.bin" \
        --micro-batch "$B" --seq-len 128 --micro-batches 2 --steps 7 --threads 1 --tp "$TP" \
        --tp-overlap $K --trace "$TMP/t$K.json"
    for step in 2 3 4 5 6; do
        "$BUILDDIR/merak-trace" "$TMP/t$K.json" --step $step --json
    done > "$TMP/s$K.jsonl"
done
python3 - "$TMP" "$TP" "$B" <<'PYEOF'
import json, os, sys
tmp, tp, b = sys.argv[1:]
print(f"demo-gpt2, tp {tp}, micro-batch {b} x 128 tokens, 2 micro-batches per step; mean of steps 2-6")
print("%-4s %9s %11s %17s %14s %14s" % ("K", "step ms", "compute ms", "tp all-reduce ms", "step vs K=1", "hidden of K=1"))
base = None
for k in (1, 2, 4):
    path = os.path.join(tmp, f"s{k}.jsonl")
    if not os.path.exists(path):
        continue
    steps = [json.loads(l) for l in open(path)]
    step = sum(s["step_ms"] for s in steps) / len(steps)
    comp = sum(r["compute_ms"] for s in steps for r in s["ranks"]) / sum(len(s["ranks"]) for s in steps)
    ar = sum(r["tp_allreduce_ms"] for s in steps for r in s["ranks"]) / sum(len(s["ranks"]) for s in steps)
    if base is None:
        base = (step, ar)
    print("%-4d %9.1f %11.1f %17.2f %14.3f %13.0f%%" % (k, step, comp, ar, step / base[0], 100 * (1 - ar / base[1])))
PYEOF
