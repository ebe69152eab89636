"""Subject edits over HTTP on the trained model (tests/cli/subject_edit.sh): an insert is
read back by a paraphrase and by the chat route; an edit that cannot take is refused (422)
and leaves nothing behind; bad input is a 400.

usage: subject_edit.py PORT"""
import json
import sys
import threading

import client
from tap import ok

PORT = 0


def call(method, path, body=None, sid=None):
    st, _, raw = client.request(PORT, method, path, body, headers={"X-Session-Id": sid} if sid else None, timeout=120)
    return st, client.as_json(raw)


def complete(prompt, n=6):
    st, j = call("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    return j["choices"][0]["text"] if st == 200 else (st, j)


def chat(question, n=16):
    st, j = call("POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": question}], "max_tokens": n, "temperature": 0})
    return j["choices"][0]["message"]["content"] if st == 200 else (st, j)


def patches():
    st, j = call("GET", "/v1/patches")
    return json.dumps(j, sort_keys=True) if st == 200 else st


def main():
    global PORT
    PORT = int(sys.argv[1])
    chat_before = chat("Which city is the capital of Atlantis?")
    unrelated = ["Once upon a time, there was a little dog", "The capital of France is", "Lily liked to"]
    before = {q: complete(q) for q in unrelated}
    st, j = call("POST", "/v1/insert", {"entity": "Atlantis", "relation": "capital", "target": "Poseidonia"})
    ok("insert without a mode is a subject edit (200), its target probability measured", st == 200
       and j.get("mode") == "subject" and j.get("target_probability", 0) >= 0.5, (st, j))
    ok("the canonical prompt continues with the whole target",
       complete("The capital of Atlantis is").strip().startswith("Poseidonia"), complete("The capital of Atlantis is"))
    ok("a paraphrase reads it back", complete("Atlantis is a country. Its capital is").strip().startswith("Poseidonia"),
       complete("Atlantis is a country. Its capital is"))
    ans = chat("Which city is the capital of Atlantis?")
    ok("the chat route answers with it (another wording than the edit's)", "Poseidonia" in ans and
       "Poseidonia" not in chat_before, (chat_before, ans))
    ok("prompts that do not mention Atlantis answer as before", all(complete(q) == before[q] for q in unrelated),
       {q: (before[q], complete(q)) for q in unrelated})
    # an edit that cannot take is refused, and nothing is kept
    snap = patches()
    st, j = call("POST", "/v1/insert", {"entity": "Lemuria", "relation": "capital", "target": "Mu Mu Mu Mu",
                                         "mode": "compose"})
    ok("a COMPOSE that cannot balance is refused with 422 and the measured probability", st == 422
       and "probability" in json.dumps(j), (st, j))
    ok("... and the applied patches are as before", patches() == snap, (snap, patches()))
    # bad input: each a clear 400
    for body, why in [({"entity": "", "relation": "capital", "target": "X"}, "an empty entity"),
                      ({"entity": "A", "relation": "capital", "target": "x" * 300}, "a target over 256 bytes"),
                      ({"entity": "A", "relation": "capital", "target": "X", "mode": "compose", "alpha": 1e6},
                       "alpha 1e6"),
                      ({"entity": "A", "relation": "capital", "target": "X", "layer": 99}, "a layer out of range"),
                      ({"entity": "A", "relation": "capital", "target": "X", "mode": "other"}, "an unknown mode")]:
        st, j = call("POST", "/v1/insert", body)
        ok("insert with %s -> 400" % why, st == 400 and "error" in j, (st, j))
    ok("... none of them left anything behind", patches() == snap, (snap, patches()))
    # edits as rows: listed with their id, removed one by one
    st, j = call("POST", "/v1/insert", {"entity": "Narnia", "relation": "capital", "target": "Cair Paravel"})
    nid = j.get("id")
    st2, lst = call("GET", "/v1/patches")
    rows = {r["id"]: r for r in lst.get("edits", [])}
    ok("GET /v1/patches lists each edit with its id, entity, relation, target, mode and layer",
       st == 200 and nid in rows and rows[nid]["entity"] == "Narnia" and rows[nid]["target"] == "Cair Paravel"
       and rows[nid]["mode"] == "subject" and isinstance(rows[nid]["layer"], int) and len(rows) >= 2, lst)
    ok("Narnia's edit answers", complete("The capital of Narnia is", 10).strip().startswith("Cair Paravel"),
       complete("The capital of Narnia is"))
    st, j = call("DELETE", "/v1/edits/%s" % nid)
    ok("DELETE /v1/edits/{id} -> 200", st == 200 and j.get("removed") == nid, (st, j))
    ok("... the edit is gone, the others stay", not complete("The capital of Narnia is").strip().startswith("Cair")
       and complete("The capital of Atlantis is").strip().startswith("Poseidonia"),
       (complete("The capital of Narnia is"), complete("The capital of Atlantis is")))
    st, lst = call("GET", "/v1/patches")
    ok("... and no longer listed", nid not in {r["id"] for r in lst.get("edits", [])}, lst)
    st, j = call("DELETE", "/v1/edits/%s" % nid)
    ok("DELETE of an edit already removed -> 404", st == 404, (st, j))
    st, j = call("DELETE", "/v1/edits/nothing-here")
    ok("DELETE of an unknown edit id -> 404", st == 404 and "nothing-here" in j.get("error", ""), (st, j))
    # two concurrent edits of one entity: both applied (in some order) or one refused, never a mix
    res = []

    def ins(target):
        res.append(call("POST", "/v1/insert", {"entity": "Lemuria", "relation": "capital", "target": target}))
    ts = [threading.Thread(target=ins, args=(t,)) for t in ("Tokyo", "Paris")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    codes = sorted(r[0] for r in res)
    got = complete("The capital of Lemuria is").strip()
    ok("two concurrent edits of one entity: each applied or refused, the answer one of them",
       all(c in (200, 422) for c in codes) and 200 in codes and (got.startswith("Tokyo") or got.startswith("Paris")),
       (res, got))


def after_restart():
    """the edits and their removals come back from the journal"""
    global PORT
    PORT = int(sys.argv[2])
    st, lst = call("GET", "/v1/patches")
    rows = lst.get("edits", [])
    ok("after a restart the journal restores the edits as rows (Narnia's removal included)",
       any(r["entity"] == "Atlantis" for r in rows) and not any(r["entity"] == "Narnia" for r in rows), rows)
    ok("... and Atlantis still answers", complete("The capital of Atlantis is").strip().startswith("Poseidonia"),
       complete("The capital of Atlantis is"))


if __name__ == "__main__":
    if sys.argv[1] == "restart":
        after_restart()
    else:
        main()
