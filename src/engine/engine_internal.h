/* Engine internals: the scratch and row types the forward pass (forward.c) works on, and
 * what sessions (session.c) hand it. Not a public header. Dependencies run one way:
 * session.c -> forward.c; forward.c knows nothing of sessions (each row carries a view of
 * its KV cache). */
#ifndef LQ_ENGINE_INTERNAL_H
#define LQ_ENGINE_INTERNAL_H

#include "model/model_internal.h"

/* Positions run through the network together in one batch (prefill chunk / batched decode).
 * Scratch buffers are sized for this; longer prompts run in chunks of this many. */
#define LQ_MAX_BATCH 64

/* Per-session (or per batch) scratch for a forward pass over up to LQ_MAX_BATCH rows. */
typedef struct lq_scratch {
    float *x;        /* [B, n_embd]  residual stream */
    float *h;        /* [B, max(n_embd, q_dim, n_ff)] normed input to a projection */
    float *q;        /* [B, q_dim] */
    float *k;        /* [B, kv_dim] */
    float *v;        /* [B, kv_dim] */
    float *att;      /* [B, q_dim]  attention output */
    float *g;        /* [B, n_ff]   gate, then the FFN activation */
    float *u;        /* [B, n_ff]   up */
    float *tmp;      /* [B, n_embd] projection output added to the residual */
    float *capture_attn; /* NULL, or [n_layer, n_embd]: with a residual capture, the last row's
                            residual after each attention add as well (TRACE's deltas) */
    float *xdq;      /* [B, max_in] int8-dequantised activations for non-I2_S BitLinear */
    int8_t *xq;      /* [B, max_in] int8 activations */
    float *xinv;     /* [B] 1/scale of each row's int8 activations */
    int32_t *xsum;   /* [B] Σ q of each row */
    float *lm_tile;  /* [n_threads, B * LQ_LM_TILE] lm_head output tiles */
    int *att_tab;    /* attention parts of the batch (forward.c att_plan), grown as needed */
    size_t att_tab_cap;
    float *att_buf;  /* partial outputs and softmax states of rows in several parts */
    size_t att_buf_cap;
    int16_t *xq16;   /* [B, n_embd] int16 final-normed rows for a q8 lm_head */
    float *xinv16;   /* [B] their 1/scale */
    int n_threads;
} lq_scratch;

#define LQ_LM_TILE 64

/* A session's KV cache and RoPE table as the forward pass sees them, so that forward.c needs
 * nothing from session.c: K and V of layer l start at kv + l * layer_bytes, V v_off bytes
 * after K. Each is head-major, [n_head_kv][n_ctx] rows of lq_kv_head_bytes(m->kv_type,
 * head_dim) bytes: a head's rows are contiguous, so attention streams one run of memory per
 * KV head (position-major rows would make it skip over the other heads' rows, which the
 * hardware prefetchers follow poorly past a few hundred positions). */
typedef struct lq_kv_view {
    uint8_t *kv;        /* [n_layer, 2, n_head_kv, n_ctx, head bytes] */
    size_t layer_bytes; /* 2 * v_off */
    size_t v_off;       /* n_head_kv * head_stride */
    size_t head_stride; /* n_ctx * head bytes: from one KV head's rows to the next */
    const float *rope;  /* [n_ctx, n_rot/2, 2] (cos, sin) of pos * theta^(-2i/n_rot) */
} lq_kv_view;

/* Bytes of one position's K (or V) values over all KV heads. */
static inline size_t lq_kv_row_bytes(const lq_model *m)
{
    return (size_t)m->n_head_kv * lq_kv_head_bytes(m->kv_type, m->head_dim);
}

static inline uint8_t *lq_kv_k(const lq_kv_view *v, int layer)
{
    return v->kv + (size_t)layer * v->layer_bytes;
}
static inline uint8_t *lq_kv_v(const lq_kv_view *v, int layer)
{
    return lq_kv_k(v, layer) + v->v_off;
}

/* A generation's request for bounded logits (forward.c "bounded head"; generate.c certifies
 * the sampler's choice with it). The caller owns every buffer (allocated before its token
 * loop). When a forward row's logits buffer is `logits` and the model has the bounded copy,
 * the forward pass fills it so that for every row r either bit r of `exact` is set and
 * logits[r] is bit-identical to the exact head's, or logits[r] >= the exact logit (an upper
 * bound), and the k best exact logits are all among the exact rows; rows whose upper bound is
 * within `window` of the k-th best lower bound are exact too (sampling without top-k). */
typedef struct lq_head_req {
    /* in */
    float *logits;     /* [n_vocab] the buffer this request is for */
    int k;             /* 1 <= k <= LQ_HEAD_MAX_K */
    float window;      /* >= 0 */
    int cap;           /* more exact rows than this: the whole head is computed exactly */
    uint32_t *exact;   /* [ceil(n_vocab / 32)] */
    int32_t *ids;      /* [cap] */
    float *x;          /* [n_embd] */
    /* out, per forward pass */
    int valid;         /* 1: the last pass filled this request (the caller clears it) */
    int full;          /* 1: every logit is exact (bits not set) */
    int n_ids;         /* exact rows, listed in ids (when !full) */
    /* x: the row's final-normed hidden state, for rows rescored later (lq_head_rescore) */
} lq_head_req;

#define LQ_HEAD_MAX_K 1024

static inline int lq_head_is_exact(const lq_head_req *h, int32_t r)
{
    return h->full || ((h->exact[r >> 5] >> (r & 31)) & 1u);
}

/* Computes rows ids[0..n) (n < 0: every row) of h's logits exactly from h->x into logits,
 * marking them exact (n < 0: h->full). Only after a pass that filled h (h->valid). */
void lq_head_rescore(const lq_model *m, lq_head_req *h, const int32_t *ids, int n, float *logits);

/* The session's bounded-logits request (NULL: none), borrowed like its hook: every eval whose
 * last position's logits go to h->logits (and that computes no other logits) fills it. */
void lq_session_set_head(lq_session *s, lq_head_req *h);

/* lq_session_eval_batch with logits wanted per row rather than per session: row k (sessions
 * in order, each session's ids in order) writes row_logits[k] (NULL: none) under the
 * bounded-logits request row_heads[k] (row_heads NULL or an entry NULL or with another
 * logits buffer: exact). What speculative decoding verifies a draft with: the logits after
 * every drafted token, in one pass. Same checks as lq_session_eval_batch. */
int lq_session_eval_rows(lq_session *const *ss, const int32_t *ids, const int *counts, int B,
                         float *const *row_logits, lq_head_req *const *row_heads, lq_err *err);

/* One row of a forward batch: the KV cache / RoPE table it uses, its absolute position
 * there, and its session's forward-pass edits. */
typedef struct lq_fwd_row {
    const lq_kv_view *kv;
    int pos;
    const lq_resid_hook *hook; /* the row's session's edits, or NULL */
    lq_head_req *head;         /* bounded logits for this row, or NULL (exact) */
} lq_fwd_row;

int lq_scratch_init(lq_scratch *sc, const lq_model *m);
void lq_scratch_free(lq_scratch *sc);

/* Runs T rows (1 <= T <= LQ_MAX_BATCH) through the network, appending each row's K/V to its
 * cache at rows[t].pos. Ids must be validated. out[t] (may be NULL, or out itself NULL)
 * receives row t's n_vocab logits; the lm_head runs only for rows that want them. capture:
 * NULL, or [n_layer, n_embd] receiving the last row's residual stream after each layer's
 * FFN add (the vindex walk mode's residual capture; it reads, never changes, the
 * computation). Returns 0, or (only when the model's FFN is remote, --ffn URL) the remote
 * call's error with err filled: the rows' K/V up to the failing layer are then written but
 * the caller does not advance its position, so they are overwritten by the next pass. */
int lq_forward(const lq_model *m, lq_scratch *sc, const int32_t *ids, const lq_fwd_row *rows,
               int T, float *const *out, float *capture, lq_err *err);

/* One layer's feed-forward (ffn_norm already applied) on T <= LQ_MAX_BATCH rows x [T, n_embd]
 * into out [T, n_embd], before the residual add: what the forward pass computes for that
 * layer, always locally (the server side of POST /v1/walk-ffn). layer must be valid. */
void lq_forward_ffn(const lq_model *m, lq_scratch *sc, int layer, const float *x, int T, float *out);

/* Row id of the token embedding as f32 ([n_embd]); id must be validated. */
void lq_forward_embed_row(const lq_model *m, int32_t id, float *out);

/* Final norm + lm_head of n <= LQ_MAX_BATCH rows of residual stream x [n, n_embd] (x is not
 * changed) into out[t] ([n_vocab] each): how lq_forward ends. */
void lq_forward_head(const lq_model *m, lq_scratch *sc, const float *x, int n, float *const *out);
/* The same with bounded-logits requests (reqs NULL, or n entries, each NULL or a request
 * whose logits is out[t]): the decode's head, exposed for the unit tests. */
void lq_forward_head_req(const lq_model *m, lq_scratch *sc, const float *x, int n,
                         float *const *out, lq_head_req *const *reqs);

#endif
