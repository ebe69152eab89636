#!/usr/bin/env python3
"""What a web page or a proxy in front could do to a server on localhost (tests/cli/security.sh):
request smuggling with two message lengths, DNS rebinding (a foreign Host), cross-origin writes
without an API key, and model ids probed without the key.
    browser_attacks.py PORT KEYED_PORT"""
import socket
import sys

import client
from tap import ok

PORT, KPORT = int(sys.argv[1]), int(sys.argv[2])


def raw(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


# two Content-Length headers: the second request hidden in the body must never be answered
body = b'{"prompt":"x","top":1}'
smug = (b"POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nContent-Length: 200\r\n\r\n%sGET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        % (len(body), body))
out = raw(PORT, smug)
ok("two Content-Length headers -> 400 and the connection closed, nothing after it answered",
   out.startswith(b"HTTP/1.1 400") and out.count(b"HTTP/1.1 ") == 1 and b"Content-Length" in out, out[:300])
out = raw(PORT, b"POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"
                b"\r\n0\r\n\r\n")
ok("Content-Length beside Transfer-Encoding -> 400", out.startswith(b"HTTP/1.1 400"), out[:200])

# DNS rebinding: a page of evil.example resolving to 127.0.0.1
st, _, b = client.request(PORT, "GET", "/v1/stats", headers={"Host": "evil.example"})
ok("a foreign Host -> 421", st == 421, (st, b[:200]))
for h in ("localhost:%d" % PORT, "127.0.0.1:%d" % PORT, "[::1]:%d" % PORT, "LOCALHOST"):
    st, _, b = client.request(PORT, "GET", "/v1/health", headers={"Host": h})
    ok("Host %s is answered" % h, st == 200, (st, b[:100]))

# cross-origin writes without --api-key: refused; the same origin and no origin (curl) pass
ins = {"entity": "Evilia", "relation": "capital", "target": "Paris", "mode": "knn"}
st, _, b = client.request(PORT, "POST", "/v1/insert", ins, headers={"Origin": "https://evil.example",
                                                                     "Content-Type": "text/plain"})
ok("a cross-origin insert (a form posting text/plain) -> 403, nothing written", st == 403, (st, b[:200]))
st, _, b = client.request(PORT, "GET", "/v1/patches")
ok("... the overlay has no edit of it", b"Evilia" not in b, b[:300])
st, _, b = client.request(PORT, "POST", "/v1/insert", ins, headers={"Origin": "null"})
ok("an insert from Origin: null (a sandboxed frame, a file) -> 403", st == 403, (st, b[:200]))
st, _, b = client.request(PORT, "DELETE", "/v1/patches/edits", headers={"Origin": "http://127.0.0.1:1"})
ok("a cross-origin DELETE -> 403", st == 403, (st, b[:200]))
st, _, b = client.request(PORT, "GET", "/v1/stats", headers={"Origin": "https://evil.example"})
ok("a cross-origin read is still answered (the page holds no secret; CORS keeps the browser from reading it)",
   st == 200, (st, b[:100]))
st, _, b = client.request(PORT, "POST", "/v1/insert", ins, headers={"Origin": "http://127.0.0.1:%d" % PORT})
ok("the same origin (the built-in page) may insert", st == 200, (st, b[:200]))
st, _, b = client.request(PORT, "GET", "/v1/stream", headers={
    "Origin": "https://evil.example", "Upgrade": "websocket", "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
ok("a cross-origin WebSocket upgrade -> 403", st == 403, (st, b[:200]))

# with --api-key, a model id cannot be probed without the key
st, _, b = client.request(KPORT, "GET", "/v1/no-such-model/describe?entity=France")
ok("with --api-key an unknown model id -> 401 (not 404)", st == 401, (st, b[:200]))
st, _, b = client.request(KPORT, "POST", "/v1/insert", ins, headers={"Origin": "https://evil.example",
                                                                      "Authorization": "Bearer k3y"})
ok("with --api-key a cross-origin request holding the key is answered", st == 200, (st, b[:200]))
