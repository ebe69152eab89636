/* Thread pool: every index covered exactly once with grain-aligned contiguous chunks, one
 * chunk per thread index, concurrent callers, nested calls, the sleep path, create/free
 * loops and bad arguments. No timing assertions. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threadpool.h"
#include "harness.h"

#define MAXN 5000
#define MAXT 16

typedef struct cover {
    atomic_int hits[MAXN];
    atomic_int chunks_per_thread[MAXT];
    atomic_int bad; /* misaligned chunk, bad thread index, or out-of-range */
    int64_t n, grain;
    int n_threads;
} cover;

static void cover_fn(void *ctx, int64_t start, int64_t end, int idx)
{
    cover *c = ctx;
    if (start < 0 || end > c->n || start >= end || start % c->grain != 0 ||
        (end != c->n && end % c->grain != 0) || idx < 0 || idx >= c->n_threads)
        atomic_fetch_add(&c->bad, 1);
    if (idx >= 0 && idx < MAXT)
        atomic_fetch_add(&c->chunks_per_thread[idx], 1);
    for (int64_t i = start; i < end && i < MAXN; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one lq_pool_for and returns 1 when the coverage is exact. */
static int run_cover(lq_pool *p, int64_t n, int64_t grain, cover *c)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->grain = grain < 1 ? 1 : grain;
    c->n_threads = lq_pool_threads(p);
    lq_pool_for(p, n, grain, cover_fn, c);
    int ok = atomic_load(&c->bad) == 0;
    for (int64_t i = 0; i < n; i++)
        ok &= atomic_load(&c->hits[i]) == 1;
    for (int t = 0; t < MAXT; t++)
        ok &= atomic_load(&c->chunks_per_thread[t]) <= 1;
    return ok;
}

static void test_coverage(void)
{
    static const int nts[] = {1, 2, 3, 4, 7};
    static const int64_t ns[] = {0, 1, 2, 5, 63, 64, 65, 1000, 4097};
    static const int64_t grains[] = {0, 1, 3, 4, 64, 100};
    static cover c;
    for (size_t a = 0; a < sizeof nts / sizeof *nts; a++) {
        lq_pool *p = NULL;
        CHECK_EQ_INT(lq_pool_create(nts[a], &p, NULL), LQ_OK);
        if (!p)
            continue;
        CHECK_EQ_INT(lq_pool_threads(p), nts[a]);
        for (int rep = 0; rep < 3; rep++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
                for (size_t g = 0; g < sizeof grains / sizeof *grains; g++)
                    CHECK_MSG(run_cover(p, ns[b], grains[g], &c), "threads=%d n=%lld grain=%lld",
                              nts[a], (long long)ns[b], (long long)grains[g]);
        lq_pool_free(p);
    }
}

/* With 2 threads and n a multiple of grain, both threads get work (the split is even). */
static void test_both_threads_work(void)
{
    lq_pool *p = NULL;
    CHECK_EQ_INT(lq_pool_create(2, &p, NULL), LQ_OK);
    static cover c;
    CHECK(run_cover(p, 1024, 64, &c));
    CHECK_EQ_INT(atomic_load(&c.chunks_per_thread[0]), 1);
    CHECK_EQ_INT(atomic_load(&c.chunks_per_thread[1]), 1);
    lq_pool_free(p);
}

typedef struct caller_arg {
    lq_pool *pool;
    int failures;
    int iters;
} caller_arg;

static void *caller_main(void *argp)
{
    caller_arg *a = argp;
    cover *c = malloc(sizeof *c);
    for (int i = 0; i < a->iters; i++)
        a->failures += !run_cover(a->pool, 1 + (i * 37) % 3000, 1 + i % 50, c);
    free(c);
    return NULL;
}

static void test_concurrent_callers(void)
{
    lq_pool *p = NULL;
    CHECK_EQ_INT(lq_pool_create(3, &p, NULL), LQ_OK);
    pthread_t th[2];
    caller_arg args[2] = {{p, 0, 1500}, {p, 0, 1500}};
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(pthread_create(&th[i], NULL, caller_main, &args[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(args[0].failures, 0);
    CHECK_EQ_INT(args[1].failures, 0);
    lq_pool_free(p);
}

/* A job that calls lq_pool_for on its own pool runs the inner loop inline (no deadlock). */
typedef struct nested {
    lq_pool *pool;
    atomic_int inner_items;
} nested;

static void inner_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    nested *nn = ctx;
    atomic_fetch_add(&nn->inner_items, (int)(e - s));
}

static void outer_fn(void *ctx, int64_t s, int64_t e, int idx)
{
    (void)idx;
    nested *nn = ctx;
    for (int64_t i = s; i < e; i++)
        lq_pool_for(nn->pool, 10, 1, inner_fn, nn);
}

static void test_nested(void)
{
    lq_pool *p = NULL;
    CHECK_EQ_INT(lq_pool_create(2, &p, NULL), LQ_OK);
    nested nn = {p, 0};
    lq_pool_for(p, 8, 1, outer_fn, &nn);
    CHECK_EQ_INT(atomic_load(&nn.inner_items), 80);
    lq_pool_free(p);
}

/* LQ_POOL_SPIN_US=0: workers and caller go to sleep at once; pauses between calls make sure
 * every call has to wake them. */
static void test_sleep_path(void)
{
    setenv("LQ_POOL_SPIN_US", "0", 1);
    lq_pool *p = NULL;
    CHECK_EQ_INT(lq_pool_create(3, &p, NULL), LQ_OK);
    unsetenv("LQ_POOL_SPIN_US");
    static cover c;
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        bad += !run_cover(p, 999, 7, &c);
        if (i % 20 == 0)
            usleep(2000);
    }
    CHECK_EQ_INT(bad, 0);
    lq_pool_free(p);
}

/* Chunks that sometimes sleep, with workers that sleep at once: workers wake late and the
 * caller takes over their chunks. Still exactly once per index and per thread index; the
 * number of chunks the caller ran for others is printed (informational, timing-dependent). */
typedef struct slow_ctx {
    cover c;
    pthread_t caller;
    atomic_int stolen;
    int call;
} slow_ctx;

static void slow_fn(void *ctx, int64_t start, int64_t end, int idx)
{
    slow_ctx *s = ctx;
    if (idx > 0 && pthread_equal(pthread_self(), s->caller))
        atomic_fetch_add(&s->stolen, 1);
    if ((s->call + idx) % 5 == 0)
        usleep(200);
    cover_fn(&s->c, start, end, idx);
}

static void test_slow_chunks_and_stealing(void)
{
    setenv("LQ_POOL_SPIN_US", "0", 1);
    lq_pool *p = NULL;
    CHECK_EQ_INT(lq_pool_create(4, &p, NULL), LQ_OK);
    unsetenv("LQ_POOL_SPIN_US");
    static slow_ctx s;
    int bad = 0, stolen = 0;
    for (int call = 0; call < 300; call++) {
        memset(&s, 0, sizeof s);
        s.caller = pthread_self();
        s.call = call;
        s.c.n = 400 + call;
        s.c.grain = 16;
        s.c.n_threads = 4;
        lq_pool_for(p, s.c.n, 16, slow_fn, &s);
        int ok = atomic_load(&s.c.bad) == 0;
        for (int64_t i = 0; i < s.c.n; i++)
            ok &= atomic_load(&s.c.hits[i]) == 1;
        for (int t = 0; t < MAXT; t++)
            ok &= atomic_load(&s.c.chunks_per_thread[t]) == (t < 4);
        bad += !ok;
        stolen += atomic_load(&s.stolen);
    }
    CHECK_EQ_INT(bad, 0);
    printf("#   caller ran %d of %d worker chunks\n", stolen, 300 * 3);
    lq_pool_free(p);
}

static void test_create_free_loops(void)
{
    static cover c;
    for (int i = 0; i < 60; i++) {
        lq_pool *p = NULL;
        CHECK_EQ_INT(lq_pool_create(1 + i % 4, &p, NULL), LQ_OK);
        if (i % 3)
            CHECK(run_cover(p, 100 + i, 8, &c));
        lq_pool_free(p);
    }
    lq_pool_free(NULL); /* NULL-safe */
    CHECK_EQ_INT(lq_pool_threads(NULL), 1);
    CHECK(run_cover(NULL, 50, 4, &c)); /* no pool: runs inline */
}

static void test_bad_args(void)
{
    lq_err err;
    lq_pool *p = (lq_pool *)&err;
    CHECK_EQ_INT(lq_pool_create(0, &p, &err), LQ_ERANGE);
    CHECK(p == NULL);
    CHECK_STR_CONTAINS(err.msg, "n_threads 0");
    CHECK_EQ_INT(lq_pool_create(100000, &p, &err), LQ_ERANGE);
    CHECK_EQ_INT(lq_pool_create(2, NULL, &err), LQ_EINVAL);
    CHECK(lq_cpu_count() >= 1);
}

int main(void)
{
    RUN(test_coverage);
    RUN(test_both_threads_work);
    RUN(test_concurrent_callers);
    RUN(test_nested);
    RUN(test_sleep_path);
    RUN(test_slow_chunks_and_stealing);
    RUN(test_create_free_loops);
    RUN(test_bad_args);
    return harness_done();
}
