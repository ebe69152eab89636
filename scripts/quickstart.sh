#!/bin/sh
# The README's first command: install what is missing, build, generate the embedded default
# model (a small random BitNet b1.58 GGUF, deterministic from its seed) and run it.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
make -j"$(nproc)"
make demo
