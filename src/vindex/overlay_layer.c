/* A session's overlay layered on the global one.
 *
 * A session's overlay is the fold of the global patches and its own. Its forward-pass edits
 * used to be one edit set built from that whole fold, so every session that generated held
 * its own copy of every global KNN key, composed feature and subject edit (64 sessions over
 * 3,000 global inserts: 458 MiB). Layered, the session's edit set holds only the session's
 * own edits and is stacked on the global set taken at the clone (lq_vx_edit_set_stack), which
 * every session and the global readers share.
 *
 * Stacking reads as the union of the two sets, which is what the fold gives as long as the
 * session's own patches only add: KNN inserts, subject inserts and feature inserts in slots
 * no inherited patch touched. An own op that deletes or rewrites something inherited (a
 * feature slot the global state has, a KNN delete, a delete by id) makes the union wrong, and
 * the whole fold is built instead, as before. */
#include <stdlib.h>
#include <string.h>

#include "vindex/overlay_internal.h"

static uint64_t feat_key(int layer, int feature)
{
    return (uint64_t)(uint32_t)layer << 32 | (uint32_t)feature;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static lq_edit_set *build_layered(const lq_overlay *o, lq_err *err);

static void layer_free(lq_overlay *o)
{
    lq_edit_set_unref(o->lower_es);
    free(o->inh);
    free(o->inh_feat);
    o->lower_es = NULL;
    o->inh = NULL;
    o->inh_feat = NULL;
    o->n_inh = o->n_inh_feat = 0;
}

int lq_overlay_clone_layered(lq_overlay *src, lq_overlay **out, lq_err *err)
{
    *out = NULL;
    if (!src)
        return lq_err_set(err, LQ_EINVAL, "overlay clone: no overlay");
    lq_edit_set *es = lq_overlay_edit_set(src, err);
    if (!es)
        return err && err->code ? err->code : LQ_ENOMEM;
    int rc = lq_overlay_clone(src, out, err);
    if (rc) {
        lq_edit_set_unref(es);
        return rc;
    }
    lq_overlay *o = *out;
    o->lower_es = es;
    o->n_inh = o->np;
    o->n_inh_feat = o->nf;
    o->inh = malloc((o->np ? o->np : 1) * sizeof *o->inh);
    o->inh_feat = malloc((o->nf ? o->nf : 1) * sizeof *o->inh_feat);
    if (!o->inh || !o->inh_feat) { /* not layered: the whole fold, as without it */
        layer_free(o);
        return LQ_OK;
    }
    if (o->np) /* patches is NULL before the first */
        memcpy(o->inh, o->patches, o->np * sizeof *o->inh);
    for (size_t i = 0; i < o->nf; i++)
        o->inh_feat[i] = feat_key(o->f[i].layer, o->f[i].feature);
    qsort(o->inh_feat, o->n_inh_feat, sizeof *o->inh_feat, cmp_u64);
    o->build_layered = build_layered;
    o->layer_free = layer_free;
    return LQ_OK;
}

/* Whether the patches after the inherited ones only add to what came with the clone. */
static int only_adds(const lq_overlay *o)
{
    if (o->np < o->n_inh)
        return 0;
    for (size_t i = 0; i < o->n_inh; i++)
        if (o->patches[i] != o->inh[i])
            return 0; /* an inherited patch removed or replaced */
    for (size_t i = o->n_inh; i < o->np; i++) {
        lq_patch_op op;
        for (size_t k = 0; lq_patch_op_at(o->patches[i], k, &op); k++) {
            switch (op.kind) {
            case LQ_OP_INSERT_KNN:
            case LQ_OP_INSERT_SUBJECT:
                break;
            case LQ_OP_INSERT:
            case LQ_OP_UPDATE:
            case LQ_OP_DELETE: {
                uint64_t key = feat_key(op.layer, op.feature);
                if (bsearch(&key, o->inh_feat, o->n_inh_feat, sizeof key, cmp_u64))
                    return 0;
                break;
            }
            default: /* KNN deletes and deletes by id can reach inherited edits */
                return 0;
            }
        }
    }
    return 1;
}

static lq_edit_set *build_layered(const lq_overlay *o, lq_err *err)
{
    if (!o->lower_es || !only_adds(o))
        return NULL;
    /* the session's own patches folded alone, over no initial KNN store (the lower set has it) */
    lq_overlay *t = NULL;
    if (lq_overlay_create(o->base, NULL, &t, err))
        return NULL;
    int rc = LQ_OK;
    for (size_t i = o->n_inh; !rc && i < o->np; i++) {
        lq_patch *p = lq_vx_patch_ref(o->patches[i]);
        if ((rc = ov_push_patch(t, p, err)))
            lq_patch_free(p);
    }
    if (!rc)
        rc = ov_rebuild(t, err);
    lq_edit_set *s = rc ? NULL : ov_build_full_edit_set(t, err);
    lq_overlay_free(t);
    if (s && lq_vx_edit_set_stack(s, o->lower_es)) {
        lq_edit_set_unref(s);
        s = NULL;
    }
    return s;
}
