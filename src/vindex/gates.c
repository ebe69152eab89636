/* A layer's gate rows as mapped (the one accessor the gate KNN, the sketches and the builders
 * need from an open vindex; here so that knn.c does not depend on the opener, format.c). */
#include "vindex/vindex_internal.h"

int lq_vindex_gate_layer(const lq_vindex *v, int layer, const void **rows, int *nf, lq_err *err)
{
    *rows = NULL;
    *nf = 0;
    if (layer < 0 || layer >= v->info.num_layers)
        return lq_err_set(err, LQ_ERANGE, "layer %d out of range (model has %d layers)", layer,
                          v->info.num_layers);
    const lq_vx_layer *ly = &v->layers[layer];
    if (!v->has_gate || !ly->present || ly->num_features == 0)
        return LQ_OK;
    *rows = v->gate.data + ly->offset;
    *nf = ly->num_features;
    return LQ_OK;
}
