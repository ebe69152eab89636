#!/bin/sh
# Restart time of `larql serve --state-dir` with N global edits and S sessions of K edits
# each (bench/restart.py), KNN inserts on the trained model's vindex (models/
# tinystories-ternary.gguf converted here; a demo-preset fixture when it is absent; or
# LQ_BENCH_VINDEX):
#   sh bench/restart.sh [N=3000] [S=64] [K=4]
# Prints the fill time, the state directory's size, RSS before the kill and after the
# restart, and the restart time until /v1/health answers.
set -e
LARQL=${LARQL:-build/larql}
N=${1:-3000}; S=${2:-64}; K=${3:-4}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/larql-bench-restart.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
VX=${LQ_BENCH_VINDEX:-}
if [ -z "$VX" ]; then
    VX="$OUT/v"
    M="$(dirname "$0")/../models/tinystories-ternary.gguf"
    if [ ! -f "$M" ]; then
        M="$OUT/m.gguf"
        "$LARQL" make-model --out "$M" --preset demo --layers 4 --seed 7 >/dev/null
    fi
    "$LARQL" convert gguf-to-vindex "$M" --output "$VX" --keep-quant --level inference >/dev/null
fi
python3 "$(dirname "$0")/restart.py" "$LARQL" "$VX" "$OUT/state" "$N" "$S" "$K"
