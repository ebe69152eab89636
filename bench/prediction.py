#!/usr/bin/env python3
"""OpenAI Predicted Outputs through larql serve: a greedy completion of N tokens timed with and
without a "prediction" of it in which every 10th word is wrong (an edit of a known text),
alternating, 5 runs each; the answers must be equal. usage: prediction.py LARQL MODEL N"""
import json, subprocess, sys, time, statistics, re, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "http"))
import client
larql, model, ntok = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = subprocess.Popen([larql, "serve", model, "--port", "0", "--threads", "2"], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
port = None
for line in p.stdout:
    m = re.search(r"127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1)); break
prompt = "Once upon a time, there was a little girl named Lily. She liked to play in the park with her friends."
base = {"prompt": prompt, "max_tokens": ntok, "temperature": 0, "ignore_eos": True}
st, _, raw = client.request(port, "POST", "/v1/completions", base, timeout=600)
out = json.loads(raw)["choices"][0]["text"]
# every 10th word wrong
words = out.split(" ")
pred = " ".join(w if i % 10 != 9 else "zebra" for i, w in enumerate(words))
tw, tp, acc = [], [], []
for r in range(5):
    for mode in ([0, 1] if r % 2 == 0 else [1, 0]):
        body = dict(base, prediction={"type": "content", "content": pred}) if mode else base
        t = time.time()
        st, _, raw = client.request(port, "POST", "/v1/completions", body, timeout=600)
        dt = time.time() - t
        j = json.loads(raw)
        assert j["choices"][0]["text"] == out
        (tp if mode else tw).append(dt)
        if mode:
            acc.append(j["usage"]["completion_tokens_details"])
p.terminate()
print("without %.3f s, with prediction %.3f s (medians of 5): %.2fx; details %s" % (
    statistics.median(tw), statistics.median(tp), statistics.median(tw) / statistics.median(tp), acc[0]))
