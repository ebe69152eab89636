/* AVX-512 gate scoring (lq_gate_scores_fn). Rows are streamed in order, one at a time (one sequential stream
 * over the gate file, what the hardware prefetchers follow best); each (row, query) dot
 * product runs on 4 accumulators (16-wide chunks i = 0, 1, 2, 3 mod 4) to hide the FMA
 * latency, and a row is scored against up to 4 queries per pass (16 accumulators), so it is
 * loaded once per 4 queries. f16 rows are widened in registers with vcvtph2ps (no decoded
 * copy); the last d % 16 components go through a masked load.
 *
 * The hardware prefetchers stop at 4 KB page boundaries and the gate file is a page-cache
 * mapping in 4 KB pages, so every row also prefetches by hand the bytes LQ_GATE_PF_BYTES ahead
 * of where it reads, on the CPUs where that pays (lq_gate_prefetch).
 *
 * Every (row, query) score is accumulated in the same order whatever the call's shape (the
 * 4 chunk accumulators, combined as (a0 + a1) + (a2 + a3), then one horizontal sum), so a row
 * scored alone (the prefilter's exact re-scoring) is bit-identical to the same row scored in
 * a full scan. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define UNROLL _Pragma("GCC unroll 4")

#ifndef LQ_GATE_PF_BYTES
#define LQ_GATE_PF_BYTES 8192 /* software prefetch distance along the row stream */
#endif

static inline __m512 load16(const uint8_t *p, int f16, size_t i)
{
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2 * i)));
    return _mm512_loadu_ps((const float *)(const void *)(p + 4 * i));
}

static inline __m512 load16_m(const uint8_t *p, int f16, size_t i, __mmask16 m)
{
    if (f16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
    return _mm512_maskz_loadu_ps(m, p + 4 * i);
}

/* Scores row p against NQ (1..4) queries x[0..NQ) into out[0..NQ). pf_end: prefetch only
 * below this address (the end of the caller's rows). */
static inline __attribute__((always_inline)) void row_scores(const uint8_t *p, const uint8_t *pf_end, int f16,
                                                             size_t d, const float *x, size_t xs, int NQ,
                                                             float *out, size_t os)
{
    size_t esz = f16 ? 2 : 4, d64 = d & ~(size_t)63;
    __m512 a[4][4];
    UNROLL
    for (int q = 0; q < 4; q++)
        for (int s = 0; s < 4; s++)
            a[q][s] = _mm512_setzero_ps();
    const uint8_t *pf = p + LQ_GATE_PF_BYTES;
    size_t i = 0;
    for (; i < d64; i += 64) {
        if (pf + i * esz + 64 * esz <= pf_end) {
            _mm_prefetch((const char *)pf + i * esz, _MM_HINT_T0);
            if (esz == 4) {
                _mm_prefetch((const char *)pf + i * esz + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)pf + i * esz + 128, _MM_HINT_T0);
                _mm_prefetch((const char *)pf + i * esz + 192, _MM_HINT_T0);
            } else {
                _mm_prefetch((const char *)pf + i * esz + 64, _MM_HINT_T0);
            }
        }
        __m512 w0 = load16(p, f16, i), w1 = load16(p, f16, i + 16), w2 = load16(p, f16, i + 32),
               w3 = load16(p, f16, i + 48);
        UNROLL
        for (int q = 0; q < NQ; q++) {
            const float *xq = x + (size_t)q * xs + i;
            a[q][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xq), a[q][0]);
            a[q][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xq + 16), a[q][1]);
            a[q][2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(xq + 32), a[q][2]);
            a[q][3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(xq + 48), a[q][3]);
        }
    }
    /* the rest: chunk d64 + 16k goes to accumulator k (k < 4), the last one masked;
     * constant indices keep the accumulators in registers */
#define REST(k)                                                                                    \
    if (d64 + 16 * (k) < d) {                                                                      \
        size_t j = d64 + 16 * (k), n = d - j < 16 ? d - j : 16;                                    \
        __mmask16 m = (__mmask16)(n == 16 ? 0xFFFFu : (1u << n) - 1);                              \
        __m512 w = load16_m(p, f16, j, m);                                                         \
        UNROLL                                                                                     \
        for (int q = 0; q < NQ; q++)                                                               \
            a[q][k] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, x + (size_t)q * xs + j), a[q][k]); \
    }
    REST(0)
    REST(1)
    REST(2)
    REST(3)
#undef REST
    UNROLL
    for (int q = 0; q < NQ; q++)
        out[(size_t)q * os] = _mm512_reduce_add_ps(
            _mm512_add_ps(_mm512_add_ps(a[q][0], a[q][1]), _mm512_add_ps(a[q][2], a[q][3])));
}

/* One out-of-line copy per query count (1..4), each with NQ a constant so it unrolls. */
#define ROW_FN(N)                                                                                  \
    static void row##N(const uint8_t *p, const uint8_t *e, int f16, size_t d, const float *x,     \
                       size_t xs, float *o, size_t os)                                             \
    {                                                                                              \
        row_scores(p, e, f16, d, x, xs, N, o, os);                                                 \
    }
ROW_FN(1)
ROW_FN(2)
ROW_FN(3)
ROW_FN(4)
#undef ROW_FN

void lq_gate_scores_avx512(const void *rows, int f16, size_t d, size_t r0, size_t r1,
                           const float *Q, size_t nq, float *out, size_t out_stride)
{
    static void (*const fns[5])(const uint8_t *, const uint8_t *, int, size_t, const float *, size_t, float *,
                                size_t) = {NULL, row1, row2, row3, row4};
    const uint8_t *base = rows;
    size_t rb = d * (f16 ? 2 : 4);
    /* no prefetch: every row's prefetch bound is the start of the rows (dispatch.c says
     * where the hand prefetch pays) */
    const uint8_t *end = lq_gate_prefetch() ? base + r1 * rb : base;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *p = base + r * rb;
        for (size_t q = 0; q < nq; q += 4) {
            size_t n = nq - q < 4 ? nq - q : 4;
            /* only the first query group prefetches: the row is in cache for the others */
            fns[n](p, q == 0 ? end : base, f16, d, Q + q * d, d, out + q * out_stride + r, out_stride);
        }
    }
}
