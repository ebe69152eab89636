/* GBNF parser: text -> the flat element array of grammar_internal.h, then the checks that
 * keep the recogniser finite and useful: every referenced rule defined, a root, no left
 * recursion (expanding a left-recursive rule never reaches a character), and a non-empty
 * language.
 *
 * Repetitions become synthetic rules named after the rule they appear in (name/N):
 * x* -> R ::= x R | (right recursion, which the recogniser runs in constant stack depth),
 * x+ -> x x*, x? -> R ::= x |, x{m,n} -> m copies of x then a chain of n-m nested
 * optionals. Groups ( ... ) become synthetic rules too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "engine/grammar_internal.h"

#define GR_MAX_REPEAT 10000      /* bound on m and n in x{m,n} */
#define GR_MAX_ELEMS (1u << 22)  /* bound on a grammar's elements after expansion */
#define GR_MAX_RULES (1u << 20)
#define GR_MAX_CP 0x10FFFFu

typedef struct elvec {
    gr_el *v;
    size_t n, cap;
} elvec;

typedef struct prule {
    char *name;
    int defined, synthetic;
    size_t ref_off; /* where the rule was first referenced (for "undefined" messages) */
    elvec body;
} prule;

typedef struct parser {
    const char *src, *end;
    prule *rules;
    size_t n_rules, cap_rules, n_elems;
    lq_err *err;
    int rc;
} parser;

static void line_col(const parser *P, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = P->src; p < at && p < P->end; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* Records a syntax error at `at` (the first one wins); returns NULL for the caller. */
static const char *syntax(parser *P, const char *at, const char *what)
{
    if (!P->rc) {
        int line, col;
        line_col(P, at, &line, &col);
        P->rc = lq_err_set(P->err, LQ_EINVAL, "grammar: line %d, column %d: %s", line, col,
                           what);
    }
    return NULL;
}

static int oom(parser *P)
{
    if (!P->rc)
        P->rc = lq_err_set(P->err, LQ_ENOMEM, "grammar: out of memory");
    return P->rc;
}

static int push(parser *P, elvec *v, uint32_t type, uint32_t val)
{
    if (P->rc)
        return P->rc;
    if (++P->n_elems > GR_MAX_ELEMS) {
        P->rc = lq_err_set(P->err, LQ_EINVAL, "grammar: more than %u elements after "
                           "expanding repetitions", GR_MAX_ELEMS);
        return P->rc;
    }
    if (v->n == v->cap) {
        size_t nc = v->cap ? 2 * v->cap : 16;
        gr_el *nv = realloc(v->v, nc * sizeof *nv);
        if (!nv)
            return oom(P);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n].type = type;
    v->v[v->n].val = val;
    v->n++;
    return 0;
}

static int push_all(parser *P, elvec *v, const gr_el *src, size_t n)
{
    for (size_t i = 0; i < n && !P->rc; i++)
        push(P, v, src[i].type, src[i].val);
    return P->rc;
}

/* A new rule named name[0..len) (no lookup); UINT32_MAX on error. */
static uint32_t add_rule(parser *P, const char *name, size_t len, const char *at, int synthetic)
{
    if (P->n_rules >= GR_MAX_RULES) {
        P->rc = lq_err_set(P->err, LQ_EINVAL, "grammar: more than %u rules", GR_MAX_RULES);
        return UINT32_MAX;
    }
    if (P->n_rules == P->cap_rules) {
        size_t nc = P->cap_rules ? 2 * P->cap_rules : 32;
        prule *nr = realloc(P->rules, nc * sizeof *nr);
        if (!nr) {
            oom(P);
            return UINT32_MAX;
        }
        P->rules = nr;
        P->cap_rules = nc;
    }
    prule *r = &P->rules[P->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name) {
        oom(P);
        return UINT32_MAX;
    }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    r->ref_off = (size_t)(at - P->src);
    r->synthetic = synthetic;
    r->defined = synthetic;
    return (uint32_t)P->n_rules++;
}

/* Rule id of a named rule (created undefined on first reference); UINT32_MAX on error.
 * Synthetic rules are never looked up (their names hold a '/', which rule names cannot). */
static uint32_t sym_id(parser *P, const char *name, size_t len, const char *at)
{
    for (size_t i = 0; i < P->n_rules; i++)
        if (!P->rules[i].synthetic && strlen(P->rules[i].name) == len &&
            !memcmp(P->rules[i].name, name, len))
            return (uint32_t)i;
    return add_rule(P, name, len, at, 0);
}

/* A new synthetic rule "base/N" (defined: its body comes from the caller). Constant time,
 * so that x{0,10000} inside x{0,10000} stays linear in the rules it makes. */
static uint32_t synth(parser *P, uint32_t base)
{
    char buf[160];
    snprintf(buf, sizeof buf, "%.120s/%zu", P->rules[base].name, P->n_rules);
    return add_rule(P, buf, strlen(buf), P->src, 1);
}

static void set_body(parser *P, uint32_t id, elvec *body)
{
    free(P->rules[id].body.v);
    P->rules[id].body = *body;
    memset(body, 0, sizeof *body);
}

static int is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static const char *skip_space(const parser *P, const char *p, int newline_ok)
{
    while (p < P->end) {
        if (*p == ' ' || *p == '\t' || ((*p == '\n' || *p == '\r') && newline_ok)) {
            p++;
        } else if (*p == '#') {
            while (p < P->end && *p != '\n' && *p != '\r')
                p++;
        } else {
            break;
        }
    }
    return p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static const char *parse_char(parser *P, const char *p, uint32_t *cp)
{
    if (p >= P->end)
        return syntax(P, p, "unexpected end of input");
    if (*p == '\\') {
        if (p + 1 >= P->end)
            return syntax(P, p, "unexpected end of input after '\\'");
        char e = p[1];
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = p + 2 + i < P->end ? hexval(p[2 + i]) : -1;
                if (h < 0)
                    return syntax(P, p, "expecting hex digits in the escape");
                v = v * 16 + (uint32_t)h;
            }
            if (v > GR_MAX_CP)
                return syntax(P, p, "escape beyond U+10FFFF");
            *cp = v;
            return p + 2 + nhex;
        }
        switch (e) {
        case 't': *cp = '\t'; break;
        case 'r': *cp = '\r'; break;
        case 'n': *cp = '\n'; break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/':
        case '.': case '|': case '(': case ')': case '*': case '+': case '?': case '{':
        case '}':
            *cp = (uint32_t)(unsigned char)e;
            break;
        default:
            return syntax(P, p, "unknown escape");
        }
        return p + 2;
    }
    const unsigned char *u = (const unsigned char *)p;
    size_t k = lq_utf8_seq(u, (size_t)(P->end - p));
    if (!k)
        return syntax(P, p, "invalid UTF-8");
    static const unsigned char lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = u[0] & lead_mask[k];
    for (size_t i = 1; i < k; i++)
        v = (v << 6) | (u[i] & 0x3Fu);
    *cp = v;
    return p + k;
}

static const char *parse_alternatives(parser *P, const char *p, uint32_t rule, int nested,
                                      elvec *out);

/* Parses an unsigned decimal (bounded by GR_MAX_REPEAT). */
static const char *parse_count(parser *P, const char *p, uint32_t *v)
{
    const char *s = p;
    uint64_t x = 0;
    while (p < P->end && *p >= '0' && *p <= '9') {
        x = x * 10 + (uint64_t)(*p - '0');
        if (x > GR_MAX_REPEAT)
            return syntax(P, s, "repetition count above 10000");
        p++;
    }
    if (p == s)
        return syntax(P, p, "expecting a number");
    *v = (uint32_t)x;
    return p;
}

/* out[start..] is the last symbol; replace it by its repetition {min,max} (max UINT32_MAX:
 * unbounded). */
static int repeat(parser *P, elvec *out, size_t start, uint32_t rule, uint32_t min,
                  uint32_t max)
{
    size_t n = out->n - start;
    gr_el *prev = malloc((n ? n : 1) * sizeof *prev);
    if (!prev)
        return oom(P);
    if (n) /* out->v may still be NULL when nothing precedes */
        memcpy(prev, out->v + start, n * sizeof *prev);
    out->n = start;
    for (uint32_t i = 0; i < min && !P->rc; i++)
        push_all(P, out, prev, n);
    if (max == UINT32_MAX) {
        uint32_t r = synth(P, rule); /* R ::= prev R | */
        elvec b = {0};
        if (r != UINT32_MAX) {
            push_all(P, &b, prev, n);
            push(P, &b, GE_REF, r);
            push(P, &b, GE_ALT, 0);
            push(P, &b, GE_END, 0);
            if (!P->rc)
                set_body(P, r, &b);
            push(P, out, GE_REF, r);
        }
        free(b.v);
    } else if (max > min) {
        uint32_t inner = UINT32_MAX; /* built from the innermost optional outwards */
        for (uint32_t k = min; k < max && !P->rc; k++) {
            uint32_t r = synth(P, rule); /* R ::= prev inner | */
            elvec b = {0};
            if (r != UINT32_MAX) {
                push_all(P, &b, prev, n);
                if (inner != UINT32_MAX)
                    push(P, &b, GE_REF, inner);
                push(P, &b, GE_ALT, 0);
                push(P, &b, GE_END, 0);
                if (!P->rc)
                    set_body(P, r, &b);
            }
            free(b.v);
            inner = r;
        }
        push(P, out, GE_REF, inner);
    }
    free(prev);
    return P->rc;
}

static const char *parse_sequence(parser *P, const char *p, uint32_t rule, int nested,
                                  elvec *out)
{
    size_t last = SIZE_MAX; /* where the last symbol starts in out */
    while (p < P->end && !P->rc) {
        const char *at = p;
        if (*p == '"') {
            p++;
            last = out->n;
            while (p < P->end && *p != '"') {
                uint32_t cp;
                p = parse_char(P, p, &cp);
                if (!p)
                    return NULL;
                push(P, out, GE_CHAR, cp);
            }
            if (p >= P->end)
                return syntax(P, at, "unterminated string literal");
            p = skip_space(P, p + 1, nested);
        } else if (*p == '[') {
            p++;
            last = out->n;
            uint32_t first = GE_CHAR;
            if (p < P->end && *p == '^') {
                first = GE_CHAR_NOT;
                p++;
            }
            int members = 0;
            while (p < P->end && *p != ']') {
                uint32_t cp;
                p = parse_char(P, p, &cp);
                if (!p)
                    return NULL;
                push(P, out, members++ ? GE_CHAR_ALT : first, cp);
                if (p + 1 < P->end && *p == '-' && p[1] != ']') {
                    uint32_t hi;
                    const char *ra = p;
                    p = parse_char(P, p + 1, &hi);
                    if (!p)
                        return NULL;
                    if (hi < cp)
                        return syntax(P, ra, "character range with its upper end below "
                                             "its lower end");
                    push(P, out, GE_RNG_UPPER, hi);
                }
            }
            if (p >= P->end)
                return syntax(P, at, "unterminated character class");
            if (!members) {
                /* [] matches nothing; [^] anything */
                if (first == GE_CHAR_NOT) {
                    push(P, out, GE_ANY, 0);
                } else {
                    push(P, out, GE_CHAR, 1);
                    push(P, out, GE_RNG_UPPER, 0); /* empty range: marks the empty class */
                }
            }
            p = skip_space(P, p + 1, nested);
        } else if (is_word(*p)) {
            const char *s = p;
            while (p < P->end && is_word(*p))
                p++;
            uint32_t id = sym_id(P, s, (size_t)(p - s), s);
            if (id == UINT32_MAX)
                return NULL;
            last = out->n;
            push(P, out, GE_REF, id);
            p = skip_space(P, p, nested);
        } else if (*p == '(') {
            uint32_t sub = synth(P, rule);
            if (sub == UINT32_MAX)
                return NULL;
            elvec b = {0};
            p = parse_alternatives(P, skip_space(P, p + 1, 1), rule, 1, &b);
            if (!p) {
                free(b.v);
                return NULL;
            }
            set_body(P, sub, &b);
            if (p >= P->end || *p != ')')
                return syntax(P, p, "expecting ')'");
            last = out->n;
            push(P, out, GE_REF, sub);
            p = skip_space(P, p + 1, nested);
        } else if (*p == '.') {
            last = out->n;
            push(P, out, GE_ANY, 0);
            p = skip_space(P, p + 1, nested);
        } else if (*p == '*' || *p == '+' || *p == '?' || *p == '{') {
            if (last == SIZE_MAX)
                return syntax(P, p, "expecting an item before the repetition operator");
            uint32_t min = 0, max = UINT32_MAX;
            if (*p == '+')
                min = 1;
            else if (*p == '?')
                max = 1;
            if (*p == '{') {
                p = parse_count(P, skip_space(P, p + 1, nested), &min);
                if (!p)
                    return NULL;
                p = skip_space(P, p, nested);
                if (p < P->end && *p == ',') {
                    p = skip_space(P, p + 1, nested);
                    if (p < P->end && *p >= '0' && *p <= '9') {
                        p = parse_count(P, p, &max);
                        if (!p)
                            return NULL;
                        if (max < min)
                            return syntax(P, at, "repetition {m,n} with n < m");
                    }
                } else {
                    max = min;
                }
                p = skip_space(P, p, nested);
                if (p >= P->end || *p != '}')
                    return syntax(P, p, "expecting '}'");
            }
            if (repeat(P, out, last, rule, min, max))
                return NULL;
            last = SIZE_MAX; /* x** is not allowed: group it */
            p = skip_space(P, p + 1, nested);
        } else {
            break;
        }
    }
    return P->rc ? NULL : p;
}

static const char *parse_alternatives(parser *P, const char *p, uint32_t rule, int nested,
                                      elvec *out)
{
    p = parse_sequence(P, p, rule, nested, out);
    while (p && p < P->end && *p == '|') {
        push(P, out, GE_ALT, 0);
        p = parse_sequence(P, skip_space(P, p + 1, 1), rule, nested, out);
    }
    if (p)
        push(P, out, GE_END, 0);
    return P->rc ? NULL : p;
}

static const char *parse_rule(parser *P, const char *p)
{
    const char *s = p;
    while (p < P->end && is_word(*p))
        p++;
    if (p == s)
        return syntax(P, p, "expecting a rule name");
    uint32_t id = sym_id(P, s, (size_t)(p - s), s);
    if (id == UINT32_MAX)
        return NULL;
    if (P->rules[id].defined) {
        char msg[200];
        snprintf(msg, sizeof msg, "rule '%.120s' defined twice", P->rules[id].name);
        return syntax(P, s, msg);
    }
    P->rules[id].defined = 1;
    p = skip_space(P, p, 0);
    if (P->end - p < 3 || memcmp(p, "::=", 3))
        return syntax(P, p, "expecting '::='");
    elvec b = {0};
    p = parse_alternatives(P, skip_space(P, p + 3, 1), id, 0, &b);
    if (!p) {
        free(b.v);
        return NULL;
    }
    set_body(P, id, &b);
    if (p < P->end && *p == '\r')
        p++;
    if (p < P->end && *p == '\n')
        p++;
    else if (p < P->end)
        return syntax(P, p, "expecting a newline or the end of the rule");
    return skip_space(P, p, 1);
}

/* ---- compile: flatten, classes, checks ---- */

static int cmp_u32pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int build_classes(lq_grammar *g, lq_err *err)
{
    g->cls_of = malloc((g->n_el ? g->n_el : 1) * sizeof *g->cls_of);
    uint32_t n_groups = 0, n_members = 0;
    for (uint32_t i = 0; i < g->n_el; i++) {
        uint32_t t = g->el[i].type;
        n_groups += t == GE_CHAR || t == GE_CHAR_NOT || t == GE_ANY;
        n_members += t == GE_CHAR || t == GE_CHAR_NOT || t == GE_CHAR_ALT;
    }
    g->cls = calloc(n_groups ? n_groups : 1, sizeof *g->cls);
    g->iv = malloc(2 * (size_t)(n_members ? n_members : 1) * sizeof *g->iv);
    if (!g->cls_of || !g->cls || !g->iv)
        return lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
    uint32_t n_iv = 0;
    for (uint32_t i = 0; i < g->n_el;) {
        uint32_t t = g->el[i].type;
        g->cls_of[i] = UINT32_MAX;
        if (t != GE_CHAR && t != GE_CHAR_NOT && t != GE_ANY) {
            i++;
            continue;
        }
        gr_cls *c = &g->cls[g->n_cls];
        g->cls_of[i] = g->n_cls++;
        c->neg = t != GE_CHAR;
        c->iv_off = n_iv;
        uint32_t j = i;
        if (t == GE_ANY) {
            j = i + 1;
        } else {
            for (;;) {
                uint32_t lo = g->el[j].val, hi = lo;
                j++;
                if (j < g->n_el && g->el[j].type == GE_RNG_UPPER) {
                    hi = g->el[j].val;
                    g->cls_of[j] = UINT32_MAX;
                    j++;
                }
                if (lo <= hi) {
                    g->iv[2 * n_iv] = lo;
                    g->iv[2 * n_iv + 1] = hi;
                    n_iv++;
                }
                if (j < g->n_el && g->el[j].type == GE_CHAR_ALT) {
                    g->cls_of[j] = UINT32_MAX;
                    continue;
                }
                break;
            }
        }
        c->next = j;
        /* sort and merge the intervals */
        uint32_t *iv = g->iv + 2 * (size_t)c->iv_off, m = n_iv - c->iv_off, k = 0;
        qsort(iv, m, 2 * sizeof *iv, cmp_u32pair);
        for (uint32_t a = 0; a < m; a++) {
            if (k && iv[2 * a] <= iv[2 * (k - 1) + 1] + 1) {
                if (iv[2 * a + 1] > iv[2 * (k - 1) + 1])
                    iv[2 * (k - 1) + 1] = iv[2 * a + 1];
            } else {
                iv[2 * k] = iv[2 * a];
                iv[2 * k + 1] = iv[2 * a + 1];
                k++;
            }
        }
        c->n_iv = k;
        n_iv = c->iv_off + k;
        for (uint32_t cp = 0; cp < 128; cp++) {
            int in = 0;
            for (uint32_t a = 0; a < k; a++)
                in |= iv[2 * a] <= cp && cp <= iv[2 * a + 1];
            if (in != c->neg)
                c->ascii[cp >> 5] |= 1u << (cp & 31);
        }
        i = j;
    }
    return LQ_OK;
}

int gr_cls_meets(const lq_grammar *g, const gr_cls *c, uint32_t lo, uint32_t hi)
{
    const uint32_t *iv = g->iv + 2 * (size_t)c->iv_off;
    if (!c->neg) {
        for (uint32_t i = 0; i < c->n_iv; i++)
            if (iv[2 * i] <= hi && lo <= iv[2 * i + 1])
                return 1;
        return 0;
    }
    /* negated: some point of [lo, hi] lies outside every interval (they are sorted and
     * merged, so walk the covered prefix) */
    uint32_t at = lo;
    for (uint32_t i = 0; i < c->n_iv; i++) {
        if (iv[2 * i] > at)
            break;
        if (iv[2 * i + 1] >= at) {
            if (iv[2 * i + 1] >= hi)
                return 0;
            at = iv[2 * i + 1] + 1;
        }
    }
    return at <= hi;
}

static int cls_empty(const lq_grammar *g, const gr_cls *c)
{
    return !gr_cls_meets(g, c, 0, GR_MAX_CP);
}

/* Nullable and productive rules by fixpoint, then left recursion by depth-first search
 * over "can start with" edges. */
static int check(lq_grammar *g, char **names, lq_err *err)
{
    uint32_t n = g->n_rules;
    uint8_t *nullable = calloc(n, 1), *productive = calloc(n, 1), *color = calloc(n, 1);
    uint32_t *stk = malloc(2 * (size_t)n * sizeof *stk), *edge_off = NULL, *edges = NULL;
    int rc = LQ_OK;
    if (!nullable || !productive || !color || !stk) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < n; r++) {
            uint32_t p = g->rule_off[r];
            for (;;) { /* each alternative */
                int nul = 1, prod = 1;
                for (; !gr_is_end(g->el[p].type); p++) {
                    uint32_t t = g->el[p].type;
                    if (t == GE_REF) {
                        nul &= nullable[g->el[p].val];
                        prod &= productive[g->el[p].val];
                    } else if (g->cls_of[p] != UINT32_MAX) {
                        nul = 0;
                        prod &= !cls_empty(g, &g->cls[g->cls_of[p]]);
                    }
                }
                if (nul && !nullable[r])
                    nullable[r] = 1, changed = 1;
                if (prod && !productive[r])
                    productive[r] = 1, changed = 1;
                if (g->el[p].type == GE_END)
                    break;
                p++;
            }
        }
    }
    if (!productive[g->root]) {
        rc = lq_err_set(err, LQ_EINVAL, "grammar: the language of 'root' is empty (no "
                        "string matches it, so no token could ever start)");
        goto done;
    }
    /* Left edges: r -> t when t can be the first thing r matches (a reference at the start
     * of an alternative, or after nullable ones). A cycle is left recursion. */
    edge_off = calloc((size_t)n + 1, sizeof *edge_off);
    if (!edge_off) {
        rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (int pass = 0; pass < 2; pass++) {
        uint32_t ne = 0;
        for (uint32_t r = 0; r < n; r++) {
            if (pass == 0)
                edge_off[r] = ne;
            uint32_t p = g->rule_off[r];
            for (;;) {
                int open = 1; /* still at the start of the alternative */
                for (; !gr_is_end(g->el[p].type); p++) {
                    if (!open)
                        continue;
                    if (g->el[p].type == GE_REF) {
                        if (pass == 1)
                            edges[ne] = g->el[p].val;
                        ne++;
                        open = nullable[g->el[p].val];
                    } else if (g->cls_of[p] != UINT32_MAX) {
                        open = 0;
                    }
                }
                if (g->el[p].type == GE_END)
                    break;
                p++;
            }
        }
        if (pass == 0) {
            edge_off[n] = ne;
            edges = malloc((ne ? ne : 1) * sizeof *edges);
            if (!edges) {
                rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
                goto done;
            }
        }
    }
    /* iterative DFS; color 1 = on the path, 2 = done; stk holds (rule, next edge) */
    for (uint32_t r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0])
            continue;
        size_t sp = 0;
        stk[sp++] = r0;
        stk[sp++] = edge_off[r0];
        color[r0] = 1;
        while (sp) {
            uint32_t r = stk[sp - 2], e = stk[sp - 1];
            if (e == edge_off[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stk[sp - 1] = e + 1;
            uint32_t t = edges[e];
            if (color[t] == 2)
                continue;
            if (color[t] == 1) {
                rc = lq_err_set(err, LQ_EINVAL, "grammar: left recursion in rule '%s' (it can "
                                "reach itself before matching any character)", names[t]);
                break;
            }
            color[t] = 1;
            stk[sp++] = t;
            stk[sp++] = edge_off[t];
        }
    }
done:
    free(nullable);
    free(productive);
    free(color);
    free(stk);
    free(edge_off);
    free(edges);
    return rc;
}

static void *dup_array(const void *src, size_t n, size_t elem)
{
    void *p = malloc(n ? n * elem : 1);
    if (p && n)
        memcpy(p, src, n * elem);
    return p;
}

lq_grammar *gr_clone(const lq_grammar *g)
{
    lq_grammar *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = *g;
    c->el = dup_array(g->el, g->n_el, sizeof *g->el);
    c->rule_off = dup_array(g->rule_off, g->n_rules, sizeof *g->rule_off);
    c->cls_of = dup_array(g->cls_of, g->n_el, sizeof *g->cls_of);
    c->cls = dup_array(g->cls, g->n_cls, sizeof *g->cls);
    uint32_t n_iv = 0;
    for (uint32_t i = 0; i < g->n_cls; i++)
        if (g->cls[i].iv_off + g->cls[i].n_iv > n_iv)
            n_iv = g->cls[i].iv_off + g->cls[i].n_iv;
    c->iv = dup_array(g->iv, 2 * (size_t)n_iv, sizeof *g->iv);
    if (!c->el || !c->rule_off || !c->cls_of || !c->cls || !c->iv) {
        lq_grammar_free(c);
        return NULL;
    }
    return c;
}

void lq_grammar_free(lq_grammar *g)
{
    if (!g)
        return;
    free(g->el);
    free(g->rule_off);
    free(g->cls_of);
    free(g->cls);
    free(g->iv);
    free(g);
}

int lq_grammar_parse(const char *gbnf, size_t len, lq_grammar **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL argument");
    *out = NULL;
    if (!gbnf && len)
        return lq_err_set(err, LQ_EINVAL, "grammar: NULL text");
    parser P = {.src = gbnf ? gbnf : "", .end = (gbnf ? gbnf : "") + len, .err = err};
    const char *p = skip_space(&P, P.src, 1);
    while (p && p < P.end)
        p = parse_rule(&P, p);
    lq_grammar *g = NULL;
    int rc = P.rc;
    if (!rc) {
        uint32_t root = UINT32_MAX;
        for (size_t i = 0; i < P.n_rules; i++) {
            if (!P.rules[i].defined) {
                int line, col;
                line_col(&P, P.src + P.rules[i].ref_off, &line, &col);
                rc = lq_err_set(err, LQ_EINVAL, "grammar: undefined rule '%s' (referenced at "
                                "line %d, column %d)", P.rules[i].name, line, col);
                goto done;
            }
            if (!strcmp(P.rules[i].name, "root"))
                root = (uint32_t)i;
        }
        if (root == UINT32_MAX) {
            rc = lq_err_set(err, LQ_EINVAL, "grammar: no 'root' rule");
            goto done;
        }
        g = calloc(1, sizeof *g);
        if (!g) {
            rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
            goto done;
        }
        g->n_rules = (uint32_t)P.n_rules;
        g->root = root;
        g->n_el = (uint32_t)P.n_elems;
        g->rule_off = malloc(P.n_rules * sizeof *g->rule_off);
        g->el = malloc((P.n_elems ? P.n_elems : 1) * sizeof *g->el);
        if (!g->rule_off || !g->el) {
            rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
            goto done;
        }
        uint32_t o = 0;
        for (size_t i = 0; i < P.n_rules; i++) {
            g->rule_off[i] = o;
            memcpy(g->el + o, P.rules[i].body.v, P.rules[i].body.n * sizeof *g->el);
            o += (uint32_t)P.rules[i].body.n;
        }
        g->n_el = o;
        char **names = malloc(P.n_rules * sizeof *names);
        if (!names) {
            rc = lq_err_set(err, LQ_ENOMEM, "grammar: out of memory");
            goto done;
        }
        for (size_t i = 0; i < P.n_rules; i++)
            names[i] = P.rules[i].name;
        rc = build_classes(g, err);
        if (!rc)
            rc = check(g, names, err);
        free(names);
    }
done:
    for (size_t i = 0; i < P.n_rules; i++) {
        free(P.rules[i].name);
        free(P.rules[i].body.v);
    }
    free(P.rules);
    if (rc) {
        lq_grammar_free(g);
        return rc;
    }
    *out = g;
    return LQ_OK;
}
