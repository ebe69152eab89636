/* COMPILE CURRENT INTO VINDEX: the base directory written again with an overlay baked in.
 *
 * Every file is copied (lq_vindex_rewrite), then the two the overlay changes are written
 * anew from the patched view: gate_vectors.bin (gate overrides in the vindex dtype, f16 by
 * LARQL's truncating conversion; tombstones as zero rows) and down_meta.bin (each patched
 * feature's record: its target id and c_score, top-k = that one token; tombstones as empty
 * records), plus knn_store.bin (the overlay's store) and the relations of inserted features
 * in feature_labels.json. index.json's checksums follow the new files. The whole directory is
 * built as a temporary sibling and renamed into place, so an interrupted compile leaves no
 * out_dir. */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json_obj.h"
#include "vindex/vindex_internal.h"

static void rm_tree(const char *dir);

/* dir/name := data, fsync'd; hex receives its sha256 */
static int write_hashed(const char *dir, const char *name, const void *data, size_t n, char hex[65], lq_err *err)
{
    lq_vx_file w;
    int rc = lq_vx_file_open(&w, dir, name, 1, err);
    if (rc)
        return rc;
    if ((rc = lq_vx_file_write(&w, data, n, err))) {
        lq_vx_file_abort(&w);
        return rc;
    }
    return lq_vx_file_close(&w, hex, err);
}

/* gate_vectors.bin of the view: the base bytes with every patched row replaced */
static int write_gates(const lq_vindex *base, const lq_vindex *view, const char *dir, char hex[65], lq_err *err)
{
    if (!base->has_gate)
        return LQ_OK;
    uint8_t *buf = malloc(base->gate.size ? base->gate.size : 1);
    if (!buf)
        return lq_err_set(err, LQ_ENOMEM, "compile: out of memory for gate_vectors.bin (%zu bytes)", base->gate.size);
    memcpy(buf, base->gate.data, base->gate.size);
    int D = base->info.hidden_size, f16 = base->info.dtype == LQ_VDT_F16, es = f16 ? 2 : 4;
    float *row = malloc((size_t)D * sizeof *row);
    int rc = row ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int l = 0; !rc && l < base->info.num_layers; l++) {
        if (!lq_vx_ov_touches(view, l))
            continue;
        const lq_vx_layer *ly = &base->layers[l];
        for (int f = 0; f < ly->num_features; f++) {
            int g = lq_vx_ov_gate_row(view, l, f, row);
            if (g < 0)
                continue; /* not patched */
            uint8_t *dst = buf + ly->offset + (size_t)f * D * es;
            for (int d = 0; d < D; d++) {
                float x = g ? row[d] : 0.0f; /* 0: a tombstone */
                if (f16) {
                    uint16_t h = lq_vx_f32_to_f16_trunc(x);
                    memcpy(dst + 2 * d, &h, 2);
                } else {
                    memcpy(dst + 4 * d, &x, 4);
                }
            }
        }
    }
    if (!rc)
        rc = write_hashed(dir, "gate_vectors.bin", buf, base->gate.size, hex, err);
    free(row);
    free(buf);
    return rc;
}

/* down_meta.bin of the view: patched records rewritten */
static int write_meta(const lq_vindex *base, const lq_vindex *view, const char *dir, char hex[65], lq_err *err)
{
    if (!base->has_down)
        return LQ_OK;
    uint8_t *buf = malloc(base->down.size ? base->down.size : 1);
    if (!buf)
        return lq_err_set(err, LQ_ENOMEM, "compile: out of memory for down_meta.bin");
    memcpy(buf, base->down.data, base->down.size);
    for (uint32_t l = 0; l < base->dm_layers; l++)
        for (uint32_t f = 0; f < base->dm_nf[l]; f++) {
            lq_feature_meta m;
            int r = lq_vx_ov_meta(view, (int)l, (int)f, &m);
            if (r < 0)
                continue;
            uint8_t *rec = buf + base->dm_base[l] + (size_t)f * base->dm_rec;
            memset(rec, 0, base->dm_rec); /* a tombstone: "no metadata" */
            if (r == 0)
                continue;
            uint32_t id = (uint32_t)m.top_token_id;
            memcpy(rec, &id, 4);
            memcpy(rec + 4, &m.c_score, 4);
            if (base->dm_topk > 0 && m.n_top > 0) {
                uint32_t tid = (uint32_t)m.top_ids[0];
                memcpy(rec + 8, &tid, 4);
                memcpy(rec + 12, &m.top_logits[0], 4);
            }
        }
    int rc = write_hashed(dir, "down_meta.bin", buf, base->down.size, hex, err);
    free(buf);
    return rc;
}

/* feature_labels.json: the base's labels plus the relation of every inserted feature */
static int write_labels(const lq_vindex *base, const lq_vindex *view, const char *dir, lq_err *err)
{
    json_t *o = lq_json_object();
    int added = 0;
    for (int l = 0; l < base->info.num_layers; l++) {
        int nf = base->layers[l].present ? base->layers[l].num_features : 0;
        for (int f = 0; f < nf; f++) {
            const char *lab = lq_vindex_probe_label(view, l, f);
            if (!lab)
                continue;
            char k[48];
            snprintf(k, sizeof k, "L%d_F%d", l, f);
            json_object_set_new(o, k, json_string(lab));
            added += lq_vx_ov_label(view, l, f) != NULL;
        }
    }
    int rc = LQ_OK;
    if (added) {
        lq_sb b = {0};
        lq_sb_json_pretty(&b, o, 0);
        char *text = NULL;
        if (!(rc = lq_sb_finish(&b, &text, err)))
            rc = lq_vx_write_file(dir, "feature_labels.json", text, strlen(text), err);
        free(text);
    }
    json_decref(o);
    return rc;
}

int lq_vx_compile(const lq_vindex *base, const lq_vindex *view, const lq_knn_store *knn, const char *out_dir,
                  lq_err *err)
{
    struct stat st;
    if (stat(out_dir, &st) == 0)
        return lq_err_set(err, LQ_EINVAL, "compile: %s already exists", out_dir);
    size_t n = strlen(out_dir);
    char *tmp = malloc(n + 32);
    if (!tmp)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    snprintf(tmp, n + 32, "%s.partial-%ld", out_dir, (long)getpid());
    int rc = lq_vindex_rewrite(base, tmp, err);
    char hg[65] = "", hd[65] = "";
    if (!rc)
        rc = write_gates(base, view, tmp, hg, err);
    if (!rc)
        rc = write_meta(base, view, tmp, hd, err);
    if (!rc)
        rc = write_labels(base, view, tmp, err);
    if (!rc && knn && knn->n) {
        char *kp = lq_vx_join(tmp, "knn_store.bin");
        rc = kp ? lq_knn_store_save(knn, kp, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
        free(kp);
    }
    if (!rc) { /* index.json: the checksums of the files written anew */
        json_t *ix = json_deep_copy(base->index);
        json_t *cs = json_object_get(ix, "checksums");
        if (json_is_object(cs)) {
            if (*hg)
                json_object_set_new(cs, "gate_vectors.bin", json_string(hg));
            if (*hd)
                json_object_set_new(cs, "down_meta.bin", json_string(hd));
        }
        lq_sb b = {0};
        lq_sb_json_pretty(&b, ix, 0);
        char *text = NULL;
        if (!(rc = lq_sb_finish(&b, &text, err)))
            rc = lq_vx_write_file(tmp, "index.json", text, strlen(text), err);
        free(text);
        json_decref(ix);
    }
    if (!rc && rename(tmp, out_dir))
        rc = lq_err_set(err, LQ_EIO, "compile: cannot rename %s to %s: %s", tmp, out_dir, strerror(errno));
    if (rc)
        rm_tree(tmp);
    free(tmp);
    return rc;
}

static void rm_tree(const char *dir)
{
    char *cmd_dirs[2] = {lq_vx_join(dir, "bitnet"), NULL};
    /* a vindex is flat apart from bitnet/: remove the files of both levels, then the dirs */
    for (int lvl = 0; lvl < 2; lvl++) {
        const char *d = lvl == 0 ? cmd_dirs[0] : dir;
        if (!d)
            continue;
        DIR *h = opendir(d);
        struct dirent *e;
        while (h && (e = readdir(h))) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                continue;
            char *p = lq_vx_join(d, e->d_name);
            if (p)
                unlink(p);
            free(p);
        }
        if (h)
            closedir(h);
        rmdir(d);
    }
    free(cmd_dirs[0]);
}

/* fsync of a directory: its entries (the renames) are on disk */
static int sync_dir(const char *dir, lq_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return lq_err_set(err, LQ_EIO, "compact: cannot open %s: %s", dir, strerror(errno));
    int rc = fsync(fd) ? lq_err_set(err, LQ_EIO, "compact: fsync %s: %s", dir, strerror(errno)) : LQ_OK;
    close(fd);
    return rc;
}

int lq_vx_compact(const lq_vindex *base, const lq_vindex *view, const lq_knn_store *knn, const char *dir,
                  lq_err *err)
{
    if (!base || !view || !dir || !*dir)
        return lq_err_set(err, LQ_EINVAL, "compact: overlay and directory are required");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    char *d = strndup(dir, n), *nw = malloc(n + 16), *old = malloc(n + 16), *parent = strndup(dir, n);
    int rc = d && nw && old && parent ? LQ_OK : lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc) {
        snprintf(nw, n + 16, "%s.compact-new", d);
        snprintf(old, n + 16, "%s.compact-old", d);
        char *slash = strrchr(parent, '/');
        if (!slash)
            strcpy(parent, ".");
        else if (slash == parent)
            parent[1] = 0;
        else
            *slash = 0;
        struct stat st;
        if (stat(old, &st) == 0) /* an earlier compaction's leftover: its dir is complete */
            rm_tree(old);
        if (stat(nw, &st) == 0)
            rm_tree(nw);
        rc = lq_vx_compile(base, view, knn, nw, err);
    }
    if (!rc && rename(d, old))
        rc = lq_err_set(err, LQ_EIO, "compact: cannot rename %s: %s", d, strerror(errno));
    if (!rc && rename(nw, d)) {
        rc = lq_err_set(err, LQ_EIO, "compact: cannot rename %s: %s", nw, strerror(errno));
        rename(old, d); /* put the old one back */
    }
    if (!rc)
        rc = sync_dir(parent, err);
    if (!rc)
        rm_tree(old);
    else if (nw)
        rm_tree(nw);
    free(d), free(nw), free(old), free(parent);
    return rc;
}

void lq_vindex_remove_dir(const char *dir)
{
    if (dir && *dir)
        rm_tree(dir);
}
