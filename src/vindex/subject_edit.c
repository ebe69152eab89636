/* Subject edits (INSERT ... MODE SUBJECT): a fact written once that every phrasing of the
 * question reads back, in chat too, while prompts that do not mention the subject are
 * computed bit for bit as before.
 *
 * The edit has three parts, all measured on the model at insert time (no weight changes):
 *   - a subject key: the residual after layer ls = n_layer / 8 at the subject's last token,
 *     averaged over the writing phrasings, with a threshold halfway between the lowest
 *     cosine of those positions and the highest of positions that are not the subject
 *     (other names in the same slot, a neutral text, the tokens before the subject). From the
 *     first position past it, the edit is armed for the rest of the sequence.
 *   - per target token i, gate keys: the residual after the last layer at the position that
 *     predicts token i, one key per writing phrasing, each with a threshold between the
 *     positions that must not fire (the same phrasings with other relations, every other
 *     position of the texts, a neutral text) and the nearest other phrasing's key (how far a
 *     paraphrase may be expected to sit).
 *   - per target token i, a value: added to the last layer's residual where a gate fires,
 *     along the direction that raises the token's logit against the phrasings' current
 *     predictions (the head's rows with the final norm folded in), scaled by the
 *     found by gradient ascent until the token is the first prediction with probability >= 0.9
 *     on every writing phrasing, plus one step for unseen phrasings. A token the head cannot
 *     put first from those states (a piece the model never emitted there, such as "Po" after a
 *     lone space) is instead written on the logits where the gate fires (lq_insert_result
 *     n_forced counts them).
 *   - the old answers (lq_patch_op.replaces, on the op that starts the edit): the model's
 *     predictions after the canonical question that answer it about this subject (old_answers
 *     below). Where the subject stands, their probability moves to the target's first token
 *     (edit_set.c, move_old_answers): a phrasing no gate recognises still prefers the target
 *     to the old fact wherever the model would have said the old fact.
 * Writing phrasings: "The {r} of {e} is", "{e}'s {r} is" and the chat question "What
 * is the {r} of {e}?" in the model's chat template (the evaluation suites ask in other
 * words). The edit is then checked: greedy decoding of "The {r} of {e} is" with every edit
 * of the overlay must produce the whole target, else it is refused (LQ_EREFUSED) and nothing
 * is kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/softmax.h"
#include "larql/chat.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "model/memo.h"
#include "vindex/vindex_internal.h"

#define SE_MAX_TARGET 16  /* target tokens */
#define SE_MAX_TEXTS 64
#define SE_PHRASINGS 3
#define SE_P_GOAL 0.9f    /* the value's goal on every writing phrasing */
#define SE_P_MIN 0.5f     /* below this on a writing phrasing the edit is refused */

/* other relations in the question's slot: what a gate key must not match */
static const char *const CONTRASTS[] = {"language", "capital", "color", "name"};
static const char NEUTRAL[] = "Once upon a time, there was a little girl named Lily. She liked to play in the park "
                              "with her friends.";

typedef struct se_text {
    int32_t *ids;
    size_t n;
    int subj_lo, subj_hi; /* the entity's token span [lo, hi] (-1: none) */
    int role, phr;        /* T_*, and which phrasing (0, 1 plain, 2 chat) */
    float *xg, *xr;       /* [n, D]: the residual after layers lg (gate) and the last layer
                           * (value) at every position */
} se_text;

typedef struct cap_hook {
    lq_resid_hook h;
    se_text *t;
    int lg, lr, D;
} cap_hook;

static void cap_after(void *ctx, int layer, int pos, int logits, float *x, int D)
{
    (void)logits;
    cap_hook *c = ctx;
    if (pos < 0 || (size_t)pos >= c->t->n || D != c->D)
        return;
    if (layer == c->lg)
        memcpy(c->t->xg + (size_t)pos * D, x, (size_t)D * sizeof *x);
    if (layer == c->lr)
        memcpy(c->t->xr + (size_t)pos * D, x, (size_t)D * sizeof *x);
}

static float cosv(const float *a, const float *b, int D)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < D; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? (float)(ab / sqrt(aa * bb)) : 0.0f;
}

static void unit_add(float *acc, const float *v, int D)
{
    double s = 0;
    for (int i = 0; i < D; i++)
        s += (double)v[i] * v[i];
    float inv = s > 0 ? (float)(1.0 / sqrt(s)) : 0.0f;
    for (int i = 0; i < D; i++)
        acc[i] += v[i] * inv;
}

static float norm2(const float *v, int D)
{
    double s = 0;
    for (int i = 0; i < D; i++)
        s += (double)v[i] * v[i];
    return (float)sqrt(s);
}

/* The ids of text as a prompt is encoded (BOS, special tokens), then extra ids. The subject's
 * span: the tokens of text up to the end of its last occurrence of entity, minus those up to
 * its start (the prefix's encoding must be the text's own first tokens). */
static int add_text(const lq_model *m, se_text *t, const char *text, const char *entity, const int32_t *extra,
                    size_t n_extra, lq_err *err)
{
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    unsigned fl = LQ_TOK_PARSE_SPECIAL | (lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = lq_tokenizer_encode(tok, text, strlen(text), fl, &ids, &n, err);
    if (rc)
        return rc;
    int32_t *all = realloc(ids, (n + n_extra + 1) * sizeof *all);
    if (!all) {
        free(ids);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    if (n_extra) /* extra may be NULL when there is none */
        memcpy(all + n, extra, n_extra * sizeof *all);
    t->ids = all;
    t->n = n + n_extra;
    t->subj_lo = t->subj_hi = -1;
    const char *at = NULL;
    for (const char *p = entity ? strstr(text, entity) : NULL; p; p = strstr(p + 1, entity))
        at = p;
    for (int part = 0; at && part < 2; part++) {
        /* the space before a word belongs to its first token: cut before it */
        size_t cut = part ? (size_t)(at - text) + strlen(entity) : (size_t)(at - text) - (at > text && at[-1] == ' ');
        int32_t *pid = NULL;
        size_t pn = 0;
        if (lq_tokenizer_encode(tok, text, cut, fl, &pid, &pn, NULL) == 0 && pn <= n &&
            !memcmp(pid, all, pn * sizeof *pid)) {
            if (part)
                t->subj_hi = (int)pn - 1;
            else
                t->subj_lo = (int)pn;
        }
        free(pid);
    }
    if (t->subj_hi < t->subj_lo || t->subj_hi < 0)
        t->subj_lo = t->subj_hi = -1;
    return LQ_OK;
}

/* Texts that begin with the same tokens (one subject's phrasings of several relations:
 * "Atlantis's capital is", "Atlantis's language is") share them: a text whose first k >=
 * SE_SHARE_MIN tokens are an earlier text's runs only its other tokens, on a copy of that
 * text's K/V and residuals at the k positions. The same computation: a position's K/V and
 * residuals depend on the tokens up to it alone, and attention reads them from the cache in
 * either case. */
#define SE_SHARE_MIN 4

static size_t common_prefix(const se_text *a, const se_text *b)
{
    size_t k = 0;
    while (k < a->n && k < b->n && a->ids[k] == b->ids[k])
        k++;
    return k;
}

/* One batched prefill of texts t[which[0..n)], each from position from[] on. */
static int run_batch(lq_session **ss, const se_text *t, const int *which, const size_t *from, int n, lq_err *err)
{
    lq_session *bs[SE_MAX_TEXTS];
    int counts[SE_MAX_TEXTS];
    size_t total = 0, off = 0;
    for (int i = 0; i < n; i++)
        total += t[which[i]].n - from[which[i]];
    if (!n)
        return LQ_OK;
    int32_t *ids = malloc(total * sizeof *ids);
    if (!ids)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const se_text *x = &t[which[i]];
        size_t k = from[which[i]];
        bs[i] = ss[which[i]];
        counts[i] = (int)(x->n - k);
        memcpy(ids + off, x->ids + k, (x->n - k) * sizeof *ids);
        off += x->n - k;
    }
    int rc = lq_session_eval_batch(bs, ids, counts, n, NULL, err);
    free(ids);
    return rc;
}

static void *dup_mem(const void *p, size_t n)
{
    void *q = malloc(n);
    if (q)
        memcpy(q, p, n);
    return q;
}

/* The tokens of a text before its subject ("<|begin_of_text|>The capital of", a chat
 * template's header and "What is the capital of") are the same in every insert of one
 * relation: the first such insert on a model keeps their K/V (a session holding just those
 * positions) and residuals in the model's memo, and later ones copy them from there. */
typedef struct prefix_memo {
    size_t n;
    int32_t *ids;
    lq_session *s;
    float *xg, *xr;
} prefix_memo;

static void prefix_free(void *p)
{
    prefix_memo *c = p;
    lq_session_free(c->s);
    free(c->ids), free(c->xg), free(c->xr), free(c);
}

static void prefix_key(char *key, size_t cap, const se_text *t, size_t k, int lg, int lr)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the ids (the value holds them too) */
    for (size_t i = 0; i < k; i++)
        h = (h ^ (uint32_t)t->ids[i]) * 1099511628211ULL;
    snprintf(key, cap, "subject_edit.prefix %d %d %zu %016llx", lg, lr, k, (unsigned long long)h);
}

/* The positions of text t before its subject that the memo may hold (0: none). */
static size_t memo_prefix_len(const se_text *t)
{
    return t->subj_lo >= SE_SHARE_MIN && (size_t)t->subj_lo < t->n ? (size_t)t->subj_lo : 0;
}

/* Text t's first k positions from the memo into session s and its residuals: 1 when there. */
static int prefix_from_memo(lq_model *m, se_text *t, size_t k, lq_session *s, int lg, int lr)
{
    char key[96];
    prefix_key(key, sizeof key, t, k, lg, lr);
    const prefix_memo *c = lq_model_memo_get(m, key);
    if (!c || c->n != k || memcmp(c->ids, t->ids, k * sizeof *t->ids) || lq_session_copy_prefix(s, c->s, (int)k, NULL))
        return 0;
    size_t bytes = k * (size_t)lq_model_get_info(m)->n_embd * sizeof(float);
    memcpy(t->xg, c->xg, bytes);
    memcpy(t->xr, c->xr, bytes);
    return 1;
}

/* Keeps text t's first k positions (computed in session s) in the memo; failing only costs a
 * later insert the positions. */
static void prefix_to_memo(lq_model *m, const se_text *t, size_t k, const lq_session *s, int lg, int lr)
{
    size_t bytes = k * (size_t)lq_model_get_info(m)->n_embd * sizeof(float);
    prefix_memo *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->n = k;
    c->ids = dup_mem(t->ids, k * sizeof *t->ids);
    c->xg = dup_mem(t->xg, bytes);
    c->xr = dup_mem(t->xr, bytes);
    if (!c->ids || !c->xg || !c->xr || lq_session_create(m, (int)k, &c->s, NULL) ||
        lq_session_copy_prefix(c->s, s, (int)k, NULL)) {
        prefix_free(c);
        return;
    }
    char key[96];
    prefix_key(key, sizeof key, t, k, lg, lr);
    lq_model_memo_put(m, key, c, lq_model_kv_bytes(m, (int)k) + 2 * bytes + k * sizeof *c->ids, prefix_free);
}

/* Runs every text through the model, capturing layers lg and lr: the texts that share no
 * prefix in one batched prefill (each from the end of its prefix the memo holds), then the
 * rest of the others in a second. */
static int run_texts(lq_model *m, se_text *t, int nt, int lg, int lr, lq_err *err)
{
    int D = lq_model_get_info(m)->n_embd, rc = LQ_OK;
    lq_session *ss[SE_MAX_TEXTS] = {0};
    cap_hook hk[SE_MAX_TEXTS];
    int lead[SE_MAX_TEXTS] = {0}, first[SE_MAX_TEXTS] = {0}, rest[SE_MAX_TEXTS] = {0}, n1 = 0, n2 = 0;
    size_t from[SE_MAX_TEXTS] = {0};
    for (int i = 0; i < nt; i++) {
        lead[i] = -1, from[i] = 0;
        for (int j = 0; j < i; j++) {
            size_t k = lead[j] < 0 ? common_prefix(&t[i], &t[j]) : 0;
            if (k >= SE_SHARE_MIN && k < t[i].n && k > from[i])
                lead[i] = j, from[i] = k;
        }
        if (lead[i] < 0)
            first[n1++] = i;
        else
            rest[n2++] = i;
    }
    for (int i = 0; !rc && i < nt; i++) {
        t[i].xg = calloc(t[i].n * (size_t)D, sizeof(float));
        t[i].xr = calloc(t[i].n * (size_t)D, sizeof(float));
        if (!t[i].xg || !t[i].xr) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        if ((rc = lq_session_create(m, (int)t[i].n, &ss[i], err)))
            break;
        hk[i] = (cap_hook){{cap_after, NULL, NULL, NULL, NULL}, &t[i], lg, lr, D};
        hk[i].h.ctx = &hk[i];
        lq_session_set_hook(ss[i], &hk[i].h);
    }
    int known[SE_MAX_TEXTS] = {0};
    for (int r = 0; !rc && r < n1; r++) {
        int i = first[r];
        size_t k = memo_prefix_len(&t[i]);
        if (k && (known[i] = prefix_from_memo(m, &t[i], k, ss[i], lg, lr)))
            from[i] = k;
    }
    if (!rc)
        rc = run_batch(ss, t, first, from, n1, err);
    for (int r = 0; !rc && r < n1; r++) {
        int i = first[r];
        size_t k = memo_prefix_len(&t[i]);
        if (k && !known[i])
            prefix_to_memo(m, &t[i], k, ss[i], lg, lr);
    }
    for (int r = 0; !rc && r < n2; r++) {
        int i = rest[r], j = lead[i];
        size_t bytes = from[i] * (size_t)D * sizeof(float);
        rc = lq_session_copy_prefix(ss[i], ss[j], (int)from[i], err);
        memcpy(t[i].xg, t[j].xg, bytes);
        memcpy(t[i].xr, t[j].xr, bytes);
    }
    if (!rc)
        rc = run_batch(ss, t, rest, from, n2, err);
    for (int i = 0; i < nt; i++)
        lq_session_free(ss[i]);
    return rc;
}

/* The neutral text's residuals depend on the weights alone, not on the edit: a model's first
 * insert at a pair of layers runs it with the other texts and keeps its residuals in the
 * model's memo; later inserts copy them from there instead of running its ~50 tokens again
 * (a third of an insert's forward passes). */
typedef struct neutral_memo {
    size_t n;
    int32_t *ids;
    float *xg, *xr;
} neutral_memo;

static void neutral_free(void *p)
{
    neutral_memo *c = p;
    free(c->ids), free(c->xg), free(c->xr), free(c);
}

/* Runs texts t [nt] (the last one the neutral text) with the neutral text's residuals from
 * the memo when it has them for layers (lg, lr). */
static int run_texts_memo(lq_model *m, se_text *t, int nt, int lg, int lr, lq_err *err)
{
    int D = lq_model_get_info(m)->n_embd;
    se_text *nu = &t[nt - 1];
    size_t bytes = nu->n * (size_t)D * sizeof(float);
    char key[64];
    snprintf(key, sizeof key, "subject_edit.neutral %d %d", lg, lr);
    const neutral_memo *c = lq_model_memo_get(m, key);
    if (c && c->n == nu->n && !memcmp(c->ids, nu->ids, nu->n * sizeof *nu->ids)) {
        nu->xg = dup_mem(c->xg, bytes);
        nu->xr = dup_mem(c->xr, bytes);
        if (!nu->xg || !nu->xr)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        return run_texts(m, t, nt - 1, lg, lr, err);
    }
    int rc = run_texts(m, t, nt, lg, lr, err);
    neutral_memo *k = rc ? NULL : calloc(1, sizeof *k);
    if (k) { /* no memo (out of memory) only costs the next insert the pass */
        k->n = nu->n;
        k->ids = dup_mem(nu->ids, nu->n * sizeof *nu->ids);
        k->xg = dup_mem(nu->xg, bytes);
        k->xr = dup_mem(nu->xr, bytes);
        if (k->ids && k->xg && k->xr)
            lq_model_memo_put(m, key, k, 2 * bytes + k->n * sizeof *k->ids, neutral_free);
        else
            neutral_free(k);
    }
    return rc;
}

static void texts_free(se_text *t, int n)
{
    for (int i = 0; i < n; i++)
        free(t[i].ids), free(t[i].xg), free(t[i].xr);
}

static char *fmt_text(const char *f, const char *a, const char *b)
{
    size_t n = strlen(f) + strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, f, a, b);
    return s;
}

/* The chat question in the model's own template, ready to be answered. */
static char *chat_text(const lq_model *m, const char *entity, const char *relation, lq_err *err)
{
    char *q = fmt_text("What is the %s of %s?", relation, entity), *out = NULL;
    if (!q) {
        lq_err_set(err, LQ_ENOMEM, "out of memory");
        return NULL;
    }
    lq_chat_msg msg = {"user", q};
    lq_chat_format *f = NULL; /* the file's own template, as the chat routes render it */
    if (lq_chat_format_open(m, NULL, &f, err) || lq_chat_format_render(f, &msg, 1, 1, NULL, &out, err))
        out = NULL;
    lq_chat_format_free(f);
    free(q);
    return out;
}

/* The TOPK most likely tokens of logits l [V] and their probabilities; returns how many. */
enum { TOPK = 32 };
static int top_tokens(const float *l, int V, int32_t *ids, float *pr)
{
    double mx, z = lq_softmax_denominator(l, (size_t)V, &mx);
    int nk = 0;
    for (int j = 0; j < V; j++) { /* insertion into a sorted list */
        float p = (float)(exp((double)l[j] - mx) / z);
        if (nk == TOPK && p <= pr[nk - 1])
            continue;
        int at = nk < TOPK ? nk++ : TOPK - 1;
        while (at > 0 && pr[at - 1] < p)
            pr[at] = pr[at - 1], ids[at] = ids[at - 1], at--;
        pr[at] = p, ids[at] = j;
    }
    return nk;
}

/* The value of one target token, by gradient ascent on the lowest log-probability of the
 * token over the writing phrasings: X [P, D] are the residuals after the last layer where it
 * must win; each step moves the value by a quarter of their norm along the mean of the
 * phrasings' gradients (the head's rows with the final norm folded in, the top tokens'
 * expectation subtracted, the part along x removed: what the RMSNorm ignores), until the
 * token is the first prediction with probability >= SE_P_GOAL everywhere, then one step more
 * for the phrasings not seen. *prob: the lowest probability reached. lg0 (may be NULL): the
 * logits of X [P, V], the first step's (the value starts at zero). */
static int solve_value(lq_model *m, const float *X, int P, int32_t tok, const float *lg0, float *val, float *prob,
                       lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    int D = mi->n_embd, V = mi->n_vocab;
    float *lg = malloc((size_t)P * V * sizeof *lg), *Xu = malloc((size_t)P * D * sizeof *Xu);
    float *rows = malloc((size_t)(TOPK + 1) * D * sizeof *rows), *dir = malloc((size_t)D * sizeof *dir);
    float *g = malloc((size_t)D * sizeof *g);
    int rc = lg && Xu && rows && dir && g ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    double scale = 0;
    for (int w = 0; w < P; w++)
        scale += norm2(X + (size_t)w * D, D) / P;
    memset(val, 0, (size_t)D * sizeof *val);
    float pmin = 0;
    int extra = -1;
    for (int step = 0; !rc && step < 40; step++) {
        for (int w = 0; w < P; w++)
            for (int i = 0; i < D; i++)
                Xu[(size_t)w * D + i] = X[(size_t)w * D + i] + val[i];
        if (step == 0 && lg0) /* computed with the old answers' rows (one pass over the head) */
            memcpy(lg, lg0, (size_t)P * V * sizeof *lg);
        else if ((rc = lq_model_logits_from_hidden(m, Xu, (size_t)P, lg, err)))
            break;
        pmin = 1;
        int first = 1;
        memset(dir, 0, (size_t)D * sizeof *dir);
        for (int w = 0; !rc && w < P; w++) {
            const float *l = lg + (size_t)w * V;
            int32_t ids[TOPK + 1];
            float pr[TOPK] = {0};
            int nk = top_tokens(l, V, ids, pr);
            double mx, z = lq_softmax_denominator(l, (size_t)V, &mx);
            float p = (float)(exp((double)l[tok] - mx) / z);
            pmin = p < pmin ? p : pmin;
            first &= l[tok] >= mx;
            ids[nk] = tok;
            if ((rc = lq_model_output_rows(m, ids, (size_t)nk + 1, rows, err)))
                break;
            const float *xw = Xu + (size_t)w * D;
            double gx = 0, xx = 0;
            for (int i = 0; i < D; i++) {
                double a = rows[(size_t)nk * D + i];
                for (int k = 0; k < nk; k++)
                    a -= pr[k] * rows[(size_t)k * D + i];
                g[i] = (float)a;
                gx += a * xw[i], xx += (double)xw[i] * xw[i];
            }
            for (int i = 0; xx > 0 && i < D; i++) /* the RMSNorm ignores the part along x */
                g[i] -= (float)(gx / xx) * xw[i];
            unit_add(dir, g, D);
        }
        if (getenv("LQ_SUBJECT_DEBUG"))
            fprintf(stderr, "  value of token %d: step %d, |value| %.3f of |x| -> p %.4f%s\n", (int)tok, step,
                    norm2(val, D) / scale, pmin, first ? " (first)" : "");
        if (rc || extra == 0)
            break;
        if (extra > 0)
            extra--;
        else if (first && pmin >= SE_P_GOAL)
            extra = 0; /* one step more, for the phrasings not seen */
        float n = norm2(dir, D);
        if (!(n > 0))
            break;
        for (int i = 0; i < D; i++)
            val[i] += (float)(0.25 * scale / n) * dir[i];
    }
    *prob = pmin;
    free(lg), free(Xu), free(rows), free(dir), free(g);
    return rc;
}

/* The highest cosine of key with the gate-layer residuals of the negative
 * positions: every position of every text except those skip() keeps. */
typedef struct se_neg {
    const se_text *t;
    int nt;
} se_neg;

static float max_cos(const se_neg *ng, const float *key, int D, int (*skip)(const se_text *, size_t, void *),
                     void *u)
{
    float mx = -1;
    int bi = -1;
    size_t bp = 0;
    for (int i = 0; i < ng->nt; i++) {
        const se_text *t = &ng->t[i];
        for (size_t p = 0; p < t->n; p++) {
            if (skip && skip(t, p, u))
                continue;
            float c = cosv(key, t->xg + p * D, D);
            if (c > mx)
                mx = c, bi = i, bp = p;
        }
    }
    if (getenv("LQ_SUBJECT_DEBUG"))
        fprintf(stderr, "  max negative %.3f: text %d position %zu of %zu\n", mx, bi, bp, bi >= 0 ? ng->t[bi].n : 0);
    return mx;
}

/* The mean of the unit residuals of the HARD most similar negatives to pos (unit-added):
 * the positions a key must be told apart from first. */
#define HARD 4
static void hard_mean(const se_neg *ng, const float *pos, int D, int (*skip)(const se_text *, size_t, void *),
                      void *u, float *out)
{
    const float *best[HARD] = {0};
    float bc[HARD];
    int nb = 0;
    for (int i = 0; i < ng->nt; i++) {
        const se_text *t = &ng->t[i];
        for (size_t p = 1; p < t->n; p++) {
            if (skip && skip(t, p, u))
                continue;
            const float *x = t->xg + p * D;
            float c = cosv(pos, x, D);
            if (nb == HARD && c <= bc[nb - 1])
                continue;
            int at = nb < HARD ? nb++ : HARD - 1;
            while (at > 0 && bc[at - 1] < c)
                bc[at] = bc[at - 1], best[at] = best[at - 1], at--;
            bc[at] = c, best[at] = x;
        }
    }
    memset(out, 0, (size_t)D * sizeof *out);
    for (int k = 0; k < nb; k++)
        unit_add(out, best[k], D);
    for (int i = 0; nb && i < D; i++)
        out[i] /= (float)nb;
}

/* A contrastive key: the unit direction from the negatives' mean to pos (unit), so that the
 * direction every residual shares does not make everything look alike. */
static void contrast_key(const float *pos_unit_mean, const float *nmean, int D, float *key)
{
    for (int i = 0; i < D; i++)
        key[i] = pos_unit_mean[i] - nmean[i];
    float n = norm2(key, D);
    for (int i = 0; n > 0 && i < D; i++)
        key[i] /= n;
}

/* ---- the texts an edit is measured on ---- */

enum { T_PHRASE, T_CONTRAST, T_NEUTRAL };

/* gate negatives for target token i: positions after a text's entity (before it no subject
 * gate is open), except the positives */
typedef struct gate_skip {
    int token;
    size_t nt;           /* target tokens */
} gate_skip;

static int is_class_positive(const se_text *t, size_t p, const gate_skip *g)
{
    return t->role == T_PHRASE && p == t->n - g->nt + (size_t)g->token;
}

static int skip_gate(const se_text *t, size_t p, void *u)
{
    const gate_skip *g = u;
    if (t->subj_hi >= 0 && (int)p < t->subj_hi)
        return 1;
    return is_class_positive(t, p, g);
}

/* The positions that predict target token i in the texts that key k learns from: k = 0 the
 * plain writing phrasings together, k = 1 + w phrasing w alone. */
static int key_positive(const se_text *x, size_t q, int k, const gate_skip *gs)
{
    if (x->role != T_PHRASE || !is_class_positive(x, q, gs))
        return 0;
    return k == 0 ? x->phr != 2 : x->phr == k - 1;
}

/* The gates of target token 0: a key for the plain phrasings together and one per writing
 * phrasing. Each points from the mean of the negatives most like its positives (the same
 * subject's other relations, every other position, a neutral text) to the positives, with a
 * threshold a tenth of the way from the hardest negative to the weakest positive. A joint key
 * whose positives overlap the negatives is dropped; the canonical phrasing's own key is kept
 * even then, just under its own question. Later tokens follow the ones before them (one op
 * each, no gate). Appends the ops to ops. */
static int token_gates(const se_text *tx, int n, int n_phr, size_t nt, int i, int D, const lq_patch_op *proto,
                       const float *val, lq_patch *ops, lq_err *err)
{
    if (i > 0) {
        lq_patch_op op = *proto;
        op.down = (float *)val;
        return lq_patch_add(ops, &op, err);
    }
    gate_skip gs = {i, nt};
    se_neg all = {tx, n};
    float *key = malloc((size_t)D * sizeof *key), *pm = malloc((size_t)D * sizeof *pm);
    float *nm = malloc((size_t)D * sizeof *nm);
    int rc = key && pm && nm ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory"), first = 1;
    for (int k = 0; !rc && k < 1 + n_phr; k++) {
        memset(pm, 0, (size_t)D * sizeof *pm);
        int np = 0;
        for (int t = 0; t < n; t++)
            for (size_t q = 0; q < tx[t].n; q++)
                if (key_positive(&tx[t], q, k, &gs)) {
                    unit_add(pm, tx[t].xg + q * D, D);
                    np++;
                }
        if (!np)
            continue;
        for (int d = 0; d < D; d++)
            pm[d] /= (float)np;
        hard_mean(&all, pm, D, skip_gate, &gs, nm);
        contrast_key(pm, nm, D, key);
        float pos_min = 1;
        for (int t = 0; t < n; t++)
            for (size_t q = 0; q < tx[t].n; q++)
                if (key_positive(&tx[t], q, k, &gs)) {
                    float c = cosv(key, tx[t].xg + q * D, D);
                    pos_min = c < pos_min ? c : pos_min;
                }
        float neg_max = max_cos(&all, key, D, skip_gate, &gs);
        float thr = neg_max + 0.1f * (pos_min - neg_max);
        if (getenv("LQ_SUBJECT_DEBUG"))
            fprintf(stderr, "token %d key %d (%d positives): positives >= %.3f, negatives <= %.3f -> %.3f\n", i, k, np,
                    pos_min, neg_max, thr);
        if (pos_min <= neg_max) {
            if (k != 1)
                continue;
            thr = pos_min - 0.005f; /* the canonical question is answered even where the model sees
                                     * it like another (the same subject's other relation) */
        }
        lq_patch_op op = *proto;
        op.gate = key;
        op.gate_threshold = thr;
        op.down = first ? val : NULL;
        rc = lq_patch_add(ops, &op, err);
        first = 0;
    }
    free(key), free(pm), free(nm);
    return rc;
}

/* The old answers an edit displaces: the model's predictions after the canonical question
 * (phrasing 0, before the target) that answer this question about this subject: the old fact
 * of a subject the model knows (Paris, 0.99), or its guesses about one it does not (English
 * and French, a few percent each, after "The language of Narnia is"). A candidate is among
 * the most probable tokens there (p >= SE_OLD_MIN) and is not as probable after at least
 * one of the same subject's other questions (< a tenth of p): a token the model says
 * whatever the question ("the" after a subject it knows nothing of) answers nothing. At most
 * LQ_EDIT_MAX_REPLACED, most probable first; the target itself is never one. */
#define SE_OLD_MIN 0.02f
static int old_answers(lq_model *m, const se_text *tx, int n, int n_phr, size_t nt, int32_t target0, int32_t *out,
                       int *n_out, float *lg0, lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    int D = mi->n_embd, V = mi->n_vocab, rows = 0;
    *n_out = 0;
    float *X = malloc((size_t)(n + n_phr) * D * sizeof *X), *lg = malloc((size_t)(n + n_phr) * V * sizeof *lg);
    int rc = X && lg ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int t = 0; !rc && t < n; t++) { /* row 0: the canonical question; then the contrasts */
        if (t == 0 || (tx[t].role == T_CONTRAST && tx[t].phr == 0 && tx[t].n > 0)) {
            size_t q = t == 0 ? tx[0].n - nt : tx[t].n - 1;
            memcpy(X + (size_t)rows * D, tx[t].xr + q * D, (size_t)D * sizeof *X);
            rows++;
        }
    }
    /* then the rows solve_value starts from for the first target token (X + a zero value, as
     * it forms them): one pass over the head for both */
    for (int w = 0; !rc && w < n_phr; w++)
        for (int i = 0; i < D; i++)
            X[(size_t)(rows + w) * D + i] = tx[w].xr[(tx[w].n - nt) * D + i] + 0.0f;
    if (!rc)
        rc = lq_model_logits_from_hidden(m, X, (size_t)(rows + n_phr), lg, err);
    if (!rc)
        memcpy(lg0, lg + (size_t)rows * V, (size_t)n_phr * V * sizeof *lg0);
    int32_t ids[TOPK + 1];
    float pr[TOPK] = {0};
    int nk = rc ? 0 : top_tokens(lg, V, ids, pr);
    for (int c = 0; c < nk && *n_out < LQ_EDIT_MAX_REPLACED; c++) {
        if (pr[c] < SE_OLD_MIN)
            break;
        int32_t a = ids[c];
        int specific = 0;
        for (int r = 1; a != target0 && r < rows; r++) {
            const float *l = lg + (size_t)r * V;
            double mx, zr = lq_softmax_denominator(l, (size_t)V, &mx);
            specific |= exp((double)l[a] - mx) / zr < 0.1 * pr[c];
        }
        if (getenv("LQ_SUBJECT_DEBUG"))
            fprintf(stderr, "old answer: token %d, p %.3f: %s\n", (int)a, pr[c], specific ? "displaced" : "not an answer");
        if (specific)
            out[(*n_out)++] = a;
    }
    free(X), free(lg);
    return rc;
}

static int add_role(const lq_model *m, se_text *t, int role, int phr, const char *text, const char *entity,
                    const int32_t *extra, size_t n_extra, lq_err *err)
{
    int rc = text ? add_text(m, t, text, entity, extra, n_extra, err)
                  : (err && err->code ? err->code : lq_err_set(err, LQ_ENOMEM, "out of memory"));
    t->role = role;
    t->phr = phr;
    if (!rc && entity && t->subj_hi < 0)
        rc = lq_err_set(err, LQ_EINVAL, "insert: cannot find entity '%s' in its own phrasing", entity);
    return rc;
}

/* The phrasing w of a question about entity (0, 1 plain, 2 the chat form). */
static char *phrasing(const lq_model *m, int w, const char *entity, const char *relation, lq_err *err)
{
    if (w == 0)
        return fmt_text("The %s of %s is", relation, entity);
    if (w == 1)
        return fmt_text("%s's %s is", entity, relation);
    return chat_text(m, entity, relation, err);
}


int lq_vx_subject_insert(lq_overlay *o, lq_model *m, const lq_insert_params *p, lq_patch **out,
                         lq_insert_result *r, lq_err *err)
{
    (void)o;
    *out = NULL;
    const lq_model_info *mi = lq_model_get_info(m);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    int D = mi->n_embd, L = mi->n_layer;
    if (!tok)
        return lq_err_set(err, LQ_EUNSUPPORTED, "insert: the model has no tokenizer");
    int lr = L - 1, lg = L - 1;
    if (getenv("LQ_GATE_LAYER"))
        lg = atoi(getenv("LQ_GATE_LAYER")) % L;
    if (p->layer >= 0)
        lg = p->layer;
    /* the target's tokens, as they follow "... is" */
    int32_t *tt = NULL;
    size_t nt = 0;
    char *sp = fmt_text(" %s%s", p->target, "");
    int rc = sp ? lq_tokenizer_encode(tok, sp, strlen(sp), 0, &tt, &nt, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
    free(sp);
    if (!rc && nt == 0)
        rc = lq_err_set(err, LQ_EINVAL, "insert: target '%s' encodes to no tokens", p->target);
    if (!rc && nt > SE_MAX_TARGET)
        rc = lq_err_set(err, LQ_ERANGE, "insert: target '%s' is %zu tokens; a subject edit writes at most %d", p->target,
                        nt, SE_MAX_TARGET);
    se_text tx[SE_MAX_TEXTS];
    memset(tx, 0, sizeof tx);
    int n = 0, n_phr = 0;
    /* the subject's writing phrasings, each followed by the target but its last token */
    for (int w = 0; !rc && w < SE_PHRASINGS; w++, n++, n_phr++) {
        char *s = phrasing(m, w, p->entity, p->relation, err);
        rc = add_role(m, &tx[n], T_PHRASE, w, s, p->entity, tt, nt - 1, err);
        free(s);
    }
    /* the same subject's questions of other relations */
    const char *other[2];
    int no = 0;
    for (int c = 0; c < 4 && no < 2; c++)
        if (strcasecmp(CONTRASTS[c], p->relation))
            other[no++] = CONTRASTS[c];
    for (int c = 0; !rc && c < no; c++)
        for (int w = 0; !rc && w < 2; w++, n++) {
            char *s = phrasing(m, w, p->entity, other[c], err);
            rc = add_role(m, &tx[n], T_CONTRAST, w, s, p->entity, NULL, 0, err);
            free(s);
        }
    if (!rc && !(rc = add_role(m, &tx[n], T_NEUTRAL, 0, NEUTRAL, NULL, NULL, 0, err)))
        n++;
    for (int i = 0; !rc && i < n; i++)
        if (tx[i].n > (size_t)mi->n_ctx_train)
            rc = lq_err_set(err, LQ_ECONTEXT, "insert: a phrasing of %zu tokens exceeds the context %d", tx[i].n,
                            mi->n_ctx_train);
    if (!rc)
        rc = run_texts_memo(m, tx, n, lg, lr, err);

    float *val = malloc((size_t)D * sizeof *val), *X = malloc((size_t)n_phr * D * sizeof *X);
    float *lg0 = malloc((size_t)n_phr * mi->n_vocab * sizeof *lg0);
    if (!rc && (!val || !X || !lg0))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_patch *ops = NULL;
    if (!rc)
        rc = lq_patch_create("subject insert", NULL, D, &ops, err);
    float pmin_all = 1;
    int32_t old[LQ_EDIT_MAX_REPLACED];
    int n_old = 0;
    if (!rc)
        rc = old_answers(m, tx, n, n_phr, nt, tt[0], old, &n_old, lg0, err);
    for (size_t i = 0; !rc && i < nt; i++) {
        for (int w = 0; w < n_phr; w++) /* the position that predicts target token i */
            memcpy(X + (size_t)w * D, tx[w].xr + (tx[w].n - nt + i) * D, (size_t)D * sizeof *X);
        float pv = 0;
        if ((rc = solve_value(m, X, n_phr, tt[i], i == 0 ? lg0 : NULL, val, &pv, err)))
            break;
        /* a token the head cannot put first from these states (a piece the model never
         * emitted there): written on the logits where the gate fires, the residual left as is */
        int force = pv < SE_P_MIN;
        if (force) {
            memset(val, 0, (size_t)D * sizeof *val);
            r->n_forced++;
        } else {
            pmin_all = pv < pmin_all ? pv : pmin_all;
        }
        lq_patch_op proto;
        lq_patch_op_init(&proto, LQ_OP_INSERT_SUBJECT);
        proto.layer = lg;
        proto.feature = (int)i;
        proto.entity = p->entity;
        proto.relation = p->relation;
        proto.target = p->target;
        proto.target_id = tt[i];
        proto.confidence = isnan(p->confidence) ? 1.0f : p->confidence;
        proto.force = force;
        if (i == 0) {
            proto.n_replaces = n_old;
            memcpy(proto.replaces, old, (size_t)n_old * sizeof *old);
        }
        rc = token_gates(tx, n, n_phr, nt, (int)i, D, &proto, val, ops, err);
    }
    if (!rc) {
        r->mode = LQ_INSERT_SUBJECT;
        r->n_layers = 1;
        r->layers[0] = lg;
        r->weights = 1;
        r->target_prob = pmin_all;
        *out = ops;
        ops = NULL;
    }
    lq_patch_free(ops);
    free(val), free(X), free(lg0), free(tt);
    texts_free(tx, n);
    return rc;
}

/* Greedy decoding of the canonical prompt with edit set s: 1 when it produces the target's
 * tokens tt [nt] first; *p0: the first target token's probability after the prompt. */
int lq_vx_subject_check(lq_model *m, lq_edit_set *s, const lq_insert_params *p, const int32_t *tt, size_t nt,
                        float *p0, lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    char *prompt = lq_vx_canonical_prompt(p->entity, p->relation);
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned fl = LQ_TOK_PARSE_SPECIAL | (lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0);
    int rc = prompt ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_tokenizer_encode(tok, prompt, strlen(prompt), fl, &ids, &n, err);
    lq_session *ss = NULL;
    lq_resid_hook *h = NULL;
    float *lg = malloc((size_t)mi->n_vocab * sizeof *lg);
    if (!rc && !lg)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_session_create(m, (int)(n + nt + 1), &ss, err);
    if (!rc)
        rc = lq_edit_set_hook(s, LQ_EDITS_COMPOSE, &h, err);
    int ok = 0;
    if (!rc) {
        lq_session_set_hook(ss, h);
        rc = lq_session_eval(ss, ids, n, lg, NULL, err);
        ok = !rc;
        for (size_t i = 0; !rc && ok && i < nt; i++) {
            int32_t best = 0;
            for (int j = 1; j < mi->n_vocab; j++)
                if (lg[j] > lg[best])
                    best = j;
            if (i == 0) {
                double mx, z = lq_softmax_denominator(lg, (size_t)mi->n_vocab, &mx);
                *p0 = (float)(exp((double)lg[tt[0]] - mx) / z);
            }
            ok = best == tt[i];
            if (!ok && getenv("LQ_SUBJECT_DEBUG"))
                fprintf(stderr, "check: token %zu is %d, wanted %d\n", i, (int)best, (int)tt[i]);
            if (ok && i + 1 < nt)
                rc = lq_session_decode(ss, best, lg, err);
        }
    }
    lq_session_free(ss);
    lq_edit_hook_free(h);
    free(lg), free(prompt), free(ids);
    return rc ? rc : ok;
}
