/* The model's own embedding lookup and output head (lq_model_embed,
 * lq_model_logits_from_hidden), the residual capture (lq_session_eval_capture) and the
 * loader dispatch (lq_model_open on a file vs lq_model_open_gguf): what the server's
 * embed/logits routes and the vindex walk mode rest on. */
#include "harness.h"
#include "unit/tiny_gguf.h"

#include "larql/gguf.h"
#include "larql/model.h"

static char g_path[4200];

static lq_model *open_with(int lm_q8, int kv_type)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {0};
    mo.n_threads = 2;
    mo.lm_head_q8 = lm_q8;
    mo.kv_type = kv_type;
    if (lq_model_open(g_path, &mo, &m, &err) != 0)
        printf("#   open: %s\n", err.msg);
    return m;
}

/* logits_from_hidden(the residual after the last layer) is bit for bit the forward pass's
 * logits, for prompts longer than one forward chunk (64), with the f16 and the q8 head */
static void head_equals_forward(int lm_q8)
{
    lq_model *m = open_with(lm_q8, 0);
    CHECK(m);
    if (!m)
        return;
    const lq_model_info *mi = lq_model_get_info(m);
    int L = mi->n_layer, D = mi->n_embd, V = mi->n_vocab;
    int32_t ids[70];
    for (int i = 0; i < 70; i++)
        ids[i] = (i * 37 + 5) % V;
    float *resid = malloc((size_t)L * D * sizeof *resid);
    float *lg = malloc((size_t)V * sizeof *lg), *lg2 = malloc((size_t)V * sizeof *lg2);
    float *lg3 = malloc((size_t)V * sizeof *lg3);
    lq_session *s = NULL;
    lq_err err = {0};
    CHECK(lq_session_create(m, 128, &s, &err) == 0);
    CHECK(lq_session_eval_capture(s, ids, 70, lg, resid, &err) == 0);
    CHECK(lq_model_logits_from_hidden(m, resid + (size_t)(L - 1) * D, 1, lg2, &err) == 0);
    CHECK_MSG(!memcmp(lg, lg2, (size_t)V * sizeof *lg), "head(last residual) != forward logits");
    /* the capture does not change the computation */
    lq_session_reset(s);
    CHECK(lq_session_eval(s, ids, 70, lg3, NULL, &err) == 0);
    CHECK_MSG(!memcmp(lg, lg3, (size_t)V * sizeof *lg), "capture changed the logits");
    /* several rows at once: each row as alone */
    float *two = malloc((size_t)2 * D * sizeof *two), *lg4 = malloc((size_t)2 * V * sizeof *lg4);
    memcpy(two, resid, (size_t)D * sizeof *two);
    memcpy(two + D, resid + (size_t)(L - 1) * D, (size_t)D * sizeof *two);
    CHECK(lq_model_logits_from_hidden(m, two, 2, lg4, &err) == 0);
    CHECK(!memcmp(lg4 + V, lg, (size_t)V * sizeof *lg));
    CHECK(lq_session_eval_capture(s, ids, 1, lg, NULL, &err) == LQ_EINVAL);
    lq_session_free(s);
    free(two);
    free(lg4);
    free(resid);
    free(lg);
    free(lg2);
    free(lg3);
    lq_model_close(m);
}

static void test_head_equals_forward(void) { head_equals_forward(0); }
static void test_head_equals_forward_q8(void) { head_equals_forward(1); }

static void test_embed_rows(void)
{
    lq_model *m = open_with(0, 0);
    lq_gguf *g = NULL;
    lq_err err = {0};
    CHECK(m && lq_gguf_open(g_path, &g, &err) == 0);
    if (!m || !g) {
        lq_model_close(m);
        lq_gguf_close(g);
        return;
    }
    const lq_model_info *mi = lq_model_get_info(m);
    const lq_gguf_tensor *t = lq_gguf_find_tensor(g, "token_embd.weight");
    int32_t ids[3] = {0, 7, mi->n_vocab - 1};
    float *rows = malloc((size_t)3 * mi->n_embd * sizeof *rows), *ref = malloc((size_t)mi->n_embd * sizeof *ref);
    CHECK(lq_model_embed(m, ids, 3, rows, &err) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK(lq_gguf_tensor_row_f32(t, (uint64_t)ids[i], ref, &err) == 0);
        CHECK_MSG(!memcmp(ref, rows + (size_t)i * mi->n_embd, (size_t)mi->n_embd * sizeof *ref), "row %d", ids[i]);
    }
    int32_t bad[2] = {1, mi->n_vocab};
    CHECK(lq_model_embed(m, bad, 2, rows, &err) == LQ_ERANGE);
    CHECK_STR_CONTAINS(err.msg, "out of range");
    bad[1] = -1;
    CHECK(lq_model_embed(m, bad, 2, rows, &err) == LQ_ERANGE);
    CHECK(lq_model_embed(NULL, ids, 1, rows, &err) == LQ_EINVAL);
    CHECK(lq_model_logits_from_hidden(m, NULL, 1, rows, &err) == LQ_EINVAL);
    CHECK(lq_model_logits_from_hidden(m, rows, 0, NULL, &err) == LQ_OK);
    free(rows);
    free(ref);
    lq_gguf_close(g);
    lq_model_close(m);
}

static void test_kv_bytes(void)
{
    lq_model *a = open_with(0, 0), *b = open_with(0, 1);
    CHECK(a && b);
    if (a && b) {
        const lq_model_info *mi = lq_model_get_info(a);
        size_t f32 = (size_t)2 * mi->n_layer * 100 * mi->n_head_kv * mi->head_dim * 4;
        CHECK_EQ_INT(lq_model_kv_bytes(a, 100), f32);
        CHECK_EQ_INT(lq_model_kv_bytes(b, 100) * 2, f32);
        CHECK_EQ_INT(lq_model_kv_bytes(a, -1), 0);
    }
    lq_model_close(a);
    lq_model_close(b);
}

/* lq_model_open decides the loader: a file goes to the GGUF loader; a directory without
 * index.json is refused by the vindex loader, naming the file it misses */
static void test_dispatch(void)
{
    lq_model *m = NULL;
    lq_err err = {0};
    CHECK(lq_model_open_gguf(g_path, NULL, &m, &err) == 0 && m);
    lq_model_close(m);
    m = NULL;
    CHECK(lq_model_open(harness_tmpdir(), NULL, &m, &err) != 0 && !m);
    CHECK_STR_CONTAINS(err.msg, "index.json");
    CHECK(lq_model_open_gguf(harness_tmpdir(), NULL, &m, &err) != 0 && !m);
}

int main(void)
{
    tg_opts o = tg_default();
    o.emb_type = LQ_GGML_F16;
    snprintf(g_path, sizeof g_path, "%s/hidden.gguf", harness_tmpdir());
    lq_err err = {0};
    if (tg_write(&o, g_path, &err) != 0) {
        printf("#   tg_write: %s\n", err.msg);
        return 1;
    }
    RUN(test_head_equals_forward);
    RUN(test_head_equals_forward_q8);
    RUN(test_embed_rows);
    RUN(test_kv_bytes);
    RUN(test_dispatch);
    return harness_done();
}
