#!/bin/sh
# Bad input: every case gets exactly one line on stderr naming the problem
# and exit status 2 (usage) or 1 (anything else); never a crash.
. "$(dirname "$0")/lib.sh"
make_shard "$WORK/data.bin"
D="--data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 1 --threads 1"

# expect STATUS PATTERN -- ARGS...: runs merak-train, checks both.
expect() {
    want=$1 pattern=$2; shift 3
    expect_exit "$want" "$pattern" "$TRAIN" "$@"
}

# flags
expect 2 "unknown model 'gpt5'" -- --model gpt5 $D
expect 2 "not an integer" -- $D --steps abc
expect 2 "out of range" -- $D --micro-batch 0
# AdamW: epsilon above 0 (0 divides 0 by 0), betas below 1, the open end said
expect 2 "--eps: 0 is out of range (0, 1\]" -- $D --eps 0
# ... and as they are kept, in single precision: never silently 0 or 1
expect 2 "--lr: 1e-50 is below the smallest single-precision number" -- $D --lr 1e-50
expect 2 "--eps: 1e-320 is below the smallest single-precision number" -- $D --eps 1e-320
expect 2 "--beta2: 0.9999999999 is 1 in single precision, out of range \[0, 1)" -- $D --beta2 0.9999999999
expect 2 "--beta1: 1 is out of range \[0, 1)" -- $D --beta1 1
expect 2 "--beta2: -0.5 is out of range \[0, 1)" -- $D --beta2 -0.5
expect 2 "not constant or cosine" -- $D --lr-schedule linear
expect 2 "unknown option" -- $D --bogus
expect 2 "needs a value" -- $D --lr
expect 2 "data is required" -- --model tiny-gpt2
expect 2 "p2p 'tcp' is not mpi" -- $D --p2p tcp
expect 2 "p2p nccl needs tensors on GPUs\|p2p 'nccl' is not mpi" -- $D --p2p nccl
expect 2 "coll 'gloo' is not mpi" -- $D --coll gloo
# NCCL reduces GPU buffers: the CPU's tensors (a build without CUDA: no such name)
expect 2 "coll nccl needs tensors on GPUs\|coll 'nccl' is not mpi" -- $D --coll nccl
expect 2 "schedule 'zb' is not gpipe, 1f1b, scp, zb-h1 or interleaved" -- $D --schedule zb
# virtual stages: interleaved only, 2 or more, dividing the model's layers
expect 2 "virtual stages 2 need the interleaved schedule (not 1f1b)" -- $D --virtual-stages 2
expect 2 "virtual stages 1: the interleaved schedule takes 2 to 64" -- $D --schedule interleaved --virtual-stages 1
expect 2 "virtual stages 65: the interleaved schedule takes 2 to 64" -- $D --schedule interleaved --virtual-stages 65
expect 2 "not an integer" -- $D --schedule interleaved --virtual-stages two
# an integer too large for a long is out of range, not "not an integer"
expect 2 "global-batch: 99999999999999999999 is out of range \\[" -- $D --global-batch 99999999999999999999
expect 2 "virtual-stages 3 does not divide the model's 2 layers" -- $D --schedule interleaved --virtual-stages 3
expect 2 "interleaved needs at least 2 pipeline stages" -- $D --schedule interleaved
# a model that cannot fit is refused before anything is allocated: 1024
# sequences of 1024 tokens of GPT-2 hold terabytes of activations
expect 1 "not enough memory: rank 0 on .* needs [0-9.]* GB (parameters, gradients, optimizer state, activations), but its host has [0-9.]* GB available" \
    -- $D --model gpt2 --micro-batch 1024 --seq-len 1024
MERAK_VIRTUAL_STAGES=x expect 2 "MERAK_VIRTUAL_STAGES: 'x' is not an integer" -- $D
# the environment describes the layout in one process too
MERAK_TP=x expect 2 "MERAK_TP: 'x' is not an integer" -- $D
MERAK_PP=0 expect 2 "MERAK_PP: 0 is out of range" -- $D
MERAK_RANK=3 expect 1 "MERAK_RANK=3, but this is one process (not started by mpirun or srun --mpi)" -- $D
MERAK_WORLD_SIZE=8 expect 1 "MERAK_WORLD_SIZE=8, but this is one process" -- $D
MERAK_TP_RANK=1 expect 1 "MERAK_TP_RANK=1, but rank 0 of dp 1 x tp 1 x pp 1 is at 0" -- $D
# a model one stage cannot hold (2^31 parameters: MPI's and the kernels'
# counts) is a layout that cannot work, a usage error (--pp or --tp split
# it; --auto skips such layouts), also in one process
printf '{"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 1, "vocab_size": 40000000, "n_positions": 64}' \
    > "$WORK/huge.json"
expect 2 "stage 0 holds 2560054208 parameters, more than one stage may (2147483647.*(--pp) or tensor-parallel ranks (--tp)" \
    -- $D --model "$WORK/huge.json"
# a tensor past counting (its elements overflow) and a model deeper than
# any are refused before anything is built at length (UBSan would see an
# overflow; 8000 layers took minutes)
printf '{"model_type": "gpt2", "n_embd": 2147483647, "n_head": 1, "n_layer": 1, "vocab_size": 256, "n_positions": 64}' \
    > "$WORK/wide.json"
expect 1 "c_attn.weight: more than 2^60 elements" -- $D --model "$WORK/wide.json"
printf '{"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 100000, "vocab_size": 256, "n_positions": 64}' \
    > "$WORK/deep.json"
expect 1 "n_layer 100000 is more than 2048, the deepest model merak builds" -- $D --model "$WORK/deep.json"
# malformed, they are usage errors (merak-train(1), ENVIRONMENT)
MERAK_RANK=x expect 2 "MERAK_RANK: 'x' is not an integer" -- $D
MERAK_WORLD_SIZE=0 expect 2 "MERAK_WORLD_SIZE: 0 is out of range" -- $D
MERAK_PP_RANK=-1 expect 2 "MERAK_PP_RANK: -1 is out of range" -- $D
MERAK_GPU=gpu0 expect 2 "MERAK_GPU: 'gpu0' is not an integer" -- $D
MERAK_BIND=near expect 2 "MERAK_BIND=near: expected closest or none" -- $D
MERAK_VIRTUAL_STAGES=4 expect 2 "virtual stages 4 need the interleaved schedule" -- $D
MERAK_VIRTUAL_STAGES=4 expect 2 "virtual-stages 4 does not divide the model's 2 layers" -- $D --schedule interleaved
MERAK_VIRTUAL_STAGES=4 expect 2 "interleaved needs at least 2 pipeline stages" -- $D --schedule interleaved \
    --virtual-stages 2
expect 2 "partition 'even' is not uniform, parameters, autopipe or custom:S0,S1,..." -- $D --partition even
expect 2 "partition 'custom:0,x': 'x' is not a block number" -- $D --partition custom:0,x
expect 2 "partition 'custom:0,3' starts 2 stages, not 1" -- $D --partition custom:0,3
expect 2 "device profile 'cpu': only the autopipe partition uses one (partition parameters)" -- $D --device-profile cpu \
    --partition parameters
expect 2 "device profile 'tpu9' is not in the built-in profiles (known: cpu, a100-80g, h100-80g, h200)" -- $D --partition autopipe --device-profile tpu9
expect 1 "device profiles: .*nofile.json: cannot open: No such file" -- $D --partition autopipe --device-profile "$WORK/nofile.json"

# Outputs are checked before the first step: a finished run is never lost
# to its last write, nor the data to the metrics.  Nothing trains first.
before() {
    pat=$1; shift
    expect 1 "$pat" -- $D --steps 3 "$@"
    ! grep -q "^step" "$WORK/out" || fail "$*: trained before refusing"
}
before "cannot create a file in $WORK/no-such-dir" --save-weights "$WORK/no-such-dir/w.safetensors"
before "save-weights $WORK/data.bin is a data shard, which it reads: it would be overwritten" --save-weights "$WORK/data.bin"
before "metrics $WORK/data.bin is a data shard" --metrics "$WORK/data.bin"
before "$WORK: not a regular file, so it cannot be written" --save-weights "$WORK"
before "trace $WORK/m.json is also the --metrics file" --metrics "$WORK/m.json" --trace "$WORK/m.json"
# ... nor any other file it reads, through links: the validation shards,
# the tp-rules, the device profiles, the checkpoint it resumes
ln -s data.bin "$WORK/link.bin"
before "save-weights $WORK/link.bin is a data shard ($WORK/data.bin), which it reads" --save-weights "$WORK/link.bin"
cp "$WORK/data.bin" "$WORK/val.bin"
before "metrics $WORK/val.bin is a validation shard" --val-data "$WORK/val.bin" --eval-every 1 --metrics "$WORK/val.bin"
printf '*.attn.c_attn.weight column\n' > "$WORK/rules.txt"
before "trace $WORK/rules.txt is the --tp-rules file" --tp-rules "$WORK/rules.txt" --trace "$WORK/rules.txt"
cp "$MERAK_SRCDIR/data/devices.json" "$WORK/devices.json"
MERAK_DEVICES="$WORK/devices.json" before "metrics $WORK/devices.json is the device profiles file (MERAK_DEVICES)" \
    --metrics "$WORK/devices.json"
"$TRAIN" --model tiny-gpt2 $D --save "$WORK/ck" > /dev/null || fail "a one-step checkpoint"
ck=$(ls -d "$WORK"/ck/step_*)
before "save-weights $ck/config.json is a file of the checkpoint it resumes" --save "$WORK/ck" --resume latest \
    --save-weights "$ck/config.json"
[ -s "$ck/config.json" ] && [ -f "$ck/DONE" ] || fail "the resumed checkpoint was touched"
# Inputs that are not regular files are refused, never waited on (a FIFO
# with no writer would block an open forever: each case has 30 s).
mkfifo "$WORK/fifo"
T="timeout 30 $TRAIN"
expect_exit 1 "fifo: not a regular file" $T $D --data "$WORK/fifo"
expect_exit 1 "fifo: not a regular file" $T $D --model "$WORK/fifo"
expect_exit 1 "fifo: not a regular file" $T $D --init "$WORK/fifo"
expect_exit 1 "device profiles: $WORK/fifo: not a regular file" $T $D --partition autopipe --device-profile "$WORK/fifo"
# ... and every tool's output that is not a regular file (a FIFO, a device)
# is refused, never replaced by a file
B=$MERAK_BUILDDIR
expect_exit 1 "fifo: not a regular file, so it cannot be written" timeout 30 "$SHARD" -o "$WORK/fifo" "$MERAK_SRCDIR/README.md"
expect_exit 1 "fifo: not a regular file, so it cannot be written" timeout 30 "$B/merak-ckpt" export "$ck" -o "$WORK/fifo"
expect_exit 1 "fifo: not a regular file, so it cannot be written" timeout 30 "$B/merak-plan" --simulate \
    --schedule 1f1b --stages 2 --micro-batches 2 --svg "$WORK/fifo"
[ -p "$WORK/fifo" ] || fail "a FIFO was replaced by a file"
# a file over the size limit (ulimit -f) is a reported write error, its
# temporary removed, not a SIGXFSZ; a full stdout is reported
expect_exit 1 "big.bin: write failed: File too large" sh -c "ulimit -f 4; exec $SHARD -o $WORK/big.bin $MERAK_SRCDIR/README.md"
[ -z "$(ls -A "$WORK" | grep '^\.big\.bin\.')" ] || fail "a temporary was left: $(ls -A "$WORK")"
# a count too large is out of range, and the message says the range
expect_exit 2 "merak-topo: --nodes: 99999999999 is out of range \\[1, 1073741823\\]" $B/merak-topo --nodes 99999999999
if [ -w /dev/full ]; then
    expect_exit 1 "merak-ckpt: writing the output: No space left on device" sh -c "exec $B/merak-ckpt inspect $ck > /dev/full"
    expect_exit 1 "merak-topo: writing the output failed: No space left on device" \
        sh -c "exec $B/merak-topo --input $MERAK_SRCDIR/tests/fixtures/topologies/$(ls "$MERAK_SRCDIR/tests/fixtures/topologies" | grep '\.xml$' | head -1) > /dev/full"
fi
# sub-batches of sub-pipelined tensor parallelism: 1 to 64, dividing the micro-batch
expect 2 "tp-overlap 3 does not divide the micro-batch of 2 sequences" -- $D --tp-overlap 3
expect 2 "tp-overlap 128: 1 to 64 sub-batches per micro-batch" -- $D --micro-batch 128 --tp-overlap 128
expect 2 "tp-overlap: 0 is out of range" -- $D --tp-overlap 0
expect 2 "not an integer" -- $D --tp-overlap 2x
MERAK_TP_OVERLAP=x expect 2 "MERAK_TP_OVERLAP: 'x' is not an integer" -- $D
MERAK_TP_OVERLAP=4 expect 2 "tp-overlap 4 does not divide the micro-batch of 2 sequences" -- $D
MERAK_SCHEDULE=zb expect 2 "MERAK_SCHEDULE: schedule 'zb' is not gpipe, 1f1b, scp, zb-h1 or interleaved" -- $D
expect 2 "recompute 'some' is not none, full, stage-aware\[=R0\] or budget=GB" -- $D --recompute some
expect 2 "recompute 'stage-aware=2': R0 must be a fraction" -- $D --recompute stage-aware=2
MERAK_RECOMPUTE=budget=x expect 2 "MERAK_RECOMPUTE: recompute 'budget=x': the budget must be a positive" -- $D
# a budget no number of recomputed layers meets, found once the model is built
expect 2 "recompute budget=1e-06: stage 0 needs .* GB of activations even when it recomputes every layer" -- \
    $D --recompute budget=0.000001
expect 2 "device 'tpu' is not cpu or cuda" -- $D --device tpu
# --device cuda: a build without CUDA refuses the flag (2); a CUDA build on a
# machine without a usable GPU says so (1); with a GPU it trains.
if grep -q '^#define HAVE_CUDA 1' "$MERAK_BUILDDIR/config.h"; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        "$TRAIN" $D --device cuda > "$WORK/out" 2>&1 || { cat "$WORK/out" >&2; fail "--device cuda on a GPU machine"; }
        echo "ok (0): --device cuda trained on the GPU"
    else
        expect 1 "device cuda: no usable GPU" -- $D --device cuda
    fi
else
    expect 2 "device cuda: this merak was built without CUDA" -- $D --device cuda
fi
# the Slurm plugin's pass-through variables
MERAK_MICROBATCHES=x expect 2 "MERAK_MICROBATCHES: 'x' is not an integer" -- $D
MERAK_RECOMPUTE=sometimes expect 2 "MERAK_RECOMPUTE: recompute 'sometimes' is not" -- $D
MERAK_RECOMPUTE=full "$TRAIN" $D > "$WORK/out" 2>&1 && grep -q "recompute full): stage 0 .* 9/9 layers recomputed" "$WORK/out" ||
    { cat "$WORK/out" >&2; fail "MERAK_RECOMPUTE=full did not make merak-train recompute"; }
echo "ok (0): MERAK_RECOMPUTE=full recomputes: $(grep activations "$WORK/out")"
expect 2 "beyond the model's 256 positions" -- $D --seq-len 300
expect 2 "not a number" -- $D --lr 1e-3x
# config files
printf '{"model_type": "gpt2", "vocab_size": 256,' > "$WORK/broken.json"
expect 1 "broken.json" -- --model "$WORK/broken.json" $D
printf '{"model_type": "gpt2", "vocab_size": 256, "n_embd": 64}\n' > "$WORK/partial.json"
expect 1 "partial.json.*n_layer\|partial.json.*n_positions\|partial.json.*n_head" -- --model "$WORK/partial.json" $D
expect 1 "nothere.json" -- --model "$WORK/nothere.json" $D
# shards
expect 1 "no file matches" -- --model tiny-gpt2 --data "$WORK/none-*.bin" --steps 1
head -c 2000 "$WORK/data.bin" > "$WORK/trunc.bin"
expect 1 "trunc.bin" -- --model tiny-gpt2 --data "$WORK/trunc.bin" --steps 1
printf 'XXXX' | dd of="$WORK/magic.bin" bs=1 count=4 conv=notrunc 2>/dev/null
tail -c +5 "$WORK/data.bin" >> "$WORK/magic.bin"
expect 1 "magic" -- --model tiny-gpt2 --data "$WORK/magic.bin" --steps 1
sed 's/"vocab_size": 256/"vocab_size": 100/' "$FIX/ref-gpt2.json" > "$WORK/small-vocab.json"
expect 1 "vocab" -- --model "$WORK/small-vocab.json" $D
# safetensors
"$TRAIN" --model tiny-llama $D --steps 0 --save-weights "$WORK/llama.safetensors" > /dev/null
expect 1 "transformer.wte.weight' is missing" -- --model tiny-gpt2 $D --init "$WORK/llama.safetensors"
# strict: a tensor the model does not have is refused, unless --init-extra
"$TRAIN" --model tiny-gpt2 $D --steps 0 --save-weights "$WORK/g2.safetensors" > /dev/null
"$PY3" - "$WORK/g2.safetensors" "$WORK/extra.safetensors" <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
end = max(v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__")
for name in ("transformer.h.0.attn.bias", "transformer.h.7.mlp.c_fc.weight"):
    hdr[name] = {"dtype": "F32", "shape": [2], "data_offsets": [end, end + 8]}
    data += struct.pack("<2f", 0.0, 1.0)
    end += 8
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data)
PYEOF
expect 1 "extra.safetensors: tensor 'transformer.h.7.mlp.c_fc.weight' is not a parameter of the model" -- \
    --model tiny-gpt2 $D --init "$WORK/extra.safetensors"
"$TRAIN" --model tiny-gpt2 $D --init "$WORK/extra.safetensors" --init-extra > /dev/null ||
    fail "--init-extra did not load the model's tensors from a file with others"
sed 's/"n_embd": 64/"n_embd": 32/' "$FIX/ref-gpt2.json" > "$WORK/narrow.json"
"$TRAIN" --model "$WORK/narrow.json" $D --steps 0 --save-weights "$WORK/narrow.safetensors" > /dev/null
expect 1 "has shape \[256, 32\] (expected \[256, 64\])" -- --model tiny-gpt2 $D --init "$WORK/narrow.safetensors"
# an integer tensor where weights go: named with its file (the same
# header with the embedding's dtype I32, same size)
"$PY3" -c 'import sys; raw = open(sys.argv[1], "rb").read(); k = b"\"transformer.wte.weight\":{\"dtype\":\"F"
assert raw.count(k) == 1; open(sys.argv[2], "wb").write(raw.replace(k, k[:-1] + b"I"))' "$WORK/g2.safetensors" "$WORK/i32.safetensors"
expect 1 "i32.safetensors: tensor 'transformer.wte.weight' is I32: weights must be floating point" -- \
    --model tiny-gpt2 $D --init "$WORK/i32.safetensors"
# Mistral: LLaMA's architecture with a sliding window, which is causal
# attention within it: trains bit for bit as the same LLaMA config, and
# its positions are the window's
sed 's/"model_type": "llama"/"model_type": "mistral", "sliding_window": 16/' "$FIX/ref-llama.json" > "$WORK/mistral.json"
sed 's/"model_type": "llama"/"model_type": "mistral", "sliding_window": null/' "$FIX/ref-llama.json" > "$WORK/mistral-full.json"
for m in "$FIX/ref-llama.json" "$WORK/mistral.json" "$WORK/mistral-full.json"; do
    "$TRAIN" --model "$m" $D --steps 2 --metrics "$WORK/mis.jsonl" > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--model $m"; }
    sed 's/"tokens_per_s".*//' "$WORK/mis.jsonl" > "$WORK/mis.$(basename "$m")"
    rm "$WORK/mis.jsonl"
done
cmp -s "$WORK/mis.ref-llama.json" "$WORK/mis.mistral.json" && cmp -s "$WORK/mis.ref-llama.json" "$WORK/mis.mistral-full.json" ||
    fail "a Mistral config trains unlike the same LLaMA config"
expect 2 "seq-len 32 is longer than the model's sliding_window 16: sliding-window attention is not implemented" \
    -- --model "$WORK/mistral.json" $D --seq-len 32
# RoPE scaling: dynamic within max_position_embeddings is the library's
# unscaled RoPE, so trains bit for bit as the config without it; linear
# and llama3 move the losses (their values: ref_compare.sh)
sed 's/"rope_theta": 10000.0,/"rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "factor": 4.0},/' \
    "$FIX/ref-llama.json" > "$WORK/dynamic.json"
sed 's/"rope_theta": 10000.0,/"rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 4.0},/' \
    "$FIX/ref-llama.json" > "$WORK/linear.json"
for m in "$WORK/dynamic.json" "$WORK/linear.json"; do
    "$TRAIN" --model "$m" $D --steps 2 --metrics "$WORK/mis.jsonl" > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--model $m"; }
    sed 's/"tokens_per_s".*//' "$WORK/mis.jsonl" > "$WORK/mis.$(basename "$m")"
    rm "$WORK/mis.jsonl"
done
cmp -s "$WORK/mis.ref-llama.json" "$WORK/mis.dynamic.json" || fail "dynamic rope_scaling within the positions changed the losses"
! cmp -s "$WORK/mis.ref-llama.json" "$WORK/mis.linear.json" || fail "linear rope_scaling left the losses as they were"
# what merak does not compute is refused by name: other RoPE types, keys
# a type does not read, partial rotary embeddings, LLaMA's output-projection
# bias, Qwen2's sliding window
refuse() { # NAME SED-EXPRESSION PATTERN
    sed "$2" "$FIX/ref-llama.json" > "$WORK/$1.json"
    expect 1 "$3" -- --model "$WORK/$1.json" $D
}
R='s/"rope_theta": 10000.0,/"rope_theta": 10000.0, "rope_scaling": '
refuse yarn "$R"'{"rope_type": "yarn", "factor": 4.0},/' \
    "rope_scaling: rope_type 'yarn' is not supported (default, linear, dynamic or llama3)"
refuse extra "$R"'{"type": "linear", "factor": 2.0, "attention_factor": 1.0},/' \
    "rope_scaling: 'attention_factor' is not supported with rope_type 'linear'"
refuse small "$R"'{"type": "linear", "factor": 0.5},/' "rope_scaling: factor 0.5 must be at least 1"
refuse dynorig "$R"'{"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 128},/' \
    "rope_scaling: original_max_position_embeddings 128 differs from max_position_embeddings 256, which dynamic scaling counts from"
refuse notype "$R"'{"factor": 2.0},/' "rope_scaling: missing required field 'rope_type'"
refuse bands "$R"'{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 64},/' \
    "rope_scaling: high_freq_factor 1 must be above low_freq_factor 4"
refuse partial 's/"rope_theta": 10000.0,/"rope_theta": 10000.0, "partial_rotary_factor": 0.5,/' \
    "partial_rotary_factor 0.5 is not supported (1 only)"
refuse obias 's/"rope_theta": 10000.0,/"rope_theta": 10000.0, "attention_bias": true,/' "attention_bias = true is not supported"
refuse qwindow 's/"model_type": "llama"/"model_type": "qwen2", "use_sliding_window": true/' \
    "use_sliding_window = true is not supported"
# an initializer_range no float holds is named as what it is
sed 's/"initializer_range": 0.02/"initializer_range": 1e300/' "$FIX/ref-gpt2.json" > "$WORK/init-range.json"
expect 1 "initializer_range 1e+300 must be at least 0 and below 1e30" -- --model "$WORK/init-range.json" $D
head -c 100 "$WORK/llama.safetensors" > "$WORK/cut.safetensors"
expect 1 "cut.safetensors" -- --model tiny-llama $D --init "$WORK/cut.safetensors"
expect 1 "absent.safetensors" -- --model tiny-llama $D --init "$WORK/absent.safetensors"
# weights that are not finite, and steps that are not: a NaN in a file is
# named with the file and the tensor; ln_f gains of 3e38 make the logits
# overflow, so the first step's loss is not finite: --on-nan abort (the
# default) ends the run naming the step, skip skips every such update
"$TRAIN" --model tiny-gpt2 $D --steps 0 --save-weights "$WORK/g.safetensors" > /dev/null
"$PY3" - "$WORK/g.safetensors" "$WORK/nan.safetensors" "$WORK/huge.safetensors" <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
b, e = json.loads(raw[8:8 + n])["transformer.ln_f.weight"]["data_offsets"]
at = 8 + n + b
nan = bytearray(raw); nan[at + 20:at + 24] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(nan)
huge = bytearray(raw); huge[at:8 + n + e] = struct.pack("<%df" % ((e - b) // 4), *[3e38] * ((e - b) // 4))
open(sys.argv[3], "wb").write(huge)
PYEOF
expect 1 "nan.safetensors: tensor 'transformer.ln_f.weight' holds nan at element 5 of it" -- \
    --model tiny-gpt2 $D --init "$WORK/nan.safetensors"
expect 1 "step 0: OPTIMIZER_STEP: loss .*nan, gradient norm .*: not finite, training diverged" -- \
    --model tiny-gpt2 $D --init "$WORK/huge.safetensors"
"$TRAIN" --model tiny-gpt2 $D --steps 3 --init "$WORK/huge.safetensors" --on-nan skip --metrics "$WORK/nan.jsonl" \
    > "$WORK/out" 2>&1 || { cat "$WORK/out"; fail "--on-nan skip did not finish"; }
[ "$(grep -c "skipped: not finite, no update" "$WORK/out")" -eq 3 ] && [ "$(grep -c '"loss": null, .*"skipped": true' \
    "$WORK/nan.jsonl")" -eq 3 ] || { cat "$WORK/out" "$WORK/nan.jsonl"; fail "--on-nan skip: steps not reported skipped"; }
expect 2 "on-nan: 'ignore' is not skip or abort" -- $D --on-nan ignore

# Outputs never overwrite inputs, in every tool: refused before any work,
# the input left as it was (the model's config.json, merak-shard's input,
# merak-trace's trace, the checkpoint merak-ckpt exports, the profiles
# merak-plan --calibrate reads).
B=$MERAK_BUILDDIR
untouched() { cmp -s "$1" "$WORK/kept" || fail "$1 was changed"; }
printf '{"model_type": "gpt2", "vocab_size": 256, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64}\n' \
    > "$WORK/cfg.json"
cp "$WORK/cfg.json" "$WORK/kept"
expect 1 "metrics $WORK/cfg.json is the --model config file, which it reads" -- --model "$WORK/cfg.json" $D \
    --metrics "$WORK/cfg.json"
untouched "$WORK/cfg.json"
expect_exit 1 "calibrate $WORK/cfg.json is the --model config file" "$B/merak-plan" --calibrate "$WORK/cfg.json" \
    --model "$WORK/cfg.json"
untouched "$WORK/cfg.json"
cp "$WORK/devices.json" "$WORK/kept"
MERAK_DEVICES="$WORK/devices.json" expect_exit 1 "calibrate $WORK/devices.json is the device profiles file" \
    "$B/merak-plan" --calibrate "$WORK/devices.json" --model tiny-gpt2
untouched "$WORK/devices.json"
printf 'some text to shard\n' > "$WORK/text.txt"
cp "$WORK/text.txt" "$WORK/kept"
expect_exit 1 "o $WORK/text.txt is an input, which it reads" "$SHARD" -o "$WORK/text.txt" "$WORK/kept" "$WORK/text.txt"
untouched "$WORK/text.txt"
"$TRAIN" --model tiny-gpt2 $D --trace "$WORK/tr.json" > /dev/null || fail "a traced step"
cp "$WORK/tr.json" "$WORK/kept"
expect_exit 1 "svg $WORK/tr.json is the trace, which it reads" "$B/merak-trace" "$WORK/tr.json" --svg "$WORK/tr.json"
untouched "$WORK/tr.json"
w=$(ls "$ck"/model-*.safetensors | head -n 1)
cp "$w" "$WORK/kept"
expect_exit 1 "o $w is a file of the checkpoint" "$B/merak-ckpt" export "$ck" -o "$w"
untouched "$w"
echo "bad_input: ok"
