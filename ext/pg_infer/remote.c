/* pg_infer: the remote backend — LARQL's HTTP routes on a `larql serve` process.
 *
 * libcurl's multi interface drives each request on the backend's own thread (no threads,
 * no signals): the wait is sliced into polls of at most 50 ms with CHECK_FOR_INTERRUPTS
 * between them, so a query cancel or statement_timeout aborts a waiting request within
 * ~50-100 ms. Timeouts: connect 5 s, whole request infer.remote_timeout_ms. URLs are
 * http://, https:// or uds:///path/to/socket (HTTP over a Unix socket). Bodies over 64 MiB
 * are refused. */
#include "pg_infer.h"

#include <limits.h>

#include <string.h>

#include <curl/curl.h>

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"

#define MAX_BODY (64u << 20)

static bool curl_ready;
/* One multi handle per backend process: its connection cache keeps connections to a server
 * open between requests (HTTP keep-alive), as pg_infer's pooled client does. */
static CURLM *backend_multi;

typedef struct Buf
{
	char	   *p;
	size_t		n,
				cap;
	bool		too_big;
} Buf;

/* libcurl write callback: malloc'd growth (never palloc: an ERROR must not unwind through
 * libcurl's stack). */
static size_t
on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	Buf		   *b = ud;
	size_t		n = size * nmemb;

	if (b->n + n > MAX_BODY)
	{
		b->too_big = true;
		return 0;
	}
	if (b->n + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 4096;
		char	   *q;

		while (cap < b->n + n + 1)
			cap *= 2;
		if ((q = realloc(b->p, cap)) == NULL)
			return 0;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, ptr, n);
	b->n += n;
	b->p[b->n] = 0;
	return n;
}

char *
pgi_url_escape(const char *s)
{
	StringInfoData b;

	initStringInfo(&b);
	for (const unsigned char *p = (const unsigned char *) s; *p; p++)
	{
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
			*p == '-' || *p == '_' || *p == '.' || *p == '~')
			appendStringInfoChar(&b, (char) *p);
		else
			appendStringInfo(&b, "%%%02X", *p);
	}
	return b.data;
}

/* Splits a uds:// or unix:// URL into the socket path; NULL for http(s). */
static const char *
uds_path(const char *base)
{
	const char *rest;

	if (strncmp(base, "uds://", 6) == 0)
		rest = base + 6;
	else if (strncmp(base, "unix://", 7) == 0)
		rest = base + 7;
	else if (strncmp(base, "uds:", 4) == 0)
		return base + 4;
	else
		return NULL;
	if (rest[0] != '/')			/* uds://host/path */
		rest = strchr(rest, '/');
	return rest;
}

/* One request of a batch: its handle, headers, body and outcome. */
typedef struct Req
{
	CURL	   *h;
	struct curl_slist *hdr;
	Buf			buf;
	bool		added;			/* in the multi handle */
	CURLcode	result;
	long		status;
	char		errbuf[CURL_ERROR_SIZE];
} Req;

/* Requests of one batch in flight at once: enough to overlap a server's latency, few enough
 * not to open a connection per candidate of a long array. */
#define HTTP_PARALLEL 16

static void
req_setup(Req *r, intptr_t idx, const char *base, const char *sock, const char *path, const char *post_json)
{
	if ((r->h = curl_easy_init()) == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("remote inference error: curl init failed")));
	curl_easy_setopt(r->h, CURLOPT_URL, sock ? psprintf("http://larql-uds%s", path) : psprintf("%s%s", base, path));
	if (sock)
		curl_easy_setopt(r->h, CURLOPT_UNIX_SOCKET_PATH, sock);
	curl_easy_setopt(r->h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(r->h, CURLOPT_TIMEOUT_MS, (long) pgi_remote_timeout_ms);
	curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(r->h, CURLOPT_WRITEDATA, &r->buf);
	curl_easy_setopt(r->h, CURLOPT_ERRORBUFFER, r->errbuf);
	curl_easy_setopt(r->h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(r->h, CURLOPT_PRIVATE, (void *) idx);
	if (post_json)
	{
		r->hdr = curl_slist_append(r->hdr, "Content-Type: application/json");
		curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdr);
		curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, post_json);
	}
}

/* Ends every request of a batch; a connection stays in the multi handle's cache unless its
 * transfer was cut short (curl then closes it). Bodies are freed. */
static void
release_all(CURLM *multi, Req *reqs, int n)
{
	for (int i = 0; i < n; i++)
	{
		Req		   *r = &reqs[i];

		if (r->h && r->added)
			curl_multi_remove_handle(multi, r->h);
		if (r->h)
			curl_easy_cleanup(r->h);
		curl_slist_free_all(r->hdr);
		free(r->buf.p);
		r->h = NULL;
		r->hdr = NULL;
		r->buf.p = NULL;
		r->added = false;
	}
}

void
pgi_http_many(const char *base, int n, const char *const *paths, const char *const *posts, bool allow_404,
			  char **out)
{
	const char *sock = uds_path(base);
	Req		   *reqs;
	char	  **bodies;

	if (sock == NULL && strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("remote inference error: invalid URL '%s' (expected http://, https:// or uds://)", base)));
	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			elog(ERROR, "curl_global_init failed");
		curl_ready = true;
	}
	if (backend_multi == NULL && (backend_multi = curl_multi_init()) == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("remote inference error: curl init failed")));
	reqs = palloc0(sizeof(Req) * (n + 1));
	bodies = palloc0(sizeof(char *) * (n + 1));

	PG_TRY();
	{
		int			next = 0,
					active = 0;

		while (next < n || active > 0)
		{
			int			running = 0,
						left;
			CURLMcode	mc;
			CURLMsg    *msg;

			while (next < n && active < HTTP_PARALLEL)
			{
				req_setup(&reqs[next], next, base, sock, paths[next], posts ? posts[next] : NULL);
				curl_multi_add_handle(backend_multi, reqs[next].h);
				reqs[next].added = true;
				next++;
				active++;
			}
			if ((mc = curl_multi_perform(backend_multi, &running)) != CURLM_OK)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("remote inference error: %s", curl_multi_strerror(mc))));
			while ((msg = curl_multi_info_read(backend_multi, &left)) != NULL)
			{
				void	   *priv = NULL;
				Req		   *r;

				if (msg->msg != CURLMSG_DONE)
					continue;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &priv);
				r = &reqs[(intptr_t) priv];
				r->result = msg->data.result;
				curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
				curl_multi_remove_handle(backend_multi, r->h);
				r->added = false;
				active--;
			}
			/* at most 50 ms between interrupt checks: cancel lands within ~100 ms */
			if (active > 0 && (next >= n || active >= HTTP_PARALLEL))
				(void) curl_multi_poll(backend_multi, NULL, 0, 50, NULL);
			CHECK_FOR_INTERRUPTS();
		}
		/* bodies into palloc'd memory before anything below can ERROR */
		for (int i = 0; i < n; i++)
			bodies[i] = pstrdup(reqs[i].buf.p ? reqs[i].buf.p : "");
	}
	PG_CATCH();
	{
		/* a cancel or an ERROR while waiting: nothing of the requests may outlive it */
		release_all(backend_multi, reqs, n);
		PG_RE_THROW();
	}
	PG_END_TRY();
	release_all(backend_multi, reqs, n);

	for (int i = 0; i < n; i++)
	{
		Req		   *r = &reqs[i];

		if (r->buf.too_big)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("remote inference error: response from %s%s exceeds 64 MiB", base, paths[i])));
		if (r->result == CURLE_OPERATION_TIMEDOUT)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("remote inference error: %s%s: no answer within infer.remote_timeout_ms (%d ms)",
							base, paths[i], pgi_remote_timeout_ms)));
		if (r->result != CURLE_OK)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("remote inference error: %s%s: %s", base, paths[i],
							r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->result))));
		if (r->status == 404 && allow_404)
		{
			out[i] = NULL;
			continue;
		}
		if (r->status < 200 || r->status > 299)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("remote inference error: server returned HTTP %ld: %.300s", r->status, bodies[i])));
		out[i] = bodies[i];
	}
}

char *
pgi_http_request(const char *base, const char *path, const char *post_json, bool allow_404)
{
	char	   *out = NULL;

	pgi_http_many(base, 1, &path, &post_json, allow_404, &out);
	return out;
}

char *
pgi_remote_stats(const char *url, int *num_layers, int *hidden_size)
{
	JsonbContainer *j = pgi_json_parse(pgi_http_request(url, "/v1/stats", NULL, false));
	bool		ok = pgi_jhas(j, "layers", jbvNumeric) && pgi_jhas(j, "hidden_size", jbvNumeric);
	char	   *model = pgi_jstr(j, "model");

	*num_layers = (int) pgi_jnum(j, "layers");
	*hidden_size = (int) pgi_jnum(j, "hidden_size");
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("remote inference error: %s/v1/stats lacks layers/hidden_size", url)));
	return model;
}

static void
ensure_stats(PgiModel *m)
{
	if (m->num_layers == 0)
		(void) pgi_remote_stats(m->url, &m->num_layers, &m->hidden_size);
}

static int
remote_describe(PgiModel *m, const char *entity, double min_score, PgiEdge **out)
{
	char	   *path = psprintf("/v1/describe?entity=%s&band=all&limit=%d&min_score=%.17g",
								pgi_url_escape(entity), pgi_describe_top_k,
								min_score < -1e30 ? -1e30 : min_score);
	JsonbContainer *j,
			   *edges;
	int			n;
	PgiEdge    *e;

	ensure_stats(m);
	j = pgi_json_parse(pgi_http_request(m->url, path, NULL, false));
	edges = pgi_jarr(j, "edges", &n);
	e = palloc0(sizeof *e * (n + 1));
	for (int i = 0; i < n; i++)
	{
		JsonbContainer *o = pgi_jelem(edges, i),
				   *also;
		int			na;

		e[i].target = pgi_jstr(o, "target");
		e[i].relation = pgi_jhas(o, "relation", jbvString) ? pgi_jstr(o, "relation") : NULL;
		e[i].score = pgi_jnum(o, "gate_score");
		e[i].layer = (int) pgi_jnum(o, "layer");
		e[i].feature = -1;
		also = pgi_jarr(o, "also", &na);
		for (int k = 0; k < na && k < 5; k++)
			e[i].also[e[i].n_also++] = pgi_jelem_str(also, k);
	}
	*out = e;
	return n;
}

static char *
walk_path(const char *prompt, int top, int layer)
{
	char	   *path = psprintf("/v1/walk?prompt=%s&top=%d", pgi_url_escape(prompt), top <= 0 ? 10000 : top);

	if (layer >= 0)
		path = psprintf("%s&layers=%d-%d", path, layer, layer);
	return path;
}

static int
parse_hits(const char *body, PgiHit **out)
{
	JsonbContainer *j = pgi_json_parse(body),
			   *hits;
	int			n;
	PgiHit	   *h;

	hits = pgi_jarr(j, "hits", &n);
	h = palloc0(sizeof *h * (n + 1));
	for (int i = 0; i < n; i++)
	{
		JsonbContainer *o = pgi_jelem(hits, i);

		h[i].layer = (int) pgi_jnum(o, "layer");
		h[i].feature = (int) pgi_jnum(o, "feature");
		h[i].score = pgi_jnum(o, "gate_score");
		h[i].token = pgi_jstr(o, "target");
	}
	*out = h;
	return n;
}

static int
remote_walk(PgiModel *m, const char *prompt, int top, int layer, PgiHit **out)
{
	return parse_hits(pgi_http_request(m->url, walk_path(prompt, top, layer), NULL, false), out);
}

/* pg_infer's remote similar_to score of two walks: the best min(score) over the (layer,
 * feature) pairs both fire; 0 when none. */
static double
walks_similar(const PgiHit *ha, int na, const PgiHit *hb, int nb)
{
	double		best = 0;

	for (int i = 0; i < na; i++)
		for (int k = 0; k < nb; k++)
			if (ha[i].layer == hb[k].layer && ha[i].feature == hb[k].feature)
			{
				double		s = ha[i].score < hb[k].score ? ha[i].score : hb[k].score;

				if (s > best)
					best = s;
			}
	return best;
}

/* pg_infer's remote similar_to: both texts walked with top 50. */
static double
remote_similar(PgiModel *m, const char *a, const char *b)
{
	PgiHit	   *ha,
			   *hb;
	int			na = remote_walk(m, a, 50, -1, &ha),
				nb = remote_walk(m, b, 50, -1, &hb);

	return walks_similar(ha, na, hb, nb);
}

/* similar_to(texts[i], q) for every i (texts[i] NULL: skipped): the query and every text are
 * walked once each, the walks running concurrently (pgi_http_many), instead of two
 * sequential walks per pair. */
static void
remote_similar_many(PgiModel *m, const char *const *texts, int n, const char *q, double *out)
{
	const char **paths = palloc(sizeof(char *) * (n + 2));
	int		   *slot = palloc(sizeof(int) * (n + 1));
	char	  **bodies;
	int			k = 0,
				nq;
	PgiHit	   *hq;

	paths[k++] = walk_path(q, 50, -1);
	for (int i = 0; i < n; i++)
	{
		slot[i] = -1;
		if (texts[i] == NULL)
			continue;
		slot[i] = k;
		paths[k++] = walk_path(texts[i], 50, -1);
	}
	bodies = palloc0(sizeof(char *) * (k + 1));
	pgi_http_many(m->url, k, paths, NULL, false, bodies);
	nq = parse_hits(bodies[0], &hq);
	for (int i = 0; i < n; i++)
	{
		PgiHit	   *h;
		int			nh;

		out[i] = 0;
		if (slot[i] < 0)
			continue;
		nh = parse_hits(bodies[slot[i]], &h);
		out[i] = walks_similar(h, nh, hq, nq);
	}
}

static int
remote_infer(PgiModel *m, const char *prompt, int top, char ***tokens, double **probs)
{
	StringInfoData req;
	JsonbContainer *j,
			   *preds;
	int			n;

	initStringInfo(&req);
	appendStringInfoString(&req, "{\"prompt\":");
	escape_json(&req, prompt);
	/* walk: the forward pass with the server's edits (without any, the same as dense), as a
	 * local model with rows in infer.edits answers */
	appendStringInfo(&req, ",\"top\":%d,\"mode\":\"walk\"}", top < 1 ? 1 : top);
	j = pgi_json_parse(pgi_http_request(m->url, "/v1/infer", req.data, false));
	preds = pgi_jarr(j, "predictions", &n);
	*tokens = palloc(sizeof(char *) * (n + 1));
	*probs = palloc(sizeof(double) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		JsonbContainer *o = pgi_jelem(preds, i);

		(*tokens)[i] = pgi_jstr(o, "token");
		(*probs)[i] = pgi_jnum(o, "probability");
	}
	return n;
}

static int
remote_edges(PgiModel *m, const char *entity, double min_score, bool per_layer, PgiEdge **out)
{
	if (per_layer)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("operation '%s' is not supported by the remote backend", "describe_layers")));
	return remote_describe(m, entity, min_score, out);
}

/* one describe a request (the server has no batch describe) */
static void
remote_edges_many(PgiModel *m, char **ents, int n, double min_score, PgiEdge **out, int *counts)
{
	for (int j = 0; j < n; j++)
	{
		CHECK_FOR_INTERRUPTS();
		if (ents[j] == NULL || ents[j][0] == 0)
			continue;
		counts[j] = remote_describe(m, ents[j], min_score, &out[j]);
	}
}

static int
remote_num_layers(PgiModel *m)
{
	return m->num_layers > 0 ? m->num_layers : INT_MAX;
}

/* the walk of the entity at that layer (the server has no nearest route): no "also" */
static int
remote_nearest(PgiModel *m, const char *entity, int layer, int top, PgiFeatureRow **out)
{
	PgiHit	   *h;
	int			n = remote_walk(m, entity, top, layer, &h),
				k = 0;
	PgiFeatureRow *r = palloc0(sizeof *r * (n + 1));

	for (int i = 0; i < n; i++)
		if (h[i].layer == layer)
			r[k++] = (PgiFeatureRow) {h[i].feature, h[i].token, h[i].score, ""};
	*out = r;
	return k;
}

static JsonbContainer *
remote_relations(PgiModel *m)
{
	return pgi_json_parse(pgi_http_request(m->url, "/v1/relations", NULL, false));
}

/* GET /v1/stats: uniform features_per_layer, no bands (pg_infer's remote answer) */
static int
remote_layers(PgiModel *m, PgiLayerRow **out)
{
	JsonbContainer *j = pgi_json_parse(pgi_http_request(m->url, "/v1/stats", NULL, false));
	int			L = (int) pgi_jnum(j, "layers"),
				nf = (int) pgi_jnum(j, "features_per_layer");
	PgiLayerRow *r = palloc0(sizeof *r * (L > 0 ? L + 1 : 1));

	for (int l = 0; l < L; l++)
		r[l] = (PgiLayerRow) {l, "", nf};
	*out = r;
	return L > 0 ? L : 0;
}

const PgiOps pgi_remote_ops = {
	.name = "remote",
	.edges = remote_edges,
	.edges_many = remote_edges_many,
	.hits = remote_walk,
	.num_layers = remote_num_layers,
	.nearest = remote_nearest,
	.relations = remote_relations,
	.layers = remote_layers,
	.similar = remote_similar,
	.similar_many = remote_similar_many,
	.infer = remote_infer,
};
