/* LQL editing statements over the session's overlay (larql/patch.h): INSERT / UPDATE /
 * DELETE, patch recording (BEGIN PATCH ... SAVE PATCH), APPLY / REMOVE / SHOW PATCHES and
 * COMPILE CURRENT INTO VINDEX, with LARQL's messages (crates/larql-lql/src/executor/
 * mutation/). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lql/exec_internal.h"

static size_t edits_ops(const lq_lql *q)
{
    const lq_patch *e = lq_overlay_edits(q->o);
    return e ? lq_patch_n_ops(e) : 0;
}

void lq_lql_edit_summary(const lq_lql *q, lq_sb *out)
{
    const lq_knn_store *ks = lq_overlay_knn(q->o);
    lq_sb_printf(out, "Edits:           %zu patches, %zu patched features, %zu KNN entries\n",
                 lq_overlay_n_patches(q->o), lq_overlay_n_features(q->o), ks ? lq_knn_store_count(ks) : 0);
}

/* LARQL records every mutation: the first one starts an anonymous patch that BEGIN PATCH can
 * still name. */
static void start_recording(lq_lql *q, lq_sb *out)
{
    if (q->recording)
        return;
    q->recording = 1;
    q->patch_mark = edits_ops(q);
    lq_sb_puts(out, "Auto-patch started (use BEGIN PATCH \"file.vlp\" and SAVE PATCH to persist, "
                    "or edits are lost on exit)\n");
}

/* A new patch named name holding ops [from, end) of src. */
static int copy_ops(const lq_patch *src, size_t from, const char *name, const char *base_model, int hidden,
                    lq_patch **out, lq_err *err)
{
    int rc = lq_patch_create(name, base_model, hidden, out, err);
    for (size_t i = from; !rc && src && i < lq_patch_n_ops(src); i++) {
        lq_patch_op op;
        if (lq_patch_op_at(src, i, &op))
            rc = lq_patch_add(*out, &op, err);
    }
    if (rc) {
        lq_patch_free(*out);
        *out = NULL;
    }
    return rc;
}

static int exec_insert(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    const lq_vindex_info *vi = lq_vindex_get_info(q->v);
    lq_insert_params p;
    lq_insert_params_init(&p);
    p.entity = s->entity;
    p.relation = s->relation;
    p.target = s->target;
    p.layer = s->layer;
    /* the default: a subject edit (every phrasing reads it back) when the vindex has the
     * weights to compute one, else LARQL's KNN insert */
    p.mode = s->insert_mode == 2 || (s->insert_mode < 0 && vi->has_model_weights) ? LQ_INSERT_SUBJECT
             : s->insert_mode == 1                                               ? LQ_INSERT_COMPOSE
                                                                                 : LQ_INSERT_KNN;
    if (!isnan(s->confidence))
        p.confidence = (float)s->confidence;
    if (!isnan(s->alpha))
        p.alpha = (float)s->alpha;
    /* keys come from the model's residuals when the vindex has weights, else from the
     * entity's embedding (LARQL's fallback) */
    if (vi->has_model_weights && lq_lql_need_model(q, err))
        return err->code ? err->code : LQ_EINVAL;
    lq_sb pre = {0};
    int was = q->recording;
    start_recording(q, &pre);
    lq_insert_result r;
    int rc = lq_overlay_insert(q->o, vi->has_model_weights ? q->m : NULL, &p, &r, err);
    if (rc) {
        q->recording = was; /* nothing recorded */
        lq_sb_free(&pre);
        return rc;
    }
    if (pre.s)
        lq_sb_puts(out, pre.s);
    lq_sb_free(&pre);
    int first = r.n_layers > 0 ? r.layers[0] : p.layer, last = r.n_layers > 0 ? r.layers[r.n_layers < 64 ? r.n_layers - 1 : 63] : first;
    lq_sb_printf(out, "Inserted: %s \xe2\x80\x94[%s]\xe2\x86\x92 %s at L%d", s->entity, s->relation, s->target, first);
    if (r.mode == LQ_INSERT_SUBJECT) /* ours: the id DELETE FROM EDGES WHERE id = ... takes */
        lq_sb_printf(out, " (subject edit, id %s)\n  mode: subject \xe2\x80\x94 read back by every phrasing of the "
                          "question, chat included; p(%s) = %.2f after \"The %s of %s is\"\n",
                     r.id, s->target, r.target_prob, s->relation, s->entity);
    if (r.mode == LQ_INSERT_SUBJECT) {
        /* printed above, with its id */
    } else if (r.mode == LQ_INSERT_KNN) {
        lq_sb_puts(out, " (KNN store)\n");
        lq_sb_printf(out, "  mode: KNN \xe2\x80\x94 %s\n", r.weights ? "residual capture (Architecture B, retrieval-override)"
                                                              : "embedding key (no model weights)");
        lq_sb_printf(out, "  KNN store: %zu entries total\n", r.knn_total);
    } else {
        if (r.n_layers > 1)
            lq_sb_printf(out, "-%d (%d layers)", last, r.n_layers);
        lq_sb_puts(out, "\n  mode: compose (feature slot");
        for (int i = 0; i < r.n_layers && i < 64; i++)
            lq_sb_printf(out, i ? ", L%d F%d" : " L%d F%d", r.layers[i], r.features[i]);
        lq_sb_printf(out, "; gate from the %s)\n", r.weights ? "residual" : "entity embedding");
        if (r.weights) /* ours: LARQL's greedy balance, and what it reached */
            lq_sb_printf(out, "  balanced: down scale %.4g, p(%s) = %.2f after \"The %s of %s is\"\n", r.down_scale,
                         s->target, r.target_prob, s->relation, s->entity);
    }
    return 0;
}

/* The conditions the library's fields cannot say, tested per feature. */
typedef struct where_ctx {
    const lq_lql_cond **c;
    size_t n;
} where_ctx;

static int where_cb(void *ctx, int layer, int feature, const char *token, const char *relation)
{
    const where_ctx *w = ctx;
    lq_lql_row r = {token, relation, layer, feature, NAN};
    for (size_t i = 0; i < w->n; i++) /* a KNN entry (feature -1) has no feature to compare */
        if (!(feature < 0 && lq_lql_field_kind(w->c[i]->field) == LQ_LQL_FNUM_FEATURE) &&
            !lq_lql_row_match(w->c[i], &r))
            return 0;
    return 1;
}

/* ebuf, rbuf: 256 bytes each, hold the entity / relation patterns; wc->c: s->n_where slots.
 * = / LIKE on entity and relation and = on layer and feature are the library's fields; the
 * other operators (ranges, !=, IN) go to the per-feature test. Unknown fields are an error
 * here (LARQL ignores them, which would widen a DELETE). */
static int where_of(const lq_lql_stmt *s, lq_edit_where *w, where_ctx *wc, char *ebuf, char *rbuf, lq_err *err)
{
    lq_edit_where_init(w);
    for (size_t i = 0; i < s->n_where; i++) {
        const lq_lql_cond *c = &s->where[i];
        const char *f = c->field;
        int k = lq_lql_field_kind(f), eq = c->op == LQ_LO_EQ || c->op == LQ_LO_LIKE;
        if (k < 0 || k == LQ_LQL_FNUM_SCORE)
            return lq_err_set(err, LQ_EINVAL, "unknown field '%s' in WHERE (entity, relation, layer, feature)", f);
        if (k == LQ_LQL_FSTR_TOKEN && eq && c->v.kind == LQ_LV_STRING && !w->entity) {
            /* LIKE "%x%" and = both match substrings here (LARQL's = is a two-way substring) */
            w->entity = lq_lql_like_core(c->v.s, ebuf, 256);
        } else if (k == LQ_LQL_FSTR_RELATION && eq && c->v.kind == LQ_LV_STRING && !w->relation) {
            w->relation = lq_lql_like_core(c->v.s, rbuf, 256);
        } else if ((k == LQ_LQL_FNUM_LAYER || k == LQ_LQL_FNUM_FEATURE) && c->op == LQ_LO_EQ) {
            if (c->v.kind != LQ_LV_INT || c->v.num < 0 || c->v.num > 1e9)
                return lq_err_set(err, LQ_EINVAL, "WHERE %s needs = with a non-negative integer", f);
            if (k == LQ_LQL_FNUM_LAYER)
                w->layer = (int)c->v.num;
            else
                w->feature = (int)c->v.num;
        } else {
            wc->c[wc->n++] = c;
        }
    }
    if (wc->n) {
        w->match = where_cb;
        w->match_ctx = wc;
    }
    return 0;
}

/* DELETE FROM EDGES WHERE id = "…": one edit (an insert's every op) by the id its insert
 * printed. 1 = handled (rc in *rc), 0 = not this form. */
static int delete_by_id(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, int *rc, lq_err *err)
{
    if (s->kind != LQ_LS_DELETE || s->n_where != 1 || strcmp(s->where[0].field, "id"))
        return 0;
    const lq_lql_cond *c = &s->where[0];
    if (c->op != LQ_LO_EQ || c->v.kind != LQ_LV_STRING) {
        *rc = lq_err_set(err, LQ_EINVAL, "WHERE id needs = with a string (the id INSERT printed)");
        return 1;
    }
    lq_sb pre = {0};
    int was = q->recording;
    start_recording(q, &pre);
    *rc = lq_overlay_delete_edit(q->o, c->v.s, err);
    if (*rc)
        q->recording = was;
    else {
        if (pre.s)
            lq_sb_puts(out, pre.s);
        lq_sb_printf(out, "Deleted edit %s (patch overlay)\n", c->v.s);
    }
    lq_sb_free(&pre);
    return 1;
}

static int exec_delete_update(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    int by_id_rc = 0;
    if (delete_by_id(q, s, out, &by_id_rc, err))
        return by_id_rc;
    lq_edit_where w;
    char ebuf[256], rbuf[256];
    const lq_lql_cond *cs[64];
    where_ctx wc = {cs, 0};
    if (s->n_where > 64)
        return lq_err_set(err, LQ_EINVAL, "too many WHERE conditions (at most 64)");
    if (where_of(s, &w, &wc, ebuf, rbuf, err))
        return LQ_EINVAL;
    const char *target = NULL;
    float conf = NAN;
    for (size_t i = 0; i < s->n_set; i++) {
        const lq_lql_assign *a = &s->set[i];
        if (!strcmp(a->field, "target") || !strcmp(a->field, "top_token")) {
            if (a->v.kind != LQ_LV_STRING)
                return lq_err_set(err, LQ_EINVAL, "SET %s needs a string", a->field);
            target = a->v.s;
        } else if (!strcmp(a->field, "confidence") || !strcmp(a->field, "c_score")) {
            if (a->v.kind == LQ_LV_STRING)
                return lq_err_set(err, LQ_EINVAL, "SET %s needs a number", a->field);
            conf = (float)a->v.num;
        } else {
            return lq_err_set(err, LQ_EINVAL, "SET %s: only target and confidence can be updated", a->field);
        }
    }
    lq_sb pre = {0};
    int was = q->recording;
    start_recording(q, &pre);
    size_t n = 0;
    int del = s->kind == LQ_LS_DELETE;
    int rc = del ? lq_overlay_delete(q->o, &w, &n, err) : lq_overlay_update(q->o, &w, target, conf, &n, err);
    if (rc || !n) /* a statement that changed nothing starts no recording */
        q->recording = was;
    if (!rc && n && pre.s)
        lq_sb_puts(out, pre.s);
    lq_sb_free(&pre);
    if (rc)
        return rc;
    if (!n)
        lq_sb_puts(out, "  (no matching features found)\n");
    else
        lq_sb_printf(out, "%s %zu features (patch overlay)\n", del ? "Deleted" : "Updated", n);
    return 0;
}

static int exec_begin(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (q->patch_name)
        return lq_err_set(err, LQ_EINVAL, "patch '%s' is being recorded: SAVE PATCH first", q->patch_name);
    char *name = strdup(s->str);
    if (!name)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    q->patch_name = name;
    if (!q->recording) {
        q->recording = 1;
        q->patch_mark = edits_ops(q);
        lq_sb_printf(out, "Patch started: %s\n", name);
    } else { /* the edits since the auto-patch began become this patch (LARQL) */
        lq_sb_printf(out, "Patch started: %s (keeps %zu operations recorded so far)\n", name,
                     edits_ops(q) - q->patch_mark);
    }
    return 0;
}

static int exec_save(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    if (!q->recording)
        return lq_err_set(err, LQ_EINVAL, "no patch is being recorded (BEGIN PATCH \"file.vlp\" first)");
    if (s->str) { /* SAVE PATCH "file": names (or renames) the recording */
        char *nm = strdup(s->str);
        if (!nm)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        free(q->patch_name);
        q->patch_name = nm;
    }
    if (!q->patch_name)
        return lq_err_set(err, LQ_EINVAL, "the auto-patch has no file: name it with BEGIN PATCH \"file.vlp\", "
                                          "then SAVE PATCH (or SAVE PATCH \"file.vlp\")");
    const lq_vindex_info *vi = lq_vindex_get_info(q->v);
    lq_patch *p = NULL;
    int rc = copy_ops(lq_overlay_edits(q->o), q->patch_mark, q->patch_name, vi->model, vi->hidden_size, &p, err);
    if (!rc) /* created now, for this vindex (checked when applied), by the session's author */
        rc = lq_patch_set_info(p, NULL, lq_vindex_base_checksum(q->v), q->opts.author, err);
    if (!rc)
        rc = lq_patch_write(p, q->patch_name, err);
    if (!rc) {
        size_t ni, nu, nd;
        lq_patch_counts(p, &ni, &nu, &nd);
        lq_sb_printf(out, "Saved: %s (%zu inserts, %zu updates, %zu deletes)\n", q->patch_name, ni, nu, nd);
        free(q->patch_name);
        q->patch_name = NULL;
        q->recording = 0;
        q->patch_mark = edits_ops(q);
    }
    lq_patch_free(p);
    return rc;
}

static int exec_apply(lq_lql *q, const char *path, lq_sb *out, lq_err *err)
{
    const lq_vindex_info *vi = lq_vindex_get_info(q->v);
    lq_patch *f = NULL, *p = NULL;
    int rc = lq_patch_read(path, vi->hidden_size, &f, err);
    /* listed under the path it was applied from, so REMOVE PATCH "path" finds it */
    if (!rc)
        rc = copy_ops(f, 0, path, lq_patch_base_model(f), vi->hidden_size, &p, err);
    if (!rc) /* the header too: the overlay checks base_checksum against this vindex */
        rc = lq_patch_set_info(p, lq_patch_created_at(f), lq_patch_base_checksum(f), lq_patch_author(f), err);
    if (!rc)
        rc = lq_overlay_apply(q->o, p, err);
    if (!rc)
        lq_sb_printf(out, "Applied: %s (%zu operations)\n", path, lq_patch_n_ops(p));
    lq_patch_free(f);
    lq_patch_free(p);
    return rc;
}

static int exec_show_patches(lq_lql *q, lq_sb *out)
{
    size_t np = lq_overlay_n_patches(q->o);
    lq_sb_printf(out, "Active patches (%zu):\n", np);
    for (size_t i = 0; i < np; i++) {
        const lq_patch *p = lq_overlay_patch_at(q->o, i);
        size_t ni, nu, nd;
        lq_patch_counts(p, &ni, &nu, &nd);
        lq_sb_puts(out, "  ");
        lq_lql_pad(out, lq_patch_name(p), 30, 0);
        lq_sb_printf(out, " %zu operations (%zu inserts, %zu updates, %zu deletes)\n", lq_patch_n_ops(p), ni, nu, nd);
    }
    if (!np)
        lq_sb_puts(out, "  (no patches applied)\n");
    if (q->recording)
        lq_sb_printf(out, "Recording: %s (%zu operations)\n", q->patch_name ? q->patch_name : "(auto-patch, unnamed)",
                     edits_ops(q) - q->patch_mark);
    return 0;
}

int lq_lql_exec_edit(lq_lql *q, const lq_lql_stmt *s, lq_sb *out, lq_err *err)
{
    switch (s->kind) {
    case LQ_LS_INSERT: return exec_insert(q, s, out, err);
    case LQ_LS_DELETE:
    case LQ_LS_UPDATE: return exec_delete_update(q, s, out, err);
    case LQ_LS_BEGIN_PATCH: return exec_begin(q, s, out, err);
    case LQ_LS_SAVE_PATCH: return exec_save(q, s, out, err);
    case LQ_LS_APPLY_PATCH: return exec_apply(q, s->str, out, err);
    case LQ_LS_REMOVE_PATCH: {
        int rc = lq_overlay_remove(q->o, s->str, err);
        if (!rc)
            lq_sb_printf(out, "Removed: %s\n", s->str);
        return rc;
    }
    case LQ_LS_SHOW_PATCHES: return exec_show_patches(q, out);
    default: return lq_err_set(err, LQ_EINVAL, "statement kind %d cannot be executed", s->kind);
    }
}
