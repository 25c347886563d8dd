# lib.sh - shared helpers for the shell tests (sourced, not run).
# The automake harness exports MERAK_SRCDIR and MERAK_BUILDDIR; run by hand
# from the source tree, the tree is the first folder above the test that
# holds tests/lib.sh (tests/ or tests/mpi/ alike).
set -eu
if [ -z "${MERAK_SRCDIR:-}" ]; then
    MERAK_SRCDIR=$(cd "$(dirname "$0")" && while [ ! -f tests/lib.sh ] && [ "$PWD" != / ]; do cd ..; done && pwd)
fi
: "${MERAK_BUILDDIR:=$MERAK_SRCDIR}"
TRAIN=$MERAK_BUILDDIR/merak-train
SHARD=$MERAK_BUILDDIR/merak-shard
FIX=$MERAK_SRCDIR/tests/fixtures
# A python3 for plain scripts (json, struct): configure's PyTorch one when
# it found one (TORCH_PYTHON, "none" without), else Debian's.
PY3=${TORCH_PYTHON:-none}
[ "$PY3" != none ] || PY3=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/merak-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fail() { fail_msg="$*"; echo "FAIL: $*" >&2; exit 1; }   # fail_msg: for an EXIT trap
# skip REASON: exit 77, unless MERAK_MUST_RUN is set (check.sh sets it for
# the tests make distcheck runs under CI=true): then the skip is a failure.
skip() {
    [ -z "${MERAK_MUST_RUN:-}" ] || fail "MERAK_MUST_RUN is set, and this test would skip: $*"
    echo "SKIP: $*" >&2
    exit 77
}

# A byte-level shard made from the project's own sources (about 100k tokens).
make_shard() {
    find "$MERAK_SRCDIR/runtime" "$MERAK_SRCDIR/kernels/cpu" -name '*.[ch]' | sort | head -20 |
        xargs cat > "$WORK/corpus.txt"
    "$SHARD" -o "$1" "$WORK/corpus.txt" >/dev/null
}

# Prints field $2 of every line of metrics file $1, one per line.
metric() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; }

# capture CMD...: runs CMD, its stdout in $WORK/out, its stderr in
# $WORK/err, its exit status in $rc.
capture() {
    set +e
    "$@" > "$WORK/out" 2> "$WORK/err"
    rc=$?
    set -e
}

# expect_exit STATUS PATTERN CMD...: a refusal: CMD exits with STATUS and
# prints exactly one line on stderr, matching PATTERN.
expect_exit() {
    want=$1 pattern=$2; shift 2
    capture "$@"
    lines=$(wc -l < "$WORK/err")
    if [ "$rc" -ne "$want" ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" "$WORK/err"; then
        echo "--- $*" >&2; cat "$WORK/err" >&2
        fail "expected exit $want and one line matching '$pattern', got exit $rc and $lines line(s)"
    fi
    echo "ok ($rc): $(cat "$WORK/err")"
}

# expect_job_fails NAME PATTERN CMD...: a parallel job that every rank must
# refuse alike: CMD exits non-zero (124 is the wrapper's timeout: a hang),
# and stderr has exactly one line starting "NAME:", matching PATTERN.
expect_job_fails() {
    name=$1 pattern=$2; shift 2
    capture "$@"
    lines=$(grep -c "^$name:" "$WORK/err" || true)
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" "$WORK/err"; then
        cat "$WORK/err" >&2
        fail "$*: expected a non-zero exit and one line matching '$pattern' (exit $rc, $lines line(s))"
    fi
}

# rank_pid MARKER RANK JOB: prints the pid of the merak-train of MPI rank
# RANK among those whose command line holds "--metrics MARKER"; kills JOB
# and fails if there is none (call it as victim=$(rank_pid ...) || exit 1).
# survivors MARKER START: how many processes run with --metrics MARKER,
# asked each second until none is left or START + 30 s (a rank mpirun
# killed can take a moment to be torn down on a loaded machine)
survivors() {
    n=$(pgrep -f -- "--metrics $1" | wc -l)
    while [ "$n" -gt 0 ] && [ $(($(date +%s) - $2)) -le 30 ]; do
        sleep 1
        n=$(pgrep -f -- "--metrics $1" | wc -l)
    done
    echo "$n"
}

rank_pid() {
    for p in $(pgrep -f -- "--metrics $1"); do
        r=$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ "$r" = "$2" ] && { echo "$p"; return 0; }
    done
    kill "$3"
    fail "no merak-train of MPI rank $2 found"
}

# wait_lines FILE N JOB: waits until FILE (a metrics file) has N lines, at
# most 120 s; if not, kills JOB and fails.
wait_lines() {
    i=0
    while [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$2" ]; do
        i=$((i + 1))
        [ $i -le 1200 ] || { kill -9 "$3"; fail "training did not reach $2 steps within 120 s"; }
        sleep 0.1
    done
}

# stopped_at SIGNAL DIR: after a job stopped by SIGNAL with --save DIR, the
# step of DIR's one checkpoint, which $WORK/err must name as the stop.
stopped_at() {
    step=$(sed -n 's/^step //p' "$2"/step_*/DONE)
    [ -n "$step" ] && grep -q "stopped by signal $1 after step $step" "$WORK/err" ||
        { cat "$WORK/err" >&2; fail "no checkpoint in $2 or no stop message after signal $1"; }
    echo "$step"
}
