#!/bin/sh
# bench_overlap.sh [BUILDDIR] - how much of the data-parallel gradient
# all-reduce runs while the backward is still computing.
#
# demo-gpt2 (C 192, 4 layers, 2.9M parameters) trains with dp=2 on 2 ranks,
# one thread each, B=8, T=128, M=2, 10 steps (the first 2 dropped), twice:
#   buckets   --bucket-mb 1: 1 MiB buckets, each all-reduced as soon as the
#             last backward has finished every gradient in it;
#   flush     --bucket-mb 1000: one bucket, launched after the backward
#             (the reduction after the flush that Merak overlaps away).
# Reports, as medians over steps: dp_overlap (fraction of gradient bytes
# whose all-reduce had finished before the backward ended), dp_wait_ms (time
# the step waited for the reduction after the backward) and step_ms, and the
# ratio of the step times.
set -eu
BUILDDIR=${1:-.}
TRAIN=$BUILDDIR/merak-train
. "$(dirname "$0")/lib.sh"
bench_setup bench_overlap "$BUILDDIR" merak-train merak-shard
bench_shard "$TMP/d.bin"
for mode in buckets flush; do
    mb=1; [ $mode = flush ] && mb=1000
    quiet mpirun -np 2 --bind-to none "$TRAIN" --model demo-gpt2 --data "$TMP/d.bin" --micro-batch 8 \
        --seq-len 128 --micro-batches 2 --steps 10 --threads 1 --dp 2 --bucket-mb $mb \
        --metrics "$TMP/$mode.jsonl"
done
python3 - "$TMP" <<'PYEOF'
import json, statistics, sys
tmp = sys.argv[1]
res = {}
for mode in ("buckets", "flush"):
    rows = [json.loads(l) for l in open(f"{tmp}/{mode}.jsonl")][2:]
    res[mode] = {k: statistics.median(r[k] for r in rows) for k in ("dp_overlap", "dp_wait_ms", "step_ms")}
    r = res[mode]
    print(f"bench_overlap mode={mode:7s} dp_overlap={r['dp_overlap']:.2f} dp_wait_ms={r['dp_wait_ms']:.2f} step_ms={r['step_ms']:.1f}")
print(f"bench_overlap step_ms ratio buckets/flush={res['buckets']['step_ms'] / res['flush']['step_ms']:.3f} "
      f"wait_ms ratio={res['buckets']['dp_wait_ms'] / max(res['flush']['dp_wait_ms'], 1e-9):.3f}")
PYEOF
