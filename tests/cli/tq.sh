#!/bin/sh
# llama.cpp's ternary types TQ2_0 and TQ1_0 (issue 27), run in place by their own kernels:
# make-model writes a BitNet family's file with TQ projections; logits and 64 greedy tokens
# against tests/families/ref_family.py (which decodes TQ itself), int8 and float activations;
# both types give the same logits for the same trits; info shows the packed bytes per token;
# a browse vindex and an inference vindex (--keep-quant) build; bad input is refused clearly.
. "$(dirname "$0")/lib.inc"
FAM_DIR="$(cd "$(dirname "$0")/../families" && pwd)"

# seed 1: no quantised activation near a rounding tie on the compared positions (families.sh)
for ty in tq2_0 tq1_0; do
    TY=$(echo "$ty" | tr a-z A-Z)
    M="$T_TMP/$ty.gguf"
    check "$ty: make-model --proj-type $ty" "$LARQL" make-model --out "$M" --family 2b4t --seed 1 --dim 256 --ffn 512 --proj-type "$ty"
    check "$ty: info" "$LARQL" info "$M"
    if grep -q "$TY x14" "$T_TMP/out"; then pass "$ty: info lists the $TY projections"; else fail "$ty: info lists the $TY projections" "$(cat "$T_TMP/out")"; fi
    check "$ty: logits and 64 greedy tokens match the reference (int8 activations)" \
        python3 "$FAM_DIR/compare.py" "$LARQL" "$M" --gen 64
    [ -s "$T_TMP/out" ] && echo "#   $(cat "$T_TMP/out")"
    check "$ty: logits match the reference (--act float, decoded at load)" python3 "$FAM_DIR/compare.py" "$LARQL" "$M" --gen 16 --act float
    "$LARQL" logits "$M" --ids 1,40,41,42 --top 5 >"$T_TMP/lg_$ty" 2>&1

    check "$ty: browse vindex" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/$ty.vx"
    check "$ty: describe" "$LARQL" describe "$T_TMP/$ty.vx" France
    # one d per tensor (as llama-quantize writes a BitNet model): the inference vindex keeps the
    # trits as I2_S with that scale, and its logits are the GGUF's (I2_S kernels there, TQ here:
    # float rounding apart)
    check "$ty: convert --keep-quant --level inference" "$LARQL" convert gguf-to-vindex "$M" --output "$T_TMP/$ty.vi" --keep-quant --level inference
    "$LARQL" logits "$M" --ids 1,40,41,42,43 --top 50 >"$T_TMP/lg" 2>&1
    "$LARQL" logits "$T_TMP/$ty.vi" --ids 1,40,41,42,43 --top 50 >"$T_TMP/lv" 2>&1
    check "$ty: the inference vindex's logits equal the GGUF's (1e-4)" python3 -c "
import json, sys
a = [json.loads(l) for l in open('$T_TMP/lg') if l.strip()]
b = [json.loads(l) for l in open('$T_TMP/lv') if l.strip()]
assert len(a) == len(b) == 5, (len(a), len(b))
for x, y in zip(a, b):
    assert [i for i, _ in x['top'][:5]] == [i for i, _ in y['top'][:5]], (x['top'][:5], y['top'][:5])
    d = dict(y['top'])
    for i, v in x['top'][:20]:
        assert abs(v - d[i]) <= 1e-4, (i, v, d[i])
"
    python3 "$FAM_DIR/corrupt.py" "$M" "$T_TMP/b.gguf" scale blk.1.ffn_up.weight 0.5
    check_fails "$ty: --keep-quant refuses blocks with different scales" "blk.1.ffn_up.weight: $TY blocks with different scales" \
        "$LARQL" convert gguf-to-vindex "$T_TMP/b.gguf" --output "$T_TMP/$ty.vb" --keep-quant --level inference

    python3 "$FAM_DIR/corrupt.py" "$M" "$T_TMP/b.gguf" scale blk.1.ffn_up.weight nan
    check_fails "$ty: NaN block scale refused" "blk.1.ffn_up.weight: block 1 has a scale nan that is not finite" "$LARQL" logits "$T_TMP/b.gguf" --ids 1
    check_fails "$ty: NaN block scale refused with --act float (decoded)" "blk.1.ffn_up.weight: block 1 has a scale nan" "$LARQL" logits "$T_TMP/b.gguf" --ids 1 --act float
    python3 "$FAM_DIR/corrupt.py" "$M" "$T_TMP/b.gguf" scale blk.0.attn_q.weight inf
    check_fails "$ty: infinite block scale refused" "blk.0.attn_q.weight: block 1 has a scale inf" "$LARQL" logits "$T_TMP/b.gguf" --ids 1
done
if [ -s "$T_TMP/lg_tq2_0" ] && cmp -s "$T_TMP/lg_tq2_0" "$T_TMP/lg_tq1_0"; then pass "TQ2_0 and TQ1_0 of the same trits give identical logits"
else fail "TQ2_0 and TQ1_0 of the same trits give identical logits" "$(head -c 300 "$T_TMP/lg_tq1_0")"; fi

# the bitnet (SiLU) layout in TQ2_0
M="$T_TMP/silu.gguf"
check "1bitllm tq2_0: make-model" "$LARQL" make-model --out "$M" --family 1bitllm --seed 1 --dim 256 --ffn 512 --proj-type tq2_0
check "1bitllm tq2_0: logits match the reference" python3 "$FAM_DIR/compare.py" "$LARQL" "$M" --gen 16

# bad options
check_fails "make-model: TQ needs 256-multiples" "TQ2_0 projections: dim, ffn and heads x head_dim must be multiples of 256" \
    "$LARQL" make-model --out "$T_TMP/x.gguf" --proj-type tq2_0
check_fails "make-model: unknown --proj-type" "expected f32, f16, i2s, tq2_0 or tq1_0" \
    "$LARQL" make-model --out "$T_TMP/x.gguf" --proj-type tq3_0
# llama-arch files in TQ (a TriLM-style model through llama-quantize): decoded to f32 at load,
# float activations (TriLM trains ternary weights against float activations); ref_family.py
# applies the same rule from the file (no I2_S projection, not a bitnet arch)
for ty in tq2_0 tq1_0; do
    M="$T_TMP/llama_$ty.gguf"
    check "llama $ty: make-model" "$LARQL" make-model --out "$M" --arch llama --dim 256 --ffn 512 --proj-type $ty --seed 3
    check "llama $ty: info" "$LARQL" info "$M"
    if grep -q "family:          llama + TQ" "$T_TMP/out"; then pass "llama $ty: info names it"; else fail "llama $ty: info names it" "$(grep family "$T_TMP/out")"; fi
    check "llama $ty: logits and 32 greedy tokens match the reference" python3 "$FAM_DIR/compare.py" "$LARQL" "$M" --gen 32
done
done_tests
