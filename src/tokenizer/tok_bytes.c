/* Bytes and code points: UTF-8 sequences, and the GPT-2 byte <-> unicode mapping of
 * byte-level BPE vocabularies. No other part of the tokenizer is needed here.  */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---------------------------------------------------------------- UTF-8 */

int tok_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        if (cp)
            *cp = c;
        return 1;
    }
    int need;
    uint32_t v;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return 0;
    }
    if (n < (size_t)need)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    v = (v << 6) | (s[1] & 0x3F);
    for (int i = 2; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (cp)
        *cp = v;
    return need;
}

size_t tok_utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int k = tok_utf8_seq(u + i, n - i, NULL);
        if (k == 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

/* ---------------------------------------------------------------- byte <-> unicode */

static uint16_t byte_cp[256];   /* code point byte b is written as */
static int16_t cp_byte[324];    /* inverse, -1 where no byte maps */
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;

static void init_tables(void)
{
    /* Printable Latin-1 bytes stand for themselves; the other 68 bytes take the code points
     * 256, 257, ... in byte order, so every byte becomes a visible character. */
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
    }
    for (int i = 0; i < 324; i++)
        cp_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_byte[byte_cp[b]] = (int16_t)b;
}

void tok_bpe_byte_tables(void) { pthread_once(&byte_once, init_tables); }

int tok_bpe_byte_to_utf8(uint8_t b, char out[2])
{
    tok_bpe_byte_tables();
    unsigned cp = byte_cp[b];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_bpe_cp_to_byte(uint32_t cp)
{
    tok_bpe_byte_tables();
    return cp < 324 ? cp_byte[cp] : -1;
}
