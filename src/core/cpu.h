/* Run-time CPU feature detection (cpuid + xgetbv: the OS must also save the wider registers). */
#ifndef LQ_CORE_CPU_H
#define LQ_CORE_CPU_H

typedef struct lq_cpu_features {
    int avx2, fma, f16c, bmi2; /* bmi2: the *_avx2.c files are compiled with -mbmi2 */
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni;
    int avxvnni;
} lq_cpu_features;

const lq_cpu_features *lq_cpu_features_get(void);

#endif
