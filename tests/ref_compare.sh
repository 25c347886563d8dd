#!/bin/sh
# Agreement with an independent implementation: tests/ref/torch_ref.py
# (PyTorch) and merak-train train the same tiny GPT-2, LLaMA and Qwen2 (q, k
# and v biases, LLaMA 3.1's rope_scaling with every frequency band in use,
# weights of std 0.1 so that positions matter: without the scaling its
# losses differ by 1e-3) from the same safetensors weights and token shard
# for 30 AdamW steps at lr 1e-3.  Losses must match within 1e-4 relative, gradient norms within
# 1e-3.  First the reference checks itself: its models (float64) against
# naive per-position loops (scaled RoPE frequencies one at a time), its
# AdamW against a hand-written update.
. "$(dirname "$0")/lib.sh"
PY=${TORCH_PYTHON:-none}
[ "$PY" != none ] && "$PY" -c 'import torch' 2>/dev/null || skip "PyTorch not installed (Debian: python3-torch)"
make_shard "$WORK/data.bin"
REF=$MERAK_SRCDIR/tests/ref/torch_ref.py
hyper="--micro-batch 4 --micro-batches 2 --seq-len 32 --steps 30 --lr 1e-3 --warmup 3
       --lr-schedule cosine --min-lr 1e-4 --weight-decay 0.1 --beta1 0.9 --beta2 0.95
       --eps 1e-8 --clip 1.0 --threads 1"

"$PY" "$REF" selftest > "$WORK/selftest.out" 2>&1 || { cat "$WORK/selftest.out" >&2; fail "torch_ref.py selftest"; }
tail -n 1 "$WORK/selftest.out"

for arch in gpt2 llama qwen2; do
    cfg=$FIX/ref-$arch.json
    "$PY" "$REF" init --config "$cfg" --seed 7 --out "$WORK/$arch.safetensors" > /dev/null ||
        fail "$arch: torch_ref.py init failed"
    "$PY" "$REF" train --config "$cfg" --init "$WORK/$arch.safetensors" --data "$WORK/data.bin" \
        $hyper --metrics "$WORK/$arch.torch.jsonl" > /dev/null || fail "$arch: torch_ref.py train failed"
    "$TRAIN" --model "$cfg" --init "$WORK/$arch.safetensors" --data "$WORK/data.bin" \
        $hyper --metrics "$WORK/$arch.merak.jsonl" > /dev/null || fail "$arch: merak-train failed"
    "$PY" - "$WORK/$arch.torch.jsonl" "$WORK/$arch.merak.jsonl" "$arch" <<'PYEOF' || fail "$arch: results differ"
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(ref) == len(got) == 30, (len(ref), len(got))
worst = {"loss": 0.0, "grad_norm": 0.0, "lr": 0.0}
for r, g in zip(ref, got):
    for k in worst:
        worst[k] = max(worst[k], abs(r[k] - g[k]) / abs(r[k]))
print(f"{sys.argv[3]}: loss {ref[0]['loss']:.6f} -> {ref[-1]['loss']:.6f} (torch) "
      f"{got[0]['loss']:.6f} -> {got[-1]['loss']:.6f} (merak); worst relative difference "
      f"loss {worst['loss']:.2e}, grad_norm {worst['grad_norm']:.2e}, lr {worst['lr']:.2e}")
ok = worst["loss"] <= 1e-4 and worst["grad_norm"] <= 1e-3 and worst["lr"] <= 1e-6
sys.exit(0 if ok else 1)
PYEOF
done
echo "ref_compare: ok"
