/* HTTP plumbing on libmicrohttpd: request accumulation under a body limit and an upload
 * deadline, routing through the route table (routes.c) with 404/405 and LARQL's
 * /v1/{model_id}/ paths, bearer auth compared in constant time, CORS, the --max-concurrent
 * gate (503 + Retry-After, never a queue), and the reply's headers. The handlers are the
 * table's; this file knows none of them by name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "larql/mapfault.h"
#include "server/internal.h"

const char *srv_method_label(int m)
{
    return m == M_POST ? "POST" : m == M_DELETE ? "DELETE" : "GET";
}

/* LARQL's multi-model paths: /v1/{model_id}/REST answers as /v1/REST on that model, for the
 * routes that are model_scoped. An exact route wins (so a model named "chat" cannot shadow
 * /v1/chat/completions). On a match *target is the model's server. */
static const route *find_model_route(lq_server *front, const char *url, int method, lq_server **target,
                                     const char **arg, size_t *arg_len, int *allowed)
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
        const route *rt = srv_route_find(rest, method, arg, arg_len, allowed);
        if (!rt || !(rt->flags & RT_MODEL_SCOPED))
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
    int allowed;
    if ((size_t)snprintf(rest, sizeof rest, "/v1%s", slash) >= sizeof rest)
        return 0;
    const route *rt = srv_route_find(rest, M_GET, &arg, &al, &allowed);
    *idl = (size_t)(slash - url - 4);
    return rt && (rt->flags & RT_MODEL_SCOPED);
}


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
        char allow[32] = "";
        for (int m = M_GET; m <= M_DELETE; m <<= 1)
            if (allow_methods & m)
                snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s", *allow ? ", " : "",
                         srv_method_label(m));
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (r->status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (r->close) /* the rest of what the client sent is not read as another request */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (s->o.cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Retry-After");
    }
    enum MHD_Result ret = MHD_queue_response(q->conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    metrics_count(s, q->rt, r->status);
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
    if (!(q->rt->flags & RT_OPENAI) || front->n_models < 2 || !q->body || q->target != front)
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
     * pages into zeros): answers from it would be wrong, so only the routes that answer from
     * memory (the counters and the page) still answer */
    if (!(q->rt->flags & RT_FROM_MEMORY) && lq_mapfault_count()) {
        reply_route_err(r, q->rt, 503,
                        "a mapped model or vindex file was truncated or rewritten on disk while this server had it "
                        "mapped; restart the server to load it again");
        return;
    }
    q->rt->handler(s, q, r);
}

/* ---- requests refused before any route runs ---- */

typedef struct hdr_count {
    int content_length, transfer_encoding;
} hdr_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind, (void)value;
    hdr_count *c = cls;
    if (key && !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
        c->content_length++;
    if (key && !strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        c->transfer_encoding++;
    return MHD_YES;
}

/* The host part of a Host header or an origin's authority: [v6] or name, port dropped. */
static size_t host_part(const char *h, const char **start)
{
    *start = h;
    if (*h == '[') {
        const char *e = strchr(h, ']');
        *start = h + 1;
        return e ? (size_t)(e - h - 1) : strlen(h + 1);
    }
    const char *c = strchr(h, ':');
    return c && !strchr(c + 1, ':') ? (size_t)(c - h) : strlen(h);
}

static int name_in_list(const char *list, const char *name, size_t n)
{
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        while (l && *p == ' ')
            p++, l--;
        if ((l == 1 && *p == '*') || (l == n && !strncasecmp(p, name, n)))
            return 1;
        p = e ? e + 1 : p + l;
    }
    return 0;
}

/* DNS rebinding: a page of evil.example that resolves its name to 127.0.0.1 reaches the
 * server with Host: evil.example. Only the names the server is known by are answered. */
static int host_allowed(const lq_server *s, const char *host)
{
    if (!host)
        return 1; /* HTTP/1.0 sends none */
    const char *h;
    size_t n = host_part(host, &h);
    if (s->o.allowed_hosts)
        return name_in_list(s->o.allowed_hosts, h, n);
    if (!strcmp(s->host, "0.0.0.0") || !strcmp(s->host, "::"))
        return 1;
    return name_in_list("localhost,127.0.0.1,::1", h, n) || (strlen(s->host) == n && !strncasecmp(s->host, h, n));
}

/* A browser names the page that sent a request in Origin; a state-changing request from a
 * page of another origin (a form posting text/plain to localhost, a WebSocket opened by any
 * site) is refused unless the server has an API key (which such a page does not hold) or
 * --cors (the operator's consent). Same origin: the Origin's authority equals the Host. */
static int origin_allowed(const lq_server *s, struct MHD_Connection *c)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin || s->api_key || s->o.cors)
        return 1;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *auth = strstr(origin, "://");
    if (!host || !auth)
        return 0; /* "null" (a sandboxed frame, a file) or no Host to compare with */
    auth += 3;
    size_t al = strcspn(auth, "/");
    return al == strlen(host) && !strncasecmp(auth, host, al);
}

/* 0: go on; else r holds the refusal (and the connection is to be closed for 400s). */
static int screen_request(lq_server *s, req *q, reply *r)
{
    hdr_count hc = {0, 0};
    MHD_get_connection_values(q->conn, MHD_HEADER_KIND, count_header, &hc);
    if (hc.content_length > 1 || (hc.content_length && hc.transfer_encoding) || hc.transfer_encoding > 1) {
        /* request smuggling: a proxy and this server could read different bodies */
        reply_route_err(r, q->rt, 400, "conflicting message length: %d Content-Length and %d Transfer-Encoding headers",
                        hc.content_length, hc.transfer_encoding);
        r->close = 1;
        return -1;
    }
    if (!host_allowed(s, MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))) {
        reply_route_err(r, q->rt, 421, "this server does not answer to that Host (--allowed-hosts names the others)");
        return -1;
    }
    if (q->rt && (q->rt->flags & RT_WRITE) && !origin_allowed(s, q->conn)) {
        reply_route_err(r, q->rt, 403, "cross-origin request refused: %s changes what the model knows; a page of another "
                                       "origin may do that only with --api-key or --cors",
                        q->rt->path);
        return -1;
    }
    if (s->rl && !(q->rt && (q->rt->flags & RT_UNMETERED))) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const char *fwd = s->o.trust_forwarded_for
                              ? MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Forwarded-For")
                              : NULL;
        char key[48];
        srv_ratelimit_key(ci ? ci->client_addr : NULL, fwd, key, sizeof key);
        double wait = srv_ratelimit_take(s->rl, key, lq_now());
        if (wait > 0) {
            __atomic_add_fetch(&s->m.rejected_rate, 1, __ATOMIC_RELAXED);
            reply_route_err(r, q->rt, 429, "rate limit exceeded: %s requests from one address (--rate-limit); "
                                           "retry after the Retry-After seconds", s->o.rate_limit);
            r->retry_after = (int)ceil(wait);
            return -1;
        }
    }
    return 0;
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

size_t srv_http_unescape(void *cls, struct MHD_Connection *c, char *s)
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

enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_size, void **con_cls)
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
        srv_deadline_headers_done(s->deadline, conn); /* the first call: the headers are in */
        q->srv = s;
        q->conn = conn;
        q->t0 = lq_now();
        __atomic_add_fetch(&s->m.requests_total, 1, __ATOMIC_RELAXED);
        q->method = !strcmp(method, "GET") || !strcmp(method, "HEAD") ? M_GET
                    : !strcmp(method, "POST") ? M_POST : !strcmp(method, "DELETE") ? M_DELETE : 0;
        q->is_options = !strcmp(method, "OPTIONS");
        const char *arg;
        size_t arg_len;
        int allowed = 0;
        q->rt = srv_route_find(url, q->method, &arg, &arg_len, &allowed);
        q->target = s;
        if (!q->rt)
            q->rt = find_model_route(s, url, q->method, &q->target, &arg, &arg_len, &allowed);
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
                metrics_count(s, q->rt, 204);
                q->responded = 1;
                return ret;
            }
        }
        if (screen_request(s, q, &r)) {
            if (!q->rt)
                q->rt = &srv_unknown_route;
            return send_reply(q, &r, 0);
        }
        if (!q->rt) {
            q->rt = &srv_unknown_route;
            size_t idl = 0;
            /* with a key, an unknown model id is as much a secret as a known one */
            if (s->api_key && unknown_model(url, &idl) &&
                !key_ok(s->api_key, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))) {
                reply_larql_err(&r, 401, "missing or invalid API key (Authorization: Bearer KEY)");
                return send_reply(q, &r, 0);
            }
            if (unknown_model(url, &idl))
                reply_larql_err(&r, 404, "model '%.*s%s' not found (GET /v1/models lists the models served)",
                                (int)(idl > 128 ? 128 : idl), url + 4, idl > 128 ? "..." : "");
            else
                reply_larql_err(&r, 404, "no route for %s %s", method, url);
            return send_reply(q, &r, 0);
        }
        if (!(q->rt->method & q->method)) {
            reply_route_err(&r, q->rt, 405, "method %s not allowed on %s (use %s)", method, q->rt->path,
                            srv_method_label(q->rt->method));
            return send_reply(q, &r, allowed);
        }
        /* RT_PUBLIC: health and the page (it holds no data; the user types the key into it) */
        if (s->api_key && !(q->rt->flags & RT_PUBLIC) &&
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
            metrics_count(s, q->rt, 408);
            return MHD_NO;
        }
        if (q->too_large || q->len + n > s->o.max_body) {
            q->too_large = 1; /* discarded; the 413 goes out once the body is in */
            q->dropped += n;
            if (q->len + q->dropped > drain_bound(s)) {
                /* MHD takes no reply in the middle of a body: closing is all there is */
                metrics_count(s, q->rt, 413);
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
    if (q->rt->flags & RT_GATED) {
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

void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    lq_server *s = cls;
    req *q = *con_cls;
    if (!q)
        return;
    if (q->holds_slot)
        __atomic_sub_fetch(&s->m.active_requests, 1, __ATOMIC_RELAXED);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

