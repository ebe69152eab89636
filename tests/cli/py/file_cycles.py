#!/usr/bin/env python3
"""File-level dependency cycles inside each module, from the object-symbol graph: an object
uses another when it references a symbol the other defines (nm over OBJ_DIR/src/*/*.o, and
ext/pg_infer/*.o when built). Prints one line per cycle (its module and files) and exits 1
when a module named in ACYCLIC has one. usage: file_cycles.py BUILD_DIR MODULE..."""
import collections
import glob
import os
import subprocess
import sys

build, acyclic = sys.argv[1], set(sys.argv[2:])
objs = sorted(glob.glob(os.path.join(build, "src", "*", "*.o"))) + sorted(glob.glob("ext/pg_infer/*.o"))
defs, uses = {}, collections.defaultdict(set)
for o in objs:
    out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in "TDBR":
            defs[p[2]] = o
        elif len(p) == 2 and p[0] == "U":
            uses[o].add(p[1])
graph = {o: {defs[u] for u in uses[o] if u in defs and defs[u] != o
             and os.path.dirname(defs[u]) == os.path.dirname(o)} for o in objs}

# strongly connected components (Tarjan, iterative)
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
for root in objs:
    if root in index:
        continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)
bad = 0
for comp in sccs:
    module = os.path.basename(os.path.dirname(comp[0]))
    module = "pg_infer" if module == "pg_infer" else module
    flag = module in acyclic
    bad += flag
    print("%s%s: %s" % ("CYCLE in " if flag else "", module, " ".join(sorted(os.path.basename(c) for c in comp))))
print("%d module(s) that must be acyclic have a cycle" % bad)
sys.exit(1 if bad else 0)
