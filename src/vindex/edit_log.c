/* Edits kept as rows of a table that several processes share (pg_infer's infer.edits, the
 * server's --state-db): each edit is computed once, by the process that writes it, into a
 * patch of its own (lq_overlay_plan_*), stored as a row (its .vlp), and every process folds
 * the rows it can see into its overlay in id order (lq_edit_log). The fold is the same
 * function of the same rows everywhere, so every reader answers alike once it has synced.
 *
 * Syncing is by ids: a reader lists the ids the table holds now; when the ids it applied
 * are a prefix of that list, only the rows after them are fetched and applied; otherwise (a
 * row was removed, or a transaction committed a lower id after a higher one was applied)
 * the overlay is rebuilt from the base and every row is applied again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "larql/patch.h"
#include "vindex/vindex_internal.h"

/* The scope a plan records its ops in: apart from every scope a front end uses, so the
 * plan's live patch starts empty whatever live edits the overlay already has. */
#define PLAN_SCOPE 0x504c414e

/* ops [from, n) of src as a new patch named name (src's base model and header kept) */
static int copy_ops(const lq_patch *src, size_t from, const char *name, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    int rc = lq_patch_create(name, lq_patch_base_model(src), hidden, out, err);
    for (size_t i = from; !rc && i < lq_patch_n_ops(src); i++) {
        lq_patch_op op;
        lq_patch_op_at(src, i, &op);
        rc = lq_patch_add(*out, &op, err);
    }
    if (!rc && lq_patch_base_checksum(src))
        rc = lq_patch_set_info(*out, lq_patch_created_at(src), lq_patch_base_checksum(src), lq_patch_author(src), err);
    if (rc) {
        lq_patch_free(*out);
        *out = NULL;
    }
    return rc;
}

static int hidden_of(const lq_overlay *o) { return lq_vindex_get_info(lq_overlay_vindex(o))->hidden_size; }

typedef struct plan {
    lq_overlay *scratch;
} plan;

static int plan_begin(const lq_overlay *o, plan *pl, lq_err *err)
{
    pl->scratch = NULL;
    if (!o)
        return lq_err_set(err, LQ_EINVAL, "edit plan: no overlay");
    int rc = lq_overlay_clone(o, &pl->scratch, err);
    if (rc)
        return rc;
    lq_overlay_set_scope(pl->scratch, PLAN_SCOPE);
    return LQ_OK;
}

/* The ops the edit appended to the scratch overlay's live patch, as a patch named name
 * (NULL when the edit wrote nothing). */
static int plan_end(plan *pl, int rc, const char *name, lq_patch **out, lq_err *err)
{
    *out = NULL;
    const lq_patch *e = rc ? NULL : lq_overlay_edits(pl->scratch);
    if (e && lq_patch_n_ops(e))
        rc = copy_ops(e, 0, name, hidden_of(pl->scratch), out, err);
    lq_overlay_free(pl->scratch);
    pl->scratch = NULL;
    return rc;
}

int lq_overlay_take_edits(lq_overlay *o, size_t n0, const char *name, lq_patch **out, lq_err *err)
{
    *out = NULL;
    const lq_patch *e = lq_overlay_edits(o);
    size_t n = e ? lq_patch_n_ops(e) : 0;
    if (n0 >= n)
        return LQ_OK;
    int rc = copy_ops(e, n0, name, hidden_of(o), out, err);
    if (!rc && (rc = lq_overlay_truncate_edits(o, n0, err))) {
        lq_patch_free(*out);
        *out = NULL;
    }
    return rc;
}

static int check_name(const char *name, lq_err *err)
{
    if (!name || !*name)
        return lq_err_set(err, LQ_EINVAL, "edit plan: a patch name is required");
    return LQ_OK;
}

int lq_overlay_plan_insert(const lq_overlay *o, struct lq_model *m, const lq_insert_params *p, const char *name,
                           lq_insert_result *r, lq_patch **out, lq_err *err)
{
    *out = NULL;
    plan pl;
    int rc = check_name(name, err);
    if (rc || (rc = plan_begin(o, &pl, err)))
        return rc;
    rc = lq_overlay_insert(pl.scratch, m, p, r, err);
    return plan_end(&pl, rc, name, out, err);
}

int lq_overlay_plan_delete(const lq_overlay *o, const lq_edit_where *w, const char *name, size_t *n,
                           lq_patch **out, lq_err *err)
{
    *out = NULL;
    plan pl;
    int rc = check_name(name, err);
    if (rc || (rc = plan_begin(o, &pl, err)))
        return rc;
    rc = lq_overlay_delete(pl.scratch, w, n, err);
    return plan_end(&pl, rc, name, out, err);
}

int lq_overlay_plan_update(const lq_overlay *o, const lq_edit_where *w, const char *set_target, float set_confidence,
                           const char *name, size_t *n, lq_patch **out, lq_err *err)
{
    *out = NULL;
    plan pl;
    int rc = check_name(name, err);
    if (rc || (rc = plan_begin(o, &pl, err)))
        return rc;
    rc = lq_overlay_update(pl.scratch, w, set_target, set_confidence, n, err);
    return plan_end(&pl, rc, name, out, err);
}

/* ---- the fold of a table's rows ---- */

struct lq_edit_log {
    const lq_vindex *base;
    lq_knn_store *init_knn; /* a copy: the store the overlay starts from at every rebuild */
    lq_overlay *o;
    int64_t *ids;           /* applied, ascending */
    size_t n, cap;
    size_t n_failed;        /* rows that did not apply (kept in ids: the prefix rule holds) */
};

static int knn_dup(const lq_knn_store *s, lq_knn_store **out, lq_err *err)
{
    *out = NULL;
    if (!s)
        return LQ_OK;
    int rc = lq_knn_store_create(lq_knn_store_hidden(s), out, err);
    for (size_t i = 0; !rc && i < lq_knn_store_count(s); i++) {
        lq_knn_entry e;
        if (lq_knn_store_get(s, i, &e))
            rc = lq_knn_store_add_entry(*out, &e, err);
    }
    if (rc) {
        lq_knn_store_free(*out);
        *out = NULL;
    }
    return rc;
}

int lq_edit_log_create(const lq_vindex *base, const lq_knn_store *init_knn, lq_edit_log **out, lq_err *err)
{
    *out = NULL;
    lq_edit_log *l = calloc(1, sizeof *l);
    if (!l)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    l->base = base;
    int rc = knn_dup(init_knn, &l->init_knn, err);
    if (!rc)
        rc = lq_overlay_create(base, l->init_knn, &l->o, err);
    if (rc) {
        lq_edit_log_free(l);
        return rc;
    }
    *out = l;
    return LQ_OK;
}

void lq_edit_log_free(lq_edit_log *l)
{
    if (!l)
        return;
    lq_overlay_free(l->o);
    lq_knn_store_free(l->init_knn);
    free(l->ids);
    free(l);
}

lq_overlay *lq_edit_log_overlay(const lq_edit_log *l) { return l ? l->o : NULL; }
size_t lq_edit_log_n_applied(const lq_edit_log *l) { return l ? l->n : 0; }
size_t lq_edit_log_n_failed(const lq_edit_log *l) { return l ? l->n_failed : 0; }
int64_t lq_edit_log_last_id(const lq_edit_log *l) { return l && l->n ? l->ids[l->n - 1] : -1; }

int lq_edit_log_sync(lq_edit_log *l, const int64_t *want, size_t n, size_t *from, int *reset, lq_err *err)
{
    *from = 0;
    if (reset)
        *reset = 0;
    for (size_t i = 1; i < n; i++)
        if (want[i] <= want[i - 1])
            return lq_err_set(err, LQ_EINVAL, "edit log: ids must be ascending (%" PRId64 " after %" PRId64 ")",
                              want[i], want[i - 1]);
    size_t k = 0;
    while (k < l->n && k < n && l->ids[k] == want[k])
        k++;
    if (k == l->n) {
        *from = k;
        return LQ_OK;
    }
    /* a row the log applied is gone or one arrived below it: fold everything again */
    int rc = lq_overlay_clear(l->o, err);
    if (rc)
        return rc;
    l->n = 0;
    l->n_failed = 0;
    if (reset)
        *reset = 1;
    return LQ_OK;
}

static int push_id(lq_edit_log *l, int64_t id, lq_err *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        int64_t *ids = realloc(l->ids, cap * sizeof *ids);
        if (!ids)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return LQ_OK;
}

void lq_edit_log_row_name(int64_t id, char out[32]) { snprintf(out, 32, "edit:%" PRId64, id); }

static int log_apply(lq_edit_log *l, int64_t id, const char *name, const lq_patch *p, const char *vlp, size_t len,
                     lq_err *err)
{
    if (l->n && id <= l->ids[l->n - 1])
        return lq_err_set(err, LQ_EINVAL, "edit log: row %" PRId64 " is not after the last applied (%" PRId64 ")",
                          id, l->ids[l->n - 1]);
    char rname[32];
    lq_edit_log_row_name(id, rname);
    const char *nm = name && *name ? name : rname;
    lq_patch *own = NULL;
    int rc = p ? copy_ops(p, 0, nm, hidden_of(l->o), &own, err) : lq_patch_parse(vlp, len, nm, lq_vindex_get_info(l->base)->hidden_size, &own, err);
    if (!rc)
        rc = lq_overlay_apply(l->o, own, err);
    lq_patch_free(own);
    if (rc == LQ_ENOMEM)
        return rc;
    /* a row that cannot apply here (another model's patch, a damaged row) stays counted as
     * applied, so the next sync does not refold for it; the caller reports it */
    int rc2 = push_id(l, id, err);
    if (rc2)
        return rc2;
    if (rc)
        l->n_failed++;
    return rc;
}

int lq_edit_log_apply(lq_edit_log *l, int64_t id, const char *name, const char *vlp, size_t len, lq_err *err)
{
    return log_apply(l, id, name, NULL, vlp, len, err);
}

int lq_edit_log_apply_patch(lq_edit_log *l, int64_t id, const char *name, const lq_patch *p, lq_err *err)
{
    if (!p)
        return lq_err_set(err, LQ_EINVAL, "edit log: no patch");
    return log_apply(l, id, name, p, NULL, 0, err);
}
