/* AVX-512 F/BW/VL/DQ + VNNI kernels (selected only when cpuid and XCR0 allow ZMM state).
 *
 * int8 x ternary (i2s_i8): a 32-byte I2_S block (128 codes) is broadcast to both halves of
 * a zmm; one variable shift (6 in the low half, 4 in the high half) and a mask give the
 * codes of elements 0..63 in element order, a second (2 | 0) gives 64..127. Each is then
 * multiplied with 64 contiguous activations by vpdpbusd (u8 code x s8 q, four products summed
 * into int32 lanes, no saturation). Σ code*q - Σ q = Σ trit*q, exact; the final float is
 * lq_i2s_i8_out as in the reference, so outputs are bit-identical to it. Code 3 is assumed
 * absent (see kernels_internal.h).
 *
 * Decode (1-2 tokens per tile) uses a cheaper unpack, since there the unpack is not
 * amortised over tokens: no shifts at all, only masks. With the block broadcast to both
 * halves, mask [0xC0 | 0x30] leaves 64*code in the low half (elements 0..31) and 16*code in
 * the high half (32..63), mask [0x0C | 0x03] gives 4*code (64..95) and code (96..127). dpbusd
 * lanes never mix halves, so each half accumulates a known power-of-two multiple of its dot;
 * a per-lane arithmetic shift (exact: every term is a multiple) removes it before the final
 * sum. Bound: a lane gains <= 4*2*64*128 = 2^16 per block, so cols < 2^22 keeps int32 exact.
 *
 * Tiles of up to 4 rows x 4 tokens (16 accumulators + 8 activation registers + 2 code
 * registers + constants <= 32 zmm): per block, the activations of the 4 tokens are loaded
 * once and serve 4 rows; each row's codes are unpacked once and serve 4 tokens. Rows are
 * the outer loop, so weights stream from memory once per call (prefill re-reads them from
 * L1 for later token groups). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/f16.h"
#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

#define AI static inline __attribute__((always_inline))

/* acc += dpbusd(codes u8, x s8). Inline asm rather than _mm512_dpbusd_epi32: GCC 12 copies
 * every accumulator through a spare register around the intrinsic in these loops (one extra
 * move per dpbusd), which cost ~25% at T=1; the asm pins the accumulator in place. */
#define DPBUSD(acc, codes, x) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(codes), "v"(x))

/* ---- quant_i8 ------------------------------------------------------------------------ */

static void quant_i8_avx512(const float *x, int64_t n, int8_t *q, float *inv_scale, int32_t *sum)
{
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 vmax = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) /* max_ps(a, m) returns m when a is NaN: NaN is ignored */
        vmax = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + i), absmask), vmax);
    if (i < n) { /* masked-off lanes load 0, which never raises amax */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        vmax = _mm512_max_ps(_mm512_and_ps(_mm512_maskz_loadu_ps(m, x + i), absmask), vmax);
    }
    const float amax = _mm512_reduce_max_ps(vmax);
    const float s = lq_quant_scale(amax);
    const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    __m512i vsum = _mm512_setzero_si512();
    for (i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi); /* NaN -> -128 like the reference */
        __m512i qi = _mm512_cvtps_epi32(v);          /* masked-off lanes are 0 */
        vsum = _mm512_add_epi32(vsum, qi);
        _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(qi));
    }
    *inv_scale = 1.0f / s;
    *sum = _mm512_reduce_add_epi32(vsum);
}

/* ---- i2s_i8 -------------------------------------------------------------------------- */

/* dots[r][t] = Σ code(r,c) * x[t][c] over nblk blocks, R <= 4 rows, TT <= 4 tokens. */
AI void i2s_tile_avx512(const uint8_t *w, size_t rb, const int8_t *x, size_t ldx, int64_t nblk,
                        int R, int TT, const uint8_t *pf, int32_t dots[4][4])
{
    const __m512i m3 = _mm512_set1_epi8(3);
    /* per-16-bit shift counts: low 256 bits / high 256 bits */
    const __m512i sh_a = _mm512_inserti64x4(_mm512_set1_epi16(6), _mm256_set1_epi16(4), 1);
    const __m512i sh_b = _mm512_inserti64x4(_mm512_set1_epi16(2), _mm256_set1_epi16(0), 1);
    __m512i acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            acc[r][t] = _mm512_setzero_si512();
    for (int64_t b = 0; b < nblk; b++) {
        /* this block's share (R*32 bytes) of the group LQ_I2S_PF_BYTES ahead */
        LQ_I2S_PREFETCH(pf + b * R * 32, R, 1);
        __m512i xa[4], xb[4];
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            const int8_t *xp = x + (size_t)t * ldx + b * 128;
            xa[t] = _mm512_loadu_si512(xp);
            xb[t] = _mm512_loadu_si512(xp + 64);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + r * rb + b * 32)));
            __m512i ca = _mm512_and_si512(_mm512_srlv_epi16(v, sh_a), m3); /* elements 0..63 */
            __m512i cb = _mm512_and_si512(_mm512_srlv_epi16(v, sh_b), m3); /* 64..127 */
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                DPBUSD(acc[r][t], ca, xa[t]);
                DPBUSD(acc[r][t], cb, xb[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            dots[r][t] = _mm512_reduce_add_epi32(acc[r][t]);
}

/* One block of the mask tile into accumulator set p (see i2s_tile_mask_avx512). */
#define MASK_BLOCK(b, p)                                                                   \
    do {                                                                                   \
        LQ_I2S_PREFETCH(pf + (b) * R * 32, R, TT > 1);                                    \
        __m512i xa[2], xb[2];                                                              \
        _Pragma("GCC unroll 2") for (int t = 0; t < TT; t++)                              \
        {                                                                                  \
            const int8_t *xp = x + (size_t)t * ldx + (b) * 128;                           \
            xa[t] = _mm512_loadu_si512(xp);                                                \
            xb[t] = _mm512_loadu_si512(xp + 64);                                           \
        }                                                                                  \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                               \
        {                                                                                  \
            __m512i v = _mm512_broadcast_i64x4(                                            \
                _mm256_loadu_si256((const __m256i *)(w + r * rb + (b) * 32)));             \
            __m512i ca = _mm512_and_si512(v, mk_a), cb = _mm512_and_si512(v, mk_b);        \
            _Pragma("GCC unroll 2") for (int t = 0; t < TT; t++)                          \
            {                                                                              \
                DPBUSD(acc_a[r][t][p], ca, xa[t]);                                         \
                DPBUSD(acc_b[r][t][p], cb, xb[t]);                                         \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* Decode tile (see the header comment): R <= 4 rows, TT <= 2 tokens, mask-only unpack. With
 * few rows x tokens there are too few independent vpdpbusd chains to hide its latency, so
 * then even and odd blocks accumulate separately (NP = 2). */
AI void i2s_tile_mask_avx512(const uint8_t *w, size_t rb, const int8_t *x, size_t ldx,
                             int64_t nblk, int R, int TT, const uint8_t *pf, int32_t dots[4][4])
{
    const int NP = R * TT <= 2 ? 2 : 1;
    const __m512i mk_a = _mm512_inserti64x4(_mm512_set1_epi8((char)0xC0), _mm256_set1_epi8(0x30), 1);
    const __m512i mk_b = _mm512_inserti64x4(_mm512_set1_epi8(0x0C), _mm256_set1_epi8(0x03), 1);
    __m512i acc_a[4][2][2], acc_b[4][2][2]; /* [row][token][block parity] */
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < TT; t++)
#pragma GCC unroll 2
            for (int p = 0; p < NP; p++)
                acc_a[r][t][p] = acc_b[r][t][p] = _mm512_setzero_si512();
    int64_t b = 0;
    for (; b + NP <= nblk; b += NP) {
#pragma GCC unroll 2
        for (int p = 0; p < NP; p++)
            MASK_BLOCK(b + p, p);
    }
    for (; b < nblk; b++)
        MASK_BLOCK(b, 0);
    const __m512i sh_a = _mm512_inserti64x4(_mm512_set1_epi32(6), _mm256_set1_epi32(4), 1);
    const __m512i sh_b = _mm512_inserti64x4(_mm512_set1_epi32(2), _mm256_set1_epi32(0), 1);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < TT; t++) {
            __m512i a = acc_a[r][t][0], c = acc_b[r][t][0];
            if (NP == 2) {
                a = _mm512_add_epi32(a, acc_a[r][t][1]);
                c = _mm512_add_epi32(c, acc_b[r][t][1]);
            }
            dots[r][t] = _mm512_reduce_add_epi32(
                _mm512_add_epi32(_mm512_srav_epi32(a, sh_a), _mm512_srav_epi32(c, sh_b)));
        }
}
#undef MASK_BLOCK

#define TILE(R, TT)                                                                        \
    case (R) * 8 + (TT):                                                                   \
        if ((TT) <= 2)                                                                     \
            i2s_tile_mask_avx512(wr, rb, xt, ldx, nblk, R, (TT) <= 2 ? (TT) : 2, pf, dots); \
        else                                                                               \
            i2s_tile_avx512(wr, rb, xt, ldx, nblk, R, TT, pf, dots);                       \
        break

static void i2s_i8_avx512(const lq_i2s_mat *w, const int8_t *xq, size_t ldx,
                          const float *inv_scale, const int32_t *xsum, int T, float *y,
                          size_t ldy, int64_t r0, int64_t r1)
{
    const size_t rb = (size_t)(w->cols / 4);
    const int64_t nblk = w->cols / 128;
    /* decode (T == 1) streams from DRAM in tiles of as many rows as this CPU's prefetchers
     * follow best (lq_i2s_decode_rows: 2 on Zen 5, 4 on Zen 4); prefill is compute bound and
     * wants 4 rows to amortise the activation loads. Every T goes through these tiles: a path
     * that unpacked 4 rows' codes once for all token groups (T >= 8) measured slower on Zen 4
     * at every T from 8 to 512 (2 threads, 2B-4T shape: batched decode B=8 2.3x -> 3.0-3.3x of
     * B=1, prefill 512 118-121 -> 124-142 tok/s): the shifts and masks issue beside vpdpbusd,
     * while the unpacked codes cost L1 traffic and had no prefetch of the next rows */
    const int rstep = T == 1 ? lq_i2s_decode_rows() : 4;
    for (int64_t r = r0; r < r1; r += rstep) {
        const int R = r1 - r < rstep ? (int)(r1 - r) : rstep;
        const uint8_t *wr = w->data + (size_t)r * rb;
        for (int t = 0; t < T; t += 4) {
            const int TT = T - t < 4 ? T - t : 4;
            int32_t dots[4][4];
            const int8_t *xt = xq + (size_t)t * ldx;
            /* software prefetch: a 4-row tile reads 4 short interleaved streams (cols/4
             * bytes each), which the hardware prefetchers do not follow well enough to
             * saturate DRAM. Later token groups repeat it (cheap hits; an unconditional
             * prefetch keeps the inner loop free of branches) */
            const uint8_t *pf = wr + LQ_I2S_PF_BYTES;
            switch (R * 8 + TT) { /* constant tile shapes, fully unrolled */
                TILE(1, 1); TILE(1, 2); TILE(1, 3); TILE(1, 4);
                TILE(2, 1); TILE(2, 2); TILE(2, 3); TILE(2, 4);
                TILE(3, 1); TILE(3, 2); TILE(3, 3); TILE(3, 4);
                TILE(4, 1); TILE(4, 2); TILE(4, 3);
            default: i2s_tile_avx512(wr, rb, xt, ldx, nblk, 4, 4, pf, dots); break;
            }
            for (int rr = 0; rr < R; rr++)
                for (int tt = 0; tt < TT; tt++)
                    y[(size_t)(t + tt) * ldy + r + rr] =
                        lq_i2s_i8_out(dots[rr][tt] - xsum[t + tt], inv_scale[t + tt], w->scale);
        }
    }
}
#undef TILE

/* ---- i2s_f32 ------------------------------------------------------------------------- */

AI __m512 trits16(__m128i codes16)
{
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(codes16), _mm512_set1_epi32(1)));
}

/* One row, TT <= 4 tokens: trits decoded once per block and shared by the tokens. */
AI void i2s_f32_tile_avx512(const uint8_t *row, const float *x, size_t ldx, int64_t nblk, int TT,
                            float out[4])
{
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i sh_a = _mm512_inserti64x4(_mm512_set1_epi16(6), _mm256_set1_epi16(4), 1);
    const __m512i sh_b = _mm512_inserti64x4(_mm512_set1_epi16(2), _mm256_set1_epi16(0), 1);
    __m512 acc[4];
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nblk; b++) {
        __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + b * 32)));
        __m512i cc[2] = {_mm512_and_si512(_mm512_srlv_epi16(v, sh_a), m3),
                         _mm512_and_si512(_mm512_srlv_epi16(v, sh_b), m3)};
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512 w16[4] = {trits16(_mm512_extracti32x4_epi32(cc[h], 0)),
                             trits16(_mm512_extracti32x4_epi32(cc[h], 1)),
                             trits16(_mm512_extracti32x4_epi32(cc[h], 2)),
                             trits16(_mm512_extracti32x4_epi32(cc[h], 3))};
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                const float *xp = x + (size_t)t * ldx + b * 128 + h * 64;
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++)
                    acc[t] = _mm512_fmadd_ps(w16[g], _mm512_loadu_ps(xp + 16 * g), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
        out[t] = _mm512_reduce_add_ps(acc[t]);
}

/* row loop, token groups of 4 (kernels_internal.h) */
LQ_I2S_F32_DRIVER(i2s_f32_avx512, i2s_f32_tile_avx512)

/* ---- dense --------------------------------------------------------------------------- */

/* 16 weights from element i (masked: lanes outside m read as 0). */
AI __m512 load16(const void *w, int type, int64_t i, __mmask16 m)
{
    if (type == LQ_GGML_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
    if (type == LQ_GGML_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}

/* R <= 4 rows x TT <= 4 tokens. Each (row, token) pair keeps one 16-lane accumulator over
 * columns c, c+16, ... (the tail masked) and is reduced by the same expression, whatever the
 * tile shape: a token's result does not depend on how many rows or tokens share the call, so
 * a batched decode step gives bit-identical logits to a single one.
 *
 * Shapes (measured on the 128256 x 2560 f16 lm_head, Zen 4): one token streams best one row
 * at a time (several interleaved row streams lose ~25% of the read rate, and one chain of
 * 160 FMAs per row is still shorter than the row's memory time); with 2-4 tokens the kernel
 * is bound by activation loads instead (4 tokens of f32 are 40 KB, past L1), so 4 rows share
 * every activation load: 1.8x faster than one row at a time at 4 tokens. */
AI void dense_tile_avx512(const void *w, int type, int64_t base, int64_t cols, const float *x,
                          size_t ldx, int R, int TT, float out[4][4])
{
    const __mmask16 all = 0xffff;
    /* prefetch the rows LQ_DENSE_PF_TILES tiles ahead (contiguous with these, the same size)
     * into L2 at the rate this tile consumes its own, so that they arrive while this one
     * computes. With the hardware prefetchers alone, 2-8 tokens (4 interleaved row streams)
     * read at ~2/3 of the rate of one token and did not overlap the arithmetic: on the 2B-4T
     * lm_head, 2 threads, T=4 went 35 -> 21 ms (= T=1's time), T=8 49 -> 29 ms; into L1
     * instead (T0) the prefetched rows evict the activations and gain little. One token (one
     * row per tile) keeps it too: 23.1 -> 21.7-22.0 ms in two alternating runs */
    const int es = type == LQ_GGML_F32 ? 4 : 2;
    const char *pf = (const char *)w + (size_t)(base + LQ_DENSE_PF_TILES * R * cols) * (size_t)es;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            acc[r][t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
#pragma GCC unroll 4
        for (int o = 0; o < R * 16 * es; o += 64)
            _mm_prefetch(pf + c * R * es + o, LQ_DENSE_PF_HINT);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load16(w, type, base + r * cols + c, all);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            const __m512 xv = _mm512_loadu_ps(x + (size_t)t * ldx + c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (c < cols) {
        const __mmask16 m = (__mmask16)((1u << (cols - c)) - 1);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load16(w, type, base + r * cols + c, m);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)t * ldx + c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
}

#define DTILE(R, TT)                                                                       \
    case (R) * 8 + (TT):                                                                   \
        dense_tile_avx512(w->data, type, r * w->cols, w->cols, xt, ldx, R, TT, out);       \
        break

AI void dense_rows_avx512(const lq_dense_mat *w, int type, const float *x, size_t ldx, int T,
                          float *y, size_t ldy, int64_t r0, int64_t r1)
{
    const int rstep = T == 1 ? 1 : 4;
    for (int64_t r = r0; r < r1; r += rstep) {
        const int R = r1 - r < rstep ? (int)(r1 - r) : rstep;
        for (int t = 0; t < T; t += 4) {
            const int TT = T - t < 4 ? T - t : 4;
            const float *xt = x + (size_t)t * ldx;
            float out[4][4];
            switch (R * 8 + TT) { /* constant tile shapes, fully unrolled */
                DTILE(1, 1); DTILE(1, 2); DTILE(1, 3); DTILE(1, 4);
                DTILE(2, 1); DTILE(2, 2); DTILE(2, 3); DTILE(2, 4);
                DTILE(3, 1); DTILE(3, 2); DTILE(3, 3); DTILE(3, 4);
                DTILE(4, 1); DTILE(4, 2); DTILE(4, 3);
            default: dense_tile_avx512(w->data, type, r * w->cols, w->cols, xt, ldx, 4, 4, out); break;
            }
            for (int rr = 0; rr < R; rr++)
                for (int tt = 0; tt < TT; tt++)
                    y[(size_t)(t + tt) * ldy + r + rr] = out[rr][tt];
        }
    }
}
#undef DTILE

static void dense_avx512(const lq_dense_mat *w, const float *x, size_t ldx, int T, float *y,
                         size_t ldy, int64_t r0, int64_t r1)
{
    switch (w->type) {
    case LQ_GGML_F32: dense_rows_avx512(w, LQ_GGML_F32, x, ldx, T, y, ldy, r0, r1); break;
    case LQ_GGML_F16: dense_rows_avx512(w, LQ_GGML_F16, x, ldx, T, y, ldy, r0, r1); break;
    case LQ_GGML_BF16: dense_rows_avx512(w, LQ_GGML_BF16, x, ldx, T, y, ldy, r0, r1); break;
    default: break; /* as the reference: unknown types write nothing */
    }
}

/* ---- q8_f32 (int8 per-row-scaled lm_head) ------------------------------------------ */

/* 32 int8 weights from p as int16 (masked lanes read 0). */
AI __m512i q8x32(const int8_t *p, __mmask32 m)
{
    return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, p));
}

AI __mmask32 mask32(int64_t left)
{
    return left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1);
}

/* R <= 2 rows x TT <= 4 tokens: vpdpwssd (int16 pairs into int32 lanes), exact. With one
 * token, 2 column groups go to separate accumulators so that 4 chains hide the latency.
 * Lanes are flushed to int64 every LQ_Q8_BLOCK columns. */
AI void q8_tile_avx512(const int8_t *w, int64_t cols, const int16_t *x, size_t ldx, int R, int TT,
                       int64_t out[2][4])
{
    const int U = TT == 1 ? 2 : 1;
    /* the rows LQ_DENSE_PF_TILES tiles ahead, into L2, as in dense_tile_avx512 (2B-4T with
     * --lm-head q8, 2 threads: batched decode B=2 47-49 -> 61-63 tok/s, B=4 71-72 -> 85-90) */
    const int8_t *pf = w + (size_t)LQ_DENSE_PF_TILES * (size_t)R * (size_t)cols;
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            out[r][t] = 0;
    for (int64_t c0 = 0; c0 < cols; c0 += LQ_Q8_BLOCK) {
        const int64_t c1 = cols - c0 < LQ_Q8_BLOCK ? cols : c0 + LQ_Q8_BLOCK;
        __m512i acc[2][4][2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++)
#pragma GCC unroll 2
                for (int u = 0; u < U; u++)
                    acc[r][t][u] = _mm512_setzero_si512();
        int64_t c = c0;
        for (; c + 32 * U <= c1; c += 32 * U) {
#pragma GCC unroll 2
            for (int o = 0; o < 32 * U * R; o += 64)
                _mm_prefetch((const char *)(pf + c * R + o), LQ_DENSE_PF_HINT);
#pragma GCC unroll 2
            for (int u = 0; u < U; u++) {
                __m512i wv[2];
#pragma GCC unroll 2
                for (int r = 0; r < R; r++)
                    wv[r] = q8x32(w + (size_t)r * (size_t)cols + c + 32 * u, 0xffffffffu);
#pragma GCC unroll 4
                for (int t = 0; t < TT; t++) {
                    __m512i xv = _mm512_loadu_si512(x + (size_t)t * ldx + c + 32 * u);
#pragma GCC unroll 2
                    for (int r = 0; r < R; r++)
                        acc[r][t][u] = _mm512_dpwssd_epi32(acc[r][t][u], wv[r], xv);
                }
            }
        }
        for (; c < c1; c += 32) {
            __mmask32 m = mask32(c1 - c);
            __m512i wv[2];
#pragma GCC unroll 2
            for (int r = 0; r < R; r++)
                wv[r] = q8x32(w + (size_t)r * (size_t)cols + c, m);
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                __m512i xv = _mm512_maskz_loadu_epi16(m, x + (size_t)t * ldx + c);
#pragma GCC unroll 2
                for (int r = 0; r < R; r++)
                    acc[r][t][0] = _mm512_dpwssd_epi32(acc[r][t][0], wv[r], xv);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) {
                __m512i a = acc[r][t][0];
                if (U == 2)
                    a = _mm512_add_epi32(a, acc[r][t][1]); /* two blocks' worth: < 2^31 */
                /* lanes are exact int32, but their sum may not be: widen first */
                __m512i wide = _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(a)),
                                                _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(a, 1)));
                out[r][t] += _mm512_reduce_add_epi64(wide);
            }
    }
}

#define Q8TILE(R, TT)                                                                      \
    case (R) * 8 + (TT):                                                                   \
        q8_tile_avx512(wr, w->cols, xt, ldx, R, TT, out);                                  \
        break

static void q8_i16_avx512(const lq_q8_mat *w, const int16_t *xq, size_t ldx, const float *inv_scale,
                          int T, float *y, size_t ldy, int64_t r0, int64_t r1)
{
    /* decode (T == 1) streams one row at a time: measured from DRAM, 2 interleaved rows
     * read at about half the rate of 1 (13 vs 26 GB/s on one core) */
    const int rstep = T == 1 ? 1 : 2;
    for (int64_t r = r0; r < r1; r += rstep) {
        const int R = r1 - r < rstep ? 1 : rstep;
        const int8_t *wr = w->data + (size_t)r * (size_t)w->cols;
        for (int t = 0; t < T; t += 4) {
            const int TT = T - t < 4 ? T - t : 4;
            const int16_t *xt = xq + (size_t)t * ldx;
            int64_t out[2][4];
            switch (R * 8 + TT) {
                Q8TILE(1, 1); Q8TILE(1, 2); Q8TILE(1, 3); Q8TILE(1, 4);
                Q8TILE(2, 1); Q8TILE(2, 2); Q8TILE(2, 3);
            default: q8_tile_avx512(wr, w->cols, xt, ldx, 2, 4, out); break;
            }
            for (int rr = 0; rr < R; rr++)
                for (int tt = 0; tt < TT; tt++)
                    y[(size_t)(t + tt) * ldy + r + rr] =
                        lq_q8_out(out[rr][tt], inv_scale[t + tt], w->scale[r + rr]);
        }
    }
}
#undef Q8TILE

/* ---- attention ----------------------------------------------------------------------- */

/* e^x for 16 lanes (Cephes expf: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, then
 * scalef by n): relative error ~2 ulp; inputs below -87 give ~0, as softmax wants. */
AI __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(LQ_EXP_HI)), _mm512_set1_ps(LQ_EXP_LO));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LQ_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LQ_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LQ_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(LQ_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LQ_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LQ_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LQ_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LQ_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LQ_EXP_P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* Values 16u..16u+15 of one head's KV row (kv_type T, hd = 16 NV values; kernels.h). */
AI __m512 kvrow(const uint8_t *row, int T, int NV, int u)
{
    if (T == LQ_KVT_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 32 * (size_t)u)));
    if (T == LQ_KVT_Q8) {
        float sc;
        memcpy(&sc, row + 16 * (size_t)NV + 4 * (size_t)(u / 2), sizeof sc);
        __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + 16 * (size_t)u))));
        return _mm512_mul_ps(x, _mm512_set1_ps(sc));
    }
    return _mm512_loadu_ps((const float *)(row + 64 * (size_t)u));
}

/* out[j] = sum of the 16 lanes of v[j], j = 0..15, each added in exactly the order of
 * _mm512_reduce_add_ps (halves of 256, then of 128, then (0+2) + (1+3)), so that the
 * scores equal the ones of one reduction per position, bit for bit, with a quarter of the
 * shuffles. Float addition commutes, so only the grouping has to match. */
AI __m512 hsum16(const __m512 *v)
{
    __m512 g[4];
    for (int m = 0; m < 4; m++) {
        /* g[m], 128-bit lane k: (L0 + L2) + (L1 + L3) of v[4k + m], its 128-bit lanes L */
        const __m512 a = v[m], b = v[4 + m], c = v[8 + m], d = v[12 + m];
        __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
        __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
        g[m] = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    }
    /* within each 128-bit lane: [x0 + x2, x1 + x3] of every g, then their sum */
    __m512 h01 = _mm512_add_ps(_mm512_unpacklo_ps(g[0], g[1]), _mm512_unpackhi_ps(g[0], g[1]));
    __m512 h23 = _mm512_add_ps(_mm512_unpacklo_ps(g[2], g[3]), _mm512_unpackhi_ps(g[2], g[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(h01, h23, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(h01, h23, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* Asks for the KV row at p (bytes of it) ahead of its use: the K/V stream then overlaps the
 * arithmetic of the block before it instead of following it (pfd = 0: nothing to ask for). */
AI void att_prefetch(const uint8_t *p, size_t pfd, size_t bytes)
{
    if (!pfd)
        return;
    for (size_t i = 0; i < bytes; i += 64)
        _mm_prefetch((const char *)(p + pfd + i), _MM_HINT_T1);
}

/* Scores of one head over a block's nb positions into s (scaled q in qv): 16 positions at a
 * time, one transposing reduction for the 16 dot products instead of 16 horizontal sums
 * (which cost as much as the products). */
AI void att_scores1(const __m512 *qv, const uint8_t *k, size_t ld, int T, int nb, int NV, float *s,
                    size_t pfd)
{
    for (int b0 = 0; b0 < nb; b0 += 16) {
        const int n16 = nb - b0 < 16 ? nb - b0 : 16;
        __m512 dv[16];
        for (int j = 0; j < 16; j++) {
            if (j >= n16) {
                dv[j] = _mm512_setzero_ps();
                continue;
            }
            const uint8_t *kr = k + (size_t)(b0 + j) * ld;
            att_prefetch(kr, pfd, lq_kv_head_bytes(T, 16 * NV));
            __m512 d0 = _mm512_mul_ps(qv[0], kvrow(kr, T, NV, 0)), d1 = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int u = 1; u < NV; u++) {
                if (u & 1)
                    d1 = _mm512_fmadd_ps(qv[u], kvrow(kr, T, NV, u), d1);
                else
                    d0 = _mm512_fmadd_ps(qv[u], kvrow(kr, T, NV, u), d0);
            }
            dv[j] = _mm512_add_ps(d0, d1);
        }
        _mm512_store_ps(s + b0, hsum16(dv));
    }
}

/* The same for two heads at once, 8 positions a reduction: each K row is loaded (and
 * converted) once for both, every dot product computed in exactly att_scores1's order. */
AI void att_scores2(const __m512 *qa, const __m512 *qb, const uint8_t *k, size_t ld, int T, int nb,
                    int NV, float *sa, float *sb, size_t pfd)
{
    for (int b0 = 0; b0 < nb; b0 += 8) {
        const int n8 = nb - b0 < 8 ? nb - b0 : 8;
        __m512 dv[16];
        for (int j = 0; j < 8; j++) {
            if (j >= n8) {
                dv[j] = dv[8 + j] = _mm512_setzero_ps();
                continue;
            }
            const uint8_t *kr = k + (size_t)(b0 + j) * ld;
            att_prefetch(kr, pfd, lq_kv_head_bytes(T, 16 * NV));
            const __m512 k0 = kvrow(kr, T, NV, 0);
            __m512 a0 = _mm512_mul_ps(qa[0], k0), a1 = _mm512_setzero_ps();
            __m512 c0 = _mm512_mul_ps(qb[0], k0), c1 = _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int u = 1; u < NV; u++) {
                const __m512 ku = kvrow(kr, T, NV, u);
                if (u & 1) {
                    a1 = _mm512_fmadd_ps(qa[u], ku, a1);
                    c1 = _mm512_fmadd_ps(qb[u], ku, c1);
                } else {
                    a0 = _mm512_fmadd_ps(qa[u], ku, a0);
                    c0 = _mm512_fmadd_ps(qb[u], ku, c0);
                }
            }
            dv[j] = _mm512_add_ps(a0, a1);
            dv[8 + j] = _mm512_add_ps(c0, c1);
        }
        const __m512 r = hsum16(dv);
        _mm256_store_ps(sa + b0, _mm512_castps512_ps256(r));
        _mm256_store_ps(sb + b0, _mm512_extractf32x8_ps(r, 1));
    }
}

/* The same for four heads at once, 4 positions a reduction: each K row is loaded and converted
 * once for the four (into registers; the scaled queries are read from qs, L1), every dot
 * product computed in exactly att_scores1's order, so a head's scores do not depend on the
 * heads beside it. */
AI void att_scores4(const float *qs, const uint8_t *k, size_t ld, int T, int nb, int NV, float *const *s,
                    size_t pfd)
{
    for (int b0 = 0; b0 < nb; b0 += 4) {
        const int n4 = nb - b0 < 4 ? nb - b0 : 4;
        __m512 dv[16];
        for (int j = 0; j < 4; j++) {
            if (j >= n4) {
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++)
                    dv[4 * h + j] = _mm512_setzero_ps();
                continue;
            }
            const uint8_t *kr = k + (size_t)(b0 + j) * ld;
            att_prefetch(kr, pfd, lq_kv_head_bytes(T, 16 * NV));
            __m512 kv[8];
#pragma GCC unroll 8
            for (int u = 0; u < NV; u++)
                kv[u] = kvrow(kr, T, NV, u);
#pragma GCC unroll 4
            for (int h = 0; h < 4; h++) {
                const float *q = qs + (size_t)h * 16 * NV;
                __m512 d0 = _mm512_mul_ps(_mm512_load_ps(q), kv[0]), d1 = _mm512_setzero_ps();
#pragma GCC unroll 8
                for (int u = 1; u < NV; u++) {
                    if (u & 1)
                        d1 = _mm512_fmadd_ps(_mm512_load_ps(q + 16 * u), kv[u], d1);
                    else
                        d0 = _mm512_fmadd_ps(_mm512_load_ps(q + 16 * u), kv[u], d0);
                }
                dv[4 * h + j] = _mm512_add_ps(d0, d1);
            }
        }
        const __m512 r = hsum16(dv);
        _mm_store_ps(s[0] + b0, _mm512_castps512_ps128(r));
        _mm_store_ps(s[1] + b0, _mm512_extractf32x4_ps(r, 1));
        _mm_store_ps(s[2] + b0, _mm512_extractf32x4_ps(r, 2));
        _mm_store_ps(s[3] + b0, _mm512_extractf32x4_ps(r, 3));
    }
}

/* The block's softmax step of one head: its running max and sum move to the block, the
 * accumulated output row og is rescaled when the max grew, and s becomes exp(s - max). */
AI void att_softmax(float *s, int nb, int NV, float *mx, float *sum, float *og)
{
    __m512 vbm = _mm512_set1_ps(-INFINITY);
    for (int b = 0; b < nb; b += 16) {
        __mmask16 m = nb - b >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nb - b)) - 1);
        vbm = _mm512_mask_max_ps(vbm, m, vbm, _mm512_maskz_loadu_ps(m, s + b));
    }
    const float bm = _mm512_reduce_max_ps(vbm);
    if (bm > *mx) {
        const float r = expf(*mx - bm); /* 0 on the first block (mx = -inf) */
        *sum *= r;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            _mm512_storeu_ps(og + 16 * u, _mm512_mul_ps(_mm512_loadu_ps(og + 16 * u), _mm512_set1_ps(r)));
        *mx = bm;
    }
    __m512 vs = _mm512_setzero_ps();
    for (int b = 0; b < nb; b += 16) {
        __mmask16 m = nb - b >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nb - b)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + b), _mm512_set1_ps(*mx)));
        e = _mm512_maskz_mov_ps(m, e);
        vs = _mm512_add_ps(vs, e);
        _mm512_store_ps(s + b, e);
    }
    *sum += _mm512_reduce_add_ps(vs);
}

/* One block of positions for NH (1 or 2, a constant) heads of a group, their queries at q and
 * q + ldq and output rows at o and o + ldo: scores, the softmax step, then the values, each K
 * and V row loaded and converted once for the NH heads. A head's operations are the same
 * whether it goes alone or paired. */
AI void att_block(const float *q, size_t ldq, float scale, const uint8_t *kb, const uint8_t *vb,
                  size_t ld, int T, int nb, int NV, int NH, float *mx, float *sum, float *o,
                  size_t ldo, float *sa, float *sb, size_t pfd)
{
    float *const s[2] = {sa, sb};
    {
        __m512 qv[2][8];
#pragma GCC unroll 2
        for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
            for (int u = 0; u < NV; u++)
                qv[h][u] = _mm512_mul_ps(_mm512_loadu_ps(q + (size_t)h * ldq + 16 * u), _mm512_set1_ps(scale));
        if (NH == 2)
            att_scores2(qv[0], qv[1], kb, ld, T, nb, NV, sa, sb, pfd);
        else
            att_scores1(qv[0], kb, ld, T, nb, NV, sa, pfd);
    }
    __m512 acc[2][8];
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++) {
        att_softmax(s[h], nb, NV, &mx[h], &sum[h], o + (size_t)h * ldo);
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            acc[h][u] = _mm512_loadu_ps(o + (size_t)h * ldo + 16 * u);
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *vr = vb + (size_t)b * ld;
        att_prefetch(vr, pfd, lq_kv_head_bytes(T, 16 * NV));
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++) {
            const __m512 x = kvrow(vr, T, NV, u);
#pragma GCC unroll 2
            for (int h = 0; h < NH; h++)
                acc[h][u] = _mm512_fmadd_ps(_mm512_set1_ps(s[h][b]), x, acc[h][u]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH; h++)
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            _mm512_storeu_ps(o + (size_t)h * ldo + 16 * u, acc[h][u]);
}

/* att_block for four heads of a group (queries at q + h*ldq, outputs at o + h*ldo): each K and
 * V row is loaded and converted once for the four. The values go in chunks of 4 vectors so
 * that the 16 accumulators stay in registers; a head's operations are att_block's. */
AI void att_block4(const float *q, size_t ldq, float scale, const uint8_t *kb, const uint8_t *vb, size_t ld,
                   int T, int nb, int NV, float *mx, float *sum, float *o, size_t ldo, float *const *s,
                   size_t pfd)
{
    float qs[4 * 128] __attribute__((aligned(64)));
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            _mm512_store_ps(qs + (size_t)h * 16 * NV + 16 * u,
                            _mm512_mul_ps(_mm512_loadu_ps(q + (size_t)h * ldq + 16 * u), _mm512_set1_ps(scale)));
    att_scores4(qs, kb, ld, T, nb, NV, s, pfd);
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++)
        att_softmax(s[h], nb, NV, &mx[h], &sum[h], o + (size_t)h * ldo);
    for (int u0 = 0; u0 < NV; u0 += 4) {
        const int nu = NV - u0 < 4 ? NV - u0 : 4;
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
            for (int uu = 0; uu < 4; uu++)
                acc[h][uu] = uu < nu ? _mm512_loadu_ps(o + (size_t)h * ldo + 16 * (u0 + uu)) : _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *vr = vb + (size_t)b * ld;
            if (u0 == 0)
                att_prefetch(vr, pfd, lq_kv_head_bytes(T, 16 * NV));
#pragma GCC unroll 4
            for (int uu = 0; uu < nu; uu++) {
                const __m512 x = kvrow(vr, T, NV, u0 + uu);
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++)
                    acc[h][uu] = _mm512_fmadd_ps(_mm512_set1_ps(s[h][b]), x, acc[h][uu]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
            for (int uu = 0; uu < nu; uu++)
                _mm512_storeu_ps(o + (size_t)h * ldo + 16 * (u0 + uu), acc[h][uu]);
    }
}

/* NV = head_dim / 16 vectors. The heads of a group take turns on each block of positions,
 * so that the block's K and V rows come from memory once and from L1/L2 for the other heads
 * (the whole cache no longer fits L2 past a few hundred positions); two heads at a time share
 * each K and V row's loads and conversions (attention at long contexts is bound by them, not
 * by DRAM: BENCHMARKS.md, issue 14). Between blocks a head's accumulator lives in its out row
 * and its running max / sum in mx / sum; every head goes through exactly the operations of a
 * group of one, so results do not depend on nq. */
AI void attn_nv_avx512(const float *q, size_t ldq, int nq, const void *k, const void *v,
                       size_t ld, int T, int npos, int NV, float scale, float *out, size_t ldo,
                       float *ml)
{
    float mx[LQ_ATT_MAX_GROUP], sum[LQ_ATT_MAX_GROUP];
    float sa[LQ_ATT_BLOCK] __attribute__((aligned(64)));
    float sb[LQ_ATT_BLOCK] __attribute__((aligned(64)));
    float sc[LQ_ATT_BLOCK] __attribute__((aligned(64)));
    float sd[LQ_ATT_BLOCK] __attribute__((aligned(64)));
    float *const s4[4] = {sa, sb, sc, sd};
    for (int g = 0; g < nq; g++) {
        mx[g] = -INFINITY;
        sum[g] = 0;
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            _mm512_storeu_ps(out + (size_t)g * ldo + 16 * u, _mm512_setzero_ps());
    }
    for (int p0 = 0; p0 < npos; p0 += LQ_ATT_BLOCK) {
        const int nb = npos - p0 < LQ_ATT_BLOCK ? npos - p0 : LQ_ATT_BLOCK;
        const uint8_t *kb = (const uint8_t *)k + (size_t)p0 * ld;
        const uint8_t *vb = (const uint8_t *)v + (size_t)p0 * ld;
        /* the first pass over the block asks for the next block's rows */
        const size_t pfd = p0 + LQ_ATT_BLOCK < npos ? (size_t)LQ_ATT_BLOCK * ld : 0;
        int g = 0;
        for (; g + 4 <= nq; g += 4)
            att_block4(q + (size_t)g * ldq, ldq, scale, kb, vb, ld, T, nb, NV, mx + g, sum + g,
                       out + (size_t)g * ldo, ldo, s4, g ? 0 : pfd);
        for (; g + 2 <= nq; g += 2)
            att_block(q + (size_t)g * ldq, ldq, scale, kb, vb, ld, T, nb, NV, 2, mx + g, sum + g,
                      out + (size_t)g * ldo, ldo, sa, sb, g ? 0 : pfd);
        if (g < nq)
            att_block(q + (size_t)g * ldq, ldq, scale, kb, vb, ld, T, nb, NV, 1, mx + g, sum + g,
                      out + (size_t)g * ldo, ldo, sa, sb, g ? 0 : pfd);
    }
    for (int g = 0; g < nq; g++) {
        float *og = out + (size_t)g * ldo;
        __m512 inv = _mm512_set1_ps(1.0f / sum[g]);
#pragma GCC unroll 8
        for (int u = 0; u < NV; u++)
            _mm512_storeu_ps(og + 16 * u, _mm512_mul_ps(_mm512_loadu_ps(og + 16 * u), inv));
        if (ml) {
            ml[2 * g] = mx[g];
            ml[2 * g + 1] = sum[g];
        }
    }
}

/* constant NV and kv type per case, so that q and the accumulator live in registers and the
 * loads compile to one form */
#define ATT_NV(T)                                                                                   \
    switch (hd % 16 ? 0 : hd / 16) {                                                                \
    case 1: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 1, scale, og, ldo, mg); break;            \
    case 2: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 2, scale, og, ldo, mg); break;            \
    case 3: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 3, scale, og, ldo, mg); break;            \
    case 4: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 4, scale, og, ldo, mg); break;            \
    case 5: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 5, scale, og, ldo, mg); break;            \
    case 6: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 6, scale, og, ldo, mg); break;            \
    case 7: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 7, scale, og, ldo, mg); break;            \
    case 8: attn_nv_avx512(qg, ldq, n, k, v, ld, T, npos, 8, scale, og, ldo, mg); break;            \
    default: lq_attn_group_scalar(qg, ldq, n, k, v, ld, T, npos, hd, scale, og, ldo, mg); break;    \
    }

static void attn_avx512(const float *q, size_t ldq, int nq, const void *k, const void *v,
                        size_t ld, int kv_type, int npos, int hd, float scale, float *out,
                        size_t ldo, float *ml)
{
    /* groups larger than the state arrays go through in parts */
    for (int g0 = 0; g0 < nq; g0 += LQ_ATT_MAX_GROUP) {
        const int n = nq - g0 < LQ_ATT_MAX_GROUP ? nq - g0 : LQ_ATT_MAX_GROUP;
        const float *qg = q + (size_t)g0 * ldq;
        float *og = out + (size_t)g0 * ldo;
        float *mg = ml ? ml + 2 * g0 : NULL;
        if (kv_type == LQ_KVT_F16) {
            ATT_NV(LQ_KVT_F16)
        } else if (kv_type == LQ_KVT_Q8 && hd % 32 == 0) {
            ATT_NV(LQ_KVT_Q8)
        } else if (kv_type == LQ_KVT_Q8) {
            lq_attn_group_scalar(qg, ldq, n, k, v, ld, kv_type, npos, hd, scale, og, ldo, mg);
        } else {
            ATT_NV(LQ_KVT_F32)
        }
    }
}
#undef ATT_NV

const lq_kernels lq_kernels_avx512 = {
    .name = "avx512",
    .quant_i8 = quant_i8_avx512,
    .i2s_i8 = i2s_i8_avx512,
    .i2s_f32 = i2s_f32_avx512,
    .tq_i8 = lq_tq_i8_avx512,
    .dense = dense_avx512,
    .q8_i16 = q8_i16_avx512,
    .attn = attn_avx512,
    .gate_scores = lq_gate_scores_avx512,
    .sketch_row = lq_sketch_row_avx512,
    .sketch_scores = lq_sketch_scores_avx512,
    .dm_block = lq_dm_block_avx512,
    .read_sum = lq_read_sum_avx2, /* 256-bit loads already reach DRAM bandwidth */
    .mac_peak = lq_mac_peak_avx512,
    .q8_bound = lq_q8_bound_avx512,
};
