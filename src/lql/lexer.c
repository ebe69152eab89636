/* LQL lexer (LARQL's token set, crates/larql-lql/src/lexer.rs): case-insensitive keywords,
 * identifiers [A-Za-z_][A-Za-z0-9_]*, strings in "..." or '...' with \\ \" \' \n \t \r
 * escapes (any other escaped character stands for itself), integers and decimals ('.' only
 * when a digit follows), '-' always a Dash token (ranges "0-3"), "--" line comments and the
 * punctuation * , ; ( ) . = != > < >= <= |>. Every token records its line and column so the
 * parser can point at it; the script splitter and the shell's "is the statement complete?"
 * test share the same quote/comment rules. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lql/lql_internal.h"

/* LARQL's keyword list: a word spelled like one of these is a keyword in any case. Field
 * names that are keywords (LAYER, RELATION, CONFIDENCE ...) are accepted by the parser
 * where a field is expected. */
static const char *const KEYWORDS[] = {
    "EXTRACT", "COMPILE", "DIFF", "USE", "WALK", "SELECT", "DESCRIBE", "EXPLAIN", "INSERT",
    "DELETE", "UPDATE", "MERGE", "SHOW", "STATS", "FROM", "INTO", "WHERE", "AND", "OR", "NOT",
    "IN", "LIKE", "BETWEEN", "ORDER", "BY", "ASC", "DESC", "LIMIT", "TOP", "LAYERS", "MODE",
    "COMPARE", "AT", "LAYER", "CONFIDENCE", "MODEL", "EDGES", "ENTITIES", "RELATION",
    "RELATIONS", "FEATURES", "MODELS", "FORMAT", "COMPONENTS", "ON", "CONFLICT",
    "KEEP_SOURCE", "KEEP_TARGET", "HIGHEST_CONFIDENCE", "LAST_WINS", "FAIL", "FOR", "SET",
    "VALUES", "CURRENT", "WITH", "EXAMPLES", "ONLY", "VERBOSE", "RANGE", "ALL", "NEAREST",
    "TO", "PURE", "HYBRID", "DENSE", "SAFETENSORS", "GGUF", "AUTO_EXTRACT", "FFN_GATE",
    "FFN_DOWN", "FFN_UP", "EMBEDDINGS", "ATTN_OV", "ATTN_QK", "INFER", "SYNTAX", "KNOWLEDGE",
    "OUTPUT", "WEIGHTS", "INFERENCE", "BEGIN", "SAVE", "APPLY", "REMOVE", "PATCH", "PATCHES",
    "REMOTE", "TRACE", "DECOMPOSE", "POSITIONS", "BRIEF", "RAW", "ATTENTION", "ALPHA", "KNN",
    "COMPOSE", "REBALANCE", "FLOOR", "CEILING", "MAX", "UNTIL", "CONVERGED", "COMPACT",
    "STATUS", "SUBJECT", "ROUTE", "VERIFY", "FALLBACK", "TOPK", "EXIT",
};

int lq_lql_is_keyword(const char *word, size_t len)
{
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (strlen(KEYWORDS[i]) == len && !strncasecmp(KEYWORDS[i], word, len))
            return 1;
    return 0;
}

int lq_lql_diag(lq_err *err, const char *kind, const char *src, size_t len, size_t off,
                int line, int col, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (off > len)
        off = len;
    /* the source line holding off, clipped to a window around it so that the caret line
     * stays readable (and inside the error buffer) on long one-line scripts */
    size_t ls = off, le = off;
    while (ls > 0 && src[ls - 1] != '\n')
        ls--;
    while (le < len && src[le] != '\n' && src[le] != '\r')
        le++;
    const size_t W = 150;
    if (off - ls > W / 2 + 10)
        ls = off - W / 2;
    if (le - ls > W)
        le = ls + W;
    char shown[160], caret[160];
    size_t n = 0;
    for (size_t i = ls; i < le && n < sizeof shown - 1; i++, n++)
        shown[n] = src[i] == '\t' ? ' ' : src[i]; /* a tab would misalign the caret */
    shown[n] = 0;
    size_t c = off - ls < sizeof caret - 2 ? off - ls : sizeof caret - 2;
    memset(caret, ' ', c);
    caret[c] = '^';
    caret[c + 1] = 0;
    return lq_err_set(err, LQ_EINVAL, "%s at line %d, column %d: %s\n  %s\n  %s", kind, line, col,
                      msg, shown, caret);
}

typedef struct lx {
    const char *s;
    size_t n, i;
    int line, col;       /* of s[i] */
} lx;

static void adv(lx *x)
{
    if (x->s[x->i] == '\n') {
        x->line++;
        x->col = 1;
    } else {
        x->col++;
    }
    x->i++;
}

/* Skips blanks and "--" comments. */
static void skip_space(lx *x)
{
    while (x->i < x->n) {
        unsigned char ch = (unsigned char)x->s[x->i];
        if (isspace(ch)) {
            adv(x);
        } else if (ch == '-' && x->i + 1 < x->n && x->s[x->i + 1] == '-') {
            while (x->i < x->n && x->s[x->i] != '\n')
                adv(x);
        } else {
            break;
        }
    }
}

static int push(lq_ltoks *t, size_t *cap, const lq_ltok *k)
{
    if (t->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        lq_ltok *nt = realloc(t->t, nc * sizeof *nt);
        if (!nt)
            return -1;
        t->t = nt;
        *cap = nc;
    }
    t->t[t->n++] = *k;
    return 0;
}

static int lex_string(lx *x, lq_ltok *k, lq_err *err)
{
    char q = x->s[x->i];
    size_t start = x->i;
    int l0 = x->line, c0 = x->col;
    adv(x);
    lq_sb b = {0};
    while (x->i < x->n && x->s[x->i] != q) {
        char ch = x->s[x->i];
        if (ch == '\\' && x->i + 1 < x->n) {
            adv(x);
            char e = x->s[x->i];
            ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        if (ch == 0) {
            lq_sb_free(&b);
            return lq_lql_diag(err, "Parse error", x->s, x->n, x->i, x->line, x->col,
                               "NUL byte inside a string");
        }
        lq_sb_put(&b, &ch, 1);
        adv(x);
    }
    if (x->i >= x->n) {
        lq_sb_free(&b);
        return lq_lql_diag(err, "Parse error", x->s, x->n, start, l0, c0,
                           "unterminated string (no closing %c)", q);
    }
    adv(x); /* closing quote */
    /* an empty put still writes the terminating NUL: lq_sb_finish on a builder that never
     * got a byte hands over an unterminated buffer */
    lq_sb_put(&b, "", 0);
    k->kind = LQ_LT_STRING;
    return lq_sb_finish(&b, &k->text, err);
}

static int lex_number(lx *x, lq_ltok *k, lq_err *err)
{
    size_t start = x->i;
    int l0 = x->line, c0 = x->col, dec = 0;
    while (x->i < x->n && isdigit((unsigned char)x->s[x->i]))
        adv(x);
    if (x->i + 1 < x->n && x->s[x->i] == '.' && isdigit((unsigned char)x->s[x->i + 1])) {
        dec = 1;
        adv(x);
        while (x->i < x->n && isdigit((unsigned char)x->s[x->i]))
            adv(x);
    }
    char buf[64];
    size_t n = x->i - start;
    if (n >= sizeof buf)
        return lq_lql_diag(err, "Parse error", x->s, x->n, start, l0, c0, "number too long");
    memcpy(buf, x->s + start, n);
    buf[n] = 0;
    errno = 0;
    if (dec) {
        k->kind = LQ_LT_NUMBER;
        k->num = strtod(buf, NULL);
    } else {
        k->kind = LQ_LT_INT;
        k->ival = strtoll(buf, NULL, 10);
        if (errno == ERANGE)
            return lq_lql_diag(err, "Parse error", x->s, x->n, start, l0, c0,
                               "integer %s is too large", buf);
        k->num = (double)k->ival;
    }
    return 0;
}

static int lex_word(lx *x, lq_ltok *k, lq_err *err)
{
    size_t start = x->i;
    while (x->i < x->n && (isalnum((unsigned char)x->s[x->i]) || x->s[x->i] == '_'))
        adv(x);
    size_t n = x->i - start;
    k->text = malloc(n + 1);
    if (!k->text)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    memcpy(k->text, x->s + start, n);
    k->text[n] = 0;
    k->kind = lq_lql_is_keyword(k->text, n) ? LQ_LT_KEYWORD : LQ_LT_IDENT;
    if (k->kind == LQ_LT_KEYWORD)
        for (size_t i = 0; i < n; i++)
            k->text[i] = (char)toupper((unsigned char)k->text[i]);
    return 0;
}

int lq_lql_lex(const char *src, size_t len, int line, int col, lq_ltoks *out, lq_err *err)
{
    out->t = NULL;
    out->n = 0;
    size_t cap = 0;
    lx x = {src, len, 0, line > 0 ? line : 1, col > 0 ? col : 1};
    for (;;) {
        skip_space(&x);
        lq_ltok k = {0};
        k.off = x.i;
        k.line = x.line;
        k.col = x.col;
        int rc = 0;
        if (x.i >= x.n) {
            k.kind = LQ_LT_EOF;
        } else {
            char ch = src[x.i], nx = x.i + 1 < x.n ? src[x.i + 1] : 0;
            switch (ch) {
            case '*': k.kind = LQ_LT_STAR; adv(&x); break;
            case ',': k.kind = LQ_LT_COMMA; adv(&x); break;
            case ';': k.kind = LQ_LT_SEMI; adv(&x); break;
            case '(': k.kind = LQ_LT_LPAREN; adv(&x); break;
            case ')': k.kind = LQ_LT_RPAREN; adv(&x); break;
            case '.': k.kind = LQ_LT_DOT; adv(&x); break;
            case '=': k.kind = LQ_LT_EQ; adv(&x); break;
            case '-': k.kind = LQ_LT_DASH; adv(&x); break;
            case '>':
                k.kind = nx == '=' ? LQ_LT_GTE : LQ_LT_GT;
                adv(&x);
                if (nx == '=')
                    adv(&x);
                break;
            case '<':
                k.kind = nx == '=' ? LQ_LT_LTE : LQ_LT_LT;
                adv(&x);
                if (nx == '=')
                    adv(&x);
                break;
            case '|':
            case '!':
                if (nx != (ch == '|' ? '>' : '=')) {
                    rc = lq_lql_diag(err, "Parse error", src, len, x.i, x.line, x.col,
                                     "expected '%c' after '%c'", ch == '|' ? '>' : '=', ch);
                    break;
                }
                k.kind = ch == '|' ? LQ_LT_PIPE : LQ_LT_NEQ;
                adv(&x);
                adv(&x);
                break;
            case '"':
            case '\'':
                rc = lex_string(&x, &k, err);
                break;
            default:
                if (isdigit((unsigned char)ch))
                    rc = lex_number(&x, &k, err);
                else if (isalpha((unsigned char)ch) || ch == '_')
                    rc = lex_word(&x, &k, err);
                else if ((unsigned char)ch >= 0x20 && (unsigned char)ch < 0x7f)
                    rc = lq_lql_diag(err, "Parse error", src, len, x.i, x.line, x.col,
                                     "unexpected character '%c'", ch);
                else
                    rc = lq_lql_diag(err, "Parse error", src, len, x.i, x.line, x.col,
                                     "unexpected byte 0x%02x", (unsigned char)ch);
            }
        }
        if (rc) {
            free(k.text);
            lq_lql_toks_free(out);
            return rc;
        }
        k.len = x.i - k.off;
        if (push(out, &cap, &k)) {
            free(k.text);
            lq_lql_toks_free(out);
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        }
        if (k.kind == LQ_LT_EOF)
            return 0;
    }
}

void lq_lql_toks_free(lq_ltoks *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->t[i].text);
    free(t->t);
    t->t = NULL;
    t->n = 0;
}

void lq_lql_tok_describe(const lq_ltok *t, char *buf, size_t cap)
{
    static const char *const punct[] = {
        [LQ_LT_STAR] = "'*'", [LQ_LT_COMMA] = "','", [LQ_LT_SEMI] = "';'",
        [LQ_LT_LPAREN] = "'('", [LQ_LT_RPAREN] = "')'", [LQ_LT_DOT] = "'.'",
        [LQ_LT_PIPE] = "'|>'", [LQ_LT_EQ] = "'='", [LQ_LT_NEQ] = "'!='", [LQ_LT_GT] = "'>'",
        [LQ_LT_LT] = "'<'", [LQ_LT_GTE] = "'>='", [LQ_LT_LTE] = "'<='", [LQ_LT_DASH] = "'-'",
    };
    switch (t->kind) {
    case LQ_LT_EOF: snprintf(buf, cap, "end of input"); break;
    case LQ_LT_KEYWORD: snprintf(buf, cap, "keyword %s", t->text); break;
    case LQ_LT_IDENT: snprintf(buf, cap, "identifier '%.60s'", t->text); break;
    case LQ_LT_STRING: snprintf(buf, cap, "string \"%.60s\"", t->text); break;
    case LQ_LT_INT: snprintf(buf, cap, "number %lld", t->ival); break;
    case LQ_LT_NUMBER: snprintf(buf, cap, "number %g", t->num); break;
    default:
        snprintf(buf, cap, "%s",
                 t->kind > 0 && (size_t)t->kind < sizeof punct / sizeof punct[0] && punct[t->kind]
                     ? punct[t->kind] : "token");
    }
}

/* ---- statement boundaries (batch scripts, the shell) ----
 * One scanner for both: walks quotes (with backslash escapes) and "--" comments the way
 * the lexer does, and reports each ';' outside them. */

typedef struct scan {
    lx x;
    int in_quote;        /* 0, '"' or '\'' */
} scan;

/* Advances to the next top-level ';' (returns 1, at the ';') or the end (returns 0).
 * *content is set when something other than blanks and comments was passed. */
static int scan_to_semi(scan *c, int *content)
{
    lx *x = &c->x;
    while (x->i < x->n) {
        char ch = x->s[x->i];
        if (c->in_quote) {
            if (ch == '\\' && x->i + 1 < x->n)
                adv(x);
            else if (ch == c->in_quote)
                c->in_quote = 0;
        } else if (ch == '-' && x->i + 1 < x->n && x->s[x->i + 1] == '-') {
            skip_space(x);
            continue;
        } else if (ch == ';') {
            return 1;
        } else if (ch == '"' || ch == '\'') {
            c->in_quote = ch;
            *content = 1;
        } else if (!isspace((unsigned char)ch)) {
            *content = 1;
        }
        adv(x);
    }
    return 0;
}

int lq_lql_split(const char *text, size_t len, lq_lql_span **spans, size_t *n, lq_err *err)
{
    *spans = NULL;
    *n = 0;
    size_t cap = 0;
    scan c = {{text, len, 0, 1, 1}, 0};
    for (;;) {
        skip_space(&c.x); /* a span starts at its first token: its line/column are the statement's */
        if (c.x.i >= len)
            break;
        lq_lql_span sp = {c.x.i, 0, c.x.line, c.x.col};
        int content = 0;
        if (scan_to_semi(&c, &content))
            adv(&c.x); /* the ';' belongs to its statement */
        sp.len = c.x.i - sp.off;
        if (!content)
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            lq_lql_span *ns = realloc(*spans, nc * sizeof *ns);
            if (!ns) {
                free(*spans);
                *spans = NULL;
                *n = 0;
                return lq_err_set(err, LQ_ENOMEM, "out of memory");
            }
            *spans = ns;
            cap = nc;
        }
        (*spans)[(*n)++] = sp;
    }
    return 0;
}

int lq_lql_complete(const char *text, size_t len)
{
    scan c = {{text, len, 0, 1, 1}, 0};
    int done = 0;
    while (c.x.i < len) {
        int content = 0;
        if (scan_to_semi(&c, &content)) {
            done = 1;
            adv(&c.x);
        } else if (content || c.in_quote) {
            done = 0; /* text after the last ';' */
        }
    }
    return done && !c.in_quote;
}
