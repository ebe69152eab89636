#!/usr/bin/env python3
"""--rate-limit N/min with --trust-forwarded-for: a token bucket per client address (the first
X-Forwarded-For entry; IPv6 by its /64). Past N, 429 with Retry-After in the route's own error
envelope; health, the API document and metrics are not counted. usage: rate_limit.py PORT N"""
import json
import sys
import urllib.error
import urllib.request

from tap import ok

PORT, N = int(sys.argv[1]), int(sys.argv[2])


def get(path, fwd=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (PORT, path))
    if fwd:
        req.add_header("X-Forwarded-For", fwd)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


codes = [get("/v1/stats", "10.0.0.1")[0] for _ in range(N)]
ok("the first %d requests from an address are served" % N, codes == [200] * N, codes)
st, hd, body = get("/v1/stats", "10.0.0.1")
ok("request %d is 429" % (N + 1), st == 429, st)
ra = hd.get("Retry-After", "")
ok("429 carries Retry-After in whole seconds (1 token per %g s)" % (60 / N),
   ra.isdigit() and 1 <= int(ra) <= 60 / N + 1, ra)
err = json.loads(body or b"{}").get("error")
ok("LARQL route: {\"error\": message} naming --rate-limit", isinstance(err, str) and "--rate-limit" in err, body[:200])
st, hd, body = get("/v1/models", "10.0.0.1")
e = json.loads(body or b"{}").get("error") or {}
ok("OpenAI route: 429 with type rate_limit_error (the SDK's RateLimitError)",
   st == 429 and isinstance(e, dict) and e.get("type") == "rate_limit_error", (st, body[:200]))
ok("health is not rate-limited", get("/v1/health", "10.0.0.1")[0] == 200)
ok("the API document is not rate-limited", get("/v1/openapi.json", "10.0.0.1")[0] == 200)
st, _, body = get("/metrics", "10.0.0.1")
line = [l for l in body.decode().splitlines() if l.startswith("larql_rejected_rate_total ")]
ok("metrics: larql_rejected_rate_total counts the refusals",
   st == 200 and line and float(line[0].split()[1]) >= 2, line)
ok("another address has its own bucket", get("/v1/stats", "10.0.0.2")[0] == 200)
ok("only the first X-Forwarded-For entry counts (a proxy appends, the client may forge the rest)",
   get("/v1/stats", "10.0.0.1, 10.0.0.3")[0] == 429)
codes = [get("/v1/stats", "2001:db8::%x" % (i + 1))[0] for i in range(N + 1)]
ok("IPv6 addresses of one /64 share a bucket", codes[:N] == [200] * N and codes[N] == 429, codes)
ok("another /64 has its own", get("/v1/stats", "2001:db8:0:1::1")[0] == 200)
ok("unknown routes are counted too", get("/nope", "10.0.0.1")[0] == 429)
