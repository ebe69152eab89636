/* Vindex: LARQL's directory format for a model, and the knowledge queries over it.
 *
 * A vindex directory holds (all binaries headerless little-endian arrays unless noted):
 *   index.json           config (LARQL's VindexConfig), pretty JSON; unknown fields are kept
 *   gate_vectors.bin     per layer the FFN gate rows [num_features, hidden], f32 or f16
 *   embeddings.bin       [vocab, hidden], f32 or f16 (dtype detected from the file size)
 *   down_meta.bin        per feature the top tokens its down projection writes (see below)
 *   tokenizer.json       HuggingFace tokenizer
 *   norms.bin, lm_head.bin, weight_manifest.json       (level inference/all, dense-only)
 *   attn_weights.bin, up_weights.bin, down_weights.bin (level inference/all, not dense-only:
 *                        dense projections in the dtype; unit-scale trits for BitNet)
 *   bitnet/<key>.i2s, bitnet/scales.f32, bitnet_layout.json   (--keep-quant on BitNet)
 *   feature_labels.json  optional probe labels {"L{layer}_F{feature}": "relation"}
 *
 * Opening maps every file read-only; gate rows are scored in place (f16 rows are never
 * decoded into a second copy). A vindex is immutable after open and every query function is
 * safe to call from several threads at once.
 *
 * Query results come two ways: as C structs (lq_vindex_<query>) and as the JSON body that
 * LARQL's HTTP server returns for the same request (lq_vindex_<query>_json). The CLI's
 * --json output and the HTTP server both call the _json functions, so their bodies are
 * byte-identical (apart from latency_ms). Float fields follow LARQL's rounding (gate scores
 * to 0.1, probabilities to 4 decimals, latency to 0.1 ms) and are printed in the shortest
 * form that reads back to the same value ("5.0", "12.3"), as Rust's serde_json does.
 *
 * Status codes (include/larql/status.h): LQ_EINVAL for bad request values (empty entity,
 * unknown band, negative limit, unknown mode) — an HTTP front end maps it to 400;
 * LQ_ERANGE for a layer outside the model (400); LQ_ENOTFOUND for a missing file (404 or
 * 500); LQ_EFORMAT for a malformed vindex; LQ_EUNSUPPORTED for a query the vindex cannot
 * answer (e.g. walk on a dense-only vindex, infer without model weights) — 503/501. */
#ifndef LARQL_VINDEX_H
#define LARQL_VINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "larql/status.h"
#include "larql/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_vindex lq_vindex;

/* Caps on values read from index.json / down_meta.bin (a hostile vindex cannot make us
 * allocate or loop beyond these). */
#define LQ_VINDEX_MAX_LAYERS 4096
#define LQ_VINDEX_MAX_HIDDEN (1 << 20)
#define LQ_VINDEX_MAX_FEATURES (1 << 24)
#define LQ_VINDEX_MAX_VOCAB (1 << 24)
#define LQ_VINDEX_MAX_TOPK 1024
#define LQ_VINDEX_MAX_QUERY_K (1 << 20)

typedef enum lq_vindex_dtype { LQ_VDT_F32 = 0, LQ_VDT_F16 = 1 } lq_vindex_dtype;

typedef enum lq_vindex_level {
    LQ_VLEVEL_BROWSE = 0,
    LQ_VLEVEL_ATTENTION = 1,
    LQ_VLEVEL_INFERENCE = 2,
    LQ_VLEVEL_ALL = 3,
} lq_vindex_level;

typedef struct lq_vindex_band {
    int start, end; /* inclusive layer range */
} lq_vindex_band;

typedef struct lq_vindex_info {
    const char *dir;
    const char *model;         /* index.json "model" (full name) */
    const char *model_id;      /* text after the last '/' of model (server model id) */
    const char *family;
    int version;
    int num_layers, hidden_size, intermediate_size, vocab_size;
    float embed_scale;
    int dtype;                 /* lq_vindex_dtype of gate_vectors.bin */
    int embed_dtype;           /* lq_vindex_dtype of embeddings.bin (from its size) */
    int extract_level;         /* lq_vindex_level */
    const char *extract_level_str;
    int down_top_k;
    int has_model_weights;
    int dense_only;            /* layers[] empty: no gate vectors, no browse queries */
    int has_bitnet;            /* bitnet_layout present */
    int has_bands;             /* layer_bands in index.json */
    lq_vindex_band bands[3];   /* syntax, knowledge, output as resolved (index.json, family
                                  table, 40/80 split, else all = (0, L-1)) */
    int n_loaded_layers;       /* layers with num_features > 0 */
    uint64_t total_features;   /* sum of num_features */
    int features_per_layer;    /* layers[0].num_features (LARQL's stats field) */
    int n_probe_labels;
} lq_vindex_info;

typedef struct lq_vindex_open_opts {
    int n_threads;          /* threads for gate scans; 0 = number of cores */
    int verify_checksums;   /* 1: hash every checksummed file at open (slow on big vindexes) */
    int prefilter;          /* 1: build 2-bit sketches of the gate rows at open (1/8 of an f16
                               gate file in memory); gate KNN then scans the sketches and
                               re-scores the best 2K+32 rows per layer (8K+64 when the layer's
                               rows are not unit trits) exactly from the mapped rows. Exact for
                               unit-trit (BitNet) gates; an approximation for real-valued gates
                               (recall measured in tests/unit/test_vindex_build.c). */
    const char *kernels;    /* gate kernels: NULL = lq_kernels_best() as for the model (the
                               best for this CPU, or LQ_KERNELS), or "scalar", "avx2",
                               "avx512" (LQ_EUNSUPPORTED if the CPU lacks it, LQ_EINVAL for
                               another name) — for benchmarks and tests */
} lq_vindex_open_opts;

/* Opens and validates dir. Errors name the file and field: missing or truncated files,
 * index.json disagreeing with file sizes, unknown dtype, a layer range past the end of
 * gate_vectors.bin, a malformed down_meta.bin. opts may be NULL. */
int lq_vindex_open(const char *dir, const lq_vindex_open_opts *opts, lq_vindex **out, lq_err *err);
void lq_vindex_close(lq_vindex *v); /* NULL-safe */
const lq_vindex_info *lq_vindex_get_info(const lq_vindex *v);
/* The sha256 index.json records for gate_vectors.bin (a patch's base_checksum), or NULL. */
const char *lq_vindex_base_checksum(const lq_vindex *v);
const lq_tokenizer *lq_vindex_tokenizer(const lq_vindex *v);

/* Recomputes the sha256 of every file listed in index.json "checksums" and compares. */
int lq_vindex_verify_checksums(const lq_vindex *v, lq_err *err);
/* The same file by file (larql verify): fn gets each listed file, its status and size;
 * *n_files counts them (0: index.json lists no checksums). A malformed checksums object ->
 * LQ_EFORMAT. */
enum { LQ_VERIFY_OK = 0, LQ_VERIFY_MISMATCH = 1, LQ_VERIFY_MISSING = 2 };
typedef void (*lq_verify_fn)(void *ctx, const char *file, int status, uint64_t size);
int lq_vindex_verify_each(const lq_vindex *v, lq_verify_fn fn, void *ctx, size_t *n_files, lq_err *err);

/* Writes the vindex again into out_dir (which must not exist): every file re-emitted from
 * the mapping, index.json re-serialised from the parsed object (unknown fields preserved).
 * A vindex written by this library comes out byte-identical. */
int lq_vindex_rewrite(const lq_vindex *v, const char *out_dir, lq_err *err);

/* ---- raw access ---- */

/* Gate rows of a layer: *rows points into the mapping ([n_features, hidden] of dtype);
 * n_features 0 (rows NULL) for a layer that is absent or empty. LQ_ERANGE if layer is
 * outside [0, num_layers). */
int lq_vindex_gate_layer(const lq_vindex *v, int layer, const void **rows, int *n_features,
                         lq_err *err);
/* Reads one byte a page of the gate rows of each layer of layers [n] (all layers when layers
 * is NULL), so the first queries do not wait on the page cache (LARQL's /v1/warmup). Layers
 * outside the vindex or empty are skipped; returns how many were read. */
int lq_vindex_prefetch_gates(const lq_vindex *v, const int *layers, size_t n);
/* Embedding row of token id as f32 times embed_scale (out has hidden floats). */
int lq_vindex_embed_row(const lq_vindex *v, int32_t id, float *out, lq_err *err);

typedef struct lq_feature_meta {
    int32_t top_token_id;
    float c_score;
    int n_top;                  /* non-padding entries in top[] */
    int32_t top_ids[LQ_VINDEX_MAX_TOPK > 64 ? 64 : LQ_VINDEX_MAX_TOPK];
    float top_logits[64];
    const char *top_token;      /* an overlay's target text (patch.h), else NULL: the text is
                                   lq_vindex_token_text(top_token_id) */
} lq_feature_meta;
/* Metadata of (layer, feature) from down_meta.bin. Returns 1 if present, 0 if "no
 * metadata" (absent layer/feature, or the record is id 0 / c_score 0). Only the first 64
 * top-k entries are returned. */
int lq_vindex_feature_meta(const lq_vindex *v, int layer, int feature, lq_feature_meta *m);
/* Token text as the queries show it: decode([id], skip special) trimmed; "T{id}" when the
 * tokenizer cannot decode it. Points into a table owned by v. */
const char *lq_vindex_token_text(const lq_vindex *v, int32_t id);
/* The queries' token filter: readable = trimmed, 1..30 bytes, at least half of the
 * characters ASCII alphanumeric or one of " -'.,". 1 or 0 (NULL -> 0). */
int lq_vindex_token_readable(const char *s);
/* Probe label of (layer, feature) from feature_labels.json, or NULL. */
/* The label of the relation cluster (relation_clusters.json / feature_clusters.jsonl, written
 * by the builder for models with >= 8 layers, as LARQL does) that (layer, feature) belongs
 * to; NULL when the vindex has no clusters or the feature none. Owned by v. */
const char *lq_vindex_cluster_label(const lq_vindex *v, int layer, int feature);
const char *lq_vindex_probe_label(const lq_vindex *v, int layer, int feature);

/* Query vector of an entity: tokens without special tokens, mean of embed_scale * E[id]
 * (q has hidden floats). Empty tokenisation -> LQ_EINVAL "empty prompt"... see n_tokens:
 * *n_tokens receives the token count (0 and LQ_OK for text that encodes to nothing). */
int lq_vindex_entity_vector(const lq_vindex *v, const char *text, float *q, size_t *n_tokens,
                            lq_err *err);

/* ---- gate KNN ----
 * score_f = dot(gate_row_f, q) (raw, no normalisation). Top-K by |score|, the signed score
 * returned, sorted by |score| descending (ties: lower feature first). K = 0 -> no hits. */
typedef struct lq_vindex_hit {
    int32_t layer;
    int32_t feature;
    float score;
} lq_vindex_hit;

int lq_vindex_gate_knn(const lq_vindex *v, int layer, const float *q, size_t k,
                       lq_vindex_hit *out, size_t *n_out, lq_err *err);

/* Many queries over many layers in one pass over the gate rows (each row is read once for
 * all queries; layers and row ranges run in parallel on the vindex's thread pool).
 * Q: [n_q, hidden]. out: [n_q][n_layers][k] hits; counts: [n_q][n_layers] hits filled.
 * Absent/empty layers give 0 hits; a layer outside the model -> LQ_ERANGE. */
int lq_vindex_gate_knn_batch(const lq_vindex *v, const int *layers, size_t n_layers,
                             const float *Q, size_t n_q, size_t k, lq_vindex_hit *out,
                             size_t *counts, lq_err *err);

/* Concurrency. Queries are safe from any number of threads; by default their gate scans
 * share the vindex's pool, so concurrent callers take turns on it. A thread that wants its
 * queries to run beside other callers' sets its own way to scan, for the queries it makes:
 *   0 = the vindex's shared pool (default), 1 = on the calling thread alone (the server's
 *   choice: one request per worker thread, no contention), n > 1 = a private pool of n
 *   threads owned by the calling thread (created here, freed by lq_vindex_thread_release or
 *   the next call with another count). */
int lq_vindex_set_thread_scan(int n_threads, lq_err *err);
void lq_vindex_thread_release(void);
/* A cancel hook for the calling thread: fn(ctx) is called on that thread every few ms of
 * work, and a non-zero answer stops the call with LQ_ECANCELED. It is asked between blocks
 * of gate rows of queries whose scans run on the calling thread (lq_vindex_set_thread_scan(1);
 * 4096 rows for one query, fewer for many), in the top-k pass over many queries, between the
 * entities of lq_vindex_describe_many, between the stages of lq_vindex_open and inside its
 * tokenizer.json parse (so also in any tokenizer.json load on this thread). NULL (the
 * default) removes it. A database front end reads its own interrupt flags here: fn must not
 * call back into the front end or jump out (the library unwinds itself). */
typedef int (*lq_vindex_cancel_fn)(void *ctx);
void lq_vindex_set_thread_cancel(lq_vindex_cancel_fn fn, void *ctx);

/* Raw scores of one layer for n_q queries: out [n_q, n_features]. Scalar reference
 * (force_scalar = 1) or the best SIMD kernel for this CPU. */
int lq_vindex_gate_scores(const lq_vindex *v, int layer, const float *Q, size_t n_q, float *out,
                          int force_scalar, lq_err *err);

/* ---- queries ---- */

/* Band names: "syntax", "knowledge", "output", "all". */
typedef struct lq_describe_params {
    const char *entity;     /* required, non-empty */
    const char *band;       /* NULL = "knowledge"; unknown band -> LQ_EINVAL */
    int limit;              /* edges returned and per-layer K; default 20 (< 0 -> LQ_EINVAL) */
    double min_score;       /* signed gate threshold; default 5.0 */
    int verbose;            /* adds layer_min, layer_max, count */
    int per_layer;          /* 1: LARQL's WebSocket variant (§4.2): no merging across layers;
                               every hit passing the filters is an edge, in layer order (|score|
                               order within a layer), limit is only the per-layer K, no "also";
                               the result's layers[] lists every layer scanned */
} lq_describe_params;
void lq_describe_params_init(lq_describe_params *p);

typedef struct lq_describe_edge {
    char *target;
    float gate_score;       /* best (max) gate score over the merged hits */
    int layer;              /* layer of the best hit */
    int feature;            /* feature of the best hit */
    const char *relation;   /* probe label, else relation-cluster label, or NULL (owned by the vindex) */
    const char *relation_source; /* "probe" or "cluster" when relation is set */
    int layer_min, layer_max, count;
    int n_also;
    char *also[3];
} lq_describe_edge;

typedef struct lq_describe_result {
    lq_describe_edge *edges;
    size_t n_edges;
    double latency_ms;
    size_t n_tokens;        /* tokens of the entity (0: nothing was scanned) */
    int *layers;            /* per_layer: the layers scanned, in order (NULL otherwise) */
    size_t n_layers;
} lq_describe_result;

/* A dense-only vindex (no gate vectors) answers with no edges, as LARQL does (it has no
 * loaded layers to scan); walk/select/relations report it as LQ_EUNSUPPORTED. */
int lq_vindex_describe(const lq_vindex *v, const lq_describe_params *p, lq_describe_result *r,
                       lq_err *err);
void lq_describe_result_free(lq_describe_result *r);
/* describe of n entities in one pass over the gate rows (every row read once for all of
 * them): results[i] equals lq_vindex_describe with p->entity = entities[i] (latency_ms is
 * the whole call's). A NULL or empty entity, or one that encodes to nothing, gets no edges
 * (n_tokens 0) instead of an error. p->entity and p->per_layer must be unset; on error
 * every result is freed. */
int lq_vindex_describe_many(const lq_vindex *v, const lq_describe_params *p, const char *const *entities,
                            size_t n, lq_describe_result *results, lq_err *err);
/* {"entity","model","edges":[{"target","gate_score","layer"[,"relation","source":"probe"]
 *  [,"layer_max","layer_min","count"][,"also"]}],"latency_ms"} */
int lq_vindex_describe_json(const lq_vindex *v, const lq_describe_params *p, char **json_out,
                            lq_err *err);

typedef struct lq_walk_params {
    const char *prompt;     /* required; encoded WITH special tokens, last token is the query */
    int top;                /* per-layer K, default 5 (< 0 -> LQ_EINVAL) */
    const char *layers;     /* NULL = all loaded layers; "a-b" or "a,b,c" (unparsable -> none) */
} lq_walk_params;
void lq_walk_params_init(lq_walk_params *p);

typedef struct lq_walk_hit {
    int layer, feature;
    float gate_score;
    const char *target;     /* owned by the vindex */
    const char *relation;   /* probe label or NULL */
} lq_walk_hit;

typedef struct lq_walk_result {
    lq_walk_hit *hits;
    size_t n_hits;
    double latency_ms;
} lq_walk_result;

int lq_vindex_walk(const lq_vindex *v, const lq_walk_params *p, lq_walk_result *r, lq_err *err);
void lq_walk_result_free(lq_walk_result *r);
/* {"prompt","hits":[{"layer","feature","gate_score","target"[,"relation"]}],"latency_ms"} */
int lq_vindex_walk_json(const lq_vindex *v, const lq_walk_params *p, char **json_out, lq_err *err);
/* The walk of every position of the prompt (ours; LARQL walks the last token only): for each
 * token, the features its embedding fires per layer, as lq_vindex_walk does for the last one.
 * {"prompt","positions":[{"pos","token","hits":[…as above…]}],"latency_ms"}; at most
 * LQ_WALK_MAX_POSITIONS positions (more -> LQ_ERANGE). */
#define LQ_WALK_MAX_POSITIONS 256
int lq_vindex_walk_positions_json(const lq_vindex *v, const lq_walk_params *p, char **json_out, lq_err *err);

typedef struct lq_select_params {
    const char *entity;     /* substring of lowercase top token, or NULL */
    const char *relation;   /* case-insensitive substring of the probe label, or NULL */
    int layer;              /* -1 = all loaded layers */
    int limit;              /* default 20 (< 0 -> LQ_EINVAL) */
    double min_confidence;  /* NaN = none; compares c_score */
    const char *order_by;   /* "confidence"|"c_score"|"gate_score" -> c_score, "layer"; NULL */
    const char *order;      /* "desc" (default) or "asc" */
} lq_select_params;
void lq_select_params_init(lq_select_params *p);

typedef struct lq_select_edge {
    int layer, feature;
    const char *target;
    float c_score;
    const char *relation;
} lq_select_edge;

typedef struct lq_select_result {
    lq_select_edge *edges;
    size_t n_edges;
    size_t total;           /* matches before truncation to limit */
    double latency_ms;
} lq_select_result;

int lq_vindex_select(const lq_vindex *v, const lq_select_params *p, lq_select_result *r,
                     lq_err *err);
void lq_select_result_free(lq_select_result *r);
/* {"edges":[{"layer","feature","target","c_score"[,"relation"]}],"total","latency_ms"} */
int lq_vindex_select_json(const lq_vindex *v, const lq_select_params *p, char **json_out,
                          lq_err *err);

/* Relations (server GET /v1/relations): knowledge-band features with a content-token top
 * token and c_score >= 0.2, aggregated by lowercase token (top 50 by count), plus the
 * probe-label histogram.
 * {"relations":[{"name","count","max_score","min_layer","max_layer","examples"}],
 *  "probe_relations":[{"name","count"}],"probe_count","total","latency_ms"} */
int lq_vindex_relations_json(const lq_vindex *v, char **json_out, lq_err *err);
/* The same over one layer (LQL's SHOW RELATIONS AT LAYER n). */
int lq_vindex_relations_layer_json(const lq_vindex *v, int layer, char **json_out, lq_err *err);

/* Nearest features of an entity at one layer (pg_infer nearest_to): gate_knn(layer, q, top),
 * hits without metadata skipped. top default 20.
 * {"entity","layer","hits":[{"feature","token","score","also"}],"latency_ms"} with score
 * rounded to 4 decimals and also = first 3 readable top-k tokens with logit > 0, ", "-joined. */
typedef struct lq_nearest_params {
    const char *entity;
    int layer;              /* required; outside the model -> LQ_ERANGE */
    int top;
} lq_nearest_params;
void lq_nearest_params_init(lq_nearest_params *p);
int lq_vindex_nearest_json(const lq_vindex *v, const lq_nearest_params *p, char **json_out,
                           lq_err *err);

/* similar_to(a, b) as pg_infer computes it (shared top-50 features per layer, else 10 x
 * cosine of the entity vectors). {"a","b","score","latency_ms"} */
int lq_vindex_similar(const lq_vindex *v, const char *a, const char *b, double *score, lq_err *err);
/* The same over a sample of the layers when max_layers > 0 and the vindex has more (pg_infer's
 * infer.similarity_max_layers: every floor(L/m)-th gate layer from the first, m of them);
 * max_layers <= 0 = every layer, as lq_vindex_similar. */
int lq_vindex_similar_layers(const lq_vindex *v, const char *a, const char *b, int max_layers, double *score,
                             lq_err *err);
int lq_vindex_similar_json(const lq_vindex *v, const char *a, const char *b, char **json_out,
                           lq_err *err);

/* Server GET /v1/stats body (mode "full"). */
int lq_vindex_stats_json(const lq_vindex *v, char **json_out, lq_err *err);

/* {"layers":[{"layer","band","num_features"}]} */
int lq_vindex_show_layers_json(const lq_vindex *v, char **json_out, lq_err *err);
/* pg_infer infer_show_features: features of one layer in index order with metadata,
 * c_score >= min_score, optional case-insensitive token substring filter, at most top rows.
 * {"layer","features":[{"feature","token","score","also"}]} */
int lq_vindex_show_features_json(const lq_vindex *v, int layer, const char *filter,
                                 double min_score, int top, char **json_out, lq_err *err);

/* ---- helpers shared with front ends ---- */

/* Parses a band name; LQ_EINVAL for anything else. *band_idx: 0 syntax, 1 knowledge,
 * 2 output, 3 all. */
int lq_vindex_parse_band(const char *band, int *band_idx, lq_err *err);

#ifdef __cplusplus
}
#endif

/* building, the local registry and slice; inference, the KNN store and running a vindex's
 * weights: their own headers, included here so that one include still gives the whole API */
#include "larql/vindex_build.h"
#include "larql/vindex_infer.h"
#endif
