#!/bin/sh
# Checkpoints in one process: periodic saves with pruning, bitwise resume
# from a checkpoint and from a stop by SIGTERM, "latest" never picking an
# incomplete checkpoint, a SIGKILL in the middle of writing one (the
# previous one loads), damaged and foreign checkpoints refused, a save
# directory that cannot be written refused before step 0, a failing save
# under --on-save-error stop and continue, and output to a closed pipe;
# files a checkpoint does not write never deleted.
. "$(dirname "$0")/lib.sh"
make_shard "$WORK/data.bin"
C="--data $WORK/data.bin --micro-batch 2 --seq-len 16 --threads 1 --lr 3e-3 --warmup 2"
CK=$WORK/ck

# losses FILE...: the step, loss and gradient norm of every metrics line
losses() { cat "$@" | sed 's/"tokens_per_s".*//'; }

# 1. Six steps, a checkpoint every 2, the newest 2 kept.
"$TRAIN" $C --steps 6 --save "$CK" --save-every 2 --keep-last 2 --metrics "$WORK/full.jsonl" \
    --save-weights "$WORK/full.st" > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "training with --save failed"; }
grep -q "checkpoint step 6 saved to $CK/step_00000006" "$WORK/out" || { cat "$WORK/out"; fail "no report of the save"; }
[ "$(ls "$CK")" = "step_00000004
step_00000006" ] || fail "--keep-last 2 left: $(ls "$CK")"
for f in DONE manifest.json model-pp000-tp000.safetensors optim-pp000-tp000.safetensors; do
    [ -f "$CK/step_00000004/$f" ] || fail "step_00000004 lacks $f"
done
grep -q '"consumed": 4' "$CK/step_00000004/manifest.json" || fail "the manifest's data position is not 4 windows"
echo "ok: saves every 2 steps, newest 2 kept"

# 2. Resumed from step 4: the same losses and weights, bit for bit.
"$TRAIN" $C --steps 6 --resume "$CK/step_00000004" --metrics "$WORK/r.jsonl" --save-weights "$WORK/r.st" \
    > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "resume failed"; }
grep -q "resumed from $CK/step_00000004 at step 4" "$WORK/out" || fail "no resume report"
[ "$(losses "$WORK/r.jsonl")" = "$(tail -2 "$WORK/full.jsonl" | sed 's/"tokens_per_s".*//')" ] ||
    fail "resumed losses differ: $(losses "$WORK/r.jsonl")"
cmp "$WORK/full.st" "$WORK/r.st" || fail "resumed weights differ from the unbroken run's"
echo "ok: resumed at step 4, bitwise equal"

# 2b. bf16: the checkpoint holds the fp32 masters and moments and says
# bf16; resumed, the run equals the unbroken bf16 run bit for bit (the
# compute copies are rounded again from the masters), and fp32 may go on
# from it.
"$TRAIN" $C --dtype bf16 --steps 6 --save "$WORK/ckb" --save-every 3 --metrics "$WORK/bf.jsonl" \
    --save-weights "$WORK/bf.st" > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "bf16 training with --save failed"; }
grep -q '"dtype": "bf16"' "$WORK/ckb/step_00000003/manifest.json" || fail "the manifest does not record bf16"
grep -q 'F32' "$WORK/ckb/step_00000003/model-pp000-tp000.safetensors" &&
    ! grep -q 'BF16' "$WORK/ckb/step_00000003/model-pp000-tp000.safetensors" ||
    fail "a bf16 run's checkpoint does not hold float32 masters"
[ "$(losses "$WORK/bf.jsonl")" != "$(losses "$WORK/full.jsonl")" ] || fail "bf16 losses equal fp32's bit for bit"
"$TRAIN" $C --dtype bf16 --steps 6 --resume "$WORK/ckb/step_00000003" --metrics "$WORK/rb.jsonl" \
    --save-weights "$WORK/rb.st" > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "bf16 resume failed"; }
[ "$(losses "$WORK/rb.jsonl")" = "$(tail -3 "$WORK/bf.jsonl" | sed 's/"tokens_per_s".*//')" ] ||
    fail "resumed bf16 losses differ: $(losses "$WORK/rb.jsonl")"
cmp "$WORK/bf.st" "$WORK/rb.st" || fail "resumed bf16 weights differ from the unbroken bf16 run's"
"$TRAIN" $C --steps 6 --resume "$WORK/ckb/step_00000003" --metrics "$WORK/rf.jsonl" > "$WORK/out" 2>&1 ||
    { cat "$WORK/out"; fail "fp32 resume of a bf16 checkpoint failed"; }
grep -q '"dtype": "fp32"' "$WORK/rf.jsonl" || fail "the fp32 run resumed from bf16 does not say fp32"
grep -q "note: the checkpoint was trained in bf16; this run goes on from its float32 masters in fp32 (--dtype bf16 keeps its arithmetic)" \
    "$WORK/out" || { cat "$WORK/out"; fail "the fp32 run resumed from bf16 does not say the arithmetic changed"; }
"$TRAIN" $C --dtype bf16 --steps 4 --resume "$WORK/ckb/step_00000003" > "$WORK/out" 2>&1 ||
    { cat "$WORK/out"; fail "bf16 resume failed"; }
! grep -q "was trained in" "$WORK/out" || fail "a bf16 run resumed from bf16 says the arithmetic changed"
echo "ok: bf16 resumed at step 3, bitwise equal; fp32 goes on from a bf16 checkpoint"

# 3. "latest": none yet starts at step 0; an incomplete newer one is skipped.
"$TRAIN" $C --steps 2 --save "$WORK/fresh" --resume latest > "$WORK/out" 2>&1 || fail "resume latest with none failed"
grep -q "no checkpoint in $WORK/fresh yet: starting at step 0" "$WORK/out" || fail "no 'starting at step 0'"
for s in 5 9; do   # what a writer killed before DONE leaves
    cp -r "$CK/step_00000006" "$CK/step_0000000$s"
    rm "$CK/step_0000000$s/DONE"
done
"$TRAIN" $C --steps 8 --save "$CK" --resume latest > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "resume latest failed"; }
grep -q "resumed from $CK/step_00000006 at step 6" "$WORK/out" || { cat "$WORK/out"; fail "latest did not pick step 6"; }
[ ! -e "$CK/step_00000005" ] || fail "the incomplete checkpoint older than the new one was not removed"
expect_exit 1 "step_00000009: the checkpoint is incomplete" "$TRAIN" $C --steps 12 --resume "$CK/step_00000009"
# a run that would write older steps next to newer ones (latest would pick
# those, pruning would keep them over this run's) is refused before step 0
expect_exit 1 "save $CK already holds a checkpoint of step 8 and this run starts at step 0" \
    "$TRAIN" $C --steps 2 --save "$CK"
expect_exit 1 "already holds a checkpoint of step 8 and this run starts at step 4" \
    "$TRAIN" $C --steps 6 --save "$CK" --resume "$CK/step_00000004"
echo "ok: latest skips incomplete checkpoints, which are refused by name"

# 3b. A file a checkpoint does not write is never deleted: a step directory
# holding one is refused (nothing deleted), and pruning an old checkpoint
# leaves it (and its directory) in place.
mkdir -p "$WORK/ck5/step_00000001"
echo mine > "$WORK/ck5/step_00000001/notes.txt"
expect_exit 1 "step_00000001 holds notes.txt, which a checkpoint does not write: move it away (nothing was deleted)" \
    "$TRAIN" $C --steps 1 --save "$WORK/ck5"
[ "$(cat "$WORK/ck5/step_00000001/notes.txt")" = mine ] || fail "a refused save deleted a user's file"
"$TRAIN" $C --steps 2 --save "$WORK/ckp" --save-every 1 --keep-last 5 > "$WORK/out" 2>&1 || fail "save every step"
echo mine > "$WORK/ckp/step_00000001/notes.txt"
"$TRAIN" $C --steps 3 --save "$WORK/ckp" --save-every 1 --keep-last 1 --resume latest > "$WORK/out" 2>&1 ||
    { cat "$WORK/out"; fail "resume with --keep-last 1"; }
[ "$(cat "$WORK/ckp/step_00000001/notes.txt")" = mine ] && [ ! -e "$WORK/ckp/step_00000001/DONE" ] &&
    [ ! -e "$WORK/ckp/step_00000002" ] && [ -e "$WORK/ckp/step_00000003/DONE" ] ||
    fail "pruning: $(ls -R "$WORK/ckp")"
echo "ok: a user's file in a checkpoint directory is never deleted"

# 4. Damaged and foreign checkpoints.
"$TRAIN" $C --steps 2 --save "$WORK/ck2" > /dev/null 2>&1 || fail "save failed"
D=$WORK/ck2/step_00000002
printf '\001' | dd of="$D/model-pp000-tp000.safetensors" bs=1 seek=300 conv=notrunc 2>/dev/null
expect_exit 1 "model-pp000-tp000.safetensors: damaged" "$TRAIN" $C --steps 4 --resume "$D"
"$TRAIN" $C --steps 2 --save "$WORK/ck3" > /dev/null 2>&1 || fail "save failed"
expect_exit 1 "is of a gpt2 model, this run trains a llama" "$TRAIN" $C --model tiny-llama --steps 4 \
    --resume "$WORK/ck3/step_00000002"
# the checkpoint's config.json is a Hugging Face one: a model made from it
# with another depth is refused
sed 's/"n_layer": 2/"n_layer": 3/' "$WORK/ck3/step_00000002/config.json" > "$WORK/deeper.json"
expect_exit 1 "checkpoint's model has n_layer 2, this run's 3" "$TRAIN" $C --model "$WORK/deeper.json" --steps 4 \
    --resume "$WORK/ck3/step_00000002"
# an edited manifest: DONE vouches for it (CRC-32 and size), so any edit
# is refused by name; under a DONE from before the checksum (its step
# only) a manifest is judged on its own
sed 's/"consumed": 2/"consumed": 3/' "$WORK/ck3/step_00000002/manifest.json" > "$WORK/m.json"
cmp -s "$WORK/m.json" "$WORK/ck3/step_00000002/manifest.json" && fail "the manifest holds no \"consumed\": 2"
cp "$WORK/m.json" "$WORK/ck3/step_00000002/manifest.json"
expect_exit 1 "manifest.json: changed after the checkpoint was written" "$TRAIN" $C --steps 4 \
    --resume "$WORK/ck3/step_00000002"
expect_exit 1 "manifest.json: changed after the checkpoint was written" "$MERAK_BUILDDIR/merak-ckpt" inspect \
    "$WORK/ck3/step_00000002"
# a manifest edited with DONE's checksum made again: numbers no run writes
# (a step past int, a layout of 0 ranks) are refused, never cut or used
"$TRAIN" $C --steps 2 --save "$WORK/ck9" > /dev/null 2>&1 || fail "save failed"
for edit in '"step": 2,/"step": 99999999999,' '"tp": 1,/"tp": 0,'; do
    rm -rf "$WORK/ck9e" && cp -r "$WORK/ck9" "$WORK/ck9e"
    E=$WORK/ck9e/step_00000002
    sed "s/$edit/" "$WORK/ck9/step_00000002/manifest.json" > "$E/manifest.json"
    cmp -s "$E/manifest.json" "$WORK/ck9/step_00000002/manifest.json" && fail "the manifest lacks $edit"
    "$PY3" - "$E" <<'PYEOF' || fail "rewriting DONE"
import sys, zlib
d = sys.argv[1]
m = open(d + "/manifest.json", "rb").read()
lines = [l for l in open(d + "/DONE").read().splitlines() if not l.startswith("manifest.json crc32 ")]
open(d + "/DONE", "w").write("\n".join(lines + ["manifest.json crc32 %08x bytes %d" % (zlib.crc32(m), len(m))]) + "\n")
PYEOF
    case $edit in
    *step*) msg="the steps at most 2147483647" ;;
    *) msg="layout.tp 0 is not a size a run has" ;;
    esac
    expect_exit 1 "$msg" "$MERAK_BUILDDIR/merak-ckpt" inspect "$E"
    expect_exit 1 "$msg" "$TRAIN" $C --steps 4 --resume "$E"
done
# a step directory renamed: its name and its manifest disagree, and both are named
"$TRAIN" $C --steps 2 --save "$WORK/renamed" > /dev/null 2>&1 || fail "save failed"
mv "$WORK/renamed/step_00000002" "$WORK/renamed/step_00000004"
expect_exit 1 "step_00000004: the directory's name says step 4, its manifest step 2" "$TRAIN" $C --steps 6 \
    --save "$WORK/renamed" --resume latest
expect_exit 1 "the directory's name says step 4, its manifest step 2" "$MERAK_BUILDDIR/merak-ckpt" inspect \
    "$WORK/renamed/step_00000004/"
echo '{}' > "$WORK/ck3/step_00000002/manifest.json"
echo 'step 2' > "$WORK/ck3/step_00000002/DONE"
expect_exit 1 "not a merak checkpoint manifest" "$TRAIN" $C --steps 4 --resume "$WORK/ck3/step_00000002"
expect_exit 1 "holds no complete checkpoint" "$TRAIN" $C --steps 4 --resume "$WORK"

# 5. Usage, and a save directory that cannot be written, refused before step 0.
expect_exit 2 "save-every needs --save" "$TRAIN" $C --save-every 2
expect_exit 2 "resume latest needs --save" "$TRAIN" $C --resume latest
expect_exit 2 "on-save-error: 'maybe'" "$TRAIN" $C --save "$CK" --on-save-error maybe
expect_exit 2 "keep-last" "$TRAIN" $C --save "$CK" --keep-last 0
: > "$WORK/afile"
expect_exit 1 "save $WORK/afile: not a directory" "$TRAIN" $C --save "$WORK/afile"
grep -q "^step" "$WORK/out" && fail "a step ran before the save directory was refused"
expect_exit 1 "save /proc/merak-ck: cannot make the directory" "$TRAIN" $C --save /proc/merak-ck

# 6. A save that fails (a file size limit: EFBIG, as a full disk's ENOSPC):
# stop ends the run naming the file, continue warns and goes on; the
# checkpoint before is kept and nothing half-written is left.
"$TRAIN" $C --steps 2 --save "$WORK/ck4" > /dev/null 2>&1 || fail "save failed"
capture sh -c "ulimit -f 1000; exec $TRAIN $C --steps 4 --save $WORK/ck4 --resume latest"
[ "$rc" -eq 1 ] && grep -q "checkpoint step 4: .*-pp000-tp000.safetensors: write failed: File too large" "$WORK/err" ||
    { cat "$WORK/err"; fail "--on-save-error stop: exit $rc"; }
[ "$(ls "$WORK/ck4")" = "step_00000002" ] || fail "after a failed save: $(ls "$WORK/ck4")"
# continue: a save every step from step 3; the one of step 3 fails and
# training goes on; so does the last one's, step 4, and a run whose end was
# never saved has lost it: exit 1, saying so
capture sh -c "ulimit -f 1000; exec $TRAIN $C --steps 4 --save $WORK/ck4 --save-every 1 --resume latest --on-save-error continue"
[ "$rc" -eq 1 ] && grep -q "warning: checkpoint step 3: .*File too large (training goes on" "$WORK/err" &&
    grep -q "checkpoint step 4: .*File too large (the run's last checkpoint: a failure to write it ends the run even with --on-save-error continue)" "$WORK/err" ||
    { cat "$WORK/err"; fail "--on-save-error continue: exit $rc"; }
[ "$(ls -A "$WORK/ck4" | grep -v '^\.lock$')" = "step_00000002" ] || fail "after a failed save: $(ls -A "$WORK/ck4")"
echo "ok: failed saves stop or continue, the last one ends the run, the earlier checkpoint kept"

# 7. SIGTERM mid-run: a checkpoint at the step reached, exit 0, and
# --resume latest goes on bitwise (a constant learning rate, so the run's
# length does not change the schedule).
K="$C --lr-schedule constant"
"$TRAIN" $K --steps 1000000 --save "$WORK/ck5" --metrics "$WORK/s.jsonl" > "$WORK/out" 2> "$WORK/err" &
job=$!
wait_lines "$WORK/s.jsonl" 3 $job
kill -TERM $job
set +e; wait $job; rc=$?; set -e
[ "$rc" -eq 0 ] || { cat "$WORK/err"; fail "SIGTERM: exit $rc, not 0"; }
stop=$(stopped_at 15 "$WORK/ck5")
grep -q "resume with --resume latest" "$WORK/err" || fail "the stop message does not say how to resume"
n=$((stop + 3))
"$TRAIN" $K --steps $n --save "$WORK/ck5" --resume latest --metrics "$WORK/s.jsonl" > /dev/null 2>&1 ||
    fail "resume after SIGTERM failed"
"$TRAIN" $K --steps $n --metrics "$WORK/u.jsonl" > /dev/null 2>&1 || fail "unbroken run failed"
[ "$(losses "$WORK/s.jsonl")" = "$(losses "$WORK/u.jsonl")" ] || fail "stopped at $stop and resumed: losses differ"
echo "ok: SIGTERM after step $stop, checkpoint, exit 0; resumed to $n bitwise"

# 7a. A shard truncated under a run: before the next step every rank
# stops (exit 1), the line names the shard, the checkpoint of the last good
# step is written, and with the shard back the run resumes from it.
cp "$WORK/data.bin" "$WORK/moving.bin"
M="--model tiny-gpt2 --data $WORK/moving.bin --micro-batch 2 --seq-len 16 --threads 1 --lr-schedule constant"
"$TRAIN" $M --steps 1000000 --save "$WORK/ck8" --metrics "$WORK/m.jsonl" > "$WORK/out" 2> "$WORK/err" &
job=$!
wait_lines "$WORK/m.jsonl" 3 $job
truncate -s 2000 "$WORK/moving.bin"
set +e; wait $job; rc=$?; set -e
at=$(sed -n 's/.*step \([0-9]*\): .*moving.bin: the shard changed while training.*; the checkpoint of step \1, the last good one, is in .*ck8$/\1/p' "$WORK/err")
[ "$rc" -eq 1 ] && [ -n "$at" ] && [ "$(wc -l < "$WORK/m.jsonl")" -eq "$at" ] &&
    [ -f "$(printf '%s/ck8/step_%08d/DONE' "$WORK" "$at")" ] ||
    { cat "$WORK/err"; fail "shard truncated under the run: exit $rc, $(wc -l < "$WORK/m.jsonl") steps"; }
cp "$WORK/data.bin" "$WORK/moving.bin"
"$TRAIN" $M --steps $((at + 2)) --save "$WORK/ck8" --resume latest > "$WORK/out" 2>&1 ||
    { cat "$WORK/out"; fail "resume after the shard came back failed"; }
echo "ok: shard truncated under the run: stopped before step $at (exit 1), its checkpoint written, resumed from it"

# 8. SIGKILL while a checkpoint is being written: the one before loads.
# GPT-2 124M writes 1.5 GB per checkpoint, so the kill lands mid-write.
G="--model gpt2 --data $WORK/data.bin --micro-batch 1 --seq-len 8 --threads 1 --lr-schedule constant"
"$TRAIN" $G --steps 1000 --save "$WORK/ck6" --save-every 1 --keep-last 1 > "$WORK/out" 2>&1 &
job=$!
i=0
until [ -f "$WORK/ck6/step_00000001/DONE" ] && [ -d "$WORK/ck6/step_00000002" ]; do
    i=$((i + 1)); [ $i -le 3000 ] || { kill -9 $job; cat "$WORK/out"; fail "no second checkpoint begun"; }
    sleep 0.05
done
kill -9 $job
set +e; wait $job; set -e
done_steps=$(ls "$WORK"/ck6/*/DONE | wc -l)
newest=$(ls -d "$WORK"/ck6/step_* | while read -r d; do [ -f "$d/DONE" ] && echo "$d"; done | tail -1)
"$TRAIN" $G --save "$WORK/ck6" --resume latest --steps $(( $(sed -n 's/^step //p' "$newest/DONE") + 1 )) \
    > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "resume after SIGKILL mid-write failed"; }
grep -q "resumed from $newest at" "$WORK/out" || { cat "$WORK/out"; fail "latest did not pick $newest"; }
echo "ok: killed while writing ($(ls "$WORK/ck6" | tr '\n' ' ')- $done_steps complete); resumed from $newest"

# 8a. SIGTERM while that checkpoint loads (1.5 GB: the signal is sent as soon
# as the run maps a file of it): the checkpoint of the step it stops at
# exists, so exit 0 saying how to resume, and nothing is written again
# (it said "its checkpoint could not be written", exit 143).  Wherever the
# signal lands, the stop must keep its step.
from=$(sed -n 's/^step //p' "$(ls -d "$WORK"/ck6/step_* | tail -1)/DONE")
"$TRAIN" $G --save "$WORK/ck6" --resume latest --steps 1000 > "$WORK/out" 2> "$WORK/err" &
job=$!
i=0
until grep -q "$WORK/ck6/step_" "/proc/$job/maps" 2> /dev/null; do
    i=$((i + 1)); [ $i -le 6000 ] || { kill -9 $job; cat "$WORK/err"; fail "the resume never mapped its checkpoint"; }
    sleep 0.01
done
kill -TERM $job
set +e; wait $job; rc=$?; set -e
at=$(sed -n 's/.*stopped by signal 15 after step \([0-9]*\); resume with --resume latest$/\1/p' "$WORK/err")
[ "$rc" -eq 0 ] && [ -n "$at" ] && [ -f "$(printf '%s/ck6/step_%08d/DONE' "$WORK" "$at")" ] ||
    { cat "$WORK/err"; fail "SIGTERM while resuming: exit $rc"; }
echo "ok: SIGTERM while resuming from step $from: stopped at step $at, exit 0$([ "$at" = "$from" ] && echo ", during the load")"

# 9. Output to a closed pipe never kills training.
( "$TRAIN" $C --steps 20 --save "$WORK/ck7"; echo $? > "$WORK/rc" ) | head -1 > /dev/null
[ "$(cat "$WORK/rc")" = 0 ] || fail "merak-train | head -1: exit $(cat "$WORK/rc")"
[ -f "$WORK/ck7/step_00000020/DONE" ] || fail "merak-train | head -1 did not finish its run"
echo "ok: | head -1 exits 0 with the run finished"

# 10. merak-ckpt: inspect verifies, export gives the weights merak-train
# saves, import makes a checkpoint that trains like --init.
CKPT=$MERAK_BUILDDIR/merak-ckpt
"$CKPT" inspect "$CK" > "$WORK/out" || fail "merak-ckpt inspect failed"
grep -q "checkpoint $CK/step_00000008: step 8" "$WORK/out" && grep -q "every CRC-32 verified" "$WORK/out" &&
    grep -q "each whole with its two moments" "$WORK/out" || { cat "$WORK/out"; fail "inspect output"; }
expect_exit 1 "model-pp000-tp000.safetensors: damaged" "$CKPT" inspect "$WORK/ck2/step_00000002"
"$CKPT" export "$CK/step_00000006" -o "$WORK/exported.st" > /dev/null || fail "merak-ckpt export failed"
cmp "$WORK/exported.st" "$WORK/full.st" || fail "export of step 6 differs from --save-weights at step 6"
"$CKPT" import "$WORK/full.st" --model tiny-gpt2 -o "$WORK/imp" > /dev/null || fail "merak-ckpt import failed"
"$TRAIN" $C --steps 3 --resume "$WORK/imp" --metrics "$WORK/imp.jsonl" > /dev/null 2>&1 || fail "resume from import"
"$TRAIN" $C --steps 3 --init "$WORK/full.st" --metrics "$WORK/init.jsonl" > /dev/null 2>&1 || fail "--init run"
[ "$(losses "$WORK/imp.jsonl")" = "$(losses "$WORK/init.jsonl")" ] || fail "an imported checkpoint trains unlike --init"
expect_exit 1 "imp: not empty" "$CKPT" import "$WORK/full.st" --model tiny-gpt2 -o "$WORK/imp"
expect_exit 2 "-o: an empty name" "$CKPT" import "$WORK/full.st" --model tiny-gpt2 -o ''
# its errors name the directory, not merak-train's --save
expect_exit 1 "merak-ckpt: checkpoint directory /proc/merak-imp: cannot make the directory" "$CKPT" import \
    "$WORK/full.st" --model tiny-gpt2 -o /proc/merak-imp
expect_exit 1 "full.st: tensor 'model.embed_tokens.weight' is missing" "$CKPT" import "$WORK/full.st" \
    --model tiny-llama -o "$WORK/imp2"
[ ! -e "$WORK/imp2" ] || fail "a failed import left $WORK/imp2"
expect_exit 2 "no command" "$CKPT"
expect_exit 2 "export needs -o" "$CKPT" export "$CK"
expect_exit 2 "import needs --model" "$CKPT" import "$WORK/full.st" -o "$WORK/imp3"
expect_exit 2 "unknown command 'show'" "$CKPT" show "$CK"
echo "ok: merak-ckpt inspect, export (= --save-weights), import (= --init)"

# 12. A resume reads what the saved run read: another micro-batch, or a
# shard that grew, is refused naming it; --resume-data-change goes on,
# saying what differs.
"$TRAIN" $C --steps 2 --save "$WORK/ck12" > /dev/null 2>&1 || fail "save failed"
expect_exit 1 "this run does not read what the checkpoint's did: the micro-batch: 4 now, 2 in the checkpoint" \
    "$TRAIN" $C --steps 3 --micro-batch 4 --resume "$WORK/ck12/step_00000002"
mkdir "$WORK/d12"
cp "$WORK/data.bin" "$WORK/d12/a.bin"
cp "$WORK/data.bin" "$WORK/d12/b.bin"
C12=${C#--data $WORK/data.bin }   # the same flags, the data a glob of two shards
expect_exit 1 "the data: 2 shard(s) now, 1 in the checkpoint ($WORK/d12/b.bin is new)" \
    "$TRAIN" --data "$WORK/d12/*.bin" $C12 --steps 3 --resume "$WORK/ck12/step_00000002"
"$TRAIN" --data "$WORK/d12/*.bin" $C12 --steps 3 --resume "$WORK/ck12/step_00000002" --resume-data-change \
    > "$WORK/out" 2> "$WORK/err" &&
    grep -q "note: --resume-data-change: the data: 2 shard(s) now, 1 in the checkpoint" "$WORK/err" ||
    { cat "$WORK/err"; fail "--resume-data-change did not go on, saying what differs"; }
# the same shard name and size, other tokens (a shard rewritten between
# runs): the checkpoint's CRC-32 of it tells
cp "$WORK/data.bin" "$WORK/same.bin"
C13=${C#--data $WORK/data.bin }
"$TRAIN" --data "$WORK/same.bin" $C13 --steps 2 --save "$WORK/ck13" > /dev/null 2>&1 || fail "save failed"
printf '\007\000\007\000\007\000' | dd of="$WORK/same.bin" bs=1 seek=2048 conv=notrunc 2> /dev/null
cmp -s "$WORK/data.bin" "$WORK/same.bin" && fail "same.bin was not changed"
expect_exit 1 "the data: shard 0, $WORK/same.bin, holds other tokens now (CRC-32 [0-9a-f]*; the checkpoint's, $WORK/same.bin, had [0-9a-f]*)" \
    "$TRAIN" --data "$WORK/same.bin" $C13 --steps 3 --resume "$WORK/ck13/step_00000002"
expect_exit 2 "resume-data-change goes with --resume" "$TRAIN" $C --steps 1 --resume-data-change
"$TRAIN" $C --steps 1 --resume "$WORK/ck12/step_00000002" > "$WORK/out" 2> "$WORK/err" &&
    grep -q "note: nothing to train: the checkpoint is at step 2 and --steps is 1" "$WORK/err" ||
    { cat "$WORK/err"; fail "--steps below the checkpoint's step: no note"; }
echo "ok: a resume with other data is refused naming it, unless --resume-data-change"

# 11. Two runs never write into one --save directory: the first holds its
# lock (.lock names it), the second is refused before any work naming the
# first; after a stop the first's checkpoint is whole and the directory
# takes the next run.
"$TRAIN" $C --steps 100000 --lr-schedule constant --save "$WORK/ck11" --metrics "$WORK/a11.jsonl" \
    > "$WORK/a11.log" 2>&1 &
a11=$!
for _ in $(seq 600); do [ -s "$WORK/a11.jsonl" ] && break; sleep 0.1; done
expect_exit 1 "checkpoint directory $WORK/ck11: another run writes checkpoints there (pid $a11 on " "$TRAIN" $C --steps 2 \
    --save "$WORK/ck11"
kill -TERM "$a11"
wait "$a11" || { cat "$WORK/a11.log"; fail "the first run did not stop cleanly"; }
"$TRAIN" $C --steps 2 --save "$WORK/ck11" --resume latest > /dev/null 2>&1 ||
    fail "after the first run ended, its directory did not take the next one"
echo "ok: a second run writing into one --save directory is refused, naming the first"
