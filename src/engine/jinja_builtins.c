/* Jinja tests ("x is name"), the string/dict methods templates call and the global
 * functions transformers gives chat templates (range, namespace, dict, raise_exception,
 * strftime_now), each as Python's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/jinja_internal.h"

static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer",
    "float", "boolean", "true", "false", "odd", "even", "divisibleby", "equalto", "eq", "==", "ne", "!=",
    "in", "lower", "upper", "sameas", "callable", "gt", "ge", "lt", "le", NULL};


int jj_test_known(const char *s, size_t n) { return jj_in_list(TESTS, s, n); }

int jj_test(jctx *c, int line, const char *name, size_t n, jv in, jarg *a, size_t na, int *out)
{
    jv *x = jj_arg(a, na, 0, NULL);
    if (jj_eq(name, n, "defined")) *out = in.t != JV_UNDEF;
    else if (jj_eq(name, n, "undefined")) *out = in.t == JV_UNDEF;
    else if (jj_eq(name, n, "none")) *out = in.t == JV_NONE;
    else if (jj_eq(name, n, "string")) *out = in.t == JV_STR;
    else if (jj_eq(name, n, "mapping")) *out = in.t == JV_DICT && !in.u.d->ns;
    else if (jj_eq(name, n, "iterable")) *out = in.t == JV_STR || in.t == JV_LIST || (in.t == JV_DICT && !in.u.d->ns) || in.t == JV_UNDEF;
    else if (jj_eq(name, n, "sequence")) *out = in.t == JV_STR || in.t == JV_LIST || (in.t == JV_DICT && !in.u.d->ns) || in.t == JV_UNDEF;
    else if (jj_eq(name, n, "number")) *out = in.t == JV_INT || in.t == JV_FLOAT || in.t == JV_BOOL;
    else if (jj_eq(name, n, "integer")) *out = in.t == JV_INT;
    else if (jj_eq(name, n, "float")) *out = in.t == JV_FLOAT;
    else if (jj_eq(name, n, "boolean")) *out = in.t == JV_BOOL;
    else if (jj_eq(name, n, "true")) *out = in.t == JV_BOOL && in.u.b;
    else if (jj_eq(name, n, "false")) *out = in.t == JV_BOOL && !in.u.b;
    else if (jj_eq(name, n, "callable")) *out = in.t == JV_FUNC;
    else if (jj_eq(name, n, "lower") || jj_eq(name, n, "upper")) {
        if (in.t != JV_STR)
            return jj_fail(c, line, "'%.*s' test needs a string", (int)n, name);
        int has_cased = 0, ok = 1;
        for (size_t i = 0; i < in.u.s->n; i++) {
            char ch = in.u.s->s[i];
            if (jj_is_alpha((unsigned char)ch)) {
                has_cased = 1;
                if (jj_eq(name, n, "lower") ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z'))
                    ok = 0;
            }
        }
        *out = has_cased && ok;
    } else if (jj_eq(name, n, "odd") || jj_eq(name, n, "even")) {
        if (in.t != JV_INT)
            return jj_fail(c, line, "'%.*s' test needs an integer", (int)n, name);
        *out = (in.u.i % 2 != 0) == jj_eq(name, n, "odd");
    } else if (jj_eq(name, n, "divisibleby")) {
        if (in.t != JV_INT || !x || x->t != JV_INT || x->u.i == 0)
            return jj_fail(c, line, "divisibleby needs non-zero integers");
        *out = in.u.i % x->u.i == 0;
    } else if (jj_eq(name, n, "equalto") || jj_eq(name, n, "eq") || jj_eq(name, n, "==") || jj_eq(name, n, "ne") ||
               jj_eq(name, n, "!=")) {
        if (!x)
            return jj_fail(c, line, "'%.*s' test needs a value", (int)n, name);
        *out = jv_equal(in, *x) == (jj_eq(name, n, "equalto") || jj_eq(name, n, "eq") || jj_eq(name, n, "=="));
    } else if (jj_eq(name, n, "sameas")) {
        if (!x)
            return jj_fail(c, line, "sameas needs a value");
        /* Python identity: only singletons (none, booleans) compare meaningfully */
        *out = in.t == x->t && ((in.t == JV_NONE) || (in.t == JV_BOOL && in.u.b == x->u.b) ||
                                (in.t == JV_STR && in.u.s == x->u.s) || (in.t == JV_LIST && in.u.l == x->u.l) ||
                                (in.t == JV_DICT && in.u.d == x->u.d));
    } else if (jj_eq(name, n, "in")) {
        if (!x)
            return jj_fail(c, line, "'in' test needs a container");
        if (x->t == JV_STR) {
            if (in.t != JV_STR)
                return jj_fail(c, line, "'in <string>' needs a string");
            *out = memmem(x->u.s->s, x->u.s->n, in.u.s->s, in.u.s->n) != NULL || in.u.s->n == 0;
        } else if (x->t == JV_LIST) {
            *out = 0;
            for (size_t i = 0; i < x->u.l->n && !*out; i++)
                *out = jv_equal(x->u.l->v[i], in);
        } else if (x->t == JV_DICT) {
            *out = in.t == JV_STR && jd_get(x->u.d, in.u.s->s, in.u.s->n) != NULL;
        } else {
            return jj_fail(c, line, "'in' test needs a container");
        }
    } else if (jj_eq(name, n, "gt") || jj_eq(name, n, "ge") || jj_eq(name, n, "lt") || jj_eq(name, n, "le")) {
        if (!x || !((in.t == JV_INT || in.t == JV_FLOAT) && (x->t == JV_INT || x->t == JV_FLOAT)))
            return jj_fail(c, line, "'%.*s' test needs numbers", (int)n, name);
        double p = in.t == JV_INT ? (double)in.u.i : in.u.f, q = x->t == JV_INT ? (double)x->u.i : x->u.f;
        *out = jj_eq(name, n, "gt") ? p > q : jj_eq(name, n, "ge") ? p >= q : jj_eq(name, n, "lt") ? p < q : p <= q;
    } else {
        return jj_fail(c, line, "test '%.*s' is not supported", (int)n, name);
    }
    return 0;
}

static int prefix_test(jctx *c, int line, jv s, jv *x, int ends, jv *out)
{
    if (!x)
        return jj_fail(c, line, "%s needs an argument", ends ? "endswith" : "startswith");
    jv one[1];
    const jv *cands = one;
    size_t nc = 1;
    if (x->t == JV_LIST) {
        cands = x->u.l->v;
        nc = x->u.l->n;
    } else {
        one[0] = *x;
    }
    int r = 0;
    for (size_t i = 0; i < nc && !r; i++) {
        if (cands[i].t != JV_STR)
            return jj_fail(c, line, "%s needs a string", ends ? "endswith" : "startswith");
        size_t pn = cands[i].u.s->n;
        if (pn <= s.u.s->n)
            r = !memcmp(s.u.s->s + (ends ? s.u.s->n - pn : 0), cands[i].u.s->s, pn);
    }
    *out = jv_bool(r);
    return 0;
}

int jj_method(jctx *c, int line, jv obj, const char *name, size_t n, jarg *a, size_t na, jv *out)
{
    *out = jv_undef();
    if (obj.t == JV_STR) {
        if (jj_eq(name, n, "strip") || jj_eq(name, n, "lstrip") || jj_eq(name, n, "rstrip")) {
            jv *chars = jj_arg(a, na, 0, NULL);
            int which = jj_eq(name, n, "strip") ? 3 : jj_eq(name, n, "lstrip") ? 1 : 2;
            size_t x, y;
            if (chars && chars->t == JV_STR)
                jj_strip(obj.u.s->s, obj.u.s->n, which, chars->u.s->s, chars->u.s->n, &x, &y);
            else
                jj_strip(obj.u.s->s, obj.u.s->n, which, NULL, 0, &x, &y);
            *out = jv_str(obj.u.s->s + x, y - x);
            return jv_oom(*out) ? jj_oom(c, line) : 1;
        }
        if (jj_eq(name, n, "split"))
            return jj_split(c, line, obj, jj_arg(a, na, 0, "sep"), jj_arg(a, na, 1, "maxsplit"), out) ? -1 : 1;
        if (jj_eq(name, n, "startswith") || jj_eq(name, n, "endswith"))
            return prefix_test(c, line, obj, jj_arg(a, na, 0, NULL), jj_eq(name, n, "endswith"), out) ? -1 : 1;
        if (jj_eq(name, n, "upper"))
            return jj_case_map(c, line, obj, 0, out) ? -1 : 1;
        if (jj_eq(name, n, "lower"))
            return jj_case_map(c, line, obj, 1, out) ? -1 : 1;
        if (jj_eq(name, n, "title"))
            return jj_case_map(c, line, obj, 2, out) ? -1 : 1;
        if (jj_eq(name, n, "capitalize"))
            return jj_case_map(c, line, obj, 3, out) ? -1 : 1;
        if (jj_eq(name, n, "replace"))
            return jj_replace(c, line, obj, jj_arg(a, na, 0, NULL), jj_arg(a, na, 1, NULL), jj_arg(a, na, 2, NULL), out) ? -1
                                                                                                             : 1;
        if (jj_eq(name, n, "find")) {
            jv *x = jj_arg(a, na, 0, NULL);
            if (!x || x->t != JV_STR)
                return jj_fail(c, line, "find needs a string");
            const char *f = memmem(obj.u.s->s, obj.u.s->n, x->u.s->s, x->u.s->n);
            *out = jv_int(f ? (int64_t)jj_utf8_len(obj.u.s->s, (size_t)(f - obj.u.s->s)) : -1);
            return 1;
        }
        if (jj_eq(name, n, "join")) {
            jarg sep = {.v = obj};
            jv *x = jj_arg(a, na, 0, NULL);
            if (!x)
                return jj_fail(c, line, "join needs a list");
            return jj_join(c, line, *x, &sep, 1, out) ? -1 : 1;
        }
        return 0;
    }
    if (obj.t == JV_DICT && !obj.u.d->ns) {
        if (jj_eq(name, n, "items"))
            return jj_items_list(c, line, obj, out) ? -1 : 1;
        if (jj_eq(name, n, "keys"))
            return jj_as_list(c, line, obj, out) ? -1 : 1;
        if (jj_eq(name, n, "values")) {
            jv l = jv_list();
            if (jv_oom(l))
                return jj_oom(c, line);
            for (size_t i = 0; i < obj.u.d->n; i++)
                if (jl_push(l.u.l, jv_ref(obj.u.d->v[i])))
                    return jv_free(l), jj_oom(c, line);
            *out = l;
            return 1;
        }
        if (jj_eq(name, n, "get")) {
            jv *k = jj_arg(a, na, 0, NULL), *dv = jj_arg(a, na, 1, NULL);
            if (!k)
                return jj_fail(c, line, "get needs a key");
            jv *v = k->t == JV_STR ? jd_get(obj.u.d, k->u.s->s, k->u.s->n) : NULL;
            *out = v ? jv_ref(*v) : dv ? jv_ref(*dv) : jv_none();
            return 1;
        }
        if (jd_get(obj.u.d, name, n))
            return 0;
        return jj_fail(c, line, "'%.*s' is not a supported method of a mapping", (int)n, name);
    }
    if (obj.t == JV_LIST) {
        if (jj_eq(name, n, "append") || jj_eq(name, n, "pop") || jj_eq(name, n, "extend") || jj_eq(name, n, "insert") ||
            jj_eq(name, n, "remove") || jj_eq(name, n, "clear") || jj_eq(name, n, "sort") || jj_eq(name, n, "reverse"))
            return jj_fail(c, line, "lists are read-only in chat templates (.%.*s)", (int)n, name);
        return 0;
    }
    return 0;
}

int jj_call_builtin(jctx *c, int line, int which, jarg *a, size_t na, jv *out)
{
    *out = jv_undef();
    switch (which) {
    case JF_RANGE: {
        int64_t v[3] = {0, 0, 1};
        size_t np = 0;
        for (size_t i = 0; i < na; i++) {
            if (a[i].name || np == 3 || a[i].v.t != JV_INT)
                return jj_fail(c, line, "range takes 1 to 3 integers");
            v[np++] = a[i].v.u.i;
        }
        if (np == 0)
            return jj_fail(c, line, "range takes 1 to 3 integers");
        int64_t lo = np == 1 ? 0 : v[0], hi = np == 1 ? v[0] : v[1], st = np == 3 ? v[2] : 1;
        if (st == 0)
            return jj_fail(c, line, "range step must not be zero");
        jv l = jv_list();
        if (jv_oom(l))
            return jj_oom(c, line);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
            if (l.u.l->n >= JJ_MAX_ITEMS) {
                jv_free(l);
                return jj_fail(c, line, "range of more than %u items", JJ_MAX_ITEMS);
            }
            if (jl_push(l.u.l, jv_int(i)))
                return jv_free(l), jj_oom(c, line);
            if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st))
                break;
        }
        *out = l;
        return 0;
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        jv d = jv_dict();
        if (jv_oom(d))
            return jj_oom(c, line);
        d.u.d->ns = which == JF_NAMESPACE;
        for (size_t i = 0; i < na; i++) {
            if (!a[i].name) {
                if (a[i].v.t != JV_DICT || i) {
                    jv_free(d);
                    return jj_fail(c, line, "%s() takes keyword arguments (or one mapping first)",
                                   which == JF_NAMESPACE ? "namespace" : "dict");
                }
                for (size_t k = 0; k < a[i].v.u.d->n; k++)
                    if (jd_set(d.u.d, a[i].v.u.d->k[k]->s, a[i].v.u.d->k[k]->n, jv_ref(a[i].v.u.d->v[k])))
                        return jv_free(d), jj_oom(c, line);
                continue;
            }
            if (jd_set(d.u.d, a[i].name, a[i].nn, jv_ref(a[i].v)))
                return jv_free(d), jj_oom(c, line);
        }
        *out = d;
        return 0;
    }
    case JF_RAISE: {
        lq_sb b = {0};
        if (na)
            jv_to_str(&b, a[0].v);
        int r = jj_fail(c, line, "the template raised an exception: %.*s", (int)(b.n > 400 ? 400 : b.n),
                        b.s ? b.s : "");
        lq_sb_free(&b);
        return r;
    }
    case JF_STRFTIME: {
        if (na != 1 || a[0].v.t != JV_STR || a[0].v.u.s->n > 200)
            return jj_fail(c, line, "strftime_now takes one format string");
        char buf[512];
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(buf, sizeof buf, a[0].v.u.s->s, &tm);
        *out = jv_str(buf, k);
        return jv_oom(*out) ? jj_oom(c, line) : 0;
    }
    default:
        return jj_fail(c, line, "internal: unknown built-in");
    }
}
