#!/bin/sh
# modules.sh - the installed environment modules work as a site's users use
# them.  Run by `make installcheck` (so by `make distcheck`, on its
# temporary prefix) with the installation's directories:
#
#   sh tests/modules.sh VERSION BINDIR MANDIR LIBDIR MODULEPATH
#
# Under Debian's Lmod: `module use MODULEPATH; module load merak` makes
# merak-train the installed one (it runs, libmerak found through its rpath
# with no LD_LIBRARY_PATH), `man -w merak-train` the installed page and
# pkg-config the installed merak.pc; `module unload` takes it all back; a
# second version conflicts instead of loading beside it; and the Tcl form
# for Environment Modules (Lmod reads it too) does the same.  Without Lmod
# it says so and passes, except under CI=true, where it fails.
set -eu
[ $# -eq 5 ] || { echo "usage: $0 VERSION BINDIR MANDIR LIBDIR MODULEPATH" >&2; exit 2; }
version=$1 bindir=$2 mandir=$3 libdir=$4 modpath=$5
fail() { echo "modules.sh: FAIL: $*" >&2; exit 1; }
init=/usr/share/lmod/lmod/init/profile   # what /etc/profile.d/lmod.sh holds
if [ ! -f "$init" ]; then
    [ "${CI:-}" != true ] || fail "Lmod is not installed (scripts/install-deps.sh installs it); CI must run this test"
    echo "modules.sh: SKIP: Lmod is not installed ($init)"
    exit 0
fi
for f in "$modpath/merak/$version.lua" "$modpath/merak/$version"; do
    [ -f "$f" ] || fail "not installed: $f"
done
grep -q '^conflict("merak")$' "$modpath/merak/$version.lua" || fail "$version.lua does not conflict with other merak versions"
grep -q '^conflict merak$' "$modpath/merak/$version" || fail "the Tcl modulefile does not conflict with other merak versions"
work=$(mktemp -d "${TMPDIR:-/tmp}/merak-modules.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A user's login environment: Lmod's profile script defines module(),
# MODULEPATH and MANPATH (with its empty entry for the system's pages).
for v in LD_LIBRARY_PATH MODULEPATH MODULEPATH_ROOT LOADEDMODULES _LMFILES_ MANPATH PKG_CONFIG_PATH; do
    unset "$v" 2> /dev/null || true
done
export PATH=/usr/bin:/bin
set +u   # Lmod's scripts read unset variables
. "$init"
command -v module > /dev/null 2>&1 || fail "$init defined no module command"

# loaded DIR NAME: module use DIR; module load NAME; every check of a
# loaded merak; then unloaded and DIR unused.
loaded() {
    module purge > /dev/null 2>&1
    module use "$1"
    module load "$2" 2> "$work/load.err" || { cat "$work/load.err" >&2; fail "module load $2 failed ($1)"; }
    [ "$(command -v merak-train)" = "$bindir/merak-train" ] ||
        fail "after module load $2, merak-train is '$(command -v merak-train || true)', not $bindir/merak-train"
    out=$(merak-train --version 2>&1) || fail "merak-train --version failed: $out"
    [ "$out" = "merak-train $version" ] || fail "merak-train --version says '$out', not 'merak-train $version'"
    page=$(man -w merak-train 2> /dev/null) || fail "man -w merak-train finds no page (MANPATH=$MANPATH)"
    [ "$page" = "$mandir/man1/merak-train.1" ] || [ "$page" = "$mandir/man1/merak-train.1.gz" ] ||
        fail "man -w merak-train gives $page, not the installed $mandir/man1/merak-train.1"
    [ "$(pkg-config --modversion merak 2> /dev/null)" = "$version" ] ||
        fail "pkg-config does not find the installed merak.pc (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
    [ -z "${LD_LIBRARY_PATH:-}" ] || fail "the module sets LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    # man still finds the system's pages (Lmod keeps MANPATH's empty entry)
    if [ -f /usr/share/man/man1/ls.1.gz ]; then
        man -w ls > /dev/null 2>&1 || fail "with merak loaded, man no longer finds the system's pages (MANPATH=$MANPATH)"
    fi
    module list 2>&1 | grep -q "merak/$version" || fail "module list does not show merak/$version"
    module unload merak 2> /dev/null
    case ":$PATH:" in *":$bindir:"*) fail "module unload left $bindir in PATH" ;; esac
    module unuse "$1"
    echo "ok: module use $1; module load $2: merak-train, its man page and merak.pc from the installation; unload takes them back"
}

loaded "$modpath" merak
# The default version is the newest: make a newer one that conflicts.
mkdir -p "$work/other/merak"
sed "s/$version/99.0/g" "$modpath/merak/$version.lua" > "$work/other/merak/99.0.lua"
module purge > /dev/null 2>&1
module use "$modpath"
module use "$work/other"
module load "merak/$version" 2> /dev/null || fail "module load merak/$version failed"
module load merak/99.0 > "$work/both.out" 2>&1 || true
n=$(module -t list 2>&1 | grep -c '^merak/' || true)
[ "$n" -eq 1 ] || { cat "$work/both.out" >&2; fail "two merak versions loaded at once ($n)"; }
echo "ok: a second merak version is never loaded beside the first ($(module -t list 2>&1 | grep '^merak/'))"
module purge > /dev/null 2>&1
module unuse "$work/other"
module unuse "$modpath"

# The Tcl form alone (Environment Modules' format; Lmod converts it).
mkdir -p "$work/tcl/merak"
cp "$modpath/merak/$version" "$work/tcl/merak/$version"
head -n 1 "$work/tcl/merak/$version" | grep -q '^#%Module' || fail "the Tcl modulefile lacks its #%Module header"
loaded "$work/tcl" merak
echo "modules: ok (Lmod $(module --version 2>&1 | sed -n 's/.*Version \([0-9.]*\).*/\1/p' | head -n 1))"
