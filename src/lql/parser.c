/* LQL parser: tokens -> one lq_lql_stmt (LARQL's grammar, crates/larql-lql/src/parser/).
 * Recursive descent; the clauses after a statement's head may come in any order and a
 * repeated clause overrides the earlier one (LARQL: last wins). Every error points at the
 * token that broke the rule, with line, column and a caret. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lql/lql_internal.h"

typedef struct parser {
    const char *src;
    size_t len;
    lq_ltoks t;
    size_t i;
    lq_err *err;
} parser;

static const lq_ltok *peek(parser *p) { return &p->t.t[p->i]; }
static const lq_ltok *peek2(parser *p) { return &p->t.t[p->i + 1 < p->t.n ? p->i + 1 : p->i]; }

static const lq_ltok *next(parser *p)
{
    const lq_ltok *k = &p->t.t[p->i];
    if (k->kind != LQ_LT_EOF)
        p->i++;
    return k;
}

/* "msg, found <token>" at the current token */
static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *p, const char *fmt, ...)
{
    char msg[200], what[100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const lq_ltok *k = peek(p);
    lq_lql_tok_describe(k, what, sizeof what);
    return lq_lql_diag(p->err, "Parse error", p->src, p->len, k->off, k->line, k->col,
                       "%s, found %s", msg, what);
}

static int is_kw(parser *p, const char *kw)
{
    const lq_ltok *k = peek(p);
    return k->kind == LQ_LT_KEYWORD && !strcmp(k->text, kw);
}

static int accept_kw(parser *p, const char *kw)
{
    if (!is_kw(p, kw))
        return 0;
    next(p);
    return 1;
}

/* A word that is not in LARQL's keyword list (STREAM, ENTITY, REPORT, MINOR, ...): an
 * identifier in any case. */
static int accept_word(parser *p, const char *word)
{
    const lq_ltok *k = peek(p);
    if (k->kind != LQ_LT_IDENT || strcasecmp(k->text, word))
        return 0;
    next(p);
    return 1;
}

static int expect_kw(parser *p, const char *kw)
{
    if (accept_kw(p, kw))
        return 0;
    return fail(p, "expected %s", kw);
}

static int expect(parser *p, int kind, const char *what)
{
    if (peek(p)->kind == kind) {
        next(p);
        return 0;
    }
    return fail(p, "expected %s", what);
}

static char *dup_str(parser *p, const char *s)
{
    char *d = strdup(s);
    if (!d)
        lq_err_set(p->err, LQ_ENOMEM, "out of memory");
    return d;
}

/* A string literal into *out (replacing an earlier value: last wins). */
static int expect_string(parser *p, const char *what, char **out)
{
    if (peek(p)->kind != LQ_LT_STRING)
        return fail(p, "expected a string (%s)", what);
    char *s = dup_str(p, next(p)->text);
    if (!s)
        return LQ_ENOMEM;
    free(*out);
    *out = s;
    return 0;
}

/* A non-negative integer that fits an int. */
static int expect_uint(parser *p, const char *what, int *out)
{
    const lq_ltok *k = peek(p);
    if (k->kind != LQ_LT_INT)
        return fail(p, "expected a non-negative integer (%s)", what);
    if (k->ival > INT_MAX)
        return fail(p, "%s is too large (at most %d)", what, INT_MAX);
    *out = (int)k->ival;
    next(p);
    return 0;
}

/* [-] integer or decimal */
static int expect_number(parser *p, const char *what, double *out)
{
    int neg = 0;
    if (peek(p)->kind == LQ_LT_DASH && (peek2(p)->kind == LQ_LT_INT || peek2(p)->kind == LQ_LT_NUMBER)) {
        next(p);
        neg = 1;
    }
    const lq_ltok *k = peek(p);
    if (k->kind != LQ_LT_INT && k->kind != LQ_LT_NUMBER)
        return fail(p, "expected a number (%s)", what);
    *out = neg ? -k->num : k->num;
    next(p);
    return 0;
}

/* a-b (inclusive) or a single layer n (= n-n) */
static int parse_range(parser *p, lq_lql_stmt *s)
{
    const lq_ltok *start = peek(p);
    int lo, hi;
    if (expect_uint(p, "first layer of the range", &lo))
        return LQ_EINVAL;
    hi = lo;
    if (peek(p)->kind == LQ_LT_DASH) {
        next(p);
        if (expect_uint(p, "last layer of the range", &hi))
            return LQ_EINVAL;
    }
    if (lo > hi)
        return lq_lql_diag(p->err, "Parse error", p->src, p->len, start->off, start->line, start->col,
                           "range start %d is greater than its end %d", lo, hi);
    s->has_range = 1;
    s->range_lo = lo;
    s->range_hi = hi;
    s->all_layers = 0;
    return 0;
}

/* A field name: identifier or keyword used as one (LAYER, RELATION, CONFIDENCE ...). */
static int parse_field(parser *p, char **out)
{
    const lq_ltok *k = peek(p);
    if (k->kind != LQ_LT_IDENT && k->kind != LQ_LT_KEYWORD)
        return fail(p, "expected a field name");
    char *f = dup_str(p, k->text);
    if (!f)
        return LQ_ENOMEM;
    for (char *c = f; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    next(p);
    free(*out);
    *out = f;
    return 0;
}

static int parse_value(parser *p, lq_lql_value *v)
{
    const lq_ltok *k = peek(p);
    if (k->kind == LQ_LT_STRING) {
        v->kind = LQ_LV_STRING;
        v->s = dup_str(p, k->text);
        if (!v->s)
            return LQ_ENOMEM;
        next(p);
        return 0;
    }
    int is_int = k->kind == LQ_LT_INT || (k->kind == LQ_LT_DASH && peek2(p)->kind == LQ_LT_INT);
    if (expect_number(p, "a string or a number", &v->num))
        return LQ_EINVAL;
    v->kind = is_int ? LQ_LV_INT : LQ_LV_NUMBER;
    return 0;
}

static void value_free(lq_lql_value *v) { free(v->s); }

/* cond {AND cond} */
static int parse_where(parser *p, lq_lql_stmt *s)
{
    for (size_t i = 0; i < s->n_where; i++) { /* a second WHERE replaces the first */
        free(s->where[i].field);
        value_free(&s->where[i].v);
        for (size_t j = 0; j < s->where[i].n_list; j++)
            value_free(&s->where[i].list[j]);
        free(s->where[i].list);
    }
    s->n_where = 0;
    for (;;) {
        lq_lql_cond *nw = realloc(s->where, (s->n_where + 1) * sizeof *nw);
        if (!nw)
            return lq_err_set(p->err, LQ_ENOMEM, "out of memory");
        s->where = nw;
        lq_lql_cond *c = &s->where[s->n_where++];
        memset(c, 0, sizeof *c);
        if (parse_field(p, &c->field))
            return LQ_EINVAL;
        const lq_ltok *k = peek(p);
        switch (k->kind) {
        case LQ_LT_EQ: c->op = LQ_LO_EQ; break;
        case LQ_LT_NEQ: c->op = LQ_LO_NEQ; break;
        case LQ_LT_GT: c->op = LQ_LO_GT; break;
        case LQ_LT_LT: c->op = LQ_LO_LT; break;
        case LQ_LT_GTE: c->op = LQ_LO_GTE; break;
        case LQ_LT_LTE: c->op = LQ_LO_LTE; break;
        default:
            if (is_kw(p, "LIKE"))
                c->op = LQ_LO_LIKE;
            else if (is_kw(p, "IN"))
                c->op = LQ_LO_IN;
            else
                return fail(p, "expected a comparison (= != > < >= <= LIKE IN) after '%s'", c->field);
        }
        next(p);
        if (c->op == LQ_LO_IN) {
            if (expect(p, LQ_LT_LPAREN, "'(' after IN"))
                return LQ_EINVAL;
            while (peek(p)->kind != LQ_LT_RPAREN) { /* IN () is an empty list: matches nothing */
                lq_lql_value *nl = realloc(c->list, (c->n_list + 1) * sizeof *nl);
                if (!nl)
                    return lq_err_set(p->err, LQ_ENOMEM, "out of memory");
                c->list = nl;
                memset(&c->list[c->n_list], 0, sizeof *nl);
                if (parse_value(p, &c->list[c->n_list++]))
                    return LQ_EINVAL;
                if (peek(p)->kind != LQ_LT_COMMA)
                    break;
                next(p);
                if (peek(p)->kind == LQ_LT_RPAREN)
                    return fail(p, "expected a value after ','");
            }
            if (expect(p, LQ_LT_RPAREN, "')' closing the IN list"))
                return LQ_EINVAL;
        } else if (parse_value(p, &c->v)) {
            return LQ_EINVAL;
        }
        if (is_kw(p, "OR") || is_kw(p, "NOT") || is_kw(p, "BETWEEN"))
            return fail(p, "only AND is supported between WHERE conditions");
        if (!accept_kw(p, "AND"))
            return 0;
    }
}

static int at_end(parser *p)
{
    int k = peek(p)->kind;
    return k == LQ_LT_EOF || k == LQ_LT_SEMI || k == LQ_LT_PIPE;
}

static int band_kw(parser *p)
{
    if (is_kw(p, "SYNTAX"))
        return LQ_LB_SYNTAX;
    if (is_kw(p, "KNOWLEDGE"))
        return LQ_LB_KNOWLEDGE;
    if (is_kw(p, "OUTPUT"))
        return LQ_LB_OUTPUT;
    return LQ_LB_NONE;
}

static int dmode_kw(parser *p)
{
    if (is_kw(p, "VERBOSE"))
        return LQ_LD_VERBOSE;
    if (is_kw(p, "BRIEF"))
        return LQ_LD_BRIEF;
    if (is_kw(p, "RAW"))
        return LQ_LD_RAW;
    return -1;
}

static int at_layer(parser *p, lq_lql_stmt *s)
{
    next(p); /* AT */
    if (expect_kw(p, "LAYER"))
        return LQ_EINVAL;
    return expect_uint(p, "layer", &s->layer);
}

static int unexpected(parser *p, const char *stmt)
{
    return fail(p, "unexpected token in %s", stmt);
}

static int parse_describe(parser *p, lq_lql_stmt *s)
{
    if (expect_string(p, "the entity", &s->str))
        return LQ_EINVAL;
    while (!at_end(p)) {
        int b = band_kw(p), m = dmode_kw(p);
        if (b != LQ_LB_NONE) {
            next(p);
            s->band = b;
        } else if (m >= 0) {
            next(p);
            s->dmode = m;
        } else if (is_kw(p, "ALL")) {
            next(p);
            if (expect_kw(p, "LAYERS"))
                return LQ_EINVAL;
            s->band = LQ_LB_ALL;
        } else if (is_kw(p, "AT")) {
            if (at_layer(p, s))
                return LQ_EINVAL;
        } else if (is_kw(p, "RELATIONS")) {
            next(p);
            if (expect_kw(p, "ONLY"))
                return LQ_EINVAL;
            s->relations_only = 1;
        } else if (accept_word(p, "STREAM")) { /* LARQL's docs: rows as they come; whole here */
            s->stream = 1;
        } else if (accept_kw(p, "LIMIT")) {
            if (expect_uint(p, "LIMIT", &s->limit))
                return LQ_EINVAL;
        } else {
            return unexpected(p, "DESCRIBE (expected ALL LAYERS, SYNTAX, KNOWLEDGE, OUTPUT, AT LAYER, "
                                 "RELATIONS ONLY, VERBOSE, BRIEF, RAW or LIMIT)");
        }
    }
    return 0;
}

static int parse_walk_infer(parser *p, lq_lql_stmt *s, int explain)
{
    int walk = s->kind == LQ_LS_WALK || s->kind == LQ_LS_EXPLAIN_WALK;
    if (expect_string(p, "the prompt", &s->str))
        return LQ_EINVAL;
    while (!at_end(p)) {
        if (accept_kw(p, "TOP")) {
            if (expect_uint(p, "TOP count", &s->top))
                return LQ_EINVAL;
        } else if ((walk || explain) && accept_kw(p, "LAYERS")) {
            if (accept_kw(p, "ALL")) {
                s->all_layers = 1;
                s->has_range = 0;
            } else if (parse_range(p, s)) {
                return LQ_EINVAL;
            }
        } else if (!explain && accept_kw(p, "COMPARE")) {
            s->compare = 1;
        } else if (!walk && !explain && accept_kw(p, "ROUTE")) {
            /* ROUTE VERIFY [FALLBACK] [TOPK n] [EXIT] */
            if (expect_kw(p, "VERIFY"))
                return LQ_EINVAL;
            s->route = 1;
            for (;;) {
                if (accept_kw(p, "FALLBACK")) {
                    s->route_fallback = 1;
                } else if (accept_kw(p, "TOPK")) {
                    if (expect_uint(p, "TOPK", &s->route_topk))
                        return LQ_EINVAL;
                } else if (accept_kw(p, "EXIT")) {
                    s->route_exit = 1;
                } else {
                    break;
                }
            }
        } else if (walk && !explain && accept_kw(p, "MODE")) {
            if (accept_kw(p, "HYBRID"))
                s->wmode = LQ_LW_HYBRID;
            else if (accept_kw(p, "PURE"))
                s->wmode = LQ_LW_PURE;
            else if (accept_kw(p, "DENSE"))
                s->wmode = LQ_LW_DENSE;
            else
                return fail(p, "expected HYBRID, PURE or DENSE after MODE");
        } else if (explain && accept_kw(p, "VERBOSE")) {
            s->verbose = 1;
        } else if (explain && !walk && band_kw(p) != LQ_LB_NONE) {
            s->band = band_kw(p);
            next(p);
        } else if (explain && !walk && accept_kw(p, "RELATIONS")) {
            if (expect_kw(p, "ONLY"))
                return LQ_EINVAL;
            s->relations_only = 1;
        } else if (explain && !walk && accept_kw(p, "WITH")) {
            if (expect_kw(p, "ATTENTION"))
                return LQ_EINVAL;
            s->with_attention = 1;
        } else {
            return unexpected(p, lq_lql_kind_name(s->kind));
        }
    }
    return 0;
}

static int parse_select(parser *p, lq_lql_stmt *s)
{
    int star = 0;
    if (peek(p)->kind == LQ_LT_STAR) {
        next(p);
        star = 1;
    } else {
        for (;;) {
            if (peek(p)->kind == LQ_LT_STAR) { /* "entity, *": every column (LARQL) */
                next(p);
                star = 1;
                if (peek(p)->kind != LQ_LT_COMMA)
                    break;
                next(p);
                continue;
            }
            char **nc = realloc(s->cols, (s->n_cols + 1) * sizeof *nc);
            if (!nc)
                return lq_err_set(p->err, LQ_ENOMEM, "out of memory");
            s->cols = nc;
            s->cols[s->n_cols] = NULL;
            if (parse_field(p, &s->cols[s->n_cols]))
                return LQ_EINVAL;
            s->n_cols++;
            if (peek(p)->kind != LQ_LT_COMMA)
                break;
            next(p);
        }
    }
    if (star) { /* "*" anywhere in the list selects every column */
        for (size_t i = 0; i < s->n_cols; i++)
            free(s->cols[i]);
        s->n_cols = 0;
    }
    if (expect_kw(p, "FROM"))
        return LQ_EINVAL;
    if (accept_kw(p, "EDGES"))
        s->from = LQ_LF_EDGES;
    else if (accept_kw(p, "FEATURES"))
        s->from = LQ_LF_FEATURES;
    else if (accept_kw(p, "ENTITIES"))
        s->from = LQ_LF_ENTITIES;
    else
        return fail(p, "expected EDGES, FEATURES or ENTITIES after FROM");
    while (!at_end(p)) {
        if (accept_kw(p, "NEAREST")) {
            if (expect_kw(p, "TO") || expect_string(p, "the entity", &s->nearest))
                return LQ_EINVAL;
            if (!is_kw(p, "AT"))
                return fail(p, "expected AT LAYER n after NEAREST TO \"%s\"", s->nearest);
            if (at_layer(p, s))
                return LQ_EINVAL;
        } else if (accept_kw(p, "WHERE")) {
            if (parse_where(p, s))
                return LQ_EINVAL;
        } else if (accept_kw(p, "ORDER")) {
            if (expect_kw(p, "BY") || parse_field(p, &s->order_by))
                return LQ_EINVAL;
            if (accept_kw(p, "ASC"))
                s->order_desc = 0;
            else if (accept_kw(p, "DESC"))
                s->order_desc = 1;
        } else if (accept_kw(p, "LIMIT")) {
            if (expect_uint(p, "LIMIT", &s->limit))
                return LQ_EINVAL;
        } else {
            return unexpected(p, "SELECT (expected NEAREST TO, WHERE, ORDER BY or LIMIT)");
        }
    }
    return 0;
}

static int parse_insert(parser *p, lq_lql_stmt *s)
{
    if (expect_kw(p, "INTO") || expect_kw(p, "EDGES") || expect(p, LQ_LT_LPAREN, "'('"))
        return LQ_EINVAL;
    /* LARQL requires the literal column list (entity, relation, target) */
    static const char *const cols[3] = {"entity", "relation", "target"};
    for (int i = 0; i < 3; i++) {
        char *f = NULL;
        const lq_ltok *k = peek(p);
        if (parse_field(p, &f))
            return LQ_EINVAL;
        int ok = !strcmp(f, cols[i]);
        free(f);
        if (!ok)
            return lq_lql_diag(p->err, "Parse error", p->src, p->len, k->off, k->line, k->col,
                               "the column list must be (entity, relation, target); expected '%s'", cols[i]);
        if (expect(p, i < 2 ? LQ_LT_COMMA : LQ_LT_RPAREN, i < 2 ? "','" : "')'"))
            return LQ_EINVAL;
    }
    if (expect_kw(p, "VALUES") || expect(p, LQ_LT_LPAREN, "'(' after VALUES") ||
        expect_string(p, "the entity", &s->entity) || expect(p, LQ_LT_COMMA, "','") ||
        expect_string(p, "the relation", &s->relation) || expect(p, LQ_LT_COMMA, "','") ||
        expect_string(p, "the target", &s->target) || expect(p, LQ_LT_RPAREN, "')'"))
        return LQ_EINVAL;
    while (!at_end(p)) {
        if (is_kw(p, "AT")) {
            if (at_layer(p, s))
                return LQ_EINVAL;
        } else if (accept_kw(p, "CONFIDENCE")) {
            if (expect_number(p, "CONFIDENCE", &s->confidence))
                return LQ_EINVAL;
        } else if (accept_kw(p, "ALPHA")) {
            if (expect_number(p, "ALPHA", &s->alpha))
                return LQ_EINVAL;
        } else if (accept_kw(p, "MODE")) {
            if (peek(p)->kind == LQ_LT_EQ)
                next(p);
            if (accept_kw(p, "KNN"))
                s->insert_mode = 0;
            else if (accept_kw(p, "COMPOSE"))
                s->insert_mode = 1;
            else if (accept_kw(p, "SUBJECT"))
                s->insert_mode = 2;
            else
                return fail(p, "expected KNN, COMPOSE or SUBJECT after MODE");
        } else {
            return unexpected(p, "INSERT (expected AT LAYER, CONFIDENCE, ALPHA or MODE)");
        }
    }
    return 0;
}

static int parse_where_only(parser *p, lq_lql_stmt *s, const char *stmt)
{
    while (!at_end(p)) {
        if (accept_kw(p, "WHERE")) {
            if (parse_where(p, s))
                return LQ_EINVAL;
        } else {
            return unexpected(p, stmt);
        }
    }
    if (!s->n_where)
        return fail(p, "%s needs a WHERE clause", stmt);
    return 0;
}

static int parse_update(parser *p, lq_lql_stmt *s)
{
    if (expect_kw(p, "EDGES") || expect_kw(p, "SET"))
        return LQ_EINVAL;
    for (;;) {
        lq_lql_assign *na = realloc(s->set, (s->n_set + 1) * sizeof *na);
        if (!na)
            return lq_err_set(p->err, LQ_ENOMEM, "out of memory");
        s->set = na;
        lq_lql_assign *a = &s->set[s->n_set++];
        memset(a, 0, sizeof *a);
        if (parse_field(p, &a->field) || expect(p, LQ_LT_EQ, "'='") || parse_value(p, &a->v))
            return LQ_EINVAL;
        if (peek(p)->kind != LQ_LT_COMMA)
            break;
        next(p);
    }
    return parse_where_only(p, s, "UPDATE");
}

static int parse_show(parser *p, lq_lql_stmt *s)
{
    if (accept_kw(p, "RELATIONS")) {
        s->kind = LQ_LS_SHOW_RELATIONS;
        while (!at_end(p)) {
            int m = dmode_kw(p);
            if (m >= 0) {
                next(p);
                s->dmode = m;
            } else if (is_kw(p, "AT")) {
                if (at_layer(p, s))
                    return LQ_EINVAL;
            } else if (accept_kw(p, "WITH")) {
                if (expect_kw(p, "EXAMPLES"))
                    return LQ_EINVAL;
                s->with_examples = 1;
            } else {
                return unexpected(p, "SHOW RELATIONS (expected AT LAYER, WITH EXAMPLES, VERBOSE, BRIEF or RAW)");
            }
        }
        return 0;
    }
    if (accept_kw(p, "LAYERS")) {
        s->kind = LQ_LS_SHOW_LAYERS;
        while (!at_end(p)) {
            accept_kw(p, "RANGE");
            if (parse_range(p, s))
                return LQ_EINVAL;
        }
        return 0;
    }
    if (accept_kw(p, "FEATURES")) {
        s->kind = LQ_LS_SHOW_FEATURES;
        if (expect_uint(p, "layer", &s->layer))
            return LQ_EINVAL;
        while (!at_end(p)) {
            if (accept_kw(p, "WHERE")) {
                if (parse_where(p, s))
                    return LQ_EINVAL;
            } else if (accept_kw(p, "LIMIT")) {
                if (expect_uint(p, "LIMIT", &s->limit))
                    return LQ_EINVAL;
            } else {
                return unexpected(p, "SHOW FEATURES (expected WHERE or LIMIT)");
            }
        }
        return 0;
    }
    if (accept_kw(p, "ENTITIES")) {
        s->kind = LQ_LS_SHOW_ENTITIES;
        while (!at_end(p)) {
            if (is_kw(p, "AT")) {
                if (at_layer(p, s))
                    return LQ_EINVAL;
            } else if (peek(p)->kind == LQ_LT_INT) {
                if (expect_uint(p, "layer", &s->layer))
                    return LQ_EINVAL;
            } else if (accept_kw(p, "LIMIT")) {
                if (expect_uint(p, "LIMIT", &s->limit))
                    return LQ_EINVAL;
            } else {
                return unexpected(p, "SHOW ENTITIES (expected AT LAYER or LIMIT)");
            }
        }
        return 0;
    }
    if (accept_kw(p, "MODELS")) {
        s->kind = LQ_LS_SHOW_MODELS;
        return 0;
    }
    if (accept_kw(p, "PATCHES")) {
        s->kind = LQ_LS_SHOW_PATCHES;
        return 0;
    }
    if (accept_kw(p, "COMPACT")) {
        s->kind = LQ_LS_SHOW_COMPACT_STATUS;
        return expect_kw(p, "STATUS");
    }
    return fail(p, "expected RELATIONS, LAYERS, FEATURES, ENTITIES, MODELS, PATCHES or COMPACT STATUS after SHOW");
}

static int expect_word(parser *p, const char *word);

static int parse_compile(parser *p, lq_lql_stmt *s)
{
    if (accept_kw(p, "CURRENT")) {
        s->compile_current = 1;
    } else if (peek(p)->kind == LQ_LT_STRING) {
        if (expect_string(p, "the source vindex", &s->str_src))
            return LQ_EINVAL;
    } else {
        return fail(p, "expected CURRENT or a vindex path after COMPILE");
    }
    if (expect_kw(p, "INTO"))
        return LQ_EINVAL;
    if (accept_kw(p, "MODEL"))
        s->compile_model = 1;
    else if (expect_word(p, "VINDEX"))
        return fail(p, "expected MODEL or VINDEX after INTO");
    if (expect_string(p, "the output path", &s->str))
        return LQ_EINVAL;
    if (accept_kw(p, "FORMAT")) {
        if (!s->compile_model)
            return fail(p, "FORMAT is only valid for COMPILE INTO MODEL");
        if (accept_kw(p, "SAFETENSORS"))
            s->format = 1;
        else if (accept_kw(p, "GGUF"))
            s->format = 2;
        else
            return fail(p, "expected SAFETENSORS or GGUF after FORMAT");
    }
    while (accept_kw(p, "ON")) {
        if (expect_kw(p, "CONFLICT"))
            return LQ_EINVAL;
        if (s->compile_model)
            return fail(p, "ON CONFLICT is only valid for COMPILE INTO VINDEX");
        if (accept_kw(p, "LAST_WINS"))
            s->conflict = LQ_LC_LAST_WINS;
        else if (accept_kw(p, "HIGHEST_CONFIDENCE"))
            s->conflict = LQ_LC_HIGHEST_CONFIDENCE;
        else if (accept_kw(p, "FAIL"))
            s->conflict = LQ_LC_FAIL;
        else
            return fail(p, "expected LAST_WINS, HIGHEST_CONFIDENCE or FAIL");
    }
    return 0;
}

/* VINDEX is not in LARQL's keyword list: it lexes as an identifier. */
static int expect_word(parser *p, const char *word)
{
    const lq_ltok *k = peek(p);
    if ((k->kind == LQ_LT_IDENT || k->kind == LQ_LT_KEYWORD) && !strcasecmp(k->text, word)) {
        next(p);
        return 0;
    }
    return fail(p, "expected %s", word);
}

/* CURRENT or a vindex path */
static int parse_vref(parser *p, int *current, char **path)
{
    if (accept_kw(p, "CURRENT")) {
        *current = 1;
        return 0;
    }
    return expect_string(p, "a vindex path or CURRENT", path);
}

/* EXTRACT MODEL "m" INTO "out" [COMPONENTS c, ...] [LAYERS a-b] [WITH INFERENCE|ALL|WEIGHTS] */
static int parse_extract(parser *p, lq_lql_stmt *s)
{
    static const char *const COMP[] = {"FFN_GATE", "FFN_DOWN", "FFN_UP", "EMBEDDINGS", "ATTN_OV", "ATTN_QK"};
    s->kind = LQ_LS_EXTRACT;
    if (expect_kw(p, "MODEL") || expect_string(p, "the model file", &s->str) || expect_kw(p, "INTO") ||
        expect_string(p, "the output vindex", &s->str2))
        return LQ_EINVAL;
    while (!at_end(p)) {
        if (accept_kw(p, "COMPONENTS")) {
            for (;;) {
                const lq_ltok *k = peek(p);
                size_t c = 0, nc = sizeof COMP / sizeof COMP[0];
                if (k->kind == LQ_LT_KEYWORD || k->kind == LQ_LT_IDENT)
                    while (c < nc && strcasecmp(k->text, COMP[c]))
                        c++;
                if (c >= nc || (k->kind != LQ_LT_KEYWORD && k->kind != LQ_LT_IDENT))
                    return fail(p, "expected a component (FFN_GATE, FFN_DOWN, FFN_UP, EMBEDDINGS, ATTN_OV, ATTN_QK)");
                next(p);
                s->components |= 1u << c;
                if (peek(p)->kind != LQ_LT_COMMA)
                    break;
                next(p);
            }
        } else if (accept_kw(p, "LAYERS")) {
            if (parse_range(p, s))
                return LQ_EINVAL;
        } else if (accept_kw(p, "WITH")) {
            if (accept_kw(p, "INFERENCE") || accept_kw(p, "WEIGHTS"))
                s->extract_level = 1;
            else if (accept_kw(p, "ALL"))
                s->extract_level = 2;
            else
                return fail(p, "expected INFERENCE, ALL or WEIGHTS after WITH");
        } else {
            return unexpected(p, "EXTRACT (expected COMPONENTS, LAYERS or WITH)");
        }
    }
    return 0;
}

/* DIFF a b [LAYER n] [RELATION(S) "r"] [ENTITY "e"] [LIMIT n] [INTO PATCH "p" | INTO REPORT "r"] */
static int parse_diff(parser *p, lq_lql_stmt *s)
{
    s->kind = LQ_LS_DIFF;
    if (accept_kw(p, "WITH")) { /* LARQL's docs: stmt |> DIFF WITH "b" = DIFF CURRENT "b" */
        s->current_a = 1;
        if (parse_vref(p, &s->current_b, &s->str2))
            return LQ_EINVAL;
    } else if (parse_vref(p, &s->current_a, &s->str) || parse_vref(p, &s->current_b, &s->str2)) {
        return LQ_EINVAL;
    }
    while (!at_end(p)) {
        if (accept_kw(p, "LAYER")) {
            if (expect_uint(p, "layer", &s->layer))
                return LQ_EINVAL;
        } else if (accept_kw(p, "RELATION") || accept_kw(p, "RELATIONS")) {
            if (expect_string(p, "the relation", &s->relation))
                return LQ_EINVAL;
        } else if (accept_word(p, "ENTITY")) {
            if (expect_string(p, "the entity", &s->entity))
                return LQ_EINVAL;
        } else if (accept_kw(p, "LIMIT")) {
            if (expect_uint(p, "LIMIT", &s->limit))
                return LQ_EINVAL;
        } else if (accept_kw(p, "INTO")) {
            if (accept_kw(p, "PATCH")) {
                if (expect_string(p, "the patch file", &s->into_patch))
                    return LQ_EINVAL;
            } else if (accept_word(p, "REPORT")) {
                if (expect_string(p, "the report file", &s->into_report))
                    return LQ_EINVAL;
            } else {
                return fail(p, "expected PATCH or REPORT after INTO");
            }
        } else {
            return unexpected(p, "DIFF (expected LAYER, RELATION, ENTITY, LIMIT or INTO PATCH)");
        }
    }
    return 0;
}

/* MERGE "src" [INTO "dst"] [ON CONFLICT KEEP_SOURCE|KEEP_TARGET|HIGHEST_CONFIDENCE] */
static int parse_merge(parser *p, lq_lql_stmt *s)
{
    s->kind = LQ_LS_MERGE;
    if (expect_string(p, "the source vindex or patch", &s->str))
        return LQ_EINVAL;
    if (accept_kw(p, "INTO") && expect_string(p, "the target vindex", &s->str2))
        return LQ_EINVAL;
    if (accept_kw(p, "ON")) {
        if (expect_kw(p, "CONFLICT"))
            return LQ_EINVAL;
        if (accept_kw(p, "KEEP_SOURCE"))
            s->conflict = LQ_LC_KEEP_SOURCE;
        else if (accept_kw(p, "KEEP_TARGET"))
            s->conflict = LQ_LC_KEEP_TARGET;
        else if (accept_kw(p, "HIGHEST_CONFIDENCE"))
            s->conflict = LQ_LC_HIGHEST_CONFIDENCE;
        else
            return fail(p, "expected KEEP_SOURCE, KEEP_TARGET or HIGHEST_CONFIDENCE");
    }
    return 0;
}

/* TRACE "p" [FOR "tok"] [DECOMPOSE] [LAYERS a-b] [POSITIONS ALL|LAST] [SAVE "path"] */
static int parse_trace(parser *p, lq_lql_stmt *s)
{
    s->kind = LQ_LS_TRACE;
    if (expect_string(p, "the prompt", &s->str))
        return LQ_EINVAL;
    while (!at_end(p)) {
        if (accept_kw(p, "FOR")) {
            if (expect_string(p, "the token to follow", &s->target))
                return LQ_EINVAL;
        } else if (accept_kw(p, "DECOMPOSE")) {
            s->decompose = 1;
        } else if (accept_kw(p, "LAYERS")) {
            if (parse_range(p, s))
                return LQ_EINVAL;
        } else if (accept_kw(p, "POSITIONS")) {
            if (accept_kw(p, "ALL"))
                s->positions_all = 1;
            else
                accept_word(p, "LAST");
        } else if (accept_kw(p, "SAVE")) {
            if (expect_string(p, "the trace file", &s->str2))
                return LQ_EINVAL;
        } else {
            return unexpected(p, "TRACE (expected FOR, DECOMPOSE, LAYERS, POSITIONS or SAVE)");
        }
    }
    return 0;
}

/* COMPACT MINOR | COMPACT MAJOR [FULL|ALL] [WITH LAMBDA = x] (MINOR and MAJOR are words) */
static int parse_compact(parser *p, lq_lql_stmt *s)
{
    s->kind = LQ_LS_COMPACT;
    if (accept_word(p, "MINOR"))
        return 0;
    if (!accept_word(p, "MAJOR"))
        return fail(p, "expected MINOR or MAJOR after COMPACT");
    s->compact_major = 1;
    if (accept_kw(p, "ALL") || accept_word(p, "FULL"))
        s->compact_full = 1;
    if (accept_kw(p, "WITH")) {
        if (!accept_word(p, "LAMBDA"))
            return fail(p, "expected LAMBDA after WITH in COMPACT MAJOR");
        if (expect(p, LQ_LT_EQ, "'=' after LAMBDA") || expect_number(p, "LAMBDA", &s->lambda))
            return LQ_EINVAL;
    }
    return 0;
}

/* REBALANCE [UNTIL CONVERGED] [MAX n] [FLOOR [=] x] [CEILING [=] x] */
static int parse_rebalance(parser *p, lq_lql_stmt *s)
{
    s->kind = LQ_LS_REBALANCE;
    while (!at_end(p)) {
        if (accept_kw(p, "UNTIL")) {
            if (expect_kw(p, "CONVERGED"))
                return LQ_EINVAL;
        } else if (accept_kw(p, "MAX")) {
            if (expect_uint(p, "MAX iterations", &s->max_iters))
                return LQ_EINVAL;
        } else if (accept_kw(p, "FLOOR") || is_kw(p, "CEILING")) {
            int ceil_ = accept_kw(p, "CEILING");
            if (peek(p)->kind == LQ_LT_EQ)
                next(p);
            if (expect_number(p, ceil_ ? "CEILING" : "FLOOR", ceil_ ? &s->ceiling_p : &s->floor_p))
                return LQ_EINVAL;
        } else {
            return unexpected(p, "REBALANCE (expected UNTIL CONVERGED, MAX, FLOOR or CEILING)");
        }
    }
    return 0;
}

static int parse_head(parser *p, lq_lql_stmt *s)
{
    const lq_ltok *k = peek(p);
    s->line = k->line;
    s->col = k->col;
    if (k->kind != LQ_LT_KEYWORD)
        return fail(p, "expected a statement (USE, DESCRIBE, WALK, INFER, SELECT, INSERT, ...)");
    const char *w = k->text;
    next(p);
    if (!strcmp(w, "USE")) {
        s->kind = LQ_LS_USE;
        if (accept_kw(p, "MODEL")) {
            s->kind = LQ_LS_USE_MODEL;
            if (expect_string(p, "the model file", &s->str))
                return LQ_EINVAL;
            s->auto_extract = accept_kw(p, "AUTO_EXTRACT");
            return 0;
        }
        if (accept_kw(p, "REMOTE")) {
            s->kind = LQ_LS_USE_REMOTE;
            return expect_string(p, "the server URL", &s->str);
        }
        return expect_string(p, "the vindex path", &s->str);
    }
    if (!strcmp(w, "STATS")) {
        s->kind = LQ_LS_STATS;
        if (peek(p)->kind == LQ_LT_STRING)
            return expect_string(p, "the vindex path", &s->str);
        return 0;
    }
    if (!strcmp(w, "DESCRIBE")) {
        s->kind = LQ_LS_DESCRIBE;
        return parse_describe(p, s);
    }
    if (!strcmp(w, "WALK") || !strcmp(w, "INFER")) {
        s->kind = !strcmp(w, "WALK") ? LQ_LS_WALK : LQ_LS_INFER;
        return parse_walk_infer(p, s, 0);
    }
    if (!strcmp(w, "EXPLAIN")) {
        if (accept_kw(p, "WALK"))
            s->kind = LQ_LS_EXPLAIN_WALK;
        else if (accept_kw(p, "INFER"))
            s->kind = LQ_LS_EXPLAIN_INFER;
        else
            return fail(p, "expected WALK or INFER after EXPLAIN");
        return parse_walk_infer(p, s, 1);
    }
    if (!strcmp(w, "SELECT")) {
        s->kind = LQ_LS_SELECT;
        return parse_select(p, s);
    }
    if (!strcmp(w, "INSERT")) {
        s->kind = LQ_LS_INSERT;
        return parse_insert(p, s);
    }
    if (!strcmp(w, "DELETE")) {
        s->kind = LQ_LS_DELETE;
        if (expect_kw(p, "FROM") || expect_kw(p, "EDGES"))
            return LQ_EINVAL;
        return parse_where_only(p, s, "DELETE");
    }
    if (!strcmp(w, "UPDATE")) {
        s->kind = LQ_LS_UPDATE;
        return parse_update(p, s);
    }
    if (!strcmp(w, "BEGIN")) {
        s->kind = LQ_LS_BEGIN_PATCH;
        return expect_kw(p, "PATCH") ? LQ_EINVAL : expect_string(p, "the patch file", &s->str);
    }
    if (!strcmp(w, "SAVE")) {
        s->kind = LQ_LS_SAVE_PATCH;
        if (expect_kw(p, "PATCH"))
            return LQ_EINVAL;
        /* SAVE PATCH "file" (LARQL's docs): the recording goes to that file */
        return peek(p)->kind == LQ_LT_STRING ? expect_string(p, "the patch file", &s->str) : 0;
    }
    if (!strcmp(w, "APPLY") || !strcmp(w, "REMOVE")) {
        s->kind = !strcmp(w, "APPLY") ? LQ_LS_APPLY_PATCH : LQ_LS_REMOVE_PATCH;
        return expect_kw(p, "PATCH") ? LQ_EINVAL : expect_string(p, "the patch file", &s->str);
    }
    if (!strcmp(w, "SHOW"))
        return parse_show(p, s);
    if (!strcmp(w, "COMPILE")) {
        s->kind = LQ_LS_COMPILE;
        return parse_compile(p, s);
    }
    if (!strcmp(w, "EXTRACT"))
        return parse_extract(p, s);
    if (!strcmp(w, "DIFF"))
        return parse_diff(p, s);
    if (!strcmp(w, "MERGE"))
        return parse_merge(p, s);
    if (!strcmp(w, "TRACE"))
        return parse_trace(p, s);
    if (!strcmp(w, "COMPACT"))
        return parse_compact(p, s);
    if (!strcmp(w, "REBALANCE"))
        return parse_rebalance(p, s);
    p->i--; /* point at the word */
    return fail(p, "expected a statement (USE, DESCRIBE, WALK, INFER, SELECT, INSERT, DELETE, UPDATE, "
                   "SHOW, STATS, ...)");
}

static lq_lql_stmt *stmt_new(void)
{
    lq_lql_stmt *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->top = s->layer = s->limit = s->insert_mode = -1;
    s->band = LQ_LB_NONE;
    s->order_desc = 1;
    s->confidence = s->alpha = NAN;
    s->lambda = s->floor_p = s->ceiling_p = NAN;
    s->max_iters = -1;
    return s;
}

static int parse_one(parser *p, lq_lql_stmt **out)
{
    lq_lql_stmt *s = stmt_new();
    if (!s)
        return lq_err_set(p->err, LQ_ENOMEM, "out of memory");
    int rc = parse_head(p, s);
    if (!rc && peek(p)->kind == LQ_LT_PIPE) {
        next(p);
        rc = parse_one(p, &s->next);
        /* DESCRIBE "e" |> DIFF ...: the diff of that entity's features */
        if (!rc && s->kind == LQ_LS_DESCRIBE && s->next->kind == LQ_LS_DIFF && !s->next->entity &&
            !(s->next->entity = strdup(s->str)))
            rc = lq_err_set(p->err, LQ_ENOMEM, "out of memory");
    }
    if (rc) {
        lq_lql_stmt_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int lq_lql_parse(const char *src, size_t len, int line, int col, lq_lql_stmt **out, lq_err *err)
{
    *out = NULL;
    parser p = {src, len, {0}, 0, err};
    int rc = lq_lql_lex(src, len, line, col, &p.t, err);
    if (rc)
        return rc;
    if (peek(&p)->kind == LQ_LT_EOF || peek(&p)->kind == LQ_LT_SEMI) {
        rc = fail(&p, "expected a statement");
    } else {
        lq_lql_stmt *s = NULL;
        rc = parse_one(&p, &s);
        if (!rc && peek(&p)->kind == LQ_LT_SEMI)
            next(&p);
        if (!rc && peek(&p)->kind != LQ_LT_EOF) {
            rc = fail(&p, "unexpected trailing token (one statement at a time; end it with ';')");
        }
        if (rc)
            lq_lql_stmt_free(s);
        else
            *out = s;
    }
    lq_lql_toks_free(&p.t);
    return rc;
}

void lq_lql_stmt_free(lq_lql_stmt *s)
{
    while (s) {
        lq_lql_stmt *nx = s->next;
        free(s->str);
        free(s->str_src);
        free(s->str2);
        free(s->into_patch);
        free(s->into_report);
        for (size_t i = 0; i < s->n_cols; i++)
            free(s->cols[i]);
        free(s->cols);
        free(s->nearest);
        for (size_t i = 0; i < s->n_where; i++) {
            free(s->where[i].field);
            value_free(&s->where[i].v);
            for (size_t j = 0; j < s->where[i].n_list; j++)
                value_free(&s->where[i].list[j]);
            free(s->where[i].list);
        }
        free(s->where);
        free(s->order_by);
        free(s->entity);
        free(s->relation);
        free(s->target);
        for (size_t i = 0; i < s->n_set; i++) {
            free(s->set[i].field);
            value_free(&s->set[i].v);
        }
        free(s->set);
        free(s);
        s = nx;
    }
}

const char *lq_lql_kind_name(int kind)
{
    switch (kind) {
    case LQ_LS_USE: return "USE";
    case LQ_LS_STATS: return "STATS";
    case LQ_LS_DESCRIBE: return "DESCRIBE";
    case LQ_LS_WALK: return "WALK";
    case LQ_LS_INFER: return "INFER";
    case LQ_LS_EXPLAIN_WALK: return "EXPLAIN WALK";
    case LQ_LS_EXPLAIN_INFER: return "EXPLAIN INFER";
    case LQ_LS_SELECT: return "SELECT";
    case LQ_LS_INSERT: return "INSERT";
    case LQ_LS_DELETE: return "DELETE";
    case LQ_LS_UPDATE: return "UPDATE";
    case LQ_LS_BEGIN_PATCH: return "BEGIN PATCH";
    case LQ_LS_SAVE_PATCH: return "SAVE PATCH";
    case LQ_LS_APPLY_PATCH: return "APPLY PATCH";
    case LQ_LS_REMOVE_PATCH: return "REMOVE PATCH";
    case LQ_LS_SHOW_PATCHES: return "SHOW PATCHES";
    case LQ_LS_SHOW_RELATIONS: return "SHOW RELATIONS";
    case LQ_LS_SHOW_LAYERS: return "SHOW LAYERS";
    case LQ_LS_SHOW_FEATURES: return "SHOW FEATURES";
    case LQ_LS_SHOW_ENTITIES: return "SHOW ENTITIES";
    case LQ_LS_SHOW_MODELS: return "SHOW MODELS";
    case LQ_LS_COMPILE: return "COMPILE";
    case LQ_LS_USE_MODEL: return "USE MODEL";
    case LQ_LS_USE_REMOTE: return "USE REMOTE";
    case LQ_LS_EXTRACT: return "EXTRACT";
    case LQ_LS_DIFF: return "DIFF";
    case LQ_LS_MERGE: return "MERGE";
    case LQ_LS_TRACE: return "TRACE";
    case LQ_LS_COMPACT: return "COMPACT";
    case LQ_LS_SHOW_COMPACT_STATUS: return "SHOW COMPACT STATUS";
    case LQ_LS_REBALANCE: return "REBALANCE";
    default: return "statement";
    }
}
