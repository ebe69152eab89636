/* CRC-32C, slicing by 8: eight 256-entry tables built once (a thread-safe one-time init), so
 * a journal of hundreds of megabytes is checked at several GB/s without CPU-specific code. */
#include <pthread.h>

#include "core/crc32c.h"

static uint32_t T[8][256];
static pthread_once_t T_once = PTHREAD_ONCE_INIT;

static void init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        T[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            T[t][i] = (T[t - 1][i] >> 8) ^ T[0][T[t - 1][i] & 0xff];
}

uint32_t lq_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&T_once, init_tables);
    const uint8_t *p = data;
    crc = ~crc;
    while (n >= 8) {
        /* bytes assembled explicitly: no alignment or endianness assumption */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = T[7][lo & 0xff] ^ T[6][(lo >> 8) & 0xff] ^ T[5][(lo >> 16) & 0xff] ^ T[4][lo >> 24] ^ T[3][p[4]] ^
              T[2][p[5]] ^ T[1][p[6]] ^ T[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ T[0][(crc ^ *p++) & 0xff];
    return ~crc;
}
