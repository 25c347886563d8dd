#!/bin/sh
# bench_traffic.sh [BUILDDIR] - bytes each process group moves per step, over
# the analytic volume.
#
# tiny-gpt2 (V 256, positions 256, C 64, 2 layers, 4 heads, MLP 256) trains
# 3 steps with micro-batch B=2, T=16, M=4 in several layouts under mpirun;
# rank 0 (dp 0, tp 0, first stage) reports per step the bytes its tp, pp, dp
# and tied groups moved (metrics "bytes": a send counts its size, a
# collective the size of its buffer, as MPI's volume would).  The analytic
# volume is worked out here from the model's numbers alone:
#   tp   per micro-batch, Megatron's f and g: one (B,T,C) sum after the
#        embedding and after each attention and MLP (forward), one for the
#        input of each attention, MLP and the LM head (backward); plus, on
#        the last stage, the vocabulary-parallel cross-entropy's statistics
#        (2 floats per row per tp rank);
#   pp   the first stage sends one (B,T,C) activation per micro-batch;
#   dp   one all-reduce of the rank's parameter floats (ZeRO-1: a
#        reduce-scatter and an all-gather of them, twice the bytes);
#   tied the first stage's share of the tied embedding, once.
# Prints one line per layout and group: measured, analytic, ratio.
set -eu
BUILDDIR=${1:-.}
. "$(dirname "$0")/lib.sh"
bench_setup bench_traffic "$BUILDDIR" merak-train merak-shard
TRAIN=$BUILDDIR/merak-train
bench_shard "$TMP/d.bin"
for layout in "2 1 1 0" "2 1 1 1" "1 2 1 0" "1 4 1 0" "2 2 1 0" "1 1 2 0" "2 2 2 0"; do
    set -- $layout
    np=$(($1 * $2 * $3))
    quiet mpirun -np $np --oversubscribe --bind-to none "$TRAIN" --model tiny-gpt2 --data "$TMP/d.bin" \
        --micro-batch 2 --seq-len 16 --micro-batches 4 --steps 3 --threads 1 --dp $1 --tp $2 --pp $3 \
        --zero $4 --metrics "$TMP/m.$1$2$3$4.jsonl"
done
python3 - "$TMP" <<'PYEOF'
import json, sys
tmp = sys.argv[1]
V, P, C, L, F = 256, 256, 64, 2, 256
B, T, M = 2, 16, 4
N = B * T
act = N * C * 4
def params(tp):  # floats of one tp shard of the whole model
    layer = 4 * C + (3 * C * C + 3 * C) // tp + C * C // tp + C + (C * F + F) // tp + F * C // tp + C
    return V * C // tp + P * C + L * layer + 2 * C
for dp, tp, pp, zero in [(2,1,1,0), (2,1,1,1), (1,2,1,0), (1,4,1,0), (2,2,1,0), (1,1,2,0), (2,2,2,0)]:
    rows = [json.loads(l) for l in open(f"{tmp}/m.{dp}{tp}{pp}{zero}.jsonl")]
    got = rows[-1]["bytes"]
    want = {}
    if pp == 1:
        if tp > 1:
            want["tp"] = M * ((1 + 2 * L) + (2 * L + 1)) * act + M * 2 * tp * N * 4
        if dp > 1:
            want["dp"] = params(tp) * 4 * (2 if zero else 1)
    else:
        want["pp"] = M * act
        if tp == 1 and dp == 1:
            want["tied"] = V * C * 4
    name = f"(dp,tp,pp)=({dp},{tp},{pp}){' zero=1' if zero else ''}"
    for g in ("tp", "pp", "dp", "tied"):
        if got[g] == 0 and g not in want:
            continue
        w = want.get(g)
        ratio = f"{got[g] / w:.2f}" if w else "-"
        print(f"bench_traffic {name:26s} group={g:4s} bytes/step={got[g]:>9.0f} analytic={w if w else '-':>9} ratio={ratio}")
PYEOF
