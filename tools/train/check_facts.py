#!/usr/bin/env python3
"""How much of the trained knowledge a vindex of the model shows: builds a vindex of GGUF,
runs `larql describe` (default band, limit and min score) for every entity of facts.py and
counts the facts whose target is among the entity's edges, then asks `larql infer` for the
next token after "The capital of France is".

  check_facts.py --gguf model.gguf --larql build/larql [--vindex DIR] [--verbose]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import facts  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--larql", required=True)
    ap.add_argument("--vindex")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    vx = a.vindex or tempfile.mkdtemp(prefix="larql-facts.")
    subprocess.run([a.larql, "convert", "gguf-to-vindex", a.gguf, "--output", vx, "--level", "inference",
                    "--keep-quant"], check=True, capture_output=True)
    found, total = 0, 0
    for e in facts.entities():
        out = subprocess.run([a.larql, "describe", vx, e, "--json"], check=True, capture_output=True, text=True).stdout
        edges = [x["target"].strip().lower() for x in json.loads(out)["edges"]]
        for ent, rel, t in facts.facts():
            if ent != e:
                continue
            total += 1
            hit = t.lower() in edges
            found += hit
            if a.verbose:
                print("%-12s %-9s %-12s %s" % (e, rel, t, "found" if hit else "missing: " + ", ".join(edges[:8])))
    inf = subprocess.run([a.larql, "infer", vx, "The capital of France is", "--top", "3", "--json"],
                         capture_output=True, text=True).stdout
    print("describe: %d/%d facts found (%.0f%%)" % (found, total, 100.0 * found / total))
    print("infer 'The capital of France is': %s" % inf.strip()[:300])


if __name__ == "__main__":
    main()
