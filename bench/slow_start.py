#!/usr/bin/env python3
"""No slow start (issue 29, item 3): the decode speed of the first 64 tokens of `larql run`
against the steady state, for each --weights mode, each run started right after another
process touched and freed --churn GB (the state in which the kernel must compact and zero
2 MB pages for the weights' copy).

A run of N tokens prints its decode time (N - 1 tokens over the rate it reports). The steady
state is the rate of the tokens between 64 and --long in a run of --long tokens: (long - 64)
over (its decode time minus the 64-token run's, same mode, same round). Modes and their order
alternate by round; medians over --rounds. Also the open-to-exit wall time of the 64-token
run, which holds what the open costs (the weights' copy, the bounded lm_head's int8 copy).

usage: slow_start.py LARQL MODEL [--rounds 5] [--long 256] [--churn 3] [--threads 2]"""
import argparse
import re
import statistics
import subprocess
import time

ap = argparse.ArgumentParser()
ap.add_argument("larql")
ap.add_argument("model")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--long", type=int, default=256)
ap.add_argument("--churn", type=float, default=3.0, help="GB touched and freed before each run")
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
MODES = ["auto", "copy", "mmap"]


def churn():
    # a process that writes every page of --churn GB, then exits: its pages go back to the
    # kernel as 4 KB pages scattered over memory
    subprocess.run(["python3", "-c", "b = b'\\x01' * int(%f * (1 << 30)); b = None" % a.churn], check=True)


def run(mode, n):
    churn()
    t0 = time.monotonic()
    p = subprocess.run([a.larql, "run", a.model, "Once upon a time", "-n", str(n), "--temp", "0", "--ignore-eos",
                        "--threads", str(a.threads), "--weights", mode], capture_output=True, text=True)
    wall = time.monotonic() - t0
    m = re.search(r"decode (\d+) tok ([0-9.]+) tok/s", p.stderr)
    if p.returncode or not m:
        raise SystemExit("larql run failed: " + p.stderr[-400:])
    toks, rate = int(m.group(1)), float(m.group(2))
    return toks / rate, toks, wall


res = {m: {"first": [], "steady": [], "wall": [], "ratio": []} for m in MODES}
for r in range(a.rounds):
    order = MODES if r % 2 == 0 else MODES[::-1]
    for mode in order:
        t64, n64, wall = run(mode, 64)
        tl, nl, _ = run(mode, a.long)
        first = n64 / t64
        steady = (nl - n64) / (tl - t64) if tl > t64 else float("nan")
        for k, v in (("first", first), ("steady", steady), ("wall", wall), ("ratio", first / steady)):
            res[mode][k].append(v)
        print("round %d %-4s first 64: %6.2f tok/s  steady: %6.2f tok/s  ratio %.3f  wall(64) %.2f s" %
              (r + 1, mode, first, steady, first / steady, wall), flush=True)

print("\n| --weights | first 64 tok/s | steady tok/s | first / steady (median of rounds) | wall of the 64-token run, s |")
print("|---|---|---|---|---|")
best = max(statistics.median(res[m]["first"]) for m in MODES)
for m in MODES:
    d = res[m]
    print("| %s | %.2f | %.2f | %.3f (%.3f-%.3f) | %.2f |" % (
        m, statistics.median(d["first"]), statistics.median(d["steady"]), statistics.median(d["ratio"]),
        min(d["ratio"]), max(d["ratio"]), statistics.median(d["wall"])))
print("\nauto's first 64 tokens against the best mode's: %.3f" % (statistics.median(res["auto"]["first"]) / best))
