/* Malformed GGUF files: the committed corpus tests/data/bad_gguf/ (*.gguf) (made by
 * make_bad.py there) must each fail with the status and message listed in EXPECTED, both
 * through lq_gguf_open (mmap) and lq_gguf_open_buffer on an exact-size heap copy (so the
 * sanitizer build sees any read past the end). Then every byte of a valid file is mutated
 * and the result opened and decoded: an error or a valid open, never a crash. */
#include <dirent.h>
#include <stdint.h>

#include "harness.h"
#include "larql/gguf.h"

#define BAD_DIR "tests/data/bad_gguf" /* tests run from the project root */

typedef struct expect {
    char file[128];
    int status;
    char sub[256];
} expect;

static expect g_exp[128];
static int g_n_exp = -1;

static int status_of(const char *s)
{
    if (strcmp(s, "EFORMAT") == 0)
        return LQ_EFORMAT;
    if (strcmp(s, "EUNSUPPORTED") == 0)
        return LQ_EUNSUPPORTED;
    if (strcmp(s, "EIO") == 0)
        return LQ_EIO;
    return 1; /* matches no status: the check fails loudly */
}

static int load_expected(void)
{
    if (g_n_exp >= 0)
        return g_n_exp;
    g_n_exp = 0;
    FILE *f = fopen(BAD_DIR "/EXPECTED", "r");
    if (!f)
        return 0;
    char line[512];
    while (fgets(line, sizeof line, f) && g_n_exp < 128) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#')
            continue;
        expect *e = &g_exp[g_n_exp];
        char st[32];
        int used = 0;
        if (sscanf(line, "%127s %31s %n", e->file, st, &used) < 2 || !used)
            continue;
        e->status = status_of(st);
        snprintf(e->sub, sizeof e->sub, "%s", line + used);
        g_n_exp++;
    }
    fclose(f);
    return g_n_exp;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)(n > 0 ? n : 0);
    return b;
}

/* Opens one corpus file both ways and checks status and message. */
static void check_file(const expect *e)
{
    char path[512];
    snprintf(path, sizeof path, BAD_DIR "/%s", e->file);
    lq_gguf *g = NULL;
    lq_err err = {0};
    int rc = lq_gguf_open(path, &g, &err);
    CHECK_MSG(rc == e->status, "%s: open status %d (%s), want %d; msg '%s'", e->file, rc,
              lq_status_str(rc), e->status, err.msg);
    CHECK_MSG(g == NULL, "%s: handle returned on error", e->file);
    CHECK_MSG(strstr(err.msg, e->sub) != NULL, "%s: message '%s' lacks '%s'", e->file, err.msg,
              e->sub);
    CHECK_MSG(strstr(err.msg, e->file) != NULL, "%s: message '%s' does not name the file",
              e->file, err.msg);
    lq_gguf_close(g);

    size_t len;
    uint8_t *buf = slurp(path, &len);
    CHECK_MSG(buf != NULL, "%s: cannot read", e->file);
    if (!buf)
        return;
    g = NULL;
    lq_err err2 = {0};
    rc = lq_gguf_open_buffer(buf, len, &g, &err2);
    CHECK_MSG(rc == e->status, "%s: buffer status %d, want %d; msg '%s'", e->file, rc, e->status,
              err2.msg);
    CHECK_MSG(strstr(err2.msg, e->sub) != NULL, "%s: buffer message '%s' lacks '%s'", e->file,
              err2.msg, e->sub);
    lq_gguf_close(g);
    free(buf);
}

static void expect_bad(const char *file)
{
    if (!load_expected())
        SKIP(BAD_DIR "/EXPECTED not found (run from the project root)");
    for (int i = 0; i < g_n_exp; i++)
        if (strcmp(g_exp[i].file, file) == 0) {
            check_file(&g_exp[i]);
            return;
        }
    CHECK_MSG(0, "%s is not listed in " BAD_DIR "/EXPECTED", file);
}

#define BAD(name, file)                  \
    static void name(void) { expect_bad(file); }

BAD(test_empty, "empty.gguf")
BAD(test_bad_magic, "bad_magic.gguf")
BAD(test_truncated_header, "truncated_header.gguf")
BAD(test_version1, "version1.gguf")
BAD(test_version4, "version4.gguf")
BAD(test_big_endian, "big_endian.gguf")
BAD(test_n_tensors_cap, "n_tensors_cap.gguf")
BAD(test_n_tensors_fit, "n_tensors_fit.gguf")
BAD(test_n_kv_cap, "n_kv_cap.gguf")
BAD(test_n_kv_fit, "n_kv_fit.gguf")
BAD(test_key_len_eof, "key_len_eof.gguf")
BAD(test_key_len_cap, "key_len_cap.gguf")
BAD(test_str_len_cap, "str_len_cap.gguf")
BAD(test_str_len_eof, "str_len_eof.gguf")
BAD(test_arr_len_cap, "arr_len_cap.gguf")
BAD(test_arr_len_eof, "arr_len_eof.gguf")
BAD(test_arr_str_eof, "arr_str_eof.gguf")
BAD(test_unknown_vtype, "unknown_vtype.gguf")
BAD(test_unknown_arr_type, "unknown_arr_type.gguf")
BAD(test_nested_deep, "nested_deep.gguf")
BAD(test_value_truncated, "value_truncated.gguf")
BAD(test_dup_key, "dup_key.gguf")
BAD(test_align_not_pow2, "align_not_pow2.gguf")
BAD(test_align_zero, "align_zero.gguf")
BAD(test_align_string, "align_string.gguf")
BAD(test_align_float, "align_float.gguf")
BAD(test_key_nul, "key_nul.gguf")
BAD(test_zero_dim, "zero_dim.gguf")
BAD(test_ndims_5, "ndims_5.gguf")
BAD(test_ndims_0, "ndims_0.gguf")
BAD(test_dim_overflow, "dim_overflow.gguf")
BAD(test_dim_too_big, "dim_too_big.gguf")
BAD(test_unknown_ttype, "unknown_ttype.gguf")
BAD(test_name_cap, "name_cap.gguf")
BAD(test_name_nul, "name_nul.gguf")
BAD(test_dup_tensor, "dup_tensor.gguf")
BAD(test_data_past_eof, "data_past_eof.gguf")
BAD(test_offset_past_eof, "offset_past_eof.gguf")
BAD(test_misaligned_offset, "misaligned_offset.gguf")
BAD(test_alignment_64_offset, "alignment_pow2_but_bad_offset.gguf")
BAD(test_overlap, "overlap.gguf")
BAD(test_row_not_block, "row_not_block.gguf")
BAD(test_i2s_not_128, "i2s_not_128.gguf")
BAD(test_i2s_not_4, "i2s_not_4.gguf")
BAD(test_i2s_scale_eof, "i2s_scale_eof.gguf")
BAD(test_i2s_data_eof, "i2s_data_eof.gguf")

/* Every .gguf in the directory is listed, every listed file exists and fails as listed
 * (catches corpus additions that nobody wired up above). */
static void test_corpus_complete(void)
{
    if (!load_expected())
        SKIP(BAD_DIR "/EXPECTED not found (run from the project root)");
    CHECK(g_n_exp >= 40);
    DIR *d = opendir(BAD_DIR);
    CHECK(d != NULL);
    struct dirent *de;
    int files = 0;
    while (d && (de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 5, ".gguf") != 0)
            continue;
        files++;
        int listed = 0;
        for (int i = 0; i < g_n_exp; i++)
            listed |= strcmp(g_exp[i].file, de->d_name) == 0;
        CHECK_MSG(listed, "%s not in EXPECTED", de->d_name);
    }
    if (d)
        closedir(d);
    CHECK_EQ_INT(files, g_n_exp);
    for (int i = 0; i < g_n_exp; i++)
        check_file(&g_exp[i]);
}

/* ---- mutation: every byte of a valid file, three ways ---- */

static uint8_t *valid_file(size_t *len)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_gguf_writer_add_str(w, "general.architecture", "bitnet-b1.58");
    lq_gguf_writer_add_u32(w, "bitnet-b1.58.block_count", 1);
    lq_gguf_writer_add_f32(w, "bitnet-b1.58.rope.freq_base", 500000.0f);
    const char *toks[] = {"a", "bc", "", "def"};
    lq_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    int32_t types[] = {1, 1, 3, 1};
    lq_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", LQ_GGUF_I32, types, 4);
    static int8_t trits[256];
    static uint8_t i2s[256 / 4 + 32], q8[34], tq2[66], tq1[54];
    static float f32[8];
    static uint16_t f16[8];
    for (int i = 0; i < 256; i++)
        trits[i] = (int8_t)(i % 3 - 1);
    lq_i2s_pack(trits, 256, 0.5f, i2s);
    for (int i = 0; i < 34; i++)
        q8[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 66; i++)
        tq2[i] = (uint8_t)(i * 13);
    for (int i = 0; i < 54; i++)
        tq1[i] = (uint8_t)(i * 29);
    for (int i = 0; i < 8; i++) {
        f32[i] = (float)i;
        f16[i] = (uint16_t)(0x3c00 + i);
    }
    lq_gguf_writer_add_tensor(w, "i2s", 2, (const uint64_t[]){128, 2}, LQ_GGML_I2_S, i2s, sizeof i2s);
    lq_gguf_writer_add_tensor(w, "q8", 1, (const uint64_t[]){32}, LQ_GGML_Q8_0, q8, 34);
    lq_gguf_writer_add_tensor(w, "tq2", 1, (const uint64_t[]){256}, LQ_GGML_TQ2_0, tq2, 66);
    lq_gguf_writer_add_tensor(w, "tq1", 1, (const uint64_t[]){256}, LQ_GGML_TQ1_0, tq1, 54);
    lq_gguf_writer_add_tensor(w, "f16", 2, (const uint64_t[]){4, 2}, LQ_GGML_F16, f16, 16);
    lq_gguf_writer_add_tensor(w, "f32", 1, (const uint64_t[]){8}, LQ_GGML_F32, f32, 32);
    uint8_t *buf = NULL;
    lq_gguf_writer_write_buffer(w, &buf, len, NULL);
    lq_gguf_writer_free(w);
    return buf;
}

/* Uses everything an open file offers, the way a loader would. */
static void exercise(const lq_gguf *g)
{
    static float out[1024];
    for (int64_t i = 0; i < lq_gguf_n_kv(g); i++) {
        const char *key = lq_gguf_key(g, i);
        uint64_t u, len;
        double d;
        const char *s;
        lq_gguf_get_u64(g, key, &u, NULL);
        lq_gguf_get_f64(g, key, &d, NULL);
        lq_gguf_get_str(g, key, &s, &len, NULL);
        for (uint64_t j = 0; j < lq_gguf_arr_len(g, i) && j < 8; j++) {
            int64_t v;
            lq_gguf_arr_str(g, i, j, &s, &len);
            lq_gguf_arr_i64(g, i, j, &v);
        }
    }
    for (int64_t i = 0; i < lq_gguf_n_tensors(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_at(g, i);
        if (t->n_elements <= 1024)
            lq_gguf_tensor_to_f32(t, out, NULL);
        if (t->ne[0] <= 1024)
            lq_gguf_tensor_row_f32(t, 0, out, NULL);
    }
}

static void test_mutate_every_byte(void)
{
    size_t len = 0;
    uint8_t *orig = valid_file(&len);
    CHECK(orig != NULL && len > 0);
    if (!orig)
        return;
    uint8_t *buf = malloc(len);
    int opened = 0, failed = 0, silent = 0;
    static const int deltas[] = {0x01, 0x80, 0xff};
    for (size_t pos = 0; pos < len; pos++) {
        for (int k = 0; k < 3; k++) {
            memcpy(buf, orig, len);
            buf[pos] ^= (uint8_t)deltas[k];
            lq_gguf *g = NULL;
            lq_err err = {0};
            int rc = lq_gguf_open_buffer(buf, len, &g, &err);
            if (rc == LQ_OK) {
                opened++;
                exercise(g);
            } else {
                failed++;
                silent += err.msg[0] == 0 || g != NULL;
            }
            lq_gguf_close(g);
        }
    }
    printf("#   %zu bytes x 3 mutations: %d opened, %d rejected\n", len, opened, failed);
    CHECK_EQ_INT(silent, 0); /* every rejection carries a message and no handle */
    CHECK(failed > 0 && opened > 0);
    free(buf);
    free(orig);
}

int main(void)
{
    RUN(test_empty);
    RUN(test_bad_magic);
    RUN(test_truncated_header);
    RUN(test_version1);
    RUN(test_version4);
    RUN(test_big_endian);
    RUN(test_n_tensors_cap);
    RUN(test_n_tensors_fit);
    RUN(test_n_kv_cap);
    RUN(test_n_kv_fit);
    RUN(test_key_len_eof);
    RUN(test_key_len_cap);
    RUN(test_str_len_cap);
    RUN(test_str_len_eof);
    RUN(test_arr_len_cap);
    RUN(test_arr_len_eof);
    RUN(test_arr_str_eof);
    RUN(test_unknown_vtype);
    RUN(test_unknown_arr_type);
    RUN(test_nested_deep);
    RUN(test_value_truncated);
    RUN(test_dup_key);
    RUN(test_align_not_pow2);
    RUN(test_align_zero);
    RUN(test_align_string);
    RUN(test_align_float);
    RUN(test_key_nul);
    RUN(test_zero_dim);
    RUN(test_ndims_5);
    RUN(test_ndims_0);
    RUN(test_dim_overflow);
    RUN(test_dim_too_big);
    RUN(test_unknown_ttype);
    RUN(test_name_cap);
    RUN(test_name_nul);
    RUN(test_dup_tensor);
    RUN(test_data_past_eof);
    RUN(test_offset_past_eof);
    RUN(test_misaligned_offset);
    RUN(test_alignment_64_offset);
    RUN(test_overlap);
    RUN(test_row_not_block);
    RUN(test_i2s_not_128);
    RUN(test_i2s_not_4);
    RUN(test_i2s_scale_eof);
    RUN(test_i2s_data_eof);
    RUN(test_corpus_complete);
    RUN(test_mutate_every_byte);
    return harness_done();
}
