/* LARQL's own routes: health, models, infer (next-token top-k), token encode/decode, embed
 * (static embeddings of token ids), logits (final norm + lm_head of a residual), and the
 * browse routes (describe/walk/select/relations), which need a vindex. Response shapes and
 * error envelopes follow larql-server (reference/larql-queries-server.md §5, §7). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/le.h"
#include "core/json_obj.h"
#include "larql/gguf.h"
#include "larql/sampler.h"
#include "larql/tokenizer.h"
#include "server/internal.h"
#include "core/hash.h"
#include "core/round.h"

int need_model(lq_server *s, const route *rt, reply *r, lq_model **m, int inference)
{
    if (inference && s->o.no_infer) {
        reply_route_err(r, rt, 503, s->o.ffn_only ? "inference disabled (--no-infer / --embed-only / --ffn-only)"
                                                  : "inference disabled (--no-infer)");
        return -1;
    }
    lq_err err = {0};
    if (srv_model(s, m, &err)) {
        reply_route_err(r, rt, 503, "model not available: %s", err.msg);
        return -1;
    }
    return 0;
}

const lq_tokenizer *need_tokenizer(lq_server *s, const route *rt, reply *r)
{
    lq_model *m;
    lq_err err = {0};
    if (!srv_model(s, &m, &err))
        return lq_model_tokenizer(m);
    if (s->vx)
        return lq_vindex_tokenizer(s->vx);
    reply_route_err(r, rt, 503, "model not available: %s", err.msg);
    return NULL;
}

char *token_text(const lq_tokenizer *t, int32_t id, size_t *len)
{
    char *text = NULL;
    if (lq_tokenizer_decode(t, &id, 1, 0, &text, len, NULL)) {
        *len = 0;
        return strdup("");
    }
    return text;
}

void route_health(lq_server *s, req *q, reply *r)
{
    (void)q;
    reply_json(r, 200, json_pack("{s:s,s:I,s:I}", "status", "ok", "uptime_seconds",
                                 (json_int_t)(lq_now() - s->t_boot), "requests_served",
                                 (json_int_t)__atomic_load_n(&s->m.requests_total, __ATOMIC_RELAXED)));
}

void route_models(lq_server *s, req *q, reply *r)
{
    (void)q;
    lq_server *front = s->front ? s->front : s;
    json_t *data = json_array();
    for (int k = 0; k < front->n_models; k++) {
        lq_server *m = front->models[k];
        json_int_t features = m->vx ? (json_int_t)lq_vindex_get_info(m->vx)->total_features : 0;
        char path[300];
        /* LARQL: "/v1" when one model is served, "/v1/{id}" for each of several */
        snprintf(path, sizeof path, front->n_models > 1 ? "/v1/%s" : "/v1", m->model_id);
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s,s:I,s:b}", "id", m->model_id, "object", "model",
                                              "created", (json_int_t)m->created_unix, "owned_by", "larql", "path",
                                              path, "features", features, "loaded",
                                              m->vx != NULL || __atomic_load_n(&m->model, __ATOMIC_ACQUIRE) != NULL));
    }
    reply_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* Query parameter as validated UTF-8; NULL when absent. */
static const char *qparam(req *q, const char *k)
{
    return MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, k);
}

/* Strict numeric query parameters: 0 absent, 1 parsed, -1 with a 400 in r. */
static int qint(req *q, const char *k, long lo, long hi, long *out, reply *r)
{
    const char *v = qparam(q, k);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        reply_larql_err(r, 400, "query parameter '%s' must be an integer in %ld..%ld, got '%.32s'", k, lo, hi, v);
        return -1;
    }
    *out = x;
    return 1;
}

static int qnum(req *q, const char *k, double *out, reply *r)
{
    const char *v = qparam(q, k);
    if (!v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !isfinite(x)) {
        reply_larql_err(r, 400, "query parameter '%s' must be a number, got '%.32s'", k, v);
        return -1;
    }
    *out = x;
    return 1;
}

static int qbool(req *q, const char *k, int *out, reply *r)
{
    const char *v = qparam(q, k);
    if (!v)
        return 0;
    if (!strcmp(v, "true") || !strcmp(v, "1"))
        *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0"))
        *out = 0;
    else {
        reply_larql_err(r, 400, "query parameter '%s' must be true or false, got '%.32s'", k, v);
        return -1;
    }
    return 1;
}

static int qtext(req *q, const char *k, const char **out, int required, reply *r)
{
    const char *v = qparam(q, k);
    if (!v) {
        if (required) {
            reply_larql_err(r, 400, "missing query parameter '%s'", k);
            return -1;
        }
        return 0;
    }
    if (!lq_utf8_valid(v, strlen(v))) {
        reply_larql_err(r, 400, "query parameter '%s' is not valid UTF-8", k);
        return -1;
    }
    *out = v;
    return 1;
}

/* A library JSON body (or its error) as the reply. */
static void vindex_reply(reply *r, int rc, char *json, const lq_err *err)
{
    if (rc) {
        free(json);
        int st = rc == LQ_EUNSUPPORTED ? 503 : status_from_lq(rc);
        reply_larql_err(r, st, "%s", err->msg);
        return;
    }
    r->status = 200;
    r->body = json;
    r->len = strlen(json);
    r->ctype = "application/json";
}

/* describe caching (LARQL's routes/describe.rs): an ETag and Cache-Control on every 200, and
 * 304 when If-None-Match names the current ETag. The tag hashes the body without its
 * latency_ms, so it is stable while the answer is (LARQL's changes on every call unless its
 * server cache is on) and changes as soon as an edit changes what describe sees. */

static void describe_cache_headers(lq_server *s, req *q, reply *r)
{
    if (r->status != 200 || !r->body)
        return;
    const char *lat = strstr(r->body, ",\"latency_ms\":");
    size_t n = lat ? (size_t)(lat - r->body) : r->len;
    snprintf(r->etag_buf, sizeof r->etag_buf, "\"%016llx\"", (unsigned long long)lq_fnv1a64(r->body, n));
    r->etag = r->etag_buf;
    if (s->o.cache_ttl_s > 0)
        snprintf(r->cache_buf, sizeof r->cache_buf, "public, max-age=%d", s->o.cache_ttl_s);
    else
        snprintf(r->cache_buf, sizeof r->cache_buf, "no-cache");
    r->cache_control = r->cache_buf;
    const char *inm = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    char *empty;
    if (srv_etag_matches(inm, r->etag) && (empty = calloc(1, 1))) {
        free(r->body);
        r->body = empty; /* 304: no body (an empty one, so the reply is not taken for missing) */
        r->len = 0;
        r->ctype = NULL;
        r->status = 304;
    }
}

/* The request's view of what the model knows (its X-Session-Id's, or the global one). */
static int kget(lq_server *s, req *q, kview *kv, reply *r)
{
    lq_err e = {0};
    int rc = srv_kview_get(s, MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Session-Id"), kv, &e);
    if (rc)
        reply_larql_err(r, status_from_lq(rc), "%s", e.msg);
    return rc;
}

/* The browse routes need a vindex: a GGUF-backed server answers their 400s first (the
 * parameters are checked before this), then this 503. */
static int need_vindex(lq_server *s, req *q, reply *r)
{
    if (s->vx)
        return 0;
    reply_larql_err(r, 503,
                    "%s needs a vindex (gate vectors and down metadata); this server was started on a "
                    "GGUF file: build one with `larql convert gguf-to-vindex` and serve the directory",
                    q->rt->path);
    return -1;
}

void route_describe(lq_server *s, req *q, reply *r)
{
    lq_err err = {0};
    char *json = NULL;
    kview kv;
    lq_describe_params p;
    lq_describe_params_init(&p);
    long limit = p.limit;
    if (qtext(q, "entity", &p.entity, 1, r) < 0 || qtext(q, "band", &p.band, 0, r) < 0 ||
        qint(q, "limit", 0, 10000, &limit, r) < 0 || qnum(q, "min_score", &p.min_score, r) < 0 ||
        qbool(q, "verbose", &p.verbose, r) < 0)
        return;
    p.limit = (int)limit;
    if (need_vindex(s, q, r) || kget(s, q, &kv, r))
        return;
    /* --cache-ttl: the same question about the same state answers from the cache */
    char key[1200];
    snprintf(key, sizeof key, "%.1000s\n%s\n%d\n%.17g\n%d", p.entity, p.band ? p.band : "", p.limit, p.min_score,
             p.verbose);
    size_t n = 0;
    int rc = 0;
    if (!srv_dcache_get(s, kv.sid, key, &json, &n)) {
        rc = lq_vindex_describe_json(kv.v, &p, &json, &err);
        if (!rc && strlen(p.entity) <= 1000)
            srv_dcache_put(s, kv.sid, key, json, strlen(json));
    }
    srv_kview_put(&kv);
    vindex_reply(r, rc, json, &err);
    describe_cache_headers(s, q, r);
}

void route_walk(lq_server *s, req *q, reply *r)
{
    lq_err err = {0};
    char *json = NULL;
    kview kv;
    lq_walk_params p;
    lq_walk_params_init(&p);
    long top = p.top;
    int positions = 0;
    if (qtext(q, "prompt", &p.prompt, 1, r) < 0 || qint(q, "top", 0, 10000, &top, r) < 0 ||
        qtext(q, "layers", &p.layers, 0, r) < 0 || qbool(q, "positions", &positions, r) < 0)
        return;
    p.top = (int)top;
    if (!*p.prompt) {
        reply_larql_err(r, 400, "empty prompt");
        return;
    }
    if (need_vindex(s, q, r) || kget(s, q, &kv, r))
        return;
    int rc = positions ? lq_vindex_walk_positions_json(kv.v, &p, &json, &err) : lq_vindex_walk_json(kv.v, &p, &json, &err);
    srv_kview_put(&kv);
    vindex_reply(r, rc, json, &err);
}

void route_select(lq_server *s, req *q, reply *r)
{
    lq_err err = {0};
    char *json = NULL;
    kview kv;
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    lq_select_params p;
    lq_select_params_init(&p);
    long layer = -1, limit = p.limit;
    double minc = p.min_confidence;
    if (jget_str(q->rt, j, "entity", &p.entity, NULL, r) < 0 || jget_str(q->rt, j, "relation", &p.relation, NULL, r) < 0 ||
        jget_int(q->rt, j, "layer", 0, LQ_VINDEX_MAX_LAYERS, &layer, r) < 0 ||
        jget_int(q->rt, j, "limit", 0, 1000000, &limit, r) < 0 ||
        jget_num(q->rt, j, "min_confidence", -1e30, 1e30, &minc, r) < 0 ||
        jget_str(q->rt, j, "order_by", &p.order_by, NULL, r) < 0 || jget_str(q->rt, j, "order", &p.order, NULL, r) < 0 ||
        need_vindex(s, q, r) || kget(s, q, &kv, r)) {
        json_decref(j);
        return;
    }
    p.layer = (int)layer;
    p.limit = (int)limit;
    p.min_confidence = minc;
    int rc = lq_vindex_select_json(kv.v, &p, &json, &err);
    json_decref(j); /* p's strings pointed into j */
    srv_kview_put(&kv);
    vindex_reply(r, rc, json, &err);
}

void route_relations(lq_server *s, req *q, reply *r)
{
    lq_err err = {0};
    char *json = NULL;
    kview kv;
    if (need_vindex(s, q, r) || kget(s, q, &kv, r))
        return;
    int rc = lq_vindex_relations_json(kv.v, &json, &err);
    srv_kview_put(&kv);
    vindex_reply(r, rc, json, &err);
}

int srv_infer(lq_server *s, const char *session_id, const lq_infer_params *p, char **body, lq_err *e)
{
    lq_model *m;
    lq_session *sess = NULL;
    lq_err err = {0};
    memset(e, 0, sizeof *e);
    *body = NULL;
    /* no model to run: 503 (LQ_EBUSY), whatever e's code says why */
    if (s->o.no_infer) {
        lq_err_set(e, LQ_EUNSUPPORTED, "inference disabled (--no-infer)");
        return LQ_EBUSY;
    }
    if (srv_model(s, &m, &err)) {
        lq_err_set(e, err.code ? err.code : LQ_EIO, "model not available: %s", err.msg);
        return LQ_EBUSY;
    }
    int rc = srv_session_get(s, &sess, &err);
    if (rc) {
        *e = err;
        return rc;
    }
    lq_infer_params ip = *p;
    ip.session = sess;
    /* X-Session-Id names the knowledge state the request sees (its session's, or the global
     * overlay's); walk mode applies that state's KNN store */
    kview kv;
    rc = srv_kview_get(s, session_id, &kv, &err);
    if (rc) {
        srv_session_put(s, sess);
        *e = err;
        return rc;
    }
    ip.knn = kv.knn;
    ip.edits = kv.edits;
    rc = lq_infer_json(m, &ip, body, &err);
    srv_kview_put(&kv);
    srv_session_put(s, sess);
    if (rc)
        *e = err;
    return rc;
}

void route_infer(lq_server *s, req *q, reply *r)
{
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    const char *prompt = NULL, *mode = "walk";
    size_t plen = 0;
    long top = 5;
    if (jget_str(q->rt, j, "prompt", &prompt, &plen, r) < 0 || jget_int(q->rt, j, "top", 1, 1000, &top, r) < 0 ||
        jget_str(q->rt, j, "mode", &mode, NULL, r) < 0)
        goto out;
    if (!prompt) {
        reply_larql_err(r, 422, "missing field 'prompt'");
        goto out;
    }
    if (plen == 0 || strlen(prompt) != plen) {
        reply_larql_err(r, 400, plen ? "'prompt' contains a NUL character" : "empty prompt");
        goto out;
    }
    if (strcmp(mode, "walk") && strcmp(mode, "dense") && strcmp(mode, "compare")) {
        reply_larql_err(r, 400, "mode '%s' is not one of walk, dense, compare", mode);
        goto out;
    }
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = prompt;
    ip.top = (int)top;
    ip.mode = mode;
    char *body = NULL;
    lq_err err;
    int rc = srv_infer(s, MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Session-Id"), &ip, &body, &err);
    if (rc) {
        reply_larql_err(r, status_from_lq(rc), "%s", err.msg);
        if (err.code == LQ_EBUSY)
            r->retry_after = 1;
        goto out;
    }
    r->status = 200;
    r->body = body;
    r->len = strlen(body);
out:
    json_decref(j);
}

/* POST /v1/explain-infer: LARQL's body; the trace reads the request's knowledge view */
void route_explain(lq_server *s, req *q, reply *r)
{
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    lq_explain_params ep;
    lq_explain_params_init(&ep);
    long top = ep.top, per = ep.per_layer;
    int ro = 0, wa = 0;
    size_t plen = 0;
    if (jget_str(q->rt, j, "prompt", &ep.prompt, &plen, r) < 0 || jget_int(q->rt, j, "top", 0, 1000, &top, r) < 0 ||
        jget_int(q->rt, j, "per_layer", 0, 1000, &per, r) < 0 || jget_str(q->rt, j, "band", &ep.band, NULL, r) < 0 ||
        jget_bool(q->rt, j, "relations_only", &ro, r) < 0 || jget_bool(q->rt, j, "with_attention", &wa, r) < 0)
        goto out;
    if (!ep.prompt || !plen || strlen(ep.prompt) != plen) {
        reply_larql_err(r, ep.prompt ? 400 : 422, ep.prompt ? "empty prompt" : "missing field 'prompt'");
        goto out;
    }
    ep.top = (int)top;
    ep.per_layer = (int)per;
    ep.relations_only = ro;
    lq_model *m;
    lq_session *sess = NULL;
    lq_err err = {0};
    if (need_model(s, q->rt, r, &m, 1)) /* a forward pass: --no-infer turns it off */
        goto out;
    int rc = srv_session_get(s, &sess, &err);
    if (rc) {
        reply_larql_err(r, status_from_lq(rc), "%s", err.msg);
        if (rc == LQ_EBUSY)
            r->retry_after = 1;
        goto out;
    }
    kview kv;
    if (kget(s, q, &kv, r)) {
        srv_session_put(s, sess);
        goto out;
    }
    ep.session = sess;
    ep.view = kv.v;
    ep.knn = kv.knn;
    ep.edits = kv.edits;
    char *body = NULL;
    rc = lq_explain_infer_json(m, &ep, &body, &err);
    srv_kview_put(&kv);
    srv_session_put(s, sess);
    vindex_reply(r, rc, body, &err);
out:
    json_decref(j);
}

void route_tok_encode(lq_server *s, req *q, reply *r)
{
    const char *text = qparam(q, "text");
    if (!text) {
        reply_larql_err(r, 400, "missing query parameter 'text'");
        return;
    }
    size_t tl = strlen(text);
    if (!lq_utf8_valid(text, tl)) {
        reply_larql_err(r, 400, "'text' is not valid UTF-8");
        return;
    }
    const lq_tokenizer *tk = need_tokenizer(s, q->rt, r);
    if (!tk)
        return;
    int32_t *ids = NULL;
    size_t n = 0;
    lq_err err = {0};
    int rc = lq_tokenizer_encode(tk, text, tl, 0, &ids, &n, &err);
    if (rc) {
        reply_larql_err(r, status_from_lq(rc), "%s", err.msg);
        return;
    }
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    free(ids);
    reply_json(r, 200, json_pack("{s:o,s:o}", "token_ids", a, "text", lq_jstr(text, tl)));
}

void route_tok_decode(lq_server *s, req *q, reply *r)
{
    const char *p = qparam(q, "ids");
    if (!p) {
        reply_larql_err(r, 400, "missing query parameter 'ids' (comma-separated token ids)");
        return;
    }
    const lq_tokenizer *tok = need_tokenizer(s, q->rt, r);
    if (!tok)
        return;
    int32_t nv = lq_tokenizer_n_vocab(tok);
    size_t cap = strlen(p) / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        reply_larql_err(r, 500, "out of memory");
        return;
    }
    const char *c = p;
    while (*c) {
        char *end;
        if (*c < '0' || *c > '9') {
            reply_larql_err(r, 400, "'ids' must be comma-separated non-negative integers, got '%.64s'", p);
            goto out;
        }
        errno = 0;
        long v = strtol(c, &end, 10);
        if (errno || v >= nv) {
            reply_larql_err(r, 400, "token id %.20s is out of range (vocabulary of %d)", c, (int)nv);
            goto out;
        }
        if (n < cap)
            ids[n++] = (int32_t)v;
        c = end;
        if (*c == ',')
            c++;
        else if (*c) {
            reply_larql_err(r, 400, "'ids' must be comma-separated non-negative integers, got '%.64s'", p);
            goto out;
        }
    }
    char *text = NULL;
    size_t len = 0;
    lq_err err = {0};
    int rc = lq_tokenizer_decode(tok, ids, n, 0, &text, &len, &err);
    if (rc) {
        reply_larql_err(r, status_from_lq(rc), "%s", err.msg);
        goto out;
    }
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    reply_json(r, 200, json_pack("{s:o,s:o}", "text", lq_jstr(text, len), "token_ids", a));
    free(text);
out:
    free(ids);
}

/* ---- binary bodies: little-endian, as LARQL's Rust clients write them ---- */

#define EMBED_MAX_IDS 4096 /* token ids per POST /v1/embed, JSON or binary */
#define OCTET_STREAM "application/octet-stream"
/* LARQL's binary wire type (its embed/logits/walk-ffn clients send and expect it); the same
 * bytes as our application/octet-stream bodies */
#define LARQL_FFN "application/x-larql-ffn"

/* The request's Content-Type names media type mt (case-insensitive, parameters after ';'
 * ignored): "application/octet-stream; charset=x" is binary, "application/octet-streamy" not. */
static int content_type_is(req *q, const char *mt)
{
    const char *v = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!v)
        return 0;
    v += strspn(v, " \t");
    size_t n = strlen(mt);
    if (strncasecmp(v, mt, n))
        return 0;
    v += n;
    v += strspn(v, " \t");
    return *v == 0 || *v == ';';
}

/* The request's body is binary: LARQL's wire type or plain octets. The binary answer echoes
 * the type the client sent. */
static const char *binary_body_type(req *q)
{
    return content_type_is(q, LARQL_FFN) ? LARQL_FFN : content_type_is(q, OCTET_STREAM) ? OCTET_STREAM : NULL;
}

/* The request's Accept header mentions mt anywhere (case-insensitive), as LARQL tests it. */
static int accept_mentions(req *q, const char *mt)
{
    const char *v = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    size_t n = strlen(mt);
    for (; v && *v; v++)
        if (!strncasecmp(v, mt, n))
            return 1;
    return 0;
}

/* ---- embed ---- */

/* Where token embeddings come from: the loaded model (lq_model_embed: a GGUF's token_embd or a
 * vindex's embeddings.bin, whichever it was opened from), or, on a vindex whose weights did
 * not load (a browse vindex), the vindex itself (lq_vindex_embed_row). Every embed route reads
 * through this, so the JSON, binary and single-row forms give the same numbers. */
typedef struct embed_src {
    const lq_model *m;       /* NULL: read the vindex */
    const lq_vindex *vx;
    int32_t nv;              /* vocabulary size */
    size_t h;                /* hidden size */
} embed_src;

static int embed_source(lq_server *s, const route *rt, reply *r, embed_src *e)
{
    lq_model *m;
    lq_err err = {0};
    memset(e, 0, sizeof *e);
    if (srv_model(s, &m, &err) == 0) {
        const lq_model_info *mi = lq_model_get_info(m);
        e->m = m;
        e->nv = mi->n_vocab;
        e->h = (size_t)mi->n_embd;
    } else if (s->vx) {
        const lq_vindex_info *vi = lq_vindex_get_info(s->vx);
        e->vx = s->vx;
        e->nv = vi->vocab_size;
        e->h = vi->hidden_size > 0 ? (size_t)vi->hidden_size : 0;
    } else {
        need_model(s, rt, r, &m, 0); /* fills the 503 */
        return -1;
    }
    /* the binary reply carries hidden as a u32 */
    if (e->nv <= 0 || e->h == 0 || e->h > UINT32_MAX) {
        reply_larql_err(r, 503, "embeddings have an unusable shape (vocabulary %d, hidden %zu)", (int)e->nv, e->h);
        return -1;
    }
    return 0;
}

static int embed_row(const embed_src *e, int32_t id, float *row, lq_err *err)
{
    return e->m ? lq_model_embed(e->m, &id, 1, row, err) : lq_vindex_embed_row(e->vx, id, row, err);
}

/* Reads a JSON array of token ids (each 0..n_vocab-1, at most max). -1 with r filled. */
static int read_ids(const route *rt, json_t *a, const char *field, int32_t nv, size_t max, int32_t **out,
                    size_t *n, reply *r)
{
    if (!json_is_array(a)) {
        reply_route_err(r, rt, srv_shape_status(rt), "'%s' must be an array of token ids", field);
        return -1;
    }
    size_t k = json_array_size(a);
    if (k == 0) {
        reply_route_err(r, rt, 400, "'%s' is empty", field);
        return -1;
    }
    if (k > max) {
        reply_route_err(r, rt, 400, "'%s' has %zu ids; at most %zu", field, k, max);
        return -1;
    }
    int32_t *ids = malloc(k * sizeof *ids);
    if (!ids) {
        reply_route_err(r, rt, 500, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < k; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) {
            reply_route_err(r, rt, 400, "'%s'[%zu] must be a token id in 0..%d", field, i, (int)nv - 1);
            free(ids);
            return -1;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    *out = ids;
    *n = k;
    return 0;
}

/* POST /v1/embed, Content-Type application/octet-stream: body [u32 n][u32 id] * n, reply
 * [u32 seq][u32 hidden][f32] * (seq * hidden), all little-endian, row-major by position.
 * Every length is checked against n before anything is read or allocated. The body itself
 * is bounded by --max-body (413): a valid body is at most 4 + 4 * 4096 bytes. */
static void embed_binary(lq_server *s, req *q, reply *r)
{
    const unsigned char *b = (const unsigned char *)q->body;
    if (q->len < 4) {
        reply_larql_err(r, 400, "binary embed body is %zu bytes: expected [u32 n][u32 ids...] little-endian", q->len);
        return;
    }
    uint32_t n = lq_le32(b);
    if (n == 0) {
        reply_larql_err(r, 400, "binary embed body has n = 0: at least one token id is needed");
        return;
    }
    if (n > EMBED_MAX_IDS) {
        reply_larql_err(r, 400, "binary embed body has n = %u token ids; at most %d", n, EMBED_MAX_IDS);
        return;
    }
    size_t want = 4 + 4 * (size_t)n;
    if (q->len != want) {
        reply_larql_err(r, 400, "binary embed body is %zu bytes; n = %u token ids needs exactly %zu (4 + 4n)",
                        q->len, n, want);
        return;
    }
    embed_src e;
    if (embed_source(s, q->rt, r, &e))
        return;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = lq_le32(b + 4 + 4 * (size_t)i);
        if (id >= (uint32_t)e.nv) {
            reply_larql_err(r, 400, "token id %u at index %u is out of range (vocabulary of %d)", id, i, (int)e.nv);
            return;
        }
    }
    if (e.h > (SIZE_MAX - 8) / 4 / n) {
        reply_larql_err(r, 500, "embed reply of %u x %zu floats is too large", n, e.h);
        return;
    }
    size_t out_len = 8 + (size_t)n * e.h * 4;
    unsigned char *out = malloc(out_len);
    float *row = malloc(e.h * sizeof *row); /* [hidden] */
    if (!out || !row) {
        reply_larql_err(r, 500, "out of memory");
        goto fail;
    }
    lq_put_le32(out, n);
    lq_put_le32(out + 4, (uint32_t)e.h);
    for (uint32_t i = 0; i < n; i++) {
        lq_err err = {0};
        if (embed_row(&e, (int32_t)lq_le32(b + 4 + 4 * (size_t)i), row, &err)) {
            reply_larql_err(r, 500, "%s", err.msg);
            goto fail;
        }
        unsigned char *dst = out + 8 + (size_t)i * e.h * 4;
        for (size_t k = 0; k < e.h; k++)
            lq_put_le_f32(dst + 4 * k, row[k]);
    }
    free(row);
    r->status = 200;
    r->body = (char *)out;
    r->len = out_len;
    r->ctype = binary_body_type(q);
    return;
fail:
    free(out);
    free(row);
}

void route_embed(lq_server *s, req *q, reply *r)
{
    if (binary_body_type(q)) {
        embed_binary(s, q, r);
        return;
    }
    json_t *j = req_json_body(q, r);
    if (!j)
        return;
    int32_t *ids = NULL;
    size_t n = 0;
    float *row = NULL;
    json_t *res = NULL;
    double t0 = lq_now();
    embed_src e;
    if (embed_source(s, q->rt, r, &e))
        goto out;
    json_t *a = json_object_get(j, "token_ids");
    if (!a) {
        reply_larql_err(r, 422, "missing field 'token_ids'");
        goto out;
    }
    if (read_ids(q->rt, a, "token_ids", e.nv, EMBED_MAX_IDS, &ids, &n, r))
        goto out;
    row = malloc(e.h * sizeof *row); /* [hidden] */
    res = json_array();
    if (!row || !res) {
        reply_larql_err(r, 500, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        lq_err err = {0};
        if (embed_row(&e, ids[i], row, &err)) {
            reply_larql_err(r, 500, "%s", err.msg);
            goto out;
        }
        json_t *v = json_array();
        for (size_t k = 0; k < e.h; k++)
            json_array_append_new(v, json_real(row[k]));
        json_array_append_new(res, v);
    }
    reply_json(r, 200, json_pack("{s:o,s:I,s:I,s:f}", "residual", res, "seq_len", (json_int_t)n, "hidden_size",
                                 (json_int_t)e.h, "latency_ms", lq_round_dp((lq_now() - t0) * 1000.0, 1)));
    res = NULL; /* owned by the reply */
out:
    json_decref(res);
    free(row);
    free(ids);
    json_decref(j);
}

/* GET /v1/embed/{token_id}: one row, raw f32 little-endian by default (application/x-larql-ffn,
 * or application/octet-stream when Accept names only that), or JSON
 * {token_id, embedding, hidden_size} when Accept mentions application/json. A token's
 * embedding never changes while a model is served, hence LARQL's year-long immutable
 * Cache-Control on the answer. */
void route_embed_row(lq_server *s, req *q, reply *r)
{
    const char *a = q->path_arg;
    size_t al = strlen(a);
    if (q->path_arg_long || al == 0 || al > 10 || strspn(a, "0123456789") != al || strtoull(a, NULL, 10) > UINT32_MAX) {
        reply_larql_err(r, 400, "/v1/embed/{token_id}: '%s%s' is not a token id (a non-negative integer)", a,
                        q->path_arg_long ? "..." : "");
        return;
    }
    unsigned long long id = strtoull(a, NULL, 10);
    embed_src e;
    if (embed_source(s, q->rt, r, &e))
        return;
    if (id >= (unsigned long long)e.nv) {
        reply_larql_err(r, 400, "token id %llu is out of range (vocabulary of %d)", id, (int)e.nv);
        return;
    }
    float *row = malloc(e.h * sizeof *row); /* [hidden] */
    if (!row) {
        reply_larql_err(r, 500, "out of memory");
        return;
    }
    lq_err err = {0};
    if (embed_row(&e, (int32_t)id, row, &err)) {
        reply_larql_err(r, 500, "%s", err.msg);
        free(row);
        return;
    }
    if (accept_mentions(q, "application/json")) {
        json_t *v = json_array();
        for (size_t k = 0; k < e.h; k++)
            json_array_append_new(v, json_real(row[k]));
        reply_json(r, 200, json_pack("{s:I,s:o,s:I}", "token_id", (json_int_t)id, "embedding", v, "hidden_size",
                                     (json_int_t)e.h));
    } else {
        unsigned char *out = malloc(e.h * 4);
        if (!out) {
            reply_larql_err(r, 500, "out of memory");
            free(row);
            return;
        }
        for (size_t k = 0; k < e.h; k++)
            lq_put_le_f32(out + 4 * k, row[k]);
        r->status = 200;
        r->body = (char *)out;
        r->len = e.h * 4;
        /* LARQL's type by default; a client that asks for octets only gets octets */
        r->ctype = accept_mentions(q, OCTET_STREAM) && !accept_mentions(q, LARQL_FFN) ? OCTET_STREAM : LARQL_FFN;
    }
    free(row);
    if (r->status == 200) {
        r->cache_control = "public, max-age=31536000, immutable";
        r->vary = "Accept"; /* the same URL answers JSON or binary */
    }
}

/* The residual of a /v1/logits request into x[h]: JSON {residual:[f32 * h]} or, with
 * Content-Type application/x-larql-ffn or application/octet-stream, the raw body f32[h] little-endian (top_k and
 * temperature keep their defaults then). -1 with r filled. */
static int logits_input(req *q, json_t *j, size_t h, float *x, reply *r)
{
    if (!j) {
        if (q->len != h * 4) {
            reply_larql_err(r, 400, "binary residual is %zu bytes; expected %zu (hidden size %zu x 4-byte f32)",
                            q->len, h * 4, h);
            return -1;
        }
        for (size_t i = 0; i < h; i++) {
            x[i] = lq_le_f32((const unsigned char *)q->body + 4 * i);
            if (!isfinite(x[i])) {
                reply_larql_err(r, 400, "binary residual[%zu] is not a finite number", i);
                return -1;
            }
        }
        return 0;
    }
    json_t *a = json_object_get(j, "residual");
    if (!a) {
        reply_larql_err(r, 422, "missing field 'residual'");
        return -1;
    }
    if (!json_is_array(a) || json_array_size(a) != h) {
        reply_larql_err(r, json_is_array(a) ? 400 : 422, "'residual' must be an array of %zu numbers (hidden size)", h);
        return -1;
    }
    for (size_t i = 0; i < h; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_number(v) || !isfinite(json_number_value(v))) {
            reply_larql_err(r, 422, "'residual'[%zu] must be a finite number", i);
            return -1;
        }
        x[i] = (float)json_number_value(v);
    }
    return 0;
}

void route_logits(lq_server *s, req *q, reply *r)
{
    json_t *j = NULL;
    if (!binary_body_type(q) && !(j = req_json_body(q, r)))
        return;
    lq_model *m;
    long top_k = 5;
    double temp = 1.0;
    float *x = NULL, *logits = NULL;
    double t0 = lq_now();
    if (j && (jget_int(q->rt, j, "top_k", 1, 1000, &top_k, r) < 0 ||
              jget_num(q->rt, j, "temperature", 0, 100, &temp, r) < 0))
        goto out;
    /* a residual through the head, no forward pass: served under --no-infer as LARQL's
     * embed routes are, not by an FFN-only server */
    if (need_model(s, q->rt, r, &m, s->o.ffn_only))
        goto out;
    const lq_model_info *mi = lq_model_get_info(m);
    size_t h = (size_t)mi->n_embd, nv = (size_t)mi->n_vocab;
    x = malloc(h * sizeof *x);            /* [n_embd] the residual */
    logits = malloc(nv * sizeof *logits); /* [n_vocab] */
    if (!x || !logits) {
        reply_larql_err(r, 500, "out of memory");
        goto out;
    }
    if (logits_input(q, j, h, x, r))
        goto out;
    lq_err err = {0};
    /* final RMSNorm, then lm_head, exactly as the forward pass ends (the library's head) */
    int rc = lq_model_logits_from_hidden(m, x, 1, logits, &err);
    if (rc) {
        reply_larql_err(r, status_from_lq(rc), "%s", err.msg);
        goto out;
    }
    if (temp > 0)
        for (size_t v = 0; v < nv; v++)
            logits[v] = (float)(logits[v] / temp);
    double lse = lq_logsumexp(logits, (int32_t)nv);
    int32_t ids[1000];
    float vals[1000];
    int k = lq_top_k(logits, (int32_t)nv, (int)top_k, ids, vals);
    json_t *arr = json_array();
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    for (int i = 0; i < k; i++) {
        size_t len;
        char *t = token_text(tok, ids[i], &len);
        /* temperature 0: all mass on the argmax */
        double p = temp > 0 ? exp((double)vals[i] - lse) : (i == 0 ? 1.0 : 0.0);
        json_array_append_new(arr, json_pack("{s:i,s:o,s:f}", "token_id", ids[i], "token", lq_jstr(t, len),
                                             "prob", lq_round_dp(p, 6)));
        free(t);
    }
    reply_json(r, 200, json_pack("{s:o,s:f}", "top_k", arr, "latency_ms", lq_round_dp((lq_now() - t0) * 1000.0, 1)));
out:
    free(x);
    free(logits);
    json_decref(j);
}

/* POST /v1/warmup (LARQL's): {skip_weights?, layers?: [int]} -> the gate rows of those layers
 * (all by default) read into memory, the weights loaded unless skip_weights. */
void route_warmup(lq_server *s, req *q, reply *r)
{
    double t0 = lq_now();
    json_t *j = q->len ? req_json_body(q, r) : lq_json_object();
    if (!j)
        return;
    int skip = 0;
    json_t *ls = json_object_get(j, "layers");
    if (jget_bool(q->rt, j, "skip_weights", &skip, r) < 0 ||
        (ls && !json_is_null(ls) && !json_is_array(ls))) {
        if (!r->body)
            reply_larql_err(r, 422, "'layers' must be an array of layer numbers");
        json_decref(j);
        return;
    }
    size_t n = json_array_size(ls);
    int *layers = malloc((n ? n : 1) * sizeof *layers);
    if (!layers) {
        json_decref(j);
        reply_larql_err(r, 500, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ls, i);
        layers[i] = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) < (1 << 20)
                        ? (int)json_integer_value(x) : -1;
    }
    int prefetched = s->vx ? lq_vindex_prefetch_gates(s->vx, ls && !json_is_null(ls) ? layers : NULL, n) : 0;
    free(layers);
    json_decref(j);
    int loaded = 0;
    if (!skip && !s->o.no_infer) {
        lq_model *m = NULL;
        lq_err e = {0};
        loaded = srv_model(s, &m, &e) == 0;
    }
    reply_json(r, 200, json_pack("{s:s,s:b,s:i,s:b,s:I}", "model", s->model_id, "weights_loaded", loaded,
                                 "layers_prefetched", prefetched, "hnsw_built", 0, "total_ms",
                                 (json_int_t)((lq_now() - t0) * 1000.0)));
}
