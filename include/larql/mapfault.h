/* Files that shrink under their mapping. Weights and vindex files are mapped read-only (small
 * models always, any model with --weights mmap): when such a file is truncated or rewritten in
 * place while mapped, reading a page past its new end raises SIGBUS, which would kill the
 * process. A front end that serves for long (larql serve) installs a SIGBUS handler that
 * calls lq_mapfault_recover: the page becomes zeros, the read goes on (its results are
 * wrong) and the fault is counted; the server then refuses to answer from the damaged model
 * (503 naming the cause) until it is restarted. The library itself installs no handler: a
 * host such as PostgreSQL keeps its own. */
#ifndef LARQL_MAPFAULT_H
#define LARQL_MAPFAULT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* addr: siginfo's si_addr of a SIGBUS. 1 when addr lies in a file this library has mapped
 * (the page is replaced by a private page of zeros and the fault counted), 0 otherwise (the
 * handler should restore the default action and re-raise). Async-signal-safe. */
int lq_mapfault_recover(void *addr);

/* Faults recovered since the process started. */
uint64_t lq_mapfault_count(void);

#ifdef __cplusplus
}
#endif

#endif
