/* Scalar roofline probes (lq_read_sum_fn, lq_mac_peak_fn in kernels.h): the plain-C stream
 * sum a CPU without AVX2 reads with, and the definition the int8 peak probe is tested
 * against. */
#include "kernels/kernels_internal.h"

uint64_t lq_read_sum_scalar(const uint8_t *p, size_t bytes)
{
    const uint64_t *q = (const uint64_t *)(const void *)p; /* [bytes / 8], aligned by contract */
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= bytes / 8; i += 4) {
        s0 += q[i];
        s1 += q[i + 1];
        s2 += q[i + 2];
        s3 += q[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

uint32_t lq_mac_peak_scalar(int64_t iters)
{
    uint32_t total = 0;
    for (int c = 0; c < 12; c++)
        for (int lane = 0; lane < 16; lane++) {
            uint32_t acc = (uint32_t)c;
            for (int64_t it = 0; it < iters; it++)
                for (int k = 0; k < 4; k++)
                    acc += (uint32_t)(3 * -5); /* u8 3 x s8 -5, wrapped like the int32 lane */
            total += acc;
        }
    return total;
}
