#!/usr/bin/env python3
"""larql serve --state-db: the global edits of several servers are rows of one PostgreSQL
infer.edits (pg_infer's table). Two servers on one vindex and one database: an edit
acknowledged by one is applied by the other (LISTEN/NOTIFY), one written from SQL by both;
patches and edit removals travel too; a server killed with -9 comes back with every edit; with
the database stopped an edit is refused with 503 (and not applied anywhere later) while reads go
on, and after it restarts edits flow again. Prints the propagation latency (acknowledgement on
one server to the answer on the other) as a figure, not an assertion.

usage: state_db.py  (environment: as replicas.py, and PG_STOP, PG_START)"""
import json
import os
import subprocess
import sys

from replicas import call, exact_override, insert, percentiles, sql, start, stop, top, until, wait_for
from tap import ok

PG_STOP, PG_START = os.environ["PG_STOP"], os.environ["PG_START"]


a, pa, err = start()
b, pb, err2 = start()
ok("two servers start with --state-db on one database", pa and pb, err + err2)
if not (pa and pb):
    sys.exit(0)

# one edit each way, then a run of them: acknowledged on one, answered by the other
st, body = insert(pa, "Atlantis", "Tokyo")
ok("an insert on server A is acknowledged (after its COMMIT)", st == 200 and body.get("id"), (st, body))
ok("server A answers with it at once", top(pa, "Atlantis") == "Tokyo")
ok("server B answers with it (its row arrived by NOTIFY)", wait_for(pb, "Atlantis", "Tokyo") is not None)
lat = []
targets = ["Berlin", "Paris", "Rome", "Tokyo"]
for i in range(40):
    src, dst = (pa, pb) if i % 2 else (pb, pa)
    ent, tgt = "Isle%d" % i, targets[i % 4]
    st, _ = insert(src, ent, tgt)
    if st != 200:
        lat.append(None)
        continue
    lat.append(wait_for(dst, ent, tgt))
seen = [x for x in lat if x is not None]
ok("40 inserts alternating between the servers: each seen by the other", len(seen) == 40, lat)
print("# propagation (acknowledged on one server -> answered by the other, loopback, polled every 2 ms): " +
      percentiles(seen) + " edits")
n, e = sql("SELECT count(*) FROM infer.edits WHERE model = 'kq'")
ok("infer.edits holds one row per acknowledged edit (41)", n == "41", (n, e))

# an edit from SQL reaches both servers
out, e = sql("SELECT infer_insert('Lemuria', 'capital', 'Paris', 'kq', 'knn')")
ok("infer_insert from SQL commits a row", out.isdigit(), (out, e))
ok("server A applies the SQL edit", wait_for(pa, "Lemuria", "Paris") is not None)
ok("server B applies the SQL edit", wait_for(pb, "Lemuria", "Paris") is not None)

# a patch applied on A is listed by B; removed on B, gone from A
patch = {"version": 1, "base_model": "", "description": "cap.vlp", "operations": [
    {"op": "delete", "layer": 1, "feature": 17, "reason": "test"}]}
st, body = call(pa, "POST", "/v1/patches/apply", {"patch": patch})
ok("a patch applied on A (a row, op 'patch')", st == 200, (st, body))


def patches(port):
    return [p["name"] for p in call(port, "GET", "/v1/patches")[1].get("patches", [])]


ok("B lists the patch by its name", until(lambda: "cap.vlp" in patches(pb)) is not None, patches(pb))
st, body = call(pa, "POST", "/v1/patches/apply", {"patch": patch})
ok("the same name again is refused (400), no row written", st == 400 and
   sql("SELECT count(*) FROM infer.edits WHERE op = 'patch'")[0] == "1", (st, body))
st, body = call(pb, "DELETE", "/v1/patches/cap.vlp")
ok("B removes it (its row deleted)", st == 200, (st, body))
ok("A no longer lists it", until(lambda: "cap.vlp" not in patches(pa)) is not None, patches(pa))

# DELETE /v1/edits/{id} on B takes an edit of A's away everywhere
st, body = insert(pa, "Mu", "Rome")
eid = body.get("id")
ok("B sees Mu", wait_for(pb, "Mu", "Rome") is not None)
st, body = call(pb, "DELETE", "/v1/edits/%s" % eid)
ok("B deletes A's edit by id", st == 200, (st, body))
ok("A forgets it", until(lambda: not exact_override(pa, "Mu")) is not None)

# kill -9 A and restart it: every acknowledged edit comes back from the table
a.kill()
a.wait()
a, pa, err = start()
ok("A restarts after kill -9", pa is not None, err)
if pa:
    ok("A answers with the edits made before (Atlantis, Isle7, Lemuria)",
       top(pa, "Atlantis") == "Tokyo" and top(pa, "Isle7") == "Tokyo" and top(pa, "Lemuria") == "Paris",
       (top(pa, "Atlantis"), top(pa, "Isle7"), top(pa, "Lemuria")))
    ok("... and not the deleted one (Mu)", not exact_override(pa, "Mu"))

# the database stops: edits are refused (503), reads go on; after the restart edits flow again
r = subprocess.run(PG_STOP, shell=True, capture_output=True, text=True)
ok("PostgreSQL stops", r.returncode == 0, r.stderr)
st, body = insert(pa, "Hyperborea", "Berlin")
ok("with the database down an insert is 503 and says why", st == 503 and "state database" in json.dumps(body),
   (st, body))
ok("... and is not applied", not exact_override(pa, "Hyperborea"))
ok("reads go on with the last state (Atlantis -> Tokyo)", top(pa, "Atlantis") == "Tokyo")
r = subprocess.run(PG_START, shell=True, capture_output=True, text=True)
ok("PostgreSQL starts again", r.returncode == 0, r.stderr)
st, body = insert(pa, "Thule", "Rome")
ok("an insert after the restart is acknowledged (the connection was re-established)", st == 200, (st, body))
ok("B applies it (its LISTEN connection came back)", wait_for(pb, "Thule", "Rome", 15.0) is not None)
ok("the refused edit exists nowhere (no phantom)", not exact_override(pb, "Hyperborea") and
   sql("SELECT count(*) FROM infer.edits WHERE entity = 'Hyperborea'")[0] == "0")
ok("both servers stop on SIGTERM", all([stop(a), stop(b)]))
