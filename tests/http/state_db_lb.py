#!/usr/bin/env python3
"""The deployment README describes: three `larql serve --state-db` replicas on one vindex and
one PostgreSQL, HAProxy in front (round robin; a request with X-Session-Id always reaches the
same replica). 500 edits go through HAProxy, one after another, while 8 clients read through
it; after each acknowledgement every replica is asked directly until it answers with the edit.
Midway a replica is killed with -9 and restarted, later PostgreSQL is stopped (edits refused
with 503) and started. At the end: every acknowledged edit is a row and is answered by every
replica, no refused edit exists anywhere, the readers saw no error outside the outage, and
pg_infer's remote backend pointed at HAProxy answers with the edits. Figures printed (not
asserted): propagation from acknowledgement to each replica, read throughput through HAProxy.

usage: state_db_lb.py  (environment: as replicas.py, and PG_STOP, PG_START, HAPROXY)"""
import os
import subprocess
import sys
import threading
import time

from replicas import call, exact_override, free_port, insert, percentiles, sql, start, stop, top, until, wait_for
from tap import ok

PG_STOP, PG_START, HAPROXY = os.environ["PG_STOP"], os.environ["PG_START"], os.environ["HAPROXY"]
N_EDITS, N_READERS, N_REPLICAS = 500, 8, 3
TARGETS = ["Berlin", "Paris", "Rome", "Tokyo"]

ports = [free_port() for _ in range(N_REPLICAS)]
reps = []
for p in ports:
    proc, port, err = start(p)
    ok("replica on port %d starts" % p, port == p, err)
    reps.append(proc)
if any(r.poll() is not None for r in reps):
    sys.exit(0)

lb = free_port()
cfg = os.path.join(os.environ.get("TMPDIR_LOGS", "/tmp"), "haproxy.cfg")
with open(cfg, "w") as f:
    f.write("""global
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch
frontend larql
    bind 127.0.0.1:%d
    default_backend replicas
backend replicas
    balance hdr(X-Session-Id)
    option httpchk GET /v1/health
%s
""" % (lb, "\n".join("    server r%d 127.0.0.1:%d check inter 300 fall 2 rise 1" % (i, p)
                      for i, p in enumerate(ports))))
hap = subprocess.Popen([HAPROXY, "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
ok("HAProxy starts in front of the replicas",
   until(lambda: call(lb, "GET", "/v1/health")[0] == 200, 10, 0.05) is not None)

# X-Session-Id pins a client to one replica: its session's edit is seen on every later request
st, _ = call(lb, "POST", "/v1/insert", {"entity": "Avalon", "relation": "capital", "target": "Rome", "mode": "knn"},
             {"X-Session-Id": "pinned"})
seen = [call(lb, "POST", "/v1/infer", {"prompt": "The capital of Avalon is", "top": 1, "mode": "walk"},
             {"X-Session-Id": "pinned"}) for _ in range(6)]
ok("a session's requests reach the replica that holds it (6 of 6 see its edit)", st == 200 and all(
   s == 200 and (b.get("predictions") or [{}])[0].get("token", "").strip() == "Rome" for s, b in seen), seen[:2])

stop_readers = threading.Event()
outage = threading.Event()
reads = {"ok": 0, "err": 0, "err_outside_outage": 0}
lock = threading.Lock()


def reader(k):
    while not stop_readers.is_set():
        st, _ = call(lb, "POST", "/v1/infer", {"prompt": "The capital of France is", "top": 3, "mode": "walk"},
                     timeout=30)
        with lock:
            if st == 200:
                reads["ok"] += 1
            else:
                reads["err"] += 1
                if not outage.is_set():
                    reads["err_outside_outage"] += 1


threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(N_READERS)]
t_read = time.monotonic()
for t in threads:
    t.start()

acked, refused, unknown, lat = [], [], [], []
missing = []
for i in range(N_EDITS):
    if i == 150:  # a replica dies between two edits and comes back on its port
        outage.set()
        reps[1].kill()
        reps[1].wait()
        proc, port, err = start(ports[1])
        reps[1] = proc
        ok("replica 1 restarts after kill -9 on its port", port == ports[1], err)
        back = until(lambda: all(top(ports[1], e) == t for e, t in acked), 10, 0.05)
        ok("the restarted replica answers all %d edits acknowledged before" % len(acked), back is not None)
        time.sleep(1.0)  # HAProxy's checks (every 300 ms) see it up again
        outage.clear()
    if i == 300:  # PostgreSQL stops: edits are refused (503), reads go on
        outage.set()
        r = subprocess.run(PG_STOP, shell=True, capture_output=True, text=True)
        ok("PostgreSQL stops", r.returncode == 0, r.stderr)
        for j in range(10):
            ent = "Down%d" % j
            st, b = insert(lb, ent, "Paris")
            (refused if st == 503 else acked if st == 200 else unknown).append((ent, "Paris"))
        r = subprocess.run(PG_START, shell=True, capture_output=True, text=True)
        ok("PostgreSQL starts again", r.returncode == 0, r.stderr)
        time.sleep(0.5)
        outage.clear()
    ent, tgt = "Isle%d" % i, TARGETS[i % 4]
    st, b = insert(lb, ent, tgt)
    if st == 200:
        acked.append((ent, tgt))
        res = {}

        def probe(p):  # each replica asked on its own thread, from the acknowledgement on
            res[p] = wait_for(p, ent, tgt, 10.0)

        ts = [threading.Thread(target=probe, args=(p,)) for p in ports]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for p in ports:
            if res.get(p) is None:
                missing.append((ent, p))
            else:
                lat.append(res[p])
    elif st == 503:
        refused.append((ent, tgt))
    else:
        unknown.append((ent, tgt, st, b))
stop_readers.set()
for t in threads:
    t.join(60)
t_read = time.monotonic() - t_read

n_isle = sum(1 for e, _ in acked if e.startswith("Isle"))
ok("all %d edits through HAProxy acknowledged (transport errors: %d)" % (N_EDITS, len(unknown)),
   n_isle == N_EDITS and not unknown, unknown[:3])
ok("the 10 edits while PostgreSQL was down were refused with 503", len([e for e, _ in refused if
                                                                        e.startswith("Down")]) == 10, refused)
ok("every acknowledged edit reached every replica", not missing, missing[:5])
print("# propagation, acknowledgement through HAProxy -> answered by each replica (3 replicas, 8 readers, "
      "loopback, 2 vCPUs): " + percentiles(lat))
print("# reads through HAProxy during the run: %d ok, %d errors (%d outside the outages), %.0f req/s" %
      (reads["ok"], reads["err"], reads["err_outside_outage"], reads["ok"] / t_read))
ok("readers saw no error outside the outages", reads["err_outside_outage"] == 0, reads)
rows, e = sql("SELECT entity FROM infer.edits WHERE model = 'kq' AND (entity LIKE 'Isle%' OR entity LIKE 'Down%')")
rows = rows.split()
ok("nothing acknowledged lost: one row per acknowledged edit",
   sorted(rows) == sorted(e for e, _ in acked), (len(rows), len(acked), e))
ok("nothing refused applied: no row for a refused edit", not set(rows) & {e for e, _ in refused})
bad = [(e, p) for p in ports for e, t in acked[::7] if top(p, e) != t]
ok("every replica answers the acknowledged edits (every 7th checked again at the end)", not bad, bad[:5])
bad = [(e, p) for p in ports for e, _ in refused if exact_override(p, e)]
ok("no replica holds a refused edit (no KNN entry keyed on its prompt)", not bad, bad[:5])

# pg_infer's remote backend pointed at HAProxy sees the same edits
out, e = sql("SELECT infer_create_model_remote('lb', 'http://127.0.0.1:%d')" % lb)
out, e = sql("SELECT token FROM infer('The capital of Isle5 is', 1, 'lb')")
ok("pg_infer's remote model through HAProxy answers with an edit (Isle5 -> %s)" % TARGETS[5 % 4],
   out.strip() == TARGETS[5 % 4], (out, e))



def describe_rate(port, seconds=3.0, clients=N_READERS):
    """describe requests/s from `clients` threads for `seconds` (a figure)."""
    n = [0]
    end = time.monotonic() + seconds

    def run():
        while time.monotonic() < end:
            if call(port, "GET", "/v1/describe?entity=France")[0] == 200:
                with lock:
                    n[0] += 1

    ts = [threading.Thread(target=run) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return n[0] / seconds


one, three = describe_rate(ports[0]), describe_rate(lb)
print("# describe through HAProxy over 3 replicas: %.0f req/s; one replica directly: %.0f req/s (ratio %.2f; "
      "8 clients; on 2 vCPUs the replicas share the same two cores, so the ratio is bounded near 1)" %
      (three, one, three / one if one else 0))
hap.terminate()
hap.wait(10)
ok("the replicas stop on SIGTERM", all([stop(r) for r in reps]))
