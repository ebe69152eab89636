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


if __name__ == "__main__":
    main()
