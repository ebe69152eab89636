/* FNV-1a (64-bit), the one string hash of the code base: hash tables keyed by names (GGUF
 * keys and tensors, vocabulary pieces, SELECT's and the relation clusters' string maps, the
 * rate limiter's addresses), ETags and the grammar engine's vocabulary fingerprint. Not for
 * anything an adversary must not collide: an attacker who picks the keys of a table only
 * makes its probes longer (every table here grows by load, not by chain length). */
#ifndef LQ_CORE_HASH_H
#define LQ_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LQ_FNV64_OFFSET 1469598103934665603ull
#define LQ_FNV64_PRIME 1099511628211ull

/* h continued over n bytes (start with LQ_FNV64_OFFSET) */
static inline uint64_t lq_fnv1a64_more(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * LQ_FNV64_PRIME;
    return h;
}

static inline uint64_t lq_fnv1a64(const void *p, size_t n) { return lq_fnv1a64_more(LQ_FNV64_OFFSET, p, n); }

/* of a NUL-terminated string */
static inline uint64_t lq_fnv1a64_str(const char *s)
{
    uint64_t h = LQ_FNV64_OFFSET;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * LQ_FNV64_PRIME;
    return h;
}

/* spreads FNV's weak low bits over the word before masking to a power-of-two table */
static inline uint64_t lq_hash_mix64(uint64_t h)
{
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

#endif
