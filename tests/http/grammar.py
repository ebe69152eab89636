#!/usr/bin/env python3
"""Structured output through a running `larql serve` (stdlib only): response_format
json_object / json_schema (strict), llama-server's `grammar` and `json_schema` fields,
streamed and not, logit_bias, and the bad inputs that must answer a clear 400.

usage: grammar.py PORT LABEL
Prints TAP-style lines; run by tests/cli/grammar.sh."""
import http.client
import json
import re
import sys

import tap
from tap import ok

HOST = "127.0.0.1"
PORT = int(sys.argv[1])
LABEL = sys.argv[2] if len(sys.argv) > 2 else "server"

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer"},
        "pet": {"enum": ["cat", "dog", None]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "pet", "tags", "ok"],
    "additionalProperties": False,
}


def validate(v, s):
    """the subset SCHEMA uses"""
    if "enum" in s:
        return v in s["enum"]
    t = s.get("type")
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])):
            return False
        if s.get("additionalProperties") is False and any(k not in props for k in v):
            return False
        return all(validate(v[k], props[k]) for k in v if k in props)
    if t == "array":
        return isinstance(v, list) and len(v) <= s.get("maxItems", 1 << 30) and \
            all(validate(e, s["items"]) for e in v)
    if t == "string":
        return isinstance(v, str) and len(v) <= s.get("maxLength", 1 << 30)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    return False


def post(path, body):
    c = http.client.HTTPConnection(HOST, PORT, timeout=120)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        j = json.loads(data)
    except ValueError:
        j = None
    return r.status, j, data


def sse(path, body):
    c = http.client.HTTPConnection(HOST, PORT, timeout=120)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    events = []
    for line in r.read().decode().split("\n"):
        if line.startswith("data: "):
            events.append(line[6:])
    c.close()
    return r.status, events


def name(s):
    return "%s: %s" % (LABEL, s)


chat = {"messages": [{"role": "user", "content": "Describe a person as JSON."}], "max_tokens": 200}
rf = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": SCHEMA}}

# ---- response_format json_schema: sampled outputs parse and validate ----
good, bad = 0, []
for seed in range(1, 11):
    st, j, raw = post("/v1/chat/completions", dict(chat, response_format=rf, temperature=1, seed=seed))
    try:
        c = j["choices"][0]
        v = json.loads(c["message"]["content"])
        if st == 200 and validate(v, SCHEMA) and c["finish_reason"] == "stop":
            good += 1
        else:
            bad.append(raw[:300])
    except (TypeError, KeyError, ValueError):
        bad.append(raw[:300])
ok(name("response_format json_schema: 10 sampled outputs parse and validate"), good == 10, bad[:2])

# the same through llama-server's json_schema field on /v1/completions, and streamed
st, j, raw = post("/v1/completions", {"prompt": "A person:", "max_tokens": 200, "json_schema": SCHEMA, "temperature": 1, "seed": 5})
try:
    v = json.loads(j["choices"][0]["text"])
    good = st == 200 and validate(v, SCHEMA)
except (TypeError, KeyError, ValueError):
    good = False
ok(name("/v1/completions json_schema field"), good, raw[:300])

st, ev = sse("/v1/chat/completions", dict(chat, response_format=rf, stream=True, temperature=1, seed=9))
text, fin = "", None
for e in ev:
    if e == "[DONE]":
        continue
    d = json.loads(e)
    ch = d["choices"][0] if d.get("choices") else {}
    text += (ch.get("delta") or {}).get("content") or ""
    fin = ch.get("finish_reason") or fin
try:
    good = st == 200 and validate(json.loads(text), SCHEMA) and fin == "stop" and ev[-1] == "[DONE]"
except ValueError:
    good = False
ok(name("streamed json_schema: the deltas join into valid JSON, finish stop"), good, text[:300])

# json_object: greedy; a complete answer is a JSON object
st, j, raw = post("/v1/chat/completions", dict(chat, response_format={"type": "json_object"}, temperature=0))
try:
    c = j["choices"][0]
    t = c["message"]["content"]
    good = st == 200 and (isinstance(json.loads(t), dict) if c["finish_reason"] == "stop" else t.startswith("{"))
except (TypeError, KeyError, ValueError):
    good = False
ok(name("response_format json_object"), good, raw[:300])

# GBNF through the grammar field: outputs checked by an equivalent regular expression
g = 'root ::= [0-9]{3} "-" code\ncode ::= [a-z]{2,4} ("!" | "?")\n'
good, bad = 0, []
for seed in range(1, 6):
    st, j, raw = post("/v1/completions", {"prompt": "Code:", "max_tokens": 30, "grammar": g, "temperature": 1, "seed": seed})
    t = j["choices"][0]["text"] if st == 200 else ""
    if re.fullmatch(r"[0-9]{3}-[a-z]{2,4}[!?]", t) and j["choices"][0]["finish_reason"] == "stop":
        good += 1
    else:
        bad.append(raw[:200])
ok(name("grammar field: 5 sampled outputs in the language, finish stop"), good == 5, bad[:2])

st, j, raw = post("/v1/completions", {"prompt": "x", "max_tokens": 3, "logit_bias": {"1": -100, "2": 5.5}})
ok(name("logit_bias accepted"), st == 200, raw[:200])
st, j, raw = post("/v1/chat/completions", dict(chat, response_format={"type": "text"}))
ok(name("response_format text still plain"), st == 200, raw[:200])


# ---- bad input: clear 400s ----
def expect_400(what, body, contains, path="/v1/chat/completions"):
    st, j, raw = post(path, body)
    msg = j["error"]["message"] if isinstance(j, dict) and isinstance(j.get("error"), dict) else ""
    ok(name(what), st == 400 and contains in msg, "status %d body %r" % (st, raw[:300]))


def rfs(schema):
    return dict(chat, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})


expect_400("schema that is not JSON -> 400", dict(chat, json_schema="{\"type\": "), "not JSON")
expect_400("$ref loop -> 400", rfs({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}), "$ref loop")
expect_400("left-recursive $ref -> 400", rfs({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"}), "$ref loop")
expect_400("unknown type -> 400", rfs({"type": "strng"}), "unknown type")
expect_400("unsupported keyword -> 400", rfs({"type": "integer", "minimum": 3}), "not supported")
expect_400("grammar with an undefined rule -> 400", dict(chat, grammar="root ::= item\n"), "undefined rule 'item'")
expect_400("left-recursive grammar -> 400", dict(chat, grammar="root ::= root \"a\" | \"a\"\n"), "left recursion")
expect_400("empty-language grammar -> 400", dict(chat, grammar="root ::= [^\\x00-\\U0010FFFF]\n"), "empty")
expect_400("grammar syntax error -> 400 with line and column", dict(chat, grammar="root ::= \"a\"\nx ::= \"b\" ]\n"), "line 2, column 11")
expect_400("grammar not a string -> 400", dict(chat, grammar=5), "'grammar' must be a string")
expect_400("two constraints -> 400", dict(chat, grammar="root ::= \"a\"\n", json_schema={}), "at most one")
expect_400("unknown response_format type -> 400", dict(chat, response_format={"type": "yaml"}), "not one of")
expect_400("json_schema without a schema -> 400", dict(chat, response_format={"type": "json_schema", "json_schema": {"name": "x"}}), "schema")
expect_400("strict not a boolean -> 400", dict(chat, response_format={"type": "json_schema", "json_schema": {"name": "x", "strict": "yes", "schema": {}}}), "strict")
expect_400("logit_bias bad token -> 400", dict(chat, logit_bias={"abc": 1}), "logit_bias")
expect_400("logit_bias out of range -> 400", dict(chat, logit_bias={"1": 500}), "[-100, 100]")
expect_400("/v1/completions: bad grammar -> 400", {"prompt": "x", "grammar": "root ::= nothing\n"}, "undefined rule", path="/v1/completions")

# the server is still fine
st, j, raw = post("/v1/completions", {"prompt": "x", "max_tokens": 2})
ok(name("server answers after the bad requests"), st == 200, raw[:200])
sys.exit(1 if tap.FAILS else 0)
