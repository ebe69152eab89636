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

ports=""
start_server cached "$V" --threads 1 --cache-ttl 60 && ports="$ports cached=$PORT" || fail "server --cache-ttl 60 starts"
start_server plain "$V" --threads 1 && ports="$ports plain=$PORT" || fail "server without --cache-ttl starts"
start_server dense "$D" --threads 1 && ports="$ports dense=$PORT" || fail "dense-only server starts"
check_fails "--cache-ttl must be a number" "cache-ttl" "$LARQL" serve "$V" --cache-ttl soon

run_py py.log "$HTTP_DIR/parity.py" "$T_TMP" $ports
done_tests
