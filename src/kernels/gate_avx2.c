/* AVX2/FMA/F16C gate scoring (lq_gate_scores_fn): 4 queries per pass over a row so each
 * row is loaded once per group of queries; f16 rows are widened in registers (no decoded
 * copy). Every (row, query) score is accumulated in the same order whatever the call's shape,
 * as in gate_avx512.c. */
#include <immintrin.h>

#include "kernels/kernels_internal.h"

static inline float hsum(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

static inline __m256 load_row(const uint8_t *p, int f16, size_t i)
{
    if (f16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
    return _mm256_loadu_ps((const float *)(p + 4 * i));
}

/* Row p against NQ (1..4) queries at x, x + d, ...: two accumulators per (row, query) (even
 * and odd 8-wide chunks, so one query alone is not bound by the FMA latency), combined the
 * same way whatever NQ is, so a score's sum is the same whether its query went in a group of
 * four or alone (the prefilter re-scores rows alone and compares them with the full scan's). */
static inline __attribute__((always_inline)) void row_scores(const uint8_t *p, int f16, size_t d, size_t d8,
                                                             const float *x, int NQ, float *out, size_t os)
{
    __m256 a[4][2];
    for (int q = 0; q < NQ; q++)
        a[q][0] = a[q][1] = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= d8; i += 16) {
        __m256 w0 = load_row(p, f16, i), w1 = load_row(p, f16, i + 8);
        for (int q = 0; q < NQ; q++) {
            a[q][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)q * d + i), a[q][0]);
            a[q][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + (size_t)q * d + i + 8), a[q][1]);
        }
    }
    if (i < d8) {
        __m256 w0 = load_row(p, f16, i);
        for (int q = 0; q < NQ; q++)
            a[q][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (size_t)q * d + i), a[q][0]);
    }
    for (int q = 0; q < NQ; q++) {
        float sc = hsum(_mm256_add_ps(a[q][0], a[q][1]));
        for (size_t k = d8; k < d; k++)
            sc += lq_gate_elem(p, f16, k) * x[(size_t)q * d + k];
        out[(size_t)q * os] = sc;
    }
}

void lq_gate_scores_avx2(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                         const float *Q, size_t nq, float *out, size_t out_stride)
{
    size_t esz = f16 ? 2 : 4, d8 = d & ~(size_t)7;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *p = (const uint8_t *)rows + r * d * esz;
        size_t q = 0;
        for (; q + 4 <= nq; q += 4)
            row_scores(p, f16, d, d8, Q + q * d, 4, out + q * out_stride + r, out_stride);
        switch (nq - q) {
        case 3: row_scores(p, f16, d, d8, Q + q * d, 3, out + q * out_stride + r, out_stride); break;
        case 2: row_scores(p, f16, d, d8, Q + q * d, 2, out + q * out_stride + r, out_stride); break;
        case 1: row_scores(p, f16, d, d8, Q + q * d, 1, out + q * out_stride + r, out_stride); break;
        default: break;
        }
    }
}
