"""Editing over HTTP (tests/cli/edit.sh): inserts, sessions, patches, bad input, and the
kill -9 durability check.

usage: edit.py main PORT PATCHDIR      routes, sessions, patches, errors
       edit.py flood PORT ACKED_FILE   inserts until the server dies; acknowledged ones listed
       edit.py check PORT ACKED_FILE   after a restart: every acknowledged insert is there"""
import json

import client
import sys

from tap import ok

PORT = 0
UNRELATED = ["the model", "The capital of France is", "Paris", "the text", "Germany Berlin", "reads the",
             "Japan", "knows the", "Tokyo .", "Italy"]


def call(method, path, body=None, sid=None, timeout=60):
    st, _, raw = client.request(PORT, method, path, body, headers={"X-Session-Id": sid} if sid else None,
                                timeout=timeout)
    return st, client.as_json(raw)


def top(prompt, sid=None, n=3):
    st, j = call("POST", "/v1/infer", {"prompt": prompt, "top": n, "mode": "walk"}, sid)
    return j.get("predictions") if st == 200 else (st, j)


def walk(prompt, sid=None):
    st, j = call("GET", "/v1/walk?top=3&prompt=%s" % prompt.replace(" ", "%20"), sid=sid)
    return [{k: h[k] for k in ("layer", "feature", "target")} for h in j.get("hits", [])] if st == 200 else (st, j)


def complete(prompt, sid=None, n=1):
    """the greedy /v1/completions text of prompt"""
    st, j = call("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0}, sid)
    return j["choices"][0]["text"] if st == 200 else (st, j)


def main(patch_dir):
    before = {p: top(p) for p in UNRELATED}
    gen_before = {p: complete(p, n=3) for p in UNRELATED[:4]}
    atl_before = complete("The capital of Atlantis is")
    st, j = call("POST", "/v1/insert", {"entity": "Atlantis", "relation": "capital", "target": "Poseidonia",
                                        "mode": "knn"})
    ok("insert knn -> 200 with LARQL's fields", st == 200 and j.get("inserted") == 1 and j.get("mode") == "knn"
       and j.get("session") is None and "latency_ms" in j, j)
    p = top("The capital of Atlantis is")
    ok("infer walk puts the inserted target first (p 1.0)", p[0] == {"token": "Poseidonia", "probability": 1.0}, p)
    ok("ten unrelated prompts answer exactly as before", all(top(q) == before[q] for q in UNRELATED))
    atl = complete("The capital of Atlantis is")
    ok("the OpenAI completion route answers with the insert (KNN override in generation)",
       atl_before != atl and isinstance(atl, str) and atl and " Poseidonia".startswith(atl), (atl_before, atl))
    lem_before = complete("The capital of Lemuria is")
    st, j = call("POST", "/v1/insert", {"entity": "Lemuria", "relation": "capital", "target": "Germany", "mode": "compose"})
    ok("insert (mode compose) -> 200, constellation over the knowledge band, balanced",
       st == 200 and j.get("mode") == "constellation" and j.get("inserted", 0) >= 1
       and 0.30 <= j.get("target_probability", 0) <= 0.95 and j.get("down_scale", 0) > 0, j)
    p = top("The capital of Lemuria is")
    ok("a compose insert changes the forward pass: walk infer answers with the target", p[0]["token"] == " Germany", p)
    lem = complete("The capital of Lemuria is")
    ok("... and so does generation", lem == " Germany" and lem_before != lem, (lem_before, lem))
    st, d = call("POST", "/v1/infer", {"prompt": "The capital of Lemuria is", "top": 1, "mode": "dense"})
    ok("dense mode is the unedited model", st == 200 and d["predictions"][0]["token"] != " Germany", d)
    ok("generation from unrelated prompts is unchanged by both inserts",
       all(complete(q, n=3) == gen_before[q] for q in gen_before), gen_before)
    st, j = call("POST", "/v1/explain-infer", {"prompt": "The capital of Atlantis is", "top": 3, "per_layer": 2})
    st2, w = call("POST", "/v1/infer", {"prompt": "The capital of Atlantis is", "top": 3, "mode": "walk"})
    ok("explain-infer: walk predictions (override included) and a trace of every layer",
       st == 200 and j["predictions"] == w["predictions"] and j.get("knn_override", {}).get("token") == "Poseidonia"
       and len(j["trace"]) == 4 and all(len(t["features"]) <= 2 and {"feature", "gate_score", "top_token",
       "top_tokens", "relation"} <= set(t["features"][0]) for t in j["trace"] if t["features"]), (st, j))
    st, j = call("POST", "/v1/explain-infer", {"prompt": "the model", "band": "knowledge", "per_layer": 1})
    ok("explain-infer: per_layer bounds each layer's features (a 4-layer model's bands are all layers)",
       st == 200 and len(j["trace"]) == 4 and all(len(t["features"]) <= 1 for t in j["trace"]), j)
    st, j = call("GET", "/v1/patches")
    ok("GET /v1/patches lists the live edits patch", st == 200 and any(
        x["name"] == "edits" and x["operations"] >= 2 for x in j["patches"]), j)
    # sessions: isolated from each other, both see the global state
    st, j = call("POST", "/v1/insert", {"entity": "Hyperborea", "relation": "capital", "target": "Thule",
                                        "mode": "knn"}, sid="alice")
    ok("session insert -> 200 naming the session", st == 200 and j.get("session") == "alice", j)
    pa, pb, pg = (top("The capital of Hyperborea is", s) for s in ("alice", "bob", None))
    ok("the session sees its own insert", pa[0]["token"] == "Thule", pa)
    ok("another session and the global state do not", pb[0]["token"] != "Thule" and pg[0]["token"] != "Thule",
       (pb, pg))
    ok("both sessions see the global insert",
       top("The capital of Atlantis is", "alice")[0]["token"] == "Poseidonia" and
       top("The capital of Atlantis is", "bob")[0]["token"] == "Poseidonia")
    import ws
    ws.PORT = PORT
    w = ws.WS(headers={"X-Session-Id": "alice"})
    w.send_json({"type": "infer", "prompt": "The capital of Hyperborea is", "top": 2})
    ms = w.until({"infer_done", "error"})
    w.close()
    w = ws.WS()
    w.send_json({"type": "infer", "prompt": "The capital of Hyperborea is", "top": 2})
    mg = w.until({"infer_done", "error"})
    w.close()
    ok("a WebSocket opened with X-Session-Id sees the session's edits; one without does not",
       ms[0].get("token") == "Thule" and mg[0].get("token") != "Thule", (ms[:2], mg[:2]))
    ca, cb = complete("The capital of Hyperborea is", "alice"), complete("The capital of Hyperborea is", "bob")
    ok("completions honour X-Session-Id: the session's insert answers there only",
       isinstance(ca, str) and ca and " Thule".startswith(ca) and ca != cb, (ca, cb))
    w = ws.WS(headers={"X-Session-Id": "alice"})
    w.send_json({"type": "generate", "prompt": "The capital of Hyperborea is", "max_tokens": 1})
    gm = [m for m in w.until({"done", "error"}) if m["type"] == "token"]
    w.close()
    ok("WebSocket generate runs the socket's session edits", gm and gm[0]["text"] == ca, gm)
    st, j = call("GET", "/v1/patches", sid="alice")
    ok("a session's patch list has the global edits and its own", st == 200 and j.get("session") == "alice" and
       {"edits", "session:alice"} <= {x["name"] for x in j["patches"]}, j)
    # two connections editing one session at once: every edit lands, none is lost
    import threading
    res = []

    def ins(i):
        st, j = call("POST", "/v1/insert", {"entity": isle(1000 + i), "relation": "capital", "target": "Q%d" % i,
                                            "mode": "knn"}, sid="shared")
        res.append(st)

    ths = [threading.Thread(target=ins, args=(i,)) for i in range(16)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    st, j = call("GET", "/v1/patches", sid="shared")
    own = [x for x in j.get("patches", []) if x["name"] == "session:shared"]
    ok("16 concurrent inserts into one session: all 200 and all 16 recorded",
       res == [200] * 16 and own and own[0]["operations"] == 16, (res, j))
    ok("each of them answers in that session",
       all(top("The capital of %s is" % isle(1000 + i), "shared", 1)[0]["token"] == "Q%d" % i for i in range(16)))
    # patches: inline apply, list, delete (on the strongest feature the prompt fires)
    w0 = walk("the capital of France is")
    ok("walk fires features", isinstance(w0, list) and len(w0) > 0, w0)
    l, f = w0[0]["layer"], w0[0]["feature"]
    patch = {"version": 1, "base_model": "", "created_at": "", "description": "no-top", "tags": [],
             "operations": [{"op": "delete", "layer": l, "feature": f, "reason": "test"}]}
    st, j = call("POST", "/v1/patches/apply", {"patch": patch})
    ok("apply an inline patch -> applied, operations, active_patches",
       st == 200 and j == {"applied": "no-top", "operations": 1, "active_patches": 2}, j)
    ok("the deleted feature is gone from walk", all((h["layer"], h["feature"]) != (l, f)
                                                    for h in walk("the capital of France is")))
    st, j = call("DELETE", "/v1/patches/no-top")
    ok("DELETE /v1/patches/no-top -> removed", st == 200 and j.get("removed") == "no-top", j)
    ok("walk answers as before", walk("the capital of France is") == w0)
    st, j = call("POST", "/v1/patches/apply", {"url": "good.vlp"})
    ok("apply a patch file from --patch-dir", st == 200 and j.get("applied") == "good", j)
    # bad input
    bad = [
        # a body of the wrong shape (a field missing or of another type) is 422, as LARQL's
        # JSON extractor answers; a value of the right type that is wrong is 400
        ("insert without target", "POST", "/v1/insert", {"entity": "a", "relation": "b"}, 422, "required"),
        ("insert with an empty target", "POST", "/v1/insert", {"entity": "a", "relation": "b", "target": ""},
         400, "required"),
        ("insert with a target that is not a string", "POST", "/v1/insert",
         {"entity": "a", "relation": "b", "target": 7}, 422, "target"),
        ("insert with a body that is a JSON array", "POST", "/v1/insert", ["a", "b", "c"], 422, "JSON object"),
        ("apply a patch that is not an object", "POST", "/v1/patches/apply", {"patch": [1]}, 422, "patch"),
        ("warmup with layers that are not an array", "POST", "/v1/warmup", {"layers": 3}, 422, "layers"),
        ("insert into a layer that does not exist", "POST", "/v1/insert",
         {"entity": "a", "relation": "b", "target": "c", "layer": 99}, 400, "layer"),
        ("insert with an unknown mode", "POST", "/v1/insert",
         {"entity": "a", "relation": "b", "target": "c", "mode": "magic"}, 400, "mode"),
        ("apply without url or patch", "POST", "/v1/patches/apply", {}, 400, "must provide"),
        ("apply a path with ..", "POST", "/v1/patches/apply", {"url": "../etc/passwd"}, 400, "file name"),
        ("apply an absolute path", "POST", "/v1/patches/apply", {"url": "/etc/passwd"}, 400, "file name"),
        ("apply a missing file", "POST", "/v1/patches/apply", {"url": "nope.vlp"}, 404, "nope.vlp"),
        ("apply a patch for another model", "POST", "/v1/patches/apply",
         {"patch": {"base_model": "other/model", "operations": [{"op": "delete", "layer": 1, "feature": 1}]}},
         400, "other/model"),
        ("apply a patch with a feature out of range", "POST", "/v1/patches/apply",
         {"patch": {"operations": [{"op": "delete", "layer": 1, "feature": 10 ** 6}]}}, 400, "feature"),
        ("apply a malformed patch", "POST", "/v1/patches/apply", {"patch": {"operations": [{"op": "zap"}]}},
         400, "op"),
        ("delete an unknown patch", "DELETE", "/v1/patches/ghost", None, 404, "not found"),
        ("explain-infer without a prompt", "POST", "/v1/explain-infer", {"top": 3}, 422, "prompt"),
        ("explain-infer with a negative per_layer", "POST", "/v1/explain-infer",
         {"prompt": "x", "per_layer": -1}, 400, "per_layer"),
        ("explain-infer with an unknown band", "POST", "/v1/explain-infer", {"prompt": "x", "band": "middle"},
         400, "band"),
        ("a session id with spaces", "POST", "/v1/insert",
         {"entity": "a", "relation": "b", "target": "c"}, 400, "X-Session-Id"),
    ]
    for name, m, path, body, want, frag in bad:
        st, j = call(m, path, body, sid="bad id" if "session id" in name else None)
        ok("%s -> %d" % (name, want), st == want and frag in json.dumps(j), (st, j))
    st, j = call("GET", "/v1/patches")
    ok("bad requests changed nothing", st == 200 and [x["name"] for x in j["patches"]] == ["edits", "good"], j)


def isle(i):
    """distinct names (every letter differs between neighbours), so that on a random model
    no two prompts' residuals are near-duplicates that would compete for the override"""
    x, out = (i + 1) * 2654435761 % 4294967296, ""
    for _ in range(7):
        x = (x * 1103515245 + 12345) % 2147483648
        out += chr(97 + (x >> 16) % 26)
    return out.capitalize()


def flood(acked_file):
    with open(acked_file, "w") as f:
        for i in range(200):
            try:
                st, j = call("POST", "/v1/insert", {"entity": isle(i), "relation": "capital",
                                                    "target": "Port%d" % i, "mode": "knn"}, timeout=10)
            except OSError:
                break
            if st == 200:
                f.write("%d\n" % i)
                f.flush()


def check(acked_file):
    acked = [int(x) for x in open(acked_file).read().split()]
    ok("the flood got some inserts acknowledged before the kill", len(acked) > 0, len(acked))
    st, j = call("GET", "/v1/patches")
    n = sum(x["operations"] for x in j.get("patches", []) if x["name"] == "edits") if st == 200 else -1
    ok("after kill -9 and restart the edits patch holds every acknowledged insert (%d)" % len(acked),
       n >= len(acked) + 2, (n, len(acked)))
    missing = [i for i in acked if top("The capital of %s is" % isle(i), n=1)[0]["token"] != "Port%d" % i]
    ok("every acknowledged insert answers after the restart", not missing, missing[:10])
    ok("inserts from before the flood survived too", top("The capital of Atlantis is")[0]["token"] == "Poseidonia")
    pa, pb = top("The capital of Hyperborea is", "alice"), top("The capital of Hyperborea is", "bob")
    ok("a session's edits survive the restart (its journal), still its own",
       pa[0]["token"] == "Thule" and pb[0]["token"] != "Thule", (pa, pb))
    st, j = call("GET", "/v1/patches", sid="alice")
    ok("the restored session lists its own edits patch", st == 200 and "session:alice" in
       {x["name"] for x in j["patches"]}, j)
    st, j = call("GET", "/v1/patches", sid="shared")
    n = sum(x["operations"] for x in j.get("patches", []) if x["name"] == "session:shared") if st == 200 else -1
    ok("the concurrently edited session came back with all 16 inserts", n == 16, (st, j))


if __name__ == "__main__":
    mode, PORT = sys.argv[1], int(sys.argv[2])
    {"main": lambda: main(sys.argv[3]), "flood": lambda: flood(sys.argv[3]), "check": lambda: check(sys.argv[3])}[mode]()
