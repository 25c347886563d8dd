#!/bin/sh
# check.sh - the README's second command: installs the dependencies, builds
# Merak with warnings as errors under AddressSanitizer and UBSan in build-check/,
# runs the whole test suite, then checks the release tarball (make distcheck).
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
if [ "$status" -ne 0 ]; then
    for f in $(find . -name '*.log' -path '*tests*'); do
        grep -q '^FAIL\|^ERROR\|^# FAIL:  *[1-9]' "${f%.log}.trs" 2>/dev/null && { echo "=== $f"; tail -50 "$f"; }
    done
    exit "$status"
fi
make -j"$(nproc)" distcheck DISTCHECK_CONFIGURE_FLAGS="--enable-werror" TESTS=
# The suite's totals, from automake's summary, as one closing line.
count() { sed -n "s/^# $1: *\([0-9]*\)$/\1/p" test-suite.log; }
echo "check.sh: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) )) failed, $(count SKIP) skipped"
