/* The overlay's gate-override matrices: per layer, every live gate override as one row-major
 * matrix, so that a query scores them with the gate kernel in one call (LARQL keeps the same
 * flattened matrix).
 *
 * A rebuild keeps a layer's matrix when its rows are still the layer's (feature, gate) list
 * in table order, and a clone takes its source's matrix of a layer by reference when it has
 * the same rows: sessions cloned from the global state share its matrices and hold only the
 * layers their own edits changed. Rows are compared by value, not by the gate's address (a
 * freed patch's address can come back holding other numbers). A matrix never changes once
 * built. */
#include <stdlib.h>
#include <string.h>

#include "vindex/overlay_internal.h"

void ov_gm_unref(ov_gm *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL))
        return;
    free(g->m);
    free(g->feat);
    free(g);
}

static int same_rows(const ov_gm *g, int n, int hidden, const int *feat, const float *const *src)
{
    if (!g || g->n != n || memcmp(g->feat, feat, (size_t)n * sizeof *feat))
        return 0;
    for (int k = 0; k < n; k++)
        if (memcmp(g->m + (size_t)k * (size_t)hidden, src[k], (size_t)hidden * sizeof *g->m))
            return 0;
    return 1;
}

static ov_gm *gm_new(int n, int hidden, const int *feat, const float *const *src)
{
    ov_gm *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->refs = 1;
    g->n = n;
    g->m = malloc((size_t)n * (size_t)hidden * sizeof *g->m);
    g->feat = malloc((size_t)n * sizeof *g->feat);
    if (!g->m || !g->feat) {
        ov_gm_unref(g);
        return NULL;
    }
    memcpy(g->feat, feat, (size_t)n * sizeof *feat);
    for (int k = 0; k < n; k++)
        memcpy(g->m + (size_t)k * (size_t)hidden, src[k], (size_t)hidden * sizeof *g->m);
    return g;
}

int ov_build_gmats(lq_overlay *o)
{
    size_t total = 0;
    for (int l = 0; l < o->n_layers; l++)
        total += (size_t)o->n_gate[l];
    int *feat = malloc((total ? total : 1) * sizeof *feat);
    const float **src = malloc((total ? total : 1) * sizeof *src);
    size_t *at = calloc((size_t)o->n_layers + 1, sizeof *at), *fill = calloc((size_t)o->n_layers + 1, sizeof *fill);
    int rc = feat && src && at && fill ? LQ_OK : LQ_ENOMEM;
    for (int l = 1; !rc && l <= o->n_layers; l++)
        at[l] = at[l - 1] + (size_t)o->n_gate[l - 1];
    for (size_t i = 0; !rc && i < o->nf; i++) {
        const ov_feat *e = &o->f[i];
        if (e->deleted || !e->gate)
            continue;
        size_t k = at[e->layer] + fill[e->layer]++;
        feat[k] = e->feature;
        src[k] = e->gate;
    }
    const lq_overlay *d = o->gm_donor;
    for (int l = 0; !rc && l < o->n_layers; l++) {
        int n = o->n_gate[l];
        const int *lf = feat + at[l];
        const float *const *ls = src + at[l];
        if (!n) {
            ov_gm_unref(o->gm[l]);
            o->gm[l] = NULL;
        } else if (same_rows(o->gm[l], n, o->hidden, lf, ls)) {
            continue;
        } else if (d && d->n_layers == o->n_layers && same_rows(d->gm[l], n, o->hidden, lf, ls)) {
            ov_gm_unref(o->gm[l]);
            o->gm[l] = d->gm[l];
            __atomic_add_fetch(&o->gm[l]->refs, 1, __ATOMIC_RELAXED);
        } else {
            ov_gm *g = gm_new(n, o->hidden, lf, ls);
            if (!g)
                rc = LQ_ENOMEM;
            else {
                ov_gm_unref(o->gm[l]);
                o->gm[l] = g;
            }
        }
    }
    free(feat);
    free(src);
    free(at);
    free(fill);
    return rc;
}
