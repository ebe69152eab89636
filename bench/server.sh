#!/bin/sh
# make bench-server: `larql serve` under load on loopback (bench/server_load.py, stdlib
# Python), on the 2B-4T-shaped random model (generated on first use, about 1.2 GB, never
# committed):
#   - the engine in the same run (bench/bench_server.c, 2 threads): single-stream decode
#     through lq_generate and lq_session_decode_batch at B = 1, 4, 16
#   - at 1, 2, 4, 8 and 16 concurrent streaming chat requests (LQ_BENCH_STREAMS; greedy,
#     LQ_BENCH_TOKENS tokens each): aggregate and per-stream tokens/s, the ratio to one
#     stream, time to first token p50/p99, and the same prompts prefilled back to back (the
#     reference of the first-token goal)
#   - describe requests/s and p50/p99 latency at 1, 16 and 64 keep-alive connections on a
#     2B-shaped browse vindex (30 layers x 6912 features x 2560; vocabulary cut to 512 so that
#     the conversion's down_meta pass, features x vocab x dim, takes ~30 s instead of hours)
#   - server RSS
# Median of LQ_BENCH_RUNS runs (default 3), min-max shown. The machine is shared: say so.
set -e
BUILD=${BUILD:-build}
RUNS=${LQ_BENCH_RUNS:-3}
TOKENS=${LQ_BENCH_TOKENS:-32}
STREAMS=${LQ_BENCH_STREAMS:-1 2 4 8 16}
SECONDS_DESCRIBE=${LQ_BENCH_DESCRIBE_S:-5}
MODEL=${LQ_BENCH_MODEL:-$BUILD/models/bench-2b4t.gguf}
VXSRC=$BUILD/models/bench-2bshape-v512.gguf
VX=$BUILD/models/bench-2bshape-v512.vindex
LOAD="$(dirname "$0")/server_load.py"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/larql-bench-server.XXXXXX")
SRV=""
cleanup() { [ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT INT TERM

mkdir -p "$(dirname "$MODEL")"
if [ ! -f "$MODEL" ]; then
    echo "generating $MODEL (2B-4T shape: 30 layers, 2560, 6912, heads 20/5, vocab 128256)"
    "$BUILD/larql" make-model --preset 2b --out "$MODEL"
fi
if [ ! -f "$VX/index.json" ]; then
    echo "generating $VX (2B shape, vocabulary 512)"
    "$BUILD/larql" make-model --out "$VXSRC" --dim 2560 --ffn 6912 --layers 30 --heads 20 --kv-heads 5 \
        --vocab 512 --ctx 4096 --emb-type f16 >/dev/null
    "$BUILD/larql" convert gguf-to-vindex "$VXSRC" --output "$VX" --level browse --f16 --threads 2 --no-clusters >/dev/null
fi

# start_server ARGS...: larql serve --port 0 in the background; sets SRV (pid) and PORT
start_server() {
    "$BUILD/larql" serve "$@" --port 0 >"$OUT/srv.out" 2>"$OUT/srv.err" &
    SRV=$!; PORT=""
    i=0
    while [ $i -lt 600 ]; do
        PORT=$(sed -n 's/^listening on http:\/\/[^:]*:\([0-9]*\)$/\1/p' "$OUT/srv.out")
        [ -n "$PORT" ] && curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && return 0
        kill -0 "$SRV" 2>/dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    echo "server did not start: $(cat "$OUT/srv.err")"; exit 1
}
stop_server() { kill -TERM "$SRV"; wait "$SRV" || true; SRV=""; }
rss() { awk '/^VmRSS/{r=$2} /^VmHWM/{h=$2} END{printf "RSS %.0f MiB (peak %.0f MiB)", r/1024, h/1024}' "/proc/$SRV/status"; }

echo "## machine"
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /cpu: /'
echo "cores: $(nproc), memory: $(free -g | awk '/Mem:/{print $2}') GiB, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "runs: $RUNS (median, min-max), $TOKENS tokens per stream"
echo

echo "## engine in the same run (bench_server: lq_generate and lq_session_decode_batch)"
"$BUILD/bench/bench_server" "$MODEL" --runs "$RUNS" --tokens "$TOKENS" --threads 2
echo

echo "## streaming chat on $MODEL (larql serve --threads 2 --ctx 1024 --max-concurrent 32)"
start_server "$MODEL" --threads 2 --ctx 1024 --max-concurrent 32
python3 "$LOAD" chat "$PORT" 1 8 >/dev/null # warm-up: weights paged in
for n in $STREAMS; do
    r=0
    while [ $r -lt "$RUNS" ]; do
        python3 "$LOAD" chat "$PORT" "$n" "$TOKENS" >>"$OUT/chat.jsonl"
        python3 "$LOAD" prefill "$PORT" "$n" >>"$OUT/chat.jsonl"
        r=$((r + 1))
    done
    echo "after $n stream(s): $(rss)"
done
python3 "$LOAD" summary "$OUT/chat.jsonl"
curl -s "http://127.0.0.1:$PORT/v1/runtime" | python3 -c 'import json,sys; j=json.load(sys.stdin)["scheduler"]; print("scheduler: max batch seen %d, steps by batch size %s" % (j["max_batch_seen"], json.dumps(j["batch_size_histogram"])))'
stop_server
echo

echo "## describe on $VX (larql serve --threads 2 --max-concurrent 128)"
start_server "$VX" --threads 2 --max-concurrent 128
python3 "$LOAD" describe "$PORT" 1 1 >/dev/null # warm-up
for c in 1 16 64; do
    r=0
    while [ $r -lt "$RUNS" ]; do
        python3 "$LOAD" describe "$PORT" "$c" "$SECONDS_DESCRIBE" >>"$OUT/describe.jsonl"
        r=$((r + 1))
    done
done
python3 "$LOAD" summary "$OUT/describe.jsonl"
echo "describe server: $(rss)"
stop_server
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
