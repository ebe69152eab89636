/* UTF-8 checks shared by everything that turns token bytes into JSON text (a lone byte
 * token decodes to a partial sequence; jansson and clients refuse invalid UTF-8). */
#ifndef LQ_CORE_UTF8_H
#define LQ_CORE_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s (1..4; n bytes available), or 0 if invalid
 * (overlongs, surrogates and code points above U+10FFFF are invalid). n must be >= 1. */
size_t lq_utf8_seq(const unsigned char *s, size_t n);
/* 1 if s[0..len) is valid UTF-8. */
int lq_utf8_valid(const char *s, size_t len);
/* A malloc'd NUL-terminated copy of s[0..len) with every invalid byte replaced by U+FFFD
 * (what HF's decode shows for a lone byte token); *out_len (may be NULL) its length. NULL
 * when out of memory. */
char *lq_utf8_lossy(const char *s, size_t len, size_t *out_len);

#endif
