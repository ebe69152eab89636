/* The model's memo (memo.h): a short list of keyed values under one mutex. Few keys are
 * expected (one per fixed text and layer pair), so a list is enough. */
#include "model/memo.h"

#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

struct lq_memo_entry {
    char *key;
    void *val;
    void (*free_fn)(void *);
    struct lq_memo_entry *next;
};

static struct lq_memo_entry *find(const lq_model *m, const char *key)
{
    for (struct lq_memo_entry *e = m->memo; e; e = e->next)
        if (!strcmp(e->key, key))
            return e;
    return NULL;
}

const void *lq_model_memo_get(lq_model *m, const char *key)
{
    if (!m || !key)
        return NULL;
    pthread_mutex_lock(&m->memo_mu);
    struct lq_memo_entry *e = find(m, key);
    const void *v = e ? e->val : NULL;
    pthread_mutex_unlock(&m->memo_mu);
    return v;
}

const void *lq_model_memo_put(lq_model *m, const char *key, void *val, size_t bytes, void (*free_fn)(void *))
{
    if (!m || !key || !val)
        return NULL;
    pthread_mutex_lock(&m->memo_mu);
    struct lq_memo_entry *e = find(m, key);
    const void *out = NULL;
    if (e) { /* another caller got there first: its value is the same computation */
        free_fn(val);
        out = e->val;
    } else if (bytes > LQ_MODEL_MEMO_MAX_BYTES - m->memo_bytes) {
        free_fn(val);
    } else if ((e = calloc(1, sizeof *e)) && (e->key = strdup(key))) {
        e->val = val;
        e->free_fn = free_fn;
        e->next = m->memo;
        m->memo = e;
        m->memo_bytes += bytes;
        out = val;
    } else {
        free(e);
        free_fn(val);
    }
    pthread_mutex_unlock(&m->memo_mu);
    return out;
}

void lq_model_memo_clear(lq_model *m)
{
    struct lq_memo_entry *e = m->memo, *next;
    for (; e; e = next) {
        next = e->next;
        e->free_fn(e->val);
        free(e->key);
        free(e);
    }
    m->memo = NULL;
    m->memo_bytes = 0;
}
