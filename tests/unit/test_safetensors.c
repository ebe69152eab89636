/* The safetensors reader (src/safetensors/st_read.c): a good file's tensors, dtypes, shapes,
 * data and metadata; each malformed header a clear error and no handle; folders with an
 * index and shards, and each way an index and its shards can disagree. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "larql/safetensors.h"

/* header JSON + data -> a file image in buf (returns its length) */
static size_t image(uint8_t *buf, const char *json, const void *data, size_t dlen)
{
    uint64_t n = strlen(json);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, json, n);
    if (dlen)
        memcpy(buf + 8 + n, data, dlen);
    return 8 + n + dlen;
}

static uint8_t B[1 << 16];

/* Expect a rejection whose message contains want. */
static void bad(const char *json, const void *data, size_t dlen, const char *want)
{
    size_t n = image(B, json, data, dlen);
    lq_safetensors *s = (lq_safetensors *)1;
    lq_err e = {0};
    int rc = lq_st_open_buffer(B, n, &s, &e);
    CHECK_MSG(rc != LQ_OK && s == NULL, "accepted: %s", json);
    CHECK_MSG(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
}

static void test_good(void)
{
    float f[3] = {1.5f, -2.0f, 0.25f};
    uint8_t d[12 + 4 + 2];
    memcpy(d, f, 12);
    uint16_t h[2] = {0x3f80, 0xc000}; /* bf16 1.0, -2.0 */
    memcpy(d + 12, h, 4);
    uint16_t half = 0x3c00; /* f16 1.0 */
    memcpy(d + 16, &half, 2);
    size_t n = image(B,
                     "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"w\":{\"dtype\":\"BF16\",\"shape\":[2,1],\"data_offsets\":[12,16]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                     "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[16,18]},"
                     "\"z\":{\"dtype\":\"U8\",\"shape\":[0,7],\"data_offsets\":[18,18]}}   ",
                     d, sizeof d);
    lq_safetensors *s = NULL;
    lq_err e = {0};
    CHECK_EQ_INT(lq_st_open_buffer(B, n, &s, &e), LQ_OK);
    if (!s)
        return;
    CHECK_EQ_INT(lq_st_n_tensors(s), 4);
    const lq_st_tensor *a = lq_st_find(s, "a"), *w = lq_st_find(s, "w"), *sc = lq_st_find(s, "s"),
                       *z = lq_st_find(s, "z");
    CHECK(a && w && sc && z && !lq_st_find(s, "b"));
    if (a && w && sc && z) {
        CHECK_EQ_INT(a->dtype, LQ_ST_F32);
        CHECK_EQ_INT(a->n_elements, 3);
        CHECK(lq_st_get_f32(a, 1) == -2.0f);
        CHECK_EQ_INT(w->n_dims, 2);
        CHECK_EQ_INT(w->shape[0], 2);
        CHECK(lq_st_get_f32(w, 0) == 1.0f && lq_st_get_f32(w, 1) == -2.0f);
        CHECK_EQ_INT(sc->n_dims, 0);
        CHECK(lq_st_get_f32(sc, 0) == 1.0f);
        CHECK_EQ_INT(z->n_elements, 0);
    }
    CHECK(lq_st_metadata(s, "format") && !strcmp(lq_st_metadata(s, "format"), "pt"));
    CHECK(lq_st_metadata(s, "nope") == NULL);
    CHECK(!strcmp(lq_st_dtype_name(LQ_ST_BF16), "BF16") && lq_st_dtype_size(LQ_ST_F64) == 8);
    lq_st_close(s);
}

static void test_bad_headers(void)
{
    uint8_t z[64] = {0};
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", z, 8, "outside the data section");
    bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8]}}", z, 8, "data_offsets give 8");
    bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,8]}}", z, 8, "unknown dtype 'Q4'");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", z, 6, "overlaps");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", z, 6, "hole");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", z, 6, "cover 4 of the 6");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}", z, 4, "outside the data section");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}", z, 4, "shape[0]");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", z, 4, "overflows");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", z, 1, "9 dimensions");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", z, 1, "[begin, end]");
    bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", z, 1, "needs \"dtype\"");
    bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{}}", z, 1, "header JSON");
    bad("[1,2]", z, 0, "not a JSON object");
    bad("{\"__metadata__\":{\"k\":1}}", z, 0, "is not a string");
    bad("{\"a\":[1]}", z, 0, "not an object");
    bad("{nope", z, 0, "header JSON");
    /* header lengths past the file and past the cap */
    lq_err e = {0};
    lq_safetensors *s = NULL;
    size_t n = image(B, "{}", NULL, 0);
    B[0] = 200;
    CHECK(lq_st_open_buffer(B, n, &s, &e) != LQ_OK && !s && strstr(e.msg, "past the end"));
    B[0] = 0, B[5] = 1; /* 2^40 */
    CHECK(lq_st_open_buffer(B, n, &s, &e) != LQ_OK && !s && strstr(e.msg, "exceeds the cap"));
    CHECK(lq_st_open_buffer(B, 5, &s, &e) != LQ_OK && !s && strstr(e.msg, "too short"));
}

static void put(const char *dir, const char *name, const char *json, const void *data, size_t dlen)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        return;
    if (json && data) {
        size_t n = image(B, json, data, dlen);
        fwrite(B, 1, n, f);
    } else if (json) {
        fputs(json, f);
    }
    fclose(f);
}

static const char *A_ST = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
static const char *B_ST = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
static const char *IX = "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                        "\"b\":\"model-00002-of-00002.safetensors\"}}";

static int open_dir(const char *d, lq_err *e)
{
    lq_safetensors *s = NULL;
    int rc = lq_st_open_dir(d, &s, e);
    if (rc == LQ_OK) {
        CHECK(lq_st_find(s, "a") && lq_st_find(s, "b"));
        CHECK(lq_st_get_f32(lq_st_find(s, "b"), 0) == 2.0f);
        lq_st_close(s);
    } else {
        CHECK(s == NULL);
    }
    return rc;
}

static void test_shards(void)
{
    float one = 1.0f, two = 2.0f;
    lq_err e = {0};
    const char *d = scratch_dir("st-shards", 0);
    CHECK(d != NULL);
    if (!d)
        return;
    CHECK(open_dir(d, &e) == LQ_ENOTFOUND && strstr(e.msg, "neither"));
    put(d, "model-00001-of-00002.safetensors", A_ST, &one, 4);
    put(d, "model-00002-of-00002.safetensors", B_ST, &two, 4);
    put(d, "model.safetensors.index.json", IX, NULL, 0);
    CHECK_EQ_INT(open_dir(d, &e), LQ_OK);
    /* the index places b in the first shard */
    put(d, "model.safetensors.index.json",
        "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00001-of-00002.safetensors\"}}",
        NULL, 0);
    CHECK(open_dir(d, &e) != LQ_OK && strstr(e.msg, "model-00002-of-00002.safetensors' is missing from"));
    /* the index names a shard path outside the folder */
    put(d, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"../x.safetensors\"}}", NULL, 0);
    CHECK(open_dir(d, &e) != LQ_OK && strstr(e.msg, "not a file name in the folder"));
    /* a tensor in two shards */
    put(d, "model-00002-of-00002.safetensors", A_ST, &two, 4);
    put(d, "model.safetensors.index.json", IX, NULL, 0);
    CHECK(open_dir(d, &e) != LQ_OK && strstr(e.msg, "appears in both"));
    /* a shard named by the index is absent */
    char p[600];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    remove(p);
    CHECK(open_dir(d, &e) == LQ_ENOTFOUND && strstr(e.msg, "shard 'model-00002-of-00002.safetensors' named by"));
    /* a tensor the index does not list */
    put(d, "model-00002-of-00002.safetensors", B_ST, &two, 4);
    put(d, "model.safetensors.index.json",
        "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"c\":\"model-00002-of-00002.safetensors\"}}",
        NULL, 0);
    CHECK(open_dir(d, &e) != LQ_OK && strstr(e.msg, "'b' is not in model.safetensors.index.json"));
    put(d, "model.safetensors.index.json", "{\"weight_map\":{}}", NULL, 0);
    CHECK(open_dir(d, &e) != LQ_OK && strstr(e.msg, "non-empty object"));
    put(d, "model.safetensors.index.json", "{\"weight_map\":", NULL, 0);
    CHECK(open_dir(d, &e) != LQ_OK && strstr(e.msg, "model.safetensors.index.json"));
}

int main(void)
{
    RUN(test_good);
    RUN(test_bad_headers);
    RUN(test_shards);
    return harness_done();
}
