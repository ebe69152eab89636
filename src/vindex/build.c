/* Vindex builder: `larql convert gguf-to-vindex` with LARQL's levels and options.
 *
 * Streams layer by layer (memory: one layer's gate rows and down matrix, plus a small
 * per-thread embedding tile), writes into a temporary sibling directory, fsyncs every file
 * and renames the directory into place at the end, so an interrupted build never leaves a
 * directory that loads. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "core/json_obj.h"
#include "core/f16.h"
#include "larql/gguf.h"
#include "larql/tokenizer.h"
#include "vindex/vindex_internal.h"

#define LQ_VX_WRITER_VERSION "larql-c 0.1.0"

static json_t *real_f32(double v);

void lq_vindex_build_opts_init(lq_vindex_build_opts *o)
{
    memset(o, 0, sizeof *o);
    o->level = LQ_VLEVEL_BROWSE;
    o->down_top_k = 10;
}

static const char *level_name(int l)
{
    static const char *n[] = {"browse", "attention", "inference", "all"};
    return l >= 0 && l <= 3 ? n[l] : "browse";
}

typedef struct bctx {
    const lq_gguf *g;
    const char *arch;
    int bitnet;
    int L, D, F, V;
    const lq_gguf_tensor *embd;
    lq_vindex_build_opts *o;
    const char *tmp;
    lq_pool *pool;
    const lq_kernels *kern;   /* lq_kernels_best(): gate scores and the down_meta GEMM */
    int dm_fast;              /* int8 candidates (kern->dm_block) + exact f32 re-scoring */
    uint8_t *Ep;              /* [Vp/16][D4/4][16][4] embedding as u8 (q + 128), fast path */
    float *escale;            /* [Vp] per-row int8 scale of Ep (0 for padding rows) */
    int Vp, D4;
    lq_err *err;
    json_t *checksums;
    json_t *manifest;
} bctx;

static void progress(bctx *c, const char *stage, uint64_t done, uint64_t total)
{
    if (c->o->progress)
        c->o->progress(c->o->progress_ctx, stage, done, total);
}

static const lq_gguf_tensor *tensor_l(const lq_gguf *g, int l, const char *suffix)
{
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
    return lq_gguf_find_tensor(g, name);
}

/* A BitLinear tensor's one scale, LARQL's unit-trit convention: I2_S, or TQ1_0 / TQ2_0 whose
 * blocks share one d (what llama-quantize writes for a BitNet model; an all-zero block may have
 * d 0). *unit: what decoded values (lq_gguf_tensor_row_f32) are divided by to give the trits;
 * *scale: the real per-tensor scale (TQ: d times the ".scale" companion). Any other type: 0
 * with *unit = 0. A damaged scale, or TQ blocks with different d (a vindex keeps one scale a
 * tensor), is an error. */
static int ternary_scale(const lq_gguf *g, const lq_gguf_tensor *t, float *unit, float *scale,
                         lq_err *err)
{
    *unit = *scale = 0;
    if (t->type == LQ_GGML_I2_S) {
        float s;
        int rc = lq_gguf_i2s_scale(t, &s, err);
        if (!rc && !(s > 0 && isfinite(s)))
            rc = lq_err_set(err, LQ_EFORMAT, "%s: non-positive/NaN I2_S scale %g", t->name, (double)s);
        if (!rc)
            *unit = *scale = s;
        return rc;
    }
    if (t->type != LQ_GGML_TQ1_0 && t->type != LQ_GGML_TQ2_0)
        return LQ_OK;
    const uint64_t bb = t->type == LQ_GGML_TQ1_0 ? 54 : 66, nb = t->n_bytes / bb;
    float d = 0;
    for (uint64_t b = 0; b < nb; b++) {
        const uint8_t *p = t->data + b * bb + bb - 2;
        float v = lq_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        if (v == 0)
            continue;
        if (!(v > 0 && isfinite(v)))
            return lq_err_set(err, LQ_EFORMAT, "%s: block %llu scale %g is not a positive finite number",
                              t->name, (unsigned long long)b, (double)v);
        if (d != 0 && v != d)
            return lq_err_set(err, LQ_EUNSUPPORTED,
                              "%s: %s blocks with different scales (%g, block %llu %g): a vindex keeps "
                              "one scale per tensor", t->name, lq_ggml_type_name(t->type), (double)d,
                              (unsigned long long)b, (double)v);
        d = v;
    }
    float mult;
    int rc = lq_gguf_tq_mult(g, t->name, &mult, err);
    if (rc)
        return rc;
    *unit = d != 0 ? d : 1.0f;
    *scale = *unit * mult;
    if (!(*scale > 0))
        return lq_err_set(err, LQ_EFORMAT, "%s: scale %g (d %g x .scale %g) is not positive", t->name,
                          (double)*scale, (double)*unit, (double)mult);
    return LQ_OK;
}

/* Writes n floats as f32 or LARQL-truncated f16. */
static int write_floats(lq_vx_file *w, const float *x, size_t n, int f16, lq_err *err)
{
    if (!f16)
        return lq_vx_file_write(w, x, n * 4, err);
    uint16_t buf[1024];
    for (size_t i = 0; i < n; i += 1024) {
        size_t m = n - i < 1024 ? n - i : 1024;
        for (size_t k = 0; k < m; k++)
            buf[k] = lq_vx_f32_to_f16_trunc(x[i + k]);
        int rc = lq_vx_file_write(w, buf, m * 2, err);
        if (rc)
            return rc;
    }
    return LQ_OK;
}

static int finish_checksummed(bctx *c, lq_vx_file *w, const char *name)
{
    char hex[65];
    int rc = lq_vx_file_close(w, hex, c->err);
    if (!rc)
        json_object_set_new(c->checksums, name, json_string(hex));
    return rc;
}

/* ---- gate_vectors.bin ---- */

static int write_gates(bctx *c, json_t *layers)
{
    lq_vx_file w;
    int rc = lq_vx_file_open(&w, c->tmp, "gate_vectors.bin", 1, c->err);
    if (rc)
        return rc;
    float *row = malloc((size_t)c->D * sizeof *row);
    if (!row) {
        lq_vx_file_abort(&w);
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    }
    uint64_t bpf = c->o->f16 ? 2 : 4;
    for (int l = 0; l < c->L && !rc; l++) {
        const lq_gguf_tensor *t = tensor_l(c->g, l, "ffn_gate.weight");
        uint64_t off = w.written;
        int F = (int)t->ne[1];
        /* LARQL stores BitNet gates as unit-scale trits: divide the scale back out */
        float inv, real;
        rc = ternary_scale(c->g, t, &inv, &real, c->err);
        for (int f = 0; f < F && !rc; f++) {
            rc = lq_gguf_tensor_row_f32(t, (uint64_t)f, row, c->err);
            if (!rc && inv > 0)
                for (int d = 0; d < c->D; d++)
                    row[d] /= inv;
            if (!rc)
                rc = write_floats(&w, row, (size_t)c->D, c->o->f16, c->err);
        }
        json_t *e = lq_json_object();
        json_object_set_new(e, "layer", json_integer(l));
        json_object_set_new(e, "num_features", json_integer(F));
        json_object_set_new(e, "offset", json_integer((json_int_t)off));
        json_object_set_new(e, "length", json_integer((json_int_t)((uint64_t)F * c->D * bpf)));
        json_array_append_new(layers, e);
        progress(c, "gate vectors", (uint64_t)l + 1, (uint64_t)c->L);
    }
    free(row);
    if (rc) {
        lq_vx_file_abort(&w);
        return rc;
    }
    return finish_checksummed(c, &w, "gate_vectors.bin");
}

/* ---- embeddings.bin (and lm_head.bin from the same kind of tensor) ---- */

static int write_matrix(bctx *c, const lq_gguf_tensor *t, const char *file, int checksum)
{
    lq_vx_file w;
    int rc = lq_vx_file_open(&w, c->tmp, file, checksum, c->err);
    if (rc)
        return rc;
    uint64_t rows = t->ne[1], cols = t->ne[0];
    if (c->o->f16 && t->type == LQ_GGML_F16) {
        /* lossless: the f16 bits are what the truncating conversion of their value gives */
        rc = lq_vx_file_write(&w, t->data, rows * cols * 2, c->err);
    } else {
        float *row = malloc((size_t)cols * sizeof *row);
        if (!row)
            rc = lq_err_set(c->err, LQ_ENOMEM, "out of memory");
        for (uint64_t r = 0; r < rows && !rc; r++) {
            rc = lq_gguf_tensor_row_f32(t, r, row, c->err);
            if (!rc)
                rc = write_floats(&w, row, (size_t)cols, c->o->f16, c->err);
        }
        free(row);
    }
    if (rc) {
        lq_vx_file_abort(&w);
        return rc;
    }
    if (checksum)
        return finish_checksummed(c, &w, file);
    char hex[65];
    rc = lq_vx_file_close(&w, hex, c->err);
    return rc;
}

/* ---- down_meta.bin ----
 * For every feature f of a layer: logits = E . W_down[:, f] over the whole vocabulary, as LARQL
 * computes them: E unscaled and, for an I2_S down matrix, the unit trits (the per-tensor scale
 * divided back out, as LARQL holds BitNet weights), so c_score, min_confidence and the
 * relations cut mean the same numbers whichever tool built the vindex. The top_k by signed
 * logit is taken over ALL tokens; those that decode to empty text are dropped afterwards (a
 * feature may keep fewer than top_k), again as LARQL does. One pass per layer: feature blocks
 * are spread over the pool; each block walks the vocabulary in small tiles decoded on the fly. */

typedef struct dm_job {
    bctx *c;
    const float *WT;          /* [F, D] transposed down matrix of the layer */
    const uint8_t *keep;      /* [V] 1 = the token may be a candidate (all of them: see above) */
    int topk;
    uint32_t *ids;            /* [F, topk] */
    float *logits;            /* [F, topk], sorted desc, -inf = empty */
    int fblock;
    int failed;
} dm_job;

#define DM_VTILE 16

static void dm_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    dm_job *j = ctx;
    bctx *c = j->c;
    int D = c->D, V = c->V, F = c->F;
    float *tile = malloc((size_t)DM_VTILE * D * sizeof *tile);
    float *sc = malloc((size_t)DM_VTILE * j->fblock * sizeof *sc);
    if (!tile || !sc) {
        j->failed = 1;
        free(tile);
        free(sc);
        return;
    }
    lq_gate_scores_fn fn = c->kern->gate_scores;
    for (int64_t b = start; b < end; b++) {
        int f0 = (int)b * j->fblock, f1 = f0 + j->fblock < F ? f0 + j->fblock : F, nf = f1 - f0;
        for (int v0 = 0; v0 < V; v0 += DM_VTILE) {
            int nv = V - v0 < DM_VTILE ? V - v0 : DM_VTILE;
            for (int i = 0; i < nv; i++)
                if (lq_gguf_tensor_row_f32(c->embd, (uint64_t)(v0 + i), tile + (size_t)i * D, NULL))
                    j->failed = 1;
            /* sc[i, f - f0] = dot(E[v0+i], WT[f]) */
            fn(j->WT + (size_t)f0 * D, 0, (size_t)D, 0, (size_t)nf, tile, (size_t)nv, sc, (size_t)nf);
            for (int i = 0; i < nv; i++) {
                if (!j->keep[v0 + i])
                    continue;
                for (int f = 0; f < nf; f++) {
                    float x = sc[(size_t)i * nf + f];
                    float *lg = j->logits + (size_t)(f0 + f) * j->topk;
                    if (x > lg[j->topk - 1]) /* strict: the earlier token keeps its place on ties */
                        lq_dm_cand_insert(j->ids + (size_t)(f0 + f) * j->topk, lg, j->topk, (uint32_t)(v0 + i), x);
                }
            }
        }
    }
    free(tile);
    free(sc);
}

/* ---- down_meta, fast path: int8 x ternary GEMM (the kernel set's dm_block) picks Kc
 * candidates per feature, exact f32 re-scoring picks the K written (layouts in
 * kernels/kernels.h). The top K is exact whenever the true top K lies inside the approximate
 * top Kc (the int8 error is ~1% of a logit's spread; Kc = 4K leaves a wide margin). The
 * memory it adds: the embedding as int8 (vocab x hidden bytes, built once), one layer's
 * trits (ffn x hidden bytes) and per-thread candidate lists. */

#define DM_VBLOCK 128 /* vocabulary rows per work item: 128 x hidden u8 stays in L2 */

typedef struct dmq_job {
    bctx *c;
    int failed;
} dmq_job;

static void dmq_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    dmq_job *j = ctx;
    bctx *c = j->c;
    int D = c->D, D4 = c->D4;
    float *row = malloc((size_t)D * sizeof *row);
    if (!row) {
        j->failed = 1;
        return;
    }
    for (int64_t p = start; p < end; p++) { /* one 16-row lane panel */
        uint8_t *P = c->Ep + (size_t)p * D4 * 16;
        for (int lane = 0; lane < 16; lane++) {
            int64_t v = p * 16 + lane;
            int have = v < c->V && lq_gguf_tensor_row_f32(c->embd, (uint64_t)v, row, NULL) == LQ_OK;
            if (v < c->V && !have)
                j->failed = 1;
            c->escale[v] = lq_dm_pack_row(have ? row : NULL, D, D4, P, lane);
        }
    }
    free(row);
}

static int dm_quantise_embedding(bctx *c)
{
    c->Vp = (c->V + 31) / 32 * 32;
    c->D4 = (c->D + 3) / 4 * 4;
    c->Ep = malloc((size_t)c->Vp * c->D4);
    c->escale = calloc((size_t)c->Vp, sizeof *c->escale);
    if (!c->Ep || !c->escale)
        return lq_err_set(c->err, LQ_ENOMEM, "down_meta: cannot allocate the int8 embedding (%d x %d bytes)",
                          c->Vp, c->D4);
    dmq_job j = {c, 0};
    lq_pool_for(c->pool, c->Vp / 16, 1, dmq_chunk, &j);
    if (j.failed)
        return lq_err_set(c->err, LQ_EFORMAT, "down_meta: cannot decode a token_embd.weight row");
    return LQ_OK;
}

typedef struct dmv_job {
    bctx *c;
    const int8_t *Bt;         /* [Fp, D4] */
    const int32_t *colsum;    /* [Fp] */
    const uint8_t *keep;      /* [V] */
    int Fp, Kc;
    uint32_t *cids;           /* [n_threads][Fp][Kc] */
    float *cvals;             /* [n_threads][Fp][Kc] */
    /* exact re-scoring */
    const float *WT;          /* [F, D] with the real scale */
    int K;
    uint32_t *ids;            /* [F, K] */
    float *logits;            /* [F, K] */
    int nthreads;
} dmv_job;

static void dmv_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    dmv_job *j = ctx;
    bctx *c = j->c;
    size_t off = (size_t)thread_idx * j->Fp * j->Kc;
    for (int64_t b = start; b < end; b++) {
        int v0 = (int)b * DM_VBLOCK, nv = c->Vp - v0 < DM_VBLOCK ? c->Vp - v0 : DM_VBLOCK;
        c->kern->dm_block(c->Ep, c->escale, j->keep, c->V, v0, nv, j->Bt, j->colsum, j->Fp, c->D4,
                          j->Kc, j->cids + off, j->cvals + off);
    }
}

/* exact score of the candidates of features [start, end), top K by (score desc, id asc) */
static void dmr_chunk(void *ctx, int64_t start, int64_t end, int thread_idx)
{
    (void)thread_idx;
    dmv_job *j = ctx;
    bctx *c = j->c;
    lq_gate_scores_fn fn = c->kern->gate_scores;
    int f16 = c->embd->type == LQ_GGML_F16;
    size_t esz = f16 ? 2 : 4;
    for (int64_t f = start; f < end; f++) {
        uint32_t *oi = j->ids + (size_t)f * j->K;
        float *ol = j->logits + (size_t)f * j->K;
        for (int t = 0; t < j->nthreads; t++) {
            const uint32_t *ci = j->cids + ((size_t)t * j->Fp + (size_t)f) * j->Kc;
            const float *cv = j->cvals + ((size_t)t * j->Fp + (size_t)f) * j->Kc;
            for (int k = 0; k < j->Kc && isfinite(cv[k]); k++) {
                float sc;
                fn(c->embd->data + (size_t)ci[k] * c->D * esz, f16, (size_t)c->D, 0, 1,
                   j->WT + (size_t)f * c->D, 1, &sc, 1);
                /* insert by (score desc, id asc) */
                if (!(sc > ol[j->K - 1] || (sc == ol[j->K - 1] && ci[k] < oi[j->K - 1])))
                    continue;
                int i = j->K - 1;
                while (i > 0 && (sc > ol[i - 1] || (sc == ol[i - 1] && ci[k] < oi[i - 1]))) {
                    ol[i] = ol[i - 1];
                    oi[i] = oi[i - 1];
                    i--;
                }
                ol[i] = sc;
                oi[i] = ci[k];
            }
        }
    }
}

static int dm_layer_fast(bctx *c, const float *Wd, const float *WT, const uint8_t *keep, int K, uint32_t *ids,
                         float *lg)
{
    int Fp = (c->F + 11) / 12 * 12, nt = lq_pool_threads(c->pool);
    int Kc = K <= 64 ? 4 * K : 2 * K;
    int8_t *Bt = calloc((size_t)Fp * c->D4, 1);
    int32_t *colsum = calloc((size_t)Fp, sizeof *colsum);
    uint32_t *cids = malloc((size_t)nt * Fp * Kc * sizeof *cids);
    float *cvals = malloc((size_t)nt * Fp * Kc * sizeof *cvals);
    int rc = LQ_OK;
    if (!Bt || !colsum || !cids || !cvals) {
        rc = lq_err_set(c->err, LQ_ENOMEM, "down_meta: out of memory for the layer's trits");
        goto out;
    }
    /* W_down [D, F] = trit * scale (scale > 0): the sign is the trit */
    for (int d = 0; d < c->D; d++)
        for (int f = 0; f < c->F; f++) {
            float w = Wd[(size_t)d * c->F + f];
            int8_t t = (int8_t)(w > 0 ? 1 : w < 0 ? -1 : 0);
            Bt[(size_t)f * c->D4 + d] = t;
            colsum[f] += t;
        }
    for (size_t i = 0; i < (size_t)nt * Fp * Kc; i++)
        cids[i] = 0, cvals[i] = -INFINITY;
    dmv_job j = {c, Bt, colsum, keep, Fp, Kc, cids, cvals, WT, K, ids, lg, nt};
    lq_pool_for(c->pool, (c->Vp + DM_VBLOCK - 1) / DM_VBLOCK, 1, dmv_chunk, &j);
    lq_pool_for(c->pool, c->F, 16, dmr_chunk, &j);
out:
    free(Bt);
    free(colsum);
    free(cids);
    free(cvals);
    return rc;
}

static int write_down_meta(bctx *c, const uint8_t *keep)
{
    int K = c->o->down_top_k;
    lq_vx_file w;
    int rc = lq_vx_file_open(&w, c->tmp, "down_meta.bin", 1, c->err);
    if (rc)
        return rc;
    uint32_t hdr[4] = {0x444D4554u, 1, (uint32_t)c->L, (uint32_t)K};
    rc = lq_vx_file_write(&w, hdr, 16, c->err);
    size_t DF = (size_t)c->D * c->F;
    float *Wd = malloc(DF * sizeof *Wd), *WT = malloc(DF * sizeof *WT);
    uint32_t *ids = malloc((size_t)c->F * (K ? K : 1) * sizeof *ids);
    float *lg = malloc((size_t)c->F * (K ? K : 1) * sizeof *lg);
    uint8_t *rec = malloc(8 + 8 * (size_t)K);
    uint8_t *any = malloc((size_t)c->V); /* every token competes for the top k */
    if (!rc && (!Wd || !WT || !ids || !lg || !rec || !any))
        rc = lq_err_set(c->err, LQ_ENOMEM, "out of memory for the %d x %d down matrix", c->D, c->F);
    if (any)
        memset(any, 1, (size_t)c->V);
    for (int l = 0; l < c->L && !rc; l++) {
        const lq_gguf_tensor *t = tensor_l(c->g, l, "ffn_down.weight");
        rc = lq_gguf_tensor_to_f32(t, Wd, c->err); /* [D rows, F cols], real scale applied */
        if (rc)
            break;
        float s, real; /* LARQL's unit trits: scale * trit / scale */
        if ((rc = ternary_scale(c->g, t, &s, &real, c->err)))
            break;
        if (s > 0)
            for (size_t i = 0; i < DF; i++)
                Wd[i] /= s;
        for (int d = 0; d < c->D; d++)
            for (int f = 0; f < c->F; f++)
                WT[(size_t)f * c->D + d] = Wd[(size_t)d * c->F + f];
        for (size_t i = 0; i < (size_t)c->F * K; i++)
            ids[i] = 0, lg[i] = -INFINITY;
        int fast = K > 0 && c->dm_fast && t->type == LQ_GGML_I2_S;
        if (fast && !c->Ep && (rc = dm_quantise_embedding(c)))
            break;
        if (fast) {
            if ((rc = dm_layer_fast(c, Wd, WT, any, K, ids, lg)))
                break;
        } else if (K > 0) {
            dm_job j = {c, WT, any, K, ids, lg, 64, 0};
            int64_t nb = (c->F + j.fblock - 1) / j.fblock;
            lq_pool_for(c->pool, nb, 1, dm_chunk, &j);
            if (j.failed) {
                rc = lq_err_set(c->err, LQ_ENOMEM, "down_meta: layer %d: out of memory or bad embedding row", l);
                break;
            }
        }
        uint32_t nf = (uint32_t)c->F;
        rc = lq_vx_file_write(&w, &nf, 4, c->err);
        for (int f = 0; f < c->F && !rc; f++) {
            memset(rec, 0, 8 + 8 * (size_t)K);
            const uint32_t *fi = ids + (size_t)f * K;
            const float *fl = lg + (size_t)f * K;
            int n = 0; /* survivors of the top k that decode to text, in order */
            for (int k = 0; k < K && isfinite(fl[k]); k++) {
                if (fi[k] >= (uint32_t)c->V || !keep[fi[k]])
                    continue;
                if (n == 0) {
                    memcpy(rec, &fi[k], 4);
                    memcpy(rec + 4, &fl[k], 4);
                }
                memcpy(rec + 8 + 8 * n, &fi[k], 4);
                memcpy(rec + 12 + 8 * n, &fl[k], 4);
                n++;
            }
            rc = lq_vx_file_write(&w, rec, 8 + 8 * (size_t)K, c->err);
        }
        progress(c, "down meta", (uint64_t)l + 1, (uint64_t)c->L);
    }
    free(Wd);
    free(WT);
    free(ids);
    free(lg);
    free(rec);
    free(any);
    if (rc) {
        lq_vx_file_abort(&w);
        return rc;
    }
    return finish_checksummed(c, &w, "down_meta.bin");
}

/* ---- norms.bin + weight_manifest.json + lm_head.bin ---- */

static json_t *manifest_entry(const char *key, const char *kind, json_t *shape, uint64_t off,
                              uint64_t len, const char *file)
{
    json_t *e = lq_json_object();
    json_object_set_new(e, "key", json_string(key));
    json_object_set_new(e, "kind", json_string(kind));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "offset", json_integer((json_int_t)off));
    json_object_set_new(e, "length", json_integer((json_int_t)len));
    json_object_set_new(e, "file", json_string(file));
    return e;
}

static int write_norm(bctx *c, lq_vx_file *w, const lq_gguf_tensor *t, const char *key)
{
    uint64_t n = t->n_elements;
    float *x = malloc((size_t)n * sizeof *x);
    if (!x)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    uint64_t off = w->written;
    int rc = lq_gguf_tensor_to_f32(t, x, c->err);
    if (!rc)
        rc = write_floats(w, x, (size_t)n, c->o->f16, c->err);
    free(x);
    if (!rc)
        json_array_append_new(c->manifest, manifest_entry(key, "vector", json_pack("[I]", (json_int_t)n), off,
                                                          w->written - off, "norms.bin"));
    return rc;
}

/* One projection as a dense [rows, cols] tensor (GGUF ne = [cols, rows]) appended to w, row
 * by row (memory: one row), with its manifest entry {key, "tensor", [rows, cols], offset,
 * length, file}. I2_S tensors are written as unit-scale trits (the per-tensor scale divided
 * back out: LARQL dequantises the raw codes without it); other types with their real values.
 * Absent tensors are skipped, as LARQL's writer does. */
static int write_dense(bctx *c, lq_vx_file *w, int l, const char *gguf, const char *hf, const char *file)
{
    const lq_gguf_tensor *t = tensor_l(c->g, l, gguf);
    if (!t)
        return LQ_OK;
    if (t->n_dims != 2 || !lq_ggml_type_supported(t->type))
        return lq_err_set(c->err, LQ_EUNSUPPORTED, "GGUF: blk.%d.%s: %u-D tensor of type %s cannot be written as a dense tensor",
                          l, gguf, (unsigned)t->n_dims, lq_ggml_type_name(t->type));
    uint64_t rows = t->ne[1], cols = t->ne[0], off = w->written;
    float s, real;
    int rc = ternary_scale(c->g, t, &s, &real, c->err);
    if (rc)
        return rc;
    float *row = malloc((size_t)cols * sizeof *row); /* [cols] */
    if (!row)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    for (uint64_t r = 0; r < rows && !rc; r++) {
        rc = lq_gguf_tensor_row_f32(t, r, row, c->err);
        if (!rc && s > 0)
            for (uint64_t k = 0; k < cols; k++)
                row[k] /= s; /* scale * trit / scale: exactly the trit */
        if (!rc)
            rc = write_floats(w, row, (size_t)cols, c->o->f16, c->err);
    }
    free(row);
    if (rc)
        return rc;
    char key[128];
    snprintf(key, sizeof key, "layers.%d.%s", l, hf);
    json_array_append_new(c->manifest, manifest_entry(key, "tensor",
                                                      json_pack("[II]", (json_int_t)rows, (json_int_t)cols),
                                                      off, w->written - off, file));
    return LQ_OK;
}

/* attn_weights.bin (per layer q, k, v, o), then up_weights.bin and down_weights.bin (per
 * layer up then down in the manifest), in LARQL's write_model_weights order. */
static int write_projections(bctx *c)
{
    static const struct {
        const char *gguf, *hf;
    } attn[] = {
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
    };
    lq_vx_file w, wu, wd;
    int rc = lq_vx_file_open(&w, c->tmp, "attn_weights.bin", 1, c->err);
    if (rc)
        return rc;
    for (int l = 0; l < c->L && !rc; l++) {
        for (int i = 0; i < 4 && !rc; i++)
            rc = write_dense(c, &w, l, attn[i].gguf, attn[i].hf, "attn_weights.bin");
        progress(c, "attention weights", (uint64_t)l + 1, (uint64_t)c->L);
    }
    if (rc) {
        lq_vx_file_abort(&w);
        return rc;
    }
    if ((rc = finish_checksummed(c, &w, "attn_weights.bin")))
        return rc;
    if ((rc = lq_vx_file_open(&wu, c->tmp, "up_weights.bin", 1, c->err)))
        return rc;
    if ((rc = lq_vx_file_open(&wd, c->tmp, "down_weights.bin", 1, c->err))) {
        lq_vx_file_abort(&wu);
        return rc;
    }
    for (int l = 0; l < c->L && !rc; l++) {
        rc = write_dense(c, &wu, l, "ffn_up.weight", "mlp.up_proj.weight", "up_weights.bin");
        if (!rc)
            rc = write_dense(c, &wd, l, "ffn_down.weight", "mlp.down_proj.weight", "down_weights.bin");
        progress(c, "ffn weights", (uint64_t)l + 1, (uint64_t)c->L);
    }
    if (rc) {
        lq_vx_file_abort(&wu);
        lq_vx_file_abort(&wd);
        return rc;
    }
    rc = finish_checksummed(c, &wu, "up_weights.bin");
    if (rc) {
        lq_vx_file_abort(&wd);
        return rc;
    }
    return finish_checksummed(c, &wd, "down_weights.bin");
}

static int write_weights(bctx *c)
{
    int rc;
    if (!c->o->dense_only && (rc = write_projections(c)))
        return rc;
    lq_vx_file w;
    if ((rc = lq_vx_file_open(&w, c->tmp, "norms.bin", 1, c->err)))
        return rc;
    static const struct {
        const char *gguf, *hf;
    } norms[] = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"attn_sub_norm.weight", "attn_sub_norm.weight"},
        {"ffn_sub_norm.weight", "ffn_sub_norm.weight"},
    };
    for (int l = 0; l < c->L && !rc; l++) {
        for (size_t i = 0; i < sizeof norms / sizeof norms[0] && !rc; i++) {
            const lq_gguf_tensor *t = tensor_l(c->g, l, norms[i].gguf);
            if (!t)
                continue;
            char key[128];
            snprintf(key, sizeof key, "layers.%d.%s", l, norms[i].hf);
            rc = write_norm(c, &w, t, key);
        }
    }
    const lq_gguf_tensor *on = lq_gguf_find_tensor(c->g, "output_norm.weight");
    if (!rc && on)
        rc = write_norm(c, &w, on, "norm.weight");
    if (rc) {
        lq_vx_file_abort(&w);
        return rc;
    }
    if ((rc = finish_checksummed(c, &w, "norms.bin")))
        return rc;
    const lq_gguf_tensor *lm = lq_gguf_find_tensor(c->g, "output.weight");
    if (!lm)
        lm = c->embd; /* tied: lm_head is a copy of the embedding */
    if ((rc = write_matrix(c, lm, "lm_head.bin", 1)))
        return rc;
    uint64_t bpf = c->o->f16 ? 2 : 4;
    json_array_append_new(c->manifest,
                          manifest_entry("lm_head.weight", "tensor",
                                         json_pack("[II]", (json_int_t)lm->ne[1], (json_int_t)lm->ne[0]), 0,
                                         lm->ne[0] * lm->ne[1] * bpf, "lm_head.bin"));
    lq_sb sb = {0};
    lq_sb_json_pretty(&sb, c->manifest, 0);
    char *text;
    if ((rc = lq_sb_finish(&sb, &text, c->err)))
        return rc;
    rc = lq_vx_write_file(c->tmp, "weight_manifest.json", text, strlen(text), c->err);
    free(text);
    return rc;
}

/* ---- bitnet/ artifacts (keep-quant) ---- */

typedef struct bn_tensor {
    char name[96];
    const lq_gguf_tensor *t;
} bn_tensor;

static int cmp_bn(const void *a, const void *b)
{
    return strcmp(((const bn_tensor *)a)->name, ((const bn_tensor *)b)->name);
}

static double meta_f64(const lq_gguf *g, const char *arch, const char *suffix, double def)
{
    char key[160];
    double v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return lq_gguf_get_f64(g, key, &v, NULL) == LQ_OK ? v : def;
}

static int write_bitnet(bctx *c, json_t **layout_out)
{
    static const struct {
        const char *gguf, *hf;
    } proj[] = {
        {"attn_q.weight", "self_attn.q_proj.weight"}, {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"}, {"attn_output.weight", "self_attn.o_proj.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},  {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
    };
    size_t n = 0, cap = (size_t)c->L * 7;
    bn_tensor *ts = calloc(cap, sizeof *ts);
    if (!ts)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    for (int l = 0; l < c->L; l++)
        for (int i = 0; i < 7; i++) {
            const lq_gguf_tensor *t = tensor_l(c->g, l, proj[i].gguf);
            if (!t || (t->type != LQ_GGML_I2_S && t->type != LQ_GGML_TQ1_0 && t->type != LQ_GGML_TQ2_0))
                continue;
            snprintf(ts[n].name, sizeof ts[n].name, "layers.%d.%s", l, proj[i].hf);
            ts[n++].t = t;
        }
    if (n == 0) {
        free(ts);
        return lq_err_set(c->err, LQ_EFORMAT, "no ternary BitLinear tensors found in the GGUF "
                                              "(expected blk.N.attn_q.weight ... as I2_S, TQ2_0 or TQ1_0)");
    }
    qsort(ts, n, sizeof *ts, cmp_bn);
    char *bdir = lq_vx_join(c->tmp, "bitnet");
    int rc = bdir && mkdir(bdir, 0755) == 0 ? LQ_OK : lq_err_set(c->err, LQ_EIO, "cannot create bitnet/");
    lq_vx_file sw;
    if (!rc)
        rc = lq_vx_file_open(&sw, c->tmp, "bitnet/scales.f32", 0, c->err);
    json_t *tensors = json_array();
    uint64_t scale_off = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const lq_gguf_tensor *t = ts[i].t;
        uint64_t rows = t->ne[1], cols = t->ne[0];
        float unit, s;
        if (cols % 4)
            rc = lq_err_set(c->err, LQ_EFORMAT, "tensor %s: cols %llu not a multiple of 4", ts[i].name,
                            (unsigned long long)cols);
        if (!rc)
            rc = ternary_scale(c->g, t, &unit, &s, c->err);
        if (rc)
            break;
        const int tq = t->type != LQ_GGML_I2_S;
        /* kernel layout: row-major, byte b of a row = cols 4b..4b+3, slot 0 in the LSBs,
         * +1 = 01, -1 = 10, 0 = 00 */
        size_t rb = (size_t)cols / 4;
        uint8_t *buf = malloc(rb);
        float *vals = tq ? malloc((size_t)cols * sizeof *vals) : NULL; /* a decoded TQ row */
        char fname[128];
        snprintf(fname, sizeof fname, "bitnet/%s.i2s", ts[i].name);
        lq_vx_file fw = {0};
        const int opened = buf && (vals || !tq);
        rc = opened ? lq_vx_file_open(&fw, c->tmp, fname, 0, c->err)
                    : lq_err_set(c->err, LQ_ENOMEM, "out of memory");
        for (uint64_t r = 0; r < rows && !rc; r++) {
            memset(buf, 0, rb);
            if (tq && (rc = lq_gguf_tensor_row_f32(t, r, vals, c->err)))
                break;
            for (uint64_t col = 0; col < cols && !rc; col++) {
                int tr = tq ? (vals[col] > 0) - (vals[col] < 0) : lq_i2s_get(t->data, r * cols + col);
                if (tq && vals[col] != 0 && fabsf(vals[col]) != unit) /* a TQ2_0 code 3 (2d) */
                    rc = lq_err_set(c->err, LQ_EFORMAT, "%s: row %llu holds %g, not a trit times %g",
                                    t->name, (unsigned long long)r, (double)vals[col], (double)unit);
                uint8_t code = tr > 0 ? 1 : tr < 0 ? 2 : 0;
                buf[col / 4] |= (uint8_t)(code << (2 * (col % 4)));
            }
            if (!rc)
                rc = lq_vx_file_write(&fw, buf, rb, c->err);
        }
        if (opened && fw.f) {
            if (rc)
                lq_vx_file_abort(&fw);
            else
                rc = lq_vx_file_close(&fw, NULL, c->err);
        }
        free(buf);
        free(vals);
        for (uint64_t r = 0; r < rows && !rc; r++)
            rc = lq_vx_file_write(&sw, &s, 4, c->err);
        json_t *e = lq_json_object();
        json_object_set_new(e, "name", json_string(ts[i].name));
        json_object_set_new(e, "rows", json_integer((json_int_t)rows));
        json_object_set_new(e, "cols", json_integer((json_int_t)cols));
        json_object_set_new(e, "scale_offset", json_integer((json_int_t)scale_off));
        json_array_append_new(tensors, e);
        scale_off += rows;
        progress(c, "bitnet", i + 1, n);
    }
    if (!rc)
        rc = lq_vx_file_close(&sw, NULL, c->err);
    else if (sw.f)
        lq_vx_file_abort(&sw);
    free(bdir);
    free(ts);
    if (rc) {
        json_decref(tensors);
        return rc;
    }
    json_t *lay = lq_json_object();
    json_object_set_new(lay, "tensors", tensors);
    json_object_set_new(lay, "total_scale_count", json_integer((json_int_t)scale_off));
    json_object_set_new(lay, "rms_eps", real_f32(meta_f64(c->g, c->arch, "attention.layer_norm_rms_epsilon", 1e-5)));
    json_object_set_new(lay, "head_dim", json_integer((json_int_t)meta_f64(c->g, c->arch, "rope.dimension_count", 128)));
    json_object_set_new(lay, "n_q_heads", json_integer((json_int_t)meta_f64(c->g, c->arch, "attention.head_count", 20)));
    json_object_set_new(lay, "n_kv_heads", json_integer((json_int_t)meta_f64(c->g, c->arch, "attention.head_count_kv", 5)));
    json_object_set_new(lay, "rope_base", real_f32(meta_f64(c->g, c->arch, "rope.freq_base", 10000.0)));
    lq_sb sb = {0};
    lq_sb_json_pretty(&sb, lay, 0);
    char *text;
    if (!(rc = lq_sb_finish(&sb, &text, c->err))) {
        rc = lq_vx_write_file(c->tmp, "bitnet_layout.json", text, strlen(text), c->err);
        free(text);
    }
    if (rc)
        json_decref(lay);
    else
        *layout_out = lay;
    return rc;
}

/* ---- tokenizer.json ---- */

static int write_tokenizer(bctx *c, const char *gguf_path, lq_tokenizer **tok)
{
    char *dirc = strdup(gguf_path);
    if (!dirc)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    char *side = c->o->tokenizer_json ? strdup(c->o->tokenizer_json)
                                      : lq_vx_join(c->o->side_dir ? c->o->side_dir : dirname(dirc), "tokenizer.json");
    free(dirc);
    if (!side)
        return lq_err_set(c->err, LQ_ENOMEM, "out of memory");
    struct stat st;
    int rc;
    char *text = NULL;
    size_t len = 0;
    if (stat(side, &st) == 0) {
        /* re-serialised pretty, as LARQL does */
        json_error_t je;
        json_t *root = json_load_file(side, 0, &je);
        if (!root) {
            rc = lq_err_set(c->err, LQ_EFORMAT, "%s: line %d: %s", side, je.line, je.text);
            free(side);
            return rc;
        }
        lq_sb sb = {0};
        lq_sb_json_pretty(&sb, root, 0);
        json_decref(root);
        rc = lq_sb_finish(&sb, &text, c->err);
        if (!rc)
            len = strlen(text);
    } else if (c->o->tokenizer_json) {
        rc = lq_err_set(c->err, LQ_ENOTFOUND, "%s: %s", side, strerror(errno));
    } else {
        rc = lq_vx_tokenizer_json_from_gguf(c->g, &text, &len, c->err);
    }
    free(side);
    if (!rc)
        rc = lq_vx_write_file(c->tmp, "tokenizer.json", text, len, c->err);
    /* the GGUF's own tokenizer decodes tokens for down_meta (the same vocabulary) */
    if (!rc && lq_tokenizer_from_gguf(c->g, tok, NULL) != LQ_OK)
        rc = lq_tokenizer_from_json(text, len, tok, c->err);
    free(text);
    return rc;
}

/* ---- directory handling ---- */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_tree(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

static int copy_side_file(bctx *c, const char *gguf_path, const char *name)
{
    char *d = strdup(gguf_path);
    if (!d)
        return LQ_OK;
    char *src = lq_vx_join(c->o->side_dir ? c->o->side_dir : dirname(d), name);
    free(d);
    lq_mapfile m = {0};
    struct stat st;
    if (src && stat(src, &st) == 0 && S_ISREG(st.st_mode) && lq_mapfile_open(&m, src, NULL) == LQ_OK) {
        lq_vx_write_file(c->tmp, name, m.data ? (const void *)m.data : "", m.size, NULL); /* snapshot, non-fatal */
        lq_mapfile_close(&m);
    }
    free(src);
    return LQ_OK;
}

/* A JSON real holding the double nearest to the shortest decimal of an f32, so that it prints
 * as Rust prints the f32 ("1e-5" -> 0.00001, not 9.99999974e-6). */
static json_t *real_f32(double v)
{
    char tmp[32];
    float f = (float)v;
    for (int p = 1; p <= 9; p++) {
        snprintf(tmp, sizeof tmp, "%.*g", p, (double)f);
        if (strtof(tmp, NULL) == f)
            break;
    }
    return json_real(strtod(tmp, NULL));
}

static int validate_shapes(bctx *c)
{
    c->embd = lq_gguf_find_tensor(c->g, "token_embd.weight");
    if (!c->embd || c->embd->n_dims != 2)
        return lq_err_set(c->err, LQ_EFORMAT, "GGUF: token_embd.weight missing or not 2-D");
    c->D = (int)c->embd->ne[0];
    c->V = (int)c->embd->ne[1]; /* vocab = embedding rows */
    if (c->embd->ne[0] > LQ_VINDEX_MAX_HIDDEN || c->embd->ne[1] > LQ_VINDEX_MAX_VOCAB)
        return lq_err_set(c->err, LQ_EFORMAT, "token_embd.weight [%llu, %llu] exceeds limits",
                          (unsigned long long)c->embd->ne[1], (unsigned long long)c->embd->ne[0]);
    char key[160];
    uint64_t L = 0;
    snprintf(key, sizeof key, "%s.block_count", c->arch);
    if (lq_gguf_get_u64(c->g, key, &L, NULL))
        while (tensor_l(c->g, (int)L, "ffn_gate.weight"))
            L++;
    if (L == 0 || L > LQ_VINDEX_MAX_LAYERS)
        return lq_err_set(c->err, LQ_EFORMAT, "GGUF: %s = %llu layers (must be 1..%d)", key,
                          (unsigned long long)L, LQ_VINDEX_MAX_LAYERS);
    c->L = (int)L;
    for (int l = 0; l < c->L; l++) {
        const lq_gguf_tensor *gt = tensor_l(c->g, l, "ffn_gate.weight");
        const lq_gguf_tensor *dt = tensor_l(c->g, l, "ffn_down.weight");
        if (!gt || !dt)
            return lq_err_set(c->err, LQ_EFORMAT, "GGUF: blk.%d.ffn_gate/ffn_down missing", l);
        if (l == 0)
            c->F = (int)gt->ne[1];
        if (gt->n_dims != 2 || gt->ne[0] != (uint64_t)c->D || gt->ne[1] != (uint64_t)c->F ||
            dt->n_dims != 2 || dt->ne[0] != (uint64_t)c->F || dt->ne[1] != (uint64_t)c->D)
            return lq_err_set(c->err, LQ_EFORMAT,
                              "GGUF: blk.%d ffn_gate [%llu, %llu] / ffn_down [%llu, %llu] do not match hidden %d, ffn %d",
                              l, (unsigned long long)gt->ne[1], (unsigned long long)gt->ne[0],
                              (unsigned long long)dt->ne[1], (unsigned long long)dt->ne[0], c->D, c->F);
        if (!lq_ggml_type_supported(gt->type) || !lq_ggml_type_supported(dt->type))
            return lq_err_set(c->err, LQ_EUNSUPPORTED, "GGUF: blk.%d FFN tensor type %s not decodable", l,
                              lq_ggml_type_name(lq_ggml_type_supported(gt->type) ? dt->type : gt->type));
    }
    if (!lq_ggml_type_supported(c->embd->type))
        return lq_err_set(c->err, LQ_EUNSUPPORTED, "GGUF: token_embd.weight type %s not decodable",
                          lq_ggml_type_name(c->embd->type));
    return LQ_OK;
}

static json_t *index_json(bctx *c, json_t *layers, json_t *bitnet_layout, int level)
{
    json_t *ix = lq_json_object();
    const char *name = NULL;
    uint64_t nlen = 0;
    char *model = NULL;
    if (lq_gguf_get_str(c->g, "general.name", &name, &nlen, NULL) == LQ_OK && nlen)
        model = strndup(name, (size_t)nlen);
    json_object_set_new(ix, "version", json_integer(2));
    json_object_set_new(ix, "model", json_string(model ? model : "gguf-model"));
    /* LARQL's architecture detection knows llama; BitNet is its generic family */
    json_object_set_new(ix, "family", json_string(!strcmp(c->arch, "llama") ? "llama" : "generic"));
    json_t *src = lq_json_object();
    json_object_set_new(src, "huggingface_repo", json_string(model ? model : "gguf-model"));
    json_object_set_new(src, "huggingface_revision", json_null());
    json_object_set_new(src, "safetensors_sha256", json_null());
    char ts[64];
    if (c->o->extracted_at) {
        snprintf(ts, sizeof ts, "%s", c->o->extracted_at);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    json_object_set_new(src, "extracted_at", json_string(ts));
    json_object_set_new(src, "larql_version", json_string(LQ_VX_WRITER_VERSION));
    json_object_set_new(ix, "source", src);
    json_object_set(ix, "checksums", c->checksums);
    json_object_set_new(ix, "num_layers", json_integer(c->L));
    json_object_set_new(ix, "hidden_size", json_integer(c->D));
    json_object_set_new(ix, "intermediate_size", json_integer(c->F));
    json_object_set_new(ix, "vocab_size", json_integer(c->V));
    json_object_set_new(ix, "embed_scale", json_real(1.0));
    json_object_set_new(ix, "extract_level", json_string(level_name(level)));
    json_object_set_new(ix, "dtype", json_string(c->o->f16 ? "f16" : "f32"));
    json_object_set_new(ix, "quant", json_string("none"));
    lq_vindex_band b[3];
    if (lq_vx_family_bands(!strcmp(c->arch, "llama") ? "llama" : "generic", c->L, b))
        json_object_set_new(ix, "layer_bands",
                            json_pack("{s:[ii],s:[ii],s:[ii]}", "syntax", b[0].start, b[0].end, "knowledge",
                                      b[1].start, b[1].end, "output", b[2].start, b[2].end));
    else
        json_object_set_new(ix, "layer_bands", json_null());
    json_object_set(ix, "layers", layers);
    json_object_set_new(ix, "down_top_k", json_integer(json_array_size(layers) ? c->o->down_top_k : 0));
    json_object_set_new(ix, "has_model_weights", json_boolean(level >= LQ_VLEVEL_INFERENCE));
    json_t *mc = lq_json_object();
    json_object_set_new(mc, "model_type", json_string(c->arch));
    /* head_dim as LARQL's GGUF config: attention.key_length, else hidden / heads */
    double nh = meta_f64(c->g, c->arch, "attention.head_count", 0);
    double hd = meta_f64(c->g, c->arch, "attention.key_length", nh > 0 ? floor(c->D / nh) : 128);
    double nrot = meta_f64(c->g, c->arch, "rope.dimension_count", hd);
    json_object_set_new(mc, "head_dim", json_integer((json_int_t)hd));
    json_object_set_new(mc, "num_q_heads", json_integer((json_int_t)nh));
    json_object_set_new(mc, "num_kv_heads", json_integer((json_int_t)meta_f64(c->g, c->arch, "attention.head_count_kv", 0)));
    json_object_set_new(mc, "rope_base", real_f32(meta_f64(c->g, c->arch, "rope.freq_base", 10000.0)));
    json_object_set_new(mc, "sliding_window", json_null());
    /* the training context, so that a model opened from the vindex windows and bounds its
     * sessions as the GGUF would (vx_model.c reads it; 4096 when absent) */
    double ctx = meta_f64(c->g, c->arch, "context_length", 0);
    if (ctx >= 1)
        json_object_set_new(mc, "max_position_embeddings", json_integer((json_int_t)ctx));
    json_object_set_new(mc, "norm_eps", real_f32(meta_f64(c->g, c->arch, "attention.layer_norm_rms_epsilon", 1e-5)));
    /* partial rotary (rope.dimension_count < head_dim): LARQL's optional field */
    if (hd > 0 && nrot > 0 && nrot < hd)
        json_object_set_new(mc, "partial_rotary_factor", json_real(nrot / hd));
    json_object_set_new(ix, "model_config", mc);
    if (bitnet_layout)
        json_object_set(ix, "bitnet_layout", bitnet_layout);
    free(model);
    return ix;
}

int lq_vindex_build(const char *gguf_path, const char *out_dir, lq_vindex_build_opts *o, lq_err *err)
{
    lq_vindex_build_opts defo;
    if (!o) {
        lq_vindex_build_opts_init(&defo);
        o = &defo;
    }
    if (!out_dir || !*out_dir)
        return lq_err_set(err, LQ_EINVAL, "--output DIR is required");
    if (o->level < LQ_VLEVEL_BROWSE || o->level > LQ_VLEVEL_ALL)
        return lq_err_set(err, LQ_EINVAL, "level %d (browse, inference, all)", o->level);
    if (o->down_top_k < 0 || o->down_top_k > LQ_VINDEX_MAX_TOPK)
        return lq_err_set(err, LQ_EINVAL, "down_top_k %d outside [0, %d]", o->down_top_k, LQ_VINDEX_MAX_TOPK);
    struct stat st;
    if (stat(out_dir, &st) == 0) {
        int empty = 0;
        if (S_ISDIR(st.st_mode))
            empty = dir_is_empty(out_dir); /* rename() replaces an empty directory atomically, and a
                                              failed build leaves it as it was */
        if (!empty)
            return lq_err_set(err, LQ_EINVAL, "output %s already exists and is not an empty directory", out_dir);
    }
    lq_gguf *g = NULL;
    int rc = lq_gguf_open(gguf_path, &g, err);
    if (rc)
        return rc;
    bctx c = {0};
    c.g = g;
    c.o = o;
    c.err = err;
    const char *arch = NULL;
    uint64_t alen = 0;
    char archbuf[64] = "llama";
    if (lq_gguf_get_str(g, "general.architecture", &arch, &alen, NULL) == LQ_OK && alen < sizeof archbuf) {
        memcpy(archbuf, arch, (size_t)alen);
        archbuf[alen] = 0;
    }
    c.arch = archbuf;
    /* BitNet archs, and llama-arch files whose projections are I2_S (HF1BitLLM, Falcon3-1.58bit,
     * Falcon-E as bitnet.cpp converts them): both keep their ternary weights with --keep-quant */
    const lq_gguf_tensor *q0 = lq_gguf_find_tensor(g, "blk.0.attn_q.weight");
    int ternary_llama = strncmp(archbuf, "bitnet", 6) && q0 && q0->type == LQ_GGML_I2_S;
    c.bitnet = !strncmp(archbuf, "bitnet", 6) || ternary_llama;
    o->keep_quant_ignored = 0;
    int keep = o->keep_quant;
    if (keep && !c.bitnet) {
        keep = 0;
        o->keep_quant_ignored = 1;
    }
    int level = o->level;
    char *tmp = NULL;
    lq_tokenizer *tok = NULL;
    uint8_t *keep_tok = NULL;
    json_t *layers = json_array(), *layout = NULL, *ix = NULL;
    c.checksums = lq_json_object();
    c.manifest = json_array();
    if (o->dense_only && !keep) {
        rc = lq_err_set(err, LQ_EINVAL, "--dense-only is only valid with --keep-quant on a BitNet GGUF "
                                        "(it skips the gate vectors and down_meta that browse queries need)");
        goto out;
    }
    if (keep && !o->dense_only && level == LQ_VLEVEL_BROWSE) {
        rc = lq_err_set(err, LQ_EINVAL,
                        "--keep-quant requires --level inference (or all): BitNet inference needs the dense "
                        "norm/embed/lm_head tensors that browse level does not extract. Re-run with --level inference.");
        goto out;
    }
    if (ternary_llama && !keep && level >= LQ_VLEVEL_INFERENCE) {
        /* the dense files hold unit-scale trits (LARQL's convention for I2_S), which a llama
         * vindex would run as its real weights */
        rc = lq_err_set(err, LQ_EINVAL,
                        "a llama GGUF with I2_S projections needs --keep-quant for --level inference "
                        "(its ternary weights and scales go to bitnet/)");
        goto out;
    }
    if (o->dense_only)
        level = LQ_VLEVEL_INFERENCE;
    if ((rc = validate_shapes(&c)))
        goto out;

    /* temporary sibling directory: .NAME.partial-PID */
    {
        char *a = strdup(out_dir), *b = strdup(out_dir);
        size_t n = strlen(out_dir) + 64;
        tmp = malloc(n);
        if (!a || !b || !tmp) {
            free(a);
            free(b);
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            goto out;
        }
        snprintf(tmp, n, "%s/.%s.partial-%ld", dirname(a), basename(b), (long)getpid());
        free(a);
        free(b);
        rm_tree(tmp);
        if (mkdir(tmp, 0755)) {
            rc = lq_err_set(err, LQ_EIO, "%s: cannot create: %s", tmp, strerror(errno));
            free(tmp);
            tmp = NULL;
            goto out;
        }
    }
    c.tmp = tmp;
    if ((rc = lq_pool_create(o->n_threads > 0 ? o->n_threads : lq_cpu_count(), &c.pool, err)))
        goto out;
    c.kern = lq_kernels_best();
    /* the fast down_meta path re-scores from the embedding's own rows: F16/F32 only */
    c.dm_fast = c.kern->dm_block && !o->dm_exact &&
                (c.embd->type == LQ_GGML_F16 || c.embd->type == LQ_GGML_F32);
    if ((rc = write_tokenizer(&c, gguf_path, &tok)))
        goto out;
    if (!o->dense_only) {
        keep_tok = calloc((size_t)c.V, 1);
        if (!keep_tok) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            goto out;
        }
        int32_t tv = lq_tokenizer_n_vocab(tok);
        for (int32_t id = 0; id < c.V && id < tv; id++) {
            char *text = NULL;
            size_t len = 0;
            /* LARQL drops the top-k tokens whose decode(skip special).trim() is empty */
            if (lq_tokenizer_decode(tok, &id, 1, LQ_DETOK_SKIP_SPECIAL, &text, &len, NULL) == LQ_OK)
                keep_tok[id] = !lq_vx_blank(text, len);
            free(text);
        }
        if ((rc = write_gates(&c, layers)))
            goto out;
    }
    if ((rc = write_matrix(&c, c.embd, "embeddings.bin", 1)))
        goto out;
    progress(&c, "embeddings", 1, 1);
    if (!o->dense_only && (rc = write_down_meta(&c, keep_tok)))
        goto out;
    if (level >= LQ_VLEVEL_INFERENCE && (rc = write_weights(&c)))
        goto out;
    if (keep && (rc = write_bitnet(&c, &layout)))
        goto out;
    {
        static const char *side[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                                     "chat_template.jinja"};
        for (size_t i = 0; i < 4; i++)
            copy_side_file(&c, gguf_path, side[i]);
    }
    ix = index_json(&c, layers, layout, level);
    {
        lq_sb sb = {0};
        lq_sb_json_pretty(&sb, ix, 0);
        char *text;
        if ((rc = lq_sb_finish(&sb, &text, err)))
            goto out;
        rc = lq_vx_write_file(tmp, "index.json", text, strlen(text), err);
        free(text);
        if (rc)
            goto out;
    }
    /* relation clusters read the finished files back (gate rows, down_meta, embeddings) */
    if (!o->dense_only && !o->no_clusters) {
        size_t nclu = 0, kclu = 0;
        progress(&c, "clusters", 0, 1);
        if ((rc = lq_vx_write_clusters(tmp, o->n_threads > 0 ? o->n_threads : lq_cpu_count(), o->clusters_any_depth, &nclu, &kclu, err)))
            goto out;
        progress(&c, "clusters", 1, 1);
    }
    if (fsync_dir(tmp) || rename(tmp, out_dir)) {
        rc = lq_err_set(err, LQ_EIO, "cannot move %s into place as %s: %s", tmp, out_dir, strerror(errno));
        goto out;
    }
    {
        char *a = strdup(out_dir);
        if (a) {
            fsync_dir(dirname(a));
            free(a);
        }
    }
    free(tmp);
    tmp = NULL;
out:
    if (tmp) {
        rm_tree(tmp);
        free(tmp);
    }
    lq_pool_free(c.pool);
    free(c.Ep);
    free(c.escale);
    lq_tokenizer_free(tok);
    free(keep_tok);
    json_decref(layers);
    json_decref(layout);
    json_decref(ix);
    json_decref(c.checksums);
    json_decref(c.manifest);
    lq_gguf_close(g);
    return rc;
}
