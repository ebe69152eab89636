#!/bin/sh
# make bench: builds the 2B-4T-shaped random BitNet GGUF on first use (about 1.2 GB, never
# committed) and prints the engine and kernel figures with the roofline they answer to.
set -e
BUILD=${BUILD:-build}
MODEL=${LQ_BENCH_MODEL:-$BUILD/models/bench-2b4t.gguf}
mkdir -p "$(dirname "$MODEL")"
if [ ! -f "$MODEL" ]; then
    echo "generating $MODEL (2B-4T shape: 30 layers, 2560, 6912, heads 20/5, vocab 128256)"
    "$BUILD/larql" make-model --preset 2b --out "$MODEL"
fi
echo "## machine"
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /cpu: /'
echo "cores: $(nproc), memory: $(free -g | awk '/Mem:/{print $2}') GiB"
echo
if [ -x "$BUILD/bench/bench_kernels" ]; then
    echo "## kernels"
    "$BUILD/bench/bench_kernels"
    echo
fi
echo "## engine ($MODEL): decode 1/2 threads, prefill 128/512, batched decode B=1/2/4/8"
"$BUILD/bench/bench_engine" "$MODEL" --runs "${LQ_BENCH_RUNS:-5}"
echo
echo "## the bounded lm_head: generation decode exact vs bounded (alternating runs), bytes per token, bound tightness by copy width"
"$BUILD/bench/bench_engine" "$MODEL" --runs "${LQ_BENCH_RUNS:-5}" --threads-list 2 --decode 64 --only refs,lmhead,lmbits
echo
# the same model with llama.cpp's ternary types (the same trits, each 256-block's d the I2_S
# scale): decode next to I2_S, the three in turns within each run
for ty in tq2_0 tq1_0; do
    TQM="${MODEL%.gguf}-$ty.gguf"
    if [ ! -f "$TQM" ]; then
        echo "generating $TQM (the 2B-4T shape with $ty projections)"
        "$BUILD/larql" make-model --preset 2b --proj-type "$ty" --out "$TQM"
    fi
done
echo "## decode with TQ2_0 / TQ1_0 projections vs I2_S (same weights, bytes per token, same runs)"
"$BUILD/bench/bench_engine" "$MODEL" --runs "${LQ_BENCH_RUNS:-5}" --threads-list 2 --only vs \
    --vs "${MODEL%.gguf}-tq2_0.gguf,${MODEL%.gguf}-tq1_0.gguf"
echo
# the 8B shape (issue 27): Llama3-8B-1.58 in HF1BitLLM's layout (llama + I2_S, SiLU, no
# sub-norms, untied F16 output), 3.9 GB written in about 35 s into a temporary directory that is
# removed afterwards (LQ_BENCH_8B_MODEL=FILE keeps one; LQ_BENCH_8B=0 skips, as does a machine
# with less than 6 GiB available: the weights are copied into 2 MB pages at load)
if [ "${LQ_BENCH_8B:-1}" != 0 ]; then
    avail=$(awk '/MemAvailable/{print int($2/1048576)}' /proc/meminfo)
    if [ "${avail:-0}" -lt 6 ]; then
        echo "## 8B shape: skipped (${avail} GiB available, 6 needed)"
    else
        M8=${LQ_BENCH_8B_MODEL:-}
        T8=
        if [ -z "$M8" ]; then
            T8=$(mktemp -d "${TMPDIR:-/tmp}/larql-bench-8b.XXXXXX")
            trap 'rm -rf "$T8"' EXIT INT TERM
            M8="$T8/bench-8b.gguf"
        fi
        if [ ! -f "$M8" ]; then
            echo "generating $M8 (Llama3-8B-1.58 shape: 32 layers, 4096, 14336, heads 32/8, vocab 128256)"
            "$BUILD/larql" make-model --preset 8b --out "$M8"
        fi
        echo "## engine, 8B shape ($M8): decode and prefill 128, 2 threads, bytes per token and rooflines"
        "$BUILD/bench/bench_engine" "$M8" --runs "${LQ_BENCH_RUNS:-5}" --threads-list 2 --decode 16 \
            --prefill-list 128 --only refs,decode,prefill
        if [ -n "$T8" ]; then rm -rf "$T8"; trap - EXIT INT TERM; fi
    fi
    echo
fi
echo "## engine with --lm-head q8 (decode only) and its effect on the logits"
"$BUILD/bench/bench_engine" "$MODEL" --runs "${LQ_BENCH_RUNS:-5}" --lm-head q8 --only refs,decode,q8acc

# speculative decoding (prompt lookup): tokens/s with and without drafts in alternating runs, the
# acceptance rate, and what a verification pass of T rows costs; on the trained model (quoting,
# free text) and on the 2B shape (whose random weights never repeat a text: a request with a
# prediction of its output, and a random prompt for the bookkeeping's cost)
if [ -x "$BUILD/bench/bench_draft" ]; then
    echo
    echo "## speculative decoding (--draft ngram vs none)"
    "$BUILD/bench/bench_draft" models/tinystories-ternary.gguf --runs "${LQ_BENCH_RUNS:-5}"
    "$BUILD/bench/bench_draft" "$MODEL" --runs "${LQ_BENCH_RUNS:-5}" --decode 64
fi

# constrained decoding: the grammar mask's cost per token under a 10-field JSON schema, next
# to the decode step, on the trained model's 4,096-token vocabulary and the 2B shape's 128,256
if [ -x "$BUILD/bench/bench_grammar" ]; then
    echo
    echo "## grammar masks (10-field JSON schema)"
    "$BUILD/bench/bench_grammar" models/tinystories-ternary.gguf --tokens 200 --runs "${LQ_BENCH_RUNS:-5}"
    "$BUILD/bench/bench_grammar" "$MODEL" --tokens 64 --runs 2
fi

# vindex: describe/walk latency, concurrent queries/s and the gate prefilter on the 2B-shaped
# f16 browse vindex, built from the GGUF above on first use (a few minutes; without the relation
# clusters, whose k-means over the 2B shape's knowledge band is not what these figures compare)
VINDEX=${LQ_BENCH_VINDEX:-$BUILD/models/bench-2b4t.vindex}
if [ -x "$BUILD/bench/bench_vindex" ]; then
    if [ ! -f "$VINDEX/index.json" ]; then
        echo "building $VINDEX (browse, f16)"
        "$BUILD/larql" convert gguf-to-vindex "$MODEL" --output "$VINDEX" --f16 --no-clusters
    fi
    echo
    echo "## vindex ($VINDEX)"
    "$BUILD/bench/bench_vindex" "$VINDEX" --runs "${LQ_BENCH_RUNS:-5}"
fi

# editing: INSERT latency, walk-mode infer vs KNN-store size, describe with 1000 patched
# features, on the 2B-shaped inference vindex (keep-quant, f16), built on first use
EVINDEX=${LQ_BENCH_EDIT_VINDEX:-$BUILD/models/bench-2b4t-inference.vindex}
if [ -x "$BUILD/bench/bench_edit" ]; then
    if [ ! -f "$EVINDEX/index.json" ]; then
        echo "building $EVINDEX (keep-quant, inference, f16)"
        "$BUILD/larql" convert gguf-to-vindex "$MODEL" --output "$EVINDEX" --keep-quant --level inference --f16 --no-clusters
    fi
    echo
    echo "## editing ($EVINDEX)"
    "$BUILD/bench/bench_edit" "$EVINDEX" --runs "${LQ_BENCH_RUNS:-5}"
fi
