#!/bin/sh
# examples/custom_model.c: a model that is neither GPT-2 nor LLaMA, built
# through the public API and trained by the trainer, in one process and on
# 8 MPI ranks with dp = tp = pp = 2; its loss must fall both times.
. "$(dirname "$0")/lib.sh"
make_shard "$WORK/data.bin"
falls() {
    cat "$WORK/out"
    first=$(sed -n 's/^step *0 | loss \([0-9.]*\).*/\1/p' "$WORK/out")
    last=$(sed -n 's/^step *29 | loss \([0-9.]*\).*/\1/p' "$WORK/out")
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < a - 1.0) }' || fail "$1: loss did not fall ($first -> $last)"
}
"$MERAK_BUILDDIR/examples/custom_model" "$WORK/data.bin" 30 > "$WORK/out" || fail "custom_model exited $?"
falls "one process"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
if [ -x "$WRAP" ]; then
    "$WRAP" 8 "$MERAK_BUILDDIR/examples/custom_model" "$WORK/data.bin" 30 2 2 2 > "$WORK/out" ||
        fail "custom_model on 8 ranks exited $?"
    grep -q "on 8 rank(s)" "$WORK/out" || fail "custom_model did not run on 8 ranks"
    falls "dp=tp=pp=2"
fi
echo "example: ok"
