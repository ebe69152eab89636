/* LQL's output helpers: LARQL's column padding (in characters), Rust's {:?} quoting, counts
 * as 1.2K / 3.48M, LIKE patterns. */
#include <stdio.h>
#include <string.h>

#include "lql/exec_internal.h"

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

void lq_lql_pad(lq_sb *b, const char *s, int width, int right)
{
    size_t n = utf8_chars(s);
    size_t fill = width > 0 && n < (size_t)width ? (size_t)width - n : 0;
    static const char spaces[] = "                                                                ";
    if (!right)
        lq_sb_puts(b, s);
    while (fill) {
        size_t k = fill < sizeof spaces - 1 ? fill : sizeof spaces - 1;
        lq_sb_put(b, spaces, k);
        fill -= k;
    }
    if (right)
        lq_sb_puts(b, s);
}

void lq_lql_quoted(lq_sb *b, const char *s)
{
    lq_sb_put(b, "\"", 1);
    for (; *s; s++) {
        const char *e = *s == '"' ? "\\\"" : *s == '\\' ? "\\\\" : *s == '\n' ? "\\n"
                      : *s == '\t' ? "\\t" : *s == '\r' ? "\\r" : NULL;
        if (e)
            lq_sb_puts(b, e);
        else
            lq_sb_put(b, s, 1);
    }
    lq_sb_put(b, "\"", 1);
}

void lq_lql_fmt_count(char *buf, size_t cap, uint64_t n)
{
    if (n >= 1000000)
        snprintf(buf, cap, "%.2fM", (double)n / 1e6);
    else if (n >= 1000)
        snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    else
        snprintf(buf, cap, "%llu", (unsigned long long)n);
}

/* "%paris%" -> "paris": LIKE patterns are substrings here (LARQL supports % at either end) */
const char *lq_lql_like_core(const char *s, char *buf, size_t cap)
{
    while (*s == '%')
        s++;
    snprintf(buf, cap, "%s", s);
    size_t l = strlen(buf);
    while (l && buf[l - 1] == '%')
        buf[--l] = 0;
    return buf;
}
