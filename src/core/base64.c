#include <stdint.h>

#include "core/base64.h"

size_t lq_base64_encode(const void *data, size_t len, char *out)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *p = data;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
        out[o++] = A[(x >> 18) & 63];
        out[o++] = A[(x >> 12) & 63];
        out[o++] = i + 1 < len ? A[(x >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? A[x & 63] : '=';
    }
    out[o] = 0;
    return o;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

long lq_base64_decode(const char *s, size_t n, void *out)
{
    if (n % 4)
        return -1;
    uint8_t *o = out;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int pad = 0, v[4];
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)s[i + j];
            if (c == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad || (v[j] = b64_val(c)) < 0) /* data after '=' or a foreign character */
                return -1;
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        o[k++] = (uint8_t)(x >> 16);
        if (pad < 2)
            o[k++] = (uint8_t)(x >> 8);
        if (pad < 1)
            o[k++] = (uint8_t)x;
    }
    return (long)k;
}
