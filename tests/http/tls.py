#!/usr/bin/env python3
"""`larql serve --tls-cert --tls-key`: HTTPS and WSS with a certificate the client verifies
(the test's own self-signed one); SIGTERM closes an open WSS session with 1001 and the
server exits. usage: tls.py PORT CA_PEM SERVER_PID"""
import http.client
import os
import signal
import time
import json
import socket
import ssl
import sys

import ws
from tap import ok

PORT, CA, PID = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=CA)


def https(method, path, body=None):
    c = http.client.HTTPSConnection("127.0.0.1", PORT, context=ctx, timeout=60)
    c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
              headers={"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


st, body = https("GET", "/v1/health")
ok("GET /v1/health over HTTPS, the certificate verified", st == 200 and b'"ok"' in body, (st, body[:200]))
st, body = https("POST", "/v1/infer", {"prompt": "The capital of France is", "top": 3})
ok("POST /v1/infer over HTTPS", st == 200 and b"predictions" in body, (st, body[:200]))
st, body = https("POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True})
events = [l for l in body.decode("utf-8", "replace").split("\n") if l.startswith("data: ")]
ok("a streamed chat completion over HTTPS ends with [DONE]",
   st == 200 and len(events) >= 2 and events[-1] == "data: [DONE]", (st, body[-200:]))

s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
try:
    plain = s.recv(4096)
except (ConnectionResetError, socket.timeout):
    plain = b""
s.close()
ok("plain HTTP to the HTTPS port gets no HTTP answer", not plain.startswith(b"HTTP/1.1 200"), plain[:100])

try:
    bad = ssl.create_default_context()  # the system's CAs: the self-signed certificate is unknown
    c = http.client.HTTPSConnection("127.0.0.1", PORT, context=bad, timeout=10)
    c.request("GET", "/v1/health")
    c.getresponse()
    refused = False
except ssl.SSLError:
    refused = True
ok("a client that does not trust the certificate refuses it", refused)


class TlsSocket:
    """ws.py's client over TLS: its WS class opens connections with socket.create_connection"""
    def create_connection(self, addr, timeout=None):
        return ctx.wrap_socket(socket.create_connection(addr, timeout=timeout), server_hostname="127.0.0.1")


ws.socket = TlsSocket()
ws.HOST, ws.PORT = "127.0.0.1", PORT
w = ws.WS()
ok("WSS: the WebSocket handshake over TLS answers 101 with the accept value",
   w.status == 101 and w.headers.get("sec-websocket-accept") == w.expected_accept(), (w.status, w.headers))
if w.status == 101:
    w.send_json({"type": "infer", "prompt": "The capital of France is", "top": 3})
    ms = w.until({"infer_done", "error"})
    ok("WSS: infer answers three predictions and infer_done",
       [m["type"] for m in ms].count("prediction") == 3 and ms[-1]["type"] == "infer_done", ms[-3:])
    w.close()

w2 = ws.WS()
os.kill(PID, signal.SIGTERM)
try:
    code = w2.close_code()
except (EOFError, OSError) as e:
    code = repr(e)
ok("SIGTERM: an open WSS session is closed with 1001", code == 1001, code)


def exited(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


end = time.time() + 30
while not exited(PID) and time.time() < end:
    time.sleep(0.05)
ok("the HTTPS server exits after SIGTERM with a WSS session open", exited(PID))
