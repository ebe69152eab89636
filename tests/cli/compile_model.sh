#!/bin/sh
# LQL's COMPILE ... INTO MODEL on a generated BitNet fixture: a vindex without edits compiles
# to a GGUF with the original's logits; one with a composed (COMPOSE) edit compiles to a GGUF
# that carries it (larql.patches) and answers as the vindex with the edit once USE MODEL opens
# it; each bad input is a clear error.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac

M="$T_TMP/m.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset demo --seed 5 --plant ' France>Paris@1:5' >/dev/null 2>&1 ||
    { fail "make-model"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference >/dev/null 2>&1 ||
    { fail "convert"; done_tests; exit 1; }
cd "$T_TMP" || exit 1

logits() { "$LARQL" logits "$1" --prompt "The capital of France is" --top 8 2>/dev/null; }

# ---- no edits: the same logits as the original model and its vindex ----
check "COMPILE CURRENT INTO MODEL (no edits)" "$LARQL" lql "$V" -c 'COMPILE CURRENT INTO MODEL "plain.gguf";'
if grep -q '^Edits: none' "$T_TMP/out"; then pass "no edits reported"; else fail "no edits reported" "$(cat "$T_TMP/out")"; fi
logits "$M" >"$T_TMP/l_orig"
logits "$V" >"$T_TMP/l_vx"
logits plain.gguf >"$T_TMP/l_plain"
if [ -s "$T_TMP/l_orig" ] && cmp -s "$T_TMP/l_orig" "$T_TMP/l_plain" && cmp -s "$T_TMP/l_vx" "$T_TMP/l_plain"; then
    pass "compiled model's logits equal the original's (every position)"
else
    fail "compiled model's logits equal the original's" "$(diff "$T_TMP/l_orig" "$T_TMP/l_plain" | head -5)"
fi
check "a directory target holds model.gguf" "$LARQL" lql -c "COMPILE \"$V\" INTO MODEL \"outdir/\";"
if [ -f outdir/model.gguf ] && cmp -s plain.gguf outdir/model.gguf; then pass "COMPILE \"dir\" INTO MODEL \"out/\""; else fail "COMPILE \"dir\" INTO MODEL \"out/\""; fi

# ---- a composed edit: carried, applied by USE MODEL, same answers ----
INS='INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris") MODE COMPOSE AT LAYER 2;'
Q='INFER "The capital of Atlantis is" TOP 8; INFER "The capital of France is" TOP 8; TRACE "The capital of Atlantis is";'
"$LARQL" lql "$V" -c "$INS $Q COMPILE CURRENT INTO MODEL \"edited.gguf\";" >"$T_TMP/with" 2>"$T_TMP/err"
if [ $? -eq 0 ] && grep -q '^Edits: 1 patch(es) carried' "$T_TMP/with"; then pass "COMPILE with a COMPOSE edit"; else fail "COMPILE with a COMPOSE edit" "$(cat "$T_TMP/err")"; fi
"$LARQL" lql -c "USE MODEL \"edited.gguf\"; $Q" >"$T_TMP/back" 2>"$T_TMP/err"
if grep -q '^Applied the 1 patch(es) the model carries' "$T_TMP/back"; then pass "USE MODEL applies the carried patch"; else fail "USE MODEL applies the carried patch" "$(cat "$T_TMP/err")"; fi
# predictions and trace rows (timings left out) of the edited vindex and of the compiled model
rows() { grep -E '^ +[0-9]+\. |^ +(emb|L[0-9]+) ' "$1"; }
rows "$T_TMP/with" >"$T_TMP/r1"; rows "$T_TMP/back" >"$T_TMP/r2"
if grep -q ' Paris ' "$T_TMP/r1" && [ "$(wc -l <"$T_TMP/r1")" -ge 16 ] && cmp -s "$T_TMP/r1" "$T_TMP/r2"; then
    pass "the compiled model answers as the vindex with its edit (INFER, TRACE)"
else
    fail "the compiled model answers as the vindex with its edit" "$(diff "$T_TMP/r1" "$T_TMP/r2" | head -6)"
fi
# the base weights are unchanged: other engines (and `larql logits`) run the unedited model
logits edited.gguf >"$T_TMP/l_ed"
if cmp -s "$T_TMP/l_orig" "$T_TMP/l_ed"; then pass "the carried edits leave the weights as they were"; else fail "the carried edits leave the weights as they were"; fi

# larql serve runs the base model of such a file and says so
if start_server ed edited.gguf && grep -q 'carries edits (metadata larql.patches) that this server does not apply' "$T_TMP/ed.out" "$T_TMP/ed.err"; then
    pass "serve says the carried edits are not applied"
else
    fail "serve says the carried edits are not applied" "$(cat "$T_TMP/ed.err" | head -c 300)"
fi

# ---- bad input ----
check_fails "an existing output file" "already exists" "$LARQL" lql "$V" -c 'COMPILE CURRENT INTO MODEL "plain.gguf";'
"$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/browse" --level browse >/dev/null 2>&1
check_fails "a vindex without weights" "requires model weights" "$LARQL" lql "$T_TMP/browse" -c 'COMPILE CURRENT INTO MODEL "b.gguf";'
check_fails "no vindex in use" "No backend" "$LARQL" lql -c 'COMPILE CURRENT INTO MODEL "n.gguf";'
# a carried list that is not JSON (same length: the file stays a valid GGUF)
perl -pe 's/\[\{"name"/\{\{"name"/' edited.gguf >bad.gguf
check_fails "a malformed larql.patches" "larql.patches is not a JSON array" "$LARQL" lql -c 'USE MODEL "bad.gguf";'
[ ! -e plain.gguf.partial ] && [ ! -e b.gguf ] && pass "no partial files left" || fail "no partial files left"
done_tests
