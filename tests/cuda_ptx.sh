#!/bin/sh
# The memory-bound CUDA kernels as nvcc compiles them for sm_90 (no GPU
# needed): every elementwise op (pointwise.cu's one kernel, an instance per
# op: GELU, SwiGLU, add, accumulate, scale, dropout, the bf16 rounding, and
# the bf16 storage instances of the first six, eight elements a load) and
# attention's bf16 conversions, the norms' row kernels (forward and input
# gradient, layer norm and RMS norm, float and bf16, each lane count), the
# column sums (the norms' weight gradients, the linear layers' bias
# gradients), the embeddings', attention's gradient add and the
# cross-entropy's (rowwise.h), AdamW
# and the gradient norm's sum of squares load and store 16 bytes a thread
# (ld.global.v4 /
# st.global.v4 in the PTX: what a kernel needs to reach the copy rate; the
# column sums, the statistics and the sum of squares load so and store a
# few numbers) and spill nothing (ptxas -v).  The kernels left one element
# a thread (the fallbacks for widths that are not whole vectors and
# buffers off 16 bytes, the small final sums, the bias epilogue's
# fallback) are listed.
# Skipped without a CUDA build.
. "$(dirname "$0")/lib.sh"
grep -q '^#define HAVE_CUDA 1' "$MERAK_BUILDDIR/config.h" || skip "built without CUDA (no nvcc)"
K=kernels/cuda
make -s -C "$MERAK_BUILDDIR" $K/pointwise.ptx $K/attention.ptx $K/norm.ptx $K/embed.ptx $K/loss.ptx $K/optim.ptx \
    $K/pointwise.ptxas $K/attention.ptxas $K/norm.ptxas $K/loss.ptxas $K/optim.ptxas $K/embed.ptxas > /dev/null 2> "$WORK/make.err" ||
    { cat "$WORK/make.err" >&2; fail "nvcc could not make the PTX"; }

# vec FILE: "NAME LOADS STORES" for each kernel of a PTX file: how many
# 16-byte global loads and stores its body has.
vec() {
    awk '/^\.(visible )?\.entry/ { n = $NF; sub(/\(.*/, "", n); name[++k] = n }
         k && /ld\.global(\.[a-z0-9]+)*\.v4/ { ld[k]++ }
         k && /st\.global(\.[a-z0-9]+)*\.v4/ { st[k]++ }
         END { for (i = 1; i <= k; i++) print name[i], ld[i] + 0, st[i] + 0 }' "$1"
}
# spills FILE: the kernels of a ptxas report that spill, one per line.
spills() {
    awk '/Function properties for/ { n = $NF } /bytes spill stores/ && ($5 + 0 > 0 || $9 + 0 > 0) { print n }' "$1"
}

vec "$MERAK_BUILDDIR/$K/pointwise.ptx" > "$WORK/pointwise"
n=$(grep -c . "$WORK/pointwise")
[ "$n" -ge 18 ] || { cat "$WORK/pointwise" >&2; fail "pointwise.ptx has $n kernels, not the 10 elementwise ops in float and 8 in bf16"; }
awk '$1 !~ /ew_k/ || $2 == 0 || $3 == 0' "$WORK/pointwise" > "$WORK/bad"
[ ! -s "$WORK/bad" ] || { cat "$WORK/bad" >&2; fail "elementwise kernels without 16-byte loads and stores (name loads stores above)"; }
vec "$MERAK_BUILDDIR/$K/attention.ptx" | grep -E "rows_(to|from)_bf16_v4" > "$WORK/conv"
[ "$(grep -c . "$WORK/conv")" -eq 2 ] || { cat "$WORK/conv" >&2; fail "attention.ptx lacks its two vectorised bf16 conversions"; }
awk '$2 == 0 || $3 == 0' "$WORK/conv" > "$WORK/bad"
[ ! -s "$WORK/bad" ] || { cat "$WORK/bad" >&2; fail "a bf16 conversion without 16-byte loads and stores"; }

# the row kernels: 2 norms x 2 passes x 2 storages x 4 lane counts, the
# norms' whole backward in one pass and the residual add with the norm's
# forward (2 norms x 4 lane counts each, bf16), the
# column sums' 3 kinds x 2 storages, and the cross-entropy's statistics and
# gradient in 2 storages and both in one pass in bf16; AdamW and the sum of squares; the embeddings'
# 4 kernels in 2 storages; attention's gradient add, without RoPE and
# with, in 2
vec "$MERAK_BUILDDIR/$K/norm.ptx" | grep -E "norm_(fwd|add_fwd|bwd_x|bwd)_v_k|colred_v_k" > "$WORK/rows"
vec "$MERAK_BUILDDIR/$K/loss.ptx" | grep -E "ce_(stats|bwd|fused)_v_k" >> "$WORK/rows"
vec "$MERAK_BUILDDIR/$K/optim.ptx" | grep -E "adamw_k|sumsq_partial_k" >> "$WORK/rows"
vec "$MERAK_BUILDDIR/$K/embed.ptx" | grep -E "embedding_fwd_v_k|posemb_(fwd|bwd_w)_v_k|embedding_bwd_runs_kI[ft]Li1E" >> "$WORK/rows"
vec "$MERAK_BUILDDIR/$K/attention.ptx" | grep -E "attn_bwd_add_(rope_)?v_k" >> "$WORK/rows"
[ "$(grep -c . "$WORK/rows")" -eq 73 ] || { cat "$WORK/rows" >&2; fail "norm.ptx, loss.ptx, optim.ptx, embed.ptx and attention.ptx lack their 32 + 16 + 6 + 5 + 2 + 8 + 4 kernels"; }
awk '$2 == 0 || ($3 == 0 && $1 !~ /ce_stats|colred|sumsq/)' "$WORK/rows" > "$WORK/bad"
[ ! -s "$WORK/bad" ] || { cat "$WORK/bad" >&2; fail "row kernels without 16-byte loads and stores (name loads stores above)"; }

spills "$MERAK_BUILDDIR/$K/pointwise.ptxas" > "$WORK/spill"
spills "$MERAK_BUILDDIR/$K/norm.ptxas" >> "$WORK/spill"
spills "$MERAK_BUILDDIR/$K/loss.ptxas" >> "$WORK/spill"
spills "$MERAK_BUILDDIR/$K/optim.ptxas" >> "$WORK/spill"
spills "$MERAK_BUILDDIR/$K/embed.ptxas" | grep -v cub >> "$WORK/spill" || true
spills "$MERAK_BUILDDIR/$K/attention.ptxas" | grep -E "rows_(to|from)_bf16|attn_bwd_add" >> "$WORK/spill" || true
[ ! -s "$WORK/spill" ] || { cat "$WORK/spill" >&2; fail "kernels that spill (above)"; }
# a report that says nothing would pass the check above: it must list them
grep -q "Function properties for .*ew_k" "$MERAK_BUILDDIR/$K/pointwise.ptxas" ||
    fail "ptxas's report of pointwise.cu names no kernel"
grep -q "Function properties for .*norm_bwd_x_v_k" "$MERAK_BUILDDIR/$K/norm.ptxas" ||
    fail "ptxas's report of norm.cu names no row kernel"

for f in norm embed loss optim; do
    vec "$MERAK_BUILDDIR/$K/$f.ptx" | awk -v f="$f" '$1 !~ /_v_k|adamw_k|sumsq_partial|runs_kI[ft]Li1E|cub/ && ($2 == 0 || $3 == 0) { s = s " " $1 } END { if (s != "") print "# " f ".cu, one element a thread:" s }'
done
echo "cuda_ptx: $n elementwise kernels, 2 bf16 conversions and 73 row, embedding, attention-add and optimizer kernels with 16-byte loads and stores, none spilling"
