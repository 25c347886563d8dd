#!/bin/sh
# demo.sh - the README's first command: installs the dependencies, builds
# Merak in build/, turns the project's own sources into a byte-level token
# shard and trains the demo GPT-2 on it, printing the loss as it falls.
# STEPS=N changes the number of steps (default 200).
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
./merak-train --model demo-gpt2 --data demo/train.bin --micro-batch 8 --micro-batches 2 \
    --seq-len 128 --steps "${STEPS:-200}" --lr 2e-3 --warmup 20 --lr-schedule cosine --min-lr 2e-4 \
    --log-every 10 --metrics demo/metrics.jsonl --save-weights demo/demo-gpt2.safetensors
