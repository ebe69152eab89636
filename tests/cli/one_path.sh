#!/bin/sh
# One library, one path: the same request gives the same answer from every front end and
# every model kind. Three real servers on 127.0.0.1 — a BitNet GGUF, its full inference
# vindex (f32, with a KNN store saved in the directory) and its dense-only vindex — against
# `larql infer --json` on the same files, and the embed/logits/embeddings routes of the
# vindex against the GGUF's (tests/http/one_path.py). Plus the model options of serve
# (--kv f16 --lm-head q8) as /v1/runtime reports them.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"

if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "one-path tests" "curl or python3 missing"; done_tests; exit 0
fi

M="$T_TMP/m.gguf"; V="$T_TMP/full"; D="$T_TMP/dense"
"$LARQL" make-model --out "$M" --preset tiny --seed 11 >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }
check "convert full inference vindex" "$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference
check "convert dense-only vindex" "$LARQL" convert gguf-to-vindex "$M" --output "$D" --keep-quant --dense-only
# an INSERT ... MODE KNN saved into the vindex directory: served and printed by default
check "knn insert saved as the vindex's knn_store.bin" "$LARQL" infer "$V" "The capital of Atlantis is" \
    --knn-insert "Atlantis:capital:Poseidonia" --knn-save "$V/knn_store.bin"

# larql infer --json for every model kind and mode (the prompts the servers get)
for kind in gguf full dense; do
    case $kind in gguf) P=$M ;; full) P=$V ;; dense) P=$D ;; esac
    for mode in walk dense compare; do
        for prompt in "The capital of Atlantis is" "the model"; do
            tag=$(echo "$prompt" | tr -c 'a-zA-Z\n' _)
            "$LARQL" infer "$P" "$prompt" --mode $mode --top 4 --json >"$T_TMP/cli_${kind}_${mode}_$tag.json" 2>"$T_TMP/err" ||
                fail "larql infer $kind $mode '$prompt'" "$(cat "$T_TMP/err")"
        done
    done
done

ports=""
for kind in gguf full dense; do
    case $kind in gguf) P=$M ;; full) P=$V ;; dense) P=$D ;; esac
    if start_server $kind "$P" --threads 1; then ports="$ports $kind=$PORT"; else fail "server $kind starts"; fi
done
start_server opts "$V" --threads 1 --kv f16 --lm-head q8 --weights mmap && ports="$ports opts=$PORT" || fail "server with --kv f16 --lm-head q8 starts"

run_py py.log "$HTTP_DIR/one_path.py" "$T_TMP" $ports
done_tests
