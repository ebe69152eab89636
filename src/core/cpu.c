/* cpuid + xgetbv feature detection. A feature counts only when the CPU has it AND the OS
 * saves the matching register state (XCR0): AVX needs XMM|YMM, AVX-512 also opmask, ZMM_Hi256
 * and Hi16_ZMM. Detected once (pthread_once), then read-only. */
#include "core/cpu.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static lq_cpu_features g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    lq_cpu_features f;
    memset(&f, 0, sizeof f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d, max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 1) {
        unsigned v[4] = {0, 0, 0, 0};
        __get_cpuid(0, &v[0], &v[1], &v[2], &v[3]);
        f.amd = v[1] == 0x68747541u && v[3] == 0x69746e65u && v[2] == 0x444d4163u;
    }
    if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
        unsigned base = (a >> 8) & 0xf;
        f.family = (int)(base == 0xf ? base + ((a >> 20) & 0xff) : base);
        int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
        uint64_t xcr0 = osxsave ? read_xcr0() : 0;
        int ymm_ok = osxsave && (xcr0 & 0x6) == 0x6;      /* XMM | YMM state */
        int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;     /* opmask | ZMM_Hi256 | Hi16_ZMM */
        if (ymm_ok && avx) {
            f.fma = (c >> 12) & 1;
            f.f16c = (c >> 29) & 1;
        }
        if (max_leaf >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            if (ymm_ok && avx) {
                f.avx2 = (b >> 5) & 1;
                f.bmi2 = (b >> 8) & 1;
            }
            if (zmm_ok && avx) {
                f.avx512f = (b >> 16) & 1;
                f.avx512dq = (b >> 17) & 1;
                f.avx512bw = (b >> 30) & 1;
                f.avx512vl = (b >> 31) & 1;
                f.avx512vnni = (c >> 11) & 1;
            }
            unsigned a1, b1, c1, d1;
            __cpuid_count(7, 1, a1, b1, c1, d1);
            (void)b1, (void)c1, (void)d1;
            if (ymm_ok && avx && a >= 1)
                f.avxvnni = (a1 >> 4) & 1;
        }
    }
#endif
    g_features = f;
}

const lq_cpu_features *lq_cpu_features_get(void)
{
    pthread_once(&g_once, detect);
    return &g_features;
}
