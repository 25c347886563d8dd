#!/bin/sh
# man_flags.sh - the man pages document exactly the flags the tools accept.
#
# For each tool, the long flags (--[a-z0-9-]+) printed by `TOOL --help` and
# those in the rendered man/TOOL.1 must be the same set; then every page in
# man/ must be clean under `mandoc -Tlint -W warning`.
#
# Environment: MERAK_SRCDIR (pages), MERAK_BUILDDIR (binaries), both
# defaulting to the directory above this script; MANDOC (the mandoc to use).
# Exit status: 0 pass, 1 fail, 77 skip (neither mandoc nor groff).
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
: "${MERAK_SRCDIR:=$top}"
: "${MERAK_BUILDDIR:=$top}"

if [ -n "${MANDOC:-}" ] && command -v "$MANDOC" > /dev/null 2>&1; then
    :
elif command -v mandoc > /dev/null 2>&1; then
    MANDOC=mandoc
else
    MANDOC=
fi
if [ -z "$MANDOC" ] && ! command -v groff > /dev/null 2>&1; then
    echo "SKIP: neither mandoc nor groff is installed" >&2
    exit 77
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/merak-man.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
trap 'exit 1' HUP INT TERM

BS=$(printf '\b')
ESC=$(printf '\033')
MINUS=$(printf '\342\210\222')   # U+2212, what some roffs make of \-
HYPHEN=$(printf '\342\200\220')  # U+2010, what groff -Tutf8 makes of -
NBHYPHEN=$(printf '\342\200\221') # U+2011

# render PAGE: the page as plain text, lines wide enough not to break flags.
render() {
    if [ -n "$MANDOC" ]; then
        "$MANDOC" -Tutf8 -O width=300 "$1"
    else
        groff -man -Tutf8 -P-c -rLL=300n "$1"
    fi
}

# plain: map Unicode hyphens and minus signs to '-', drop SGR escapes and
# overstrike (bold X^HX, underline _^HX).
plain() {
    LC_ALL=C sed -e "s/$MINUS/-/g" -e "s/$HYPHEN/-/g" -e "s/$NBHYPHEN/-/g" \
        -e "s/$ESC\\[[0-9;]*m//g" -e "s/.$BS//g"
}

# flags: the sorted set of long flags in the text on standard input.
flags() {
    LC_ALL=C tr -c 'a-z0-9-' '\n' | LC_ALL=C sed -n 's/^.*\(--[a-z0-9][a-z0-9-]*\)$/\1/p' |
        LC_ALL=C sed 's/-*$//' | LC_ALL=C sort -u
}

status=0
for tool in merak-train merak-shard merak-topo merak-plan merak-trace merak-ckpt merak-generate; do
    bin=$MERAK_BUILDDIR/$tool
    page=$MERAK_SRCDIR/man/$tool.1
    if [ ! -x "$bin" ]; then
        echo "FAIL: $tool: $bin is not built" >&2
        status=1
        continue
    fi
    if [ ! -r "$page" ]; then
        echo "FAIL: $tool: no man page $page" >&2
        status=1
        continue
    fi
    if ! "$bin" --help > "$WORK/$tool.help" 2> "$WORK/$tool.err"; then
        echo "FAIL: $tool: --help failed: $(head -n 1 "$WORK/$tool.err")" >&2
        status=1
        continue
    fi
    if ! render "$page" > "$WORK/$tool.raw" 2> "$WORK/$tool.err"; then
        echo "FAIL: $tool: cannot render $page: $(head -n 1 "$WORK/$tool.err")" >&2
        status=1
        continue
    fi
    flags < "$WORK/$tool.help" > "$WORK/$tool.help.flags"
    # without EXAMPLES, whose command lines also give other programs' flags (sbatch, srun)
    plain < "$WORK/$tool.raw" | LC_ALL=C sed '/^EXAMPLES/,/^SEE ALSO/d' | flags > "$WORK/$tool.man.flags"
    only_help=$(LC_ALL=C comm -23 "$WORK/$tool.help.flags" "$WORK/$tool.man.flags" | tr '\n' ' ')
    only_man=$(LC_ALL=C comm -13 "$WORK/$tool.help.flags" "$WORK/$tool.man.flags" | tr '\n' ' ')
    n=$(wc -l < "$WORK/$tool.help.flags" | tr -d ' ')
    if [ "$n" -eq 0 ]; then
        echo "FAIL: $tool: no long flags in --help" >&2
        status=1
    elif [ -n "$only_help" ] || [ -n "$only_man" ]; then
        [ -z "$only_help" ] || echo "FAIL: $tool: only in --help, not in man/$tool.1: $only_help" >&2
        [ -z "$only_man" ] || echo "FAIL: $tool: only in man/$tool.1, not in --help: $only_man" >&2
        status=1
    else
        echo "$tool: $n long flags, --help and man/$tool.1 agree"
    fi
done

if [ -n "$MANDOC" ]; then
    npages=0 lint_ok=1
    for page in "$MERAK_SRCDIR"/man/*.[1-9]; do
        [ -e "$page" ] || continue
        npages=$((npages + 1))
        "$MANDOC" -Tlint -W warning "$page" > "$WORK/lint" 2>&1
        if grep -E ': (WARNING|ERROR|UNSUPP|BADARG|SYSERR): ' "$WORK/lint" > "$WORK/lint.bad"; then
            echo "FAIL: mandoc -Tlint: ${page##*/}:" >&2
            cat "$WORK/lint.bad" >&2
            status=1 lint_ok=0
        fi
    done
    [ "$lint_ok" -eq 0 ] || echo "lint: $npages page(s) clean under mandoc -Tlint -W warning"
else
    echo "lint: skipped (no mandoc)"
fi

exit $status
