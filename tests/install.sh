#!/bin/sh
# install.sh - `make install DESTDIR=...` puts libraries, tools, headers, the
# pkg-config file, the SPANK plugin (when built) and its plugstack drop-in,
# every man page, the modulefiles and the job scripts in place, with this
# installation's paths filled in; a program built against the installed
# files with pkg-config runs; `make uninstall` takes every file away.
. "$(dirname "$0")/lib.sh"
command -v make > /dev/null 2>&1 || skip "make is not installed"
D=$WORK/root
make -s -C "$MERAK_BUILDDIR" install DESTDIR="$D" > "$WORK/install.log" 2>&1 ||
    { tail -20 "$WORK/install.log" >&2; fail "make install DESTDIR=$D failed"; }
prefix=$(sed -n 's/^prefix=//p' "$MERAK_BUILDDIR/merak.pc")
libdir=$(sed -n 's/^libdir=//p' "$MERAK_BUILDDIR/merak.pc" | sed "s|\${exec_prefix}|$prefix|; s|\${prefix}|$prefix|")
for f in "$prefix/bin/merak-train" "$prefix/bin/merak-shard" "$prefix/bin/merak-topo" "$prefix/bin/merak-plan" "$prefix/bin/merak-trace" \
         "$libdir/libmerak.so" "$libdir/libmerak-topo.so" "$libdir/pkgconfig/merak.pc" \
         "$prefix/include/merak/merak.h" "$prefix/include/merak/topo.h" \
         "$prefix/share/man/man7/merak.7" "$prefix/share/man/man1/merak-train.1" \
         "$prefix/share/man/man1/merak-shard.1" "$prefix/share/man/man1/merak-topo.1" "$prefix/share/man/man1/merak-plan.1" "$prefix/share/man/man1/merak-trace.1" \
         "$prefix/share/man/man8/spank-merak.8" "$prefix/share/merak/devices.json" \
         "$prefix/share/merak/examples/train-1node.sbatch" "$prefix/share/merak/examples/train-3d.sbatch" \
         "$prefix/share/merak/examples/preemptible.sbatch" "$prefix/share/merak/examples/plan-first.sbatch"; do
    [ -e "$D$f" ] || fail "not installed: $f"
done
for f in "$D$prefix"/share/merak/examples/*.sbatch; do
    [ -x "$f" ] || fail "$f is not executable"
    bash -n "$f" || fail "$f: bash finds a syntax error"
done
version=$(sed -n 's/^Version: //p' "$MERAK_BUILDDIR/merak.pc")
mods=$D$prefix/share/modulefiles/merak
[ -f "$mods/$version.lua" ] && [ -f "$mods/$version" ] || fail "no modulefiles $mods/$version.lua and $mods/$version"
grep -q "^prepend_path(\"PATH\", \"$prefix/bin\")$" "$mods/$version.lua" || fail "$version.lua does not put $prefix/bin on PATH"
grep -q "^prepend-path PATH $prefix/bin$" "$mods/$version" || fail "the Tcl modulefile does not put $prefix/bin on PATH"
grep -n '@[a-zA-Z_]*@' "$mods/$version.lua" "$mods/$version" && fail "a placeholder is left in the modulefiles"
if command -v luac > /dev/null 2>&1; then
    luac -p "$mods/$version.lua" || fail "$version.lua is not valid Lua"
fi
plugindir=$(sed -n 's/^SPANK_PLUGINDIR = //p' "$MERAK_BUILDDIR/Makefile")
if [ -f "$MERAK_BUILDDIR/.libs/spank_merak.so" ]; then
    plugindir=$(echo "$plugindir" | sed "s|\${libdir}|$libdir|; s|\${exec_prefix}|$prefix|; s|\${prefix}|$prefix|")
    [ -f "$D$plugindir/spank_merak.so" ] || fail "plugin not installed in $plugindir"
    [ ! -e "$D$plugindir/spank_merak.la" ] || fail "libtool's spank_merak.la left in Slurm's plugin directory"
    dropin=$D$prefix/share/merak/plugstack.conf.d/merak.conf
    [ -f "$dropin" ] || fail "no plugstack drop-in $dropin"
    [ "$(grep -v '^#' "$dropin" | grep -v '^ *$')" = "required $plugindir/spank_merak.so" ] ||
        fail "the drop-in's only line is not 'required $plugindir/spank_merak.so': $(grep -v '^#' "$dropin")"
    echo "plugin: $plugindir/spank_merak.so, enabled by $prefix/share/merak/plugstack.conf.d/merak.conf"
fi
# A program built against the installed tree.
cat > "$WORK/use.c" <<'CEOF'
#include <merak/merak.h>
#include <stdio.h>
int main(void) { merak_args a; merak_args_default(&a); printf("steps %d\n", a.steps); return 0; }
CEOF
PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_PATH=$D$libdir/pkgconfig pkg-config --cflags --libs merak > "$WORK/flags" ||
    fail "pkg-config cannot read the installed merak.pc"
# The build's own compiler flags (a sanitizer build's library needs its runtime).
CC=$(sed -n 's/^CC = //p' "$MERAK_BUILDDIR/Makefile")
CFLAGS=$(sed -n 's/^CFLAGS = //p' "$MERAK_BUILDDIR/Makefile")
LDFLAGS=$(sed -n 's/^LDFLAGS = //p' "$MERAK_BUILDDIR/Makefile")
${CC:-cc} $CFLAGS -o "$WORK/use" "$WORK/use.c" $(cat "$WORK/flags") $LDFLAGS -Wl,-rpath,"$D$libdir" 2> "$WORK/cc.log" ||
    { cat "$WORK/cc.log" >&2; fail "cannot build against the installed headers and library"; }
LD_LIBRARY_PATH=$D$libdir "$WORK/use" | grep -q '^steps ' || fail "the program built against the install does not run"
echo "install: $(find "$D" -type f | wc -l) files under DESTDIR, pkg-config build ok"
make -s -C "$MERAK_BUILDDIR" uninstall DESTDIR="$D" > "$WORK/uninstall.log" 2>&1 ||
    { tail -20 "$WORK/uninstall.log" >&2; fail "make uninstall DESTDIR=$D failed"; }
left=$(find "$D" -type f | sed "s|^$D||")
[ -z "$left" ] || fail "make uninstall left files behind: $left"
echo "uninstall: no file left"
