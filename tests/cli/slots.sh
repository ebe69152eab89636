#!/bin/sh
# The prompt cache across a chat's turns and across restarts (tests/http/slots.py): the next
# turn's text prefilled after each answer, and llama-server's POST /slots/{id}?action=save|
# restore under --slot-save-path, with its bad input (names, ids, actions, short, corrupt and
# foreign files) and the route off without the flag.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"
if ! command -v curl >/dev/null || ! command -v python3 >/dev/null; then
    skip "slot tests" "curl or python3 missing"; done_tests; exit 0
fi
export PYTHONPATH="$HTTP_DIR${PYTHONPATH:+:$PYTHONPATH}"
# the trained model: its answers are text a client sends back (a random model's bytes may
# hold NULs, which JSON refuses); a random fixture for another model's file
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M="$ROOT/models/tinystories-ternary.gguf"; M2="$T_TMP/other.gguf"; D="$T_TMP/slots"
if [ ! -f "$M" ]; then fail "models/tinystories-ternary.gguf is present"; done_tests; exit 1; fi
mkdir -p "$D"
"$LARQL" make-model --out "$M2" --preset tiny --seed 8 >/dev/null 2>&1

check_fails "serve: --slot-save-path must be a directory" "slot-save-path" \
    "$LARQL" serve "$M" --port 0 --slot-save-path "$T_TMP/none"
if start_server s1 "$M" --threads 1 --slot-save-path "$D"; then
    run_py turns.log "$HTTP_DIR/slots.py" "$PORT" turns
    run_py save.log "$HTTP_DIR/slots.py" "$PORT" save "$D"
    kill -TERM "$PID"; wait "$PID" 2>/dev/null
fi
if [ -s "$D/chat.bin" ]; then
    head -c 40 "$D/chat.bin" >"$D/short.bin"
    cp "$D/chat.bin" "$D/corrupt.bin"
    printf 'X' | dd of="$D/corrupt.bin" bs=1 seek=200 conv=notrunc 2>/dev/null
    printf 'not a slot file at all, but long enough to have a header of its own.' >"$D/junk.bin"
fi
if start_server s2 "$M" --threads 1 --slot-save-path "$D"; then
    run_py restore.log "$HTTP_DIR/slots.py" "$PORT" restore "$D"
    kill -TERM "$PID"; wait "$PID" 2>/dev/null
fi
if start_server s3 "$M2" --threads 1 --slot-save-path "$D"; then
    run_py foreign.log "$HTTP_DIR/slots.py" "$PORT" foreign "$D"
    kill -TERM "$PID"; wait "$PID" 2>/dev/null
fi
if start_server s4 "$M" --threads 1; then
    run_py off.log "$HTTP_DIR/slots.py" "$PORT" off
    kill -TERM "$PID"; wait "$PID" 2>/dev/null
fi
done_tests
