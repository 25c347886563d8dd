#!/bin/bash
# layers.sh - the tree's dependencies go one way (DESIGN.md section 2):
#   1. no call cycle between object files: from nm, which object defines
#      each symbol another leaves undefined; every library object and tool;
#   2. between folders, only the directions the layers allow (the table
#      below: train -> plan -> pipe -> graph, pipe -> comm, ...; the
#      kernels and topo at the bottom, the spank plugin on topo and the
#      runtime's name tables);
#   3. no include cycle among the source tree's headers;
#   4. ops are dispatched through the op table (runtime/graph/ops.h):
#      outside runtime/graph, at most a handful of `case MERAK_OP_...`;
#   5. the shared libmerak exports its public API, the functions
#      include/merak/merak.h declares, and nothing else; the tools include
#      public headers, runtime/internal.h and their own, nothing else.
# A folder the table does not name fails the test: add it here and to
# DESIGN.md together.
. "$(dirname "$0")/lib.sh"
command -v nm > /dev/null || skip "no nm (binutils)"
objs=$(cd "$MERAK_BUILDDIR" && find . -path ./tests -prune -o \( -path '*/.libs/*.o' -o -path './tools/*.o' \) -print)
[ -n "$objs" ] || fail "no object files under $MERAK_BUILDDIR (build first)"
# one line per object: "O path" then "D sym" / "U sym"
(cd "$MERAK_BUILDDIR" && for o in $objs; do echo "O $o"; nm "$o" | awk 'NF == 2 && $1 == "U" { print "U " $2 }
    NF == 3 && $2 ~ /^[TDBRWV]$/ { print "D " $3 }'; done) > "$WORK/symbols"
so=$MERAK_BUILDDIR/.libs/libmerak.so
[ -f "$so" ] && nm -D --defined-only "$so" | awk '$2 == "T" { print $3 }' > "$WORK/exports"
python3 - "$WORK/symbols" "$MERAK_SRCDIR" "$WORK/exports" <<'EOF'
import collections, os, re, sys

# Which folders each folder may call (DESIGN.md section 2).
LIB = {"runtime/train", "runtime/plan", "runtime/pipe", "runtime/graph", "runtime/comm", "runtime",
       "kernels", "kernels/cpu", "kernels/cuda", "topo"}
BELOW_PIPE = {"runtime/graph", "runtime/comm", "runtime", "kernels", "kernels/cpu", "kernels/cuda", "topo"}
ALLOWED = {
    "tools": LIB | {"tools"},
    "runtime/train": BELOW_PIPE | {"runtime/plan", "runtime/pipe"},
    "runtime/plan": BELOW_PIPE | {"runtime/pipe"},
    "runtime/pipe": BELOW_PIPE,
    "runtime/graph": {"runtime", "kernels", "topo"},
    "runtime/comm": {"runtime", "topo"},
    "runtime": {"topo"},
    "kernels/cpu": {"kernels"},
    "kernels/cuda": {"kernels"},
    "kernels": {"kernels/cpu", "kernels/cuda"},   # backend.c, the table by name (memcount.c below both)
    "spank": {"topo", "runtime", "runtime/pipe"},   # the runtime's name tables (schedules, recomputation)
    "topo": set(),
}

defs, undefs, cur = collections.defaultdict(set), {}, None
for line in open(sys.argv[1]):
    kind, name = line.split()
    if kind == "O":
        path = os.path.normpath(name).replace("/.libs/", "/")
        cur = os.path.join(os.path.dirname(path), re.sub(r"^[\w-]*?_la-", "", os.path.basename(path)))
        undefs[cur] = set()
    elif kind == "U":
        undefs[cur].add(name)
    else:
        defs[name].add(cur)

edges = collections.defaultdict(dict)   # object -> {object it calls: a symbol}
for o, us in undefs.items():
    for u in sorted(us):
        for d in defs.get(u, ()):
            if d != o:
                edges[o].setdefault(d, u)
bad = 0

# 1. call cycles: strongly connected components of more than one object
index, low, stack, on, counter = {}, {}, [], set(), [0]
sys.setrecursionlimit(100000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            global bad
            bad += 1
            print("call cycle: " + ", ".join(sorted(comp)))
            for a in sorted(comp):
                for b, sym in sorted(edges[a].items()):
                    if b in comp:
                        print(f"    {a} -> {b} ({sym})")
for v in sorted(undefs):
    if v not in index:
        visit(v)

# 2. folder directions
seen = collections.Counter()
for a in sorted(edges):
    fa = os.path.dirname(a)
    if fa not in ALLOWED:
        bad += 1
        print(f"{a}: folder {fa} is not in the layer table (tests/layers.sh, DESIGN.md section 2)")
        continue
    for b, sym in sorted(edges[a].items()):
        fb = os.path.dirname(b)
        if fb != fa:
            seen[(fa, fb)] += 1
            if fb not in ALLOWED[fa]:
                bad += 1
                print(f"{fa} must not call {fb}: {a} -> {b} ({sym})")

# 3. include cycles among the headers of the source tree
src = sys.argv[2]
headers = {}
for d, ds, fs in os.walk(src):
    ds[:] = [x for x in ds if not x.startswith((".", "build")) and x not in ("autom4te.cache",)]
    for f in fs:
        if f.endswith((".h", ".cuh")):
            headers[os.path.relpath(os.path.join(d, f), src)] = []
by_tail = collections.defaultdict(list)
for h in headers:
    parts = h.split("/")
    for i in range(len(parts)):
        by_tail["/".join(parts[i:])].append(h)
for h in headers:
    for line in open(os.path.join(src, h), errors="replace"):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        near = os.path.normpath(os.path.join(os.path.dirname(h), m.group(1)))
        target = near if near in headers else (by_tail[m.group(1)][0] if len(by_tail[m.group(1)]) == 1 else None)
        if target:
            headers[h].append(target)
state = {}
def walk(h, path):
    state[h] = 1
    for t in headers[h]:
        if state.get(t) == 1:
            global bad
            bad += 1
            print("include cycle: " + " -> ".join(path[path.index(t):] + [t]))
        elif t not in state:
            walk(t, path + [t])
    state[h] = 2
for h in sorted(headers):
    if h not in state:
        walk(h, [h])

# 4. the op table: code outside runtime/graph asks an op's entry, not its kind
HANDFUL = 4
cases = []
for d, ds, fs in os.walk(src):
    ds[:] = [x for x in ds if not x.startswith((".", "build")) and x not in ("autom4te.cache", "tests", "graph")]
    for f in fs:
        if f.endswith((".c", ".h", ".cu", ".cuh", ".cpp")):
            path = os.path.join(d, f)
            for n, line in enumerate(open(path, errors="replace"), 1):
                if re.search(r"\bcase\s+MERAK_OP_", line):
                    cases.append(f"{os.path.relpath(path, src)}:{n}")
if len(cases) > HANDFUL:
    bad += 1
    print(f"{len(cases)} 'case MERAK_OP_' outside runtime/graph (at most {HANDFUL}; dispatch through the "
          "op table, runtime/graph/ops.h): " + " ".join(cases))

# 5. the public API: exports and the tools' includes
nexp = "no shared libmerak"
if os.path.exists(sys.argv[3]):
    exported = set(open(sys.argv[3]).read().split())
    declared = set(re.findall(r"^[a-z][^(\n]*[ *](merak_\w+)\(", open(os.path.join(src, "include/merak/merak.h")).read(), re.M))
    for name in sorted(exported - declared):
        bad += 1
        print(f"libmerak exports {name}, which include/merak/merak.h does not declare")
    for name in sorted(declared - exported):
        bad += 1
        print(f"include/merak/merak.h declares {name}, which libmerak does not export")
    nexp = f"{len(exported)} exported functions"
tooldir = os.path.join(src, "tools")
local = {f for f in os.listdir(tooldir) if f.endswith(".h")}
for f in sorted(os.listdir(tooldir)):
    if f.endswith(".c"):
        for n, line in enumerate(open(os.path.join(tooldir, f)), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m and not (m.group(1).startswith("merak/") or m.group(1) in local or m.group(1) == "internal.h"):
                bad += 1
                print(f"tools/{f}:{n} includes {m.group(1)}: tools include public headers, internal.h and their own")

nobj = len(undefs)
nedge = sum(len(v) for v in edges.values())
print(f"{nobj} objects, {nedge} calls between them, {len(seen)} folder directions, {len(headers)} headers, "
      f"{len(cases)} op cases outside runtime/graph, {nexp}: "
      + ("ok" if not bad else f"{bad} problem(s)"))
sys.exit(1 if bad else 0)
EOF
