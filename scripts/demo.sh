#!/bin/sh
# Generates the default model into $BUILD/models/ and runs the main job on it.
set -e
BUILD=${1:-build}
MODEL="$BUILD/models/larql-demo.gguf"
mkdir -p "$BUILD/models"
[ -f "$MODEL" ] || "$BUILD/larql" make-model --out "$MODEL" --preset demo
"$BUILD/larql" info "$MODEL"
echo
echo "\$ larql run $MODEL --prompt 'The capital of France is' -n 24 --temp 0"
"$BUILD/larql" run "$MODEL" --prompt "The capital of France is" -n 24 --temp 0
