#!/bin/sh
# A rank that stops without dying ends the job through the communication
# timeout: 8 ranks (dp 2 x tp 2 x pp 2) train with --comm-timeout 3, rank 5
# is stopped with SIGSTOP once steps are being reported (the launcher sees
# nothing wrong: the process is alive), and the ranks waiting for it must
# give up after 3 s, each with one line naming itself, the operation and
# the ranks it waited for, so that mpirun ends the job non-zero well
# within 30 s, with no merak-train left.  MERAK_COMM_TIMEOUT gives the
# same, and a bad value of either is a usage error.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
command -v pgrep > /dev/null 2>&1 || skip "no pgrep"
make_shard "$WORK/data.bin"

stall() {   # stall NAME ENV [FLAGS...]: the job (ENV: VAR=VALUE or ""), rank 5 stopped
    name=$1 var=$2; shift 2
    marker=$WORK/$name.jsonl
    env MERAK_MPI_TIMEOUT=120 ${var:+"$var"} "$WRAP" 8 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" \
        --micro-batch 2 --seq-len 16 --micro-batches 2 --steps 1000000 --threads 1 --dp 2 --tp 2 --pp 2 \
        --metrics "$marker" "$@" > "$WORK/out" 2> "$WORK/err" &
    job=$!
    wait_lines "$marker" 3 $job
    victim=$(rank_pid "$marker" 5 $job) || exit 1
    start=$(date +%s)
    kill -STOP "$victim"
    set +e
    wait $job
    rc=$?
    set -e
    took=$(($(date +%s) - start))
    kill -KILL "$victim" 2> /dev/null || true   # if the launcher left it stopped
    left=$(survivors "$marker" "$start")
    echo "$name: rank 5 (pid $victim) stopped; mpirun exited $rc after ${took}s; $left merak-train process(es) left"
    grep 'no progress for' "$WORK/err" | head -4
    [ "$rc" -ne 0 ] || fail "$name: the job exited 0 with a rank stopped"
    [ "$rc" -ne 124 ] || { cat "$WORK/err"; fail "$name: the job hung with a rank stopped (no timeout)"; }
    [ "$left" -eq 0 ] || fail "$name: $left merak-train processes survived"
    [ "$took" -le 30 ] || fail "$name: the job took ${took}s to end"
    grep -q 'no progress for [0-9]* s in .*communication timeout 3 s' "$WORK/err" ||
        { cat "$WORK/err"; fail "$name: no rank reported the timeout"; }
    # the waiters name what they waited for: the stopped rank with its host,
    # or a group whose world ranks include 5
    grep 'no progress for' "$WORK/err" | grep -q "(rank 5 on $(hostname))\|world ranks \([0-9]*,\)*5[,)]" ||
        fail "$name: no timeout line names rank 5"
}
stall flag "" --comm-timeout 3
stall env MERAK_COMM_TIMEOUT=3

# bad values: the flag's and the variable's are the same usage error
for v in -1 abc 2e9; do
    set +e
    "$TRAIN" --data "$WORK/data.bin" --steps 1 --comm-timeout "$v" > /dev/null 2> "$WORK/e1"; r1=$?
    MERAK_COMM_TIMEOUT=$v "$TRAIN" --data "$WORK/data.bin" --steps 1 > /dev/null 2> "$WORK/e2"; r2=$?
    set -e
    [ "$r1" -eq 2 ] && [ "$r2" -eq 2 ] || fail "--comm-timeout/MERAK_COMM_TIMEOUT $v: exit $r1/$r2, not 2"
    grep -q -- '--comm-timeout' "$WORK/e1" && grep -q 'MERAK_COMM_TIMEOUT' "$WORK/e2" ||
        fail "timeout $v: the message does not name the flag or variable: $(cat "$WORK/e1" "$WORK/e2")"
done
echo "ok: bad timeouts refused with exit 2 from the flag and the variable"
echo "mpi_stall: ok"
