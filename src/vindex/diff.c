/* DIFF of two vindexes (LARQL's executor/lifecycle/diff.rs): feature by feature, a feature is
 * modified when its top token differs or its c_score moved by more than 0.01, removed when
 * only a has metadata, added when only b has. Either side may be an overlay's view, so a
 * vindex is compared with its patches the same way. MERGE (executor/mutation/merge.rs): every
 * feature of a source vindex written into an overlay's metadata under a conflict rule, or a
 * patch's operations merged into the live edits under the same rules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "larql/patch.h"
#include "larql/vindex.h"
#include "vindex/vindex_internal.h"
#include "core/str.h"

static int layer_features(const lq_vindex *v, int l)
{
    const void *rows = NULL;
    int nf = 0;
    lq_err e = {0};
    if (l >= lq_vindex_get_info(v)->num_layers || lq_vindex_gate_layer(v, l, &rows, &nf, &e))
        return 0;
    return nf;
}

static const char *meta_text(const lq_vindex *v, const lq_feature_meta *m)
{
    return m->top_token ? m->top_token : lq_vindex_token_text(v, m->top_token_id);
}

/* case-insensitive substring; an empty needle matches any text, a missing text nothing */

int lq_vindex_diff(const lq_vindex *a, const lq_vindex *b, const lq_diff_params *p, lq_diff_fn fn, void *ctx,
                   lq_err *err)
{
    if (!a || !b || !fn)
        return lq_err_set(err, LQ_EINVAL, "diff: two vindexes and a callback are required");
    const lq_vindex_info *ia = lq_vindex_get_info(a), *ib = lq_vindex_get_info(b);
    if (ia->hidden_size != ib->hidden_size)
        return lq_err_set(err, LQ_EINVAL, "diff: hidden sizes differ (%d vs %d)", ia->hidden_size, ib->hidden_size);
    int L = ia->num_layers;
    if (p && p->layer >= L)
        return lq_err_set(err, LQ_ERANGE, "layer %d is outside the model (layers 0-%d)", p->layer, L - 1);
    for (int l = 0; l < L; l++) {
        if (p && p->layer >= 0 && l != p->layer)
            continue;
        int na = layer_features(a, l), nb = layer_features(b, l), nf = na > nb ? na : nb;
        for (int f = 0; f < nf; f++) {
            lq_diff_row r;
            memset(&r, 0, sizeof r);
            r.layer = l;
            r.feature = f;
            r.has_a = lq_vindex_feature_meta(a, l, f, &r.a);
            r.has_b = lq_vindex_feature_meta(b, l, f, &r.b);
            if (!r.has_a && !r.has_b)
                continue;
            r.tok_a = r.has_a ? meta_text(a, &r.a) : NULL;
            r.tok_b = r.has_b ? meta_text(b, &r.b) : NULL;
            if (r.has_a && r.has_b) {
                if (!strcmp(r.tok_a, r.tok_b) && fabsf(r.a.c_score - r.b.c_score) <= 0.01f)
                    continue;
                r.status = LQ_DIFF_MODIFIED;
            } else {
                r.status = r.has_a ? LQ_DIFF_REMOVED : LQ_DIFF_ADDED;
            }
            if (p && p->relation) {
                const char *la = lq_vindex_probe_label(a, l, f), *lb = lq_vindex_probe_label(b, l, f);
                if (!lq_icontains(la, p->relation) && !lq_icontains(lb, p->relation))
                    continue;
            }
            if (p && p->entity && !lq_icontains(r.tok_a, p->entity) && !lq_icontains(r.tok_b, p->entity))
                continue;
            if (fn(ctx, &r))
                return LQ_OK;
        }
    }
    return LQ_OK;
}

typedef struct patch_ctx {
    lq_patch *p;
    lq_err *err;
    int rc;
} patch_ctx;

static int to_op(void *ctx, const lq_diff_row *r)
{
    patch_ctx *c = ctx;
    lq_patch_op op;
    if (r->status == LQ_DIFF_REMOVED) {
        lq_patch_op_init(&op, LQ_OP_DELETE);
        op.reason = "removed in target";
    } else { /* the b side's metadata: an update of the slot's down_meta */
        lq_patch_op_init(&op, LQ_OP_UPDATE);
        op.has_down_meta = 1;
        op.dm_token = r->tok_b;
        op.dm_id = r->b.top_token_id;
        op.dm_c = r->b.c_score;
        op.confidence = r->b.c_score;
    }
    op.layer = r->layer;
    op.feature = r->feature;
    c->rc = lq_patch_add(c->p, &op, c->err);
    return c->rc != 0;
}

int lq_vindex_diff_patch(const lq_vindex *a, const lq_vindex *b, const lq_diff_params *p, const char *name,
                         lq_patch **out, lq_err *err)
{
    *out = NULL;
    const lq_vindex_info *ia = lq_vindex_get_info(a);
    patch_ctx c = {NULL, err, 0};
    int rc = lq_patch_create(name, ia->model, ia->hidden_size, &c.p, err);
    if (!rc)
        rc = lq_vindex_diff(a, b, p, to_op, &c, err);
    if (!rc)
        rc = c.rc;
    if (rc)
        lq_patch_free(c.p);
    else
        *out = c.p;
    return rc;
}

/* ---- MERGE ---- */

/* Should the source's value replace the one there? */
static int wins(int strategy, int has_existing, float src_c, float dst_c)
{
    if (!has_existing || strategy == LQ_MERGE_KEEP_SOURCE)
        return 1;
    if (strategy == LQ_MERGE_KEEP_TARGET)
        return 0;
    return src_c > dst_c; /* HIGHEST_CONFIDENCE */
}

int lq_overlay_merge_vindex(lq_overlay *o, const lq_vindex *src, int strategy, size_t *merged, size_t *skipped,
                            lq_err *err)
{
    *merged = *skipped = 0;
    const lq_vindex *dst = lq_overlay_vindex(o);
    const lq_vindex_info *is = lq_vindex_get_info(src), *id = lq_vindex_get_info(dst);
    if (is->hidden_size != id->hidden_size || is->num_layers != id->num_layers)
        return lq_err_set(err, LQ_EINVAL, "merge: the source has %d layers x hidden %d, the target %d x %d",
                          is->num_layers, is->hidden_size, id->num_layers, id->hidden_size);
    lq_patch *p = NULL;
    int rc = lq_patch_create("merge", id->model, id->hidden_size, &p, err);
    for (int l = 0; !rc && l < is->num_layers; l++) {
        int nf = layer_features(src, l), nd = layer_features(dst, l);
        for (int f = 0; !rc && f < nf && f < nd; f++) {
            lq_feature_meta ms, md;
            if (!lq_vindex_feature_meta(src, l, f, &ms))
                continue;
            int has = lq_vindex_feature_meta(dst, l, f, &md);
            if (!wins(strategy, has, ms.c_score, has ? md.c_score : 0)) {
                (*skipped)++;
                continue;
            }
            (*merged)++;
            const char *ts = meta_text(src, &ms);
            if (has && !strcmp(ts, meta_text(dst, &md)) && ms.c_score == md.c_score)
                continue; /* already the same: nothing to record */
            lq_patch_op op;
            lq_patch_op_init(&op, LQ_OP_UPDATE);
            op.layer = l;
            op.feature = f;
            op.has_down_meta = 1;
            op.dm_token = ts;
            op.dm_id = ms.top_token_id;
            op.dm_c = ms.c_score;
            op.confidence = ms.c_score;
            rc = lq_patch_add(p, &op, err);
        }
    }
    if (!rc && lq_patch_n_ops(p))
        rc = lq_overlay_record(o, p, err);
    lq_patch_free(p);
    return rc;
}

int lq_overlay_merge_patch(lq_overlay *o, const lq_patch *src, int strategy, size_t *merged, size_t *skipped,
                           lq_err *err)
{
    *merged = *skipped = 0;
    const lq_vindex *dst = lq_overlay_vindex(o);
    const lq_vindex_info *id = lq_vindex_get_info(dst);
    lq_patch *p = NULL;
    int rc = lq_patch_create("merge", id->model, id->hidden_size, &p, err);
    for (size_t i = 0; !rc && i < lq_patch_n_ops(src); i++) {
        lq_patch_op op;
        if (!lq_patch_op_at(src, i, &op))
            continue;
        int slot = op.kind == LQ_OP_INSERT || op.kind == LQ_OP_UPDATE || op.kind == LQ_OP_DELETE;
        if (slot && op.layer >= 0 && op.layer < id->num_layers) {
            /* a slot the target already has metadata for is a conflict */
            lq_feature_meta md;
            int has = lq_vindex_feature_meta(dst, op.layer, op.feature, &md);
            float c = !isnan(op.confidence) ? op.confidence : op.has_down_meta ? op.dm_c : 0.0f;
            if (!wins(strategy, has, c, has ? md.c_score : 0)) {
                (*skipped)++;
                continue;
            }
        }
        (*merged)++;
        rc = lq_patch_add(p, &op, err);
    }
    if (!rc && lq_patch_n_ops(p))
        rc = lq_overlay_record(o, p, err);
    lq_patch_free(p);
    return rc;
}

/* ---- COMPILE ... ON CONFLICT ---- */

typedef struct slot_w {
    int layer, feature;
    size_t patch, op;      /* patch index (the live edits last), op index in it */
    float conf;
} slot_w;

static int slot_cmp(const void *x, const void *y)
{
    const slot_w *a = x, *b = y;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    if (a->feature != b->feature)
        return a->feature < b->feature ? -1 : 1;
    if (a->patch != b->patch)
        return a->patch < b->patch ? -1 : 1;
    return a->op < b->op ? -1 : a->op > b->op;
}

static const lq_patch *patch_n(const lq_overlay *o, size_t i)
{
    return i < lq_overlay_n_patches(o) ? lq_overlay_patch_at(o, i) : lq_overlay_edits(o);
}

int lq_overlay_resolve(const lq_overlay *o, int rule, lq_overlay **out, lq_err *err)
{
    *out = NULL;
    if (rule == LQ_CONFLICT_LAST_WINS)
        return LQ_OK; /* the overlay applies patches in order: the last one wins already */
    size_t np = lq_overlay_n_patches(o) + (lq_overlay_edits(o) ? 1 : 0), n = 0, cap = 0;
    slot_w *w = NULL;
    int rc = LQ_OK;
    for (size_t i = 0; !rc && i < np; i++) {
        const lq_patch *p = patch_n(o, i);
        for (size_t k = 0; !rc && k < lq_patch_n_ops(p); k++) {
            lq_patch_op op;
            if (!lq_patch_op_at(p, k, &op) ||
                (op.kind != LQ_OP_INSERT && op.kind != LQ_OP_UPDATE && op.kind != LQ_OP_DELETE))
                continue;
            if (n == cap) {
                slot_w *nw = realloc(w, (cap = cap ? cap * 2 : 64) * sizeof *w);
                if (!nw) {
                    rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                    break;
                }
                w = nw;
            }
            float c = !isnan(op.confidence) ? op.confidence : op.has_down_meta ? op.dm_c : 0.0f;
            w[n++] = (slot_w){op.layer, op.feature, i, k, op.kind == LQ_OP_DELETE ? 0.0f : c};
        }
    }
    if (!rc && n)
        qsort(w, n, sizeof *w, slot_cmp);
    lq_patch *win = NULL;
    if (!rc && rule == LQ_CONFLICT_HIGHEST_CONFIDENCE)
        rc = lq_patch_create("on-conflict", NULL, lq_vindex_get_info(lq_overlay_vindex(o))->hidden_size, &win, err);
    for (size_t a = 0; !rc && a < n;) {
        size_t b = a + 1;
        int multi = 0;
        while (b < n && w[b].layer == w[a].layer && w[b].feature == w[a].feature) {
            multi |= w[b].patch != w[a].patch;
            b++;
        }
        if (multi && rule == LQ_CONFLICT_FAIL) {
            size_t other = a + 1;
            while (w[other].patch == w[a].patch)
                other++;
            rc = lq_err_set(err, LQ_EINVAL, "ON CONFLICT FAIL: L%d F%d is written by patches '%s' and '%s'",
                            w[a].layer, w[a].feature, lq_patch_name(patch_n(o, w[a].patch)),
                            lq_patch_name(patch_n(o, w[other].patch)));
        } else if (multi) { /* the op with the highest confidence is applied again, last */
            size_t best = a;
            for (size_t i = a + 1; i < b; i++)
                if (w[i].conf > w[best].conf)
                    best = i;
            lq_patch_op op;
            if (lq_patch_op_at(patch_n(o, w[best].patch), w[best].op, &op))
                rc = lq_patch_add(win, &op, err);
        }
        a = b;
    }
    if (!rc && win && lq_patch_n_ops(win)) {
        rc = lq_overlay_clone(o, out, err);
        if (!rc && (rc = lq_overlay_record(*out, win, err))) {
            lq_overlay_free(*out);
            *out = NULL;
        }
    }
    lq_patch_free(win);
    free(w);
    return rc;
}
