/* Internal layout of a loaded model, shared by the loader (src/model/model.c) and the engine
 * (src/engine/forward.c, session.c). Not part of the public API.
 *
 * Conventions: a weight matrix W maps a vector of `cols` inputs to `rows` outputs; GGUF
 * stores it as ne = [cols, rows] (ne0 = row length), row-major. */
#ifndef LQ_MODEL_INTERNAL_H
#define LQ_MODEL_INTERNAL_H

#include <stdint.h>

#include "core/mapfile.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "larql/gguf.h"
#include "larql/model.h"

/* Hard caps on configuration values read from a file: they keep a hostile header from
 * driving huge allocations (KV cache, scratch, RoPE tables) before any tensor is checked. */
#define LQ_MODEL_MAX_LAYERS 1024
#define LQ_MODEL_MAX_EMBD (1 << 16)
#define LQ_MODEL_MAX_FF (1 << 20)
#define LQ_MODEL_MAX_HEADS 1024
#define LQ_MODEL_MAX_HEAD_DIM 1024
#define LQ_MODEL_MAX_VOCAB (1 << 24)
#define LQ_MODEL_MAX_CTX (1 << 22)

/* Positions run through the network together in one batch (prefill chunk / batched decode).
 * Scratch buffers are sized for this; longer prompts run in chunks of this many. */
#define LQ_MAX_BATCH 64

enum { LQ_WK_I2S = 1, LQ_WK_DENSE = 2, LQ_WK_Q8 = 3 };

/* One projection matrix, ready for a kernel. */
typedef struct lq_wmat {
    int kind;            /* LQ_WK_I2S (packed ternary, in the mapping) or LQ_WK_DENSE */
    int src_type;        /* lq_ggml_type as stored in the file */
    int64_t rows, cols;  /* W: [rows, cols] */
    lq_i2s_mat i2s;      /* kind == LQ_WK_I2S: zero-copy view + per-tensor scale */
    lq_dense_mat dense;  /* kind == LQ_WK_DENSE: F32/F16/BF16 in place, or an owned f32 decode */
    lq_q8_mat q8;        /* kind == LQ_WK_Q8: owned int8 per-row-scaled copy (lm_head q8) */
    uint64_t bytes;      /* weight bytes one product with this matrix reads */
} lq_wmat;

typedef struct lq_layer {
    const float *attn_norm;     /* [n_embd] */
    const float *attn_sub_norm; /* [n_head*head_dim], BitNet only (NULL for llama) */
    const float *ffn_norm;      /* [n_embd] */
    const float *ffn_sub_norm;  /* [n_ff], BitNet only (NULL for llama) */
    lq_wmat q;    /* [n_head*head_dim, n_embd] */
    lq_wmat k;    /* [n_head_kv*head_dim, n_embd] */
    lq_wmat v;    /* [n_head_kv*head_dim, n_embd] */
    lq_wmat o;    /* [n_embd, n_head*head_dim] */
    lq_wmat gate; /* [n_ff, n_embd] */
    lq_wmat up;   /* [n_ff, n_embd] */
    lq_wmat down; /* [n_embd, n_ff] */
} lq_layer;

/* Owned allocations made at load (decoded tensors); freed with the model. */
typedef struct lq_owned {
    void **ptrs;
    int n, cap;
} lq_owned;

struct lq_model {
    lq_gguf *gguf;              /* kept open: every zero-copy view points into its mapping */
    lq_mapfile hp_copy;         /* opts.hugepages: the file copied into 2 MB pages (gguf parses it) */
    lq_tokenizer *tok;          /* NULL when the GGUF carries no tokenizer */
    lq_pool *pool;
    const lq_kernels *kern;
    lq_model_info info;
    char arch_name[64];
    char name[256];

    int arch;                   /* lq_arch */
    int act_mode;               /* lq_act_mode; llama ignores it (no BitLinear) */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot, n_vocab, n_ctx_train;
    int q_dim, kv_dim;          /* n_head*head_dim, n_head_kv*head_dim */
    int kv_f16;                 /* sessions store K and V as f16 */
    int rope_neox;              /* 1: pairs (i, i+n_rot/2) (BitNet); 0: pairs (2i, 2i+1) */
    double rope_theta;
    float eps;

    /* token_embd: [n_vocab, n_embd] (GGUF ne = [n_embd, n_vocab]); F32/F16/BF16 in place or
     * an owned f32 decode. */
    lq_dense_mat embd;
    const float *output_norm;   /* [n_embd] */
    lq_wmat lm_head;            /* [n_vocab, n_embd]: output.weight or the tied embedding */
    lq_layer *layers;           /* [n_layer] */

    lq_owned owned;
    void *lm_q8_map;            /* the q8 lm_head's anonymous mapping (int8 rows, then scales) */
    size_t lm_q8_map_size;

    /* Set when the model was opened from a vindex directory (src/vindex/vx_model.c): src
     * holds that loader's mappings and buffers, freed by src_free at close; the tokenizer
     * then belongs to it (tok_borrowed). gguf is NULL for such a model. */
    void *src;
    void (*src_free)(void *src);
    int tok_borrowed;
};

/* ---- opening a vindex directory (src/vindex/vx_model.c) ---- */

/* 1 if path is a directory holding index.json. */
int lq_vx_path_is_vindex(const char *path);
/* Fills m (config, tensors, tokenizer, info except kernels/threads/load time) from a BitNet
 * inference vindex. On error m->src may be set; lq_model_close releases it. */
int lq_vx_model_load(lq_model *m, const char *dir, int hugepages, lq_err *err);

/* ---- engine internals (src/engine/forward.c) ---- */

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
    /* NULL (lq_scratch_init's default), or [n_layer, n_embd] set by the caller: lq_forward
     * copies the last row's residual stream after each layer's FFN add into it (the vindex
     * walk mode's residual capture; it reads, never changes, the computation). */
    float *capture;
} lq_scratch;

#define LQ_LM_TILE 64

/* One row of a forward batch: which session's KV cache / RoPE table it uses, and its
 * absolute position there. */
typedef struct lq_fwd_row {
    lq_session *s;
    int pos;
} lq_fwd_row;

int lq_scratch_init(lq_scratch *sc, const lq_model *m, int n_ctx);
void lq_scratch_free(lq_scratch *sc);

/* Runs T rows (1 <= T <= LQ_MAX_BATCH) through the network, appending each row's K/V to its
 * session's cache at rows[t].pos. Ids must be validated. out[t] (may be NULL, or out itself
 * NULL) receives row t's n_vocab logits; the lm_head runs only for rows that want them. */
void lq_forward(const lq_model *m, lq_scratch *sc, const int32_t *ids, const lq_fwd_row *rows,
                int T, float *const *out);

/* Session internals the forward pass needs. */
/* [n_ctx, kv_dim] of f32, or of f16 (uint16_t) when m->kv_f16 */
void *lq_session_kcache(lq_session *s, int layer);
void *lq_session_vcache(lq_session *s, int layer);
const float *lq_session_rope(const lq_session *s);  /* [n_ctx, n_rot/2, 2] (cos, sin) */

/* Copies the configuration fields (arch, shapes, rope, eps) into m->info; the loaders fill
 * the source-specific rest (types, parameter and byte counts). */
void lq_model_info_from_config(lq_model *m);

#endif
