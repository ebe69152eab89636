/* Hugging Face model folder -> GGUF (include/larql/safetensors.h says what is converted how).
 *
 * The output is what the GGUF route holds for the same weights: the fixture generator's and
 * microsoft's converter's tensor order, names, types and metadata keys, so that a model
 * written both ways converts to identical tensors (tests/cli/safetensors.sh). Every tensor
 * the folder holds must be used (an unknown one is an error naming it: dropping weights
 * silently would change the model), and every shape is checked against config.json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/f16.h"
#include "larql/safetensors.h"
#include "model/hf_internal.h"

typedef struct hf_cfg {
    const char *arch;  /* GGUF architecture */
    int bitnet;
    int D, F, L, H, KV, V, ctx, hd;
    double eps, theta;
    int tied;          /* 1 tied, 0 untied, -1 not said */
} hf_cfg;

typedef struct hf_ctx {
    const char *dir;
    lq_safetensors *st;
    lq_gguf_writer *w;
    hf_cfg c;
    unsigned char *used; /* [n_tensors] */
    void **bufs;
    size_t n_bufs, cap_bufs;
    int any_f16;
    lq_err *err;
} hf_ctx;

/* ---- config.json ---- */

static int cfg_int(const json_t *j, const char *key, int required, int def, int lo, int hi, int *out,
                   lq_err *err)
{
    const json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        if (required)
            return lq_err_set(err, LQ_ENOTFOUND, "config.json: '%s' is missing", key);
        *out = def;
        return LQ_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return lq_err_set(err, LQ_ERANGE, "config.json: '%s' must be an integer in [%d, %d]", key, lo, hi);
    *out = (int)json_integer_value(v);
    return LQ_OK;
}

static int cfg_real(const json_t *j, const char *key, double def, double *out, lq_err *err)
{
    const json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return LQ_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
        return lq_err_set(err, LQ_ERANGE, "config.json: '%s' must be a finite number > 0", key);
    *out = json_number_value(v);
    return LQ_OK;
}

static int read_config(const json_t *j, hf_cfg *c, lq_err *err)
{
    const char *a = json_string_value(json_array_get(json_object_get(j, "architectures"), 0));
    const char *act = json_string_value(json_object_get(j, "hidden_act"));
    if (!a)
        return lq_err_set(err, LQ_EFORMAT, "config.json: 'architectures' must name the model class");
    if (!strcmp(a, "BitNetForCausalLM") || !strcmp(a, "BitnetForCausalLM")) {
        /* the FFN activation tells microsoft's 2B-4T (ReLU², "bitnet-b1.58") from the
         * 1bitLLM family (SiLU, the 2024 fork's "bitnet") */
        c->bitnet = 1;
        if (act && !strcmp(act, "relu2"))
            c->arch = "bitnet-b1.58";
        else if (act && !strcmp(act, "silu"))
            c->arch = "bitnet";
        else
            return lq_err_set(err, LQ_EUNSUPPORTED, "config.json: %s with hidden_act '%s' (relu2 or silu)", a,
                              act ? act : "(none)");
    } else if (!strcmp(a, "LlamaForCausalLM")) {
        c->arch = "llama";
        if (act && strcmp(act, "silu"))
            return lq_err_set(err, LQ_EUNSUPPORTED, "config.json: LlamaForCausalLM with hidden_act '%s' (silu)", act);
    } else {
        return lq_err_set(err, LQ_EUNSUPPORTED,
                          "config.json: architecture '%s' (supported: BitNetForCausalLM, LlamaForCausalLM)", a);
    }
    int rc;
    if ((rc = cfg_int(j, "hidden_size", 1, 0, 1, 1 << 16, &c->D, err)) ||
        (rc = cfg_int(j, "intermediate_size", 1, 0, 1, 1 << 20, &c->F, err)) ||
        (rc = cfg_int(j, "num_hidden_layers", 1, 0, 1, 1024, &c->L, err)) ||
        (rc = cfg_int(j, "num_attention_heads", 1, 0, 1, 1024, &c->H, err)) ||
        (rc = cfg_int(j, "num_key_value_heads", 0, c->H, 1, c->H, &c->KV, err)) ||
        (rc = cfg_int(j, "vocab_size", 0, 0, 0, 1 << 24, &c->V, err)) ||
        (rc = cfg_int(j, "max_position_embeddings", 0, 4096, 1, 1 << 22, &c->ctx, err)) ||
        (rc = cfg_int(j, "head_dim", 0, c->D / c->H, 2, 1024, &c->hd, err)) ||
        (rc = cfg_real(j, "rms_norm_eps", 1e-5, &c->eps, err)) ||
        (rc = cfg_real(j, "rope_theta", 10000.0, &c->theta, err)))
        return rc;
    if (c->H % c->KV)
        return lq_err_set(err, LQ_EFORMAT, "config.json: num_attention_heads %d is not a multiple of "
                          "num_key_value_heads %d", c->H, c->KV);
    if (c->hd <= 0 || c->hd % 2)
        return lq_err_set(err, LQ_EFORMAT, "config.json: head dimension %d must be even", c->hd);
    /* scaled RoPE (Llama 3.1's "llama3", yarn, linear ...) changes the rotation the engine
     * computes: refused rather than converted into a model that drifts at long context */
    const json_t *rs = json_object_get(j, "rope_scaling");
    if (rs && !json_is_null(rs)) {
        const char *ty = json_string_value(json_object_get(rs, "rope_type"));
        if (!ty)
            ty = json_string_value(json_object_get(rs, "type"));
        return lq_err_set(err, LQ_EUNSUPPORTED, "config.json: rope_scaling '%s' is not supported", ty ? ty : "?");
    }
    const json_t *t = json_object_get(j, "tie_word_embeddings");
    c->tied = json_is_boolean(t) ? json_is_true(t) : -1;
    return LQ_OK;
}

/* ---- tensors ---- */

static void *keep(hf_ctx *x, size_t bytes)
{
    if (x->n_bufs == x->cap_bufs) {
        size_t nc = x->cap_bufs ? x->cap_bufs * 2 : 64;
        void **p = realloc(x->bufs, nc * sizeof *p);
        if (!p)
            return NULL;
        x->bufs = p;
        x->cap_bufs = nc;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        x->bufs[x->n_bufs++] = p;
    return p;
}

static const lq_st_tensor *take(hf_ctx *x, const char *name, int required, const char *gname)
{
    const lq_st_tensor *t = lq_st_find(x->st, name);
    if (t)
        x->used[t - lq_st_tensor_at(x->st, 0)] = 1;
    else if (required)
        lq_err_set(x->err, LQ_ENOTFOUND, "%s: tensor '%s' (GGUF %s) is missing", x->dir, name, gname);
    return t;
}

static int is_float(int dt) { return dt == LQ_ST_F32 || dt == LQ_ST_F16 || dt == LQ_ST_BF16 || dt == LQ_ST_F64; }

static int check_shape(hf_ctx *x, const lq_st_tensor *t, uint64_t rows, uint64_t cols)
{
    int ok = cols ? t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols
                  : t->n_dims == 1 && t->shape[0] == rows;
    if (ok)
        return LQ_OK;
    char got[96] = "[";
    for (uint32_t d = 0; d < t->n_dims && d < 4; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", d ? ", " : "",
                 (unsigned long long)t->shape[d]);
    strcat(got, "]");
    if (cols)
        return lq_err_set(x->err, LQ_EFORMAT, "%s: shape %s, but config.json gives [%llu, %llu]", t->name, got,
                          (unsigned long long)rows, (unsigned long long)cols);
    return lq_err_set(x->err, LQ_EFORMAT, "%s: shape %s, but config.json gives [%llu]", t->name, got,
                      (unsigned long long)rows);
}

/* A norm: always F32, as every GGUF converter writes norms. */
static int add_norm(hf_ctx *x, const char *hf, const char *gg, uint64_t n)
{
    const lq_st_tensor *t = take(x, hf, 1, gg);
    if (!t)
        return LQ_ENOTFOUND;
    int rc = check_shape(x, t, n, 0);
    if (rc)
        return rc;
    if (!is_float(t->dtype))
        return lq_err_set(x->err, LQ_EUNSUPPORTED, "%s: dtype %s for a norm", hf, lq_st_dtype_name(t->dtype));
    const void *data = t->data;
    if (t->dtype != LQ_ST_F32) {
        float *f = keep(x, n * 4);
        if (!f)
            return lq_err_set(x->err, LQ_ENOMEM, "out of memory");
        for (uint64_t i = 0; i < n; i++)
            f[i] = lq_st_get_f32(t, i);
        data = f;
    }
    return lq_gguf_writer_add_tensor(x->w, gg, 1, &n, LQ_GGML_F32, data, n * 4) ? lq_err_set(x->err, LQ_ENOMEM, "out of memory") : LQ_OK;
}

/* HF -> GGUF row order for q/k (llama.cpp's permute): HF's rotate_half pairs (j, j + hd/2)
 * become adjacent rows (2j, 2j + 1), which the loader's llama RoPE rotates. */
static uint64_t src_row(uint64_t r, int n_head, uint64_t rows, int permute)
{
    if (!permute)
        return r;
    uint64_t hd = rows / (uint64_t)n_head, h = r / hd, i = r % hd;
    return h * hd + (i % 2) * (hd / 2) + i / 2;
}

/* A dense matrix [rows, cols]: F32 stays F32, F16 and BF16 become F16 (microsoft's and
 * llama.cpp's default), F64 becomes F32. permute_heads > 0 reorders q/k rows. */
static int add_dense(hf_ctx *x, const lq_st_tensor *t, const char *gg, uint64_t rows, uint64_t cols,
                     int permute_heads)
{
    int rc = check_shape(x, t, rows, cols);
    if (rc)
        return rc;
    if (!is_float(t->dtype))
        return lq_err_set(x->err, LQ_EUNSUPPORTED, "%s: dtype %s for a %s matrix", t->name,
                          lq_st_dtype_name(t->dtype), gg);
    if (permute_heads && rows % (2 * (uint64_t)permute_heads))
        return lq_err_set(x->err, LQ_EFORMAT, "%s: %llu rows do not split into %d heads of even size", t->name,
                          (unsigned long long)rows, permute_heads);
    int type = t->dtype == LQ_ST_F32 || t->dtype == LQ_ST_F64 ? LQ_GGML_F32 : LQ_GGML_F16;
    uint64_t es = type == LQ_GGML_F32 ? 4 : 2, n = rows * cols, ne[2] = {cols, rows};
    const void *data = t->data;
    int same = (t->dtype == LQ_ST_F32 && type == LQ_GGML_F32) || (t->dtype == LQ_ST_F16 && type == LQ_GGML_F16);
    if (permute_heads || !same) {
        uint8_t *out = keep(x, n * es);
        if (!out)
            return lq_err_set(x->err, LQ_ENOMEM, "%s: out of memory for %llu elements", t->name, (unsigned long long)n);
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t sr = src_row(r, permute_heads, rows, permute_heads > 0);
            if (same) { /* move the row's bytes */
                memcpy(out + r * cols * es, t->data + sr * cols * es, cols * es);
                continue;
            }
            for (uint64_t c = 0; c < cols; c++) {
                float f = lq_st_get_f32(t, sr * cols + c);
                if (type == LQ_GGML_F32) {
                    memcpy(out + (r * cols + c) * 4, &f, 4);
                    continue;
                }
                uint16_t h = lq_f32_to_f16(f);
                if (isfinite(f) && (h & 0x7c00) == 0x7c00)
                    return lq_err_set(x->err, LQ_ERANGE, "%s: value %g at [%llu, %llu] does not fit F16", t->name,
                                      (double)f, (unsigned long long)sr, (unsigned long long)c);
                memcpy(out + (r * cols + c) * 2, &h, 2);
            }
        }
        data = out;
    }
    if (type == LQ_GGML_F16)
        x->any_f16 = 1;
    return lq_gguf_writer_add_tensor(x->w, gg, 2, ne, type, data, n * es) ? lq_err_set(x->err, LQ_ENOMEM, "out of memory") : LQ_OK;
}

/* The per-tensor weight_scale of a packed BitNet weight: W = trit / s (transformers'
 * BitLinear divides its output by input_scale * weight_scale), so the I2_S multiplier is
 * 1 / s. NaN, infinite, zero or negative scales are refused. */
static int packed_scale(hf_ctx *x, const char *hf_weight, float *i2s_scale)
{
    char name[LQ_ST_MAX_NAME + 16];
    snprintf(name, sizeof name, "%s_scale", hf_weight); /* "...q_proj.weight_scale" */
    const lq_st_tensor *s = take(x, name, 0, "");
    if (!s)
        return lq_err_set(x->err, LQ_ENOTFOUND, "%s: packed uint8 weight without its '%s'", hf_weight, name);
    if (s->n_elements != 1 || !is_float(s->dtype))
        return lq_err_set(x->err, LQ_EFORMAT, "%s: expected one float, got %llu of %s", name,
                          (unsigned long long)s->n_elements, lq_st_dtype_name(s->dtype));
    float v = lq_st_get_f32(s, 0);
    if (!isfinite(v) || !(v > 0))
        return lq_err_set(x->err, LQ_EFORMAT, "%s: weight_scale %g (must be finite and > 0)", name, (double)v);
    *i2s_scale = (float)(1.0 / (double)v);
    if (!isfinite(*i2s_scale) || !(*i2s_scale > 0))
        return lq_err_set(x->err, LQ_EFORMAT, "%s: weight_scale %g has no finite f32 inverse", name, (double)v);
    return LQ_OK;
}

/* transformers' packing, uint8 [rows/4, cols]: bits 2i..2i+1 of packed row r hold output row
 * i*(rows/4) + r as code = trit + 1, the same code I2_S stores; so each I2_S block (128
 * elements of one row: element j in byte j%32 at shift 6-2*(j/32)) is gathered directly. */
static int packed_to_i2s(hf_ctx *x, const lq_st_tensor *t, uint64_t rows, uint64_t cols, float scale, uint8_t *out)
{
    uint64_t P = rows / 4, n = rows * cols;
    for (uint64_t k = 0; k < P * cols; k++) {
        uint8_t b = t->data[k];
        if (b & (b >> 1) & 0x55) { /* a 2-bit field holding 3: not a trit */
            int i = 0;
            while (((b >> (2 * i)) & 3) != 3)
                i++;
            return lq_err_set(x->err, LQ_EFORMAT, "%s: code 3 (not a trit) at packed [%llu, %llu], bits %d-%d",
                              t->name, (unsigned long long)(k / cols), (unsigned long long)(k % cols), 2 * i,
                              2 * i + 1);
        }
    }
    if (cols % 128) {
        /* rows that are not whole blocks (1bitLLM 3B's down_proj, 8640 wide): microsoft's
         * quantize_i2_s packs over the flattened tensor, so pack the trits that way */
        int8_t *trits = malloc((size_t)n);
        if (!trits)
            return lq_err_set(x->err, LQ_ENOMEM, "%s: out of memory", t->name);
        for (uint64_t o = 0; o < rows; o++) {
            unsigned sh = 2 * (unsigned)(o / P);
            const uint8_t *src = t->data + (o % P) * cols;
            for (uint64_t c = 0; c < cols; c++)
                trits[o * cols + c] = (int8_t)(((src[c] >> sh) & 3) - 1);
        }
        lq_i2s_pack(trits, n, scale, out);
        free(trits);
        return LQ_OK;
    }
    for (uint64_t o = 0; o < rows; o++) {
        unsigned sh = 2 * (unsigned)(o / P);
        const uint8_t *src = t->data + (o % P) * cols;
        uint8_t *dst = out + o * (cols / 4);
        for (uint64_t c0 = 0; c0 < cols; c0 += 128, dst += 32, src += 128)
            for (int k = 0; k < 32; k++)
                dst[k] = (uint8_t)(((src[k] >> sh) & 3) << 6 | ((src[32 + k] >> sh) & 3) << 4 |
                                   ((src[64 + k] >> sh) & 3) << 2 | ((src[96 + k] >> sh) & 3));
    }
    memcpy(out + n / 4, &scale, 4); /* then microsoft's 28 zero bytes */
    memset(out + n / 4 + 4, 0, 28);
    return LQ_OK;
}

/* absmean, as microsoft's preprocessing quantises a float master: m = mean|W| (double,
 * row-major), trit = round(W / m) clamped to [-1, 1] (round half to even: |W/m| = 0.5 is 0),
 * I2_S scale = m. */
static int absmean_trits(hf_ctx *x, const lq_st_tensor *t, uint64_t n, int8_t *trits, float *scale)
{
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        float f = lq_st_get_f32(t, i);
        if (!isfinite(f))
            return lq_err_set(x->err, LQ_EFORMAT, "%s: element %llu is not finite", t->name, (unsigned long long)i);
        sum += fabs((double)f);
    }
    double m = sum / (double)n;
    if (m < 1e-5) /* microsoft's clamp: an all-zero matrix stays zero */
        m = 1e-5;
    for (uint64_t i = 0; i < n; i++) {
        double q = (double)lq_st_get_f32(t, i) / m;
        trits[i] = (int8_t)(q > 0.5 ? 1 : q < -0.5 ? -1 : 0);
    }
    *scale = (float)m;
    return LQ_OK;
}

static int add_bitnet(hf_ctx *x, const lq_st_tensor *t, const char *gg, uint64_t rows, uint64_t cols)
{
    int rc;
    /* I2_S blocks run over the flattened tensor (rows may start inside one: the loaders pad
     * them); the tensor must be whole blocks, and rows whole bytes for a vindex */
    if (rows * cols % 128 || cols % 4)
        return lq_err_set(x->err, LQ_EFORMAT,
                          "%s: [%llu, %llu] is not whole I2_S blocks (rows x cols a multiple of 128, "
                          "cols of 4)", t->name, (unsigned long long)rows, (unsigned long long)cols);
    uint64_t n = rows * cols, ne[2] = {cols, rows};
    uint8_t *out = keep(x, n / 4 + 32);
    if (!out)
        return lq_err_set(x->err, LQ_ENOMEM, "%s: out of memory", t->name);
    float scale = 0;
    if (t->dtype == LQ_ST_U8) {
        if (rows % 4 || t->n_dims != 2 || t->shape[0] != rows / 4 || t->shape[1] != cols)
            return lq_err_set(x->err, LQ_EFORMAT, "%s: packed shape [%llu, %llu], but config.json gives [%llu/4, %llu]",
                              t->name, (unsigned long long)t->shape[0],
                              (unsigned long long)(t->n_dims > 1 ? t->shape[1] : 0), (unsigned long long)rows,
                              (unsigned long long)cols);
        if ((rc = packed_scale(x, t->name, &scale)) || (rc = packed_to_i2s(x, t, rows, cols, scale, out)))
            return rc;
    } else if (is_float(t->dtype)) {
        int8_t *trits = malloc((size_t)n);
        if (!trits)
            return lq_err_set(x->err, LQ_ENOMEM, "%s: out of memory", t->name);
        rc = check_shape(x, t, rows, cols);
        if (!rc)
            rc = absmean_trits(x, t, n, trits, &scale);
        if (!rc)
            lq_i2s_pack(trits, n, scale, out);
        free(trits);
        if (rc)
            return rc;
    } else {
        return lq_err_set(x->err, LQ_EUNSUPPORTED, "%s: dtype %s (BitNet weights are packed U8 or float)", t->name,
                          lq_st_dtype_name(t->dtype));
    }
    return lq_gguf_writer_add_tensor(x->w, gg, 2, ne, LQ_GGML_I2_S, out, n / 4 + 32) ? lq_err_set(x->err, LQ_ENOMEM, "out of memory") : LQ_OK;
}

static int add_proj(hf_ctx *x, int l, const char *hf_sub, const char *gg_sub, uint64_t rows, uint64_t cols,
                    int permute_heads)
{
    char hf[160], gg[96];
    snprintf(hf, sizeof hf, "model.layers.%d.%s.weight", l, hf_sub);
    snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, gg_sub);
    const lq_st_tensor *t = take(x, hf, 1, gg);
    if (!t)
        return LQ_ENOTFOUND;
    return x->c.bitnet ? add_bitnet(x, t, gg, rows, cols) : add_dense(x, t, gg, rows, cols, permute_heads);
}

static int add_layer(hf_ctx *x, int l)
{
    const hf_cfg *c = &x->c;
    uint64_t D = (uint64_t)c->D, F = (uint64_t)c->F, qd = (uint64_t)c->H * c->hd, kvd = (uint64_t)c->KV * c->hd;
    char hf[160], gg[96];
    int perm = !c->bitnet; /* microsoft's converter keeps HF's rotate_half rows for BitNet */
    int rc;
#define NORM(h, g, n) (snprintf(hf, sizeof hf, "model.layers.%d.%s.weight", l, h), \
                       snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, g), add_norm(x, hf, gg, n))
    if ((rc = NORM("input_layernorm", "attn_norm", D)) ||
        (rc = add_proj(x, l, "self_attn.q_proj", "attn_q", qd, D, perm ? c->H : 0)) ||
        (rc = add_proj(x, l, "self_attn.k_proj", "attn_k", kvd, D, perm ? c->KV : 0)) ||
        (rc = add_proj(x, l, "self_attn.v_proj", "attn_v", kvd, D, 0)) ||
        (c->bitnet && (rc = NORM("self_attn.attn_sub_norm", "attn_sub_norm", qd))) ||
        (rc = add_proj(x, l, "self_attn.o_proj", "attn_output", D, qd, 0)) ||
        (rc = NORM("post_attention_layernorm", "ffn_norm", D)) ||
        (rc = add_proj(x, l, "mlp.gate_proj", "ffn_gate", F, D, 0)) ||
        (rc = add_proj(x, l, "mlp.up_proj", "ffn_up", F, D, 0)) ||
        (c->bitnet && (rc = NORM("mlp.ffn_sub_norm", "ffn_sub_norm", F))) ||
        (rc = add_proj(x, l, "mlp.down_proj", "ffn_down", D, F, 0)))
        return rc;
#undef NORM
    return LQ_OK;
}

static int add_config_kv(hf_ctx *x, const char *name, int n_vocab)
{
    const hf_cfg *c = &x->c;
    lq_gguf_writer *w = x->w;
    char key[128];
    int bad = 0;
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", c->arch, s), key)
    bad |= lq_gguf_writer_add_str(w, "general.architecture", c->arch);
    bad |= lq_gguf_writer_add_str(w, "general.name", name);
    /* llama.cpp's file types: 40 MOSTLY_I2_S, 1 MOSTLY_F16, 0 ALL_F32 */
    bad |= lq_gguf_writer_add_u32(w, "general.file_type", c->bitnet ? 40 : x->any_f16 ? 1 : 0);
    bad |= lq_gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
    bad |= lq_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)c->ctx);
    bad |= lq_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)c->D);
    bad |= lq_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)c->L);
    bad |= lq_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)c->F);
    bad |= lq_gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)c->hd);
    bad |= lq_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)c->H);
    bad |= lq_gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->KV);
    bad |= lq_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->eps);
    bad |= lq_gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)c->theta);
    if (c->hd * c->H != c->D) {
        bad |= lq_gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)c->hd);
        bad |= lq_gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)c->hd);
    }
#undef KEY
    return bad ? lq_err_set(x->err, LQ_ENOMEM, "out of memory") : LQ_OK;
}

static int convert(hf_ctx *x, const json_t *config, const char *name)
{
    hf_cfg *c = &x->c;
    int rc;
    const lq_st_tensor *emb = take(x, "model.embed_tokens.weight", 1, "token_embd.weight");
    if (!emb)
        return LQ_ENOTFOUND;
    if (emb->n_dims != 2 || emb->shape[1] != (uint64_t)c->D)
        return check_shape(x, emb, emb->shape[0], (uint64_t)c->D);
    if (emb->shape[0] < 1 || emb->shape[0] > (1u << 24))
        return lq_err_set(x->err, LQ_ERANGE, "%s: %llu rows", emb->name, (unsigned long long)emb->shape[0]);
    int V = (int)emb->shape[0];
    if (c->V && c->V != V)
        return lq_err_set(x->err, LQ_EFORMAT, "config.json: vocab_size %d, but model.embed_tokens.weight has %d rows",
                          c->V, V);
    const lq_st_tensor *head = lq_st_find(x->st, "lm_head.weight");
    int untied = c->tied == 0 || (c->tied < 0 && head);
    if (untied && !head)
        return lq_err_set(x->err, LQ_ENOTFOUND, "%s: tie_word_embeddings is false but lm_head.weight is missing",
                          x->dir);
    if (head && !untied)
        take(x, "lm_head.weight", 0, ""); /* tied: the copy the file carries is not needed */

    /* metadata first (the writer keeps insertion order); the tensors decide file_type, so it
     * is computed from the dtypes up front */
    for (int64_t i = 0; i < lq_st_n_tensors(x->st); i++) {
        int dt = lq_st_tensor_at(x->st, i)->dtype;
        if (!c->bitnet && lq_st_tensor_at(x->st, i)->n_dims == 2 && (dt == LQ_ST_F16 || dt == LQ_ST_BF16))
            x->any_f16 = 1;
    }
    /* the vocabulary is padded to the embedding's rows, so <arch>.vocab_size is V either way */
    int n_tok = 0;
    if ((rc = add_config_kv(x, name, V)) || (rc = hf_tokenizer_to_gguf(x->w, x->dir, config, V, &n_tok, x->err)))
        return rc;

    if ((rc = add_dense(x, emb, "token_embd.weight", (uint64_t)V, (uint64_t)c->D, 0)) ||
        (rc = add_norm(x, "model.norm.weight", "output_norm.weight", (uint64_t)c->D)))
        return rc;
    if (untied && (rc = add_dense(x, head, "output.weight", (uint64_t)V, (uint64_t)c->D, 0)))
        return rc;
    for (int l = 0; l < c->L; l++)
        if ((rc = add_layer(x, l)))
            return rc;
    for (int64_t i = 0; i < lq_st_n_tensors(x->st); i++) {
        const char *n = lq_st_tensor_at(x->st, i)->name, *sfx = "rotary_emb.inv_freq";
        size_t nl = strlen(n), sl = strlen(sfx);
        if (!x->used[i] && !(nl >= sl && !strcmp(n + nl - sl, sfx))) /* a buffer, not a weight */
            return lq_err_set(x->err, LQ_EFORMAT, "%s: tensor '%s' (%s) is not part of a %d-layer %s model", x->dir,
                              n, lq_st_tensor_at(x->st, i)->file, c->L, c->arch);
    }
    return LQ_OK;
}

int lq_hf_to_gguf(const char *hf_dir, const char *out_path, const lq_hf_convert_opts *opts, lq_err *err)
{
    if (!hf_dir || !out_path)
        return lq_err_set(err, LQ_EINVAL, "lq_hf_to_gguf: hf_dir and out_path are required");
    hf_ctx x = {.dir = hf_dir, .err = err};
    json_t *config = NULL;
    char base[256];
    int rc = hf_load_json(hf_dir, "config.json", 0, &config, err);
    if (!rc && !config)
        rc = lq_err_set(err, LQ_ENOTFOUND, "%s: config.json is missing", hf_dir);
    if (!rc)
        rc = read_config(config, &x.c, err);
    if (!rc)
        rc = lq_st_open_dir(hf_dir, &x.st, err);
    if (!rc && !(x.used = calloc((size_t)lq_st_n_tensors(x.st) + 1, 1)))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc && !(x.w = lq_gguf_writer_create()))
        rc = lq_err_set(err, LQ_ENOMEM, "out of memory");
    if (!rc) {
        /* general.name: the caller's, else the folder's name (what llama.cpp's converter uses) */
        const char *name = opts && opts->name ? opts->name : NULL;
        if (!name) {
            size_t l = strlen(hf_dir);
            while (l > 1 && hf_dir[l - 1] == '/')
                l--;
            size_t s = l;
            while (s > 0 && hf_dir[s - 1] != '/')
                s--;
            snprintf(base, sizeof base, "%.*s", (int)(l - s), hf_dir + s);
            name = base;
        }
        rc = convert(&x, config, name);
    }
    if (!rc)
        rc = lq_gguf_writer_write(x.w, out_path, err);
    if (rc && err && !strstr(err->msg, hf_dir))
        lq_err_prefix(err, "%s", hf_dir);
    lq_gguf_writer_free(x.w);
    for (size_t i = 0; i < x.n_bufs; i++)
        free(x.bufs[i]);
    free(x.bufs);
    free(x.used);
    lq_st_close(x.st);
    json_decref(config);
    return rc;
}
