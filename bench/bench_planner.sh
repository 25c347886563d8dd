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
#
# Then whole layouts of NP ranks (pp NP, dp NP, tp NP; M = 4 per replica):
# merak-plan --gpus NP --gpu (the calibrated profile) predicts each one's
# step (pipeline, reductions, optimizer) and each stage's memory, set
# against merak-train's measured step and its allocated memory.
# Last, the planner's own cost at scale: GPT-3 175B on 1024 H100s as
# dp 8 x tp 8 x pp 16 (time and peak RSS, also of --version: the libraries'
# share), and --auto over every layout of the 1024 GPUs.
set -eu
BUILDDIR=${1:-.}
NP=${2:-2}
. "$(dirname "$0")/lib.sh"
bench_setup bench_planner "$BUILDDIR" merak-train merak-shard merak-plan
bench_shard "$TMP/d.bin"
"$BUILDDIR/merak-plan" --calibrate "$TMP/here.json" --model demo-gpt2 --micro-batch 4 --seq-len 128 --threads 1 \
    --repeat 5 > "$TMP/calib.txt"
for M in 2 4 8; do
    [ "$M" -ge "$NP" ] || continue
    rm -f "$TMP/m$M.jsonl"
    mpirun -np "$NP" --bind-to core "$BUILDDIR/merak-train" --model demo-gpt2 --data "$TMP/d.bin" \
        --micro-batch 4 --seq-len 128 --micro-batches $M --steps 7 --threads 1 --pp "$NP" \
        --partition autopipe --device-profile "$TMP/here.json" --metrics "$TMP/m$M.jsonl" > "$TMP/o$M.txt" 2>&1
done
# whole layouts: merak-plan's prediction, merak-train's measurement
for name in pp dp tp; do
    dp=1
    [ "$name" = dp ] && dp=$NP
    mpirun -np "$NP" --bind-to core "$BUILDDIR/merak-train" --model demo-gpt2 --data "$TMP/d.bin" \
        --micro-batch 4 --seq-len 128 --micro-batches 4 --steps 7 --threads 1 "--$name" "$NP" --partition autopipe \
        --device-profile "$TMP/here.json" --metrics "$TMP/L$name.jsonl" > "$TMP/L$name.txt" 2>&1
    "$BUILDDIR/merak-plan" --model demo-gpt2 --gpus "$NP" --gpus-per-node "$NP" --gpu "$TMP/here.json" \
        --micro-batch 4 --seq-len 128 --global-batch $((16 * dp)) "--$name" "$NP" --json > "$TMP/L$name.json"
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
print(f"\nwhole layouts of {np_} ranks, M = 4 per replica: merak-plan --gpus {np_} --gpu (calibrated) against merak-train")
print("%-8s %12s %12s %9s   %-28s %-28s" % ("layout", "predicted ms", "measured ms", "ratio", "memory predicted MiB",
                                            "memory allocated MiB"))
for name in ("pp", "dp", "tp"):
    plan = json.load(open(f"{tmp}/L{name}.json"))
    out = open(f"{tmp}/L{name}.txt").read()
    steps = [json.loads(l) for l in open(f"{tmp}/L{name}.jsonl")][2:7]
    meas = sum(s["step_ms"] for s in steps) / len(steps)
    pred = 1e3 * plan["step_s"]
    alloc = re.findall(r"stage \d+ ([0-9.]+) MiB", re.search(r"^memory \(allocated\):(.*)$", out, re.M).group(1))
    mem = " ".join("%.1f" % (s["memory"]["total"] / 2**20) for s in plan["stages"])
    print("%-8s %12.1f %12.1f %9.2f   %-28s %-28s" % (f"{name} {np_}", pred, meas, meas / pred, mem,
                                                    " ".join("%.1f" % float(a) for a in alloc)))
PYEOF
# the planner's own cost at scale
L="--model gpt3-175b --gpus 1024 --gpus-per-node 8 --dp 8 --tp 8 --pp 16 --gpu h100-80g --recompute full"
/usr/bin/time -f "%e %M" "$BUILDDIR/merak-plan" $L > /dev/null 2> "$TMP/t1"
/usr/bin/time -f "%e %M" "$BUILDDIR/merak-plan" --version > /dev/null 2> "$TMP/t0"
/usr/bin/time -f "%e %M" "$BUILDDIR/merak-plan" --model gpt3-175b --gpus 1024 --gpu h100-80g --global-batch 1536 \
    --auto > "$TMP/auto.txt" 2> "$TMP/t2"
read -r s1 m1 < "$TMP/t1"; read -r s0 m0 < "$TMP/t0"; read -r s2 m2 < "$TMP/t2"
echo
echo "gpt3-175b, 1024 x h100-80g, dp 8 tp 8 pp 16: $s1 s, peak RSS $((m1 / 1024)) MiB" \
    "(--version alone: $((m0 / 1024)) MiB, the planner's own $(((m1 - m0) / 1024)) MiB)"
echo "gpt3-175b, 1024 x h100-80g, --auto: $s2 s, peak RSS $((m2 / 1024)) MiB; $(head -n 1 "$TMP/auto.txt")"
sed -n 2p "$TMP/auto.txt"
