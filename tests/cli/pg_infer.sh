#!/bin/sh
# pg_infer against a real PostgreSQL 15: builds ext/pg_infer, installs it into a staging
# directory (make install DESTDIR=..., loaded through Debian's extension_destdir), starts a
# throwaway cluster in a temp directory (socket only, as the postgres user when run as
# root), and runs ext/pg_infer/test/sql/*.sql with psql, comparing the output (temp paths
# and ports normalised) with test/expected/*.out. Fixtures: a generated BitNet GGUF with
# planted facts, converted to a browse vindex, an inference vindex, a second model for
# infer_diff, and a malformed copy. Skipped when PostgreSQL 15 or its server headers are
# not installed. PGI_KEEP=1 keeps the temp directory.
. "$(dirname "$0")/lib.inc"
. "$(dirname "$0")/server.inc"  # run_py (its exit trap is replaced by cleanup_pg below)
ROOT=$PWD
BUILD=${BUILD:-build}
# LQ_HUGEPAGES=1 would make the server's backends copy model weights, which infer() refuses
unset LQ_HUGEPAGES
PGBIN=${PGI_PGBIN:-/usr/lib/postgresql/15/bin}
EXT=$ROOT/ext/pg_infer

if [ ! -x "$PGBIN/pg_config" ] || [ ! -f "$($PGBIN/pg_config --includedir-server 2>/dev/null)/postgres.h" ]; then
    skip "pg_infer extension" "PostgreSQL 15 server or postgresql-server-dev-15 not installed (sh scripts/deps.sh --with-postgres installs them)"
    done_tests; exit 0
fi
if [ "$BUILD" != build ]; then
    # the module links build/liblarql.a; a sanitizer build cannot be loaded into postgres
    skip "pg_infer extension" "runs in the plain build's make test (BUILD=$BUILD)"
    done_tests; exit 0
fi

# ---- build and stage-install the extension ----
STAGE=$T_TMP/stage
if make -C "$EXT" PG_CONFIG="$PGBIN/pg_config" LQ_BUILD="$BUILD" LQ_CC="${CC:-cc}" >"$T_TMP/build.log" 2>&1 &&
   make -C "$EXT" PG_CONFIG="$PGBIN/pg_config" LQ_BUILD="$BUILD" LQ_CC="${CC:-cc}" install DESTDIR="$STAGE" >>"$T_TMP/build.log" 2>&1; then
    pass "extension builds and installs (staged)"
else
    fail "extension builds and installs (staged)" "$(tail -n 20 "$T_TMP/build.log")"; done_tests; exit 1
fi
if nm -D --defined-only "$EXT/pg_infer.so" | awk '{print $3}' | grep -v '^pgi_\|^pg_finfo_pgi_\|^_PG_init$\|^Pg_magic_func$' | grep -q .; then
    fail "module exports only its SQL entry points" "$(nm -D --defined-only "$EXT/pg_infer.so" | head)"
else
    pass "module exports only its SQL entry points"
fi
# test fixtures (the random-model writer, fact planting) live in their own module, not linked here
if nm "$EXT/pg_infer.so" 2>/dev/null | grep -q 'lq_fixture\|lq_fact_parse'; then
    fail "the module holds no fixture code" "$(nm "$EXT/pg_infer.so" | grep 'lq_fixture\|lq_fact_parse' | head -3)"
else
    pass "the module holds no fixture code"
fi
# its files depend on each other one way (pg_infer.h names the order)
if python3 "$(dirname "$0")/py/file_cycles.py" "$BUILD" pg_infer >"$T_TMP/cycles" 2>&1; then
    pass "no file-level cycle among pg_infer's files"
else
    fail "no file-level cycle among pg_infer's files" "$(grep CYCLE "$T_TMP/cycles")"
fi

# ---- fixtures ----
F=$T_TMP/fix
mkdir -p "$F"
printf '%s' "The capital of France is Paris . The capital of Germany is Berlin . The capital of Japan is Tokyo . France Paris France Paris France Paris Germany Berlin Germany Berlin Germany Berlin Japan Tokyo Japan Tokyo Japan Tokyo Italy Rome Italy Rome Italy Rome the model reads the text and the model knows the capital . " >"$F/corpus.txt"
if "$LARQL" make-model --out "$F/m.gguf" --preset demo --layers 4 --seed 99 --corpus-file "$F/corpus.txt" \
        --plant "France>Paris@1:17" --plant "Germany>Berlin@2:100" --plant "Japan>Tokyo@3:5" \
        --plant " France>Paris@0:42" >/dev/null 2>"$T_TMP/err" &&
   "$LARQL" make-model --out "$F/m2.gguf" --preset demo --layers 4 --seed 99 --corpus-file "$F/corpus.txt" \
        --plant "France>Paris@1:17" --plant "Germany>Tokyo@2:100" >/dev/null 2>>"$T_TMP/err" &&
   "$LARQL" convert gguf-to-vindex "$F/m.gguf" --output "$F/v" >/dev/null 2>>"$T_TMP/err" &&
   "$LARQL" convert gguf-to-vindex "$F/m2.gguf" --output "$F/v2" >/dev/null 2>>"$T_TMP/err" &&
   "$LARQL" convert gguf-to-vindex "$F/m.gguf" --output "$F/kq" --keep-quant --level inference >/dev/null 2>>"$T_TMP/err"; then
    pass "fixtures: planted model, browse, inference and second vindex"
else
    fail "fixtures: planted model, browse, inference and second vindex" "$(cat "$T_TMP/err")"; done_tests; exit 1
fi
# malformed vindex: gate_vectors.bin cut short
mkdir -p "$F/bad" && cp "$F/v/"* "$F/bad/" && head -c 1000 "$F/v/gate_vectors.bin" >"$F/bad/gate_vectors.bin"
# wider fixtures whose scans and opens take long enough to cancel and to truncate under: mid
# (8 layers x 2048 features x 512, 32 MB of gates), voc (a 128,256-token vocabulary, as 2B-4T)
if ! { "$LARQL" make-model --out "$F/mid.gguf" --preset demo --dim 512 --ffn 2048 --layers 8 --seed 5 >/dev/null 2>"$T_TMP/err" &&
       "$LARQL" convert gguf-to-vindex "$F/mid.gguf" --output "$F/mid" --no-clusters >/dev/null 2>>"$T_TMP/err" &&
       "$LARQL" make-model --out "$F/voc.gguf" --preset demo --dim 128 --ffn 128 --layers 2 --heads 2 --kv-heads 1 \
            --vocab 128256 --seed 5 >/dev/null 2>>"$T_TMP/err" &&
       "$LARQL" convert gguf-to-vindex "$F/voc.gguf" --output "$F/voc" --no-clusters >/dev/null 2>>"$T_TMP/err"; }; then
    fail "fixtures: mid-size and 128k-vocabulary vindexes" "$(cat "$T_TMP/err")"; done_tests; exit 1
fi
rm -f "$F/mid.gguf" "$F/voc.gguf"
# the model's own top-3 probabilities (4 decimals) for the infer() check
TOP=$("$LARQL" infer "$F/kq" "The capital of France is" --mode dense --top 3 --json 2>/dev/null |
      python3 -c 'import json,sys; print(",".join(str(p["probability"]) for p in json.load(sys.stdin)["predictions"]))' 2>/dev/null)

# ---- a throwaway cluster ----
RUN=""
if [ "$(id -u)" -eq 0 ]; then
    if ! id postgres >/dev/null 2>&1; then useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres; fi
    RUN="runuser -u postgres --"
    chown -R postgres "$T_TMP"
fi
chmod 755 "$T_TMP"
PORT=$((54000 + $$ % 1000))
DATA=$T_TMP/data
if ! $RUN "$PGBIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C.UTF-8 --no-sync -A trust >"$T_TMP/initdb.log" 2>&1; then
    fail "initdb" "$(tail -n 5 "$T_TMP/initdb.log")"; done_tests; exit 1
fi
cleanup_pg() {
    $RUN "$PGBIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1
    [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null
    [ -n "$HANG_PID" ] && kill "$HANG_PID" 2>/dev/null
    [ -z "$PGI_KEEP" ] && rm -rf "$T_TMP"
}
trap cleanup_pg EXIT INT TERM
# the start command in a file: the --state-db test stops and starts the cluster again
cat >"$T_TMP/pg_start.sh" <<EOF
exec $RUN "$PGBIN/pg_ctl" -D "$DATA" -l "$T_TMP/pg.log" -w -t 60 \\
    -o "-c listen_addresses='' -k $T_TMP -p $PORT -c fsync=off -c extension_destdir=$STAGE -c dynamic_library_path=$STAGE$($PGBIN/pg_config --pkglibdir):\\\$libdir" start
EOF
if sh "$T_TMP/pg_start.sh" >"$T_TMP/pgctl.log" 2>&1; then
    pass "cluster starts"
else
    fail "cluster starts" "$(cat "$T_TMP/pgctl.log" "$T_TMP/pg.log" 2>/dev/null | tail -n 10)"; done_tests; exit 1
fi
PSQL="$PGBIN/psql -X -q -h $T_TMP -p $PORT -U postgres"

# ---- remote backend: larql serve on the browse vindex; a socket that never answers ----
SRV_PORT=""
"$LARQL" serve "$F/kq" --port 0 --threads 1 >"$T_TMP/srv.out" 2>"$T_TMP/srv.err" &
SRV_PID=$!
i=0
while [ $i -lt 300 ]; do
    SRV_PORT=$(sed -n 's/^listening on http:\/\/[^:]*:\([0-9]*\)$/\1/p' "$T_TMP/srv.out")
    [ -n "$SRV_PORT" ] && curl -sf "http://127.0.0.1:$SRV_PORT/v1/health" >/dev/null 2>&1 && break
    SRV_PORT=""; kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.1; i=$((i + 1))
done
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
' >"$T_TMP/hang.port" 2>/dev/null &
HANG_PID=$!
i=0; while [ ! -s "$T_TMP/hang.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
HANG_PORT=$(cat "$T_TMP/hang.port")

# ---- the SQL files ----
export PGI_FIXDIR="$F" PGI_TOP="$TOP" PGI_REMOTE="http://127.0.0.1:$SRV_PORT" PGI_HANG="http://127.0.0.1:$HANG_PORT"
for sql in "$EXT"/test/sql/${PGI_SQL:-*}.sql; do  # PGI_SQL=name: one file
    name=$(basename "$sql" .sql)
    exp="$EXT/test/expected/$name.out"
    if [ "$name" = remote ] && [ -z "$SRV_PORT" ]; then fail "sql $name" "larql serve did not start: $(cat "$T_TMP/srv.err")"; continue; fi
    # every file in a fresh database (its own infer.models)
    $PSQL -d postgres -c "DROP DATABASE IF EXISTS pgi_$name" -c "CREATE DATABASE pgi_$name" >/dev/null 2>&1
    (cd "$EXT/test" && $PSQL -d "pgi_$name" -a -f "sql/$name.sql") 2>&1 |
        sed -e "s|$F|@FIX@|g" -e "s|127.0.0.1:$SRV_PORT|127.0.0.1:@PORT@|g" -e "s|127.0.0.1:$HANG_PORT|127.0.0.1:@HANG@|g" >"$T_TMP/$name.out"
    if diff -u "$exp" "$T_TMP/$name.out" >"$T_TMP/$name.diff" 2>&1; then
        pass "sql $name"
    else
        fail "sql $name" "$(head -c 3000 "$T_TMP/$name.diff")"
        [ -n "$PGI_ACCEPT" ] && cp "$T_TMP/$name.out" "$exp"
    fi
    if grep -q "server closed the connection\|terminated by signal" "$T_TMP/$name.out" "$T_TMP/pg.log"; then
        fail "sql $name: no backend crashed" "$(grep -m3 "terminated by signal" "$T_TMP/pg.log")"
    else
        pass "sql $name: no backend crashed"
    fi
done

# ---- pg_dump keeps the registry's rows (pg_extension_config_dump) ----
if "$PGBIN/pg_dump" -h "$T_TMP" -p "$PORT" -U postgres pgi_pg_infer >"$T_TMP/dump.sql" 2>"$T_TMP/dump.err" &&
   grep -q "^COPY infer.models" "$T_TMP/dump.sql" && grep -q "^tiny	" "$T_TMP/dump.sql" &&
   grep -q "CREATE EXTENSION IF NOT EXISTS pg_infer" "$T_TMP/dump.sql"; then
    pass "pg_dump writes CREATE EXTENSION and the infer.models rows"
else
    fail "pg_dump writes CREATE EXTENSION and the infer.models rows" "$(cat "$T_TMP/dump.err"; grep -n "infer" "$T_TMP/dump.sql" | head)"
fi
$PSQL -d postgres -c "CREATE DATABASE pgi_restored" >/dev/null 2>&1
$PSQL -d pgi_restored -v ON_ERROR_STOP=1 -f "$T_TMP/dump.sql" >"$T_TMP/restore.out" 2>&1
if [ "$($PSQL -d pgi_restored -At -c "SELECT target FROM describe('France', 'tiny')" 2>&1)" = Paris ]; then
    pass "the restored database answers describe with the dumped registry"
else
    fail "the restored database answers describe with the dumped registry" "$(tail -n 5 "$T_TMP/restore.out")"
fi

# ---- pg_cancel_backend from another session stops a query waiting on a silent server, and the
# session goes on ----
$PSQL -d pgi_remote -X -c "SET application_name = 'pgi_cancel'" -c "SELECT * FROM walk('France', 1, 'slow')" \
    -c "SELECT 'still usable' AS after" >"$T_TMP/cancel.out" 2>&1 &
CPID=$!
i=0; cancelled=""
while [ $i -lt 200 ] && [ -z "$cancelled" ]; do
    cancelled=$($PSQL -d postgres -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
        WHERE application_name = 'pgi_cancel' AND state = 'active' AND query LIKE '%walk%'" 2>/dev/null)
    sleep 0.05; i=$((i + 1))
done
wait $CPID
if [ "$cancelled" = t ] && grep -q "canceling statement due to user request" "$T_TMP/cancel.out" &&
   grep -q "still usable" "$T_TMP/cancel.out"; then
    pass "pg_cancel_backend stops a waiting remote request; the session goes on"
else
    fail "pg_cancel_backend stops a waiting remote request; the session goes on" "cancelled='$cancelled' $(cat "$T_TMP/cancel.out")"
fi

# ---- remote similar_to_many runs its walks concurrently: a fake server answering each walk
# after 300 ms (threaded) sees 9 walks (8 candidates and the query) end in about one delay ----
python3 -c '
import json, sys, time, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
lock = threading.Lock(); state = {"now": 0, "max": 0}
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path.startswith("/v1/stats"):
            body = {"model": "slow", "layers": 4, "hidden_size": 256}
        elif self.path.startswith("/v1/maxconc"):
            body = {"max": state["max"]}
        else:
            with lock:
                state["now"] += 1; state["max"] = max(state["max"], state["now"])
            time.sleep(0.3)
            with lock:
                state["now"] -= 1
            body = {"hits": [{"layer": 1, "feature": 5, "gate_score": 2.5, "target": "x"}]}
        b = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
' >"$T_TMP/slow.port" 2>/dev/null &
SLOW_PID=$!
i=0; while [ ! -s "$T_TMP/slow.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
SLOW_PORT=$(cat "$T_TMP/slow.port")
$PSQL -d pgi_remote -At >"$T_TMP/slow.out" 2>&1 <<SQL
SELECT infer_create_model_remote('slowfake', 'http://127.0.0.1:$SLOW_PORT') IS NOT NULL;
WITH r AS MATERIALIZED (SELECT similar_to_many(ARRAY['a', 'b', NULL, 'c', 'd', 'e', 'f', 'g', 'h'], 'q', 'slowfake') AS s)
SELECT s, round(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000) FROM r;
SQL
# concurrency is what the fake server saw at once (a time bound would fail on a loaded machine)
conc=$(python3 -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen("http://127.0.0.1:%s/v1/maxconc" % sys.argv[1], timeout=10))["max"])' "$SLOW_PORT" 2>/dev/null)
kill $SLOW_PID 2>/dev/null
ms=$(sed -n 's/^{2.5,2.5,NULL,2.5,2.5,2.5,2.5,2.5,2.5}|\([0-9]*\)$/\1/p' "$T_TMP/slow.out")
if [ -n "$ms" ] && [ -n "$conc" ] && [ "$conc" -ge 2 ]; then
    pass "remote similar_to_many: 9 walks of 300 ms each, up to $conc at once, end in $ms ms (sequential would be 2700)"
else
    fail "remote similar_to_many: walks run concurrently (the server saw ${conc:-?} at once)" "$(cat "$T_TMP/slow.out")"
fi

# ---- vindex files that change under a session: between two queries (truncated, rewritten in
# place, deleted) the files' identity differs and the vindex is re-opened (or refused while
# broken); during a query (truncated under a running describe_many) the SIGBUS is recovered
# and the query ends in ERROR 58030. Never a crashed backend: same backend PID, same
# postmaster, no "terminated by signal" ----
PM0=$(head -n 1 "$DATA/postmaster.pid")
cp -r "$F/v" "$F/mut" && cp -r "$F/mid" "$F/midmut" && cp -r "$F/kq" "$F/kqmut" && chmod -R a+rwX "$F/mut" "$F/midmut" "$F/kqmut"
$PSQL -d postgres -c "CREATE DATABASE pgi_files" >/dev/null 2>&1
$PSQL -d pgi_files -v fixdir="$F" >"$T_TMP/files.out" 2>&1 <<'SQL'
\set VERBOSITY verbose
CREATE EXTENSION pg_infer;
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('mut', 'mut') IS NOT NULL AS registered;
SELECT pg_backend_pid() AS pid0 \gset
SELECT 'q1 ' || string_agg(target, ',') FROM describe('France', 'mut');
\! truncate -s 1000 "$PGI_FIXDIR/mut/gate_vectors.bin"
SELECT 'q2 ' || string_agg(target, ',') FROM describe('France', 'mut');
\! cp "$PGI_FIXDIR/v/gate_vectors.bin" "$PGI_FIXDIR/mut/gate_vectors.bin"
SELECT 'q3 ' || string_agg(target, ',') FROM describe('France', 'mut');
\! dd if=/dev/zero of="$PGI_FIXDIR/mut/gate_vectors.bin" bs=4096 count=64 conv=notrunc status=none
SELECT 'q4 ' || count(*) FROM describe('France', 'mut');
\! cp "$PGI_FIXDIR/v/gate_vectors.bin" "$PGI_FIXDIR/mut/gate_vectors.bin"
SELECT 'q5 ' || string_agg(target, ',') FROM describe('France', 'mut');
\! rm -f "$PGI_FIXDIR"/mut/*.bin
SELECT 'q6 ' || string_agg(target, ',') FROM describe('France', 'mut');
\! cp "$PGI_FIXDIR"/v/*.bin "$PGI_FIXDIR/mut/"
SELECT 'q7 ' || string_agg(target, ',') FROM describe('France', 'mut');
-- infer()'s engine maps the per-tensor weights of bitnet/
SELECT infer_create_model('kqmut', 'kqmut') IS NOT NULL AS registered;
SELECT 'i1 ' || count(*) FROM infer('The capital of France is', 3, 'kqmut');
\! truncate -s 100 "$PGI_FIXDIR/kqmut/bitnet/layers.0.mlp.down_proj.weight.i2s"
SELECT 'i2 ' || count(*) FROM infer('The capital of France is', 3, 'kqmut');
\! cp "$PGI_FIXDIR/kq/bitnet/layers.0.mlp.down_proj.weight.i2s" "$PGI_FIXDIR/kqmut/bitnet/"
SELECT 'i3 ' || count(*) FROM infer('The capital of France is', 3, 'kqmut');
SELECT 'same backend ' || (pg_backend_pid() = :pid0);
SQL
ok=1
for want in "q1 Paris" "q3 Paris" "q4 " "q5 Paris" "q7 Paris" "i1 3" "i3 3" "same backend true"; do
    grep -q "^ *$want" "$T_TMP/files.out" || ok=0
done
# q2 (truncated) and q6 (deleted): refused when the vindex is re-opened; i2: the engine's
# weights cut short, refused when infer() opens them again
[ "$(grep -c 'ERROR:  .*cannot open vindex' "$T_TMP/files.out")" -eq 2 ] || ok=0
grep -q "^ *i2 " "$T_TMP/files.out" && ok=0
[ "$(grep -c 'ERROR:  .*cannot load the model weights' "$T_TMP/files.out")" -eq 1 ] || ok=0
if [ $ok = 1 ]; then
    pass "vindex (and infer()'s weights) truncated, rewritten in place, deleted, restored between queries of one session: re-opened or a clean ERROR"
else
    fail "vindex (and infer()'s weights) truncated, rewritten in place, deleted, restored between queries of one session: re-opened or a clean ERROR" "$(cat "$T_TMP/files.out")"
fi

# truncated while a describe_many reads it: a background session scans 3,000 entities (seconds),
# gate_vectors.bin is cut to one page under it, restored while the session sleeps, and the
# session's next query answers
$PSQL -d pgi_files -v fixdir="$F" >"$T_TMP/sigbus.out" 2>&1 <<'SQL' &
\set VERBOSITY verbose
SET application_name = 'pgi_sigbus';
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('midmut', 'midmut') IS NOT NULL AS registered;
SELECT pg_backend_pid() AS pid0 \gset
SET statement_timeout = '60s';
SELECT count(*) FROM describe_many((SELECT array_agg('France capital ' || i) FROM generate_series(1, 3000) i), 'midmut', 0.001);
SELECT pg_sleep(2);
SELECT 'after ' || (count(*) >= 0) FROM describe('France', 'midmut');
SELECT 'same backend ' || (pg_backend_pid() = :pid0);
SQL
BPID=$!
i=0; st=""
while [ $i -lt 300 ] && [ "$st" != t ]; do
    st=$($PSQL -d postgres -At -c "SELECT true FROM pg_stat_activity WHERE application_name = 'pgi_sigbus'
        AND state = 'active' AND query LIKE '%describe_many%'" 2>/dev/null)
    sleep 0.05; i=$((i + 1))
done
sleep 0.3
truncate -s 4096 "$F/midmut/gate_vectors.bin"
i=0; st=""
while [ $i -lt 400 ] && [ "$st" != t ]; do
    st=$($PSQL -d postgres -At -c "SELECT true FROM pg_stat_activity WHERE application_name = 'pgi_sigbus'
        AND query LIKE '%pg_sleep%'" 2>/dev/null)
    sleep 0.05; i=$((i + 1))
done
cp "$F/mid/gate_vectors.bin" "$F/midmut/gate_vectors.bin"
wait $BPID
PM1=$(head -n 1 "$DATA/postmaster.pid")
if grep -q "ERROR:  58030: vindex files changed on disk while this query read them" "$T_TMP/sigbus.out" &&
   grep -q "after true" "$T_TMP/sigbus.out" && grep -q "same backend true" "$T_TMP/sigbus.out"; then
    pass "vindex truncated during a query: ERROR 58030, the same backend answers once the file is restored"
else
    fail "vindex truncated during a query: ERROR 58030, the same backend answers once the file is restored" "$(cat "$T_TMP/sigbus.out")"
fi
if [ "$PM0" = "$PM1" ] && [ -n "$PM0" ] && ! grep -q "terminated by signal\|all server processes terminated" "$T_TMP/pg.log"; then
    pass "no backend crashed, postmaster PID unchanged ($PM0)"
else
    fail "no backend crashed, postmaster PID unchanged ($PM0)" "now '$PM1': $(grep -m3 "terminated by signal" "$T_TMP/pg.log")"
fi

# ---- cancel lag: statement_timeout on a describe_many of 3,000 entities (mid fixture, seconds
# of work) and on the open of a 128,256-token vindex; lag = elapsed - timeout, 20 runs each
# (PGI_BENCH prints the distribution) ----
{
    echo "SET infer.data_directory = '$F';"
    echo "SELECT infer_create_model('mid', 'mid') IS NOT NULL;"
    echo "SET statement_timeout = '150ms';"
    r=0
    while [ $r -lt 20 ]; do
        echo "SELECT clock_timestamp() AS t0 \\gset"
        echo "SELECT count(*) FROM describe_many((SELECT array_agg('France capital ' || i) FROM generate_series(1, 3000) i), 'mid', 0.001);"
        echo "SELECT 'lag_many ' || round((extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000 - 150)::numeric, 1);"
        r=$((r + 1))
    done
} >"$T_TMP/lag1.sql"
$PSQL -d pgi_files -f "$T_TMP/lag1.sql" >"$T_TMP/lag_many.out" 2>&1
$PSQL -d pgi_files -c "SET infer.data_directory = '$F'" -c "SELECT infer_create_model('voc', 'voc')" >"$T_TMP/lag_open.out" 2>&1
r=0
while [ $r -lt 20 ]; do
    # a new session each time: the vindex is opened by its first query
    $PSQL -d pgi_files >>"$T_TMP/lag_open.out" 2>&1 <<SQL
SET statement_timeout = '30ms';
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM describe('France', 'voc');
SELECT 'lag_open ' || round((extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000 - 30)::numeric, 1);
SQL
    r=$((r + 1))
done
for k in many open; do
    n=$(grep -c "^ *lag_$k " "$T_TMP/lag_$k.out")
    mx=$(sed -n "s/^ *lag_$k \(.*\)/\1/p" "$T_TMP/lag_$k.out" | sort -n | tail -n 1)
    cancels=$(grep -c "canceling statement due to statement timeout" "$T_TMP/lag_$k.out")
    what=$([ $k = many ] && echo "describe_many of 3,000 entities" || echo "the open of a 128,256-token vindex")
    # median under 50 ms and 18 of 20 within 100 ms: the cores are shared (load 6 on 2 cores
    # seen), and a run may wait for a core longer than the lag itself (seen: one 208 ms run
    # among 2-12 ms ones). Before the hook was polled in these loops (main at e75af62, load
    # 11 on 2 cores) the medians were 2.3 s (describe_many) and 1.2 s (open).
    late=$(sed -n "s/^ *lag_$k \(.*\)/\1/p" "$T_TMP/lag_$k.out" | awk '$1 >= 100' | wc -l)
    med=$(sed -n "s/^ *lag_$k \(.*\)/\1/p" "$T_TMP/lag_$k.out" | sort -n | sed -n 10p)
    if [ "$n" -eq 20 ] && [ "$cancels" -eq 20 ] && [ "$late" -le 2 ] && awk "BEGIN { exit !($med < 50) }"; then
        pass "statement_timeout cancels $what within 100 ms (median $med ms, max $mx ms, 20 runs)"
    else
        fail "statement_timeout cancels $what within 100 ms (median $med ms, max $mx ms, 20 runs)" "runs $n, cancels $cancels, late $late: $(head -c 1500 "$T_TMP/lag_$k.out")"
    fi
done
[ -n "$PGI_BENCH" ] && for k in many open; do
    sed -n "s/^ *lag_$k \(.*\)/\1/p" "$T_TMP/lag_$k.out" | sort -n |
        awk -v k=$k '{ a[NR] = $1 } END { p = int(0.99 * NR); if (p < 0.99 * NR) p++; printf "# cancel lag %s: n=%d min %.1f median %.1f p99 %.1f max %.1f ms\n", k, NR, a[1], a[int((NR + 1) / 2)], a[p], a[NR] }'
done

# ---- no memory growth over many calls in one connection (backend RSS, after a warm-up) ----
$PSQL -d postgres -c "CREATE DATABASE pgi_load" >/dev/null 2>&1
$PSQL -d pgi_load -At -v fixdir="$F" >"$T_TMP/leak.out" 2>&1 <<'SQL'
\o /dev/null
CREATE EXTENSION pg_infer;
SET infer.data_directory = :'fixdir';
SELECT infer_create_model('tiny', 'v'), infer_create_model('kq', 'kq');
ALTER DATABASE pgi_load SET infer.default_model = 'tiny';
SET infer.default_model = 'tiny';
CREATE FUNCTION calls(n int) RETURNS void AS $$
BEGIN
  FOR i IN 1..n LOOP
    PERFORM count(*) FROM describe(CASE i % 3 WHEN 0 THEN 'France' WHEN 1 THEN 'Germany' ELSE 'Japan' END);
    PERFORM count(*) FROM walk('The capital of France is', 5);
    PERFORM similar_to('France', 'Germany');
    BEGIN PERFORM count(*) FROM nearest_to('France', 99); EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN PERFORM count(*) FROM describe('France', 'nonexistent'); EXCEPTION WHEN OTHERS THEN NULL; END;
  END LOOP;
END $$ LANGUAGE plpgsql;
CREATE FUNCTION rss_kb() RETURNS int8 AS $$
  SELECT regexp_replace(l, '\D', '', 'g')::int8
    FROM regexp_split_to_table(pg_read_file('/proc/' || pg_backend_pid() || '/status'), E'\n') l
   WHERE l LIKE 'VmRSS%'
$$ LANGUAGE sql;
SELECT calls(300);
\o
SELECT rss_kb();
\o /dev/null
SELECT calls(3000);
\o
SELECT rss_kb();
SQL
r0=$(sed -n 1p "$T_TMP/leak.out"); r1=$(sed -n 2p "$T_TMP/leak.out")
if [ -n "$r0" ] && [ -n "$r1" ] && [ "$r0" -gt 0 ] 2>/dev/null && [ $((r1 - r0)) -lt 1024 ]; then
    pass "no memory growth over 3000 x (describe, walk, similar_to, 2 ERRORs)"
    echo "# backend RSS $r0 kB -> $r1 kB"
else
    fail "no memory growth over 3000 x (describe, walk, similar_to, 2 ERRORs)" "RSS '$r0' -> '$r1' kB: $(head -c 500 "$T_TMP/leak.out")"
fi

# ---- pgbench: 16 clients, describe and similar_to, no errors ----
printf '%s\n' "SELECT count(*) FROM describe('France');" "SELECT similar_to('France', 'Germany');" \
    "SELECT count(*) FROM walk('The capital of France', 5);" >"$T_TMP/bench.sql"
if "$PGBIN/pgbench" -n -h "$T_TMP" -p "$PORT" -U postgres -c 16 -j 2 -t 50 -f "$T_TMP/bench.sql" pgi_load \
        >"$T_TMP/pgbench.out" 2>&1 && grep -q "number of failed transactions: 0" "$T_TMP/pgbench.out"; then
    pass "pgbench: 16 clients x 50 transactions (describe, similar_to, walk), no errors"
    grep "^tps" "$T_TMP/pgbench.out" | sed 's/^/# /'
else
    fail "pgbench: 16 clients x 50 transactions (describe, similar_to, walk), no errors" "$(tail -n 8 "$T_TMP/pgbench.out")"
fi

# ---- edits through SQL answer as edits through HTTP (the shipped trained model, the suite) ----
TS_MODEL=$ROOT/models/tinystories-ternary.gguf
if [ -f "$TS_MODEL" ] && "$LARQL" convert gguf-to-vindex "$TS_MODEL" --output "$F/ts" --keep-quant --level inference >/dev/null 2>&1 &&
   $PSQL -d postgres -c "CREATE DATABASE pgi_sqledits" >/dev/null 2>&1 &&
   $PSQL -d pgi_sqledits -c "CREATE EXTENSION pg_infer" -c "SET infer.data_directory = '$F'" \
        -c "SELECT infer_create_model('ts', 'ts')" >/dev/null 2>"$T_TMP/ts.err"; then
    "$LARQL" serve "$F/ts" --port 0 --threads 1 >"$T_TMP/ts.out" 2>>"$T_TMP/ts.err" &
    TS_PID=$!
    i=0; TS_PORT=""
    while [ $i -lt 300 ] && [ -z "$TS_PORT" ]; do
        TS_PORT=$(sed -n 's/^listening on http:\/\/[^:]*:\([0-9]*\)$/\1/p' "$T_TMP/ts.out"); sleep 0.1; i=$((i + 1))
    done
    PSQL="$PSQL -d pgi_sqledits" MODEL=ts run_py sqledits.log "$ROOT/tests/http/sql_vs_http_edits.py" "$TS_PORT" \
        "$ROOT/tests/data/edits/trained.jsonl" 8
    kill "$TS_PID" 2>/dev/null; wait "$TS_PID" 2>/dev/null
else
    fail "the trained model's vindex registers for the SQL-vs-HTTP edit check" "$(cat "$T_TMP/ts.err" 2>/dev/null | head -c 300)"
fi

# ---- larql serve --state-db: two servers share their edits through infer.edits ----
$PSQL -d postgres -c "CREATE DATABASE pgi_state" >/dev/null 2>&1
if $PSQL -d pgi_state -c "CREATE EXTENSION pg_infer" >/dev/null 2>"$T_TMP/state.err"; then
    check_fails "serve --state-db refuses a database without infer.edits" "CREATE EXTENSION pg_infer" \
        "$LARQL" serve "$F/kq" --port 0 --state-db "host=$T_TMP port=$PORT dbname=postgres user=postgres"
    check_fails "serve --state-db refuses an unreachable database" "state database" \
        "$LARQL" serve "$F/kq" --port 0 --state-db "host=$T_TMP port=1 dbname=pgi_state user=postgres connect_timeout=2"
    check_fails "serve refuses --state-db with --state-dir" "one" \
        "$LARQL" serve "$F/kq" --port 0 --state-dir "$T_TMP/sd" --state-db "host=$T_TMP port=$PORT dbname=pgi_state"
    $PSQL -d pgi_state -c "SET infer.data_directory = '$F'" -c "SELECT infer_create_model('kq', 'kq')" >/dev/null 2>&1
    mkdir -p "$T_TMP/sdlogs"
    LARQL="$LARQL" VINDEX="$F/kq" CONNINFO="host=$T_TMP port=$PORT dbname=pgi_state user=postgres" \
        PSQL="$PSQL -d pgi_state" TMPDIR_LOGS="$T_TMP/sdlogs" \
        PG_STOP="$RUN $PGBIN/pg_ctl -D $DATA -m fast -w stop" \
        PG_START="sh $T_TMP/pg_start.sh" \
        run_py state_db.log "$ROOT/tests/http/state_db.py"
    # the load-balanced deployment (README): three replicas behind HAProxy
    HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
    if [ -x "$HAPROXY" ]; then
        $PSQL -d pgi_state -c "TRUNCATE infer.edits" >/dev/null 2>&1
        LARQL="$LARQL" VINDEX="$F/kq" CONNINFO="host=$T_TMP port=$PORT dbname=pgi_state user=postgres" \
            PSQL="$PSQL -d pgi_state" TMPDIR_LOGS="$T_TMP/sdlogs" HAPROXY="$HAPROXY" \
            PG_STOP="$RUN $PGBIN/pg_ctl -D $DATA -m fast -w stop" PG_START="sh $T_TMP/pg_start.sh" \
            run_py state_db_lb.log "$ROOT/tests/http/state_db_lb.py"
    else
        skip "three --state-db replicas behind HAProxy" "haproxy is not installed (scripts/deps.sh --with-postgres installs it)"
    fi
else
    fail "pg_infer installs in a database for --state-db" "$(cat "$T_TMP/state.err")"
fi

# ---- figures, not assertions (PGI_BENCH=1): median latencies, backend RSS over many calls;
# PGI_BENCH_VINDEX=DIR adds describe/walk on that vindex next to the CLI's own latency ----
if [ -n "$PGI_BENCH" ]; then
    BV=${PGI_BENCH_VINDEX:-}
    [ -n "$BV" ] && BV=$(cd "$BV" && pwd)
    $PSQL -d pgi_load -At -v bv="${BV:-none}" >"$T_TMP/bench.out" 2>&1 <<'SQL'
CREATE FUNCTION pg_temp.med(q text, n int) RETURNS text AS $$
DECLARE t0 timestamptz; ts float8[] := '{}';
BEGIN
  FOR i IN 1..n LOOP
    t0 := clock_timestamp(); EXECUTE q;
    ts := ts || extract(epoch FROM clock_timestamp() - t0)::float8 * 1000;
  END LOOP;
  RETURN format('%s: median %s ms over %s calls', q,
    (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY x)::numeric, 3) FROM unnest(ts) x), n);
END $$ LANGUAGE plpgsql;
SELECT pg_temp.med($$SELECT count(*) FROM describe('France')$$, 101);
SELECT pg_temp.med($$SELECT count(*) FROM walk('The capital of France is', 5)$$, 101);
SELECT pg_temp.med($$SELECT count(*) FROM describe_many(ARRAY['France','Germany','Japan','Italy','Paris','Berlin','Tokyo','Rome','capital','model'])$$, 51);
SELECT pg_temp.med($$SELECT similar_to('France', 'Germany')$$, 51);
SELECT pg_temp.med($$SELECT count(*) FROM describe_many((SELECT array_agg((ARRAY['France', 'Germany', 'Japan', 'capital'])[1 + i % 4]) FROM generate_series(1, 4000) i))$$, 5);
SELECT pg_temp.med($$SELECT count(*) FROM infer('The capital of France is', 5, 'kq')$$, 21);
\o /dev/null
SELECT calls(10000);
\o
SELECT 'backend RSS after 13300 x (describe, walk, similar_to, 2 ERRORs): ' || rss_kb() || ' kB';
\o /dev/null
SET infer.data_directory = '/';
SELECT CASE WHEN :'bv' <> 'none' THEN infer_create_model('big', :'bv') END;
ALTER DATABASE pgi_load SET infer.data_directory = '/';
\o
SELECT pg_temp.med($$SELECT count(*) FROM describe('France', 'big', 0.001)$$, 9) WHERE :'bv' <> 'none';
SELECT pg_temp.med($$SELECT count(*) FROM walk('The capital of France is', 5, 'big')$$, 9) WHERE :'bv' <> 'none';
SELECT pg_temp.med($$SELECT count(*) FROM describe_many(ARRAY['France','Germany','Japan','Italy','Paris','Berlin','Tokyo','Rome','capital','model'], 'big', 0.001)$$, 5) WHERE :'bv' <> 'none';
SQL
    sed 's/^/# /' "$T_TMP/bench.out"
    # cancel lag on the big vindex: statement_timeout 50 ms on its open (a new session's first
    # query, 10 runs) and 250 ms on describe_many of 1,000 entities (10 runs)
    if [ -n "$BV" ]; then
        : >"$T_TMP/blag.out"
        for r in $(seq 1 "${PGI_LAG_RUNS:-10}"); do
            $PSQL -d pgi_load >>"$T_TMP/blag.out" 2>&1 <<'SQL'
SET statement_timeout = '50ms';
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FROM describe('France', 'big', 0.001);
SELECT 'lag_open ' || round((extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000 - 50)::numeric, 1);
SQL
        done
        {
            echo "SELECT count(*) FROM describe('France', 'big', 0.001);"
            echo "SET statement_timeout = '250ms';"
            for r in $(seq 1 "${PGI_LAG_RUNS:-10}"); do
                echo "SELECT clock_timestamp() AS t0 \\gset"
                echo "SELECT count(*) FROM describe_many((SELECT array_agg('France capital ' || i) FROM generate_series(1, 1000) i), 'big', 0.001);"
                echo "SELECT 'lag_many ' || round((extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000 - 250)::numeric, 1);"
            done
        } >"$T_TMP/blag.sql"
        $PSQL -d pgi_load -f "$T_TMP/blag.sql" >>"$T_TMP/blag.out" 2>&1
        for k in open many; do
            sed -n "s/^ *lag_$k \(.*\)/\1/p" "$T_TMP/blag.out" | sort -n |
                awk -v k=$k -v c="$(grep -c 'canceling statement due to statement timeout' "$T_TMP/blag.out")" \
                    '{ a[NR] = $1 } END { p = int(0.99 * NR); if (p < 0.99 * NR) p++; printf "# cancel lag on the big vindex, %s: n=%d (cancels in all: %d) min %.1f median %.1f p99 %.1f max %.1f ms\n", k, NR, c, a[1], a[int((NR + 1) / 2)], a[p], a[NR] }'
        done
    fi
    # pgbench at 1/4/16 clients: describe on the fixture (5 s), and on the big vindex (20 s: each
    # new backend opens it and faults its mapping in on the first query)
    printf '%s\n' "SELECT count(*) FROM describe('France');" >"$T_TMP/b1.sql"
    printf '%s\n' "SELECT count(*) FROM describe('France', 'big', 0.001);" >"$T_TMP/b2.sql"
    for b in b1 b2; do
        [ $b = b2 ] && [ -z "$BV" ] && continue
        for c in 1 4 16; do
            "$PGBIN/pgbench" -n -h "$T_TMP" -p "$PORT" -U postgres -c $c -j 2 -T $([ $b = b1 ] && echo 5 || echo 20) -f "$T_TMP/$b.sql" pgi_load 2>&1 |
                sed -n "s/^tps = \([0-9.]*\) (without.*/# pgbench $(head -c 60 "$T_TMP/$b.sql") $c clients: \1 tps/p"
        done
    done
    for d in "$F/v" $BV; do
        for i in 1 2 3 4 5; do "$LARQL" describe "$d" France --band all --min-score 0.001 --threads 1; done 2>&1 | grep 'ms$' |
            sed "s|^|# larql describe $(basename "$d") (CLI, --band all, 1 thread, one process per call): |"
    done
fi
done_tests
