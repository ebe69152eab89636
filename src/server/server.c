/* HTTP glue on libmicrohttpd: one thread per connection (a slow client blocks only its own
 * thread), request accumulation under a body limit and an upload deadline, routing with
 * 404/405, bearer auth compared in constant time, CORS, the --max-concurrent gate (503 +
 * Retry-After, never a queue), the model (eager or single-flight lazy) and the session pool,
 * graceful stop. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "larql/chat.h"
#include "larql/mapfault.h"
#include "server/internal.h"

/* Every route LARQL and OpenAI clients use; anything else is 404. */
static const route ROUTES[] = {
    /* path, id, methods, openai, gated, prefix, model_scoped (also under /v1/{model_id}/...) */
    {"/v1/health", R_HEALTH, M_GET, 0, 0, 0, 0},
    {"/v1/models", R_MODELS, M_GET, 1, 0, 0, 0},
    {"/v1/openapi.json", R_OPENAPI, M_GET, 0, 0, 0, 0},
    {"/v1/stats", R_STATS, M_GET, 0, 0, 0, 1},
    {"/v1/runtime", R_RUNTIME, M_GET, 0, 0, 0, 1},
    {"/metrics", R_METRICS, M_GET, 0, 0, 0, 0},
    {"/v1/describe", R_DESCRIBE, M_GET, 0, 1, 0, 1},
    {"/v1/walk", R_WALK, M_GET, 0, 1, 0, 1},
    {"/v1/select", R_SELECT, M_POST, 0, 1, 0, 1},
    {"/v1/relations", R_RELATIONS, M_GET, 0, 1, 0, 1},
    {"/v1/infer", R_INFER, M_POST, 0, 1, 0, 1},
    {"/v1/token/encode", R_TOK_ENCODE, M_GET, 0, 1, 0, 1},
    {"/v1/token/decode", R_TOK_DECODE, M_GET, 0, 1, 0, 1},
    {"/v1/embed", R_EMBED, M_POST, 0, 1, 0, 1},
    {"/v1/embed/", R_EMBED_ROW, M_GET, 0, 1, 1, 1}, /* /v1/embed/{token_id} */
    {"/v1/logits", R_LOGITS, M_POST, 0, 1, 0, 1},
    {"/v1/completions", R_COMPLETIONS, M_POST, 1, 1, 0, 0},
    {"/v1/chat/completions", R_CHAT, M_POST, 1, 1, 0, 0},
    {"/v1/embeddings", R_EMBEDDINGS, M_POST, 1, 1, 0, 0},
    {"/v1/explain-infer", R_EXPLAIN, M_POST, 0, 1, 0, 1},
    {"/v1/insert", R_INSERT, M_POST, 0, 1, 0, 1},
    {"/v1/patches", R_PATCHES, M_GET, 0, 1, 0, 1},
    {"/v1/patches/apply", R_PATCHES, M_POST, 0, 1, 0, 1},
    {"/v1/patches/", R_PATCH_DELETE, M_DELETE, 0, 1, 1, 1}, /* /v1/patches/{name} */
    /* not gated: a WebSocket may stay open and idle for long; its generations go through
     * the scheduler's bounded queue and its infers through the bounded session pool */
    {"/v1/stream", R_STREAM, M_GET, 0, 0, 0, 1},
    /* the built-in page (web.c): not gated, served from memory */
    {"/", R_WEB_INDEX, M_GET, 0, 0, 0, 0},
    {"/assets/", R_WEB_ASSET, M_GET, 0, 0, 1, 0}, /* /assets/{name} */
};
static const route UNKNOWN_ROUTE = {"", R_UNKNOWN, 0, 0, 0, 0, 0};

const route *srv_routes(size_t *n)
{
    *n = sizeof ROUTES / sizeof ROUTES[0];
    return ROUTES;
}

/* Exact paths, plus prefix routes that take exactly one more non-empty segment (the
 * segment is returned in *arg, *arg_len; no slash inside it). "/v1/embed" and "/v1/embed/"
 * stay the exact POST route: a prefix route needs something after its slash. */
static const route *find_route(const char *url, const char **arg, size_t *arg_len)
{
    /* a trailing slash is the same route ("/v1/models/") */
    size_t n = strlen(url);
    if (n > 1 && url[n - 1] == '/')
        n--;
    *arg = NULL;
    *arg_len = 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const route *rt = &ROUTES[i];
        size_t pl = strlen(rt->path);
        if (!rt->prefix) {
            if (pl == n && !memcmp(rt->path, url, n))
                return rt;
        } else if (n > pl && !memcmp(rt->path, url, pl) && !memchr(url + pl, '/', n - pl)) {
            *arg = url + pl;
            *arg_len = n - pl;
            return rt;
        }
    }
    return NULL;
}

/* LARQL's multi-model paths: /v1/{model_id}/REST answers as /v1/REST on that model, for the
 * routes that are model_scoped. An exact route wins (so a model named "chat" cannot shadow
 * /v1/chat/completions). On a match *target is the model's server. */
static const route *find_model_route(lq_server *front, const char *url, lq_server **target, const char **arg,
                                     size_t *arg_len)
{
    if (strncmp(url, "/v1/", 4))
        return NULL;
    const char *id = url + 4, *slash = strchr(id, '/');
    if (!slash || slash == id)
        return NULL;
    size_t idl = (size_t)(slash - id);
    for (int k = 0; k < front->n_models; k++) {
        lq_server *m = front->models[k];
        if (strlen(m->model_id) != idl || memcmp(m->model_id, id, idl))
            continue;
        char rest[1024];
        if ((size_t)snprintf(rest, sizeof rest, "/v1%s", slash) >= sizeof rest)
            return NULL;
        const route *rt = find_route(rest, arg, arg_len);
        if (!rt || !rt->model_scoped)
            return NULL;
        *arg = *arg ? slash + (*arg - rest) - 3 : NULL; /* the same bytes in url */
        *target = m;
        return rt;
    }
    return NULL;
}

/* /v1/X/REST where REST is a model-scoped route but X names no model served: LARQL's
 * "model 'X' not found" (404) rather than "no route". */
static int unknown_model(const char *url, size_t *idl)
{
    if (strncmp(url, "/v1/", 4))
        return 0;
    const char *slash = strchr(url + 4, '/');
    if (!slash || slash == url + 4)
        return 0;
    char rest[1024];
    const char *arg;
    size_t al;
    if ((size_t)snprintf(rest, sizeof rest, "/v1%s", slash) >= sizeof rest)
        return 0;
    const route *rt = find_route(rest, &arg, &al);
    *idl = (size_t)(slash - url - 4);
    return rt && rt->model_scoped;
}

/* ---- model, sessions ---- */

/* The memory bound (--memory-limit, else the cgroup's memory.max): the weights and 1/8 of
 * them for scratch and the rest stay resident, and what is left pays for KV caches. Every
 * session has the server's context, so its KV size is fixed: the generation slots (the
 * scheduler's) and the single-pass sessions (the pool's, /v1/infer) are capped to what fits,
 * so that a request beyond them waits for a slot or gets 503 instead of allocating past the
 * bound, and a context whose KV cache cannot fit even one of each is refused here, naming
 * the sizes, before anything is allocated. */
#define MIB(b) ((double)(b) / 1048576.0)
static int fit_memory(lq_server *s, lq_model *m, lq_scheduler_opts *so, lq_err *err)
{
    if (!s->mem_limit)
        return 0;
    const lq_model_info *mi = lq_model_get_info(m);
    int n_ctx = so->n_ctx > 0 ? so->n_ctx : mi->n_ctx_train;
    uint64_t kv = lq_model_kv_bytes(m, n_ctx);
    uint64_t resident = mi->weight_bytes + mi->weight_bytes / 8 + mi->repack_bytes;
    uint64_t left = s->mem_limit > resident ? s->mem_limit - resident : 0;
    uint64_t fit = kv ? left / kv : UINT64_MAX;
    if (fit < 2)
        return lq_err_set(err, LQ_ENOMEM,
                          "memory limit %.1f MiB: the weights keep about %.1f MiB resident and a session's KV "
                          "cache at context %d needs %.2f MiB; the %.2f MiB left is not enough for one generation "
                          "and one single-pass session (lower --ctx or raise --memory-limit)",
                          MIB(s->mem_limit), MIB(resident), n_ctx, MIB(kv), MIB(left));
    if (fit < 2 * (uint64_t)s->o.max_concurrent) {
        so->max_active = (int)(fit / 2);
        s->pool_cap = (int)(fit - fit / 2);
        srv_log(s, "memory limit %.1f MiB: KV caches (%.2f MiB each at context %d) for %d concurrent generations "
                "and %d single-pass sessions, not %d each",
                MIB(s->mem_limit), MIB(kv), n_ctx, so->max_active, s->pool_cap, s->o.max_concurrent);
    }
    return 0;
}

static int load_model(lq_server *s, lq_err *err)
{
    lq_model_opts mo = s->o.model;
    mo.kernels = s->kernels;
    double t = lq_now();
    lq_model *m = NULL;
    /* a vindex is opened once: the model borrows the one the browse routes use */
    int rc = s->vx ? lq_vindex_model_open(s->vx, &mo, &m, err) : lq_model_open_gguf(s->model_path, &mo, &m, err);
    if (rc)
        return rc;
    s->load_ms = (lq_now() - t) * 1000.0;
    /* Every generation request goes through one scheduler, so that concurrent streams
     * decode together (one batched step per token). Its slots match --max-concurrent: the
     * HTTP gate already bounds requests in flight, so the queue only absorbs the moment
     * between a request's end and its slot's release. */
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.max_active = s->o.max_concurrent;
    so.max_queued = s->o.max_concurrent;
    so.n_ctx = s->o.n_ctx;
    s->pool_cap = s->o.max_concurrent;
    if ((rc = fit_memory(s, m, &so, err)) != 0) {
        lq_model_close(m);
        return rc;
    }
    rc = lq_scheduler_create(m, &so, &s->sched, err);
    if (rc) {
        lq_model_close(m);
        return rc;
    }
    const lq_model_info *mi = lq_model_get_info(m);
    /* every session, the scheduler's and the single-pass pool's, has this context and so
     * this KV size (f32 or f16 as the model keeps it) */
    s->n_ctx = lq_scheduler_n_ctx(s->sched);
    s->kv_bytes_per_session = lq_model_kv_bytes(m, s->n_ctx);
    __atomic_store_n(&s->model, m, __ATOMIC_RELEASE);
    srv_log(s, "loaded %s (%s, %d layers, %d dim, vocab %d, kernels %s, %d threads, KV %s, lm_head %s, "
            "weights %s) in %.1f ms",
            s->model_path, mi->arch_name, mi->n_layer, mi->n_embd, mi->n_vocab,
            mi->kernels ? mi->kernels : "?", mi->n_threads, lq_kv_type_name(mi->kv_type),
            mi->lm_head_q8 ? "q8" : "as stored", mi->weights_copied ? "mapped, copying into 2 MB pages" : "mapped",
            s->load_ms);
    return 0;
}

int srv_model(lq_server *s, lq_model **m, lq_err *err)
{
    lq_model *cur = __atomic_load_n(&s->model, __ATOMIC_ACQUIRE);
    if (cur) {
        *m = cur;
        return 0;
    }
    /* single flight: the first caller loads, the others wait on the mutex and reuse it */
    pthread_mutex_lock(&s->load_mu);
    int rc = 0;
    if (!s->model) {
        if (s->load_failed) {
            rc = s->load_err.code ? s->load_err.code : LQ_EIO;
            if (err)
                *err = s->load_err;
        } else if ((rc = load_model(s, &s->load_err)) != 0) {
            s->load_failed = 1;
            s->load_err.code = rc;
            if (err)
                *err = s->load_err;
        }
    }
    *m = s->model;
    pthread_mutex_unlock(&s->load_mu);
    return rc;
}

int srv_session_get(lq_server *s, lq_session **out, lq_err *err)
{
    lq_model *m;
    int rc = srv_model(s, &m, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->pool_mu);
    if (s->n_free) {
        *out = s->pool_free[--s->n_free];
        pthread_mutex_unlock(&s->pool_mu);
        __atomic_add_fetch(&s->m.active_sessions, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (s->n_sessions >= s->pool_cap) {
        pthread_mutex_unlock(&s->pool_mu);
        return lq_err_set(err, LQ_EBUSY, "all %d sessions are busy%s", s->pool_cap,
                          s->pool_cap < s->o.max_concurrent ? " (as many as the memory limit allows)" : "");
    }
    s->n_sessions++; /* reserve, create outside the lock (KV allocation may be large) */
    pthread_mutex_unlock(&s->pool_mu);
    rc = lq_session_create(m, s->n_ctx, out, err);
    if (rc) {
        pthread_mutex_lock(&s->pool_mu);
        s->n_sessions--;
        pthread_mutex_unlock(&s->pool_mu);
        return rc;
    }
    __atomic_add_fetch(&s->m.active_sessions, 1, __ATOMIC_RELAXED);
    return 0;
}

lq_scheduler *srv_sched(lq_server *s)
{
    /* written before the model pointer is published (release/acquire on s->model) */
    return __atomic_load_n(&s->model, __ATOMIC_ACQUIRE) ? s->sched : NULL;
}

void srv_session_put(lq_server *s, lq_session *sess)
{
    if (!sess)
        return;
    lq_session_reset(sess);
    pthread_mutex_lock(&s->pool_mu);
    s->pool_free[s->n_free++] = sess;
    pthread_mutex_unlock(&s->pool_mu);
    __atomic_sub_fetch(&s->m.active_sessions, 1, __ATOMIC_RELAXED);
}

int srv_conn_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void srv_release_slot(lq_server *s)
{
    __atomic_sub_fetch(&s->m.active_requests, 1, __ATOMIC_RELAXED);
}

/* ---- replies ---- */

static enum MHD_Result send_reply(req *q, reply *r, int allow_methods)
{
    lq_server *s = q->srv;
    struct MHD_Response *resp = r->stream;
    if (!resp && r->static_body) {
        /* MHD only reads a persistent buffer; the cast drops const for its signature */
        resp = MHD_create_response_from_buffer(r->len, (void *)(uintptr_t)r->static_body, MHD_RESPMEM_PERSISTENT);
        free(r->body);
        r->body = NULL;
        if (!resp)
            return MHD_NO;
    }
    if (!resp) {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(r->body);
            r->body = NULL;
            return MHD_NO;
        }
        r->body = NULL; /* owned by the response now */
    }
    if (r->ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype);
    if (r->cache_control)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, r->cache_control);
    if (r->vary)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, r->vary);
    if (r->etag)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, r->etag);
    if (r->web) {
        /* this origin only: no inline script or style, no other host for anything */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    if (r->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", r->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (allow_methods) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                allow_methods == (M_GET | M_POST) ? "GET, POST"
                                : allow_methods == M_POST ? "POST" : allow_methods == M_DELETE ? "DELETE" : "GET");
    }
    if (r->status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (s->o.cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Retry-After");
    }
    enum MHD_Result ret = MHD_queue_response(q->conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    metrics_count(s, q->rt ? q->rt->id : R_UNKNOWN, r->status);
    q->responded = 1;
    return ret;
}

/* Constant-time in the length of the key: every byte of the key is compared whatever the
 * offered value is, and the length difference is folded into the same accumulator. */
static int key_ok(const char *key, const char *auth)
{
    static const char pfx[] = "Bearer ";
    const char *offered = "";
    if (auth && !strncmp(auth, pfx, sizeof pfx - 1))
        offered = auth + sizeof pfx - 1;
    size_t kl = strlen(key), ol = strlen(offered);
    unsigned diff = (unsigned)(kl ^ ol);
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < ol ? offered[i] : 0);
    return diff == 0;
}

/* Which model serves the request: the one its path names (/v1/{model_id}/...), else for
 * the OpenAI routes the one the body's "model" names (LARQL's multi-model OpenAI routes take
 * it from the body), else the first one served. */
static lq_server *openai_target(lq_server *front, req *q)
{
    if (!q->rt->openai || front->n_models < 2 || !q->body || q->target != front)
        return q->target;
    json_t *j = json_loadb(q->body, q->len, 0, NULL);
    const char *m = json_string_value(json_object_get(j, "model"));
    lq_server *t = q->target;
    for (int k = 0; m && k < front->n_models; k++)
        if (!strcmp(front->models[k]->model_id, m))
            t = front->models[k];
    json_decref(j);
    return t;
}

static void dispatch(lq_server *s, req *q, reply *r)
{
    /* a mapped model or vindex file shrank on disk (lq_mapfault_recover turned the missing
     * pages into zeros): answers from it would be wrong, so only the counters and the page
     * (served from memory) still answer */
    int from_memory = q->rt->id == R_STATS || q->rt->id == R_METRICS || q->rt->id == R_WEB_INDEX ||
                      q->rt->id == R_WEB_ASSET;
    if (!from_memory && lq_mapfault_count()) {
        reply_route_err(r, q->rt, 503,
                        "a mapped model or vindex file was truncated or rewritten on disk while this server had it "
                        "mapped; restart the server to load it again");
        return;
    }
    switch (q->rt->id) {
    case R_HEALTH: route_health(s, q, r); break;
    case R_MODELS: route_models(s, q, r); break;
    case R_STATS: route_stats(s, q, r); break;
    case R_RUNTIME: route_runtime(s, q, r); break;
    case R_METRICS: route_metrics(s, q, r); break;
    case R_DESCRIBE: case R_WALK: case R_SELECT: case R_RELATIONS: route_browse(s, q, r); break;
    case R_INFER: route_infer(s, q, r); break;
    case R_TOK_ENCODE: route_tok_encode(s, q, r); break;
    case R_TOK_DECODE: route_tok_decode(s, q, r); break;
    case R_EMBED: route_embed(s, q, r); break;
    case R_EMBED_ROW: route_embed_row(s, q, r); break;
    case R_LOGITS: route_logits(s, q, r); break;
    case R_COMPLETIONS: route_completions(s, q, r); break;
    case R_CHAT: route_chat(s, q, r); break;
    case R_EMBEDDINGS: route_embeddings(s, q, r); break;
    case R_STREAM: route_stream(s, q, r); break;
    case R_OPENAPI: route_openapi(s, q, r); break;
    case R_INSERT: route_insert(s, q, r); break;
    case R_EXPLAIN: route_explain(s, q, r); break;
    case R_PATCHES: route_patches(s, q, r); break;
    case R_PATCH_DELETE: route_patch_delete(s, q, r); break;
    case R_WEB_INDEX: case R_WEB_ASSET: route_web(s, q, r); break;
    default: reply_larql_err(r, 404, "not found"); break;
    }
}

/* A body over --max-body is still read, and dropped, up to max_body plus the larger of
 * max_body and 16 MiB in all, as nginx discards a refused body: a client that writes its
 * whole body before it reads (Python's http.client, urllib, requests) then gets the 413,
 * where a connection closed under its writes leaves it a broken pipe. Past the bound the
 * connection is closed; a body announced past it is refused at once, unread. */
#define DRAIN_MIN ((uint64_t)16 << 20)

static uint64_t drain_bound(const lq_server *s)
{
    uint64_t b = s->o.max_body;
    return b + (b > DRAIN_MIN ? b : DRAIN_MIN);
}

/* Percent-decoding of the path and the query arguments (libmicrohttpd's, except for %00):
 * a decoded NUL would silently cut the C string every route reads ("/assets/app.js%00.css"
 * would name app.js, "entity=a%00b" would be "a"), so %00 is left as the three characters it
 * is. Invalid escapes stay as they are, as in MHD_http_unescape. */
static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static size_t unescape_keep_nul(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *p = s; *p; p++) {
        int hi, lo;
        if (p[0] == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    lq_server *s = cls;
    req *q = *con_cls;
    reply r = {0};
    if (!q) {
        q = calloc(1, sizeof *q);
        if (!q)
            return MHD_NO;
        *con_cls = q;
        q->srv = s;
        q->conn = conn;
        q->t0 = lq_now();
        __atomic_add_fetch(&s->m.requests_total, 1, __ATOMIC_RELAXED);
        q->method = !strcmp(method, "GET") || !strcmp(method, "HEAD") ? M_GET
                    : !strcmp(method, "POST") ? M_POST : !strcmp(method, "DELETE") ? M_DELETE : 0;
        q->is_options = !strcmp(method, "OPTIONS");
        const char *arg;
        size_t arg_len;
        q->rt = find_route(url, &arg, &arg_len);
        q->target = s;
        if (!q->rt)
            q->rt = find_model_route(s, url, &q->target, &arg, &arg_len);
        if (arg) {
            size_t keep = arg_len < sizeof q->path_arg ? arg_len : sizeof q->path_arg - 1;
            memcpy(q->path_arg, arg, keep);
            q->path_arg[keep] = 0;
            q->path_arg_long = keep < arg_len;
        }
        if (s->o.cors && q->is_options) {
            r.status = 204;
            if (!r.stream) {
                struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
                MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
                MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                        "Authorization, Content-Type, X-Session-Id");
                MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
                enum MHD_Result ret = MHD_queue_response(conn, 204, resp);
                MHD_destroy_response(resp);
                metrics_count(s, q->rt ? q->rt->id : R_UNKNOWN, 204);
                q->responded = 1;
                return ret;
            }
        }
        if (!q->rt) {
            q->rt = &UNKNOWN_ROUTE;
            size_t idl = 0;
            if (unknown_model(url, &idl))
                reply_larql_err(&r, 404, "model '%.*s%s' not found (GET /v1/models lists the models served)",
                                (int)(idl > 128 ? 128 : idl), url + 4, idl > 128 ? "..." : "");
            else
                reply_larql_err(&r, 404, "no route for %s %s", method, url);
            return send_reply(q, &r, 0);
        }
        if (!(q->rt->methods & q->method)) {
            reply_route_err(&r, q->rt, 405, "method %s not allowed on %s (use %s)", method, q->rt->path,
                            q->rt->methods & M_POST ? "POST" : q->rt->methods & M_DELETE ? "DELETE" : "GET");
            return send_reply(q, &r, q->rt->methods);
        }
        /* the page is public (it holds no data; the user types the key into it) */
        if (s->api_key && q->rt->id != R_HEALTH && q->rt->id != R_WEB_INDEX && q->rt->id != R_WEB_ASSET &&
            !key_ok(s->api_key, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))) {
            reply_route_err(&r, q->rt, 401, "missing or invalid API key (Authorization: Bearer KEY)");
            return send_reply(q, &r, 0);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || v > s->o.max_body) {
                /* a client that sent Expect: 100-continue waits for this reply before its body */
                const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
                if (errno || *end || v > drain_bound(s) || (expect && !strcasecmp(expect, "100-continue"))) {
                    reply_route_err(&r, q->rt, 413, "request body of %s bytes is over the limit of %zu bytes",
                                    cl, s->o.max_body);
                    return send_reply(q, &r, 0);
                }
                q->too_large = 1; /* drained below; the 413 follows the body */
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->responded)
            return MHD_YES;
        if (lq_now() - q->t0 > s->o.request_timeout_s) {
            /* a client trickling its body: drop the connection, no worker was ever taken */
            q->timed_out = 1;
            metrics_count(s, q->rt->id, 408);
            return MHD_NO;
        }
        if (q->too_large || q->len + n > s->o.max_body) {
            q->too_large = 1; /* discarded; the 413 goes out once the body is in */
            q->dropped += n;
            if (q->len + q->dropped > drain_bound(s)) {
                /* MHD takes no reply in the middle of a body: closing is all there is */
                metrics_count(s, q->rt->id, 413);
                return MHD_NO;
            }
            return MHD_YES;
        }
        if (q->len + n + 1 > q->cap) {
            size_t nc = q->cap ? q->cap * 2 : 4096;
            while (nc < q->len + n + 1)
                nc *= 2;
            if (nc > s->o.max_body + 1)
                nc = s->o.max_body + 1;
            char *nb = realloc(q->body, nc);
            if (!nb) {
                q->too_large = 1; /* drained like a body over the limit (counted in its size) */
                q->dropped += n;
                return MHD_YES;
            }
            q->body = nb;
            q->cap = nc;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        q->body[q->len] = 0;
        return MHD_YES;
    }
    if (q->responded)
        return MHD_YES;
    if (q->too_large) {
        reply_route_err(&r, q->rt, 413, "request body of %llu bytes is over the limit of %zu bytes",
                        (unsigned long long)(q->len + q->dropped), s->o.max_body);
        return send_reply(q, &r, 0);
    }
    if (q->rt->gated) {
        if (__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) {
            reply_route_err(&r, q->rt, 503, "server is shutting down");
            r.retry_after = 5;
            return send_reply(q, &r, 0);
        }
        int64_t now = __atomic_add_fetch(&s->m.active_requests, 1, __ATOMIC_ACQ_REL);
        if (now > s->o.max_concurrent) {
            __atomic_sub_fetch(&s->m.active_requests, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&s->m.rejected_busy, 1, __ATOMIC_RELAXED);
            reply_route_err(&r, q->rt, 503, "server busy: %d requests in flight (--max-concurrent); retry shortly",
                            s->o.max_concurrent);
            r.retry_after = 1;
            return send_reply(q, &r, 0);
        }
        q->holds_slot = 1;
    }
    uint64_t faults = lq_mapfault_count();
    dispatch(openai_target(s, q), q, &r);
    if (!r.stream && !r.body && !r.static_body)
        reply_larql_err(&r, 500, "internal error: the route produced no reply");
    if (!r.stream && !r.static_body && lq_mapfault_count() != faults) {
        /* this answer was computed while a mapped file vanished under it: read zeros */
        free(r.body);
        r.body = NULL;
        reply_route_err(&r, q->rt, 503, "a mapped model or vindex file was truncated on disk while this request "
                                        "read it; restart the server to load it again");
    }
    return send_reply(q, &r, 0);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    lq_server *s = cls;
    req *q = *con_cls;
    if (!q)
        return;
    if (q->holds_slot)
        srv_release_slot(s);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

/* ---- memory check ---- */

static uint64_t cgroup_memory_max(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[4096], path[4200] = "";
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
            break;
        }
    }
    fclose(f);
    if (!*path)
        return 0;
    f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    char buf[64] = "";
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3))
        v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

/* ---- lifecycle ---- */

void lq_server_opts_init(lq_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_concurrent = 64;
    o->max_body = 2u << 20;
    o->request_timeout_s = 30;
    o->shutdown_grace_s = 5;
    o->max_sessions = 64;
    o->session_ttl_s = 3600;
}

static char *dupz(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void model_id_from_path(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t len = n - b;
    if (len > 5 && !memcmp(path + n - 5, ".gguf", 5))
        len -= 5;
    if (len >= cap)
        len = cap - 1;
    memcpy(out, path + b, len);
    out[len] = 0;
}

static void server_free(lq_server *s)
{
    if (!s)
        return;
    if (s->pool_free) {
        for (int i = 0; i < s->n_free; i++)
            lq_session_free(s->pool_free[i]);
        free(s->pool_free);
    }
    /* after the daemon stopped: every stream has released its scheduler handle */
    lq_scheduler_free(s->sched);
    lq_model_close(s->model);
    if (s->knowledge_ready)
        srv_knowledge_free(s);
    lq_vindex_close(s->vx);
    if (s->stop_pipe[0] > 0)
        close(s->stop_pipe[0]);
    if (s->stop_pipe[1] > 0)
        close(s->stop_pipe[1]);
    pthread_mutex_destroy(&s->load_mu);
    pthread_mutex_destroy(&s->pool_mu);
    free(s->host);
    free(s->api_key);
    free(s->model_path);
    free(s->kernels);
    free(s->state_dir);
    free(s->patch_dir);
    free(s->chat_template);
    free(s->models);
    free(s);
}

/* Opens one model's server (validated options, the model or vindex, its knowledge state)
 * without listening: lq_server_start listens on the first one opened. */
static int srv_open(const lq_server_opts *o, lq_server **out, lq_err *err)
{
    *out = NULL;
    if (!o || !o->model_path || !*o->model_path)
        return lq_err_set(err, LQ_EINVAL, "server: a model path is required");
    if (o->port < 0 || o->port > 65535)
        return lq_err_set(err, LQ_EINVAL, "server: port %d is outside 0..65535", o->port);
    if (o->max_sessions < 1 || o->max_sessions > 100000 || o->session_ttl_s < 1)
        return lq_err_set(err, LQ_EINVAL, "server: max_sessions %d (1..100000) / session_ttl %d s (>= 1)",
                          o->max_sessions, o->session_ttl_s);
    if (o->max_concurrent < 1 || o->max_concurrent > 4096)
        return lq_err_set(err, LQ_EINVAL, "server: max_concurrent %d is outside 1..4096", o->max_concurrent);
    if (o->max_body < 1024 || o->max_body > ((size_t)1 << 30))
        return lq_err_set(err, LQ_EINVAL, "server: max_body %zu is outside 1 KiB..1 GiB", o->max_body);
    if (o->request_timeout_s < 1 || o->request_timeout_s > 86400)
        return lq_err_set(err, LQ_EINVAL, "server: request timeout %d s is outside 1..86400", o->request_timeout_s);
    if (o->n_ctx < 0)
        return lq_err_set(err, LQ_EINVAL, "server: ctx %d is negative", o->n_ctx);

    struct stat st;
    if (stat(o->model_path, &st))
        return lq_err_set(err, LQ_EIO, "cannot open model '%s': %s", o->model_path, strerror(errno));
    uint64_t limit = o->memory_limit ? o->memory_limit : cgroup_memory_max();
    if (limit && !S_ISDIR(st.st_mode)) {
        /* the mapped weights are resident once touched; leave 1/8 for KV caches and the rest */
        uint64_t need = (uint64_t)st.st_size + (uint64_t)st.st_size / 8;
        if (need > limit)
            return lq_err_set(err, LQ_ENOMEM,
                              "model '%s' needs about %llu MiB (file %llu MiB + 1/8 headroom) but the memory "
                              "limit is %llu MiB",
                              o->model_path, (unsigned long long)(need >> 20),
                              (unsigned long long)((uint64_t)st.st_size >> 20),
                              (unsigned long long)(limit >> 20));
    }

    lq_server *s = calloc(1, sizeof *s);
    if (!s)
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory");
    s->o = *o;
    s->mem_limit = limit;
    s->host = dupz(o->host && *o->host ? o->host : "127.0.0.1");
    s->api_key = o->api_key && *o->api_key ? dupz(o->api_key) : NULL;
    s->model_path = dupz(o->model_path);
    s->kernels = dupz(o->model.kernels);
    s->state_dir = dupz(o->state_dir);
    s->patch_dir = dupz(o->patch_dir);
    s->o.state_dir = s->state_dir;
    s->o.patch_dir = s->patch_dir;
    s->chat_template = dupz(o->chat_template);
    s->o.chat_template = s->chat_template;
    s->o.host = s->host;
    s->o.api_key = s->api_key;
    s->o.model_path = s->model_path;
    s->o.model.kernels = s->kernels;
    if (s->o.shutdown_grace_s < 0)
        s->o.shutdown_grace_s = 0;
    pthread_mutex_init(&s->load_mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    s->stop_pipe[0] = s->stop_pipe[1] = -1;
    s->pool_free = calloc((size_t)s->o.max_concurrent, sizeof *s->pool_free);
    model_id_from_path(s->model_path, s->model_id, sizeof s->model_id);
    s->t_boot = lq_now();
    s->created_unix = (long)time(NULL);
    if (!s->pool_free || !s->host || !s->model_path || (o->model.kernels && !s->kernels) ||
        (o->state_dir && !s->state_dir) || (o->patch_dir && !s->patch_dir) ||
        (o->chat_template && !s->chat_template) || pipe2(s->stop_pipe, O_CLOEXEC)) {
        server_free(s);
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory or pipes");
    }
    if (o->chat_template) { /* a bad --chat-template fails the start, not every chat request */
        lq_chat_format *f = NULL;
        int rc = lq_chat_format_open(NULL, o->chat_template, &f, err);
        lq_chat_format_free(f);
        if (rc) {
            server_free(s);
            return rc;
        }
    }
    s->is_dir = S_ISDIR(st.st_mode);
    if (s->is_dir) {
        /* a vindex: mapped read-only, cheap to open, so never lazy */
        lq_vindex_open_opts vo = {.n_threads = s->o.model.n_threads, .verify_checksums = 0};
        int rc = lq_vindex_open(s->model_path, &vo, &s->vx, err);
        if (rc) {
            server_free(s);
            return rc;
        }
        const lq_vindex_info *vi = lq_vindex_get_info(s->vx);
        snprintf(s->model_id, sizeof s->model_id, "%s", vi->model_id && *vi->model_id ? vi->model_id : "vindex");
        srv_log(s, "opened vindex %s (%s, %d layers, %llu features)", s->model_path, vi->model ? vi->model : "",
                vi->num_layers, (unsigned long long)vi->total_features);
        /* what the model knows: the overlay every edit and query goes through */
        rc = srv_knowledge_init(s, err);
        s->knowledge_ready = 1;
        if (rc) {
            lq_err_prefix(err, "state");
            server_free(s);
            return rc;
        }
        /* the engine loads GGUF files; a vindex's weights serve inference once it reads them */
        lq_err merr = {0};
        if (!s->o.lazy_weights && load_model(s, &merr)) {
            s->load_failed = 1;
            s->load_err = merr;
            srv_log(s, "inference routes unavailable: %s", merr.msg);
        }
    } else {
        srv_knowledge_init(s, err); /* locks only: a GGUF has nothing to edit */
        s->knowledge_ready = 1;
    }
    if (!s->is_dir && !s->o.lazy_weights) {
        int rc = load_model(s, err);
        if (rc) {
            lq_err_prefix(err, "failed to load weights (pass --lazy-weights to defer until first request)");
            server_free(s);
            return rc;
        }
    }
    s->models = malloc(sizeof *s->models);
    if (!s->models) {
        server_free(s);
        return lq_err_set(err, LQ_ENOMEM, "server: out of memory");
    }
    s->models[0] = s;
    s->n_models = 1;
    s->front = s;
    *out = s;
    return 0;
}

static int srv_listen(lq_server *s, lq_err *err)
{
    const lq_server_opts *o = &s->o;

    struct sockaddr_in sa4;
    struct sockaddr_in6 sa6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_ALLOW_UPGRADE;
    memset(&sa4, 0, sizeof sa4);
    memset(&sa6, 0, sizeof sa6);
    if (inet_pton(AF_INET, s->host, &sa4.sin_addr) == 1) {
        sa4.sin_family = AF_INET;
        sa4.sin_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&sa4;
    } else if (inet_pton(AF_INET6, s->host, &sa6.sin6_addr) == 1) {
        sa6.sin6_family = AF_INET6;
        sa6.sin6_port = htons((uint16_t)o->port);
        sa = (struct sockaddr *)&sa6;
        flags |= MHD_USE_IPv6;
    } else {
        return lq_err_set(err, LQ_EINVAL, "server: host '%s' is not an IPv4 or IPv6 address", o->host);
    }
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.request_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)512,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape_keep_nul, NULL,
                            MHD_OPTION_END);
    if (!s->d) {
        int e = errno;
        return lq_err_set(err, LQ_EIO, "server: cannot listen on %s:%d: %s", o->host ? o->host : "127.0.0.1",
                          o->port, e ? strerror(e) : "libmicrohttpd refused to start");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    srv_log(s, "listening on http://%s:%d (%s '%s'%s, max %d concurrent, body limit %zu bytes%s%s)",
            s->host, s->port, s->n_models > 1 ? "models" : "model", s->model_id,
            s->n_models > 1 ? " and more: see /v1/models" : "", s->o.max_concurrent, s->o.max_body,
            s->api_key ? ", api key required" : "", s->o.cors ? ", CORS on" : "");
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* LARQL's discover_vindexes: every subdirectory of dir that holds an index.json, in name
 * order. *names is malloc'd (each name too). */
static int discover_vindexes(const char *dir, char ***names, int *n, lq_err *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return lq_err_set(err, LQ_EIO, "--dir %s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    int cap = 0, rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        struct stat st;
        if ((size_t)snprintf(p, sizeof p, "%s/%s/index.json", dir, e->d_name) >= sizeof p || stat(p, &st) ||
            !S_ISREG(st.st_mode))
            continue;
        if (*n == LQ_SERVER_MAX_MODELS) {
            rc = lq_err_set(err, LQ_ERANGE, "--dir %s: more than %d vindexes", dir, LQ_SERVER_MAX_MODELS);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nn = realloc(*names, (size_t)cap * sizeof *nn);
            if (!nn) {
                rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                break;
            }
            *names = nn;
        }
        if (!((*names)[*n] = strdup(e->d_name)))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else
            (*n)++;
    }
    closedir(d);
    if (!rc && *n == 0)
        rc = lq_err_set(err, LQ_EINVAL, "--dir %s: no subdirectory holds an index.json (a vindex)", dir);
    if (!rc)
        qsort(*names, (size_t)*n, sizeof **names, by_name);
    return rc;
}

static void free_models(lq_server *front)
{
    for (int k = 1; k < front->n_models; k++)
        server_free(front->models[k]);
    front->n_models = 1;
}

/* --dir: one server per vindex, the first one listens; each keeps its own knowledge state
 * (and its own journal under state_dir/NAME when --state-dir is given). */
static int open_models(const lq_server_opts *o, lq_server **out, lq_err *err)
{
    char **names = NULL;
    int n = 0, rc = discover_vindexes(o->models_dir, &names, &n, err);
    lq_server **ms = rc ? NULL : calloc((size_t)n, sizeof *ms);
    if (!rc && !ms)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    int opened = 0;
    for (int k = 0; !rc && k < n; k++) {
        char path[4096], state[4096];
        lq_server_opts so = *o;
        snprintf(path, sizeof path, "%s/%s", o->models_dir, names[k]);
        so.model_path = path;
        so.models_dir = NULL;
        if (o->state_dir) {
            snprintf(state, sizeof state, "%s/%s", o->state_dir, names[k]);
            if (mkdir(state, 0755) && errno != EEXIST) {
                rc = lq_err_set(err, LQ_EIO, "--state-dir %s: cannot create: %s", state, strerror(errno));
                break;
            }
            so.state_dir = state;
        }
        if ((rc = srv_open(&so, &ms[k], err))) {
            lq_err_prefix(err, "%s", names[k]);
            break;
        }
        opened++;
        for (int j = 0; j < k; j++)
            if (!strcmp(ms[j]->model_id, ms[k]->model_id))
                rc = lq_err_set(err, LQ_EINVAL, "--dir: %s and %s are both model '%s' (ids must differ)",
                                ms[j]->model_path, ms[k]->model_path, ms[k]->model_id);
    }
    for (int k = 0; k < n; k++)
        free(names[k]);
    free(names);
    if (rc) {
        for (int k = 0; k < opened; k++)
            server_free(ms[k]);
        free(ms);
        return rc;
    }
    lq_server *front = ms[0];
    free(front->models);
    front->models = ms;
    front->n_models = n;
    for (int k = 0; k < n; k++)
        ms[k]->front = front;
    *out = front;
    return 0;
}

int lq_server_start(const lq_server_opts *o, lq_server **out, lq_err *err)
{
    *out = NULL;
    if (!o)
        return lq_err_set(err, LQ_EINVAL, "server: no options");
    if (o->models_dir && o->model_path && *o->model_path)
        return lq_err_set(err, LQ_EINVAL, "server: give a model path or a models directory (--dir), not both");
    lq_server *s = NULL;
    int rc = o->models_dir ? open_models(o, &s, err) : srv_open(o, &s, err);
    if (rc)
        return rc;
    if ((rc = srv_listen(s, err))) {
        free_models(s);
        server_free(s);
        return rc;
    }
    *out = s;
    return 0;
}


int lq_server_port(const lq_server *s)
{
    return s ? s->port : 0;
}

void lq_server_request_stop(lq_server *s)
{
    if (!s)
        return;
    char c = 1;
    ssize_t w = write(s->stop_pipe[1], &c, 1); /* async-signal-safe */
    (void)w;
}

int lq_server_wait(lq_server *s)
{
    char c;
    for (;;) {
        ssize_t n = read(s->stop_pipe[0], &c, 1);
        if (n == 1 || (n < 0 && errno != EINTR) || n == 0)
            return 0;
    }
}

static void wait_idle(lq_server *s, double seconds)
{
    double end = lq_now() + seconds;
    while (__atomic_load_n(&s->m.active_requests, __ATOMIC_ACQUIRE) > 0 && lq_now() < end) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void lq_server_stop(lq_server *s)
{
    if (!s)
        return;
    for (int k = 0; k < s->n_models; k++)
        __atomic_store_n(&s->models[k]->stopping, 1, __ATOMIC_RELEASE);
    if (s->d) {
        MHD_socket ls = MHD_quiesce_daemon(s->d); /* stop accepting; in-flight go on */
        if (ls != MHD_INVALID_SOCKET)
            close(ls);
        wait_idle(s, s->o.shutdown_grace_s);
        long left = __atomic_load_n(&s->m.active_requests, __ATOMIC_ACQUIRE);
        if (left > 0) {
            srv_log(s, "cancelling %ld in-flight request(s)", left);
            for (int k = 0; k < s->n_models; k++)
                __atomic_store_n(&s->models[k]->cancel_all, 1, __ATOMIC_RELEASE);
            wait_idle(s, 10.0);
        }
        MHD_stop_daemon(s->d);
        s->d = NULL;
    }
    srv_log(s, "stopped after %llu requests", (unsigned long long)s->m.requests_total);
    free_models(s);
    server_free(s);
}
