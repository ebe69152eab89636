#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

size_t lq_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t k;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; cp = c & 0x07; }
    else return 0;
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return k;
}

int lq_utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = lq_utf8_seq(u + i, len - i);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

char *lq_utf8_lossy(const char *s, size_t len, size_t *out_len)
{
    char *t = malloc(len * 3 + 1); /* each invalid byte becomes 3 */
    if (!t)
        return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = lq_utf8_seq(u + i, len - i);
        if (k) {
            memcpy(t + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(t + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    t[o] = 0;
    if (out_len)
        *out_len = o;
    return t;
}
