#!/usr/bin/env python3
"""Security basics against a running server (tests/cli/security.sh): request paths never
reach a file outside --patch-dir ('..', absolute paths, hidden names, symbolic links,
directories), and every per-request size has a limit with a clear 400/413: prompt and
token counts, n, logprobs / top_logprobs, max_tokens, stop strings, describe/walk sizes.
    limits.py PORT PATCH_DIR OUTSIDE_PATCH"""
import json

import client
import sys

from tap import ok
import tap

PORT, PATCH_DIR, OUTSIDE = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def req(method, path, body=None, headers=None):
    raw = body if isinstance(body, bytes) else None
    h = dict(headers or {})
    if raw is not None:
        h.setdefault("Content-Type", "application/json")
    st, _, out = client.request(PORT, method, path, None if raw is not None else body, raw, h)
    return st, client.as_json(out)


def msg(j):
    if isinstance(j, dict):
        e = j.get("error")
        return e.get("message", "") if isinstance(e, dict) else str(e)
    return str(j)


# ---- paths: only plain regular files directly in --patch-dir ----
for name, why in [("../outside.vlp", "'..'"), (OUTSIDE, "absolute path"), ("sub/../../outside.vlp", "slash"),
                  ("..", "dot-dot"), (".hidden.vlp", "hidden name"), ("link.vlp", "symbolic link"),
                  ("dir.vlp", "directory"), ("", "empty")]:
    st, j = req("POST", "/v1/patches/apply", {"url": name})
    ok("patches/apply url %r (%s) -> 400, nothing read" % (name, why),
       st == 400 and "patch-dir" in msg(j), (st, j))
st, j = req("POST", "/v1/patches/apply", {"url": "good.vlp"})
ok("patches/apply of a plain file in --patch-dir -> 200", st == 200, (st, j))
st, j = req("GET", "/v1/patches")
ok("only the good patch is applied", st == 200 and [p["name"] for p in j["patches"]] == ["good"], j)
st, j = req("DELETE", "/v1/patches/..%2F..%2Fetc")
ok("DELETE /v1/patches/<encoded ../> -> 4xx, nothing removed", 400 <= st < 500, (st, j))

# session ids name journal files under --state-dir/sessions: no separator gets through
ins = {"entity": "Atlantis", "relation": "capital", "target": "the", "layer": 1}
# (ids are [A-Za-z0-9_-]{1,64}: '.' and '..' would name the files '..lqj' and '...lqj')
for sid in ["../../escape", "/abs", "a/b", "x" * 200, "a b", "..", ".", "a.b", "a:b"]:
    st, j = req("POST", "/v1/insert", ins, headers={"X-Session-Id": sid})
    ok("insert with X-Session-Id %r -> 400" % sid[:20], st == 400 and "X-Session-Id" in msg(j), (st, j))
st, j = req("POST", "/v1/insert", ins, headers={"X-Session-Id": "Az09_-" + "x" * 58})
ok("insert with a 64-character X-Session-Id of [A-Za-z0-9_-] -> 200", st == 200, (st, j))

# ---- per-request limits ----
chat = {"messages": [{"role": "user", "content": "hi"}]}
cases = [
    ("n=129", "/v1/chat/completions", dict(chat, n=129), 400, "n"),
    ("n=129 streamed", "/v1/chat/completions", dict(chat, n=129, stream=True), 400, "n"),
    ("n=0", "/v1/completions", {"prompt": "hi", "n": 0}, 400, "n"),
    ("top_logprobs=21", "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=21), 400, "top_logprobs"),
    ("completions logprobs=21", "/v1/completions", {"prompt": "hi", "logprobs": 21}, 400, "logprobs"),
    ("max_tokens=-1", "/v1/completions", {"prompt": "hi", "max_tokens": -1}, 400, "max_tokens"),
    ("17 stop strings", "/v1/completions", {"prompt": "hi", "stop": ["x%d" % i for i in range(17)]}, 400, "stop"),
    ("prompt longer than the context", "/v1/completions", {"prompt": "word " * 3000, "max_tokens": 1}, 400, "context"),
    ("prompt token id out of range", "/v1/completions", {"prompt": [1, 2, 10 ** 9], "max_tokens": 1}, 400, ""),
    ("body over --max-body", "/v1/completions", b'{"prompt": "' + b"a" * 300000 + b'"}', 413, ""),
    ("describe limit huge", "/v1/describe?entity=the&limit=100000000", None, 400, "limit"),
    ("walk top huge", "/v1/walk?prompt=the&top=100000000", None, 400, "top"),
]
for name, path, body, want, word in cases:
    st, j = req("POST" if body is not None else "GET", path, body)
    ok("limit: %s -> %d naming '%s'" % (name, want, word), st == want and word in msg(j).lower(), (st, msg(j)[:200]))
# a huge max_tokens is clamped to the context, not refused and not allocated for
st, j = req("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2 ** 31 - 1, "temperature": 0})
ok("max_tokens 2^31-1: answered within the context", st == 200 and j["usage"]["completion_tokens"] <= 256, (st, j))
print("# limits done, %d failed" % tap.FAILS)
