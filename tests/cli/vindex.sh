#!/bin/sh
# The vindex commands through the real binary: convert (levels, options and their errors),
# describe/walk/select/relations/nearest/similar/stats/show with --json, bad request values,
# and the malformed-vindex corpus (tests/data/bad_vindex).
. "$(dirname "$0")/lib.inc"

M="$T_TMP/tiny.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset tiny --seed 5 >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }

check "convert browse" "$LARQL" convert gguf-to-vindex "$M" --output "$V"
for f in index.json gate_vectors.bin embeddings.bin down_meta.bin tokenizer.json; do
    if [ -f "$V/$f" ]; then pass "browse vindex has $f"; else fail "browse vindex has $f"; fi
done
if [ ! -e "$V/norms.bin" ] && [ ! -e "$V/bitnet" ]; then pass "browse has no weights"; else fail "browse has no weights"; fi
if ls -a "$T_TMP" | grep -q partial; then fail "no temp dir left behind"; else pass "no temp dir left behind"; fi
check_fails "convert refuses existing output" "already exists" "$LARQL" convert gguf-to-vindex "$M" --output "$V"
check_fails "keep-quant + browse refused" "requires --level inference" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/kq" --keep-quant
check_fails "dense-only without keep-quant refused" "only valid with --keep-quant" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/do" --dense-only
check_fails "convert needs --output" "--output" "$LARQL" convert gguf-to-vindex "$M"
check_fails "convert unknown conversion" "unknown conversion" "$LARQL" convert onnx-to-vindex "$M" --output "$T_TMP/x"
check_fails "convert missing gguf" "nope.gguf" "$LARQL" convert gguf-to-vindex "$T_TMP/nope.gguf" --output "$T_TMP/x"
if [ ! -e "$T_TMP/x" ]; then pass "failed convert leaves no output"; else fail "failed convert leaves no output"; fi

check "convert keep-quant inference f16" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/kq" --keep-quant --level inference --f16
if python3 -c "
import json, os
d = json.load(open('$T_TMP/kq/index.json'))
assert d['dtype'] == 'f16' and d['extract_level'] == 'inference' and d['has_model_weights']
bl = d['bitnet_layout']; t = bl['tensors']
assert len(t) == 14 and [x['name'] for x in t] == sorted(x['name'] for x in t)
assert bl['total_scale_count'] * 4 == os.path.getsize('$T_TMP/kq/bitnet/scales.f32')
for x in t:
    assert os.path.getsize('$T_TMP/kq/bitnet/%s.i2s' % x['name']) == x['rows'] * x['cols'] // 4
m = json.load(open('$T_TMP/kq/weight_manifest.json'))
assert m[-1]['key'] == 'lm_head.weight' and sum(1 for e in m if e['file'] == 'norms.bin') == 2 * 4 + 1
# dense projections in LARQL's order: per layer q,k,v,o; per layer up, down; then norms
L = d['num_layers']
want = ['layers.%d.self_attn.%s_proj.weight' % (l, p) for l in range(L) for p in 'qkvo']
want += ['layers.%d.mlp.%s_proj.weight' % (l, p) for l in range(L) for p in ('up', 'down')]
assert [e['key'] for e in m[:len(want)]] == want, [e['key'] for e in m[:len(want)]]
for f in ('attn_weights.bin', 'up_weights.bin', 'down_weights.bin'):
    es = [e for e in m if e['file'] == f]
    assert all(e['kind'] == 'tensor' and e['length'] == e['shape'][0] * e['shape'][1] * 2 for e in es)
    assert os.path.getsize('$T_TMP/kq/' + f) == sum(e['length'] for e in es) and f in d['checksums']
assert json.load(open('$T_TMP/kq/bitnet_layout.json')) == bl
assert os.path.getsize('$T_TMP/kq/embeddings.bin') == d['vocab_size'] * d['hidden_size'] * 2
" 2>"$T_TMP/err"; then pass "keep-quant layout, manifest, sizes"; else fail "keep-quant layout, manifest, sizes" "$(cat "$T_TMP/err")"; fi
# the keep-quant vindex runs: logits equal the GGUF's, run generates the same tokens
"$LARQL" logits "$M" --ids 1,2,3,4,5,6 --top 5 >"$T_TMP/lg" 2>/dev/null
check "logits from a vindex" "$LARQL" logits "$T_TMP/kq" --ids 1,2,3,4,5,6 --top 5
"$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/kq32" --keep-quant --level inference >/dev/null 2>&1
"$LARQL" logits "$T_TMP/kq32" --ids 1,2,3,4,5,6 --top 5 >"$T_TMP/lv" 2>/dev/null
if cmp -s "$T_TMP/lg" "$T_TMP/lv"; then pass "f32 vindex logits == GGUF logits"; else fail "f32 vindex logits == GGUF logits"; fi
"$LARQL" run "$M" --prompt "the model" -n 6 --temp 0 --ids-out --ignore-eos >"$T_TMP/rg" 2>/dev/null
check "run from a vindex" "$LARQL" run "$T_TMP/kq32" --prompt "the model" -n 6 --temp 0 --ids-out --ignore-eos
if cmp -s "$T_TMP/rg" "$T_TMP/out" && [ -s "$T_TMP/rg" ]; then pass "run: vindex tokens == GGUF tokens"; else fail "run: vindex tokens == GGUF tokens"; fi
check_fails "logits from a browse vindex" "does not contain model weights" "$LARQL" logits "$V" --ids 1,2
# KNN store: INSERT ... MODE KNN from the CLI, saved as knn_store.bin (LARQL layout), loaded back
check "infer --knn-insert --knn-save" "$LARQL" infer "$T_TMP/kq32" "The capital of France is" --json \
    --knn-insert "France:capital:Paris" --knn-save "$T_TMP/knn.bin"
if grep -q '"knn_override":{"token":"Paris"' "$T_TMP/out" && [ "$(head -c 4 "$T_TMP/knn.bin")" = "LKNN" ]; then
    pass "knn insert fires and is saved"; else fail "knn insert fires and is saved" "$(head -c 300 "$T_TMP/out")"; fi
check "infer --knn" "$LARQL" infer "$T_TMP/kq32" "The capital of France is" --json --knn "$T_TMP/knn.bin"
if grep -q '"knn_override":{"token":"Paris"' "$T_TMP/out"; then pass "loaded knn store fires"; else fail "loaded knn store fires"; fi
check_fails "infer --knn missing file" "nope.bin" "$LARQL" infer "$T_TMP/kq32" "Hello" --knn "$T_TMP/nope.bin"
head -c 10 "$T_TMP/knn.bin" >"$T_TMP/knn-trunc.bin"
check_fails "infer --knn truncated file" "knn_store" "$LARQL" infer "$T_TMP/kq32" "Hello" --knn "$T_TMP/knn-trunc.bin"
check_fails "infer --knn-insert malformed" "ENTITY:RELATION:TARGET" "$LARQL" infer "$T_TMP/kq32" "Hello" --knn-insert "France"
# a llama vindex (level inference: dense projections) runs like its GGUF
C=$(conformance_dir)
S="$C/llama/stories260K.gguf"
if [ -n "$C" ] && [ -f "$S" ]; then
    check "convert llama inference" "$LARQL" convert gguf-to-vindex "$S" --output "$T_TMP/st" --level inference
    "$LARQL" logits "$S" --prompt "Once upon a time" --top 5 >"$T_TMP/lg" 2>/dev/null
    "$LARQL" logits "$T_TMP/st" --prompt "Once upon a time" --top 5 >"$T_TMP/lv" 2>/dev/null
    if cmp -s "$T_TMP/lg" "$T_TMP/lv" && [ -s "$T_TMP/lg" ]; then pass "llama vindex logits == GGUF logits"; else fail "llama vindex logits == GGUF logits"; fi
    check "run llama vindex" "$LARQL" run "$T_TMP/st" --prompt "Once upon a time, there was a dog" -n 10 --temp 0 --ids-out
    if grep -q "^395,392,412,444,426,392,412,444,401,396$" "$T_TMP/out"; then pass "llama vindex greedy == llama2.c golden"; else fail "llama vindex greedy == llama2.c golden" "$(cat "$T_TMP/out")"; fi
else
    skip "llama vindex inference" "../shared/conformance absent"
fi
check "convert dense-only" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/do" --keep-quant --dense-only
if [ ! -e "$T_TMP/do/gate_vectors.bin" ] && python3 -c "
import json; d = json.load(open('$T_TMP/do/index.json')); assert d['layers'] == [] and d['down_top_k'] == 0 and d['extract_level'] == 'inference'
"; then pass "dense-only has no gates, empty layers"; else fail "dense-only has no gates, empty layers"; fi
# LARQL answers describe on a dense-only vindex with no edges (no loaded layers), not an error
check "describe on dense-only: no edges" "$LARQL" describe "$T_TMP/do" France --json
if python3 -c "
import json; d = json.load(open('$T_TMP/out')); assert d['entity'] == 'France' and d['edges'] == [], d
"; then pass "describe on dense-only: empty edges"; else fail "describe on dense-only: empty edges" "$(head -c 300 "$T_TMP/out")"; fi
check_fails "walk on dense-only" "dense-only" "$LARQL" walk "$T_TMP/do" France

check "describe --json" "$LARQL" describe "$V" France --band all --min-score -100 --limit 3 --json --verbose
if python3 -c "
import json; d = json.load(open('$T_TMP/out'))
assert set(d) == {'entity', 'model', 'edges', 'latency_ms'} and d['entity'] == 'France' and d['model'] == 'larql-fixture'
assert len(d['edges']) <= 3
g = [e['gate_score'] for e in d['edges']]; assert g == sorted(g, reverse=True)
for e in d['edges']: assert {'target', 'gate_score', 'layer', 'layer_min', 'layer_max', 'count'} <= set(e)
" 2>"$T_TMP/err"; then pass "describe JSON shape"; else fail "describe JSON shape" "$(cat "$T_TMP/err")"; fi
check "describe text" "$LARQL" describe "$V" France
check "walk --json" "$LARQL" walk "$V" "The capital of France" --top 2 --json
if python3 -c "
import json; d = json.load(open('$T_TMP/out')); h = d['hits']
assert set(d) == {'prompt', 'hits', 'latency_ms'} and len(h) <= 4
assert [x['layer'] for x in h] == sorted(x['layer'] for x in h)
" 2>"$T_TMP/err"; then pass "walk JSON shape"; else fail "walk JSON shape" "$(cat "$T_TMP/err")"; fi
check "walk --layers 1-1" "$LARQL" walk "$V" "France" --layers 1-1 --json
if grep -q '"layer":0' "$T_TMP/out"; then fail "walk --layers filters"; else pass "walk --layers filters"; fi
check "select --json" "$LARQL" select "$V" --layer 1 --limit 5 --json
if python3 -c "
import json; d = json.load(open('$T_TMP/out')); e = d['edges']
assert len(e) == 5 and d['total'] == 256 and all(x['layer'] == 1 for x in e)
c = [x['c_score'] for x in e]; assert c == sorted(c, reverse=True)
" 2>"$T_TMP/err"; then pass "select JSON"; else fail "select JSON" "$(cat "$T_TMP/err")"; fi
check "select order-by layer asc" "$LARQL" select "$V" --order-by layer --order asc --limit 3 --json
check "relations" "$LARQL" relations "$V" --json
check "nearest" "$LARQL" nearest "$V" France --layer 1 --top 3 --json
check "similar" "$LARQL" similar "$V" France Germany --json
check "stats" "$LARQL" stats "$V" --json
if python3 -c "
import json; d = json.load(open('$T_TMP/out')); assert d['layers'] == 2 and d['features'] == 512 and d['dtype'] == 'f32' and d['mode'] == 'full'
" 2>"$T_TMP/err"; then pass "stats fields"; else fail "stats fields" "$(cat "$T_TMP/err")"; fi
check "show layers" "$LARQL" show "$V" layers --json
check "show features" "$LARQL" show "$V" features --layer 0 --top 4 --json

# bad request values
check_fails "describe empty entity" "empty entity" "$LARQL" describe "$V" ""
check_fails "describe unknown band" "unknown band" "$LARQL" describe "$V" France --band middle
check_fails "describe negative limit" "limit" "$LARQL" describe "$V" France --limit -1
check_fails "walk empty prompt" "empty prompt" "$LARQL" walk "$V" ""
check_fails "walk negative top" "top" "$LARQL" walk "$V" France --top -2
check_fails "nearest layer out of range" "out of range" "$LARQL" nearest "$V" France --layer 7
check_fails "nearest needs --layer" "--layer" "$LARQL" nearest "$V" France
check_fails "select layer out of range" "out of range" "$LARQL" select "$V" --layer 9
check_fails "show unknown listing" "unknown listing" "$LARQL" show "$V" things
check_fails "infer browse vindex" "does not contain model weights" "$LARQL" infer "$V" "Hello"
check_fails "infer bad mode" "mode" "$LARQL" infer "$V" "Hello" --mode bitnet
check_fails "infer empty prompt" "empty prompt" "$LARQL" infer "$T_TMP/kq32" ""
for mode in walk dense compare; do
    check "infer --mode $mode --json" "$LARQL" infer "$T_TMP/kq32" "the model" --mode $mode --top 3 --json
    cp "$T_TMP/out" "$T_TMP/infer_$mode.json"
done
check "infer GGUF (dense)" "$LARQL" infer "$M" "the model" --top 3 --json
cp "$T_TMP/out" "$T_TMP/infer_gguf.json"
check "infer dense-only compare" "$LARQL" infer "$T_TMP/do" "the model" --mode compare --top 3 --json
cp "$T_TMP/out" "$T_TMP/infer_do.json"
check "infer text" "$LARQL" infer "$T_TMP/kq32" "the model" --mode compare
if python3 -c "
import json
L = lambda n: json.load(open('$T_TMP/infer_%s.json' % n))
w, d, c, g, do = L('walk'), L('dense'), L('compare'), L('gguf'), L('do')
assert list(w) == ['prompt', 'predictions', 'mode', 'latency_ms'] and w['mode'] == 'walk'
assert list(d) == ['prompt', 'predictions', 'mode', 'latency_ms'] and d['mode'] == 'bitnet'
assert list(c) == ['prompt', 'walk', 'walk_ms', 'dense', 'dense_ms', 'latency_ms']
assert list(do) == ['prompt', 'dense', 'dense_ms', 'latency_ms']
assert w['predictions'] == d['predictions'] == c['walk'] == c['dense'] == g['predictions']
assert g['mode'] == 'bitnet' and len(w['predictions']) == 3
for p in w['predictions']: assert round(p['probability'], 4) == p['probability']
assert round(w['latency_ms'], 1) == w['latency_ms']
" 2>"$T_TMP/err"; then pass "infer JSON bodies"; else fail "infer JSON bodies" "$(cat "$T_TMP/err")"; fi
check_fails "describe not a vindex" "index.json" "$LARQL" describe "$T_TMP" France

# malformed vindex corpus
D=$(dirname "$0")/../data/bad_vindex
if sh "$D/make_bad.sh" "$V" "$T_TMP/bad" 2>"$T_TMP/err"; then
    while IFS='|' read -r name pat; do
        [ -n "$name" ] || continue
        check_fails "bad vindex: $name" "$pat" "$LARQL" stats "$T_TMP/bad/$name"
    done < "$D/EXPECTED"
else
    fail "make_bad.sh" "$(cat "$T_TMP/err")"
fi
done_tests
