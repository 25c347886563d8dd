#!/bin/sh
# A rank that dies mid-step ends the job: 4 ranks (dp 2 x pp 2) train, one
# non-zero rank is killed with SIGKILL once steps are being reported, and
# mpirun must exit non-zero within 60 s with no merak-train left running.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
command -v pgrep >/dev/null 2>&1 || skip "no pgrep"
make_shard "$WORK/data.bin"
marker=$WORK/death.jsonl
MERAK_MPI_TIMEOUT=120 "$WRAP" 4 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 \
    --seq-len 16 --micro-batches 2 --steps 1000000 --threads 1 --dp 2 --pp 2 --metrics "$marker" \
    > "$WORK/out" 2> "$WORK/err" &
job=$!
i=0
lines() { if [ -f "$marker" ]; then wc -l < "$marker"; else echo 0; fi; }
while [ "$(lines)" -lt 5 ]; do
    i=$((i + 1))
    [ $i -le 600 ] || { kill $job; fail "training did not start within 60 s"; }
    sleep 0.1
done
pids=$(pgrep -f -- "--metrics $marker" | sort -n)
count=$(echo "$pids" | wc -w)
[ "$count" -ge 4 ] || { kill $job; fail "expected 4 merak-train processes, found $count"; }
victim=$(echo "$pids" | tail -n 1)
start=$(date +%s)
kill -9 "$victim"
set +e
wait $job
rc=$?
set -e
took=$(($(date +%s) - start))
left=$(pgrep -f -- "--metrics $marker" | wc -l)
echo "killed pid $victim; mpirun exited $rc after ${took}s; $left merak-train process(es) left"
[ "$rc" -ne 0 ] || fail "the job exited 0 after a rank died"
[ "$rc" -ne 124 ] || fail "the job hung after a rank died (timeout)"
[ "$left" -eq 0 ] || fail "$left merak-train processes survived"
[ "$took" -le 60 ] || fail "the job took ${took}s to end"
echo "mpi_rank_death: ok"
