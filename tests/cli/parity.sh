#!/bin/sh
# LARQL parity (issue 15) through real servers on 127.0.0.1 (tests/http/parity.py): describe
# caching (ETag, Cache-Control from --cache-ttl, 304 on If-None-Match; a dense-only vindex
# answers describe with no edges), plus the CLI habits LARQL users bring.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"

if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "parity tests" "curl or python3 missing"; done_tests; exit 0
fi

M="$T_TMP/m.gguf"; V="$T_TMP/v"; D="$T_TMP/dense"
"$LARQL" make-model --out "$M" --preset demo --seed 3 --plant ' France>Paris@1:5' >/dev/null 2>&1 ||
    { fail "make-model --plant"; done_tests; exit 1; }
check "convert" "$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference
check "convert dense-only" "$LARQL" convert gguf-to-vindex "$M" --output "$D" --keep-quant --dense-only

# larql run MODEL [PROMPT]: LARQL's positional prompt, --prompt kept; no prompt = chat
check "run MODEL PROMPT" "$LARQL" run "$M" "The capital of" -n 6 --temp 0
cp "$T_TMP/out" "$T_TMP/run_pos"
check "run MODEL --prompt" "$LARQL" run "$M" --prompt "The capital of" -n 6 --temp 0
if [ -s "$T_TMP/run_pos" ] && cmp -s "$T_TMP/run_pos" "$T_TMP/out"; then pass "positional prompt == --prompt (same tokens)"
else fail "positional prompt == --prompt (same tokens)" "$(cat "$T_TMP/run_pos") vs $(cat "$T_TMP/out")"; fi
check_fails "run with PROMPT and --prompt" "prompt is given twice" "$LARQL" run "$M" "a" --prompt "b"
check_fails "run with PROMPT and --ids" "exactly one" "$LARQL" run "$M" "a" --ids 1,2
if echo "hello" | "$LARQL" run "$M" -n 3 --temp 0 >"$T_TMP/out" 2>"$T_TMP/err" && [ -s "$T_TMP/out" ]; then
    pass "run without a prompt is chat (reads the message from stdin)"
else fail "run without a prompt is chat (reads the message from stdin)" "$(cat "$T_TMP/err")"; fi

ports=""
start_server cached "$V" --threads 1 --cache-ttl 60 && ports="$ports cached=$PORT" || fail "server --cache-ttl 60 starts"
start_server plain "$V" --threads 1 && ports="$ports plain=$PORT" || fail "server without --cache-ttl starts"
start_server dense "$D" --threads 1 && ports="$ports dense=$PORT" || fail "dense-only server starts"
check_fails "--cache-ttl must be a number" "cache-ttl" "$LARQL" serve "$V" --cache-ttl soon

# several models in one server (larql serve --dir): two vindexes with different planted facts
# and model ids (the last '/' segment of general.name), a browse-only one among them, and a
# directory that is not a vindex (ignored)
MD="$T_TMP/models"; mkdir -p "$MD/notes"
"$LARQL" make-model --out "$T_TMP/a.gguf" --preset demo --seed 3 --name org/alpha --plant ' France>Paris@1:5' >/dev/null 2>&1 &&
"$LARQL" make-model --out "$T_TMP/b.gguf" --preset demo --seed 4 --name beta --plant ' France>Rome@1:5' >/dev/null 2>&1 ||
    fail "make-model for --dir"
check "convert alpha" "$LARQL" convert gguf-to-vindex "$T_TMP/a.gguf" --output "$MD/a" --keep-quant --level inference
check "convert beta" "$LARQL" convert gguf-to-vindex "$T_TMP/b.gguf" --output "$MD/b" --keep-quant --level inference
start_server multi --dir "$MD" --threads 1 && ports="$ports multi=$PORT" || fail "serve --dir starts"
check_fails "serve --dir and MODEL together" "not both" "$LARQL" serve "$V" --dir "$MD"
check_fails "serve --dir without vindexes" "no subdirectory holds an index.json" "$LARQL" serve --dir "$MD/notes"
mkdir -p "$T_TMP/dup"; cp -r "$MD/b" "$T_TMP/dup/b1"; cp -r "$MD/b" "$T_TMP/dup/b2"
check_fails "serve --dir with two vindexes of one model id" "ids must differ" "$LARQL" serve --dir "$T_TMP/dup" --port 0

run_py py.log "$HTTP_DIR/parity.py" "$T_TMP" $ports
done_tests
