/* Continuous batching (include/larql/scheduler.h): one thread runs every request's token
 * loop; a decode step is one lq_session_decode_batch over all running requests.
 *
 * Ownership and locks:
 *   S->mu      the queue, the active list, n_active, stopping, each request's refs and
 *              finished flag, the stats. Never held during model work or callbacks.
 *   r->cb_mu   held while one of r's callbacks runs; lq_sched_release takes it to set
 *              detached, so after release returns no callback of r can start or be running.
 *   r->cancel  atomic: read by the loop before each token.
 * Everything else in a request (session, generation state, result) belongs to the loop
 * thread until the request is marked finished, and is read by others only after that
 * (under S->mu, which orders the accesses).
 *
 * A request is referenced by its caller (until lq_sched_release) and by the loop (until it
 * leaves the active list or the queue); the last one frees it. */
#include "larql/mapfault.h"
#include "larql/scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "engine/draft.h"
#include "engine/engine_internal.h"
#include "engine/gen_step.h"
#include "engine/kv_file.h"
#include "engine/prompt_cache.h"

enum { RS_QUEUED = 0, RS_PREFILL, RS_DECODE, RS_DONE };
enum { OP_NONE = 0, OP_SAVE, OP_RESTORE, OP_ERASE };

struct lq_sched_req {
    lq_scheduler *S;
    lq_sched_req *next;      /* queue link */
    int32_t *prompt;         /* [n_prompt] copy */
    size_t n_prompt;
    lq_token_cb cb;
    lq_sched_done_cb done;
    void *user;

    /* loop thread */
    int state;
    size_t n_fed;            /* prompt positions prefilled */
    lq_session *sess;
    lq_resid_hook hook;      /* the request's forward-pass edits (hook.ctx NULL: none) */
    int owns_hook;           /* accepted: release it in req_free */
    lq_gen_state g;
    lq_generate_result res;
    int rc;
    lq_err err;
    uint64_t faults;         /* lq_mapfault_count() when submitted */
    int cacheable;           /* may take a cached prefix and leave its KV to the cache */
    uint64_t key;            /* the prompt cache's key (its edits) */
    int32_t *gen_fed;        /* generated tokens fed to the session, after the prompt */
    size_t n_gen_fed, gen_cap;
    uint64_t seq;            /* admission order (1, 2, ...): a donor is always admitted first */
    uint64_t donor;          /* waiting for the running request of this seq to have fed share
                              * prompt positions, to copy their KV (0: not waiting) */
    size_t share;
    int warm;                /* lq_scheduler_warm: prefill into the prompt cache, no generation */
    int urgent;              /* warm, and a request waits to copy its KV: fed like any prompt */
    int op;                  /* OP_SAVE / _RESTORE / _ERASE: a prompt-cache operation, run by the loop
                              * when admitted (the cache is the loop's alone) */
    int op_slot;
    int32_t *op_toks;        /* save: filled by the loop; restore: given */
    size_t op_n;
    void *op_kv;
    size_t op_kv_bytes;

    int cancel;              /* atomic */
    pthread_mutex_t cb_mu;
    int detached;            /* under cb_mu */
    int finished, refs;      /* under S->mu */
};

struct lq_scheduler {
    lq_model *m;
    lq_scheduler_opts o;
    int n_ctx;
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* the loop waits here when idle */
    pthread_cond_t done_cv;  /* lq_sched_wait waits here */
    int stopping;
    lq_sched_req *q_head, *q_tail;
    int n_queued;
    lq_sched_req **active;   /* [max_active], admission order */
    int n_active;
    lq_scheduler_stats st;

    /* loop thread only */
    lq_session **pool;       /* [max_active] free sessions */
    int n_pool, n_sessions;
    pcache *cache;           /* finished requests' sessions, for prompt-prefix reuse */
    uint64_t next_seq;
    lq_session **b_sess;     /* [max_active] one decode step's batch */
    int32_t *b_ids;          /* [max_active + prefill_chunk + LQ_DRAFT_MAX] the step's ids,
                              * session by session */
    int *b_counts;           /* [max_active] ids per session in the step */
    float **b_logits;        /* [max_active] */
    lq_sched_req **b_req;    /* [max_active] */
};

void lq_scheduler_opts_init(lq_scheduler_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_active = 8;
    o->max_queued = 64;
    o->n_ctx = 0;
    o->prefill_chunk = 64;
    o->prompt_cache = 0;
}

int lq_scheduler_n_ctx(const lq_scheduler *s)
{
    return s ? s->n_ctx : 0;
}

static void req_free(lq_sched_req *r)
{
    if (r->owns_hook && r->hook.release)
        r->hook.release(r->hook.ctx);
    lq_gen_free(&r->g);
    free(r->prompt);
    free(r->gen_fed);
    free(r->op_toks);
    free(r->op_kv);
    pthread_mutex_destroy(&r->cb_mu);
    free(r);
}

/* Drops one reference; the caller holds S->mu. Returns 1 if r must be freed (after the
 * unlock). */
static int unref_locked(lq_sched_req *r)
{
    return --r->refs == 0;
}

/* ---- callbacks, through the request's lock ---- */

static int tramp_token(void *user, int32_t id, const char *text, size_t len, float logprob,
                       const float *logits)
{
    lq_sched_req *r = user;
    if (id >= 0 && __atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE))
        return 1; /* cancelled: this token is not delivered */
    int ret = 0;
    pthread_mutex_lock(&r->cb_mu);
    if (r->detached)
        ret = id >= 0;
    else if (r->cb)
        ret = r->cb(r->user, id, text, len, logprob, logits);
    pthread_mutex_unlock(&r->cb_mu);
    return ret;
}

/* ---- the loop's pieces ---- */

static void session_put(lq_scheduler *S, lq_session *sess)
{
    lq_session_reset(sess);
    lq_session_set_hook(sess, NULL);
    lq_session_set_head(sess, NULL);
    S->pool[S->n_pool++] = sess; /* n_pool <= n_sessions <= max_active */
}

/* A session the prompt cache lets go: back to the pool, or freed when the pool is full
 * (the cache's sessions come on top of max_active's). */
static void drop_session(void *ctx, lq_session *sess)
{
    lq_scheduler *S = ctx;
    if (S->n_pool < S->o.max_active) {
        session_put(S, sess);
        return;
    }
    lq_session_free(sess);
    S->n_sessions--;
}

/* r's session into the prompt cache with the tokens its KV holds: the prompt positions fed
 * and the generated tokens fed after them. */
static void cache_session(lq_scheduler *S, lq_sched_req *r)
{
    size_t n = r->n_fed + r->n_gen_fed;
    int32_t *toks = n ? malloc(n * sizeof *toks) : NULL;
    if (!toks) {
        drop_session(S, r->sess);
        return;
    }
    memcpy(toks, r->prompt, r->n_fed * sizeof *toks);
    if (r->n_gen_fed)
        memcpy(toks + r->n_fed, r->gen_fed, r->n_gen_fed * sizeof *toks);
    lq_session_set_hook(r->sess, NULL);
    lq_session_set_head(r->sess, NULL); /* r's bounded-logits buffers are freed with r->g */
    pcache_put(S->cache, r->sess, toks, n, r->key, drop_session, S);
    free(toks);
}

/* Ends r: session back to the pool (or the prompt cache), done callback, waiters woken. r
 * stays in the active list (state RS_DONE) until the loop compacts it. */
static void finish(lq_scheduler *S, lq_sched_req *r, int rc)
{
    r->rc = rc;
    if (rc && !r->err.code)
        lq_err_set(&r->err, rc, "scheduler: %s", lq_status_str(rc));
    if (rc)
        r->res.finish = LQ_FINISH_NONE;
    if (r->sess) {
        /* an error may have left the KV half-written: only a clean end is kept */
        if (r->cacheable && !rc && pcache_cap(S->cache) > 0)
            cache_session(S, r);
        else
            session_put(S, r->sess);
        r->sess = NULL;
    }
    lq_gen_free(&r->g);
    r->state = RS_DONE;
    pthread_mutex_lock(&r->cb_mu);
    if (!r->detached && r->done)
        r->done(r->user, rc, &r->res, &r->err);
    pthread_mutex_unlock(&r->cb_mu);
    pthread_mutex_lock(&S->mu);
    r->finished = 1;
    if (r->warm || r->op)
        ; /* not a generation: counted in warm_* only, or not at all */
    else if (rc)
        S->st.failed++;
    else if (r->res.finish == LQ_FINISH_CANCELED)
        S->st.canceled++;
    S->st.finished += !r->warm && !r->op;
    S->st.cache_entries = pcache_count(S->cache);
    S->st.sessions = S->n_sessions;
    pthread_cond_broadcast(&S->done_cv);
    pthread_mutex_unlock(&S->mu);
}

static void finish_canceled(lq_scheduler *S, lq_sched_req *r)
{
    r->res.finish = LQ_FINISH_CANCELED;
    finish(S, r, LQ_OK);
}

/* One token from r's logits: sample, EOS, detok, stop, callback. */
static void step_token(lq_scheduler *S, lq_sched_req *r)
{
    int st = lq_gen_step(&r->g, tramp_token, r, &r->err);
    if (st < 0) {
        finish(S, r, st);
    } else if (st == LQ_GEN_END) {
        lq_gen_end(&r->g, tramp_token, r);
        finish(S, r, LQ_OK);
    }
}

/* A pooled session, or a new one. */
static int new_session(lq_scheduler *S, lq_session **out, lq_err *err)
{
    if (S->n_pool) {
        *out = S->pool[--S->n_pool];
        return LQ_OK;
    }
    int rc = lq_session_create(S->m, S->n_ctx, out, err);
    if (rc)
        return rc;
    S->n_sessions++;
    pthread_mutex_lock(&S->mu);
    S->st.sessions = S->n_sessions;
    pthread_mutex_unlock(&S->mu);
    return LQ_OK;
}

static int get_session(lq_scheduler *S, lq_sched_req *r)
{
    const lq_resid_hook *h = r->hook.after_layer || r->hook.on_logits || r->hook.on_token ? &r->hook : NULL;
    if (r->cacheable && pcache_cap(S->cache) > 0) {
        size_t reused = 0;
        lq_session *c = pcache_take(S->cache, r->key, r->prompt, r->n_prompt, 0, &reused);
        pthread_mutex_lock(&S->mu);
        if (c) {
            S->st.cache_hits++;
            S->st.cache_reused_tokens += reused;
        } else {
            S->st.cache_misses++;
        }
        S->st.cache_entries = pcache_count(S->cache);
        pthread_mutex_unlock(&S->mu);
        if (c) { /* the prefix's KV is there: prefill starts after it */
            r->sess = c;
            r->n_fed = reused;
            lq_session_set_hook(r->sess, h);
            lq_session_set_head(r->sess, lq_gen_head(&r->g));
            return LQ_OK;
        }
    }
    int rc = new_session(S, &r->sess, &r->err);
    if (rc)
        return rc;
    lq_session_set_hook(r->sess, h);
    lq_session_set_head(r->sess, lq_gen_head(&r->g));
    return LQ_OK;
}

/* A warm request's session: the cached entry it extends (whatever share of it the tokens
 * keep: the entry is the same conversation with the tokens the model generated, the warm
 * tokens are the text the client was sent, tokenized again). 0: nothing to do - the cache
 * already holds every token, or no entry to build on (prefilling a whole prompt again on
 * speculation is not worth the compute). */
static int warm_session(lq_scheduler *S, lq_sched_req *r)
{
    if (pcache_covers(S->cache, r->key, r->prompt, r->n_prompt))
        return 0;
    size_t reused = 0;
    lq_session *c = pcache_take(S->cache, r->key, r->prompt, r->n_prompt, 1, &reused);
    if (!c)
        return 0;
    r->sess = c;
    r->n_fed = reused;
    lq_session_set_hook(c, NULL);
    lq_session_set_head(c, NULL);
    pthread_mutex_lock(&S->mu);
    S->st.warm_prefills++;
    S->st.warm_tokens += r->n_prompt - reused;
    S->st.cache_entries = pcache_count(S->cache);
    pthread_mutex_unlock(&S->mu);
    return 1;
}

/* ---- saving and restoring cached prompts (lq_scheduler_cache_save / _restore) ---- */

/* Save: a copy of the slot's tokens and KV, which the caller writes to disk. */
static int op_save(lq_scheduler *S, lq_sched_req *r)
{
    const int32_t *toks = NULL;
    size_t n = 0;
    lq_session *s = pcache_peek(S->cache, 0, r->op_slot, &toks, &n);
    if (!s)
        return lq_err_set(&r->err, LQ_ENOTFOUND, "no cached prompt at slot %d (the cache holds %d)", r->op_slot,
                          pcache_count(S->cache));
    r->op_kv_bytes = lq_session_kv_bytes(s, (int)n);
    r->op_toks = malloc(n * sizeof *r->op_toks);
    r->op_kv = malloc(r->op_kv_bytes ? r->op_kv_bytes : 1);
    if (!r->op_toks || !r->op_kv)
        return lq_err_set(&r->err, LQ_ENOMEM, "out of memory for %zu bytes of KV", r->op_kv_bytes);
    memcpy(r->op_toks, toks, n * sizeof *toks);
    r->op_n = n;
    return lq_session_kv_get(s, (int)n, r->op_kv, r->op_kv_bytes, &r->err);
}

/* Restore: the KV into a session that joins the cache as its newest entry, once its first
 * positions, computed again by this model, are the file's bytes (a file saved from another
 * model of the same shape fails here). */
static int op_restore(lq_scheduler *S, lq_sched_req *r)
{
    enum { CHECK_POS = 4 };
    int k = r->op_n < CHECK_POS ? (int)r->op_n : CHECK_POS;
    lq_session *s = NULL, *t = NULL;
    int rc = new_session(S, &s, &r->err);
    if (!rc)
        rc = lq_session_kv_set(s, (int)r->op_n, r->op_kv, r->op_kv_bytes, &r->err);
    if (!rc)
        rc = lq_session_create(S->m, k, &t, &r->err);
    if (!rc)
        rc = lq_session_eval(t, r->op_toks, (size_t)k, NULL, NULL, &r->err);
    size_t kb = lq_session_kv_bytes(s, k);
    uint8_t *a = rc ? NULL : malloc(2 * kb);
    if (!rc && !a)
        rc = lq_err_set(&r->err, LQ_ENOMEM, "out of memory");
    if (!rc && !(rc = lq_session_kv_get(t, k, a, kb, &r->err)) && !(rc = lq_session_kv_get(s, k, a + kb, kb, &r->err)) &&
        memcmp(a, a + kb, kb))
        rc = lq_err_set(&r->err, LQ_EFORMAT, "the saved KV is not this model's (its first %d positions differ from "
                                             "what this model computes for those tokens)", k);
    free(a);
    lq_session_free(t);
    if (rc) {
        if (s)
            drop_session(S, s);
        return rc;
    }
    pcache_put(S->cache, s, r->op_toks, r->op_n, 0, drop_session, S);
    pthread_mutex_lock(&S->mu);
    S->st.cache_entries = pcache_count(S->cache);
    pthread_mutex_unlock(&S->mu);
    return LQ_OK;
}

/* Erase: the slot's entry out of the cache, its session dropped; op_n = its tokens. */
static int op_erase(lq_scheduler *S, lq_sched_req *r)
{
    size_t n = 0;
    lq_session *s = pcache_remove(S->cache, 0, r->op_slot, &n);
    if (!s)
        return lq_err_set(&r->err, LQ_ENOTFOUND, "no cached prompt at slot %d (the cache holds %d)", r->op_slot,
                          pcache_count(S->cache));
    drop_session(S, s);
    r->op_n = n;
    pthread_mutex_lock(&S->mu);
    S->st.cache_entries = pcache_count(S->cache);
    pthread_mutex_unlock(&S->mu);
    return LQ_OK;
}

/* ---- prompts shared with a running request ----
 * A request admitted while another one (same cache key) is running whose prompt starts with
 * the same tokens - the choices of one n > 1 request, concurrent requests behind one system
 * prompt - does not prefill them again: it waits until that request has fed them, then
 * copies their KV (lq_session_copy_prefix: the same numbers) and prefills only the rest. */
#define SHARE_MIN 8

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

/* Picks the running request r copies the longest prompt prefix from, if one beats what r
 * already has (a prompt-cache hit) by SHARE_MIN positions. */
static void find_donor(lq_scheduler *S, lq_sched_req *r)
{
    size_t best = r->n_fed + SHARE_MIN;
    for (int i = 0; i < S->n_active; i++) {
        lq_sched_req *d = S->active[i];
        if (d == r || d->seq >= r->seq || d->donor || !d->cacheable || d->key != r->key || !d->sess ||
            (d->state != RS_PREFILL && d->state != RS_DECODE))
            continue;
        /* the last prompt token is always r's own to evaluate, for its logits */
        size_t l = common_prefix(d->prompt, d->n_prompt, r->prompt, r->n_prompt - 1);
        if (l >= best) {
            best = l;
            r->donor = d->seq;
            r->share = l;
        }
    }
    /* a warm request r waits for is fed from now on like any prompt */
    for (int i = 0; r->donor && i < S->n_active; i++)
        if (S->active[i]->seq == r->donor && S->active[i]->warm)
            S->active[i]->urgent = 1;
}

/* r's donor ended before r copied from it (a warm request ends when its prompt is fed):
 * its KV went to the prompt cache, so r takes it from there if that gives r more than it
 * has. */
static void retake_cached(lq_scheduler *S, lq_sched_req *r)
{
    size_t reused = 0;
    lq_session *c = pcache_take(S->cache, r->key, r->prompt, r->n_prompt, 0, &reused);
    if (!c)
        return;
    if (reused <= r->n_fed) { /* not better: back where it was */
        pcache_put(S->cache, c, r->prompt, reused, r->key, drop_session, S);
        return;
    }
    const lq_resid_hook *h = r->hook.after_layer || r->hook.on_logits || r->hook.on_token ? &r->hook : NULL;
    lq_session_set_hook(c, h);
    lq_session_set_head(c, lq_gen_head(&r->g));
    pthread_mutex_lock(&S->mu);
    if (!r->n_fed) { /* admitted as a miss */
        S->st.cache_misses--;
        S->st.cache_hits++;
    }
    S->st.cache_reused_tokens += reused - r->n_fed;
    S->st.cache_entries = pcache_count(S->cache);
    pthread_mutex_unlock(&S->mu);
    session_put(S, r->sess);
    r->sess = c;
    r->n_fed = reused;
}

/* r's donor, if still running; NULL when it ended (r then prefills on its own). */
static lq_sched_req *donor_of(lq_scheduler *S, const lq_sched_req *r)
{
    for (int i = 0; i < S->n_active; i++)
        if (S->active[i]->seq == r->donor)
            return S->active[i]->state == RS_DONE ? NULL : S->active[i];
    return NULL;
}

/* 1: r may prefill this step (its donor's KV copied, or no donor any more); 0: wait. */
static int take_shared(lq_scheduler *S, lq_sched_req *r)
{
    if (!r->donor)
        return 1;
    lq_sched_req *d = donor_of(S, r);
    if (d && d->n_fed < r->share)
        return 0;
    if (!d)
        retake_cached(S, r);
    if (d && !lq_session_copy_prefix(r->sess, d->sess, (int)r->share, NULL)) {
        r->n_fed = r->share;
        pthread_mutex_lock(&S->mu);
        S->st.shared_hits++;
        S->st.shared_tokens += r->share;
        pthread_mutex_unlock(&S->mu);
    }
    r->donor = 0;
    return 1;
}

/* The generated token a decode step fed r's session (for the prompt cache). Out of memory:
 * the request is simply not cached. */
static void remember_fed(lq_sched_req *r, int32_t id)
{
    if (r->n_gen_fed == r->gen_cap) {
        size_t cap = r->gen_cap ? r->gen_cap * 2 : 64;
        int32_t *g = realloc(r->gen_fed, cap * sizeof *g);
        if (!g) {
            r->cacheable = 0;
            return;
        }
        r->gen_fed = g;
        r->gen_cap = cap;
    }
    r->gen_fed[r->n_gen_fed++] = id;
}

/* The rows a drafting request fed this step (its token, maybe a draft): sampled in order,
 * the rejected rows' KV dropped, the kept ones remembered for the prompt cache. ms: the
 * pass's time when it ran this request alone (< 0 otherwise). */
static void verify_draft(lq_scheduler *S, lq_sched_req *r, const int32_t *ids, int T, double ms)
{
    int pos = lq_session_pos(r->sess) - T, keep = 0;
    int st = lq_draft_verify(&r->g, T, ms, tramp_token, r, &keep, &r->err);
    if (keep < T)
        lq_session_truncate(r->sess, pos + keep, NULL);
    if (r->cacheable)
        for (int k = 0; k < keep; k++)
            remember_fed(r, ids[k]);
    if (T > 1) {
        pthread_mutex_lock(&S->mu);
        S->st.draft_steps++;
        S->st.draft_tokens += (uint64_t)(T - 1);
        S->st.draft_accepted += (uint64_t)(keep - 1);
        pthread_mutex_unlock(&S->mu);
    }
    if (st < 0) {
        finish(S, r, st);
    } else if (st == LQ_GEN_END) {
        lq_gen_end(&r->g, tramp_token, r);
        finish(S, r, LQ_OK);
    }
}

/* One lq_session_eval_batch per loop turn (continuous batching with chunked prefill): every
 * decoding request feeds its token, and the requests still prefilling, oldest first, feed
 * prompt chunks within a budget of prefill_chunk positions. One forward pass reads the
 * weights once for all of it, so a prompt arriving costs the running streams little more than
 * their own step, and several short prompts prefill in the same pass. A request whose prompt
 * completes in this step gets its first token at once. */
static void batch_step(lq_scheduler *S)
{
    int B = 0, n_dec = 0, n_rows = 0, n_run = 0, solo;
    size_t nid = 0, n_pre = 0;
    for (int i = 0; i < S->n_active; i++)
        n_run += S->active[i]->state == RS_DECODE || S->active[i]->state == RS_PREFILL;
    solo = n_run == 1;
    for (int i = 0; i < S->n_active; i++) {
        lq_sched_req *r = S->active[i];
        if (r->state != RS_DECODE)
            continue;
        if (__atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE)) {
            finish_canceled(S, r);
            continue;
        }
        S->b_sess[B] = r->sess;
        S->b_counts[B] = 1;
        S->b_ids[nid] = r->g.next_id;
        S->b_logits[B] = r->g.logits;
        S->b_req[B] = r;
        if (r->g.draft) {
            /* drafts only when this request runs alone: in a batch of streams the pass is
             * already shared, and every drafted row would add to all of their step times */
            int T = lq_draft_plan(&r->g, lq_session_n_ctx(r->sess) - lq_session_pos(r->sess), solo);
            memcpy(S->b_ids + nid, lq_draft_ids(&r->g), (size_t)T * sizeof *S->b_ids);
            S->b_counts[B] = T;
        }
        nid += (size_t)S->b_counts[B];
        n_rows += S->b_counts[B];
        n_dec++;
        B++;
    }
    size_t budget = (size_t)S->o.prefill_chunk;
    /* warm requests (lq_scheduler_warm) are fed when nothing else runs, or when a request
     * waits for their KV; the second pass is theirs */
    for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < S->n_active && budget > 0; i++) {
        lq_sched_req *r = S->active[i];
        if (r->state != RS_PREFILL || !r->sess || (r->warm && !r->urgent) != pass || (pass && B > 0) ||
            !take_shared(S, r))
            continue;
        size_t left = r->n_prompt - r->n_fed;
        size_t n = left < budget ? left : budget;
        S->b_sess[B] = r->sess;
        S->b_counts[B] = (int)n;
        memcpy(S->b_ids + nid, r->prompt + r->n_fed, n * sizeof *S->b_ids);
        nid += n;
        S->b_logits[B] = n == left ? r->g.logits : NULL;
        S->b_req[B] = r;
        B++;
        budget -= n;
        n_pre += n;
    }
    if (B == 0)
        return;
    lq_err err = {0};
    double t0 = lq_now_ms();
    /* a drafting request runs alone (solo): its rows want logits each */
    int rc = B == 1 && n_dec == 1 && S->b_counts[0] > 1
                 ? lq_session_eval_rows(S->b_sess, S->b_ids, S->b_counts, 1, lq_draft_outs(&S->b_req[0]->g),
                                        lq_draft_heads(&S->b_req[0]->g), &err)
                 : lq_session_eval_batch(S->b_sess, S->b_ids, S->b_counts, B, S->b_logits, &err);
    double dt = lq_now_ms() - t0;
    /* A mapped weight file shrank since a request began (a host's SIGBUS handler turned the
     * lost pages into zeros, see mapfault.h): its logits are garbage from then on, so no
     * further token is delivered and the request ends with this error (a stream gets it as
     * its last event) instead of running on with zeros. */
    uint64_t faults = lq_mapfault_count();
    /* The step's time is split between decode and prefill by their share of the rows. */
    double dec_ms = dt * (double)n_rows / (double)((size_t)n_rows + n_pre);
    pthread_mutex_lock(&S->mu);
    if (n_dec > 0) {
        S->st.steps++;
        S->st.decode_tokens += (uint64_t)n_dec;
        S->st.decode_ms += dec_ms;
        S->st.batch_hist[n_dec < LQ_SCHED_HIST ? n_dec - 1 : LQ_SCHED_HIST - 1]++;
        if (n_dec > S->st.max_batch)
            S->st.max_batch = n_dec;
    }
    S->st.prefill_tokens += n_pre;
    S->st.prefill_ms += dt - dec_ms;
    pthread_mutex_unlock(&S->mu);
    size_t off = 0;
    for (int b = 0; b < B; b++) {
        lq_sched_req *r = S->b_req[b];
        size_t at = off;
        off += (size_t)S->b_counts[b];
        if (rc) {
            /* every check happens before anything changes (prompts and token limits were
             * checked at submit): this is a bug somewhere, so fail the batch */
            r->err = err;
            finish(S, r, rc);
            continue;
        }
        if (faults != r->faults) {
            finish(S, r, lq_err_set(&r->err, LQ_EIO, "a mapped model file was truncated or rewritten on disk "
                                                     "during generation; restart to load it again"));
            continue;
        }
        if (r->state == RS_DECODE) {
            r->res.decode_ms += dt;
            if (r->g.draft) {
                verify_draft(S, r, S->b_ids + at, S->b_counts[b], B == 1 ? dt : -1);
                continue;
            }
            if (r->cacheable)
                remember_fed(r, S->b_ids[at]);
            step_token(S, r);
            continue;
        }
        r->res.prefill_ms += dt;
        r->n_fed += (size_t)S->b_counts[b];
        if (r->n_fed < r->n_prompt)
            continue;
        if (r->warm) { /* its KV into the cache */
            finish(S, r, LQ_OK);
            continue;
        }
        lq_gen_set_limit(&r->g, lq_session_n_ctx(r->sess) - lq_session_pos(r->sess));
        r->state = RS_DECODE;
        step_token(S, r);
    }
}

/* Removes finished requests from the active list, keeping the order; frees those whose
 * handle was already released. */
static void compact(lq_scheduler *S)
{
    lq_sched_req *to_free = NULL; /* linked through next (unused once admitted) */
    pthread_mutex_lock(&S->mu);
    int k = 0;
    for (int i = 0; i < S->n_active; i++) {
        lq_sched_req *r = S->active[i];
        if (r->state != RS_DONE) {
            S->active[k++] = r;
        } else if (unref_locked(r)) {
            r->next = to_free;
            to_free = r;
        }
    }
    S->n_active = k;
    S->st.active = k;
    pthread_mutex_unlock(&S->mu);
    while (to_free) {
        lq_sched_req *n = to_free->next;
        req_free(to_free);
        to_free = n;
    }
}

static void *loop_main(void *arg)
{
    lq_scheduler *S = arg;
    pthread_mutex_lock(&S->mu);
    for (;;) {
        /* requests wait for a slot: warm-ups nobody waits for give theirs up (their KV so
         * far goes to the cache, see finish) */
        for (int i = 0; S->q_head && S->n_active >= S->o.max_active && i < S->n_active; i++)
            if (S->active[i]->warm && !S->active[i]->urgent)
                __atomic_store_n(&S->active[i]->cancel, 1, __ATOMIC_RELEASE);
        while (S->q_head && S->n_active < S->o.max_active) {
            lq_sched_req *r = S->q_head;
            S->q_head = r->next;
            if (!S->q_head)
                S->q_tail = NULL;
            S->n_queued--;
            r->next = NULL;
            r->state = RS_PREFILL;
            r->seq = ++S->next_seq;
            S->active[S->n_active++] = r;
        }
        /* cancelled while waiting for a slot: end them now, not when a slot frees up */
        lq_sched_req *reap = NULL, **pp = &S->q_head;
        S->q_tail = NULL;
        while (*pp) {
            lq_sched_req *r = *pp;
            if (__atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE)) {
                *pp = r->next;
                S->n_queued--;
                r->next = reap;
                reap = r;
            } else {
                S->q_tail = r;
                pp = &r->next;
            }
        }
        S->st.active = S->n_active;
        S->st.queued = S->n_queued;
        if (reap) {
            pthread_mutex_unlock(&S->mu);
            while (reap) {
                lq_sched_req *r = reap, *n = r->next;
                finish_canceled(S, r);
                pthread_mutex_lock(&S->mu);
                int last = unref_locked(r);
                pthread_mutex_unlock(&S->mu);
                if (last)
                    req_free(r);
                reap = n;
            }
            pthread_mutex_lock(&S->mu);
            continue;
        }
        if (S->n_active == 0) {
            if (S->stopping)
                break;
            pthread_cond_wait(&S->work_cv, &S->mu);
            continue;
        }
        pthread_mutex_unlock(&S->mu);

        /* sessions for the newly admitted; cancels of anything not decoding */
        for (int i = 0; i < S->n_active; i++) {
            lq_sched_req *r = S->active[i];
            if (r->state == RS_DONE)
                continue;
            if (__atomic_load_n(&r->cancel, __ATOMIC_ACQUIRE)) {
                finish_canceled(S, r);
                continue;
            }
            if (r->op) {
                finish(S, r, r->op == OP_SAVE ? op_save(S, r) : r->op == OP_ERASE ? op_erase(S, r) : op_restore(S, r));
            } else if (!r->sess && r->warm) {
                if (!warm_session(S, r))
                    finish(S, r, LQ_OK);
            } else if (!r->sess) {
                int rc = get_session(S, r);
                if (rc)
                    finish(S, r, rc);
                else if (r->cacheable)
                    find_donor(S, r);
            }
        }
        batch_step(S);
        compact(S);
        pthread_mutex_lock(&S->mu);
    }
    pthread_mutex_unlock(&S->mu);
    return NULL;
}

/* ---- API ---- */

int lq_scheduler_create(lq_model *m, const lq_scheduler_opts *o, lq_scheduler **out,
                        lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "scheduler: out is NULL");
    *out = NULL;
    if (!m)
        return lq_err_set(err, LQ_EINVAL, "scheduler: model is NULL");
    lq_scheduler_opts def;
    if (!o) {
        lq_scheduler_opts_init(&def);
        o = &def;
    }
    if (o->max_active < 1 || o->max_active > 4096)
        return lq_err_set(err, LQ_EINVAL, "scheduler: max_active %d outside 1..4096",
                          o->max_active);
    if (o->max_queued < 0 || o->max_queued > 65536)
        return lq_err_set(err, LQ_EINVAL, "scheduler: max_queued %d outside 0..65536",
                          o->max_queued);
    if (o->prefill_chunk < 1 || o->prefill_chunk > 65536)
        return lq_err_set(err, LQ_EINVAL, "scheduler: prefill_chunk %d outside 1..65536",
                          o->prefill_chunk);
    if (o->n_ctx < 0)
        return lq_err_set(err, LQ_EINVAL, "scheduler: n_ctx %d is negative", o->n_ctx);
    if (o->draft < LQ_DRAFT_AUTO || o->draft > LQ_DRAFT_NGRAM || o->draft_max < 0 || o->draft_max > LQ_DRAFT_MAX)
        return lq_err_set(err, LQ_EINVAL, "scheduler: draft mode %d / draft_max %d (modes 0-2, 0..%d)", o->draft,
                          o->draft_max, LQ_DRAFT_MAX);
    if (o->prompt_cache < 0 || o->prompt_cache > 4096)
        return lq_err_set(err, LQ_EINVAL, "scheduler: prompt_cache %d outside 0..4096", o->prompt_cache);
    lq_scheduler *S = calloc(1, sizeof *S);
    if (!S)
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory");
    S->m = m;
    S->o = *o;
    size_t A = (size_t)o->max_active;
    S->active = calloc(A, sizeof *S->active);
    S->pool = calloc(A, sizeof *S->pool);
    S->b_sess = calloc(A, sizeof *S->b_sess);
    S->b_ids = calloc(A + (size_t)o->prefill_chunk + LQ_DRAFT_MAX, sizeof *S->b_ids);
    S->b_counts = calloc(A, sizeof *S->b_counts);
    S->b_logits = calloc(A, sizeof *S->b_logits);
    S->b_req = calloc(A, sizeof *S->b_req);
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->work_cv, NULL);
    pthread_cond_init(&S->done_cv, NULL);
    S->st.max_active = o->max_active;
    int rc;
    if (!S->active || !S->pool || !S->b_sess || !S->b_ids || !S->b_counts || !S->b_logits || !S->b_req ||
        pcache_create(o->prompt_cache, &S->cache)) {
        rc = lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory for %d slots", o->max_active);
        goto fail;
    }
    /* One session up front: it checks n_ctx against the model and fixes the context every
     * submission is validated against. */
    rc = lq_session_create(m, o->n_ctx, &S->pool[0], err);
    if (rc) {
        lq_err_prefix(err, "scheduler");
        goto fail;
    }
    S->n_pool = S->n_sessions = S->st.sessions = 1;
    S->n_ctx = lq_session_n_ctx(S->pool[0]);
    if (pthread_create(&S->th, NULL, loop_main, S)) {
        rc = lq_err_set(err, LQ_ENOMEM, "scheduler: cannot start its thread");
        goto fail;
    }
    S->th_started = 1;
    *out = S;
    return LQ_OK;
fail:
    lq_scheduler_free(S);
    return rc;
}

void lq_scheduler_free(lq_scheduler *S)
{
    if (!S)
        return;
    if (S->th_started) {
        pthread_mutex_lock(&S->mu);
        S->stopping = 1;
        for (lq_sched_req *r = S->q_head; r; r = r->next)
            __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < S->n_active; i++)
            __atomic_store_n(&S->active[i]->cancel, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&S->work_cv);
        pthread_mutex_unlock(&S->mu);
        pthread_join(S->th, NULL);
    }
    for (int i = 0; i < S->n_pool; i++)
        lq_session_free(S->pool[i]);
    pcache_free(S->cache);
    free(S->active);
    free(S->pool);
    free(S->b_sess);
    free(S->b_ids);
    free(S->b_counts);
    free(S->b_logits);
    free(S->b_req);
    pthread_mutex_destroy(&S->mu);
    pthread_cond_destroy(&S->work_cv);
    pthread_cond_destroy(&S->done_cv);
    free(S);
}

/* r at the queue's end; the caller holds S->mu. */
static void enqueue_locked(lq_scheduler *S, lq_sched_req *r)
{
    if (S->q_tail)
        S->q_tail->next = r;
    else
        S->q_head = r;
    S->q_tail = r;
    S->n_queued++;
    S->st.queued = S->n_queued;
}

int lq_scheduler_submit(lq_scheduler *S, const int32_t *prompt, size_t n_prompt,
                        const lq_generate_params *p, lq_token_cb cb, lq_sched_done_cb done,
                        void *user, lq_sched_req **out, lq_err *err)
{
    if (!S || !out)
        return lq_err_set(err, LQ_EINVAL, "scheduler: submit needs a scheduler and out");
    *out = NULL;
    lq_sched_req *r = calloc(1, sizeof *r);
    if (!r)
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory");
    /* Everything lq_generate checks, checked now, on the caller's thread. The generation
     * state copies what it keeps (stop strings, eos ids, sampler params). The scheduler's
     * draft options fill in what the request leaves to the default. */
    lq_generate_params pd;
    if (!p) {
        lq_generate_defaults(&pd);
        p = &pd;
    }
    if ((!p->draft && S->o.draft) || (!p->draft_max && S->o.draft_max)) {
        if (p != &pd)
            pd = *p;
        pd.draft = p->draft ? p->draft : S->o.draft;
        pd.draft_max = p->draft_max ? p->draft_max : S->o.draft_max;
        p = &pd;
    }
    int rc = lq_gen_begin(&r->g, S->m, 0, S->n_ctx, prompt, n_prompt, p, &r->res, err);
    if (rc) {
        free(r);
        return rc;
    }
    pthread_mutex_init(&r->cb_mu, NULL);
    r->faults = lq_mapfault_count();
    r->prompt = malloc(n_prompt * sizeof *r->prompt); /* [n_prompt] */
    if (!r->prompt) {
        req_free(r);
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory for a %zu-token prompt",
                          n_prompt);
    }
    memcpy(r->prompt, prompt, n_prompt * sizeof *r->prompt);
    r->n_prompt = n_prompt;
    r->S = S;
    r->cb = cb;
    r->done = done;
    r->user = user;
    r->state = RS_QUEUED;
    r->refs = 2; /* the caller and the loop */
    if (p && p->hook)
        r->hook = *p->hook;
    /* KV computed with edits is shared only with requests running the same edits */
    r->cacheable = S->o.prompt_cache > 0 && !(p && p->no_prompt_cache) && (!(p && p->hook) || p->cache_key);
    r->key = p && p->hook ? p->cache_key : 0;

    pthread_mutex_lock(&S->mu);
    if (S->stopping) {
        pthread_mutex_unlock(&S->mu);
        req_free(r);
        return lq_err_set(err, LQ_ECANCELED, "scheduler: shutting down");
    }
    /* waiting line: the free slots plus max_queued */
    int room = S->o.max_active - S->n_active + S->o.max_queued;
    if (S->n_queued >= room) {
        int na = S->n_active, nq = S->n_queued;
        pthread_mutex_unlock(&S->mu);
        req_free(r);
        return lq_err_set(err, LQ_EBUSY,
                          "scheduler: %d requests running and %d queued (max_active %d, "
                          "max_queued %d)", na, nq, S->o.max_active, S->o.max_queued);
    }
    r->owns_hook = 1; /* accepted: from here on the request releases it */
    enqueue_locked(S, r);
    S->st.submitted++;
    pthread_cond_signal(&S->work_cv);
    pthread_mutex_unlock(&S->mu);
    *out = r;
    return LQ_OK;
}

int lq_scheduler_warm(lq_scheduler *S, const int32_t *toks, size_t n, lq_err *err)
{
    if (!S || (n && !toks))
        return lq_err_set(err, LQ_EINVAL, "scheduler: warm needs a scheduler and tokens");
    if (S->o.prompt_cache <= 0)
        return LQ_OK; /* no cache to warm */
    if (n < 2 || n > (size_t)S->n_ctx)
        return lq_err_set(err, LQ_EINVAL, "scheduler: warm of %zu tokens (2..%d)", n, S->n_ctx);
    int32_t nv = lq_tokenizer_n_vocab(lq_model_tokenizer(S->m));
    for (size_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= nv)
            return lq_err_set(err, LQ_EINVAL, "scheduler: warm token %zu is %d, outside 0..%d", i, (int)toks[i],
                              (int)nv - 1);
    lq_sched_req *r = calloc(1, sizeof *r);
    if (!r || !(r->prompt = malloc(n * sizeof *r->prompt))) {
        free(r);
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory");
    }
    memcpy(r->prompt, toks, n * sizeof *r->prompt);
    pthread_mutex_init(&r->cb_mu, NULL);
    r->faults = lq_mapfault_count();
    r->n_prompt = n;
    r->S = S;
    r->state = RS_QUEUED;
    r->refs = 1; /* the loop's only: nobody holds a handle */
    r->warm = 1;
    r->cacheable = 1;
    pthread_mutex_lock(&S->mu);
    /* only into a free slot: a warm-up never makes a request wait for one */
    /* finished ones stay in the list until the loop compacts it; on the loop's own thread (a
     * done callback) the one ending is over too */
    int live = 0, loop = S->th_started && pthread_equal(pthread_self(), S->th);
    for (int i = 0; i < S->n_active; i++)
        live += !S->active[i]->finished && !(loop && S->active[i]->state == RS_DONE);
    if (S->stopping || live + S->n_queued >= S->o.max_active) {
        pthread_mutex_unlock(&S->mu);
        req_free(r);
        return lq_err_set(err, LQ_EBUSY, "scheduler: busy, no warm-up");
    }
    enqueue_locked(S, r);
    pthread_cond_signal(&S->work_cv);
    pthread_mutex_unlock(&S->mu);
    return LQ_OK;
}

/* Queues a prompt-cache operation and waits for the loop to run it. Frees r when it could not
 * be queued (*r_out NULL then). */
static int run_op(lq_scheduler *S, lq_sched_req *r, lq_sched_req **r_out, lq_err *err)
{
    *r_out = NULL;
    pthread_mutex_init(&r->cb_mu, NULL);
    r->S = S;
    r->state = RS_QUEUED;
    r->refs = 2;
    pthread_mutex_lock(&S->mu);
    if (S->stopping) {
        pthread_mutex_unlock(&S->mu);
        req_free(r);
        return lq_err_set(err, LQ_ECANCELED, "scheduler: shutting down");
    }
    enqueue_locked(S, r);
    pthread_cond_signal(&S->work_cv);
    pthread_mutex_unlock(&S->mu);
    *r_out = r;
    lq_sched_wait(r, -1);
    if (!r->rc && r->res.finish == LQ_FINISH_CANCELED) /* the scheduler stopped first */
        return lq_err_set(err, LQ_ECANCELED, "scheduler: shutting down");
    if (r->rc && err)
        *err = r->err;
    return r->rc;
}

int lq_scheduler_cache_save(lq_scheduler *S, int slot, const char *path, size_t *n_tokens, size_t *n_bytes,
                            lq_err *err)
{
    if (!S || !path || slot < 0)
        return lq_err_set(err, LQ_EINVAL, "scheduler: cache_save needs a scheduler, a slot >= 0 and a path");
    lq_sched_req *r = calloc(1, sizeof *r);
    if (!r)
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory");
    r->op = OP_SAVE;
    r->op_slot = slot;
    int rc = run_op(S, r, &r, err);
    if (!r)
        return rc;
    size_t written = 0;
    if (!rc)
        rc = kvf_write(path, S->m, r->op_toks, r->op_n, r->op_kv, r->op_kv_bytes, &written, err);
    if (!rc) {
        if (n_tokens)
            *n_tokens = r->op_n;
        if (n_bytes)
            *n_bytes = written;
    }
    lq_sched_release(r);
    return rc;
}

int lq_scheduler_cache_restore(lq_scheduler *S, const char *path, size_t *n_tokens, size_t *n_bytes, lq_err *err)
{
    if (!S || !path)
        return lq_err_set(err, LQ_EINVAL, "scheduler: cache_restore needs a scheduler and a path");
    if (S->o.prompt_cache <= 0)
        return lq_err_set(err, LQ_EINVAL, "scheduler: no prompt cache to restore into");
    lq_sched_req *r = calloc(1, sizeof *r);
    if (!r)
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory");
    size_t got = 0;
    int rc = kvf_read(path, S->m, (size_t)S->n_ctx, &r->op_toks, &r->op_n, &r->op_kv, &r->op_kv_bytes, &got, err);
    if (rc) {
        free(r);
        return rc;
    }
    r->op = OP_RESTORE;
    rc = run_op(S, r, &r, err);
    if (!r)
        return rc;
    if (!rc) {
        if (n_tokens)
            *n_tokens = r->op_n;
        if (n_bytes)
            *n_bytes = got;
    }
    lq_sched_release(r);
    return rc;
}

int lq_scheduler_cache_erase(lq_scheduler *S, int slot, size_t *n_tokens, lq_err *err)
{
    if (!S || slot < 0)
        return lq_err_set(err, LQ_EINVAL, "scheduler: cache_erase needs a scheduler and a slot >= 0");
    lq_sched_req *r = calloc(1, sizeof *r);
    if (!r)
        return lq_err_set(err, LQ_ENOMEM, "scheduler: out of memory");
    r->op = OP_ERASE;
    r->op_slot = slot;
    int rc = run_op(S, r, &r, err);
    if (!r)
        return rc;
    if (!rc && n_tokens)
        *n_tokens = r->op_n;
    lq_sched_release(r);
    return rc;
}

void lq_sched_cancel(lq_sched_req *r)
{
    if (!r)
        return;
    __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&r->S->mu);
    pthread_cond_signal(&r->S->work_cv);
    pthread_mutex_unlock(&r->S->mu);
}

int lq_sched_wait(lq_sched_req *r, int timeout_ms)
{
    if (!r)
        return 1;
    lq_scheduler *S = r->S;
    struct timespec end = {0, 0};
    if (timeout_ms >= 0)
        end = lq_time_in(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&S->mu);
    while (!r->finished) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&S->done_cv, &S->mu);
        } else if (pthread_cond_timedwait(&S->done_cv, &S->mu, &end) == ETIMEDOUT) {
            break;
        }
    }
    int f = r->finished;
    pthread_mutex_unlock(&S->mu);
    return f;
}

int lq_sched_result(lq_sched_req *r, lq_generate_result *res, lq_err *err)
{
    if (!r)
        return lq_err_set(err, LQ_EINVAL, "scheduler: result of a NULL request");
    pthread_mutex_lock(&r->S->mu);
    int fin = r->finished;
    pthread_mutex_unlock(&r->S->mu);
    if (!fin)
        return lq_err_set(err, LQ_EBUSY, "scheduler: the request has not finished");
    if (res)
        *res = r->res;
    if (err && r->rc)
        *err = r->err;
    return r->rc;
}

void lq_sched_release(lq_sched_req *r)
{
    if (!r)
        return;
    /* waits for a callback of r in progress; none starts afterwards */
    pthread_mutex_lock(&r->cb_mu);
    r->detached = 1;
    pthread_mutex_unlock(&r->cb_mu);
    __atomic_store_n(&r->cancel, 1, __ATOMIC_RELEASE);
    lq_scheduler *S = r->S;
    pthread_mutex_lock(&S->mu);
    int last = unref_locked(r);
    pthread_cond_signal(&S->work_cv);
    pthread_mutex_unlock(&S->mu);
    if (last)
        req_free(r);
}

void lq_scheduler_get_stats(lq_scheduler *S, lq_scheduler_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!S)
        return;
    pthread_mutex_lock(&S->mu);
    *out = S->st;
    pthread_mutex_unlock(&S->mu);
}
