#!/bin/sh
# Runs every test binary under $BUILD/tests and every tests/cli/*.sh script, then prints
# the closing line "N passed, N failed, N skipped" that CI reads.
BUILD=${BUILD:-build}
export LARQL="$PWD/$BUILD/larql"
passed=0; failed=0; skipped=0; failing=""
tmp=$(mktemp -d "${TMPDIR:-/tmp}/larql-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

tally() { # name, logfile, exit status
    p=$(sed -n 's/^# totals: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1/p' "$2" | tail -n 1)
    f=$(sed -n 's/^# totals: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\2/p' "$2" | tail -n 1)
    s=$(sed -n 's/^# totals: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\3/p' "$2" | tail -n 1)
    if [ -z "$p" ]; then  # crashed before its summary: count the binary as one failure
        p=0; f=1; s=0
    elif [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$f" -ne 0 ]; then failing="$failing $1"; fi
    printf '%-44s %4s passed %3s failed %3s skipped\n' "$1" "$p" "$f" "$s"
}

for t in $(find "$BUILD/tests" -type f -perm -u+x -name 'test_*' 2>/dev/null | sort); do
    name=${t#"$BUILD"/tests/}
    log="$tmp/$(echo "$name" | tr / _).log"
    "$t" >"$log" 2>&1; rc=$?
    tally "$name" "$log" "$rc"
    if [ -n "$VERBOSE" ] || grep -q '^not ok' "$log" || [ "$rc" -gt 1 ]; then sed 's/^/    /' "$log"; fi
done
# the one-token I2_S tile height is chosen per CPU (lq_i2s_decode_rows): every choice is
# checked against the scalar reference, whichever this machine picks by default
if [ -x "$BUILD/tests/unit/test_kernels" ]; then
    for rows in 1 2 3 4; do
        log="$tmp/kernels_rows$rows.log"
        LQ_I2S_DECODE_ROWS=$rows "$BUILD/tests/unit/test_kernels" >"$log" 2>&1; rc=$?
        tally "unit/test_kernels (decode rows $rows)" "$log" "$rc"
        if grep -q '^not ok' "$log" || [ "$rc" -gt 1 ]; then sed 's/^/    /' "$log"; fi
    done
fi
# An AVX2-only CPU (most desktops) runs the AVX2 kernel set. Where the best set is AVX-512, the
# tests whose results must not depend on a batch's shape or on how rows are split (the
# bounded lm_head's rescored rows, batched decode, the prefilter's re-scored gate rows), and
# the conformance checks, run again on the AVX2 set.
if grep -q ' avx2' /proc/cpuinfo 2>/dev/null && grep -q ' avx512f' /proc/cpuinfo 2>/dev/null; then
    for n in unit/test_forward unit/test_lm_bound unit/test_hidden unit/test_ffn_remote unit/test_scheduler \
             unit/test_vindex unit/test_vindex_build unit/test_vindex_infer unit/test_generate \
             conformance/test_bitnet_conformance conformance/test_llama_conformance; do
        t="$BUILD/tests/$n"
        [ -x "$t" ] || continue
        log="$tmp/avx2_$(echo "$n" | tr / _).log"
        LQ_KERNELS=avx2 "$t" >"$log" 2>&1; rc=$?
        tally "$n (avx2 set)" "$log" "$rc"
        if grep -q '^not ok' "$log" || [ "$rc" -gt 1 ]; then sed 's/^/    /' "$log"; fi
    done
fi
for t in $(ls tests/cli/*.sh 2>/dev/null | sort); do
    log="$tmp/$(basename "$t").log"
    sh "$t" >"$log" 2>&1; rc=$?
    tally "$t" "$log" "$rc"
    if [ -n "$VERBOSE" ] || grep -q '^not ok' "$log" || [ "$rc" -gt 1 ]; then sed 's/^/    /' "$log"; fi
done
[ -n "$failing" ] && echo "failing:$failing"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
