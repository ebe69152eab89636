#!/usr/bin/env python3
"""A stream whose prompt takes longer to prefill than the server's idle timeout
(--request-timeout) must still deliver its answer: while it has nothing to send, the server
writes SSE comment lines (": keep-alive") that clients ignore, so the connection is not closed
as idle before the first token (it was: the client read an empty body). A non-streamed
request of the same prompt answers too.

usage: keepalive.py PORT TIMEOUT_S
Prints TAP-style lines; run by tests/cli/keepalive.sh."""
import http.client
import json
import sys
import time

import client
import tap
from tap import ok

PORT, TIMEOUT = int(sys.argv[1]), float(sys.argv[2])
PROMPT = [10 + i % 4000 for i in range(2000)]  # token ids: a long prefill on a 2560-wide model

c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
t0 = time.time()
c.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": 3, "stream": True,
                                                      "temperature": 0, "cache_prompt": False}),
          headers={"Content-Type": "application/json"})
r = c.getresponse()
events, first_data, raw = [], None, b""
try:
    for line in r:
        raw += line
        if line.startswith(b"data: ") and first_data is None:
            first_data = time.time() - t0
        if line.strip():
            events.append(line.strip())
except http.client.IncompleteRead as e:
    raw += e.partial
c.close()
datas = [e for e in events if e.startswith(b"data: ")]
done = datas and datas[-1] == b"data: [DONE]"
texts = [json.loads(e[6:])["choices"][0]["text"] for e in datas[:-1]] if done else []
ok("a stream slower to its first token than the idle timeout is answered to [DONE]",
   r.status == 200 and done and len(texts) >= 1, raw[-300:])
ka = [e for e in events if e.startswith(b":")]
ok("... the waits before it carried keep-alive comment lines (first data after %.1f s, timeout %.0f s)"
   % (first_data or -1, TIMEOUT),
   (first_data is not None and first_data <= TIMEOUT) or (len(ka) >= 1 and all(e == b": keep-alive" for e in ka)),
   events[:5])
st, m = client.call(PORT, "GET", "/metrics")
n = [l for l in m.splitlines() if l.startswith("larql_stream_keepalives_total ")] if st == 200 else []
ok("/metrics counts them (larql_stream_keepalives_total)", n and float(n[0].split()[1]) == len(ka), n)
st, b = client.call(PORT, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0,
                                                       "cache_prompt": False}, timeout=600)
ok("the same prompt not streamed is answered", st == 200 and b["choices"][0]["text"] == "".join(texts), b)
sys.exit(1 if tap.FAILS else 0)
