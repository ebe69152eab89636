/* Next-token inference as LARQL's POST /v1/infer answers it (BitNet branch), and the KNN
 * store whose entries override it (INSERT ... MODE KNN). One function serves every front
 * end (larql infer, POST /v1/infer, the WebSocket's infer), so their bodies agree.
 *
 * walk:    the full forward pass with the last position's residual captured after every
 *          layer (lq_session_eval_capture), then the KNN override: layers in ascending
 *          order, the store's best entry by cosine at that layer; the first cosine > 0.75
 *          wins and its token goes first with probability 1.0, followed by the model's
 *          top-(k-1). Empty store: no override, the same predictions as dense.
 * dense:   the forward pass alone; the body says "mode":"bitnet" for a BitNet model (LARQL's
 *          predict_bitnet), "dense" otherwise.
 * compare: both, timed separately.
 * A dense-only vindex (index.json layers empty) — and a plain GGUF, which has no gate index
 * either — turns walk into dense and compare into dense only, as LARQL's handler does.
 * Probabilities: softmax over the whole vocabulary in double, top k by probability, token =
 * the token's decoded text (" Paris"; invalid UTF-8 of a lone byte token as U+FFFD),
 * rounded to 4 decimals; times to 0.1 ms. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/clock.h"
#include "core/softmax.h"
#include "core/utf8.h"
#include "larql/model.h"
#include "vindex/vindex_internal.h"
#include "core/round.h"
#include "core/str.h"

/* ---- forward ---- */

/* logits [V] after the last of ids; resid: NULL or [n_layer, D] the last position's residual
 * after each layer. sess: the caller's session (reset first) or NULL for one of n positions.
 * hook: the forward-pass edits of this pass, or NULL. */
static int forward(lq_model *m, lq_session *sess, const lq_resid_hook *hook, const int32_t *ids,
                   size_t n, float *logits, float *resid, lq_err *err)
{
    lq_session *s = sess;
    int rc = LQ_OK;
    if (s)
        lq_session_reset(s);
    else if ((rc = lq_session_create(m, (int)n, &s, err)))
        return rc;
    const lq_resid_hook *prev = lq_session_hook(s);
    lq_session_set_hook(s, hook);
    rc = resid ? lq_session_eval_capture(s, ids, n, logits, resid, err)
               : lq_session_eval(s, ids, n, logits, NULL, err);
    lq_session_set_hook(s, prev);
    if (sess)
        lq_session_reset(s);
    else
        lq_session_free(s);
    return rc;
}

/* The walk-mode hook of a request: composed features act, KNN matches are recorded. Its
 * edits: the given set, else one of the KNN store (the given one, else the model's). */
static int walk_hook(lq_model *m, lq_edit_set *edits, const lq_knn_store *knn, lq_resid_hook **h,
                     lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    lq_edit_set *s = edits ? lq_edit_set_ref(edits)
                           : lq_edit_set_from_knn(knn ? knn : lq_knn_store_of_model(m),
                                                  mi->n_layer, mi->n_embd, err);
    if (!s)
        return LQ_ENOMEM;
    int rc = lq_edit_set_hook(s, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_MATCH, h, err);
    lq_edit_set_unref(s);
    return rc;
}

static void free_preds(lq_prediction *p, size_t n)
{
    for (size_t i = 0; p && i < n; i++)
        free(p[i].token);
    free(p);
}

/* The text a prediction shows: the token decoded alone, valid UTF-8. */
static char *token_text(const lq_tokenizer *tok, int32_t id)
{
    char *raw = NULL;
    size_t len = 0;
    if (lq_tokenizer_decode(tok, &id, 1, 0, &raw, &len, NULL))
        return strdup("");
    char *t = lq_utf8_lossy(raw, len, NULL);
    free(raw);
    return t;
}

/* top-k by probability (softmax in double over all of V) */
static int predictions(const lq_model *m, const float *lg, int k, lq_prediction **out, size_t *n_out,
                       lq_err *err)
{
    int V = lq_model_get_info(m)->n_vocab;
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    *out = NULL;
    *n_out = 0;
    if (k > V)
        k = V;
    if (k <= 0)
        return LQ_OK;
    double mx;
    double sum = lq_softmax_denominator(lg, (size_t)V, &mx);
    int *best = malloc((size_t)k * sizeof *best);
    lq_prediction *p = calloc((size_t)k, sizeof *p);
    if (!best || !p) {
        free(best);
        free(p);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    int nb = 0;
    for (int i = 0; i < V; i++) { /* insertion into the k best; ties: lower id first */
        if (nb == k && !(lg[i] > lg[best[k - 1]]))
            continue;
        int j = nb < k ? nb++ : k - 1;
        while (j > 0 && lg[i] > lg[best[j - 1]]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = i;
    }
    for (int r = 0; r < nb; r++) {
        if (!(p[r].token = token_text(tok, best[r]))) {
            free(best);
            free_preds(p, (size_t)r);
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        }
        p[r].id = best[r];
        p[r].probability = exp((double)lg[best[r]] - mx) / sum;
    }
    free(best);
    *out = p;
    *n_out = (size_t)nb;
    return LQ_OK;
}

/* Encodes a prompt as /v1/infer does (special tokens parsed, BOS as the tokenizer says) and
 * checks it against the vocabulary and a context of n_ctx positions. */
int lq_vx_encode_prompt(const lq_model *m, const char *prompt, int n_ctx, int32_t **ids, size_t *n,
                        lq_err *err)
{
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    const lq_model_info *mi = lq_model_get_info(m);
    *ids = NULL;
    *n = 0;
    if (!prompt || !*prompt)
        return lq_err_set(err, LQ_EINVAL, "empty prompt");
    if (!tok)
        return lq_err_set(err, LQ_EUNSUPPORTED, "the model has no tokenizer");
    unsigned fl = LQ_TOK_PARSE_SPECIAL | (lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0);
    int rc = lq_tokenizer_encode(tok, prompt, strlen(prompt), fl, ids, n, err);
    if (rc)
        return rc;
    if (*n == 0)
        rc = lq_err_set(err, LQ_EINVAL, "empty prompt");
    for (size_t i = 0; !rc && i < *n; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= mi->n_vocab)
            rc = lq_err_set(err, LQ_ERANGE, "prompt token %d outside the model's vocabulary (%d)",
                            (int)(*ids)[i], mi->n_vocab);
    if (!rc && *n > (size_t)n_ctx)
        rc = lq_err_set(err, LQ_ECONTEXT, "prompt of %zu tokens exceeds the context length %d", *n,
                        n_ctx);
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

/* The KNN store a request routes over: its own, else the model's. */
static const lq_knn_store *knn_of(const lq_model *m, const lq_infer_params *p)
{
    return p->knn ? p->knn : lq_knn_store_of_model(m);
}

/* the prompt names the entity: a case-insensitive substring (an empty entity names nothing) */

/* LARQL's verified / two-tier KNN router (infer_patched.rs verified_route, fallback_route)
 * over the residuals after every layer: 1 and *mt when it fires. */
static int route_match(const lq_infer_params *p, const lq_knn_store *ks, const float *resid, int L, int D,
                       lq_edit_match *mt)
{
    const float thr = 0.75f;
    size_t ne = ks ? lq_knn_store_count(ks) : 0;
    int k = p->route_topk > 0 ? p->route_topk : 5;
    if (!ne)
        return 0;
    float *cos = malloc(ne * sizeof *cos);
    size_t *ord = malloc(ne * sizeof *ord);
    int fired = 0;
    for (int pass = 0; pass < (p->route == LQ_ROUTE_FALLBACK ? 2 : 1) && !fired && cos && ord; pass++) {
        for (int l = L - 1; l >= 0 && !fired; l--) { /* resolved layer first: highest */
            const float *x = resid + (size_t)l * D;
            double xx = 0;
            for (int d = 0; d < D; d++)
                xx += (double)x[d] * x[d];
            size_t m = 0;
            lq_knn_entry e;
            for (size_t i = 0; i < ne; i++) {
                if (!lq_knn_store_get(ks, i, &e) || e.layer != l)
                    continue;
                double dot = 0;
                for (int d = 0; d < D; d++)
                    dot += (double)x[d] * e.key[d];
                cos[m] = xx > 0 ? (float)(dot / sqrt(xx)) : 0.0f;
                ord[m++] = i;
            }
            for (size_t a = 0; a < m; a++) /* by cosine, descending (few entries per layer) */
                for (size_t b = a + 1; b < m; b++)
                    if (cos[b] > cos[a]) {
                        float tc = cos[a];
                        size_t to = ord[a];
                        cos[a] = cos[b], ord[a] = ord[b];
                        cos[b] = tc, ord[b] = to;
                    }
            for (size_t a = 0; a < m && (int)a < (pass ? 1 : k) && cos[a] > thr; a++) {
                lq_knn_store_get(ks, ord[a], &e);
                if (pass == 0 && !(e.entity && *e.entity && lq_icontains(p->prompt, e.entity)))
                    continue; /* verify: the prompt must name the entity */
                mt->layer = l;
                mt->cosine = cos[a];
                mt->target_id = e.target_id;
                mt->target = e.target_token ? e.target_token : "";
                mt->entity = e.entity;
                mt->relation = e.relation;
                fired = 1;
                break;
            }
            if (pass == 1 && m) /* the fallback looks at the highest stored layer only */
                break;
        }
    }
    free(cos);
    free(ord);
    return fired;
}

/* Puts the override's token first with probability 1.0, followed by the model's top-(top-1). */
static int apply_override(lq_infer_result *r, const lq_edit_match *mt, int top, lq_err *err)
{
    r->knn_fired = 1;
    r->knn_layer = mt->layer;
    r->knn_cosine = mt->cosine;
    if (!(r->knn_token = strdup(mt->target)))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (r->n_walk) {
        if (!(r->model_top1.token = strdup(r->walk[0].token)))
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        r->model_top1.id = r->walk[0].id;
        r->model_top1.probability = r->walk[0].probability;
    }
    size_t keep = r->n_walk && top > 0 ? (size_t)top - 1 : 0;
    if (keep > r->n_walk)
        keep = r->n_walk;
    lq_prediction *np = calloc(keep + 1, sizeof *np);
    if (!np || !(np[0].token = strdup(r->knn_token))) {
        free(np);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    np[0].id = -1;
    np[0].probability = 1.0;
    for (size_t i = 0; i < keep; i++)
        np[i + 1] = r->walk[i], r->walk[i].token = NULL;
    free_preds(r->walk, r->n_walk);
    r->walk = np;
    r->n_walk = keep + 1;
    return LQ_OK;
}

void lq_infer_params_init(lq_infer_params *p)
{
    memset(p, 0, sizeof *p);
    p->top = 5;
    p->mode = "walk";
}

void lq_infer_result_free(lq_infer_result *r)
{
    if (!r)
        return;
    free_preds(r->walk, r->n_walk);
    free_preds(r->dense, r->n_dense);
    free(r->knn_token);
    free(r->model_top1.token);
    memset(r, 0, sizeof *r);
}

int lq_infer(lq_model *m, const lq_infer_params *p, lq_infer_result *r, lq_err *err)
{
    memset(r, 0, sizeof *r);
    double t0 = lq_now_ms();
    if (!m || !p)
        return lq_err_set(err, LQ_EINVAL, "infer: model and parameters are required");
    if (!p->prompt || !*p->prompt)
        return lq_err_set(err, LQ_EINVAL, "empty prompt");
    if (p->top < 0)
        return lq_err_set(err, LQ_EINVAL, "top %d must be >= 0", p->top);
    const lq_model_info *mi = lq_model_get_info(m);
    const char *mode = p->mode ? p->mode : "walk";
    int walk = !strcmp(mode, "walk"), dense = !strcmp(mode, "dense"), cmp = !strcmp(mode, "compare");
    const lq_vindex *v = lq_vindex_of_model(m);
    /* no gate index (dense-only vindex or a GGUF): walk/compare become dense, unless the
     * caller brings edits (a compiled GGUF's carried ones: lq_carried_edits) */
    r->dense_only = v ? v->info.dense_only : !p->edits;
    if (r->dense_only && (walk || cmp)) {
        walk = cmp = 0;
        dense = 1;
        r->coerced = 1;
    }
    r->compare = cmp;
    r->bitnet = mi->arch != LQ_ARCH_LLAMA;
    if (!walk && !dense && !cmp) { /* LARQL: 200 with only prompt and latency */
        r->latency_ms = lq_now_ms() - t0;
        return LQ_OK;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int n_ctx = p->session ? lq_session_n_ctx(p->session) : mi->n_ctx_train;
    int rc = lq_vx_encode_prompt(m, p->prompt, n_ctx, &ids, &n, err);
    if (rc)
        return rc;
    size_t V = (size_t)mi->n_vocab, D = (size_t)mi->n_embd;
    lq_resid_hook *hook = NULL;
    float *lg = malloc(V * sizeof *lg);
    float *resid = walk || cmp ? malloc((size_t)mi->n_layer * D * sizeof *resid) : NULL;
    if (!lg || ((walk || cmp) && !resid)) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    if (walk || cmp) {
        double t1 = lq_now_ms();
        lq_edit_match mt;
        if ((rc = walk_hook(m, p->edits, p->knn, &hook, err)) ||
            (rc = forward(m, p->session, hook, ids, n, lg, resid, err)) ||
            (rc = predictions(m, lg, p->top, &r->walk, &r->n_walk, err)))
            goto out;
        r->has_walk = 1;
        int fired = p->route ? route_match(p, knn_of(m, p), resid, mi->n_layer, (int)D, &mt)
                             : lq_edit_hook_match(hook, (int)n - 1, &mt);
        if (fired && (rc = apply_override(r, &mt, p->top, err)))
            goto out;
        r->walk_ms = lq_now_ms() - t1;
    }
    if (dense || cmp) {
        double t1 = lq_now_ms();
        if ((rc = forward(m, p->session, NULL, ids, n, lg, NULL, err)) ||
            (rc = predictions(m, lg, p->top, &r->dense, &r->n_dense, err)))
            goto out;
        r->has_dense = 1;
        r->dense_ms = lq_now_ms() - t1;
    }
    r->latency_ms = lq_now_ms() - t0;
out:
    lq_edit_hook_free(hook);
    free(ids);
    free(lg);
    free(resid);
    if (rc)
        lq_infer_result_free(r);
    return rc;
}

int lq_infer_residuals(lq_model *m, const char *prompt, float *resid, lq_err *err)
{
    if (!m || !resid)
        return lq_err_set(err, LQ_EINVAL, "infer residuals: model and buffer are required");
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = lq_vx_encode_prompt(m, prompt, mi->n_ctx_train, &ids, &n, err);
    if (rc)
        return rc;
    float *lg = malloc((size_t)mi->n_vocab * sizeof *lg);
    rc = lg ? forward(m, NULL, NULL, ids, n, lg, resid, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
    free(lg);
    free(ids);
    return rc;
}

/* ---- JSON ---- */


static void put_preds(lq_sb *b, const lq_prediction *p, size_t n)
{
    lq_sb_puts(b, "[");
    for (size_t i = 0; i < n; i++) {
        lq_sb_puts(b, i ? ",{\"token\":" : "{\"token\":");
        lq_sb_json_str(b, p[i].token, strlen(p[i].token));
        lq_sb_puts(b, ",\"probability\":");
        lq_sb_f64(b, lq_round_dp(p[i].probability, 4));
        lq_sb_puts(b, "}");
    }
    lq_sb_puts(b, "]");
}

static void put_override(lq_sb *b, const lq_infer_result *r)
{
    lq_sb_puts(b, ",\"knn_override\":{\"token\":");
    lq_sb_json_str(b, r->knn_token, strlen(r->knn_token));
    lq_sb_puts(b, ",\"cosine\":");
    lq_sb_f32(b, r->knn_cosine);
    lq_sb_printf(b, ",\"layer\":%d,\"source\":\"knn_override\",\"stage\":\"post_logits\","
                    "\"materialized\":false", r->knn_layer);
    if (r->model_top1.token) {
        lq_sb_puts(b, ",\"model_top1\":{\"token\":");
        lq_sb_json_str(b, r->model_top1.token, strlen(r->model_top1.token));
        lq_sb_puts(b, ",\"probability\":");
        lq_sb_f64(b, lq_round_dp(r->model_top1.probability, 4));
        lq_sb_puts(b, "}");
    }
    lq_sb_puts(b, "}");
}

int lq_infer_json(lq_model *m, const lq_infer_params *p, char **json_out, lq_err *err)
{
    *json_out = NULL;
    lq_infer_result r;
    int rc = lq_infer(m, p, &r, err);
    if (rc)
        return rc;
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"prompt\":");
    lq_sb_json_str(&b, p->prompt, strlen(p->prompt));
    if (r.compare) {
        lq_sb_puts(&b, ",\"walk\":");
        put_preds(&b, r.walk, r.n_walk);
        lq_sb_puts(&b, ",\"walk_ms\":");
        lq_sb_f64(&b, lq_round_dp(r.walk_ms, 1));
        lq_sb_puts(&b, ",\"dense\":");
        put_preds(&b, r.dense, r.n_dense);
        lq_sb_puts(&b, ",\"dense_ms\":");
        lq_sb_f64(&b, lq_round_dp(r.dense_ms, 1));
        if (r.knn_fired)
            put_override(&b, &r);
    } else if (r.coerced && p->mode && !strcmp(p->mode, "compare")) {
        /* dense-only compare: only the dense half */
        lq_sb_puts(&b, ",\"dense\":");
        put_preds(&b, r.dense, r.n_dense);
        lq_sb_puts(&b, ",\"dense_ms\":");
        lq_sb_f64(&b, lq_round_dp(r.dense_ms, 1));
    } else if (r.has_walk) {
        lq_sb_puts(&b, ",\"predictions\":");
        put_preds(&b, r.walk, r.n_walk);
        lq_sb_puts(&b, ",\"mode\":\"walk\"");
        if (r.knn_fired)
            put_override(&b, &r);
    } else if (r.has_dense) {
        lq_sb_puts(&b, ",\"predictions\":");
        put_preds(&b, r.dense, r.n_dense);
        lq_sb_puts(&b, r.bitnet ? ",\"mode\":\"bitnet\"" : ",\"mode\":\"dense\"");
    }
    lq_sb_puts(&b, ",\"latency_ms\":");
    lq_sb_f64(&b, lq_round_dp(r.latency_ms, 1));
    lq_sb_puts(&b, "}");
    lq_infer_result_free(&r);
    return lq_sb_finish(&b, json_out, err);
}

/* ---- EXPLAIN INFER (LARQL's POST /v1/explain-infer) ---- */

void lq_explain_params_init(lq_explain_params *p)
{
    memset(p, 0, sizeof *p);
    p->top = 5;
    p->per_layer = 3;
    p->band = "all";
}

/* A feature of the trace: its metadata as the view shows it. */
static void put_trace_feature(lq_sb *b, const lq_vindex *v, const lq_vindex_hit *h, int first)
{
    lq_feature_meta fm;
    int has = lq_vindex_feature_meta(v, h->layer, h->feature, &fm);
    lq_sb_printf(b, "%s{\"feature\":%d,\"gate_score\":", first ? "" : ",", h->feature);
    lq_sb_f64(b, lq_round_dp(h->score, 1));
    lq_sb_puts(b, ",\"top_token\":");
    const char *t = has ? lq_vx_meta_text(v, &fm) : "";
    lq_sb_json_str(b, t, strlen(t));
    lq_sb_puts(b, ",\"top_tokens\":[");
    for (int k = 0, n = 0; has && k < fm.n_top && n < 3; k++) {
        const char *x = lq_vindex_token_text(v, fm.top_ids[k]);
        if (!lq_vx_is_readable(x))
            continue;
        lq_sb_puts(b, n++ ? "," : "");
        lq_sb_json_str(b, x, strlen(x));
    }
    lq_sb_puts(b, "],\"relation\":");
    const char *rel = lq_vindex_probe_label(v, h->layer, h->feature);
    if (rel)
        lq_sb_json_str(b, rel, strlen(rel));
    else
        lq_sb_puts(b, "null");
    lq_sb_puts(b, "}");
}

int lq_explain_infer_json(lq_model *m, const lq_explain_params *p, char **json_out, lq_err *err)
{
    *json_out = NULL;
    double t0 = lq_now_ms();
    if (!m || !p)
        return lq_err_set(err, LQ_EINVAL, "explain: model and parameters are required");
    if (p->top < 0 || p->per_layer < 0 || p->per_layer > LQ_VINDEX_MAX_TOPK)
        return lq_err_set(err, LQ_EINVAL, "explain: top %d and per_layer %d must be in 0..%d", p->top,
                          p->per_layer, LQ_VINDEX_MAX_TOPK);
    const lq_vindex *v = p->view ? p->view : lq_vindex_of_model(m);
    if (!v || v->info.dense_only)
        return lq_err_set(err, LQ_EUNSUPPORTED, "explain: the model has no gate index (a GGUF or a dense-only vindex)");
    int band = 3;
    int rc = lq_vindex_parse_band(p->band ? p->band : "all", &band, err);
    if (rc)
        return rc;
    const lq_model_info *mi = lq_model_get_info(m);
    if (mi->n_embd != v->info.hidden_size || mi->n_layer != v->info.num_layers)
        return lq_err_set(err, LQ_EINVAL, "explain: the vindex does not match the model's shape");
    int32_t *ids = NULL;
    size_t n = 0;
    int n_ctx = p->session ? lq_session_n_ctx(p->session) : mi->n_ctx_train;
    if ((rc = lq_vx_encode_prompt(m, p->prompt, n_ctx, &ids, &n, err)))
        return rc;
    size_t D = (size_t)mi->n_embd, L = (size_t)mi->n_layer;
    float *lg = malloc((size_t)mi->n_vocab * sizeof *lg);
    float *resid = malloc((L + 1) * D * sizeof *resid); /* [0]: the last token's embedding */
    lq_vindex_hit *hits = malloc(((size_t)p->per_layer + 1) * 64 * sizeof *hits);
    lq_infer_result r;
    memset(&r, 0, sizeof r);
    lq_sb b = {0};
    lq_resid_hook *hook = NULL;
    if (!lg || !resid || !hits) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    lq_edit_match mt;
    if ((rc = lq_model_embed(m, &ids[n - 1], 1, resid, err)) ||
        (rc = walk_hook(m, p->edits, p->knn, &hook, err)) ||
        (rc = forward(m, p->session, hook, ids, n, lg, resid + D, err)) ||
        (rc = predictions(m, lg, p->top, &r.walk, &r.n_walk, err)))
        goto out;
    if (lq_edit_hook_match(hook, (int)n - 1, &mt) && (rc = apply_override(&r, &mt, p->top, err)))
        goto out;
    lq_sb_puts(&b, "{\"prompt\":");
    lq_sb_json_str(&b, p->prompt, strlen(p->prompt));
    lq_sb_puts(&b, ",\"predictions\":");
    put_preds(&b, r.walk, r.n_walk);
    lq_sb_puts(&b, ",\"trace\":[");
    /* each layer's FFN reads the residual stream that enters it: the previous layer's output
     * (the last token's embedding for layer 0) */
    size_t K = p->relations_only ? (size_t)p->per_layer * 64 : (size_t)p->per_layer;
    int first_layer = 1;
    for (int l = 0; l < mi->n_layer && p->per_layer > 0; l++) {
        if (!v->layers[l].present || v->layers[l].num_features == 0)
            continue;
        if (band < 3 && (l < v->info.bands[band].start || l > v->info.bands[band].end))
            continue;
        size_t nh = 0;
        if ((rc = lq_vindex_gate_knn(v, l, resid + (size_t)l * D, K, hits, &nh, err)))
            goto out;
        lq_sb_printf(&b, "%s{\"layer\":%d,\"features\":[", first_layer ? "" : ",", l);
        first_layer = 0;
        for (size_t i = 0, shown = 0; i < nh && shown < (size_t)p->per_layer; i++) {
            if (p->relations_only && !lq_vindex_probe_label(v, l, hits[i].feature))
                continue;
            put_trace_feature(&b, v, &hits[i], shown++ == 0);
        }
        lq_sb_puts(&b, "]}");
    }
    lq_sb_puts(&b, "]");
    if (r.knn_fired)
        put_override(&b, &r);
    lq_sb_puts(&b, ",\"latency_ms\":");
    lq_sb_f64(&b, lq_round_dp(lq_now_ms() - t0, 1));
    lq_sb_puts(&b, "}");
    rc = lq_sb_finish(&b, json_out, err);
out:
    if (rc)
        lq_sb_free(&b);
    lq_edit_hook_free(hook);
    lq_infer_result_free(&r);
    free(ids);
    free(lg);
    free(resid);
    free(hits);
    return rc;
}

int lq_vx_prompt_logits(lq_model *m, const char *prompt, const lq_resid_hook *hook, float *logits,
                        lq_err *err)
{
    const lq_model_info *mi = lq_model_get_info(m);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = lq_vx_encode_prompt(m, prompt, mi->n_ctx_train, &ids, &n, err);
    if (!rc)
        rc = forward(m, NULL, hook, ids, n, logits, NULL, err);
    free(ids);
    return rc;
}
