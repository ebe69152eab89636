#!/bin/sh
# A full disk (ENOSPC) under the two things larql writes, on a real small tmpfs:
#  - `larql convert` into a file system too small for the vindex: the error names the file and
#    says why, nothing is left behind (the build writes a temporary sibling directory and
#    renames it into place only when complete), and a vindex already on that file system
#    still opens and answers as before;
#  - the server's edit journal (--state-dir) when the disk fills: the insert is refused with an
#    error naming the journal, acknowledged edits stay, and after a SIGKILL and a restart the
#    state is exactly the acknowledged edits (the refused one is not there), and once space is
#    back inserts are accepted again.
# A tmpfs needs a mount: the script re-runs itself in a private user + mount namespace
# (`unshare -rm`; the mounts vanish with it), or as root mounts directly; it skips when
# neither is allowed. (The injected write failure of tests/cli/faults.sh covers the same
# paths without a mount.)
if [ -z "$LQ_DISKFULL_NS" ] && [ "$(id -u)" != 0 ] && unshare -rm true 2>/dev/null; then
    LQ_DISKFULL_NS=1 exec unshare -rm sh "$0" "$@"
fi
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
small="$T_TMP/small"
mkdir "$small"
if ! mount -t tmpfs -o size=1m tmpfs "$small" 2>/dev/null; then
    skip "ENOSPC on a small tmpfs" "cannot mount a tmpfs here (no root, no user namespaces)"
    done_tests; exit $?
fi
cleanup_mounts() { umount "$T_TMP/state" "$small" 2>/dev/null; }
trap 'cleanup_mounts; cleanup' EXIT INT TERM

M="$T_TMP/m.gguf"
"$LARQL" make-model --out "$M" --preset tiny --seed 3 >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }

# ---- convert onto a full file system ----
# a vindex already there (a smaller one: browse level, fits in the 1 MiB)
check "a browse-level vindex fits on the small file system" \
    "$LARQL" convert gguf-to-vindex "$M" --output "$small/old" --level browse --no-clusters
"$LARQL" describe "$small/old" the --band all --min-score -100 --json >"$T_TMP/before.json" 2>&1
used0=$(du -sk "$small" | cut -f1)
check_fails "convert onto a full disk fails, naming the file and ENOSPC" "No space left on device" \
    "$LARQL" convert gguf-to-vindex "$M" --output "$small/new" --level inference --keep-quant
if grep -q '\.bin\|\.json' "$T_TMP/err"; then pass "the ENOSPC error names the file being written"
else fail "the ENOSPC error names the file being written" "$(cat "$T_TMP/err")"; fi
left=$(ls -A "$small" | grep -v '^old$')
if [ -z "$left" ] && [ "$(du -sk "$small" | cut -f1)" = "$used0" ]; then pass "convert ENOSPC: nothing left behind, the space is given back"
else fail "convert ENOSPC: nothing left behind, the space is given back" "left: $left; $(du -sk "$small")"; fi
"$LARQL" describe "$small/old" the --band all --min-score -100 --json >"$T_TMP/after.json" 2>&1
if python3 - "$T_TMP/before.json" "$T_TMP/after.json" <<'PY'; then
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sys.exit(0 if a["edges"] == b["edges"] and a["edges"] else 1)
PY
    pass "the vindex already on the full disk answers as before"
else fail "the vindex already on the full disk answers as before" "$(head -c 300 "$T_TMP/after.json")"; fi

# ---- the edit journal on a full disk ----
V="$T_TMP/v"
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --level inference --keep-quant >/dev/null 2>&1 || fail "convert the test vindex"
mkdir "$T_TMP/state"
mount -t tmpfs -o size=256k tmpfs "$T_TMP/state"
insert() { curl -s -o "$T_TMP/ins.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/insert" \
    -d "{\"entity\":\"$1\",\"relation\":\"capital\",\"target\":\"the\",\"layer\":1}"; }
n_ops() { curl -s "http://127.0.0.1:$PORT/v1/patches" | python3 -c 'import json,sys; print(sum(p["operations"] for p in json.load(sys.stdin)["patches"]))'; }
if start_server j1 "$V" --state-dir "$T_TMP/state" --threads 1; then
    st=$(insert Atlantis)
    if [ "$st" = 200 ]; then pass "insert acknowledged with room on the disk"; else fail "insert acknowledged with room on the disk" "$st $(cat "$T_TMP/ins.json")"; fi
    ops1=$(n_ops)
    size1=$(wc -c <"$T_TMP/state/journal.lqj")
    # fill the file system to the last byte
    dd if=/dev/zero of="$T_TMP/state/fill" bs=4096 2>/dev/null
    dd if=/dev/zero of="$T_TMP/state/fill2" bs=1 2>/dev/null
    st=$(insert Lemuria)
    if [ "$st" -ge 500 ] && grep -q 'journal.lqj: cannot persist the change: No space left on device' "$T_TMP/ins.json" && kill -0 "$PID"; then
        pass "insert on a full disk: refused with an error naming the journal, server alive"
    else fail "insert on a full disk: refused with an error naming the journal, server alive" "$st $(cat "$T_TMP/ins.json")"; fi
    if [ "$(n_ops)" = "$ops1" ] && [ "$(wc -c <"$T_TMP/state/journal.lqj")" = "$size1" ]; then
        pass "the refused insert changed neither the state nor the journal"
    else fail "the refused insert changed neither the state nor the journal" "ops $(n_ops) vs $ops1, journal $(wc -c <"$T_TMP/state/journal.lqj") vs $size1"; fi
    st=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"the","max_tokens":2}')
    if [ "$st" = 200 ]; then pass "a full disk does not stop generation"; else fail "a full disk does not stop generation" "$st"; fi
    kill -KILL "$PID"; wait "$PID" 2>/dev/null
    rm -f "$T_TMP/state/fill" "$T_TMP/state/fill2"
    if start_server j2 "$V" --state-dir "$T_TMP/state" --threads 1; then
        if [ "$(n_ops)" = "$ops1" ]; then pass "after SIGKILL and restart: exactly the acknowledged edits"
        else fail "after SIGKILL and restart: exactly the acknowledged edits" "ops $(n_ops) vs $ops1"; fi
        st=$(insert Lemuria)
        if [ "$st" = 200 ] && [ "$(n_ops)" -gt "$ops1" ]; then pass "with space back, inserts are accepted again"
        else fail "with space back, inserts are accepted again" "$st $(cat "$T_TMP/ins.json")"; fi
        kill -TERM "$PID"; wait "$PID"
    else fail "restart on the journal written next to a full disk"; fi
fi
done_tests
