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
# ratio.  SCHEDULES (environment) lists the runs, SCHEDULE:RECOMPUTE each
# (default: all six rows of bench/RESULTS.md section 9).
set -eu
BUILDDIR=${1:-.}
PP=${2:-2}
SCHEDULES=${SCHEDULES:-"gpipe:none 1f1b:none 1f1b:full scp:full zb-h1:none interleaved:none"}
. "$(dirname "$0")/lib.sh"
bench_setup bench_schedules "$BUILDDIR" merak-train merak-shard merak-trace
bench_shard "$TMP/d.bin"
M=$((4 * PP))
printf '%-22s %9s %13s %13s %9s\n' schedule "step ms" "pipeline ms" "simulated ms" ratio
for run in $SCHEDULES; do
    s=${run%:*} rc=${run#*:}
    quiet mpirun -np "$PP" --bind-to none "$BUILDDIR/merak-train" --model demo-gpt2 --data "$TMP/d.bin" \
        --micro-batch 4 --seq-len 128 --micro-batches $M --steps 3 --threads 1 --pp "$PP" \
        --schedule "$s" --recompute "$rc" --trace "$TMP/t.json"
    "$BUILDDIR/merak-trace" "$TMP/t.json" --simulate --json > "$TMP/s.json"
    python3 - "$TMP/s.json" "$s, recompute $rc" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
print("%-22s %9.1f %13.1f %13.1f %9.3f" % (sys.argv[2], j["step_ms"], j["pipeline_ms"], j["simulated_ms"],
                                            j["pipeline_ms"] / j["simulated_ms"]))
PYEOF
done
