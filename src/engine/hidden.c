/* The model's own embedding lookup and output head, for callers that work on hidden states
 * rather than on token streams (the server's /v1/embed, /v1/logits, /v1/embeddings; a GGUF
 * and a vindex answer alike, because both go through the loaded model's tensors and the
 * same kernels as the forward pass). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

int lq_model_embed(const lq_model *m, const int32_t *ids, size_t n, float *out, lq_err *err)
{
    if (!m || (!ids && n) || (!out && n))
        return lq_err_set(err, LQ_EINVAL, "lq_model_embed: model, ids and out are required");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab)
            return lq_err_set(err, LQ_ERANGE, "token id %d (at index %zu) out of range: n_vocab %d",
                              (int)ids[i], i, m->n_vocab);
    for (size_t i = 0; i < n; i++)
        lq_forward_embed_row(m, ids[i], out + i * (size_t)m->n_embd);
    return LQ_OK;
}

int lq_model_logits_from_hidden(lq_model *m, const float *h, size_t n, float *logits, lq_err *err)
{
    if (!m || (!h && n) || (!logits && n))
        return lq_err_set(err, LQ_EINVAL,
                          "lq_model_logits_from_hidden: model, hidden states and logits are required");
    if (n == 0)
        return LQ_OK;
    lq_scratch sc;
    if (lq_scratch_init(&sc, m) != 0)
        return lq_err_set(err, LQ_ENOMEM, "out of memory for the output head's scratch");
    size_t D = (size_t)m->n_embd, V = (size_t)m->n_vocab;
    float *outp[LQ_MAX_BATCH];
    for (size_t r0 = 0; r0 < n; r0 += LQ_MAX_BATCH) {
        int T = n - r0 < LQ_MAX_BATCH ? (int)(n - r0) : LQ_MAX_BATCH;
        for (int t = 0; t < T; t++)
            outp[t] = logits + (r0 + (size_t)t) * V;
        lq_forward_head(m, &sc, h + r0 * D, T, outp);
    }
    lq_scratch_free(&sc);
    return LQ_OK;
}
