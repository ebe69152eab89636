/* A persistent thread pool for data-parallel loops (no thread creation per token).
 *
 * lq_pool_for(pool, n, grain, fn, ctx) splits [0, n) into one contiguous chunk per thread
 * (chunk boundaries are multiples of grain, so threads stream disjoint weight rows and never
 * share a cache line of output), runs fn on each chunk (the calling thread takes chunk 0)
 * and returns when all are done. Calls from several threads at once are serialised on an
 * internal mutex, so a pool may be shared by sessions. */
#ifndef LQ_CORE_THREADPOOL_H
#define LQ_CORE_THREADPOOL_H

#include <stdint.h>

#include "larql/status.h"

typedef struct lq_pool lq_pool;

typedef void (*lq_pool_fn)(void *ctx, int64_t start, int64_t end, int thread_idx);

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started. */
int lq_pool_create(int n_threads, lq_pool **out, lq_err *err);
void lq_pool_free(lq_pool *pool); /* NULL-safe; joins the workers */
int lq_pool_threads(const lq_pool *pool);
void lq_pool_for(lq_pool *pool, int64_t n, int64_t grain, lq_pool_fn fn, void *ctx);

/* The same loop with dynamic scheduling: [0, n) is cut into about 8 chunks per thread
 * (boundaries multiples of grain) that threads claim one at a time from a shared counter, so
 * a thread that is slow or descheduled (a busy machine) holds up at most one small chunk
 * while the others take the rest. fn may run several times per call on one thread, always
 * with that thread's index (0 = the caller), so per-thread_idx scratch stays exclusive.
 * Which thread runs which rows varies from call to call. */
void lq_pool_for_dyn(lq_pool *pool, int64_t n, int64_t grain, lq_pool_fn fn, void *ctx);

/* Number of online CPUs (at least 1). */
int lq_cpu_count(void);

#endif
