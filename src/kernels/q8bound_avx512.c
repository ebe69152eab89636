/* The bounded lm_head's q8 copy with its error bounds (lq_q8_bound_fn), AVX-512: the 2B-4T
 * head is 328M f16 values, built once per open; the scalar reference takes ~1 s on two
 * threads, which the first tokens of a run paid while it was built beside them. q and scale
 * are the reference's bit for bit (the same float expressions, round half to even); the
 * double sums differ from it only in their order (see lq_q8_bound_slack). Rows of another
 * type, a width that is not a multiple of 16, or a non-finite value go to the reference. */
#include <immintrin.h>
#include <math.h>

#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

/* Σ (x - s*q)^2, Σ x^2, Σ (s*q)^2 of 8 lanes in double (x, q as float) */
static inline __attribute__((always_inline)) void acc8(__m256 x, __m256 q, __m512d sc, __m512d *e2, __m512d *w2,
                                                       __m512d *q2)
{
    __m512d xd = _mm512_cvtps_pd(x), xq = _mm512_mul_pd(_mm512_cvtps_pd(q), sc), dd = _mm512_sub_pd(xd, xq);
    *e2 = _mm512_fmadd_pd(dd, dd, *e2);
    *w2 = _mm512_fmadd_pd(xd, xd, *w2);
    *q2 = _mm512_fmadd_pd(xq, xq, *q2);
}

int lq_q8_bound_avx512(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                       int64_t r1)
{
    if (w->type != LQ_GGML_F16 || w->cols % 16)
        return lq_q8_bound_scalar(w, q, scale, err, norm, r0, r1);
    const int64_t C = w->cols;
    const double slack = lq_q8_bound_slack(C);
    const __m512 inf = _mm512_set1_ps(INFINITY), lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *src = (const uint16_t *)w->data + (size_t)r * (size_t)C;
        __m512 mx = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int64_t c = 0; c < C; c += 16) {
            __m512 a = _mm512_abs_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + c))));
            bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ); /* inf or NaN */
            mx = _mm512_max_ps(mx, a);
        }
        if (bad) {
            int rc = lq_q8_bound_scalar(w, q, scale, err, norm, r, r + 1);
            if (rc)
                return rc;
            continue;
        }
        float amax = _mm512_reduce_max_ps(mx);
        float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        const __m512 idv = _mm512_set1_ps(id);
        const __m512d sc = _mm512_set1_pd((double)d);
        __m512d e2 = _mm512_setzero_pd(), w2 = _mm512_setzero_pd(), q2 = _mm512_setzero_pd();
        int8_t *qr = q + (size_t)r * (size_t)C;
        for (int64_t c = 0; c < C; c += 16) {
            __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + c)));
            __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(x, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm512_min_ps(_mm512_max_ps(v, nlim), lim);
            _mm_storeu_si128((__m128i *)(qr + c), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
            if (err) {
                acc8(_mm512_castps512_ps256(x), _mm512_castps512_ps256(v), sc, &e2, &w2, &q2);
                acc8(_mm512_extractf32x8_ps(x, 1), _mm512_extractf32x8_ps(v, 1), sc, &e2, &w2, &q2);
            }
        }
        scale[r] = d;
        if (err) {
            double e = _mm512_reduce_add_pd(e2), a = _mm512_reduce_add_pd(w2), b = _mm512_reduce_add_pd(q2);
            err[r] = lq_up_float(sqrt(e) * slack);
            norm[r] = lq_up_float(sqrt(a > b ? a : b) * slack);
        }
    }
    return 0;
}
