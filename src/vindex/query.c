/* Knowledge queries with LARQL server semantics (describe, walk, select, relations) and
 * pg_infer's (nearest_to, similar_to, show features), each as a C call plus a JSON
 * renderer whose output is the HTTP body. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/clock.h"
#include "vindex/vindex_internal.h"
#include "core/hash.h"
#include "core/round.h"
#include "core/str.h"


/* ASCII lowercase copy (malloc'd). */
static char *lower_dup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    for (size_t i = 0; i <= n; i++)
        d[i] = (char)tolower((unsigned char)s[i]);
    return d;
}

/* Trimmed copy of the entity for comparisons (LARQL compares trimmed token text with the
 * entity string as given; leading/trailing spaces of the entity are kept there, we trim too
 * so that " France" matches "France"). */
static char *trim_dup(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    return strndup(s, n);
}

/* ---- small string -> index map for aggregation ---- */
typedef struct smap {
    char **keys;
    int *vals;
    size_t cap, n;
} smap;

static uint64_t str_hash(const char *s) { return lq_fnv1a64_str(s); }

static int smap_find(const smap *m, const char *k)
{
    if (!m->cap)
        return -1;
    size_t j = str_hash(k) & (m->cap - 1);
    while (m->keys[j]) {
        if (!strcmp(m->keys[j], k))
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

/* Takes ownership of k. */
static int smap_put(smap *m, char *k, int v)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        char **nk = calloc(nc, sizeof *nk);
        int *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = str_hash(m->keys[i]) & (nc - 1);
            while (nk[j])
                j = (j + 1) & (nc - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
    }
    size_t j = str_hash(k) & (m->cap - 1);
    while (m->keys[j])
        j = (j + 1) & (m->cap - 1);
    m->keys[j] = k;
    m->vals[j] = v;
    m->n++;
    return 0;
}

static void smap_free(smap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- shared: walk over layers ---- */

/* Runs gate_knn(layer, q, K) for every layer in `layers` and each of the n_q queries Q
 * [n_q, hidden] in one pass over the gate rows, and keeps hits with metadata, in layer order
 * then |score| order: query i's hits start at (*hits)[i * *stride], n_hits[i] of them.
 * *hits malloc'd. */
static int walk_layers_many(const lq_vindex *v, const float *Q, size_t n_q, const int *layers, size_t nl,
                            size_t K, lq_vindex_hit **hits, size_t *stride, size_t *n_hits, lq_err *err)
{
    *hits = NULL;
    *stride = 0;
    for (size_t i = 0; i < n_q; i++)
        n_hits[i] = 0;
    if (nl == 0 || K == 0 || n_q == 0)
        return LQ_OK;
    size_t kk = K;
    size_t maxf = 0;
    for (size_t i = 0; i < nl; i++)
        if (v->layers[layers[i]].num_features > 0 && (size_t)v->layers[layers[i]].num_features > maxf)
            maxf = (size_t)v->layers[layers[i]].num_features;
    if (kk > maxf)
        kk = maxf ? maxf : 1;
    lq_vindex_hit *raw = malloc(n_q * nl * kk * sizeof *raw);
    size_t *cnt = malloc(n_q * nl * sizeof *cnt);
    if (!raw || !cnt) {
        free(raw);
        free(cnt);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    int rc = lq_vindex_gate_knn_batch(v, layers, nl, Q, n_q, kk, raw, cnt, err);
    for (size_t qi = 0; !rc && qi < n_q; qi++) {
        lq_vindex_hit *base = raw + qi * nl * kk; /* compacted in place: m never passes the read index */
        size_t m = 0;
        for (size_t i = 0; i < nl; i++)
            for (size_t j = 0; j < cnt[qi * nl + i]; j++) {
                lq_feature_meta fm;
                const lq_vindex_hit *h = &base[i * kk + j];
                if (lq_vindex_feature_meta(v, h->layer, h->feature, &fm))
                    base[m++] = *h;
            }
        n_hits[qi] = m;
    }
    free(cnt);
    if (rc) {
        free(raw);
        return rc;
    }
    *hits = raw;
    *stride = nl * kk;
    return LQ_OK;
}

static int walk_layers(const lq_vindex *v, const float *q, const int *layers, size_t nl, size_t K,
                       lq_vindex_hit **hits, size_t *n_hits, lq_err *err)
{
    size_t stride;
    return walk_layers_many(v, q, 1, layers, nl, K, hits, &stride, n_hits, err);
}

/* Loaded layers, optionally restricted to a band (band_idx 3 = all). */
static int band_layers(const lq_vindex *v, int band_idx, int **out, size_t *n)
{
    int L = v->info.num_layers;
    int *ls = malloc((size_t)L * sizeof *ls);
    if (!ls)
        return -1;
    size_t m = 0;
    for (int l = 0; l < L; l++) {
        if (!v->layers[l].present || v->layers[l].num_features == 0)
            continue;
        if (band_idx < 3 && (l < v->info.bands[band_idx].start || l > v->info.bands[band_idx].end))
            continue;
        ls[m++] = l;
    }
    *out = ls;
    *n = m;
    return 0;
}

static int need_browse(const lq_vindex *v, lq_err *err)
{
    if (v->info.dense_only || !v->has_gate)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "%s is a dense-only vindex (no gate vectors): browse queries are unavailable",
                          v->dir);
    return LQ_OK;
}

/* ---- describe ---- */

void lq_describe_params_init(lq_describe_params *p)
{
    memset(p, 0, sizeof *p);
    p->band = "knowledge";
    p->limit = 20;
    p->min_score = 5.0;
}

void lq_describe_result_free(lq_describe_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_edges; i++) {
        free(r->edges[i].target);
        for (int k = 0; k < r->edges[i].n_also; k++)
            free(r->edges[i].also[k]);
    }
    free(r->edges);
    free(r->layers);
    memset(r, 0, sizeof *r);
}

static int cmp_edge(const void *a, const void *b)
{
    const lq_describe_edge *x = a, *y = b;
    if (x->gate_score != y->gate_score)
        return x->gate_score > y->gate_score ? -1 : 1;
    return 0;
}

/* ties keep first-seen order: sort (gate desc, seq asc) via index in feature field copy */
typedef struct edge_sort {
    lq_describe_edge e;
    size_t seq;
} edge_sort;

static int cmp_edge_seq(const void *a, const void *b)
{
    const edge_sort *x = a, *y = b;
    int c = cmp_edge(&x->e, &y->e);
    return c ? c : (x->seq < y->seq ? -1 : x->seq > y->seq);
}

/* Edges of one entity from its hits (layer order, |score| order within a layer): the
 * min_score and token filters, merging by lowercase target (unless per_layer), sorting and
 * truncation to limit. Fills r->edges / r->n_edges only; hits stay the caller's. */
static int describe_merge(const lq_vindex *v, const lq_describe_params *p, const lq_vindex_hit *hits,
                          size_t nh, lq_describe_result *r, lq_err *err)
{
    int rc = LQ_OK;
    char *ent = trim_dup(p->entity);
    char *ent_l = ent ? lower_dup(ent) : NULL;
    edge_sort *edges = calloc(nh ? nh : 1, sizeof *edges);
    smap map = {0};
    size_t ne = 0;
    if (!rc && (!ent || !ent_l || !edges))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < nh; i++) {
        const lq_vindex_hit *h = &hits[i];
        if (h->score < p->min_score)
            continue;
        lq_feature_meta fm;
        lq_vindex_feature_meta(v, h->layer, h->feature, &fm);
        const char *tok = lq_vx_meta_text(v, &fm);
        if (strlen(tok) < 2 || !strcasecmp(tok, ent))
            continue;
        if (p->per_layer) {
            /* no merging: hits arrive in layer order, |score| order within a layer */
            lq_describe_edge *e = &edges[ne].e;
            edges[ne].seq = ne;
            if (!(e->target = strdup(tok))) {
                rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                break;
            }
            e->gate_score = h->score;
            e->layer = e->layer_min = e->layer_max = h->layer;
            e->feature = h->feature;
            e->count = 1;
            ne++;
            continue;
        }
        char *key = lower_dup(tok);
        if (!key) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        int idx = smap_find(&map, key);
        if (idx < 0) {
            lq_describe_edge *e = &edges[ne].e;
            edges[ne].seq = ne;
            e->target = strdup(tok);
            e->gate_score = h->score;
            e->layer = e->layer_min = e->layer_max = h->layer;
            e->feature = h->feature;
            e->count = 1;
            for (int k = 0; k < fm.n_top && e->n_also < 3; k++) {
                const char *a = lq_vindex_token_text(v, fm.top_ids[k]);
                if (fm.top_logits[k] > 0 && strlen(a) >= 2 && strcasecmp(a, tok) && strcasecmp(a, ent))
                    e->also[e->n_also++] = strdup(a);
            }
            if (smap_put(&map, key, (int)ne)) {
                free(key);
                rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            }
            ne++;
        } else {
            free(key);
            lq_describe_edge *e = &edges[idx].e;
            if (h->score > e->gate_score) {
                e->gate_score = h->score;
                e->layer = h->layer;
                e->feature = h->feature;
            }
            if (h->layer < e->layer_min)
                e->layer_min = h->layer;
            if (h->layer > e->layer_max)
                e->layer_max = h->layer;
            e->count++;
        }
    }
    smap_free(&map);
    free(ent);
    free(ent_l);
    size_t keep = ne;
    if (!p->per_layer) {
        qsort(edges, ne, sizeof *edges, cmp_edge_seq);
        keep = ne < (size_t)p->limit ? ne : (size_t)p->limit;
    }
    r->edges = calloc(keep ? keep : 1, sizeof *r->edges);
    if (!rc && !r->edges)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < ne; i++) {
        if (!rc && i < keep) {
            r->edges[i] = edges[i].e;
            /* a probe-confirmed label first, else the feature's relation cluster */
            const char *rel = lq_vindex_probe_label(v, edges[i].e.layer, edges[i].e.feature);
            r->edges[i].relation_source = rel ? "probe" : NULL;
            if (!rel && (rel = lq_vindex_cluster_label(v, edges[i].e.layer, edges[i].e.feature)))
                r->edges[i].relation_source = "cluster";
            r->edges[i].relation = rel;
        } else {
            free(edges[i].e.target);
            for (int k = 0; k < edges[i].e.n_also; k++)
                free(edges[i].e.also[k]);
        }
    }
    free(edges);
    if (rc) {
        free(r->edges);
        r->edges = NULL;
        return rc;
    }
    r->n_edges = keep;
    return LQ_OK;
}

/* Checks shared by describe and describe_many; *band gets the band index. */
static int describe_check(const lq_vindex *v, const lq_describe_params *p, int *band, lq_err *err)
{
    (void)v; /* describe checks only its parameters (see below for a dense-only vindex) */
    if (p->limit < 0)
        return lq_err_set(err, LQ_EINVAL, "limit %d must be >= 0", p->limit);
    if (isnan(p->min_score))
        return lq_err_set(err, LQ_EINVAL, "min_score is not a number");
    *band = 1;
    /* no need_browse here: describe on a dense-only vindex is LARQL's 200 with no edges (it
     * has no loaded layers to scan), not an error */
    return lq_vindex_parse_band(p->band ? p->band : "knowledge", band, err);
}

int lq_vindex_describe(const lq_vindex *v, const lq_describe_params *p, lq_describe_result *r,
                       lq_err *err)
{
    memset(r, 0, sizeof *r);
    double t0 = lq_now_ms();
    if (!p->entity || !*p->entity)
        return lq_err_set(err, LQ_EINVAL, "empty entity");
    int band = 1;
    int rc = describe_check(v, p, &band, err);
    if (rc)
        return rc;
    if (v->info.dense_only || !v->has_gate) { /* no gate vectors: nothing to scan */
        r->latency_ms = lq_now_ms() - t0;
        return LQ_OK;
    }
    int D = v->info.hidden_size;
    float *q = malloc((size_t)D * sizeof *q);
    if (!q)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    size_t ntok = 0;
    rc = lq_vindex_entity_vector(v, p->entity, q, &ntok, err);
    r->n_tokens = ntok;
    if (rc || ntok == 0) {
        free(q);
        r->latency_ms = 0.0;
        return rc;
    }
    int *layers = NULL;
    size_t nl = 0;
    lq_vindex_hit *hits = NULL;
    size_t nh = 0;
    if (band_layers(v, band, &layers, &nl))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = walk_layers(v, q, layers, nl, (size_t)p->limit, &hits, &nh, err);
    free(q);
    if (!rc && p->per_layer) {
        r->layers = layers; /* the caller reports every layer scanned, even without edges */
        r->n_layers = nl;
        layers = NULL;
    }
    free(layers);
    if (!rc)
        rc = describe_merge(v, p, hits, nh, r, err);
    free(hits);
    if (rc) {
        free(r->layers);
        memset(r, 0, sizeof *r);
        return rc;
    }
    r->latency_ms = lq_now_ms() - t0;
    return LQ_OK;
}

int lq_vindex_describe_many(const lq_vindex *v, const lq_describe_params *p, const char *const *entities,
                            size_t n, lq_describe_result *results, lq_err *err)
{
    for (size_t i = 0; i < n; i++)
        memset(&results[i], 0, sizeof results[i]);
    double t0 = lq_now_ms();
    int band = 1;
    int rc = describe_check(v, p, &band, err);
    if (rc)
        return rc;
    if (p->per_layer)
        return lq_err_set(err, LQ_EINVAL, "describe_many: per_layer is not supported");
    if (n == 0 || v->info.dense_only || !v->has_gate) /* dense-only: no edges, as describe */
        return LQ_OK;
    if (n > LQ_VINDEX_MAX_QUERY_K)
        return lq_err_set(err, LQ_ERANGE, "describe_many: %zu entities (at most %d)", n, LQ_VINDEX_MAX_QUERY_K);
    size_t D = (size_t)v->info.hidden_size;
    float *Q = malloc(n * D * sizeof *Q);
    size_t *row = malloc(n * sizeof *row), *nh = calloc(n, sizeof *nh);
    int *layers = NULL;
    size_t nl = 0, nq = 0, stride = 0;
    lq_vindex_hit *hits = NULL;
    if (!Q || !row || !nh || band_layers(v, band, &layers, &nl))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    /* the query vectors of the entities that encode to something, in one matrix */
    for (size_t i = 0; !rc && i < n; i++) {
        size_t ntok = 0;
        row[i] = (size_t)-1;
        if (!entities[i] || !*entities[i])
            continue;
        /* the caller's cancel hook between entities: thousands of them take seconds to
           encode and merge */
        if (i % 16 == 15 && lq_vx_cancelled()) {
            rc = lq_err_set(err, LQ_ECANCELED, "describe_many cancelled");
            break;
        }
        rc = lq_vindex_entity_vector(v, entities[i], Q + nq * D, &ntok, err);
        results[i].n_tokens = ntok;
        if (!rc && ntok > 0)
            row[i] = nq++;
    }
    if (!rc)
        rc = walk_layers_many(v, Q, nq, layers, nl, (size_t)p->limit, &hits, &stride, nh, err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (row[i] == (size_t)-1)
            continue;
        if (i % 16 == 15 && lq_vx_cancelled()) {
            rc = lq_err_set(err, LQ_ECANCELED, "describe_many cancelled");
            break;
        }
        lq_describe_params pi = *p;
        pi.entity = entities[i];
        rc = describe_merge(v, &pi, hits + row[i] * stride, nh[row[i]], &results[i], err);
    }
    double ms = lq_now_ms() - t0;
    for (size_t i = 0; i < n; i++) {
        if (rc)
            lq_describe_result_free(&results[i]);
        else
            results[i].latency_ms = ms;
    }
    free(Q);
    free(row);
    free(nh);
    free(layers);
    free(hits);
    return rc;
}

int lq_vindex_describe_json(const lq_vindex *v, const lq_describe_params *p, char **json_out,
                            lq_err *err)
{
    lq_describe_result r;
    int rc = lq_vindex_describe(v, p, &r, err);
    if (rc)
        return rc;
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"entity\":");
    lq_sb_json_str(&b, p->entity, strlen(p->entity));
    lq_sb_puts(&b, ",\"model\":");
    lq_sb_json_str(&b, v->model, strlen(v->model));
    lq_sb_puts(&b, ",\"edges\":[");
    for (size_t i = 0; i < r.n_edges; i++) {
        const lq_describe_edge *e = &r.edges[i];
        lq_sb_puts(&b, i ? ",{\"target\":" : "{\"target\":");
        lq_sb_json_str(&b, e->target, strlen(e->target));
        lq_sb_puts(&b, ",\"gate_score\":");
        lq_sb_f32(&b, lq_round1_f32(e->gate_score));
        lq_sb_printf(&b, ",\"layer\":%d", e->layer);
        if (e->relation) {
            const char *src = e->relation_source ? e->relation_source : "probe";
            lq_sb_puts(&b, ",\"relation\":");
            lq_sb_json_str(&b, e->relation, strlen(e->relation));
            lq_sb_puts(&b, ",\"source\":");
            lq_sb_json_str(&b, src, strlen(src));
        }
        if (p->verbose)
            lq_sb_printf(&b, ",\"layer_min\":%d,\"layer_max\":%d,\"count\":%d", e->layer_min, e->layer_max,
                         e->count);
        if (e->n_also) {
            lq_sb_puts(&b, ",\"also\":[");
            for (int k = 0; k < e->n_also; k++) {
                if (k)
                    lq_sb_puts(&b, ",");
                lq_sb_json_str(&b, e->also[k], strlen(e->also[k]));
            }
            lq_sb_puts(&b, "]");
        }
        lq_sb_puts(&b, "}");
    }
    lq_sb_puts(&b, "],\"latency_ms\":");
    lq_sb_f64(&b, lq_round_dp(r.latency_ms, 1));
    lq_sb_puts(&b, "}");
    lq_describe_result_free(&r);
    return lq_sb_finish(&b, json_out, err);
}

/* ---- walk ---- */

void lq_walk_params_init(lq_walk_params *p)
{
    memset(p, 0, sizeof *p);
    p->top = 5;
}

void lq_walk_result_free(lq_walk_result *r)
{
    if (!r)
        return;
    free(r->hits);
    memset(r, 0, sizeof *r);
}

/* "a-b" inclusive or "a,b,c"; unparsable -> no layers (LARQL). Filtered to loaded layers. */
static int parse_layer_spec(const lq_vindex *v, const char *spec, int **out, size_t *n)
{
    int L = v->info.num_layers;
    int *ls = malloc((size_t)L * sizeof *ls);
    char *mark = calloc((size_t)L, 1);
    if (!ls || !mark) {
        free(ls);
        free(mark);
        return -1;
    }
    long a, b;
    char *end;
    const char *dash = strchr(spec, '-');
    int ok = 1;
    if (dash && !strchr(spec, ',')) {
        a = strtol(spec, &end, 10);
        ok = end == dash && end != spec;
        b = strtol(dash + 1, &end, 10);
        ok = ok && *end == 0 && end != dash + 1 && a >= 0 && b >= a;
        for (long l = a; ok && l <= b && l < L; l++)
            mark[l] = 1;
    } else {
        const char *s = spec;
        while (ok && *s) {
            a = strtol(s, &end, 10);
            if (end == s || a < 0) {
                ok = 0;
                break;
            }
            if (a < L)
                mark[a] = 1;
            s = *end == ',' ? end + 1 : end;
            if (*end && *end != ',')
                ok = 0;
        }
    }
    size_t m = 0;
    for (int l = 0; ok && l < L; l++)
        if (mark[l] && v->layers[l].present && v->layers[l].num_features > 0)
            ls[m++] = l;
    free(mark);
    *out = ls;
    *n = m;
    return 0;
}

/* The walk of one token: its embedding's gate KNN over the layers, hits named. */
static int walk_token(const lq_vindex *v, const lq_walk_params *p, int32_t id, lq_walk_result *r, lq_err *err)
{
    float *q = malloc((size_t)v->info.hidden_size * sizeof *q);
    if (!q)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int rc = lq_vindex_embed_row(v, id, q, err);
    int *layers = NULL;
    size_t nl = 0;
    if (!rc && (p->layers ? parse_layer_spec(v, p->layers, &layers, &nl) : band_layers(v, 3, &layers, &nl)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_vindex_hit *hits = NULL;
    size_t nh = 0;
    if (!rc)
        rc = walk_layers(v, q, layers, nl, (size_t)p->top, &hits, &nh, err);
    free(q);
    free(layers);
    if (rc)
        return rc;
    r->hits = calloc(nh ? nh : 1, sizeof *r->hits);
    if (!r->hits) {
        free(hits);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < nh; i++) {
        lq_feature_meta fm;
        lq_vindex_feature_meta(v, hits[i].layer, hits[i].feature, &fm);
        r->hits[i] = (lq_walk_hit){hits[i].layer, hits[i].feature, hits[i].score,
                                   lq_vx_meta_text(v, &fm),
                                   lq_vindex_probe_label(v, hits[i].layer, hits[i].feature)};
    }
    free(hits);
    r->n_hits = nh;
    return LQ_OK;
}

/* The prompt's ids, checked as walk needs them. */
static int walk_ids(const lq_vindex *v, const lq_walk_params *p, int32_t **ids, size_t *n, lq_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!p->prompt || !*p->prompt)
        return lq_err_set(err, LQ_EINVAL, "empty prompt");
    if (p->top < 0)
        return lq_err_set(err, LQ_EINVAL, "top %d must be >= 0", p->top);
    int rc = need_browse(v, err);
    if (!rc)
        rc = lq_tokenizer_encode(v->tok, p->prompt, strlen(p->prompt),
                                 lq_tokenizer_add_bos(v->tok) ? LQ_TOK_ADD_BOS : 0, ids, n, err);
    if (!rc && *n == 0)
        rc = lq_err_set(err, LQ_EINVAL, "empty prompt");
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}

int lq_vindex_walk(const lq_vindex *v, const lq_walk_params *p, lq_walk_result *r, lq_err *err)
{
    memset(r, 0, sizeof *r);
    double t0 = lq_now_ms();
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = walk_ids(v, p, &ids, &n, err);
    if (!rc)
        rc = walk_token(v, p, ids[n - 1], r, err);
    free(ids);
    r->latency_ms = lq_now_ms() - t0;
    return rc;
}

static void walk_hits_json(lq_sb *b, const lq_walk_result *r)
{
    lq_sb_puts(b, "[");
    for (size_t i = 0; i < r->n_hits; i++) {
        const lq_walk_hit *h = &r->hits[i];
        lq_sb_printf(b, "%s{\"layer\":%d,\"feature\":%d,\"gate_score\":", i ? "," : "", h->layer, h->feature);
        lq_sb_f32(b, lq_round1_f32(h->gate_score));
        lq_sb_puts(b, ",\"target\":");
        lq_sb_json_str(b, h->target, strlen(h->target));
        if (h->relation) {
            lq_sb_puts(b, ",\"relation\":");
            lq_sb_json_str(b, h->relation, strlen(h->relation));
        }
        lq_sb_puts(b, "}");
    }
    lq_sb_puts(b, "]");
}

int lq_vindex_walk_positions_json(const lq_vindex *v, const lq_walk_params *p, char **json_out, lq_err *err)
{
    *json_out = NULL;
    double t0 = lq_now_ms();
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = walk_ids(v, p, &ids, &n, err);
    if (!rc && n > LQ_WALK_MAX_POSITIONS)
        rc = lq_err_set(err, LQ_ERANGE, "walk positions: the prompt is %zu tokens (at most %d)", n,
                        LQ_WALK_MAX_POSITIONS);
    lq_sb b = {0};
    if (!rc) {
        lq_sb_puts(&b, "{\"prompt\":");
        lq_sb_json_str(&b, p->prompt, strlen(p->prompt));
        lq_sb_puts(&b, ",\"positions\":[");
    }
    for (size_t i = 0; !rc && i < n; i++) {
        lq_walk_result r = {0};
        if ((rc = walk_token(v, p, ids[i], &r, err)))
            break;
        char *t = NULL;
        size_t tl = 0;
        if (lq_tokenizer_decode(v->tok, &ids[i], 1, 0, &t, &tl, NULL)) {
            t = NULL;
            tl = 0;
        }
        lq_sb_printf(&b, "%s{\"pos\":%zu,\"token\":", i ? "," : "", i);
        lq_sb_json_str(&b, t ? t : "", tl);
        lq_sb_puts(&b, ",\"hits\":");
        walk_hits_json(&b, &r);
        lq_sb_puts(&b, "}");
        free(t);
        lq_walk_result_free(&r);
    }
    free(ids);
    if (rc) {
        lq_sb_free(&b);
        return rc;
    }
    lq_sb_puts(&b, "],\"latency_ms\":");
    lq_sb_f64(&b, lq_round_dp(lq_now_ms() - t0, 1));
    lq_sb_puts(&b, "}");
    return lq_sb_finish(&b, json_out, err);
}

int lq_vindex_walk_json(const lq_vindex *v, const lq_walk_params *p, char **json_out, lq_err *err)
{
    lq_walk_result r;
    int rc = lq_vindex_walk(v, p, &r, err);
    if (rc)
        return rc;
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"prompt\":");
    lq_sb_json_str(&b, p->prompt, strlen(p->prompt));
    lq_sb_puts(&b, ",\"hits\":");
    walk_hits_json(&b, &r);
    lq_sb_puts(&b, ",\"latency_ms\":");
    lq_sb_f64(&b, lq_round_dp(r.latency_ms, 1));
    lq_sb_puts(&b, "}");
    lq_walk_result_free(&r);
    return lq_sb_finish(&b, json_out, err);
}

/* ---- select ---- */

void lq_select_params_init(lq_select_params *p)
{
    memset(p, 0, sizeof *p);
    p->layer = -1;
    p->limit = 20;
    p->min_confidence = NAN;
    p->order = "desc";
}

void lq_select_result_free(lq_select_result *r)
{
    if (!r)
        return;
    free(r->edges);
    memset(r, 0, sizeof *r);
}

typedef struct sel_order {
    int desc, by_layer;
} sel_order;

static int cmp_sel(const void *a, const void *b, void *ctx)
{
    const lq_select_edge *x = a, *y = b;
    const sel_order *o = ctx;
    int c;
    if (o->by_layer)
        c = x->layer < y->layer ? -1 : x->layer > y->layer;
    else
        c = x->c_score < y->c_score ? -1 : x->c_score > y->c_score;
    if (o->desc)
        c = -c;
    if (c)
        return c;
    /* stable: scan order (layer, feature) */
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return x->feature < y->feature ? -1 : x->feature > y->feature;
}

int lq_vindex_select(const lq_vindex *v, const lq_select_params *p, lq_select_result *r,
                     lq_err *err)
{
    memset(r, 0, sizeof *r);
    double t0 = lq_now_ms();
    if (p->limit < 0)
        return lq_err_set(err, LQ_EINVAL, "limit %d must be >= 0", p->limit);
    if (p->layer >= v->info.num_layers || p->layer < -1)
        return lq_err_set(err, LQ_ERANGE, "layer %d out of range (model has %d layers)", p->layer,
                          v->info.num_layers);
    const char *ob = p->order_by;
    int by_layer = ob && !strcmp(ob, "layer");
    if (ob && !by_layer && strcmp(ob, "confidence") && strcmp(ob, "c_score") && strcmp(ob, "gate_score"))
        ob = NULL; /* LARQL: other values sort by c_score descending */
    int desc = ob ? !(p->order && !strcmp(p->order, "asc")) : 1;
    int rc = need_browse(v, err);
    if (rc)
        return rc;
    size_t cap = 256, n = 0;
    lq_select_edge *e = malloc(cap * sizeof *e);
    if (!e)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int l = 0; l < v->info.num_layers; l++) {
        if (p->layer >= 0 && l != p->layer)
            continue;
        int nf = v->layers[l].present ? v->layers[l].num_features : 0;
        for (int f = 0; f < nf; f++) {
            lq_feature_meta fm;
            if (!lq_vindex_feature_meta(v, l, f, &fm))
                continue;
            const char *lab = lq_vindex_probe_label(v, l, f);
            if (p->relation && (!lab || !lq_icontains(lab, p->relation)))
                continue;
            const char *tok = lq_vx_meta_text(v, &fm);
            if (p->entity && !lq_icontains(tok, p->entity))
                continue;
            if (!isnan(p->min_confidence) && !(fm.c_score >= p->min_confidence))
                continue;
            if (n == cap) {
                lq_select_edge *ne = realloc(e, cap * 2 * sizeof *e);
                if (!ne) {
                    free(e);
                    return lq_err_set(err, LQ_ENOMEM, "out of memory");
                }
                e = ne;
                cap *= 2;
            }
            e[n++] = (lq_select_edge){l, f, tok, fm.c_score, lab};
        }
    }
    sel_order so = {desc, by_layer};
    qsort_r(e, n, sizeof *e, cmp_sel, &so);
    r->edges = e;
    r->total = n;
    r->n_edges = n < (size_t)p->limit ? n : (size_t)p->limit;
    r->latency_ms = lq_now_ms() - t0;
    return LQ_OK;
}

int lq_vindex_select_json(const lq_vindex *v, const lq_select_params *p, char **json_out,
                          lq_err *err)
{
    lq_select_result r;
    int rc = lq_vindex_select(v, p, &r, err);
    if (rc)
        return rc;
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"edges\":[");
    for (size_t i = 0; i < r.n_edges; i++) {
        const lq_select_edge *e = &r.edges[i];
        lq_sb_printf(&b, "%s{\"layer\":%d,\"feature\":%d,\"target\":", i ? "," : "", e->layer, e->feature);
        lq_sb_json_str(&b, e->target, strlen(e->target));
        lq_sb_puts(&b, ",\"c_score\":");
        lq_sb_f32(&b, e->c_score);
        if (e->relation) {
            lq_sb_puts(&b, ",\"relation\":");
            lq_sb_json_str(&b, e->relation, strlen(e->relation));
        }
        lq_sb_puts(&b, "}");
    }
    lq_sb_printf(&b, "],\"total\":%zu,\"latency_ms\":", r.total);
    lq_sb_f64(&b, lq_round_dp(r.latency_ms, 1));
    lq_sb_puts(&b, "}");
    lq_select_result_free(&r);
    return lq_sb_finish(&b, json_out, err);
}

/* ---- relations ---- */

typedef struct rel_agg {
    const char *name; /* original spelling (token text, owned by v) */
    int count, min_layer, max_layer;
    float max_score;
    const char *examples[3];
    int n_ex;
    size_t seq;
} rel_agg;

static int cmp_rel(const void *a, const void *b)
{
    const rel_agg *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int relations_range(const lq_vindex *v, int lo, int hi, char **json_out, lq_err *err);

int lq_vindex_relations_json(const lq_vindex *v, char **json_out, lq_err *err)
{
    return relations_range(v, v->info.bands[1].start, v->info.bands[1].end, json_out, err);
}

int lq_vindex_relations_layer_json(const lq_vindex *v, int layer, char **json_out, lq_err *err)
{
    if (layer < 0 || layer >= v->info.num_layers)
        return lq_err_set(err, LQ_ERANGE, "layer %d is outside the model (layers 0-%d)", layer,
                          v->info.num_layers - 1);
    return relations_range(v, layer, layer, json_out, err);
}

static int relations_range(const lq_vindex *v, int lo, int hi, char **json_out, lq_err *err)
{
    double t0 = lq_now_ms();
    int rc = need_browse(v, err);
    if (rc)
        return rc;
    smap map = {0};
    size_t cap = 64, n = 0;
    rel_agg *agg = malloc(cap * sizeof *agg);
    if (!agg)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int l = lo; !rc && l <= hi; l++) {
        int nf = v->layers[l].present ? v->layers[l].num_features : 0;
        for (int f = 0; !rc && f < nf; f++) {
            lq_feature_meta fm;
            if (!lq_vindex_feature_meta(v, l, f, &fm) || !(fm.c_score >= 0.2f))
                continue;
            const char *tok = lq_vx_meta_text(v, &fm);
            if (!lq_vx_is_content(tok))
                continue;
            char *key = lower_dup(tok);
            if (!key) {
                rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                break;
            }
            int idx = smap_find(&map, key);
            if (idx >= 0) {
                free(key);
                rel_agg *a = &agg[idx];
                a->count++;
                if (fm.c_score > a->max_score)
                    a->max_score = fm.c_score;
                if (l < a->min_layer)
                    a->min_layer = l;
                if (l > a->max_layer)
                    a->max_layer = l;
                continue;
            }
            if (n == cap) {
                rel_agg *na = realloc(agg, cap * 2 * sizeof *agg);
                if (!na) {
                    free(key);
                    rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                    break;
                }
                agg = na;
                cap *= 2;
            }
            rel_agg *a = &agg[n];
            memset(a, 0, sizeof *a);
            a->name = tok;
            a->count = 1;
            a->min_layer = a->max_layer = l;
            a->max_score = fm.c_score;
            a->seq = n;
            for (int k = 0; k < fm.n_top && a->n_ex < 3; k++) {
                const char *x = lq_vindex_token_text(v, fm.top_ids[k]);
                if (lq_vx_is_content(x) && strcasecmp(x, tok))
                    a->examples[a->n_ex++] = x;
            }
            if (smap_put(&map, key, (int)n)) {
                free(key);
                rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            }
            n++;
        }
    }
    smap_free(&map);
    if (rc) {
        free(agg);
        return rc;
    }
    qsort(agg, n, sizeof *agg, cmp_rel);
    /* probe label histogram */
    smap pm = {0};
    size_t pn = 0;
    rel_agg *pa = calloc(v->n_labels ? v->n_labels : 1, sizeof *pa);
    for (size_t i = 0; pa && i < v->label_cap; i++) {
        if (!v->labels[i].used)
            continue;
        char *key = strdup(v->labels[i].label);
        int idx = key ? smap_find(&pm, key) : -1;
        if (idx >= 0) {
            free(key);
            pa[idx].count++;
        } else if (key) {
            pa[pn] = (rel_agg){.name = v->labels[i].label, .count = 1, .seq = pn};
            if (smap_put(&pm, key, (int)pn))
                free(key);
            pn++;
        }
    }
    smap_free(&pm);
    if (pa)
        qsort(pa, pn, sizeof *pa, cmp_rel);
    /* relation clusters: features per cluster label (labels repeat across clusters) */
    smap cm = {0};
    size_t cn = 0;
    rel_agg *ca = calloc(v->n_clu ? v->n_clu : 1, sizeof *ca);
    for (int l = 0; ca && v->clu && l < v->info.num_layers; l++)
        for (int f = 0; v->clu[l] && f < v->layers[l].num_features; f++) {
            int32_t c = v->clu[l][f];
            if (c < 0 || (size_t)c >= v->n_clu)
                continue;
            char *key = strdup(v->clu_labels[c]);
            int idx = key ? smap_find(&cm, key) : -1;
            if (idx >= 0) {
                free(key);
                ca[idx].count++;
            } else if (key) {
                ca[cn] = (rel_agg){.name = v->clu_labels[c], .count = 1, .seq = cn};
                if (smap_put(&cm, key, (int)cn))
                    free(key);
                cn++;
            }
        }
    smap_free(&cm);
    if (ca)
        qsort(ca, cn, sizeof *ca, cmp_rel);
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"relations\":[");
    for (size_t i = 0; i < n && i < 50; i++) {
        rel_agg *a = &agg[i];
        lq_sb_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        lq_sb_json_str(&b, a->name, strlen(a->name));
        lq_sb_printf(&b, ",\"count\":%d,\"max_score\":", a->count);
        lq_sb_f32(&b, a->max_score);
        lq_sb_printf(&b, ",\"min_layer\":%d,\"max_layer\":%d,\"examples\":[", a->min_layer, a->max_layer);
        for (int k = 0; k < a->n_ex; k++) {
            if (k)
                lq_sb_puts(&b, ",");
            lq_sb_json_str(&b, a->examples[k], strlen(a->examples[k]));
        }
        lq_sb_puts(&b, "]}");
    }
    lq_sb_puts(&b, "],\"probe_relations\":[");
    for (size_t i = 0; pa && i < pn; i++) {
        lq_sb_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        lq_sb_json_str(&b, pa[i].name, strlen(pa[i].name));
        lq_sb_printf(&b, ",\"count\":%d}", pa[i].count);
    }
    lq_sb_puts(&b, "],\"cluster_relations\":[");
    for (size_t i = 0; ca && i < cn && i < 50; i++) {
        lq_sb_puts(&b, i ? ",{\"name\":" : "{\"name\":");
        lq_sb_json_str(&b, ca[i].name, strlen(ca[i].name));
        lq_sb_printf(&b, ",\"count\":%d}", ca[i].count);
    }
    lq_sb_printf(&b, "],\"cluster_count\":%zu", v->n_clu);
    lq_sb_printf(&b, ",\"probe_count\":%zu,\"total\":%zu,\"latency_ms\":", v->n_labels, n);
    lq_sb_f64(&b, lq_round_dp(lq_now_ms() - t0, 1));
    lq_sb_puts(&b, "}");
    free(agg);
    free(pa);
    free(ca);
    return lq_sb_finish(&b, json_out, err);
}

/* ---- nearest / show features (pg_infer rows) ---- */

/* also = first 3 top-k tokens with logit > 0 and readable, ", "-joined. */
static void put_also(lq_sb *b, const lq_vindex *v, const lq_feature_meta *fm)
{
    lq_sb s = {0};
    int n = 0;
    for (int k = 0; k < fm->n_top && n < 3; k++) {
        const char *t = lq_vindex_token_text(v, fm->top_ids[k]);
        if (fm->top_logits[k] > 0 && lq_vx_is_readable(t)) {
            if (n++)
                lq_sb_puts(&s, ", ");
            lq_sb_puts(&s, t);
        }
    }
    lq_sb_json_str(b, s.s ? s.s : "", s.n);
    free(s.s);
}

void lq_nearest_params_init(lq_nearest_params *p)
{
    memset(p, 0, sizeof *p);
    p->layer = -1;
    p->top = 20;
}

int lq_vindex_nearest_json(const lq_vindex *v, const lq_nearest_params *p, char **json_out,
                           lq_err *err)
{
    double t0 = lq_now_ms();
    if (!p->entity || !*p->entity)
        return lq_err_set(err, LQ_EINVAL, "empty entity");
    if (p->top < 0)
        return lq_err_set(err, LQ_EINVAL, "top %d must be >= 0", p->top);
    if (p->layer < 0 || p->layer >= v->info.num_layers)
        return lq_err_set(err, LQ_ERANGE, "layer %d out of range (model has %d layers)", p->layer,
                          v->info.num_layers);
    int rc = need_browse(v, err);
    if (rc)
        return rc;
    float *q = malloc((size_t)v->info.hidden_size * sizeof *q);
    lq_vindex_hit *hits = malloc(((size_t)p->top + 1) * sizeof *hits);
    size_t ntok = 0, nh = 0;
    if (!q || !hits)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_vindex_entity_vector(v, p->entity, q, &ntok, err);
    if (!rc && ntok == 0)
        rc = lq_err_set(err, LQ_EINVAL, "empty prompt");
    if (!rc)
        rc = lq_vindex_gate_knn(v, p->layer, q, (size_t)p->top, hits, &nh, err);
    free(q);
    if (rc) {
        free(hits);
        return rc;
    }
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"entity\":");
    lq_sb_json_str(&b, p->entity, strlen(p->entity));
    lq_sb_printf(&b, ",\"layer\":%d,\"hits\":[", p->layer);
    int first = 1;
    for (size_t i = 0; i < nh; i++) {
        lq_feature_meta fm;
        if (!lq_vindex_feature_meta(v, hits[i].layer, hits[i].feature, &fm))
            continue;
        const char *tok = lq_vx_meta_text(v, &fm);
        lq_sb_printf(&b, "%s{\"feature\":%d,\"token\":", first ? "" : ",", hits[i].feature);
        lq_sb_json_str(&b, tok, strlen(tok));
        lq_sb_puts(&b, ",\"score\":");
        lq_sb_f64(&b, lq_round_dp(hits[i].score, 4));
        lq_sb_puts(&b, ",\"also\":");
        put_also(&b, v, &fm);
        lq_sb_puts(&b, "}");
        first = 0;
    }
    lq_sb_puts(&b, "],\"latency_ms\":");
    lq_sb_f64(&b, lq_round_dp(lq_now_ms() - t0, 1));
    lq_sb_puts(&b, "}");
    free(hits);
    return lq_sb_finish(&b, json_out, err);
}

int lq_vindex_show_features_json(const lq_vindex *v, int layer, const char *filter,
                                 double min_score, int top, char **json_out, lq_err *err)
{
    if (layer < 0 || layer >= v->info.num_layers)
        return lq_err_set(err, LQ_ERANGE, "layer %d out of range (model has %d layers)", layer,
                          v->info.num_layers);
    if (top < 0)
        return lq_err_set(err, LQ_EINVAL, "top %d must be >= 0", top);
    lq_sb b = {0};
    lq_sb_printf(&b, "{\"layer\":%d,\"features\":[", layer);
    int nf = v->layers[layer].present ? v->layers[layer].num_features : 0, rows = 0;
    for (int f = 0; f < nf && rows < top; f++) {
        lq_feature_meta fm;
        if (!lq_vindex_feature_meta(v, layer, f, &fm) || fm.c_score < min_score)
            continue;
        const char *tok = lq_vx_meta_text(v, &fm);
        if (filter && *filter && !lq_icontains(tok, filter))
            continue;
        lq_sb_printf(&b, "%s{\"feature\":%d,\"token\":", rows ? "," : "", f);
        lq_sb_json_str(&b, tok, strlen(tok));
        lq_sb_puts(&b, ",\"score\":");
        lq_sb_f32(&b, fm.c_score);
        lq_sb_puts(&b, ",\"also\":");
        put_also(&b, v, &fm);
        lq_sb_puts(&b, "}");
        rows++;
    }
    lq_sb_puts(&b, "]}");
    return lq_sb_finish(&b, json_out, err);
}

/* ---- similar ---- */

int lq_vindex_similar(const lq_vindex *v, const char *a, const char *b, double *score, lq_err *err)
{
    return lq_vindex_similar_layers(v, a, b, 0, score, err);
}

int lq_vindex_similar_layers(const lq_vindex *v, const char *a, const char *b, int max_layers, double *score,
                             lq_err *err)
{
    if (!a || !*a || !b || !*b)
        return lq_err_set(err, LQ_EINVAL, "empty entity");
    int rc = need_browse(v, err);
    if (rc)
        return rc;
    int D = v->info.hidden_size;
    float *Q = malloc(2 * (size_t)D * sizeof *Q);
    int *layers = NULL;
    size_t nl = 0, na = 0, nb = 0;
    if (!Q || band_layers(v, 3, &layers, &nl)) {
        free(Q);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    if (max_layers > 0 && nl > (size_t)max_layers) {
        /* pg_infer's sampling: every floor(L/m)-th layer from the first, m of them */
        size_t step = nl / (size_t)max_layers;
        for (size_t i = 0; i < (size_t)max_layers; i++)
            layers[i] = layers[i * step];
        nl = (size_t)max_layers;
    }
    rc = lq_vindex_entity_vector(v, a, Q, &na, err);
    if (!rc)
        rc = lq_vindex_entity_vector(v, b, Q + D, &nb, err);
    if (!rc && (na == 0 || nb == 0))
        rc = lq_err_set(err, LQ_EINVAL, "empty prompt");
    const size_t K = 50;
    lq_vindex_hit *hits = malloc((nl ? nl : 1) * 2 * K * sizeof *hits);
    size_t *cnt = malloc((nl ? nl : 1) * 2 * sizeof *cnt);
    if (!rc && (!hits || !cnt))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_vindex_gate_knn_batch(v, layers, nl, Q, 2, K, hits, cnt, err);
    double best = 0;
    for (size_t i = 0; !rc && i < nl; i++) {
        const lq_vindex_hit *ha = hits + (0 * nl + i) * K, *hb = hits + (1 * nl + i) * K;
        size_t ca = cnt[0 * nl + i], cb = cnt[1 * nl + i];
        double lv = 0;
        for (size_t x = 0; x < ca; x++)
            for (size_t y = 0; y < cb; y++)
                if (ha[x].feature == hb[y].feature) {
                    double s = ha[x].score < hb[y].score ? ha[x].score : hb[y].score;
                    if (s > lv)
                        lv = s;
                }
        if (lv > best)
            best = lv;
    }
    if (!rc) {
        if (best > 0) {
            *score = best;
        } else {
            double dot = 0, n1 = 0, n2 = 0;
            for (int d = 0; d < D; d++)
                dot += (double)Q[d] * Q[D + d], n1 += (double)Q[d] * Q[d], n2 += (double)Q[D + d] * Q[D + d];
            *score = n1 > 0 && n2 > 0 ? 10.0 * dot / sqrt(n1 * n2) : 0.0;
        }
    }
    free(Q);
    free(layers);
    free(hits);
    free(cnt);
    return rc;
}

int lq_vindex_similar_json(const lq_vindex *v, const char *a, const char *b, char **json_out,
                           lq_err *err)
{
    double t0 = lq_now_ms(), s = 0;
    int rc = lq_vindex_similar(v, a, b, &s, err);
    if (rc)
        return rc;
    lq_sb sb = {0};
    lq_sb_puts(&sb, "{\"a\":");
    lq_sb_json_str(&sb, a, strlen(a));
    lq_sb_puts(&sb, ",\"b\":");
    lq_sb_json_str(&sb, b, strlen(b));
    lq_sb_puts(&sb, ",\"score\":");
    lq_sb_f64(&sb, lq_round_dp(s, 4));
    lq_sb_puts(&sb, ",\"latency_ms\":");
    lq_sb_f64(&sb, lq_round_dp(lq_now_ms() - t0, 1));
    lq_sb_puts(&sb, "}");
    return lq_sb_finish(&sb, json_out, err);
}

/* ---- stats / show layers ---- */

int lq_vindex_stats_json(const lq_vindex *v, char **json_out, lq_err *err)
{
    const lq_vindex_info *in = &v->info;
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"model\":");
    lq_sb_json_str(&b, v->model, strlen(v->model));
    lq_sb_puts(&b, ",\"family\":");
    lq_sb_json_str(&b, v->family, strlen(v->family));
    lq_sb_printf(&b, ",\"mode\":\"full\",\"layers\":%d,\"features\":%llu,\"features_per_layer\":%d,"
                     "\"hidden_size\":%d,\"vocab_size\":%d,\"extract_level\":",
                 in->num_layers, (unsigned long long)in->total_features, in->features_per_layer,
                 in->hidden_size, in->vocab_size);
    lq_sb_json_str(&b, v->level_str, strlen(v->level_str));
    lq_sb_printf(&b, ",\"dtype\":\"%s\",\"layer_bands\":", in->dtype == LQ_VDT_F16 ? "f16" : "f32");
    if (in->has_bands)
        lq_sb_printf(&b, "{\"syntax\":[%d,%d],\"knowledge\":[%d,%d],\"output\":[%d,%d]}", in->bands[0].start,
                     in->bands[0].end, in->bands[1].start, in->bands[1].end, in->bands[2].start,
                     in->bands[2].end);
    else
        lq_sb_puts(&b, "null");
    lq_sb_printf(&b, ",\"loaded\":{\"browse\":true,\"inference\":%s,\"ffn_service\":true,\"embed_service\":true},"
                     "\"q4k_ffn\":{\"cache_slots\":0,\"cache_bytes\":0,\"feature_major_down\":false}}",
                 in->has_model_weights ? "true" : "false");
    return lq_sb_finish(&b, json_out, err);
}

int lq_vindex_show_layers_json(const lq_vindex *v, char **json_out, lq_err *err)
{
    static const char *names[3] = {"syntax", "knowledge", "output"};
    lq_sb b = {0};
    lq_sb_puts(&b, "{\"layers\":[");
    for (int l = 0; l < v->info.num_layers; l++) {
        const char *band = "";
        if (v->info.has_bands) {
            band = "unknown";
            for (int i = 0; i < 3; i++)
                if (l >= v->info.bands[i].start && l <= v->info.bands[i].end) {
                    band = names[i];
                    break;
                }
        }
        lq_sb_printf(&b, "%s{\"layer\":%d,\"band\":\"%s\",\"num_features\":%d}", l ? "," : "", l, band,
                     v->layers[l].present ? v->layers[l].num_features : 0);
    }
    lq_sb_puts(&b, "]}");
    return lq_sb_finish(&b, json_out, err);
}

/* ---- warmup ---- */

int lq_vindex_prefetch_gates(const lq_vindex *v, const int *layers, size_t n)
{
    int L = v->info.num_layers, count = 0;
    size_t el = v->info.dtype == LQ_VDT_F16 ? 2 : 4;
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < (layers ? n : (size_t)L); i++) {
        int l = layers ? layers[i] : (int)i;
        const void *rows = NULL;
        int nf = 0;
        if (l < 0 || l >= L || lq_vindex_gate_layer(v, l, &rows, &nf, NULL) || !rows || nf <= 0)
            continue;
        const unsigned char *b = rows;
        size_t bytes = (size_t)nf * (size_t)v->info.hidden_size * el;
        for (size_t o = 0; o < bytes; o += 4096)
            sink ^= b[o];
        count++;
    }
    (void)sink;
    return count;
}
