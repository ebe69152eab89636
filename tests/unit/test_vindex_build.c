/* The fast down_meta path (int8 x ternary VNNI candidates + exact f32 re-scoring) against the
 * all-f32 reference scan: the same top tokens and logits for every feature, on an F16- and an
 * F32-embedding fixture. Skips when the kernel set in use has no int8 down_meta GEMM (both
 * runs take the reference path then). The kernels themselves are compared with their scalar
 * references in test_kernels_vindex.c. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/vindex.h"

static void compare_paths(int emb_type, const char *tag)
{
    if (!lq_kernels_best()->dm_block)
        SKIP("the %s kernel set has no int8 down_meta GEMM: both builds take the f32 scan",
             lq_kernels_best()->name);
    char g[4400], a[4400], b[4400];
    snprintf(g, sizeof g, "%s/%s.gguf", harness_tmpdir(), tag);
    snprintf(a, sizeof a, "%s/%s-fast", harness_tmpdir(), tag);
    snprintf(b, sizeof b, "%s/%s-exact", harness_tmpdir(), tag);
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "demo", &err);
    o.emb_type = emb_type;
    o.seed = 1234;
    o.layers = 2;
    if (lq_fixture_write(&o, g, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.n_threads = 2;
    bo.extracted_at = "2026-01-01T00:00:00Z";
    CHECK(lq_vindex_build(g, a, &bo, &err) == 0);
    bo.dm_exact = 1;
    CHECK(lq_vindex_build(g, b, &bo, &err) == 0);
    lq_vindex *va = NULL, *vb = NULL;
    if (lq_vindex_open(a, NULL, &va, &err) || lq_vindex_open(b, NULL, &vb, &err)) {
        CHECK_MSG(0, "open: %s", err.msg);
        lq_vindex_close(va);
        return;
    }
    const lq_vindex_info *in = lq_vindex_get_info(va);
    int same_ids = 0, total = 0;
    double worst = 0;
    for (int l = 0; l < in->num_layers; l++)
        for (int f = 0; f < in->intermediate_size; f++) {
            lq_feature_meta ma, mb;
            int ha = lq_vindex_feature_meta(va, l, f, &ma), hb = lq_vindex_feature_meta(vb, l, f, &mb);
            total++;
            if (ha != hb || ma.n_top != mb.n_top)
                continue;
            int eq = 1;
            for (int k = 0; k < ma.n_top; k++) {
                eq &= ma.top_ids[k] == mb.top_ids[k];
                double d = fabs((double)ma.top_logits[k] - mb.top_logits[k]);
                if (d > worst)
                    worst = d;
            }
            same_ids += eq;
        }
    printf("# %s: %d/%d features with identical top-%d ids, max |dlogit| %.3g\n", tag, same_ids, total,
           in->down_top_k, worst);
    /* the f32 sums run in another order: near-ties may swap neighbours, nothing else */
    CHECK(same_ids >= total - total / 100);
    CHECK(worst < 1e-3);
    lq_vindex_close(va);
    lq_vindex_close(vb);
}

static void test_f16(void) { compare_paths(LQ_GGML_F16, "f16emb"); }
static void test_f32(void) { compare_paths(LQ_GGML_F32, "f32emb"); }

/* prefilter: exact on BitNet (unit-trit) gates; on real-valued (llama) gates the edges are
 * re-scored exactly, so every returned score is exact and most top edges survive */
static void prefilter_case(const char *arch, int f16, double min_recall)
{
    char g[4400], d[4400];
    snprintf(g, sizeof g, "%s/pf-%s.gguf", harness_tmpdir(), arch);
    snprintf(d, sizeof d, "%s/pf-%s-%d", harness_tmpdir(), arch, f16);
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "demo", &err);
    o.arch = arch;
    o.layers = 2;
    o.seed = 77;
    FILE *f = fopen(g, "rb");
    if (f)
        fclose(f);
    else if (lq_fixture_write(&o, g, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.n_threads = 2;
    bo.f16 = f16;
    if (lq_vindex_build(g, d, &bo, &err)) {
        CHECK_MSG(0, "build: %s", err.msg);
        return;
    }
    lq_vindex *ve = NULL, *vp = NULL;
    lq_vindex_open_opts oe = {.n_threads = 2}, op = {.n_threads = 2, .prefilter = 1};
    if (lq_vindex_open(d, &oe, &ve, &err) || lq_vindex_open(d, &op, &vp, &err)) {
        CHECK_MSG(0, "open: %s", err.msg);
        lq_vindex_close(ve);
        return;
    }
    const lq_vindex_info *in = lq_vindex_get_info(ve);
    int D = in->hidden_size, L = in->num_layers, nq = 24;
    size_t K = 10;
    float *Q = malloc((size_t)nq * D * sizeof *Q);
    for (int q = 0; q < nq; q++) /* entity-like queries: embedding rows */
        lq_vindex_embed_row(ve, 3 + 17 * q, Q + (size_t)q * D, &err);
    int layers[2] = {0, 1};
    lq_vindex_hit *he = malloc((size_t)nq * L * K * sizeof *he), *hp = malloc((size_t)nq * L * K * sizeof *hp);
    size_t *ce = malloc((size_t)nq * L * sizeof *ce), *cp = malloc((size_t)nq * L * sizeof *cp);
    CHECK(lq_vindex_gate_knn_batch(ve, layers, 2, Q, (size_t)nq, K, he, ce, &err) == 0);
    CHECK(lq_vindex_gate_knn_batch(vp, layers, 2, Q, (size_t)nq, K, hp, cp, &err) == 0);
    int found = 0, total = 0, score_bad = 0;
    for (int i = 0; i < nq * L; i++)
        for (size_t a = 0; a < ce[i]; a++) {
            total++;
            for (size_t b = 0; b < cp[i]; b++)
                if (hp[i * K + b].feature == he[i * K + a].feature) {
                    found++;
                    score_bad += hp[i * K + b].score != he[i * K + a].score;
                }
        }
    double recall = total ? (double)found / total : 1;
    printf("# prefilter %s %s: recall %.4f of %d top edges, %d scores differ\n", arch, f16 ? "f16" : "f32",
           recall, total, score_bad);
    CHECK(recall >= min_recall);
    CHECK_EQ_INT(score_bad, 0); /* re-scored edges carry the exact score */
    /* single queries through describe give the same edges on ternary gates */
    if (min_recall >= 1.0) {
        lq_describe_params p;
        lq_describe_params_init(&p);
        p.entity = "the";
        p.band = "all";
        p.min_score = -1e9;
        char *ja = NULL, *jb = NULL;
        CHECK(lq_vindex_describe_json(ve, &p, &ja, &err) == 0 && lq_vindex_describe_json(vp, &p, &jb, &err) == 0);
        if (ja && jb) /* latency_ms aside */
            CHECK(!strncmp(ja, jb, (size_t)(strstr(ja, "latency_ms") - ja)));
        free(ja);
        free(jb);
    }
    free(Q);
    free(he);
    free(hp);
    free(ce);
    free(cp);
    lq_vindex_close(ve);
    lq_vindex_close(vp);
}

static void test_prefilter_bitnet(void)
{
    prefilter_case("bitnet-b1.58", 1, 1.0);
    prefilter_case("bitnet-b1.58", 0, 1.0);
}

static void test_prefilter_llama(void) { prefilter_case("llama", 1, 0.98); }

/* per-thread scan modes give the same hits, also from threads running at once */
typedef struct tjob {
    lq_vindex *v;
    const float *q;
    int mode;
    lq_vindex_hit hits[2 * 8];
    size_t cnt[2];
    int rc;
} tjob;

static void *tworker(void *arg)
{
    tjob *j = arg;
    int layers[2] = {0, 1};
    j->rc = lq_vindex_set_thread_scan(j->mode, NULL);
    for (int rep = 0; rep < 20 && !j->rc; rep++)
        j->rc = lq_vindex_gate_knn_batch(j->v, layers, 2, j->q, 1, 8, j->hits, j->cnt, NULL);
    lq_vindex_thread_release();
    return NULL;
}

static void test_thread_scan(void)
{
    char g[4400], d[4400];
    snprintf(g, sizeof g, "%s/pf-bitnet-b1.58.gguf", harness_tmpdir());
    snprintf(d, sizeof d, "%s/pf-bitnet-b1.58-1", harness_tmpdir());
    lq_vindex *v = NULL;
    lq_err err = {0};
    lq_vindex_open_opts oo = {.n_threads = 2};
    if (lq_vindex_open(d, &oo, &v, &err))
        SKIP("prefilter fixture missing: %s", err.msg);
    int D = lq_vindex_get_info(v)->hidden_size;
    float *q = malloc((size_t)D * sizeof *q);
    lq_vindex_embed_row(v, 42, q, &err);
    CHECK(lq_vindex_set_thread_scan(-1, &err) == LQ_EINVAL);
    tjob jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (tjob){.v = v, .q = q, .mode = i % 3}; /* shared pool, inline, private pool of 2 */
        jobs[i].mode = jobs[i].mode == 2 ? 2 : jobs[i].mode;
        pthread_create(&th[i], NULL, tworker, &jobs[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(jobs[i].rc, 0);
        CHECK(jobs[i].cnt[0] == 8 && jobs[i].cnt[1] == 8);
        CHECK(!memcmp(jobs[i].hits, jobs[0].hits, sizeof jobs[0].hits));
    }
    free(q);
    lq_vindex_close(v);
}

int main(void)
{
    RUN(test_f16);
    RUN(test_f32);
    RUN(test_prefilter_bitnet);
    RUN(test_prefilter_llama);
    RUN(test_thread_scan);
    return harness_done();
}
