/* Run-time choice of the kernel set. LQ_KERNELS=scalar|avx2|avx512 forces one (if this CPU
 * supports it; otherwise the best supported set is used), which is how benchmarks and bug
 * reports compare sets on one machine. */
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/kernels_internal.h"

static int avx2_ok(const lq_cpu_features *f)
{
    return f->avx2 && f->fma && f->f16c && f->bmi2;
}

/* kernels_avx512.c is compiled with F/BW/VL/DQ/VNNI (plus the AVX2 set). */
static int avx512_ok(const lq_cpu_features *f)
{
    return avx2_ok(f) && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni;
}

const lq_kernels *lq_kernels_by_name(const char *name)
{
    if (!name)
        return NULL;
    const lq_cpu_features *f = lq_cpu_features_get();
    if (!strcmp(name, "scalar"))
        return &lq_kernels_scalar;
    if (!strcmp(name, "avx2"))
        return avx2_ok(f) ? &lq_kernels_avx2 : NULL;
    if (!strcmp(name, "avx512"))
        return avx512_ok(f) ? &lq_kernels_avx512 : NULL;
    return NULL;
}

const lq_kernels *lq_kernels_best(void)
{
    const char *env = getenv("LQ_KERNELS");
    if (env && *env) {
        const lq_kernels *k = lq_kernels_by_name(env);
        if (k)
            return k;
    }
    const lq_cpu_features *f = lq_cpu_features_get();
    if (avx512_ok(f))
        return &lq_kernels_avx512;
    if (avx2_ok(f))
        return &lq_kernels_avx2;
    return &lq_kernels_scalar;
}
