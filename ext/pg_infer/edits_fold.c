/* pg_infer: knowledge edits written from SQL, kept as rows of infer.edits: the fold (the
 * writing functions are in edits.c).
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

void
pgi_edits_forget_check(PgiModel *m)
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

