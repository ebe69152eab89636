/* larql eval-edits: how well an edit is read back, with CounterFact's definitions where they
 * exist. Each case of a suite (JSONL) is an edit plus the prompts that test it; the edit goes
 * into a scratch overlay (nothing persisted), is scored, and is dropped — or, with
 * opts.together = N, the first N edits go in together and every case is scored with all of
 * them applied. Scores per case:
 *   efficacy      log P(target | canonical) > log P(old answer | canonical) (teacher-forced)
 *   paraphrase    the same on each paraphrase prompt (fraction)
 *   chat          the greedy chat answer (the model's template) contains the target (fraction)
 *   generation    the greedy continuation of the canonical prompt starts with the target
 *   neighbourhood another entity's prompt: log P(its answer) > log P(target), and its greedy
 *                 first token unchanged by the edit (fraction)
 *   unrelated     max |delta logit| over the vocabulary at the last position of prompts that
 *                 mention no edited entity (0 = bit-identical)
 * and for the run, fluency: the perplexity of a held-out text with the edits over without. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/softmax.h"
#include "larql/chat.h"
#include "larql/generate.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/perplexity.h"
#include "vindex/vindex_internal.h"

#define EV_MAX_CASES 100000
#define EV_GEN_TOKENS 24

void lq_edit_eval_opts_init(lq_edit_eval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = -1;
    o->fluency_ctx = 128;
}

typedef struct ev_case {
    json_t *j; /* the suite line (owned) */
    const char *entity, *relation, *target, *canonical, *old;
    int mode, layer;
} ev_case;

static int encode(lq_model *m, const char *text, int bos, int32_t **ids, size_t *n, lq_err *err)
{
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    unsigned fl = LQ_TOK_PARSE_SPECIAL | (bos && lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0);
    return lq_tokenizer_encode(tok, text, strlen(text), fl, ids, n, err);
}

/* log P(cont | prompt) by teacher forcing, and (when last) the logits after the prompt. */
static int seq_logprob(lq_model *m, const lq_resid_hook *h, const char *prompt, const char *cont, double *lp,
                       float *last, lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t *pi = NULL, *ci = NULL;
    size_t np = 0, nc = 0;
    int rc = encode(m, prompt, 1, &pi, &np, err);
    if (!rc && cont)
        rc = encode(m, cont, 0, &ci, &nc, err);
    size_t n = np + (nc ? nc - 1 : 0);
    int32_t *all = rc ? NULL : malloc((n + 1) * sizeof *all);
    float *lg = rc ? NULL : malloc((nc ? nc : 1) * (size_t)mi->n_vocab * sizeof *lg);
    lq_session *s = NULL;
    if (!rc && (!all || !lg))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc && np == 0)
        rc = lq_err_set(err, LQ_EINVAL, "eval: empty prompt");
    if (!rc && n > (size_t)mi->n_ctx_train)
        rc = lq_err_set(err, LQ_ECONTEXT, "eval: prompt of %zu tokens exceeds the context", n);
    if (!rc)
        rc = lq_session_create(m, (int)n, &s, err);
    if (!rc) {
        memcpy(all, pi, np * sizeof *all);
        if (nc)
            memcpy(all + np, ci, (nc - 1) * sizeof *all);
        lq_session_set_hook(s, h);
        /* the prompt but its last token, then the rest with every position's logits */
        if (np > 1)
            rc = lq_session_eval(s, all, np - 1, NULL, NULL, err);
        if (!rc)
            rc = lq_session_eval(s, all + np - 1, n - (np - 1), NULL, lg, err);
    }
    *lp = 0;
    for (size_t i = 0; !rc && i < nc; i++) {
        const float *l = lg + i * (size_t)mi->n_vocab;
        double mx, z = lq_softmax_denominator(l, (size_t)mi->n_vocab, &mx);
        *lp += (double)l[ci[i]] - mx - log(z);
    }
    if (!rc && last)
        memcpy(last, lg, (size_t)mi->n_vocab * sizeof *last);
    lq_session_free(s);
    free(pi), free(ci), free(all), free(lg);
    return rc;
}

typedef struct gen_buf {
    char s[512];
    size_t n;
} gen_buf;

static int gen_cb(void *user, int32_t id, const char *text, size_t len, float logprob, const float *logits)
{
    (void)id, (void)logprob, (void)logits;
    gen_buf *g = user;
    size_t k = len < sizeof g->s - 1 - g->n ? len : sizeof g->s - 1 - g->n;
    memcpy(g->s + g->n, text, k);
    g->n += k;
    g->s[g->n] = 0;
    return 0;
}

/* The greedy continuation of text (a prompt, or a rendered chat) under h. */
static int greedy(lq_model *m, const lq_resid_hook *h, const char *text, gen_buf *out, lq_err *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = encode(m, text, 1, &ids, &n, err);
    lq_session *s = NULL;
    if (!rc)
        rc = lq_session_create(m, (int)n + EV_GEN_TOKENS + 1, &s, err);
    out->n = 0;
    out->s[0] = 0;
    if (!rc) {
        lq_generate_params gp;
        lq_generate_defaults(&gp);
        gp.max_tokens = EV_GEN_TOKENS;
        gp.sampling.temperature = 0;
        gp.hook = h;
        lq_generate_result res;
        rc = lq_generate(s, ids, n, &gp, gen_cb, out, &res, err);
    }
    lq_session_free(s);
    free(ids);
    return rc;
}

static int32_t argmax(const float *l, int V)
{
    int32_t b = 0;
    for (int j = 1; j < V; j++)
        if (l[j] > l[b])
            b = j;
    return b;
}

/* "The capital of X is" -> the text as a chat answer would hold it: leading spaces dropped */
static const char *trim(const char *s)
{
    while (*s == ' ')
        s++;
    return s;
}

static json_t *arr(json_t *c, const char *k) { return json_object_get(c, k); }

/* 1 when text names one of the edited entities as a word (a neighbourhood prompt about an
 * entity that another edit of the batch changed is no neighbour of this one). */
static int names_edited(const char *text, const ev_case *edited, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t el = strlen(edited[i].entity);
        for (const char *p = strstr(text, edited[i].entity); p; p = strstr(p + 1, edited[i].entity)) {
            int before = p == text || p[-1] == ' ', after = p[el] == 0 || p[el] == ' ' || p[el] == '.' || p[el] == '?';
            if (before && after)
                return 1;
        }
    }
    return 0;
}

/* Scores of one case under h (the edits) against base (no edits: NULL hook); edited [n_edited]:
 * the cases whose edits h applies (their entities' prompts are no neighbours). */
static int score_case(lq_model *m, const ev_case *c, const lq_resid_hook *h, const ev_case *edited, size_t n_edited,
                      json_t *row, double *tot, lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    int V = mi->n_vocab, rc = LQ_OK;
    float *l0 = malloc((size_t)V * sizeof *l0), *l1 = malloc((size_t)V * sizeof *l1);
    char *tsp = malloc(strlen(c->target) + 2), *osp = NULL;
    if (!l0 || !l1 || !tsp) {
        free(l0), free(l1), free(tsp);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    sprintf(tsp, " %s", c->target);
    double lt, lo;
    /* the old answer: the case's, else the model's own first prediction */
    if (c->old) {
        osp = malloc(strlen(c->old) + 2);
        if (osp)
            sprintf(osp, " %s", c->old);
    } else if (!(rc = seq_logprob(m, NULL, c->canonical, NULL, &lo, l0, err))) {
        int32_t a = argmax(l0, V);
        char *t = NULL;
        size_t tl = 0;
        if (!(rc = lq_tokenizer_decode(lq_model_tokenizer(m), &a, 1, 0, &t, &tl, err)))
            osp = t;
    }
    if (!rc && !osp)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    /* efficacy and paraphrases */
    double eff = 0, para = 0, chat = 0, gen = 0, neigh = 0, unrel = 0, neigh0 = 0, ndl = 0;
    int np = 0, nch = 0, nn = 0;
    if (!rc && !(rc = seq_logprob(m, h, c->canonical, tsp, &lt, NULL, err)) &&
        !(rc = seq_logprob(m, h, c->canonical, osp, &lo, NULL, err)))
        eff = lt > lo;
    json_t *ps = arr(c->j, "paraphrases"), *v, *missed = json_array();
    size_t i;
    json_array_foreach(ps, i, v) {
        if (rc || !json_is_string(v))
            continue;
        if (!(rc = seq_logprob(m, h, json_string_value(v), tsp, &lt, NULL, err)) &&
            !(rc = seq_logprob(m, h, json_string_value(v), osp, &lo, NULL, err))) {
            para += lt > lo, np++;
            if (!(lt > lo)) /* which phrasings an edit does not reach (--json) */
                json_array_append(missed, v);
        }
    }
    json_object_set_new(row, "paraphrases_missed", missed);
    /* chat: the model's template around each question */
    json_t *cs = arr(c->j, "chat");
    json_array_foreach(cs, i, v) {
        if (rc || !json_is_string(v))
            continue;
        lq_chat_msg msg = {"user", json_string_value(v)};
        char *text = NULL;
        gen_buf g;
        lq_chat_format *f = NULL; /* the file's own template, as the chat routes render it */
        if (!(rc = lq_chat_format_open(m, NULL, &f, err)) &&
            !(rc = lq_chat_format_render(f, &msg, 1, 1, NULL, &text, err)) && !(rc = greedy(m, h, text, &g, err)))
            chat += strstr(g.s, c->target) != NULL, nch++;
        lq_chat_format_free(f);
        free(text);
    }
    /* generation: the canonical prompt continues with the whole target */
    gen_buf g;
    if (!rc && !(rc = greedy(m, h, c->canonical, &g, err))) {
        gen = !strncmp(trim(g.s), c->target, strlen(c->target));
        json_object_set_new(row, "generated", json_string(g.s));
    }
    /* neighbourhood: other entities' answers stay first and above the target */
    json_t *ns = arr(c->j, "neighbourhood");
    json_array_foreach(ns, i, v) {
        const char *pr = json_string_value(json_object_get(v, "prompt"));
        const char *an = json_string_value(json_object_get(v, "answer"));
        if (rc || !pr || !an || names_edited(pr, edited, n_edited))
            continue;
        char *asp = malloc(strlen(an) + 2);
        if (!asp) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        sprintf(asp, " %s", an);
        double la = 0, lx = 0, la0 = 0, lx0 = 0, tmp;
        if (!(rc = seq_logprob(m, h, pr, asp, &la, NULL, err)) && !(rc = seq_logprob(m, h, pr, tsp, &lx, NULL, err)) &&
            !(rc = seq_logprob(m, NULL, pr, asp, &la0, NULL, err)) &&
            !(rc = seq_logprob(m, NULL, pr, tsp, &lx0, NULL, err)) &&
            !(rc = seq_logprob(m, NULL, pr, NULL, &tmp, l0, err)) && !(rc = seq_logprob(m, h, pr, NULL, &tmp, l1, err))) {
            neigh += la > lx && argmax(l0, V) == argmax(l1, V), nn++;
            neigh0 += la0 > lx0; /* the same score of the model without the edit */
            for (int j = 0; j < V; j++) {
                double d = fabs((double)l1[j] - l0[j]);
                if (!(d <= ndl))
                    ndl = isnan(d) ? INFINITY : d;
            }
        }
        free(asp);
    }
    /* unrelated prompts: every logit as before */
    json_t *us = arr(c->j, "unrelated");
    json_array_foreach(us, i, v) {
        double tmp;
        if (rc || !json_is_string(v))
            continue;
        if (!(rc = seq_logprob(m, NULL, json_string_value(v), NULL, &tmp, l0, err)) &&
            !(rc = seq_logprob(m, h, json_string_value(v), NULL, &tmp, l1, err)))
            for (int j = 0; j < V; j++) {
                double d = fabs((double)l1[j] - l0[j]);
                if (!(d <= unrel)) /* NaN counts as the largest difference */
                    unrel = isnan(d) ? INFINITY : d;
            }
    }
    if (!rc) {
        double f[5] = {eff, np ? para / np : 1, nch ? chat / nch : 1, gen, nn ? neigh / nn : 1};
        const char *k[5] = {"efficacy", "paraphrase", "chat", "generation", "neighbourhood"};
        for (int q = 0; q < 5; q++) {
            json_object_set_new(row, k[q], json_real(f[q]));
            tot[q] += f[q];
        }
        json_object_set_new(row, "unrelated_max_dlogit", json_real(isinf(unrel) ? 1e30 : unrel));
        json_object_set_new(row, "neighbourhood_unedited", json_real(nn ? neigh0 / nn : 1));
        json_object_set_new(row, "neighbourhood_max_dlogit", json_real(isinf(ndl) ? 1e30 : ndl));
        if (unrel > tot[5])
            tot[5] = unrel;
        tot[6] += nn ? neigh0 / nn : 1;
        tot[8] += nn;
        if (ndl > tot[7])
            tot[7] = ndl;
    }
    free(l0), free(l1), free(tsp), free(osp);
    return rc;
}

static int parse_suite(const char *text, size_t len, ev_case **out, size_t *n, lq_err *err)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0, line = 0;
    for (size_t at = 0; at < len;) {
        const char *e = memchr(text + at, '\n', len - at);
        size_t l = e ? (size_t)(e - (text + at)) : len - at;
        line++;
        size_t k = 0;
        while (k < l && (text[at + k] == ' ' || text[at + k] == '\t' || text[at + k] == '\r'))
            k++;
        if (k < l) {
            json_error_t je;
            json_t *j = json_loadb(text + at, l, 0, &je);
            json_t *ed = j ? json_object_get(j, "edit") : NULL;
            ev_case c = {j, NULL, NULL, NULL, NULL, NULL, -1, -1};
            if (ed) {
                c.entity = json_string_value(json_object_get(ed, "entity"));
                c.relation = json_string_value(json_object_get(ed, "relation"));
                c.target = json_string_value(json_object_get(ed, "target"));
                const char *md = json_string_value(json_object_get(ed, "mode"));
                c.mode = !md ? -1 : !strcmp(md, "knn") ? LQ_INSERT_KNN : !strcmp(md, "compose") ? LQ_INSERT_COMPOSE
                                                       : !strcmp(md, "subject") ? LQ_INSERT_SUBJECT : -2;
                json_t *ly = json_object_get(ed, "layer");
                c.layer = json_is_integer(ly) ? (int)json_integer_value(ly) : -1;
            }
            c.canonical = json_string_value(json_object_get(j, "canonical"));
            c.old = json_string_value(json_object_get(j, "old"));
            if (!j || !c.entity || !c.relation || !c.target || !c.canonical || c.mode == -2) {
                int rc = lq_err_set(err, LQ_EFORMAT,
                                    "suite line %zu: %s", line,
                                    !j ? je.text
                                       : "needs {\"edit\": {\"entity\", \"relation\", \"target\", \"mode\"?: knn|compose|"
                                         "subject}, \"canonical\": prompt, ...}");
                json_decref(j);
                return rc;
            }
            if (*n == EV_MAX_CASES) {
                json_decref(j);
                return lq_err_set(err, LQ_ERANGE, "suite: more than %d cases", EV_MAX_CASES);
            }
            if (*n == cap) {
                cap = cap ? cap * 2 : 64;
                ev_case *nc = realloc(*out, cap * sizeof *nc);
                if (!nc) {
                    json_decref(j);
                    return lq_err_set(err, LQ_ENOMEM, "out of memory");
                }
                *out = nc;
            }
            (*out)[(*n)++] = c;
        }
        at += l + 1;
    }
    return *n ? LQ_OK : lq_err_set(err, LQ_EINVAL, "suite: no cases");
}

static int insert_case(lq_overlay *o, lq_model *m, const ev_case *c, int mode, lq_insert_result *r, lq_err *err)
{
    lq_insert_params p;
    lq_insert_params_init(&p);
    p.entity = c->entity;
    p.relation = c->relation;
    p.target = c->target;
    p.layer = c->layer;
    p.mode = mode >= 0 ? mode : c->mode >= 0 ? c->mode : LQ_INSERT_SUBJECT;
    return lq_overlay_insert(o, m, &p, r, err);
}

static int hook_of(lq_overlay *o, lq_resid_hook **h, lq_err *err)
{
    lq_edit_set *s = lq_overlay_edit_set(o, err);
    if (!s)
        return err && err->code ? err->code : LQ_ENOMEM;
    int rc = lq_edit_set_hook(s, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_FORCE, h, err);
    lq_edit_set_unref(s);
    return rc;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int lq_edit_eval(const lq_vindex *v, lq_model *m, const char *suite, size_t len, const lq_edit_eval_opts *o,
                 char **json_out, lq_err *err)
{
    *json_out = NULL;
    lq_edit_eval_opts dflt;
    if (!o) {
        lq_edit_eval_opts_init(&dflt);
        o = &dflt;
    }
    if (!v || !m || !suite)
        return lq_err_set(err, LQ_EINVAL, "eval-edits: a vindex with its model and a suite are required");
    ev_case *cs = NULL;
    size_t n = 0;
    int rc = parse_suite(suite, len, &cs, &n, err);
    size_t n_all = n;
    if (!rc && o->max_cases > 0 && (size_t)o->max_cases < n)
        n = (size_t)o->max_cases;
    if (!rc && o->together > 0 && (size_t)o->together < n)
        n = (size_t)o->together; /* the cases scored are the edits applied */
    json_t *rows = json_array();
    double tot[9] = {0}, *ms = calloc(n ? n : 1, sizeof *ms);
    size_t scored = 0, refused = 0, n_ms = 0, forced = 0;
    lq_overlay *shared = NULL;
    lq_resid_hook *sh = NULL;
    if (!rc && !ms)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    /* together: the first N edits in one overlay */
    size_t together = o->together > 0 ? ((size_t)o->together < n ? (size_t)o->together : n) : 0;
    char **why = calloc(n ? n : 1, sizeof *why);
    if (!rc && together)
        rc = lq_overlay_create(v, NULL, &shared, err);
    for (size_t i = 0; !rc && i < together; i++) {
        lq_insert_result r;
        lq_err e = {0};
        double t0 = lq_now_ms();
        if (insert_case(shared, m, &cs[i], o->mode, &r, &e)) {
            refused++;
            why[i] = strdup(e.msg);
        } else {
            ms[n_ms++] = lq_now_ms() - t0;
            forced += r.n_forced > 0;
        }
    }
    if (!rc && together)
        rc = hook_of(shared, &sh, err);
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *row = json_pack("{s:s,s:s,s:s}", "entity", cs[i].entity, "relation", cs[i].relation, "target",
                                cs[i].target);
        lq_overlay *ov = NULL;
        lq_resid_hook *h = sh;
        lq_err e = {0};
        if (!together) {
            lq_insert_result r;
            double t0 = lq_now_ms();
            if ((rc = lq_overlay_create(v, NULL, &ov, err)))
                break;
            if (insert_case(ov, m, &cs[i], o->mode, &r, &e)) {
                refused++;
                why[i] = strdup(e.msg);
            } else {
                ms[n_ms++] = lq_now_ms() - t0;
                forced += r.n_forced > 0;
                json_object_set_new(row, "target_probability", json_real(r.target_prob));
                if ((rc = hook_of(ov, &h, err))) {
                    lq_overlay_free(ov);
                    break;
                }
            }
        }
        int applied = !why[i] && (together ? i < together : 1);
        json_object_set_new(row, "applied", json_boolean(applied));
        if (why[i])
            json_object_set_new(row, "error", json_string(why[i]));
        if (applied || together) {
            rc = score_case(m, &cs[i], h ? h : NULL, together ? cs : &cs[i], together ? together : 1, row, tot, err);
            scored++;
        } else {
            /* a refused edit scores as not read back (its neighbours and unrelated prompts
             * are untouched: nothing was applied) */
            const char *k[5] = {"efficacy", "paraphrase", "chat", "generation", "neighbourhood"};
            for (int q = 0; q < 5; q++)
                json_object_set_new(row, k[q], json_real(q == 4));
            json_object_set_new(row, "unrelated_max_dlogit", json_real(0));
            tot[4] += 1;
            tot[6] += 1;
            scored++;
        }
        if (!together) {
            lq_edit_hook_free(h);
            lq_overlay_free(ov);
        }
        json_array_append_new(rows, row);
    }
    /* fluency: the held-out text with the edits over without (together: all of them; one at a
     * time: the first applied edit's) */
    double ratio = NAN;
    if (!rc && o->fluency_text && o->fluency_len) {
        lq_overlay *fo = shared;
        lq_resid_hook *fh = sh;
        for (size_t i = 0; !rc && !fo && i < n; i++) {
            lq_insert_result r;
            if ((rc = lq_overlay_create(v, NULL, &fo, err)))
                break;
            if (insert_case(fo, m, &cs[i], o->mode, &r, NULL) || (rc = hook_of(fo, &fh, err))) {
                lq_overlay_free(fo);
                fo = NULL;
            }
        }
        lq_perplexity_result a, b;
        if (!rc && fo && !(rc = lq_perplexity(m, o->fluency_text, o->fluency_len, o->fluency_ctx, &a, err)) &&
            !(rc = lq_perplexity_hook(m, o->fluency_text, o->fluency_len, o->fluency_ctx, fh, &b, err)))
            ratio = b.perplexity / a.perplexity;
        if (fo != shared) {
            lq_edit_hook_free(fh);
            lq_overlay_free(fo);
        }
    }
    if (!rc) {
        qsort(ms, n_ms, sizeof *ms, cmp_dbl);
        double d = scored ? (double)scored : 1;
        json_t *t = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:b,s:i,s:i,s:i}", "efficacy", tot[0] / d, "paraphrase",
                              tot[1] / d, "chat", tot[2] / d, "generation", tot[3] / d, "neighbourhood", tot[4] / d,
                              "unrelated_max_dlogit", isinf(tot[5]) ? 1e30 : tot[5], "unrelated_bit_identical",
                              tot[5] == 0, "cases", (int)scored, "refused", (int)refused, "logit_written",
                              (int)forced);
        json_object_set_new(t, "fluency_ratio", isnan(ratio) ? json_null() : json_real(ratio));
        json_object_set_new(t, "neighbourhood_unedited", json_real(tot[6] / d));
        /* prompts scored (a batch that edits every entity the model knows leaves none) */
        json_object_set_new(t, "neighbourhood_prompts", json_integer((json_int_t)tot[8]));
        json_object_set_new(t, "neighbourhood_max_dlogit", json_real(isinf(tot[7]) ? 1e30 : tot[7]));
        json_object_set_new(t, "insert_ms_median", n_ms ? json_real(ms[n_ms / 2]) : json_null());
        json_t *doc = json_pack("{s:s,s:i,s:o,s:o}", "mode",
                                o->mode == LQ_INSERT_KNN       ? "knn"
                                : o->mode == LQ_INSERT_COMPOSE ? "compose"
                                : o->mode == LQ_INSERT_SUBJECT ? "subject"
                                                               : "per case",
                                "together", (int)together, "totals", t, "cases", rows);
        rows = NULL;
        *json_out = json_dumps(doc, JSON_COMPACT);
        json_decref(doc);
        if (!*json_out)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    json_decref(rows);
    lq_edit_hook_free(sh);
    lq_overlay_free(shared);
    for (size_t i = 0; why && i < n; i++)
        free(why[i]);
    for (size_t i = 0; cs && i < n_all; i++)
        json_decref(cs[i].j);
    free(why), free(cs), free(ms);
    return rc;
}
