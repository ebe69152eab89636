#!/usr/bin/env python3
"""Soak: drives a running `larql serve` (started on a vindex with weights, with an API key,
by tests/cli/soak.sh) from loopback clients with mixed traffic for SECONDS, then reports and
judges.  soak.py PORT KEY SERVER_PID SECONDS [CLIENTS]

Traffic (each client thread picks at random): chat completions streaming and not,
completions with logprobs, describe / walk / infer, WebSocket generate (half of them
cancelled after the first token), streams dropped mid-way, slow readers, malformed JSON,
oversized bodies, wrong or missing API keys, inserts via /v1/insert (into a handful of
X-Session-Id sessions, until their layer has no free feature: then 400 saying so).

Report: requests by outcome (route, status), p50/p99 latency per route, RSS and open file
descriptors of the server at start, after warm-up and at the end.  Fails ("not ok") on: the
server dying, any 5xx other than 503 (the deliberate "busy"), an answer other than the one
the request must get (a valid request refused with 4xx, a malformed one accepted), RSS
growth from the end of warm-up to the end above max(16 MiB, 10% of the warm RSS)
(SOAK_RSS_MARGIN_MB overrides it), or more
open descriptors at the end (server idle again) than after warm-up."""
import collections
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

from tap import ok
import tap
import ws

HOST = "127.0.0.1"
PORT, KEY, PID, SECONDS = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
CLIENTS = int(sys.argv[5]) if len(sys.argv) > 5 else 4
MAX_BODY = 256 * 1024  # the server runs with --max-body 262144
AUTH = {"Authorization": "Bearer " + KEY}

lock = threading.Lock()
outcomes = collections.Counter()   # (route, status) -> n
latency = collections.defaultdict(list)  # route -> [seconds]
problems = []                       # unexpected answers (bounded)


def record(route, status, dt, expect):
    with lock:
        outcomes[(route, status)] += 1
        latency[route].append(dt)
        if status not in expect and status != 503 and len(problems) < 50:
            problems.append((route, status, expect))


def proc_rss_kb():
    with open("/proc/%d/status" % PID) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def proc_fds():
    return len(os.listdir("/proc/%d/fd" % PID))


def alive():
    try:
        with open("/proc/%d/stat" % PID) as f:
            return f.read().split()[2] not in ("Z", "X")
    except OSError:
        return False


def conn():
    return http.client.HTTPConnection(HOST, PORT, timeout=60)


def request(route, method, path, body=None, headers=None, expect=(200,), relabel=None):
    h = dict(AUTH)
    h.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    t0 = time.monotonic()
    c = conn()
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        st = r.status
        if relabel:
            st = relabel(st, payload)
    except (OSError, http.client.HTTPException) as e:
        st = "net:" + type(e).__name__
    finally:
        c.close()
    record(route, st, time.monotonic() - t0, expect)
    return st


def chat_body(stream, n=8):
    return {"messages": [{"role": "user", "content": random.choice(["Hello", "Tell me a story", "the model"])}],
            "max_tokens": n, "stream": stream, "temperature": random.choice([0, 0.8]), "seed": random.randint(0, 99)}


def sse(route, path, body, drop_after=None, slow=False):
    """streams an SSE response: reads to [DONE], or drops the connection after drop_after
    bytes, or reads it slowly (small reads with pauses)"""
    t0 = time.monotonic()
    s = socket.create_connection((HOST, PORT), timeout=60)
    data = json.dumps(body).encode()
    s.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n" % (path, KEY, len(data))).encode() + data)
    buf = b""
    st = "net:none"
    try:
        while True:
            d = s.recv(16 if slow else 65536)
            if not d:
                break
            buf += d
            if st == "net:none" and b"\r\n" in buf:
                st = int(buf.split(b" ", 2)[1])
            if drop_after is not None and len(buf) >= drop_after:
                st = "dropped" if st == 200 else st
                break
            if slow:
                time.sleep(0.01)
    except OSError as e:
        st = "net:" + type(e).__name__
    s.close()
    if st == 200 and b"[DONE]" not in buf:
        st = "stream-without-DONE"
    record(route, st, time.monotonic() - t0, (200, "dropped"))


def ws_generate():
    t0 = time.monotonic()
    st = "ws-ok"
    try:
        ws.HOST, ws.PORT, ws.KEY = HOST, PORT, KEY
        w = ws.WS()
        if w.status != 101:
            st = w.status
        else:
            cancel = random.random() < 0.5
            w.send_json({"type": "generate", "prompt": "Once upon a time", "max_tokens": 24})
            while True:
                m = w.recv_json()
                if m.get("type") == "token" and cancel:
                    w.send_json({"type": "cancel"})
                    cancel = False
                if m.get("type") in ("done", "error"):
                    if m["type"] == "error" and not any(w_ in m.get("message", "") for w_ in ("busy", "queued")):
                        st = "ws-error: " + m.get("message", "")[:60]
                    break
        w.s.close()
    except (OSError, EOFError, ValueError) as e:
        st = "net:" + type(e).__name__
    record("ws generate", st, time.monotonic() - t0, ("ws-ok",))


ENTITIES = ["Atlantis", "Lemuria", "Hyperborea", "Avalon", "Thule", "Mu", "Agartha", "Zerzura"]


def insert_full(st, payload):
    """a session whose layer has no free feature left answers 400 saying so: the expected
    end of a long run of inserts, counted apart"""
    return "400 layer full" if st == 400 and b"no feature slot" in payload else st


def insert():
    sid = "soak-%d" % random.randint(0, 3)
    request("insert", "POST", "/v1/insert",
            {"entity": random.choice(ENTITIES), "relation": "capital", "target": "the", "layer": 1},
            headers={"X-Session-Id": sid}, expect=(200, "400 layer full"), relabel=insert_full)


ACTIONS = [
    (8, lambda: request("chat", "POST", "/v1/chat/completions", chat_body(False))),
    (8, lambda: sse("chat stream", "/v1/chat/completions", chat_body(True))),
    (6, lambda: request("completions logprobs", "POST", "/v1/completions",
                        {"prompt": "The capital of France is", "max_tokens": 6, "logprobs": 3, "temperature": 0})),
    (6, lambda: request("describe", "GET", "/v1/describe?entity=%s&band=all" % random.choice(["the", "model", "a"]))),
    (6, lambda: request("walk", "GET", "/v1/walk?prompt=the+model+is&top=5")),
    (6, lambda: request("infer", "POST", "/v1/infer", {"prompt": "the model is", "top": 3})),
    (5, ws_generate),
    (4, lambda: sse("stream dropped", "/v1/chat/completions", chat_body(True, 40), drop_after=random.randint(1, 600))),
    (2, lambda: sse("stream slow reader", "/v1/completions",
                    {"prompt": "Once", "max_tokens": 12, "stream": True}, slow=True)),
    (4, lambda: request("malformed", "POST", "/v1/chat/completions", b'{"messages": [', expect=(400,))),
    (2, lambda: request("oversized", "POST", "/v1/completions", b'{"prompt": "' + b"a" * (MAX_BODY + 1024) + b'"}',
                        expect=(413,))),
    (3, lambda: request("auth", "POST", "/v1/chat/completions", chat_body(False),
                        headers={"Authorization": random.choice(["Bearer wrong", "Basic eDp5", ""])}, expect=(401,))),
    (4, insert),
]
WEIGHTS = [w for w, _ in ACTIONS]


def client(deadline, seed):
    rnd = random.Random(seed)
    while time.monotonic() < deadline and alive():
        random.seed(rnd.random())
        random.choices(ACTIONS, WEIGHTS)[0][1]()


def run_phase(seconds, seed0):
    deadline = time.monotonic() + seconds
    ts = [threading.Thread(target=client, args=(deadline, seed0 + i)) for i in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def idle_stats():
    """waits (bounded) until the server reports no active request or stream"""
    for _ in range(100):
        try:
            c = conn()
            c.request("GET", "/v1/stats", headers=AUTH)
            j = json.loads(c.getresponse().read())
            c.close()
            if not j.get("active_requests") and not j.get("active_streams"):
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return False


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100.0))] if xs else 0.0


def main():
    rss0, fd0 = proc_rss_kb(), proc_fds()
    warm = max(5.0, SECONDS * 0.2)
    t0 = time.monotonic()
    run_phase(warm, 1000)
    idle_stats()
    rss1, fd1 = proc_rss_kb(), proc_fds()
    run_phase(max(1.0, SECONDS - warm), 2000)
    wall = time.monotonic() - t0
    ok("server alive after the soak", alive())
    if not alive():
        return
    ok("server idle again (no active request or stream)", idle_stats())
    time.sleep(0.5)
    rss2, fd2 = proc_rss_kb(), proc_fds()
    total = sum(outcomes.values())
    print("# soak: %.0f s, %d clients, %d requests (%.1f/s)" % (wall, CLIENTS, total, total / wall))
    print("# outcomes (route, status: n):")
    for (route, st), n in sorted(outcomes.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print("#   %-22s %-20s %6d" % (route, st, n))
    print("# latency per route (ms): p50 / p99 / max over all outcomes")
    for route in sorted(latency):
        xs = latency[route]
        print("#   %-22s %8.1f %8.1f %8.1f  (n=%d)" % (route, pct(xs, 50) * 1e3, pct(xs, 99) * 1e3, max(xs) * 1e3, len(xs)))
    print("# server RSS MiB: start %.1f, after warm-up %.1f, end %.1f" % (rss0 / 1024, rss1 / 1024, rss2 / 1024))
    print("# server open fds: start %d, after warm-up %d, end %d" % (fd0, fd1, fd2))
    fivexx = {k: n for k, n in outcomes.items() if isinstance(k[1], int) and k[1] >= 500 and k[1] != 503}
    ok("no 5xx other than 503", not fivexx, fivexx)
    ok("every request got the answer it must get (or 503 busy)", not problems, problems[:10])
    ok("traffic of every kind ran", all(any(k[0] == r for k in outcomes) for r in
                                        ["chat", "chat stream", "describe", "walk", "infer", "ws generate", "insert"]),
       sorted(set(k[0] for k in outcomes)))
    # SOAK_RSS_MARGIN_MB overrides the margin: sanitizer builds hold freed memory back on
    # purpose (ASan's quarantine keeps up to 256 MiB), which is growth but not a leak
    margin = int(os.environ["SOAK_RSS_MARGIN_MB"]) * 1024 if os.environ.get("SOAK_RSS_MARGIN_MB") \
        else max(16 * 1024, rss1 // 10)
    ok("RSS growth after warm-up %.1f MiB <= margin %.1f MiB" % ((rss2 - rss1) / 1024, margin / 1024),
       rss2 - rss1 <= margin, (rss1, rss2))
    ok("no leaked descriptor (end %d <= after warm-up %d)" % (fd2, fd1), fd2 <= fd1, (fd1, fd2))


if __name__ == "__main__":
    main()
    print("# soak done, %d failed" % tap.FAILS)
