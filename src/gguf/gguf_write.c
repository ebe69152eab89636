/* GGUF v3 writer. Metadata values are encoded (and so copied) when added; tensor data is
 * referenced and streamed out at write time, so a writer for a 1 GB model holds only its
 * metadata. Output: header, KVs in insertion order, tensor infos in insertion order, zero
 * padding to the alignment, then each tensor's data padded to the alignment (as ggml does).
 * Files are written to a temporary name in the same directory, fsynced and renamed, so a
 * reader never sees a half-written file under the final name. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"

typedef struct wkv {
    char *key;
    size_t key_len;
    int type;
    uint8_t *val;  /* encoded value (bytes after the type field) */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;
    size_t name_len;
    uint32_t n_dims;
    uint64_t ne[LQ_GGUF_MAX_DIMS];
    int type;
    const void *data; /* caller's, not copied */
    uint64_t nbytes;
} wtensor;

struct lq_gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *ts;
    size_t n_t, cap_t;
    uint32_t alignment;
};

lq_gguf_writer *lq_gguf_writer_create(void)
{
    lq_gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->alignment = LQ_GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void lq_gguf_writer_free(lq_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->ts[i].name);
    free(w->kvs);
    free(w->ts);
    free(w);
}

static wkv *find_kv(lq_gguf_writer *w, const char *key, size_t n)
{
    for (size_t i = 0; i < w->n_kv; i++) /* writers hold tens of keys: a scan is fine */
        if (w->kvs[i].key_len == n && memcmp(w->kvs[i].key, key, n) == 0)
            return &w->kvs[i];
    return NULL;
}

static int is_pow2(uint64_t a) { return a && !(a & (a - 1)) && a <= (1u << 30); }

/* Integer value of an encoded scalar (for general.alignment), or -1 if not an integer. */
static int64_t scalar_int(int type, const uint8_t *v)
{
    switch (type) {
    case LQ_GGUF_U8: return v[0];
    case LQ_GGUF_U16: return lq_rd_u16(v);
    case LQ_GGUF_U32: return lq_rd_u32(v);
    case LQ_GGUF_U64: return lq_rd_u64(v) > (uint64_t)INT64_MAX ? -1 : (int64_t)lq_rd_u64(v);
    case LQ_GGUF_I8: return (int8_t)v[0];
    case LQ_GGUF_I16: return (int16_t)lq_rd_u16(v);
    case LQ_GGUF_I32: return (int32_t)lq_rd_u32(v);
    case LQ_GGUF_I64: return (int64_t)lq_rd_u64(v);
    default: return -1;
    }
}

/* Takes ownership of val (freed on failure). */
static int add_raw(lq_gguf_writer *w, const char *key, int type, uint8_t *val, size_t val_len)
{
    if (!w || !key) {
        free(val);
        return LQ_EINVAL;
    }
    size_t n = strlen(key);
    if (n > LQ_GGUF_MAX_KEY || find_kv(w, key, n)) {
        free(val);
        return LQ_EINVAL;
    }
    if (n == 17 && memcmp(key, "general.alignment", 17) == 0) {
        int64_t a = scalar_int(type, val);
        if (a < 0 || !is_pow2((uint64_t)a)) {
            free(val);
            return LQ_EINVAL;
        }
        w->alignment = (uint32_t)a;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *k = realloc(w->kvs, cap * sizeof *k);
        if (!k) {
            free(val);
            return LQ_ENOMEM;
        }
        w->kvs = k;
        w->cap_kv = cap;
    }
    char *kc = malloc(n + 1);
    if (!kc) {
        free(val);
        return LQ_ENOMEM;
    }
    memcpy(kc, key, n + 1);
    w->kvs[w->n_kv++] = (wkv){kc, n, type, val, val_len};
    /* kc is owned by w->kvs now (freed by lq_gguf_writer_free); cppcheck misses the
     * compound literal */
    /* cppcheck-suppress memleak */
    return LQ_OK;
}

static int add_bytes(lq_gguf_writer *w, const char *key, int type, const void *v, size_t n)
{
    uint8_t *val = malloc(n ? n : 1);
    if (!val)
        return LQ_ENOMEM;
    memcpy(val, v, n);
    return add_raw(w, key, type, val, n);
}

int lq_gguf_writer_add_scalar(lq_gguf_writer *w, const char *key, int vtype, const void *v)
{
    uint32_t sz = lq_gguf_scalar_size(vtype);
    if (!sz || !v)
        return LQ_EINVAL;
    /* The caller's bytes are host order; GGUF is little-endian, which x86-64 is. */
    return add_bytes(w, key, vtype, v, sz);
}

int lq_gguf_writer_add_u32(lq_gguf_writer *w, const char *key, uint32_t v)
{
    uint8_t b[4];
    lq_wr_u32(b, v);
    return add_bytes(w, key, LQ_GGUF_U32, b, 4);
}

int lq_gguf_writer_add_i32(lq_gguf_writer *w, const char *key, int32_t v)
{
    uint8_t b[4];
    lq_wr_u32(b, (uint32_t)v);
    return add_bytes(w, key, LQ_GGUF_I32, b, 4);
}

int lq_gguf_writer_add_u64(lq_gguf_writer *w, const char *key, uint64_t v)
{
    uint8_t b[8];
    lq_wr_u64(b, v);
    return add_bytes(w, key, LQ_GGUF_U64, b, 8);
}

int lq_gguf_writer_add_f32(lq_gguf_writer *w, const char *key, float v)
{
    uint32_t u;
    uint8_t b[4];
    memcpy(&u, &v, 4);
    lq_wr_u32(b, u);
    return add_bytes(w, key, LQ_GGUF_F32, b, 4);
}

int lq_gguf_writer_add_f64(lq_gguf_writer *w, const char *key, double v)
{
    uint64_t u;
    uint8_t b[8];
    memcpy(&u, &v, 8);
    lq_wr_u64(b, u);
    return add_bytes(w, key, LQ_GGUF_F64, b, 8);
}

int lq_gguf_writer_add_bool(lq_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return add_bytes(w, key, LQ_GGUF_BOOL, &b, 1);
}

int lq_gguf_writer_add_str(lq_gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return LQ_EINVAL;
    size_t n = strlen(v);
    if (n > LQ_GGUF_MAX_STRING)
        return LQ_EINVAL;
    uint8_t *val = malloc(8 + n);
    if (!val)
        return LQ_ENOMEM;
    lq_wr_u64(val, n);
    memcpy(val + 8, v, n);
    return add_raw(w, key, LQ_GGUF_STRING, val, 8 + n);
}

int lq_gguf_writer_add_arr_str(lq_gguf_writer *w, const char *key, const char *const *v, uint64_t n)
{
    if ((!v && n) || n > LQ_GGUF_MAX_ARRAY)
        return LQ_EINVAL;
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i])
            return LQ_EINVAL;
        size_t len = strlen(v[i]);
        if (len > LQ_GGUF_MAX_STRING)
            return LQ_EINVAL;
        total += 8 + len;
    }
    uint8_t *val = malloc(total), *p = val;
    if (!val)
        return LQ_ENOMEM;
    lq_wr_u32(p, LQ_GGUF_STRING);
    lq_wr_u64(p + 4, n);
    p += 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = strlen(v[i]);
        lq_wr_u64(p, len);
        memcpy(p + 8, v[i], len);
        p += 8 + len;
    }
    return add_raw(w, key, LQ_GGUF_ARRAY, val, total);
}

int lq_gguf_writer_add_arr(lq_gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n)
{
    uint32_t sz = lq_gguf_scalar_size(elem_type);
    if (!sz || (!data && n) || n > LQ_GGUF_MAX_ARRAY)
        return LQ_EINVAL;
    size_t total = 12 + (size_t)n * sz;
    uint8_t *val = malloc(total);
    if (!val)
        return LQ_ENOMEM;
    lq_wr_u32(val, (uint32_t)elem_type);
    lq_wr_u64(val + 4, n);
    if (n)
        memcpy(val + 12, data, (size_t)n * sz); /* host order = little-endian on our targets */
    return add_raw(w, key, LQ_GGUF_ARRAY, val, total);
}

int lq_gguf_writer_copy_kv(lq_gguf_writer *w, const lq_gguf *g, int64_t idx)
{
    const uint8_t *val;
    uint64_t len;
    const char *key = lq_gguf_key(g, idx);
    if (!key || lq_gguf_kv_raw(g, idx, &val, &len))
        return LQ_EINVAL;
    return add_bytes(w, key, lq_gguf_kv_type(g, idx), val, (size_t)len);
}

int lq_gguf_writer_set_alignment(lq_gguf_writer *w, uint32_t alignment)
{
    if (!w || !is_pow2(alignment))
        return LQ_EINVAL;
    wkv *kv = find_kv(w, "general.alignment", 17);
    if (!kv)
        return lq_gguf_writer_add_u32(w, "general.alignment", alignment);
    uint8_t *val = malloc(4);
    if (!val)
        return LQ_ENOMEM;
    lq_wr_u32(val, alignment);
    free(kv->val);
    kv->type = LQ_GGUF_U32;
    kv->val = val;
    kv->val_len = 4;
    w->alignment = alignment;
    return LQ_OK;
}

int lq_gguf_writer_add_tensor(lq_gguf_writer *w, const char *name, uint32_t n_dims,
                              const uint64_t *ne, int type, const void *data, uint64_t nbytes)
{
    if (!w || !name || !ne || !data || n_dims < 1 || n_dims > LQ_GGUF_MAX_DIMS)
        return LQ_EINVAL;
    size_t len = strlen(name);
    if (len > LQ_GGUF_MAX_NAME)
        return LQ_EINVAL;
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX || n > UINT64_MAX / ne[d])
            return LQ_EINVAL;
        n *= ne[d];
    }
    uint64_t need;
    if (lq_ggml_nbytes(type, ne[0], n, &need, NULL) || need != nbytes)
        return LQ_EINVAL;
    for (size_t i = 0; i < w->n_t; i++)
        if (w->ts[i].name_len == len && memcmp(w->ts[i].name, name, len) == 0)
            return LQ_EINVAL;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *t = realloc(w->ts, cap * sizeof *t);
        if (!t)
            return LQ_ENOMEM;
        w->ts = t;
        w->cap_t = cap;
    }
    char *nc = malloc(len + 1);
    if (!nc)
        return LQ_ENOMEM;
    memcpy(nc, name, len + 1);
    wtensor *t = &w->ts[w->n_t++];
    *t = (wtensor){nc, len, n_dims, {1, 1, 1, 1}, type, data, nbytes};
    for (uint32_t d = 0; d < n_dims; d++)
        t->ne[d] = ne[d];
    return LQ_OK;
}

/* ---- serialisation ---- */

/* Output goes either to a preallocated buffer or, through a staging buffer, to an fd. */
typedef struct sink {
    int fd;          /* -1: buffer mode */
    uint8_t *buf;
    size_t len, cap;
    const char *path;
    lq_err *err;
} sink;

static int fd_write_all(sink *s, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(s->fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return lq_err_set(s->err, LQ_EIO, "%s: write failed: %s", s->path, strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return LQ_OK;
}

static int flush(sink *s)
{
    int rc = s->fd >= 0 ? fd_write_all(s, s->buf, s->len) : LQ_OK;
    s->len = 0;
    return rc;
}

static int put(sink *s, const void *p, size_t n)
{
    if (s->fd < 0) { /* buffer mode: sized exactly up front */
        memcpy(s->buf + s->len, p, n);
        s->len += n;
        return LQ_OK;
    }
    if (n > s->cap - s->len) {
        int rc = flush(s);
        if (rc)
            return rc;
        if (n >= s->cap) /* big tensor: straight from the caller's memory */
            return fd_write_all(s, p, n);
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return LQ_OK;
}

static int put_u32(sink *s, uint32_t v)
{
    uint8_t b[4];
    lq_wr_u32(b, v);
    return put(s, b, 4);
}

static int put_u64(sink *s, uint64_t v)
{
    uint8_t b[8];
    lq_wr_u64(b, v);
    return put(s, b, 8);
}

static int put_zeros(sink *s, uint64_t n)
{
    static const uint8_t z[64];
    int rc = LQ_OK;
    while (n && !rc) {
        size_t k = n > sizeof z ? sizeof z : (size_t)n;
        rc = put(s, z, k);
        n -= k;
    }
    return rc;
}

static uint64_t align_up(uint64_t x, uint32_t a) { return (x + a - 1) / a * a; }

static uint64_t header_size(const lq_gguf_writer *w)
{
    uint64_t n = 24;
    for (size_t i = 0; i < w->n_kv; i++)
        n += 8 + w->kvs[i].key_len + 4 + w->kvs[i].val_len;
    for (size_t i = 0; i < w->n_t; i++)
        n += 8 + w->ts[i].name_len + 4 + 8 * (uint64_t)w->ts[i].n_dims + 4 + 8;
    return n;
}

static uint64_t total_size(const lq_gguf_writer *w)
{
    uint64_t n = align_up(header_size(w), w->alignment);
    for (size_t i = 0; i < w->n_t; i++)
        n += align_up(w->ts[i].nbytes, w->alignment);
    return n;
}

static int emit(const lq_gguf_writer *w, sink *s)
{
    int rc = put_u32(s, LQ_GGUF_MAGIC);
    if (!rc) rc = put_u32(s, 3);
    if (!rc) rc = put_u64(s, w->n_t);
    if (!rc) rc = put_u64(s, w->n_kv);
    for (size_t i = 0; i < w->n_kv && !rc; i++) {
        const wkv *kv = &w->kvs[i];
        rc = put_u64(s, kv->key_len);
        if (!rc) rc = put(s, kv->key, kv->key_len);
        if (!rc) rc = put_u32(s, (uint32_t)kv->type);
        if (!rc) rc = put(s, kv->val, kv->val_len);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t && !rc; i++) {
        const wtensor *t = &w->ts[i];
        rc = put_u64(s, t->name_len);
        if (!rc) rc = put(s, t->name, t->name_len);
        if (!rc) rc = put_u32(s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && !rc; d++)
            rc = put_u64(s, t->ne[d]);
        if (!rc) rc = put_u32(s, (uint32_t)t->type);
        if (!rc) rc = put_u64(s, off);
        off += align_up(t->nbytes, w->alignment);
    }
    uint64_t h = header_size(w);
    if (!rc) rc = put_zeros(s, align_up(h, w->alignment) - h);
    for (size_t i = 0; i < w->n_t && !rc; i++) {
        const wtensor *t = &w->ts[i];
        rc = put(s, t->data, (size_t)t->nbytes);
        if (!rc) rc = put_zeros(s, align_up(t->nbytes, w->alignment) - t->nbytes);
    }
    if (!rc) rc = flush(s);
    return rc;
}

int lq_gguf_writer_write_buffer(lq_gguf_writer *w, uint8_t **buf, size_t *len, lq_err *err)
{
    if (!w || !buf || !len)
        return lq_err_set(err, LQ_EINVAL, "gguf_writer_write_buffer: NULL argument");
    uint64_t total = total_size(w);
    if (total > SIZE_MAX)
        return lq_err_set(err, LQ_ENOMEM, "GGUF of %" PRIu64 " bytes does not fit in memory", total);
    sink s = {-1, malloc((size_t)total), 0, (size_t)total, "<buffer>", err};
    if (!s.buf)
        return lq_err_set(err, LQ_ENOMEM, "GGUF buffer of %" PRIu64 " bytes", total);
    int rc = emit(w, &s);
    if (rc) {
        free(s.buf);
        return rc;
    }
    *buf = s.buf;
    *len = (size_t)total;
    return LQ_OK;
}

int lq_gguf_writer_write(lq_gguf_writer *w, const char *path, lq_err *err)
{
    if (!w || !path)
        return lq_err_set(err, LQ_EINVAL, "gguf_writer_write: NULL argument");
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    uint8_t *stage = malloc(1 << 20);
    if (!tmp || !stage) {
        free(tmp);
        free(stage);
        return lq_err_set(err, LQ_ENOMEM, "%s: write buffers", path);
    }
    /* Same directory as the target, so rename() is atomic. */
    snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int rc = lq_err_set(err, LQ_EIO, "%s: cannot create temporary file: %s", path, strerror(errno));
        free(tmp);
        free(stage);
        return rc;
    }
    sink s = {fd, stage, 0, 1 << 20, path, err};
    int rc = emit(w, &s);
    if (!rc && fchmod(fd, 0644) != 0)
        rc = lq_err_set(err, LQ_EIO, "%s: chmod failed: %s", path, strerror(errno));
    if (!rc && fsync(fd) != 0)
        rc = lq_err_set(err, LQ_EIO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = lq_err_set(err, LQ_EIO, "%s: close failed: %s", path, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = lq_err_set(err, LQ_EIO, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    if (rc)
        unlink(tmp);
    free(tmp);
    free(stage);
    return rc;
}
