/* TRACE (LARQL's residual trace, crates/larql-inference/src/trace): one forward pass over the
 * prompt capturing the last position's residual after the embedding and after every layer,
 * and each layer's attention and FFN contributions (the residual after the attention add
 * minus the one before the layer; after the FFN minus after attention). Every vector goes
 * through the output head (final norm + lm_head, as LARQL's project_to_logits) for the
 * layer's top-1 token and, with an answer token, its rank, probability and the logit each
 * contribution gives it. The session's edits act inside the pass, as in INFER. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "larql/model.h"
#include "larql/patch.h"
#include "larql/tokenizer.h"
#include "larql/vindex.h"
#include "vindex/vindex_internal.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double norm(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/* softmax probability of id and the id / probability of the top one */
static void probs_of(const float *lg, int V, int32_t id, double *p_id, int *rank, int32_t *top, double *p_top)
{
    float mx = lg[0];
    int32_t am = 0;
    for (int i = 1; i < V; i++)
        if (lg[i] > mx)
            mx = lg[i], am = i;
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp((double)lg[i] - mx);
    *top = am;
    *p_top = 1.0 / z;
    if (id >= 0 && id < V) {
        *p_id = exp((double)lg[id] - mx) / z;
        int r = 1;
        for (int i = 0; i < V; i++)
            r += lg[i] > lg[id];
        *rank = r;
    }
}

static int is_zero(const float *x, int n)
{
    for (int i = 0; i < n; i++)
        if (x[i] != 0.0f)
            return 0;
    return 1;
}

int lq_infer_trace(lq_model *m, const char *prompt, const char *answer, lq_edit_set *edits, lq_trace_result *r,
                   lq_err *err)
{
    memset(r, 0, sizeof *r);
    r->answer_id = -1;
    if (!m)
        return lq_err_set(err, LQ_EINVAL, "trace: no model");
    const lq_model_info *mi = lq_model_get_info(m);
    const int L = mi->n_layer, D = mi->n_embd, V = mi->n_vocab;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = lq_vx_encode_prompt(m, prompt, mi->n_ctx_train, &ids, &n, err);
    if (rc)
        return rc;
    if (answer) { /* LARQL: the last token of " answer" */
        const lq_tokenizer *t = lq_model_tokenizer(m);
        size_t al = strlen(answer);
        char *sp = malloc(al + 2);
        int32_t *aid = NULL;
        size_t na = 0;
        if (!sp) {
            free(ids);
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        }
        sp[0] = ' ';
        memcpy(sp + 1, answer, al + 1);
        rc = lq_tokenizer_encode(t, sp, al + 1, 0, &aid, &na, err);
        free(sp);
        if (!rc && !na)
            rc = lq_err_set(err, LQ_EINVAL, "trace: the answer '%s' encodes to no token", answer);
        if (!rc)
            r->answer_id = aid[na - 1];
        free(aid);
        if (rc) {
            free(ids);
            return rc;
        }
    }
    /* rows: [0] embedding, [1+l] after layer l, [1+L+l] attention delta, [1+2L+l] FFN delta */
    size_t rows = 1 + 3 * (size_t)L;
    float *vec = calloc(rows * (size_t)D, sizeof *vec), *mid = malloc((size_t)L * D * sizeof *mid);
    float *lg = malloc(rows * (size_t)V * sizeof *lg), *last = malloc((size_t)V * sizeof *last);
    r->layers = calloc((size_t)L + 1, sizeof *r->layers);
    lq_session *s = NULL;
    lq_resid_hook *h = NULL;
    if (!vec || !mid || !lg || !last || !r->layers)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_session_create(m, (int)n, &s, err);
    if (!rc && edits)
        rc = lq_edit_set_hook(edits, LQ_EDITS_COMPOSE, &h, err);
    double t0 = now_ms();
    if (!rc) {
        lq_session_set_hook(s, h);
        rc = lq_session_eval_trace(s, ids, n, last, mid, vec + D, err);
    }
    if (!rc)
        rc = lq_model_embed(m, &ids[n - 1], 1, vec, err);
    if (!rc) {
        for (int l = 0; l < L; l++) {
            const float *before = vec + (size_t)l * D, *after = vec + (size_t)(l + 1) * D;
            const float *am = mid + (size_t)l * D;
            float *da = vec + (size_t)(1 + L + l) * D, *df = vec + (size_t)(1 + 2 * L + l) * D;
            for (int i = 0; i < D; i++) {
                da[i] = am[i] - before[i];
                df[i] = after[i] - am[i];
            }
        }
        rc = lq_model_logits_from_hidden(m, vec, rows, lg, err);
    }
    r->ms = now_ms() - t0;
    if (!rc) {
        r->n_tokens = n;
        r->n_layers = L;
        r->n = (size_t)L + 1;
        for (int k = 0; k <= L; k++) {
            lq_trace_layer *y = &r->layers[k];
            y->layer = k - 1;
            probs_of(lg + (size_t)k * V, V, r->answer_id, &y->prob, &y->rank, &y->top1_id, &y->top1_prob);
            y->resid_norm = norm(vec + (size_t)k * D, D);
            if (k > 0) {
                const float *da = vec + (size_t)(L + k) * D, *df = vec + (size_t)(2 * L + k) * D;
                y->attn_norm = norm(da, D);
                y->ffn_norm = norm(df, D);
                if (r->answer_id >= 0) { /* LARQL: a zero delta gives 0, not the head's bias */
                    y->attn_logit = is_zero(da, D) ? 0 : lg[(size_t)(L + k) * V + r->answer_id];
                    y->ffn_logit = is_zero(df, D) ? 0 : lg[(size_t)(2 * L + k) * V + r->answer_id];
                }
            }
        }
    }
    lq_session_free(s);
    lq_edit_hook_free(h);
    free(vec), free(mid), free(lg), free(last), free(ids);
    if (rc)
        lq_trace_result_free(r);
    return rc;
}

void lq_trace_result_free(lq_trace_result *r)
{
    if (!r)
        return;
    free(r->layers);
    memset(r, 0, sizeof *r);
    r->answer_id = -1;
}
