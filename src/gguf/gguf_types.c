/* ggml tensor types: the size table, and decoders to f32 for the types larql reads
 * (F32, F16, BF16, Q8_0, I2_S, TQ2_0, TQ1_0). The quantised layouts follow
 * bitnet-reference.md §4 and ggml's block structs; each decoder states its block layout. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/f16.h"
#include "gguf/gguf_internal.h"

typedef struct type_info {
    const char *name;
    uint32_t block;     /* elements per block */
    uint32_t size;      /* bytes per block */
    int supported;      /* decodable by lq_gguf_tensor_to_f32 */
} type_info;

/* Indexed by ggml type number; name == NULL means unknown. Sizes are ggml's
 * (ggml_type_traits): a block of `block` elements takes `size` bytes. */
static const type_info TYPES[] = {
    [LQ_GGML_F32] = {"F32", 1, 4, 1},
    [LQ_GGML_F16] = {"F16", 1, 2, 1},
    [LQ_GGML_Q4_0] = {"Q4_0", 32, 18, 0},
    [LQ_GGML_Q4_1] = {"Q4_1", 32, 20, 0},
    [LQ_GGML_Q5_0] = {"Q5_0", 32, 22, 0},
    [LQ_GGML_Q5_1] = {"Q5_1", 32, 24, 0},
    [LQ_GGML_Q8_0] = {"Q8_0", 32, 34, 1},
    [LQ_GGML_Q8_1] = {"Q8_1", 32, 36, 0},
    [LQ_GGML_Q2_K] = {"Q2_K", 256, 84, 0},
    [LQ_GGML_Q3_K] = {"Q3_K", 256, 110, 0},
    [LQ_GGML_Q4_K] = {"Q4_K", 256, 144, 0},
    [LQ_GGML_Q5_K] = {"Q5_K", 256, 176, 0},
    [LQ_GGML_Q6_K] = {"Q6_K", 256, 210, 0},
    [LQ_GGML_Q8_K] = {"Q8_K", 256, 292, 0},
    [16] = {"IQ2_XXS", 256, 66, 0},
    [17] = {"IQ2_XS", 256, 74, 0},
    [18] = {"IQ3_XXS", 256, 98, 0},
    [19] = {"IQ1_S", 256, 50, 0},
    [20] = {"IQ4_NL", 32, 18, 0},
    [21] = {"IQ3_S", 256, 110, 0},
    [22] = {"IQ2_S", 256, 82, 0},
    [23] = {"IQ4_XS", 256, 136, 0},
    [LQ_GGML_I8] = {"I8", 1, 1, 0},
    [LQ_GGML_I16] = {"I16", 1, 2, 0},
    [LQ_GGML_I32] = {"I32", 1, 4, 0},
    [LQ_GGML_I64] = {"I64", 1, 8, 0},
    [LQ_GGML_F64] = {"F64", 1, 8, 0},
    [29] = {"IQ1_M", 256, 56, 0},
    [LQ_GGML_BF16] = {"BF16", 1, 2, 1},
    [LQ_GGML_TQ1_0] = {"TQ1_0", 256, 54, 1},
    [LQ_GGML_TQ2_0] = {"TQ2_0", 256, 66, 1},
    /* I2_S: ggml's fork registers block 1 / size 1 and special-cases the size; we say
     * 4 elements per byte for the packed part, plus the trailing scale (see nbytes). */
    [LQ_GGML_I2_S] = {"I2_S", 4, 1, 1},
};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

#define I2S_BLOCK 128 /* elements per 32-byte strided block */

static const type_info *info(int type)
{
    if (type < 0 || type >= N_TYPES || !TYPES[type].name)
        return NULL;
    return &TYPES[type];
}

int lq_ggml_type_known(int type) { return info(type) != NULL; }

const char *lq_ggml_type_name(int type)
{
    const type_info *ti = info(type);
    return ti ? ti->name : "unknown";
}

int lq_ggml_type_supported(int type)
{
    const type_info *ti = info(type);
    return ti ? ti->supported : 0;
}

uint32_t lq_ggml_block_size(int type)
{
    const type_info *ti = info(type);
    return ti ? ti->block : 0;
}

uint32_t lq_ggml_type_size(int type)
{
    const type_info *ti = info(type);
    return ti ? ti->size : 0;
}

const char *lq_gguf_vtype_name(int vt)
{
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return vt >= 0 && vt <= LQ_GGUF_F64 ? names[vt] : "unknown";
}

int lq_ggml_nbytes(int type, uint64_t ne0, uint64_t n, uint64_t *out, lq_err *err)
{
    const type_info *ti = info(type);
    if (!ti)
        return lq_err_set(err, LQ_EUNSUPPORTED, "unknown ggml tensor type %d", type);
    if (ne0 == 0 || n == 0)
        return lq_err_set(err, LQ_EFORMAT, "%s tensor with zero elements (ne0 %" PRIu64
                          ", n %" PRIu64 ")", ti->name, ne0, n);
    if (type == LQ_GGML_I2_S) {
        /* The strided layout packs whole 128-element blocks; MS writes n/4 packed bytes,
         * the f32 scale and 28 bytes of padding. */
        if (n % I2S_BLOCK != 0)
            return lq_err_set(err, LQ_EFORMAT,
                              "I2_S: %" PRIu64 " elements is not a multiple of %d (strided block)",
                              n, I2S_BLOCK);
        *out = n / 4 + 32;
        return LQ_OK;
    }
    if (ne0 % ti->block != 0)
        return lq_err_set(err, LQ_EFORMAT,
                          "%s: row length %" PRIu64 " is not a multiple of the block size %u",
                          ti->name, ne0, ti->block);
    if (n % ti->block != 0)
        return lq_err_set(err, LQ_EFORMAT,
                          "%s: %" PRIu64 " elements is not a multiple of the block size %u",
                          ti->name, n, ti->block);
    uint64_t blocks = n / ti->block;
    if (blocks > UINT64_MAX / ti->size)
        return lq_err_set(err, LQ_EFORMAT, "%s: size of %" PRIu64 " elements overflows",
                          ti->name, n);
    *out = blocks * ti->size;
    return LQ_OK;
}

/* ---- I2_S packing ---- */

int lq_i2s_pack(const int8_t *trits, uint64_t n, float scale, uint8_t *out)
{
    if (!trits || !out || n % I2S_BLOCK != 0)
        return LQ_EINVAL;
    for (uint64_t i = 0; i < n; i++)
        if (trits[i] < -1 || trits[i] > 1)
            return LQ_EINVAL;
    memset(out, 0, n / 4 + 32);
    /* Block b (128 elements, 32 bytes): element j sits in byte j%32 at shift 6-2*(j/32);
     * code = trit + 1 (0:-1 1:0 2:+1). */
    for (uint64_t i = 0; i < n; i++) {
        uint64_t j = i % I2S_BLOCK;
        out[(i / I2S_BLOCK) * 32 + j % 32] |= (uint8_t)((trits[i] + 1) << (6 - 2 * (j / 32)));
    }
    uint32_t bits;
    memcpy(&bits, &scale, 4);
    lq_wr_u32(out + n / 4, bits);
    return LQ_OK;
}

/* One TQ1_0 byte from its k base-3 digits (most significant first, each 0..2) as llama.cpp's
 * quantize_row_tq1_0 stores it: the value v (times 3 for the 4-digit qh bytes, so that the
 * digits sit at the same positions) as ceil(v * 256 / 243). */
static uint8_t tq1_byte(const int8_t *t, int k, int stride)
{
    int v = 0;
    for (int n = 0; n < k; n++)
        v = v * 3 + (t[n * stride] + 1);
    if (k == 4)
        v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

int lq_tq_pack(int type, const int8_t *trits, uint64_t n, const float *d, uint8_t *out)
{
    if (!trits || !out || n % 256 != 0 || (type != LQ_GGML_TQ1_0 && type != LQ_GGML_TQ2_0))
        return LQ_EINVAL;
    for (uint64_t i = 0; i < n; i++)
        if (trits[i] < -1 || trits[i] > 1)
            return LQ_EINVAL;
    const size_t bb = type == LQ_GGML_TQ2_0 ? 66 : 54;
    for (uint64_t b = 0; b < n / 256; b++) {
        const int8_t *t = trits + b * 256;
        uint8_t *blk = out + b * bb;
        memset(blk, 0, bb);
        if (type == LQ_GGML_TQ2_0) {
            /* element e in qs[(e/128)*32 + e%32] at shift 2*((e%128)/32), code trit+1 */
            for (int e = 0; e < 256; e++)
                blk[(e / 128) * 32 + e % 32] |= (uint8_t)((t[e] + 1) << (2 * ((e % 128) / 32)));
        } else {
            /* qs[m] (m<32): elements n*32+m; qs[32+m] (m<16): 160+n*16+m; qh[m]: 240+n*4+m */
            for (int m = 0; m < 32; m++)
                blk[m] = tq1_byte(t + m, 5, 32);
            for (int m = 0; m < 16; m++)
                blk[32 + m] = tq1_byte(t + 160 + m, 5, 16);
            for (int m = 0; m < 4; m++)
                blk[48 + m] = tq1_byte(t + 240 + m, 4, 4);
        }
        uint16_t h = lq_f32_to_f16(d ? d[b] : 1.0f);
        blk[bb - 2] = (uint8_t)h;
        blk[bb - 1] = (uint8_t)(h >> 8);
    }
    return LQ_OK;
}

int lq_i2s_get(const uint8_t *packed, uint64_t i)
{
    static const int8_t map[4] = {-1, 0, 1, 0}; /* code 3 is never written: read it as 0 */
    uint64_t j = i % I2S_BLOCK;
    uint8_t b = packed[(i / I2S_BLOCK) * 32 + j % 32];
    return map[(b >> (6 - 2 * (j / 32))) & 3];
}

/* Rows padded to whole blocks (see larql/gguf.h). A row starting at a multiple of 32 elements
 * (every row when cols % 32 == 0, as for 1bitLLM 3B's 8640) is gathered a byte at a time:
 * with the row starting 32*s elements into source block b, the destination byte p of a block
 * holds groups s..3 of block b's byte p and groups 0..s-1 of block b+1's byte p, in order,
 * i.e. (src_b[p] << 2s | src_b+1[p] >> (8 - 2s)). Everything else goes element by element. */
static uint8_t i2s_code(const uint8_t *packed, uint64_t i)
{
    uint64_t j = i % I2S_BLOCK;
    return (uint8_t)((packed[(i / I2S_BLOCK) * 32 + j % 32] >> (6 - 2 * (j / 32))) & 3);
}

uint64_t lq_i2s_padded_cols(uint64_t cols)
{
    return (cols + I2S_BLOCK - 1) / I2S_BLOCK * I2S_BLOCK;
}

void lq_i2s_repack_rows(const uint8_t *flat, uint64_t rows, uint64_t cols, uint8_t *dst)
{
    const uint64_t pc = lq_i2s_padded_cols(cols);
    for (uint64_t r = 0; r < rows; r++) {
        const uint64_t base = r * cols;
        uint8_t *out = dst + r * (pc / 4);
        memset(out, 0x55, pc / 4); /* code 1 = trit 0 in every slot of the padding */
        uint64_t e = 0;
        if (base % 32 == 0) {
            const unsigned s = (unsigned)(base % I2S_BLOCK / 32);
            const uint8_t *src = flat + base / I2S_BLOCK * 32;
            for (; e + I2S_BLOCK <= cols; e += I2S_BLOCK, src += 32, out += 32) {
                if (s == 0) {
                    memcpy(out, src, 32);
                    continue;
                }
                for (int p = 0; p < 32; p++)
                    out[p] = (uint8_t)(src[p] << (2 * s) | src[32 + p] >> (8 - 2 * s));
            }
            out = dst + r * (pc / 4);
        }
        for (; e < cols; e++) { /* the row's last partial block, or an unaligned row */
            uint64_t j = e % I2S_BLOCK;
            uint8_t *b = out + (e / I2S_BLOCK) * 32 + j % 32;
            const unsigned sh = 6 - 2 * (unsigned)(j / 32);
            *b = (uint8_t)((*b & ~(3u << sh)) | (unsigned)i2s_code(flat, base + e) << sh);
        }
    }
}

void lq_i2s_flatten_rows(const uint8_t *padded, uint64_t rows, uint64_t cols, uint8_t *flat)
{
    const uint64_t pc = lq_i2s_padded_cols(cols), n = rows * cols;
    memset(flat, 0, n / 4);
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t e = 0; e < cols; e++) {
            uint64_t i = r * cols + e, j = i % I2S_BLOCK;
            flat[(i / I2S_BLOCK) * 32 + j % 32] |= (uint8_t)(i2s_code(padded, r * pc + e) << (6 - 2 * (j / 32)));
        }
}

/* ---- decoders ---- */

int lq_gguf_tq_mult(const lq_gguf *g, const char *wname, float *mult, lq_err *err)
{
    *mult = 1.0f;
    char sname[LQ_GGUF_MAX_NAME + 16];
    size_t n = strlen(wname);
    const char *suffix = ".weight";
    size_t sl = strlen(suffix);
    if (n < sl || strcmp(wname + n - sl, suffix) != 0 || n - sl + 7 >= sizeof sname)
        return LQ_OK;
    memcpy(sname, wname, n - sl);
    memcpy(sname + n - sl, ".scale", 7);
    const lq_gguf_tensor *s = lq_gguf_find_tensor(g, sname);
    if (!s)
        return LQ_OK;
    if (s->type != LQ_GGML_F32 || s->n_elements != 1)
        return lq_err_set(err, LQ_EFORMAT, "%s: expected one F32 value, got %llu of %s", sname,
                          (unsigned long long)s->n_elements, lq_ggml_type_name(s->type));
    memcpy(mult, s->data, sizeof *mult);
    if (!isfinite(*mult))
        return lq_err_set(err, LQ_EFORMAT, "%s: scale is not finite", sname);
    return LQ_OK;
}

int lq_gguf_i2s_scale(const lq_gguf_tensor *t, float *out, lq_err *err)
{
    if (!t || !out)
        return lq_err_set(err, LQ_EINVAL, "i2s_scale: NULL argument");
    if (t->type != LQ_GGML_I2_S)
        return lq_err_set(err, LQ_EINVAL, "tensor '%s' is %s, not I2_S", t->name,
                          lq_ggml_type_name(t->type));
    if (t->n_bytes < t->n_elements / 4 + 4)
        return lq_err_set(err, LQ_EFORMAT, "tensor '%s': I2_S scale past its %" PRIu64 " bytes",
                          t->name, t->n_bytes);
    *out = lq_rd_f32(t->data + t->n_elements / 4);
    return LQ_OK;
}

/* Decodes elements [start, start+count) of t; for block types start and count are
 * multiples of the block size (the caller checks). */
static void decode_range(const lq_gguf_tensor *t, uint64_t start, uint64_t count, float *out,
                         float i2s_scale)
{
    const uint8_t *d = t->data;
    switch (t->type) {
    case LQ_GGML_F32:
        for (uint64_t i = 0; i < count; i++)
            out[i] = lq_rd_f32(d + 4 * (start + i));
        break;
    case LQ_GGML_F16:
        for (uint64_t i = 0; i < count; i++)
            out[i] = lq_f16_to_f32(lq_rd_u16(d + 2 * (start + i)));
        break;
    case LQ_GGML_BF16:
        for (uint64_t i = 0; i < count; i++)
            out[i] = lq_bf16_to_f32(lq_rd_u16(d + 2 * (start + i)));
        break;
    case LQ_GGML_Q8_0: /* block {f16 d; int8 qs[32]}: value = qs[j] * d */
        for (uint64_t b = 0; b < count / 32; b++) {
            const uint8_t *blk = d + (start / 32 + b) * 34;
            float scale = lq_f16_to_f32(lq_rd_u16(blk));
            for (int j = 0; j < 32; j++)
                out[b * 32 + j] = (float)(int8_t)blk[2 + j] * scale;
        }
        break;
    case LQ_GGML_I2_S:
        for (uint64_t i = 0; i < count; i++)
            out[i] = (float)lq_i2s_get(d, start + i) * i2s_scale;
        break;
    case LQ_GGML_TQ2_0:
        /* block {uint8 qs[64]; f16 d} (66 bytes, 256 elements): element e lives in
         * qs[(e/128)*32 + e%32] at bits 2*((e%128)/32), LSB first; value (code-1)*d. */
        for (uint64_t b = 0; b < count / 256; b++) {
            const uint8_t *blk = d + (start / 256 + b) * 66;
            float scale = lq_f16_to_f32(lq_rd_u16(blk + 64));
            float *o = out + b * 256;
            for (int e = 0; e < 256; e++) {
                int code = (blk[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                o[e] = (float)(code - 1) * scale;
            }
        }
        break;
    case LQ_GGML_TQ1_0: {
        /* block {uint8 qs[48]; uint8 qh[4]; f16 d} (54 bytes, 256 elements), base-3 digits
         * stored as ceil(q*256/243): trit n of a byte is ((uint8)(byte*3^n) * 3) >> 8.
         * qs[m] (m<32) holds elements n*32+m (n<5); qs[32+m] (m<16) holds 160+n*16+m;
         * qh[m] (m<4) holds 240+n*4+m (n<4). */
        static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
        for (uint64_t b = 0; b < count / 256; b++) {
            const uint8_t *blk = d + (start / 256 + b) * 54;
            float scale = lq_f16_to_f32(lq_rd_u16(blk + 52));
            float *o = out + b * 256;
            for (int n = 0; n < 5; n++)
                for (int m = 0; m < 32; m++) {
                    uint8_t q = (uint8_t)(blk[m] * pow3[n]);
                    o[n * 32 + m] = (float)((int)((q * 3) >> 8) - 1) * scale;
                }
            for (int n = 0; n < 5; n++)
                for (int m = 0; m < 16; m++) {
                    uint8_t q = (uint8_t)(blk[32 + m] * pow3[n]);
                    o[160 + n * 16 + m] = (float)((int)((q * 3) >> 8) - 1) * scale;
                }
            for (int n = 0; n < 4; n++)
                for (int m = 0; m < 4; m++) {
                    uint8_t q = (uint8_t)(blk[48 + m] * pow3[n]);
                    o[240 + n * 4 + m] = (float)((int)((q * 3) >> 8) - 1) * scale;
                }
        }
        break;
    }
    default:
        break;
    }
}

static int check_decodable(const lq_gguf_tensor *t, lq_err *err)
{
    if (!lq_ggml_type_supported(t->type))
        return lq_err_set(err, LQ_EUNSUPPORTED, "tensor '%s': cannot decode type %s (%d)",
                          t->name, lq_ggml_type_name(t->type), t->type);
    /* The tensor may come from a caller rather than the reader: re-check its size. */
    uint64_t need;
    int rc = lq_ggml_nbytes(t->type, t->ne[0], t->n_elements, &need, err);
    if (rc)
        return lq_err_prefix(err, "tensor '%s'", t->name);
    if (t->type == LQ_GGML_I2_S)
        need = t->n_elements / 4 + 4;
    if (t->n_bytes < need || !t->data)
        return lq_err_set(err, LQ_EFORMAT, "tensor '%s': %" PRIu64 " bytes, needs %" PRIu64,
                          t->name, t->n_bytes, need);
    return LQ_OK;
}

int lq_gguf_tensor_to_f32(const lq_gguf_tensor *t, float *out, lq_err *err)
{
    if (!t || !out)
        return lq_err_set(err, LQ_EINVAL, "tensor_to_f32: NULL argument");
    int rc = check_decodable(t, err);
    if (rc)
        return rc;
    float scale = 0;
    if (t->type == LQ_GGML_I2_S && (rc = lq_gguf_i2s_scale(t, &scale, err)) != 0)
        return rc;
    decode_range(t, 0, t->n_elements, out, scale);
    return LQ_OK;
}

int lq_gguf_tensor_row_f32(const lq_gguf_tensor *t, uint64_t r, float *out, lq_err *err)
{
    if (!t || !out)
        return lq_err_set(err, LQ_EINVAL, "tensor_row_f32: NULL argument");
    int rc = check_decodable(t, err);
    if (rc)
        return rc;
    uint64_t ne0 = t->ne[0], rows = t->n_elements / ne0;
    if (r >= rows)
        return lq_err_set(err, LQ_ERANGE, "tensor '%s': row %" PRIu64 " out of range (%" PRIu64
                          " rows)", t->name, r, rows);
    /* Block types: nbytes already required ne0 % block == 0, so rows are block-aligned.
     * I2_S blocks may straddle rows (ne0 % 128 != 0); decode_range reads it per element. */
    float scale = 0;
    if (t->type == LQ_GGML_I2_S && (rc = lq_gguf_i2s_scale(t, &scale, err)) != 0)
        return rc;
    decode_range(t, r * ne0, ne0, out, scale);
    return LQ_OK;
}
