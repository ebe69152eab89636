#!/bin/sh
# Constrained decoding from the command line and through a real `larql serve`: larql run
# --grammar / --json-schema (and their bad inputs), then tests/http/grammar.py against a
# server on the trained model and one on a random fixture (response_format json_object /
# json_schema, the grammar and json_schema fields, streaming, logit_bias, tools, clear 400s)
# and the official openai npm client's tools / parse() (tests/http/openai/sdk_tools.mjs).
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"

TRAINED=models/tinystories-ternary.gguf
FX="$T_TMP/fx.gguf"
"$LARQL" make-model --out "$FX" --preset tiny --seed 11 --ctx 1024 >/dev/null 2>&1

# ---- CLI ----
printf '%s\n' '{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string","maxLength":6}},"required":["n","s"],"additionalProperties":false}' >"$T_TMP/s.json"
printf 'root ::= ("yes" | "no") "!"\n' >"$T_TMP/yn.gbnf"
if "$LARQL" run "$FX" --prompt "Answer" --json-schema "$T_TMP/s.json" -n 200 --temp 1 --seed 4 >"$T_TMP/o1" 2>"$T_TMP/e1" &&
   python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); assert set(v)=={"n","s"} and isinstance(v["n"],int) and len(v["s"])<=6' "$T_TMP/o1"; then
    pass "run --json-schema: the output is an object of the schema"
else
    fail "run --json-schema: the output is an object of the schema" "$(cat "$T_TMP/o1" "$T_TMP/e1" | head -c 400)"
fi
if "$LARQL" run "$FX" --prompt "Answer" --grammar "$T_TMP/yn.gbnf" -n 20 --temp 1 --seed 2 >"$T_TMP/o2" 2>"$T_TMP/e2" &&
   grep -qx 'yes!\|no!' "$T_TMP/o2"; then
    pass "run --grammar: the output is in the language"
else
    fail "run --grammar: the output is in the language" "$(cat "$T_TMP/o2" "$T_TMP/e2" | head -c 400)"
fi
printf 'root ::= missing\n' >"$T_TMP/bad.gbnf"
printf '{"type": ' >"$T_TMP/bad.json"
check_fails "run --grammar with an undefined rule" "undefined rule 'missing'" "$LARQL" run "$FX" --prompt x --grammar "$T_TMP/bad.gbnf"
check_fails "run --json-schema that is not JSON" "not JSON" "$LARQL" run "$FX" --prompt x --json-schema "$T_TMP/bad.json"
check_fails "run --grammar with a missing file" "cannot read" "$LARQL" run "$FX" --prompt x --grammar "$T_TMP/none.gbnf"
check_fails "run with both --grammar and --json-schema" "at most one" "$LARQL" run "$FX" --prompt x --grammar "$T_TMP/yn.gbnf" --json-schema "$T_TMP/s.json"

# ---- HTTP ----
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "grammar HTTP tests" "curl or python3 missing"; done_tests; exit 0
fi
if [ -f "$TRAINED" ] && start_server trained "$TRAINED" --threads 1; then
    run_py trained.log "$HTTP_DIR/grammar.py" "$PORT" trained
else
    fail "server on the trained model starts"
fi
if start_server fixture "$FX" --threads 1 --ctx 1024; then
    run_py fixture.log "$HTTP_DIR/grammar.py" "$PORT" fixture
    # the official openai client: tools, the SDK's stream accumulator, parse()
    if ! command -v node >/dev/null; then
        skip "openai SDK tools tests" "node is not installed"
    elif [ ! -f "$HTTP_DIR/openai/node_modules/openai/package.json" ]; then
        skip "openai SDK tools tests" "run 'cd tests/http/openai && npm ci' to install the pinned openai package"
    else
        node "$HTTP_DIR/openai/sdk_tools.mjs" "http://127.0.0.1:$PORT/v1" >"$T_TMP/sdk.log" 2>&1
        cat "$T_TMP/sdk.log"
        T_PASS=$((T_PASS + $(grep -c '^ok - ' "$T_TMP/sdk.log")))
        T_FAIL=$((T_FAIL + $(grep -c '^not ok - ' "$T_TMP/sdk.log")))
        grep -q '^# sdk tools done' "$T_TMP/sdk.log" || fail "openai SDK tools test ran to the end" "$(tail -n 5 "$T_TMP/sdk.log")"
    fi
else
    fail "server on the fixture starts"
fi
done_tests
