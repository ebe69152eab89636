/* COMPILE ... INTO MODEL: a GGUF of the vindex's model that carries the overlay's edits.
 *
 * Why the edits are carried and not folded into weights: none of ours is a weight. A composed
 * feature reads the cosine of its gate with the residual *after* its layer's FFN add and adds
 * ((cos - 0.75) / 0.25)^2 x down there (src/vindex/edit_set.c); no FFN row computes that (an
 * FFN reads the RMS-normed residual *before* its add, through relu^2/SiLU, and the I2_S
 * projections hold only -1/0/+1 times one scale). KNN overrides match an exact residual and
 * name a token; subject edits are armed by the subject's tokens. Folding any of them into
 * weights would give a different model, so the file holds the base weights unchanged and the
 * edits as metadata, `larql.patches`: a JSON array of {"name", "patch"} with each patch of the
 * overlay in order as its .vlp (base_checksum dropped: the patches now belong to this file),
 * the vindex's own knn_store.bin first as a patch of insert_knn ops. Our loader applies them
 * (lq_overlay_apply_carried) and answers as the vindex with its patches; llama.cpp and other
 * engines ignore unknown metadata keys and run the unedited base model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_obj.h"
#include "larql/model.h"
#include "vindex/vindex_internal.h"

#define CARRY_KEY "larql.patches"

/* one {"name", "patch"} element: p's .vlp without base_checksum */
static int carry_one(json_t *arr, const lq_patch *p, const char *name, lq_err *err)
{
    char *text = NULL;
    int rc = lq_patch_json(p, &text, err);
    if (rc)
        return rc;
    json_error_t je;
    json_t *vlp = json_loads(text, 0, &je);
    free(text);
    if (!vlp)
        return lq_err_set(err, LQ_EFORMAT, "patch %s: its own JSON does not parse: %s", name, je.text);
    json_object_del(vlp, "base_checksum");
    json_t *e = lq_json_object();
    json_object_set_new(e, "name", json_string(name));
    json_object_set_new(e, "patch", vlp);
    json_array_append_new(arr, e);
    return LQ_OK;
}

/* the vindex's own KNN store as a patch of insert_knn ops (NULL when it has none) */
static int store_patch(const lq_knn_store *ks, const char *model, int hidden, lq_patch **out, lq_err *err)
{
    *out = NULL;
    if (!ks || !lq_knn_store_count(ks))
        return LQ_OK;
    lq_patch *p = NULL;
    int rc = lq_patch_create("knn_store.bin", model, hidden, &p, err);
    for (size_t i = 0; !rc && i < lq_knn_store_count(ks); i++) {
        lq_knn_entry e;
        lq_knn_store_get(ks, i, &e);
        lq_patch_op op;
        lq_patch_op_init(&op, LQ_OP_INSERT_KNN);
        op.layer = e.layer;
        op.key = e.key;
        op.target_id = e.target_id;
        op.target = e.target_token;
        op.entity = e.entity;
        op.relation = e.relation;
        op.confidence = e.confidence;
        rc = lq_patch_add(p, &op, err);
    }
    if (rc)
        lq_patch_free(p);
    else
        *out = p;
    return rc;
}

static int carried_json(const lq_overlay *o, const lq_knn_store *base_knn, char **out, size_t *n_patches, lq_err *err)
{
    const lq_vindex_info *vi = lq_vindex_get_info(lq_overlay_vindex(o));
    json_t *arr = json_array();
    if (!arr)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_patch *sp = NULL;
    int rc = store_patch(base_knn, vi->model, vi->hidden_size, &sp, err);
    if (!rc && sp)
        rc = carry_one(arr, sp, "knn_store.bin", err);
    lq_patch_free(sp);
    for (size_t i = 0; !rc && i < lq_overlay_n_patches(o); i++) {
        const lq_patch *p = lq_overlay_patch_at(o, i);
        if (lq_patch_n_ops(p))
            rc = carry_one(arr, p, lq_patch_name(p), err);
    }
    *n_patches = json_array_size(arr);
    if (!rc && !(*out = json_dumps(arr, JSON_COMPACT)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    json_decref(arr);
    return rc;
}

int lq_overlay_compile_model(const lq_overlay *o, const lq_knn_store *base_knn, const lq_model *m,
                             const char *tokenizer_dir, const char *path, size_t *n_patches, lq_err *err)
{
    if (!o || !m || !path || !*path)
        return lq_err_set(err, LQ_EINVAL, "compile into model: an overlay, its model and a path are required");
    struct stat st;
    if (stat(path, &st) == 0)
        return lq_err_set(err, LQ_EINVAL, "compile: %s already exists", path);
    size_t np = 0;
    char *carried = NULL;
    int rc = carried_json(o, base_knn, &carried, &np, err);
    if (rc)
        return rc;
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp) {
        free(carried);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    snprintf(tmp, n + 16, "%s.partial", path);
    const char *keys[] = {CARRY_KEY};
    const char *vals[] = {carried};
    lq_model_save_opts so = {.path = tmp, .tokenizer_dir = tokenizer_dir, .extra_keys = keys,
                             .extra_values = vals, .n_extra = np ? 1 : 0};
    /* written aside and renamed: an interrupted compile leaves no file at path */
    rc = lq_model_save_gguf(m, &so, err);
    if (!rc && rename(tmp, path) != 0)
        rc = lq_err_set(err, LQ_EIO, "compile: cannot rename %s to %s", tmp, path);
    if (rc)
        unlink(tmp);
    free(tmp);
    free(carried);
    if (!rc && n_patches)
        *n_patches = np;
    return rc;
}

int lq_overlay_apply_carried(lq_overlay *o, const char *gguf_path, size_t *n_applied, lq_err *err)
{
    if (n_applied)
        *n_applied = 0;
    lq_gguf *g = NULL;
    int rc = lq_gguf_open(gguf_path, &g, err);
    if (rc)
        return rc;
    const char *s = NULL;
    uint64_t len = 0;
    if (lq_gguf_find_key(g, CARRY_KEY) < 0) {
        lq_gguf_close(g);
        return LQ_OK; /* no edits carried */
    }
    if (lq_gguf_get_str(g, CARRY_KEY, &s, &len, NULL) != 0) {
        lq_gguf_close(g);
        return lq_err_set(err, LQ_EFORMAT, "%s: metadata " CARRY_KEY " is not a string", gguf_path);
    }
    json_error_t je;
    json_t *arr = json_loadb(s, len, 0, &je);
    lq_gguf_close(g);
    if (!json_is_array(arr)) {
        json_decref(arr);
        return lq_err_set(err, LQ_EFORMAT, "%s: metadata " CARRY_KEY " is not a JSON array", gguf_path);
    }
    int hidden = lq_vindex_get_info(lq_overlay_vindex(o))->hidden_size;
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *vlp = json_object_get(e, "patch");
        if (!name || !json_is_object(vlp)) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: " CARRY_KEY "[%zu] lacks a name or a patch object", gguf_path, i);
            break;
        }
        char *text = json_dumps(vlp, JSON_COMPACT);
        lq_patch *p = NULL;
        rc = text ? lq_patch_parse(text, strlen(text), name, hidden, &p, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
        free(text);
        if (!rc)
            rc = lq_overlay_apply(o, p, err);
        lq_patch_free(p);
        if (rc)
            break;
        if (n_applied)
            (*n_applied)++;
    }
    json_decref(arr);
    return rc;
}
