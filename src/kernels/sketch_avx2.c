/* Gate sketches with AVX2 (layout and arithmetic in kernels.h), for CPUs whose best set is
 * avx2 (including AVX-512 parts without VNNI, which the avx512 set requires).
 *
 * Scoring: a 256-component block's 64 code bytes are two 32-byte loads; byte j of load h
 * holds components h*32 + j + 64k in bits 2k..2k+1, so a shift and a mask give 32 codes
 * lined up with 32 consecutive int8 query components. vpmaddubsw multiplies them into
 * 16-bit pair sums (codes <= 2, |q| <= 127: a pair is <= 508, the 8 of a block add up to
 * <= 4064, no saturation), vpmaddwd widens to int32 once per block. Integer sums are exact,
 * so the result equals the scalar kernel's to the bit.
 *
 * Building: the threshold from a sum of |g|, then per 32 components the compare masks turn
 * into int32 codes 1 - gt + lt, packed to bytes (packs + a lane permute restore the order)
 * and ORed into place with a 16-bit shift (codes <= 2 stay inside their byte). */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

/* Components [i, i + 8) of a row as f32; past d they read as 0 (code 1, nothing kept). */
static inline __m256 load8(const uint8_t *p, int f16, size_t i, size_t d)
{
    if (i + 8 <= d)
        return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i)))
                   : _mm256_loadu_ps((const float *)(const void *)(p + 4 * i));
    float t[8] = {0};
    for (size_t k = 0; i + k < d; k++)
        t[k] = lq_gate_elem(p, f16, i + k);
    return _mm256_loadu_ps(t);
}

static inline float sum8(__m256 v)
{
    float t[8];
    _mm256_storeu_ps(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

void lq_sketch_row_avx2(const void *row, int f16, size_t d, uint8_t *codes, float *scale,
                        int *inexact)
{
    const uint8_t *p = row;
    const size_t dp = lq_sketch_dp(d);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 s = _mm256_setzero_ps();
    for (size_t i = 0; i < d; i += 8)
        s = _mm256_add_ps(s, _mm256_andnot_ps(sign, load8(p, f16, i, d)));
    float thr = 0.5f * (sum8(s) / (float)d);
    const __m256 vt = _mm256_set1_ps(thr), vnt = _mm256_set1_ps(-thr);
    const __m256i one = _mm256_set1_epi32(1), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 kept = _mm256_setzero_ps();
    size_t nk = 0;
    for (size_t blk = 0; blk < dp / 256; blk++)
        for (int h = 0; h < 2; h++) {
            __m256i packed = _mm256_setzero_si256();
            for (int k = 0; k < 4; k++) {
                __m256i c[4];
                for (int q = 0; q < 4; q++) {
                    size_t i = blk * 256 + (size_t)k * 64 + (size_t)h * 32 + (size_t)q * 8;
                    __m256 g = i < d ? load8(p, f16, i, d) : _mm256_setzero_ps();
                    __m256 gt = _mm256_cmp_ps(g, vt, _CMP_GT_OQ), lt = _mm256_cmp_ps(g, vnt, _CMP_LT_OQ);
                    kept = _mm256_add_ps(kept, _mm256_and_ps(_mm256_or_ps(gt, lt), _mm256_andnot_ps(sign, g)));
                    nk += (size_t)__builtin_popcount((unsigned)_mm256_movemask_ps(gt)) +
                          (size_t)__builtin_popcount((unsigned)_mm256_movemask_ps(lt));
                    /* masks are -1: code = 1 - gt + lt is 2 above, 0 below, 1 between */
                    c[q] = _mm256_add_epi32(_mm256_sub_epi32(one, _mm256_castps_si256(gt)), _mm256_castps_si256(lt));
                }
                /* packs interleave the 128-bit lanes: 4-byte groups come out as
                 * c0[0..3] c1[0..3] c2[0..3] c3[0..3] c0[4..7] ...; the permute restores order */
                __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
                b = _mm256_permutevar8x32_epi32(b, order);
                packed = _mm256_or_si256(packed, _mm256_slli_epi16(b, 2 * k));
            }
            _mm256_storeu_si256((__m256i *)(void *)(codes + blk * 64 + (size_t)h * 32), packed);
        }
    float sc = nk ? sum8(kept) / (float)nk : 0.0f;
    *scale = sc;
    if (*inexact)
        return;
    const __m256 vs = _mm256_set1_ps(sc), z = _mm256_setzero_ps();
    for (size_t i = 0; i < d; i += 8) {
        __m256 g = load8(p, f16, i, d);
        /* unordered compares, as the reference's C operators: a NaN counts as inexact */
        __m256 bad = _mm256_and_ps(_mm256_cmp_ps(g, z, _CMP_NEQ_UQ),
                                   _mm256_cmp_ps(_mm256_andnot_ps(sign, g), vs, _CMP_NEQ_UQ));
        if (_mm256_movemask_ps(bad)) {
            *inexact = 1;
            return;
        }
    }
}

/* One row x NQ (1..4) queries. */
static inline __attribute__((always_inline)) void sk_row(const uint8_t *c, const uint8_t *pf, size_t dp,
                                                         const int8_t *x, int NQ, int32_t *dots)
{
    const __m256i m3 = _mm256_set1_epi8(3), ones16 = _mm256_set1_epi16(1);
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256()};
    for (size_t blk = 0; blk < dp / 256; blk++) {
        if (pf)
            _mm_prefetch((const char *)pf + blk * 64, _MM_HINT_T0);
        __m256i cd[2][4];
        for (int h = 0; h < 2; h++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(c + blk * 64 + (size_t)h * 32));
            for (int k = 0; k < 4; k++)
                cd[h][k] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), m3);
        }
#pragma GCC unroll 4
        for (int q = 0; q < NQ; q++) {
            const int8_t *xq = x + (size_t)q * dp + blk * 256;
            __m256i s = _mm256_setzero_si256();
            for (int k = 0; k < 4; k++)
                for (int h = 0; h < 2; h++)
                    s = _mm256_add_epi16(
                        s, _mm256_maddubs_epi16(cd[h][k], _mm256_loadu_si256((const __m256i *)(const void *)(
                                                               xq + (size_t)k * 64 + (size_t)h * 32))));
            acc[q] = _mm256_add_epi32(acc[q], _mm256_madd_epi16(s, ones16));
        }
    }
    for (int q = 0; q < NQ; q++) {
        int32_t t[8];
        _mm256_storeu_si256((__m256i *)(void *)t, acc[q]);
        dots[q] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    }
}

LQ_SKETCH_ROWS_FN(sketch_rows, sk_row)

void lq_sketch_scores_avx2(const uint8_t *codes, const float *scale, size_t dp, size_t r0,
                           size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,
                           size_t nq, float *out, size_t out_stride)
{
    sketch_rows(codes, scale, dp, r0, r1, q8, qs, qsum, nq, out, out_stride);
}
