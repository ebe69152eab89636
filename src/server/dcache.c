/* The server's describe cache (LARQL's --cache-ttl, routes/describe.rs): describe answers kept
 * for --cache-ttl seconds, keyed by the knowledge state the request sees (its X-Session-Id or
 * the global state, and the edit generation) and the query. Any edit anywhere (global or a
 * session's, a patch applied or removed, a session expiring) moves the generation on, so no
 * answer outlives what it describes; entries are few and short-lived, so that coarse rule
 * costs little. A fixed ring of entries, the oldest replaced first. */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define DC_SLOTS 256

typedef struct dc_ent {
    char *key;
    char *body;
    size_t len;
    double expires;
} dc_ent;

struct srv_dcache {
    pthread_mutex_t mu;
    dc_ent e[DC_SLOTS];
    int next;            /* the slot the next put replaces */
    uint64_t gen;        /* edit generation (srv_dcache_bump) */
    uint64_t hits, misses;
};

int srv_dcache_init(lq_server *s)
{
    s->dcache = calloc(1, sizeof *s->dcache);
    if (!s->dcache)
        return LQ_ENOMEM;
    pthread_mutex_init(&s->dcache->mu, NULL);
    return LQ_OK;
}

static void ent_clear(dc_ent *e)
{
    free(e->key);
    free(e->body);
    memset(e, 0, sizeof *e);
}

void srv_dcache_free(lq_server *s)
{
    srv_dcache *c = s->dcache;
    if (!c)
        return;
    for (int i = 0; i < DC_SLOTS; i++)
        ent_clear(&c->e[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
    s->dcache = NULL;
}

void srv_dcache_bump(lq_server *s)
{
    srv_dcache *c = s->dcache;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->gen++;
    for (int i = 0; i < DC_SLOTS; i++) /* nothing cached can be asked for again */
        ent_clear(&c->e[i]);
    pthread_mutex_unlock(&c->mu);
}

/* key = generation, session, query; NULL when out of memory */
static char *make_key(uint64_t gen, const char *sid, const char *query)
{
    size_t n = strlen(sid ? sid : "") + strlen(query) + 32;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%llu\n%s\n%s", (unsigned long long)gen, sid ? sid : "", query);
    return k;
}

int srv_dcache_get(lq_server *s, const char *sid, const char *query, char **body, size_t *len)
{
    srv_dcache *c = s->dcache;
    *body = NULL;
    if (!c || s->o.cache_ttl_s <= 0)
        return 0;
    double now = lq_now();
    pthread_mutex_lock(&c->mu);
    char *k = make_key(c->gen, sid, query);
    for (int i = 0; k && i < DC_SLOTS; i++) {
        dc_ent *e = &c->e[i];
        if (!e->key || strcmp(e->key, k))
            continue;
        if (e->expires <= now) {
            ent_clear(e);
            break;
        }
        if ((*body = malloc(e->len + 1))) {
            memcpy(*body, e->body, e->len + 1);
            *len = e->len;
        }
        break;
    }
    if (*body)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    free(k);
    return *body != NULL;
}

void srv_dcache_put(lq_server *s, const char *sid, const char *query, const char *body, size_t len)
{
    srv_dcache *c = s->dcache;
    if (!c || s->o.cache_ttl_s <= 0)
        return;
    pthread_mutex_lock(&c->mu);
    char *k = make_key(c->gen, sid, query), *b = malloc(len + 1);
    if (k && b) {
        dc_ent *e = &c->e[c->next];
        c->next = (c->next + 1) % DC_SLOTS;
        ent_clear(e);
        memcpy(b, body, len);
        b[len] = 0;
        e->key = k;
        e->body = b;
        e->len = len;
        e->expires = lq_now() + s->o.cache_ttl_s;
        k = b = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    free(k);
    free(b);
}

void srv_dcache_stats(lq_server *s, uint64_t *hits, uint64_t *misses)
{
    srv_dcache *c = s->dcache;
    *hits = *misses = 0;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
