#!/bin/sh
# USE REMOTE: LQL statements against a real `larql serve` on 127.0.0.1 answer as the local
# session does (STATS, DESCRIBE, WALK, INFER, SELECT, SHOW RELATIONS, INSERT, SHOW PATCHES);
# statements that need a local vindex, unreachable servers and non-http URLs are clear errors.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
if ! command -v curl >/dev/null; then skip "USE REMOTE" "curl missing"; done_tests; exit 0; fi
M="$T_TMP/m.gguf"; V="$T_TMP/v"
"$LARQL" make-model --out "$M" --preset demo --seed 3 --plant ' France>Paris@1:5' >/dev/null 2>&1 || { fail "make-model"; done_tests; exit 1; }
"$LARQL" convert gguf-to-vindex "$M" --output "$V" --keep-quant --level inference >/dev/null 2>&1 || { fail "convert"; done_tests; exit 1; }
start_server remote "$V" || { fail "server starts"; done_tests; exit 1; }
U="http://127.0.0.1:$PORT"
rq() { # rq NAME STATEMENTS PATTERN...: over USE REMOTE, exit 0 and every pattern on stdout
    n=$1; s=$2; shift 2
    if ! "$LARQL" lql -c "USE REMOTE \"$U\"; $s" >"$T_TMP/out" 2>"$T_TMP/err"; then fail "$n" "$(head -c 300 "$T_TMP/err")"; return; fi
    for pat in "$@"; do grep -Eq -- "$pat" "$T_TMP/out" || { fail "$n" "no '$pat' in: $(head -c 500 "$T_TMP/out")"; return; }; done
    pass "$n"
}
rq "USE REMOTE + STATS" 'STATS;' "^Connected: http://127\.0\.0\.1:$PORT \(model larql-demo, 4 layers, 2048 features\)$" '^Layers: +4$' "^Remote: +$U$"
rq "DESCRIBE over HTTP" 'DESCRIBE " France" LIMIT 3;' '^ France$' '^ +→ Paris +2[0-9]\.[0-9]  L1$'
rq "WALK over HTTP" 'WALK " France" TOP 3;' '^  L1 F5 +2[0-9]\.[0-9]  Paris$'
"$LARQL" lql "$V" -c 'INFER " France" TOP 2;' 2>/dev/null | awk '/^ +[12]\. /{print $2}' >"$T_TMP/local"
rq "INFER over HTTP" 'INFER " France" TOP 2;' '^Predictions \(walk FFN, remote\):$'
awk '/^ +[12]\. /{print $2}' "$T_TMP/out" >"$T_TMP/rem"
if [ -s "$T_TMP/local" ] && cmp -s "$T_TMP/local" "$T_TMP/rem"; then pass "remote INFER answers as the local session"
else fail "remote INFER answers as the local session" "$(cat "$T_TMP/local") vs $(cat "$T_TMP/rem")"; fi
rq "SELECT over HTTP" 'SELECT * FROM EDGES WHERE entity = "Paris" AND layer = 1;' '^L1 +F5 +Paris +27\.[0-9]{4}$' '^1 rows \(1 matched\)$'
rq "SHOW RELATIONS over HTTP" 'SHOW RELATIONS;' '^Relation +Count$'
rq "INSERT over HTTP, then INFER sees it" 'INSERT INTO EDGES (entity, relation, target) VALUES ("Atlantis", "capital", "Paris"); INFER "The capital of Atlantis is" TOP 1; SHOW PATCHES;' \
    '^Inserted: Atlantis —\[capital\]→ Paris \(remote, KNN store\)$' '^   1\. Paris +\(100\.00%\)$' '^Active patches \(1, remote\):$'
rq "USE \"dir\" ends the remote session" "USE \"$V\"; SHOW LAYERS;" '^L3 '
check_fails "a statement that needs a local vindex" "TRACE is not supported over USE REMOTE" "$LARQL" lql -c "USE REMOTE \"$U\"; TRACE \"x\";"
check_fails "an unreachable server" "cannot connect to 127.0.0.1:1" "$LARQL" lql -c 'USE REMOTE "http://127.0.0.1:1";'
check_fails "https" "https is not supported" "$LARQL" lql -c 'USE REMOTE "https://127.0.0.1:1";'
check_fails "not an http URL" "is not an http:// URL" "$LARQL" lql -c 'USE REMOTE "ftp://x";'
check_fails "a bad port" "bad port" "$LARQL" lql -c 'USE REMOTE "http://127.0.0.1:8x8/";'
check_fails "a path the server does not serve" "remote: 404" "$LARQL" lql -c "USE REMOTE \"$U/nope\";"
done_tests
