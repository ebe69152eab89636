/* Reference kernels: plain C, exact definitions, no cleverness. Every SIMD kernel set is
 * tested against these (bit for bit on the int8 path, within float tolerance on f32 paths). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

/* x[n] f32 -> q[n] int8, *inv_scale = 1/s, *sum = Σq. NaN inputs do not take part in amax. */
static void quant_i8_scalar(const float *x, int64_t n, int8_t *q, float *inv_scale, int32_t *sum)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax)
            amax = a;
    }
    float s = lq_quant_scale(amax);
    int32_t acc = 0;
    for (int64_t i = 0; i < n; i++) {
        q[i] = lq_quant_one(x[i], s);
        acc += q[i];
    }
    *inv_scale = 1.0f / s;
    *sum = acc;
}

/* Exact int32 dot of one I2_S row (cols/4 bytes) with q[cols]. |dot| <= 128*cols, which
 * fits int32 for any cols < 2^24. */
static int32_t i2s_row_dot_i8(const uint8_t *row, int64_t cols, const int8_t *q)
{
    int32_t dot = 0;
    for (int64_t b = 0; b < cols / 128; b++) {
        const uint8_t *blk = row + b * 32;       /* 32 bytes = 128 codes */
        const int8_t *qb = q + b * 128;          /* the block's 128 activations */
        for (int i = 0; i < 32; i++) {
            unsigned byte = blk[i];
            for (int k = 0; k < 4; k++) /* element k*32+i sits at shift 6-2k */
                dot += lq_i2s_trit((byte >> (6 - 2 * k)) & 3) * qb[k * 32 + i];
        }
    }
    return dot;
}

static void i2s_i8_scalar(const lq_i2s_mat *w, const int8_t *xq, size_t ldx,
                          const float *inv_scale, const int32_t *xsum, int T, float *y,
                          size_t ldy, int64_t r0, int64_t r1)
{
    (void)xsum; /* the reference computes Σ trit*q directly */
    const int64_t rb = w->cols / 4; /* bytes per row */
    for (int t = 0; t < T; t++)
        for (int64_t r = r0; r < r1; r++) {
            int32_t dot = i2s_row_dot_i8(w->data + r * rb, w->cols, xq + (size_t)t * ldx);
            y[(size_t)t * ldy + r] = lq_i2s_i8_out(dot, inv_scale[t], w->scale);
        }
}

/* f32 activations: one f32 accumulator in column order, then * scale. */
static void i2s_f32_scalar(const lq_i2s_mat *w, const float *x, size_t ldx, int T, float *y,
                           size_t ldy, int64_t r0, int64_t r1)
{
    const int64_t rb = w->cols / 4;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = w->data + r * rb;
            float acc = 0.0f;
            for (int64_t c = 0; c < w->cols; c++) {
                int64_t b = c / 128, j = c % 128;
                int tr = lq_i2s_trit((row[b * 32 + j % 32] >> (6 - 2 * (j / 32))) & 3);
                if (tr > 0)
                    acc += xt[c];
                else if (tr < 0)
                    acc -= xt[c];
            }
            y[(size_t)t * ldy + r] = acc * w->scale;
        }
    }
}

static inline float dense_elem(const void *data, int type, int64_t i)
{
    switch (type) {
    case LQ_GGML_F16: return lq_f16_to_f32(((const uint16_t *)data)[i]);
    case LQ_GGML_BF16: return lq_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

/* Unknown types write nothing: callers (the model loader) only build lq_dense_mat for
 * F32/F16/BF16, and a kernel cannot report an error. */
static void dense_scalar(const lq_dense_mat *w, const float *x, size_t ldx, int T, float *y,
                         size_t ldy, int64_t r0, int64_t r1)
{
    if (w->type != LQ_GGML_F32 && w->type != LQ_GGML_F16 && w->type != LQ_GGML_BF16)
        return;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * ldx;
        for (int64_t r = r0; r < r1; r++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < w->cols; c++)
                acc += dense_elem(w->data, w->type, r * w->cols + c) * xt[c];
            y[(size_t)t * ldy + r] = acc;
        }
    }
}

void lq_quant_i16(const float *x, int64_t n, int16_t *q, float *inv_scale)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) /* NaN never wins */
            amax = a;
    }
    float s = amax > 0 ? 32767.0f / amax : 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float r = nearbyintf(x[i] * s);
        q[i] = (int16_t)(r > 32767.0f ? 32767.0f : (r < -32767.0f || r != r) ? -32767.0f : r);
    }
    *inv_scale = 1.0f / s;
}

static void q8_i16_scalar(const lq_q8_mat *w, const int16_t *xq, size_t ldx, const float *inv_scale,
                          int T, float *y, size_t ldy, int64_t r0, int64_t r1)
{
    for (int t = 0; t < T; t++) {
        const int16_t *xt = xq + (size_t)t * ldx;
        for (int64_t r = r0; r < r1; r++) {
            const int8_t *row = w->data + (size_t)r * (size_t)w->cols;
            int64_t acc = 0;
            for (int64_t c = 0; c < w->cols; c++)
                acc += (int32_t)row[c] * xt[c];
            y[(size_t)t * ldy + r] = lq_q8_out(acc, inv_scale[t], w->scale[r]);
        }
    }
}

/* f16 -> f32 for every half value, built once (the loader quantises 300M+ weights). */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;
static void f16_table_init(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        f16_table[h] = lq_f16_to_f32((uint16_t)h);
}

/* Round half to even for |v| < 2^22 without a libm call: adding 1.5 * 2^23 leaves no
 * fraction bits, so the addition itself rounds (default rounding mode), as nearbyintf does. */
static inline float round_even_small(float v)
{
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

int lq_q8_bound_scalar(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                       int64_t r1)
{
    if (w->type != LQ_GGML_F32 && w->type != LQ_GGML_F16 && w->type != LQ_GGML_BF16)
        return -1;
    float *row = malloc((size_t)w->cols * sizeof(float));
    if (!row)
        return -2;
    if (w->type == LQ_GGML_F16)
        pthread_once(&f16_once, f16_table_init);
    const double slack = lq_q8_bound_slack(w->cols);
    for (int64_t r = r0; r < r1; r++) {
        const size_t base = (size_t)r * (size_t)w->cols;
        if (w->type == LQ_GGML_F16)
            for (int64_t c = 0; c < w->cols; c++)
                row[c] = f16_table[((const uint16_t *)w->data)[base + (size_t)c]];
        else
            for (int64_t c = 0; c < w->cols; c++)
                row[c] = dense_elem(w->data, w->type, (int64_t)base + c);
        float amax = 0.0f;
        for (int64_t c = 0; c < w->cols; c++) {
            float a = fabsf(row[c]);
            if (a > amax) /* NaN never wins */
                amax = a;
        }
        float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        int8_t *qr = q + base;
        for (int64_t c = 0; c < w->cols; c++) {
            float v = row[c] * id; /* |v| <= 127 (+ rounding), or NaN/inf for bad input */
            v = v == v && fabsf(v) < 128.0f ? round_even_small(v) : (v > 0 ? 127.0f : -127.0f);
            qr[c] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
        scale[r] = d;
        if (!err)
            continue;
        /* w and scale * q are exact in double (f16/bf16/f32 values; a float times an int8) */
        double e2 = 0, w2 = 0, q2 = 0, sc = d;
        int bad = !isfinite(d);
        for (int64_t c = 0; c < w->cols; c++) {
            double x = row[c], xq = sc * qr[c];
            bad |= !isfinite(x);
            e2 += (x - xq) * (x - xq);
            w2 += x * x;
            q2 += xq * xq;
        }
        err[r] = bad ? INFINITY : lq_up_float(sqrt(e2) * slack);
        norm[r] = bad ? INFINITY : lq_up_float(sqrt(w2 > q2 ? w2 : q2) * slack);
    }
    free(row);
    return 0;
}

int lq_q8_quantize_rows(const lq_dense_mat *w, int8_t *q, float *scale, int64_t r0, int64_t r1)
{
    return lq_q8_bound_scalar(w, q, scale, NULL, NULL, r0, r1);
}

/* Online softmax over blocks of LQ_ATT_BLOCK positions (running max, rescaled sum and
 * accumulator), so that no per-context buffer is needed. */
void lq_attn_scalar(const float *q, const void *k, const void *v, size_t ld, int kv_type, int npos,
                    int hd, float scale, float *out, float *ml)
{
    float acc[LQ_ATT_MAX_HD];
    float s[LQ_ATT_BLOCK];
    float mx = -INFINITY, sum = 0;
    for (int i = 0; i < hd; i++)
        acc[i] = 0;
    for (int p0 = 0; p0 < npos; p0 += LQ_ATT_BLOCK) {
        int nb = npos - p0 < LQ_ATT_BLOCK ? npos - p0 : LQ_ATT_BLOCK;
        float bm = -INFINITY;
        for (int b = 0; b < nb; b++) {
            const uint8_t *kr = (const uint8_t *)k + (size_t)(p0 + b) * ld;
            float d = 0;
            for (int i = 0; i < hd; i++)
                d += q[i] * lq_kv_elem(kr, kv_type, hd, i);
            s[b] = d * scale;
            if (s[b] > bm)
                bm = s[b];
        }
        if (bm > mx) {
            float r = expf(mx - bm); /* 0 on the first block (mx = -inf) */
            sum *= r;
            for (int i = 0; i < hd; i++)
                acc[i] *= r;
            mx = bm;
        }
        for (int b = 0; b < nb; b++) {
            const uint8_t *vr = (const uint8_t *)v + (size_t)(p0 + b) * ld;
            float e = expf(s[b] - mx);
            sum += e;
            for (int i = 0; i < hd; i++)
                acc[i] += e * lq_kv_elem(vr, kv_type, hd, i);
        }
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < hd; i++)
        out[i] = acc[i] * inv;
    if (ml) {
        ml[0] = mx;
        ml[1] = sum;
    }
}

void lq_kv_store_head(int kv_type, void *dst, const float *x, int hd)
{
    if (kv_type == LQ_KVT_F16) {
        uint16_t *d = dst;
        for (int i = 0; i < hd; i++)
            d[i] = lq_f32_to_f16(x[i]);
    } else if (kv_type == LQ_KVT_Q8) {
        int8_t *q = dst;
        for (int b = 0; b < hd / LQ_KV_Q8_BLOCK; b++) {
            const float *xb = x + b * LQ_KV_Q8_BLOCK;
            float amax = 0;
            for (int i = 0; i < LQ_KV_Q8_BLOCK; i++)
                amax = fmaxf(amax, fabsf(xb[i]));
            float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
            for (int i = 0; i < LQ_KV_Q8_BLOCK; i++) {
                float r = rintf(xb[i] * inv); /* |r| <= 127 (NaN from a non-finite input: 0, and the
                                                 scale keeps the inf or NaN) */
                r = r == r ? r : 0.0f;
                q[b * LQ_KV_Q8_BLOCK + i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
            }
            memcpy((uint8_t *)dst + hd + 4 * b, &s, sizeof s);
        }
    } else {
        memcpy(dst, x, (size_t)hd * sizeof(float));
    }
}

/* The reference walks the cache once per head. */
void lq_attn_group_scalar(const float *q, size_t ldq, int nq, const void *k, const void *v,
                          size_t ld, int kv_type, int npos, int hd, float scale, float *out,
                          size_t ldo, float *ml)
{
    for (int g = 0; g < nq; g++)
        lq_attn_scalar(q + (size_t)g * ldq, k, v, ld, kv_type, npos, hd, scale,
                       out + (size_t)g * ldo, ml ? ml + 2 * g : NULL);
}

const lq_kernels lq_kernels_scalar = {
    .name = "scalar",
    .quant_i8 = quant_i8_scalar,
    .i2s_i8 = i2s_i8_scalar,
    .i2s_f32 = i2s_f32_scalar,
    .tq_i8 = lq_tq_i8_scalar,
    .dense = dense_scalar,
    .q8_i16 = q8_i16_scalar,
    .attn = lq_attn_group_scalar,
    .gate_scores = lq_gate_scores_scalar,
    .sketch_row = lq_sketch_row_scalar,
    .sketch_scores = lq_sketch_scores_scalar,
    .dm_block = NULL, /* lq_dm_block_scalar is the reference, slower than the exact f32 scan */
    .read_sum = lq_read_sum_scalar,
    .mac_peak = NULL,
    .q8_bound = lq_q8_bound_scalar,
};
