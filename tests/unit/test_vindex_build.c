/* The fast down_meta path (int8 x ternary VNNI candidates + exact f32 re-scoring) against the
 * all-f32 reference scan: the same top tokens and logits for every feature, on an F16- and an
 * F32-embedding fixture. Skips when the CPU has no AVX-512 VNNI (both runs take the
 * reference path then). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/f16.h"
#include "harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/vindex.h"
#include "vindex/vindex_internal.h"

static void compare_paths(int emb_type, const char *tag)
{
    const lq_cpu_features *cf = lq_cpu_features_get();
    if (!(cf && cf->avx512f && cf->avx512bw && cf->avx512vnni && cf->avx2 && cf->fma && cf->f16c))
        SKIP("no AVX-512 VNNI: the fast down_meta path is not used on this CPU");
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

/* sketch building and scoring: AVX-512 == scalar to the bit (codes, scores), on unit-trit and
 * real-valued rows, f16 and f32, hidden sizes that are and are not multiples of 256; the
 * scores approximate the exact dot products (exactly the trits for unit-trit rows, up to
 * the int8 query rounding) */
static void test_sketch_kernels(void)
{
    const lq_cpu_features *cf = lq_cpu_features_get();
    int avx512 = cf && cf->avx512f && cf->avx512bw && cf->avx512vl;
    static const size_t dims[] = {208, 256, 300, 2560};
    uint32_t x = 12345;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int f16 = 0; f16 < 2; f16++)
            for (int trit = 0; trit < 2; trit++) {
                size_t d = dims[di], dp = lq_vx_sketch_dp(d), N = 9, nq = 6;
                float *rows = malloc(N * d * 4), *Q = malloc(nq * d * 4);
                uint16_t *rows16 = malloc(N * d * 2);
                uint8_t *ca = malloc(N * dp / 4), *cb = malloc(N * dp / 4);
                float sa[9], sb[9], *oa = malloc(nq * N * 4), *ob = malloc(nq * N * 4), *ex = malloc(nq * N * 4);
                int8_t *q8 = malloc(nq * dp);
                float qs[6];
                int32_t qsum[6];
                for (size_t i = 0; i < N * d; i++) {
                    x = x * 1103515245u + 12345u;
                    float v = trit ? (float)((int)(x >> 16) % 3 - 1) : ((float)(x >> 8) / 16777216.0f - 0.5f);
                    rows16[i] = lq_vx_f32_to_f16_trunc(v);
                    rows[i] = f16 ? lq_f16_to_f32(rows16[i]) : v;
                }
                for (size_t i = 0; i < nq * d; i++) {
                    x = x * 1103515245u + 12345u;
                    Q[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
                }
                int ina = 0, inb = 0;
                for (size_t r = 0; r < N; r++) {
                    const void *row = f16 ? (const void *)(rows16 + r * d) : (const void *)(rows + r * d);
                    lq_vx_sketch_row_scalar(row, f16, d, ca + r * dp / 4, &sa[r], &ina);
                    if (avx512)
                        lq_vx_sketch_row_avx512(row, f16, d, cb + r * dp / 4, &sb[r], &inb);
                }
                CHECK_EQ_INT(ina, !trit);
                lq_vx_quantise_queries(Q, nq, d, q8, qs, qsum);
                lq_vx_sketch_scores_scalar(ca, sa, dp, 0, N, q8, qs, qsum, nq, oa, N);
                for (size_t q = 0; q < nq; q++)
                    for (size_t r = 0; r < N; r++) {
                        double e = 0;
                        for (size_t i = 0; i < d; i++)
                            e += (double)rows[r * d + i] * Q[q * d + i];
                        ex[q * N + r] = (float)e;
                    }
                if (trit) { /* exact trits: only the query rounding (<= 0.5 qs per component) */
                    double worst = 0;
                    for (size_t i = 0; i < nq * N; i++)
                        worst = fmax(worst, fabs((double)oa[i] - ex[i]) / (qs[i / N] * (double)d));
                    CHECK_MSG(worst <= 0.5, "d=%zu f16=%d: sketch score off by %g qs*d", d, f16, worst);
                    for (size_t r = 0; r < N; r++)
                        CHECK(sa[r] == 1.0f);
                }
                if (avx512) {
                    CHECK_EQ_INT(inb, ina);
                    CHECK_MSG(!memcmp(ca, cb, N * dp / 4), "d=%zu f16=%d trit=%d: codes differ", d, f16, trit);
                    for (size_t r = 0; r < N; r++)
                        CHECK_NEAR(sa[r], sb[r], 1e-5 * fabs(sa[r]));
                    for (int k = 0; k < 2; k++) {
                        memset(ob, 0, nq * N * 4);
                        (k && cf->avx512vnni ? lq_vx_sketch_scores_avx512 : lq_vx_sketch_scores_avx512bw)(
                            ca, sa, dp, 0, N, q8, qs, qsum, nq, ob, N);
                        CHECK_MSG(!memcmp(oa, ob, nq * N * 4), "d=%zu f16=%d trit=%d kernel %d: scores differ", d,
                                  f16, trit, k);
                    }
                }
                free(rows), free(Q), free(rows16), free(ca), free(cb), free(oa), free(ob), free(ex), free(q8);
            }
}

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
    RUN(test_sketch_kernels);
    RUN(test_thread_scan);
    return harness_done();
}
