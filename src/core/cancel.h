/* The calling thread's cancel hook, shared by the library's modules: lq_vindex_set_thread_cancel
 * sets it (a database front end reads its interrupt flags there), and long loops anywhere on
 * that thread (gate scans, describe_many, a vindex open, tokenizer.json parsing) poll it every
 * few ms of work and stop with LQ_ECANCELED when it answers non-zero. */
#ifndef LQ_CORE_CANCEL_H
#define LQ_CORE_CANCEL_H

typedef int (*lq_cancel_fn)(void *ctx);

/* fn NULL removes the hook. */
void lq_cancel_set(lq_cancel_fn fn, void *ctx);
/* 1 when a hook is set on this thread. */
int lq_cancel_active(void);
/* 1 when the hook asks to stop; 0 without a hook. */
int lq_cancel_poll(void);

#endif
