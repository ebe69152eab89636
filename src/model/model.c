/* Model loading: architecture rules, hyperparameters, and validated tensor views.
 *
 * The GGUF stays mapped for the model's lifetime. Projections in I2_S, F32, F16 and BF16 are
 * used in place (zero copy); so are TQ1_0 and TQ2_0 projections of a BitNet-arch model with
 * int8 activations (the kernels' int8 x ternary path). Other decodable types (Q8_0, and TQ for
 * f32 activations or a llama-arch file) are decoded once to f32 here, because the engine has no
 * kernels for them. Every tensor's shape is checked
 * against the configuration before anything reads it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>


#include "larql/gguf.h"
#include "larql/model.h"
#include "core/clock.h"
#include "core/f16.h"
#include "model/memo.h"
#include "model/model_internal.h"
static void *owned_alloc(lq_model *m, size_t bytes)
{
    if (m->owned.n == m->owned.cap) {
        int cap = m->owned.cap ? m->owned.cap * 2 : 16;
        void **p = realloc(m->owned.ptrs, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        m->owned.ptrs = p;
        m->owned.cap = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        m->owned.ptrs[m->owned.n++] = p;
    return p;
}

/* ---- metadata ---- */

/* Reads <arch>.<key> as an integer within [lo, hi]. Absent -> def (or LQ_ENOTFOUND when
 * required). A per-layer array (some converters write feed_forward_length / head_count_kv
 * that way) is accepted when all its elements are equal. */
static int get_int(const lq_model *m, const char *key, int required, int64_t def, int64_t lo,
                   int64_t hi, int *out, lq_err *err)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    int64_t idx = lq_gguf_find_key(m->gguf, full);
    int64_t v = def;
    if (idx < 0) {
        if (required)
            return lq_err_set(err, LQ_ENOTFOUND, "missing metadata key '%s'", full);
    } else if (lq_gguf_kv_type(m->gguf, idx) == LQ_GGUF_ARRAY) {
        uint64_t n = lq_gguf_arr_len(m->gguf, idx);
        if (n == 0)
            return lq_err_set(err, LQ_EFORMAT, "metadata key '%s': empty array", full);
        for (uint64_t i = 0; i < n; i++) {
            int64_t e;
            if (lq_gguf_arr_i64(m->gguf, idx, i, &e) != 0)
                return lq_err_set(err, LQ_EFORMAT,
                                  "metadata key '%s': element %llu is not an integer", full,
                                  (unsigned long long)i);
            if (i == 0)
                v = e;
            else if (e != v)
                return lq_err_set(err, LQ_EUNSUPPORTED,
                                  "metadata key '%s': per-layer values differ (%lld vs %lld); "
                                  "only uniform layers are supported",
                                  full, (long long)v, (long long)e);
        }
    } else {
        int rc = lq_gguf_get_i64(m->gguf, full, &v, err);
        if (rc != 0)
            return rc;
    }
    if (v < lo || v > hi)
        return lq_err_set(err, LQ_ERANGE, "metadata key '%s' = %lld, outside [%lld, %lld]",
                          full, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return LQ_OK;
}

static int get_real(const lq_model *m, const char *key, double def, double *out, lq_err *err)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    if (lq_gguf_find_key(m->gguf, full) < 0) {
        *out = def;
        return LQ_OK;
    }
    int rc = lq_gguf_get_f64(m->gguf, full, out, err);
    if (rc != 0)
        return rc;
    if (!isfinite(*out) || *out <= 0)
        return lq_err_set(err, LQ_ERANGE, "metadata key '%s' = %g, must be finite and > 0",
                          full, *out);
    return LQ_OK;
}

/* ---- tensors ---- */

static const lq_gguf_tensor *find_tensor(lq_model *m, const char *name, int required, lq_err *err)
{
    const lq_gguf_tensor *t = lq_gguf_find_tensor(m->gguf, name);
    if (!t && required)
        lq_err_set(err, LQ_ENOTFOUND, "missing tensor '%s'", name);
    return t;
}

static void fmt_shape(char *buf, size_t cap, const lq_gguf_tensor *t)
{
    int n = snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%llu", d ? ", " : "",
                      (unsigned long long)t->ne[d]);
    if ((size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "]");
}

/* Checks t has shape [ne0] (ne1 == 0) or [ne0, ne1]. */
static int check_shape(const lq_gguf_tensor *t, int64_t ne0, int64_t ne1, lq_err *err)
{
    int ok = (uint64_t)ne0 == t->ne[0];
    if (ne1 == 0)
        ok = ok && t->n_dims == 1;
    else
        ok = ok && t->n_dims == 2 && (uint64_t)ne1 == t->ne[1];
    if (ok)
        return LQ_OK;
    char got[96];
    fmt_shape(got, sizeof got, t);
    if (ne1 == 0)
        return lq_err_set(err, LQ_EFORMAT, "%s: shape %s, expected [%lld]", t->name, got,
                          (long long)ne0);
    return lq_err_set(err, LQ_EFORMAT, "%s: shape %s, expected [%lld, %lld]", t->name, got,
                      (long long)ne0, (long long)ne1);
}

/* Decodes any supported tensor into an owned f32 buffer. */
static int decode_f32(lq_model *m, const lq_gguf_tensor *t, float **out, lq_err *err)
{
    if (!lq_ggml_type_supported(t->type))
        return lq_err_set(err, LQ_EUNSUPPORTED, "%s: tensor type %s (%d) is not supported",
                          t->name, lq_ggml_type_name(t->type), t->type);
    if (t->n_elements > ((uint64_t)1 << 40) / sizeof(float))
        return lq_err_set(err, LQ_ERANGE, "%s: %llu elements is too many to decode", t->name,
                          (unsigned long long)t->n_elements);
    float *p = owned_alloc(m, (size_t)t->n_elements * sizeof(float));
    if (!p)
        return lq_err_set(err, LQ_ENOMEM, "%s: cannot allocate %llu floats", t->name,
                          (unsigned long long)t->n_elements);
    int rc = lq_gguf_tensor_to_f32(t, p, err);
    if (rc != 0)
        return rc;
    *out = p;
    return LQ_OK;
}

/* A 1-D norm weight of n floats: F32 in place when aligned, anything else decoded. */
static int load_norm(lq_model *m, const char *name, int64_t n, int required, const float **out,
                     lq_err *err)
{
    *out = NULL;
    const lq_gguf_tensor *t = find_tensor(m, name, required, err);
    if (!t)
        return required ? LQ_ENOTFOUND : LQ_OK;
    int rc = check_shape(t, n, 0, err);
    if (rc != 0)
        return rc;
    if (t->type == LQ_GGML_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = (const float *)(const void *)t->data;
        return LQ_OK;
    }
    float *p;
    rc = decode_f32(m, t, &p, err);
    if (rc == 0)
        *out = p;
    return rc;
}

static int dense_elem_size(int type)
{
    switch (type) {
    case LQ_GGML_F32: return 4;
    case LQ_GGML_F16:
    case LQ_GGML_BF16: return 2;
    default: return 0;
    }
}

/* A TQ1_0/TQ2_0 projection, in place or decoded: rows of whole 256-blocks and every block's f16
 * scale finite (one read of 2 bytes a block: a NaN or infinite scale would turn every output
 * it touches into NaN; 0 is a legal all-zero block). */
static int tq_check(const char *name, const lq_gguf_tensor *t, int64_t rows, int64_t cols,
                    lq_err *err)
{
    if (cols % 256 != 0)
        return lq_err_set(err, LQ_EFORMAT, "%s: %s row length %lld is not a multiple of 256", name,
                          lq_ggml_type_name(t->type), (long long)cols);
    const uint64_t bb = t->type == LQ_GGML_TQ1_0 ? 54 : 66;
    const uint64_t nblk = (uint64_t)rows * (uint64_t)cols / 256;
    if (t->n_bytes != nblk * bb)
        return lq_err_set(err, LQ_EFORMAT, "%s: %llu bytes of %s, expected %llu", name,
                          (unsigned long long)t->n_bytes, lq_ggml_type_name(t->type),
                          (unsigned long long)(nblk * bb));
    for (uint64_t b = 0; b < nblk; b++) {
        const uint8_t *p = t->data + b * bb + bb - 2;
        float d = lq_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        if (!isfinite(d))
            return lq_err_set(err, LQ_EFORMAT, "%s: block %llu has a scale %g that is not finite",
                              name, (unsigned long long)b, (double)d);
    }
    return LQ_OK;
}

/* A TQ1_0/TQ2_0 projection kept in the mapping (kernels.h lq_tq_mat), checked by tq_check. A
 * tensor whose scales span too many binades for the kernels' exact sums (lq_tq_prepare; no
 * converter writes one) is left with kind 0: the caller decodes it to f32. */
static int load_tq(lq_model *m, const char *name, const lq_gguf_tensor *t, int64_t rows,
                   int64_t cols, lq_wmat *w, lq_err *err)
{
    const uint64_t bb = t->type == LQ_GGML_TQ1_0 ? 54 : 66;
    const uint64_t nblk = (uint64_t)rows * (uint64_t)cols / 256;
    float mult;
    int rc = lq_gguf_tq_mult(m->gguf, name, &mult, err);
    if (rc != 0)
        return rc;
    w->tq.data = t->data;
    w->tq.rows = rows;
    w->tq.cols = cols;
    w->tq.type = t->type;
    w->tq.mult = mult;
    if (!lq_tq_prepare(&w->tq))
        return LQ_OK;
    w->kind = LQ_WK_TQ;
    w->bytes = nblk * bb;
    return LQ_OK;
}

/* A projection W [rows, cols] (GGUF ne = [cols, rows]). bitlinear: a layer's projection, whose
 * input the engine quantises to int8 in a BitNet-arch model (TQ types stay packed there). */
static int load_wmat(lq_model *m, const char *name, int64_t rows, int64_t cols, lq_wmat *w,
                     int bitlinear, lq_err *err)
{
    memset(w, 0, sizeof *w);
    const lq_gguf_tensor *t = find_tensor(m, name, 1, err);
    if (!t)
        return LQ_ENOTFOUND;
    int rc = check_shape(t, cols, rows, err);
    if (rc != 0)
        return rc;
    w->rows = rows;
    w->cols = cols;
    w->src_type = t->type;
    if (t->type == LQ_GGML_I2_S) {
        /* lm_head reads its input unpadded (the one I2_S matrix outside project()) */
        if (cols % 128 != 0 && !bitlinear)
            return lq_err_set(err, LQ_EFORMAT,
                              "%s: I2_S row length %lld is not a multiple of 128", name,
                              (long long)cols);
        float scale;
        rc = lq_gguf_i2s_scale(t, &scale, err);
        if (rc != 0)
            return rc;
        /* the writers store max|w| (microsoft's quantize_i2_s): a NaN, infinite, zero or
         * negative scale is a damaged file, and would turn every output into NaN or 0 */
        if (!isfinite(scale) || !(scale > 0))
            return lq_err_set(err, LQ_EFORMAT, "%s: I2_S scale %g is not a positive finite number",
                              name, (double)scale);
        w->kind = LQ_WK_I2S;
        w->i2s.data = t->data;
        w->i2s.rows = rows;
        w->i2s.cols = cols;
        w->i2s.scale = scale;
        if (cols % 128 != 0) {
            /* microsoft's blocks run over the flattened tensor, so these rows start inside
             * a block (1bitLLM 3B's ffn_down, 8640 wide): one copy with every row padded to
             * whole blocks by zero trits; the engine zero-pads this matrix's input to match
             * (forward.c project), which leaves every product unchanged */
            uint64_t pc = lq_i2s_padded_cols((uint64_t)cols);
            uint8_t *p = owned_alloc(m, (size_t)((uint64_t)rows * pc / 4));
            if (!p)
                return lq_err_set(err, LQ_ENOMEM, "%s: cannot allocate the row-padded I2_S copy",
                                  name);
            lq_i2s_repack_rows(t->data, (uint64_t)rows, (uint64_t)cols, p);
            w->i2s.data = p;
            w->i2s.cols = (int64_t)pc;
        }
        w->bytes = (uint64_t)rows * (uint64_t)w->i2s.cols / 4;
        return LQ_OK;
    }
    if (t->type == LQ_GGML_TQ1_0 || t->type == LQ_GGML_TQ2_0) {
        if ((rc = tq_check(name, t, rows, cols, err)) != 0)
            return rc;
        if (bitlinear && m->arch != LQ_ARCH_LLAMA && m->act_mode == LQ_ACT_INT8 &&
            ((rc = load_tq(m, name, t, rows, cols, w, err)) != 0 || w->kind == LQ_WK_TQ))
            return rc;
    }
    int es = dense_elem_size(t->type);
    w->kind = LQ_WK_DENSE;
    w->dense.rows = rows;
    w->dense.cols = cols;
    if (es > 0 && ((uintptr_t)t->data % (uintptr_t)es) == 0) {
        w->dense.data = t->data;
        w->dense.type = t->type;
        w->bytes = (uint64_t)rows * (uint64_t)cols * (uint64_t)es;
        return LQ_OK;
    }
    float *p;
    rc = decode_f32(m, t, &p, err);
    if (rc != 0)
        return rc;
    if (t->type == LQ_GGML_TQ1_0 || t->type == LQ_GGML_TQ2_0) {
        float mult;
        rc = lq_gguf_tq_mult(m->gguf, name, &mult, err);
        if (rc != 0)
            return rc;
        if (mult != 1.0f)
            for (uint64_t i = 0; i < t->n_elements; i++)
                p[i] *= mult;
    }
    w->dense.data = p;
    w->dense.type = LQ_GGML_F32;
    w->bytes = (uint64_t)rows * (uint64_t)cols * sizeof(float);
    return LQ_OK;
}

/* ---- configuration ---- */

static int read_config(lq_model *m, lq_err *err)
{
    int rc;
    if ((rc = get_int(m, "embedding_length", 1, 0, 1, LQ_MODEL_MAX_EMBD, &m->n_embd, err)) ||
        (rc = get_int(m, "block_count", 1, 0, 1, LQ_MODEL_MAX_LAYERS, &m->n_layer, err)) ||
        (rc = get_int(m, "feed_forward_length", 1, 0, 1, LQ_MODEL_MAX_FF, &m->n_ff, err)) ||
        (rc = get_int(m, "attention.head_count", 1, 0, 1, LQ_MODEL_MAX_HEADS, &m->n_head, err)) ||
        (rc = get_int(m, "attention.head_count_kv", 0, m->n_head, 1, m->n_head, &m->n_head_kv,
                      err)) ||
        (rc = get_int(m, "context_length", 0, 4096, 1, LQ_MODEL_MAX_CTX, &m->n_ctx_train, err)))
        return rc;
    if (m->n_head % m->n_head_kv != 0)
        return lq_err_set(err, LQ_EFORMAT,
                          "%s.attention.head_count %d is not a multiple of head_count_kv %d",
                          m->arch_name, m->n_head, m->n_head_kv);
    int def_hd = m->n_embd % m->n_head == 0 ? m->n_embd / m->n_head : 0;
    if ((rc = get_int(m, "attention.key_length", 0, def_hd, 1, LQ_MODEL_MAX_HEAD_DIM,
                      &m->head_dim, err)))
        return rc;
    if (m->head_dim <= 0 || m->head_dim % 2 != 0)
        return lq_err_set(err, LQ_EFORMAT,
                          "head dimension %d (%s.embedding_length %d / head_count %d) must be "
                          "a positive even number",
                          m->head_dim, m->arch_name, m->n_embd, m->n_head);
    if ((rc = get_int(m, "rope.dimension_count", 0, m->head_dim, 2, m->head_dim, &m->n_rot, err)))
        return rc;
    if (m->n_rot % 2 != 0)
        return lq_err_set(err, LQ_EFORMAT, "%s.rope.dimension_count %d must be even",
                          m->arch_name, m->n_rot);
    double eps;
    if ((rc = get_real(m, "rope.freq_base", 10000.0, &m->rope_theta, err)) ||
        (rc = get_real(m, "attention.layer_norm_rms_epsilon", 1e-5, &eps, err)))
        return rc;
    m->eps = (float)eps;
    m->q_dim = m->n_head * m->head_dim;
    m->kv_dim = m->n_head_kv * m->head_dim;
    return LQ_OK;
}

static int load_tensors(lq_model *m, lq_err *err)
{
    int rc;
    int bitnet = m->arch != LQ_ARCH_LLAMA;
    const lq_gguf_tensor *te = find_tensor(m, "token_embd.weight", 1, err);
    if (!te)
        return LQ_ENOTFOUND;
    if (te->n_dims != 2 || te->ne[0] != (uint64_t)m->n_embd) {
        char got[96];
        fmt_shape(got, sizeof got, te);
        return lq_err_set(err, LQ_EFORMAT, "token_embd.weight: shape %s, expected [%d, n_vocab]",
                          got, m->n_embd);
    }
    if (te->ne[1] < 1 || te->ne[1] > LQ_MODEL_MAX_VOCAB)
        return lq_err_set(err, LQ_ERANGE, "token_embd.weight: vocabulary %llu outside [1, %d]",
                          (unsigned long long)te->ne[1], LQ_MODEL_MAX_VOCAB);
    m->n_vocab = (int)te->ne[1];
    if ((rc = lq_model_check_config(m, err)))
        return rc;
    m->embd.rows = m->n_vocab;
    m->embd.cols = m->n_embd;
    int es = dense_elem_size(te->type);
    if (es > 0 && ((uintptr_t)te->data % (uintptr_t)es) == 0) {
        m->embd.data = te->data;
        m->embd.type = te->type;
    } else {
        float *p;
        if ((rc = decode_f32(m, te, &p, err)))
            return rc;
        m->embd.data = p;
        m->embd.type = LQ_GGML_F32;
    }
    if ((rc = load_norm(m, "output_norm.weight", m->n_embd, 1, &m->output_norm, err)))
        return rc;
    if (lq_gguf_find_tensor(m->gguf, "output.weight")) {
        if ((rc = load_wmat(m, "output.weight", m->n_vocab, m->n_embd, &m->lm_head, 0, err)))
            return rc;
    } else {
        m->lm_head.kind = LQ_WK_DENSE;
        m->lm_head.src_type = te->type;
        m->lm_head.rows = m->n_vocab;
        m->lm_head.cols = m->n_embd;
        m->lm_head.dense = m->embd;
        m->lm_head.bytes = (uint64_t)m->n_vocab * (uint64_t)m->n_embd *
                           (uint64_t)dense_elem_size(m->embd.type);
    }

    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers)
        return lq_err_set(err, LQ_ENOMEM, "cannot allocate %d layers", m->n_layer);
    for (int l = 0; l < m->n_layer; l++) {
        lq_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s ".weight", l), n)
        if ((rc = load_norm(m, NAME("attn_norm"), m->n_embd, 1, &L->attn_norm, err)) ||
            (rc = load_norm(m, NAME("ffn_norm"), m->n_embd, 1, &L->ffn_norm, err)) ||
            (rc = load_wmat(m, NAME("attn_q"), m->q_dim, m->n_embd, &L->q, 1, err)) ||
            (rc = load_wmat(m, NAME("attn_k"), m->kv_dim, m->n_embd, &L->k, 1, err)) ||
            (rc = load_wmat(m, NAME("attn_v"), m->kv_dim, m->n_embd, &L->v, 1, err)) ||
            (rc = load_wmat(m, NAME("attn_output"), m->n_embd, m->q_dim, &L->o, 1, err)) ||
            (rc = load_wmat(m, NAME("ffn_gate"), m->n_ff, m->n_embd, &L->gate, 1, err)) ||
            (rc = load_wmat(m, NAME("ffn_up"), m->n_ff, m->n_embd, &L->up, 1, err)) ||
            (rc = load_wmat(m, NAME("ffn_down"), m->n_embd, m->n_ff, &L->down, 1, err)))
            return rc;
        /* The sub-norms are part of the BitNet block (both are required: a model without
         * them would silently compute something else); llama has none. */
        if (bitnet &&
            ((rc = load_norm(m, NAME("attn_sub_norm"), m->q_dim, 1, &L->attn_sub_norm, err)) ||
             (rc = load_norm(m, NAME("ffn_sub_norm"), m->n_ff, 1, &L->ffn_sub_norm, err))))
            return rc;
        /* A llama file with sub-norms is no layout any converter writes (llama.cpp's llama
         * graph has none and refuses extra tensors): running it without them would be
         * silently wrong, running it with them a guess. */
        if (!bitnet && (lq_gguf_find_tensor(m->gguf, NAME("attn_sub_norm")) ||
                        lq_gguf_find_tensor(m->gguf, NAME("ffn_sub_norm"))))
            return lq_err_set(err, LQ_EUNSUPPORTED,
                              "%s: a sub-norm in a '%s' file (only the bitnet architectures have "
                              "them; a BitNet model with sub-norms must say bitnet or bitnet-b1.58)",
                              n, m->arch_name);
#undef NAME
    }
    return LQ_OK;
}

/* ---- the q8 lm_head (lq_model_opts.lm_head_q8) ---- */

/* Rows of an int8 copy of a dense lm_head with one scale per row (the kernel set's q8_bound),
 * and for the bounded head each row's error and norm bounds (err, norm NULL for the q8 head). */
typedef struct q8_job {
    const lq_kernels *k;
    const lq_dense_mat *src;
    int8_t *q;    /* [rows, cols] */
    float *scale; /* [rows] */
    float *err;   /* [rows] or NULL */
    float *norm;  /* [rows] or NULL */
    int failed;   /* set (to the same value) by any chunk that could not allocate */
} q8_job;

static void q8_fn(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    q8_job *j = ctx;
    if (j->k->q8_bound(j->src, j->q, j->scale, j->err, j->norm, r0, r1) != 0)
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

/* Replaces a dense lm_head by an owned int8 copy with one scale per row, quantised on the
 * pool (the tied embedding itself stays in the mapping for token lookups). Other lm_head
 * kinds (an I2_S output.weight) are left as they are: they are already smaller. */
static int build_lm_q8(lq_model *m, lq_err *err)
{
    lq_wmat *w = &m->lm_head;
    if (w->kind != LQ_WK_DENSE)
        return LQ_OK;
    double t0 = lq_now_ms();
    size_t n = (size_t)w->rows * (size_t)w->cols;
    /* One anonymous mapping with transparent huge pages where the kernel allows them: the
     * first touch of 330 MB in 4 KiB pages costs ~80K page faults (seconds in a VM), and
     * the decode stream over it misses the TLB once per 4 KiB without them. */
    size_t qbytes = (n + 63) / 64 * 64, total = qbytes + (size_t)w->rows * sizeof(float);
    /* fd -1 is what MAP_ANONYMOUS takes (cppcheck does not know) */
    /* cppcheck-suppress invalidFunctionArg */
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return lq_err_set(err, LQ_ENOMEM, "lm_head q8: cannot map %zu bytes for [%lld, %lld]",
                          total, (long long)w->rows, (long long)w->cols);
#ifdef MADV_HUGEPAGE
    madvise(map, total, MADV_HUGEPAGE);
#endif
    m->lm_q8_map = map;
    m->lm_q8_map_size = total;
    int8_t *q = map;
    float *sc = (float *)((uint8_t *)map + qbytes);
    q8_job j = {m->kern, &w->dense, q, sc, NULL, NULL, 0};
    lq_pool_for_dyn(m->pool, w->rows, 256, q8_fn, &j);
    if (j.failed)
        return lq_err_set(err, LQ_ENOMEM, "lm_head q8: out of memory for a row buffer (%lld floats)",
                          (long long)w->cols);
    uint64_t old = w->bytes;
    w->kind = LQ_WK_Q8;
    w->q8 = (lq_q8_mat){q, sc, w->rows, w->cols};
    w->bytes = (uint64_t)n + (uint64_t)w->rows * sizeof(float);
    if (m->info.bytes_per_token >= old)
        m->info.bytes_per_token = m->info.bytes_per_token - old + w->bytes;
    m->info.lm_head_q8 = 1;
    m->info.repack_bytes += w->bytes;
    m->info.repack_ms += lq_now_ms() - t0;
    return LQ_OK;
}

/* ---- the bounded lm_head's compact copy (lq_model_opts.lm_head_mode) ---- */

/* Builds the compact copy into m->lmb (the mode chose it). An allocation failure is an
 * error when the bounded head was asked for by name (asked), else the model keeps generating
 * on the exact head (lmb.failed). Callers serialise (open, or lmb.mu). */
static int lm_bound_build(lq_model *m, int asked, lq_err *err)
{
    const lq_wmat *w = &m->lm_head;
    lq_lm_bound *b = &m->lmb;
    double t0 = lq_now_ms();
    size_t n = (size_t)w->rows * (size_t)w->cols;
    size_t qbytes = (n + 63) / 64 * 64, fl = (size_t)w->rows * sizeof(float);
    size_t total = qbytes + 3 * fl;
    /* cppcheck-suppress invalidFunctionArg */
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        __atomic_store_n(&b->failed, 1, __ATOMIC_RELEASE);
        return asked ? lq_err_set(err, LQ_ENOMEM, "lm_head bounded: cannot map %zu bytes for [%lld, %lld] "
                                  "(--lm-head exact runs without the copy)",
                                  total, (long long)w->rows, (long long)w->cols)
                     : LQ_OK;
    }
#ifdef MADV_HUGEPAGE
    madvise(map, total, MADV_HUGEPAGE); /* as the q8 lm_head: fewer faults and TLB misses */
#endif
    float *sc = (float *)((uint8_t *)map + qbytes);
    /* under the weights' read lock: a 2 MB-page copy may be running (its pointers move under
     * the write lock) */
    int held = lq_model_weights_enter(m);
    lq_dense_mat src = w->dense;
    q8_job j = {m->kern, &src, map, sc, sc + w->rows, sc + 2 * w->rows, 0};
    lq_pool_for_dyn(m->pool, w->rows, 256, q8_fn, &j);
    lq_model_weights_leave(m, held);
    if (j.failed) {
        munmap(map, total);
        __atomic_store_n(&b->failed, 1, __ATOMIC_RELEASE);
        return asked ? lq_err_set(err, LQ_ENOMEM, "lm_head bounded: out of memory for a row buffer") : LQ_OK;
    }
    b->map = map;
    b->map_size = total;
    b->q8 = (lq_q8_mat){map, sc, w->rows, w->cols};
    b->err = sc + w->rows;
    b->norm = sc + 2 * w->rows;
    b->build_ms = lq_now_ms() - t0;
    __atomic_store_n(&b->ready, 1, __ATOMIC_RELEASE);
    return LQ_OK;
}

/* Chooses the lm_head mode (opts, then LQ_LM_HEAD=exact|bounded in the environment for AUTO).
 * The bounded head applies to a dense lm_head (f16/bf16/f32) without the q8 lm_head. Its copy
 * costs ~0.5 s of the pool and 330 MB on the 2B-4T head, so the default builds it on the first
 * generation, not here: opens that never generate (describe-only LQL and pg_infer sessions,
 * eval-edits, diag) pay nothing. --lm-head bounded builds it here, so that a failure is the
 * open's error and the first token's time has no build in it (BENCHMARKS.md "No slow start":
 * a background build beside the first tokens cost more than it saved). */
static int choose_lm_bound(lq_model *m, lq_err *err)
{
    int mode = m->opts.lm_head_mode, asked = mode == LQ_LM_HEAD_BOUNDED;
    if (mode == LQ_LM_HEAD_AUTO) {
        const char *e = getenv("LQ_LM_HEAD");
        mode = e && !strcmp(e, "exact") ? LQ_LM_HEAD_EXACT : LQ_LM_HEAD_BOUNDED;
    }
    const lq_wmat *w = &m->lm_head;
    if (mode != LQ_LM_HEAD_BOUNDED || m->opts.lm_head_q8 || w->kind != LQ_WK_DENSE)
        return LQ_OK;
    m->lmb.wanted = 1;
    m->info.lm_head_bounded = 1;
    m->info.lm_bound_bytes = (uint64_t)w->rows * (uint64_t)w->cols + (uint64_t)w->rows * sizeof(float);
    /* counted now, built or not: a server sizes its KV caches from what stays resident */
    m->info.repack_bytes += ((uint64_t)w->rows * (uint64_t)w->cols + 63) / 64 * 64 + 3 * (uint64_t)w->rows * sizeof(float);
    return asked ? lm_bound_build(m, 1, err) : LQ_OK;
}

int lq_model_head_wait(lq_model *m)
{
    if (!m || !m->lmb.wanted)
        return 0;
    lq_lm_bound *b = &m->lmb;
    if (lq_lmb_ready(b))
        return 1;
    pthread_mutex_lock(&b->mu);
    if (!lq_lmb_ready(b) && !__atomic_load_n(&b->failed, __ATOMIC_ACQUIRE))
        (void)lm_bound_build(m, 0, NULL); /* the default: a failure means the exact head */
    pthread_mutex_unlock(&b->mu);
    return lq_lmb_ready(b);
}

void lq_model_head_stats(const lq_model *m, lq_head_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!m)
        return;
    const lq_lm_bound *b = &m->lmb;
    out->enabled = b->wanted && !__atomic_load_n(&b->failed, __ATOMIC_ACQUIRE);
    out->ready = lq_lmb_ready(b);
    out->tokens = __atomic_load_n(&b->n_tokens, __ATOMIC_RELAXED);
    out->rows_exact = __atomic_load_n(&b->n_exact, __ATOMIC_RELAXED);
    out->full = __atomic_load_n(&b->n_full, __ATOMIC_RELAXED);
    out->gen_rescored = __atomic_load_n(&b->n_gen_rescored, __ATOMIC_RELAXED);
    out->gen_full = __atomic_load_n(&b->n_gen_full, __ATOMIC_RELAXED);
    double mu;
    __atomic_load(&b->max_uncovered, &mu, __ATOMIC_RELAXED);
    out->max_uncovered = mu;
    out->copy_bytes = m->info.lm_bound_bytes;
    out->exact_bytes = m->lm_head.bytes;
}

/* ---- the assembly step both loaders share (model_internal.h) ---- */

int lq_model_check_config(const lq_model *m, lq_err *err)
{
    if (m->n_layer < 1 || m->n_layer > LQ_MODEL_MAX_LAYERS || m->n_embd < 1 ||
        m->n_embd > LQ_MODEL_MAX_EMBD || m->n_ff < 1 || m->n_ff > LQ_MODEL_MAX_FF ||
        m->n_vocab < 1 || m->n_vocab > LQ_MODEL_MAX_VOCAB || m->n_head < 1 ||
        m->n_head > LQ_MODEL_MAX_HEADS || m->n_head_kv < 1 || m->n_head_kv > m->n_head ||
        m->n_head % m->n_head_kv || m->head_dim < 2 || m->head_dim > LQ_MODEL_MAX_HEAD_DIM ||
        m->head_dim % 2 || m->n_rot < 2 || m->n_rot > m->head_dim || m->n_rot % 2 ||
        m->n_ctx_train < 1 || m->n_ctx_train > LQ_MODEL_MAX_CTX || !(m->eps > 0) ||
        !isfinite(m->eps) || !(m->rope_theta > 0) || !isfinite(m->rope_theta))
        return lq_err_set(err, LQ_EFORMAT,
                          "configuration out of range: layers %d (1..%d), hidden %d (1..%d), ffn %d "
                          "(1..%d), vocab %d (1..%d), heads %d / kv %d (kv must divide heads, at "
                          "most %d), head_dim %d (even, 2..%d), rotated dims %d (even, 2..head_dim), "
                          "context %d (1..%d), eps %g, rope theta %g (both > 0)",
                          m->n_layer, LQ_MODEL_MAX_LAYERS, m->n_embd, LQ_MODEL_MAX_EMBD, m->n_ff,
                          LQ_MODEL_MAX_FF, m->n_vocab, LQ_MODEL_MAX_VOCAB, m->n_head, m->n_head_kv,
                          LQ_MODEL_MAX_HEADS, m->head_dim, LQ_MODEL_MAX_HEAD_DIM, m->n_rot,
                          m->n_ctx_train, LQ_MODEL_MAX_CTX, (double)m->eps, m->rope_theta);
    if ((int64_t)m->n_head * m->head_dim > LQ_MODEL_MAX_EMBD * 4)
        return lq_err_set(err, LQ_EFORMAT, "%d heads x head_dim %d is too wide", m->n_head,
                          m->head_dim);
    return LQ_OK;
}

int lq_model_new(const lq_model_opts *opts, lq_model **out, lq_err *err)
{
    *out = NULL;
    double t0 = lq_now_ms();
    lq_model_opts o = {0};
    if (opts)
        o = *opts;
    if (o.n_threads < 0 || o.n_threads > 1024)
        return lq_err_set(err, LQ_EINVAL, "n_threads %d outside [0, 1024]", o.n_threads);
    if (o.lm_head_mode < LQ_LM_HEAD_AUTO || o.lm_head_mode > LQ_LM_HEAD_BOUNDED)
        return lq_err_set(err, LQ_EINVAL, "lm_head_mode %d is not 0 (auto), 1 (exact) or 2 (bounded)",
                          o.lm_head_mode);
    if (o.act_mode != LQ_ACT_INT8 && o.act_mode != LQ_ACT_F32)
        return lq_err_set(err, LQ_EINVAL, "act_mode %d is not LQ_ACT_INT8 (0) or LQ_ACT_F32 (1)",
                          o.act_mode);
    const lq_kernels *kern = o.kernels ? lq_kernels_by_name(o.kernels) : lq_kernels_best();
    if (!kern)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "kernel set '%s' is unknown or not supported by this CPU "
                          "(scalar, avx2, avx512)",
                          o.kernels);
    if (o.kv_type < LQ_KV_F32 || o.kv_type > LQ_KV_Q8)
        return lq_err_set(err, LQ_EINVAL, "unknown KV cache type %d (f32, f16, q8)", o.kv_type);
    lq_model *m = calloc(1, sizeof *m);
    if (!m)
        return lq_err_set(err, LQ_ENOMEM, "cannot allocate a model");
    m->opts = o;
    m->opts.kernels = NULL; /* the caller's string need not outlive the call */
    {
        /* writers first: the copier's one short write must not wait behind a stream of
         * forward passes (which never nest their read locks) */
        pthread_rwlockattr_t ra;
        pthread_rwlockattr_init(&ra);
        pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&m->wlock, &ra);
        pthread_rwlockattr_destroy(&ra);
    }
    pthread_mutex_init(&m->memo_mu, NULL);
    pthread_mutex_init(&m->lmb.mu, NULL);
    m->t_open = t0;
    m->kern = kern;
    m->act_mode = o.act_mode;
    m->kv_type = o.kv_type;
    *out = m;
    return LQ_OK;
}

/* the public names of the kernels' KV element types */
_Static_assert((int)LQ_KV_F32 == (int)LQ_KVT_F32 && (int)LQ_KV_F16 == (int)LQ_KVT_F16 && (int)LQ_KV_Q8 == (int)LQ_KVT_Q8,
               "lq_kv_type and the kernels' KV types agree");

const char *lq_kv_type_name(int kv_type)
{
    return kv_type == LQ_KV_F16 ? "f16" : kv_type == LQ_KV_Q8 ? "q8" : "f32";
}

static void *copier_main(void *arg);

static void info_from_config(lq_model *m)
{
    lq_model_info *in = &m->info;
    in->arch_name = m->arch_name;
    in->arch = m->arch;
    in->name = m->name;
    in->n_layer = m->n_layer;
    in->n_embd = m->n_embd;
    in->n_ff = m->n_ff;
    in->n_head = m->n_head;
    in->n_head_kv = m->n_head_kv;
    in->head_dim = m->head_dim;
    in->n_vocab = m->n_vocab;
    in->n_ctx_train = m->n_ctx_train;
    in->rope_theta = m->rope_theta;
    in->norm_eps = m->eps;
}

/* The family a file's layout matches (README "Supported models"): the architecture says
 * BitNet block or llama block; a llama block whose projections are I2_S is one of the
 * bitnet.cpp-converted llama families, told apart only by their pre-tokenizer. */
static const char *family_name(const lq_model *m)
{
    if (m->arch == LQ_ARCH_BITNET_B158)
        return "bitnet-b1.58 (microsoft 2B-4T layout): relu², sub-norms, int8 activations";
    if (m->arch == LQ_ARCH_BITNET)
        return "bitnet (1bitLLM bitnet_b1_58 layout): SiLU, sub-norms, int8 activations";
    if (!m->bitlinear && m->n_layer > 0 &&
        (m->layers[0].q.src_type == LQ_GGML_TQ1_0 || m->layers[0].q.src_type == LQ_GGML_TQ2_0))
        return "llama + TQ (TriLM-style): SiLU, ternary projections decoded to f32, float activations";
    if (!m->bitlinear)
        return "llama: SiLU, dense projections, float activations";
    const char *pre = NULL;
    uint64_t n = 0;
    if (m->gguf && lq_gguf_find_key(m->gguf, "tokenizer.ggml.pre") >= 0)
        (void)lq_gguf_get_str(m->gguf, "tokenizer.ggml.pre", &pre, &n, NULL);
    if (pre && n == 7 && !memcmp(pre, "falcon3", 7))
        return "llama+I2_S (tiiuae Falcon3-1.58bit layout): SiLU, no sub-norms, int8 activations";
    if (pre && n == 8 && !memcmp(pre, "falcon_e", 8))
        return "llama+I2_S (tiiuae Falcon-E layout): SiLU, no sub-norms, int8 activations";
    return "llama+I2_S (HF1BitLLM Llama3-8B-1.58 layout): SiLU, no sub-norms, int8 activations";
}

int lq_model_finish(lq_model *m, lq_err *err)
{
    int rc;
    lq_model_info *in = &m->info;
    info_from_config(m);
    /* A llama-arch file with I2_S projections came from bitnet.cpp's converter (llama-quantize
     * to I2_S): its matmuls take int8 activations quantised per token (the fork's I8_S vec-dot
     * type), which is also how those models were trained (transformers' BitLinear). */
    /* (a model of no layers - a bare head, as tests build - has no projection to ask) */
    int i2s = m->n_layer > 0 && m->layers && m->layers[0].q.src_type == LQ_GGML_I2_S;
    m->bitlinear = m->arch != LQ_ARCH_LLAMA || i2s;
    in->bitlinear = m->bitlinear;
    in->family = family_name(m);
    in->i2s_layout = i2s
                         ? "x86 (128-element blocks of 32 bytes, f32 scale at n/4; assumed: ARM "
                           "64-element files cannot be told apart)"
                         : "";
    in->lm_head_type = m->lm_head.src_type;
    uint64_t bpt = m->lm_head.bytes;
    for (int l = 0; l < m->n_layer; l++) {
        const lq_layer *L = &m->layers[l];
        bpt += L->q.bytes + L->k.bytes + L->v.bytes + L->o.bytes + L->gate.bytes + L->up.bytes +
               L->down.bytes;
    }
    in->bytes_per_token = bpt;
    int nt = m->opts.n_threads ? m->opts.n_threads : lq_cpu_count();
    if ((rc = lq_pool_create(nt, &m->pool, err)) != 0)
        return rc;
    in->kernels = m->kern->name;
    in->n_threads = lq_pool_threads(m->pool);
    in->kv_type = m->kv_type;
    if (m->kv_type == LQ_KV_Q8 && m->head_dim % LQ_KV_Q8_BLOCK)
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "a q8 KV cache needs a head dimension that is a multiple of %d (this model: %d); "
                          "use f16 or f32",
                          LQ_KV_Q8_BLOCK, m->head_dim);
    if (m->opts.lm_head_q8 && (rc = build_lm_q8(m, err)) != 0)
        return rc;
    if (m->opts.ffn_url && *m->opts.ffn_url) {
        /* the opts' pointer is the caller's: the remote keeps its own copy of the URL */
        if ((rc = lq_ffn_remote_open(m->opts.ffn_url, m->opts.ffn_timeout_ms, m->n_layer, m->n_embd, &m->ffn_remote,
                                     err)) != 0)
            return rc;
        in->ffn_url = lq_ffn_remote_url(m->ffn_remote);
    }
    m->opts.ffn_url = NULL;
    /* the weight copy's state is set before any other thread of this model exists (the
     * bounded head's build reads it, and takes the weights lock while a copy runs) */
    if (m->copy_path) {
        in->weights_copied = 1; /* chosen; lq_model_weights_copied says when it is in use */
        __atomic_store_n(&m->copy_state, LQ_COPY_RUNNING, __ATOMIC_RELEASE);
        if (pthread_create(&m->copier, NULL, copier_main, m) == 0)
            m->copier_started = 1;
        else
            __atomic_store_n(&m->copy_state, LQ_COPY_FAILED, __ATOMIC_RELEASE);
    }
    if ((rc = choose_lm_bound(m, err)) != 0)
        return rc;
    in->load_ms = lq_now_ms() - m->t_open;
    return LQ_OK;
}

/* Parameters and mapped bytes of a GGUF model: every tensor of the file. */
static void gguf_info(lq_model *m)
{
    lq_model_info *in = &m->info;
    in->tied_embeddings = lq_gguf_find_tensor(m->gguf, "output.weight") == NULL;
    in->embd_type = lq_gguf_find_tensor(m->gguf, "token_embd.weight")->type;
    in->proj_type = m->layers[0].q.src_type;
    uint64_t np = 0, wb = 0;
    for (int64_t i = 0; i < lq_gguf_n_tensors(m->gguf); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(m->gguf, i);
        np += t->n_elements;
        wb += t->n_bytes;
    }
    in->n_params = np;
    in->weight_bytes = wb;
}

/* With opts.hugepages the GGUF is also read into anonymous memory backed by 2 MB pages
 * (core/mapfile.h says why), in the background: the model opens on the file's read-only
 * mapping, so that the first token does not wait for a copy of the whole file (0.3 s for
 * the 2B-4T shape when the kernel has free 2 MB pages, several seconds when it must compact
 * memory first), and moves to the copy when it is complete and equal to the mapping. */
static int want_hugepage_copy(const lq_model_opts *o, const char *path)
{
    struct stat st;
    uint64_t size = stat(path, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
    /* with a remote FFN (ffn_url) the FFN weights are never read here: auto maps the file,
     * so that their pages are not copied into memory */
    int mode = o->hugepages == 0 && o->ffn_url && *o->ffn_url ? -1 : o->hugepages;
    return lq_want_huge_copy(mode, size);
}

static const void *rebased(const void *p, const uint8_t *from, uint64_t size, const uint8_t *to)
{
    const uint8_t *q = p;
    return q && q >= from && q < from + size ? to + (q - from) : p;
}

/* Every weight pointer that points into [from, from + size) moves to the same offset in to. */
static void rebase_weights(lq_model *m, const uint8_t *from, uint64_t size, const uint8_t *to)
{
#define RB(field) (field) = rebased((field), from, size, to)
#define RBW(w)                                                                                     \
    do {                                                                                           \
        RB((w).i2s.data);                                                                          \
        RB((w).tq.data);                                                                           \
        RB((w).dense.data);                                                                        \
    } while (0)
    for (int l = 0; l < m->n_layer; l++) {
        lq_layer *L = &m->layers[l];
        RB(L->attn_norm);
        RB(L->attn_sub_norm);
        RB(L->ffn_norm);
        RB(L->ffn_sub_norm);
        RBW(L->q);
        RBW(L->k);
        RBW(L->v);
        RBW(L->o);
        RBW(L->gate);
        RBW(L->up);
        RBW(L->down);
    }
    RB(m->embd.data);
    RB(m->output_norm);
    RBW(m->lm_head);
#undef RBW
#undef RB
}

static void *copier_main(void *arg)
{
    lq_model *m = arg;
    lq_mapfile cp = {0};
    lq_err e = {0};
    uint64_t size = 0;
    const uint8_t *base = lq_gguf_bytes(m->gguf, &size);
    /* the same file as the mapping the model was read from, unchanged since (replaced or
     * rewritten in between: the model stays on its mapping) */
    struct stat st;
    int ok = lq_mapfile_open_copy(&cp, m->copy_path, &m->copy_cancel, &e) == LQ_OK && cp.data && cp.size == size &&
             stat(m->copy_path, &st) == 0 && st.st_dev == m->copy_st.st_dev && st.st_ino == m->copy_st.st_ino &&
             st.st_size == m->copy_st.st_size && st.st_mtim.tv_sec == m->copy_st.st_mtim.tv_sec &&
             st.st_mtim.tv_nsec == m->copy_st.st_mtim.tv_nsec;
    if (!ok) {
        lq_mapfile_close(&cp);
        __atomic_store_n(&m->copy_state, LQ_COPY_FAILED, __ATOMIC_RELEASE);
        return NULL;
    }
    pthread_rwlock_wrlock(&m->wlock);
    rebase_weights(m, base, size, cp.data);
    m->hp_copy = cp;
    pthread_rwlock_unlock(&m->wlock);
    __atomic_store_n(&m->copy_state, LQ_COPY_DONE, __ATOMIC_RELEASE);
    /* the forward passes so far mapped the file's pages into this process: let them go (they
     * stay in the page cache; a read that still comes here faults them back) */
    uintptr_t lo = ((uintptr_t)base + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)base + size) & ~(uintptr_t)4095;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return NULL;
}

int lq_model_weights_enter(const lq_model *m)
{
    if (__atomic_load_n(&m->copy_state, __ATOMIC_ACQUIRE) != LQ_COPY_RUNNING)
        return 0; /* no copy, or its pointers were published before the state */
    pthread_rwlock_rdlock((pthread_rwlock_t *)&m->wlock);
    return 1;
}

void lq_model_weights_leave(const lq_model *m, int held)
{
    if (held)
        pthread_rwlock_unlock((pthread_rwlock_t *)&m->wlock);
}

int lq_model_weights_copied(lq_model *m, int wait)
{
    if (!m)
        return 0;
    if (wait && m->copier_started) {
        pthread_join(m->copier, NULL);
        m->copier_started = 0;
    }
    return __atomic_load_n(&m->copy_state, __ATOMIC_ACQUIRE) == LQ_COPY_DONE;
}

int lq_model_open_gguf(const char *path, const lq_model_opts *opts, lq_model **out, lq_err *err)
{
    if (!path || !out)
        return lq_err_set(err, LQ_EINVAL, "lq_model_open_gguf: path and out are required");
    lq_model *m;
    int rc = lq_model_new(opts, &m, err);
    if (rc)
        return rc;
    if (want_hugepage_copy(&m->opts, path) && stat(path, &m->copy_st) == 0 && !(m->copy_path = strdup(path))) {
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
        goto fail;
    }
    rc = lq_gguf_open(path, &m->gguf, err);
    if (rc != 0)
        goto fail;

    const char *s;
    uint64_t len;
    rc = lq_gguf_get_str(m->gguf, "general.architecture", &s, &len, err);
    if (rc != 0)
        goto fail;
    if (len >= sizeof m->arch_name)
        len = sizeof m->arch_name - 1;
    memcpy(m->arch_name, s, len);
    m->arch_name[len] = 0;
    if (!strcmp(m->arch_name, "bitnet-b1.58") || !strcmp(m->arch_name, "bitnet-25"))
        m->arch = LQ_ARCH_BITNET_B158;
    else if (!strcmp(m->arch_name, "bitnet"))
        m->arch = LQ_ARCH_BITNET;
    else if (!strcmp(m->arch_name, "llama"))
        m->arch = LQ_ARCH_LLAMA;
    else {
        rc = lq_err_set(err, LQ_EUNSUPPORTED,
                        "unsupported architecture '%s' (supported: bitnet-b1.58, bitnet, llama)",
                        m->arch_name);
        goto fail;
    }
    /* RoPE pairing. BitNet: NEOX (pairs (i, i+n_rot/2)) — microsoft's converter keeps HF's
     * rotate_half layout and every BitNet runtime (the ggml fork, bitnet.c) uses NEOX.
     * llama: llama.cpp's rope type NORM (adjacent pairs (2i, 2i+1)); its converters permute
     * HF q/k rows so that NORM is right, and llama2.c-trained models (stories260K) were
     * trained with adjacent pairs. Checked against stories260K's golden logits: NORM matches
     * llama2.c to 6e-6, NEOX is off by up to 3.3 and its greedy text diverges at position 10
     * (tests/conformance/test_llama_conformance.c). */
    m->rope_neox = m->arch != LQ_ARCH_LLAMA;

    if (lq_gguf_find_key(m->gguf, "general.name") >= 0 &&
        lq_gguf_get_str(m->gguf, "general.name", &s, &len, NULL) == 0) {
        if (len >= sizeof m->name)
            len = sizeof m->name - 1;
        memcpy(m->name, s, len);
        m->name[len] = 0;
    }

    if ((rc = read_config(m, err)) != 0 || (rc = load_tensors(m, err)) != 0)
        goto fail;

    if (lq_gguf_find_key(m->gguf, "tokenizer.ggml.model") >= 0) {
        rc = lq_tokenizer_from_gguf(m->gguf, &m->tok, err);
        if (rc != 0) {
            lq_err_prefix(err, "%s: tokenizer", path);
            goto fail;
        }
    }
    gguf_info(m);
    if ((rc = lq_model_finish(m, err)) != 0)
        goto fail;
    *out = m;
    return LQ_OK;

fail:
    if (err && rc != LQ_OK && !strstr(err->msg, path))
        lq_err_prefix(err, "%s", path);
    lq_model_close(m);
    return rc;
}

void lq_model_close(lq_model *m)
{
    if (!m)
        return;
    if (m->copier_started) { /* a short run need not wait for the rest of the copy */
        __atomic_store_n(&m->copy_cancel, 1, __ATOMIC_RELEASE);
        pthread_join(m->copier, NULL);
    }
    pthread_rwlock_destroy(&m->wlock);
    lq_model_memo_clear(m);
    pthread_mutex_destroy(&m->memo_mu);
    pthread_mutex_destroy(&m->lmb.mu);
    free(m->copy_path);
    lq_pool_free(m->pool);
    if (!m->tok_borrowed)
        lq_tokenizer_free(m->tok);
    for (int i = 0; i < m->owned.n; i++)
        free(m->owned.ptrs[i]);
    free(m->owned.ptrs);
    if (m->lm_q8_map)
        munmap(m->lm_q8_map, m->lm_q8_map_size);
    if (m->lmb.map)
        munmap(m->lmb.map, m->lmb.map_size);
    free(m->layers);
    lq_gguf_close(m->gguf);
    lq_mapfile_close(&m->hp_copy);
    if (m->src_free)
        m->src_free(m->src);
    lq_ffn_remote_close(m->ffn_remote);
    free(m);
}

const lq_model_info *lq_model_get_info(const lq_model *m) { return m ? &m->info : NULL; }
const lq_tokenizer *lq_model_tokenizer(const lq_model *m) { return m ? m->tok : NULL; }
const struct lq_gguf *lq_model_gguf(const lq_model *m) { return m ? m->gguf : NULL; }
