#!/bin/sh
# The built-in web page (web/, served at / by larql serve): tests/http/web.py checks what a
# browser is sent (assets, Content-Type, CSP, same-origin only, ETag, the 404s, --api-key);
# node --test runs the page's DOM-free modules (tests/web/*.test.mjs); tests/web/e2e.mjs
# loads the real page (web/index.html and app.js, in a small DOM without a markup parser)
# against a real server on a planted-knowledge vindex and drives it as a user would: chat
# streams and stop cancels, /?describe=France shows Paris first, the walk heat map has one
# row per layer, infer compare shows both halves, the API key is asked for and used, a
# hostile entity name renders as text; each check leaves the page it ended on in
# build/web-e2e/NAME.html (static HTML) for a person to look at. The node parts are skipped
# when node is missing.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
WEB_DIR="$(cd "$(dirname "$0")/../../web" && pwd)"
WEB_TESTS="$(cd "$(dirname "$0")/../web" && pwd)"

if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "web page tests" "curl or python3 missing"; done_tests; exit 0
fi

# node TAP output ("# pass N" / "# fail N") added to this script's counts
run_node() {
    log=$1; shift
    node "$@" >"$T_TMP/$log" 2>&1; rc=$?
    grep -v '^ *ok \|^ *---\|^ *\.\.\.\|duration_ms\|^ *1\.\.\|^TAP version\|^ *# Subtest' "$T_TMP/$log"
    p=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$T_TMP/$log" | tail -n 1)
    f=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$T_TMP/$log" | tail -n 1)
    if [ -z "$p" ]; then fail "node $* ran to the end" "exit $rc: $(tail -n 5 "$T_TMP/$log")"; return; fi
    T_PASS=$((T_PASS + p)); T_FAIL=$((T_FAIL + f))
    [ "$rc" = 0 ] || [ "$f" != 0 ] || fail "node $* exited $rc"
}

M="$T_TMP/m.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset demo --layers 4 --seed 3 --plant 'France>Paris@2:17' \
    --plant 'Germany>Berlin@2:100' >/dev/null 2>&1 || { fail "make-model --plant"; done_tests; exit 1; }
check "convert inference vindex" "$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference

if start_server open "$V" --threads 1; then
    run_py open.log "$HTTP_DIR/web.py" open "$PORT" "$WEB_DIR"
    OPEN_PORT=$PORT
else
    fail "server starts"
fi
KEY="k-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
if start_server guarded "$V" --threads 1 --api-key "$KEY"; then
    run_py guarded.log "$HTTP_DIR/web.py" guarded "$PORT" "$WEB_DIR" "$KEY"
    GUARD_PORT=$PORT
else
    fail "guarded server starts"
fi

if ! command -v node >/dev/null; then
    skip "web page logic (node --test)" "node is not installed"
    skip "web page end to end (node)" "node is not installed"
else
    run_node unit.log --test --test-reporter=tap "$WEB_TESTS"/*.test.mjs
    if [ -n "$OPEN_PORT" ] && [ -n "$GUARD_PORT" ]; then
        # a slower model, so that a stream lasts long enough to be stopped
        "$LARQL" make-model --out "$T_TMP/slow.gguf" --dim 512 --ffn 1536 --layers 8 --ctx 4096 --vocab 512 >/dev/null 2>&1
        LARQL_WEB_OPEN="http://127.0.0.1:$OPEN_PORT" LARQL_WEB_GUARDED="http://127.0.0.1:$GUARD_PORT" \
            LARQL_WEB_KEY="$KEY" LARQL_WEB_SLOW="$T_TMP/slow.gguf" LARQL="$LARQL" \
            LARQL_WEB_SNAPSHOTS="$PWD/${BUILD:-build}/web-e2e" \
            run_node e2e.log --test --test-reporter=tap "$WEB_TESTS/e2e.mjs"
    fi
fi
done_tests
