/* Jinja filters ("value | name(args)") with Python Jinja2's behaviour, tojson as
 * transformers' json.dumps(ensure_ascii=False). Names are checked at parse time
 * (jj_filter_known), so a template using one we lack fails when it is loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"

static const char *const FILTERS[] = {
    "trim", "tojson", "capitalize", "length", "count", "upper", "lower", "title", "replace", "default",
    "d", "first", "last", "join", "list", "string", "int", "float", "items", "selectattr", "rejectattr",
    "map", "select", "reject", "reverse", "abs", "safe", "indent", "unique", "wordcount", NULL};

int jj_filter_known(const char *s, size_t n) { return jj_in_list(FILTERS, s, n); }

/* the result of select/map: src done with, l handed out as a Python generator */
static int as_generator(jv src, jv l, jv *out)
{
    jv_free(src);
    l.u.l->gen = 1;
    *out = l;
    return 0;
}

static int select_items(jctx *c, int line, jv in, jarg *a, size_t na, int by_attr, int keep, jv *out)
{
    jv src;
    /* Jinja2 walks the value only when it is true: none gives nothing */
    if (jj_as_list(c, line, jv_truthy(in) ? in : jv_undef(), &src))
        return -1;
    size_t first = by_attr ? 1 : 0;
    jv *attr = by_attr ? jj_arg(a, na, 0, NULL) : NULL;
    if (by_attr && (!attr || (attr->t != JV_STR && attr->t != JV_INT))) {
        jv_free(src);
        return jj_fail(c, line, "selectattr/rejectattr need an attribute name");
    }
    jv *test = jj_arg(a, na, first, NULL);
    if (test && test->t != JV_STR) {
        jv_free(src);
        return jj_fail(c, line, "the test name must be a string");
    }
    if (test && !jj_test_known(test->u.s->s, test->u.s->n)) {
        int r = jj_fail(c, line, "unknown test '%.*s'", (int)(test->u.s->n > 60 ? 60 : test->u.s->n), test->u.s->s);
        jv_free(src);
        return r;
    }
    /* the test's own arguments: positional after the test name */
    jarg targs[4];
    size_t nt = 0;
    for (size_t k = first + 1; nt < 4; k++) {
        jv *x = jj_arg(a, na, k, NULL);
        if (!x)
            break;
        targs[nt++] = (jarg){.v = *x};
    }
    jv l = jv_list();
    if (jv_oom(l)) {
        jv_free(src);
        return jj_oom(c, line);
    }
    for (size_t i = 0; i < src.u.l->n; i++) {
        jv item = src.u.l->v[i];
        jv val = by_attr ? jj_attr_path(item, *attr) : jv_ref(item);
        int res;
        if (test) {
            if (jj_test(c, line, test->u.s->s, test->u.s->n, val, targs, nt, &res)) {
                jv_free(val);
                jv_free(l);
                jv_free(src);
                return -1;
            }
        } else {
            res = jv_truthy(val);
        }
        jv_free(val);
        if (res == keep && jl_push(l.u.l, jv_ref(item))) {
            jv_free(l);
            jv_free(src);
            return jj_oom(c, line);
        }
    }
    return as_generator(src, l, out);
}

static int do_map(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    jv src;
    if (jj_as_list(c, line, jv_truthy(in) ? in : jv_undef(), &src))
        return -1;
    jv *attr = jj_arg(a, na, (size_t)-1, "attribute"), *dflt = jj_arg(a, na, (size_t)-1, "default");
    jv *fname = jj_arg(a, na, 0, NULL);
    if (!attr && (!fname || fname->t != JV_STR)) {
        jv_free(src);
        return jj_fail(c, line, "map needs attribute= or a filter name");
    }
    if (!attr && !jj_filter_known(fname->u.s->s, fname->u.s->n)) {
        int r = jj_fail(c, line, "unknown filter '%.*s'", (int)(fname->u.s->n > 60 ? 60 : fname->u.s->n),
                        fname->u.s->s);
        jv_free(src);
        return r;
    }
    jarg fargs[4];
    size_t nf = 0;
    for (size_t k = 1; !attr && nf < 4; k++) {
        jv *x = jj_arg(a, na, k, NULL);
        if (!x)
            break;
        fargs[nf++] = (jarg){.v = *x};
    }
    jv l = jv_list();
    if (jv_oom(l)) {
        jv_free(src);
        return jj_oom(c, line);
    }
    for (size_t i = 0; i < src.u.l->n; i++) {
        jv r;
        if (attr) {
            if (attr->t != JV_STR && attr->t != JV_INT) {
                jv_free(l);
                jv_free(src);
                return jj_fail(c, line, "map attribute must be a string");
            }
            r = jj_attr_path(src.u.l->v[i], *attr);
            if (r.t == JV_UNDEF && dflt)
                r = jv_ref(*dflt);
        } else if (jj_filter(c, line, fname->u.s->s, fname->u.s->n, src.u.l->v[i], fargs, nf, &r)) {
            jv_free(l);
            jv_free(src);
            return -1;
        }
        if (jl_push(l.u.l, r)) {
            jv_free(l);
            jv_free(src);
            return jj_oom(c, line);
        }
    }
    return as_generator(src, l, out);
}

static int do_tojson(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (jj_check_args(c, line, "tojson", a, na, 4, kw))
        return -1;
    jv *ea = jj_arg(a, na, 0, "ensure_ascii"), *ind = jj_arg(a, na, 1, "indent");
    jv *sep = jj_arg(a, na, 2, "separators"), *sk = jj_arg(a, na, 3, "sort_keys");
    if (ea && jv_truthy(*ea))
        return jj_fail(c, line, "tojson(ensure_ascii=true) is not supported");
    int indent = -1;
    if (ind && ind->t == JV_INT) {
        if (ind->u.i < 0 || ind->u.i > 64)
            return jj_fail(c, line, "tojson indent must be 0..64");
        indent = (int)ind->u.i;
    } else if (ind && ind->t != JV_NONE) {
        return jj_fail(c, line, "tojson indent must be an integer");
    }
    char isep[32] = {0}, ksep[32] = {0};
    if (sep && sep->t != JV_NONE) {
        if (sep->t != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != JV_STR || sep->u.l->v[1].t != JV_STR ||
            sep->u.l->v[0].u.s->n >= sizeof isep || sep->u.l->v[1].u.s->n >= sizeof ksep)
            return jj_fail(c, line, "tojson separators must be two short strings");
        memcpy(isep, sep->u.l->v[0].u.s->s, sep->u.l->v[0].u.s->n);
        memcpy(ksep, sep->u.l->v[1].u.s->s, sep->u.l->v[1].u.s->n);
    }
    lq_sb b = {0};
    if (jv_to_json(&b, in, indent, sk && jv_truthy(*sk), sep && sep->t != JV_NONE ? isep : NULL,
                   sep && sep->t != JV_NONE ? ksep : NULL)) {
        lq_sb_free(&b);
        return jj_fail(c, line, "tojson: %s is not JSON serializable", jv_type_name(in));
    }
    return jj_put_str(c, line, &b, out);
}

static int do_indent(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    jv *w = jj_arg(a, na, 0, "width"), *first = jj_arg(a, na, 1, "first"), *blank = jj_arg(a, na, 2, "blank");
    char pad[65];
    size_t pn = 4;
    if (w && w->t == JV_INT) {
        if (w->u.i < 0 || w->u.i > 64)
            return jj_fail(c, line, "indent width must be 0..64");
        pn = (size_t)w->u.i;
        memset(pad, ' ', pn);
    } else if (w && w->t == JV_STR) {
        if (w->u.s->n > 64)
            return jj_fail(c, line, "indent string too long");
        pn = w->u.s->n;
        memcpy(pad, w->u.s->s, pn);
    } else {
        memset(pad, ' ', pn);
    }
    jv s;
    if (jj_to_str(c, line, in, &s))
        return -1;
    lq_sb b = {0};
    const char *p = s.u.s->s, *e = p + s.u.s->n;
    int first_line = 1;
    while (p <= e) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const char *le = nl ? nl : e;
        int is_blank = le == p;
        if ((first_line ? (first && jv_truthy(*first)) : 1) && (!is_blank || (blank && jv_truthy(*blank))))
            lq_sb_put(&b, pad, pn);
        lq_sb_put(&b, p, (size_t)(le - p));
        if (!nl)
            break;
        lq_sb_put(&b, "\n", 1);
        p = nl + 1;
        first_line = 0;
    }
    jv_free(s);
    return jj_put_str(c, line, &b, out);
}

int jj_filter(jctx *c, int line, const char *name, size_t n, jv in, jarg *a, size_t na, jv *out)
{
    *out = jv_undef();
    if (jj_eq(name, n, "trim")) {
        jv s, *chars = jj_arg(a, na, 0, "chars");
        if (jj_to_str(c, line, in, &s))
            return -1;
        size_t x, y;
        if (chars && chars->t == JV_STR)
            jj_strip(s.u.s->s, s.u.s->n, 3, chars->u.s->s, chars->u.s->n, &x, &y);
        else
            jj_strip(s.u.s->s, s.u.s->n, 3, NULL, 0, &x, &y);
        *out = jv_str(s.u.s->s + x, y - x);
        jv_free(s);
        return jv_oom(*out) ? jj_oom(c, line) : 0;
    }
    if (jj_eq(name, n, "tojson"))
        return do_tojson(c, line, in, a, na, out);
    if (jj_eq(name, n, "capitalize"))
        return jj_case_map(c, line, in, 3, out);
    if (jj_eq(name, n, "upper"))
        return jj_case_map(c, line, in, 0, out);
    if (jj_eq(name, n, "lower"))
        return jj_case_map(c, line, in, 1, out);
    if (jj_eq(name, n, "title"))
        return jj_case_map(c, line, in, 2, out);
    if (jj_eq(name, n, "length") || jj_eq(name, n, "count")) {
        if ((in.t != JV_STR && in.t != JV_LIST && in.t != JV_DICT && in.t != JV_UNDEF) ||
            (in.t == JV_LIST && in.u.l->gen))
            return jj_fail(c, line, "%s has no length", in.t == JV_LIST ? "a generator" : jv_type_name(in));
        *out = jv_int((int64_t)jj_len_of(in));
        return 0;
    }
    if (jj_eq(name, n, "replace")) {
        jv s;
        if (jj_to_str(c, line, in, &s))
            return -1;
        int rc = jj_replace(c, line, s, jj_arg(a, na, 0, "old"), jj_arg(a, na, 1, "new"), jj_arg(a, na, 2, "count"), out);
        jv_free(s);
        return rc;
    }
    if (jj_eq(name, n, "default") || jj_eq(name, n, "d")) {
        jv *dv = jj_arg(a, na, 0, "default_value"), *boolean = jj_arg(a, na, 1, "boolean");
        int use = in.t == JV_UNDEF || (boolean && jv_truthy(*boolean) && !jv_truthy(in));
        *out = use ? (dv ? jv_ref(*dv) : jv_str("", 0)) : jv_ref(in);
        return jv_oom(*out) ? jj_oom(c, line) : 0;
    }
    if (jj_eq(name, n, "first") || jj_eq(name, n, "last")) {
        jv l;
        if (jj_as_list(c, line, in, &l))
            return -1;
        if (l.u.l->n)
            *out = jv_ref(l.u.l->v[jj_eq(name, n, "first") ? 0 : l.u.l->n - 1]);
        jv_free(l);
        return 0;
    }
    if (jj_eq(name, n, "join"))
        return jj_join(c, line, in, a, na, out);
    if (jj_eq(name, n, "list"))
        return jj_as_list(c, line, in, out);
    if (jj_eq(name, n, "string"))
        return jj_to_str(c, line, in, out);
    if (jj_eq(name, n, "safe")) {
        if (jj_to_str(c, line, in, out))
            return -1;
        out->safe = 1;
        return 0;
    }
    if (jj_eq(name, n, "int") || jj_eq(name, n, "float")) {
        int want_int = jj_eq(name, n, "int");
        jv *dv = jj_arg(a, na, 0, "default");
        double f = 0;
        int ok = 1;
        if (in.t == JV_INT || in.t == JV_BOOL)
            f = (double)(in.t == JV_INT ? in.u.i : in.u.b);
        else if (in.t == JV_FLOAT)
            f = in.u.f;
        else if (in.t == JV_STR) {
            char buf[64];
            size_t x, y;
            jj_strip(in.u.s->s, in.u.s->n, 3, NULL, 0, &x, &y);
            if (y - x == 0 || y - x >= sizeof buf)
                ok = 0;
            else {
                memcpy(buf, in.u.s->s + x, y - x);
                buf[y - x] = 0;
                char *e;
                if (want_int) {
                    long long v = strtoll(buf, &e, 10);
                    if (!*e) {
                        *out = jv_int(v);
                        return 0;
                    }
                }
                f = strtod(buf, &e);
                ok = !*e;
            }
        } else
            ok = 0;
        if (!ok) {
            *out = dv ? jv_ref(*dv) : want_int ? jv_int(0) : jv_float(0.0);
            return 0;
        }
        if (want_int) {
            if (!(f > -9.2e18 && f < 9.2e18))
                return jj_fail(c, line, "int of an out-of-range number");
            *out = jv_int((int64_t)f);
        } else {
            *out = jv_float(f);
        }
        return 0;
    }
    if (jj_eq(name, n, "items"))
        return jj_items_list(c, line, in, out);
    if (jj_eq(name, n, "selectattr") || jj_eq(name, n, "rejectattr"))
        return select_items(c, line, in, a, na, 1, jj_eq(name, n, "selectattr"), out);
    if (jj_eq(name, n, "select") || jj_eq(name, n, "reject"))
        return select_items(c, line, in, a, na, 0, jj_eq(name, n, "select"), out);
    if (jj_eq(name, n, "map"))
        return do_map(c, line, in, a, na, out);
    if (jj_eq(name, n, "reverse")) {
        if (in.t == JV_STR) {
            lq_sb b = {0};
            const char *s = in.u.s->s;
            size_t e = in.u.s->n;
            while (e > 0) {
                size_t p = jj_prev_char(s, e);
                lq_sb_put(&b, s + p, e - p);
                e = p;
            }
            return jj_put_str(c, line, &b, out);
        }
        jv l;
        if (jj_as_list(c, line, in, &l))
            return -1;
        for (size_t i = 0; i < l.u.l->n / 2; i++) {
            jv t = l.u.l->v[i];
            l.u.l->v[i] = l.u.l->v[l.u.l->n - 1 - i];
            l.u.l->v[l.u.l->n - 1 - i] = t;
        }
        *out = l;
        return 0;
    }
    if (jj_eq(name, n, "abs")) {
        if (in.t == JV_INT && in.u.i != INT64_MIN)
            *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
        else if (in.t == JV_FLOAT)
            *out = jv_float(in.u.f < 0 ? -in.u.f : in.u.f);
        else
            return jj_fail(c, line, "abs of %s", jv_type_name(in));
        return 0;
    }
    if (jj_eq(name, n, "indent"))
        return do_indent(c, line, in, a, na, out);
    if (jj_eq(name, n, "unique")) {
        jv l, src;
        if (jj_as_list(c, line, in, &src))
            return -1;
        l = jv_list();
        if (jv_oom(l))
            return jv_free(src), jj_oom(c, line);
        for (size_t i = 0; i < src.u.l->n; i++) {
            int seen = 0;
            for (size_t k = 0; k < l.u.l->n && !seen; k++)
                seen = jv_equal(l.u.l->v[k], src.u.l->v[i]);
            if (!seen && jl_push(l.u.l, jv_ref(src.u.l->v[i])))
                return jv_free(l), jv_free(src), jj_oom(c, line);
        }
        jv_free(src);
        *out = l;
        return 0;
    }
    if (jj_eq(name, n, "wordcount")) {
        jv l, s;
        if (jj_to_str(c, line, in, &s))
            return -1;
        int rc = jj_split(c, line, s, NULL, NULL, &l);
        jv_free(s);
        if (rc)
            return -1;
        *out = jv_int((int64_t)l.u.l->n);
        jv_free(l);
        return 0;
    }
    return jj_fail(c, line, "filter '%.*s' is not supported here", (int)n, name);
}
