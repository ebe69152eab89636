#!/bin/sh
# larql lql through the real binary, on a generated BitNet fixture with planted facts
# (" France" -> Paris at L1 F5, " Germany" -> Berlin at L2 F100): every statement's output
# in LARQL's format, batch semantics (-c, -f: errors do not stop the run, exit status 1),
# parse errors with line/column/caret, the shell from a pipe, and editing: INSERT puts the
# target first in INFER, DELETE restores the predictions, patches save/apply/remove,
# COMPILE writes a vindex that answers with the edit.
. "$(dirname "$0")/lib.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac # SHOW MODELS runs in another directory

M="$T_TMP/planted.gguf"; V="$T_TMP/v"; B="$T_TMP/browse"
"$LARQL" make-model --out "$M" --preset demo --seed 3 --plant ' France>Paris@1:5' \
    --plant ' Germany>Berlin@2:100' >/dev/null 2>&1 || { fail "make-model --plant"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference >/dev/null 2>&1 ||
    { fail "convert"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$B" >/dev/null 2>&1 || fail "convert browse"
D="$T_TMP/dense"
"$LARQL" convert gguf-to-vindex "$M" --output "$D" --keep-quant --level inference --dense-only >/dev/null 2>&1 || fail "convert dense-only"

# lql_ok NAME STATEMENTS PATTERN...: runs the statements on $V; passes when it exits 0 and
# stdout matches every extended-regex PATTERN
lql_ok() {
    n=$1; s=$2; shift 2
    if ! "$LARQL" lql "$V" -c "$s" >"$T_TMP/out" 2>"$T_TMP/err"; then
        fail "$n" "exit $?: $(head -c 300 "$T_TMP/err")"; return
    fi
    for pat in "$@"; do
        if ! grep -Eq -- "$pat" "$T_TMP/out"; then
            fail "$n" "no '$pat' in: $(head -c 600 "$T_TMP/out")"; return
        fi
    done
    pass "$n"
}
# the output without timing lines (they differ from run to run)
untimed() { grep -Ev '^ *[0-9.]+ms$' "$1"; }

lql_ok "STATS" 'STATS;' '^Model: +larql-demo$' '^Layers: +4$' '^Features: +2\.0K \(512 x 4 layers\)$' \
    '^Edits: +0 patches, 0 patched features, 0 KNN entries$' "^Path: +$V\$"
lql_ok "DESCRIBE brief" 'DESCRIBE " France";' '^ France$' '^  signal: clean \([0-9]+ edges, max gate 2[0-9]\.[0-9]\)$' \
    '^  Syntax \(L0-3\):$' '^ {17}→ Paris {16,} 2[0-9]\.[0-9]  L1$'
lql_ok "DESCRIBE verbose" 'DESCRIBE " France" VERBOSE;' '^    \[—\] {12}→ Paris +2[0-9]\.[0-9]  L1 +1x  also: '
lql_ok "DESCRIBE band and layer" 'DESCRIBE " Germany" ALL LAYERS AT LAYER 2;' '→ Berlin +2[0-9]\.[0-9]  L2$'
lql_ok "DESCRIBE no edges" 'DESCRIBE " Germany" AT LAYER 0;' '^  \(no edges found\)$'
lql_ok "WALK" 'WALK "The capital of France is" TOP 5;' \
    '^Feature scan for "The capital of France is" \(token "is", 4 layers, mode=hybrid \(default\)\)$' \
    '^  L 0: F[0-9]+ +gate=[-+][0-9]+\.[0-9]  top="[^"]*" +down=\[' '^  L 3: F' \
    '^Note: pure vindex scan \(no attention\)\. For inference use INFER\.$'
if [ "$(grep -c '^  L [0-9]: F' "$T_TMP/out")" -eq 12 ]; then pass "WALK shows 3 hits per layer"; else fail "WALK shows 3 hits per layer"; fi
lql_ok "WALK LAYERS COMPARE MODE" 'WALK "The capital of France is" LAYERS 1-2 COMPARE MODE PURE;' \
    '\(token "is", 2 layers, mode=pure \(sparse KNN only\)\)$' '^Note: COMPARE shows more features per layer'
if [ "$(grep -c '^  L [12]: F' "$T_TMP/out")" -eq 10 ] && ! grep -q '^  L [03]:' "$T_TMP/out"; then
    pass "WALK LAYERS 1-2 COMPARE: 5 hits on layers 1 and 2 only"; else fail "WALK LAYERS 1-2 COMPARE: 5 hits on layers 1 and 2 only"; fi
lql_ok "EXPLAIN WALK" 'EXPLAIN WALK "The capital of France is" TOP 2;' '^Walk trace for "The capital of France is" \(token "is", 4 layers, top 2 per layer\)$'
lql_ok "INFER" 'INFER "The capital of France is" TOP 3;' '^Predictions \(walk FFN\):$' \
    '^   1\. .{20} \([0-9]+\.[0-9]{2}%\)$' '^   3\. ' '^  [0-9]+ms$'
if ! grep -q '^   4\. ' "$T_TMP/out"; then pass "INFER TOP 3 has 3 rows"; else fail "INFER TOP 3 has 3 rows"; fi
lql_ok "INFER COMPARE" 'INFER "The capital of France is" COMPARE;' '^Predictions \(walk FFN\):$' '^Predictions \(dense\):$' '^   5\. '
lql_ok "EXPLAIN INFER" 'EXPLAIN INFER "The capital of France is" TOP 2;' '^Predictions \(walk FFN\):$' \
    '^Inference trace \(features that fired with attention\):$' '^  L 3: F'
lql_ok "SELECT WHERE" 'SELECT * FROM EDGES WHERE entity = "Paris" ORDER BY confidence DESC LIMIT 5;' \
    '^Layer  Feature  Token +Also +Relation +Score$' '^L1     F5       Paris ' '^[0-9]+ rows \([0-9]+ matched\)$'
lql_ok "SELECT feature filter" 'SELECT * FROM EDGES WHERE layer = 2 AND feature = 100;' '^L2     F100     Berlin ' '^1 rows \(1 matched\)$'
lql_ok "SELECT NEAREST TO" 'SELECT * FROM EDGES NEAREST TO " France" AT LAYER 1 LIMIT 3;' '^L1     F5       Paris ' '^3 rows$'
lql_ok "SELECT FROM FEATURES" 'SELECT * FROM FEATURES WHERE layer = 2 AND token = "Berlin" LIMIT 3;' '^L2     F100 +Berlin '
lql_ok "SELECT FROM ENTITIES" 'SELECT * FROM ENTITIES LIMIT 3;' '^Distinct entities across 4 layers \([0-9]+ total, showing top 3\):$'
lql_ok "SHOW LAYERS" 'SHOW LAYERS RANGE 1-2;' '^Layer +Features +With Meta +Top Token$' '^L1 +512 +512 ' '^L2 '
if ! grep -q '^L[03] ' "$T_TMP/out"; then pass "SHOW LAYERS RANGE"; else fail "SHOW LAYERS RANGE"; fi
lql_ok "SHOW FEATURES" 'SHOW FEATURES 1 LIMIT 3;' '^Feature +Top Token +Score +Down outputs$' '^F0 +' '^F2 +'
lql_ok "SHOW RELATIONS" 'SHOW RELATIONS WITH EXAMPLES;' '^Top output tokens \(L0-3\):$' '^Token +Count +Score +Layers$' 'e\.g\. '
lql_ok "SHOW ENTITIES" 'SHOW ENTITIES AT LAYER 1 LIMIT 4;' '^Distinct entities at layer 1 '
lql_ok "pipe" 'STATS |> SHOW LAYERS;' '^Model: ' '^L3 '
if (cd "$T_TMP" && "$LARQL" lql -c 'SHOW MODELS;' >"$T_TMP/out" 2>&1) && grep -Eq '^v +[0-9.]+ MB +4 +ready$' "$T_TMP/out"; then
    pass "SHOW MODELS lists the vindexes here"; else fail "SHOW MODELS lists the vindexes here" "$(cat "$T_TMP/out")"; fi

# ---- batch semantics and errors ----
"$LARQL" lql "$V" -c 'DESCRIBE ; STATS; INFER "x" TOP;' >"$T_TMP/out" 2>"$T_TMP/err"; rc=$?
if [ $rc -eq 1 ] && grep -q '^Model: ' "$T_TMP/out" && [ "$(grep -c '^Error: ' "$T_TMP/err")" -eq 2 ]; then
    pass "batch: errors do not stop it, exit status 1"; else fail "batch: errors do not stop it, exit status 1" "rc=$rc $(cat "$T_TMP/err")"; fi
if grep -q '^Error: Parse error at line 1, column 10: expected a string (the entity), found .;.$' "$T_TMP/err" &&
   grep -q '^  DESCRIBE ;$' "$T_TMP/err" && grep -q '^           \^$' "$T_TMP/err"; then
    pass "parse error: line, column, caret"; else fail "parse error: line, column, caret" "$(cat "$T_TMP/err")"; fi
printf -- '-- a script\nSTATS;\n\nDESCRIBE " France"\n   VERBOSE;   -- trailing comment; with ;\nWALK "x" TOP\n  oops;\nSHOW LAYERS;\n' >"$T_TMP/s.lql"
"$LARQL" lql "$V" -f "$T_TMP/s.lql" >"$T_TMP/out" 2>"$T_TMP/err"; rc=$?
if [ $rc -eq 1 ] && grep -q '^Error: Parse error at line 7, column 3: expected a non-negative integer (TOP count), found identifier .oops.$' "$T_TMP/err" &&
   grep -q '^    oops;$' "$T_TMP/err" && grep -q '^L3 ' "$T_TMP/out" && grep -q '\[—\]' "$T_TMP/out"; then
    pass "-f: multi-line statements, comments, error positions in the file"; else fail "-f: multi-line statements, comments, error positions in the file" "rc=$rc $(cat "$T_TMP/err")"; fi
check_fails "no vindex" 'No backend loaded. Run USE "path.vindex" first.' "$LARQL" lql -c 'STATS;'
check_fails "USE missing dir" "Error: .*nope" "$LARQL" lql -c "USE \"$T_TMP/nope\";"
check_fails "INFER on a browse vindex" "Error: this vindex has no model weights" "$LARQL" lql "$B" -c 'INFER "hi";'
check_fails "WALK on a dense-only vindex" "Error: .*dense-only vindex" "$LARQL" lql "$D" -c 'WALK "x";'
if "$LARQL" lql "$D" -c 'INFER "The capital of France is" TOP 2;' >"$T_TMP/out" 2>&1 && grep -q '^Predictions (dense):$' "$T_TMP/out"; then
    pass "INFER on a dense-only vindex runs dense"; else fail "INFER on a dense-only vindex runs dense" "$(cat "$T_TMP/out")"; fi
check_fails "DESCRIBE AT a layer outside" "Error: layer 9 is outside the model (layers 0-3)" "$LARQL" lql "$V" -c 'DESCRIBE "x" AT LAYER 9;'
lql_ok "SELECT unknown field: ignored with a note (LARQL ignores it)" 'SELECT * FROM EDGES WHERE colour = "red" LIMIT 1;' "^\(ignored: EDGES have no field 'colour'\)\$"
check_fails "SHOW FEATURES outside" "Error: layer 7 is outside" "$LARQL" lql "$V" -c 'SHOW FEATURES 7;'
check_fails "-f missing file" "cannot read" "$LARQL" lql "$V" -f "$T_TMP/none.lql"
check "USE inside a batch" "$LARQL" lql -c "USE \"$V\"; STATS;"
if grep -q '^Using: .* (4 layers, 2.0K features, model: larql-demo)$' "$T_TMP/out"; then pass "USE output"; else fail "USE output" "$(cat "$T_TMP/out")"; fi
# the shell, fed by a pipe: statements across lines, meta-commands, EOF
printf 'STATS\n;\nhelp\nSHOW LAYERS; SHOW\n  FEATURES 1 LIMIT 1;\nexit\nSTATS;\n' | "$LARQL" lql "$V" >"$T_TMP/out" 2>"$T_TMP/err"
if grep -q '^Model: ' "$T_TMP/out" && grep -q '^Statements end with' "$T_TMP/out" && grep -q '^L3 ' "$T_TMP/out" &&
   grep -q '^F0 ' "$T_TMP/out" && [ "$(grep -c '^Model: ' "$T_TMP/out")" -eq 1 ]; then
    pass "shell from a pipe"; else fail "shell from a pipe" "$(cat "$T_TMP/out" "$T_TMP/err" | head -c 500)"; fi

# the shell on a terminal (a pty): prompts, continuation, Ctrl-C cancels the statement,
# history saved to ~/.larql_history and recalled with the up arrow
mkdir -p "$T_TMP/home"
if HOME="$T_TMP/home" python3 - "$LARQL" "$V" >"$T_TMP/out" 2>&1 <<'PY'
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "lql", sys.argv[2]])
buf = [b""]
def read_until(want, t=20.0):
    end = time.time() + t
    while time.time() < end and want not in buf[0]:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                buf[0] += os.read(fd, 65536)
            except OSError:
                break
    assert want in buf[0], (want, buf[0])
    i = buf[0].index(want) + len(want)
    out, buf[0] = buf[0][:i], buf[0][i:]
    return out
read_until(b"larql> ")
os.write(fd, b'DESCRIBE " France"\r'); read_until(b"   ... ")
# the prompt is printed a moment before libedit switches the terminal and reads: a ^C in
# that gap only raises the flag (the line typed next is then dropped), so let it settle
time.sleep(0.5)
os.write(fd, b"\x03"); read_until(b"(cancelled)"); read_until(b"larql> ")
os.write(fd, b"SHOW LAYERS;\r"); out = read_until(b"larql> ")
assert b"L3 " in out and b"signal" not in out, out
os.write(fd, b"\x1b[A"); read_until(b"SHOW LAYERS;")
os.write(fd, b"\x15exit\r"); read_until(b"Goodbye.")
os.waitpid(pid, 0)
PY
then
    # libedit's history file escapes blanks as \040
    if grep -Eq '^SHOW( |\\040)LAYERS;$' "$T_TMP/home/.larql_history"; then pass "shell on a terminal: prompts, ^C, history"
    else fail "shell on a terminal: prompts, ^C, history" "history: $(cat "$T_TMP/home/.larql_history")"; fi
else
    fail "shell on a terminal: prompts, ^C, history" "$(tail -c 600 "$T_TMP/out")"
fi

# ---- editing ----
Q='INFER "The capital of Atlantis is" TOP 3;'
"$LARQL" lql "$V" -c "$Q INFER \"The capital of France is\" TOP 5; INFER \"Hello world\" TOP 5;" >"$T_TMP/before" 2>&1
INS='INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris") MODE KNN;'
lql_ok "INSERT then INFER puts the target first" "$INS $Q" \
    '^Auto-patch started' '^Inserted: Atlantis —\[capital\]→ Paris at L2 \(KNN store\)$' \
    '^  mode: KNN — residual capture \(Architecture B, retrieval-override\)$' '^  KNN store: 1 entries total$' \
    '^   1\. Paris {16}\(100\.00%, source=knn_override/post_logits, cos=1\.00, L2, model_top1=.* \([0-9.]+%\)\)$' \
    '^  note: KNN override is a post-logits retrieval sidecar'
lql_ok "INSERT: DESCRIBE shows the KNN fact" "$INS DESCRIBE \"Atlantis\";" '→ Paris +10\.0  L2$'
OTHER=''
for p in "The capital of France is" "Hello world" "The capital of Germany is" "Once upon a time" \
         "The sky is blue and" "Two plus two equals" "Paris is in" "The model read the text" \
         "Describe Germany :" "The quick brown fox"; do
    OTHER="$OTHER INFER \"$p\" TOP 5;"
done
"$LARQL" lql "$V" -c "$OTHER" >"$T_TMP/o1" 2>&1
"$LARQL" lql "$V" -c "$INS $OTHER" >"$T_TMP/o2" 2>&1
if [ "$(grep -c '%)$' "$T_TMP/o1")" -eq 50 ] && [ "$(grep '%)$' "$T_TMP/o1")" = "$(grep '%)$' "$T_TMP/o2")" ]; then
    pass "INSERT leaves ten other prompts' predictions alone"; else fail "INSERT leaves ten other prompts' predictions alone"; fi
"$LARQL" lql "$V" -c "$INS DELETE FROM EDGES WHERE entity = \"Atlantis\"; $Q" >"$T_TMP/out" 2>"$T_TMP/err"
if grep -q '^Deleted 1 features (patch overlay)$' "$T_TMP/out" &&
   [ "$(untimed "$T_TMP/out" | grep '%)$')" = "$(untimed "$T_TMP/before" | grep '%)$' | head -n 3)" ]; then
    pass "DELETE restores the original predictions"; else fail "DELETE restores the original predictions" "$(cat "$T_TMP/out" "$T_TMP/err" | head -c 600)"; fi
P="$T_TMP/atlantis.vlp"
lql_ok "BEGIN PATCH / SAVE PATCH" "BEGIN PATCH \"$P\"; $INS SHOW PATCHES; SAVE PATCH;" "^Patch started: $P\$" \
    "^Recording: $P \\(1 operations\\)\$" "^Saved: $P \\(1 inserts, 0 updates, 0 deletes\\)\$"
if python3 -c "
import json; d = json.load(open('$P'))
assert d['base_model'] == 'larql-demo' and len(d['operations']) == 1
op = d['operations'][0]
assert op['op'] == 'insert_knn' and op['entity'] == 'Atlantis' and op['target'] == 'Paris' and op['layer'] == 2
" 2>"$T_TMP/err"; then pass "SAVE PATCH writes LARQL's .vlp"; else fail "SAVE PATCH writes LARQL's .vlp" "$(cat "$T_TMP/err")"; fi
lql_ok "APPLY PATCH reads it back" "APPLY PATCH \"$P\"; SHOW PATCHES; $Q REMOVE PATCH \"$P\"; SHOW PATCHES;" \
    "^Applied: $P \\(1 operations\\)\$" "^  $P +1 operations \\(1 inserts, 0 updates, 0 deletes\\)\$" \
    '^   1\. Paris {16}\(100\.00%, source=knn_override' "^Removed: $P\$" '^  \(no patches applied\)$'
check_fails "SAVE PATCH without BEGIN" "Error: the auto-patch has no file" "$LARQL" lql "$V" -c "$INS SAVE PATCH;"
check_fails "APPLY PATCH missing file" "Error: .*missing.vlp" "$LARQL" lql "$V" -c "APPLY PATCH \"$T_TMP/missing.vlp\";"
sed 's/"base_model": "larql-demo"/"base_model": "another-model"/' "$P" >"$T_TMP/other.vlp"
check_fails "APPLY PATCH for another model" "Error: .*another-model" "$LARQL" lql "$V" -c "APPLY PATCH \"$T_TMP/other.vlp\";"
check_fails "REMOVE PATCH not applied" "Error: " "$LARQL" lql "$V" -c "REMOVE PATCH \"$P\";"
check_fails "INSERT at a layer outside the model" "Error: " "$LARQL" lql "$V" -c 'INSERT INTO EDGES (entity, relation, target) VALUES ("a", "b", "Paris") AT LAYER 99;'
lql_ok "INSERT COMPOSE" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris") MODE COMPOSE AT LAYER 2;' \
    '^Inserted: Atlantis —\[capital\]→ Paris at L2$' '^  mode: compose \(feature slot L2 F[0-9]+; gate from the residual\)$'
lql_ok "UPDATE" 'UPDATE EDGES SET target = "Rome", confidence = 0.5 WHERE layer = 1 AND feature = 5; SHOW PATCHES;' \
    '^Updated 1 features \(patch overlay\)$' '^  edits +1 operations \(0 inserts, 1 updates, 0 deletes\)$'
lql_ok "reads see the edits: UPDATE" 'UPDATE EDGES SET target = "Rome" WHERE entity = "Paris" AND layer = 1; DESCRIBE " France"; SHOW FEATURES 1 LIMIT 6;' \
    '^Updated 1 features \(patch overlay\)$' '^ {17}→ Rome {17,} 2[0-9]\.[0-9]  L1$' '^F5 +Rome +27\.[0-9]{4}( +Rome)?$'
if ! grep -q 'Paris' "$T_TMP/out"; then pass "UPDATE replaces the planted target"; else fail "UPDATE replaces the planted target"; fi
lql_ok "reads see the edits: COMPOSE" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Berlin") MODE COMPOSE AT LAYER 2; SELECT * FROM EDGES WHERE entity = "Berlin" AND relation = "capital";' \
    '^L2 +F[0-9]+ +Berlin +capital +0\.9000$' '^1 rows \(1 matched\)$'
lql_ok "reads see the edits: DELETE" 'DELETE FROM EDGES WHERE layer = 1 AND feature = 5; DESCRIBE " France"; SELECT * FROM EDGES WHERE layer = 1 AND feature = 5;' \
    '^Deleted 1 features \(patch overlay\)$' '^0 rows \(0 matched\)$'
if ! grep -q 'Paris' "$T_TMP/out"; then pass "DELETE removes the planted fact from DESCRIBE"; else fail "DELETE removes the planted fact from DESCRIBE"; fi
check_fails "INSERT with an empty entity" "Error: insert: entity, relation and target are required" "$LARQL" lql "$V" -c 'INSERT INTO EDGES (entity, relation, target) VALUES ("", "capital", "Paris");'
check_fails "INFER an empty prompt" "Error: empty prompt" "$LARQL" lql "$V" -c 'INFER "";'
lql_ok "DELETE an unknown relation" 'DELETE FROM EDGES WHERE relation = "no-such-relation";' '^  \(no matching features found\)$'
lql_ok "DELETE nothing" 'DELETE FROM EDGES WHERE layer = 1 AND feature = 5 AND entity = "zzzz";' '^  \(no matching features found\)$'
C2="$T_TMP/compiled"
lql_ok "COMPILE CURRENT INTO VINDEX" "$INS COMPILE CURRENT INTO VINDEX \"$C2\";" "^Compiled: $C2 \\(0 patched features, 1 KNN entries\\)\$"
if "$LARQL" lql -c "USE \"$C2\"; $Q" >"$T_TMP/out" 2>&1 && grep -q '^  KNN store: 1 entries (knn_store.bin)$' "$T_TMP/out" &&
   grep -q '^   1\. Paris ' "$T_TMP/out" && grep -q 'source=knn_override' "$T_TMP/out"; then
    pass "the compiled vindex answers with the edit"; else fail "the compiled vindex answers with the edit" "$(head -c 400 "$T_TMP/out")"; fi
# LARQL's command forms: larql lql 'STATEMENTS' (a positional that is not a directory),
# larql lql DIR 'STATEMENTS', larql repl; --continue-on-error = LARQL's batch (errors on stdout, exit 0)
if "$LARQL" lql "USE \"$V\"; STATS;" >"$T_TMP/out" 2>"$T_TMP/err" && grep -q '^Model: *larql-demo$' "$T_TMP/out"; then
    pass "lql 'USE ...; STATS;' (positional statements)"; else fail "lql 'USE ...; STATS;' (positional statements)" "$(head -c 300 "$T_TMP/err")"; fi
lql_pos() { "$LARQL" lql "$V" 'SHOW LAYERS;' >"$T_TMP/out" 2>"$T_TMP/err" && grep -q '^L3 ' "$T_TMP/out"; }
if lql_pos; then pass "lql DIR 'STATEMENTS'"; else fail "lql DIR 'STATEMENTS'" "$(head -c 300 "$T_TMP/err")"; fi
check_fails "lql DIR 'STATEMENTS' -c STATEMENTS" "given twice" "$LARQL" lql "$V" 'STATS;' -c 'STATS;'
check_fails "lql 'bad statement' fails" "Parse error" "$LARQL" lql 'FOO;'
check_fails "lql with a mistyped vindex" "nope.vindex: no such vindex directory" "$LARQL" lql nope.vindex
if "$LARQL" lql --continue-on-error 'FOO; SHOW MODELS;' >"$T_TMP/out" 2>"$T_TMP/err" && grep -q '^Error: Parse error' "$T_TMP/out" &&
   grep -q '^Model ' "$T_TMP/out" && [ ! -s "$T_TMP/err" ]; then
    pass "--continue-on-error: errors on stdout, the run goes on, exit 0"; else fail "--continue-on-error: errors on stdout, the run goes on, exit 0" "$(head -c 300 "$T_TMP/out")"; fi
if printf 'SHOW LAYERS;\n' | "$LARQL" repl "$V" >"$T_TMP/out" 2>"$T_TMP/err" && grep -q '^L3 ' "$T_TMP/out"; then
    pass "repl DIR (the shell from a pipe)"; else fail "repl DIR (the shell from a pipe)" "$(head -c 300 "$T_TMP/err")"; fi
check_fails "repl with two positionals" "usage\\|too many" "$LARQL" repl "$V" 'STATS;'
done_tests
