#!/usr/bin/env python3
"""Checks that the C engine runs the trained model as the trainer does: for a few prompts,
the logits of `larql logits --act ms` over the whole vocabulary at every position against the
trainer's quantised forward pass (model.py, in float64 for a stable reference), and the same for
`--act float` against the forward with float activations.

  check_logits.py --ckpt out/ckpt.pt --gguf out/model.gguf --larql build/larql [--tol 1e-3]

Prints one line per prompt and mode and exits non-zero if any difference exceeds the tolerance."""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export as X  # noqa: E402

PROMPTS = ["Once upon a time, there was a little girl named Lily.",
           "The capital of France is",
           "User: What is the capital of Japan?<|eot_id|>Assistant:",
           "Tom and his dog went to the park. They played with a big red ball and"]


def engine_logits(larql, gguf, ids, V, act):
    p = subprocess.run([larql, "logits", gguf, "--ids", ",".join(map(str, ids)), "--top", str(V), "--act", act,
                        "--threads", "1"], capture_output=True, text=True, check=True)
    rows = []
    for line in p.stdout.splitlines():
        r = json.loads(line)
        v = [0.0] * V
        for i, x in r["top"]:
            v[i] = x
        rows.append(v)
    return torch.tensor(rows, dtype=torch.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--larql", required=True)
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    net, vocab, _ = X.load_ckpt(a.ckpt)
    net64 = net.double()
    V = len(vocab.tokens)
    worst = 0.0
    for text in PROMPTS:
        ids = [vocab.bos] + vocab.encode(text)
        for act in ("ms", "float"):
            with torch.no_grad():
                ref = net64(torch.tensor([ids]), act_float=(act == "float"))[0]
            got = engine_logits(a.larql, a.gguf, ids, V, act)
            d = (got - ref).abs().max().item()
            worst = max(worst, d)
            print("%-5s %3d tokens  max |logit diff| %.2e  (logit range %.1f..%.1f)  %r" %
                  (act, len(ids), d, ref.min().item(), ref.max().item(), text[:40]))
    print("worst %.2e, tolerance %.0e: %s" % (worst, a.tol, "ok" if worst <= a.tol else "FAIL"))
    sys.exit(0 if worst <= a.tol else 1)


if __name__ == "__main__":
    main()
