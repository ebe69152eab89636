/* Jinja built-ins' shared helpers: Python's string operations on our UTF-8 strings
 * (str.strip() strips Unicode whitespace; title()/capitalize() as Python's, ASCII-only case
 * mapping: non-ASCII letters pass unchanged), argument lookup, list views of values, and
 * the errors and results the filters, tests and methods share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja_internal.h"

int jj_in_list(const char *const *names, const char *s, size_t n)
{
    for (size_t i = 0; names[i]; i++)
        if (jj_eq(s, n, names[i]))
            return 1;
    return 0;
}

int jj_oom(jctx *c, int line)
{
    if (jj_budget_spent())
        return jj_fail(c, line, "the template built more than %zu MiB of values", (size_t)JJ_MAX_WORK >> 20);
    return jj_fail(c, line, "out of memory (or a value over the size or nesting bound)");
}

int jj_put_str(jctx *c, int line, lq_sb *b, jv *out)
{
    if (b->oom || b->n > JJ_MAX_OUT) {
        lq_sb_free(b);
        return jj_oom(c, line);
    }
    *out = jv_str(b->s ? b->s : "", b->n);
    lq_sb_free(b);
    return jv_oom(*out) ? jj_oom(c, line) : 0;
}

/* argument i (positional index pos or keyword name), or NULL */
jv *jj_arg(jarg *a, size_t na, size_t pos, const char *name)
{
    size_t p = 0;
    for (size_t i = 0; i < na; i++) {
        if (a[i].name) {
            if (name && jj_eq(a[i].name, a[i].nn, name))
                return &a[i].v;
        } else if (p++ == pos) {
            return &a[i].v;
        }
    }
    return NULL;
}

int jj_check_args(jctx *c, int line, const char *what, jarg *a, size_t na, size_t max_pos,
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
            ok |= jj_eq(a[i].name, a[i].nn, kw[k]);
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
size_t jj_prev_char(const char *s, size_t e)
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
void jj_strip(const char *s, size_t n, int which, const char *chars, size_t cn, size_t *a, size_t *b)
{
    size_t i = 0, e = n, l;
    if (which & 1)
        while (i < e && (chars ? in_chars(chars, cn, s, e, i, &l) : (l = space_at(s, e, i)) != 0))
            i += l;
    if (which & 2)
        while (e > i) {
            size_t p = jj_prev_char(s, e);
            if (chars ? !in_chars(chars, cn, s, e, p, &l) : space_at(s, e, p) != e - p)
                break;
            e = p;
        }
    *a = i;
    *b = e;
}

int jj_to_str(jctx *c, int line, jv v, jv *out)
{
    if (v.t == JV_STR) {
        *out = jv_ref(v);
        return 0;
    }
    lq_sb b = {0};
    jv_to_str(&b, v);
    return jj_put_str(c, line, &b, out);
}

int jj_is_alpha(unsigned char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
static char up(char ch) { return (ch >= 'a' && ch <= 'z') ? (char)(ch - 32) : ch; }
static char lo(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch; }

/* mode: 0 upper, 1 lower, 2 title, 3 capitalize */
int jj_case_map(jctx *c, int line, jv v, int mode, jv *out)
{
    jv s;
    if (jj_to_str(c, line, v, &s))
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
            prev_cased = jj_is_alpha((unsigned char)ch);
            break;
        default: b.s[i] = i == 0 ? up(ch) : lo(ch); break;
        }
    }
    jv_free(s);
    return jj_put_str(c, line, &b, out);
}

int jj_replace(jctx *c, int line, jv s, jv *old, jv *nw, jv *cnt, jv *out)
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
        return jj_put_str(c, line, &b, out);
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
    return jj_put_str(c, line, &b, out);
}

int jj_split(jctx *c, int line, jv s, jv *sep, jv *maxs, jv *out)
{
    jv l = jv_list();
    if (jv_oom(l))
        return jj_oom(c, line);
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
                jj_strip(p + st, n - st, 2, NULL, 0, &a, &b);
                if (jl_push(l.u.l, jv_str(p + st, b)))
                    return jv_free(l), jj_oom(c, line);
                break;
            }
            while (i < n && space_at(p, n, i) == 0)
                i++;
            if (jl_push(l.u.l, jv_str(p + st, i - st)))
                return jv_free(l), jj_oom(c, line);
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
                    return jv_free(l), jj_oom(c, line);
                break;
            }
            if (jl_push(l.u.l, jv_str(q, (size_t)(f - q))))
                return jv_free(l), jj_oom(c, line);
            q = f + sep->u.s->n;
            cnt++;
        }
    }
    *out = l;
    return 0;
}

size_t jj_len_of(jv v)
{
    switch (v.t) {
    case JV_STR: return jj_utf8_len(v.u.s->s, v.u.s->n);
    case JV_LIST: return v.u.l->n;
    case JV_DICT: return v.u.d->n;
    default: return 0;
    }
}

/* a dotted attribute path ("function.name") of an item, as Jinja's make_attrgetter */
jv jj_attr_path(jv item, jv path)
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

int jj_items_list(jctx *c, int line, jv v, jv *out)
{
    jv l = jv_list();
    if (jv_oom(l))
        return jj_oom(c, line);
    if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) {
            jv pr = jv_list();
            if (!jv_oom(pr))
                pr.u.l->tuple = 1;
            if (jv_oom(pr) || jl_push(pr.u.l, jv_str(v.u.d->k[i]->s, v.u.d->k[i]->n)) ||
                jl_push(pr.u.l, jv_ref(v.u.d->v[i])) || jl_push(l.u.l, pr)) {
                jv_free(l);
                return jj_oom(c, line);
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
        return jj_oom(c, line);
    if (v.t == JV_LIST) {
        for (size_t i = 0; i < v.u.l->n; i++)
            if (jl_push(l.u.l, jv_ref(v.u.l->v[i])))
                return jv_free(l), jj_oom(c, line);
    } else if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jl_push(l.u.l, jv_str(v.u.d->k[i]->s, v.u.d->k[i]->n)))
                return jv_free(l), jj_oom(c, line);
    } else if (v.t == JV_STR) {
        const char *s = v.u.s->s;
        size_t n = v.u.s->n;
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80)
                j++;
            if (jl_push(l.u.l, jv_str(s + i, j - i)))
                return jv_free(l), jj_oom(c, line);
            i = j;
        }
    } else if (v.t != JV_UNDEF) {
        jv_free(l);
        return jj_fail(c, line, "cannot make a list of %s", jv_type_name(v));
    }
    *out = l;
    return 0;
}

int jj_join(jctx *c, int line, jv in, jarg *a, size_t na, jv *out)
{
    jv src;
    if (jj_as_list(c, line, in, &src))
        return -1;
    jv *sep = jj_arg(a, na, 0, "d"), *attr = jj_arg(a, na, 1, "attribute");
    lq_sb b = {0};
    for (size_t i = 0; i < src.u.l->n; i++) {
        if (i && sep)
            jv_to_str(&b, *sep);
        if (attr && attr->t == JV_STR) {
            jv x = jj_attr_path(src.u.l->v[i], *attr);
            jv_to_str(&b, x);
            jv_free(x);
        } else {
            jv_to_str(&b, src.u.l->v[i]);
        }
        if (b.n > JJ_MAX_OUT)
            break;
    }
    jv_free(src);
    return jj_put_str(c, line, &b, out);
}
