#!/bin/sh
# bench_generate.sh [BUILDDIR] - text generation (batch 1, greedy), merak-generate
# against PyTorch and against the weight-streaming bound (CPU).
#
# Decoding one token at batch 1 is a matrix-vector product per weight
# matrix: every parameter is read from memory once per token and used for
# two FLOPs, so its speed limit is the memory bandwidth, not the FLOP rate.
# For each model (a Hugging Face config.json written below, random weights
# from tests/ref/torch_ref.py init) and thread count:
#
#   merak          merak-generate --temperature 0 with its key/value cache
#   merak-nocache  the same with --no-cache (the whole sequence every token)
#   torch          tests/ref/torch_ref.py generate --cache (plain PyTorch
#                  float32, a key/value cache of torch.cat'ed tensors)
#   bound          parameter bytes / read bandwidth: the bandwidth is the
#                  best of 20 torch.sum() over a 512 MiB float32 tensor on
#                  the same threads, the time one token cannot go below
#
# Rates are generated tokens over the time from the prompt's first
# position to the last token (the prompt's prefill included, as both
# sides report it); each case is the median of REPS runs, merak and torch
# alternating.  Output, one line per case, plus '#' detail lines:
#
#   bench_generate model=gpt2-124m threads=1 merak_tok_s=... torch_tok_s=... bound_tok_s=...
#       nocache_tok_s=... ratio=merak/torch=... ratio=merak/bound=... ratio=cache/nocache=...
#
# Knobs (defaults in brackets): MODELS [gpt2-124m llama-125m]  THREADS [1 2]
#   PROMPT [16] (prompt tokens)  TOKENS [128]  NOCACHE_TOKENS [32]  REPS [3]
#   PYTHON [/usr/bin/python3]  TORCH_OMP_WAIT_POLICY [passive] (torch's best on
#   a machine with as many threads as cores; see bench_train.sh)
# Exits 0 with a "skipped" message when PYTHON cannot import torch.
set -eu

BUILDDIR=${1:-.}
MODELS=${MODELS:-"gpt2-124m llama-125m"}
THREADS=${THREADS:-"1 2"}
PROMPT=${PROMPT:-16}
TOKENS=${TOKENS:-128}
NOCACHE_TOKENS=${NOCACHE_TOKENS:-32}
REPS=${REPS:-3}
PYTHON=${PYTHON:-/usr/bin/python3}
TORCH_OMP_WAIT_POLICY=${TORCH_OMP_WAIT_POLICY:-passive}

. "$(dirname "$0")/lib.sh"
bench_setup bench_generate "$BUILDDIR" merak-generate
bench_need "$PYTHON" torch
REF=$SRCDIR/tests/ref/torch_ref.py

cat > "$TMP/gpt2-124m.json" <<'EOF'
{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":768,"n_layer":12,"n_head":12,"n_inner":null,"layer_norm_epsilon":1e-5,"initializer_range":0.02,"tie_word_embeddings":true,"activation_function":"gelu_new","resid_pdrop":0.0,"embd_pdrop":0.0,"attn_pdrop":0.0}
EOF
cat > "$TMP/llama-125m.json" <<'EOF'
{"model_type":"llama","vocab_size":32000,"hidden_size":768,"intermediate_size":2048,"num_hidden_layers":12,"num_attention_heads":12,"num_key_value_heads":4,"max_position_embeddings":1024,"rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":false,"initializer_range":0.02,"hidden_act":"silu"}
EOF

# read bandwidth on K threads, bytes/s: the best of 20 sums of 512 MiB
cat > "$TMP/bw.py" <<'EOF'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
x = torch.ones(128 << 20)
best = float("inf")
for _ in range(20):
    t0 = time.perf_counter()
    s = float(x.sum())
    best = min(best, time.perf_counter() - t0)
assert s == x.numel()
print("%.0f" % (x.numel() * 4 / best))
EOF

# a prompt of PROMPT token ids, the same for every run
prompt=$(awk -v n="$PROMPT" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? " " : "", (i * 7919 + 13) % 251 }')

rate_of() { sed -n 's/.*(\([0-9.]*\) tokens\/s.*/\1/p' "$1" | tail -1; }

echo "# bench_generate: prompt $PROMPT tokens, $TOKENS generated ($NOCACHE_TOKENS without the cache), greedy, batch 1, $REPS reps, $(nproc) cpus, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for model in $MODELS; do
    cfg=$TMP/$model.json
    [ -f "$cfg" ] || die "unknown model '$model' (gpt2-124m, llama-125m)"
    w=$TMP/$model.safetensors
    "$PYTHON" "$REF" init --config "$cfg" --seed 1 --out "$w" > "$TMP/init.txt" || die "torch_ref.py init failed ($model)"
    params=$(sed -n 's/.* tensors \([0-9]*\) params.*/\1/p' "$TMP/init.txt")
    for th in $THREADS; do
        : > "$TMP/mer"; : > "$TMP/tor"; : > "$TMP/noc"
        for _ in $(seq "$REPS"); do
            OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=1 "$BUILDDIR/merak-generate" --model "$cfg" --weights "$w" \
                --ids --prompt "$prompt" --temperature 0 --max-tokens "$TOKENS" --threads "$th" \
                > "$TMP/mer.ids" 2> "$TMP/mer.err" || { cat "$TMP/mer.err" >&2; die "merak-generate failed ($model)"; }
            rate_of "$TMP/mer.err" >> "$TMP/mer"
            OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_WAIT_POLICY=$TORCH_OMP_WAIT_POLICY \
                "$PYTHON" "$REF" generate --cache --config "$cfg" \
                --weights "$w" --prompt "$prompt" --max-tokens "$TOKENS" --threads "$th" \
                > "$TMP/tor.ids" 2> "$TMP/tor.err" || { cat "$TMP/tor.err" >&2; die "torch_ref.py generate failed ($model)"; }
            rate_of "$TMP/tor.err" >> "$TMP/tor"
            OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=1 "$BUILDDIR/merak-generate" --model "$cfg" --weights "$w" \
                --ids --prompt "$prompt" --temperature 0 --max-tokens "$NOCACHE_TOKENS" --threads "$th" --no-cache \
                > /dev/null 2> "$TMP/noc.err" || { cat "$TMP/noc.err" >&2; die "merak-generate --no-cache failed"; }
            rate_of "$TMP/noc.err" >> "$TMP/noc"
        done
        same=$(awk 'NR == FNR { for (i = 1; i <= NF; i++) a[i] = $i; n = NF; next }
              { for (i = 1; i <= NF && i <= n; i++) if ($i != a[i]) break; print i - 1 }' "$TMP/mer.ids" "$TMP/tor.ids")
        bw=$(OMP_NUM_THREADS=$th "$PYTHON" "$TMP/bw.py" "$th")
        m=$(median < "$TMP/mer") t=$(median < "$TMP/tor") n=$(median < "$TMP/noc")
        echo "# $model threads=$th: merak $(paste -sd' ' "$TMP/mer") | torch $(paste -sd' ' "$TMP/tor") | no cache $(paste -sd' ' "$TMP/noc") tokens/s; read bandwidth $(awk -v b="$bw" 'BEGIN { printf "%.1f", b / 1e9 }') GB/s; $params params; the first $same of $TOKENS greedy tokens equal"
        awk -v model="$model" -v th="$th" -v m="$m" -v t="$t" -v n="$n" -v bw="$bw" -v p="$params" 'BEGIN {
            bound = bw / (4 * p)
            printf "bench_generate model=%s threads=%s merak_tok_s=%.2f torch_tok_s=%.2f bound_tok_s=%.2f nocache_tok_s=%.2f ratio=merak/torch=%.3f ratio=merak/bound=%.3f ratio=cache/nocache=%.1f\n",
                model, th, m, t, bound, n, m / t, m / bound, m / n }'
    done
done
