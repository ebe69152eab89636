#!/bin/sh
# `larql run --lm-head exact|bounded`: the bounded lm_head (an int8 copy scores the vocabulary,
# only the rows that can be chosen are computed exactly) must give the exact model's tokens.
#   - greedy, 20 prompts x 64 tokens, on the trained model and on a random fixture: the ids
#     printed by --ids-out are equal, and the bounded runs report their rows per token;
#   - seeded top-k sampling: equal ids;
#   - a bad --lm-head value is refused; LQ_LM_HEAD=exact turns the default off.
. "$(dirname "$0")/lib.inc"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRAINED="$ROOT/models/tinystories-ternary.gguf"
FIX="$T_TMP/demo.gguf"
"$LARQL" make-model --preset demo --out "$FIX" >/dev/null 2>&1 || fail "make-model demo"

# compare NAME MODEL ARGS...: 20 prompts, exact vs bounded, the ids equal
compare() {
    name=$1; model=$2; shift 2
    bad=0; rows=""
    for i in $(seq 1 20); do
        ids="1,$((i * 7 % 250 + 3)),$((i * 13 % 250 + 2)),$((i % 9 + 40))"
        "$LARQL" run "$model" --ids "$ids" -n 64 --ignore-eos --ids-out --threads 2 --lm-head exact "$@" \
            >"$T_TMP/e.out" 2>"$T_TMP/e.err" || bad=1
        "$LARQL" run "$model" --ids "$ids" -n 64 --ignore-eos --ids-out --threads 2 --lm-head bounded "$@" \
            >"$T_TMP/b.out" 2>"$T_TMP/b.err" || bad=1
        if ! cmp -s "$T_TMP/e.out" "$T_TMP/b.out" || [ "$(tr ',' '\n' <"$T_TMP/e.out" | grep -c .)" -ne 64 ]; then
            bad=1
            echo "#   prompt $ids: $(head -c 200 "$T_TMP/e.out") vs $(head -c 200 "$T_TMP/b.out")"
        fi
        rows=$(grep 'lm_head bounded:' "$T_TMP/b.err" | sed 's/lm_head bounded: \([0-9.]*\).*/\1/')
        [ -n "$rows" ] || { bad=1; echo "#   no bounded report: $(head -c 300 "$T_TMP/b.err")"; }
    done
    if [ $bad -eq 0 ]; then pass "$name: 20 prompts x 64 tokens equal (last: $rows rows exact per token)"
    else fail "$name: exact and bounded give the same tokens"; fi
}

compare "trained greedy" "$TRAINED" --temp 0
compare "fixture greedy" "$FIX" --temp 0
compare "trained top-k 40 seeded" "$TRAINED" --temp 0.8 --top-k 40 --seed 7

check_fails "--lm-head nonsense is refused" "expected exact, bounded" \
    "$LARQL" run "$TRAINED" --ids 1,2 -n 2 --lm-head nonsense
LQ_LM_HEAD=exact "$LARQL" run "$TRAINED" --ids 1,2,3 -n 8 --temp 0 >"$T_TMP/x.out" 2>"$T_TMP/x.err"
if grep -q 'lm_head bounded' "$T_TMP/x.err"; then fail "LQ_LM_HEAD=exact: no bounded head" "$(cat "$T_TMP/x.err")"
else pass "LQ_LM_HEAD=exact: no bounded head"; fi
done_tests
