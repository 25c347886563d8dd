#!/bin/sh
# A graph of the C API that the step loop cannot feed, under mpirun with
# pp = 2: no input called input_ids, or input_ids of another shape than the
# micro-batch and sequence length.  Rank 0 prints one clear line, every
# rank exits non-zero, nothing hangs (each case has 60 s).
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
PROG=$MERAK_BUILDDIR/tests/mpi/bad_graph
[ -x "$WRAP" ] || skip "no mpirun wrapper"
[ -x "$PROG" ] || fail "$PROG was not built"
make_shard "$WORK/data.bin"
export MERAK_MPI_TIMEOUT=60

expect() {
    mode=$1 pattern=$2
    set +e
    "$WRAP" 2 "$PROG" "$WORK/data.bin" "$mode" > "$WORK/out" 2> "$WORK/err"
    rc=$?
    set -e
    lines=$(grep -c '^bad_graph:' "$WORK/err" || true)
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" "$WORK/err"; then
        cat "$WORK/err" >&2
        fail "$mode: expected a non-zero exit and one line matching '$pattern' (exit $rc, $lines line(s))"
    fi
    grep -q 'ERROR: AddressSanitizer\|runtime error:' "$WORK/err" && { cat "$WORK/err" >&2; fail "$mode: sanitizer report"; }
    echo "ok ($mode, pp=2): $(grep '^bad_graph:' "$WORK/err")"
}

expect noids "the graph needs inputs named 'input_ids' and 'targets'"
expect shape "the graph's input_ids and targets are not (4,16), the micro-batch and sequence length"
echo "mpi_bad_graph: ok"
