/* The HTTP server behind `larql serve`: LARQL's query/inference routes and the OpenAI
 * surface (/v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models) over one
 * loaded model, on libmicrohttpd (one thread per connection, so a slow or blocked client
 * never holds anyone else's thread).
 *
 * Embedding: lq_server_start() loads the model (unless lazy), binds and starts serving in
 * background threads, and returns. A front end then calls lq_server_wait() (blocks until
 * lq_server_request_stop(), which is async-signal-safe so a SIGTERM handler may call it)
 * and lq_server_stop() (stop accepting, let in-flight requests finish for a short grace
 * period, cancel what is left, join, free). Tests can embed it the same way with port 0
 * and read the bound port with lq_server_port().
 *
 * The server never prints: log lines (load time, listening address) go to opts.log. */
#ifndef LARQL_SERVER_H
#define LARQL_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "larql/model.h"
#include "larql/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_server lq_server;

/* One log line, no trailing newline. Called from any server thread. */
typedef void (*lq_server_log_fn)(void *user, const char *line);

#define LQ_SERVER_MAX_MODELS 256

typedef struct lq_server_opts {
    const char *model_path;   /* GGUF file, or a vindex directory (browse routes; inference
                                 when it holds model weights) */
    const char *models_dir;   /* instead of model_path: serve every subdirectory holding an
                                 index.json (LARQL's --dir), each under its model id (the last
                                 '/' segment of index.json's "model"): /v1/{id}/describe ...;
                                 the unprefixed routes answer for the first in name order */
    int follow_symlinks;      /* --dir: also serve subdirectories that are symbolic links leading
                               * outside it (by default they are skipped, with a log line) */
    const char *host;         /* bind address; default "127.0.0.1" */
    int port;                 /* default 8080; 0 = any free port (see lq_server_port) */
    const char *api_key;      /* NULL/"" = no auth; else "Authorization: Bearer KEY" everywhere
                                 except GET /v1/health and the built-in page (GET / and
                                 /assets/NAME: static, no data; the user types the key into it) */
    lq_model_opts model;      /* how the model is opened and run (threads, act_mode, kernels,
                                 lm_head_q8, kv_f16, hugepages; larql/model.h): the same
                                 choices as every other command; reported by /v1/runtime */
    int max_connections;      /* open connections (each holds a thread while open, idle
                               * keep-alive included); beyond it new ones are refused. Default
                               * 1000; 1..100000 */
    int max_conns_per_ip;     /* connections one client address may hold open (slowloris: one
                               * address cannot take every connection thread). Default 0 = no cap:
                               * behind a reverse proxy every client shares one address */
    const char *tls_cert;     /* PEM certificate chain and private key files: serve HTTPS and
                               * WSS (libmicrohttpd with GnuTLS); both or neither */
    const char *tls_key;
    const char *rate_limit;   /* "N/unit" (s, sec, second, m, min, minute, h, hour): a token bucket
                               * per client address, 429 + Retry-After past it; NULL = none */
    int trust_forwarded_for;  /* --rate-limit counts the first X-Forwarded-For address (set it
                               * only behind a proxy that writes that header) */
    int max_concurrent;       /* requests in flight (health/metrics excluded); beyond it 503
                                 with Retry-After. Default 64. Also caps pooled sessions. */
    int n_ctx;                /* session context; 0 = model default */
    int no_infer;             /* refuse inference routes (503) */
    int ffn_only;             /* LARQL's --ffn-only: an FFN service for `--ffn URL` clients (POST
                               * /v1/walk-ffn); inference routes 503 as with no_infer, stats say
                               * "mode": "ffn-service" */
    int layers_set;           /* --layers A-B: /v1/walk-ffn answers only layers layer_first ..
                               * layer_last (inclusive; others 400), a shard of the model */
    int layer_first, layer_last;
    int lazy_weights;         /* load the model on the first request that needs it */
    int no_carried_edits;     /* a GGUF written by COMPILE ... INTO MODEL: serve the base model,
                                 without the edits it carries (lq_carried_edits) */
    int cors;                 /* Access-Control-Allow-Origin: * and OPTIONS preflight (also lets
                               * other origins write without an API key) */
    const char *allowed_hosts;/* comma-separated Host names answered (DNS rebinding); NULL =
                               * localhost, 127.0.0.1, ::1 and the bind address (any host when
                               * bound to 0.0.0.0 or ::); "*" = any */
    size_t max_body;          /* request body limit in bytes; default 2 MiB; over -> 413 */
    size_t max_stream_buffer; /* an SSE stream's output waiting for a slow reader, in bytes;
                               * past it the generation stops with an error event. Default
                               * 8 MiB; 4 KiB..1 GiB */
    int request_timeout_s;    /* idle connection timeout and whole-upload deadline; default 30 */
    int header_timeout_s;     /* a request's headers must be complete within this many seconds
                               * of the connection's accept (first request) or of its request
                               * line (later ones), however steadily they trickle in; default
                               * 10, 0 = only the idle timeout (slowloris) */
    int shutdown_grace_s;     /* on stop: how long in-flight requests may finish; default 5 */
    uint64_t memory_limit;    /* bytes; 0 = read the cgroup v2 memory.max (none -> no check) */
    const char *state_dir;    /* NULL: edits live in memory; else the global overlay's journal
                                 (DIR/journal.lqj) is replayed at start and every acknowledged
                                 edit is persisted there before its 200 */
    const char *state_db;     /* NULL, or a libpq connection string: the global edits are rows of
                                 that database's infer.edits (pg_infer's table), shared with every
                                 server and SQL session on it; exclusive with state_dir */
    const char *state_model;  /* the rows' model name (NULL: the served model's id) */
    const char *patch_dir;    /* POST /v1/patches/apply {"url": NAME} reads NAME (a plain file
                                 name) from this directory only; NULL: inline patches only */
    const char *slot_save_path; /* POST /slots/{id}?action=save|restore (llama-server's) writes
                                 and reads cached prompts as files in this directory (which
                                 must exist); NULL: the route answers 501 */
    uint64_t cache_ram;       /* prompt cache: bytes of finished generations' KV kept for
                                 requests that start with the same tokens (a chat's next turn,
                                 a shared system prompt); default 1 GiB, 0 = off; within
                                 memory_limit when one applies */
    int max_sessions;         /* X-Session-Id sessions held at once; default 64; beyond -> 503 */
    int session_ttl_s;        /* a session idle this long may be evicted; default 3600 */
    int cache_ttl_s;          /* GET /v1/describe: Cache-Control max-age (0 = "no-cache": clients
                                 revalidate with If-None-Match, answered 304 while unchanged) */
    const char *chat_template; /* NULL: each model's own tokenizer.chat_template (else the
                                 built-in format for it); "plain", "llama3", "bitnet": that
                                 built-in; anything else: Jinja template text for
                                 /v1/chat/completions (`serve --chat-template NAME|FILE`) */
    int draft;                /* `serve --draft ngram|none`: lq_draft_mode of every generation
                                 (lq_scheduler_opts.draft); 0: the library's default */
    int draft_max;            /* `--draft-max K` (0: the library's) */
    lq_server_log_fn log;
    void *log_user;
} lq_server_opts;

void lq_server_opts_init(lq_server_opts *o);

/* Loads (unless lazy_weights), binds, starts serving. Errors: model cannot be opened
 * (LQ_EIO/LQ_EFORMAT...), model larger than the memory limit (LQ_ENOMEM, message names both
 * figures), address in use / bad host (LQ_EIO), bad options (LQ_EINVAL). */
int lq_server_start(const lq_server_opts *o, lq_server **out, lq_err *err);
/* The bound TCP port (useful with port 0). */
int lq_server_port(const lq_server *s);
/* Async-signal-safe: wakes lq_server_wait(). */
void lq_server_request_stop(lq_server *s);
/* Blocks until lq_server_request_stop() is called. Returns 0. */
int lq_server_wait(lq_server *s);
/* Stops accepting, waits up to shutdown_grace_s for in-flight requests, cancels the rest
 * (streams end with a final chunk and "data: [DONE]"), joins every thread, closes the model
 * and frees s. NULL-safe. */
void lq_server_stop(lq_server *s);

#ifdef __cplusplus
}
#endif
#endif
