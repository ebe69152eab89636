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


def post(path, body, headers=None):
    c = http.client.HTTPConnection(HOST, PORT, timeout=120)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
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

# concurrent requests under different constraints decode in the same batched steps: each
# output stays in its own language
import threading
results = {}


def worker(k):
    if k % 2:
        st, j, raw = post("/v1/chat/completions", dict(chat, response_format=rf, temperature=1, seed=100 + k))
        try:
            results[k] = st == 200 and validate(json.loads(j["choices"][0]["message"]["content"]), SCHEMA)
        except (TypeError, KeyError, ValueError):
            results[k] = False
    else:
        st, j, raw = post("/v1/completions", {"prompt": "Code:", "max_tokens": 30, "temperature": 1, "seed": k,
                                              "grammar": 'root ::= [0-9]{3} "-" [a-z]{2,4} [!?]\n'})
        results[k] = st == 200 and re.fullmatch(r"[0-9]{3}-[a-z]{2,4}[!?]", j["choices"][0]["text"]) is not None
    if not results[k]:
        results["raw%d" % k] = raw[:200]


threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ok(name("6 concurrent requests, 3 schemas and 3 grammars: every output in its language"),
   all(results.get(k) for k in range(6)), results)

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

# constrained output inside a knowledge session (X-Session-Id), like any generation
st, j, raw = post("/v1/chat/completions", dict(chat, response_format=rf, temperature=1, seed=77), {"X-Session-Id": "grammar-test"})
try:
    good = st == 200 and validate(json.loads(j["choices"][0]["message"]["content"]), SCHEMA)
except (TypeError, KeyError, ValueError):
    good = False
ok(name("json_schema under an X-Session-Id session"), good, raw[:300])
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
expect_400("unsupported keyword -> 400", rfs({"allOf": [{"type": "string"}]}), "not supported")
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

# ---- tools (function calling); needs a context longer than the trained model's 256 ----
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                          "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
        "tz": {"type": "string", "maxLength": 6}}, "required": ["tz"], "additionalProperties": False}}}
ask = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "max_tokens": 400}


def weather_args_ok(args):
    try:
        a = json.loads(args)
    except ValueError:
        return False
    return set(a) == {"city", "unit"} and isinstance(a["city"], str) and len(a["city"]) <= 12 and a["unit"] in ("c", "f")


if LABEL == "fixture":
    good, bad = 0, []
    for seed in range(1, 6):
        st, j, raw = post("/v1/chat/completions", dict(ask, tools=[WEATHER, TIME], tool_choice="required", temperature=1, seed=seed))
        try:
            c = j["choices"][0]
            tc = c["message"]["tool_calls"]
            args_ok = True
            for t in tc:
                f = t["function"]
                args_ok = args_ok and (weather_args_ok(f["arguments"]) if f["name"] == "get_weather" else
                                       set(json.loads(f["arguments"])) == {"tz"})
                args_ok = args_ok and t["id"].startswith("call_") and t["type"] == "function"
            if st == 200 and c["finish_reason"] == "tool_calls" and c["message"]["content"] is None and \
                    1 <= len(tc) <= 8 and len(set(t["id"] for t in tc)) == len(tc) and args_ok:
                good += 1
            else:
                bad.append(raw[:300])
        except (TypeError, KeyError, ValueError, IndexError):
            bad.append(raw[:300])
    ok(name("tools + tool_choice required: 5 sampled replies are calls with valid arguments"), good == 5, bad[:2])

    good, bad = 0, []
    for seed in range(1, 4):
        st, j, raw = post("/v1/chat/completions", dict(ask, tools=[WEATHER, TIME], tool_choice="required",
                                                       parallel_tool_calls=False, temperature=1, seed=seed))
        try:
            tc = j["choices"][0]["message"]["tool_calls"]
            good += st == 200 and len(tc) == 1
        except (TypeError, KeyError, IndexError):
            bad.append(raw[:300])
    ok(name("parallel_tool_calls false: exactly one call"), good == 3, bad[:2])
    expect_400("parallel_tool_calls not a boolean -> 400", dict(ask, tools=[WEATHER], parallel_tool_calls="yes"), "boolean")

    st, j, raw = post("/v1/chat/completions", dict(ask, tools=[WEATHER, TIME], temperature=1, seed=2,
                                                   tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    try:
        f = j["choices"][0]["message"]["tool_calls"][0]["function"]
        good = st == 200 and f["name"] == "get_weather" and weather_args_ok(f["arguments"])
    except (TypeError, KeyError, ValueError, IndexError):
        good = False
    ok(name("tool_choice naming a function: a call of that function"), good, raw[:300])

    st, ev = sse("/v1/chat/completions", dict(ask, tools=[WEATHER], tool_choice="required", stream=True, temperature=1, seed=4))
    calls, fin, content = {}, None, ""
    for e in ev:
        if e == "[DONE]":
            continue
        d = json.loads(e)
        for ch in d.get("choices", []):
            dl = ch.get("delta") or {}
            content += dl.get("content") or ""
            for t in dl.get("tool_calls") or []:
                cur = calls.setdefault(t["index"], {"id": None, "name": "", "arguments": ""})
                cur["id"] = t.get("id") or cur["id"]
                fn = t.get("function") or {}
                cur["name"] += fn.get("name") or ""
                cur["arguments"] += fn.get("arguments") or ""
            fin = ch.get("finish_reason") or fin
    good = st == 200 and fin == "tool_calls" and content == "" and sorted(calls) == list(range(len(calls))) and \
        len(calls) >= 1 and all(c["id"] and c["name"] == "get_weather" and weather_args_ok(c["arguments"]) for c in calls.values())
    ok(name("streamed tool call: id, name and arguments deltas as the SDK accumulates them"), good, (calls, fin, content))

    # auto: either text or a call; none: text
    st, j, raw = post("/v1/chat/completions", dict(ask, tools=[WEATHER], tool_choice="auto", temperature=1, seed=1))
    try:
        c = j["choices"][0]
        good = st == 200 and ((c["finish_reason"] == "tool_calls" and weather_args_ok(c["message"]["tool_calls"][0]["function"]["arguments"]))
                              or (c["message"].get("tool_calls") is None and not c["message"]["content"].startswith("{")))
    except (TypeError, KeyError, ValueError, IndexError):
        good = False
    ok(name("tool_choice auto: text or a valid call"), good, raw[:300])
    st, j, raw = post("/v1/chat/completions", dict(ask, tools=[WEATHER], tool_choice="none", max_tokens=5))
    ok(name("tool_choice none: plain text"), st == 200 and j["choices"][0]["message"].get("tool_calls") is None, raw[:300])

    # a second turn carrying the call and its result
    hist = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}]
    st, j, raw = post("/v1/chat/completions", {"messages": hist, "tools": [WEATHER], "max_tokens": 8})
    ok(name("history with assistant tool_calls and a tool message"), st == 200 and j["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), raw[:300])

    expect_400("tools with a malformed schema -> 400", dict(ask, tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "strng"}}}]), "tools[0].function.parameters")
    expect_400("tools with a parameters that is not an object -> 400", dict(ask, tools=[{"type": "function", "function": {"name": "f", "parameters": 5}}]), "parameters")
    expect_400("tool without a name -> 400", dict(ask, tools=[{"type": "function", "function": {}}]), "name")
    expect_400("tool_choice naming an unknown function -> 400", dict(ask, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}), "not among the tools")
    expect_400("tool_choice required without tools -> 400", dict(ask, tool_choice="required"), "no tools")
    expect_400("bad tool_choice -> 400", dict(ask, tools=[WEATHER], tool_choice="sometimes"), "tool_choice")
    expect_400("duplicate function names -> 400", dict(ask, tools=[WEATHER, WEATHER]), "used twice")
    expect_400("tools with response_format -> 400", dict(ask, tools=[WEATHER], response_format={"type": "json_object"}), "not supported")
    expect_400("tool message with bad content -> 400", {"messages": [{"role": "tool", "content": 5}]}, "content")
    expect_400("assistant tool_calls without arguments -> 400", {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]}, "arguments")

# the server is still fine
st, j, raw = post("/v1/completions", {"prompt": "x", "max_tokens": 2})
ok(name("server answers after the bad requests"), st == 200, raw[:200])
sys.exit(1 if tap.FAILS else 0)
