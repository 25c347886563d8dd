#!/bin/sh
# Valgrind (memcheck) over the runtime in a build without sanitizers (check.sh
# runs it in make distcheck's build; under AddressSanitizer it skips): no
# invalid read or write and no use of uninitialised memory in one process
# (training with validation, a checkpoint and a resume from it), in a
# 2-stage pipeline over MPI (Open MPI's own suppressions and
# tests/valgrind.supp) and in merak-shard with a tokenizer; no definite leak
# outside MPI.
. "$(dirname "$0")/lib.sh"
command -v valgrind > /dev/null 2>&1 || skip "no valgrind (scripts/install-deps.sh installs it)"
if grep -q -- '-fsanitize' "$MERAK_BUILDDIR/Makefile"; then
    skip "a sanitizer build (valgrind cannot run it; make distcheck's build runs this)"
fi
# libtool's wrappers are scripts: run the programs themselves (.libs holds
# them only when the build dir's merak-train is such a wrapper; a program
# left there by an older build would be stale)
BIN=$MERAK_BUILDDIR
[ "$(head -c 2 "$BIN/merak-train")" != '#!' ] || BIN=$MERAK_BUILDDIR/.libs
export LD_LIBRARY_PATH="$MERAK_BUILDDIR/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SUPP="--suppressions=$MERAK_SRCDIR/tests/valgrind.supp"
[ -f /usr/share/openmpi/openmpi-valgrind.supp ] && SUPP="$SUPP --suppressions=/usr/share/openmpi/openmpi-valgrind.supp"
VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite $SUPP"
make_shard "$WORK/data.bin"
run() { # NAME CMD...: CMD under valgrind exits 0 with nothing reported
    name=$1; shift
    "$@" > "$WORK/vg.out" 2>&1 || { tail -40 "$WORK/vg.out" >&2; fail "$name: valgrind reported errors (or the run failed)"; }
    ! grep -q '^==[0-9]*== ' "$WORK/vg.out" || { cat "$WORK/vg.out" >&2; fail "$name: valgrind reported something"; }
    echo "ok: $name: clean"
}
T="--model tiny-gpt2 --data $WORK/data.bin --micro-batch 2 --seq-len 16 --threads 1"
run "train, validation, checkpoint" $VG "$BIN/merak-train" $T --steps 2 --val-data "$WORK/data.bin" \
    --eval-every 1 --eval-batches 2 --save "$WORK/ck"
run "resume" $VG "$BIN/merak-train" $T --steps 3 --resume latest --save "$WORK/ck"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
if [ -x "$WRAP" ]; then
    # Open MPI's initialisation leaks (its unloaded components): leaks are
    # checked in the single-process runs above, errors here
    run "2 pipeline stages over MPI" "$WRAP" 2 ${VG%%--leak-check=full*} $SUPP "$BIN/merak-train" $T --steps 2 --pp 2 \
        --micro-batches 2 --val-data "$WORK/data.bin" --eval-every 1 --eval-batches 2
fi
run "merak-shard --tokenizer" $VG "$BIN/merak-shard" --tokenizer "$FIX/tokenizer-bytes.json" -o "$WORK/t.bin" \
    "$WORK/corpus.txt" "$MERAK_SRCDIR/README.md"
