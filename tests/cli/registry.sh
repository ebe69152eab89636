#!/bin/sh
# LARQL's local vindex registry (larql list / link / rm, LARQL_HOME and HF_HOME pointed at
# temp dirs), larql slice (parts and presets, index.json rewritten), larql diag, and hf / pull /
# publish answering that they need the network; every bad input a clear error.
. "$(dirname "$0")/lib.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac

export LARQL_HOME="$T_TMP/larql_home" HF_HOME="$T_TMP/hf_home"
M="$T_TMP/m.gguf"; V="$T_TMP/demo.vindex"
"$LARQL" make-model --out "$M" --preset demo --seed 9 >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference >/dev/null 2>&1 ||
    { fail "convert"; done_tests; exit 1; }
cd "$T_TMP" || exit 1

# out NAME PATTERN...: the last command's stdout matches every extended regex
out() { n=$1; shift; for p in "$@"; do grep -Eq -- "$p" "$T_TMP/out" || { fail "$n" "no '$p' in: $(head -c 500 "$T_TMP/out")"; return; }; done; pass "$n"; }

# ---- list / link / rm ----
check "list: an empty registry" "$LARQL" list
out "list: says so" '^No cached vindexes\.'
check "link DIR (name from the directory, .vindex dropped)" "$LARQL" link "$V"
[ -L "$LARQL_HOME/local/demo.vindex" ] && pass "the link is LARQL_HOME/local/demo.vindex" || fail "the link is LARQL_HOME/local/demo.vindex"
check "link --as other" "$LARQL" link "$V" --as other
# a hub cache entry as `larql pull` leaves it (models--owner--name/snapshots/REV/)
mkdir -p "$HF_HOME/hub/models--someone--demo/snapshots/abc123" && cp "$V/index.json" "$HF_HOME/hub/models--someone--demo/snapshots/abc123/"
check "list" "$LARQL" list
out "list: LARQL's columns, hub entries first" '^SOURCE +MODEL +SIZE \(MB\) +LAYERS +HIDDEN$' '^hf +someone/demo ' \
    '^local +demo +[0-9.]+ +4 +256$' '^local +other '
[ "$(sed -n 2p "$T_TMP/out" | cut -c1-2)" = hf ] && pass "hub entries are listed first" || fail "hub entries are listed first"
check_fails "link: an existing name without --force" "link already exists" "$LARQL" link "$V"
check "link --force replaces it" "$LARQL" link "$V" --force
check_fails "link: not a directory" "not a directory" "$LARQL" link "$M"
mkdir -p "$T_TMP/plain"
check_fails "link: a directory without index.json" "not a vindex" "$LARQL" link "$T_TMP/plain"
check_fails "link: a missing path" "could not resolve path" "$LARQL" link "$T_TMP/nope"
check_fails "link --as with a slash" "path separator" "$LARQL" link "$V" --as a/b
check_fails "link --as starting with a dot" "cannot start with" "$LARQL" link "$V" --as .hidden
check_fails "rm: a shorthand two caches match" "ambiguous" "$LARQL" rm demo -y
check_fails "rm: not cached" "not cached: zzz" "$LARQL" rm zzz -y
echo n | "$LARQL" rm other >"$T_TMP/out" 2>"$T_TMP/err"
[ -L "$LARQL_HOME/local/other.vindex" ] && grep -q aborted "$T_TMP/err" && pass "rm asks, and 'n' keeps it" || fail "rm asks, and 'n' keeps it"
check "rm --yes a local link" "$LARQL" rm other --yes
[ ! -e "$LARQL_HOME/local/other.vindex" ] && [ -f "$V/index.json" ] && pass "rm removes the link, not the vindex" ||
    fail "rm removes the link, not the vindex"
check "rm -y a hub entry by owner/name" "$LARQL" rm someone/demo -y
[ ! -e "$HF_HOME/hub/models--someone--demo" ] && pass "the hub entry's directory is gone" || fail "the hub entry's directory is gone"

# ---- hf / pull / publish: the network ----
check_fails "pull needs the network" "needs the network" "$LARQL" pull hf://someone/x
check_fails "publish needs the network" "needs the network" "$LARQL" publish "$V" someone/x
check_fails "hf needs the network" "needs the network" "$LARQL" hf download someone/x
check_fails "slice of an uncached hub name" "needs the network" "$LARQL" slice someone/missing -o "$T_TMP/x" --preset all
check_fails "diag of an uncached hf:// name" "needs the network" "$LARQL" diag hf://someone/missing

# ---- slice ----
check "slice a registry name --preset browse" "$LARQL" slice demo -o "$T_TMP/browse.vindex" --preset browse
out "slice: LARQL's report" '^Parts: +embed, gate, down_meta, tokenizer, labels, readme$' '^Extract level: +inference → browse$' \
    '^FFN weights: +absent$' '^Wrote '
[ -f browse.vindex/gate_vectors.bin ] && [ ! -e browse.vindex/bitnet ] && [ ! -e browse.vindex/norms.bin ] &&
    pass "browse: the gate vectors, no weights" || fail "browse: the gate vectors, no weights"
grep -q '"extract_level": "browse"' browse.vindex/index.json && grep -q '"has_model_weights": false' browse.vindex/index.json &&
    pass "index.json rewritten (level, weights)" || fail "index.json rewritten"
check "verify passes on the slice (checksums of what was copied)" "$LARQL" verify browse.vindex
check "a browse slice answers describe" "$LARQL" describe browse.vindex France
check "slice --parts ffn,gate,norms,embed,tokenizer,manifest --dry-run" "$LARQL" slice "$V" -o "$T_TMP/dry" --parts ffn,gate,norms,embed,tokenizer,manifest --dry-run
out "dry run: mlp files kept, self_attn skipped" 'bitnet/layers\.0\.mlp\.down_proj\.weight\.i2s' '^  bitnet/layers\.0\.self_attn\.q_proj\.weight\.i2s$' '^\(dry run'
[ ! -e "$T_TMP/dry" ] && pass "dry run writes nothing" || fail "dry run writes nothing"
check "slice --preset all: the whole vindex" "$LARQL" slice "$V" -o "$T_TMP/all.vindex" --preset all
"$LARQL" logits "$V" --ids 1,2,3 >"$T_TMP/l1" 2>/dev/null; "$LARQL" logits all.vindex --ids 1,2,3 >"$T_TMP/l2" 2>/dev/null
[ -s "$T_TMP/l1" ] && cmp -s "$T_TMP/l1" "$T_TMP/l2" && pass "the full slice runs with the same logits" || fail "the full slice runs with the same logits"
check_fails "slice: an unknown part" "unknown part 'wings'" "$LARQL" slice "$V" -o "$T_TMP/x" --parts gate,wings
check_fails "slice: an unknown preset" "unknown preset 'huge'" "$LARQL" slice "$V" -o "$T_TMP/x" --preset huge
check_fails "slice: no parts" "no parts selected" "$LARQL" slice "$V" -o "$T_TMP/x"
check_fails "slice: an existing output" "output path exists" "$LARQL" slice "$V" -o "$T_TMP/browse.vindex" --preset browse
check "slice --force over a vindex" "$LARQL" slice "$V" -o "$T_TMP/browse.vindex" --preset browse --force
mkdir -p "$T_TMP/keep" && echo precious >"$T_TMP/keep/file.txt"
check_fails "slice --force will not replace a non-vindex directory" "is not a vindex" "$LARQL" slice "$V" -o "$T_TMP/keep" --preset browse --force
[ -f "$T_TMP/keep/file.txt" ] && pass "the directory is untouched" || fail "the directory is untouched"
check_fails "slice: a missing source" "not cached: nothere" "$LARQL" slice nothere -o "$T_TMP/x" --preset all
check_fails "slice: output is the source" "must differ" "$LARQL" slice "$V" -o "$V" --preset all --force

# ---- diag ----
check "diag DIR --probe" "$LARQL" diag "$V" --probe --probe-tokens 3
out "diag: config, files, loader, forward pass, probe" '^  num_layers +: 4$' '^  ✓ embeddings\.bin ' '^  - knn_store\.bin +absent$' \
    '^  ✓ loaded in ' '^  block +: ' '^  kernels +: ' '^  prefill [0-9]+ tok in [0-9.]+ ms, decode 3 tok'
"$LARQL" diag browse.vindex >"$T_TMP/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q 'the model does not load' "$T_TMP/out" && pass "diag of a vindex without weights: exit 2 (LARQL's)" ||
    fail "diag of a vindex without weights: exit 2" "rc=$rc"
check_fails "diag: a missing vindex" "no such vindex directory" "$LARQL" diag "$T_TMP/none"
check_fails "diag: --probe-tokens out of range" "probe-tokens" "$LARQL" diag "$V" --probe-tokens 1000
done_tests
