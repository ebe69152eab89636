#!/bin/sh
# Reproduces models/tinystories-ternary.gguf from this tree and the TinyStories-260K teacher
# (stories260K.gguf, llama2.c's model; pass its path). Writes into WORK (default
# /tmp/larql-train): corpus/, vocab.json, run/ (ckpt.pt, log.txt, summary.json, model.gguf).
#   sh tools/train/reproduce.sh TEACHER.gguf [WORK]
# Then: cp WORK/run/model.gguf models/tinystories-ternary.gguf
# The schedule is in wall time (the shipped run: 2 cores shared with other work, ~1,100
# training tokens/s), so a faster machine sees more tokens in the same minutes.
set -e
cd "$(dirname "$0")/../.."
teacher=${1:?usage: reproduce.sh TEACHER.gguf [WORK]}
work=${2:-/tmp/larql-train}
py=/usr/bin/python3
sh tools/train/setup.sh
[ -x build/larql ] || make -j2
mkdir -p "$work"
cp build/larql "$work/larql" # a rebuild of build/larql must not pull it from under the sampler
$py tools/train/corpus.py --larql "$work/larql" --teacher "$teacher" --out "$work/corpus" \
    --stories 3600 --valid-stories 200 --fact-docs 4000 --chats 600 --jobs 4
$py tools/train/bpe.py --corpus "$work/corpus/train.jsonl" --vocab 4096 --out "$work/vocab.json"
shape="--dim 256 --ffn 768 --layers 4 --heads 4 --kv-heads 4 --seq 256 --batch 8"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 # one thread: on a shared 2-core machine, two thrash
# 48 minutes of a cosine schedule, with the FFN sparsity term (features take single roles)
$py tools/train/train.py --corpus "$work/corpus" --vocab "$work/vocab.json" --out "$work/run" $shape \
    --threads 1 --minutes 48 --sparsity 1.0 --embed-std 0.02
# 7 more minutes from there on a corpus with 2,500 chats (a fresh schedule at a quarter of the
# learning rate), which made `larql chat` answer in the chat format
$py tools/train/corpus.py --larql "$work/larql" --teacher "$teacher" --out "$work/corpus-chat" \
    --stories 3600 --valid-stories 200 --fact-docs 4000 --chats 2500 --jobs 4
$py tools/train/train.py --corpus "$work/corpus-chat" --vocab "$work/vocab.json" --out "$work/run-chat" $shape \
    --threads 1 --minutes 7 --sparsity 1.0 --lr 5e-4 --seed 2 --init "$work/run/ckpt.pt"
cp "$work/run-chat/ckpt.pt" "$work/run/ckpt.pt"
# 24 more minutes on the same corpus with the describe term (model.describe_loss: the 64 facts
# of facts.py in describe's own arithmetic, each step, weight 0.5), a fresh schedule at 1e-3,
# so that features keyed on an entity's embedding carry its capital and language
$py tools/train/train.py --corpus "$work/corpus-chat" --vocab "$work/vocab.json" --out "$work/run-describe" $shape \
    --threads 1 --minutes 24 --sparsity 1.0 --lr 1e-3 --seed 3 --describe 0.5 --init "$work/run/ckpt.pt"
cp "$work/run-describe/ckpt.pt" "$work/run/ckpt.pt"
# the shipped file: the embedding scaled by 4 (the same function; see export.py rescale_embedding)
$py tools/train/export.py --ckpt "$work/run/ckpt.pt" --out "$work/run/model.gguf" --alpha 4
$py tools/train/check_logits.py --ckpt "$work/run/ckpt.pt" --gguf "$work/run/model.gguf" --larql build/larql
$py tools/train/check_facts.py --gguf "$work/run/model.gguf" --larql build/larql
