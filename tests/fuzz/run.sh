#!/bin/sh
# `make fuzz`: runs every libFuzzer target built in $BUILD/tests/fuzz for $FUZZ_SECONDS
# each, from its seeds in tests/fuzz/corpus/<target>/ plus the malformed GGUF corpus, and
# prints one line per target (runs, speed, inputs found, result). Inputs the fuzzer finds
# go to $BUILD/fuzz/<target>/corpus (never into the repository); a crash is saved as
# $BUILD/fuzz/<target>/crash-* and fails the run.
BUILD=${BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
failed=0
targets=$(find "$BUILD/tests/fuzz" -type f -perm -u+x -name 'fuzz_*' 2>/dev/null | sort)
if [ -z "$targets" ]; then
    echo "no fuzz targets in $BUILD/tests/fuzz (run make fuzz)"; exit 1
fi
for bin in $targets; do
    name=$(basename "$bin")
    out="$BUILD/fuzz/$name"
    mkdir -p "$out/corpus"
    # the first directory receives new inputs; the others are read-only seeds (the malformed
    # GGUF corpus seeds the targets that read GGUF files)
    extra=""
    case $name in fuzz_gguf|fuzz_model) extra=tests/data/bad_gguf ;; esac
    # The server targets: libFuzzer's per-input leak check runs while the server's own
    # threads are still tearing the connection down (a response freed just after the client
    # saw EOF is reported as leaked). Leaks there are checked instead at exit of the ASan
    # replay (make asan runs build-asan/tests/fuzz/test_fuzz_http and _ws: every input
    # replayed, LeakSanitizer over the whole process) and by the soak's RSS bound.
    case $name in fuzz_http|fuzz_http_raw|fuzz_ws) extra="$extra -detect_leaks=0" ;; esac
    # a run can be limited to some targets: make fuzz FUZZ_TARGETS="fuzz_http fuzz_ws"
    if [ -n "$FUZZ_TARGETS" ] && ! echo " $FUZZ_TARGETS " | grep -q " $name "; then continue; fi
    "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$out/" "$out/corpus" "tests/fuzz/corpus/$name" $extra \
        >"$out/log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/log")
    found=$(sed -n 's/^stat::new_units_added: *//p' "$out/log")
    crashes=$(find "$out" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | wc -l)
    if [ "$rc" -eq 0 ] && [ -n "$runs" ]; then
        result="clean"
    else
        result="FAILED (exit $rc; $crashes saved input(s) in $out/)"
        failed=$((failed + 1))
    fi
    printf '%-16s %10s runs in %s s (%s/s), %s new inputs, corpus %s files: %s\n' "$name" "${runs:-?}" \
        "$FUZZ_SECONDS" "${rate:-?}" "${found:-?}" "$(find "$out/corpus" -type f | wc -l)" "$result"
    if [ "$result" != clean ]; then
        grep -E 'ERROR|SUMMARY|runtime error|#0 |#1 |#2 |#3 ' "$out/log" | head -n 20 | sed 's/^/    /'
    fi
done
[ "$failed" -eq 0 ]
