/* Roofline microbenchmarks shared by every benchmark (bench_kernels, bench_engine,
 * bench_vindex), so that all figures answer to the same references:
 *
 *   - read bandwidth: T threads each stream a disjoint half of a 1 GiB buffer (far larger
 *     than any cache) with 256-bit vector loads and 4 independent sums. An earlier version
 *     summed 64-bit words with scalar adds, which is core-bound on one thread and reported
 *     ~15% less than what the kernels actually stream.
 *   - int8 MAC peak: 12 independent vpdpbusd zmm chains per thread (no memory traffic).
 *   - the load average, printed next to every figure: the machine is shared, and a busy
 *     neighbour lowers both the references and the measured figures.
 *
 * Each function returns the median of `runs` passes and reports min and max. Header-only
 * (static functions) so that benchmarks need nothing beyond the library. */
#ifndef LQ_BENCH_MEMBW_H
#define LQ_BENCH_MEMBW_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kernels/kernels.h"

typedef struct lq_bw_stat {
    double med, min, max;
} lq_bw_stat;

static inline double lq_bw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline int lq_bw_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline lq_bw_stat lq_bw_stats(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, lq_bw_cmp);
    lq_bw_stat s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

/* 1-minute load average (-1 if unknown). */
/* Whether section is one of the comma-separated names of list (NULL or empty: every section):
 * the benchmarks' --only / LQ_BENCH_ONLY. */
static inline int lq_bench_want(const char *list, const char *section)
{
    if (!list || !*list)
        return 1;
    size_t n = strlen(section);
    for (const char *p = list; (p = strstr(p, section)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

static inline double lq_bench_loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

typedef struct lq_bw_job {
    const uint8_t *p;   /* [bytes], 64-byte aligned */
    size_t bytes;
    uint64_t sum;
    int64_t iters;      /* MAC peak: loop count */
} lq_bw_job;

/* The probes are the kernel set's (kernels.h: read_sum, mac_peak), chosen by the library's
 * dispatcher like every kernel, so the benchmarks carry no SIMD or CPU checks of their own. */
static void *lq_bw_worker(void *arg)
{
    lq_bw_job *j = arg;
    j->sum = lq_kernels_best()->read_sum(j->p, j->bytes);
    return NULL;
}

/* Runs fn on `threads` jobs at once; returns seconds. */
static inline double lq_bw_run(void *(*fn)(void *), lq_bw_job *jobs, int threads)
{
    pthread_t th[64];
    double a = lq_bw_now();
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&th[t], NULL, fn, &jobs[t]) == 0)
            started |= 1 << (t & 31);
        else
            fn(&jobs[t]);
    fn(&jobs[0]);
    for (int t = 1; t < threads; t++)
        if (started & (1 << (t & 31)))
            pthread_join(th[t], NULL);
    return lq_bw_now() - a;
}

/* A buffer for read-bandwidth passes: 1 GiB (far larger than any cache) in 2 MB pages, as
 * the engine holds its weights: with 4 KB pages the hardware prefetcher stops at every page
 * and the figure under-reports what the machine can stream. NULL on failure. */
static inline uint8_t *lq_bw_buf_new(size_t *bytes)
{
    *bytes = (size_t)1 << 30;
    uint8_t *buf = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(buf, *bytes, MADV_HUGEPAGE);
#endif
    memset(buf, 1, *bytes); /* faults every page in before timing */
    return buf;
}

/* One read pass over buf with `threads` threads (1..32): GB/s. Benchmarks call it right
 * before each timed run, so that a run's fraction of the roofline compares two figures
 * taken under the same load from neighbours. */
static inline double lq_bw_buf_read(const uint8_t *buf, size_t bytes, int threads)
{
    lq_bw_job jobs[32];
    size_t per = bytes / (size_t)threads / 128 * 128;
    for (int t = 0; t < threads; t++)
        jobs[t] = (lq_bw_job){buf + per * (size_t)t, per, 0, 0};
    double s = lq_bw_run(lq_bw_worker, jobs, threads);
    uint64_t total = 0;
    for (int t = 0; t < threads; t++)
        total += jobs[t].sum;
    double gbs = (double)per * threads / s / 1e9;
    return total == 42 ? gbs + 1e-12 : gbs; /* keeps the sums live */
}

/* Read bandwidth in GB/s with `threads` threads (1..32): median/min/max of `runs` passes
 * over 1 GiB. All zero on failure. */
static inline lq_bw_stat lq_bench_read_bw_stat(int threads, int runs)
{
    lq_bw_stat z = {0, 0, 0};
    if (threads < 1 || threads > 32 || runs < 1 || runs > 64)
        return z;
    size_t bytes;
    uint8_t *buf = lq_bw_buf_new(&bytes);
    if (!buf)
        return z;
    double v[64];
    for (int r = 0; r < runs; r++)
        v[r] = lq_bw_buf_read(buf, bytes, threads);
    munmap(buf, bytes);
    return lq_bw_stats(v, runs);
}

/* The median read bandwidth (GB/s) of 5 passes (kept for callers that want one figure). */
static inline double lq_bench_read_bw(int threads)
{
    return lq_bench_read_bw_stat(threads, 5).med;
}

static void *lq_peak_worker(void *arg)
{
    lq_bw_job *j = arg;
    j->sum = lq_kernels_best()->mac_peak(j->iters);
    return NULL;
}

/* int8 multiply-accumulates per second (G MAC/s) with `threads` threads of the kernel set's
 * peak probe (AVX-512 VNNI); all zero when the set has none. */
static inline lq_bw_stat lq_bench_mac_peak_stat(int threads, int runs)
{
    lq_bw_stat z = {0, 0, 0};
    if (!lq_kernels_best()->mac_peak)
        return z;
    if (threads < 1 || threads > 32 || runs < 1 || runs > 64)
        return z;
    lq_bw_job jobs[32];
    double v[64];
    const int64_t iters = 2000000; /* 2e6 * 12 * 64 = 1.5 G MACs per thread */
    for (int r = 0; r < runs; r++) {
        for (int t = 0; t < threads; t++)
            jobs[t] = (lq_bw_job){NULL, 0, 0, iters};
        double s = lq_bw_run(lq_peak_worker, jobs, threads);
        v[r] = (double)iters * 12 * 64 * threads / s / 1e9;
    }
    return lq_bw_stats(v, runs);
}

#endif
