#!/usr/bin/env python3
"""N idle keep-alive connections held open against larql serve (--max-connections above N):
each made one request and stays connected. Every one is served; beside them a new client's
health check and a short completion still answer; the server's memory and thread count with
them open, and the latencies before and beside them, are printed as figures; after they close
the threads go away. usage: idle_conns.py PORT PID N"""
import socket
import statistics
import sys
import time
import urllib.request

from tap import ok

PORT, PID, N = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def status():
    d = {}
    with open("/proc/%d/status" % PID) as f:
        for line in f:
            k, _, v = line.partition(":")
            d[k] = v.strip()
    return int(d["VmRSS"].split()[0]), int(d["Threads"])


def timed(path, body=None, runs=9):
    ts, codes = [], []
    for _ in range(runs):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (PORT, path), data=body,
                                     headers={"Content-Type": "application/json"} if body else {})
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                codes.append(r.status)
        except Exception as e:  # noqa: BLE001 - any failure is a failed check below
            codes.append(str(e))
        ts.append(time.monotonic() - t0)
    return statistics.median(ts) * 1000, codes


COMPLETION = b'{"prompt":"The capital of France is","max_tokens":4,"temperature":0}'
timed("/v1/completions", COMPLETION, 2)  # the weights paged in
rss0, thr0 = status()
h0, _ = timed("/v1/health")
c0, _ = timed("/v1/completions", COMPLETION, 5)

socks, served = [], 0
t0 = time.monotonic()
for i in range(N):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    served += data.startswith(b"HTTP/1.1 200")
    socks.append(s)
t_open = time.monotonic() - t0
ok("%d keep-alive connections each served, then held open idle" % N, served == N, served)
rss1, thr1 = status()
h1, hc = timed("/v1/health")
c1, cc = timed("/v1/completions", COMPLETION, 5)
ok("beside them a new client's health check and completion answer", hc == [200] * 9 and cc == [200] * 5, (hc, cc))
print("# %d idle keep-alive connections (opened in %.1f s): server RSS %.1f -> %.1f MB (%.1f KB each), threads %d -> "
      "%d; health %.2f -> %.2f ms, 4-token completion %.1f -> %.1f ms (medians)" %
      (N, t_open, rss0 / 1024, rss1 / 1024, (rss1 - rss0) / max(N, 1), thr0, thr1, h0, h1, c0, c1))
for s in socks:
    s.close()
t0 = time.monotonic()
while time.monotonic() - t0 < 20 and status()[1] > thr0 + 8:
    time.sleep(0.2)
ok("after they close, their threads are gone", status()[1] <= thr0 + 8, (thr0, status()[1]))
