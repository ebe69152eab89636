#!/bin/sh
# The edit journal and its state directory through a real server (issue 24's reproductions):
# one byte damaged in the middle of the journal (the server refuses to start, the file
# untouched, `larql journal check` says where, `larql journal salvage` keeps 49 of 50), a
# torn tail still cut, two servers on one --state-dir, patch names per scope (a session's and
# a global patch of one name; a global 'session:W'), failing requests creating no session,
# session ids '.'/'..' refused, hard links in --patch-dir refused and no absolute path in its
# errors. (kill -9 under a flood of inserts: tests/cli/edit.sh; the corruption matrix:
# tests/unit/test_journal.c.)
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "journal tests" "curl or python3 missing"; done_tests; exit 0
fi
M="$T_TMP/m.gguf"; V="$T_TMP/v"; S="$T_TMP/state"; P="$T_TMP/patches"
"$LARQL" make-model --out "$M" --preset tiny --seed 4 >/dev/null 2>&1 &&
    "$LARQL" convert gguf-to-vindex "$M" --output "$V" --level inference --keep-quant >/dev/null 2>&1 ||
    { fail "fixture"; done_tests; exit 1; }
J="$S/journal.lqj"
stop() { kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }

# ---- one byte in the middle ----
if start_server a "$V" --state-dir "$S" --threads 1; then
    run_py ins.log "$HTTP_DIR/journal.py" inserts "$PORT" 50
    # a second server on the same state directory is refused at start, naming the cause
    check_fails "a second larql serve on the same --state-dir is refused" "in use by another larql serve" \
        "$LARQL" serve "$V" --state-dir "$S" --threads 1 --port 0
    stop
fi
cp "$J" "$T_TMP/orig.lqj"
check "larql journal check on the clean journal exits 0" "$LARQL" journal check "$J"
grep -q "50 intact records, sequence 1..50" "$T_TMP/out" && grep -q '^clean' "$T_TMP/out" &&
    pass "check: 50 records, sequence 1..50, clean" || fail "check: 50 records, sequence 1..50, clean" "$(tail -n 2 "$T_TMP/out")"
printf '\000' | dd of="$J" bs=1 seek=2000 conv=notrunc 2>/dev/null
cp "$J" "$T_TMP/damaged.lqj"
"$LARQL" serve "$V" --state-dir "$S" --threads 1 --port 0 >"$T_TMP/dmg.out" 2>"$T_TMP/dmg.err"; rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "journal.lqj is damaged: record . at offset [0-9]* is corrupt" "$T_TMP/dmg.err" &&
    grep -q "intact records follow it" "$T_TMP/dmg.err"; then
    pass "one damaged byte mid-journal: the server refuses to start, naming the file, offset and records after"
else fail "one damaged byte mid-journal: the server refuses to start, naming the file, offset and records after" "rc $rc: $(cat "$T_TMP/dmg.err")"; fi
cmp -s "$J" "$T_TMP/damaged.lqj" && pass "the damaged journal is left untouched" || fail "the damaged journal is left untouched"
"$LARQL" journal check "$J" >"$T_TMP/chk" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "CORRUPT: first bad offset" "$T_TMP/chk" && grep -q " BAD " "$T_TMP/chk" &&
    pass "larql journal check: non-zero, the first bad offset and the bad range" ||
    fail "larql journal check: non-zero, the first bad offset and the bad range" "rc $rc: $(tail -n 3 "$T_TMP/chk")"
check "larql journal salvage" "$LARQL" journal salvage "$J" --output "$T_TMP/salv.lqj"
grep -q "kept 49 intact records, skipped 1 bad range" "$T_TMP/out" && [ -s "$T_TMP/salv.lqj.report" ] &&
    grep -q "skipped: offset" "$T_TMP/salv.lqj.report" && cmp -s "$J" "$T_TMP/damaged.lqj" &&
    pass "salvage keeps 49 of 50, writes a report, leaves the input as it was" ||
    fail "salvage keeps 49 of 50, writes a report, leaves the input as it was" "$(cat "$T_TMP/out")"
cp "$T_TMP/salv.lqj" "$J"
if start_server b "$V" --state-dir "$S" --threads 1; then
    grep -q "49 changes replayed" "$T_TMP/b.err" && pass "the salvaged journal replays its 49 changes" ||
        fail "the salvaged journal replays its 49 changes" "$(cat "$T_TMP/b.err")"
    stop
fi
check_fails "salvage of a missing file fails with a message" "cannot open" "$LARQL" journal salvage "$T_TMP/none.lqj"
check_fails "journal without a verb is a usage error" "check or salvage" "$LARQL" journal "$J"

# ---- a torn tail is still cut ----
head -c 60 "$T_TMP/orig.lqj" >>"$J"
if start_server c "$V" --state-dir "$S" --threads 1; then
    grep -q "49 changes replayed (a torn tail was cut off)" "$T_TMP/c.err" && pass "a torn tail is cut, the rest replayed" ||
        fail "a torn tail is cut, the rest replayed" "$(cat "$T_TMP/c.err")"
    [ "$(wc -c <"$J")" = "$(wc -c <"$T_TMP/salv.lqj")" ] && pass "the file is cut back to its intact records" ||
        fail "the file is cut back to its intact records"
    # the lock goes with the process: after kill -9 a new server starts at once
    kill -9 "$PID"; wait "$PID" 2>/dev/null
    if start_server d "$V" --state-dir "$S" --threads 1; then pass "kill -9 releases the state directory's lock"; stop
    else fail "kill -9 releases the state directory's lock"; fi
fi

# ---- checkpoints under a server: 1,100 inserts (a checkpoint after 1,024), kill -9, restart ----
S4="$T_TMP/state4"
if start_server k "$V" --state-dir "$S4" --threads 1; then
    run_py ck.log "$HTTP_DIR/journal.py" inserts "$PORT" 1100
    kill -9 "$PID"; wait "$PID" 2>/dev/null
    "$LARQL" journal check "$S4/journal.lqj" >"$T_TMP/ck.chk" 2>&1
    grep -q "checkpoint (1 patches follow)" "$T_TMP/ck.chk" && grep -q "sequence 1025..1102" "$T_TMP/ck.chk" &&
        pass "the journal was checkpointed after 1,024 records, the sequence going on" ||
        fail "the journal was checkpointed after 1,024 records, the sequence going on" "$(head -n 4 "$T_TMP/ck.chk"; tail -n 2 "$T_TMP/ck.chk")"
    [ ! -e "$S4/journal.lqj.checkpoint" ] && pass "no checkpoint file left aside" || fail "no checkpoint file left aside"
    if start_server k2 "$V" --state-dir "$S4" --threads 1; then
        run_py ck2.log "$HTTP_DIR/journal.py" count "$PORT" 1100
        stop
    else fail "restart on the checkpointed journal"; fi
fi

# ---- patch names per scope; sessions restored ----
S2="$T_TMP/state2"
if start_server e "$V" --state-dir "$S2" --threads 1; then
    run_py collide.log "$HTTP_DIR/journal.py" collide "$PORT"
    kill -9 "$PID"; wait "$PID" 2>/dev/null
    if start_server f "$V" --state-dir "$S2" --threads 1; then
        ! grep -q "not restored" "$T_TMP/f.err" && pass "restart: every session restored" ||
            fail "restart: every session restored" "$(cat "$T_TMP/f.err")"
        run_py collide2.log "$HTTP_DIR/journal.py" collide_check "$PORT"
        stop
    else fail "restart after the collisions"; fi
    # a damaged session journal stops the start too, naming it relative to the state dir
    cp "$S2/sessions/V.lqj" "$T_TMP/v.lqj"
    printf '\377' | dd of="$S2/sessions/V.lqj" bs=1 seek=100 conv=notrunc 2>/dev/null
    check_fails "a damaged session journal stops the start, naming it" "sessions/V.lqj is damaged" \
        "$LARQL" serve "$V" --state-dir "$S2" --threads 1 --port 0
fi

# ---- failing requests create nothing; session ids ----
S3="$T_TMP/state3"; mkdir -p "$P"
if start_server g "$V" --state-dir "$S3" --patch-dir "$P" --threads 1 --max-sessions 64; then
    run_py failing.log "$HTTP_DIR/journal.py" failing "$PORT" "$S3"
    stop
fi

# ---- the patch directory ----
printf '{"description":"good","operations":[{"op":"delete","layer":1,"feature":3}]}' >"$P/good.vlp"
printf '{"description":"outside","operations":[{"op":"delete","layer":1,"feature":4}]}' >"$T_TMP/outside.vlp"
ln "$T_TMP/outside.vlp" "$P/hard.vlp"
ln -s "$T_TMP/outside.vlp" "$P/link.vlp"
printf '{"operations":[{"op":"zap"}]}' >"$P/bad.vlp"
mkdir -p "$P/sub"
if start_server h "$V" --patch-dir "$P" --threads 1; then
    run_py patchdir.log "$HTTP_DIR/journal.py" patchdir "$PORT" "$P"
    stop
fi
done_tests
