/* Jinja values: reference-counted strings, lists, dicts (insertion-ordered, as Python's),
 * and their Python spellings: str(), repr() inside containers, json.dumps(). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"

static _Thread_local size_t budget = JJ_MAX_WORK;
static _Thread_local int spent;

void jj_budget_reset(void)
{
    budget = JJ_MAX_WORK;
    spent = 0;
}

int jj_budget_spent(void) { return spent; }

static int charge(size_t n)
{
    if (n > budget) {
        spent = 1;
        return -1;
    }
    budget -= n;
    return 0;
}

int jv_depth(jv v)
{
    return v.t == JV_LIST ? v.u.l->depth : v.t == JV_DICT ? v.u.d->depth : 0;
}

int jv_has_namespace(jv v)
{
    if (v.t == JV_DICT && v.u.d->ns)
        return 1;
    if (v.t == JV_LIST) {
        for (size_t i = 0; i < v.u.l->n; i++)
            if (jv_has_namespace(v.u.l->v[i]))
                return 1;
    } else if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_has_namespace(v.u.d->v[i]))
                return 1;
    }
    return 0;
}

jv jv_undef(void) { return (jv){.t = JV_UNDEF}; }
jv jv_none(void) { return (jv){.t = JV_NONE}; }
jv jv_bool(int b) { return (jv){.t = JV_BOOL, .u.b = !!b}; }
jv jv_int(int64_t i) { return (jv){.t = JV_INT, .u.i = i}; }
jv jv_float(double f) { return (jv){.t = JV_FLOAT, .u.f = f}; }

jv jv_str(const char *s, size_t n)
{
    jv v = {.t = JV_STR};
    if (n > JJ_MAX_OUT || charge(n + 16))
        return v; /* reported as out of memory: a bound, not a crash */
    jstr *p = malloc(sizeof *p + n + 1);
    if (!p)
        return v;
    p->rc = 1;
    p->n = n;
    if (n)
        memcpy(p->s, s, n);
    p->s[n] = 0;
    v.u.s = p;
    return v;
}

jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }

jv jv_list(void)
{
    jv v = {.t = JV_LIST};
    v.u.l = calloc(1, sizeof *v.u.l);
    if (v.u.l)
        v.u.l->rc = 1;
    return v;
}

jv jv_dict(void)
{
    jv v = {.t = JV_DICT};
    v.u.d = calloc(1, sizeof *v.u.d);
    if (v.u.d)
        v.u.d->rc = 1;
    return v;
}

jv jv_func(int builtin, const struct jnode *macro)
{
    jv v = {.t = JV_FUNC};
    v.u.fn = calloc(1, sizeof *v.u.fn);
    if (v.u.fn) {
        v.u.fn->rc = 1;
        v.u.fn->builtin = builtin;
        v.u.fn->macro = macro;
    }
    return v;
}

int jv_oom(jv v)
{
    switch (v.t) {
    case JV_STR: return !v.u.s;
    case JV_LIST: return !v.u.l;
    case JV_DICT: return !v.u.d;
    case JV_FUNC: return !v.u.fn;
    default: return 0;
    }
}

jv jv_ref(jv v)
{
    switch (v.t) {
    case JV_STR: if (v.u.s) v.u.s->rc++; break;
    case JV_LIST: if (v.u.l) v.u.l->rc++; break;
    case JV_DICT: if (v.u.d) v.u.d->rc++; break;
    case JV_FUNC: if (v.u.fn) v.u.fn->rc++; break;
    default: break;
    }
    return v;
}

void jv_free(jv v)
{
    switch (v.t) {
    case JV_STR:
        if (v.u.s && --v.u.s->rc == 0)
            free(v.u.s);
        break;
    case JV_LIST:
        if (v.u.l && --v.u.l->rc == 0) {
            for (size_t i = 0; i < v.u.l->n; i++)
                jv_free(v.u.l->v[i]);
            free(v.u.l->v);
            free(v.u.l);
        }
        break;
    case JV_DICT:
        if (v.u.d && --v.u.d->rc == 0) {
            for (size_t i = 0; i < v.u.d->n; i++) {
                free(v.u.d->k[i]);
                jv_free(v.u.d->v[i]);
            }
            free(v.u.d->k);
            free(v.u.d->v);
            free(v.u.d);
        }
        break;
    case JV_FUNC:
        if (v.u.fn && --v.u.fn->rc == 0)
            free(v.u.fn);
        break;
    default: break;
    }
}

int jl_push(jlist *l, jv v)
{
    if (jv_oom(v) || l->n >= JJ_MAX_ITEMS || jv_depth(v) + 1 > JJ_MAX_NEST || charge(sizeof v)) {
        jv_free(v);
        return -1;
    }
    if (jv_depth(v) + 1 > l->depth)
        l->depth = jv_depth(v) + 1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jv *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            jv_free(v);
            return -1;
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

jv *jd_get(const jdict *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i]->n == kn && !memcmp(d->k[i]->s, k, kn))
            return &d->v[i];
    return NULL;
}

int jd_set(jdict *d, const char *k, size_t kn, jv v)
{
    /* not charged: entries are made a bounded number per evaluation step, unlike list
     * elements (range(), split(), list concatenation) and string bytes */
    if (jv_oom(v) || jv_depth(v) + 1 > JJ_MAX_NEST) {
        jv_free(v);
        return -1;
    }
    if (jv_depth(v) + 1 > d->depth)
        d->depth = jv_depth(v) + 1;
    jv *old = jd_get(d, k, kn);
    if (old) {
        jv_free(*old);
        *old = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jstr **nk = realloc(d->k, cap * sizeof *nk);
        if (!nk) {
            jv_free(v);
            return -1;
        }
        d->k = nk;
        jv *nv = realloc(d->v, cap * sizeof *nv);
        if (!nv) {
            jv_free(v);
            return -1;
        }
        d->v = nv;
        d->cap = cap;
    }
    jstr *ks = kn <= JJ_MAX_OUT ? malloc(sizeof *ks + kn + 1) : NULL; /* uncharged, as the entry */
    if (!ks) {
        jv_free(v);
        return -1;
    }
    ks->rc = 1;
    ks->n = kn;
    memcpy(ks->s, k, kn);
    ks->s[kn] = 0;
    d->k[d->n] = ks;
    d->v[d->n++] = v;
    return 0;
}

int jv_truthy(jv v)
{
    switch (v.t) {
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->n != 0;
    case JV_LIST: return v.u.l->n != 0 || v.u.l->gen;
    case JV_DICT: return v.u.d->n != 0 || v.u.d->ns; /* a namespace object is truthy */
    case JV_FUNC: return 1;
    default: return 0;
    }
}

static int is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b; }

int jv_equal(jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JV_UNDEF: return 1; /* Jinja2's Undefined equals any Undefined */
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->n == b.u.s->n && !memcmp(a.u.s->s, b.u.s->s, a.u.s->n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n)
            return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
                return 0;
        return 1;
    case JV_DICT:
        if (a.u.d == b.u.d)
            return 1;
        if (a.u.d->ns || b.u.d->ns || a.u.d->n != b.u.d->n)
            return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jd_get(b.u.d, a.u.d->k[i]->s, a.u.d->k[i]->n);
            if (!o || !jv_equal(a.u.d->v[i], *o))
                return 0;
        }
        return 1;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

const char *jv_type_name(jv v)
{
    static const char *const names[] = {"undefined", "none", "bool", "int", "float",
                                        "string", "list", "dict", "function"};
    if (v.t == JV_DICT && v.u.d->ns)
        return "namespace";
    return names[v.t];
}

/* Python's repr(float): the shortest %.*g that reads back, with ".0" for integral values. */
static void put_float(lq_sb *b, double f)
{
    if (isnan(f)) {
        lq_sb_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        lq_sb_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    /* Python switches to exponent notation at 1e16 and below 1e-4, as %g does at the chosen
     * precision only partly: redo in Python's rule */
    char *e = strchr(buf, 'e');
    double a = fabs(f);
    if (!e && a >= 1e16) {
        /* %g printed all digits; Python uses exponent form */
        int p = 1;
        for (; p <= 17; p++) {
            snprintf(buf, sizeof buf, "%.*e", p - 1, f);
            if (strtod(buf, NULL) == f)
                break;
        }
        e = strchr(buf, 'e');
    } else if (e && a >= 1e-4 && a < 1e16) {
        snprintf(buf, sizeof buf, "%.17f", f);
        /* shortest fixed form that reads back */
        for (int p = 0; p <= 17; p++) {
            snprintf(buf, sizeof buf, "%.*f", p, f);
            if (strtod(buf, NULL) == f)
                break;
        }
        e = NULL;
    }
    if (e) {
        /* mantissa, then e, sign, at least two exponent digits (Python: 1e+16, 1e-05) */
        char m[40];
        size_t ml = (size_t)(e - buf);
        memcpy(m, buf, ml);
        m[ml] = 0;
        int ex = atoi(e + 1);
        lq_sb_puts(b, m);
        lq_sb_printf(b, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
        return;
    }
    lq_sb_puts(b, buf);
    if (!strchr(buf, '.') && !strchr(buf, 'n') && !strchr(buf, 'i'))
        lq_sb_puts(b, ".0");
}

/* Python repr() of a str: single quotes unless the text has ' and no ". */
static void put_repr_str(lq_sb *b, const char *s, size_t n)
{
    char q = (memchr(s, '\'', n) && !memchr(s, '"', n)) ? '"' : '\'';
    lq_sb_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == (unsigned char)q) {
            lq_sb_put(b, "\\", 1);
            lq_sb_put(b, s + i, 1);
        } else if (c == '\n') {
            lq_sb_puts(b, "\\n");
        } else if (c == '\r') {
            lq_sb_puts(b, "\\r");
        } else if (c == '\t') {
            lq_sb_puts(b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            lq_sb_printf(b, "\\x%02x", c);
        } else {
            lq_sb_put(b, s + i, 1);
        }
    }
    lq_sb_put(b, &q, 1);
}

static void put_repr(lq_sb *b, jv v)
{
    if (v.t == JV_STR)
        put_repr_str(b, v.u.s->s, v.u.s->n);
    else
        jv_to_str(b, v);
}

void jv_to_str(lq_sb *b, jv v)
{
    switch (v.t) {
    case JV_UNDEF: break;
    case JV_NONE: lq_sb_puts(b, "None"); break;
    case JV_BOOL: lq_sb_puts(b, v.u.b ? "True" : "False"); break;
    case JV_INT: lq_sb_printf(b, "%lld", (long long)v.u.i); break;
    case JV_FLOAT: put_float(b, v.u.f); break;
    case JV_STR: lq_sb_put(b, v.u.s->s, v.u.s->n); break;
    case JV_LIST:
        lq_sb_puts(b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                lq_sb_puts(b, ", ");
            put_repr(b, v.u.l->v[i]);
        }
        lq_sb_puts(b, v.u.l->tuple ? (v.u.l->n == 1 ? ",)" : ")") : "]");
        break;
    case JV_DICT:
        if (v.u.d->ns) {
            lq_sb_puts(b, "<Namespace ");
        }
        lq_sb_puts(b, v.u.d->ns ? "" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                lq_sb_puts(b, ", ");
            if (v.u.d->ns) {
                lq_sb_put(b, v.u.d->k[i]->s, v.u.d->k[i]->n);
                lq_sb_puts(b, "=");
            } else {
                put_repr_str(b, v.u.d->k[i]->s, v.u.d->k[i]->n);
                lq_sb_puts(b, ": ");
            }
            put_repr(b, v.u.d->v[i]);
        }
        lq_sb_puts(b, v.u.d->ns ? ">" : "}");
        break;
    case JV_FUNC: lq_sb_puts(b, "<function>"); break;
    }
}

static void put_indent(lq_sb *b, int indent, int level)
{
    lq_sb_put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        lq_sb_put(b, " ", 1);
}

static int cmp_keys(const void *a, const void *b)
{
    const jstr *x = *(jstr *const *)a, *y = *(jstr *const *)b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int to_json(lq_sb *b, jv v, int indent, int sort, const char *isep, const char *ksep, int level)
{
    if (level > JJ_MAX_DEPTH)
        return -1;
    switch (v.t) {
    case JV_NONE: lq_sb_puts(b, "null"); return 0;
    case JV_BOOL: lq_sb_puts(b, v.u.b ? "true" : "false"); return 0;
    case JV_INT: lq_sb_printf(b, "%lld", (long long)v.u.i); return 0;
    case JV_FLOAT:
        if (isnan(v.u.f))
            lq_sb_puts(b, "NaN");
        else if (isinf(v.u.f))
            lq_sb_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            put_float(b, v.u.f);
        return 0;
    case JV_STR: lq_sb_json_str(b, v.u.s->s, v.u.s->n); return 0;
    case JV_LIST:
        if (v.u.l->gen)
            return -1;
        if (!v.u.l->n) {
            lq_sb_puts(b, "[]");
            return 0;
        }
        lq_sb_puts(b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                lq_sb_puts(b, isep);
            if (indent >= 0)
                put_indent(b, indent, level + 1);
            if (to_json(b, v.u.l->v[i], indent, sort, isep, ksep, level + 1))
                return -1;
        }
        if (indent >= 0)
            put_indent(b, indent, level);
        lq_sb_puts(b, "]");
        return 0;
    case JV_DICT: {
        if (v.u.d->ns)
            return -1;
        if (!v.u.d->n) {
            lq_sb_puts(b, "{}");
            return 0;
        }
        size_t n = v.u.d->n;
        jstr **keys = malloc(n * sizeof *keys);
        if (!keys)
            return -1;
        memcpy(keys, v.u.d->k, n * sizeof *keys);
        if (sort)
            qsort(keys, n, sizeof *keys, cmp_keys);
        lq_sb_puts(b, "{");
        int rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
            if (i)
                lq_sb_puts(b, isep);
            if (indent >= 0)
                put_indent(b, indent, level + 1);
            lq_sb_json_str(b, keys[i]->s, keys[i]->n);
            lq_sb_puts(b, ksep);
            rc = to_json(b, *jd_get(v.u.d, keys[i]->s, keys[i]->n), indent, sort, isep, ksep, level + 1);
        }
        free(keys);
        if (rc)
            return -1;
        if (indent >= 0)
            put_indent(b, indent, level);
        lq_sb_puts(b, "}");
        return 0;
    }
    default: return -1;
    }
}

int jv_to_json(lq_sb *b, jv v, int indent, int sort_keys, const char *item_sep, const char *key_sep)
{
    if (!item_sep)
        item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep)
        key_sep = ": ";
    return to_json(b, v, indent, sort_keys, item_sep, key_sep, 0);
}

size_t jj_utf8_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t jj_utf8_off(const char *s, size_t n, size_t cp)
{
    size_t i = 0, c = 0;
    while (i < n) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == cp)
                return i;
            c++;
        }
        i++;
    }
    return n;
}

int jv_from_json(const json_t *j, jv *out, int depth)
{
    if (depth > JJ_MAX_DEPTH)
        return -1;
    switch (json_typeof(j)) {
    case JSON_NULL: *out = jv_none(); return 0;
    case JSON_TRUE: *out = jv_bool(1); return 0;
    case JSON_FALSE: *out = jv_bool(0); return 0;
    case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
    case JSON_STRING:
        *out = jv_str(json_string_value(j), json_string_length(j));
        return jv_oom(*out) ? -1 : 0;
    case JSON_ARRAY: {
        jv l = jv_list();
        if (jv_oom(l))
            return -1;
        for (size_t i = 0; i < json_array_size(j); i++) {
            jv e;
            if (jv_from_json(json_array_get(j, i), &e, depth + 1) || jl_push(l.u.l, e)) {
                jv_free(l);
                return -1;
            }
        }
        *out = l;
        return 0;
    }
    case JSON_OBJECT: {
        jv d = jv_dict();
        if (jv_oom(d))
            return -1;
        /* jansson iterates an object in insertion order: the order of the JSON text, as
         * Python's json.loads keeps it */
        void *it = json_object_iter((json_t *)j);
        while (it) {
            const char *key = json_object_iter_key(it);
            jv e;
            if (jv_from_json(json_object_iter_value(it), &e, depth + 1) ||
                jd_set(d.u.d, key, strlen(key), e)) {
                jv_free(d);
                return -1;
            }
            it = json_object_iter_next((json_t *)j, it);
        }
        *out = d;
        return 0;
    }
    default: return -1;
    }
}
