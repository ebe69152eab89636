/* The scheduler's prompt cache: sessions of finished requests kept with the tokens their KV
 * holds, so that a request whose prompt starts with those tokens (a chat's next turn, a
 * shared system prompt) takes the session, cut back to the common prefix, and prefills only
 * the rest. The KV of a token depends only on the tokens before it (and on the forward-pass
 * edits, which the key stands for), and the batched evaluation gives every row the numbers
 * a lone evaluation gives it, so the reused prefix is the same numbers a fresh prefill
 * would compute: answers are identical with and without the cache.
 *
 * Loop-thread only (no locks). Least recently used entries go first. */
#include <stdlib.h>
#include <string.h>

#include "engine/prompt_cache.h"

#define PC_MIN_REUSE 8

typedef struct pc_entry {
    lq_session *sess;
    int32_t *toks;
    size_t n;
    uint64_t key;
    uint64_t tick;  /* last use */
} pc_entry;

struct pcache {
    pc_entry *e;
    int n, cap;
    uint64_t tick;
};

int pcache_create(int cap, pcache **out)
{
    *out = NULL;
    pcache *c = calloc(1, sizeof *c);
    if (!c || (cap > 0 && !(c->e = calloc((size_t)cap, sizeof *c->e)))) {
        free(c);
        return LQ_ENOMEM;
    }
    c->cap = cap;
    *out = c;
    return LQ_OK;
}

int pcache_cap(const pcache *c) { return c ? c->cap : 0; }
int pcache_count(const pcache *c) { return c ? c->n : 0; }

static lq_session *remove_at(pcache *c, int i)
{
    lq_session *s = c->e[i].sess;
    free(c->e[i].toks);
    c->e[i] = c->e[--c->n];
    return s;
}

lq_session *pcache_evict_lru(pcache *c)
{
    if (!c || !c->n)
        return NULL;
    int lru = 0;
    for (int i = 1; i < c->n; i++)
        if (c->e[i].tick < c->e[lru].tick)
            lru = i;
    return remove_at(c, lru);
}

/* The index of the entry with key that has exactly rank newer entries of that key, or -1. */
static int rank_index(const pcache *c, uint64_t key, int rank)
{
    for (int i = 0; c && rank >= 0 && i < c->n; i++) {
        if (c->e[i].key != key)
            continue;
        int newer = 0;
        for (int j = 0; j < c->n; j++)
            newer += c->e[j].key == key && c->e[j].tick > c->e[i].tick;
        if (newer == rank)
            return i;
    }
    return -1;
}

lq_session *pcache_peek(const pcache *c, uint64_t key, int rank, const int32_t **toks, size_t *n)
{
    int i = rank_index(c, key, rank);
    if (i < 0)
        return NULL;
    *toks = c->e[i].toks;
    *n = c->e[i].n;
    return c->e[i].sess;
}

lq_session *pcache_remove(pcache *c, uint64_t key, int rank, size_t *n)
{
    int i = rank_index(c, key, rank);
    if (i < 0)
        return NULL;
    *n = c->e[i].n;
    return remove_at(c, i);
}

void pcache_free(pcache *c)
{
    if (!c)
        return;
    while (c->n)
        lq_session_free(remove_at(c, 0));
    free(c->e);
    free(c);
}

static size_t common(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

int pcache_covers(const pcache *c, uint64_t key, const int32_t *toks, size_t n)
{
    for (int i = 0; c && i < c->n; i++)
        if (c->e[i].key == key && c->e[i].n >= n && common(c->e[i].toks, c->e[i].n, toks, n) == n)
            return 1;
    return 0;
}

lq_session *pcache_take(pcache *c, uint64_t key, const int32_t *prompt, size_t n, int any_share, size_t *reused)
{
    *reused = 0;
    if (!c || !c->n || n < 2)
        return NULL;
    int best = -1;
    size_t bl = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->e[i].key != key)
            continue;
        /* at most n - 1: the last prompt token is always evaluated, for its logits. Taking
         * an entry ends it, so only a prefix worth it takes one: at least PC_MIN_REUSE
         * tokens and half the entry (a shared BOS alone never does) */
        size_t l = common(c->e[i].toks, c->e[i].n, prompt, n - 1);
        if (l < PC_MIN_REUSE || (!any_share && 2 * l < c->e[i].n))
            continue;
        if (l > bl) {
            bl = l;
            best = i;
        }
    }
    if (best < 0)
        return NULL;
    lq_session *s = remove_at(c, best);
    if (lq_session_truncate(s, (int)bl, NULL)) { /* cannot happen: bl <= its position */
        lq_session_reset(s);
        bl = 0;
    }
    *reused = bl;
    return s;
}

void pcache_put(pcache *c, lq_session *s, const int32_t *toks, size_t n, uint64_t key, pcache_drop_fn drop,
                void *ctx)
{
    if (!c || c->cap <= 0 || n == 0 || (size_t)lq_session_pos(s) != n) {
        drop(ctx, s);
        return;
    }
    /* an entry this one extends (the same conversation, one turn on) is superseded */
    for (int i = 0; i < c->n;)
        if (c->e[i].key == key && c->e[i].n <= n && common(c->e[i].toks, c->e[i].n, toks, n) == c->e[i].n)
            drop(ctx, remove_at(c, i));
        else
            i++;
    int32_t *copy = malloc(n * sizeof *copy);
    if (!copy) {
        drop(ctx, s);
        return;
    }
    memcpy(copy, toks, n * sizeof *copy);
    if (c->n == c->cap)
        drop(ctx, pcache_evict_lru(c));
    c->e[c->n++] = (pc_entry){s, copy, n, key, ++c->tick};
}
