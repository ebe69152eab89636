/* libFuzzer target for the vindex loader and its read queries: the input is a whole vindex
 * directory packed as records (u8 name length, name, u32 little-endian size, bytes; written by
 * tests/fuzz/pack_dir.py), unpacked into a scratch directory and opened with lq_vindex_open
 * (index.json, gate_vectors.bin, embeddings.bin, down_meta.bin, tokenizer.json,
 * feature_labels.json, knn_store.bin), then queried: describe, walk, relations, stats. When
 * the directory has a weight_manifest.json it is also opened as a model (vx_model.c: the
 * manifest, the dense and bitnet/ files) and evaluates two tokens.
 *
 * Built and run by `make fuzz` (seeds: tests/fuzz/corpus/fuzz_vindex/, a browse and an
 * inference vindex of a one-layer fixture). Properties checked: no crash, no sanitizer
 * report, no hang, every failure has a message, a failed open leaves no handle. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../scratch.h"
#include "larql/model.h"
#include "larql/vindex.h"

#define MAX_FILES 48

static char root[256];

/* A record's name is used only when it is a plain relative path under the scratch directory:
 * [A-Za-z0-9._-] segments, at most one '/', no "..", no leading dot. */
static int name_ok(const char *n, size_t len)
{
    if (len == 0 || n[0] == '.' || n[0] == '/' || n[len - 1] == '/')
        return 0;
    int slashes = 0;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (c == '/') {
            if (++slashes > 1 || n[i + 1] == '.')
                return 0;
        } else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                     c == '_' || c == '-')) {
            return 0;
        }
    }
    return 1;
}

static void clear_dir(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && depth < 2) {
            clear_dir(p, depth + 1);
            rmdir(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
}

static void write_file(const char *name, size_t name_len, const uint8_t *data, size_t size)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%.*s", root, (int)name_len, name);
    char *slash = strrchr(p + strlen(root) + 1, '/');
    if (slash) {
        *slash = 0;
        mkdir(p, 0700);
        *slash = '/';
    }
    FILE *f = fopen(p, "wb");
    if (!f)
        return;
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
}

static int unpack(const uint8_t *data, size_t size)
{
    int has_manifest = 0;
    size_t off = 0;
    for (int n = 0; n < MAX_FILES && off < size; n++) {
        size_t nl = data[off++];
        if (nl > size - off)
            break;
        const char *name = (const char *)data + off;
        off += nl;
        if (size - off < 4)
            break;
        uint32_t len = (uint32_t)data[off] | (uint32_t)data[off + 1] << 8 | (uint32_t)data[off + 2] << 16 |
                       (uint32_t)data[off + 3] << 24;
        off += 4;
        if (len > size - off)
            len = (uint32_t)(size - off); /* a short last file: truncation is a case too */
        if (name_ok(name, nl)) {
            write_file(name, nl, data + off, len);
            if (nl == 20 && !memcmp(name, "weight_manifest.json", 20))
                has_manifest = 1;
        }
        off += len;
    }
    return has_manifest;
}

static void query(const lq_vindex *v)
{
    lq_err err = {0};
    char *json = NULL;
    lq_describe_params dp;
    lq_describe_params_init(&dp);
    dp.entity = "the";
    dp.min_score = 0.0;
    if (lq_vindex_describe_json(v, &dp, &json, &err) != LQ_OK && !err.msg[0])
        abort();
    free(json), json = NULL;
    dp.per_layer = 1;
    dp.band = "all";
    if (lq_vindex_describe_json(v, &dp, &json, &err) != LQ_OK && !err.msg[0])
        abort();
    free(json), json = NULL;
    lq_walk_params wp;
    lq_walk_params_init(&wp);
    wp.prompt = "the model is";
    if (lq_vindex_walk_json(v, &wp, &json, &err) != LQ_OK && !err.msg[0])
        abort();
    free(json), json = NULL;
    if (lq_vindex_relations_json(v, &json, &err) != LQ_OK && !err.msg[0])
        abort();
    free(json), json = NULL;
    if (lq_vindex_stats_json(v, &json, &err) != LQ_OK && !err.msg[0])
        abort();
    free(json);
}

static void model(void)
{
    lq_model_opts opts = {0};
    opts.n_threads = 1;
    opts.hugepages = -1;
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(root, &opts, &m, &err) != LQ_OK) {
        if (m || !err.msg[0])
            abort();
        return;
    }
    const lq_model_info *info = lq_model_get_info(m);
    lq_session *s = NULL;
    if (lq_session_create(m, 4, &s, &err) == LQ_OK) {
        float *logits = malloc((size_t)info->n_vocab * sizeof *logits);
        const int32_t ids[2] = {0, info->n_vocab - 1};
        if (logits && lq_session_eval(s, ids, 2, logits, NULL, &err) != LQ_OK && !err.msg[0])
            abort();
        free(logits);
        lq_session_free(s);
    } else if (s || !err.msg[0]) {
        abort();
    }
    lq_model_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!root[0]) { /* one scratch directory per process, removed at exit (../scratch.h) */
        const char *d = scratch_dir("fuzz_vindex", 1);
        if (!d)
            abort();
        snprintf(root, sizeof root, "%s", d);
    }
    clear_dir(root, 0);
    int has_manifest = unpack(data, size);
    lq_vindex *v = NULL;
    lq_err err = {0};
    if (lq_vindex_open(root, NULL, &v, &err) != LQ_OK) {
        if (v || !err.msg[0])
            abort();
    } else {
        query(v);
        lq_vindex_close(v);
    }
    if (has_manifest)
        model();
    return 0;
}
