/* Gate KNN: raw dot products of query vectors with a layer's gate rows (f32 or f16 read in
 * place from the mapping), top-K by |score| with the signed score kept. Batched queries and
 * several layers go through one pass: each row is loaded once and scored against every
 * query while it is in cache; row ranges of all layers are spread over the thread pool.
 * The arithmetic is the vindex's kernel set's (gate_scores, sketch_row, sketch_scores). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/cancel.h"
#include "vindex/vindex_internal.h"

lq_gate_scores_fn lq_vx_scores_pick(const lq_vindex *v, int force_scalar)
{
    return (force_scalar ? &lq_kernels_scalar : v->kern)->gate_scores;
}

/* ---- prefilter sketches (codes and arithmetic: kernels/kernels.h) ---- */

typedef struct sk_job {
    lq_vindex *v;
    int layer;
    int inexact; /* set by any chunk (atomic store), read after lq_pool_for returns */
} sk_job;

static void sk_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    sk_job *j = ctx;
    lq_vindex *v = j->v;
    size_t D = (size_t)v->info.hidden_size, rb = v->sk_dp / 4;
    const void *rows;
    int nf;
    lq_vindex_gate_layer(v, j->layer, &rows, &nf, NULL);
    int f16 = v->info.dtype == LQ_VDT_F16, inexact = 0;
    for (int64_t r = start; r < end; r++) {
        const uint8_t *p = (const uint8_t *)rows + (size_t)r * D * (f16 ? 2 : 4);
        v->kern->sketch_row(p, f16, D, v->sk[j->layer] + (size_t)r * rb, &v->sk_scale[j->layer][r],
                            &inexact);
    }
    if (inexact)
        __atomic_store_n(&j->inexact, 1, __ATOMIC_RELAXED); /* several chunks may store at once */
}

int lq_vx_build_sketches(lq_vindex *v, lq_err *err)
{
    int L = v->info.num_layers;
    size_t D = (size_t)v->info.hidden_size;
    v->sk_dp = lq_sketch_dp(D);
    v->sk = calloc((size_t)L, sizeof *v->sk);
    v->sk_scale = calloc((size_t)L, sizeof *v->sk_scale);
    v->sk_inexact = calloc((size_t)L, sizeof *v->sk_inexact);
    if (!v->sk || !v->sk_scale || !v->sk_inexact)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    /* one block for every layer's codes, in 2 MB pages where the kernel allows (the scan
     * streams it; 4 KB pages stop the hardware prefetchers at every page border) */
    size_t total = 0, huge = (size_t)2 << 20;
    for (int l = 0; l < L; l++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, l, &rows, &nf, NULL);
        total += (size_t)nf * (v->sk_dp / 4);
    }
    size_t alloc = (total + huge - 1) / huge * huge;
    void *blk = NULL;
    if (alloc && posix_memalign(&blk, huge, alloc))
        return lq_err_set(err, LQ_ENOMEM, "out of memory for the prefilter sketches (%zu bytes)", alloc);
    if (blk)
        madvise(blk, alloc, MADV_HUGEPAGE); /* advisory: 4 KB pages work too */
    v->sk_block = blk;
    size_t off = 0;
    for (int l = 0; l < L; l++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, l, &rows, &nf, NULL);
        if (!nf)
            continue;
        v->sk[l] = v->sk_block + off;
        off += (size_t)nf * (v->sk_dp / 4);
        v->sk_scale[l] = malloc((size_t)nf * sizeof(float));
        if (!v->sk_scale[l])
            return lq_err_set(err, LQ_ENOMEM, "out of memory for the layer %d prefilter sketch", l);
        sk_job j = {v, l, 0};
        lq_pool_for(v->pool, nf, 64, sk_chunk, &j);
        v->sk_inexact[l] = __atomic_load_n(&j.inexact, __ATOMIC_RELAXED);
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
    const int8_t *q8;          /* sketch: quantised queries [nq][sk_dp], scales, sums */
    const float *qs;
    const int32_t *qsum;
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
    const lq_kernels *k = j->force_scalar ? &lq_kernels_scalar : j->v->kern;
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
            k->sketch_scores(j->v->sk[j->layers[li]], j->v->sk_scale[j->layers[li]], j->v->sk_dp,
                             (size_t)(s - a), (size_t)(e - a), j->q8, j->qs, j->qsum, j->nq,
                             j->scores[li], (size_t)nf);
        else
            k->gate_scores(rows, f16, D, (size_t)(s - a), (size_t)(e - a), j->Q, j->nq, j->scores[li],
                           (size_t)nf);
    }
}

/* Per calling thread: how its queries scan (lq_vindex_set_thread_scan). */
static _Thread_local int tl_scan_threads; /* 0 = the vindex's pool, 1 = inline, n = tl_pool */
static _Thread_local lq_pool *tl_pool;

/* the hook lives in core (cancel.c) so that the tokenizer's parse polls it too */
void lq_vindex_set_thread_cancel(lq_vindex_cancel_fn fn, void *ctx)
{
    lq_cancel_set(fn, ctx);
}

int lq_vx_cancelled(void)
{
    return lq_cancel_poll();
}

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

/* The pool the calling thread's queries run on (NULL: inline). */
static lq_pool *scan_pool(const lq_vindex *v)
{
    return tl_scan_threads == 1 ? NULL : tl_pool ? tl_pool : v->pool;
}

static int scan(const lq_vindex *v, const int *layers, size_t n_layers, const float *Q, size_t nq,
                float **scores, int force_scalar, int sketch, lq_err *err)
{
    int8_t *q8 = NULL;
    float *qs = NULL;
    int32_t *qsum = NULL;
    if (sketch) {
        q8 = malloc(nq * v->sk_dp);
        qs = malloc(nq * sizeof *qs);
        qsum = malloc(nq * sizeof *qsum);
        if (!q8 || !qs || !qsum) {
            free(q8), free(qs), free(qsum);
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        }
        lq_sketch_quant_queries(Q, nq, (size_t)v->info.hidden_size, q8, qs, qsum);
    }
    uint64_t *row_start = malloc((n_layers + 1) * sizeof *row_start);
    if (!row_start) {
        free(q8), free(qs), free(qsum);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    row_start[0] = 0;
    for (size_t i = 0; i < n_layers; i++) {
        const void *rows;
        int nf;
        lq_vindex_gate_layer(v, layers[i], &rows, &nf, NULL);
        row_start[i + 1] = row_start[i] + (uint64_t)nf;
    }
    scan_job j = {v, sketch, q8, qs, qsum, layers, n_layers, row_start, Q, nq, scores, force_scalar};
    uint64_t total = row_start[n_layers];
    if (total) {
        /* grain 64 rows keeps chunk borders away from shared cache lines of the outputs */
        lq_pool *pool = scan_pool(v);
        if (pool && total >= 256)
            lq_pool_for(pool, (int64_t)total, 64, scan_chunk, &j);
        else if (!lq_cancel_active())
            scan_chunk(&j, 0, (int64_t)total, 0);
        else {
            /* inline with a cancel hook: asked between blocks of rows, on this thread. A block
               is 4096 rows for one query (a few ms even on wide f16 gates); n queries score
               each row n times, so the block shrinks with them (describe_many of 1000
               entities would otherwise run seconds between two polls) */
            uint64_t block = 4096 / (uint64_t)(nq ? nq : 1);
            if (block < 8)
                block = 8;
            for (uint64_t a = 0; a < total; a += block) {
                if (lq_cancel_poll()) {
                    free(row_start);
                    free(q8), free(qs), free(qsum);
                    return lq_err_set(err, LQ_ECANCELED, "gate scan cancelled");
                }
                scan_chunk(&j, (int64_t)a, (int64_t)(a + block < total ? a + block : total), 0);
            }
        }
    }
    free(row_start);
    free(q8), free(qs), free(qsum);
    return LQ_OK;
}

/* ---- prefilter: candidates from the sketch scores, exact re-scoring ----
 * Per (query, layer): the top kl rows by |approximate score| (unit-trit layers: the sketch
 * order is the exact order up to the int8 query rounding, 2K+32 is the margin; real-valued
 * gates: a wider net, 8K+64), then the exact f16/f32 score of those rows with the scan's own
 * kernel (bit-identical to a full scan's score), top K of them. The candidate rows are
 * visited in address order, each prefetched whole two rows ahead (they are scattered 5 KB
 * reads that the hardware prefetchers cannot predict). */

typedef struct rescore_job {
    const lq_vindex *v;
    const int *layers;
    size_t n_layers;
    const float *Q;
    size_t n_q, k;
    float **scores;           /* [n_layers] -> [n_q, nf] approximate */
    lq_vindex_hit *out;       /* [n_q][n_layers][k] */
    size_t *counts;           /* [n_q][n_layers] */
    int failed;               /* set by any chunk (atomic store), read after lq_pool_for */
} rescore_job;

static void prefetch_row(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

static void rescore_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    rescore_job *j = ctx;
    const lq_vindex *v = j->v;
    size_t D = (size_t)v->info.hidden_size, esz = v->info.dtype == LQ_VDT_F16 ? 2 : 4, rb = D * esz;
    size_t kc = 8 * j->k + 64; /* the most any layer uses */
    lq_vindex_hit *cand = malloc(kc * sizeof *cand);
    float *cs = malloc(kc * sizeof *cs);
    if (!cand || !cs) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        free(cand);
        free(cs);
        return;
    }
    lq_gate_scores_fn fn = lq_vx_scores_pick(v, 0);
    for (int64_t i = start; i < end; i++) {
        const void *rows;
        int nf;
        int layer = j->layers[i];
        lq_vindex_gate_layer(v, layer, &rows, &nf, NULL);
        const uint8_t *base = rows;
        for (size_t q = 0; q < j->n_q && nf; q++) {
            lq_vindex_hit *o = j->out + (q * j->n_layers + (size_t)i) * j->k;
            size_t kl = v->sk_inexact[layer] ? 8 * j->k + 64 : 2 * j->k + 32;
            size_t nc = lq_vx_topk(j->scores[i] + q * (size_t)nf, (size_t)nf, kl, layer, cand);
            qsort(cand, nc, sizeof *cand, cmp_feature); /* address order; ties keep the lower feature */
            for (size_t c = 0; c < nc && c < 2; c++)
                prefetch_row(base + (size_t)cand[c].feature * rb, rb);
            for (size_t c = 0; c < nc; c++) {
                if (c + 2 < nc)
                    prefetch_row(base + (size_t)cand[c + 2].feature * rb, rb);
                fn(base + (size_t)cand[c].feature * rb, esz == 2, D, 0, 1, j->Q + q * D, 1, &cs[c], 1);
            }
            size_t m = lq_vx_topk(cs, nc, j->k, layer, o);
            for (size_t h = 0; h < m; h++)
                o[h].feature = cand[o[h].feature].feature;
            j->counts[q * j->n_layers + (size_t)i] = m;
        }
    }
    free(cand);
    free(cs);
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

/* The base files' gate KNN; lq_vindex_gate_knn_batch (overlay.c) merges an overlay's
 * overrides on top. */
int lq_vx_gate_knn_batch_base(const lq_vindex *v, const int *layers, size_t n_layers,
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
    if (!rc && !pre) {
        for (size_t i = 0; !rc && i < n_layers; i++) {
            const void *rows;
            int nf;
            lq_vindex_gate_layer(v, layers[i], &rows, &nf, NULL);
            for (size_t q = 0; q < n_q && nf; q++) {
                /* the top-k pass over many queries' scores is itself long (1000 queries x
                   30 layers of 6912 rows): asked every 32 queries */
                if (q % 32 == 31 && lq_vx_cancelled()) {
                    rc = lq_err_set(err, LQ_ECANCELED, "gate scan cancelled");
                    break;
                }
                /* an overlay's re-gated and deleted features leave the race (NaN is never a
                 * hit): the overlay adds its own scores for them */
                if (v->ov)
                    lq_vx_ov_mask(v, layers[i], scores[i] + q * (size_t)nf, (size_t)nf);
                counts[q * n_layers + i] = lq_vx_topk(scores[i] + q * (size_t)nf, (size_t)nf, k, layers[i],
                                                      out + (q * n_layers + i) * k);
            }
        }
    } else if (!rc) {
        /* candidates per (query, layer), exact re-scoring; the layers spread over the pool */
        rescore_job j = {v, layers, n_layers, Q, n_q, k, scores, out, counts, 0};
        lq_pool *pool = scan_pool(v);
        if (pool && n_layers > 1)
            lq_pool_for(pool, (int64_t)n_layers, 1, rescore_chunk, &j);
        else
            rescore_chunk(&j, 0, (int64_t)n_layers, 0);
        if (__atomic_load_n(&j.failed, __ATOMIC_RELAXED))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory for the prefilter candidates");
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

/* The gate KNN as the view shows it: the base scan asked for K + the layer's overrides and
 * tombstones, so that K survive the merge (LARQL asks for 2K; this is exact). */
int lq_vindex_gate_knn_batch(const lq_vindex *v, const int *layers, size_t n_layers, const float *Q, size_t n_q,
                             size_t k, lq_vindex_hit *out, size_t *counts, lq_err *err)
{
    size_t extra = 0, room = 0;
    int touched = 0;
    for (size_t i = 0; v->view && i < n_layers; i++) {
        if (layers[i] < 0 || layers[i] >= v->info.num_layers || !lq_vx_ov_touches(v, layers[i]))
            continue;
        touched = 1;
        size_t e = lq_vx_ov_extra(v, layers[i]), g = lq_vx_ov_n_gates(v, layers[i]);
        extra = e > extra ? e : extra;
        room = g > room ? g : room;
    }
    if (!touched || k == 0 || k > LQ_VINDEX_MAX_QUERY_K)
        return lq_vx_gate_knn_batch_base(v, layers, n_layers, Q, n_q, k, out, counts, err);
    size_t k2 = k + extra, cells = n_q * n_layers;
    lq_vindex_hit *tmp = malloc(cells * k2 * sizeof *tmp), *mb = malloc((k2 + room) * sizeof *mb);
    size_t *cnt = malloc((cells ? cells : 1) * sizeof *cnt);
    int rc = tmp && mb && cnt ? lq_vx_gate_knn_batch_base(v, layers, n_layers, Q, n_q, k2, tmp, cnt, err)
                              : lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t q = 0; !rc && q < n_q; q++)
        for (size_t i = 0; i < n_layers; i++) {
            size_t c = q * n_layers + i;
            const lq_vindex_hit *src = tmp + c * k2;
            size_t n = cnt[c];
            if (lq_vx_ov_touches(v, layers[i])) {
                n = lq_vx_ov_gate_merge(v, layers[i], Q + q * (size_t)v->info.hidden_size, src, n, k, mb);
                src = mb;
            } else if (n > k) {
                n = k;
            }
            memcpy(out + c * k, src, n * sizeof *out);
            counts[c] = n;
        }
    free(tmp);
    free(mb);
    free(cnt);
    return rc;
}
