#!/bin/sh
# check.sh - the README's second command: installs the dependencies, builds
# Merak with warnings as errors under AddressSanitizer and UBSan in build-check/,
# runs the whole test suite, then checks the release tarball (make distcheck,
# which runs the valgrind and Slurm tests in its sanitizer-free build and
# loads the installed modulefiles) and builds it with EasyBuild
# (tests/easybuild.sh).
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
autoreconf -fi
rm -rf build-check
mkdir build-check
cd build-check
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
../configure --enable-werror CFLAGS="-g -O1 $san" LDFLAGS="$san"
make -j"$(nproc)"
# ASan's leak checker cannot follow OpenMP/OpenBLAS thread pools reliably
# (see tests/lsan.supp); leaks are still reported for our own allocations.
status=0
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 make -j"$(nproc)" check || status=$?
# Every skip and its reason; with CI=true, a skip of a test that CI must run
# (scripts/skips.sh names them) fails the run and counts as a failure below.
must=0
../scripts/skips.sh . || must=$?
# The suite's totals, from automake's summary, as one closing line.
count() { n=$(sed -n "s/^# $1: *\([0-9]*\)$/\1/p" test-suite.log 2> /dev/null); echo "${n:-0}"; }
summary() {
    echo "check.sh: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) + $(count XPASS) + must )) failed, $(( $(count SKIP) - must )) skipped"
}
if [ "$status" -ne 0 ]; then
    for f in $(find . -name '*.log' -path '*tests*'); do
        grep -q '^:test-result: \(FAIL\|ERROR\|XPASS\)' "${f%.log}.trs" 2>/dev/null && { echo "=== $f"; grep '^FAIL' "$f" | head -n 5; echo "--- its last 50 lines"; tail -50 "$f"; }
    done
    summary
    exit "$status"
fi
if [ "$must" -ne 0 ]; then
    summary
    exit 1
fi
# The tarball's build has no sanitizers: valgrind and the Slurm cluster
# (whose slurmstepd cannot run a plugin under GCC 12's libasan) run there,
# and only there; with CI=true a skip there is a failure (MERAK_MUST_RUN,
# tests/lib.sh), and a failure prints the test's log (VERBOSE).  make
# installcheck, part of distcheck, loads the installed modulefiles under
# Lmod (tests/modules.sh).
must_run=
[ "${CI:-}" != true ] || must_run=1
MERAK_MUST_RUN=$must_run make -j"$(nproc)" distcheck DISTCHECK_CONFIGURE_FLAGS="--enable-werror" \
    TESTS="tests/valgrind.sh tests/slurm_plugin.sh" VERBOSE=yes ||
    { summary; echo "check.sh: make distcheck failed"; exit 1; }
# EasyBuild (from PyPI) on the release tarball distcheck has just checked.
version=$(sed -n 's/^PACKAGE_VERSION = //p' Makefile)
sh ../tests/easybuild.sh "merak-$version.tar.gz" || { summary; echo "check.sh: the easyconfig test failed"; exit 1; }
summary
