/* Persistent thread pool (see threadpool.h).
 *
 * Hand-off: decode calls lq_pool_for ~210 times per token with ~100 us of work each, so a
 * condvar round trip per call (tens of us when a worker has to be woken) would cost a large
 * share of the token. The caller publishes the job and bumps an atomic generation counter;
 * workers spin on it (with pause) for up to spin_ns, and only then sleep on a condvar. The
 * caller waits for completion the same way (spin on the pending count, then a condvar).
 *
 * Lost-wakeup freedom without taking the mutex on the fast path: a sleeper increments
 * `sleepers` (seq_cst) under the mutex and then re-reads the generation; the caller bumps the
 * generation (seq_cst) and then reads `sleepers`. With sequentially consistent atomics at
 * least one side sees the other's store: either the worker sees the new generation and does
 * not sleep, or the caller sees a sleeper and broadcasts under the mutex (which the sleeper
 * holds until it is inside pthread_cond_wait). Completion uses the same pattern with
 * `pending` and `caller_sleeping`.
 *
 * Oversubscription: on a busy machine (other processes, PostgreSQL backends) a worker may not
 * get a core for milliseconds, and a static split would make every call wait for it. So
 * chunks are claimed, not assigned: chunk i is run by whoever first moves claim[i] to the
 * job's generation — normally worker i, but the caller, once its own chunk is done, claims
 * and runs any chunk whose worker has not started yet. Each chunk (and thus each
 * thread_idx) still runs exactly once per call, so per-thread_idx scratch stays exclusive. A
 * worker that wakes up late finds its chunk taken and goes back to waiting.
 *
 * Dynamic jobs (lq_pool_for_dyn): K small chunks are handed out by one 64-bit ticket =
 * generation (32 bits) | K (16) | next chunk (16), advanced by compare-and-swap. Carrying the
 * generation and K in the ticket means a late worker can never claim a chunk of a finished
 * job or read a stale K: a successful claim of chunk i < K of generation g proves job g is
 * still running (chunk i is not done), so its fields are stable while the worker reads them.
 * The caller waits for `done` to reach K. For a dynamic job the caller marks every static
 * claim slot with g first, so no worker takes the static path for it. */
#include "core/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The spin-wait hint (PAUSE) as a compiler builtin: SIMD headers stay inside src/kernels. */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define LQ_POOL_MAX_THREADS 512
#define LQ_POOL_SPIN_NS_DEFAULT 200000 /* 200 us: longer than the gap between two matvecs */

struct lq_pool {
    int n_threads;
    pthread_t *threads; /* [n_threads - 1] workers; worker i runs chunk i + 1 */
    int n_started;
    long spin_ns;

    pthread_mutex_t call_mu; /* serialises callers of lq_pool_for */
    pthread_mutex_t mu;      /* guards sleeping on the two condvars */
    pthread_cond_t work_cv, done_cv;

    atomic_ulong gen;           /* bumped once per job (and once at shutdown) */
    atomic_int sleepers;        /* workers inside (or entering) pthread_cond_wait */
    atomic_int pending;         /* workers that have not finished the current job */
    atomic_int caller_sleeping; /* the caller is waiting on done_cv */
    atomic_int stop;
    atomic_ulong *claim; /* [n_threads]: generation that last claimed chunk i */
    atomic_ullong ticket; /* dynamic jobs: gen << 32 | K << 16 | next chunk */
    atomic_int done;      /* dynamic jobs: chunks finished */

    /* the current job: written by the caller before the generation bump (release), read
     * by workers after they observe it (acquire) */
    lq_pool_fn fn;
    void *ctx;
    int64_t n, grain;
    int64_t dyn_chunk; /* dynamic jobs: elements per chunk (a multiple of grain) */
    int static_only;   /* LQ_POOL_STATIC=1: lq_pool_for_dyn runs as lq_pool_for (A/B runs) */
};

#define DYN_CHUNKS_PER_THREAD 8
#define DYN_MAX_CHUNKS 4096 /* < 2^16: K and the chunk index share the ticket */

typedef struct worker_arg {
    lq_pool *pool;
    int idx;
} worker_arg;

/* The pool whose job this thread is running (nested calls on it run inline instead of
 * deadlocking on call_mu). */
static _Thread_local const lq_pool *tl_running;

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Chunk i of nt over [0, n): contiguous, boundaries multiples of grain. */
static void chunk_of(int64_t n, int64_t grain, int nt, int i, int64_t *start, int64_t *end)
{
    int64_t nblk = (n + grain - 1) / grain;
    int64_t b0 = nblk * i / nt, b1 = nblk * (i + 1) / nt;
    int64_t s = b0 * grain, e = b1 * grain;
    *start = s < n ? s : n;
    *end = e < n ? e : n;
}

/* Claims chunk i for generation g; 0 if someone (caller or worker) already did. */
static int claim_chunk(lq_pool *p, int i, unsigned long g)
{
    unsigned long c = atomic_load(&p->claim[i]);
    while (c < g)
        if (atomic_compare_exchange_weak(&p->claim[i], &c, g))
            return 1;
    return 0;
}

/* A finished chunk of a worker index: the last one wakes a sleeping caller. */
static void chunk_done(lq_pool *p)
{
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void run_chunk(lq_pool *p, int i)
{
    int64_t s, e;
    chunk_of(p->n, p->grain, p->n_threads, i, &s, &e);
    if (s < e)
        p->fn(p->ctx, s, e, i);
}

/* Runs chunks of dynamic job g as thread tid until none is left; returns how many it ran. */
static int run_dyn(lq_pool *p, unsigned long g, int tid)
{
    int ran = 0;
    for (;;) {
        unsigned long long t = atomic_load(&p->ticket);
        if ((uint32_t)(t >> 32) != (uint32_t)g)
            break;
        unsigned k = (unsigned)(t >> 16) & 0xffff, i = (unsigned)t & 0xffff;
        if (i >= k)
            break;
        if (!atomic_compare_exchange_weak(&p->ticket, &t, t + 1))
            continue;
        int64_t s = (int64_t)i * p->dyn_chunk, e = s + p->dyn_chunk;
        p->fn(p->ctx, s, e < p->n ? e : p->n, tid);
        ran++;
        if (atomic_fetch_add(&p->done, 1) + 1 == (int)k && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return ran;
}

static void *worker_main(void *argp)
{
    worker_arg *a = argp;
    lq_pool *p = a->pool;
    const int idx = a->idx;
    free(a);
    tl_running = p;
    /* generation 0 is the pool's creation: no job can be published before every worker
     * has been started, but a worker may first run after the first job is out, so it must
     * not read its starting point from gen */
    unsigned long seen = 0;
    for (;;) {
        /* wait for a new generation: spin, then sleep */
        unsigned long g = atomic_load(&p->gen);
        if (g == seen) {
            long t0 = now_ns();
            for (unsigned spins = 1;; spins++) {
                cpu_relax();
                g = atomic_load(&p->gen);
                if (g != seen)
                    break;
                if ((spins & 255) == 0 && now_ns() - t0 > p->spin_ns) {
                    pthread_mutex_lock(&p->mu);
                    atomic_fetch_add(&p->sleepers, 1);
                    while ((g = atomic_load(&p->gen)) == seen)
                        pthread_cond_wait(&p->work_cv, &p->mu);
                    atomic_fetch_sub(&p->sleepers, 1);
                    pthread_mutex_unlock(&p->mu);
                    break;
                }
            }
        }
        seen = g;
        if (atomic_load(&p->stop))
            break;
        /* the job's fields are read only after the claim succeeds: while chunk idx of
         * generation g is claimed and unfinished, the caller cannot move on to a new job */
        if (run_dyn(p, g, idx) == 0 && claim_chunk(p, idx, g)) {
            run_chunk(p, idx);
            chunk_done(p);
        }
    }
    return NULL;
}

/* Bumps the generation and wakes sleeping workers (if any); returns the new generation. */
static unsigned long publish(lq_pool *p)
{
    unsigned long g = atomic_fetch_add(&p->gen, 1) + 1;
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
    }
    return g;
}

int lq_pool_create(int n_threads, lq_pool **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "lq_pool_create: out is NULL");
    *out = NULL;
    if (n_threads < 1 || n_threads > LQ_POOL_MAX_THREADS)
        return lq_err_set(err, LQ_ERANGE, "lq_pool_create: n_threads %d outside [1, %d]",
                          n_threads, LQ_POOL_MAX_THREADS);
    lq_pool *p = calloc(1, sizeof *p);
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "lq_pool_create: out of memory for the pool");
    p->claim = calloc((size_t)n_threads, sizeof *p->claim);
    if (!p->claim) {
        free(p);
        return lq_err_set(err, LQ_ENOMEM, "lq_pool_create: out of memory for %d threads", n_threads);
    }
    p->n_threads = n_threads;
    p->spin_ns = LQ_POOL_SPIN_NS_DEFAULT;
    const char *env = getenv("LQ_POOL_SPIN_US"); /* 0 = sleep at once (shared machines) */
    if (env && *env) {
        char *endp;
        long us = strtol(env, &endp, 10);
        if (*endp == 0 && us >= 0 && us <= 1000000)
            p->spin_ns = us * 1000;
    }
    env = getenv("LQ_POOL_STATIC");
    p->static_only = env && !strcmp(env, "1");
    pthread_mutex_init(&p->call_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    for (int i = 0; i < n_threads; i++)
        atomic_init(&p->claim[i], 0);

    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->stop, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            lq_pool_free(p);
            return lq_err_set(err, LQ_ENOMEM, "lq_pool_create: out of memory for %d threads",
                              n_threads);
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *a = malloc(sizeof *a);
            if (a) {
                a->pool = p;
                a->idx = i;
            }
            int rc = a ? pthread_create(&p->threads[i - 1], NULL, worker_main, a) : ENOMEM;
            if (rc) {
                free(a);
                lq_pool_free(p);
                return lq_err_set(err, LQ_ENOMEM, "lq_pool_create: starting worker %d of %d: %s",
                                  i, n_threads - 1, strerror(rc));
            }
            p->n_started = i;
        }
    }
    *out = p;
    return LQ_OK;
}

void lq_pool_free(lq_pool *p)
{
    if (!p)
        return;
    if (p->n_started > 0) {
        pthread_mutex_lock(&p->call_mu);
        atomic_store(&p->stop, 1);
        atomic_fetch_add(&p->gen, 1);
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_started; i++)
            pthread_join(p->threads[i], NULL);
        pthread_mutex_unlock(&p->call_mu);
    }
    free(p->threads);
    free(p->claim);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->call_mu);
    free(p);
}

int lq_pool_threads(const lq_pool *p)
{
    return p ? p->n_threads : 1;
}

void lq_pool_for(lq_pool *p, int64_t n, int64_t grain, lq_pool_fn fn, void *ctx)
{
    if (n <= 0 || !fn)
        return;
    if (grain < 1)
        grain = 1;
    /* inline: no pool, one thread, a single grain of work, or a nested call from inside
     * one of this pool's own jobs */
    if (!p || p->n_threads == 1 || n <= grain || tl_running == p) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->call_mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    atomic_store(&p->pending, p->n_threads - 1);
    unsigned long g = publish(p);

    const lq_pool *prev = tl_running;
    tl_running = p;
    run_chunk(p, 0);
    /* run the chunks of workers that have not started (descheduled or still waking) */
    for (int i = 1; i < p->n_threads && atomic_load(&p->pending) > 0; i++)
        if (claim_chunk(p, i, g)) {
            run_chunk(p, i);
            chunk_done(p);
        }
    tl_running = prev;

    if (atomic_load(&p->pending) > 0) {
        long t0 = now_ns();
        for (unsigned spins = 1; atomic_load(&p->pending) > 0; spins++) {
            cpu_relax();
            if ((spins & 255) == 0 && now_ns() - t0 > p->spin_ns) {
                pthread_mutex_lock(&p->mu);
                atomic_store(&p->caller_sleeping, 1);
                while (atomic_load(&p->pending) > 0)
                    pthread_cond_wait(&p->done_cv, &p->mu);
                atomic_store(&p->caller_sleeping, 0);
                pthread_mutex_unlock(&p->mu);
                break;
            }
        }
    }
    pthread_mutex_unlock(&p->call_mu);
}

void lq_pool_for_dyn(lq_pool *p, int64_t n, int64_t grain, lq_pool_fn fn, void *ctx)
{
    if (n <= 0 || !fn)
        return;
    if (grain < 1)
        grain = 1;
    if (p && p->static_only) {
        lq_pool_for(p, n, grain, fn, ctx);
        return;
    }
    if (!p || p->n_threads == 1 || n <= grain || tl_running == p) {
        fn(ctx, 0, n, 0);
        return;
    }
    int64_t nblk = (n + grain - 1) / grain;
    int64_t k = (int64_t)p->n_threads * DYN_CHUNKS_PER_THREAD;
    if (k > DYN_MAX_CHUNKS)
        k = DYN_MAX_CHUNKS;
    if (k > nblk)
        k = nblk;
    int64_t per = (nblk + k - 1) / k; /* blocks per chunk */
    k = (nblk + per - 1) / per;
    pthread_mutex_lock(&p->call_mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    p->dyn_chunk = per * grain;
    atomic_store(&p->done, 0);
    /* only this caller (under call_mu) bumps gen, so the next generation is known */
    unsigned long g = atomic_load(&p->gen) + 1;
    for (int i = 1; i < p->n_threads; i++) /* no static claims for this generation */
        atomic_store(&p->claim[i], g);
    atomic_store(&p->ticket, (unsigned long long)(uint32_t)g << 32 | (unsigned long long)k << 16);
    publish(p);

    const lq_pool *prev = tl_running;
    tl_running = p;
    run_dyn(p, g, 0);
    tl_running = prev;

    if (atomic_load(&p->done) < (int)k) {
        /* a worker holds the last chunks: spin (yielding the core after a while, in case
         * that worker is waiting for it), then sleep */
        long t0 = now_ns();
        for (unsigned spins = 1; atomic_load(&p->done) < (int)k; spins++) {
            cpu_relax();
            if ((spins & 255) == 0) {
                long dt = now_ns() - t0;
                if (dt > p->spin_ns) {
                    pthread_mutex_lock(&p->mu);
                    atomic_store(&p->caller_sleeping, 1);
                    while (atomic_load(&p->done) < (int)k)
                        pthread_cond_wait(&p->done_cv, &p->mu);
                    atomic_store(&p->caller_sleeping, 0);
                    pthread_mutex_unlock(&p->mu);
                    break;
                }
                if (dt > 20000)
                    sched_yield();
            }
        }
    }
    pthread_mutex_unlock(&p->call_mu);
}

int lq_cpu_count(void)
{
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c >= 1)
            return c;
    }
#endif
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c >= 1 ? (int)c : 1;
}
