/* The bounded lm_head's q8 copy with its error bounds (lq_q8_bound_fn), AVX2 + F16C: as
 * q8bound_avx512.c (which says why), 8 values a step. */
#include <immintrin.h>
#include <math.h>

#include "kernels/kernels_internal.h"
#include "larql/gguf.h"

/* Σ (x - s*q)^2, Σ x^2, Σ (s*q)^2 of 4 lanes in double */
static inline __attribute__((always_inline)) void acc4(__m128 x, __m128 q, __m256d sc, __m256d *e2, __m256d *w2,
                                                       __m256d *q2)
{
    __m256d xd = _mm256_cvtps_pd(x), xq = _mm256_mul_pd(_mm256_cvtps_pd(q), sc), dd = _mm256_sub_pd(xd, xq);
    *e2 = _mm256_fmadd_pd(dd, dd, *e2);
    *w2 = _mm256_fmadd_pd(xd, xd, *w2);
    *q2 = _mm256_fmadd_pd(xq, xq, *q2);
}

static inline double hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

int lq_q8_bound_avx2(const lq_dense_mat *w, int8_t *q, float *scale, float *err, float *norm, int64_t r0,
                     int64_t r1)
{
    if (w->type != LQ_GGML_F16 || w->cols % 8)
        return lq_q8_bound_scalar(w, q, scale, err, norm, r0, r1);
    const int64_t C = w->cols;
    const double slack = lq_q8_bound_slack(C);
    const __m256 inf = _mm256_set1_ps(INFINITY), lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *src = (const uint16_t *)w->data + (size_t)r * (size_t)C;
        __m256 mx = _mm256_setzero_ps();
        int bad = 0;
        for (int64_t c = 0; c < C; c += 8) {
            __m256 a = _mm256_and_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + c))), absm);
            bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* inf or NaN */
            mx = _mm256_max_ps(mx, a);
        }
        if (bad) {
            int rc = lq_q8_bound_scalar(w, q, scale, err, norm, r, r + 1);
            if (rc)
                return rc;
            continue;
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
        const __m256 idv = _mm256_set1_ps(id);
        const __m256d sc = _mm256_set1_pd((double)d);
        __m256d e2 = _mm256_setzero_pd(), w2 = _mm256_setzero_pd(), q2 = _mm256_setzero_pd();
        int8_t *qr = q + (size_t)r * (size_t)C;
        for (int64_t c = 0; c < C; c += 8) {
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + c)));
            __m256 v = _mm256_round_ps(_mm256_mul_ps(x, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm256_min_ps(_mm256_max_ps(v, nlim), lim);
            __m256i i32 = _mm256_cvtps_epi32(v);
            __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
            _mm_storel_epi64((__m128i *)(qr + c), _mm_packs_epi16(p16, p16));
            if (err) {
                acc4(_mm256_castps256_ps128(x), _mm256_castps256_ps128(v), sc, &e2, &w2, &q2);
                acc4(_mm256_extractf128_ps(x, 1), _mm256_extractf128_ps(v, 1), sc, &e2, &w2, &q2);
            }
        }
        scale[r] = d;
        if (err) {
            double e = hsum_pd(e2), a = hsum_pd(w2), b = hsum_pd(q2);
            err[r] = lq_up_float(sqrt(e) * slack);
            norm[r] = lq_up_float(sqrt(a > b ? a : b) * slack);
        }
    }
    return 0;
}
