/* Gate KNN: raw dot products of query vectors with a layer's gate rows (f32 or f16 read in
 * place from the mapping), top-K by |score| with the signed score kept. Batched queries and
 * several layers go through one pass: each row is loaded once and scored against every
 * query while it is in cache; row ranges of all layers are spread over the thread pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "vindex/vindex_internal.h"

void lq_vx_scores_scalar(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                         const float *Q, size_t nq, float *out, size_t out_stride)
{
    for (size_t r = r0; r < r1; r++) {
        for (size_t q = 0; q < nq; q++) {
            const float *x = Q + q * d;
            double acc = 0; /* double: the reference the SIMD kernels are compared with */
            if (f16) {
                const uint8_t *p = (const uint8_t *)rows + r * d * 2;
                for (size_t i = 0; i < d; i++) {
                    uint16_t h;
                    memcpy(&h, p + 2 * i, 2);
                    acc += (double)lq_f16_to_f32(h) * x[i];
                }
            } else {
                const uint8_t *p = (const uint8_t *)rows + r * d * 4;
                for (size_t i = 0; i < d; i++) {
                    float w;
                    memcpy(&w, p + 4 * i, 4);
                    acc += (double)w * x[i];
                }
            }
            out[q * out_stride + r] = (float)acc;
        }
    }
}

lq_vx_scores_fn lq_vx_scores_pick(const lq_vindex *v, int force_scalar)
{
    if (force_scalar || !v->use_avx2)
        return lq_vx_scores_scalar;
    return v->use_avx512 ? lq_vx_scores_avx512 : lq_vx_scores_avx2;
}

/* ---- prefilter sketches ----
 * A gate row g becomes trits t_d = sign(g_d) where |g_d| > 0.5 * mean|g| (else 0) and a scale
 * s = mean of |g_d| over the kept components, so that s * sum(t * q) approximates g . q. For
 * BitNet's unit-trit gate rows this is exact (t = g, s = 1). */

void lq_vx_sketch_scores_scalar(const uint16_t *sk, const float *scale, size_t d, size_t r0, size_t r1,
                                const float *Q, size_t nq, float *out, size_t out_stride)
{
    size_t nc = d / 16;
    for (size_t r = r0; r < r1; r++) {
        const uint16_t *m = sk + r * nc * 2;
        for (size_t q = 0; q < nq; q++) {
            const float *x = Q + q * d;
            float acc = 0;
            for (size_t c = 0; c < nc; c++)
                for (int b = 0; b < 16; b++) {
                    if (m[2 * c] >> b & 1)
                        acc += x[16 * c + b];
                    if (m[2 * c + 1] >> b & 1)
                        acc -= x[16 * c + b];
                }
            out[q * out_stride + r] = scale[r] * acc;
        }
    }
}

typedef struct sk_job {
    lq_vindex *v;
    int layer;
    volatile int inexact;
} sk_job;

static void sk_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    sk_job *j = ctx;
    lq_vindex *v = j->v;
    size_t D = (size_t)v->info.hidden_size, nc = D / 16;
    const void *rows;
    int nf;
    lq_vindex_gate_layer(v, j->layer, &rows, &nf, NULL);
    int f16 = v->info.dtype == LQ_VDT_F16;
    for (int64_t r = start; r < end; r++) {
        const uint8_t *p = (const uint8_t *)rows + (size_t)r * D * (f16 ? 2 : 4);
        double sum = 0;
        for (size_t i = 0; i < D; i++) {
            float g;
            if (f16) {
                uint16_t h;
                memcpy(&h, p + 2 * i, 2);
                g = lq_f16_to_f32(h);
            } else {
                memcpy(&g, p + 4 * i, 4);
            }
            sum += fabsf(g);
        }
        float thr = (float)(0.5 * sum / (double)D);
        uint16_t *m = v->sk[j->layer] + (size_t)r * nc * 2;
        double kept = 0;
        size_t nk = 0;
        for (size_t c = 0; c < nc; c++) {
            uint16_t pm = 0, nm = 0;
            for (int b = 0; b < 16; b++) {
                size_t i = 16 * c + (size_t)b;
                float g;
                if (f16) {
                    uint16_t h;
                    memcpy(&h, p + 2 * i, 2);
                    g = lq_f16_to_f32(h);
                } else {
                    memcpy(&g, p + 4 * i, 4);
                }
                if (fabsf(g) > thr && g > 0)
                    pm |= (uint16_t)(1u << b);
                else if (fabsf(g) > thr && g < 0)
                    nm |= (uint16_t)(1u << b);
                if (fabsf(g) > thr)
                    kept += fabsf(g), nk++;
            }
            m[2 * c] = pm;
            m[2 * c + 1] = nm;
        }
        float scale = nk ? (float)(kept / (double)nk) : 0.0f;
        v->sk_scale[j->layer][r] = scale;
        /* exact when every component is 0 or +-scale (unit trits) */
        for (size_t i = 0; i < D && !j->inexact; i++) {
            float g;
            if (f16) {
                uint16_t h;
                memcpy(&h, p + 2 * i, 2);
                g = lq_f16_to_f32(h);
            } else {
                memcpy(&g, p + 4 * i, 4);
            }
            if (g != 0 && fabsf(g) != scale)
                j->inexact = 1; /* benign race: threads only ever store 1 */
        }
    }
}

int lq_vx_build_sketches(lq_vindex *v, lq_err *err)
{
    int L = v->info.num_layers;
    size_t D = (size_t)v->info.hidden_size;
    if (D % 16)
        return LQ_OK; /* no prefilter: every query scans exactly */
    v->sk = calloc((size_t)L, sizeof *v->sk);
    v->sk_scale = calloc((size_t)L, sizeof *v->sk_scale);
    v->sk_inexact = calloc((size_t)L, sizeof *v->sk_inexact);
    if (!v->sk || !v->sk_scale || !v->sk_inexact)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int l = 0; l < L; l++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, l, &rows, &nf, NULL);
        if (!nf)
            continue;
        v->sk[l] = malloc((size_t)nf * (D / 16) * 2 * sizeof(uint16_t));
        v->sk_scale[l] = malloc((size_t)nf * sizeof(float));
        if (!v->sk[l] || !v->sk_scale[l])
            return lq_err_set(err, LQ_ENOMEM, "out of memory for the layer %d prefilter sketch", l);
        sk_job j = {v, l, 0};
        lq_pool_for(v->pool, nf, 64, sk_chunk, &j);
        v->sk_inexact[l] = j.inexact;
    }
    v->prefilter = 1;
    return LQ_OK;
}

/* Is a better than b in the top-K order: larger |score|, then lower feature. */
static int better(const lq_vindex_hit *a, const lq_vindex_hit *b)
{
    float fa = fabsf(a->score), fb = fabsf(b->score);
    if (fa != fb)
        return fa > fb;
    return a->feature < b->feature;
}

/* Min-heap on "better": root is the worst kept hit. */
static void sift_down(lq_vindex_hit *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && better(&h[m], &h[l]))
            m = l;
        if (r < n && better(&h[m], &h[r]))
            m = r;
        if (m == i)
            return;
        lq_vindex_hit t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(lq_vindex_hit *h, size_t i)
{
    while (i) {
        size_t p = (i - 1) / 2;
        if (!better(&h[p], &h[i]))
            return;
        lq_vindex_hit t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static int cmp_feature(const void *a, const void *b)
{
    const lq_vindex_hit *x = a, *y = b;
    return (x->feature > y->feature) - (x->feature < y->feature);
}

static int cmp_hit(const void *a, const void *b)
{
    const lq_vindex_hit *x = a, *y = b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

size_t lq_vx_topk(const float *scores, size_t n, size_t k, int layer, lq_vindex_hit *hits)
{
    if (k == 0 || n == 0)
        return 0;
    size_t m = 0;
    for (size_t f = 0; f < n; f++) {
        lq_vindex_hit h = {layer, (int32_t)f, scores[f]};
        if (isnan(h.score))
            continue;
        if (m < k) {
            hits[m] = h;
            sift_up(hits, m++);
        } else if (fabsf(h.score) > fabsf(hits[0].score)) { /* strict: earlier feature kept on ties */
            hits[0] = h;
            sift_down(hits, m, 0);
        }
    }
    qsort(hits, m, sizeof *hits, cmp_hit);
    return m;
}

/* ---- batched multi-layer scoring on the pool ---- */

typedef struct scan_job {
    const lq_vindex *v;
    int sketch;                /* approximate scores from the prefilter sketches */
    const int *layers;
    size_t n_layers;
    const uint64_t *row_start; /* [n_layers + 1] prefix sums of rows */
    const float *Q;
    size_t nq;
    float **scores;            /* [n_layers] -> [nq, nf] */
    int force_scalar;
} scan_job;

static void scan_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    scan_job *j = ctx;
    size_t D = (size_t)j->v->info.hidden_size;
    int f16 = j->v->info.dtype == LQ_VDT_F16;
    lq_vx_scores_fn fn = lq_vx_scores_pick(j->v, j->force_scalar);
    for (size_t li = 0; li < j->n_layers; li++) {
        uint64_t a = j->row_start[li], b = j->row_start[li + 1];
        uint64_t s = (uint64_t)start > a ? (uint64_t)start : a;
        uint64_t e = (uint64_t)end < b ? (uint64_t)end : b;
        if (s >= e)
            continue;
        const void *rows;
        int nf;
        lq_vindex_gate_layer(j->v, j->layers[li], &rows, &nf, NULL);
        if (j->sketch)
            (j->v->use_avx512 && !j->force_scalar ? lq_vx_sketch_scores_avx512 : lq_vx_sketch_scores_scalar)(
                j->v->sk[j->layers[li]], j->v->sk_scale[j->layers[li]], D, (size_t)(s - a), (size_t)(e - a),
                j->Q, j->nq, j->scores[li], (size_t)nf);
        else
            fn(rows, f16, D, (size_t)(s - a), (size_t)(e - a), j->Q, j->nq, j->scores[li], (size_t)nf);
    }
}

/* Per calling thread: how its queries scan (lq_vindex_set_thread_scan). */
static _Thread_local int tl_scan_threads; /* 0 = the vindex's pool, 1 = inline, n = tl_pool */
static _Thread_local lq_pool *tl_pool;

int lq_vindex_set_thread_scan(int n_threads, lq_err *err)
{
    if (n_threads < 0 || n_threads > 256)
        return lq_err_set(err, LQ_EINVAL, "scan threads %d outside [0, 256]", n_threads);
    if (tl_pool && (n_threads <= 1 || lq_pool_threads(tl_pool) != n_threads)) {
        lq_pool_free(tl_pool);
        tl_pool = NULL;
    }
    if (n_threads > 1 && !tl_pool) {
        int rc = lq_pool_create(n_threads, &tl_pool, err);
        if (rc) {
            tl_scan_threads = 0;
            return rc;
        }
    }
    tl_scan_threads = n_threads;
    return LQ_OK;
}

void lq_vindex_thread_release(void)
{
    lq_pool_free(tl_pool);
    tl_pool = NULL;
    tl_scan_threads = 0;
}

static int scan(const lq_vindex *v, const int *layers, size_t n_layers, const float *Q, size_t nq,
                float **scores, int force_scalar, int sketch, lq_err *err)
{
    uint64_t *row_start = malloc((n_layers + 1) * sizeof *row_start);
    if (!row_start)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    row_start[0] = 0;
    for (size_t i = 0; i < n_layers; i++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, layers[i], &rows, &nf, NULL);
        row_start[i + 1] = row_start[i] + (uint64_t)nf;
    }
    scan_job j = {v, sketch, layers, n_layers, row_start, Q, nq, scores, force_scalar};
    uint64_t total = row_start[n_layers];
    if (total) {
        /* grain 64 rows keeps chunk borders away from shared cache lines of the outputs */
        lq_pool *pool = tl_scan_threads == 1 ? NULL : tl_pool ? tl_pool : v->pool;
        if (pool && total >= 256)
            lq_pool_for(pool, (int64_t)total, 64, scan_chunk, &j);
        else
            scan_chunk(&j, 0, (int64_t)total, 0);
    }
    free(row_start);
    return LQ_OK;
}

int lq_vindex_gate_scores(const lq_vindex *v, int layer, const float *Q, size_t n_q, float *out,
                          int force_scalar, lq_err *err)
{
    const void *rows;
    int nf;
    int rc = lq_vindex_gate_layer(v, layer, &rows, &nf, err);
    if (rc || nf == 0 || n_q == 0)
        return rc;
    return scan(v, &layer, 1, Q, n_q, &out, force_scalar, 0, err);
}

int lq_vindex_gate_knn_batch(const lq_vindex *v, const int *layers, size_t n_layers,
                             const float *Q, size_t n_q, size_t k, lq_vindex_hit *out,
                             size_t *counts, lq_err *err)
{
    if (k > LQ_VINDEX_MAX_QUERY_K)
        return lq_err_set(err, LQ_EINVAL, "k %zu exceeds the limit %d", k, LQ_VINDEX_MAX_QUERY_K);
    for (size_t i = 0; i < n_layers; i++)
        if (layers[i] < 0 || layers[i] >= v->info.num_layers)
            return lq_err_set(err, LQ_ERANGE, "layer %d out of range (model has %d layers)",
                              layers[i], v->info.num_layers);
    memset(counts, 0, n_q * n_layers * sizeof *counts);
    if (n_q == 0 || n_layers == 0 || k == 0)
        return LQ_OK;
    float **scores = calloc(n_layers, sizeof *scores);
    int rc = scores ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n_layers; i++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, layers[i], &rows, &nf, NULL);
        if (nf && !(scores[i] = malloc((size_t)nf * n_q * sizeof(float))))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory for %d x %zu scores", nf, n_q);
    }
    int pre = v->prefilter;
    if (!rc)
        rc = scan(v, layers, n_layers, Q, n_q, scores, 0, pre, err);
    lq_vindex_hit *cand = NULL;
    float *cs = NULL, *row = NULL;
    size_t kc = 0;
    if (!rc && pre) {
        /* candidates: the top kc by |approximate score|; exact f16/f32 scores for them only,
         * computed for all queries of the batch at once like the full scan does (so that the
         * exact values are bit-identical to a full scan's) */
        kc = 8 * k + 64; /* the most any layer uses (inexact sketches) */
        cand = malloc(kc * sizeof *cand);
        cs = malloc(kc * sizeof *cs);
        row = malloc(n_q * sizeof *row);
        if (!cand || !cs || !row)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    lq_vx_scores_fn fn = lq_vx_scores_pick(v, 0);
    for (size_t i = 0; !rc && i < n_layers; i++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, layers[i], &rows, &nf, NULL);
        for (size_t q = 0; q < n_q && nf; q++) {
            lq_vindex_hit *o = out + (q * n_layers + i) * k;
            if (!pre) {
                counts[q * n_layers + i] = lq_vx_topk(scores[i] + q * (size_t)nf, (size_t)nf, k, layers[i], o);
                continue;
            }
            /* unit-trit layers: the sketch order is the exact order, 2K+32 is margin for
             * ties; real-valued gates: a wider net */
            size_t kl = v->sk_inexact[layers[i]] ? 8 * k + 64 : 2 * k + 32;
            size_t nc = lq_vx_topk(scores[i] + q * (size_t)nf, (size_t)nf, kl, layers[i], cand);
            qsort(cand, nc, sizeof *cand, cmp_feature); /* feature order: ties keep the lower one */
            size_t D = (size_t)v->info.hidden_size, esz = v->info.dtype == LQ_VDT_F16 ? 2 : 4;
            for (size_t c = 0; c < nc; c++) {
                fn((const uint8_t *)rows + (size_t)cand[c].feature * D * esz, esz == 2, D, 0, 1, Q, n_q, row, 1);
                cs[c] = row[q];
            }
            size_t m = lq_vx_topk(cs, nc, k, layers[i], o);
            for (size_t h = 0; h < m; h++)
                o[h].feature = cand[o[h].feature].feature;
            counts[q * n_layers + i] = m;
        }
    }
    free(cand);
    free(cs);
    free(row);
    for (size_t i = 0; scores && i < n_layers; i++)
        free(scores[i]);
    free(scores);
    return rc;
}

int lq_vindex_gate_knn(const lq_vindex *v, int layer, const float *q, size_t k,
                       lq_vindex_hit *out, size_t *n_out, lq_err *err)
{
    return lq_vindex_gate_knn_batch(v, &layer, 1, q, 1, k, out, n_out, err);
}
