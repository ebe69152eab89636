#!/usr/bin/env python3
"""The prompt cache's effect on a multi-turn conversation: time to the first streamed token
of each turn of a 10-turn exchange (each turn's prompt = the conversation so far + a new user
line), through larql serve with the cache (--cache-ram 1024) and without (--cache-ram 0),
servers run one after the other, alternating, so the ratios come from the same minutes.

usage: prompt_cache.py LARQL MODEL [--turns 10] [--max-tokens 16] [--rounds 2] [--threads 2]"""
import argparse
import json
import re
import statistics
import subprocess
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("larql")
ap.add_argument("model")
ap.add_argument("--turns", type=int, default=10)
ap.add_argument("--max-tokens", type=int, default=16)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()

LINES = ["Tell me about the old lighthouse on the northern cape and who keeps its lamp burning.",
         "What did the keeper see from the gallery on the night of the great storm last winter?",
         "How did the fishing village repay the keeper after the boats came home safely again?",
         "Describe the path from the harbour up the cliff to the lighthouse door in the morning.",
         "Which birds nest under the gallery, and what do they do when the lamp turns at dusk?",
         "What stories do the children of the village tell about the lamp and its first keeper?",
         "How is the great lens cleaned, and how long does that work take on a calm summer day?",
         "What happens to the light when the fog rolls in thick from the sea before the dawn?",
         "Who will keep the lamp when the old keeper grows too tired to climb the long stairs?",
         "Finish the story of the lighthouse in a few words, as the keeper would tell it to us."]


def start(cache_mib):
    p = subprocess.Popen([a.larql, "serve", a.model, "--port", "0", "--threads", str(a.threads), "--cache-ram",
                          str(cache_mib), "--max-concurrent", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+)$", p.stdout.readline().strip()).group(1))
    return p, port


def ttft(port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    first, text = None, ""
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:]).get("choices") or []
            if ch and ch[0].get("text"):
                if first is None:
                    first = time.monotonic() - t0
                text += ch[0]["text"]
    return (first if first is not None else time.monotonic() - t0), text


def conversation(port):
    conv, times = "", []
    for t in range(a.turns):
        conv += "User: " + LINES[t % len(LINES)] + "\nAssistant:"
        dt, answer = ttft(port, conv)
        times.append(dt)
        conv += answer + "\n"
    return times


res = {"cache": [], "nocache": []}
for rnd in range(a.rounds):
    for mode in (("cache", "nocache") if rnd % 2 == 0 else ("nocache", "cache")):
        p, port = start(1024 if mode == "cache" else 0)
        try:
            ttft(port, "warm up")  # the weights paged in before the clock starts
            res[mode].append(conversation(port))
        finally:
            p.terminate()
            p.wait(30)
for mode in ("cache", "nocache"):
    per_turn = [statistics.median(r[t] for r in res[mode]) for t in range(a.turns)]
    print("%-8s TTFT per turn (median of %d, s): %s" % (mode, a.rounds, " ".join("%.2f" % x for x in per_turn)))
last = [c[-1] / n[-1] for c, n in zip(res["cache"], res["nocache"])]
print("turn %d TTFT with the cache / without, per round: %s (goal <= 0.15)" %
      (a.turns, " ".join("%.3f" % x for x in last)))
