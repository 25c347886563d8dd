#!/bin/sh
# examples/custom_model.c: a model that is neither GPT-2 nor LLaMA, built
# through the public API and trained by merak_train; its loss must fall.
. "$(dirname "$0")/lib.sh"
make_shard "$WORK/data.bin"
"$MERAK_BUILDDIR/examples/custom_model" "$WORK/data.bin" 30 > "$WORK/out" || fail "custom_model exited $?"
cat "$WORK/out"
first=$(sed -n 's/^step *0 | loss \([0-9.]*\).*/\1/p' "$WORK/out")
last=$(sed -n 's/^step *29 | loss \([0-9.]*\).*/\1/p' "$WORK/out")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < a - 1.0) }' || fail "loss did not fall ($first -> $last)"
echo "example: ok"
