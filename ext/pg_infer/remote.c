/* pg_infer: the remote backend — LARQL's HTTP routes on a `larql serve` process.
 *
 * libcurl's multi interface drives each request on the backend's own thread (no threads,
 * no signals): the wait is sliced into polls of at most 50 ms with CHECK_FOR_INTERRUPTS
 * between them, so a query cancel or statement_timeout aborts a waiting request within
 * ~50-100 ms. Timeouts: connect 5 s, whole request infer.remote_timeout_ms. URLs are
 * http://, https:// or uds:///path/to/socket (HTTP over a Unix socket). Bodies over 64 MiB
 * are refused. */
#include "pg_infer.h"

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

/* Ends one request; its connection stays in the multi handle's cache unless the transfer was
 * cut short (curl then closes it). */
static void
release(CURLM *multi, CURL *h, struct curl_slist *hdr)
{
	if (h && multi)
		curl_multi_remove_handle(multi, h);
	if (h)
		curl_easy_cleanup(h);
	curl_slist_free_all(hdr);
}

char *
pgi_http_request(const char *base, const char *path, const char *post_json, bool allow_404)
{
	const char *sock = uds_path(base);
	char	   *url;
	CURLM	   *volatile multi = NULL;	/* volatile: read after a longjmp */
	CURL	   *volatile h = NULL;
	struct curl_slist *volatile hdr = NULL;
	Buf			buf = {0};
	CURLcode	result = CURLE_OK;
	long		status = 0;
	char		errbuf[CURL_ERROR_SIZE] = "";
	char	   *out = NULL;

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
	url = sock ? psprintf("http://larql-uds%s", path) : psprintf("%s%s", base, path);

	PG_TRY();
	{
		int			running = 1;
		CURLMsg    *msg;
		int			left;

		multi = backend_multi;
		if ((h = curl_easy_init()) == NULL)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("remote inference error: curl init failed")));
		curl_easy_setopt(h, CURLOPT_URL, url);
		if (sock)
			curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) pgi_remote_timeout_ms);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
		if (post_json)
		{
			hdr = curl_slist_append(hdr, "Content-Type: application/json");
			curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, post_json);
		}
		curl_multi_add_handle(multi, h);
		while (running)
		{
			CURLMcode	mc = curl_multi_perform(multi, &running);

			if (mc != CURLM_OK)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("remote inference error: %s", curl_multi_strerror(mc))));
			if (!running)
				break;
			/* at most 50 ms between interrupt checks: cancel lands within ~100 ms */
			(void) curl_multi_poll(multi, NULL, 0, 50, NULL);
			CHECK_FOR_INTERRUPTS();
		}
		while ((msg = curl_multi_info_read(multi, &left)) != NULL)
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
				result = msg->data.result;
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	}
	PG_CATCH();
	{
		/* a cancel or an ERROR while waiting: nothing of the request may outlive it */
		release(multi, h, hdr);
		free(buf.p);
		PG_RE_THROW();
	}
	PG_END_TRY();
	release(multi, h, hdr);

	if (buf.too_big)
	{
		free(buf.p);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("remote inference error: response from %s%s exceeds 64 MiB", base, path)));
	}
	if (result == CURLE_OPERATION_TIMEDOUT)
	{
		free(buf.p);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("remote inference error: %s%s: no answer within infer.remote_timeout_ms (%d ms)",
						base, path, pgi_remote_timeout_ms)));
	}
	if (result != CURLE_OK)
	{
		free(buf.p);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("remote inference error: %s%s: %s", base, path,
						errbuf[0] ? errbuf : curl_easy_strerror(result))));
	}
	if (status == 404 && allow_404)
	{
		free(buf.p);
		return NULL;
	}
	out = pstrdup(buf.p ? buf.p : "");
	free(buf.p);
	if (status < 200 || status > 299)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("remote inference error: server returned HTTP %ld: %.300s", status, out)));
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

int
pgi_remote_describe(PgiModel *m, const char *entity, double min_score, PgiEdge **out)
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

int
pgi_remote_walk(PgiModel *m, const char *prompt, int top, int layer, PgiHit **out)
{
	char	   *path = psprintf("/v1/walk?prompt=%s&top=%d", pgi_url_escape(prompt), top <= 0 ? 10000 : top);
	JsonbContainer *j,
			   *hits;
	int			n;
	PgiHit	   *h;

	if (layer >= 0)
		path = psprintf("%s&layers=%d-%d", path, layer, layer);
	j = pgi_json_parse(pgi_http_request(m->url, path, NULL, false));
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

/* pg_infer's remote similar_to: both texts walked with top 50; the best min(score) over the
 * (layer, feature) pairs both fire; 0 when none. */
double
pgi_remote_similar(PgiModel *m, const char *a, const char *b)
{
	PgiHit	   *ha,
			   *hb;
	int			na = pgi_remote_walk(m, a, 50, -1, &ha),
				nb = pgi_remote_walk(m, b, 50, -1, &hb);
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

int
pgi_remote_infer(PgiModel *m, const char *prompt, int top, char ***tokens, double **probs)
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
