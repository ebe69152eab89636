#!/usr/bin/env python3
"""--header-timeout (slowloris): a request's headers must be complete within the deadline however
steadily they trickle in; a silent connection is cut as well; a keep-alive connection idle
between requests is not (only the idle timeout applies to it).
usage: slowloris.py PORT DEADLINE_S"""
import socket
import sys
import time
import urllib.request

from tap import ok

PORT, DEADLINE = int(sys.argv[1]), float(sys.argv[2])
GIVE_UP = DEADLINE + 12  # far past the deadline: without it these connections would stay open


def closed_by_server(s, trickle):
    """Sends a header line every 0.5 s (trickle) or nothing; True once the server closes."""
    end = time.monotonic() + GIVE_UP
    s.settimeout(0.5)
    i = 0
    while time.monotonic() < end:
        try:
            if trickle:
                s.sendall(b"X-Slow-%d: a\r\n" % i)
                i += 1
            if s.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def request(s):
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    s.settimeout(5)
    out = b""
    while b"\r\n\r\n" not in out:
        b = s.recv(4096)
        if not b:
            break
        out += b
    head, _, body = out.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(body) < n:
        b = s.recv(4096)
        if not b:
            break
        body += b
    return head


trickler = socket.create_connection(("127.0.0.1", PORT))
trickler.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
silent = socket.create_connection(("127.0.0.1", PORT))
keep = socket.create_connection(("127.0.0.1", PORT))
first = request(keep)
ok("a keep-alive request is answered", first.startswith(b"HTTP/1.1 200"), first[:80])
ok("headers trickled a line every 0.5 s: the connection is cut", closed_by_server(trickler, True))
ok("a connection that sends nothing is cut", closed_by_server(silent, False))
# the keep-alive connection has now been idle for longer than the deadline
second = request(keep)
ok("a keep-alive connection idle past the deadline still serves its next request",
   second.startswith(b"HTTP/1.1 200"), second[:80])
# its next request's headers trickled: cut as well (the deadline runs from its request line)
keep.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
ok("a later request on a keep-alive connection trickling its headers is cut",
   closed_by_server(keep, True))
metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % PORT, timeout=5).read().decode()
cut = [l for l in metrics.splitlines() if l.startswith("larql_header_timeouts_total")]
ok("/metrics counts the cut connections", cut and float(cut[0].split()[1]) >= 3, cut)
