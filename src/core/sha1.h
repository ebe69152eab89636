/* SHA-1 (FIPS 180-4) and base64 (RFC 4648), for the WebSocket handshake only:
 * Sec-WebSocket-Accept = base64(SHA-1(key + GUID)). SHA-1 is not used for anything that
 * needs collision resistance here. Not a public header. */
#ifndef LQ_CORE_SHA1_H
#define LQ_CORE_SHA1_H

#include <stddef.h>
#include <stdint.h>

#include "core/base64.h"

typedef struct lq_sha1_ctx {
    uint32_t h[5];
    uint64_t bytes;      /* message length so far */
    uint8_t block[64];
    size_t fill;         /* bytes waiting in block */
} lq_sha1_ctx;

void lq_sha1_init(lq_sha1_ctx *c);
void lq_sha1_update(lq_sha1_ctx *c, const void *data, size_t len);
void lq_sha1_final(lq_sha1_ctx *c, uint8_t out[20]);
void lq_sha1(const void *data, size_t len, uint8_t out[20]);


#endif
