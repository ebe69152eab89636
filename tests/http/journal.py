"""The journal and session reproductions of issue 24 over HTTP (tests/cli/journal.sh).

usage: journal.py inserts PORT N             N acknowledged KNN inserts (global)
       journal.py count PORT N               the global edits patch holds N ops
       journal.py collide PORT               patch names per scope: a session's and a global
                                             patch of one name, and a global 'session:W'
       journal.py collide_check PORT         after kill -9 and a restart: both sessions back
       journal.py failing PORT STATEDIR      failing requests create no session, no journal
       journal.py patchdir PORT PATCHDIR     hard links refused, no absolute path in errors"""
import os
import sys
import threading

import client
from tap import ok

PORT = int(sys.argv[2])


def call(method, path, body=None, sid=None):
    st, _, raw = client.request(PORT, method, path, body, headers={"X-Session-Id": sid} if sid else None)
    return st, client.as_json(raw)


def ins(entity, target="the", sid=None, layer=1):
    return call("POST", "/v1/insert", {"entity": entity, "relation": "capital", "target": target, "layer": layer,
                                       "mode": "knn"}, sid)


def patches(sid=None):
    st, j = call("GET", "/v1/patches", sid=sid)
    return {(p["name"], p["scope"]): p["operations"] for p in j.get("patches", [])} if st == 200 else (st, j)


def msg(j):
    e = j.get("error") if isinstance(j, dict) else None
    return (e.get("message", "") if isinstance(e, dict) else str(e)) if e is not None else str(j)


ATL = {"description": "atl.vlp", "operations": [{"op": "delete", "layer": 1, "feature": 3}]}


def main():
    mode = sys.argv[1]
    if mode == "inserts":  # from 8 connections at once
        n = int(sys.argv[3])
        sts = []
        ts = [threading.Thread(target=lambda k: sts.extend(ins("Place%d" % i)[0] for i in range(k, n, 8)), args=(k,))
              for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        ok("%d inserts acknowledged" % n, sts.count(200) == n, sts.count(200))
    elif mode == "count":  # after a restart: the global edits patch holds N ops
        n = int(sys.argv[3])
        p = patches()
        ok("after the restart the edits patch holds all %d inserts" % n, p.get(("edits", "global")) == n, p)
        st, j = call("POST", "/v1/infer", {"prompt": "The capital of Place%d is" % (n - 1), "top": 1, "mode": "walk"})
        ok("the last insert answers", st == 200 and j["predictions"][0]["token"] == "the", j)
    elif mode == "collide":
        st1, j1 = call("POST", "/v1/patches/apply", {"patch": ATL}, sid="V")
        st2, j2 = ins("Atlantis", sid="V")
        ok("session V applies atl.vlp and inserts: 200, 200", (st1, st2) == (200, 200), (j1, j2))
        st, j = call("POST", "/v1/patches/apply", {"patch": ATL})
        ok("a global patch of the same name: 200", st == 200, j)
        st, j = ins("Lemuria", sid="V")
        ok("session V keeps working after it (insert 200)", st == 200, j)
        p = patches("V")
        ok("session V lists both atl.vlp patches, one per scope, and its own edits",
           isinstance(p, dict) and ("atl.vlp", "global") in p and ("atl.vlp", "session") in p
           and p.get(("session:V", "session")) == 2, p)
        st, j = call("DELETE", "/v1/patches/atl.vlp", sid="V")
        st2, j2 = call("POST", "/v1/patches/apply", {"patch": ATL}, sid="V")
        ok("session V removes and re-applies its own atl.vlp (the global one stays)",
           (st, st2) == (200, 200) and ("atl.vlp", "global") in patches("V"), (j, j2))
        st, j = call("POST", "/v1/patches/apply", {"patch": dict(ATL, description="session:W")})
        ok("a global patch named 'session:W': 200", st == 200, j)
        st, j = ins("Mu", sid="W")
        p = patches("W")
        ok("session W inserts beside it, its edits apart from the global 'session:W'",
           st == 200 and p.get(("session:W", "session")) == 1 and p.get(("session:W", "global")) == 1, (st, j, p))
    elif mode == "collide_check":
        pv, pw = patches("V"), patches("W")
        ok("after kill -9 and a restart, session V is back with its own atl.vlp and 2 edits",
           isinstance(pv, dict) and pv.get(("session:V", "session")) == 2 and ("atl.vlp", "session") in pv
           and ("atl.vlp", "global") in pv, pv)
        ok("... and session W with its edit", isinstance(pw, dict) and pw.get(("session:W", "session")) == 1, pw)
        st, j = ins("Thule", sid="V")
        ok("session V takes edits after the restart", st == 200, j)
    elif mode == "failing":
        state = sys.argv[3]
        sts = [call("DELETE", "/v1/patches/nothing", sid="probe%d" % i)[0] for i in range(70)]
        ok("70 DELETEs of an absent patch with new session ids: all 404", sts == [404] * 70, sts)
        st, j = ins("Atlantis", sid="fresh", layer=99)
        ok("a failing insert in a new session: 400", st == 400, j)
        st, j = call("POST", "/v1/patches/apply", {"url": "absent.vlp"}, sid="fresh2")
        ok("a failing apply in a new session: 4xx", 400 <= st < 500, j)
        sd = os.path.join(state, "sessions")
        files = os.listdir(sd) if os.path.isdir(sd) else []
        ok("... and none of them left a session journal (no empty files)", files == [], files)
        st, j = ins("Atlantis", sid="after")
        ok("the session table is not full: a new session's insert -> 200", st == 200, j)
        st, j = call("GET", "/v1/patches", sid="probe1")
        ok("a failed request's session does not exist (its view is the global one)",
           st == 200 and "session" not in j, j)
        files = sorted(os.listdir(sd))
        ok("the one successful session has the one journal", files == ["after.lqj"], files)
        for sid in ["..", ".", "a.b", "x:y"]:
            st, j = ins("Atlantis", sid=sid)
            ok("X-Session-Id %r -> 400" % sid, st == 400 and "X-Session-Id" in msg(j), j)
    elif mode == "patchdir":
        pdir = sys.argv[3]
        st, j = call("POST", "/v1/patches/apply", {"url": "hard.vlp"})
        ok("a hard link in --patch-dir -> 400 naming the hard links",
           st == 400 and "hard link" in msg(j) and pdir not in msg(j), j)
        for url, want in [("absent.vlp", 404), ("bad.vlp", 400), ("link.vlp", 400), ("sub", 400)]:
            st, j = call("POST", "/v1/patches/apply", {"url": url})
            ok("apply %s -> %d, the error without the --patch-dir path" % (url, want),
               st == want and url in msg(j) and pdir not in msg(j), j)
        st, j = call("POST", "/v1/patches/apply", {"url": "good.vlp"})
        ok("a plain patch file applies", st == 200, j)


main()
