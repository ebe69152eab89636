/* The remote FFN client (lq_model_opts.ffn_url): the forward pass runs attention here and
 * hands each layer's normed FFN input to a larql serve, which answers that layer's FFN output
 * (LARQL's RemoteWalkBackend, crates/larql-inference/src/ffn/remote). One POST /v1/walk-ffn
 * per layer per forward pass, all of the pass's rows in it (a decode step: 1 row; a prefill
 * chunk: up to 64), in LARQL's binary wire format, f32 both ways so that the numbers are the
 * ones the local FFN computes:
 *
 *   request  (application/x-larql-ffn): u32 layer, u32 seq_len, u32 flags (bit 0 full_output
 *            = 1), u32 top_k (unused with full_output; LARQL's clients send 8092), f32
 *            residual[seq_len * hidden]; all little-endian
 *   response (application/x-larql-ffn): u32 layer, u32 seq_len, f32 latency_ms, f32
 *            output[seq_len * hidden]
 *
 * The URL may also be LARQL's shard map, "A-B=URL,C-D=URL" (LayerShardedBackend): each
 * inclusive layer range answered by its own server (`serve --ffn-only --layers A-B`); every
 * layer must be covered. Each server is checked at open like a single one.
 *
 * The server's answer is untrusted: its type, length, echoed layer and seq_len and every
 * value's finiteness are checked before anything reaches the residual stream. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/le.h"
#include "core/httpc.h"
#include "model/model_internal.h"

#define FFN_CT "application/x-larql-ffn"
#define STATS_MAX (1u << 20)

#define MAX_SHARDS 64
#define SPEC_MAX 4096

/* One server and the layers it answers (inclusive). */
typedef struct ffn_shard {
    int first, last;
    lq_httpc *http;
} ffn_shard;

struct lq_ffn_remote {
    ffn_shard sh[MAX_SHARDS];
    int n_sh;
    int *layer_shard; /* [n_layer]: which shard answers each layer */
    int n_layer, n_embd;
    char spec[SPEC_MAX];
};

/* The server's message for a non-200: LARQL's {"error":"..."} or its text, cut. */
static int server_error(const lq_httpc *http, const lq_httpc_resp *resp, int layer, lq_err *err)
{
    const char *msg = resp->body ? resp->body : "";
    json_t *j = resp->body ? json_loadb(resp->body, resp->len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    if (json_is_object(e)) /* the OpenAI envelope */
        e = json_object_get(e, "message");
    if (json_is_string(e))
        msg = json_string_value(e);
    int rc = layer >= 0 ? lq_err_set(err, LQ_EIO, "remote FFN %s: layer %d: HTTP %d: %.300s", lq_httpc_url(http),
                                     layer, resp->status, msg)
                        : lq_err_set(err, LQ_EIO, "remote FFN %s: HTTP %d: %.300s", lq_httpc_url(http),
                                     resp->status, msg);
    json_decref(j);
    return rc;
}

/* The shape check LARQL's client makes at connect (hidden_size from GET /v1/stats), and the
 * layer count as well: a server of another model must not answer this one's layers. */
static int check_server(lq_httpc *http, int n_layer, int n_embd, lq_err *err)
{
    const char *url = lq_httpc_url(http);
    lq_httpc_resp resp;
    int rc = lq_httpc_request(http, "GET", "/v1/stats", NULL, "application/json", NULL, 0, STATS_MAX, &resp, err);
    if (rc) {
        lq_err_prefix(err, "remote FFN");
        return rc;
    }
    json_t *j = resp.status == 200 ? json_loadb(resp.body, resp.len, 0, NULL) : NULL;
    json_t *hs = json_object_get(j, "hidden_size"), *ly = json_object_get(j, "layers");
    if (resp.status != 200)
        rc = server_error(http, &resp, -1, err);
    else if (!json_is_integer(hs))
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: GET /v1/stats has no hidden_size (no model loaded?)", url);
    else if (json_integer_value(hs) != n_embd)
        rc = lq_err_set(err, LQ_EINVAL, "remote FFN %s serves a model of hidden size %lld; this model's is %d", url,
                        (long long)json_integer_value(hs), n_embd);
    else if (json_is_integer(ly) && json_integer_value(ly) != n_layer)
        rc = lq_err_set(err, LQ_EINVAL, "remote FFN %s serves a model of %lld layers; this model has %d", url,
                        (long long)json_integer_value(ly), n_layer);
    json_decref(j);
    lq_httpc_resp_free(&resp);
    return rc;
}

/* "A-B" (inclusive, A <= B) at s[0..n). */
static int parse_range(const char *s, size_t n, int *a, int *b)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *dash = strchr(buf, '-'), *e1, *e2;
    if (!dash || dash == buf)
        return -1;
    *dash = 0;
    long x = strtol(buf, &e1, 10), y = strtol(dash + 1, &e2, 10);
    if (*e1 || *e2 || e2 == dash + 1 || x < 0 || y < x || y > 1 << 20)
        return -1;
    *a = (int)x;
    *b = (int)y;
    return 0;
}

static int add_shard(lq_ffn_remote *r, int first, int last, const char *url, size_t url_len, int timeout_ms,
                     lq_err *err)
{
    char u[512];
    if (r->n_sh == MAX_SHARDS)
        return lq_err_set(err, LQ_ERANGE, "remote FFN: more than %d shards", MAX_SHARDS);
    if (url_len >= sizeof u)
        return lq_err_set(err, LQ_EINVAL, "remote FFN: a URL longer than %zu bytes", sizeof u - 1);
    memcpy(u, url, url_len);
    u[url_len] = 0;
    ffn_shard *sh = &r->sh[r->n_sh];
    int rc = lq_httpc_new(u, timeout_ms, &sh->http, err);
    if (rc)
        return rc;
    r->n_sh++;
    sh->first = first;
    sh->last = last;
    return check_server(sh->http, r->n_layer, r->n_embd, err);
}

int lq_ffn_remote_open(const char *spec, int timeout_ms, int n_layer, int n_embd, lq_ffn_remote **out, lq_err *err)
{
    *out = NULL;
    if (!spec || !*spec || strlen(spec) >= SPEC_MAX)
        return lq_err_set(err, LQ_EINVAL, "remote FFN: empty URL, or longer than %d bytes", SPEC_MAX - 1);
    lq_ffn_remote *r = calloc(1, sizeof *r);
    if (!r || !(r->layer_shard = malloc((size_t)(n_layer > 0 ? n_layer : 1) * sizeof *r->layer_shard))) {
        free(r);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    r->n_layer = n_layer;
    r->n_embd = n_embd;
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    if (timeout_ms <= 0)
        timeout_ms = 60000; /* LARQL's --ffn-timeout-secs default */
    int rc = 0;
    if (!strchr(spec, '=')) {
        rc = add_shard(r, 0, INT32_MAX, spec, strlen(spec), timeout_ms, err);
    } else {
        /* LARQL's shard map: "A-B=URL,C-D=URL" (LayerShardedBackend), each range inclusive */
        for (const char *p = spec; !rc && *p;) {
            const char *end = strchr(p, ','), *eq;
            size_t n = end ? (size_t)(end - p) : strlen(p);
            while (n && (*p == ' ' || *p == '\t'))
                p++, n--;
            while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
                n--;
            int a, b;
            if (n) {
                eq = memchr(p, '=', n);
                if (!eq || parse_range(p, (size_t)(eq - p), &a, &b))
                    rc = lq_err_set(err, LQ_EINVAL, "remote FFN: bad shard '%.*s' (expected A-B=http://host:port)",
                                    (int)(n > 200 ? 200 : n), p);
                else
                    rc = add_shard(r, a, b, eq + 1, n - (size_t)(eq + 1 - p), timeout_ms, err);
            }
            p = end ? end + 1 : p + strlen(p);
        }
        if (!rc && !r->n_sh)
            rc = lq_err_set(err, LQ_EINVAL, "remote FFN: no shard in '%s'", spec);
    }
    /* every layer must have a server: LARQL adds zeros for an uncovered layer, which is a
     * silently different model */
    for (int l = 0; !rc && l < n_layer; l++) {
        r->layer_shard[l] = -1;
        for (int k = 0; k < r->n_sh && r->layer_shard[l] < 0; k++)
            if (l >= r->sh[k].first && l <= r->sh[k].last)
                r->layer_shard[l] = k; /* the first range that holds it, as LARQL picks */
        if (r->layer_shard[l] < 0)
            rc = lq_err_set(err, LQ_EINVAL, "remote FFN: no shard of '%s' serves layer %d (of %d)", spec, l, n_layer);
    }
    if (rc) {
        lq_ffn_remote_close(r);
        return rc;
    }
    *out = r;
    return LQ_OK;
}

int lq_ffn_remote_layer(lq_ffn_remote *r, int layer, const float *x, int T, int D, float *out, lq_err *err)
{
    if (layer < 0 || layer >= r->n_layer)
        return lq_err_set(err, LQ_ERANGE, "remote FFN: layer %d out of range", layer);
    lq_httpc *http = r->sh[r->layer_shard[layer]].http;
    size_t n = (size_t)T * (size_t)D, blen = 16 + 4 * n;
    unsigned char *b = malloc(blen);
    if (!b)
        return lq_err_set(err, LQ_ENOMEM, "out of memory for a remote FFN request");
    lq_put_le32(b, (uint32_t)layer);
    lq_put_le32(b + 4, (uint32_t)T);
    lq_put_le32(b + 8, 1);    /* full_output */
    lq_put_le32(b + 12, 8092); /* top_k: LARQL's clients' value, unused with full_output */
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        lq_put_le32(b + 16 + 4 * i, u);
    }
    lq_httpc_resp resp;
    size_t want = 12 + 4 * n; /* an error's JSON may be longer: room for it below */
    int rc = lq_httpc_request(http, "POST", "/v1/walk-ffn", FFN_CT, FFN_CT, b, blen, want + 4096, &resp, err);
    free(b);
    if (rc) { /* down, silent past the deadline, or cut: say which call it was */
        lq_err_prefix(err, "remote FFN, layer %d", layer);
        return rc;
    }
    size_t cl = strlen(FFN_CT);
    const char *ct = resp.ctype;
    const unsigned char *p = (const unsigned char *)resp.body;
    if (resp.status != 200)
        rc = server_error(http, &resp, layer, err);
    else if (strncasecmp(ct, FFN_CT, cl) || (ct[cl] && ct[cl] != ';' && ct[cl] != ' '))
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: layer %d: answer of type '%s', expected %s",
                        lq_httpc_url(http), layer, ct, FFN_CT);
    else if (resp.len != want)
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: layer %d: answer of %zu bytes, expected %zu (%d x %d f32)",
                        lq_httpc_url(http), layer, resp.len, want, T, D);
    else if (lq_le32(p) != (uint32_t)layer || lq_le32(p + 4) != (uint32_t)T)
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: answered layer %u with %u rows for layer %d with %d",
                        lq_httpc_url(http), lq_le32(p), lq_le32(p + 4), layer, T);
    else
        for (size_t i = 0; i < n; i++) {
            uint32_t u = lq_le32(p + 12 + 4 * i);
            memcpy(&out[i], &u, 4);
            if (!isfinite(out[i])) {
                rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: layer %d: output value %zu is not finite",
                                lq_httpc_url(http), layer, i);
                break;
            }
        }
    lq_httpc_resp_free(&resp);
    return rc;
}

const char *lq_ffn_remote_url(const lq_ffn_remote *r) { return r ? r->spec : NULL; }

void lq_ffn_remote_close(lq_ffn_remote *r)
{
    if (!r)
        return;
    for (int k = 0; k < r->n_sh; k++)
        lq_httpc_free(r->sh[k].http);
    free(r->layer_shard);
    free(r);
}
