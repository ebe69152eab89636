/* The overlay as a view: what the read path (format.c, knn.c, compile.c) asks an overlay's
 * view handle, through lq_vx_view (vindex_internal.h) — the read path never names the overlay.
 * A feature the overlay inserted, re-gated or deleted answers from the feature table; the gate
 * KNN merges the layer's overrides (one gate-kernel call over their matrix) with the base
 * scan's hits, less the tombstoned and re-gated features. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vindex/overlay_internal.h"


static int view_meta(const lq_vindex *v, int layer, int feature, lq_feature_meta *m)
{
    const ov_feat *e = v->ov ? ov_find(v->ov, layer, feature) : NULL;
    if (!e || (!e->deleted && !e->has_meta))
        return -1;
    if (e->deleted)
        return 0;
    memset(m, 0, sizeof *m);
    m->top_token_id = e->target_id < 0 ? 0 : e->target_id;
    m->c_score = e->c_score;
    m->top_token = e->target;
    if (e->target_id >= 0) {
        m->n_top = 1;
        m->top_ids[0] = e->target_id;
        m->top_logits[0] = e->c_score;
    }
    return 1;
}

static int view_gate_row(const lq_vindex *v, int layer, int feature, float *row)
{
    const ov_feat *e = v->ov ? ov_find(v->ov, layer, feature) : NULL;
    if (!e || (!e->deleted && !e->gate))
        return -1;
    if (e->deleted)
        return 0;
    memcpy(row, e->gate, (size_t)v->ov->hidden * sizeof *row);
    return 1;
}

static const char *view_label(const lq_vindex *v, int layer, int feature)
{
    const ov_feat *e = v->ov ? ov_find(v->ov, layer, feature) : NULL;
    return e && !e->deleted && e->has_meta && e->relation && *e->relation ? e->relation : NULL;
}

static int view_touches(const lq_vindex *v, int layer)
{
    const lq_overlay *o = v->ov;
    return o && layer >= 0 && layer < o->n_layers && (o->n_gate[layer] || o->n_del[layer]);
}

static size_t view_extra(const lq_vindex *v, int layer)
{
    const lq_overlay *o = v->ov;
    /* the full scan masks them (lq_vx_ov_mask); the prefilter's candidates are not masked */
    if (!v->prefilter)
        return 0;
    return view_touches(v, layer) ? (size_t)o->n_gate[layer] + (size_t)o->n_del[layer] : 0;
}

static void view_mask(const lq_vindex *v, int layer, float *scores, size_t n)
{
    const lq_overlay *o = v->ov;
    if (!view_touches(v, layer))
        return;
    const ov_gm *g = o->gm[layer];
    for (int i = 0; g && i < g->n; i++)
        if ((size_t)g->feat[i] < n)
            scores[g->feat[i]] = NAN;
    if (!o->n_del[layer])
        return;
    for (size_t i = 0; i < o->nf; i++)
        if (o->f[i].layer == layer && o->f[i].deleted && (size_t)o->f[i].feature < n)
            scores[o->f[i].feature] = NAN;
}

static int cmp_hit(const void *a, const void *b)
{
    const lq_vindex_hit *x = a, *y = b;
    float ax = fabsf(x->score), ay = fabsf(y->score);
    if (ax != ay)
        return ax > ay ? -1 : 1;
    return (x->feature > y->feature) - (x->feature < y->feature);
}

static size_t view_gate_merge(const lq_vindex *v, int layer, const float *q, const lq_vindex_hit *base, size_t nb,
                           size_t k, lq_vindex_hit *out)
{
    const lq_overlay *o = v->ov;
    size_t n = 0;
    /* base hits of features the overlay neither deleted nor re-gated */
    for (size_t i = 0; i < nb; i++) {
        const ov_feat *e = ov_find(o, layer, base[i].feature);
        if (e && (e->deleted || e->gate))
            continue;
        out[n++] = base[i];
    }
    /* every gate override of the layer, scored against q with the vindex's gate kernel in one
     * call (out has room: nb + n_gate; the scores land in out's tail, then become hits) */
    const ov_gm *g = o->gm[layer];
    int ng = g ? (g->n < o->n_gate[layer] ? g->n : o->n_gate[layer]) : 0; /* out has n_gate rows */
    if (ng > 0) {
        float *sc = (float *)(void *)(out + n); /* ng floats fit in ng hits */
        v->kern->gate_scores(g->m, 0, (size_t)o->hidden, 0, (size_t)ng, q, 1, sc, (size_t)ng);
        for (int i = ng - 1; i >= 0; i--) /* back to front: hit i is written over floats >= i */
            out[n + (size_t)i] = (lq_vindex_hit){layer, g->feat[i], sc[i]};
        n += (size_t)ng;
    }
    qsort(out, n, sizeof *out, cmp_hit);
    return n < k ? n : k;
}

static size_t view_n_gates(const lq_vindex *v, int layer)
{
    const lq_overlay *o = v->ov;
    return o && layer >= 0 && layer < o->n_layers ? (size_t)o->n_gate[layer] : 0;
}

const lq_vx_view ov_view_ops = {
    .meta = view_meta,
    .label = view_label,
    .gate_row = view_gate_row,
    .touches = view_touches,
    .n_gates = view_n_gates,
    .extra = view_extra,
    .mask = view_mask,
    .gate_merge = view_gate_merge,
};
