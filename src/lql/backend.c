/* The LQL session's backend: the USE'd vindex, its model (opened on first need), the overlay
 * of its edits, and INFER over them. What every statement file builds on; it calls none of
 * them. */
#include <stdlib.h>
#include <string.h>

#include "lql/exec_internal.h"

void lq_lql_close_backend(lq_lql *q)
{
    lq_overlay_free(q->o);
    q->o = NULL;
    lq_model_close(q->m); /* before the vindex it borrows */
    q->m = NULL;
    lq_vindex_close(q->v);
    q->v = NULL;
    free(q->path);
    q->path = NULL;
    free(q->patch_name);
    q->patch_name = NULL;
    q->recording = 0;
    q->patch_mark = 0;
    if (q->model_tmp) /* USE MODEL's vindex lives as long as it is in use */
        lq_vindex_remove_dir(q->model_tmp);
    free(q->model_tmp);
    q->model_tmp = NULL;
}

const lq_vindex *lq_lql_view(const lq_lql *q) { return q->o ? lq_overlay_vindex(q->o) : q->v; }

const lq_knn_store *lq_lql_session_knn(const lq_lql *q)
{
    return q->o ? lq_overlay_knn(q->o) : q->v ? lq_vindex_knn_store(q->v) : NULL;
}

int lq_lql_need_vindex(const lq_lql *q, lq_err *err)
{
    if (!q->v)
        return lq_err_set(err, LQ_EINVAL, "No backend loaded. Run USE \"path.vindex\" first.");
    return 0;
}

int lq_lql_need_model(lq_lql *q, lq_err *err)
{
    if (lq_lql_need_vindex(q, err))
        return LQ_EINVAL;
    if (q->m)
        return 0;
    if (!lq_vindex_get_info(q->v)->has_model_weights)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "this vindex has no model weights (build it with larql convert gguf-to-vindex "
                          "--keep-quant --level inference)");
    lq_model_opts mo;
    memset(&mo, 0, sizeof mo);
    mo.n_threads = q->opts.n_threads;
    return lq_vindex_model_open(q->v, &mo, &q->m, err);
}

int lq_lql_run_infer(lq_lql *q, const char *prompt, int top, int compare, const lq_lql_stmt *route,
                     lq_infer_result *r, lq_err *err)
{
    if (lq_lql_need_model(q, err))
        return err->code ? err->code : LQ_EINVAL;
    if (!*prompt)
        return lq_err_set(err, LQ_EINVAL, "empty prompt");
    lq_infer_params p;
    lq_infer_params_init(&p);
    p.prompt = prompt;
    p.top = top;
    p.mode = compare ? "compare" : "walk";
    p.knn = lq_lql_session_knn(q);
    if (route && route->route) { /* ROUTE VERIFY [FALLBACK] [TOPK n]; EXIT changes no answer */
        p.route = route->route_fallback ? LQ_ROUTE_FALLBACK : LQ_ROUTE_VERIFY;
        p.route_topk = route->route_topk;
    }
    lq_knn_store *empty = NULL;
    if (!p.knn) { /* NULL would mean the model's own store; the session's is authoritative */
        int rc = lq_knn_store_create(lq_vindex_get_info(q->v)->hidden_size, &empty, err);
        if (rc)
            return rc;
        p.knn = empty;
    }
    /* the session's overlay edits the forward pass (KNN entries and composed features) */
    if (q->o && !(p.edits = lq_overlay_edit_set(q->o, err))) {
        lq_knn_store_free(empty);
        return LQ_ENOMEM;
    }
    int rc = lq_infer(q->m, &p, r, err);
    lq_edit_set_unref(p.edits);
    lq_knn_store_free(empty);
    return rc;
}

int lq_lql_infer(lq_lql *q, const char *prompt, int top, lq_infer_result *r, lq_err *err)
{
    return lq_lql_run_infer(q, prompt, top, 0, NULL, r, err);
}

int lq_lql_use(lq_lql *q, const char *path, lq_sb *out, lq_err *err)
{
    lq_vindex *v = NULL;
    lq_vindex_open_opts vo = {.n_threads = q->opts.n_threads};
    int rc = lq_vindex_open(path, &vo, &v, err);
    if (rc)
        return rc;
    const lq_vindex_info *vi = lq_vindex_get_info(v);
    char *p = strdup(path);
    if (!p) {
        lq_vindex_close(v);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    lq_lql_close_backend(q);
    free(q->remote); /* a local vindex ends a remote session */
    q->remote = NULL;
    q->v = v;
    q->path = p;
    if ((rc = lq_overlay_create(q->v, lq_vindex_knn_store(q->v), &q->o, err)))
        return rc;
    char nf[32];
    lq_lql_fmt_count(nf, sizeof nf, vi->total_features);
    lq_sb_printf(out, "Using: %s (%d layers, %s features, model: %s", path, vi->num_layers, nf,
                 vi->model ? vi->model : "");
    if (vi->n_probe_labels)
        lq_sb_printf(out, ", relations: %d probe labels", vi->n_probe_labels);
    lq_sb_puts(out, ")\n");
    /* knn_store.bin: INSERT ... MODE KNN facts compiled into the directory (LARQL loads it
     * at USE; the vindex opens it) */
    const lq_knn_store *ks = lq_vindex_knn_store(v);
    if (ks)
        lq_sb_printf(out, "  KNN store: %zu entries (knn_store.bin)\n", lq_knn_store_count(ks));
    return 0;
}
