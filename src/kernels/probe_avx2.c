/* AVX2 read-bandwidth probe (lq_read_sum_fn): 256-bit loads into 4 independent sums, so
 * one thread is limited by memory, not by the adds (a scalar u64 loop is core-bound on one
 * thread and reported ~15% less than the kernels actually stream). */
#include <immintrin.h>

#include "kernels/kernels_internal.h"

uint64_t lq_read_sum_avx2(const uint8_t *p, size_t bytes)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)(void *)o, s);
    return o[0] + o[1] + o[2] + o[3];
}
