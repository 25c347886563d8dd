#!/bin/sh
# Device collectives as the core drives them (tests/mpi/dcoll_probe: a fake
# table injected on the dp group of 2 ranks, on CPUs): device buffers go to
# the table and host buffers to MPI, counted alike; a failing table's line
# becomes the comm's error; a table that never returns is ended by the
# watchdog, which asks the table to abort first (as NCCL's waits do),
# exit 1 within seconds.  The pipeline's device point-to-point (--p2p
# nccl) the same way on the pp group: device buffers to the table, host
# ones to MPI, refused without a table, a start that never returns timed
# by the watchdog.  Ranks on one host compare device
# ids (shared GPUs); merak-train on 2 CPU ranks says its collectives are
# MPI's, and refuses --coll nccl and --p2p nccl once each, as usage errors.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
PROBE=$MERAK_BUILDDIR/tests/mpi/dcoll_probe
[ -x "$WRAP" ] || skip "no mpirun wrapper"
[ -x "$PROBE" ] || fail "$PROBE was not built"
export MERAK_MPI_TIMEOUT=60

"$WRAP" 2 "$PROBE" sum > "$WORK/sum" 2> "$WORK/sum.err" || { cat "$WORK/sum.err" >&2; fail "sum: the probe failed"; }
for r in 0 1; do
    # 2 calls to the table (blocking, with a request; the host buffer went to
    # MPI, which summed it: 2 and 8), 16 + 16 + 16 bytes counted
    grep -q "^rank $r: rc 0 0 0 0 calls 2 device 21 host 2 8 bytes 48$" "$WORK/sum" ||
        { cat "$WORK/sum" >&2; fail "sum: rank $r's line"; }
done

"$WRAP" 2 "$PROBE" fail > "$WORK/fail" 2> "$WORK/fail.err" || { cat "$WORK/fail.err" >&2; fail "fail: the probe failed"; }
for r in 0 1; do
    grep -q "^rank $r: rc -1 calls 1 error: fakeAllReduce on the dp group failed: injected$" "$WORK/fail" ||
        { cat "$WORK/fail" >&2; fail "fail: rank $r's line"; }
done

start=$(date +%s)
set +e
"$WRAP" 2 "$PROBE" hang > "$WORK/hang" 2> "$WORK/hang.err"
rc=$?
set -e
took=$(($(date +%s) - start)) hang_rc=$rc
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$WORK/hang.err" >&2; fail "hang: the job exited $rc"; }
[ "$took" -le 30 ] || fail "hang: the job took ${took}s to end"
grep -q "no progress for [0-9]* s in all-reduce of the dp group" "$WORK/hang.err" ||
    { cat "$WORK/hang.err" >&2; fail "hang: no watchdog line"; }
grep -q "fake dcoll aborted on the dp group" "$WORK/hang.err" ||
    { cat "$WORK/hang.err" >&2; fail "hang: the watchdog did not abort the table"; }
# two ranks of this host: the same id is a shared device, different ids are
# not, an id that cannot tell counts as shared
"$WRAP" 2 "$PROBE" shared > "$WORK/shared" 2> "$WORK/shared.err" || { cat "$WORK/shared.err" >&2; fail "shared: the probe failed"; }
for r in 0 1; do
    grep -q "^rank $r: shared 1 0 1$" "$WORK/shared" || { cat "$WORK/shared" >&2; fail "shared: rank $r's line"; }
done

# --p2p nccl's path: the table opened once on each rank; rank 0 sent two
# device messages to it (16 + 16 bytes) and a host one to MPI (16); rank 1
# received both device ones (the second after zeroing 2 values: 1 and 4
# again) and the host one (5 and 8); "mpi" switches back (dp2p 0).  A
# build without CUDA has no "nccl".
"$WRAP" 2 "$PROBE" p2p > "$WORK/p2p" 2> "$WORK/p2p.err" || { cat "$WORK/p2p.err" >&2; fail "p2p: the probe failed"; }
if grep -q "refused: p2p 'nccl' is not" "$WORK/p2p"; then
    echo "mpi_dcoll: a build without NCCL: no --p2p nccl"
else
    grep -q "^rank 0: rc 0 0 0 0 opened 1 sends 2 receives 0 device 1 4 host 5 8 bytes 48 back 0 0$" "$WORK/p2p" &&
        grep -q "^rank 1: rc 0 0 0 0 opened 1 sends 0 receives 2 device 1 4 host 5 8 bytes 0 back 0 0$" "$WORK/p2p" ||
        { cat "$WORK/p2p" >&2; fail "p2p: the ranks' lines"; }
    "$WRAP" 2 "$PROBE" p2p-none > "$WORK/none" 2> "$WORK/none.err" || { cat "$WORK/none.err" >&2; fail "p2p-none: the probe failed"; }
    [ "$(grep -c "refused: p2p nccl on the pp group: its device collectives are not" "$WORK/none")" -eq 2 ] ||
        { cat "$WORK/none" >&2; fail "p2p-none: not refused on both ranks"; }
    # a device send that never starts is timed like a blocking one
    start=$(date +%s)
    set +e
    "$WRAP" 2 "$PROBE" p2p-hang > "$WORK/phang" 2> "$WORK/phang.err"
    rc=$?
    set -e
    took=$(($(date +%s) - start))
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$WORK/phang.err" >&2; fail "p2p-hang: the job exited $rc"; }
    [ "$took" -le 30 ] || fail "p2p-hang: the job took ${took}s to end"
    grep -q "no progress for [0-9]* s in starting a send" "$WORK/phang.err" ||
        { cat "$WORK/phang.err" >&2; fail "p2p-hang: no watchdog line for the send's start"; }
    grep -q "fake dcoll aborted on the pp group" "$WORK/phang.err" ||
        { cat "$WORK/phang.err" >&2; fail "p2p-hang: the watchdog did not abort the table"; }
fi

make_shard "$WORK/data.bin"
T="--model tiny-gpt2 --data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 1 --threads 1 --dp 2"
"$WRAP" 2 "$TRAIN" $T > "$WORK/train.out" 2>&1 || { cat "$WORK/train.out" >&2; fail "2 CPU ranks failed"; }
grep -q "^collectives: mpi (tensors in host memory)$" "$WORK/train.out" ||
    { cat "$WORK/train.out" >&2; fail "2 CPU ranks did not say their collectives are MPI's"; }
set +e
"$WRAP" 2 "$TRAIN" $T --coll nccl > "$WORK/nccl.out" 2> "$WORK/nccl.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || { cat "$WORK/nccl.err" >&2; fail "--coll nccl on CPU ranks exited $rc, not 2"; }
n=$(grep -c "coll nccl needs tensors on GPUs\|coll 'nccl' is not mpi" "$WORK/nccl.err" || true)
[ "$n" -eq 1 ] || { cat "$WORK/nccl.err" >&2; fail "--coll nccl on CPU ranks: $n lines, not one"; }
set +e
"$WRAP" 2 "$TRAIN" $T --p2p nccl > "$WORK/p2p.out" 2> "$WORK/p2p.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || { cat "$WORK/p2p.err" >&2; fail "--p2p nccl on CPU ranks exited $rc, not 2"; }
n=$(grep -c "p2p nccl needs tensors on GPUs\|p2p 'nccl' is not mpi" "$WORK/p2p.err" || true)
[ "$n" -eq 1 ] || { cat "$WORK/p2p.err" >&2; fail "--p2p nccl on CPU ranks: $n lines, not one"; }
echo "mpi_dcoll: ok (the hang ended in ${took}s, exit $hang_rc)"
