#!/bin/sh
# Sharded Hugging Face weights: a model.safetensors.index.json and its
# files (the hub's form for models of more than a few GB), made here by
# splitting tiny LLaMA's weights over two files.  --init given the index,
# or the directory holding it, trains exactly as --init given the single
# file; merak-generate and merak-ckpt import read it too; an index that
# puts a tensor in the wrong file, a tensor in two files, a file that is
# missing, a tensor listed twice, a tensor the index does not name, and a
# directory with neither file are refused by name; --save-weights onto a
# shard is refused as an input.  And weights in bf16, as the hub publishes
# them: --save-dtype bf16 (merak-train, merak-ckpt export) rounds each value
# to nearest even, loads back as those values exactly, and refuses one
# past bfloat16's range.
. "$(dirname "$0")/lib.sh"
PY=${TORCH_PYTHON:-/usr/bin/python3}
[ "$PY" != none ] || PY=/usr/bin/python3
"$PY" -c 'import json, struct' 2> /dev/null || skip "no python3"
make_shard "$WORK/data.bin"
D="--model tiny-llama --data $WORK/data.bin --micro-batch 2 --seq-len 16 --threads 1"
"$TRAIN" $D --steps 0 --save-weights "$WORK/whole.safetensors" > /dev/null || fail "saving tiny LLaMA's weights"

# split FILE DIR [EDIT]: FILE's tensors dealt over DIR/model-0000{1,2}-of-00002.safetensors
# and DIR/model.safetensors.index.json; EDIT breaks them: wrongfile (the
# index puts one tensor in the other file), twice (one tensor in both
# files), unnamed (one tensor left out of the index), dupkey (one tensor
# listed twice in the index's text)
split() {
    mkdir -p "$2"
    "$PY" - "$@" <<'PYEOF'
import json, struct, sys
src, out = sys.argv[1], sys.argv[2]
edit = sys.argv[3] if len(sys.argv) > 3 else ""
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
names = sorted(k for k in hdr if k != "__metadata__")
files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
parts = [[], []]
for i, k in enumerate(names):
    parts[i % 2].append(k)
if edit == "twice":
    parts[1].append(parts[0][0])
wmap = {}
for f, part in zip(files, parts):
    h, blob = {"__metadata__": {"format": "pt"}}, b""
    for k in part:
        b, e = hdr[k]["data_offsets"]
        h[k] = {"dtype": hdr[k]["dtype"], "shape": hdr[k]["shape"], "data_offsets": [len(blob), len(blob) + e - b]}
        blob += data[b:e]
        wmap.setdefault(k, f)
    t = json.dumps(h).encode()
    t += b" " * (-len(t) % 8)
    open("%s/%s" % (out, f), "wb").write(struct.pack("<Q", len(t)) + t + blob)
if edit == "wrongfile":
    wmap[parts[0][1]] = files[1]
if edit == "unnamed":
    del wmap[parts[1][0]]
text = json.dumps({"metadata": {"total_size": len(data)}, "weight_map": wmap}, indent=2)
if edit == "dupkey":
    k = parts[0][0]
    text = text.replace('"weight_map": {', '"weight_map": {\n    "%s": "%s",' % (k, files[0]), 1)
open("%s/model.safetensors.index.json" % out, "w").write(text)
PYEOF
}
split "$WORK/whole.safetensors" "$WORK/sharded" || fail "splitting the weights"
I=$WORK/sharded/model.safetensors.index.json

# 1. the index, the directory and the single file train alike, bit for bit
for w in "$WORK/whole.safetensors" "$I" "$WORK/sharded"; do
    "$TRAIN" $D --steps 3 --init "$w" --metrics "$WORK/m.jsonl" > "$WORK/out" 2>&1 ||
        { cat "$WORK/out" >&2; fail "--init $w failed"; }
    sed 's/"tokens_per_s".*//' "$WORK/m.jsonl" > "$WORK/losses.$(basename "$w")"
    rm "$WORK/m.jsonl"
done
cmp -s "$WORK/losses.whole.safetensors" "$WORK/losses.model.safetensors.index.json" &&
    cmp -s "$WORK/losses.whole.safetensors" "$WORK/losses.sharded" ||
    fail "--init of the index, the directory and the file train differently"
echo "ok: --init index.json, its directory and the single file: the same 3 steps, bit for bit"

# 2. merak-generate and merak-ckpt import read the index too
GEN="$MERAK_BUILDDIR/merak-generate --model tiny-llama --ids --prompt 1 --max-tokens 4 --temperature 0"
$GEN --weights "$WORK/sharded" > "$WORK/g1" 2> "$WORK/err" || { cat "$WORK/err" >&2; fail "merak-generate --weights DIR failed"; }
$GEN --weights "$WORK/whole.safetensors" > "$WORK/g2" 2> "$WORK/err" ||
    { cat "$WORK/err" >&2; fail "merak-generate --weights FILE failed"; }
cmp -s "$WORK/g1" "$WORK/g2" || fail "merak-generate: the index and the file generate differently"
"$MERAK_BUILDDIR/merak-ckpt" import "$I" --model tiny-llama -o "$WORK/imported" > /dev/null ||
    fail "merak-ckpt import of the index failed"
echo "ok: merak-generate --weights DIR and merak-ckpt import INDEX"

# 3. broken indexes: one line each naming what is wrong (exit 1)
split "$WORK/whole.safetensors" "$WORK/wrongfile" wrongfile
expect_exit 1 "the index puts tensor '.*' in .*wrongfile/model-00002-of-00002.safetensors, which does not hold it" \
    "$TRAIN" $D --steps 1 --init "$WORK/wrongfile"
split "$WORK/whole.safetensors" "$WORK/twice" twice
expect_exit 1 "tensor '.*' is in .*twice/model-00002-of-00002.safetensors too, but the index puts it in model-00001-of-00002.safetensors" \
    "$TRAIN" $D --steps 1 --init "$WORK/twice"
split "$WORK/whole.safetensors" "$WORK/unnamed" unnamed
expect_exit 1 "unnamed/model-00002-of-00002.safetensors holds tensor '.*', which the index does not name" \
    "$TRAIN" $D --steps 1 --init "$WORK/unnamed"
split "$WORK/whole.safetensors" "$WORK/dupkey" dupkey
expect_exit 1 "dupkey/model.safetensors.index.json: line [0-9]*: duplicate object key" \
    "$TRAIN" $D --steps 1 --init "$WORK/dupkey"
split "$WORK/whole.safetensors" "$WORK/gone"
rm "$WORK/gone/model-00002-of-00002.safetensors"
expect_exit 1 "gone/model-00002-of-00002.safetensors: cannot open" "$TRAIN" $D --steps 1 --init "$WORK/gone"
mkdir "$WORK/empty"
expect_exit 1 "empty: a directory without model.safetensors.index.json or model.safetensors" \
    "$TRAIN" $D --steps 1 --init "$WORK/empty"
# another model's index: what it lacks is named with the index
"$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --steps 0 --save-weights "$WORK/gpt2.safetensors" > /dev/null
split "$WORK/gpt2.safetensors" "$WORK/gpt2"
expect_exit 1 "gpt2/model.safetensors.index.json: tensor 'model.embed_tokens.weight' is missing" \
    "$TRAIN" $D --steps 1 --init "$WORK/gpt2"
# 4. a shard of the --init weights is an input: never overwritten
expect_exit 1 "save-weights $WORK/sharded/model-00001-of-00002.safetensors is a file of the --init weights" \
    "$TRAIN" $D --steps 1 --init "$I" --save-weights "$WORK/sharded/model-00001-of-00002.safetensors"
echo "ok: broken indexes and a shard as an output refused by name"

# 5. --save-dtype bf16: each value rounded to nearest even; --init of it trains
# bit for bit as an fp32 file of the rounded values; merak-ckpt export writes
# the same file; a value past bfloat16's range is refused
"$TRAIN" $D --steps 2 --save "$WORK/ck" --save-weights "$WORK/w32.safetensors" > /dev/null || fail "fp32 save"
"$TRAIN" $D --steps 2 --save-weights "$WORK/w16.safetensors" --save-dtype bf16 > /dev/null || fail "bf16 save"
"$MERAK_BUILDDIR/merak-ckpt" export "$WORK/ck" -o "$WORK/e16.safetensors" --save-dtype bf16 > /dev/null ||
    fail "merak-ckpt export --save-dtype bf16 failed"
cmp -s "$WORK/w16.safetensors" "$WORK/e16.safetensors" || fail "merak-ckpt export's bf16 file differs from merak-train's"
"$PY" - "$WORK/w32.safetensors" "$WORK/w16.safetensors" "$WORK/r32.safetensors" <<'PYEOF' || fail "bf16 values"
import json, struct, sys
def read(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
h32, d32 = read(sys.argv[1])
h16, d16 = read(sys.argv[2])
names = sorted(k for k in h32 if k != "__metadata__")
assert names == sorted(k for k in h16 if k != "__metadata__")
out_h, out_d = {}, b""
for k in names:
    assert h16[k]["dtype"] == "BF16" and h32[k]["dtype"] == "F32" and h16[k]["shape"] == h32[k]["shape"], k
    b, e = h32[k]["data_offsets"]
    u = struct.unpack("<%dI" % ((e - b) // 4), d32[b:e])
    want = [((x + 0x7fff + ((x >> 16) & 1)) >> 16) & 0xffff for x in u]
    b, e = h16[k]["data_offsets"]
    got = list(struct.unpack("<%dH" % ((e - b) // 2), d16[b:e]))
    assert got == want, k
    # the same values as fp32, for the comparison run
    out_h[k] = {"dtype": "F32", "shape": h32[k]["shape"], "data_offsets": [len(out_d), len(out_d) + 4 * len(got)]}
    out_d += struct.pack("<%dI" % len(got), *[g << 16 for g in got])
t = json.dumps(out_h).encode()
t += b" " * (-len(t) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(t)) + t + out_d)
print("ok: bf16: %d tensors, every value rounded to nearest even" % len(names))
PYEOF
for w in w16 r32; do
    "$TRAIN" $D --steps 2 --init "$WORK/$w.safetensors" --metrics "$WORK/$w.jsonl" > "$WORK/out" 2>&1 ||
        { cat "$WORK/out" >&2; fail "--init $w failed"; }
done
[ "$(sed 's/"tokens_per_s".*//' "$WORK/w16.jsonl")" = "$(sed 's/"tokens_per_s".*//' "$WORK/r32.jsonl")" ] ||
    fail "--init of the bf16 file trains unlike the fp32 file of its values"
expect_exit 2 "save-dtype: 'fp16' is not fp32 or bf16" "$MERAK_BUILDDIR/merak-ckpt" export "$WORK/ck" -o "$WORK/x" \
    --save-dtype fp16
"$PY" - "$WORK/w32.safetensors" "$WORK/huge.safetensors" <<'PYEOF' || fail "writing a weight past bf16's range"
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
b = h["model.norm.weight"]["data_offsets"][0]
raw[8 + n + b:8 + n + b + 4] = struct.pack("<f", 3.4e38)
open(sys.argv[2], "wb").write(raw)
PYEOF
expect_exit 1 "not written: tensor 'model.norm.weight' holds 3.4e+38 at element 0, past bfloat16's range" \
    "$TRAIN" $D --steps 0 --init "$WORK/huge.safetensors" --save-weights "$WORK/h16.safetensors" --save-dtype bf16
echo "ok: --save-dtype bf16 rounds to nearest even, loads back as its values, refuses what bf16 cannot hold"
