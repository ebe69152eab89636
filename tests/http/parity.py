"""LARQL parity over HTTP (tests/cli/parity.sh, issue 15).

usage: parity.py TMPDIR name=PORT ..."""
import json

import client
import re
import struct
import sys

from tap import ok

PORTS = {}


def call(name, method, path, body=None, headers=None, raw=None):
    return client.request(PORTS[name], method, path, body, raw, headers)


DESCRIBE = "/v1/describe?entity=%20France&band=all&min_score=1"


def describe_caching():
    st, h, b = call("cached", "GET", DESCRIBE)
    etag = h.get("etag", "")
    ok("describe: 200 with an ETag", st == 200 and re.fullmatch(r'"[0-9a-f]{16}"', etag), (st, h))
    ok("describe: Cache-Control from --cache-ttl", h.get("cache-control") == "public, max-age=60", h)
    edges = json.loads(b).get("edges", [])
    ok("describe: the planted edge is there", any(e.get("target") == "Paris" for e in edges), edges)
    st2, h2, b2 = call("cached", "GET", DESCRIBE)
    ok("describe: the ETag is stable across calls (latency_ms aside)", st2 == 200 and h2.get("etag") == etag, (h2, b, b2))
    st, h, b = call("cached", "GET", DESCRIBE, headers={"If-None-Match": etag})
    ok("If-None-Match with the current ETag -> 304, no body, the ETag again",
       st == 304 and b == b"" and h.get("etag") == etag and h.get("cache-control") == "public, max-age=60", (st, h, b))
    for inm in ("W/" + etag, '"0000000000000000", ' + etag, "*"):
        st, h, b = call("cached", "GET", DESCRIBE, headers={"If-None-Match": inm})
        ok("If-None-Match %s -> 304" % inm, st == 304 and b == b"", (st, b))
    st, h, b = call("cached", "GET", DESCRIBE, headers={"If-None-Match": '"0000000000000000"'})
    ok("If-None-Match with another tag -> 200 and the body", st == 200 and json.loads(b)["edges"] == edges, (st, b[:200]))
    st, h, b = call("cached", "GET", DESCRIBE + "&limit=1")
    ok("other parameters -> another ETag", st == 200 and h.get("etag") not in ("", etag), h)
    st, h, b = call("plain", "GET", DESCRIBE)
    ok("without --cache-ttl: Cache-Control no-cache (revalidate), same ETag for the same answer",
       st == 200 and h.get("cache-control") == "no-cache" and h.get("etag") == etag, h)
    st, h, b = call("plain", "GET", "/v1/describe?entity=nothing", headers={"If-None-Match": etag})
    ok("another entity does not match the old tag", st == 200, st)
    st, h, b = call("plain", "GET", "/v1/describe?band=all")
    ok("a 400 has no ETag", st == 400 and "etag" not in h, (st, h))
    # an edit changes what describe sees: the tag must change with it
    patch = {"version": 1, "base_model": "", "created_at": "", "description": "no-paris", "tags": [],
             "operations": [{"op": "delete", "layer": 1, "feature": 5, "reason": "test"}]}
    st, h, b = call("plain", "POST", "/v1/patches/apply", {"patch": patch})
    ok("a patch deletes the planted feature -> 200", st == 200, (st, b[:200]))
    st, h, b = call("plain", "GET", DESCRIBE, headers={"If-None-Match": etag})
    ok("after an edit the old ETag no longer matches (200, new tag)", st == 200 and h.get("etag") != etag, (st, h))
    # the server-side cache (--cache-ttl): the same question answers from it, byte for byte
    # (latency_ms included), until an edit
    def hits(srv):
        st, h, b = call(srv, "GET", "/metrics")
        m = re.search(rb"^larql_describe_cache_hits_total (\S+)$", b, re.M)
        return float(m.group(1)) if m else -1
    h0 = hits("cached")
    q = "/v1/describe?entity=%20Germany&band=all&min_score=1"
    st1, _, b1 = call("cached", "GET", q)
    st2, _, b2 = call("cached", "GET", q)
    ok("--cache-ttl: a repeated describe is a cache hit with the same body (latency_ms too)",
       st1 == st2 == 200 and b1 == b2 and hits("cached") == h0 + 1, (h0, hits("cached"), b1[-40:], b2[-40:]))
    st, _, b = call("cached", "POST", "/v1/patches/apply", {"patch": dict(patch, description="no-paris-cached")})
    st3, _, b3 = call("cached", "GET", DESCRIBE)
    ok("--cache-ttl: an edit invalidates the cache (the deleted edge is gone)",
       st == 200 and st3 == 200 and not any(e.get("target") == "Paris" and e.get("layer") == 1
                                            for e in json.loads(b3)["edges"]), b3[:300])
    h1 = hits("cached")
    st4, _, b4 = call("cached", "GET", q, headers={"X-Session-Id": "s1"})
    st5, _, b5 = call("cached", "GET", q)
    ok("--cache-ttl: a session that does not exist sees the global state, and its cached answer",
       st4 == st5 == 200 and b4 == b5 and hits("cached") == h1 + 1, (h1, hits("cached")))
    st, _, _ = call("cached", "POST", "/v1/insert", {"entity": "Atlantis", "relation": "capital",
                                                     "target": "Paris", "mode": "knn"}, headers={"X-Session-Id": "s2"})
    h2 = hits("cached")
    st6, _, _ = call("cached", "GET", q, headers={"X-Session-Id": "s2"})
    st7, _, _ = call("cached", "GET", q, headers={"X-Session-Id": "s2"})
    ok("--cache-ttl: an existing session's answers are cached apart from the global state's",
       st == st6 == st7 == 200 and hits("cached") == h2 + 1, (st, h2, hits("cached")))
    st, _, _ = call("plain", "GET", q)
    ok("without --cache-ttl nothing is cached", st == 200 and hits("plain") == 0, hits("plain"))


def dense_only():
    st, h, b = call("dense", "GET", "/v1/describe?entity=France")
    j = json.loads(b) if b else {}
    ok("dense-only vindex: describe -> 200 with empty edges (as LARQL)",
       st == 200 and j.get("entity") == "France" and j.get("edges") == [] and "latency_ms" in j, (st, b[:300]))
    st, h, b = call("dense", "GET", "/v1/walk?prompt=France")
    ok("dense-only vindex: walk still says it cannot (503 naming dense-only)", st == 503 and b"dense-only" in b, (st, b[:200]))


FFN = "application/x-larql-ffn"


def binary_wire():
    """LARQL's application/x-larql-ffn on /v1/embed, GET /v1/embed/{id} and /v1/logits."""
    st, h, b = call("plain", "POST", "/v1/embed", {"token_ids": [5, 7]})
    rows = json.loads(b)["residual"] if st == 200 else []
    hidden = len(rows[0]) if rows else 0
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    rows = [[f32(v) for v in r] for r in rows]
    body = struct.pack("<3I", 2, 5, 7)
    st, h, b = call("plain", "POST", "/v1/embed", raw=body, headers={"Content-Type": FFN})
    good = st == 200 and h.get("content-type") == FFN and len(b) == 8 + 2 * hidden * 4
    ok("POST /v1/embed with application/x-larql-ffn -> 200 in the same type", good, (st, h, b[:100]))
    if good:
        seq, hid = struct.unpack_from("<2I", b)
        vals = struct.unpack_from("<%df" % (2 * hidden), b, 8)
        ok("x-larql-ffn embed: [u32 seq][u32 hidden][f32...] == the JSON rows",
           (seq, hid) == (2, hidden) and [list(vals[:hidden]), list(vals[hidden:])] == rows, (seq, hid))
    st, h, b2 = call("plain", "POST", "/v1/embed", raw=body, headers={"Content-Type": "application/octet-stream"})
    ok("octet-stream embed still answers, same bytes, octet-stream type",
       st == 200 and h.get("content-type") == "application/octet-stream" and b2 == b, (st, h))
    st, h, b = call("plain", "POST", "/v1/embed", raw=struct.pack("<2I", 3, 5), headers={"Content-Type": FFN})
    ok("x-larql-ffn embed: a truncated body -> 400 naming the sizes", st == 400 and b"bytes" in b, (st, b[:200]))
    st, h, b = call("plain", "GET", "/v1/embed/5")
    ok("GET /v1/embed/5 -> application/x-larql-ffn, Vary: Accept, the row",
       st == 200 and h.get("content-type") == FFN and h.get("vary") == "Accept"
       and list(struct.unpack("<%df" % hidden, b)) == rows[0], (st, h))
    st, h, b = call("plain", "GET", "/v1/embed/5", headers={"Accept": "application/octet-stream"})
    ok("GET /v1/embed/5 Accept octet-stream -> octet-stream", st == 200 and h.get("content-type") == "application/octet-stream", h)
    st, h, b = call("plain", "POST", "/v1/logits", raw=struct.pack("<%df" % hidden, *rows[0]), headers={"Content-Type": FFN})
    st2, h2, b2 = call("plain", "POST", "/v1/logits", {"residual": rows[0]})
    strip = lambda t: re.sub(rb'"latency_ms":[0-9.eE+-]+', b"", t)
    ok("POST /v1/logits with x-larql-ffn == the JSON request", st == 200 and st2 == 200 and strip(b) == strip(b2), (st, b[:200]))


def multi_model():
    st, h, b = call("multi", "GET", "/v1/models")
    data = json.loads(b).get("data", []) if st == 200 else []
    ok("/v1/models lists both vindexes under LARQL's ids and paths",
       [(m["id"], m["path"], m["loaded"]) for m in data] == [("alpha", "/v1/alpha", True), ("beta", "/v1/beta", True)], b[:300])
    targets = {}
    for mid in ("alpha", "beta"):
        st, h, b = call("multi", "GET", "/v1/%s%s" % (mid, DESCRIBE[3:]))
        j = json.loads(b) if st == 200 else {}
        targets[mid] = [e["target"] for e in j.get("edges", [])]
        ok("/v1/%s/describe answers from that model" % mid, st == 200 and j.get("model") == ("org/alpha" if mid == "alpha" else "beta"), (st, b[:200]))
    ok("different answers per model id: alpha knows Paris, beta knows Rome",
       "Paris" in targets["alpha"] and "Rome" not in targets["alpha"] and "Rome" in targets["beta"] and "Paris" not in targets["beta"], targets)
    st, h, b = call("multi", "GET", DESCRIBE)
    ok("the unprefixed route answers for the first model (alpha)", st == 200 and json.loads(b)["model"] == "org/alpha", b[:200])
    st, h, b = call("multi", "GET", "/v1/gamma/describe?entity=x")
    ok("an unknown model id -> 404 model 'gamma' not found", st == 404 and b"model 'gamma' not found" in b, (st, b))
    st, h, b = call("multi", "GET", "/v1/alpha/nothing")
    ok("a known model id with an unknown route -> 404", st == 404, st)
    ra = call("multi", "GET", "/v1/alpha/embed/7", headers={"Accept": "application/json"})
    rb = call("multi", "GET", "/v1/beta/embed/7", headers={"Accept": "application/json"})
    ok("/v1/{id}/embed/{token_id}: each model's own row",
       ra[0] == rb[0] == 200 and json.loads(ra[2])["embedding"] != json.loads(rb[2])["embedding"], (ra[0], rb[0]))
    for mid in ("alpha", "beta"):
        st, h, b = call("multi", "POST", "/v1/%s/infer" % mid, {"prompt": "The capital of France is", "top": 3, "mode": "dense"})
        ok("POST /v1/%s/infer -> 200 with predictions" % mid, st == 200 and len(json.loads(b)["predictions"]) == 3, (st, b[:200]))
        st, h, b = call("multi", "GET", "/v1/%s/stats" % mid)
        ok("GET /v1/%s/stats -> that model" % mid, st == 200 and json.loads(b).get("model", "").endswith(mid), b[:200])
    # each model keeps its own knowledge state: an edit on beta leaves alpha alone
    patch = {"version": 1, "base_model": "", "created_at": "", "description": "no-rome", "tags": [],
             "operations": [{"op": "delete", "layer": 1, "feature": 5, "reason": "test"}]}
    st, h, b = call("multi", "POST", "/v1/beta/patches/apply", {"patch": patch})
    ok("POST /v1/beta/patches/apply -> 200", st == 200, (st, b[:200]))
    st, h, b = call("multi", "GET", "/v1/beta" + DESCRIBE[3:])
    ok("beta no longer says Rome", st == 200 and "Rome" not in [e["target"] for e in json.loads(b)["edges"]], b[:200])
    st, h, b = call("multi", "GET", "/v1/alpha" + DESCRIBE[3:])
    ok("alpha still says Paris (its own state)", st == 200 and "Paris" in [e["target"] for e in json.loads(b)["edges"]], b[:200])
    st, h, b = call("multi", "GET", "/v1/alpha/patches")
    ok("alpha's patch list does not hold beta's patch", st == 200 and b"no-rome" not in b, b[:200])
    # OpenAI routes: the body's "model" picks the model (LARQL's multi-model OpenAI routes)
    for mid in ("alpha", "beta"):
        st, h, b = call("multi", "POST", "/v1/completions", {"model": mid, "prompt": "The capital", "max_tokens": 2, "temperature": 0})
        ok("POST /v1/completions model=%s answers as %s" % (mid, mid), st == 200 and json.loads(b).get("model") == mid, (st, b[:200]))
    # one model: its routes also answer under /v1/{its id}/...
    st, h, b = call("plain", "GET", "/v1/larql-demo" + DESCRIBE[3:])
    st2, h2, b2 = call("plain", "GET", DESCRIBE)
    ok("single-model server: /v1/{model_id}/describe == /v1/describe",
       st == st2 == 200 and h.get("etag") == h2.get("etag"), (st, st2, b[:100]))


def openapi():
    st, h, b = call("multi", "GET", "/v1/openapi.json")
    ok("GET /v1/openapi.json -> 200 JSON", st == 200 and h.get("content-type") == "application/json", (st, h))
    d = json.loads(b) if st == 200 else {}
    ok("OpenAPI 3.0 document with info and paths", d.get("openapi", "").startswith("3.0") and "title" in d.get("info", {})
       and len(d.get("paths", {})) > 20, list(d)[:5])
    ops = [(p, m, o) for p, item in d.get("paths", {}).items() for m, o in item.items()]
    undocumented = [(p, m) for p, m, o in ops if o.get("summary", "undocumented route") == "undocumented route"]
    ok("every served route is documented (none 'undocumented')", not undocumented and len(ops) > 30, undocumented)
    ok("every operation has a 200/101 response and an error response",
       all(("200" in o["responses"] or "101" in o["responses"]) and "default" in o["responses"] for p, m, o in ops),
       [(p, m) for p, m, o in ops if "default" not in o["responses"]])
    posts = [(p, o) for p, m, o in ops if m == "post"]
    ok("every POST documents its request body schema",
       all(o.get("requestBody", {}).get("content") for p, o in posts), [p for p, o in posts if "requestBody" not in o])
    ok("describe documents its query parameters and the 304",
       {x["name"] for x in d["paths"]["/v1/describe"]["get"].get("parameters", [])} >= {"entity", "band", "limit", "min_score", "verbose"}
       and "304" in d["paths"]["/v1/describe"]["get"]["responses"], d["paths"].get("/v1/describe"))
    ok("model-scoped paths are there (/v1/{model_id}/describe with its path parameter)",
       any(x["name"] == "model_id" and x["in"] == "path" for x in d["paths"].get("/v1/{model_id}/describe", {}).get("get", {}).get("parameters", [])),
       sorted(d.get("paths", {}))[:10])
    ok("embed documents the binary wire type", FFN in d["paths"]["/v1/embed"]["post"]["requestBody"]["content"], d["paths"]["/v1/embed"])
    # the document is generated from the route table: every (path, method) it lists is served
    missing = []
    for p, m, o in ops:
        url = p.replace("{model_id}", "alpha").replace("{token_id}", "1")
        url = url.replace("{name}", "index.html" if url.startswith("/assets/") else "none")
        st, h, b = call("multi", m.upper(), url, raw=b"{}" if m == "post" else None,
                        headers={"Content-Type": "application/json"} if m == "post" else None)
        if st in (404, 405) and not (m == "delete" and b"not found" in b and b"model" not in b):
            missing.append((m, url, st, b[:80]))
    ok("every documented path and method is answered (no 404/405 from the router)", not missing, missing)


def warmup():
    """LARQL's POST /v1/warmup: its fields, the layer list, bad input"""
    st, _, b = call("plain", "POST", "/v1/warmup", {"skip_weights": True})
    j = json.loads(b) if st == 200 else {}
    ok("warmup skip_weights -> 200, weights_loaded false, layers_prefetched and total_ms integers",
       st == 200 and j.get("weights_loaded") is False and isinstance(j.get("layers_prefetched"), int)
       and isinstance(j.get("total_ms"), int), (st, b[:200]))
    st, _, b = call("plain", "POST", "/v1/warmup", {})
    j = json.loads(b) if st == 200 else {}
    ok("warmup {} -> 200 with model, hnsw_built and the weights loaded",
       st == 200 and isinstance(j.get("model"), str) and isinstance(j.get("hnsw_built"), bool)
       and j.get("weights_loaded") is True, (st, b[:200]))
    st, _, b = call("plain", "POST", "/v1/warmup", {"skip_weights": True, "layers": [0]})
    ok("warmup of layer [0] prefetches 1", st == 200 and json.loads(b).get("layers_prefetched") == 1, (st, b[:200]))
    st, _, b = call("plain", "POST", "/v1/warmup", {"skip_weights": True, "layers": [999]})
    ok("warmup of a layer out of range prefetches 0", st == 200 and json.loads(b).get("layers_prefetched") == 0,
       (st, b[:200]))
    st, _, b = call("plain", "POST", "/v1/warmup", {"layers": "all"})
    ok("warmup with layers not an array -> 422 (as LARQL)", st == 422, (st, b[:200]))


def main():
    for a in sys.argv[2:]:
        k, v = a.split("=")
        PORTS[k] = int(v)
    if "cached" in PORTS and "plain" in PORTS:
        describe_caching()
        binary_wire()
        warmup()
    if "dense" in PORTS:
        dense_only()
    if "multi" in PORTS and "plain" in PORTS:
        multi_model()
        openapi()


if __name__ == "__main__":
    main()
