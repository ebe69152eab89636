/* Streaming generation over a session.
 *
 *   prefill(prompt) -> logits
 *   loop: sample (penalties over generated tokens) -> EOS? stop before emitting
 *         -> detokenize (UTF-8-complete, control tokens skipped) -> stop strings
 *         -> callback(id, text, logprob, logits) -> decode(id) only if another token follows
 *   end:  text still held back (stop-string prefix, incomplete UTF-8) in one last callback
 *         with id -1 (not after a stop match or a cancel).
 *
 * Every buffer (logits, sampler history, detokenizer, stop matcher) is allocated before the
 * prefill; the token loop does not allocate (the stop matcher only grows if a piece exceeds
 * its buffer, which detokenized pieces of <= 64 bytes do not).
 *
 * Also here: lq_chat_template_for_model, which needs the model and its tokenizer; chat.c
 * stays free of engine dependencies so that rendering links without the engine. */
#include "larql/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "engine/draft.h"
#include "engine/gen_step.h"
#include "engine/grammar_internal.h"
#include "engine/sampler_internal.h"
#include "larql/chat.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"

void lq_generate_defaults(lq_generate_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_tokens = 256;
    lq_sampler_defaults(&p->sampling);
}

/* log p(id) under softmax(logits / T) (T <= 0: T = 1), in double precision. */
static float token_logprob(const float *logits, int32_t n, int32_t id, float temperature)
{
    double inv_t = temperature > 0.0f ? 1.0 / (double)temperature : 1.0;
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > mx)
            mx = logits[i];
    if (!isfinite(mx))
        return -INFINITY;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(logits[i]))
            sum += exp(((double)logits[i] - mx) * inv_t);
    /* sum >= 1: the finite maximum adds exp(0) (cppcheck assumes an empty loop) */
    /* cppcheck-suppress invalidFunctionArg */
    double lp = ((double)logits[id] - mx) * inv_t - log(sum);
    return isnan(lp) ? -INFINITY : (float)lp;
}

void lq_gen_free(lq_gen_state *g)
{
    if (!g)
        return;
    lq_draft_free(g);
    lq_detok_free(g->dt);
    lq_stopper_free(g->stp);
    lq_sampler_free(g->smp);
    free(g->logits);
    lq_grammar_state_free(g->gs);
    lq_grammar_free(g->grammar);
    lq_grammar_vocab_release(g->gv);
    free(g->bias);
    free(g->raw);
    free(g->tv);
    free(g->ti);
    free(g->head.exact);
    free(g->head.ids);
    free(g->head.x);
    g->raw = g->tv = g->head.x = NULL;
    g->ti = g->head.ids = NULL;
    g->head.exact = NULL;
    g->bounded = 0;
    g->gs = NULL;
    g->grammar = NULL;
    g->gv = NULL;
    g->bias = NULL;
    g->dt = NULL;
    g->stp = NULL;
    g->smp = NULL;
    g->logits = NULL;
}

#define LQ_GEN_MAX_BIAS 1024

/* logit_bias (copied) and the grammar (copied, with its recogniser and the tokenizer's
 * cached vocabulary trie). */
static int setup_constraints(lq_gen_state *g, const lq_generate_params *p,
                             const lq_tokenizer *tok, lq_err *err)
{
    if (p->n_logit_bias) {
        if (!p->logit_bias || p->n_logit_bias > LQ_GEN_MAX_BIAS)
            return lq_err_set(err, LQ_EINVAL, "generate: %zu logit_bias entries (at most %d, "
                              "and a non-NULL list)", p->n_logit_bias, LQ_GEN_MAX_BIAS);
        g->bias = malloc(p->n_logit_bias * sizeof *g->bias);
        if (!g->bias)
            return lq_err_set(err, LQ_ENOMEM, "generate: out of memory");
        for (size_t i = 0; i < p->n_logit_bias; i++) {
            const lq_logit_bias *b = &p->logit_bias[i];
            if (b->id < 0 || b->id >= g->n_vocab || !isfinite(b->bias))
                return lq_err_set(err, LQ_EINVAL, "generate: logit_bias[%zu]: token %d must "
                                  "be in [0, %d) with a finite bias", i, (int)b->id,
                                  (int)g->n_vocab);
            g->bias[g->n_bias++] = *b;
        }
    }
    if (!p->grammar)
        return LQ_OK;
    if (!tok)
        return lq_err_set(err, LQ_EINVAL, "generate: a grammar needs the model's tokenizer");
    g->grammar = gr_clone(p->grammar);
    if (!g->grammar)
        return lq_err_set(err, LQ_ENOMEM, "generate: out of memory");
    int rc = lq_grammar_state_create(g->grammar, &g->gs, err);
    if (!rc)
        rc = lq_grammar_vocab_acquire(tok, &g->gv, err);
    return rc;
}

/* Masks g->logits to the grammar (EOS kept where the grammar can end). Returns 0, 1 when
 * the output is complete and nothing but the end may follow, or an LQ_E* code. */
static int constrain(lq_gen_state *g, lq_err *err)
{
    if (lq_grammar_state_done(g->gs))
        return 1;
    const uint32_t *bits;
    int rc = gr_mask_bits(g->gs, g->gv, g->strip_first, &bits, err);
    if (rc)
        return rc;
    float *l = g->logits;
    int32_t nv = lq_grammar_vocab_size(g->gv);
    if (nv > g->n_vocab)
        nv = g->n_vocab;
    float eos_logit[LQ_GEN_MAX_EOS];
    for (size_t k = 0; k < g->n_eos; k++)
        eos_logit[k] = l[g->eos[k]];
    int any = 0;
    for (int32_t w = 0; w * 32 < nv; w++) {
        uint32_t m = bits[w];
        any |= m != 0;
        if (m == UINT32_MAX)
            continue;
        int32_t end = w * 32 + 32 < nv ? w * 32 + 32 : nv;
        for (int32_t i = w * 32; i < end; i++)
            if (!((m >> (i & 31)) & 1u))
                l[i] = -INFINITY;
    }
    for (int32_t i = nv; i < g->n_vocab; i++)
        l[i] = -INFINITY;
    /* an end-of-sequence id ends the output whatever its text: allowed exactly where the
     * grammar can end */
    int can_end = lq_grammar_state_can_end(g->gs);
    for (size_t k = 0; k < g->n_eos; k++)
        l[g->eos[k]] = can_end ? eos_logit[k] : -INFINITY;
    if (!any)
        return can_end ? 1
                       : lq_err_set(err, LQ_EINVAL, "grammar: no token of the vocabulary can "
                                    "continue the output here (the grammar needs text the "
                                    "tokenizer cannot produce)");
    return 0;
}

/* ---- the bounded head ----
 *
 * With the model's bounded lm_head, a decode step's logits are exact for the rows the forward
 * pass chose (lq_head_req) and upper bounds elsewhere. Bias, the grammar mask and the
 * penalties are non-decreasing functions of one token's logit (in float too: correctly
 * rounded operations are monotone), so after them every non-exact row still holds an upper
 * bound of its value in the exact model. certify() then checks that the exact rows decide
 * what the sampler does, or lists the rows that must be computed first:
 *   greedy     the best exact row beats every bound (ties go to the lower id, as argmax);
 *   top-k      the k best exact rows beat every bound (the sampler's total order);
 *   otherwise  every bound is below the best exact logit by more than T (ln 1e6 + ln n), so
 *              the rows left out carry at most 1e-6 of the probability mass (with min-p and
 *              no top-p: more than T ln(1/min_p), below the cut, so nothing changes).
 * Rows left out get -inf before the pick. The step rescales nothing: rescored rows are
 * computed by the same kernel as the full head (bit-identical), the transforms run again
 * from the head's output, and after two rounds (one suffices: each rule's rows are the ones
 * that could reach the current threshold, which only rises) the whole head is computed. */

static inline float key_of(float v) { return isnan(v) ? -INFINITY : v; }
static inline int better(float va, int32_t ia, float vb, int32_t ib)
{
    va = key_of(va);
    vb = key_of(vb);
    return va > vb || (va == vb && ia < ib);
}

static int setup_bounded(lq_gen_state *g, lq_model *m, const lq_generate_params *p, lq_err *err)
{
    const lq_sampler_params *sp = &p->sampling;
    int32_t n = g->n_vocab;
    if (!m || !m->lmb.wanted || p->full_logits || (p->hook && p->hook->on_logits))
        return LQ_OK;
    int k = 1;
    float window = 0;
    if (sp->temperature > 0.0f) {
        if (sp->top_k > 0 && sp->top_k < n) {
            if (sp->top_k > LQ_HEAD_MAX_K)
                return LQ_OK; /* exact: a heap of the bounds that deep is not worth it */
            k = sp->top_k;
        } else if (sp->top_p >= 1.0f && sp->min_p > 0.0f) {
            window = sp->temperature * (float)(log(1.0 / sp->min_p) + 0.01);
        } else {
            window = sp->temperature * (float)(log(1e6) + log((double)n));
        }
    }
    if (!lq_model_head_wait(m))
        return LQ_OK; /* the copy could not be made: the exact head */
    size_t words = ((size_t)n + 31) / 32;
    g->head.cap = n / 4 + 1;
    g->head.k = k;
    g->head.window = window;
    g->head.logits = g->logits;
    g->head.exact = malloc(words * sizeof(uint32_t));
    g->head.ids = malloc((size_t)g->head.cap * sizeof(int32_t));
    g->head.x = malloc((size_t)m->n_embd * sizeof(float));
    g->raw = malloc((size_t)n * sizeof(float));
    g->tv = malloc((size_t)n * sizeof(float));
    g->ti = malloc((size_t)n * sizeof(int32_t));
    if (!g->head.exact || !g->head.ids || !g->head.x || !g->raw || !g->tv || !g->ti)
        return lq_err_set(err, LQ_ENOMEM, "generate: out of memory for the bounded lm_head");
    g->m = m;
    g->sp = *sp;
    g->bounded = 1;
    return LQ_OK;
}

lq_head_req *lq_gen_head(lq_gen_state *g) { return g && g->bounded ? &g->head : NULL; }

static void note_max(double *dst, double v)
{
    double cur;
    __atomic_load(dst, &cur, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange(dst, &cur, &v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* 0: the exact rows decide (the others now -inf); > 0: that many rows to compute first, in
 * g->ti; -1: compute the whole head. */
static int certify(lq_gen_state *g, double *uncovered)
{
    const lq_sampler_params *p = &g->sp;
    const lq_head_req *h = &g->head;
    const int32_t n = g->n_vocab;
    float *v = g->logits;
    int nu = 0;
    *uncovered = 0;
    if (p->temperature <= 0.0f) {
        float M = -INFINITY;
        for (int32_t r = 0; r < n; r++)
            if (lq_head_is_exact(h, r) && key_of(v[r]) > M)
                M = key_of(v[r]);
        if (M == -INFINITY)
            return -1;
        for (int32_t r = 0; r < n; r++)
            if (!lq_head_is_exact(h, r) && key_of(v[r]) >= M)
                g->ti[nu++] = r;
    } else if (p->top_k > 0 && p->top_k < n) {
        int32_t m = 0;
        for (int32_t r = 0; r < n; r++)
            if (lq_head_is_exact(h, r)) {
                g->tv[m] = v[r];
                g->ti[m++] = r;
            }
        if (m < p->top_k)
            return -1;
        int got = lq_top_k(g->tv, m, p->top_k, g->kb_ids, g->kb_vals);
        float tv = g->kb_vals[got - 1];
        int32_t tid = g->ti[g->kb_ids[got - 1]];
        if (key_of(tv) == -INFINITY)
            return -1;
        for (int32_t r = 0; r < n; r++)
            if (!lq_head_is_exact(h, r) && better(v[r], r, tv, tid))
                g->ti[nu++] = r;
    } else {
        float mx = -INFINITY;
        for (int32_t r = 0; r < n; r++)
            if (lq_head_is_exact(h, r) && key_of(v[r]) > mx)
                mx = key_of(v[r]);
        if (!isfinite(mx))
            return -1;
        double inv_t = 1.0 / (double)p->temperature;
        int minp_only = p->top_p >= 1.0f && p->min_p > 0.0f;
        double lim = minp_only ? log(1.0 / p->min_p) + 0.01 : log(1e6) + log((double)n);
        double out = 0, in = 0;
        for (int32_t r = 0; r < n; r++) {
            double d = ((double)key_of(v[r]) - mx) * inv_t;
            if (lq_head_is_exact(h, r))
                in += exp(d);
            else if (d >= -lim)
                g->ti[nu++] = r;
            else
                out += exp(d);
        }
        if (!nu && !minp_only) {
            *uncovered = out / in;
            if (!(*uncovered <= 1e-6))
                return -1;
        }
    }
    if (nu)
        return nu;
    for (int32_t r = 0; r < n; r++)
        if (!lq_head_is_exact(h, r))
            v[r] = -INFINITY;
    return 0;
}

int lq_gen_begin(lq_gen_state *g, lq_model *m, int pos0, int n_ctx, const int32_t *prompt,
                 size_t n_prompt, const lq_generate_params *p, lq_generate_result *res,
                 lq_err *err)
{
    memset(g, 0, sizeof *g);
    memset(res, 0, sizeof *res);
    g->res = res;
    if (!prompt || n_prompt == 0)
        return lq_err_set(err, LQ_EINVAL, "generate: empty prompt (at least one token id is "
                                          "needed, e.g. BOS)");
    lq_generate_params defaults;
    if (!p) {
        lq_generate_defaults(&defaults);
        p = &defaults;
    }
    if (p->max_tokens < 0)
        return lq_err_set(err, LQ_EINVAL, "generate: max_tokens %d must be >= 0", p->max_tokens);
    int rc = lq_sampler_params_check(&p->sampling, err);
    if (rc)
        return lq_err_prefix(err, "generate");

    const lq_model_info *info = m ? lq_model_get_info(m) : NULL;
    if (!info || info->n_vocab < 1)
        return lq_err_set(err, LQ_EINVAL, "generate: session has no model");
    const int32_t n_vocab = info->n_vocab;
    const lq_tokenizer *tok = lq_model_tokenizer(m);

    if (n_prompt > (size_t)(n_ctx - pos0))
        return lq_err_set(err, LQ_ECONTEXT,
                          "generate: prompt of %zu tokens at position %d does not fit the "
                          "context of %d tokens", n_prompt, pos0, n_ctx);
    res->n_prompt = (int)n_prompt;

    /* End-of-sequence ids: the caller's list, else the model's EOS and EOT. */
    if (p->eos_ids) {
        if (p->n_eos > LQ_GEN_MAX_EOS)
            return lq_err_set(err, LQ_EINVAL, "generate: %zu eos_ids exceed the limit %d",
                              p->n_eos, LQ_GEN_MAX_EOS);
        for (size_t i = 0; i < p->n_eos; i++) {
            if (p->eos_ids[i] < 0 || p->eos_ids[i] >= n_vocab)
                return lq_err_set(err, LQ_EINVAL,
                                  "generate: eos_ids[%zu] = %d outside the vocabulary [0, %d)",
                                  i, (int)p->eos_ids[i], (int)n_vocab);
            g->eos[g->n_eos++] = p->eos_ids[i];
        }
    } else if (p->n_eos > 0) {
        return lq_err_set(err, LQ_EINVAL, "generate: n_eos %zu but eos_ids is NULL", p->n_eos);
    } else if (tok) {
        int32_t e1 = lq_tokenizer_eos(tok), e2 = lq_tokenizer_eot(tok);
        if (e1 >= 0 && e1 < n_vocab)
            g->eos[g->n_eos++] = e1;
        if (e2 >= 0 && e2 < n_vocab && e2 != e1)
            g->eos[g->n_eos++] = e2;
    }
    if (p->ignore_eos)
        g->n_eos = 0;
    g->n_vocab = n_vocab;
    g->temperature = p->sampling.temperature;
    g->max_tokens = p->max_tokens;
    g->max_new = 0;

    /* Everything the loop needs, before any model work. */
    g->logits = malloc((size_t)n_vocab * sizeof *g->logits); /* [n_vocab] next-token logits */
    if (!g->logits) {
        rc = lq_err_set(err, LQ_ENOMEM, "generate: out of memory for %d logits", (int)n_vocab);
        goto fail;
    }
    rc = lq_sampler_create(&p->sampling, n_vocab, &g->smp, err);
    if (rc)
        goto fail;
    rc = lq_stopper_create(p->stop, p->n_stop, &g->stp, err);
    if (rc) {
        lq_err_prefix(err, "generate");
        goto fail;
    }
    if (tok) {
        rc = lq_detok_create(tok, LQ_DETOK_SKIP_SPECIAL, &g->dt, err);
        if (rc)
            goto fail;
        /* The generated text continues the prompt (no SPM leading-space strip), except right
         * after a lone BOS at the start of the session, where it begins the text. */
        int32_t bos = lq_tokenizer_bos(tok);
        lq_detok_reset(g->dt, pos0 == 0 && n_prompt == 1 && prompt[0] == bos);
        g->strip_first = pos0 == 0 && n_prompt == 1 && prompt[0] == bos &&
                         lq_tokenizer_kind(tok) == LQ_TOK_SPM;
    }
    rc = setup_constraints(g, p, tok, err);
    if (rc)
        goto fail;
    rc = setup_bounded(g, m, p, err);
    if (rc)
        goto fail;
    rc = lq_draft_begin(g, p, prompt, n_prompt, n_ctx, err);
    if (rc)
        goto fail;
    return LQ_OK;
fail:
    lq_gen_free(g);
    return rc;
}

void lq_gen_set_limit(lq_gen_state *g, int limit)
{
    /* Every generated token must fit the context (the last one is never decoded, but a
     * prompt + completion longer than the context could not be continued). */
    g->max_new = g->max_tokens < limit ? g->max_tokens : limit;
    if (g->max_new < 0)
        g->max_new = 0;
    g->res->finish = LQ_FINISH_LENGTH; /* unless something ends it first */
}

int lq_gen_step(lq_gen_state *g, lq_token_cb cb, void *user, lq_err *err)
{
    lq_generate_result *res = g->res;
    if (g->i >= g->max_new)
        return LQ_GEN_END; /* LENGTH (max_tokens 0 or no room left) */
    double ts = lq_now_ms();
    lq_head_req *hq = &g->head;
    int bnd = g->bounded && hq->valid && !hq->full;
    int64_t rescored = 0;
    if (bnd)
        memcpy(g->raw, g->logits, (size_t)g->n_vocab * sizeof(float));
    for (int round = 0;; round++) {
        for (size_t k = 0; k < g->n_bias; k++)
            g->logits[g->bias[k].id] += g->bias[k].bias;
        if (g->gs) {
            double tc = lq_now_ms();
            int c = constrain(g, err);
            double tm = lq_now_ms() - tc;
            res->mask_ms += tm;
            if (c) {
                res->decode_ms += lq_now_ms() - ts;
                res->finish = c == 1 ? LQ_FINISH_STOP : LQ_FINISH_NONE;
                g->grammar_end = c == 1;
                hq->valid = 0;
                return c == 1 ? LQ_GEN_END : c;
            }
        }
        lq_sampler_penalize(g->smp, g->logits);
        if (!bnd)
            break;
        double unc;
        int nu = certify(g, &unc);
        if (nu == 0) {
            if (unc > 0)
                note_max((double *)&g->m->lmb.max_uncovered, unc);
            break;
        }
        /* rows the transforms brought into play: compute them, then transform again */
        if (nu < 0 || nu > hq->cap || round >= 2) {
            lq_head_rescore(g->m, hq, NULL, -1, g->raw);
            __atomic_fetch_add((uint64_t *)&g->m->lmb.n_gen_full, 1, __ATOMIC_RELAXED);
            bnd = 0;
        } else {
            lq_head_rescore(g->m, hq, g->ti, nu, g->raw);
            rescored += nu;
        }
        memcpy(g->logits, g->raw, (size_t)g->n_vocab * sizeof(float));
    }
    if (g->bounded && hq->valid) {
        res->lm_steps++;
        res->lm_full += hq->full;
        res->lm_rows_exact += hq->full ? g->n_vocab : hq->n_ids + rescored;
        if (rescored)
            __atomic_fetch_add((uint64_t *)&g->m->lmb.n_gen_rescored, (uint64_t)rescored,
                               __ATOMIC_RELAXED);
    }
    hq->valid = 0;
    int32_t id = lq_sampler_pick(g->smp, g->logits);
    res->decode_ms += lq_now_ms() - ts;
    if (id < 0 || id >= g->n_vocab) {
        res->finish = LQ_FINISH_NONE;
        return lq_err_set(err, LQ_ERANGE, "generate: sampler returned id %d", (int)id);
    }
    for (size_t k = 0; k < g->n_eos; k++)
        if (g->eos[k] == id) {
            res->finish = LQ_FINISH_EOS;
            return LQ_GEN_END;
        }
    if (g->gs) {
        double tm = lq_now_ms();
        int rc = lq_grammar_accept_token(g->gs, g->gv, id, g->strip_first, err);
        tm = lq_now_ms() - tm;
        res->mask_ms += tm;
        res->decode_ms += tm;
        if (rc) {
            res->finish = LQ_FINISH_NONE;
            return rc;
        }
        g->strip_first = 0;
    }
    lq_sampler_accept(g->smp, id);
    res->n_generated++;

    size_t plen = 0;
    int rc = g->dt ? lq_detok_push(g->dt, id, g->piece, sizeof g->piece, &plen, err) : LQ_OK;
    if (rc) {
        res->finish = LQ_FINISH_NONE;
        return rc;
    }
    const char *out;
    size_t out_len;
    int stopped = lq_stopper_push(g->stp, g->piece, plen, &out, &out_len);
    if (cb) {
        float lp = token_logprob(g->logits, g->n_vocab, id, g->temperature);
        if (cb(user, id, out, out_len, lp, g->logits)) {
            res->finish = LQ_FINISH_CANCELED;
            return LQ_GEN_END;
        }
    }
    if (stopped) {
        res->finish = LQ_FINISH_STOP;
        return LQ_GEN_END;
    }
    if (g->gs && lq_grammar_state_done(g->gs)) {
        /* complete, and nothing may follow: no decode for a token nobody samples after */
        res->finish = LQ_FINISH_STOP;
        g->grammar_end = 1;
        return LQ_GEN_END;
    }
    if (++g->i == g->max_new)
        return LQ_GEN_END; /* LENGTH: no decode for a token nobody will sample after */
    g->next_id = id;
    return LQ_GEN_NEXT;
}

void lq_gen_end(lq_gen_state *g, lq_token_cb cb, void *user)
{
    lq_generate_result *res = g->res;
    /* Release held-back text when the stream ended without a stop match or a cancel (the
     * grammar's end is not a stop string: the text before it is all output). */
    if (res->finish != LQ_FINISH_LENGTH && res->finish != LQ_FINISH_EOS && !g->grammar_end)
        return;
    size_t plen = 0;
    if (g->dt)
        lq_detok_flush(g->dt, g->piece, sizeof g->piece, &plen);
    const char *out;
    size_t out_len;
    if (lq_stopper_push(g->stp, g->piece, plen, &out, &out_len)) {
        /* the flushed bytes completed a stop string */
        res->finish = LQ_FINISH_STOP;
    } else {
        const char *rest;
        size_t rest_len;
        lq_stopper_flush(g->stp, &rest, &rest_len);
        if (rest_len && rest == out + out_len) {
            out_len += rest_len; /* adjacent in the stopper's buffer: one call */
        } else if (rest_len) {
            if (cb && out_len)
                cb(user, -1, out, out_len, 0.0f, NULL);
            out = rest;
            out_len = rest_len;
        }
    }
    if (cb && out_len)
        cb(user, -1, out, out_len, 0.0f, NULL);
}

int lq_generate(lq_session *s, const int32_t *prompt, size_t n_prompt,
                const lq_generate_params *p, lq_token_cb cb, void *user,
                lq_generate_result *res, lq_err *err)
{
    lq_generate_result local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    if (!s)
        return lq_err_set(err, LQ_EINVAL, "generate: session is NULL");
    lq_gen_state g;
    int rc = lq_gen_begin(&g, lq_session_model(s), lq_session_pos(s), lq_session_n_ctx(s),
                          prompt, n_prompt, p, res, err);
    if (rc)
        return rc;

    const lq_resid_hook *prev_hook = lq_session_hook(s);
    /* edits the caller put on the session itself: as with p->hook, no drafts (an edit's
     * memory of positions would have to be rolled back with the rejected rows) */
    if (prev_hook)
        lq_draft_free(&g);
    if (p && p->hook)
        lq_session_set_hook(s, p->hook);
    lq_session_set_head(s, lq_gen_head(&g));
    /* Prefill. */
    double t0 = lq_now_ms();
    rc = lq_session_eval(s, prompt, n_prompt, g.logits, NULL, err);
    res->prefill_ms = lq_now_ms() - t0;
    if (rc)
        goto done;
    lq_gen_set_limit(&g, lq_session_n_ctx(s) - lq_session_pos(s));
    int st = lq_gen_step(&g, cb, user, err);
    while (st == LQ_GEN_NEXT) {
        double ts = lq_now_ms();
        if (!g.draft) {
            rc = lq_session_decode(s, g.next_id, g.logits, err);
            res->decode_ms += lq_now_ms() - ts;
            if (rc) {
                res->finish = LQ_FINISH_NONE;
                goto done;
            }
            st = lq_gen_step(&g, cb, user, err);
            continue;
        }
        /* the token and its draft in one pass; the rows the sampler does not confirm leave
         * the KV cache again */
        int pos = lq_session_pos(s), keep = 0;
        int T = lq_draft_plan(&g, lq_session_n_ctx(s) - pos, 1);
        rc = lq_session_eval_rows(&s, lq_draft_ids(&g), &T, 1, lq_draft_outs(&g),
                                  lq_draft_heads(&g), err);
        double dt = lq_now_ms() - ts;
        res->decode_ms += dt;
        if (rc) {
            res->finish = LQ_FINISH_NONE;
            goto done;
        }
        st = lq_draft_verify(&g, T, dt, cb, user, &keep, err);
        if (keep < T)
            lq_session_truncate(s, pos + keep, NULL);
    }
    if (st < 0) {
        rc = st;
        goto done;
    }
    lq_gen_end(&g, cb, user);
    rc = LQ_OK;
done:
    lq_session_set_hook(s, prev_hook);
    lq_session_set_head(s, NULL);
    lq_gen_free(&g);
    return rc;
}

int lq_chat_template_for_model(const lq_model *m)
{
    if (!m)
        return LQ_CHAT_PLAIN;
    const lq_model_info *info = lq_model_get_info(m);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    const struct lq_gguf *g = lq_model_gguf(m);
    const char *tmpl = NULL;
    uint64_t tlen = 0;
    if (g && lq_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &tlen, NULL) != LQ_OK) {
        tmpl = NULL;
        tlen = 0;
    }
    int has_eot = 0, has_header = 0;
    if (tok) {
        has_eot = lq_tokenizer_find(tok, "<|eot_id|>", 10) >= 0;
        has_header = lq_tokenizer_find(tok, "<|start_header_id|>", 19) >= 0;
    }
    return lq_chat_template_detect(tmpl, (size_t)tlen, info ? info->arch_name : NULL, has_eot,
                                   has_header);
}
