/* The KNN store (LARQL's "Architecture B": INSERT ... MODE KNN): per entry a unit-length key
 * (the last token's residual at the install layer), the target token put first when a walk's
 * residual at that layer comes within cosine 0.75 of it, and LARQL's metadata (entity,
 * relation, confidence).
 *
 * knn_store.bin, LARQL's knn_store_io.rs layout (little-endian):
 *   "LKNN", u32 version 1, u32 dim, u32 n_layers, then per layer:
 *     u32 layer_id, u32 n_entries, n_entries x dim f16 keys (LARQL's truncating f32 -> f16),
 *     n_entries x u32 target_id, then per entry u32 length + compact JSON
 *     {"confidence":c,"entity":e,"relation":r,"target_token":t} (serde_json's sorted keys;
 *     confidence is the f32 widened to f64 and printed shortest, as serde_json does).
 * LARQL writes its layers in hash-map order; we write them ascending, entries in insertion
 * order within a layer. Loading re-normalises the f16 keys (LARQL normalises its key
 * matrices at query time), so cosines match what LARQL computes from the same file. Missing
 * metadata fields read as "" / 1.0, as LARQL's loader does. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "core/grow.h"
#include "core/mapfile.h"
#include "larql/model.h"
#include "vindex/vindex_internal.h"


#define KNN_MAGIC "LKNN"
#define KNN_VERSION 1u
#define KNN_MAX_META (1u << 20) /* bytes of one entry's JSON */

int lq_knn_store_create(int hidden, lq_knn_store **out, lq_err *err)
{
    *out = NULL;
    if (hidden < 1 || hidden > LQ_VINDEX_MAX_HIDDEN)
        return lq_err_set(err, LQ_EINVAL, "knn store: hidden %d outside [1, %d]", hidden,
                          LQ_VINDEX_MAX_HIDDEN);
    lq_knn_store *s = calloc(1, sizeof *s);
    if (!s)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    s->hidden = hidden;
    *out = s;
    return LQ_OK;
}

static void entry_free(lq_vx_knn_entry *e)
{
    if (e->borrowed)
        return;
    free(e->key);
    free(e->target_token);
    free(e->entity);
    free(e->relation);
}

void lq_knn_store_free(lq_knn_store *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        entry_free(&s->e[i]);
    free(s->e);
    free(s);
}

size_t lq_knn_store_count(const lq_knn_store *s) { return s ? s->n : 0; }
int lq_knn_store_hidden(const lq_knn_store *s) { return s ? s->hidden : 0; }

int lq_vx_knn_unit_key(const float *key, int hidden, float *unit)
{
    double nn = 0;
    for (int i = 0; i < hidden; i++)
        nn += (double)key[i] * key[i];
    if (!(nn > 0) || !isfinite(nn))
        return LQ_EINVAL;
    float inv = (float)(1.0 / sqrt(nn));
    for (int i = 0; i < hidden; i++)
        unit[i] = key[i] * inv; /* L2-normalised on insert, as LARQL's store does */
    return LQ_OK;
}

int lq_vx_knn_store_add_borrowed(lq_knn_store *s, const lq_vx_knn_entry *e, lq_err *err)
{
    if (e->layer < 0 || e->layer >= LQ_VINDEX_MAX_LAYERS)
        return lq_err_set(err, LQ_ERANGE, "knn store: layer %d outside [0, %d)", e->layer,
                          LQ_VINDEX_MAX_LAYERS);
    if (!isfinite(e->confidence))
        return lq_err_set(err, LQ_EINVAL, "knn store: confidence is not finite");
    if (lq_grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e))
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    s->e[s->n] = *e;
    s->e[s->n++].borrowed = 1;
    return LQ_OK;
}

int lq_knn_store_add_entry(lq_knn_store *s, const lq_knn_entry *in, lq_err *err)
{
    if (!s || !in || !in->key || !in->target_token)
        return lq_err_set(err, LQ_EINVAL, "knn store: store, key and target token are required");
    if (in->layer < 0 || in->layer >= LQ_VINDEX_MAX_LAYERS)
        return lq_err_set(err, LQ_ERANGE, "knn store: layer %d outside [0, %d)", in->layer,
                          LQ_VINDEX_MAX_LAYERS);
    float *key = malloc((size_t)s->hidden * sizeof *key);
    if (!key)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (lq_vx_knn_unit_key(in->key, s->hidden, key)) {
        free(key);
        return lq_err_set(err, LQ_EINVAL, "knn store: key has zero or non-finite norm");
    }
    if (!isfinite(in->confidence)) {
        free(key);
        return lq_err_set(err, LQ_EINVAL, "knn store: confidence is not finite");
    }
    if (lq_grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        free(key);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    lq_vx_knn_entry *e = &s->e[s->n];
    memset(e, 0, sizeof *e);
    e->key = key;
    e->target_token = strdup(in->target_token);
    e->entity = strdup(in->entity ? in->entity : "");
    e->relation = strdup(in->relation ? in->relation : "");
    if (!e->target_token || !e->entity || !e->relation) {
        entry_free(e);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    e->layer = in->layer;
    e->target_id = in->target_id;
    e->confidence = in->confidence;
    s->n++;
    return LQ_OK;
}

int lq_knn_store_add(lq_knn_store *s, int layer, const float *key, int32_t target_id,
                     const char *target_token, lq_err *err)
{
    lq_knn_entry e = {layer, key, target_id, target_token, "", "", 1.0f};
    return lq_knn_store_add_entry(s, &e, err);
}

int lq_knn_store_get(const lq_knn_store *s, size_t i, lq_knn_entry *out)
{
    if (!s || i >= s->n || !out)
        return 0;
    const lq_vx_knn_entry *e = &s->e[i];
    *out = (lq_knn_entry){e->layer, e->key, e->target_id, e->target_token, e->entity, e->relation,
                          e->confidence};
    return 1;
}

/* ---- knn_store.bin ---- */

static int put(lq_vx_file *w, const void *p, size_t n, lq_err *err) { return lq_vx_file_write(w, p, n, err); }

static int put_u32(lq_vx_file *w, uint32_t v, lq_err *err)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return put(w, b, 4, err);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int lq_knn_store_save(const lq_knn_store *s, const char *path, lq_err *err)
{
    if (!s || !path || !*path)
        return lq_err_set(err, LQ_EINVAL, "knn store save: store and path are required");
    /* distinct layers, ascending */
    int *ly = malloc((s->n ? s->n : 1) * sizeof *ly);
    if (!ly)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    size_t nl = 0;
    for (size_t i = 0; i < s->n; i++)
        ly[nl++] = s->e[i].layer;
    qsort(ly, nl, sizeof *ly, cmp_int);
    size_t u = 0;
    for (size_t i = 0; i < nl; i++)
        if (!u || ly[u - 1] != ly[i])
            ly[u++] = ly[i];
    nl = u;
    /* written beside the target and renamed over it: a crash leaves the old file or none */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(ly);
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    snprintf(tmp, plen + 16, "%s.partial", path);
    lq_vx_file w;
    int rc = lq_vx_file_open(&w, NULL, tmp, 0, err);
    uint16_t *h = rc ? NULL : malloc((size_t)s->hidden * sizeof *h);
    if (!rc && !h)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc)
        rc = put(&w, KNN_MAGIC, 4, err);
    if (!rc)
        rc = put_u32(&w, KNN_VERSION, err);
    if (!rc) /* LARQL writes the first entry's key length: 0 for an empty store */
        rc = put_u32(&w, s->n ? (uint32_t)s->hidden : 0, err);
    if (!rc)
        rc = put_u32(&w, (uint32_t)nl, err);
    for (size_t li = 0; li < nl && !rc; li++) {
        uint32_t cnt = 0;
        for (size_t i = 0; i < s->n; i++)
            cnt += s->e[i].layer == ly[li];
        rc = put_u32(&w, (uint32_t)ly[li], err);
        if (!rc)
            rc = put_u32(&w, cnt, err);
        for (size_t i = 0; i < s->n && !rc; i++) {
            if (s->e[i].layer != ly[li])
                continue;
            for (int d = 0; d < s->hidden; d++)
                h[d] = lq_vx_f32_to_f16_trunc(s->e[i].key[d]);
            rc = put(&w, h, (size_t)s->hidden * 2, err);
        }
        for (size_t i = 0; i < s->n && !rc; i++)
            if (s->e[i].layer == ly[li])
                rc = put_u32(&w, (uint32_t)s->e[i].target_id, err);
        for (size_t i = 0; i < s->n && !rc; i++) {
            if (s->e[i].layer != ly[li])
                continue;
            lq_sb b = {0};
            lq_sb_puts(&b, "{\"confidence\":");
            lq_sb_f64(&b, (double)s->e[i].confidence);
            lq_sb_puts(&b, ",\"entity\":");
            lq_sb_json_str(&b, s->e[i].entity, strlen(s->e[i].entity));
            lq_sb_puts(&b, ",\"relation\":");
            lq_sb_json_str(&b, s->e[i].relation, strlen(s->e[i].relation));
            lq_sb_puts(&b, ",\"target_token\":");
            lq_sb_json_str(&b, s->e[i].target_token, strlen(s->e[i].target_token));
            lq_sb_puts(&b, "}");
            char *js = NULL;
            rc = lq_sb_finish(&b, &js, err);
            if (!rc)
                rc = put_u32(&w, (uint32_t)strlen(js), err);
            if (!rc)
                rc = put(&w, js, strlen(js), err);
            free(js);
        }
    }
    free(h);
    free(ly);
    if (rc) {
        if (w.f)
            lq_vx_file_abort(&w);
        remove(tmp);
        free(tmp);
        return rc;
    }
    rc = lq_vx_file_close(&w, NULL, err);
    if (!rc && rename(tmp, path))
        rc = lq_err_set(err, LQ_EIO, "%s: cannot rename into place", path);
    if (rc)
        remove(tmp);
    free(tmp);
    return rc;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int lq_knn_store_load(const char *path, int hidden, lq_knn_store **out, lq_err *err)
{
    if (!out)
        return lq_err_set(err, LQ_EINVAL, "knn store load: out is required");
    *out = NULL;
    lq_mapfile m = {0};
    int rc = lq_mapfile_open(&m, path, err);
    if (rc)
        return rc;
    const uint8_t *p = m.data;
    size_t n = m.size, off = 16;
    lq_knn_store *s = NULL;
    float *key = NULL;
    if (n < 16 || memcmp(p, KNN_MAGIC, 4)) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: not a knn_store.bin (magic \"LKNN\" expected, %zu bytes)", path, n);
        goto out;
    }
    uint32_t ver = get_u32(p + 4), dim = get_u32(p + 8), nl = get_u32(p + 12);
    if (ver != KNN_VERSION) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: knn_store version %u (only 1 is known)", path, ver);
        goto out;
    }
    /* dim is checked even with no layers: the key buffer below is sized by it */
    if (nl > LQ_VINDEX_MAX_LAYERS || dim > LQ_VINDEX_MAX_HIDDEN || (nl && dim < 1)) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: %u layers of dim %u (limits %d layers, dim 1..%d)", path, nl, dim,
                        LQ_VINDEX_MAX_LAYERS, LQ_VINDEX_MAX_HIDDEN);
        goto out;
    }
    if (nl && (int)dim != hidden) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: keys have dim %u, the model's hidden size is %d", path, dim, hidden);
        goto out;
    }
    if ((rc = lq_knn_store_create(hidden, &s, err)))
        goto out;
    key = malloc((size_t)(nl && dim ? dim : 1) * sizeof *key);
    if (!key) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t li = 0; li < nl && !rc; li++) {
        if (n - off < 8) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: truncated at layer header %u (offset %zu)", path, li, off);
            break;
        }
        uint32_t layer = get_u32(p + off), cnt = get_u32(p + off + 4);
        off += 8;
        size_t fixed = (size_t)dim * 2 + 4; /* key + target id per entry */
        if (layer >= LQ_VINDEX_MAX_LAYERS || cnt > (n - off) / fixed) {
            rc = lq_err_set(err, LQ_EFORMAT,
                            "%s: layer %u with %u entries does not fit the %zu bytes left (offset %zu)", path,
                            layer, cnt, n - off, off);
            break;
        }
        const uint8_t *keys = p + off, *ids = p + off + (size_t)cnt * dim * 2;
        off += (size_t)cnt * fixed;
        for (uint32_t i = 0; i < cnt && !rc; i++) {
            if (n - off < 4 || get_u32(p + off) > KNN_MAX_META || get_u32(p + off) > n - off - 4) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: layer %u entry %u: metadata length past the end (offset %zu)",
                                path, layer, i, off);
                break;
            }
            uint32_t ml = get_u32(p + off);
            json_error_t je;
            json_t *meta = json_loadb((const char *)p + off + 4, ml, 0, &je);
            off += 4 + (size_t)ml;
            if (!json_is_object(meta)) {
                json_decref(meta);
                rc = lq_err_set(err, LQ_EFORMAT, "%s: layer %u entry %u: metadata is not a JSON object", path,
                                layer, i);
                break;
            }
            for (uint32_t d = 0; d < dim; d++) {
                uint16_t hb;
                memcpy(&hb, keys + ((size_t)i * dim + d) * 2, 2);
                key[d] = lq_f16_to_f32(hb);
            }
            const char *tt = json_string_value(json_object_get(meta, "target_token"));
            const char *en = json_string_value(json_object_get(meta, "entity"));
            const char *re = json_string_value(json_object_get(meta, "relation"));
            json_t *cf = json_object_get(meta, "confidence");
            lq_knn_entry e = {(int)layer, key, (int32_t)get_u32(ids + (size_t)i * 4), tt ? tt : "", en ? en : "",
                              re ? re : "", json_is_number(cf) ? (float)json_number_value(cf) : 1.0f};
            rc = lq_knn_store_add_entry(s, &e, err);
            if (rc)
                lq_err_prefix(err, "%s: layer %u entry %u", path, layer, i);
            json_decref(meta);
        }
    }
    if (!rc && off != n)
        rc = lq_err_set(err, LQ_EFORMAT, "%s: %zu bytes after the last layer", path, n - off);
out:
    free(key);
    lq_mapfile_close(&m);
    if (rc)
        lq_knn_store_free(s);
    else
        *out = s;
    return rc;
}

/* ---- INSERT ... MODE KNN ---- */

char *lq_vx_canonical_prompt(const char *entity, const char *relation)
{
    size_t rl = strlen(relation), el = strlen(entity);
    char *prompt = malloc(rl + el + 16);
    if (!prompt)
        return NULL;
    int k = snprintf(prompt, rl + el + 16, "The ");
    for (size_t i = 0; i < rl; i++)
        prompt[k++] = relation[i] == '-' || relation[i] == '_' ? ' ' : relation[i];
    snprintf(prompt + k, rl + el + 16 - (size_t)k, " of %s is", entity);
    return prompt;
}

size_t lq_vx_knn_remove(lq_knn_store *s, const char *entity, const char *relation)
{
    size_t w = 0, n0 = s->n;
    for (size_t i = 0; i < s->n; i++) {
        lq_vx_knn_entry *e = &s->e[i];
        if (!strcmp(e->entity ? e->entity : "", entity) && (!relation || !strcmp(e->relation ? e->relation : "", relation))) {
            entry_free(e);
            continue;
        }
        s->e[w++] = *e;
    }
    s->n = w;
    return n0 - w;
}
