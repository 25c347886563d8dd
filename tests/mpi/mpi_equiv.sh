#!/bin/sh
# Equivalence under MPI: data-, tensor- and pipeline-parallel layouts of tiny
# GPT-2 and LLaMA (and a Qwen2 with scaled RoPE), with gpipe and 1f1b, with and without ZeRO-1, with
# pipeline point-to-point over MPI and over UCX (--p2p ucx), and with the
# scp, zb-h1 and interleaved schedules and every recomputation policy (on a
# GPT-2 with dropout, whose masks a recompute must replay), and with the
# autopipe and custom partitions, train exactly like one process:
# per-step losses and gradient norms within 1e-5 relative, and the final
# (gathered) parameters within 1e-5 relative over the whole model,
# ||G - R|| / ||R||.  The largest elementwise difference is printed too: it
# sits in entries whose gradients are near zero, where Adam's m/sqrt(v)
# turns the last bits of a reordered sum (tensor-parallel partial sums,
# dp and tied reductions) into a visible step, and is not a gate.
# One process with dp*M micro-batches is the reference.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
[ -x "$WRAP" ] || skip "no mpirun wrapper"
make_shard "$WORK/data.bin"
M=4
common="--data $WORK/data.bin --micro-batch 2 --seq-len 16 --steps 10 --lr 3e-3 --warmup 2
        --lr-schedule cosine --min-lr 3e-4 --threads 1"

# compare NAME REF.jsonl REF.safetensors GOT.jsonl GOT.safetensors
compare() {
    "$PY3" - "$@" <<'PYEOF'
import json, struct, sys
import numpy as np
name, rj, rw, gj, gw = sys.argv[1:]
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4")
    return out
ref = [json.loads(l) for l in open(rj)]
got = [json.loads(l) for l in open(gj)]
assert len(ref) == len(got) == 10, (len(ref), len(got))
lw = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ref, got))
nw = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"]) for a, b in zip(ref, got))
R, G = tensors(rw), tensors(gw)
assert sorted(R) == sorted(G), set(R) ^ set(G)
d = np.concatenate([G[k] - R[k] for k in sorted(R)])
pw = float(np.linalg.norm(d) / np.linalg.norm(np.concatenate([R[k] for k in sorted(R)])))
pa = float(np.max(np.abs(d)))
print(f"{name}: loss {got[0]['loss']:.6f} -> {got[-1]['loss']:.6f}, worst relative difference: "
      f"loss {lw:.2e}, grad norm {nw:.2e}, parameters {pw:.2e} (max abs {pa:.1e})")
sys.exit(0 if lw <= 1e-5 and nw <= 1e-5 and pw <= 1e-5 else 1)
PYEOF
}

status=0
for model in tiny-gpt2 tiny-llama; do
    for layout in "1 1 1" "2 1 1" "1 2 1" "1 1 2" "1 1 4" "2 2 2" "1 2 4" "4 1 2" "2 4 1" "2 1 2"; do
        set -- $layout
        dp=$1 tp=$2 pp=$3 np=$(($1 * $2 * $3))
        ref=$WORK/$model.ref$dp
        if [ ! -f "$ref.jsonl" ]; then
            "$TRAIN" --model $model $common --micro-batches $((M * dp)) --metrics "$ref.jsonl" \
                --save-weights "$ref.safetensors" > /dev/null || fail "$model: reference run failed"
        fi
        for sched in gpipe 1f1b; do
            # Without ZeRO, small buckets (2.5k floats): many all-reduces,
            # launched during the backward.  With ZeRO-1, reduce-scatter.
            for zero in 0 1; do
                out=$WORK/$model.$dp$tp$pp.$sched.z$zero
                if ! "$WRAP" $np "$TRAIN" --model $model $common --micro-batches $M --dp $dp --tp $tp --pp $pp \
                    --schedule $sched --zero $zero --bucket-mb 0.01 --metrics "$out.jsonl" \
                    --save-weights "$out.safetensors" > "$out.log" 2>&1; then
                    cat "$out.log" >&2
                    fail "$model (dp,tp,pp)=($dp,$tp,$pp) $sched zero $zero: run failed"
                fi
                compare "$model ($dp,$tp,$pp) $sched zero=$zero" "$ref.jsonl" "$ref.safetensors" \
                    "$out.jsonl" "$out.safetensors" || status=1
            done
        done
    done
done
# Pipeline point-to-point over UCX's tag API instead of MPI.
for model in tiny-gpt2 tiny-llama; do
    for layout in "1 1 4" "2 2 2"; do
        set -- $layout
        dp=$1 tp=$2 pp=$3 np=$(($1 * $2 * $3))
        for sched in gpipe 1f1b; do
            out=$WORK/$model.$dp$tp$pp.$sched.ucx
            if ! "$WRAP" $np "$TRAIN" --model $model $common --micro-batches $M --dp $dp --tp $tp --pp $pp \
                --schedule $sched --p2p ucx --metrics "$out.jsonl" --save-weights "$out.safetensors" > "$out.log" 2>&1; then
                cat "$out.log" >&2
                fail "$model (dp,tp,pp)=($dp,$tp,$pp) $sched --p2p ucx: run failed"
            fi
            compare "$model ($dp,$tp,$pp) $sched p2p=ucx" "$WORK/$model.ref$dp.jsonl" "$WORK/$model.ref$dp.safetensors" \
                "$out.jsonl" "$out.safetensors" || status=1
        done
    done
done
# Merak's engine: scp, zb-h1 and interleaved (2 chunks per stage; 4 at
# pp 2), and each recomputation policy (a budget of 0.5 MB makes some
# stages recompute some of their layers), on a GPT-2 with dropout
# everywhere; LLaMA with the new schedules too.
printf '{"model_type": "gpt2", "vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 4, "n_head": 2,
  "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}\n' > "$WORK/drop.json"
for layout in "1 1 4" "2 2 2"; do
    set -- $layout
    dp=$1 tp=$2 pp=$3 np=$(($1 * $2 * $3))
    ref=$WORK/drop.ref$dp
    if [ ! -f "$ref.jsonl" ]; then
        "$TRAIN" --model "$WORK/drop.json" $common --micro-batches $((M * dp)) --metrics "$ref.jsonl" \
            --save-weights "$ref.safetensors" > /dev/null || fail "dropout model: reference run failed"
    fi
    for run in "scp none" "zb-h1 none" "1f1b full" "scp full" "zb-h1 full" "1f1b stage-aware" \
               "scp stage-aware=0.5" "gpipe budget=0.0005" "interleaved none" "interleaved stage-aware"; do
        set -- $run
        out=$WORK/drop.$dp$tp$pp.$1.$2
        v=
        [ $1 = interleaved ] && [ $pp = 2 ] && v="--virtual-stages 4"
        if ! "$WRAP" $np "$TRAIN" --model "$WORK/drop.json" $common --micro-batches $M --dp $dp --tp $tp --pp $pp \
            --schedule $1 $v --recompute $2 --metrics "$out.jsonl" --save-weights "$out.safetensors" > "$out.log" 2>&1; then
            cat "$out.log" >&2
            fail "dropout model (dp,tp,pp)=($dp,$tp,$pp) --schedule $1 --recompute $2: run failed"
        fi
        case $2 in budget=*)
            grep -q "[1-9][0-9]*/[0-9]* layers recomputed" "$out.log" ||
                fail "--recompute $2 recomputed nothing: $(grep activations "$out.log")";;
        esac
        compare "dropout GPT-2 ($dp,$tp,$pp) $1 recompute=$2" "$ref.jsonl" "$ref.safetensors" \
            "$out.jsonl" "$out.safetensors" || status=1
    done
done
for sched in scp zb-h1; do
    out=$WORK/tiny-llama.124.$sched
    if ! "$WRAP" 8 "$TRAIN" --model tiny-llama $common --micro-batches $M --tp 2 --pp 4 --schedule $sched \
        --recompute full --metrics "$out.jsonl" --save-weights "$out.safetensors" > "$out.log" 2>&1; then
        cat "$out.log" >&2
        fail "tiny-llama (1,2,4) $sched --recompute full: run failed"
    fi
    compare "tiny-llama (1,2,4) $sched recompute=full" "$WORK/tiny-llama.ref1.jsonl" \
        "$WORK/tiny-llama.ref1.safetensors" "$out.jsonl" "$out.safetensors" || status=1
done
# Sub-pipelined tensor parallelism (--tp-overlap K): each micro-batch in K
# sub-batches whose all-reduces overlap the next one's compute, forward,
# recompute and backward, with every schedule kind; dropout masks and the
# loss mean over the whole micro-batch are unchanged.  K = 4 on micro-batches
# of 4 sequences against a reference with such micro-batches.
for run in "1 1 1 1f1b full 2 2" "1 2 1 1f1b none 2 2" "1 2 2 scp full 2 2" "1 2 2 zb-h1 none 2 2" "1 2 2 interleaved stage-aware 2 2" \
           "2 2 2 1f1b stage-aware 2 2" "1 2 2 1f1b full 4 4"; do
    set -- $run
    dp=$1 tp=$2 pp=$3 np=$(($1 * $2 * $3)) B=$7
    ref=$WORK/drop.ref$dp.b$B
    if [ ! -f "$ref.jsonl" ]; then
        "$TRAIN" --model "$WORK/drop.json" $common --micro-batch $B --micro-batches $((M * dp)) --metrics "$ref.jsonl" \
            --save-weights "$ref.safetensors" > /dev/null || fail "dropout model: reference run failed"
    fi
    out=$WORK/drop.$dp$tp$pp.$4.$5.k$6
    if ! "$WRAP" $np "$TRAIN" --model "$WORK/drop.json" $common --micro-batch $B --micro-batches $M --dp $dp \
        --tp $tp --pp $pp --schedule $4 --recompute $5 --tp-overlap $6 --metrics "$out.jsonl" \
        --save-weights "$out.safetensors" > "$out.log" 2>&1; then
        cat "$out.log" >&2
        fail "dropout model (dp,tp,pp)=($dp,$tp,$pp) --schedule $4 --recompute $5 --tp-overlap $6: run failed"
    fi
    grep -q "$6 sub-batches per micro-batch" "$out.log" || fail "--tp-overlap $6: not in the banner"
    compare "dropout GPT-2 ($dp,$tp,$pp) $4 recompute=$5 tp-overlap=$6 micro-batch=$B" "$ref.jsonl" \
        "$ref.safetensors" "$out.jsonl" "$out.safetensors" || status=1
done
out=$WORK/tiny-llama.122.k2
if ! "$WRAP" 4 "$TRAIN" --model tiny-llama $common --micro-batches $M --tp 2 --pp 2 --tp-overlap 2 \
    --metrics "$out.jsonl" --save-weights "$out.safetensors" > "$out.log" 2>&1; then
    cat "$out.log" >&2
    fail "tiny-llama (1,2,2) --tp-overlap 2: run failed"
fi
compare "tiny-llama (1,2,2) tp-overlap=2" "$WORK/tiny-llama.ref1.jsonl" "$WORK/tiny-llama.ref1.safetensors" \
    "$out.jsonl" "$out.safetensors" || status=1
# Qwen2 (q, k and v biases, split with their weights) with LLaMA 3.1's
# rope_scaling over every parallel dimension at once.
ref=$WORK/qwen2.ref2
"$TRAIN" --model "$FIX/ref-qwen2.json" $common --micro-batches $((M * 2)) --metrics "$ref.jsonl" \
    --save-weights "$ref.safetensors" > /dev/null || fail "qwen2: reference run failed"
out=$WORK/qwen2.222
if ! "$WRAP" 8 "$TRAIN" --model "$FIX/ref-qwen2.json" $common --micro-batches $M --dp 2 --tp 2 --pp 2 --zero 1 \
    --metrics "$out.jsonl" --save-weights "$out.safetensors" > "$out.log" 2>&1; then
    cat "$out.log" >&2
    fail "qwen2 (2,2,2): run failed"
fi
compare "qwen2 + llama3 rope (2,2,2) zero=1" "$ref.jsonl" "$ref.safetensors" "$out.jsonl" "$out.safetensors" || status=1
# Partition methods: AutoPipe (op times from the cpu profile, on the
# tensor-parallel shard) and a custom cut, each stage its own layers.
for run in "tiny-llama 1 2 4 autopipe" "tiny-gpt2 2 1 2 autopipe" "tiny-gpt2 1 1 4 custom:0,4,6,7"; do
    set -- $run
    model=$1 dp=$2 tp=$3 pp=$4 np=$(($2 * $3 * $4))
    out=$WORK/$model.$dp$tp$pp.part
    if ! "$WRAP" $np "$TRAIN" --model $model $common --micro-batches $M --dp $dp --tp $tp --pp $pp --partition $5 \
        --metrics "$out.jsonl" --save-weights "$out.safetensors" > "$out.log" 2>&1; then
        cat "$out.log" >&2
        fail "$model (dp,tp,pp)=($dp,$tp,$pp) --partition $5: run failed"
    fi
    case $5 in custom:*)
        grep -q "stage 0 .* 0/4 layers .* stage 3 .* 0/[0-9]* layers" "$out.log" ||
            fail "--partition $5: stage 0 does not hold 4 layers: $(grep activations "$out.log")";;
    esac
    compare "$model ($dp,$tp,$pp) partition=$5" "$WORK/$model.ref$dp.jsonl" "$WORK/$model.ref$dp.safetensors" \
        "$out.jsonl" "$out.safetensors" || status=1
done
# Hugging Face weights loaded into tensor-parallel shards (GPT-2's fused
# q|k|v sliced head by head, Conv1D transposed): fine-tune the trained
# weights of a reference run, at a fine-tuning learning rate (training on
# from trained weights at 3e-3 is chaotic enough to amplify rounding).
for model in tiny-gpt2 tiny-llama; do
    init=$WORK/$model.ref1.safetensors
    common="$common --lr 3e-4 --min-lr 3e-5"
    "$TRAIN" --model $model $common --micro-batches $M --init "$init" --metrics "$WORK/$model.i.jsonl" \
        --save-weights "$WORK/$model.i.safetensors" > /dev/null || fail "$model: --init reference failed"
    if ! "$WRAP" 4 "$TRAIN" --model $model $common --micro-batches $M --tp 2 --pp 2 --init "$init" \
        --metrics "$WORK/$model.i122.jsonl" --save-weights "$WORK/$model.i122.safetensors" > "$WORK/i.log" 2>&1; then
        cat "$WORK/i.log" >&2
        fail "$model (1,2,2) --init: run failed"
    fi
    compare "$model (1,2,2) from $model.ref1.safetensors" "$WORK/$model.i.jsonl" "$WORK/$model.i.safetensors" \
        "$WORK/$model.i122.jsonl" "$WORK/$model.i122.safetensors" || status=1
done
[ $status -eq 0 ] || fail "a parallel layout does not match one process"
echo "mpi_equiv: ok"
