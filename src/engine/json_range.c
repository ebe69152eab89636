/* Integer ranges as GBNF for the JSON Schema converter (minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum on "type": "integer", as llama.cpp's converter does):
 * the decimal strings, without leading zeros, of the integers in [lo, hi]. Each digit count
 * is a range of equal-length strings, split at its first digit into "the low end's prefix
 * then anything above its rest", "whole digits in between" and "the high end's prefix then
 * anything below its rest". */
#include <stdio.h>
#include <string.h>

#include "core/sb.h"
#include "engine/json_internal.h"

#define MAX_DIGITS 16 /* as the converter's integral-part rule */

static int all(const char *s, char c)
{
    for (; *s; s++)
        if (*s != c)
            return 0;
    return 1;
}

static void any_digits(lq_sb *b, size_t n)
{
    if (n)
        lq_sb_printf(b, " [0-9]{%zu}", n);
}

/* The strings of length strlen(x) between x and y (equal lengths, x <= y). */
static void fixed(lq_sb *b, const char *x, const char *y)
{
    size_t L = strlen(x);
    if (L == 0)
        return;
    if (x[0] == y[0]) {
        lq_sb_printf(b, "[%c]", x[0]);
        if (L > 1) {
            lq_sb_puts(b, " ");
            fixed(b, x + 1, y + 1);
        }
        return;
    }
    int xz = all(x + 1, '0'), y9 = all(y + 1, '9');
    char nines[MAX_DIGITS + 1], zeros[MAX_DIGITS + 1];
    memset(nines, '9', L - 1);
    nines[L - 1] = 0;
    memset(zeros, '0', L - 1);
    zeros[L - 1] = 0;
    lq_sb_puts(b, "( ");
    int sep = 0;
    char lo = x[0], hi = y[0];
    if (!xz) { /* x0 then at least x's rest */
        lq_sb_printf(b, "[%c] ", x[0]);
        fixed(b, x + 1, nines);
        lo++;
        sep = 1;
    }
    if (!y9)
        hi--;
    if (lo <= hi) {
        lq_sb_printf(b, "%s[%c-%c]", sep ? " | " : "", lo, hi);
        any_digits(b, L - 1);
        sep = 1;
    }
    if (!y9) { /* y0 then at most y's rest */
        lq_sb_printf(b, "%s[%c] ", sep ? " | " : "", y[0]);
        fixed(b, zeros, y + 1);
    }
    lq_sb_puts(b, " )");
}

static size_t ndigits(unsigned long long v)
{
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Magnitudes in [lo, hi] (hi_inf: no upper end, up to MAX_DIGITS digits), as alternatives. */
static void magnitudes(lq_sb *b, unsigned long long lo, unsigned long long hi, int hi_inf)
{
    size_t Llo = ndigits(lo), Lhi = hi_inf ? Llo : ndigits(hi);
    int sep = 0;
    unsigned long long p = 1;
    for (size_t i = 1; i < Llo; i++)
        p *= 10; /* 10^(Llo-1) */
    for (size_t L = Llo; L <= Lhi; L++, p *= 10) {
        unsigned long long a = L == Llo ? lo : p, z = p * 10 - 1;
        unsigned long long e = (!hi_inf && L == Lhi) ? hi : z;
        char xs[32], ys[32];
        snprintf(xs, sizeof xs, "%llu", a);
        snprintf(ys, sizeof ys, "%llu", e);
        lq_sb_puts(b, sep ? " | " : "");
        fixed(b, xs, ys);
        sep = 1;
    }
    if (hi_inf && Llo < MAX_DIGITS) /* every longer number */
        lq_sb_printf(b, " | [1-9] [0-9]{%zu,%d}", Llo, MAX_DIGITS - 1);
}

int gr_int_range(long long lo, int has_lo, long long hi, int has_hi, lq_sb *b)
{
    int parts = 0;
    lq_sb_puts(b, "( ");
    if (!has_lo || lo < 0) {
        unsigned long long mlo = has_hi && hi < 0 ? (unsigned long long)-hi : 1;
        unsigned long long mhi = has_lo ? (unsigned long long)-lo : 0;
        if (!has_lo || mlo <= mhi) {
            lq_sb_puts(b, "\"-\" ( ");
            magnitudes(b, mlo, mhi, !has_lo);
            lq_sb_puts(b, " )");
            parts++;
        }
    }
    if (!has_hi || hi >= 0) {
        unsigned long long a = has_lo && lo > 0 ? (unsigned long long)lo : 0;
        if (!has_hi || a <= (unsigned long long)hi) {
            lq_sb_puts(b, parts ? " | " : "");
            magnitudes(b, a, has_hi ? (unsigned long long)hi : 0, !has_hi);
            parts++;
        }
    }
    lq_sb_puts(b, " )");
    return parts ? 0 : -1;
}
