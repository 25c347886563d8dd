#!/bin/sh
# Hugging Face tokenizers: merak-shard --tokenizer against the `tokenizers`
# library (PyPI; scripts/install-deps.sh installs it), token for token.
# Three byte-level BPE tokenizers trained by the library on the project's
# sources: GPT-2's kind (ByteLevel pre-tokenizer with its split pattern),
# the same with add_prefix_space, LLaMA-3's kind (a Split regex, then
# ByteLevel without one; ignore_merges), a Split followed by ByteLevel's
# own pattern, and the first with every id moved past 65535 (a version 2
# shard); SentencePiece-style BPE (LLaMA 2's way and Metaspace's); and
# Unigram models trained by the library (Metaspace, byte fallback, no
# pre-tokenizer); and Unicode normalizers (NFKC and NFKD before byte-level
# BPE, NFKC before LLaMA 2's Prepend and Replace, NFC and NFD with Unigram).
# The corpus: sources, man pages, unicode (accents, CJK, RTL, combining
# marks, emoji), compatibility characters (ligatures, fractions, circled
# and fullwidth forms, Hangul jamo, decomposed and precomposed pairs,
# marks out of canonical order), runs of spaces and newlines, CRLF, digits,
# the end-of-text token inside a document; one shard of all the files, the
# end-of-text token between them.  Then decoding round-trips every byte
# (test_tokenizer) where it can, and gives the library's decode where
# normalization and unknown pieces change the text, and bad tokenizers are
# refused by name.
. "$(dirname "$0")/lib.sh"
PY=$PY3
"$PY" -c 'import tokenizers, numpy' 2>/dev/null || skip "$PY has no tokenizers library (scripts/install-deps.sh installs it)"

C=$WORK/corpus
mkdir -p "$C"
find "$MERAK_SRCDIR/runtime" "$MERAK_SRCDIR/tools" -name '*.[ch]' | sort | head -12 > "$WORK/train.txt"
find "$MERAK_SRCDIR/man" -name '*.[178]' | sort >> "$WORK/train.txt"
printf 'Ünïcödé café naïve — “quotes” ½ ∑ √ ∞\n日本語のテキスト、中文文本。한국어 텍스트\nالعربية עברית\ne\314\201 a\314\200 (combining)\n🎉🚀👩‍👩‍👧 emoji ❤️ 🇫🇷\n' > "$C/unicode.txt"
# compatibility and canonical pairs, all of Unicode 9 (the library's
# normalization tables are older than utf8proc's Unicode 15: man merak-shard)
printf 'ﬁnancial ﬂow ﬀ ½ ¼ ① ⑳ ™ ㎏ ℃ Ⅻ ㈱ x² H₂O …\nｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３ ｶﾀｶﾅ ﾊﾟ ｡\n' > "$C/compat.txt"
printf 'A\314\212 \342\204\253 \303\205 e\314\201 \303\251 n\314\203 \303\261 o\314\210\314\201 \341\271\217 q\314\207\314\243 q\314\243\314\207\n' >> "$C/compat.txt"
printf '\341\204\200\341\205\241\341\206\250 \352\260\201 \352\260\200\341\206\250 \341\272\233\314\243 \307\204 \307\205 \305\277 \302\240nbsp\342\200\203em \360\235\220\200\360\235\220\201 \357\254\200\n' >> "$C/compat.txt"
printf "it's they're we've I'm you'll he'd DON'T   spaces    \n\n\n\n\tTabs\r\nCRLF\r\n 12 123 1234 3.14159 1e-9 0x1F\n     \n" > "$C/spaces.txt"
printf 'one document<|endoftext|>and the next, glued<|endoftext|><|endoftext|> end' > "$C/eot.txt"
cp "$MERAK_SRCDIR/README.md" "$MERAK_SRCDIR/runtime/train/tokenizer.c" "$MERAK_SRCDIR/man/merak-train.1" "$C/"
FILES="$C/unicode.txt $C/compat.txt $C/spaces.txt $C/eot.txt $C/README.md $C/tokenizer.c $C/merak-train.1"

"$PY" - "$WORK" $(cat "$WORK/train.txt") <<'PYEOF' || fail "training the tokenizers with the library"
import json, sys
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers
work, files = sys.argv[1], sys.argv[2:]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
def train(name, pre, ignore_merges=False, norm=None):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    if norm is not None:   # not "if norm": an empty-looking Sequence is false
        tok.normalizer = norm
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>"],
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                         show_progress=False))
    tok.save("%s/%s.json" % (work, name))
train("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False))
train("prefix", pre_tokenizers.ByteLevel(add_prefix_space=True))
# Unicode normalizers before byte-level BPE
train("gpt2nfkc", pre_tokenizers.ByteLevel(add_prefix_space=False), norm=normalizers.NFKC())
train("gpt2nfkd", pre_tokenizers.ByteLevel(add_prefix_space=False), norm=normalizers.NFKD())
train("llama3", pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=True)
# two split stages: a Split, then ByteLevel's own pattern on every piece
train("twosplits", pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(r"\n+|[^\n]+"), behavior="isolated"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]))
# Splits whose pattern matches the empty string: "" isolates every
# character; \s* splits before every non-space too
for name, pat in (("emptysplit", r""), ("starsplit", r"\s*")):
    train(name, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pat), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
# SentencePiece-style BPE (LLaMA 2, Mistral, TinyLlama): characters with
# byte fallback to <0xXX> tokens (the vocabulary's, not added tokens), an
# unknown token, and a small alphabet so that emoji, CJK and accents fall
# back; written the legacy way (normalizer Prepend + Replace, no
# pre-tokenizer: a document is one piece) and the newer ways (Metaspace,
# prepend_scheme first, with and without split)
SP = ["<unk>", "<s>", "</s>"]
tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
tok.train(files, trainers.BpeTrainer(vocab_size=3000, limit_alphabet=90, show_progress=False,
                                     special_tokens=SP + ["<0x%02X>" % b for b in range(256)]))
base = json.loads(tok.to_str())
base["added_tokens"] = [a for a in base["added_tokens"] if a["content"] in SP]
base["decoder"] = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
for name, norm, pre in (
        ("llama2", {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}, None),
        ("llama2nfkc", {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Prepend", "prepend": "\u2581"},
                        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}, None),
        ("metaspace", None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}),
        ("metasplit", None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True})):
    j = dict(base, normalizer=norm, pre_tokenizer=pre)
    if name == "llama2":   # LLaMA 2's post-processor: <s> begins every text
        j["post_processor"] = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    json.dump(j, open("%s/%s.json" % (work, name), "w"), ensure_ascii=False)
    Tokenizer.from_file("%s/%s.json" % (work, name))   # the library takes it as written
# Unigram (T5's and many multilingual models' kind): the library's trainer
# with a Metaspace pre-tokenizer and decoder; the same with byte fallback
# (<0xXX> pieces, LLaMA 2's decoder) and prepend_scheme first; and one
# without a pre-tokenizer (LLaMA 2's normalizer: a document is one word).
# The alphabet is the sources', so the unicode file's characters are
# unknown: fused into one unknown piece, or bytes
def unigram(name, pre, norm=None, fallback=False):
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre
    if norm is not None:   # not "if norm": an empty-looking Sequence is false
        tok.normalizer = norm
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.train(files, trainers.UnigramTrainer(vocab_size=2000, unk_token="<unk>", show_progress=False,
              special_tokens=SP + (["<0x%02X>" % b for b in range(256)] if fallback else [])))
    j = json.loads(tok.to_str())
    if fallback:   # the <0xXX> pieces stay in the vocabulary, not added tokens
        j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in SP]
        j["model"]["byte_fallback"] = True
        j["decoder"] = base["decoder"]
    json.dump(j, open("%s/%s.json" % (work, name), "w"), ensure_ascii=False)
    Tokenizer.from_file("%s/%s.json" % (work, name))
unigram("unigram", pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True))
unigram("unibytes", pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True), fallback=True)
unigram("uninopre", None, norm=normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]))
unigram("uninfc", pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
        norm=normalizers.NFC())
unigram("uninfd", None, norm=normalizers.Sequence([normalizers.NFD(), normalizers.Prepend("\u2581"),
                                                   normalizers.Replace(" ", "\u2581")]))
j = json.load(open("%s/gpt2.json" % work))
j["model"]["vocab"] = {k: v + 70000 for k, v in j["model"]["vocab"].items()}
for a in j["added_tokens"]:
    a["id"] += 70000
json.dump(j, open("%s/big.json" % work, "w"))
PYEOF

# compare TOKENIZER SHARD FILE...: the shard is the library's encoding
compare() {
    "$PY" - "$@" <<'PYEOF'
import struct, sys
import numpy as np
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
raw = open(sys.argv[2], "rb").read()
magic, version, n = struct.unpack("<iii", raw[:12])
got = np.frombuffer(raw[1024:], dtype="<u2" if version == 1 else "<u4")[:n].tolist()
eot = next(i for i in (tok.token_to_id(x) for x in ("<|endoftext|>", "</s>")) if i is not None)
want = []
for i, f in enumerate(sys.argv[3:]):
    want += ([eot] if i else []) + tok.encode(open(f, encoding="utf-8", newline="").read()).ids
if got != want:
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print("%s: token %d of %d (the library: %d) differs: %s against the library's %s" % (
        sys.argv[1], k, len(got), len(want), [tok.id_to_token(i) for i in got[max(0, k - 2):k + 4]],
        [tok.id_to_token(i) for i in want[max(0, k - 2):k + 4]]))
    sys.exit(1)
print("ok: %s: %d tokens, the library's, version %d shard" % (sys.argv[1].rsplit("/", 1)[-1], n, version))
PYEOF
}
for t in gpt2 prefix gpt2nfkc gpt2nfkd llama3 twosplits emptysplit starsplit llama2 llama2nfkc metaspace metasplit \
         unigram unibytes uninopre uninfc uninfd big; do
    capture "$SHARD" --tokenizer "$WORK/$t.json" -o "$WORK/$t.bin" $FILES
    [ "$rc" -eq 0 ] || { cat "$WORK/err" >&2; fail "merak-shard --tokenizer $t.json"; }
    cat "$WORK/out"
    compare "$WORK/$t.json" "$WORK/$t.bin" $FILES || fail "$t: merak-shard's tokens are not the library's"
done
[ "$(od -An -tu4 -j4 -N4 "$WORK/big.bin" | tr -d ' ')" = 2 ] || fail "ids over 65535 did not give a version 2 shard"

# decoding gives back every byte, invalid UTF-8 too (a prefix space is the
# one byte that a tokenizer adds)
for t in gpt2 llama3; do
    "$MERAK_BUILDDIR/tests/unit/test_tokenizer" "$WORK/$t.json" $FILES "$MERAK_BUILDDIR/merak-shard" \
        > "$WORK/rt.out" 2>&1 || { cat "$WORK/rt.out" >&2; fail "$t: round trip"; }
    echo "ok: $t: $(grep -c '^ok' "$WORK/rt.out") round-trip checks"
done
# where the text cannot come back (normalizers, unknown pieces, a prefix
# "▁"), decoding gives what the library's decode gives, with the special
# tokens and without
for t in gpt2nfkd llama2 llama2nfkc metaspace metasplit unigram unibytes uninopre uninfc uninfd; do
    "$PY" - "$WORK/$t.json" "$WORK/dec_$t" $FILES <<'PYEOF' || fail "$t: decoding with the library"
import os, sys
from tokenizers import Tokenizer
tok, out = Tokenizer.from_file(sys.argv[1]), sys.argv[2]
os.makedirs(out)
for f in sys.argv[3:]:
    ids = tok.encode(open(f, encoding="utf-8", newline="").read()).ids
    for ext, skip in (("all", False), ("skip", True)):
        open("%s/%s.%s" % (out, os.path.basename(f), ext), "w", encoding="utf-8", newline="").write(
            tok.decode(ids, skip_special_tokens=skip))
PYEOF
    "$MERAK_BUILDDIR/tests/unit/test_tokenizer" --library "$WORK/dec_$t" "$WORK/$t.json" $FILES \
        > "$WORK/dec.out" 2>&1 || { cat "$WORK/dec.out" >&2; fail "$t: decoding is not the library's"; }
    echo "ok: $t: $(grep -c '^ok' "$WORK/dec.out") decoding checks against the library"
done

# bytes that are not UTF-8 (which the library cannot take): a Unicode
# normalizer normalizes each run of valid UTF-8 on its own and keeps the
# other bytes, so the ids are those of the same tokenizer without that
# normalizer on the text so normalized (by the library, run by run).  The
# runs: a mark after a stray byte composes with nothing, a ligature, a
# truncated sequence, an overlong '/', a surrogate
printf 'e\377\314\201 \357\254\201\342\202 caf\303\251\300\257\355\240\200\342\221\240\n' > "$WORK/invalid.txt"
"$PY" - "$WORK" <<'PYEOF' || fail "normalizing run by run with the library"
import json, sys
from tokenizers import normalizers
work = sys.argv[1]
raw = open(work + "/invalid.txt", "rb").read().decode("utf-8", "surrogateescape")
for name, form in (("gpt2nfkc", normalizers.NFKC()), ("uninfd", normalizers.NFD())):
    out, run = [], ""
    for c in raw + "\udc00":   # a last escape flushes the last run
        if 0xdc80 <= ord(c) <= 0xdcff or c == "\udc00":
            out.append(form.normalize_str(run).encode() + (bytes([ord(c) - 0xdc00]) if c != "\udc00" else b""))
            run = ""
        else:
            run += c
    open("%s/invalid_%s.txt" % (work, name), "wb").write(b"".join(out))
    j = json.load(open("%s/%s.json" % (work, name)))
    n = j["normalizer"]
    j["normalizer"] = None if n["type"] != "Sequence" else dict(n, normalizers=n["normalizers"][1:])
    json.dump(j, open("%s/%s_plain.json" % (work, name), "w"))
PYEOF
for t in gpt2nfkc uninfd; do
    cmp -s "$WORK/invalid.txt" "$WORK/invalid_$t.txt" && fail "$t: the run-by-run normalization changed nothing"
    "$SHARD" --tokenizer "$WORK/$t.json" -o "$WORK/inv1.bin" "$WORK/invalid.txt" > /dev/null &&
        "$SHARD" --tokenizer "$WORK/${t}_plain.json" -o "$WORK/inv2.bin" "$WORK/invalid_$t.txt" > /dev/null ||
        fail "$t: merak-shard on invalid UTF-8"
    cmp -s "$WORK/inv1.bin" "$WORK/inv2.bin" || fail "$t: bytes that are not UTF-8 are not kept, or the runs between them not normalized each on its own"
    echo "ok: $t: invalid UTF-8 kept, the runs between normalized"
done

# bad tokenizers: one line naming the problem, exit 1
bad() { # NAME JSON PATTERN
    printf '%s' "$2" > "$WORK/$1.json"
    expect_exit 1 "$3" "$SHARD" --tokenizer "$WORK/$1.json" -o "$WORK/x.bin" "$C/spaces.txt"
}
bad wordpiece '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' "model type 'WordPiece' is not supported (BPE: byte-level or SentencePiece-style; Unigram)"
bad unilist '{"model": {"type": "Unigram", "vocab": {"a": 0}}}' "the Unigram model's vocab is not a list of \[piece, score\]"
bad unipiece '{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["b"]]}}' "Unigram vocab entry 1 is not \[piece, score\]"
bad uninumber '{"model": {"type": "Unigram", "vocab": [[7, -1.0]]}}' "Unigram vocab entry 0 is not \[piece, score\]"
bad uniscore '{"model": {"type": "Unigram", "vocab": [["a", "-1.0"]]}}' "Unigram vocab entry 0 is not \[piece, score\]"
bad uniunk '{"model": {"type": "Unigram", "unk_id": 1, "vocab": [["a", 0.0]]}}' "the Unigram model's unk_id is not the id of one of its 1 pieces"
bad uniunkneg '{"model": {"type": "Unigram", "unk_id": -1, "vocab": [["a", 0.0]]}}' "the Unigram model's unk_id is not the id of one of its 1 pieces"
bad unifallback '{"model": {"type": "Unigram", "byte_fallback": 1, "vocab": [["a", 0.0]]}}' "the Unigram model's byte_fallback is not true or false"
bad unibytelevel '{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' "a ByteLevel pre-tokenizer with a SentencePiece-style tokenizer (Unigram"
# a character no piece has, and no unknown piece to stand for it
bad uninounk '{"model": {"type": "Unigram", "vocab": [["i", -1.0], ["t", -1.0]]}}' "''' is not in the vocabulary, which has no unknown piece (unk_id)"
bad decoder '{"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "decoder 'WordPiece' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)"
bad strip '{"decoder": {"type": "Strip", "content": "ab", "start": 1, "stop": 0}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "a Strip decoder needs a content of one character and a start and a stop of 0 or more"
bad decregex '{"decoder": {"type": "Replace", "pattern": {"Regex": " "}, "content": "x"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "a Replace decoder must replace a String by a content"
bad merge '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' "merge 0 ('a' 'b') names a token not in the vocabulary"
bad norm '{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Precompiled", "precompiled_charsmap": ""}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "normalizer 'Precompiled' is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace)"
bad pre '{"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "pre-tokenizer 'Whitespace' is not supported"
bad regex '{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "split pattern at offset 1: missing closing parenthesis"
bad json '{"model": ' "json.json: line 1"
bad post '{"post_processor": {"type": "BertProcessing"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}' "post-processor 'BertProcessing' is not supported (ByteLevel, TemplateProcessing)"
bad hugeid '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2000000000}, "merges": []}}' "vocab entry 'b' has id 2000000000, past the largest id merak takes (16777215)"
bad hugeadded '{"added_tokens": [{"id": 16777216, "content": "<x>"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' "added token '<x>' has id 16777216, past the largest id merak takes (16777215)"
expect_exit 1 "nothing.json: cannot open: No such file" "$SHARD" --tokenizer "$WORK/nothing.json" -o "$WORK/x.bin" "$C/spaces.txt"
mkfifo "$WORK/fifo.json"
expect_exit 1 "fifo.json: not a regular file" "$SHARD" --tokenizer "$WORK/fifo.json" -o "$WORK/x.bin" "$C/spaces.txt"
# a tokenizer without an end-of-text token cannot separate documents
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); j["added_tokens"]=[]; json.dump(j, open(sys.argv[2], "w"))' \
    "$WORK/gpt2.json" "$WORK/noeot.json"
expect_exit 1 "noeot.json has no end-of-text token to put between the 2 documents" \
    "$SHARD" --tokenizer "$WORK/noeot.json" -o "$WORK/x.bin" "$C/spaces.txt" "$C/eot.txt"
# a model whose vocabulary is smaller than the tokenizer's refuses the shard
expect_exit 1 "gpt2.bin: token [0-9]* is [0-9]*, not below the vocab size 256 (the model's; the shard's tokenizer has a larger vocabulary)" \
    "$TRAIN" --model tiny-gpt2 --data "$WORK/gpt2.bin" --micro-batch 2 --seq-len 16 --steps 1 --threads 1
