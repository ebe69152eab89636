/* --rate-limit N/unit: a token bucket per client address (LARQL's semantics: capacity N,
 * refilled at N per unit, starting full, one token a request). Unlike LARQL's, buckets do not
 * grow without bound: a bucket that has refilled is the same as no bucket, so full buckets are
 * swept when the table fills, and IPv6 clients are keyed by their /64 (one host holds a whole
 * /64, so per-address buckets would not limit it). */
#include "server/internal.h"
#include "core/hash.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RL_SLOTS 4096      /* hash chains */
#define RL_MAX_BUCKETS 65536 /* past this, a sweep; still full: the request passes (fail open) */

typedef struct rl_bucket {
    struct rl_bucket *next;
    double tokens, t;       /* tokens at monotonic time t */
    char key[48];
} rl_bucket;

struct srv_ratelimit {
    pthread_mutex_t mu;
    double cap, per_s;
    size_t n;
    rl_bucket *slot[RL_SLOTS];
};

int srv_ratelimit_parse(const char *spec, double *cap, double *per_s)
{
    char *end;
    double n = strtod(spec, &end);
    if (end == spec || *end != '/' || !(n >= 1) || n > 1e9 || n != floor(n))
        return -1;
    const char *u = end + 1;
    double period = !strcasecmp(u, "s") || !strcasecmp(u, "sec") || !strcasecmp(u, "second")   ? 1
                    : !strcasecmp(u, "m") || !strcasecmp(u, "min") || !strcasecmp(u, "minute") ? 60
                    : !strcasecmp(u, "h") || !strcasecmp(u, "hour")                             ? 3600
                                                                                                : 0;
    if (period == 0)
        return -1;
    *cap = n;
    *per_s = n / period;
    return 0;
}

srv_ratelimit *srv_ratelimit_new(double cap, double per_s)
{
    srv_ratelimit *rl = calloc(1, sizeof *rl);
    if (!rl)
        return NULL;
    pthread_mutex_init(&rl->mu, NULL);
    rl->cap = cap;
    rl->per_s = per_s;
    return rl;
}

void srv_ratelimit_free(srv_ratelimit *rl)
{
    if (!rl)
        return;
    for (int i = 0; i < RL_SLOTS; i++)
        for (rl_bucket *b = rl->slot[i], *nx; b; b = nx) {
            nx = b->next;
            free(b);
        }
    pthread_mutex_destroy(&rl->mu);
    free(rl);
}

static uint32_t key_hash(const char *k) { return (uint32_t)lq_hash_mix64(lq_fnv1a64_str(k)); }

/* drop the buckets that have refilled: they answer as a new bucket would */
static void sweep(srv_ratelimit *rl, double now)
{
    for (int i = 0; i < RL_SLOTS; i++)
        for (rl_bucket **pp = &rl->slot[i]; *pp;) {
            rl_bucket *b = *pp;
            if (b->tokens + (now - b->t) * rl->per_s >= rl->cap) {
                *pp = b->next;
                free(b);
                rl->n--;
            } else {
                pp = &b->next;
            }
        }
}

double srv_ratelimit_take(srv_ratelimit *rl, const char *key, double now)
{
    pthread_mutex_lock(&rl->mu);
    rl_bucket **head = &rl->slot[key_hash(key) % RL_SLOTS], *b = *head;
    while (b && strcmp(b->key, key))
        b = b->next;
    if (!b) {
        if (rl->n >= RL_MAX_BUCKETS)
            sweep(rl, now);
        b = rl->n < RL_MAX_BUCKETS ? calloc(1, sizeof *b) : NULL;
        if (!b) { /* every bucket busy (or no memory): limiting is fairness, not access control */
            pthread_mutex_unlock(&rl->mu);
            return 0;
        }
        snprintf(b->key, sizeof b->key, "%s", key);
        b->tokens = rl->cap;
        b->t = now;
        b->next = *head;
        *head = b;
        rl->n++;
    }
    b->tokens = fmin(rl->cap, b->tokens + (now - b->t) * rl->per_s);
    b->t = now;
    double wait = 0;
    if (b->tokens >= 1)
        b->tokens -= 1;
    else
        wait = (1 - b->tokens) / rl->per_s;
    pthread_mutex_unlock(&rl->mu);
    return wait;
}

/* The address a request is counted under: the socket peer, or with --trust-forwarded-for the
 * first X-Forwarded-For entry (what the proxy in front saw). IPv6 keeps its /64. */
void srv_ratelimit_key(const struct sockaddr *sa, const char *forwarded, char *out, size_t cap)
{
    if (forwarded) {
        size_t a = strspn(forwarded, " \t"), n = strcspn(forwarded + a, ", \t");
        struct in6_addr v6;
        char ip[64];
        if (n && n < sizeof ip) {
            memcpy(ip, forwarded + a, n);
            ip[n] = 0;
            if (inet_pton(AF_INET6, ip, &v6) == 1) {
                memset(v6.s6_addr + 8, 0, 8);
                inet_ntop(AF_INET6, &v6, out, (socklen_t)cap);
            } else {
                snprintf(out, cap, "%s", ip);
            }
            return;
        }
    }
    if (sa && sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
    } else if (sa && sa->sa_family == AF_INET6) {
        struct in6_addr v6 = ((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (!IN6_IS_ADDR_V4MAPPED(&v6))
            memset(v6.s6_addr + 8, 0, 8);
        inet_ntop(AF_INET6, &v6, out, (socklen_t)cap);
    } else {
        snprintf(out, cap, "?");
    }
}
