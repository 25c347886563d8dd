#!/bin/sh
# bench_ckpt.sh [BUILDDIR] [MODEL] [THREADS] - checkpoint bandwidth and the
# step-time cost of a background save.
#
# MODEL (default gpt2, 124M parameters: 1.5 GB of parameters and AdamW
# moments per checkpoint) trains one process, micro-batch 1 x 64 tokens,
# THREADS threads (default 1, which leaves the second core of a 2-core
# machine to the writer thread).
#  1. Write: the checkpoint at the end of 2 steps (written through: the
#     copy to host memory, two safetensors files, fsync, rename, CRC-32,
#     manifest, DONE), its MB/s from merak-train's report, against the same
#     bytes copied as plain files on the same disk with dd conv=fsync (the
#     reference in the same script: write(2) and fsync, as the checkpoint).
#  2. Read: --resume of that checkpoint (every file's CRC-32 verified and
#     every tensor assembled), against cat of its files to /dev/null; both
#     from the page cache, which the first read fills.
#  3. The cost to training: 13 steps with --save-every 4 (saves after steps
#     4, 8 and 12: each step that starts one also copies the state, the
#     next ones run while it is written) against 13 steps without: the mean
#     step time of steps 4 to 13 (indexes 3 to 12), and of the steps that
#     start a save (3, 7, 11), each over the same without saving.
set -eu
BUILDDIR=${1:-.}
MODEL=${2:-gpt2}
THREADS=${3:-1}
. "$(dirname "$0")/lib.sh"
bench_setup bench_ckpt "$BUILDDIR" merak-train merak-shard
bench_shard "$TMP/d.bin"
T="$BUILDDIR/merak-train --model $MODEL --data $TMP/d.bin --micro-batch 1 --seq-len 64 --threads $THREADS"
now() { date +%s.%N; }

# 1. write
$T --steps 2 --save "$TMP/ck" > "$TMP/w.txt"
line=$(grep "checkpoint step 2 saved" "$TMP/w.txt")
mb=$(echo "$line" | sed 's/.*(\([0-9.]*\) MB in \([0-9.]*\) s.*/\1/')
s=$(echo "$line" | sed 's/.*(\([0-9.]*\) MB in \([0-9.]*\) s.*/\2/')
mkdir "$TMP/copy"
t0=$(now)
for f in "$TMP"/ck/step_00000002/*; do dd if="$f" of="$TMP/copy/${f##*/}" bs=4M conv=fsync status=none; done
t1=$(now)
awk -v mb="$mb" -v s="$s" -v a="$t0" -v b="$t1" 'BEGIN {
    c = b - a; printf "write: checkpoint %.0f MB in %.2f s = %.0f MB/s; dd conv=fsync of the same files %.2f s = %.0f MB/s; ratio %.2f\n",
        mb, s, mb / s, c, mb / c, (mb / s) / (mb / c) }'

# 2. read
$T --steps 2 --resume "$TMP/ck" > "$TMP/r.txt"
line=$(grep "resumed from" "$TMP/r.txt")
s=$(echo "$line" | sed 's/.*loaded in \([0-9.]*\) s.*/\1/')
t0=$(now); cat "$TMP"/ck/step_00000002/* > /dev/null; t1=$(now)
awk -v mb="$mb" -v s="$s" -v a="$t0" -v b="$t1" 'BEGIN {
    c = b - a; printf "read:  checkpoint %.0f MB loaded in %.2f s = %.0f MB/s; cat of the same files %.2f s = %.0f MB/s; ratio %.2f\n",
        mb, s, mb / s, c, mb / c, (mb / s) / (mb / c) }'

# 3. the step-time cost of saving in the background
rm -rf "$TMP/ck"
$T --steps 13 --metrics "$TMP/plain.jsonl" > /dev/null
$T --steps 13 --save "$TMP/ck" --save-every 4 --keep-last 1 --metrics "$TMP/saving.jsonl" > "$TMP/s.txt"
grep "saved" "$TMP/s.txt" | sed 's/^/  /'
paste -d ' ' "$TMP/plain.jsonl" "$TMP/saving.jsonl" | sed 's/[{}",:]/ /g' | awk '
    { n = 0; for (i = 1; i <= NF; i++) if ($i == "step_ms") v[++n] = $(i + 1)
      step = $2
      if (step >= 3) { p += v[1]; s += v[2]; k++ }
      if (step == 3 || step == 7 || step == 11) { q += v[1]; r += v[2]; m++ } }
    END { printf "steps 4-13: %.1f ms mean without saving, %.1f ms with 3 background saves (x%.3f); " \
                 "the 3 steps that start a save: %.1f vs %.1f ms (x%.2f)\n", p / k, s / k, s / p, q / m, r / m, r / q }'
