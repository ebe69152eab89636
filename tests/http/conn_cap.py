#!/usr/bin/env python3
"""--max-conns-per-ip (slowloris): one address cannot hold more connections than the cap; the
cap frees as connections close. usage: conn_cap.py PORT CAP"""
import socket
import sys

from tap import ok

PORT, CAP = int(sys.argv[1]), int(sys.argv[2])


def health(s):
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    out = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    return out


idle = [socket.create_connection(("127.0.0.1", PORT), timeout=5) for _ in range(CAP)]
extra = socket.create_connection(("127.0.0.1", PORT), timeout=5)
out = health(extra)
ok("connection %d from one address (cap %d, %d held idle) is refused" % (CAP + 1, CAP, CAP),
   not out.startswith(b"HTTP/1.1 200"), out[:100])
extra.close()
idle.pop().close()
import time
time.sleep(0.3)
s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
out = health(s)
ok("once one closes, a new connection is served", out.startswith(b"HTTP/1.1 200"), out[:100])
for c in idle:
    c.close()
