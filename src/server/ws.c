/* GET /v1/stream: LARQL's WebSocket route (reference/larql-queries-server.md §7.7).
 *
 * The handshake is an ordinary request answered with 101 through libmicrohttpd's upgrade
 * support; then ws_session() owns the socket. With one thread per connection the upgrade
 * handler may block, so the session runs in that thread until the client closes, goes
 * away, breaks the protocol or the server stops.
 *
 * Frames (RFC 6455): client frames must be masked (else close 1002); fragmented messages
 * are reassembled up to WS_MAX_MSG (over -> close 1009); ping -> pong; close -> close
 * reply; binary messages are ignored; text must be UTF-8 (else close 1007). Server frames
 * are unmasked text frames of compact JSON.
 *
 * Messages: describe and infer run in this thread with the same library calls as
 * GET /v1/describe (per-layer variant) and POST /v1/infer (infer_top). generate goes
 * through the batching scheduler like the OpenAI routes: the scheduler thread appends
 * token frames to an output buffer and wakes this thread through an eventfd; this thread
 * writes them, keeps reading client frames, and a {"type":"cancel"} cancels the request
 * in the scheduler (it stops before its next token). A client that vanishes cancels it too,
 * and the handle is released before the session's memory is freed. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "larql/generate.h"
#include "larql/tokenizer.h"
#include "server/internal.h"
#include "core/sha1.h"
#include "core/round.h"

#define WS_MAX_MSG (1u << 20)      /* reassembled message limit: over -> close 1009 */
/* Output a client has not read: past WS_OUT_SOFT no more of its frames are read (TCP pushes
 * back on it); past WS_OUT_HARD (a generation streaming to a client that never reads) the
 * connection is closed, so no client can grow the server's memory without bound. */
#define WS_OUT_SOFT ((size_t)1 << 20)
#define WS_OUT_HARD ((size_t)16 << 20)
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

typedef struct ws {
    lq_server *s;
    struct MHD_UpgradeResponseHandle *urh;
    int sock, efd;
    unsigned char *in;        /* bytes read, not yet parsed */
    size_t in_len, in_cap;
    char *msg;                /* text message being reassembled */
    size_t msg_len, msg_cap;
    int msg_op;               /* 0 = none in progress, 1 text, 2 binary */
    int closing;              /* a close frame was queued: stop after flushing */
    int gone;                 /* set up failed: close at once */
    double close_t;           /* when it was queued (a peer that never reads gets 2 s) */
    double stop_t;            /* when this session saw the server stopping (0: not yet) */

    pthread_mutex_t mu;       /* guards out and the generation fields the scheduler writes */
    unsigned char *out;
    size_t out_len, out_off, out_cap;
    int overflow;             /* output past WS_OUT_HARD: the connection is dropped */

    lq_sched_req *h;          /* running generation (connection thread only) */
    int gen_frames;           /* token frames sent (under mu) */
    int gen_finished, gen_rc; /* set by on_done (under mu) */
    lq_err gen_err;
    int cancel;               /* client asked to cancel or went away (atomic) */
    double gen_t0;
    char *sid;                /* the upgrade request's X-Session-Id (NULL: the global state) */
} ws;

/* ---- handshake ---- */

/* Does the comma-separated header value hold the token (case-insensitive)? */
static int has_token(const char *v, const char *tok)
{
    size_t tl = strlen(tok);
    while (v && *v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        size_t n = strcspn(v, ",");
        size_t e = n;
        while (e && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e == tl && !strncasecmp(v, tok, tl))
            return 1;
        v += n;
    }
    return 0;
}

static void ws_session(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra,
                       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh);

void route_stream(lq_server *s, req *q, reply *r)
{
    struct MHD_Connection *c = q->conn;
    const char *up = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
    const char *conn = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connection");
    const char *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version");
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    if (!up || !has_token(up, "websocket") || !conn || !has_token(conn, "upgrade")) {
        reply_larql_err(r, 400,
                        "/v1/stream is a WebSocket endpoint: send 'Upgrade: websocket' and "
                        "'Connection: Upgrade' (with Sec-WebSocket-Key and Sec-WebSocket-Version: 13)");
        return;
    }
    if (!ver || strcmp(ver, "13")) {
        reply_larql_err(r, 426, "Sec-WebSocket-Version must be 13 (RFC 6455), got '%.16s'", ver ? ver : "");
        return;
    }
    /* the key is base64 of 16 random bytes: 24 characters ending in "==" */
    if (!key || strlen(key) != 24 || strcmp(key + 22, "==") || strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") != 22) {
        reply_larql_err(r, 400, "missing or malformed Sec-WebSocket-Key (base64 of 16 bytes)");
        return;
    }
    lq_sha1_ctx h;
    uint8_t d[20];
    char accept[32];
    lq_sha1_init(&h);
    lq_sha1_update(&h, key, 24);
    lq_sha1_update(&h, WS_GUID, sizeof WS_GUID - 1);
    lq_sha1_final(&h, d);
    lq_base64_encode(d, sizeof d, accept);
    r->stream = MHD_create_response_for_upgrade(ws_session, s);
    if (!r->stream) {
        reply_larql_err(r, 500, "cannot create the upgrade response");
        return;
    }
    r->status = 101; /* MHD_HTTP_SWITCHING_PROTOCOLS; MHD adds "Connection: Upgrade" */
    /* over TLS the session will run on a thread of its own that a stop waits for: count it
     * from now, since the client may hold the 101 before ws_session has started that thread */
    lq_server *front = s->front ? s->front : s;
    if (front->o.tls_cert)
        __atomic_add_fetch(&front->ws_pending, 1, __ATOMIC_ACQ_REL);
    MHD_add_response_header(r->stream, "Upgrade", "websocket");
    MHD_add_response_header(r->stream, "Sec-WebSocket-Accept", accept);
}

/* ---- output ---- */

static void wake(ws *w)
{
    uint64_t one = 1;
    ssize_t n = write(w->efd, &one, sizeof one);
    (void)n;
}

/* Appends one unmasked frame (FIN set). Any thread. */
static void put_frame(ws *w, int op, const void *data, size_t len)
{
    unsigned char hdr[10];
    size_t hl = 2;
    hdr[0] = (unsigned char)(0x80 | op);
    if (len < 126) {
        hdr[1] = (unsigned char)len;
    } else if (len <= 0xffff) {
        hdr[1] = 126;
        hdr[2] = (unsigned char)(len >> 8);
        hdr[3] = (unsigned char)len;
        hl = 4;
    } else {
        hdr[1] = 127;
        for (int i = 0; i < 8; i++)
            hdr[2 + i] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
        hl = 10;
    }
    pthread_mutex_lock(&w->mu);
    if (w->out_len - w->out_off + hl + len > WS_OUT_HARD) {
        w->overflow = 1;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    if (w->out_len + hl + len > w->out_cap) {
        size_t nc = (w->out_len + hl + len) * 2;
        unsigned char *no = realloc(w->out, nc);
        if (!no) {
            pthread_mutex_unlock(&w->mu);
            return; /* the frame is lost; the session goes on */
        }
        w->out = no;
        w->out_cap = nc;
    }
    memcpy(w->out + w->out_len, hdr, hl);
    if (len)
        memcpy(w->out + w->out_len + hl, data, len);
    w->out_len += hl + len;
    pthread_mutex_unlock(&w->mu);
}

/* Sends one JSON object as a text frame; steals j. */
static void put_json(ws *w, json_t *j)
{
    size_t len;
    char *t = j ? lq_dump(j, &len) : NULL;
    json_decref(j);
    if (t)
        put_frame(w, 0x1, t, len);
    free(t);
}

static void put_error(ws *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_error(ws *w, const char *fmt, ...)
{
    char m[LQ_ERR_MSG_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    put_json(w, json_pack("{s:s,s:o}", "type", "error", "message", lq_jstr(m, strlen(m))));
}

static void put_close(ws *w, int code, const char *reason)
{
    unsigned char p[125];
    size_t n = strlen(reason);
    if (n > sizeof p - 2)
        n = sizeof p - 2;
    p[0] = (unsigned char)(code >> 8);
    p[1] = (unsigned char)code;
    memcpy(p + 2, reason, n);
    put_frame(w, 0x8, p, n + 2);
    w->closing = 1;
    w->close_t = lq_now();
}

/* Writes what the socket takes now. -1 when the peer is gone. */
static int flush_out(ws *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->out_off < w->out_len) {
        ssize_t n = send(w->sock, w->out + w->out_off, w->out_len - w->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            int e = errno;
            pthread_mutex_unlock(&w->mu);
            return e == EAGAIN || e == EWOULDBLOCK || e == EINTR ? 0 : -1;
        }
        w->out_off += (size_t)n;
    }
    w->out_off = w->out_len = 0;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* bytes queued and not yet sent */
static size_t out_pending(ws *w)
{
    pthread_mutex_lock(&w->mu);
    size_t p = w->out_len - w->out_off;
    pthread_mutex_unlock(&w->mu);
    return p;
}

/* ---- generation (callbacks on the scheduler thread) ---- */

static int on_token(void *user, int32_t id, const char *text, size_t len, float logprob, const float *logits)
{
    (void)logprob;
    (void)logits;
    ws *w = user;
    if (id >= 0 && (__atomic_load_n(&w->cancel, __ATOMIC_ACQUIRE) ||
                    __atomic_load_n(&w->s->cancel_all, __ATOMIC_ACQUIRE)))
        return 1;
    /* one frame per piece of text: a token whose bytes are held back (partial UTF-8, a
     * possible stop-string prefix) shows up in a later frame, and the text held at the end
     * (id < 0) gets its own frame, so the frames concatenate to the completion's text */
    if (len) {
        pthread_mutex_lock(&w->mu);
        int idx = w->gen_frames++;
        pthread_mutex_unlock(&w->mu);
        put_json(w, json_pack("{s:s,s:o,s:i}", "type", "token", "text", lq_jstr(text, len), "index", idx));
        wake(w);
    }
    return 0;
}

static void on_done(void *user, int rc, const lq_generate_result *res, const lq_err *err)
{
    ws *w = user;
    metrics_gen(w->s, res->n_prompt, res->n_generated, res->prefill_ms, res->decode_ms);
    pthread_mutex_lock(&w->mu);
    w->gen_rc = rc;
    if (rc && err)
        w->gen_err = *err;
    w->gen_finished = 1;
    pthread_mutex_unlock(&w->mu);
    wake(w);
}

/* After on_done: the closing frame, and the handle goes back. */
static void finish_generation(ws *w)
{
    pthread_mutex_lock(&w->mu);
    int rc = w->gen_rc, frames = w->gen_frames;
    lq_err e = w->gen_err;
    pthread_mutex_unlock(&w->mu);
    lq_sched_release(w->h);
    w->h = NULL;
    double ms = lq_round_dp((lq_now() - w->gen_t0) * 1000.0, 1);
    if (rc && rc != LQ_ECANCELED) {
        put_error(w, "%s", e.msg);
        return;
    }
    json_t *d = json_pack("{s:s,s:i,s:f}", "type", "done", "tokens", frames, "latency_ms", ms);
    if (__atomic_load_n(&w->cancel, __ATOMIC_ACQUIRE))
        json_object_set_new(d, "cancelled", json_true());
    put_json(w, d);
}

static void start_generate(ws *w, json_t *j)
{
    lq_server *s = w->s;
    json_t *p = json_object_get(j, "prompt"), *mt = json_object_get(j, "max_tokens");
    if (!json_is_string(p) || json_string_length(p) == 0) {
        put_error(w, "missing or empty prompt");
        return;
    }
    long max_tokens = 256;
    if (mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 0) {
            put_error(w, "'max_tokens' must be a non-negative integer");
            return;
        }
        /* huge values are clamped to the context left by the scheduler */
        max_tokens = json_integer_value(mt) > 0x7fffffff ? 0x7fffffff : (long)json_integer_value(mt);
    }
    if (s->o.no_infer) {
        put_error(w, "inference disabled (--no-infer)");
        return;
    }
    lq_model *m;
    lq_err err = {0};
    if (srv_model(s, &m, &err)) {
        put_error(w, "model not available: %s", err.msg);
        return;
    }
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = lq_tokenizer_encode(tok, json_string_value(p), json_string_length(p),
                                 lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0, &ids, &n, &err);
    if (rc || n == 0) {
        free(ids);
        put_error(w, "%s", rc ? err.msg : "empty prompt after tokenization");
        return;
    }
    lq_scheduler *sched = srv_sched(s);
    if (n >= (size_t)lq_scheduler_n_ctx(sched)) {
        put_error(w, "prompt is %zu tokens; the context holds %d (prompt + completion)", n,
                  lq_scheduler_n_ctx(sched));
        free(ids);
        return;
    }
    lq_generate_params gp;
    lq_generate_defaults(&gp);
    gp.max_tokens = (int)max_tokens;
    gp.sampling.temperature = 0.0f; /* greedy, as LARQL's WebSocket generate */
    w->gen_frames = 0;
    w->gen_finished = 0;
    w->gen_rc = 0;
    __atomic_store_n(&w->cancel, 0, __ATOMIC_RELEASE);
    w->gen_t0 = lq_now();
    lq_resid_hook *hook = NULL;
    if (srv_edit_hook(s, w->sid, &hook, &gp.cache_key, &err)) {
        free(ids);
        put_error(w, "%s", err.msg);
        return;
    }
    gp.hook = hook;
    rc = lq_scheduler_submit(sched, ids, n, &gp, on_token, on_done, w, &w->h, &err);
    free(ids);
    if (rc)
        lq_edit_hook_free(hook);
    if (rc) {
        w->h = NULL;
        put_error(w, "%s", err.msg);
    }
}

/* ---- describe and infer (this thread) ---- */

static void do_describe(ws *w, json_t *j)
{
    lq_server *s = w->s;
    json_t *e = json_object_get(j, "entity"), *b = json_object_get(j, "band");
    if (!json_is_string(e)) {
        put_error(w, "missing entity");
        return;
    }
    if (b && !json_is_null(b) && !json_is_string(b)) {
        put_error(w, "'band' must be a string");
        return;
    }
    if (!s->vx) {
        put_error(w,
                  "describe needs a vindex (gate vectors and down metadata); this server was started on a "
                  "GGUF file: build one with `larql convert gguf-to-vindex` and serve the directory");
        return;
    }
    if (json_string_length(e) == 0) {
        put_json(w, json_pack("{s:s,s:i,s:i}", "type", "done", "total_edges", 0, "latency_ms", 0));
        return;
    }
    lq_describe_params p;
    lq_describe_params_init(&p);
    p.entity = json_string_value(e);
    p.band = json_is_string(b) ? json_string_value(b) : "all"; /* the WebSocket's default */
    p.limit = 20;        /* fixed per-layer K and threshold, as LARQL's stream.rs */
    p.min_score = 5.0;
    p.per_layer = 1;
    lq_describe_result r;
    lq_err err = {0};
    /* the global knowledge state, held until the frames are out (edges point into it) */
    kview kv;
    if (srv_kview_get(s, w->sid, &kv, &err)) {
        put_error(w, "%s", err.msg);
        return;
    }
    if (lq_vindex_describe(kv.v, &p, &r, &err)) {
        srv_kview_put(&kv);
        put_error(w, "%s", err.msg);
        return;
    }
    if (r.n_tokens == 0) {
        put_json(w, json_pack("{s:s,s:i,s:i}", "type", "done", "total_edges", 0, "latency_ms", 0));
        lq_describe_result_free(&r);
        srv_kview_put(&kv);
        return;
    }
    size_t k = 0;
    for (size_t li = 0; li < r.n_layers; li++) {
        json_t *edges = json_array();
        for (; k < r.n_edges && r.edges[k].layer == r.layers[li]; k++) {
            const lq_describe_edge *d = &r.edges[k];
            json_t *o = json_pack("{s:o,s:f,s:i}", "target", lq_jstr(d->target, strlen(d->target)), "gate_score",
                                  lq_round_dp(d->gate_score, 1), "feature", d->feature);
            if (d->relation) {
                json_object_set_new(o, "relation", lq_jstr(d->relation, strlen(d->relation)));
                json_object_set_new(o, "source", json_string(d->relation_source ? d->relation_source : "probe"));
            }
            json_array_append_new(edges, o);
        }
        put_json(w, json_pack("{s:s,s:i,s:o}", "type", "layer", "layer", r.layers[li], "edges", edges));
        flush_out(w); /* layer by layer, as the route's name promises */
    }
    put_json(w, json_pack("{s:s,s:o,s:I,s:f}", "type", "done", "entity", lq_jstr(p.entity, strlen(p.entity)),
                          "total_edges", (json_int_t)r.n_edges, "latency_ms", lq_round_dp(r.latency_ms, 1)));
    lq_describe_result_free(&r);
    srv_kview_put(&kv);
}

static void do_infer(ws *w, json_t *j)
{
    json_t *p = json_object_get(j, "prompt"), *t = json_object_get(j, "top"), *md = json_object_get(j, "mode");
    if (!json_is_string(p) || json_string_length(p) == 0) {
        put_error(w, "missing or empty prompt");
        return;
    }
    long top = 5;
    if (t && !json_is_null(t)) {
        if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > 1000) {
            put_error(w, "'top' must be an integer in 1..1000");
            return;
        }
        top = (long)json_integer_value(t);
    }
    if (md && !json_is_null(md) && !json_is_string(md)) {
        put_error(w, "'mode' must be a string");
        return;
    }
    const char *mode = json_is_string(md) ? json_string_value(md) : "walk";
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = json_string_value(p);
    ip.top = (int)top;
    ip.mode = mode;
    if (strlen(ip.prompt) != json_string_length(p)) {
        put_error(w, "'prompt' contains a NUL character");
        return;
    }
    if (strcmp(mode, "walk") && strcmp(mode, "dense") && strcmp(mode, "compare")) {
        put_error(w, "mode '%s' is not one of walk, dense, compare", mode);
        return;
    }
    char *text = NULL;
    lq_err err;
    if (srv_infer(w->s, w->sid, &ip, &text, &err)) {
        put_error(w, "%s", err.msg);
        return;
    }
    /* the frames carry exactly what POST /v1/infer answers: one frame per prediction of the
     * body's list (compare: the walk half, or dense when only that ran), then the summary */
    json_t *b = json_loads(text, 0, NULL);
    free(text);
    json_t *preds = json_object_get(b, "predictions");
    if (!preds)
        preds = json_object_get(b, "walk");
    if (!preds)
        preds = json_object_get(b, "dense");
    size_t n = json_array_size(preds);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(preds, i);
        put_json(w, json_pack("{s:s,s:i,s:O,s:O}", "type", "prediction", "rank", (int)i + 1, "token",
                              json_object_get(e, "token"), "probability", json_object_get(e, "probability")));
    }
    json_t *done = json_pack("{s:s,s:O,s:s,s:I,s:O}", "type", "infer_done", "prompt", json_object_get(b, "prompt"),
                             "mode", json_is_string(json_object_get(b, "mode")) ? json_string_value(json_object_get(b, "mode")) : mode,
                             "predictions", (json_int_t)n, "latency_ms", json_object_get(b, "latency_ms"));
    json_t *ko = json_object_get(b, "knn_override");
    if (ko)
        json_object_set(done, "knn_override", ko);
    put_json(w, done);
    json_decref(b);
}

static void on_message(ws *w, const char *text, size_t len)
{
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j) {
        put_error(w, "invalid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return;
    }
    json_t *ty = json_object_get(j, "type");
    const char *type = json_is_string(ty) ? json_string_value(ty) : "";
    if (!json_is_object(j))
        put_error(w, "a message must be a JSON object with a \"type\"");
    else if (!strcmp(type, "cancel")) {
        if (w->h) {
            __atomic_store_n(&w->cancel, 1, __ATOMIC_RELEASE);
            lq_sched_cancel(w->h); /* also while it waits or prefills */
        } /* no generation running: nothing to cancel (as LARQL) */
    } else if (w->h)
        put_error(w, "a generation is running on this connection: wait for its \"done\" or send "
                     "{\"type\":\"cancel\"}");
    else if (!strcmp(type, "describe"))
        do_describe(w, j);
    else if (!strcmp(type, "infer"))
        do_infer(w, j);
    else if (!strcmp(type, "generate"))
        start_generate(w, j);
    else
        put_error(w, "unknown message type: %.200s. Supported: describe, infer, generate", type);
    json_decref(j);
}

/* ---- frames in ---- */

static int msg_append(ws *w, const unsigned char *p, size_t n)
{
    if (w->msg_len + n + 1 > w->msg_cap) {
        size_t nc = (w->msg_len + n + 1) * 2;
        if (nc > WS_MAX_MSG + 1)
            nc = WS_MAX_MSG + 1;
        char *nm = realloc(w->msg, nc);
        if (!nm)
            return -1;
        w->msg = nm;
        w->msg_cap = nc;
    }
    memcpy(w->msg + w->msg_len, p, n);
    w->msg_len += n;
    return 0;
}

/* Parses complete frames from w->in. 0 = need more bytes, -1 = stop reading (a close was
 * queued: peer's close, or our protocol error). */
static int parse_frames(ws *w)
{
    size_t off = 0;
    int rc = 0;
    while (!w->closing) {
        unsigned char *b = w->in + off;
        size_t avail = w->in_len - off;
        if (avail < 2)
            break;
        int fin = b[0] & 0x80, rsv = b[0] & 0x70, op = b[0] & 0x0f, masked = b[1] & 0x80;
        uint64_t len = b[1] & 0x7f;
        size_t hl = 2;
        if (rsv) {
            put_close(w, 1002, "reserved bits set (no extension was negotiated)");
            break;
        }
        if (!masked) {
            put_close(w, 1002, "client frames must be masked");
            break;
        }
        if (len == 126) {
            if (avail < 4)
                break;
            len = (uint64_t)b[2] << 8 | b[3];
            hl = 4;
        } else if (len == 127) {
            if (avail < 10)
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | b[2 + i];
            hl = 10;
        }
        int control = op & 0x8;
        if (control && (!fin || len > 125)) {
            put_close(w, 1002, "control frames must be final and at most 125 bytes");
            break;
        }
        if ((op > 0x2 && op < 0x8) || op > 0xa) {
            put_close(w, 1002, "unknown opcode");
            break;
        }
        if (op == 0x0 && !w->msg_op) {
            put_close(w, 1002, "continuation frame without a message to continue");
            break;
        }
        if ((op == 0x1 || op == 0x2) && w->msg_op) {
            put_close(w, 1002, "new message before the previous one was finished");
            break;
        }
        /* checked before buffering, so a huge declared length never allocates */
        if (!control && len > WS_MAX_MSG - w->msg_len) {
            put_close(w, 1009, "message over the 1 MiB limit");
            break;
        }
        if (avail < hl + 4 + len)
            break;
        const unsigned char *mask = b + hl;
        unsigned char *pl = b + hl + 4;
        for (uint64_t i = 0; i < len; i++)
            pl[i] ^= mask[i & 3];
        off += hl + 4 + (size_t)len;
        if (op == 0x8) {
            /* echo the status code (RFC 6455 §5.5.1), or 1000 without one; a code no endpoint
             * may send (below 1000, 1004-1006, 1015, 1016-2999, 5000 up) is a protocol error */
            int code = len >= 2 ? (pl[0] << 8 | pl[1]) : 1000;
            int valid = len == 0 || (code >= 1000 && code <= 1014 && code != 1004 && code != 1005 && code != 1006) ||
                        (code >= 3000 && code <= 4999);
            if (len == 1)
                valid = 0;
            put_close(w, valid ? code : 1002, valid ? "" : "invalid close code");
            break;
        }
        if (op == 0x9) {
            put_frame(w, 0xa, pl, (size_t)len);
            continue;
        }
        if (op == 0xa)
            continue;
        if (op == 0x1 || op == 0x2)
            w->msg_op = op;
        if (w->msg_op == 0x1 && msg_append(w, pl, (size_t)len)) {
            put_close(w, 1011, "out of memory");
            break;
        }
        if (w->msg_op == 0x2)
            w->msg_len += (size_t)len; /* binary data is ignored, but counts against the limit */
        if (fin) {
            int text = w->msg_op == 0x1;
            w->msg_op = 0;
            size_t ml = w->msg_len;
            w->msg_len = 0;
            if (text) {
                if (!lq_utf8_valid(w->msg ? w->msg : "", ml)) {
                    put_close(w, 1007, "text message is not valid UTF-8");
                    break;
                }
                on_message(w, w->msg ? w->msg : "", ml);
            }
        }
    }
    if (w->closing)
        rc = -1;
    memmove(w->in, w->in + off, w->in_len - off);
    w->in_len -= off;
    return rc;
}

static int read_more(ws *w)
{
    if (w->in_cap - w->in_len < 16384) {
        size_t nc = w->in_cap ? w->in_cap * 2 : 65536;
        unsigned char *ni = realloc(w->in, nc);
        if (!ni)
            return -1;
        w->in = ni;
        w->in_cap = nc;
    }
    ssize_t n = recv(w->sock, w->in + w->in_len, w->in_cap - w->in_len, MSG_DONTWAIT);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    w->in_len += (size_t)n;
    return 0;
}

/* ---- the session ---- */

static void ws_run(ws *w);
static void *ws_thread(void *arg);

static void ws_session(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra,
                       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    (void)con_cls;
    lq_server *s = cls;
    lq_server *front = s->front ? s->front : s;
    /* counted as a thread before it stops being pending: a stop never sees both at 0 */
    if (front->o.tls_cert) {
        __atomic_add_fetch(&front->ws_threads, 1, __ATOMIC_ACQ_REL);
        __atomic_sub_fetch(&front->ws_pending, 1, __ATOMIC_ACQ_REL);
    }
    ws *w = calloc(1, sizeof *w);
    if (!w) {
        if (front->o.tls_cert)
            __atomic_sub_fetch(&front->ws_threads, 1, __ATOMIC_ACQ_REL);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return;
    }
    w->s = s;
    /* describe and infer on this socket see the knowledge state of the upgrade request's
     * session, as the HTTP routes do (a malformed id is refused at the first use) */
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Session-Id");
    w->sid = sid ? strdup(sid) : NULL;
    w->sock = sock;
    w->urh = urh;
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&w->mu, NULL);
    __atomic_add_fetch(&s->m.active_streams, 1, __ATOMIC_RELAXED);
    w->gone = w->efd < 0;
    if (!w->gone && extra_len) {
        /* bytes the client sent right after its request are the first frames */
        w->in = malloc(extra_len + 65536);
        if (!w->in)
            w->gone = 1;
        else {
            memcpy(w->in, extra, extra_len);
            w->in_len = extra_len;
            w->in_cap = extra_len + 65536;
            parse_frames(w);
        }
    }
    /* Over TLS, libmicrohttpd relays between the TLS connection and sock on this very
     * thread once the callback returns: the session then runs on a thread of its own, which
     * lq_server_stop waits for. In the clear it runs here. */
    if (front->o.tls_cert) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!pthread_create(&t, &at, ws_thread, w)) {
            pthread_attr_destroy(&at);
            return;
        }
        pthread_attr_destroy(&at);
        __atomic_sub_fetch(&front->ws_threads, 1, __ATOMIC_ACQ_REL);
        w->gone = 1;
    }
    ws_run(w);
}

static void ws_run(ws *w)
{
    lq_server *s = w->s;
    int gone = w->gone;
    while (!gone) {
        if (w->h) {
            pthread_mutex_lock(&w->mu);
            int fin = w->gen_finished;
            pthread_mutex_unlock(&w->mu);
            if (fin)
                finish_generation(w);
        }
        if (flush_out(w) < 0 || w->overflow)
            break;
        if (w->closing && (!out_pending(w) || lq_now() - w->close_t > 2.0))
            break;
        if (__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) {
            /* a running generation gets the shutdown grace period, then is cancelled; an
             * idle session is closed with 1001 at once */
            if (!w->stop_t)
                w->stop_t = lq_now();
            if (w->h && (__atomic_load_n(&s->cancel_all, __ATOMIC_ACQUIRE) ||
                         lq_now() - w->stop_t > s->o.shutdown_grace_s))
                lq_sched_cancel(w->h);
            if (!w->h && !w->closing) {
                put_close(w, 1001, "server is shutting down");
                continue;
            }
        }
        size_t pend = out_pending(w);
        /* a client that does not read what it is sent is not read either */
        struct pollfd pf[2] = {{.fd = w->sock,
                                .events = (short)((w->closing || pend > WS_OUT_SOFT ? 0 : POLLIN) | (pend ? POLLOUT : 0))},
                               {.fd = w->efd, .events = POLLIN}};
        int pr = poll(pf, 2, 100);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        if (pf[1].revents & POLLIN) {
            uint64_t v;
            ssize_t n = read(w->efd, &v, sizeof v);
            (void)n;
        }
        if (pf[0].revents & (POLLERR | POLLNVAL))
            break;
        if (pf[0].revents & (POLLIN | POLLHUP)) {
            if (read_more(w) < 0)
                break; /* the client went away */
            parse_frames(w);
        }
    }
    /* the client vanished, closed or broke the protocol: a running generation stops
     * before its next token, and its callbacks are done before w is freed */
    if (w->h) {
        __atomic_store_n(&w->cancel, 1, __ATOMIC_RELEASE);
        lq_sched_cancel(w->h);
        lq_sched_wait(w->h, -1);
        lq_sched_release(w->h);
        __atomic_add_fetch(&s->m.streams_canceled, 1, __ATOMIC_RELAXED);
    }
    __atomic_sub_fetch(&s->m.active_streams, 1, __ATOMIC_RELAXED);
    if (w->efd >= 0)
        close(w->efd);
    pthread_mutex_destroy(&w->mu);
    free(w->in);
    free(w->msg);
    free(w->out);
    free(w->sid);
    /* over TLS libmicrohttpd relays sock to the client: what was written last (the close
     * frame) reaches the client only once the relay has read it, so the session waits for
     * that (at most 1 s) before it ends and lets a stopping server close the relay */
    lq_server *front = s->front ? s->front : s;
    for (int i = 0; front->o.tls_cert && i < 50; i++) {
        int queued = 0;
        if (ioctl(w->sock, SIOCOUTQ, &queued) || queued <= 0)
            break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    struct MHD_UpgradeResponseHandle *urh = w->urh;
    free(w);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static void *ws_thread(void *arg)
{
    ws *w = arg;
    lq_server *front = w->s->front ? w->s->front : w->s;
    ws_run(w);
    __atomic_sub_fetch(&front->ws_threads, 1, __ATOMIC_ACQ_REL);
    return NULL;
}
