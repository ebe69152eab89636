/* Opening MODEL, whatever it is: the one place that decides between the two loaders, above
 * both of them (a GGUF file -> src/model; a vindex directory -> src/vindex), so that neither
 * loader knows the other's format. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"

int lq_model_open(const char *path, const lq_model_opts *opts, lq_model **out, lq_err *err)
{
    if (!path || !out)
        return lq_err_set(err, LQ_EINVAL, "lq_model_open: path and out are required");
    *out = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return lq_vindex_model_open_dir(path, opts, out, err);
    return lq_model_open_gguf(path, opts, out, err);
}

int lq_model_open_edited(const char *path, const lq_model_opts *opts, int no_carried, lq_model **out,
                         lq_resid_hook **hook, lq_edit_set **edits, size_t *n_patches, lq_err *err)
{
    if (!hook && !edits)
        return lq_err_set(err, LQ_EINVAL, "lq_model_open_edited: hook or edits is required");
    if (hook)
        *hook = NULL;
    if (edits)
        *edits = NULL;
    if (n_patches)
        *n_patches = 0;
    int rc = lq_model_open(path, opts, out, err);
    struct stat st;
    if (rc || no_carried || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        return rc; /* a vindex's edits are its overlay's, not the file's */
    lq_edit_set *es = NULL;
    rc = lq_carried_edits(path, opts ? opts->n_threads : 0, &es, n_patches, err);
    if (!rc && es && hook)
        /* the server's flags: composed features act, a KNN match names the next token */
        rc = lq_edit_set_hook(es, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_FORCE, hook, err);
    if (!rc && edits)
        *edits = lq_edit_set_ref(es);
    lq_edit_set_unref(es);
    if (rc) {
        lq_model_close(*out);
        *out = NULL;
    }
    return rc;
}
