#!/usr/bin/env python3
"""LARQL's server-test request sites (tests/data/larql_server/sites.jsonl) against our real
`larql serve`: each site's method, path, headers and body sent to a server configured as
LARQL's test built its router (setup), and its status compared with LARQL's expected status.

usage: larql_server_sites.py LARQL VINDEX GGUF SITES.jsonl [--min-agree PCT] [--verbose]

Setups: noinfer (LARQL's test models have inference disabled: --no-infer), infer, cache
(--cache-ttl), key:K (--api-key K), gguf (a model served from a file, not a directory), multi /
multi-infer (--dir with one vindex per model id the tests name). A site with "na" is counted
as not applicable with its reason; a "step" is a request of the same test that a later site
builds on (a patch applied before it is removed), run but not counted. Placeholders fill in what LARQL's synthetic model (hidden 4,
vocabulary 8, id "m") fixes and ours does not: $RESID / $RESID2 (a residual of one / two rows
of the served hidden size), $VOCAB (the first id past the vocabulary), $MODEL (the patch's base
model), $ID (the served model id), "bin" (LARQL's binary wire format, see binary()), $ETAG (the ETag of a plain GET of the same path first).
Exits 1 when a server crashes or fewer than PCT% of the applicable sites agree."""
import http.client
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

larql, vindex, gguf, sites_path = sys.argv[1:5]
min_agree = float(sys.argv[sys.argv.index("--min-agree") + 1]) if "--min-agree" in sys.argv else 0.0
verbose = "--verbose" in sys.argv
sites = [json.loads(line) for line in open(sites_path, encoding="utf-8") if line.strip()]
tmp = tempfile.mkdtemp(prefix="larql-sites.")
servers = {}


def multi_dir(ids, name):
    """--dir holding one vindex per id: the test vindex's files linked, index.json's model
    renamed (the id is its last '/' segment)."""
    root = os.path.join(tmp, name)
    os.mkdir(root)
    idx = json.load(open(os.path.join(vindex, "index.json"), encoding="utf-8"))
    for mid in ids:
        d = os.path.join(root, mid)
        os.mkdir(d)
        for f in os.listdir(vindex):
            if f != "index.json":
                os.symlink(os.path.join(os.path.abspath(vindex), f), os.path.join(d, f))
        idx["model"] = "test/" + mid
        json.dump(idx, open(os.path.join(d, "index.json"), "w", encoding="utf-8"))
    return root


def start(setup):
    if setup in servers:
        return servers[setup]
    args = {"noinfer": [vindex, "--no-infer"], "infer": [vindex], "cache": [vindex, "--no-infer", "--cache-ttl", "60"],
            "gguf": [gguf, "--no-infer"]}.get(setup)
    if setup.startswith("key:"):
        args = [vindex, "--no-infer", "--api-key", setup[4:]]
    elif setup == "multi":
        args = ["--dir", multi_dir(MULTI_IDS, "multi"), "--no-infer"]
    elif setup == "multi-infer":
        args = ["--dir", multi_dir(["synthetic"], "multi-infer")]
    out = open(os.path.join(tmp, setup.replace(":", "_") + ".out"), "w+", encoding="utf-8")
    err = open(os.path.join(tmp, setup.replace(":", "_") + ".err"), "w+", encoding="utf-8")
    p = subprocess.Popen([larql, "serve", *args, "--port", "0"], stdout=out, stderr=err)
    port = None
    for _ in range(300):
        out.seek(0)
        for line in out.read().splitlines():
            if line.startswith("listening on http://127.0.0.1:"):
                port = int(line.rsplit(":", 1)[1])
        if port or p.poll() is not None:
            break
        time.sleep(0.1)
    if not port:
        err.seek(0)
        raise SystemExit("server %s did not start: %s" % (setup, err.read()[-400:]))
    auth = {"authorization": "Bearer " + setup[4:]} if setup.startswith("key:") else {}
    info = json.loads(request(port, "GET", "/v1/stats", auth, None)[2] or "{}")
    models = json.loads(request(port, "GET", "/v1/models", auth, None)[2] or "{}").get("data") or [{}]
    info["id"] = models[0].get("id", "")
    servers[setup] = {"proc": p, "port": port, "info": info, "err": err}
    return servers[setup]


def request(port, method, path, headers, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data.decode("utf-8", "replace")


def fill(v, srv):
    """placeholders -> the served model's numbers"""
    info = srv["info"]
    hidden, vocab = info.get("hidden_size", 0), info.get("vocab_size", 0)
    if isinstance(v, dict):
        return {k: fill(x, srv) for k, x in v.items()}
    if isinstance(v, list):
        return [fill(x, srv) for x in v]
    if v == "$RESID":
        return [1.0] + [0.0] * (hidden - 1)
    if v == "$RESID2":
        return ([1.0] + [0.0] * (hidden - 1)) * 2
    if v == "$VOCAB":
        return vocab
    if v == "$MODEL":
        return info.get("model", "")
    if v == "$ID":
        return info.get("id", "")
    return v


def binary(items, srv):
    """LARQL's binary wire bodies: an int is a little-endian u32, $RESID a residual of f32s,
    {"f32": [...]} floats, {"zeros": n} / {"bytes": [...]} bytes as given"""
    out = b""
    for it in items:
        if isinstance(it, int):
            out += struct.pack("<I", it)
        elif it == "$RESID":
            out += struct.pack("<%df" % srv["info"]["hidden_size"], *fill("$RESID", srv))
        elif "f32" in it:
            out += struct.pack("<%df" % len(it["f32"]), *it["f32"])
        elif "zeros" in it:
            out += bytes(it["zeros"])
        else:
            out += bytes(it["bytes"])
    return out


MULTI_IDS = sorted({m for s in sites if s["setup"] == "multi" for m in s.get("models") or []})
agree = disagree = na = crashed = 0
lines = []
try:
    for s in sites:
        if s.get("na"):
            na += 0 if s.get("step") else 1
            lines.append("n/a       %s: %s" % (s["id"], s["na"]))
            continue
        srv = start(s["setup"])
        path = s["path"].replace("$ID", srv["info"]["id"]).replace("$VOCAB", str(srv["info"].get("vocab_size", 0)))
        headers = {k: v for k, v in s.get("headers") or []}
        if headers.get("if-none-match") == "$ETAG":
            headers["if-none-match"] = request(srv["port"], s["method"], path, {}, None)[1].get("etag", "")
        body = None
        if s.get("body") is not None:
            body = json.dumps(fill(s["body"], srv)).encode()
            headers.setdefault("content-type", "application/json")
        elif s.get("raw") is not None:
            body = s["raw"].encode()
        elif s.get("bin") is not None:
            body = binary(s["bin"], srv)
        if s["method"] == "POST" and body is None:
            body = b""
        try:
            st, _, text = request(srv["port"], s["method"], path, headers, body)
        except (OSError, http.client.HTTPException) as e:
            st, text = 0, str(e)
        if srv["proc"].poll() is not None:
            crashed += 1
            lines.append("CRASH     %s: the %s server exited (%s)" % (s["id"], s["setup"], srv["proc"].returncode))
            del servers[s["setup"]]
            continue
        if s.get("step"):  # a request the next site of its test builds on (not counted)
            if verbose:
                lines.append("step      %s: %d" % (s["id"], st))
            continue
        want = s.get("expect") or []
        ok = (st in want or ("5xx" in want and 500 <= st < 600)) if want else st not in s["expect_not"]
        if ok:
            agree += 1
            if verbose:
                lines.append("agree     %s: %d" % (s["id"], st))
        else:
            disagree += 1
            lines.append("DISAGREE  %s: %s %s -> %d, LARQL expects %s (%s)" % (
                s["id"], s["method"], path, st, want or ("not %s" % s["expect_not"]), text[:160].replace("\n", " ")))
finally:
    for srv in servers.values():
        srv["proc"].send_signal(signal.SIGTERM)
    for srv in servers.values():
        try:
            srv["proc"].wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv["proc"].kill()
    shutil.rmtree(tmp, ignore_errors=True)

for line in lines:
    print(line)
applicable = agree + disagree + crashed
pct = 100.0 * agree / applicable if applicable else 0.0
print("%d request sites: %d agree, %d disagree, %d not applicable, %d crashes: %.1f%% of the applicable agree"
      % (sum(1 for s in sites if not s.get("step")), agree, disagree, na, crashed, pct))
sys.exit(1 if crashed or pct < min_agree else 0)
