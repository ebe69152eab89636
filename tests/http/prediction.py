#!/usr/bin/env python3
"""OpenAI's Predicted Outputs through a running `larql serve` (stdlib only): a "prediction"
of the output is verified as speculative drafts, so the answer is the same as without it
(greedy here), and usage.completion_tokens_details reports the drafted tokens kept
(accepted_prediction_tokens) and discarded (rejected_prediction_tokens); malformed
predictions answer a clear 400.

usage: prediction.py PORT
Prints TAP-style lines; run by tests/cli/draft.sh."""
import sys

import client
import tap
from tap import ok

PORT = int(sys.argv[1])
PROMPT = "The cat sat on the mat. The dog sat on the log. Once upon a time"


def post(path, body):
    st, _, raw = client.request(PORT, "POST", path, body)
    return st, client.as_json(raw), raw


base = {"prompt": PROMPT, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
st, j, raw = post("/v1/completions", base)
ok("completion without a prediction", st == 200, raw[:300])
text = j["choices"][0]["text"] if st == 200 else ""
ok("... its usage has no prediction details", st == 200 and "completion_tokens_details" not in j["usage"],
   raw[:300])

st, j2, raw = post("/v1/completions", dict(base, prediction={"type": "content", "content": text}))
ok("the same text with the output predicted", st == 200 and j2["choices"][0]["text"] == text, raw[:300])
d = j2.get("usage", {}).get("completion_tokens_details", {}) if st == 200 else {}
ok("... drafts from the prediction were kept (accepted_prediction_tokens > 0)",
   d.get("accepted_prediction_tokens", 0) > 0 and d.get("rejected_prediction_tokens", -1) >= 0, d)

wrong = "zebra " * 40
st, j3, raw = post("/v1/completions", dict(base, prediction={"type": "content",
                                                             "content": [{"type": "text", "text": wrong}]}))
ok("the same text with a wrong prediction (text parts)", st == 200 and j3["choices"][0]["text"] == text,
   raw[:300])

chat = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24,
        "temperature": 0}
st, c1, raw = post("/v1/chat/completions", chat)
answer = c1["choices"][0]["message"]["content"] if st == 200 else ""
st, c2, raw = post("/v1/chat/completions", dict(chat, prediction={"type": "content", "content": answer}))
ok("chat: the same answer with it predicted", st == 200 and c2["choices"][0]["message"]["content"] == answer,
   raw[:300])
st, c3, raw = post("/v1/chat/completions", dict(chat, prediction={"type": "content", "content": ""}))
ok("chat: an empty prediction is accepted", st == 200 and c3["choices"][0]["message"]["content"] == answer,
   raw[:300])

for label, pred in [("a string", "Paris"), ("type not content", {"type": "text", "content": "x"}),
                    ("content a number", {"type": "content", "content": 12}),
                    ("a part not text", {"type": "content", "content": [{"type": "image_url", "text": "x"}]}),
                    ("a part without text", {"type": "content", "content": [{"type": "text"}]})]:
    st, e, raw = post("/v1/completions", dict(base, prediction=pred))
    ok("400 for a prediction that is " + label,
       st == 400 and isinstance(e, dict) and "prediction" in e.get("error", {}).get("message", ""), raw[:300])
st, _, raw = post("/v1/completions", dict(base, max_tokens=2))
ok("the server answers after the bad requests", st == 200, raw[:200])
sys.exit(1 if tap.FAILS else 0)
