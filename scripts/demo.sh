#!/bin/sh
# demo.sh - the README's first command: installs the dependencies, builds
# Merak in build/, turns the project's own sources into a byte-level token
# shard and trains the demo GPT-2 on it in 3D: 8 MPI ranks on this machine,
# dp = tp = pp = 2 (2 replicas of a 2-stage pipeline whose stages are split
# over 2 ranks each), printing the loss as it falls and a sample of the
# model's text every 50 steps; then it asks the trained model for 200 tokens
# of C with merak-generate.
# STEPS=N changes the number of steps (default 150).
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
./scripts/install-deps.sh
[ -x configure ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] || ../configure
make -j"$(nproc)"
mkdir -p demo
find "$top/runtime" "$top/kernels/cpu" "$top/tools" "$top/include" -name '*.[ch]' | sort |
    xargs cat "$top"/man/*.[0-9] > demo/corpus.txt
./merak-shard -o demo/train.bin demo/corpus.txt
# Open MPI refuses root unless told; more ranks than cores need --oversubscribe.
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
rm -f demo/metrics.jsonl
mpirun -np 8 --oversubscribe --bind-to none \
    ./merak-train --model demo-gpt2 --data demo/train.bin --dp 2 --tp 2 --pp 2 --schedule 1f1b \
    --micro-batch 8 --micro-batches 2 --seq-len 128 --steps "${STEPS:-150}" --lr 2e-3 --warmup 20 \
    --lr-schedule cosine --min-lr 2e-4 --threads 1 --log-every 10 --metrics demo/metrics.jsonl \
    --sample-every 50 --prompt "static int " --sample-tokens 48 \
    --save-weights demo/demo-gpt2.safetensors
# What the model it just trained writes (a key/value cache, one position per token)
echo "merak-generate from the trained weights:"
./merak-generate --model demo-gpt2 --weights demo/demo-gpt2.safetensors --threads "$(nproc)" \
    --prompt "static int " --max-tokens 200 --temperature 0.8 --top-k 40
