/* The one monotonic clock the library times itself with (load, prefill, decode, query
 * latencies). */
#ifndef LQ_CORE_CLOCK_H
#define LQ_CORE_CLOCK_H

#include <time.h>

/* CLOCK_MONOTONIC in milliseconds. */
double lq_now_ms(void);

/* clock (CLOCK_MONOTONIC, CLOCK_REALTIME) ms milliseconds from now, normalised: the absolute
 * time pthread_cond_timedwait and friends wait until. */
struct timespec lq_time_in(clockid_t clock, long ms);

#endif
