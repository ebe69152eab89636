#!/bin/sh
# larql tokenize / detokenize through the real binary: JSON output, BOS defaults, special
# tokens, and one-line errors (missing file, directory, bad files, unsupported tokenizer
# model, ids out of range, invalid UTF-8). Cases that need ../shared/conformance skip cleanly.
. "$(dirname "$0")/lib.inc"

# little-endian integer of $2 bytes, and a GGUF string (u64 length + bytes)
le() { n=$1; i=0; while [ $i -lt "$2" ]; do printf "\\$(printf '%03o' $((n & 255)))"; n=$((n >> 8)); i=$((i + 1)); done; }
gstr() { le ${#1} 8; printf '%s' "$1"; }

# stdout of the last check must contain the fixed string $2
out_has() { if grep -qF -- "$2" "$T_TMP/out"; then pass "$1"; else fail "$1" "stdout: $(head -c 300 "$T_TMP/out")"; fi; }

check_fails "no arguments is a usage error" "usage" "$LARQL" tokenize
check_fails "missing TEXT" "missing TEXT" "$LARQL" tokenize somefile
check_fails "unknown option" "unknown option" "$LARQL" tokenize a b --frobnicate
check_fails "missing file" "cannot open" "$LARQL" tokenize "$T_TMP/nope.json" hi
check_fails "directory without tokenizer.json" "directory without tokenizer.json" "$LARQL" tokenize "$T_TMP" hi
# a vindex directory: its tokenizer.json, same ids as the GGUF it was built from
"$LARQL" make-model --out "$T_TMP/fx.gguf" --preset tiny 2>/dev/null
"$LARQL" convert gguf-to-vindex "$T_TMP/fx.gguf" --output "$T_TMP/fx.vindex" 2>/dev/null
"$LARQL" tokenize "$T_TMP/fx.gguf" "The capital of France is Paris" >"$T_TMP/g.json" 2>&1
check "tokenize a vindex directory" "$LARQL" tokenize "$T_TMP/fx.vindex" "The capital of France is Paris"
if cmp -s "$T_TMP/out" "$T_TMP/g.json"; then pass "vindex and GGUF tokenize alike"; else fail "vindex and GGUF tokenize alike" "$(cat "$T_TMP/out") vs $(cat "$T_TMP/g.json")"; fi
printf 'not json at all' >"$T_TMP/garbage.json"
check_fails "garbage tokenizer.json" "tokenizer.json" "$LARQL" tokenize "$T_TMP/garbage.json" hi
printf '{"model":{"type":"WordPiece","vocab":{"a":0}}}' >"$T_TMP/wp.json"
check_fails "unsupported tokenizer.json model" "unsupported tokenizer model 'WordPiece'" "$LARQL" tokenize "$T_TMP/wp.json" hi
check_fails "detokenize bad id list" "comma-separated" "$LARQL" detokenize "$T_TMP/wp.json" 1,x

# a GGUF whose tokenizer is BERT's WordPiece
{ printf 'GGUF'; le 3 4; le 0 8; le 1 8; gstr tokenizer.ggml.model; le 8 4; gstr bert; } >"$T_TMP/bert.gguf"
check_fails "unsupported GGUF tokenizer model" "unsupported tokenizer model 'bert'" "$LARQL" tokenize "$T_TMP/bert.gguf" hi

# a tiny byte-level BPE tokenizer.json made here: bytes a, b, space and the merge "a b"
cat >"$T_TMP/tiny.json" <<'EOF'
{"model":{"type":"BPE","vocab":{"a":0,"b":1,"Ġ":2,"ab":3,"\"":4,"Ċ":5},"merges":["a b"]},
 "added_tokens":[{"id":6,"content":"<|end|>","special":true}],
 "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}}
EOF
check "tiny tokenize" "$LARQL" tokenize "$T_TMP/tiny.json" "ab a"
out_has "tiny tokenize output" '{"ids":[3,2,0],"tokens":["ab","Ġ","a"],"count":3}'
check "tiny tokenize --special" "$LARQL" tokenize "$T_TMP/tiny.json" "ab<|end|>" --special
out_has "tiny --special output" '"ids":[3,6]'
check "tiny tokenize -- text starting with dashes" "$LARQL" tokenize "$T_TMP/tiny.json" -- "--"
check "tiny detokenize escapes JSON" "$LARQL" detokenize "$T_TMP/tiny.json" 4,5,3
out_has "tiny detokenize output" '{"text":"\"\nab"}'
check "tiny detokenize --skip-special" "$LARQL" detokenize "$T_TMP/tiny.json" 3,6 --skip-special
out_has "tiny --skip-special output" '{"text":"ab"}'
check_fails "detokenize id out of range" "outside 0..6" "$LARQL" detokenize "$T_TMP/tiny.json" 3,7
check_fails "tokenize invalid UTF-8" "invalid UTF-8 at byte offset 1" "$LARQL" tokenize "$T_TMP/tiny.json" "$(printf 'a\377')"

conf=$(conformance_dir)
if [ -z "$conf" ]; then
    for n in "llama3 json default BOS" "llama3 json --no-bos" "llama3 json --special" \
        "llama3 detokenize" "llama3 gguf" "llama spm gguf" "gpt-2 gguf" "llama spm detokenize"; do
        skip "$n" "../shared/conformance absent"
    done
else
    J="$conf/tokenizer/llama3-tokenizer.json"
    check "llama3 json default BOS" "$LARQL" tokenize "$J" "Hello world!"
    out_has "llama3 json default BOS output" '{"ids":[128000,9906,1917,0],"tokens":["<|begin_of_text|>","Hello","Ġworld","!"],"count":4}'
    check "llama3 json --no-bos" "$LARQL" tokenize "$J" "Hello world!" --no-bos
    out_has "llama3 json --no-bos output" '"ids":[9906,1917,0]'
    check "llama3 json --special" "$LARQL" tokenize "$J" "<|begin_of_text|>hi<|eot_id|>" --special --no-bos
    out_has "llama3 json --special output" '"ids":[128000,6151,128009]'
    check "llama3 detokenize" "$LARQL" detokenize "$J" 128000,9906,1917,0
    out_has "llama3 detokenize output" '{"text":"<|begin_of_text|>Hello world!"}'
    check "llama3 gguf" "$LARQL" tokenize "$conf/tokenizer/llama3-vocab.gguf" "Hello world!"
    out_has "llama3 gguf output" '"ids":[128000,9906,1917,0]'
    check "llama spm gguf" "$LARQL" tokenize "$conf/tokenizer/ggml-vocab-llama-spm.gguf" "Hello world"
    out_has "llama spm gguf output" '{"ids":[1,15043,3186],"tokens":["<s>","▁Hello","▁world"],"count":3}'
    check "gpt-2 gguf (no BOS by default)" "$LARQL" tokenize "$conf/tokenizer/ggml-vocab-gpt-2.gguf" "Hello world"
    out_has "gpt-2 gguf output" '"ids":[15496,995]'
    check "llama spm detokenize strips the dummy-prefix space" "$LARQL" detokenize "$conf/tokenizer/ggml-vocab-llama-spm.gguf" 1,15043,3186 --skip-special
    out_has "llama spm detokenize output" '{"text":"Hello world"}'
fi
done_tests
