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
 * The server's answer is untrusted: its type, length, echoed layer and seq_len and every
 * value's finiteness are checked before anything reaches the residual stream. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/httpc.h"
#include "model/model_internal.h"

#define FFN_CT "application/x-larql-ffn"
#define STATS_MAX (1u << 20)

struct lq_ffn_remote {
    lq_httpc *http;
    int n_layer, n_embd;
};

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The server's message for a non-200: LARQL's {"error":"..."} or its text, cut. */
static int server_error(const lq_ffn_remote *r, const lq_httpc_resp *resp, int layer, lq_err *err)
{
    const char *msg = resp->body ? resp->body : "";
    json_t *j = resp->body ? json_loadb(resp->body, resp->len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    if (json_is_object(e)) /* the OpenAI envelope */
        e = json_object_get(e, "message");
    if (json_is_string(e))
        msg = json_string_value(e);
    int rc = layer >= 0 ? lq_err_set(err, LQ_EIO, "remote FFN %s: layer %d: HTTP %d: %.300s", lq_httpc_url(r->http),
                                     layer, resp->status, msg)
                        : lq_err_set(err, LQ_EIO, "remote FFN %s: HTTP %d: %.300s", lq_httpc_url(r->http),
                                     resp->status, msg);
    json_decref(j);
    return rc;
}

int lq_ffn_remote_open(const char *url, int timeout_ms, int n_layer, int n_embd, lq_ffn_remote **out, lq_err *err)
{
    *out = NULL;
    lq_ffn_remote *r = calloc(1, sizeof *r);
    if (!r)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    r->n_layer = n_layer;
    r->n_embd = n_embd;
    int rc = lq_httpc_new(url, timeout_ms > 0 ? timeout_ms : 60000, &r->http, err);
    if (rc) {
        free(r);
        return rc;
    }
    /* the shape check LARQL's client makes at connect (hidden_size from /v1/stats), and the
     * layer count as well: a server of another model must not answer this one's layers */
    lq_httpc_resp resp;
    rc = lq_httpc_request(r->http, "GET", "/v1/stats", NULL, "application/json", NULL, 0, STATS_MAX, &resp, err);
    if (rc) {
        lq_err_prefix(err, "remote FFN");
        lq_ffn_remote_close(r);
        return rc;
    }
    json_t *j = resp.status == 200 ? json_loadb(resp.body, resp.len, 0, NULL) : NULL;
    json_t *hs = json_object_get(j, "hidden_size"), *ly = json_object_get(j, "layers");
    if (resp.status != 200)
        rc = server_error(r, &resp, -1, err);
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
    if (rc) {
        lq_ffn_remote_close(r);
        return rc;
    }
    *out = r;
    return LQ_OK;
}

int lq_ffn_remote_layer(lq_ffn_remote *r, int layer, const float *x, int T, int D, float *out, lq_err *err)
{
    size_t n = (size_t)T * (size_t)D, blen = 16 + 4 * n;
    unsigned char *b = malloc(blen);
    if (!b)
        return lq_err_set(err, LQ_ENOMEM, "out of memory for a remote FFN request");
    put32(b, (uint32_t)layer);
    put32(b + 4, (uint32_t)T);
    put32(b + 8, 1);    /* full_output */
    put32(b + 12, 8092); /* top_k: LARQL's clients' value, unused with full_output */
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        put32(b + 16 + 4 * i, u);
    }
    lq_httpc_resp resp;
    size_t want = 12 + 4 * n; /* an error's JSON may be longer: room for it below */
    int rc = lq_httpc_request(r->http, "POST", "/v1/walk-ffn", FFN_CT, FFN_CT, b, blen, want + 4096, &resp, err);
    free(b);
    if (rc) { /* down, silent past the deadline, or cut: say which call it was */
        lq_err_prefix(err, "remote FFN, layer %d", layer);
        return rc;
    }
    size_t cl = strlen(FFN_CT);
    const char *ct = resp.ctype;
    const unsigned char *p = (const unsigned char *)resp.body;
    if (resp.status != 200)
        rc = server_error(r, &resp, layer, err);
    else if (strncasecmp(ct, FFN_CT, cl) || (ct[cl] && ct[cl] != ';' && ct[cl] != ' '))
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: layer %d: answer of type '%s', expected %s",
                        lq_httpc_url(r->http), layer, ct, FFN_CT);
    else if (resp.len != want)
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: layer %d: answer of %zu bytes, expected %zu (%d x %d f32)",
                        lq_httpc_url(r->http), layer, resp.len, want, T, D);
    else if (get32(p) != (uint32_t)layer || get32(p + 4) != (uint32_t)T)
        rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: answered layer %u with %u rows for layer %d with %d",
                        lq_httpc_url(r->http), get32(p), get32(p + 4), layer, T);
    else
        for (size_t i = 0; i < n; i++) {
            uint32_t u = get32(p + 12 + 4 * i);
            memcpy(&out[i], &u, 4);
            if (!isfinite(out[i])) {
                rc = lq_err_set(err, LQ_EFORMAT, "remote FFN %s: layer %d: output value %zu is not finite",
                                lq_httpc_url(r->http), layer, i);
                break;
            }
        }
    lq_httpc_resp_free(&resp);
    return rc;
}

const char *lq_ffn_remote_url(const lq_ffn_remote *r) { return r ? lq_httpc_url(r->http) : NULL; }

void lq_ffn_remote_close(lq_ffn_remote *r)
{
    if (!r)
        return;
    lq_httpc_free(r->http);
    free(r);
}
