/* Vindex reader: index.json (kept whole), mmapped gate_vectors.bin / embeddings.bin /
 * down_meta.bin, tokenizer.json, feature_labels.json; validation of every size and offset;
 * rewrite (round trip) and checksum verification. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/f16.h"
#include "vindex/vindex_internal.h"

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static int file_exists(const char *dir, const char *name)
{
    char *p = lq_vx_join(dir, name);
    struct stat st;
    int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

static int map_file(const char *dir, const char *name, lq_mapfile *m, lq_err *err)
{
    char *p = lq_vx_join(dir, name);
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    struct stat st;
    if (stat(p, &st) != 0) {
        int rc = lq_err_set(err, LQ_ENOTFOUND, "%s: missing (%s)", p, strerror(errno));
        free(p);
        return rc;
    }
    int rc = lq_mapfile_open(m, p, err);
    free(p);
    return rc;
}

/* Integer field of obj, with range check; absent -> def (or error when required). */
static int get_int(const json_t *obj, const char *key, int required, long long lo, long long hi,
                   long long def, long long *out, const char *ctx, lq_err *err)
{
    json_t *x = json_object_get(obj, key);
    if (!x || json_is_null(x)) {
        if (required)
            return lq_err_set(err, LQ_EFORMAT, "%s: field '%s' is missing", ctx, key);
        *out = def;
        return LQ_OK;
    }
    if (!json_is_integer(x))
        return lq_err_set(err, LQ_EFORMAT, "%s: field '%s' is not an integer", ctx, key);
    long long v = json_integer_value(x);
    if (v < lo || v > hi)
        return lq_err_set(err, LQ_EFORMAT, "%s: field '%s' = %lld outside [%lld, %lld]", ctx, key,
                          v, lo, hi);
    *out = v;
    return LQ_OK;
}

static const char *get_str(const json_t *obj, const char *key, const char *def)
{
    json_t *x = json_object_get(obj, key);
    return json_is_string(x) ? json_string_value(x) : def;
}

static int parse_band(const json_t *bands, const char *name, int L, lq_vindex_band *b, lq_err *err)
{
    json_t *a = json_object_get(bands, name);
    if (!json_is_array(a) || json_array_size(a) != 2 || !json_is_integer(json_array_get(a, 0)) ||
        !json_is_integer(json_array_get(a, 1)))
        return lq_err_set(err, LQ_EFORMAT, "index.json: layer_bands.%s must be [start, end]", name);
    long long s = json_integer_value(json_array_get(a, 0)), e = json_integer_value(json_array_get(a, 1));
    if (s < 0 || e < s || e >= L)
        return lq_err_set(err, LQ_EFORMAT, "index.json: layer_bands.%s = [%lld, %lld] outside [0, %d]",
                          name, s, e, L - 1);
    b->start = (int)s;
    b->end = (int)e;
    return LQ_OK;
}

static int level_from_str(const char *s)
{
    if (!strcmp(s, "attention"))
        return LQ_VLEVEL_ATTENTION;
    if (!strcmp(s, "inference"))
        return LQ_VLEVEL_INFERENCE;
    if (!strcmp(s, "all"))
        return LQ_VLEVEL_ALL;
    if (!strcmp(s, "browse"))
        return LQ_VLEVEL_BROWSE;
    return -1;
}

static int parse_index(lq_vindex *v, lq_err *err)
{
    char *p = lq_vx_join(v->dir, "index.json");
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    struct stat st;
    if (stat(p, &st) != 0) {
        int rc = lq_err_set(err, LQ_ENOTFOUND, "%s: missing (not a vindex directory?)", p);
        free(p);
        return rc;
    }
    json_error_t je;
    v->index = json_load_file(p, 0, &je);
    if (!v->index) {
        int rc = lq_err_set(err, LQ_EFORMAT, "%s: line %d: %s", p, je.line, je.text);
        free(p);
        return rc;
    }
    free(p);
    const json_t *ix = v->index;
    if (!json_is_object(ix))
        return lq_err_set(err, LQ_EFORMAT, "index.json: top level is not an object");
    const char *C = "index.json";
    long long n;
    lq_vindex_info *in = &v->info;
    int rc;
    if ((rc = get_int(ix, "version", 0, 0, 1000, 2, &n, C, err)))
        return rc;
    in->version = (int)n;
    if ((rc = get_int(ix, "num_layers", 1, 1, LQ_VINDEX_MAX_LAYERS, 0, &n, C, err)))
        return rc;
    in->num_layers = (int)n;
    if ((rc = get_int(ix, "hidden_size", 1, 1, LQ_VINDEX_MAX_HIDDEN, 0, &n, C, err)))
        return rc;
    in->hidden_size = (int)n;
    if ((rc = get_int(ix, "intermediate_size", 0, 0, LQ_VINDEX_MAX_FEATURES, 0, &n, C, err)))
        return rc;
    in->intermediate_size = (int)n;
    if ((rc = get_int(ix, "vocab_size", 1, 1, LQ_VINDEX_MAX_VOCAB, 0, &n, C, err)))
        return rc;
    in->vocab_size = (int)n;
    if ((rc = get_int(ix, "down_top_k", 0, 0, LQ_VINDEX_MAX_TOPK, 10, &n, C, err)))
        return rc;
    in->down_top_k = (int)n;
    json_t *es = json_object_get(ix, "embed_scale");
    in->embed_scale = json_is_number(es) ? (float)json_number_value(es) : 1.0f;
    if (!isfinite(in->embed_scale))
        return lq_err_set(err, LQ_EFORMAT, "index.json: embed_scale is not finite");
    const char *dt = get_str(ix, "dtype", "f32");
    if (!strcmp(dt, "f32"))
        in->dtype = LQ_VDT_F32;
    else if (!strcmp(dt, "f16"))
        in->dtype = LQ_VDT_F16;
    else
        return lq_err_set(err, LQ_EUNSUPPORTED, "index.json: unknown dtype '%s' (f32 or f16)", dt);
    v->level_str = xstrdup(get_str(ix, "extract_level", "browse"));
    in->extract_level = level_from_str(v->level_str ? v->level_str : "");
    if (in->extract_level < 0)
        return lq_err_set(err, LQ_EFORMAT, "index.json: unknown extract_level '%s'", v->level_str);
    in->extract_level_str = v->level_str;
    v->model = xstrdup(get_str(ix, "model", "unknown"));
    v->family = xstrdup(get_str(ix, "family", ""));
    if (!v->model || !v->family || !v->level_str)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    const char *slash = strrchr(v->model, '/');
    v->model_id = xstrdup(slash ? slash + 1 : v->model);
    in->model = v->model;
    in->model_id = v->model_id;
    in->family = v->family;
    json_t *hw = json_object_get(ix, "has_model_weights");
    in->has_model_weights = json_is_true(hw);
    json_t *bl = json_object_get(ix, "bitnet_layout");
    in->has_bitnet = bl && !json_is_null(bl);

    /* bands: index.json, else family table / 40-80 split, else everything */
    json_t *bands = json_object_get(ix, "layer_bands");
    int L = in->num_layers;
    if (bands && !json_is_null(bands)) {
        if (!json_is_object(bands))
            return lq_err_set(err, LQ_EFORMAT, "index.json: layer_bands is not an object");
        if ((rc = parse_band(bands, "syntax", L, &in->bands[0], err)) ||
            (rc = parse_band(bands, "knowledge", L, &in->bands[1], err)) ||
            (rc = parse_band(bands, "output", L, &in->bands[2], err)))
            return rc;
        in->has_bands = 1;
    } else if (!lq_vx_family_bands(v->family, L, in->bands)) {
        for (int i = 0; i < 3; i++)
            in->bands[i] = (lq_vindex_band){0, L - 1};
    }

    /* layers[] */
    json_t *layers = json_object_get(ix, "layers");
    if (layers && !json_is_array(layers))
        return lq_err_set(err, LQ_EFORMAT, "index.json: layers is not an array");
    v->layers = calloc((size_t)L, sizeof *v->layers);
    if (!v->layers)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    size_t nl = layers ? json_array_size(layers) : 0;
    in->dense_only = nl == 0;
    int first = 1;
    for (size_t i = 0; i < nl; i++) {
        json_t *e = json_array_get(layers, i);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "index.json layers[%zu]", i);
        if (!json_is_object(e))
            return lq_err_set(err, LQ_EFORMAT, "%s: not an object", ctx);
        long long li, nf, off, len;
        if ((rc = get_int(e, "layer", 1, 0, L - 1, 0, &li, ctx, err)) ||
            (rc = get_int(e, "num_features", 1, 0, LQ_VINDEX_MAX_FEATURES, 0, &nf, ctx, err)) ||
            (rc = get_int(e, "offset", 1, 0, INT64_MAX, 0, &off, ctx, err)) ||
            (rc = get_int(e, "length", 1, 0, INT64_MAX, 0, &len, ctx, err)))
            return rc;
        lq_vx_layer *ly = &v->layers[li];
        if (ly->present)
            return lq_err_set(err, LQ_EFORMAT, "%s: layer %lld listed twice", ctx, li);
        uint64_t bpf = in->dtype == LQ_VDT_F16 ? 2 : 4;
        uint64_t want = (uint64_t)nf * (uint64_t)in->hidden_size * bpf;
        if ((uint64_t)len != want)
            return lq_err_set(err, LQ_EFORMAT,
                              "%s: layer %lld length %lld != num_features %lld x hidden %d x %d bytes (%llu)",
                              ctx, li, len, nf, in->hidden_size, (int)bpf, (unsigned long long)want);
        if ((uint64_t)off % bpf)
            return lq_err_set(err, LQ_EFORMAT, "%s: layer %lld offset %lld not a multiple of %d",
                              ctx, li, off, (int)bpf);
        ly->present = 1;
        ly->num_features = (int)nf;
        ly->offset = (uint64_t)off;
        ly->length = (uint64_t)len;
        if (nf > 0)
            in->n_loaded_layers++;
        in->total_features += (uint64_t)nf;
        if (first)
            in->features_per_layer = (int)nf, first = 0;
    }
    /* a list that leaves layers out while claiming them is damaged (or cut): every query would
     * read those layers as empty, so it is refused rather than half-answered */
    for (int l = 0; nl && l < L; l++)
        if (!v->layers[l].present)
            return lq_err_set(err, LQ_EFORMAT,
                              "index.json: num_layers is %d but layers[] lists %zu of them (layer %d is missing)", L,
                              nl, l);
    return LQ_OK;
}

static int parse_down_meta(lq_vindex *v, lq_err *err)
{
    const uint8_t *d = v->down.data;
    size_t sz = v->down.size;
    if (sz < 16)
        return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: %zu bytes, shorter than its 16-byte header", sz);
    uint32_t h[4];
    memcpy(h, d, 16);
    if (h[0] != 0x444D4554u && h[0] != 0x54454D44u)
        return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: bad magic 0x%08x (expected 0x444D4554)", h[0]);
    if (h[1] != 1)
        return lq_err_set(err, LQ_EUNSUPPORTED, "down_meta.bin: version %u (expected 1)", h[1]);
    if (h[2] > (uint32_t)v->info.num_layers)
        return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: num_layers %u > index.json num_layers %d",
                          h[2], v->info.num_layers);
    if (h[3] > LQ_VINDEX_MAX_TOPK)
        return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: top_k %u > limit %d", h[3], LQ_VINDEX_MAX_TOPK);
    v->dm_layers = h[2];
    v->dm_topk = h[3];
    v->dm_rec = 8 + 8 * (size_t)h[3];
    v->dm_base = calloc((size_t)v->info.num_layers, sizeof *v->dm_base);
    v->dm_nf = calloc((size_t)v->info.num_layers, sizeof *v->dm_nf);
    if (!v->dm_base || !v->dm_nf)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    uint64_t pos = 16;
    for (uint32_t l = 0; l < h[2]; l++) {
        if (pos + 4 > sz)
            return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: truncated at layer %u header (offset %llu, size %zu)",
                              l, (unsigned long long)pos, sz);
        uint32_t nf;
        memcpy(&nf, d + pos, 4);
        pos += 4;
        if (nf > LQ_VINDEX_MAX_FEATURES)
            return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: layer %u num_features %u > limit", l, nf);
        uint64_t bytes = (uint64_t)nf * v->dm_rec;
        if (bytes > sz - pos)
            return lq_err_set(err, LQ_EFORMAT,
                              "down_meta.bin: layer %u records [%llu..%llu) end past end of file (%zu)",
                              l, (unsigned long long)pos, (unsigned long long)(pos + bytes), sz);
        v->dm_base[l] = pos;
        v->dm_nf[l] = nf;
        pos += bytes;
    }
    if (pos != sz)
        return lq_err_set(err, LQ_EFORMAT, "down_meta.bin: %zu bytes, records end at %llu", sz,
                          (unsigned long long)pos);
    return LQ_OK;
}

static uint64_t label_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static int labels_put(lq_vindex *v, uint64_t key, const char *label)
{
    if ((v->n_labels + 1) * 2 > v->label_cap) {
        size_t nc = v->label_cap ? v->label_cap * 2 : 64;
        lq_vx_label *nt = calloc(nc, sizeof *nt);
        if (!nt)
            return -1;
        for (size_t i = 0; i < v->label_cap; i++) {
            if (!v->labels[i].used)
                continue;
            size_t j = label_hash(v->labels[i].key) & (nc - 1);
            while (nt[j].used)
                j = (j + 1) & (nc - 1);
            nt[j] = v->labels[i];
        }
        free(v->labels);
        v->labels = nt;
        v->label_cap = nc;
    }
    size_t j = label_hash(key) & (v->label_cap - 1);
    while (v->labels[j].used && v->labels[j].key != key)
        j = (j + 1) & (v->label_cap - 1);
    char *s = strdup(label);
    if (!s)
        return -1;
    if (v->labels[j].used) {
        free(v->labels[j].label);
    } else {
        v->labels[j].used = 1;
        v->labels[j].key = key;
        v->n_labels++;
    }
    v->labels[j].label = s;
    return 0;
}

const char *lq_vindex_cluster_label(const lq_vindex *v, int layer, int feature)
{
    if (!v->clu || layer < 0 || layer >= v->info.num_layers || !v->clu[layer] || feature < 0 ||
        feature >= v->layers[layer].num_features)
        return NULL;
    int32_t c = v->clu[layer][feature];
    return c >= 0 && (size_t)c < v->n_clu ? v->clu_labels[c] : NULL;
}

const char *lq_vindex_probe_label(const lq_vindex *v, int layer, int feature)
{
    const char *ov = v->ov ? lq_vx_ov_label(v, layer, feature) : NULL;
    if (ov)
        return ov;
    if (!v->label_cap || layer < 0 || feature < 0)
        return NULL;
    uint64_t key = (uint64_t)layer << 32 | (uint32_t)feature;
    size_t j = label_hash(key) & (v->label_cap - 1);
    while (v->labels[j].used) {
        if (v->labels[j].key == key)
            return v->labels[j].label;
        j = (j + 1) & (v->label_cap - 1);
    }
    return NULL;
}

/* The JSON file name of the vindex directory into *root; a malformed one is an error naming
 * it and the line. */
static int load_json(const lq_vindex *v, const char *name, json_t **root, lq_err *err)
{
    char *p = lq_vx_join(v->dir, name);
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    json_error_t je;
    *root = json_load_file(p, 0, &je);
    free(p);
    if (!*root)
        return lq_err_set(err, LQ_EFORMAT, "%s: line %d: %s", name, je.line, je.text);
    return LQ_OK;
}

/* feature_labels.json: {"L{layer}_F{feature}": "label"}; other key forms are ignored (as
 * LARQL's server does). */
static int load_labels(lq_vindex *v, lq_err *err)
{
    if (!file_exists(v->dir, "feature_labels.json"))
        return LQ_OK;
    json_t *root;
    int rc = load_json(v, "feature_labels.json", &root, err);
    if (rc)
        return rc;
    if (!json_is_object(root)) {
        json_decref(root);
        return lq_err_set(err, LQ_EFORMAT, "feature_labels.json: not an object");
    }
    const char *k;
    json_t *x;
    json_object_foreach(root, k, x) {
        unsigned long l, f;
        char tail;
        if (!json_is_string(x) || sscanf(k, "L%lu_F%lu%c", &l, &f, &tail) != 2)
            continue;
        if (l >= (unsigned long)v->info.num_layers || f > LQ_VINDEX_MAX_FEATURES)
            continue;
        if (labels_put(v, (uint64_t)l << 32 | f, json_string_value(x))) {
            json_decref(root);
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        }
    }
    json_decref(root);
    v->info.n_probe_labels = (int)v->n_labels;
    return LQ_OK;
}

/* relation_clusters.json's labels and feature_clusters.jsonl's assignments (LARQL's
 * relation clusters, written by clusters.c or LARQL's builder). Both or neither: one
 * without the other is ignored. A malformed file is an error naming it. */
#define MAX_CLUSTERS 100000
static int load_clusters(lq_vindex *v, lq_err *err)
{
    if (!file_exists(v->dir, "relation_clusters.json") || !file_exists(v->dir, "feature_clusters.jsonl"))
        return LQ_OK;
    json_t *root;
    int rc = load_json(v, "relation_clusters.json", &root, err);
    if (rc)
        return rc;
    json_t *labels = json_object_get(root, "labels");
    size_t k = json_array_size(labels);
    if (!json_is_array(labels) || k > MAX_CLUSTERS)
        rc = lq_err_set(err, LQ_EFORMAT, "relation_clusters.json: 'labels' must be an array of at most %d strings",
                        MAX_CLUSTERS);
    if (!rc && !(v->clu_labels = calloc(k ? k : 1, sizeof *v->clu_labels)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < k; i++) {
        const char *s = json_string_value(json_array_get(labels, i));
        if (!s)
            rc = lq_err_set(err, LQ_EFORMAT, "relation_clusters.json: labels[%zu] is not a string", i);
        else if (!(v->clu_labels[i] = strdup(s)))
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else
            v->n_clu = i + 1;
    }
    json_decref(root);
    if (rc)
        return rc;
    int L = v->info.num_layers;
    if (!(v->clu = calloc((size_t)L, sizeof *v->clu)))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    char *p = lq_vx_join(v->dir, "feature_clusters.jsonl");
    FILE *fp = p ? fopen(p, "r") : NULL;
    free(p);
    if (!fp)
        return lq_err_set(err, LQ_EIO, "feature_clusters.jsonl: cannot open");
    char line[256];
    int ln = 0;
    json_error_t je;
    while (!rc && fgets(line, sizeof line, fp)) {
        ln++;
        if (line[0] == '\n' || line[0] == 0)
            continue;
        json_t *o = json_loads(line, 0, &je);
        json_t *jl = json_object_get(o, "l"), *jf = json_object_get(o, "f"), *jc = json_object_get(o, "c");
        json_int_t l = json_integer_value(jl), f = json_integer_value(jf), c = json_integer_value(jc);
        if (!o || !json_is_integer(jl) || !json_is_integer(jf) || !json_is_integer(jc) || l < 0 || l >= L ||
            !v->layers[l].present || f < 0 || f >= v->layers[l].num_features || c < 0 || (size_t)c >= v->n_clu)
            rc = lq_err_set(err, LQ_EFORMAT,
                            "feature_clusters.jsonl: line %d is not {\"l\",\"f\",\"c\"} with a layer, feature and "
                            "cluster of this vindex",
                            ln);
        else {
            if (!v->clu[l]) { /* first line of the layer: every feature unassigned */
                int nf = v->layers[l].num_features;
                if (!(v->clu[l] = malloc((size_t)nf * sizeof **v->clu))) {
                    rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
                    json_decref(o);
                    break;
                }
                for (int i = 0; i < nf; i++)
                    v->clu[l][i] = -1;
            }
            v->clu[l][f] = (int32_t)c;
        }
        json_decref(o);
    }
    fclose(fp);
    return rc;
}

/* Appends s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD (what HF's decode
 * gives for a lone byte token), so token texts are always valid JSON strings. */
static void put_utf8_lossy(lq_sb *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            ok = (s[i + k] & 0xc0) == 0x80;
        if (ok && len == 2 && c < 0xc2)
            ok = 0; /* overlong */
        if (ok && len == 3) {
            unsigned cp = (c & 0x0f) << 12 | (s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f);
            ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
        }
        if (ok && len == 4) {
            unsigned cp = (c & 0x07) << 18 | (s[i + 1] & 0x3f) << 12 | (s[i + 2] & 0x3f) << 6 | (s[i + 3] & 0x3f);
            ok = cp >= 0x10000 && cp <= 0x10ffff;
        }
        if (ok) {
            lq_sb_put(b, str + i, len);
            i += len;
        } else {
            lq_sb_put(b, "\xef\xbf\xbd", 3);
            i++;
        }
    }
}

static int build_token_texts(lq_vindex *v, lq_err *err)
{
    int V = v->info.vocab_size;
    v->tok_off = malloc((size_t)V * sizeof *v->tok_off);
    lq_sb sb = {0};
    if (!v->tok_off)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int32_t tv = v->tok ? lq_tokenizer_n_vocab(v->tok) : 0;
    for (int id = 0; id < V; id++) {
        /* 128k tokens decode in about 100 ms: the caller's cancel hook every 8192 */
        if ((id & 8191) == 8191 && lq_vx_cancelled()) {
            free(sb.s);
            return lq_err_set(err, LQ_ECANCELED, "vindex open cancelled");
        }
        v->tok_off[id] = (uint32_t)sb.n;
        char *text = NULL;
        size_t len = 0;
        int ok = id < tv && lq_tokenizer_decode(v->tok, &id, 1, LQ_DETOK_SKIP_SPECIAL, &text, &len, NULL) == LQ_OK;
        if (ok) {
            const char *s = text;
            while (len && isspace((unsigned char)*s))
                s++, len--;
            while (len && isspace((unsigned char)s[len - 1]))
                len--;
            put_utf8_lossy(&sb, s, len);
        } else {
            lq_sb_printf(&sb, "T%d", id);
        }
        free(text);
        lq_sb_put(&sb, "", 1); /* NUL separator */
        if (sb.n > UINT32_MAX - 64) {
            free(sb.s);
            return lq_err_set(err, LQ_EFORMAT, "tokenizer: token texts exceed 4 GiB");
        }
    }
    lq_sb_put(&sb, "", 1);
    if (sb.oom) {
        free(sb.s);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    v->tok_text = sb.s;
    return LQ_OK;
}

const lq_knn_store *lq_vindex_knn_store(const lq_vindex *v) { return v ? v->knn : NULL; }

const char *lq_vindex_token_text(const lq_vindex *v, int32_t id)
{
    if (id < 0 || id >= v->info.vocab_size || !v->tok_text)
        return "";
    return v->tok_text + v->tok_off[id];
}

int lq_vindex_open(const char *dir, const lq_vindex_open_opts *opts, lq_vindex **out, lq_err *err)
{
    *out = NULL;
    if (!dir || !*dir)
        return lq_err_set(err, LQ_EINVAL, "vindex: empty directory path");
    lq_vindex *v = calloc(1, sizeof *v);
    if (!v)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    v->dir = strdup(dir);
    v->info.dir = v->dir;
    int rc = v->dir ? parse_index(v, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_vindex_info *in = &v->info;
    uint64_t bpf = in->dtype == LQ_VDT_F16 ? 2 : 4;

    /* the caller's cancel hook (lq_vindex_set_thread_cancel) between the stages of the open:
       each is well under 100 ms on a 2B-4T vindex, the long ones poll inside too */
#define OPEN_POLL() \
    do { \
        if (!rc && lq_vx_cancelled()) \
            rc = lq_err_set(err, LQ_ECANCELED, "vindex open cancelled"); \
    } while (0)
    OPEN_POLL();
    /* gate_vectors.bin: required unless dense-only */
    if (!rc && !in->dense_only) {
        rc = map_file(v->dir, "gate_vectors.bin", &v->gate, err);
        if (!rc) {
            v->has_gate = 1;
            for (int l = 0; l < in->num_layers && !rc; l++) {
                const lq_vx_layer *ly = &v->layers[l];
                if (ly->present && (ly->offset > v->gate.size || ly->length > v->gate.size - ly->offset))
                    rc = lq_err_set(err, LQ_EFORMAT,
                                    "gate_vectors.bin: layer %d range [%llu..%llu) past end of file (%zu bytes)",
                                    l, (unsigned long long)ly->offset,
                                    (unsigned long long)(ly->offset + ly->length), v->gate.size);
            }
        }
    }
    OPEN_POLL();
    /* embeddings.bin: f32 iff size == vocab*hidden*4, f16 iff *2 */
    if (!rc) {
        rc = map_file(v->dir, "embeddings.bin", &v->embed, err);
        if (!rc) {
            uint64_t n = (uint64_t)in->vocab_size * (uint64_t)in->hidden_size;
            if (v->embed.size == n * 4)
                in->embed_dtype = LQ_VDT_F32;
            else if (v->embed.size == n * 2)
                in->embed_dtype = LQ_VDT_F16;
            else
                rc = lq_err_set(err, LQ_EFORMAT,
                                "embeddings.bin: %zu bytes, expected vocab %d x hidden %d x 4 (%llu) or x 2 (%llu)",
                                v->embed.size, in->vocab_size, in->hidden_size,
                                (unsigned long long)(n * 4), (unsigned long long)(n * 2));
        }
    }
    OPEN_POLL();
    if (!rc && !in->dense_only) {
        if (file_exists(v->dir, "down_meta.bin")) {
            rc = map_file(v->dir, "down_meta.bin", &v->down, err);
            if (!rc) {
                v->has_down = 1;
                rc = parse_down_meta(v, err);
            }
        } else {
            rc = lq_err_set(err, LQ_ENOTFOUND, "%s/down_meta.bin: missing (index.json lists %d gate layers)",
                            v->dir, in->n_loaded_layers);
        }
    }
    OPEN_POLL();
    if (!rc) {
        char *p = lq_vx_join(v->dir, "tokenizer.json");
        if (!p)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else if (!file_exists(v->dir, "tokenizer.json"))
            rc = lq_err_set(err, LQ_ENOTFOUND, "%s: missing", p);
        else if ((rc = lq_tokenizer_from_json_file(p, &v->tok, err)) == LQ_ECANCELED) {
            /* cancelled: not worth a second parse as a Unigram file */
        } else if (rc) {
            /* SentencePiece vocabularies come as a Unigram model (tokjson.c) */
            lq_err e2 = {0};
            int r2 = lq_vx_tokenizer_from_unigram(p, &v->tok, &e2);
            if (r2 == LQ_OK)
                rc = LQ_OK;
            else if (r2 != LQ_EUNSUPPORTED) { /* a Unigram file, but a bad one: its error */
                rc = r2;
                if (err)
                    *err = e2;
            }
            if (rc)
                lq_err_prefix(err, "%s", p);
        }
        free(p);
    }
    OPEN_POLL();
    if (!rc)
        rc = build_token_texts(v, err);
    OPEN_POLL();
    if (!rc)
        rc = load_labels(v, err);
    OPEN_POLL();
    if (!rc)
        rc = load_clusters(v, err);
    OPEN_POLL();
    if (!rc) {
        v->n_threads = opts && opts->n_threads > 0 ? opts->n_threads : lq_cpu_count();
        if (v->n_threads > 64)
            v->n_threads = 64;
        rc = lq_pool_create(v->n_threads, &v->pool, err);
    }
    if (!rc) {
        /* gate kernels: the model's dispatcher picks them (lq_kernels_best, or the set
         * opts->kernels names) */
        const char *k = opts ? opts->kernels : NULL;
        v->kern = k ? lq_kernels_by_name(k) : lq_kernels_best();
        if (!v->kern && lq_kernels_is_name(k))
            rc = lq_err_set(err, LQ_EUNSUPPORTED, "gate kernels '%s' are not supported by this CPU", k);
        else if (!v->kern)
            rc = lq_err_set(err, LQ_EINVAL, "gate kernels '%s' (scalar, avx2, avx512)", k);
    }
    if (!rc && opts && opts->prefilter && !in->dense_only)
        rc = lq_vx_build_sketches(v, err);
    if (!rc && opts && opts->verify_checksums)
        rc = lq_vindex_verify_checksums(v, err);
    /* the KNN store INSERTs were saved to (LARQL's COMPILE writes it beside the weights):
     * walk-mode infer and the overlays start from it. A malformed file is an error, not a
     * silently empty store. */
    if (!rc && file_exists(v->dir, "knn_store.bin")) {
        char *kp = lq_vx_join(v->dir, "knn_store.bin");
        rc = kp ? lq_knn_store_load(kp, in->hidden_size, &v->knn, err) : lq_err_set(err, LQ_ENOMEM, "out of memory");
        free(kp);
    }
    (void)bpf;
#undef OPEN_POLL
    if (rc) {
        lq_vindex_close(v);
        return rc;
    }
    *out = v;
    return LQ_OK;
}

void lq_vindex_close(lq_vindex *v)
{
    if (!v)
        return;
    lq_pool_free(v->pool);
    for (int l = 0; l < v->info.num_layers && v->sk; l++)
        free(v->sk_scale[l]);
    free(v->sk_block); /* every layer's codes */
    free(v->sk);
    free(v->sk_scale);
    free(v->sk_inexact);
    lq_mapfile_close(&v->gate);
    lq_mapfile_close(&v->embed);
    lq_mapfile_close(&v->down);
    lq_knn_store_free(v->knn);
    json_decref(v->index);
    lq_tokenizer_free(v->tok);
    for (size_t i = 0; i < v->label_cap; i++)
        free(v->labels[i].label);
    free(v->labels);
    for (int l = 0; v->clu && l < v->info.num_layers; l++)
        free(v->clu[l]);
    free(v->clu);
    for (size_t i = 0; i < v->n_clu; i++)
        free(v->clu_labels[i]);
    free(v->clu_labels);
    free(v->tok_text);
    free(v->tok_off);
    free(v->layers);
    free(v->dm_base);
    free(v->dm_nf);
    free(v->model);
    free(v->model_id);
    free(v->family);
    free(v->level_str);
    free(v->dir);
    free(v);
}

const lq_vindex_info *lq_vindex_get_info(const lq_vindex *v) { return &v->info; }

const char *lq_vindex_base_checksum(const lq_vindex *v)
{
    return v && v->index ? json_string_value(json_object_get(json_object_get(v->index, "checksums"), "gate_vectors.bin"))
                         : NULL;
}
const lq_tokenizer *lq_vindex_tokenizer(const lq_vindex *v) { return v->tok; }

int lq_vindex_embed_row(const lq_vindex *v, int32_t id, float *out, lq_err *err)
{
    int D = v->info.hidden_size;
    if (id < 0 || id >= v->info.vocab_size)
        return lq_err_set(err, LQ_ERANGE, "token id %d outside embeddings.bin [0, %d)", id,
                          v->info.vocab_size);
    float s = v->info.embed_scale;
    if (v->info.embed_dtype == LQ_VDT_F32) {
        const uint8_t *p = v->embed.data + (size_t)id * D * 4;
        memcpy(out, p, (size_t)D * 4);
        for (int i = 0; i < D; i++)
            out[i] *= s;
    } else {
        const uint8_t *p = v->embed.data + (size_t)id * D * 2;
        for (int i = 0; i < D; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = lq_f16_to_f32(h) * s;
        }
    }
    return LQ_OK;
}

int lq_vindex_entity_vector(const lq_vindex *v, const char *text, float *q, size_t *n_tokens,
                            lq_err *err)
{
    int D = v->info.hidden_size;
    int32_t *ids = NULL;
    size_t n = 0;
    *n_tokens = 0;
    int rc = lq_tokenizer_encode(v->tok, text, strlen(text), 0, &ids, &n, err);
    if (rc)
        return rc;
    memset(q, 0, (size_t)D * sizeof *q);
    float *row = malloc((size_t)D * sizeof *row);
    if (!row) {
        free(ids);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    size_t used = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = lq_vindex_embed_row(v, ids[i], row, err);
        for (int d = 0; !rc && d < D; d++)
            q[d] += row[d];
        used++;
    }
    if (!rc && used > 1)
        for (int d = 0; d < D; d++)
            q[d] /= (float)used;
    free(row);
    free(ids);
    *n_tokens = rc ? 0 : used;
    return rc;
}

int lq_vindex_feature_meta(const lq_vindex *v, int layer, int feature, lq_feature_meta *m)
{
    if (v->ov) { /* an overlay's view: its override or tombstone first */
        int r = lq_vx_ov_meta(v, layer, feature, m);
        if (r >= 0)
            return r;
    }
    m->top_token = NULL;
    if (!v->has_down || layer < 0 || layer >= (int)v->dm_layers || feature < 0 ||
        (uint32_t)feature >= v->dm_nf[layer])
        return 0;
    const uint8_t *r = v->down.data + v->dm_base[layer] + (size_t)feature * v->dm_rec;
    uint32_t id;
    float c;
    memcpy(&id, r, 4);
    memcpy(&c, r + 4, 4);
    if (id == 0 && c == 0.0f)
        return 0;
    m->top_token_id = (int32_t)id;
    m->c_score = c;
    m->n_top = 0;
    for (uint32_t k = 0; k < v->dm_topk && m->n_top < 64; k++) {
        uint32_t tid;
        float lg;
        memcpy(&tid, r + 8 + 8 * k, 4);
        memcpy(&lg, r + 12 + 8 * k, 4);
        if (tid == 0 && lg == 0.0f)
            continue;
        m->top_ids[m->n_top] = (int32_t)tid;
        m->top_logits[m->n_top] = lg;
        m->n_top++;
    }
    return 1;
}

/* ---- checksums and rewrite ---- */

static int hash_file(const char *dir, const char *name, char hex[65], lq_err *err)
{
    lq_mapfile m;
    int rc = map_file(dir, name, &m, err);
    if (rc)
        return rc;
    lq_sha256_hex(m.data ? (const void *)m.data : "", m.size, hex);
    lq_mapfile_close(&m);
    return LQ_OK;
}

/* index.json's "checksums" (*cs NULL when absent) and the check of one entry: a plain file
 * name and a string */
static int checksums_of(const lq_vindex *v, json_t **cs, lq_err *err)
{
    *cs = json_object_get(v->index, "checksums");
    if (*cs && json_is_null(*cs))
        *cs = NULL;
    if (*cs && !json_is_object(*cs))
        return lq_err_set(err, LQ_EFORMAT, "index.json: checksums is not an object");
    return LQ_OK;
}

static int checksum_entry(const char *k, const json_t *x, lq_err *err)
{
    if (!json_is_string(x))
        return lq_err_set(err, LQ_EFORMAT, "index.json: checksums.%s is not a string", k);
    if (strchr(k, '/') || !strcmp(k, "..") || !strcmp(k, "."))
        return lq_err_set(err, LQ_EFORMAT, "index.json: checksums key '%s' is not a file name", k);
    return LQ_OK;
}

int lq_vindex_verify_each(const lq_vindex *v, lq_verify_fn fn, void *ctx, size_t *n_files, lq_err *err)
{
    *n_files = 0;
    json_t *cs, *x;
    int rc = checksums_of(v, &cs, err);
    const char *k;
    json_object_foreach(cs, k, x) {
        if (rc || (rc = checksum_entry(k, x, err)))
            break;
        char hex[65];
        lq_err e = {0};
        struct stat st;
        char *path = lq_vx_join(v->dir, k);
        int have = path && stat(path, &st) == 0;
        free(path);
        int status = !have || hash_file(v->dir, k, hex, &e) ? LQ_VERIFY_MISSING
                     : !strcasecmp(hex, json_string_value(x)) ? LQ_VERIFY_OK : LQ_VERIFY_MISMATCH;
        fn(ctx, k, status, have ? (uint64_t)st.st_size : 0);
        (*n_files)++;
    }
    return rc;
}

int lq_vindex_verify_checksums(const lq_vindex *v, lq_err *err)
{
    json_t *cs, *x;
    int rc = checksums_of(v, &cs, err);
    const char *k;
    json_object_foreach(cs, k, x) {
        char hex[65];
        if (rc || (rc = checksum_entry(k, x, err)) || (rc = hash_file(v->dir, k, hex, err)))
            break;
        if (strcmp(hex, json_string_value(x)))
            return lq_err_set(err, LQ_EFORMAT, "%s/%s: sha256 %s does not match index.json checksum %s",
                              v->dir, k, hex, json_string_value(x));
    }
    return rc;
}

static int copy_tree(const char *src, const char *dst, int top, const lq_vindex *v, lq_err *err);

int lq_vx_copy_file(const char *src, const char *dst, const char *name, lq_err *err)
{
    lq_mapfile m;
    int rc = map_file(src, name, &m, err);
    if (rc)
        return rc;
    rc = lq_vx_write_file(dst, name, m.data ? (const void *)m.data : "", m.size, err);
    lq_mapfile_close(&m);
    return rc;
}

static int copy_tree(const char *src, const char *dst, int top, const lq_vindex *v, lq_err *err)
{
    DIR *d = opendir(src);
    if (!d)
        return lq_err_set(err, LQ_EIO, "%s: cannot list: %s", src, strerror(errno));
    int rc = LQ_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (top && !strcmp(e->d_name, "index.json"))
            continue;
        char *sp = lq_vx_join(src, e->d_name);
        struct stat st;
        if (!sp) {
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
            break;
        }
        if (stat(sp, &st) == 0 && S_ISDIR(st.st_mode)) {
            char *dp = lq_vx_join(dst, e->d_name);
            if (!dp || mkdir(dp, 0755))
                rc = lq_err_set(err, LQ_EIO, "%s: cannot create directory", dp ? dp : e->d_name);
            else
                rc = copy_tree(sp, dp, 0, v, err);
            free(dp);
        } else if (S_ISREG(st.st_mode)) {
            rc = lq_vx_copy_file(src, dst, e->d_name, err);
        }
        free(sp);
    }
    closedir(d);
    return rc;
}

int lq_vindex_rewrite(const lq_vindex *v, const char *out_dir, lq_err *err)
{
    if (mkdir(out_dir, 0755))
        return lq_err_set(err, LQ_EIO, "%s: cannot create: %s", out_dir, strerror(errno));
    int rc = copy_tree(v->dir, out_dir, 1, v, err);
    if (rc)
        return rc;
    lq_sb sb = {0};
    lq_sb_json_pretty(&sb, v->index, 0);
    char *text = NULL;
    rc = lq_sb_finish(&sb, &text, err);
    if (!rc)
        rc = lq_vx_write_file(out_dir, "index.json", text, strlen(text), err);
    free(text);
    return rc;
}
