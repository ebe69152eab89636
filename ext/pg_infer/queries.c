/* pg_infer: the knowledge queries as SQL functions, and the <~>, <~, @> operators.
 *
 * Every function resolves its model (argument, else infer.default_model), asks liblarql
 * (local) or `larql serve` (remote) and materialises its rows. Library results are copied
 * into palloc'd rows and freed before anything can ereport, so an ERROR never leaks them. */
#include "pg_infer.h"

#include "larql/patch.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(pgi_walk);
PG_FUNCTION_INFO_V1(pgi_explain_walk);
PG_FUNCTION_INFO_V1(pgi_describe);
PG_FUNCTION_INFO_V1(pgi_describe_many);
PG_FUNCTION_INFO_V1(pgi_describe_layers);
PG_FUNCTION_INFO_V1(pgi_nearest_to);
PG_FUNCTION_INFO_V1(pgi_similar_to);
PG_FUNCTION_INFO_V1(pgi_similar_to_many);
PG_FUNCTION_INFO_V1(pgi_implies);
PG_FUNCTION_INFO_V1(pgi_infer);
PG_FUNCTION_INFO_V1(pgi_select);
PG_FUNCTION_INFO_V1(pgi_show_layers);
PG_FUNCTION_INFO_V1(pgi_show_features);
PG_FUNCTION_INFO_V1(pgi_show_relations);
PG_FUNCTION_INFO_V1(pgi_diff);
PG_FUNCTION_INFO_V1(pgi_distance);
PG_FUNCTION_INFO_V1(pgi_similarity);
PG_FUNCTION_INFO_V1(pgi_implies_op);

#define ROWS(fcinfo) ((ReturnSetInfo *) (fcinfo)->resultinfo)

static void
put_row(FunctionCallInfo fcinfo, Datum *vals, bool *nulls)
{
	tuplestore_putvalues(ROWS(fcinfo)->setResult, ROWS(fcinfo)->setDesc, vals, nulls);
}

static Datum
text_datum(const char *s)
{
	return PointerGetDatum(cstring_to_text(s ? s : ""));
}

static void
not_remote(PgiModel *m, const char *op)
{
	if (m->backend == PGI_REMOTE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("operation '%s' is not supported by the remote backend", op)));
}


/* an entity's edges and a prompt's hits, from wherever the model lives (m->ops) */
static int
fetch_edges(PgiModel *m, const char *entity, double min_score, bool per_layer, PgiEdge **out)
{
	pgi_check_prompt(entity);
	return m->ops->edges(m, entity, min_score, per_layer, out);
}

static int
fetch_hits(PgiModel *m, const char *prompt, int top, int layer, PgiHit **out)
{
	pgi_check_prompt(prompt);
	return m->ops->hits(m, prompt, top, layer, out);
}

static int
int_arg(FunctionCallInfo fcinfo, int argno, int dflt)
{
	return PG_NARGS() > argno && !PG_ARGISNULL(argno) ? PG_GETARG_INT32(argno) : dflt;
}

static double
float_arg(FunctionCallInfo fcinfo, int argno, double dflt)
{
	return PG_NARGS() > argno && !PG_ARGISNULL(argno) ? PG_GETARG_FLOAT8(argno) : dflt;
}


static bool
ieq(const char *a, const char *b)
{
	return pg_strcasecmp(a, b) == 0;
}

/* "a, b, c": up to 3 readable top-k tokens of a feature with a positive logit, other than
 * skip1/skip2 (pg_infer's "also"). */
static char *
feature_also(const lq_vindex *vx, int layer, int feature, const char *skip1, const char *skip2)
{
	lq_feature_meta fm;
	StringInfoData b;
	int			n = 0;

	initStringInfo(&b);
	if (!lq_vindex_feature_meta(vx, layer, feature, &fm))
		return b.data;
	for (int k = 0; k < fm.n_top && n < 3; k++)
	{
		const char *t = lq_vindex_token_text(vx, fm.top_ids[k]);

		if (fm.top_logits[k] <= 0 || !lq_vindex_token_readable(t))
			continue;
		if ((skip1 && ieq(t, skip1)) || (skip2 && ieq(t, skip2)))
			continue;
		appendStringInfo(&b, "%s%s", n++ ? ", " : "", t);
	}
	return b.data;
}

/* ---- classify_relation (pg_infer src/relation_classify.rs, described in the spec) ---- */

static const char *const geo_words[] = {
	"city", "country", "state", "region", "continent", "capital", "province", "territory", "island",
	"ocean", "sea", "river", "mountain", "lake", "north", "south", "east", "west", "europe", "asia",
	"africa", "america",
};

static const char *
classify_relation(int layer, int L, const char *target, double score, char **sec, int n_sec)
{
	int			b = L / 3;
	bool		upper = target[0] && isupper((unsigned char) target[0]);

	if (L == 0 || layer < b)
		return "related_to";
	if (layer >= L - b)
		return "similar_to";
	if (upper && score > 30)
		return "part_of";
	if (upper)
	{
		for (int i = 0; i < n_sec; i++)
		{
			char	   *low = asc_tolower(sec[i], strlen(sec[i]));

			for (size_t w = 0; w < lengthof(geo_words); w++)
				if (strstr(low, geo_words[w]))
					return "located_in";
		}
		return "instance_of";
	}
	if (score > 20)
		return "has_property";
	return "related_to";
}

/* ---- describe ---- */




/* pg_infer's threshold: the explicit argument if > 0, else infer.gate_threshold if > 0,
 * else adaptive (0 here: the caller keeps edges >= 0.1 x the best score). */
static double
resolve_threshold(double explicit_thr, bool *adaptive)
{
	*adaptive = false;
	if (explicit_thr > 0)
		return explicit_thr;
	if (pgi_gate_threshold > 0)
		return pgi_gate_threshold;
	*adaptive = true;
	return -HUGE_VAL;
}

/* pg_infer's adaptive threshold: 0.1 x the best score (0 when none is positive). */
static double
adaptive_threshold(const PgiEdge *e, int n)
{
	double		mx = 0;

	for (int i = 0; i < n; i++)
		if (e[i].score > mx)
			mx = e[i].score;
	return mx > 0 ? 0.1 * mx : 0;
}

typedef struct DescRow
{
	const char *relation;
	char	   *target;
	double		confidence;
	int			layer;
} DescRow;

/* describe's rows from its edges: the threshold (adaptive: 0.1 x this entity's best score)
 * and pg_infer's relation classifier where the vindex has no probe label. */
static int
edges_to_rows(PgiModel *m, PgiEdge *e, int n, double t, bool adaptive, DescRow **out)
{
	int			L = m->vx ? lq_vindex_get_info(m->vx)->num_layers : m->num_layers;
	DescRow    *rows = palloc0(sizeof *rows * (n + 1));
	int			k = 0;

	if (adaptive)
		t = adaptive_threshold(e, n);
	for (int i = 0; i < n; i++)
	{
		if (e[i].score < t)
			continue;
		rows[k].target = e[i].target;
		rows[k].relation = e[i].relation ? e[i].relation
			: classify_relation(e[i].layer, L, e[i].target, e[i].score, e[i].also, e[i].n_also);
		rows[k].confidence = e[i].score;
		rows[k].layer = e[i].layer;
		k++;
	}
	*out = rows;
	return k;
}

static int
describe_rows(PgiModel *m, const char *entity, double explicit_thr, DescRow **out)
{
	bool		adaptive;
	double		t = resolve_threshold(explicit_thr, &adaptive);
	PgiEdge    *e = NULL;
	int			n = fetch_edges(m, entity, t, false, &e);

	return edges_to_rows(m, e, n, t, adaptive, out);
}

Datum
pgi_describe(PG_FUNCTION_ARGS)
{
	char	   *entity = pgi_text_arg(fcinfo, 0, "entity");
	PgiModel   *m = pgi_model_arg(fcinfo, 1);
	DescRow    *rows;
	int			n = describe_rows(m, entity, float_arg(fcinfo, 2, 0), &rows);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		v[4] = {text_datum(rows[i].relation), text_datum(rows[i].target),
		Float8GetDatum(rows[i].confidence), Int32GetDatum(rows[i].layer)};
		bool		nl[4] = {0};

		put_row(fcinfo, v, nl);
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

static void
put_many_rows(FunctionCallInfo fcinfo, const char *ent, DescRow *rows, int k)
{
	for (int i = 0; i < k; i++)
	{
		Datum		v[5] = {text_datum(ent), text_datum(rows[i].relation), text_datum(rows[i].target),
		Float8GetDatum(rows[i].confidence), Int32GetDatum(rows[i].layer)};
		bool		nl[5] = {0};

		put_row(fcinfo, v, nl);
	}
}

/* describe_many(entities, model, threshold): describe of every entity, rows tagged with the
 * entity, in array order. Locally one pass over the gate rows scores all entities
 * (lq_vindex_describe_many); NULL, empty and token-less elements give no rows. */
Datum
pgi_describe_many(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	PgiModel   *m;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	bool		adaptive;
	double		t = resolve_threshold(float_arg(fcinfo, 2, 0), &adaptive);
	char	  **ents;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("entities must not be NULL")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	m = pgi_model_arg(fcinfo, 1);
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	ents = palloc0(sizeof(char *) * (n + 1));
	for (int j = 0; j < n; j++)
		ents[j] = nulls[j] ? NULL : TextDatumGetCString(elems[j]);
	InitMaterializedSRF(fcinfo, 0);
	if (n > 0)
	{
		PgiEdge   **edges = palloc0(sizeof(PgiEdge *) * n);
		int		   *counts = palloc0(sizeof(int) * n);

		m->ops->edges_many(m, ents, n, t, edges, counts);
		for (int j = 0; j < n; j++)
		{
			DescRow    *rows;
			int			k;

			if (counts[j] == 0)
				continue;
			k = edges_to_rows(m, edges[j], counts[j], t, adaptive, &rows);
			put_many_rows(fcinfo, ents[j], rows, k);
		}
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

static int
cmp_edge_score(const void *a, const void *b)
{
	const PgiEdge *x = a,
			   *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return 0;
}

/* describe_layers: every hit (layer, feature) passing describe's filters, unmerged, by
 * score; also = up to 3 readable top-k tokens other than the target and the entity. */
Datum
pgi_describe_layers(PG_FUNCTION_ARGS)
{
	char	   *entity = pgi_text_arg(fcinfo, 0, "entity");
	PgiModel   *m = pgi_model_arg(fcinfo, 1);
	bool		adaptive;
	double		t = resolve_threshold(float_arg(fcinfo, 2, 0), &adaptive);
	PgiEdge    *e;
	int			n;

	not_remote(m, "describe_layers");
	n = fetch_edges(m, entity, t, true, &e);
	if (adaptive)
		t = adaptive_threshold(e, n);
	qsort(e, n, sizeof *e, cmp_edge_score);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		int			feature = e[i].feature;
		Datum		v[5];
		bool		nl[5] = {0};

		if (e[i].score < t)
			continue;
		v[0] = Int32GetDatum(e[i].layer);
		v[1] = Int32GetDatum(feature);
		v[2] = text_datum(e[i].target);
		v[3] = Float8GetDatum(e[i].score);
		v[4] = text_datum(feature_also(m->vx, e[i].layer, feature, e[i].target, entity));
		put_row(fcinfo, v, nl);
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

Datum
pgi_implies(PG_FUNCTION_ARGS)
{
	char	   *s = pgi_text_arg(fcinfo, 0, "subject");
	char	   *o = pgi_text_arg(fcinfo, 1, "object");
	PgiModel   *m = pgi_model_arg(fcinfo, 2);
	DescRow    *rows;
	int			n = describe_rows(m, s, 0, &rows);

	for (int i = 0; i < n; i++)
		if (ieq(rows[i].target, o))
			PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(false);
}

Datum
pgi_implies_op(PG_FUNCTION_ARGS)
{
	char	   *s = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *o = text_to_cstring(PG_GETARG_TEXT_PP(1));
	PgiModel   *m = pgi_model_arg(fcinfo, -1);
	DescRow    *rows;
	int			n = describe_rows(m, s, 0, &rows);

	for (int i = 0; i < n; i++)
		if (ieq(rows[i].target, o))
			PG_RETURN_BOOL(true);
	PG_RETURN_BOOL(false);
}

/* ---- walk ---- */



Datum
pgi_walk(PG_FUNCTION_ARGS)
{
	char	   *prompt = pgi_text_arg(fcinfo, 0, "prompt");
	int			top = int_arg(fcinfo, 1, 20);
	PgiModel   *m = pgi_model_arg(fcinfo, 2);
	PgiHit	   *h;
	int			n = fetch_hits(m, prompt, top, -1, &h);

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		v[4] = {Int32GetDatum(h[i].layer), Int32GetDatum(h[i].feature),
		Float8GetDatum(h[i].score), text_datum(h[i].token)};
		bool		nl[4] = {0};

		put_row(fcinfo, v, nl);
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

Datum
pgi_explain_walk(PG_FUNCTION_ARGS)
{
	char	   *prompt = pgi_text_arg(fcinfo, 0, "prompt");
	int			top = int_arg(fcinfo, 1, 5);
	PgiModel   *m = pgi_model_arg(fcinfo, 2);
	PgiHit	   *h;
	int			n = fetch_hits(m, prompt, top, -1, &h);
	const lq_vindex_info *in = m->vx ? lq_vindex_get_info(m->vx) : NULL;

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		v[6];
		bool		nl[6] = {0};

		v[0] = Int32GetDatum(h[i].layer);
		v[1] = text_datum(in ? pgi_band_name(in, h[i].layer) : "");
		v[2] = Int32GetDatum(h[i].feature);
		v[3] = Float8GetDatum(h[i].score);
		v[4] = text_datum(h[i].token);
		v[5] = text_datum(m->vx ? feature_also(m->vx, h[i].layer, h[i].feature, NULL, NULL) : "");
		put_row(fcinfo, v, nl);
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

/* ---- nearest_to, show_features, show_relations: the library's JSON bodies ---- */


static void
check_layer(int layer, int L)
{
	if (layer < 0 || layer >= L)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("layer %d out of range (model has %d layers)", layer, L)));
}

/* Rows {feature, token, score, also}. */
static void
put_feature_rows(FunctionCallInfo fcinfo, const PgiFeatureRow *r, int n)
{
	for (int i = 0; i < n; i++)
	{
		Datum		v[4] = {Int32GetDatum(r[i].feature), text_datum(r[i].token), Float8GetDatum(r[i].score),
		text_datum(r[i].also)};
		bool		nl[4] = {0};

		put_row(fcinfo, v, nl);
	}
}

Datum
pgi_nearest_to(PG_FUNCTION_ARGS)
{
	char	   *entity = pgi_text_arg(fcinfo, 0, "entity");
	int			layer;
	int			top = int_arg(fcinfo, 2, 20);
	PgiModel   *m = pgi_model_arg(fcinfo, 3);
	PgiFeatureRow *rows;
	int			n;

	if (PG_ARGISNULL(1))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("layer must not be NULL")));
	layer = PG_GETARG_INT32(1);
	pgi_check_prompt(entity);
	check_layer(layer, m->ops->num_layers(m));
	n = m->ops->nearest(m, entity, layer, top, &rows);
	InitMaterializedSRF(fcinfo, 0);
	put_feature_rows(fcinfo, rows, n);
	return (Datum) 0;
}

Datum
pgi_show_features(PG_FUNCTION_ARGS)
{
	int			layer;
	char	   *filter = pgi_text_arg_opt(fcinfo, 1);
	double		min_score = float_arg(fcinfo, 2, 0);
	int			top = int_arg(fcinfo, 3, 50);
	PgiModel   *m = pgi_model_arg(fcinfo, 4);
	lq_err		err = {0};
	char	   *body = NULL;
	PgiFeatureRow *rows;
	int			rc,
				n;

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("layer must not be NULL")));
	layer = PG_GETARG_INT32(0);
	not_remote(m, "show_features");
	check_layer(layer, lq_vindex_get_info(m->vx)->num_layers);
	if ((rc = lq_vindex_show_features_json(m->vx, layer, filter, min_score, top < 0 ? 0 : top, &body,
										   &err)) != 0)
		pgi_lq_error(rc, &err, "infer_show_features failed");
	n = pgi_feature_rows(pgi_json_body(body), "features", &rows);
	InitMaterializedSRF(fcinfo, 0);
	put_feature_rows(fcinfo, rows, n);
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

/* infer_show_relations: the library's relations (knowledge band, content tokens, c_score >=
 * 0.2, by count); layers = "min-max" of the layers the token appears in. */
Datum
pgi_show_relations(PG_FUNCTION_ARGS)
{
	PgiModel   *m = pgi_model_arg(fcinfo, 0);
	JsonbContainer *j = m->ops->relations(m),
			   *arr;
	int			n;

	arr = pgi_jarr(j, "relations", &n);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		JsonbContainer *o = pgi_jelem(arr, i),
				   *ex;
		int			ne,
					lo = (int) pgi_jnum(o, "min_layer"),
					hi = (int) pgi_jnum(o, "max_layer");
		StringInfoData b;
		Datum		v[5];
		bool		nl[5] = {0};

		initStringInfo(&b);
		ex = pgi_jarr(o, "examples", &ne);
		for (int k = 0; k < ne; k++)
			appendStringInfo(&b, "%s%s", k ? ", " : "", pgi_jelem_str(ex, k));
		v[0] = text_datum(pgi_jstr(o, "name"));
		v[1] = Int32GetDatum((int32) pgi_jnum(o, "count"));
		v[2] = Float8GetDatum(pgi_jnum(o, "max_score"));
		v[3] = text_datum(lo == hi ? psprintf("%d", lo) : psprintf("%d-%d", lo, hi));
		v[4] = text_datum(b.data);
		put_row(fcinfo, v, nl);
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

Datum
pgi_show_layers(PG_FUNCTION_ARGS)
{
	PgiModel   *m = pgi_model_arg(fcinfo, 0);
	PgiLayerRow *rows;
	int			n = m->ops->layers(m, &rows);

	InitMaterializedSRF(fcinfo, 0);
	for (int l = 0; l < n; l++)
	{
		Datum		v[3] = {Int32GetDatum(rows[l].layer), text_datum(rows[l].band), Int32GetDatum(rows[l].features)};
		bool		nl[3] = {0};

		put_row(fcinfo, v, nl);
	}
	return (Datum) 0;
}

/* infer_select: LARQL's SELECT over down_meta (entity/relation substrings, layer, limit,
 * min confidence, order). */
Datum
pgi_select(PG_FUNCTION_ARGS)
{
	char	   *entity = pgi_text_arg_opt(fcinfo, 0);
	char	   *relation = pgi_text_arg_opt(fcinfo, 1);
	char	   *order_by = pgi_text_arg_opt(fcinfo, 5);
	PgiModel   *m = pgi_model_arg(fcinfo, 6);
	lq_select_params p;
	lq_select_result r;
	lq_err		err = {0};
	Datum	   *vals;
	bool	   *isnull;
	int			rc;
	size_t		n;

	not_remote(m, "select");
	lq_select_params_init(&p);
	p.entity = entity;
	p.relation = relation;
	p.layer = int_arg(fcinfo, 2, -1);
	p.limit = int_arg(fcinfo, 3, 20);
	p.min_confidence = float_arg(fcinfo, 4, NAN);
	p.order_by = order_by;
	if (p.layer >= 0)
		check_layer(p.layer, lq_vindex_get_info(m->vx)->num_layers);
	if ((rc = lq_vindex_select(m->vx, &p, &r, &err)) != 0)
		pgi_lq_error(rc, &err, "infer_select failed");
	n = r.n_edges;
	vals = palloc(sizeof(Datum) * 5 * (n + 1));
	isnull = palloc0(sizeof(bool) * 5 * (n + 1));
	for (size_t i = 0; i < n; i++)
	{
		vals[5 * i] = Int32GetDatum(r.edges[i].layer);
		vals[5 * i + 1] = Int32GetDatum(r.edges[i].feature);
		vals[5 * i + 2] = text_datum(r.edges[i].target);
		vals[5 * i + 3] = Float8GetDatum(r.edges[i].c_score);
		if (r.edges[i].relation)
			vals[5 * i + 4] = text_datum(r.edges[i].relation);
		else
			isnull[5 * i + 4] = true;
	}
	lq_select_result_free(&r);
	InitMaterializedSRF(fcinfo, 0);
	for (size_t i = 0; i < n; i++)
		put_row(fcinfo, &vals[5 * i], &isnull[5 * i]);
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

/* ---- similarity ---- */

double
pgi_similar(PgiModel *m, const char *a, const char *b)
{
	pgi_check_prompt(a);
	pgi_check_prompt(b);
	return m->ops->similar(m, a, b);
}


Datum
pgi_similar_to(PG_FUNCTION_ARGS)
{
	char	   *a = pgi_text_arg(fcinfo, 0, "a");
	char	   *b = pgi_text_arg(fcinfo, 1, "b");

	PG_RETURN_FLOAT8(pgi_similar(pgi_model_arg(fcinfo, 2), a, b));
}

Datum
pgi_similar_to_many(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	char	   *q;
	PgiModel   *m;
	Datum	   *elems,
			   *out;
	bool	   *nulls;
	int			n,
				dims[1],
				lbs[1] = {1};

	if (PG_ARGISNULL(0))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("candidates must not be NULL")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	q = pgi_text_arg(fcinfo, 1, "query");
	m = pgi_model_arg(fcinfo, 2);
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	out = palloc(sizeof(Datum) * (n + 1));
	if (n > 0)
	{
		/* every text at once: a remote model runs the walks concurrently */
		const char **texts = palloc(sizeof(char *) * n);
		double	   *s = palloc(sizeof(double) * n);

		pgi_check_prompt(q);
		for (int i = 0; i < n; i++)
		{
			texts[i] = nulls[i] ? NULL : TextDatumGetCString(elems[i]);
			if (texts[i])
				pgi_check_prompt(texts[i]);
		}
		m->ops->similar_many(m, texts, n, q, s);
		for (int i = 0; i < n; i++)
			out[i] = nulls[i] ? (Datum) 0 : Float8GetDatum(s[i]);
	}
	dims[0] = n;
	if (n == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(FLOAT8OID));
	PG_RETURN_ARRAYTYPE_P(construct_md_array(out, nulls, 1, dims, lbs, FLOAT8OID, 8, FLOAT8PASSBYVAL,
											 TYPALIGN_DOUBLE));
}

Datum
pgi_similarity(PG_FUNCTION_ARGS)
{
	char	   *a = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *b = text_to_cstring(PG_GETARG_TEXT_PP(1));

	PG_RETURN_FLOAT8(pgi_similar(pgi_model_arg(fcinfo, -1), a, b));
}

/* 1 / (1 + score) for a positive score, else the largest double (pg_infer's code). */
Datum
pgi_distance(PG_FUNCTION_ARGS)
{
	char	   *a = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *b = text_to_cstring(PG_GETARG_TEXT_PP(1));
	double		s = pgi_similar(pgi_model_arg(fcinfo, -1), a, b);

	PG_RETURN_FLOAT8(s > 0 ? 1.0 / (1.0 + s) : DBL_MAX);
}

/* ---- infer: the forward pass ---- */


Datum
pgi_infer(PG_FUNCTION_ARGS)
{
	char	   *prompt = pgi_text_arg(fcinfo, 0, "prompt");
	int			top = int_arg(fcinfo, 1, 5);
	PgiModel   *m = pgi_model_arg(fcinfo, 2);
	char	  **toks;
	double	   *probs;
	int			n;

	pgi_check_prompt(prompt);
	if (top < 0)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("top must be >= 0")));
	n = m->ops->infer(m, prompt, top, &toks, &probs);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		Datum		v[3] = {text_datum(toks[i]), Float8GetDatum(probs[i]), Int32GetDatum(i + 1)};
		bool		nl[3] = {0};

		put_row(fcinfo, v, nl);
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}

/* ---- infer_diff: feature metadata of two local models ---- */

Datum
pgi_diff(PG_FUNCTION_ARGS)
{
	char	   *na = pgi_text_arg(fcinfo, 0, "model_a");
	char	   *nb = pgi_text_arg(fcinfo, 1, "model_b");
	int			top = int_arg(fcinfo, 3, 20);
	PgiModel   *a = pgi_model_by_name(na),
			   *b = pgi_model_by_name(nb);
	const lq_vindex_info *ia,
			   *ib;
	int			lo,
				hi,
				rows = 0;

	not_remote(a, "diff");
	not_remote(b, "diff");
	ia = lq_vindex_get_info(a->vx);
	ib = lq_vindex_get_info(b->vx);
	lo = 0;
	hi = ia->num_layers - 1;
	if (!PG_ARGISNULL(2))
	{
		lo = hi = PG_GETARG_INT32(2);
		check_layer(lo, ia->num_layers);
	}
	if (top <= 0)
		top = INT_MAX;
	InitMaterializedSRF(fcinfo, 0);
	/* A's features against B: removed or modified */
	for (int l = lo; l <= hi && rows < top; l++)
	{
		const void *r;
		int			nfa = 0,
					nfb = 0;

		CHECK_FOR_INTERRUPTS();
		(void) lq_vindex_gate_layer(a->vx, l, &r, &nfa, NULL);
		if (l < ib->num_layers)
			(void) lq_vindex_gate_layer(b->vx, l, &r, &nfb, NULL);
		for (int f = 0; f < nfa && rows < top; f++)
		{
			lq_feature_meta fa,
						fb;
			const char *ta,
					   *tb = "",
					   *status = NULL;
			double		sb = 0;
			Datum		v[7];
			bool		nl[7] = {0};

			if (!lq_vindex_feature_meta(a->vx, l, f, &fa))
				continue;
			ta = lq_vindex_token_text(a->vx, fa.top_token_id);
			if (f >= nfb || !lq_vindex_feature_meta(b->vx, l, f, &fb))
				status = "removed";
			else
			{
				tb = lq_vindex_token_text(b->vx, fb.top_token_id);
				sb = fb.c_score;
				if (strcmp(ta, tb) != 0 || fabs((double) fa.c_score - fb.c_score) > 0.01)
					status = "modified";
			}
			if (status == NULL)
				continue;
			v[0] = Int32GetDatum(l);
			v[1] = Int32GetDatum(f);
			v[2] = text_datum(ta);
			v[3] = text_datum(tb);
			v[4] = Float8GetDatum(fa.c_score);
			v[5] = Float8GetDatum(sb);
			v[6] = text_datum(status);
			put_row(fcinfo, v, nl);
			rows++;
		}
	}
	/* B's features A lacks: added */
	for (int l = lo; l <= hi && l < ib->num_layers && rows < top; l++)
	{
		const void *r;
		int			nfa = 0,
					nfb = 0;

		(void) lq_vindex_gate_layer(a->vx, l, &r, &nfa, NULL);
		(void) lq_vindex_gate_layer(b->vx, l, &r, &nfb, NULL);
		for (int f = 0; f < nfb && rows < top; f++)
		{
			lq_feature_meta fa,
						fb;
			Datum		v[7];
			bool		nl[7] = {0};

			if (!lq_vindex_feature_meta(b->vx, l, f, &fb))
				continue;
			if (f < nfa && lq_vindex_feature_meta(a->vx, l, f, &fa))
				continue;
			v[0] = Int32GetDatum(l);
			v[1] = Int32GetDatum(f);
			v[2] = text_datum("");
			v[3] = text_datum(lq_vindex_token_text(b->vx, fb.top_token_id));
			v[4] = Float8GetDatum(0);
			v[5] = Float8GetDatum(fb.c_score);
			v[6] = text_datum("added");
			put_row(fcinfo, v, nl);
			rows++;
		}
	}
	/* rows read from mapped files: not answered if a page vanished meanwhile */
	pgi_mapcheck();
	return (Datum) 0;
}
