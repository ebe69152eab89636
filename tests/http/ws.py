#!/usr/bin/env python3
"""WebSocket tests of a running `larql serve` (GET /v1/stream), with a minimal RFC 6455
client written on the stdlib (socket, base64, hashlib): handshake, masked frames,
fragmentation, control frames.

usage: ws.py gguf PORT [KEY]     handshake, infer, generate, cancel, protocol errors
       ws.py vindex PORT          describe layer by layer
Prints TAP-style "ok - name" / "not ok - name" lines; run by tests/cli/server.sh."""
import base64
import hashlib
import http.client
import json
import os
import socket
import struct
import sys

import tap
from tap import ok
import time

HOST = "127.0.0.1"
PORT = 0
KEY = None
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"



class WS:
    def __init__(self, headers=None, timeout=60):
        self.s = socket.create_connection((HOST, PORT), timeout=timeout)
        self.key = base64.b64encode(os.urandom(16)).decode()
        h = {"Host": "%s:%d" % (HOST, PORT), "Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Key": self.key, "Sec-WebSocket-Version": "13"}
        if KEY:
            h["Authorization"] = "Bearer " + KEY
        h.update(headers or {})
        req = "GET /v1/stream HTTP/1.1\r\n" + "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
        self.s.sendall(req.encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            d = self.s.recv(4096)
            if not d:
                raise IOError("connection closed during the handshake: %r" % self.buf)
            self.buf += d
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:]}

    def expected_accept(self):
        return base64.b64encode(hashlib.sha1((self.key + GUID).encode()).digest()).decode()

    def frame(self, op, payload, fin=True, mask=True):
        if isinstance(payload, str):
            payload = payload.encode()
        b0 = (0x80 if fin else 0) | op
        n = len(payload)
        m = 0x80 if mask else 0
        if n < 126:
            hdr = struct.pack("!BB", b0, m | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, m | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, m | 127, n)
        if mask:
            k = os.urandom(4)
            payload = bytes(c ^ k[i & 3] for i, c in enumerate(payload)) if n < 65536 else \
                (int.from_bytes(payload, "big") ^ int.from_bytes((k * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
            hdr += k
        return hdr + payload

    def send(self, op, payload, **kw):
        self.s.sendall(self.frame(op, payload, **kw))

    def send_json(self, obj):
        self.send(0x1, json.dumps(obj))

    def _need(self, n):
        while len(self.buf) < n:
            d = self.s.recv(65536)
            if not d:
                raise EOFError("connection closed")
            self.buf += d

    def recv(self):
        """-> (opcode, payload bytes); server frames must be unmasked and final"""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80 or not b0 & 0x80:
            raise ValueError("server frame masked or not final: %02x %02x" % (b0, b1))
        n, h = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, h = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, h = struct.unpack("!Q", self.buf[2:10])[0], 10
        self._need(h + n)
        p = self.buf[h:h + n]
        self.buf = self.buf[h + n:]
        return b0 & 0x0F, p

    def recv_json(self):
        while True:
            op, p = self.recv()
            if op == 0x1:
                return json.loads(p)
            if op == 0x8:
                raise EOFError("close %r" % p)

    def until(self, types):
        """messages up to and including the first whose type is in types"""
        out = []
        while True:
            m = self.recv_json()
            out.append(m)
            if m.get("type") in types:
                return out

    def close_code(self):
        """reads until the close frame; -> its status code"""
        while True:
            op, p = self.recv()
            if op == 0x8:
                return struct.unpack("!H", p[:2])[0] if len(p) >= 2 else 1005

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def completion(prompt, n):
    c = http.client.HTTPConnection(HOST, PORT, timeout=60)
    h = {"Content-Type": "application/json"}
    if KEY:
        h["Authorization"] = "Bearer " + KEY
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": prompt, "max_tokens": n, "temperature": 0}), headers=h)
    r = c.getresponse()
    j = json.loads(r.read())
    c.close()
    return j


def http_post_json(path, obj):
    c = http.client.HTTPConnection(HOST, PORT, timeout=60)
    h = {"Content-Type": "application/json"}
    if KEY:
        h["Authorization"] = "Bearer " + KEY
    c.request("POST", path, body=json.dumps(obj), headers=h)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.headers, json.loads(body)


def get(path, headers):
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def gguf_tests():
    auth = {"Authorization": "Bearer " + KEY} if KEY else {}
    st, body = get("/v1/stream", auth)
    ok("GET /v1/stream without Upgrade headers -> 400 with a clear message",
       st == 400 and b"WebSocket" in body, "%d %r" % (st, body))
    st, body = get("/v1/stream", dict(auth, Upgrade="websocket", Connection="Upgrade",
                                      **{"Sec-WebSocket-Version": "13"}))
    ok("missing Sec-WebSocket-Key -> 400", st == 400 and b"Sec-WebSocket-Key" in body, "%d %r" % (st, body))
    st, body = get("/v1/stream", dict(auth, Upgrade="websocket", Connection="Upgrade",
                                      **{"Sec-WebSocket-Version": "8",
                                         "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}))
    ok("Sec-WebSocket-Version 8 -> 426", st == 426, "%d %r" % (st, body))
    if KEY:
        st, body = get("/v1/stream", {"Upgrade": "websocket", "Connection": "Upgrade",
                                      "Sec-WebSocket-Version": "13",
                                      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        ok("--api-key applies to /v1/stream (401 without the key)", st == 401, "%d %r" % (st, body))
        return

    w = WS()
    ok("handshake: 101 with the RFC 6455 accept value",
       w.status == 101 and w.headers.get("sec-websocket-accept") == w.expected_accept()
       and w.headers.get("upgrade", "").lower() == "websocket",
       "%d %r" % (w.status, w.headers))

    w.send_json({"type": "infer", "prompt": "The capital of France is", "top": 3})
    ms = w.until({"infer_done", "error"})
    preds = [m for m in ms if m["type"] == "prediction"]
    # a GGUF has no gate index: walk runs dense and the frame says so, as the HTTP body does
    ok("infer: one prediction frame per rank, then infer_done (mode as served: bitnet)",
       len(preds) == 3 and [p["rank"] for p in preds] == [1, 2, 3]
       and all(isinstance(p["token"], str) and 0 <= p["probability"] <= 1 for p in preds)
       and ms[-1]["type"] == "infer_done" and ms[-1]["predictions"] == 3 and ms[-1]["mode"] == "bitnet"
       and ms[-1]["prompt"] == "The capital of France is" and "latency_ms" in ms[-1], ms)
    st, _, body = http_post_json("/v1/infer", {"prompt": "The capital of France is", "top": 3})
    ok("infer frames carry the same tokens and probabilities as POST /v1/infer",
       st == 200 and [[p["token"], p["probability"]] for p in preds]
       == [[p["token"], p["probability"]] for p in body["predictions"]], (preds, body))

    w.send_json({"type": "infer", "prompt": ""})
    m = w.recv_json()
    ok("infer with an empty prompt -> error frame", m["type"] == "error" and "prompt" in m["message"], m)

    w.send_json({"type": "generate", "prompt": "Once upon a time", "max_tokens": 12})
    ms = w.until({"done", "error"})
    toks = [m for m in ms if m["type"] == "token"]
    text = "".join(t["text"] for t in toks)
    ref = completion("Once upon a time", 12)
    ok("generate: token frames (index 0..n-1) then done with the count",
       ms[-1]["type"] == "done" and ms[-1]["tokens"] == len(toks) and len(toks) > 0
       and [t["index"] for t in toks] == list(range(len(toks))) and "cancelled" not in ms[-1], ms[-3:])
    ok("generate: text equals the greedy /v1/completions text of the same prompt",
       text == ref["choices"][0]["text"], "%r vs %r" % (text, ref))

    w.send_json({"type": "describe", "entity": "France"})
    m = w.recv_json()
    ok("describe on a GGUF server -> error frame naming the vindex",
       m["type"] == "error" and "vindex" in m["message"], m)

    w.send_json({"type": "bogus"})
    m = w.recv_json()
    ok("unknown type -> error frame with LARQL's message",
       m == {"type": "error", "message": "unknown message type: bogus. Supported: describe, infer, generate"}, m)
    w.send(0x1, '{"type": ')
    m = w.recv_json()
    ok("bad JSON -> error frame", m["type"] == "error" and "JSON" in m["message"], m)
    w.send_json({"type": "cancel"})  # nothing running: no answer
    w.send(0x9, b"hello")
    op, p = w.recv()
    ok("ping -> pong with the same payload (an idle cancel is answered by nothing)",
       op == 0xA and p == b"hello", (op, p))
    w.send(0x2, b"\x00\x01binary")  # ignored
    msg = json.dumps({"type": "infer", "prompt": "Hello there", "top": 2})
    w.send(0x1, msg[:5], fin=False)
    w.send(0x9, b"mid")  # control frames may come between fragments
    w.send(0x0, msg[5:12], fin=False)
    w.send(0x0, msg[12:], fin=True)
    op, p = w.recv()
    ms = [] if op != 0xA else w.until({"infer_done", "error"})
    ok("fragmented message (with a ping between fragments) is reassembled; binary ignored",
       op == 0xA and p == b"mid" and ms and ms[-1]["type"] == "infer_done" and ms[-1]["predictions"] == 2,
       (op, p, ms))

    # cancel mid-generation: the request really stops (done long before max_tokens)
    w.send_json({"type": "generate", "prompt": "Once", "max_tokens": 3000})
    first = w.recv_json()
    w.send_json({"type": "cancel"})
    ms = [first] + w.until({"done", "error"})
    toks = [m for m in ms if m["type"] == "token"]
    ok("cancel mid-generation -> done with cancelled:true and the tokens sent",
       first["type"] == "token" and ms[-1]["type"] == "done" and ms[-1].get("cancelled") is True
       and ms[-1]["tokens"] == len(toks) and len(toks) < 3000, ms[-2:])
    w.send_json({"type": "infer", "prompt": "Hi", "top": 1})
    ms = w.until({"infer_done", "error"})
    ok("the connection serves requests after a cancel", ms[-1]["type"] == "infer_done", ms)

    w.send(0x8, struct.pack("!H", 1000) + b"bye")
    ok("close -> close reply with the same code", w.close_code() == 1000)
    w.close()

    w = WS()
    w.send(0x1, '{"type":"cancel"}', mask=False)
    ok("unmasked client frame -> close 1002", w.close_code() == 1002)
    w.close()
    w = WS()
    w.send(0x1, "x" * 700000, fin=False)
    w.send(0x0, "x" * 400000, fin=True)
    try:
        code = w.close_code()
    except (EOFError, OSError) as e:
        code = repr(e)
    ok("fragmented message over 1 MiB -> close 1009", code == 1009, code)
    w.close()
    w = WS()
    # a header declaring 2^40 bytes: refused from the header alone
    w.s.sendall(struct.pack("!BBQ", 0x81, 0x80 | 127, 1 << 40) + b"\0\0\0\0")
    ok("frame declaring 1 TiB -> close 1009 (nothing allocated)", w.close_code() == 1009)
    w.close()
    w = WS()
    w.send(0x1, b"\xff\xfe")
    ok("invalid UTF-8 text -> close 1007", w.close_code() == 1007)
    w.close()

    # the client vanishes during a generation: the request is cancelled, the server stays fine
    for i in range(3):
        w = WS()
        w.send_json({"type": "generate", "prompt": "Once", "max_tokens": 3000})
        w.recv_json()
        w.s.shutdown(socket.SHUT_RDWR)
        w.close()
    time.sleep(0.5)
    w = WS()
    w.send_json({"type": "generate", "prompt": "Once upon a time", "max_tokens": 4})
    ms = w.until({"done", "error"})
    w.close()
    st, body = get("/v1/health", {})
    ok("abrupt disconnects during generate: the server still answers (HTTP and WebSocket)",
       st == 200 and ms[-1]["type"] == "done" and ms[-1]["tokens"] > 0, (st, ms[-1]))
    deadline = time.time() + 10
    active = None
    while time.time() < deadline:
        st, body = get("/v1/stats", {})
        try:
            active = json.loads(body).get("active_streams")
        except ValueError:
            active = None
        if active == 0:
            break
        time.sleep(0.2)
    ok("every WebSocket session ended (active_streams back to 0)", active == 0, active)


def vindex_tests():
    w = WS()
    ok("vindex: handshake", w.status == 101)
    w.send_json({"type": "describe", "entity": "France"})
    ms = w.until({"done", "error"})
    layers = [m for m in ms if m["type"] == "layer"]
    total = sum(len(m["edges"]) for m in layers)
    ok("describe: one layer frame per scanned layer, then done with the edge count",
       ms[-1]["type"] == "done" and len(layers) > 0 and ms[-1]["total_edges"] == total
       and ms[-1]["entity"] == "France"
       and [m["layer"] for m in layers] == sorted(m["layer"] for m in layers), ms[-1])
    ok("describe: edges carry target, gate_score >= 5, feature",
       all(isinstance(e["target"], str) and e["gate_score"] >= 5.0 and isinstance(e["feature"], int)
           for m in layers for e in m["edges"]), layers[:2])
    w.send_json({"type": "describe"})
    m = w.recv_json()
    ok("describe without entity -> error 'missing entity'", m == {"type": "error", "message": "missing entity"}, m)
    w.send_json({"type": "describe", "entity": ""})
    m = w.recv_json()
    ok("describe of an empty entity -> done with 0 edges", m["type"] == "done" and m["total_edges"] == 0, m)
    w.close()


def vmrss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def backpressure_tests(pid):
    """a client that never reads: the server stops reading it, its memory stays bounded; an
    invalid close code is a protocol error, not echoed"""
    rss0 = vmrss(pid)
    w = WS()
    w.s.settimeout(3)
    ping = w.frame(0x9, b"x" * 125)
    sent, t_end = 0, time.time() + 6
    try:
        while time.time() < t_end and sent < 1000000:
            w.s.sendall(ping)
            sent += 1
    except (socket.timeout, OSError):
        pass
    grew = vmrss(pid) - rss0
    ok("pings from a client that never reads: the server stops reading it (%d of 1,000,000 sent) and grows %.1f MB"
       % (sent, grew / 1e6), sent < 1000000 and grew < 32e6, (sent, grew))
    w.s.close()
    w = WS()
    w.send(0x8, struct.pack("!H", 0))
    op, payload = w.recv()
    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
    ok("a close frame with code 0 -> close 1002 (not echoed)", op == 0x8 and code == 1002, (op, payload))
    w.s.close()


if __name__ == "__main__":
    mode, PORT = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3 and mode != "backpressure":
        KEY = sys.argv[3]
    if mode == "gguf":
        gguf_tests()
    elif mode == "backpressure":
        backpressure_tests(int(sys.argv[3]))
    else:
        vindex_tests()
    print("# ws done, %d failed" % tap.FAILS)
