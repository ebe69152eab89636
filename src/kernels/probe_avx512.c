/* AVX-512 VNNI int8 peak probe (lq_mac_peak_fn): 12 independent vpdpbusd chains (latency x
 * throughput of current cores is <= 12), 64 multiply-accumulates each per round. */
#include <immintrin.h>

#include "kernels/kernels_internal.h"

uint32_t lq_mac_peak_avx512(int64_t iters)
{
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
    __m512i acc[12];
    for (int i = 0; i < 12; i++)
        acc[i] = _mm512_set1_epi32(i);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
        __asm__ volatile("" : "+v"(a), "+v"(b)); /* keeps the loop from being folded */
    }
    __m512i s = acc[0];
    for (int i = 1; i < 12; i++)
        s = _mm512_add_epi32(s, acc[i]);
    return (uint32_t)_mm512_reduce_add_epi32(s);
}
