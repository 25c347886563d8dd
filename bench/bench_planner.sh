#!/bin/sh
# bench_planner.sh [BUILDDIR] [NP] - the planner's predicted step against
# the measured one, on this machine, from a profile calibrated here.
#
# merak-plan --calibrate times every op of demo-gpt2 (micro-batch 4 x 128
# tokens, one thread) and writes a device profile.  Then merak-train runs
# demo-gpt2 on NP pipeline stages (default 2; one core per rank) with M in
# {2, 4, 8} micro-batches and the autopipe partition on that profile, 7
# steps each; the banner's predicted 1F1B pipeline time is set against the
# measured step (mean of steps 2 to 6, from --metrics), whose optimizer
# step and loss/norm reduction the model leaves out.  The reference is
# the measurement in the same script: the ratio measured / predicted.
set -eu
BUILDDIR=${1:-.}
NP=${2:-2}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/merak-plan.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
: "${MERAK_DEVICES:=$SRC/data/devices.json}"
export MERAK_DEVICES
find "$SRC/runtime" "$SRC/kernels/cpu" -name '*.[ch]' | sort | xargs cat > "$TMP/c.txt"
"$BUILDDIR/merak-shard" -o "$TMP/d.bin" "$TMP/c.txt" > /dev/null
"$BUILDDIR/merak-plan" --calibrate "$TMP/here.json" --model demo-gpt2 --micro-batch 4 --seq-len 128 --threads 1 \
    --repeat 5 > "$TMP/calib.txt"
for M in 2 4 8; do
    [ "$M" -ge "$NP" ] || continue
    rm -f "$TMP/m$M.jsonl"
    mpirun -np "$NP" --bind-to core "$BUILDDIR/merak-train" --model demo-gpt2 --data "$TMP/d.bin" \
        --micro-batch 4 --seq-len 128 --micro-batches $M --steps 7 --threads 1 --pp "$NP" \
        --partition autopipe --device-profile "$TMP/here.json" --metrics "$TMP/m$M.jsonl" > "$TMP/o$M.txt" 2>&1
done
python3 - "$TMP" "$NP" <<'PYEOF'
import json, re, sys
tmp, np_ = sys.argv[1:]
print(open(f"{tmp}/calib.txt").read().splitlines()[-2])
print(f"demo-gpt2, pp {np_}, micro-batch 4 x 128 tokens, autopipe on the calibrated profile; steps 2-6")
print("%-4s %-22s %14s %13s %20s" % ("M", "stage first blocks", "predicted ms", "measured ms", "measured/predicted"))
for m in (2, 4, 8):
    try:
        out = open(f"{tmp}/o{m}.txt").read()
    except OSError:
        continue
    p = re.search(r"partition autopipe: stages start at blocks (\S+) \| predicted 1F1B pipeline ([0-9.]+) ms", out)
    steps = [json.loads(l) for l in open(f"{tmp}/m{m}.jsonl")][2:7]
    meas = sum(s["step_ms"] for s in steps) / len(steps)
    pred = float(p.group(2))
    print("%-4d %-22s %14.1f %13.1f %20.2f" % (m, p.group(1), pred, meas, meas / pred))
PYEOF
