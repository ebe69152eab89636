#!/bin/sh
# LARQL's own server tests, as request sites (tests/data/larql_server/sites.jsonl: each
# request of crates/larql-server/tests with the status LARQL expects), sent to our real
# `larql serve` on 127.0.0.1 over the trained model's vindex, each under the setup LARQL's
# test built (inference off, an API key, --cache-ttl, --dir with several model ids ...) by
# tests/cli/py/larql_server_sites.py. Counts agree / disagree / not applicable (each with its
# reason). Goal (issue 28): >= 90% of the applicable sites answer LARQL's status, no crash.
. "$(dirname "$0")/lib.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac
D=$(cd "$(dirname "$0")/../.." && pwd)
trained_vindex "LARQL's server request sites"
if python3 "$D/tests/cli/py/larql_server_sites.py" "$LARQL" "$V" "$M" "$D/tests/data/larql_server/sites.jsonl" \
    --min-agree 90 >"$T_TMP/c" 2>&1; then
    pass "LARQL's server request sites: no crash, >= 90% answer LARQL's status"
else
    fail "LARQL's server request sites: no crash, >= 90% answer LARQL's status" "$(tail -c 800 "$T_TMP/c")"
fi
grep -v '^n/a' "$T_TMP/c" | sed 's/^/# /'
done_tests
