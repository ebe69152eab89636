/* lq_scheduler: many requests decoded together through lq_session_decode_batch must give
 * exactly what each gives alone through lq_generate (tokens, text, logprobs, finish), and
 * cancel / release / busy / shutdown must behave. Models come from the fixture generator
 * (BitNet "tiny" and a small f32 llama), written to a temp dir. */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "larql/fixture.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/scheduler.h"
#include "larql/tokenizer.h"

static char g_bitnet[4200], g_llama[4200];

static int write_models(void)
{
    const char *tmp = harness_tmpdir();
    if (!tmp)
        return -1;
    lq_err err = {0};
    lq_fixture_opts o;
    if (lq_fixture_preset(&o, "tiny", &err))
        return -1;
    o.seed = 11;
    snprintf(g_bitnet, sizeof g_bitnet, "%s/bitnet.gguf", tmp);
    if (lq_fixture_write(&o, g_bitnet, &err))
        return -1;
    if (lq_fixture_preset(&o, "tiny", &err))
        return -1;
    o.arch = "llama"; /* f32 dense weights: the other kernel path */
    o.seed = 5;
    snprintf(g_llama, sizeof g_llama, "%s/llama.gguf", tmp);
    return lq_fixture_write(&o, g_llama, &err) ? -1 : 0;
}

static lq_model *open_model(const char *path, int threads)
{
    lq_model_opts mo = {0};
    mo.n_threads = threads;
    /* the bounded lm_head built at open: the callbacks' logprobs (over the rows it computed)
     * are then the same alone and batched; in the default mode they would depend on whether
     * the background build had finished */
    mo.lm_head_mode = LQ_LM_HEAD_BOUNDED;
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(path, &mo, &m, &err)) {
        printf("#   open %s: %s\n", path, err.msg);
        return NULL;
    }
    return m;
}

/* What the callbacks saw. */
typedef struct rec {
    int32_t ids[512];
    float lp[512];
    int n;
    char text[16384];
    size_t len;
    int flush_calls;
    int cancel_after;   /* token callback returns 1 after this many tokens (0 = never) */
    int done_calls, done_rc;
    lq_generate_result done_res;
    int tokens_seen;    /* atomic: tokens so far (read by other threads) */
    int after_release;  /* callbacks that came after release (must stay 0) */
    int released;       /* atomic */
} rec;

static int on_token(void *user, int32_t id, const char *text, size_t len, float logprob,
                    const float *logits)
{
    (void)logits;
    rec *r = user;
    if (__atomic_load_n(&r->released, __ATOMIC_ACQUIRE))
        r->after_release++;
    if (len && r->len + len < sizeof r->text) {
        memcpy(r->text + r->len, text, len);
        r->len += len;
    }
    if (id < 0) {
        r->flush_calls++;
        return 0;
    }
    if (r->n < 512) {
        r->ids[r->n] = id;
        r->lp[r->n] = logprob;
    }
    r->n++;
    __atomic_store_n(&r->tokens_seen, r->n, __ATOMIC_RELEASE);
    return r->cancel_after && r->n >= r->cancel_after;
}

static void on_done(void *user, int rc, const lq_generate_result *res, const lq_err *err)
{
    (void)err;
    rec *r = user;
    if (__atomic_load_n(&r->released, __ATOMIC_ACQUIRE))
        r->after_release++;
    r->done_calls++;
    r->done_rc = rc;
    r->done_res = *res;
}

/* One request's definition. */
typedef struct job {
    int32_t prompt[200];
    size_t n_prompt;
    lq_generate_params p;
    const char *stops[2];
} job;

static void make_jobs(job *jobs, int n, int32_t n_vocab, int32_t bos)
{
    for (int k = 0; k < n; k++) {
        job *j = &jobs[k];
        lq_generate_defaults(&j->p);
        /* prompt lengths 1 (lone BOS), short, and over one prefill chunk of 64 */
        j->n_prompt = k == 0 ? 1 : k % 3 == 0 ? 150 : (size_t)(3 + 7 * k);
        j->prompt[0] = bos;
        for (size_t i = 1; i < j->n_prompt; i++)
            j->prompt[i] = (int32_t)((i * 37 + (size_t)k * 101) % (size_t)(n_vocab - 3));
        j->p.max_tokens = 12 + 9 * (k % 4);
        if (k % 2 == 0) {
            j->p.sampling.temperature = 0; /* greedy */
        } else {
            j->p.sampling.temperature = 0.9f;
            j->p.sampling.seed = 1000 + (uint64_t)k;
            j->p.sampling.has_seed = 1;
            j->p.sampling.frequency_penalty = k % 3 == 1 ? 0.5f : 0.0f;
        }
        j->p.ignore_eos = k % 4 == 1;
        if (k == 5) {
            j->stops[0] = "e";
            j->p.stop = j->stops;
            j->p.n_stop = 1;
        }
    }
}

static int same_rec(const rec *a, const rec *b, const lq_generate_result *ra,
                    const lq_generate_result *rb)
{
    if (a->n != b->n || a->len != b->len || memcmp(a->text, b->text, a->len) ||
        a->flush_calls != b->flush_calls || ra->finish != rb->finish ||
        ra->n_generated != rb->n_generated || ra->n_prompt != rb->n_prompt)
        return 0;
    /* Tokens and text must be identical. Logprobs may differ in the last float bits: the
     * dense kernels accumulate a lone row (decode) in another order than a batch of rows
     * (lq_session_decode_batch promises equality to 1e-4, not bit-identity). */
    for (int i = 0; i < a->n && i < 512; i++)
        if (a->ids[i] != b->ids[i] || fabsf(a->lp[i] - b->lp[i]) > 1e-5f) {
            printf("#   token %d: id %d vs %d, logprob %.9g vs %.9g\n", i, a->ids[i], b->ids[i],
                   (double)a->lp[i], (double)b->lp[i]);
            return 0;
        }
    return 1;
}

/* N requests at once through the scheduler == each alone through lq_generate. */
static void check_equal(const char *path, int threads, int max_active, int chunk)
{
    lq_model *m = open_model(path, threads);
    CHECK(m != NULL);
    if (!m)
        return;
    const lq_model_info *mi = lq_model_get_info(m);
    enum { N = 10 };
    static job jobs[N];
    static rec alone[N], together[N];
    lq_generate_result ra[N], rt[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    make_jobs(jobs, N, mi->n_vocab, lq_tokenizer_bos(lq_model_tokenizer(m)));
    lq_err err = {0};
    for (int k = 0; k < N; k++) {
        lq_session *s = NULL;
        CHECK(lq_session_create(m, 0, &s, &err) == 0);
        CHECK_MSG(lq_generate(s, jobs[k].prompt, jobs[k].n_prompt, &jobs[k].p, on_token,
                              &alone[k], &ra[k], &err) == 0, "%s", err.msg);
        lq_session_free(s);
    }
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.max_active = max_active;
    so.prefill_chunk = chunk;
    lq_scheduler *S = NULL;
    CHECK_MSG(lq_scheduler_create(m, &so, &S, &err) == 0, "%s", err.msg);
    if (!S) {
        lq_model_close(m);
        return;
    }
    lq_sched_req *h[N];
    for (int k = 0; k < N; k++)
        CHECK_MSG(lq_scheduler_submit(S, jobs[k].prompt, jobs[k].n_prompt, &jobs[k].p, on_token,
                                      on_done, &together[k], &h[k], &err) == 0, "%s", err.msg);
    int all_same = 1;
    for (int k = 0; k < N; k++) {
        CHECK(lq_sched_wait(h[k], -1) == 1);
        CHECK_EQ_INT(lq_sched_result(h[k], &rt[k], &err), 0);
        CHECK_EQ_INT(together[k].done_calls, 1);
        CHECK_EQ_INT(together[k].done_rc, 0);
        CHECK_EQ_INT(together[k].done_res.n_generated, rt[k].n_generated);
        int same = same_rec(&alone[k], &together[k], &ra[k], &rt[k]);
        if (!same)
            printf("#   request %d differs: alone %d tokens finish %d, together %d tokens finish %d\n", k,
                   alone[k].n, ra[k].finish, together[k].n, rt[k].finish);
        all_same &= same;
        lq_sched_release(h[k]);
    }
    CHECK_MSG(all_same, "%s: scheduler output differs from lq_generate", path);
    lq_scheduler_stats st;
    lq_scheduler_get_stats(S, &st);
    CHECK_MSG(st.max_batch > 1 && st.max_batch <= max_active, "max_batch %d", st.max_batch);
    uint64_t steps = 0, toks = 0;
    for (int b = 0; b < LQ_SCHED_HIST; b++) {
        steps += st.batch_hist[b];
        toks += st.batch_hist[b] * (uint64_t)(b + 1);
    }
    CHECK(steps == st.steps && steps > 0);
    if (max_active < LQ_SCHED_HIST)
        CHECK(toks == st.decode_tokens);
    CHECK_EQ_INT((int)st.submitted, N);
    CHECK_EQ_INT((int)st.finished, N);
    CHECK(st.sessions <= max_active);
    /* finished requests leave the active list right after their done callbacks */
    for (int i = 0; i < 1000 && st.active; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        lq_scheduler_get_stats(S, &st);
    }
    CHECK_EQ_INT(st.active, 0);
    uint64_t prompt_total = 0;
    for (int k = 0; k < N; k++)
        prompt_total += jobs[k].n_prompt;
    CHECK(st.prefill_tokens == prompt_total);
    lq_scheduler_free(S);
    lq_model_close(m);
}

static void test_equal_bitnet(void) { check_equal(g_bitnet, 2, 4, 64); }
static void test_equal_bitnet_all_at_once(void) { check_equal(g_bitnet, 1, 16, 64); }
static void test_equal_bitnet_small_chunks(void) { check_equal(g_bitnet, 2, 3, 5); }
static void test_equal_llama(void) { check_equal(g_llama, 2, 4, 64); }

/* ---- bad input ---- */

static void test_bad_options(void)
{
    lq_model *m = open_model(g_bitnet, 1);
    CHECK(m != NULL);
    if (!m)
        return;
    lq_err err = {0};
    lq_scheduler *S = NULL;
    lq_scheduler_opts o;
    CHECK_EQ_INT(lq_scheduler_create(NULL, NULL, &S, &err), LQ_EINVAL);
    lq_scheduler_opts_init(&o);
    o.max_active = 0;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "max_active");
    lq_scheduler_opts_init(&o);
    o.prefill_chunk = 0;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "prefill_chunk");
    lq_scheduler_opts_init(&o);
    o.max_queued = -1;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), LQ_EINVAL);
    lq_scheduler_opts_init(&o);
    o.n_ctx = 1 << 20; /* over the model's training context */
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), LQ_ERANGE);
    CHECK(S == NULL);
    lq_scheduler_free(NULL);

    lq_scheduler_opts_init(&o);
    o.n_ctx = 32;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), 0);
    CHECK_EQ_INT(lq_scheduler_n_ctx(S), 32);
    lq_generate_params p;
    lq_generate_defaults(&p);
    int32_t ids[40] = {1, 2, 3};
    lq_sched_req *h = NULL;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 0, &p, NULL, NULL, NULL, &h, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_scheduler_submit(S, NULL, 3, &p, NULL, NULL, NULL, &h, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 33, &p, NULL, NULL, NULL, &h, &err), LQ_ECONTEXT);
    CHECK_STR_CONTAINS(err.msg, "context");
    p.sampling.temperature = -0.0f;
    p.sampling.top_p = 2.0f;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, NULL, NULL, NULL, &h, &err), LQ_EINVAL);
    lq_generate_defaults(&p);
    p.max_tokens = -1;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, NULL, NULL, NULL, &h, &err), LQ_EINVAL);
    lq_generate_defaults(&p);
    const char *empty[1] = {""};
    p.stop = empty;
    p.n_stop = 1;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, NULL, NULL, NULL, &h, &err), LQ_EINVAL);
    lq_generate_defaults(&p);
    int32_t bad_eos[1] = {100000};
    p.eos_ids = bad_eos;
    p.n_eos = 1;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, NULL, NULL, NULL, &h, &err), LQ_EINVAL);
    lq_generate_defaults(&p);
    ids[1] = 100000; /* token id out of range: fails at prefill, reported through the result */
    p.max_tokens = 4;
    rec r;
    memset(&r, 0, sizeof r);
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &r, &h, &err), 0);
    CHECK(lq_sched_wait(h, -1));
    lq_generate_result res;
    CHECK_EQ_INT(lq_sched_result(h, &res, &err), LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "out of range");
    CHECK_EQ_INT(r.done_calls, 1);
    CHECK_EQ_INT(r.done_rc, LQ_ERANGE);
    CHECK_EQ_INT(r.n, 0);
    lq_sched_release(h);
    /* a prompt that fills the context exactly: no room, LENGTH with nothing generated */
    for (int i = 0; i < 32; i++)
        ids[i] = 1 + i;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 32, &p, NULL, NULL, NULL, &h, &err), 0);
    CHECK(lq_sched_wait(h, -1));
    CHECK_EQ_INT(lq_sched_result(h, &res, &err), 0);
    CHECK_EQ_INT(res.finish, LQ_FINISH_LENGTH);
    CHECK_EQ_INT(res.n_generated, 0);
    lq_sched_release(h);
    lq_scheduler_stats st;
    lq_scheduler_get_stats(S, &st);
    CHECK_EQ_INT((int)st.failed, 1);
    lq_scheduler_free(S);
    lq_model_close(m);
}

/* ---- cancel, release, busy ---- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int wait_tokens(rec *r, int n)
{
    for (int i = 0; i < 20000; i++) {
        if (__atomic_load_n(&r->tokens_seen, __ATOMIC_ACQUIRE) >= n)
            return 1;
        sleep_ms(1);
    }
    return 0;
}

static void long_params(lq_generate_params *p)
{
    lq_generate_defaults(p);
    p->max_tokens = 100000; /* clamped to the context */
    p->ignore_eos = 1;
    p->sampling.temperature = 0;
}

static void test_cancel(void)
{
    lq_model *m = open_model(g_bitnet, 1);
    CHECK(m != NULL);
    if (!m)
        return;
    lq_err err = {0};
    lq_scheduler_opts o;
    lq_scheduler_opts_init(&o);
    o.max_active = 2;
    o.max_queued = 1;
    lq_scheduler *S = NULL;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), 0);
    lq_generate_params p;
    long_params(&p);
    int32_t ids[3] = {317, 5, 9};
    static rec a, b, c, d, e;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    memset(&d, 0, sizeof d);
    memset(&e, 0, sizeof e);
    lq_sched_req *ha, *hb, *hc, *hd, *he;
    /* a and b run, c waits in the queue, d is refused */
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &a, &ha, &err), 0);
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &b, &hb, &err), 0);
    CHECK(wait_tokens(&a, 2) && wait_tokens(&b, 2));
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &c, &hc, &err), 0);
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &d, &hd, &err), LQ_EBUSY);
    CHECK_STR_CONTAINS(err.msg, "max_active 2");
    lq_scheduler_stats st;
    lq_scheduler_get_stats(S, &st);
    CHECK_EQ_INT(st.active, 2);
    CHECK_EQ_INT(st.queued, 1);
    CHECK(lq_sched_wait(hc, 0) == 0); /* still queued */

    /* cancel while queued: finishes with nothing generated */
    lq_sched_cancel(hc);
    CHECK(lq_sched_wait(hc, 20000));
    lq_generate_result res;
    CHECK_EQ_INT(lq_sched_result(hc, &res, &err), 0);
    CHECK_EQ_INT(res.finish, LQ_FINISH_CANCELED);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(c.done_calls, 1);
    lq_sched_release(hc);

    /* cancel while decoding: stops within one token of the cancel */
    int seen = __atomic_load_n(&a.tokens_seen, __ATOMIC_ACQUIRE);
    lq_sched_cancel(ha);
    CHECK(lq_sched_wait(ha, 20000));
    CHECK_EQ_INT(lq_sched_result(ha, &res, &err), 0);
    CHECK_EQ_INT(res.finish, LQ_FINISH_CANCELED);
    CHECK_MSG(a.n <= seen + 1, "%d tokens after cancel at %d", a.n, seen);
    CHECK_EQ_INT(a.done_calls, 1);
    CHECK(a.n < 200);
    lq_sched_release(ha);

    /* release while running: no callback after release returns, the slot is freed */
    __atomic_store_n(&b.released, 1, __ATOMIC_RELEASE);
    lq_sched_release(hb);
    sleep_ms(50);
    CHECK_EQ_INT(b.after_release, 0);
    CHECK_EQ_INT(b.done_calls, 0);
    int freed = 0;
    for (int i = 0; i < 2000 && !freed; i++) {
        lq_scheduler_get_stats(S, &st);
        freed = st.active == 0 && st.queued == 0;
        sleep_ms(5);
    }
    CHECK_MSG(freed, "active %d queued %d", st.active, st.queued);
    CHECK_EQ_INT((int)st.canceled, 3);
    CHECK(st.sessions <= 2);

    /* the callback asking to stop, as with lq_generate */
    e.cancel_after = 3;
    CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &e, &he, &err), 0);
    CHECK(lq_sched_wait(he, -1));
    CHECK_EQ_INT(lq_sched_result(he, &res, &err), 0);
    CHECK_EQ_INT(res.finish, LQ_FINISH_CANCELED);
    CHECK_EQ_INT(e.n, 3);
    CHECK_EQ_INT(res.n_generated, 3);
    lq_sched_release(he);
    lq_scheduler_free(S);
    lq_model_close(m);
}

/* Freeing the scheduler with requests running and queued (handles released first, as
 * the API asks) ends them and frees everything (checked under ASan). */
static void test_free_while_busy(void)
{
    lq_model *m = open_model(g_bitnet, 1);
    CHECK(m != NULL);
    if (!m)
        return;
    lq_err err = {0};
    lq_scheduler_opts o;
    lq_scheduler_opts_init(&o);
    o.max_active = 2;
    lq_scheduler *S = NULL;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), 0);
    lq_generate_params p;
    long_params(&p);
    int32_t ids[3] = {317, 5, 9};
    static rec r[4];
    memset(r, 0, sizeof r);
    lq_sched_req *h[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(lq_scheduler_submit(S, ids, 3, &p, on_token, on_done, &r[i], &h[i], &err), 0);
    CHECK(wait_tokens(&r[0], 2));
    /* a handle kept until the end: its done callback reports the cancel */
    for (int i = 1; i < 4; i++) {
        __atomic_store_n(&r[i].released, 1, __ATOMIC_RELEASE);
        lq_sched_release(h[i]);
    }
    lq_sched_cancel(h[0]);
    CHECK(lq_sched_wait(h[0], 20000));
    lq_sched_release(h[0]);
    lq_scheduler_free(S);
    CHECK_EQ_INT(r[0].done_calls, 1);
    for (int i = 1; i < 4; i++)
        CHECK_EQ_INT(r[i].after_release, 0);
    lq_model_close(m);
}

/* Submissions from several threads at once while others are cancelled. */
typedef struct thr_arg {
    lq_scheduler *S;
    int k, ok;
} thr_arg;

static void *submitter(void *arg)
{
    thr_arg *t = arg;
    lq_generate_params p;
    lq_generate_defaults(&p);
    p.max_tokens = 6 + t->k % 5;
    p.sampling.temperature = 0;
    int32_t ids[4] = {317, (int32_t)(1 + t->k), 7, 9};
    rec *r = calloc(1, sizeof *r);
    lq_err err = {0};
    lq_sched_req *h = NULL;
    t->ok = 0;
    if (!r)
        return NULL;
    if (lq_scheduler_submit(t->S, ids, 4, &p, on_token, on_done, r, &h, &err) == 0) {
        if (t->k % 3 == 0)
            lq_sched_cancel(h);
        lq_sched_wait(h, -1);
        lq_generate_result res;
        int rc = lq_sched_result(h, &res, &err);
        t->ok = rc == 0 && r->done_calls == 1 &&
                (t->k % 3 == 0 ? res.n_generated <= p.max_tokens : res.n_generated == r->n);
        lq_sched_release(h);
    }
    free(r);
    return NULL;
}

static void test_many_threads(void)
{
    lq_model *m = open_model(g_bitnet, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    lq_err err = {0};
    lq_scheduler_opts o;
    lq_scheduler_opts_init(&o);
    o.max_active = 5;
    o.max_queued = 64;
    lq_scheduler *S = NULL;
    CHECK_EQ_INT(lq_scheduler_create(m, &o, &S, &err), 0);
    enum { T = 24 };
    pthread_t th[T];
    thr_arg a[T];
    for (int i = 0; i < T; i++) {
        a[i].S = S;
        a[i].k = i;
        pthread_create(&th[i], NULL, submitter, &a[i]);
    }
    int good = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        good += a[i].ok;
    }
    CHECK_EQ_INT(good, T);
    lq_scheduler_stats st;
    lq_scheduler_get_stats(S, &st);
    CHECK_EQ_INT((int)st.finished, T);
    CHECK(st.sessions <= 5);
    lq_scheduler_free(S);
    lq_model_close(m);
}

/* A chat's first turn: a 41-token greedy prompt (its ids from mul and add), 20 tokens. */
static void first_turn(job *a, const lq_model_info *mi, int32_t bos, size_t mul, size_t add)
{
    lq_generate_defaults(&a->p);
    a->p.sampling.temperature = 0;
    a->p.max_tokens = 20;
    a->p.ignore_eos = 1;
    a->n_prompt = 41;
    a->prompt[0] = bos;
    for (size_t i = 1; i < a->n_prompt; i++)
        a->prompt[i] = (int32_t)((i * mul + add) % (size_t)(mi->n_vocab - 3));
}

/* 2 running, prefill chunks of 16, a prompt cache of 2. */
static void cache_opts(lq_scheduler_opts *so)
{
    lq_scheduler_opts_init(so);
    so->max_active = 2;
    so->prefill_chunk = 16;
    so->prompt_cache = 2;
}

/* The prompt cache: a request whose prompt extends a finished one's prompt and output (a
 * chat's next turn) reuses that session's KV and prefills only the rest, with the tokens and
 * logprobs a fresh lq_generate gives; an opted-out request neither uses nor fills it; the
 * cache holds at most its size. */
static void check_prompt_cache(const char *path)
{
    lq_model *m = open_model(path, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t bos = lq_tokenizer_bos(lq_model_tokenizer(m));
    static job a, b, d;
    static rec ra, rb, rb_ref, rc2, rd;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    memset(&rb_ref, 0, sizeof rb_ref);
    memset(&rc2, 0, sizeof rc2);
    memset(&rd, 0, sizeof rd);
    first_turn(&a, mi, bos, 53, 7);
    lq_scheduler_opts so;
    cache_opts(&so);
    lq_scheduler *S = NULL;
    lq_err err = {0};
    CHECK_MSG(lq_scheduler_create(m, &so, &S, &err) == 0, "%s", err.msg);
    if (!S) {
        lq_model_close(m);
        return;
    }
    lq_sched_req *h = NULL;
    lq_generate_result res, res_ref;
    CHECK(lq_scheduler_submit(S, a.prompt, a.n_prompt, &a.p, on_token, on_done, &ra, &h, &err) == 0);
    CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res, &err) == 0);
    lq_sched_release(h);
    CHECK_EQ_INT(ra.n, 20);
    lq_scheduler_stats st;
    lq_scheduler_get_stats(S, &st);
    CHECK_EQ_INT(st.cache_entries, 1);
    CHECK(st.cache_hits == 0);

    /* the next turn: the prompt, the answer, and 7 new tokens */
    b = a;
    b.n_prompt = 0;
    for (size_t i = 0; i < a.n_prompt; i++)
        b.prompt[b.n_prompt++] = a.prompt[i];
    for (int i = 0; i < ra.n; i++)
        b.prompt[b.n_prompt++] = ra.ids[i];
    for (int i = 0; i < 7; i++)
        b.prompt[b.n_prompt++] = (int32_t)((i * 31 + 5) % (mi->n_vocab - 3));
    b.p.max_tokens = 16;
    CHECK(lq_scheduler_submit(S, b.prompt, b.n_prompt, &b.p, on_token, on_done, &rb, &h, &err) == 0);
    CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res, &err) == 0);
    lq_sched_release(h);
    lq_scheduler_get_stats(S, &st);
    CHECK_MSG(st.cache_hits == 1 && st.cache_reused_tokens == a.n_prompt + 19,
              "hits %llu, reused %llu (the prompt and the 19 answer tokens fed)", (unsigned long long)st.cache_hits,
              (unsigned long long)st.cache_reused_tokens);
    CHECK_MSG(st.prefill_tokens == a.n_prompt + (b.n_prompt - (a.n_prompt + 19)), "prefilled %llu",
              (unsigned long long)st.prefill_tokens);
    lq_session *fresh = NULL;
    CHECK(lq_session_create(m, 0, &fresh, &err) == 0);
    CHECK(lq_generate(fresh, b.prompt, b.n_prompt, &b.p, on_token, &rb_ref, &res_ref, &err) == 0);
    lq_session_free(fresh);
    CHECK_MSG(same_rec(&rb_ref, &rb, &res_ref, &res), "%s: the cached prefix changed the answer", path);
    int bits = rb.n == rb_ref.n && !memcmp(rb.lp, rb_ref.lp, sizeof(float) * (size_t)rb.n);
    printf("#   %s: logprobs with the cached prefix %s those of a fresh prefill\n", path,
           bits ? "bit-identical to" : "within 1e-5 of");

    /* opted out: no lookup, no entry left behind */
    int entries = st.cache_entries;
    uint64_t misses = st.cache_misses;
    b.p.no_prompt_cache = 1;
    CHECK(lq_scheduler_submit(S, b.prompt, b.n_prompt, &b.p, on_token, on_done, &rc2, &h, &err) == 0);
    CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res, &err) == 0);
    lq_sched_release(h);
    lq_scheduler_get_stats(S, &st);
    CHECK(st.cache_hits == 1 && st.cache_misses == misses && st.cache_entries == entries);
    CHECK(same_rec(&rb_ref, &rc2, &res_ref, &res));

    /* unrelated prompts: a miss each, and never more entries than the cache's size */
    for (int k = 0; k < 3; k++) {
        d = a;
        d.p.max_tokens = 4;
        for (size_t i = 1; i < d.n_prompt; i++)
            d.prompt[i] = (int32_t)((i * 17 + (size_t)k * 29 + 3) % (size_t)(mi->n_vocab - 3));
        d.prompt[1] = (int32_t)(k + 1); /* differs from every earlier prompt at position 1 */
        memset(&rd, 0, sizeof rd);
        CHECK(lq_scheduler_submit(S, d.prompt, d.n_prompt, &d.p, on_token, on_done, &rd, &h, &err) == 0);
        CHECK(lq_sched_wait(h, -1) == 1);
        lq_sched_release(h);
    }
    lq_scheduler_get_stats(S, &st);
    CHECK_MSG(st.cache_hits == 1 && st.cache_misses == misses + 3, "hits %llu misses %llu",
              (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses);
    CHECK_MSG(st.cache_entries == 2 && st.sessions <= so.max_active + so.prompt_cache, "entries %d sessions %d",
              st.cache_entries, st.sessions);
    lq_scheduler_free(S);
    so.prompt_cache = 4097;
    CHECK(lq_scheduler_create(m, &so, &S, &err) == LQ_EINVAL && strstr(err.msg, "prompt_cache"));
    lq_model_close(m);
}

static void test_prompt_cache_bitnet(void) { check_prompt_cache(g_bitnet); }
static void test_prompt_cache_llama(void) { check_prompt_cache(g_llama); }

/* Requests submitted together behind one prompt (an n > 1 request's choices): the first
 * prefills it, the others copy its KV and evaluate only their last token; every answer is
 * what lq_generate gives alone. */
static void check_shared_prefix(const char *path)
{
    lq_model *m = open_model(path, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    const lq_model_info *mi = lq_model_get_info(m);
    enum { N = 4, P = 100 };
    static job jobs[N];
    static rec alone[N], together[N];
    lq_generate_result ra[N], rt[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    for (int k = 0; k < N; k++) {
        job *j = &jobs[k];
        lq_generate_defaults(&j->p);
        j->n_prompt = P;
        j->prompt[0] = lq_tokenizer_bos(lq_model_tokenizer(m));
        for (size_t i = 1; i < P; i++)
            j->prompt[i] = (int32_t)((i * 41 + 9) % (size_t)(mi->n_vocab - 3));
        if (k == N - 1)
            j->prompt[P - 1] = (int32_t)((j->prompt[P - 1] + 1) % (mi->n_vocab - 3)); /* last token differs */
        j->p.max_tokens = 10;
        j->p.ignore_eos = 1;
        j->p.sampling.temperature = k % 2 ? 0.8f : 0.0f;
        j->p.sampling.seed = 50 + (uint64_t)k;
        j->p.sampling.has_seed = 1;
    }
    lq_err err = {0};
    for (int k = 0; k < N; k++) {
        lq_session *sess = NULL;
        CHECK(lq_session_create(m, 0, &sess, &err) == 0);
        CHECK(lq_generate(sess, jobs[k].prompt, jobs[k].n_prompt, &jobs[k].p, on_token, &alone[k], &ra[k], &err) == 0);
        lq_session_free(sess);
    }
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.max_active = N;
    so.prefill_chunk = 32;
    so.prompt_cache = 2;
    lq_scheduler *S = NULL;
    CHECK_MSG(lq_scheduler_create(m, &so, &S, &err) == 0, "%s", err.msg);
    if (!S) {
        lq_model_close(m);
        return;
    }
    lq_sched_req *h[N];
    for (int k = 0; k < N; k++)
        CHECK(lq_scheduler_submit(S, jobs[k].prompt, jobs[k].n_prompt, &jobs[k].p, on_token, on_done, &together[k],
                                  &h[k], &err) == 0);
    int same = 1;
    for (int k = 0; k < N; k++) {
        CHECK(lq_sched_wait(h[k], -1) == 1 && lq_sched_result(h[k], &rt[k], &err) == 0);
        same &= same_rec(&alone[k], &together[k], &ra[k], &rt[k]);
        lq_sched_release(h[k]);
    }
    CHECK_MSG(same, "%s: a request that copied the shared prefix answers differently", path);
    lq_scheduler_stats st;
    lq_scheduler_get_stats(S, &st);
    /* each of the others copies the prefix from the first while it runs, or, when the loop
     * admitted it after the first had ended (a slow submitting thread), from the cache */
    CHECK_MSG(st.shared_hits + st.cache_hits == N - 1 &&
                  st.shared_tokens + st.cache_reused_tokens == (uint64_t)(N - 1) * (P - 1),
              "shared %llu requests, %llu positions; from the cache %llu, %llu", (unsigned long long)st.shared_hits,
              (unsigned long long)st.shared_tokens, (unsigned long long)st.cache_hits,
              (unsigned long long)st.cache_reused_tokens);
    CHECK_MSG(st.prefill_tokens == P + (N - 1), "prefilled %llu positions (the prompt once, then one each)",
              (unsigned long long)st.prefill_tokens);
    lq_scheduler_free(S);
    lq_model_close(m);
}

static void test_shared_prefix_bitnet(void) { check_shared_prefix(g_bitnet); }
static void test_shared_prefix_llama(void) { check_shared_prefix(g_llama); }

/* Waits (a bound against a hang, not a timing check) until nothing runs or waits. */
static void wait_idle(lq_scheduler *S)
{
    lq_scheduler_stats st;
    for (int i = 0; i < 60000; i++) {
        lq_scheduler_get_stats(S, &st);
        if (!st.active && !st.queued)
            return;
        sleep_ms(1);
    }
}

/* lq_scheduler_warm: the next turn as the client's text tokenizes it (here: the prompt, the
 * first 10 answer tokens, then 12 others, as when the answer's text does not tokenize back to
 * the generated tokens) is prefilled into the cache on top of the finished request's entry;
 * the next turn then prefills only its new tokens, and answers with the logprobs it has
 * without the cache, bit for bit. A warm-up the cache already covers, or with nothing to
 * build on, does nothing; one submitted just before the next turn is shared by it (never
 * prefilled twice). Bad tokens are refused. */
static void check_warm(const char *path)
{
    lq_model *m = open_model(path, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t bos = lq_tokenizer_bos(lq_model_tokenizer(m));
    static job a, b;
    static rec ra, rb, rb_off, rb_ref;
    static int32_t w[200];
    lq_scheduler_opts so;
    cache_opts(&so);
    lq_scheduler *S = NULL;
    lq_err err = {0};
    CHECK_MSG(lq_scheduler_create(m, &so, &S, &err) == 0, "%s", err.msg);
    if (!S) {
        lq_model_close(m);
        return;
    }
    for (int turn = 0; turn < 2; turn++) {
        memset(&ra, 0, sizeof ra);
        memset(&rb, 0, sizeof rb);
        memset(&rb_off, 0, sizeof rb_off);
        memset(&rb_ref, 0, sizeof rb_ref);
        first_turn(&a, mi, bos, 53, 7 + (size_t)turn * 11);
        lq_sched_req *h = NULL;
        lq_generate_result res, res_off, res_ref;
        CHECK(lq_scheduler_submit(S, a.prompt, a.n_prompt, &a.p, on_token, on_done, &ra, &h, &err) == 0);
        CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res, &err) == 0);
        lq_sched_release(h);
        wait_idle(S);
        size_t nw = 0;
        for (size_t i = 0; i < a.n_prompt; i++)
            w[nw++] = a.prompt[i];
        for (int i = 0; i < 10; i++)
            w[nw++] = ra.ids[i];
        for (int i = 0; i < 12; i++)
            w[nw++] = (int32_t)((i * 19 + 2) % (mi->n_vocab - 3));
        b = a;
        b.n_prompt = 0;
        for (size_t i = 0; i < nw; i++)
            b.prompt[b.n_prompt++] = w[i];
        for (int i = 0; i < 7; i++)
            b.prompt[b.n_prompt++] = (int32_t)((i * 31 + 5) % (mi->n_vocab - 3));
        b.p.max_tokens = 16;
        lq_scheduler_stats s0, st;
        lq_scheduler_get_stats(S, &s0);
        CHECK(lq_scheduler_warm(S, w, nw, &err) == 0);
        if (turn == 0) /* think time: the warm-up ends before the next turn comes */
            wait_idle(S);
        CHECK(lq_scheduler_submit(S, b.prompt, b.n_prompt, &b.p, on_token, on_done, &rb, &h, &err) == 0);
        CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res, &err) == 0);
        lq_sched_release(h);
        wait_idle(S);
        lq_scheduler_get_stats(S, &st);
        /* the entry held the prompt and 19 answer tokens: 51 of them are w's */
        CHECK_MSG(st.warm_prefills == s0.warm_prefills + 1 && st.warm_tokens == s0.warm_tokens + (nw - 51),
                  "turn %d: warm-ups %llu, %llu positions", turn, (unsigned long long)st.warm_prefills,
                  (unsigned long long)st.warm_tokens);
        CHECK_MSG(st.prefill_tokens - s0.prefill_tokens == (nw - 51) + 7,
                  "turn %d: prefilled %llu positions (w's tail once, then the 7 new ones)", turn,
                  (unsigned long long)(st.prefill_tokens - s0.prefill_tokens));
        CHECK_MSG(st.cache_reused_tokens - s0.cache_reused_tokens == nw, "turn %d: reused %llu", turn,
                  (unsigned long long)(st.cache_reused_tokens - s0.cache_reused_tokens));
        CHECK(st.finished == s0.finished + 1 && st.submitted == s0.submitted + 1);
        /* the same request without the cache, and alone through lq_generate */
        b.p.no_prompt_cache = 1;
        CHECK(lq_scheduler_submit(S, b.prompt, b.n_prompt, &b.p, on_token, on_done, &rb_off, &h, &err) == 0);
        CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, &res_off, &err) == 0);
        lq_sched_release(h);
        lq_session *fresh = NULL;
        CHECK(lq_session_create(m, 0, &fresh, &err) == 0);
        CHECK(lq_generate(fresh, b.prompt, b.n_prompt, &b.p, on_token, &rb_ref, &res_ref, &err) == 0);
        lq_session_free(fresh);
        CHECK_MSG(same_rec(&rb_ref, &rb, &res_ref, &res), "%s: the warmed prefix changed the answer", path);
        CHECK_MSG(rb.n == rb_off.n && !memcmp(rb.lp, rb_off.lp, sizeof(float) * (size_t)rb.n) &&
                      !memcmp(rb.ids, rb_off.ids, sizeof(int32_t) * (size_t)rb.n),
                  "%s turn %d: logprobs with the warmed prefix differ from cache_prompt off", path, turn);
    }
    /* nothing to do: covered already, or no entry sharing 8 tokens */
    lq_scheduler_stats s0, st;
    lq_scheduler_get_stats(S, &s0);
    CHECK(lq_scheduler_warm(S, b.prompt, 30, &err) == 0);
    int32_t other[20];
    for (int i = 0; i < 20; i++)
        other[i] = (int32_t)(i + 1);
    CHECK(lq_scheduler_warm(S, other, 20, &err) == 0);
    wait_idle(S);
    lq_scheduler_get_stats(S, &st);
    CHECK(st.warm_prefills == s0.warm_prefills && st.prefill_tokens == s0.prefill_tokens);
    /* no free slot: refused, nothing delayed */
    static rec busy[2];
    lq_sched_req *hb[2];
    lq_generate_params lp;
    long_params(&lp);
    memset(busy, 0, sizeof busy);
    for (int i = 0; i < 2; i++)
        CHECK(lq_scheduler_submit(S, a.prompt, a.n_prompt, &lp, on_token, on_done, &busy[i], &hb[i], &err) == 0);
    CHECK(wait_tokens(&busy[0], 1) && wait_tokens(&busy[1], 1));
    CHECK(lq_scheduler_warm(S, w, 30, &err) == LQ_EBUSY);
    for (int i = 0; i < 2; i++)
        lq_sched_release(hb[i]);
    /* bad tokens */
    CHECK(lq_scheduler_warm(S, other, 1, &err) == LQ_EINVAL);
    CHECK(lq_scheduler_warm(S, NULL, 5, &err) == LQ_EINVAL);
    other[3] = mi->n_vocab;
    CHECK(lq_scheduler_warm(S, other, 20, &err) == LQ_EINVAL && strstr(err.msg, "outside"));
    other[3] = -1;
    CHECK(lq_scheduler_warm(S, other, 20, &err) == LQ_EINVAL);
    static int32_t big[100000];
    CHECK(lq_scheduler_warm(S, big, (size_t)lq_scheduler_n_ctx(S) + 1, &err) == LQ_EINVAL);
    CHECK(lq_scheduler_warm(NULL, other, 20, &err) == LQ_EINVAL);
    lq_scheduler_free(S);
    /* no cache: nothing to warm */
    so.prompt_cache = 0;
    CHECK(lq_scheduler_create(m, &so, &S, &err) == 0);
    CHECK(lq_scheduler_warm(S, w, 20, &err) == 0);
    lq_scheduler_free(S);
    lq_model_close(m);
}

static void test_warm_bitnet(void) { check_warm(g_bitnet); }
static void test_warm_llama(void) { check_warm(g_llama); }

/* One greedy request through S: its answer in *out. */
static void run_one(lq_scheduler *S, const job *j, rec *out, lq_generate_result *res)
{
    lq_err err = {0};
    lq_sched_req *h = NULL;
    memset(out, 0, sizeof *out);
    CHECK(lq_scheduler_submit(S, j->prompt, j->n_prompt, &j->p, on_token, on_done, out, &h, &err) == 0);
    CHECK(lq_sched_wait(h, -1) == 1 && lq_sched_result(h, res, &err) == 0);
    lq_sched_release(h);
}

static int copy_file(const char *from, const char *to, long keep, long flip)
{
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    int c, ok = f && g;
    for (long i = 0; ok && (c = fgetc(f)) != EOF && (keep < 0 || i < keep); i++)
        fputc(i == flip ? c ^ 0x40 : c, g);
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return ok ? 0 : -1;
}

/* Slot save/restore: a cached prompt written to disk and read back by another scheduler gives
 * the next turn the prefix it had (only the new tokens prefilled) and the same answer as
 * without the cache, bit for bit; an unknown slot, a missing, short, corrupt or foreign file
 * (another shape; the same shape with other weights) are refused. */
static void test_slot_save_restore(void)
{
    lq_model *m = open_model(g_bitnet, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    const lq_model_info *mi = lq_model_get_info(m);
    static job a, b;
    static rec ra, rb, rb_off;
    lq_generate_result res;
    first_turn(&a, mi, lq_tokenizer_bos(lq_model_tokenizer(m)), 43, 3);
    lq_scheduler_opts so;
    cache_opts(&so);
    lq_scheduler *S = NULL;
    lq_err err = {0};
    CHECK(lq_scheduler_create(m, &so, &S, &err) == 0);
    run_one(S, &a, &ra, &res);
    char path[4400], bad[4400];
    snprintf(path, sizeof path, "%s/slot.bin", harness_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.bin", harness_tmpdir());
    size_t nt = 0, nb = 0;
    CHECK_MSG(lq_scheduler_cache_save(S, 0, path, &nt, &nb, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT((int)nt, (int)a.n_prompt + 19);
    CHECK(lq_scheduler_cache_save(S, 1, path, &nt, &nb, &err) == LQ_ENOTFOUND && strstr(err.msg, "slot 1"));
    CHECK(lq_scheduler_cache_save(S, -1, path, &nt, &nb, &err) == LQ_EINVAL);
    lq_scheduler_free(S);

    /* another scheduler: the restored prefix serves the next turn */
    b = a;
    b.n_prompt = 0;
    for (size_t i = 0; i < a.n_prompt; i++)
        b.prompt[b.n_prompt++] = a.prompt[i];
    for (int i = 0; i < ra.n; i++)
        b.prompt[b.n_prompt++] = ra.ids[i];
    for (int i = 0; i < 5; i++)
        b.prompt[b.n_prompt++] = (int32_t)(i * 7 + 1);
    CHECK(lq_scheduler_create(m, &so, &S, &err) == 0);
    size_t nt2 = 0, nb2 = 0;
    CHECK_MSG(lq_scheduler_cache_restore(S, path, &nt2, &nb2, &err) == 0, "%s", err.msg);
    CHECK(nt2 == nt && nb2 == nb);
    lq_scheduler_stats st;
    run_one(S, &b, &rb, &res);
    lq_scheduler_get_stats(S, &st);
    CHECK_MSG(st.cache_reused_tokens == nt && st.prefill_tokens == b.n_prompt - nt, "reused %llu prefilled %llu",
              (unsigned long long)st.cache_reused_tokens, (unsigned long long)st.prefill_tokens);
    b.p.no_prompt_cache = 1;
    run_one(S, &b, &rb_off, &res);
    CHECK_MSG(rb.n == rb_off.n && !memcmp(rb.ids, rb_off.ids, sizeof(int32_t) * (size_t)rb.n) &&
                  !memcmp(rb.lp, rb_off.lp, sizeof(float) * (size_t)rb.n),
              "the restored prefix changed the answer");

    /* bad files */
    snprintf(bad, sizeof bad, "%s/none.bin", harness_tmpdir());
    CHECK(lq_scheduler_cache_restore(S, bad, NULL, NULL, &err) == LQ_ENOTFOUND);
    snprintf(bad, sizeof bad, "%s/bad.bin", harness_tmpdir());
    long cut[] = {0, 10, 60, (long)nb - 1};
    for (int i = 0; i < 4; i++) {
        CHECK(copy_file(path, bad, cut[i], -1) == 0);
        CHECK_MSG(lq_scheduler_cache_restore(S, bad, NULL, NULL, &err) == LQ_EFORMAT, "cut at %ld", cut[i]);
    }
    CHECK(copy_file(path, bad, -1, (long)nb / 2) == 0); /* a flipped bit in the KV */
    CHECK(lq_scheduler_cache_restore(S, bad, NULL, NULL, &err) == LQ_EFORMAT && strstr(err.msg, "checksum"));
    CHECK(copy_file(path, bad, -1, 60) == 0); /* a token id */
    CHECK(lq_scheduler_cache_restore(S, bad, NULL, NULL, &err) == LQ_EFORMAT);
    FILE *f = fopen(bad, "ab");
    CHECK(f && fputc(0, f) == 0 && fclose(f) == 0); /* a byte too many */
    CHECK(copy_file(path, bad, -1, -1) == 0 && (f = fopen(bad, "ab")) && fputc(0, f) == 0 && fclose(f) == 0);
    CHECK(lq_scheduler_cache_restore(S, bad, NULL, NULL, &err) == LQ_EFORMAT);
    lq_scheduler_free(S);

    /* another model of another shape, and one of the same shape with other weights */
    lq_fixture_opts o;
    CHECK(lq_fixture_preset(&o, "tiny", &err) == 0);
    o.seed = 99;
    snprintf(bad, sizeof bad, "%s/twin.gguf", harness_tmpdir());
    CHECK(lq_fixture_write(&o, bad, &err) == 0);
    const char *others[2] = {g_llama, bad};
    for (int i = 0; i < 2; i++) {
        lq_model *m2 = open_model(others[i], 1);
        CHECK(m2 != NULL);
        if (!m2)
            continue;
        CHECK(lq_scheduler_create(m2, &so, &S, &err) == 0);
        int rc = lq_scheduler_cache_restore(S, path, NULL, NULL, &err);
        CHECK_MSG(rc == LQ_EFORMAT && (strstr(err.msg, "another model") || strstr(err.msg, "not this model")),
                  "%s: %d %s", others[i], rc, err.msg);
        lq_scheduler_get_stats(S, &st);
        CHECK(st.cache_entries == 0);
        lq_scheduler_free(S);
        lq_model_close(m2);
    }
    unlink(bad);
    snprintf(bad, sizeof bad, "%s/bad.bin", harness_tmpdir());
    unlink(bad);
    unlink(path);
    /* no cache to restore into */
    so.prompt_cache = 0;
    CHECK(lq_scheduler_create(m, &so, &S, &err) == 0);
    CHECK(lq_scheduler_cache_restore(S, path, NULL, NULL, &err) == LQ_EINVAL);
    lq_scheduler_free(S);
    /* the session calls' own checks */
    lq_session *sess = NULL;
    CHECK(lq_session_create(m, 16, &sess, &err) == 0);
    char buf[8];
    CHECK(lq_session_kv_get(sess, 1, buf, sizeof buf, &err) == LQ_ERANGE);
    CHECK(lq_session_kv_set(sess, 17, buf, sizeof buf, &err) == LQ_ERANGE);
    CHECK(lq_session_kv_set(sess, 1, buf, sizeof buf, &err) == LQ_EINVAL);
    lq_session_free(sess);
    lq_model_close(m);
}

int main(void)
{
    if (write_models()) {
        printf("not ok - cannot write the fixture models\n");
        return 1;
    }
    RUN(test_bad_options);
    RUN(test_equal_bitnet);
    RUN(test_equal_bitnet_all_at_once);
    RUN(test_equal_bitnet_small_chunks);
    RUN(test_equal_llama);
    RUN(test_cancel);
    RUN(test_free_while_busy);
    RUN(test_many_threads);
    RUN(test_prompt_cache_bitnet);
    RUN(test_prompt_cache_llama);
    RUN(test_shared_prefix_bitnet);
    RUN(test_shared_prefix_llama);
    RUN(test_warm_bitnet);
    RUN(test_warm_llama);
    RUN(test_slot_save_restore);
    unlink(g_bitnet);
    unlink(g_llama);
    rmdir(harness_tmpdir());
    return harness_done();
}
