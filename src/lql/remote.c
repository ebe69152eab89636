/* USE REMOTE "http://host:port": LQL statements run against a `larql serve` over its HTTP
 * API, as LARQL's remote executor does (crates/larql-lql/src/executor/remote): STATS ->
 * GET /v1/stats, DESCRIBE -> GET /v1/describe, WALK -> GET /v1/walk, INFER -> POST /v1/infer,
 * SELECT ... FROM EDGES -> POST /v1/select, SHOW RELATIONS -> GET /v1/relations, INSERT ->
 * POST /v1/insert, SHOW PATCHES -> GET /v1/patches; every other statement answers that it
 * needs a local vindex. Plain HTTP/1.1 (Connection: close) over a socket; https is refused
 * (reach the server through a TLS-terminating proxy's local side instead). */
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "lql/exec_internal.h"

#define MAX_BODY (64u << 20)

/* http://host[:port][/prefix] -> host, port, prefix (no trailing '/') */
static int parse_url(const char *url, char *host, size_t hc, char *port, size_t pc, char *prefix, size_t xc,
                     lq_err *err)
{
    if (!strncasecmp(url, "https://", 8))
        return lq_err_set(err, LQ_EUNSUPPORTED, "USE REMOTE: https is not supported; use http:// (a TLS proxy's "
                                                "local side)");
    if (strncasecmp(url, "http://", 7))
        return lq_err_set(err, LQ_EINVAL, "USE REMOTE: '%s' is not an http:// URL", url);
    const char *h = url + 7, *slash = strchr(h, '/'), *end = slash ? slash : h + strlen(h);
    const char *colon = memchr(h, ':', (size_t)(end - h));
    size_t hl = (size_t)((colon ? colon : end) - h);
    if (!hl || hl >= hc)
        return lq_err_set(err, LQ_EINVAL, "USE REMOTE: no host in '%s'", url);
    memcpy(host, h, hl);
    host[hl] = 0;
    size_t pl = colon ? (size_t)(end - colon - 1) : 2;
    if (pl >= pc || (colon && (!pl || strspn(colon + 1, "0123456789") < pl)))
        return lq_err_set(err, LQ_EINVAL, "USE REMOTE: bad port in '%s'", url);
    snprintf(port, pc, "%.*s", (int)pl, colon ? colon + 1 : "80");
    snprintf(prefix, xc, "%s", slash ? slash : "");
    size_t xl = strlen(prefix);
    while (xl && prefix[xl - 1] == '/')
        prefix[--xl] = 0;
    return 0;
}

/* Decodes a chunked body in place; returns its length, or -1 when malformed. */
static long dechunk(char *b, size_t n)
{
    size_t r = 0, w = 0;
    for (;;) {
        char *e = NULL;
        if (r >= n)
            return -1;
        unsigned long sz = strtoul(b + r, &e, 16);
        char *nl = memchr(b + r, '\n', n - r);
        if (!nl || e == b + r)
            return -1;
        r = (size_t)(nl - b) + 1;
        if (!sz)
            return (long)w;
        if (sz > n - r)
            return -1;
        memmove(b + w, b + r, sz);
        w += sz;
        r += sz;
        if (r < n && b[r] == '\r')
            r++;
        if (r < n && b[r] == '\n')
            r++;
    }
}

/* One request; *body (malloc'd, NUL-terminated) and *status on success. */
static int http(const char *url, const char *method, const char *path, const char *req_body, int *status,
                char **body, lq_err *err)
{
    char host[256], port[16], prefix[1024];
    *body = NULL;
    int rc = parse_url(url, host, sizeof host, port, sizeof port, prefix, sizeof prefix, err);
    if (rc)
        return rc;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) || !ai)
        return lq_err_set(err, LQ_EIO, "USE REMOTE: cannot resolve %s", host);
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        struct timeval tv = {30, 0}; /* a server that stops answering must not hang LQL */
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
                        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) ||
                        connect(fd, a->ai_addr, a->ai_addrlen))) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return lq_err_set(err, LQ_EIO, "USE REMOTE: cannot connect to %s:%s: %s", host, port, strerror(errno));
    size_t bl = req_body ? strlen(req_body) : 0;
    lq_sb q = {0};
    lq_sb_printf(&q, "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\nAccept: application/json\r\n", method,
                 prefix, path, host, port);
    if (req_body)
        lq_sb_printf(&q, "Content-Type: application/json\r\nContent-Length: %zu\r\n", bl);
    lq_sb_puts(&q, "\r\n");
    if (req_body)
        lq_sb_puts(&q, req_body);
    size_t off = 0;
    while (!q.oom && off < q.n) {
        ssize_t w = send(fd, q.s + off, q.n - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    int sent = !q.oom && off == q.n;
    lq_sb_free(&q);
    lq_sb in = {0};
    char chunk[1 << 14];
    int ok = sent;
    while (ok && !in.oom && in.n <= MAX_BODY) {
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        if (r <= 0) {
            ok = r == 0;
            break;
        }
        lq_sb_put(&in, chunk, (size_t)r);
    }
    char *buf = ok && !in.oom && in.n <= MAX_BODY && in.s ? in.s : NULL;
    size_t n = buf ? in.n : 0;
    if (!buf)
        lq_sb_free(&in);
    close(fd);
    if (!buf)
        return lq_err_set(err, LQ_EIO, "USE REMOTE: no answer from %s:%s", host, port);
    buf[n] = 0;
    char *hend = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) || !hend || sscanf(buf + 8, " %d", status) != 1) {
        free(buf);
        return lq_err_set(err, LQ_EFORMAT, "USE REMOTE: %s:%s did not answer HTTP", host, port);
    }
    *hend = 0;
    int chunked = strcasestr(buf, "\ntransfer-encoding: chunked") != NULL;
    size_t hl = (size_t)(hend - buf) + 4;
    memmove(buf, buf + hl, n - hl + 1);
    n -= hl;
    if (chunked) {
        long dl = dechunk(buf, n);
        if (dl < 0) {
            free(buf);
            return lq_err_set(err, LQ_EFORMAT, "USE REMOTE: a malformed chunked answer");
        }
        buf[dl] = 0;
    }
    *body = buf;
    return 0;
}

/* JSON of a request that answered 2xx; an error answer's {"error"} becomes the message */
static int call(const lq_lql *q, const char *method, const char *path, json_t *req, json_t **out, lq_err *err)
{
    char *rb = req ? json_dumps(req, JSON_COMPACT) : NULL, *body = NULL;
    int st = 0, rc = http(q->remote, method, path, rb, &st, &body, err);
    free(rb);
    if (rc)
        return rc;
    json_t *j = json_loads(body, 0, NULL);
    free(body);
    if (st < 200 || st > 299) {
        const char *m = json_string_value(json_object_get(j, "error"));
        if (!m)
            m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        rc = lq_err_set(err, st == 404 ? LQ_ENOTFOUND : LQ_EINVAL, "remote: %d %s", st, m ? m : "(no message)");
        json_decref(j);
        return rc;
    }
    if (!j)
        return lq_err_set(err, LQ_EFORMAT, "remote: %s %s did not answer JSON", method, path);
    *out = j;
    return 0;
}

static void url_arg(lq_sb *b, const char *k, const char *v)
{
    lq_sb_printf(b, "%c%s=", b->n && strchr(b->s, '?') ? '&' : '?', k);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("-._~", *c))
            lq_sb_printf(b, "%c", *c);
        else
            lq_sb_printf(b, "%%%02X", *c);
    }
}

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static int remote_use(lq_lql *q, const char *url, lq_sb *out, lq_err *err)
{
    char *u = strdup(url), *old = q->remote;
    if (!u)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    q->remote = u;
    json_t *j = NULL;
    int rc = call(q, "GET", "/v1/stats", NULL, &j, err);
    if (rc) {
        q->remote = old;
        free(u);
        return rc;
    }
    lq_lql_close_backend(q); /* statements go to the server from now on */
    free(old);
    q->remote = u;
    lq_sb_printf(out, "Connected: %s (model %s, %lld layers, %lld features)\n", url, jstr(j, "model"),
                 (long long)json_integer_value(json_object_get(j, "layers")),
                 (long long)json_integer_value(json_object_get(j, "features")));
    json_decref(j);
    return 0;
}

static void stats_rows(const json_t *j, lq_sb *out, const char *url)
{
    lq_sb_printf(out, "Model:           %s\nFamily:          %s\nLayers:          %lld\nHidden size:     %lld\n"
                      "Vocab size:      %lld\nFeatures:        %lld (%lld per layer)\nExtract level:   %s\n"
                      "Remote:          %s\n",
                 jstr(j, "model"), jstr(j, "family"), (long long)json_integer_value(json_object_get(j, "layers")),
                 (long long)json_integer_value(json_object_get(j, "hidden_size")),
                 (long long)json_integer_value(json_object_get(j, "vocab_size")),
                 (long long)json_integer_value(json_object_get(j, "features")),
                 (long long)json_integer_value(json_object_get(j, "features_per_layer")), jstr(j, "extract_level"), url);
}

static int remote_stmt(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    json_t *j = NULL, *req = NULL, *x;
    lq_sb path = {0};
    char num[32];
    size_t i;
    int rc = 0;
    switch (s->kind) {
    case LQ_LS_STATS:
        if ((rc = call(q, "GET", "/v1/stats", NULL, &j, err)))
            break;
        stats_rows(j, out, q->remote);
        break;
    case LQ_LS_DESCRIBE: {
        static const char *const bands[] = {"syntax", "knowledge", "output", "all"};
        lq_sb_puts(&path, "/v1/describe");
        url_arg(&path, "entity", s->str);
        url_arg(&path, "band", s->band == LQ_LB_NONE ? "all" : bands[s->band]);
        snprintf(num, sizeof num, "%d", s->limit >= 0 ? s->limit : 20);
        url_arg(&path, "limit", num);
        if ((rc = path.oom ? LQ_ENOMEM : call(q, "GET", path.s, NULL, &j, err)))
            break;
        lq_sb_printf(out, "%s\n", s->str);
        json_array_foreach(json_object_get(j, "edges"), i, x) {
            lq_sb_puts(out, "    \xe2\x86\x92 ");
            lq_lql_pad(out, jstr(x, "target"), 20, 0);
            lq_sb_printf(out, " %7.1f  L%lld\n", json_number_value(json_object_get(x, "gate_score")),
                         (long long)json_integer_value(json_object_get(x, "layer")));
        }
        if (!json_array_size(json_object_get(j, "edges")))
            lq_sb_puts(out, "  (no edges found)\n");
        break;
    }
    case LQ_LS_WALK:
        lq_sb_puts(&path, "/v1/walk");
        url_arg(&path, "prompt", s->str);
        snprintf(num, sizeof num, "%d", s->top >= 0 ? s->top : 10);
        url_arg(&path, "top", num);
        if (s->has_range) {
            snprintf(num, sizeof num, "%d-%d", s->range_lo, s->range_hi);
            url_arg(&path, "layers", num);
        }
        if ((rc = path.oom ? LQ_ENOMEM : call(q, "GET", path.s, NULL, &j, err)))
            break;
        json_array_foreach(json_object_get(j, "hits"), i, x) {
            char lf[48];
            snprintf(lf, sizeof lf, "L%lld F%lld", (long long)json_integer_value(json_object_get(x, "layer")),
                     (long long)json_integer_value(json_object_get(x, "feature")));
            lq_sb_printf(out, "  %-12s %8.1f  ", lf, json_number_value(json_object_get(x, "gate_score")));
            lq_sb_printf(out, "%s\n", jstr(x, "target"));
        }
        break;
    case LQ_LS_INFER:
        req = json_pack("{s:s,s:i,s:s}", "prompt", s->str, "top", s->top >= 0 ? s->top : 5, "mode",
                        s->compare ? "compare" : "walk");
        if ((rc = call(q, "POST", "/v1/infer", req, &j, err)))
            break;
        lq_sb_puts(out, "Predictions (walk FFN, remote):\n");
        json_array_foreach(json_object_get(j, "predictions"), i, x) {
            lq_sb_printf(out, "  %2zu. ", i + 1);
            lq_lql_pad(out, jstr(x, "token"), 20, 0);
            lq_sb_printf(out, " (%.2f%%)\n", json_number_value(json_object_get(x, "probability")) * 100.0);
        }
        break;
    case LQ_LS_SELECT: {
        if (s->from != LQ_LF_EDGES || s->nearest)
            return lq_err_set(err, LQ_EUNSUPPORTED, "USE REMOTE: only SELECT ... FROM EDGES runs on the server");
        req = json_pack("{s:i}", "limit", s->limit >= 0 ? s->limit : 20);
        for (size_t k = 0; k < s->n_where; k++) { /* the server's filters: =/LIKE on entity, relation, layer */
            const lq_lql_cond *c = &s->where[k];
            int kind = lq_lql_field_kind(c->field);
            if (c->op != LQ_LO_EQ && c->op != LQ_LO_LIKE)
                continue;
            if ((kind == LQ_LQL_FSTR_TOKEN || kind == LQ_LQL_FSTR_RELATION) && c->v.kind == LQ_LV_STRING)
                json_object_set_new(req, kind == LQ_LQL_FSTR_TOKEN ? "entity" : "relation", json_string(c->v.s));
            else if (kind == LQ_LQL_FNUM_LAYER && c->v.kind == LQ_LV_INT)
                json_object_set_new(req, "layer", json_integer((json_int_t)c->v.num));
        }
        if ((rc = call(q, "POST", "/v1/select", req, &j, err)))
            break;
        lq_sb_printf(out, "%-6s %-8s %-20s %10s\n", "Layer", "Feature", "Token", "Score");
        json_array_foreach(json_object_get(j, "edges"), i, x) {
            char lf[24], ff[24];
            snprintf(lf, sizeof lf, "L%lld", (long long)json_integer_value(json_object_get(x, "layer")));
            snprintf(ff, sizeof ff, "F%lld", (long long)json_integer_value(json_object_get(x, "feature")));
            lq_sb_printf(out, "%-6s %-8s ", lf, ff);
            lq_lql_pad(out, jstr(x, "target"), 20, 0);
            lq_sb_printf(out, " %10.4f\n", json_number_value(json_object_get(x, "c_score")));
        }
        lq_sb_printf(out, "\n%zu rows (%lld matched)\n", json_array_size(json_object_get(j, "edges")),
                     (long long)json_integer_value(json_object_get(j, "total")));
        break;
    }
    case LQ_LS_SHOW_RELATIONS:
        if ((rc = call(q, "GET", "/v1/relations", NULL, &j, err)))
            break;
        lq_sb_printf(out, "%-25s %8s\n", "Relation", "Count");
        json_array_foreach(json_object_get(j, "relations"), i, x) {
            lq_lql_pad(out, jstr(x, "name"), 25, 0);
            lq_sb_printf(out, " %8lld\n", (long long)json_integer_value(json_object_get(x, "count")));
        }
        break;
    case LQ_LS_INSERT:
        req = json_pack("{s:s,s:s,s:s,s:s}", "entity", s->entity, "relation", s->relation, "target", s->target,
                        "mode", s->insert_mode == 1 ? "compose" : "knn");
        if (s->layer >= 0)
            json_object_set_new(req, "layer", json_integer(s->layer));
        if (s->confidence == s->confidence) /* not NaN */
            json_object_set_new(req, "confidence", json_real(s->confidence));
        if ((rc = call(q, "POST", "/v1/insert", req, &j, err)))
            break;
        lq_sb_printf(out, "Inserted: %s \xe2\x80\x94[%s]\xe2\x86\x92 %s (remote, %s)\n", s->entity, s->relation, s->target,
                     s->insert_mode == 1 ? "compose" : "KNN store");
        break;
    case LQ_LS_SHOW_PATCHES:
        if ((rc = call(q, "GET", "/v1/patches", NULL, &j, err)))
            break;
        lq_sb_printf(out, "Active patches (%zu, remote):\n", json_array_size(json_object_get(j, "patches")));
        json_array_foreach(json_object_get(j, "patches"), i, x)
            lq_sb_printf(out, "  %s\n", json_is_string(x) ? json_string_value(x) : jstr(x, "name"));
        break;
    default:
        rc = lq_err_set(err, LQ_EUNSUPPORTED, "%s is not supported over USE REMOTE (it needs a local vindex: USE \"dir\")",
                        lq_lql_kind_name(s->kind));
    }
    if (!rc && path.oom)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_sb_free(&path);
    json_decref(req);
    json_decref(j);
    return rc;
}

int lq_lql_exec_remote(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (s->kind == LQ_LS_USE_REMOTE)
        return remote_use(q, s->str, out, err);
    return remote_stmt(q, s, out, err);
}
