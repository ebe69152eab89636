#!/bin/sh
# A streamed completion whose prefill outlasts --request-timeout still arrives: the server
# keeps the idle connection alive with SSE comment lines (tests/http/keepalive.py). The model:
# a generated 2B-4T-wide BitNet file of 4 layers and a 4,096-token vocabulary (90 MB, in the
# test's temp dir), one thread, so that a 2,000-token prompt takes seconds to prefill.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
M="$T_TMP/wide.gguf"
if "$LARQL" make-model --out "$M" --preset 2b --layers 4 --vocab 4096 --ctx 4096 >/dev/null 2>&1; then
    pass "make-model writes the 4-layer 2B-wide model"
    if start_server ka "$M" --threads 1 --request-timeout 1; then
        run_py keepalive.log "$HTTP_DIR/keepalive.py" "$PORT" 1
        kill "$PID" 2>/dev/null
    else
        fail "serve --request-timeout 1 starts" "$(cat "$T_TMP/ka.err")"
    fi
else
    fail "make-model writes the 4-layer 2B-wide model"
fi
done_tests
