#!/bin/sh
# `make tsan`: the threaded tests under ThreadSanitizer, from the build in $BUILD (build-tsan):
# the thread pool, the scheduler (concurrent generation, batched decode, cancel), the forward
# pass and the tokenizer and vindex builder (which run on the pool), then the server with
# concurrent streams, WebSocket sessions and inserts (tests/cli/soak.sh for TSAN_SOAK_SECONDS,
# default 20). A race report stops the process with status 66 (halt_on_error), which fails
# the test it was in. Suppressions (tests/tsan.supp) each carry the reason they are not a bug.
BUILD=${BUILD:-build-tsan}
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp $TSAN_OPTIONS"
failed=0
for t in $TSAN_TESTS; do
    log="$BUILD/tsan-$(basename "$t").log"
    "$BUILD/$t" >"$log" 2>&1; rc=$?
    totals=$(grep '^# totals' "$log" | tail -n 1)
    if [ $rc -eq 0 ]; then echo "tsan $t: clean ($totals)"; else
        echo "tsan $t: FAILED (exit $rc)"; grep -A30 'WARNING: ThreadSanitizer' "$log" | head -n 60; failed=$((failed + 1)); fi
done
log="$BUILD/tsan-soak.log"
LARQL="$BUILD/larql" SOAK_SECONDS=${TSAN_SOAK_SECONDS:-20} SOAK_CLIENTS=4 TMPDIR=${TMPDIR:-/tmp} sh tests/cli/soak.sh >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ]; then echo "tsan server soak: clean ($(grep '^# totals' "$log"); $(grep '^# soak:' "$log" | sed 's/^# //'))"; else
    echo "tsan server soak: FAILED (exit $rc)"; grep -v '^ok' "$log" | head -n 80; failed=$((failed + 1)); fi
[ $failed -eq 0 ]
