#!/bin/sh
# The main job on the embedded default model, models/tinystories-ternary.gguf: a BitNet b1.58
# model the project trained itself (tools/train/), ternary weights in microsoft's I2_S layout.
# Tells a story, builds a vindex of the model and asks it what it knows about France.
set -e
BUILD=${1:-build}
MODEL=models/tinystories-ternary.gguf
VINDEX="$BUILD/models/tinystories-ternary.vindex"
mkdir -p "$BUILD/models"
"$BUILD/larql" info "$MODEL"
echo
echo "\$ larql run $MODEL --prompt 'Once upon a time' -n 96 --temp 0"
"$BUILD/larql" run "$MODEL" --prompt "Once upon a time" -n 96 --temp 0
echo
if [ ! -f "$VINDEX/index.json" ] || [ "$MODEL" -nt "$VINDEX/index.json" ]; then
    rm -rf "$VINDEX"
    "$BUILD/larql" convert gguf-to-vindex "$MODEL" --output "$VINDEX" --keep-quant --level inference >/dev/null
fi
echo "\$ larql describe $VINDEX France"
"$BUILD/larql" describe "$VINDEX" France
echo
echo "\$ larql infer $VINDEX 'The capital of France is' --top 3"
"$BUILD/larql" infer "$VINDEX" "The capital of France is" --top 3
echo
echo "Chat with it: $BUILD/larql chat $MODEL   (try: What is the capital of Japan?)"
