/* Sampler: greedy, temperature limit, top-k/top-p/min-p, seeded determinism, frequencies of a
 * known distribution (fixed seed, so it cannot flake), penalties, parameter validation. */
#include "harness.h"

#include <stdint.h>

#include "larql/sampler.h"

/* Deterministic pseudo-random logits for tests (LCG; independent of the sampler's RNG). */
static void fill_logits(float *l, int n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)((x >> 8) & 0xffff) / 65536.0f * 8.0f - 4.0f;
    }
}

static lq_sampler *make(const lq_sampler_params *p, int n)
{
    lq_sampler *s = NULL;
    lq_err err = {0};
    int rc = lq_sampler_create(p, n, &s, &err);
    CHECK_MSG(rc == LQ_OK, "create: %s", err.msg);
    return s;
}

static void base_params(lq_sampler_params *p, float temp, uint64_t seed)
{
    lq_sampler_defaults(p);
    p->temperature = temp;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->has_seed = 1;
    p->seed = seed;
}

static void test_defaults(void)
{
    lq_sampler_params p;
    lq_sampler_defaults(&p);
    CHECK_NEAR(p.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.95, 1e-7);
    CHECK_NEAR(p.min_p, 0.05, 1e-7);
    CHECK_NEAR(p.repeat_penalty, 1.0, 0);
    CHECK_NEAR(p.frequency_penalty, 0.0, 0);
    CHECK_NEAR(p.presence_penalty, 0.0, 0);
    CHECK_EQ_INT(p.has_seed, 0);
    CHECK_EQ_INT(lq_sampler_params_check(&p, NULL), LQ_OK);
}

static void test_greedy_argmax_ties_and_nan(void)
{
    lq_sampler_params p;
    base_params(&p, 0.0f, 1);
    lq_sampler *s = make(&p, 6);
    float l1[6] = {1, 3, 2, 3, -1, 0};
    CHECK_EQ_INT(lq_sampler_sample(s, l1), 1); /* tie 1 vs 3 -> lower id */
    float l2[6] = {NAN, -5, NAN, -4, NAN, -6};
    CHECK_EQ_INT(lq_sampler_sample(s, l2), 3); /* NaN never wins */
    float l3[6] = {-INFINITY, -INFINITY, 7, -INFINITY, 7, 1};
    CHECK_EQ_INT(lq_sampler_sample(s, l3), 2);
    p.temperature = -1.0f; /* rejected by check: temperature < 0 */
    CHECK_EQ_INT(lq_sampler_params_check(&p, NULL), LQ_EINVAL);
    lq_sampler_free(s);
}

static void test_greedy_large_vocab(void)
{
    enum { N = 128256 };
    float *l = malloc(N * sizeof *l);
    fill_logits(l, N, 7);
    l[99999] = 10.0f;
    lq_sampler_params p;
    base_params(&p, 0.0f, 1);
    lq_sampler *s = make(&p, N);
    CHECK_EQ_INT(lq_sampler_sample(s, l), 99999);
    lq_sampler_free(s);
    free(l);
}

static void test_temperature_to_zero_is_greedy(void)
{
    enum { N = 500 };
    float l[N], c[N];
    lq_sampler_params p;
    base_params(&p, 1e-4f, 42);
    lq_sampler *s = make(&p, N);
    for (int t = 0; t < 50; t++) {
        fill_logits(l, N, (uint32_t)t);
        l[(t * 37) % N] = 5.0f; /* margin >= 1 over the rest: e^(-1/1e-4) = 0 */
        memcpy(c, l, sizeof l);
        CHECK_EQ_INT(lq_sampler_sample(s, c), (t * 37) % N);
    }
    lq_sampler_free(s);
}

static void test_top_k_1_is_greedy(void)
{
    enum { N = 1000 };
    float l[N], c[N];
    lq_sampler_params p;
    base_params(&p, 1.5f, 3);
    p.top_k = 1;
    lq_sampler *s = make(&p, N);
    lq_sampler_params g;
    base_params(&g, 0.0f, 3);
    lq_sampler *gs = make(&g, N);
    for (int t = 0; t < 100; t++) {
        fill_logits(l, N, (uint32_t)t + 100);
        memcpy(c, l, sizeof l);
        int32_t a = lq_sampler_sample(s, c);
        memcpy(c, l, sizeof l);
        CHECK_EQ_INT(a, lq_sampler_sample(gs, c));
    }
    lq_sampler_free(s);
    lq_sampler_free(gs);
}

static void run_seq(uint64_t seed, const lq_sampler_params *tmpl, int32_t *out, int steps)
{
    enum { N = 2000 };
    static float l[N];
    lq_sampler_params p = *tmpl;
    p.has_seed = 1;
    p.seed = seed;
    lq_sampler *s = make(&p, N);
    for (int t = 0; t < steps; t++) {
        fill_logits(l, N, (uint32_t)t);
        out[t] = lq_sampler_sample(s, l);
        lq_sampler_accept(s, out[t]);
    }
    lq_sampler_free(s);
}

static void test_seed_determinism(void)
{
    enum { STEPS = 200 };
    int32_t a[STEPS], b[STEPS], c[STEPS];
    lq_sampler_params cfgs[3];
    lq_sampler_defaults(&cfgs[0]);        /* top-k path */
    base_params(&cfgs[1], 1.0f, 0);       /* untruncated path */
    base_params(&cfgs[2], 1.0f, 0);       /* threshold top-p path */
    cfgs[2].top_p = 0.9f;
    cfgs[2].frequency_penalty = 0.5f;
    for (int k = 0; k < 3; k++) {
        run_seq(1234, &cfgs[k], a, STEPS);
        run_seq(1234, &cfgs[k], b, STEPS);
        run_seq(1235, &cfgs[k], c, STEPS);
        CHECK(memcmp(a, b, sizeof a) == 0);
        int differ = 0;
        for (int i = 0; i < STEPS; i++)
            differ += a[i] != c[i];
        CHECK_MSG(differ > 0, "config %d: seeds 1234 and 1235 gave identical sequences", k);
    }
}

static void test_reset_restarts_sequence(void)
{
    enum { N = 300, STEPS = 30 };
    float l[N];
    int32_t a[STEPS], b[STEPS];
    lq_sampler_params p;
    base_params(&p, 1.0f, 99);
    p.presence_penalty = 1.0f;
    lq_sampler *s = make(&p, N);
    for (int r = 0; r < 2; r++) {
        int32_t *o = r ? b : a;
        for (int t = 0; t < STEPS; t++) {
            fill_logits(l, N, (uint32_t)t);
            o[t] = lq_sampler_sample(s, l);
            lq_sampler_accept(s, o[t]);
        }
        lq_sampler_reset(s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    lq_sampler_free(s);
}

static void test_top_p_tiny_is_argmax(void)
{
    enum { N = 5000 };
    static float l[N], c[N];
    lq_sampler_params p;
    base_params(&p, 1.0f, 5);
    p.top_p = 1e-6f;
    lq_sampler *s = make(&p, N);
    for (int t = 0; t < 50; t++) {
        fill_logits(l, N, (uint32_t)t + 7);
        int32_t want = 0;
        for (int i = 1; i < N; i++)
            if (l[i] > l[want])
                want = i;
        memcpy(c, l, sizeof l);
        CHECK_EQ_INT(lq_sampler_sample(s, c), want);
    }
    lq_sampler_free(s);
}

/* Draw many times from logits = log(probs) and compare frequencies. */
static void freq_check(const lq_sampler_params *p, const float *logits, int n,
                       const double *want, int draws, double tol)
{
    lq_sampler *s = make(p, n);
    int counts[16] = {0};
    float c[16];
    for (int d = 0; d < draws; d++) {
        memcpy(c, logits, (size_t)n * sizeof *c);
        int32_t id = lq_sampler_sample(s, c);
        CHECK(id >= 0 && id < n);
        if (id >= 0 && id < n)
            counts[id]++;
    }
    for (int i = 0; i < n; i++)
        CHECK_NEAR((double)counts[i] / draws, want[i], tol);
    lq_sampler_free(s);
}

static void test_distribution_three_tokens(void)
{
    const float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    const double want[3] = {0.5, 0.3, 0.2};
    lq_sampler_params p;
    base_params(&p, 1.0f, 2024);
    freq_check(&p, l, 3, want, 100000, 0.01); /* untruncated path */
    p.top_k = 2;
    const double want_k2[3] = {0.625, 0.375, 0.0};
    freq_check(&p, l, 3, want_k2, 100000, 0.01);
    p.top_k = 0;
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.8: keeps the first two */
    freq_check(&p, l, 3, want_k2, 100000, 0.01);
    p.top_p = 1.0f;
    p.min_p = 0.5f; /* 0.2 < 0.5 * 0.5: drops the third */
    freq_check(&p, l, 3, want_k2, 100000, 0.01);
    p.min_p = 0.0f;
    p.temperature = 2.0f; /* p^(1/2) normalised */
    double z = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
    const double want_t2[3] = {sqrt(0.5) / z, sqrt(0.3) / z, sqrt(0.2) / z};
    freq_check(&p, l, 3, want_t2, 100000, 0.01);
}

/* The threshold path (no top-k) must keep exactly the brute-force top-p / min-p set. */
static void test_top_p_min_p_match_brute_force(void)
{
    enum { N = 4000 };
    static float l[N], c[N];
    static int order[N];
    fill_logits(l, N, 77);
    for (int i = 0; i < N; i++)
        l[i] *= 1.5f;
    /* brute force: full sort, probabilities at T = 1 */
    for (int i = 0; i < N; i++)
        order[i] = i;
    for (int i = 1; i < N; i++) { /* insertion sort, best first, ties lower id */
        int v = order[i], j = i - 1;
        while (j >= 0 && (l[order[j]] < l[v] || (l[order[j]] == l[v] && order[j] > v))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    double z = 0;
    for (int i = 0; i < N; i++)
        z += exp((double)l[i] - l[order[0]]);
    const float tops[3] = {0.5f, 0.9f, 0.999f};
    const float minps[3] = {0.0f, 0.02f, 0.3f};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            int keep = N;
            double cum = 0;
            for (int i = 0; i < N; i++) {
                cum += exp((double)l[order[i]] - l[order[0]]);
                if (cum >= tops[a] * z) {
                    keep = i + 1;
                    break;
                }
            }
            int kmin = 1;
            while (kmin < keep && exp((double)l[order[kmin]] - l[order[0]]) >= minps[b])
                kmin++;
            keep = kmin;
            static char allowed[N];
            memset(allowed, 0, sizeof allowed);
            for (int i = 0; i < keep; i++)
                allowed[order[i]] = 1;
            lq_sampler_params p;
            base_params(&p, 1.0f, 11);
            p.top_p = tops[a];
            p.min_p = minps[b];
            lq_sampler *s = make(&p, N);
            int bad = 0, hit_last = 0;
            for (int d = 0; d < 3000; d++) {
                memcpy(c, l, sizeof l);
                int32_t id = lq_sampler_sample(s, c);
                if (id < 0 || id >= N || !allowed[id])
                    bad++;
                else if (id == order[keep - 1])
                    hit_last = 1;
            }
            CHECK_MSG(bad == 0, "top_p %g min_p %g: %d draws outside the kept set of %d",
                      (double)tops[a], (double)minps[b], bad, keep);
            if (keep <= 50)
                CHECK_MSG(hit_last, "top_p %g min_p %g: last kept token never drawn",
                          (double)tops[a], (double)minps[b]);
            lq_sampler_free(s);
        }
}

static void test_min_p_filters(void)
{
    /* probs 0.6, 0.25, 0.1, 0.05 : min_p 0.2 -> threshold 0.12 keeps ids 0 and 1 */
    const float l[4] = {logf(0.6f), logf(0.25f), logf(0.1f), logf(0.05f)};
    const double want[4] = {0.6 / 0.85, 0.25 / 0.85, 0, 0};
    lq_sampler_params p;
    base_params(&p, 1.0f, 8);
    p.min_p = 0.2f;
    freq_check(&p, l, 4, want, 50000, 0.01);
    p.top_k = 3; /* the top-k path applies min-p too */
    freq_check(&p, l, 4, want, 50000, 0.01);
    p.min_p = 1.0f; /* only the best */
    const double only0[4] = {1, 0, 0, 0};
    freq_check(&p, l, 4, only0, 1000, 0.0);
}

static void test_penalties(void)
{
    lq_sampler_params p;
    base_params(&p, 0.0f, 1);
    /* repeat penalty: positive logits divided, negative multiplied */
    p.repeat_penalty = 1.1f;
    lq_sampler *s = make(&p, 4);
    float l[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l), 0);
    lq_sampler_accept(s, 0);
    lq_sampler_accept(s, 3);
    float l2[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l2), 1);
    CHECK_NEAR(l2[0], 2.0 / 1.1, 1e-6); /* logits are modified in place */
    CHECK_NEAR(l2[3], -1.1, 1e-6);
    CHECK_NEAR(l2[1], 1.9f, 0);
    lq_sampler_free(s);

    /* repeat_last_n window: only the last token is penalised */
    p.repeat_last_n = 1;
    s = make(&p, 4);
    lq_sampler_accept(s, 0);
    lq_sampler_accept(s, 2);
    float l3[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l3), 0);
    CHECK_NEAR(l3[0], 2.0, 0);
    lq_sampler_free(s);

    /* frequency: 2 occurrences * 0.1 = 0.2 > 0.1 margin */
    base_params(&p, 0.0f, 1);
    p.frequency_penalty = 0.1f;
    s = make(&p, 4);
    lq_sampler_accept(s, 0);
    float l4[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l4), 0); /* 2 - 0.1 = 1.9, tie -> lower id 0 */
    lq_sampler_accept(s, 0);
    float l5[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l5), 1);
    CHECK_NEAR(l5[0], 1.8, 1e-6);
    lq_sampler_reset(s); /* history cleared */
    float l6[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l6), 0);
    CHECK_NEAR(l6[0], 2.0, 0);
    lq_sampler_free(s);

    /* presence: once, independent of count; negative presence favours repeats */
    base_params(&p, 0.0f, 1);
    p.presence_penalty = 0.5f;
    s = make(&p, 4);
    lq_sampler_accept(s, 0);
    float l7[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l7), 1);
    CHECK_NEAR(l7[0], 1.5, 1e-6);
    lq_sampler_free(s);
    p.presence_penalty = -1.0f;
    s = make(&p, 4);
    lq_sampler_accept(s, 2);
    float l8[4] = {2.0f, 1.9f, 1.5f, -1.0f};
    CHECK_EQ_INT(lq_sampler_sample(s, l8), 2);
    lq_sampler_free(s);
}

static void check_bad(lq_sampler_params p, const char *field)
{
    lq_err err = {0};
    CHECK_EQ_INT(lq_sampler_params_check(&p, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, field);
    lq_sampler *s = (lq_sampler *)1;
    CHECK_EQ_INT(lq_sampler_create(&p, 10, &s, &err), LQ_EINVAL);
    CHECK(s == NULL);
}

static void test_invalid_params(void)
{
    lq_sampler_params d, p;
    lq_sampler_defaults(&d);
    p = d; p.temperature = -0.1f; check_bad(p, "temperature");
    p = d; p.temperature = 100.5f; check_bad(p, "temperature");
    p = d; p.temperature = NAN; check_bad(p, "temperature");
    p = d; p.top_k = -1; check_bad(p, "top_k");
    p = d; p.top_p = 0.0f; check_bad(p, "top_p");
    p = d; p.top_p = 1.01f; check_bad(p, "top_p");
    p = d; p.top_p = NAN; check_bad(p, "top_p");
    p = d; p.min_p = -0.01f; check_bad(p, "min_p");
    p = d; p.min_p = 1.5f; check_bad(p, "min_p");
    p = d; p.min_p = NAN; check_bad(p, "min_p");
    p = d; p.repeat_penalty = 0.0f; check_bad(p, "repeat_penalty");
    p = d; p.repeat_penalty = NAN; check_bad(p, "repeat_penalty");
    p = d; p.repeat_penalty = INFINITY; check_bad(p, "repeat_penalty");
    p = d; p.repeat_last_n = -2; check_bad(p, "repeat_last_n");
    p = d; p.frequency_penalty = 2.5f; check_bad(p, "frequency_penalty");
    p = d; p.frequency_penalty = NAN; check_bad(p, "frequency_penalty");
    p = d; p.presence_penalty = -2.01f; check_bad(p, "presence_penalty");
    p = d; p.presence_penalty = NAN; check_bad(p, "presence_penalty");
    /* boundaries are accepted */
    p = d; p.temperature = 0; p.top_p = 1; p.min_p = 1; p.frequency_penalty = -2;
    p.presence_penalty = 2; p.temperature = 100;
    CHECK_EQ_INT(lq_sampler_params_check(&p, NULL), LQ_OK);
    lq_err err = {0};
    lq_sampler *s = NULL;
    CHECK_EQ_INT(lq_sampler_create(&d, 0, &s, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "n_vocab");
}

static void test_top_k_helper(void)
{
    float l[8] = {1, 5, 3, 5, NAN, -INFINITY, 3, 2};
    int32_t ids[8];
    float vals[8];
    CHECK_EQ_INT(lq_top_k(l, 8, 4, ids, vals), 4);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 3);
    CHECK_EQ_INT(ids[2], 2);
    CHECK_EQ_INT(ids[3], 6);
    CHECK_NEAR(vals[0], 5, 0);
    CHECK_NEAR(vals[3], 3, 0);
    CHECK_EQ_INT(lq_top_k(l, 8, 100, ids, vals), 8); /* k clamped to n */
    CHECK_EQ_INT(ids[4], 7);
    CHECK_EQ_INT(ids[5], 0);
    CHECK_EQ_INT(ids[6], 4); /* NaN and -inf rank last, NaN as -inf: lower id first */
    CHECK_EQ_INT(ids[7], 5);
    CHECK_EQ_INT(lq_top_k(l, 8, 0, ids, vals), 0);
    /* a large random vector against a brute-force scan */
    enum { N = 20000 };
    static float big[N];
    fill_logits(big, N, 5);
    int32_t bi[50];
    float bv[50];
    CHECK_EQ_INT(lq_top_k(big, N, 50, bi, bv), 50);
    for (int i = 1; i < 50; i++)
        CHECK(bv[i - 1] > bv[i] || (bv[i - 1] == bv[i] && bi[i - 1] < bi[i]));
    int above = 0;
    for (int i = 0; i < N; i++)
        above += big[i] > bv[49];
    CHECK(above <= 49);
}

static void test_logsumexp(void)
{
    float a[2] = {0, 0};
    CHECK_NEAR(lq_logsumexp(a, 2), log(2.0), 1e-12);
    float b[3] = {1000, 1000, -INFINITY};
    CHECK_NEAR(lq_logsumexp(b, 3), 1000 + log(2.0), 1e-9);
    float c[3] = {-1000, -1001, -1002};
    CHECK_NEAR(lq_logsumexp(c, 3), -1000 + log(1 + exp(-1.0) + exp(-2.0)), 1e-9);
    float d[2] = {-INFINITY, -INFINITY};
    CHECK(isinf(lq_logsumexp(d, 2)) && lq_logsumexp(d, 2) < 0);
}

int main(void)
{
    RUN(test_defaults);
    RUN(test_greedy_argmax_ties_and_nan);
    RUN(test_greedy_large_vocab);
    RUN(test_temperature_to_zero_is_greedy);
    RUN(test_top_k_1_is_greedy);
    RUN(test_seed_determinism);
    RUN(test_reset_restarts_sequence);
    RUN(test_top_p_tiny_is_argmax);
    RUN(test_distribution_three_tokens);
    RUN(test_top_p_min_p_match_brute_force);
    RUN(test_min_p_filters);
    RUN(test_penalties);
    RUN(test_invalid_params);
    RUN(test_top_k_helper);
    RUN(test_logsumexp);
    return harness_done();
}
