/* The forward pass over a batch of rows (prefill chunk or batched decode).
 *
 * Each projection is one kernel call over all T rows (each weight byte is read once per
 * batch), its output rows split across the model's thread pool. BitNet blocks quantise the
 * activations entering a BitLinear once per vector (shared by q/k/v and by gate/up).
 * Numerics follow the project's design notes ("Numerics": ../shared/DESIGN.md) and the shared
 * reference forward pass whose logits tests/conformance compares against. Nothing here
 * allocates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cancel.h"
#include "core/f16.h"
#include "engine/engine_internal.h"

/* ---- scratch ---- */

static int max3(int a, int b, int c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

int lq_scratch_init(lq_scratch *sc, const lq_model *m)
{
    memset(sc, 0, sizeof *sc);
    size_t B = LQ_MAX_BATCH;
    /* inputs of a row-padded I2_S matrix are zero-padded to whole 128-blocks (project) */
    size_t max_in = ((size_t)max3(m->n_embd, m->q_dim, m->n_ff) + 127) / 128 * 128;
    sc->n_threads = lq_pool_threads(m->pool);
    sc->x = malloc(B * (size_t)m->n_embd * sizeof(float));
    sc->h = malloc(B * max_in * sizeof(float));
    sc->q = malloc(B * (size_t)m->q_dim * sizeof(float));
    sc->k = malloc(B * (size_t)m->kv_dim * sizeof(float));
    sc->v = malloc(B * (size_t)m->kv_dim * sizeof(float));
    sc->att = malloc(B * (size_t)m->q_dim * sizeof(float));
    sc->g = malloc(B * (size_t)m->n_ff * sizeof(float));
    sc->u = malloc(B * (size_t)m->n_ff * sizeof(float));
    sc->tmp = malloc(B * (size_t)m->n_embd * sizeof(float));
    sc->xdq = malloc(B * max_in * sizeof(float));
    sc->xq = malloc(B * max_in);
    sc->xinv = malloc(B * sizeof(float));
    sc->xsum = malloc(B * sizeof(int32_t));
    sc->lm_tile = malloc((size_t)sc->n_threads * B * LQ_LM_TILE * sizeof(float));
    sc->xq16 = malloc(B * (size_t)m->n_embd * sizeof(int16_t));
    sc->xinv16 = malloc(B * sizeof(float));
    if (!sc->x || !sc->h || !sc->q || !sc->k || !sc->v || !sc->att || !sc->g || !sc->u ||
        !sc->tmp || !sc->xdq || !sc->xq || !sc->xinv || !sc->xsum || !sc->lm_tile || !sc->xq16 ||
        !sc->xinv16) {
        lq_scratch_free(sc);
        return LQ_ENOMEM;
    }
    return LQ_OK;
}

void lq_scratch_free(lq_scratch *sc)
{
    if (!sc)
        return;
    free(sc->x);
    free(sc->h);
    free(sc->q);
    free(sc->k);
    free(sc->v);
    free(sc->att);
    free(sc->att_tab);
    free(sc->att_buf);
    free(sc->g);
    free(sc->u);
    free(sc->tmp);
    free(sc->xdq);
    free(sc->xq);
    free(sc->xinv);
    free(sc->xsum);
    free(sc->lm_tile);
    free(sc->xq16);
    free(sc->xinv16);
    memset(sc, 0, sizeof *sc);
}

/* ---- elementwise pieces ---- */

/* out = x / sqrt(mean(x²) + eps) * w, x and out [n]. The sum of squares is accumulated in
 * double over f32 squares and the scale rounded to f32, as the shared reference does, so
 * that the int8 activation quantiser sees the same inputs (a flipped rounding would move a
 * logit by a quantum). out may alias x. */
static void rmsnorm(const float *x, const float *w, int n, float eps, float *out)
{
    /* four partial sums in double: one chain of dependent double adds (4 cycles each) made
     * the norms ~2 ms of every batched decode step at B=4, all of it on one thread */
    double p0 = 0, p1 = 0, p2 = 0, p3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        p0 += (float)(x[i] * x[i]);
        p1 += (float)(x[i + 1] * x[i + 1]);
        p2 += (float)(x[i + 2] * x[i + 2]);
        p3 += (float)(x[i + 3] * x[i + 3]);
    }
    for (; i < n; i++)
        p0 += (float)(x[i] * x[i]);
    double ss = (p0 + p1) + (p2 + p3);
    float mean = (float)(ss / n);
    float sc = (float)(1.0 / sqrt((double)(float)(mean + eps)));
    for (i = 0; i < n; i++)
        out[i] = (x[i] * sc) * w[i];
}

static void embed_row(const lq_model *m, int32_t id, float *out)
{
    size_t n = (size_t)m->n_embd;
    const uint8_t *base = m->embd.data;
    switch (m->embd.type) {
    case LQ_GGML_F16: {
        const uint8_t *r = base + (size_t)id * n * 2;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, r + 2 * i, 2);
            out[i] = lq_f16_to_f32(h);
        }
        break;
    }
    case LQ_GGML_BF16: {
        const uint8_t *r = base + (size_t)id * n * 2;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, r + 2 * i, 2);
            out[i] = lq_bf16_to_f32(h);
        }
        break;
    }
    default: /* F32 */
        memcpy(out, base + (size_t)id * n * 4, n * sizeof(float));
        break;
    }
}

/* RoPE on nh heads of one row v [nh*head_dim] at the position whose table row is cs
 * [n_rot/2, 2] (cos, sin). */
static void rope_row(const lq_model *m, float *v, int nh, const float *cs)
{
    int hd = m->head_dim, half = m->n_rot / 2;
    for (int h = 0; h < nh; h++) {
        float *b = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int i0 = m->rope_neox ? i : 2 * i;
            int i1 = m->rope_neox ? i + half : 2 * i + 1;
            float v0 = b[i0], v1 = b[i1];
            b[i0] = v0 * c - v1 * s;
            b[i1] = v0 * s + v1 * c;
        }
    }
}

/* ---- projections ---- */

enum { IN_F32 = 0, IN_I8 = 1 };

/* Up to three matrices sharing one input, run as one pool loop over their stacked rows. */
typedef struct mm_job {
    const lq_kernels *kern;
    int n;
    const lq_wmat *w[3];
    float *y[3];      /* [T, w->rows] each */
    int64_t off[4];   /* row offsets of each matrix in the stacked range */
    int in_mode;
    const float *x;   /* [T, cols] f32 input (IN_F32), or the dequantised int8 (IN_I8) */
    const int8_t *xq; /* [T, cols] */
    const float *xinv;
    const int32_t *xsum;
    size_t ldx;
    int T;
} mm_job;

static void mm_part(const mm_job *j, int p, int64_t r0, int64_t r1)
{
    const lq_wmat *w = j->w[p];
    size_t ldy = (size_t)w->rows;
    if (w->kind == LQ_WK_I2S) {
        if (j->in_mode == IN_I8)
            j->kern->i2s_i8(&w->i2s, j->xq, j->ldx, j->xinv, j->xsum, j->T, j->y[p], ldy, r0, r1);
        else
            j->kern->i2s_f32(&w->i2s, j->x, j->ldx, j->T, j->y[p], ldy, r0, r1);
    } else if (w->kind == LQ_WK_TQ) { /* the loader makes TQ kinds only where input is IN_I8 */
        j->kern->tq_i8(&w->tq, j->xq, j->ldx, j->xinv, j->T, j->y[p], ldy, r0, r1);
    } else {
        j->kern->dense(&w->dense, j->x, j->ldx, j->T, j->y[p], ldy, r0, r1);
    }
}

static void mm_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    (void)tid;
    const mm_job *j = ctx;
    for (int p = 0; p < j->n; p++) {
        int64_t lo = start > j->off[p] ? start : j->off[p];
        int64_t hi = end < j->off[p + 1] ? end : j->off[p + 1];
        if (lo < hi)
            mm_part(j, p, lo - j->off[p], hi - j->off[p]);
    }
}

/* Prepares the input x [T, cols] of a projection: for a BitLinear in INT8 mode, quantise each
 * row once (the result is shared by every matrix of this input); dense weights under INT8
 * mode get the dequantised values q * inv_scale, which is the same product. ldx > cols: an
 * I2_S matrix of this input has rows padded to whole blocks with zero trits (model.c
 * load_wmat): the input rows are padded with zeros to ldx, so the padding adds nothing, and
 * the int8 scale is still the absmax of the cols real values. */
static void mm_prepare(const lq_model *m, lq_scratch *sc, mm_job *j, const float *x, int cols,
                       size_t ldx, int T, int bitlinear, int any_dense)
{
    memset(j, 0, sizeof *j);
    j->kern = m->kern;
    j->T = T;
    j->ldx = ldx;
    j->x = x;
    j->in_mode = IN_F32;
    const size_t pad = ldx - (size_t)cols;
    if (!bitlinear || m->act_mode != LQ_ACT_INT8) {
        if (pad) {
            for (int t = 0; t < T; t++) {
                memcpy(sc->xdq + (size_t)t * ldx, x + (size_t)t * cols, (size_t)cols * sizeof *x);
                memset(sc->xdq + (size_t)t * ldx + cols, 0, pad * sizeof *x);
            }
            j->x = sc->xdq;
        }
        return;
    }
    j->in_mode = IN_I8;
    for (int t = 0; t < T; t++) {
        m->kern->quant_i8(x + (size_t)t * cols, cols, sc->xq + (size_t)t * ldx, &sc->xinv[t],
                          &sc->xsum[t]);
        memset(sc->xq + (size_t)t * ldx + cols, 0, pad);
    }
    j->xq = sc->xq;
    j->xinv = sc->xinv;
    j->xsum = sc->xsum;
    if (any_dense) {
        for (int t = 0; t < T; t++)
            for (int c = 0; c < cols; c++)
                sc->xdq[(size_t)t * ldx + c] = sc->xq[(size_t)t * ldx + c] * sc->xinv[t];
        j->x = sc->xdq;
    }
}

static void mm_run(const lq_model *m, mm_job *j)
{
    j->off[0] = 0;
    for (int p = 0; p < j->n; p++)
        j->off[p + 1] = j->off[p] + j->w[p]->rows;
    lq_pool_for_dyn(m->pool, j->off[j->n], 16, mm_fn, j);
}

/* y_i = W_i · x for up to three matrices with the same input x [T, cols]. */
static void project(const lq_model *m, lq_scratch *sc, const float *x, int cols, int T,
                    int n, const lq_wmat *const *w, float *const *y)
{
    int bitlinear = m->bitlinear; /* BitNet archs, and llama files carrying I2_S */
    int any_dense = 0;
    size_t ldx = (size_t)cols;
    for (int p = 0; p < n; p++) {
        any_dense |= w[p]->kind == LQ_WK_DENSE;
        if (w[p]->kind == LQ_WK_I2S && (size_t)w[p]->i2s.cols > ldx)
            ldx = (size_t)w[p]->i2s.cols;
    }
    mm_job j;
    mm_prepare(m, sc, &j, x, cols, ldx, T, bitlinear, any_dense);
    j.n = n;
    for (int p = 0; p < n; p++) {
        j.w[p] = w[p];
        j.y[p] = y[p];
    }
    mm_run(m, &j);
}

/* ---- attention ---- */

/* Positions per attention part. A row whose causal prefix is longer is computed in parts of
 * this many positions, in parallel, and the parts' softmax states are merged in order: one-
 * token decode over a long cache otherwise has only n_head_kv items (5 for 2B-4T) for two
 * threads, or reads each KV head's cache twice when its query heads are split. A row's parts
 * depend only on its own length, so its result does not depend on the batch around it. */
#define LQ_ATT_PART 512

typedef struct att_job {
    const lq_model *m;
    const lq_fwd_row *rows;
    int layer, T;
    int per;             /* query heads per item (a divisor of the group) */
    int P;               /* parts over all rows */
    const int *part_row; /* [P] the row of each part */
    const int *row_part; /* [T + 1] first part of each row */
    float *part_out;     /* [P, n_head, head_dim] outputs of rows with several parts */
    float *part_ml;      /* [P, n_head, 2] their softmax states */
    const float *q;      /* [T, q_dim] after RoPE */
    float *out;          /* [T, q_dim] */
} att_job;

/* Items are (KV head, part of its query-head group, row part), the row parts innermost, so
 * that each thread's contiguous chunk mixes early and late rows (causal rows have unequal
 * work). Each item is one call of the kernel set's grouped attention: the `per` query heads
 * share one walk over the part's positions in the row's session cache. */
static void att_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    (void)tid;
    const att_job *j = ctx;
    const lq_model *m = j->m;
    int hd = m->head_dim, group = m->n_head / m->n_head_kv;
    int hparts = group / j->per;
    float scale = (float)(1.0 / sqrt((double)hd));
    size_t hb = lq_kv_head_bytes(m->kv_type, hd);
    for (int64_t it = start; it < end; it++) {
        int p = (int)(it % j->P), rest = (int)(it / j->P);
        int kvh = rest / hparts, h = kvh * group + (rest % hparts) * j->per;
        int t = j->part_row[p], c = p - j->row_part[t];
        int nparts = j->row_part[t + 1] - j->row_part[t];
        int npos = j->rows[t].pos + 1, p0 = c * LQ_ATT_PART;
        int len = npos - p0 < LQ_ATT_PART || nparts == 1 ? npos - p0 : LQ_ATT_PART;
        const lq_kv_view *kv = j->rows[t].kv;
        size_t off = (size_t)kvh * kv->head_stride + (size_t)p0 * hb;
        const uint8_t *kc = lq_kv_k(kv, j->layer) + off;
        const uint8_t *vc = lq_kv_v(kv, j->layer) + off;
        const float *q = j->q + (size_t)t * m->q_dim + (size_t)h * hd;
        float *o = j->out + (size_t)t * m->q_dim + (size_t)h * hd;
        float *ml = NULL;
        if (nparts > 1) {
            o = j->part_out + ((size_t)p * m->n_head + h) * hd;
            ml = j->part_ml + ((size_t)p * m->n_head + h) * 2;
        }
        m->kern->attn(q, (size_t)hd, j->per, kc, vc, hb, m->kv_type, len, hd,
                      scale, o, (size_t)hd, ml);
    }
}

/* Items are (row, head) of the rows computed in several parts: their parts' normalised outputs
 * are combined with weights sum_c * exp(max_c - max), in part order. */
static void att_merge_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    (void)tid;
    const att_job *j = ctx;
    const lq_model *m = j->m;
    int hd = m->head_dim;
    for (int64_t it = start; it < end; it++) {
        int t = (int)(it / m->n_head), h = (int)(it % m->n_head);
        int a = j->row_part[t], b = j->row_part[t + 1];
        float *o = j->out + (size_t)t * m->q_dim + (size_t)h * hd;
        if (b - a < 2)
            continue;
        float mx = -INFINITY;
        for (int p = a; p < b; p++) {
            float pm = j->part_ml[((size_t)p * m->n_head + h) * 2];
            mx = pm > mx ? pm : mx;
        }
        float wsum = 0;
        for (int i = 0; i < hd; i++)
            o[i] = 0;
        for (int p = a; p < b; p++) {
            const float *ml = j->part_ml + ((size_t)p * m->n_head + h) * 2;
            const float *po = j->part_out + ((size_t)p * m->n_head + h) * hd;
            float w = ml[1] * expf(ml[0] - mx);
            wsum += w;
            for (int i = 0; i < hd; i++)
                o[i] += w * po[i];
        }
        for (int i = 0; i < hd; i++)
            o[i] /= wsum;
    }
}

/* A buffer of at least `need` elements of es bytes: buf itself, or buf grown (never shrunk;
 * *cap updated). NULL without memory (buf is then unchanged). */
static void *grow_buf(void *buf, size_t *cap, size_t need, size_t es)
{
    if (need <= *cap)
        return buf;
    void *p = realloc(buf, need * es);
    if (p)
        *cap = need;
    return p;
}

/* Lays out the row parts of this batch (att_job's part_row, row_part) and the buffers for
 * rows in several parts, in the scratch (grown when needed). 0, or LQ_ENOMEM: then every row
 * goes in one part (still correct; only its float rounding differs from the split result). */
static int att_plan(const lq_model *m, lq_scratch *sc, const lq_fwd_row *rows, int T, att_job *j)
{
    int P = 0, split = 0;
    for (int t = 0; t < T; t++) {
        int n = (rows[t].pos + LQ_ATT_PART) / LQ_ATT_PART; /* ceil((pos + 1) / PART) */
        P += n;
        split |= n > 1;
    }
    size_t need_tab = (size_t)P + (size_t)T + 1;
    size_t need_buf = split ? (size_t)P * (size_t)m->n_head * ((size_t)m->head_dim + 2) : 0;
    int *tab = grow_buf(sc->att_tab, &sc->att_tab_cap, need_tab, sizeof *tab);
    if (!tab)
        return LQ_ENOMEM;
    sc->att_tab = tab;
    if (need_buf > 0) {
        float *buf = grow_buf(sc->att_buf, &sc->att_buf_cap, need_buf, sizeof *buf);
        if (!buf)
            return LQ_ENOMEM;
        sc->att_buf = buf;
    }
    int *part_row = sc->att_tab, *row_part = sc->att_tab + P;
    P = 0;
    for (int t = 0; t < T; t++) {
        row_part[t] = P;
        int n = (rows[t].pos + LQ_ATT_PART) / LQ_ATT_PART;
        for (int c = 0; c < n; c++)
            part_row[P++] = t;
    }
    row_part[T] = P;
    j->P = P;
    j->part_row = part_row;
    j->row_part = row_part;
    j->part_out = sc->att_buf;
    j->part_ml = split ? sc->att_buf + (size_t)P * m->n_head * m->head_dim : NULL;
    /* Query heads per item: the whole group of a KV head (its cache is walked once), halved
     * while there would be fewer than 4 items per thread. */
    int group = m->n_head / m->n_head_kv, per = group;
    const int64_t threads = lq_pool_threads(m->pool);
    while (per % 2 == 0 && (int64_t)P * m->n_head_kv * (group / per) < 4 * threads)
        per /= 2;
    j->per = per;
    return LQ_OK;
}

/* One row in one part each: the fallback when the part buffers cannot be allocated. */
static void att_plan_whole(const lq_model *m, int T, int *tab, att_job *j)
{
    for (int t = 0; t < T; t++) {
        tab[t] = t;     /* part_row */
        tab[T + t] = t; /* row_part */
    }
    tab[2 * T] = T;
    j->P = T;
    j->part_row = tab;
    j->row_part = tab + T;
    j->part_out = j->part_ml = NULL;
    j->per = m->n_head / m->n_head_kv;
}

/* Stores v [kv_dim] as position pos of a layer's K or V (base), head by head (kv_type). */
static void kv_store(const lq_model *m, const lq_kv_view *kv, uint8_t *base, int pos, const float *v)
{
    size_t hb = lq_kv_head_bytes(m->kv_type, m->head_dim);
    for (int h = 0; h < m->n_head_kv; h++)
        lq_kv_store_head(m->kv_type, base + (size_t)h * kv->head_stride + (size_t)pos * hb,
                         v + (size_t)h * m->head_dim, m->head_dim);
}

/* ---- lm_head ---- */

typedef struct lm_job {
    const lq_model *m;
    const lq_wmat *w;   /* m->lm_head, or the bounded head's q8 copy */
    lq_scratch *sc;
    const float *x;     /* [nl, n_embd] final-normed rows */
    float *const *out;  /* nl pointers to n_vocab floats */
    int nl;
} lm_job;

/* Vocabulary tiles of LQ_LM_TILE rows: each tile is one kernel call over all nl rows into a
 * per-thread buffer, scattered to the callers' logits (which need not be contiguous: batched
 * decode writes one buffer per session). */
static void lm_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    const lm_job *j = ctx;
    const lq_model *m = j->m;
    const lq_wmat *w = j->w;
    float *buf = j->sc->lm_tile + (size_t)tid * LQ_MAX_BATCH * LQ_LM_TILE;
    for (int64_t tile = start; tile < end; tile++) {
        int64_t r0 = tile * LQ_LM_TILE;
        int64_t r1 = r0 + LQ_LM_TILE < w->rows ? r0 + LQ_LM_TILE : w->rows;
        int64_t n = r1 - r0;
        /* Sub-matrix view of rows [r0, r1): rows are contiguous in both layouts. */
        if (w->kind == LQ_WK_I2S) {
            lq_i2s_mat sub = w->i2s;
            sub.data += (size_t)r0 * (size_t)w->cols / 4;
            sub.rows = n;
            m->kern->i2s_f32(&sub, j->x, (size_t)m->n_embd, j->nl, buf, (size_t)n, 0, n);
        } else if (w->kind == LQ_WK_Q8) {
            lq_q8_mat sub = w->q8;
            sub.data += (size_t)r0 * (size_t)w->cols;
            sub.scale += r0;
            sub.rows = n;
            m->kern->q8_i16(&sub, j->sc->xq16, (size_t)m->n_embd, j->sc->xinv16, j->nl, buf,
                            (size_t)n, 0, n);
        } else {
            lq_dense_mat sub = w->dense;
            size_t es = sub.type == LQ_GGML_F32 ? 4 : 2;
            sub.data = (const uint8_t *)sub.data + (size_t)r0 * (size_t)w->cols * es;
            sub.rows = n;
            m->kern->dense(&sub, j->x, (size_t)m->n_embd, j->nl, buf, (size_t)n, 0, n);
        }
        for (int t = 0; t < j->nl; t++)
            memcpy(j->out[t] + r0, buf + (size_t)t * n, (size_t)n * sizeof(float));
    }
}

/* ---- the block ---- */

/* One layer's feed-forward on T rows of its normed input sc->h [T, n_embd] into sc->tmp
 * [T, n_embd] (before the residual add): gate/up, relu^2 or SiLU, sub-norm, down. sc->h is
 * clobbered. The local path of the forward pass and the server side of the remote FFN
 * (lq_forward_ffn) both run this, so a remote layer is the same arithmetic. */
static void ffn_block(const lq_model *m, lq_scratch *sc, const lq_layer *L, int T)
{
    const int D = m->n_embd, F = m->n_ff;
    {
        const lq_wmat *w[2] = {&L->gate, &L->up};
        float *y[2] = {sc->g, sc->u};
        project(m, sc, sc->h, D, T, 2, w, y);
    }
    size_t nf = (size_t)T * F;
    if (m->arch == LQ_ARCH_BITNET_B158) {
        /* restrict + a branch-free select so that the loop vectorises (NaN -> 0 as before) */
        float *restrict gp = sc->g;
        const float *restrict up = sc->u;
        for (size_t i = 0; i < nf; i++) {
            float a = gp[i];
            a = a > 0 ? a : 0.0f;
            gp[i] = a * a * up[i];
        }
    } else {
        for (size_t i = 0; i < nf; i++) {
            float g = sc->g[i];
            sc->g[i] = g / (1.0f + expf(-g)) * sc->u[i];
        }
    }
    const float *din = sc->g;
    if (L->ffn_sub_norm) {
        for (int t = 0; t < T; t++)
            rmsnorm(sc->g + (size_t)t * F, L->ffn_sub_norm, F, m->eps,
                    sc->h + (size_t)t * F);
        din = sc->h;
    }
    {
        const lq_wmat *w[1] = {&L->down};
        float *y[1] = {sc->tmp};
        project(m, sc, din, F, T, 1, w, y);
    }
}

static void forward_head(const lq_model *m, lq_scratch *sc, const float *x, int nl, float *const *lout,
                         lq_head_req *const *reqs);

static int forward(const lq_model *m, lq_scratch *sc, const int32_t *ids, const lq_fwd_row *rows,
                   int T, float *const *out, float *capture, lq_err *err)
{
    const int D = m->n_embd, QD = m->q_dim, KVD = m->kv_dim;
    float *x = sc->x; /* [T, D] */
    for (int t = 0; t < T; t++) {
        embed_row(m, ids[t], x + (size_t)t * D);
        if (rows[t].hook && rows[t].hook->on_token)
            rows[t].hook->on_token(rows[t].hook->ctx, rows[t].pos, ids[t]);
    }
    /* how attention splits the rows of this batch (the same for every layer) */
    att_job plan = {.m = m, .rows = rows, .T = T, .q = sc->q, .out = sc->att};
    int whole_tab[2 * LQ_MAX_BATCH + 1];
    if (att_plan(m, sc, rows, T, &plan) != LQ_OK)
        att_plan_whole(m, T, whole_tab, &plan);

    for (int l = 0; l < m->n_layer; l++) {
        const lq_layer *L = &m->layers[l];
        /* a front end's cancel (pg_infer: a statement_timeout, pg_cancel_backend) is heard
         * between layers; the rows' positions do not advance on an error */
        if (lq_cancel_poll())
            return lq_err_set(err, LQ_ECANCELED, "the forward pass was cancelled");

        /* attention */
        for (int t = 0; t < T; t++)
            rmsnorm(x + (size_t)t * D, L->attn_norm, D, m->eps, sc->h + (size_t)t * D);
        {
            const lq_wmat *w[3] = {&L->q, &L->k, &L->v};
            float *y[3] = {sc->q, sc->k, sc->v};
            project(m, sc, sc->h, D, T, 3, w, y);
        }
        for (int t = 0; t < T; t++) {
            const lq_kv_view *kv = rows[t].kv;
            const float *cs = kv->rope + (size_t)rows[t].pos * m->n_rot;
            rope_row(m, sc->q + (size_t)t * QD, m->n_head, cs);
            rope_row(m, sc->k + (size_t)t * KVD, m->n_head_kv, cs);
            /* K (after RoPE) and V go to the row's cache before attention, so that rows
             * of the same session in this batch see each other causally. */
            kv_store(m, kv, lq_kv_k(kv, l), rows[t].pos, sc->k + (size_t)t * KVD);
            kv_store(m, kv, lq_kv_v(kv, l), rows[t].pos, sc->v + (size_t)t * KVD);
        }
        att_job aj = plan;
        aj.layer = l;
        lq_pool_for_dyn(m->pool, (int64_t)aj.P * m->n_head_kv * (m->n_head / m->n_head_kv / aj.per),
                        1, att_fn, &aj);
        if (aj.part_ml) /* some row in several parts */
            lq_pool_for_dyn(m->pool, (int64_t)T * m->n_head, 4, att_merge_fn, &aj);
        const float *oin = sc->att;
        if (L->attn_sub_norm) {
            for (int t = 0; t < T; t++)
                rmsnorm(sc->att + (size_t)t * QD, L->attn_sub_norm, QD, m->eps,
                        sc->h + (size_t)t * QD);
            oin = sc->h;
        }
        {
            const lq_wmat *w[1] = {&L->o};
            float *y[1] = {sc->tmp};
            project(m, sc, oin, QD, T, 1, w, y);
        }
        for (size_t i = 0; i < (size_t)T * D; i++)
            x[i] += sc->tmp[i];
        if (capture && sc->capture_attn)
            memcpy(sc->capture_attn + (size_t)l * D, x + (size_t)(T - 1) * D, (size_t)D * sizeof(float));

        /* feed-forward */
        for (int t = 0; t < T; t++)
            rmsnorm(x + (size_t)t * D, L->ffn_norm, D, m->eps, sc->h + (size_t)t * D);
        if (m->ffn_remote) { /* --ffn URL: this layer's FFN on another process (ffn_remote.c) */
            int rc = lq_ffn_remote_layer(m->ffn_remote, l, sc->h, T, D, sc->tmp, err);
            if (rc)
                return rc;
        } else {
            ffn_block(m, sc, L, T);
        }
        for (size_t i = 0; i < (size_t)T * D; i++)
            x[i] += sc->tmp[i];
        for (int t = 0; t < T; t++)
            if (rows[t].hook && rows[t].hook->after_layer)
                rows[t].hook->after_layer(rows[t].hook->ctx, l, rows[t].pos, out && out[t],
                                          x + (size_t)t * D, D);
        if (capture) /* residual capture for the vindex walk (read only) */
            memcpy(capture + (size_t)l * D, x + (size_t)(T - 1) * D, (size_t)D * sizeof(float));
    }

    if (!out)
        return LQ_OK;
    /* Only the rows that want logits, gathered contiguously for the head. */
    float *lout[LQ_MAX_BATCH];
    lq_head_req *lreq[LQ_MAX_BATCH];
    int nl = 0;
    for (int t = 0; t < T; t++) {
        if (!out[t])
            continue;
        if (nl != t) /* x rows are free after the last layer */
            memmove(x + (size_t)nl * D, x + (size_t)t * D, (size_t)D * sizeof(float));
        lreq[nl] = rows[t].head && rows[t].head->logits == out[t] ? rows[t].head : NULL;
        lout[nl++] = out[t];
    }
    if (nl)
        forward_head(m, sc, x, nl, lout, lreq);
    for (int t = 0; t < T; t++)
        if (out[t] && rows[t].hook && rows[t].hook->on_logits)
            rows[t].hook->on_logits(rows[t].hook->ctx, rows[t].pos, out[t], m->n_vocab);
    return LQ_OK;
}

/* ---- the bounded head ----
 *
 * Rows whose logits carry a request (lq_head_req) are scored first on the int8 copy
 * (m->lmb, one pass over 1/2 the bytes of f16 for every row of the batch), with int16
 * activations. For row r, a_r = w~_r . x~ (computed exactly as an integer dot, then three
 * float roundings), and the exact head's logit e_r (an f32 dot of D terms, in any order)
 * satisfy |e_r - a_r| <= R_r with
 *   R_r = err_r ||x|| + norm_r (||x - x~|| + c (||x|| + ||x - x~||))
 * where c = gamma_D + 4u covers the exact dot's rounding (<= gamma_D ||w|| ||x||,
 * gamma_D = D u / (1 - D u), u = 2^-24) and the approximate score's (<= 3u |w~ . x~|).
 * R_r is evaluated in float and scaled by 1 + 2^-20 to stay above its real value (plus 1e-30
 * for underflowing products). Then with
 * tau the k-th largest lower bound a_r - R_r, every row outside S = {r : a_r + R_r >= tau -
 * window} is strictly below k rows of S, so the top k are in S; S is computed exactly with the
 * dense kernel (one row at a time: its per-row result does not depend on the tile shape, so
 * the values are bit-identical to the full head's), and the rest get their upper bound. */

static void head_norms(const float *x, const int16_t *q, float inv, int D, float *X, float *Y)
{
    double xx = 0, dd = 0;
    for (int i = 0; i < D; i++) {
        double d = (double)x[i] - (double)inv * (double)q[i];
        xx += (double)x[i] * x[i];
        dd += d * d;
    }
    const double f = 1.0 + 1e-12, u = 0x1p-24;
    double nx = sqrt(xx) * f, nd = sqrt(dd) * f;
    double c = ((D + 8) * u) / (1.0 - (D + 8) * u) + 4 * u;
    double y = (nd + c * (nx + nd)) * f;
    *X = (float)nx < nx ? nextafterf((float)nx, INFINITY) : (float)nx;
    *Y = (float)y < y ? nextafterf((float)y, INFINITY) : (float)y;
}

static inline float head_radius(const lq_lm_bound *b, int64_t r, float X, float Y)
{
    /* + 1e-30: the absolute error of products that underflow (at most D * 2^-150 in each dot,
     * tiny activations or scales), which the relative terms do not cover */
    float R = (b->err[r] * X + b->norm[r] * Y) * (1.0f + 0x1p-20f) + 1e-30f;
    return R <= 3.0e38f ? R : INFINITY; /* NaN (inf * 0) and overflow: no bound */
}

/* k-th largest of the lower bounds (k <= LQ_HEAD_MAX_K): a min-heap of the k best. */
static float head_tau(const lq_lm_bound *b, const float *a, int64_t n, int k, float X, float Y,
                      float *heap)
{
    int m = 0;
    for (int64_t r = 0; r < n; r++) {
        float R = head_radius(b, r, X, Y);
        float lo = isfinite(a[r]) && R < INFINITY ? a[r] - R : -INFINITY;
        if (m < k) {
            int i = m++;
            while (i > 0 && heap[(i - 1) / 2] > lo) {
                heap[i] = heap[(i - 1) / 2];
                i = (i - 1) / 2;
            }
            heap[i] = lo;
        } else if (lo > heap[0]) {
            int i = 0;
            for (;;) {
                int l = 2 * i + 1, rr = l + 1, s = i;
                float sv = lo;
                if (l < k && heap[l] < sv) {
                    s = l;
                    sv = heap[l];
                }
                if (rr < k && heap[rr] < sv)
                    s = rr;
                if (s == i)
                    break;
                heap[i] = heap[s];
                i = s;
            }
            heap[i] = lo;
        }
    }
    return m < k ? -INFINITY : heap[0];
}

typedef struct bh_job {
    const lq_model *m;
    lq_scratch *sc;
    const float *x;        /* [nl, D] normed rows */
    float *const *out;
    lq_head_req *const *req;
    int nl;
    float X[LQ_MAX_BATCH], Y[LQ_MAX_BATCH];
    int full[LQ_MAX_BATCH];
    int64_t off[LQ_MAX_BATCH + 1]; /* rescoring items: row t's are [off[t], off[t+1]) */
} bh_job;

/* Per row: the bound, tau, the exact set S (ids and bits), upper bounds in place. */
static void bh_select_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    bh_job *j = ctx;
    const lq_model *m = j->m;
    const lq_lm_bound *b = &m->lmb;
    const int64_t n = m->lm_head.rows;
    const int D = m->n_embd;
    /* the heap of the k best lower bounds lives in this thread's lm tile buffer (LQ_MAX_BATCH
     * * LQ_LM_TILE = 4096 >= LQ_HEAD_MAX_K floats) */
    float *heap = j->sc->lm_tile + (size_t)tid * LQ_MAX_BATCH * LQ_LM_TILE;
    for (int64_t t = start; t < end; t++) {
        lq_head_req *h = j->req[t];
        float *a = j->out[t];
        head_norms(j->x + (size_t)t * D, j->sc->xq16 + (size_t)t * D, j->sc->xinv16[t], D,
                   &j->X[t], &j->Y[t]);
        float X = j->X[t], Y = j->Y[t];
        j->full[t] = 1;
        h->n_ids = 0;
        if (!isfinite(X) || !isfinite(Y) || h->k < 1 || h->k > LQ_HEAD_MAX_K || !(h->window >= 0))
            continue;
        float tau = head_tau(b, a, n, h->k, X, Y, heap);
        float thr = tau - h->window;
        memset(h->exact, 0, ((size_t)n + 31) / 32 * sizeof(uint32_t));
        int cnt = 0, over = 0;
        for (int64_t r = 0; r < n; r++) {
            float R = head_radius(b, r, X, Y);
            float hi = isfinite(a[r]) && R < INFINITY ? a[r] + R : INFINITY;
            a[r] = hi;
            if (hi >= thr || !(thr == thr)) {
                if (cnt < h->cap)
                    h->ids[cnt] = (int32_t)r;
                else
                    over = 1;
                cnt++;
                h->exact[r >> 5] |= 1u << (r & 31);
            }
        }
        if (over)
            continue;
        h->n_ids = cnt;
        j->full[t] = 0;
    }
}

/* Rescoring items over every bounded row's exact set, in one pool loop. */
static void bh_rescore_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    (void)tid;
    const bh_job *j = ctx;
    const lq_model *m = j->m;
    int t = 0;
    for (int64_t it = start; it < end; it++) {
        while (it >= j->off[t + 1])
            t++;
        int32_t r = j->req[t]->ids[it - j->off[t]];
        m->kern->dense(&m->lm_head.dense, j->x + (size_t)t * m->n_embd, (size_t)m->n_embd, 1,
                       j->out[t], 0, r, r + 1);
    }
}

static void head_exact(const lq_model *m, lq_scratch *sc, const float *h, int nl, float *const *lout)
{
    if (m->lm_head.kind == LQ_WK_Q8) /* int16 activations, once per row for every tile */
        for (int t = 0; t < nl; t++)
            lq_quant_i16(h + (size_t)t * m->n_embd, m->n_embd, sc->xq16 + (size_t)t * m->n_embd,
                         &sc->xinv16[t]);
    lm_job lj = {m, &m->lm_head, sc, h, lout, nl};
    int64_t ntiles = (m->lm_head.rows + LQ_LM_TILE - 1) / LQ_LM_TILE;
    lq_pool_for_dyn(m->pool, ntiles, 1, lm_fn, &lj);
}

static void head_count(const lq_model *m, uint64_t tokens, uint64_t exact, uint64_t full)
{
    lq_lm_bound *b = (lq_lm_bound *)&m->lmb; /* counters only (atomic) */
    __atomic_fetch_add(&b->n_tokens, tokens, __ATOMIC_RELAXED);
    __atomic_fetch_add(&b->n_exact, exact, __ATOMIC_RELAXED);
    __atomic_fetch_add(&b->n_full, full, __ATOMIC_RELAXED);
}

static void forward_head(const lq_model *m, lq_scratch *sc, const float *x, int nl, float *const *lout,
                         lq_head_req *const *reqs)
{
    const int D = m->n_embd;
    for (int t = 0; t < nl; t++)
        rmsnorm(x + (size_t)t * D, m->output_norm, D, m->eps, sc->h + (size_t)t * D);
    /* Bounded only when every row of the pass asks for it: a row that wants the exact head
     * reads all of it anyway, and the other rows then share that read. */
    int bounded = lq_lmb_ready(&m->lmb) && reqs != NULL;
    int nreq = 0;
    for (int t = 0; t < nl; t++) {
        lq_head_req *h = reqs ? reqs[t] : NULL;
        if (h) {
            memcpy(h->x, sc->h + (size_t)t * D, (size_t)D * sizeof(float));
            h->valid = 1;
            h->full = 1;
            h->n_ids = 0;
            nreq++;
        } else {
            bounded = 0;
        }
    }
    if (!bounded) {
        head_exact(m, sc, sc->h, nl, lout);
        if (nreq && lq_lmb_ready(&m->lmb))
            head_count(m, (uint64_t)nreq, (uint64_t)nreq * (uint64_t)m->lm_head.rows, (uint64_t)nreq);
        return;
    }
    /* 1. the copy: approximate scores of every row into the logits buffers */
    for (int t = 0; t < nl; t++)
        lq_quant_i16(sc->h + (size_t)t * D, D, sc->xq16 + (size_t)t * D, &sc->xinv16[t]);
    lq_wmat wq = m->lm_head;
    wq.kind = LQ_WK_Q8;
    wq.q8 = m->lmb.q8;
    lm_job lj = {m, &wq, sc, sc->h, lout, nl};
    int64_t ntiles = (wq.rows + LQ_LM_TILE - 1) / LQ_LM_TILE;
    lq_pool_for_dyn(m->pool, ntiles, 1, lm_fn, &lj);
    /* 2. bounds and the exact sets */
    bh_job bj = {.m = m, .sc = sc, .x = sc->h, .out = lout, .req = reqs, .nl = nl};
    lq_pool_for_dyn(m->pool, nl, 1, bh_select_fn, &bj);
    /* 3. the exact rows */
    bj.off[0] = 0;
    int nfull = 0;
    uint64_t nexact = 0;
    for (int t = 0; t < nl; t++) {
        bj.off[t + 1] = bj.off[t] + (bj.full[t] ? 0 : reqs[t]->n_ids);
        nfull += bj.full[t];
        reqs[t]->full = bj.full[t];
        nexact += bj.full[t] ? (uint64_t)m->lm_head.rows : (uint64_t)reqs[t]->n_ids;
    }
    if (bj.off[nl])
        lq_pool_for_dyn(m->pool, bj.off[nl], 16, bh_rescore_fn, &bj);
    /* 4. rows without a usable bound (non-finite activations, an exact set past its cap):
     * the whole head, their rows gathered to the front of h (the others are done with it) */
    if (nfull) {
        float *fl[LQ_MAX_BATCH];
        int nf = 0;
        for (int t = 0; t < nl; t++)
            if (bj.full[t]) {
                if (nf != t)
                    memmove(sc->h + (size_t)nf * D, sc->h + (size_t)t * D, (size_t)D * sizeof(float));
                fl[nf++] = lout[t];
            }
        head_exact(m, sc, sc->h, nf, fl);
    }
    head_count(m, (uint64_t)nl, nexact, (uint64_t)nfull);
}

typedef struct rs_job {
    const lq_model *m;
    const lq_head_req *h;
    const int32_t *ids; /* NULL: every row, items are row ranges of 64 */
    float *logits;
} rs_job;

static void rs_fn(void *ctx, int64_t start, int64_t end, int tid)
{
    (void)tid;
    const rs_job *j = ctx;
    const lq_model *m = j->m;
    if (!j->ids) {
        int64_t r0 = start * LQ_LM_TILE, r1 = end * LQ_LM_TILE;
        if (r1 > m->lm_head.rows)
            r1 = m->lm_head.rows;
        m->kern->dense(&m->lm_head.dense, j->h->x, (size_t)m->n_embd, 1, j->logits, 0, r0, r1);
        return;
    }
    for (int64_t i = start; i < end; i++)
        m->kern->dense(&m->lm_head.dense, j->h->x, (size_t)m->n_embd, 1, j->logits, 0, j->ids[i],
                       j->ids[i] + 1);
}

void lq_head_rescore(const lq_model *m, lq_head_req *h, const int32_t *ids, int n, float *logits)
{
    if (!h->valid || h->full || m->lm_head.kind != LQ_WK_DENSE || n == 0)
        return;
    int held = lq_model_weights_enter(m);
    rs_job j = {m, h, n < 0 ? NULL : ids, logits};
    if (n < 0) {
        lq_pool_for_dyn(m->pool, (m->lm_head.rows + LQ_LM_TILE - 1) / LQ_LM_TILE, 1, rs_fn, &j);
        h->full = 1;
    } else {
        lq_pool_for_dyn(m->pool, n, 16, rs_fn, &j);
        for (int i = 0; i < n; i++)
            h->exact[ids[i] >> 5] |= 1u << (ids[i] & 31);
    }
    lq_model_weights_leave(m, held);
}

/* The entry points hold the model's weights (lq_model_weights_enter): a background copy
 * into 2 MB pages moves the weight pointers only between forward passes. */
int lq_forward(const lq_model *m, lq_scratch *sc, const int32_t *ids, const lq_fwd_row *rows,
               int T, float *const *out, float *capture, lq_err *err)
{
    int held = lq_model_weights_enter(m);
    int rc = forward(m, sc, ids, rows, T, out, capture, err);
    lq_model_weights_leave(m, held);
    return rc;
}

void lq_forward_ffn(const lq_model *m, lq_scratch *sc, int layer, const float *x, int T, float *out)
{
    size_t n = (size_t)T * (size_t)m->n_embd;
    int held = lq_model_weights_enter(m);
    memcpy(sc->h, x, n * sizeof(float));
    ffn_block(m, sc, &m->layers[layer], T);
    memcpy(out, sc->tmp, n * sizeof(float));
    lq_model_weights_leave(m, held);
}

void lq_forward_embed_row(const lq_model *m, int32_t id, float *out)
{
    int held = lq_model_weights_enter(m);
    embed_row(m, id, out);
    lq_model_weights_leave(m, held);
}

void lq_forward_head(const lq_model *m, lq_scratch *sc, const float *x, int nl, float *const *lout)
{
    int held = lq_model_weights_enter(m);
    forward_head(m, sc, x, nl, lout, NULL);
    lq_model_weights_leave(m, held);
}

void lq_forward_head_req(const lq_model *m, lq_scratch *sc, const float *x, int nl,
                         float *const *lout, lq_head_req *const *reqs)
{
    int held = lq_model_weights_enter(m);
    forward_head(m, sc, x, nl, lout, reqs);
    lq_model_weights_leave(m, held);
}
