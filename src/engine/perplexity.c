/* Perplexity over windows of the context, as llama.cpp's perplexity tool (larql/perplexity.h).
 * Each window is evaluated in slices of at most PPL_SLICE positions (the session's KV cache
 * carries the context between slices), so the logits buffer stays PPL_SLICE x n_vocab floats
 * whatever the context and vocabulary. */
#include "larql/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/softmax.h"
#include "larql/tokenizer.h"

enum { PPL_SLICE = 32 };

/* log-softmax of logits [V] at index y, in double */
static double nll_at(const float *logits, int32_t V, int32_t y)
{
    double mx;
    double z = lq_softmax_denominator(logits, (size_t)V, &mx);
    return log(z) + mx - (double)logits[y];
}

int lq_perplexity(lq_model *m, const char *text, size_t len, int n_ctx, lq_perplexity_result *r,
                  lq_err *err)
{
    return lq_perplexity_hook(m, text, len, n_ctx, NULL, r, err);
}

int lq_perplexity_hook(lq_model *m, const char *text, size_t len, int n_ctx, const lq_resid_hook *hook,
                       lq_perplexity_result *r, lq_err *err)
{
    if (!m || !r || (!text && len))
        return lq_err_set(err, LQ_EINVAL, "perplexity: NULL model, result or text");
    memset(r, 0, sizeof *r);
    const lq_model_info *mi = lq_model_get_info(m);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    int max_ctx = mi->n_ctx_train;
    if (n_ctx == 0)
        n_ctx = max_ctx;
    if (n_ctx < 4 || n_ctx > max_ctx)
        return lq_err_set(err, LQ_ERANGE, "perplexity: context %d outside [4, %d] (the model's training context)",
                          n_ctx, max_ctx);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = lq_tokenizer_encode(tok, text ? text : "", len, 0, &ids, &n, err);
    if (rc)
        return rc;
    size_t win = (size_t)n_ctx - 1; /* text tokens per window; BOS fills the first slot */
    size_t n_win = n / win;
    if (n_win == 0) {
        free(ids);
        return lq_err_set(err, LQ_EINVAL,
                          "perplexity: the text has %zu tokens, fewer than one window of %zu (context %d); "
                          "give more text or a smaller context",
                          n, win, n_ctx);
    }
    int32_t V = mi->n_vocab, bos = lq_tokenizer_bos(tok);
    float *logits = malloc((size_t)PPL_SLICE * (size_t)V * sizeof *logits);
    int32_t *in = malloc((size_t)n_ctx * sizeof *in);
    lq_session *s = NULL;
    if (!logits || !in)
        rc = lq_err_set(err, LQ_ENOMEM, "perplexity: out of memory (%d x %d logits)", PPL_SLICE, (int)V);
    if (!rc)
        rc = lq_session_create(m, n_ctx, &s, err);
    if (!rc && hook)
        lq_session_set_hook(s, hook);
    /* in = [BOS] + window: position p predicts in[p + 1]; the scored positions are the second
     * half of the window, p in [first, len(in) - 2] */
    size_t lead = bos >= 0 ? 1 : 0, first = (size_t)n_ctx / 2;
    double nll = 0.0;
    uint64_t scored = 0;
    for (size_t w = 0; !rc && w < n_win; w++) {
        size_t n_in = lead + win;
        if (lead)
            in[0] = bos;
        memcpy(in + lead, ids + w * win, win * sizeof *in);
        lq_session_reset(s);
        for (size_t p0 = 0; !rc && p0 + 1 < n_in; p0 += PPL_SLICE) {
            size_t k = n_in - 1 - p0 < PPL_SLICE ? n_in - 1 - p0 : PPL_SLICE;
            rc = lq_session_eval(s, in + p0, k, NULL, logits, err);
            for (size_t j = 0; !rc && j < k; j++) {
                size_t p = p0 + j;
                if (p < first)
                    continue;
                nll += nll_at(logits + j * (size_t)V, V, in[p + 1]);
                scored++;
            }
        }
    }
    lq_session_free(s);
    free(in);
    free(logits);
    free(ids);
    if (rc)
        return rc;
    if (scored == 0)
        return lq_err_set(err, LQ_EINVAL, "perplexity: context %d leaves no scored token per window", n_ctx);
    r->nll = nll;
    r->tokens = scored;
    r->text_tokens = n;
    r->text_bytes = len;
    r->n_ctx = n_ctx;
    r->windows = (int)n_win;
    r->perplexity = exp(nll / (double)scored);
    r->bits_per_byte = len ? nll / log(2.0) / (double)scored * (double)n / (double)len : 0.0;
    return LQ_OK;
}
