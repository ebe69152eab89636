#!/bin/sh
# The larql model commands through the real binary: make-model, info, logits, run, chat,
# and their bad-input errors. Conformance comparisons skip when ../shared is absent.
. "$(dirname "$0")/lib.inc"

M="$T_TMP/tiny.gguf"
check "make-model tiny" "$LARQL" make-model --out "$M" --preset tiny --seed 7
check "make-model is deterministic" sh -c "'$LARQL' make-model --out '$T_TMP/tiny2.gguf' --preset tiny --seed 7 2>/dev/null && cmp -s '$M' '$T_TMP/tiny2.gguf'"
"$LARQL" make-model --out "$T_TMP/tiny3.gguf" --preset tiny --seed 8 2>/dev/null
if cmp -s "$M" "$T_TMP/tiny3.gguf"; then fail "different seeds give different models"; else pass "different seeds give different models"; fi
check_fails "make-model rejects dim not multiple of 128" "multiple of 128" "$LARQL" make-model --out "$T_TMP/x.gguf" --dim 100
check_fails "make-model rejects unknown preset" "unknown preset" "$LARQL" make-model --out "$T_TMP/x.gguf" --preset huge
check_fails "make-model needs --out" "--out" "$LARQL" make-model

check "info" "$LARQL" info "$M"
if grep -q "bitnet-b1.58" "$T_TMP/out" && grep -q "I2_S x14" "$T_TMP/out"; then pass "info shows arch and I2_S tensors"; else fail "info shows arch and I2_S tensors" "$(cat "$T_TMP/out")"; fi
check "info --weights copy --kv f16" "$LARQL" info "$M" --weights copy --kv f16
if grep -q "private copy in 2 MB pages" "$T_TMP/out" && grep -q "(f16)" "$T_TMP/out"; then pass "info says how weights and KV are held"; else fail "info says how weights and KV are held" "$(cat "$T_TMP/out")"; fi
check "info --kv q8" "$LARQL" info "$M" --kv q8
if grep -q "(q8)" "$T_TMP/out"; then pass "info says the KV cache is q8"; else fail "info says the KV cache is q8" "$(cat "$T_TMP/out")"; fi
"$LARQL" make-model --out "$T_TMP/hd16.gguf" --dim 128 --heads 8 --kv-heads 4 >/dev/null 2>&1
check_fails "--kv q8 refused for a head dimension of 16, naming it" "multiple of 32 (this model: 16)" \
    "$LARQL" logits "$T_TMP/hd16.gguf" --ids 1,2 --kv q8
check_fails "--kv with an unknown type" "expected f32, f16 or q8" "$LARQL" logits "$M" --ids 1,2 --kv q4
check "info --weights mmap" "$LARQL" info "$M" --weights mmap
if grep -q "read-only mmap, shared" "$T_TMP/out" && grep -q "(f32)" "$T_TMP/out"; then pass "info --weights mmap says shared"; else fail "info --weights mmap says shared" "$(cat "$T_TMP/out")"; fi
check "info --json" "$LARQL" info "$M" --json
if python3 -c "import json,sys; d=json.load(open('$T_TMP/out')); assert d['n_layer']==2 and d['n_embd']==128 and d['n_vocab']==320, d" 2>"$T_TMP/err"; then pass "info --json fields"; else fail "info --json fields" "$(cat "$T_TMP/err")"; fi

check "logits on ids" "$LARQL" logits "$M" --ids 1,2,3 --top 5
if [ "$(wc -l < "$T_TMP/out")" -eq 3 ] && python3 -c "
import json
for i, l in enumerate(open('$T_TMP/out')):
    d = json.loads(l); assert d['pos'] == i and len(d['top']) == 5
    v = [x[1] for x in d['top']]; assert v == sorted(v, reverse=True); assert d['lse'] >= v[0]
" 2>"$T_TMP/err"; then pass "logits JSON lines well formed"; else fail "logits JSON lines well formed" "$(cat "$T_TMP/err")"; fi
"$LARQL" logits "$M" --ids 1,2,3,4 --top 8 --weights copy >"$T_TMP/wc" 2>&1
"$LARQL" logits "$M" --ids 1,2,3,4 --top 8 --weights mmap >"$T_TMP/wm" 2>&1
if [ -s "$T_TMP/wc" ] && cmp -s "$T_TMP/wc" "$T_TMP/wm"; then pass "--weights copy and mmap give identical logits"; else fail "--weights copy and mmap give identical logits" "$(head -c 300 "$T_TMP/wc")"; fi
check_fails "bad --weights" "--weights" "$LARQL" logits "$M" --ids 1 --weights huge
check "logits on prompt" "$LARQL" logits "$M" --prompt "The capital of France" --top 3

check "run --ignore-eos parses" "$LARQL" run "$M" --ids 5 -n 2 --temp 0 --ignore-eos
check "run greedy --ids-out" "$LARQL" run "$M" --ids 5,6,7 -n 8 --temp 0 --ids-out
ids1=$(cat "$T_TMP/out")
if grep -q "prefill .* tok/s, decode .* tok/s" "$T_TMP/err"; then pass "run prints prefill and decode speed"; else fail "run prints prefill and decode speed" "$(cat "$T_TMP/err")"; fi
"$LARQL" run "$M" --ids 5,6,7 -n 8 --temp 0 --ids-out --threads 1 >"$T_TMP/out2" 2>/dev/null
if [ "$ids1" = "$(cat "$T_TMP/out2")" ] && [ "$(echo "$ids1" | tr ',' '\n' | wc -l)" -eq 8 ]; then pass "greedy run: 8 ids, same with 1 thread"; else fail "greedy run: 8 ids, same with 1 thread" "$ids1 vs $(cat "$T_TMP/out2")"; fi
"$LARQL" run "$M" --prompt "Hello" -n 6 --temp 0.9 --seed 3 --ids-out >"$T_TMP/s1" 2>/dev/null
"$LARQL" run "$M" --prompt "Hello" -n 6 --temp 0.9 --seed 3 --ids-out >"$T_TMP/s2" 2>/dev/null
if [ -s "$T_TMP/s1" ] && cmp -s "$T_TMP/s1" "$T_TMP/s2"; then pass "seeded sampling is reproducible"; else fail "seeded sampling is reproducible"; fi
check "run text prompt streams text" "$LARQL" run "$M" --prompt "The capital of France is" -n 12 --temp 0
check "run --chat" "$LARQL" run "$M" --prompt "Hi" --chat -n 4 --temp 0
printf 'hello\n/reset\nagain\n' > "$T_TMP/chat.in"
check "chat reads stdin turns" sh -c "'$LARQL' chat '$M' -n 4 --temp 0 < '$T_TMP/chat.in'"

# bad input: one clear error line, non-zero exit, no crash
check_fails "missing model file" "cannot open" "$LARQL" run "$T_TMP/nope.gguf" --prompt hi
printf 'GGUF\003\000\000\000' > "$T_TMP/trunc.gguf"
check_fails "truncated GGUF" "larql run:" "$LARQL" run "$T_TMP/trunc.gguf" --prompt hi
check_fails "token id out of range" "out of range\|vocab" "$LARQL" logits "$M" --ids 1,99999
check_fails "bad id list" "--ids" "$LARQL" logits "$M" --ids 1,x,3
check_fails "empty prompt" "empty prompt" "$LARQL" run "$M" --prompt ""
check_fails "context overflow" "context" "$LARQL" run "$M" --ids 1,2,3,4,5,6,7,8,9,10 --ctx 4 -n 2
check_fails "invalid temperature" "temperature" "$LARQL" run "$M" --prompt hi --temp -1
check_fails "invalid top-p" "top_p" "$LARQL" run "$M" --prompt hi --top-p 1.5
check_fails "unknown option" "unknown option" "$LARQL" run "$M" --prompt hi --bogus
check_fails "bad --act" "--act" "$LARQL" logits "$M" --ids 1 --act half
"$LARQL" make-model --out "$T_TMP/llama.gguf" --preset tiny --arch llama 2>/dev/null
check "llama-arch fixture runs" "$LARQL" run "$T_TMP/llama.gguf" --ids 1,2 -n 4 --temp 0 --ids-out

# conformance through the CLI: logits vs the reference JSON and greedy continuation
C=$(conformance_dir)
if [ -n "$C" ]; then
    for name in bitnet-tiny-a bitnet-tiny-b; do
        for mode in ms float; do
            ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$C/bitnet/$name.expected.json'))['ids'])))")
            "$LARQL" logits "$C/bitnet/$name.gguf" --ids "$ids" --top 10 --act $mode >"$T_TMP/lg" 2>"$T_TMP/err"
            if python3 - "$C/bitnet/$name.expected.json" "$T_TMP/lg" $mode >"$T_TMP/cmp" 2>&1 <<'PY'
import json, sys
exp = json.load(open(sys.argv[1]))['modes'][sys.argv[3]]['positions']
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(got) == len(exp), (len(got), len(exp))
worst = 0.0
for e, g in zip(exp, got):
    assert [x[0] for x in e['top']] == [x[0] for x in g['top']] or max(abs(a[1]-b[1]) for a, b in zip(e['top'], g['top'])) < 1e-3, (e['top'], g['top'])
    worst = max(worst, abs(e['lse'] - g['lse']), *(abs(a[1]-b[1]) for a, b in zip(e['top'], g['top'])))
assert worst < 1e-3, worst
print('max diff', worst)
PY
            then pass "logits $name $mode within 1e-3 ($(cat "$T_TMP/cmp"))"; else fail "logits $name $mode within 1e-3" "$(tail -c 400 "$T_TMP/cmp")"; fi
            want=$(python3 -c "import json; print(','.join(map(str, json.load(open('$C/bitnet/$name.expected.json'))['modes']['$mode']['greedy'])))")
            got=$("$LARQL" run "$C/bitnet/$name.gguf" --ids "$ids" -n 16 --temp 0 --ids-out --ignore-eos --act $mode 2>/dev/null)
            if [ "$want" = "$got" ]; then pass "greedy $name $mode"; else fail "greedy $name $mode" "want $want got $got"; fi
        done
    done
    want=$(sed -n 's/^\[A\] next ids for pos 0..63 (64 ids): //p' "$C/llama/stories260K_golden.txt" | tr ' ' ',')
    got=$("$LARQL" run "$C/llama/stories260K.gguf" --ids 1 -n 64 --temp 0 --ids-out 2>/dev/null)
    if [ "$want" = "$got" ]; then pass "stories260K greedy [A] via CLI"; else fail "stories260K greedy [A] via CLI" "want $want got $got"; fi
else
    skip "CLI conformance" "../shared/conformance absent"
fi
done_tests
