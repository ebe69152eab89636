/* Model loading and session argument checks: every rejected input names what is wrong. */
#include "harness.h"
#include "unit/tiny_gguf.h"

#include "larql/model.h"

static char g_path[4096];

static const char *write_model(const tg_opts *o, const char *name)
{
    lq_err err = {0};
    snprintf(g_path, sizeof g_path, "%s/%s.gguf", harness_tmpdir(), name);
    int rc = tg_write(o, g_path, &err);
    if (rc != 0)
        printf("#   tg_write(%s): %s\n", name, err.msg);
    return rc == 0 ? g_path : NULL;
}

static lq_model_opts one_thread(void)
{
    lq_model_opts mo = {0};
    mo.n_threads = 1;
    return mo;
}

static void test_open_valid_and_info(void)
{
    tg_opts o = tg_default();
    o.theta_as_u32 = 1; /* rope.freq_base as u32: any numeric type is accepted */
    o.theta = 500000;
    const char *p = write_model(&o, "valid");
    CHECK(p != NULL);
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = one_thread();
    int rc = lq_model_open(p, &mo, &m, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!m)
        return;
    const lq_model_info *in = lq_model_get_info(m);
    CHECK(strcmp(in->arch_name, "bitnet-b1.58") == 0);
    CHECK_EQ_INT(in->arch, LQ_ARCH_BITNET_B158);
    CHECK(strcmp(in->name, "tiny-test") == 0);
    CHECK_EQ_INT(in->n_layer, 2);
    CHECK_EQ_INT(in->n_embd, 128);
    CHECK_EQ_INT(in->n_ff, 256);
    CHECK_EQ_INT(in->n_head, 4);
    CHECK_EQ_INT(in->n_head_kv, 2);
    CHECK_EQ_INT(in->head_dim, 32);
    CHECK_EQ_INT(in->n_vocab, 300);
    CHECK_EQ_INT(in->n_ctx_train, 256);
    CHECK_NEAR(in->rope_theta, 500000.0, 1e-6);
    CHECK_NEAR(in->norm_eps, 1e-5, 1e-9);
    CHECK_EQ_INT(in->tied_embeddings, 1);
    CHECK_EQ_INT(in->embd_type, LQ_GGML_F32);
    CHECK_EQ_INT(in->lm_head_type, LQ_GGML_F32);
    CHECK_EQ_INT(in->proj_type, LQ_GGML_I2_S);
    CHECK_EQ_INT(in->n_threads, 1);
    CHECK(in->kernels && in->kernels[0]);
    CHECK(in->load_ms >= 0);
    /* per layer: q,o 128x128; k,v 64x128; gate,up 256x128; down 128x256 -> elements / 4 */
    uint64_t proj = (2 * 128 * 128 + 2 * 64 * 128 + 3 * 256 * 128) / 4;
    CHECK_EQ_INT(in->bytes_per_token, 2 * proj + 300 * 128 * 4);
    uint64_t params = 300 * 128 + 128 + 2 * (3 * 128 + 256 + 2 * 128 * 128 + 2 * 64 * 128 +
                                             3 * 256 * 128);
    CHECK_EQ_INT(in->n_params, params);
    CHECK(in->weight_bytes >= in->bytes_per_token - 300 * 128 * 4);
    CHECK(lq_model_gguf(m) != NULL);
    CHECK(lq_model_tokenizer(m) == NULL); /* no tokenizer metadata in this file */
    lq_model_close(m);
    lq_model_close(NULL);
}

static void expect_open_error(const tg_opts *o, const char *name, int code, const char *msg)
{
    const char *p = write_model(o, name);
    CHECK(p != NULL);
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = one_thread();
    int rc = lq_model_open(p, &mo, &m, &err);
    CHECK_EQ_INT(rc, code);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(err.msg, msg);
    lq_model_close(m);
}

static void test_wrong_architecture(void)
{
    tg_opts o = tg_default();
    o.arch = "gpt2";
    expect_open_error(&o, "gpt2", LQ_EUNSUPPORTED,
                      "unsupported architecture 'gpt2' (supported: bitnet-b1.58, bitnet, llama)");
}

static void test_missing_tensor(void)
{
    tg_opts o = tg_default();
    o.skip_tensor = "blk.1.ffn_up.weight";
    expect_open_error(&o, "missing", LQ_ENOTFOUND, "blk.1.ffn_up.weight");
    o.skip_tensor = "blk.0.attn_sub_norm.weight";
    expect_open_error(&o, "missing_subnorm", LQ_ENOTFOUND, "blk.0.attn_sub_norm.weight");
    o.skip_tensor = "output_norm.weight";
    expect_open_error(&o, "missing_outnorm", LQ_ENOTFOUND, "output_norm.weight");
}

static void test_shape_mismatch(void)
{
    tg_opts o = tg_default();
    o.bad_shape_tensor = "blk.0.attn_k.weight";
    expect_open_error(&o, "shape", LQ_EFORMAT,
                      "blk.0.attn_k.weight: shape [128, 128], expected [128, 64]");
    o.proj_type = LQ_GGML_F32;
    o.bad_shape_tensor = "blk.1.ffn_down.weight";
    expect_open_error(&o, "shape_f32", LQ_EFORMAT,
                      "blk.1.ffn_down.weight: shape [256, 256], expected [256, 128]");
}

static void test_bad_key_types(void)
{
    tg_opts o = tg_default();
    o.string_key = "block_count";
    expect_open_error(&o, "strkey", LQ_EFORMAT, "bitnet-b1.58.block_count");
    o.string_key = "embedding_length";
    expect_open_error(&o, "strkey2", LQ_EFORMAT, "bitnet-b1.58.embedding_length");
}

static void test_bad_config(void)
{
    tg_opts o = tg_default();
    o.kv_heads = 3; /* 4 heads are not a multiple of 3 kv heads */
    expect_open_error(&o, "kvheads", LQ_EFORMAT, "head_count_kv 3");
}

static void test_unknown_kernels(void)
{
    tg_opts o = tg_default();
    const char *p = write_model(&o, "kern");
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = one_thread();
    mo.kernels = "vliw9000";
    CHECK_EQ_INT(lq_model_open(p, &mo, &m, &err), LQ_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err.msg, "vliw9000");
    mo.kernels = NULL;
    mo.act_mode = 7;
    CHECK_EQ_INT(lq_model_open(p, &mo, &m, &err), LQ_EINVAL);
    CHECK(m == NULL);
}

static void test_missing_file(void)
{
    lq_model *m = NULL;
    lq_err err = {0};
    char p[4200];
    snprintf(p, sizeof p, "%s/does-not-exist.gguf", harness_tmpdir());
    CHECK(lq_model_open(p, NULL, &m, &err) < 0);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(err.msg, "does-not-exist.gguf");
}

static void test_session_errors(void)
{
    tg_opts o = tg_default();
    const char *p = write_model(&o, "sess");
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = one_thread();
    CHECK(lq_model_open(p, &mo, &m, &err) == 0);
    if (!m)
        return;
    lq_session *s = NULL;
    CHECK_EQ_INT(lq_session_create(m, 100000, &s, &err), LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "100000");
    CHECK_EQ_INT(lq_session_create(m, -1, &s, &err), LQ_ERANGE);
    CHECK_EQ_INT(lq_session_create(m, 8, &s, &err), 0);
    CHECK_EQ_INT(lq_session_n_ctx(s), 8);
    CHECK(lq_session_model(s) == m);

    float logits[300];
    int32_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    /* empty input */
    CHECK_EQ_INT(lq_session_eval(s, ids, 0, logits, NULL, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "empty");
    /* id out of range: names the id and the vocabulary; nothing changes */
    int32_t bad[3] = {1, 300, 2};
    CHECK_EQ_INT(lq_session_eval(s, bad, 3, logits, NULL, &err), LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "300");
    CHECK_STR_CONTAINS(err.msg, "n_vocab 300");
    int32_t neg = -5;
    CHECK_EQ_INT(lq_session_decode(s, neg, logits, &err), LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "-5");
    CHECK_EQ_INT(lq_session_pos(s), 0);
    /* context overflow: both numbers named, position unchanged */
    CHECK_EQ_INT(lq_session_eval(s, ids, 9, logits, NULL, &err), LQ_ECONTEXT);
    CHECK_STR_CONTAINS(err.msg, "9");
    CHECK_STR_CONTAINS(err.msg, "n_ctx 8");
    CHECK_EQ_INT(lq_session_pos(s), 0);
    CHECK_EQ_INT(lq_session_eval(s, ids, 6, logits, NULL, &err), 0);
    CHECK_EQ_INT(lq_session_pos(s), 6);
    CHECK_EQ_INT(lq_session_eval(s, ids, 3, logits, NULL, &err), LQ_ECONTEXT);
    CHECK_STR_CONTAINS(err.msg, "position 6 + 3");
    CHECK_EQ_INT(lq_session_pos(s), 6);
    CHECK_EQ_INT(lq_session_eval(s, ids, 2, logits, NULL, &err), 0);
    CHECK_EQ_INT(lq_session_decode(s, 1, logits, &err), LQ_ECONTEXT);
    lq_session_reset(s);
    CHECK_EQ_INT(lq_session_pos(s), 0);
    CHECK_EQ_INT(lq_session_decode(s, 1, logits, &err), 0);

    /* batched decode argument checks */
    lq_session *s2 = NULL;
    CHECK_EQ_INT(lq_session_create(m, 0, &s2, &err), 0);
    CHECK_EQ_INT(lq_session_n_ctx(s2), 256); /* min(training context, 4096) */
    lq_session *pair[2] = {s, s};
    int32_t two[2] = {1, 2};
    CHECK_EQ_INT(lq_session_decode_batch(pair, two, 2, NULL, &err), LQ_EINVAL);
    CHECK_STR_CONTAINS(err.msg, "twice");
    pair[1] = s2;
    two[1] = 999;
    CHECK_EQ_INT(lq_session_decode_batch(pair, two, 2, NULL, &err), LQ_ERANGE);
    CHECK_EQ_INT(lq_session_pos(s), 1);
    CHECK_EQ_INT(lq_session_pos(s2), 0);
    lq_session_free(s2);
    lq_session_free(s);
    lq_session_free(NULL);
    lq_model_close(m);
}

int main(void)
{
    RUN(test_open_valid_and_info);
    RUN(test_wrong_architecture);
    RUN(test_missing_tensor);
    RUN(test_shape_mismatch);
    RUN(test_bad_key_types);
    RUN(test_bad_config);
    RUN(test_unknown_kernels);
    RUN(test_missing_file);
    RUN(test_session_errors);
    tg_cleanup_dir(harness_tmpdir());
    return harness_done();
}
