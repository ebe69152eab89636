/* The bounded lm_head (src/engine/forward.c "bounded head", generate.c's certificate).
 *
 * 1. Head level, on synthetic f16 lm_heads built to be awkward (exact ties, rows one f16 ulp
 *    apart, a row 1000x another, subnormal and zero rows, a lone outlier element, ragged
 *    widths) and hidden states of every kind (random, equal to a row, one huge component,
 *    zero, a NaN, output norms of 1e-3 and 1e3): for k = 1..300 and windows 0 and 3, the
 *    bounded head's exact rows are bit-identical to the exact head's, every other row holds
 *    an upper bound, and its top-k (ids and values) is the exact head's, for the scalar
 *    reference kernel set and the best one (which must choose the same exact rows: the
 *    approximate scores are integer dots), one row at a time and batched.
 * 2. Generation: lq_generate on a model opened exact and the same model opened bounded gives
 *    the same tokens — greedy over 20 prompts x 64 tokens (the trained model and a random
 *    fixture), with their top-5 logits equal along the way, and seeded top-k sampling, and
 *    greedy under logit_bias / penalties / a grammar (which move tokens past the bound and
 *    exercise the generator's rescoring). */
#include "harness.h"
#include <pthread.h>

#include "core/f16.h"
#include "engine/engine_internal.h"
#include "larql/fixture.h"
#include "larql/generate.h"
#include "larql/grammar.h"
#include "larql/model.h"
#include "larql/sampler.h"
#include "larql/scheduler.h"

#define TRAINED "models/tinystories-ternary.gguf"

/* ---- synthetic heads ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}
static float gauss(void)
{
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

typedef struct synth {
    lq_model *m;
    uint16_t *w; /* [V, D] f16 */
    float *onorm;
} synth;

/* An lq_model with only a tied f16 lm_head (no layers): what lq_forward_head reads. */
static int synth_open(synth *s, const char *kern, int V, int D, const uint16_t *w, float onorm_v)
{
    memset(s, 0, sizeof *s);
    lq_err err = {0};
    lq_model_opts o = {0};
    o.n_threads = 2;
    o.kernels = kern;
    o.lm_head_mode = LQ_LM_HEAD_BOUNDED;
    if (lq_model_new(&o, &s->m, &err))
        return -1;
    lq_model *m = s->m;
    s->onorm = malloc((size_t)D * sizeof(float));
    for (int i = 0; i < D; i++)
        s->onorm[i] = onorm_v;
    m->n_layer = 0;
    m->n_embd = m->n_ff = m->q_dim = m->kv_dim = m->head_dim = D;
    m->n_head = m->n_head_kv = 1;
    m->n_rot = 2;
    m->n_vocab = V;
    m->n_ctx_train = 16;
    m->eps = 1e-5f;
    m->output_norm = s->onorm;
    m->lm_head.kind = LQ_WK_DENSE;
    m->lm_head.src_type = LQ_GGML_F16;
    m->lm_head.rows = V;
    m->lm_head.cols = D;
    m->lm_head.dense = (lq_dense_mat){w, V, D, LQ_GGML_F16};
    m->lm_head.bytes = (uint64_t)V * (uint64_t)D * 2;
    m->embd = m->lm_head.dense;
    if (lq_model_finish(m, &err)) {
        printf("#   synth: %s\n", err.msg);
        return -1;
    }
    return m->lmb.q8.data ? 0 : -1;
}

static void synth_close(synth *s)
{
    lq_model_close(s->m);
    free(s->onorm);
}

/* Awkward rows: see the file comment. */
static uint16_t *make_rows(int V, int D)
{
    float *f = malloc((size_t)V * D * sizeof(float));
    for (size_t i = 0; i < (size_t)V * D; i++)
        f[i] = 0.05f * gauss();
    float *r3 = f + 3 * (size_t)D;
    for (int r = 10; r < 15; r++) /* exact ties with row 3 */
        memcpy(f + (size_t)r * D, r3, (size_t)D * sizeof(float));
    for (int c = 0; c < D; c++) {
        f[20 * (size_t)D + c] = r3[c];
        f[21 * (size_t)D + c] = r3[c];
        f[30 * (size_t)D + c] = r3[c] * 1000.0f;
        f[31 * (size_t)D + c] = r3[c] * 1e-6f;
        f[32 * (size_t)D + c] = 0.0f;
        f[33 * (size_t)D + c] = 1e-4f * gauss();
    }
    f[33 * (size_t)D + 7] = 60000.0f;
    uint16_t *w = malloc((size_t)V * D * sizeof(uint16_t));
    for (size_t i = 0; i < (size_t)V * D; i++)
        w[i] = lq_f32_to_f16(f[i]);
    /* rows 20 and 21: row 3 with the first / last element one f16 ulp up (near-ties) */
    w[20 * (size_t)D] = (uint16_t)(w[3 * (size_t)D] + 1);
    w[21 * (size_t)D + D - 1] = (uint16_t)(w[3 * (size_t)D + D - 1] + 1);
    free(f);
    return w;
}

enum { NX = 7 };

/* Hidden state case c [D]. */
static void make_x(int c, const uint16_t *w, int D, float *x)
{
    for (int i = 0; i < D; i++)
        x[i] = gauss();
    switch (c) {
    case 1: /* row 3 (ties, near-ties; row 30 wins) */
    case 2: /* minus row 30: the big rows lose */
        for (int i = 0; i < D; i++)
            x[i] = (c == 1 ? 1.0f : -1.0f) * lq_f16_to_f32(w[3 * (size_t)D + i]);
        break;
    case 3: /* one huge component */
        for (int i = 0; i < D; i++)
            x[i] *= 1e-3f;
        x[7] = 1e4f;
        break;
    case 4: /* zero: every logit 0, all tied */
        memset(x, 0, (size_t)D * sizeof(float));
        break;
    case 5: /* a NaN: no bound, the whole head */
        x[D / 2] = NAN;
        break;
    case 6: /* row 3 plus noise: near-ties with a spread */
        for (int i = 0; i < D; i++)
            x[i] = lq_f16_to_f32(w[3 * (size_t)D + i]) + 1e-3f * x[i];
        break;
    default:
        break;
    }
}

typedef struct req_bufs {
    lq_head_req h;
    float *logits;
} req_bufs;

static void req_init(req_bufs *b, int V, int D, int k, float window)
{
    memset(b, 0, sizeof *b);
    b->logits = malloc((size_t)V * sizeof(float));
    b->h.logits = b->logits;
    b->h.k = k;
    b->h.window = window;
    b->h.cap = V / 4 + 1;
    b->h.exact = calloc(((size_t)V + 31) / 32, sizeof(uint32_t));
    b->h.ids = malloc((size_t)b->h.cap * sizeof(int32_t));
    b->h.x = malloc((size_t)D * sizeof(float));
}

static void req_free(req_bufs *b)
{
    free(b->logits);
    free(b->h.exact);
    free(b->h.ids);
    free(b->h.x);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Checks one bounded row against the exact head's row `ref`. Returns failures. */
static int check_row(const lq_head_req *h, const float *got, const float *ref, int V, int k,
                     float window, const char *what)
{
    int bad = 0;
    for (int r = 0; r < V && bad < 5; r++) {
        if (lq_head_is_exact(h, r)) {
            if (!same_bits(got[r], ref[r])) {
                printf("#   %s: exact row %d: %.9g vs %.9g\n", what, r, got[r], ref[r]);
                bad++;
            }
        } else if (!(got[r] >= ref[r])) {
            printf("#   %s: row %d bound %.9g below the exact %.9g\n", what, r, got[r], ref[r]);
            bad++;
        }
    }
    int32_t gi[300], ri[300];
    float gv[300], rv[300];
    int kk = k < 300 ? k : 300;
    lq_top_k(got, V, kk, gi, gv);
    lq_top_k(ref, V, kk, ri, rv);
    for (int i = 0; i < kk && bad < 10; i++)
        if (gi[i] != ri[i] || !same_bits(gv[i], rv[i])) {
            printf("#   %s: top-%d #%d: %d %.9g vs %d %.9g\n", what, k, i, gi[i], gv[i], ri[i], rv[i]);
            bad++;
        }
    /* every row within the window of the k-th best is exact */
    float kth = rv[kk - 1];
    for (int r = 0; r < V && bad < 10 && isfinite(kth); r++)
        if (ref[r] >= kth - window && !lq_head_is_exact(h, r)) {
            printf("#   %s: row %d (%.9g) within the window of %.9g is not exact\n", what, r,
                   ref[r], kth);
            bad++;
        }
    return bad;
}

static void run_head_cases(int V, int D)
{
    uint16_t *w = make_rows(V, D);
    const float onorms[3] = {1.0f, 1e-3f, 1e3f};
    const int ks[5] = {1, 2, 5, 40, 300};
    const float wins[2] = {0.0f, 3.0f};
    const char *sets[2] = {"scalar", NULL};
    float *x = malloc((size_t)3 * D * sizeof(float));
    float *ref = malloc((size_t)3 * V * sizeof(float));
    int32_t *ids0 = malloc((size_t)V * sizeof(int32_t));
    int cases = 0, fulls = 0;
    long exact_rows = 0;
    for (int on = 0; on < 3; on++) {
        synth s[2];
        int ok = 1;
        for (int si = 0; si < 2; si++)
            ok &= synth_open(&s[si], sets[si], V, D, w, onorms[on]) == 0;
        CHECK(ok);
        if (!ok)
            break;
        lq_scratch sc[2];
        CHECK(lq_scratch_init(&sc[0], s[0].m) == 0 && lq_scratch_init(&sc[1], s[1].m) == 0);
        for (int c = 0; c < NX; c++) {
            make_x(c, w, D, x);
            make_x((c + 1) % NX, w, D, x + D);
            make_x((c + 3) % NX, w, D, x + 2 * (size_t)D);
            for (int ki = 0; ki < 5; ki++)
                for (int wi = 0; wi < 2; wi++) {
                    int n0 = -1, full0 = 0;
                    for (int si = 0; si < 2; si++) {
                        const lq_model *m = s[si].m;
                        float *rp[3] = {ref, ref + V, ref + 2 * (size_t)V};
                        lq_forward_head(m, &sc[si], x, 3, rp);
                        /* one row alone, then three rows batched */
                        req_bufs b[3];
                        for (int t = 0; t < 3; t++)
                            req_init(&b[t], V, D, ks[ki], wins[wi]);
                        float *o1[1] = {b[0].logits};
                        lq_head_req *r1[1] = {&b[0].h};
                        lq_forward_head_req(m, &sc[si], x, 1, o1, r1);
                        char what[128];
                        snprintf(what, sizeof what, "%s V%d D%d norm %g x%d k%d w%g", sets[si] ? sets[si] : "best",
                                 V, D, onorms[on], c, ks[ki], wins[wi]);
                        CHECK(b[0].h.valid == 1);
                        CHECK_MSG(check_row(&b[0].h, b[0].logits, ref, V, ks[ki], wins[wi], what) == 0, "%s", what);
                        cases++;
                        fulls += b[0].h.full;
                        exact_rows += b[0].h.full ? V : b[0].h.n_ids;
                        if (c == 5)
                            CHECK(b[0].h.full); /* NaN: no bound */
                        /* the same exact rows in both kernel sets (integer approximate scores) */
                        if (si == 0) {
                            n0 = b[0].h.full ? -1 : b[0].h.n_ids;
                            full0 = b[0].h.full;
                            if (!full0)
                                memcpy(ids0, b[0].h.ids, (size_t)n0 * sizeof(int32_t));
                        } else {
                            CHECK_EQ_INT(b[0].h.full, full0);
                            if (!full0 && !b[0].h.full) {
                                CHECK_EQ_INT(b[0].h.n_ids, n0);
                                CHECK(memcmp(ids0, b[0].h.ids, (size_t)n0 * sizeof(int32_t)) == 0);
                            }
                        }
                        float *o3[3] = {b[0].logits, b[1].logits, b[2].logits};
                        lq_head_req *r3[3] = {&b[0].h, &b[1].h, &b[2].h};
                        lq_forward_head_req(m, &sc[si], x, 3, o3, r3);
                        for (int t = 0; t < 3; t++) {
                            snprintf(what, sizeof what, "%s batched row %d x%d k%d", sets[si] ? sets[si] : "best", t,
                                     c, ks[ki]);
                            CHECK_MSG(check_row(&b[t].h, b[t].logits, ref + (size_t)t * V, V, ks[ki], wins[wi],
                                                what) == 0, "%s", what);
                        }
                        /* rescoring: a few rows, then all of them */
                        if (!b[1].h.full) {
                            int32_t some[4] = {0, 3, 32, V - 1};
                            lq_head_rescore(m, &b[1].h, some, 4, b[1].logits);
                            for (int i = 0; i < 4; i++) {
                                CHECK(lq_head_is_exact(&b[1].h, some[i]));
                                CHECK(same_bits(b[1].logits[some[i]], ref[(size_t)V + some[i]]));
                            }
                            lq_head_rescore(m, &b[1].h, NULL, -1, b[1].logits);
                            CHECK(b[1].h.full);
                            CHECK(memcmp(b[1].logits, ref + V, (size_t)V * sizeof(float)) == 0);
                        }
                        for (int t = 0; t < 3; t++)
                            req_free(&b[t]);
                    }
                }
        }
        lq_scratch_free(&sc[0]);
        lq_scratch_free(&sc[1]);
        synth_close(&s[0]);
        synth_close(&s[1]);
    }
    printf("#   V %d D %d: %d cases, %d over the whole head, %.1f exact rows per case\n", V, D, cases,
           fulls, cases ? (double)exact_rows / cases : 0.0);
    free(w);
    free(x);
    free(ref);
    free(ids0);
}

static void test_head_bounds_adversarial(void) { run_head_cases(3000, 256); }
static void test_head_bounds_ragged(void) { run_head_cases(1100, 200); }

/* The compact copy's bound itself, in double: |w.x - w~.x~| <= err ||x|| + norm ||x - x~||
 * and err, norm cover the row norms. */
static void test_copy_bounds(void)
{
    const int V = 500, D = 160;
    uint16_t *w = make_rows(V, D);
    synth s;
    CHECK(synth_open(&s, "scalar", V, D, w, 1.0f) == 0);
    if (!s.m) {
        free(w);
        return;
    }
    const lq_lm_bound *b = &s.m->lmb;
    int bad = 0;
    for (int r = 0; r < V && bad < 5; r++) {
        double e2 = 0, w2 = 0;
        for (int c = 0; c < D; c++) {
            double wv = lq_f16_to_f32(w[(size_t)r * D + c]);
            double q = (double)b->q8.scale[r] * b->q8.data[(size_t)r * D + c];
            e2 += (wv - q) * (wv - q);
            w2 += wv * wv;
        }
        if (!(b->err[r] >= sqrt(e2)) || !(b->norm[r] >= sqrt(w2)) ||
            b->err[r] > sqrt(e2) * 1.001 + 1e-30) {
            printf("#   row %d: err %.9g (%.9g) norm %.9g (%.9g)\n", r, b->err[r], sqrt(e2), b->norm[r], sqrt(w2));
            bad++;
        }
    }
    CHECK(bad == 0);
    CHECK(b->err[32] == 0.0f); /* the zero row is exact in int8 */
    synth_close(&s);
    free(w);
}

/* ---- generation: exact vs bounded ---- */

typedef struct rec {
    int32_t ids[160];
    float top[160][5];
    int n;
} rec;

static int on_tok(void *user, int32_t id, const char *text, size_t len, float lp, const float *logits)
{
    (void)text;
    (void)len;
    (void)lp;
    (void)logits;
    rec *r = user;
    if (id >= 0 && r->n < 160)
        r->ids[r->n++] = id;
    return 0;
}

static int open_mode(const char *path, int mode, lq_model **m)
{
    lq_err err = {0};
    lq_model_opts o = {0};
    o.n_threads = 2;
    o.lm_head_mode = mode;
    int rc = lq_model_open(path, &o, m, &err);
    if (rc)
        printf("#   %s: %s\n", path, err.msg);
    return rc;
}

static int gen(lq_model *m, const int32_t *prompt, size_t n, const lq_generate_params *p, rec *out,
               lq_generate_result *res)
{
    lq_session *s = NULL;
    lq_err err = {0};
    memset(out, 0, sizeof *out);
    int rc = lq_session_create(m, 256, &s, &err);
    if (!rc)
        rc = lq_generate(s, prompt, n, p, on_tok, out, res, &err);
    if (rc)
        printf("#   generate: %s\n", err.msg);
    lq_session_free(s);
    return rc;
}

/* The top-5 logits along the exact model's greedy path, from the bounded head with k = 5
 * (the request a top-5 sampler makes) and from the exact head: equal ids and bits. */
static int top5_along(lq_model *mb, lq_model *me, const int32_t *prompt, size_t n, const rec *path)
{
    const lq_model_info *in = lq_model_get_info(me);
    int V = in->n_vocab, bad = 0;
    lq_session *sb = NULL, *se = NULL;
    lq_err err = {0};
    req_bufs b;
    req_init(&b, V, in->n_embd, 5, 0.0f);
    float *le = malloc((size_t)V * sizeof(float));
    if (lq_session_create(mb, 256, &sb, &err) || lq_session_create(me, 256, &se, &err)) {
        bad = 1;
        goto out;
    }
    lq_session_set_head(sb, &b.h);
    if (lq_session_eval(sb, prompt, n, b.logits, NULL, &err) || lq_session_eval(se, prompt, n, le, NULL, &err)) {
        bad = 1;
        goto out;
    }
    for (int i = 0; i <= path->n && !bad; i++) {
        int32_t gi[5], ei[5];
        float gv[5], ev[5];
        CHECK(b.h.valid);
        lq_top_k(b.logits, V, 5, gi, gv);
        lq_top_k(le, V, 5, ei, ev);
        for (int j = 0; j < 5; j++)
            if (gi[j] != ei[j] || !same_bits(gv[j], ev[j]))
                bad++;
        if (i == path->n)
            break;
        b.h.valid = 0;
        if (lq_session_decode(sb, path->ids[i], b.logits, &err) || lq_session_decode(se, path->ids[i], le, &err))
            bad++;
    }
out:
    lq_session_free(sb);
    lq_session_free(se);
    req_free(&b);
    free(le);
    return bad;
}

static void compare_greedy(const char *path, int n_prompts, int n_tokens)
{
    lq_model *me = NULL, *mb = NULL;
    if (open_mode(path, LQ_LM_HEAD_EXACT, &me) || open_mode(path, LQ_LM_HEAD_BOUNDED, &mb)) {
        CHECK(0);
        lq_model_close(me);
        lq_model_close(mb);
        return;
    }
    CHECK(lq_model_get_info(mb)->lm_head_bounded == 1);
    CHECK(lq_model_get_info(me)->lm_head_bounded == 0);
    int V = lq_model_get_info(me)->n_vocab;
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = n_tokens;
    p.sampling.temperature = 0;
    p.ignore_eos = 1;
    static rec re, rb;
    int steps = 0, full = 0;
    int64_t rows = 0;
    for (int k = 0; k < n_prompts; k++) {
        int32_t prompt[8];
        for (int i = 0; i < 8; i++)
            prompt[i] = (int32_t)((k * 97 + i * 31 + 5) % (V < 256 ? V : 256));
        size_t np = 3 + (size_t)(k % 6);
        lq_generate_result ra, rbr;
        CHECK(gen(me, prompt, np, &p, &re, &ra) == 0);
        CHECK(gen(mb, prompt, np, &p, &rb, &rbr) == 0);
        CHECK_EQ_INT(rb.n, n_tokens);
        CHECK_EQ_INT(re.n, rb.n);
        CHECK_MSG(memcmp(re.ids, rb.ids, (size_t)re.n * sizeof(int32_t)) == 0, "%s prompt %d", path, k);
        CHECK_EQ_INT(ra.lm_steps, 0);
        steps += rbr.lm_steps;
        full += rbr.lm_full;
        rows += rbr.lm_rows_exact;
        if (k < 6)
            CHECK_MSG(top5_along(mb, me, prompt, np, &re) == 0, "%s prompt %d top-5", path, k);
    }
    CHECK(steps > 0);
    printf("#   %s: %d prompts x %d tokens equal; %.1f rows exact per step of %d, %d steps over all rows\n",
           path, n_prompts, n_tokens, steps ? (double)rows / steps : 0.0, V, full);
    lq_head_stats hs;
    lq_model_head_stats(mb, &hs);
    CHECK(hs.enabled && hs.tokens > 0);
    lq_model_close(me);
    lq_model_close(mb);
}

static const char *fixture_path(void)
{
    static char path[4200];
    lq_fixture_opts o;
    lq_err err = {0};
    snprintf(path, sizeof path, "%s/lmb_demo.gguf", harness_tmpdir());
    if (lq_fixture_preset(&o, "demo", &err) || lq_fixture_write(&o, path, &err)) {
        printf("#   fixture: %s\n", err.msg);
        return NULL;
    }
    return path;
}

static void test_greedy_trained(void)
{
    FILE *f = fopen(TRAINED, "rb");
    if (!f)
        SKIP("%s absent", TRAINED);
    fclose(f);
    compare_greedy(TRAINED, 20, 64);
}

static void test_greedy_fixture(void)
{
    const char *p = fixture_path();
    CHECK(p != NULL);
    if (p)
        compare_greedy(p, 20, 64);
}

/* Sampling and the transforms that move bounds: each variant gives the same tokens with the
 * same seed whether the lm_head is exact or bounded. */
static void compare_variants(const char *path)
{
    lq_model *me = NULL, *mb = NULL;
    if (open_mode(path, LQ_LM_HEAD_EXACT, &me) || open_mode(path, LQ_LM_HEAD_BOUNDED, &mb)) {
        CHECK(0);
        lq_model_close(me);
        lq_model_close(mb);
        return;
    }
    int V = lq_model_get_info(me)->n_vocab;
    lq_grammar *gr = NULL;
    lq_err err = {0};
    const char *gbnf = "root ::= [a-z ]+ \".\"";
    CHECK(lq_grammar_parse(gbnf, strlen(gbnf), &gr, &err) == 0);
    lq_logit_bias bias[3] = {{(int32_t)(V - 7), 30.0f}, {100, -100.0f}, {(int32_t)(V / 2), 12.5f}};
    static rec re, rb;
    uint64_t resc0;
    {
        lq_head_stats hs;
        lq_model_head_stats(mb, &hs);
        resc0 = hs.gen_rescored + hs.gen_full;
    }
    for (int v = 0; v < 7; v++) {
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = 48;
        p.ignore_eos = 1;
        p.sampling.has_seed = 1;
        p.sampling.seed = 1234 + (uint64_t)v;
        const char *what = "";
        switch (v) {
        case 0: what = "top-k 40 T 0.8 (defaults)"; break;
        case 1: what = "greedy + logit_bias"; p.sampling.temperature = 0; p.logit_bias = bias; p.n_logit_bias = 3; break;
        case 2: what = "greedy + penalties"; p.sampling.temperature = 0; p.sampling.repeat_penalty = 1.5f;
                p.sampling.frequency_penalty = 1.0f; p.sampling.presence_penalty = 0.5f; break;
        case 3: what = "greedy + grammar"; p.sampling.temperature = 0; p.grammar = gr; break;
        case 4: what = "top-k 5 + bias"; p.sampling.top_k = 5; p.logit_bias = bias; p.n_logit_bias = 3; break;
        case 5: what = "min-p only"; p.sampling.top_k = 0; p.sampling.top_p = 1.0f; p.sampling.min_p = 0.1f;
                p.sampling.temperature = 0.7f; break;
        case 6: what = "full_logits"; p.full_logits = 1; break;
        }
        int32_t prompt[4] = {1, (int32_t)(17 + v), 42, 7};
        lq_generate_result ra, rbr;
        CHECK(gen(me, prompt, 4, &p, &re, &ra) == 0);
        CHECK(gen(mb, prompt, 4, &p, &rb, &rbr) == 0);
        CHECK_EQ_INT(re.n, rb.n);
        CHECK_MSG(re.n == rb.n && memcmp(re.ids, rb.ids, (size_t)re.n * sizeof(int32_t)) == 0, "%s: %s", path, what);
        if (v == 6)
            CHECK_EQ_INT(rbr.lm_steps, 0);
        else
            CHECK(rbr.lm_steps > 0);
    }
    lq_head_stats hs;
    lq_model_head_stats(mb, &hs);
    /* the bias on an unlikely token and the grammar must have needed rows past the bound */
    CHECK(hs.gen_rescored + hs.gen_full > resc0);
    printf("#   %s: rescored after transforms %llu rows, %llu steps over all rows\n", path,
           (unsigned long long)hs.gen_rescored, (unsigned long long)hs.gen_full);
    lq_grammar_free(gr);
    lq_model_close(me);
    lq_model_close(mb);
}

static void test_variants_trained(void)
{
    FILE *f = fopen(TRAINED, "rb");
    if (!f)
        SKIP("%s absent", TRAINED);
    fclose(f);
    compare_variants(TRAINED);
}

static void test_variants_fixture(void)
{
    const char *p = fixture_path();
    CHECK(p != NULL);
    if (p)
        compare_variants(p);
}

/* The default mode builds the copy on the first generation, not at open: an open that never
 * generates has none; the first generation is bounded from its first token, exact-equal to
 * the exact model; closing an unused model is safe. --lm-head bounded builds it at open. */
static void test_auto_lazy(void)
{
    const char *path = fixture_path();
    CHECK(path != NULL);
    if (!path)
        return;
    unsetenv("LQ_LM_HEAD");
    lq_model *ma = NULL, *me = NULL, *mc = NULL, *mb = NULL;
    if (open_mode(path, LQ_LM_HEAD_AUTO, &ma) || open_mode(path, LQ_LM_HEAD_EXACT, &me) ||
        open_mode(path, LQ_LM_HEAD_AUTO, &mc) || open_mode(path, LQ_LM_HEAD_BOUNDED, &mb)) {
        CHECK(0);
    } else {
        lq_head_stats hs;
        lq_model_head_stats(mc, &hs);
        CHECK(hs.enabled == 1 && hs.ready == 0); /* chosen, not built */
        CHECK(lq_model_get_info(mc)->lm_head_bounded == 1);
        lq_model_close(mc); /* never generated: nothing was built */
        mc = NULL;
        lq_model_head_stats(mb, &hs);
        CHECK(hs.enabled == 1 && hs.ready == 1); /* asked by name: built at open */
        lq_model_head_stats(me, &hs);
        CHECK(hs.enabled == 0 && hs.ready == 0);
        lq_model_head_stats(ma, &hs);
        CHECK(hs.ready == 0);
        lq_generate_params p;
        lq_generate_defaults(&p);
        p.max_tokens = 32;
        p.sampling.temperature = 0;
        p.ignore_eos = 1;
        static rec ra, re;
        lq_generate_result r1, r2;
        int32_t prompt[3] = {1, 50, 60};
        CHECK(gen(ma, prompt, 3, &p, &ra, &r1) == 0);
        CHECK(gen(me, prompt, 3, &p, &re, &r2) == 0);
        CHECK(ra.n == re.n && memcmp(ra.ids, re.ids, (size_t)re.n * sizeof(int32_t)) == 0);
        CHECK(r1.lm_steps > 0 && r1.lm_full == 0); /* bounded from the first token */
        lq_model_head_stats(ma, &hs);
        CHECK(hs.enabled == 1 && hs.ready == 1 && hs.tokens > 0);
        CHECK_EQ_INT(lq_model_head_wait(ma), 1);
        CHECK_EQ_INT(lq_model_head_wait(me), 0);
    }
    lq_model_close(ma);
    lq_model_close(me);
    lq_model_close(mc);
    lq_model_close(mb);
}

typedef struct race_arg {
    lq_model *m;
    rec r;
    lq_generate_result res;
    int rc;
} race_arg;

static void *race_gen(void *arg)
{
    race_arg *a = arg;
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = 24;
    p.sampling.temperature = 0;
    p.ignore_eos = 1;
    int32_t prompt[3] = {1, 70, 80};
    a->rc = gen(a->m, prompt, 3, &p, &a->r, &a->res);
    return NULL;
}

/* Two first generations at once on a fresh default model: one builds the copy, the other
 * waits for it; both are bounded and give the exact model's tokens (TSan runs this). */
static void test_auto_lazy_race(void)
{
    const char *path = fixture_path();
    CHECK(path != NULL);
    if (!path)
        return;
    unsetenv("LQ_LM_HEAD");
    lq_model *ma = NULL, *me = NULL;
    if (open_mode(path, LQ_LM_HEAD_AUTO, &ma) || open_mode(path, LQ_LM_HEAD_EXACT, &me)) {
        CHECK(0);
    } else {
        static race_arg a[2], e;
        pthread_t th[2];
        a[0].m = a[1].m = ma;
        e.m = me;
        int started[2];
        for (int i = 0; i < 2; i++)
            started[i] = pthread_create(&th[i], NULL, race_gen, &a[i]) == 0;
        race_gen(&e);
        for (int i = 0; i < 2; i++) {
            if (started[i])
                pthread_join(th[i], NULL);
            CHECK(started[i] && a[i].rc == 0 && a[i].res.lm_steps > 0 && a[i].res.lm_full == 0);
            CHECK(a[i].r.n == e.r.n && memcmp(a[i].r.ids, e.r.ids, (size_t)e.r.n * sizeof(int32_t)) == 0);
        }
        lq_head_stats hs;
        lq_model_head_stats(ma, &hs);
        CHECK(hs.ready == 1);
    }
    lq_model_close(ma);
    lq_model_close(me);
}

/* Batched decode: several requests through the scheduler (their rows share each step's head,
 * one of them asking for full logits, which makes those steps exact for all) give each
 * request the tokens of its solo run on the exact model. */
static void test_scheduler_batched(void)
{
    const char *path = fixture_path();
    CHECK(path != NULL);
    if (!path)
        return;
    lq_model *mb = NULL, *me = NULL;
    if (open_mode(path, LQ_LM_HEAD_BOUNDED, &mb) || open_mode(path, LQ_LM_HEAD_EXACT, &me)) {
        CHECK(0);
        lq_model_close(mb);
        lq_model_close(me);
        return;
    }
    enum { NR = 6 };
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.max_active = NR;
    so.n_ctx = 256;
    lq_scheduler *S = NULL;
    lq_err err = {0};
    CHECK(lq_scheduler_create(mb, &so, &S, &err) == 0);
    static rec got[NR], want[NR];
    lq_generate_params ps[NR];
    int32_t prompts[NR][5];
    lq_sched_req *rq[NR] = {0};
    for (int i = 0; i < NR; i++) {
        lq_generate_defaults(&ps[i]);
        ps[i].max_tokens = 40;
        ps[i].ignore_eos = 1;
        ps[i].sampling.temperature = i == 4 ? 0.8f : 0.0f; /* 4: top-k 40 seeded */
        ps[i].sampling.has_seed = 1;
        ps[i].sampling.seed = 99;
        ps[i].full_logits = i == 5;
        for (int j = 0; j < 5; j++)
            prompts[i][j] = (int32_t)(1 + 13 * i + 7 * j);
        memset(&got[i], 0, sizeof got[i]);
        if (S)
            CHECK(lq_scheduler_submit(S, prompts[i], 5, &ps[i], on_tok, NULL, &got[i], &rq[i], &err) == 0);
    }
    for (int i = 0; i < NR; i++) {
        if (!rq[i])
            continue;
        CHECK(lq_sched_wait(rq[i], 60000) == 1);
        lq_generate_result res;
        CHECK(lq_sched_result(rq[i], &res, &err) == 0);
        lq_sched_release(rq[i]);
        lq_generate_result r2;
        CHECK(gen(me, prompts[i], 5, &ps[i], &want[i], &r2) == 0);
        CHECK_MSG(got[i].n == want[i].n && memcmp(got[i].ids, want[i].ids, sizeof(int32_t) * (size_t)want[i].n) == 0,
                  "request %d", i);
        if (i == 5)
            CHECK_EQ_INT(res.lm_steps, 0);
    }
    lq_scheduler_free(S);
    lq_head_stats hs;
    lq_model_head_stats(mb, &hs);
    CHECK(hs.tokens > 0);
    lq_model_close(mb);
    lq_model_close(me);
}

int main(void)
{
    RUN(test_copy_bounds);
    RUN(test_head_bounds_adversarial);
    RUN(test_head_bounds_ragged);
    RUN(test_greedy_trained);
    RUN(test_greedy_fixture);
    RUN(test_variants_trained);
    RUN(test_variants_fixture);
    RUN(test_auto_lazy);
    RUN(test_auto_lazy_race);
    RUN(test_scheduler_batched);
    return harness_done();
}
