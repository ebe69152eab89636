#!/bin/sh
# Hugging Face folders through the real binary. The same weights are written both ways by
# tests/safetensors/hf_twin.py from a `larql make-model` fixture: a HF folder (the 2B-4T
# packed BitNet form, its bf16 master, a llama-family F16 model; one file or shards with an
# index) and the GGUF the GGUF route holds for exactly those values. `convert
# safetensors-to-gguf` must give the same tensors (names, order, types, bytes) and metadata,
# hence the same logits and tokens; safetensors-to-vindex and extract-index the same vindex
# as gguf-to-vindex. Then one bad folder per check: a clear error, no crash, no output.
. "$(dirname "$0")/lib.inc"
TWIN="python3 $(dirname "$0")/../safetensors/hf_twin.py"
IDS=1,17,42,100,7,300

same_logits() { # NAME A.gguf B.gguf
    "$LARQL" logits "$2" --ids $IDS --top 8 >"$T_TMP/la" 2>/dev/null &&
        "$LARQL" logits "$3" --ids $IDS --top 8 >"$T_TMP/lb" 2>/dev/null && [ -s "$T_TMP/la" ] &&
        cmp -s "$T_TMP/la" "$T_TMP/lb" && pass "$1" || fail "$1" "logits differ or failed"
}

twin() { # FORM FIXTURE-ARGS... : fixture, HF folder $T_TMP/FORM/larql-fixture, twin $T_TMP/FORM.ref.gguf
    form=$1; shift
    "$LARQL" make-model --out "$T_TMP/$form.src.gguf" "$@" >/dev/null 2>&1 &&
        $TWIN twin "$form" "$T_TMP/$form.src.gguf" "$T_TMP/$form/larql-fixture" "$T_TMP/$form.ref.gguf" $SHARDS
}

for form in packed master f16; do
    SHARDS=
    [ $form = master ] && SHARDS="--shards 3" # the index and its shards
    if [ $form = f16 ]; then
        twin $form --arch llama --proj-type f16 --emb-type f16 --seed 11
    else
        twin $form --emb-type f16 --seed 7 --layers 3
    fi || { fail "$form: write the HF folder"; continue; }
    D="$T_TMP/$form/larql-fixture" O="$T_TMP/$form.out.gguf" R="$T_TMP/$form.ref.gguf"
    check "$form: safetensors-to-gguf" "$LARQL" convert safetensors-to-gguf "$D" --output "$O"
    check "$form: same tensors and metadata as the GGUF route" $TWIN compare "$R" "$O"
    same_logits "$form: same logits" "$R" "$O"
    "$LARQL" tokenize "$R" "The capital of France is Paris." >"$T_TMP/ta" 2>&1
    "$LARQL" tokenize "$O" "The capital of France is Paris." >"$T_TMP/tb" 2>&1
    cmp -s "$T_TMP/ta" "$T_TMP/tb" && pass "$form: same tokens" || fail "$form: same tokens" "$(cat "$T_TMP/tb")"
done

# an FFN width that is not a multiple of 128 (1bitLLM 3B's 8640; 320 has the same property:
# down_proj rows start inside an I2_S block): written in microsoft's flat packing, as the
# GGUF route holds it, and the vindex loads it
for form in packed master; do
    F="$T_TMP/w320$form"
    if "$LARQL" make-model --out "$F.src.gguf" --emb-type f16 --seed 7 --layers 2 --ffn 320 >/dev/null 2>&1 &&
        $TWIN twin $form "$F.src.gguf" "$F/larql-fixture" "$F.ref.gguf"; then
        check "ffn 320 $form: safetensors-to-gguf" "$LARQL" convert safetensors-to-gguf "$F/larql-fixture" --output "$F.out.gguf"
        check "ffn 320 $form: same tensors as the GGUF route" $TWIN compare "$F.ref.gguf" "$F.out.gguf"
        same_logits "ffn 320 $form: same logits" "$F.ref.gguf" "$F.out.gguf"
        check "ffn 320 $form: safetensors-to-vindex" "$LARQL" convert safetensors-to-vindex "$F/larql-fixture" --output "$F.vx" --level inference --keep-quant
        same_logits "ffn 320 $form: the vindex's logits" "$F.ref.gguf" "$F.vx"
    else
        fail "ffn 320 $form: write the HF folder"
    fi
done

# the chat template of tokenizer_config.json is carried
if python3 -c "
import sys; sys.path.insert(0, '$(dirname "$0")/../safetensors')
from hf_twin import Gguf
assert 'capitalize' in Gguf('$T_TMP/packed.out.gguf').kv['tokenizer.chat_template'][1]"; then
    pass "chat template carried"
else
    fail "chat template carried"
fi

# vindex: the folder's build equals gguf-to-vindex of the same weights beside the same side files
D="$T_TMP/master/larql-fixture" G="$T_TMP/g"
mkdir -p "$G" && cp "$T_TMP/master.ref.gguf" "$G/model.gguf" && cp "$D"/tokenizer*.json "$G/"
check "gguf-to-vindex of the twin" "$LARQL" convert gguf-to-vindex "$G/model.gguf" --output "$T_TMP/v1" --level all --keep-quant
check "safetensors-to-vindex" "$LARQL" convert safetensors-to-vindex "$D" --output "$T_TMP/v2" --level all --keep-quant
"$LARQL" extract-index "$D" -o "$T_TMP/v4" >/dev/null 2>&1
check "extract-index (LARQL's name)" "$LARQL" extract-index "$D" -o "$T_TMP/v3" --include-weights --keep-quant --f32
for v in v2 v3; do
    grep -v extracted_at "$T_TMP/v1/index.json" >"$T_TMP/i1"; grep -v extracted_at "$T_TMP/$v/index.json" >"$T_TMP/i2"
    if diff -r -x index.json "$T_TMP/v1" "$T_TMP/$v" >"$T_TMP/d" 2>&1 && cmp -s "$T_TMP/i1" "$T_TMP/i2"; then
        pass "$v: the same vindex"
    else
        fail "$v: the same vindex" "$(head -c 300 "$T_TMP/d")"
    fi
done
check "extract-index defaults to f16 files" grep -q '"dtype": "f16"' "$T_TMP/v4/index.json"
if ls "$T_TMP" | grep -q convert-; then fail "no temporary GGUF left"; else pass "no temporary GGUF left"; fi
check "infer on the converted vindex" "$LARQL" infer "$T_TMP/v2" "The capital of France is" --top 3

# the real Llama 3 tokenizer files (2B-4T's) convert to the vocabulary llama3-vocab.gguf holds
conf=$(conformance_dir)
if [ -n "$conf" ]; then
    D="$T_TMP/l3/llama3-blank"
    $TWIN blank "$D" 128256 "$conf/tokenizer/llama3-tokenizer.json" "$conf/tokenizer/llama3-tokenizer_config.json" &&
        check "llama3 tokenizer folder converts" "$LARQL" convert safetensors-to-gguf "$D" --output "$T_TMP/l3.gguf"
    if python3 -c "
import sys; sys.path.insert(0, '$(dirname "$0")/../safetensors')
from hf_twin import Gguf
a, b = Gguf('$conf/tokenizer/llama3-vocab.gguf').kv, Gguf('$T_TMP/l3.gguf').kv
for k in ('tokenizer.ggml.model', 'tokenizer.ggml.pre', 'tokenizer.ggml.tokens', 'tokenizer.ggml.token_type',
          'tokenizer.ggml.merges', 'tokenizer.ggml.bos_token_id', 'tokenizer.ggml.eos_token_id',
          'tokenizer.ggml.add_bos_token'):
    assert a[k][1] == b[k][1], k
assert b['tokenizer.ggml.eot_token_id'][1] == 128009
assert b['tokenizer.chat_template'][1].startswith('{% set loop_messages')
"; then pass "llama3 tokenizer: the reference vocabulary, merges, types and ids"; else fail "llama3 tokenizer: the reference vocabulary, merges, types and ids"; fi
    "$LARQL" tokenize "$T_TMP/l3.gguf" "Hello world! 12345 <|eot_id|>" --special >"$T_TMP/t1" 2>&1
    "$LARQL" tokenize "$conf/tokenizer/llama3-vocab.gguf" "Hello world! 12345 <|eot_id|>" --special >"$T_TMP/t2" 2>&1
    cmp -s "$T_TMP/t1" "$T_TMP/t2" && pass "llama3 tokenizer: same tokens" || fail "llama3 tokenizer: same tokens" "$(cat "$T_TMP/t1")"
else
    skip "llama3 tokenizer conversion" "no conformance data"
fi

# ---- bad input: one mutation of a good folder each ----
bad() { # NAME FORM SHARDS MUTATION PATTERN
    n=$1 form=$2 sh=$3 mut=$4 pat=$5
    B="$T_TMP/bad/$mut/larql-fixture"
    rm -rf "$T_TMP/bad/$mut"
    SHARDS=$sh
    $TWIN twin "$form" "$T_TMP/$form.src.gguf" "$B" "$T_TMP/bad.ref.gguf" $sh && $TWIN mutate "$mut" "$B" ||
        { fail "$n" "cannot write the bad folder"; return; }
    check_fails "$n" "$pat" "$LARQL" convert safetensors-to-gguf "$B" --output "$T_TMP/bad.gguf"
    [ -e "$T_TMP/bad.gguf" ] && fail "$n: no output left" "bad.gguf exists" && rm -f "$T_TMP/bad.gguf"
}
bad "header lies about offsets" packed "" offsets "outside the data section"
bad "header lies about a dtype" packed "" dtype "data_offsets give"
bad "unknown dtype" packed "" dtype-unknown "unknown dtype 'Q4'"
bad "header length past the file" packed "" header-len "header length"
bad "overlapping tensors" packed "" overlap "overlaps"
bad "shard missing from the folder" master "--shards 3" shard-missing "shard 'model-00003-of-00003.safetensors' named by"
bad "shard missing from the index" master "--shards 3" shard-unlisted "model-00003-of-00003.safetensors' is missing from model.safetensors.index.json"
bad "config.json contradicts the shapes" packed "" config-hidden "config.json gives"
bad "config.json contradicts the vocabulary" f16 "" config-vocab "vocab_size"
bad "missing norm" packed "" missing-norm "post_attention_layernorm.weight' (GGUF blk.0.ffn_norm.weight) is missing"
bad "weight_scale NaN" packed "" scale-nan "weight_scale nan"
bad "weight_scale 0" packed "" scale-zero "weight_scale 0 "
bad "packed code 3" packed "" code3 "code 3"
bad "unknown tensor" packed "" extra-tensor "gate_proj.bias' (model.safetensors) is not part of"
bad "untied without lm_head" packed "" untied "lm_head.weight is missing"
bad "unsupported architecture" f16 "" arch "GPT2LMHeadModel"
bad "scaled RoPE refused" f16 "" rope-scaling "rope_scaling 'llama3' is not supported"
check_fails "no config.json" "config.json is missing" "$LARQL" convert safetensors-to-gguf "$T_TMP" --output "$T_TMP/bad.gguf"
check_fails "safetensors-to-vindex error" "weight_scale nan" "$LARQL" convert safetensors-to-vindex "$T_TMP/bad/scale-nan/larql-fixture" --output "$T_TMP/badv"
if [ ! -e "$T_TMP/badv" ] && ! ls "$T_TMP/bad/scale-nan" | grep -q convert-; then pass "failed safetensors-to-vindex leaves nothing"; else fail "failed safetensors-to-vindex leaves nothing"; fi
check_fails "convert needs HF_DIR" "HF_DIR is required" "$LARQL" convert safetensors-to-gguf --output "$T_TMP/x.gguf"
done_tests
