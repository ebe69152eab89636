/* pg_infer: the model registry (infer.models) and the per-backend model cache.
 *
 * Each backend process opens a registered vindex once, on its first query, and keeps it
 * until the model is dropped or re-registered in that backend (pg_infer's behaviour: no
 * cross-backend invalidation). Every file of a vindex is a read-only shared mapping, so
 * 100 backends hold one copy in the page cache; the engine model that infer() needs is
 * opened with hugepages = -1 for the same reason (never the private 2 MB-page copy). */
#include "pg_infer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "catalog/pg_type.h"
#include "larql/patch.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"

static PgiModel *cache_head;
static int64 stat_hits, stat_misses, stat_queries;
static bool thread_scan_set;

PG_FUNCTION_INFO_V1(pgi_create_model);
PG_FUNCTION_INFO_V1(pgi_create_model_remote);
PG_FUNCTION_INFO_V1(pgi_create_models_remote);
PG_FUNCTION_INFO_V1(pgi_drop_model);
PG_FUNCTION_INFO_V1(pgi_create_model_grid);
PG_FUNCTION_INFO_V1(pgi_detect_server);
PG_FUNCTION_INFO_V1(pgi_stats);
PG_FUNCTION_INFO_V1(pgi_warmup);
PG_FUNCTION_INFO_V1(pgi_server_stats);

static void
model_free(PgiModel *m)
{
	lq_model_close(m->lm);
	lq_edit_log_free(m->log);
	lq_vindex_close(m->base);
	if (m->name)
		pfree(m->name);
	if (m->path)
		pfree(m->path);
	if (m->url)
		pfree(m->url);
	pfree(m);
}

/* Forgets a model in this backend (its mappings are unmapped). */
static void
cache_evict(const char *name)
{
	for (PgiModel **pp = &cache_head; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->name, name) == 0)
		{
			PgiModel   *m = *pp;

			*pp = m->next;
			model_free(m);
			return;
		}
}

static void
cache_insert(PgiModel *m)
{
	m->next = cache_head;
	cache_head = m;
}

/* Opens a vindex on this thread only: one scan thread, so no worker thread ever exists.
 * *files_id: the identity of its files, taken before they are opened (a change during the
 * open shows at the next use). */
static lq_vindex *
open_vindex(const char *path, uint64 *files_id)
{
	lq_vindex_open_opts oo = {0};
	lq_vindex  *vx = NULL;
	lq_err		err = {0};
	int			rc;

	if (!thread_scan_set)
	{
		if ((rc = lq_vindex_set_thread_scan(1, &err)) != 0)
			pgi_lq_error(rc, &err, "cannot configure gate scans");
		lq_vindex_set_thread_cancel(pgi_cancel_hook, NULL);
		thread_scan_set = true;
	}
	*files_id = pgi_files_identity(path);
	oo.n_threads = 1;
	if ((rc = lq_vindex_open(path, &oo, &vx, &err)) != 0)
		pgi_lq_error(rc, &err, "cannot open vindex");
	return vx;
}

void
pgi_cache_close_local(void)
{
	PgiModel  **pp = &cache_head;

	while (*pp)
	{
		PgiModel   *m = *pp;

		if (m->backend == PGI_LOCAL)
		{
			*pp = m->next;
			model_free(m);
		}
		else
			pp = &m->next;
	}
}

static char *
strip_slash(const char *url)
{
	char	   *u = pstrdup(url);
	size_t		n = strlen(u);

	while (n > 0 && u[n - 1] == '/')
		u[--n] = 0;
	return u;
}

static char *
detect_socket(void)
{
	const char *cands[3] = {"/run/larql.sock", "/tmp/larql.sock", NULL};
	char		buf[MAXPGPATH];
	struct stat st;

	snprintf(buf, sizeof buf, "%s/larql.sock", DataDir ? DataDir : ".");
	cands[2] = buf;
	for (int i = 0; i < 3; i++)
		if (stat(cands[i], &st) == 0 && S_ISSOCK(st.st_mode))
			return psprintf("uds://%s", cands[i]);
	return NULL;
}

/* Reads the registry row of name (SPI) and opens the model in TopMemoryContext. */
static PgiModel *
model_load(const char *name)
{
	MemoryContext callcxt = CurrentMemoryContext;
	Oid			argt[1] = {TEXTOID};
	Datum		argv[1];
	char	   *path = NULL,
			   *backend = NULL,
			   *url = NULL;
	bool		found = false;
	PgiModel   *m;
	MemoryContext old;

	argv[0] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT vindex_path, backend, server_url FROM infer.models WHERE model_name = $1",
							  1, argt, argv, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "cannot read infer.models");
	if (SPI_processed > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	td = SPI_tuptable->tupdesc;
		char	   *v;

		found = true;
		old = MemoryContextSwitchTo(callcxt);
		if ((v = SPI_getvalue(tup, td, 1)) != NULL)
			path = pstrdup(v);
		if ((v = SPI_getvalue(tup, td, 2)) != NULL)
			backend = pstrdup(v);
		if ((v = SPI_getvalue(tup, td, 3)) != NULL)
			url = pstrdup(v);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	if (!found)
		ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT), errmsg("model not found: %s", name)));

	old = MemoryContextSwitchTo(TopMemoryContext);
	m = palloc0(sizeof *m);
	m->name = pstrdup(name);
	MemoryContextSwitchTo(old);
	if (backend == NULL || backend[0] == 0 || strcmp(backend, "local") == 0)
	{
		m->backend = PGI_LOCAL;
		m->ops = &pgi_local_ops;
		m->path = MemoryContextStrdup(TopMemoryContext, path ? path : "");
		PG_TRY();
		{
			m->base = open_vindex(m->path, &m->files_id);
			m->vx = m->base;
		}
		PG_CATCH();
		{
			model_free(m);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	else if (strcmp(backend, "remote") == 0)
	{
		if (url == NULL || url[0] == 0)
			url = pgi_default_server_url && pgi_default_server_url[0] ? pgi_default_server_url : detect_socket();
		if (url == NULL)
		{
			model_free(m);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIG_FILE_ERROR),
					 errmsg("remote model '%s' has no server_url, infer.default_server_url is not set "
							"and no larql server socket was found", name)));
		}
		m->backend = PGI_REMOTE;
		m->ops = &pgi_remote_ops;
		m->url = MemoryContextStrdup(TopMemoryContext, strip_slash(url));
	}
	else
	{
		model_free(m);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown backend '%s' for model '%s' (expected 'local' or 'remote')", backend, name)));
	}
	return m;
}

PgiModel *
pgi_model_by_name(const char *name)
{
	PgiModel   *m;

	stat_queries++;
	/* a page vanished under an earlier query: its models are closed and opened again */
	(void) pgi_fault_forget();
	for (m = cache_head; m; m = m->next)
		if (strcmp(m->name, name) == 0)
		{
			/* files replaced, truncated or rewritten since they were mapped: re-open them
			 * rather than read what may be gone */
			if (m->backend == PGI_LOCAL && pgi_files_identity(m->path) != m->files_id)
			{
				cache_evict(name);
				break;
			}
			stat_hits++;
			pgi_edits_sync(m);
			return m;
		}
	stat_misses++;
	m = model_load(name);
	cache_insert(m);
	pgi_edits_sync(m);
	return m;
}

PgiModel *
pgi_model_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *name = argno >= 0 ? pgi_text_arg_opt(fcinfo, argno) : NULL;

	if (name == NULL)
	{
		if (pgi_default_model == NULL || pgi_default_model[0] == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("no default model configured — SET infer.default_model first")));
		name = pgi_default_model;
	}
	return pgi_model_by_name(name);
}

/* infer.data_directory as an absolute path. */
static char *
data_dir(void)
{
	const char *d = pgi_data_directory && pgi_data_directory[0] ? pgi_data_directory : "infer";

	if (d[0] == '/')
		return pstrdup(d);
	return psprintf("%s/%s", DataDir ? DataDir : ".", d);
}

static void
upsert(const char *name, const char *path, const char *source, const char *level, int L, int H, int V,
	   const char *backend, const char *url)
{
	Oid			argt[9] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, INT4OID, INT4OID, TEXTOID, TEXTOID};
	Datum		argv[9];
	char		nulls[9] = "         ";

	argv[0] = CStringGetTextDatum(name);
	argv[1] = CStringGetTextDatum(path);
	argv[2] = CStringGetTextDatum(source);
	argv[3] = CStringGetTextDatum(level);
	argv[4] = Int32GetDatum(L);
	argv[5] = Int32GetDatum(H);
	argv[6] = Int32GetDatum(V);
	argv[7] = CStringGetTextDatum(backend);
	if (url)
		argv[8] = CStringGetTextDatum(url);
	else
	{
		argv[8] = (Datum) 0;
		nulls[8] = 'n';
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("INSERT INTO infer.models (model_name, vindex_path, source, extract_level, "
							  "num_layers, hidden_size, vocab_size, backend, server_url) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
							  "ON CONFLICT (model_name) DO UPDATE SET vindex_path = EXCLUDED.vindex_path, "
							  "source = EXCLUDED.source, extract_level = EXCLUDED.extract_level, "
							  "num_layers = EXCLUDED.num_layers, hidden_size = EXCLUDED.hidden_size, "
							  "vocab_size = EXCLUDED.vocab_size, backend = EXCLUDED.backend, "
							  "server_url = EXCLUDED.server_url, registered_at = now()",
							  9, argt, argv, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "cannot write infer.models");
	SPI_finish();
}

static void
check_model_name(const char *name)
{
	if (name[0] == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("model name must not be empty")));
}

/* infer_create_model(model_name, source, extract_level): registers a local vindex directory
 * (absolute, or relative to infer.data_directory; it must lie under that directory). The
 * vindex is opened and validated now; extract_level is ignored (the vindex's own level is
 * recorded), as in pg_infer. */
Datum
pgi_create_model(PG_FUNCTION_ARGS)
{
	char	   *name = pgi_text_arg(fcinfo, 0, "model_name");
	char	   *source = pgi_text_arg(fcinfo, 1, "source");
	char	   *dir = data_dir();
	char	   *path,
				canon[PATH_MAX],
				dcanon[PATH_MAX];
	size_t		dl;
	lq_vindex  *vx;
	const lq_vindex_info *in;
	PgiModel   *m;
	char	   *msg;
	uint64		files_id;

	check_model_name(name);
	if (strncmp(source, "hf://", 5) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg(pgi_auto_download ? "hf:// sources are not supported by this build"
						: "configuration error: infer.auto_download is disabled"),
				 errhint("Convert the model with `larql convert gguf-to-vindex` and register the directory.")));
	if (source[0] == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("source must not be empty")));
	path = source[0] == '/' ? source : psprintf("%s/%s", dir, source);
	if (realpath(path, canon) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("vindex directory \"%s\" does not exist", source)));
	if (realpath(dir, dcanon) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("path not permitted: %s is not under allowed directory %s (which does not exist)",
						source, dir)));
	dl = strlen(dcanon);
	if (strncmp(canon, dcanon, dl) != 0 || (canon[dl] != '/' && canon[dl] != 0 && strcmp(dcanon, "/") != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("path not permitted: %s is not under allowed directory %s", source, dcanon),
				 errhint("Set infer.data_directory (superuser) to the directory holding your vindexes.")));

	vx = open_vindex(canon, &files_id);
	in = lq_vindex_get_info(vx);
	msg = psprintf("model '%s' registered (local, %d layers, hidden=%d, level=%s)", name, in->num_layers,
				   in->hidden_size, in->extract_level_str);
	PG_TRY();
	{
		upsert(name, canon, source, in->extract_level_str, in->num_layers, in->hidden_size,
			   in->vocab_size, "local", NULL);
	}
	PG_CATCH();
	{
		lq_vindex_close(vx);
		PG_RE_THROW();
	}
	PG_END_TRY();
	cache_evict(name);
	m = MemoryContextAllocZero(TopMemoryContext, sizeof *m);
	m->name = MemoryContextStrdup(TopMemoryContext, name);
	m->path = MemoryContextStrdup(TopMemoryContext, canon);
	m->backend = PGI_LOCAL;
	m->ops = &pgi_local_ops;
	m->base = vx;
	m->vx = vx;
	m->files_id = files_id;
	cache_insert(m);
	PG_RETURN_TEXT_P(cstring_to_text(msg));
}

Datum
pgi_create_model_remote(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *url = strip_slash(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	int			L = 0,
				H = 0;

	check_model_name(name);
	pgi_remote_stats(url, &L, &H);
	upsert(name, "", url, "remote", L, H, 0, "remote", url);
	cache_evict(name);
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("model '%s' registered (remote=%s, %d layers, hidden=%d)",
											  name, url, L, H)));
}

Datum
pgi_create_models_remote(PG_FUNCTION_ARGS)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(0);
	char	   *url = strip_slash(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				done = 0,
				L = 0,
				H = 0;

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	pgi_remote_stats(url, &L, &H);
	for (int i = 0; i < n; i++)
	{
		char	   *name;

		if (nulls[i])
			continue;
		name = TextDatumGetCString(elems[i]);
		check_model_name(name);
		upsert(name, "", url, "remote", L, H, 0, "remote", url);
		cache_evict(name);
		done++;
	}
	PG_RETURN_INT32(done);
}

/* infer_create_model_grid(model_name, model_id): pg_infer's experimental grid backend is not
 * implemented; the function exists so that scripts written for pg_infer get a clear ERROR. */
Datum
pgi_create_model_grid(PG_FUNCTION_ARGS)
{
	const char *grid = GetConfigOption("infer.grid_url", true, false);

	if (grid == NULL || grid[0] == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("infer.grid_url must be set before calling infer_create_model_grid()")));
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("the grid backend is not supported by this build"),
			 errhint("Register each server with infer_create_model_remote().")));
	PG_RETURN_NULL();
}

uint64
pgi_registry_exec(const char *sql, const char *name, int expect)
{
	Oid			argt[1] = {TEXTOID};
	Datum		argv[1];
	uint64		n;

	argv[0] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(sql, 1, argt, argv, NULL, expect == SPI_OK_SELECT, 0) != expect)
		elog(ERROR, "cannot access infer.models");
	n = SPI_processed;
	SPI_finish();
	return n;
}

Datum
pgi_drop_model(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));

	(void) pgi_registry_exec("DELETE FROM infer.models WHERE model_name = $1", name, SPI_OK_DELETE);
	cache_evict(name);
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("model '%s' dropped", name)));
}

Datum
pgi_detect_server(PG_FUNCTION_ARGS)
{
	char	   *s = detect_socket();

	if (s == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(s));
}

/* Bytes a local model maps (gate rows and embeddings; shared with every other process). */
static double
model_mb(const PgiModel *m)
{
	const lq_vindex_info *in;
	double		b;

	if (m->vx == NULL)
		return 0;
	in = lq_vindex_get_info(m->vx);
	b = (double) in->total_features * in->hidden_size * (in->dtype == LQ_VDT_F16 ? 2 : 4);
	b += (double) in->vocab_size * in->hidden_size * (in->embed_dtype == LQ_VDT_F16 ? 2 : 4);
	return b / (1024.0 * 1024.0);
}

Datum
pgi_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsi = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		vals[5];
	bool		nulls[5] = {0};
	int			n = 0;
	double		mb = 0;

	InitMaterializedSRF(fcinfo, 0);
	for (PgiModel *m = cache_head; m; m = m->next)
	{
		n++;
		mb += model_mb(m);
	}
	vals[0] = Int64GetDatum(stat_hits);
	vals[1] = Int64GetDatum(stat_misses);
	vals[2] = Int64GetDatum(stat_queries);
	vals[3] = Int32GetDatum(n);
	vals[4] = Float8GetDatum(mb);
	tuplestore_putvalues(rsi->setResult, rsi->setDesc, vals, nulls);
	return (Datum) 0;
}

/* infer_warmup(model, entities): runs describe over each entity so the gate rows they touch
 * are paged in; "<n> warmed, 0 already cached" (a remote server answers its own way). */
Datum
pgi_warmup(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(1);
	PgiModel   *m = pgi_model_by_name(name);
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				warmed = 0;

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (m->backend == PGI_REMOTE)
	{
		StringInfoData b;
		char	   *body;

		initStringInfo(&b);
		appendStringInfoString(&b, "{\"entities\":[");
		for (int i = 0, k = 0; i < n; i++)
			if (!nulls[i])
			{
				if (k++)
					appendStringInfoChar(&b, ',');
				escape_json(&b, TextDatumGetCString(elems[i]));
			}
		appendStringInfoString(&b, "]}");
		body = pgi_http_request(m->url, "/v1/warmup", b.data, true);
		if (body == NULL)		/* a server without the route */
			PG_RETURN_TEXT_P(cstring_to_text("0 warmed, 0 already cached"));
		{
			JsonbContainer *j = pgi_json_parse(body);

			PG_RETURN_TEXT_P(cstring_to_text(psprintf("%.0f warmed, %.0f already cached", pgi_jnum(j, "warmed"),
													  pgi_jnum(j, "already_cached"))));
		}
	}
	for (int i = 0; i < n; i++)
	{
		lq_describe_params p;
		lq_describe_result r;
		lq_err		err = {0};
		char	   *e;

		CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			continue;
		e = TextDatumGetCString(elems[i]);
		if (e[0] == 0)
			continue;
		lq_describe_params_init(&p);
		p.entity = e;
		p.band = "all";
		p.limit = pgi_describe_top_k;
		if (lq_vindex_describe(m->vx, &p, &r, &err) == 0)
		{
			lq_describe_result_free(&r);
			warmed++;
		}
	}
	pgi_mapcheck();
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("%d warmed, 0 already cached", warmed)));
}

/* infer_server_stats(model): the server's cache counters; no rows for a local model or a
 * server without GET /v1/cache/stats. */
Datum
pgi_server_stats(PG_FUNCTION_ARGS)
{
	char	   *name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	PgiModel   *m = pgi_model_by_name(name);
	char	   *body;

	InitMaterializedSRF(fcinfo, 0);
	if (m->backend == PGI_REMOTE && (body = pgi_http_request(m->url, "/v1/cache/stats", NULL, true)) != NULL)
	{
		JsonbContainer *j = pgi_json_parse(body);
		ReturnSetInfo *rsi = (ReturnSetInfo *) fcinfo->resultinfo;
		Datum		v[5];
		bool		nl[5] = {0};

		v[0] = Int64GetDatum((int64) pgi_jnum(j, "entries"));
		v[1] = Int64GetDatum((int64) pgi_jnum(j, "hit_count"));
		v[2] = Int64GetDatum((int64) pgi_jnum(j, "miss_count"));
		v[3] = Int64GetDatum((int64) pgi_jnum(j, "eviction_count"));
		v[4] = Float8GetDatum(pgi_jnum(j, "memory_bytes") / (1024.0 * 1024.0));
		tuplestore_putvalues(rsi->setResult, rsi->setDesc, v, nl);
	}
	return (Datum) 0;
}
