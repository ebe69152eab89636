#!/bin/sh
# Editing what the model knows through a real server on 127.0.0.1 (tests/http/edit.py):
# inserts, sessions, patches and their bad input on a planted-knowledge vindex; then
# durability: a flood of inserts, kill -9 at a random moment, a restart on the same
# --state-dir, and every acknowledged insert is there.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"

if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "editing tests" "curl or python3 missing"; done_tests; exit 0
fi

M="$T_TMP/m.gguf"; V="$T_TMP/v"; S="$T_TMP/state"; P="$T_TMP/patches"
mkdir -p "$P"
printf 'This corpus is what the capital of France is Paris and Germany Berlin Atlantis Lemuria Poseidonia the model reads\n' >"$T_TMP/corpus.txt"
"$LARQL" make-model --out "$M" --preset demo --layers 4 --seed 7 --corpus-file "$T_TMP/corpus.txt" >/dev/null 2>&1
check "convert inference vindex" "$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference
printf '{"description":"good","operations":[{"op":"delete","layer":2,"feature":5}]}' >"$P/good.vlp"

if start_server main "$V" --threads 1 --state-dir "$S" --patch-dir "$P"; then
    grep -q "0 changes replayed" "$T_TMP/main.err" && pass "a new state dir starts empty" || fail "a new state dir starts empty" "$(cat "$T_TMP/main.err")"
    run_py main.log "$HTTP_DIR/edit.py" main "$PORT" "$P"
    # durability: flood, kill -9 at a random moment (0.3-1.5 s in), restart, check
    python3 "$HTTP_DIR/edit.py" flood "$PORT" "$T_TMP/acked" >/dev/null 2>&1 &
    FLOOD=$!
    # the random moment counts from the first acknowledged insert (a loaded machine may take
    # longer than the window to answer the first one)
    i=0
    while [ ! -s "$T_TMP/acked" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    sleep "$(python3 -c 'import random; print(round(random.uniform(0.3, 1.5), 2))')"
    kill -9 "$PID"
    wait "$FLOOD"
    if start_server again "$V" --threads 1 --state-dir "$S" --patch-dir "$P"; then
        pass "the server restarts on its state dir after kill -9"
        run_py check.log "$HTTP_DIR/edit.py" check "$PORT" "$T_TMP/acked"
    else
        fail "the server restarts on its state dir after kill -9" "$(cat "$T_TMP/again.err")"
    fi
else
    fail "server starts with --state-dir and --patch-dir"
fi
# a corrupt journal tail is reported and cut off at start, the good records kept
if [ -f "$S/journal.lqj" ]; then
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    printf 'LQJ1\005\000\000\000torn' >>"$S/journal.lqj"
    if start_server torn "$V" --threads 1 --state-dir "$S"; then
        grep -q "torn tail was cut off" "$T_TMP/torn.err" && pass "a torn journal tail is reported at start" ||
            fail "a torn journal tail is reported at start" "$(cat "$T_TMP/torn.err")"
        code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' -H 'Content-Type: application/json' \
            -d '{"prompt":"The capital of Atlantis is","top":1}' "http://127.0.0.1:$PORT/v1/infer")
        [ "$code" = 200 ] && grep -q Poseidonia "$T_TMP/b" && pass "the good records before the torn tail are kept" ||
            fail "the good records before the torn tail are kept" "$code $(cat "$T_TMP/b")"
    else
        fail "server starts on a journal with a torn tail"
    fi
fi
# a session journals its edits; one that expires takes its journal with it
for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
S2="$T_TMP/state2"
if start_server ttl "$V" --threads 1 --state-dir "$S2" --session-ttl 1; then
    ins() {
        curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -H "X-Session-Id: $1" \
            -d '{"entity":"Atlantis","relation":"capital","target":"Poseidonia","mode":"knn"}' \
            "http://127.0.0.1:$PORT/v1/insert"
    }
    [ "$(ins brief)" = 200 ] && [ -s "$S2/sessions/brief.lqj" ] && pass "a session's edit is journaled under sessions/" ||
        fail "a session's edit is journaled under sessions/" "$(ls -R "$S2")"
    sleep 2.5
    [ "$(ins other)" = 200 ] && [ ! -e "$S2/sessions/brief.lqj" ] && [ -s "$S2/sessions/other.lqj" ] &&
        pass "an expired session's journal is removed with it" ||
        fail "an expired session's journal is removed with it" "$(ls -R "$S2")"
else
    fail "server starts with --session-ttl 1"
fi
check_fails "serve --max-sessions 0 is refused" "max-sessions" "$LARQL" serve "$V" --max-sessions 0
done_tests
