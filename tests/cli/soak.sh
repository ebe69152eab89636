#!/bin/sh
# Soak (tests/http/soak.py): larql serve on a generated model (a vindex with its weights, so
# browse, inference and editing routes all run) under mixed loopback traffic for
# SOAK_SECONDS (default 20 inside make test; `make soak SOAK_SECONDS=N` for a long run),
# judged on crashes, 5xx, wrong answers, RSS growth and leaked descriptors. The server is
# then stopped with SIGTERM and must exit 0.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
SOAK_SECONDS=${SOAK_SECONDS:-20}
SOAK_CLIENTS=${SOAK_CLIENTS:-4}
# under a sanitizer (make asan / make tsan set SAN or use build-tsan) freed memory is held
# back by design: the RSS margin becomes ASan's quarantine size plus room
case "$SAN$LARQL" in *sanitize*|*tsan*|*asan*) export SOAK_RSS_MARGIN_MB=${SOAK_RSS_MARGIN_MB:-384} ;; esac
KEY=soak-key
M="$T_TMP/m.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset tiny --seed 11 >/dev/null 2>&1 &&
    "$LARQL" convert gguf-to-vindex "$M" --output "$V" --level inference --keep-quant >/dev/null 2>&1 ||
    { fail "soak fixture (make-model, convert)"; done_tests; exit 1; }
# the prompt cache holds finished generations' KV up to --cache-ram: a small budget fills during
# the warm-up, so growth after it would be a leak, not the cache filling (1 GiB takes minutes)
if start_server soak "$V" --api-key "$KEY" --max-concurrent 6 --max-body 262144 --threads 1 --ctx 256 --max-sessions 8 \
        --cache-ram 2; then
    run_py soak.log "$HTTP_DIR/soak.py" "$PORT" "$KEY" "$PID" "$SOAK_SECONDS" "$SOAK_CLIENTS"
    kill -TERM "$PID"; wait "$PID"; rc=$?
    if [ $rc -eq 0 ]; then pass "SIGTERM after the soak: exit 0"; else fail "SIGTERM after the soak: exit 0" "exit $rc: $(tail -n 5 "$T_TMP/soak.err")"; fi
else
    fail "soak server starts"
fi
done_tests
