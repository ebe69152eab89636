#!/bin/sh
# The ternary engine on trained weights: models/tinystories-ternary.gguf, the BitNet b1.58
# model tools/train/ made (README "The embedded model"). Random fixtures give nearly flat
# logits; these checks need a peaked, learned distribution to mean anything:
#   - perplexity on held-out stories of its corpus (tests/data/trained/heldout.txt) is far
#     below uniform (4096), under a bound a broken engine cannot meet;
#   - its bits per byte on fresh TinyStories-260K samples is within 1.3x of the teacher's
#     own, both measured here with `larql perplexity` (skipped without ../shared);
#   - every mode agrees with the reference (int8 activations, f32 KV, f16 lm_head, the best
#     kernel set, the GGUF) within a stated perplexity delta: --act float, --kv f16,
#     --lm-head q8, each kernel set this CPU runs, and the vindex;
#   - greedy continuation of "Once upon a time" equals the committed golden ids;
#   - a vindex of it knows the trained facts (tests/data/trained/facts.tsv): infer completes
#     "The capital of X is" for >= 90% of the countries and France with " Paris"; describe
#     finds at least 52 of the 64 among their entity's edges;
#   - the server's OpenAI chat route answers a fixed question with the golden answer.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$ROOT/models/tinystories-ternary.gguf"
DATA="$ROOT/tests/data/trained"
VX="$T_TMP/trained.vindex"
if [ ! -f "$M" ]; then fail "models/tinystories-ternary.gguf is present"; done_tests; exit 1; fi

# ppl_of NAME ARGS...: perplexity of the held-out text -> $T_TMP/NAME.ppl (empty on failure)
ppl_of() {
    n=$1; shift
    "$LARQL" perplexity "$@" --file "$DATA/heldout.txt" --json >"$T_TMP/$n.json" 2>"$T_TMP/$n.err" || true
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["perplexity"])' "$T_TMP/$n.json" \
        >"$T_TMP/$n.ppl" 2>/dev/null || : >"$T_TMP/$n.ppl"
}

# 1. held-out perplexity. Measured: REF_PPL (README). A bound of 12: uniform is 4096, and a
# broken block (a wrong scale, a swapped trit code) lands in the hundreds or thousands.
ppl_of ref "$M"
REF=$(cat "$T_TMP/ref.ppl")
if [ -z "$REF" ]; then
    fail "perplexity of the held-out text" "$(cat "$T_TMP/ref.err")"
elif python3 -c "import sys; sys.exit(0 if 1.5 < $REF < 12 else 1)"; then
    pass "held-out perplexity $REF is in (1.5, 12) (uniform: 4096)"
else
    fail "held-out perplexity $REF is in (1.5, 12) (uniform: 4096)"
fi

# 2. every mode against the reference: relative perplexity difference within the delta
# (kernel sets and the vindex compute the same integer products: only summation order
# differs; float activations, f16 KV and the q8 head change the numbers a little)
mode_ok() { # NAME DELTA ARGS...
    n=$1; d=$2; shift 2
    ppl_of "$n" "$@"
    P=$(cat "$T_TMP/$n.ppl")
    if [ -z "$P" ] || [ -z "$REF" ]; then fail "$n: perplexity" "$(cat "$T_TMP/$n.err")"; return; fi
    if python3 -c "import sys; sys.exit(0 if abs($P - $REF) / $REF <= $d else 1)"; then
        pass "$n: perplexity $P within $d of the reference $REF"
    else
        fail "$n: perplexity $P within $d of the reference $REF"
    fi
}
mode_ok "act float" 0.05 "$M" --act float
mode_ok "kv f16" 0.002 "$M" --kv f16
mode_ok "kv q8" 0.005 "$M" --kv q8
mode_ok "lm-head q8" 0.01 "$M" --lm-head q8
for k in scalar avx2 avx512; do
    if "$LARQL" info "$M" --kernels "$k" >/dev/null 2>&1; then
        mode_ok "kernels $k" 0.0001 "$M" --kernels "$k"
    else
        skip "kernels $k" "this CPU does not run the $k kernel set"
    fi
done
if "$LARQL" convert gguf-to-vindex "$M" --output "$VX" --keep-quant --level inference >/dev/null 2>"$T_TMP/conv.err"; then
    pass "convert the trained model to a vindex"
    mode_ok "vindex" 0.0001 "$VX"
    # the vindex carries the training context: the same windows as the GGUF
    if grep -q '"ctx": 256' "$T_TMP/vindex.json"; then pass "vindex perplexity uses the recorded context (256)"
    else fail "vindex perplexity uses the recorded context (256)" "$(cat "$T_TMP/vindex.json")"; fi
else
    fail "convert the trained model to a vindex" "$(cat "$T_TMP/conv.err")"
fi

# 3. the student against its teacher on text neither has seen, both with 256-token windows (the
# student's context; stories260K declares 2048 and gets worse past 512 positions)
C=$(conformance_dir)
if [ -n "$C" ] && [ -f "$C/llama/stories260K.gguf" ]; then
    TE="$C/llama/stories260K.gguf"
    : >"$T_TMP/fresh.txt"
    for s in 900001 900002 900003 900004 900005 900006 900007 900008 900009 900010 900011 900012; do
        printf 'Once upon a time' >>"$T_TMP/fresh.txt"
        "$LARQL" run "$TE" --prompt "Once upon a time" -n 300 --temp 0.9 --seed $s --threads 1 \
            >>"$T_TMP/fresh.txt" 2>/dev/null
        printf '\n' >>"$T_TMP/fresh.txt"
    done
    "$LARQL" perplexity "$TE" --file "$T_TMP/fresh.txt" --ctx 256 --json >"$T_TMP/teacher.json" 2>"$T_TMP/teacher.err"
    "$LARQL" perplexity "$M" --file "$T_TMP/fresh.txt" --ctx 256 --json >"$T_TMP/student.json" 2>"$T_TMP/student.err"
    if python3 - "$T_TMP/teacher.json" "$T_TMP/student.json" <<'PY'; then
import json, sys
t = json.load(open(sys.argv[1]))["bits_per_byte"]
s = json.load(open(sys.argv[2]))["bits_per_byte"]
print("# bits per byte: teacher %.4f, student %.4f (%.2fx)" % (t, s, s / t))
sys.exit(0 if s <= 1.3 * t else 1)
PY
        pass "bits per byte on fresh TinyStories-260K samples within 1.3x of the teacher's"
    else
        fail "bits per byte on fresh TinyStories-260K samples within 1.3x of the teacher's" \
            "$(cat "$T_TMP/teacher.err" "$T_TMP/student.err")"
    fi
else
    skip "bits per byte against the TinyStories-260K teacher" "../shared/conformance absent"
fi

# 4. greedy continuation: the committed golden ids
"$LARQL" run "$M" --prompt "Once upon a time" -n 48 --temp 0 --ids-out >"$T_TMP/greedy" 2>"$T_TMP/greedy.err"
if [ "$(tr -d ' \n' <"$T_TMP/greedy")" = "$(tr -d ' \n' <"$DATA/greedy_ids.txt")" ]; then
    pass "greedy continuation of 'Once upon a time' equals the golden ids"
else
    fail "greedy continuation of 'Once upon a time' equals the golden ids" \
        "got $(cat "$T_TMP/greedy") $(head -c 200 "$T_TMP/greedy.err")"
fi

# 5. knowledge through the vindex. infer (walk mode) completes "The capital of X is" with X's
# capital for nearly every trained country. describe scores FFN gates against the entity's raw
# embedding and names each feature by the top token of its down column; the model was trained
# with a term in exactly that arithmetic (tools/train/model.py describe_loss, README "The
# embedded model"), so features keyed on the entity carry its capital and language. Measured:
# 63 of 64; the bound is 52, issue 13's 80%.
if [ -f "$VX/index.json" ]; then
    : >"$T_TMP/describe.jsonl"
    : >"$T_TMP/capitals.tsv"
    for e in $(cut -f1 "$DATA/facts.tsv" | sort -u); do
        "$LARQL" describe "$VX" "$e" --json >>"$T_TMP/describe.jsonl" 2>>"$T_TMP/describe.err"
        "$LARQL" infer "$VX" "The capital of $e is" --top 1 --json >"$T_TMP/inf.json" 2>>"$T_TMP/describe.err"
        printf '%s\t%s\n' "$e" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["predictions"][0]["token"])' "$T_TMP/inf.json" 2>/dev/null)" >>"$T_TMP/capitals.tsv"
    done
    if python3 - "$DATA/facts.tsv" "$T_TMP/describe.jsonl" <<'PY'; then
import json, sys
edges = {}
for line in open(sys.argv[2]):
    d = json.loads(line)
    edges[d["entity"]] = {e["target"].strip().lower() for e in d["edges"]}
facts = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
found = [f for f in facts if f[2].lower() in edges.get(f[0], set())]
print("# describe found %d of %d trained facts: %s" % (len(found), len(facts), ", ".join("%s>%s" % (f[0], f[2]) for f in found)))
sys.exit(0 if len(found) >= 52 else 1)
PY
        pass "describe finds >= 52 of the 64 trained facts among their entity's edges"
    else
        fail "describe finds >= 52 of the 64 trained facts among their entity's edges" "$(head -c 300 "$T_TMP/describe.err")"
    fi
    if python3 - "$DATA/facts.tsv" "$T_TMP/capitals.tsv" <<'PY'; then
import sys
cap = {l.split("\t")[0]: l.rstrip("\n").split("\t")[2] for l in open(sys.argv[1]) if "\tcapital\t" in l}
got = dict(l.rstrip("\n").split("\t", 1) for l in open(sys.argv[2]) if l.strip())
ok = [e for e in cap if got.get(e) == " " + cap[e]]
print("# infer: %d of %d capitals; wrong: %s" % (len(ok), len(cap), ", ".join("%s>%r" % (e, got.get(e)) for e in cap if e not in ok)))
sys.exit(0 if len(ok) >= 0.9 * len(cap) else 1)
PY
        pass "infer completes 'The capital of X is' with X's capital for >= 90% of the trained countries"
    else
        fail "infer completes 'The capital of X is' with X's capital for >= 90% of the trained countries"
    fi
    "$LARQL" infer "$VX" "The capital of France is" --top 1 --json >"$T_TMP/infer.json" 2>&1
    if python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["predictions"][0]["token"] == " Paris" else 1)' "$T_TMP/infer.json"; then
        pass "infer completes 'The capital of France is' with ' Paris'"
    else
        fail "infer completes 'The capital of France is' with ' Paris'" "$(head -c 300 "$T_TMP/infer.json")"
    fi
fi

# 6. the OpenAI chat route on the trained model: the golden answer to a fixed question
if start_server trained "$M"; then
    curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
        -d '{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":32}' \
        >"$T_TMP/chat.json"
    GOT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["message"]["content"])' "$T_TMP/chat.json" 2>/dev/null)
    if [ "$GOT" = "$(cat "$DATA/chat_golden.txt")" ]; then
        pass "OpenAI chat route answers the golden '$GOT'"
    else
        fail "OpenAI chat route answers the golden answer" "got: $(head -c 300 "$T_TMP/chat.json")"
    fi
else
    fail "larql serve starts on the trained model"
fi
done_tests
