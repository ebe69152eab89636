#!/bin/sh
# larql verify DIR (LARQL's verify): every file index.json lists under "checksums" hashed
# again; a changed byte or a missing file fails it (exit 1) and names the file.
. "$(dirname "$0")/lib.inc"
M="$T_TMP/m.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset tiny --seed 5 >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference >/dev/null 2>&1 || { fail "convert"; done_tests; exit 1; }
check "verify a fresh vindex" "$LARQL" verify "$V"
grep -q '^All [0-9]* files verified\.$' "$T_TMP/out" && grep -q '^  gate_vectors\.bin \.\.\. OK (' "$T_TMP/out" &&
    pass "every file OK" || fail "every file OK" "$(cat "$T_TMP/out")"
cp -r "$V" "$T_TMP/w"
printf 'x' | dd of="$T_TMP/w/gate_vectors.bin" bs=1 seek=64 conv=notrunc 2>/dev/null
"$LARQL" verify "$T_TMP/w" >"$T_TMP/out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q '^  gate_vectors\.bin \.\.\. FAILED (' "$T_TMP/out" && grep -q '^Verification FAILED' "$T_TMP/out" &&
    pass "a changed byte fails and names the file" || fail "a changed byte fails and names the file" "rc $rc: $(cat "$T_TMP/out")"
rm -rf "$T_TMP/w"; cp -r "$V" "$T_TMP/w"; rm "$T_TMP/w/norms.bin"
"$LARQL" verify "$T_TMP/w" >"$T_TMP/out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q '^  norms\.bin \.\.\. FAILED (missing)$' "$T_TMP/out" &&
    pass "a missing file fails" || fail "a missing file fails" "rc $rc: $(cat "$T_TMP/out")"
check_fails "verify a directory that is not a vindex" "index.json" "$LARQL" verify "$T_TMP"
check_fails "verify without DIR" "DIR is required" "$LARQL" verify
done_tests
