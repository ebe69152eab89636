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
    lq_vx_scores_fn fn = j->force_scalar || !j->v->use_avx2 ? lq_vx_scores_scalar : lq_vx_scores_avx2;
    for (size_t li = 0; li < j->n_layers; li++) {
        uint64_t a = j->row_start[li], b = j->row_start[li + 1];
        uint64_t s = (uint64_t)start > a ? (uint64_t)start : a;
        uint64_t e = (uint64_t)end < b ? (uint64_t)end : b;
        if (s >= e)
            continue;
        const void *rows;
        int nf;
        lq_vindex_gate_layer(j->v, j->layers[li], &rows, &nf, NULL);
        fn(rows, f16, D, (size_t)(s - a), (size_t)(e - a), j->Q, j->nq, j->scores[li], (size_t)nf);
    }
}

static int scan(const lq_vindex *v, const int *layers, size_t n_layers, const float *Q, size_t nq,
                float **scores, int force_scalar, lq_err *err)
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
    scan_job j = {v, layers, n_layers, row_start, Q, nq, scores, force_scalar};
    uint64_t total = row_start[n_layers];
    if (total) {
        /* grain 64 rows keeps chunk borders away from shared cache lines of the outputs */
        if (v->pool && total >= 256)
            lq_pool_for(v->pool, (int64_t)total, 64, scan_chunk, &j);
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
    return scan(v, &layer, 1, Q, n_q, &out, force_scalar, err);
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
    if (!rc)
        rc = scan(v, layers, n_layers, Q, n_q, scores, 0, err);
    for (size_t i = 0; !rc && i < n_layers; i++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, layers[i], &rows, &nf, NULL);
        for (size_t q = 0; q < n_q && nf; q++)
            counts[q * n_layers + i] = lq_vx_topk(scores[i] + q * (size_t)nf, (size_t)nf, k, layers[i],
                                                  out + (q * n_layers + i) * k);
    }
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
