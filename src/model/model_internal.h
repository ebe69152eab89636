/* Internal layout of a loaded model, shared by the loaders (src/model/model.c for GGUF files,
 * src/vindex/vx_model.c for vindex directories) and the engine (src/engine/). Not part of
 * the public API.
 *
 * Conventions: a weight matrix W maps a vector of `cols` inputs to `rows` outputs; GGUF
 * stores it as ne = [cols, rows] (ne0 = row length), row-major. */
#ifndef LQ_MODEL_INTERNAL_H
#define LQ_MODEL_INTERNAL_H

#include <pthread.h>
#include <sys/stat.h>
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

enum { LQ_WK_I2S = 1, LQ_WK_DENSE = 2, LQ_WK_Q8 = 3, LQ_WK_TQ = 4 };

/* One projection matrix, ready for a kernel. */
typedef struct lq_wmat {
    int kind;            /* LQ_WK_I2S / LQ_WK_TQ (packed ternary, in the mapping) or LQ_WK_DENSE */
    int src_type;        /* lq_ggml_type as stored in the file */
    int64_t rows, cols;  /* W: [rows, cols] */
    lq_i2s_mat i2s;      /* kind == LQ_WK_I2S: zero-copy view + per-tensor scale; when cols is
                            not a multiple of 128, an owned copy whose rows are padded with zero
                            trits (i2s.cols = cols rounded up to 128; the engine pads the input) */
    lq_tq_mat tq;        /* kind == LQ_WK_TQ: TQ1_0/TQ2_0 zero-copy view (int8 activations only:
                            the loader makes this kind only for BitLinear projections under
                            LQ_ACT_INT8, and decodes to f32 otherwise) */
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

/* The bounded lm_head (lq_model_opts.lm_head_mode, src/engine/forward.c "bounded head"): an
 * int8 copy of a dense lm_head, one f32 scale per row (lq_q8_mat), and per row two bounds
 * computed in double and rounded up: err[r] >= ||w_r - w~_r||_2 (w~_r = scale[r] * q_r, the
 * copy's row as a real vector) and norm[r] >= max(||w_r||_2, ||w~_r||_2). For any x and its
 * int16 rounding x~, |w_r.x - w~_r.x~| <= err[r] ||x|| + norm[r] ||x - x~|| (Cauchy-Schwarz),
 * which is what lets the decode score the vocabulary on the copy and compute exactly only
 * the rows that can still win. Counters are updated atomically by the forward pass (the
 * model is otherwise read-only) and read by lq_model_head_stats. */
typedef struct lq_lm_bound {
    lq_q8_mat q8;        /* data NULL: no bounded head */
    const float *err;    /* [rows] */
    const float *norm;   /* [rows] */
    void *map;           /* one anonymous mapping: int8 rows, scales, err, norm */
    size_t map_size;
    uint64_t n_tokens;   /* rows of logits produced by the bounded head */
    uint64_t n_exact;    /* lm_head rows computed exactly for them (all rows for a fallback) */
    uint64_t n_full;     /* of n_tokens: computed exactly over the whole vocabulary */
    uint64_t n_gen_rescored; /* rows rescored after the sampler's transforms (penalties, ...) */
    uint64_t n_gen_full;     /* steps the generator finished with the whole vocabulary */
    double max_uncovered;    /* largest relative mass bound left out by a sampling step */
    /* wanted: generation will use the copy (set at open, never changed). The copy is built
     * once, by the first generation (lq_model_head_wait) under mu, or at open when the
     * caller asked for the bounded head by name. ready is set (release) once every row of
     * q8/err/norm is written; the forward pass reads it (acquire) before using them. failed:
     * the default could not get the memory and generates on the exact head (atomic). */
    int wanted;
    int ready;
    int failed;
    double build_ms; /* how long the build took (set before ready) */
    pthread_mutex_t mu;
} lq_lm_bound;

static inline int lq_lmb_ready(const lq_lm_bound *b)
{
    return __atomic_load_n(&b->ready, __ATOMIC_ACQUIRE);
}

/* Owned allocations made at load (decoded tensors); freed with the model. */
typedef struct lq_owned {
    void **ptrs;
    int n, cap;
} lq_owned;

struct lq_model {
    lq_model_opts opts;         /* as opened (kernels: NULL; m->kern holds the set) */
    double t_open;              /* lq_now_ms() when the open began */
    lq_gguf *gguf;              /* kept open: every zero-copy view points into its mapping */
    lq_mapfile hp_copy;         /* opts.hugepages: the file copied into 2 MB pages */
    /* The copy is made in the background (model.c "background copy"): the model opens on
     * the file's mapping; a thread copies the file, checks it against the mapping and, with
     * wlock held for writing, moves every weight pointer into the copy. copy_state (atomic):
     * LQ_COPY_NONE, _RUNNING, _DONE or _FAILED. While it runs, forward passes hold wlock for
     * reading (lq_model_weights_enter). */
    int copy_state;
    int copy_cancel;            /* atomic: set at close, the copier stops */
    pthread_rwlock_t wlock;
    pthread_t copier;
    int copier_started;
    char *copy_path;
    struct stat copy_st;        /* the file when it was mapped */
    lq_tokenizer *tok;          /* NULL when the GGUF carries no tokenizer */
    lq_pool *pool;
    const lq_kernels *kern;
    lq_model_info info;
    char arch_name[64];
    char name[256];

    int arch;                   /* lq_arch */
    int act_mode;               /* lq_act_mode; dense llama ignores it (no BitLinear) */
    int bitlinear;              /* projections are BitLinear (activations int8 per token under
                                   LQ_ACT_INT8): every BitNet arch, and a llama-arch file whose
                                   projections are I2_S (HF1BitLLM, Falcon3-1.58bit, Falcon-E);
                                   set by lq_model_finish */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot, n_vocab, n_ctx_train;
    int q_dim, kv_dim;          /* n_head*head_dim, n_head_kv*head_dim */
    int kv_type;                /* lq_kv_type of the sessions' K and V */
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
    /* values callers computed from the weights alone (model/memo.c), under memo_mu */
    pthread_mutex_t memo_mu;
    struct lq_memo_entry *memo;
    size_t memo_bytes;          /* what the values hold, as their callers counted it */
    lq_lm_bound lmb;            /* the bounded lm_head's compact copy (q8.data NULL: off) */
    void *lm_q8_map;            /* the q8 lm_head's anonymous mapping (int8 rows, then scales) */
    size_t lm_q8_map_size;

    /* Set by a loader other than the GGUF one (the vindex's, src/vindex/vx_model.c): src
     * holds that loader's mappings and buffers, freed by src_free at close; the tokenizer
     * then belongs to it (tok_borrowed). gguf is NULL for such a model. */
    void *src;
    void (*src_free)(void *src);
    int tok_borrowed;

    /* lq_model_opts.ffn_url: every layer's FFN runs on that server (POST /v1/walk-ffn,
     * src/model/ffn_remote.c); NULL = local. Opened by lq_model_finish, closed at close. */
    struct lq_ffn_remote *ffn_remote;
};

/* ---- the remote FFN client (src/model/ffn_remote.c) ---- */
typedef struct lq_ffn_remote lq_ffn_remote;
/* Connects to a larql serve (ours or LARQL's) at url, or to each server of LARQL's shard map
 * "A-B=URL,C-D=URL", reads GET /v1/stats and checks that its hidden_size and layer count are
 * n_embd and n_layer, and that every layer has a server. timeout_ms bounds every request. */
int lq_ffn_remote_open(const char *url, int timeout_ms, int n_layer, int n_embd, lq_ffn_remote **out,
                       lq_err *err);
/* Layer's FFN of T normed rows x [T, D] into out [T, D]: one POST /v1/walk-ffn in LARQL's
 * binary wire format. Safe from several threads (a pool of keep-alive connections). */
int lq_ffn_remote_layer(lq_ffn_remote *r, int layer, const float *x, int T, int D, float *out, lq_err *err);
const char *lq_ffn_remote_url(const lq_ffn_remote *r); /* the URL or shard map as given */
void lq_ffn_remote_close(lq_ffn_remote *r);

/* ---- the assembly step both loaders share (src/model/model.c) ----
 *
 * A loader (the GGUF one in src/model, the vindex one in src/vindex/vx_model.c) calls
 * lq_model_new, fills the configuration fields, lq_model_check_config, the tensors and the
 * source-specific info fields (tied_embeddings, embd_type, proj_type, n_params,
 * weight_bytes, weights_copied), then lq_model_finish. On error it calls lq_model_close. */

/* Validates opts (threads, act_mode, kernel set) and allocates an empty model. */
enum { LQ_COPY_NONE = 0, LQ_COPY_RUNNING = 1, LQ_COPY_DONE = 2, LQ_COPY_FAILED = 3 };

/* Around every read of the weights by a forward pass: enter returns whether it took the
 * read lock (only while a background copy runs), leave releases it. Not nested. */
int lq_model_weights_enter(const lq_model *m);
void lq_model_weights_leave(const lq_model *m, int held);

int lq_model_new(const lq_model_opts *opts, lq_model **out, lq_err *err);
/* The configuration against the LQ_MODEL_MAX_* caps and its own consistency (heads vs kv
 * heads, even head_dim and rotated dims, positive eps and theta): run before anything is
 * allocated by these sizes. */
int lq_model_check_config(const lq_model *m, lq_err *err);
/* Fills the configuration part of info and bytes_per_token, creates the thread pool, builds
 * the q8 lm_head when asked, records the load time. */
int lq_model_finish(lq_model *m, lq_err *err);

#endif
