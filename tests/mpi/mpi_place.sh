#!/bin/sh
# Placement under mpirun (no Slurm plugin): every rank computes the place
# the plugin would give it (topo/, this node's hwloc topology, nodes from
# MPI_Comm_split_type) and takes its environment and binding.  Checked with
# tests/mpi/place_probe (merak_init, then one line per rank) on this
# machine and on a DGX H100's topology file (HWLOC_XMLFILE: its GPUs and
# NICs, never bound to, since its cores are not this machine's): distinct
# ranks, GPUs and NICs as the plugin gives them, cores bound when nothing
# else bound the rank, MERAK_GPU and an existing binding kept,
# MERAK_BIND=none, ranks sharing a GPU, a bad MERAK_BIND refused.
. "$(dirname "$0")/../lib.sh"
WRAP=$MERAK_BUILDDIR/tests/mpirun-wrapper.sh
PROBE=$MERAK_BUILDDIR/tests/mpi/place_probe
[ -x "$WRAP" ] || skip "no mpirun wrapper"
[ -x "$PROBE" ] || fail "$PROBE was not built"
DGX=$FIX/topologies/authored-dgx-h100-8xH100-8xCX7.xml
export MERAK_MPI_TIMEOUT=120

# probe NAME NP DP TP PP: the probe's lines, sorted by rank, into $WORK/NAME;
# with the variables in PENV ("NAME=VALUE ...") set for it.
probe() {
    name=$1 np=$2; shift 2
    env $PENV "$WRAP" "$np" "$PROBE" "$@" > "$WORK/$name.raw" 2> "$WORK/$name.err" ||
        { cat "$WORK/$name.err" >&2; fail "$name: mpirun -np $np place_probe $* failed"; }
    grep '^mpi ' "$WORK/$name.raw" | sort -n -k4 > "$WORK/$name"
    [ "$(wc -l < "$WORK/$name")" -eq "$np" ] || { cat "$WORK/$name.raw" >&2; fail "$name: not $np lines"; }
    # each rank of the job once
    [ "$(awk '{ print $4 }' "$WORK/$name" | tr '\n' ' ')" = "$(seq 0 $((np - 1)) | tr '\n' ' ')" ] ||
        { cat "$WORK/$name" >&2; fail "$name: ranks are not 0..$((np - 1)) once each"; }
}
# cores LIST: a core list ("0-2,5" or "0,1,2,5") as "0,1,2,5"
cores() {
    echo "$1" | awk -F, '{ for (i = 1; i <= NF; i++) { n = split($i, a, "-"); hi = n > 1 ? a[2] : a[1]
                               for (c = a[1] + 0; c <= hi + 0; c++) { printf "%s%d", s, c; s = "," } } print "" }'
}
# field NAME RANK KEY: the value after KEY on rank RANK's line
field() { awk -v r="$2" -v k="$3" '$4 == r { for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$WORK/$1"; }

# 1. this machine: a CPU-only node; 2 ranks bound to cores of their own when it has 2.
PENV= probe here 2 0 2 1
pus=$(nproc --all)
allowed=$(cores "$(taskset -pc $$ | sed 's/.*: //')")
if [ "$(nproc)" -ge 2 ]; then
    for r in 0 1; do
        c=$(field here $r cpus) a=$(field here $r affinity)
        [ "$c" != - ] && [ "$c" = "$a" ] || { cat "$WORK/here" >&2; fail "rank $r: MERAK_CPUS $c, affinity $a"; }
    done
    [ "$(field here 0 cpus)" != "$(field here 1 cpus)" ] || { cat "$WORK/here" >&2; fail "both ranks bound to the same cores"; }
    echo "ok: this machine ($pus PUs), tp=2: ranks bound to cores $(field here 0 cpus) and $(field here 1 cpus)"
else
    [ "$(field here 0 cpus)" = - ] || { cat "$WORK/here" >&2; fail "bound with fewer cores than ranks"; }
    echo "ok: this machine has one core: 2 ranks left unbound"
fi
[ "$(field here 0 gpu)" = - ] || { cat "$WORK/here" >&2; fail "a GPU on a machine without one"; }

# 2. a DGX H100 node (8 GPUs on NVSwitch, 8 CX-7): 4 ranks, tp 2 x pp 2, GPUs
# distinct, each the NIC of the vendor's table for its GPU, not bound.
PENV="HWLOC_XMLFILE=$DGX" probe dgx 4 1 2 2
for r in 0 1 2 3; do
    g=$(field dgx $r gpu) n=$(field dgx $r nic)
    want=$(echo "mlx5_0 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_9 mlx5_10 mlx5_11" | cut -d' ' -f$((g + 1)))
    [ "$n" = "$want" ] && [ "$(field dgx $r ucx)" = "$want:1" ] && [ "$(field dgx $r hca)" = "$want" ] ||
        { cat "$WORK/dgx" >&2; fail "DGX rank $r: GPU $g got NIC $n (want $want, ucx $want:1, NCCL_IB_HCA $want)"; }
    [ "$(field dgx $r cpus)" = - ] && [ "$(cores "$(field dgx $r affinity)")" = "$allowed" ] ||
        { cat "$WORK/dgx" >&2; fail "DGX rank $r was bound to another machine's cores"; }
done
[ "$(awk '{ print $6 }' "$WORK/dgx" | sort -u | wc -l)" -eq 4 ] || { cat "$WORK/dgx" >&2; fail "DGX: GPUs not distinct"; }
echo "ok: DGX H100 file, tp 2 x pp 2: GPUs $(awk '{ printf "%s ", $6 }' "$WORK/dgx")with NICs $(awk '{ printf "%s ", $8 }' "$WORK/dgx")(the vendor's pairs), not bound"

# 3. MERAK_GPU given by the user still chooses; ranks sharing the one visible
# GPU get none (each takes its node-local rank modulo the GPUs).
PENV="MERAK_GPU=5 HWLOC_XMLFILE=$DGX" probe user 2 0 2 1
[ "$(field user 0 gpu)" = 5 ] && [ "$(field user 1 gpu)" = 5 ] || { cat "$WORK/user" >&2; fail "MERAK_GPU=5 was replaced"; }
PENV="CUDA_VISIBLE_DEVICES=0 HWLOC_XMLFILE=$DGX" probe shared 2 0 2 1
[ "$(field shared 0 gpu)" = - ] && [ "$(field shared 1 gpu)" = - ] || { cat "$WORK/shared" >&2; fail "2 ranks placed on 1 visible GPU"; }
echo "ok: MERAK_GPU=5 kept; 2 ranks and CUDA_VISIBLE_DEVICES=0: no GPU placed"

# 4. a binding made before (taskset, mpirun --bind-to) is kept; MERAK_BIND=none binds nothing.
first=${allowed%%,*}
taskset -c "$first" "$WRAP" 2 "$PROBE" 0 2 1 > "$WORK/pinned.raw" 2> "$WORK/pinned.err" ||
    { cat "$WORK/pinned.err" >&2; fail "taskset -c $first mpirun place_probe failed"; }
grep '^mpi ' "$WORK/pinned.raw" | sort -n -k4 > "$WORK/pinned"
for r in 0 1; do
    [ "$(field pinned $r cpus)" = - ] && [ "$(field pinned $r affinity)" = "$first" ] ||
        { cat "$WORK/pinned" >&2; fail "rank $r's binding to core $first was replaced"; }
done
PENV="MERAK_BIND=none" probe nobind 2 0 2 1
for r in 0 1; do
    [ "$(field nobind $r cpus)" = - ] && [ "$(cores "$(field nobind $r affinity)")" = "$allowed" ] ||
        { cat "$WORK/nobind" >&2; fail "MERAK_BIND=none: rank $r bound"; }
done
echo "ok: a binding to core $first kept; MERAK_BIND=none binds nothing"

# 5. a bad MERAK_BIND is one clear line: from merak_init, and from
# merak-train as a usage error (exit status 2) before anything starts.
expect_job_fails place_probe "MERAK_BIND=near: expected closest or none" env MERAK_BIND=near "$WRAP" 2 "$PROBE" 0 2 1
echo "ok: $(grep '^place_probe:' "$WORK/err")"
# on one rank only: every rank refuses (none waits in a placement the others skipped)
expect_job_fails place_probe "MERAK_BIND of MPI rank 1 is not closest or none" "$WRAP" 2 sh -c \
    '[ "$OMPI_COMM_WORLD_RANK" != 1 ] || export MERAK_BIND=near; exec "$0" "$@"' "$PROBE" 0 2 1
echo "ok: $(grep '^place_probe:' "$WORK/err")"
make_shard "$WORK/data.bin"
rc=0
env MERAK_BIND=near "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --steps 1 > "$WORK/out" 2> "$WORK/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q '^merak-train: MERAK_BIND=near: expected closest or none' "$WORK/err" ||
    { cat "$WORK/err" >&2; fail "merak-train with MERAK_BIND=near: exit $rc"; }
echo "ok: $(cat "$WORK/err") (exit 2)"

# 6. merak-train says where rank 0 runs.
"$WRAP" 2 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 --seq-len 16 --steps 1 --threads 1 \
    --tp 2 > "$WORK/train.out" 2>&1 || { cat "$WORK/train.out" >&2; fail "merak-train under mpirun failed"; }
grep -q '^placement (rank 0): node 0 of 1, task 0 of 2: gpu -, ' "$WORK/train.out" ||
    { cat "$WORK/train.out" >&2; fail "merak-train: no placement line"; }
echo "ok: $(grep '^placement' "$WORK/train.out")"
# a topology that cannot be read: no placement, said so, and the run goes on in MPI's order
printf 'not xml' > "$WORK/bad.xml"
HWLOC_XMLFILE=$WORK/bad.xml "$WRAP" 2 "$TRAIN" --model tiny-gpt2 --data "$WORK/data.bin" --micro-batch 2 \
    --seq-len 16 --steps 1 --threads 1 --tp 2 > "$WORK/train.out" 2>&1 ||
    { cat "$WORK/train.out" >&2; fail "merak-train with an unreadable topology failed"; }
grep -q '^placement (rank 0): not placed: no topology (HWLOC_XMLFILE=.*bad.xml: not an hwloc XML topology' \
    "$WORK/train.out" || { cat "$WORK/train.out" >&2; fail "merak-train: no line saying it was not placed"; }
echo "ok: $(grep '^placement' "$WORK/train.out")"
echo "mpi_place: ok"
