#!/bin/sh
# Reproduces models/tinystories-ternary.gguf from nothing but this tree and the TinyStories-260K
# teacher (stories260K.gguf, llama2.c's model; pass its path). Writes into WORK (default
# /tmp/larql-train): corpus/, vocab.json, run/ (checkpoints, log, summary.json, model.gguf).
#   sh tools/train/reproduce.sh TEACHER.gguf [WORK] [MINUTES]
# Then: cp WORK/run/model.gguf models/tinystories-ternary.gguf
set -e
cd "$(dirname "$0")/../.."
teacher=${1:?usage: reproduce.sh TEACHER.gguf [WORK] [MINUTES]}
work=${2:-/tmp/larql-train}
minutes=${3:-50}
py=/usr/bin/python3
sh tools/train/setup.sh
[ -x build/larql ] || make -j2
mkdir -p "$work"
$py tools/train/corpus.py --larql build/larql --teacher "$teacher" --out "$work/corpus" \
    --stories 8000 --valid-stories 200 --fact-docs 6000 --chats 600
$py tools/train/bpe.py --corpus "$work/corpus/train.jsonl" --vocab 4096 --out "$work/vocab.json"
$py tools/train/train.py --corpus "$work/corpus" --vocab "$work/vocab.json" --out "$work/run" \
    --minutes "$minutes" --dim 256 --ffn 768 --layers 4 --heads 4 --kv-heads 4 --seq 256 --batch 8
$py tools/train/check_logits.py --ckpt "$work/run/ckpt.pt" --gguf "$work/run/model.gguf" --larql build/larql
