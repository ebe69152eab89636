/* down_meta candidates with AVX2 (lq_dm_block_fn; layouts in kernels.h): the int8 x ternary
 * GEMM logits[v, f] = E[v] . W_down[:, f] for the whole vocabulary, on CPUs without AVX-512
 * VNNI (without this the builder scans in f32, several times slower).
 *
 * Micro-kernel: 16 vocabulary rows (one 16-row lane panel of Ep, two ymm of 8 rows) x 4
 * features = 8 int32 accumulators; per step of 4 components, one 4-byte group of trits per
 * feature is broadcast, vpmaddubsw multiplies it with 4 components of 8 rows (u8 x s8 into
 * int16 pairs: |pair| <= 2 x 255, no saturation with trits) and vpmaddwd against ones sums
 * each row's 4 products into its int32 lane. The dot is exact, so the candidates and values
 * are bit for bit those of the AVX-512 kernel and the scalar reference. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_internal.h"

#define NRF 4

void lq_dm_block_avx2(const uint8_t *Ep, const float *escale, const uint8_t *keep, int V, int v0, int nv,
                      const int8_t *Bt, const int32_t *colsum, int Fp, int D4, int Kc, uint32_t *ids, float *vals)
{
    const size_t panel = (size_t)D4 * 16; /* bytes of one 16-row lane panel */
    const int ksteps = D4 / 4;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int f0 = 0; f0 < Fp; f0 += NRF) {
        const int8_t *B = Bt + (size_t)f0 * D4;
        for (int vb = v0; vb < v0 + nv; vb += 16) {
            const uint8_t *A = Ep + (size_t)(vb / 16) * panel;
            /* named accumulators: arrays of vectors make GCC spill every iteration */
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
            __m256i b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            const int8_t *B0 = B;
            for (int kk = 0; kk < ksteps; kk++, B0 += 4) {
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)(A + (size_t)kk * 64));
                const __m256i x1 = _mm256_loadu_si256((const __m256i *)(A + (size_t)kk * 64 + 32));
#define S(j)                                                                                       \
    {                                                                                              \
        int32_t w;                                                                                 \
        memcpy(&w, B0 + (size_t)(j) * D4, 4);                                                      \
        const __m256i bw = _mm256_set1_epi32(w);                                                   \
        a##j = _mm256_add_epi32(a##j, _mm256_madd_epi16(_mm256_maddubs_epi16(x0, bw), ones));      \
        b##j = _mm256_add_epi32(b##j, _mm256_madd_epi16(_mm256_maddubs_epi16(x1, bw), ones));      \
    }
                S(0) S(1) S(2) S(3)
#undef S
            }
            const __m256i c0[NRF] = {a0, a1, a2, a3}, c1[NRF] = {b0, b1, b2, b3};
            const __m256 s0 = _mm256_loadu_ps(escale + vb), s1 = _mm256_loadu_ps(escale + vb + 8);
            int k0 = 0, k1 = 0;
            for (int i = 0; i < 8; i++) {
                k0 |= (vb + i < V && keep[vb + i]) << i;
                k1 |= (vb + 8 + i < V && keep[vb + 8 + i]) << i;
            }
            for (int j = 0; j < NRF; j++) {
                const int f = f0 + j;
                float *fv = vals + (size_t)f * Kc;
                uint32_t *fi = ids + (size_t)f * Kc;
                const __m256i corr = _mm256_set1_epi32(128 * colsum[f]);
                const __m256 x0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c0[j], corr)), s0);
                const __m256 x1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c1[j], corr)), s1);
                const __m256 thr = _mm256_set1_ps(fv[Kc - 1]);
                const int m0 = _mm256_movemask_ps(_mm256_cmp_ps(x0, thr, _CMP_GT_OQ)) & k0;
                const int m1 = _mm256_movemask_ps(_mm256_cmp_ps(x1, thr, _CMP_GT_OQ)) & k1;
                if (!(m0 | m1))
                    continue;
                float t0[8], t1[8];
                _mm256_storeu_ps(t0, x0);
                _mm256_storeu_ps(t1, x1);
                for (int i = 0; i < 8; i++) /* in vocabulary order; thresholds rise */
                    if ((m0 >> i & 1) && t0[i] > fv[Kc - 1])
                        lq_dm_cand_insert(fi, fv, Kc, (uint32_t)(vb + i), t0[i]);
                for (int i = 0; i < 8; i++)
                    if ((m1 >> i & 1) && t1[i] > fv[Kc - 1])
                        lq_dm_cand_insert(fi, fv, Kc, (uint32_t)(vb + 8 + i), t1[i]);
            }
        }
    }
}
