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

# larql run MODEL [PROMPT]: LARQL's positional prompt, --prompt kept; no prompt = chat
check "run MODEL PROMPT" "$LARQL" run "$M" "The capital of" -n 6 --temp 0
cp "$T_TMP/out" "$T_TMP/run_pos"
check "run MODEL --prompt" "$LARQL" run "$M" --prompt "The capital of" -n 6 --temp 0
if [ -s "$T_TMP/run_pos" ] && cmp -s "$T_TMP/run_pos" "$T_TMP/out"; then pass "positional prompt == --prompt (same tokens)"
else fail "positional prompt == --prompt (same tokens)" "$(cat "$T_TMP/run_pos") vs $(cat "$T_TMP/out")"; fi
check_fails "run with PROMPT and --prompt" "prompt is given twice" "$LARQL" run "$M" "a" --prompt "b"
check_fails "run with PROMPT and --ids" "exactly one" "$LARQL" run "$M" "a" --ids 1,2
if echo "hello" | "$LARQL" run "$M" -n 3 --temp 0 >"$T_TMP/out" 2>"$T_TMP/err" && [ -s "$T_TMP/out" ]; then
    pass "run without a prompt is chat (reads the message from stdin)"
else fail "run without a prompt is chat (reads the message from stdin)" "$(cat "$T_TMP/err")"; fi

# relation clusters (LARQL writes them for models with >= 8 layers): a 10-layer model (knowledge
# band 4-7) with five planted facts of one relation (capital -> country: their targets share an
# embedding offset from the entities, as in a real model), converted with and without clusters
C="$T_TMP/c10.gguf"; CV="$T_TMP/c10v"
"$LARQL" make-model --out "$C" --preset demo --layers 10 --ffn 256 --seed 9 --emb-type f32 \
    --plant-relation ' Paris>France@4:3' --plant-relation ' Berlin>Germany@5:7' --plant-relation ' Rome>Italy@6:9' \
    --plant-relation ' Madrid>Spain@7:11' --plant-relation ' Tokyo>Japan@4:20' >/dev/null 2>&1 || fail "make-model --plant-relation"
check "convert a 10-layer model" "$LARQL" convert gguf-to-vindex "$C" --output "$CV"
if python3 - "$CV" >"$T_TMP/clu" 2>&1 <<'PY'
import json, sys
d = sys.argv[1]
rc = json.load(open(d + "/relation_clusters.json"))
lines = [json.loads(x) for x in open(d + "/feature_clusters.jsonl")]
assert list(rc) == ["k", "centres", "labels", "counts", "top_tokens"], list(rc)
assert rc["k"] == min(512, len(lines)) == len(rc["centres"]) == len(rc["labels"]) == len(rc["counts"]), rc["k"]
assert all(len(c) == 256 for c in rc["centres"]) and sum(rc["counts"]) == len(lines)
assert all(list(r) == ["l", "f", "c"] and 4 <= r["l"] <= 7 and 0 <= r["c"] < rc["k"] for r in lines)
cl = {(r["l"], r["f"]): r["c"] for r in lines}
planted = [(4, 3), (5, 7), (6, 9), (7, 11), (4, 20)]
cs = [cl[p] for p in planted]
labels = [rc["labels"][c] for c in cs]
assert labels == ["country"] * 5, labels
assert max(cs.count(c) for c in cs) >= 3, cs
print("planted clusters", cs, labels, [rc["top_tokens"][c] for c in set(cs)])
PY
then pass "relation clusters: LARQL's files and fields; the five planted facts come out labelled 'country'"
else fail "relation clusters: LARQL's files and fields; the five planted facts come out labelled 'country'" "$(cat "$T_TMP/clu")"; fi
cat "$T_TMP/clu" | sed 's/^/# /'
check "describe names the relation from its cluster" "$LARQL" describe "$CV" " Paris" --band all --min-score 1 --json
if python3 -c "
import json; d = json.load(open('$T_TMP/out')); e = d['edges'][0]
assert (e['target'], e.get('relation'), e.get('source')) == ('France', 'country', 'cluster'), e
"; then pass "describe ' Paris' -> France, relation country, source cluster"; else fail "describe ' Paris' -> France, relation country, source cluster" "$(head -c 300 "$T_TMP/out")"; fi
check "relations lists the cluster relations" "$LARQL" relations "$CV" --json
if python3 -c "
import json; d = json.load(open('$T_TMP/out'))
assert d['cluster_count'] > 0 and 'country' in [r['name'] for r in d['cluster_relations']], d.get('cluster_relations')
"; then pass "relations: cluster_relations holds country"; else fail "relations: cluster_relations holds country" "$(head -c 300 "$T_TMP/out")"; fi
check "convert --no-clusters" "$LARQL" convert gguf-to-vindex "$C" --output "$T_TMP/c10n" --no-clusters
if [ ! -e "$T_TMP/c10n/relation_clusters.json" ] && [ ! -e "$T_TMP/c10n/feature_clusters.jsonl" ] && [ ! -e "$V/relation_clusters.json" ]; then
    pass "no clusters with --no-clusters, nor for a 4-layer model (no knowledge band)"
else fail "no clusters with --no-clusters, nor for a 4-layer model (no knowledge band)"; fi
# --clusters: a model below 8 layers gets them over its layers between the first and the last
check "convert --clusters (a 4-layer model)" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/v4c" --clusters
if [ -s "$T_TMP/v4c/relation_clusters.json" ] && [ -s "$T_TMP/v4c/feature_clusters.jsonl" ] &&
    ! grep -q '"l": *0[,}]' "$T_TMP/v4c/feature_clusters.jsonl" && ! grep -q '"l": *3[,}]' "$T_TMP/v4c/feature_clusters.jsonl"; then
    pass "--clusters: a 4-layer model has clusters of layers 1-2"
else fail "--clusters: a 4-layer model has clusters of layers 1-2" "$(head -c 200 "$T_TMP/v4c/feature_clusters.jsonl" 2>/dev/null)"; fi
cp -r "$CV" "$T_TMP/c10bad"; echo '{"l":99,"f":0,"c":0}' >>"$T_TMP/c10bad/feature_clusters.jsonl"
check_fails "a feature_clusters.jsonl line outside the vindex is an error naming the file" "feature_clusters.jsonl: line" \
    "$LARQL" describe "$T_TMP/c10bad" France

ports=""
start_server cached "$V" --threads 1 --cache-ttl 60 && ports="$ports cached=$PORT" || fail "server --cache-ttl 60 starts"
start_server plain "$V" --threads 1 && ports="$ports plain=$PORT" || fail "server without --cache-ttl starts"
start_server dense "$D" --threads 1 && ports="$ports dense=$PORT" || fail "dense-only server starts"
check_fails "--cache-ttl must be a number" "cache-ttl" "$LARQL" serve "$V" --cache-ttl soon

# several models in one server (larql serve --dir): two vindexes with different planted facts
# and model ids (the last '/' segment of general.name), a browse-only one among them, and a
# directory that is not a vindex (ignored)
MD="$T_TMP/models"; mkdir -p "$MD/notes"
"$LARQL" make-model --out "$T_TMP/a.gguf" --preset demo --seed 3 --name org/alpha --plant ' France>Paris@1:5' >/dev/null 2>&1 &&
"$LARQL" make-model --out "$T_TMP/b.gguf" --preset demo --seed 4 --name beta --plant ' France>Rome@1:5' >/dev/null 2>&1 ||
    fail "make-model for --dir"
check "convert alpha" "$LARQL" convert gguf-to-vindex "$T_TMP/a.gguf" --output "$MD/a" --keep-quant --level inference
check "convert beta" "$LARQL" convert gguf-to-vindex "$T_TMP/b.gguf" --output "$MD/b" --keep-quant --level inference
# a symbolic link in the models directory to a vindex outside it is not served by default
mkdir -p "$T_TMP/outside"; cp -r "$MD/b" "$T_TMP/outside/c"; ln -s "$T_TMP/outside/c" "$MD/zlink"
start_server multi --dir "$MD" --threads 1 && ports="$ports multi=$PORT" || fail "serve --dir starts"
grep -q "skipping 'zlink', a symbolic link" "$T_TMP/multi.err" && ! curl -s "http://127.0.0.1:$PORT/v1/models" | grep -q zlink &&
    pass "serve --dir skips a symbolic link leading outside the directory" ||
    fail "serve --dir skips a symbolic link leading outside the directory" "$(cat "$T_TMP/multi.err")"
check_fails "serve --dir and MODEL together" "not both" "$LARQL" serve "$V" --dir "$MD"
check_fails "serve --dir without vindexes" "no subdirectory holds an index.json" "$LARQL" serve --dir "$MD/notes"
mkdir -p "$T_TMP/dup"; cp -r "$MD/b" "$T_TMP/dup/b1"; cp -r "$MD/b" "$T_TMP/dup/b2"
check_fails "serve --dir with two vindexes of one model id" "ids must differ" "$LARQL" serve --dir "$T_TMP/dup" --port 0

run_py py.log "$HTTP_DIR/parity.py" "$T_TMP" $ports
done_tests
