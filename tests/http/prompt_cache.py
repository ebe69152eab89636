#!/usr/bin/env python3
"""The prompt cache (serve --cache-ram): a request whose prompt starts with a finished one's
prompt and answer reuses its KV (counted in /v1/runtime and /metrics) and answers exactly as
without the cache (cache_prompt: false); an edit changes the forward pass, so KV computed
before it is not reused after it. usage: prompt_cache.py PORT (a server on a vindex)"""
import sys
import threading

import client
from tap import ok

PORT = int(sys.argv[1])


def call(method, path, body=None):
    return client.call(PORT, method, path, body)


def cache():
    return call("GET", "/v1/runtime")[1].get("prompt_cache", {})


def complete(prompt, **kw):
    body = {"prompt": prompt, "max_tokens": 10, "temperature": 0}
    body.update(kw)
    st, b = call("POST", "/v1/completions", body)
    return st, (b.get("choices") or [{}])[0].get("text") if st == 200 else b


c0 = cache()
ok("/v1/runtime reports the prompt cache (capacity from --cache-ram)", c0.get("capacity", 0) > 0, c0)
p1 = "The capital of France is Paris . The capital of Germany is Berlin . The model reads the text and"
st, t1 = complete(p1)
ok("turn 1 answers", st == 200 and isinstance(t1, str), t1)
p2 = p1 + t1 + " . The capital of Japan is"
c1 = cache()
st, t2 = complete(p2)
c2 = cache()
ok("turn 2 (turn 1's prompt and answer, then more) takes the cached prefix",
   c2.get("hits", 0) == c1.get("hits", 0) + 1, (c1, c2))
ok("... and skips prefilling it (reused tokens grew by more than turn 1's prompt)",
   c2.get("reused_tokens", 0) - c1.get("reused_tokens", 0) >= 20, (c1, c2))
st, t2b = complete(p2, cache_prompt=False)
c3 = cache()
ok("the same turn with cache_prompt false answers the same text", st == 200 and t2b == t2, (t2, t2b))
ok("... and neither looks nor counts", c3.get("hits") == c2.get("hits") and c3.get("misses") == c2.get("misses"),
   (c2, c3))
st, b = call("POST", "/v1/completions", {"prompt": p2, "max_tokens": 2, "cache_prompt": "yes"})
ok("cache_prompt must be a boolean (400)", st == 400, b)
st, m = call("GET", "/metrics")
ok("/metrics counts prompt cache hits and reused tokens",
   st == 200 and "larql_prompt_cache_hits_total " in m and "larql_prompt_cache_reused_tokens_total " in m)
ok("/metrics counts the bounded lm_head's tokens and exact rows",
   "larql_lm_head_bounded_tokens_total " in m and "larql_lm_head_rows_exact_total " in m)

# the choices of an n > 1 request share the prompt's KV: prefilled once, copied to the others
c7 = cache()
st, b = call("POST", "/v1/completions", {"prompt": "A shared prompt for three choices: " + p1, "max_tokens": 3,
                                         "n": 3, "temperature": 1.0, "seed": 3})
c8 = cache()
# (a choice that starts after the first one finished takes its KV from the cache instead)
reuses = (c8.get("shared_hits", 0) + c8.get("hits", 0)) - (c7.get("shared_hits", 0) + c7.get("hits", 0))
reused = (c8.get("shared_tokens", 0) + c8.get("reused_tokens", 0)) - (c7.get("shared_tokens", 0) +
                                                                       c7.get("reused_tokens", 0))
ok("n=3: two choices take the first one's prompt KV (copied while it runs, or cached) instead of prefilling it",
   st == 200 and reuses == 2 and reused >= 40, (c7, c8))

# 8 concurrent requests behind one long system prompt: it is prefilled once
system = " ".join("The model reads the text and knows the capital of France is Paris ." for _ in range(5))
c9 = cache()
codes = []


def one(k):
    codes.append(complete(system + " Question %d :" % k, max_tokens=2)[0])


ts = [threading.Thread(target=one, args=(k,)) for k in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
c10 = cache()
reuses = (c10.get("shared_hits", 0) + c10.get("hits", 0)) - (c9.get("shared_hits", 0) + c9.get("hits", 0))
ok("8 concurrent requests behind one system prompt: 7 take its KV (copied or cached), one prefills it",
   codes == [200] * 8 and reuses == 7, (codes, c9, c10))

# an edit changes the forward pass: KV cached before it is not reused after it
st, _ = complete(p2)  # leaves p2 + its answer in the cache
st, b = call("POST", "/v1/insert", {"entity": "Atlantis", "relation": "capital", "target": "Paris", "mode": "knn"})
ok("an edit is made", st == 200, b)
c4 = cache()
st, t3 = complete(p2 + " Tokyo")
c5 = cache()
ok("after the edit the KV from before it is not reused (a miss)",
   st == 200 and c5.get("hits") == c4.get("hits") and c5.get("misses") == c4.get("misses") + 1, (c4, c5))
st, t3b = complete(p2 + " Tokyo" + t3 + " .")
c6 = cache()
ok("KV computed with the edit is reused under the same edit", c6.get("hits") == c5.get("hits") + 1, (c5, c6))
