/* INSERT ... MODE KNN into a store (LARQL's legacy router): the key is the residual of
 * "The {relation} of {entity} is" at the install layer, the target the first token of
 * " {target}". Apart from knn_store.c (the store and its file), which runs no model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "larql/model.h"
#include "vindex/vindex_internal.h"

int lq_knn_insert(struct lq_model *m, lq_knn_store *s, const lq_knn_insert_params *p, lq_err *err)
{
    if (!m || !s || !p || !p->entity || !*p->entity || !p->relation || !*p->relation || !p->target || !*p->target)
        return lq_err_set(err, LQ_EINVAL, "knn insert: entity, relation and target are required");
    const lq_model_info *mi = lq_model_get_info(m);
    const lq_tokenizer *tok = lq_model_tokenizer(m);
    if (s->hidden != mi->n_embd)
        return lq_err_set(err, LQ_EINVAL, "knn insert: store hidden %d, model hidden %d", s->hidden, mi->n_embd);
    if (!tok)
        return lq_err_set(err, LQ_EUNSUPPORTED, "knn insert: the model has no tokenizer");
    int layer = p->layer;
    if (layer < 0) { /* LARQL: knowledge band's last layer - 1 */
        const lq_vindex *v = lq_vindex_of_model(m);
        lq_vindex_band b[3];
        int hi;
        if (v)
            hi = v->info.bands[1].end;
        else if (lq_vx_family_bands("generic", mi->n_layer, b))
            hi = b[1].end;
        else
            hi = mi->n_layer - 1;
        layer = hi - 1 < 0 ? 0 : hi - 1;
    }
    if (layer >= mi->n_layer)
        layer = mi->n_layer - 1; /* clamped, as LQL does */
    char *prompt = lq_vx_canonical_prompt(p->entity, p->relation);
    if (!prompt)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    float *resid = malloc((size_t)mi->n_layer * mi->n_embd * sizeof *resid);
    int32_t *ids = NULL;
    size_t nid = 0;
    char *sp = malloc(strlen(p->target) + 2);
    int rc = resid && sp ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = lq_infer_residuals(m, prompt, resid, err);
    if (!rc) {
        snprintf(sp, strlen(p->target) + 2, " %s", p->target);
        rc = lq_tokenizer_encode(tok, sp, strlen(sp), 0, &ids, &nid, err);
        if (!rc && nid == 0)
            rc = lq_err_set(err, LQ_EINVAL, "knn insert: target '%s' encodes to no tokens", p->target);
    }
    if (!rc) {
        lq_knn_entry e = {layer, resid + (size_t)layer * mi->n_embd, ids[0], p->target, p->entity, p->relation,
                          p->confidence};
        rc = lq_knn_store_add_entry(s, &e, err);
    }
    free(ids);
    free(sp);
    free(resid);
    free(prompt);
    return rc;
}

void lq_knn_insert_params_init(lq_knn_insert_params *p)
{
    memset(p, 0, sizeof *p);
    p->layer = -1;
    p->confidence = 1.0f;
}
