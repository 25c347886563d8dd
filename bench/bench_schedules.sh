#!/bin/sh
# bench_schedules.sh [BUILDDIR] [PP] - each pipeline schedule run for real
# next to the simulator's prediction from its own measured costs.
#
# demo-gpt2 (C 192, 4 layers) on PP ranks (default 2; one core per rank is
# what makes the numbers mean something), one thread each, B=4, T=128,
# M=4*PP micro-batches, 3 steps traced with merak-train --trace.  For the
# last step merak-trace --simulate takes each stage's mean forward,
# backward (input and weight parts) and recompute times from the trace,
# runs the same schedule's instruction lists through the simulator with
# them (transfers free), and compares the simulated pipeline time (first
# forward to last backward) with the measured one: the ratio is
# measured/simulated, 1.00 when the pipeline runs as the schedule says.
# Prints one row per schedule: step ms, pipeline ms measured, simulated,
# ratio.
set -eu
BUILDDIR=${1:-.}
PP=${2:-2}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/merak-sched.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
find "$SRC/runtime" "$SRC/kernels/cpu" -name '*.[ch]' | sort | xargs cat > "$TMP/c.txt"
"$BUILDDIR/merak-shard" -o "$TMP/d.bin" "$TMP/c.txt" > /dev/null
M=$((4 * PP))
printf '%-22s %9s %13s %13s %9s\n' schedule "step ms" "pipeline ms" "simulated ms" ratio
for run in gpipe:none 1f1b:none 1f1b:full scp:full zb-h1:none interleaved:none; do
    s=${run%:*} rc=${run#*:}
    mpirun -np "$PP" --bind-to none "$BUILDDIR/merak-train" --model demo-gpt2 --data "$TMP/d.bin" \
        --micro-batch 4 --seq-len 128 --micro-batches $M --steps 3 --threads 1 --pp "$PP" \
        --schedule "$s" --recompute "$rc" --trace "$TMP/t.json" > /dev/null 2>&1
    "$BUILDDIR/merak-trace" "$TMP/t.json" --simulate --json > "$TMP/s.json"
    python3 - "$TMP/s.json" "$s, recompute $rc" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
print("%-22s %9.1f %13.1f %13.1f %9.3f" % (sys.argv[2], j["step_ms"], j["pipeline_ms"], j["simulated_ms"],
                                            j["pipeline_ms"] / j["simulated_ms"]))
PYEOF
done
