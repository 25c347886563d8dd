#!/bin/sh
# The benchmark scripts run from a build directory with nothing installed
# (and no MERAK_DEVICES), and what they print holds up:
# bench_traffic.sh's bytes per group equal the analytic volume on every row
# that has a formula, and bench_schedules.sh traces two schedules and
# simulates them (a row each, every number positive).  No time is judged
# here: the numbers are read in bench/RESULTS.md.
. "$(dirname "$0")/lib.sh"
command -v mpirun > /dev/null 2>&1 || skip "no mpirun"
command -v python3 > /dev/null 2>&1 || skip "no python3"
# the MPI tests' transport (tests/mpirun-wrapper.sh.in says why)
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} OMPI_MCA_osc=${OMPI_MCA_osc:-^ucx}
export OMPI_MCA_btl_base_warn_component_unused=0
unset MERAK_DEVICES
BENCH=$MERAK_SRCDIR/bench

run() {   # run NAME [VAR=VALUE...]: bench/NAME.sh on this build, its output in $WORK/NAME
    name=$1; shift
    if ! env "$@" timeout 600 sh "$BENCH/$name.sh" "$MERAK_BUILDDIR" > "$WORK/$name" 2>&1; then
        cat "$WORK/$name" >&2
        fail "$name.sh failed"
    fi
    cat "$WORK/$name"
}

run bench_traffic
rows=$(grep -c '^bench_traffic ' "$WORK/bench_traffic" || true)
[ "$rows" -ge 10 ] || fail "bench_traffic printed $rows rows"
off=$(grep '^bench_traffic ' "$WORK/bench_traffic" | grep -v -e 'ratio=1\.00$' -e 'ratio=-$' || true)
[ -z "$off" ] || fail "bytes differ from the analytic volume: $off"
grep -q 'ratio=1\.00$' "$WORK/bench_traffic" || fail "no row was checked against a formula"

run bench_schedules SCHEDULES="1f1b:none zb-h1:none"
for s in "1f1b, recompute none" "zb-h1, recompute none"; do
    grep "^$s " "$WORK/bench_schedules" | awk '{n = 0; for (i = NF - 3; i <= NF; i++) if ($i + 0 > 0) n++; exit n != 4}' ||
        fail "bench_schedules has no row of four positive numbers for $s"
done
echo "ok: the benchmark scripts ran from the build directory"
