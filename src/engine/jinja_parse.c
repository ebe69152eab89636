/* Jinja parser: tokens -> AST, with Jinja2's operator precedence (lowest first):
 *   cond-expr (x if c else y) < or < and < not < comparisons (== != < <= > >= in, not in)
 *   < + - < ~ < * / // % < ** < unary - + < primary with postfix (.attr [item] (call)),
 *   then filters (|f) and tests (is t) bind to the unary operand.
 * Filter and test names are checked here, so a template using one we do not have fails
 * when it is loaded, naming its line, whatever branch a conversation would take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"

typedef struct P {
    jtemplate *t;
    jtok *tk;
    size_t i, n;
    lq_err *err;
    int depth;
} P;

static jnode *node(P *p, jn_type ty, int line)
{
    jtemplate *t = p->t;
    if (t->n_nodes == t->cap_nodes) {
        size_t cap = t->cap_nodes ? t->cap_nodes * 2 : 64;
        jnode **nn = realloc(t->nodes, cap * sizeof *nn);
        if (!nn)
            return NULL;
        t->nodes = nn;
        t->cap_nodes = cap;
    }
    jnode *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->t = ty;
    n->line = line;
    t->nodes[t->n_nodes++] = n;
    return n;
}

static int kid(jnode *n, jnode *k)
{
    if ((n->nkid & (n->nkid - 1)) == 0) { /* grow at powers of two */
        size_t cap = n->nkid ? n->nkid * 2 : 2;
        jnode **nk = realloc(n->kid, cap * sizeof *nk);
        if (!nk)
            return -1;
        n->kid = nk;
    }
    n->kid[n->nkid++] = k;
    return 0;
}

static jtok *cur(P *p) { return &p->tk[p->i]; }

static int fail(P *p, const char *fmt, const char *a)
{
    if (!p->err->code)
        lq_err_set(p->err, LQ_EINVAL, "template line %d: %s%s%s", cur(p)->line, fmt, a ? a : "",
                   a ? "'" : "");
    return -1;
}

static int oom(P *p)
{
    if (!p->err->code)
        lq_err_set(p->err, LQ_ENOMEM, "template: out of memory");
    return -1;
}

static int is_op(P *p, const char *op)
{
    jtok *t = cur(p);
    return t->t == JT_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

static int is_name(P *p, const char *nm)
{
    jtok *t = cur(p);
    return t->t == JT_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n);
}

static int is_name_at(P *p, size_t off, const char *nm)
{
    if (p->i + off >= p->n)
        return 0;
    jtok *t = &p->tk[p->i + off];
    return t->t == JT_NAME && t->n == strlen(nm) && !memcmp(t->s, nm, t->n);
}

/* "expected <wanted> but found <the current token>" */
static int unexpected(P *p, const char *wanted)
{
    jtok *t = cur(p);
    char what[64];
    if (t->t == JT_VAR_END || t->t == JT_BLOCK_END)
        snprintf(what, sizeof what, "the end of the tag");
    else if (t->t == JT_EOF)
        snprintf(what, sizeof what, "the end of the template");
    else if (t->t == JT_TEXT)
        snprintf(what, sizeof what, "template text");
    else
        snprintf(what, sizeof what, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    if (!p->err->code)
        lq_err_set(p->err, LQ_EINVAL, "template line %d: expected %s but found %s", t->line, wanted, what);
    return -1;
}

static int expect_op(P *p, const char *op)
{
    if (!is_op(p, op)) {
        char m[16];
        snprintf(m, sizeof m, "'%s'", op);
        return unexpected(p, m);
    }
    p->i++;
    return 0;
}

static jnode *expr(P *p);
static jnode *unary(P *p, int with_filter);

static int call_args(P *p, jnode *n)
{
    /* at '(' */
    p->i++;
    while (!is_op(p, ")")) {
        if (is_op(p, "*") || is_op(p, "**"))
            return fail(p, "*args and **kwargs in calls are not supported", NULL);
        if (cur(p)->t == JT_NAME && p->i + 1 < p->n && p->tk[p->i + 1].t == JT_OP &&
            p->tk[p->i + 1].n == 1 && p->tk[p->i + 1].s[0] == '=') {
            jnode *kw = node(p, JN_KWARG, cur(p)->line);
            if (!kw)
                return oom(p);
            kw->s = cur(p)->s;
            kw->n = cur(p)->n;
            p->i += 2;
            jnode *v = expr(p);
            if (!v || kid(kw, v) || kid(n, kw))
                return v ? oom(p) : -1;
        } else {
            jnode *v = expr(p);
            if (!v || kid(n, v))
                return v ? oom(p) : -1;
        }
        if (!is_op(p, ","))
            break;
        p->i++;
    }
    return expect_op(p, ")");
}

/* more comma-separated expressions into l up to close (consumed); a trailing comma is allowed */
static int items_until(P *p, jnode *l, const char *close)
{
    while (!is_op(p, close)) {
        jnode *e = expr(p);
        if (!e)
            return -1;
        if (kid(l, e))
            return oom(p);
        if (!is_op(p, ","))
            break;
        p->i++;
    }
    return expect_op(p, close);
}

static jnode *primary(P *p)
{
    jtok *t = cur(p);
    jnode *n;
    if (++p->depth > JJ_MAX_DEPTH) {
        fail(p, "expression nested too deeply", NULL);
        return NULL;
    }
    switch (t->t) {
    case JT_NAME:
        n = node(p, JN_CONST, t->line);
        if (!n)
            return oom(p), NULL;
        if (is_name(p, "true") || is_name(p, "True"))
            n->val = jv_bool(1);
        else if (is_name(p, "false") || is_name(p, "False"))
            n->val = jv_bool(0);
        else if (is_name(p, "none") || is_name(p, "None"))
            n->val = jv_none();
        else {
            n->t = JN_NAME;
            n->s = t->s;
            n->n = t->n;
        }
        p->i++;
        break;
    case JT_STRING: {
        n = node(p, JN_CONST, t->line);
        if (!n)
            return oom(p), NULL;
        /* adjacent literals concatenate */
        size_t total = 0, j = p->i;
        while (j < p->n && p->tk[j].t == JT_STRING)
            total += p->tk[j++].n;
        n->val = jv_str(NULL, 0);
        if (total) {
            jv_free(n->val);
            n->val = jv_str(t->s, total > t->n ? 0 : t->n);
            if (!jv_oom(n->val) && total > t->n) {
                jv_free(n->val);
                char *buf = malloc(total);
                if (!buf)
                    return oom(p), NULL;
                size_t o = 0;
                for (size_t k = p->i; k < j; k++) {
                    memcpy(buf + o, p->tk[k].s, p->tk[k].n);
                    o += p->tk[k].n;
                }
                n->val = jv_str(buf, total);
                free(buf);
            }
        }
        if (jv_oom(n->val))
            return oom(p), NULL;
        p->i = j;
        break;
    }
    case JT_INT:
    case JT_FLOAT:
        n = node(p, JN_CONST, t->line);
        if (!n)
            return oom(p), NULL;
        n->val = t->t == JT_INT ? jv_int(t->i) : jv_float(t->f);
        p->i++;
        break;
    case JT_OP:
        if (is_op(p, "(")) {
            p->i++;
            if (is_op(p, ")")) { /* () : an empty tuple, shown as a list */
                p->i++;
                n = node(p, JN_LIST, t->line);
                if (!n)
                    return oom(p), NULL;
                n->op = 1; /* a tuple */
                break;
            }
            n = expr(p);
            if (!n)
                return NULL;
            if (is_op(p, ",")) {
                jnode *l = node(p, JN_LIST, t->line);
                if (!l || kid(l, n))
                    return oom(p), NULL;
                l->op = 1; /* a tuple */
                p->i++;
                if (items_until(p, l, ")"))
                    return NULL;
                n = l;
            } else if (expect_op(p, ")")) {
                return NULL;
            }
            break;
        }
        if (is_op(p, "[")) {
            p->i++;
            n = node(p, JN_LIST, t->line);
            if (!n)
                return oom(p), NULL;
            if (items_until(p, n, "]"))
                return NULL;
            break;
        }
        if (is_op(p, "{")) {
            p->i++;
            n = node(p, JN_DICT, t->line);
            if (!n)
                return oom(p), NULL;
            while (!is_op(p, "}")) {
                jnode *k = expr(p);
                if (!k || expect_op(p, ":"))
                    return NULL;
                jnode *v = expr(p);
                if (!v || kid(n, k) || kid(n, v))
                    return v ? (oom(p), NULL) : NULL;
                if (!is_op(p, ","))
                    break;
                p->i++;
            }
            if (expect_op(p, "}"))
                return NULL;
            break;
        }
        /* fall through */
    default:
        unexpected(p, "an expression");
        return NULL;
    }
    p->depth--;
    return n;
}

/* callee(args...) at '(' */
static jnode *call(P *p, jnode *callee, int line)
{
    jnode *c = node(p, JN_CALL, line);
    if (!c || kid(c, callee))
        return oom(p), NULL;
    return call_args(p, c) ? NULL : c;
}

static jnode *postfix(P *p, jnode *n)
{
    for (;;) {
        int line = cur(p)->line;
        if (is_op(p, ".")) {
            p->i++;
            jtok *t = cur(p);
            if (t->t == JT_NAME) {
                jnode *a = node(p, JN_ATTR, line);
                if (!a || kid(a, n))
                    return oom(p), NULL;
                a->s = t->s;
                a->n = t->n;
                n = a;
            } else if (t->t == JT_INT) {
                jnode *a = node(p, JN_ITEM, line), *c = node(p, JN_CONST, line);
                if (!a || !c || kid(a, n) || kid(a, c))
                    return oom(p), NULL;
                c->val = jv_int(t->i);
                n = a;
            } else {
                fail(p, "expected an attribute name after '.'", NULL);
                return NULL;
            }
            p->i++;
        } else if (is_op(p, "[")) {
            p->i++;
            jnode *parts[3] = {NULL, NULL, NULL};
            int is_slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(p, ":") && !is_op(p, "]")) {
                    if (!(parts[k] = expr(p)))
                        return NULL;
                }
                if (is_op(p, ":") && k < 2) {
                    is_slice = 1;
                    p->i++;
                    continue;
                }
                break;
            }
            if (expect_op(p, "]"))
                return NULL;
            jnode *s = node(p, is_slice ? JN_SLICE : JN_ITEM, line);
            if (!s || kid(s, n))
                return oom(p), NULL;
            if (!is_slice && !parts[0]) {
                fail(p, "empty subscript", NULL);
                return NULL;
            }
            for (int k = 0; k < (is_slice ? 3 : 1); k++)
                if (kid(s, parts[k]))
                    return oom(p), NULL;
            n = s;
        } else if (is_op(p, "(")) {
            if (!(n = call(p, n, line)))
                return NULL;
        } else {
            return n;
        }
    }
}

/* a dotted filter or test name */
static int qual_name(P *p, const char **s, size_t *n)
{
    jtok *t = cur(p);
    if (t->t != JT_NAME)
        return fail(p, "expected a filter or test name", NULL);
    *s = t->s;
    *n = t->n;
    p->i++;
    if (is_op(p, ".") && p->i + 1 < p->n && p->tk[p->i + 1].t == JT_NAME)
        return fail(p, "dotted filter and test names are not supported", NULL);
    return 0;
}

static jnode *filters_tests(P *p, jnode *n)
{
    for (;;) {
        int line = cur(p)->line;
        if (is_op(p, "|")) {
            p->i++;
            jnode *f = node(p, JN_FILTER, line);
            if (!f || kid(f, n))
                return oom(p), NULL;
            if (qual_name(p, &f->s, &f->n))
                return NULL;
            if (!jj_filter_known(f->s, f->n)) {
                char nm[64];
                snprintf(nm, sizeof nm, "%.*s", (int)(f->n > 60 ? 60 : f->n), f->s);
                fail(p, "unknown filter '", nm);
                return NULL;
            }
            if (is_op(p, "(") && call_args(p, f))
                return NULL;
            n = f;
        } else if (is_name(p, "is")) {
            p->i++;
            jnode *tn = node(p, JN_TEST, line);
            if (!tn || kid(tn, n))
                return oom(p), NULL;
            if (is_name(p, "not")) {
                tn->op = 1;
                p->i++;
            }
            if (qual_name(p, &tn->s, &tn->n))
                return NULL;
            if (!jj_test_known(tn->s, tn->n)) {
                char nm[64];
                snprintf(nm, sizeof nm, "%.*s", (int)(tn->n > 60 ? 60 : tn->n), tn->s);
                fail(p, "unknown test '", nm);
                return NULL;
            }
            jtok *t = cur(p);
            if (is_op(p, "(")) {
                if (call_args(p, tn))
                    return NULL;
            } else if ((t->t == JT_NAME || t->t == JT_STRING || t->t == JT_INT || t->t == JT_FLOAT ||
                        is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and") && !is_name(p, "is") &&
                       !is_name(p, "if") && !is_name(p, "in") && !is_name(p, "not")) {
                jnode *a = primary(p);
                if (!a || !(a = postfix(p, a)) || kid(tn, a))
                    return a ? (oom(p), NULL) : NULL;
            }
            n = tn;
        } else if (is_op(p, "(")) {
            if (!(n = call(p, n, line)))
                return NULL;
        } else {
            return n;
        }
    }
}

static jnode *unary(P *p, int with_filter)
{
    int line = cur(p)->line;
    jnode *n;
    if (++p->depth > JJ_MAX_DEPTH) {
        fail(p, "expression nested too deeply", NULL);
        return NULL;
    }
    if (is_op(p, "-") || is_op(p, "+")) {
        int neg = is_op(p, "-");
        p->i++;
        jnode *o = unary(p, 0);
        if (!o)
            return NULL;
        n = node(p, neg ? JN_NEG : JN_POS, line);
        if (!n || kid(n, o))
            return oom(p), NULL;
    } else {
        n = primary(p);
        if (!n || !(n = postfix(p, n)))
            return NULL;
    }
    if (with_filter && !(n = filters_tests(p, n)))
        return NULL;
    p->depth--;
    return n;
}

static jnode *bin(P *p, jn_type t, int op, jnode *l, jnode *r, int line)
{
    jnode *n = node(p, t, line);
    if (!n || kid(n, l) || kid(n, r))
        return oom(p), NULL;
    n->op = op;
    return n;
}

/* The binary operator levels, loosest first (Jinja2's math1, concat, math2, pow); each is
 * left-associative, ** included, as Jinja2 parses it. */
static const struct {
    const char *op[4];
    int code[4];
} LEVELS[] = {
    {{"+", "-"}, {OP_ADD, OP_SUB}},
    {{"~"}, {OP_CAT}},
    {{"*", "/", "//", "%"}, {OP_MUL, OP_DIV, OP_FDIV, OP_MOD}},
    {{"**"}, {OP_POW}},
};

static jnode *binary(P *p, size_t level)
{
    if (level == sizeof LEVELS / sizeof LEVELS[0])
        return unary(p, 1);
    jnode *l = binary(p, level + 1);
    while (l) {
        int op = 0;
        for (size_t k = 0; k < 4 && LEVELS[level].op[k] && !op; k++)
            if (is_op(p, LEVELS[level].op[k]))
                op = LEVELS[level].code[k];
        if (!op)
            break;
        int line = cur(p)->line;
        p->i++;
        jnode *r = binary(p, level + 1);
        l = r ? bin(p, JN_BIN, op, l, r, line) : NULL;
    }
    return l;
}

static jnode *math1(P *p) { return binary(p, 0); }

/* a < b < c: a JN_CMP node with kid operands and per-link operators in ops (kept in the
 * node's op as a chain: we store links as nested CMP with op and an AND-like chain) */
static jnode *compare(P *p)
{
    jnode *l = math1(p);
    if (!l)
        return NULL;
    jnode *chain = NULL;
    for (;;) {
        int op = is_op(p, "==") ? OP_EQ : is_op(p, "!=") ? OP_NE : is_op(p, "<=") ? OP_LE
                 : is_op(p, ">=") ? OP_GE : is_op(p, "<") ? OP_LT : is_op(p, ">") ? OP_GT
                 : is_name(p, "in") ? OP_IN : (is_name(p, "not") && is_name_at(p, 1, "in")) ? OP_NOTIN : 0;
        if (!op)
            break;
        int line = cur(p)->line;
        p->i += op == OP_NOTIN ? 2 : 1;
        jnode *r = math1(p);
        if (!r)
            return NULL;
        if (!chain) {
            chain = node(p, JN_CMP, line);
            if (!chain || kid(chain, l))
                return oom(p), NULL;
        }
        /* each further operand is a JN_KWARG-free link: a JN_CONST holding the operator */
        jnode *opn = node(p, JN_CONST, line);
        if (!opn || kid(chain, opn) || kid(chain, r))
            return oom(p), NULL;
        opn->val = jv_int(op);
    }
    return chain ? chain : l;
}

static jnode *not_expr(P *p)
{
    if (is_name(p, "not")) {
        int line = cur(p)->line;
        p->i++;
        if (++p->depth > JJ_MAX_DEPTH) {
            fail(p, "expression nested too deeply", NULL);
            return NULL;
        }
        jnode *o = not_expr(p);
        p->depth--;
        if (!o)
            return NULL;
        jnode *n = node(p, JN_NOT, line);
        if (!n || kid(n, o))
            return oom(p), NULL;
        return n;
    }
    return compare(p);
}

static jnode *and_expr(P *p)
{
    jnode *l = not_expr(p);
    while (l && is_name(p, "and")) {
        int line = cur(p)->line;
        p->i++;
        jnode *r = not_expr(p);
        l = r ? bin(p, JN_AND, 0, l, r, line) : NULL;
    }
    return l;
}

static jnode *or_expr(P *p)
{
    jnode *l = and_expr(p);
    while (l && is_name(p, "or")) {
        int line = cur(p)->line;
        p->i++;
        jnode *r = and_expr(p);
        l = r ? bin(p, JN_OR, 0, l, r, line) : NULL;
    }
    return l;
}

static jnode *expr_nocond(P *p) { return or_expr(p); }

static jnode *expr(P *p)
{
    if (++p->depth > JJ_MAX_DEPTH) {
        fail(p, "expression nested too deeply", NULL);
        return NULL;
    }
    jnode *n = or_expr(p);
    while (n && is_name(p, "if")) {
        int line = cur(p)->line;
        p->i++;
        jnode *c = or_expr(p);
        if (!c)
            return NULL;
        jnode *e = NULL;
        if (is_name(p, "else")) {
            p->i++;
            if (!(e = expr(p)))
                return NULL;
        }
        jnode *cn = node(p, JN_COND, line);
        if (!cn || kid(cn, c) || kid(cn, n) || kid(cn, e))
            return oom(p), NULL;
        n = cn;
    }
    p->depth--;
    return n;
}

/* ---- statements ---- */

static jnode *body(P *p, const char *const *stops, const char **stopped);

static int end_tag(P *p)
{
    if (cur(p)->t != JT_BLOCK_END)
        return unexpected(p, "'%}'");
    p->i++;
    return 0;
}

static int name_tok(P *p, jnode **out)
{
    jtok *t = cur(p);
    if (t->t != JT_NAME)
        return fail(p, "expected a name", NULL);
    jnode *n = node(p, JN_NAME, t->line);
    if (!n)
        return oom(p);
    n->s = t->s;
    n->n = t->n;
    p->i++;
    *out = n;
    return 0;
}

static jnode *stmt_for(P *p, int line)
{
    jnode *f = node(p, JN_FOR, line), *tg = node(p, JN_LIST, line);
    if (!f || !tg || kid(f, tg))
        return oom(p), NULL;
    for (;;) {
        jnode *nm;
        if (name_tok(p, &nm) || kid(tg, nm))
            return NULL;
        if (!is_op(p, ","))
            break;
        p->i++;
    }
    if (!is_name(p, "in")) {
        fail(p, "expected 'in' in the for tag", NULL);
        return NULL;
    }
    p->i++;
    jnode *it = expr_nocond(p);
    if (!it || kid(f, it))
        return it ? (oom(p), NULL) : NULL;
    jnode *cond = NULL;
    if (is_name(p, "if")) {
        p->i++;
        if (!(cond = expr_nocond(p)))
            return NULL;
    }
    if (is_name(p, "recursive")) {
        fail(p, "recursive for loops are not supported", NULL);
        return NULL;
    }
    if (end_tag(p))
        return NULL;
    static const char *const stops[] = {"endfor", "else", NULL};
    const char *st;
    jnode *b = body(p, stops, &st);
    if (!b || kid(f, b))
        return b ? (oom(p), NULL) : NULL;
    jnode *eb = NULL;
    if (!strcmp(st, "else")) {
        static const char *const stops2[] = {"endfor", NULL};
        if (!(eb = body(p, stops2, &st)))
            return NULL;
    }
    if (kid(f, eb) || kid(f, cond))
        return oom(p), NULL;
    return f;
}

static jnode *stmt_if(P *p, int line)
{
    jnode *n = node(p, JN_IF, line);
    if (!n)
        return oom(p), NULL;
    for (;;) {
        jnode *c = expr(p);
        if (!c || end_tag(p) || kid(n, c))
            return NULL;
        static const char *const stops[] = {"endif", "elif", "else", NULL};
        const char *st;
        jnode *b = body(p, stops, &st);
        if (!b || kid(n, b))
            return NULL;
        if (!strcmp(st, "elif"))
            continue;
        if (!strcmp(st, "else")) {
            static const char *const stops2[] = {"endif", NULL};
            jnode *eb = body(p, stops2, &st);
            if (!eb || kid(n, eb))
                return NULL;
        }
        return n;
    }
}

static jnode *stmt_set(P *p, int line)
{
    jnode *tgt;
    if (name_tok(p, &tgt))
        return NULL;
    if (is_op(p, ".")) {
        p->i++;
        jtok *t = cur(p);
        if (t->t != JT_NAME) {
            fail(p, "expected an attribute name in set", NULL);
            return NULL;
        }
        jnode *a = node(p, JN_ATTR, line);
        if (!a || kid(a, tgt))
            return oom(p), NULL;
        a->s = t->s;
        a->n = t->n;
        p->i++;
        tgt = a;
    }
    if (is_op(p, ",")) {
        fail(p, "tuple assignment in set is not supported", NULL);
        return NULL;
    }
    if (is_op(p, "=")) {
        p->i++;
        jnode *v = expr(p);
        if (!v || end_tag(p))
            return NULL;
        jnode *n = node(p, JN_SET, line);
        if (!n || kid(n, tgt) || kid(n, v))
            return oom(p), NULL;
        return n;
    }
    if (tgt->t != JN_NAME) {
        fail(p, "a set block needs a plain name", NULL);
        return NULL;
    }
    if (is_op(p, "|")) {
        fail(p, "filters on a set block are not supported", NULL);
        return NULL;
    }
    if (end_tag(p))
        return NULL;
    static const char *const stops[] = {"endset", NULL};
    const char *st;
    jnode *b = body(p, stops, &st);
    jnode *n = node(p, JN_SET_BLOCK, line);
    if (!b || !n || kid(n, tgt) || kid(n, b))
        return b ? (oom(p), NULL) : NULL;
    return n;
}

static jnode *stmt_macro(P *p, int line)
{
    jnode *m = node(p, JN_MACRO, line);
    jtok *t = cur(p);
    if (!m)
        return oom(p), NULL;
    if (t->t != JT_NAME) {
        fail(p, "expected the macro's name", NULL);
        return NULL;
    }
    m->s = t->s;
    m->n = t->n;
    p->i++;
    if (expect_op(p, "("))
        return NULL;
    jnode *params[64];
    size_t np = 0;
    while (!is_op(p, ")")) {
        jnode *nm;
        if (np == 64) {
            fail(p, "a macro has at most 64 parameters", NULL);
            return NULL;
        }
        if (name_tok(p, &nm))
            return NULL;
        if (is_op(p, "=")) {
            p->i++;
            jnode *kw = node(p, JN_KWARG, nm->line), *v = expr(p);
            if (!v)
                return NULL;
            if (!kw || kid(kw, v))
                return oom(p), NULL;
            kw->s = nm->s;
            kw->n = nm->n;
            nm = kw;
        }
        params[np++] = nm;
        if (!is_op(p, ","))
            break;
        p->i++;
    }
    if (expect_op(p, ")") || end_tag(p))
        return NULL;
    static const char *const stops[] = {"endmacro", NULL};
    const char *st;
    jnode *b = body(p, stops, &st);
    if (!b || kid(m, b))
        return b ? (oom(p), NULL) : NULL;
    for (size_t i = 0; i < np; i++)
        if (kid(m, params[i]))
            return oom(p), NULL;
    return m;
}

/* A body up to one of stops (consumed with its tag); *stopped names it. stops NULL: the
 * whole template. */
static jnode *body(P *p, const char *const *stops, const char **stopped)
{
    jnode *b = node(p, JN_BODY, cur(p)->line);
    if (!b)
        return oom(p), NULL;
    if (++p->depth > JJ_MAX_DEPTH) {
        fail(p, "blocks nested too deeply", NULL);
        return NULL;
    }
    int open_line = p->i ? p->tk[p->i - 1].line : 1;
    for (;;) {
        jtok *t = cur(p);
        if (t->t == JT_EOF) {
            if (stops) {
                if (!p->err->code)
                    lq_err_set(p->err, LQ_EINVAL,
                               "template line %d: block opened here is never closed (expected '{%% %s %%}')",
                               open_line, stops[0]);
                return NULL;
            }
            p->depth--;
            return b;
        }
        jnode *s = NULL;
        if (t->t == JT_TEXT) {
            s = node(p, JN_TEXT, t->line);
            if (!s)
                return oom(p), NULL;
            s->s = t->s;
            s->n = t->n;
            p->i++;
        } else if (t->t == JT_VAR_BEGIN) {
            p->i++;
            jnode *e = expr(p);
            if (!e)
                return NULL;
            if (cur(p)->t != JT_VAR_END) {
                fail(p, "expected '}}' after the expression", NULL);
                return NULL;
            }
            p->i++;
            s = node(p, JN_OUTPUT, t->line);
            if (!s || kid(s, e))
                return oom(p), NULL;
        } else if (t->t == JT_BLOCK_BEGIN) {
            p->i++;
            jtok *kw = cur(p);
            int line = kw->line;
            if (kw->t != JT_NAME) {
                fail(p, "expected a tag name after '{%'", NULL);
                return NULL;
            }
            if (stops) {
                for (size_t k = 0; stops[k]; k++) {
                    if (is_name(p, stops[k])) {
                        *stopped = stops[k];
                        p->i++;
                        /* elif carries its condition; the caller parses it */
                        if (strcmp(stops[k], "elif") && end_tag(p))
                            return NULL;
                        p->depth--;
                        return b;
                    }
                }
            }
            p->i++;
            if (kw->n == 3 && !memcmp(kw->s, "for", 3))
                s = stmt_for(p, line);
            else if (kw->n == 2 && !memcmp(kw->s, "if", 2))
                s = stmt_if(p, line);
            else if (kw->n == 3 && !memcmp(kw->s, "set", 3))
                s = stmt_set(p, line);
            else if (kw->n == 5 && !memcmp(kw->s, "macro", 5))
                s = stmt_macro(p, line);
            else if ((kw->n == 5 && !memcmp(kw->s, "break", 5)) || (kw->n == 8 && !memcmp(kw->s, "continue", 8))) {
                s = node(p, kw->n == 5 ? JN_BREAK : JN_CONTINUE, line);
                if (!s)
                    return oom(p), NULL;
                if (end_tag(p))
                    return NULL;
            } else if (kw->n == 6 && !memcmp(kw->s, "filter", 6)) {
                /* {% filter f(args) | g %}body{% endfilter %}: the filters applied to the body's
                 * text, which the chain reads from a name no template can spell */
                jnode *in = node(p, JN_NAME, line), *f;
                if (!in)
                    return oom(p), NULL;
                in->s = " filter body";
                in->n = 12;
                if (cur(p)->t != JT_NAME) {
                    fail(p, "expected a filter name", NULL);
                    return NULL;
                }
                p->i--; /* re-read the name as if after '|' */
                p->tk[p->i].t = JT_OP;
                p->tk[p->i].s = "|";
                p->tk[p->i].n = 1;
                if (!(f = filters_tests(p, in)))
                    return NULL;
                static const char *const fstops[] = {"endfilter", NULL};
                const char *st;
                jnode *fb;
                if (end_tag(p) || !(fb = body(p, fstops, &st)))
                    return NULL;
                s = node(p, JN_FILTER_BLOCK, line);
                if (!s || kid(s, f) || kid(s, fb))
                    return oom(p), NULL;
            } else if (kw->n == 10 && !memcmp(kw->s, "generation", 10)) {
                /* transformers' {% generation %}: marks assistant text; renders its body */
                static const char *const gstops[] = {"endgeneration", NULL};
                const char *st;
                if (end_tag(p) || !(s = body(p, gstops, &st)))
                    return NULL;
            } else {
                char nm[64];
                snprintf(nm, sizeof nm, "%.*s", (int)(kw->n > 60 ? 60 : kw->n), kw->s);
                p->i--;
                if (!p->err->code)
                    lq_err_set(p->err, LQ_EINVAL, "template line %d: %s tag '%s'", line,
                               (!strncmp(nm, "end", 3) || !strcmp(nm, "else") || !strcmp(nm, "elif"))
                                   ? "unexpected"
                                   : "unknown (not supported)",
                               nm);
                return NULL;
            }
            if (!s)
                return NULL;
        } else {
            fail(p, "unexpected token", NULL);
            return NULL;
        }
        if (kid(b, s))
            return oom(p), NULL;
    }
}

int jj_parse(jtemplate *t, lq_err *err)
{
    P p = {.t = t, .tk = t->lx.t, .n = t->lx.n, .err = err};
    const char *st = NULL;
    t->root = body(&p, NULL, &st);
    if (!t->root)
        return err->code ? err->code : LQ_EINVAL;
    return 0;
}
