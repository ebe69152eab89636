#include "core/cancel.h"

#include <stddef.h>

/* per thread: a hook reads its own thread's flags (a PostgreSQL backend's interrupt
 * flags), and other threads of the process (a server's workers) never see it */
static _Thread_local lq_cancel_fn tl_fn;
static _Thread_local void *tl_ctx;

void lq_cancel_set(lq_cancel_fn fn, void *ctx)
{
    tl_fn = fn;
    tl_ctx = fn ? ctx : NULL;
}

int lq_cancel_active(void) { return tl_fn != NULL; }

int lq_cancel_poll(void) { return tl_fn && tl_fn(tl_ctx); }
