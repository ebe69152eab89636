/* Sessions: per-request state over a shared, read-only model.
 *
 * A session owns its f32 KV cache (per layer K and V, [n_ctx, n_head_kv*head_dim], K after
 * RoPE), a RoPE table for its context, and scratch for one forward batch. Everything is
 * allocated at create; eval and decode only compute. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

struct lq_session {
    lq_model *m;
    int n_ctx, pos;
    void *kv;    /* [n_layer, 2, n_head_kv, n_ctx, head bytes]: K then V of each layer */
    float *rope; /* [n_ctx, n_rot/2, 2] (cos, sin) of pos * theta^(-2i/n_rot) */
    lq_kv_view view; /* kv and rope as every forward row of this session sees them */
    lq_scratch sc;
    const lq_resid_hook *hook; /* borrowed (lq_session_set_hook) */
    lq_head_req *head;         /* borrowed (lq_session_set_head) */
};



size_t lq_model_kv_bytes(const lq_model *m, int n_ctx)
{
    if (!m || n_ctx < 0)
        return 0;
    return (size_t)m->n_layer * 2 * (size_t)n_ctx * lq_kv_row_bytes(m);
}

int lq_session_create(lq_model *m, int n_ctx, lq_session **out, lq_err *err)
{
    if (!m || !out)
        return lq_err_set(err, LQ_EINVAL, "lq_session_create: model and out are required");
    *out = NULL;
    int limit = m->n_ctx_train;
    if (n_ctx == 0)
        n_ctx = limit < 4096 ? limit : 4096;
    if (n_ctx < 1 || n_ctx > limit)
        return lq_err_set(err, LQ_ERANGE, "context length %d outside [1, %d] (%s.context_length)",
                          n_ctx, limit, m->arch_name);
    lq_session *s = calloc(1, sizeof *s);
    if (!s)
        return lq_err_set(err, LQ_ENOMEM, "cannot allocate a session");
    s->m = m;
    s->n_ctx = n_ctx;
    size_t kv_bytes = lq_model_kv_bytes(m, n_ctx);
    int half = m->n_rot / 2;
    /* The KV cache is not cleared: a position is always written before it is read. */
    s->kv = malloc(kv_bytes);
    s->rope = malloc((size_t)n_ctx * (size_t)m->n_rot * sizeof(float));
    if (!s->kv || !s->rope || lq_scratch_init(&s->sc, m) != 0) {
        lq_session_free(s);
        return lq_err_set(err, LQ_ENOMEM,
                          "cannot allocate a session with n_ctx %d (KV cache %zu bytes)", n_ctx,
                          kv_bytes);
    }
    s->view.kv = s->kv;
    s->view.head_stride = (size_t)n_ctx * lq_kv_head_bytes(m->kv_type, m->head_dim);
    s->view.v_off = (size_t)m->n_head_kv * s->view.head_stride;
    s->view.layer_bytes = 2 * s->view.v_off;
    s->view.rope = s->rope;
    /* Angles in double (pos * theta^(-2i/n_rot)), rounded once: no pow/sin/cos per token. */
    for (int i = 0; i < half; i++) {
        double inv_freq = pow(m->rope_theta, -2.0 * i / m->n_rot);
        for (int p = 0; p < n_ctx; p++) {
            double a = p * inv_freq;
            s->rope[(size_t)p * m->n_rot + 2 * i] = (float)cos(a);
            s->rope[(size_t)p * m->n_rot + 2 * i + 1] = (float)sin(a);
        }
    }
    *out = s;
    return LQ_OK;
}

void lq_session_free(lq_session *s)
{
    if (!s)
        return;
    lq_scratch_free(&s->sc);
    free(s->kv);
    free(s->rope);
    free(s);
}

void lq_session_reset(lq_session *s)
{
    if (s)
        s->pos = 0;
}

int lq_session_truncate(lq_session *s, int n, lq_err *err)
{
    if (!s)
        return lq_err_set(err, LQ_EINVAL, "session: truncate needs a session");
    if (n < 0 || n > s->pos)
        return lq_err_set(err, LQ_ERANGE, "session: cannot keep %d positions of %d", n, s->pos);
    s->pos = n;
    return LQ_OK;
}

int lq_session_pos(const lq_session *s) { return s ? s->pos : 0; }
int lq_session_n_ctx(const lq_session *s) { return s ? s->n_ctx : 0; }
lq_model *lq_session_model(const lq_session *s) { return s ? s->m : NULL; }

void lq_session_set_hook(lq_session *s, const lq_resid_hook *h)
{
    if (s)
        s->hook = h;
}

const lq_resid_hook *lq_session_hook(const lq_session *s) { return s ? s->hook : NULL; }

void lq_session_set_head(lq_session *s, lq_head_req *h)
{
    if (s)
        s->head = h;
}

/* The bounded-logits request for a row whose logits go to out: only the session's own
 * request buffer, and never under an on_logits edit (it may change any logit, so its input
 * must be the exact head's). */
static lq_head_req *row_head(const lq_session *s, const float *out)
{
    lq_head_req *h = s->head;
    if (!h || !out || h->logits != out || (s->hook && s->hook->on_logits))
        return NULL;
    return h;
}

static int check_ids(const lq_model *m, const int32_t *ids, size_t n, lq_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_vocab)
            return lq_err_set(err, LQ_ERANGE, "token id %d (at index %zu) out of range: n_vocab %d",
                              (int)ids[i], i, m->n_vocab);
    return LQ_OK;
}

/* lq_session_eval with an optional residual capture of the last position. */
static int eval(lq_session *s, const int32_t *ids, size_t n, float *logits, float *all_logits,
                float *capture, lq_err *err)
{
    if (!s)
        return lq_err_set(err, LQ_EINVAL, "lq_session_eval: session is NULL");
    if (n == 0 || !ids)
        return lq_err_set(err, LQ_EINVAL, "lq_session_eval: empty input (no token ids)");
    const lq_model *m = s->m;
    if (n > (size_t)(s->n_ctx - s->pos))
        return lq_err_set(err, LQ_ECONTEXT,
                          "context overflow: position %d + %zu tokens exceeds n_ctx %d", s->pos,
                          n, s->n_ctx);
    int rc = check_ids(m, ids, n, err);
    if (rc != 0)
        return rc;
    size_t V = (size_t)m->n_vocab;
    lq_fwd_row rows[LQ_MAX_BATCH];
    float *outp[LQ_MAX_BATCH];
    for (size_t c0 = 0; c0 < n; c0 += LQ_MAX_BATCH) {
        int T = n - c0 < LQ_MAX_BATCH ? (int)(n - c0) : LQ_MAX_BATCH;
        int want = 0;
        for (int t = 0; t < T; t++) {
            size_t i = c0 + (size_t)t;
            rows[t].kv = &s->view;
            rows[t].pos = s->pos + t;
            rows[t].hook = s->hook;
            outp[t] = all_logits ? all_logits + i * V : (i == n - 1 ? logits : NULL);
            rows[t].head = all_logits ? NULL : row_head(s, outp[t]);
            want |= outp[t] != NULL;
        }
        /* only the last chunk's capture is the last position's */
        float *cap = c0 + (size_t)T == n ? capture : NULL;
        rc = lq_forward(m, &s->sc, ids + c0, rows, T, want ? outp : NULL, cap, err);
        if (rc)
            return rc;
        s->pos += T;
    }
    if (logits && all_logits)
        memcpy(logits, all_logits + (n - 1) * V, V * sizeof(float));
    return LQ_OK;
}

int lq_session_eval(lq_session *s, const int32_t *ids, size_t n, float *logits,
                    float *all_logits, lq_err *err)
{
    return eval(s, ids, n, logits, all_logits, NULL, err);
}

int lq_session_eval_capture(lq_session *s, const int32_t *ids, size_t n, float *logits,
                            float *resid, lq_err *err)
{
    if (!resid)
        return lq_err_set(err, LQ_EINVAL, "lq_session_eval_capture: no residual buffer");
    return eval(s, ids, n, logits, NULL, resid, err);
}

int lq_session_eval_trace(lq_session *s, const int32_t *ids, size_t n, float *logits, float *resid_attn,
                          float *resid, lq_err *err)
{
    if (!resid || !resid_attn)
        return lq_err_set(err, LQ_EINVAL, "lq_session_eval_trace: no residual buffers");
    if (!s)
        return lq_err_set(err, LQ_EINVAL, "lq_session_eval: session is NULL");
    s->sc.capture_attn = resid_attn;
    int rc = eval(s, ids, n, logits, NULL, resid, err);
    s->sc.capture_attn = NULL;
    return rc;
}

int lq_session_decode(lq_session *s, int32_t id, float *logits, lq_err *err)
{
    return lq_session_eval(s, &id, 1, logits, NULL, err);
}

/* The checks lq_session_eval_batch promises, before anything changes; total: rows in all. */
static int check_batch(lq_session *const *ss, const int32_t *ids, const int *counts, int B,
                       size_t *total_out, lq_err *err)
{
    if (!ss || !ids || B < 1)
        return lq_err_set(err, LQ_EINVAL, "lq_session_eval_batch: empty batch");
    const lq_model *m = ss[0] ? ss[0]->m : NULL;
    size_t total = 0;
    for (int b = 0; b < B; b++) {
        int n = counts ? counts[b] : 1;
        if (!ss[b] || ss[b]->m != m)
            return lq_err_set(err, LQ_EINVAL,
                              "lq_session_eval_batch: session %d is NULL or of another model", b);
        for (int c = 0; c < b; c++)
            if (ss[c] == ss[b])
                return lq_err_set(err, LQ_EINVAL,
                                  "lq_session_eval_batch: session %d appears twice (also %d)", b,
                                  c);
        if (n < 1)
            return lq_err_set(err, LQ_EINVAL, "lq_session_eval_batch: session %d has %d ids", b,
                              n);
        if (n > ss[b]->n_ctx - ss[b]->pos)
            return lq_err_set(err, LQ_ECONTEXT,
                              "context overflow in session %d: position %d + %d token%s exceeds "
                              "n_ctx %d",
                              b, ss[b]->pos, n, n == 1 ? "" : "s", ss[b]->n_ctx);
        for (int j = 0; j < n; j++) {
            int32_t id = ids[total + (size_t)j];
            if (id < 0 || id >= m->n_vocab)
                return lq_err_set(err, LQ_ERANGE,
                                  "token id %d (session %d, index %d) out of range: n_vocab %d",
                                  (int)id, b, j, m->n_vocab);
        }
        total += (size_t)n;
    }
    *total_out = total;
    return LQ_OK;
}

/* Row k is ids[k]: sessions in order, each with its ids at consecutive positions. Rows go
 * through forward passes of at most LQ_MAX_BATCH; a session's ids may straddle two passes
 * (within a pass, rows of one session see each other causally). Positions are computed from
 * the sessions' positions before the call, which change only at the end. Row k's logits go
 * to row_out(k) with the bounded-logits request row_head(k). */
static int run_batch(lq_session *const *ss, const int32_t *ids, const int *counts, int B,
                     float *const *logits, float *const *row_logits,
                     lq_head_req *const *row_heads, lq_err *err)
{
    const lq_model *m = ss[0]->m;
    lq_fwd_row rows[LQ_MAX_BATCH];
    float *outp[LQ_MAX_BATCH];
    size_t k0 = 0;
    int T = 0, want = 0, b = 0, j = 0;
    lq_session *first = ss[0];
    while (b < B) {
        int n = counts ? counts[b] : 1;
        size_t k = k0 + (size_t)T;
        if (T == 0)
            first = ss[b];
        rows[T].kv = &ss[b]->view;
        rows[T].pos = ss[b]->pos + j;
        rows[T].hook = ss[b]->hook;
        if (row_logits) {
            outp[T] = row_logits[k];
            rows[T].head = row_heads && row_heads[k] && outp[T] && row_heads[k]->logits == outp[T] &&
                                   !(ss[b]->hook && ss[b]->hook->on_logits)
                               ? row_heads[k]
                               : NULL;
        } else {
            outp[T] = j == n - 1 && logits ? logits[b] : NULL;
            rows[T].head = row_head(ss[b], outp[T]);
        }
        want |= outp[T] != NULL;
        T++;
        if (++j == n) {
            j = 0;
            b++;
        }
        if (T == LQ_MAX_BATCH || b == B) {
            /* the pass runs in its first session's scratch (sized for LQ_MAX_BATCH rows) */
            /* a failed pass (remote FFN) leaves every position where it was: the KV rows
             * already written are overwritten by the next call */
            int rc = lq_forward(m, &first->sc, ids + k0, rows, T, want ? outp : NULL, NULL, err);
            if (rc)
                return rc;
            k0 += (size_t)T;
            T = 0;
            want = 0;
        }
    }
    for (b = 0; b < B; b++)
        ss[b]->pos += counts ? counts[b] : 1;
    return LQ_OK;
}

int lq_session_eval_batch(lq_session *const *ss, const int32_t *ids, const int *counts, int B,
                          float *const *logits, lq_err *err)
{
    size_t total;
    int rc = check_batch(ss, ids, counts, B, &total, err);
    return rc ? rc : run_batch(ss, ids, counts, B, logits, NULL, NULL, err);
}

int lq_session_eval_rows(lq_session *const *ss, const int32_t *ids, const int *counts, int B,
                         float *const *row_logits, lq_head_req *const *row_heads, lq_err *err)
{
    size_t total;
    int rc = check_batch(ss, ids, counts, B, &total, err);
    if (!rc && !row_logits)
        rc = lq_err_set(err, LQ_EINVAL, "lq_session_eval_rows: no logits pointers");
    return rc ? rc : run_batch(ss, ids, counts, B, NULL, row_logits, row_heads, err);
}

int lq_session_decode_batch(lq_session *const *ss, const int32_t *ids, int B,
                            float *const *logits, lq_err *err)
{
    return lq_session_eval_batch(ss, ids, NULL, B, logits, err);
}

int lq_session_copy_prefix(lq_session *dst, const lq_session *src, int n, lq_err *err)
{
    if (!dst || !src || dst == src)
        return lq_err_set(err, LQ_EINVAL, "session: copy needs two different sessions");
    if (dst->m != src->m)
        return lq_err_set(err, LQ_EINVAL, "session: copy between sessions of another model");
    if (n < 0 || n > src->pos || n > dst->n_ctx)
        return lq_err_set(err, LQ_ERANGE, "session: cannot copy %d positions of %d into a context of %d", n,
                          src->pos, dst->n_ctx);
    /* each layer's K and V are [n_head_kv][n_ctx] rows: the first n rows of every head (the
     * two contexts may differ: each session's own head stride) */
    size_t row = lq_kv_head_bytes(src->m->kv_type, src->m->head_dim), run = (size_t)n * row;
    for (int l = 0; l < src->m->n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < src->m->n_head_kv; h++) {
                size_t od = (size_t)h * dst->view.head_stride, os = (size_t)h * src->view.head_stride;
                memcpy((kv ? lq_kv_v(&dst->view, l) : lq_kv_k(&dst->view, l)) + od,
                       (kv ? lq_kv_v(&src->view, l) : lq_kv_k(&src->view, l)) + os, run);
            }
    dst->pos = n;
    return LQ_OK;
}

size_t lq_session_kv_bytes(const lq_session *s, int n)
{
    return s && n > 0 ? (size_t)s->m->n_layer * 2 * (size_t)n * lq_kv_row_bytes(s->m) : 0;
}

/* Between the KV (head-major rows, n_ctx apart per head) and a flat copy of n positions. */
static void kv_flat(const lq_session *s, int n, uint8_t *flat, const uint8_t *in)
{
    size_t run = (size_t)n * lq_kv_head_bytes(s->m->kv_type, s->m->head_dim);
    for (int l = 0; l < s->m->n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < s->m->n_head_kv; h++) {
                uint8_t *at = (kv ? lq_kv_v(&s->view, l) : lq_kv_k(&s->view, l)) + (size_t)h * s->view.head_stride;
                if (flat)
                    memcpy(flat, at, run);
                else
                    memcpy(at, in, run);
                flat = flat ? flat + run : NULL;
                in = in ? in + run : NULL;
            }
}

int lq_session_kv_get(const lq_session *s, int n, void *buf, size_t size, lq_err *err)
{
    if (!s || (!buf && n > 0))
        return lq_err_set(err, LQ_EINVAL, "session: kv_get needs a session and a buffer");
    if (n < 0 || n > s->pos)
        return lq_err_set(err, LQ_ERANGE, "session: cannot read %d positions of %d", n, s->pos);
    if (size < lq_session_kv_bytes(s, n))
        return lq_err_set(err, LQ_EINVAL, "session: %zu bytes for %d positions' KV (%zu)", size, n,
                          lq_session_kv_bytes(s, n));
    if (n > 0)
        kv_flat(s, n, buf, NULL);
    return LQ_OK;
}

int lq_session_kv_set(lq_session *s, int n, const void *buf, size_t size, lq_err *err)
{
    if (!s || (!buf && n > 0))
        return lq_err_set(err, LQ_EINVAL, "session: kv_set needs a session and a buffer");
    if (n < 0 || n > s->n_ctx)
        return lq_err_set(err, LQ_ERANGE, "session: %d positions in a context of %d", n, s->n_ctx);
    if (size != lq_session_kv_bytes(s, n))
        return lq_err_set(err, LQ_EINVAL, "session: %zu bytes for %d positions' KV (%zu)", size, n,
                          lq_session_kv_bytes(s, n));
    if (n > 0)
        kv_flat(s, n, NULL, buf);
    s->pos = n;
    return LQ_OK;
}
