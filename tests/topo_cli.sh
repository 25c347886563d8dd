#!/bin/sh
# topo_cli.sh - merak-topo on the hwloc XML fixtures: node views, placements
# as tables and JSON (parsed with python3), refusals and bad input (one line
# on stderr, exit 2 for usage, 1 for an unreadable topology).
#
# Environment: MERAK_BUILDDIR (merak-topo), MERAK_SRCDIR (fixtures).
# Exit status: 0 pass, 1 fail, 77 skip (no python3 for the JSON checks).
. "$(dirname "$0")/lib.sh"
TOPO=$MERAK_BUILDDIR/merak-topo
TOPOS=$MERAK_SRCDIR/tests/fixtures/topologies
H100=$TOPOS/authored-dgx-h100-8xH100-8xCX7.xml
PCIE=$TOPOS/authored-pcie-2s-8xL40S-4xCX6.xml
[ -x "$TOPO" ] || fail "$TOPO is not built"
PY=
if command -v python3 > /dev/null 2>&1; then PY=python3; fi

# run STATUS ARGS...: runs merak-topo, expects exit STATUS; out in $WORK/out.
run() {
    want=$1; shift
    set +e
    timeout 60 "$TOPO" "$@" > "$WORK/out" 2> "$WORK/err"   # a hang is a failure
    got=$?
    set -e
    if [ "$got" -ne "$want" ]; then
        echo "--- merak-topo $*" >&2; head -n 5 "$WORK/err" >&2
        fail "expected exit $want, got $got"
    fi
}

# refuse STATUS PATTERN ARGS...: exit STATUS and one stderr line with PATTERN.
refuse() {
    want=$1 pattern=$2; shift 2
    run "$want" "$@"
    lines=$(wc -l < "$WORK/err" | tr -d ' ')
    if [ "$lines" -ne 1 ] || ! grep -q -e "$pattern" "$WORK/err"; then
        echo "--- merak-topo $*" >&2; cat "$WORK/err" >&2
        fail "expected one line matching '$pattern' on stderr, got $lines"
    fi
    echo "ok ($want): $(cat "$WORK/err")"
}

# check JSONFILE MODE ARGS...: python3 checks of a placement (see below).
cat > "$WORK/check.py" << 'EOF'
import json, sys

def cpus(s):
    out = set()
    for part in s.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out

doc = json.load(open(sys.argv[1]))
mode = sys.argv[2]
if mode == "node":
    assert len(doc["gpus"]) == int(sys.argv[3]), "GPU count"
    sys.exit(0)
t, D, T, P = doc["tasks"], doc["dp"], doc["tp"], doc["pp"]
W = D * T * P
assert doc["world_size"] == W and len(t) == W, "one entry per task"
assert sorted(x["rank"] for x in t) == list(range(W)), "ranks are 0..W-1"
for x in t:
    assert x["rank"] == x["tp"] + T * (x["dp"] + D * x["pp"]), "rank order is tp fastest"
    assert set(x) >= {"node", "local_task", "rank", "dp", "tp", "pp", "gpu", "gpu_busid",
                      "numa", "cpus", "nic"}, "fields"
by_rank = {x["rank"]: x for x in t}
for x in t:
    lead = by_rank[x["rank"] - x["tp"]]
    assert lead["node"] == x["node"], "tp group %d spans nodes" % lead["rank"]
for n in {x["node"] for x in t}:  # no core shared, unless there are fewer PUs than tasks
    sets = [cpus(x["cpus"]) for x in t if x["node"] == n]
    if len(set().union(*sets)) >= len(sets):
        assert sum(map(len, sets)) == len(set().union(*sets)), "cores shared on node %d" % n
s = doc["score"]
assert s["tp_cross_node"] == 0
if mode == "h100":  # vendor NIC pairing, cores on the GPU's socket, NVLink
    nic = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    sock = [cpus("0-55,112-167"), cpus("56-111,168-223")]
    for x in t:
        assert x["nic"] == nic[x["gpu"]], "NIC of GPU %d" % x["gpu"]
        assert cpus(x["cpus"]) <= sock[x["gpu"] // 4], "cores of GPU %d" % x["gpu"]
        if T == 8:
            assert x["tp"] == x["local_task"] == x["gpu"], "one tp group per node"
    assert s["tp_nvlink_frac"] == 1.0 and s["nic_dist_mean"] == 1.0
elif mode == "pcie":  # tp groups on one socket (GPUs 0-3 socket 0, 4-7 socket 1)
    for x in t:
        assert by_rank[x["rank"] - x["tp"]]["gpu"] // 4 == x["gpu"] // 4, "group on one socket"
        assert x["numa"] == x["gpu"] // 4
    assert s["tp_nvlink_frac"] is None, "NVLink unknown, not 0"
elif mode == "cyclic":
    assert s["renumbered"] is True and any(x["rank"] != x["procid"] for x in t)
    assert all(x["procid"] == x["local_task"] * int(sys.argv[3]) + x["node"] for x in t)
EOF
check() {
    [ -n "$PY" ] || return 0
    if ! "$PY" "$WORK/check.py" "$@" 2> "$WORK/pyerr"; then
        tail -n 3 "$WORK/pyerr" >&2
        fail "JSON check '$2' failed on merak-topo output"
    fi
}

# help, version
run 0 --help
grep -q -e '--tasks-per-node' "$WORK/out" || fail "--help does not list --tasks-per-node"
run 0 --version
grep -q '^merak-topo ' "$WORK/out" || fail "--version"

# every fixture: the node view as a table and as JSON
n=0
for f in "$TOPOS"/*.xml; do
    run 0 --input "$f"
    gpus=$(sed -n 's/^GPUs: \([0-9]*\).*/\1/p' "$WORK/out")
    [ -n "$gpus" ] && [ "$gpus" -gt 0 ] || fail "${f##*/}: no GPUs in the node view"
    run 0 --input "$f" --json
    check "$WORK/out" node "$gpus"
    n=$((n + 1))
done
[ "$n" -ge 6 ] || fail "only $n fixtures in $TOPOS"
echo "ok: $n fixtures shown as tables and JSON"
run 0
echo "ok: this machine shown"

# placements
run 0 --input "$H100" --nodes 4 --tasks-per-node 8 --dp 2 --tp 8 --pp 2 --json
check "$WORK/out" h100
run 0 --input "$H100" --nodes 4 --tasks-per-node 8 --dp 2 --tp 8 --pp 2
[ "$(grep -c '^[0-9]' "$WORK/out")" -eq 32 ] || fail "the table does not have 32 tasks"
grep -q 'tp pairs on NVLink *112 of 112' "$WORK/out" || fail "table score"
echo "ok: DGX H100 x4, tp=8: one node per group, vendor NIC pairing, cores on the GPU's socket"
run 0 --input "$H100" -N 2 --tasks-per-node 8 --dp 2 --tp 4 --pp 2 --json
check "$WORK/out" h100
echo "ok: DGX H100 x2, tp=4 pp=2"
for f in "$TOPOS"/*.xml; do
    run 0 --input "$f" -N 3 --tp 2 --pp 3 --json
    check "$WORK/out" any
done
echo "ok: every fixture, 3 nodes, tp=2 pp=3"
run 0 --input "$PCIE" -N 2 --tp 4 --json
check "$WORK/out" pcie
echo "ok: PCIe two-socket node, tp=4: groups on one socket"
run 0 --input "$H100" -N 2 --tp 8 --distribution cyclic --json
check "$WORK/out" cyclic 2
run 0 --input "$H100" --tasks-per-node '8(x3)' --tp 4 --pp 3 -m cyclic --json
check "$WORK/out" cyclic 3
echo "ok: cyclic distribution renumbered"
run 0 --input "$H100" --tasks-per-node 8,4,4 --tp 4 --pp 2 --json
check "$WORK/out" any
echo "ok: uneven tasks per node"

# refusals and bad input
refuse 2 'needs 8 tasks on one node.*--ntasks-per-node=8 (or a multiple of 8)' \
    --input "$H100" -N 2 --tasks-per-node 4 --tp 8
refuse 2 'multiple of 4 tasks on every node' --input "$H100" -N 2 --tasks-per-node 6 --tp 4
refuse 2 'dp\*tp\*pp = 2\*8\*2 = 32 ranks but the job has 24 tasks' \
    --input "$H100" -N 3 --tasks-per-node 8 --dp 2 --tp 8 --pp 2
refuse 2 '16 tasks but 8 GPUs' --input "$H100" --tasks-per-node 16 --tp 8
refuse 2 "unknown option '--bogus'" --bogus
refuse 2 "needs a value" --input "$H100" --tp
refuse 2 "not an integer" --input "$H100" --tp abc
refuse 2 "out of range" --input "$H100" --pp 0
refuse 2 "not block or cyclic" --input "$H100" --distribution plane
refuse 2 "is not a count" --input "$H100" --tasks-per-node '8(x2'
refuse 2 "lists 3 nodes but --nodes is 2" --input "$H100" --tasks-per-node 8,8,8 -N 2
refuse 2 "unexpected argument" --input "$H100" extra
refuse 1 "cannot read" --input "$WORK/missing.xml"
printf '<topology version="2.0"><garbage' > "$WORK/bad.xml"
refuse 1 "not an hwloc XML topology" --input "$WORK/bad.xml"
# a mutated topology (from fuzzing) that hwloc 2.9 itself crashes on
refuse 1 "not a well-formed hwloc XML topology (hwloc crashed reading it" --input "$FIX/topology-hwloc-crash.xml"
# hwloc's warnings are errors: a GPU with a malformed bus id is not dropped silently
sed 's/pci_busid="0000:1b:00.0"/pci_busid="zz:qq"/' "$H100" > "$WORK/badbus.xml"
cmp -s "$H100" "$WORK/badbus.xml" && fail "the H100 file has no GPU at 0000:1b:00.0 to break"
refuse 1 "badbus.xml: hwloc does not read it cleanly: .*invalid pci_busid.*zz:qq" --input "$WORK/badbus.xml"
# a FIFO is refused, never waited on
mkfifo "$WORK/fifo.xml"
refuse 1 "fifo.xml: not a regular file" --input "$WORK/fifo.xml"
# hwloc's variables are read by merak-topo: what hwloc refuses is an error
# naming the variable, never this machine under the variable's name (each
# case in a subshell of its own, its variables with it)
(export HWLOC_XMLFILE="$WORK/fifo.xml"; refuse 1 "^merak-topo: HWLOC_XMLFILE=.*fifo.xml: not a regular file") || exit 1
(export HWLOC_XMLFILE="$WORK/bad.xml"; refuse 1 "^merak-topo: HWLOC_XMLFILE=.*bad.xml: not an hwloc XML topology") || exit 1
(export HWLOC_XMLFILE="$WORK/missing.xml"; refuse 1 "^merak-topo: HWLOC_XMLFILE=.*missing.xml: cannot read") || exit 1
(export HWLOC_SYNTHETIC="pack:100000 core:100000 pu:100000"
 refuse 1 "HWLOC_SYNTHETIC=pack:100000 core:100000 pu:100000: more than 16384 processing units") || exit 1
(export HWLOC_SYNTHETIC="bogus:3"; refuse 1 "HWLOC_SYNTHETIC=bogus:3: not a synthetic description hwloc accepts") || exit 1
(export HWLOC_XMLFILE="$H100"; run 0
 grep -q "^node: HWLOC_XMLFILE=$H100\$" "$WORK/out" && grep -q "^GPUs: 8 " "$WORK/out" ||
     { cat "$WORK/out" >&2; fail "HWLOC_XMLFILE=$H100: not the DGX H100 under its name"; }) || exit 1
(export HWLOC_SYNTHETIC="pack:2 core:4 pu:2"; run 0
 grep -q "^node: HWLOC_SYNTHETIC=pack:2 core:4 pu:2\$" "$WORK/out" ||
     { cat "$WORK/out" >&2; fail "HWLOC_SYNTHETIC: not named after its description"; }) || exit 1
echo "ok: HWLOC_XMLFILE and HWLOC_SYNTHETIC: the topology named after them; FIFOs, garbage and 10^15 PUs refused"

[ -n "$PY" ] || skip "python3 not found: the JSON output was not checked"
echo "PASS"
