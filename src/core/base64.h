/* base64 (RFC 4648, standard alphabet, '=' padding): the WebSocket handshake and the vectors
 * of LARQL's .vlp patches (little-endian f32 bytes). */
#ifndef LQ_CORE_BASE64_H
#define LQ_CORE_BASE64_H

#include <stddef.h>

/* out must hold 4 * ceil(len / 3) + 1 bytes; it is NUL-terminated. Returns the length
 * written (without the NUL). */
size_t lq_base64_encode(const void *data, size_t len, char *out);
/* Strict decode of s[0..n): length a multiple of 4, only the alphabet, '=' only as the last
 * one or two characters. out must hold n / 4 * 3 bytes. Returns the decoded length, or -1
 * for malformed input. */
long lq_base64_decode(const char *s, size_t n, void *out);

#endif
