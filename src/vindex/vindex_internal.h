/* Internals shared by the vindex sources: the lq_vindex struct, a string builder with
 * serde_json-compatible number/string output, sha256, file helpers, gate top-k. The gate,
 * sketch and down_meta kernels live in src/kernels (kernels.h). */
#ifndef LQ_VINDEX_INTERNAL_H
#define LQ_VINDEX_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/mapfile.h"
#include "core/threadpool.h"
#include "core/sb.h"
#include "core/sha256.h"
#include "kernels/kernels.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"

/* ---- JSON output on the core string builder (core/sb.h) ---- */
/* (JSON string literals: lq_sb_json_str in core/sb.h) */
/* Shortest round-trip decimal, Rust/ryu style ("5.0", "12.3", "0.00001", "1e-7", "1e16"). */
void lq_sb_f64(lq_sb *b, double v);
void lq_sb_f32(lq_sb *b, float v);
/* serde_json::to_string_pretty of a jansson value (2-space indent, "key": value). */
void lq_sb_json_pretty(lq_sb *b, const json_t *v, int indent);

/* Rust's f32 rounding helpers used by the server: (x * 10).round() / 10 etc. */
float lq_round1_f32(float x);

/* ---- files ---- */
/* Writes n bytes to dir/name (creating it), fsync'd. */
int lq_vx_write_file(const char *dir, const char *name, const void *data, size_t n, lq_err *err);
/* Streaming writer with sha256 of what was written. */
typedef struct lq_vx_file {
    FILE *f;
    char *path;
    lq_sha256 sha;
    uint64_t written;
    int hash;
} lq_vx_file;
int lq_vx_file_open(lq_vx_file *w, const char *dir, const char *name, int hash, lq_err *err);
int lq_vx_file_write(lq_vx_file *w, const void *data, size_t n, lq_err *err);
/* Flushes, fsyncs and closes; hex (may be NULL) receives the sha256. */
int lq_vx_file_close(lq_vx_file *w, char hex[65], lq_err *err);
void lq_vx_file_abort(lq_vx_file *w);
char *lq_vx_join(const char *dir, const char *name); /* malloc'd "dir/name" (dir NULL: name) */
/* src/name copied to dst/name (fsync'd), format.c */
int lq_vx_copy_file(const char *src, const char *dst, const char *name, lq_err *err);

/* LARQL's f32 -> f16: truncates the mantissa, flushes below-normal results to signed zero,
 * overflow to inf (crates/larql-models/src/quant/half.rs). */
uint16_t lq_vx_f32_to_f16_trunc(float f);

/* ---- the handle ---- */
typedef struct lq_vx_layer {
    int present;
    int num_features;
    uint64_t offset, length; /* bytes into gate_vectors.bin */
} lq_vx_layer;

typedef struct lq_vx_label {
    uint64_t key; /* layer << 32 | feature; 0 = empty slot marker via used flag */
    int used;
    char *label;
} lq_vx_label;

struct lq_vindex {
    char *dir;
    json_t *index;             /* parsed index.json, kept whole (unknown fields) */
    lq_vindex_info info;
    char *model, *model_id, *family, *level_str;
    lq_mapfile gate, embed, down;
    int has_gate, has_down;
    lq_vx_layer *layers;       /* [num_layers] */
    /* down_meta.bin: per layer record base offset and count */
    uint32_t dm_topk, dm_layers;
    uint64_t *dm_base;         /* [num_layers] byte offset of the layer's first record */
    uint32_t *dm_nf;           /* [num_layers] records in the layer */
    size_t dm_rec;             /* bytes per record: 8 + 8 * top_k */
    lq_tokenizer *tok;
    char *tok_text;            /* all token texts, NUL-separated */
    uint32_t *tok_off;         /* [vocab] offset into tok_text */
    lq_vx_label *labels;       /* open addressing, capacity label_cap (power of 2) */
    size_t label_cap, n_labels;
    char **label_names;        /* distinct probe labels (for histograms) */
    /* relation clusters (relation_clusters.json + feature_clusters.jsonl, when present) */
    int32_t **clu;             /* [num_layers] -> [num_features] cluster or -1 (NULL: none) */
    char **clu_labels;         /* [n_clu] */
    size_t n_clu;
    lq_pool *pool;
    int n_threads;
    const lq_kernels *kern;    /* gate scoring and sketches (lq_vindex_open_opts.kernels) */
    /* gate prefilter (lq_vindex_open_opts.prefilter): per layer a 2-bit sketch of every gate
     * row, codes [nf][sk_dp / 4] (layout in kernels/kernels.h), and its scale [nf] */
    int prefilter;
    size_t sk_dp;              /* lq_sketch_dp(hidden) */
    uint8_t **sk;              /* [num_layers] -> codes inside sk_block */
    uint8_t *sk_block;
    float **sk_scale;
    int *sk_inexact;           /* [num_layers] 1: the layer's rows are not unit trits */
    /* set only in an overlay's view (lq_overlay_vindex): a shallow copy of the base handle
     * whose queries see the overlay; never closed */
    const struct lq_overlay *ov;
    const struct lq_vx_view *view; /* how the read path asks it (below; NULL: no overlay) */
    lq_knn_store *knn;         /* knn_store.bin of the directory, or NULL */
};

/* The exact gate kernel a vindex scans with (the prefilter re-scores with the same one, so
 * its exact scores are bit-identical to a full scan's); force_scalar: the scalar reference. */
lq_gate_scores_fn lq_vx_scores_pick(const lq_vindex *v, int force_scalar);

/* Top-k by |score| of scores[0..n) into hits (sorted, |score| desc, ties lower feature
 * first); returns the count. */
/* The calling thread's cancel hook (lq_vindex_set_thread_cancel): 1 when it asks to stop,
 * 0 without a hook. Long loops outside the gate scan (open, describe_many) poll it. */
int lq_vx_cancelled(void);
size_t lq_vx_topk(const float *scores, size_t n, size_t k, int layer, lq_vindex_hit *hits);

/* Token helpers (LARQL's is_readable_token / is_content_token). */
int lq_vx_is_readable(const char *s);
/* s[0..n) is empty or only Unicode whitespace (Rust's trim() would leave nothing) */
int lq_vx_blank(const char *s, size_t n);
int lq_vx_is_content(const char *s);

/* Band table: fills bands for (family, num_layers); returns 0 when LARQL has none (L < 8). */
int lq_vx_family_bands(const char *family, int num_layers, lq_vindex_band bands[3]);

/* tokenizer.json text synthesised from GGUF tokenizer.ggml.* metadata (malloc'd). */
struct lq_gguf;
int lq_vx_tokenizer_json_from_gguf(const struct lq_gguf *g, char **json, size_t *len, lq_err *err);
/* Tokenizer from a Unigram (SentencePiece) tokenizer.json, as written above or by HF's llama
 * converters; LQ_EUNSUPPORTED when the file's model is not Unigram. */
int lq_vx_tokenizer_from_unigram(const char *path, lq_tokenizer **out, lq_err *err);

/* LARQL kernel-layout trits (row-major, column 4b+s of a row in bits 2s of byte b, 01 = +1,
 * 10 = -1, 00/11 = 0) -> microsoft I2_S (128-element blocks of 32 bytes, element j at byte
 * j%32, shift 6-2*(j/32), codes 0/1/2 = -1/0/+1). src: rows*cols/4 bytes, cols % 4 == 0; dst:
 * rows*lq_i2s_padded_cols(cols)/4 bytes, each row padded to whole 128-blocks with zero trits. */
void lq_vx_i2s_larql_to_ms(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols);

/* ---- prefilter sketches (kernels/kernels.h defines the codes and the arithmetic) ---- */
/* clusters.c: relation_clusters.json + feature_clusters.jsonl into the (complete) vindex
 * directory dir, LARQL's algorithm; nothing when the model has no knowledge band (< 8 layers;
 * any_depth: its layers between the first and the last then) or no feature gets an offset
 * direction. */
int lq_vx_write_clusters(const char *dir, int n_threads, int any_depth, size_t *n_clustered, size_t *k, lq_err *err);

/* Builds the sketches of every gate layer (parallel on the vindex's pool). */
int lq_vx_build_sketches(lq_vindex *v, lq_err *err);

/* ---- KNN store (knn_store.c) ---- */
typedef struct lq_vx_knn_entry {
    int layer;
    int32_t target_id;
    char *target_token, *entity, *relation;
    float confidence;
    float *key; /* [hidden], unit length */
    int borrowed; /* key and strings belong to someone else (a patch op, another store) */
} lq_vx_knn_entry;

struct lq_knn_store {
    int hidden;
    lq_vx_knn_entry *e;
    size_t n, cap;
};

/* ---- edit sets (edit_set.c): builders for the overlay ---- */
lq_edit_set *lq_vx_edit_set_new(int n_layer, int hidden);
int lq_vx_edit_set_add_knn(lq_edit_set *s, const lq_knn_entry *e);
int lq_vx_edit_set_add_feature(lq_edit_set *s, int layer, const float *gate, const float *down,
                               float scale);
/* Multiplies the scale of the last n composed features of layer (COMPOSE calibration). */
/* subject_edit.c: the ops of a subject edit (in *out, a scratch patch), and the check that
 * greedy decoding of the canonical prompt under s writes the whole target (1 yes, 0 no). */
int lq_vx_subject_insert(lq_overlay *o, struct lq_model *m, const lq_insert_params *p, lq_patch **out,
                         lq_insert_result *r, lq_err *err);
int lq_vx_subject_check(struct lq_model *m, lq_edit_set *s, const lq_insert_params *p, const int32_t *tt, size_t nt,
                        float *p0, lq_err *err);
int lq_vx_edit_set_add_subject(lq_edit_set *s, const lq_tokenizer *tok, const lq_patch_op *ops, size_t n);
void lq_vx_edit_set_scale_last(lq_edit_set *s, int layer, int n, float factor);
/* upper reads as lower's entries followed by its own (lower held; neither stacked already,
 * same shape) -> LQ_EINVAL otherwise */
int lq_vx_edit_set_stack(lq_edit_set *upper, lq_edit_set *lower);

/* infer.c: the logits after prompt (encoded as lq_infer does) with hook's edits */
int lq_vx_prompt_logits(struct lq_model *m, const char *prompt, const lq_resid_hook *hook,
                        float *logits, lq_err *err);

/* ---- overlays (overlay.c, compile.c) ----
 * The read paths ask these first when v->ov is set. */
struct lq_overlay;
/* ---- the view: what an overlay changes in the read path ----
 * An overlay's view (lq_overlay_vindex) is a shallow copy of the base handle with ov and view
 * set: format.c, knn.c and compile.c ask the view through this table and never name the
 * overlay (src/vindex/overlay_view.c fills it). */
typedef struct lq_vx_view {
    /* -1 = not patched, 0 = deleted (a tombstone), 1 = m filled (m->top_token: the target) */
    int (*meta)(const lq_vindex *v, int layer, int feature, lq_feature_meta *m);
    /* the relation of an inserted feature, or NULL */
    const char *(*label)(const lq_vindex *v, int layer, int feature);
    /* -1 = not patched, 0 = deleted, 1 = row [hidden] receives the gate override */
    int (*gate_row)(const lq_vindex *v, int layer, int feature, float *row);
    /* 1 if the overlay has gate overrides or tombstones at layer (the gate KNN must merge) */
    int (*touches)(const lq_vindex *v, int layer);
    /* the layer's gate overrides */
    size_t (*n_gates)(const lq_vindex *v, int layer);
    /* how many more base hits a layer's KNN needs so that K survive the merge (0 when the
     * base scan masks the overlay's features itself, see mask) */
    size_t (*extra)(const lq_vindex *v, int layer);
    /* sets the scores [n_features] of the layer's re-gated and deleted features to NaN */
    void (*mask)(const lq_vindex *v, int layer, float *scores, size_t n);
    /* merges base hits (nb, K + extra of them) with the layer's gate overrides scored against
     * q: tombstoned and re-gated features dropped, overrides added, sorted by |score| desc
     * (ties lower feature), truncated to k. out has room for nb + the layer's overrides. */
    size_t (*gate_merge)(const lq_vindex *v, int layer, const float *q, const lq_vindex_hit *base, size_t nb,
                         size_t k, lq_vindex_hit *out);
} lq_vx_view;

static inline int lq_vx_ov_meta(const lq_vindex *v, int layer, int feature, lq_feature_meta *m)
{
    return v->view ? v->view->meta(v, layer, feature, m) : -1;
}
static inline const char *lq_vx_ov_label(const lq_vindex *v, int layer, int feature)
{
    return v->view ? v->view->label(v, layer, feature) : NULL;
}
static inline int lq_vx_ov_gate_row(const lq_vindex *v, int layer, int feature, float *row)
{
    return v->view ? v->view->gate_row(v, layer, feature, row) : -1;
}
static inline int lq_vx_ov_touches(const lq_vindex *v, int layer) { return v->view && v->view->touches(v, layer); }
static inline size_t lq_vx_ov_n_gates(const lq_vindex *v, int layer) { return v->view ? v->view->n_gates(v, layer) : 0; }
static inline size_t lq_vx_ov_extra(const lq_vindex *v, int layer) { return v->view ? v->view->extra(v, layer) : 0; }
static inline void lq_vx_ov_mask(const lq_vindex *v, int layer, float *scores, size_t n)
{
    if (v->view)
        v->view->mask(v, layer, scores, n);
}
static inline size_t lq_vx_ov_gate_merge(const lq_vindex *v, int layer, const float *q, const lq_vindex_hit *base,
                                         size_t nb, size_t k, lq_vindex_hit *out)
{
    return v->view->gate_merge(v, layer, q, base, nb, k, out);
}
/* knn.c: the gate KNN over the base files alone (lq_vindex_gate_knn_batch's contract) */
int lq_vx_gate_knn_batch_base(const lq_vindex *v, const int *layers, size_t n_layers, const float *Q, size_t n_q,
                              size_t k, lq_vindex_hit *out, size_t *counts, lq_err *err);
int lq_vx_compile(const lq_vindex *base, const lq_vindex *view, const lq_knn_store *knn, const char *out_dir,
                  lq_err *err);
/* COMPACT: the view compiled beside dir, then swapped in (aside, rename, fsync the parent) */
int lq_vx_compact(const lq_vindex *base, const lq_vindex *view, const lq_knn_store *knn, const char *dir,
                  lq_err *err);

/* The text a feature's metadata shows: an overlay's target, else the top token's text. */
/* A prompt encoded as lq_infer does (BOS as the tokenizer says, specials parsed), checked
 * against the vocabulary and n_ctx (infer.c). */
struct lq_model;
int lq_vx_encode_prompt(const struct lq_model *m, const char *prompt, int n_ctx, int32_t **ids, size_t *n,
                        lq_err *err);

static inline const char *lq_vx_meta_text(const lq_vindex *v, const lq_feature_meta *m)
{
    return m->top_token ? m->top_token : lq_vindex_token_text(v, m->top_token_id);
}

/* ---- KNN store helpers (knn_store.c) ---- */
/* "The {relation, '-'/'_' as spaces} of {entity} is" (malloc'd): INSERT's canonical prompt. */
char *lq_vx_canonical_prompt(const char *entity, const char *relation);
/* Removes the entries of entity (case-sensitive, as LARQL's delete_knn); relation NULL = any.
 * Returns how many. */
size_t lq_vx_knn_remove(lq_knn_store *s, const char *entity, const char *relation);
/* key / its L2 norm into unit[hidden], as the store keeps its keys; LQ_EINVAL for a zero or
 * non-finite norm */
int lq_vx_knn_unit_key(const float *key, int hidden, float *unit);
/* Appends e as it is, without copying its key and strings: e->key must be unit length and e's
 * key and strings must outlive the store (an overlay's store borrows from the patches the
 * overlay holds, so that clones of one state share every vector). */
int lq_vx_knn_store_add_borrowed(lq_knn_store *s, const lq_vx_knn_entry *e, lq_err *err);
/* lq_patch_parse of a parsed document (the journal's records hold patches inside them) */
int lq_vx_patch_from_json(json_t *root, const char *name, int hidden, lq_patch **out, lq_err *err);
/* A journal replay: changes skip rebuilding the gate matrices (nothing queries the overlay
 * meanwhile), lq_vx_overlay_settle rebuilds them once, so a replay is linear in the
 * journal instead of quadratic. */
void lq_vx_overlay_defer(struct lq_overlay *o, int on);
int lq_vx_overlay_settle(struct lq_overlay *o, lq_err *err);
int lq_vx_overlay_scope(const struct lq_overlay *o); /* the current scope (lq_overlay_set_scope) */

#endif
