/* Vindex: sha256 vectors, JSON number format, gate KNN (SIMD vs scalar, top-K semantics),
 * build from a generated BitNet GGUF with planted facts (f32 and f16), round trip, and the
 * queries finding exactly the planted edges. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/vindex.h"
#include "vindex/vindex_internal.h"

static void test_sha256_vectors(void)
{
    char hex[65];
    lq_sha256_hex("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    lq_sha256_hex("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    lq_sha256_hex(m, strlen(m), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    /* one million 'a' fed in odd-sized pieces (exercises the partial-block path) */
    lq_sha256 s;
    lq_sha256_init(&s);
    char buf[997];
    memset(buf, 'a', sizeof buf);
    size_t left = 1000000;
    while (left) {
        size_t k = left < sizeof buf ? left : sizeof buf;
        lq_sha256_update(&s, buf, k);
        left -= k;
    }
    uint8_t d[32];
    lq_sha256_final(&s, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

static void num(double v, int f32, const char *want)
{
    lq_sb b = {0};
    if (f32)
        lq_sb_f32(&b, (float)v);
    else
        lq_sb_f64(&b, v);
    CHECK_MSG(b.s && !strcmp(b.s, want), "%g -> %s, want %s", v, b.s ? b.s : "(null)", want);
    free(b.s);
}

static void test_number_format(void)
{
    num(5.0, 1, "5.0");
    num(12.3, 1, "12.3");
    num(-0.5, 0, "-0.5");
    num(1e-5, 0, "0.00001");
    num(1e-7, 0, "1e-7");
    num(1e16, 0, "1e16");
    num(123456.0, 0, "123456.0");
    num(500000.0, 0, "500000.0");
    num(0.1 + 0.2, 0, "0.30000000000000004");
    num(0.0, 0, "0.0");
    num(3.25e20, 0, "3.25e20");
    lq_sb b = {0};
    lq_sb_json_str(&b, "a\"b\\c\n\x01", 7);
    CHECK(b.s && !strcmp(b.s, "\"a\\\"b\\\\c\\n\\u0001\""));
    free(b.s);
}

static uint64_t rs = 88172645463325252ull;
static float frand(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_topk(void)
{
    float s[8] = {1.0f, -5.0f, 3.0f, 5.0f, -0.5f, 2.0f, NAN, -3.0f};
    lq_vindex_hit h[8];
    size_t n = lq_vx_topk(s, 8, 4, 2, h);
    CHECK_EQ_INT(n, 4);
    /* |5| twice: lower feature first (1 then 3); then |3| twice: 2 then 7 */
    CHECK_EQ_INT(h[0].feature, 1);
    CHECK(h[0].score == -5.0f);
    CHECK_EQ_INT(h[1].feature, 3);
    CHECK_EQ_INT(h[2].feature, 2);
    CHECK_EQ_INT(h[3].feature, 7);
    CHECK_EQ_INT(h[0].layer, 2);
    CHECK_EQ_INT(lq_vx_topk(s, 8, 0, 0, h), 0);
    CHECK_EQ_INT(lq_vx_topk(s, 8, 100, 0, h), 7); /* NaN skipped */
}

static void test_token_classes(void)
{
    CHECK(lq_vx_is_content("Paris"));
    CHECK(!lq_vx_is_content("the"));
    CHECK(!lq_vx_is_content("ab"));
    CHECK(!lq_vx_is_content("fooBar"));
    CHECK(lq_vx_is_readable(" x "));
    CHECK(!lq_vx_is_readable("@@@@"));
    lq_vindex_band b[3];
    CHECK(lq_vx_family_bands("generic", 30, b));
    CHECK(b[0].end == 11 && b[1].start == 12 && b[1].end == 23 && b[2].start == 24 && b[2].end == 29);
    CHECK(lq_vx_family_bands("llama", 32, b) && b[1].start == 13 && b[1].end == 25);
    CHECK(!lq_vx_family_bands("generic", 4, b));
    int bi;
    CHECK(lq_vindex_parse_band("nope", &bi, NULL) == LQ_EINVAL);
}

/* ---- fixture with planted facts ---- */

static const char corpus[] =
    "The capital of France is Paris . The capital of Germany is Berlin . The capital of Japan is Tokyo . "
    "France Paris France Paris France Paris Germany Berlin Germany Berlin Germany Berlin "
    "Japan Tokyo Japan Tokyo Japan Tokyo Italy Rome Italy Rome Italy Rome "
    "the model reads the text and the model knows the capital . ";

static char gguf[4200], dir32[4200], dir16[4200];
static int fixture_ok;

static void make_fixture(void)
{
    const char *tmp = harness_tmpdir();
    snprintf(gguf, sizeof gguf, "%s/planted.gguf", tmp);
    snprintf(dir32, sizeof dir32, "%s/v32", tmp);
    snprintf(dir16, sizeof dir16, "%s/v16", tmp);
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK(lq_fixture_preset(&o, "demo", &err) == 0);
    o.corpus = corpus;
    o.layers = 4;
    o.seed = 99;
    if (lq_fixture_write(&o, gguf, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_fact facts[] = {
        {" France", "Paris", 1, 17},
        {" Germany", "Berlin", 2, 100},
        {" Japan", "Tokyo", 3, 5},
        {"The capital of Italy", "Rome", 2, 300},
    };
    if (lq_fixture_plant(gguf, facts, 4, &err)) {
        CHECK_MSG(0, "plant: %s", err.msg);
        return;
    }
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.extracted_at = "2026-01-01T00:00:00Z";
    bo.n_threads = 2;
    if (lq_vindex_build(gguf, dir32, &bo, &err)) {
        CHECK_MSG(0, "build f32: %s", err.msg);
        return;
    }
    bo.f16 = 1;
    if (lq_vindex_build(gguf, dir16, &bo, &err)) {
        CHECK_MSG(0, "build f16: %s", err.msg);
        return;
    }
    fixture_ok = 1;
}

static void test_plant_errors(void)
{
    lq_err err = {0};
    char buf[64] = "France>Paris@1:17";
    lq_fact f;
    CHECK(lq_fact_parse(buf, &f, &err) == 0 && !strcmp(f.entity, "France") && !strcmp(f.target, "Paris") &&
          f.layer == 1 && f.feature == 17);
    char bad[] = "France-Paris";
    CHECK(lq_fact_parse(bad, &f, &err) == LQ_EINVAL);
    char bad2[] = "A>B@x:1";
    CHECK(lq_fact_parse(bad2, &f, &err) == LQ_EINVAL);
    if (!fixture_ok)
        SKIP("fixture failed");
    lq_fact lf = {" France", "Paris", 99, 0};
    CHECK(lq_fixture_plant(gguf, &lf, 1, &err) == LQ_ERANGE);
    lq_fact ff = {" France", "Paris", 0, 100000};
    CHECK(lq_fixture_plant(gguf, &ff, 1, &err) == LQ_ERANGE);
    lq_fact tf = {" France", "Parisxyzzy", 0, 1};
    CHECK(lq_fixture_plant(gguf, &tf, 1, &err) == LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "single token");
}

static int read_all(const char *path, char **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)sz + 1);
    *n = fread(*out, 1, (size_t)sz, f);
    (*out)[*n] = 0;
    fclose(f);
    return 0;
}

static int files_equal(const char *a, const char *b)
{
    char *x, *y;
    size_t nx, ny;
    if (read_all(a, &x, &nx))
        return 0;
    if (read_all(b, &y, &ny)) {
        free(x);
        return 0;
    }
    int eq = nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return eq;
}

static void test_open_and_round_trip(void)
{
    if (!fixture_ok)
        SKIP("fixture failed");
    const char *dirs[2] = {dir32, dir16};
    for (int k = 0; k < 2; k++) {
        lq_vindex *v = NULL;
        lq_err err = {0};
        lq_vindex_open_opts oo = {.n_threads = 2, .verify_checksums = 1};
        if (lq_vindex_open(dirs[k], &oo, &v, &err)) {
            CHECK_MSG(0, "open %s: %s", dirs[k], err.msg);
            continue;
        }
        const lq_vindex_info *in = lq_vindex_get_info(v);
        CHECK_EQ_INT(in->num_layers, 4);
        CHECK_EQ_INT(in->hidden_size, 256);
        CHECK_EQ_INT(in->intermediate_size, 512);
        CHECK_EQ_INT(in->vocab_size, 512);
        CHECK_EQ_INT(in->dtype, k ? LQ_VDT_F16 : LQ_VDT_F32);
        CHECK_EQ_INT(in->n_loaded_layers, 4);
        CHECK_EQ_INT(in->down_top_k, 10);
        CHECK(!in->dense_only);
        /* the planted gate row is a unit trit pattern */
        const void *rows;
        int nf;
        CHECK(lq_vindex_gate_layer(v, 1, &rows, &nf, &err) == 0 && nf == 512);
        CHECK(lq_vindex_gate_layer(v, 4, &rows, &nf, &err) == LQ_ERANGE);
        char out[4400];
        snprintf(out, sizeof out, "%s/rt%d", harness_tmpdir(), k);
        CHECK(lq_vindex_rewrite(v, out, &err) == 0);
        static const char *files[] = {"index.json", "gate_vectors.bin", "embeddings.bin", "down_meta.bin",
                                      "tokenizer.json"};
        for (size_t i = 0; i < 5; i++) {
            char a[4500], b[4500];
            snprintf(a, sizeof a, "%s/%s", dirs[k], files[i]);
            snprintf(b, sizeof b, "%s/%s", out, files[i]);
            CHECK_MSG(files_equal(a, b), "%s differs after rewrite", files[i]);
        }
        lq_vindex_close(v);
        /* the rewritten copy opens and rewrites byte-identically again */
        lq_vindex *v2 = NULL;
        CHECK(lq_vindex_open(out, &oo, &v2, &err) == 0);
        lq_vindex_close(v2);
    }
}

/* gate KNN through the handle: batch == single, SIMD == scalar */
static void test_knn_handle(void)
{
    if (!fixture_ok)
        SKIP("fixture failed");
    lq_vindex *v = NULL;
    lq_err err = {0};
    lq_vindex_open_opts oo = {.n_threads = 2};
    CHECK(lq_vindex_open(dir16, &oo, &v, &err) == 0);
    if (!v)
        return;
    int D = 256, nq = 5;
    float *Q = malloc((size_t)nq * D * 4);
    for (int i = 0; i < nq * D; i++)
        Q[i] = frand();
    float *a = malloc((size_t)nq * 512 * 4), *b = malloc((size_t)nq * 512 * 4);
    CHECK(lq_vindex_gate_scores(v, 2, Q, (size_t)nq, a, 1, &err) == 0);
    CHECK(lq_vindex_gate_scores(v, 2, Q, (size_t)nq, b, 0, &err) == 0);
    double me = 0;
    for (int i = 0; i < nq * 512; i++)
        me = fmax(me, fabs((double)a[i] - b[i]));
    CHECK(me < 1e-3);
    int layers[4] = {0, 1, 2, 3};
    lq_vindex_hit *hb = malloc(sizeof *hb * (size_t)nq * 4 * 10);
    size_t cnt[20];
    CHECK(lq_vindex_gate_knn_batch(v, layers, 4, Q, (size_t)nq, 10, hb, cnt, &err) == 0);
    for (int q = 0; q < nq; q++)
        for (int l = 0; l < 4; l++) {
            lq_vindex_hit h1[10];
            size_t n1;
            CHECK(lq_vindex_gate_knn(v, l, Q + (size_t)q * D, 10, h1, &n1, &err) == 0);
            CHECK(n1 == cnt[q * 4 + l]);
            for (size_t i = 0; i < n1; i++)
                CHECK(h1[i].feature == hb[(q * 4 + l) * 10 + i].feature);
        }
    int badl = 7;
    CHECK(lq_vindex_gate_knn_batch(v, &badl, 1, Q, 1, 10, hb, cnt, &err) == LQ_ERANGE);
    free(Q), free(a), free(b), free(hb);
    lq_vindex_close(v);
}

static void test_planted_queries(void)
{
    if (!fixture_ok)
        SKIP("fixture failed");
    const char *dirs[2] = {dir32, dir16};
    for (int k = 0; k < 2; k++) {
        lq_vindex *v = NULL;
        lq_err err = {0};
        if (lq_vindex_open(dirs[k], NULL, &v, &err)) {
            CHECK_MSG(0, "open: %s", err.msg);
            continue;
        }
        /* describe over all layers: exactly the planted edge */
        lq_describe_params dp;
        lq_describe_params_init(&dp);
        dp.band = "all";
        dp.entity = " France";
        lq_describe_result r;
        CHECK(lq_vindex_describe(v, &dp, &r, &err) == 0);
        CHECK_EQ_INT(r.n_edges, 1);
        if (r.n_edges) {
            CHECK(!strcmp(r.edges[0].target, "Paris"));
            CHECK_EQ_INT(r.edges[0].layer, 1);
            CHECK_EQ_INT(r.edges[0].feature, 17);
            CHECK(r.edges[0].gate_score > 5.0f);
        }
        lq_describe_result_free(&r);
        dp.entity = "The capital of Italy";
        CHECK(lq_vindex_describe(v, &dp, &r, &err) == 0);
        CHECK_EQ_INT(r.n_edges, 1);
        if (r.n_edges)
            CHECK(!strcmp(r.edges[0].target, "Rome") && r.edges[0].layer == 2 && r.edges[0].feature == 300);
        lq_describe_result_free(&r);
        /* walk: last token of the prompt is " Germany" */
        lq_walk_params wp;
        lq_walk_params_init(&wp);
        wp.prompt = "The capital of Germany";
        wp.top = 3;
        lq_walk_result w;
        CHECK(lq_vindex_walk(v, &wp, &w, &err) == 0);
        int found = 0;
        for (size_t i = 0; i < w.n_hits; i++)
            if (w.hits[i].layer == 2 && w.hits[i].feature == 100) {
                found = 1;
                CHECK(!strcmp(w.hits[i].target, "Berlin"));
                CHECK(i == 0 || w.hits[i - 1].layer < 2); /* first (strongest) hit of layer 2 */
            }
        CHECK(found);
        CHECK(w.n_hits <= 12);
        lq_walk_result_free(&w);
        /* select by entity substring finds the planted down column's token */
        lq_select_params sp;
        lq_select_params_init(&sp);
        sp.entity = "tokyo";
        lq_select_result s;
        CHECK(lq_vindex_select(v, &sp, &s, &err) == 0);
        int sfound = 0;
        for (size_t i = 0; i < s.n_edges; i++)
            sfound |= s.edges[i].layer == 3 && s.edges[i].feature == 5;
        CHECK(sfound);
        for (size_t i = 1; i < s.n_edges; i++)
            CHECK(s.edges[i - 1].c_score >= s.edges[i].c_score);
        lq_select_result_free(&s);
        /* nearest at the planted layer: top hit is the planted feature */
        lq_nearest_params np;
        lq_nearest_params_init(&np);
        np.entity = " Japan";
        np.layer = 3;
        np.top = 3;
        char *js = NULL;
        CHECK(lq_vindex_nearest_json(v, &np, &js, &err) == 0);
        CHECK_STR_CONTAINS(js, "\"hits\":[{\"feature\":5,\"token\":\"Tokyo\"");
        free(js);
        /* JSON describe */
        dp.entity = " Japan";
        dp.verbose = 1;
        CHECK(lq_vindex_describe_json(v, &dp, &js, &err) == 0);
        CHECK_STR_CONTAINS(js, "\"edges\":[{\"target\":\"Tokyo\",\"gate_score\":");
        CHECK_STR_CONTAINS(js, "\"layer\":3,\"layer_min\":3,\"layer_max\":3,\"count\":1");
        free(js);
        /* bad input */
        dp.entity = "";
        CHECK(lq_vindex_describe(v, &dp, &r, &err) == LQ_EINVAL);
        dp.entity = "France";
        dp.band = "middle";
        CHECK(lq_vindex_describe(v, &dp, &r, &err) == LQ_EINVAL);
        CHECK_STR_CONTAINS(err.msg, "unknown band");
        dp.band = "all";
        dp.limit = -1;
        CHECK(lq_vindex_describe(v, &dp, &r, &err) == LQ_EINVAL);
        wp.prompt = "";
        CHECK(lq_vindex_walk(v, &wp, &w, &err) == LQ_EINVAL);
        np.layer = 9;
        CHECK(lq_vindex_nearest_json(v, &np, &js, &err) == LQ_ERANGE);
        double sim = 0;
        CHECK(lq_vindex_similar(v, " France", " France", &sim, &err) == 0 && sim > 5.0);
        CHECK(lq_vindex_stats_json(v, &js, &err) == 0);
        CHECK_STR_CONTAINS(js, "\"layers\":4,\"features\":2048");
        free(js);
        CHECK(lq_vindex_relations_json(v, &js, &err) == 0);
        free(js);
        CHECK(lq_vindex_show_layers_json(v, &js, &err) == 0);
        free(js);
        lq_vindex_close(v);
    }
}

/* describe_many over several entities (one pass) equals describe per entity, field by
 * field; empty and NULL entities get no edges; min_score and limit apply as in describe. */
static void test_describe_many(void)
{
    if (!fixture_ok)
        SKIP("fixture failed");
    const char *dirs[2] = {dir32, dir16};
    const char *ents[] = {" France", "The capital of Italy", NULL, "", " Germany", " Japan", "model", " France"};
    const size_t n = sizeof ents / sizeof ents[0];
    for (int k = 0; k < 2; k++) {
        lq_vindex *v = NULL;
        lq_err err = {0};
        if (lq_vindex_open(dirs[k], NULL, &v, &err)) {
            CHECK_MSG(0, "open: %s", err.msg);
            continue;
        }
        for (int variant = 0; variant < 3; variant++) {
            lq_describe_params dp;
            lq_describe_params_init(&dp);
            dp.band = variant == 2 ? "knowledge" : "all";
            dp.min_score = variant == 1 ? -100.0 : 5.0;
            dp.limit = variant == 1 ? 7 : 20;
            lq_describe_result many[8];
            CHECK(lq_vindex_describe_many(v, &dp, ents, n, many, &err) == 0);
            size_t total = 0;
            for (size_t i = 0; i < n; i++) {
                total += many[i].n_edges;
                if (!ents[i] || !*ents[i]) {
                    CHECK_EQ_INT(many[i].n_edges, 0);
                    continue;
                }
                lq_describe_result one;
                dp.entity = ents[i];
                CHECK(lq_vindex_describe(v, &dp, &one, &err) == 0);
                dp.entity = NULL;
                CHECK_EQ_INT(many[i].n_edges, one.n_edges);
                CHECK_EQ_INT(many[i].n_tokens, one.n_tokens);
                for (size_t e = 0; e < one.n_edges && e < many[i].n_edges; e++) {
                    const lq_describe_edge *a = &many[i].edges[e], *b = &one.edges[e];
                    CHECK_MSG(!strcmp(a->target, b->target) && a->gate_score == b->gate_score && a->layer == b->layer &&
                                  a->feature == b->feature && a->count == b->count && a->n_also == b->n_also,
                              "entity %zu edge %zu differs", i, e);
                }
                lq_describe_result_free(&one);
            }
            CHECK(total > 0);
            for (size_t i = 0; i < n; i++)
                lq_describe_result_free(&many[i]);
        }
        lq_describe_params dp;
        lq_describe_params_init(&dp);
        dp.limit = -1;
        lq_describe_result bad[1];
        CHECK(lq_vindex_describe_many(v, &dp, ents, 1, bad, &err) == LQ_EINVAL);
        lq_describe_params_init(&dp);
        dp.band = "middle";
        CHECK(lq_vindex_describe_many(v, &dp, ents, 1, bad, &err) == LQ_EINVAL);
        lq_describe_params_init(&dp);
        CHECK(lq_vindex_describe_many(v, &dp, ents, 0, bad, &err) == 0);
        lq_vindex_close(v);
    }
}

static int cancel_after(void *ctx)
{
    int *left = ctx;
    return (*left)-- <= 0;
}

/* The thread's cancel hook stops a query whose scan runs on the calling thread, with
 * LQ_ECANCELED; without it (or never firing) the results are unchanged. */
static void test_cancel_hook(void)
{
    if (!fixture_ok)
        SKIP("fixture failed");
    lq_vindex *v = NULL;
    lq_err err = {0};
    if (lq_vindex_open(dir32, NULL, &v, &err)) {
        CHECK_MSG(0, "open: %s", err.msg);
        return;
    }
    CHECK(lq_vindex_set_thread_scan(1, &err) == 0);
    lq_describe_params dp;
    lq_describe_params_init(&dp);
    dp.band = "all";
    dp.entity = " France";
    lq_describe_result a, b;
    CHECK(lq_vindex_describe(v, &dp, &a, &err) == 0);
    int left = 0;
    lq_vindex_set_thread_cancel(cancel_after, &left);
    CHECK(lq_vindex_describe(v, &dp, &b, &err) == LQ_ECANCELED);
    CHECK_STR_CONTAINS(err.msg, "cancelled");
    CHECK_EQ_INT(b.n_edges, 0);
    left = 1000000;
    CHECK(lq_vindex_describe(v, &dp, &b, &err) == 0);
    CHECK(left < 1000000); /* asked at least once */
    CHECK(b.n_edges == a.n_edges && b.n_edges == 1 && b.edges[0].gate_score == a.edges[0].gate_score);
    lq_describe_result_free(&b);
    lq_walk_params wp;
    lq_walk_params_init(&wp);
    wp.prompt = "The capital of France";
    lq_walk_result w;
    left = 0;
    CHECK(lq_vindex_walk(v, &wp, &w, &err) == LQ_ECANCELED);
    lq_vindex_set_thread_cancel(NULL, NULL);
    CHECK(lq_vindex_walk(v, &wp, &w, &err) == 0 && w.n_hits > 0);
    lq_walk_result_free(&w);
    lq_describe_result_free(&a);
    lq_vindex_thread_release();
    lq_vindex_close(v);
}

static void test_checksum_mismatch_and_llama(void)
{
    if (!fixture_ok)
        SKIP("fixture failed");
    lq_err err = {0};
    char out[4400], path[4500];
    snprintf(out, sizeof out, "%s/ck", harness_tmpdir());
    lq_vindex *v = NULL;
    CHECK(lq_vindex_open(dir32, NULL, &v, &err) == 0);
    if (!v)
        return;
    CHECK(lq_vindex_rewrite(v, out, &err) == 0);
    lq_vindex_close(v);
    snprintf(path, sizeof path, "%s/gate_vectors.bin", out);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 100, SEEK_SET);
        fputc(0x7f, f);
        fclose(f);
    }
    lq_vindex_open_opts oo = {.verify_checksums = 1};
    CHECK(lq_vindex_open(out, &oo, &v, &err) == LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "sha256");
    /* a llama (f32 weights) GGUF converts too, with the llama band family */
    lq_fixture_opts o;
    lq_fixture_preset(&o, "tiny", &err);
    o.arch = "llama";
    o.layers = 8;
    char g[4400], d[4400];
    snprintf(g, sizeof g, "%s/llama.gguf", harness_tmpdir());
    snprintf(d, sizeof d, "%s/vllama", harness_tmpdir());
    CHECK(lq_fixture_write(&o, g, &err) == 0);
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.keep_quant = 1; /* ignored on llama, as LARQL does */
    bo.level = LQ_VLEVEL_INFERENCE;
    CHECK_MSG(lq_vindex_build(g, d, &bo, &err) == 0, "%s", err.msg);
    CHECK(bo.keep_quant_ignored == 1);
    CHECK(lq_vindex_open(d, NULL, &v, &err) == 0);
    if (v) {
        const lq_vindex_info *in = lq_vindex_get_info(v);
        CHECK(!strcmp(in->family, "llama") && in->has_bands && in->bands[1].start == 3 && in->bands[1].end == 5);
        CHECK(in->has_model_weights && !in->has_bitnet);
        lq_vindex_close(v);
    }
    /* output under a missing parent: error, nothing created */
    snprintf(d, sizeof d, "%s/no/such/dir", harness_tmpdir());
    CHECK(lq_vindex_build(g, d, &bo, &err) != 0);
    struct stat st;
    CHECK(stat(d, &st) != 0);
}

int main(void)
{
    RUN(test_sha256_vectors);
    RUN(test_number_format);
    RUN(test_topk);
    RUN(test_token_classes);
    make_fixture();
    RUN(test_plant_errors);
    RUN(test_open_and_round_trip);
    RUN(test_knn_handle);
    RUN(test_planted_queries);
    RUN(test_describe_many);
    RUN(test_cancel_hook);
    RUN(test_checksum_mismatch_and_llama);
    return harness_done();
}
