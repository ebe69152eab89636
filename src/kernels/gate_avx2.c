/* AVX2/FMA/F16C gate scoring (lq_gate_scores_fn): 4 queries per pass over a row so each
 * row is loaded once per group of queries; f16 rows are widened in registers (no decoded
 * copy). */
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

void lq_gate_scores_avx2(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                         const float *Q, size_t nq, float *out, size_t out_stride)
{
    size_t esz = f16 ? 2 : 4, d8 = d & ~(size_t)7;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *p = (const uint8_t *)rows + r * d * esz;
        size_t q = 0;
        for (; q + 4 <= nq; q += 4) {
            const float *x0 = Q + q * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (size_t i = 0; i < d8; i += 8) {
                __m256 w = load_row(p, f16, i);
                a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x0 + i), a0);
                a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x1 + i), a1);
                a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x2 + i), a2);
                a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x3 + i), a3);
            }
            float s0 = hsum(a0), s1 = hsum(a1), s2 = hsum(a2), s3 = hsum(a3);
            for (size_t i = d8; i < d; i++) {
                float w = lq_gate_elem(p, f16, i);
                s0 += w * x0[i], s1 += w * x1[i], s2 += w * x2[i], s3 += w * x3[i];
            }
            out[q * out_stride + r] = s0;
            out[(q + 1) * out_stride + r] = s1;
            out[(q + 2) * out_stride + r] = s2;
            out[(q + 3) * out_stride + r] = s3;
        }
        for (; q < nq; q++) {
            const float *x = Q + q * d;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0;
            size_t i = 0;
            for (; i + 16 <= d8; i += 16) {
                a0 = _mm256_fmadd_ps(load_row(p, f16, i), _mm256_loadu_ps(x + i), a0);
                a1 = _mm256_fmadd_ps(load_row(p, f16, i + 8), _mm256_loadu_ps(x + i + 8), a1);
            }
            for (; i < d8; i += 8)
                a0 = _mm256_fmadd_ps(load_row(p, f16, i), _mm256_loadu_ps(x + i), a0);
            float s = hsum(_mm256_add_ps(a0, a1));
            for (; i < d; i++)
                s += lq_gate_elem(p, f16, i) * x[i];
            out[q * out_stride + r] = s;
        }
    }
}
