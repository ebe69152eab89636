/* JSON Schema "pattern" -> GBNF: the regular-expression subset the converter supports
 * (anchored ^...$; literals, escapes, classes with ranges and negation, \d \w \s and their
 * negations, `.`, groups (and (?:...)), `|`, `*` `+` `?` `{m,n}`, lazy `?` ignored). The
 * pattern matches the string's decoded text; the grammar produces its JSON form, so a
 * literal '"' or '\' comes out escaped, negated classes and `.` never produce '"', '\' or
 * control characters (a subset of their language), and a positive class that holds one of
 * those is refused. Lookaround, back-references, anchors inside and possessive or stacked
 * quantifiers are refused (LQ_EUNSUPPORTED). */
#include <stdio.h>
#include <string.h>

#include "engine/json_internal.h"

#define JS_MAX_REPEAT 10000

typedef struct rx {
    const char *p, *end;
    lq_err *err;
    int rc;
} rx;

/* Records the first error (fmt takes one string argument); returns the code. */
static int rbad(rx *R, int code, const char *fmt, const char *arg)
{
    if (!R->rc) {
        char msg[400];
        snprintf(msg, sizeof msg, fmt, arg);
        R->rc = lq_err_set(R->err, code, "json schema: %s", msg);
    }
    return R->rc;
}

static int rx_alt(rx *R, lq_sb *b);

/* One class member escape (\d \w \s inside [...]) or a literal character, into a class
 * body. Returns 0 or an error. */
static int rx_class_char(rx *R, lq_sb *b, unsigned char c)
{
    if (c == '"' || c == '\\')
        return rbad(R, LQ_EUNSUPPORTED, "%s", "pattern: a class that can match '\"' or "
                   "'\\\\' is not supported");
    if (c == ']' || c == '^' || c == '-' || c < 0x20 || c == 0x7F)
        lq_sb_printf(b, "\\x%02X", c);
    else
        lq_sb_put(b, (const char *)&c, 1);
    return 0;
}

static int rx_escape_class(rx *R, lq_sb *b, char e, int in_class)
{
    const char *body = NULL;
    int neg = 0;
    switch (e) {
    case 'd': body = "0-9"; break;
    case 'w': body = "a-zA-Z0-9_"; break;
    case 's': body = " "; break; /* \t \n \r would need JSON escapes: a space only */
    case 'D': body = "0-9"; neg = 1; break;
    case 'W': body = "a-zA-Z0-9_"; neg = 1; break;
    case 'S': body = " \\t\\n\\r\\x0B\\x0C"; neg = 1; break;
    default: return 1; /* not a class escape */
    }
    if (in_class && neg)
        return rbad(R, LQ_EUNSUPPORTED, "pattern: \\%s inside [...] is not supported",
                   e == 'D' ? "D" : e == 'W' ? "W" : "S");
    if (in_class)
        lq_sb_puts(b, body);
    else if (neg)
        lq_sb_printf(b, "[^%s\"\\\\\\x00-\\x1F\\x7F]", body);
    else
        lq_sb_printf(b, "[%s]", body);
    return 0;
}

static int rx_atom(rx *R, lq_sb *b)
{
    char c = *R->p;
    if (c == '(') {
        R->p++;
        if (R->end - R->p >= 2 && R->p[0] == '?') {
            if (R->p[1] != ':')
                return rbad(R, LQ_EUNSUPPORTED, "%s", "pattern: lookaround and named "
                           "groups are not supported");
            R->p += 2;
        }
        lq_sb_puts(b, "( ");
        if (rx_alt(R, b))
            return R->rc;
        if (R->p >= R->end || *R->p != ')')
            return rbad(R, LQ_EINVAL, "%s", "pattern: unbalanced parenthesis");
        R->p++;
        lq_sb_puts(b, " )");
        return 0;
    }
    if (c == '[') {
        R->p++;
        int neg = 0;
        if (R->p < R->end && *R->p == '^') {
            neg = 1;
            R->p++;
        }
        lq_sb_puts(b, neg ? "[^" : "[");
        const char *body = R->p;
        while (R->p < R->end && (*R->p != ']' || R->p == body)) {
            int first = R->p == body;
            unsigned char ch = (unsigned char)*R->p++;
            if (ch == '\\') {
                if (R->p >= R->end)
                    break;
                char e = *R->p++;
                int r = rx_escape_class(R, b, e, 1);
                if (r == 0)
                    continue;
                if (R->rc)
                    return R->rc;
                ch = e == 'n' ? '\n' : e == 't' ? '\t' : (unsigned char)e;
            } else if (ch == '-' && R->p < R->end && *R->p != ']' && !first) {
                lq_sb_puts(b, "-");
                continue;
            }
            if (neg && (ch == '"' || ch == '\\'))
                continue; /* excluded below anyway */
            if (rx_class_char(R, b, ch))
                return R->rc;
        }
        if (R->p >= R->end)
            return rbad(R, LQ_EINVAL, "%s", "pattern: unterminated [...]");
        R->p++;
        if (neg)
            lq_sb_puts(b, "\"\\\\\\x00-\\x1F\\x7F");
        lq_sb_puts(b, "]");
        return 0;
    }
    if (c == '.') {
        R->p++;
        lq_sb_puts(b, "[^\"\\\\\\x00-\\x1F\\x7F]");
        return 0;
    }
    if (c == '\\') {
        if (R->p + 1 >= R->end)
            return rbad(R, LQ_EINVAL, "%s", "pattern: trailing backslash");
        char e = R->p[1];
        R->p += 2;
        int r = rx_escape_class(R, b, e, 0);
        if (r <= 0)
            return R->rc;
        if (e >= '0' && e <= '9')
            return rbad(R, LQ_EUNSUPPORTED, "%s", "pattern: back-references are not "
                       "supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
            return rbad(R, LQ_EUNSUPPORTED, "pattern: the escape \\%s is not supported",
                       (char[]){e, 0});
        c = e;
    } else if (c == '^' || c == '$') {
        return rbad(R, LQ_EUNSUPPORTED, "%s", "pattern: anchors are supported only at the "
                   "start (^) and end ($)");
    } else {
        R->p++;
    }
    /* a literal: the JSON text carries '"' and '\' escaped */
    if (c == '"')
        lq_sb_puts(b, "\"\\\\\\\"\"");
    else if (c == '\\')
        lq_sb_puts(b, "\"\\\\\\\\\"");
    else
        js_put_literal(b, &c, 1);
    return 0;
}

static int rx_count(rx *R, unsigned *v)
{
    unsigned x = 0;
    const char *s = R->p;
    while (R->p < R->end && *R->p >= '0' && *R->p <= '9') {
        x = x * 10 + (unsigned)(*R->p++ - '0');
        if (x > JS_MAX_REPEAT)
            return rbad(R, LQ_EUNSUPPORTED, "%s", "pattern: repetition count above 10000");
    }
    if (R->p == s)
        return rbad(R, LQ_EINVAL, "%s", "pattern: expecting a number in {m,n}");
    *v = x;
    return 0;
}

static int rx_seq(rx *R, lq_sb *b)
{
    while (R->p < R->end && *R->p != '|' && *R->p != ')') {
        if (*R->p == '*' || *R->p == '+' || *R->p == '?' || *R->p == '{')
            return rbad(R, LQ_EINVAL, "%s", "pattern: a quantifier with nothing before it");
        lq_sb_puts(b, " ");
        if (rx_atom(R, b))
            return R->rc;
        if (R->p < R->end && (*R->p == '*' || *R->p == '+' || *R->p == '?')) {
            lq_sb_put(b, R->p, 1);
            R->p++;
        } else if (R->p < R->end && *R->p == '{') {
            R->p++;
            unsigned m, n = 0;
            if (rx_count(R, &m))
                return R->rc;
            int open = 0, has_n = 0;
            if (R->p < R->end && *R->p == ',') {
                R->p++;
                open = 1;
                if (R->p < R->end && *R->p != '}') {
                    if (rx_count(R, &n))
                        return R->rc;
                    has_n = 1;
                }
            }
            if (R->p >= R->end || *R->p != '}')
                return rbad(R, LQ_EINVAL, "%s", "pattern: expecting '}'");
            R->p++;
            if (!open)
                lq_sb_printf(b, "{%u}", m);
            else if (has_n)
                lq_sb_printf(b, "{%u,%u}", m, n);
            else
                lq_sb_printf(b, "{%u,}", m);
        } else {
            continue;
        }
        if (R->p < R->end && *R->p == '?')
            R->p++; /* lazy: the language is the same */
        if (R->p < R->end && (*R->p == '*' || *R->p == '+' || *R->p == '{'))
            return rbad(R, LQ_EUNSUPPORTED, "%s", "pattern: possessive or stacked "
                       "quantifiers are not supported");
    }
    return 0;
}

static int rx_alt(rx *R, lq_sb *b)
{
    if (rx_seq(R, b))
        return R->rc;
    while (R->p < R->end && *R->p == '|') {
        R->p++;
        lq_sb_puts(b, " |");
        if (rx_seq(R, b))
            return R->rc;
    }
    return 0;
}

int js_pattern(const char *pat, lq_sb *b, lq_err *err)
{
    rx R = {NULL, NULL, err, 0};
    size_t n = strlen(pat);
    if (n < 2 || pat[0] != '^' || pat[n - 1] != '$' || (n >= 3 && pat[n - 2] == '\\'))
        return rbad(&R, LQ_EUNSUPPORTED, "pattern \"%.200s\": only patterns anchored with ^ "
                    "and $ are supported", pat);
    R.p = pat + 1;
    R.end = pat + n - 1;
    lq_sb_puts(b, "\"\\\"\" (");
    if (rx_alt(&R, b))
        return R.rc;
    if (R.p != R.end)
        return rbad(&R, LQ_EINVAL, "pattern \"%.200s\": unbalanced parenthesis", pat);
    lq_sb_puts(b, " ) \"\\\"\" ws");
    return 0;
}
