/* Prompt-lookup speculative decoding (draft.h).
 *
 * Draft: the place in the text so far (prompt + fed output), or in the caller's prediction of
 * the output, whose preceding tokens match the end of the text longest (up to 32 tokens, the
 * latest place on ties) - and the tokens that followed it there. Quoting, summarising, code
 * edits and chat turns that repeat the prompt continue such spans the same way most of the
 * time, and the longer the match the more likely.
 *
 * How long a draft is worth verifying: a pass over 1 + k rows reads the weights once, so it
 * costs little more than a single step - c(1 + k) single steps, measured here per length
 * (moving averages of the pass times). Drafted token i survives with probability a^i, a the
 * acceptance measured in this request for matches of that length (recent trials weigh more,
 * and old failures fade back to a prior). k maximises the expected tokens per unit of cost,
 * (1 + a + ... + a^k) / c(1 + k), and is 0 - a plain step - when no k gains 2%: on text
 * whose drafts keep failing, drafting stops costing after a few tries. */
#include "engine/draft.h"

#include <stdlib.h>
#include <string.h>

#include "larql/generate.h"

#define NCLS 4      /* acceptance is tracked by how long the match is: 1, 2, 3-7, 8+ tokens */
#define FADE 0.97   /* per step, the weight of past trials: evidence fades back to the prior, so
                     * a class that failed is tried again after a while (a text that starts
                     * quoting after free prose) at the cost of one short pass */
#define PRIOR_N 2.0 /* the prior's weight in trials */
#define ALPHA0 0.15 /* cost of one more row, in single steps, before any measure */
#define ALPHA_MAX 0.5
#define EMA 0.2
#define MATCH_MAX 32

static const double PRIOR_A[NCLS] = {0.3, 0.4, 0.5, 0.7};

typedef struct lq_draft {
    int kmax;
    int32_t *hist;          /* [cap] the tokens in the session's KV from the prompt on, then
                             * the rows of the pass being verified */
    size_t n_hist, cap;
    int32_t *pred;          /* [n_pred] the prompt's last MATCH_MAX tokens, then the caller's
                             * prediction of the output (NULL: none) */
    size_t n_pred;
    int32_t ids[LQ_DRAFT_MAX + 1];
    float *outs[LQ_DRAFT_MAX + 1];        /* row j's logits: outs[0] = g->logits */
    lq_head_req *heads[LQ_DRAFT_MAX + 1]; /* row j's bounded-logits request (NULL: exact) */
    float *lbuf[LQ_DRAFT_MAX + 1];        /* [1..kmax] logits of the draft rows (lazily) */
    lq_head_req head[LQ_DRAFT_MAX + 1];   /* [1..kmax] their requests */
    int rows_ready;         /* lbuf/head allocated; -1: allocation failed (no drafting) */
    int cls;                /* match class of the draft being verified */
    double succ[NCLS], tri[NCLS]; /* fading acceptance counts per match class */
    double ms[LQ_DRAFT_MAX + 2]; /* [T] moving average of a pass of T rows, ms (0: unmeasured) */
} lq_draft;

static int env_mode(void)
{
    const char *e = getenv("LQ_DRAFT");
    if (e && !strcmp(e, "none"))
        return LQ_DRAFT_NONE;
    return LQ_DRAFT_NGRAM;
}

int lq_draft_begin(lq_gen_state *g, const lq_generate_params *p, const int32_t *prompt,
                   size_t n_prompt, int n_ctx, lq_err *err)
{
    g->draft = NULL;
    if (p->draft < LQ_DRAFT_AUTO || p->draft > LQ_DRAFT_NGRAM)
        return lq_err_set(err, LQ_EINVAL, "generate: draft mode %d (0 auto, 1 none, 2 ngram)", p->draft);
    if (p->draft_max < 0 || p->draft_max > LQ_DRAFT_MAX)
        return lq_err_set(err, LQ_EINVAL, "generate: draft_max %d outside 0..%d", p->draft_max,
                          LQ_DRAFT_MAX);
    if (p->n_prediction && (!p->prediction || p->n_prediction > LQ_PREDICTION_MAX))
        return lq_err_set(err, LQ_EINVAL, "generate: a prediction of %zu tokens (at most %d, and "
                          "a non-NULL list)", p->n_prediction, LQ_PREDICTION_MAX);
    for (size_t i = 0; i < p->n_prediction; i++)
        if (p->prediction[i] < 0 || p->prediction[i] >= g->n_vocab)
            return lq_err_set(err, LQ_EINVAL, "generate: prediction[%zu] = %d outside the "
                              "vocabulary [0, %d)", i, (int)p->prediction[i], (int)g->n_vocab);
    int mode = p->draft == LQ_DRAFT_AUTO ? env_mode() : p->draft;
    /* a grammar's state and an edit hook's memory of positions would have to be rolled back
     * with the rejected rows: such requests decode plainly */
    if (mode != LQ_DRAFT_NGRAM || g->gs || p->hook || g->max_tokens < 2)
        return LQ_OK;
    lq_draft *d = calloc(1, sizeof *d);
    if (!d)
        return lq_err_set(err, LQ_ENOMEM, "generate: out of memory");
    d->kmax = p->draft_max ? p->draft_max : 8;
    size_t gen = (size_t)(g->max_tokens < n_ctx ? g->max_tokens : n_ctx);
    d->cap = n_prompt + gen + LQ_DRAFT_MAX + 2;
    d->hist = malloc(d->cap * sizeof *d->hist);
    if (!d->hist) {
        free(d);
        return lq_err_set(err, LQ_ENOMEM, "generate: out of memory");
    }
    memcpy(d->hist, prompt, n_prompt * sizeof *d->hist);
    d->n_hist = n_prompt;
    g->draft = d;
    if (p->n_prediction) {
        size_t tail = n_prompt < MATCH_MAX ? n_prompt : MATCH_MAX;
        d->n_pred = tail + p->n_prediction;
        d->pred = malloc(d->n_pred * sizeof *d->pred);
        if (!d->pred)
            return lq_err_set(err, LQ_ENOMEM, "generate: out of memory for the prediction");
        memcpy(d->pred, prompt + n_prompt - tail, tail * sizeof *d->pred);
        memcpy(d->pred + tail, p->prediction, p->n_prediction * sizeof *d->pred);
    }
    return LQ_OK;
}

void lq_draft_free(lq_gen_state *g)
{
    lq_draft *d = g->draft;
    if (!d)
        return;
    for (int j = 1; j <= LQ_DRAFT_MAX; j++) {
        free(d->lbuf[j]);
        free(d->head[j].exact);
        free(d->head[j].ids);
        free(d->head[j].x);
    }
    free(d->hist);
    free(d->pred);
    free(d);
    g->draft = NULL;
}

/* The draft rows' buffers, once per request at its first draft (a request that never drafts
 * never holds them): 0, or -1 without memory (the request then decodes plainly). */
static int rows_alloc(lq_gen_state *g, lq_draft *d)
{
    if (d->rows_ready)
        return d->rows_ready > 0 ? 0 : -1;
    d->rows_ready = -1;
    size_t words = ((size_t)g->n_vocab + 31) / 32;
    for (int j = 1; j <= d->kmax; j++) {
        d->lbuf[j] = malloc((size_t)g->n_vocab * sizeof(float));
        if (!d->lbuf[j])
            return -1;
        if (!g->bounded)
            continue;
        lq_head_req *h = &d->head[j];
        *h = g->head; /* k, window, cap */
        h->logits = d->lbuf[j];
        h->valid = 0;
        h->exact = malloc(words * sizeof(uint32_t));
        h->ids = malloc((size_t)g->head.cap * sizeof(int32_t));
        h->x = malloc((size_t)g->m->n_embd * sizeof(float));
        if (!h->exact || !h->ids || !h->x)
            return -1;
    }
    d->rows_ready = 1;
    return 0;
}

/* The place in corpus c[0..nc) whose preceding tokens match the end of h[0..len) longest
 * (at most MATCH_MAX, ties to the later place): returns the index of what followed there
 * (< nc, so that there is a continuation), or -1 when not even the last token occurs; *mlen =
 * the match's length. When c is h itself, nc = len - 1 keeps the suffix from matching itself. */
static long best_match(const int32_t *c, size_t nc, const int32_t *h, size_t len, int *mlen)
{
    long best = -1;
    int bm = 0;
    const int32_t last = h[len - 1];
    for (size_t e = nc; e-- > 1;) {
        if (c[e - 1] != last)
            continue;
        int m = 1;
        while (m < MATCH_MAX && (size_t)m < e && (size_t)m < len && c[e - 1 - (size_t)m] == h[len - 1 - (size_t)m])
            m++;
        if (m > bm) {
            bm = m;
            best = (long)e;
            if (m == MATCH_MAX)
                break;
        }
    }
    *mlen = bm;
    return best;
}

static int match_class(int n) { return n >= 8 ? 3 : n >= 3 ? 2 : n - 1; }

/* A pass of T rows in single steps: measured (both T and 1), else 1 + alpha (T - 1) with alpha
 * the mean per-row cost of the lengths measured (ALPHA0 before any). Kept within
 * [1, 1 + ALPHA_MAX (T - 1)]: a slow pass now and then (another process on the cores) must not
 * stop drafting for good, as no longer pass would be timed again to correct it. The cost is
 * not linear (kernel tiles of 4 tokens; a small model's rows cost arithmetic rather than
 * reads: 2 rows cost 1.03 steps of the trained model, 3 rows 1.31), hence a table. */
static double rel_cost(const lq_draft *d, int T)
{
    double r;
    if (T == 1)
        return 1.0;
    if (d->ms[1] > 0 && d->ms[T] > 0) {
        r = d->ms[T] / d->ms[1];
    } else {
        double sum = 0;
        int n = 0;
        for (int t = 2; t <= LQ_DRAFT_MAX + 1 && d->ms[1] > 0; t++)
            if (d->ms[t] > 0) {
                sum += (d->ms[t] / d->ms[1] - 1) / (t - 1);
                n++;
            }
        r = 1 + (n ? sum / n : ALPHA0) * (T - 1);
    }
    double hi = 1 + ALPHA_MAX * (T - 1);
    return r < 1 ? 1 : r > hi ? hi : r;
}

/* The draft length worth verifying for acceptance a with at most L tokens available. */
static int best_k(const lq_draft *d, double a, int L)
{
    double best = 1.02, gain = 1.0, ai = 1.0;
    int k = 0;
    for (int i = 1; i <= L; i++) {
        ai *= a;
        gain += ai;
        double v = gain / rel_cost(d, i + 1);
        if (v > best) {
            best = v;
            k = i;
        }
    }
    return k;
}

int lq_draft_plan(lq_gen_state *g, int room, int allow)
{
    lq_draft *d = g->draft;
    d->ids[0] = g->next_id;
    d->outs[0] = g->logits;
    d->heads[0] = lq_gen_head(g);
    if (d->n_hist >= d->cap)
        return 1; /* cannot happen: cap holds the prompt and every token that may be fed */
    d->hist[d->n_hist] = g->next_id;
    size_t len = d->n_hist + 1;
    /* tokens that may still be sampled after this one, rows the context holds */
    int L = g->max_new - g->i - 1;
    if (L > room - 1)
        L = room - 1;
    if (L > d->kmax)
        L = d->kmax;
    if ((size_t)L > d->cap - len)
        L = (int)(d->cap - len);
    if (!allow || L < 1)
        return 1;
    for (int c = 0; c < NCLS; c++) {
        d->succ[c] *= FADE;
        d->tri[c] *= FADE;
    }
    /* the text so far, then the caller's prediction of the output */
    int mh = 0, mp = 0;
    long at = best_match(d->hist, len - 1, d->hist, len, &mh);
    long ap = d->pred ? best_match(d->pred, d->n_pred, d->hist, len, &mp) : -1;
    const int32_t *src = d->hist;
    size_t end = len;
    if (mp > mh) {
        at = ap;
        src = d->pred;
        end = d->n_pred;
    }
    if (at < 0)
        return 1;
    d->cls = match_class(mp > mh ? mp : mh);
    if ((size_t)at + (size_t)L > end)
        L = (int)(end - (size_t)at);
    double a = (d->succ[d->cls] + PRIOR_A[d->cls] * PRIOR_N) / (d->tri[d->cls] + PRIOR_N);
    int k = best_k(d, a, L);
    if (k < 1 || rows_alloc(g, d))
        return 1;
    for (int j = 1; j <= k; j++) {
        d->ids[j] = src[at + j - 1];
        d->hist[len + j - 1] = d->ids[j]; /* kept there if accepted */
        d->outs[j] = d->lbuf[j];
        d->heads[j] = g->bounded ? &d->head[j] : NULL;
    }
    return k + 1;
}

const int32_t *lq_draft_ids(const lq_gen_state *g) { return g->draft->ids; }
float *const *lq_draft_outs(const lq_gen_state *g) { return g->draft->outs; }
lq_head_req *const *lq_draft_heads(const lq_gen_state *g) { return g->draft->heads; }

/* Row j's logits and bounded request into g (and g's into row j): gen_step works on g. */
static void swap_row(lq_gen_state *g, lq_draft *d, int j)
{
    float *l = g->logits;
    g->logits = d->lbuf[j];
    d->lbuf[j] = l;
    if (g->bounded) {
        lq_head_req h = g->head;
        g->head = d->head[j];
        d->head[j] = h;
    }
}

/* Moving averages of the pass times per length; each sample is clipped to 3x the average so
 * far (a pass the OS preempted says nothing about the model). */
static void learn_cost(lq_draft *d, int T, double ms)
{
    if (!(ms >= 0) || T < 1 || T > LQ_DRAFT_MAX + 1)
        return;
    double *m = &d->ms[T];
    if (*m > 0 && ms > 3 * *m)
        ms = 3 * *m;
    *m = *m > 0 ? *m + EMA * (ms - *m) : ms;
}

int lq_draft_verify(lq_gen_state *g, int T, double eval_ms, lq_token_cb cb, void *user,
                    int *keep, lq_err *err)
{
    lq_draft *d = g->draft;
    lq_generate_result *res = g->res;
    learn_cost(d, T, eval_ms);
    int st = LQ_GEN_NEXT, j = 0, rejected = 0;
    for (; j < T; j++) {
        if (j)
            swap_row(g, d, j);
        st = lq_gen_step(g, cb, user, err);
        if (j)
            swap_row(g, d, j);
        if (st != LQ_GEN_NEXT)
            break;
        if (j + 1 < T && g->next_id != d->ids[j + 1]) {
            rejected = 1;
            break;
        }
    }
    /* rows 0..j were consumed (row j's logits gave the last token) */
    int kept = j < T ? j + 1 : T;
    *keep = kept;
    d->n_hist += (size_t)kept;
    if (T > 1) {
        int acc = kept - 1;
        res->draft_steps++;
        res->drafted += T - 1;
        res->draft_accepted += acc;
        /* trials: the accepted tokens and the one rejected; a stream that ended inside the
         * draft says nothing about the rows after the end */
        d->succ[d->cls] += acc;
        d->tri[d->cls] += acc + rejected;
    }
    return st;
}
