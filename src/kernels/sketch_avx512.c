/* Gate sketches with AVX-512 (layout and arithmetic in kernels.h).
 *
 * Scoring: per 256 components one 64-byte load of codes; three 16-bit shifts and four ANDs
 * give the codes (t + 1, 0..2) of components j, j+64, j+128, j+192 in byte lane j, each
 * vector lined up with 64 consecutive int8 query components, and vpdpbusd (u8 x s8 -> s32,
 * AVX512-VNNI, which the avx512 set requires) accumulates the products. A row is scored against
 * up to 4 queries per pass, each with 4 accumulators (one per code position) so the
 * dependency chains are 4 times shorter. Integer sums are exact, so the result equals the
 * scalar kernel's to the bit.
 *
 * Building (at open): three passes over a row in cache: sum of |g| (threshold), codes and
 * the kept magnitudes (compare masks -> byte blends -> shifted ORs), then the unit-trit
 * check. About 1 GB of f16 gate rows per second per core instead of the scalar loop's
 * ~80 MB/s. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define UNROLL _Pragma("GCC unroll 4")

static inline __m512 load16_m(const uint8_t *p, int f16, size_t i, size_t d)
{
    size_t n = d - i < 16 ? d - i : 16;
    __mmask16 m = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1);
    if (f16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
    return _mm512_maskz_loadu_ps(m, p + 4 * i);
}

void lq_sketch_row_avx512(const void *row, int f16, size_t d, uint8_t *codes, float *scale,
                          int *inexact)
{
    const uint8_t *p = row;
    size_t dp = lq_sketch_dp(d);
    __m512 s = _mm512_setzero_ps();
    for (size_t i = 0; i < d; i += 16)
        s = _mm512_add_ps(s, _mm512_abs_ps(load16_m(p, f16, i, d)));
    float thr = 0.5f * (_mm512_reduce_add_ps(s) / (float)d);
    __m512 vt = _mm512_set1_ps(thr), vnt = _mm512_set1_ps(-thr), kept = _mm512_setzero_ps();
    const __m512i one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2), zero = _mm512_setzero_si512();
    uint64_t nk = 0;
    for (size_t blk = 0; blk < dp / 256; blk++) {
        __m512i packed = zero;
        for (int k = 0; k < 4; k++) {
            uint64_t pm = 0, nm = 0;
            for (int c = 0; c < 4; c++) {
                size_t i = blk * 256 + (size_t)k * 64 + (size_t)c * 16;
                if (i >= d)
                    break;
                __m512 g = load16_m(p, f16, i, d);
                __mmask16 mp = _mm512_cmp_ps_mask(g, vt, _CMP_GT_OQ), mn = _mm512_cmp_ps_mask(g, vnt, _CMP_LT_OQ);
                kept = _mm512_mask_add_ps(kept, (__mmask16)(mp | mn), kept, _mm512_abs_ps(g));
                pm |= (uint64_t)mp << (16 * c);
                nm |= (uint64_t)mn << (16 * c);
            }
            nk += (uint64_t)__builtin_popcountll(pm) + (uint64_t)__builtin_popcountll(nm);
            __m512i code = _mm512_mask_mov_epi8(_mm512_mask_mov_epi8(one, pm, two), nm, zero);
            /* codes <= 2: a 16-bit shift by <= 6 keeps each byte's bits inside the byte */
            packed = _mm512_or_si512(packed, _mm512_slli_epi16(code, (unsigned)(2 * k)));
        }
        _mm512_storeu_si512((void *)(codes + blk * 64), packed);
    }
    float sc = nk ? _mm512_reduce_add_ps(kept) / (float)nk : 0.0f;
    *scale = sc;
    if (*inexact)
        return;
    __m512 vs = _mm512_set1_ps(sc), z = _mm512_setzero_ps();
    for (size_t i = 0; i < d; i += 16) {
        __m512 g = load16_m(p, f16, i, d);
        __mmask16 nz = _mm512_cmp_ps_mask(g, z, _CMP_NEQ_OQ);
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(g), vs, _CMP_EQ_OQ);
        if (nz & (__mmask16)~eq) {
            *inexact = 1;
            return;
        }
    }
}

/* One row x NQ (1..4) queries: 4 accumulators per query, one per code position. */
static inline __attribute__((always_inline)) void sk_row(const uint8_t *c, const uint8_t *pf, size_t dp,
                                                         const int8_t *x, int NQ, int32_t *dots)
{
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512i a[4][4];
    UNROLL
    for (int q = 0; q < 4; q++)
        a[q][0] = a[q][1] = a[q][2] = a[q][3] = _mm512_setzero_si512();
    for (size_t blk = 0; blk < dp / 256; blk++) {
        if (pf)
            _mm_prefetch((const char *)pf + blk * 64, _MM_HINT_T0);
        __m512i v = _mm512_loadu_si512((const void *)(c + blk * 64));
        __m512i c0 = _mm512_and_si512(v, m3), c1 = _mm512_and_si512(_mm512_srli_epi16(v, 2), m3);
        __m512i c2 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m3), c3 = _mm512_and_si512(_mm512_srli_epi16(v, 6), m3);
        UNROLL
        for (int q = 0; q < NQ; q++) {
            const int8_t *xq = x + (size_t)q * dp + blk * 256;
            __m512i x0 = _mm512_loadu_si512((const void *)xq), x1 = _mm512_loadu_si512((const void *)(xq + 64));
            __m512i x2 = _mm512_loadu_si512((const void *)(xq + 128)), x3 = _mm512_loadu_si512((const void *)(xq + 192));
            a[q][0] = _mm512_dpbusd_epi32(a[q][0], c0, x0);
            a[q][1] = _mm512_dpbusd_epi32(a[q][1], c1, x1);
            a[q][2] = _mm512_dpbusd_epi32(a[q][2], c2, x2);
            a[q][3] = _mm512_dpbusd_epi32(a[q][3], c3, x3);
        }
    }
    UNROLL
    for (int q = 0; q < NQ; q++)
        dots[q] = _mm512_reduce_add_epi32(
            _mm512_add_epi32(_mm512_add_epi32(a[q][0], a[q][1]), _mm512_add_epi32(a[q][2], a[q][3])));
}

/* Two rows x one query (the describe/walk case): the query loads are shared and the two
 * rows' chains interleave. */
static inline __attribute__((always_inline)) void sk_row2(const uint8_t *c, size_t rb, const uint8_t *pf,
                                                          size_t dp, const int8_t *x, int32_t *dots)
{
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const uint8_t *d = c + rb;
    for (size_t blk = 0; blk < dp / 256; blk++) {
        if (pf) {
            _mm_prefetch((const char *)pf + blk * 64, _MM_HINT_T0);
            _mm_prefetch((const char *)pf + rb + blk * 64, _MM_HINT_T0);
        }
        __m512i v = _mm512_loadu_si512((const void *)(c + blk * 64)), u = _mm512_loadu_si512((const void *)(d + blk * 64));
        const int8_t *xq = x + blk * 256;
        __m512i x0 = _mm512_loadu_si512((const void *)xq), x1 = _mm512_loadu_si512((const void *)(xq + 64));
        __m512i x2 = _mm512_loadu_si512((const void *)(xq + 128)), x3 = _mm512_loadu_si512((const void *)(xq + 192));
        __m512i v0 = _mm512_and_si512(v, m3), v1 = _mm512_and_si512(_mm512_srli_epi16(v, 2), m3);
        __m512i v2 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m3), v3 = _mm512_and_si512(_mm512_srli_epi16(v, 6), m3);
        __m512i u0 = _mm512_and_si512(u, m3), u1 = _mm512_and_si512(_mm512_srli_epi16(u, 2), m3);
        __m512i u2 = _mm512_and_si512(_mm512_srli_epi16(u, 4), m3), u3 = _mm512_and_si512(_mm512_srli_epi16(u, 6), m3);
        a0 = _mm512_dpbusd_epi32(a0, v0, x0);
        b0 = _mm512_dpbusd_epi32(b0, u0, x0);
        a1 = _mm512_dpbusd_epi32(a1, v1, x1);
        b1 = _mm512_dpbusd_epi32(b1, u1, x1);
        a2 = _mm512_dpbusd_epi32(a2, v2, x2);
        b2 = _mm512_dpbusd_epi32(b2, u2, x2);
        a3 = _mm512_dpbusd_epi32(a3, v3, x3);
        b3 = _mm512_dpbusd_epi32(b3, u3, x3);
    }
    dots[0] = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
    dots[1] = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(b0, b1), _mm512_add_epi32(b2, b3)));
}

LQ_SKETCH_ROWS_FN(sketch_rows, sk_row)

void lq_sketch_scores_avx512(const uint8_t *codes, const float *scale, size_t dp, size_t r0,
                             size_t r1, const int8_t *q8, const float *qs, const int32_t *qsum,
                             size_t nq, float *out, size_t out_stride)
{
    size_t rb = dp / 4, r = r0;
    if (nq == 1) /* two rows per pass share the query loads */
        for (; r + 2 <= r1; r += 2) {
            int32_t dots[2];
            const uint8_t *c = codes + r * rb;
            sk_row2(c, rb, r + LQ_SKETCH_PF_ROWS + 2 <= r1 ? c + LQ_SKETCH_PF_ROWS * rb : NULL, dp, q8, dots);
            out[r] = lq_sketch_out(dots[0], qsum[0], scale[r], qs[0]);
            out[r + 1] = lq_sketch_out(dots[1], qsum[0], scale[r + 1], qs[0]);
        }
    sketch_rows(codes, scale, dp, r, r1, q8, qs, qsum, nq, out, out_stride);
}
