/* Stop-string matcher for streamed text.
 *
 * The pending buffer holds text that is not yet safe to emit: the longest suffix of the text
 * seen so far that is a proper prefix of some stop string. Any later match must start inside
 * that suffix (a match starting earlier would make a longer suffix a stop prefix), so
 * everything before it can be emitted at once.
 *
 * When several stop strings could match, the one that ENDS first in the stream wins (ties:
 * the one that starts first). That makes the result independent of how the text is cut into
 * pieces: feeding "abcd" at once or one byte at a time stops at the same place. The stop
 * string itself is never emitted, and nothing after it is.
 *
 * Byte-level: a stop string that is valid UTF-8 starts with a lead byte, so the held part
 * never splits a character of the emitted text. */
#include "larql/generate.h"

#include <stdlib.h>
#include <string.h>

struct lq_stopper {
    char **stop;      /* [n] copies of the stop strings */
    size_t *slen;     /* [n] their lengths (>= 1) */
    size_t n;
    char *buf;        /* [cap] emitted part [0, off) of the last call, then held [off, len) */
    size_t cap, len, off;
    int stopped;
};

int lq_stopper_create(const char *const *stop, size_t n_stop, lq_stopper **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "stopper: out is NULL");
    *out = NULL;
    if (n_stop > 0 && !stop)
        return lq_err_set(err, LQ_EINVAL, "stopper: %zu stop strings but the array is NULL",
                          n_stop);
    if (n_stop > 1024)
        return lq_err_set(err, LQ_EINVAL, "stopper: %zu stop strings exceed the limit 1024",
                          n_stop);
    for (size_t i = 0; i < n_stop; i++) {
        if (!stop[i] || !stop[i][0])
            return lq_err_set(err, LQ_EINVAL, "stopper: stop string %zu is %s", i,
                              stop[i] ? "empty" : "NULL");
        if (strlen(stop[i]) > 65536)
            return lq_err_set(err, LQ_EINVAL,
                              "stopper: stop string %zu is %zu bytes, limit 65536", i,
                              strlen(stop[i]));
    }
    lq_stopper *st = calloc(1, sizeof *st);
    if (!st)
        return lq_err_set(err, LQ_ENOMEM, "stopper: out of memory");
    if (n_stop) {
        st->stop = calloc(n_stop, sizeof *st->stop);
        st->slen = calloc(n_stop, sizeof *st->slen);
        if (!st->stop || !st->slen)
            goto oom;
        st->n = n_stop;
        for (size_t i = 0; i < n_stop; i++) {
            st->stop[i] = strdup(stop[i]);
            if (!st->stop[i])
                goto oom;
            st->slen[i] = strlen(stop[i]);
        }
    }
    st->cap = 256;
    st->buf = malloc(st->cap);
    if (!st->buf)
        goto oom;
    *out = st;
    return LQ_OK;
oom:
    lq_stopper_free(st);
    return lq_err_set(err, LQ_ENOMEM, "stopper: out of memory");
}

void lq_stopper_free(lq_stopper *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n && st->stop; i++)
        free(st->stop[i]);
    free(st->stop);
    free(st->slen);
    free(st->buf);
    free(st);
}

/* Earliest-ending match of any stop string in b[0, n); start returned in *at. */
static int find_stop(const lq_stopper *st, const char *b, size_t n, size_t *at)
{
    size_t best_end = (size_t)-1, best_start = 0;
    for (size_t i = 0; i < st->n; i++) {
        size_t L = st->slen[i];
        if (L > n)
            continue;
        /* the first occurrence of this string is its earliest end */
        const char *hit = memmem(b, n, st->stop[i], L);
        if (!hit)
            continue;
        size_t s = (size_t)(hit - b), e = s + L;
        if (e < best_end || (e == best_end && s < best_start)) {
            best_end = e;
            best_start = s;
        }
    }
    if (best_end == (size_t)-1)
        return 0;
    *at = best_start;
    return 1;
}

/* Length of the longest suffix of b[0, n) that is a proper prefix of a stop string. */
static size_t held_suffix(const lq_stopper *st, const char *b, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < st->n; i++) {
        size_t L = st->slen[i];
        size_t k = L - 1 < n ? L - 1 : n; /* proper prefix: at most L - 1 bytes */
        for (; k > best; k--)
            if (memcmp(b + n - k, st->stop[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

int lq_stopper_push(lq_stopper *st, const char *piece, size_t len, const char **out,
                    size_t *out_len)
{
    static const char empty[1] = {0};
    *out = empty;
    *out_len = 0;
    if (!st)
        return 0;
    if (st->stopped)
        return 1;
    /* drop what the previous call emitted; keep the held part at the front */
    size_t held = st->len - st->off;
    memmove(st->buf, st->buf + st->off, held);
    st->len = held;
    st->off = 0;
    if (!piece)
        len = 0;
    if (len > st->cap - st->len) {
        size_t need = st->len + len, cap = st->cap;
        while (cap < need)
            cap *= 2;
        char *nb = realloc(st->buf, cap);
        if (!nb) {
            /* Out of memory (pieces are a few bytes, so only under real exhaustion): end
             * the stream after the held text rather than emit text that was not checked. */
            st->stopped = 1;
            *out = st->buf;
            *out_len = st->len;
            st->off = st->len;
            return 1;
        }
        st->buf = nb;
        st->cap = cap;
    }
    if (len)
        memcpy(st->buf + st->len, piece, len);
    st->len += len;

    size_t at;
    if (find_stop(st, st->buf, st->len, &at)) {
        st->stopped = 1;
        *out = st->buf;
        *out_len = at;
        st->off = st->len; /* nothing remains held */
        return 1;
    }
    size_t h = held_suffix(st, st->buf, st->len);
    st->off = st->len - h;
    *out = st->buf;
    *out_len = st->off;
    return 0;
}

void lq_stopper_flush(lq_stopper *st, const char **out, size_t *out_len)
{
    static const char empty[1] = {0};
    *out = empty;
    *out_len = 0;
    if (!st || st->stopped)
        return;
    *out = st->buf + st->off;
    *out_len = st->len - st->off;
    st->off = st->len;
}
