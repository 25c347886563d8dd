#!/bin/sh
# install-deps.sh - installs every build and test dependency of Merak from
# Debian 12's packages.  Run as root on a fresh machine; safe to run again.
set -eu
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps.sh: run as root (apt-get needs it)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
pkgs="build-essential autoconf automake libtool pkg-config make git
      libopenmpi-dev openmpi-bin libucx-dev ucx-utils libhwloc-dev hwloc
      libopenblas-dev libjansson-dev zlib1g-dev libpcre2-dev libutf8proc-dev
      python3 python3-torch python3-numpy python3-pip python3-venv valgrind mandoc groff-base bsdextrautils clang libclang-rt-14-dev
      slurmctld slurmd slurm-client libslurm-dev munge libpmix-dev lmod
      iproute2 util-linux procps"
missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "install-deps.sh: installing$missing"
    apt-get update -qq
    # Slurm's and munge's packages would start system daemons; the tests run
    # their own throw-away cluster, so keep Debian from starting services
    # during this install (unless the machine already has a policy).
    policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        policy=/usr/sbin/policy-rc.d
    fi
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing || { rm -f $policy; exit 1; }
    rm -f $policy
fi
# Hugging Face's tokenizers (not packaged by Debian), for the tokenizer
# comparison test: from PyPI into Debian's python3, without its optional
# dependencies (tokenizer.json files need none).
if ! /usr/bin/python3 -c 'import tokenizers' 2>/dev/null; then
    echo "install-deps.sh: installing tokenizers from PyPI"
    /usr/bin/python3 -m pip install -q --break-system-packages --no-deps 'tokenizers==0.20.3'
fi
# EasyBuild (not packaged by Debian), pinned, for the easyconfig's test
# (tests/easybuild.sh): from PyPI into its own virtual environment, with
# EasyBuild's easyconfigs (the dependencies' recipes).
eb_version=5.4.1
eb_dir=/opt/merak-deps/easybuild-$eb_version
if [ ! -x "$eb_dir/bin/eb" ]; then
    echo "install-deps.sh: installing EasyBuild $eb_version from PyPI into $eb_dir"
    rm -rf "$eb_dir"
    mkdir -p /opt/merak-deps
    { /usr/bin/python3 -m venv "$eb_dir" &&
      "$eb_dir/bin/pip" install -q "easybuild-framework==$eb_version" "easybuild-easyblocks==$eb_version" \
          "easybuild-easyconfigs==$eb_version"; } || { rm -rf "$eb_dir"; exit 1; }
fi
ln -sfn "easybuild-$eb_version" /opt/merak-deps/easybuild
# NVIDIA's cudnn-frontend (header-only C++17 over cuDNN; not packaged by
# Debian), pinned, for cuDNN's fused attention (kernels/cuda/cudnn_attn.cpp,
# built when configure also finds CUDA and cuDNN 9): the include directory of
# its PyPI wheel, unpacked into $cfe_dir, where configure's
# --with-cudnn-frontend looks by default (/opt/merak-deps/cudnn-frontend/include).
cfe_version=1.14.0
cfe_dir=/opt/merak-deps/cudnn-frontend-$cfe_version
if [ ! -f "$cfe_dir/include/cudnn_frontend.h" ]; then
    echo "install-deps.sh: installing the cudnn-frontend $cfe_version headers from PyPI into $cfe_dir"
    tmp=$(mktemp -d)
    rm -rf "$cfe_dir"
    mkdir -p "$cfe_dir"
    { /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$cfe_version" &&
      /usr/bin/python3 "$(dirname "$0")/wheel-headers.py" "$tmp"/nvidia_cudnn_frontend-*.whl "$cfe_dir"; } ||
        { rm -rf "$tmp" "$cfe_dir"; exit 1; }
    rm -rf "$tmp"
fi
ln -sfn "cudnn-frontend-$cfe_version" /opt/merak-deps/cudnn-frontend
echo "install-deps.sh: all dependencies present"
