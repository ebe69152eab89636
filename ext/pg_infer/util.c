/* pg_infer: liblarql statuses as ereport, argument helpers, JSON through jsonb. */
#include "pg_infer.h"

#include <string.h>

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

int
pgi_lq_sqlstate(int rc)
{
	switch (rc)
	{
		case LQ_EINVAL:
			return ERRCODE_INVALID_PARAMETER_VALUE;
		case LQ_ERANGE:
			return ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE;
		case LQ_ENOTFOUND:
			return ERRCODE_UNDEFINED_FILE;
		case LQ_EIO:
			return ERRCODE_IO_ERROR;
		case LQ_ENOMEM:
			return ERRCODE_OUT_OF_MEMORY;
		case LQ_EFORMAT:
			return ERRCODE_DATA_CORRUPTED;
		case LQ_EUNSUPPORTED:
			return ERRCODE_FEATURE_NOT_SUPPORTED;
		case LQ_ECONTEXT:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case LQ_EBUSY:
			return ERRCODE_CONFIGURATION_LIMIT_EXCEEDED;
		case LQ_ECANCELED:
			return ERRCODE_QUERY_CANCELED;
		default:
			return ERRCODE_INTERNAL_ERROR;
	}
}

void
pgi_lq_error(int rc, const lq_err *err, const char *what)
{
	const char *msg = err && err->msg[0] ? err->msg : lq_status_str(rc);

	/* a page of a mapped file vanished under the call (any status may follow from the zero
	 * page, or the hook stopped the scan): that is the error to report */
	pgi_mapcheck();
	/* the scan stopped for a cancel or a terminate: PostgreSQL reports it its own way */
	if (rc == LQ_ECANCELED)
		CHECK_FOR_INTERRUPTS();
	ereport(ERROR,
			(errcode(pgi_lq_sqlstate(rc)),
			 errmsg("%s: %s", what, msg),
			 errdetail("liblarql status: %s", lq_status_str(rc))));
}

char *
pgi_text_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", name)));
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

char *
pgi_text_arg_opt(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/* Band of a layer as pg_infer names it: "" without bands in index.json, "unknown" outside
 * every band. */
const char *
pgi_band_name(const lq_vindex_info *in, int layer)
{
	static const char *const names[3] = {"syntax", "knowledge", "output"};

	if (!in->has_bands)
		return "";
	for (int i = 0; i < 3; i++)
		if (layer >= in->bands[i].start && layer <= in->bands[i].end)
			return names[i];
	return "unknown";
}

/* ---- JSON bodies (liblarql's _json results, server replies) through jsonb ---- */

JsonbContainer *
pgi_json_parse(const char *body)
{
	Jsonb	   *jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(body)));

	return &jb->root;
}

static bool
jget(JsonbContainer *c, const char *key, JsonbValue *out)
{
	JsonbValue *v;

	if (c == NULL || !JsonContainerIsObject(c))
		return false;
	v = getKeyJsonValueFromContainer(c, key, strlen(key), out);
	return v != NULL;
}

char *
pgi_jstr(JsonbContainer *c, const char *key)
{
	JsonbValue	v;

	if (!jget(c, key, &v) || v.type != jbvString)
		return pstrdup("");
	return pnstrdup(v.val.string.val, v.val.string.len);
}

double
pgi_jnum(JsonbContainer *c, const char *key)
{
	JsonbValue	v;

	if (!jget(c, key, &v) || v.type != jbvNumeric)
		return 0;
	return DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v.val.numeric)));
}

bool
pgi_jhas(JsonbContainer *c, const char *key, enum jbvType type)
{
	JsonbValue	v;

	return jget(c, key, &v) && v.type == type;
}

JsonbContainer *
pgi_jarr(JsonbContainer *c, const char *key, int *n)
{
	JsonbValue	v;

	*n = 0;
	if (!jget(c, key, &v) || v.type != jbvBinary || !JsonContainerIsArray(v.val.binary.data))
		return NULL;
	*n = (int) JsonContainerSize(v.val.binary.data);
	return v.val.binary.data;
}

/* Element i of an array: an object/array container, or NULL for a scalar. */
JsonbContainer *
pgi_jelem(JsonbContainer *arr, int i)
{
	JsonbValue *v = getIthJsonbValueFromContainer(arr, (uint32) i);

	return v && v->type == jbvBinary ? v->val.binary.data : NULL;
}

/* Element i of an array of strings, palloc'd; "" for other values. */
char *
pgi_jelem_str(JsonbContainer *arr, int i)
{
	JsonbValue *v = getIthJsonbValueFromContainer(arr, (uint32) i);

	return v && v->type == jbvString ? pnstrdup(v->val.string.val, v->val.string.len) : pstrdup("");
}

void
pgi_check_prompt(const char *s)
{
	if (s[0] == 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("empty prompt")));
}

JsonbContainer *
pgi_json_body(char *body)
{
	char	   *copy = pstrdup(body);

	free(body);
	return pgi_json_parse(copy);
}

int
pgi_feature_rows(JsonbContainer *j, const char *key, PgiFeatureRow **out)
{
	int			n;
	JsonbContainer *arr = pgi_jarr(j, key, &n);
	PgiFeatureRow *r = palloc0(sizeof *r * (n + 1));

	for (int i = 0; i < n; i++)
	{
		JsonbContainer *o = pgi_jelem(arr, i);

		r[i].feature = (int) pgi_jnum(o, "feature");
		r[i].token = pgi_jstr(o, "token");
		r[i].score = pgi_jnum(o, "score");
		r[i].also = pgi_jstr(o, "also");
	}
	*out = r;
	return n;
}
