/* Editing what the model knows: an overlay over a read-only vindex, LARQL's patches (.vlp),
 * INSERT / UPDATE / DELETE, and the KNN store that makes infer answer with an insert.
 *
 * An overlay is the state that patches build over a base vindex (LARQL's PatchedVindex):
 *   - feature-meta overrides: (layer, feature) -> {target text and id, c_score, provenance}
 *   - gate overrides: (layer, feature) -> a gate row [hidden] (COMPOSE inserts, .vlp vectors)
 *   - tombstones: deleted features (no metadata, never a gate hit)
 *   - up/down vectors of composed features (kept for .vlp and COMPILE)
 *   - the KNN store (INSERT ... MODE KNN, .vlp insert_knn)
 * The base files are never written. lq_overlay_vindex() is a vindex handle that every read
 * query (describe, walk, select, relations, nearest, similar, show, stats) accepts and that
 * answers with the overlay applied; lq_overlay_knn() is the store lq_infer's walk mode
 * consults (lq_infer_params.knn).
 *
 * State is the fold of an ordered list of patches, each a list of operations (LARQL's
 * ops): applying a patch validates every op first (layer and feature in range, vector widths
 * equal to hidden, base model name when the patch names one) and applies all or none;
 * removing a patch rebuilds the state from the others. Direct edits (lq_overlay_insert /
 * _update / _delete) append their ops to the overlay's live patch "edits" (created on the
 * first edit), so every state can be saved as a .vlp and replayed.
 *
 * Thread safety: an overlay is not locked; a front end serialises writers and readers of
 * one overlay (the server: one read-write lock per session). Overlays over one base are
 * independent. */
#ifndef LARQL_PATCH_H
#define LARQL_PATCH_H

#include <stddef.h>
#include <stdint.h>

#include "larql/model.h"
#include "larql/status.h"
#include "larql/vindex.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_overlay lq_overlay;
typedef struct lq_patch lq_patch;
struct lq_model;

/* ---- operations (LARQL's VindexPatch ops, crates/larql-vindex/src/patch/format.rs) ---- */

typedef enum lq_op_kind {
    LQ_OP_INSERT = 1,     /* a feature slot: meta (+ gate/up/down vectors) */
    LQ_OP_UPDATE = 2,     /* vectors and/or meta of a slot */
    LQ_OP_DELETE = 3,     /* tombstone */
    LQ_OP_INSERT_KNN = 4, /* a KNN-store entry */
    LQ_OP_DELETE_KNN = 5, /* every KNN entry (and subject edit) of an entity */
    LQ_OP_INSERT_SUBJECT = 6, /* one key of a subject-gated edit (ours; LARQL has no such op) */
    LQ_OP_DELETE_EDIT = 7,    /* removes every op of the edit named by id (ours) */
} lq_op_kind;

#define LQ_EDIT_MAX_REPLACED 4

/* One operation. Strings and vectors are borrowed (the patch copies what it keeps). Vectors
 * are [hidden] floats or NULL. */
typedef struct lq_patch_op {
    int kind;                       /* lq_op_kind */
    int layer, feature;             /* INSERT/UPDATE/DELETE: the slot; INSERT_KNN: layer */
    const char *entity, *relation;  /* provenance (INSERT, INSERT_KNN, DELETE_KNN: entity) */
    const char *target;             /* INSERT / INSERT_KNN: the answer's text */
    int32_t target_id;              /* INSERT_KNN: the token put first; INSERT: -1 = unknown */
    float confidence;               /* NaN = absent (INSERT meta c_score then 0.9) */
    const char *reason;             /* DELETE: optional */
    const float *gate, *up, *down;  /* INSERT / UPDATE */
    const float *key;               /* INSERT_KNN: the residual key (normalised on apply) */
    int has_down_meta;              /* INSERT / UPDATE: down_meta {t, i, c} given */
    const char *dm_token;
    int32_t dm_id;
    float dm_c;
    const char *id;                 /* the edit this op belongs to (every op of one insert shares
                                     * it; NULL: none, as in LARQL's patches); DELETE_EDIT: the
                                     * edit removed. At most LQ_EDIT_ID_MAX bytes */
    /* INSERT_SUBJECT (src/vindex/subject_edit.c): entity = the subject (its tokens arm the
     * edit), layer = where the gate is read, feature = the index of the target token this op
     * writes, target_id = that token; gate = a unit key of the residual with gate_threshold
     * (first target token only); down = the value added after the last layer (the first op
     * of each target token; the ops after it share it). An op with feature 0 and a down
     * vector starts an edit. */
    float gate_threshold;
    int force; /* INSERT_SUBJECT: the token is written on the logits (the head cannot put it
                  first from the states the gate matches), the value is zero */
    /* INSERT_SUBJECT, the op that starts an edit: the answers the model gave the canonical
     * question about this subject before the edit (the old fact, or its guesses about a subject
     * it does not know); their probability moves to the target wherever the subject stands */
    int n_replaces;
    int32_t replaces[LQ_EDIT_MAX_REPLACED];
} lq_patch_op;
void lq_patch_op_init(lq_patch_op *op, int kind); /* zeroes, confidence NaN, target_id -1 */

/* ---- patches (.vlp: LARQL's JSON patch file) ---- */

/* name: how the overlay lists it (LARQL: description ?? "unnamed"); base_model: NULL/"" =
 * any. */
int lq_patch_create(const char *name, const char *base_model, int hidden, lq_patch **out,
                    lq_err *err);
void lq_patch_free(lq_patch *p); /* NULL-safe */
/* The header fields LARQL's .vlp carries: created_at (NULL = now, RFC 3339 UTC),
 * base_checksum (the vindex's gate_vectors.bin sha256, lq_vindex_base_checksum; checked on
 * apply; NULL/"" = none) and author (NULL/"" = none). */
int lq_patch_set_info(lq_patch *p, const char *created_at, const char *base_checksum, const char *author,
                      lq_err *err);
const char *lq_patch_base_checksum(const lq_patch *p); /* NULL when absent */
const char *lq_patch_created_at(const lq_patch *p);    /* "" when absent */
const char *lq_patch_author(const lq_patch *p);        /* NULL when absent */
/* Appends a copy of op. Vector widths are the patch's hidden. */
int lq_patch_add(lq_patch *p, const lq_patch_op *op, lq_err *err);
size_t lq_patch_n_ops(const lq_patch *p);
/* Op i (pointers into the patch, valid while it lives); 0 if out of range. */
int lq_patch_op_at(const lq_patch *p, size_t i, lq_patch_op *op);
const char *lq_patch_name(const lq_patch *p);
const char *lq_patch_base_model(const lq_patch *p);
/* Counts by kind (insert + insert_knn, update, delete + delete_knn), for "Saved: p (I inserts,
 * U updates, D deletes)". */
void lq_patch_counts(const lq_patch *p, size_t *inserts, size_t *updates, size_t *deletes);

/* Reads a .vlp (JSON, LARQL's fields: version, base_model, base_checksum?, created_at,
 * description?, author?, tags, operations[{op: insert|update|delete|insert_knn|delete_knn,
 * ...}], vectors as standard base64 of little-endian f32). hidden: the width every vector
 * must have (0 = take it from the first vector). Every field is checked: unknown op, missing
 * or mistyped field, a vector of another width or not base64 -> LQ_EFORMAT naming the
 * operation index and field. name: the patch's name (NULL = description ?? "unnamed"). */
int lq_patch_parse(const char *json, size_t len, const char *name, int hidden, lq_patch **out,
                   lq_err *err);
int lq_patch_read(const char *path, int hidden, lq_patch **out, lq_err *err);
/* The same for a file a client names inside a directory (a server's --patch-dir): file must
 * be a plain name (no '/'); a symbolic link (refused by the open itself, O_NOFOLLOW), a
 * directory or a file with more than one hard link is refused (LQ_EINVAL), an absent one is
 * LQ_ENOTFOUND; messages name the file, never dir. */
int lq_patch_read_in(const char *dir, const char *file, int hidden, lq_patch **out, lq_err *err);
/* The .vlp JSON (pretty, LARQL's field order; created_at as given at create or ""). */
int lq_patch_json(const lq_patch *p, char **out, lq_err *err);
/* Writes path.partial, fsyncs, renames over path. */
int lq_patch_write(const lq_patch *p, const char *path, lq_err *err);

/* ---- overlays ---- */

/* An empty overlay over base (which must outlive it). The KNN store starts as a copy of
 * init_knn (NULL = empty): the store saved in the vindex directory, lq_knn_store_of_model. */
int lq_overlay_create(const lq_vindex *base, const lq_knn_store *init_knn, lq_overlay **out,
                      lq_err *err);
void lq_overlay_free(lq_overlay *o); /* NULL-safe */
/* A deep copy (a session starting from the global state). */
int lq_overlay_clone(const lq_overlay *o, lq_overlay **out, lq_err *err);
/* A clone whose forward-pass edit set shares o's (a session over the global state): the
 * clone's own edits are stacked on o's edit set as it is now, instead of copying it. Answers
 * are the same as lq_overlay_clone's. Reads o's edit set: call it under the lock that
 * guards o. */
int lq_overlay_clone_layered(lq_overlay *o, lq_overlay **out, lq_err *err);

/* The patched view: pass it to any lq_vindex_* read query. Owned by the overlay; reflects
 * every later change. */
const lq_vindex *lq_overlay_vindex(const lq_overlay *o);
/* The KNN store of the overlay (for lq_infer_params.knn). */
const lq_knn_store *lq_overlay_knn(const lq_overlay *o);
/* Increases with every change (caches key on it). */
uint64_t lq_overlay_version(const lq_overlay *o);

/* Applies a copy of p as the newest patch (validated whole first: nothing changes on error).
 * A second patch with the same name -> LQ_EINVAL. */
int lq_overlay_apply(lq_overlay *o, const lq_patch *p, lq_err *err);
/* Removes the patch named name and rebuilds the state from the rest. LQ_ENOTFOUND. */
int lq_overlay_remove(lq_overlay *o, const char *name, lq_err *err);
/* What lq_overlay_apply would refuse p for, without applying it. */
int lq_overlay_check_patch(const lq_overlay *o, const lq_patch *p, lq_err *err);
/* Removes every patch (of every scope): the base state again, the version still rising. */
int lq_overlay_clear(lq_overlay *o, lq_err *err);
size_t lq_overlay_n_patches(const lq_overlay *o);
const lq_patch *lq_overlay_patch_at(const lq_overlay *o, size_t i);
/* The live patch of direct edits ("edits"), or NULL before the first edit. */
const lq_patch *lq_overlay_edits(const lq_overlay *o);
/* Number of patched features (meta or gate overrides and tombstones) and KNN entries. */
size_t lq_overlay_n_features(const lq_overlay *o);

/* The name of the live patch direct edits go to (default "edits"; a server session uses
 * its own so that a session's edits stay apart from the global ones it sees). Set it before
 * the first edit. */
int lq_overlay_set_edits_name(lq_overlay *o, const char *name, lq_err *err);
/* Scopes keep two owners' patch names apart in one overlay (a server session's own patches
 * over the global ones it sees): apply, remove and the live edits patch look names up in
 * the current scope only (default 0), so a name may appear once per scope; the state is
 * still the fold of every patch, whatever its scope, in order. A clone keeps the scopes. */
void lq_overlay_set_scope(lq_overlay *o, int scope);
/* The scope patch i was applied in (-1 out of range). */
int lq_overlay_patch_scope(const lq_overlay *o, size_t i);
/* Validates the ops of p and appends them to the live patch, applied (all or none): how a
 * journal replays recorded edits. */
int lq_overlay_record(lq_overlay *o, const lq_patch *p, lq_err *err);
/* Drops the live patch's ops from index n on and rebuilds (an edit whose persistence
 * failed is undone so). */
int lq_overlay_truncate_edits(lq_overlay *o, size_t n, lq_err *err);

/* ---- durability: an append-only journal of the changes to an overlay ----
 *
 * One file of records, each framed with its length, a sequence number and CRC-32C checksums
 * of its header and payload (JSON {"t":"apply"|"remove"|"edit"|"checkpoint", ...}), written
 * and fsync'd before the change is acknowledged; files of the older LQJ1 framing (sha256
 * prefix, no sequence) are still read and rewritten in the new one at open. Opening checks
 * the whole file, then replays it into the overlay. A bad range at the end with nothing
 * intact after it (an interrupted append, never acknowledged) is cut off and reported in
 * dropped. Damage to acknowledged records - a bad record with intact ones after it, a last
 * record complete but failing its checksum, a break in the sequence - refuses the open
 * (LQ_EFORMAT, naming the file, the offset and the intact records after it) and leaves the
 * file untouched: lq_journal_scan / lq_journal_salvage (`larql journal check|salvage`) are
 * the way on. The file is created by the first append, not by the open. */
typedef struct lq_journal lq_journal;
typedef struct lq_journal_stats {
    size_t records;       /* replayed */
    uint64_t dropped;     /* bytes of a torn tail cut off */
    size_t legacy;        /* of the records, in the old LQJ1 framing */
    int migrated;         /* the old framing was rewritten in the new one */
    uint64_t seq_last;    /* the last record's sequence number */
} lq_journal_stats;
typedef struct lq_journal_opts {
    const char *name;            /* how messages name the file (NULL: its path); a server
                                    passes a name relative to its state directory */
    size_t checkpoint_records;   /* a checkpoint is due after this many records (0: 1024) */
    uint64_t checkpoint_bytes;   /* ... or this many bytes appended, and at least twice the
                                    last checkpoint's size (0: 8 MiB) */
} lq_journal_opts;
int lq_journal_open_opts(const char *path, const lq_journal_opts *opts, lq_overlay *o, lq_journal **out,
                         lq_journal_stats *st, lq_err *err);
int lq_journal_open(const char *path, lq_overlay *o, lq_journal **out, lq_journal_stats *st, lq_err *err);
/* The open's check without the replay (nothing is changed): LQ_OK when an open would replay
 * the file (a torn tail included), else the refusal an open would give. An absent file is
 * fine. (A server checks its session journals so at start and replays them at first use.) */
int lq_journal_verify(const char *path, const lq_journal_opts *opts, lq_err *err);
void lq_journal_close(lq_journal *j);
/* A patch applied / removed / the live patch's ops from index n0 on (an edit). On a write
 * error (disk full) the file is cut back to its previous length and the error returned: the
 * caller undoes the change in memory. */
int lq_journal_apply(lq_journal *j, const lq_patch *p, lq_err *err);
int lq_journal_remove(lq_journal *j, const char *name, lq_err *err);
int lq_journal_edit(lq_journal *j, const lq_overlay *o, size_t n0, lq_err *err);
/* Checkpoints keep restarts short: the patches of o's current scope (the state this journal
 * holds) written as a new file - a checkpoint record, then one apply record per patch, the
 * sequence going on - aside, fsync'd, renamed over the journal, the directory fsync'd. On
 * failure the old journal is untouched and still in use. _due: enough records or bytes since
 * the last one (lq_journal_opts), or the file still holds old-format records. */
int lq_journal_checkpoint_due(const lq_journal *j);
int lq_journal_checkpoint(lq_journal *j, const lq_overlay *o, lq_err *err);

/* Inspection without an overlay (`larql journal check`): every intact record and every bad
 * range of the file, in order, to fn (may be NULL; non-zero from it stops the scan). */
typedef struct lq_journal_item {
    int valid;              /* 1: an intact record; 0: a bad range */
    uint64_t offset, length;
    int version;            /* 1 (LQJ1) or 2 */
    uint64_t seq;           /* version 2 */
    int seq_break;          /* its sequence does not follow the previous record's */
    const char *payload;    /* the record's JSON (not NUL-terminated), valid during the call */
    size_t payload_len;
} lq_journal_item;
typedef struct lq_journal_report {
    size_t records, legacy, bad_ranges, seq_breaks;
    uint64_t bad_bytes, size;
    uint64_t seq_first, seq_last;   /* of the version-2 records (0 when none) */
    uint64_t first_bad;             /* offset of the first bad range or break (size: none) */
    size_t after_bad;               /* intact records after it */
    int torn_tail;                  /* the only damage is a tail an open would cut */
    int corrupt;                    /* an open would refuse the file */
} lq_journal_report;
int lq_journal_scan(const char *path, int (*fn)(void *ctx, const lq_journal_item *it), void *ctx,
                    lq_journal_report *rep, lq_err *err);
/* Writes the intact records of path, in order and renumbered, to out (written as out.partial,
 * fsync'd, renamed; out may be path itself, never written in place); rep says what was
 * skipped. */
int lq_journal_salvage(const char *path, const char *out, lq_journal_report *rep, lq_err *err);

/* ---- edits ---- */

/* KNN: LARQL's exact-prompt override. COMPOSE: LARQL's composed feature. SUBJECT (the
 * default of /v1/insert and LQL INSERT): a subject-gated edit that every phrasing of the
 * question reads back, in chat too (src/vindex/subject_edit.c). */
typedef enum lq_insert_mode { LQ_INSERT_KNN = 0, LQ_INSERT_COMPOSE = 1, LQ_INSERT_SUBJECT = 2 } lq_insert_mode;

/* Bounds on an insert (LQ_ERANGE past them): the texts' lengths in bytes, and COMPOSE's alpha
 * (the balance scales it by at most 1.6^16 or 0.7^16; an edit that cannot reach its target
 * within them is refused). */
#define LQ_EDIT_MAX_TEXT 256
#define LQ_EDIT_ID_MAX 64
/* Every component of every vector an op carries is finite and at most this in magnitude
 * (else the op is refused): a thousand edits adding such values to one residual stay far
 * inside float range, so no sequence of accepted edits can make a forward pass overflow. */
#define LQ_EDIT_MAX_COMPONENT 1e6f
#define LQ_EDIT_MAX_ALPHA 16

typedef struct lq_insert_params {
    const char *entity, *relation, *target; /* required, non-empty */
    int layer;          /* -1 = default: KNN: knowledge band's last layer - 1 (LQL);
                           COMPOSE: every layer from the middle of the knowledge band to its
                           end (LARQL's /v1/insert); else that layer (must exist) */
    int mode;           /* lq_insert_mode; default KNN (LQL's default) */
    float confidence;   /* default KNN 1.0, COMPOSE 0.9 */
    float alpha;        /* COMPOSE: down vector scale; default 0.25 */
} lq_insert_params;
void lq_insert_params_init(lq_insert_params *p);

typedef struct lq_insert_result {
    int mode;           /* as applied */
    int n_layers;       /* layers written */
    int layers[64];     /* the first 64 of them */
    int features[64];   /* COMPOSE: the slot used at each layer */
    int weights;        /* 1: the key/gate came from a residual (model weights); 0: from the
                           entity's embedding (no weights) */
    size_t knn_total;   /* KNN entries after the insert */
    float down_scale;   /* COMPOSE with weights: alpha times the balance factor */
    int n_forced;       /* SUBJECT: target tokens written on the logits (see lq_patch_op force) */
    char id[LQ_EDIT_ID_MAX + 1]; /* the edit's id (lq_overlay_delete_edit) */
    float target_prob;  /* COMPOSE with weights: the target's probability after the prompt
                           "The {relation} of {entity} is" with the insert (walk mode) */
} lq_insert_result;

/* INSERT INTO EDGES (entity, relation, target). m: the model run for residual keys (NULL:
 * the mean entity embedding is the key, as LARQL without weights). KNN: key = the residual
 * at the install layer for "The {relation, '-'/'_' as spaces} of {entity} is", target_id =
 * first token of " " + target. COMPOSE: per layer a free slot (no base meta and no
 * override, else the lowest c_score), gate = unit(residual) scaled to the mean norm of the
 * layer's first 100 gate rows, up = unit(residual), down = alpha * mean embedding of the
 * target's tokens, meta {target, first target token, confidence}; with m, the down vector is
 * then balanced as LARQL's LQL COMPOSE does (x1.6 / x0.7 per round, at most 16, until the
 * target's probability after the canonical prompt is within [0.30, 0.95] in walk mode). Errors: empty fields,
 * layer outside the model, target encoding to nothing. The ops go to the live patch. */
int lq_overlay_insert(lq_overlay *o, struct lq_model *m, const lq_insert_params *p,
                      lq_insert_result *r, lq_err *err);

/* WHERE of DELETE / UPDATE: a conjunction; NULL / -1 = no condition. entity matches a
 * feature whose target (override or base top token) or provenance entity contains it
 * (case-insensitive); relation needs a probe label or an insert's relation (substring, case
 * insensitive). With neither layer nor feature nor entity nor relation -> LQ_EINVAL (no
 * unbounded DELETE). KNN entries match on entity (and relation). feature without layer is
 * that feature at every layer that has it. match (optional): a further test on each feature
 * that passed the fields (token = its target text, relation = its label or NULL), for the
 * operators the fields cannot say (ranges, !=, IN); it counts as a condition. */
typedef struct lq_edit_where {
    const char *entity, *relation;
    int layer, feature;
    int (*match)(void *ctx, int layer, int feature, const char *token, const char *relation);
    void *match_ctx;
} lq_edit_where;
void lq_edit_where_init(lq_edit_where *w);

/* DELETE FROM EDGES WHERE ...: tombstones every matching feature and drops matching KNN
 * entries; *n counts both. */
int lq_overlay_delete(lq_overlay *o, const lq_edit_where *w, size_t *n, lq_err *err);
/* UPDATE EDGES SET target = t, confidence = c WHERE ...: rewrites the metadata of every
 * matching feature (set_target NULL / set_confidence NaN = unchanged). */
int lq_overlay_update(lq_overlay *o, const lq_edit_where *w, const char *set_target,
                      float set_confidence, size_t *n, lq_err *err);

/* ---- edits in the forward pass ----
 *
 * An edit set is what an overlay changes inside the forward pass, as an immutable,
 * reference-counted snapshot (src/vindex/edit_set.c): its KNN entries (the override: the
 * first layer whose best entry has cosine > LQ_KNN_COSINE_THRESHOLD with the residual of the
 * row being predicted names the next token) and its composed features (a feature with gate
 * and down vectors at layer l adds a * down to the residual after layer l, a = ((cos - t) /
 * (1 - t))^2 for cos = cosine(gate, residual) above t = LQ_KNN_COSINE_THRESHOLD, else 0).
 * Deleted features are not taken out of the dense FFN; they leave the browse queries. A
 * generation holds a set while the overlay goes on changing. */
typedef struct lq_edit_set lq_edit_set;
/* The overlay's current set (a new reference; cached until the overlay changes, so
 * concurrent readers of one overlay share one copy). NULL only on out-of-memory. */
lq_edit_set *lq_overlay_edit_set(lq_overlay *o, lq_err *err);
/* A set of only the KNN entries of ks (entries of other widths are skipped). */
lq_edit_set *lq_edit_set_from_knn(const lq_knn_store *ks, int n_layer, int hidden, lq_err *err);
lq_edit_set *lq_edit_set_ref(lq_edit_set *s);
/* A number no other set of this process has (>= 1): what a set is, for keys such as
 * lq_generate_params.cache_key. 0 for NULL. */
uint64_t lq_edit_set_serial(const lq_edit_set *s);
void lq_edit_set_unref(lq_edit_set *s); /* NULL-safe */
size_t lq_edit_set_n_knn(const lq_edit_set *s);
size_t lq_edit_set_n_features(const lq_edit_set *s);
size_t lq_edit_set_n_subject(const lq_edit_set *s); /* subject edits (each of its tokens' groups) */

enum {
    LQ_EDITS_COMPOSE = 1,   /* composed features add to the residual */
    LQ_EDITS_KNN_MATCH = 2, /* KNN matches are recorded (lq_edit_hook_match) */
    LQ_EDITS_KNN_FORCE = 4, /* ... and the match's target becomes the next token */
};
/* A forward hook over s for one request (lq_session_set_hook, lq_generate_params.hook): it
 * holds a reference to s and its own match state. Free with lq_edit_hook_free (or let the
 * scheduler release it). */
int lq_edit_set_hook(lq_edit_set *s, int flags, lq_resid_hook **out, lq_err *err);
void lq_edit_hook_free(lq_resid_hook *h); /* NULL-safe */
typedef struct lq_edit_match {
    int layer;
    float cosine;
    int32_t target_id;
    const char *target, *entity, *relation; /* valid while the hook lives */
} lq_edit_match;
/* The KNN match of the row at position pos in the hook's last pass over it: 1 and *out
 * filled, or 0. */
int lq_edit_hook_match(const lq_resid_hook *h, int pos, lq_edit_match *out);

/* ---- evaluating edits (larql eval-edits, src/vindex/edit_eval.c) ----
 *
 * A suite is JSONL, one case a line: {"edit": {"entity", "relation", "target", "mode"?:
 * "subject"|"knn"|"compose", "layer"?}, "canonical": prompt, "old"?: the answer before the
 * edit (else the model's own first prediction), "paraphrases": [prompt], "chat": [question],
 * "neighbourhood": [{"prompt", "answer"}], "unrelated": [prompt]}. Each edit goes into a
 * scratch overlay over v (nothing persisted) and is scored with CounterFact's definitions
 * (efficacy, paraphrase), the greedy chat answer and continuation, the neighbourhood and the
 * unrelated prompts' logits; *json_out (malloc'd) holds every case and the totals. */
typedef struct lq_edit_eval_opts {
    int together;        /* 0: one edit at a time; N: the first N edits applied together */
    int mode;            /* -1: each case's own mode (default SUBJECT); else lq_insert_mode */
    int max_cases;       /* 0: all */
    const char *fluency_text; /* NULL, or a held-out text: perplexity with the edits / without */
    size_t fluency_len;
    int fluency_ctx;     /* its window (default 128) */
} lq_edit_eval_opts;
void lq_edit_eval_opts_init(lq_edit_eval_opts *o);
int lq_edit_eval(const lq_vindex *v, struct lq_model *m, const char *suite, size_t len, const lq_edit_eval_opts *o,
                 char **json_out, lq_err *err);

/* ---- edits as rows ----
 * Every insert gives its ops one id (lq_insert_result.id). The rows of the overlay's live
 * edits, newest last, as JSON: [{"id", "entity", "relation", "target", "mode": "subject" |
 * "knn" | "compose", "layer", "patch"}]. */
int lq_overlay_edit_rows_json(const lq_overlay *o, char **json_out, lq_err *err);
/* Removes one edit (all its ops) by id, recorded as a delete_edit op in the live patch (a
 * journal replays it). Unknown id -> LQ_ENOTFOUND. */
int lq_overlay_delete_edit(lq_overlay *o, const char *id, lq_err *err);

/* ---- edits shared through a table (src/vindex/edit_log.c) ----
 *
 * pg_infer's infer.edits and `larql serve --state-db` keep edits as rows that several
 * processes share. The process that writes an edit computes it once against its current
 * state (a plan: the ops the direct edit would append, as a patch of their own named name,
 * o unchanged; *out NULL when the edit changes nothing), stores the patch's .vlp in a row,
 * and every process folds the rows it sees into an lq_edit_log in id order. */
int lq_overlay_plan_insert(const lq_overlay *o, struct lq_model *m, const lq_insert_params *p, const char *name,
                           lq_insert_result *r, lq_patch **out, lq_err *err);
int lq_overlay_plan_delete(const lq_overlay *o, const lq_edit_where *w, const char *name, size_t *n,
                           lq_patch **out, lq_err *err);
int lq_overlay_plan_update(const lq_overlay *o, const lq_edit_where *w, const char *set_target, float set_confidence,
                           const char *name, size_t *n, lq_patch **out, lq_err *err);

/* The live patch's ops from index n0 on, moved into a patch of their own named name (the
 * live patch cut back to n0): a direct edit made on a log's fold, taken out to be stored as
 * a row and applied back as one. *out NULL when there are none. */
int lq_overlay_take_edits(lq_overlay *o, size_t n0, const char *name, lq_patch **out, lq_err *err);

/* An overlay over base that is the fold of a table's rows (id, .vlp), each applied as the
 * patch "edit:<id>" (lq_edit_log_row_name). init_knn (may be NULL) is copied. */
typedef struct lq_edit_log lq_edit_log;
int lq_edit_log_create(const lq_vindex *base, const lq_knn_store *init_knn, lq_edit_log **out, lq_err *err);
void lq_edit_log_free(lq_edit_log *l); /* NULL-safe */
/* The fold (owned by the log; the same object for the log's life, its version rising with
 * every change, refolds included). */
lq_overlay *lq_edit_log_overlay(const lq_edit_log *l);
size_t lq_edit_log_n_applied(const lq_edit_log *l);
size_t lq_edit_log_n_failed(const lq_edit_log *l);
int64_t lq_edit_log_last_id(const lq_edit_log *l); /* -1 before the first row */
/* Sync, step 1: want = the ids the table holds now, ascending. *from = the index in want of
 * the first row to apply (step 2, in order). When the applied ids are not a prefix of want
 * (a row removed, or a lower id committed after a higher one was applied) the fold restarts
 * from the base: *reset = 1 and *from = 0. */
int lq_edit_log_sync(lq_edit_log *l, const int64_t *want, size_t n, size_t *from, int *reset, lq_err *err);
/* Step 2: row id (above every applied id) with its .vlp text, applied as the patch name
 * (NULL: "edit:<id>"; a patch a server applied by name keeps it). A row that does not apply
 * (another model's patch, a damaged row, a name already applied) returns its error but
 * counts as applied (lq_edit_log_n_failed), so later syncs do not refold for it. */
int lq_edit_log_apply(lq_edit_log *l, int64_t id, const char *name, const char *vlp, size_t len, lq_err *err);
/* The same with the patch already parsed (p is copied; its own name is not used). */
int lq_edit_log_apply_patch(lq_edit_log *l, int64_t id, const char *name, const lq_patch *p, lq_err *err);
void lq_edit_log_row_name(int64_t id, char out[32]);

/* REBALANCE (LARQL's global pass over compose-mode installs): each fact's canonical prompt
 * ("The {relation} of {entity} is") runs with every edit; facts whose target probability is
 * below floor get their down vectors x1.6, above ceiling x0.7 (UPDATE operations in the live
 * edits), until all are in [floor, ceiling] or max_iters passes. m may be NULL only when
 * there is no compose fact (r->n_facts 0). */
typedef struct lq_rebalance_params {
    int max_iters;      /* default 16 */
    float floor, ceiling; /* default 0.30, 0.95 (LARQL's balance band) */
} lq_rebalance_params;
void lq_rebalance_params_init(lq_rebalance_params *p);
typedef struct lq_rebalance_result {
    size_t n_facts;     /* compose facts found */
    int iters;          /* passes run */
    size_t in_band, below, above; /* at the last pass */
} lq_rebalance_result;
int lq_overlay_rebalance(lq_overlay *o, struct lq_model *m, const lq_rebalance_params *p, lq_rebalance_result *r,
                         lq_err *err);

/* ---- DIFF and MERGE (src/vindex/diff.c) ---- */

typedef enum lq_diff_status { LQ_DIFF_MODIFIED = 0, LQ_DIFF_REMOVED, LQ_DIFF_ADDED } lq_diff_status;
typedef struct lq_diff_row {
    int layer, feature, status;     /* lq_diff_status */
    int has_a, has_b;
    lq_feature_meta a, b;           /* valid when has_a / has_b */
    const char *tok_a, *tok_b;      /* their top tokens' text, NULL when absent */
} lq_diff_row;
typedef struct lq_diff_params {
    int layer;                      /* -1 = every layer */
    const char *relation, *entity;  /* NULL, or a substring of a side's probe label / top token */
} lq_diff_params;
/* Returns nonzero to stop the scan. */
typedef int (*lq_diff_fn)(void *ctx, const lq_diff_row *r);
/* LARQL's DIFF: a feature differs when its top token differs or its c_score moved by more
 * than 0.01 (modified), or only one side has metadata (removed / added). Layers and
 * features in order. a and b may be overlay views (lq_overlay_vindex). p may be NULL. */
int lq_vindex_diff(const lq_vindex *a, const lq_vindex *b, const lq_diff_params *p, lq_diff_fn fn, void *ctx,
                   lq_err *err);
/* DIFF ... INTO PATCH: the patch that takes a to b (every difference, no limit): removed ->
 * DELETE, modified / added -> UPDATE of the slot's down_meta to b's. */
int lq_vindex_diff_patch(const lq_vindex *a, const lq_vindex *b, const lq_diff_params *p, const char *name,
                         lq_patch **out, lq_err *err);

/* MERGE conflict rules (LARQL's ConflictStrategy): a slot the target already has metadata
 * for takes the source's (KEEP_SOURCE, the default), keeps its own (KEEP_TARGET), or takes
 * the one with the higher confidence (HIGHEST_CONFIDENCE). */
typedef enum lq_merge_strategy { LQ_MERGE_KEEP_SOURCE = 0, LQ_MERGE_KEEP_TARGET, LQ_MERGE_HIGHEST_CONFIDENCE } lq_merge_strategy;
/* Every feature of src with metadata written into o's metadata (recorded in the live
 * edits; features already equal are counted but not recorded). src must have o's shape. */
int lq_overlay_merge_vindex(lq_overlay *o, const lq_vindex *src, int strategy, size_t *merged, size_t *skipped,
                            lq_err *err);
/* The operations of a patch merged into o's live edits: slot operations under the rule
 * (confidence: the op's, else its down_meta's), KNN operations always. */
int lq_overlay_merge_patch(lq_overlay *o, const lq_patch *src, int strategy, size_t *merged, size_t *skipped,
                           lq_err *err);

/* COMPILE ... ON CONFLICT (LARQL's CompileConflict) when several patches (the applied ones
 * and the live edits) write the same slot: LAST_WINS is the overlay's own order (*out =
 * NULL: compile o itself); FAIL -> LQ_EINVAL naming the slot and two of the patches;
 * HIGHEST_CONFIDENCE -> *out = a clone of o where each contested slot holds the write with
 * the highest confidence (NULL when nothing is contested). */
typedef enum lq_conflict_rule { LQ_CONFLICT_LAST_WINS = 0, LQ_CONFLICT_HIGHEST_CONFIDENCE, LQ_CONFLICT_FAIL } lq_conflict_rule;
int lq_overlay_resolve(const lq_overlay *o, int rule, lq_overlay **out, lq_err *err);

/* COMPACT: the overlay folded into the vindex directory it is over (dir): compiled into
 * "dir.compact-new" (every file fsync'd), then dir renamed to "dir.compact-old", the new one
 * to dir, the parent directory fsync'd, and the old tree removed. An interruption leaves
 * either the old directory in place or both complete trees (dir.compact-old holds the old
 * one). The caller reopens dir. */
int lq_overlay_compact(const lq_overlay *o, const char *dir, lq_err *err);
/* Slots holding a down vector (composed features): the forward pass runs them from the
 * overlay; a compiled vindex keeps their gate rows and metadata, not their down vectors. */
size_t lq_overlay_n_composed(const lq_overlay *o);

/* COMPILE CURRENT INTO VINDEX "out_dir": the base vindex rewritten with the overlay baked in
 * (gate rows and down_meta records of patched features, tombstones as zero rows / empty
 * records, knn_store.bin), written to a temporary sibling and renamed into place. */
int lq_overlay_compile(const lq_overlay *o, const char *out_dir, lq_err *err);
/* COMPILE ... INTO MODEL "path": m (the overlay's vindex's model) written as a GGUF
 * (lq_model_save_gguf; tokenizer_dir: the vindex directory) carrying the edits as metadata
 * `larql.patches` (a JSON array of {"name", "patch": .vlp}): base_knn (the vindex's own
 * knn_store.bin, may be NULL) as a patch of insert_knn ops, then every patch of o in order.
 * No edit is folded into a weight (src/vindex/compile_model.c says why): other engines run the
 * base model. Written to path.partial and renamed; an existing path -> LQ_EINVAL.
 * *n_patches (may be NULL): the patches carried. */
int lq_overlay_compile_model(const lq_overlay *o, const lq_knn_store *base_knn, const lq_model *m,
                             const char *tokenizer_dir, const char *path, size_t *n_patches, lq_err *err);
/* Applies to o, in order, the patches a GGUF written by lq_overlay_compile_model carries
 * (none: LQ_OK, *n_applied 0). A malformed list or a patch o refuses -> an error (the
 * patches before it stay applied: the caller drops the overlay). */
int lq_overlay_apply_carried(lq_overlay *o, const char *gguf_path, size_t *n_applied, lq_err *err);
/* The forward-pass edits a GGUF written by lq_overlay_compile_model carries, as an edit set
 * (*out NULL, LQ_OK when the file carries none): the patches applied as LQL's USE MODEL applies
 * them (a temporary browse-level vindex of the file, removed before returning, and an overlay
 * over it), so that a front end running the file with lq_edit_set_hook answers as the vindex
 * with its patches. n_threads: the builder's (0 = cores). *n_patches (may be NULL): the
 * patches applied. A malformed list or a patch the vindex refuses -> an error naming the file. */
int lq_carried_edits(const char *gguf_path, int n_threads, lq_edit_set **out, size_t *n_patches, lq_err *err);
/* lq_model_open, and for a GGUF file (not a vindex directory) the edits it carries
 * (lq_carried_edits): *hook (may be NULL) a hook for the caller's session
 * (lq_session_set_hook, lq_generate_params.hook; free with lq_edit_hook_free after the
 * session), *edits (may be NULL; one of the two is required) the set itself (a reference:
 * lq_edit_set_unref), for lq_infer_params.edits. Both NULL when the file carries none or
 * no_carried (the base model, as other engines run it). The one way the command-line front
 * ends open a model they run. */
int lq_model_open_edited(const char *path, const lq_model_opts *opts, int no_carried, lq_model **out,
                         lq_resid_hook **hook, lq_edit_set **edits, size_t *n_patches, lq_err *err);

#ifdef __cplusplus
}
#endif
#endif
