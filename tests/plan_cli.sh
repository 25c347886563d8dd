#!/bin/sh
# merak-plan --simulate: known makespans at unit costs, the schedule
# comparisons the engine promises (scp beats 1f1b with recomputation,
# zb-h1 and interleaved (V = 2) beat 1f1b without, for P in {4, 8, 16} and
# M in {P, 2P, 4P}), costs that change the answer, a valid SVG picture, and
# bad input.
. "$(dirname "$0")/lib.sh"
PLAN=$MERAK_BUILDDIR/merak-plan
PY=$PY3

# field JSON KEY: one value of the answer
field() { "$PY" -c 'import json,sys; v=json.loads(sys.argv[1])[sys.argv[2]]; print(v)' "$1" "$2"; }

j=$("$PLAN" --simulate --schedule 1f1b --stages 4 --micro-batches 8 --json)
[ "$(field "$j" makespan)" = 33.0 ] || fail "1f1b P=4 M=8: makespan $(field "$j" makespan), expected (M+P-1)*3 = 33"
[ "$(field "$j" peak_activations)" = "[4, 3, 2, 1]" ] || fail "1f1b peaks: $(field "$j" peak_activations)"
"$PY" -c 'import json,sys; b=json.loads(sys.argv[1])["bubble"]; sys.exit(abs(b - 9/33) > 1e-9)' "$j" ||
    fail "1f1b P=4 M=8: bubble $(field "$j" bubble), expected 9/33"
echo "ok: 1f1b P=4 M=8: $j"

j=$("$PLAN" --simulate --schedule 1f1b --stages 4 --micro-batches 8 --recompute full --json)
[ "$(field "$j" makespan)" = 44.0 ] && [ "$(field "$j" peak_activations)" = "[1, 1, 1, 1]" ] ||
    fail "1f1b P=4 M=8 with recompute: $j, expected makespan (M+P-1)*4 = 44 and one micro-batch held"
j=$("$PLAN" --simulate --schedule 1f1b --stages 4 --micro-batches 8 --comm 0.5 --json)
# every message now takes 0.5: at least the fill's and the drain's 2*(P-1)
# hops more than the 33 without delays
"$PY" -c 'import json,sys; sys.exit(json.loads(sys.argv[1])["makespan"] < 36)' "$j" ||
    fail "1f1b with --comm 0.5: $j, expected 33 + 2*(P-1)*0.5 = 36 or more"
echo "ok: recomputation and link delays change the answer"

# interleaved: (M + (P-1)/V) * 3; stage 0 holds (V-1)P + 2(P-1) + 1 chunks
j=$("$PLAN" --simulate --schedule interleaved --stages 4 --micro-batches 8 --json)
[ "$(field "$j" makespan)" = 28.5 ] && [ "$(field "$j" peak_activations)" = "[5.5, 4.5, 3.5, 2.5]" ] ||
    fail "interleaved P=4 M=8 V=2: $j, expected makespan (8 + 3/2) * 3 = 28.5, peaks 11/2 9/2 7/2 5/2"
j=$("$PLAN" --simulate --schedule interleaved --virtual-stages 4 --stages 4 --micro-batches 8 --json)
[ "$(field "$j" makespan)" = 26.25 ] || fail "interleaved P=4 M=8 V=4: $j, expected (8 + 3/4) * 3 = 26.25"
echo "ok: interleaved V=2 and V=4: $j"

for P in 4 8 16; do
    for M in $P $((2 * P)) $((4 * P)); do
        for run in "1f1b full" "scp full" "1f1b none" "zb-h1 none" "interleaved none"; do
            set -- $run
            eval "t_$(echo "$1_$2" | tr -c 'a-z0-9\n' '_')=$(field "$("$PLAN" --simulate --schedule $1 --stages $P \
                --micro-batches $M --recompute $2 --json)" makespan)"
        done
        "$PY" -c 'import sys; a, b, c, d, e = map(float, sys.argv[1:]); sys.exit(not (b < a and d < c and e < c))' \
            "$t_1f1b_full" "$t_scp_full" "$t_1f1b_none" "$t_zb_h1_none" "$t_interleaved_none" ||
            fail "P=$P M=$M: 1f1b+recompute $t_1f1b_full, scp $t_scp_full, 1f1b $t_1f1b_none, zb-h1 $t_zb_h1_none," \
                "interleaved $t_interleaved_none"
        echo "ok: P=$P M=$M: scp $t_scp_full < 1f1b+recompute $t_1f1b_full;" \
            "zb-h1 $t_zb_h1_none and interleaved $t_interleaved_none < 1f1b $t_1f1b_none"
    done
done

"$PLAN" --simulate --schedule zb-h1 --stages 4 --micro-batches 8 --svg "$WORK/zb.svg" > "$WORK/out" ||
    fail "--svg failed"
"$PY" - "$WORK/zb.svg" <<'PYEOF' || fail "the SVG is not what it should be"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
titles = [t.text for t in root.iter(ns + "title")]
kinds = {t.split()[0] for t in titles}
# 4 stages x 8 micro-batches x (FWD, BWD_INPUT, BWD_WEIGHT)
assert len(titles) == 96 and kinds == {"FWD", "BWD_INPUT", "BWD_WEIGHT"}, (len(titles), kinds)
print("ok: the SVG parses as XML and draws", len(titles), "instructions of", sorted(kinds))
PYEOF

# --list-models: every preset's parameters, counted on its graph, are the
# published ones: exactly Hugging Face's num_parameters() for GPT-2 and
# LLaMA, the papers' rounded figures for Megatron's and GPT-3's sizes
# (gpt3-13b uses d_model 5120, 40 heads of 128, where the GPT-3 table's
# 13.0B comes from a printed 5140).
"$PLAN" --list-models --json > "$WORK/models.json" || fail "merak-plan --list-models --json failed"
"$PY" - "$WORK/models.json" <<'PYEOF' || fail "a preset's parameter count is not the published one"
import json, sys
got = {m["name"]: m["parameters"] for m in json.load(open(sys.argv[1]))["models"]}
exact = {"gpt2": 124439808, "gpt2-medium": 354823168, "gpt2-large": 774030080, "gpt2-xl": 1557611200,
         "llama2-7b": 6738415616, "llama2-13b": 13015864320, "llama2-70b": 68976648192,
         "llama3-8b": 8030261248, "llama3-70b": 70553706496, "mistral-7b": 7248023552,
         "llama3.1-8b": 8030261248, "qwen2-7b": 7615616512}
rounded = {"megatron-2.5b": (2.5e9, 0.01), "megatron-8.3b": (8.3e9, 0.01), "gpt3-6.7b": (6.7e9, 0.01),
           "gpt3-13b": (13.0e9, 0.015), "gpt3-175b": (175.0e9, 0.01)}
for name, n in exact.items():
    assert got[name] == n, (name, got[name], n)
for name, (n, tol) in rounded.items():
    assert abs(got[name] - n) <= tol * n, (name, got[name], n)
print("ok: --list-models:", len(got), "presets,", len(exact), "exact and", len(rounded), "rounded counts as published")
PYEOF
"$PLAN" --list-models | grep -q '^gpt3-175b .* 174604259328  174.60B$' || fail "--list-models text lacks gpt3-175b"

# expect STATUS PATTERN ARGS...: runs merak-plan, checks both.
expect() {
    want=$1 pattern=$2; shift 2
    expect_exit "$want" "$pattern" "$PLAN" "$@"
}
S="--simulate --stages 4 --micro-batches 8"
expect 2 "'pipedream' is not gpipe, 1f1b, scp, zb-h1 or interleaved" $S --schedule pipedream
expect 2 "scp needs at least as many micro-batches (M) as stages (S): M = 3, S = 4" \
    --simulate --schedule scp --stages 4 --micro-batches 3
expect 2 "zb-h1 needs at least as many micro-batches" --simulate --schedule zb-h1 --stages 8 --micro-batches 2
expect 2 "bwd-weight 3 is more than the backward" $S --schedule zb-h1 --bwd-weight 3
expect 2 "is not none or full" $S --schedule 1f1b --recompute stage-aware
expect 2 "out of range" $S --schedule 1f1b --fwd -1
expect 2 "not a number" $S --schedule 1f1b --comm fast
expect 2 "needs --schedule, --stages and --micro-batches" --simulate --schedule 1f1b
expect 2 "nothing to do" --schedule 1f1b --stages 2 --micro-batches 2
expect 2 "stages does not go with --list-models" --list-models --stages 4
expect 2 "give one of --simulate, --list-models, --partition-costs, --calibrate and --gpus" --list-models --simulate
expect 2 "recompute-cost needs --recompute full" $S --schedule 1f1b --recompute-cost 2
expect 2 "unknown option" $S --schedule 1f1b --virtually
expect 2 "virtual-stages needs --schedule interleaved" $S --schedule 1f1b --virtual-stages 2
expect 2 "interleaved needs 2 to 64 virtual stages per stage (V = 1)" $S --schedule interleaved --virtual-stages 1
expect 2 "interleaved needs at least 2 pipeline stages" --simulate --stages 1 --micro-batches 8 --schedule interleaved
expect 2 "not an integer" $S --schedule interleaved --virtual-stages x
expect 1 "no-such-dir/p.svg" $S --schedule 1f1b --svg "$WORK/no-such-dir/p.svg"
# the documented maxima answer at once: a question larger than the
# simulator takes (2097152 units) is refused before anything is built
expect 2 "1024 stages x 65536 micro-batches = 67108864 units, more than the 2097152" \
    --simulate --schedule 1f1b --stages 1024 --micro-batches 65536
expect 2 "64 stages x 1024 micro-batches x chunks = 4194304 units" --simulate --schedule interleaved \
    --virtual-stages 64 --stages 64 --micro-batches 1024
# autopipe's dynamic programmes grow with blocks^2 x stages: beyond 2^30
# it says so (2048 blocks into 1024 stages took a minute)
python3 -c 'import json; print(json.dumps({"forward": [1] * 2048, "backward": [2] * 2048, "stages": 1024, "micro_batches": 1024}))' \
    > "$WORK/big.json"
expect 2 "autopipe: 2048 blocks into 1024 stages is more than it answers in seconds" --partition-costs "$WORK/big.json"
"$PLAN" --partition-costs "$WORK/big.json" --partition uniform > /dev/null || fail "uniform on 2048 blocks failed"
# --auto at the documented most GPUs, 2^24 (minutes before the ZeRO shares
# and the link search of a plan stopped being O(ranks); well under a
# second now: the timeout only catches a return to that)
out=$(timeout 120 "$PLAN" --model gpt2 --gpus 16777216 --gpus-per-node 8 --auto) || fail "--auto on 2^24 GPUs: exit $?"
echo "$out" | sed -n 2p | python3 -c '
import re, sys
line = sys.stdin.read()
m = re.search(r"dp (\d+) x tp (\d+) x pp (\d+)", line)
assert m and int(m[1]) * int(m[2]) * int(m[3]) == 1 << 24, line
print("ok: --auto on 2^24 GPUs:", line.strip())' || fail "--auto on 2^24 GPUs: $out"

# --partition-costs: eight blocks, the fifth four times the others.  The
# 1F1B model's step for uniform's two blocks per stage is 133 (the heavy
# stage's 15 per micro-batch); AutoPipe gives that block a stage of its
# own and takes 109; custom's answer is the list given.
printf '{"forward": [1, 1, 1, 1, 4, 1, 1, 1], "backward": [2, 2, 2, 2, 8, 2, 2, 2], "stages": 4, "micro_batches": 8}' \
    > "$WORK/chain.json"
j=$("$PLAN" --partition-costs "$WORK/chain.json" --json) || fail "--partition-costs failed"
[ "$(field "$j" starts)" = "[0, 4, 5, 6]" ] && [ "$(field "$j" predicted_step)" = 109.0 ] &&
    [ "$(field "$j" stage_costs)" = "[12.0, 12.0, 3.0, 6.0]" ] || fail "autopipe on the chain: $j"
j=$("$PLAN" --partition-costs "$WORK/chain.json" --partition uniform --json)
[ "$(field "$j" starts)" = "[0, 2, 4, 6]" ] && [ "$(field "$j" predicted_step)" = 133.0 ] || fail "uniform: $j"
j=$("$PLAN" --partition-costs "$WORK/chain.json" --partition custom:0,3,4,5 --json)
[ "$(field "$j" starts)" = "[0, 3, 4, 5]" ] || fail "custom: $j"
"$PLAN" --partition-costs "$WORK/chain.json" | grep -q "^autopipe: 8 blocks into 4 stages, 8 micro-batches: predicted 1F1B step 109$" ||
    fail "--partition-costs text answer"
# Communication counts: a slow cut after block 4 moves the heavy stage's
# boundary away from it.
printf '{"forward": [1, 1, 1, 1, 4, 1, 1, 1], "backward": [2, 2, 2, 2, 8, 2, 2, 2], "stages": 4, "micro_batches": 8,
  "comm": [0, 0, 0, 0, 9, 0, 0], "parameters": [1, 1, 1, 1, 1, 1, 1, 1]}' > "$WORK/chain-comm.json"
j=$("$PLAN" --partition-costs "$WORK/chain-comm.json" --json)
"$PY" -c 'import json,sys; sys.exit(5 in json.loads(sys.argv[1])["starts"])' "$j" ||
    fail "autopipe cuts at the slow link: $j"
echo "ok: --partition-costs: autopipe 109 < uniform 133; a slow link is avoided: $j"
expect 2 "partition 'even' is not uniform, parameters, autopipe or custom" --partition-costs "$WORK/chain.json" --partition even
expect 2 "nothing to do" --partition autopipe
expect 2 "stages does not go with --partition-costs" --partition-costs "$WORK/chain.json" --stages 4
expect 2 "starts 2 stages, not 4" --partition-costs "$WORK/chain.json" --partition custom:0,4
expect 1 "the parameters method needs \"parameters\"" --partition-costs "$WORK/chain.json" --partition parameters
bad() { printf '%s' "$2" > "$WORK/bad.json"; expect "$1" "$3" --partition-costs "$WORK/bad.json"; }
bad 1 '{"forward": [1, 2], "backward": [1], "stages": 1, "micro_batches": 1}' '"backward" must be an array of 2 numbers'
bad 1 '{"forward": [1, -2], "backward": [1, 1], "stages": 1, "micro_batches": 1}' '"forward"\[1\] is not a number >= 0'
bad 1 '{"forward": [], "backward": [], "stages": 1, "micro_batches": 1}' '"forward" must be a non-empty array'
bad 1 '{"forward": [1], "backward": [1], "stages": 0, "micro_batches": 1}' '"stages" must be an integer from 1'
bad 1 '{"forward": [1], "backward": [1], "stages": 1}' '"micro_batches" must be an integer from 1'
bad 1 '{"forward": [1], "backward": [1], "stages": 1, "micro_batches": 1, "fwd": 2}' 'unknown key "fwd"'
bad 1 '{"forward": [1, 1], "backward": [1, 1], "stages": 2, "micro_batches": 2, "comm": [1, 1]}' '"comm" must be an array of 1 numbers'
bad 1 '[1, 2]' 'not a JSON object'
bad 1 '{"forward": ' 'bad.json:1:'
bad 2 '{"forward": [1, 1], "backward": [1, 1], "stages": 3, "micro_batches": 3}' '3 stages, but the chain has 2 blocks'
bad 2 '{"forward": [1, 1], "backward": [1, 1], "stages": 2, "micro_batches": 1}' 'needs at least as many micro-batches (M) as stages (S): M = 1, S = 2'
expect 1 "no-such.json" --partition-costs "$WORK/no-such.json"
mkfifo "$WORK/fifo"   # refused, never waited on
expect_exit 1 "fifo: not a regular file" timeout 30 "$PLAN" --partition-costs "$WORK/fifo"

# --calibrate: every op kind of tiny GPT-2 timed here, written as a profile
# merak-train's autopipe reads.
"$PLAN" --calibrate "$WORK/here.json" --model tiny-gpt2 --micro-batch 2 --seq-len 16 --repeat 2 --threads 1 \
    > "$WORK/calib.out" || fail "--calibrate failed: $(cat "$WORK/calib.out")"
"$PY" - "$WORK/here.json" <<'PYEOF' || fail "the calibrated profile: $(cat "$WORK/here.json")"
import json, sys
p = json.load(open(sys.argv[1]))
ops = p["ops"]
for k in ("linear", "attention", "layernorm", "gelu", "add", "embedding", "cross_entropy"):
    assert ops[k]["forward"] > 0 and ops[k]["backward"] > 0, k
assert abs(p["matmul_tflops"] * 1e12 - ops["linear"]["forward"]) <= 1e-5 * ops["linear"]["forward"]
assert p["inter_node_gbps"] == 1 and p["latency_us"] == 5, "links come from the cpu profile"
print("ok: --calibrate:", len(ops), "op kinds, linear %.3g GFLOP/s forward" % (ops["linear"]["forward"] / 1e9))
PYEOF
grep -q "^wrote $WORK/here.json$" "$WORK/calib.out" || fail "--calibrate output: $(cat "$WORK/calib.out")"
# its roofline: every kind's passes, the product's and the copy's peaks
grep -q "^peaks (fp32): a 1024 x 1024 product [0-9.]* GFLOP/s, a 64 MiB copy [0-9.]* GB/s" "$WORK/calib.out" &&
    grep -q "^linear  *forward  *[0-9.]* *[0-9.]* MFLOP *[0-9.]* [kMG]FLOP/s *[0-9]*%" "$WORK/calib.out" &&
    grep -q "^layernorm  *backward  *[0-9.]* *[0-9.]* kB *[0-9.]* [MG]B/s *[0-9]*%" "$WORK/calib.out" ||
    fail "--calibrate's roofline: $(cat "$WORK/calib.out")"
# (how far the device ran behind the host: a GPU's; the CPU is its own device)
! grep -q "^launches:" "$WORK/calib.out" || fail "--calibrate on the CPU speaks of launches: $(cat "$WORK/calib.out")"
# in bf16: its own table, beside fp32's, which a bf16 plan times with
"$PLAN" --calibrate "$WORK/here16.json" --device-profile "$WORK/here.json" --dtype bf16 --model tiny-gpt2 \
    --micro-batch 2 --seq-len 16 --repeat 2 --threads 1 > "$WORK/calib16.out" ||
    fail "--calibrate --dtype bf16 failed: $(cat "$WORK/calib16.out")"
grep -q "^peaks (bf16): " "$WORK/calib16.out" && grep -q '^bf16 rates measured ("ops_bf16")' "$WORK/calib16.out" ||
    fail "--calibrate --dtype bf16 output: $(cat "$WORK/calib16.out")"
"$PY" - "$WORK/here.json" "$WORK/here16.json" <<'PYEOF' || fail "the bf16 profile: $(cat "$WORK/here16.json")"
import json, sys
p32, p16 = (json.load(open(f)) for f in sys.argv[1:3])
assert p16["ops"] == p32["ops"] and p16["matmul_tflops"] == p32["matmul_tflops"], "fp32's rates kept"
assert set(p16["ops_bf16"]) == set(p32["ops"]), "every kind measured in bf16"
print("ok: --calibrate --dtype bf16: linear %.3g GFLOP/s forward (fp32 %.3g)"
      % (p16["ops_bf16"]["linear"]["forward"] / 1e9, p32["ops"]["linear"]["forward"] / 1e9))
PYEOF
for dt in bf16 fp32; do
    "$PLAN" --gpus 1 --model tiny-gpt2 --micro-batch 2 --seq-len 16 --gpu "$WORK/here16.json" --dtype $dt \
        > "$WORK/plan16.out" || fail "a plan with the bf16 profile: $(cat "$WORK/plan16.out")"
    grep -q "^op times: the profile's measured $dt rates$" "$WORK/plan16.out" ||
        fail "a $dt plan does not time with the profile's $dt rates: $(cat "$WORK/plan16.out")"
done
"$PLAN" --gpus 1 --model tiny-gpt2 --micro-batch 2 --seq-len 16 --gpu "$WORK/here.json" --dtype bf16 --json \
    > "$WORK/plan32.json" && grep -q '"op_rates": "fp32"' "$WORK/plan32.json" ||
    fail "a bf16 plan without bf16 rates does not say it times with fp32's"
"$PLAN" --gpus 1 --model tiny-gpt2 --micro-batch 2 --seq-len 16 --gpu "$WORK/here16.json" --dtype bf16 --json \
    > "$WORK/plan16.json" || fail "a bf16 plan with bf16 rates"
# the same plan from a profile whose fp32 table is that bf16 table: the same pipeline
"$PY" - "$WORK/here16.json" "$WORK/swapped.json" <<'PYEOF' || fail "swapping the tables"
import json, sys
p = json.load(open(sys.argv[1]))
p["ops"] = p.pop("ops_bf16")
json.dump(p, open(sys.argv[2], "w"))
PYEOF
"$PLAN" --gpus 1 --model tiny-gpt2 --micro-batch 2 --seq-len 16 --gpu "$WORK/swapped.json" --dtype bf16 --json \
    > "$WORK/plansw.json" || fail "a bf16 plan with the swapped profile"
"$PY" - "$WORK/plan32.json" "$WORK/plan16.json" "$WORK/plansw.json" <<'PYEOF' ||
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:4])
assert b["pipeline_s"] == c["pipeline_s"] and a["pipeline_s"] != b["pipeline_s"], (a, b, c)
print("ok: a bf16 plan times with bf16's rates: pipeline %.4g ms (fp32's rates: %.4g ms)"
      % (b["pipeline_s"] * 1e3, a["pipeline_s"] * 1e3))
PYEOF
    fail "a bf16 plan's step does not come from the bf16 rates"
expect 2 "calibrate fp32 or bf16" --calibrate "$WORK/x.json" --dtype tf32
make_shard "$WORK/data.bin"
"$MERAK_BUILDDIR/merak-train" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 --seq-len 16 --steps 1 \
    --threads 1 --partition autopipe --device-profile "$WORK/here.json" > "$WORK/train.out" 2>&1 ||
    fail "merak-train with the calibrated profile: $(cat "$WORK/train.out")"
expect 2 "unknown model 'gpt5'" --calibrate "$WORK/x.json" --model gpt5
expect 2 "device profile 'tpu9' is not in" --calibrate "$WORK/x.json" --device-profile tpu9
expect 2 "model does not go with --simulate" --model tiny-gpt2 --simulate --schedule 1f1b --stages 2 --micro-batches 2
expect 2 "json does not go with --calibrate" --calibrate "$WORK/x.json" --json
expect 2 "seq-len 99999 is beyond the model's" --calibrate "$WORK/x.json" --model tiny-gpt2 --seq-len 99999
expect 2 "device: 'tpu' is not cpu or cuda" --calibrate "$WORK/x.json" --device tpu
# a machine without a GPU (or a build without CUDA) says so
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi > /dev/null 2>&1; then
    expect 1 "device cuda: " --calibrate "$WORK/x.json" --model tiny-gpt2 --device cuda
fi
expect 1 "no-such-dir" --calibrate "$WORK/no-such-dir/x.json" --model tiny-gpt2 --micro-batch 1 --seq-len 8 --repeat 1
# ... found before measuring anything: GPT-2 124M takes a minute to calibrate here
expect_exit 1 "calibrate $WORK/no-such-dir/x.json: cannot create a file" timeout 20 "$PLAN" --calibrate "$WORK/no-such-dir/x.json" --model gpt2
printf '{"memory_gb": 1, "matmul_tflops": 1, "memory_gbps": 1, "intra_node_gbps": 1, "inter_node_gbps": 1,
  "latency_us": 1, "ops": {"matmul": {"forward": 1, "backward": 1}}}' > "$WORK/badops.json"
expect 1 "ops: 'matmul' is not an op kind" --calibrate "$WORK/x.json" --device-profile "$WORK/badops.json"
sed 's/"ops"/"ops_bf16"/' "$WORK/badops.json" > "$WORK/badops16.json"
expect 1 "ops_bf16: 'matmul' is not an op kind" --gpus 1 --model tiny-gpt2 --gpu "$WORK/badops16.json"
sed 's/"ops": {.*}}}/"ops_bf16": [1]}/' "$WORK/badops.json" > "$WORK/badops16.json"
expect 1 '"ops_bf16" is not an object' --gpus 1 --model tiny-gpt2 --gpu "$WORK/badops16.json"

# --gpus: layouts.  GPT-3 175B on 1024 H100s as dp 8, tp 8, pp 16: without
# recomputation stage 0 holds 16 micro-batches' activations and does not
# fit (exit 1, the stage and the sizes named); with full recomputation it
# fits.  The stages' parameters add up to the model's (each tp rank holds
# 1/8, the tied embedding is on both ends), every rank holds its
# parameters, gradients and two AdamW moments at 4 bytes each, ZeRO-1
# divides the moments by dp, and tokens/s is the batch over the step.
L175="--model gpt3-175b --gpus 1024 --gpus-per-node 8 --dp 8 --tp 8 --pp 16 --gpu h100-80g"
expect 1 "the layout does not fit: stage 0 needs 141.[0-9]* GB, a h100-80g has 80.00 GB" $L175
"$PLAN" $L175 --recompute full --json > "$WORK/175.json" || fail "175B with full recomputation: $(cat "$WORK/175.json")"
"$PLAN" $L175 --recompute full --zero 1 --json > "$WORK/175z.json" || fail "175B with ZeRO-1"
"$PY" - "$WORK/175.json" "$WORK/175z.json" <<'PYEOF' || fail "the 175B plan: $(cat "$WORK/175.json")"
import json, sys
a, z = (json.load(open(f)) for f in sys.argv[1:3])
total = 174604259328   # merak-plan --list-models
held = sum(s["parameters"] for s in a["stages"]) * a["tp"]
assert total <= held <= 1.01 * total, held
assert a["fits"] and a["pp"] == 16 and len(a["stages"]) == 16 and a["micro_batches"] == 128
for s, t in zip(a["stages"], z["stages"]):
    m, mz = s["memory"], t["memory"]
    assert s["recomputed"] == s["layers"] > 0
    assert 4 * s["parameters"] <= m["params"] == m["grads"] <= 4 * s["parameters"] + 64 * 1024
    assert abs(m["optimizer"] - 2 * m["params"]) <= 8 and abs(mz["optimizer"] - m["optimizer"] / 8) <= 64
    assert abs(m["total"] - (m["params"] + m["grads"] + m["optimizer"] + m["activations"] + m["other"])) <= 1
assert abs(a["tokens_per_s"] * a["step_s"] - 1024 * 2048) < 1e-6 * 1024 * 2048
assert 0 < a["bubble"] < 1 and 0 < a["mfu"] < 1 and a["step_s"] >= a["pipeline_s"]
print("ok: gpt3-175b dp 8 tp 8 pp 16 recompute full: step %.3g s, %.0f tokens/s, MFU %.1f%%, stage 0 %.1f GB" %
      (a["step_s"], a["tokens_per_s"], 100 * a["mfu"], a["stages"][0]["memory"]["total"] / 1e9))
PYEOF

# --auto on a small case: the best layout's answer is the answer of that
# layout planned alone, and no runner-up is faster.
A="--model tiny-gpt2 --gpus 8 --gpus-per-node 4 --gpu cpu --micro-batch 2 --seq-len 16 --global-batch 64"
"$PLAN" $A --auto --json > "$WORK/auto.json" || fail "--auto: $(cat "$WORK/auto.json")"
"$PY" - "$WORK/auto.json" > "$WORK/best.args" <<'PYEOF' || fail "--auto answer: $(cat "$WORK/auto.json")"
import json, sys
j = json.load(open(sys.argv[1]))
b = j["best"]
assert j["layouts_fitting"] >= j["layouts_simulated"] >= len(j["runners_up"]) + 1 and j["layouts_tried"] >= 20
assert all(r["step_s"] >= b["step_s"] for r in j["runners_up"]) and b["tp"] in (1, 2, 4)
print("--dp %d --tp %d --pp %d --schedule %s --recompute %s --zero %d" % (b["dp"], b["tp"], b["pp"], b["schedule"],
      b["recompute"], b["zero"]) + (" --virtual-stages %d" % b["virtual_stages"] if b["schedule"] == "interleaved" else ""))
PYEOF
"$PLAN" $A $(cat "$WORK/best.args") --json > "$WORK/alone.json" || fail "the best layout alone: $(cat "$WORK/best.args")"
"$PY" -c 'import json,sys; a=json.load(open(sys.argv[1]))["best"]; b=json.load(open(sys.argv[2]))
sys.exit(abs(a["step_s"] - b["step_s"]) > 1e-9 * b["step_s"] or a["stages"] != b["stages"])' "$WORK/auto.json" "$WORK/alone.json" ||
    fail "--auto's best differs from planning it alone"
echo "ok: --auto on 8 GPUs: best $(cat "$WORK/best.args"), the same as planned alone"
"$PLAN" $A --auto | grep -q "^runners-up:" || fail "--auto text answer has no runners-up"

expect 2 "unknown model 'gpt5'" --gpus 8 --model gpt5
expect 2 "device profile 'tpu9' is not in" --gpus 8 --model tiny-gpt2 --gpu tpu9
expect 2 "gpus 12 is not a whole number of nodes of 8" --gpus 12 --model tiny-gpt2
expect 2 "gpus 8 is not divisible by tp x pp = 3 x 1" --gpus 8 --model tiny-gpt2 --tp 3
expect 2 "dp x tp x pp = 3 x 2 x 1 = 6, but --gpus is 8" --gpus 8 --model tiny-gpt2 --tp 2 --dp 3
expect 2 "tp=8 does not divide the 4 GPUs of a node" --gpus 8 --gpus-per-node 4 --model tiny-gpt2 --tp 8
expect 2 "global-batch 7 is not a multiple of dp x micro-batch = 8 x 1" --gpus 8 --model tiny-gpt2 --global-batch 7
# a degree given with --auto is fixed, the rest searched
"$PLAN" $A --auto --pp 2 --json | "$PY" -c 'import json,sys; b=json.load(sys.stdin)["best"]; sys.exit(b["pp"] != 2)' ||
    fail "--auto --pp 2 did not keep pp 2"
echo "ok: --auto --pp 2 searches dp and tp with pp 2"

# --dtype bf16 plans the runtime's bf16 storage: GPT-2's activations take
# well under fp32's (the saved statistics stay float), the weights' bf16
# copies add to the rest; tf32 plans as fp32; the answer
# says its dtype, and --auto searches with it.
G1="--model gpt2 --gpus 1 --micro-batch 8 --seq-len 1024 --json"
for t in fp32 tf32 bf16; do
    "$PLAN" $G1 --dtype $t > "$WORK/dtype.$t.json" || fail "--dtype $t: $(cat "$WORK/dtype.$t.json")"
done
"$PLAN" $A --auto --dtype bf16 --json > "$WORK/dtype.auto.json" || fail "--auto --dtype bf16"
"$PY" - "$WORK" <<'PYEOF' || fail "--dtype: the plans above"
import json, sys
j = {t: json.load(open("%s/dtype.%s.json" % (sys.argv[1], t))) for t in ("fp32", "tf32", "bf16", "auto")}
f, b = j["fp32"]["stages"][0]["memory"], j["bf16"]["stages"][0]["memory"]
assert [j[t]["dtype"] for t in ("fp32", "tf32", "bf16")] == ["fp32", "tf32", "bf16"] and j["auto"]["best"]["dtype"] == "bf16"
assert j["tf32"]["stages"] == j["fp32"]["stages"]
assert b["activations"] < 0.75 * f["activations"] and b["params"] == f["params"] and b["other"] > f["other"], (f, b)
print("ok: --dtype bf16: GPT-2 124M at B=8 T=1024 plans %.2f GB of activations (fp32 %.2f), %.2f GB in all (fp32 %.2f)"
      % (b["activations"] / 1e9, f["activations"] / 1e9, b["total"] / 1e9, f["total"] / 1e9))
PYEOF
# The profile's backend decides which kernel table the memory is planned
# with: the CPU's widens every op's bf16 tensors into its staging buffer
# (the logits' N x V floats among them), CUDA's only those of the ops
# without bf16 kernels (a build without CUDA plans both with the CPU's).
for be in cpu cuda tpu; do
    printf '{"backend": "%s", "memory_gb": 80, "matmul_tflops": 400, "memory_gbps": 2700, "intra_node_gbps": 360,
      "inter_node_gbps": 45, "latency_us": 8}' "$be" > "$WORK/be-$be.json"
done
expect 1 "device profile: backend 'tpu' is not cpu or cuda" $G1 --dtype bf16 --gpu "$WORK/be-tpu.json"
for be in cpu cuda; do
    "$PLAN" $G1 --dtype bf16 --gpu "$WORK/be-$be.json" > "$WORK/be-$be.out" || fail "backend $be: $(cat "$WORK/be-$be.out")"
done
grep -q '^#define HAVE_CUDA 1' "$MERAK_BUILDDIR/config.h" && cuda=1 || cuda=0
"$PY" - "$WORK" "$cuda" <<'PYEOF' || fail "the backend's plans: $(cat "$WORK/be-cpu.out" "$WORK/be-cuda.out")"
import json, sys
c, g = (json.load(open("%s/be-%s.out" % (sys.argv[1], b)))["stages"][0]["memory"]["total"] for b in ("cpu", "cuda"))
assert (g < c - 1e9) if sys.argv[2] == "1" else (g == c), (c, g)
print("ok: GPT-2 124M in bf16 plans %.2f GB with the cuda backend's kernels, %.2f GB with the cpu's" % (g / 1e9, c / 1e9))
PYEOF
expect 2 "dtype: 'fp16' is not fp32, tf32 or bf16" --gpus 8 --model tiny-gpt2 --dtype fp16
expect 2 "dtype does not go with --simulate" $S --schedule 1f1b --dtype bf16
expect 2 "stages does not go with --gpus" --gpus 8 --model tiny-gpt2 --stages 2
expect 2 "recompute: recompute 'most' is not" --gpus 8 --model tiny-gpt2 --recompute most
expect 2 "seq-len 99999 is beyond the model's" --gpus 8 --model tiny-gpt2 --seq-len 99999
expect 2 "needs at least as many micro-batches" --gpus 8 --model tiny-gpt2 --pp 4 --global-batch 2
expect 2 "not an integer" --gpus 8 --model tiny-gpt2 --zero yes
expect 2 "gpus needs --model" --gpus 8
expect 2 "virtual-stages 1: interleaved needs 2 to" --gpus 8 --model tiny-gpt2 --auto --virtual-stages 1
expect 2 "virtual-stages needs --schedule interleaved" --gpus 8 --model tiny-gpt2 --auto --schedule 1f1b --virtual-stages 2
expect 2 "makes 2097152 micro-batches per replica, more than 1048576" --gpus 1 --model tiny-gpt2 --global-batch 2097152
echo "plan_cli: ok"
