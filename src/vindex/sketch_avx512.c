/* Gate prefilter sketch scores with AVX-512: a 2-bit sketch row is, per 16 components, a
 * mask of the +1 components and a mask of the -1 components; the approximate score is
 * scale * (sum of q over +1 - sum of q over -1): masked adds, no multiplies, 1/8 of an f16
 * row's bytes. Eight accumulators hide the add latency. */
#include <immintrin.h>

#include "vindex/vindex_internal.h"

void lq_vx_sketch_scores_avx512(const uint16_t *sk, const float *scale, size_t d, size_t r0, size_t r1,
                                const float *Q, size_t nq, float *out, size_t out_stride)
{
    size_t nc = d / 16;
    for (size_t r = r0; r < r1; r++) {
        const uint16_t *m = sk + r * nc * 2;
        for (size_t q = 0; q < nq; q++) {
            const float *x = Q + q * d;
            __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, n0 = p0, n1 = p0, n2 = p0, n3 = p0;
            size_t c = 0;
            for (; c + 4 <= nc; c += 4) {
                __m512 x0 = _mm512_loadu_ps(x + 16 * c), x1 = _mm512_loadu_ps(x + 16 * c + 16);
                __m512 x2 = _mm512_loadu_ps(x + 16 * c + 32), x3 = _mm512_loadu_ps(x + 16 * c + 48);
                p0 = _mm512_mask_add_ps(p0, m[2 * c], p0, x0);
                n0 = _mm512_mask_add_ps(n0, m[2 * c + 1], n0, x0);
                p1 = _mm512_mask_add_ps(p1, m[2 * c + 2], p1, x1);
                n1 = _mm512_mask_add_ps(n1, m[2 * c + 3], n1, x1);
                p2 = _mm512_mask_add_ps(p2, m[2 * c + 4], p2, x2);
                n2 = _mm512_mask_add_ps(n2, m[2 * c + 5], n2, x2);
                p3 = _mm512_mask_add_ps(p3, m[2 * c + 6], p3, x3);
                n3 = _mm512_mask_add_ps(n3, m[2 * c + 7], n3, x3);
            }
            for (; c < nc; c++) {
                __m512 x0 = _mm512_loadu_ps(x + 16 * c);
                p0 = _mm512_mask_add_ps(p0, m[2 * c], p0, x0);
                n0 = _mm512_mask_add_ps(n0, m[2 * c + 1], n0, x0);
            }
            __m512 p = _mm512_add_ps(_mm512_add_ps(p0, p1), _mm512_add_ps(p2, p3));
            __m512 n = _mm512_add_ps(_mm512_add_ps(n0, n1), _mm512_add_ps(n2, n3));
            out[q * out_stride + r] = scale[r] * _mm512_reduce_add_ps(_mm512_sub_ps(p, n));
        }
    }
}
