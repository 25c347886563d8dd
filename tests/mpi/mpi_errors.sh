#!/bin/sh
# Bad parallel layouts under mpirun: rank 0 prints one clear line, every
# rank exits non-zero, nothing hangs (each case has 60 s).
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
make_shard "$WORK/data.bin"
D="--model tiny-gpt2 --data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 2 --threads 1"
export MERAK_MPI_TIMEOUT=60

# expect NP PATTERN ARGS...
expect() {
    np=$1 pattern=$2; shift 2
    expect_job_fails merak-train "$pattern" "$WRAP" "$np" "$TRAIN" $D "$@"
    echo "ok (np=$np $*): $(grep '^merak-train:' "$WORK/err")"
}

expect 4 "dp\*tp\*pp = 3\*1\*2 = 6, but the job has 4 ranks" --dp 3 --pp 2
# the rank numbering (the Slurm plugin's MERAK_* variables) is checked in every layout
expect_job_fails merak-train "MERAK_RANK=0 is set on MPI ranks 0 and 2: each rank needs its own" \
    "$WRAP" 4 sh -c 'MERAK_RANK=$((OMPI_COMM_WORLD_RANK % 2)) exec "$0" "$@"' "$TRAIN" $D --pp 2
echo "ok: $(grep '^merak-train:' "$WORK/err")"
MERAK_RANK=7 expect 4 "MERAK_RANK of MPI rank 0 is not a rank of this job (0 to 3)" --pp 2
MERAK_WORLD_SIZE=8 expect 4 "MERAK_WORLD_SIZE=8, but the job has 4 ranks" --pp 2
MERAK_TP_RANK=1 expect 4 "MERAK_TP_RANK=1, but rank 0 of dp 2 x tp 2 x pp 1 is at 0" --tp 2
expect 3 "not divisible by tp\*pp" --pp 2
expect 2 "1f1b needs at least as many micro-batches" --pp 2 --micro-batches 1 --schedule 1f1b
[ "$rc" -eq 2 ] || fail "M < P: exit status $rc, expected 2 (a usage error)"
expect 4 "zb-h1 needs at least as many micro-batches (M) as stages (S): M = 3, S = 4" --pp 4 --micro-batches 3 \
    --schedule zb-h1
# two stages on one host that together cannot fit: refused before allocating
expect 2 "not enough memory: rank 0 on .* and the 1 other rank.s. on its host need [0-9.]* GB" --model gpt2 \
    --micro-batch 512 --seq-len 1024 --pp 2 --micro-batches 2
# A budget a later stage of zb-h1 misses (stage 0 may still fit): its
# message reaches rank 0, every rank exits 2.
printf '{"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 4, "n_head": 2,
  "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}\n' > "$WORK/drop.json"
expect 4 "recompute budget=0.0004: stage [0-9] needs 0.000[0-9] GB of activations even when it recomputes every layer" \
    --pp 4 --micro-batches 4 --schedule zb-h1 --recompute budget=0.0004 --model "$WORK/drop.json"
[ "$rc" -eq 2 ] || fail "unreachable budget: exit status $rc, expected 2 (a usage error)"
# interleaved: M < S, and more model chunks than the graph has layers
expect 4 "interleaved needs at least as many micro-batches (M) as stages (S): M = 2, S = 4" --pp 4 \
    --micro-batches 2 --schedule interleaved
[ "$rc" -eq 2 ] || fail "interleaved M < P: exit status $rc, expected 2 (a usage error)"
expect 4 "pp 4 x 4 virtual stages = 16 model chunks, but the graph can be cut into 14 at most" --pp 4 \
    --micro-batches 4 --schedule interleaved --virtual-stages 4 --model "$WORK/drop.json"
[ "$rc" -eq 2 ] || fail "too many virtual stages: exit status $rc, expected 2 (a usage error)"
expect 3 "tp=3 does not divide the 4 attention heads (op 3); use tp in {1, 2, 4}" --tp 3
printf '{"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 1, "n_head": 2}\n' > "$WORK/one.json"
expect 8 "cut points, so at most" --pp 8 --micro-batches 8 --model "$WORK/one.json"
# the tied embedding and LM head must sit on the first and the last stage
expect 4 "partition 'custom:0,6,7,8': the first stage must hold blocks 0-0 and the last stage blocks 7-8" --pp 4 \
    --micro-batches 4 --partition custom:0,6,7,8
[ "$rc" -eq 2 ] || fail "a custom cut splitting tied weights: exit status $rc, expected 2 (a usage error)"
printf '*.mlp.c_fc.weight column\n*.mlp.c_fc.weight sideways\n' > "$WORK/rules.bad"
expect 2 "rules.bad:2: unknown kind 'sideways'" --tp 2 --tp-rules "$WORK/rules.bad"
expect 2 "none.rules: cannot open: No such file or directory (the tensor-parallel rules file)" --tp 2 --tp-rules "$WORK/none.rules"
# a NUL byte is said as such (not as a line too long); so is a line too long
printf '*.mlp.c_fc.weight\0 column\n' > "$WORK/rules.nul"
expect 2 "rules.nul:1: a NUL byte (not a text file?)" --tp 2 --tp-rules "$WORK/rules.nul"
awk 'BEGIN { s = ""; for (i = 0; i < 600; i++) s = s "x"; print "# ok"; print s " column" }' > "$WORK/rules.long"
expect 2 "rules.long:2: line longer than 510 bytes" --tp 2 --tp-rules "$WORK/rules.long"
printf 'h.*.nothing column\n' > "$WORK/rules.miss"
expect 2 "rules.miss:1: pattern 'h.\*.nothing' matches no parameter" --tp 2 --tp-rules "$WORK/rules.miss"
printf '*.attn.c_proj.weight column\n' > "$WORK/rules.conflict"
expect 2 "needs attention.4 whole" --tp 2 --tp-rules "$WORK/rules.conflict"
# a norm's gain marked for splitting is refused, not ignored (1-D as 2-D)
printf '*.ln_1.weight column\n' > "$WORK/rules.norm"
expect 2 "parameter transformer.h.0.ln_1.weight is marked for splitting, but op 2 (layernorm) cannot split it" \
    --tp 2 --tp-rules "$WORK/rules.norm"
expect 2 "no file matches" --pp 2 --micro-batches 2 --data "$WORK/none-*.bin"
UCX_TLS=no_such_transport expect 4 "UCX: ucp_init failed: .*UCX_TLS=no_such_transport" --pp 2 --dp 2 --micro-batches 2 --p2p ucx
MERAK_PP=x expect 2 "MERAK_PP: 'x' is not an integer"
echo "mpi_errors: ok"
