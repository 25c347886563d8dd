#!/bin/sh
# bench_tokenizer.sh [BUILDDIR] - encoding speed: merak-shard --tokenizer
# against Hugging Face's `tokenizers` library on the same text and the same
# tokenizer.json, in MB of text per second.
#
# Tokenizers: byte-level BPE of GPT-2's kind and of LLaMA-3's kind (a Split
# regex, ignore_merges), VOCAB tokens, trained by the library on the
# project's sources.  Text: every .c, .h, .md and man page of the project,
# COPIES times over, one document per file.  merak-shard runs on one
# thread (the rate it prints covers reading the files and encoding them,
# not writing the shard; the library's covers encoding the strings it has
# read); the library encodes the same documents one by one
# (Tokenizer.encode, one thread) and as one batch (encode_batch, all
# cores).  Both sides' ids are compared, so the rates are for the same
# work.  Lines:
#   bench_tokenizer kind=gpt2 mb=... merak_mb_s=... hf_mb_s=... hf_batch_mb_s=... ratio=merak/hf=...
# Environment: VOCAB [8000]  COPIES [4]  PYTHON [/usr/bin/python3]
set -eu
BUILDDIR=${1:-.}
VOCAB=${VOCAB:-8000}
COPIES=${COPIES:-4}
PYTHON=${PYTHON:-/usr/bin/python3}
. "$(dirname "$0")/lib.sh"
bench_setup bench_tokenizer "$BUILDDIR" merak-shard
bench_need "$PYTHON" tokenizers numpy
find "$SRCDIR" \( -name .git -o -name autom4te.cache -o -name build -o -name 'build-*' -o -name .gpu \) -prune -o \
    -type f \( -name '*.[ch]' -o -name '*.md' -o -name '*.[178]' \) -print | LC_ALL=C sort > "$TMP/list"
i=0
while [ $i -lt "$COPIES" ]; do
    n=0
    while read -r f; do n=$((n + 1)); cp "$f" "$TMP/doc.$i.$n"; done < "$TMP/list"
    i=$((i + 1))
done
ls "$TMP"/doc.* | LC_ALL=C sort > "$TMP/docs"
"$PYTHON" - "$TMP" "$VOCAB" $(cat "$TMP/list") <<'PYEOF'
import sys
from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, trainers
tmp, vocab, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
for name, pre, ign in (("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False), False),
                       ("llama3", pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), True)):
    tok = Tokenizer(models.BPE(ignore_merges=ign))
    tok.pre_tokenizer, tok.decoder = pre, decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.save("%s/%s.json" % (tmp, name))
PYEOF
cat > "$TMP/hf.py" <<'EOF'
import struct, sys, time
import numpy as np
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs = [open(f, encoding="utf-8", newline="").read() for f in open(sys.argv[3]).read().split()]
mb = sum(len(d.encode()) for d in docs) / 1e6
t0 = time.perf_counter(); one = [tok.encode(d).ids for d in docs]; t1 = time.perf_counter()
batch = [e.ids for e in tok.encode_batch(docs)]; t2 = time.perf_counter()
eot = tok.token_to_id("<|endoftext|>")
want = []
for i, ids in enumerate(one):
    want += ([eot] if i else []) + ids
raw = open(sys.argv[2], "rb").read()
v, n = struct.unpack("<ii", raw[4:12])
got = np.frombuffer(raw[1024:], dtype="<u2" if v == 1 else "<u4")[:n].tolist()
assert batch == one and got == want, "the ids differ"
print("%.3f %.2f %.2f" % (mb, mb / (t1 - t0), mb / (t2 - t1)))
EOF
echo "# bench_tokenizer: $(wc -l < "$TMP/docs") documents, vocabulary $VOCAB, $(nproc) cpus, tokenizers $("$PYTHON" -c 'import tokenizers; print(tokenizers.__version__)')"
for kind in gpt2 llama3; do
    # shellcheck disable=SC2046
    rate=$("$BUILDDIR/merak-shard" --tokenizer "$TMP/$kind.json" -o "$TMP/$kind.bin" $(cat "$TMP/docs") |
           sed -n 's/.*, \([0-9.]*\) MB\/s)$/\1/p')
    set -- $("$PYTHON" "$TMP/hf.py" "$TMP/$kind.json" "$TMP/$kind.bin" "$TMP/docs")
    awk -v k="$kind" -v mb="$1" -v m="$rate" -v h="$2" -v hb="$3" 'BEGIN {
        printf "bench_tokenizer kind=%s mb=%s merak_mb_s=%s hf_mb_s=%s hf_batch_mb_s=%s ratio=merak/hf=%.2f merak/hf_batch=%.2f\n",
               k, mb, m, h, hb, m / h, m / hb }'
done
