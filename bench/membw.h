/* Read-bandwidth microbenchmark shared by the benchmarks: streams a 1 GiB buffer (far
 * larger than any cache) with T threads summing 64-bit words, best of 3 passes, GB/s.
 * The figure the memory-bound decode is compared against (its roofline). */
#ifndef LQ_BENCH_MEMBW_H
#define LQ_BENCH_MEMBW_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct lq_bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} lq_bw_job;

static void *lq_bw_worker(void *arg)
{
    lq_bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static inline double lq_bench_read_bw(int threads)
{
    const size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf || threads < 1 || threads > 64) {
        free(buf);
        return 0;
    }
    memset(buf, 1, bytes);
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
        pthread_t th[64];
        lq_bw_job jobs[64];
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int t = 0; t < threads; t++) {
            jobs[t].p = buf + n / threads * t;
            jobs[t].n = n / threads;
            pthread_create(&th[t], NULL, lq_bw_worker, &jobs[t]);
        }
        uint64_t total = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            total += jobs[t].sum;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
        double gbs = bytes / s / 1e9 + (total == 42 ? 1e-12 : 0); /* keeps the sum live */
        if (gbs > best)
            best = gbs;
    }
    free(buf);
    return best;
}

#endif
