#!/bin/sh
# bench_p2p.sh [BUILDDIR] - pipeline point-to-point over UCX's tag API
# (--p2p ucx) against MPI's (--p2p mpi, the reference), same process layout.
#
# demo-gpt2 (C 192, 4 layers) trains B=4, T=64, M=8, 12 steps (the first 2
# dropped), one thread per rank, in two layouts:
#   (1,1,2) on 2 ranks: one rank per core;
#   (2,2,2) on 8 ranks: four ranks per core, where a waiter that spun
#           without yielding would take the core from the peer it waits for.
# Prints the median step time of each backend and the ratio ucx/mpi, and
# checks the two runs' losses are identical (same arithmetic, other wire).
set -eu
BUILDDIR=${1:-.}
TRAIN=$BUILDDIR/merak-train
. "$(dirname "$0")/lib.sh"
bench_setup bench_p2p "$BUILDDIR" merak-train merak-shard
bench_shard "$TMP/d.bin"
for layout in "1 1 2" "2 2 2"; do
    set -- $layout
    np=$(($1 * $2 * $3))
    for p2p in mpi ucx; do
        quiet mpirun -np $np --oversubscribe --bind-to none "$TRAIN" --model demo-gpt2 --data "$TMP/d.bin" \
            --micro-batch 4 --seq-len 64 --micro-batches 8 --steps 12 --threads 1 \
            --dp $1 --tp $2 --pp $3 --p2p $p2p --metrics "$TMP/$1$2$3.$p2p.jsonl"
    done
done
python3 - "$TMP" <<'PYEOF'
import json, statistics, sys
tmp = sys.argv[1]
for lay in ("112", "222"):
    rows = {p: [json.loads(l) for l in open(f"{tmp}/{lay}.{p}.jsonl")] for p in ("mpi", "ucx")}
    same = all(a["loss"] == b["loss"] for a, b in zip(rows["mpi"], rows["ucx"]))
    ms = {p: statistics.median(r["step_ms"] for r in rows[p][2:]) for p in rows}
    print(f"bench_p2p layout=({lay[0]},{lay[1]},{lay[2]}) ranks={int(lay[0])*int(lay[1])*int(lay[2])} "
          f"mpi_step_ms={ms['mpi']:.1f} ucx_step_ms={ms['ucx']:.1f} ratio ucx/mpi={ms['ucx'] / ms['mpi']:.3f} "
          f"losses_identical={same}")
PYEOF
