/* pg_infer: infer_insert, infer_update and infer_delete, each a row of infer.edits (how the
 * rows reach a model: edits_fold.c). */
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
	pgi_edits_forget_check(m);
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
