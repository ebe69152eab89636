/* The edits a GGUF written by COMPILE ... INTO MODEL carries (metadata larql.patches), as the
 * forward-pass edit set every front end that runs the file applies (larql run / logits /
 * perplexity, larql serve), so that the file answers as the vindex with its patches.
 *
 * Why a temporary vindex: a carried patch is validated and applied against a vindex (its
 * layer and feature ranges, vector widths, tokenizer for subject edits), exactly as LQL's
 * USE MODEL applies it; building one from the file and applying the patches to an overlay over
 * it is that same path, so the two cannot drift. Only the resulting edit set is kept (it is a
 * self-contained snapshot, src/vindex/edit_set.c): the temporary vindex is removed before
 * returning. A browse-level build without down_meta is enough (gate vectors, tokenizer; no
 * weights copied): the model runs from the GGUF itself. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "larql/gguf.h"
#include "larql/patch.h"
#include "larql/vindex_build.h"
#include "vindex/vindex_internal.h"

#define CARRY_KEY "larql.patches"

static int carries(const char *path, lq_err *err)
{
    lq_gguf *g = NULL;
    int rc = lq_gguf_open(path, &g, err);
    if (rc)
        return rc;
    int has = lq_gguf_find_key(g, CARRY_KEY) >= 0;
    lq_gguf_close(g);
    return has;
}

/* the overlay over dir's vindex, with the file's patches applied -> its edit set */
static int edits_over(const char *gguf_path, const char *dir, int n_threads, lq_edit_set **out, size_t *n,
                      lq_err *err)
{
    lq_vindex *v = NULL;
    lq_overlay *o = NULL;
    lq_vindex_open_opts vo = {.n_threads = n_threads};
    int rc = lq_vindex_open(dir, &vo, &v, err);
    if (!rc)
        rc = lq_overlay_create(v, lq_vindex_knn_store(v), &o, err);
    if (!rc)
        rc = lq_overlay_apply_carried(o, gguf_path, n, err);
    if (!rc && !(*out = lq_overlay_edit_set(o, err)))
        rc = LQ_ENOMEM;
    lq_overlay_free(o);
    lq_vindex_close(v);
    return rc;
}

int lq_carried_edits(const char *gguf_path, int n_threads, lq_edit_set **out, size_t *n_patches, lq_err *err)
{
    if (!gguf_path || !out)
        return lq_err_set(err, LQ_EINVAL, "lq_carried_edits: path and out are required");
    *out = NULL;
    if (n_patches)
        *n_patches = 0;
    int has = carries(gguf_path, err);
    if (has <= 0)
        return has; /* an error, or nothing carried: nothing to build */
    const char *td = getenv("TMPDIR");
    char dir[4096];
    int w = snprintf(dir, sizeof dir, "%s/larql-carried.XXXXXX", td && *td ? td : "/tmp");
    if (w < 0 || (size_t)w >= sizeof dir)
        return lq_err_set(err, LQ_EINVAL, "TMPDIR is too long");
    if (!mkdtemp(dir))
        return lq_err_set(err, LQ_EIO, "carried edits: cannot create a temporary directory under %s",
                          td && *td ? td : "/tmp");
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.level = LQ_VLEVEL_BROWSE; /* no weights copied (keep_quant is for inference levels) */
    /* the edits need the layers' feature slots and the tokenizer, not what browse queries
     * read: no down_meta scan (the builder's slowest stage: minutes for a 2B model) and no
     * relation clusters */
    bo.down_top_k = 0;
    bo.no_clusters = 1;
    size_t n = 0;
    int rc = lq_vindex_build(gguf_path, dir, &bo, err);
    if (!rc)
        rc = edits_over(gguf_path, dir, n_threads, out, &n, err);
    lq_vindex_remove_dir(dir);
    rmdir(dir);
    if (rc) {
        lq_err_prefix(err, "%s: the edits it carries (" CARRY_KEY ")", gguf_path);
        return rc;
    }
    if (n_patches)
        *n_patches = n;
    return LQ_OK;
}
