/* Integer ranges as GBNF (json_range.c), for the JSON Schema converter. Not a public header. */
#ifndef LQ_ENGINE_JSON_RANGE_H
#define LQ_ENGINE_JSON_RANGE_H

#include "core/sb.h"

/* Appends a parenthesised GBNF expression matching the decimal integers in [lo, hi] (has_lo /
 * has_hi 0: no bound on that side; |bounds| <= 10^15). Returns -1 when the range is empty. */
int gr_int_range(long long lo, int has_lo, long long hi, int has_hi, lq_sb *b);

#endif
