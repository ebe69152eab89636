/* Test helper: writes small random BitNet / llama GGUFs with the library's GGUF writer, with
 * knobs for the malformed variants the loader must reject (wrong architecture, a missing
 * tensor, a wrong shape, a metadata key of the wrong type). Deterministic from a seed. */
#ifndef LQ_TEST_TINY_GGUF_H
#define LQ_TEST_TINY_GGUF_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "larql/gguf.h"

typedef struct tg_opts {
    const char *arch;   /* "bitnet-b1.58", "bitnet", "llama", or anything (to test rejection) */
    int dim, ff, layers, heads, kv_heads, vocab, ctx;
    double theta;
    int emb_type;       /* LQ_GGML_F32 / LQ_GGML_F16 */
    int proj_type;      /* LQ_GGML_I2_S, LQ_GGML_F32 / LQ_GGML_F16 (trit*scale as floats),
                         * LQ_GGML_Q8_0 (d = f16(scale), q = trit), or LQ_GGML_TQ2_0 /
                         * LQ_GGML_TQ1_0 (d = 1 and an F32 companion "<name>.scale" = scale;
                         * cols % 256 == 0) */
    int tq_block_d;     /* 1: TQ projections get a scale per 256-block, d_b = f16(scale *
                         * (0.5 + 0.25 * (b % 4))), and no companion; F32/F16 projections hold
                         * trit * d_b (the same weights as the TQ file, decoded). 2: d_b
                         * alternates scale * 2^13 and scale * 2^-15 */
    uint64_t seed;
    const char *skip_tensor;      /* leave this tensor out */
    const char *bad_shape_tensor; /* write this 2-D tensor with ne1 = ne0 (square) */
    const char *string_key;       /* write this <arch>.KEY as a string instead of a number */
    int theta_as_u32;             /* write rope.freq_base as u32 (any numeric type must work) */
    int untied;                   /* add output.weight */
    const char *chat_template;    /* tokenizer.chat_template, when set */
} tg_opts;

static inline tg_opts tg_default(void)
{
    tg_opts o;
    memset(&o, 0, sizeof o);
    o.arch = "bitnet-b1.58";
    o.dim = 128;
    o.ff = 256;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 300;
    o.ctx = 256;
    o.theta = 10000.0;
    o.emb_type = LQ_GGML_F32;
    o.proj_type = LQ_GGML_I2_S;
    o.seed = 42;
    return o;
}

static inline uint64_t tg_rand(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double tg_unif(uint64_t *s) { return (tg_rand(s) >> 11) * (1.0 / 9007199254740992.0); }

typedef struct tg_buf {
    void *p[512];
    int n;
} tg_buf;

static inline void *tg_keep(tg_buf *b, void *p)
{
    if (p && b->n < 512)
        b->p[b->n++] = p;
    return p;
}

/* Adds a float tensor (ne0 = cols, ne1 = rows, rows 0 means 1-D) of the given type from f32. */
static inline int tg_add_float(lq_gguf_writer *w, tg_buf *b, const tg_opts *o, const char *name,
                               int type, const float *v, uint64_t cols, uint64_t rows)
{
    if (o->skip_tensor && !strcmp(o->skip_tensor, name))
        return 0;
    uint64_t ne[2] = {cols, rows ? rows : 1};
    if (o->bad_shape_tensor && !strcmp(o->bad_shape_tensor, name))
        ne[1] = cols;
    uint64_t n = ne[0] * ne[1];
    void *data;
    uint64_t nbytes;
    if (type == LQ_GGML_F16) {
        uint16_t *h = tg_keep(b, calloc(n, 2));
        for (uint64_t i = 0; i < n; i++)
            h[i] = lq_f32_to_f16(v[i % (cols * (rows ? rows : 1))]);
        data = h;
        nbytes = n * 2;
    } else {
        float *f = tg_keep(b, calloc(n, 4));
        for (uint64_t i = 0; i < n; i++)
            f[i] = v[i % (cols * (rows ? rows : 1))];
        data = f;
        nbytes = n * 4;
    }
    return lq_gguf_writer_add_tensor(w, name, rows ? 2 : 1, ne, type, data, nbytes);
}

/* The scale of 256-block b of a TQ projection (tg_opts.tq_block_d), as the f16 the file holds. */
static inline float tg_block_d(const tg_opts *o, float scale, uint64_t b)
{
    if (!o->tq_block_d)
        return 1.0f;
    if (o->tq_block_d == 2) /* 2^28 apart: too wide for the TQ kernels' exact sums */
        return lq_f16_to_f32(lq_f32_to_f16(scale * (b % 2 ? 8192.0f : 1.0f / 32768.0f)));
    return lq_f16_to_f32(lq_f32_to_f16(scale * (0.5f + 0.25f * (float)(b % 4))));
}

/* A projection W [rows, cols]: random trits (P(0) = 1/2), scale ~ 4/sqrt(cols). */
static inline int tg_add_proj(lq_gguf_writer *w, tg_buf *b, const tg_opts *o, uint64_t *rng,
                              const char *name, uint64_t rows, uint64_t cols)
{
    if (o->bad_shape_tensor && !strcmp(o->bad_shape_tensor, name))
        rows = cols;
    uint64_t n = rows * cols;
    int8_t *tr = malloc(n);
    float scale = (float)(4.0 * (1.0 + 0.5 * tg_unif(rng)) / sqrt((double)cols));
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = tg_rand(rng) & 3;
        tr[i] = r == 0 ? -1 : r == 1 ? 1 : 0;
    }
    int rc;
    if (o->skip_tensor && !strcmp(o->skip_tensor, name)) {
        rc = 0;
    } else if (o->proj_type == LQ_GGML_I2_S) {
        uint8_t *p = tg_keep(b, calloc(n / 4 + 32, 1));
        lq_i2s_pack(tr, n, scale, p);
        uint64_t ne[2] = {cols, rows};
        rc = lq_gguf_writer_add_tensor(w, name, 2, ne, LQ_GGML_I2_S, p, n / 4 + 32);
    } else if (o->proj_type == LQ_GGML_Q8_0) {
        uint8_t *p = tg_keep(b, calloc(n / 32 * 34, 1));
        uint16_t d = lq_f32_to_f16(scale);
        for (uint64_t blk = 0; blk < n / 32; blk++) {
            memcpy(p + blk * 34, &d, 2);
            for (int j = 0; j < 32; j++)
                p[blk * 34 + 2 + j] = (uint8_t)tr[blk * 32 + j];
        }
        uint64_t ne[2] = {cols, rows};
        rc = lq_gguf_writer_add_tensor(w, name, 2, ne, LQ_GGML_Q8_0, p, n / 32 * 34);
    } else if (o->proj_type == LQ_GGML_TQ2_0 || o->proj_type == LQ_GGML_TQ1_0) {
        const uint64_t bb = o->proj_type == LQ_GGML_TQ2_0 ? 66 : 54;
        uint8_t *p = tg_keep(b, calloc(n / 256 * bb, 1));
        float *d = malloc(n / 256 * sizeof(float));
        for (uint64_t blk = 0; blk < n / 256; blk++)
            d[blk] = tg_block_d(o, scale, blk);
        lq_tq_pack(o->proj_type, tr, n, d, p);
        free(d);
        uint64_t ne[2] = {cols, rows};
        rc = lq_gguf_writer_add_tensor(w, name, 2, ne, o->proj_type, p, n / 256 * bb);
        if (!o->tq_block_d) {
            char sname[128];
            size_t nl = strlen(name) - strlen(".weight");
            snprintf(sname, sizeof sname, "%.*s.scale", (int)nl, name);
            float *sc = tg_keep(b, malloc(sizeof(float)));
            *sc = scale;
            uint64_t one_ne[1] = {1};
            if (!rc)
                rc = lq_gguf_writer_add_tensor(w, tg_keep(b, strdup(sname)), 1, one_ne,
                                               LQ_GGML_F32, sc, 4);
        }
    } else {
        float *f = malloc(n * sizeof(float));
        for (uint64_t i = 0; i < n; i++)
            f[i] = tr[i] * (o->tq_block_d ? tg_block_d(o, scale, i / 256) : scale);
        tg_opts o2 = *o;
        o2.bad_shape_tensor = NULL;
        rc = tg_add_float(w, b, &o2, name, o->proj_type, f, cols, rows);
        free(f);
    }
    free(tr);
    return rc;
}

static inline int tg_write(const tg_opts *o, const char *path, lq_err *err)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    tg_buf b;
    b.n = 0;
    uint64_t rng = o->seed;
    char key[128];
    const char *A = o->arch;
    int bitnet = strncmp(A, "bitnet", 6) == 0;
    lq_gguf_writer_add_str(w, "general.architecture", A);
    lq_gguf_writer_add_str(w, "general.name", "tiny-test");
    if (o->chat_template)
        lq_gguf_writer_add_str(w, "tokenizer.chat_template", o->chat_template);
#define KEY(k) (snprintf(key, sizeof key, "%s." k, A), key)
#define U32(k, v)                                                                          \
    do {                                                                                   \
        if (o->string_key && !strcmp(o->string_key, k))                                    \
            lq_gguf_writer_add_str(w, KEY(k), "twelve");                                   \
        else                                                                               \
            lq_gguf_writer_add_u32(w, KEY(k), (uint32_t)(v));                              \
    } while (0)
    U32("context_length", o->ctx);
    U32("embedding_length", o->dim);
    U32("block_count", o->layers);
    U32("feed_forward_length", o->ff);
    U32("attention.head_count", o->heads);
    U32("attention.head_count_kv", o->kv_heads);
    if (o->theta_as_u32)
        lq_gguf_writer_add_u32(w, KEY("rope.freq_base"), (uint32_t)o->theta);
    else
        lq_gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)o->theta);
    lq_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef U32
#undef KEY
    int D = o->dim, F = o->ff, V = o->vocab, hd = o->dim / o->heads, KV = o->kv_heads * hd;
    float *emb = malloc((size_t)V * D * sizeof(float));
    for (size_t i = 0; i < (size_t)V * D; i++)
        emb[i] = (float)((tg_unif(&rng) * 2 - 1) * 2.0 * sqrt(3.0) / sqrt((double)D));
    float *norm = malloc((size_t)(F > D ? F : D) * sizeof(float));
    int rc = tg_add_float(w, &b, o, "token_embd.weight", o->emb_type, emb, D, V);
    for (int i = 0; i < (F > D ? F : D); i++)
        norm[i] = (float)(0.9 + 0.2 * tg_unif(&rng));
    rc = rc ? rc : tg_add_float(w, &b, o, "output_norm.weight", LQ_GGML_F32, norm, D, 0);
    if (o->untied) {
        for (size_t i = 0; i < (size_t)V * D; i++)
            emb[i] = (float)((tg_unif(&rng) * 2 - 1) / sqrt((double)D));
        rc = rc ? rc : tg_add_float(w, &b, o, "output.weight", LQ_GGML_F32, emb, D, V);
    }
    for (int l = 0; l < o->layers && !rc; l++) {
        char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%d." s ".weight", l), n)
        for (int i = 0; i < (F > D ? F : D); i++)
            norm[i] = (float)(0.9 + 0.2 * tg_unif(&rng));
        rc = rc ? rc : tg_add_float(w, &b, o, NM("attn_norm"), LQ_GGML_F32, norm, D, 0);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("attn_q"), D, D);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("attn_k"), KV, D);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("attn_v"), KV, D);
        if (bitnet)
            rc = rc ? rc : tg_add_float(w, &b, o, NM("attn_sub_norm"), LQ_GGML_F32, norm, D, 0);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("attn_output"), D, D);
        rc = rc ? rc : tg_add_float(w, &b, o, NM("ffn_norm"), LQ_GGML_F32, norm, D, 0);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("ffn_gate"), F, D);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("ffn_up"), F, D);
        if (bitnet)
            rc = rc ? rc : tg_add_float(w, &b, o, NM("ffn_sub_norm"), LQ_GGML_F32, norm, F, 0);
        rc = rc ? rc : tg_add_proj(w, &b, o, &rng, NM("ffn_down"), D, F);
#undef NM
    }
    if (!rc)
        rc = lq_gguf_writer_write(w, path, err);
    lq_gguf_writer_free(w);
    for (int i = 0; i < b.n; i++)
        free(b.p[i]);
    free(emb);
    free(norm);
    return rc;
}

/* Removes the *.gguf files this test wrote, then the directory (if now empty). */
static inline void tg_cleanup_dir(const char *dir)
{
    if (!dir || !*dir)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 5 && strcmp(e->d_name + n - 5, ".gguf") == 0) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

#endif
