#!/bin/sh
# A rank that dies mid-step ends the job: 8 ranks (dp 2 x tp 2 x pp 2)
# train, one non-zero rank is killed with SIGKILL once steps are being
# reported; every other rank must exit within 30 s, mpirun non-zero, with
# no merak-train left running, and the output must name the dead rank and
# its host.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
command -v pgrep >/dev/null 2>&1 || skip "no pgrep"
make_shard "$WORK/data.bin"
marker=$WORK/death.jsonl
MERAK_MPI_TIMEOUT=120 "$WRAP" 8 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 \
    --seq-len 16 --micro-batches 2 --steps 1000000 --threads 1 --dp 2 --tp 2 --pp 2 --metrics "$marker" \
    > "$WORK/out" 2> "$WORK/err" &
job=$!
wait_lines "$marker" 5 $job
pids=$(pgrep -f -- "--metrics $marker" | sort -n)
count=$(echo "$pids" | wc -w)
[ "$count" -ge 8 ] || { kill $job; fail "expected 8 merak-train processes, found $count"; }
# The victim: a rank that is not rank 0, found by its MPI rank.
rank=5
victim=$(rank_pid "$marker" $rank $job) || exit 1
start=$(date +%s)
kill -9 "$victim" || { wait $job || true; cat "$WORK/err" >&2; fail "rank $rank (pid $victim) was gone before it was killed"; }
set +e
wait $job
rc=$?
set -e
took=$(($(date +%s) - start))
left=$(survivors "$marker" "$start")
host=$(hostname)
echo "killed rank $rank (pid $victim) on $host; mpirun exited $rc after ${took}s; $left merak-train process(es) left"
cat "$WORK/err"
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank died"
[ "$rc" -ne 124 ] || fail "the job hung after a rank died (timeout)"
[ "$left" -eq 0 ] || fail "$left merak-train processes survived"
[ "$took" -le 30 ] || fail "the job took ${took}s to end"
grep -q "rank $rank .*$host\|rank $rank on $host" "$WORK/err" ||
    fail "the output does not name the dead rank $rank and its host $host"
echo "mpi_rank_death: ok"
