"""One library, one path (tests/cli/one_path.sh): a GGUF, its full vindex and its dense-only
vindex served side by side; every answer is compared with another front end's or another
model kind's.

usage: one_path.py TMPDIR gguf=PORT full=PORT dense=PORT opts=PORT"""
import json

import client
import math
import os
import re
import struct
import sys

from tap import ok

TIMING = re.compile(r'"(latency_ms|walk_ms|dense_ms)":[0-9.eE+-]+')
PROMPTS = ["The capital of Atlantis is", "the model"]


def call(port, method, path, body=None, raw=None, headers=None):
    st, _, out = client.request(port, method, path, body, raw, headers)
    return st, out


def untimed(text):
    return TIMING.sub('"T":0', text.strip())


def tag(prompt):
    return "".join(ch if ch.isalpha() else "_" for ch in prompt) + "_"


def infer_tests(tmp, ports):
    for kind in ("gguf", "full", "dense"):
        for mode in ("walk", "dense", "compare"):
            for prompt in PROMPTS:
                st, body = call(ports[kind], "POST", "/v1/infer", {"prompt": prompt, "top": 4, "mode": mode})
                cli = open(os.path.join(tmp, "cli_%s_%s_%s.json" % (kind, mode, tag(prompt)[:-1]))).read()
                ok("%s %s '%s': POST /v1/infer == larql infer --json (timings aside)" % (kind, mode, prompt),
                   st == 200 and untimed(body.decode()) == untimed(cli), (st, body[:300], cli[:300]))
    # what the bodies say
    body = lambda kind, mode, p=PROMPTS[0]: json.loads(call(ports[kind], "POST", "/v1/infer",
                                                            {"prompt": p, "top": 4, "mode": mode})[1])
    w = body("full", "walk")
    ko = w.get("knn_override", {})
    ok("full vindex walk: the KNN store saved in the directory fires (mode walk, Poseidonia first, p 1.0)",
       w.get("mode") == "walk" and ko.get("token") == "Poseidonia" and ko.get("source") == "knn_override"
       and w["predictions"][0] == {"token": "Poseidonia", "probability": 1.0} and len(w["predictions"]) == 4, w)
    d = body("full", "dense")
    ok("full vindex dense: no override, mode bitnet", d.get("mode") == "bitnet" and "knn_override" not in d, d)
    ok("walk keeps the model's own top-1 as model_top1 and its top-3 after the override",
       ko.get("model_top1", {}).get("token") == d["predictions"][0]["token"]
       and w["predictions"][1:] == d["predictions"][:3], (w, d))
    c = body("full", "compare")
    ok("full vindex compare: walk and dense halves, the override on the walk half",
       list(c)[:5] == ["prompt", "walk", "walk_ms", "dense", "dense_ms"] and c["walk"] == w["predictions"]
       and c["dense"] == d["predictions"] and c.get("knn_override", {}).get("token") == "Poseidonia", c)
    other = body("full", "walk", PROMPTS[1])
    ok("full vindex walk: a prompt far from the key is not overridden",
       "knn_override" not in other and other["predictions"] == body("full", "dense", PROMPTS[1])["predictions"], other)
    for kind in ("gguf", "dense"):
        b = body(kind, "walk")
        ok("%s: walk is coerced to dense and says so (mode bitnet, no override)" % kind,
           b.get("mode") == "bitnet" and "knn_override" not in b, b)
        b = body(kind, "compare")
        ok("%s: compare has only the dense half" % kind, list(b) == ["prompt", "dense", "dense_ms", "latency_ms"], b)
    g = body("gguf", "dense")
    ok("the three model kinds predict the same tokens (f32 vindex == GGUF)",
       g["predictions"] == d["predictions"] == body("dense", "dense")["predictions"], (g, d))
    ok("tokens are text, not BPE pieces", all("\u0120" not in p["token"] for p in g["predictions"]), g)
    st, b = call(ports["full"], "POST", "/v1/infer", {"prompt": PROMPTS[0], "mode": "walk"},
                 headers={"X-Session-Id": "s-1"})
    ok("X-Session-Id: an unknown session sees the global state", st == 200
       and json.loads(b).get("knn_override", {}).get("token") == "Poseidonia", b[:300])


def floats(data, skip=0):
    n = (len(data) - skip) // 4
    return list(struct.unpack("<%df" % n, data[skip:skip + 4 * n]))


def hidden_tests(ports):
    g, v = ports["gguf"], ports["full"]
    for kind in ("full", "dense"):
        p = ports[kind]
        st, body = call(p, "POST", "/v1/embed", {"token_ids": [1, 5, 9]})
        st2, body2 = call(g, "POST", "/v1/embed", {"token_ids": [1, 5, 9]})
        ok("%s vindex: POST /v1/embed 200 and == the GGUF's rows" % kind,
           st == 200 and st2 == 200 and json.loads(body)["residual"] == json.loads(body2)["residual"], body[:200])
        ids = struct.pack("<4I", 3, 2, 4, 6)
        st, body = call(p, "POST", "/v1/embed", raw=ids, headers={"Content-Type": "application/octet-stream"})
        st2, body2 = call(g, "POST", "/v1/embed", raw=ids, headers={"Content-Type": "application/octet-stream"})
        ok("%s vindex: binary /v1/embed == the GGUF's" % kind, st == 200 and body == body2, (st, body[:100]))
        st, body = call(p, "GET", "/v1/embed/7")
        st2, body2 = call(g, "GET", "/v1/embed/7")
        ok("%s vindex: GET /v1/embed/7 == the GGUF's" % kind, st == 200 and body == body2 and len(body) > 0, st)
        st, body = call(p, "POST", "/v1/embeddings", {"input": "the model"})
        st2, body2 = call(g, "POST", "/v1/embeddings", {"input": "the model"})
        ok("%s vindex: POST /v1/embeddings == the GGUF's" % kind, st == 200 and st2 == 200
           and json.loads(body)["data"] == json.loads(body2)["data"], body[:200])
        # a residual: the embedding row of token 7, as a hidden state
        h = floats(call(g, "GET", "/v1/embed/7")[1])
        st, body = call(p, "POST", "/v1/logits", {"residual": h, "top_k": 5})
        st2, body2 = call(g, "POST", "/v1/logits", {"residual": h, "top_k": 5})
        a, b = json.loads(body), json.loads(body2)
        ok("%s vindex: POST /v1/logits 200 and == the GGUF's (ids and probabilities)" % kind,
           st == 200 and st2 == 200 and a["top_k"] == b["top_k"] and len(a["top_k"]) == 5, (body[:300], body2[:300]))
        st, body = call(p, "POST", "/v1/logits", raw=struct.pack("<%df" % len(h), *h),
                        headers={"Content-Type": "application/octet-stream"})
        ok("%s vindex: binary /v1/logits == JSON /v1/logits" % kind,
           st == 200 and json.loads(body)["top_k"] == a["top_k"], body[:200])
    # probabilities are a real softmax: the top-5 sum to at most 1
    st, body = call(v, "POST", "/v1/logits", {"residual": floats(call(g, "GET", "/v1/embed/3")[1]), "top_k": 5})
    ps = [e["prob"] for e in json.loads(body)["top_k"]]
    ok("logits: descending probabilities summing to <= 1", ps == sorted(ps, reverse=True) and sum(ps) <= 1.000001, ps)


def runtime_tests(ports):
    r = lambda k: json.loads(call(ports[k], "GET", "/v1/runtime")[1])
    a, b = r("full"), r("opts")
    ok("runtime: default KV f32, lm_head bounded (its int8 copy reported)", a.get("kv_type") == "f32"
       and a.get("lm_head") == "bounded" and a.get("lm_head_bounded", {}).get("enabled") is True
       and a["lm_head_bounded"]["copy_bytes_per_token"] < a["lm_head_bounded"]["exact_bytes_per_token"], a)
    ok("runtime: --kv f16 --lm-head q8 --weights mmap are in force",
       b.get("kv_type") == "f16" and b.get("lm_head") == "q8" and b.get("weights") == "mmap", b)
    ok("runtime: an f16 KV cache reports half the bytes per session",
       a["kv_bytes_per_session"] > 0 and b["kv_bytes_per_session"] * 2 == a["kv_bytes_per_session"], (a, b))
    st, body = call(ports["opts"], "POST", "/v1/infer", {"prompt": PROMPTS[0], "mode": "walk"})
    ok("the q8/f16 server answers infer (the override still fires)", st == 200
       and json.loads(body).get("knn_override", {}).get("token") == "Poseidonia", body[:300])


if __name__ == "__main__":
    tmp = sys.argv[1]
    ports = dict(a.split("=") for a in sys.argv[2:])
    ports = {k: int(p) for k, p in ports.items()}
    infer_tests(tmp, ports)
    hidden_tests(ports)
    runtime_tests(ports)
