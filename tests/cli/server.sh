#!/bin/sh
# larql serve against real clients on 127.0.0.1: raw HTTP (tests/http/protocol.py, stdlib
# Python), WebSocket (tests/http/ws.py, a stdlib RFC 6455 client), curl, and the official
# openai npm package (tests/http/openai, skipped with a message when node or its
# node_modules are missing). Every server started here is killed
# on exit, whatever happens.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"

# stop_server PID: SIGTERM, then RC = the exit status (waits up to 20 s, then SIGKILL)
stop_server() {
    kill -TERM "$1" 2>/dev/null
    i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    kill -0 "$1" 2>/dev/null && kill -9 "$1"
    wait "$1"; RC=$?
}

if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "server tests" "curl or python3 missing"; done_tests; exit 0
fi

M="$T_TMP/tiny.gguf"; SLOW="$T_TMP/slow.gguf"
"$LARQL" make-model --out "$M" --preset tiny --seed 7 >/dev/null 2>&1
# a bigger model whose streams last long enough to be interrupted
"$LARQL" make-model --out "$SLOW" --dim 512 --ffn 1536 --layers 8 --ctx 4096 --vocab 512 >/dev/null 2>&1

# ---- startup errors ----
check_fails "serve needs a model" "MODEL is required" "$LARQL" serve
check_fails "serve: missing model file" "cannot open" "$LARQL" serve "$T_TMP/none.gguf" --port 0
check_fails "serve: bad port" "--port" "$LARQL" serve "$M" --port 70000
check_fails "serve: unknown option" "unknown option" "$LARQL" serve "$M" --bogus
check_fails "serve: refuses a model over the memory limit, naming both figures" "needs about .* MiB .* limit is 0 MiB" \
    "$LARQL" serve "$SLOW" --port 0 --memory-limit 4096

# ---- main server: routes, bad input, concurrency, slow clients ----
if start_server main "$M" --max-concurrent 256 --max-body 65536 --request-timeout 2 --threads 1; then
    pass "serve starts and answers /v1/health"
    if grep -q "loaded .* in [0-9.]* ms" "$T_TMP/main.err"; then pass "startup logs the load time"; else fail "startup logs the load time" "$(cat "$T_TMP/main.err")"; fi
    MAIN_PID=$PID; MAIN_PORT=$PORT; U="http://127.0.0.1:$PORT"
    # curl for the raw protocol
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' "$U/v1/nothing")
    if [ "$code" = 404 ] && grep -q '"error"' "$T_TMP/b"; then pass "curl: 404 with a JSON error"; else fail "curl: 404 with a JSON error" "$code $(cat "$T_TMP/b")"; fi
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"prompt":"Hi","max_tokens":4,"temperature":0,"stream":true}' "$U/v1/completions")
    if [ "$code" = 200 ] && [ "$(grep -c '^data: \[DONE\]$' "$T_TMP/b")" = 1 ] && tail -n 2 "$T_TMP/b" | grep -q '^data: \[DONE\]$'; then
        pass "curl: SSE stream ends with exactly one data: [DONE]"; else fail "curl: SSE stream ends with exactly one data: [DONE]" "$(tail -c 300 "$T_TMP/b")"; fi
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"prompt":' "$U/v1/completions")
    if [ "$code" = 400 ] && grep -q '"message"' "$T_TMP/b"; then pass "curl: malformed JSON -> 400 OpenAI envelope"; else fail "curl: malformed JSON -> 400 OpenAI envelope" "$code $(cat "$T_TMP/b")"; fi

    python3 "$HTTP_DIR/protocol.py" main "$PORT" >"$T_TMP/proto.log" 2>&1
    cat "$T_TMP/proto.log"
    T_PASS=$((T_PASS + $(grep -c '^ok - ' "$T_TMP/proto.log")))
    T_FAIL=$((T_FAIL + $(grep -c '^not ok - ' "$T_TMP/proto.log")))
    if grep -q Traceback "$T_TMP/proto.log"; then fail "protocol.py main ran to the end" "$(tail -n 5 "$T_TMP/proto.log")"; fi

    # the official OpenAI SDK
    if ! command -v node >/dev/null; then
        skip "openai SDK tests" "node is not installed"
    elif [ ! -f "$HTTP_DIR/openai/node_modules/openai/package.json" ]; then
        skip "openai SDK tests" "run 'cd tests/http/openai && npm ci' to install the pinned openai package"
    else
        node "$HTTP_DIR/openai/sdk_test.mjs" "$U/v1" >"$T_TMP/sdk.log" 2>&1
        cat "$T_TMP/sdk.log"
        T_PASS=$((T_PASS + $(grep -c '^ok - ' "$T_TMP/sdk.log")))
        T_FAIL=$((T_FAIL + $(grep -c '^not ok - ' "$T_TMP/sdk.log")))
        grep -q '^# sdk done' "$T_TMP/sdk.log" || fail "openai SDK test ran to the end" "$(tail -n 5 "$T_TMP/sdk.log")"
    fi

    stop_server "$MAIN_PID"; rc=$RC
    if [ "$rc" = 0 ]; then pass "SIGTERM: graceful shutdown, exit 0"; else fail "SIGTERM: graceful shutdown, exit 0" "exit $rc: $(tail -n 3 "$T_TMP/main.err")"; fi
else
    fail "serve starts and answers /v1/health"
fi

# ---- guarded server: auth, CORS, --max-concurrent 1, client closing mid-stream ----
KEY="s3cret-key"
if start_server guarded "$SLOW" --api-key "$KEY" --cors --max-concurrent 1 --threads 1; then
    python3 "$HTTP_DIR/protocol.py" guarded "$PORT" "$KEY" >"$T_TMP/guard.log" 2>&1
    cat "$T_TMP/guard.log"
    T_PASS=$((T_PASS + $(grep -c '^ok - ' "$T_TMP/guard.log")))
    T_FAIL=$((T_FAIL + $(grep -c '^not ok - ' "$T_TMP/guard.log")))
    if grep -q Traceback "$T_TMP/guard.log"; then fail "protocol.py guarded ran to the end" "$(tail -n 5 "$T_TMP/guard.log")"; fi
    run_py ws_guard.log "$HTTP_DIR/ws.py" gguf "$PORT" "$KEY"
    # SIGINT while a stream is running: the stream is ended properly and the server exits 0
    curl -sN -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d '{"prompt":"Once","max_tokens":3000,"temperature":0,"stream":true}' "http://127.0.0.1:$PORT/v1/completions" >"$T_TMP/live" 2>/dev/null &
    CURL=$!
    i=0; while ! grep -q '^data: ' "$T_TMP/live" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -INT "$PID"
    stop_server "$PID"; rc=$RC
    wait "$CURL"
    if [ "$rc" = 0 ]; then pass "SIGINT during a stream: exit 0"; else fail "SIGINT during a stream: exit 0" "exit $rc"; fi
    if [ "$(grep -c '^data: \[DONE\]$' "$T_TMP/live")" = 1 ]; then pass "stream cut by shutdown still ends with one [DONE]"; else fail "stream cut by shutdown still ends with one [DONE]" "$(tail -c 300 "$T_TMP/live")"; fi
else
    fail "guarded server starts"
fi

# ---- continuous batching: concurrent requests decode together, answers as alone ----
if start_server batch "$SLOW" --max-concurrent 32 --threads 2 --ctx 4096; then
    python3 "$HTTP_DIR/protocol.py" batch "$PORT" >"$T_TMP/batch.log" 2>&1
    cat "$T_TMP/batch.log"
    T_PASS=$((T_PASS + $(grep -c '^ok - ' "$T_TMP/batch.log")))
    T_FAIL=$((T_FAIL + $(grep -c '^not ok - ' "$T_TMP/batch.log")))
    if grep -q Traceback "$T_TMP/batch.log"; then fail "protocol.py batch ran to the end" "$(tail -n 5 "$T_TMP/batch.log")"; fi
    # WebSocket /v1/stream (tests/http/ws.py: a stdlib RFC 6455 client)
    run_py ws.log "$HTTP_DIR/ws.py" gguf "$PORT"
    run_py ws_bp.log "$HTTP_DIR/ws.py" backpressure "$PORT" "$PID"
    stop_server "$PID"; [ "$RC" = 0 ] || fail "batch server exit 0" "exit $RC: $(tail -n 3 "$T_TMP/batch.err")"
else
    fail "batch server starts"
fi

# ---- a vindex directory: browse routes answer with the CLI's --json bodies ----
V="$T_TMP/vx"
if "$LARQL" convert gguf-to-vindex "$M" --output "$V" >/dev/null 2>&1; then
    "$LARQL" describe "$V" France --band all --min-score 0 --limit 10 --json >"$T_TMP/cli_describe.json" 2>/dev/null
    "$LARQL" walk "$V" "The capital of France" --top 3 --json >"$T_TMP/cli_walk.json" 2>/dev/null
    if start_server vindex "$V" --threads 1 --max-concurrent 128; then
        python3 "$HTTP_DIR/protocol.py" vindex "$PORT" "$T_TMP/cli_describe.json" "$T_TMP/cli_walk.json" >"$T_TMP/vx.log" 2>&1
        cat "$T_TMP/vx.log"
        T_PASS=$((T_PASS + $(grep -c '^ok - ' "$T_TMP/vx.log")))
        T_FAIL=$((T_FAIL + $(grep -c '^not ok - ' "$T_TMP/vx.log")))
        if grep -q Traceback "$T_TMP/vx.log"; then fail "protocol.py vindex ran to the end" "$(tail -n 5 "$T_TMP/vx.log")"; fi
        run_py ws_vx.log "$HTTP_DIR/ws.py" vindex "$PORT"
        stop_server "$PID"; [ "$RC" = 0 ] || fail "vindex server exit 0" "exit $RC"
    else
        fail "vindex server starts"
    fi
else
    skip "vindex routes" "larql convert gguf-to-vindex failed"
fi

# ---- a slow SSE reader: the stream stops at --max-stream-buffer, memory stays bounded ----
if start_server slowread "$SLOW" --threads 1 --ctx 4096 --max-stream-buffer 65536; then
    EOS=$("$LARQL" info "$SLOW" 2>/dev/null | sed -n 's/.*eos \([0-9]*\), eot \([0-9]*\).*/\1 \2/p')
    case "$SAN$LARQL" in *sanitize*|*asan*|*tsan*) export SLOW_RSS_MARGIN_MB=384 ;; esac
    run_py slowread.log "$HTTP_DIR/slow_reader.py" "$PORT" "$PID" $EOS
    stop_server "$PID"
else
    fail "a server with --max-stream-buffer starts"
fi
check_fails "serve: --max-stream-buffer below 4096" "max-stream-buffer" "$LARQL" serve "$M" --max-stream-buffer 100

# ---- the prompt cache (--cache-ram) on an inference vindex (generation and edits) ----
if "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/vxi" --keep-quant --level inference >/dev/null 2>&1 &&
   start_server pcache "$T_TMP/vxi" --threads 1; then
    run_py prompt_cache.log "$HTTP_DIR/prompt_cache.py" "$PORT"
    stop_server "$PID"
    if start_server nocache "$T_TMP/vxi" --threads 1 --cache-ram 0; then
        curl -s -H 'Content-Type: application/json' -d '{"prompt":"The capital of France is","max_tokens":2}' \
            "http://127.0.0.1:$PORT/v1/completions" >/dev/null
        if curl -s "http://127.0.0.1:$PORT/v1/runtime" | grep -q '"prompt_cache":{"capacity":0,"entries":0,"hits":0,"misses":0'; then
            pass "--cache-ram 0 turns the prompt cache off"
        else
            fail "--cache-ram 0 turns the prompt cache off" "$(curl -s "http://127.0.0.1:$PORT/v1/runtime" | head -c 400)"
        fi
        stop_server "$PID"
    fi
else
    fail "a server on an inference vindex starts for the prompt cache test"
fi
check_fails "serve: --cache-ram must be a number of MiB" "cache-ram" "$LARQL" serve "$M" --cache-ram lots

# ---- lazy weights: up before the model is loaded, loads on first use ----
if start_server lazy "$M" --lazy-weights --threads 1; then
    if curl -s "http://127.0.0.1:$PORT/v1/models" | grep -q '"loaded":false'; then pass "--lazy-weights: not loaded at start"; else fail "--lazy-weights: not loaded at start"; fi
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' -d '{"prompt":"Hi","top":2}' "http://127.0.0.1:$PORT/v1/infer")
    if [ "$code" = 200 ] && curl -s "http://127.0.0.1:$PORT/v1/models" | grep -q '"loaded":true'; then pass "--lazy-weights: loads on first request"; else fail "--lazy-weights: loads on first request" "$code $(cat "$T_TMP/b")"; fi
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' -d '{"prompt":"Hi"}' "http://127.0.0.1:$PORT/v1/completions")
    stop_server "$PID"; [ "$RC" = 0 ] || fail "lazy server exit 0" "exit $RC"
else
    fail "lazy server starts"
fi
if start_server noinfer "$M" --no-infer --threads 1; then
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' -d '{"prompt":"Hi"}' "http://127.0.0.1:$PORT/v1/completions")
    if [ "$code" = 503 ] && grep -q "inference disabled" "$T_TMP/b"; then pass "--no-infer: generation -> 503"; else fail "--no-infer: generation -> 503" "$code $(cat "$T_TMP/b")"; fi
    code=$(curl -s -o "$T_TMP/b" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/token/encode?text=hi")
    if [ "$code" = 200 ]; then pass "--no-infer: tokenizer routes still work"; else fail "--no-infer: tokenizer routes still work" "$code"; fi
    stop_server "$PID"
fi
done_tests
