# lib.sh - what the benchmark scripts share.  Sourced after `set -eu`:
#
#   . "$(dirname "$0")/lib.sh"
#   bench_setup bench_NAME "$BUILDDIR" merak-train merak-shard

# bench_setup NAME BUILDDIR [PROGRAM...]: NAME starts die's messages;
# BUILDDIR must hold every PROGRAM, and becomes an absolute path; SRCDIR is
# the source tree; TMP a fresh directory, removed when the script ends;
# mpirun may run as root.
bench_setup() {
    BENCH=$1
    BUILDDIR=$2
    shift 2
    [ -d "$BUILDDIR" ] || die "$BUILDDIR is not a directory (usage: $0 BUILDDIR)"
    for prog in "$@"; do
        [ -x "$BUILDDIR/$prog" ] || die "$BUILDDIR/$prog not found (usage: $0 BUILDDIR)"
    done
    BUILDDIR=$(cd "$BUILDDIR" && pwd)
    SRCDIR=$(cd "$(dirname "$0")/.." && pwd)
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$BENCH.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
    trap 'exit 130' INT TERM
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}

die() { echo "${BENCH:-bench}: $*" >&2; exit 1; }

# quiet CMD...: runs CMD with its output in $TMP/quiet.log; if it fails,
# shows the end of the log and ends the script.
quiet() {
    "$@" > "$TMP/quiet.log" 2>&1 || { tail -n 20 "$TMP/quiet.log" >&2; die "failed: $*"; }
}

# bench_need PYTHON MODULE...: exits 0 ("NAME: skipped: ...") unless PYTHON
# imports every MODULE.
bench_need() {
    py=$1
    shift
    "$py" -c "import $(echo "$@" | tr ' ' ',')" > /dev/null 2>&1 ||
        { echo "$BENCH: skipped: $py cannot import $*"; exit 0; }
}

# bench_shard FILE: a byte-level token shard (merak-shard) of the project's
# C sources, the text the pipeline benchmarks train on.
bench_shard() {
    find "$SRCDIR/runtime" "$SRCDIR/kernels/cpu" -name '*.[ch]' | LC_ALL=C sort | xargs cat > "$TMP/shard.txt"
    "$BUILDDIR/merak-shard" -o "$1" "$TMP/shard.txt" > /dev/null
}

# median of the numbers on stdin, one per line
median() { LC_ALL=C sort -g | awk '{v[NR]=$1} END {if (NR==0) exit 1; if (NR%2) print v[(NR+1)/2]; else printf "%.6f\n", (v[NR/2]+v[NR/2+1])/2}'; }
