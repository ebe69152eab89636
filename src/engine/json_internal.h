/* Shared by the JSON Schema converter's files (json_schema.c, json_pattern.c,
 * json_range.c). Not a public header. */
#ifndef LQ_ENGINE_JSON_INTERNAL_H
#define LQ_ENGINE_JSON_INTERNAL_H

#include "core/sb.h"
#include "larql/status.h"

/* Appends a GBNF string literal of the bytes s[0..n). */
void js_put_literal(lq_sb *b, const char *s, size_t n);

/* Appends a GBNF expression for a JSON string matching pattern pat (json_pattern.c).
 * Returns 0, or an LQ_E* code with err set ("json schema: pattern ..."). */
int js_pattern(const char *pat, lq_sb *b, lq_err *err);

/* Appends a parenthesised GBNF expression matching the decimal integers in [lo, hi] (has_lo /
 * has_hi 0: no bound on that side; |bounds| <= 10^15). Returns -1 when the range is empty
 * (json_range.c). */
int gr_int_range(long long lo, int has_lo, long long hi, int has_hi, lq_sb *b);

#endif
