/* The model's own embedding lookup and output head, for callers that work on hidden states
 * rather than on token streams (the server's /v1/embed, /v1/logits, /v1/embeddings; a GGUF
 * and a vindex answer alike, because both go through the loaded model's tensors and the
 * same kernels as the forward pass). */
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"

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

int lq_model_ffn(lq_model *m, int layer, const float *x, size_t n, float *out, lq_err *err)
{
    if (!m || (!x && n) || (!out && n))
        return lq_err_set(err, LQ_EINVAL, "lq_model_ffn: model, input and output are required");
    if (layer < 0 || layer >= m->n_layer)
        return lq_err_set(err, LQ_ERANGE, "layer %d out of range (num_layers = %d)", layer, m->n_layer);
    if (n == 0)
        return LQ_OK;
    lq_scratch sc;
    if (lq_scratch_init(&sc, m) != 0)
        return lq_err_set(err, LQ_ENOMEM, "out of memory for the feed-forward's scratch");
    size_t D = (size_t)m->n_embd;
    /* chunks of LQ_MAX_BATCH rows, as the forward pass batches them: a client's pass of T
     * rows arrives whole, so the kernels see the same batch and give the same bits */
    for (size_t r0 = 0; r0 < n; r0 += LQ_MAX_BATCH) {
        int T = n - r0 < LQ_MAX_BATCH ? (int)(n - r0) : LQ_MAX_BATCH;
        lq_forward_ffn(m, &sc, layer, x + r0 * D, T, out + r0 * D);
    }
    lq_scratch_free(&sc);
    return LQ_OK;
}

/* Row id of the lm_head as f32, however the model holds it. */
static void head_row(const lq_model *m, int32_t id, float *out)
{
    const lq_wmat *w = &m->lm_head;
    size_t D = (size_t)m->n_embd;
    if (w->kind == LQ_WK_Q8) {
        const int8_t *r = w->q8.data + (size_t)id * D;
        for (size_t i = 0; i < D; i++)
            out[i] = w->q8.scale[id] * (float)r[i];
        return;
    }
    const uint8_t *base = w->dense.data;
    for (size_t i = 0; i < D; i++) {
        uint16_t h;
        switch (w->dense.type) {
        case LQ_GGML_F16: memcpy(&h, base + 2 * ((size_t)id * D + i), 2); out[i] = lq_f16_to_f32(h); break;
        case LQ_GGML_BF16: memcpy(&h, base + 2 * ((size_t)id * D + i), 2); out[i] = lq_bf16_to_f32(h); break;
        default: memcpy(&out[i], base + 4 * ((size_t)id * D + i), 4); break;
        }
    }
}

int lq_model_output_rows(const lq_model *m, const int32_t *ids, size_t n, float *out, lq_err *err)
{
    if (!m || (!ids && n) || (!out && n))
        return lq_err_set(err, LQ_EINVAL, "lq_model_output_rows: model, ids and out are required");
    if (m->lm_head.kind != LQ_WK_DENSE && m->lm_head.kind != LQ_WK_Q8)
        return lq_err_set(err, LQ_EUNSUPPORTED, "lq_model_output_rows: the lm_head is not a dense matrix");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab)
            return lq_err_set(err, LQ_ERANGE, "token id %d (at index %zu) out of range: n_vocab %d", (int)ids[i], i,
                              m->n_vocab);
    int held = lq_model_weights_enter(m);
    for (size_t i = 0; i < n; i++) {
        float *o = out + i * (size_t)m->n_embd;
        head_row(m, ids[i], o);
        for (int d = 0; d < m->n_embd; d++)
            o[d] *= m->output_norm[d];
    }
    lq_model_weights_leave(m, held);
    return LQ_OK;
}

const float *lq_model_output_norm(const lq_model *m)
{
    return m ? m->output_norm : NULL;
}
