#!/bin/sh
# Fuzzing the parsers of files a user hands the runtime: safetensors
# weights, Hugging Face config.json (and the round trip through the
# config.json checkpoints carry), llm.c token shards, tensor-parallel rules
# (applied to tiny GPT-2), and checkpoints (a hostile manifest, or a
# hostile parameter file under a manifest that vouches for it, read whole
# and as a tensor-parallel shard), the Slurm plugin's option values and
# plugstack.conf arguments, byte-level BPE tokenizer.json files, device
# profiles, and hwloc XML topologies, real and hand-built nodes with the
# placement requests and Slurm strings topo reads (the placement's
# invariants checked).  Each fuzz/fuzz_*.c target is built with clang's
# libFuzzer, AddressSanitizer and UBSan from the parser's own sources, and
# runs FUZZ_SECONDS (default 5) from a small seed corpus; a crash, leak,
# sanitizer report or failed property fails the test and names the input.
# A longer run: FUZZ_SECONDS=3600 sh tests/fuzz.sh (see README.md).
# Skips (77) without clang or libFuzzer.
. "$(dirname "$0")/lib.sh"
CLANG=${CLANG:-clang}
command -v "$CLANG" > /dev/null 2>&1 || skip "no clang"
SECONDS_EACH=${FUZZ_SECONDS:-5}
S=$MERAK_SRCDIR
I="-I$S/include -I$S/runtime -I$S/runtime/train -I$S/runtime/graph -I$S/kernels -I$S/topo -I$S/spank -I$MERAK_BUILDDIR"
FLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$WORK/probe.c"
"$CLANG" $FLAGS "$WORK/probe.c" -o "$WORK/probe" > /dev/null 2>&1 || skip "$CLANG has no libFuzzer (libclang-rt-dev)"

# the parser's sources for each target
build() {
    name=$1; shift
    "$CLANG" $FLAGS $I "$S/fuzz/fuzz_$name.c" "$@" "$S/runtime/file.c" "$S/topo/errf.c" -ljansson -lz -lpcre2-8 -lutf8proc -lm \
        -o "$WORK/fuzz_$name" 2> "$WORK/build_$name.log" || { cat "$WORK/build_$name.log" >&2; fail "building fuzz_$name"; }
}
build safetensors "$S/runtime/train/safetensors.c" "$S/runtime/train/atomic.c"
build config "$S/runtime/graph/config.c"
build shard "$S/runtime/train/data.c" "$S/runtime/train/atomic.c"
build tp_rules "$S"/runtime/graph/*.c "$S/runtime/names.c"
build spank_args "$S/spank/spank_args.c" "$S/runtime/pipe/policy.c" "$S/runtime/names.c"
build tokenizer "$S/runtime/train/tokenizer.c"
build device -DMERAK_PKGDATADIR="\"/nonexistent\"" "$S/runtime/plan/device.c" "$MERAK_BUILDDIR/runtime/plan/devices_builtin.c" \
    "$S"/runtime/graph/*.c "$S/runtime/names.c"
# shellcheck disable=SC2046
build topo $(ls "$S"/topo/*.c | grep -v '/errf\.c$') -lhwloc
build ckpt "$S/runtime/train/ckpt_read.c" "$S/runtime/train/safetensors.c" "$S/runtime/train/atomic.c" "$S/runtime/train/data.c" \
    "$S"/runtime/graph/*.c "$S/runtime/names.c"

# seeds: one valid input of each kind (the fuzzer mutates from there)
mkdir -p "$WORK/safetensors" "$WORK/config" "$WORK/shard" "$WORK/tp_rules" "$WORK/ckpt" "$WORK/spank_args" \
    "$WORK/tokenizer" "$WORK/device" "$WORK/topo"
# a device profile (with measured rates per op kind, fp32's and bf16's), and a table of one
printf '{"memory_gb": 80, "matmul_tflops": 400, "memory_gbps": 2700, "intra_node_gbps": 360, "inter_node_gbps": 45,
 "latency_us": 8, "reserved_gb": 1.5, "ops": {"linear": {"forward": 3.5e14, "backward": 3e14}},
 "ops_bf16": {"linear": {"forward": 6.5e14, "backward": 6e14}, "gelu": {"forward": 2e12, "backward": 1.8e12}}}\n' \
    > "$WORK/device/one"
printf '{"devices": {"cpu": {"memory_gb": 16, "matmul_tflops": 0.05, "memory_gbps": 10, "intra_node_gbps": 5,
 "inter_node_gbps": 1, "latency_us": 0}}}\n' > "$WORK/device/table"
# placements on three real topologies (request bytes, the node, a string):
# 8 tasks per node, tp 2, pp 2 with a GPU list; 4 tasks, tp 4 on two
# nodes, cyclic, with a tasks-per-node string; 16 tasks, tp 8, pp 2 with a
# NIC list; a hand-built node with two GPUs and a NIC; and an XML file
# of the input's own (the one that hwloc loads in a child first)
mkdir -p "$WORK/topologies"
for f in authored-pcie-2s-8xL40S-4xCX6 real-hwloc-test-power8-4xP100-nvlink real-hwloc-test-nvidiaDGX2-reduced; do
    cp "$FIX/topologies/$f.xml" "$WORK/topologies/"
done
FUZZ_TOPOLOGIES=$WORK/topologies
export FUZZ_TOPOLOGIES
printf '\007\001\001\000\000\0030,1' > "$WORK/topo/a"
printf '\003\003\000\202\001\0074(x2),4' > "$WORK/topo/b"
printf '\017\007\001\000\002\007^mlx5_1' > "$WORK/topo/c"
printf '\001\001\000\000\003\0030,1gpu 0000:1b:00.0 0 0\ngpu 0000:3b:00.0 1 -1\nnic mlx5_0 0000:1c:00.0 0 0\n' \
    > "$WORK/topo/d"
{ printf '\007\001\001\000\004\0030,1'; cat "$FIX/topologies/real-hwloc-test-power8-4xP100-nvlink.xml"; } > "$WORK/topo/e"
# the byte-level BPE fixture (every byte a token, two merges, an added
# token) and a text after it; the first two bytes give the JSON's length
"$PY3" - "$FIX/tokenizer-bytes.json" "$WORK/tokenizer/seed" <<'PYEOF'
import sys
j = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(len(j).to_bytes(2, "big") + j + b" the thin one<|endoftext|>then 42! \xff")
# the same with a Unicode normalizer, and text with compatibility
# characters, a decomposed pair and bytes that are not UTF-8 between them
import json
nj = json.loads(j)
nj["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]}
nj = json.dumps(nj).encode()
open(sys.argv[2] + "-nfkc", "wb").write(len(nj).to_bytes(2, "big") + nj +
    "\ufb01 \u00bd \u2460 e\u0301".encode() + b"\xff\xcc\x81 \xe2\x82<|endoftext|>\xc0\xaf")
# and a SentencePiece-style one (byte fallback, an unknown token, LLaMA 2's
# normalizer), with text it lacks characters for
import json
v = {"<unk>": 0, "<s>": 1, "</s>": 2}
v.update({"<0x%02X>" % b: 3 + b for b in range(256)})
for w in ["\u2581", "t", "h", "e", "n", "\u2581t", "he", "\u2581the"]:
    v[w] = len(v)
j = {"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
     "pre_tokenizer": None, "added_tokens": [{"id": 2, "content": "</s>", "special": True}],
     "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True, "vocab": v,
               "merges": ["\u2581 t", "h e", "\u2581t he"]}}
j = json.dumps(j).encode()
open(sys.argv[2] + "-sp", "wb").write(len(j).to_bytes(2, "big") + j + "the thin one</s>then \U0001f389 caf\u00e9".encode())
# and a Unigram one (pieces with scores, an unknown piece, byte fallback,
# the Metaspace pre-tokenizer, LLaMA 2's decoder), with characters it lacks
pieces = [["<unk>", 0.0], ["<s>", 0.0], ["</s>", 0.0]] + [["<0x%02X>" % b, -12.0] for b in range(256)]
pieces += [[w, -1.5 - 0.25 * i] for i, w in enumerate(["\u2581", "t", "h", "e", "n", "\u2581t", "he", "\u2581the", "the"])]
j = {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
     "added_tokens": [{"id": 2, "content": "</s>", "special": True}],
     "decoder": {"type": "Sequence", "decoders": [
         {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
         {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
     "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": True, "vocab": pieces}}
j = json.dumps(j).encode()
open(sys.argv[2] + "-unigram", "wb").write(len(j).to_bytes(2, "big") + j + "the thin one</s>then \U0001f389 caf\u00e9".encode())
PYEOF
# options --merak-tp=2 --merak-pp=2 --merak-schedule=1f1b, max_tp=4, 8 tasks
printf '\0022\000\0032\000\0051f1b\000\200max_tp=4\000\000\010' > "$WORK/spank_args/seed"
"$PY3" - "$WORK/safetensors/seed" <<'PYEOF'
import json, struct, sys
hdr = {"__metadata__": {"format": "pt", "w": "{\"full\":[2,2],\"dim\":-1,\"segs\":[]}"},
       "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
       "h": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]},
       "b": {"dtype": "BF16", "shape": [1], "data_offsets": [22, 24]}}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
data = struct.pack("<4f", 1, 2, 3, 4) + struct.pack("<3e", 0.5, -1, 2) + b"\x80\x3f"
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PYEOF
cp "$FIX/ref-gpt2.json" "$FIX/ref-llama.json" "$WORK/config/"
printf 'a few words for a token shard\n' > "$WORK/words.txt"
"$SHARD" -o "$WORK/shard/seed" "$WORK/words.txt" > /dev/null
printf '# rules\n*.attn.c_attn.weight column\n*.mlp.c_proj.weight row\ntransformer.wte.weight vocab\n' \
    > "$WORK/tp_rules/seed"
# a checkpoint of tiny GPT-2 at step 1 (its data record is compared, with
# the micro-batch and sequence length fuzz_ckpt resumes with): its
# manifest (first byte even) and its parameter file (odd) as seeds
"$TRAIN" --data "$WORK/shard/seed" --micro-batch 1 --seq-len 8 --steps 1 --threads 1 --save "$WORK/ck" > /dev/null ||
    fail "saving the seed checkpoint"
printf '\000' | cat - "$WORK/ck/step_00000001/manifest.json" > "$WORK/ckpt/manifest"
printf '\001' | cat - "$WORK/ck/step_00000001/model-pp000-tp000.safetensors" > "$WORK/ckpt/model"

status=0
for t in safetensors config shard tp_rules spank_args ckpt tokenizer device topo; do
    cd "$WORK"
    if "$WORK/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$WORK/crash-$t-" "$WORK/$t" > "$WORK/$t.log" 2>&1; then
        echo "ok: fuzz_$t: $(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t.log") inputs in ${SECONDS_EACH} s," \
             "$(grep -o 'cov: [0-9]*' "$WORK/$t.log" | tail -1) edges"
    else
        tail -40 "$WORK/$t.log" >&2
        for c in "$WORK"/crash-$t-*; do [ -e "$c" ] && { echo "input ($c):" >&2; od -c "$c" | head -20 >&2; }; done
        echo "FAIL: fuzz_$t" >&2
        status=1
    fi
done
exit $status
