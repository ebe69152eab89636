/* Speculative decoding (lq_generate_params.draft) changes the speed only: with drafts the
 * tokens, text, finish, logprobs and top logprobs, and the session's KV afterwards are those of
 * plain decoding. Checked on the trained model (models/tinystories-ternary.gguf), whose long
 * greedy runs repeat themselves (drafts accepted a lot), and on a random fixture; greedy and
 * seeded sampling with every sampler option, stop strings, max_tokens, cancel, the bounded and
 * the exact lm_head, a prediction, the scheduler, and bad parameters. */
#include "harness.h"

#include <math.h>
#include <string.h>

#include "larql/fixture.h"
#include "larql/generate.h"
#include "larql/grammar.h"
#include "larql/model.h"
#include "larql/sampler.h"
#include "larql/scheduler.h"
#include "larql/tokenizer.h"

#define TRAINED "models/tinystories-ternary.gguf"
#define MAXT 256

typedef struct rec {
    int n;
    int32_t ids[MAXT];
    float lp[MAXT];
    int32_t top[MAXT][5];
    float topv[MAXT][5];
    char text[8192];
    size_t len;
    int cancel_at;   /* > 0: the callback stops the stream at this token */
    int32_t V;
} rec;

static int on_tok(void *user, int32_t id, const char *text, size_t len, float lp, const float *logits)
{
    rec *r = user;
    if (len && r->len + len < sizeof r->text) {
        memcpy(r->text + r->len, text, len);
        r->len += len;
    }
    if (id < 0 || r->n >= MAXT)
        return 0;
    r->ids[r->n] = id;
    r->lp[r->n] = lp;
    lq_top_k(logits, r->V, 5, r->top[r->n], r->topv[r->n]);
    r->n++;
    return r->cancel_at > 0 && r->n >= r->cancel_at;
}

typedef struct run {
    rec r;
    lq_generate_result res;
    int pos;
    float *next;     /* logits after one more fixed token: the KV the run left behind */
    int rc;
} run;

static lq_model *open_model(const char *path, int mode)
{
    lq_model_opts o = {0};
    o.n_threads = 2;
    o.lm_head_mode = mode;
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(path, &o, &m, &err))
        printf("#   open %s: %s\n", path, err.msg);
    return m;
}

/* One generation on a fresh session, then the logits of token 1 fed after it. */
static void gen(lq_model *m, const int32_t *prompt, size_t n, const lq_generate_params *p, int cancel_at,
                run *out)
{
    memset(out, 0, sizeof *out);
    int32_t V = lq_model_get_info(m)->n_vocab;
    out->r.V = V;
    out->r.cancel_at = cancel_at;
    lq_session *s = NULL;
    lq_err err = {0};
    if (lq_session_create(m, 0, &s, &err)) {
        out->rc = -1;
        return;
    }
    out->rc = lq_generate(s, prompt, n, p, on_tok, &out->r, &out->res, &err);
    if (out->rc)
        printf("#   generate: %s\n", err.msg);
    out->pos = lq_session_pos(s);
    out->next = malloc((size_t)V * sizeof(float));
    if (out->next && lq_session_pos(s) < lq_session_n_ctx(s) && lq_session_decode(s, 1, out->next, &err)) {
        free(out->next);
        out->next = NULL;
    }
    lq_session_free(s);
}

static void run_free(run *a) { free(a->next); }

/* Everything a caller can see must be equal; logprobs to float tolerance. */
static int same(const run *a, const run *b, const char *what)
{
    int ok = a->rc == b->rc && a->r.n == b->r.n && a->r.len == b->r.len &&
             !memcmp(a->r.text, b->r.text, a->r.len) && a->res.finish == b->res.finish &&
             a->res.n_generated == b->res.n_generated && a->pos == b->pos;
    for (int i = 0; ok && i < a->r.n; i++) {
        ok = a->r.ids[i] == b->r.ids[i] && fabsf(a->r.lp[i] - b->r.lp[i]) <= 1e-5f;
        for (int k = 0; ok && k < 5; k++)
            ok = a->r.top[i][k] == b->r.top[i][k] &&
                 (a->r.topv[i][k] == b->r.topv[i][k] || fabsf(a->r.topv[i][k] - b->r.topv[i][k]) <= 1e-4f);
        if (!ok)
            printf("#   %s: token %d: id %d vs %d, logprob %.9g vs %.9g\n", what, i, a->r.ids[i], b->r.ids[i],
                   (double)a->r.lp[i], (double)b->r.lp[i]);
    }
    if (ok && a->next && b->next) {
        int32_t V = a->r.V;
        for (int32_t v = 0; ok && v < V; v++)
            ok = a->next[v] == b->next[v] || fabsf(a->next[v] - b->next[v]) <= 1e-5f;
        if (!ok)
            printf("#   %s: the KV left behind differs (logits of the next token)\n", what);
    }
    if (!ok)
        printf("#   %s: n %d/%d, finish %d/%d, pos %d/%d, rc %d/%d\n", what, a->r.n, b->r.n, a->res.finish,
               b->res.finish, a->pos, b->pos, a->rc, b->rc);
    return ok;
}

/* What the drafted runs of a test did, in all. */
typedef struct tally {
    long drafted, accepted, generated;
} tally;

/* p without drafts, then with (at most dmax tokens, 0: the default): everything a caller sees
 * must be equal. Counts the drafted run into t. */
static void both(lq_model *m, const int32_t *ids, size_t n, lq_generate_params p, int dmax, int cancel,
                 const char *what, tally *t)
{
    run a, b;
    p.draft = LQ_DRAFT_NONE;
    gen(m, ids, n, &p, cancel, &a);
    p.draft = LQ_DRAFT_NGRAM;
    p.draft_max = dmax;
    gen(m, ids, n, &p, cancel, &b);
    CHECK_MSG(same(&a, &b, what), "%s: drafting changed the output", what);
    CHECK_EQ_INT(a.res.drafted, 0);
    t->drafted += b.res.drafted;
    t->accepted += b.res.draft_accepted;
    t->generated += b.res.n_generated;
    run_free(&a);
    run_free(&b);
}

static const char *PROMPTS[] = {
    "Once upon a time",
    "Lily and Ben were friends. Lily said",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat",
    "One day, a little boy named Tim went to the park. He saw a big tree. Tim wanted to climb "
    "the tree. One day, a little boy named Tim went to the park. He saw",
    "User: What is the language of Russia?Assistant: People in Russia speak Russian.User: What "
    "is the language of Russia?Assistant:",
    "Tom had a red ball. He liked to throw the ball to his dog Max. Max ran fast and brought the "
    "ball back. Tom had a red ball. He liked",
    "Sara saw a bird.",
    "The sun was hot. The dog was sleepy. The sun was hot. The dog was",
    "Mom said, \"Clean your room.\" Mom said, \"Clean",
    "A big bear lived in the woods.",
    "Ben found a shiny rock. He showed it to his sister. Ben found a shiny rock. He showed",
    "They played all day and had fun. They played all day and had",
    "User: What is the capital of France?Assistant:",
    "The little fish swam and swam.",
    "Anna had a doll named Rose. Anna loved Rose. Anna had a doll named",
    "It was a rainy day.",
    "Max the dog liked to run. Max the dog liked to run. Max the dog liked to",
    "Once there was a king. The king had a big castle. The king",
    "Tim and Sue went to the beach. They built a sand castle. Tim and Sue went to the beach. They",
    "The end. The end. The end.",
};
#define NPROMPTS ((int)(sizeof PROMPTS / sizeof PROMPTS[0]))

static int encode(lq_model *m, const char *text, int32_t **ids, size_t *n)
{
    lq_err err = {0};
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    return lq_tokenizer_encode(tok, text, strlen(text), lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0, ids, n,
                               &err);
}

/* The trained model (bounded head) and prompt i's ids; NULL after a failed check. */
static lq_model *trained_with(int i, int32_t **ids, size_t *n)
{
    lq_model *m = open_model(TRAINED, LQ_LM_HEAD_BOUNDED);
    CHECK(m != NULL);
    if (m && encode(m, PROMPTS[i], ids, n)) {
        CHECK(0);
        lq_model_close(m);
        m = NULL;
    }
    return m;
}

/* Greedy over 20 prompts, with and without drafts, under the bounded head (logits -inf off the
 * computed rows) and the exact one with full logits (every logprob and top-5). */
static void greedy_trained(int head_mode, int full_logits)
{
    lq_model *m = open_model(TRAINED, head_mode);
    CHECK(m != NULL);
    if (!m)
        return;
    tally t = {0};
    for (int i = 0; i < NPROMPTS; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (encode(m, PROMPTS[i], &ids, &n)) {
            CHECK(0);
            continue;
        }
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.sampling.temperature = 0;
        p.max_tokens = i % 3 == 0 ? 200 : 96;
        p.ignore_eos = i % 2;
        p.full_logits = full_logits;
        char what[64];
        snprintf(what, sizeof what, "prompt %d", i);
        both(m, ids, n, p, 0, 0, what, &t);
        free(ids);
    }
    printf("#   head %s: %ld tokens, %ld drafted, %ld accepted (%.0f%%)\n", head_mode == LQ_LM_HEAD_EXACT ? "exact" : "bounded",
           t.generated, t.drafted, t.accepted, t.drafted ? 100.0 * t.accepted / t.drafted : 0.0);
    /* the repeating prompts make drafts pay. How many tokens come from drafts depends on the
     * pass costs the policy measures (a sanitizer build or a loaded host drafts less: 23% under
     * ASan, 91% accepted of what it drafted), so the check is that drafts ran and were kept */
    CHECK_MSG(t.drafted > 0 && t.accepted > 0, "%ld drafted, %ld of %ld tokens accepted from drafts", t.drafted,
              t.accepted, t.generated);
    lq_model_close(m);
}

static void test_greedy_trained_bounded(void) { greedy_trained(LQ_LM_HEAD_BOUNDED, 0); }
static void test_greedy_trained_exact(void) { greedy_trained(LQ_LM_HEAD_EXACT, 1); }

/* A random fixture (flat logits, 320 tokens): greedy runs and prompts of repeated ids. */
static void test_greedy_fixture(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tiny.gguf", harness_tmpdir());
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK(lq_fixture_preset(&o, "tiny", &err) == 0);
    o.seed = 29;
    CHECK(lq_fixture_write(&o, path, &err) == 0);
    lq_model *m = open_model(path, LQ_LM_HEAD_BOUNDED);
    CHECK(m != NULL);
    if (!m)
        return;
    tally t = {0};
    for (int i = 0; i < 20; i++) {
        int32_t ids[64];
        size_t n = 0;
        ids[n++] = 1;
        int period = 3 + i % 5;
        for (int k = 0; k < 30 + i; k++)
            ids[n++] = (int32_t)(5 + (i * 37 + (k % period) * 11) % 300);
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.sampling.temperature = 0;
        p.max_tokens = 120;
        p.ignore_eos = 1;
        both(m, ids, n, p, 1 + i % LQ_DRAFT_MAX, 0, "fixture", &t);
    }
    printf("#   fixture: %ld drafted tokens\n", t.drafted);
    CHECK(t.drafted > 0);
    lq_model_close(m);
}

/* Stop strings, max_tokens 1..24, EOS and cancel end the stream where plain decoding does,
 * and the session holds what it would hold. */
static void test_stops_and_limits(void)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lq_model *m = trained_with(4, &ids, &n);
    if (!m)
        return;
    static const char *stops[][2] = {{"Russian", NULL}, {"speak", "."}, {"Assistant", NULL}, {"x", "?"}};
    tally t = {0};
    for (int mt = 1; mt <= 24; mt++) {
        for (int si = -1; si < 4; si++) {
            lq_generate_params p;
            lq_generate_defaults(&p);
            p.sampling.temperature = 0;
            p.max_tokens = mt * 3;
            if (si >= 0) {
                p.stop = stops[si];
                p.n_stop = stops[si][1] ? 2 : 1;
            } else {
                p.max_tokens = mt;
                p.ignore_eos = 1;
            }
            int cancel = si == -1 && mt > 12 ? mt - 10 : 0;
            char what[96];
            snprintf(what, sizeof what, "max_tokens %d, stop set %d, cancel %d", p.max_tokens, si, cancel);
            long before = t.generated;
            both(m, ids, n, p, 0, cancel, what, &t);
            if (si == -1 && !cancel)
                CHECK_EQ_INT(t.generated - before, mt);
        }
    }
    CHECK(t.drafted > 0);
    free(ids);
    lq_model_close(m);
}

/* Sampling with every option: the same seed gives the same tokens (each token is drawn by the
 * sampler from its own position's logits with the draws plain decoding makes). */
static void test_sampling_same_seed(void)
{
    lq_model *m = open_model(TRAINED, LQ_LM_HEAD_BOUNDED);
    CHECK(m != NULL);
    if (!m)
        return;
    tally t = {0};
    for (int i = 0; i < 24; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(encode(m, PROMPTS[i % NPROMPTS], &ids, &n) == 0);
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = 80;
        p.ignore_eos = i % 2;
        p.sampling.seed = 100 + (uint64_t)i;
        p.sampling.has_seed = 1;
        p.sampling.temperature = i % 4 == 0 ? 0.3f : 0.8f;
        p.sampling.top_k = i % 3 == 0 ? 0 : 40;
        p.sampling.top_p = i % 5 == 0 ? 1.0f : 0.9f;
        p.sampling.min_p = i % 6 == 0 ? 0.0f : 0.05f;
        p.sampling.repeat_penalty = i % 4 == 1 ? 1.1f : 1.0f;
        p.sampling.frequency_penalty = i % 4 == 2 ? 0.3f : 0.0f;
        p.sampling.presence_penalty = i % 4 == 3 ? 0.2f : 0.0f;
        lq_logit_bias bias[2] = {{ids[n - 1], -2.0f}, {13, 1.5f}};
        if (i % 3 == 1) {
            p.logit_bias = bias;
            p.n_logit_bias = 2;
        }
        p.full_logits = i % 2;
        char what[64];
        snprintf(what, sizeof what, "sampling case %d", i);
        both(m, ids, n, p, 0, 0, what, &t);
        free(ids);
    }
    printf("#   sampling: %ld drafted tokens\n", t.drafted);
    CHECK(t.drafted > 0);
    lq_model_close(m);
}

/* The distribution itself, without relying on the seeds lining up: 300 seeded runs with drafts
 * and 300 with other seeds without; the tokens at positions 8..23 pooled, compared by a
 * chi-square two-sample test over the tokens seen >= 10 times (the rest pooled). The statistic
 * is deterministic (fixed seeds); the bound is far above its 99.9% quantile. */
static void test_sampling_distribution(void)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lq_model *m = trained_with(2, &ids, &n);
    if (!m)
        return;
    int32_t V = lq_model_get_info(m)->n_vocab;
    long *ca = calloc((size_t)V, sizeof *ca), *cb = calloc((size_t)V, sizeof *cb);
    long drafted = 0;
    for (int k = 0; k < 600 && ca && cb; k++) {
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = 24;
        p.ignore_eos = 1;
        p.sampling.temperature = 1.0f;
        p.sampling.top_k = 0;
        p.sampling.top_p = 1.0f;
        p.sampling.min_p = 0.0f;
        p.sampling.seed = 7000 + (uint64_t)k;
        p.sampling.has_seed = 1;
        p.draft = k % 2 ? LQ_DRAFT_NGRAM : LQ_DRAFT_NONE;
        run a;
        gen(m, ids, n, &p, 0, &a);
        drafted += a.res.drafted;
        for (int i = 8; i < a.r.n; i++)
            (k % 2 ? cb : ca)[a.r.ids[i]]++;
        run_free(&a);
    }
    double chi = 0, ra = 0, rb = 0;
    long na = 0, nb = 0;
    int df = 0;
    for (int32_t v = 0; v < V && ca && cb; v++) {
        na += ca[v];
        nb += cb[v];
    }
    for (int32_t v = 0; v < V && ca && cb; v++) {
        double t = (double)(ca[v] + cb[v]);
        if (t < 10) {
            ra += (double)ca[v];
            rb += (double)cb[v];
            continue;
        }
        double ea = t * (double)na / (double)(na + nb), eb = t * (double)nb / (double)(na + nb);
        chi += (ca[v] - ea) * (ca[v] - ea) / ea + (cb[v] - eb) * (cb[v] - eb) / eb;
        df++;
    }
    if (ra + rb >= 10) {
        double t = ra + rb, ea = t * (double)na / (double)(na + nb), eb = t * (double)nb / (double)(na + nb);
        chi += (ra - ea) * (ra - ea) / ea + (rb - eb) * (rb - eb) / eb;
        df++;
    }
    df = df > 1 ? df - 1 : 1;
    /* 99.9% quantile of chi-square(df) < df + 3.1 sqrt(2 df) + 10 for every df */
    double bound = df + 3.1 * sqrt(2.0 * df) + 10;
    printf("#   chi-square %.1f over %d degrees of freedom (bound %.1f), %ld drafted tokens\n", chi, df, bound,
           drafted);
    CHECK(chi < bound);
    CHECK(drafted > 0);
    free(ca);
    free(cb);
    free(ids);
    lq_model_close(m);
}

/* A prediction of the output (OpenAI's): the plain output itself is accepted nearly whole; a
 * wrong one changes nothing but the speed. */
static void test_prediction(void)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lq_model *m = trained_with(6, &ids, &n);
    if (!m)
        return;
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 64;
    p.ignore_eos = 1;
    p.draft = LQ_DRAFT_NONE;
    run a, b, c;
    gen(m, ids, n, &p, 0, &a);
    p.draft = LQ_DRAFT_NGRAM;
    p.prediction = a.r.ids;
    p.n_prediction = (size_t)a.r.n;
    gen(m, ids, n, &p, 0, &b);
    CHECK(same(&a, &b, "prediction"));
    printf("#   prediction = the output: %d of %d tokens accepted from drafts\n", b.res.draft_accepted,
           b.res.n_generated);
    /* how many depends on the draft lengths the policy picks from measured pass costs; that
     * drafts from the prediction were kept is the point (the output above is the same) */
    CHECK(b.res.draft_accepted > 0);
    int32_t wrong[64];
    for (int i = 0; i < 64; i++)
        wrong[i] = (int32_t)(i * 7 % 300 + 3);
    p.prediction = wrong;
    p.n_prediction = 64;
    gen(m, ids, n, &p, 0, &c);
    CHECK(same(&a, &c, "wrong prediction"));
    run_free(&a);
    run_free(&b);
    run_free(&c);
    free(ids);
    lq_model_close(m);
}

static void noop_layer(void *ctx, int layer, int pos, int logits, float *x, int n_embd)
{
    (void)ctx, (void)layer, (void)pos, (void)logits, (void)x, (void)n_embd;
}

/* What cannot draft does not: a grammar, edits. Bad parameters are refused. */
static void test_params(void)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lq_model *m = trained_with(2, &ids, &n);
    if (!m)
        return;
    lq_session *s = NULL;
    lq_err err = {0};
    CHECK(lq_session_create(m, 0, &s, &err) == 0);
    lq_generate_params p;
    lq_generate_result res;
    int32_t bad_id = 1 << 20;
    struct {
        int draft, max;
        const int32_t *pred;
        size_t npred;
        const char *msg;
    } bad[] = {
        {7, 0, NULL, 0, "draft mode 7"},
        {-1, 0, NULL, 0, "draft mode -1"},
        {LQ_DRAFT_NGRAM, LQ_DRAFT_MAX + 1, NULL, 0, "draft_max 17"},
        {LQ_DRAFT_NGRAM, -2, NULL, 0, "draft_max -2"},
        {LQ_DRAFT_NGRAM, 0, NULL, 3, "a prediction of 3 tokens"},
        {LQ_DRAFT_NGRAM, 0, &bad_id, 1, "prediction[0] = 1048576"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        lq_generate_defaults(&p);
        p.draft = bad[k].draft;
        p.draft_max = bad[k].max;
        p.prediction = bad[k].pred;
        p.n_prediction = bad[k].npred;
        memset(&err, 0, sizeof err);
        CHECK_EQ_INT(lq_generate(s, ids, n, &p, NULL, NULL, &res, &err), LQ_EINVAL);
        CHECK_STR_CONTAINS(err.msg, bad[k].msg);
        CHECK_EQ_INT(lq_session_pos(s), 0);
    }
    /* a grammar: plain decoding (its state would have to be rolled back) */
    lq_grammar *gr = NULL;
    const char *gbnf = "root ::= (\" The cat sat on the mat.\")+";
    CHECK(lq_grammar_parse(gbnf, strlen(gbnf), &gr, &err) == 0);
    lq_generate_defaults(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 60;
    p.grammar = gr;
    p.draft = LQ_DRAFT_NGRAM;
    CHECK(lq_generate(s, ids, n, &p, NULL, NULL, &res, &err) == 0);
    CHECK(res.n_generated > 10);
    CHECK_EQ_INT(res.drafted, 0);
    lq_grammar_free(gr);
    /* edits on the session (set by the caller, not through p->hook): plain decoding too */
    lq_resid_hook hk = {0};
    hk.after_layer = noop_layer;
    lq_session_reset(s);
    lq_session_set_hook(s, &hk);
    lq_generate_defaults(&p);
    p.sampling.temperature = 0;
    p.max_tokens = 60;
    p.ignore_eos = 1;
    p.draft = LQ_DRAFT_NGRAM;
    CHECK(lq_generate(s, ids, n, &p, NULL, NULL, &res, &err) == 0);
    CHECK_EQ_INT(res.n_generated, 60);
    CHECK_EQ_INT(res.drafted, 0);
    CHECK(lq_session_hook(s) == &hk);
    lq_session_set_hook(s, NULL);
    lq_session_free(s);
    free(ids);
    lq_model_close(m);
}

static void on_done(void *user, int rc, const lq_generate_result *res, const lq_err *err)
{
    (void)user;
    (void)rc;
    (void)res;
    (void)err;
}

/* The scheduler: a request running alone drafts; alone or beside another one its output is
 * the plain one. */
static void test_scheduler(void)
{
    lq_model *m = open_model(TRAINED, LQ_LM_HEAD_BOUNDED);
    CHECK(m != NULL);
    if (!m)
        return;
    lq_scheduler *S = NULL;
    lq_err err = {0};
    CHECK(lq_scheduler_create(m, NULL, &S, &err) == 0);
    if (!S) {
        lq_model_close(m);
        return;
    }
    int32_t V = lq_model_get_info(m)->n_vocab;
    for (int round = 0; round < 2; round++) {
        enum { N = 3 };
        int32_t *ids[N] = {0};
        size_t n[N];
        static rec got[N];
        run want[N];
        lq_sched_req *h[N] = {0};
        lq_generate_params p[N];
        int count = round ? N : 1;
        for (int i = 0; i < count; i++) {
            CHECK(encode(m, PROMPTS[2 + 2 * i], &ids[i], &n[i]) == 0);
            lq_generate_defaults(&p[i]);
            p[i].max_tokens = 120;
            p[i].ignore_eos = 1;
            p[i].sampling.temperature = i == 1 ? 0.7f : 0.0f;
            p[i].sampling.seed = 5;
            p[i].sampling.has_seed = 1;
            p[i].draft = LQ_DRAFT_NONE;
            gen(m, ids[i], n[i], &p[i], 0, &want[i]);
            p[i].draft = LQ_DRAFT_AUTO;
            memset(&got[i], 0, sizeof got[i]);
            got[i].V = V;
        }
        for (int i = 0; i < count; i++)
            CHECK(lq_scheduler_submit(S, ids[i], n[i], &p[i], on_tok, on_done, &got[i], &h[i], &err) == 0);
        for (int i = 0; i < count; i++) {
            lq_generate_result res = {0};
            CHECK(lq_sched_wait(h[i], -1) == 1 && lq_sched_result(h[i], &res, &err) == 0);
            lq_sched_release(h[i]);
            run r = {0};
            r.r = got[i];
            r.res = res;
            r.pos = want[i].pos;
            CHECK_MSG(same(&want[i], &r, "scheduler"), "round %d request %d", round, i);
            run_free(&want[i]);
            free(ids[i]);
        }
        lq_scheduler_stats st;
        lq_scheduler_get_stats(S, &st);
        printf("#   scheduler round %d: %llu draft passes, %llu drafted, %llu accepted\n", round,
               (unsigned long long)st.draft_steps, (unsigned long long)st.draft_tokens,
               (unsigned long long)st.draft_accepted);
        if (round == 0)
            CHECK(st.draft_accepted > 0);
    }
    lq_scheduler_free(S);
    /* the scheduler's own options: bad ones refused; LQ_DRAFT_NONE for every request that
     * leaves its mode to the default (a server's --draft none) */
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.draft = 9;
    S = NULL;
    CHECK_EQ_INT(lq_scheduler_create(m, &so, &S, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "draft mode 9");
    lq_scheduler_opts_init(&so);
    so.draft_max = LQ_DRAFT_MAX + 1;
    CHECK_EQ_INT(lq_scheduler_create(m, &so, &S, &err), LQ_EINVAL);
    lq_scheduler_opts_init(&so);
    so.draft = LQ_DRAFT_NONE;
    CHECK(lq_scheduler_create(m, &so, &S, &err) == 0);
    if (S) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(encode(m, PROMPTS[4], &ids, &n) == 0);
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = 80;
        p.ignore_eos = 1;
        p.sampling.temperature = 0;
        static rec got;
        got.V = V;
        lq_sched_req *h = NULL;
        lq_generate_result res = {0};
        CHECK(lq_scheduler_submit(S, ids, n, &p, on_tok, on_done, &got, &h, &err) == 0);
        CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res, &err) == 0);
        lq_sched_release(h);
        lq_scheduler_stats st;
        lq_scheduler_get_stats(S, &st);
        CHECK_EQ_INT(res.n_generated, 80);
        CHECK_EQ_INT(res.drafted, 0);
        CHECK(st.draft_steps == 0);
        lq_scheduler_free(S);
        free(ids);
    }
    lq_model_close(m);
}

int main(void)
{
    FILE *f = fopen(TRAINED, "rb");
    if (f)
        fclose(f);
    RUN(test_greedy_fixture);
    if (!f) {
        printf("#   %s absent (run from the project root)\n", TRAINED);
        return harness_done();
    }
    RUN(test_greedy_trained_bounded);
    RUN(test_greedy_trained_exact);
    RUN(test_stops_and_limits);
    RUN(test_sampling_same_seed);
    RUN(test_sampling_distribution);
    RUN(test_prediction);
    RUN(test_params);
    RUN(test_scheduler);
    return harness_done();
}
