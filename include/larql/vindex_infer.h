/* Inference over a vindex (LARQL's POST /v1/infer: walk, dense, compare), the KNN store,
 * explain-infer and running a vindex's weights as a model. Part of larql/vindex.h. */
#ifndef LARQL_VINDEX_INFER_H
#define LARQL_VINDEX_INFER_H

#include "larql/vindex.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- inference (LARQL's POST /v1/infer) ----
 *
 * The model comes from lq_model_open (include/larql/model.h) on a vindex directory or a GGUF.
 * Modes: "walk" = the full forward pass with the last position's residual captured after
 * every layer, then the KNN-store override (layers ascending; the store's best entry by
 * cosine at that layer; the first cosine > 0.75 puts its token first with probability 1.0,
 * followed by the model's top-(top-1)); an empty store changes nothing, so walk then
 * equals dense. "dense" = the forward pass alone (reported as "mode":"bitnet" for BitNet
 * models, "dense" for llama). "compare" = both, timed separately. Models without a gate index
 * (dense-only vindex, or a GGUF) turn walk into dense and compare into dense only. Any other
 * mode string gives a body with only prompt and latency_ms (LARQL answers 200 so); front ends
 * that want to reject it check the mode themselves. Prompts are encoded with special tokens
 * (BOS as the tokenizer says); predictions are the softmax over the whole vocabulary
 * (double), top `top` by probability, token = the token's decoded text (" Paris"; a lone
 * byte token's invalid UTF-8 as U+FFFD). Errors: empty prompt / negative top -> LQ_EINVAL;
 * a prompt longer than the context -> LQ_ECONTEXT. Without params.session each call uses its
 * own session: calls may run concurrently on one model. The CLI (larql infer --json), POST
 * /v1/infer and the WebSocket infer all print lq_infer_json's body. */
#define LQ_KNN_COSINE_THRESHOLD 0.75f

typedef struct lq_knn_store lq_knn_store;
int lq_knn_store_create(int hidden, lq_knn_store **out, lq_err *err);
void lq_knn_store_free(lq_knn_store *s); /* NULL-safe */
/* key: [hidden] residual (L2-normalised on insert); target_token: the text put first.
 * Entity and relation "", confidence 1.0. */
int lq_knn_store_add(lq_knn_store *s, int layer, const float *key, int32_t target_id,
                     const char *target_token, lq_err *err);
size_t lq_knn_store_count(const lq_knn_store *s);
int lq_knn_store_hidden(const lq_knn_store *s);

/* One entry with LARQL's metadata. From lq_knn_store_get the pointers point into the store
 * (valid until it changes) and key is unit length. */
typedef struct lq_knn_entry {
    int layer;
    const float *key;           /* [hidden] */
    int32_t target_id;
    const char *target_token, *entity, *relation; /* entity/relation NULL -> "" on add */
    float confidence;
} lq_knn_entry;
int lq_knn_store_add_entry(lq_knn_store *s, const lq_knn_entry *e, lq_err *err);
/* Entry i (insertion order); 0 if i is out of range. */
int lq_knn_store_get(const lq_knn_store *s, size_t i, lq_knn_entry *e);

/* knn_store.bin in LARQL's layout (magic "LKNN", version 1, f16 keys, u32 target ids, JSON
 * metadata per entry; src/vindex/knn_store.c). Save writes path.partial and renames it over
 * path. Load checks every count and length against the file and that the key dim equals
 * hidden (LQ_EFORMAT otherwise); keys are re-normalised after the f16 round trip. */
int lq_knn_store_save(const lq_knn_store *s, const char *path, lq_err *err);
int lq_knn_store_load(const char *path, int hidden, lq_knn_store **out, lq_err *err);

/* LQL INSERT INTO EDGES (entity, relation, target) ... MODE KNN with model weights: key =
 * the last token's residual at the install layer for the prompt "The {relation, '-'/'_' as
 * spaces} of {entity} is"; target_id = first token of " " + target; target_token = target. */
typedef struct lq_knn_insert_params {
    const char *entity, *relation, *target; /* required, non-empty */
    int layer;                  /* -1 (default): the knowledge band's last layer - 1 (LARQL);
                                   larger than the model: the last layer */
    float confidence;           /* default 1.0 */
} lq_knn_insert_params;
void lq_knn_insert_params_init(lq_knn_insert_params *p);
struct lq_model;
int lq_knn_insert(struct lq_model *m, lq_knn_store *s, const lq_knn_insert_params *p, lq_err *err);

struct lq_model;
typedef struct lq_infer_params {
    const char *prompt;         /* required, non-empty */
    int top;                    /* default 5 */
    const char *mode;           /* default "walk" */
    const lq_knn_store *knn;    /* NULL = the model's own store (lq_knn_store_of_model) */
    struct lq_edit_set *edits;  /* walk mode's forward-pass edits (include/larql/patch.h: an
                                   overlay's KNN entries and composed features); NULL = the
                                   KNN entries of knn */
    struct lq_session *session; /* NULL = a session of the prompt's length per pass; else this
                                   one (reset before and after each pass; its n_ctx bounds the
                                   prompt): the server's bounded pool */
    int route;                  /* walk mode's KNN override (LARQL's KnnRouteMode, LQL's INFER
                                   ... ROUTE): LQ_ROUTE_LEGACY (default: the first layer whose
                                   best entry has cosine > 0.75), LQ_ROUTE_VERIFY (layers that
                                   hold entries highest first; of each layer's route_topk best
                                   entries above 0.75 the first whose entity the prompt names,
                                   case-insensitively; else none), LQ_ROUTE_FALLBACK (VERIFY,
                                   else the best entry above 0.75 at the highest layer) */
    int route_topk;             /* default 5 */
} lq_infer_params;
enum { LQ_ROUTE_LEGACY = 0, LQ_ROUTE_VERIFY = 1, LQ_ROUTE_FALLBACK = 2 };
void lq_infer_params_init(lq_infer_params *p);

typedef struct lq_prediction {
    char *token;                /* decoded text of the token, valid UTF-8 */
    int32_t id;                 /* -1 for a KNN override entry */
    double probability;         /* unrounded */
} lq_prediction;

typedef struct lq_infer_result {
    int has_walk, has_dense, compare, coerced, dense_only, bitnet;
    lq_prediction *walk, *dense;
    size_t n_walk, n_dense;
    double walk_ms, dense_ms, latency_ms;
    int knn_fired, knn_layer;
    float knn_cosine;
    char *knn_token;
    lq_prediction model_top1;   /* the model's own first prediction when the override fired */
} lq_infer_result;

int lq_infer(struct lq_model *m, const lq_infer_params *p, lq_infer_result *r, lq_err *err);
/* The KNN store saved in a vindex directory (knn_store.bin, loaded and validated by
 * lq_vindex_open; a malformed one fails the open), or NULL. */
const lq_knn_store *lq_vindex_knn_store(const lq_vindex *v);
/* That store of the vindex the model was opened from, or NULL (none, or a GGUF model). */
const lq_knn_store *lq_knn_store_of_model(const struct lq_model *m);
/* TRACE: the last position's residual through the layers (LARQL's trace): per layer (-1 =
 * the embedding) the top-1 token of the residual through the output head with its
 * probability, the residual's norm, and the norms of the layer's attention and FFN
 * contributions; with answer (its token = the last of " answer"), that token's rank and
 * probability and the logit each contribution gives it. edits (may be NULL): composed
 * features act in the pass, as in INFER. */
typedef struct lq_trace_layer {
    int layer;
    int32_t top1_id;
    double top1_prob, resid_norm, attn_norm, ffn_norm;
    int rank;                    /* with an answer */
    double prob, attn_logit, ffn_logit;
} lq_trace_layer;
typedef struct lq_trace_result {
    size_t n_tokens;
    int n_layers;
    int32_t answer_id;           /* -1 without an answer */
    lq_trace_layer *layers;      /* n = n_layers + 1, layer -1 first */
    size_t n;
    double ms;
} lq_trace_result;
struct lq_edit_set;
int lq_infer_trace(struct lq_model *m, const char *prompt, const char *answer, struct lq_edit_set *edits,
                   lq_trace_result *r, lq_err *err);
void lq_trace_result_free(lq_trace_result *r);

/* The last position's residual after every layer for prompt (encoded as lq_infer does):
 * resid [n_layer, n_embd]. The key an INSERT ... MODE KNN stores. */
int lq_infer_residuals(struct lq_model *m, const char *prompt, float *resid, lq_err *err);
void lq_infer_result_free(lq_infer_result *r);
/* The /v1/infer body (probabilities to 4 decimals, times to 0.1 ms):
 *   walk:    {"prompt","predictions":[{"token","probability"}],"mode":"walk"[,"knn_override":
 *             {"token","cosine","layer","source":"knn_override","stage":"post_logits",
 *              "materialized":false,"model_top1":{"token","probability"}}],"latency_ms"}
 *   dense:   {"prompt","predictions":[...],"mode":"bitnet"|"dense","latency_ms"}
 *   compare: {"prompt","walk":[...],"walk_ms","dense":[...],"dense_ms"[,"knn_override"],"latency_ms"}
 *            (dense-only: {"prompt","dense":[...],"dense_ms","latency_ms"})
 *   other mode: {"prompt","latency_ms"} */
int lq_infer_json(struct lq_model *m, const lq_infer_params *p, char **json_out, lq_err *err);
/* EXPLAIN INFER (LARQL's POST /v1/explain-infer): the walk-mode predictions (KNN override
 * included) and, per layer of the band, the per_layer features that layer's input residual
 * (the previous layer's output; the last token's embedding at layer 0) fires most, with
 * their metadata as view shows it.
 * {"prompt","predictions":[{"token","probability"}],"trace":[{"layer","features":[{"feature",
 *  "gate_score","top_token","top_tokens":[3],"relation":str|null}]}][,"knn_override"],
 *  "latency_ms"}. A model without a gate index -> LQ_EUNSUPPORTED. */
typedef struct lq_explain_params {
    const char *prompt;         /* required */
    int top;                    /* predictions, default 5 */
    int per_layer;              /* features per layer, default 3 */
    const char *band;           /* default "all" */
    int relations_only;         /* only features with a relation label */
    const lq_knn_store *knn;    /* NULL = the model's own store */
    struct lq_edit_set *edits;  /* as lq_infer_params.edits */
    struct lq_session *session; /* NULL = its own */
    const lq_vindex *view;      /* the vindex (or an overlay's view) the trace reads; NULL = the
                                   model's */
} lq_explain_params;
void lq_explain_params_init(lq_explain_params *p);
int lq_explain_infer_json(struct lq_model *m, const lq_explain_params *p, char **json_out, lq_err *err);

/* ---- running a vindex's weights (src/vindex/vx_model.c) ---- */

struct lq_model_opts;
/* A model from a BitNet inference vindex (--keep-quant --level inference|all, or
 * --dense-only) or a llama inference vindex: embeddings, norms, lm_head and projections come
 * from its files (the kernel-layout .i2s files are repacked once into the engine's I2_S
 * layout, memory = their packed size), the tokenizer from its tokenizer.json. An f32 vindex
 * gives the same logits as its GGUF. Browse-only vindexes -> LQ_EUNSUPPORTED.
 * lq_vindex_model_open borrows v: it must stay open until lq_model_close (the server serves
 * browse queries and inference from one open). lq_vindex_model_open_dir opens dir itself;
 * that vindex is closed with the model. */
int lq_vindex_model_open(const lq_vindex *v, const struct lq_model_opts *opts,
                         struct lq_model **out, lq_err *err);
int lq_vindex_model_open_dir(const char *dir, const struct lq_model_opts *opts,
                             struct lq_model **out, lq_err *err);
/* The vindex a model was opened from, else NULL (a GGUF model). */
const lq_vindex *lq_vindex_of_model(const struct lq_model *m);

#ifdef __cplusplus
}
#endif
#endif
