#!/bin/sh
# The README's first command: install what is missing, build, and run the embedded default
# model (models/tinystories-ternary.gguf, a small BitNet b1.58 model trained by tools/train/).
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
make -j"$(nproc)"
make demo
