/* larql serve: puts a model on the network (LARQL routes + OpenAI routes) until SIGTERM or
 * SIGINT, then shuts down gracefully and exits 0. A thin front end over lq_server_*. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "larql/generate.h"
#include "larql/mapfault.h"
#include "larql/model.h"
#include "larql/server.h"

static const char *SERVE_USAGE =
    "larql serve (MODEL | --dir DIR) [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--threads N]\n"
    "       [--max-concurrent N] [--ctx N] [--no-infer] [--lazy-weights] [--no-carried-edits] [--cors] [--allowed-hosts H,H] [--follow-symlinks] [--max-connections N] [--max-conns-per-ip N] [--max-body BYTES] [--max-stream-buffer BYTES]\n"
    "       [--rate-limit N/s|N/min|N/hour] [--trust-forwarded-for] [--tls-cert PEM --tls-key PEM]\n"
    "       [--request-timeout S] [--header-timeout S] [--act ms|float] [--kernels scalar|avx2|avx512]\n"
    "       [--kv f16|q8] [--lm-head exact|bounded|q8] [--weights copy|mmap|auto]\n"
    "       [--state-dir DIR | --state-db CONNINFO [--state-model NAME]] [--patch-dir DIR]\n"
    "       [--slot-save-path DIR]\n"
    "       [--max-sessions N] [--session-ttl S]\n"
    "       [--cache-ttl S] [--cache-ram MIB] [--memory-limit BYTES] [--chat-template NAME|FILE]\n"
    "       [--draft ngram|none] [--draft-max K]\n"
    "       [--ffn-only [--layers A-B]] [--ffn URL [--ffn-timeout MS | --ffn-timeout-secs S]]\n"
    "  MODEL is a GGUF file or a vindex directory (browse routes need a vindex). --port 0 picks\n"
    "  a free port. --dir DIR serves every vindex under DIR (each subdirectory with an index.json)\n"
    "  as /v1/{model_id}/...; /v1/models lists them.\n"
    "  --cache-ram MIB (default 1024, 0 = off) keeps finished generations' KV for requests\n"
    "  that start with the same tokens (a chat's next turn prefills only its new tokens).\n"
    "  --slot-save-path DIR enables POST /slots/{id}?action=save|restore (cached prompts as\n"
    "  files in DIR, llama-server's slot save/restore).\n"
    "  --ffn-only serves POST /v1/walk-ffn for `--ffn URL` clients (inference routes answer 503;\n"
    "  --max-body defaults to 64 MiB); --layers A-B answers only those layers. --ffn URL runs\n"
    "  every layer's feed-forward on such a server, attention here.\n"
    "  --state-db CONNINFO keeps the global edits as rows of that PostgreSQL database's\n"
    "  infer.edits (CREATE EXTENSION pg_infer there first), shared by every server on it;\n"
    "  --state-model names the rows' model (default: the model id).\n"
    "  LARQL_API_KEY in the environment is used when --api-key is not given.";

static lq_server *g_server;

/* A SIGBUS in a mapped model or vindex file that shrank on disk is survived (the library
 * patches the page, the server then answers 503); any other SIGBUS keeps its default. */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (lq_mapfault_recover(si->si_addr))
        return;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_signal(int sig)
{
    (void)sig;
    lq_server_request_stop(g_server); /* async-signal-safe: one write() to a pipe */
}

static void log_line(void *user, const char *line)
{
    (void)user;
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    fprintf(stderr, "larql serve %s: %s\n", ts, line);
}

int lq_cli_serve(int argc, char **argv)
{
    const char *C = "serve";
    lq_server_opts o;
    lq_server_opts_init(&o);
    lq_cli_model_args ma;
    lq_cli_model_args_init(&ma);
    o.api_key = getenv("LARQL_API_KEY");
    const char *chat_template_arg = NULL;
    int max_body_set = 0;
    char *chat_template = NULL;
    for (int i = 1; i < argc; i++) {
        int r = lq_cli_model_opt(C, SERVE_USAGE, argc, argv, &i, &ma);
        if (r < 0)
            return 2;
        if (r)
            continue;
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: %s\n", SERVE_USAGE);
            return 0;
        } else if (!strcmp(a, "--no-infer")) {
            o.no_infer = 1;
        } else if (!strcmp(a, "--ffn-only")) {
            o.ffn_only = 1;
        } else if (!strcmp(a, "--layers") && has_val) {
            /* "A-B" inclusive, as LARQL's larql-server takes it */
            const char *lv = argv[++i], *dash = strchr(lv, '-');
            char first[16];
            long lo, hi;
            if (!dash || (size_t)(dash - lv) >= sizeof first ||
                (memcpy(first, lv, (size_t)(dash - lv)), first[dash - lv] = 0, lq_parse_long(first, 0, 1 << 20, &lo)) ||
                lq_parse_long(dash + 1, 0, 1 << 20, &hi) || hi < lo)
                return lq_cli_usage(C, SERVE_USAGE, "--layers: '%s' is not a range A-B of layers (0 <= A <= B)", lv);
            o.layers_set = 1;
            o.layer_first = (int)lo;
            o.layer_last = (int)hi;
        } else if (!strcmp(a, "--lazy-weights")) {
            o.lazy_weights = 1;
        } else if (!strcmp(a, "--cors")) {
            o.cors = 1;
        } else if (!strcmp(a, "--max-stream-buffer") && has_val) {
            if (lq_parse_long(argv[++i], 4096, 1L << 30, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--max-stream-buffer: '%s' is not in 4096..1073741824 bytes", argv[i]);
            o.max_stream_buffer = (size_t)v;
        } else if (!strcmp(a, "--max-connections") && has_val) {
            if (lq_parse_long(argv[++i], 1, 100000, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--max-connections: '%s' is not in 1..100000", argv[i]);
            o.max_connections = (int)v;
        } else if (!strcmp(a, "--max-conns-per-ip") && has_val) {
            if (lq_parse_long(argv[++i], 0, 100000, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--max-conns-per-ip: '%s' is not in 0..100000", argv[i]);
            o.max_conns_per_ip = (int)v;
        } else if (!strcmp(a, "--tls-cert") && has_val) {
            o.tls_cert = argv[++i];
        } else if (!strcmp(a, "--tls-key") && has_val) {
            o.tls_key = argv[++i];
        } else if (!strcmp(a, "--rate-limit") && has_val) {
            o.rate_limit = argv[++i];
        } else if (!strcmp(a, "--trust-forwarded-for")) {
            o.trust_forwarded_for = 1;
        } else if (!strcmp(a, "--follow-symlinks")) {
            o.follow_symlinks = 1;
        } else if (!strcmp(a, "--allowed-hosts") && has_val) {
            o.allowed_hosts = argv[++i];
        } else if (!strcmp(a, "--host") && has_val) {
            o.host = argv[++i];
        } else if (!strcmp(a, "--api-key") && has_val) {
            o.api_key = argv[++i];
        } else if (!strcmp(a, "--port") && has_val) {
            if (lq_parse_long(argv[++i], 0, 65535, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--port: '%s' is not a port number (0..65535)", argv[i]);
            o.port = (int)v;
        } else if (!strcmp(a, "--max-concurrent") && has_val) {
            if (lq_parse_long(argv[++i], 1, 4096, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--max-concurrent: '%s' is not in 1..4096", argv[i]);
            o.max_concurrent = (int)v;
        } else if (!strcmp(a, "--max-body") && has_val) {
            if (lq_parse_long(argv[++i], 1024, 1L << 30, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--max-body: '%s' is not in 1024..1073741824 bytes", argv[i]);
            o.max_body = (size_t)v;
            max_body_set = 1;
        } else if (!strcmp(a, "--header-timeout") && has_val) {
            if (lq_parse_long(argv[++i], 0, 86400, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--header-timeout: '%s' is not in 0..86400 seconds", argv[i]);
            o.header_timeout_s = (int)v;
        } else if (!strcmp(a, "--request-timeout") && has_val) {
            if (lq_parse_long(argv[++i], 1, 86400, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--request-timeout: '%s' is not in 1..86400 seconds", argv[i]);
            o.request_timeout_s = (int)v;
        } else if (!strcmp(a, "--shutdown-grace") && has_val) {
            if (lq_parse_long(argv[++i], 0, 3600, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--shutdown-grace: '%s' is not in 0..3600 seconds", argv[i]);
            o.shutdown_grace_s = (int)v;
        } else if (!strcmp(a, "--state-dir") && has_val) {
            o.state_dir = argv[++i];
        } else if (!strcmp(a, "--state-db") && has_val) {
            o.state_db = argv[++i];
        } else if (!strcmp(a, "--state-model") && has_val) {
            o.state_model = argv[++i];
        } else if (!strcmp(a, "--patch-dir") && has_val) {
            o.patch_dir = argv[++i];
        } else if (!strcmp(a, "--slot-save-path") && has_val) {
            o.slot_save_path = argv[++i];
        } else if (!strcmp(a, "--max-sessions") && has_val) {
            if (lq_parse_long(argv[++i], 1, 100000, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--max-sessions: '%s' is not in 1..100000", argv[i]);
            o.max_sessions = (int)v;
        } else if (!strcmp(a, "--session-ttl") && has_val) {
            if (lq_parse_long(argv[++i], 1, 365L * 86400, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--session-ttl: '%s' is not a number of seconds", argv[i]);
            o.session_ttl_s = (int)v;
        } else if (!strcmp(a, "--dir") && has_val) {
            o.models_dir = argv[++i];
        } else if (!strcmp(a, "--cache-ram") && has_val) {
            if (lq_parse_long(argv[++i], 0, 1L << 30, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--cache-ram: '%s' is not a number of MiB", argv[i]);
            o.cache_ram = (uint64_t)v << 20;
        } else if (!strcmp(a, "--cache-ttl") && has_val) {
            if (lq_parse_long(argv[++i], 0, 365L * 86400, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--cache-ttl: '%s' is not a number of seconds", argv[i]);
            o.cache_ttl_s = (int)v;
        } else if (!strcmp(a, "--memory-limit") && has_val) {
            /* overrides the cgroup limit (tests, or hosts without cgroup v2) */
            if (lq_parse_long(argv[++i], 1, 0x7fffffffffffffffL, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--memory-limit: '%s' is not a byte count", argv[i]);
            o.memory_limit = (uint64_t)v;
        } else if (!strcmp(a, "--chat-template") && has_val) {
            chat_template_arg = argv[++i];
        } else if (!strcmp(a, "--draft") && has_val) {
            if (lq_cli_parse_draft(C, SERVE_USAGE, argv[++i], &o.draft))
                return 2;
        } else if (!strcmp(a, "--draft-max") && has_val) {
            if (lq_parse_long(argv[++i], 1, LQ_DRAFT_MAX, &v))
                return lq_cli_usage(C, SERVE_USAGE, "--draft-max: '%s' is not in 1..%d", argv[i], LQ_DRAFT_MAX);
            o.draft_max = (int)v;
        } else if (a[0] == '-') {
            return lq_cli_usage(C, SERVE_USAGE, "unknown option or missing value: '%s'", a);
        } else if (!o.model_path) {
            o.model_path = a;
        } else {
            return lq_cli_usage(C, SERVE_USAGE, "unexpected argument '%s'", a);
        }
    }
    if (!o.model_path && !o.models_dir)
        return lq_cli_usage(C, SERVE_USAGE, "MODEL is required (or --dir DIR)");
    if (o.model_path && o.models_dir)
        return lq_cli_usage(C, SERVE_USAGE, "give MODEL or --dir DIR, not both");
    if (lq_cli_chat_template_arg(C, chat_template_arg, &chat_template))
        return 1;
    o.chat_template = chat_template;
    lq_cli_model_opts(&ma, &o.model);
    if (o.layers_set && !o.ffn_only)
        return lq_cli_usage(C, SERVE_USAGE, "--layers A-B shards an FFN service: it needs --ffn-only");
    /* LARQL reads walk-ffn bodies up to 64 MiB: a 64-row prefill of a wide model is more than
     * the 2 MiB default of the other routes */
    if (o.ffn_only && !max_body_set)
        o.max_body = 64u << 20;
    /* a shard touches only its layers' pages of a shared read-only mapping; a private copy
     * (--weights copy, the default for big files) would hold every layer */
    if (o.layers_set && ma.hugepages == 0)
        o.model.hugepages = -1;
    o.n_ctx = ma.ctx;
    o.no_carried_edits = ma.no_carried; /* --no-carried-edits, a shared model option */
    o.log = log_line;

    /* signals first, so a TERM during the model load is not lost (it stops right after) */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up is an error return, not a death */
    struct sigaction sb;
    memset(&sb, 0, sizeof sb);
    sb.sa_sigaction = on_sigbus;
    sb.sa_flags = SA_SIGINFO;
    sigemptyset(&sb.sa_mask);
    sigaction(SIGBUS, &sb, NULL);

    lq_err err = {0};
    int started = lq_server_start(&o, &g_server, &err);
    free(chat_template); /* the server keeps its own copy */
    if (started) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return lq_cli_error(C, "%s", err.msg);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    /* the listening line on stdout lets scripts read the port when --port 0 */
    printf("listening on %s://%s:%d\n", o.tls_cert ? "https" : "http", o.host, lq_server_port(g_server));
    fflush(stdout);
    lq_server_wait(g_server);
    log_line(NULL, "shutting down");
    lq_server_stop(g_server);
    g_server = NULL;
    return 0;
}
