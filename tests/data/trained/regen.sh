#!/bin/sh
# Rewrites the goldens of tests/cli/trained.sh from the committed model, after a deliberate
# retraining (models/tinystories-ternary.gguf changed): the greedy ids of "Once upon a time" and
# the chat answer to "What is the capital of France?". Read the new values before committing:
# they are what the test will hold the engine to.  sh tests/data/trained/regen.sh [build/larql]
set -e
cd "$(dirname "$0")/../../.."
LARQL=${1:-build/larql}
M=models/tinystories-ternary.gguf
D=tests/data/trained
"$LARQL" run "$M" --prompt "Once upon a time" -n 48 --temp 0 --ids-out 2>/dev/null >"$D/greedy_ids.txt"
"$LARQL" run "$M" --chat --prompt "What is the capital of France?" -n 32 --temp 0 2>/dev/null >"$D/chat_golden.txt"
cat "$D/greedy_ids.txt" "$D/chat_golden.txt"
