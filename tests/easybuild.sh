#!/bin/sh
# easybuild.sh - the easyconfig builds the release tarball, as a site's
# EasyBuild would.  Run by scripts/check.sh after make distcheck:
#
#   sh tests/easybuild.sh merak-VERSION.tar.gz
#
# With EasyBuild from PyPI (scripts/install-deps.sh puts it in
# /opt/merak-deps/easybuild, with its own easyconfigs):
#   1. contrib/easybuild/merak-VERSION.eb exists for the tarball's version;
#   2. eb --dry-run --robot resolves its whole dependency graph (the foss
#      toolchain, Open MPI, hwloc, UCX, OpenBLAS, Jansson, PCRE2, utf8proc, ...)
#      against EasyBuild's own easyconfigs;
#   3. a real eb build, on this machine's compilers and Debian's libraries
#      (--try-toolchain=system with the dependencies filtered: building the
#      foss toolchain from source would take hours), runs the easyconfig's
#      configure options, make, make install, its sanity_check_paths
#      (programs, plugin, man pages) and sanity_check_commands, and writes
#      the module, which loads and runs merak-train --version.
# Without EasyBuild it says so and passes, except under CI=true.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 merak-VERSION.tar.gz" >&2; exit 2; }
tarball=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "easybuild.sh: FAIL: $*" >&2; exit 1; }
[ -f "$tarball" ] || fail "no tarball $tarball"
version=$(basename "$tarball" .tar.gz)
version=${version#merak-}
eb_dir=/opt/merak-deps/easybuild
if [ ! -x "$eb_dir/bin/eb" ]; then
    [ "${CI:-}" != true ] || fail "EasyBuild is not installed in $eb_dir (scripts/install-deps.sh installs it); CI must run this test"
    echo "easybuild.sh: SKIP: EasyBuild is not installed in $eb_dir (scripts/install-deps.sh)"
    exit 0
fi
lmod=/usr/share/lmod/lmod/libexec/lmod
[ -x "$lmod" ] || fail "EasyBuild needs Lmod ($lmod; scripts/install-deps.sh installs it)"
ec=$src/contrib/easybuild/merak-$version.eb
[ -f "$ec" ] || fail "no easyconfig for the release: $ec"
grep -q "^version = '$version'$" "$ec" || fail "$ec does not say version = '$version'"

work=$(mktemp -d "${TMPDIR:-/tmp}/merak-easybuild.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sources/m/merak"
cp "$tarball" "$work/sources/m/merak/"
export PATH="$eb_dir/bin:$PATH" LMOD_CMD=$lmod
# EasyBuild's own settings, none of the machine's or the user's.
for v in $(env | sed -n 's/^\(EASYBUILD_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export EASYBUILD_PREFIX=$work/eb EASYBUILD_SOURCEPATH=$work/sources EASYBUILD_TMPDIR=$work/tmp
export EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES=1
eb --version

# 2. the dependency graph, with the easyconfig as written
eb "$ec" --dry-run --robot > "$work/dry.log" 2>&1 || { tail -20 "$work/dry.log" >&2; fail "eb --dry-run --robot failed"; }
deps=$(grep -c '^ \* \[.\] ' "$work/dry.log" || true)
grep -q "^ \* \[.\] .*merak-$version.eb (module: merak/$version-foss-" "$work/dry.log" ||
    { tail -20 "$work/dry.log" >&2; fail "eb --dry-run does not plan merak/$version"; }
for d in OpenMPI hwloc UCX OpenBLAS Jansson PCRE2 utf8proc zlib; do
    grep -q "(module: $d/" "$work/dry.log" || fail "eb --dry-run plans no $d"
done
echo "ok: eb --dry-run --robot: merak/$version and $((deps - 1)) easyconfigs it needs, all found"

# 3. a real build of the tarball
eb "$ec" --try-toolchain=system,system --disable-map-toolchains \
    --filter-deps=hwloc,UCX,OpenBLAS,Jansson,PCRE2,utf8proc,zlib,pkgconf > "$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log" >&2; fail "eb could not build and install merak $version"; }
grep -q '\[SUCCESS\] merak/' "$work/build.log" || { tail -20 "$work/build.log" >&2; fail "eb did not report success"; }
grep -q 'sanity check' "$work/build.log" || fail "eb ran no sanity check"
root=$work/eb/software/merak/$version
[ -x "$root/bin/merak-train" ] && [ -f "$root/lib/slurm/spank_merak.so" ] && [ -f "$root/share/man/man1/merak-train.1" ] ||
    fail "eb's installation lacks the programs, the plugin or the man pages"
# EasyBuild's module, loaded as a user would
out=$(sh -c '
    set +u; unset MODULEPATH_ROOT MANPATH; . /usr/share/lmod/lmod/init/profile
    module use "$1/modules/all" && module load merak && command -v merak-train && merak-train --version
' sh "$work/eb") || fail "module load merak (EasyBuild's module) failed: $out"
echo "$out" | grep -q "^$root/bin/merak-train$" || fail "EasyBuild's module gives merak-train from elsewhere: $out"
echo "$out" | grep -q "^merak-train $version$" || fail "merak-train --version under EasyBuild's module: $out"
echo "ok: eb built and installed merak $version from the tarball, sanity checks passed, its module loads"
echo "easybuild: ok"
