/* The overlay's state, shared by the files of the overlay (overlay.c: the feature table,
 * folding, edits and the view; overlay_layer.c: a session's overlay layered on the global one). */
#ifndef LARQL_VINDEX_OVERLAY_INTERNAL_H
#define LARQL_VINDEX_OVERLAY_INTERNAL_H

#include <pthread.h>

#include "larql/patch.h"
#include "vindex/vindex_internal.h"

/* A feature's vectors are borrowed from the patch op that set them: the overlay holds its
 * patches, a patch never changes in place while shared, and every change that drops or
 * rewrites a patch rebuilds the state, so clones of one state share every vector. */
typedef struct ov_feat {
    int layer, feature;
    int deleted;          /* tombstone */
    int has_meta;
    char *target;         /* meta: the target text */
    int32_t target_id;    /* meta: -1 = no vocabulary id */
    float c_score;
    char *entity, *relation;
    const float *gate, *up, *down; /* [hidden] or NULL, borrowed */
} ov_feat;

/* one layer's gate overrides as a matrix, shared between overlays (overlay_gates.c) */
typedef struct ov_gm {
    int refs, n;
    float *m;            /* [n, hidden] */
    int *feat;           /* [n]: the feature of each row */
} ov_gm;

struct lq_overlay {
    const lq_vindex *base;
    lq_vindex view;       /* *base with ov = this */
    int hidden, n_layers;
    lq_knn_store *knn;
    lq_knn_store *knn0;   /* the initial store (rebuilds start from it) */
    int knn0_is_base;     /* knn0 borrows the base vindex's own store */
    ov_feat *f;
    size_t nf, capf;
    size_t *slot;         /* open addressing over f: index + 1, 0 = empty; capacity hcap */
    size_t hcap;
    int *n_gate, *n_del;  /* [n_layers] */
    /* per layer, the gate overrides as one row-major matrix [n_gate[l], hidden] and their
     * features, rebuilt after every change, so that a query scores them with the gate kernel
     * in one call (LARQL keeps the same flattened matrix) */
    ov_gm **gm;           /* [n_layers], NULL where the layer has none (overlay_gates.c) */
    const struct lq_overlay *gm_donor; /* during a clone's build: the source, whose matrices
                                          it shares where equal */
    lq_patch **patches;
    int *pscope;          /* [capp]: the scope each patch was applied in */
    size_t np, capp;
    lq_patch_op *subj;    /* the live subject-edit ops, in order (folded from the patches;
                             their vectors and strings borrowed from them) */
    size_t n_subj, cap_subj;
    /* patches this overlay stopped holding (its edits patch, copied when a clone shared it)
     * while its state still borrows from them: released at the next rebuild */
    lq_patch **retired;
    size_t n_retired;
    char **dead;          /* ids of the edits that delete_edit ops removed (rebuilt with the state) */
    size_t n_dead;
    int scope;            /* the scope apply / remove / edits name patches in */
    int defer;            /* a journal replay: gate matrices rebuilt once at the end */
    int gmats_stale;
    uint64_t version;
    char *edits_name;     /* NULL = EDITS_NAME */
    /* the edit set of the current version, shared by concurrent readers (lq_overlay_edit_set
     * runs under a front end's read lock, so its cache has a lock of its own) */
    pthread_mutex_t es_mu;
    lq_edit_set *es;
    uint64_t es_version;
    /* a session's overlay layered on the global one (overlay_layer.c): the global edit set
     * at the clone, the patches that came with it and the features they made; NULL/0 else */
    lq_edit_set *lower_es;
    lq_patch **inh;
    size_t n_inh;
    uint64_t *inh_feat;   /* sorted (layer << 32 | feature) */
    size_t n_inh_feat;
    /* set by lq_overlay_clone_layered (overlay_layer.c), which overlay.c does not name: the
     * edit set of its own edits stacked on lower_es (NULL: build the whole fold), and what
     * frees the fields above */
    lq_edit_set *(*build_layered)(const lq_overlay *o, lq_err *err);
    void (*layer_free)(lq_overlay *o);
};

/* ---- the feature table's lookup (overlay.c keeps it, overlay_view.c reads it) ---- */

static inline size_t ov_fhash(int l, int f)
{
    uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)f;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

/* the feature (l, f) of the table, or NULL */
static inline ov_feat *ov_find(const lq_overlay *o, int l, int f)
{
    if (!o->hcap)
        return NULL;
    for (size_t j = ov_fhash(l, f) & (o->hcap - 1); o->slot[j]; j = (j + 1) & (o->hcap - 1)) {
        ov_feat *e = &o->f[o->slot[j] - 1];
        if (e->layer == l && e->feature == f)
            return e;
    }
    return NULL;
}

/* patch.c */
int lq_vx_patch_hidden(const lq_patch *p);
int lq_vx_patch_copy(const lq_patch *src, lq_patch **out, lq_err *err);
lq_patch *lq_vx_patch_ref(lq_patch *p);
int lq_vx_patch_shared(const lq_patch *p);
/* op i's insert_knn key at unit length (NULL: not an insert_knn, or a zero key) */
const float *lq_vx_patch_unit_key(const lq_patch *p, size_t i);

/* overlay.c */
/* ops[0..n) as one edit: all checked before any is applied or recorded in the live patch */
int ov_edit(lq_overlay *o, const lq_patch_op *ops, size_t n, lq_err *err);
/* the i-th live subject-edit op, or 0 past the last */
static inline int ov_subj_at(const lq_overlay *o, size_t i, lq_patch_op *op)
{
    if (i >= o->n_subj)
        return 0;
    *op = o->subj[i];
    return 1;
}
/* 1 if a delete_edit op of the patches removed the edit id */
int ov_is_dead(const lq_overlay *o, const char *id);
lq_edit_set *ov_build_full_edit_set(const lq_overlay *o, lq_err *err);
int ov_push_patch(lq_overlay *o, lq_patch *p, lq_err *err);
int ov_rebuild(lq_overlay *o, lq_err *err);

/* overlay_gates.c: rebuilds the matrices that changed since the last build */
int ov_build_gmats(lq_overlay *o);
void ov_gm_unref(ov_gm *g);

/* overlay_view.c: what the read path asks an overlay's view (vindex_internal.h) */
extern const lq_vx_view ov_view_ops;


#endif
