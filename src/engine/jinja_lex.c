/* Jinja lexer: template text -> text pieces and tag tokens, with Jinja2's whitespace rules as
 * transformers sets them: trim_blocks (the first newline after a block or comment tag is
 * dropped), lstrip_blocks (spaces and tabs from the start of a line up to a block or comment
 * tag are dropped; "{%+" keeps them), "-" on either side strips all whitespace on that side,
 * newlines normalised to "\n" and one trailing newline of the template dropped
 * (keep_trailing_newline off). */
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"

static int push(jlex *lx, jtok t)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 64;
        jtok *nt = realloc(lx->t, cap * sizeof *nt);
        if (!nt)
            return -1;
        lx->t = nt;
        lx->cap = cap;
    }
    lx->t[lx->n++] = t;
    return 0;
}

static char *own(jlex *lx, size_t n)
{
    if (lx->n_owned == lx->cap_owned) {
        size_t cap = lx->cap_owned ? lx->cap_owned * 2 : 16;
        char **no = realloc(lx->owned, cap * sizeof *no);
        if (!no)
            return NULL;
        lx->owned = no;
        lx->cap_owned = cap;
    }
    char *p = malloc(n + 1);
    if (p)
        lx->owned[lx->n_owned++] = p;
    return p;
}

void jj_lex_free(jlex *lx)
{
    for (size_t i = 0; i < lx->n_owned; i++)
        free(lx->owned[i]);
    free(lx->owned);
    free(lx->t);
    free(lx->src);
    memset(lx, 0, sizeof *lx);
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_ident0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void put_utf8(char *o, size_t *k, unsigned long cp)
{
    if (cp < 0x80) {
        o[(*k)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18));
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char c)
{
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string literal body s[0..n) with Python's escapes decoded (Jinja decodes with
 * "unicode-escape"; an unknown escape keeps its backslash). */
static int decode_str(jlex *lx, const char *s, size_t n, jtok *t)
{
    char *o = own(lx, n);
    if (!o)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': case 'u': case 'U': {
            int w = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            unsigned long cp = 0;
            int ok = 1;
            for (int d = 0; ok && d < w; d++) {
                int h = i + 1 + (size_t)d < n ? hexval(s[i + 1 + (size_t)d]) : -1;
                if (h < 0)
                    ok = 0;
                else
                    cp = cp * 16 + (unsigned long)h;
            }
            if (!ok || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return -2;
            put_utf8(o, &k, cp); /* at most 4 bytes from at least 4 source bytes */
            i += (size_t)w;
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                unsigned long cp = 0;
                int d = 0;
                while (d < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
                    cp = cp * 8 + (unsigned long)(s[i] - '0');
                    i++;
                    d++;
                }
                i--;
                put_utf8(o, &k, cp); /* <= 0x1FF: 2 bytes from >= 2 source bytes */
            } else {
                o[k++] = '\\';
                o[k++] = c;
            }
        }
    }
    o[k] = 0;
    t->s = o;
    t->n = k;
    return 0;
}

/* Line numbers for error messages: positions are asked for in increasing order, so a cursor
 * counts each newline once (a per-call scan from the start would be quadratic). */
typedef struct linecur {
    const char *p;
    int line;
} linecur;

static int line_at(linecur *lc, const char *p)
{
    for (; lc->p < p; lc->p++)
        lc->line += *lc->p == '\n';
    return lc->line;
}

/* Tokens inside a tag from p up to the closing delimiter; returns the position after it
 * (and its "-" flag) or NULL with err set. */
static const char *lex_tag(jlex *lx, const char *p, const char *end, char close, int *strip_after,
                           int line, lq_err *err)
{
    static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                      "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".",
                                      ":", "|"};
    int bal = 0; /* open brackets */
    while (p < end) {
        while (p < end && is_ws(*p)) {
            line += *p == '\n';
            p++;
        }
        if (p >= end)
            break;
        /* the closing delimiter, with an optional "-" or "+" before it; only outside brackets,
         * as Jinja2's lexer balances them ("{{ {'a': {}} }}") */
        if (bal == 0 && (*p == '-' || *p == '+') && end - p >= 3 && p[1] == close && p[2] == '}') {
            *strip_after = *p == '-';
            return p + 3;
        }
        if (bal == 0 && *p == close && p + 1 < end && p[1] == '}') {
            *strip_after = 0;
            return p + 2;
        }
        jtok t = {.line = line};
        if (is_ident0(*p)) {
            const char *s = p;
            while (p < end && (is_ident0(*p) || is_digit(*p)))
                p++;
            t.t = JT_NAME;
            t.s = s;
            t.n = (size_t)(p - s);
        } else if (is_digit(*p)) {
            const char *s = p;
            int isf = 0;
            while (p < end && (is_digit(*p) || *p == '_'))
                p++;
            if (p + 1 < end && *p == '.' && is_digit(p[1])) {
                isf = 1;
                p++;
                while (p < end && (is_digit(*p) || *p == '_'))
                    p++;
            }
            if (p < end && (*p == 'e' || *p == 'E')) {
                const char *q = p + 1;
                if (q < end && (*q == '+' || *q == '-'))
                    q++;
                if (q < end && is_digit(*q)) {
                    isf = 1;
                    p = q;
                    while (p < end && is_digit(*p))
                        p++;
                }
            }
            char buf[64];
            size_t k = 0;
            for (const char *q = s; q < p && k < sizeof buf - 1; q++)
                if (*q != '_')
                    buf[k++] = *q;
            buf[k] = 0;
            if ((size_t)(p - s) >= sizeof buf)
                return lq_err_set(err, LQ_EINVAL, "template line %d: number too long", line), NULL;
            if (isf) {
                t.t = JT_FLOAT;
                t.f = strtod(buf, NULL);
            } else {
                t.t = JT_INT;
                char *e;
                unsigned long long v = strtoull(buf, &e, 10);
                if (v > INT64_MAX)
                    return lq_err_set(err, LQ_EINVAL, "template line %d: integer %s too large", line, buf),
                           NULL;
                t.i = (int64_t)v;
            }
        } else if (*p == '\'' || *p == '"') {
            char q = *p++;
            const char *s = p;
            while (p < end && *p != q) {
                if (*p == '\\' && p + 1 < end)
                    p++;
                line += *p == '\n';
                p++;
            }
            if (p >= end)
                return lq_err_set(err, LQ_EINVAL, "template line %d: unterminated string literal", t.line),
                       NULL;
            t.t = JT_STRING;
            int rc = decode_str(lx, s, (size_t)(p - s), &t);
            if (rc == -1)
                return lq_err_set(err, LQ_ENOMEM, "template: out of memory"), NULL;
            if (rc)
                return lq_err_set(err, LQ_EINVAL, "template line %d: bad escape in string literal", t.line),
                       NULL;
            p++;
        } else {
            size_t i = 0;
            for (; i < sizeof ops / sizeof ops[0]; i++) {
                size_t l = strlen(ops[i]);
                if ((size_t)(end - p) >= l && !memcmp(p, ops[i], l))
                    break;
            }
            if (i == sizeof ops / sizeof ops[0])
                return lq_err_set(err, LQ_EINVAL, "template line %d: unexpected character '%c'", line, *p),
                       NULL;
            t.t = JT_OP;
            t.s = p;
            t.n = strlen(ops[i]);
            if (t.n == 1 && strchr("([{", *p))
                bal++;
            else if (t.n == 1 && strchr(")]}", *p) && bal > 0)
                bal--;
            p += t.n;
        }
        if (push(lx, t))
            return lq_err_set(err, LQ_ENOMEM, "template: out of memory"), NULL;
    }
    return NULL; /* caller reports the unclosed tag */
}

/* Text piece [s, e) with the whitespace rules of its neighbouring tags applied. */
static int emit_text(jlex *lx, const char *s, const char *e, int line, lq_err *err)
{
    if (e <= s)
        return 0;
    jtok t = {.t = JT_TEXT, .line = line, .s = s, .n = (size_t)(e - s)};
    if (push(lx, t))
        return lq_err_set(err, LQ_ENOMEM, "template: out of memory");
    return 0;
}

int jj_lex(const char *src, size_t n, jlex *lx, lq_err *err)
{
    memset(lx, 0, sizeof *lx);
    if (n > JJ_MAX_SRC)
        return lq_err_set(err, LQ_EINVAL, "template is %zu bytes; at most %u", n, JJ_MAX_SRC);
    /* newlines normalised ("\r\n" and "\r" -> "\n"), as Jinja2 does for text and strings */
    char *b = malloc(n + 1);
    if (!b)
        return lq_err_set(err, LQ_ENOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            b[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            b[k++] = src[i];
        }
    }
    if (k && b[k - 1] == '\n') /* keep_trailing_newline=False */
        k--;
    b[k] = 0;
    lx->src = b;
    const char *p = b, *end = b + k;
    linecur lc = {b, 1};
    int line_starting = 1; /* the previous token ended a line (or this is the start) */
    while (p < end) {
        /* next tag start */
        const char *q = p;
        while (q + 1 < end && !(q[0] == '{' && (q[1] == '{' || q[1] == '%' || q[1] == '#')))
            q++;
        if (q + 1 >= end) {
            if (emit_text(lx, p, end, line_at(&lc, p), err))
                return err->code;
            break;
        }
        char kind = q[1];
        const char *tag_body = q + 2;
        char mod = tag_body < end ? *tag_body : 0;
        const char *te = q; /* end of the text before the tag */
        if (mod == '-') {
            while (te > p && is_ws(te[-1]))
                te--;
        } else if (kind != '{' && mod != '+') {
            /* lstrip_blocks: only spaces/tabs between the line start and the tag */
            const char *ls = te;
            while (ls > p && (ls[-1] == ' ' || ls[-1] == '\t'))
                ls--;
            if ((ls > p && ls[-1] == '\n') || (ls == p && line_starting))
                te = ls;
        }
        if (mod == '-' || mod == '+')
            tag_body++;
        if (emit_text(lx, p, te, line_at(&lc, p), err))
            return err->code;
        int line = line_at(&lc, q);
        int strip_after = 0;
        const char *after;
        if (kind == '#') {
            const char *c = tag_body;
            while (c + 1 < end && !(c[0] == '#' && c[1] == '}'))
                c++;
            if (c + 1 >= end)
                return lq_err_set(err, LQ_EINVAL, "template line %d: comment '{#' is never closed", line);
            strip_after = c > tag_body && c[-1] == '-';
            after = c + 2;
        } else {
            jtok open = {.t = kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, .line = line};
            if (push(lx, open))
                return lq_err_set(err, LQ_ENOMEM, "template: out of memory");
            after = lex_tag(lx, tag_body, end, kind == '{' ? '}' : '%', &strip_after, line, err);
            if (!after) {
                if (!err->msg[0] || err->code == 0)
                    lq_err_set(err, LQ_EINVAL, "template line %d: '%s' is never closed with '%s'", line,
                               kind == '{' ? "{{" : "{%", kind == '{' ? "}}" : "%}");
                return err->code ? err->code : LQ_EINVAL;
            }
            jtok close = {.t = kind == '{' ? JT_VAR_END : JT_BLOCK_END, .line = line_at(&lc, after)};
            if (push(lx, close))
                return lq_err_set(err, LQ_ENOMEM, "template: out of memory");
            /* {% raw %} ... {% endraw %}: the body is text */
            jtok *tt = lx->t + lx->n;
            if (kind == '%' && lx->n >= 3 && tt[-3].t == JT_BLOCK_BEGIN && tt[-2].t == JT_NAME &&
                tt[-2].n == 3 && !memcmp(tt[-2].s, "raw", 3)) {
                lx->n -= 3;
                const char *r = after, *body_end = NULL, *raw_after = NULL;
                int raw_strip = 0;
                for (; r + 1 < end; r++) {
                    if (r[0] != '{' || r[1] != '%')
                        continue;
                    const char *x = r + 2;
                    if (x < end && (*x == '-' || *x == '+'))
                        x++;
                    while (x < end && is_ws(*x))
                        x++;
                    if ((size_t)(end - x) < 6 || memcmp(x, "endraw", 6))
                        continue;
                    x += 6;
                    while (x < end && is_ws(*x))
                        x++;
                    if (x < end && *x == '-') {
                        raw_strip = 1;
                        x++;
                    }
                    if (x + 1 < end && x[0] == '%' && x[1] == '}') {
                        body_end = r;
                        if (r[2] == '-')
                            while (body_end > after && is_ws(body_end[-1]))
                                body_end--;
                        raw_after = x + 2;
                        break;
                    }
                }
                if (!body_end)
                    return lq_err_set(err, LQ_EINVAL, "template line %d: '{%% raw %%}' is never closed", line);
                const char *bs = after;
                if (strip_after)
                    while (bs < body_end && is_ws(*bs))
                        bs++;
                else if (bs < body_end && *bs == '\n')
                    bs++;
                if (emit_text(lx, bs, body_end, line_at(&lc, bs), err))
                    return err->code;
                after = raw_after;
                strip_after = raw_strip;
            }
        }
        p = after;
        if (strip_after) {
            const char *s0 = p;
            while (p < end && is_ws(*p))
                p++;
            line_starting = p > s0 ? p[-1] == '\n' : (p > b && p[-1] == '\n');
        } else if (kind != '{' && p < end && *p == '\n') {
            p++; /* trim_blocks */
            line_starting = 1;
        } else {
            line_starting = 0;
        }
    }
    jtok eof = {.t = JT_EOF, .line = line_at(&lc, end)};
    if (push(lx, eof))
        return lq_err_set(err, LQ_ENOMEM, "template: out of memory");
    return 0;
}
