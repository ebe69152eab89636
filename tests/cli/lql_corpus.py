"""Runs every statement of LARQL's parser tests and docs (tests/data/lql/*.txt) through
`larql lql VINDEX -c STATEMENT`, each in its own process and scratch directory (so that writes
land there and a crash is seen), and counts: ran, runtime errors (the statement needs what
the test vindex lacks: another vindex, a layer beyond the model, a hub model), parse errors
and crashes. Usage: lql_corpus.py LARQL VINDEX FILE [-v]. Prints one summary line per file."""
import os, shutil, subprocess, sys, tempfile

def load(path):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        s, i = [], 0
        while i < len(line):
            if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in "n\\":
                s.append("\n" if line[i + 1] == "n" else "\\")
                i += 2
            else:
                s.append(line[i])
                i += 1
        out.append("".join(s))
    return out

def main():
    larql, vindex, path = (os.path.abspath(a) for a in sys.argv[1:4])
    verbose = "-v" in sys.argv[4:]
    stmts = load(path)
    n = {"ran": 0, "runtime": 0, "unsupported": 0, "parse": 0, "crash": 0}
    min_run = float(sys.argv[sys.argv.index("--min-run") + 1]) if "--min-run" in sys.argv else 0.0
    for st in stmts:
        d = tempfile.mkdtemp(prefix="lqlc.")
        try:
            v = os.path.join(d, "model.vindex")
            subprocess.run(["cp", "-al", vindex, v], check=True)  # COMPACT may rewrite it
            p = subprocess.run([larql, "lql", v, "-c", st], cwd=d, capture_output=True,
                               timeout=600)
            err = p.stderr.decode("utf-8", "replace")
            if p.returncode < 0 or p.returncode >= 128:
                kind = "crash"
            elif "Parse error" in err:
                kind = "parse"
            elif "not supported" in err:
                kind = "unsupported"
            elif p.returncode != 0:
                kind = "runtime"
            else:
                kind = "ran"
            n[kind] += 1
            if verbose and kind != "ran":
                first = (err.strip().splitlines() or [""])[0]
                print(f"  {kind:8} {st!r}: {first[:200]}")
        finally:
            shutil.rmtree(d, ignore_errors=True)
    total = len(stmts)
    parsed = total - n["parse"] - n["crash"]
    run = 100.0 * (n["ran"] + n["runtime"]) / total
    print(f"{os.path.basename(path)}: {total} statements, {n['ran']} ran, {n['runtime']} runtime errors "
          f"(the test vindex lacks what they need), {n['unsupported']} unsupported, {n['parse']} parse errors, "
          f"{n['crash']} crashes; parsed {100.0 * parsed / total:.1f}%, parsed and ran {run:.1f}%")
    return 1 if n["crash"] or run < min_run else 0

sys.exit(main())
