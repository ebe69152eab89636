/* Opening MODEL, whatever it is: the one place that decides between the two loaders, above
 * both of them (a GGUF file -> src/model; a vindex directory -> src/vindex), so that neither
 * loader knows the other's format. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "larql/model.h"
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
