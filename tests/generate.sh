#!/bin/sh
# merak-generate: greedy tokens equal an independent PyTorch implementation
# (tests/ref/torch_ref.py, which recomputes the whole sequence) for a GPT-2
# and a LLaMA saved by merak-train; the key/value cache gives the
# tokens recomputing gives; sampling is reproducible and its options do
# what they say; text in and out through bytes and a tokenizer; bad input
# is refused with one line.
. "$(dirname "$0")/lib.sh"
GEN=$MERAK_BUILDDIR/merak-generate
REF=$MERAK_SRCDIR/tests/ref/torch_ref.py
PY=${TORCH_PYTHON:-none}
[ "$PY" != none ] && "$PY" -c 'import torch' 2>/dev/null || skip "PyTorch not installed (Debian: python3-torch)"
make_shard "$WORK/data.bin"

# A prompt of 100 bytes of the sources: longer than one of the decoder's
# 64-row pieces.
prompt=$(head -c 100 "$WORK/corpus.txt" | od -An -tu1 | tr -s ' \n' '  ')

for arch in gpt2 llama; do
    # initial weights 10 times the usual scale give varied greedy tokens
    # (a tiny model trained briefly repeats a space)
    cfg=$WORK/$arch.json w=$WORK/$arch.safetensors
    sed 's/"initializer_range": 0.02/"initializer_range": 0.2/' "$FIX/ref-$arch.json" > "$cfg"
    "$PY" "$REF" init --config "$cfg" --seed 7 --out "$WORK/$arch.init.safetensors" > /dev/null
    "$TRAIN" --model "$cfg" --init "$WORK/$arch.init.safetensors" --data "$WORK/data.bin" --micro-batch 4 \
        --seq-len 64 --steps 5 --lr 1e-3 --threads 1 --save-weights "$w" > /dev/null ||
        fail "$arch: merak-train failed"
    gen() { "$GEN" --model "$cfg" --weights "$w" --ids --prompt "$prompt" --threads 1 "$@" 2> "$WORK/gen.err"; }
    gen --temperature 0 --max-tokens 48 > "$WORK/$arch.cache" || { cat "$WORK/gen.err"; fail "$arch: merak-generate failed"; }
    gen --temperature 0 --max-tokens 48 --no-cache > "$WORK/$arch.nocache" || fail "$arch: --no-cache failed"
    [ "$(wc -w < "$WORK/$arch.cache")" -eq 48 ] || fail "$arch: not 48 tokens: $(cat "$WORK/$arch.cache")"
    [ "$(tr ' ' '\n' < "$WORK/$arch.cache" | sort -u | wc -l)" -ge 4 ] ||
        fail "$arch: the model repeats one token; the comparison would show little: $(cat "$WORK/$arch.cache")"
    cmp -s "$WORK/$arch.cache" "$WORK/$arch.nocache" ||
        fail "$arch: the cache gives $(cat "$WORK/$arch.cache"), recomputing gives $(cat "$WORK/$arch.nocache")"
    # The reference generates on its own, then checks merak's tokens step by step.
    "$PY" "$REF" generate --config "$cfg" --weights "$w" --prompt "$prompt" --max-tokens 48 > "$WORK/$arch.torch" \
        2> /dev/null || fail "$arch: torch_ref.py generate failed"
    "$PY" "$REF" generate --config "$cfg" --weights "$w" --prompt "$prompt" --check "$(cat "$WORK/$arch.cache")" \
        > /dev/null 2> "$WORK/check.err" || { cat "$WORK/check.err" >&2; fail "$arch: a token is not the greedy choice"; }
    # the same check through the reference's key/value cache (bench_generate.sh times it)
    "$PY" "$REF" generate --cache --config "$cfg" --weights "$w" --prompt "$prompt" --check "$(cat "$WORK/$arch.cache")" \
        > /dev/null 2> "$WORK/check-cache.err" ||
        { cat "$WORK/check-cache.err" >&2; fail "$arch: through torch_ref's cache, a token is not the greedy choice"; }
    if cmp -s "$WORK/$arch.cache" "$WORK/$arch.torch"; then same="the same 48 tokens"; else same="a near-tie broken the other way"; fi
    echo "$arch: $same as PyTorch ($(tail -1 "$WORK/check.err" | sed 's/^torch_ref: //'))"

    # sampling: a seed gives the same tokens, another seed others; top-k 1
    # and a tiny top-p are greedy
    gen --max-tokens 32 --seed 5 > "$WORK/s5a"
    gen --max-tokens 32 --seed 5 > "$WORK/s5b"
    gen --max-tokens 32 --seed 6 > "$WORK/s6"
    cmp -s "$WORK/s5a" "$WORK/s5b" || fail "$arch: the same seed sampled different tokens"
    cmp -s "$WORK/s5a" "$WORK/s6" && fail "$arch: seeds 5 and 6 sampled the same 32 tokens"
    gen --max-tokens 32 --no-cache --seed 5 > "$WORK/s5n"
    cmp -s "$WORK/s5a" "$WORK/s5n" || fail "$arch: sampling with and without the cache differs"
    greedy32=$(tr ' ' '\n' < "$WORK/$arch.cache" | head -32 | paste -sd' ')
    [ "$(gen --max-tokens 32 --top-k 1 --seed 9)" = "$greedy32" ] || fail "$arch: --top-k 1 is not greedy"
    [ "$(gen --max-tokens 32 --top-p 1e-6 --seed 9)" = "$greedy32" ] || fail "$arch: --top-p 1e-6 is not greedy"
    # the end-of-text token stops generation after it
    first=$(cut -d' ' -f1 "$WORK/$arch.cache")
    [ "$(gen --temperature 0 --max-tokens 10 --eot "$first")" = "$first" ] || fail "$arch: --eot did not stop"
    echo "$arch: sampling reproducible by seed, top-k 1 and top-p 1e-6 greedy, --eot stops"
done

# text: bytes in, bytes out (a token is a byte) equal the ids
cfg=$WORK/gpt2.json w=$WORK/gpt2.safetensors
head -c 100 "$WORK/corpus.txt" > "$WORK/prompt.txt"
"$GEN" --model "$cfg" --weights "$w" --temperature 0 --max-tokens 48 --threads 1 < "$WORK/prompt.txt" \
    > "$WORK/text.out" 2> /dev/null || fail "text generation from standard input failed"
"$PY" - "$WORK/text.out" "$WORK/gpt2.cache" <<'PYEOF' || fail "the text is not the bytes of the ids"
import sys
text = open(sys.argv[1], "rb").read()
ids = [int(x) for x in open(sys.argv[2]).read().split()]
sys.exit(0 if text == bytes(ids) + b"\n" else 1)
PYEOF
echo "text: the bytes written are the greedy ids"

# text through tokenizers the tokenizers library trains, and models whose
# vocabularies hold their ids: GPT-2's kind (byte-level, 300 ids) with a
# GPT-2, LLaMA 2's kind (SentencePiece-style BPE: "\u2581" for a space,
# <0xXX> bytes for the characters it lacks, <s> before the prompt, its
# decoder's Replace, ByteFallback, Fuse and Strip; 400 ids) with a LLaMA:
# the text written is the library's decoding of the same tokens
if "$PY" -c 'import tokenizers' 2>/dev/null; then
    "$PY" - "$WORK/corpus.txt" "$WORK" <<'PYEOF' || fail "training the tokenizers failed"
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
corpus, work = sys.argv[1:]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([corpus], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                        show_progress=False))
tok.save(work + "/tok-gpt2.json")
SP = ["<unk>", "<s>", "</s>"]
tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
tok.train([corpus], trainers.BpeTrainer(vocab_size=400, limit_alphabet=40, show_progress=False,
                                        special_tokens=SP + ["<0x%02X>" % b for b in range(256)]))
j = json.loads(tok.to_str())
j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in SP]
j["pre_tokenizer"] = None
j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
j["decoder"] = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
j["post_processor"] = {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
json.dump(j, open(work + "/tok-llama.json", "w"), ensure_ascii=False)
PYEOF
    for run in "gpt2 300 int main(void) {" "llama 400 Größe des Modells: 7 Milliarden"; do
        set -- $run
        arch=$1 V=$2
        shift 2
        text=$*
        tk=$WORK/tok-$arch.json
        sed "s/\"vocab_size\": 256/\"vocab_size\": $V/" "$WORK/$arch.json" > "$WORK/v$V.json"
        "$PY" "$REF" init --config "$WORK/v$V.json" --seed 3 --out "$WORK/v$V.safetensors" > /dev/null
        tg() { "$GEN" --model "$WORK/v$V.json" --weights "$WORK/v$V.safetensors" --max-tokens 40 --seed 1 --threads 1 "$@" 2> /dev/null; }
        tg --tokenizer "$tk" --prompt "$text" > "$WORK/tok.text" || fail "$arch: --tokenizer failed"
        eot=$("$PY" -c 'import sys, tokenizers; t = tokenizers.Tokenizer.from_file(sys.argv[1])
print(next(i for i in map(t.token_to_id, ("<|endoftext|>", "</s>")) if i is not None))' "$tk")
        ids=$("$PY" -c 'import sys, tokenizers; print(" ".join(map(str, tokenizers.Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2]).ids)))' \
            "$tk" "$text")
        tg --ids --eot "$eot" --prompt "$ids" > "$WORK/tok.ids" || fail "$arch: --ids with the tokenizer's ids failed"
        "$PY" - "$tk" "$WORK/tok.text" "$WORK/tok.ids" "$arch" "$ids" <<'PYEOF' || fail "$arch: the text is not the tokenizer's decoding"
import sys, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], "rb").read().decode("utf-8", errors="replace")
ids = [int(x) for x in open(sys.argv[3]).read().split()]
prompt = [int(x) for x in sys.argv[5].split()]
# what follows the prompt's text in the whole sequence's (merak_decode_after):
# a first token that starts a word keeps its space there, which decoding
# the tokens alone would drop (Metaspace's first token)
before = tok.decode(prompt, skip_special_tokens=True)
whole = tok.decode(prompt + ids, skip_special_tokens=True)
want = (whole[len(before):] if whole.startswith(before) else whole) + "\n"
if text != want or len(ids) < 2:
    print("merak: %r\nlibrary: %r" % (text, want))
    sys.exit(1)
print("tokenizer %s: the text written is the library's decoding of the same %d tokens (%d bytes)" % (
    sys.argv[4], len(ids), len(text.encode())))
PYEOF
    done
    expect_exit 1 "more than the vocabulary of 256" "$GEN" --model "$cfg" --weights "$w" --tokenizer "$WORK/tok-gpt2.json" \
        --prompt hi
else
    echo "tokenizer: the tokenizers library is not installed; text through a tokenizer not compared"
fi

# merak-train --sample-every: the sample after the last step is what
# merak-generate draws from the weights it saved, with the same seed
"$TRAIN" --model "$cfg" --init "$WORK/gpt2.safetensors" --data "$WORK/data.bin" --micro-batch 4 --seq-len 64 \
    --steps 4 --lr 1e-3 --threads 1 --seed 11 --sample-every 2 --prompt "int main(" --sample-tokens 24 \
    --save-weights "$WORK/sampled.safetensors" > "$WORK/train.out" || fail "merak-train --sample-every failed"
[ "$(grep -c "^sample after step [13]: " "$WORK/train.out")" -eq 2 ] ||
    { cat "$WORK/train.out" >&2; fail "not one sample after steps 1 and 3"; }
"$GEN" --model "$cfg" --weights "$WORK/sampled.safetensors" --prompt "int main(" --max-tokens 24 --seed 11 \
    --threads 1 > "$WORK/gen.out" 2> /dev/null || fail "merak-generate from the trained weights failed"
"$PY" - "$WORK/train.out" "$WORK/gen.out" <<'PYEOF' || fail "the last sample is not merak-generate's"
import sys
out = open(sys.argv[1], "rb").read()
last = out[out.rindex(b"sample after step 3: ") + len(b"sample after step 3: "):]
want = open(sys.argv[2], "rb").read()
sys.exit(0 if last.startswith(want) and len(want) > 1 else 1)
PYEOF
echo "merak-train --sample-every: the last sample equals merak-generate's from the saved weights"
expect_exit 2 "--prompt needs --sample-every" "$TRAIN" --data "$WORK/data.bin" --prompt hi
expect_exit 1 "no end-of-text token" "$TRAIN" --model "$cfg" --data "$WORK/data.bin" --sample-every 1 --steps 1

# bad input: one line, exit 2 (usage) or 1
g2() { "$GEN" --model "$cfg" --weights "$w" "$@"; }
expect_exit 2 "no weights" "$GEN" --model "$cfg" --prompt hi
expect_exit 2 "no model" "$GEN" --weights "$w" --prompt hi
expect_exit 2 "unknown option" g2 --prompt hi --bogus
expect_exit 2 "temperature" g2 --prompt hi --temperature -1
expect_exit 2 "top-p" g2 --prompt hi --top-p 0
expect_exit 2 "top-k" g2 --prompt hi --top-k -3
expect_exit 2 "device" g2 --prompt hi --device tpu
expect_exit 2 "is not a token id" g2 --ids --prompt "1 2 x3"
expect_exit 2 "is not a token id" g2 --ids --prompt "1 999"
expect_exit 2 "do not go together" g2 --ids --tokenizer "$FIX/tokenizer-bytes.json" --prompt 1
expect_exit 2 "eot" g2 --prompt hi --eot 300
expect_exit 1 "is not a token id" sh -c 'echo "5 -1" | "$0" --model "$1" --weights "$2" --ids' "$GEN" "$cfg" "$w"
head -c 300 "$WORK/corpus.txt" > "$WORK/long.txt"
expect_exit 1 "more than the 256 positions" g2 --prompt "$(cat "$WORK/long.txt")"
expect_exit 1 "more than the vocabulary of 256" g2 --tokenizer "$FIX/tokenizer-bytes.json" --prompt hi
printf '{"model":{"type":"WordPiece","vocab":{"a":0},"unk_token":"a"}}' > "$WORK/wp.json"
expect_exit 1 "WordPiece" g2 --tokenizer "$WORK/wp.json" --prompt hi
sed 's/"n_layer": 2/"n_layer": 3/' "$cfg" > "$WORK/l3.json"
expect_exit 1 "missing" "$GEN" --model "$WORK/l3.json" --weights "$w" --prompt hi
sed 's/"n_layer": 2/"n_layer": 1/' "$cfg" > "$WORK/l1.json"
expect_exit 1 "not a parameter of the model" "$GEN" --model "$WORK/l1.json" --weights "$w" --prompt hi
sed 's/"n_embd": 64/"n_embd": 32/' "$cfg" > "$WORK/c32.json"
expect_exit 1 "has shape" "$GEN" --model "$WORK/c32.json" --weights "$w" --prompt hi
expect_exit 1 "empty" g2 --prompt ""
expect_exit 1 "cannot open" "$GEN" --model "$cfg" --weights "$WORK/nope.safetensors" --prompt hi
# a prompt near the context: generation stops at the last position, saying so
head -c 250 "$WORK/corpus.txt" > "$WORK/p250.txt"
capture g2 --temperature 0 --max-tokens 20 --ids --prompt "$(od -An -tu1 "$WORK/p250.txt" | tr -s ' \n' '  ')"
[ "$rc" -eq 0 ] && [ "$(wc -w < "$WORK/out")" -eq 7 ] && grep -q "generating 7" "$WORK/err" ||
    fail "a prompt of 250 of 256 positions: want 7 tokens and a note, got exit $rc: $(cat "$WORK/out" "$WORK/err")"
echo "generate: ok"
