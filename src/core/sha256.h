/* SHA-256 (FIPS 180-4): the checksums index.json records for a vindex's files, and a .vlp's
 * base_checksum. Not a public header. */
#ifndef LQ_CORE_SHA256_H
#define LQ_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct lq_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t nbuf;
} lq_sha256;
void lq_sha256_init(lq_sha256 *s);
void lq_sha256_update(lq_sha256 *s, const void *data, size_t n);
void lq_sha256_final(lq_sha256 *s, uint8_t out[32]);
void lq_sha256_hex(const void *data, size_t n, char hex[65]);

#endif
