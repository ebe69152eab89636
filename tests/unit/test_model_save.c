/* lq_model_save_gguf: a model opened from a GGUF and from its vindex, written back, opens to
 * the same logits; extra metadata keys are added (and replace the source's); bad arguments
 * are refused. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"

static char g_src[600], g_vx[600];

static int logits_of(const char *path, float *out, int n_vocab)
{
    lq_model *m = NULL;
    lq_session *s = NULL;
    lq_err err = {0};
    lq_model_opts o;
    memset(&o, 0, sizeof o);
    o.n_threads = 1;
    int32_t ids[5] = {1, 17, 42, 99, 7};
    int rc = lq_model_open(path, &o, &m, &err);
    if (!rc && lq_model_get_info(m)->n_vocab != n_vocab)
        rc = -1;
    if (!rc)
        rc = lq_session_create(m, 64, &s, &err);
    if (!rc)
        rc = lq_session_eval(s, ids, 5, out, NULL, &err);
    if (rc)
        fprintf(stdout, "#   %s: %s\n", path, err.msg);
    lq_session_free(s);
    lq_model_close(m);
    return rc;
}

static void save(const char *from, const char *to, const char *tok_dir, int *rc_out)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts o;
    memset(&o, 0, sizeof o);
    o.n_threads = 1;
    const char *keys[] = {"general.name", "larql.test"}, *vals[] = {"renamed", "carried"};
    lq_model_save_opts so = {.path = to, .tokenizer_dir = tok_dir, .extra_keys = keys, .extra_values = vals,
                             .n_extra = 2};
    int rc = lq_model_open(from, &o, &m, &err);
    if (!rc)
        rc = lq_model_save_gguf(m, &so, &err);
    if (rc)
        fprintf(stdout, "#   save %s: %s\n", from, err.msg);
    lq_model_close(m);
    *rc_out = rc;
}

static void check_keys(const char *path)
{
    lq_gguf *g = NULL;
    lq_err err = {0};
    CHECK(lq_gguf_open(path, &g, &err) == 0);
    if (!g)
        return;
    const char *s;
    uint64_t n;
    CHECK(lq_gguf_get_str(g, "larql.test", &s, &n, NULL) == 0 && n == 7 && !memcmp(s, "carried", 7));
    CHECK(lq_gguf_get_str(g, "general.name", &s, &n, NULL) == 0 && n == 7 && !memcmp(s, "renamed", 7));
    int names = 0; /* the replaced key is there once */
    for (int64_t i = 0; i < lq_gguf_n_kv(g); i++)
        names += !strcmp(lq_gguf_key(g, i), "general.name");
    CHECK(names == 1);
    lq_gguf_close(g);
}

/* ffn 0: the tiny preset's; otherwise rows of that many columns, not whole I2_S blocks (held
 * row-padded: written back flat, byte for byte the source's) */
static void roundtrip(int ffn)
{
    const char *dir = scratch_dir("model_save", 0);
    snprintf(g_src, sizeof g_src, "%s/src.gguf", dir);
    snprintf(g_vx, sizeof g_vx, "%s/src.vindex", dir);
    lq_fixture_opts fo;
    lq_err err = {0};
    CHECK(lq_fixture_preset(&fo, "tiny", &err) == 0);
    fo.seed = 11;
    if (ffn)
        fo.ffn = ffn;
    CHECK(lq_fixture_write(&fo, g_src, &err) == 0);
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.level = LQ_VLEVEL_INFERENCE;
    bo.keep_quant = 1;
    bo.no_clusters = 1;
    CHECK(lq_vindex_build(g_src, g_vx, &bo, &err) == 0);
    int V = fo.vocab;
    float *a = calloc((size_t)V, sizeof *a), *b = calloc((size_t)V, sizeof *b), *c = calloc((size_t)V, sizeof *c);
    char from_gguf[700], from_vx[700];
    snprintf(from_gguf, sizeof from_gguf, "%s/from_gguf.gguf", dir);
    snprintf(from_vx, sizeof from_vx, "%s/from_vx.gguf", dir);
    int r1 = -1, r2 = -1;
    save(g_src, from_gguf, NULL, &r1);
    save(g_vx, from_vx, g_vx, &r2);
    CHECK(r1 == 0 && r2 == 0);
    CHECK(logits_of(g_src, a, V) == 0);
    CHECK(logits_of(from_gguf, b, V) == 0);
    CHECK(logits_of(from_vx, c, V) == 0);
    CHECK_MSG(!memcmp(a, b, (size_t)V * sizeof *a), "a GGUF model written back: other logits");
    CHECK_MSG(!memcmp(a, c, (size_t)V * sizeof *a), "a vindex model written as GGUF: other logits");
    check_keys(from_gguf);
    check_keys(from_vx);
    if (ffn) {
        lq_gguf *g0 = NULL, *g1 = NULL;
        CHECK(lq_gguf_open(g_src, &g0, &err) == 0 && lq_gguf_open(from_vx, &g1, &err) == 0);
        const lq_gguf_tensor *t0 = g0 ? lq_gguf_find_tensor(g0, "blk.1.ffn_down.weight") : NULL;
        const lq_gguf_tensor *t1 = g1 ? lq_gguf_find_tensor(g1, "blk.1.ffn_down.weight") : NULL;
        CHECK(t0 && t1 && t0->ne[0] == (uint64_t)ffn);
        if (t0 && t1)
            CHECK_MSG(t0->n_elements == t1->n_elements && !memcmp(t0->data, t1->data, t0->n_elements / 4 + 4),
                      "ffn_down from the vindex: other bytes than the source's");
        lq_gguf_close(g0);
        lq_gguf_close(g1);
    }
    free(a), free(b), free(c);
}

static void test_roundtrip(void) { roundtrip(0); }
static void test_roundtrip_unaligned_ffn(void) { roundtrip(320); }

static void test_bad_args(void)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts o;
    memset(&o, 0, sizeof o);
    o.n_threads = 1;
    CHECK(lq_model_open(g_vx, &o, &m, &err) == 0);
    lq_model_save_opts so = {.path = NULL};
    CHECK(lq_model_save_gguf(m, &so, &err) == LQ_EINVAL);
    CHECK(lq_model_save_gguf(NULL, &so, &err) == LQ_EINVAL);
    const char *k[] = {"x"};
    lq_model_save_opts s2 = {.path = "unused.gguf", .extra_keys = k, .n_extra = 1}; /* values missing */
    CHECK(lq_model_save_gguf(m, &s2, &err) == LQ_EINVAL);
    char p[700];
    snprintf(p, sizeof p, "%s.out.gguf", g_vx);
    lq_model_save_opts s3 = {.path = p}; /* a vindex model without its tokenizer directory */
    CHECK(lq_model_save_gguf(m, &s3, &err) == LQ_EINVAL && strstr(err.msg, "tokenizer"));
    lq_model_close(m);
}

/* a GGUF of metadata only, carrying larql.patches as given (u32 when text is NULL) */
static void carried_file(const char *path, const char *text)
{
    lq_gguf_writer *w = lq_gguf_writer_create();
    lq_err err = {0};
    if (text)
        lq_gguf_writer_add_str(w, "larql.patches", text);
    else
        lq_gguf_writer_add_u32(w, "larql.patches", 7);
    CHECK(lq_gguf_writer_write(w, path, &err) == 0);
    lq_gguf_writer_free(w);
}

/* lq_overlay_apply_carried on what COMPILE ... INTO MODEL did not write */
static void test_carried_bad(void)
{
    lq_vindex *v = NULL;
    lq_overlay *o = NULL;
    lq_err err = {0};
    lq_vindex_open_opts vo = {0};
    CHECK(lq_vindex_open(g_vx, &vo, &v, &err) == 0);
    CHECK(v && lq_overlay_create(v, NULL, &o, &err) == 0);
    if (!o) {
        lq_vindex_close(v);
        return;
    }
    char p[700];
    snprintf(p, sizeof p, "%s.carried.gguf", g_vx);
    size_t n = 9;
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {NULL, "is not a string"},
        {"{\"name\": 1}", "is not a JSON array"},
        {"not json", "is not a JSON array"},
        {"[{\"patch\": {}}]", "lacks a name or a patch object"},
        {"[{\"name\": \"x\", \"patch\": {\"operations\": [{\"op\": \"fly\"}]}}]", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(p);
        carried_file(p, cases[i].text);
        int rc = lq_overlay_apply_carried(o, p, &n, &err);
        CHECK_MSG(rc != 0 && strstr(err.msg, cases[i].msg), "case %zu: rc %d, %s", i, rc, err.msg);
        CHECK(n == 0 && lq_overlay_n_patches(o) == 0);
    }
    unlink(p);
    carried_file(p, "[]"); /* an empty list: nothing applied, no error */
    CHECK(lq_overlay_apply_carried(o, p, &n, &err) == 0 && n == 0);
    unlink(p);
    lq_overlay_free(o);
    lq_vindex_close(v);
}

int main(void)
{
    RUN(test_roundtrip);
    RUN(test_roundtrip_unaligned_ffn);
    RUN(test_bad_args);
    RUN(test_carried_bad);
    return harness_done();
}
