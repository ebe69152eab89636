#!/usr/bin/env python3
"""Edits through SQL answer as edits through HTTP: the first N cases of the edit suite
(tests/data/edits/trained.jsonl, the shipped trained model) are written once with
POST /v1/insert to a larql serve and once with infer_insert() into pg_infer, in the same
order; then the canonical prompt and every paraphrase of each case is asked both ways
(/v1/infer walk mode; SQL infer()), and the answers must be the same token. Prints how many
paraphrases answer with the edit's target through SQL.
usage: sql_vs_http_edits.py PORT SUITE N  (environment: PSQL, MODEL = the pg_infer model name)"""
import json
import os
import subprocess
import sys
import urllib.request

from tap import ok

PORT, SUITE, N = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
PSQL, MODEL = os.environ["PSQL"], os.environ["MODEL"]


def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (PORT, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def q(s):
    return "'" + s.replace("'", "''") + "'"


def sql(query):
    r = subprocess.run(PSQL + " -At -c " + json.dumps(query), shell=True, capture_output=True, text=True)
    return r.stdout.strip(), r.stderr.strip()


cases = [json.loads(line) for line in open(SUITE)][:N]
errs = []
for c in cases:
    e = c["edit"]
    h = post("/v1/insert", {"entity": e["entity"], "relation": e["relation"], "target": e["target"]})
    out, err = sql("SELECT infer_insert(%s, %s, %s, %s)" % (q(e["entity"]), q(e["relation"]), q(e["target"]),
                                                           q(MODEL)))
    if not out.isdigit() or h.get("mode") != "subject":
        errs.append((e, h, out, err))
ok("%d subject edits written through HTTP and through SQL" % N, not errs, errs[:2])

same, total, hits, diffs = 0, 0, 0, []
for c in cases:
    target = c["edit"]["target"]
    for prompt in [c["canonical"]] + c["paraphrases"]:
        h = post("/v1/infer", {"prompt": prompt, "top": 1, "mode": "walk"})["predictions"][0]["token"]
        s, err = sql("SELECT token FROM infer(%s, 1, %s)" % (q(prompt), q(MODEL)))
        total += 1
        if h.strip() == s.strip():  # pg_infer's infer() gives tokens without the leading space
            same += 1
        else:
            diffs.append((prompt, h, s, err))
        hits += prompt != c["canonical"] and target.startswith(s.strip()) and s.strip() != ""
ok("every prompt (canonical and paraphrases of %d cases) answers the same token through SQL as through HTTP"
   % N, same == total, diffs[:3])
n_para = sum(len(c["paraphrases"]) for c in cases)
print("# edits through SQL: %d of %d paraphrases answer with (the start of) the edit's target, as through HTTP"
      % (hits, n_para))
