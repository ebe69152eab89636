/* Run-time CPU feature detection (cpuid + xgetbv: the OS must also save the wider registers). */
#ifndef LQ_CORE_CPU_H
#define LQ_CORE_CPU_H

typedef struct lq_cpu_features {
    int avx2, fma, f16c, bmi2; /* bmi2: the *_avx2.c files are compiled with -mbmi2 */
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni;
    int avxvnni;
    int amd;    /* vendor string "AuthenticAMD" */
    int family; /* display family (base + extended), e.g. 0x19 Zen 3/4, 0x1A Zen 5 */
} lq_cpu_features;

const lq_cpu_features *lq_cpu_features_get(void);

#endif
