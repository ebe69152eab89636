#!/bin/sh
# LARQL's LQL statements beyond the query core, through the real binary on a generated
# BitNet fixture (" France" -> Paris at L1 F5, " Germany" -> Berlin at L2 F100): SELECT /
# DELETE operators (ranges, !=, IN), TRACE, DIFF [INTO PATCH], MERGE, COMPACT (in place),
# SHOW COMPACT STATUS, REBALANCE, COMPILE ... ON CONFLICT, EXTRACT, USE MODEL, the .vlp
# header fields, and a clear error for each bad input.
. "$(dirname "$0")/lib.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac

M="$T_TMP/planted.gguf"; V0="$T_TMP/v0"
"$LARQL" make-model --out "$M" --preset demo --seed 3 --plant ' France>Paris@1:5' \
    --plant ' Germany>Berlin@2:100' >/dev/null 2>&1 || { fail "make-model --plant"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V0" --keep-quant --level inference >/dev/null 2>&1 ||
    { fail "convert"; done_tests; exit 1; }
cd "$T_TMP" || exit 1
# a fresh copy of the vindex for the statements that change it
fresh() { rm -rf "$T_TMP/v"; cp -r "$V0" "$T_TMP/v"; }
fresh
V="$T_TMP/v"

# lq NAME STATEMENTS PATTERN...: exit 0 and stdout matches every extended regex
lq() {
    n=$1; s=$2; shift 2
    if ! "$LARQL" lql "$V" -c "$s" >"$T_TMP/out" 2>"$T_TMP/err"; then
        fail "$n" "exit $?: $(head -c 300 "$T_TMP/err")"; return
    fi
    for pat in "$@"; do
        if ! grep -Eq -- "$pat" "$T_TMP/out"; then fail "$n" "no '$pat' in: $(head -c 600 "$T_TMP/out")"; return; fi
    done
    pass "$n"
}
# lq_err NAME STATEMENTS PATTERN: exit 1, no crash, PATTERN on stderr
lq_err() { check_fails "$1" "$3" "$LARQL" lql "$V" -c "$2"; }

# ---- SELECT / DELETE operators ----
lq "SELECT: IN list and a layer range" 'SELECT * FROM EDGES WHERE entity IN ("Paris", "Berlin") AND layer >= 1 AND layer <= 2;' \
    '^L1 +F5 +Paris ' '^L2 +F100 +Berlin ' '^2 rows \(2 matched\)$'
lq "SELECT: > and < on layer" 'SELECT * FROM EDGES WHERE layer > 0 AND layer < 2 AND entity = "Paris";' '^L1 +F5 +Paris ' '^1 rows \(1 matched\)$'
lq "SELECT: !=" 'SELECT * FROM EDGES WHERE layer = 1 AND feature = 5 AND entity != "Paris";' '^0 rows \(0 matched\)$'
lq "SELECT: IN () matches nothing" 'SELECT * FROM EDGES WHERE relation IN ();' '^0 rows \(0 matched\)$'
lq "SELECT entity, * (every column)" 'SELECT entity, * FROM EDGES WHERE layer = 1 AND feature = 5;' '^L1 +F5 +Paris '
lq "SELECT: an unknown field is ignored with a note" 'SELECT * FROM EDGES WHERE a = 1 LIMIT 1;' "^\(ignored: EDGES have no field 'a'\)$"
lq "SELECT FROM ENTITIES WHERE entity = (LARQL's entity filter)" 'SELECT * FROM ENTITIES WHERE entity = "Berlin";' '^Berlin +[0-9]+ +[0-9.]+$'
if grep -q '^Paris ' "$T_TMP/out"; then fail "the entity filter leaves other entities out"; else pass "the entity filter leaves other entities out"; fi
lq "SELECT FROM ENTITIES WHERE layer >= n (L1's planted Paris left out)" 'SELECT * FROM ENTITIES WHERE layer >= 2 AND entity = "Paris";' '^Paris +2 +3\.[0-9]{4}$'
lq "SELECT FROM FEATURES with ranges" 'SELECT * FROM FEATURES WHERE layer >= 1 AND layer < 2 AND feature <= 5 AND feature > 4;' '^L1 +F5 +Paris ' '^1 rows$'
lq "DELETE WHERE feature = n without a layer" 'DELETE FROM EDGES WHERE feature = 5 AND entity = "Paris";' '^Deleted 1 features \(patch overlay\)$'
lq "DELETE with a range and !=" 'DELETE FROM EDGES WHERE layer >= 1 AND layer <= 2 AND entity != "zzzz" AND feature = 100; SELECT * FROM EDGES WHERE layer = 2 AND feature = 100;' \
    '^Deleted [0-9]+ features' '^0 rows \(0 matched\)$'
lq_err "DELETE on an unknown field" 'DELETE FROM EDGES WHERE a = 1;' "unknown field 'a'"
lq "DESCRIBE \"\" is not found" 'DESCRIBE "";' '^  \(not found\)$'
lq "SHOW RELATIONS AT LAYER" 'SHOW RELATIONS AT LAYER 1;' '^Top output tokens \(L1\):$'
lq_err "SHOW RELATIONS AT LAYER beyond the model" 'SHOW RELATIONS AT LAYER 9;' 'layer 9 is outside the model'

# ---- TRACE ----
lq "TRACE: the residual's top-1 at each layer" 'TRACE " France";' '^Trace: " France" \(2 tokens, 4 layers, [0-9]+ms\)$' \
    '^  Layer +Top-1 +Prob +\|attn_Δ\| +\|ffn_Δ\|$' '^ +emb +France +1\.000 +0 +0$' '^ +L3 +[^ ]+ +0\.[0-9]{3} +[0-9]+ +[0-9]+$'
top_trace=$(awk '$1 == "L3" {print $2}' "$T_TMP/out")
"$LARQL" lql "$V" -c 'INFER " France" TOP 1;' >"$T_TMP/inf" 2>&1
top_infer=$(awk '$1 == "1." {print $2; exit}' "$T_TMP/inf")
if [ -n "$top_trace" ] && [ "$top_trace" = "$top_infer" ]; then pass "TRACE's last layer agrees with INFER ($top_trace)"
else fail "TRACE's last layer agrees with INFER" "trace '$top_trace', infer '$top_infer'"; fi
lq "TRACE FOR: the answer's trajectory" 'TRACE " France" FOR "Paris";' "^Answer trajectory for 'Paris':$" \
    '^  Layer +Rank +Prob +Attn +FFN +Who$' '^ +emb +[0-9]+ +0\.[0-9]{4} +\+0\.0 +\+0\.0 +embed$' '^ +L1 +[0-9]+ +[0-9.]+ +[-+][0-9.]+ +[-+][0-9.]+ '
lq "TRACE DECOMPOSE LAYERS" 'TRACE " France" DECOMPOSE LAYERS 1-2;' '^ +L1 +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+%$' '^ +L2 '
if grep -q 'L3\|emb' "$T_TMP/out"; then fail "TRACE LAYERS limits the rows"; else pass "TRACE LAYERS limits the rows"; fi
lq "TRACE SAVE (JSON)" 'TRACE " France" FOR "Paris" SAVE "t.json";' '^Saved the trace \(5 layers, JSON\) to t\.json$'
if python3 -c "import json; d = json.load(open('t.json')); assert len(d['layers']) == 5 and d['layers'][0]['layer'] == -1 and 'rank' in d['layers'][1]" 2>"$T_TMP/e"
then pass "the saved trace holds every layer"; else fail "the saved trace holds every layer" "$(cat "$T_TMP/e")"; fi
lq "TRACE names a KNN override INFER would apply" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris") MODE KNN; TRACE "The capital of Atlantis is";' \
    '^Pending retrieval override:$' '^  Paris \(source=knn_override/post_logits, cos=1\.00, L[0-9]+' '^  note: KNN sidecar is applied after logits'
lq_err "TRACE LAYERS beyond the model" 'TRACE "x" LAYERS 2-9;' 'layer 9 is outside the model'
lq_err "TRACE an empty prompt" 'TRACE "";' 'empty prompt'
lq_err "TRACE SAVE to an unwritable path" 'TRACE "x" SAVE "/nonexistent/t.json";' 'cannot write'

# ---- DIFF ----
lq "DIFF a vindex and its patches" 'UPDATE EDGES SET target = "Rome" WHERE layer = 1 AND feature = 5; DELETE FROM EDGES WHERE layer = 2 AND feature = 100; DIFF "v0" CURRENT; DIFF "v0" CURRENT INTO PATCH "d.vlp";' \
    '^Diff: v0 vs CURRENT$' '^L1 +F5 +Paris +Rome +modified$' '^L2 +F100 +Berlin +- +removed$' '^2 differences shown \(limit 20\)$' \
    '^Extracted: d\.vlp \(2 ops: 0 inserts, 1 updates, 1 deletes\)$'
lq "the DIFF patch takes the vindex there" 'APPLY PATCH "d.vlp"; SELECT * FROM EDGES WHERE layer = 1 AND feature = 5; DIFF "v0" CURRENT LIMIT 1;' \
    '^L1 +F5 +Rome ' '^1 differences shown \(limit 1\)$'
lq "DIFF of a vindex with itself" 'DIFF "v0" "v0";' '^  \(no differences found\)$'
lq "DIFF INTO REPORT" 'DELETE FROM EDGES WHERE layer = 1 AND feature = 5; DIFF "v0" CURRENT INTO REPORT "r.md";' '^Report: r\.md$'
if grep -q '^L1 *F5 *Paris' r.md; then pass "the report holds the diff"; else fail "the report holds the diff"; fi
lq "DESCRIBE |> DIFF WITH: that entity's differences" 'DESCRIBE "Berlin" |> DIFF WITH "v0";' '^  \(no differences found\)$'
lq_err "DIFF with a missing vindex" 'DIFF "v0" "nope.vindex";' 'nope.vindex/index.json: missing'
lq_err "DIFF LAYER beyond the model" 'DIFF "v0" CURRENT LAYER 9;' 'layer 9 is outside the model'

# ---- MERGE ----
"$LARQL" lql "$V" -c 'BEGIN PATCH "m1.vlp"; UPDATE EDGES SET target = " Berlin", confidence = 0.5 WHERE layer = 1 AND feature = 5; SAVE PATCH;' >/dev/null 2>&1
lq "MERGE a patch, KEEP_TARGET: the slot stays" 'MERGE "m1.vlp" ON CONFLICT KEEP_TARGET; SELECT * FROM EDGES WHERE layer = 1 AND feature = 5;' \
    '^  0 features merged, 1 skipped \(strategy: KeepTarget\)$' '^L1 +F5 +Paris '
lq "MERGE a patch, KEEP_SOURCE (default): the patch's value" 'MERGE "m1.vlp"; SELECT * FROM EDGES WHERE layer = 1 AND feature = 5;' \
    '^Merged m1\.vlp → ' '^  1 features merged, 0 skipped \(strategy: KeepSource\)$' '^L1 +F5 +Berlin '
lq "MERGE HIGHEST_CONFIDENCE: the higher one wins" 'MERGE "m1.vlp" ON CONFLICT HIGHEST_CONFIDENCE;' '^  0 features merged, 1 skipped \(strategy: HighestConfidence\)$'
lq "MERGE a vindex into the one in use" 'MERGE "v0" INTO "v";' '^  [0-9]+ features merged, 0 skipped \(strategy: KeepSource\)$'
lq_err "MERGE a missing source" 'MERGE "nope.vindex";' 'source vindex not found: nope.vindex'
lq_err "MERGE INTO another vindex" 'MERGE "m1.vlp" INTO "v0";' 'merges go into the vindex in use'

# ---- COMPILE ... ON CONFLICT ----
"$LARQL" lql "$V" -c 'BEGIN PATCH "c1.vlp"; UPDATE EDGES SET target = " Germany", confidence = 0.9 WHERE layer = 1 AND feature = 5; SAVE PATCH;' >/dev/null 2>&1
lq_err "COMPILE ON CONFLICT FAIL with two patches on one slot" 'APPLY PATCH "m1.vlp"; APPLY PATCH "c1.vlp"; COMPILE CURRENT INTO VINDEX "cf.vindex" ON CONFLICT FAIL;' \
    "ON CONFLICT FAIL: L1 F5 is written by patches 'm1.vlp' and 'c1.vlp'"
[ ! -e cf.vindex ] && pass "a failed COMPILE writes nothing" || fail "a failed COMPILE writes nothing"
lq "COMPILE ON CONFLICT HIGHEST_CONFIDENCE" 'APPLY PATCH "c1.vlp"; APPLY PATCH "m1.vlp"; COMPILE CURRENT INTO VINDEX "hc.vindex" ON CONFLICT HIGHEST_CONFIDENCE;' '^Compiled: hc\.vindex '
if "$LARQL" lql hc.vindex -c 'SELECT * FROM EDGES WHERE layer = 1 AND feature = 5;' 2>&1 | grep -q '^L1 *F5 *Germany '; then
    pass "the compiled slot holds the higher-confidence write (Germany 0.9 over Berlin 0.5, applied last)"
else fail "the compiled slot holds the higher-confidence write"; fi
lq "COMPILE ON CONFLICT LAST_WINS" 'APPLY PATCH "c1.vlp"; APPLY PATCH "m1.vlp"; COMPILE CURRENT INTO VINDEX "lw.vindex" ON CONFLICT LAST_WINS;' '^Compiled: lw\.vindex '
"$LARQL" lql lw.vindex -c 'SELECT * FROM EDGES WHERE layer = 1 AND feature = 5;' 2>&1 | grep -q '^L1 *F5 *Berlin ' &&
    pass "LAST_WINS: the last patch's write" || fail "LAST_WINS: the last patch's write"
lq "COMPILE \"path\" INTO VINDEX" 'COMPILE "v0" INTO VINDEX "copy.vindex";' '^Compiled: copy\.vindex \(0 patched features, 0 KNN entries\)$'
lq "COMPILE INTO MODEL ... FORMAT GGUF (tests/cli/compile_model.sh tests the file)" 'COMPILE CURRENT INTO MODEL "o.gguf" FORMAT GGUF;' '^Compiled .* → o\.gguf$' '^Edits: none'
lq_err "COMPILE INTO MODEL FORMAT safetensors is refused clearly" 'COMPILE CURRENT INTO MODEL "o2" FORMAT safetensors;' 'FORMAT safetensors is not supported'

# ---- COMPACT, SHOW COMPACT STATUS ----
fresh
lq "COMPACT of an empty overlay" 'COMPACT MINOR;' '^COMPACT MINOR: the overlay is empty, nothing to compact\.$'
lq "COMPACT folds the edits into the vindex" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris") MODE KNN; DELETE FROM EDGES WHERE layer = 2 AND feature = 100; SHOW COMPACT STATUS; COMPACT MAJOR; SHOW COMPACT STATUS;' \
    '^  L0 \(WAL/KNN\): +1 entries \(0 tombstones\)$' '^  L1 \(arch-A\): +1 edges across 1 layers$' \
    '^COMPACT MAJOR: folded 1 patched features and 1 KNN entries into ' '^Storage engine status \(epoch 1\):$' '^  L1 \(arch-A\): +0 edges across 0 layers$'
if "$LARQL" lql "$V" -c 'STATS; INFER "The capital of Atlantis is" TOP 1; SELECT * FROM EDGES WHERE layer = 2 AND feature = 100;' >"$T_TMP/out" 2>&1 &&
   grep -q '^Edits: .* 1 KNN entries$' "$T_TMP/out" && grep -q '^   1\. Paris ' "$T_TMP/out" && grep -q '^0 rows' "$T_TMP/out"; then
    pass "a new session sees the compacted edits in the base files"; else fail "a new session sees the compacted edits" "$(head -c 500 "$T_TMP/out")"; fi
if ls -d "$T_TMP"/v.compact-* >/dev/null 2>&1; then fail "COMPACT leaves no side directory"; else pass "COMPACT leaves no side directory"; fi
lq_err "COMPACT refuses composed features" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Tom", "friend", "Paris") MODE COMPOSE AT LAYER 2; COMPACT MINOR;' \
    'composed features (MODE COMPOSE) carry down vectors'
lq_err "COMPACT while a named patch records" 'BEGIN PATCH "x.vlp"; DELETE FROM EDGES WHERE layer = 1 AND feature = 5; COMPACT MINOR;' 'SAVE PATCH before COMPACT'

# ---- REBALANCE ----
lq "REBALANCE without compose installs" 'REBALANCE;' "^Rebalance: no compose-mode installs to rebalance"
lq "REBALANCE a compose install into a band" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Tom", "friend", "Paris") MODE COMPOSE AT LAYER 2; REBALANCE UNTIL CONVERGED MAX 8 FLOOR 0.05 CEILING 0.5;' \
    '^Rebalance: 1 compose installs, [0-9]+ iterations$' '^  band \[0\.05, 0\.50\]: '
lq_err "REBALANCE with FLOOR above CEILING" 'REBALANCE FLOOR 0.9 CEILING 0.1;' 'FLOOR <= CEILING'

# ---- EXTRACT, USE MODEL, USE REMOTE ----
lq "EXTRACT MODEL builds and uses a vindex" "EXTRACT MODEL \"$M\" INTO \"ex.vindex\" WITH INFERENCE; STATS;" '^Extraction complete: ex\.vindex$' '^Using: ex\.vindex ' '^Extract level: +inference'
lq_err "EXTRACT a missing model" 'EXTRACT MODEL "nope.gguf" INTO "o.vindex";' 'model file not found: nope.gguf'
lq_err "EXTRACT into an existing vindex" "EXTRACT MODEL \"$M\" INTO \"v0\";" 'exists'
mkdir -p "$T_TMP/mt"
if TMPDIR="$T_TMP/mt" "$LARQL" lql -c "USE MODEL \"$M\"; INFER \" France\" TOP 1;" >"$T_TMP/out" 2>&1 && grep -q '^   1\. ' "$T_TMP/out" &&
   [ -z "$(ls -A "$T_TMP/mt")" ]; then pass "USE MODEL: INFER on the model file; its temporary vindex is gone after"
else fail "USE MODEL: INFER on the model file; its temporary vindex is gone after" "$(head -c 300 "$T_TMP/out"; ls "$T_TMP/mt")"; fi
if TMPDIR="$T_TMP/mt" "$LARQL" lql -c "USE MODEL \"$M\"; INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", \"capital\", \"Paris\") MODE KNN; COMPACT MINOR; INFER \"The capital of Atlantis is\" TOP 1;" >"$T_TMP/out" 2>&1 &&
   grep -q '^   1\. Paris ' "$T_TMP/out" && [ -z "$(ls -A "$T_TMP/mt")" ]; then pass "USE MODEL then COMPACT: the session keeps its vindex, removed after"
else fail "USE MODEL then COMPACT: the session keeps its vindex, removed after" "$(tail -c 300 "$T_TMP/out")"; fi
# ROUTE: an entry keyed on "The capital of Atlantis is" but named Lemuria (a patch edited by
# hand): the legacy router fires on the key, VERIFY abstains (the prompt does not name
# Lemuria), FALLBACK fires again; an entry the prompt names fires under VERIFY
fresh
"$LARQL" lql "$V" -c 'BEGIN PATCH "k.vlp"; INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris") MODE KNN; SAVE PATCH;' >/dev/null 2>&1
python3 -c "
import json; d = json.load(open('k.vlp')); d['operations'][0]['entity'] = 'Lemuria'; json.dump(d, open('lem.vlp', 'w'))"
Q='INFER "The capital of Atlantis is" TOP 1'
lq "ROUTE VERIFY fires on an entity the prompt names" "APPLY PATCH \"k.vlp\"; $Q ROUTE VERIFY;" '^   1\. Paris +\(100\.00%, source=knn_override'
"$LARQL" lql "$V" -c "APPLY PATCH \"lem.vlp\"; $Q; $Q ROUTE VERIFY TOPK 3; $Q ROUTE VERIFY FALLBACK;" >"$T_TMP/out" 2>&1
if [ "$(grep -c '^   1\. Paris' "$T_TMP/out")" = 2 ] && [ "$(grep '^   1\.' "$T_TMP/out" | sed -n 2p | grep -c Paris)" = 0 ]; then
    pass "legacy fires, ROUTE VERIFY abstains on an unnamed entity, FALLBACK fires"
else fail "legacy fires, ROUTE VERIFY abstains on an unnamed entity, FALLBACK fires" "$(grep '^   1' "$T_TMP/out")"; fi

# ---- .vlp header fields ----
fresh
if USER=tester "$LARQL" lql "$V" -c 'BEGIN PATCH "h.vlp"; INSERT INTO EDGES (entity, relation, target) VALUES ("Tom", "friend", "Paris") MODE COMPOSE AT LAYER 2; SAVE PATCH;' >/dev/null 2>&1 &&
   python3 - "$V" <<'PY' 2>"$T_TMP/e"
import json, re, sys
d = json.load(open("h.vlp"))
ix = json.load(open(sys.argv[1] + "/index.json"))
assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d["created_at"]), d["created_at"]
assert d["base_checksum"] == ix["checksums"]["gate_vectors.bin"], d.get("base_checksum")
assert d["author"] == "tester", d.get("author")
op = d["operations"][0]
assert op["down_meta"]["t"] == "Paris" and op["down_meta"]["i"] >= 0, op.get("down_meta")
d["base_checksum"] = "0" * 64
json.dump(d, open("wrong.vlp", "w"))
PY
then pass ".vlp: created_at (RFC 3339), base_checksum, author, down_meta"; else fail ".vlp: created_at (RFC 3339), base_checksum, author, down_meta" "$(cat "$T_TMP/e")"; fi
lq "a .vlp of this vindex applies" 'APPLY PATCH "h.vlp";' '^Applied: h\.vlp \(1 operations\)$'
lq_err "a .vlp of another vindex (base_checksum) is refused" 'APPLY PATCH "wrong.vlp";' "base_checksum 0000000000000000... is not this vindex's"
done_tests
