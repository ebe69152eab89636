#!/bin/sh
# The built-in web page in a real browser: tests/web/browser/browser.mjs drives the system's
# Chromium (Debian's `chromium`, headless) with puppeteer-core, pinned by
# tests/web/browser/package-lock.json, against real servers on a planted-knowledge vindex:
# /?describe=France shows Paris first, the walk heat map has one row per layer, infer compare
# shows both halves side by side, the API key is required and used, a hostile entity name
# renders as text (its onerror never runs, no CSP violation), the chat streams a reply and
# Stop makes the server cancel it; and round 2 (issue 30): every view at 1280 and 390 px without
# sideways scroll and without a serious or critical axe-core violation (pinned with
# puppeteer-core), keyboard-only paths, the URL as the page's state, the chat's Markdown,
# probabilities and conversations, describe's click-through/relations/noise floor, the edits
# view and the exports. Each test leaves screenshots in build/web-shots/.
# Skipped when node, Chromium (LARQL_CHROMIUM or `chromium` on PATH) or the npm packages
# (`cd tests/web/browser && npm ci`) are missing.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
BROWSER_DIR="$(cd "$(dirname "$0")/../web/browser" && pwd)"
CHROMIUM=${LARQL_CHROMIUM:-$(command -v chromium || command -v chromium-browser)}

if ! command -v node >/dev/null; then
    skip "web page in a real browser" "node is not installed"; done_tests; exit 0
fi
if [ -z "$CHROMIUM" ] || [ ! -x "$CHROMIUM" ]; then
    skip "web page in a real browser" "chromium is not installed (apt-get install chromium)"; done_tests; exit 0
fi
if [ ! -f "$BROWSER_DIR/node_modules/puppeteer-core/package.json" ] || [ ! -f "$BROWSER_DIR/node_modules/axe-core/axe.min.js" ]; then
    skip "web page in a real browser" "run 'cd tests/web/browser && npm ci' to install the pinned puppeteer-core and axe-core"
    done_tests; exit 0
fi
if ! command -v curl >/dev/null; then
    skip "web page in a real browser" "curl is missing"; done_tests; exit 0
fi

M="$T_TMP/m.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset demo --layers 4 --seed 3 --plant 'France>Paris@2:17' \
    --plant 'Germany>Berlin@2:100' >/dev/null 2>&1 || { fail "make-model --plant"; done_tests; exit 1; }
check "convert inference vindex" "$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference
# 8 layers: layer bands and relation clusters
"$LARQL" make-model --out "$T_TMP/m8.gguf" --preset demo --layers 8 --seed 3 --plant 'France>Paris@4:17' >/dev/null 2>&1 ||
    fail "make-model --layers 8"
check "convert 8-layer vindex" "$LARQL" convert gguf-to-vindex "$T_TMP/m8.gguf" --output "$T_TMP/v8" --keep-quant --level inference
# a slower model, so that a stream lasts long enough to be stopped
"$LARQL" make-model --out "$T_TMP/slow.gguf" --dim 1024 --ffn 2816 --layers 8 --ctx 4096 --vocab 512 >/dev/null 2>&1 ||
    fail "make-model (slow)"

KEY="k-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
start_server open "$V" --threads 1 && OPEN="http://127.0.0.1:$PORT" || fail "server starts"
start_server guarded "$V" --threads 1 --api-key "$KEY" && GUARDED="http://127.0.0.1:$PORT" || fail "guarded server starts"
start_server slow "$T_TMP/slow.gguf" --threads 1 && SLOW="http://127.0.0.1:$PORT" || fail "slow server starts"
start_server bands "$T_TMP/v8" --threads 1 && BANDS="http://127.0.0.1:$PORT" || fail "8-layer server starts"
if [ -z "$OPEN" ] || [ -z "$GUARDED" ] || [ -z "$SLOW" ] || [ -z "$BANDS" ]; then done_tests; exit 1; fi

# node's TAP output ("# pass N" / "# fail N") added to this script's counts
log="$T_TMP/browser.log"
LARQL_CHROMIUM="$CHROMIUM" LARQL_WEB_OPEN="$OPEN" LARQL_WEB_GUARDED="$GUARDED" LARQL_WEB_KEY="$KEY" \
    LARQL_WEB_SLOW="$SLOW" LARQL_WEB_BANDS="$BANDS" LARQL_WEB_SHOTS="$PWD/${BUILD:-build}/web-shots" LARQL_WEB_TMP="$T_TMP" \
    node --test --test-reporter=tap "$BROWSER_DIR/browser.mjs" >"$log" 2>&1
rc=$?
grep -v '^ *ok \|^ *---\|^ *\.\.\.\|duration_ms\|^ *1\.\.\|^TAP version\|^ *# Subtest' "$log"
p=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$log" | tail -n 1)
f=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$log" | tail -n 1)
if [ -z "$p" ]; then
    fail "node browser.mjs ran to the end" "exit $rc: $(tail -n 5 "$log")"
else
    T_PASS=$((T_PASS + p)); T_FAIL=$((T_FAIL + f))
    [ "$rc" = 0 ] || [ "$f" != 0 ] || fail "node browser.mjs exited $rc"
fi
done_tests
