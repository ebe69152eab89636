#!/usr/bin/env python3
"""An SSE client that stops reading (a tiny receive buffer, nothing read) while a long stream
with logprobs is written: once --max-stream-buffer bytes wait for it, the server stops the
generation; the client, reading at last, gets the events sent so far, an error event saying
why and [DONE]; the server's memory stays bounded (printed), and it goes on serving.
usage: slow_reader.py PORT PID EOS_ID [EOS_ID...]"""
import json
import os
import socket
import sys
import time
import urllib.request

from tap import ok

PORT, PID = int(sys.argv[1]), int(sys.argv[2])
# under AddressSanitizer freed memory is held back (quarantine) and shadow pages count: the
# margin is the sanitizer's (server.sh passes it), else 64 MB
MARGIN_MB = int(os.environ.get("SLOW_RSS_MARGIN_MB", "64"))
BIAS = {str(int(t)): -100 for t in sys.argv[3:]}  # no end of sequence: the stream runs long


def metric(name):
    m = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % PORT, timeout=30).read().decode()
    v = [line.split()[1] for line in m.splitlines() if line.startswith(name + " ")]
    return float(v[0]) if v else -1


def rss_kb():
    with open("/proc/%d/status" % PID) as f:
        return int([line for line in f if line.startswith("VmRSS")][0].split()[1])


rss0 = rss_kb()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", PORT))
body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000, "stream": True,
                   "logprobs": True, "top_logprobs": 20, "temperature": 1, "seed": 1, "logit_bias": BIAS}).encode()
s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(body) + body)
peak, t0 = rss0, time.monotonic()
while time.monotonic() - t0 < 120 and metric("larql_streams_overflow_total") < 1:
    peak = max(peak, rss_kb())
    time.sleep(0.2)
ok("a stream whose client stops reading is stopped once --max-stream-buffer bytes wait",
   metric("larql_streams_overflow_total") >= 1, time.monotonic() - t0)
peak = max(peak, rss_kb())
data = b""
s.settimeout(10)
try:
    while True:
        c = s.recv(1 << 16)
        if not c:
            break
        data += c
        if data.endswith(b"0\r\n\r\n"):
            break
except socket.timeout:
    pass
s.close()
ok("the client then reads the events, an error event naming --max-stream-buffer, and [DONE]",
   b"--max-stream-buffer" in data and data.rstrip().endswith(b"0") and b"data: [DONE]" in data, data[-300:])
print("# slow reader: %.1f MB read by the client in the end; server RSS %.1f MB before, %.1f MB at most "
      "(cap 64 KB of waiting output)" % (len(data) / 1e6, rss0 / 1024, peak / 1024))
ok("server memory stayed bounded while the client did not read (< %d MB above its start)" % MARGIN_MB,
   peak - rss0 < MARGIN_MB * 1024, (rss0, peak))
st = urllib.request.urlopen(urllib.request.Request(
    "http://127.0.0.1:%d/v1/completions" % PORT, data=json.dumps({"prompt": "hi", "max_tokens": 2}).encode(),
    headers={"Content-Type": "application/json"}), timeout=60).status
ok("the server goes on serving", st == 200, st)
