"""Restart time and memory of `larql serve --state-dir` with many edits and sessions
(bench/restart.sh drives it): fills a fresh state directory with N global KNN inserts and
S sessions of K inserts each (8 client threads), reads the server's RSS, kills it with
SIGKILL, restarts it on the same directory and times the start until /v1/health answers,
then reads the RSS again.

usage: restart.py LARQL VINDEX STATEDIR N S K
(LQ_BENCH_MODE=compose: the N global inserts are compose inserts, no layer given)"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "http"))
import client  # noqa: E402

LARQL, VX, STATE = sys.argv[1:4]
N, S, K = (int(x) for x in sys.argv[4:7])


def start():
    t0 = time.time()
    p = subprocess.Popen([LARQL, "serve", VX, "--state-dir", STATE, "--port", "0", "--threads", "2",
                          "--max-sessions", str(max(S, 1))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    port = None
    for line in p.stdout:
        m = re.match(r"listening on http://[^:]*:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    while True:
        try:
            if client.request(port, "GET", "/v1/health")[0] == 200:
                break
        except OSError:
            time.sleep(0.01)
    return p, port, time.time() - t0


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


MODE = os.environ.get("LQ_BENCH_MODE", "knn")


def run(jobs, port, mode="knn"):
    lock = threading.Lock()
    bad = []

    def worker():
        while True:
            with lock:
                if not jobs:
                    return
                entity, sid = jobs.pop()
            body = {"entity": entity, "relation": "capital", "target": "the", "mode": mode}
            if mode == "knn":
                body["layer"] = 1
            st, _, raw = client.request(port, "POST", "/v1/insert", body,
                                        headers={"X-Session-Id": sid} if sid else None)
            if st != 200:
                bad.append((st, raw[:200]))

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return bad


p, port, t_first = start()
t0 = time.time()
bad = run([("G%d" % i, None) for i in range(N)], port, MODE)
bad += run([("S%d_%d" % (s, k), "s%d" % s) for s in range(S) for k in range(K)], port)
fill = time.time() - t0
rss_before = rss_mb(p.pid)
p.send_signal(signal.SIGKILL)
p.wait()
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(STATE) for f in fs)
p, port, t_restart = start()
rss_after = rss_mb(p.pid)
t0 = time.time()
for s in range(S):  # every session's first request (a session's journal replays then)
    client.request(port, "GET", "/v1/patches", headers={"X-Session-Id": "s%d" % s})
t_touch = time.time() - t0
rss_touched = rss_mb(p.pid)
p.send_signal(signal.SIGTERM)
err = p.stderr.read()
p.wait()
restored = re.search(r"state restored in (\d+) ms", err)
print("edits: %d global (%s) + %d sessions x %d; %d refused%s" % (N, MODE, S, K, len(bad),
                                                                  (": %s" % bad[:2]) if bad else ""))
print("filled in %.1f s; state dir %.1f MiB; RSS before the kill %.1f MiB" % (fill, size / 1048576.0, rss_before))
print("restart to /v1/health: %.2f s (the server's own count: %s ms); RSS after the restart %.1f MiB"
      % (t_restart, restored.group(1) if restored else "?", rss_after))
print("then the first request of each of the %d sessions: %.2f s; RSS %.1f MiB" % (S, t_touch, rss_touched))
