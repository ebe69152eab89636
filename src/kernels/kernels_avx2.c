/* AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c -mbmi2; selected only when
 * cpuid says so).
 *
 * int8 x ternary (i2s_i8), the unsigned-code trick: one 32-byte load of an I2_S block gives
 * four vectors of 32 codes ((v>>6)&3 = elements 0..31, (v>>4)&3 = 32..63, (v>>2)&3 =
 * 64..95, v&3 = 96..127), each against 32 contiguous activations with maddubs (u8 code x s8
 * q, pairs summed to int16: |pair| <= 2*2*128 = 512, the four of a block <= 2048, no
 * saturation), widened with madd(ones) to int32. Σ code*q - Σ q = Σ (code-1)*q = Σ trit*q,
 * exact, so the result is bit-identical to the scalar reference (same final float
 * expression, lq_i2s_i8_out). Assumes code 3 never occurs (see kernels_internal.h).
 *
 * Tiles: up to 4 rows x 2 tokens per pass (16 ymm registers), so one load of a weight
 * block serves 2 tokens and one activation load serves 4 rows; rows are the outer loop so
 * each weight byte comes from memory once per call and from L1 for the other token pairs. */
#include <immintrin.h>
#include <string.h>

#include "core/f16.h"
#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

#define AI static inline __attribute__((always_inline))

AI float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- quant_i8 ------------------------------------------------------------------------ */

static void quant_i8_avx2(const float *x, int64_t n, int8_t *q, float *inv_scale, int32_t *sum)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) /* max_ps(a, m) returns m when a is NaN: NaN is ignored */
        vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absmask), vmax);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax)
            amax = a;
    }
    const float s = lq_quant_scale(amax);
    const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i vsum = _mm256_setzero_si256();
    i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i qi[4];
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vs);
            v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm256_min_ps(_mm256_max_ps(v, lo), hi); /* NaN -> -128 like the reference */
            qi[k] = _mm256_cvtps_epi32(v);
            vsum = _mm256_add_epi32(vsum, qi[k]);
        }
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(p, perm));
    }
    int32_t acc = lq_hsum_epi32_avx2(vsum);
    for (; i < n; i++) {
        q[i] = lq_quant_one(x[i], s);
        acc += q[i];
    }
    *inv_scale = 1.0f / s;
    *sum = acc;
}

/* ---- i2s_i8 -------------------------------------------------------------------------- */

/* dots[r][t] = Σ code(r,c) * x[t][c] over nblk 128-element blocks, R <= 4 rows, TT <= 2. */
AI void i2s_tile_avx2(const uint8_t *w, size_t rb, const int8_t *x, size_t ldx, int64_t nblk,
                      int R, int TT, const uint8_t *pf, int32_t dots[4][2])
{
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256i acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < TT; t++)
            acc[r][t] = _mm256_setzero_si256();
    for (int64_t b = 0; b < nblk; b++) {
        /* this block's share (R*32 bytes) of the group LQ_I2S_PF_BYTES ahead, into L1 for
         * every T: this kernel is compute bound from T=2 (no VNNI), and the L2 hint of the
         * AVX-512 tiles measured no gain here (engine B=2 1.54/1.58x -> 1.50/1.51x) */
        LQ_I2S_PREFETCH(pf + b * R * 32, R, 0);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + r * rb + b * 32));
            __m256i c0 = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
            __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3);
            __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
            __m256i c3 = _mm256_and_si256(v, m3);
#pragma GCC unroll 2
            for (int t = 0; t < TT; t++) {
                const int8_t *xp = x + (size_t)t * ldx + b * 128;
                __m256i s = _mm256_maddubs_epi16(c0, _mm256_loadu_si256((const __m256i *)xp));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(c1, _mm256_loadu_si256((const __m256i *)(xp + 32))));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(c2, _mm256_loadu_si256((const __m256i *)(xp + 64))));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(c3, _mm256_loadu_si256((const __m256i *)(xp + 96))));
                acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(s, ones));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < TT; t++)
            dots[r][t] = lq_hsum_epi32_avx2(acc[r][t]);
}

static void i2s_i8_avx2(const lq_i2s_mat *w, const int8_t *xq, size_t ldx,
                        const float *inv_scale, const int32_t *xsum, int T, float *y,
                        size_t ldy, int64_t r0, int64_t r1)
{
    const size_t rb = (size_t)(w->cols / 4);
    const int64_t nblk = w->cols / 128;
    const int rstep = T == 1 ? lq_i2s_decode_rows() : 4; /* see kernels_avx512.c */
    for (int64_t r = r0; r < r1; r += rstep) {
        const int R = r1 - r < rstep ? (int)(r1 - r) : rstep;
        const uint8_t *wr = w->data + (size_t)r * rb;
        for (int t = 0; t < T; t += 2) {
            const int TT = T - t < 2 ? T - t : 2;
            int32_t dots[4][2];
            const int8_t *xt = xq + (size_t)t * ldx;
            /* software prefetch of the group LQ_I2S_PF_BYTES ahead: see kernels_avx512.c */
            const uint8_t *pf = wr + LQ_I2S_PF_BYTES;
            switch (R * 2 + TT) { /* constant tile shapes, fully unrolled */
            case 3: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 1, 1, pf, dots); break;
            case 4: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 1, 2, pf, dots); break;
            case 5: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 2, 1, pf, dots); break;
            case 6: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 2, 2, pf, dots); break;
            case 7: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 3, 1, pf, dots); break;
            case 8: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 3, 2, pf, dots); break;
            case 9: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 4, 1, pf, dots); break;
            default: i2s_tile_avx2(wr, rb, xt, ldx, nblk, 4, 2, pf, dots); break;
            }
            for (int rr = 0; rr < R; rr++)
                for (int tt = 0; tt < TT; tt++)
                    y[(size_t)(t + tt) * ldy + r + rr] =
                        lq_i2s_i8_out(dots[rr][tt] - xsum[t + tt], inv_scale[t + tt], w->scale);
        }
    }
}

/* ---- i2s_f32 ------------------------------------------------------------------------- */

/* 8 codes (bytes) -> 8 floats code-1 (trits; code 3 assumed absent). */
AI __m256 trits8(__m128i codes8)
{
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(codes8), _mm256_set1_epi32(1)));
}

/* One row, TT <= 4 tokens: trits decoded once per block and shared by the tokens. */
AI void i2s_f32_tile_avx2(const uint8_t *row, const float *x, size_t ldx, int64_t nblk, int TT,
                          float out[4])
{
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nblk; b++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(row + b * 32));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 6 - 2 * k), m3); /* 32 codes */
            __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
            __m256 w8[4] = {trits8(lo), trits8(_mm_srli_si128(lo, 8)), trits8(hi),
                            trits8(_mm_srli_si128(hi, 8))};
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                const float *xp = x + (size_t)t * ldx + b * 128 + k * 32;
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++)
                    acc[t] = _mm256_fmadd_ps(w8[g], _mm256_loadu_ps(xp + 8 * g), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
        out[t] = hsum_ps(acc[t]);
}

/* row loop, token groups of 4 (kernels_internal.h) */
LQ_I2S_F32_DRIVER(i2s_f32_avx2, i2s_f32_tile_avx2)

/* ---- dense --------------------------------------------------------------------------- */

AI __m256 load8(const void *w, int type, int64_t i)
{
    if (type == LQ_GGML_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    if (type == LQ_GGML_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i))), 16));
    return _mm256_loadu_ps((const float *)w + i);
}

AI float load1(const void *w, int type, int64_t i)
{
    if (type == LQ_GGML_F16)
        return lq_f16_to_f32(((const uint16_t *)w)[i]);
    if (type == LQ_GGML_BF16)
        return lq_bf16_to_f32(((const uint16_t *)w)[i]);
    return ((const float *)w)[i];
}

/* R <= 2 rows x TT <= 4 tokens (decode, batched decode, prefill): each (row, token) pair keeps one
 * accumulator over columns c, c+8, ..., so its sum does not depend on the tile's shape. Two
 * rows share every activation load and give 2-8 independent FMA chains (one row alone left
 * T=2 latency bound at ~1/4 of the FMA rate). The rows two tiles ahead (contiguous with these)
 * are prefetched into L2 at the rate this tile consumes its own, as in kernels_avx512.c. */
AI void dense_tile_avx2(const void *w, int type, int64_t base, int64_t cols, const float *x,
                        size_t ldx, int R, int TT, float out[2][4])
{
    const int es = type == LQ_GGML_F32 ? 4 : 2;
    const char *pf = (const char *)w + (size_t)(base + LQ_DENSE_PF_TILES * R * cols) * (size_t)es;
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            acc[r][t] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
        _mm_prefetch(pf + c * R * es, LQ_DENSE_PF_HINT);
        __m256 wv[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            wv[r] = load8(w, type, base + r * cols + c);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            const __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + c);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            float s = hsum_ps(acc[r][t]);
            for (int64_t cc = c; cc < cols; cc++)
                s += load1(w, type, base + r * cols + cc) * x[(size_t)t * ldx + cc];
            out[r][t] = s;
        }
}

#define DTILE(R, TT)                                                                       \
    case (R) * 8 + (TT):                                                                   \
        dense_tile_avx2(w->data, type, r * w->cols, w->cols, xt, ldx, R, TT, out);         \
        break

AI void dense_rows_avx2(const lq_dense_mat *w, int type, const float *x, size_t ldx, int T,
                        float *y, size_t ldy, int64_t r0, int64_t r1)
{
    /* one token too: a (row, token) pair's sum is then the same at every T, as the bounded
     * lm_head (rows rescored alone, checked against the batch) and batch-invariant decoding
     * need; two rows give the decode's DRAM stream enough independent FMA chains */
    for (int64_t r = r0; r < r1; r += 2) {
        const int R = r1 - r < 2 ? 1 : 2;
        for (int t = 0; t < T; t += 4) {
            const int TT = T - t < 4 ? T - t : 4;
            const float *xt = x + (size_t)t * ldx;
            float out[2][4];
            switch (R * 8 + TT) { /* constant tile shapes, fully unrolled */
                DTILE(1, 1); DTILE(1, 2); DTILE(1, 3); DTILE(1, 4);
                DTILE(2, 1); DTILE(2, 2); DTILE(2, 3);
            default: dense_tile_avx2(w->data, type, r * w->cols, w->cols, xt, ldx, 2, 4, out); break;
            }
            for (int rr = 0; rr < R; rr++)
                for (int tt = 0; tt < TT; tt++)
                    y[(size_t)(t + tt) * ldy + r + rr] = out[rr][tt];
        }
    }
}
#undef DTILE

static void dense_avx2(const lq_dense_mat *w, const float *x, size_t ldx, int T, float *y,
                       size_t ldy, int64_t r0, int64_t r1)
{
    switch (w->type) {
    case LQ_GGML_F32: dense_rows_avx2(w, LQ_GGML_F32, x, ldx, T, y, ldy, r0, r1); break;
    case LQ_GGML_F16: dense_rows_avx2(w, LQ_GGML_F16, x, ldx, T, y, ldy, r0, r1); break;
    case LQ_GGML_BF16: dense_rows_avx2(w, LQ_GGML_BF16, x, ldx, T, y, ldy, r0, r1); break;
    default: break; /* as the reference: unknown types write nothing */
    }
}

/* ---- q8_f32 (int8 per-row-scaled lm_head) ------------------------------------------ */

/* One row x TT <= 4 tokens: int8 -> int16, pmaddwd into int32 lanes (exact), flushed to
 * int64 every LQ_Q8_BLOCK columns; the columns past the last multiple of 16 in scalar. */
AI void q8_row_avx2(const int8_t *w, int64_t cols, const int16_t *x, size_t ldx, int TT, int64_t out[4])
{
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
        out[t] = 0;
    const int64_t cv = cols / 16 * 16;
    /* 8 lanes: half the AVX-512 block keeps a lane's sum below 2^30 */
    for (int64_t c0 = 0; c0 < cv; c0 += LQ_Q8_BLOCK / 2) {
        const int64_t c1 = cv - c0 < LQ_Q8_BLOCK / 2 ? cv : c0 + LQ_Q8_BLOCK / 2;
        __m256i acc[4];
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            acc[t] = _mm256_setzero_si256();
        for (int64_t c = c0; c < c1; c += 16) {
            __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + c)));
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++)
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(wv, _mm256_loadu_si256(
                                                      (const __m256i *)(x + (size_t)t * ldx + c))));
        }
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            /* lanes are exact int32, but their sum may not be: widen first */
            __m256i wide = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(acc[t])),
                                            _mm256_cvtepi32_epi64(_mm256_extracti128_si256(acc[t], 1)));
            __m128i h = _mm_add_epi64(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
            out[t] += _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
        for (int64_t c = cv; c < cols; c++)
            out[t] += (int32_t)w[c] * x[(size_t)t * ldx + c];
}

static void q8_i16_avx2(const lq_q8_mat *w, const int16_t *xq, size_t ldx, const float *inv_scale,
                        int T, float *y, size_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        const int8_t *wr = w->data + (size_t)r * (size_t)w->cols;
        for (int t = 0; t < T; t += 4) {
            const int TT = T - t < 4 ? T - t : 4;
            const int16_t *xt = xq + (size_t)t * ldx;
            int64_t out[4];
            switch (TT) {
            case 1: q8_row_avx2(wr, w->cols, xt, ldx, 1, out); break;
            case 2: q8_row_avx2(wr, w->cols, xt, ldx, 2, out); break;
            case 3: q8_row_avx2(wr, w->cols, xt, ldx, 3, out); break;
            default: q8_row_avx2(wr, w->cols, xt, ldx, 4, out); break;
            }
            for (int tt = 0; tt < TT; tt++)
                y[(size_t)(t + tt) * ldy + r] = lq_q8_out(out[tt], inv_scale[t + tt], w->scale[r]);
        }
    }
}

const lq_kernels lq_kernels_avx2 = {
    .name = "avx2",
    .quant_i8 = quant_i8_avx2,
    .i2s_i8 = i2s_i8_avx2,
    .i2s_f32 = i2s_f32_avx2,
    .tq_i8 = lq_tq_i8_avx2,
    .dense = dense_avx2,
    .q8_i16 = q8_i16_avx2,
    .attn = lq_attn_avx2,
    .gate_scores = lq_gate_scores_avx2,
    .sketch_row = lq_sketch_row_avx2,
    .sketch_scores = lq_sketch_scores_avx2,
    .dm_block = lq_dm_block_avx2,
    .read_sum = lq_read_sum_avx2,
    .mac_peak = NULL, /* vpmaddubsw + vpmaddwd: not the instruction any kernel here uses */
    .q8_bound = lq_q8_bound_avx2,
};
