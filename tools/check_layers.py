#!/usr/bin/env python3
"""Check the one-way layer order of Zephon's sources (docs/design.md, "Layers").

Every file of src/ belongs to the layer of its folder (src/base, src/io, ...);
mpi/, src/cli/ and python/ are clients. A file may include and call only its
own layer and the layers below it, and no group of files may form a circle
(a .c file and the private header of the same name are one node).

  tools/check_layers.py [--root DIR] [--objects BUILD_DIR] [--stats]
                        [--plant-include FILE:HEADER] [--object SOURCE=OBJECT.o]

--objects reads the symbol tables (nm) of a CMake build's object files for
the call arrows; without it only include arrows are checked. The planting
options show that the check fails (tests/layers.cmake): --plant-include
reads FILE as if it had one more line `#include "HEADER"`; --object reads
OBJECT.o's symbols as those of SOURCE (a repository path).
Prints every violation and exits 1 when there is one; --stats prints counts.
"""
import argparse, os, re, subprocess, sys
from collections import defaultdict

ORDER = ["base", "io", "formats", "data", "plan", "ops", "output", "engine", "api", "clients"]
RANK = {n: i for i, n in enumerate(ORDER)}
# Public headers: the layer whose types or functions each one declares.
PUBLIC = {
    "zephon.h": "api",
    "zephon/common.h": "base", "zephon/tokenizer.h": "base", "zephon/histogram.h": "base",
    "zephon/array.h": "base", "zephon/batch.h": "plan", "zephon/balance.h": "output", "zephon/memory.h": "output", "zephon/record.h": "ops",
    "zephon/storage.h": "io",
    "zephon/dataset.h": "data",
    "zephon/worksource.h": "plan", "zephon/state_json.h": "plan", "zephon/state.h": "api",
    "zephon/pipeline.h": "api", "zephon/observe.h": "api", "zephon/preprocess.h": "api",
    "zephon/coverage.h": "base", "zephon/certificate.h": "api",
    "zephon/mpi.h": "clients",
}
SRC_EXT = (".c", ".h", ".cpp")
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """Layer of a repository path, or None for files outside the layered tree."""
    if path.startswith("include/"):
        return PUBLIC.get(path[len("include/"):])
    parts = path.split("/")
    if parts[0] in ("mpi", "python") or path.startswith("src/cli/"):
        return "clients"
    if parts[0] == "src" and len(parts) >= 3 and parts[1] in RANK:
        return parts[1]
    if parts[0] == "src":
        return "?"
    return None


def node_of(path):
    """The node a file belongs to: foo.c, foo.h and foo_internal.h are one."""
    base, _ = os.path.splitext(path)
    if base.endswith("_internal"):
        base = base[: -len("_internal")]
    return base


def files(root):
    out = []
    for top in ("src", "mpi", "python/zephon", "include"):
        for d, _, fs in os.walk(os.path.join(root, top)):
            for f in fs:
                if f.endswith(SRC_EXT):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def resolve(root, src, name):
    for cand in (os.path.join(os.path.dirname(src), name), os.path.join("src", name),
                 os.path.join("include", name), os.path.join("mpi", name)):
        cand = os.path.normpath(cand)
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def include_arrows(root, fl, planted=()):
    arrows = []
    extra = defaultdict(str)
    for p in planted:
        f, h = p.split(":", 1)
        extra[f] += '\n#include "%s"\n' % h
    for f in fl:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read() + extra[f]
        for m in INC.finditer(text):
            tgt = resolve(root, f, m.group(1))
            if tgt:
                arrows.append((f, tgt, "includes"))
    return arrows


def call_arrows(root, objdir, extra=()):
    """(caller source, callee source, 'calls') from the objects' symbol tables."""
    objs = [("planted",) + tuple(e.split("=", 1)) for e in extra]
    for d, _, fs in os.walk(objdir):
        for f in fs:
            if f.endswith(".o"):
                p = os.path.join(d, f)
                rel = os.path.relpath(p, objdir)
                # CMakeFiles/<target>.dir/<source path>.o
                m = re.match(r"CMakeFiles/([^/]+)\.dir/(.+)\.o$", rel)
                if not m or m.group(1).startswith(("test_", "bench_", "example_", "fuzz")):
                    continue
                src = m.group(2)
                if layer_of(src) is None:
                    continue
                objs.append((m.group(1), src, p))
    defined, undefined = {}, defaultdict(set)
    for tgt, src, p in objs:
        out = subprocess.run([os.environ.get("NM", "nm"), "-P", p], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == "U":
                undefined[src].add(sym)
            elif kind in "TDBRVWtdbr" and kind.isupper():
                defined.setdefault(sym, src)
    arrows = set()
    for src, syms in undefined.items():
        for s in syms:
            d = defined.get(s)
            if d and d != src:
                arrows.add((src, d, "calls"))
    return sorted(arrows)


def sccs(graph):
    index, low, stack, on, res, i = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1
        stack.append(v); on.add(v)
        for w in graph.get(v, ()):
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
                res.append(sorted(comp))
    for v in list(graph):
        if v not in index:
            visit(v)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--objects")
    ap.add_argument("--plant-include", action="append", default=[])
    ap.add_argument("--object", action="append", default=[])
    ap.add_argument("--stats", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    fl = files(root)
    bad = [f for f in fl if layer_of(f) == "?"]
    arrows = include_arrows(root, fl, a.plant_include)
    if a.objects:
        arrows += call_arrows(root, a.objects, a.object)
    problems = ["%s: not in a layer folder (src/<layer>/, docs/design.md)" % f for f in bad]
    up = []
    graph = defaultdict(set)
    for frm, to, how in arrows:
        lf, lt = layer_of(frm), layer_of(to)
        if lf is None or lt is None or lf == "?" or lt == "?":
            continue
        if RANK[lt] > RANK[lf]:
            up.append("%s (%s) %s %s (%s): runs up against the layer order" % (frm, lf, how, to, lt))
        nf, nt = node_of(frm), node_of(to)
        if nf != nt and not frm.startswith("include/") and not to.startswith("include/"):
            graph[nf].add(nt)
    problems += sorted(set(up))
    circles = sccs(graph)
    for c in circles:
        problems.append("circle of %d files: %s" % (len(c), " <-> ".join(c)))
    if a.stats:
        sizes = []
        long_fns = []
        for f in fl:
            if f.startswith("include/"):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                lines = fh.read().split("\n")
            sizes.append((len(lines), f))
            start = None  # a function's body: from "{" to "}", both alone at column 0
            for i, line in enumerate(lines):
                if line == "{":
                    start = i
                elif line == "}" and start is not None:
                    if i - start - 1 > 100:
                        long_fns.append((i - start - 1, f, start + 1))
                    start = None
        sizes.sort(reverse=True)
        print("files: %d (largest %s, %d lines); functions over 100 lines: %d" %
              (len(sizes), sizes[0][1], sizes[0][0], len(long_fns)))
        for n, f, ln in sorted(long_fns, reverse=True):
            print("  long function: %s:%d (%d lines)" % (f, ln, n))
        nodes = {node_of(f) for f in fl if not f.startswith("include/")}
        n_arrows = sum(len(v) for v in graph.values())
        print("layers: %d nodes, %d arrows between them, %d arrows up, %d circles (largest %d)" %
              (len(nodes), n_arrows, len(set(up)), len(circles), max([len(c) for c in circles] or [0])))
    for p in problems:
        print("check_layers: " + p)
    if problems:
        print("check_layers: %d violation(s) of the layer order (docs/design.md, \"Layers\")" % len(problems))
        return 1
    print("check_layers: %d files, %d arrows%s, no arrow up, no circle" %
          (len(fl), len(arrows), " (includes and calls)" if a.objects else " (includes)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
