#!/bin/bash
# try.sh BUILDDIR [--keep] - try the Slurm flags on a throw-away cluster.
#
# As root: starts 2 Slurm "nodes" (8 fake GPUs, 16 CPUs each) on this machine
# with BUILDDIR's spank_merak.so (state in a temporary directory, nothing in
# /etc), shows the placement of a dp=2 tp=2 pp=2 step, trains the demo model
# with it under srun --mpi=pmix, and stops the cluster again.  With --keep
# the cluster stays up and the script prints how to use and stop it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: try.sh BUILDDIR [--keep]}" && pwd)
keep=${2:-}
plugin=$build/.libs/spank_merak.so
[ "$(id -u)" = 0 ] || { echo "try.sh: run as root (the cluster's daemons and namespaces need it)" >&2; exit 1; }
[ -f "$plugin" ] || { echo "try.sh: $plugin not built (is libslurm-dev installed? re-run configure)" >&2; exit 1; }
export SBX_DIR=${SBX_DIR:-$(mktemp -d /tmp/merak-slurm.XXXXXX)}
chmod 755 "$SBX_DIR"
mkdir -p "$SBX_DIR/plugins"
cp "$plugin" "$SBX_DIR/plugins/spank_merak.so"
export SBX_PLUGSTACK="required $SBX_DIR/plugins/spank_merak.so"
# GCC 12's libasan deadlocks in slurmstepd's forks (tests/slurm_plugin.sh says how).
grep -q __asan_init "$plugin" &&
    { echo "try.sh: $plugin is built with AddressSanitizer, which slurmstepd cannot run reliably; give a build without sanitizers" >&2; exit 1; }
[ "$keep" = --keep ] || trap 'bash "$here/stop.sh" --purge > /dev/null' EXIT
bash "$here/start.sh"
sbx() { "$SBX_DIR/bin/sbx" "$@"; }
src=$(cd "$here/../.." && pwd)
find "$src/runtime" -name '*.c' | sort | xargs cat > "$SBX_DIR/corpus.txt"
"$build/merak-shard" -o "$SBX_DIR/data.bin" "$SBX_DIR/corpus.txt" > /dev/null
set -x
sbx srun -N2 --ntasks-per-node=4 --merak-tp=2 --merak-pp=2 --merak-verbose true
OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp sbx srun --mpi=pmix -N2 --ntasks-per-node=4 --merak-tp=2 --merak-pp=2 --merak-microbatches=4 \
    "$build/merak-train" --model demo-gpt2 --data "$SBX_DIR/data.bin" --micro-batch 4 --seq-len 64 \
    --steps 10 --threads 1
set +x
if [ "$keep" = --keep ]; then
    echo "cluster kept: run commands with  $SBX_DIR/bin/sbx srun ...  and stop it with"
    echo "  SBX_DIR=$SBX_DIR bash $here/stop.sh --purge"
fi
