/* GGUF reader/writer: type table, I2_S packing, decoders, metadata round trips, typed
 * getters, byte-identical rewrite, truncation at every byte, and the shared conformance
 * files (skipped when ../shared/conformance is absent). */
#include <dirent.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "core/f16.h"
#include "harness.h"
#include "larql/gguf.h"

/* ---- a tiny byte builder for hand-made GGUFs ---- */

typedef struct bb {
    uint8_t b[4096];
    size_t n;
} bb;

static void bb_u32(bb *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b->b[b->n++] = (uint8_t)(v >> (8 * i));
}
static void bb_u64(bb *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b->b[b->n++] = (uint8_t)(v >> (8 * i));
}
static void bb_str(bb *b, const char *s)
{
    size_t n = strlen(s);
    bb_u64(b, n);
    memcpy(b->b + b->n, s, n);
    b->n += n;
}

/* Opens a heap copy of exactly len bytes, so ASan sees any read past the end. */
static int open_copy(const uint8_t *buf, size_t len, lq_gguf **g, lq_err *err, uint8_t **copy)
{
    *copy = malloc(len ? len : 1);
    memcpy(*copy, buf, len);
    return lq_gguf_open_buffer(*copy, len, g, err);
}

/* ---- type table ---- */

static void test_type_table(void)
{
    static const struct { int t; const char *name; uint32_t bs, ts; int sup; } want[] = {
        {LQ_GGML_F32, "F32", 1, 4, 1},      {LQ_GGML_F16, "F16", 1, 2, 1},
        {LQ_GGML_Q4_0, "Q4_0", 32, 18, 0},  {LQ_GGML_Q4_1, "Q4_1", 32, 20, 0},
        {LQ_GGML_Q5_0, "Q5_0", 32, 22, 0},  {LQ_GGML_Q5_1, "Q5_1", 32, 24, 0},
        {LQ_GGML_Q8_0, "Q8_0", 32, 34, 1},  {LQ_GGML_Q8_1, "Q8_1", 32, 36, 0},
        {LQ_GGML_Q2_K, "Q2_K", 256, 84, 0}, {LQ_GGML_Q3_K, "Q3_K", 256, 110, 0},
        {LQ_GGML_Q4_K, "Q4_K", 256, 144, 0}, {LQ_GGML_Q5_K, "Q5_K", 256, 176, 0},
        {LQ_GGML_Q6_K, "Q6_K", 256, 210, 0}, {LQ_GGML_Q8_K, "Q8_K", 256, 292, 0},
        {LQ_GGML_I8, "I8", 1, 1, 0},        {LQ_GGML_I16, "I16", 1, 2, 0},
        {LQ_GGML_I32, "I32", 1, 4, 0},      {LQ_GGML_I64, "I64", 1, 8, 0},
        {LQ_GGML_F64, "F64", 1, 8, 0},      {LQ_GGML_BF16, "BF16", 1, 2, 1},
        {LQ_GGML_TQ1_0, "TQ1_0", 256, 54, 1}, {LQ_GGML_TQ2_0, "TQ2_0", 256, 66, 1},
        {LQ_GGML_I2_S, "I2_S", 4, 1, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_MSG(strcmp(lq_ggml_type_name(want[i].t), want[i].name) == 0, "%s", want[i].name);
        CHECK_EQ_INT(lq_ggml_block_size(want[i].t), want[i].bs);
        CHECK_EQ_INT(lq_ggml_type_size(want[i].t), want[i].ts);
        CHECK_EQ_INT(lq_ggml_type_supported(want[i].t), want[i].sup);
    }
    CHECK(strcmp(lq_ggml_type_name(99), "unknown") == 0);
    CHECK(strcmp(lq_ggml_type_name(-1), "unknown") == 0);
    CHECK_EQ_INT(lq_ggml_block_size(99), 0);
    CHECK_EQ_INT(lq_ggml_type_size(4), 0); /* 4 and 5 were removed from ggml */
    CHECK_EQ_INT(lq_ggml_type_supported(LQ_GGML_Q4_K), 0);
}

static void test_nbytes(void)
{
    uint64_t n = 0;
    lq_err err = {0};
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_F32, 4, 12, &n, &err), LQ_OK);
    CHECK_EQ_INT(n, 48);
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_Q4_K, 512, 1024, &n, &err), LQ_OK);
    CHECK_EQ_INT(n, 4 * 144);
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_Q8_0, 64, 128, &n, &err), LQ_OK);
    CHECK_EQ_INT(n, 4 * 34);
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_I2_S, 256, 512, &n, &err), LQ_OK);
    CHECK_EQ_INT(n, 512 / 4 + 32);
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_Q8_0, 48, 96, &n, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "row length 48 is not a multiple of the block size 32");
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_I2_S, 100, 100, &n, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "100 elements is not a multiple of 128");
    /* 1bitLLM 3B's ffn_down: rows of 8640 are fine for I2_S (blocks over the flat tensor) but
     * not for llama.cpp's TQ types, whose blocks are per row (its quantiser refuses them too) */
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_I2_S, 8640, 8640 * 3200, &n, &err), LQ_OK);
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_TQ2_0, 8640, 8640 * 3200, &n, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "TQ2_0: row length 8640 is not a multiple of the block size 256");
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_TQ1_0, 8640, 8640 * 3200, &n, &err), LQ_EFORMAT);
    CHECK_EQ_INT(lq_ggml_nbytes(99, 1, 1, &n, &err), LQ_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err.msg, "99");
    CHECK_EQ_INT(lq_ggml_nbytes(LQ_GGML_F64, 1, UINT64_MAX / 4, &n, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "overflows");
}

/* ---- I2_S packing: bitnet-reference.md §4 worked example ---- */

static void test_i2s_worked_example(void)
{
    int8_t w[128];
    memset(w, 0, sizeof w);
    w[0] = 1, w[32] = -1, w[64] = 0, w[96] = 1;
    w[1] = w[33] = w[65] = w[97] = -1;
    w[31] = w[63] = w[95] = w[127] = 1;
    uint8_t out[64];
    memset(out, 0xee, sizeof out);
    CHECK_EQ_INT(lq_i2s_pack(w, 128, 0.0421f, out), LQ_OK);
    CHECK_EQ_INT(out[0], 0x86);
    CHECK_EQ_INT(out[1], 0x00);
    CHECK_EQ_INT(out[2], 0x55);
    CHECK_EQ_INT(out[30], 0x55);
    CHECK_EQ_INT(out[31], 0xAA);
    CHECK_EQ_INT(out[32], 0x0d);
    CHECK_EQ_INT(out[33], 0x71);
    CHECK_EQ_INT(out[34], 0x2c);
    CHECK_EQ_INT(out[35], 0x3d);
    for (int i = 36; i < 64; i++)
        CHECK_EQ_INT(out[i], 0);
    for (int i = 0; i < 128; i++)
        CHECK_EQ_INT(lq_i2s_get(out, (uint64_t)i), w[i]);
    /* code 3 (never written) reads as 0 */
    uint8_t three[32] = {0xFF};
    CHECK_EQ_INT(lq_i2s_get(three, 0), 0);
    CHECK_EQ_INT(lq_i2s_pack(w, 100, 1.0f, out), LQ_EINVAL);
    w[5] = 2;
    CHECK_EQ_INT(lq_i2s_pack(w, 128, 1.0f, out), LQ_EINVAL);
}

static void test_i2s_two_rows(void)
{
    /* [256, 2]: 128 packed bytes, row 0 = bytes 0..63, row 1 = 64..127, scale at 128. */
    int8_t w[512];
    for (int i = 0; i < 512; i++)
        w[i] = (int8_t)((i * 7 + i / 3) % 3 - 1);
    uint8_t out[512 / 4 + 32];
    CHECK_EQ_INT(lq_i2s_pack(w, 512, 2.5f, out), LQ_OK);
    float s;
    memcpy(&s, out + 128, 4);
    CHECK_NEAR(s, 2.5, 0);
    /* row 1 starts at byte 64: its element 0 is global element 256, block 2 byte 0 */
    CHECK_EQ_INT((out[64] >> 6) & 3, w[256] + 1);
    for (int i = 0; i < 512; i++)
        CHECK_EQ_INT(lq_i2s_get(out, (uint64_t)i), w[i]);
}

/* Rows that are not whole 128-blocks, packed flat (microsoft's quantize_i2_s): the repack to
 * row-padded blocks keeps every trit, pads with zero trits (code 1), and flattens back to the
 * same bytes. cols 8640 is 1bitLLM 3B's ffn width (rows start 64 elements into a block every
 * other row: the byte-shift path), 200 and 196 rows start at any multiple of 8 or 4 (the
 * element path), 384 is aligned (a plain copy). */
static void test_i2s_flat_rows_repack(void)
{
    static const uint64_t shapes[][2] = {{8640, 4}, {320, 8}, {200, 16}, {196, 32}, {384, 3}, {96, 4}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        uint64_t cols = shapes[k][0], rows = shapes[k][1], n = cols * rows;
        uint64_t pc = lq_i2s_padded_cols(cols);
        CHECK_EQ_INT((int)(pc % 128), 0);
        CHECK(pc >= cols && pc < cols + 128);
        int8_t *w = malloc(n);
        uint8_t *flat = malloc(n / 4 + 32), *pad = malloc(rows * pc / 4), *back = malloc(n / 4);
        for (uint64_t i = 0; i < n; i++)
            w[i] = (int8_t)((i * 7 + i / 5 + k) % 3 - 1);
        CHECK_EQ_INT(lq_i2s_pack(w, n, 1.0f, flat), LQ_OK);
        lq_i2s_repack_rows(flat, rows, cols, pad);
        int bad = 0;
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < pc; c++) {
                uint64_t i = r * pc + c, j = i % 128;
                int code = (pad[(i / 128) * 32 + j % 32] >> (6 - 2 * (j / 32))) & 3;
                int want = c < cols ? w[r * cols + c] + 1 : 1;
                bad += code != want;
            }
        CHECK_MSG(bad == 0, "cols %llu: %d trits differ", (unsigned long long)cols, bad);
        lq_i2s_flatten_rows(pad, rows, cols, back);
        CHECK(memcmp(back, flat, n / 4) == 0);
        free(w);
        free(flat);
        free(pad);
        free(back);
    }
}

/* ---- metadata round trip ---- */

static lq_gguf_writer *make_meta_writer(void)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -5000000000LL;
    CHECK_EQ_INT(lq_gguf_writer_add_scalar(w, "t.u8", LQ_GGUF_U8, &u8), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_scalar(w, "t.i8", LQ_GGUF_I8, &i8), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_scalar(w, "t.u16", LQ_GGUF_U16, &u16), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_scalar(w, "t.i16", LQ_GGUF_I16, &i16), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_u32(w, "t.u32", 4000000000u), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_i32(w, "t.i32", -2000000000), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_f32(w, "t.f32", 500000.0f), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_bool(w, "t.bool", 1), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_str(w, "t.str", "héllo"), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_str(w, "t.empty", ""), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_u64(w, "t.u64", UINT64_MAX), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_scalar(w, "t.i64", LQ_GGUF_I64, &i64), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_f64(w, "t.f64", 1e-300), LQ_OK);
    const char *strs[] = {"a", "", "ccc", "Ġthe"};
    CHECK_EQ_INT(lq_gguf_writer_add_arr_str(w, "t.arr.str", strs, 4), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr_str(w, "t.arr.str0", NULL, 0), LQ_OK);
    int32_t ai32[] = {1, -2, 3};
    float af32[] = {0.5f, -1.25f};
    uint8_t abool[] = {1, 0, 1};
    double af64[] = {3.5};
    uint64_t au64[] = {UINT64_MAX, 7};
    int8_t ai8[] = {-128, 127};
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.i32", LQ_GGUF_I32, ai32, 3), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.f32", LQ_GGUF_F32, af32, 2), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.bool", LQ_GGUF_BOOL, abool, 3), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.f64", LQ_GGUF_F64, af64, 1), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.u64", LQ_GGUF_U64, au64, 2), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.i8", LQ_GGUF_I8, ai8, 2), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.arr.empty", LQ_GGUF_U32, NULL, 0), LQ_OK);
    /* writer refuses bad input */
    CHECK_EQ_INT(lq_gguf_writer_add_u32(w, "t.u32", 1), LQ_EINVAL);          /* duplicate */
    CHECK_EQ_INT(lq_gguf_writer_add_scalar(w, "t.x", LQ_GGUF_STRING, &u8), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_add_arr(w, "t.y", LQ_GGUF_STRING, ai32, 1), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_add_u32(w, "general.alignment", 48), LQ_EINVAL);
    return w;
}

static void check_meta(const lq_gguf *g)
{
    lq_err err = {0};
    uint64_t u;
    int64_t i;
    double d;
    int b;
    CHECK_EQ_INT(lq_gguf_version(g), 3);
    CHECK_EQ_INT(lq_gguf_alignment(g), 32);
    CHECK_EQ_INT(lq_gguf_n_kv(g), 22);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "t.u8", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 200);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "t.i8", &i, &err), LQ_OK);
    CHECK_EQ_INT(i, -100);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "t.u16", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 60000);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "t.i16", &i, &err), LQ_OK);
    CHECK_EQ_INT(i, -30000);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "t.u32", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 4000000000u);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "t.i32", &i, &err), LQ_OK);
    CHECK_EQ_INT(i, -2000000000);
    CHECK_EQ_INT(lq_gguf_get_f64(g, "t.f32", &d, &err), LQ_OK);
    CHECK_NEAR(d, 500000.0, 0);
    CHECK_EQ_INT(lq_gguf_get_bool(g, "t.bool", &b, &err), LQ_OK);
    CHECK_EQ_INT(b, 1);
    const char *s;
    uint64_t len;
    CHECK_EQ_INT(lq_gguf_get_str(g, "t.str", &s, &len, &err), LQ_OK);
    CHECK(len == strlen("héllo") && memcmp(s, "héllo", len) == 0);
    CHECK_EQ_INT(lq_gguf_get_str(g, "t.empty", &s, &len, &err), LQ_OK);
    CHECK_EQ_INT(len, 0);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "t.u64", &u, &err), LQ_OK);
    CHECK(u == UINT64_MAX);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "t.i64", &i, &err), LQ_OK);
    CHECK_EQ_INT(i, -5000000000LL);
    CHECK_EQ_INT(lq_gguf_get_f64(g, "t.f64", &d, &err), LQ_OK);
    CHECK(d == 1e-300);

    /* types and indices */
    int64_t k = lq_gguf_find_key(g, "t.u16");
    CHECK(k >= 0);
    CHECK_EQ_INT(lq_gguf_kv_type(g, k), LQ_GGUF_U16);
    CHECK(strcmp(lq_gguf_key(g, k), "t.u16") == 0);
    CHECK_EQ_INT(lq_gguf_arr_type(g, k), -1);
    CHECK_EQ_INT(lq_gguf_arr_len(g, k), 0);
    CHECK_EQ_INT(lq_gguf_find_key(g, "nope"), -1);
    CHECK(lq_gguf_key(g, 9999) == NULL);
    CHECK_EQ_INT(lq_gguf_kv_type(g, -1), -1);

    /* string arrays */
    int et;
    uint64_t n;
    CHECK_EQ_INT(lq_gguf_get_arr(g, "t.arr.str", &et, &n, &err), LQ_OK);
    CHECK_EQ_INT(et, LQ_GGUF_STRING);
    CHECK_EQ_INT(n, 4);
    k = lq_gguf_find_key(g, "t.arr.str");
    const char *want[] = {"a", "", "ccc", "Ġthe"};
    for (uint64_t j = 0; j < 4; j++) {
        CHECK_EQ_INT(lq_gguf_arr_str(g, k, j, &s, &len), LQ_OK);
        CHECK(len == strlen(want[j]) && memcmp(s, want[j], len) == 0);
    }
    CHECK_EQ_INT(lq_gguf_arr_str(g, k, 4, &s, &len), LQ_ERANGE);
    CHECK(lq_gguf_arr_data(g, k) == NULL);
    CHECK_EQ_INT(lq_gguf_get_arr(g, "t.arr.str0", &et, &n, &err), LQ_OK);
    CHECK_EQ_INT(n, 0);

    /* numeric arrays */
    k = lq_gguf_find_key(g, "t.arr.i32");
    CHECK_EQ_INT(lq_gguf_arr_type(g, k), LQ_GGUF_I32);
    CHECK_EQ_INT(lq_gguf_arr_len(g, k), 3);
    const uint8_t *raw = lq_gguf_arr_data(g, k);
    CHECK(raw != NULL);
    int32_t v32;
    memcpy(&v32, raw + 4, 4);
    CHECK_EQ_INT(v32, -2);
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 2, &i), LQ_OK);
    CHECK_EQ_INT(i, 3);
    CHECK_EQ_INT(lq_gguf_arr_f64(g, k, 1, &d), LQ_OK);
    CHECK_NEAR(d, -2, 0);
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 3, &i), LQ_ERANGE);
    k = lq_gguf_find_key(g, "t.arr.f32");
    CHECK_EQ_INT(lq_gguf_arr_f64(g, k, 1, &d), LQ_OK);
    CHECK_NEAR(d, -1.25, 0);
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 0, &i), LQ_EFORMAT); /* 0.5 is not integral */
    k = lq_gguf_find_key(g, "t.arr.bool");
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 2, &i), LQ_OK);
    CHECK_EQ_INT(i, 1);
    k = lq_gguf_find_key(g, "t.arr.f64");
    CHECK_EQ_INT(lq_gguf_arr_f64(g, k, 0, &d), LQ_OK);
    CHECK_NEAR(d, 3.5, 0);
    k = lq_gguf_find_key(g, "t.arr.u64");
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 0, &i), LQ_EFORMAT); /* does not fit int64 */
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 1, &i), LQ_OK);
    CHECK_EQ_INT(i, 7);
    k = lq_gguf_find_key(g, "t.arr.i8");
    CHECK_EQ_INT(lq_gguf_arr_i64(g, k, 0, &i), LQ_OK);
    CHECK_EQ_INT(i, -128);
    k = lq_gguf_find_key(g, "t.arr.empty");
    CHECK_EQ_INT(lq_gguf_arr_len(g, k), 0);
    CHECK_EQ_INT(lq_gguf_arr_type(g, k), LQ_GGUF_U32);
    CHECK_EQ_INT(lq_gguf_arr_str(g, k, 0, &s, &len), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_get_arr(g, "t.u32", &et, &n, &err), LQ_EFORMAT);
}

static void test_meta_roundtrip_buffer(void)
{
    lq_gguf_writer *w = make_meta_writer();
    uint8_t *buf = NULL;
    size_t len = 0;
    lq_err err = {0};
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &buf, &len, &err), LQ_OK);
    CHECK_EQ_INT(len % 32, 0);
    lq_gguf *g = NULL;
    int rc = lq_gguf_open_buffer(buf, len, &g, &err);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (g) {
        check_meta(g);
        CHECK(strcmp(lq_gguf_path(g), "") == 0);
        CHECK_EQ_INT(lq_gguf_file_size(g), len);
        CHECK_EQ_INT(lq_gguf_n_tensors(g), 0);
    }
    lq_gguf_close(g);
    lq_gguf_writer_free(w);
    free(buf);
}

static void test_getter_conversions(void)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_f64(w, "a.theta64", 500000.0);
    lq_gguf_writer_add_u32(w, "a.theta_u32", 500000);
    lq_gguf_writer_add_i32(w, "a.neg", -3);
    lq_gguf_writer_add_f32(w, "a.half", 5.5f);
    lq_gguf_writer_add_f32(w, "a.five", 5.0f);
    lq_gguf_writer_add_f64(w, "a.huge", 1e30);
    lq_gguf_writer_add_u64(w, "a.big", UINT64_MAX);
    lq_gguf_writer_add_str(w, "a.s", "x");
    lq_gguf_writer_add_bool(w, "a.b", 0);
    lq_gguf_writer_add_u32(w, "a.two", 2);
    uint8_t *buf;
    size_t len;
    lq_err err = {0};
    lq_gguf *g = NULL;
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &buf, &len, &err), LQ_OK);
    CHECK_EQ_INT(lq_gguf_open_buffer(buf, len, &g, &err), LQ_OK);
    double d;
    uint64_t u;
    int64_t i;
    int b;
    /* rope theta stored as f64 or u32 must still read as 500000, never a default */
    CHECK_EQ_INT(lq_gguf_get_f64(g, "a.theta64", &d, &err), LQ_OK);
    CHECK_NEAR(d, 500000.0, 0);
    CHECK_EQ_INT(lq_gguf_get_f64(g, "a.theta_u32", &d, &err), LQ_OK);
    CHECK_NEAR(d, 500000.0, 0);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "a.theta64", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 500000);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "a.neg", &i, &err), LQ_OK);
    CHECK_EQ_INT(i, -3);
    CHECK_EQ_INT(lq_gguf_get_f64(g, "a.neg", &d, &err), LQ_OK);
    CHECK_NEAR(d, -3, 0);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "a.neg", &u, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "a.neg");
    CHECK_STR_CONTAINS(err.msg, "-3");
    CHECK_EQ_INT(lq_gguf_get_i64(g, "a.half", &i, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "5.5");
    CHECK_EQ_INT(lq_gguf_get_i64(g, "a.five", &i, &err), LQ_OK);
    CHECK_EQ_INT(i, 5);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "a.huge", &u, &err), LQ_EFORMAT);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "a.huge", &i, &err), LQ_EFORMAT);
    CHECK_EQ_INT(lq_gguf_get_i64(g, "a.big", &i, &err), LQ_EFORMAT);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "a.big", &u, &err), LQ_OK);
    CHECK(u == UINT64_MAX);
    CHECK_EQ_INT(lq_gguf_get_f64(g, "a.s", &d, &err), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "'a.s' is string");
    CHECK_EQ_INT(lq_gguf_get_f64(g, "missing.key", &d, &err), LQ_ENOTFOUND);
    CHECK_STR_CONTAINS(err.msg, "missing.key");
    CHECK_EQ_INT(lq_gguf_get_bool(g, "a.b", &b, &err), LQ_OK);
    CHECK_EQ_INT(b, 0);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "a.b", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 0);
    CHECK_EQ_INT(lq_gguf_get_bool(g, "a.two", &b, &err), LQ_EFORMAT);
    CHECK_EQ_INT(lq_gguf_get_f64(g, "a.b", &d, &err), LQ_EFORMAT);
    const char *s;
    CHECK_EQ_INT(lq_gguf_get_str(g, "a.two", &s, &u, &err), LQ_EFORMAT);
    CHECK_EQ_INT(lq_gguf_get_str(g, "nope", &s, &u, &err), LQ_ENOTFOUND);
    lq_gguf_close(g);
    lq_gguf_writer_free(w);
    free(buf);
}

/* ---- tensors of each type ---- */

typedef struct tensor_set {
    float f32[8];          /* [4, 2] */
    uint16_t f16[64];      /* [32, 2] */
    uint16_t bf16[16];     /* [16] */
    uint8_t q8[2 * 34];    /* [32, 2] */
    uint8_t i2s[512 / 4 + 32]; /* [256, 2] */
    uint8_t tq2[2 * 66];   /* [256, 2] */
    uint8_t tq1[2 * 54];   /* [256, 2] */
    uint8_t q4k[144];      /* [256] opaque */
    int8_t trits[512];
    float want_f16[64], want_bf16[16], want_q8[64];
} tensor_set;

static void fill_tensors(tensor_set *ts)
{
    for (int i = 0; i < 8; i++)
        ts->f32[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 64; i++) {
        ts->want_f16[i] = (float)(i - 32) / 8.0f;
        ts->f16[i] = lq_f32_to_f16(ts->want_f16[i]);
    }
    for (int i = 0; i < 16; i++) {
        ts->want_bf16[i] = (float)(i * i) - 3.0f;
        uint32_t bits;
        memcpy(&bits, &ts->want_bf16[i], 4);
        ts->bf16[i] = (uint16_t)(bits >> 16);
    }
    for (int b = 0; b < 2; b++) {
        float d = b ? 0.5f : 0.125f;
        uint16_t h = lq_f32_to_f16(d);
        ts->q8[b * 34] = (uint8_t)h;
        ts->q8[b * 34 + 1] = (uint8_t)(h >> 8);
        for (int j = 0; j < 32; j++) {
            int8_t q = (int8_t)(j * 8 - 128 + b);
            ts->q8[b * 34 + 2 + j] = (uint8_t)q;
            ts->want_q8[b * 32 + j] = (float)q * d;
        }
    }
    for (int i = 0; i < 512; i++)
        ts->trits[i] = (int8_t)((i * 5 + i / 7) % 3 - 1);
    lq_i2s_pack(ts->trits, 512, 0.75f, ts->i2s);
    /* the library's packers (lq_tq_pack), checked here against the decoders */
    CHECK_EQ_INT(lq_tq_pack(LQ_GGML_TQ2_0, ts->trits, 512, (const float[]){0.5f, 2.0f}, ts->tq2), LQ_OK);
    CHECK_EQ_INT(lq_tq_pack(LQ_GGML_TQ1_0, ts->trits, 512, (const float[]){0.25f, 4.0f}, ts->tq1), LQ_OK);
    for (int i = 0; i < 144; i++)
        ts->q4k[i] = (uint8_t)i;
}

static lq_gguf_writer *make_tensor_writer(const tensor_set *ts)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_str(w, "general.architecture", "test");
    const uint64_t s42[] = {4, 2}, s322[] = {32, 2}, s16[] = {16}, s2562[] = {256, 2}, s256[] = {256};
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "f32", 2, s42, LQ_GGML_F32, ts->f32, 32), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "f16", 2, s322, LQ_GGML_F16, ts->f16, 128), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "bf16", 1, s16, LQ_GGML_BF16, ts->bf16, 32), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "q8", 2, s322, LQ_GGML_Q8_0, ts->q8, 68), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "i2s", 2, s2562, LQ_GGML_I2_S, ts->i2s, 160), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "tq2", 2, s2562, LQ_GGML_TQ2_0, ts->tq2, 132), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "tq1", 2, s2562, LQ_GGML_TQ1_0, ts->tq1, 108), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "q4k", 1, s256, LQ_GGML_Q4_K, ts->q4k, 144), LQ_OK);
    /* refused: wrong size, duplicate name, zero dim, unknown type, 5 dims */
    const uint64_t s0[] = {0}, s5[] = {1, 1, 1, 1, 1};
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "bad", 2, s42, LQ_GGML_F32, ts->f32, 31), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "f32", 2, s42, LQ_GGML_F32, ts->f32, 32), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "z", 1, s0, LQ_GGML_F32, ts->f32, 0), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "u", 1, s16, 99, ts->f32, 16), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, "d5", 5, s5, LQ_GGML_F32, ts->f32, 4), LQ_EINVAL);
    return w;
}

static void check_tensors(const lq_gguf *g, const tensor_set *ts)
{
    lq_err err = {0};
    CHECK_EQ_INT(lq_gguf_n_tensors(g), 8);
    float out[512];
    const lq_gguf_tensor *t = lq_gguf_find_tensor(g, "f32");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->ne[2] == 1);
    CHECK(t && t->n_elements == 8 && t->n_bytes == 32 && t->offset == 0);
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 8; i++)
            CHECK_NEAR(out[i], ts->f32[i], 0);
        CHECK_EQ_INT(lq_gguf_tensor_row_f32(t, 1, out, &err), LQ_OK);
        CHECK_NEAR(out[0], ts->f32[4], 0);
        CHECK_EQ_INT(lq_gguf_tensor_row_f32(t, 2, out, &err), LQ_ERANGE);
    }
    t = lq_gguf_find_tensor(g, "f16");
    CHECK(t && t->type == LQ_GGML_F16 && t->n_bytes == 128);
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 64; i++)
            CHECK_NEAR(out[i], ts->want_f16[i], 0);
    }
    t = lq_gguf_find_tensor(g, "bf16");
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 16; i++)
            CHECK_NEAR(out[i], ts->want_bf16[i], 0);
    }
    t = lq_gguf_find_tensor(g, "q8");
    CHECK(t && t->n_bytes == 68);
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 64; i++)
            CHECK_NEAR(out[i], ts->want_q8[i], 0);
        CHECK_EQ_INT(lq_gguf_tensor_row_f32(t, 1, out, &err), LQ_OK);
        CHECK_NEAR(out[3], ts->want_q8[35], 0);
    }
    t = lq_gguf_find_tensor(g, "i2s");
    CHECK(t && t->type == LQ_GGML_I2_S && t->n_bytes == 512 / 4 + 4);
    if (t) {
        float sc;
        CHECK_EQ_INT(lq_gguf_i2s_scale(t, &sc, &err), LQ_OK);
        CHECK_NEAR(sc, 0.75, 0);
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 512; i++)
            CHECK_NEAR(out[i], ts->trits[i] * 0.75f, 0);
        CHECK_EQ_INT(lq_gguf_tensor_row_f32(t, 1, out, &err), LQ_OK);
        for (int i = 0; i < 256; i++)
            CHECK_NEAR(out[i], ts->trits[256 + i] * 0.75f, 0);
    }
    t = lq_gguf_find_tensor(g, "tq2");
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 512; i++)
            CHECK_NEAR(out[i], ts->trits[i] * (i < 256 ? 0.5f : 2.0f), 0);
        float sc;
        CHECK_EQ_INT(lq_gguf_i2s_scale(t, &sc, &err), LQ_EINVAL);
    }
    t = lq_gguf_find_tensor(g, "tq1");
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        for (int i = 0; i < 512; i++)
            CHECK_NEAR(out[i], ts->trits[i] * (i < 256 ? 0.25f : 4.0f), 0);
        CHECK_EQ_INT(lq_gguf_tensor_row_f32(t, 1, out, &err), LQ_OK);
        for (int i = 0; i < 256; i++)
            CHECK_NEAR(out[i], ts->trits[256 + i] * 4.0f, 0);
    }
    t = lq_gguf_find_tensor(g, "q4k");
    CHECK(t && t->n_bytes == 144 && memcmp(t->data, ts->q4k, 144) == 0);
    if (t) {
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_EUNSUPPORTED);
        CHECK_STR_CONTAINS(err.msg, "Q4_K");
    }
    CHECK(lq_gguf_find_tensor(g, "absent") == NULL);
    CHECK(lq_gguf_tensor_at(g, 8) == NULL);
    CHECK(lq_gguf_tensor_at(g, 0) == lq_gguf_find_tensor(g, "f32"));
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++) {
        const lq_gguf_tensor *ti = lq_gguf_tensor_at(g, i);
        CHECK(ti->offset % lq_gguf_alignment(g) == 0);
        CHECK(ti->data != NULL);
    }
}

static void test_tensor_roundtrip(void)
{
    static tensor_set ts;
    fill_tensors(&ts);
    lq_gguf_writer *w = make_tensor_writer(&ts);
    uint8_t *buf;
    size_t len;
    lq_err err = {0};
    lq_gguf *g = NULL;
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &buf, &len, &err), LQ_OK);
    int rc = lq_gguf_open_buffer(buf, len, &g, &err);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (g)
        check_tensors(g, &ts);
    lq_gguf_close(g);
    lq_gguf_writer_free(w);
    free(buf);
}

/* Rebuilds a writer from an open file: every KV copied verbatim, tensors pointing into it. */
static lq_gguf_writer *writer_from(const lq_gguf *g)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    for (int64_t i = 0; i < lq_gguf_n_kv(g); i++)
        CHECK_EQ_INT(lq_gguf_writer_copy_kv(w, g, i), LQ_OK);
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(g, i);
        uint64_t nb;
        CHECK_EQ_INT(lq_ggml_nbytes(t->type, t->ne[0], t->n_elements, &nb, NULL), LQ_OK);
        CHECK_EQ_INT(lq_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, nb),
                     LQ_OK);
    }
    return w;
}

static void test_rewrite_byte_identical(void)
{
    static tensor_set ts;
    fill_tensors(&ts);
    lq_gguf_writer *w = make_tensor_writer(&ts);
    lq_gguf_writer *m = make_meta_writer(); /* metadata of every type, added as well */
    uint8_t *mbuf;
    size_t mlen;
    lq_err err = {0};
    lq_gguf *mg = NULL;
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(m, &mbuf, &mlen, &err), LQ_OK);
    CHECK_EQ_INT(lq_gguf_open_buffer(mbuf, mlen, &mg, &err), LQ_OK);
    for (int64_t i = 0; mg && i < lq_gguf_n_kv(mg); i++)
        CHECK_EQ_INT(lq_gguf_writer_copy_kv(w, mg, i), LQ_OK);
    uint8_t *b1, *b2;
    size_t l1, l2;
    lq_gguf *g = NULL;
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &b1, &l1, &err), LQ_OK);
    CHECK_EQ_INT(lq_gguf_open_buffer(b1, l1, &g, &err), LQ_OK);
    if (g) {
        lq_gguf_writer *w2 = writer_from(g);
        CHECK_EQ_INT(lq_gguf_writer_write_buffer(w2, &b2, &l2, &err), LQ_OK);
        CHECK_EQ_INT(l1, l2);
        CHECK(l1 == l2 && memcmp(b1, b2, l1) == 0);
        free(b2);
        lq_gguf_writer_free(w2);
    }
    lq_gguf_close(g);
    lq_gguf_close(mg);
    lq_gguf_writer_free(w);
    lq_gguf_writer_free(m);
    free(b1);
    free(mbuf);
}

static void test_write_file_and_alignment(void)
{
    static tensor_set ts;
    fill_tensors(&ts);
    lq_gguf_writer *w = make_tensor_writer(&ts);
    CHECK_EQ_INT(lq_gguf_writer_set_alignment(w, 48), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_set_alignment(w, 0), LQ_EINVAL);
    CHECK_EQ_INT(lq_gguf_writer_set_alignment(w, 128), LQ_OK);
    CHECK_EQ_INT(lq_gguf_writer_set_alignment(w, 64), LQ_OK); /* replaces, no duplicate key */
    const char *dir = harness_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/t.gguf", dir);
    lq_err err = {0};
    CHECK_EQ_INT(lq_gguf_writer_write(w, path, &err), LQ_OK);
    lq_gguf *g = NULL;
    int rc = lq_gguf_open(path, &g, &err);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (g) {
        CHECK_EQ_INT(lq_gguf_alignment(g), 64);
        CHECK_EQ_INT(lq_gguf_data_offset(g) % 64, 0);
        CHECK(strcmp(lq_gguf_path(g), path) == 0);
        uint64_t a;
        CHECK_EQ_INT(lq_gguf_get_u64(g, "general.alignment", &a, &err), LQ_OK);
        CHECK_EQ_INT(a, 64);
        CHECK_EQ_INT(lq_gguf_kv_type(g, lq_gguf_find_key(g, "general.alignment")), LQ_GGUF_U32);
        for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++)
            CHECK_EQ_INT(lq_gguf_tensor_at(g, i)->offset % 64, 0);
        check_tensors(g, &ts);
        /* copying general.alignment carries the alignment over */
        lq_gguf_writer *w2 = writer_from(g);
        uint8_t *b;
        size_t l;
        lq_gguf *g2 = NULL;
        CHECK_EQ_INT(lq_gguf_writer_write_buffer(w2, &b, &l, &err), LQ_OK);
        CHECK_EQ_INT(l, lq_gguf_file_size(g));
        CHECK(l == lq_gguf_file_size(g) && memcmp(b, lq_gguf_tensor_at(g, 0)->data -
                                                         lq_gguf_data_offset(g), l) == 0);
        CHECK_EQ_INT(lq_gguf_open_buffer(b, l, &g2, &err), LQ_OK);
        CHECK_EQ_INT(lq_gguf_alignment(g2), 64);
        lq_gguf_close(g2);
        free(b);
        lq_gguf_writer_free(w2);
    }
    lq_gguf_close(g);
    /* no temporary file left behind */
    DIR *d = opendir(dir);
    int others = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "t.gguf") != 0)
            others++;
    if (d)
        closedir(d);
    CHECK_EQ_INT(others, 0);
    /* missing file and unwritable directory */
    CHECK_EQ_INT(lq_gguf_open("/nonexistent-dir/x.gguf", &g, &err), LQ_ENOTFOUND);
    CHECK(g == NULL);
    CHECK_EQ_INT(lq_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err), LQ_EIO);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent-dir/x.gguf");
    unlink(path);
    lq_gguf_writer_free(w);
}

/* ---- hand-made files: v2, nested arrays, vocab-only without padding ---- */

static void test_v2_and_nested_arrays(void)
{
    bb b = {{0}, 0};
    bb_u32(&b, 0x46554747u);
    bb_u32(&b, 2);
    bb_u64(&b, 0); /* tensors */
    bb_u64(&b, 2); /* kvs */
    bb_str(&b, "n.nested");
    bb_u32(&b, LQ_GGUF_ARRAY);
    bb_u32(&b, LQ_GGUF_ARRAY); /* array of 2 arrays */
    bb_u64(&b, 2);
    bb_u32(&b, LQ_GGUF_U16);
    bb_u64(&b, 3);
    for (int i = 0; i < 3; i++) {
        b.b[b.n++] = (uint8_t)i;
        b.b[b.n++] = 0;
    }
    bb_u32(&b, LQ_GGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "x");
    bb_str(&b, "yz");
    bb_str(&b, "n.after");
    bb_u32(&b, LQ_GGUF_I8);
    b.b[b.n++] = 0xff;
    lq_gguf *g = NULL;
    lq_err err = {0};
    uint8_t *copy;
    int rc = open_copy(b.b, b.n, &g, &err, &copy); /* ends right after the KVs: no padding */
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (g) {
        CHECK_EQ_INT(lq_gguf_version(g), 2);
        int64_t k = lq_gguf_find_key(g, "n.nested");
        CHECK_EQ_INT(lq_gguf_arr_type(g, k), LQ_GGUF_ARRAY);
        CHECK_EQ_INT(lq_gguf_arr_len(g, k), 2);
        CHECK(lq_gguf_arr_data(g, k) == NULL);
        int64_t v;
        CHECK_EQ_INT(lq_gguf_get_i64(g, "n.after", &v, &err), LQ_OK);
        CHECK_EQ_INT(v, -1);
        /* the nested array survives a verbatim copy */
        lq_gguf_writer *w = writer_from(g);
        uint8_t *out;
        size_t len;
        lq_gguf *g2 = NULL;
        CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &out, &len, &err), LQ_OK);
        CHECK_EQ_INT(lq_gguf_open_buffer(out, len, &g2, &err), LQ_OK);
        CHECK_EQ_INT(lq_gguf_version(g2), 3);
        CHECK_EQ_INT(lq_gguf_arr_len(g2, lq_gguf_find_key(g2, "n.nested")), 2);
        CHECK(len >= b.n - 8 && memcmp(out + 24, b.b + 24, b.n - 24) == 0);
        lq_gguf_close(g2);
        free(out);
        lq_gguf_writer_free(w);
    }
    lq_gguf_close(g);
    free(copy);
}

/* ---- truncation at every byte ---- */

static void test_truncated_every_prefix(void)
{
    static tensor_set ts;
    fill_tensors(&ts);
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_str(w, "general.architecture", "llama");
    const char *toks[] = {"<s>", "</s>", "a", "b"};
    lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    float sc[] = {0, 0, -1, -2};
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.scores", LQ_GGUF_F32, sc, 4);
    lq_gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
    const uint64_t s1282[] = {128, 2}, s8[] = {8};
    uint8_t i2s[256 / 4 + 32];
    lq_i2s_pack(ts.trits, 256, 1.0f, i2s);
    lq_gguf_writer_add_tensor(w, "w.i2s", 2, s1282, LQ_GGML_I2_S, i2s, sizeof i2s);
    lq_gguf_writer_add_tensor(w, "w.q8", 1, (const uint64_t[]){32}, LQ_GGML_Q8_0, ts.q8, 34);
    /* last tensor is 32 bytes of F32: no padding after it, so every shorter prefix is bad */
    lq_gguf_writer_add_tensor(w, "w.f32", 1, s8, LQ_GGML_F32, ts.f32, 32);
    uint8_t *buf;
    size_t len;
    lq_err err = {0};
    CHECK_EQ_INT(lq_gguf_writer_write_buffer(w, &buf, &len, &err), LQ_OK);
    lq_gguf *g = NULL;
    uint8_t *copy;
    CHECK_EQ_INT(open_copy(buf, len, &g, &err, &copy), LQ_OK);
    lq_gguf_close(g);
    free(copy);
    int bad = 0;
    for (size_t n = 0; n < len; n++) {
        err.msg[0] = 0;
        int rc = open_copy(buf, n, &g, &err, &copy);
        if (rc == LQ_OK || g != NULL || err.msg[0] == 0) {
            if (bad++ < 5)
                printf("#   prefix %zu of %zu: rc %d msg '%s'\n", n, len, rc, err.msg);
            lq_gguf_close(g);
        }
        free(copy);
    }
    CHECK_EQ_INT(bad, 0);
    /* A few exact messages along the way. */
    CHECK_EQ_INT(open_copy(buf, 10, &g, &err, &copy), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "truncated: n_tensors");
    free(copy);
    CHECK_EQ_INT(open_copy(buf, len - 1, &g, &err, &copy), LQ_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "tensor 'w.f32'");
    CHECK_STR_CONTAINS(err.msg, "past end of file");
    free(copy);
    lq_gguf_writer_free(w);
    free(buf);
}

/* ---- conformance files ---- */

static const char *conf_path(const char *rel)
{
    static char buf[4200];
    const char *dir = harness_conformance_dir();
    if (!dir)
        return NULL;
    snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    return buf;
}

static void test_conf_bitnet_tiny_a(void)
{
    const char *p = conf_path("bitnet/bitnet-tiny-a.gguf");
    if (!p)
        SKIP("../shared/conformance absent");
    lq_gguf *g = NULL;
    lq_err err = {0};
    int rc = lq_gguf_open(p, &g, &err);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (!g)
        return;
    CHECK_EQ_INT(lq_gguf_version(g), 3);
    CHECK_EQ_INT(lq_gguf_n_tensors(g), 24);
    CHECK_EQ_INT(lq_gguf_n_kv(g), 23);
    CHECK_EQ_INT(lq_gguf_data_offset(g), 9024);
    const char *s;
    uint64_t len, u;
    CHECK_EQ_INT(lq_gguf_get_str(g, "general.architecture", &s, &len, &err), LQ_OK);
    CHECK(len == 12 && memcmp(s, "bitnet-b1.58", 12) == 0);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "bitnet-b1.58.embedding_length", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 128);
    CHECK_EQ_INT(lq_gguf_get_u64(g, "bitnet-b1.58.block_count", &u, &err), LQ_OK);
    CHECK_EQ_INT(u, 2);
    double theta;
    CHECK_EQ_INT(lq_gguf_get_f64(g, "bitnet-b1.58.rope.freq_base", &theta, &err), LQ_OK);
    CHECK_NEAR(theta, 500000.0, 0);
    int64_t k = lq_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK_EQ_INT(lq_gguf_arr_len(g, k), 320);
    CHECK_EQ_INT(lq_gguf_arr_str(g, k, 0, &s, &len), LQ_OK);
    CHECK(len == 2 && memcmp(s, "\xc4\x80", 2) == 0); /* byte-level BPE 'Ā' for byte 0 */
    const lq_gguf_tensor *t = lq_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == LQ_GGML_F32 && t->n_dims == 2 && t->ne[0] == 128 && t->ne[1] == 320);
    /* I2_S: only -1/0/+1 times the scale; counts, scale and a checksum from the Python
     * reference decoder (ref_forward.py's i2s()). */
    t = lq_gguf_find_tensor(g, "blk.0.attn_k.weight");
    CHECK(t && t->type == LQ_GGML_I2_S && t->ne[0] == 128 && t->ne[1] == 64);
    if (t) {
        float sc, *out = malloc(t->n_elements * sizeof *out);
        CHECK_EQ_INT(lq_gguf_i2s_scale(t, &sc, &err), LQ_OK);
        CHECK_NEAR(sc, 0.3650447428226471, 0);
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        int cnt[3] = {0, 0, 0}, other = 0;
        long long sum = 0;
        for (uint64_t i = 0; i < t->n_elements; i++) {
            int v = out[i] == -sc ? -1 : out[i] == 0 ? 0 : out[i] == sc ? 1 : 9;
            if (v == 9)
                other++;
            else
                cnt[v + 1]++;
            sum += (long long)(i % 97 + 1) * (v == 9 ? 0 : v);
        }
        CHECK_EQ_INT(other, 0);
        CHECK_EQ_INT(cnt[0], 2074);
        CHECK_EQ_INT(cnt[1], 4029);
        CHECK_EQ_INT(cnt[2], 2089);
        CHECK_EQ_INT(sum, -1850);
        static const int row1[8] = {0, 0, 0, 1, -1, 0, -1, 0};
        CHECK_EQ_INT(lq_gguf_tensor_row_f32(t, 1, out, &err), LQ_OK);
        for (int i = 0; i < 8; i++)
            CHECK_NEAR(out[i], row1[i] * sc, 0);
        free(out);
    }
    t = lq_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK(t && t->ne[0] == 256 && t->ne[1] == 128);
    if (t) {
        long long sum = 0;
        int cnt[3] = {0, 0, 0};
        for (uint64_t i = 0; i < t->n_elements; i++) {
            int v = lq_i2s_get(t->data, i);
            cnt[v + 1]++;
            sum += (long long)(i % 97 + 1) * v;
        }
        CHECK_EQ_INT(cnt[0], 8181);
        CHECK_EQ_INT(cnt[1], 16561);
        CHECK_EQ_INT(cnt[2], 8026);
        CHECK_EQ_INT(sum, -5216);
        /* as microsoft writes it, the tensor occupies n/4 + 32 bytes up to the file end */
        CHECK_EQ_INT(lq_gguf_data_offset(g) + t->offset + t->n_elements / 4 + 32,
                     lq_gguf_file_size(g));
    }
    int n_i2s = 0;
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++)
        n_i2s += lq_gguf_tensor_at(g, i)->type == LQ_GGML_I2_S;
    CHECK_EQ_INT(n_i2s, 14);
    lq_gguf_close(g);
}

static void test_conf_bitnet_tiny_b(void)
{
    const char *p = conf_path("bitnet/bitnet-tiny-b.gguf");
    if (!p)
        SKIP("../shared/conformance absent");
    lq_gguf *g = NULL;
    lq_err err = {0};
    int rc = lq_gguf_open(p, &g, &err);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (!g)
        return;
    CHECK_EQ_INT(lq_gguf_n_tensors(g), 35);
    const lq_gguf_tensor *t = lq_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == LQ_GGML_F16 && t->ne[0] == 256 && t->ne[1] == 400);
    double theta;
    CHECK_EQ_INT(lq_gguf_get_f64(g, "bitnet-b1.58.rope.freq_base", &theta, &err), LQ_OK);
    CHECK_NEAR(theta, 10000.0, 0);
    if (t) {
        float *out = malloc(t->n_elements * sizeof *out);
        CHECK_EQ_INT(lq_gguf_tensor_to_f32(t, out, &err), LQ_OK);
        int finite = 1;
        for (uint64_t i = 0; i < t->n_elements; i++)
            finite &= isfinite(out[i]) != 0;
        CHECK(finite);
        free(out);
    }
    lq_gguf_close(g);
}

static void test_conf_stories(void)
{
    const char *p = conf_path("llama/stories260K.gguf");
    if (!p)
        SKIP("../shared/conformance absent");
    lq_gguf *g = NULL;
    lq_err err = {0};
    int rc = lq_gguf_open(p, &g, &err);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (!g)
        return;
    CHECK_EQ_INT(lq_gguf_n_tensors(g), 48);
    uint64_t total = 0;
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(g, i);
        CHECK_EQ_INT(t->type, LQ_GGML_F32);
        total += t->n_elements;
    }
    CHECK_EQ_INT(total, 292800);
    const char *s;
    uint64_t len;
    CHECK_EQ_INT(lq_gguf_get_str(g, "general.architecture", &s, &len, &err), LQ_OK);
    CHECK(len == 5 && memcmp(s, "llama", 5) == 0);
    CHECK_EQ_INT(lq_gguf_arr_len(g, lq_gguf_find_key(g, "tokenizer.ggml.tokens")), 512);
    lq_gguf_close(g);
}

static void test_conf_tokenizer_vocabs(void)
{
    const char *p = conf_path("tokenizer/llama3-vocab.gguf");
    if (!p)
        SKIP("../shared/conformance absent");
    lq_gguf *g = NULL;
    lq_err err = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = lq_gguf_open(p, &g, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_MSG(rc == LQ_OK, "%s", err.msg);
    if (!g)
        return;
    /* a figure, not an assertion: */
    printf("#   open llama3-vocab.gguf: %.2f ms\n",
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    int64_t k = lq_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK_EQ_INT(lq_gguf_arr_len(g, k), 128256);
    CHECK_EQ_INT(lq_gguf_arr_type(g, k), LQ_GGUF_STRING);
    const char *s;
    uint64_t len;
    CHECK_EQ_INT(lq_gguf_arr_str(g, k, 128000, &s, &len), LQ_OK);
    CHECK(len == 17 && memcmp(s, "<|begin_of_text|>", 17) == 0);
    CHECK_EQ_INT(lq_gguf_arr_str(g, k, 0, &s, &len), LQ_OK);
    CHECK(len == 1 && s[0] == '!');
    CHECK_EQ_INT(lq_gguf_get_str(g, "tokenizer.ggml.pre", &s, &len, &err), LQ_OK);
    CHECK(len == 9 && memcmp(s, "llama-bpe", 9) == 0);
    CHECK(lq_gguf_arr_len(g, lq_gguf_find_key(g, "tokenizer.ggml.merges")) > 200000);
    CHECK_EQ_INT(lq_gguf_n_tensors(g), 0);
    lq_gguf_close(g);

    static const char *others[] = {"tokenizer/ggml-vocab-gpt-2.gguf",
                                   "tokenizer/ggml-vocab-llama-spm.gguf"};
    for (int i = 0; i < 2; i++) {
        rc = lq_gguf_open(conf_path(others[i]), &g, &err);
        CHECK_MSG(rc == LQ_OK, "%s: %s", others[i], err.msg);
        CHECK(g && lq_gguf_arr_len(g, lq_gguf_find_key(g, "tokenizer.ggml.tokens")) > 0);
        lq_gguf_close(g);
        g = NULL;
    }
}

int main(void)
{
    RUN(test_type_table);
    RUN(test_nbytes);
    RUN(test_i2s_worked_example);
    RUN(test_i2s_two_rows);
    RUN(test_i2s_flat_rows_repack);
    RUN(test_meta_roundtrip_buffer);
    RUN(test_getter_conversions);
    RUN(test_tensor_roundtrip);
    RUN(test_rewrite_byte_identical);
    RUN(test_write_file_and_alignment);
    RUN(test_v2_and_nested_arrays);
    RUN(test_truncated_every_prefix);
    RUN(test_conf_bitnet_tiny_a);
    RUN(test_conf_bitnet_tiny_b);
    RUN(test_conf_stories);
    RUN(test_conf_tokenizer_vocabs);
    return harness_done();
}
