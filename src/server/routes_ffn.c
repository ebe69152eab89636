/* POST /v1/walk-ffn: LARQL's remote-FFN service (larql-server routes/walk_ffn). Its Q8K
 * variant, POST /v1/walk-ffn-q8k, needs a Q4_K vindex's interleaved FFN data, which ternary
 * models have not: LARQL answers 404 without it, and so does our router (no row). A client runs attention itself and sends each layer's normed FFN input;
 * this answers the layer's FFN output (full_output) or the gate KNN features of the residual
 * (features-only, the default). `larql serve --ffn-only` serves this and refuses inference;
 * `--layers A-B` restricts it to a shard of layers. Bodies are LARQL's JSON or its binary
 * wire (application/x-larql-ffn, little-endian):
 *
 *   single request:  u32 layer (!= 0xFFFFFFFF), u32 seq_len, u32 flags (bit 0 full_output,
 *                    must be 1), u32 top_k, f32 residual[seq_len * hidden]
 *   batch request:   u32 0xFFFFFFFF, u32 n, u32 layers[n], u32 seq_len, u32 flags, u32 top_k,
 *                    f32 residual[...]
 *   single response: u32 layer, u32 seq_len, f32 latency_ms, f32 output[seq_len * hidden]
 *   batch response:  u32 0xFFFFFFFF, u32 n, f32 latency_ms, then per layer: u32 layer,
 *                    u32 seq_len, u32 count, f32 output[count]
 *
 * Every error is 400 {"error": ...} as LARQL's handler answers (it parses the body itself,
 * so a JSON body of the wrong shape is 400 here, not the extractor's 422); a body over
 * --max-body is our usual 413. The body is untrusted: every count is checked against the
 * bytes present before anything is allocated from it. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/le.h"
#include "larql/vindex.h"
#include "server/internal.h"
#include "core/round.h"

#define FFN_CT "application/x-larql-ffn"
#define BATCH_MARKER 0xFFFFFFFFu
#define FFN_DEFAULT_TOP_K 8092      /* LARQL's default */
#define FFN_MAX_OUT (256u << 20)    /* bytes of binary output one request may ask for */
#define FFN_MAX_JSON_OUT (2u << 20) /* numbers of JSON output (each a jansson value, ~50 bytes) */
#define FFN_MAX_TOP_K 65536
#define FFN_MAX_LAYERS 1024         /* layers one request may name (repeats allowed, as LARQL) */

typedef struct ffn_req {
    int *layers;    /* malloc'd */
    size_t n_layers;
    int batch;      /* asked with "layers" / the batch marker: answer in the batch shape */
    float *x;       /* malloc'd, [n_x] */
    size_t n_x;
    uint64_t seq_len;
    uint64_t top_k;
    int full_output, moe_layer;
} ffn_req;

static int type_is(const char *v, const char *mt)
{
    size_t n = strlen(mt);
    return !strncasecmp(v, mt, n) && (v[n] == 0 || v[n] == ';' || v[n] == ' ');
}

/* LARQL's binary type, or plain octets as our other binary routes take them (embed, logits) */
static int is_binary(req *q)
{
    const char *v = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!v)
        return 0;
    v += strspn(v, " \t");
    return type_is(v, FFN_CT) || type_is(v, "application/octet-stream");
}

/* LARQL's binary request (binary.rs decode_binary_request). -1 with r filled. */
static int parse_binary(req *q, ffn_req *f, reply *r)
{
    const unsigned char *b = (const unsigned char *)q->body;
    size_t len = q->len, head;
    if (len < 16) {
        reply_larql_err(r, 400, "binary: body too short (need >= 16 bytes, got %zu)", len);
        return -1;
    }
    uint32_t first = lq_le32(b);
    if (first == BATCH_MARKER) {
        uint32_t n = lq_le32(b + 4);
        /* n is checked against the bytes present before the layer list is allocated */
        if (n > (len - 8) / 4) {
            reply_larql_err(r, 400, "binary batch: body too short for %u layer indices", n);
            return -1;
        }
        head = 8 + 4 * (size_t)n;
        f->batch = 1;
        f->n_layers = n;
        f->layers = malloc((n ? n : 1) * sizeof *f->layers);
        if (!f->layers) {
            reply_larql_err(r, 500, "out of memory");
            return -1;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t l = lq_le32(b + 8 + 4 * (size_t)i);
            f->layers[i] = l > INT32_MAX ? INT32_MAX : (int)l; /* out of range below */
        }
    } else {
        head = 4;
        f->n_layers = 1;
        f->layers = malloc(sizeof *f->layers);
        if (!f->layers) {
            reply_larql_err(r, 500, "out of memory");
            return -1;
        }
        f->layers[0] = first > INT32_MAX ? INT32_MAX : (int)first;
    }
    if (len - head < 12) {
        reply_larql_err(r, 400, "binary: truncated fixed header (seq_len/flags/top_k)");
        return -1;
    }
    f->seq_len = lq_le32(b + head);
    f->full_output = lq_le32(b + head + 4) & 1;
    f->top_k = lq_le32(b + head + 8);
    size_t rb = len - head - 12;
    if (rb % 4) {
        reply_larql_err(r, 400, "binary: residual byte length %zu is not a multiple of 4", rb);
        return -1;
    }
    if (!f->full_output) {
        reply_larql_err(r, 400, "binary wire format requires full_output = true");
        return -1;
    }
    f->n_x = rb / 4;
    f->x = malloc((f->n_x ? f->n_x : 1) * sizeof *f->x);
    if (!f->x) {
        reply_larql_err(r, 500, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < f->n_x; i++) {
        uint32_t u = lq_le32(b + head + 12 + 4 * i);
        memcpy(&f->x[i], &u, 4);
        if (!isfinite(f->x[i])) {
            reply_larql_err(r, 400, "binary: residual[%zu] is not a finite number", i);
            return -1;
        }
    }
    return 0;
}

/* A JSON unsigned integer field (absent/null: keep *out). -1 with r filled. */
static int json_uint(json_t *j, const char *k, uint64_t *out, reply *r)
{
    json_t *v = json_object_get(j, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        reply_larql_err(r, 400, "invalid JSON: '%s' must be a non-negative integer", k);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int json_flag(json_t *j, const char *k, int *out, reply *r)
{
    json_t *v = json_object_get(j, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        reply_larql_err(r, 400, "invalid JSON: '%s' must be a boolean", k);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* LARQL's WalkFfnRequest: {layer?, layers?, residual, seq_len=1, top_k=8092, full_output=false,
 * moe_layer=false}. -1 with r filled. */
static int parse_json(req *q, ffn_req *f, reply *r)
{
    if (!q->len) {
        reply_larql_err(r, 400, "invalid JSON: the body is empty");
        return -1;
    }
    json_error_t je;
    json_t *j = json_loadb(q->body, q->len, 0, &je);
    if (!j) {
        reply_larql_err(r, 400, "invalid JSON: %s at line %d column %d", je.text, je.line, je.column);
        return -1;
    }
    int rc = -1;
    uint64_t layer = 0;
    json_t *res = json_object_get(j, "residual"), *ls = json_object_get(j, "layers"),
           *l1 = json_object_get(j, "layer");
    if (!json_is_object(j)) {
        reply_larql_err(r, 400, "invalid JSON: expected an object");
        goto out;
    }
    if (!json_is_array(res)) {
        reply_larql_err(r, 400, "invalid JSON: %s", res ? "'residual' must be an array of numbers"
                                                        : "missing field 'residual'");
        goto out;
    }
    if (json_uint(j, "seq_len", &f->seq_len, r) || json_uint(j, "top_k", &f->top_k, r) ||
        json_uint(j, "layer", &layer, r) || json_flag(j, "full_output", &f->full_output, r) ||
        json_flag(j, "moe_layer", &f->moe_layer, r))
        goto out;
    if (ls && !json_is_null(ls)) {
        if (!json_is_array(ls)) {
            reply_larql_err(r, 400, "invalid JSON: 'layers' must be an array of layer numbers");
            goto out;
        }
        f->batch = 1;
        f->n_layers = json_array_size(ls);
        f->layers = malloc((f->n_layers ? f->n_layers : 1) * sizeof *f->layers);
        if (!f->layers) {
            reply_larql_err(r, 500, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < f->n_layers; i++) {
            json_t *v = json_array_get(ls, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0) {
                reply_larql_err(r, 400, "invalid JSON: 'layers'[%zu] must be a non-negative integer", i);
                goto out;
            }
            json_int_t l = json_integer_value(v);
            f->layers[i] = l > INT32_MAX ? INT32_MAX : (int)l;
        }
    } else if (l1 && !json_is_null(l1)) {
        f->n_layers = 1;
        f->layers = malloc(sizeof *f->layers);
        if (!f->layers) {
            reply_larql_err(r, 500, "out of memory");
            goto out;
        }
        f->layers[0] = layer > INT32_MAX ? INT32_MAX : (int)layer;
    }
    f->n_x = json_array_size(res);
    f->x = malloc((f->n_x ? f->n_x : 1) * sizeof *f->x);
    if (!f->x) {
        reply_larql_err(r, 500, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < f->n_x; i++) {
        json_t *v = json_array_get(res, i);
        if (!json_is_number(v) || !isfinite(json_number_value(v))) {
            reply_larql_err(r, 400, "invalid JSON: 'residual'[%zu] must be a finite number", i);
            goto out;
        }
        f->x[i] = (float)json_number_value(v);
    }
    rc = 0;
out:
    json_decref(j);
    return rc;
}

/* Features-only mode: the gate KNN of the residual at each layer, scores rounded to 2
 * decimals (dispatch.rs run_features_only), over the vindex's own gates (LARQL reads its
 * patched view; inserted features are not scanned here). A server without a vindex (a GGUF)
 * has no gate index: no features, as LARQL answers for a dense-only vindex. */
static json_t *features_json(lq_server *s, const ffn_req *f, reply *r)
{
    json_t *results = json_array();
    size_t k = f->top_k > FFN_MAX_TOP_K ? FFN_MAX_TOP_K : (size_t)f->top_k;
    lq_vindex_hit *hits = malloc((k ? k : 1) * sizeof *hits);
    if (!hits || !results) {
        free(hits);
        json_decref(results);
        reply_larql_err(r, 500, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < f->n_layers; i++) {
        size_t nh = 0;
        lq_err err = {0};
        if (s->vx && k && lq_vindex_gate_knn(s->vx, f->layers[i], f->x, k, hits, &nh, &err)) {
            free(hits);
            json_decref(results);
            reply_larql_err(r, status_from_lq(err.code), "%s", err.msg);
            return NULL;
        }
        json_t *fe = json_array(), *sc = json_array();
        for (size_t h = 0; h < nh; h++) {
            json_array_append_new(fe, json_integer(hits[h].feature));
            json_array_append_new(sc, json_real(lq_round_dp(hits[h].score, 2)));
        }
        json_array_append_new(results, json_pack("{s:i,s:o,s:o}", "layer", f->layers[i], "features", fe, "scores", sc));
    }
    free(hits);
    return results;
}

void route_walk_ffn(lq_server *s, req *q, reply *r)
{
    double t0 = lq_now();
    ffn_req f = {.seq_len = 1, .top_k = FFN_DEFAULT_TOP_K};
    float *out = NULL;
    unsigned char *bin = NULL;
    int binary = is_binary(q);
    if (binary ? parse_binary(q, &f, r) : parse_json(q, &f, r))
        goto done;
    lq_model *m;
    if (need_model(s, q->rt, r, &m, 0))
        goto done;
    const lq_model_info *mi = lq_model_get_info(m);
    size_t hidden = (size_t)mi->n_embd, rows = f.full_output ? (size_t)f.seq_len : 1, want;
    /* validate.rs order: residual length, then the layers asked, then the shard */
    if (__builtin_mul_overflow(rows, hidden, &want)) {
        reply_larql_err(r, 400, "seq_len * hidden overflow");
        goto done;
    }
    if (f.n_x != want) {
        reply_larql_err(r, 400, "residual has %zu elements, expected %zu (seq_len=%zu * hidden_size=%zu)", f.n_x,
                        want, rows, hidden);
        goto done;
    }
    if (f.full_output && f.seq_len == 0) {
        reply_larql_err(r, 400, "seq_len must be >= 1");
        goto done;
    }
    if (!f.layers) {
        reply_larql_err(r, 400, "must provide 'layer' or 'layers'");
        goto done;
    }
    /* what a request may make the server compute and hold is bounded by more than the body:
     * a 64 MiB body can name millions of layers */
    if (f.n_layers > FFN_MAX_LAYERS) {
        reply_larql_err(r, 400, "%zu layers in one request; at most %d", f.n_layers, FFN_MAX_LAYERS);
        goto done;
    }
    for (size_t i = 0; i < f.n_layers; i++) {
        int l = f.layers[i];
        if (s->o.layers_set && (l < s->o.layer_first || l > s->o.layer_last)) {
            reply_larql_err(r, 400, "layer %d not served by this shard (owned: %d\xe2\x80\x93%d)", l,
                            s->o.layer_first, s->o.layer_last);
            goto done;
        }
        if (l >= mi->n_layer) {
            reply_larql_err(r, 400, "layer %d out of range (num_layers = %d)", l, mi->n_layer);
            goto done;
        }
    }
    if (f.moe_layer) {
        reply_larql_err(r, 400, f.full_output ? "moe_layer=true but server has no --moe-shards configured"
                                              : "moe_layer=true requires full_output=true");
        goto done;
    }
    if (!f.full_output) {
        uint64_t k = f.top_k > FFN_MAX_TOP_K ? FFN_MAX_TOP_K : f.top_k;
        if (k * f.n_layers > FFN_MAX_JSON_OUT) {
            reply_larql_err(r, 400, "top_k %llu x %zu layers is over the %u features a request may ask for",
                            (unsigned long long)k, f.n_layers, FFN_MAX_JSON_OUT);
            goto done;
        }
        json_t *res = features_json(s, &f, r);
        if (!res)
            goto done;
        double ms = lq_round_dp((lq_now() - t0) * 1000.0, 1);
        if (f.n_layers == 1 && !f.batch) {
            json_t *one = json_incref(json_array_get(res, 0));
            json_decref(res);
            json_object_set_new(one, "latency_ms", json_real(ms));
            reply_json(r, 200, one);
        } else {
            reply_json(r, 200, json_pack("{s:o,s:f}", "results", res, "latency_ms", ms));
        }
        goto done;
    }
    /* the output is n_layers x seq_len x hidden floats: bounded before it is allocated */
    size_t n_out;
    if (__builtin_mul_overflow(want, f.n_layers, &n_out) || n_out > (binary ? FFN_MAX_OUT / 4 : FFN_MAX_JSON_OUT)) {
        reply_larql_err(r, 400, "%zu layers x %zu floats of output is over the %u %s a request may ask for%s",
                        f.n_layers, want, binary ? FFN_MAX_OUT >> 20 : FFN_MAX_JSON_OUT, binary ? "MiB" : "numbers",
                        binary ? "" : " as JSON (the binary form takes more)");
        goto done;
    }
    out = malloc((n_out ? n_out : 1) * sizeof *out);
    if (!out) {
        reply_larql_err(r, 500, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < f.n_layers; i++) {
        lq_err err = {0};
        int rc = lq_model_ffn(m, f.layers[i], f.x, (size_t)f.seq_len, out + i * want, &err);
        if (rc) {
            reply_larql_err(r, status_from_lq(rc), "%s", err.msg);
            goto done;
        }
    }
    double ms = (lq_now() - t0) * 1000.0;
    int one = f.n_layers == 1 && !f.batch;
    if (binary) {
        /* LARQL answers f32 whatever the Accept (its f16/i8 encodings are lossy; ours is not) */
        size_t blen = one ? 12 + 4 * want : 12 + f.n_layers * (12 + 4 * want);
        bin = malloc(blen);
        if (!bin) {
            reply_larql_err(r, 500, "out of memory");
            goto done;
        }
        unsigned char *p = bin;
        if (!one) {
            lq_put_le32(p, BATCH_MARKER);
            lq_put_le32(p + 4, (uint32_t)f.n_layers);
            lq_put_le_f32(p + 8, (float)ms);
            p += 12;
        }
        for (size_t i = 0; i < f.n_layers; i++) {
            lq_put_le32(p, (uint32_t)f.layers[i]);
            lq_put_le32(p + 4, (uint32_t)f.seq_len);
            if (one) {
                lq_put_le_f32(p + 8, (float)ms);
            } else {
                lq_put_le32(p + 8, (uint32_t)want);
            }
            p += 12;
            for (size_t k = 0; k < want; k++, p += 4)
                lq_put_le_f32(p, out[i * want + k]);
        }
        r->status = 200;
        r->body = (char *)bin;
        r->len = blen;
        r->ctype = FFN_CT;
        bin = NULL;
        goto done;
    }
    json_t *results = json_array();
    for (size_t i = 0; i < f.n_layers; i++) {
        json_t *o = json_array();
        for (size_t k = 0; k < want; k++)
            json_array_append_new(o, json_real(out[i * want + k]));
        json_array_append_new(results, json_pack("{s:i,s:o,s:I}", "layer", f.layers[i], "output", o, "seq_len",
                                                 (json_int_t)f.seq_len));
    }
    if (one) {
        json_t *e = json_incref(json_array_get(results, 0));
        json_decref(results);
        json_object_set_new(e, "latency_ms", json_real(lq_round_dp(ms, 1)));
        reply_json(r, 200, e);
    } else {
        reply_json(r, 200, json_pack("{s:o,s:I,s:f}", "results", results, "seq_len", (json_int_t)f.seq_len,
                                     "latency_ms", lq_round_dp(ms, 1)));
    }
done:
    free(bin);
    free(out);
    free(f.layers);
    free(f.x);
}
