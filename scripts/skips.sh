#!/bin/sh
# skips.sh - after `make check`: every test that skipped, with its reason, so a
# green run cannot hide what it did not test; and, when CI=true, a failure for
# each test that CI must run (MUST_RUN) but that skipped.
#
#   scripts/skips.sh [BUILDDIR]        (default: the current folder)
#
# Reads the automake harness's files under BUILDDIR/tests: NAME.trs says SKIP,
# NAME.log says why.  A shell test exits 77 after tests/lib.sh's skip has
# printed "SKIP: reason" (else its last line of output is taken); a TAP
# program writes "ok N - what # SKIP reason" or "1..0 # SKIP reason", which the
# TAP driver logs as "SKIP: NAME N - what # SKIP reason" or "SKIP: NAME - reason".
# Prints "skipped, and why:" and one line per skip, "NAME[ N - what] # SKIP reason".
# Exit status: the number of MUST_RUN tests that skipped under CI=true (0: none).
set -eu
# The PyTorch comparison, the MPI equivalence test and the tokenizer
# comparison prove the most and skip the most easily (no torch, no mpirun,
# no tokenizers library): CI runs them.  (The Slurm plugin's test runs in
# make distcheck's build, where check.sh makes every skip a failure.)
MUST_RUN="tests/ref_compare.sh tests/mpi/mpi_equiv.sh tests/tokenizer.sh tests/generate.sh"

dir=${1:-.}
dir=${dir%/}
[ -d "$dir/tests" ] || { echo "skips.sh: $dir/tests: no such folder (give the build folder)" >&2; exit 125; }

report=
bad=
for trs in $(find "$dir/tests" -name '*.trs' | sort); do
    grep -q '^:test-result: SKIP' "$trs" || continue
    log=${trs%.trs}.log
    name=${trs#"$dir"/}
    name=${name%.trs}
    last=$(tail -n 1 "$log" 2> /dev/null || true)
    case $last in
    "SKIP "*" (exit status: "*")") # test-driver: a shell test that exited 77
        name=${last#SKIP }
        name=${name% (exit status: *}
        reason=$(sed -n 's/^SKIP: //p' "$log" | tail -n 1)
        [ -n "$reason" ] || reason=$(sed '$d' "$log" | sed '/^[[:space:]]*$/d' | tail -n 1)
        lines="$name # SKIP ${reason:-(no reason given)}"
        ;;
    *) # tap-driver: one line per skipped test point, or one for the whole program
        lines=$(awk -v n="$name" '
            $0 == "SKIP: " n { print n " # SKIP (no reason given)"; next }
            index($0, "SKIP: " n " ") == 1 {
                d = substr($0, length(n) + 8)
                print (substr(d, 1, 2) == "- ") ? n " # SKIP " substr(d, 3) : n " " d
            }' "$log" 2> /dev/null || true)
        [ -n "$lines" ] || lines="$name # SKIP (no reason in $log)"
        ;;
    esac
    report="$report$lines
"
    if [ "${CI:-}" = true ]; then
        case " $MUST_RUN " in
        *" $name "*) bad="$bad$lines
" ;;
        esac
    fi
done

if [ -n "$report" ]; then
    echo "skipped, and why:"
    printf '%s' "$report" | sed 's/^/  /'
fi
n=0
if [ -n "$bad" ]; then
    # "NAME # SKIP reason" -> one line naming the test and the reason.
    printf '%s' "$bad" | sed 's/^\([^ ]*\) # SKIP \(.*\)$/skips.sh: CI=true, but \1 skipped: \2; CI must run it/'
    n=$(printf '%s' "$bad" | wc -l)
fi
exit "$n"
