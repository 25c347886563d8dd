#!/bin/sh
# gpu-env.sh - builds Merak on a GPU machine that has CUDA (nvcc, cuBLASLt,
# NCCL) but none of Debian's MPI, hwloc, UCX, OpenBLAS, jansson, PCRE2 or
# utf8proc, and no network.  Two steps, one per machine:
#
#   scripts/gpu-env.sh fetch [DIR]   on the development machine (Debian 12):
#       downloads the Debian packages the build and the runtime need into
#       DIR/debs, the pinned cudnn-frontend headers into
#       DIR/cudnn-frontend/include (from its PyPI wheel, or from
#       /opt/merak-deps where install-deps.sh put them) and makes a source
#       tarball (make dist) in DIR.  DIR defaults to .gpu, which git
#       ignores; carry it to the GPU machine.
#   scripts/gpu-env.sh build [DIR]   on the GPU machine: unpacks the packages
#       into a prefix (never into /), configures the tarball against them and
#       CUDA (--with-cuda --enable-werror) and builds, in $MERAK_GPU_ROOT
#       (default /tmp/merak-gpu).  Prints what it found.
#       Then `. $MERAK_GPU_ROOT/env.sh` sets PATH, LD_LIBRARY_PATH,
#       and OPAL_PREFIX for the build's programs.
#   scripts/gpu-env.sh test OUT      after build: the GPU tests (make check of
#       tests/gpu), compute-sanitizer's memcheck over the kernel tests and a
#       generation, the GPU's name; every log into OUT.
#   scripts/gpu-env.sh bench OUT [NAME...]   after build: the benchmarks
#       NAME (cuda_ops, gpu_train, schedules; default all three), each into
#       OUT/NAME.txt; schedules is bench_schedules.sh on 4 ranks of the
#       machine's CPUs, with the shared-memory transport's settings first.
#   scripts/gpu-env.sh all DIR OUT [STAGE...]   a lent GPU's run: the
#       GPU's name, the build (reused when the same tarball was built
#       already on this machine), then each STAGE in order, each with its
#       elapsed seconds: test; gpt2 (gpu_train for GPT-2 124M, every mode);
#       calibrate (merak-plan --calibrate in bf16 for GPT-2 124M: each op
#       kind's time and share of the peaks, the launches line); cuda_ops;
#       v50304 (GPT-2 124M with its vocabulary padded to 50304, merak bf16
#       and torch bf16 + compile: what aligned rows of logits are worth);
#       gpt2-medium (350M, merak tf32 and bf16 against torch bf16 +
#       compile); llama (a LLaMA-style 1.1B at T=2048, merak bf16 against
#       torch bf16 + compile).  The default, every stage but llama, takes
#       about 8 minutes on an H200; llama (about 4) goes in a second call.
#       OUT/NAME/ and OUT/*.txt hold every log, and what stops early leaves
#       what came before (the device tool's $OUT as OUT brings it back).
#
# The packages are unpacked with dpkg -x into $MERAK_GPU_ROOT/prefix and
# found through pkgconf's sysroot; Open MPI is relocated there with
# OPAL_PREFIX.  Libraries the GPU machine already has (C and C++ runtimes,
# OpenMP, udev) are not brought, so nothing older shadows them.  NCCL is
# taken from the CUDA toolkit or, failing that, from the nvidia-nccl wheel
# of the machine's python3; cuDNN (for the fused attention) from python3's
# nvidia-cudnn wheel or, failing that, the CUDA toolkit, and without either
# the build goes without the cuDNN attention.
set -eu

cmd=${1:-}
dir=${2:-.gpu}
root=${MERAK_GPU_ROOT:-/tmp/merak-gpu}
multiarch=x86_64-linux-gnu

# What the build needs (headers, pkg-config files) and what its programs load
# (Open MPI's components included).
DEV_PKGS="libopenmpi-dev libhwloc-dev libucx-dev libopenblas-pthread-dev
          libjansson-dev zlib1g-dev libpcre2-dev libpcre2-8-0
          libutf8proc-dev libutf8proc2 pkgconf-bin libpkgconf3"
RUN_PKGS="libopenmpi3 openmpi-common openmpi-bin libpmix2 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libevent-2.1-7 libhwloc15 libucx0 libnuma1
          libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libfabric1
          libpsm2-2 libpsm-infinipath1 libopenblas0-pthread libgfortran5
          libquadmath0 libjansson4 libmunge2 libltdl7"

die() { echo "gpu-env.sh: $*" >&2; exit 1; }

# The environment of the build's programs, as shell lines.
env_lines() {
    p=$root/prefix
    echo "export OPAL_PREFIX=$p/usr"
    echo "export PATH=$root/build:$p/usr/bin:\$PATH"
    echo "export LD_LIBRARY_PATH=$p/usr/lib/$multiarch:$p/usr/lib/$multiarch/openblas-pthread:$p/usr/lib/$multiarch/openmpi/lib${nccl_lib:+:$nccl_lib}${cudnn_lib:+:$cudnn_lib}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
}

case $cmd in
fetch)
    command -v apt-get >/dev/null || die "fetch runs on the Debian development machine"
    mkdir -p "$dir/debs"
    dir=$(cd "$dir" && pwd)
    # shellcheck disable=SC2086
    (cd "$dir/debs" && for p in $DEV_PKGS $RUN_PKGS; do
        ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p" >/dev/null 2>&1 || exit 1
     done) || die "apt-get download failed (is the Debian archive reachable?)"
    # cudnn-frontend's headers (header-only C++; the GPU machine has no
    # network): install-deps.sh's copy, else the pinned wheel from PyPI.
    cfe_version=$(sed -n 's/^cfe_version=//p' "$(dirname "$0")/install-deps.sh")
    if [ ! -f "$dir/cudnn-frontend/include/cudnn_frontend.h" ]; then
        rm -rf "$dir/cudnn-frontend"
        if [ -f "/opt/merak-deps/cudnn-frontend-$cfe_version/include/cudnn_frontend.h" ]; then
            mkdir -p "$dir/cudnn-frontend"
            cp -R "/opt/merak-deps/cudnn-frontend-$cfe_version/include" "$dir/cudnn-frontend/"
        else
            t=$(mktemp -d)
            { python3 -m pip download -q --no-deps --only-binary=:all: -d "$t" "nvidia-cudnn-frontend==$cfe_version" &&
              python3 "$(dirname "$0")/wheel-headers.py" "$t"/nvidia_cudnn_frontend-*.whl "$dir/cudnn-frontend" >/dev/null; } ||
                { rm -rf "$t" "$dir/cudnn-frontend"; die "could not bring the cudnn-frontend $cfe_version headers (PyPI)"; }
            rm -rf "$t"
        fi
    fi
    # The source: a distribution tarball of the working tree (configure
    # included, so the GPU machine needs no autotools).
    src=$(cd "$(dirname "$0")/.." && pwd)
    b=${TMPDIR:-/tmp}/merak-dist-build
    if [ ! -f "$b/Makefile" ]; then
        (cd "$src" && [ -x configure ] || autoreconf -fi >/dev/null)
        mkdir -p "$b"
        (cd "$b" && "$src/configure" --without-cuda --without-slurm >/dev/null) || die "configure for make dist failed"
    fi
    rm -f "$dir"/merak-*.tar.gz
    make -s -C "$b" dist >/dev/null || die "make dist failed"
    mv "$b"/merak-*.tar.gz "$dir/"
    rm -rf "$b"/merak-*/
    echo "gpu-env.sh: $dir holds $(ls "$dir/debs" | wc -l) packages and $(basename "$dir"/merak-*.tar.gz) ($(du -sh "$dir" | cut -f1) to carry)"
    ;;
build)
    [ -d "$dir/debs" ] || die "$dir/debs is missing: run 'scripts/gpu-env.sh fetch' on the development machine and carry $dir"
    dir=$(cd "$dir" && pwd)
    cuda=${CUDA_HOME:-/usr/local/cuda}
    nccl_inc= nccl_lib=
    if [ -f "$cuda/include/nccl.h" ]; then
        :
    else
        w=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) || true
        [ -n "$w" ] && [ -f "$w/include/nccl.h" ] || die "no nccl.h under $cuda/include or in python3's nvidia-nccl wheel"
        nccl_inc=$w/include
        nccl_lib=$root/nccl
    fi
    # cuDNN: python3's nvidia-cudnn wheel (include/ and lib/), else the
    # toolkit's; the build goes without the cuDNN attention when neither or
    # no frontend headers are there (configure says which).
    cudnn_home= cudnn_lib=
    w2=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null) || true
    if [ -n "$w2" ] && [ -f "$w2/include/cudnn.h" ] && [ -f "$w2/lib/libcudnn.so.9" ]; then
        cudnn_home=$w2
        cudnn_lib=$w2/lib
    elif [ -f "$cuda/include/cudnn.h" ]; then
        cudnn_home=$cuda
    fi
    cfe_inc=$dir/cudnn-frontend/include
    cudnn_flags=
    if [ -n "$cudnn_home" ] && [ -f "$cfe_inc/cudnn_frontend.h" ]; then
        cudnn_flags="--with-cudnn=$cudnn_home --with-cudnn-frontend=$cfe_inc"
    fi
    command -v "$cuda/bin/nvcc" >/dev/null || command -v nvcc >/dev/null || die "no nvcc under $cuda/bin or on PATH"
    tarball=$(ls "$dir"/merak-*.tar.gz 2>/dev/null | head -1)
    [ -n "$tarball" ] || die "no merak-*.tar.gz in $dir: run 'scripts/gpu-env.sh fetch'"
    rm -rf "$root"
    mkdir -p "$root/prefix" "$root/build"
    for d in "$dir"/debs/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$d" "$root/prefix"
        else
            m=$(ar t "$d" | grep '^data.tar') || die "$d: no data.tar member"
            case $m in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
            ar p "$d" "$m" | tar -x $z -C "$root/prefix"
        fi || die "could not unpack $d"
    done
    # mpirun and mpicc are Debian alternatives, which dpkg -x does not make.
    for l in mpirun mpiexec; do ln -sf orterun "$root/prefix/usr/bin/$l"; done
    ln -sf opal_wrapper "$root/prefix/usr/bin/mpicc"
    if [ -n "$nccl_lib" ]; then
        # The wheel has libnccl.so.2 only; the link step wants libnccl.so.
        mkdir -p "$nccl_lib"
        ln -sf "$(ls "$w"/lib/libnccl.so* | head -1)" "$nccl_lib/libnccl.so"
        ln -sf "$(ls "$w"/lib/libnccl.so* | head -1)" "$nccl_lib/libnccl.so.2"
    fi
    mkdir -p "$root/src"
    tar -xzf "$tarball" -C "$root/src" --strip-components=1
    p=$root/prefix
    export PKG_CONFIG="$p/usr/bin/pkgconf"
    export PKG_CONFIG_LIBDIR="$p/usr/lib/$multiarch/pkgconfig:$p/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$p"
    eval "$(env_lines)"
    cd "$root/build"
    # shellcheck disable=SC2086
    "$root/src/configure" --with-cuda="$cuda" --enable-werror --without-slurm $cudnn_flags \
        BLAS_CFLAGS="-I$p/usr/include/$multiarch/openblas-pthread" \
        BLAS_LIBS="-L$p/usr/lib/$multiarch/openblas-pthread -lopenblas" \
        CPPFLAGS="${nccl_inc:+-I$nccl_inc}" LDFLAGS="${nccl_lib:+-L$nccl_lib -Wl,-rpath,$nccl_lib}" \
        >"$root/configure.log" 2>&1 || { tail -30 "$root/configure.log"; die "configure failed (log: $root/configure.log)"; }
    grep -q "^#define HAVE_CUDA 1" config.h || { tail -30 config.log; die "configure did not find CUDA"; }
    make -j"$(nproc)" >"$root/make.log" 2>&1 || { tail -40 "$root/make.log"; die "make failed (log: $root/make.log)"; }
    make -j"$(nproc)" check TESTS= >>"$root/make.log" 2>&1 || { tail -40 "$root/make.log"; die "building the tests failed (log: $root/make.log)"; }
    env_lines >"$root/env.sh"
    sed -n '/Merak .* configured/,/^ *prefix *:/p' "$root/configure.log"
    echo "gpu-env.sh: built in $root/build; '. $root/env.sh' sets up a shell for its programs"
    ;;
test)
    out=${2:?usage: scripts/gpu-env.sh test OUT}
    [ -f "$root/env.sh" ] || die "no build in $root: run 'scripts/gpu-env.sh build' first"
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    . "$root/env.sh"
    cd "$root/build"
    nvidia-smi -L > "$out/gpu.txt" 2>&1 || true
    rc=0
    cudnn_tests=
    grep -q "^#define HAVE_CUDNN_ATTN 1" config.h && cudnn_tests="tests/gpu/test_cudnn_attn tests/unit/test_cudnn_attn_cpu"
    make check TESTS="$cudnn_tests tests/gpu/test_cuda_kernels tests/gpu/test_nccl tests/gpu/train_cuda.sh tests/gpu/mpi_cuda.sh tests/gpu/generate_cuda.sh" \
        > "$out/check.txt" 2>&1 || rc=1
    cp tests/gpu/*.log "$out/" 2>/dev/null || true
    cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
    if [ -x "$cs" ]; then
        "$cs" --tool memcheck --error-exitcode 3 ./tests/gpu/test_cuda_kernels \
            > "$out/memcheck-kernels.txt" 2>&1 || rc=1
        head -c 20000 "$root/src/README.md" > "$out/text.txt"
        ./merak-shard -o "$out/data.bin" "$out/text.txt" > /dev/null &&
            ./merak-train --model tiny-llama --data "$out/data.bin" --steps 1 --micro-batch 2 --seq-len 32 \
                --save-weights "$out/w.safetensors" > /dev/null 2>&1 &&
            "$cs" --tool memcheck --error-exitcode 3 ./merak-generate --device cuda --model tiny-llama \
                --weights "$out/w.safetensors" --ids --prompt "1 2 3" --max-tokens 8 > "$out/memcheck-generate.txt" 2>&1 ||
            rc=1
        rm -f "$out/text.txt" "$out/data.bin" "$out/w.safetensors"
    else
        echo "no compute-sanitizer (PATH, \$CUDA_HOME/bin)" > "$out/memcheck-kernels.txt"
    fi
    grep -E '^(PASS|FAIL|SKIP|ERROR|# )' "$out/check.txt" | tail -12
    grep -h 'ERROR SUMMARY' "$out"/memcheck-*.txt 2>/dev/null || true
    exit $rc
    ;;
bench)
    out=${2:?usage: scripts/gpu-env.sh bench OUT [cuda_ops gpu_train schedules]}
    shift 2
    [ -f "$root/env.sh" ] || die "no build in $root: run 'scripts/gpu-env.sh build' first"
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    . "$root/env.sh"
    cd "$root/build"
    for b in ${*:-cuda_ops gpu_train schedules}; do
        case $b in
        cuda_ops|gpu_train) sh "$root/src/bench/bench_$b.sh" . > "$out/$b.txt" 2>&1 || echo "bench_$b failed" >> "$out/$b.txt" ;;
        schedules)
            { ompi_info --param btl vader --level 9 | grep -E 'single_copy_mechanism"|btl_vader_eager_limit"' || true
              OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OPENBLAS_NUM_THREADS=1 sh "$root/src/bench/bench_schedules.sh" . 4
            } > "$out/$b.txt" 2>&1 || echo "bench_schedules failed" >> "$out/$b.txt" ;;
        *) die "no benchmark '$b' (cuda_ops, gpu_train, schedules)" ;;
        esac
        tail -20 "$out/$b.txt"
    done
    ;;
all)
    [ $# -ge 3 ] || { echo "usage: scripts/gpu-env.sh all DIR OUT [STAGE...]" >&2; exit 2; }
    out=$3
    shift 3
    stages=${*:-test gpt2 calibrate cuda_ops v50304 gpt2-medium}
    for s in $stages; do
        case $s in test|gpt2|calibrate|cuda_ops|v50304|gpt2-medium|llama) ;;
        *) die "no stage '$s' (test, gpt2, calibrate, cuda_ops, v50304, gpt2-medium, llama)" ;; esac
    done
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    self=$(cd "$(dirname "$0")" && pwd)/gpu-env.sh
    t0=$(date +%s)
    stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
      python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } > "$out/gpu.txt" 2>&1
    cat "$out/gpu.txt"
    # a second call on the same (still lent) machine reuses the build of
    # the same tarball
    tarball=$(ls "$dir"/merak-*.tar.gz 2>/dev/null | head -1)
    if [ -n "$tarball" ] && [ -f "$root/env.sh" ] && [ -f "$root/tarball.sum" ] &&
        [ "$(cksum < "$tarball")" = "$(cat "$root/tarball.sum")" ]; then
        stamp "build: reusing $root"
    else
        stamp build
        if ! sh "$self" build "$dir" > "$out/build.txt" 2>&1; then
            tail -30 "$out/build.txt"
            cp "$root/make.log" "$root/configure.log" "$out/" 2>/dev/null
            exit 1
        fi
        cksum < "$tarball" > "$root/tarball.sum"
    fi
    # most telling first: whatever a time limit cuts off comes last
    for s in $stages; do
        stamp "$s"
        case $s in
        test)
            sh "$self" test "$out/test" > "$out/test.txt" 2>&1 || echo "some GPU tests failed"
            tail -16 "$out/test.txt"
            grep -h "^not ok" "$out"/test/*.log 2>/dev/null | head -20
            # a bf16 product out of tolerance: cuBLASLt's own account of the
            # algorithms it chose (heuristics trace), for the next fix
            if grep -q "^not ok.*linear16" "$out"/test/*.log 2>/dev/null; then
                ( . "$root/env.sh" && cd "$root/build" &&
                  CUBLASLT_LOG_LEVEL=4 CUBLASLT_LOG_FILE="$out/cublaslt.log" ./tests/gpu/test_cuda_kernels > /dev/null 2>&1
                  gzip -f "$out/cublaslt.log" ) || true
            fi ;;
        gpt2)
            MODELS=gpt2 sh "$self" bench "$out/t124" gpu_train > /dev/null 2>&1
            cut -c1-200 "$out/t124/gpu_train.txt" ;;
        calibrate)
            # the bf16 roofline of GPT-2 124M's step: each op kind's time,
            # work and share of the peaks, and the launches line
            ( . "$root/env.sh" && cd "$root/build" &&
              timeout 120 ./merak-plan --calibrate "$out/calib.json" --dtype bf16 \
                  --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 > "$out/calib16.txt" 2>&1
              echo "calibrate bf16: exit $?"; tail -26 "$out/calib16.txt"
              ./merak-plan --gpus 1 --model gpt2 --micro-batch 8 --seq-len 1024 --dtype bf16 --gpu "$out/calib.json" |
                  grep "^step\|^op times\|^memory" ) ;;
        cuda_ops)
            sh "$self" bench "$out/ops" cuda_ops > /dev/null 2>&1
            grep -E "attention|roofline: copy|below 0.6|failed|gemm_probe|gelu|crossentropy16" "$out/ops/cuda_ops.txt" |
                cut -c1-220 | head -60 ;;
        v50304)
            MODELS=gpt2-v50304 MERAK_DTYPES="bf16" MODES="bf16-compile" sh "$self" bench "$out/v50304" gpu_train > /dev/null 2>&1
            cut -c1-200 "$out/v50304/gpu_train.txt" ;;
        gpt2-medium)
            MODELS=gpt2-medium MERAK_DTYPES="tf32 bf16" MODES="bf16-compile" sh "$self" bench "$out/t350" gpu_train > /dev/null 2>&1
            cut -c1-200 "$out/t350/gpu_train.txt" ;;
        llama)
            MODELS=llama-1b T=2048 B=2 STEPS=10 WARMUP=3 MERAK_DTYPES="bf16" MODES="bf16-compile" \
                timeout 300 sh "$self" bench "$out/l1b" gpu_train > /dev/null 2>&1 || echo "llama-1b: ended early (exit $?)"
            cut -c1-200 "$out/l1b/gpu_train.txt" ;;
        esac
    done
    stamp finished
    ;;
*)
    echo "usage: scripts/gpu-env.sh fetch|build [DIR] | test OUT | bench OUT [NAME...] | all DIR OUT [STAGE...]" >&2
    exit 2
    ;;
esac
