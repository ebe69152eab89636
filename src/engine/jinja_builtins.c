/* Jinja built-ins: the filters, tests, string/dict methods and global functions chat
 * templates use, each with Python's behaviour on our values (str.strip() strips Unicode
 * whitespace, title()/capitalize() as Python's, tojson as transformers' json.dumps with
 * ensure_ascii=False). Case mapping is ASCII-only: non-ASCII letters pass unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/jinja_internal.h"

static int eq(const char *s, size_t n, const char *lit) { return n == strlen(lit) && !memcmp(s, lit, n); }

static const char *const FILTERS[] = {
    "trim", "tojson", "capitalize", "length", "count", "upper", "lower", "title", "replace", "default",
    "d", "first", "last", "join", "list", "string", "int", "float", "items", "selectattr", "rejectattr",
    "map", "select", "reject", "reverse", "abs", "safe", "indent", "unique", "wordcount", NULL};
static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer",
    "float", "boolean", "true", "false", "odd", "even", "divisibleby", "equalto", "eq", "==", "ne", "!=",
    "in", "lower", "upper", "sameas", "callable", "gt", "ge", "lt", "le", NULL};

static int known(const char *const *list, const char *s, size_t n)
{
    for (size_t i = 0; list[i]; i++)
        if (eq(s, n, list[i]))
            return 1;
    return 0;
}
int jj_filter_known(const char *s, size_t n) { return known(FILTERS, s, n); }
int jj_test_known(const char *s, size_t n) { return known(TESTS, s, n); }

static int oom(jctx *c, int line)
{
    if (jj_budget_spent())
        return jj_fail(c, line, "the template built more than %zu MiB of values", (size_t)JJ_MAX_WORK >> 20);
    return jj_fail(c, line, "out of memory (or a value over the size or nesting bound)");
}

static int put_str(jctx *c, int line, lq_sb *b, jv *out)
{
    if (b->oom || b->n > JJ_MAX_OUT) {
        lq_sb_free(b);
        return oom(c, line);
    }
    *out = jv_str(b->s ? b->s : "", b->n);
    lq_sb_free(b);
    return jv_oom(*out) ? oom(c, line) : 0;
}

/* argument i (positional index pos or keyword name), or NULL */
static jv *arg(jarg *a, size_t na, size_t pos, const char *name)
{
    size_t p = 0;
    for (size_t i = 0; i < na; i++) {
        if (a[i].name) {
            if (name && eq(a[i].name, a[i].nn, name))
                return &a[i].v;
        } else if (p++ == pos) {
            return &a[i].v;
        }
    }
    return NULL;
}

static int check_args(jctx *c, int line, const char *what, jarg *a, size_t na, size_t max_pos,
                      const char *const *kw)
{
    size_t p = 0;
    for (size_t i = 0; i < na; i++) {
        if (!a[i].name) {
            if (++p > max_pos)
                return jj_fail(c, line, "%s takes at most %zu positional argument(s)", what, max_pos);
            continue;
        }
        int ok = 0;
        for (size_t k = 0; kw && kw[k]; k++)
            ok |= eq(a[i].name, a[i].nn, kw[k]);
        if (!ok)
            return jj_fail(c, line, "%s has no argument '%.*s'", what, (int)a[i].nn, a[i].name);
    }
    return 0;
}

/* Python's str.isspace() code points at s[i], returning the byte length (0: not space). */
static size_t space_at(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f))
        return 1;
    if (c == 0xC2 && i + 1 < n && ((unsigned char)s[i + 1] == 0x85 || (unsigned char)s[i + 1] == 0xA0))
        return 2;
    if (c == 0xE1 && i + 2 < n && (unsigned char)s[i + 1] == 0x9A && (unsigned char)s[i + 2] == 0x80)
        return 3;
    if (c == 0xE2 && i + 2 < n) {
        unsigned char b = (unsigned char)s[i + 1], d = (unsigned char)s[i + 2];
        if (b == 0x80 && (d <= 0x8A || d == 0xA8 || d == 0xA9 || d == 0xAF))
            return 3;
        if (b == 0x81 && d == 0x9F)
            return 3;
    }
    if (c == 0xE3 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 && (unsigned char)s[i + 2] == 0x80)
        return 3;
    return 0;
}

/* the start of the UTF-8 character ending at e (exclusive) */
static size_t prev_char(const char *s, size_t e)
{
    size_t i = e - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

static int in_chars(const char *chars, size_t cn, const char *s, size_t n, size_t i, size_t *len)
{
    size_t j = i + 1;
    while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80)
        j++;
    *len = j - i;
    for (size_t k = 0; k < cn;) {
        size_t m = k + 1;
        while (m < cn && ((unsigned char)chars[m] & 0xC0) == 0x80)
            m++;
        if (m - k == *len && !memcmp(chars + k, s + i, *len))
            return 1;
        k = m;
    }
    return 0;
}

/* strip: which 1 = left, 2 = right, 3 = both; chars NULL = whitespace */
static void strip(const char *s, size_t n, int which, const char *chars, size_t cn, size_t *a, size_t *b)
{
    size_t i = 0, e = n, l;
    if (which & 1)
        while (i < e && (chars ? in_chars(chars, cn, s, e, i, &l) : (l = space_at(s, e, i)) != 0))
            i += l;
    if (which & 2)
        while (e > i) {
            size_t p = prev_char(s, e);
            if (chars ? !in_chars(chars, cn, s, e, p, &l) : space_at(s, e, p) != e - p)
                break;
            e = p;
        }
    *a = i;
    *b = e;
}

static int to_str(jctx *c, int line, jv v, jv *out)
{
    if (v.t == JV_STR) {
        *out = jv_ref(v);
        return 0;
    }
    lq_sb b = {0};
    jv_to_str(&b, v);
    return put_str(c, line, &b, out);
}

static int is_alpha(unsigned char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
static char up(char ch) { return (ch >= 'a' && ch <= 'z') ? (char)(ch - 32) : ch; }
static char lo(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch; }

/* mode: 0 upper, 1 lower, 2 title, 3 capitalize */
static int case_map(jctx *c, int line, jv v, int mode, jv *out)
{
    jv s;
    if (to_str(c, line, v, &s))
        return -1;
    lq_sb b = {0};
    lq_sb_put(&b, s.u.s->s, s.u.s->n);
    int prev_cased = 0;
    for (size_t i = 0; i < b.n && !b.oom; i++) {
        char ch = b.s[i];
        switch (mode) {
        case 0: b.s[i] = up(ch); break;
        case 1: b.s[i] = lo(ch); break;
        case 2:
            b.s[i] = prev_cased ? lo(ch) : up(ch);
            /* Python's title(): a letter follows a cased letter; non-ASCII bytes count as
             * cased when they are part of a letter, which we cannot know: treat as uncased */
            prev_cased = is_alpha((unsigned char)ch);
            break;
        default: b.s[i] = i == 0 ? up(ch) : lo(ch); break;
        }
    }
    jv_free(s);
    return put_str(c, line, &b, out);
}

static int do_replace(jctx *c, int line, jv s, jv *old, jv *nw, jv *cnt, jv *out)
{
    if (!old || !nw || old->t != JV_STR || nw->t != JV_STR)
        return jj_fail(c, line, "replace needs two strings");
    int64_t max = cnt && cnt->t == JV_INT ? cnt->u.i : -1;
    const char *p = s.u.s->s, *e = p + s.u.s->n;
    lq_sb b = {0};
    int64_t done = 0;
    if (old->u.s->n == 0) {
        /* Python inserts the replacement before every character and at the end */
        while (p <= e && (max < 0 || done < max)) {
            lq_sb_put(&b, nw->u.s->s, nw->u.s->n);
            done++;
            if (p == e)
                break;
            const char *q = p + 1;
            while (q < e && ((unsigned char)*q & 0xC0) == 0x80)
                q++;
            lq_sb_put(&b, p, (size_t)(q - p));
            p = q;
            if (b.n > JJ_MAX_OUT)
                break;
        }
        lq_sb_put(&b, p, (size_t)(e - p));
        return put_str(c, line, &b, out);
    }
    while (p < e && (max < 0 || done < max)) {
        const char *q = memmem(p, (size_t)(e - p), old->u.s->s, old->u.s->n);
        if (!q)
            break;
        lq_sb_put(&b, p, (size_t)(q - p));
        lq_sb_put(&b, nw->u.s->s, nw->u.s->n);
        p = q + old->u.s->n;
        done++;
        if (b.n > JJ_MAX_OUT)
            break;
    }
    lq_sb_put(&b, p, (size_t)(e - p));
    return put_str(c, line, &b, out);
}

static int split(jctx *c, int line, jv s, jv *sep, jv *maxs, jv *out)
{
    jv l = jv_list();
    if (jv_oom(l))
        return oom(c, line);
    int64_t max = maxs && maxs->t == JV_INT ? maxs->u.i : -1;
    const char *p = s.u.s->s;
    size_t n = s.u.s->n, i = 0;
    int64_t cnt = 0;
    if (!sep || sep->t == JV_NONE) {
        /* runs of whitespace separate; leading/trailing whitespace gives no empty items */
        for (;;) {
            size_t w;
            while (i < n && (w = space_at(p, n, i)) != 0)
                i += w;
            if (i >= n)
                break;
            size_t st = i;
            if (max >= 0 && cnt >= max) {
                size_t a, b;
                strip(p + st, n - st, 2, NULL, 0, &a, &b);
                if (jl_push(l.u.l, jv_str(p + st, b)))
                    return jv_free(l), oom(c, line);
                break;
            }
            while (i < n && space_at(p, n, i) == 0)
                i++;
            if (jl_push(l.u.l, jv_str(p + st, i - st)))
                return jv_free(l), oom(c, line);
            cnt++;
        }
    } else {
        if (sep->t != JV_STR || sep->u.s->n == 0) {
            jv_free(l);
            return jj_fail(c, line, "split needs a non-empty string separator");
        }
        const char *q = p, *e = p + n;
        for (;;) {
            const char *f = (max < 0 || cnt < max) ? memmem(q, (size_t)(e - q), sep->u.s->s, sep->u.s->n) : NULL;
            if (!f) {
                if (jl_push(l.u.l, jv_str(q, (size_t)(e - q))))
                    return jv_free(l), oom(c, line);
                break;
            }
            if (jl_push(l.u.l, jv_str(q, (size_t)(f - q))))
                return jv_free(l), oom(c, line);
            q = f + sep->u.s->n;
            cnt++;
        }
    }
    *out = l;
    return 0;
}

static size_t len_of(jv v)
{
    switch (v.t) {
    case JV_STR: return jj_utf8_len(v.u.s->s, v.u.s->n);
    case JV_LIST: return v.u.l->n;
    case JV_DICT: return v.u.d->n;
    default: return 0;
    }
}

/* a dotted attribute path ("function.name") of an item, as Jinja's make_attrgetter */
static jv attr_path(jv item, jv path)
{
    jv cur = jv_ref(item);
    if (path.t == JV_INT) {
        jv r = jv_undef();
        if (cur.t == JV_LIST && path.u.i >= 0 && (uint64_t)path.u.i < cur.u.l->n)
            r = jv_ref(cur.u.l->v[path.u.i]);
        jv_free(cur);
        return r;
    }
    const char *s = path.u.s->s, *e = s + path.u.s->n;
    while (s <= e) {
        const char *d = memchr(s, '.', (size_t)(e - s));
        if (!d)
            d = e;
        jv nx = jj_getattr(cur, s, (size_t)(d - s));
        jv_free(cur);
        cur = nx;
        s = d + 1;
        if (d == e)
            break;
    }
    return cur;
}

static int items_list(jctx *c, int line, jv v, jv *out)
{
    jv l = jv_list();
    if (jv_oom(l))
        return oom(c, line);
    if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) {
            jv pr = jv_list();
            if (!jv_oom(pr))
                pr.u.l->tuple = 1;
            if (jv_oom(pr) || jl_push(pr.u.l, jv_str(v.u.d->k[i]->s, v.u.d->k[i]->n)) ||
                jl_push(pr.u.l, jv_ref(v.u.d->v[i])) || jl_push(l.u.l, pr)) {
                jv_free(l);
                return oom(c, line);
            }
        }
    } else if (v.t != JV_UNDEF) {
        jv_free(l);
        return jj_fail(c, line, "items needs a mapping, not %s", jv_type_name(v));
    }
    *out = l;
    return 0;
}

/* list() of a value: a list copied, a mapping's keys, a string's characters, undefined -> [] */
int jj_as_list(jctx *c, int line, jv v, jv *out)
{
    jv l = jv_list();
    if (jv_oom(l))
        return oom(c, line);
    if (v.t == JV_LIST) {
        for (size_t i = 0; i < v.u.l->n; i++)
            if (jl_push(l.u.l, jv_ref(v.u.l->v[i])))
                return jv_free(l), oom(c, line);
    } else if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jl_push(l.u.l, jv_str(v.u.d->k[i]->s, v.u.d->k[i]->n)))
                return jv_free(l), oom(c, line);
    } else if (v.t == JV_STR) {
        const char *s = v.u.s->s;
        size_t n = v.u.s->n;
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80)
                j++;
            if (jl_push(l.u.l, jv_str(s + i, j - i)))
                return jv_free(l), oom(c, line);
            i = j;
        }
    } else if (v.t != JV_UNDEF) {
        jv_free(l);
        return jj_fail(c, line, "cannot make a list of %s", jv_type_name(v));
    }
    *out = l;
    return 0;
}

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
    jv *attr = by_attr ? arg(a, na, 0, NULL) : NULL;
    if (by_attr && (!attr || (attr->t != JV_STR && attr->t != JV_INT))) {
        jv_free(src);
        return jj_fail(c, line, "selectattr/rejectattr need an attribute name");
    }
    jv *test = arg(a, na, first, NULL);
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
        jv *x = arg(a, na, k, NULL);
        if (!x)
            break;
        targs[nt++] = (jarg){.v = *x};
    }
    jv l = jv_list();
    if (jv_oom(l)) {
        jv_free(src);
        return oom(c, line);
    }
    for (size_t i = 0; i < src.u.l->n; i++) {
        jv item = src.u.l->v[i];
        jv val = by_attr ? attr_path(item, *attr) : jv_ref(item);
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
            return oom(c, line);
        }
    }
    return as_generator(src, l, out);
}

static int do_map(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    jv src;
    if (jj_as_list(c, line, jv_truthy(in) ? in : jv_undef(), &src))
        return -1;
    jv *attr = arg(a, na, (size_t)-1, "attribute"), *dflt = arg(a, na, (size_t)-1, "default");
    jv *fname = arg(a, na, 0, NULL);
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
        jv *x = arg(a, na, k, NULL);
        if (!x)
            break;
        fargs[nf++] = (jarg){.v = *x};
    }
    jv l = jv_list();
    if (jv_oom(l)) {
        jv_free(src);
        return oom(c, line);
    }
    for (size_t i = 0; i < src.u.l->n; i++) {
        jv r;
        if (attr) {
            if (attr->t != JV_STR && attr->t != JV_INT) {
                jv_free(l);
                jv_free(src);
                return jj_fail(c, line, "map attribute must be a string");
            }
            r = attr_path(src.u.l->v[i], *attr);
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
            return oom(c, line);
        }
    }
    return as_generator(src, l, out);
}

static int do_tojson(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (check_args(c, line, "tojson", a, na, 4, kw))
        return -1;
    jv *ea = arg(a, na, 0, "ensure_ascii"), *ind = arg(a, na, 1, "indent");
    jv *sep = arg(a, na, 2, "separators"), *sk = arg(a, na, 3, "sort_keys");
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
    return put_str(c, line, &b, out);
}

static int do_join(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    jv src;
    if (jj_as_list(c, line, in, &src))
        return -1;
    jv *sep = arg(a, na, 0, "d"), *attr = arg(a, na, 1, "attribute");
    lq_sb b = {0};
    for (size_t i = 0; i < src.u.l->n; i++) {
        if (i && sep)
            jv_to_str(&b, *sep);
        if (attr && attr->t == JV_STR) {
            jv x = attr_path(src.u.l->v[i], *attr);
            jv_to_str(&b, x);
            jv_free(x);
        } else {
            jv_to_str(&b, src.u.l->v[i]);
        }
        if (b.n > JJ_MAX_OUT)
            break;
    }
    jv_free(src);
    return put_str(c, line, &b, out);
}

static int do_indent(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    jv *w = arg(a, na, 0, "width"), *first = arg(a, na, 1, "first"), *blank = arg(a, na, 2, "blank");
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
    if (to_str(c, line, in, &s))
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
    return put_str(c, line, &b, out);
}

int jj_filter(jctx *c, int line, const char *name, size_t n, jv in, jarg *a, size_t na, jv *out)
{
    *out = jv_undef();
    if (eq(name, n, "trim")) {
        jv s, *chars = arg(a, na, 0, "chars");
        if (to_str(c, line, in, &s))
            return -1;
        size_t x, y;
        if (chars && chars->t == JV_STR)
            strip(s.u.s->s, s.u.s->n, 3, chars->u.s->s, chars->u.s->n, &x, &y);
        else
            strip(s.u.s->s, s.u.s->n, 3, NULL, 0, &x, &y);
        *out = jv_str(s.u.s->s + x, y - x);
        jv_free(s);
        return jv_oom(*out) ? oom(c, line) : 0;
    }
    if (eq(name, n, "tojson"))
        return do_tojson(c, line, in, a, na, out);
    if (eq(name, n, "capitalize"))
        return case_map(c, line, in, 3, out);
    if (eq(name, n, "upper"))
        return case_map(c, line, in, 0, out);
    if (eq(name, n, "lower"))
        return case_map(c, line, in, 1, out);
    if (eq(name, n, "title"))
        return case_map(c, line, in, 2, out);
    if (eq(name, n, "length") || eq(name, n, "count")) {
        if ((in.t != JV_STR && in.t != JV_LIST && in.t != JV_DICT && in.t != JV_UNDEF) ||
            (in.t == JV_LIST && in.u.l->gen))
            return jj_fail(c, line, "%s has no length", in.t == JV_LIST ? "a generator" : jv_type_name(in));
        *out = jv_int((int64_t)len_of(in));
        return 0;
    }
    if (eq(name, n, "replace")) {
        jv s;
        if (to_str(c, line, in, &s))
            return -1;
        int rc = do_replace(c, line, s, arg(a, na, 0, "old"), arg(a, na, 1, "new"), arg(a, na, 2, "count"), out);
        jv_free(s);
        return rc;
    }
    if (eq(name, n, "default") || eq(name, n, "d")) {
        jv *dv = arg(a, na, 0, "default_value"), *boolean = arg(a, na, 1, "boolean");
        int use = in.t == JV_UNDEF || (boolean && jv_truthy(*boolean) && !jv_truthy(in));
        *out = use ? (dv ? jv_ref(*dv) : jv_str("", 0)) : jv_ref(in);
        return jv_oom(*out) ? oom(c, line) : 0;
    }
    if (eq(name, n, "first") || eq(name, n, "last")) {
        jv l;
        if (jj_as_list(c, line, in, &l))
            return -1;
        if (l.u.l->n)
            *out = jv_ref(l.u.l->v[eq(name, n, "first") ? 0 : l.u.l->n - 1]);
        jv_free(l);
        return 0;
    }
    if (eq(name, n, "join"))
        return do_join(c, line, in, a, na, out);
    if (eq(name, n, "list"))
        return jj_as_list(c, line, in, out);
    if (eq(name, n, "string"))
        return to_str(c, line, in, out);
    if (eq(name, n, "safe")) {
        if (to_str(c, line, in, out))
            return -1;
        out->safe = 1;
        return 0;
    }
    if (eq(name, n, "int") || eq(name, n, "float")) {
        int want_int = eq(name, n, "int");
        jv *dv = arg(a, na, 0, "default");
        double f = 0;
        int ok = 1;
        if (in.t == JV_INT || in.t == JV_BOOL)
            f = (double)(in.t == JV_INT ? in.u.i : in.u.b);
        else if (in.t == JV_FLOAT)
            f = in.u.f;
        else if (in.t == JV_STR) {
            char buf[64];
            size_t x, y;
            strip(in.u.s->s, in.u.s->n, 3, NULL, 0, &x, &y);
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
    if (eq(name, n, "items"))
        return items_list(c, line, in, out);
    if (eq(name, n, "selectattr") || eq(name, n, "rejectattr"))
        return select_items(c, line, in, a, na, 1, eq(name, n, "selectattr"), out);
    if (eq(name, n, "select") || eq(name, n, "reject"))
        return select_items(c, line, in, a, na, 0, eq(name, n, "select"), out);
    if (eq(name, n, "map"))
        return do_map(c, line, in, a, na, out);
    if (eq(name, n, "reverse")) {
        if (in.t == JV_STR) {
            lq_sb b = {0};
            const char *s = in.u.s->s;
            size_t e = in.u.s->n;
            while (e > 0) {
                size_t p = prev_char(s, e);
                lq_sb_put(&b, s + p, e - p);
                e = p;
            }
            return put_str(c, line, &b, out);
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
    if (eq(name, n, "abs")) {
        if (in.t == JV_INT && in.u.i != INT64_MIN)
            *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
        else if (in.t == JV_FLOAT)
            *out = jv_float(in.u.f < 0 ? -in.u.f : in.u.f);
        else
            return jj_fail(c, line, "abs of %s", jv_type_name(in));
        return 0;
    }
    if (eq(name, n, "indent"))
        return do_indent(c, line, in, a, na, out);
    if (eq(name, n, "unique")) {
        jv l, src;
        if (jj_as_list(c, line, in, &src))
            return -1;
        l = jv_list();
        if (jv_oom(l))
            return jv_free(src), oom(c, line);
        for (size_t i = 0; i < src.u.l->n; i++) {
            int seen = 0;
            for (size_t k = 0; k < l.u.l->n && !seen; k++)
                seen = jv_equal(l.u.l->v[k], src.u.l->v[i]);
            if (!seen && jl_push(l.u.l, jv_ref(src.u.l->v[i])))
                return jv_free(l), jv_free(src), oom(c, line);
        }
        jv_free(src);
        *out = l;
        return 0;
    }
    if (eq(name, n, "wordcount")) {
        jv l, s;
        if (to_str(c, line, in, &s))
            return -1;
        int rc = split(c, line, s, NULL, NULL, &l);
        jv_free(s);
        if (rc)
            return -1;
        *out = jv_int((int64_t)l.u.l->n);
        jv_free(l);
        return 0;
    }
    return jj_fail(c, line, "filter '%.*s' is not supported here", (int)n, name);
}

int jj_test(jctx *c, int line, const char *name, size_t n, jv in, jarg *a, size_t na, int *out)
{
    jv *x = arg(a, na, 0, NULL);
    if (eq(name, n, "defined")) *out = in.t != JV_UNDEF;
    else if (eq(name, n, "undefined")) *out = in.t == JV_UNDEF;
    else if (eq(name, n, "none")) *out = in.t == JV_NONE;
    else if (eq(name, n, "string")) *out = in.t == JV_STR;
    else if (eq(name, n, "mapping")) *out = in.t == JV_DICT && !in.u.d->ns;
    else if (eq(name, n, "iterable")) *out = in.t == JV_STR || in.t == JV_LIST || (in.t == JV_DICT && !in.u.d->ns) || in.t == JV_UNDEF;
    else if (eq(name, n, "sequence")) *out = in.t == JV_STR || in.t == JV_LIST || (in.t == JV_DICT && !in.u.d->ns) || in.t == JV_UNDEF;
    else if (eq(name, n, "number")) *out = in.t == JV_INT || in.t == JV_FLOAT || in.t == JV_BOOL;
    else if (eq(name, n, "integer")) *out = in.t == JV_INT;
    else if (eq(name, n, "float")) *out = in.t == JV_FLOAT;
    else if (eq(name, n, "boolean")) *out = in.t == JV_BOOL;
    else if (eq(name, n, "true")) *out = in.t == JV_BOOL && in.u.b;
    else if (eq(name, n, "false")) *out = in.t == JV_BOOL && !in.u.b;
    else if (eq(name, n, "callable")) *out = in.t == JV_FUNC;
    else if (eq(name, n, "lower") || eq(name, n, "upper")) {
        if (in.t != JV_STR)
            return jj_fail(c, line, "'%.*s' test needs a string", (int)n, name);
        int has_cased = 0, ok = 1;
        for (size_t i = 0; i < in.u.s->n; i++) {
            char ch = in.u.s->s[i];
            if (is_alpha((unsigned char)ch)) {
                has_cased = 1;
                if (eq(name, n, "lower") ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z'))
                    ok = 0;
            }
        }
        *out = has_cased && ok;
    } else if (eq(name, n, "odd") || eq(name, n, "even")) {
        if (in.t != JV_INT)
            return jj_fail(c, line, "'%.*s' test needs an integer", (int)n, name);
        *out = (in.u.i % 2 != 0) == eq(name, n, "odd");
    } else if (eq(name, n, "divisibleby")) {
        if (in.t != JV_INT || !x || x->t != JV_INT || x->u.i == 0)
            return jj_fail(c, line, "divisibleby needs non-zero integers");
        *out = in.u.i % x->u.i == 0;
    } else if (eq(name, n, "equalto") || eq(name, n, "eq") || eq(name, n, "==") || eq(name, n, "ne") ||
               eq(name, n, "!=")) {
        if (!x)
            return jj_fail(c, line, "'%.*s' test needs a value", (int)n, name);
        *out = jv_equal(in, *x) == (eq(name, n, "equalto") || eq(name, n, "eq") || eq(name, n, "=="));
    } else if (eq(name, n, "sameas")) {
        if (!x)
            return jj_fail(c, line, "sameas needs a value");
        /* Python identity: only singletons (none, booleans) compare meaningfully */
        *out = in.t == x->t && ((in.t == JV_NONE) || (in.t == JV_BOOL && in.u.b == x->u.b) ||
                                (in.t == JV_STR && in.u.s == x->u.s) || (in.t == JV_LIST && in.u.l == x->u.l) ||
                                (in.t == JV_DICT && in.u.d == x->u.d));
    } else if (eq(name, n, "in")) {
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
    } else if (eq(name, n, "gt") || eq(name, n, "ge") || eq(name, n, "lt") || eq(name, n, "le")) {
        if (!x || !((in.t == JV_INT || in.t == JV_FLOAT) && (x->t == JV_INT || x->t == JV_FLOAT)))
            return jj_fail(c, line, "'%.*s' test needs numbers", (int)n, name);
        double p = in.t == JV_INT ? (double)in.u.i : in.u.f, q = x->t == JV_INT ? (double)x->u.i : x->u.f;
        *out = eq(name, n, "gt") ? p > q : eq(name, n, "ge") ? p >= q : eq(name, n, "lt") ? p < q : p <= q;
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
        if (eq(name, n, "strip") || eq(name, n, "lstrip") || eq(name, n, "rstrip")) {
            jv *chars = arg(a, na, 0, NULL);
            int which = eq(name, n, "strip") ? 3 : eq(name, n, "lstrip") ? 1 : 2;
            size_t x, y;
            if (chars && chars->t == JV_STR)
                strip(obj.u.s->s, obj.u.s->n, which, chars->u.s->s, chars->u.s->n, &x, &y);
            else
                strip(obj.u.s->s, obj.u.s->n, which, NULL, 0, &x, &y);
            *out = jv_str(obj.u.s->s + x, y - x);
            return jv_oom(*out) ? oom(c, line) : 1;
        }
        if (eq(name, n, "split"))
            return split(c, line, obj, arg(a, na, 0, "sep"), arg(a, na, 1, "maxsplit"), out) ? -1 : 1;
        if (eq(name, n, "startswith") || eq(name, n, "endswith"))
            return prefix_test(c, line, obj, arg(a, na, 0, NULL), eq(name, n, "endswith"), out) ? -1 : 1;
        if (eq(name, n, "upper"))
            return case_map(c, line, obj, 0, out) ? -1 : 1;
        if (eq(name, n, "lower"))
            return case_map(c, line, obj, 1, out) ? -1 : 1;
        if (eq(name, n, "title"))
            return case_map(c, line, obj, 2, out) ? -1 : 1;
        if (eq(name, n, "capitalize"))
            return case_map(c, line, obj, 3, out) ? -1 : 1;
        if (eq(name, n, "replace"))
            return do_replace(c, line, obj, arg(a, na, 0, NULL), arg(a, na, 1, NULL), arg(a, na, 2, NULL), out) ? -1
                                                                                                             : 1;
        if (eq(name, n, "find")) {
            jv *x = arg(a, na, 0, NULL);
            if (!x || x->t != JV_STR)
                return jj_fail(c, line, "find needs a string");
            const char *f = memmem(obj.u.s->s, obj.u.s->n, x->u.s->s, x->u.s->n);
            *out = jv_int(f ? (int64_t)jj_utf8_len(obj.u.s->s, (size_t)(f - obj.u.s->s)) : -1);
            return 1;
        }
        if (eq(name, n, "join")) {
            jarg sep = {.v = obj};
            jv *x = arg(a, na, 0, NULL);
            if (!x)
                return jj_fail(c, line, "join needs a list");
            return do_join(c, line, *x, &sep, 1, out) ? -1 : 1;
        }
        return 0;
    }
    if (obj.t == JV_DICT && !obj.u.d->ns) {
        if (eq(name, n, "items"))
            return items_list(c, line, obj, out) ? -1 : 1;
        if (eq(name, n, "keys"))
            return jj_as_list(c, line, obj, out) ? -1 : 1;
        if (eq(name, n, "values")) {
            jv l = jv_list();
            if (jv_oom(l))
                return oom(c, line);
            for (size_t i = 0; i < obj.u.d->n; i++)
                if (jl_push(l.u.l, jv_ref(obj.u.d->v[i])))
                    return jv_free(l), oom(c, line);
            *out = l;
            return 1;
        }
        if (eq(name, n, "get")) {
            jv *k = arg(a, na, 0, NULL), *dv = arg(a, na, 1, NULL);
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
        if (eq(name, n, "append") || eq(name, n, "pop") || eq(name, n, "extend") || eq(name, n, "insert") ||
            eq(name, n, "remove") || eq(name, n, "clear") || eq(name, n, "sort") || eq(name, n, "reverse"))
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
            return oom(c, line);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
            if (l.u.l->n >= JJ_MAX_ITEMS) {
                jv_free(l);
                return jj_fail(c, line, "range of more than %u items", JJ_MAX_ITEMS);
            }
            if (jl_push(l.u.l, jv_int(i)))
                return jv_free(l), oom(c, line);
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
            return oom(c, line);
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
                        return jv_free(d), oom(c, line);
                continue;
            }
            if (jd_set(d.u.d, a[i].name, a[i].nn, jv_ref(a[i].v)))
                return jv_free(d), oom(c, line);
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
        return jv_oom(*out) ? oom(c, line) : 0;
    }
    default:
        return jj_fail(c, line, "internal: unknown built-in");
    }
}
