/* lq_perplexity: the windows, the scored half and the figures against an independent count
 * from the session's own logits; bits per byte from the same NLL; the errors a caller can
 * hit (context out of range, text shorter than a window, NULL arguments). */
#include "harness.h"

#include "larql/fixture.h"
#include "larql/model.h"
#include "larql/perplexity.h"
#include "larql/tokenizer.h"

static char g_path[4200];
static const char *TEXT =
    "Once upon a time there was a little model that learned to count in ternary . "
    "The capital of France is Paris . The capital of Germany is Berlin . "
    "Its weights were minus one , zero and plus one , and it ran fast on the CPU . "
    "The quick brown fox jumps over the lazy dog . Hello world ! This is a test . ";

static lq_model *open_model(void)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {0};
    mo.n_threads = 2;
    if (lq_model_open(g_path, &mo, &m, &err) != 0)
        printf("#   open: %s\n", err.msg);
    return m;
}

/* NLL of one window by hand: [BOS] + win tokens, positions n_ctx/2 .. n_ctx-2 scored */
static double window_nll(lq_model *m, const int32_t *win, int n_ctx, int *scored)
{
    const lq_model_info *mi = lq_model_get_info(m);
    int V = mi->n_vocab;
    int32_t in[64];
    in[0] = lq_tokenizer_bos(lq_model_tokenizer(m));
    memcpy(in + 1, win, (size_t)(n_ctx - 1) * sizeof *in);
    float *lg = malloc((size_t)n_ctx * V * sizeof *lg);
    lq_session *s = NULL;
    lq_err err = {0};
    double nll = 0.0;
    if (lq_session_create(m, n_ctx, &s, &err) || lq_session_eval(s, in, (size_t)n_ctx - 1, NULL, lg, &err)) {
        printf("#   eval: %s\n", err.msg);
        nll = NAN;
    }
    for (int p = n_ctx / 2; p < n_ctx - 1 && !isnan(nll); p++) {
        const float *r = lg + (size_t)p * V;
        double mx = r[0], z = 0.0;
        for (int i = 1; i < V; i++)
            if (r[i] > mx)
                mx = r[i];
        for (int i = 0; i < V; i++)
            z += exp(r[i] - mx);
        nll += log(z) + mx - r[in[p + 1]];
        (*scored)++;
    }
    lq_session_free(s);
    free(lg);
    return nll;
}

static void test_matches_session_logits(void)
{
    lq_model *m = open_model();
    CHECK(m);
    if (!m)
        return;
    lq_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    size_t len = strlen(TEXT);
    CHECK(lq_tokenizer_encode(lq_model_tokenizer(m), TEXT, len, 0, &ids, &n, &err) == 0);
    const int ctx = 16;
    size_t n_win = n / (ctx - 1);
    CHECK(n_win >= 2);
    double nll = 0.0;
    int scored = 0;
    for (size_t w = 0; w < n_win; w++)
        nll += window_nll(m, ids + w * (ctx - 1), ctx, &scored);
    lq_perplexity_result r;
    CHECK(lq_perplexity(m, TEXT, len, ctx, &r, &err) == 0);
    CHECK_EQ_INT(r.windows, (int)n_win);
    CHECK_EQ_INT(r.tokens, (uint64_t)scored);
    CHECK_EQ_INT(r.tokens, n_win * (ctx - 1 - ctx / 2));
    CHECK_EQ_INT(r.text_tokens, n);
    CHECK_EQ_INT(r.text_bytes, len);
    CHECK_EQ_INT(r.n_ctx, ctx);
    CHECK_NEAR(r.nll, nll, 1e-6 * nll);
    CHECK_NEAR(r.perplexity, exp(nll / scored), 1e-9 * r.perplexity);
    CHECK_NEAR(r.bits_per_byte, nll / log(2.0) / scored * (double)n / (double)len, 1e-9);
    /* a random model is no better than a few times uniform, never better than certainty */
    CHECK(r.perplexity > 1.0 && r.perplexity < 50.0 * lq_model_get_info(m)->n_vocab);
    /* the default context is the model's training context: the text is too short for it */
    CHECK(lq_perplexity(m, TEXT, len, 0, &r, &err) == LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "fewer than one window");
    free(ids);
    lq_model_close(m);
}

static void test_errors(void)
{
    lq_model *m = open_model();
    CHECK(m);
    if (!m)
        return;
    lq_err err = {0};
    lq_perplexity_result r;
    int max = lq_model_get_info(m)->n_ctx_train;
    CHECK(lq_perplexity(m, TEXT, strlen(TEXT), 3, &r, &err) == LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "context 3");
    CHECK(lq_perplexity(m, TEXT, strlen(TEXT), max + 1, &r, &err) == LQ_ERANGE);
    CHECK(lq_perplexity(m, "", 0, 8, &r, &err) == LQ_EINVAL);
    CHECK(lq_perplexity(m, "Hello", 5, 8, &r, &err) == LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "tokens");
    CHECK(lq_perplexity(NULL, TEXT, strlen(TEXT), 8, &r, &err) == LQ_EINVAL);
    CHECK(lq_perplexity(m, NULL, 4, 8, &r, &err) == LQ_EINVAL);
    CHECK(lq_perplexity(m, "\xff\xfe bad", 6, 8, &r, &err) != LQ_OK); /* invalid UTF-8 */
    lq_model_close(m);
}

int main(void)
{
    lq_fixture_opts o;
    lq_err err = {0};
    lq_fixture_preset(&o, "tiny", &err);
    snprintf(g_path, sizeof g_path, "%s/ppl.gguf", harness_tmpdir());
    if (lq_fixture_write(&o, g_path, &err)) {
        printf("# fixture: %s\n", err.msg);
        return 1;
    }
    RUN(test_matches_session_logits);
    RUN(test_errors);
    remove(g_path);
    return harness_done();
}
