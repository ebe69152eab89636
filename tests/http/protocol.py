#!/usr/bin/env python3
"""Raw-protocol tests of a running `larql serve` (stdlib only: http.client and sockets).

usage: protocol.py main PORT            routes, bad input, concurrency, slow clients
       protocol.py guarded PORT KEY     auth, CORS, --max-concurrent 1, client closing mid-stream
       protocol.py batch PORT           concurrent streams decode together and answer as alone
Prints TAP-style "ok - name" / "not ok - name" lines; run by tests/cli/server.sh."""
import http.client
import json
import socket
import struct
import sys

import tap
from tap import ok
import threading
import time
import urllib.error
import urllib.request

HOST = "127.0.0.1"
PORT = 0
KEY = None



def req(method, path, body=None, headers=None, raw=None, timeout=30):
    """-> (status, headers dict (lowercase), body bytes)"""
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    h = {}
    if KEY:
        h["Authorization"] = "Bearer " + KEY
    if body is not None:
        raw = json.dumps(body).encode()
    if raw is not None:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    c.request(method, path, body=raw, headers=h)
    r = c.getresponse()
    data = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, data


def jreq(method, path, body=None, **kw):
    st, hd, data = req(method, path, body, **kw)
    try:
        j = json.loads(data) if data else None
    except ValueError:
        j = None
    return st, hd, j, data


def err_msg(j):
    """message of either envelope"""
    if not isinstance(j, dict) or "error" not in j:
        return None
    e = j["error"]
    return e.get("message") if isinstance(e, dict) else e


def expect_error(name, method, path, body=None, status=400, contains=None, **kw):
    st, hd, j, data = jreq(method, path, body, **kw)
    m = err_msg(j)
    good = st == status and isinstance(m, str) and m and (contains is None or contains in m)
    ok(name, good, "status %d body %r" % (st, data[:300]))
    return st, hd, j


def sse(path, body, keep=False):
    """POST and parse an SSE stream -> (status, [event payload strings])"""
    c = http.client.HTTPConnection(HOST, PORT, timeout=60)
    h = {"Content-Type": "application/json"}
    if KEY:
        h["Authorization"] = "Bearer " + KEY
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    data = r.read().decode("utf-8", "replace")
    c.close()
    events = []
    for block in data.split("\n\n"):
        if not block.strip():
            continue
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(line[6:])
            elif line and not line.startswith(":"):
                events.append("!bad line: " + line)
    return r.status, r.getheader("Content-Type", ""), events


def strip_volatile(j):
    if isinstance(j, dict):
        return {k: strip_volatile(v) for k, v in j.items()
                if k not in ("latency_ms", "walk_ms", "dense_ms", "id", "created")}
    if isinstance(j, list):
        return [strip_volatile(v) for v in j]
    return j


def stream_text(events, chat):
    out = ""
    for e in events:
        if e == "[DONE]":
            continue
        j = json.loads(e)
        for ch in j.get("choices", []):
            if chat:
                out += ch["delta"].get("content", "") or ""
            else:
                out += ch.get("text", "")
    return out


OCTET = {"Content-Type": "application/octet-stream"}


def f32(x):
    """x rounded to f32, as the server holds it (JSON carries 9 significant digits)"""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def ids_body(ids, n=None):
    """binary /v1/embed body: [u32 n][u32 ids...] little-endian"""
    return struct.pack("<I%dI" % len(ids), len(ids) if n is None else n, *ids)


def embed_binary_tests(tag, vocab, hidden):
    """binary forms of /v1/embed and GET /v1/embed/{id}: same numbers as the JSON form"""
    st, _, j, raw = jreq("POST", "/v1/embed", {"token_ids": [1, 2, 1]})
    ok(tag + "embed JSON 3 ids", st == 200 and j["seq_len"] == 3, raw[:200])
    rows = [[f32(v) for v in r] for r in j["residual"]] if st == 200 else []
    st, hd, data = req("POST", "/v1/embed", raw=ids_body([1, 2, 1]), headers=OCTET)
    good = st == 200 and hd.get("content-type") == "application/octet-stream" and len(data) == 8 + 3 * hidden * 4
    ok(tag + "embed binary: 200 octet-stream, [u32 seq][u32 hidden][f32...]", good, (st, hd.get("content-type"), data[:200]))
    if good:
        seq, hid = struct.unpack_from("<II", data)
        vals = struct.unpack_from("<%df" % (3 * hidden), data, 8)
        got = [list(vals[i * hidden:(i + 1) * hidden]) for i in range(3)]
        ok(tag + "embed binary header seq/hidden", (seq, hid) == (3, hidden), (seq, hid))
        ok(tag + "embed binary == JSON embed (every f32 exact)", got == rows, (got[0][:4], rows[0][:4] if rows else None))
    st, _, data = req("POST", "/v1/embed", raw=ids_body([2]), headers={"Content-Type": "Application/Octet-Stream; x=1"})
    ok(tag + "embed binary: media type case-insensitive, parameters ignored",
       st == 200 and len(rows) > 1 and list(struct.unpack_from("<%df" % hidden, data, 8)) == rows[1], (st, data[:100]))

    # GET /v1/embed/{token_id}
    st, hd, data = req("GET", "/v1/embed/2")
    good = st == 200 and hd.get("content-type") == "application/x-larql-ffn" and len(data) == hidden * 4
    ok(tag + "GET /v1/embed/2: binary f32 row by default, LARQL's application/x-larql-ffn", good, (st, hd, data[:200]))
    ok(tag + "GET /v1/embed/2: immutable Cache-Control", hd.get("cache-control") == "public, max-age=31536000, immutable", hd)
    row_bin = list(struct.unpack("<%df" % hidden, data)) if good else None
    ok(tag + "GET /v1/embed/2 binary == POST /v1/embed JSON row", len(rows) > 1 and row_bin == rows[1], (row_bin and row_bin[:4]))
    st, hd, j, raw = jreq("GET", "/v1/embed/2", headers={"Accept": "application/json"})
    good = st == 200 and hd.get("content-type") == "application/json" and j["token_id"] == 2 and j["hidden_size"] == hidden
    ok(tag + "GET /v1/embed/2 Accept json: {token_id, embedding, hidden_size}", good, raw[:200])
    ok(tag + "GET /v1/embed/2 JSON == binary", good and [f32(v) for v in j["embedding"]] == row_bin, raw[:200])
    ok(tag + "GET /v1/embed/2 JSON: immutable Cache-Control", hd.get("cache-control") == "public, max-age=31536000, immutable", hd)
    st, _, data = req("GET", "/v1/embed/2/")
    ok(tag + "GET /v1/embed/2/ (trailing slash) same row", st == 200 and row_bin is not None and data == struct.pack("<%df" % hidden, *row_bin), st)


def embed_binary_error_tests(vocab, hidden):
    """bad binary bodies, bad ids in the path, the body limit, and the routes around them"""
    def bad(name, body, contains=None, status=400, headers=OCTET):
        st, hd, d = req("POST", "/v1/embed", raw=body, headers=headers)
        try:
            m = err_msg(json.loads(d))
        except ValueError:
            m = None
        ok(name, st == status and hd.get("content-type") == "application/json" and isinstance(m, str) and
           (contains is None or contains in m), (st, d[:300]))
    bad("embed binary: empty body -> 400", b"", contains="bytes")
    bad("embed binary: 3-byte body -> 400", b"\x01\x00\x00", contains="bytes")
    bad("embed binary: n = 0 -> 400", struct.pack("<I", 0), contains="n = 0")
    bad("embed binary: n = 4097 (over the 4096 limit) -> 400", ids_body([1] * 4097), contains="at most 4096")
    bad("embed binary: n = 2 with 3 ids -> 400 naming the size", ids_body([1, 2, 3], n=2), contains="needs exactly 12")
    bad("embed binary: n = 3 with 2 ids -> 400", ids_body([1, 2], n=3), contains="needs exactly 16")
    bad("embed binary: n huge, short body -> 400", struct.pack("<II", 0xFFFFFFFF, 1), contains="at most")
    bad("embed binary: id == vocab -> 400", ids_body([1, vocab]), contains="out of range")
    bad("embed binary: id 0xFFFFFFFF -> 400", ids_body([0xFFFFFFFF]), contains="out of range")
    bad("embed binary: body over --max-body -> 413", b"\0" * 70000, status=413, contains="limit")
    bad("embed binary body without the octet-stream type -> JSON parse 400", ids_body([1]),
        headers={"Content-Type": "application/json"}, contains="JSON")
    st, _, data = req("POST", "/v1/embed", raw=ids_body([0, vocab - 1] * 2048), headers=OCTET)
    ok("embed binary: n = 4096 (the limit) accepted", st == 200 and len(data) == 8 + 4096 * hidden * 4, (st, data[:200]))

    expect_error("GET /v1/embed/abc -> 400", "GET", "/v1/embed/abc", contains="token id")
    expect_error("GET /v1/embed/-1 -> 400", "GET", "/v1/embed/-1", contains="token id")
    expect_error("GET /v1/embed/1.5 -> 400", "GET", "/v1/embed/1.5", contains="token id")
    expect_error("GET /v1/embed/{vocab} -> 400 out of range", "GET", "/v1/embed/%d" % vocab, contains="out of range")
    expect_error("GET /v1/embed/4294967296 -> 400", "GET", "/v1/embed/4294967296", contains="token id")
    expect_error("GET /v1/embed/<40 digits> -> 400", "GET", "/v1/embed/" + "9" * 40, contains="token id")
    expect_error("GET /v1/embed (no id) stays 405", "GET", "/v1/embed", status=405)
    expect_error("GET /v1/embed/ (no id) stays 405", "GET", "/v1/embed/", status=405)
    expect_error("POST /v1/embed/2 -> 405", "POST", "/v1/embed/2", {"token_ids": [1]}, status=405)
    expect_error("GET /v1/embed/2/3 -> 404", "GET", "/v1/embed/2/3", status=404)
    expect_error("GET /v1/embedX -> 404 (prefix matching needs the slash)", "GET", "/v1/embedX", status=404)
    st, _, j, raw = jreq("POST", "/v1/embeddings", {"input": "hello"})
    ok("POST /v1/embeddings unaffected by the /v1/embed/ prefix route", st == 200 and j["object"] == "list", raw[:200])
    st, _, data = req("GET", "/metrics")
    text = data.decode()
    ok("metrics: GET /v1/embed/{id} counted under its own route label",
       'route="/v1/embed/{token_id}",status="200"' in text and 'route="/v1/embed/{token_id}",status="400"' in text,
       [l for l in text.splitlines() if "embed" in l][:8])


def logits_binary_tests(resid, hidden):
    st, _, j, raw = jreq("POST", "/v1/logits", {"residual": resid})
    ok("logits JSON default top_k 5", st == 200 and len(j["top_k"]) == 5, raw[:300])
    st2, hd, j2, raw2 = jreq("POST", "/v1/logits", raw=struct.pack("<%df" % hidden, *resid), headers=OCTET)
    ok("logits binary f32 body -> same JSON as the JSON form",
       st2 == 200 and hd.get("content-type") == "application/json" and st == 200 and j2["top_k"] == j["top_k"],
       (raw[:300], raw2[:300]))
    expect_error("logits binary wrong length -> 400 naming the size", "POST", "/v1/logits",
                 raw=struct.pack("<%df" % (hidden - 1), *resid[:-1]), headers=OCTET, contains="expected %d" % (hidden * 4))
    expect_error("logits binary empty body -> 400", "POST", "/v1/logits", raw=b"", headers=OCTET, contains="expected")
    expect_error("logits binary NaN -> 400", "POST", "/v1/logits",
                 raw=struct.pack("<%df" % hidden, float("nan"), *resid[1:]), headers=OCTET, contains="finite")


def oversize_body_tests():
    """Bodies over --max-body (64 KiB here) from clients that write the whole body before
    reading the reply, as http.client, urllib and requests do. 8 MiB is more than loopback's
    socket buffers hold, so a server that answered without reading the body would leave such
    a client with a broken pipe or a reset instead of the 413."""
    big = b"x" * (8 << 20)
    try:
        st, _, j, data = jreq("POST", "/v1/completions", raw=big)
        ok("http.client writing 8 MiB before reading gets the 413", st == 413 and "limit" in (err_msg(j) or ""),
           (st, data[:200]))
    except OSError as e:
        ok("http.client writing 8 MiB before reading gets the 413", False, repr(e))
    url = "http://%s:%d/v1/chat/completions" % (HOST, PORT)
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=big, headers={"Content-Type": "application/json"}),
                               timeout=30)
        ok("urllib POST of 8 MiB gets the 413", False, "no error")
    except urllib.error.HTTPError as e:
        ok("urllib POST of 8 MiB gets the 413", e.code == 413 and b"limit" in e.read(), e.code)
    except OSError as e:
        ok("urllib POST of 8 MiB gets the 413", False, repr(e))
    # the body was read to its end, so the connection serves the next request
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    try:
        c.request("POST", "/v1/completions", body=big[:100000], headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first = c.sock  # http.client drops it after reading a reply that closes the connection
        r.read()
        c.request("GET", "/v1/health")
        r2 = c.getresponse()
        ok("after a drained 413 the connection is kept and answers the next request",
           r.status == 413 and not r.will_close and c.sock is first and r2.status == 200 and b'"ok"' in r2.read(),
           (r.status, r.will_close, r2.status))
    except OSError as e:
        ok("after a drained 413 the connection is kept and answers the next request", False, repr(e))
    c.close()

    def head_only(name, extra):
        """Headers announcing a body too big to drain, then read without sending it: the 413
        comes at once and the server closes the connection."""
        s = socket.create_connection((HOST, PORT), timeout=30)
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1073741824\r\n" + extra + b"\r\n")
            got = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
            ok(name, got.startswith(b"HTTP/1.1 413") and b"limit" in got and b"100 Continue" not in got, got[:300])
        except OSError as e:
            ok(name, False, repr(e))
        s.close()
    # a chunked body (no length announced) is drained up to the bound, then the connection
    # is closed: 40 MiB cannot all be written
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    c.putrequest("POST", "/v1/completions")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    piece = b"x" * (1 << 20)
    try:
        for _ in range(40):
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        c.send(b"0\r\n\r\n")
        ok("chunked 40 MiB: the server stops reading past the drain bound", False, c.getresponse().status)
    except OSError:
        ok("chunked 40 MiB: the server stops reading past the drain bound", True)
    c.close()
    head_only("1 GiB Content-Length (past the drain bound) -> 413 at once, connection closed", b"")
    head_only("Expect: 100-continue with a body over the limit -> 413, no 100 Continue",
              b"Expect: 100-continue\r\n")


def main_tests():
    # ---- LARQL routes ----
    st, hd, j, _ = jreq("GET", "/v1/health")
    ok("health 200 status ok", st == 200 and j["status"] == "ok" and "uptime_seconds" in j and "requests_served" in j, j)
    st, _, j, _ = jreq("GET", "/v1/models")
    ok("models list", st == 200 and j["object"] == "list" and j["data"][0]["object"] == "model" and j["data"][0]["owned_by"] == "larql", j)
    model_id = j["data"][0]["id"]
    st, _, j, _ = jreq("GET", "/v1/stats")
    ok("stats LARQL fields + counters", st == 200 and all(k in j for k in (
        "model", "family", "layers", "hidden_size", "vocab_size", "loaded", "requests_served",
        "generated_tokens", "decode_tokens_per_second", "active_streams")), j)
    vocab = j["vocab_size"]
    hidden = j["hidden_size"]

    st, _, j, raw = jreq("POST", "/v1/infer", {"prompt": "The capital of France is", "top": 3, "mode": "walk"})
    ok("infer walk (pg_infer-style body) -> predictions", st == 200 and len(j["predictions"]) == 3 and
       all(0 <= p["probability"] <= 1 for p in j["predictions"]) and j["mode"] in ("bitnet", "dense"), raw)
    probs = [p["probability"] for p in j["predictions"]]
    ok("infer probabilities descending", probs == sorted(probs, reverse=True), probs)
    st, _, j, raw = jreq("POST", "/v1/infer", {"prompt": "The capital of France is", "top": 3, "mode": "compare"})
    ok("infer compare -> dense list", st == 200 and len(j["dense"]) == 3 and "dense_ms" in j, raw)
    st, _, j2, _ = jreq("POST", "/v1/infer", {"prompt": "The capital of France is"})
    ok("infer default top 5", st == 200 and len(j2["predictions"]) == 5, j2)
    expect_error("infer unknown mode -> 400", "POST", "/v1/infer", {"prompt": "x", "mode": "teleport"}, contains="mode")
    expect_error("infer missing prompt -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/infer", {"top": 3}, contains="prompt", status=422)
    expect_error("infer empty prompt -> 400", "POST", "/v1/infer", {"prompt": ""}, contains="empty")
    expect_error("infer top wrong type -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/infer", {"prompt": "x", "top": "five"}, contains="top", status=422)
    expect_error("infer negative top -> 400", "POST", "/v1/infer", {"prompt": "x", "top": -2}, contains="top")
    expect_error("infer prompt wrong type -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/infer", {"prompt": 12}, contains="prompt", status=422)

    st, _, j, raw = jreq("GET", "/v1/token/encode?text=Hello%20world")
    ok("token/encode", st == 200 and isinstance(j["token_ids"], list) and j["token_ids"] and j["text"] == "Hello world", raw)
    ids = ",".join(str(i) for i in j["token_ids"])
    st, _, j, raw = jreq("GET", "/v1/token/decode?ids=" + ids)
    ok("token/decode round trip", st == 200 and j["text"] == "Hello world", raw)
    expect_error("token/decode out of range -> 400", "GET", "/v1/token/decode?ids=1,%d" % (vocab + 5), contains="range")
    expect_error("token/decode garbage -> 400", "GET", "/v1/token/decode?ids=1,x", contains="ids")
    expect_error("token/decode negative -> 400", "GET", "/v1/token/decode?ids=-1")
    expect_error("token/encode missing text -> 400", "GET", "/v1/token/encode", contains="text")
    expect_error("token/encode invalid UTF-8 -> 400", "GET", "/v1/token/encode?text=%FF%FE", contains="UTF-8")

    st, _, j, raw = jreq("POST", "/v1/embed", {"token_ids": [1, 2]})
    ok("embed 2 ids", st == 200 and j["seq_len"] == 2 and j["hidden_size"] == hidden and len(j["residual"]) == 2 and len(j["residual"][0]) == hidden, raw[:200])
    resid = j["residual"][1] if st == 200 else [0.0] * hidden
    expect_error("embed id out of range -> 400", "POST", "/v1/embed", {"token_ids": [vocab]})
    expect_error("embed missing token_ids -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/embed", {}, status=422)
    expect_error("embed token_ids wrong type -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/embed", {"token_ids": "1,2"}, status=422)
    st, _, j, raw = jreq("POST", "/v1/logits", {"residual": resid, "top_k": 4})
    ok("logits top_k", st == 200 and len(j["top_k"]) == 4 and all("token_id" in t and "prob" in t for t in j["top_k"]), raw[:300])
    expect_error("logits wrong residual length -> 400", "POST", "/v1/logits", {"residual": [1.0, 2.0]}, contains="residual")
    expect_error("logits non-number residual -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/logits", {"residual": ["a"] * hidden}, status=422)
    embed_binary_tests("", vocab, hidden)
    embed_binary_error_tests(vocab, hidden)
    logits_binary_tests(resid, hidden)

    st, _, j, raw = jreq("GET", "/v1/describe?entity=France")
    ok("describe without a vindex -> 503 naming the vindex", st == 503 and "vindex" in err_msg(j), raw)
    expect_error("describe missing entity -> 400", "GET", "/v1/describe", contains="entity")
    expect_error("walk missing prompt -> 400", "GET", "/v1/walk", contains="prompt")

    # ---- generic HTTP errors ----
    expect_error("unknown route -> 404 JSON", "GET", "/v1/nope", status=404)
    expect_error("unknown route (POST) -> 404 JSON", "POST", "/nothing/here", {"a": 1}, status=404)
    st, hd, j = expect_error("GET /v1/completions -> 405", "GET", "/v1/completions", status=405)
    ok("405 carries Allow: POST", hd.get("allow") == "POST", hd)
    expect_error("POST /v1/health -> 405", "POST", "/v1/health", {}, status=405)
    expect_error("DELETE /v1/models -> 405", "DELETE", "/v1/models", status=405)
    expect_error("malformed JSON -> 400", "POST", "/v1/completions", raw=b'{"prompt": "x",', contains="JSON")
    expect_error("JSON not an object -> 400", "POST", "/v1/completions", raw=b'["x"]', contains="object")
    expect_error("empty body -> 400", "POST", "/v1/chat/completions", raw=b"")
    expect_error("invalid UTF-8 in JSON -> 400", "POST", "/v1/completions", raw=b'{"prompt": "ab\xff\xfe"}')
    expect_error("body over limit -> 413", "POST", "/v1/completions", {"prompt": "x" * 70000}, status=413)
    # chunked upload without Content-Length
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    c.putrequest("POST", "/v1/completions")
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Content-Type", "application/json")
    c.endheaders()
    try:
        for _ in range(20):
            piece = b"x" * 5000
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        c.send(b"0\r\n\r\n")
        r = c.getresponse()
        data = r.read()
        ok("chunked body over limit -> 413", r.status == 413 and b"limit" in data, (r.status, data[:200]))
    except OSError as e:
        ok("chunked body over limit -> 413", False, e)
    c.close()
    oversize_body_tests()

    # ---- OpenAI: completions ----
    base = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}
    st, _, j, raw = jreq("POST", "/v1/completions", base)
    ok("completions non-stream", st == 200 and j["object"] == "text_completion" and j["id"].startswith("cmpl-") and
       j["model"] == model_id and j["choices"][0]["finish_reason"] in ("stop", "length"), raw)
    u = j["usage"]
    ok("completions usage counts", u["prompt_tokens"] > 0 and 0 < u["completion_tokens"] <= 12 and
       u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u)
    full_text = j["choices"][0]["text"]
    st, ct, ev = sse("/v1/completions", dict(base, stream=True))
    ok("completions stream: text/event-stream, exactly one [DONE] at the end", st == 200 and ct.startswith("text/event-stream") and
       ev.count("[DONE]") == 1 and ev[-1] == "[DONE]" and not any(e.startswith("!bad") for e in ev), ev[-3:])
    ok("completions stream text == non-stream text", stream_text(ev, False) == full_text, (stream_text(ev, False), full_text))
    last = json.loads(ev[-2])
    ok("completions stream ends with finish_reason", last["choices"][0]["finish_reason"] in ("stop", "length"), last)

    st, _, j, raw = jreq("POST", "/v1/completions", dict(base, logprobs=3))
    lp = j["choices"][0]["logprobs"] if st == 200 else None
    good = lp and len(lp["tokens"]) == j["usage"]["completion_tokens"] == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    if good:
        for t, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            # greedy: the chosen token is the most likely one, with a real (not 0.0) logprob
            # (tokens whose text collides, e.g. partial UTF-8 shown as U+FFFD, share a key)
            good = good and l <= 0 and 1 <= len(top) <= 3 and max(top.values()) <= l + 1e-4
    ok("completions logprobs: real values, chosen = best under greedy", good, raw[:400])
    lpv = lp["token_logprobs"] if lp else []
    ok("completions logprobs are not placeholders", any(v < -1e-6 for v in lpv), lpv)
    st, _, j, raw = jreq("POST", "/v1/completions", dict(base, echo=True))
    ok("completions echo prepends the prompt", st == 200 and j["choices"][0]["text"] == "Once upon a time" + full_text, raw)
    st, _, j, raw = jreq("POST", "/v1/completions", dict(base, max_tokens=10 ** 9))
    ok("huge max_tokens is clamped to the context", st == 200 and j["usage"]["total_tokens"] <= 4096, raw[:300])
    st, _, j, raw = jreq("POST", "/v1/completions", dict(base, max_tokens=0))
    ok("max_tokens 0 -> empty completion", st == 200 and j["usage"]["completion_tokens"] == 0, raw)
    st, _, j, raw = jreq("POST", "/v1/completions", dict(base, unknown_field={"x": 1}, user="u1", best_of=1))
    ok("unknown fields are ignored", st == 200, raw)
    st, _, j, raw = jreq("POST", "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0})
    ok("prompt as token ids", st == 200 and j["usage"]["prompt_tokens"] == 3, raw)
    st, _, j, raw = jreq("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 6, "temperature": 0.9, "seed": 42, "top_p": 0.9})
    st2, _, j2, _ = jreq("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 6, "temperature": 0.9, "seed": 42, "top_p": 0.9})
    ok("seeded sampling is reproducible", st == 200 and st2 == 200 and j["choices"][0]["text"] == j2["choices"][0]["text"], (raw, j2))

    # stop strings: cut at the first occurrence, never emitted (also when streamed)
    long = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}
    st, _, j, _ = jreq("POST", "/v1/completions", long)
    text = j["choices"][0]["text"]
    stop = None
    for k in range(2, max(2, len(text) - 3)):
        cand = text[k:k + 2]
        if cand.strip() and "\ufffd" not in cand and text.find(cand) == k:
            stop = cand
            break
    if stop:
        want = text[:text.find(stop)]
        st, _, j, raw = jreq("POST", "/v1/completions", dict(long, stop=stop))
        ok("stop string: text cut before it, finish_reason stop", st == 200 and j["choices"][0]["text"] == want and
           j["choices"][0]["finish_reason"] == "stop", (stop, want, raw))
        st, _, j, raw = jreq("POST", "/v1/completions", dict(long, stop=["\u2603\u2603", stop]))
        ok("stop list", st == 200 and j["choices"][0]["text"] == want, raw)
        st, _, ev = sse("/v1/completions", dict(long, stop=[stop], stream=True))
        ok("stop string in a stream: never emitted", stream_text(ev, False) == want and ev[-1] == "[DONE]", (stream_text(ev, False), want))
    else:
        ok("stop string (no usable text from this model)", False, text)

    # ---- OpenAI: chat ----
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
            "max_tokens": 10, "temperature": 0}
    st, _, j, raw = jreq("POST", "/v1/chat/completions", chat)
    ok("chat non-stream", st == 200 and j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-") and
       j["choices"][0]["message"]["role"] == "assistant" and isinstance(j["choices"][0]["message"]["content"], str), raw)
    ctext = j["choices"][0]["message"]["content"]
    cusage = j["usage"]
    st, _, ev = sse("/v1/chat/completions", dict(chat, stream=True, stream_options={"include_usage": True}))
    first = json.loads(ev[0])
    ok("chat stream opens with the assistant role", first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"].get("role") == "assistant", ev[0])
    ok("chat stream text == non-stream text", stream_text(ev, True) == ctext, (stream_text(ev, True), ctext))
    uchunk = json.loads(ev[-2])
    fchunk = json.loads(ev[-3])
    ok("chat stream: finish chunk, usage chunk, [DONE]", ev[-1] == "[DONE]" and ev.count("[DONE]") == 1 and
       fchunk["choices"][0]["finish_reason"] in ("stop", "length") and uchunk["choices"] == [] and uchunk["usage"] == cusage,
       ev[-3:])
    st, _, ev = sse("/v1/chat/completions", dict(chat, stream=True))
    ok("chat stream without include_usage has no usage chunk", all("usage" not in json.loads(e) for e in ev[:-1]), ev[-2:])
    st, _, j, raw = jreq("POST", "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=3))
    cl = j["choices"][0]["logprobs"]["content"] if st == 200 else []
    good = st == 200 and len(cl) == j["usage"]["completion_tokens"] and len(cl) > 0
    for e in cl:
        good = good and e["logprob"] <= 0 and len(e["top_logprobs"]) == 3 and abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-4 \
            and isinstance(e["bytes"], list)
    ok("chat logprobs + top_logprobs: real values", good, raw[:400])
    st, _, j, raw = jreq("POST", "/v1/chat/completions", dict(chat, max_completion_tokens=2))
    ok("max_completion_tokens", st == 200 and j["usage"]["completion_tokens"] <= 2, raw)
    st, _, j, raw = jreq("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 2})
    ok("chat content as text parts", st == 200, raw)
    st, _, j, raw = jreq("POST", "/v1/chat/completions", dict(chat, response_format={"type": "text"}, tools=[], frequency_penalty=0.5, presence_penalty=-0.5))
    ok("response_format text, empty tools, penalties accepted", st == 200, raw)

    st, _, j, raw = jreq("POST", "/v1/chat/completions", dict(chat, n=3, max_tokens=4, temperature=1.0, seed=7))
    ok("n=3 -> three choices, index 0..2, usage counts every choice's tokens",
       st == 200 and [c["index"] for c in j["choices"]] == [0, 1, 2]
       and all(c["message"]["role"] == "assistant" for c in j["choices"])
       and j["usage"]["completion_tokens"] >= 3, raw)
    st, _, j2, raw2 = jreq("POST", "/v1/chat/completions", dict(chat, n=3, max_tokens=4, temperature=1.0, seed=7))
    ok("n=3 with a seed is reproducible (choice i samples with seed + i)",
       st == 200 and [c["message"]["content"] for c in j2["choices"]] == [c["message"]["content"] for c in j["choices"]],
       (raw, raw2))
    st, _, j3, raw3 = jreq("POST", "/v1/chat/completions", dict(chat, max_tokens=4, temperature=1.0, seed=8))
    ok("choice 1 of n=3 at seed 7 is the single choice at seed 8",
       st == 200 and j3["choices"][0]["message"]["content"] == j["choices"][1]["message"]["content"], (raw, raw3))
    st, _, j, raw = jreq("POST", "/v1/completions", dict(base, n=2, max_tokens=3))
    ok("completions n=2 -> two choices", st == 200 and [c["index"] for c in j["choices"]] == [0, 1], raw)
    # n > 1 streamed: one stream, each chunk tagged with its choice's index; each choice's text
    # is what the same request gives unstreamed; one [DONE] at the end; usage over all choices
    st, _, ev = sse("/v1/chat/completions", dict(chat, n=3, max_tokens=5, temperature=1.0, seed=7, stream=True,
                                                 stream_options={"include_usage": True}))
    parts, fins, roles, usage = {0: "", 1: "", 2: ""}, {}, set(), None
    for e in ev:
        if e == "[DONE]":
            continue
        jj = json.loads(e)
        usage = jj.get("usage") or usage
        for ch in jj.get("choices", []):
            parts[ch["index"]] += ch["delta"].get("content", "") or ""
            if ch["delta"].get("role"):
                roles.add(ch["index"])
            if ch.get("finish_reason"):
                fins[ch["index"]] = ch["finish_reason"]
    st2, _, jn, rawn = jreq("POST", "/v1/chat/completions", dict(chat, n=3, max_tokens=5, temperature=1.0, seed=7))
    ok("n=3 streamed: every choice streams (role, text, finish_reason), one [DONE] last",
       st == 200 and ev and ev[-1] == "[DONE]" and ev.count("[DONE]") == 1 and roles == {0, 1, 2}
       and set(fins) == {0, 1, 2}, ev[:6])
    ok("n=3 streamed: each choice's text is the unstreamed choice's",
       st2 == 200 and [parts[i] for i in range(3)] == [c["message"]["content"] for c in jn["choices"]],
       (parts, rawn[:300]))
    ok("n=3 streamed: usage counts every choice's tokens once",
       usage and usage["completion_tokens"] == jn["usage"]["completion_tokens"], (usage, rawn[-200:]))
    st, _, ev = sse("/v1/completions", dict(base, n=2, max_tokens=3, stream=True))
    idx = {ch["index"] for e in ev if e != "[DONE]" for ch in json.loads(e).get("choices", [])}
    ok("completions n=2 streamed: chunks of both choices", st == 200 and idx == {0, 1} and ev[-1] == "[DONE]", ev[:4])
    expect_error("n=0 -> 400", "POST", "/v1/completions", dict(base, n=0))
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    # tools are served (tests/cli/grammar.sh checks the calls); here: accepted, a text or a call
    st, _, j, raw = jreq("POST", "/v1/chat/completions", dict(chat, tools=tool))
    ok("tools accepted", st == 200 and j["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), raw[:300])
    # response_format json_object is served (tests/cli/grammar.sh checks the output)
    st, _, j, raw = jreq("POST", "/v1/chat/completions", dict(chat, response_format={"type": "json_object"}))
    ok("response_format json_object accepted", st == 200 and j["choices"][0]["message"]["content"].startswith("{"), raw[:300])
    expect_error("unknown role -> 400", "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, contains="role")
    st, _, j, raw = jreq("POST", "/v1/chat/completions", {"messages": [{"role": "tool", "tool_call_id": "c1", "content": "x"}], "max_tokens": 2})
    ok("tool role accepted (rendered as a tool result)", st == 200, raw[:300])
    expect_error("tool message without tool_call_id -> 400", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "tool", "content": "x"}]}, contains="tool_call_id")
    expect_error("empty messages -> 400", "POST", "/v1/chat/completions", {"messages": []}, contains="empty")
    expect_error("missing messages -> 400", "POST", "/v1/chat/completions", {"max_tokens": 3}, contains="messages")
    expect_error("messages wrong type -> 400", "POST", "/v1/chat/completions", {"messages": "hi"}, contains="messages")
    expect_error("message content missing -> 400", "POST", "/v1/chat/completions", {"messages": [{"role": "user"}]}, contains="content")
    expect_error("message content wrong type -> 400", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]})
    expect_error("empty prompt -> 400", "POST", "/v1/completions", {"prompt": ""}, contains="empty")
    expect_error("missing prompt -> 400", "POST", "/v1/completions", {"max_tokens": 2}, contains="prompt")
    expect_error("batched prompts streamed -> 400", "POST", "/v1/completions", {"prompt": ["a", "b"], "stream": True}, contains="batched")
    st, _, j, raw = jreq("POST", "/v1/completions", {"prompt": ["Once", "The dog"], "max_tokens": 2, "n": 2, "temperature": 0})
    ok("batched prompts: n choices per prompt, indexed prompt * n + choice",
       st == 200 and [c["index"] for c in j["choices"]] == [0, 1, 2, 3] and j["choices"][0]["text"] == j["choices"][1]["text"], raw[:300])
    expect_error("a batch with a prompt that is not text -> 400", "POST", "/v1/completions", {"prompt": ["a", 5]}, contains="prompt[1]")
    expect_error("prompt token id out of range -> 400", "POST", "/v1/completions", {"prompt": [1, vocab + 1]})
    expect_error("negative max_tokens -> 400", "POST", "/v1/completions", dict(base, max_tokens=-1), contains="max_tokens")
    expect_error("max_tokens wrong type -> 400", "POST", "/v1/completions", dict(base, max_tokens="10"), contains="max_tokens")
    expect_error("fractional max_tokens -> 400", "POST", "/v1/completions", dict(base, max_tokens=2.5), contains="max_tokens")
    expect_error("temperature out of range -> 400", "POST", "/v1/completions", dict(base, temperature=5), contains="temperature")
    expect_error("negative temperature -> 400", "POST", "/v1/completions", dict(base, temperature=-0.5), contains="temperature")
    expect_error("temperature wrong type -> 400", "POST", "/v1/completions", dict(base, temperature="hot"), contains="temperature")
    expect_error("top_p out of range -> 400", "POST", "/v1/completions", dict(base, top_p=1.5), contains="top_p")
    expect_error("frequency_penalty out of range -> 400", "POST", "/v1/completions", dict(base, frequency_penalty=3), contains="frequency_penalty")
    expect_error("stop wrong type -> 400", "POST", "/v1/completions", dict(base, stop=7), contains="stop")
    expect_error("stream wrong type -> 400", "POST", "/v1/completions", dict(base, stream="yes"), contains="stream")
    expect_error("logprobs over 5 -> 400", "POST", "/v1/completions", dict(base, logprobs=9), contains="logprobs")
    expect_error("top_logprobs without logprobs -> 400", "POST", "/v1/chat/completions", dict(chat, top_logprobs=2), contains="logprobs")
    expect_error("unknown model -> 404", "POST", "/v1/completions", dict(base, model="gpt-9"), status=404, contains="not found")
    expect_error("prompt longer than the context -> 400", "POST", "/v1/completions", {"prompt": "hello " * 6000}, contains="context")
    expect_error("echo with stream -> 400", "POST", "/v1/completions", dict(base, echo=True, stream=True), contains="echo")

    # ---- embeddings ----
    st, _, j, raw = jreq("POST", "/v1/embeddings", {"input": ["hello", "world"], "model": model_id})
    ok("embeddings list", st == 200 and j["object"] == "list" and len(j["data"]) == 2 and len(j["data"][0]["embedding"]) == hidden and j["usage"]["prompt_tokens"] > 0, raw[:200])
    st, _, j, raw = jreq("POST", "/v1/embeddings", {"input": "hello", "encoding_format": "base64"})
    ok("embeddings base64", st == 200 and isinstance(j["data"][0]["embedding"], str) and len(j["data"][0]["embedding"]) == (hidden * 4 + 2) // 3 * 4, raw[:200])
    expect_error("embeddings empty input -> 400", "POST", "/v1/embeddings", {"input": ""}, contains="empty")
    expect_error("embeddings missing input -> 400", "POST", "/v1/embeddings", {}, contains="input")
    expect_error("embeddings bad format -> 400", "POST", "/v1/embeddings", {"input": "x", "encoding_format": "hex"})

    # ---- concurrency must not change answers ----
    bodies = {"infer": [], "complete": [], "describe": []}
    errors = []

    def worker(kind):
        try:
            if kind == "infer":
                st, _, d = req("POST", "/v1/infer", {"prompt": "The capital of France is", "top": 5})
            elif kind == "complete":
                st, _, d = req("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
            else:
                st, _, d = req("GET", "/v1/describe?entity=France")
            bodies[kind].append((st, json.dumps(strip_volatile(json.loads(d)), sort_keys=True)))
        except Exception as e:  # noqa
            errors.append(repr(e))
    ths = [threading.Thread(target=worker, args=(k,)) for k in ["infer"] * 100 + ["complete"] * 30 + ["describe"] * 30]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    ok("160 concurrent requests all answered", not errors and sum(len(v) for v in bodies.values()) == 160, errors[:3])
    for k, v in bodies.items():
        ok("concurrent %s bodies byte-identical (%d)" % (k, len(v)), len(set(v)) == 1 and v and v[0][0] in (200, 503), set(v) if len(set(v)) < 4 else len(set(v)))

    # ---- slow and idle clients ----
    s = socket.create_connection((HOST, PORT))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n")
    closed = False
    t0 = time.time()
    while time.time() - t0 < 15:
        try:
            s.sendall(b" ")
            s.settimeout(0.5)
            if s.recv(1) == b"":
                closed = True
                break
        except socket.timeout:
            continue
        except OSError:
            closed = True
            break
    s.close()
    ok("slow client sending a byte at a time is dropped at the request deadline", closed)
    st, _, j, _ = jreq("GET", "/v1/health")
    ok("server still serving after the slow client", st == 200)
    socks = []
    try:
        for _ in range(200):
            socks.append(socket.create_connection((HOST, PORT), timeout=5))
        st, _, j, _ = jreq("GET", "/v1/health")
        ok("200 idle connections open: still serving", st == 200)
        st, _, j, _ = jreq("POST", "/v1/completions", dict(base, max_tokens=2))
        ok("200 idle connections open: generation still works", st == 200)
    except OSError as e:
        ok("200 idle connections open", False, e)
    for x in socks:
        x.close()
    # a client that closes the socket right after sending a streaming request
    s = socket.create_connection((HOST, PORT))
    b = json.dumps(dict(base, stream=True, max_tokens=50)).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))
    s.close()
    st, _, j, _ = jreq("GET", "/v1/health")
    ok("server fine after a client vanished mid-request", st == 200)

    # ---- metrics after traffic ----
    st, hd, _, raw = jreq("GET", "/metrics")
    text = raw.decode()
    ok("metrics: Prometheus text with route/status counters", st == 200 and hd.get("content-type", "").startswith("text/plain") and
       'larql_requests_total{route="/v1/completions",status="200"}' in text and 'status="400"' in text and
       "larql_generated_tokens_total" in text and "larql_decode_tokens_per_second" in text, text[:300])
    st, _, j, raw = jreq("GET", "/v1/runtime")
    ok("runtime: kernels, threads, load time, measured tok/s (not zero after BitNet traffic)", st == 200 and j["kernels"] and j["threads"] >= 1 and
       j["decode_tokens_per_second"] > 0 and j["prefill_tokens_per_second"] > 0 and "kv_bytes_in_use" in j, raw)
    st, _, j, raw = jreq("GET", "/v1/stats")
    ok("stats counters moved", j["generated_tokens"] > 0 and j["prompt_tokens"] > 0 and j["errors"] > 0, raw[:300])


def vindex_tests(cli_describe, cli_walk):
    """a server on a vindex directory: browse routes, same JSON as the CLI's --json"""
    q = "/v1/describe?entity=France&band=all&min_score=0&limit=10"
    st, _, j, raw = jreq("GET", q)
    ok("vindex describe 200", st == 200 and "edges" in j and j["entity"] == "France", raw[:300])
    ok("vindex describe has edges (min_score 0)", st == 200 and len(j["edges"]) > 0, raw[:300])
    cli = json.load(open(cli_describe))
    ok("describe body == CLI describe --json (latency aside)", strip_volatile(j) == strip_volatile(cli), (raw[:300], cli))
    st, _, j, raw = jreq("GET", "/v1/walk?prompt=The%20capital%20of%20France&top=3")
    ok("vindex walk == CLI walk --json (latency aside)", st == 200 and strip_volatile(j) == strip_volatile(json.load(open(cli_walk))), raw[:300])
    st, _, j, raw = jreq("POST", "/v1/select", {"limit": 5, "order_by": "c_score"})
    ok("vindex select", st == 200 and "edges" in j and "total" in j and len(j["edges"]) <= 5, raw[:300])
    st, _, j, raw = jreq("GET", "/v1/relations")
    ok("vindex relations", st == 200 and "relations" in j and "probe_relations" in j, raw[:300])
    st, _, j, raw = jreq("GET", "/v1/stats")
    ok("vindex stats: LARQL fields + counters", st == 200 and j.get("layers") and j.get("features") and "loaded" in j and "requests_served" in j, raw[:400])
    st, _, j, raw = jreq("GET", "/v1/models")
    ok("vindex models: features > 0", st == 200 and j["data"][0]["features"] > 0, raw)
    st, _, j, raw = jreq("GET", "/v1/token/encode?text=France")
    ok("vindex tokenizer routes", st == 200 and j["token_ids"], raw)
    st, _, j, raw = jreq("GET", "/v1/stats")
    if st == 200 and j.get("vocab_size") and j.get("hidden_size"):
        embed_binary_tests("vindex ", j["vocab_size"], j["hidden_size"])
    else:
        ok("vindex stats name vocab_size and hidden_size", False, raw[:300])
    expect_error("describe bad band -> 400", "GET", "/v1/describe?entity=France&band=middle")
    expect_error("describe bad limit -> 400", "GET", "/v1/describe?entity=France&limit=-3", contains="limit")
    expect_error("describe non-numeric min_score -> 400", "GET", "/v1/describe?entity=France&min_score=abc", contains="min_score")
    expect_error("describe bad verbose -> 400", "GET", "/v1/describe?entity=France&verbose=maybe", contains="verbose")
    expect_error("walk empty prompt -> 400", "GET", "/v1/walk?prompt=")
    expect_error("select wrong type -> 422 (JSON of the wrong shape, as LARQL)", "POST", "/v1/select", {"layer": "two"}, contains="layer", status=422)
    expect_error("select layer out of range -> 400", "POST", "/v1/select", {"layer": 4000})
    bodies, errors = [], []

    def worker():
        try:
            st, _, d = req("GET", q)
            bodies.append((st, json.dumps(strip_volatile(json.loads(d)), sort_keys=True)))
        except Exception as e:  # noqa
            errors.append(repr(e))
    ths = [threading.Thread(target=worker) for _ in range(100)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    ok("100 concurrent describe: byte-identical 200 bodies", not errors and len(bodies) == 100 and len(set(bodies)) == 1 and bodies[0][0] == 200,
       errors[:2] or len(set(bodies)))


def guarded_tests():
    global KEY
    good_key = KEY
    KEY = None
    st, _, j, _ = jreq("GET", "/v1/health")
    ok("auth: health needs no key", st == 200)
    expect_error("auth: no key -> 401", "GET", "/v1/models", status=401)
    expect_error("auth: wrong key -> 401", "POST", "/v1/completions", {"prompt": "x"}, status=401, headers={"Authorization": "Bearer wrong"})
    expect_error("auth: key of another length -> 401", "GET", "/v1/stats", status=401, headers={"Authorization": "Bearer " + good_key + "x"})
    expect_error("auth: not a bearer -> 401", "GET", "/v1/stats", status=401, headers={"Authorization": "Basic " + good_key})
    KEY = good_key
    st, hd, j, _ = jreq("GET", "/v1/models")
    ok("auth: right key -> 200", st == 200)
    ok("CORS header on responses", hd.get("access-control-allow-origin") == "*", hd)
    st, hd, _ = req("OPTIONS", "/v1/chat/completions", headers={"Origin": "http://x", "Access-Control-Request-Method": "POST"})
    ok("CORS preflight 204", st == 204 and "POST" in hd.get("access-control-allow-methods", "") and "Authorization" in hd.get("access-control-allow-headers", ""), (st, hd))

    # a long stream holds the only slot (--max-concurrent 1): the next request gets 503 + Retry-After
    s = socket.create_connection((HOST, PORT))
    b = json.dumps({"messages": [{"role": "user", "content": "Tell me a long story"}], "max_tokens": 3000,
                    "temperature": 0, "stream": True}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (KEY.encode(), len(b), b))
    s.settimeout(30)
    got = b""
    while got.count(b"data: ") < 3:
        d = s.recv(4096)
        if not d:
            break
        got += d
    ok("long stream started", b"200 OK" in got and got.count(b"data: ") >= 3, got[:200])
    st, hd, j = expect_error("over --max-concurrent -> 503", "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}, status=503, contains="busy")
    ok("503 carries Retry-After", hd.get("retry-after", "").isdigit(), hd)
    st, _, j, _ = jreq("GET", "/v1/health")
    ok("health is not gated by --max-concurrent", st == 200)
    st, _, j, _ = jreq("GET", "/v1/runtime")
    ok("runtime shows the active stream and its session", st == 200 and j["active_streams"] == 1 and j["active_sessions"] == 1 and j["kv_bytes_in_use"] > 0, j)
    s.close()  # the client goes away mid-stream
    freed = False
    for _ in range(100):
        st, _, j, _ = jreq("GET", "/v1/runtime")
        if j["active_streams"] == 0 and j["active_sessions"] == 0 and j["active_requests"] == 0:
            freed = True
            break
        time.sleep(0.1)
    ok("client closing mid-stream frees the stream, its session and its slot", freed, j)
    st, _, j, _ = jreq("GET", "/v1/stats")
    ok("the abandoned stream was cancelled (not run to the end)", j["streams_canceled"] == 1 and j["generated_tokens"] < 3000, j)
    st, _, j, raw = jreq("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
    ok("slot available again after the disconnect", st == 200, raw)


def open_stream(body, path="/v1/chat/completions"):
    """A raw streaming request left open; returns the socket once 3 events arrived."""
    s = socket.create_connection((HOST, PORT))
    b = json.dumps(dict(body, stream=True)).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (path.encode(), len(b), b))
    s.settimeout(30)
    got = b""
    while got.count(b"data: ") < 3:
        d = s.recv(4096)
        if not d:
            break
        got += d
    return s, got


def batch_tests():
    """Concurrent generation requests go through one scheduler: they must decode together
    (batch size > 1 seen) and give the same bodies as when each runs alone."""
    cases = [
        ("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}),
        ("POST", "/v1/completions", {"prompt": "The cat", "max_tokens": 30, "temperature": 0.9, "seed": 42}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 35,
                                          "temperature": 0}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me"}], "max_tokens": 25,
                                          "temperature": 0.7, "seed": 7, "top_p": 0.9}),
        ("SSE", "/v1/completions", {"prompt": "A long road", "max_tokens": 40, "temperature": 0}),
        ("SSE", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Go"}], "max_tokens": 30,
                                         "temperature": 1.0, "seed": 3}),
        ("POST", "/v1/completions", {"prompt": "Numbers", "max_tokens": 20, "temperature": 0, "logprobs": 2}),
    ]

    def run(case):
        kind, path, body = case
        if kind == "SSE":
            st, _, events = sse(path, dict(body, stream=True))
            return st, stream_text(events, "chat" in path), len(events)
        st, _, d = req("POST", path, body)
        return st, json.dumps(strip_volatile(json.loads(d)), sort_keys=True)

    st, _, j, _ = jreq("GET", "/v1/runtime")
    ok("runtime: batched decode on, no step yet", st == 200 and j["batched_decode"] is True and
       j["scheduler"]["decode_steps"] == 0 and j["scheduler"]["max_batch_seen"] == 0, j)
    alone = [run(c) for c in cases]
    ok("alone: every request answered 200", all(a[0] == 200 for a in alone), alone)
    st, _, j, _ = jreq("GET", "/v1/runtime")
    ok("alone: one stream per decode step", j["scheduler"]["max_batch_seen"] == 1, j["scheduler"])

    # a long stream runs in the background so that the others certainly overlap it
    long_sock, got = open_stream({"messages": [{"role": "user", "content": "Tell me a long story"}],
                                  "max_tokens": 3000, "temperature": 0})
    ok("background stream started", b"200 OK" in got, got[:200])
    results = [None] * (2 * len(cases))
    errors = []
    barrier = threading.Barrier(len(results))

    def worker(i):
        try:
            barrier.wait()
            results[i] = run(cases[i % len(cases)])
        except Exception as e:  # noqa
            errors.append(repr(e))
    ths = [threading.Thread(target=worker, args=(i,)) for i in range(len(results))]
    for t in ths:
        t.start()
    st, _, j, _ = jreq("GET", "/v1/token/encode?text=hello")
    ok("read-only routes answer while streams decode", st == 200, j)
    for t in ths:
        t.join()
    ok("%d concurrent requests answered" % len(results), not errors and all(r is not None for r in results), errors[:3])
    def same_logprobs(a, b):
        """Bodies equal except logprobs, which may differ in the last float bits: the dense
        lm_head kernel sums a lone row (decode) in another order than a batch of rows."""
        ja, jb = json.loads(a[1]), json.loads(b[1])
        la, lb = ja["choices"][0].pop("logprobs"), jb["choices"][0].pop("logprobs")
        close = len(la["token_logprobs"]) == len(lb["token_logprobs"]) and all(
            abs(x - y) < 1e-4 for x, y in zip(la["token_logprobs"], lb["token_logprobs"]))
        la.pop("token_logprobs"), lb.pop("token_logprobs"), la.pop("top_logprobs"), lb.pop("top_logprobs")
        return a[0] == b[0] and ja == jb and la == lb and close
    for i, r in enumerate(results):
        if r is None:
            continue
        kind, path, body = cases[i % len(cases)]
        what = "%s %s %s" % (kind, path, "greedy" if body.get("temperature") == 0 else "seed %s" % body.get("seed"))
        if "logprobs" in body:
            ok("concurrent == alone: %s with logprobs: same tokens and text, logprobs within 1e-4 (#%d)" % (what, i),
               same_logprobs(r, alone[i % len(cases)]), (r, alone[i % len(cases)]))
        else:
            ok("concurrent == alone, byte for byte: %s (#%d)" % (what, i), r == alone[i % len(cases)],
               (r, alone[i % len(cases)]))
    st, _, j, _ = jreq("GET", "/v1/runtime")
    sch = j["scheduler"]
    ok("streams were batched: max batch > 1 (%s)" % sch.get("max_batch_seen"), sch["max_batch_seen"] > 1 and
       any(int(k.rstrip("+")) > 1 for k in sch["batch_size_histogram"]), sch)
    ok("aggregate decode tok/s reported", sch["aggregate_decode_tokens_per_second"] > 0, sch)
    st, _, _, raw = jreq("GET", "/metrics")
    text = raw.decode()
    mx = [l for l in text.split("\n") if l.startswith("larql_decode_batch_max ")]
    ok("metrics: batch size histogram and max batch > 1", 'larql_decode_batch_size_bucket{le="+Inf"}' in text and
       mx and float(mx[0].split()[1]) > 1, mx)
    long_sock.close()
    freed = False
    for _ in range(100):
        st, _, j, _ = jreq("GET", "/v1/runtime")
        if j["active_streams"] == 0 and j["scheduler"]["active"] == 0 and j["active_sessions"] == 0:
            freed = True
            break
        time.sleep(0.1)
    ok("background stream cancelled and its session freed after the client left", freed, j)


if __name__ == "__main__":
    mode, PORT = sys.argv[1], int(sys.argv[2])
    if mode == "guarded":
        KEY = sys.argv[3]
        guarded_tests()
    elif mode == "batch":
        batch_tests()
    elif mode == "vindex":
        vindex_tests(sys.argv[3], sys.argv[4])
    else:
        main_tests()
    sys.exit(1 if tap.FAILS else 0)
