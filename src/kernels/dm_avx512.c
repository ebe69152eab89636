/* down_meta candidates with AVX-512 VNNI (lq_dm_block_fn; layouts in kernels.h): the
 * int8 x ternary GEMM logits[v, f] = E[v] . W_down[:, f] for the whole vocabulary.
 *
 * Micro-kernel: 32 vocabulary rows (2 zmm, two 16-row lane panels of Ep) x 12 features = 24
 * int32 accumulators; per step of 4 components, one 4-byte group of trits per feature is
 * broadcast and vpdpbusd multiplies it with 4 components of 16 rows at once. The int8 error
 * (~1% of a logit's spread) only decides candidates; the builder re-scores them in f32. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define NRF 12

void lq_dm_block_avx512(const uint8_t *Ep, const float *escale, const uint8_t *keep, int V,
                        int v0, int nv, const int8_t *Bt, const int32_t *colsum, int Fp, int D4,
                        int Kc, uint32_t *ids, float *vals)
{
    const size_t panel = (size_t)D4 * 16; /* bytes of one 16-row lane panel */
    const int ksteps = D4 / 4;
    for (int f0 = 0; f0 < Fp; f0 += NRF) {
        const int8_t *B = Bt + (size_t)f0 * D4;
        for (int vb = v0; vb < v0 + nv; vb += 32) {
            const uint8_t *A0 = Ep + (size_t)(vb / 16) * panel, *A1 = A0 + panel;
            /* 24 named accumulators: arrays of vectors make GCC spill every iteration */
#define Z(j) __m512i a##j = _mm512_setzero_si512(), b##j = _mm512_setzero_si512();
            Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11)
#undef Z
            const int8_t *B0 = B;
            for (int kk = 0; kk < ksteps; kk++, B0 += 4) {
                __m512i x0 = _mm512_loadu_si512((const void *)(A0 + (size_t)kk * 64));
                __m512i x1 = _mm512_loadu_si512((const void *)(A1 + (size_t)kk * 64));
#define S(j)                                                                                   \
    {                                                                                          \
        int32_t w;                                                                             \
        memcpy(&w, B0 + (size_t)(j) * D4, 4);                                                  \
        __m512i bw = _mm512_set1_epi32(w);                                                     \
        a##j = _mm512_dpbusd_epi32(a##j, x0, bw);                                              \
        b##j = _mm512_dpbusd_epi32(b##j, x1, bw);                                              \
    }
                S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11)
#undef S
            }
            __m512i c0[NRF] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
            __m512i c1[NRF] = {b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11};
            __m512 s0 = _mm512_loadu_ps(escale + vb), s1 = _mm512_loadu_ps(escale + vb + 16);
            __mmask16 k0 = 0, k1 = 0;
            for (int i = 0; i < 16; i++) {
                k0 |= (__mmask16)((vb + i < V && keep[vb + i]) << i);
                k1 |= (__mmask16)((vb + 16 + i < V && keep[vb + 16 + i]) << i);
            }
            for (int j = 0; j < NRF; j++) {
                int f = f0 + j;
                float *fv = vals + (size_t)f * Kc;
                uint32_t *fi = ids + (size_t)f * Kc;
                __m512i corr = _mm512_set1_epi32(128 * colsum[f]);
                __m512 x0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c0[j], corr)), s0);
                __m512 x1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c1[j], corr)), s1);
                __m512 thr = _mm512_set1_ps(fv[Kc - 1]);
                __mmask16 m0 = _mm512_mask_cmp_ps_mask(k0, x0, thr, _CMP_GT_OQ);
                __mmask16 m1 = _mm512_mask_cmp_ps_mask(k1, x1, thr, _CMP_GT_OQ);
                if (!(m0 | m1))
                    continue;
                float t0[16], t1[16];
                _mm512_storeu_ps(t0, x0);
                _mm512_storeu_ps(t1, x1);
                for (int i = 0; i < 16; i++) /* in vocabulary order; thresholds rise */
                    if ((m0 >> i & 1) && t0[i] > fv[Kc - 1])
                        lq_dm_cand_insert(fi, fv, Kc, (uint32_t)(vb + i), t0[i]);
                for (int i = 0; i < 16; i++)
                    if ((m1 >> i & 1) && t1[i] > fv[Kc - 1])
                        lq_dm_cand_insert(fi, fv, Kc, (uint32_t)(vb + 16 + i), t1[i]);
            }
        }
    }
}
