/* Running a model from a vindex directory (lq_model_open on a directory with index.json).
 *
 * What a BitNet inference vindex holds (built with --keep-quant --level inference|all, or
 * --dense-only) and how it becomes an lq_model:
 *   embeddings.bin  [vocab, hidden] f32 or f16      -> token embedding, used in place (mmap)
 *   lm_head.bin     [vocab, hidden] f32 or f16      -> lm_head, in place (weight_manifest.json
 *                                                      entry "lm_head.weight"; absent -> tied)
 *   norms.bin       RMSNorm vectors, located by weight_manifest.json (f32 in place when aligned,
 *                   f16 decoded once: they are small)
 *   bitnet/<key>.i2s + bitnet/scales.f32 + index.json bitnet_layout -> the seven projections
 *                                                      of every layer
 *
 * The .i2s files use LARQL's kernel layout (row-major, 4 trits per byte, column 4b+s in bits
 * 2s..2s+1, 01 = +1, 10 = -1, 00 = 0, 11 reserved = 0); the engine's kernels read microsoft's
 * strided I2_S layout (128-element blocks of 32 bytes, element j at byte j%32, shift
 * 6-2*(j/32), codes 0/1/2 = -1/0/+1). Choice: repack at load, one pass per tensor, into a
 * heap buffer of exactly the packed size (rows*cols/4 bytes: ~521 MB for 2B-4T; rows that are
 * not whole 128-blocks are padded to them with zero trits, as the GGUF loader does); the .i2s
 * mapping is dropped right after. The directory stays byte-identical to what LARQL writes
 * (no second copy on disk); the price is that this memory is private to the process instead
 * of shared page cache. The repack is table driven (~1 GB/s), well under a second for 2B.
 *
 * Scales: LARQL stores one f32 per output row (a broadcast of the GGUF's per-tensor scale).
 * The engine applies one scale per tensor, so a tensor whose row scales differ is refused
 * with LQ_EUNSUPPORTED rather than computed wrongly.
 *
 * A llama inference vindex (--level inference|all; no bitnet_layout, model_config.model_type
 * "llama") runs from the dense files LARQL's write_model_weights writes:
 *   attn_weights.bin  per layer q, k, v, o [rows, cols] in the vindex dtype (manifest "tensor")
 *   up_weights.bin, down_weights.bin        per layer up [n_ff, n_embd], down [n_embd, n_ff]
 *   gate_vectors.bin  the gate projection (the layer's rows, index.json layers[])
 * all used in place from the mappings (f32 and f16 are dense-kernel types; offsets are
 * multiples of the element size in page-aligned mappings). q/k rows are as the GGUF stored
 * them, so RoPE pairs adjacent dimensions as the GGUF path does for llama.
 *
 * lq_vindex_model_open builds the model over an open vindex (which it borrows: a server
 * serves the browse queries and inference from one open); lq_vindex_model_open_dir opens the
 * directory itself and the model owns that vindex. Both go through the loaders' shared
 * assembly step (lq_model_new, lq_model_check_config, lq_model_finish).
 *
 * The result is numerically the same model as the GGUF it was built from when the vindex is
 * f32 (every tensor carries the same values; the same kernels run). An --f16 vindex stores
 * the norms (and for llama the projections) truncated to f16 (LARQL's conversion), so its
 * logits differ slightly. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/f16.h"
#include "model/model_internal.h"
#include "vindex/vindex_internal.h"

typedef struct vx_src {
    lq_vindex *v;
    int own_v;              /* v is closed with the model (lq_vindex_model_open_dir) */
    lq_mapfile norms, lm_head;
    lq_mapfile dense[3];    /* attn_weights.bin, up_weights.bin, down_weights.bin (llama) */
    void **owned;           /* repacked projections and decoded norms */
    int n_owned, cap_owned;
    int huge;               /* hold large weights in 2 MB pages (lq_want_huge_copy) */
    struct vx_huge {
        void *p;
        size_t mapped;
    } *hblk;                /* those allocations */
    int n_hblk, cap_hblk;
} vx_src;

static void vx_src_free(void *p)
{
    vx_src *s = p;
    if (!s)
        return;
    for (int i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    for (int i = 0; i < s->n_hblk; i++)
        lq_huge_free(s->hblk[i].p, s->hblk[i].mapped);
    free(s->hblk);
    lq_mapfile_close(&s->norms);
    lq_mapfile_close(&s->lm_head);
    for (int i = 0; i < 3; i++)
        lq_mapfile_close(&s->dense[i]);
    if (s->own_v)
        lq_vindex_close(s->v);
    free(s);
}

/* Large buffers (the repacked ternary projections, the embedding copy) in 2 MB pages when
 * s->huge: the decode streams them every token (core/mapfile.h). */
static void *vx_alloc_huge(vx_src *s, size_t bytes)
{
    if (s->n_hblk == s->cap_hblk) {
        int cap = s->cap_hblk ? s->cap_hblk * 2 : 64;
        struct vx_huge *h = realloc(s->hblk, (size_t)cap * sizeof *h);
        if (!h)
            return NULL;
        s->hblk = h;
        s->cap_hblk = cap;
    }
    size_t mapped = 0;
    void *p = lq_huge_alloc(bytes, &mapped);
    if (p)
        s->hblk[s->n_hblk++] = (struct vx_huge){p, mapped};
    return p;
}

static void *vx_alloc(vx_src *s, size_t bytes)
{
    if (s->huge && bytes >= ((size_t)1 << 20)) {
        void *p = vx_alloc_huge(s, bytes);
        if (p)
            return p; /* else: plain memory still works */
    }
    if (s->n_owned == s->cap_owned) {
        int cap = s->cap_owned ? s->cap_owned * 2 : 64;
        void **p = realloc(s->owned, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        s->owned = p;
        s->cap_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        s->owned[s->n_owned++] = p;
    return p;
}

/* ---- LARQL kernel layout -> microsoft I2_S ---- */

/* lut[b] holds the four microsoft codes of LARQL byte b, slot s in byte s of the word;
 * built once (pthread_once: several models may open at the same time). */
static uint32_t larql_lut[256];
static pthread_once_t larql_lut_once = PTHREAD_ONCE_INIT;

static void init_lut(void)
{
    static const uint8_t ms_code[4] = {1, 2, 0, 1}; /* LARQL 00=0, 01=+1, 10=-1, 11=0 */
    for (int b = 0; b < 256; b++) {
        uint32_t w = 0;
        for (int s = 0; s < 4; s++)
            w |= (uint32_t)ms_code[(b >> (2 * s)) & 3] << (8 * s);
        larql_lut[b] = w;
    }
}

/* One 128-column block: LARQL bytes 0..31 hold columns 4a+s (byte a, slot s).
 * microsoft byte j (j = 4a+s) holds columns j, j+32, j+64, j+96 at shifts 6, 4, 2, 0,
 * i.e. LARQL bytes a, 8+a, 16+a, 24+a at the same slot s: four LUT words OR'ed with
 * shifts give four output bytes at once (codes <= 2, so no carries between bytes). */
static void larql_block_to_ms(const uint8_t *in, uint8_t *out)
{
    for (int a = 0; a < 8; a++) {
        uint32_t w = larql_lut[in[a]] << 6 | larql_lut[in[8 + a]] << 4 |
                     larql_lut[in[16 + a]] << 2 | larql_lut[in[24 + a]];
        memcpy(out + 4 * a, &w, 4); /* little-endian: byte s of w -> out[4a+s] */
    }
}

void lq_vx_i2s_larql_to_ms(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols)
{
    pthread_once(&larql_lut_once, init_lut);
    const size_t full = (size_t)(cols / 128), tail = (size_t)(cols % 128) / 4;
    if (!tail) { /* rows of whole blocks: the rows are contiguous blocks in both layouts */
        for (size_t b = 0; b < (size_t)rows * full; b++)
            larql_block_to_ms(src + b * 32, dst + b * 32);
        return;
    }
    /* a row's last partial block is converted from a copy with LARQL's zero (00) after the
     * row's bytes: the padding becomes zero trits */
    const size_t sb = (size_t)cols / 4, db = (full + 1) * 32;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *in = src + (size_t)r * sb;
        uint8_t *out = dst + (size_t)r * db, last[32] = {0};
        for (size_t b = 0; b < full; b++)
            larql_block_to_ms(in + b * 32, out + b * 32);
        memcpy(last, in + full * 32, tail);
        larql_block_to_ms(last, out + full * 32);
    }
}

/* ---- manifest ---- */

typedef struct man_entry {
    const char *key, *file;
    uint64_t offset, length;
    int64_t shape[2];
    int ndim;
} man_entry;

static int load_manifest(const char *dir, json_t **root, lq_err *err)
{
    char *p = lq_vx_join(dir, "weight_manifest.json");
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    struct stat st;
    if (stat(p, &st) != 0) {
        int rc = lq_err_set(err, LQ_ENOTFOUND,
                            "%s: missing (a vindex built with --level inference/all or "
                            "--dense-only has it)", p);
        free(p);
        return rc;
    }
    json_error_t je;
    *root = json_load_file(p, 0, &je);
    int rc = LQ_OK;
    if (!*root)
        rc = lq_err_set(err, LQ_EFORMAT, "%s: line %d: %s", p, je.line, je.text);
    else if (!json_is_array(*root))
        rc = lq_err_set(err, LQ_EFORMAT, "%s: top level is not an array", p);
    free(p);
    return rc;
}

/* Finds key in the manifest; 1 found (fields validated), 0 absent, <0 error. */
static int man_find(const json_t *man, const char *key, man_entry *e, lq_err *err)
{
    size_t i;
    json_t *x;
    json_array_foreach(man, i, x) {
        json_t *k = json_object_get(x, "key");
        if (!json_is_string(k) || strcmp(json_string_value(k), key))
            continue;
        json_t *f = json_object_get(x, "file"), *sh = json_object_get(x, "shape");
        json_t *off = json_object_get(x, "offset"), *len = json_object_get(x, "length");
        if (!json_is_string(f) || !json_is_array(sh) || !json_is_integer(off) ||
            !json_is_integer(len) || json_integer_value(off) < 0 || json_integer_value(len) < 0 ||
            json_array_size(sh) < 1 || json_array_size(sh) > 2)
            return lq_err_set(err, LQ_EFORMAT,
                              "weight_manifest.json: entry '%s' needs file, shape (1-2 dims), "
                              "offset >= 0 and length >= 0", key);
        e->key = key;
        e->file = json_string_value(f);
        e->offset = (uint64_t)json_integer_value(off);
        e->length = (uint64_t)json_integer_value(len);
        e->ndim = (int)json_array_size(sh);
        for (int d = 0; d < e->ndim; d++) {
            json_t *v = json_array_get(sh, (size_t)d);
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > ((json_int_t)1 << 31))
                return lq_err_set(err, LQ_EFORMAT, "weight_manifest.json: entry '%s': bad shape",
                                  key);
            e->shape[d] = json_integer_value(v);
        }
        return 1;
    }
    return 0;
}

/* A norm vector of n floats from norms.bin. */
static int load_norm(vx_src *s, const json_t *man, const char *key, int64_t n, const float **out,
                     lq_err *err)
{
    man_entry e;
    int r = man_find(man, key, &e, err);
    if (r < 0)
        return r;
    if (r == 0)
        return lq_err_set(err, LQ_ENOTFOUND, "weight_manifest.json: no entry '%s'", key);
    if (strcmp(e.file, "norms.bin"))
        return lq_err_set(err, LQ_EFORMAT, "weight_manifest.json: '%s' is in '%s', expected norms.bin",
                          key, e.file);
    if (e.ndim != 1 || e.shape[0] != n)
        return lq_err_set(err, LQ_EFORMAT, "weight_manifest.json: '%s' shape [%lld], expected [%lld]",
                          key, (long long)e.shape[0], (long long)n);
    if (e.offset > s->norms.size || e.length > s->norms.size - e.offset)
        return lq_err_set(err, LQ_EFORMAT,
                          "norms.bin: '%s' range [%llu, +%llu) past the end of the file (%zu bytes)",
                          key, (unsigned long long)e.offset, (unsigned long long)e.length,
                          s->norms.size);
    const uint8_t *p = s->norms.data + e.offset;
    if (e.length == (uint64_t)n * 4) {
        if (((uintptr_t)p % 4) == 0) {
            *out = (const float *)(const void *)p;
            return LQ_OK;
        }
        float *f = vx_alloc(s, (size_t)n * 4);
        if (!f)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        memcpy(f, p, (size_t)n * 4);
        *out = f;
        return LQ_OK;
    }
    if (e.length == (uint64_t)n * 2) {
        float *f = vx_alloc(s, (size_t)n * 4);
        if (!f)
            return lq_err_set(err, LQ_ENOMEM, "out of memory");
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            f[i] = lq_f16_to_f32(h);
        }
        *out = f;
        return LQ_OK;
    }
    return lq_err_set(err, LQ_EFORMAT, "norms.bin: '%s' length %llu is neither %lld x 4 nor x 2",
                      key, (unsigned long long)e.length, (long long)n);
}

/* ---- bitnet layout ---- */

static int json_int_field(const json_t *o, const char *k, long long lo, long long hi, long long *v)
{
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x))
        return -1;
    *v = json_integer_value(x);
    return *v < lo || *v > hi ? -1 : 0;
}

static double json_num_field(const json_t *a, const json_t *b, const char *k, double def)
{
    json_t *x = json_object_get(a, k);
    if (!json_is_number(x))
        x = json_object_get(b, k);
    return json_is_number(x) ? json_number_value(x) : def;
}

static int load_proj(vx_src *s, const char *dir, const json_t *tensors, const float *scales,
                     uint64_t n_scales, int layer, const char *hf, int64_t rows, int64_t cols,
                     lq_wmat *w, lq_err *err)
{
    char name[128];
    snprintf(name, sizeof name, "layers.%d.%s", layer, hf);
    const json_t *e = NULL;
    size_t i;
    json_t *x;
    json_array_foreach(tensors, i, x) {
        json_t *nm = json_object_get(x, "name");
        if (json_is_string(nm) && !strcmp(json_string_value(nm), name)) {
            e = x;
            break;
        }
    }
    if (!e)
        return lq_err_set(err, LQ_ENOTFOUND, "index.json bitnet_layout: no tensor '%s'", name);
    long long r, c, so;
    if (json_int_field(e, "rows", 1, 1LL << 31, &r) || json_int_field(e, "cols", 1, 1LL << 31, &c) ||
        json_int_field(e, "scale_offset", 0, INT64_MAX, &so))
        return lq_err_set(err, LQ_EFORMAT,
                          "index.json bitnet_layout: tensor '%s' needs integer rows, cols, scale_offset",
                          name);
    if (r != rows || c != cols)
        return lq_err_set(err, LQ_EFORMAT,
                          "index.json bitnet_layout: tensor '%s' is [%lld, %lld], the model needs "
                          "[%lld, %lld]", name, r, c, (long long)rows, (long long)cols);
    if (cols % 4)
        return lq_err_set(err, LQ_EFORMAT,
                          "bitnet/%s.i2s: %lld columns is not a multiple of 4 (4 trits a byte)", name, c);
    if ((uint64_t)so > n_scales || (uint64_t)r > n_scales - (uint64_t)so)
        return lq_err_set(err, LQ_EFORMAT,
                          "bitnet/scales.f32: tensor '%s' scales [%lld, %lld) past the %llu scales",
                          name, so, so + r, (unsigned long long)n_scales);
    const float *sc = scales + so;
    float scale = sc[0];
    for (long long k = 1; k < r; k++)
        if (memcmp(&sc[k], &scale, 4))
            return lq_err_set(err, LQ_EUNSUPPORTED,
                              "bitnet/scales.f32: tensor '%s' has per-row scales that differ (row 0 "
                              "%g, row %lld %g); the engine applies one scale per tensor",
                              name, (double)scale, k, (double)sc[k]);
    if (!isfinite(scale))
        return lq_err_set(err, LQ_EFORMAT, "bitnet/scales.f32: tensor '%s' scale is not finite", name);
    char fname[160];
    snprintf(fname, sizeof fname, "bitnet/%s.i2s", name);
    char *path = lq_vx_join(dir, fname);
    if (!path)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    lq_mapfile mf = {0};
    int rc = lq_mapfile_open(&mf, path, err);
    uint64_t want = (uint64_t)r * (uint64_t)c / 4;
    if (!rc && mf.size != want)
        rc = lq_err_set(err, LQ_EFORMAT, "%s: %zu bytes, expected rows %lld x cols %lld / 4 = %llu",
                        path, mf.size, r, c, (unsigned long long)want);
    /* rows that are not whole 128-blocks (1bitLLM 3B's ffn_down) are padded with zero trits
     * as the GGUF loader pads them (model.c load_wmat; the engine pads the input to match) */
    const uint64_t pc = lq_i2s_padded_cols((uint64_t)c), held = (uint64_t)r * pc / 4;
    uint8_t *dst = NULL;
    if (!rc && !(dst = vx_alloc(s, (size_t)held)))
        rc = lq_err_set(err, LQ_ENOMEM, "%s: cannot allocate %llu bytes for the repacked tensor", path,
                        (unsigned long long)held);
    if (!rc)
        lq_vx_i2s_larql_to_ms(mf.data, dst, rows, cols);
    lq_mapfile_close(&mf);
    free(path);
    if (rc)
        return rc;
    memset(w, 0, sizeof *w);
    w->kind = LQ_WK_I2S;
    w->src_type = LQ_GGML_I2_S;
    w->rows = rows;
    w->cols = cols;
    w->i2s.data = dst;
    w->i2s.rows = rows;
    w->i2s.cols = (int64_t)pc;
    w->i2s.scale = scale;
    w->bytes = held;
    return LQ_OK;
}

/* copy: read into 2 MB pages instead of mapping (falls back to a mapping without memory) */
static int map_in_as(const char *dir, const char *name, int copy, lq_mapfile *m, lq_err *err)
{
    char *p = lq_vx_join(dir, name);
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "out of memory");
    struct stat st;
    int rc;
    if (stat(p, &st) != 0)
        rc = lq_err_set(err, LQ_ENOTFOUND, "%s: missing", p);
    else if (!copy || (rc = lq_mapfile_open_copy(m, p, NULL, err)) == LQ_ENOMEM)
        rc = lq_mapfile_open(m, p, err);
    free(p);
    return rc;
}

static int map_in(const char *dir, const char *name, lq_mapfile *m, lq_err *err)
{
    return map_in_as(dir, name, 0, m, err);
}

/* ---- dense projections (llama vindexes) ---- */

static const char *const dense_files[3] = {"attn_weights.bin", "up_weights.bin", "down_weights.bin"};

/* W [rows, cols] for manifest key (kind "tensor") in attn/up/down_weights.bin, used in place:
 * f32 or f16 from the entry's length, the offset a multiple of the element size (the mapping
 * is page-aligned, so the rows are aligned for the dense kernels). */
static int load_dense(vx_src *s, const char *dir, const json_t *man, int layer, const char *hf,
                      int64_t rows, int64_t cols, lq_wmat *w, lq_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "layers.%d.%s", layer, hf);
    man_entry e;
    int r = man_find(man, key, &e, err);
    if (r < 0)
        return r;
    if (r == 0)
        return lq_err_set(err, LQ_ENOTFOUND,
                          "weight_manifest.json: no entry '%s' (a llama vindex needs --level "
                          "inference or all)", key);
    int fi = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(e.file, dense_files[i]))
            fi = i;
    if (fi < 0)
        return lq_err_set(err, LQ_EFORMAT,
                          "weight_manifest.json: '%s' is in '%s', expected attn_weights.bin, "
                          "up_weights.bin or down_weights.bin", key, e.file);
    if (e.ndim != 2 || e.shape[0] != rows || e.shape[1] != cols)
        return lq_err_set(err, LQ_EFORMAT,
                          "weight_manifest.json: '%s' shape [%lld, %lld], the model needs [%lld, %lld]",
                          key, (long long)e.shape[0], (long long)(e.ndim > 1 ? e.shape[1] : 0),
                          (long long)rows, (long long)cols);
    if (!s->dense[fi].data) {
        int rc = map_in(dir, dense_files[fi], &s->dense[fi], err);
        if (rc)
            return rc;
    }
    const lq_mapfile *mf = &s->dense[fi];
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    int es = e.length == n * 4 ? 4 : e.length == n * 2 ? 2 : 0;
    if (!es)
        return lq_err_set(err, LQ_EFORMAT,
                          "weight_manifest.json: '%s' length %llu is neither %lld x %lld x 4 nor x 2",
                          key, (unsigned long long)e.length, (long long)rows, (long long)cols);
    if (e.offset % (uint64_t)es || e.offset > mf->size || e.length > mf->size - e.offset)
        return lq_err_set(err, LQ_EFORMAT,
                          "%s: '%s' range [%llu, +%llu) is past the end of the file (%zu bytes) or "
                          "not aligned to %d bytes", dense_files[fi], key,
                          (unsigned long long)e.offset, (unsigned long long)e.length, mf->size, es);
    memset(w, 0, sizeof *w);
    w->kind = LQ_WK_DENSE;
    w->src_type = es == 4 ? LQ_GGML_F32 : LQ_GGML_F16;
    w->rows = rows;
    w->cols = cols;
    w->dense.data = mf->data + e.offset;
    w->dense.rows = rows;
    w->dense.cols = cols;
    w->dense.type = w->src_type;
    w->bytes = e.length;
    return LQ_OK;
}

/* The gate projection of a llama layer is the layer's rows of gate_vectors.bin
 * ([n_ff, n_embd] in the vindex dtype; lq_vindex_open checked the range). */
static int load_gate(vx_src *s, int layer, int64_t rows, int64_t cols, lq_wmat *w, lq_err *err)
{
    const lq_vindex *v = s->v;
    const lq_vx_layer *ly = &v->layers[layer];
    if (!v->has_gate || !ly->present || ly->num_features != rows)
        return lq_err_set(err, LQ_EFORMAT,
                          "gate_vectors.bin: layer %d has %d features, the model needs %lld "
                          "(index.json layers[])", layer, ly->present ? ly->num_features : 0,
                          (long long)rows);
    int es = v->info.dtype == LQ_VDT_F16 ? 2 : 4;
    if (ly->length != (uint64_t)rows * (uint64_t)cols * (uint64_t)es || ly->offset % (uint64_t)es)
        return lq_err_set(err, LQ_EFORMAT,
                          "gate_vectors.bin: layer %d length %llu / offset %llu is not [%lld, %lld] "
                          "of %d-byte floats", layer, (unsigned long long)ly->length,
                          (unsigned long long)ly->offset, (long long)rows, (long long)cols, es);
    memset(w, 0, sizeof *w);
    w->kind = LQ_WK_DENSE;
    w->src_type = es == 4 ? LQ_GGML_F32 : LQ_GGML_F16;
    w->rows = rows;
    w->cols = cols;
    w->dense.data = v->gate.data + ly->offset;
    w->dense.rows = rows;
    w->dense.cols = cols;
    w->dense.type = w->src_type;
    w->bytes = ly->length;
    return LQ_OK;
}

/* ---- the model's parts ---- */

/* Architecture and configuration: index.json sizes, bitnet_layout (fallback model_config)
 * for heads, RoPE and eps. Ranges are checked by lq_model_check_config. */
static int read_config(lq_model *m, const lq_vindex *v, int *llama, lq_err *err)
{
    const lq_vindex_info *vi = &v->info;
    const char *dir = vi->dir;
    if (!vi->has_model_weights && vi->extract_level < LQ_VLEVEL_INFERENCE)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "%s: vindex does not contain model weights (extract_level %s): rebuild "
                          "with `larql convert gguf-to-vindex --keep-quant --level inference`",
                          dir, vi->extract_level_str);
    const json_t *bl = json_object_get(v->index, "bitnet_layout");
    const json_t *mc = json_object_get(v->index, "model_config");
    const char *mt = json_string_value(json_object_get(mc, "model_type"));
    /* llama: dense projections in attn/up/down_weights.bin + gate_vectors.bin. BitNet: the
     * ternary bitnet/ artifacts (the dense files of a BitNet vindex hold unit-scale trits,
     * the per-tensor scales are only in bitnet/scales.f32). */
    *llama = mt && !strcmp(mt, "llama") && !json_is_object(bl);
    if (!*llama && (!vi->has_bitnet || !json_is_object(bl)))
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "%s: no bitnet_layout in index.json and model_type '%s' is not llama: "
                          "running a BitNet vindex needs its ternary weights (rebuild the GGUF "
                          "with --keep-quant --level inference)", dir, mt ? mt : "(none)");
    if (!mt)
        mt = "bitnet-b1.58";
    snprintf(m->arch_name, sizeof m->arch_name, "%s", mt);
    /* model_type llama with a bitnet_layout: a llama-arch ternary model (HF1BitLLM, Falcon3,
     * Falcon-E): the ternary projections from bitnet/, the llama block (SiLU, no sub-norms,
     * adjacent-pair RoPE) */
    m->arch = *llama || !strcmp(mt, "llama") ? LQ_ARCH_LLAMA
              : !strcmp(mt, "bitnet")        ? LQ_ARCH_BITNET
                                             : LQ_ARCH_BITNET_B158;
    snprintf(m->name, sizeof m->name, "%s", vi->model ? vi->model : "");
    if (vi->embed_scale != 1.0f)
        return lq_err_set(err, LQ_EUNSUPPORTED, "%s: index.json embed_scale %g (BitNet and llama run with 1.0)",
                          dir, (double)vi->embed_scale);
    m->n_layer = vi->num_layers;
    m->n_embd = vi->hidden_size;
    m->n_ff = vi->intermediate_size;
    m->n_vocab = vi->vocab_size;
    double hd = json_num_field(bl, mc, "head_dim", 128), nh = json_num_field(bl, mc, "n_q_heads", -1),
           nkv = json_num_field(bl, mc, "n_kv_heads", -1);
    if (nh < 0)
        nh = json_num_field(mc, bl, "num_q_heads", 20);
    if (nkv < 0)
        nkv = json_num_field(mc, bl, "num_kv_heads", 5);
    double theta = json_num_field(bl, mc, "rope_base", 10000.0);
    double eps = json_num_field(bl, mc, "rms_eps", -1);
    if (eps < 0)
        eps = json_num_field(mc, bl, "norm_eps", 1e-5);
    if (!(theta > 0) || !isfinite(theta))
        theta = 10000.0; /* LARQL's fallback for an absent or non-positive rope_base */
    /* whole numbers within int before the conversions; lq_model_check_config does the rest */
    if (hd != floor(hd) || nh != floor(nh) || nkv != floor(nkv) || !(fabs(hd) < 1e9) ||
        !(fabs(nh) < 1e9) || !(fabs(nkv) < 1e9))
        return lq_err_set(err, LQ_EFORMAT,
                          "%s: index.json head_dim %g, heads %g, kv heads %g must be whole numbers",
                          dir, hd, nh, nkv);
    m->head_dim = (int)hd;
    m->n_head = (int)nh;
    m->n_head_kv = (int)nkv;
    m->n_rot = m->head_dim;
    /* LARQL's partial_rotary_factor (written by our builder when the GGUF's
     * rope.dimension_count < head_dim): rotate the first n_rot dimensions */
    json_t *prf = json_object_get(mc, "partial_rotary_factor");
    if (json_is_number(prf)) {
        double nr = floor(json_number_value(prf) * hd + 0.5);
        if (!(nr >= 2 && nr <= hd) || ((int)nr) % 2)
            return lq_err_set(err, LQ_EFORMAT,
                              "%s: index.json model_config.partial_rotary_factor %g gives %g "
                              "rotated dimensions of %g (must be even, 2..head_dim)",
                              dir, json_number_value(prf), nr, hd);
        m->n_rot = (int)nr;
    }
    m->q_dim = m->n_head * m->head_dim;
    m->kv_dim = m->n_head_kv * m->head_dim;
    m->rope_theta = theta;
    m->eps = (float)eps;
    /* the same pairing as the GGUF path (src/model/model.c): llama's q/k rows are stored as
     * the GGUF holds them (permuted for adjacent pairs), BitNet's in HF order (NEOX) */
    m->rope_neox = m->arch != LQ_ARCH_LLAMA;
    double ctx = json_num_field(mc, bl, "max_position_embeddings", 4096);
    m->n_ctx_train = ctx >= 1 && ctx <= LQ_MODEL_MAX_CTX ? (int)ctx : 4096;
    return lq_model_check_config(m, err);
}

/* Token embedding (validated by lq_vindex_open: vocab x hidden x 4 or x 2), the final norm
 * and the lm_head (the manifest's lm_head.weight in lm_head.bin, else tied). */
static int load_head(lq_model *m, vx_src *s, const json_t *man, lq_err *err)
{
    const lq_vindex *v = s->v;
    const char *dir = v->info.dir;
    int rc;
    m->embd.data = v->embed.data;
    if (s->huge && v->embed.size > 0) {
        /* the tied lm_head reads all of it every token: a copy in 2 MB pages */
        void *e = vx_alloc_huge(s, v->embed.size);
        if (e) {
            memcpy(e, v->embed.data, v->embed.size);
            m->embd.data = e;
        }
    }
    m->embd.rows = m->n_vocab;
    m->embd.cols = m->n_embd;
    m->embd.type = v->info.embed_dtype == LQ_VDT_F16 ? LQ_GGML_F16 : LQ_GGML_F32;
    if ((rc = load_norm(s, man, "norm.weight", m->n_embd, &m->output_norm, err)))
        return rc;
    man_entry e;
    int r = man_find(man, "lm_head.weight", &e, err);
    if (r < 0)
        return r;
    m->lm_head.kind = LQ_WK_DENSE;
    m->lm_head.rows = m->n_vocab;
    m->lm_head.cols = m->n_embd;
    if (r == 0) {
        m->lm_head.dense = m->embd;
    } else {
        uint64_t n = (uint64_t)m->n_vocab * (uint64_t)m->n_embd;
        if (strcmp(e.file, "lm_head.bin") || e.ndim != 2 || e.shape[0] != m->n_vocab ||
            e.shape[1] != m->n_embd)
            return lq_err_set(err, LQ_EFORMAT,
                              "weight_manifest.json: lm_head.weight must be [%d, %d] in lm_head.bin",
                              m->n_vocab, m->n_embd);
        if ((rc = map_in_as(dir, "lm_head.bin", s->huge, &s->lm_head, err)))
            return rc;
        int es = e.length == n * 4 ? 4 : e.length == n * 2 ? 2 : 0;
        if (!es || e.offset % (uint64_t)es || e.offset > s->lm_head.size ||
            e.length > s->lm_head.size - e.offset)
            return lq_err_set(err, LQ_EFORMAT,
                              "lm_head.bin: entry [%llu, +%llu) does not fit the file (%zu bytes) "
                              "or is not vocab %d x hidden %d in f32/f16",
                              (unsigned long long)e.offset, (unsigned long long)e.length,
                              s->lm_head.size, m->n_vocab, m->n_embd);
        m->lm_head.dense.data = s->lm_head.data + e.offset;
        m->lm_head.dense.rows = m->n_vocab;
        m->lm_head.dense.cols = m->n_embd;
        m->lm_head.dense.type = es == 4 ? LQ_GGML_F32 : LQ_GGML_F16;
    }
    m->lm_head.src_type = m->lm_head.dense.type;
    m->lm_head.bytes = (uint64_t)m->n_vocab * (uint64_t)m->n_embd *
                       (m->lm_head.dense.type == LQ_GGML_F32 ? 4u : 2u);
    return LQ_OK;
}

/* llama: dense projections used in place, the gate from gate_vectors.bin. */
static int load_llama_layers(lq_model *m, vx_src *s, const json_t *man, lq_err *err)
{
    const char *dir = s->v->info.dir;
    int rc = LQ_OK;
    for (int l = 0; l < m->n_layer && !rc; l++) {
        lq_layer *L = &m->layers[l];
        char k[128];
#define NORM(name, n, dst) (snprintf(k, sizeof k, "layers.%d." name, l), load_norm(s, man, k, n, dst, err))
#define DENSE(hf, r, c, w) load_dense(s, dir, man, l, hf, r, c, w, err)
        if ((rc = NORM("input_layernorm.weight", m->n_embd, &L->attn_norm)) ||
            (rc = NORM("post_attention_layernorm.weight", m->n_embd, &L->ffn_norm)) ||
            (rc = DENSE("self_attn.q_proj.weight", m->q_dim, m->n_embd, &L->q)) ||
            (rc = DENSE("self_attn.k_proj.weight", m->kv_dim, m->n_embd, &L->k)) ||
            (rc = DENSE("self_attn.v_proj.weight", m->kv_dim, m->n_embd, &L->v)) ||
            (rc = DENSE("self_attn.o_proj.weight", m->n_embd, m->q_dim, &L->o)) ||
            (rc = load_gate(s, l, m->n_ff, m->n_embd, &L->gate, err)) ||
            (rc = DENSE("mlp.up_proj.weight", m->n_ff, m->n_embd, &L->up)) ||
            (rc = DENSE("mlp.down_proj.weight", m->n_embd, m->n_ff, &L->down)))
            break;
#undef NORM
#undef DENSE
    }
    return rc;
}

/* BitNet: the seven ternary projections of every layer from bitnet/, repacked. */
static int load_bitnet_layers(lq_model *m, vx_src *s, const json_t *man, lq_err *err)
{
    const char *dir = s->v->info.dir;
    const json_t *bl = json_object_get(s->v->index, "bitnet_layout");
    const json_t *tensors = json_object_get(bl, "tensors");
    if (!json_is_array(tensors))
        return lq_err_set(err, LQ_EFORMAT, "index.json: bitnet_layout.tensors is not an array");
    lq_mapfile scm = {0};
    int rc = map_in(dir, "bitnet/scales.f32", &scm, err);
    if (rc)
        return rc;
    long long tsc = -1;
    json_int_field(bl, "total_scale_count", 0, INT64_MAX, &tsc);
    if (tsc < 0 || (uint64_t)tsc * 4 != scm.size) {
        rc = lq_err_set(err, LQ_EFORMAT,
                        "bitnet/scales.f32: %zu bytes, bitnet_layout.total_scale_count %lld x 4 "
                        "expected", scm.size, tsc);
        lq_mapfile_close(&scm);
        return rc;
    }
    /* page-aligned mapping: the floats are aligned */
    const float *scales = (const float *)(const void *)scm.data;
    for (int l = 0; l < m->n_layer && !rc; l++) {
        lq_layer *L = &m->layers[l];
        char k[128];
#define NORM(name, n, dst) (snprintf(k, sizeof k, "layers.%d." name, l), load_norm(s, man, k, n, dst, err))
#define PROJ(hf, r, c, w) load_proj(s, dir, tensors, scales, (uint64_t)tsc, l, hf, r, c, w, err)
        if ((rc = NORM("input_layernorm.weight", m->n_embd, &L->attn_norm)) ||
            (rc = NORM("post_attention_layernorm.weight", m->n_embd, &L->ffn_norm)) ||
            /* the BitNet block's sub-norms; a ternary llama has none */
            (m->arch != LQ_ARCH_LLAMA &&
             ((rc = NORM("attn_sub_norm.weight", m->q_dim, &L->attn_sub_norm)) ||
              (rc = NORM("ffn_sub_norm.weight", m->n_ff, &L->ffn_sub_norm)))) ||
            (rc = PROJ("self_attn.q_proj.weight", m->q_dim, m->n_embd, &L->q)) ||
            (rc = PROJ("self_attn.k_proj.weight", m->kv_dim, m->n_embd, &L->k)) ||
            (rc = PROJ("self_attn.v_proj.weight", m->kv_dim, m->n_embd, &L->v)) ||
            (rc = PROJ("self_attn.o_proj.weight", m->n_embd, m->q_dim, &L->o)) ||
            (rc = PROJ("mlp.gate_proj.weight", m->n_ff, m->n_embd, &L->gate)) ||
            (rc = PROJ("mlp.up_proj.weight", m->n_ff, m->n_embd, &L->up)) ||
            (rc = PROJ("mlp.down_proj.weight", m->n_embd, m->n_ff, &L->down)))
            break;
#undef NORM
#undef PROJ
    }
    lq_mapfile_close(&scm);
    return rc;
}

/* The source-specific info fields (lq_model_finish fills the rest). */
static void fill_info(lq_model *m, const vx_src *s, int llama)
{
    lq_model_info *in = &m->info;
    in->tied_embeddings = s->lm_head.data == NULL;
    in->embd_type = m->embd.type;
    in->proj_type = llama ? m->layers[0].q.src_type : LQ_GGML_I2_S;
    uint64_t proj = 0, np = (uint64_t)m->n_vocab * (uint64_t)m->n_embd * 2;
    for (int l = 0; l < m->n_layer; l++) {
        const lq_layer *L = &m->layers[l];
        uint64_t b = L->q.bytes + L->k.bytes + L->v.bytes + L->o.bytes + L->gate.bytes +
                     L->up.bytes + L->down.bytes;
        proj += b;
        /* parameters: 4 trits per byte (I2_S), or one per element (dense) */
        uint64_t e = (uint64_t)m->q_dim * m->n_embd * 2 + (uint64_t)m->kv_dim * m->n_embd * 2 +
                     (uint64_t)m->n_ff * m->n_embd * 3;
        np += (llama ? e : b * 4) + (uint64_t)(2 * m->n_embd + (llama ? 0 : m->q_dim + m->n_ff));
    }
    in->n_params = np + (uint64_t)m->n_embd;
    in->weight_bytes = s->v->embed.size + s->norms.size + s->lm_head.size + proj;
    in->weights_copied = s->huge;
}

/* own: the model closes v with itself (lq_model_open on a directory). */
static int vx_model_open(lq_vindex *v, int own, const lq_model_opts *opts, lq_model **out,
                         lq_err *err)
{
    lq_model *m = NULL;
    int rc = lq_model_new(opts, &m, err);
    vx_src *s = rc ? NULL : calloc(1, sizeof *s);
    if (rc || !s) {
        if (own)
            lq_vindex_close(v);
        lq_model_close(m);
        return rc ? rc : lq_err_set(err, LQ_ENOMEM, "out of memory");
    }
    s->v = v;
    s->own_v = own;
    m->src = s;
    m->src_free = vx_src_free;
    /* auto: as for a GGUF, by the bytes decode streams (the embedding stands for them) */
    s->huge = lq_want_huge_copy(m->opts.hugepages, (uint64_t)v->embed.size * 2);
    const char *dir = v->info.dir;
    json_t *man = NULL;
    int llama = 0;
    if ((rc = read_config(m, v, &llama, err)) || (rc = load_manifest(dir, &man, err)) ||
        (rc = map_in(dir, "norms.bin", &s->norms, err)) || (rc = load_head(m, s, man, err)))
        goto out;
    if (!(m->layers = calloc((size_t)m->n_layer, sizeof *m->layers))) {
        rc = lq_err_set(err, LQ_ENOMEM, "cannot allocate %d layers", m->n_layer);
        goto out;
    }
    rc = llama ? load_llama_layers(m, s, man, err) : load_bitnet_layers(m, s, man, err);
    if (rc)
        goto out;
    m->tok = v->tok; /* borrowed: the vindex frees it */
    m->tok_borrowed = 1;
    fill_info(m, s, llama);
    rc = lq_model_finish(m, err);
out:
    json_decref(man);
    if (rc) {
        if (err && !strstr(err->msg, dir))
            lq_err_prefix(err, "%s", dir);
        lq_model_close(m);
        return rc;
    }
    *out = m;
    return LQ_OK;
}

int lq_vindex_model_open(const lq_vindex *v, const lq_model_opts *opts, lq_model **out,
                         lq_err *err)
{
    if (!v || !out)
        return lq_err_set(err, LQ_EINVAL, "lq_vindex_model_open: vindex and out are required");
    *out = NULL;
    /* the model only reads the vindex (immutable after open); const is cast away to keep
     * one pointer type in vx_src, which frees it only when owned */
    return vx_model_open((lq_vindex *)v, 0, opts, out, err);
}

int lq_vindex_model_open_dir(const char *dir, const lq_model_opts *opts, lq_model **out,
                             lq_err *err)
{
    if (!dir || !out)
        return lq_err_set(err, LQ_EINVAL, "lq_vindex_model_open_dir: dir and out are required");
    *out = NULL;
    lq_vindex *v = NULL;
    lq_vindex_open_opts vo = {.n_threads = opts ? opts->n_threads : 0};
    int rc = lq_vindex_open(dir, &vo, &v, err);
    if (rc)
        return rc;
    return vx_model_open(v, 1, opts, out, err);
}

static const vx_src *src_of(const lq_model *m)
{
    return m && m->src_free == vx_src_free ? (const vx_src *)m->src : NULL;
}

const lq_vindex *lq_vindex_of_model(const lq_model *m)
{
    const vx_src *s = src_of(m);
    return s ? s->v : NULL;
}

const lq_knn_store *lq_knn_store_of_model(const lq_model *m)
{
    const vx_src *s = src_of(m);
    return s ? lq_vindex_knn_store(s->v) : NULL;
}
