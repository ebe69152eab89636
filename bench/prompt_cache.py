#!/usr/bin/env python3
"""The prompt cache's effect on a multi-turn conversation: time to the first streamed token
of each turn of a 10-turn exchange (each turn's prompt = the conversation so far + a new user
line), through larql serve with the cache (--cache-ram 1024) and without (--cache-ram 0),
servers run one after the other, alternating, so the ratios come from the same minutes.
--think S waits S seconds between a turn's answer and the next question (a person reading and
typing; 0 = the next request right after the answer, the default). For the last turn it
prints where the time went: prompt tokens, how many came from the cache (or from a running
request) and how many were prefilled, the prefill's time and cost per token, and the rest of
the TTFT (HTTP, template, tokenization, the first sample), read from /metrics around the turn.

usage: prompt_cache.py LARQL MODEL [--turns 10] [--max-tokens 16] [--rounds 2] [--threads 2] [--think 0]"""
import argparse
import json
import re
import statistics
import subprocess
import time
import urllib.parse
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("larql")
ap.add_argument("model")
ap.add_argument("--turns", type=int, default=10)
ap.add_argument("--max-tokens", type=int, default=16)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--think", type=float, default=0.0)
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
                          str(cache_mib), "--max-concurrent", "2",
                          # a long prefill sends nothing for longer than the default 30 s idle
                          # timeout, which would cut the stream (an empty answer, a short TTFT)
                          "--request-timeout", "3600"], stdout=subprocess.PIPE,
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


METRICS = {"prompt": "larql_prompt_tokens_total", "reused": "larql_prompt_cache_reused_tokens_total",
           "shared": "larql_prompt_shared_tokens_total", "prefill_s": "larql_prefill_seconds_total"}


def metrics(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60).read().decode()
    vals = dict(l.split()[:2] for l in text.splitlines() if l and not l.startswith("#"))
    return {k: float(vals.get(m, 0)) for k, m in METRICS.items()}


def tokenize_s(port, text):
    """one /v1/token/encode round trip of the whole prompt: the tokenizer's share of a turn"""
    t0 = time.monotonic()
    urllib.request.urlopen("http://127.0.0.1:%d/v1/token/encode?%s" % (port, urllib.parse.urlencode({"text": text})),
                           timeout=60).read()
    return time.monotonic() - t0


def conversation(port):
    conv, times, last = "", [], None
    for t in range(a.turns):
        conv += "User: " + LINES[t % len(LINES)] + "\nAssistant:"
        if t and a.think > 0:
            time.sleep(a.think)
        m0 = metrics(port)
        dt, answer = ttft(port, conv)
        m1 = metrics(port)
        times.append(dt)
        if t == a.turns - 1:
            d = {k: m1[k] - m0[k] for k in m0}
            d["ttft"] = dt
            d["tokenize_s"] = tokenize_s(port, conv)
            last = d
        conv += answer + "\n"
    return times, last


res = {"cache": [], "nocache": []}
last = {"cache": [], "nocache": []}
for rnd in range(a.rounds):
    for mode in (("cache", "nocache") if rnd % 2 == 0 else ("nocache", "cache")):
        p, port = start(1024 if mode == "cache" else 0)
        try:
            ttft(port, "warm up")  # the weights paged in before the clock starts
            times, d = conversation(port)
            res[mode].append(times)
            last[mode].append(d)
        finally:
            p.terminate()
            p.wait(30)
for mode in ("cache", "nocache"):
    per_turn = [statistics.median(r[t] for r in res[mode]) for t in range(a.turns)]
    print("%-8s TTFT per turn (median of %d, s): %s" % (mode, a.rounds, " ".join("%.2f" % x for x in per_turn)))
ratio = [c[-1] / n[-1] for c, n in zip(res["cache"], res["nocache"])]
print("turn %d TTFT with the cache / without, per round: %s (goal <= 0.15; think time %.1f s)" %
      (a.turns, " ".join("%.3f" % x for x in ratio), a.think))
print("turn %d, median of %d rounds:" % (a.turns, a.rounds))
for mode in ("cache", "nocache"):
    med = {k: statistics.median(d[k] for d in last[mode]) for k in last[mode][0]}
    fed = med["prompt"] - med["reused"] - med["shared"]
    print("  %-8s prompt %d tokens: %d from the cache, %d shared, %d prefilled in %.4f s (%.2f ms/token); "
          "TTFT %.4f s = prefill + %.4f s other (a tokenize round trip of the prompt: %.4f s)" %
          (mode, med["prompt"], med["reused"], med["shared"], fed, med["prefill_s"],
           1e3 * med["prefill_s"] / fed if fed else 0.0, med["ttft"], med["ttft"] - med["prefill_s"], med["tokenize_s"]))
