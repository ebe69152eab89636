/* pg_infer: shared declarations of the extension's C files.
 *
 * pg_infer.c   _PG_init only
 * gucs.c       the infer.* GUCs
 * util.c       liblarql status -> ereport, argument helpers, JSON through jsonb
 * registry.c   infer.models (SPI), the per-backend model cache, model management functions
 * edits_fold.c the rows of infer.edits folded into a local model before it answers
 * edits.c      infer_insert / infer_update / infer_delete (rows of infer.edits)
 * queries.c    the knowledge query functions (describe, walk, ...) and the operators
 * am.c         the infer index access method
 * local.c      the local backend: liblarql over the vindex mapped in this backend
 * remote.c     the remote backend: HTTP to `larql serve` with libcurl, no threads
 * guard.c      vindex files that change under a backend (SIGBUS, identity), the cancel hook
 * queries.c and am.c ask a model through m->ops (local.c or remote.c), never by testing its
 * backend. Arrows point one way: pg_infer -> am -> queries -> edits -> registry -> local,
 * remote -> edits_fold, guard -> util, gucs (tests/cli/py/file_cycles.py checks there is no
 * circle).
 *
 * Everything runs on the backend's own thread: vindexes are opened with one scan thread
 * (no worker threads exist), so liblarql never runs concurrently with PostgreSQL code and
 * never calls back into it. Library results are malloc'd; they are copied into palloc'd
 * memory and freed before anything can ereport. */
#ifndef PG_INFER_H
#define PG_INFER_H

#include "postgres.h"
#include "fmgr.h"
#include "datatype/timestamp.h"
#include "storage/lock.h"

#include "larql/model.h"
#include "larql/status.h"
#include "larql/vindex.h"

/* ---- GUCs (gucs.c) ---- */
extern void pgi_gucs_define(void);	/* from _PG_init */
extern char *pgi_default_model;
extern char *pgi_data_directory;
extern int pgi_max_memory;
extern bool pgi_auto_download;
extern double pgi_gate_threshold;
extern int pgi_describe_top_k;
extern char *pgi_walk_embed_mode;
extern int pgi_similarity_max_layers;
extern char *pgi_default_server_url;
extern int pgi_remote_timeout_ms;

/* ---- errors (util.c) ---- */
/* ERROR for a liblarql status: SQLSTATE from the code, errmsg "<what>: <library message>". */
extern void pgi_lq_error(int rc, const lq_err *err, const char *what) pg_attribute_noreturn();
extern int pgi_lq_sqlstate(int rc);

/* ---- helpers (util.c) ---- */
/* Text argument `argno` as a C string; ERROR "<name> must not be NULL" when NULL. */
extern char *pgi_text_arg(FunctionCallInfo fcinfo, int argno, const char *name);
/* Text argument or NULL. */
extern char *pgi_text_arg_opt(FunctionCallInfo fcinfo, int argno);
/* ERROR "empty prompt" for "" */
extern void pgi_check_prompt(const char *s);
/* Band name of a layer ("" without bands in index.json). */
extern const char *pgi_band_name(const lq_vindex_info *in, int layer);

/* ---- JSON through jsonb (util.c): palloc'd, ERROR on malformed input ---- */
#include "utils/jsonb.h"
extern JsonbContainer *pgi_json_parse(const char *body);
extern char *pgi_jstr(JsonbContainer *c, const char *key);	/* "" when absent */
extern double pgi_jnum(JsonbContainer *c, const char *key);	/* 0 when absent */
extern bool pgi_jhas(JsonbContainer *c, const char *key, enum jbvType type);
extern JsonbContainer *pgi_jarr(JsonbContainer *c, const char *key, int *n);
extern JsonbContainer *pgi_jelem(JsonbContainer *arr, int i);
extern char *pgi_jelem_str(JsonbContainer *arr, int i);
/* A library JSON body (malloc'd) as jsonb; the body is freed. */
extern JsonbContainer *pgi_json_body(char *body);

/* ---- models (registry.c) ---- */
typedef enum PgiBackend { PGI_LOCAL = 0, PGI_REMOTE = 1 } PgiBackend;

typedef struct PgiModel {
	char	   *name;
	PgiBackend	backend;
	const struct PgiOps *ops;	/* what answers its queries: &pgi_local_ops or &pgi_remote_ops */
	char	   *path;			/* local: vindex directory */
	char	   *url;			/* remote: base URL (no trailing '/') */
	lq_vindex  *base;			/* local: opened once per backend, read-only mappings */
	const lq_vindex *vx;		/* local: what queries read: base, or the fold of the model's
								 * edits over it (edits.c) */
	struct lq_edit_log *log;	/* local: infer.edits folded (NULL before the first edit) */
	int64		edits_version;	/* infer.edit_versions of the fold (-1: recheck the rows) */
	LocalTransactionId edits_lxid;	/* the statement that last checked it */
	TimestampTz edits_stmt;
	lq_model   *lm;				/* local: the model for infer(), opened on first use */
	int			num_layers, hidden_size;	/* remote: from GET /v1/stats */
	uint64		files_id;		/* local: pgi_files_identity(path) when opened */
	struct PgiModel *next;
} PgiModel;

/* The model for a query: the explicit name (argument argno when not NULL), else
 * infer.default_model, else ERROR. Opens and caches it on first use in this backend. */
extern PgiModel *pgi_model_arg(FunctionCallInfo fcinfo, int argno);
extern PgiModel *pgi_model_by_name(const char *name);
/* The engine model of a local vindex (for infer(); local.c): opened as a read-only shared mapping. */
extern lq_model *pgi_model_engine(PgiModel *m);
/* Runs sql (one parameter, $1 = name) on the registry through SPI; ERROR unless SPI answers
 * `expect` (SPI_OK_SELECT, SPI_OK_DELETE, ...); returns the rows processed. */
extern uint64 pgi_registry_exec(const char *sql, const char *name, int expect);

/* ---- edits (edits_fold.c) ---- */
/* The next statement re-checks m's edits (after this backend wrote one). */
extern void pgi_edits_forget_check(PgiModel *m);
/* Folds the rows of infer.edits this statement sees into m (at most one check a statement);
 * called by pgi_model_by_name for local models. */
extern void pgi_edits_sync(PgiModel *m);
/* m's overlay when it has edits, else NULL. */
struct lq_overlay;
extern struct lq_overlay *pgi_edits_overlay(PgiModel *m);

/* similar_to(a, b) with model m (queries.c): local liblarql or remote walks. */
extern double pgi_similar(PgiModel *m, const char *a, const char *b);

/* ---- mapped files and cancels (guard.c) ---- */
/* SIGBUS handler; from _PG_init, with what closes every local model (registry.c) */
extern void pgi_guard_init(void (*close_all_local)(void));
/* A page of a mapped file vanished since the last check (the SIGBUS handler recovered it). */
extern bool pgi_fault_pending(void);
/* After reading mapped bytes: ERROR (58030) if a page vanished meanwhile, once every local
 * model of this backend is closed. */
extern void pgi_mapcheck(void);
/* Between queries: a pending fault closes every local model (no ERROR); true if one did. */
extern bool pgi_fault_forget(void);
/* liblarql's cancel hook: a cancel or terminate is pending, or a page vanished. */
extern int	pgi_cancel_hook(void *ctx);
/* Identity of the files liblarql maps in a vindex directory (0: unreadable). */
extern uint64 pgi_files_identity(const char *dir);
/* Closes every local model of this backend (registry.c). */
extern void pgi_cache_close_local(void);

/* ---- index access method (am.c) ---- */
extern void pgi_am_init(void);	/* reloption kind; from _PG_init */

/* ---- remote backend (remote.c) ---- */
typedef struct PgiEdge {
	char	   *target;
	char	   *relation;		/* NULL: classify */
	double		score;
	int			layer;
	int			feature;		/* -1 when unknown (remote) */
	int			n_also;
	char	   *also[5];
} PgiEdge;

typedef struct PgiHit {
	int			layer, feature;
	double		score;
	char	   *token;
} PgiHit;

/* GET base/v1/stats: fills num_layers, hidden_size; returns the "model" string. */
extern char *pgi_remote_stats(const char *url, int *num_layers, int *hidden_size);
/* GET path (with query string) against base; returns the body as palloc'd JSON text, or
 * NULL for HTTP 404 when allow_404. ERRORs on transport failures and other statuses. */
extern char *pgi_http_request(const char *base, const char *path, const char *post_json,
							  bool allow_404);
/* n requests (posts NULL: all GET) on the backend's multi handle, up to 16 in flight at once;
 * out[i] as pgi_http_request answers path i. The first failure in path order is the ERROR. */
extern void pgi_http_many(const char *base, int n, const char *const *paths, const char *const *posts,
						  bool allow_404, char **out);
extern char *pgi_url_escape(const char *s);

/* ---- what a model answers, by where it lives (local.c, remote.c) ----
 * The SQL functions (queries.c, am.c) call through m->ops: local.c runs liblarql over the
 * vindex mapped in this backend, remote.c asks a larql serve over HTTP. A function only one
 * of them can answer refuses the other by name (queries.c). Results are palloc'd. */
typedef struct PgiFeatureRow {
	int			feature;
	char	   *token;
	double		score;
	char	   *also;
} PgiFeatureRow;

typedef struct PgiLayerRow {
	int			layer;
	const char *band;
	int			features;
} PgiLayerRow;

typedef struct PgiOps {
	const char *name;
	/* edges of an entity at or above min_score (per_layer: one edge per hit, not merged) */
	int			(*edges) (PgiModel *m, const char *entity, double min_score, bool per_layer, PgiEdge **out);
	/* the same for each entity (NULL or "": no edges): out[j], counts[j] */
	void		(*edges_many) (PgiModel *m, char **ents, int n, double min_score, PgiEdge **out, int *counts);
	/* features the prompt fires: per layer the top `top` by |score|; layer >= 0: that one */
	int			(*hits) (PgiModel *m, const char *prompt, int top, int layer, PgiHit **out);
	int			(*num_layers) (PgiModel *m);
	/* nearest_to's rows: the features an entity fires at one layer */
	int			(*nearest) (PgiModel *m, const char *entity, int layer, int top, PgiFeatureRow **out);
	/* the relations body ({"relations": [...]}) */
	JsonbContainer *(*relations) (PgiModel *m);
	int			(*layers) (PgiModel *m, PgiLayerRow **out);
	double		(*similar) (PgiModel *m, const char *a, const char *b);
	/* out[i] = similar(texts[i], q); NULL texts are skipped (out[i] = 0) */
	void		(*similar_many) (PgiModel *m, const char *const *texts, int n, const char *q, double *out);
	/* the top next tokens of a prompt and their probabilities */
	int			(*infer) (PgiModel *m, const char *prompt, int top, char ***tokens, double **probs);
} PgiOps;

extern const PgiOps pgi_local_ops;
extern const PgiOps pgi_remote_ops;
/* a library JSON array of feature rows ({feature, token, score, also}) under key */
extern int	pgi_feature_rows(JsonbContainer *j, const char *key, PgiFeatureRow **out);

#endif
