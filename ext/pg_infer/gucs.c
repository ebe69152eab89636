/* pg_infer: the infer.* settings (GUCs): the ones that act, and pg_infer's that have no
 * effect in this build (accepted, with a NOTICE naming what to use instead). */
#include "pg_infer.h"

#include <string.h>

#include "utils/guc.h"

char	   *pgi_default_model = NULL;
char	   *pgi_data_directory = NULL;
int			pgi_max_memory = 8192;
bool		pgi_auto_download = true;
double		pgi_gate_threshold = 5.0;
int			pgi_describe_top_k = 20;
char	   *pgi_walk_embed_mode = NULL;
int			pgi_similarity_max_layers = 0;
char	   *pgi_default_server_url = NULL;
int			pgi_remote_timeout_ms = 30000;

/* pg_infer's settings that have no effect in this build. They stay defined, so that SET,
 * postgresql.conf lines and ALTER ... SET written for pg_infer are accepted (the "infer"
 * prefix is reserved: an unknown infer.* name is an error), but setting one to anything
 * other than its default in a session (SET, ALTER ... SET, a function's SET) draws a NOTICE
 * that names what to use instead. */
static char *pgi_log_level = NULL;
static bool pgi_use_hnsw = false;
static int	pgi_hnsw_ef_search = 200;
static bool pgi_warmup_on_load = false;
static bool pgi_build_hnsw_on_load = false;
static bool pgi_parallel_similarity = false;
static int	pgi_gate_cache_max_layers = 4;
static char *pgi_default_backend = NULL;
static char *pgi_grid_url = NULL;
static int	pgi_grid_poll_interval = 30;
static int	pgi_am_hnsw_ef_search = 64;
static int	pgi_rerank_oversampling = 4;

static void
no_effect(GucSource source, bool is_default, const char *name, const char *instead)
{
	/* sources from PGC_S_INTERACTIVE on are the session's own SET and the validation of
	 * ALTER ... SET; a server or database default is not the session's doing */
	if (source >= PGC_S_INTERACTIVE && !is_default)
		ereport(NOTICE,
				(errmsg("infer.%s has no effect in this build", name),
				 errhint("%s", instead)));
}

#define NO_EFFECT_BOOL(fn, name, dflt, instead) \
	static bool fn(bool *newval, void **extra, GucSource source) \
	{ no_effect(source, *newval == (dflt), name, instead); return true; }
#define NO_EFFECT_INT(fn, name, dflt, instead) \
	static bool fn(int *newval, void **extra, GucSource source) \
	{ no_effect(source, *newval == (dflt), name, instead); return true; }
#define NO_EFFECT_STR(fn, name, dflt, instead) \
	static bool fn(char **newval, void **extra, GucSource source) \
	{ no_effect(source, (dflt) == NULL ? *newval == NULL || **newval == 0 \
				: *newval != NULL && strcmp(*newval, (dflt)) == 0, name, instead); return true; }

#define EXACT_SCAN "The gate scan is exact and reads the mapped rows in place (no HNSW, no decode cache); " \
	"for speed narrow the query (infer.describe_top_k, a layer argument) or use a remote model."
NO_EFFECT_INT(chk_max_memory, "max_memory", 8192,
			  "Local models are shared read-only mappings: the page cache keeps one copy for every "
			  "backend. infer_stats() shows what this backend maps; infer_drop_model() releases a model.")
NO_EFFECT_STR(chk_log_level, "log_level", "info",
			  "pg_infer reports through PostgreSQL: use log_min_messages and client_min_messages.")
NO_EFFECT_BOOL(chk_use_hnsw, "use_hnsw", false, EXACT_SCAN)
NO_EFFECT_INT(chk_hnsw_ef_search, "hnsw_ef_search", 200, EXACT_SCAN)
NO_EFFECT_BOOL(chk_warmup_on_load, "warmup_on_load", false,
			   "Gate rows are read in place, nothing is decoded at load: SELECT infer_warmup(model, entities) "
			   "pages in the rows a set of entities touches.")
NO_EFFECT_BOOL(chk_build_hnsw_on_load, "build_hnsw_on_load", false, EXACT_SCAN)
NO_EFFECT_BOOL(chk_parallel_similarity, "parallel_similarity", false,
			   "Backends run no threads; similar_to_many() on a remote model already runs its walks "
			   "concurrently, and infer.similarity_max_layers makes a local similar_to() cheaper.")
NO_EFFECT_INT(chk_gate_cache_max_layers, "gate_cache_max_layers", 4,
			  "Gate rows are read in place from the mapped file; there is no decode cache to size.")
NO_EFFECT_STR(chk_default_backend, "default_backend", "local",
			  "The backend is a property of each registered model: register with "
			  "infer_create_model() (local) or infer_create_model_remote() (remote).")
NO_EFFECT_INT(chk_grid_poll_interval, "grid_poll_interval", 30,
			  "The grid backend is not supported: register each server with infer_create_model_remote().")
NO_EFFECT_INT(chk_am_hnsw_ef_search, "am_hnsw_ef_search", 64,
			  "An infer index scores every row exactly; there is no beam to widen.")
NO_EFFECT_INT(chk_rerank_oversampling, "rerank_oversampling", 4,
			  "An infer index scores every row exactly; there is nothing to re-rank.")

void
pgi_gucs_define(void)
{
	DefineCustomStringVariable("infer.default_model",
							   "Model used when a query names none (and by the operators).",
							   NULL, &pgi_default_model, NULL, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("infer.data_directory",
							   "Directory local vindex sources must lie under (relative: under the data directory).",
							   NULL, &pgi_data_directory, "infer", PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("infer.max_memory",
							"Per-backend memory budget for cached models, in MB (no effect in this build: "
							"local models are shared mappings; NOTICE when set).",
							NULL, &pgi_max_memory, 8192, 512, 65536, PGC_SIGHUP, 0, chk_max_memory, NULL, NULL);
	DefineCustomBoolVariable("infer.auto_download",
							 "Allow hf:// sources (not supported by this build: convert with larql instead).",
							 NULL, &pgi_auto_download, true, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("infer.gate_threshold",
							 "Gate score an edge needs in describe() and implies(); 0 = adaptive (0.1 x best).",
							 NULL, &pgi_gate_threshold, 5.0, 0.0, 1000.0, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("infer.describe_top_k",
							"Features per layer examined by describe() and describe_layers().",
							NULL, &pgi_describe_top_k, 20, 1, 1000, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("infer.walk_embed_mode",
							   "Query vector of walk(): 'last' = the last token (the only mode liblarql walks).",
							   NULL, &pgi_walk_embed_mode, "last", PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("infer.log_level", "Log filter (no effect in this build; NOTICE when set).",
							   NULL, &pgi_log_level, "info", PGC_SUSET, 0, chk_log_level, NULL, NULL);
	DefineCustomBoolVariable("infer.use_hnsw", "Approximate gate KNN (no effect in this build; NOTICE when set).",
							 NULL, &pgi_use_hnsw, false, PGC_USERSET, 0, chk_use_hnsw, NULL, NULL);
	DefineCustomIntVariable("infer.hnsw_ef_search", "HNSW beam (no effect in this build; NOTICE when set).",
							NULL, &pgi_hnsw_ef_search, 200, 50, 500, PGC_USERSET, 0, chk_hnsw_ef_search, NULL, NULL);
	DefineCustomBoolVariable("infer.warmup_on_load", "Decode gates at load (no effect in this build; NOTICE when set).",
							 NULL, &pgi_warmup_on_load, false, PGC_USERSET, 0, chk_warmup_on_load, NULL, NULL);
	DefineCustomBoolVariable("infer.build_hnsw_on_load", "Build HNSW at load (no effect in this build; NOTICE when set).",
							 NULL, &pgi_build_hnsw_on_load, false, PGC_USERSET, 0, chk_build_hnsw_on_load, NULL, NULL);
	DefineCustomIntVariable("infer.similarity_max_layers",
							"Layers similar_to() samples on a local model: 0 = all, m = every (L/m)-th layer, m of them.",
							NULL, &pgi_similarity_max_layers, 0, 0, 100, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("infer.parallel_similarity",
							 "Threads per similar_to() (no effect in this build; NOTICE when set).",
							 NULL, &pgi_parallel_similarity, false, PGC_USERSET, 0, chk_parallel_similarity, NULL, NULL);
	DefineCustomIntVariable("infer.gate_cache_max_layers",
							"Decoded gate layers kept (no effect in this build; NOTICE when set).",
							NULL, &pgi_gate_cache_max_layers, 4, 0, 100, PGC_USERSET, 0, chk_gate_cache_max_layers, NULL, NULL);
	DefineCustomStringVariable("infer.default_backend", "Reserved (no effect in this build; NOTICE when set).",
							   NULL, &pgi_default_backend, "local", PGC_USERSET, 0, chk_default_backend, NULL, NULL);
	DefineCustomStringVariable("infer.default_server_url",
							   "Server URL for remote models registered without one.",
							   NULL, &pgi_default_server_url, NULL, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("infer.remote_timeout_ms", "Timeout of one request to a remote server, in ms.",
							NULL, &pgi_remote_timeout_ms, 30000, 100, 3600000, PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("infer.grid_url", "Grid discovery URL (no effect in this build; NOTICE when set).",
							   NULL, &pgi_grid_url, NULL, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("infer.grid_poll_interval", "Grid refresh period, s (no effect in this build; NOTICE when set).",
							NULL, &pgi_grid_poll_interval, 30, 5, 3600, PGC_SUSET, 0, chk_grid_poll_interval, NULL, NULL);
	DefineCustomIntVariable("infer.am_hnsw_ef_search", "Index scan beam (no effect in this build; NOTICE when set).",
							NULL, &pgi_am_hnsw_ef_search, 64, 16, 4096, PGC_USERSET, 0, chk_am_hnsw_ef_search, NULL, NULL);
	DefineCustomIntVariable("infer.rerank_oversampling", "Index re-rank factor (no effect in this build; NOTICE when set).",
							NULL, &pgi_rerank_oversampling, 4, 1, 32, PGC_USERSET, 0, chk_rerank_oversampling, NULL, NULL);
	MarkGUCPrefixReserved("infer");
}
