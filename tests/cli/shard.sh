#!/bin/sh
# GET /v1/shard/{model_id}/{start}-{end} (LARQL's grid hand-off): a donor `larql serve DIR`
# streams its vindex directory as a tar; the tar extracts to the same files, and a receiver
# serves a layer range of it (--ffn-only --layers) with the donor's FFN. Bad ranges are 400,
# an unknown model 404, a model served from a GGUF file 500 (as LARQL), no key 401.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac

M="$T_TMP/m.gguf"; V="$T_TMP/donor.vindex"
"$LARQL" make-model --out "$M" --preset demo --seed 7 >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference >/dev/null 2>&1 ||
    { fail "convert"; done_tests; exit 1; }
mkdir -p "$V/sub/deeper" && printf 'x' >"$V/sub/deeper/one.txt" # nested directories travel too

start_server donor "$V" --api-key k || { fail "donor starts"; done_tests; exit 1; }
B="http://127.0.0.1:$PORT"
ID=$(curl -s -H 'Authorization: Bearer k' "$B/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

# status CODE NAME URL: the request answers CODE
status() {
    got=$(curl -s -o "$T_TMP/body" -w '%{http_code}' -H 'Authorization: Bearer k' "$3")
    if [ "$got" = "$1" ]; then pass "$2"; else fail "$2" "status $got: $(head -c 200 "$T_TMP/body")"; fi
}
got=$(curl -s -o "$T_TMP/s.tar" -D "$T_TMP/h" -w '%{http_code}' -H 'Authorization: Bearer k' "$B/v1/shard/$ID/0-1")
if [ "$got" = 200 ] && grep -qi '^content-type: application/x-tar' "$T_TMP/h" &&
    grep -qi "^content-length: $(wc -c <"$T_TMP/s.tar" | tr -d ' ')" "$T_TMP/h"; then
    pass "200 application/x-tar with its Content-Length"
else
    fail "200 application/x-tar with its Content-Length" "status $got"
fi
mkdir "$T_TMP/recv.vindex"
if tar -xf "$T_TMP/s.tar" -C "$T_TMP/recv.vindex" && diff -r "$V" "$T_TMP/recv.vindex" >/dev/null; then
    pass "the tar extracts to the donor's directory, byte for byte"
else
    fail "the tar extracts to the donor's directory"
fi
status 400 "a range that is not START-END is 400" "$B/v1/shard/$ID/abc"
status 400 "START > END is 400" "$B/v1/shard/$ID/3-1"
status 400 "a negative bound is 400" "$B/v1/shard/$ID/-1-2"
status 404 "an unknown model is 404" "$B/v1/shard/nope/0-1"
status 404 "a third segment is no route" "$B/v1/shard/$ID/0-1/x"
got=$(curl -s -o /dev/null -w '%{http_code}' "$B/v1/shard/$ID/0-1")
[ "$got" = 401 ] && pass "without the key: 401" || fail "without the key: 401" "status $got"

# the receiver serves its range from the mirrored directory: the FFN of a layer matches the donor's
start_server recv "$T_TMP/recv.vindex" --ffn-only --layers 0-1 || { fail "receiver starts"; done_tests; exit 1; }
R="http://127.0.0.1:$PORT"
python3 - "$R" "$B" <<'EOF' >"$T_TMP/ffn" 2>&1
import json, sys, urllib.request
def ffn(base, key=None):
    body = json.dumps({"layer": 1, "residual": [0.01 * ((i * 7) % 13 - 6) for i in range(256)], "full_output": True}).encode()
    rq = urllib.request.Request(base + "/v1/walk-ffn", body, {"Content-Type": "application/json"})
    if key: rq.add_header("Authorization", "Bearer " + key)
    return json.load(urllib.request.urlopen(rq))
a, b = ffn(sys.argv[1]), ffn(sys.argv[2], "k")
print("same" if a.get("output") == b.get("output") and a.get("output") else "differ: %s %s" % (str(a)[:200], str(b)[:200]))
EOF
if grep -q '^same$' "$T_TMP/ffn"; then pass "the receiver's --layers 0-1 FFN equals the donor's"; else fail "the receiver's FFN equals the donor's" "$(head -c 400 "$T_TMP/ffn")"; fi

start_server gguf "$M" || { fail "GGUF server starts"; done_tests; exit 1; }
GID=$(curl -s "http://127.0.0.1:$PORT/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
got=$(curl -s -o "$T_TMP/body" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/shard/$GID/0-1")
if [ "$got" = 500 ] && grep -q 'not a directory' "$T_TMP/body"; then pass "a model served from a GGUF file: 500 (LARQL's)"; else fail "GGUF: 500" "status $got"; fi
done_tests
