#!/bin/sh
# LARQL's own statements against a vindex of the trained model: every statement its parser
# tests expect to parse and every statement of its docs (tests/data/lql/*.txt), each run as
# `larql lql VINDEX -c STATEMENT` in a scratch directory (tests/cli/lql_corpus.py). Counts
# statements that ran, runtime errors where the vindex lacks what they need (another vindex,
# a layer beyond the model's 4, a hub model), unsupported ones, parse errors and crashes.
# Goals (issue 28): >= 97% of the parser-test statements and >= 95% of the doc statements
# parse and run, no crash.
. "$(dirname "$0")/lib.inc"
case $LARQL in /*) ;; *) LARQL="$PWD/$LARQL" ;; esac
D=$(cd "$(dirname "$0")/../.." && pwd)
trained_vindex "LARQL's statements"
for f in larql_parser:97 larql_docs:95; do
    name=${f%%:*}; goal=${f##*:}
    if python3 "$D/tests/cli/lql_corpus.py" "$LARQL" "$V" "$D/tests/data/lql/$name.txt" --min-run "$goal" >"$T_TMP/c" 2>&1; then
        pass "$name: no crash, >= $goal% parse and run"
    else
        fail "$name: no crash, >= $goal% parse and run" "$(tail -c 600 "$T_TMP/c")"
    fi
    sed 's/^/# /' "$T_TMP/c"
done
done_tests
