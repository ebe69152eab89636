/* safetensors reader: one file (mapped or a caller's buffer) or a folder of shards.
 * include/larql/safetensors.h describes the format and every check made here. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/f16.h"
#include "core/mapfile.h"
#include "larql/safetensors.h"

typedef struct st_file {
    lq_mapfile map;
    const uint8_t *buf;
    uint64_t size;
    char *name; /* shard file name for messages ("" for buffers) */
    json_t *meta; /* "__metadata__" object or NULL */
} st_file;

struct lq_safetensors {
    st_file *files;
    int n_files;
    lq_st_tensor *t; /* [n] in file order */
    int64_t n, cap;
    int64_t *sorted; /* indexes of t sorted by name, for lq_st_find */
};

static const struct {
    const char *name;
    uint32_t size;
} dtypes[LQ_ST_N_DTYPES] = {
    [LQ_ST_BOOL] = {"BOOL", 1}, [LQ_ST_U8] = {"U8", 1},     [LQ_ST_I8] = {"I8", 1},
    [LQ_ST_I16] = {"I16", 2},   [LQ_ST_U16] = {"U16", 2},   [LQ_ST_F16] = {"F16", 2},
    [LQ_ST_BF16] = {"BF16", 2}, [LQ_ST_I32] = {"I32", 4},   [LQ_ST_U32] = {"U32", 4},
    [LQ_ST_F32] = {"F32", 4},   [LQ_ST_F64] = {"F64", 8},   [LQ_ST_I64] = {"I64", 8},
    [LQ_ST_U64] = {"U64", 8},   [LQ_ST_F8_E4M3] = {"F8_E4M3", 1}, [LQ_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *lq_st_dtype_name(int d) { return d >= 0 && d < LQ_ST_N_DTYPES ? dtypes[d].name : "unknown"; }
uint32_t lq_st_dtype_size(int d) { return d >= 0 && d < LQ_ST_N_DTYPES ? dtypes[d].size : 0; }

static int dtype_by_name(const char *s)
{
    for (int d = 0; d < LQ_ST_N_DTYPES; d++)
        if (!strcmp(s, dtypes[d].name))
            return d;
    return -1;
}

float lq_st_get_f32(const lq_st_tensor *t, uint64_t i)
{
    const uint8_t *p = t->data + i * lq_st_dtype_size(t->dtype);
    uint16_t h;
    float f;
    double d;
    switch (t->dtype) {
    case LQ_ST_F32: memcpy(&f, p, 4); return f;
    case LQ_ST_F16: memcpy(&h, p, 2); return lq_f16_to_f32(h);
    case LQ_ST_BF16: memcpy(&h, p, 2); return lq_bf16_to_f32(h);
    case LQ_ST_F64: memcpy(&d, p, 8); return (float)d;
    default: return 0.0f;
    }
}

/* ---- one file ---- */

static int push_tensor(lq_safetensors *s, lq_err *err)
{
    if (s->n >= (int64_t)LQ_ST_MAX_TENSORS)
        return lq_err_set(err, LQ_ERANGE, "more than %u tensors", LQ_ST_MAX_TENSORS);
    if (s->n == s->cap) {
        int64_t nc = s->cap ? s->cap * 2 : 64;
        lq_st_tensor *p = realloc(s->t, (size_t)nc * sizeof *p);
        if (!p)
            return lq_err_set(err, LQ_ENOMEM, "out of memory for %lld tensors", (long long)nc);
        s->t = p;
        s->cap = nc;
    }
    memset(&s->t[s->n], 0, sizeof s->t[0]);
    s->n++;
    return LQ_OK;
}

/* A JSON integer in [0, 2^63): jansson holds integers as long long. */
static int get_u64(const json_t *j, uint64_t *out)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(j);
    return 0;
}

static int parse_entry(lq_safetensors *s, st_file *f, const char *name, const json_t *v,
                       uint64_t data_size, lq_err *err)
{
    const char *fn = f->name;
    size_t nl = strlen(name);
    if (nl == 0 || nl > LQ_ST_MAX_NAME)
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor name of %zu bytes (1..%d)", fn, nl, LQ_ST_MAX_NAME);
    if (!json_is_object(v))
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': header entry is not an object", fn, name);
    const json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
                 *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': needs \"dtype\" (string), \"shape\" and "
                          "\"data_offsets\" (arrays)", fn, name);
    int dt = dtype_by_name(json_string_value(jd));
    if (dt < 0)
        return lq_err_set(err, LQ_EUNSUPPORTED, "%s: tensor '%s': unknown dtype '%.32s'", fn, name,
                          json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > LQ_ST_MAX_DIMS)
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': %zu dimensions (at most %d)", fn, name, nd,
                          LQ_ST_MAX_DIMS);
    int rc = push_tensor(s, err);
    if (rc)
        return rc;
    lq_st_tensor *t = &s->t[s->n - 1];
    t->dtype = dt;
    t->n_dims = (uint32_t)nd;
    t->file = f->name;
    uint64_t n = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t e;
        if (get_u64(json_array_get(js, d), &e))
            return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                              fn, name, d);
        t->shape[d] = e;
        if (e && n > UINT64_MAX / e)
            return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': element count overflows", fn, name);
        n *= e;
    }
    uint64_t b, e;
    if (json_array_size(jo) != 2 || get_u64(json_array_get(jo, 0), &b) || get_u64(json_array_get(jo, 1), &e))
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': data_offsets must be [begin, end]", fn, name);
    if (b > e || e > data_size)
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu) outside the data "
                          "section (%llu bytes)", fn, name, (unsigned long long)b, (unsigned long long)e,
                          (unsigned long long)data_size);
    uint32_t es = dtypes[dt].size;
    if (n > UINT64_MAX / es || n * es != e - b)
        return lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s': %llu elements of %s need %llu bytes, "
                          "data_offsets give %llu", fn, name, (unsigned long long)n, dtypes[dt].name,
                          n > UINT64_MAX / es ? 0ull : (unsigned long long)(n * es),
                          (unsigned long long)(e - b));
    t->name = strdup(name);
    if (!t->name)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    t->n_elements = n;
    t->n_bytes = e - b;
    /* data offset kept relative until the ranges are checked; rebased below */
    t->data = (const uint8_t *)(uintptr_t)b;
    return LQ_OK;
}

static int cmp_begin(const void *a, const void *b)
{
    const lq_st_tensor *x = a, *y = b;
    uintptr_t p = (uintptr_t)x->data, q = (uintptr_t)y->data;
    if (p != q)
        return p < q ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

static int parse_file(lq_safetensors *s, st_file *f, lq_err *err)
{
    const char *fn = f->name;
    if (f->size < 8)
        return lq_err_set(err, LQ_EFORMAT, "%s: %llu bytes, too short for a safetensors header", fn,
                          (unsigned long long)f->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | f->buf[i];
    if (hl > LQ_ST_MAX_HEADER)
        return lq_err_set(err, LQ_EFORMAT, "%s: header length %llu exceeds the cap of %u bytes", fn,
                          (unsigned long long)hl, LQ_ST_MAX_HEADER);
    if (hl < 2 || hl > f->size - 8)
        return lq_err_set(err, LQ_EFORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)",
                          fn, (unsigned long long)hl, (unsigned long long)f->size);
    json_error_t je;
    json_t *h = json_loadb((const char *)f->buf + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!h)
        return lq_err_set(err, LQ_EFORMAT, "%s: header JSON: %s (byte %d)", fn, je.text, je.position);
    int rc = LQ_OK;
    uint64_t data_size = f->size - 8 - hl;
    int64_t first = s->n;
    const char *key;
    json_t *v;
    if (!json_is_object(h)) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: header is not a JSON object", fn);
        goto out;
    }
    json_object_foreach(h, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: __metadata__ is not an object", fn);
                goto out;
            }
            json_object_foreach(v, mk, mv) if (!json_is_string(mv)) {
                rc = lq_err_set(err, LQ_EFORMAT, "%s: __metadata__ '%.64s' is not a string", fn, mk);
                goto out;
            }
            f->meta = json_incref(v);
            continue;
        }
        if ((rc = parse_entry(s, f, key, v, data_size, err)))
            goto out;
    }
    /* the ranges must tile the data section: sorted by begin, each starts where the last ended */
    int64_t nt = s->n - first;
    if (nt > 1) /* (s->t is NULL while no tensor has been seen) */
        qsort(s->t + first, (size_t)nt, sizeof *s->t, cmp_begin);
    uint64_t at = 0;
    for (int64_t i = first; i < s->n; i++) {
        uint64_t b = (uint64_t)(uintptr_t)s->t[i].data;
        if (b < at) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s' [%llu, %llu) overlaps '%s' (ends at %llu)", fn,
                            s->t[i].name, (unsigned long long)b, (unsigned long long)(b + s->t[i].n_bytes),
                            s->t[i - 1].name, (unsigned long long)at);
            goto out;
        }
        if (b > at) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s' starts at %llu, leaving a hole after byte %llu", fn,
                            s->t[i].name, (unsigned long long)b, (unsigned long long)at);
            goto out;
        }
        at = b + s->t[i].n_bytes;
        s->t[i].data = f->buf + 8 + hl + b;
    }
    if (at != data_size)
        rc = lq_err_set(err, LQ_EFORMAT, "%s: tensors cover %llu of the %llu data bytes", fn,
                        (unsigned long long)at, (unsigned long long)data_size);
out:
    json_decref(h);
    /* on an error the handle is closed unseen: offsets not yet rebased are never read */
    return rc;
}

static int cmp_name(const void *a, const void *b, void *ctx)
{
    const lq_safetensors *s = ctx;
    return strcmp(s->t[*(const int64_t *)a].name, s->t[*(const int64_t *)b].name);
}

/* Name index; a name twice (in two shards) is an error. */
static int build_index(lq_safetensors *s, lq_err *err)
{
    s->sorted = malloc((size_t)(s->n ? s->n : 1) * sizeof *s->sorted);
    if (!s->sorted)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    for (int64_t i = 0; i < s->n; i++)
        s->sorted[i] = i;
    qsort_r(s->sorted, (size_t)s->n, sizeof *s->sorted, cmp_name, s);
    for (int64_t i = 1; i < s->n; i++) {
        const lq_st_tensor *a = &s->t[s->sorted[i - 1]], *b = &s->t[s->sorted[i]];
        if (!strcmp(a->name, b->name))
            return lq_err_set(err, LQ_EFORMAT, "tensor '%s' appears in both %s and %s", a->name, a->file, b->file);
    }
    return LQ_OK;
}

static lq_safetensors *st_new(int n_files)
{
    lq_safetensors *s = calloc(1, sizeof *s);
    if (s && !(s->files = calloc((size_t)n_files, sizeof *s->files))) {
        free(s);
        return NULL;
    }
    return s;
}

void lq_st_close(lq_safetensors *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n; i++)
        free((char *)s->t[i].name);
    for (int i = 0; i < s->n_files; i++) {
        lq_mapfile_close(&s->files[i].map);
        free(s->files[i].name);
        json_decref(s->files[i].meta);
    }
    free(s->files);
    free(s->t);
    free(s->sorted);
    free(s);
}

/* A file (path) or a caller's buffer (path NULL) as the next file of s; label names it in
 * messages. */
static int open_one(lq_safetensors *s, const char *path, const void *buf, size_t len, const char *label,
                    lq_err *err)
{
    st_file *f = &s->files[s->n_files++];
    f->name = strdup(label);
    if (!f->name)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (path) {
        int rc = lq_mapfile_open(&f->map, path, err);
        if (rc)
            return rc;
        buf = f->map.data;
        len = f->map.size;
    }
    f->buf = buf;
    f->size = len;
    return parse_file(s, f, err);
}

/* label: the name messages use (a folder's file is named without the folder, which the
 * converter's messages already give) */
static int open_file(const char *path, const void *buf, size_t len, const char *label, lq_safetensors **out,
                     lq_err *err)
{
    *out = NULL;
    lq_safetensors *s = st_new(1);
    if (!s)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    int rc = open_one(s, path, buf, len, label, err);
    if (!rc)
        rc = build_index(s, err);
    if (rc) {
        lq_st_close(s);
        return rc;
    }
    *out = s;
    return LQ_OK;
}

int lq_st_open(const char *path, lq_safetensors **out, lq_err *err)
{
    return open_file(path, NULL, 0, path, out, err);
}

int lq_st_open_buffer(const void *buf, size_t len, lq_safetensors **out, lq_err *err)
{
    return open_file(NULL, buf, len, "(buffer)", out, err);
}

/* ---- a folder ---- */

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s/%s", dir, name);
    return p;
}

/* A shard name from the index must be a plain file name in the folder. */
static int plain_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int shard_index(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

/* model-*.safetensors files in dir that the index does not name: a stale or partial
 * download would otherwise be ignored silently. */
static int check_unlisted(const char *dir, const char *const *names, int n, lq_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return lq_err_set(err, LQ_EIO, "%s: %s", dir, strerror(errno));
    int rc = LQ_OK;
    struct dirent *e;
    while ((e = readdir(d)) && !rc) {
        size_t l = strlen(e->d_name);
        if (l > 18 && !strncmp(e->d_name, "model-", 6) && !strcmp(e->d_name + l - 12, ".safetensors") &&
            shard_index(names, n, e->d_name) < 0)
            rc = lq_err_set(err, LQ_EFORMAT, "%s: shard '%s' is missing from model.safetensors.index.json",
                            dir, e->d_name);
    }
    closedir(d);
    return rc;
}

static int open_index(const char *dir, const char *ipath, lq_safetensors **out, lq_err *err)
{
    json_error_t je;
    json_t *ix = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
    if (!ix)
        return lq_err_set(err, LQ_EFORMAT, "%s: line %d: %s", ipath, je.line, je.text);
    int rc = LQ_OK;
    const char **names = NULL;
    int ns = 0;
    lq_safetensors *s = NULL;
    json_t *wm = json_object_get(ix, "weight_map");
    const char *key;
    json_t *v;
    if (!json_is_object(wm) || json_object_size(wm) == 0 || json_object_size(wm) > LQ_ST_MAX_TENSORS) {
        rc = lq_err_set(err, LQ_EFORMAT, "%s: \"weight_map\" must be a non-empty object (at most %u tensors)",
                        ipath, LQ_ST_MAX_TENSORS);
        goto out;
    }
    names = calloc(LQ_ST_MAX_SHARDS, sizeof *names);
    if (!names) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v) || !plain_name(json_string_value(v))) {
            rc = lq_err_set(err, LQ_EFORMAT, "%s: weight_map['%.200s'] is not a file name in the folder", ipath, key);
            goto out;
        }
        if (shard_index(names, ns, json_string_value(v)) >= 0)
            continue;
        if (ns == LQ_ST_MAX_SHARDS) {
            rc = lq_err_set(err, LQ_ERANGE, "%s: more than %d shards", ipath, LQ_ST_MAX_SHARDS);
            goto out;
        }
        names[ns++] = json_string_value(v);
    }
    if ((rc = check_unlisted(dir, names, ns, err)))
        goto out;
    if (!(s = st_new(ns))) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < ns && !rc; i++) {
        char *p = join(dir, names[i]);
        struct stat st;
        if (!p)
            rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        else if (stat(p, &st) != 0)
            rc = lq_err_set(err, LQ_ENOTFOUND, "%s: shard '%s' named by model.safetensors.index.json: %s", dir,
                            names[i], strerror(errno));
        else
            rc = open_one(s, p, NULL, 0, names[i], err);
        free(p);
    }
    if (!rc)
        rc = build_index(s, err);
    /* the index and the shards must agree on where every tensor is */
    for (int64_t i = 0; i < (s ? s->n : 0) && !rc; i++) {
        json_t *w = json_object_get(wm, s->t[i].name);
        if (!w)
            rc = lq_err_set(err, LQ_EFORMAT, "%s: tensor '%s' is not in model.safetensors.index.json", s->t[i].file,
                            s->t[i].name);
        else if (strcmp(json_string_value(w), s->t[i].file))
            rc = lq_err_set(err, LQ_EFORMAT, "tensor '%s' is in %s, the index says %s", s->t[i].name, s->t[i].file,
                            json_string_value(w));
    }
    json_object_foreach(wm, key, v) {
        if (rc)
            break;
        if (!lq_st_find(s, key))
            rc = lq_err_set(err, LQ_ENOTFOUND, "tensor '%.200s': the index places it in %s, which does not hold it",
                            key, json_string_value(v));
    }
out:
    free(names);
    json_decref(ix);
    if (rc)
        lq_st_close(s);
    else
        *out = s;
    return rc;
}

int lq_st_open_dir(const char *dir, lq_safetensors **out, lq_err *err)
{
    *out = NULL;
    char *ip = join(dir, "model.safetensors.index.json"), *sp = join(dir, "model.safetensors");
    int rc;
    struct stat st;
    if (!ip || !sp)
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    else if (stat(ip, &st) == 0)
        rc = open_index(dir, ip, out, err);
    else if (stat(sp, &st) == 0)
        rc = open_file(sp, NULL, 0, "model.safetensors", out, err);
    else
        rc = lq_err_set(err, LQ_ENOTFOUND, "%s: neither model.safetensors.index.json nor model.safetensors", dir);
    free(ip);
    free(sp);
    return rc;
}

/* ---- lookups ---- */

int64_t lq_st_n_tensors(const lq_safetensors *s) { return s ? s->n : 0; }

const lq_st_tensor *lq_st_tensor_at(const lq_safetensors *s, int64_t i)
{
    return s && i >= 0 && i < s->n ? &s->t[i] : NULL;
}

const lq_st_tensor *lq_st_find(const lq_safetensors *s, const char *name)
{
    if (!s || !s->sorted)
        return NULL;
    int64_t lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->t[s->sorted[mid]].name, name);
        if (!c)
            return &s->t[s->sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *lq_st_metadata(const lq_safetensors *s, const char *key)
{
    if (!s || s->n_files < 1 || !s->files[0].meta)
        return NULL;
    return json_string_value(json_object_get(s->files[0].meta, key));
}
