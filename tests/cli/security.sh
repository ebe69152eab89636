#!/bin/sh
# Security basics: the default bind is 127.0.0.1; request paths stay inside --patch-dir and
# per-request limits answer 400/413 with the field named (tests/http/limits.py).
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
M="$T_TMP/m.gguf"; V="$T_TMP/v"; P="$T_TMP/patches"
"$LARQL" make-model --out "$M" --preset tiny --seed 4 >/dev/null 2>&1 &&
    "$LARQL" convert gguf-to-vindex "$M" --output "$V" --level inference --keep-quant >/dev/null 2>&1 ||
    { fail "fixture"; done_tests; exit 1; }
mkdir -p "$P/dir.vlp"
printf '{"description":"good","operations":[{"op":"delete","layer":1,"feature":3}]}' >"$P/good.vlp"
printf '{"description":"outside","operations":[{"op":"delete","layer":1,"feature":4}]}' >"$T_TMP/outside.vlp"
cp "$P/good.vlp" "$P/.hidden.vlp"
ln -s "$T_TMP/outside.vlp" "$P/link.vlp"
mkdir "$T_TMP/state"
if start_server sec "$V" --patch-dir "$P" --state-dir "$T_TMP/state" --ctx 256 --max-body 262144 --threads 1; then
    if grep -q 'listening on http://127.0.0.1:' "$T_TMP/sec.out"; then pass "default bind 127.0.0.1"; else fail "default bind 127.0.0.1" "$(cat "$T_TMP/sec.out")"; fi
    run_py limits.log "$HTTP_DIR/limits.py" "$PORT" "$P" "$T_TMP/outside.vlp"
    OPEN_PORT=$PORT; OPEN_PID=$PID
    if start_server keyed "$V" --api-key k3y --threads 1; then
        run_py attacks.log "$HTTP_DIR/browser_attacks.py" "$OPEN_PORT" "$PORT"
        kill -TERM "$PID"
    else
        fail "a server with --api-key starts"
    fi
    if start_server capped "$V" --max-conns-per-ip 4 --threads 1; then
        run_py cap.log "$HTTP_DIR/conn_cap.py" "$PORT" 4
        kill -TERM "$PID"
    else
        fail "a server with --max-conns-per-ip starts"
    fi
    if start_server slow "$V" --header-timeout 2 --threads 1; then
        run_py slowloris.log "$HTTP_DIR/slowloris.py" "$PORT" 2
        kill -TERM "$PID"
    else
        fail "a server with --header-timeout starts"
    fi
    check_fails "serve: --header-timeout out of range" "header-timeout" "$LARQL" serve "$V" --header-timeout -1
    # 2,000 idle keep-alive connections (a thread each) beside normal traffic
    if start_server idle "$V" --max-connections 2100 --request-timeout 120 --threads 1; then
        run_py idle.log "$HTTP_DIR/idle_conns.py" "$PORT" "$PID" 2000
        kill -TERM "$PID"
    else
        fail "a server with --max-connections starts"
    fi
    check_fails "serve: --max-connections out of range" "max-connections" "$LARQL" serve "$V" --max-connections 0
    if start_server limited "$V" --rate-limit 5/min --trust-forwarded-for --threads 1; then
        run_py rate.log "$HTTP_DIR/rate_limit.py" "$PORT" 5
        kill -TERM "$PID"
    else
        fail "a server with --rate-limit starts"
    fi
    PID=$OPEN_PID
    kill -TERM "$PID"; wait "$PID"
    # every file the server wrote is inside --state-dir; nothing escaped next to it
    if [ -z "$(find "$T_TMP" -newer "$T_TMP/outside.vlp" -name '*.lqj' ! -path "$T_TMP/state/*")" ] &&
        [ ! -e "$T_TMP/escape.lqj" ]; then pass "session journals only under --state-dir"
    else fail "session journals only under --state-dir" "$(find "$T_TMP" -name '*.lqj')"; fi
fi
for spec in 10/fortnight 0/s x/min 1.5/s 10; do
    if "$LARQL" serve "$V" --port 0 --rate-limit "$spec" >"$T_TMP/rl.out" 2>&1; then
        fail "--rate-limit $spec: refused at start" "it started"
    elif grep -q -- "--rate-limit '$spec' is not N/unit" "$T_TMP/rl.out"; then pass "--rate-limit $spec: refused at start, naming the form"
    else fail "--rate-limit $spec: refused at start, naming the form" "$(cat "$T_TMP/rl.out")"; fi
done
done_tests
