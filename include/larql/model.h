/* Models and sessions: the inference engine's public API.
 *
 * A model is opened once, immutable afterwards, and shared read-only by every session and
 * thread (weights stay in the read-only file mapping). A session holds per-request state:
 * KV cache bounded by its context length, scratch buffers, position. Nothing allocates in
 * the token loop.
 *
 * Architectures: "bitnet-b1.58" (microsoft 2B-4T: relu² FFN), "bitnet" (1bitLLM family:
 * SiLU-gated FFN), "llama". The GGUF key prefix is the architecture string. */
#ifndef LARQL_MODEL_H
#define LARQL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"
#include "larql/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_model lq_model;
typedef struct lq_session lq_session;

typedef enum lq_arch {
    LQ_ARCH_BITNET_B158 = 1, /* relu²(gate) * up */
    LQ_ARCH_BITNET = 2,      /* silu(gate) * up, same block otherwise */
    LQ_ARCH_LLAMA = 3,
} lq_arch;

typedef enum lq_act_mode {
    LQ_ACT_INT8 = 0, /* per-token absmax int8 activations into BitLinear (W1.58A8, default) */
    LQ_ACT_F32 = 1,  /* f32 activations (LARQL's numerics) */
} lq_act_mode;

typedef enum lq_kv_type { LQ_KV_F32 = 0, LQ_KV_F16 = 1, LQ_KV_Q8 = 2 } lq_kv_type;

/* "f32", "f16", "q8" */
const char *lq_kv_type_name(int kv_type);

typedef enum lq_lm_head_mode {
    LQ_LM_HEAD_AUTO = 0,
    LQ_LM_HEAD_EXACT = 1,
    LQ_LM_HEAD_BOUNDED = 2,
} lq_lm_head_mode;

typedef struct lq_model_opts {
    int n_threads;    /* 0 = number of cores */
    int act_mode;     /* lq_act_mode */
    const char *kernels; /* NULL = best for this CPU; "scalar", "avx2", "avx512" */
    int lm_head_q8;   /* 1: build at load an int8 copy of a dense lm_head with one f32 scale per
                         row (half the bytes of f16; small logit error) and use it for logits */
    int lm_head_mode; /* lq_lm_head_mode. Bounded: an int8 copy of a dense lm_head with a per-row
                         error bound; generation scores the vocabulary on it and computes exactly
                         only the rows that can still be chosen, so its tokens are the exact
                         model's (greedy and top-k bit for bit). Every other logits call stays
                         exact. The copy is built before the open returns. LQ_LM_HEAD_AUTO (0)
                         is bounded unless LQ_LM_HEAD=exact in the environment;
                         LQ_LM_HEAD_EXACT: no copy. Ignored
                         with lm_head_q8 or a non-dense lm_head. */
    int kv_type;      /* lq_kv_type: how sessions keep their KV cache. LQ_KV_F32 (0, default),
                         LQ_KV_F16 (half the bytes; small logit error), LQ_KV_Q8 (int8 in
                         blocks of 32 with an f32 scale: 1.125 bytes a value, for long
                         contexts; needs a head dimension that is a multiple of 32) */
    int hugepages;    /* How weights are held. 1: read into anonymous memory backed by
                         2 MB pages (decode streams ~1.7x faster than from 4 KB file pages;
                         RSS is private, the file is read once at load). -1: mmap the file
                         read-only (pages shared with other processes). 0 = auto: 1 for files of
                         64 MiB and more, else -1; the huge-page copy falls back to mmap if it
                         cannot be allocated. For a vindex the same choice covers the
                         embeddings, lm_head.bin and the repacked ternary projections (auto:
                         by the size of embeddings.bin x 2). LQ_HUGEPAGES=0|1 in the
                         environment overrides. */
    const char *ffn_url; /* NULL = local. "http://host:port": every layer's feed-forward runs on
                            that server (`larql serve --ffn-only`, or LARQL's server) through
                            POST /v1/walk-ffn, attention here (LARQL's remote FFN). Or LARQL's
                            shard map "0-14=http://a:9000,15-29=http://b:9000": each inclusive
                            layer range on its own server; every layer must be covered. The open
                            fails when the server is down or its hidden size or layer count
                            differ; a failed call later is an LQ_EIO from the evaluation. */
    int ffn_timeout_ms;  /* each remote FFN request's deadline; 0 = 60000 (LARQL's) */
} lq_model_opts;

typedef struct lq_model_info {
    const char *arch_name; /* the GGUF general.architecture string */
    int arch;              /* lq_arch */
    const char *name;      /* general.name or "" */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    double rope_theta, norm_eps;
    int tied_embeddings;   /* lm_head is token_embd */
    int embd_type, lm_head_type, proj_type; /* lq_ggml_type of token_embd, lm_head, q_proj */
    uint64_t n_params;
    uint64_t weight_bytes;       /* bytes of tensor data mapped */
    int weights_copied;          /* 1: held in private 2 MB-page copies (lq_model_opts.hugepages;
                                    a GGUF's copy is made in the background, see
                                    lq_model_weights_copied), 0: read-only shared mappings */
    uint64_t bytes_per_token;    /* weight bytes read per decoded token */
    const char *kernels;         /* kernel set in use ("avx512", ...) */
    int n_threads;
    double load_ms;
    int lm_head_q8;              /* the lm_head in use is the int8 per-row copy */
    int kv_type;                 /* lq_kv_type of the sessions' KV cache */
    int lm_head_bounded;         /* generation uses the bounded lm_head (lm_head_mode; the
                                    default builds its copy on the first generation) */
    uint64_t lm_bound_bytes;     /* bytes of its compact copy read per bounded token */
    uint64_t repack_bytes;       /* bytes allocated for repacked weights (q8 lm_head, the
                                    bounded head's copy even before it is built) */
    const char *ffn_url;         /* the remote FFN server (lq_model_opts.ffn_url), or NULL */
    double repack_ms;            /* time spent building them (part of load_ms) */
    /* Which family's block the forward pass runs (what it assumed from the architecture, the
     * projection type and the pre-tokenizer), e.g. "llama+I2_S (HF1BitLLM Llama3-8B-1.58
     * layout): SiLU, no sub-norms, untied output, int8 activations"; never NULL once open. */
    const char *family;
    /* I2_S byte order assumed for ternary projections ("" when there are none): a GGUF cannot
     * say whether bitnet.cpp wrote it on x86 (128-element blocks) or ARM (64), so this names
     * the one the kernels read. */
    const char *i2s_layout;
    int bitlinear;               /* projections run as BitLinear (int8 activations per token
                                    under LQ_ACT_INT8): BitNet archs and llama files with I2_S */
} lq_model_info;

/* path: a GGUF file, or a vindex directory (holding index.json) built from a BitNet GGUF
 * with `larql convert gguf-to-vindex --keep-quant --level inference|all` or --dense-only
 * (see lq_vindex_model_open in larql/vindex.h). Which of the two it is is decided here,
 * above both loaders (src/open/open.c); a directory's vindex is opened once and owned by
 * the model (lq_vindex_of_model). lq_model_gguf() returns NULL for a vindex model. */
int lq_model_open(const char *path, const lq_model_opts *opts, lq_model **out, lq_err *err);
/* A GGUF file only (src/model/model.c). */
int lq_model_open_gguf(const char *path, const lq_model_opts *opts, lq_model **out, lq_err *err);
void lq_model_close(lq_model *m);
/* A GGUF model whose weights are to be held in a private 2 MB-page copy (opts.hugepages)
 * opens on the file's read-only mapping and answers at once; a background thread copies the
 * file, checks it equals the mapping, and moves the forward pass to the copy (the same bytes,
 * read faster) between two forward passes. Returns 1 once the copy is in use, 0 while it is
 * being made or when there is none (a mapped model, or the copy failed: the mapping stays);
 * wait = 1 first blocks until the copy is in use or has failed. Not thread-safe with wait. */
int lq_model_weights_copied(lq_model *m, int wait);

const lq_model_info *lq_model_get_info(const lq_model *m);
const lq_tokenizer *lq_model_tokenizer(const lq_model *m);
/* The GGUF the model was loaded from (metadata access: chat template, ...); NULL for a model
 * opened from a vindex. Not for computing: the functions below answer for every model kind. */
const struct lq_gguf *lq_model_gguf(const lq_model *m);

/* What the bounded lm_head has done since load (all zero when it is off). rows_exact counts
 * lm_head rows computed exactly (every row for a token that fell back to the full head), so
 * rows_exact / tokens is the average per token. */
typedef struct lq_head_stats {
    int enabled;
    int ready;              /* the copy is built (a background build may still run) */
    uint64_t tokens;        /* rows of logits produced bounded */
    uint64_t rows_exact;    /* lm_head rows computed exactly for them */
    uint64_t full;          /* tokens computed over the whole vocabulary (fallback) */
    uint64_t gen_rescored;  /* rows rescored after penalties / bias / grammar moved the bounds */
    uint64_t gen_full;      /* generation steps that fell back to the whole vocabulary */
    double max_uncovered;   /* sampling without top-k: the largest bound on the relative
                               probability mass of rows left out (<= 1e-6 by construction) */
    uint64_t copy_bytes;    /* compact copy read per token (int8 rows + scales) */
    uint64_t exact_bytes;   /* the exact lm_head, for comparison */
} lq_head_stats;
void lq_model_head_stats(const lq_model *m, lq_head_stats *out);
/* 1 when the model generates with the bounded lm_head and its copy is ready, 0 when it has
 * none. The default mode builds the copy on the first generation; this call builds it now if
 * it is not built yet (once, whoever calls first; safe from several threads), so that a
 * benchmark or server can take that cost before its first request. --lm-head bounded builds
 * it at open. */
int lq_model_head_wait(lq_model *m);

/* Token embedding rows: out [n, n_embd] receives row ids[i] of the model's embedding as f32
 * (from a GGUF's token_embd or a vindex's embeddings.bin). Ids outside the vocabulary ->
 * LQ_ERANGE (nothing written). */
int lq_model_embed(const lq_model *m, const int32_t *ids, size_t n, float *out, lq_err *err);
/* The output head on n hidden states h [n, n_embd] (residual streams after the last layer):
 * final RMSNorm, then the lm_head through the decode kernels as the model holds it (f16,
 * f32, the q8 copy with lq_model_opts.lm_head_q8) into logits [n, n_vocab] — exactly what
 * the forward pass computes after its last layer. Safe from several threads at once. */
int lq_model_logits_from_hidden(lq_model *m, const float *h, size_t n, float *logits, lq_err *err);
/* One layer's feed-forward on n rows x [n, n_embd] that already went through that layer's
 * ffn_norm, into out [n, n_embd] before the residual add (relu^2 or SiLU gate . up, sub-norm,
 * down): what the forward pass adds at that layer, always computed here even when the model
 * itself runs with a remote FFN. The server side of POST /v1/walk-ffn (LARQL's full_output).
 * layer outside 0..n_layer-1 -> LQ_ERANGE. Safe from several threads at once. */
int lq_model_ffn(lq_model *m, int layer, const float *x, size_t n, float *out, lq_err *err);
/* Writes the model as a GGUF file at path (LQL's COMPILE ... INTO MODEL): a model opened
 * from a GGUF is copied as stored; one opened from a vindex is written from the tensors the
 * engine holds (I2_S with its scale, f32/f16 embedding and head, f32 norms), the architecture
 * keys the GGUF loader reads and the tokenizer converted from tokenizer_dir's tokenizer.json.
 * extra_keys[i] = extra_values[i] are added as string metadata (replacing a key the source
 * holds). The result opens to the same logits. A model held with the q8 lm_head or a remote
 * FFN -> LQ_EUNSUPPORTED. */
typedef struct lq_model_save_opts {
    const char *path;
    const char *tokenizer_dir;  /* a vindex-opened model: the directory with tokenizer.json */
    const char *const *extra_keys, *const *extra_values;
    size_t n_extra;
} lq_model_save_opts;
int lq_model_save_gguf(const lq_model *m, const lq_model_save_opts *o, lq_err *err);
/* The output head's rows for ids, with the final RMSNorm's weight folded in: out [n, n_embd],
 * row i = norm_weight * lm_head[ids[i]], so that logit j of a hidden state h is out_j . h /
 * rms(h) (what an edit needs to know which way raises a token). Ids outside the vocabulary ->
 * LQ_ERANGE. */
int lq_model_output_rows(const lq_model *m, const int32_t *ids, size_t n, float *out, lq_err *err);
/* The final RMSNorm's weight [n_embd] (owned by the model). */
const float *lq_model_output_norm(const lq_model *m);
/* Bytes of KV cache a session of n_ctx positions holds (f32 or f16 as the model was opened). */
size_t lq_model_kv_bytes(const lq_model *m, int n_ctx);

/* Edits that act inside the forward pass: a vindex overlay's composed features and its KNN
 * override (src/vindex/edit_set.c builds them). The engine calls them and knows nothing of what
 * they do. after_layer: after layer `layer`'s FFN add, on the residual x [n_embd] of the row
 * at position pos (logits: whether that row's logits are computed in this pass); it may
 * change x, and every later layer, the KV cache and the logits see the change. on_logits
 * (may be NULL): on that row's logits [n_vocab] before anyone reads them; it may change them.
 * release (may be NULL): frees ctx; called by the scheduler when a request that carried the
 * hook is freed (lq_generate_params.hook), never by a session. */
typedef struct lq_resid_hook {
    void (*after_layer)(void *ctx, int layer, int pos, int logits, float *x, int n_embd);
    void (*on_logits)(void *ctx, int pos, float *logits, int n_vocab);
    void (*release)(void *ctx);
    void *ctx;
    /* (may be NULL) the token id of the row at position pos, before its first layer */
    void (*on_token)(void *ctx, int pos, int32_t id);
} lq_resid_hook;

/* Sessions. n_ctx = 0 uses min(model's training context, 4096). */
int lq_session_create(lq_model *m, int n_ctx, lq_session **out, lq_err *err);
void lq_session_free(lq_session *s);
void lq_session_reset(lq_session *s);  /* forget the KV cache: position back to 0 */
/* Keeps the first n positions of the KV cache and forgets the rest (a prompt prefix shared
 * by several continuations is computed once). n > the current position: LQ_ERANGE. */
int lq_session_truncate(lq_session *s, int n, lq_err *err);
/* dst's KV becomes the first n positions of src's (dst at position n): the same numbers a
 * prefill of those tokens in dst would compute, without the forward passes. Both sessions of
 * one model (else LQ_EINVAL); n <= src's position and dst's context (else LQ_ERANGE). */
int lq_session_copy_prefix(lq_session *dst, const lq_session *src, int n, lq_err *err);
/* The KV of a session's first n positions as flat bytes (a prompt's state saved to disk):
 * lq_session_kv_bytes(s, n) of them (layer by layer, K then V, KV head by head, n rows each).
 * n outside 0..position: LQ_ERANGE; size too small: LQ_EINVAL. */
size_t lq_session_kv_bytes(const lq_session *s, int n);
int lq_session_kv_get(const lq_session *s, int n, void *buf, size_t size, lq_err *err);
/* The reverse: s's KV becomes those n positions (s at position n). n outside 0..n_ctx:
 * LQ_ERANGE; size not lq_session_kv_bytes(s, n): LQ_EINVAL. */
int lq_session_kv_set(lq_session *s, int n, const void *buf, size_t size, lq_err *err);
int lq_session_pos(const lq_session *s);
int lq_session_n_ctx(const lq_session *s);
lq_model *lq_session_model(const lq_session *s);
/* Every later eval of the session runs h (NULL: none). h is borrowed: it must stay valid
 * while set. lq_session_reset does not clear it. */
void lq_session_set_hook(lq_session *s, const lq_resid_hook *h);
const lq_resid_hook *lq_session_hook(const lq_session *s);

/* Run n tokens at the current position (prefill, batched over positions). logits: NULL, or
 * n_vocab floats receiving the next-token logits after the last id; all_logits: NULL, or
 * n * n_vocab floats receiving the logits after every position. Token ids out of range ->
 * LQ_ERANGE; pos + n > n_ctx -> LQ_ECONTEXT (nothing is changed). */
int lq_session_eval(lq_session *s, const int32_t *ids, size_t n, float *logits,
                    float *all_logits, lq_err *err);

/* lq_session_eval that also captures the residual stream of the last position after every
 * layer's FFN add: resid [n_layer, n_embd] (required). The computation is unchanged. The
 * key LQL's INSERT ... MODE KNN stores and the vindex walk mode's KNN override reads. */
int lq_session_eval_capture(lq_session *s, const int32_t *ids, size_t n, float *logits,
                            float *resid, lq_err *err);

/* lq_session_eval_capture that also captures the last position's residual after each
 * layer's attention add: resid_attn [n_layer, n_embd]. With the embedding row, the two give
 * each layer's attention and FFN contributions (LQL's TRACE). */
int lq_session_eval_trace(lq_session *s, const int32_t *ids, size_t n, float *logits, float *resid_attn,
                          float *resid, lq_err *err);

/* One decode step (n = 1): the same as lq_session_eval(s, &id, 1, logits, NULL, err). */
int lq_session_decode(lq_session *s, int32_t id, float *logits, lq_err *err);

/* One decode step for B sessions of the same model at once (the server's batching): ids[b]
 * is fed to ss[b] at its own position, and every weight is read once for the whole batch
 * (attention stays per session). logits: NULL, or B pointers (each NULL or n_vocab floats).
 * Equivalent to B calls of lq_session_decode. All checks (NULL/duplicate sessions, another
 * model, ids out of range, a full context) happen before anything changes. The sessions
 * must not be used by other threads during the call. */
int lq_session_decode_batch(lq_session *const *ss, const int32_t *ids, int B,
                            float *const *logits, lq_err *err);

/* The general batched step (the server's continuous batching with chunked prefill): session
 * ss[b] is fed counts[b] >= 1 ids, taken in order from ids (session 0's first, then session
 * 1's, ...), at its own positions; one forward pass reads every weight once for all rows
 * (up to 64 rows per pass). logits: NULL, or B pointers, each NULL or n_vocab floats that
 * receive the logits after that session's last id. counts NULL means one id each (=
 * lq_session_decode_batch). A session's results do not depend on the other rows in the
 * batch. Checks as lq_session_decode_batch (also counts < 1); nothing changes on error. */
int lq_session_eval_batch(lq_session *const *ss, const int32_t *ids, const int *counts, int B,
                          float *const *logits, lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
