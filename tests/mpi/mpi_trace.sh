#!/bin/sh
# merak-train --trace on a (1,2,4) grid: the file is one valid Chrome trace
# with every rank and every kind of instruction and collective the schedule
# runs, each rank's compute instructions one after another, every
# tensor-parallel all-reduce inside a FWD or BWD; merak-trace summarises it
# and draws valid SVG; bad traces and flags get one line and the right exit.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
PY=$PY3
TRACE=$MERAK_BUILDDIR/merak-trace
make_shard "$WORK/data.bin"
D="--model tiny-llama --data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 2 --threads 1 \
   --dp 1 --tp 2 --pp 4 --micro-batches 4"

# trace_ok FILE SCHEDULE KINDS: the checks above; KINDS the names that must appear on every rank
trace_ok() {
    "$PY" - "$@" <<'PYEOF' || fail "trace $1 is not what it should be"
import json, sys
path, sched, kinds = sys.argv[1], sys.argv[2], set(sys.argv[3].split(","))
d = json.load(open(path))
assert d["otherData"]["schedule"] == sched and d["otherData"]["pp"] == 4, d["otherData"]
ev = d["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(names) == list(range(8)), names
xs = [e for e in ev if e["ph"] == "X"]
for e in xs:
    assert e["dur"] >= 0 and e["tid"] in (0, 1) and e["cat"] in ("compute", "comm"), e
for r in range(8):
    mine = [e for e in xs if e["pid"] == r]
    seen = {e["name"] for e in mine}
    # the stage's own kinds: no RECV_ACT on the first, no SEND_ACT on the
    # last, LOAD only on those two ...
    pp = int(names[r].split("pp ")[1].rstrip(")"))
    need = set(kinds)
    if pp not in (0, 3):
        need -= {"LOAD"}   # only the end stages read ids or targets
    if pp == 0:
        need -= {"RECV_ACT", "WAIT_ACT", "SEND_GRAD"}
    if pp == 3:
        need -= {"SEND_ACT", "RECV_GRAD", "WAIT_GRAD", "RECOMPUTE"}
    assert need <= seen, (r, sorted(need - seen))
    for step in (0, 1):
        comp = sorted((e for e in mine if e["tid"] == 0 and e["args"]["step"] == step), key=lambda e: e["ts"])
        fwd = [e["args"]["mb"] for e in comp if e["name"] == "FWD"]
        assert sorted(fwd) == [0, 1, 2, 3], (r, step, fwd)
        for a, b in zip(comp, comp[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (r, a, b)
        for e in mine:
            if e["name"] == "TP_ALLREDUCE" and e["args"]["step"] == step:
                assert any(c["name"] in ("FWD", "BWD", "BWD_INPUT", "RECOMPUTE") and
                           c["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 1e-3
                           for c in comp), (r, e)
print("ok: %s: 8 ranks, %d events, kinds %s" % (path, len(xs), ",".join(sorted({e["name"] for e in xs}))))
PYEOF
}

BASE="LOAD,RECV_ACT,WAIT_ACT,FWD,SEND_ACT,RECV_GRAD,WAIT_GRAD,SEND_GRAD,WAIT_SENDS,REDUCE_TIED,REDUCE_DP"
BASE="$BASE,OPTIMIZER_STEP,TP_ALLREDUCE,STEP_ALLREDUCE"
"$WRAP" 8 "$TRAIN" $D --trace "$WORK/1f1b.json" > "$WORK/out" 2>&1 || { cat "$WORK/out" >&2; fail "1f1b run"; }
trace_ok "$WORK/1f1b.json" 1f1b "$BASE,BWD"
"$WRAP" 8 "$TRAIN" $D --schedule zb-h1 --recompute full --trace "$WORK/zb.json" > "$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "zb-h1 run"; }
trace_ok "$WORK/zb.json" zb-h1 "$BASE,BWD_INPUT,BWD_WEIGHT,RECOMPUTE"

# --tp-overlap 2: each blocking all-reduce of the forward and the input
# backward becomes, per sub-batch, a start and a wait (both inside the
# instruction); only the vocabulary-parallel cross-entropy (last stage)
# still sums once per sub-batch, blocking.  So stages without the loss
# record exactly 4 times the events of the 1f1b run, the last stage fewer.
"$WRAP" 8 "$TRAIN" $D --tp-overlap 2 --trace "$WORK/k2.json" > "$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "1f1b --tp-overlap 2 run"; }
trace_ok "$WORK/k2.json" 1f1b "$BASE,BWD"
"$PY" - "$WORK/1f1b.json" "$WORK/k2.json" <<'PYEOF' || fail "--tp-overlap 2 did not split the all-reduces"
import json, sys
def count(path):
    d = json.load(open(path))
    names = {e["pid"]: e["args"]["name"] for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    n = {}
    for e in d["traceEvents"]:
        if e["ph"] == "X" and e["name"] == "TP_ALLREDUCE":
            n[names[e["pid"]]] = n.get(names[e["pid"]], 0) + 1
    return n
one, two = count(sys.argv[1]), count(sys.argv[2])
for r in one:
    last = r.endswith("pp 3)")
    assert (3 * one[r] <= two[r] < 4 * one[r]) if last else two[r] == 4 * one[r], (r, one[r], two[r])
print("ok: --tp-overlap 2: tensor-parallel all-reduce events per rank", {r: (one[r], two[r]) for r in sorted(one)})
PYEOF

# interleaved (pp 2, 2 chunks each): every rank forwards and backwards every
# micro-batch once per chunk, the chunk in args; merak-trace simulates it
# with the trace's virtual stages
"$WRAP" 2 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 --seq-len 16 --steps 2 --threads 1 \
    --pp 2 --micro-batches 3 --schedule interleaved --trace "$WORK/il.json" > "$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "interleaved run"; }
"$PY" - "$WORK/il.json" <<'PYEOF' || fail "the interleaved trace is not what it should be"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["otherData"]["schedule"] == "interleaved" and d["otherData"]["virtual_stages"] == 2, d["otherData"]
xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
for r in (0, 1):
    for step in (0, 1):
        for kind in ("FWD", "BWD"):
            got = sorted((e["args"]["chunk"], e["args"]["mb"]) for e in xs
                         if e["pid"] == r and e["args"]["step"] == step and e["name"] == kind)
            assert got == [(c, m) for c in (0, 1) for m in range(3)], (r, step, kind, got)
print("ok: interleaved trace: each rank ran FWD and BWD of 3 micro-batches on chunks 0 and 1")
PYEOF
"$TRACE" "$WORK/il.json" --simulate > "$WORK/sim.txt" || fail "merak-trace --simulate of interleaved failed"
grep -q "pp 2 (2 chunks each), interleaved" "$WORK/sim.txt" || { cat "$WORK/sim.txt" >&2; fail "merak-trace --simulate: no chunks"; }
sed 's/"virtual_stages":2/"virtual_stages":0/' "$WORK/il.json" > "$WORK/il0.json"
expect_exit 1 '"virtual_stages" must be an integer from 1 to 64' "$TRACE" "$WORK/il0.json"
sed 's/"chunk":1/"chunk":5/' "$WORK/il.json" > "$WORK/il5.json"
expect_exit 1 "on chunk 5 of 2" "$TRACE" "$WORK/il5.json" --simulate

# data parallel with small buckets: each rank's gradient buckets in flight,
# one DP_BUCKETS event a step on the third thread, launched during the
# step's last backward (overlapping it) and done no earlier than launched;
# merak-trace reads and draws it
"$WRAP" 2 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 --seq-len 16 --steps 2 --threads 1 \
    --dp 2 --micro-batches 2 --bucket-mb 0.02 --trace "$WORK/dp.json" > "$WORK/out" 2>&1 ||
    { cat "$WORK/out" >&2; fail "dp 2 run"; }
"$PY" - "$WORK/dp.json" <<'PYEOF' || fail "the dp trace's buckets are not what they should be"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert threads[(0, 2)] == "reductions in flight" and threads[(1, 2)] == "reductions in flight", threads
xs = [e for e in ev if e["ph"] == "X"]
for r in (0, 1):
    for step in (0, 1):
        mine = [e for e in xs if e["pid"] == r and e["args"]["step"] == step]
        b = [e for e in mine if e["name"] == "DP_BUCKETS"]
        assert len(b) == 1 and b[0]["tid"] == 2 and b[0]["cat"] == "flight" and b[0]["dur"] >= 0, (r, step, b)
        last = max((e for e in mine if e["name"] == "BWD"), key=lambda e: e["ts"])
        assert last["ts"] - 1e-3 <= b[0]["ts"] <= last["ts"] + last["dur"] + 1e-3, (r, step, b[0], last)
print("ok: dp 2: one DP_BUCKETS a step per rank, launched inside the last backward")
PYEOF
"$TRACE" "$WORK/dp.json" --svg "$WORK/dp.svg" > "$WORK/dpsum" || fail "merak-trace of the dp trace failed"
grep -q "DP_BUCKETS mb -1" "$WORK/dp.svg" || fail "the dp trace's SVG does not draw the buckets"
grep -q "^dp buckets in flight  *ms  *behind compute" "$WORK/dpsum" || fail "merak-trace: no buckets table: $(cat "$WORK/dpsum")"
"$TRACE" "$WORK/dp.json" --json > "$WORK/dp.sum.json" || fail "merak-trace --json of the dp trace failed"
"$PY" -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert all(r['dp_flight_ms'] > 0 and 0 <= r['dp_hidden'] <= 1 for r in j['ranks']) and len(j['ranks']) == 2, j
print('ok: merak-trace: the buckets in flight and their share behind compute', [(r['dp_flight_ms'], r['dp_hidden']) for r in j['ranks']])" \
    "$WORK/dp.sum.json" || fail "merak-trace --json: the buckets"

# a trace whose rank runs two compute instructions at once (every event
# twice) or whose layout is not its ranks is refused, not summed into
# nonsense
"$PY" - "$WORK/dp.json" "$WORK/dup.json" "$WORK/lay.json" <<'PYEOF' || fail "bad traces set-up"
import json, sys
d = json.load(open(sys.argv[1]))
x = dict(d, traceEvents=d["traceEvents"] + [e for e in d["traceEvents"] if e["ph"] == "X"])
json.dump(x, open(sys.argv[2], "w"))
d["otherData"]["dp"] = 3
json.dump(d, open(sys.argv[3], "w"))
PYEOF
expect_exit 1 "rank 0 runs .* at once (.*): its compute instructions overlap" "$TRACE" "$WORK/dup.json"
expect_exit 1 '"otherData": dp 3 x tp 1 x pp 1 is not the 2 ranks the trace holds' "$TRACE" "$WORK/lay.json"

# merak-trace: the summary names every rank; the SVG is XML with a box per event of the step
"$TRACE" "$WORK/1f1b.json" --svg "$WORK/t.svg" > "$WORK/sum" || fail "merak-trace failed"
cat "$WORK/sum"
[ "$(grep -c '^rank [0-7] (dp 0, tp [01], pp [0-3])' "$WORK/sum")" -eq 8 ] || fail "the summary lacks ranks"
"$PY" - "$WORK/t.svg" "$WORK/1f1b.json" <<'PYEOF' || fail "the SVG is not what it should be"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
titles = [t.text for t in root.iter(ns + "title")]
ev = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e["ph"] == "X" and e["args"]["step"] == 1]
assert len(titles) == len(ev), (len(titles), len(ev))
print("ok: the SVG parses as XML and draws the", len(titles), "events of step 1")
PYEOF
"$TRACE" "$WORK/1f1b.json" --json --step 0 > "$WORK/sum.json" || fail "merak-trace --json failed"
"$PY" -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['step'] == 0 and len(j['ranks']) == 8 and j['step_ms'] > 0
assert all(0 <= r['idle'] <= 1 and r['compute_ms'] > 0 for r in j['ranks']), j
print('ok: --json summary of step 0')" "$WORK/sum.json" || fail "merak-trace --json"

# --simulate: the simulator on the step's measured per-stage costs
# (recomputing stages included); the times themselves are not asserted
"$TRACE" "$WORK/zb.json" --simulate --json > "$WORK/sim.json" || fail "merak-trace --simulate failed"
"$PY" -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['pipeline_ms'] > 0 and j['simulated_ms'] > 0 and j['pipeline_ms'] <= j['step_ms'] + 1e-9, j
print('ok: --simulate: pipeline %.2f ms measured, %.2f ms simulated' % (j['pipeline_ms'], j['simulated_ms']))
" "$WORK/sim.json" || fail "merak-trace --simulate --json"
"$TRACE" "$WORK/1f1b.json" --simulate > "$WORK/sim.txt" || fail "merak-trace --simulate (text) failed"
grep -q "^pipeline, first forward to last backward: measured .* ms, simulated .* ms" "$WORK/sim.txt" ||
    fail "merak-trace --simulate prints no comparison"

# refusals
expect() {
    want=$1 pattern=$2; shift 2
    expect_exit "$want" "$pattern" "$TRACE" "$@"
}
expect 2 "which trace" --svg x.svg
expect 2 "one trace at a time" "$WORK/1f1b.json" "$WORK/zb.json"
expect 2 "step 7: the trace holds steps 0 to 1" "$WORK/1f1b.json" --step 7
expect 2 "unknown option" "$WORK/1f1b.json" --bogus
expect 1 "no-such.json" "$WORK/no-such.json"
printf '{"traceEvents": [' > "$WORK/cut.json"
expect 1 "cut.json: line 1" "$WORK/cut.json"
printf '{"traceEvents": [{"name": "NAP", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1, "args": {"step": 0, "mb": 0}}]}' \
    > "$WORK/nap.json"
expect 1 "event 0: 'NAP' is not an instruction or collective merak-train records" "$WORK/nap.json"
printf '{"traceEvents": [{"name": "FWD", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": -1, "args": {"step": 0, "mb": 0}}]}' \
    > "$WORK/neg.json"
expect 1 "dur not negative" "$WORK/neg.json"
printf '{"traceEvents": [{"name": "FWD", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1, "args": {"step": 0, "mb": 0}}]}' \
    > "$WORK/bare.json"
expect 1 "does not name its pipeline stages" "$WORK/bare.json" --simulate
printf '{"events": []}' > "$WORK/other.json"
expect 1 "not a Chrome trace" "$WORK/other.json"
expect 1 "no-dir/t.svg" "$WORK/1f1b.json" --svg "$WORK/no-dir/t.svg"
# fuzz: 120 seeded mutations of a real trace (fields dropped, retyped or
# out of range): each is summarised (exit 0, silent stderr) or refused
# with exactly one line (exit 1), never a crash or a sanitizer report
"$PY" - "$WORK/1f1b.json" "$WORK/fz" <<'PYEOF' || fail "fuzz set-up"
import json, random, sys
base = json.load(open(sys.argv[1]))
rnd = random.Random(7)
odd = [None, -1, 2**40, -2**40, 1e300, -0.5, "x", "", [], {}, True, 3]
for i in range(120):
    d = json.loads(json.dumps(base))
    ev = d["traceEvents"]
    for _ in range(rnd.randint(1, 3)):
        e = rnd.choice(ev)
        k = rnd.choice(["name", "ph", "pid", "tid", "ts", "dur", "args", "step", "mb"])
        tgt = e["args"] if k in ("step", "mb") and isinstance(e.get("args"), dict) else e
        if rnd.random() < 0.3:
            tgt.pop(k, None)
        else:
            tgt[k] = rnd.choice(odd)
    if rnd.random() < 0.15:
        d["otherData"][rnd.choice(["pp", "micro_batches", "schedule"])] = rnd.choice(odd + ["zb-h1", "pipedream"])
    if rnd.random() < 0.1:
        d["traceEvents"] = rnd.choice(odd)
    with open("%s%03d.json" % (sys.argv[2], i), "w") as f:
        json.dump(d, f)
PYEOF
i=0 ok=0 refused=0
while [ $i -lt 120 ]; do
    f=$(printf '%s%03d.json' "$WORK/fz" $i)
    capture "$TRACE" "$f" --svg "$WORK/fz.svg" --simulate
    lines=$(wc -l < "$WORK/err")
    case "$rc/$lines" in
    0/0) ok=$((ok + 1)) ;;
    1/1) refused=$((refused + 1)) ;;
    *) cat "$WORK/err" >&2; fail "fuzz case $i: exit $rc with $lines line(s) on stderr" ;;
    esac
    i=$((i + 1))
done
echo "ok: fuzz: $ok traces summarised, $refused refused with one line"

# merak-train finds an unwritable trace path before it trains
expect_job_fails merak-train "no-dir/t.json" "$WRAP" 2 "$TRAIN" $D --tp 1 --pp 2 --trace "$WORK/no-dir/t.json"
echo "mpi_trace: ok"
