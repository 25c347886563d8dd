#!/bin/sh
# bench_train.sh [BUILDDIR] - training-step throughput, merak-train vs PyTorch (CPU).
#
# Both sides train the same model (a Hugging Face config.json written below),
# with the same micro-batch B, micro-batches M, sequence length T and thread
# count, on the same token shard (made by merak-shard from the project's own
# text files).  Each run does WARMUP+STEPS optimizer steps; the first WARMUP
# are dropped and the median step time of the rest is taken.  Each case is run
# REPS times (merak and torch alternating, to share the machine's noise) and
# the median of the per-run medians is reported:
#
#   bench_train model=demo-gpt2 threads=1 merak_tok_s=... torch_tok_s=... ratio=merak/torch=...
#
# Lines starting with '#' give the per-run detail.
#
# The PyTorch side is tests/ref/torch_ref.py's own train_step() (forward,
# backward, clip_grad_norm_, AdamW), timed per step by a small driver below
# (torch_ref.py's "bench" subcommand only prints the mean).  Threads: torch
# gets torch.set_num_threads(K) plus OMP_NUM_THREADS=K and
# OPENBLAS_NUM_THREADS=K (Debian's torch calls OpenBLAS for its GEMMs, and
# OpenBLAS would otherwise start one thread per core whatever K is), and
# OMP_WAIT_POLICY=passive: with K=2 on a 2-core machine torch's spinning
# OpenMP workers and OpenBLAS's own threads fight over the cores, and with
# the default (spinning) policy a torch step is about 2.5x slower than with
# passive - slower than on 1 thread.  Passive is torch's best setting there,
# so it is the default here (TORCH_OMP_WAIT_POLICY= gives the plain default).
# merak-train gets --threads K (OpenMP threads; its BLAS calls are
# single-threaded by design) and the default OpenMP wait policy, which was a
# few percent faster for it than passive on an idle machine (but much slower
# when other processes compete for the cores: see bench/RESULTS.md).
#
# Environment knobs (defaults in brackets):
#   MODELS [demo-gpt2 demo-llama]  THREADS [1 2]  B [8]  M [1]  T [128]
#   STEPS [20]  WARMUP [3]  REPS [3]  PYTHON [/usr/bin/python3]
#   TORCH_OMP_WAIT_POLICY [passive]  (empty: leave OMP_WAIT_POLICY unset)
#
# Exits 0 with a "skipped" message when PYTHON cannot import torch.
set -eu

BUILDDIR=${1:-.}
MODELS=${MODELS:-"demo-gpt2 demo-llama"}
THREADS=${THREADS:-"1 2"}
B=${B:-8}
M=${M:-1}
T=${T:-128}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
REPS=${REPS:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
TORCH_OMP_WAIT_POLICY=${TORCH_OMP_WAIT_POLICY-passive}

. "$(dirname "$0")/lib.sh"
bench_setup bench_train "$BUILDDIR" merak-train merak-shard
bench_need "$PYTHON" torch

# ---------------------------------------------------------------- configs
cat > "$TMP/demo-gpt2.json" <<'EOF'
{"model_type":"gpt2","vocab_size":256,"n_positions":512,"n_embd":192,"n_layer":4,"n_head":6,"n_inner":null,"layer_norm_epsilon":1e-5,"initializer_range":0.02,"tie_word_embeddings":true,"activation_function":"gelu_new","resid_pdrop":0.0,"embd_pdrop":0.0,"attn_pdrop":0.0}
EOF
cat > "$TMP/demo-llama.json" <<'EOF'
{"model_type":"llama","vocab_size":256,"hidden_size":192,"intermediate_size":512,"num_hidden_layers":4,"num_attention_heads":6,"num_key_value_heads":2,"max_position_embeddings":512,"rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":false,"initializer_range":0.02,"hidden_act":"silu"}
EOF
cat > "$TMP/tiny-gpt2.json" <<'EOF'
{"model_type":"gpt2","vocab_size":256,"n_positions":256,"n_embd":64,"n_layer":2,"n_head":4,"n_inner":null,"layer_norm_epsilon":1e-5,"initializer_range":0.02,"tie_word_embeddings":true,"activation_function":"gelu_new","resid_pdrop":0.0,"embd_pdrop":0.0,"attn_pdrop":0.0}
EOF

# ---------------------------------------------------------------- data
# One byte per token (vocab 256): the project's sources and docs.
find "$SRCDIR" \( -name .git -o -name autom4te.cache -o -name bench \) -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.py' -o -name '*.sh' \
       -o -name '*.md' -o -name '*.am' -o -name '*.ac' -o -name '*.[17]' \) -print |
    LC_ALL=C sort > "$TMP/files.txt"
[ -s "$TMP/files.txt" ] || die "no text files found under $SRCDIR"
# shellcheck disable=SC2046
"$BUILDDIR/merak-shard" -o "$TMP/shard.bin" $(cat "$TMP/files.txt") >/dev/null

# ---------------------------------------------------------------- torch driver
cat > "$TMP/torch_steps.py" <<'EOF'
import sys, time
sys.path.insert(0, sys.argv[1])
import torch_ref as R
cfgpath, shard, B, M, T, n, threads = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:9])
R.setup_torch(threads)
cfg = R.Config.load(cfgpath)
params = R.init_params(cfg, 1234)
for p in params.values():
    p.requires_grad_(True)
data = R.Shard(shard)
W = data.windows(B, T)
opt = R.make_optimizer(params, 6e-4, 0.9, 0.95, 1e-8, 0.1)
for i in range(n):
    t0 = time.perf_counter()
    R.train_step(cfg, params, opt, lambda j: data.batch((i * M + j) % W, B, T), M, 1.0)
    print("%.6f" % ((time.perf_counter() - t0) * 1e3), flush=True)
EOF

NSTEPS=$((WARMUP + STEPS))
TOK=$((B * M * T))

merak_run() { # model threads -> median step ms of one run
    rm -f "$TMP/m.jsonl"
    OMP_NUM_THREADS=$2 OPENBLAS_NUM_THREADS=1 "$BUILDDIR/merak-train" \
        --model "$TMP/$1.json" --data "$TMP/shard.bin" --micro-batch "$B" \
        --micro-batches "$M" --seq-len "$T" --steps "$NSTEPS" --threads "$2" \
        --lr-schedule constant --log-every 1000000 --metrics "$TMP/m.jsonl" >/dev/null ||
        die "merak-train failed ($1, $2 threads)"
    sed -n 's/.*"step": \([0-9]*\),.*"step_ms": \([0-9.eE+-]*\).*/\1 \2/p' "$TMP/m.jsonl" |
        awk -v w="$WARMUP" '$1 >= w {print $2}' | median
}

torch_run() { # model threads -> median step ms of one run (called in $(...): the export stays here)
    if [ -n "$TORCH_OMP_WAIT_POLICY" ]; then
        OMP_WAIT_POLICY=$TORCH_OMP_WAIT_POLICY
        export OMP_WAIT_POLICY
    fi
    OMP_NUM_THREADS=$2 OPENBLAS_NUM_THREADS=$2 "$PYTHON" "$TMP/torch_steps.py" \
        "$SRCDIR/tests/ref" "$TMP/$1.json" "$TMP/shard.bin" "$B" "$M" "$T" "$NSTEPS" "$2" \
        > "$TMP/t.txt" || die "torch driver failed ($1, $2 threads)"
    tail -n +"$((WARMUP + 1))" "$TMP/t.txt" | median
}

echo "# bench_train: B=$B M=$M T=$T ($TOK tokens/step), $WARMUP warm-up + $STEPS timed steps, $REPS reps, $(nproc) cpus, torch OMP_WAIT_POLICY=${TORCH_OMP_WAIT_POLICY:-unset}, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for model in $MODELS; do
    [ -f "$TMP/$model.json" ] || die "unknown model '$model' (demo-gpt2, demo-llama, tiny-gpt2)"
    for th in $THREADS; do
        : > "$TMP/mer.txt"
        : > "$TMP/tor.txt"
        r=1
        while [ "$r" -le "$REPS" ]; do
            mm=$(merak_run "$model" "$th")
            tm=$(torch_run "$model" "$th")
            echo "$mm" >> "$TMP/mer.txt"
            echo "$tm" >> "$TMP/tor.txt"
            echo "# model=$model threads=$th rep=$r merak_step_ms=$mm torch_step_ms=$tm loadavg=$(cut -d' ' -f1 /proc/loadavg)"
            r=$((r + 1))
        done
        mm=$(median < "$TMP/mer.txt")
        tm=$(median < "$TMP/tor.txt")
        awk -v model="$model" -v th="$th" -v tok="$TOK" -v mm="$mm" -v tm="$tm" 'BEGIN {
            mt = tok / (mm / 1e3); tt = tok / (tm / 1e3);
            printf "bench_train model=%s threads=%s merak_tok_s=%.0f torch_tok_s=%.0f ratio=merak/torch=%.3f\n",
                   model, th, mt, tt, mt / tt;
            printf "# model=%s threads=%s median merak_step_ms=%.2f torch_step_ms=%.2f\n", model, th, mm, tm }'
    done
done
