#!/bin/sh
# merak-generate --device cuda against the CPU backend: from the same
# weights (a GPT-2 and a LLaMA, initial weights at 10 times the usual scale
# so greedy tokens vary), greedy tokens with the key/value cache and
# without it are the CPU's, token for token (a near-tie broken the other
# way shows as a difference; fp32 on both makes one unlikely over 48
# tokens), and a sampled run is reproducible by seed.  Skipped without a
# CUDA build or a GPU.
. "$(dirname "$0")/../lib.sh"
grep -q '^#define HAVE_CUDA 1' "$MERAK_BUILDDIR/config.h" || skip "built without CUDA"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
GEN=$MERAK_BUILDDIR/merak-generate
make_shard "$WORK/data.bin"
prompt=$(head -c 100 "$WORK/corpus.txt" | od -An -tu1 | tr -s ' \n' '  ')
for arch in gpt2 llama; do
    cfg=$WORK/$arch.json
    sed 's/"initializer_range": 0.02/"initializer_range": 0.2/' "$FIX/ref-$arch.json" > "$cfg"
    "$TRAIN" --model "$cfg" --data "$WORK/data.bin" --micro-batch 4 --seq-len 64 --steps 1 --lr 1e-9 \
        --threads 2 --save-weights "$WORK/$arch.safetensors" > /dev/null || fail "$arch: merak-train failed"
    g() { "$GEN" --model "$cfg" --weights "$WORK/$arch.safetensors" --ids --prompt "$prompt" "$@" 2>> "$WORK/err"; }
    g --temperature 0 --max-tokens 48 --threads 2 > "$WORK/cpu" || { cat "$WORK/err" >&2; fail "$arch: cpu"; }
    g --temperature 0 --max-tokens 48 --device cuda > "$WORK/cuda" || { cat "$WORK/err" >&2; fail "$arch: cuda"; }
    g --temperature 0 --max-tokens 48 --device cuda --no-cache > "$WORK/cuda.nc" || fail "$arch: cuda --no-cache"
    cmp -s "$WORK/cpu" "$WORK/cuda" || fail "$arch: cpu $(cat "$WORK/cpu") / cuda $(cat "$WORK/cuda")"
    cmp -s "$WORK/cuda" "$WORK/cuda.nc" || fail "$arch: the GPU's cache and recomputing differ"
    g --max-tokens 48 --device cuda --seed 4 > "$WORK/s1" || fail "$arch: sampling on the GPU failed"
    g --max-tokens 48 --device cuda --seed 4 > "$WORK/s2" || fail "$arch: sampling on the GPU failed"
    [ "$(wc -w < "$WORK/s1")" -eq 48 ] || fail "$arch: the GPU sampled $(wc -w < "$WORK/s1") tokens, not 48"
    cmp -s "$WORK/s1" "$WORK/s2" || fail "$arch: a seed sampled different tokens on the GPU"
    echo "$arch: the GPU's 48 greedy tokens are the CPU's, with and without the cache"
done
