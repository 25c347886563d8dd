#!/bin/sh
# bench_cuda_ops.sh [BUILDDIR] - the CUDA kernel table's GEMMs and attention
# at GPT-2 124M's shapes against PyTorch on the same GPU, float32 (TF32 off:
# the arithmetic both do), and the linear ops against the peak: an
# 8192^3 product through the same table (the "peak" layer).
#
#   op=linear_fwd layer=qkv shape=8192,768,2304 merak_ms=... torch_ms=... ratio=torch/merak=... merak_tflops=... of_peak=...
#
# ratio above 1: merak is faster.  PyTorch's side: F.linear for linear_fwd,
# dout @ w for linear_bwd_x, dout^T @ inp for linear_bwd_w, and
# F.scaled_dot_product_attention(is_causal=True) forward and backward (its
# own choice of kernel for float32) for attention, each timed with CUDA
# events, median of REPS samples.  Attention runs at T and at 4T (batch B/4).
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
"$BUILDDIR/bench/bench_cuda_ops" --batch "$B" --seq-len "$T" --reps "$REPS" > "$TMP/merak.txt" ||
    die "bench_cuda_ops failed"
cat > "$TMP/torch_ops.py" <<'EOF'
import sys, torch, torch.nn.functional as F
reps = int(sys.argv[1])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
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
r = lambda *sh: torch.rand(*sh, device="cuda") * 2 - 1
for line in sys.stdin:
    kv = dict(f.split("=", 1) for f in line.split())
    sh = [int(x) for x in kv["shape"].split(",")]
    if kv["op"].startswith("linear"):
        N, K, O = sh
        x, w, g = r(N, K), r(O, K), r(N, O)
        fn = {"linear_fwd": lambda: F.linear(x, w), "linear_bwd_x": lambda: g @ w,
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
peak=$(awk '/layer=peak/ && /op=linear_fwd/ {sub("tflops=", "", $NF); print $NF}' "$TMP/merak.txt")
echo "# bench_cuda_ops: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), B=$B T=$T, float32, merak's 8192^3 linear_fwd peak $peak TFLOP/s"
paste -d' ' "$TMP/merak.txt" "$TMP/torch.txt" | awk -v peak="$peak" '{
    ms = $0; sub(/.*ms=/, "", ms); sub(/ .*/, "", ms)
    tf = $0; sub(/.*tflops=/, "", tf); sub(/ .*/, "", tf)
    t = $NF; line = $1 " " ($2 ~ /^layer=/ ? $2 " " $3 : $2)
    printf "%s merak_ms=%s torch_ms=%s ratio=torch/merak=%.3f merak_tflops=%s of_peak=%.2f\n", line, ms, t, t / ms, tf, tf / peak }'
