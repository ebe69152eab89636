"""Helpers shared by the --state-db tests (state_db.py, state_db_lb.py): larql serve replicas
on one vindex and one PostgreSQL database (environment: LARQL, VINDEX, CONNINFO, PSQL,
TMPDIR_LOGS), HTTP calls, and the KNN answer of "The capital of X is"."""
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

LARQL, VINDEX, CONNINFO = os.environ["LARQL"], os.environ["VINDEX"], os.environ["CONNINFO"]
PSQL = os.environ["PSQL"]
PROMPT = "The capital of %s is"
_logs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(port=0):
    """A replica on port (0: any free one): (process, port or None, the log's tail on failure)."""
    log = open(os.path.join(os.environ.get("TMPDIR_LOGS", "/tmp"), "replica.%d.log" % len(_logs)), "w+")
    _logs.append(log)
    p = subprocess.Popen([LARQL, "serve", VINDEX, "--port", str(port), "--threads", "1", "--state-db", CONNINFO,
                          "--state-model", "kq"], stdout=subprocess.PIPE, stderr=log, text=True)
    m = re.search(r"listening on http://[^:]+:(\d+)", p.stdout.readline())
    if not m:
        p.kill()
        p.wait()
        log.seek(0)
        return p, None, log.read()[-600:]
    return p, int(m.group(1)), ""


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=10)
        return True
    except subprocess.TimeoutExpired:
        p.kill()
        return False


def call(port, method, path, body=None, headers=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method=method)
    if data:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
        return 0, {"transport": str(e)}


def top(port, entity):
    st, b = call(port, "POST", "/v1/infer", {"prompt": PROMPT % entity, "top": 1, "mode": "walk"})
    preds = b.get("predictions") or []
    return preds[0]["token"].strip() if st == 200 and preds else None


def exact_override(port, entity):
    """True when the KNN entry that answers "The capital of <entity> is" was keyed on that very
    prompt (cosine ~1): the entity's own edit, not a neighbour's whose prompt is alike."""
    st, b = call(port, "POST", "/v1/infer", {"prompt": PROMPT % entity, "top": 1, "mode": "walk"})
    return st == 200 and (b.get("knn_override") or {}).get("cosine", 0) > 0.9999


def insert(port, entity, target):
    return call(port, "POST", "/v1/insert", {"entity": entity, "relation": "capital", "target": target, "mode": "knn"})


def until(cond, limit=10.0, step=0.002):
    """Seconds until cond() held, or None after limit."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    return None


def wait_for(port, entity, target, limit=10.0):
    return until(lambda: top(port, entity) == target, limit)


def sql(q):
    r = subprocess.run(PSQL + " -At -c " + json.dumps(q), shell=True, capture_output=True, text=True)
    return r.stdout.strip(), r.stderr.strip()


def percentiles(xs):
    xs = sorted(xs)
    if not xs:
        return "none"
    return "p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d" % (
        xs[len(xs) // 2] * 1000, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1000, xs[-1] * 1000, len(xs))
