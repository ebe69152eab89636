/* The remote FFN (lq_model_opts.ffn_url): a model whose every layer's FFN runs on an
 * in-process `serve --ffn-only` over loopback gives bit for bit the local model's logits, in
 * prefill chunks (70 ids: 64 + 6), one-token decode and batched decode; lq_model_ffn is the
 * forward pass's FFN; a server of another shape is refused at open; a server that went away
 * is an error from the evaluation, not a crash; a shard answers only its layers. */
#include "harness.h"
#include "unit/tiny_gguf.h"

#include "larql/model.h"
#include "larql/server.h"

static char g_path[4200], g_other[4200], g_url[64];
static lq_server *g_srv;

static int start_one(int layers_set, int first, int last, lq_server **out, char *url, size_t cap)
{
    lq_server_opts o;
    lq_server_opts_init(&o);
    o.model_path = g_path;
    o.port = 0;
    o.ffn_only = 1;
    o.layers_set = layers_set;
    o.layer_first = first;
    o.layer_last = last;
    o.model.n_threads = 1;
    lq_err err = {0};
    if (lq_server_start(&o, out, &err)) {
        printf("#   server: %s\n", err.msg);
        return -1;
    }
    snprintf(url, cap, "http://127.0.0.1:%d", lq_server_port(*out));
    return 0;
}

static int start_server(int layers_set, int first, int last)
{
    lq_server_opts o;
    lq_server_opts_init(&o);
    o.model_path = g_path;
    o.port = 0;
    o.ffn_only = 1;
    o.layers_set = layers_set;
    o.layer_first = first;
    o.layer_last = last;
    o.max_body = 64u << 20;
    o.model.n_threads = 1;
    lq_err err = {0};
    if (lq_server_start(&o, &g_srv, &err)) {
        printf("#   server: %s\n", err.msg);
        return -1;
    }
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d", lq_server_port(g_srv));
    return 0;
}

static lq_model *open_model(const char *path, const char *ffn_url, lq_err *err)
{
    lq_model *m = NULL;
    lq_model_opts mo = {0};
    mo.n_threads = 2;
    mo.ffn_url = ffn_url;
    mo.ffn_timeout_ms = 5000;
    if (lq_model_open(path, &mo, &m, err) != 0)
        return NULL;
    return m;
}

/* every position's logits of a 70-id prompt, then 3 decode steps */
static int run(lq_model *m, const int32_t *ids, float *all, float *dec, lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    lq_session *s = NULL;
    int rc = lq_session_create(m, 128, &s, err);
    if (!rc)
        rc = lq_session_eval(s, ids, 70, NULL, all, err);
    for (int k = 0; !rc && k < 3; k++)
        rc = lq_session_decode(s, ids[k], dec + (size_t)k * mi->n_vocab, err);
    lq_session_free(s);
    return rc;
}

static void test_logits_identical(void)
{
    lq_err err = {0};
    lq_model *loc = open_model(g_path, NULL, &err), *rem = open_model(g_path, g_url, &err);
    CHECK_MSG(loc && rem, "%s", err.msg);
    if (!loc || !rem) {
        lq_model_close(loc);
        lq_model_close(rem);
        return;
    }
    CHECK(lq_model_get_info(rem)->ffn_url && !strcmp(lq_model_get_info(rem)->ffn_url, g_url));
    CHECK(lq_model_get_info(loc)->ffn_url == NULL);
    size_t V = (size_t)lq_model_get_info(loc)->n_vocab;
    int32_t ids[70];
    for (int i = 0; i < 70; i++)
        ids[i] = (i * 37 + 5) % (int)V;
    float *a = malloc(70 * V * sizeof *a), *b = malloc(70 * V * sizeof *b);
    float *da = malloc(3 * V * sizeof *da), *db = malloc(3 * V * sizeof *db);
    CHECK(run(loc, ids, a, da, &err) == 0);
    CHECK_MSG(run(rem, ids, b, db, &err) == 0, "%s", err.msg);
    CHECK_MSG(!memcmp(a, b, 70 * V * sizeof *a), "remote prefill logits differ from local");
    CHECK_MSG(!memcmp(da, db, 3 * V * sizeof *da), "remote decode logits differ from local");

    /* batched decode: two sessions in one pass */
    lq_session *s[2] = {NULL, NULL};
    CHECK(lq_session_create(rem, 64, &s[0], &err) == 0 && lq_session_create(rem, 64, &s[1], &err) == 0);
    int32_t two[2] = {ids[3], ids[9]};
    float *bo[2] = {b, b + V};
    CHECK_MSG(lq_session_decode_batch(s, two, 2, bo, &err) == 0, "%s", err.msg);
    lq_session *t = NULL;
    CHECK(lq_session_create(loc, 64, &t, &err) == 0);
    CHECK(lq_session_decode(t, ids[9], a, &err) == 0);
    CHECK_MSG(!memcmp(a, b + V, V * sizeof *a), "batched remote decode differs");
    lq_session_free(t);
    lq_session_free(s[0]);
    lq_session_free(s[1]);

    /* lq_model_ffn is the FFN the forward pass adds (the server side computed the above) */
    size_t D = (size_t)lq_model_get_info(loc)->n_embd;
    float *x = malloc(3 * D * sizeof *x), *y = malloc(3 * D * sizeof *y), *y1 = malloc(D * sizeof *y1);
    for (size_t i = 0; i < 3 * D; i++)
        x[i] = (float)((int)(i * 7919 % 23) - 11) * 0.1f;
    CHECK(lq_model_ffn(loc, 1, x, 3, y, &err) == 0);
    CHECK(lq_model_ffn(loc, 1, x + D, 1, y1, &err) == 0);
    /* one row alone or among three: the same activations quantised per row */
    CHECK(!memcmp(y + D, y1, D * sizeof *y1));
    CHECK(lq_model_ffn(loc, 2, x, 1, y, &err) == LQ_ERANGE);
    CHECK(lq_model_ffn(loc, -1, x, 1, y, &err) == LQ_ERANGE);
    free(x);
    free(y);
    free(y1);
    free(a);
    free(b);
    free(da);
    free(db);
    lq_model_close(loc);
    lq_model_close(rem);
}

static void test_wrong_shape(void)
{
    lq_err err = {0};
    lq_model *m = open_model(g_other, g_url, &err);
    CHECK(m == NULL && err.code == LQ_EINVAL);
    CHECK_MSG(strstr(err.msg, "hidden size"), "%s", err.msg);
    lq_model_close(m);
    /* not a URL we speak */
    m = open_model(g_path, "https://127.0.0.1:1", &err);
    CHECK(m == NULL && err.code == LQ_EINVAL);
    lq_model_close(m);
}

/* the server goes away between two evaluations: an LQ_EIO naming the layer's request */
static void test_server_down(void)
{
    lq_err err = {0};
    lq_model *m = open_model(g_path, g_url, &err);
    CHECK_MSG(m, "%s", err.msg);
    if (!m)
        return;
    lq_session *s = NULL;
    float *lg = malloc((size_t)lq_model_get_info(m)->n_vocab * sizeof *lg);
    CHECK(lq_session_create(m, 64, &s, &err) == 0);
    int32_t id = 7;
    CHECK(lq_session_decode(s, id, lg, &err) == 0);
    lq_server_stop(g_srv);
    g_srv = NULL;
    int pos = lq_session_pos(s);
    int rc = lq_session_decode(s, id, lg, &err);
    CHECK(rc == LQ_EIO);
    CHECK_MSG(strstr(err.msg, "remote FFN") || strstr(err.msg, "connect"), "%s", err.msg);
    CHECK(lq_session_pos(s) == pos); /* the failed step did not advance the session */
    lq_session_free(s);
    free(lg);
    lq_model_close(m);
    /* and opening against nobody fails at once */
    m = open_model(g_path, g_url, &err);
    CHECK(m == NULL && err.code == LQ_EIO);
    lq_model_close(m);
}

/* LARQL's shard map over two servers of one layer each gives the local logits; a map that
 * leaves a layer without a server, or that does not parse, is refused at open */
static void test_shard_map(void)
{
    lq_server *a = NULL, *b = NULL;
    char ua[64], ub[64], spec[200];
    if (start_one(1, 0, 0, &a, ua, sizeof ua) || start_one(1, 1, 1, &b, ub, sizeof ub)) {
        CHECK(0);
        lq_server_stop(a);
        return;
    }
    lq_err err = {0};
    snprintf(spec, sizeof spec, "0-0=%s, 1-1=%s", ua, ub);
    lq_model *loc = open_model(g_path, NULL, &err), *rem = open_model(g_path, spec, &err);
    CHECK_MSG(loc && rem, "%s", err.msg);
    if (loc && rem) {
        size_t V = (size_t)lq_model_get_info(loc)->n_vocab;
        int32_t ids[70];
        for (int i = 0; i < 70; i++)
            ids[i] = (i * 11 + 3) % (int)V;
        float *x = malloc(70 * V * sizeof *x), *y = malloc(70 * V * sizeof *y);
        float *dx = malloc(3 * V * sizeof *dx), *dy = malloc(3 * V * sizeof *dy);
        CHECK(run(loc, ids, x, dx, &err) == 0);
        CHECK_MSG(run(rem, ids, y, dy, &err) == 0, "%s", err.msg);
        CHECK_MSG(!memcmp(x, y, 70 * V * sizeof *x) && !memcmp(dx, dy, 3 * V * sizeof *dx),
                  "sharded remote logits differ from local");
        CHECK(!strcmp(lq_model_get_info(rem)->ffn_url, spec));
        free(x);
        free(y);
        free(dx);
        free(dy);
    }
    lq_model_close(loc);
    lq_model_close(rem);
    snprintf(spec, sizeof spec, "0-0=%s", ua);
    rem = open_model(g_path, spec, &err);
    CHECK(!rem && err.code == LQ_EINVAL);
    CHECK_MSG(strstr(err.msg, "serves layer 1"), "%s", err.msg);
    lq_model_close(rem);
    const char *bad[] = {"0-=http://x", "1-0=http://127.0.0.1:1", "a-b=http://x", "0-1", ",", "0-1=ftp://x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rem = open_model(g_path, bad[i], &err);
        CHECK_MSG(!rem && err.code == LQ_EINVAL, "'%s' accepted or %d: %s", bad[i], err.code, err.msg);
        lq_model_close(rem);
    }
    lq_server_stop(a);
    lq_server_stop(b);
}

/* --layers 0-0: layer 1 is refused with the shard's 400, which the client reports */
static void test_shard(void)
{
    if (start_server(1, 0, 0))
        return;
    lq_err err = {0};
    lq_model *m = open_model(g_path, g_url, &err);
    CHECK_MSG(m, "%s", err.msg);
    if (m) {
        lq_session *s = NULL;
        float *lg = malloc((size_t)lq_model_get_info(m)->n_vocab * sizeof *lg);
        CHECK(lq_session_create(m, 64, &s, &err) == 0);
        CHECK(lq_session_decode(s, 3, lg, &err) == LQ_EIO);
        CHECK_MSG(strstr(err.msg, "HTTP 400") && strstr(err.msg, "not served by this shard"), "%s", err.msg);
        lq_session_free(s);
        free(lg);
        lq_model_close(m);
    }
    lq_server_stop(g_srv);
    g_srv = NULL;
}

int main(void)
{
    tg_opts o = tg_default();
    snprintf(g_path, sizeof g_path, "%s/ffn.gguf", harness_tmpdir());
    snprintf(g_other, sizeof g_other, "%s/ffn_other.gguf", harness_tmpdir());
    lq_err err = {0};
    if (tg_write(&o, g_path, &err) != 0) {
        printf("#   tg_write: %s\n", err.msg);
        return 1;
    }
    o.dim = 256;
    o.ff = 512;
    if (tg_write(&o, g_other, &err) != 0) {
        printf("#   tg_write: %s\n", err.msg);
        return 1;
    }
    if (start_server(0, 0, 0))
        return 1;
    RUN(test_logits_identical);
    RUN(test_wrong_shape);
    RUN(test_server_down);
    RUN(test_shard);
    RUN(test_shard_map);
    lq_server_stop(g_srv);
    return harness_done();
}
