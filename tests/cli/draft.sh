#!/bin/sh
# Speculative decoding from the front ends: `larql run --draft ngram|none` prints the same
# tokens either way (and says how many drafts it verified); bad --draft values are usage errors;
# `larql serve` answers /v1/completions the same with --draft none and the default, and counts
# drafts in /v1/runtime and /metrics; OpenAI's "prediction" (tests/http/prediction.py).
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$ROOT/models/tinystories-ternary.gguf"
if [ ! -f "$M" ]; then fail "models/tinystories-ternary.gguf is present"; done_tests; exit 1; fi
P="The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat"

"$LARQL" run "$M" --prompt "$P" -n 120 --temp 0 --ignore-eos --threads 2 --draft none --ids-out \
    >"$T_TMP/none.out" 2>"$T_TMP/none.err"
"$LARQL" run "$M" --prompt "$P" -n 120 --temp 0 --ignore-eos --threads 2 --draft ngram --draft-max 6 --ids-out \
    >"$T_TMP/ngram.out" 2>"$T_TMP/ngram.err"
if [ -s "$T_TMP/none.out" ] && cmp -s "$T_TMP/none.out" "$T_TMP/ngram.out"; then
    pass "run: the same 120 greedy tokens with --draft ngram and --draft none"
else
    fail "run: the same 120 greedy tokens with --draft ngram and --draft none" "$(head -c 300 "$T_TMP/ngram.err")"
fi
if grep -q "^draft: .* accepted" "$T_TMP/ngram.err" && ! grep -q "^draft:" "$T_TMP/none.err"; then
    pass "run: the draft line with --draft ngram only"
else
    fail "run: the draft line with --draft ngram only" "$(cat "$T_TMP/ngram.err")"
fi
check_fails "run --draft bogus is a usage error" "not ngram or none" "$LARQL" run "$M" --prompt "$P" --draft bogus
check_fails "run --draft-max 0 is a usage error" "draft-max" "$LARQL" run "$M" --prompt "$P" --draft-max 0
check_fails "run --draft-max 17 is a usage error" "draft-max" "$LARQL" run "$M" --prompt "$P" --draft-max 17
check_fails "serve --draft bogus is a usage error" "not ngram or none" "$LARQL" serve "$M" --draft bogus

BODY="{\"prompt\": \"$P\", \"max_tokens\": 100, \"temperature\": 0, \"ignore_eos\": true}"
texts=""
for mode in none ngram; do
    if start_server "s_$mode" "$M" --threads 2 --draft "$mode"; then
        curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$BODY" \
            | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' >"$T_TMP/srv_$mode.txt" 2>&1
        curl -s "http://127.0.0.1:$PORT/v1/runtime" >"$T_TMP/rt_$mode.json"
        curl -s "http://127.0.0.1:$PORT/metrics" >"$T_TMP/metrics_$mode.txt"
        [ "$mode" = ngram ] && run_py prediction.log "$HTTP_DIR/prediction.py" "$PORT"
        kill "$PID" 2>/dev/null
    fi
done
if [ -s "$T_TMP/srv_none.txt" ] && cmp -s "$T_TMP/srv_none.txt" "$T_TMP/srv_ngram.txt"; then
    pass "serve: /v1/completions answers the same with --draft ngram and --draft none"
else
    fail "serve: /v1/completions answers the same with --draft ngram and --draft none" \
        "$(head -c 300 "$T_TMP/srv_ngram.txt")"
fi
if python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["draft"]; b=json.load(open(sys.argv[2]))["draft"]
sys.exit(0 if a["mode"]=="ngram" and a["accepted"]>0 and a["drafted"]>=a["accepted"] and b["mode"]=="none" and b["drafted"]==0 else 1)' \
    "$T_TMP/rt_ngram.json" "$T_TMP/rt_none.json" 2>/dev/null; then
    pass "serve: /v1/runtime counts drafted and accepted tokens"
else
    fail "serve: /v1/runtime counts drafted and accepted tokens" "$(head -c 300 "$T_TMP/rt_ngram.json")"
fi
if grep -q '^larql_draft_accepted_total [1-9]' "$T_TMP/metrics_ngram.txt"; then
    pass "serve: /metrics has larql_draft_accepted_total"
else
    fail "serve: /metrics has larql_draft_accepted_total" "$(grep draft "$T_TMP/metrics_ngram.txt")"
fi
done_tests
