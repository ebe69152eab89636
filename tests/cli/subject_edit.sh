#!/bin/sh
# Edits that generalise (subject edits) on the shipped trained model: larql eval-edits on a
# slice of the shipped suite against the goals, and a real server: the insert read back by a
# paraphrase and by chat, refusals that leave nothing behind, bad input (tests/http/subject_edit.py).
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"

GG=models/tinystories-ternary.gguf; V="$T_TMP/v"
check "convert the trained model to an inference vindex" "$LARQL" convert gguf-to-vindex "$GG" --output "$V" \
    --keep-quant --level inference
SUITE=tests/data/edits/trained.jsonl
[ "$(wc -l <"$SUITE")" -ge 64 ] && pass "the shipped suite has at least 64 cases" || fail "the shipped suite has at least 64 cases"
# every 4th case (16 cases: counterfactual capitals and languages, new entities of one and
# several tokens), scored one at a time, then all 16 together
awk 'NR % 4 == 1' "$SUITE" >"$T_TMP/slice.jsonl"
for mode in single together; do
    extra=""; [ $mode = together ] && extra="--together 16"
    if "$LARQL" eval-edits "$V" --suite "$T_TMP/slice.jsonl" --json $extra --fluency tests/data/trained/heldout.txt \
        >"$T_TMP/$mode.json" 2>"$T_TMP/err"; then
        python3 - "$T_TMP/$mode.json" $mode <<'PY' && pass "eval-edits $mode: the goals" || fail "eval-edits $mode: the goals" "$(head -c 600 "$T_TMP/$mode.json")"
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
single = sys.argv[2] == "single"
goals = {"efficacy": 0.99 if single else 0.97, "chat": 0.80 if single else 0.75,
         "generation": 0.95 if single else 0.90, "neighbourhood": 0.95 if single else 0.92}
bad = {k: t[k] for k, g in goals.items() if t[k] < g}
bad.update({} if t["unrelated_bit_identical"] else {"unrelated": t["unrelated_max_dlogit"]})
bad.update({} if t["fluency_ratio"] is not None and t["fluency_ratio"] <= (1.01 if single else 1.03)
           else {"fluency": t["fluency_ratio"]})
print(bad) if bad else None
sys.exit(1 if bad else 0)
PY
    else
        fail "eval-edits $mode runs" "$(head -c 400 "$T_TMP/err")"
    fi
done
# the old answer moves to the target wherever the subject stands: counterfactual edits whose
# gates miss a paraphrase the model does not read as the question ("In Greece the capital is")
# still put the target above the old answer there (all 4 paraphrases of each case)
grep -e '"entity": "Greece", "relation": "capital"' -e '"entity": "Sweden", "relation": "language"' "$SUITE" >"$T_TMP/cf.jsonl"
if "$LARQL" eval-edits "$V" --suite "$T_TMP/cf.jsonl" --json >"$T_TMP/cf.json" 2>"$T_TMP/err" &&
    python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); sys.exit(0 if len(t["cases"]) == 2 and t["totals"]["paraphrase"] == 1.0 else 1)' "$T_TMP/cf.json"; then
    pass "counterfactual edits: every paraphrase puts the target above the old answer"
else
    fail "counterfactual edits: every paraphrase puts the target above the old answer" "$(head -c 600 "$T_TMP/cf.json") $(head -c 300 "$T_TMP/err")"
fi
# the displaced answer is recorded in the edit (.vlp "replaces"): Paris for France; nothing for
# a subject the model knows nothing about (its first guess, "the", answers every question)
(cd "$T_TMP" && "$LARQL" lql "$V" -c 'BEGIN PATCH "cf.vlp"; INSERT INTO EDGES (entity, relation, target) VALUES ("France", "capital", "Rome"); INSERT INTO EDGES (entity, relation, target) VALUES ("Gondor", "capital", "Minas Tirith"); SAVE PATCH;' >/dev/null 2>&1)
PARIS=$("$LARQL" tokenize "$GG" " Paris" 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)[\"ids\"][-1])")
if python3 - "$T_TMP/cf.vlp" "$PARIS" <<'PY'
import json, sys
ops = json.load(open(sys.argv[1]))["operations"]
first = {o["entity"]: o for o in ops if o["op"] == "insert_subject" and o["feature"] == 0 and "down_vector_b64" in o}
sys.exit(0 if first["France"].get("replaces", [None])[0] == int(sys.argv[2]) and "replaces" not in first["Gondor"] else 1)
PY
then pass "the .vlp records the displaced answer (Paris for France, none for Gondor)"
else fail "the .vlp records the displaced answer (Paris for France, none for Gondor)" "paris=$PARIS $(head -c 300 "$T_TMP/cf.vlp")"; fi
check_fails "eval-edits: an empty suite" "no cases" "$LARQL" eval-edits "$V" --suite /dev/null
printf 'not json\n' >"$T_TMP/bad.jsonl"
check_fails "eval-edits: a malformed suite is an error naming its line" "suite line 1" "$LARQL" eval-edits "$V" --suite "$T_TMP/bad.jsonl"
check_fails "eval-edits on a GGUF says a vindex is needed" "not a vindex" "$LARQL" eval-edits "$GG" --suite "$SUITE"
# LQL: INSERT without a mode is a subject edit, read back by a paraphrase
out=$("$LARQL" lql "$V" -c 'INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Poseidonia"); INFER "The capital city of Atlantis is" TOP 1;' 2>&1)
echo "$out" | grep -q '(subject edit, id ' && echo "$out" | grep -q '1\.  *(9' && pass "LQL INSERT (default subject) then a paraphrase writes the target's first token" ||
    fail "LQL INSERT (default subject) then a paraphrase writes the target's first token" "$out"
# LQL: a subject edit saved as a .vlp names its id; DELETE FROM EDGES WHERE id = ... removes it
(cd "$T_TMP" && "$LARQL" lql "$V" -c 'BEGIN PATCH "s.vlp"; INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Poseidonia"); SAVE PATCH;' >/dev/null 2>&1)
ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["operations"][0]["id"])' "$T_TMP/s.vlp" 2>/dev/null)
out=$(cd "$T_TMP" && "$LARQL" lql "$V" -c "APPLY PATCH \"s.vlp\"; INFER \"The capital of Atlantis is\" TOP 1; DELETE FROM EDGES WHERE id = \"$ID\"; INFER \"The capital of Atlantis is\" TOP 1; DELETE FROM EDGES WHERE id = \"$ID\";" 2>&1)
echo "$out" | grep -q "^Deleted edit $ID" && [ "$(echo "$out" | grep -c '1\.  *(99\|1\.  *(100')" = 1 ] && echo "$out" | grep -q "edit '$ID' not found" &&
    pass "LQL DELETE FROM EDGES WHERE id = … removes one subject edit (a second time: not found)" ||
    fail "LQL DELETE FROM EDGES WHERE id = … removes one subject edit (a second time: not found)" "$ID $out"
# 10,000 edits in one patch: applied whole (or refused whole), never a crash; the model still
# answers and the edit at the end of the patch is there
python3 - "$T_TMP/big.vlp" <<'PY'
import base64, json, struct, sys
key = base64.b64encode(struct.pack("<256f", *([0.01] * 255 + [1.0]))).decode()
ops = [{"op": "insert_knn", "layer": 2, "entity": "E%d" % i, "relation": "capital", "target": "Paris",
        "target_id": 1174, "key_vector_b64": key} for i in range(10000)]
json.dump({"version": 1, "base_model": "", "description": "big", "operations": ops}, open(sys.argv[1], "w"))
PY
out=$(cd "$T_TMP" && "$LARQL" lql "$V" -c 'APPLY PATCH "big.vlp"; SHOW PATCHES; INFER "The capital of France is" TOP 1;' 2>&1)
echo "$out" | grep -q '10000' && echo "$out" | grep -q 'Paris' && pass "a patch of 10,000 edits applies whole and the model answers" ||
    fail "a patch of 10,000 edits applies whole and the model answers" "$(echo "$out" | head -c 400)"
if start_server main "$V" --threads 1 --state-dir "$T_TMP/state"; then
    run_py http.log "$HTTP_DIR/subject_edit.py" "$PORT"
    kill -9 "$PID"
    if start_server again "$V" --threads 1 --state-dir "$T_TMP/state"; then
        run_py again.log "$HTTP_DIR/subject_edit.py" restart "$PORT"
    else
        fail "the server restarts on its state dir"
    fi
else
    fail "server starts on the trained vindex"
fi
done_tests
