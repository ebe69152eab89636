/* The one monotonic clock the library times itself with (load, prefill, decode, query
 * latencies). */
#ifndef LQ_CORE_CLOCK_H
#define LQ_CORE_CLOCK_H

/* CLOCK_MONOTONIC in milliseconds. */
double lq_now_ms(void);

#endif
