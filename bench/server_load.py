#!/usr/bin/env python3
"""Load generator for `make bench-server` (stdlib only), against a running `larql serve` on
127.0.0.1. Prints one JSON object per run on stdout.

  server_load.py chat PORT N MAX_TOKENS
      N concurrent streaming chat requests (greedy, distinct prompts, include_usage), started
      together. Reports per stream: time to first content token, completion tokens, end
      time; the makespan; and the server's scheduler counters over the run (decode tokens,
      steps and time inside the batched decode steps, from GET /v1/runtime).
  server_load.py prefill PORT N
      The same N prompts as `chat PORT N`, one after another with max_tokens 1: the time of
      prefilling them back to back (the reference for the time to first token when N
      streams arrive at once).
  server_load.py describe PORT CONNECTIONS SECONDS
      CONNECTIONS keep-alive clients sending GET /v1/describe back to back for SECONDS.
      Reports requests/s, latency p50/p99 and errors.
  server_load.py summary FILE
      Markdown tables (median, min-max over the runs) from the JSON lines in FILE.
"""
import http.client
import json
import sys
import threading
import time

HOST = "127.0.0.1"


def runtime(port):
    c = http.client.HTTPConnection(HOST, port, timeout=60)
    c.request("GET", "/v1/runtime")
    j = json.loads(c.getresponse().read())
    c.close()
    return j


def stream_body(k, max_tokens):
    return json.dumps({
        "messages": [{"role": "user", "content": "Write a short story about topic number %d." % k}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()


def one_stream(port, k, max_tokens, barrier, out):
    body = stream_body(k, max_tokens)
    c = http.client.HTTPConnection(HOST, port, timeout=600)
    if barrier:
        barrier.wait()
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    ttft = None
    tokens = None
    buf = b""
    status = r.status
    while True:
        d = r.read1(65536) if hasattr(r, "read1") else r.read(4096)
        if not d:
            break
        buf += d
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            payload = ev[6:]
            if payload == b"[DONE]":
                continue
            j = json.loads(payload)
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            for ch in j.get("choices", []):
                if ttft is None and ch.get("delta", {}).get("content"):
                    ttft = time.monotonic() - t0
    t1 = time.monotonic()
    c.close()
    out[k] = {"status": status, "t0": t0, "t1": t1, "ttft": ttft, "tokens": tokens}


def chat(port, n, max_tokens):
    before = runtime(port)["scheduler"]
    barrier = threading.Barrier(n)
    out = [None] * n
    ths = [threading.Thread(target=one_stream, args=(port, k, max_tokens, barrier, out)) for k in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    after = runtime(port)["scheduler"]
    t0 = min(o["t0"] for o in out)
    t1 = max(o["t1"] for o in out)
    toks = sum(o["tokens"] or 0 for o in out)
    d_tokens = after["decode_tokens"] - before["decode_tokens"]
    d_steps = after["decode_steps"] - before["decode_steps"]
    ttfts = sorted(o["ttft"] for o in out if o["ttft"] is not None)
    # a stream's own rate: its tokens after the first over the time since its first token
    per = sorted((o["tokens"] - 1) / (o["t1"] - o["t0"] - o["ttft"]) for o in out
                 if o["ttft"] is not None and o["tokens"] and o["tokens"] > 1 and o["t1"] - o["t0"] > o["ttft"])
    res = {
        "streams": n, "errors": sum(o["status"] != 200 for o in out),
        "completion_tokens": toks, "makespan_s": t1 - t0,
        "client_tok_s": toks / (t1 - t0),
        "ttft_median_s": ttfts[len(ttfts) // 2] if ttfts else None,
        "ttft_max_s": ttfts[-1] if ttfts else None,
        "ttft_p99_s": ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))] if ttfts else None,
        "per_stream_tok_s": per[len(per) // 2] if per else None,
        "decode_steps": d_steps, "decode_tokens": d_tokens,
        "mean_batch": d_tokens / d_steps if d_steps else 0,
        "max_batch_seen": after["max_batch_seen"],
    }
    d_sec = after["decode_step_seconds"] - before["decode_step_seconds"]
    res["server_decode_tok_s"] = d_tokens / d_sec if d_sec > 0 else 0.0
    print(json.dumps(res))


def prefill(port, n):
    out = [None] * n
    t0 = time.monotonic()
    for k in range(n):
        one_stream(port, k, 1, None, out)
    print(json.dumps({"prefill_streams": n, "serial_s": time.monotonic() - t0,
                      "errors": sum(o["status"] != 200 for o in out)}))


def describe(port, conns, seconds):
    lat = []
    errors = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(conns)
    stop = [0.0]

    def worker():
        c = http.client.HTTPConnection(HOST, port, timeout=60)
        mine = []
        errs = 0
        barrier.wait()
        if not stop[0]:
            stop[0] = time.monotonic() + seconds
        while time.monotonic() < stop[0]:
            t = time.monotonic()
            try:
                c.request("GET", "/v1/describe?entity=France")
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    errs += 1
            except Exception:  # noqa: a dropped connection counts as an error, reconnect
                errs += 1
                c.close()
                c = http.client.HTTPConnection(HOST, port, timeout=60)
                continue
            mine.append(time.monotonic() - t)
        c.close()
        with lock:
            lat.extend(mine)
            errors[0] += errs

    ths = [threading.Thread(target=worker) for _ in range(conns)]
    t0 = time.monotonic()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.monotonic() - t0
    lat.sort()
    n = len(lat)
    print(json.dumps({
        "connections": conns, "requests": n, "errors": errors[0], "req_s": n / wall,
        "p50_ms": lat[n // 2] * 1e3 if n else None,
        "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1e3 if n else None,
    }))


def summary(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]

    def med(v):
        v = sorted(x for x in v if x is not None)
        if not v:
            return None
        n = len(v)
        return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])

    def cell(v, fmt):
        v = [x for x in v if x is not None]
        if not v:
            return "-"
        return (fmt % med(v)) + " (" + (fmt % min(v)) + "-" + (fmt % max(v)) + ")"

    chat_rows = [r for r in rows if "streams" in r]
    serial = {}
    for r in rows:
        if "prefill_streams" in r:
            serial.setdefault(r["prefill_streams"], []).append(r["serial_s"])
    if chat_rows:
        one = med([r["server_decode_tok_s"] for r in chat_rows if r["streams"] == 1]) or 0
        one_c = med([r["client_tok_s"] for r in chat_rows if r["streams"] == 1]) or 0
        print("| streams | runs | aggregate tok/s (client) | x 1 stream | per-stream tok/s | decode tok/s in "
              "batched steps (server) | x 1 stream | mean batch | TTFT p50 s | TTFT p99 s | prompts prefilled "
              "back to back s | TTFT p99 / that | errors |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for n in sorted({r["streams"] for r in chat_rows}):
            g = [r for r in chat_rows if r["streams"] == n]
            sd = [r["server_decode_tok_s"] for r in g]
            cl = [r["client_tok_s"] for r in g]
            p99 = med([r.get("ttft_p99_s", r["ttft_max_s"]) for r in g])
            ser = med(serial.get(n, []))
            print("| %d | %d | %s | %.2f | %s | %s | %.2f | %.2f | %s | %s | %s | %s | %d |" % (
                n, len(g), cell(cl, "%.1f"), (med(cl) / one_c) if one_c else 0,
                cell([r.get("per_stream_tok_s") for r in g], "%.1f"), cell(sd, "%.1f"),
                (med(sd) / one) if one else 0, med([r["mean_batch"] for r in g]),
                cell([r["ttft_median_s"] for r in g], "%.2f"),
                cell([r.get("ttft_p99_s", r["ttft_max_s"]) for r in g], "%.2f"),
                cell(serial.get(n, []), "%.2f"), ("%.2f" % (p99 / ser)) if ser and p99 else "-",
                sum(r["errors"] for r in g)))
        print()
    d_rows = [r for r in rows if "connections" in r]
    if d_rows:
        print("| connections | runs | requests/s | p50 ms | p99 ms | p99/p50 | errors |")
        print("|---|---|---|---|---|---|---|")
        for n in sorted({r["connections"] for r in d_rows}):
            g = [r for r in d_rows if r["connections"] == n]
            p50, p99 = med([r["p50_ms"] for r in g]), med([r["p99_ms"] for r in g])
            print("| %d | %d | %s | %s | %s | %.1f | %d |" % (
                n, len(g), cell([r["req_s"] for r in g], "%.1f"), cell([r["p50_ms"] for r in g], "%.1f"),
                cell([r["p99_ms"] for r in g], "%.1f"), p99 / p50 if p50 else 0, sum(r["errors"] for r in g)))
        print()


if __name__ == "__main__":
    if sys.argv[1] == "summary":
        summary(sys.argv[2])
        sys.exit(0)
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "chat":
        chat(port, int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "prefill":
        prefill(port, int(sys.argv[3]))
    else:
        describe(port, int(sys.argv[3]), float(sys.argv[4]))
