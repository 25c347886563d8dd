#!/bin/sh
# readme.sh - the README's "Using it" commands run as written, so the
# README cannot drift from the programs: every indented block of that
# section (up to the next "## " heading) is taken from README.md as it is,
# continuation lines joined, and run in order by one shell with -e, from a
# folder that holds a "build" folder of links to this build's programs.
# Only these changes are made, each printed:
#   - long runs are made short: --steps 3, --warmup 1, --save-every 1,
#     --eval-every 2, --sample-every 2, --max-tokens 16;
#   - the inputs the README assumes exist are made real: corpus.txt and
#     held-out.txt (text of the man pages), tokenizer.json (a byte-level
#     BPE fixture);
#   - commands for a Slurm cluster (srun, tests/slurm/try.sh) are shown and
#     not run: tests/slurm_plugin.sh runs the plugin and the examples.
# mpirun runs as the user types it; the environment only lets it run as
# root, oversubscribed, on the MPI tests' transports.
. "$(dirname "$0")/lib.sh"
command -v mpirun > /dev/null 2>&1 || skip "no mpirun"
README=$MERAK_SRCDIR/README.md
[ -f "$README" ] || fail "no $README"

awk '
    /^## / { inside = ($0 == "## Using it") ; next }
    !inside { next }
    /^    / {
        line = substr($0, 5)
        if (cont != "") { sub(/^ +/, "", line); line = cont line; cont = "" }
        if (line ~ /\\$/) { cont = substr(line, 1, length(line) - 1); next }
        print line
        next
    }
' "$README" > "$WORK/readme.cmds"
[ -s "$WORK/readme.cmds" ] || fail "README.md has no indented commands under '## Using it'"
# Nothing may be left half-joined: a continuation line ending in a comment
# ("\   # ...") would end the command there when a user pastes it.
grep -n '\\ *#' "$WORK/readme.cmds" && fail "a README command continues a line after a comment"

sed -e 's/--steps [0-9][0-9]*/--steps 3/g' -e 's/--warmup [0-9][0-9]*/--warmup 1/g' \
    -e 's/--save-every [0-9][0-9]*/--save-every 1/g' -e 's/--eval-every [0-9][0-9]*/--eval-every 2/g' \
    -e 's/--sample-every [0-9][0-9]*/--sample-every 2/g' -e 's/--max-tokens [0-9][0-9]*/--max-tokens 16/g' \
    -e 's|^\(srun .*\)|echo "not run here (tests/slurm_plugin.sh runs the plugin): \1"|' \
    -e 's|^\(bash tests/slurm/.*\)|echo "not run here (tests/slurm_plugin.sh runs the plugin): \1"|' \
    "$WORK/readme.cmds" > "$WORK/readme.sh"
echo "--- the README's commands, as run (diff against the README's):"
diff "$WORK/readme.cmds" "$WORK/readme.sh" || true
n=$(grep -c -v '^ *\(#\|$\)' "$WORK/readme.sh")

mkdir "$WORK/build"
for p in "$MERAK_BUILDDIR"/merak-*; do
    [ -x "$p" ] && [ -f "$p" ] && ln -s "$p" "$WORK/build/"
done
cat "$MERAK_SRCDIR"/man/*.1 > "$WORK/build/corpus.txt"
cat "$MERAK_SRCDIR"/man/*.7 "$MERAK_SRCDIR"/man/*.8 > "$WORK/build/held-out.txt"
cp "$FIX/tokenizer-bytes.json" "$WORK/build/tokenizer.json"

if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} OMPI_MCA_osc=${OMPI_MCA_osc:-^ucx}
export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
unset MERAK_DEVICES
echo "--- running $n commands"
(cd "$WORK" && timeout 1200 sh -e -x "$WORK/readme.sh") > "$WORK/run.log" 2>&1 || {
    tail -40 "$WORK/run.log" >&2
    fail "a command of README.md's 'Using it' failed (the last one shown above)"
}
grep '^+ ' "$WORK/run.log" | sed 's/^+ /ran: /'
# What the commands say they make.
B=$WORK/build
for f in train.bin val.bin run.jsonl out.safetensors ckpt/step_00000003/DONE zb.json zb-measured.svg; do
    [ -s "$B/$f" ] || fail "the README's commands did not make build/$f"
done
[ "$(wc -l < "$B/run.jsonl")" -ge 3 ] || fail "run.jsonl has fewer than 3 steps"
grep -q 'val_loss' "$B/run.jsonl" || fail "no validation loss in run.jsonl (--val-data, --eval-every)"
echo "readme: ok ($n commands of README.md's 'Using it')"
