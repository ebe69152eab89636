#!/bin/sh
# LQL's COMPILE ... INTO MODEL on a generated BitNet fixture: a vindex without edits compiles
# to a GGUF with the original's logits; one with a composed (COMPOSE) edit compiles to a GGUF
# that carries it (larql.patches) and answers as the vindex with the edit in LQL's USE MODEL,
# larql logits / run and larql serve (--no-carried-edits: the base model); each bad input is a
# clear error.
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
# every front end that runs the file applies what it carries (lq_model_open_edited): larql
# logits / run / serve answer as the vindex with its edit, --no-carried-edits as the base model
P="The capital of Atlantis is"
"$LARQL" logits edited.gguf --prompt "$P" --top 8 >"$T_TMP/l_ed" 2>"$T_TMP/err"
"$LARQL" logits edited.gguf --no-carried-edits --prompt "$P" --top 8 >"$T_TMP/l_noc" 2>/dev/null
"$LARQL" logits "$M" --prompt "$P" --top 8 >"$T_TMP/l_base" 2>/dev/null
if grep -q 'applying the 1 patch(es) edited.gguf carries' "$T_TMP/err" && [ -s "$T_TMP/l_ed" ] &&
   ! cmp -s "$T_TMP/l_ed" "$T_TMP/l_base" && cmp -s "$T_TMP/l_noc" "$T_TMP/l_base"; then
    pass "larql logits applies the carried edit (--no-carried-edits: the base model's logits)"
else
    fail "larql logits applies the carried edit" "$(cat "$T_TMP/err"; diff "$T_TMP/l_ed" "$T_TMP/l_base" | head -4)"
fi
# the last position's top 8 as probabilities (softmax = exp(logit - lse)) equal the percentages
# INFER printed on the vindex with its edit
pcts() { python3 -c 'import json,math,sys
r=[json.loads(l) for l in open(sys.argv[1])][-1]
print(" ".join("%.2f" % (100*math.exp(v-r["lse"])) for _,v in r["top"]))' "$1"; }
want=$(sed -n '/^Predictions/,/ms$/p' "$T_TMP/with" | sed -n 's/.*(\([0-9.]*\)%)$/\1/p' | head -8 | tr '\n' ' ' | sed 's/ $//')
got=$(pcts "$T_TMP/l_ed")
if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "logits of the compiled file = the vindex with its edit (top 8: $got)"
else fail "logits of the compiled file = the vindex with its edit" "INFER: $want; logits: $got"; fi
# greedy generation: the edit's answer first; the base model (and --no-carried-edits) do not say it
"$LARQL" run edited.gguf --prompt "$P" -n 5 --temp 0 >"$T_TMP/g_ed" 2>/dev/null
"$LARQL" run edited.gguf --no-carried-edits --prompt "$P" -n 5 --temp 0 >"$T_TMP/g_noc" 2>/dev/null
"$LARQL" run "$M" --prompt "$P" -n 5 --temp 0 >"$T_TMP/g_base" 2>/dev/null
if grep -q '^ Paris' "$T_TMP/g_ed" && ! grep -q '^ Paris' "$T_TMP/g_base" && cmp -s "$T_TMP/g_noc" "$T_TMP/g_base"; then
    pass "larql run on the compiled file answers Paris (greedy); --no-carried-edits runs the base model"
else
    fail "larql run on the compiled file answers Paris" "$(cat "$T_TMP/g_ed" "$T_TMP/g_base")"
fi
# larql serve on the file: /v1/infer as LQL's INFER on the vindex, completions as larql run
if start_server ed edited.gguf && grep -q 'applying the 1 patch(es) it carries' "$T_TMP/ed.err"; then
    pass "serve applies the carried edits"
    top=$(curl -s "http://127.0.0.1:$PORT/v1/infer" -d "{\"prompt\":\"$P\",\"top\":1}")
    pinf=$(echo "$top" | python3 -c 'import json,sys; p=json.load(sys.stdin)["predictions"][0]; print("%s %.2f" % (p["token"], 100*p["probability"]))')
    first=$(sed -n '/^Predictions/,/ms$/p' "$T_TMP/with" | sed -n 's/^ *1\. *\([^ ]*\) *(\([0-9.]*\)%)$/ \1 \2/p' | head -1)
    if [ -n "$first" ] && [ "$pinf" = "$first" ]; then pass "serve /v1/infer = INFER on the vindex ($pinf%)"
    else fail "serve /v1/infer = INFER on the vindex" "serve: '$pinf', INFER: '$first'"; fi
    txt=$(curl -s "http://127.0.0.1:$PORT/v1/completions" -d "{\"prompt\":\"$P\",\"max_tokens\":5,\"temperature\":0}" |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
    if [ "$txt" = "$(cat "$T_TMP/g_ed")" ]; then pass "serve's greedy completion = larql run's ($txt)"
    else fail "serve's greedy completion = larql run's" "serve '$txt', run '$(cat "$T_TMP/g_ed")'"; fi
else
    fail "serve applies the carried edits" "$(head -c 300 "$T_TMP/ed.err")"
fi
# larql infer: walk mode with the carried edit, as INFER on the vindex
"$LARQL" infer edited.gguf "$P" --top 1 >"$T_TMP/inf" 2>&1
if grep -q '^walk' "$T_TMP/inf" && grep -q ' 1\.  Paris  *0\.9036$' "$T_TMP/inf"; then pass "larql infer applies the carried edit (walk: Paris 0.9036)"
else fail "larql infer applies the carried edit" "$(cat "$T_TMP/inf")"; fi
check_fails "infer: carried edits with --knn-insert" "add --no-carried-edits" "$LARQL" infer edited.gguf "$P" --knn-insert 'A:b:C'
if start_server base edited.gguf --no-carried-edits && grep -q 'no-carried-edits: serving the base model' "$T_TMP/base.err"; then
    pass "serve --no-carried-edits serves the base model"
else
    fail "serve --no-carried-edits serves the base model" "$(head -c 300 "$T_TMP/base.err")"
fi

# ---- bad input ----
check_fails "an existing output file" "already exists" "$LARQL" lql "$V" -c 'COMPILE CURRENT INTO MODEL "plain.gguf";'
"$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/browse" --level browse >/dev/null 2>&1
check_fails "a vindex without weights" "requires model weights" "$LARQL" lql "$T_TMP/browse" -c 'COMPILE CURRENT INTO MODEL "b.gguf";'
check_fails "no vindex in use" "No backend" "$LARQL" lql -c 'COMPILE CURRENT INTO MODEL "n.gguf";'
# a carried list that is not JSON (same length: the file stays a valid GGUF)
perl -pe 's/\[\{"name"/\{\{"name"/' edited.gguf >bad.gguf
check_fails "a malformed larql.patches" "larql.patches is not a JSON array" "$LARQL" lql -c 'USE MODEL "bad.gguf";'
check_fails "a malformed larql.patches (run)" "larql.patches is not a JSON array" "$LARQL" run bad.gguf --prompt "$P" -n 1
check_fails "a malformed larql.patches (serve)" "larql.patches is not a JSON array" "$LARQL" serve bad.gguf --port 0
[ ! -e plain.gguf.partial ] && [ ! -e b.gguf ] && pass "no partial files left" || fail "no partial files left"
done_tests
