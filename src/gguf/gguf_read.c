/* GGUF reader: one bounds-checked pass over the header, metadata and tensor infos of a
 * mapped (or caller-held) buffer. Nothing from the file is trusted: every count, length,
 * dimension and offset is checked against the bytes left and against the caps in gguf.h
 * before it sizes an allocation or a loop, so allocations stay proportional to the file.
 *
 * Layout (v2/v3, little-endian):
 *   magic u32 "GGUF", version u32, n_tensors u64, n_kv u64,
 *   n_kv x { key string, vtype u32, value },
 *   n_tensors x { name string, n_dims u32, ne u64[n_dims], type u32, offset u64 },
 *   padding to `alignment`, tensor data (each offset relative to the data start).
 * A string is { len u64, bytes }; an array is { elem_type u32, n u64, elements }. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/mapfile.h"
#include "gguf/gguf_internal.h"

typedef struct kv_entry {
    const char *key;     /* NUL-terminated copy in the arena */
    uint64_t key_len;
    int type;            /* lq_gguf_vtype */
    int arr_type;        /* element type for arrays, else -1 */
    uint64_t arr_len;    /* element count for arrays */
    uint64_t val_off;    /* raw value bytes (after the vtype field) are [val_off, val_end) */
    uint64_t val_end;
    uint64_t data_off;   /* scalar: its bytes; string: its chars; array: first element */
    uint64_t str_len;    /* strings: byte count */
    uint64_t *str_offs;  /* string arrays: [arr_len] offsets of each element's chars */
} kv_entry;

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
} arena_chunk;

struct lq_gguf {
    lq_mapfile map;            /* mapping for lq_gguf_open; {NULL,0} for buffers */
    const uint8_t *buf;
    uint64_t size;
    char *path;                /* "" for buffers */
    uint32_t version, alignment;
    uint64_t data_start;       /* file offset of the tensor data section */
    int64_t n_kv, n_tensors;
    kv_entry *kvs;             /* [n_kv] */
    lq_gguf_tensor *tensors;   /* [n_tensors] */
    uint32_t *kv_hash;         /* open addressing, slot = index+1, 0 = empty */
    uint32_t *t_hash;
    uint64_t kv_mask, t_mask;
    arena_chunk *arena;
};

/* ---- small arena for key and tensor-name copies (total bounded by the file size) ---- */

static char *arena_copy(lq_gguf *g, const uint8_t *s, uint64_t n)
{
    arena_chunk *c = g->arena;
    if (!c || c->cap - c->used < n + 1) {
        size_t cap = n + 1 > 65536 ? (size_t)n + 1 : 65536;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, n);
    p[n] = 0;
    c->used += n + 1;
    return p;
}

/* ---- hash tables over keys and tensor names ---- */

static int hash_alloc(uint32_t **tab, uint64_t *mask, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    *tab = calloc(cap, sizeof **tab);
    *mask = cap - 1;
    return *tab ? LQ_OK : LQ_ENOMEM;
}

/* Returns the slot holding name (its value is index+1) or the empty slot where it goes. */
static uint32_t *hash_slot(uint32_t *tab, uint64_t mask, const char *name, size_t n,
                           const char *(*name_of)(const lq_gguf *, uint32_t, size_t *),
                           const lq_gguf *g)
{
    uint64_t h = lq_gguf_hash(name, n) & mask;
    for (;;) {
        uint32_t v = tab[h];
        if (!v)
            return &tab[h];
        size_t len;
        const char *s = name_of(g, v - 1, &len);
        if (len == n && memcmp(s, name, n) == 0)
            return &tab[h];
        h = (h + 1) & mask;
    }
}

static const char *kv_name_of(const lq_gguf *g, uint32_t i, size_t *len)
{
    *len = (size_t)g->kvs[i].key_len;
    return g->kvs[i].key;
}

static const char *t_name_of(const lq_gguf *g, uint32_t i, size_t *len)
{
    *len = strlen(g->tensors[i].name);
    return g->tensors[i].name;
}

/* ---- bounds-checked cursor ---- */

typedef struct cursor {
    const uint8_t *b;
    uint64_t size, pos;
    lq_err *err;
} cursor;

static int need(cursor *c, uint64_t n, const char *what)
{
    if (n > c->size - c->pos)
        return lq_err_set(c->err, LQ_EFORMAT,
                          "truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64
                          ", file size %" PRIu64, what, n, c->pos, c->size);
    return LQ_OK;
}

static int rd32(cursor *c, uint32_t *v, const char *what)
{
    int rc = need(c, 4, what);
    if (rc)
        return rc;
    *v = lq_rd_u32(c->b + c->pos);
    c->pos += 4;
    return LQ_OK;
}

static int rd64(cursor *c, uint64_t *v, const char *what)
{
    int rc = need(c, 8, what);
    if (rc)
        return rc;
    *v = lq_rd_u64(c->b + c->pos);
    c->pos += 8;
    return LQ_OK;
}

/* Reads a string header and skips its bytes; off and len locate the chars. */
static int rd_str(cursor *c, uint64_t max, uint64_t *off, uint64_t *len, const char *what)
{
    int rc = rd64(c, len, what);
    if (rc)
        return rc;
    if (*len > max)
        return lq_err_set(c->err, LQ_EFORMAT, "%s: string length %" PRIu64 " exceeds cap %" PRIu64,
                          what, *len, max);
    if (*len > c->size - c->pos)
        return lq_err_set(c->err, LQ_EFORMAT,
                          "%s: string length %" PRIu64 " at offset %" PRIu64
                          " runs past end of file (%" PRIu64 ")", what, *len, c->pos, c->size);
    *off = c->pos;
    c->pos += *len;
    return LQ_OK;
}

/* Validates an array header (element type and count) against the bytes left. The count
 * is bounded by the smallest possible element, so later per-element allocations are
 * bounded by the file size. */
static int rd_arr_head(cursor *c, const char *key, int depth, uint32_t *et, uint64_t *n)
{
    int rc = rd32(c, et, "array element type");
    if (rc)
        return rc;
    if (*et > LQ_GGUF_F64)
        return lq_err_set(c->err, LQ_EFORMAT, "key '%s': unknown array element type %" PRIu32,
                          key, *et);
    if (*et == LQ_GGUF_ARRAY && depth >= 1)
        return lq_err_set(c->err, LQ_EUNSUPPORTED,
                          "key '%s': arrays nested deeper than one level are not supported", key);
    if ((rc = rd64(c, n, "array length")) != 0)
        return rc;
    if (*n > LQ_GGUF_MAX_ARRAY)
        return lq_err_set(c->err, LQ_EFORMAT, "key '%s': array length %" PRIu64 " exceeds cap %u",
                          key, *n, LQ_GGUF_MAX_ARRAY);
    /* smallest encoding of one element: scalar size, 8 (string length), 12 (array head) */
    uint64_t min = *et == LQ_GGUF_STRING ? 8 : *et == LQ_GGUF_ARRAY ? 12 : lq_gguf_scalar_size((int)*et);
    if (*n > (c->size - c->pos) / min)
        return lq_err_set(c->err, LQ_EFORMAT,
                          "key '%s': array length %" PRIu64 " of %s (>= %" PRIu64
                          " bytes each) runs past end of file (%" PRIu64 " bytes left)",
                          key, *n, lq_gguf_vtype_name((int)*et), min, c->size - c->pos);
    return LQ_OK;
}

/* Skips the elements of an array whose head rd_arr_head has read (nested level). */
static int skip_arr_elems(cursor *c, const char *key, int depth, uint32_t et, uint64_t n)
{
    int rc;
    if (et == LQ_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t off, len;
            if ((rc = rd_str(c, LQ_GGUF_MAX_STRING, &off, &len, "array string")) != 0)
                return lq_err_prefix(c->err, "key '%s' element %" PRIu64, key, i);
        }
        return LQ_OK;
    }
    if (et == LQ_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            uint32_t iet;
            uint64_t in;
            if ((rc = rd_arr_head(c, key, depth + 1, &iet, &in)) != 0 ||
                (rc = skip_arr_elems(c, key, depth + 1, iet, in)) != 0)
                return rc;
        }
        return LQ_OK;
    }
    c->pos += n * lq_gguf_scalar_size((int)et); /* fits: rd_arr_head checked n * size */
    return LQ_OK;
}

static int parse_kv_value(cursor *c, kv_entry *kv)
{
    int rc;
    kv->val_off = c->pos;
    kv->arr_type = -1;
    if (kv->type == LQ_GGUF_STRING) {
        if ((rc = rd_str(c, LQ_GGUF_MAX_STRING, &kv->data_off, &kv->str_len, "value")) != 0)
            return lq_err_prefix(c->err, "key '%s'", kv->key);
    } else if (kv->type == LQ_GGUF_ARRAY) {
        uint32_t et;
        if ((rc = rd_arr_head(c, kv->key, 0, &et, &kv->arr_len)) != 0)
            return rc;
        kv->arr_type = (int)et;
        kv->data_off = c->pos;
        if (et == LQ_GGUF_STRING) {
            /* Index each element once so lq_gguf_arr_str is O(1): arr_len * 8 bytes,
             * at most the bytes left in the file (each element has an 8-byte length). */
            if (kv->arr_len) {
                kv->str_offs = malloc(kv->arr_len * sizeof *kv->str_offs);
                if (!kv->str_offs)
                    return lq_err_set(c->err, LQ_ENOMEM, "key '%s': %" PRIu64 " string offsets",
                                      kv->key, kv->arr_len);
            }
            for (uint64_t i = 0; i < kv->arr_len; i++) {
                uint64_t len;
                if ((rc = rd_str(c, LQ_GGUF_MAX_STRING, &kv->str_offs[i], &len, "array string")) != 0)
                    return lq_err_prefix(c->err, "key '%s' element %" PRIu64, kv->key, i);
            }
        } else if ((rc = skip_arr_elems(c, kv->key, 0, et, kv->arr_len)) != 0) {
            return rc;
        }
    } else {
        uint32_t sz = lq_gguf_scalar_size(kv->type);
        if (!sz)
            return lq_err_set(c->err, LQ_EFORMAT, "key '%s': unknown value type %d", kv->key,
                              kv->type);
        if ((rc = need(c, sz, "value")) != 0)
            return lq_err_prefix(c->err, "key '%s'", kv->key);
        kv->data_off = c->pos;
        c->pos += sz;
    }
    kv->val_end = c->pos;
    return LQ_OK;
}

static int parse_tensor_info(lq_gguf *g, cursor *c, int64_t idx)
{
    lq_gguf_tensor *t = &g->tensors[idx];
    uint64_t off, len;
    int rc = rd_str(c, LQ_GGUF_MAX_NAME, &off, &len, "tensor name");
    if (rc)
        return lq_err_prefix(c->err, "tensor %" PRId64, idx);
    if (memchr(c->b + off, 0, len))
        return lq_err_set(c->err, LQ_EFORMAT, "tensor %" PRId64 ": name contains a NUL byte", idx);
    if (!(t->name = arena_copy(g, c->b + off, len)))
        return lq_err_set(c->err, LQ_ENOMEM, "tensor name copy");
    uint32_t nd;
    if ((rc = rd32(c, &nd, "n_dims")) != 0)
        return lq_err_prefix(c->err, "tensor '%s'", t->name);
    if (nd < 1 || nd > LQ_GGUF_MAX_DIMS)
        return lq_err_set(c->err, LQ_EFORMAT, "tensor '%s': n_dims %" PRIu32 " out of range 1..%d",
                          t->name, nd, LQ_GGUF_MAX_DIMS);
    t->n_dims = nd;
    uint64_t n = 1;
    for (uint32_t d = 0; d < LQ_GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= nd)
            continue;
        if ((rc = rd64(c, &t->ne[d], "dimension")) != 0)
            return lq_err_prefix(c->err, "tensor '%s'", t->name);
        if (t->ne[d] == 0)
            return lq_err_set(c->err, LQ_EFORMAT, "tensor '%s': dimension %" PRIu32 " is 0",
                              t->name, d);
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return lq_err_set(c->err, LQ_EFORMAT,
                              "tensor '%s': dimension %" PRIu32 " = %" PRIu64 " exceeds INT64_MAX",
                              t->name, d, t->ne[d]);
        if (n > UINT64_MAX / t->ne[d])
            return lq_err_set(c->err, LQ_EFORMAT,
                              "tensor '%s': element count overflows uint64 at dimension %" PRIu32
                              " (%" PRIu64 " x %" PRIu64 ")", t->name, d, n, t->ne[d]);
        n *= t->ne[d];
    }
    t->n_elements = n;
    uint32_t type;
    if ((rc = rd32(c, &type, "tensor type")) != 0)
        return lq_err_prefix(c->err, "tensor '%s'", t->name);
    if (!lq_ggml_type_known((int)type))
        return lq_err_set(c->err, LQ_EUNSUPPORTED, "tensor '%s': unknown ggml type %" PRIu32,
                          t->name, type);
    t->type = (int)type;
    if ((rc = rd64(c, &t->offset, "tensor offset")) != 0)
        return lq_err_prefix(c->err, "tensor '%s'", t->name);
    if ((rc = lq_ggml_nbytes(t->type, t->ne[0], n, &t->n_bytes, c->err)) != 0)
        return lq_err_prefix(c->err, "tensor '%s'", t->name);
    if (t->type == LQ_GGML_I2_S)
        t->n_bytes = n / 4 + 4; /* packed trits + f32 scale; MS's 28 padding bytes not needed */
    uint32_t *slot = hash_slot(g->t_hash, g->t_mask, t->name, (size_t)len, t_name_of, g);
    if (*slot)
        return lq_err_set(c->err, LQ_EFORMAT, "duplicate tensor name '%s' (tensors %" PRIu32
                          " and %" PRId64 ")", t->name, *slot - 1, idx);
    *slot = (uint32_t)idx + 1;
    return LQ_OK;
}

typedef struct off_idx {
    uint64_t off;
    uint32_t idx;
} off_idx;

static int cmp_off(const void *a, const void *b)
{
    uint64_t x = ((const off_idx *)a)->off, y = ((const off_idx *)b)->off;
    return x < y ? -1 : x > y;
}

/* Places every tensor's data: aligned, inside the file, not overlapping another. */
static int place_tensors(lq_gguf *g, lq_err *err)
{
    for (int64_t i = 0; i < g->n_tensors; i++) {
        lq_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return lq_err_set(err, LQ_EFORMAT,
                              "tensor '%s': offset %" PRIu64 " is not a multiple of alignment %" PRIu32,
                              t->name, t->offset, g->alignment);
        uint64_t room = g->size >= g->data_start ? g->size - g->data_start : 0;
        if (t->offset > room)
            return lq_err_set(err, LQ_EFORMAT,
                              "tensor '%s': offset %" PRIu64 " is past end of file (data section "
                              "holds %" PRIu64 " bytes)", t->name, t->offset, room);
        if (t->n_bytes > room - t->offset) {
            if (t->type == LQ_GGML_I2_S && t->n_bytes - 4 <= room - t->offset)
                return lq_err_set(err, LQ_EFORMAT,
                                  "tensor '%s': I2_S scale at %" PRIu64 " (4 bytes) lies past end "
                                  "of file (%" PRIu64 ")", t->name,
                                  g->data_start + t->offset + t->n_bytes - 4, g->size);
            return lq_err_set(err, LQ_EFORMAT,
                              "tensor '%s': data [%" PRIu64 "..%" PRIu64 ") ends past end of file "
                              "(%" PRIu64 ")", t->name, g->data_start + t->offset,
                              g->data_start + t->offset + t->n_bytes, g->size);
        }
        t->data = g->buf + g->data_start + t->offset;
    }
    if (g->n_tensors < 2)
        return LQ_OK;
    off_idx *order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order)
        return lq_err_set(err, LQ_ENOMEM, "tensor order");
    for (int64_t i = 0; i < g->n_tensors; i++)
        order[i] = (off_idx){g->tensors[i].offset, (uint32_t)i};
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_off);
    int rc = LQ_OK;
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const lq_gguf_tensor *a = &g->tensors[order[i - 1].idx], *b = &g->tensors[order[i].idx];
        if (a->offset + a->n_bytes > b->offset) {
            rc = lq_err_set(err, LQ_EFORMAT,
                            "tensor '%s': data [%" PRIu64 "..%" PRIu64 ") overlaps tensor '%s' "
                            "at %" PRIu64, b->name, b->offset, b->offset + b->n_bytes, a->name,
                            a->offset);
            break;
        }
    }
    free(order);
    return rc;
}

static int parse(lq_gguf *g, lq_err *err)
{
    cursor c = {g->buf, g->size, 0, err};
    uint32_t magic, version;
    int rc = rd32(&c, &magic, "magic");
    if (rc)
        return rc;
    if (magic != LQ_GGUF_MAGIC)
        return lq_err_set(err, LQ_EFORMAT, "bad magic 0x%08" PRIx32 " (expected \"GGUF\")", magic);
    if ((rc = rd32(&c, &version, "version")) != 0)
        return rc;
    if (version == 1)
        return lq_err_set(err, LQ_EUNSUPPORTED, "GGUF version 1 is not supported (need 2 or 3)");
    if ((version & 0xffff) == 0 && version != 0)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "GGUF version field 0x%08" PRIx32 ": big-endian GGUF is not supported",
                          version);
    if (version < 2 || version > 3)
        return lq_err_set(err, LQ_EUNSUPPORTED, "GGUF version %" PRIu32 " is not supported (need 2 or 3)",
                          version);
    g->version = version;
    uint64_t n_tensors, n_kv;
    if ((rc = rd64(&c, &n_tensors, "n_tensors")) != 0 || (rc = rd64(&c, &n_kv, "n_kv")) != 0)
        return rc;
    uint64_t left = c.size - c.pos;
    /* Smallest encodings: a KV is key length 8 + type 4 + a 1-byte value; a tensor info is
     * name length 8 + n_dims 4 + one dim 8 + type 4 + offset 8. */
    if (n_kv > LQ_GGUF_MAX_KV)
        return lq_err_set(err, LQ_EFORMAT, "n_kv %" PRIu64 " exceeds cap %u", n_kv, LQ_GGUF_MAX_KV);
    if (n_tensors > LQ_GGUF_MAX_TENSORS)
        return lq_err_set(err, LQ_EFORMAT, "n_tensors %" PRIu64 " exceeds cap %u", n_tensors,
                          LQ_GGUF_MAX_TENSORS);
    if (n_kv * 13 > left)
        return lq_err_set(err, LQ_EFORMAT,
                          "n_kv %" PRIu64 " cannot fit in the %" PRIu64 " bytes left (>= 13 each)",
                          n_kv, left);
    if (n_tensors * 32 > left - n_kv * 13)
        return lq_err_set(err, LQ_EFORMAT,
                          "n_tensors %" PRIu64 " cannot fit in the %" PRIu64
                          " bytes left (>= 32 each)", n_tensors, left - n_kv * 13);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors || hash_alloc(&g->kv_hash, &g->kv_mask, n_kv) ||
        hash_alloc(&g->t_hash, &g->t_mask, n_tensors))
        return lq_err_set(err, LQ_ENOMEM, "metadata tables (%" PRIu64 " keys, %" PRIu64 " tensors)",
                          n_kv, n_tensors);

    for (uint64_t i = 0; i < n_kv; i++) {
        kv_entry *kv = &g->kvs[i];
        uint64_t off, len;
        uint32_t type;
        if ((rc = rd_str(&c, LQ_GGUF_MAX_KEY, &off, &len, "key")) != 0)
            return lq_err_prefix(err, "key %" PRIu64, i);
        /* Keys are C strings to every caller (find_key, the writer): a NUL inside one
         * would make two different keys compare equal. */
        if (memchr(c.b + off, 0, len))
            return lq_err_set(err, LQ_EFORMAT, "key %" PRIu64 ": contains a NUL byte", i);
        if (!(kv->key = arena_copy(g, c.b + off, len)))
            return lq_err_set(err, LQ_ENOMEM, "key copy");
        kv->key_len = len;
        uint32_t *slot = hash_slot(g->kv_hash, g->kv_mask, kv->key, (size_t)len, kv_name_of, g);
        if (*slot)
            return lq_err_set(err, LQ_EFORMAT, "duplicate key '%s' (entries %" PRIu32 " and %" PRIu64 ")",
                              kv->key, *slot - 1, i);
        *slot = (uint32_t)i + 1;
        if ((rc = rd32(&c, &type, "value type")) != 0)
            return lq_err_prefix(err, "key '%s'", kv->key);
        if (type > LQ_GGUF_F64)
            return lq_err_set(err, LQ_EFORMAT, "key '%s': unknown value type %" PRIu32, kv->key, type);
        kv->type = (int)type;
        if ((rc = parse_kv_value(&c, kv)) != 0)
            return rc;
    }

    g->alignment = LQ_GGUF_DEFAULT_ALIGNMENT;
    int64_t ak = lq_gguf_find_key(g, "general.alignment");
    if (ak >= 0) {
        uint64_t a;
        int at = g->kvs[ak].type;
        if (at == LQ_GGUF_F32 || at == LQ_GGUF_F64 || at == LQ_GGUF_BOOL)
            return lq_err_set(err, LQ_EFORMAT, "general.alignment must be an integer, not %s",
                              lq_gguf_vtype_name(at));
        if ((rc = lq_gguf_get_u64(g, "general.alignment", &a, err)) != 0)
            return rc;
        if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
            return lq_err_set(err, LQ_EFORMAT,
                              "general.alignment %" PRIu64 " is not a power of two in 1..2^30", a);
        g->alignment = (uint32_t)a;
    }

    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(g, &c, i)) != 0)
            return rc;
    /* Vocab-only files may end right after the infos, without the padding. */
    g->data_start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    return place_tensors(g, err);
}

static int finish_open(lq_gguf *g, lq_gguf **out, lq_err *err)
{
    int rc = parse(g, err);
    if (rc) {
        lq_gguf_close(g);
        return rc;
    }
    *out = g;
    return LQ_OK;
}

int lq_gguf_open_buffer(const void *buf, size_t len, lq_gguf **out, lq_err *err)
{
    if (!out || (!buf && len))
        return lq_err_set(err, LQ_EINVAL, "gguf_open_buffer: NULL argument");
    *out = NULL;
    lq_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return lq_err_set(err, LQ_ENOMEM, "gguf handle");
    g->buf = buf;
    g->size = len;
    return finish_open(g, out, err);
}

int lq_gguf_open(const char *path, lq_gguf **out, lq_err *err)
{
    if (!path || !out)
        return lq_err_set(err, LQ_EINVAL, "gguf_open: NULL argument");
    *out = NULL;
    lq_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return lq_err_set(err, LQ_ENOMEM, "gguf handle");
    size_t pl = strlen(path);
    g->path = malloc(pl + 1);
    if (!g->path) {
        free(g);
        return lq_err_set(err, LQ_ENOMEM, "gguf path");
    }
    memcpy(g->path, path, pl + 1);
    int rc = lq_mapfile_open(&g->map, path, err);
    if (rc) {
        lq_gguf_close(g);
        return rc;
    }
    g->buf = g->map.data;
    g->size = g->map.size;
    rc = parse(g, err);
    if (rc) {
        lq_err_prefix(err, "%s", path);
        lq_gguf_close(g);
        return rc;
    }
    *out = g;
    return LQ_OK;
}

void lq_gguf_close(lq_gguf *g)
{
    if (!g)
        return;
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++)
            free(g->kvs[i].str_offs);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_hash);
    free(g->t_hash);
    while (g->arena) {
        arena_chunk *n = g->arena->next;
        free(g->arena);
        g->arena = n;
    }
    lq_mapfile_close(&g->map);
    free(g->path);
    free(g);
}

/* ---- accessors ---- */

uint32_t lq_gguf_version(const lq_gguf *g) { return g ? g->version : 0; }
uint32_t lq_gguf_alignment(const lq_gguf *g) { return g ? g->alignment : 0; }
const char *lq_gguf_path(const lq_gguf *g) { return g && g->path ? g->path : ""; }
uint64_t lq_gguf_file_size(const lq_gguf *g) { return g ? g->size : 0; }
uint64_t lq_gguf_data_offset(const lq_gguf *g) { return g ? g->data_start : 0; }

const uint8_t *lq_gguf_bytes(const lq_gguf *g, uint64_t *size)
{
    if (size)
        *size = g ? g->size : 0;
    return g ? g->buf : NULL;
}
int64_t lq_gguf_n_kv(const lq_gguf *g) { return g ? g->n_kv : 0; }
int64_t lq_gguf_n_tensors(const lq_gguf *g) { return g ? g->n_tensors : 0; }

static const kv_entry *kv_at(const lq_gguf *g, int64_t idx)
{
    return g && idx >= 0 && idx < g->n_kv ? &g->kvs[idx] : NULL;
}

int64_t lq_gguf_find_key(const lq_gguf *g, const char *key)
{
    if (!g || !key || !g->kv_hash)
        return -1;
    uint32_t v = *hash_slot(g->kv_hash, g->kv_mask, key, strlen(key), kv_name_of, g);
    return v ? (int64_t)v - 1 : -1;
}

const char *lq_gguf_key(const lq_gguf *g, int64_t idx)
{
    const kv_entry *kv = kv_at(g, idx);
    return kv ? kv->key : NULL;
}

int lq_gguf_kv_type(const lq_gguf *g, int64_t idx)
{
    const kv_entry *kv = kv_at(g, idx);
    return kv ? kv->type : -1;
}

int lq_gguf_arr_type(const lq_gguf *g, int64_t idx)
{
    const kv_entry *kv = kv_at(g, idx);
    return kv ? kv->arr_type : -1;
}

uint64_t lq_gguf_arr_len(const lq_gguf *g, int64_t idx)
{
    const kv_entry *kv = kv_at(g, idx);
    return kv && kv->type == LQ_GGUF_ARRAY ? kv->arr_len : 0;
}

int lq_gguf_kv_raw(const lq_gguf *g, int64_t idx, const uint8_t **val, uint64_t *len)
{
    const kv_entry *kv = kv_at(g, idx);
    if (!kv || !val || !len)
        return LQ_EINVAL;
    *val = g->buf + kv->val_off;
    *len = kv->val_end - kv->val_off;
    return LQ_OK;
}

/* A numeric value widened without loss: unsigned, signed, floating or bool. */
typedef struct num {
    char kind; /* 'u', 'i', 'f', 'b' */
    uint64_t u;
    int64_t i;
    double d;
} num;

static int load_num(int type, const uint8_t *p, num *n)
{
    switch (type) {
    case LQ_GGUF_U8: n->kind = 'u'; n->u = p[0]; return 0;
    case LQ_GGUF_U16: n->kind = 'u'; n->u = lq_rd_u16(p); return 0;
    case LQ_GGUF_U32: n->kind = 'u'; n->u = lq_rd_u32(p); return 0;
    case LQ_GGUF_U64: n->kind = 'u'; n->u = lq_rd_u64(p); return 0;
    case LQ_GGUF_I8: n->kind = 'i'; n->i = (int8_t)p[0]; return 0;
    case LQ_GGUF_I16: n->kind = 'i'; n->i = (int16_t)lq_rd_u16(p); return 0;
    case LQ_GGUF_I32: n->kind = 'i'; n->i = (int32_t)lq_rd_u32(p); return 0;
    case LQ_GGUF_I64: n->kind = 'i'; n->i = (int64_t)lq_rd_u64(p); return 0;
    case LQ_GGUF_F32: n->kind = 'f'; n->d = lq_rd_f32(p); return 0;
    case LQ_GGUF_F64: n->kind = 'f'; n->d = lq_rd_f64(p); return 0;
    case LQ_GGUF_BOOL: n->kind = 'b'; n->u = p[0] != 0; return 0;
    default: return -1;
    }
}

/* 2^63 and 2^64 as doubles: exact, so the comparisons below are exact too. */
#define TWO63 9223372036854775808.0
#define TWO64 18446744073709551616.0

static int num_to_u64(const num *n, uint64_t *out)
{
    switch (n->kind) {
    case 'u': case 'b': *out = n->u; return 0;
    case 'i': if (n->i < 0) return -1; *out = (uint64_t)n->i; return 0;
    default:
        if (!(n->d >= 0 && n->d < TWO64) || n->d != (double)(uint64_t)n->d)
            return -1;
        *out = (uint64_t)n->d;
        return 0;
    }
}

static int num_to_i64(const num *n, int64_t *out)
{
    switch (n->kind) {
    case 'u': case 'b': if (n->u > (uint64_t)INT64_MAX) return -1; *out = (int64_t)n->u; return 0;
    case 'i': *out = n->i; return 0;
    default:
        if (!(n->d >= -TWO63 && n->d < TWO63) || n->d != (double)(int64_t)n->d)
            return -1;
        *out = (int64_t)n->d;
        return 0;
    }
}

static double num_to_f64(const num *n)
{
    return n->kind == 'i' ? (double)n->i : n->kind == 'f' ? n->d : (double)n->u;
}

static int get_num(const lq_gguf *g, const char *key, num *n, lq_err *err)
{
    if (!g || !key)
        return lq_err_set(err, LQ_EINVAL, "gguf get: NULL argument");
    const kv_entry *kv = kv_at(g, lq_gguf_find_key(g, key));
    if (!kv)
        return lq_err_set(err, LQ_ENOTFOUND, "key '%s' not found", key);
    if (load_num(kv->type, g->buf + kv->data_off, n))
        return lq_err_set(err, LQ_EFORMAT, "key '%s' is %s, not a number", key,
                          lq_gguf_vtype_name(kv->type));
    return LQ_OK;
}

static void num_str(const num *n, char *buf, size_t cap)
{
    if (n->kind == 'i')
        snprintf(buf, cap, "%" PRId64, n->i);
    else if (n->kind == 'f')
        snprintf(buf, cap, "%.17g", n->d);
    else
        snprintf(buf, cap, "%" PRIu64, n->u);
}

int lq_gguf_get_u64(const lq_gguf *g, const char *key, uint64_t *out, lq_err *err)
{
    num n;
    char s[40];
    int rc = get_num(g, key, &n, err);
    if (rc)
        return rc;
    if (num_to_u64(&n, out)) {
        num_str(&n, s, sizeof s);
        return lq_err_set(err, LQ_EFORMAT, "key '%s': value %s does not fit an unsigned 64-bit "
                          "integer", key, s);
    }
    return LQ_OK;
}

int lq_gguf_get_i64(const lq_gguf *g, const char *key, int64_t *out, lq_err *err)
{
    num n;
    char s[40];
    int rc = get_num(g, key, &n, err);
    if (rc)
        return rc;
    if (num_to_i64(&n, out)) {
        num_str(&n, s, sizeof s);
        return lq_err_set(err, LQ_EFORMAT, "key '%s': value %s does not fit a signed 64-bit "
                          "integer", key, s);
    }
    return LQ_OK;
}

int lq_gguf_get_f64(const lq_gguf *g, const char *key, double *out, lq_err *err)
{
    num n;
    int rc = get_num(g, key, &n, err);
    if (rc)
        return rc;
    if (n.kind == 'b')
        return lq_err_set(err, LQ_EFORMAT, "key '%s' is bool, not a number", key);
    *out = num_to_f64(&n);
    return LQ_OK;
}

int lq_gguf_get_bool(const lq_gguf *g, const char *key, int *out, lq_err *err)
{
    num n;
    int rc = get_num(g, key, &n, err);
    if (rc)
        return rc;
    uint64_t u;
    if (n.kind == 'f' || num_to_u64(&n, &u) || u > 1)
        return lq_err_set(err, LQ_EFORMAT, "key '%s' is not a boolean (bool or integer 0/1)", key);
    *out = (int)u;
    return LQ_OK;
}

int lq_gguf_get_str(const lq_gguf *g, const char *key, const char **s, uint64_t *len, lq_err *err)
{
    if (!g || !key || !s || !len)
        return lq_err_set(err, LQ_EINVAL, "gguf get_str: NULL argument");
    const kv_entry *kv = kv_at(g, lq_gguf_find_key(g, key));
    if (!kv)
        return lq_err_set(err, LQ_ENOTFOUND, "key '%s' not found", key);
    if (kv->type != LQ_GGUF_STRING)
        return lq_err_set(err, LQ_EFORMAT, "key '%s' is %s, not string", key,
                          lq_gguf_vtype_name(kv->type));
    *s = (const char *)g->buf + kv->data_off;
    *len = kv->str_len;
    return LQ_OK;
}

int lq_gguf_get_arr(const lq_gguf *g, const char *key, int *elem_type, uint64_t *n, lq_err *err)
{
    if (!g || !key)
        return lq_err_set(err, LQ_EINVAL, "gguf get_arr: NULL argument");
    const kv_entry *kv = kv_at(g, lq_gguf_find_key(g, key));
    if (!kv)
        return lq_err_set(err, LQ_ENOTFOUND, "key '%s' not found", key);
    if (kv->type != LQ_GGUF_ARRAY)
        return lq_err_set(err, LQ_EFORMAT, "key '%s' is %s, not array", key,
                          lq_gguf_vtype_name(kv->type));
    if (elem_type)
        *elem_type = kv->arr_type;
    if (n)
        *n = kv->arr_len;
    return LQ_OK;
}

int lq_gguf_arr_str(const lq_gguf *g, int64_t kv_idx, uint64_t i, const char **s, uint64_t *len)
{
    const kv_entry *kv = kv_at(g, kv_idx);
    if (!kv || !s || !len || kv->type != LQ_GGUF_ARRAY || kv->arr_type != LQ_GGUF_STRING)
        return LQ_EINVAL;
    if (i >= kv->arr_len)
        return LQ_ERANGE;
    uint64_t off = kv->str_offs[i];
    *s = (const char *)g->buf + off;
    *len = lq_rd_u64(g->buf + off - 8);
    return LQ_OK;
}

const void *lq_gguf_arr_data(const lq_gguf *g, int64_t kv_idx)
{
    const kv_entry *kv = kv_at(g, kv_idx);
    if (!kv || kv->type != LQ_GGUF_ARRAY || !lq_gguf_scalar_size(kv->arr_type))
        return NULL;
    return g->buf + kv->data_off;
}

static int arr_num(const lq_gguf *g, int64_t kv_idx, uint64_t i, num *n)
{
    const kv_entry *kv = kv_at(g, kv_idx);
    if (!kv || kv->type != LQ_GGUF_ARRAY)
        return LQ_EINVAL;
    uint32_t sz = lq_gguf_scalar_size(kv->arr_type);
    if (!sz)
        return LQ_EINVAL;
    if (i >= kv->arr_len)
        return LQ_ERANGE;
    load_num(kv->arr_type, g->buf + kv->data_off + i * sz, n);
    return LQ_OK;
}

int lq_gguf_arr_f64(const lq_gguf *g, int64_t kv_idx, uint64_t i, double *out)
{
    num n;
    int rc = out ? arr_num(g, kv_idx, i, &n) : LQ_EINVAL;
    if (rc)
        return rc;
    if (n.kind == 'b')
        return LQ_EFORMAT;
    *out = num_to_f64(&n);
    return LQ_OK;
}

int lq_gguf_arr_i64(const lq_gguf *g, int64_t kv_idx, uint64_t i, int64_t *out)
{
    num n;
    int rc = out ? arr_num(g, kv_idx, i, &n) : LQ_EINVAL;
    if (rc)
        return rc;
    return num_to_i64(&n, out) ? LQ_EFORMAT : LQ_OK;
}

const lq_gguf_tensor *lq_gguf_tensor_at(const lq_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const lq_gguf_tensor *lq_gguf_find_tensor(const lq_gguf *g, const char *name)
{
    if (!g || !name || !g->t_hash)
        return NULL;
    uint32_t v = *hash_slot(g->t_hash, g->t_mask, name, strlen(name), t_name_of, g);
    return v ? &g->tensors[v - 1] : NULL;
}
