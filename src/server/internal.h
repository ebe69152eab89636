/* Server internals shared by the HTTP plumbing (http.c), model loading (models.c), the
 * listener (server.c), the route table and routes (routes*.c, knowledge.c), --state-db
 * (statedb.c) and the counters (metrics.c). Not a public header. */
#ifndef LQ_SERVER_INTERNAL_H
#define LQ_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include "larql/model.h"
#include "larql/patch.h"
#include "larql/scheduler.h"
#include "larql/server.h"
#include "larql/status.h"
#include "larql/vindex.h"
#include "core/utf8.h"

/* ---- routes ---- */

struct req;
struct reply;

#define M_GET 1
#define M_POST 2
#define M_DELETE 4

/* A route's flags */
enum {
    RT_OPENAI = 1,        /* errors use the OpenAI envelope */
    RT_GATED = 2,         /* counts against --max-concurrent */
    RT_MODEL_SCOPED = 4,  /* also answers under /v1/{model_id}/... (LARQL's multi-model paths) */
    RT_PUBLIC = 8,        /* answers without the API key (the page holds no data) */
    RT_FROM_MEMORY = 16,  /* answers from memory: still served after a mapped file faulted */
    RT_UPGRADE = 32,      /* answers 101 Switching Protocols (WebSocket) */
    RT_CONDITIONAL = 64,  /* may answer 304 Not Modified (ETag) */
    RT_WRITE = 128,       /* changes state (or opens a socket): refused from another origin
                           * without --api-key or --cors */
    RT_UNMETERED = 256,   /* not counted by --rate-limit (health, the API document, metrics) */
};

/* What GET /v1/openapi.json says of a route (openapi.c). Schemas are JSON Schema text;
 * params are query parameters "name:type" separated by commas, a trailing '!' marks a
 * required one. */
typedef struct route_doc {
    const char *summary;
    const char *params;
    const char *request;      /* JSON body schema, NULL = no body */
    const char *binary_in;    /* also accepts this binary body type, NULL = none */
    const char *response;     /* 200 JSON schema */
    const char *binary_out;   /* 200 may be this binary type instead */
} route_doc;

typedef void route_fn(lq_server *s, struct req *q, struct reply *r);

/* One row of the route table (routes.c): adding a route is adding a row. A path whose last
 * segment is "{name}" takes exactly one non-empty segment there (q->path_arg). */
typedef struct route {
    const char *path;
    int method;               /* M_GET (also HEAD), M_POST or M_DELETE */
    route_fn *handler;
    unsigned flags;           /* RT_* */
    route_doc doc;
} route;

/* The table, and the row of a request that matched none (counted as "other"). */
#define SRV_MAX_ROUTES 64
const route *srv_routes(size_t *n);
extern const route srv_unknown_route;
/* The row for (path, method): NULL when no row has the path; a row of the path with another
 * method when none has this one (*allowed: the methods the path answers). A "{name}" row's
 * segment is returned in *arg / *arg_len. Exact paths win over "{name}" rows. */
const route *srv_route_find(const char *url, int method, const char **arg, size_t *arg_len, int *allowed);

/* ---- metrics (all updated with atomics) ---- */

#define MAX_STATUS 600
typedef struct metrics {
    uint64_t requests[SRV_MAX_ROUTES + 1][MAX_STATUS]; /* by srv_route_index */
    uint64_t requests_total;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t prefill_tokens, prefill_us; /* prompt tokens run and wall time spent on them */
    uint64_t decode_tokens, decode_us;   /* decode steps and wall time spent on them */
    uint64_t rejected_busy;              /* 503 at --max-concurrent */
    uint64_t rejected_rate;              /* 429 at --rate-limit */
    uint64_t errors;                     /* 4xx + 5xx responses */
    uint64_t streams_canceled;           /* client went away mid-stream */
    uint64_t streams_overflow;           /* stopped: the client read too slowly (--max-stream-buffer) */
    uint64_t stream_keepalives;          /* SSE comment lines sent while a stream had nothing to send */
    int64_t active_requests, active_streams, active_sessions;
} metrics;

/* ---- --rate-limit (ratelimit.c) ---- */

typedef struct srv_ratelimit srv_ratelimit;
struct sockaddr;
/* "N/s|sec|second|m|min|minute|h|hour" -> bucket capacity N and refill per second; -1 if not */
int srv_ratelimit_parse(const char *spec, double *cap, double *per_s);
srv_ratelimit *srv_ratelimit_new(double cap, double per_s);
void srv_ratelimit_free(srv_ratelimit *rl);
/* take a token for key at monotonic time now: 0 when granted, else seconds until one is */
double srv_ratelimit_take(srv_ratelimit *rl, const char *key, double now);
/* the key a request counts under (forwarded: the X-Forwarded-For value when trusted, or NULL) */
void srv_ratelimit_key(const struct sockaddr *sa, const char *forwarded, char *out, size_t cap);

/* ---- --state-db (statedb.c): global edits as rows of PostgreSQL's infer.edits ---- */
typedef struct srv_statedb srv_statedb;
typedef struct srv_statedb_fig {
    int on, connected;
    uint64_t applied, failed, syncs, reconnects;
} srv_statedb_fig;
struct lq_server;
struct lq_overlay;
struct lq_patch;
/* Connects, loads the model's rows into s->global (created here), starts the LISTEN thread. */
int srv_statedb_start(struct lq_server *s, lq_err *e);
void srv_statedb_stop(struct lq_server *s);
/* With the global write lock: the live edits from n0 on, stored as a row (committed) and
 * applied back as it; on error they are undone (LQ_EBUSY: the database is unreachable). */
int srv_statedb_edit(struct lq_server *s, struct lq_overlay *ov, size_t n0, lq_err *e);
/* With the global write lock: a patch applied as a row / a patch's row deleted. */
int srv_statedb_apply(struct lq_server *s, const struct lq_patch *p, lq_err *e);
int srv_statedb_remove(struct lq_server *s, const char *name, lq_err *e);
void srv_statedb_figures(const struct lq_server *s, srv_statedb_fig *f);

/* ---- the server ---- */

struct lq_server {
    lq_server_opts o;
    srv_ratelimit *rl;        /* --rate-limit: on the front server only (else NULL) */
    /* the route table (routes.c), given at open: metrics.c and openapi.c read it here rather
     * than name routes.c, whose rows name their handlers */
    const struct route *routes;
    size_t n_routes;
    struct srv_deadline *deadline; /* the front's header deadline (deadline.c), else NULL */
    char *host, *api_key, *model_path, *kernels, *state_dir, *patch_dir, *chat_template; /* owned copies */
    char *slot_dir;           /* --slot-save-path (owned), NULL: off */
    char *ffn_url;            /* owned copy of o.model.ffn_url (--ffn URL) */
    char *state_db, *state_model;
    char model_id[256];
    lq_vindex *vx;            /* MODEL was a vindex directory: browse routes (else NULL) */
    int is_dir;
    struct MHD_Daemon *d;
    int port;
    int stop_pipe[2];
    double t_boot;            /* monotonic seconds at start */
    long created_unix;

    /* model: eager or single-flight lazy load */
    pthread_mutex_t load_mu;
    lq_model *model;          /* set once, read with __atomic_load_n */
    lq_scheduler *sched;      /* generation: created with the model, set before it */
    double load_ms;
    int load_failed;
    lq_err load_err;

    /* session pool for the single-pass routes (/v1/infer): at most max_concurrent sessions,
     * reused (reset) between requests. Generation sessions belong to the scheduler. */
    pthread_mutex_t pool_mu;
    lq_session **pool_free;
    int n_free, n_sessions;
    int n_ctx;                /* context of every session (the scheduler's and the pool's) */
    size_t kv_bytes_per_session; /* lq_model_kv_bytes(model, n_ctx): f32 or f16 as loaded */
    uint64_t mem_limit;       /* --memory-limit or the cgroup's memory.max; 0 = none */
    int pool_cap;             /* single-pass sessions the memory limit allows (<= max_concurrent) */
    int prompt_cache_cap;     /* the scheduler's prompt cache: sessions (--cache-ram / KV size) */

    /* what the model knows (knowledge.c): the global overlay over vx (NULL for a GGUF),
     * its journal (--state-dir), the X-Session-Id sessions */
    struct lq_overlay *global;
    /* a GGUF that COMPILE ... INTO MODEL wrote: the edits it carries (lq_carried_edits),
     * read-only, set before the model is published (NULL: none) */
    struct lq_edit_set *carried;
    pthread_rwlock_t kmu;
    struct lq_journal *journal;
    int state_lock;           /* flock'd state_dir/lock (one server per state directory), or -1 */
    struct srv_statedb *statedb; /* --state-db: the global overlay is the fold of infer.edits */
    struct srv_ksession **sess;
    int n_sess;
    pthread_mutex_t sess_mu;
    int knowledge_ready;      /* srv_knowledge_init ran (its locks exist) */
    struct srv_dcache *dcache; /* describe answers kept --cache-ttl seconds (dcache.c) */

    /* several models (larql serve --dir): models[0] is the server that listens (this one on
     * the front); every model's server has front pointing at it. One model: models = {self}. */
    lq_server **models;
    int n_models;
    lq_server *front;

    int stopping;             /* set by lq_server_stop: new generation work refused */
    int64_t ws_threads;       /* front: WebSocket sessions on threads of their own (TLS) */
    int64_t ws_pending;       /* front: TLS upgrades answered 101 whose session has not started */
    int cancel_all;           /* set after the grace period: running generations stop */
    metrics m;
};

/* ---- the header deadline (deadline.c) ---- */

typedef struct srv_deadline srv_deadline;
/* seconds <= 0: connections are tracked but never cut */
srv_deadline *srv_deadline_start(double seconds);
void srv_deadline_free(srv_deadline *d);   /* after the daemon stopped */
uint64_t srv_deadline_cut(srv_deadline *d); /* connections cut so far */
void srv_deadline_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                enum MHD_ConnectionNotificationCode code);
void *srv_deadline_on_uri(void *cls, const char *uri, struct MHD_Connection *c);
void srv_deadline_headers_done(srv_deadline *d, struct MHD_Connection *c);

/* ---- one request ---- */

typedef struct req {
    lq_server *srv;           /* the server that took the connection (limits, metrics) */
    lq_server *target;        /* the model's server that answers (/v1/{model_id}/...) */
    const route *rt;
    struct MHD_Connection *conn;
    int method;               /* M_GET / M_POST / 0 other */
    int is_options;
    char *body;
    size_t len, cap;
    int too_large, timed_out;
    uint64_t dropped;         /* body bytes read and discarded once over --max-body */
    double t0;
    int holds_slot;           /* counted in active_requests (released by the response) */
    int responded;
    /* the segment after a prefix route's path ("42" of /v1/embed/42, a patch name of
     * /v1/patches/NAME); a longer segment is kept cut and flagged, never allocated */
    char path_arg[256];
    int path_arg_long;
} req;

/* A finished reply: status + JSON body (malloc'd), or a ready MHD_Response (streams). */
typedef struct reply {
    int status;
    char *body;
    size_t len;
    const char *ctype;
    const char *cache_control;   /* Cache-Control header when set */
    char cache_buf[48];          /* storage cache_control may point to */
    const char *vary;            /* Vary header when set */
    char etag_buf[24];           /* storage etag may point to (describe's "\"hex\"") */
    struct MHD_Response *stream; /* when set: status/body unused except status for metrics */
    int retry_after;
    const void *static_body;     /* when set: the body (len bytes), static, never freed */
    const char *etag;            /* ETag header when set */
    int web;                     /* the page's headers: Content-Security-Policy and friends */
    int close;                   /* Connection: close (what follows is not another request) */
} reply;

/* util.c */
double lq_now(void);                      /* monotonic seconds */
json_t *lq_jstr(const char *s, size_t len); /* JSON string; invalid UTF-8 -> U+FFFD */
void reply_json(reply *r, int status, json_t *j); /* steals j */
void reply_larql_err(reply *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void reply_oai_err(reply *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 422 on LARQL routes, 400 on OpenAI ones: a JSON body of the wrong shape (util.c) */
int srv_shape_status(const route *rt);
void reply_route_err(reply *r, const route *rt, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int status_from_lq(int code);             /* LQ_E* -> HTTP status */
char *lq_dump(json_t *j, size_t *len);    /* compact JSON text, malloc'd */
/* Parses the request body as a JSON object. On failure fills r (400) and returns NULL. */
json_t *req_json_body(req *q, reply *r);
/* Typed optional field access: 0 = absent or null (out untouched), 1 = present, -1 = wrong
 * type or range (r filled with a 400 naming the field). */
int jget_int(const route *rt, json_t *o, const char *k, long lo, long hi, long *out, reply *r);
int jget_num(const route *rt, json_t *o, const char *k, double lo, double hi, double *out, reply *r);
int jget_bool(const route *rt, json_t *o, const char *k, int *out, reply *r);
int jget_str(const route *rt, json_t *o, const char *k, const char **out, size_t *len, reply *r);
void srv_log(lq_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* models.c: the model (eager or single-flight lazy), its scheduler, the session pool */
int srv_model_load(lq_server *s, lq_err *err);                  /* the eager load at start */
int srv_model(lq_server *s, lq_model **m, lq_err *err);          /* loads if lazy */
lq_scheduler *srv_sched(lq_server *s); /* after srv_model succeeded */
int srv_session_get(lq_server *s, lq_session **out, lq_err *err);
void srv_session_put(lq_server *s, lq_session *sess);
uint64_t srv_cgroup_memory_max(void);  /* the cgroup's memory.max, 0 = none */

/* oai_warm.c: after a generation, the prompt text + the answer as sent, tokenized as the next
 * turn will be (flags: lq_tokenizer_encode's), prefilled into the prompt cache in idle time
 * (lq_scheduler_warm). Failures only lose the speed-up. */
void srv_warm_next_turn(lq_scheduler *sc, const lq_tokenizer *tok, unsigned flags, const char *prompt,
                        size_t plen, const char *sent, size_t slen);

/* http.c: libmicrohttpd's callbacks (request plumbing, auth, dispatch through the table) */
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size, void **con_cls);
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);
size_t srv_http_unescape(void *cls, struct MHD_Connection *c, char *s);

const char *srv_method_label(int m); /* "GET", "POST", "DELETE" */

/* util.c */
int srv_conn_gone(struct MHD_Connection *c); /* the peer hung up (poll, no wait) */

/* metrics.c */
void metrics_count(lq_server *s, const route *rt, int status); /* rt NULL: "other" */
void metrics_gen(lq_server *s, int n_prompt, int n_generated, double prefill_ms, double decode_ms);
void route_metrics(lq_server *s, req *q, reply *r);
void route_stats(lq_server *s, req *q, reply *r);
void route_runtime(lq_server *s, req *q, reply *r);

/* routes_larql.c */
void route_health(lq_server *s, req *q, reply *r);
void route_models(lq_server *s, req *q, reply *r);
void route_describe(lq_server *s, req *q, reply *r);
void route_walk(lq_server *s, req *q, reply *r);
void route_select(lq_server *s, req *q, reply *r);
void route_relations(lq_server *s, req *q, reply *r);
void route_infer(lq_server *s, req *q, reply *r);
void route_explain(lq_server *s, req *q, reply *r); /* POST /v1/explain-infer */
void route_warmup(lq_server *s, req *q, reply *r);  /* POST /v1/warmup */
void route_tok_encode(lq_server *s, req *q, reply *r);
void route_tok_decode(lq_server *s, req *q, reply *r);
void route_embed(lq_server *s, req *q, reply *r);     /* POST /v1/embed: JSON or binary */
void route_embed_row(lq_server *s, req *q, reply *r); /* GET /v1/embed/{token_id} */
void route_logits(lq_server *s, req *q, reply *r);
void route_walk_ffn(lq_server *s, req *q, reply *r);     /* POST /v1/walk-ffn (routes_ffn.c) */
void route_shard(lq_server *s, req *q, reply *r);        /* GET /v1/shard/{model_id}/{range} (routes_shard.c) */
/* Common preamble of model routes: model load (503 when it fails); with inference set,
 * --no-infer -> 503 too. 0 ok, else r is filled. */
int need_model(lq_server *s, const route *rt, reply *r, lq_model **m, int inference);
/* The tokenizer of the model, or of the vindex when no model is loaded. NULL + r filled. */
const lq_tokenizer *need_tokenizer(lq_server *s, const route *rt, reply *r);
/* POST /v1/infer and the WebSocket's infer: lq_infer_json on a pooled session (bounded by
 * --max-concurrent), with the knowledge state named by session_id (the X-Session-Id header;
 * NULL or unknown = the global state). 0 with *body (malloc'd, the library's JSON), or LQ_E*
 * with e filled (status_from_lq gives the HTTP status: LQ_EBUSY 503 when no model or session
 * is available). */
int srv_infer(lq_server *s, const char *session_id, const lq_infer_params *p, char **body, lq_err *e);
/* Decoded text of one token id (raw bytes, may be partial UTF-8), malloc'd. */
char *token_text(const lq_tokenizer *t, int32_t id, size_t *len);

/* knowledge.c: overlays, sessions, the editing routes */
typedef struct srv_ksession srv_ksession;
/* A read view of what the model knows for one request: the session's (sid names an existing
 * session) or the global state, locked until srv_kview_put. v is the vindex every read query
 * takes (the plain vindex, or NULL, on a server without overlays), knn the store for infer. */
typedef struct kview {
    lq_server *s;
    srv_ksession *ks;
    struct lq_overlay *ov;
    const lq_vindex *v;
    const lq_knn_store *knn;
    struct lq_edit_set *edits; /* the state's forward-pass edits (a reference), or NULL */
    const char *sid;
} kview;
int srv_knowledge_init(lq_server *s, lq_err *err);
void srv_knowledge_free(lq_server *s);
int srv_kview_get(lq_server *s, const char *sid, kview *kv, lq_err *e); /* 0 or LQ_E* (status_from_lq) */
void srv_kview_put(kview *kv);
/* dcache.c: the describe cache (--cache-ttl > 0), keyed by the session (NULL: the global
 * state), the edit generation and the query; srv_dcache_bump after every edit. */
typedef struct srv_dcache srv_dcache;
int srv_dcache_init(lq_server *s);
void srv_dcache_free(lq_server *s);
void srv_dcache_bump(lq_server *s);
int srv_dcache_get(lq_server *s, const char *sid, const char *query, char **body, size_t *len);
void srv_dcache_put(lq_server *s, const char *sid, const char *query, const char *body, size_t len);
void srv_dcache_stats(lq_server *s, uint64_t *hits, uint64_t *misses);
/* The forward-pass edits a generation for this request runs (sid's session, or the global
 * state): *out is a hook for lq_generate_params.hook (composed features act, a KNN match
 * names the next token), or NULL when nothing edits the forward pass. 0 or LQ_E*. */
int srv_edit_hook(lq_server *s, const char *sid, lq_resid_hook **out, uint64_t *key, lq_err *e);
void route_insert(lq_server *s, req *q, reply *r);       /* POST /v1/insert */
void route_patches(lq_server *s, req *q, reply *r);      /* GET, POST /v1/patches[/apply] */
void route_patch_delete(lq_server *s, req *q, reply *r); /* DELETE /v1/patches/{name} */
void route_edit_delete(lq_server *s, req *q, reply *r);  /* DELETE /v1/edits/{id} */

/* openapi.c: GET /v1/openapi.json, generated from the route table */
char *srv_openapi_json(const lq_server *s, size_t *len);
void route_openapi(lq_server *s, req *q, reply *r);

/* ws.c: GET /v1/stream (WebSocket); answers 101 and runs the session, or a 4xx */
void route_stream(lq_server *s, req *q, reply *r);

/* web.c: GET / and GET /assets/NAME, the built-in page compiled into the binary */
void route_web_index(lq_server *s, req *q, reply *r);  /* GET / */
void route_web_asset(lq_server *s, req *q, reply *r);  /* GET /assets/{name} */
/* If-None-Match (NULL: absent) names etag: a tag of its list, weak or strong, or "*" */
int srv_etag_matches(const char *inm, const char *etag);

/* routes_openai.c */
void route_completions(lq_server *s, req *q, reply *r);
void route_chat(lq_server *s, req *q, reply *r);
void route_embeddings(lq_server *s, req *q, reply *r);
void route_slots(lq_server *s, req *q, reply *r);        /* POST /slots/{id}?action=save|restore */

#endif
