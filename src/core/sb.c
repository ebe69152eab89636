#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sb.h"

static int sb_grow(lq_sb *b, size_t add)
{
    if (b->oom)
        return -1;
    if (b->n + add + 1 <= b->cap)
        return 0;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + add + 1) {
        if (nc > ((size_t)1 << 40)) {
            b->oom = 1;
            return -1;
        }
        nc *= 2;
    }
    char *ns = realloc(b->s, nc);
    if (!ns) {
        b->oom = 1;
        return -1;
    }
    b->s = ns;
    b->cap = nc;
    return 0;
}

void lq_sb_put(lq_sb *b, const char *s, size_t n)
{
    if (sb_grow(b, n))
        return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void lq_sb_puts(lq_sb *b, const char *s) { lq_sb_put(b, s, strlen(s)); }

void lq_sb_printf(lq_sb *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        lq_sb_put(b, tmp, (size_t)n);
        return;
    }
    if (sb_grow(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

int lq_sb_finish(lq_sb *b, char **out, lq_err *err)
{
    if (b->oom || sb_grow(b, 0)) {
        free(b->s);
        memset(b, 0, sizeof *b);
        return lq_err_set(err, LQ_ENOMEM, "out of memory building JSON output");
    }
    b->s[b->n] = 0; /* "" when nothing was put (sb_grow only made room) */
    *out = b->s;
    memset(b, 0, sizeof *b);
    return LQ_OK;
}

void lq_sb_free(lq_sb *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void lq_sb_json_str(lq_sb *b, const char *s, size_t n)
{
    lq_sb_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            lq_sb_put(b, s + run, i - run);
            lq_sb_puts(b, esc);
            run = i + 1;
        }
    }
    lq_sb_put(b, s + run, n - run);
    lq_sb_put(b, "\"", 1);
}
