#!/bin/sh
# The remote FFN split (LARQL's --ffn-only / remote walk backend), two processes on loopback:
# `larql serve --ffn-only` answers POST /v1/walk-ffn; `larql run|logits|serve --ffn URL` runs
# attention locally and every layer's FFN there. Logits and generated tokens must equal the
# local model's; the wire format is LARQL's (JSON and binary application/x-larql-ffn); bad
# bodies, other layers of a shard, a server that is down, slow, of another shape or that
# answers garbage are clean errors, never a crash.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
M=${LQ_FFN_MODEL:-models/tinystories-ternary.gguf}
[ -f "$M" ] || { skip "ffn_remote" "no $M"; done_tests; exit 0; }
command -v python3 >/dev/null || { skip "ffn_remote" "no python3"; done_tests; exit 0; }
P="Once upon a time"

start_server ffn "$M" --ffn-only --threads 1 || { fail "ffn-only server starts"; done_tests; exit 1; }
FPORT=$PORT; FURL="http://127.0.0.1:$FPORT"
curl -s "$FURL/v1/stats" >"$T_TMP/stats.json"
if grep -q '"mode":"ffn-service"' "$T_TMP/stats.json" && grep -q '"ffn_service":true' "$T_TMP/stats.json"; then
    pass "stats: mode ffn-service"; else fail "stats: mode ffn-service" "$(head -c 300 "$T_TMP/stats.json")"; fi

# ---- same numbers as the local model ----
"$LARQL" logits "$M" --prompt "$P" --top 4096 --threads 1 >"$T_TMP/loc.logits" 2>"$T_TMP/err1"
"$LARQL" logits "$M" --prompt "$P" --top 4096 --threads 1 --ffn "$FURL" >"$T_TMP/rem.logits" 2>"$T_TMP/err2"
d=$(python3 - "$T_TMP/loc.logits" "$T_TMP/rem.logits" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert a and len(a) == len(b), (len(a), len(b))
m = 0.0
for x, y in zip(a, b):
    dx = dict((t, v) for t, v in x["top"]); dy = dict((t, v) for t, v in y["top"])
    assert dx.keys() == dy.keys() and len(dx) == 4096
    m = max(m, max(abs(dx[t] - dy[t]) for t in dx))
print(m)
EOF
)
if [ "$d" = "0.0" ] && cmp -s "$T_TMP/loc.logits" "$T_TMP/rem.logits"; then
    pass "logits: every position, full vocabulary, max |delta| = 0 (identical)"
else fail "logits identical" "max delta '$d': $(head -c 300 "$T_TMP/err2")"; fi
"$LARQL" run "$M" "$P" -n 40 --temp 0 --threads 1 --ids-out >"$T_TMP/loc.gen" 2>/dev/null
"$LARQL" run "$M" "$P" -n 40 --temp 0 --threads 1 --ids-out --ffn "$FURL" >"$T_TMP/rem.gen" 2>"$T_TMP/err3"
if [ -s "$T_TMP/loc.gen" ] && cmp -s "$T_TMP/loc.gen" "$T_TMP/rem.gen"; then pass "run: 40 greedy tokens equal"
else fail "run: 40 greedy tokens equal" "$(head -c 300 "$T_TMP/err3")"; fi
"$LARQL" run "$M" "$P" -n 24 --temp 0.8 --seed 5 --threads 1 --ids-out >"$T_TMP/loc.gen2" 2>/dev/null
"$LARQL" run "$M" "$P" -n 24 --temp 0.8 --seed 5 --threads 1 --ids-out --ffn "$FURL" >"$T_TMP/rem.gen2" 2>/dev/null
if [ -s "$T_TMP/loc.gen2" ] && cmp -s "$T_TMP/loc.gen2" "$T_TMP/rem.gen2"; then pass "run: sampled tokens (seed 5) equal"
else fail "run: sampled tokens equal"; fi

head -c 6000 README.md >"$T_TMP/ppl.txt"
a=$("$LARQL" perplexity "$M" --file "$T_TMP/ppl.txt" --ctx 64 --threads 1 2>&1 | tail -n 1)
b=$("$LARQL" perplexity "$M" --file "$T_TMP/ppl.txt" --ctx 64 --threads 1 --ffn "$FURL" 2>&1 | tail -n 1)
case "$a" in perplexity*) [ "$a" = "$b" ] && pass "perplexity equal ($a)" || fail "perplexity equal" "'$a' vs '$b'";; *) fail "perplexity runs" "$a";; esac

# serve --ffn URL: a full server whose FFN is remote answers as a local one
start_server loc "$M" --threads 1 || fail "local server starts"
LPORT=$PORT
start_server rem "$M" --threads 1 --ffn "$FURL" || fail "remote-FFN server starts"
RPORT=$PORT
body='{"prompt":"Once upon a time","max_tokens":20,"temperature":0}'
a=$(curl -s -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$LPORT/v1/completions" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
b=$(curl -s -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$RPORT/v1/completions" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "serve --ffn: /v1/completions text equal"; else fail "serve --ffn completions" "'$a' vs '$b'"; fi
a=$(curl -s -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","top":5}' "http://127.0.0.1:$LPORT/v1/infer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["predictions"])')
b=$(curl -s -H 'Content-Type: application/json' -d '{"prompt":"Once upon a time","top":5}' "http://127.0.0.1:$RPORT/v1/infer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["predictions"])')
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "serve --ffn: /v1/infer predictions equal"; else fail "serve --ffn infer" "'$a' vs '$b'"; fi
# concurrent requests through one remote-FFN model: the connection pool under load
run_py conc.log - "http://127.0.0.1:$LPORT" "http://127.0.0.1:$RPORT" <<'EOF2'
import json, sys, threading, urllib.request
def infer(base, prompt):
    req = urllib.request.Request(base + "/v1/infer", data=json.dumps({"prompt": prompt, "top": 3}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["predictions"]
prompts = ["Once upon a time %d" % i for i in range(12)] + ["The cat sat on the mat and %d" % i for i in range(12)]
want = {p: infer(sys.argv[1], p) for p in prompts}
got, errs = {}, []
def work(p):
    try: got[p] = infer(sys.argv[2], p)
    except Exception as e: errs.append(repr(e))
ts = [threading.Thread(target=work, args=(p,)) for p in prompts]
[t.start() for t in ts]; [t.join() for t in ts]
bad = [p for p in prompts if got.get(p) != want[p]]
print(("ok - " if not errs and not bad else "not ok - ") + "24 concurrent /v1/infer through the remote FFN equal the local server's")
if errs or bad: print("#   %s %s" % (errs[:2], bad[:2]))
EOF2

# ---- the route, LARQL's wire format ----
run_py wire.log - "$FURL" <<'EOF'
import json, struct, sys, urllib.request, urllib.error
url = sys.argv[1] + "/v1/walk-ffn"
H = 256
def post(body, ct="application/json", accept=None):
    if isinstance(body, (dict, list)): body = json.dumps(body).encode()
    elif isinstance(body, str): body = body.encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ct, **({"Accept": accept} if accept else {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()
n = 0
def ok(c, name, extra=""):
    print(("ok - " if c else "not ok - ") + name + ("" if c else "\n#   " + str(extra)[:300]))
x = [((i * 7919) % 23 - 11) * 0.05 for i in range(2 * H)]
s, ct, b = post({"layer": 1, "residual": x[:H], "full_output": True})
j = json.loads(b) if s == 200 else {}
ok(s == 200 and ct.startswith("application/json") and j.get("layer") == 1 and len(j.get("output", [])) == H
   and j.get("seq_len") == 1 and "latency_ms" in j, "JSON full_output single: {layer, output, seq_len, latency_ms}", b)
single = j.get("output")
s, ct, b = post({"layers": [0, 1], "residual": x, "seq_len": 2, "full_output": True})
j = json.loads(b) if s == 200 else {}
res = j.get("results", [])
ok(s == 200 and [r["layer"] for r in res] == [0, 1] and all(len(r["output"]) == 2 * H for r in res)
   and j.get("seq_len") == 2, "JSON full_output batch: {results:[{layer, output, seq_len}], seq_len, latency_ms}", b)
# binary single: u32 layer, u32 seq_len, u32 flags, u32 top_k, f32 residual
bs = struct.pack("<4I", 1, 1, 1, 8092) + struct.pack("<%df" % H, *x[:H])
s, ct, b = post(bs, "application/x-larql-ffn", "application/x-larql-ffn-i8, application/x-larql-ffn-f16, application/x-larql-ffn")
ok(s == 200 and ct == "application/x-larql-ffn" and len(b) == 12 + 4 * H and struct.unpack("<2I", b[:8]) == (1, 1),
   "binary single: [u32 layer][u32 seq_len][f32 latency][f32 x hidden]", (s, ct, len(b)))
if s == 200:
    out = struct.unpack("<%df" % H, b[12:])
    ok(max(abs(a - c) for a, c in zip(out, single)) < 1e-5 * max(1.0, max(abs(v) for v in out)),
       "binary and JSON answers agree")
bb = struct.pack("<3I", 0xFFFFFFFF, 2, 0) + struct.pack("<I", 1) + struct.pack("<3I", 1, 1, 0) + struct.pack("<%df" % H, *x[:H])
s, ct, b = post(bb, "application/x-larql-ffn")
ok(s == 200 and struct.unpack("<I", b[:4])[0] == 0xFFFFFFFF and struct.unpack("<I", b[4:8])[0] == 2
   and len(b) == 12 + 2 * (12 + 4 * H) and struct.unpack("<3I", b[12:24]) == (0, 1, H),
   "binary batch: marker, count, latency, then [layer][seq_len][count][f32...] per layer", (s, len(b)))
s, ct, b = post({"layer": 0, "residual": x[:H], "top_k": 5})
j = json.loads(b) if s == 200 else {}
ok(s == 200 and j.get("layer") == 0 and isinstance(j.get("features"), list) and isinstance(j.get("scores"), list),
   "features-only mode answers {layer, features, scores, latency_ms}", b)
# ---- errors: 400 {"error"} as LARQL's handler ----
def err(body, ct, want, pat, name):
    s, rct, b = post(body, ct)
    try: msg = json.loads(b).get("error", "")
    except Exception: msg = ""
    ok(s == want and pat in msg, name + " -> %d" % want, (s, b[:200]))
err("{not json", "application/json", 400, "invalid JSON", "malformed JSON")
err({"layer": 0}, "application/json", 400, "residual", "missing residual")
err({"layer": 0, "residual": "x"}, "application/json", 400, "residual", "residual not an array")
err({"layer": 0, "residual": x[:H - 1], "full_output": True}, "application/json", 400, "expected 256", "residual of the wrong length")
err({"residual": x[:H], "full_output": True}, "application/json", 400, "must provide 'layer' or 'layers'", "no layer")
err({"layer": 99, "residual": x[:H], "full_output": True}, "application/json", 400, "out of range (num_layers = 4)", "layer out of range")
err({"layer": -1, "residual": x[:H]}, "application/json", 400, "layer", "negative layer")
err({"layer": 0, "residual": [], "seq_len": 0, "full_output": True}, "application/json", 400, "seq_len must be >= 1", "seq_len 0")
err({"layer": 0, "residual": x[:H], "full_output": True, "moe_layer": True}, "application/json", 400, "moe", "moe_layer without shards")
err({"layer": 0, "residual": x[:H], "full_output": "yes"}, "application/json", 400, "full_output", "full_output not a boolean")
err(b"\x00" * 8, "application/x-larql-ffn", 400, "too short", "binary: 8 bytes")
err(struct.pack("<4I", 0, 1, 0, 8) + struct.pack("<%df" % H, *x[:H]), "application/x-larql-ffn", 400, "requires full_output", "binary: features-only")
err(struct.pack("<4I", 0xFFFFFFFF, 1000000, 0, 0), "application/x-larql-ffn", 400, "too short for 1000000 layer", "binary: batch count past the body")
err(struct.pack("<4I", 0, 1, 1, 8) + b"\x00\x00\x80", "application/x-larql-ffn", 400, "multiple of 4", "binary: ragged residual")
err(struct.pack("<4I", 0, 1, 1, 8) + struct.pack("<%df" % H, *([float("nan")] + x[1:H])), "application/x-larql-ffn", 400, "finite", "binary: NaN")
err(struct.pack("<4I", 0, 0xFFFFFFFE, 1, 8) + struct.pack("<%df" % H, *x[:H]), "application/x-larql-ffn", 400, "expected", "binary: huge seq_len")
err(struct.pack("<4I", 9, 1, 1, 8) + struct.pack("<%df" % H, *x[:H]), "application/x-larql-ffn", 400, "out of range", "binary: layer out of range")
s, ct, b = post({"layers": [0] * 5000, "residual": x[:H], "full_output": True})
ok(s == 400 and b"at most 1024" in b, "5000 layers in one request -> 400", (s, b[:200]))
s, ct, b = post({"layers": [0] * 1000, "residual": x[:H] * 64, "seq_len": 64, "full_output": True})
ok(s == 400 and b"as JSON" in b, "1000 layers x 64 rows of JSON output: over the cap -> 400", (s, b[:200]))
s, ct, b = post({"layers": [0] * 1000, "residual": x[:H], "top_k": 60000})
ok(s == 400 and b"features a request" in b, "features: top_k x layers over the cap -> 400", (s, b[:200]))
req = urllib.request.Request(sys.argv[1] + "/v1/walk-ffn-q8k", data=b"\x00" * 16, headers={"Content-Type": "application/x-larql-ffn-q8k"})
try: urllib.request.urlopen(req, timeout=10); s = 200
except urllib.error.HTTPError as e: s = e.code; b = e.read()
ok(s == 404, "/v1/walk-ffn-q8k -> 404 as LARQL without Q4_K data", (s, b[:200]))
# mutated bodies (seeded): every answer a 200 or a 4xx, the server alive after them
import os, random
rnd = random.Random(int(os.environ.get("FFN_FUZZ_SEED", "7")))
seeds = [struct.pack("<4I", 1, 1, 1, 8092) + struct.pack("<%df" % H, *x[:H]),
         struct.pack("<5I", 0xFFFFFFFF, 2, 0, 3, 2) + struct.pack("<2I", 1, 8) + struct.pack("<%df" % (2 * H), *x),
         json.dumps({"layers": [0, 1], "residual": x, "seq_len": 2, "full_output": True}).encode()]
bad = []
N = int(os.environ.get("FFN_FUZZ_N", "400"))
for i in range(N):
    b = bytearray(rnd.choice(seeds))
    for _ in range(rnd.randint(1, 8)):
        op = rnd.randrange(4); k = rnd.randrange(len(b)) if b else 0
        if op == 0 and b: b[k] = rnd.randrange(256)
        elif op == 1: del b[k:k + rnd.randint(1, 64)]
        elif op == 2: b[k:k] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
        elif b: b[k:k + 4] = struct.pack("<I", rnd.choice([0, 1, 2, 3, 4, 64, 65, 255, 0x7FFFFFFF, 0xFFFFFFFE, 0xFFFFFFFF]))
    ct = "application/json" if b[:1] == b"{" and rnd.random() < 0.8 else "application/x-larql-ffn"
    try:
        s, _, _ = post(bytes(b), ct)
    except Exception as e:
        s = repr(e)
    if s not in (200, 400, 413):
        bad.append((i, s))
ok(not bad, "%d mutated bodies: each 200, 400 or 413" % N, bad[:5])
s, _, _ = post({"layer": 0, "residual": x[:H], "full_output": True})
ok(s == 200, "the server answers after them")
EOF
code=$(curl -s -o "$T_TMP/inf.json" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"prompt":"hi"}' "$FURL/v1/infer")
if [ "$code" = 503 ] && grep -q "inference disabled" "$T_TMP/inf.json"; then pass "--ffn-only: /v1/infer 503"; else fail "--ffn-only infer 503" "$code $(cat "$T_TMP/inf.json")"; fi
code=$(curl -s -o "$T_TMP/inf.json" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"prompt":"hi"}' "$FURL/v1/completions")
if [ "$code" = 503 ] && grep -q -- "--ffn-only" "$T_TMP/inf.json"; then pass "--ffn-only: /v1/completions 503 naming --ffn-only"; else fail "--ffn-only completions 503" "$code $(cat "$T_TMP/inf.json")"; fi

# ---- a shard: --layers 0-1 of 4 layers, and a small --max-body ----
start_server shard "$M" --ffn-only --layers 0-1 --max-body 65536 --threads 1 || fail "shard server starts"
SURL="http://127.0.0.1:$PORT"
code=$(curl -s -o "$T_TMP/sh.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"layer\":2,\"full_output\":true,\"residual\":[$(python3 -c 'print(",".join(["0.5"]*256))')]}" "$SURL/v1/walk-ffn")
if [ "$code" = 400 ] && grep -q "layer 2 not served by this shard (owned: 0.*1)" "$T_TMP/sh.json"; then pass "--layers 0-1: layer 2 -> 400 not served by this shard"
else fail "--layers: layer 2 refused" "$code $(cat "$T_TMP/sh.json")"; fi
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"layer\":1,\"full_output\":true,\"residual\":[$(python3 -c 'print(",".join(["0.5"]*256))')]}" "$SURL/v1/walk-ffn")
[ "$code" = 200 ] && pass "--layers 0-1: layer 1 -> 200" || fail "--layers: layer 1 served" "$code"
python3 -c 'import sys; sys.stdout.buffer.write(b"\0" * 100000)' >"$T_TMP/big.bin"
code=$(curl -s -o "$T_TMP/big.json" -w '%{http_code}' -H 'Content-Type: application/x-larql-ffn' --data-binary @"$T_TMP/big.bin" "$SURL/v1/walk-ffn")
[ "$code" = 413 ] && pass "body over --max-body -> 413" || fail "oversize body 413" "$code $(head -c 200 "$T_TMP/big.json")"
check_fails "run --ffn shard: layer 2 refused, a clean error" "not served by this shard" \
    "$LARQL" run "$M" "$P" -n 4 --temp 0 --threads 1 --ffn "$SURL"
# LARQL's shard map: layers 0-1 on one server, 2-3 on another
start_server shard2 "$M" --ffn-only --layers 2-3 --threads 1 || fail "second shard server starts"
MAP="0-1=$SURL,2-3=http://127.0.0.1:$PORT"
"$LARQL" logits "$M" --prompt "$P" --top 4096 --threads 1 --ffn "$MAP" >"$T_TMP/map.logits" 2>"$T_TMP/err5"
cmp -s "$T_TMP/loc.logits" "$T_TMP/map.logits" && pass "shard map 0-1=URL,2-3=URL: logits identical" \
    || fail "shard map logits" "$(head -c 300 "$T_TMP/err5")"
"$LARQL" run "$M" "$P" -n 40 --temp 0 --threads 1 --ids-out --ffn "$MAP" >"$T_TMP/map.gen" 2>/dev/null
cmp -s "$T_TMP/loc.gen" "$T_TMP/map.gen" && pass "shard map: 40 greedy tokens equal" || fail "shard map tokens"
check_fails "shard map leaving layer 3 uncovered is refused" "serves layer 3" \
    "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn "0-2=$SURL"
check_fails "malformed shard map is refused" "bad shard" "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn "0-x=$SURL"
check_fails "serve --layers without --ffn-only is a usage error" "needs --ffn-only" "$LARQL" serve "$M" --layers 0-1
check_fails "serve --layers 3-1 is a usage error" "not a range" "$LARQL" serve "$M" --ffn-only --layers 3-1

# ---- a vindex as the FFN service: the same numbers, and its gate KNN in features-only mode ----
if "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/vx" --keep-quant --level inference >/dev/null 2>&1 &&
    start_server vx "$T_TMP/vx" --ffn-only --threads 1; then
    "$LARQL" logits "$M" --prompt "$P" --top 4096 --threads 1 --ffn "http://127.0.0.1:$PORT" >"$T_TMP/vx.logits" 2>"$T_TMP/err4"
    cmp -s "$T_TMP/loc.logits" "$T_TMP/vx.logits" && pass "vindex FFN service: logits identical" \
        || fail "vindex FFN service: logits identical" "$(head -c 300 "$T_TMP/err4")"
    curl -s -H 'Content-Type: application/json' -d "{\"layers\":[0,3],\"top_k\":3,\"residual\":[$(python3 -c 'print(",".join(["0.5"]*256))')]}" \
        "http://127.0.0.1:$PORT/v1/walk-ffn" >"$T_TMP/feat.json"
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j["results"]; assert [e["layer"] for e in r]==[0,3] and all(len(e["features"])==3==len(e["scores"]) for e in r)' \
        "$T_TMP/feat.json" 2>/dev/null && pass "vindex: features-only gate KNN, 3 features per layer" \
        || fail "vindex features-only" "$(head -c 300 "$T_TMP/feat.json")"
else fail "vindex FFN service starts"; fi

# ---- the FFN server goes away under a serving client, and comes back ----
FP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LARQL" serve "$M" --ffn-only --threads 1 --port "$FP" >/dev/null 2>&1 &
F2=$!; PIDS="$PIDS $F2"; i=0
while ! curl -sf "http://127.0.0.1:$FP/v1/health" >/dev/null 2>&1 && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
start_server cli "$M" --threads 1 --ffn "http://127.0.0.1:$FP" || fail "client server starts"
CURL="http://127.0.0.1:$PORT"
kill "$F2"; wait "$F2" 2>/dev/null
code=$(curl -s -o "$T_TMP/c.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$CURL/v1/completions")
if [ "$code" = 500 ] && grep -q "remote FFN, layer 0" "$T_TMP/c.json"; then pass "FFN server gone: /v1/completions 500 naming the remote layer"
else fail "FFN server gone: completions error" "$code $(head -c 300 "$T_TMP/c.json")"; fi
curl -sN -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":5,"stream":true}' "$CURL/v1/completions" >"$T_TMP/sse.txt"
if grep -q '"error".*remote FFN' "$T_TMP/sse.txt" && grep -q 'data: \[DONE\]' "$T_TMP/sse.txt"; then pass "FFN server gone: the stream ends with an error event and [DONE]"
else fail "FFN server gone: stream" "$(head -c 300 "$T_TMP/sse.txt")"; fi
curl -sf "$CURL/v1/health" >/dev/null && pass "FFN server gone: the client server stays up" || fail "client server survives"
"$LARQL" serve "$M" --ffn-only --threads 1 --port "$FP" >/dev/null 2>&1 &
F2=$!; PIDS="$PIDS $F2"; i=0
while ! curl -sf "http://127.0.0.1:$FP/v1/health" >/dev/null 2>&1 && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
b=$(curl -s -H 'Content-Type: application/json' -d "$body" "$CURL/v1/completions" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null)
[ -n "$a" ] && [ "$b" = "$(curl -s -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$LPORT/v1/completions" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')" ] \
    && pass "FFN server back: the client reconnects, same text" || fail "FFN server back: reconnect" "'$b'"

# ---- the server is down, of another shape, silent, or answers garbage ----
check_fails "server down: cannot connect" "cannot connect" "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn http://127.0.0.1:1
check_fails "https URL refused" "not an http:// URL" "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn https://127.0.0.1:1
"$LARQL" make-model --out "$T_TMP/other.gguf" --preset tiny --seed 3 >/dev/null 2>&1
start_server other "$T_TMP/other.gguf" --ffn-only --threads 1 || fail "other-shape server starts"
check_fails "wrong model shape: refused at open" "hidden size 128; this model's is 256" \
    "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn "http://127.0.0.1:$PORT"
# a fake server: /v1/stats of the right shape, then MODE for /v1/walk-ffn
fake() {
    rm -f "$T_TMP/fake.port"
    python3 - "$1" >"$T_TMP/fake.port" 2>/dev/null <<'EOF' &
import http.server, socketserver, sys, time, json
mode = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, code, ct, body):
        self.send_response(code); self.send_header("Content-Type", ct); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self.reply(200, "application/json", json.dumps({"hidden_size": 256, "layers": 4}).encode())
    def do_POST(self):
        req = self.rfile.read(int(self.headers["Content-Length"]))
        rows = int.from_bytes(req[4:8], "little")
        if mode == "slow": time.sleep(5); self.reply(200, "application/x-larql-ffn", b"")
        elif mode == "short": self.reply(200, "application/x-larql-ffn", b"\0" * 20)
        elif mode == "nan": self.reply(200, "application/x-larql-ffn", req[:8] + b"\0" * 4 + b"\0\0\xc0\x7f" * (256 * rows))
        elif mode == "huge":
            self.send_response(200); self.send_header("Content-Type", "application/x-larql-ffn")
            self.send_header("Content-Length", str(1 << 40)); self.end_headers()
        elif mode == "500": self.reply(500, "application/json", b'{"error":"boom"}')
        else: self.reply(200, "text/html", b"<html>")
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
s = S(("127.0.0.1", 0), H); print(s.server_address[1], flush=True); s.serve_forever()
EOF
    FAKE=$!; PIDS="$PIDS $FAKE"; i=0
    while ! grep -q '^[0-9]' "$T_TMP/fake.port" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    FAKE_URL="http://127.0.0.1:$(cat "$T_TMP/fake.port")"
}
fake slow
t0=$(date +%s)
check_fails "silent server: --ffn-timeout 500 ms" "timed out" "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn "$FAKE_URL" --ffn-timeout 500
[ $(( $(date +%s) - t0 )) -lt 4 ] && pass "timeout is prompt" || fail "timeout is prompt"
check_fails "silent server: LARQL's --ffn-timeout-secs 1" "timed out" "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn "$FAKE_URL" --ffn-timeout-secs 1
kill "$FAKE" 2>/dev/null
for mode in short nan huge 500 html; do
    fake $mode
    case $mode in short) pat="answer of 20 bytes";; nan) pat="not finite";; huge) pat="over the";; 500) pat="HTTP 500: boom";; html) pat="answer of type";; esac
    check_fails "server answers $mode: clean error" "$pat" "$LARQL" run "$M" "$P" -n 4 --threads 1 --ffn "$FAKE_URL"
    kill "$FAKE" 2>/dev/null
done
done_tests
