/* Values a caller computes from a model's weights alone (a fixed text's residuals, say) and
 * keeps for the model's life, so that they are computed once per model instead of once per
 * call. Keyed by a string; the values are immutable once stored and freed when the model
 * closes (a pointer the memo returned stays valid until then). Thread-safe. */
#ifndef LQ_MODEL_MEMO_H
#define LQ_MODEL_MEMO_H

#include "larql/model.h"

/* The value stored under key, or NULL. */
const void *lq_model_memo_get(lq_model *m, const char *key);

/* The memo holds at most this many bytes (as its callers count them): past it, values are
 * not kept (the callers compute them again), so that keys a caller makes from its input
 * (one per relation, say) cannot grow it without bound. */
#define LQ_MODEL_MEMO_MAX_BYTES ((size_t)128 << 20)

/* Stores val of bytes bytes (freed with free_fn at close) under key and returns it; if another
 * caller stored one first, frees val and returns that one. Out of memory or past
 * LQ_MODEL_MEMO_MAX_BYTES: frees val, returns NULL. */
const void *lq_model_memo_put(lq_model *m, const char *key, void *val, size_t bytes, void (*free_fn)(void *));

/* Frees every value (lq_model_close). */
void lq_model_memo_clear(lq_model *m);

#endif
