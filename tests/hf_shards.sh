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
# past bfloat16's range.  And writing shards: --shard-size (merak-train
# --save-weights, merak-ckpt export) splits weights past it as transformers'
# save_pretrained does, which load back as the single file's values, bit
# for bit (in fp32 and bf16, and in the PyTorch reference when it is there).
. "$(dirname "$0")/lib.sh"
PY=$PY3
"$PY" -c 'import json, struct' 2> /dev/null || skip "no python3"
make_shard "$WORK/data.bin"
D="--model tiny-llama --data $WORK/data.bin --micro-batch 2 --seq-len 16 --threads 1"
"$TRAIN" $D --steps 0 --save-weights "$WORK/whole.safetensors" > /dev/null || fail "saving tiny LLaMA's weights"

# trains_alike W...: --init of each W trains 3 steps with the first's
# metrics (losses, gradient norms), bit for bit; else status 1
trains_alike() {
    k=0
    for w in "$@"; do
        "$TRAIN" $D --steps 3 --init "$w" --metrics "$WORK/m.jsonl" > "$WORK/out" 2>&1 ||
            { cat "$WORK/out" >&2; fail "--init $w failed"; }
        sed 's/"tokens_per_s".*//' "$WORK/m.jsonl" > "$WORK/losses.$k"
        rm "$WORK/m.jsonl"
        [ $k -eq 0 ] || cmp -s "$WORK/losses.0" "$WORK/losses.$k" || return 1
        k=$((k + 1))
    done
}

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
trains_alike "$WORK/whole.safetensors" "$I" "$WORK/sharded" ||
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

# 6. --shard-size: weights past it written as transformers writes them.
# tiny LLaMA holds 500992 bytes of fp32 (250496 of bf16), in tensors of 256
# to 65536 bytes: 200KB (100KB in bf16) takes 3 shards, 50000 bytes leave the
# 65536-byte embedding alone in its shard.  check_shards SINGLE INDEX LIMIT
# SHARDS: the index names every tensor of the single file once, in a shard
# that holds it with the same bytes and the same __metadata__; total_size
# is their bytes; the shards are the SHARDS files, each filled in order
# until the next tensor would go past LIMIT (a larger one alone).
check_shards() {
    "$PY" - "$@" <<'PYEOF'
import json, os, struct, sys
single, index, limit, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def read(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return h.pop("__metadata__"), h, raw[8 + n:]
meta, h1, d1 = read(single)
idx = json.load(open(index))
wmap, total = idx["weight_map"], idx["metadata"]["total_size"]
files = ["model-%05d-of-%05d.safetensors" % (k + 1, count) for k in range(count)]
assert sorted(set(wmap.values())) == files, sorted(set(wmap.values()))
assert sorted(wmap) == sorted(h1), "the index does not name every tensor once"
assert total == len(d1) == sum(e - b for b, e in (v["data_offsets"] for v in h1.values())), (total, len(d1))
sizes, seen = [], []
for f in files:
    m, h, d = read(os.path.join(os.path.dirname(index), f))
    assert m == meta, (f, m, meta)
    order = sorted(h, key=lambda k: h[k]["data_offsets"][0])
    for k in order:
        assert wmap[k] == f and k not in seen, (k, f)
        b, e = h[k]["data_offsets"]
        b1, e1 = h1[k]["data_offsets"]
        assert h[k]["dtype"] == h1[k]["dtype"] and h[k]["shape"] == h1[k]["shape"] and d[b:e] == d1[b1:e1], k
        seen.append(k)
    sizes.append([h[k]["data_offsets"][1] - h[k]["data_offsets"][0] for k in order])
for k, s in enumerate(sizes):
    assert len(s) == 1 or sum(s) <= limit, (files[k], sum(s))
    if k + 1 < len(sizes):
        assert sum(s) + sizes[k + 1][0] > limit, "%s could have taken the next tensor" % files[k]
print("ok: %d shards of at most %d bytes (or one tensor), %d tensors, total_size %d" % (count, limit, len(seen), total))
PYEOF
}
mkdir "$WORK/s32" "$WORK/s0" "$WORK/s16" "$WORK/e32" "$WORK/e16" "$WORK/m2"
S=$WORK/s32/model.safetensors
"$TRAIN" $D --steps 2 --save-weights "$S" --shard-size 200KB > "$WORK/out" || fail "sharded fp32 save"
grep -q "^saved weights to $S.index.json, the index of 3 shards ($WORK/s32/model-00001-of-00003.safetensors to $WORK/s32/model-00003-of-00003.safetensors)$" "$WORK/out" ||
    { cat "$WORK/out" >&2; fail "merak-train does not say it wrote the index and its 3 shards"; }
[ "$(ls "$WORK/s32" | wc -l)" -eq 4 ] || fail "the sharded save wrote other files: $(ls "$WORK/s32")"
check_shards "$WORK/w32.safetensors" "$S.index.json" 200000 3 || fail "the fp32 shards"
trains_alike "$WORK/w32.safetensors" "$S.index.json" "$WORK/s32" ||
    fail "--init of the written shards trains unlike --init of the single file"
echo "ok: --init of the written index and of its directory: the single file's 3 steps, bit for bit"
$GEN --weights "$WORK/s32" > "$WORK/g1" 2> "$WORK/err" && $GEN --weights "$WORK/w32.safetensors" > "$WORK/g2" 2> "$WORK/err" &&
    cmp -s "$WORK/g1" "$WORK/g2" ||
    fail "merak-generate: the written shards generate unlike the single file"
"$MERAK_BUILDDIR/merak-ckpt" import "$S.index.json" --model tiny-llama -o "$WORK/imported32" > /dev/null ||
    fail "merak-ckpt import of the written index failed"
# a tensor larger than the shard size: a shard of its own
"$TRAIN" $D --steps 0 --save-weights "$WORK/s0/model.safetensors" --shard-size 50000 > /dev/null
"$TRAIN" $D --steps 0 --save-weights "$WORK/w0.safetensors" > /dev/null
check_shards "$WORK/w0.safetensors" "$WORK/s0/model.safetensors.index.json" 50000 10 ||
    fail "shards smaller than a tensor"
# weights within the size: one file, the bytes of a save without the flag
"$TRAIN" $D --steps 2 --save-weights "$WORK/one.safetensors" --shard-size 500992 > /dev/null
cmp -s "$WORK/one.safetensors" "$WORK/w32.safetensors" && [ ! -e "$WORK/one.safetensors.index.json" ] ||
    fail "weights of exactly --shard-size bytes are not the single file"

# bf16 shards: each tensor the single bf16 file's bytes, trains as it does
"$TRAIN" $D --steps 2 --save-weights "$WORK/s16/model.safetensors" --save-dtype bf16 --shard-size 100KB > /dev/null ||
    fail "sharded bf16 save"
check_shards "$WORK/w16.safetensors" "$WORK/s16/model.safetensors.index.json" 100000 3 || fail "the bf16 shards"
for w in w16.safetensors s16; do
    "$TRAIN" $D --steps 2 --init "$WORK/$w" --metrics "$WORK/$w.jsonl" > "$WORK/out" 2>&1 ||
        { cat "$WORK/out" >&2; fail "--init $w failed"; }
done
[ "$(sed 's/"tokens_per_s".*//' "$WORK/w16.safetensors.jsonl")" = "$(sed 's/"tokens_per_s".*//' "$WORK/s16.jsonl")" ] ||
    fail "--init of the bf16 shards trains unlike the single bf16 file"
echo "ok: bf16 shards: the single bf16 file's bytes, and its training"

# merak-ckpt export --shard-size: merak-train's files, byte for byte
"$MERAK_BUILDDIR/merak-ckpt" export "$WORK/ck" -o "$WORK/e32/model.safetensors" --shard-size 200KB > "$WORK/out" ||
    fail "merak-ckpt export --shard-size failed"
grep -q "to $WORK/e32/model.safetensors.index.json, the index of 3 shards" "$WORK/out" ||
    { cat "$WORK/out" >&2; fail "merak-ckpt export does not name the index and its shards"; }
for f in model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors \
         model.safetensors.index.json; do
    cmp -s "$WORK/s32/$f" "$WORK/e32/$f" || fail "merak-ckpt export's $f differs from merak-train's"
done
"$MERAK_BUILDDIR/merak-ckpt" export "$WORK/ck" -o "$WORK/e16/model.safetensors" --save-dtype bf16 \
    --shard-size 100KB > /dev/null || fail "merak-ckpt export --save-dtype bf16 --shard-size failed"
for f in model-00001-of-00003.safetensors model-00002-of-00003.safetensors model-00003-of-00003.safetensors \
         model.safetensors.index.json; do
    cmp -s "$WORK/s16/$f" "$WORK/e16/$f" || fail "merak-ckpt export's bf16 $f differs from merak-train's"
done
echo "ok: merak-ckpt export --shard-size writes merak-train's shards and index (fp32 and bf16)"

# the PyTorch reference reads the bf16 shards as the single file, bit for bit
if "$PY" -c 'import torch' 2> /dev/null; then
    "$PY" - "$MERAK_SRCDIR/tests/ref" "$WORK/ck/step_00000002/config.json" "$WORK/w16.safetensors" "$WORK/s16" <<'PYEOF' ||
import sys
sys.path.insert(0, sys.argv[1])
import torch, torch_ref
cfg = torch_ref.Config.load(sys.argv[2])
one, shards = torch_ref.load_params(cfg, sys.argv[3]), torch_ref.load_params(cfg, sys.argv[4])
assert list(one) == list(shards)
for k in one:
    assert torch.equal(one[k].view(torch.int32), shards[k].view(torch.int32)), k
    assert not (shards[k].view(torch.int32) & 0xffff).any(), k   # bf16 values
print("ok: the PyTorch reference loads the bf16 shards as the single file, bit for bit (%d tensors)" % len(one))
PYEOF
        fail "the PyTorch reference reads the bf16 shards unlike the single file"
else
    echo "note: no PyTorch in $PY: the reference's reading of the shards is not checked"
fi

# refused: a size that is not one (exit 2, naming the flag), shards that
# would overwrite the --init shards, a single file beside an earlier index
for bad in 0 0GB 5gb 5G -1 1.5GB 12XB "" "5 GB" 99999999999TB; do
    expect_exit 2 "^merak-train: --shard-size: '$bad' is" "$TRAIN" $D --steps 0 --save-weights "$WORK/x.safetensors" \
        --shard-size "$bad"
    expect_exit 2 "^merak-ckpt: --shard-size: '$bad' is" "$MERAK_BUILDDIR/merak-ckpt" export "$WORK/ck" -o "$WORK/x" \
        --shard-size "$bad"
done
expect_exit 2 "shard-size goes with --save-weights" "$TRAIN" $D --steps 0 --shard-size 1GB
expect_exit 2 "shard-size goes only with export" "$MERAK_BUILDDIR/merak-ckpt" inspect "$WORK/ck" --shard-size 1GB
expect_exit 1 "save-weights $WORK/s32/model-00001-of-00003.safetensors is a file of the --init weights" \
    "$TRAIN" $D --steps 1 --init "$WORK/s32" --save-weights "$S" --shard-size 200KB
expect_exit 1 "save-weights $WORK/m2/model.safetensors.index.json is also the --metrics file" \
    "$TRAIN" $D --steps 1 --metrics "$WORK/m2/model.safetensors.index.json" --save-weights "$WORK/m2/model.safetensors" \
    --shard-size 200KB
expect_exit 1 "$S: $S.index.json of an earlier sharded save is beside it" "$TRAIN" $D --steps 1 --save-weights "$S"
expect_exit 1 "$WORK/e32/model.safetensors: $WORK/e32/model.safetensors.index.json of an earlier sharded save" \
    "$MERAK_BUILDDIR/merak-ckpt" export "$WORK/ck" -o "$WORK/e32/model.safetensors"
cmp -s "$WORK/s32/model-00001-of-00003.safetensors" "$WORK/e32/model-00001-of-00003.safetensors" ||
    fail "a refused save touched the shards"
echo "ok: bad sizes, shards over the --init weights and a file beside an earlier index refused"
