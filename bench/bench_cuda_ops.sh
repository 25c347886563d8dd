#!/bin/sh
# bench_cuda_ops.sh [BUILDDIR] - the CUDA kernel table's GEMMs and attention
# at GPT-2 124M's shapes against PyTorch on the same GPU, in float32 (TF32
# off on both sides: math=fp32), with TF32 products (merak --dtype tf32,
# torch's allow_tf32: math=tf32) and with BF16 products (merak --dtype bf16:
# float32 storage, products of bf16 values on the tensor cores; torch:
# bfloat16 tensors, math=bf16), attention by each of merak's ways (path=
# fused or products, and with bf16 cudnn: cuDNN's fused attention, then
# cudnn-bf16: the same on bf16 storage, GPT-2's fused qkv rows as they are,
# as --dtype bf16 trains; a row that failed is printed as such and left
# out of the comparison), and
# the linear ops against the peak of the same math:
# an 8192^3 product through the same table (the "peak" layer).  The
# linear rows with path=bf16-storage are the linear16 entries (bf16
# operands and result, a bias in the epilogue, the weight gradient added
# to float32: what --dtype bf16 trains with) against torch's bf16
# products, with their own peak ("peak16"), and the head twice: its rows
# of logits 50257 apart (lm_head_dense: all but one off 16 bytes) and
# padded to 50264 (lm_head: as the executor lays them out), to show what
# the alignment is worth (torch's side: 50257 columns, dense, both times).
# GPT-2's MLP with its GELU: the first layer and GELU forward
# (linear_gelu_fwd), GELU's input part with the second layer's
# (linear_bwd_x_dgelu), with cuBLASLt's GELU epilogues (epilogue=1) and
# without (0), against torch eager's product and GELU kernel.
# Then, for the linear16 layers' three products at GPT-2's shapes, each of
# cuBLASLt's heuristic algorithms timed against the one merak runs:
#   gemm_probe op=linear_fwd layer=qkv shape=8192,768,2304 candidates=8 picked=0 picked_ms=... best=3 best_ms=... gain=...
# (gain above 1: choosing by time would be faster).
#
#   op=linear_fwd layer=qkv math=fp32 shape=8192,768,2304 merak_ms=... torch_ms=... ratio=torch/merak=... merak_tflops=... of_peak=...
#
# ratio above 1: merak is faster.  PyTorch's side: F.linear for linear_fwd,
# dout @ w for linear_bwd_x, dout^T @ inp for linear_bwd_w, and
# F.scaled_dot_product_attention(is_causal=True) forward and backward (its
# own choice of kernel for float32) for attention, each timed with CUDA
# events, median of REPS samples.  Attention runs at T and at 4T (batch B/4).
#
# Then a roofline table of the table's memory-bound kernels (embeddings,
# norms, GELU/SwiGLU on N x 4C, add/accumulate/dropout on N x C,
# cross-entropy on N x V logits, the norms and the cross-entropy again on
# bf16 storage (the *16 rows), AdamW/sumsq/scale over 124M parameters),
# merak only, each against a 1 GiB device-to-device copy:
#
#   roofline op=layernorm_fwd shape=8192,768 ms=... bytes=... gbs=... of_copy=...
#
# bytes: the least traffic the result needs (bench_cuda_ops.c gives each
# kernel's formula); gbs: bytes / median time; of_copy: gbs / the copy's
# rate.  A last line names the kernels below 0.6 of the copy rate.
# Environment: B [8]  T [1024]  REPS [5]  PYTHON [python3]
set -eu
BUILDDIR=${1:-.}
B=${B:-8}
T=${T:-1024}
REPS=${REPS:-5}
PYTHON=${PYTHON:-python3}
. "$(dirname "$0")/lib.sh"
bench_setup bench_cuda_ops "$BUILDDIR"
make -s -C "$BUILDDIR" bench/bench_cuda_ops >/dev/null || die "cannot build bench/bench_cuda_ops (a CUDA build?)"
"$BUILDDIR/bench/bench_cuda_ops" --batch "$B" --seq-len "$T" --reps "$REPS" --roofline "$TMP/roofline.txt" \
    > "$TMP/all.txt" || echo "# bench_cuda_ops failed part way (the rows before the failure stand)"
# a row that failed (cuDNN's, timed last) is said, and left out of the
# comparison; so are the GEMM probes (cuBLASLt's candidates timed, merak only)
grep '^failed' "$TMP/all.txt" || true
grep '^gemm_probe' "$TMP/all.txt" || true
grep -v -e '^failed' -e '^gemm_probe' "$TMP/all.txt" > "$TMP/merak.txt" || die "bench_cuda_ops printed no row"
cat > "$TMP/torch_ops.py" <<'EOF'
import sys, torch, torch.nn.functional as F
reps = int(sys.argv[1])
def timeit(fn):
    fn(); torch.cuda.synchronize()
    s = []
    for _ in range(reps):
        n, tot = 0, 0.0
        while tot < 50.0:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); torch.cuda.synchronize()
            tot += a.elapsed_time(b); n += 1
        s.append(tot / n)
    return sorted(s)[len(s) // 2]
for line in sys.stdin:
    kv = dict(f.split("=", 1) for f in line.split())
    dt = torch.bfloat16 if kv["math"] == "bf16" else torch.float32
    r = lambda *sh: (torch.rand(*sh, device="cuda") * 2 - 1).to(dt)
    torch.backends.cuda.matmul.allow_tf32 = kv["math"] == "tf32"
    torch.backends.cudnn.allow_tf32 = kv["math"] == "tf32"
    sh = [int(x) for x in kv["shape"].split(",")]
    if kv["op"] in ("linear_gelu_fwd", "linear_bwd_x_dgelu"):
        N, C, Fh = sh   # GPT-2's MLP: torch eager's product, then its GELU kernel
        x, w1, b1, g, w2, pre = r(N, C), r(Fh, C), r(Fh), r(N, C), r(C, Fh), r(N, Fh)
        fn = (lambda: F.gelu(F.linear(x, w1, b1), approximate="tanh")) if kv["op"] == "linear_gelu_fwd" else \
             (lambda: torch.ops.aten.gelu_backward(g @ w2, pre, approximate="tanh"))
    elif kv["op"].startswith("linear"):
        N, K, O = sh
        x, w, g = r(N, K), r(O, K), r(N, O)
        b = r(O) if kv.get("bias") == "1" else None
        fn = {"linear_fwd": lambda: F.linear(x, w, b), "linear_bwd_x": lambda: g @ w,
              "linear_bwd_w": lambda: g.t() @ x}[kv["op"]]
    else:
        B, T, H, D = sh
        q, k, v = (r(B, H, T, D).requires_grad_() for _ in range(3))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        go = r(B, H, T, D)
        if kv["op"] == "attention_fwd":
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            fn = lambda: torch.autograd.grad(o, (q, k, v), go, retain_graph=True)
    print("%.4f" % timeit(fn), flush=True)
EOF
"$PYTHON" "$TMP/torch_ops.py" "$REPS" < "$TMP/merak.txt" > "$TMP/torch.txt" || die "the torch side failed"
echo "# bench_cuda_ops: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), B=$B T=$T;" \
    "merak's 8192^3 linear_fwd peak: $(awk '/layer=peak/ && /op=linear_fwd/ {t = $NF; sub(/tflops=/, "", t); printf "%s%s %s TFLOP/s ", $3, $4 ~ /^path=/ ? " " $4 : "", t}' "$TMP/merak.txt")"
paste -d' ' "$TMP/merak.txt" "$TMP/torch.txt" | awk '
    # a peak per math and storage (path=bf16-storage: the linear16 rows)
    { key = $3 ($4 ~ /^path=/ ? " " $4 : "") }
    /layer=peak/ && /op=linear_fwd/ { p = $0; sub(/.*tflops=/, "", p); sub(/ .*/, "", p); peak[key] = p }
    { ms = $0; sub(/.*ms=/, "", ms); sub(/ .*/, "", ms)
      tf = $0; sub(/.*tflops=/, "", tf); sub(/ .*/, "", tf)
      t = $NF; label = ""
      for (i = 1; i < NF; i++) if ($i !~ /^(ms|tflops)=/) label = label (label == "" ? "" : " ") $i
      printf "%s merak_ms=%s torch_ms=%s ratio=torch/merak=%.3f merak_tflops=%s", label, ms, t, t / ms, tf
      if ($1 ~ /^op=linear/ && (key in peak)) printf " of_peak=%.2f", tf / peak[key]
      printf "\n" }'
# The roofline rows, their columns aligned; of_copy as printed decides the last line.
awk '
    $2 == "op=copy" { copy = $0; sub(/.*gbs=/, "", copy); sub(/ .*/, "", copy) }
    { row[NR] = $0; for (i = 1; i <= NF; i++) if (length($i) > w[i]) w[i] = length($i) }
    END {
        if (copy == "") { print "bench_cuda_ops: no copy row in the roofline rows" > "/dev/stderr"; exit 1 }
        printf "# roofline: copy rate %s GB/s (merak_cuda_memcpy_d2d, 1 GiB, bytes read + written);", copy
        printf " gbs = least bytes / median ms, of_copy = gbs / copy rate\n"
        for (r = 1; r <= NR; r++) {
            n = split(row[r], f, " ")
            line = ""
            for (i = 1; i < n; i++) line = line sprintf("%-" w[i] "s ", f[i])
            print line f[n]
            of = f[n]; sub(/^of_copy=/, "", of)
            op = f[2]; sub(/^op=/, "", op)
            if (of + 0 < 0.6) slow = slow " " op
        }
        print "below 0.6 of the copy rate:" (slow == "" ? " none" : slow)
    }' "$TMP/roofline.txt"
