/* pg_infer's local backend: what a model registered with infer_create_model() answers, from
 * liblarql over the vindex mapped in this backend (with the rows of infer.edits folded in:
 * edits_fold.c). The SQL functions call it through pgi_local_ops (pg_infer.h). */
#include "pg_infer.h"

#include <string.h>

#include "larql/model.h"
#include "larql/patch.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"

/* Largest layer width: pg_infer's "top <= 0 means every feature". */
static int
max_features(const lq_vindex *vx)
{
	const lq_vindex_info *in = lq_vindex_get_info(vx);
	int			mx = 0;

	for (int l = 0; l < in->num_layers; l++)
	{
		const void *rows;
		int			nf = 0;

		if (lq_vindex_gate_layer(vx, l, &rows, &nf, NULL) == 0 && nf > mx)
			mx = nf;
	}
	return mx > 0 ? mx : 1;
}

/* LARQL's describe over every layer, describe_top_k features per layer, at or above
 * min_score. */
static void
describe_params(lq_describe_params *p, double min_score)
{
	lq_describe_params_init(p);
	p->band = "all";
	p->limit = pgi_describe_top_k;
	p->min_score = min_score;
}

/* Copies a library result into palloc'd edges and frees it. */
static int
take_edges(lq_describe_result *r, PgiEdge **out)
{
	PgiEdge    *e = palloc0(sizeof *e * (r->n_edges + 1));
	int			n = (int) r->n_edges;

	for (size_t i = 0; i < r->n_edges; i++)
	{
		const lq_describe_edge *x = &r->edges[i];

		e[i].target = pstrdup(x->target);
		e[i].relation = x->relation ? pstrdup(x->relation) : NULL;
		e[i].score = x->gate_score;
		e[i].layer = x->layer;
		e[i].feature = x->feature;
		for (int k = 0; k < x->n_also && k < 5; k++)
			e[i].also[e[i].n_also++] = pstrdup(x->also[k]);
	}
	lq_describe_result_free(r);
	*out = e;
	return n;
}

static int
local_edges(PgiModel *m, const char *entity, double min_score, bool per_layer, PgiEdge **out)
{
	lq_describe_params p;
	lq_describe_result r;
	lq_err		err = {0};
	int			rc;

	describe_params(&p, min_score);
	p.entity = entity;
	p.per_layer = per_layer;
	if ((rc = lq_vindex_describe(m->vx, &p, &r, &err)) != 0)
		pgi_lq_error(rc, &err, "describe failed");
	if (r.n_tokens == 0)
	{
		lq_describe_result_free(&r);
		pgi_check_prompt("");
	}
	pgi_mapcheck();
	return take_edges(&r, out);
}

static void
local_edges_many(PgiModel *m, char **ents, int n, double min_score, PgiEdge **out, int *counts)
{
	lq_describe_params p;
	lq_describe_result *res = palloc0(sizeof *res * (n + 1));
	lq_err		err = {0};
	int			rc;

	if (n == 0)
		return;
	describe_params(&p, min_score);
	/* res is malloc'd inside: every result is copied out (and freed) right away */
	if ((rc = lq_vindex_describe_many(m->vx, &p, (const char *const *) ents, (size_t) n, res, &err)) != 0)
		pgi_lq_error(rc, &err, "describe_many failed");
	for (int j = 0; j < n; j++)
		counts[j] = take_edges(&res[j], &out[j]);
	pgi_mapcheck();
}

/* walk with infer.walk_embed_mode other than 'last' (pg_infer): the query is the mean of the
 * prompt's token embeddings (no special tokens), every feature hit is a row, '' for a
 * feature without metadata. */
static int
walk_mean(PgiModel *m, const char *prompt, int top, int layer, PgiHit **out)
{
	const lq_vindex_info *in = lq_vindex_get_info(m->vx);
	int			L = in->num_layers,
				nl = 0,
				n = 0,
				rc;
	size_t		k = (size_t) (top <= 0 || top > max_features(m->vx) ? max_features(m->vx) : top),
				ntok = 0;
	float	   *q = palloc(sizeof(float) * in->hidden_size);
	int		   *layers = palloc(sizeof(int) * L);
	lq_vindex_hit *hits;
	size_t	   *counts;
	lq_err		err = {0};
	PgiHit	   *h;

	if ((rc = lq_vindex_entity_vector(m->vx, prompt, q, &ntok, &err)) != 0)
		pgi_lq_error(rc, &err, "walk failed");
	if (ntok == 0)
		pgi_check_prompt("");
	for (int l = 0; l < L; l++)
		if (layer < 0 || l == layer)
			layers[nl++] = l;
	hits = palloc(sizeof(lq_vindex_hit) * nl * k);
	counts = palloc(sizeof(size_t) * nl);
	if ((rc = lq_vindex_gate_knn_batch(m->vx, layers, (size_t) nl, q, 1, k, hits, counts, &err)) != 0)
		pgi_lq_error(rc, &err, "walk failed");
	h = palloc0(sizeof *h * (nl * k + 1));
	for (int i = 0; i < nl; i++)
		for (size_t j = 0; j < counts[i]; j++)
		{
			const lq_vindex_hit *x = &hits[i * k + j];
			lq_feature_meta fm;

			h[n].layer = x->layer;
			h[n].feature = x->feature;
			h[n].score = x->score;
			h[n].token = pstrdup(lq_vindex_feature_meta(m->vx, x->layer, x->feature, &fm)
								 ? lq_vindex_token_text(m->vx, fm.top_token_id) : "");
			n++;
		}
	*out = h;
	return n;
}

static int
local_hits(PgiModel *m, const char *prompt, int top, int layer, PgiHit **out)
{
	lq_walk_params p;
	lq_walk_result r;
	lq_err		err = {0};
	PgiHit	   *h;
	int			rc;
	char		spec[32];

	if (pgi_walk_embed_mode && strcmp(pgi_walk_embed_mode, "last") != 0)
		return walk_mean(m, prompt, top, layer, out);
	lq_walk_params_init(&p);
	p.prompt = prompt;
	p.top = top <= 0 ? max_features(m->vx) : top;
	if (layer >= 0)
	{
		snprintf(spec, sizeof spec, "%d-%d", layer, layer);
		p.layers = spec;
	}
	if ((rc = lq_vindex_walk(m->vx, &p, &r, &err)) != 0)
		pgi_lq_error(rc, &err, "walk failed");
	h = palloc0(sizeof *h * (r.n_hits + 1));
	for (size_t i = 0; i < r.n_hits; i++)
	{
		h[i].layer = r.hits[i].layer;
		h[i].feature = r.hits[i].feature;
		h[i].score = r.hits[i].gate_score;
		h[i].token = pstrdup(r.hits[i].target ? r.hits[i].target : "");
	}
	rc = (int) r.n_hits;
	lq_walk_result_free(&r);
	*out = h;
	return rc;
}

static int
local_num_layers(PgiModel *m)
{
	return lq_vindex_get_info(m->vx)->num_layers;
}

static int
local_nearest(PgiModel *m, const char *entity, int layer, int top, PgiFeatureRow **out)
{
	lq_nearest_params p;
	lq_err		err = {0};
	char	   *body = NULL;
	int			rc;

	lq_nearest_params_init(&p);
	p.entity = entity;
	p.layer = layer;
	/* top <= 0 means every feature; more than a layer holds is capped there as walk caps
	 * it (2147483647 would otherwise size the result buffer for that many hits) */
	p.top = max_features(m->vx);
	if (top > 0 && top < p.top)
		p.top = top;
	if ((rc = lq_vindex_nearest_json(m->vx, &p, &body, &err)) != 0)
		pgi_lq_error(rc, &err, "nearest_to failed");
	rc = pgi_feature_rows(pgi_json_body(body), "hits", out);
	pgi_mapcheck();				/* read from mapped files: no rows if a page vanished meanwhile */
	return rc;
}

static JsonbContainer *
local_relations(PgiModel *m)
{
	lq_err		err = {0};
	char	   *body = NULL;
	int			rc;

	if ((rc = lq_vindex_relations_json(m->vx, &body, &err)) != 0)
		pgi_lq_error(rc, &err, "infer_show_relations failed");
	return pgi_json_body(body);
}

static int
local_layers(PgiModel *m, PgiLayerRow **out)
{
	const lq_vindex_info *in = lq_vindex_get_info(m->vx);
	PgiLayerRow *r = palloc0(sizeof *r * (in->num_layers + 1));

	for (int l = 0; l < in->num_layers; l++)
	{
		const void *rows;
		int			nf = 0;

		(void) lq_vindex_gate_layer(m->vx, l, &rows, &nf, NULL);
		r[l].layer = l;
		r[l].band = pgi_band_name(in, l);
		r[l].features = nf;
	}
	pgi_mapcheck();
	*out = r;
	return in->num_layers;
}

static double
local_similar(PgiModel *m, const char *a, const char *b)
{
	lq_err		err = {0};
	double		s = 0;
	int			rc;

	if ((rc = lq_vindex_similar_layers(m->vx, a, b, pgi_similarity_max_layers, &s, &err)) != 0)
		pgi_lq_error(rc, &err, "similar_to failed");
	pgi_mapcheck();
	return s;
}

static void
local_similar_many(PgiModel *m, const char *const *texts, int n, const char *q, double *out)
{
	for (int i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		out[i] = texts[i] ? local_similar(m, texts[i], q) : 0;
	}
}

/* A predicted token as text, as `larql serve` answers /v1/infer: the id decoded, each byte
 * that is not part of valid UTF-8 (a character split across tokens) and NUL replaced by
 * U+FFFD, so the text datum is valid in a UTF-8 database. */
static char *
token_text(const lq_tokenizer *t, int32_t id)
{
	char	   *raw = NULL;
	size_t		n = 0;
	StringInfoData b;

	initStringInfo(&b);
	if (lq_tokenizer_decode(t, &id, 1, 0, &raw, &n, NULL) != 0)
		return b.data;
	for (size_t i = 0; i < n;)
	{
		const unsigned char *u = (const unsigned char *) raw + i;
		int			l = pg_utf_mblen(u);

		if (u[0] != 0 && i + l <= n && pg_utf8_islegal(u, l))
		{
			appendBinaryStringInfo(&b, raw + i, l);
			i += l;
		}
		else
		{
			appendStringInfoString(&b, "\xEF\xBF\xBD");
			i++;
		}
	}
	free(raw);
	return b.data;
}

lq_model *
pgi_model_engine(PgiModel *m)
{
	if (m->lm == NULL)
	{
		lq_model_opts mo = {0};
		lq_err		err = {0};
		int			rc;

		mo.n_threads = 1;
		mo.hugepages = -1;		/* read-only shared mapping: never a private copy per backend */
		mo.lm_head_mode = LQ_LM_HEAD_EXACT;	/* no bounded lm_head: its int8 copy would be
												 * private memory in every backend too */
		if ((rc = lq_model_open(m->path, &mo, &m->lm, &err)) != 0)
		{
			m->lm = NULL;
			pgi_lq_error(rc, &err, "cannot load the model weights of the vindex (infer() needs "
						 "a vindex built with --keep-quant --level inference)");
		}
		if (lq_model_get_info(m->lm)->weights_copied)
		{
			/* LQ_HUGEPAGES=1 in the server's environment overrides hugepages = -1: refuse
			 * rather than hold a private copy of the weights in every backend */
			lq_model_close(m->lm);
			m->lm = NULL;
			ereport(ERROR,
					(errcode(ERRCODE_CONFIG_FILE_ERROR),
					 errmsg("the model weights were copied into private memory instead of mapped"),
					 errhint("Remove LQ_HUGEPAGES from the PostgreSQL server's environment.")));
		}
	}
	return m->lm;
}

static int
local_infer(PgiModel *m, const char *prompt, int top, char ***tokens, double **probs_out)
{
	lq_model   *lm = pgi_model_engine(m);
	lq_infer_params p;
	lq_infer_result r;
	lq_err		err = {0};
	int			rc,
				n;
	struct lq_overlay *ov = pgi_edits_overlay(m);
	const lq_prediction *pr;
	int32	   *ids;
	double	   *probs;
	char	  **toks;

	lq_infer_params_init(&p);
	p.prompt = prompt;
	p.top = top;
	/* with edits (infer.edits): the forward pass runs them (walk mode), without: dense,
	 * which is the same pass with nothing added */
	p.mode = ov ? "walk" : "dense";
	if (ov && (p.edits = lq_overlay_edit_set(ov, &err)) == NULL)
		pgi_lq_error(LQ_ENOMEM, &err, "infer failed");
	rc = lq_infer(lm, &p, &r, &err);
	lq_edit_set_unref(p.edits);
	if (rc != 0)
		pgi_lq_error(rc, &err, "infer failed");
	n = (int) (ov ? r.n_walk : r.n_dense);
	pr = ov ? r.walk : r.dense;
	ids = palloc(sizeof(int32) * (n + 1));
	probs = palloc(sizeof(double) * (n + 1));
	toks = palloc(sizeof(char *) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		ids[i] = pr[i].id;
		probs[i] = pr[i].probability;
		/* a KNN override's entry has no token id: its text is the edit's target */
		toks[i] = ids[i] < 0 ? pstrdup(pr[i].token ? pr[i].token : "") : NULL;
	}
	lq_infer_result_free(&r);
	for (int i = 0; i < n; i++)
		if (ids[i] >= 0)
			toks[i] = token_text(lq_model_tokenizer(lm), ids[i]);
	*tokens = toks;
	*probs_out = probs;
	return n;
}

const PgiOps pgi_local_ops = {
	.name = "local",
	.edges = local_edges,
	.edges_many = local_edges_many,
	.hits = local_hits,
	.num_layers = local_num_layers,
	.nearest = local_nearest,
	.relations = local_relations,
	.layers = local_layers,
	.similar = local_similar,
	.similar_many = local_similar_many,
	.infer = local_infer,
};
