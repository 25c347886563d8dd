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
    expect_job_fails bad_graph "$pattern" "$WRAP" 2 "$PROG" "$WORK/data.bin" "$mode"
    grep -q 'ERROR: AddressSanitizer\|runtime error:' "$WORK/err" && { cat "$WORK/err" >&2; fail "$mode: sanitizer report"; }
    echo "ok ($mode, pp=2): $(grep '^bad_graph:' "$WORK/err")"
}

expect noids "the graph needs inputs named 'input_ids' and 'targets'"
expect shape "the graph's input_ids and targets are not (4,16), the micro-batch and sequence length"
echo "mpi_bad_graph: ok"
