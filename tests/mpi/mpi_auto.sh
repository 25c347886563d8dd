#!/bin/sh
# merak-train --auto: every rank finds the layout alone (the launcher's
# size, the planner's search), rank 0 prints it once, and the run trains it
# exactly like one process with the same global batch (the loss within
# 1e-5 at every step); merak-plan --auto, asked the same question, answers
# the same layout; a degree or schedule given fixes that part.  Refused with
# one line: a batch no layout splits (exit 2), a device where no layout
# fits (exit 1), --auto with --micro-batches (exit 2), and ranks that
# disagree on the layout (one rank's MERAK_TP differs).
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
PLAN=$MERAK_BUILDDIR/merak-plan
PY=$PY3
make_shard "$WORK/data.bin"
common="--model tiny-gpt2 --data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 4 --threads 1"
# one process with the global batch of 8 sequences: 4 micro-batches of 2
"$TRAIN" $common --micro-batches 4 --metrics "$WORK/one.jsonl" > "$WORK/one.out" 2>&1 ||
    { cat "$WORK/one.out" >&2; fail "the one-process reference failed"; }

# check_auto NAME NP [FLAGS...]: --auto --global-batch 8 on NP ranks, FLAGS
# given to merak-train and merak-plan alike
check_auto() {
    name=$1 np=$2
    shift 2
    "$WRAP" "$np" "$TRAIN" $common --auto --global-batch 8 "$@" --metrics "$WORK/$name.jsonl" > "$WORK/$name.out" 2>&1 ||
        { tail -30 "$WORK/$name.out" >&2; fail "$name: mpirun -np $np merak-train --auto $* failed"; }
    [ "$(grep -c '^auto: chose ' "$WORK/$name.out")" -eq 1 ] ||
        { cat "$WORK/$name.out" >&2; fail "$name: the choice is not printed once"; }
    chose=$(sed -n 's/^auto: chose \(.*\) | predicted.*/\1/p' "$WORK/$name.out")
    # the banner trains what was printed
    echo "$chose" | sed 's/^dp \([0-9]*\) x tp \([0-9]*\) x pp \([0-9]*\),.*/dp \1 tp \2 pp \3 on/' > "$WORK/degrees"
    grep -q "$(cat "$WORK/degrees")" "$WORK/$name.out" || { cat "$WORK/$name.out" >&2; fail "$name: trains another layout"; }
    # merak-plan --auto, the same question
    "$PLAN" --model tiny-gpt2 --gpus "$np" --gpus-per-node "$np" --gpu cpu --micro-batch 2 --seq-len 16 \
        --global-batch 8 --auto --json "$@" > "$WORK/$name.plan" || fail "$name: merak-plan --auto $* failed"
    planned=$("$PY" -c '
import json, sys
b = json.load(open(sys.argv[1]))["best"]
s = b["schedule"] + ("/%d" % b["virtual_stages"] if b["virtual_stages"] > 1 else "")
print("dp %d x tp %d x pp %d, %s, recompute %s, zero %d, %d micro-batch(es) per replica" %
      (b["dp"], b["tp"], b["pp"], s, b["recompute"], int(b["zero"]), b["micro_batches"]))' "$WORK/$name.plan")
    [ "$chose" = "$planned" ] || fail "$name: merak-train --auto chose '$chose', merak-plan --auto '$planned'"
    "$PY" - "$WORK/one.jsonl" "$WORK/$name.jsonl" "$name" "$chose" <<'PYEOF' || fail "$name: the losses differ from one process"
import json, sys
one = [json.loads(l)["loss"] for l in open(sys.argv[1])]
got = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(a - b) / abs(a) for a, b in zip(one, got))
print("ok: %s: %s, %d steps, largest loss difference to one process %.2g" % (sys.argv[3], sys.argv[4], len(got), worst))
sys.exit(0 if len(got) == len(one) == 4 and worst <= 1e-5 else 1)
PYEOF
}
check_auto auto4 4
check_auto auto4-pp2 4 --pp 2
check_auto auto4-tp2-1f1b 4 --tp 2 --schedule 1f1b
check_auto auto2-interleaved 2 --schedule interleaved

expect_job_fails merak-train "no layout of 4 rank(s) can run this model with a global batch of 7" \
    "$WRAP" 4 "$TRAIN" $common --auto --global-batch 7
[ "$rc" -eq 2 ] || fail "a batch no layout splits: exit $rc, not 2"
printf '{"memory_gb": 0.0001, "matmul_tflops": 1, "memory_gbps": 10, "intra_node_gbps": 5, "inter_node_gbps": 1,
 "latency_us": 1}\n' > "$WORK/small.json"
expect_job_fails merak-train "no layout of 4 rank(s) fits this model: the leanest of the [0-9]* tried needs" \
    "$WRAP" 4 "$TRAIN" $common --auto --global-batch 8 --device-profile "$WORK/small.json"
[ "$rc" -eq 1 ] || fail "nothing fits: exit $rc, not 1"
expect_job_fails merak-train "auto chooses the micro-batches: give --global-batch instead" \
    "$WRAP" 2 "$TRAIN" $common --auto --micro-batches 2
[ "$rc" -eq 2 ] || fail "--auto --micro-batches: exit $rc, not 2"
# one rank of four sees another tp: the grid would not fit together
cat > "$WORK/skew.sh" <<'EOF'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && MERAK_TP=2 && export MERAK_TP
exec "$@"
EOF
expect_job_fails merak-train "the ranks disagree on the layout (dp 2 to 4, tp 1 to 2, pp 1 to 1)" \
    "$WRAP" 4 sh "$WORK/skew.sh" "$TRAIN" $common --micro-batches 2
echo "ok: refused: a batch no layout splits (2), nothing fits (1), --auto with --micro-batches (2), ranks that disagree"
echo "mpi_auto: ok"
