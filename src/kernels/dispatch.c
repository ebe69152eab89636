/* Run-time choice of the kernel set. LQ_KERNELS=scalar|avx2|avx512 forces one (if this CPU
 * supports it; otherwise the best supported set is used), which is how benchmarks and bug
 * reports compare sets on one machine. */
#include <pthread.h>
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

int lq_kernels_is_name(const char *name)
{
    return name && (!strcmp(name, "scalar") || !strcmp(name, "avx2") || !strcmp(name, "avx512"));
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

/* Rows per tile of the one-token I2_S matvec. Decode streams weights from DRAM, and how many
 * interleaved row streams the hardware prefetchers follow best differs by core: measured 2 on
 * a Zen 5 (family 0x1A) EPYC, 4 on a Zen 4 (family 0x19) EPYC (~10% more bandwidth than 2
 * there in a kernel microbenchmark that streamed repeated data; the engine A/B is within this
 * VM's noise).
 * LQ_I2S_DECODE_ROWS=1..4 overrides, for measuring other machines. */
static int g_decode_rows;
static pthread_once_t g_rows_once = PTHREAD_ONCE_INIT;

static void choose_decode_rows(void)
{
    const lq_cpu_features *f = lq_cpu_features_get();
    int rows = f->amd && f->family == 0x19 ? 4 : LQ_I2S_DECODE_ROWS;
    const char *env = getenv("LQ_I2S_DECODE_ROWS");
    if (env && env[0] >= '1' && env[0] <= '4' && env[1] == 0)
        rows = env[0] - '0';
    g_decode_rows = rows;
}

int lq_i2s_decode_rows(void)
{
    pthread_once(&g_rows_once, choose_decode_rows);
    return g_decode_rows;
}

/* The AVX-512 gate scan's software prefetch (LQ_GATE_PF_BYTES ahead along the row stream).
 * Measured on a Zen 4 (family 0x19) EPYC, a 2B-shaped f16 vindex (1.06 GB of gates, page
 * cache mapping), one query: 93 ms with it, 53 ms without at one thread (38 vs 53 ms at
 * two); for ten queries 266 vs 289 ms. So it is off there and on elsewhere (where it was
 * introduced: the hardware prefetchers stop at 4 KB page boundaries). LQ_GATE_PREFETCH=0|1
 * overrides, for measuring other machines. The arithmetic is the same either way. */
static int g_gate_pf;
static pthread_once_t g_pf_once = PTHREAD_ONCE_INIT;

static void choose_gate_prefetch(void)
{
    const lq_cpu_features *f = lq_cpu_features_get();
    int on = !(f->amd && f->family == 0x19);
    const char *env = getenv("LQ_GATE_PREFETCH");
    if (env && (env[0] == '0' || env[0] == '1') && env[1] == 0)
        on = env[0] == '1';
    g_gate_pf = on;
}

int lq_gate_prefetch(void)
{
    pthread_once(&g_pf_once, choose_gate_prefetch);
    return g_gate_pf;
}
