/* The scheduler's prompt cache (prompt_cache.c): finished requests' sessions kept with the
 * tokens their KV holds, for requests whose prompts start with them. Loop thread only. */
#ifndef LQ_ENGINE_PROMPT_CACHE_H
#define LQ_ENGINE_PROMPT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "larql/model.h"

typedef struct pcache pcache;
/* What to do with a session the cache lets go (pool it or free it). */
typedef void (*pcache_drop_fn)(void *ctx, lq_session *s);

/* A cache of at most cap sessions (cap 0: it keeps nothing). LQ_OK or LQ_ENOMEM. */
int pcache_create(int cap, pcache **out);
/* Frees the cache and every session in it. NULL-safe. */
void pcache_free(pcache *c);
int pcache_cap(const pcache *c);
int pcache_count(const pcache *c);
/* The session of the entry with key whose tokens share the longest prefix with prompt[0..n-1)
 * (never all of it: the last token is evaluated for its logits), cut back to that prefix and
 * out of the cache; *reused = the prefix length. Only a prefix of at least 8 tokens counts,
 * and unless any_share, only one of at least half the entry; NULL when no entry has one. */
lq_session *pcache_take(pcache *c, uint64_t key, const int32_t *prompt, size_t n, int any_share, size_t *reused);
/* 1 when an entry with key holds all of toks[0..n) (its tokens start with them). */
int pcache_covers(const pcache *c, uint64_t key, const int32_t *toks, size_t n);
/* Keeps s (its KV holds toks[0..n), its position n) under key; entries it extends and the
 * least recently used one beyond cap go to drop, and so does s if it cannot be kept. */
void pcache_put(pcache *c, lq_session *s, const int32_t *toks, size_t n, uint64_t key, pcache_drop_fn drop,
                void *ctx);
/* The entry with key that is the rank-th most recently used of them (0: the last one), left
 * in the cache: its session (position *n) and tokens. NULL when there are not that many. */
lq_session *pcache_peek(const pcache *c, uint64_t key, int rank, const int32_t **toks, size_t *n);
/* The entry pcache_peek names, out of the cache: its session (the caller drops it) and its
 * token count *n. NULL when there are not that many. */
lq_session *pcache_remove(pcache *c, uint64_t key, int rank, size_t *n);
/* The least recently used entry's session, out of the cache (NULL when empty). */
lq_session *pcache_evict_lru(pcache *c);

#endif
