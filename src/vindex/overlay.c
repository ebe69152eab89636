/* The overlay: LARQL's PatchedVindex over a read-only base (crates/larql-vindex/src/patch/
 * overlay.rs, overlay_apply.rs), as the fold of an ordered list of patches.
 *
 * Feature state lives in one table keyed by (layer, feature): a meta override (target text
 * and id, c_score, provenance), a gate override row, up/down rows, or a tombstone. Per layer
 * counts of gate overrides and tombstones let the gate KNN skip the overlay work for layers
 * nothing touched. This file holds the table and the fold (patches applied, removed, the
 * live edits patch); the view the read path asks is overlay_view.c, the edit statements
 * (INSERT, DELETE, UPDATE, REBALANCE) overlay_edit.c, a session's layering overlay_layer.c. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/types.h>

#include "core/json_obj.h"
#include "core/f16.h"
#include "core/grow.h"
#include "core/softmax.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "vindex/vindex_internal.h"

#define EDITS_NAME "edits"

#include "vindex/overlay_internal.h"

/* ---- the feature table ---- */

static int rehash(lq_overlay *o, size_t cap)
{
    size_t *s = calloc(cap, sizeof *s);
    if (!s)
        return LQ_ENOMEM;
    for (size_t i = 0; i < o->nf; i++) {
        size_t j = ov_fhash(o->f[i].layer, o->f[i].feature) & (cap - 1);
        while (s[j])
            j = (j + 1) & (cap - 1);
        s[j] = i + 1;
    }
    free(o->slot);
    o->slot = s;
    o->hcap = cap;
    return LQ_OK;
}

static ov_feat *get_or_add(lq_overlay *o, int l, int f)
{
    ov_feat *e = ov_find(o, l, f);
    if (e)
        return e;
    if (lq_grow((void **)&o->f, &o->capf, o->nf + 1, sizeof *o->f))
        return NULL;
    if ((o->nf + 1) * 2 > o->hcap && rehash(o, o->hcap ? o->hcap * 2 : 128))
        return NULL;
    e = &o->f[o->nf];
    memset(e, 0, sizeof *e);
    e->layer = l;
    e->feature = f;
    e->target_id = -1;
    size_t j = ov_fhash(l, f) & (o->hcap - 1);
    while (o->slot[j])
        j = (j + 1) & (o->hcap - 1);
    o->slot[j] = ++o->nf;
    return e;
}

static void feat_clear(ov_feat *e)
{
    free(e->target);
    free(e->entity);
    free(e->relation);
}

int ov_is_dead(const lq_overlay *o, const char *id)
{
    for (size_t i = 0; id && i < o->n_dead; i++)
        if (!strcmp(o->dead[i], id))
            return 1;
    return 0;
}

static void clear_dead(lq_overlay *o)
{
    for (size_t i = 0; i < o->n_dead; i++)
        free(o->dead[i]);
    free(o->dead);
    o->dead = NULL;
    o->n_dead = 0;
}

static void clear_state(lq_overlay *o)
{
    for (size_t i = 0; i < o->nf; i++)
        feat_clear(&o->f[i]);
    o->nf = 0;
    if (o->hcap)
        memset(o->slot, 0, o->hcap * sizeof *o->slot);
    memset(o->n_gate, 0, (size_t)o->n_layers * sizeof *o->n_gate);
    memset(o->n_del, 0, (size_t)o->n_layers * sizeof *o->n_del);
    o->n_subj = 0;
    clear_dead(o);
    for (size_t i = 0; i < o->n_retired; i++)
        lq_patch_free(o->retired[i]);
    o->n_retired = 0;
}

/* After every change: the version moves on and the query-side matrices follow. */
static int changed(lq_overlay *o, lq_err *err)
{
    o->version++;
    if (o->defer) { /* nothing queries the overlay until the replay ends */
        o->gmats_stale = 1;
        return LQ_OK;
    }
    o->gmats_stale = 0;
    return ov_build_gmats(o) ? lq_err_set(err, LQ_ENOMEM, "overlay: out of memory for the gate matrices") : LQ_OK;
}

/* ---- KNN store copies ---- */

/* The live store starts as the initial one's entries, borrowed: the overlay frees its live
 * store before knn0. */
static int knn_borrow(const lq_knn_store *src, int hidden, lq_knn_store **out, lq_err *err)
{
    int rc = lq_knn_store_create(hidden, out, err);
    for (size_t i = 0; !rc && src && i < src->n; i++)
        rc = lq_vx_knn_store_add_borrowed(*out, &src->e[i], err);
    if (rc) {
        lq_knn_store_free(*out);
        *out = NULL;
    }
    return rc;
}

static int knn_copy(const lq_knn_store *src, int hidden, lq_knn_store **out, lq_err *err)
{
    int rc = lq_knn_store_create(hidden, out, err);
    for (size_t i = 0; !rc && src && i < src->n; i++) {
        lq_knn_entry e;
        lq_knn_store_get(src, i, &e);
        rc = lq_knn_store_add_entry(*out, &e, err);
        if (!rc) /* the key as it was: add_entry normalises again, which moves the last bit */
            memcpy((*out)->e[(*out)->n - 1].key, src->e[i].key, (size_t)hidden * sizeof(float));
    }
    if (rc) {
        lq_knn_store_free(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- validation and application of one op ---- */

/* Every vector of op holds finite values within LQ_EDIT_MAX_COMPONENT (an edit must never
 * make the forward pass NaN or infinite). */
static int vectors_finite(const lq_overlay *o, const lq_patch_op *op)
{
    const float *vs[4] = {op->gate, op->up, op->down, op->key};
    for (int k = 0; k < 4; k++)
        for (int i = 0; vs[k] && i < o->hidden; i++)
            if (!(fabsf(vs[k][i]) <= LQ_EDIT_MAX_COMPONENT)) /* NaN fails too */
                return 0;
    return 1;
}

/* A run of subject ops must start each edit with its first target token's value, and each
 * later token with its own: the ops that follow share them (lq_vx_edit_set_add_subject). */
static int subject_run_ok(const char *pname, const lq_patch_op *ops, size_t n, lq_err *err)
{
    int have_edit = 0, group_feature = -1, group_layer = -1;
    for (size_t i = 0; i < n; i++) {
        const lq_patch_op *op = &ops[i];
        if (op->kind != LQ_OP_INSERT_SUBJECT)
            continue;
        if (op->down) {
            if (op->feature == 0)
                have_edit = 1;
            else if (op->feature != group_feature + 1)
                have_edit = 0;
            group_feature = op->feature, group_layer = op->layer;
        }
        if (!have_edit || op->feature != group_feature || op->layer != group_layer)
            return lq_err_set(err, LQ_EINVAL,
                              "patch '%s' op %zu: insert_subject without the value it would share (each target "
                              "token's first op carries down_vector_b64, in order from feature 0)",
                              pname, i);
    }
    return LQ_OK;
}

static int check_op(const lq_overlay *o, const char *pname, size_t i, const lq_patch_op *op, lq_err *err)
{
    const lq_vindex *v = o->base;
    if (!vectors_finite(o, op))
        return lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: a vector holds NaN, infinity or a value past %g",
                          pname, i, (double)LQ_EDIT_MAX_COMPONENT);
    if (op->kind == LQ_OP_DELETE_KNN)
        return op->entity ? LQ_OK : lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: delete_knn needs an entity", pname, i);
    if (op->kind == LQ_OP_DELETE_EDIT)
        return op->id ? LQ_OK : lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: delete_edit needs an id", pname, i);
    if (op->layer < 0 || op->layer >= o->n_layers)
        return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: layer %d is outside the model's %d layers", pname, i,
                          op->layer, o->n_layers);
    if (op->kind == LQ_OP_INSERT_SUBJECT) {
        if (op->key)
            return lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: insert_subject takes no key vector", pname, i);
        if (op->target_id < 0 || op->target_id >= v->info.vocab_size)
            return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: target_id %d outside the vocabulary (%d)", pname,
                              i, (int)op->target_id, v->info.vocab_size);
        if (op->n_replaces < 0 || op->n_replaces > LQ_EDIT_MAX_REPLACED)
            return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: %d replaced answers (at most %d)", pname, i,
                              op->n_replaces, LQ_EDIT_MAX_REPLACED);
        for (int k = 0; k < op->n_replaces; k++)
            if (op->replaces[k] < 0 || op->replaces[k] >= v->info.vocab_size)
                return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: replaced token %d outside the vocabulary (%d)",
                                  pname, i, (int)op->replaces[k], v->info.vocab_size);
        if ((!op->gate && (op->feature == 0 || !op->down)) || !op->entity || !op->target)
            return lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: insert_subject needs entity, target, and gate vectors "
                              "(first target token) or a down vector (later ones)", pname, i);
        return LQ_OK;
    }
    if (op->kind == LQ_OP_INSERT_KNN) {
        if (op->target_id < 0 || op->target_id >= v->info.vocab_size)
            return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: target_id %d outside the vocabulary (%d)", pname,
                              i, (int)op->target_id, v->info.vocab_size);
        return op->key && op->target ? LQ_OK
                                     : lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: insert_knn needs key and target",
                                                  pname, i);
    }
    const lq_vx_layer *ly = &v->layers[op->layer];
    if (!ly->present || ly->num_features <= 0)
        return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: layer %d has no features in this vindex%s", pname, i,
                          op->layer, v->info.dense_only ? " (dense-only)" : "");
    if (op->feature < 0 || op->feature >= ly->num_features)
        return lq_err_set(err, LQ_ERANGE, "patch '%s' op %zu: feature %d outside layer %d's %d features", pname, i,
                          op->feature, op->layer, ly->num_features);
    if (op->kind == LQ_OP_INSERT && !op->target && !op->has_down_meta)
        return lq_err_set(err, LQ_EINVAL, "patch '%s' op %zu: insert needs a target", pname, i);
    return LQ_OK;
}

static int set_meta(ov_feat *e, const char *text, int32_t id, float c)
{
    char *t = strdup(text ? text : "");
    if (!t)
        return LQ_ENOMEM;
    free(e->target);
    e->target = t;
    e->target_id = id;
    e->c_score = c;
    e->has_meta = 1;
    return LQ_OK;
}

static void set_vec(lq_overlay *o, ov_feat *e, const float **dst, const float *src, int is_gate)
{
    if (!src)
        return;
    if (is_gate && !e->gate && !e->deleted)
        o->n_gate[e->layer]++;
    *dst = src;
}

static int set_str(char **dst, const char *s)
{
    if (!s)
        return LQ_OK;
    char *d = strdup(s);
    if (!d)
        return LQ_ENOMEM;
    free(*dst);
    *dst = d;
    return LQ_OK;
}

/* Drops every subject edit of entity (case-insensitive). */
static void subject_remove(lq_overlay *o, const char *entity)
{
    if (!entity)
        return;
    size_t w = 0;
    int drop = 0;
    for (size_t i = 0; i < o->n_subj; i++) {
        const lq_patch_op *op = &o->subj[i];
        if (op->feature == 0 && op->down) /* an edit's ops run from here to the next edit */
            drop = op->entity && !strcasecmp(op->entity, entity);
        if (!drop)
            o->subj[w++] = *op;
    }
    o->n_subj = w;
}

static int subject_add(lq_overlay *o, const lq_patch_op *op, lq_err *err)
{
    if (lq_grow((void **)&o->subj, &o->cap_subj, o->n_subj + 1, sizeof *o->subj))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    o->subj[o->n_subj++] = *op;
    return LQ_OK;
}

/* LARQL's apply semantics (§6.2 of the reference notes). Errors are allocation failures only:
 * everything else was checked by check_op. */
static int apply_op(lq_overlay *o, const lq_patch *p, size_t i, lq_err *err)
{
    int rc = LQ_OK;
    lq_patch_op opv;
    lq_patch_op_at(p, i, &opv);
    const lq_patch_op *op = &opv; /* its strings and vectors live as long as p */
    if (op->kind == LQ_OP_DELETE_EDIT || ov_is_dead(o, op->id))
        return LQ_OK; /* the edit it names is skipped by every rebuild (collect_dead) */
    if (op->kind == LQ_OP_INSERT_KNN) {
        const float *unit = lq_vx_patch_unit_key(p, i);
        float conf = isnan(op->confidence) ? 1.0f : op->confidence;
        if (!unit) { /* a zero key: the store's add says why it is refused */
            lq_knn_entry ke = {op->layer, op->key, op->target_id, op->target, op->entity, op->relation, conf};
            return lq_knn_store_add_entry(o->knn, &ke, err);
        }
        lq_vx_knn_entry be = {op->layer, op->target_id, (char *)op->target,
                              (char *)(op->entity ? op->entity : ""),
                              (char *)(op->relation ? op->relation : ""), conf, (float *)unit, 1};
        return lq_vx_knn_store_add_borrowed(o->knn, &be, err);
    }
    if (op->kind == LQ_OP_INSERT_SUBJECT)
        return subject_add(o, op, err);
    if (op->kind == LQ_OP_DELETE_KNN) {
        lq_vx_knn_remove(o->knn, op->entity, NULL);
        subject_remove(o, op->entity);
        return LQ_OK;
    }
    ov_feat *e = get_or_add(o, op->layer, op->feature);
    if (!e)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    switch (op->kind) {
    case LQ_OP_INSERT:
        if (e->deleted) { /* an insert clears the tombstone */
            e->deleted = 0;
            o->n_del[e->layer]--;
        }
        rc = op->has_down_meta ? set_meta(e, op->dm_token, op->dm_id, op->dm_c)
                               : set_meta(e, op->target, op->target_id,
                                          isnan(op->confidence) ? 0.9f : op->confidence);
        if (!rc)
            rc = set_str(&e->entity, op->entity);
        if (!rc)
            rc = set_str(&e->relation, op->relation);
        break;
    case LQ_OP_UPDATE:
        if (op->has_down_meta)
            rc = set_meta(e, op->dm_token, op->dm_id, op->dm_c);
        break;
    default: /* LQ_OP_DELETE: meta None + tombstone + the gate override dropped */
        if (!e->deleted)
            o->n_del[e->layer]++;
        if (e->gate)
            o->n_gate[e->layer]--;
        e->gate = NULL;
        e->deleted = 1;
        e->has_meta = 0;
        return LQ_OK;
    }
    if (rc)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!e->deleted)
        set_vec(o, e, &e->gate, op->gate, 1);
    set_vec(o, e, &e->up, op->up, 0);
    set_vec(o, e, &e->down, op->down, 0);
    return LQ_OK;
}

static int check_patch(const lq_overlay *o, const lq_patch *p, lq_err *err)
{
    const char *pm = lq_patch_base_model(p), *name = lq_patch_name(p);
    const char *bm = o->base->info.model ? o->base->info.model : "";
    if (pm && *pm && strcmp(pm, bm) && strcmp(pm, o->base->info.model_id ? o->base->info.model_id : ""))
        return lq_err_set(err, LQ_EINVAL, "patch '%s' is for model '%s'; this vindex holds '%s'", name, pm, bm);
    int ph = lq_vx_patch_hidden(p);
    if (ph && ph != o->hidden)
        return lq_err_set(err, LQ_EINVAL, "patch '%s' has vectors of %d values; the model's hidden size is %d", name,
                          ph, o->hidden);
    const char *ck = lq_patch_base_checksum(p);
    if (ck && *ck) {
        /* base_checksum: the sha256 index.json records for gate_vectors.bin */
        json_t *c = json_object_get(json_object_get(o->base->index, "checksums"), "gate_vectors.bin");
        if (json_is_string(c) && strcasecmp(json_string_value(c), ck))
            return lq_err_set(err, LQ_EINVAL, "patch '%s': base_checksum %.16s... is not this vindex's (%.16s...)",
                              name, ck, json_string_value(c));
    }
    size_t n = lq_patch_n_ops(p);
    lq_patch_op *ops = malloc((n ? n : 1) * sizeof *ops);
    if (!ops)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int rc = LQ_OK;
    for (size_t i = 0; !rc && i < n; i++) {
        lq_patch_op_at(p, i, &ops[i]);
        rc = check_op(o, name, i, &ops[i], err);
    }
    if (!rc)
        rc = subject_run_ok(name, ops, n, err);
    free(ops);
    return rc;
}

static int apply_ops(lq_overlay *o, const lq_patch *p, lq_err *err)
{
    for (size_t i = 0; i < lq_patch_n_ops(p); i++) {
        int rc = apply_op(o, p, i, err);
        if (rc)
            return rc;
    }
    return LQ_OK;
}

/* The ids every delete_edit op of the patches names. */
static int collect_dead(lq_overlay *o)
{
    for (size_t i = 0; i < o->np; i++) {
        lq_patch_op op;
        for (size_t k = 0; lq_patch_op_at(o->patches[i], k, &op); k++) {
            if (op.kind != LQ_OP_DELETE_EDIT || !op.id || ov_is_dead(o, op.id))
                continue;
            char **nd = realloc(o->dead, (o->n_dead + 1) * sizeof *nd);
            if (!nd)
                return LQ_ENOMEM;
            o->dead = nd;
            if (!(o->dead[o->n_dead] = strdup(op.id)))
                return LQ_ENOMEM;
            o->n_dead++;
        }
    }
    return LQ_OK;
}

/* State = fold of the patches over the initial store, less the edits deleted by id. */
int ov_rebuild(lq_overlay *o, lq_err *err)
{
    clear_state(o);
    if (collect_dead(o))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_knn_store *k = NULL;
    int rc = knn_borrow(o->knn0, o->hidden, &k, err);
    if (rc)
        return rc;
    lq_knn_store_free(o->knn);
    o->knn = k;
    for (size_t i = 0; !rc && i < o->np; i++)
        rc = apply_ops(o, o->patches[i], err);
    int rc2 = changed(o, err);
    return rc ? rc : rc2;
}

/* ---- lifecycle ---- */

int lq_overlay_create(const lq_vindex *base, const lq_knn_store *init_knn, lq_overlay **out, lq_err *err)
{
    *out = NULL;
    if (!base)
        return lq_err_set(err, LQ_EINVAL, "overlay: no base vindex");
    lq_overlay *o = calloc(1, sizeof *o);
    if (!o)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    o->base = base;
    o->view = *base;
    o->view.ov = o;
    o->view.view = &ov_view_ops; /* the read path asks through it (overlay_view.c) */
    pthread_mutex_init(&o->es_mu, NULL);
    o->hidden = base->info.hidden_size;
    o->n_layers = base->info.num_layers;
    o->n_gate = calloc((size_t)o->n_layers + 1, sizeof *o->n_gate);
    o->n_del = calloc((size_t)o->n_layers + 1, sizeof *o->n_del);
    o->gm = calloc((size_t)o->n_layers + 1, sizeof *o->gm);
    int rc = o->n_gate && o->n_del && o->gm ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc && init_knn && init_knn->hidden != o->hidden)
        rc = lq_err_set(err, LQ_EINVAL, "overlay: KNN store hidden %d, vindex hidden %d", init_knn->hidden, o->hidden);
    /* the vindex's own store outlives every overlay of it: borrowed, not copied per overlay */
    o->knn0_is_base = init_knn && init_knn == base->knn;
    if (!rc)
        rc = o->knn0_is_base ? knn_borrow(init_knn, o->hidden, &o->knn0, err)
                             : knn_copy(init_knn, o->hidden, &o->knn0, err);
    if (!rc)
        rc = knn_borrow(o->knn0, o->hidden, &o->knn, err);
    if (rc) {
        lq_overlay_free(o);
        return rc;
    }
    *out = o;
    return LQ_OK;
}

void lq_overlay_free(lq_overlay *o)
{
    if (!o)
        return;
    clear_state(o);
    free(o->f);
    free(o->slot);
    free(o->n_gate);
    free(o->n_del);
    for (int l = 0; o->gm && l < o->n_layers; l++)
        ov_gm_unref(o->gm[l]);
    free(o->gm);
    for (size_t i = 0; i < o->np; i++)
        lq_patch_free(o->patches[i]);
    free(o->patches);
    free(o->pscope);
    lq_knn_store_free(o->knn); /* before knn0 and the patches, from which it borrows */
    lq_knn_store_free(o->knn0);
    free(o->subj);
    free(o->retired);
    free(o->edits_name);
    clear_dead(o);
    lq_edit_set_unref(o->es);
    if (o->layer_free)
        o->layer_free(o);
    pthread_mutex_destroy(&o->es_mu);
    free(o);
}

/* The forward-pass edits of the overlay's state: its KNN entries and every live feature with
 * gate and down vectors. */
lq_edit_set *ov_build_full_edit_set(const lq_overlay *o, lq_err *err)
{
    lq_edit_set *s = lq_edit_set_from_knn(o->knn, o->n_layers, o->hidden, err);
    for (size_t i = 0; s && i < o->nf; i++) {
        const ov_feat *e = &o->f[i];
        if (!e->deleted && e->gate && e->down &&
            lq_vx_edit_set_add_feature(s, e->layer, e->gate, e->down, 1.0f)) {
            lq_edit_set_unref(s);
            s = NULL;
            lq_err_set(err, LQ_ENOMEM, "out of memory for an edit set");
        }
    }
    if (s && o->n_subj && lq_vx_edit_set_add_subject(s, o->base->tok, o->subj, o->n_subj)) {
        lq_edit_set_unref(s);
        s = NULL;
        lq_err_set(err, LQ_ENOMEM, "out of memory for an edit set");
    }
    return s;
}

lq_edit_set *lq_overlay_edit_set(lq_overlay *o, lq_err *err)
{
    if (!o) {
        lq_err_set(err, LQ_EINVAL, "edit set: no overlay");
        return NULL;
    }
    pthread_mutex_lock(&o->es_mu);
    if (!o->es || o->es_version != o->version) {
        lq_edit_set *s = o->build_layered ? o->build_layered(o, err) : NULL;
        if (!s)
            s = ov_build_full_edit_set(o, err);
        if (s) {
            lq_edit_set_unref(o->es);
            o->es = s;
            o->es_version = o->version;
        }
    }
    lq_edit_set *r = lq_edit_set_ref(o->es);
    if (!r)
        lq_err_set(err, LQ_ENOMEM, "out of memory for an edit set");
    pthread_mutex_unlock(&o->es_mu);
    return r;
}

static const char *edits_name(const lq_overlay *o) { return o->edits_name ? o->edits_name : EDITS_NAME; }

int lq_overlay_set_edits_name(lq_overlay *o, const char *name, lq_err *err)
{
    if (!o || !name || !*name)
        return lq_err_set(err, LQ_EINVAL, "overlay: an edits patch needs a name");
    /* only before this overlay recorded an edit of its own under the current name (a clone
     * may carry the global "edits" patch: that one stays an ordinary patch of the fold) */
    if (o->edits_name && lq_overlay_edits(o))
        return lq_err_set(err, LQ_EINVAL, "overlay: edits already recorded under '%s'", edits_name(o));
    char *n = strdup(name);
    if (!n)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    free(o->edits_name);
    o->edits_name = n;
    return LQ_OK;
}

int ov_push_patch(lq_overlay *o, lq_patch *p, lq_err *err)
{
    if (o->np == o->capp) {
        size_t cap = o->capp ? o->capp * 2 : 8;
        lq_patch **n = realloc(o->patches, cap * sizeof *n);
        if (n)
            o->patches = n;
        int *sc = n ? realloc(o->pscope, cap * sizeof *sc) : NULL;
        if (!sc)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        o->pscope = sc;
        o->capp = cap;
    }
    o->pscope[o->np] = o->scope;
    o->patches[o->np++] = p;
    return LQ_OK;
}

int lq_overlay_clone(const lq_overlay *src, lq_overlay **out, lq_err *err)
{
    int rc = lq_overlay_create(src->base, src->knn0_is_base ? src->base->knn : src->knn0, out, err);
    for (size_t i = 0; !rc && i < src->np; i++) {
        /* shared, not copied: a patch in an overlay changes only as the live edits patch,
         * and edit() copies it first when another overlay holds it too */
        lq_patch *p = lq_vx_patch_ref(src->patches[i]);
        (*out)->scope = src->pscope[i];
        if ((rc = ov_push_patch(*out, p, err)))
            lq_patch_free(p);
    }
    if (!rc)
        (*out)->scope = src->scope;
    if (!rc) {
        (*out)->gm_donor = src; /* its gate matrices, shared where the rows are the same */
        rc = ov_rebuild(*out, err);
        (*out)->gm_donor = NULL;
    }
    if (rc) {
        lq_overlay_free(*out);
        *out = NULL;
    }
    return rc;
}

const lq_vindex *lq_overlay_vindex(const lq_overlay *o) { return o ? &o->view : NULL; }
const lq_knn_store *lq_overlay_knn(const lq_overlay *o) { return o ? o->knn : NULL; }
uint64_t lq_overlay_version(const lq_overlay *o) { return o ? o->version : 0; }
size_t lq_overlay_n_patches(const lq_overlay *o) { return o ? o->np : 0; }
const lq_patch *lq_overlay_patch_at(const lq_overlay *o, size_t i) { return o && i < o->np ? o->patches[i] : NULL; }
size_t lq_overlay_n_features(const lq_overlay *o) { return o ? o->nf : 0; }

int lq_overlay_patch_scope(const lq_overlay *o, size_t i) { return o && i < o->np ? o->pscope[i] : -1; }

void lq_overlay_set_scope(lq_overlay *o, int scope)
{
    if (o)
        o->scope = scope;
}

/* the patch named name in the current scope */
static ssize_t find_patch(const lq_overlay *o, const char *name)
{
    for (size_t i = 0; o && name && i < o->np; i++)
        if (o->pscope[i] == o->scope && !strcmp(lq_patch_name(o->patches[i]), name))
            return (ssize_t)i;
    return -1;
}

const lq_patch *lq_overlay_edits(const lq_overlay *o)
{
    ssize_t i = find_patch(o, edits_name(o));
    return i < 0 ? NULL : o->patches[i];
}

void lq_vx_overlay_defer(lq_overlay *o, int on) { o->defer = on; }
int lq_vx_overlay_scope(const lq_overlay *o) { return o->scope; }

int lq_vx_overlay_settle(lq_overlay *o, lq_err *err)
{
    o->defer = 0;
    if (!o->gmats_stale)
        return LQ_OK;
    o->gmats_stale = 0;
    return ov_build_gmats(o) ? lq_err_set(err, LQ_ENOMEM, "overlay: out of memory for the gate matrices") : LQ_OK;
}

int lq_overlay_apply(lq_overlay *o, const lq_patch *p, lq_err *err)
{
    if (!o || !p)
        return lq_err_set(err, LQ_EINVAL, "overlay apply: overlay and patch are required");
    if (find_patch(o, lq_patch_name(p)) >= 0)
        return lq_err_set(err, LQ_EINVAL, "a patch named '%s' is already applied", lq_patch_name(p));
    int rc = check_patch(o, p, err);
    lq_patch *c = NULL;
    if (!rc)
        rc = lq_vx_patch_copy(p, &c, err);
    if (!rc && (rc = ov_push_patch(o, c, err)))
        lq_patch_free(c);
    if (rc)
        return rc;
    /* checked whole: only an allocation can fail here, and then the fold is redone without it.
     * A patch that removes edits by id (a shared edit log's rows carry such) is folded anew:
     * the edits it names may lie in any earlier patch */
    int deletes = 0;
    for (size_t i = 0; i < lq_patch_n_ops(c); i++) {
        lq_patch_op op;
        deletes |= lq_patch_op_at(c, i, &op) && op.kind == LQ_OP_DELETE_EDIT;
    }
    if (deletes) {
        rc = ov_rebuild(o, err);
    } else {
        rc = apply_ops(o, c, err);
        if (!rc)
            rc = changed(o, err);
    }
    if (rc) {
        lq_patch_free(o->patches[--o->np]);
        ov_rebuild(o, NULL);
    }
    return rc;
}

int lq_overlay_check_patch(const lq_overlay *o, const lq_patch *p, lq_err *err)
{
    if (!o || !p)
        return lq_err_set(err, LQ_EINVAL, "overlay check: overlay and patch are required");
    if (find_patch(o, lq_patch_name(p)) >= 0)
        return lq_err_set(err, LQ_EINVAL, "a patch named '%s' is already applied", lq_patch_name(p));
    return check_patch(o, p, err);
}

int lq_overlay_clear(lq_overlay *o, lq_err *err)
{
    if (!o)
        return lq_err_set(err, LQ_EINVAL, "overlay clear: no overlay");
    for (size_t i = 0; i < o->np; i++)
        lq_patch_free(o->patches[i]);
    o->np = 0;
    return ov_rebuild(o, err);
}

int lq_overlay_remove(lq_overlay *o, const char *name, lq_err *err)
{
    ssize_t f = find_patch(o, name);
    if (f >= 0) {
        size_t i = (size_t)f;
        lq_patch_free(o->patches[i]);
        memmove(o->patches + i, o->patches + i + 1, (o->np - i - 1) * sizeof *o->patches);
        memmove(o->pscope + i, o->pscope + i + 1, (o->np - i - 1) * sizeof *o->pscope);
        o->np--;
        return ov_rebuild(o, err);
    }
    return lq_err_set(err, LQ_ENOTFOUND, "patch '%s' not found", name ? name : "");
}

/* ---- edits: ops validated, applied, recorded in the live patch ---- */

static lq_patch *edits_patch(lq_overlay *o, lq_err *err)
{
    lq_patch *e = (lq_patch *)lq_overlay_edits(o);
    if (e && lq_vx_patch_shared(e)) { /* a clone holds it: this overlay appends to its own copy */
        lq_patch *c = NULL;
        if (lq_vx_patch_copy(e, &c, err))
            return NULL;
        lq_patch **r = realloc(o->retired, (o->n_retired + 1) * sizeof *r);
        if (!r) {
            lq_patch_free(c);
            lq_err_set(err, LQ_ENOMEM, "out of memory");
            return NULL;
        }
        o->retired = r;
        for (size_t i = 0; i < o->np; i++)
            if (o->patches[i] == e)
                o->patches[i] = c;
        o->retired[o->n_retired++] = e; /* the state borrows from it until the next rebuild */
        return c;
    }
    if (e)
        return e;
    if (lq_patch_create(edits_name(o), o->base->info.model, o->hidden, &e, err))
        return NULL;
    if (ov_push_patch(o, e, err)) {
        lq_patch_free(e);
        return NULL;
    }
    return e;
}

int lq_overlay_truncate_edits(lq_overlay *o, size_t n, lq_err *err)
{
    lq_patch *e = (lq_patch *)lq_overlay_edits(o);
    if (!e || n >= lq_patch_n_ops(e))
        return LQ_OK;
    lq_patch *t = NULL;
    int rc = lq_patch_create(edits_name(o), lq_patch_base_model(e), o->hidden, &t, err);
    lq_patch_op op;
    for (size_t i = 0; !rc && i < n && lq_patch_op_at(e, i, &op); i++)
        rc = lq_patch_add(t, &op, err);
    if (rc) {
        lq_patch_free(t);
        return rc;
    }
    for (size_t i = 0; i < o->np; i++)
        if (o->patches[i] == e)
            o->patches[i] = t;
    lq_patch_free(e);
    return ov_rebuild(o, err);
}

/* ops[0..n) as one edit: all checked before any is applied or recorded */
int ov_edit(lq_overlay *o, const lq_patch_op *ops, size_t n, lq_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = check_op(o, edits_name(o), i, &ops[i], err);
        if (rc)
            return rc;
    }
    int rc0 = subject_run_ok(edits_name(o), ops, n, err);
    if (rc0)
        return rc0;
    lq_patch *e = edits_patch(o, err);
    if (!e)
        return err ? err->code : LQ_ENOMEM;
    size_t n0 = lq_patch_n_ops(e);
    int rc = LQ_OK, deletes = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        rc = lq_patch_add(e, &ops[i], err);
        deletes |= ops[i].kind == LQ_OP_DELETE_EDIT;
    }
    if (deletes) { /* an edit removed by id: the state is the fold without it */
        if (!rc)
            rc = ov_rebuild(o, err);
    } else {
        for (size_t i = 0; !rc && i < n; i++) /* as recorded: the state borrows from e */
            rc = apply_op(o, e, n0 + i, err);
        if (!rc)
            rc = changed(o, err);
        else
            o->version++;
    }
    if (rc) /* out of memory midway: back to the recorded state */
        lq_overlay_truncate_edits(o, n0, NULL);
    return rc;
}

int lq_overlay_record(lq_overlay *o, const lq_patch *p, lq_err *err)
{
    if (!o || !p)
        return lq_err_set(err, LQ_EINVAL, "overlay record: overlay and ops are required");
    size_t n = lq_patch_n_ops(p);
    lq_patch_op *ops = malloc((n ? n : 1) * sizeof *ops);
    if (!ops)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        lq_patch_op_at(p, i, &ops[i]);
    int rc = n ? ov_edit(o, ops, n, err) : LQ_OK;
    free(ops);
    return rc;
}

/* ---- COMPILE ... INTO VINDEX ---- */

int lq_overlay_compile(const lq_overlay *o, const char *out_dir, lq_err *err)
{
    if (!o || !out_dir || !*out_dir)
        return lq_err_set(err, LQ_EINVAL, "compile: overlay and output directory are required");
    return lq_vx_compile(o->base, &o->view, o->knn, out_dir, err);
}

int lq_overlay_compact(const lq_overlay *o, const char *dir, lq_err *err)
{
    if (!o)
        return lq_err_set(err, LQ_EINVAL, "compact: overlay and directory are required");
    return lq_vx_compact(o->base, &o->view, o->knn, dir, err);
}
