/* pg_infer: knowledge edits written from SQL, kept as rows of infer.edits.
 *
 * infer_insert / infer_delete / infer_update compute the edit once, in the calling backend,
 * against the model's current state (lq_overlay_plan_*: the ops and vectors of the edit, as
 * a .vlp), and insert it as a row. Every backend folds the rows it can see into the model's
 * overlay in id order (lq_edit_log) before it answers a query, so PostgreSQL's visibility
 * is the edits' visibility: the writing transaction sees its edit at once, other sessions
 * after COMMIT, nobody after ROLLBACK; WAL makes it durable and replication carries it.
 * `larql serve --state-db` folds the same table.
 *
 * The cheap check: a trigger on infer.edits sets infer.edit_versions(model) to a fresh value
 * of a sequence on every change (sequence values are never reused, so a rolled-back change
 * leaves a version no backend cached), and notifies channel infer_edits. A backend compares
 * that version with the one it folded, at most once per statement; only when it moved does
 * it list the model's edit ids and fetch the rows it has not applied. */
#include "pg_infer.h"

#include <math.h>
#include <string.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "larql/patch.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(pgi_insert);
PG_FUNCTION_INFO_V1(pgi_delete);
PG_FUNCTION_INFO_V1(pgi_update);

/* The statement this backend last checked the versions in: one check per statement. */
static bool
checked_this_statement(PgiModel *m)
{
	TimestampTz ts = GetCurrentStatementStartTimestamp();

	if (m->edits_lxid == MyProc->lxid && m->edits_stmt == ts)
		return true;
	m->edits_lxid = MyProc->lxid;
	m->edits_stmt = ts;
	return false;
}

static void
edits_forget_check(PgiModel *m)
{
	m->edits_lxid = InvalidLocalTransactionId;
	m->edits_version = -1;
}

/* The model's row in infer.edit_versions (0 when it has none). Inside SPI. */
static int64
current_version(const char *model)
{
	Oid			argt[1] = {TEXTOID};
	Datum		argv[1] = {CStringGetTextDatum(model)};
	bool		isnull;

	if (SPI_execute_with_args("SELECT version FROM infer.edit_versions WHERE model = $1", 1, argt, argv, NULL,
							  false, 1) != SPI_OK_SELECT)
		elog(ERROR, "cannot read infer.edit_versions");
	if (SPI_processed == 0)
		return 0;
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		return isnull ? 0 : DatumGetInt64(d);
	}
}

/* Applies the rows of the result set (id, vectors) whose ids are want[from..] in order. */
static void
apply_rows(PgiModel *m, size_t from)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		nid,
					nvec;
		int64		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &nid));
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &nvec);
		bytea	   *b;
		char	   *name;
		lq_err		err = {0};
		int			rc;

		if (i < from)
			continue;
		if (nvec)
			elog(ERROR, "infer.edits row %lld has no vectors", (long long) id);
		b = DatumGetByteaPP(d);
		name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		rc = lq_edit_log_apply(m->log, id, name, VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b), &err);
		if (rc == LQ_ENOMEM)
			pgi_lq_error(rc, &err, "cannot apply edits");
		if (rc)
			ereport(WARNING,
					(errmsg("edit %lld of model '%s' does not apply and is skipped: %s", (long long) id, m->name,
							err.msg)));
	}
}

/* (id, vectors, patch name) of the model's rows in id order; vectors only past after_id; the
 * name of a patch applied by name (op 'patch', named by entity), else NULL. Inside SPI. */
static void
rows_query(const char *model, int64 after_id)
{
	Oid			argt[2] = {TEXTOID, INT8OID};
	Datum		argv[2] = {CStringGetTextDatum(model), Int64GetDatum(after_id)};

	if (SPI_execute_with_args("SELECT id, CASE WHEN id > $2 THEN vectors END, CASE WHEN op = 'patch' THEN entity END "
							  "FROM infer.edits WHERE model = $1 ORDER BY id", 2, argt, argv, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "cannot read infer.edits");
}

/* Brings m's overlay to the rows of infer.edits this statement can see. */
void
pgi_edits_sync(PgiModel *m)
{
	int64		ver;
	int64	   *ids;
	size_t		n,
				from = 0;
	int			reset = 0,
				rc;
	lq_err		err = {0};

	if (m->backend != PGI_LOCAL || checked_this_statement(m))
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ver = current_version(m->name);
	if (ver == m->edits_version)
	{
		SPI_finish();
		return;
	}
	if (m->log == NULL &&
		(rc = lq_edit_log_create(m->base, lq_vindex_knn_store(m->base), &m->log, &err)) != 0)
		pgi_lq_error(rc, &err, "cannot create the model's edit log");
	/* every id, with the vectors only of rows past the last one applied (the usual case:
	 * nothing or a few new rows); a refold fetches them all */
	rows_query(m->name, lq_edit_log_last_id(m->log));
	n = (size_t) SPI_processed;
	ids = palloc(sizeof(int64) * (n + 1));
	for (size_t i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if ((rc = lq_edit_log_sync(m->log, ids, n, &from, &reset, &err)) != 0)
		pgi_lq_error(rc, &err, "cannot sync the model's edits");
	if (reset)
		rows_query(m->name, -1);
	apply_rows(m, from);
	SPI_finish();
	m->vx = lq_overlay_vindex(lq_edit_log_overlay(m->log));
	m->edits_version = ver;
	pgi_mapcheck();				/* folding read the vindex's mapped rows */
}

lq_overlay *
pgi_edits_overlay(PgiModel *m)
{
	return m->log && lq_edit_log_n_applied(m->log) ? lq_edit_log_overlay(m->log) : NULL;
}

/* ---- writing ---- */

static PgiModel *
local_model(FunctionCallInfo fcinfo, int argno, const char *what)
{
	PgiModel   *m = pgi_model_arg(fcinfo, argno);

	if (m->backend != PGI_LOCAL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s: model '%s' is remote; its edits are made on its server", what, m->name),
				 errhint("POST /v1/insert to the server, or run it with --state-db on this database so that "
						 "its edits are rows of infer.edits.")));
	if (m->log == NULL)
	{
		lq_err		err = {0};
		int			rc = lq_edit_log_create(m->base, lq_vindex_knn_store(m->base), &m->log, &err);

		if (rc)
			pgi_lq_error(rc, &err, "cannot create the model's edit log");
		m->vx = lq_overlay_vindex(lq_edit_log_overlay(m->log));
	}
	return m;
}

static int64
next_edit_id(void)
{
	bool		isnull;

	if (SPI_execute("SELECT nextval(pg_get_serial_sequence('infer.edits', 'id'))", false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "cannot take an id for infer.edits");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

typedef struct EditRow
{
	const char *op,
			   *entity,
			   *relation,
			   *target,
			   *mode,
			   *edit_id;
	int			layer;			/* -1: NULL */
} EditRow;

/* Stores the planned patch as row id and applies it to this backend's fold at once (the
 * transaction's own edit is visible to its next statement; a rollback takes the row away
 * and the next check refolds without it). Inside SPI; frees p. */
static void
store_edit(PgiModel *m, int64 id, lq_patch *p, const EditRow *r)
{
	Oid			argt[10] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, TEXTOID, TEXTOID, BYTEAOID};
	Datum		argv[10];
	char		nulls[11] = "          ";
	char	   *json = NULL;
	bytea	   *b;
	size_t		len;
	lq_err		err = {0};
	int			rc = lq_patch_json(p, &json, &err);

	lq_patch_free(p);
	if (rc)
		pgi_lq_error(rc, &err, "cannot serialise the edit");
	len = strlen(json);
	b = palloc(VARHDRSZ + len);
	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), json, len);
	argv[0] = Int64GetDatum(id);
	argv[1] = CStringGetTextDatum(m->name);
	argv[2] = CStringGetTextDatum(r->op);
	argv[3] = CStringGetTextDatum(r->entity);
#define OPT_TEXT(i, s) do { if (s) argv[i] = CStringGetTextDatum(s); else { argv[i] = (Datum) 0; nulls[i] = 'n'; } } while (0)
	OPT_TEXT(4, r->relation);
	OPT_TEXT(5, r->target);
	if (r->layer >= 0)
		argv[6] = Int32GetDatum(r->layer);
	else
	{
		argv[6] = (Datum) 0;
		nulls[6] = 'n';
	}
	OPT_TEXT(7, r->mode);
	OPT_TEXT(8, r->edit_id);
#undef OPT_TEXT
	argv[9] = PointerGetDatum(b);
	if (SPI_execute_with_args("INSERT INTO infer.edits (id, model, op, entity, relation, target, layer, mode, "
							  "edit_id, vectors) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
							  10, argt, argv, nulls, false, 0) != SPI_OK_INSERT)
	{
		free(json);
		elog(ERROR, "cannot insert into infer.edits");
	}
	/* ids come from a sequence taken after every row this backend applied was committed or
	 * written, so this one is above them all */
	rc = lq_edit_log_apply(m->log, id, NULL, json, len, &err);
	free(json);
	if (rc)
		pgi_lq_error(rc, &err, "cannot apply the edit");
	m->vx = lq_overlay_vindex(lq_edit_log_overlay(m->log));
	edits_forget_check(m);
}

/* infer_insert(entity, relation, target, model, mode, layer, alpha) -> the row's id */
Datum
pgi_insert(PG_FUNCTION_ARGS)
{
	char	   *entity = pgi_text_arg(fcinfo, 0, "entity");
	char	   *relation = pgi_text_arg(fcinfo, 1, "relation");
	char	   *target = pgi_text_arg(fcinfo, 2, "target");
	PgiModel   *m = local_model(fcinfo, 3, "infer_insert");
	char	   *mode = pgi_text_arg_opt(fcinfo, 4);
	lq_insert_params ip;
	lq_insert_result res;
	lq_model   *lm = NULL;
	lq_patch   *p = NULL;
	lq_err		err = {0};
	char		name[32];
	int64		id;
	int			rc;
	EditRow		row = {0};

	lq_insert_params_init(&ip);
	ip.entity = entity;
	ip.relation = relation;
	ip.target = target;
	ip.layer = PG_ARGISNULL(5) ? -1 : PG_GETARG_INT32(5);
	if (!PG_ARGISNULL(6))
		ip.alpha = (float) PG_GETARG_FLOAT8(6);
	if (mode && strcmp(mode, "subject") && strcmp(mode, "knn") && strcmp(mode, "compose"))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("mode '%s' is not one of subject, compose, knn", mode)));
	/* residual keys need the weights; as the server: a subject edit when they are there,
	 * else COMPOSE with the embedding key */
	if (lq_vindex_get_info(m->base)->has_model_weights)
		lm = pgi_model_engine(m);
	if (!mode)
		mode = lm ? "subject" : "compose";
	ip.mode = !strcmp(mode, "knn") ? LQ_INSERT_KNN : !strcmp(mode, "subject") ? LQ_INSERT_SUBJECT : LQ_INSERT_COMPOSE;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	id = next_edit_id();
	lq_edit_log_row_name(id, name);
	rc = lq_overlay_plan_insert(lq_edit_log_overlay(m->log), lm, &ip, name, &res, &p, &err);
	if (rc == 0)
		pgi_mapcheck();			/* the edit was computed from mapped weights */
	if (rc != 0)
		pgi_lq_error(rc, &err, "insert failed");
	if (p == NULL)
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("insert failed: the edit wrote nothing")));
	row.op = "insert";
	row.entity = entity;
	row.relation = relation;
	row.target = target;
	row.mode = mode;
	row.edit_id = res.id;
	row.layer = res.n_layers == 1 ? res.layers[0] : ip.layer;
	store_edit(m, id, p, &row);
	SPI_finish();
	PG_RETURN_INT64(id);
}

/* DELETE / UPDATE: WHERE entity [AND relation]; NULL when nothing matched (no row). */
static Datum
delete_or_update(FunctionCallInfo fcinfo, bool update)
{
	char	   *entity = pgi_text_arg(fcinfo, 0, "entity");
	char	   *relation = pgi_text_arg_opt(fcinfo, 1);
	char	   *target = update ? pgi_text_arg(fcinfo, 2, "target") : NULL;
	PgiModel   *m = local_model(fcinfo, update ? 3 : 2, update ? "infer_update" : "infer_delete");
	lq_edit_where w;
	lq_patch   *p = NULL;
	lq_err		err = {0};
	size_t		n = 0;
	char		name[32];
	int64		id;
	int			rc;
	EditRow		row = {0};

	if (entity[0] == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("entity must not be empty")));
	lq_edit_where_init(&w);
	w.entity = entity;
	w.relation = relation && relation[0] ? relation : NULL;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	id = next_edit_id();
	lq_edit_log_row_name(id, name);
	rc = update ? lq_overlay_plan_update(lq_edit_log_overlay(m->log), &w, target, NAN, name, &n, &p, &err)
		: lq_overlay_plan_delete(lq_edit_log_overlay(m->log), &w, name, &n, &p, &err);
	if (rc == 0)
		pgi_mapcheck();
	if (rc)
		pgi_lq_error(rc, &err, update ? "update failed" : "delete failed");
	if (p == NULL)
	{
		SPI_finish();
		ereport(NOTICE, (errmsg("no feature or edit of '%s' matched: nothing %s", entity,
								update ? "updated" : "deleted")));
		PG_RETURN_NULL();
	}
	row.op = update ? "update" : "delete";
	row.entity = entity;
	row.relation = w.relation;
	row.target = target;
	row.layer = -1;
	store_edit(m, id, p, &row);
	SPI_finish();
	ereport(NOTICE, (errmsg("%zu feature(s) and edit(s) %s", n, update ? "updated" : "deleted")));
	PG_RETURN_INT64(id);
}

Datum
pgi_delete(PG_FUNCTION_ARGS)
{
	return delete_or_update(fcinfo, false);
}

Datum
pgi_update(PG_FUNCTION_ARGS)
{
	return delete_or_update(fcinfo, true);
}
