/* WHERE conditions tested on one row (a feature edge): the operators the library's filters
 * cannot say (ranges, !=, IN lists, score equality). String fields compare as the library's
 * filters do: case-insensitive substrings ("%x%" LIKE patterns reduce to their core), so
 * = , LIKE and IN agree with the pushed-down filters; != is their negation. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lql/exec_internal.h"
#include "core/str.h"

/* case-insensitive substring; an empty needle matches any text, a missing text nothing */

int lq_lql_field_kind(const char *f)
{
    if (!strcmp(f, "entity") || !strcmp(f, "token") || !strcmp(f, "target") || !strcmp(f, "top_token"))
        return LQ_LQL_FSTR_TOKEN;
    if (!strcmp(f, "relation"))
        return LQ_LQL_FSTR_RELATION;
    if (!strcmp(f, "layer"))
        return LQ_LQL_FNUM_LAYER;
    if (!strcmp(f, "feature"))
        return LQ_LQL_FNUM_FEATURE;
    if (!strcmp(f, "confidence") || !strcmp(f, "c_score") || !strcmp(f, "score") || !strcmp(f, "gate_score"))
        return LQ_LQL_FNUM_SCORE;
    return -1;
}

static int str_eq(const char *have, const lq_lql_value *v)
{
    char buf[256];
    if (v->kind != LQ_LV_STRING)
        return 0;
    return lq_icontains(have, lq_lql_like_core(v->s, buf, sizeof buf));
}

static int num_cmp(double have, int op, const lq_lql_value *v, int is_score)
{
    if (v->kind == LQ_LV_STRING || isnan(have))
        return 0;
    double x = v->num;
    int eq = is_score ? fabs(have - x) < 1e-4 : have == x; /* LARQL: a score tolerance */
    switch (op) {
    case LQ_LO_EQ: return eq;
    case LQ_LO_NEQ: return !eq;
    case LQ_LO_GT: return have > x;
    case LQ_LO_LT: return have < x;
    case LQ_LO_GTE: return have >= x;
    case LQ_LO_LTE: return have <= x;
    default: return 0;
    }
}

int lq_lql_row_match(const lq_lql_cond *c, const lq_lql_row *r)
{
    int k = lq_lql_field_kind(c->field);
    if (k < 0)
        return 1; /* callers decide about unknown fields before */
    if (c->op == LQ_LO_IN) {
        for (size_t i = 0; i < c->n_list; i++) {
            lq_lql_cond one = *c;
            one.op = LQ_LO_EQ;
            one.v = c->list[i];
            if (lq_lql_row_match(&one, r))
                return 1;
        }
        return 0; /* IN () matches nothing */
    }
    if (k == LQ_LQL_FSTR_TOKEN || k == LQ_LQL_FSTR_RELATION) {
        const char *have = k == LQ_LQL_FSTR_TOKEN ? r->token : r->relation;
        if (c->op == LQ_LO_EQ || c->op == LQ_LO_LIKE)
            return str_eq(have, &c->v);
        if (c->op == LQ_LO_NEQ)
            return !str_eq(have, &c->v);
        if (c->v.kind != LQ_LV_STRING || !have)
            return 0;
        int d = strcasecmp(have, c->v.s);
        return c->op == LQ_LO_GT ? d > 0 : c->op == LQ_LO_LT ? d < 0 : c->op == LQ_LO_GTE ? d >= 0 : d <= 0;
    }
    double have = k == LQ_LQL_FNUM_LAYER ? r->layer : k == LQ_LQL_FNUM_FEATURE ? r->feature : r->score;
    if (c->op == LQ_LO_LIKE)
        return 0;
    return num_cmp(have, c->op, &c->v, k == LQ_LQL_FNUM_SCORE);
}

int lq_lql_rows_match(const lq_lql_cond *const *cs, size_t n, const lq_lql_row *r)
{
    for (size_t i = 0; i < n; i++)
        if (!lq_lql_row_match(cs[i], r))
            return 0;
    return 1;
}
