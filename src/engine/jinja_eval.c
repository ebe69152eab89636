/* Jinja evaluator: walks the AST with Python's value semantics (what Jinja2 compiles a
 * template to). Scopes: the template's top level, a fresh scope per for-loop iteration
 * (assignments inside a loop do not survive the iteration, as in Jinja2 >= 2.9) and per
 * macro call; namespace() objects are shared by reference, which is how templates carry
 * state out of loops. Every node evaluated and every loop iteration counts a step; steps,
 * output bytes and macro depth are bounded, since a template comes from a model file. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"

struct jframe {
    jframe *parent;
    jv vars; /* a dict */
};

int jj_fail(jctx *c, int line, const char *fmt, ...)
{
    if (!c->failed) {
        char m[LQ_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        lq_err_set(c->err, LQ_EINVAL, "template line %d: %s", line, m);
        c->failed = 1;
    }
    return -1;
}

static int oom(jctx *c, int line)
{
    if (!c->failed) {
        if (jj_budget_spent())
            lq_err_set(c->err, LQ_EINVAL, "template line %d: the template built more than %zu MiB of values",
                       line, (size_t)JJ_MAX_WORK >> 20);
        else
            lq_err_set(c->err, LQ_ENOMEM, "template line %d: out of memory (or a value over the size or nesting "
                       "bound)", line);
        c->failed = 1;
    }
    return -1;
}

static int step(jctx *c, int line)
{
    if (++c->steps > JJ_MAX_STEPS)
        return jj_fail(c, line, "the template ran for more than %llu steps (a runaway loop?)",
                       (unsigned long long)JJ_MAX_STEPS);
    return 0;
}

static jv *lookup(jctx *c, const char *s, size_t n)
{
    for (jframe *f = c->top; f; f = f->parent) {
        jv *v = jd_get(f->vars.u.d, s, n);
        if (v)
            return v;
    }
    return NULL;
}

static int nameis(const char *s, size_t n, const char *lit) { return n == strlen(lit) && !memcmp(s, lit, n); }

static int eval(jctx *c, const jnode *n, jv *out);
static int exec_body(jctx *c, const jnode *b);

static jv global_fn(const char *s, size_t n)
{
    if (nameis(s, n, "range"))
        return jv_func(JF_RANGE, NULL);
    if (nameis(s, n, "namespace"))
        return jv_func(JF_NAMESPACE, NULL);
    if (nameis(s, n, "raise_exception"))
        return jv_func(JF_RAISE, NULL);
    if (nameis(s, n, "strftime_now"))
        return jv_func(JF_STRFTIME, NULL);
    if (nameis(s, n, "dict"))
        return jv_func(JF_DICT, NULL);
    return jv_undef();
}

jv jj_getattr(jv obj, const char *name, size_t n)
{
    if (obj.t == JV_DICT) {
        jv *v = jd_get(obj.u.d, name, n);
        return v ? jv_ref(*v) : jv_undef();
    }
    return jv_undef();
}

static int is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.u.i : v.u.b; }
static int is_num(jv v) { return is_intlike(v) || v.t == JV_FLOAT; }
static double fval(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)ival(v); }

static int index_of(jctx *c, int line, jv obj, jv key, jv *out)
{
    if (obj.t == JV_UNDEF)
        return jj_fail(c, line, "cannot subscript an undefined value");
    if (obj.t == JV_DICT) {
        if (key.t == JV_STR) {
            jv *v = jd_get(obj.u.d, key.u.s->s, key.u.s->n);
            *out = v ? jv_ref(*v) : jv_undef();
            return 0;
        }
        *out = jv_undef();
        return 0;
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && is_intlike(key)) {
        int64_t i = ival(key);
        size_t len = obj.t == JV_LIST ? obj.u.l->n : jj_utf8_len(obj.u.s->s, obj.u.s->n);
        if (i < 0)
            i += (int64_t)len;
        if (i < 0 || (uint64_t)i >= len) {
            *out = jv_undef();
            return 0;
        }
        if (obj.t == JV_LIST) {
            *out = jv_ref(obj.u.l->v[i]);
        } else {
            size_t a = jj_utf8_off(obj.u.s->s, obj.u.s->n, (size_t)i);
            size_t e = jj_utf8_off(obj.u.s->s, obj.u.s->n, (size_t)i + 1);
            *out = jv_str(obj.u.s->s + a, e - a);
        }
        return jv_oom(*out) ? oom(c, line) : 0;
    }
    if (key.t == JV_STR) { /* x['name'] falls back to the attribute, as Jinja's getitem does */
        *out = jj_getattr(obj, key.u.s->s, key.u.s->n);
        return 0;
    }
    *out = jv_undef();
    return 0;
}

/* Python slice semantics for lists and strings (by code point). */
static int slice_of(jctx *c, int line, jv obj, jv a, jv b, jv s, jv *out)
{
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return jj_fail(c, line, "cannot slice a %s", jv_type_name(obj));
    for (int k = 0; k < 3; k++) {
        jv x = k == 0 ? a : k == 1 ? b : s;
        if (x.t != JV_UNDEF && x.t != JV_NONE && !is_intlike(x))
            return jj_fail(c, line, "slice indices must be integers");
    }
    int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)jj_utf8_len(obj.u.s->s, obj.u.s->n);
    int64_t st = (s.t == JV_UNDEF || s.t == JV_NONE) ? 1 : ival(s);
    if (st == 0)
        return jj_fail(c, line, "slice step cannot be zero");
    int64_t lo, hi;
    if (st > 0) {
        lo = (a.t == JV_UNDEF || a.t == JV_NONE) ? 0 : ival(a);
        hi = (b.t == JV_UNDEF || b.t == JV_NONE) ? len : ival(b);
        if (lo < 0) lo += len;
        if (hi < 0) hi += len;
        if (lo < 0) lo = 0;
        if (hi > len) hi = len;
        if (lo > len) lo = len;
        if (hi < 0) hi = 0;
    } else {
        lo = (a.t == JV_UNDEF || a.t == JV_NONE) ? len - 1 : ival(a);
        hi = (b.t == JV_UNDEF || b.t == JV_NONE) ? -1 : ival(b);
        if (a.t != JV_UNDEF && a.t != JV_NONE) {
            if (lo < 0) lo += len;
            if (lo < -1) lo = -1;
            if (lo >= len) lo = len - 1;
        }
        if (b.t != JV_UNDEF && b.t != JV_NONE) {
            if (hi < 0) hi += len;
            if (hi < -1) hi = -1;
            if (hi >= len) hi = len - 1;
        }
    }
    if (obj.t == JV_LIST) {
        jv l = jv_list();
        if (jv_oom(l))
            return oom(c, line);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
            if (jl_push(l.u.l, jv_ref(obj.u.l->v[i]))) {
                jv_free(l);
                return oom(c, line);
            }
        *out = l;
        return 0;
    }
    lq_sb sb = {0};
    const char *s0 = obj.u.s->s;
    size_t n0 = obj.u.s->n;
    if (st == 1) {
        size_t x = jj_utf8_off(s0, n0, (size_t)lo), y = lo < hi ? jj_utf8_off(s0, n0, (size_t)hi) : x;
        lq_sb_put(&sb, s0 + x, y - x);
    } else {
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
            size_t x = jj_utf8_off(s0, n0, (size_t)i), y = jj_utf8_off(s0, n0, (size_t)i + 1);
            lq_sb_put(&sb, s0 + x, y - x);
        }
    }
    if (sb.oom)
        return lq_sb_free(&sb), oom(c, line);
    *out = jv_str(sb.s ? sb.s : "", sb.n);
    lq_sb_free(&sb);
    return jv_oom(*out) ? oom(c, line) : 0;
}

static int contains(jctx *c, int line, jv hay, jv needle, int *res)
{
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR)
            return jj_fail(c, line, "'in <string>' requires a string on the left, not %s", jv_type_name(needle));
        *res = needle.u.s->n == 0 || memmem(hay.u.s->s, hay.u.s->n, needle.u.s->s, needle.u.s->n) != NULL;
        return 0;
    }
    if (hay.t == JV_LIST) {
        *res = 0;
        for (size_t i = 0; i < hay.u.l->n && !*res; i++)
            *res = jv_equal(hay.u.l->v[i], needle);
        return 0;
    }
    if (hay.t == JV_DICT) {
        *res = needle.t == JV_STR && jd_get(hay.u.d, needle.u.s->s, needle.u.s->n) != NULL;
        return 0;
    }
    if (hay.t == JV_UNDEF) {
        *res = 0;
        return 0;
    }
    return jj_fail(c, line, "'in' needs a string, list or mapping on the right, not %s", jv_type_name(hay));
}

static int cmp_order(jctx *c, int line, jv a, jv b, int *res)
{
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b))
            *res = (ival(a) > ival(b)) - (ival(a) < ival(b));
        else
            *res = (fval(a) > fval(b)) - (fval(a) < fval(b));
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        *res = r ? (r > 0) - (r < 0) : (a.u.s->n > b.u.s->n) - (a.u.s->n < b.u.s->n);
        return 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return cmp_order(c, line, a.u.l->v[i], b.u.l->v[i], res);
        }
        *res = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return jj_fail(c, line, "cannot order %s and %s", jv_type_name(a), jv_type_name(b));
}

/* markupsafe.escape() of a plain string joined to a Markup one */
static void put_maybe_escaped(lq_sb *b, jv v, int escape)
{
    if (!escape || v.safe) {
        lq_sb_put(b, v.u.s->s, v.u.s->n);
        return;
    }
    for (size_t i = 0; i < v.u.s->n; i++) {
        char ch = v.u.s->s[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                      : ch == '\'' ? "&#39;" : NULL;
        if (e)
            lq_sb_puts(b, e);
        else
            lq_sb_put(b, &ch, 1);
    }
}

static int binop(jctx *c, int line, int op, jv a, jv b, jv *out)
{
    if (op == OP_CAT) {
        lq_sb sb = {0};
        jv_to_str(&sb, a);
        jv_to_str(&sb, b);
        if (sb.oom || sb.n > JJ_MAX_OUT)
            return lq_sb_free(&sb), oom(c, line);
        *out = jv_str(sb.s ? sb.s : "", sb.n);
        lq_sb_free(&sb);
        return jv_oom(*out) ? oom(c, line) : 0;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return jj_fail(c, line, "an undefined value in arithmetic");
    if (is_num(a) && is_num(b)) {
        int ints = is_intlike(a) && is_intlike(b);
        int64_t x = ints ? ival(a) : 0, y = ints ? ival(b) : 0, r;
        double fx = fval(a), fy = fval(b);
        switch (op) {
        case OP_ADD:
            if (ints) {
                if (__builtin_add_overflow(x, y, &r))
                    return jj_fail(c, line, "integer overflow");
                *out = jv_int(r);
            } else {
                *out = jv_float(fx + fy);
            }
            return 0;
        case OP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &r))
                    return jj_fail(c, line, "integer overflow");
                *out = jv_int(r);
            } else {
                *out = jv_float(fx - fy);
            }
            return 0;
        case OP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &r))
                    return jj_fail(c, line, "integer overflow");
                *out = jv_int(r);
            } else {
                *out = jv_float(fx * fy);
            }
            return 0;
        case OP_DIV:
            if (fy == 0.0)
                return jj_fail(c, line, "division by zero");
            *out = jv_float(fx / fy);
            return 0;
        case OP_FDIV:
        case OP_MOD:
            if (ints) {
                if (y == 0)
                    return jj_fail(c, line, "division by zero");
                if (x == INT64_MIN && y == -1)
                    return jj_fail(c, line, "integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                *out = jv_int(op == OP_FDIV ? q : m);
            } else {
                if (fy == 0.0)
                    return jj_fail(c, line, "division by zero");
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0)))
                    m += fy;
                *out = jv_float(op == OP_FDIV ? floor(fx / fy) : m);
            }
            return 0;
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1;
                for (int64_t k = 0; k < y; k++) {
                    if (__builtin_mul_overflow(acc, x, &acc))
                        return jj_fail(c, line, "integer overflow");
                    if (acc == 0 || acc == 1)
                        break;
                    if (acc == -1 && k > 0) {
                        acc = (y % 2) ? (x < 0 ? -1 : 1) : 1;
                        break;
                    }
                }
                *out = jv_int(acc);
            } else {
                *out = jv_float(pow(fx, fy));
            }
            return 0;
        default: break;
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        /* Markup + str escapes the str (markupsafe), as '"x"|safe + value' does in Jinja2 */
        int safe = a.safe || b.safe;
        lq_sb sb = {0};
        put_maybe_escaped(&sb, a, safe);
        put_maybe_escaped(&sb, b, safe);
        if (sb.oom || sb.n > JJ_MAX_OUT)
            return lq_sb_free(&sb), oom(c, line);
        *out = jv_str(sb.s ? sb.s : "", sb.n);
        out->safe = (unsigned char)safe;
        lq_sb_free(&sb);
        return jv_oom(*out) ? oom(c, line) : 0;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        jv l = jv_list();
        if (jv_oom(l))
            return oom(c, line);
        for (size_t i = 0; i < a.u.l->n; i++)
            if (jl_push(l.u.l, jv_ref(a.u.l->v[i])))
                return jv_free(l), oom(c, line);
        for (size_t i = 0; i < b.u.l->n; i++)
            if (jl_push(l.u.l, jv_ref(b.u.l->v[i])))
                return jv_free(l), oom(c, line);
        *out = l;
        return 0;
    }
    if (op == OP_MUL && ((a.t == JV_STR || a.t == JV_LIST) && is_intlike(b))) {
        int64_t k = ival(b);
        if (k < 0)
            k = 0;
        if (a.t == JV_STR) {
            if (a.u.s->n && (uint64_t)k > JJ_MAX_OUT / a.u.s->n)
                return oom(c, line);
            lq_sb sb = {0};
            for (int64_t i = 0; i < k; i++)
                lq_sb_put(&sb, a.u.s->s, a.u.s->n);
            if (sb.oom)
                return lq_sb_free(&sb), oom(c, line);
            *out = jv_str(sb.s ? sb.s : "", sb.n);
            lq_sb_free(&sb);
            return jv_oom(*out) ? oom(c, line) : 0;
        }
        if (a.u.l->n && (uint64_t)k > JJ_MAX_ITEMS / a.u.l->n)
            return oom(c, line);
        jv l = jv_list();
        if (jv_oom(l))
            return oom(c, line);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++)
                if (jl_push(l.u.l, jv_ref(a.u.l->v[j])))
                    return jv_free(l), oom(c, line);
        *out = l;
        return 0;
    }
    if (op == OP_MUL && is_intlike(a) && (b.t == JV_STR || b.t == JV_LIST))
        return binop(c, line, op, b, a, out);
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    return jj_fail(c, line, "unsupported operand types for %s: %s and %s", op <= OP_POW ? names[op] : "?",
                   jv_type_name(a), jv_type_name(b));
}

static void free_args(jarg *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        jv_free(a[i].v);
    free(a);
}

/* evaluates kid[from..] of n as call arguments */
static int eval_args(jctx *c, const jnode *n, size_t from, jarg **out, size_t *nout)
{
    size_t na = n->nkid > from ? n->nkid - from : 0;
    jarg *a = calloc(na ? na : 1, sizeof *a);
    if (!a)
        return oom(c, n->line);
    for (size_t i = 0; i < na; i++) {
        const jnode *k = n->kid[from + i];
        if (k->t == JN_KWARG) {
            a[i].name = k->s;
            a[i].nn = k->n;
            k = k->kid[0];
        }
        if (eval(c, k, &a[i].v)) {
            free_args(a, i);
            return -1;
        }
    }
    *out = a;
    *nout = na;
    return 0;
}

static int call_macro(jctx *c, int line, const jnode *m, jarg *args, size_t na, jv *out)
{
    if (c->depth >= JJ_MAX_DEPTH)
        return jj_fail(c, line, "macro calls nested more than %d deep", JJ_MAX_DEPTH);
    size_t np = m->nkid - 1;
    jframe f = {.parent = c->root, .vars = jv_dict()};
    if (jv_oom(f.vars))
        return oom(c, line);
    size_t pos = 0;
    int rc = 0;
    for (size_t i = 0; i < na && !rc; i++) {
        if (args[i].name) {
            size_t k = 0;
            for (; k < np; k++)
                if (m->kid[1 + k]->n == args[i].nn && !memcmp(m->kid[1 + k]->s, args[i].name, args[i].nn))
                    break;
            if (k == np)
                rc = jj_fail(c, line, "macro '%.*s' has no parameter '%.*s'", (int)m->n, m->s,
                             (int)args[i].nn, args[i].name);
            else if (jd_set(f.vars.u.d, args[i].name, args[i].nn, jv_ref(args[i].v)))
                rc = oom(c, line);
        } else {
            if (pos >= np)
                rc = jj_fail(c, line, "macro '%.*s' takes %zu arguments", (int)m->n, m->s, np);
            else if (jd_set(f.vars.u.d, m->kid[1 + pos]->s, m->kid[1 + pos]->n, jv_ref(args[i].v)))
                rc = oom(c, line);
            pos++;
        }
    }
    jframe *saved = c->top;
    /* the macro's frame is on top only while its body runs; c->top is restored below */
    // cppcheck-suppress autoVariables
    c->top = &f;
    for (size_t k = 0; k < np && !rc; k++) {
        const jnode *pn = m->kid[1 + k];
        if (jd_get(f.vars.u.d, pn->s, pn->n))
            continue;
        jv v = jv_undef();
        if (pn->t == JN_KWARG && eval(c, pn->kid[0], &v))
            rc = -1;
        else if (jd_set(f.vars.u.d, pn->s, pn->n, v))
            rc = oom(c, line);
    }
    lq_sb buf = {0}, *saved_out = c->out;
    if (!rc) {
        c->out = &buf;
        c->depth++;
        rc = exec_body(c, m->kid[0]);
        c->depth--;
        c->out = saved_out;
        if (rc > 0)
            rc = 0; /* a stray break/continue ends the macro */
    }
    c->top = saved;
    jv_free(f.vars);
    if (!rc) {
        if (buf.oom)
            rc = oom(c, line);
        else {
            *out = jv_str(buf.s ? buf.s : "", buf.n);
            if (jv_oom(*out))
                rc = oom(c, line);
        }
    }
    lq_sb_free(&buf);
    return rc;
}

static int eval_call(jctx *c, const jnode *n, jv *out)
{
    const jnode *callee = n->kid[0];
    jarg *args = NULL;
    size_t na = 0;
    if (callee->t == JN_ATTR) {
        jv obj;
        if (eval(c, callee->kid[0], &obj))
            return -1;
        if (obj.t == JV_UNDEF) {
            return jj_fail(c, n->line, "'%.*s' called on an undefined value", (int)callee->n, callee->s);
        }
        if (eval_args(c, n, 1, &args, &na)) {
            jv_free(obj);
            return -1;
        }
        int r = jj_method(c, n->line, obj, callee->s, callee->n, args, na, out);
        if (r == 0) {
            jv f = jj_getattr(obj, callee->s, callee->n);
            if (f.t == JV_FUNC && f.u.fn->macro)
                r = call_macro(c, n->line, f.u.fn->macro, args, na, out) ? -1 : 1;
            else
                r = jj_fail(c, n->line, "'%.*s' is not a supported method of %s", (int)callee->n, callee->s,
                            jv_type_name(obj));
            jv_free(f);
        }
        jv_free(obj);
        free_args(args, na);
        return r < 0 ? -1 : 0;
    }
    jv f;
    if (eval(c, callee, &f))
        return -1;
    if (f.t != JV_FUNC) {
        int r;
        if (callee->t == JN_NAME)
            r = jj_fail(c, n->line, "'%.*s' is %s, not a function", (int)callee->n, callee->s,
                        f.t == JV_UNDEF ? "undefined" : jv_type_name(f));
        else
            r = jj_fail(c, n->line, "a %s is not callable", jv_type_name(f));
        jv_free(f);
        return r;
    }
    if (eval_args(c, n, 1, &args, &na)) {
        jv_free(f);
        return -1;
    }
    int rc = f.u.fn->macro ? call_macro(c, n->line, f.u.fn->macro, args, na, out)
                           : jj_call_builtin(c, n->line, f.u.fn->builtin, args, na, out);
    free_args(args, na);
    jv_free(f);
    return rc;
}

static int eval_node(jctx *c, const jnode *n, jv *out)
{
    *out = jv_undef();
    if (step(c, n->line))
        return -1;
    jv a, b;
    switch (n->t) {
    case JN_CONST:
        *out = jv_ref(n->val);
        return 0;
    case JN_NAME: {
        jv *v = lookup(c, n->s, n->n);
        if (v) {
            *out = jv_ref(*v);
            return 0;
        }
        *out = global_fn(n->s, n->n);
        return jv_oom(*out) ? oom(c, n->line) : 0;
    }
    case JN_ATTR:
        if (eval(c, n->kid[0], &a))
            return -1;
        if (a.t == JV_UNDEF) {
            const jnode *k = n->kid[0];
            if (k->t == JN_NAME)
                return jj_fail(c, n->line, "'%.*s' is undefined (reading .%.*s)", (int)k->n, k->s, (int)n->n,
                               n->s);
            return jj_fail(c, n->line, "reading attribute '%.*s' of an undefined value", (int)n->n, n->s);
        }
        *out = jj_getattr(a, n->s, n->n);
        jv_free(a);
        return 0;
    case JN_ITEM: {
        if (eval(c, n->kid[0], &a))
            return -1;
        if (eval(c, n->kid[1], &b)) {
            jv_free(a);
            return -1;
        }
        int rc = index_of(c, n->line, a, b, out);
        jv_free(a);
        jv_free(b);
        return rc;
    }
    case JN_SLICE: {
        jv p[3] = {jv_undef(), jv_undef(), jv_undef()};
        if (eval(c, n->kid[0], &a))
            return -1;
        int rc = 0;
        for (int k = 0; k < 3 && !rc; k++)
            if (n->kid[1 + k])
                rc = eval(c, n->kid[1 + k], &p[k]);
        if (!rc && a.t == JV_UNDEF)
            rc = jj_fail(c, n->line, "cannot slice an undefined value");
        if (!rc)
            rc = slice_of(c, n->line, a, p[0], p[1], p[2], out);
        for (int k = 0; k < 3; k++)
            jv_free(p[k]);
        jv_free(a);
        return rc;
    }
    case JN_CALL:
        return eval_call(c, n, out);
    case JN_FILTER: {
        jarg *args;
        size_t na;
        if (eval(c, n->kid[0], &a))
            return -1;
        if (eval_args(c, n, 1, &args, &na)) {
            jv_free(a);
            return -1;
        }
        int rc = jj_filter(c, n->line, n->s, n->n, a, args, na, out);
        jv_free(a);
        free_args(args, na);
        return rc;
    }
    case JN_TEST: {
        jarg *args;
        size_t na;
        int res = 0;
        if (eval(c, n->kid[0], &a))
            return -1;
        if (eval_args(c, n, 1, &args, &na)) {
            jv_free(a);
            return -1;
        }
        int rc = jj_test(c, n->line, n->s, n->n, a, args, na, &res);
        jv_free(a);
        free_args(args, na);
        *out = jv_bool(n->op ? !res : res);
        return rc;
    }
    case JN_NOT:
        if (eval(c, n->kid[0], &a))
            return -1;
        *out = jv_bool(!jv_truthy(a));
        jv_free(a);
        return 0;
    case JN_NEG:
    case JN_POS:
        if (eval(c, n->kid[0], &a))
            return -1;
        if (!is_num(a)) {
            int r = jj_fail(c, n->line, "bad operand type for unary %c: %s", n->t == JN_NEG ? '-' : '+',
                            jv_type_name(a));
            jv_free(a);
            return r;
        }
        if (n->t == JN_POS)
            *out = a.t == JV_BOOL ? jv_int(a.u.b) : a;
        else if (a.t == JV_FLOAT)
            *out = jv_float(-a.u.f);
        else if (ival(a) == INT64_MIN)
            return jj_fail(c, n->line, "integer overflow");
        else
            *out = jv_int(-ival(a));
        return 0;
    case JN_BIN: {
        if (eval(c, n->kid[0], &a))
            return -1;
        if (eval(c, n->kid[1], &b)) {
            jv_free(a);
            return -1;
        }
        int rc = binop(c, n->line, n->op, a, b, out);
        jv_free(a);
        jv_free(b);
        return rc;
    }
    case JN_AND:
    case JN_OR:
        if (eval(c, n->kid[0], &a))
            return -1;
        if (jv_truthy(a) == (n->t == JN_OR)) {
            *out = a;
            return 0;
        }
        jv_free(a);
        return eval(c, n->kid[1], out);
    case JN_CMP: {
        if (eval(c, n->kid[0], &a))
            return -1;
        int res = 1;
        for (size_t k = 1; k + 1 < n->nkid && res; k += 2) {
            int op = (int)n->kid[k]->val.u.i;
            if (eval(c, n->kid[k + 1], &b)) {
                jv_free(a);
                return -1;
            }
            int r = 0, rc = 0;
            switch (op) {
            case OP_EQ: res = jv_equal(a, b); break;
            case OP_NE: res = !jv_equal(a, b); break;
            case OP_IN:
            case OP_NOTIN:
                rc = contains(c, n->line, b, a, &r);
                res = op == OP_IN ? r : !r;
                break;
            default:
                rc = cmp_order(c, n->line, a, b, &r);
                res = op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
            }
            jv_free(a);
            a = b;
            if (rc) {
                jv_free(a);
                return -1;
            }
        }
        jv_free(a);
        *out = jv_bool(res);
        return 0;
    }
    case JN_COND:
        if (eval(c, n->kid[0], &a))
            return -1;
        {
            int t = jv_truthy(a);
            jv_free(a);
            if (t)
                return eval(c, n->kid[1], out);
            if (n->kid[2])
                return eval(c, n->kid[2], out);
            *out = jv_undef();
            return 0;
        }
    case JN_LIST: {
        jv l = jv_list();
        if (jv_oom(l))
            return oom(c, n->line);
        l.u.l->tuple = n->op;
        for (size_t k = 0; k < n->nkid; k++) {
            if (eval(c, n->kid[k], &a)) {
                jv_free(l);
                return -1;
            }
            if (jl_push(l.u.l, a)) {
                jv_free(l);
                return oom(c, n->line);
            }
        }
        *out = l;
        return 0;
    }
    case JN_DICT: {
        jv d = jv_dict();
        if (jv_oom(d))
            return oom(c, n->line);
        for (size_t k = 0; k + 1 < n->nkid; k += 2) {
            if (eval(c, n->kid[k], &a)) {
                jv_free(d);
                return -1;
            }
            if (a.t != JV_STR) {
                jv_free(a);
                jv_free(d);
                return jj_fail(c, n->line, "dict keys must be strings here");
            }
            if (eval(c, n->kid[k + 1], &b)) {
                jv_free(a);
                jv_free(d);
                return -1;
            }
            int rc = jd_set(d.u.d, a.u.s->s, a.u.s->n, b);
            jv_free(a);
            if (rc) {
                jv_free(d);
                return oom(c, n->line);
            }
        }
        *out = d;
        return 0;
    }
    default:
        return jj_fail(c, n->line, "internal: statement in expression position");
    }
}

/* eval and exec count their nesting: the C stack a template can make a render use is bounded */
static int eval(jctx *c, const jnode *n, jv *out)
{
    if (++c->recursion > JJ_MAX_RECURSION) {
        c->recursion--;
        *out = jv_undef();
        return jj_fail(c, n->line, "the template nests evaluations more than %d deep", JJ_MAX_RECURSION);
    }
    int rc = eval_node(c, n, out);
    c->recursion--;
    return rc;
}

static int emit(jctx *c, int line, jv v)
{
    if (v.t == JV_LIST && v.u.l->gen)
        return jj_fail(c, line, "printing a generator (Python would print its address; add '| list')");
    jv_to_str(c->out, v);
    if (c->out->oom || c->out->n > JJ_MAX_OUT)
        return jj_fail(c, line, "the output is over %zu bytes", (size_t)JJ_MAX_OUT);
    return 0;
}

static int set_name(jctx *c, int line, const char *s, size_t n, jv v)
{
    if (jd_set(c->top->vars.u.d, s, n, v))
        return oom(c, line);
    return 0;
}

/* the items a for loop walks (a list as it is; a namespace is not iterable) */
static int iter_items(jctx *c, int line, jv it, jv *out)
{
    if (it.t == JV_LIST) {
        *out = jv_ref(it);
        return 0;
    }
    if ((it.t == JV_DICT && it.u.d->ns) || (it.t != JV_DICT && it.t != JV_STR && it.t != JV_UNDEF))
        return jj_fail(c, line, "cannot iterate over %s", jv_type_name(it));
    return jj_as_list(c, line, it, out);
}

static int bind_targets(jctx *c, const jnode *tg, jv item)
{
    if (tg->nkid == 1)
        return set_name(c, tg->line, tg->kid[0]->s, tg->kid[0]->n, jv_ref(item));
    if (item.t != JV_LIST || item.u.l->n != tg->nkid)
        return jj_fail(c, tg->line, "cannot unpack %s into %zu names", jv_type_name(item), tg->nkid);
    for (size_t k = 0; k < tg->nkid; k++)
        if (set_name(c, tg->line, tg->kid[k]->s, tg->kid[k]->n, jv_ref(item.u.l->v[k])))
            return -1;
    return 0;
}

static int loop_dict(jctx *c, int line, jv items, size_t i, jv *out)
{
    size_t n = items.u.l->n;
    jv d = jv_dict();
    if (jv_oom(d))
        return oom(c, line);
    jdict *x = d.u.d;
    int e = jd_set(x, "index", 5, jv_int((int64_t)i + 1)) | jd_set(x, "index0", 6, jv_int((int64_t)i)) |
            jd_set(x, "revindex", 8, jv_int((int64_t)(n - i))) |
            jd_set(x, "revindex0", 9, jv_int((int64_t)(n - i - 1))) | jd_set(x, "first", 5, jv_bool(i == 0)) |
            jd_set(x, "last", 4, jv_bool(i + 1 == n)) | jd_set(x, "length", 6, jv_int((int64_t)n)) |
            jd_set(x, "depth", 5, jv_int(1)) | jd_set(x, "depth0", 6, jv_int(0)) |
            jd_set(x, "previtem", 8, i ? jv_ref(items.u.l->v[i - 1]) : jv_undef()) |
            jd_set(x, "nextitem", 8, i + 1 < n ? jv_ref(items.u.l->v[i + 1]) : jv_undef());
    if (e) {
        jv_free(d);
        return oom(c, line);
    }
    *out = d;
    return 0;
}

static int exec_for(jctx *c, const jnode *n)
{
    const jnode *tg = n->kid[0], *bodyn = n->kid[2], *elseb = n->kid[3], *cond = n->kid[4];
    jv it, items;
    if (eval(c, n->kid[1], &it))
        return -1;
    int rc = iter_items(c, n->line, it, &items);
    jv_free(it);
    if (rc)
        return -1;
    if (cond) { /* "for x in xs if c": filtered first, so loop.length counts what is kept */
        jv kept = jv_list();
        if (jv_oom(kept)) {
            jv_free(items);
            return oom(c, n->line);
        }
        for (size_t i = 0; i < items.u.l->n && !rc; i++) {
            jframe f = {.parent = c->top, .vars = jv_dict()};
            if (jv_oom(f.vars)) {
                rc = oom(c, n->line);
                break;
            }
            c->top = &f;
            jv cv = jv_undef();
            rc = bind_targets(c, tg, items.u.l->v[i]);
            if (!rc)
                rc = eval(c, cond, &cv);
            c->top = f.parent;
            jv_free(f.vars);
            if (!rc && jv_truthy(cv) && jl_push(kept.u.l, jv_ref(items.u.l->v[i])))
                rc = oom(c, n->line);
            jv_free(cv);
        }
        jv_free(items);
        items = kept;
        if (rc) {
            jv_free(items);
            return -1;
        }
    }
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        if (step(c, n->line)) {
            rc = -1;
            break;
        }
        jframe f = {.parent = c->top, .vars = jv_dict()};
        jv lp;
        if (jv_oom(f.vars) || loop_dict(c, n->line, items, i, &lp)) {
            jv_free(f.vars);
            rc = oom(c, n->line);
            break;
        }
        c->top = &f;
        rc = set_name(c, n->line, "loop", 4, lp);
        if (!rc)
            rc = bind_targets(c, tg, items.u.l->v[i]);
        if (!rc)
            rc = exec_body(c, bodyn);
        c->top = f.parent;
        jv_free(f.vars);
        if (rc == 1) { /* break */
            rc = 0;
            break;
        }
        if (rc == 2) /* continue */
            rc = 0;
    }
    int empty = items.u.l->n == 0;
    jv_free(items);
    if (rc)
        return -1;
    if (empty && elseb)
        return exec_body(c, elseb);
    return 0;
}

static int exec_node(jctx *c, const jnode *n)
{
    jv v;
    if (step(c, n->line))
        return -1;
    switch (n->t) {
    case JN_TEXT:
        lq_sb_put(c->out, n->s, n->n);
        if (c->out->oom || c->out->n > JJ_MAX_OUT)
            return jj_fail(c, n->line, "the output is over %zu bytes", (size_t)JJ_MAX_OUT);
        return 0;
    case JN_OUTPUT: {
        if (eval(c, n->kid[0], &v))
            return -1;
        int rc = emit(c, n->line, v);
        jv_free(v);
        return rc;
    }
    case JN_BODY:
        return exec_body(c, n);
    case JN_IF:
        for (size_t k = 0; k + 1 < n->nkid; k += 2) {
            if (eval(c, n->kid[k], &v))
                return -1;
            int t = jv_truthy(v);
            jv_free(v);
            if (t)
                return exec_body(c, n->kid[k + 1]);
        }
        if (n->nkid % 2)
            return exec_body(c, n->kid[n->nkid - 1]);
        return 0;
    case JN_FOR:
        return exec_for(c, n);
    case JN_SET: {
        const jnode *tg = n->kid[0];
        if (eval(c, n->kid[1], &v))
            return -1;
        if (tg->t == JN_NAME)
            return set_name(c, n->line, tg->s, tg->n, v);
        jv ns;
        if (eval(c, tg->kid[0], &ns)) {
            jv_free(v);
            return -1;
        }
        int rc = 0;
        if (ns.t == JV_DICT && ns.u.d->ns && jv_has_namespace(v)) {
            jv_free(v);
            rc = jj_fail(c, n->line, "a namespace cannot hold another namespace");
        } else if (ns.t != JV_DICT || !ns.u.d->ns) {
            jv_free(v);
            rc = jj_fail(c, n->line, "cannot assign attribute '%.*s' on %s (only on a namespace())", (int)tg->n,
                         tg->s, ns.t == JV_UNDEF ? "an undefined value" : jv_type_name(ns));
        } else if (jd_set(ns.u.d, tg->s, tg->n, v)) {
            rc = oom(c, n->line);
        }
        jv_free(ns);
        return rc;
    }
    case JN_SET_BLOCK: {
        lq_sb buf = {0}, *saved = c->out;
        c->out = &buf;
        int rc = exec_body(c, n->kid[1]);
        c->out = saved;
        if (rc < 0 || buf.oom) {
            lq_sb_free(&buf);
            return rc < 0 ? -1 : oom(c, n->line);
        }
        v = jv_str(buf.s ? buf.s : "", buf.n);
        lq_sb_free(&buf);
        if (jv_oom(v))
            return oom(c, n->line);
        if (set_name(c, n->line, n->kid[0]->s, n->kid[0]->n, v))
            return -1;
        return rc;
    }
    case JN_FILTER_BLOCK: {
        lq_sb buf = {0}, *saved = c->out;
        c->out = &buf;
        int rc = exec_body(c, n->kid[1]);
        c->out = saved;
        if (rc || buf.oom) {
            lq_sb_free(&buf);
            return rc ? rc : oom(c, n->line);
        }
        jframe f = {.parent = c->top, .vars = jv_dict()};
        rc = jv_oom(f.vars) || jd_set(f.vars.u.d, " filter body", 12, jv_str(buf.s ? buf.s : "", buf.n));
        lq_sb_free(&buf);
        if (rc) {
            jv_free(f.vars);
            return oom(c, n->line);
        }
        c->top = &f;
        rc = eval(c, n->kid[0], &v);
        c->top = f.parent;
        jv_free(f.vars);
        if (rc)
            return -1;
        rc = emit(c, n->line, v);
        jv_free(v);
        return rc;
    }
    case JN_MACRO:
        v = jv_func(0, n);
        if (jv_oom(v))
            return oom(c, n->line);
        return set_name(c, n->line, n->s, n->n, v);
    case JN_BREAK:
        return 1;
    case JN_CONTINUE:
        return 2;
    default:
        return jj_fail(c, n->line, "internal: expression in statement position");
    }
}

static int exec_stmt(jctx *c, const jnode *n)
{
    if (++c->recursion > JJ_MAX_RECURSION) {
        c->recursion--;
        return jj_fail(c, n->line, "the template nests evaluations more than %d deep", JJ_MAX_RECURSION);
    }
    int rc = exec_node(c, n);
    c->recursion--;
    return rc;
}

/* 0, -1 on error, 1 break, 2 continue */
static int exec_body(jctx *c, const jnode *b)
{
    for (size_t i = 0; i < b->nkid; i++) {
        int rc = exec_stmt(c, b->kid[i]);
        if (rc)
            return rc;
    }
    return 0;
}

int jj_render(const jtemplate *t, jv vars, lq_sb *out, lq_err *err);
int jj_render(const jtemplate *t, jv vars, lq_sb *out, lq_err *err)
{
    /* the caller's variables stay unchanged: top-level sets go to a scope of their own */
    jj_budget_reset();
    jframe given = {.parent = NULL, .vars = jv_ref(vars)};
    jframe root = {.parent = &given, .vars = jv_dict()};
    if (jv_oom(root.vars))
        return lq_err_set(err, LQ_ENOMEM, "template: out of memory");
    jctx c = {.tpl = t, .top = &root, .root = &root, .out = out, .err = err};
    int rc = exec_body(&c, t->root);
    jv_free(root.vars);
    jv_free(given.vars);
    if (rc < 0)
        return err->code ? err->code : LQ_EINVAL;
    return 0;
}
