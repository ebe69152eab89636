#!/bin/sh
# HTTPS and WSS from `larql serve --tls-cert --tls-key` (libmicrohttpd with GnuTLS), checked
# by a client that verifies a certificate made here with openssl; the options' bad input.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
if ! command -v openssl >/dev/null 2>&1; then
    skip "HTTPS" "openssl is not installed (scripts/deps.sh installs it)"; done_tests; exit 0
fi
M="$T_TMP/m.gguf"
"$LARQL" make-model --out "$M" --preset tiny --seed 4 >/dev/null 2>&1 || { fail "fixture"; done_tests; exit 1; }
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T_TMP/key.pem" -out "$T_TMP/cert.pem" -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" >/dev/null 2>&1 ||
    { fail "a self-signed certificate"; done_tests; exit 1; }
"$LARQL" serve "$M" --port 0 --threads 1 --tls-cert "$T_TMP/cert.pem" --tls-key "$T_TMP/key.pem" \
    >"$T_TMP/tls.out" 2>"$T_TMP/tls.err" &
PID=$!; PIDS="$PIDS $PID"; PORT=""; i=0
while [ $i -lt 300 ] && [ -z "$PORT" ]; do
    PORT=$(sed -n 's/^listening on https:\/\/[^:]*:\([0-9]*\)$/\1/p' "$T_TMP/tls.out" 2>/dev/null)
    kill -0 "$PID" 2>/dev/null || break
    [ -n "$PORT" ] || sleep 0.1; i=$((i + 1))
done
if [ -n "$PORT" ]; then
    pass "serve --tls-cert --tls-key says listening on https://"
    run_py tls.log "$HTTP_DIR/tls.py" "$PORT" "$T_TMP/cert.pem" "$PID"
    kill -TERM "$PID" 2>/dev/null; wait "$PID"
else
    fail "serve --tls-cert --tls-key says listening on https://" "$(cat "$T_TMP/tls.err")"
fi
# bad input: each refused at start with the reason, never a server without TLS
printf 'not a certificate\n' >"$T_TMP/junk.pem"
: >"$T_TMP/empty.pem"
bad() {
    name=$1; want=$2; shift 2
    if "$LARQL" serve "$M" --port 0 "$@" >"$T_TMP/bad.out" 2>&1; then fail "$name: refused" "it started"
    elif grep -q -- "$want" "$T_TMP/bad.out"; then pass "$name: refused, saying $want"
    else fail "$name: refused, saying $want" "$(cat "$T_TMP/bad.out")"; fi
}
bad "a certificate without a key" "both --tls-cert and --tls-key" --tls-cert "$T_TMP/cert.pem"
bad "a key without a certificate" "both --tls-cert and --tls-key" --tls-key "$T_TMP/key.pem"
bad "a certificate file that does not exist" "No such file" --tls-cert "$T_TMP/nope.pem" --tls-key "$T_TMP/key.pem"
bad "an empty key file" "not a PEM text file" --tls-cert "$T_TMP/cert.pem" --tls-key "$T_TMP/empty.pem"
bad "a certificate that is not PEM" "check that --tls-cert" --tls-cert "$T_TMP/junk.pem" --tls-key "$T_TMP/key.pem"
bad "the key given as the certificate" "check that --tls-cert" --tls-cert "$T_TMP/key.pem" --tls-key "$T_TMP/key.pem"
done_tests
