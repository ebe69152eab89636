/* Running a model from a vindex directory: the LARQL -> microsoft trit repack, logits equal
 * to the GGUF's (conformance models and a generated fixture, f32 and dense-only vindexes),
 * an f16 vindex close to them, the conformance expectations, and the errors for vindexes
 * that cannot run. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "larql/fixture.h"
#include "larql/gguf.h"
#include "larql/model.h"
#include "larql/vindex.h"
#include "vindex/vindex_internal.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}

static void test_repack(void)
{
    const int rows = 3, cols = 384;
    int8_t tr[3 * 384];
    uint8_t larql[3 * 96], ms[3 * 96];
    memset(larql, 0, sizeof larql);
    for (int i = 0; i < rows * cols; i++) {
        tr[i] = (int8_t)((int)(rnd() % 3) - 1);
        int code = tr[i] > 0 ? 1 : tr[i] < 0 ? 2 : 0;
        if (tr[i] == 0 && i % 7 == 0)
            code = 3; /* reserved code: read as 0, like LARQL */
        larql[i / 4] |= (uint8_t)(code << (2 * (i % 4)));
    }
    lq_vx_i2s_larql_to_ms(larql, ms, rows, cols);
    int bad = 0;
    for (int i = 0; i < rows * cols; i++)
        bad += lq_i2s_get(ms, (uint64_t)i) != tr[i];
    CHECK_EQ_INT(bad, 0);
    /* and it is what lq_i2s_pack writes (scale bytes aside) */
    uint8_t ref[3 * 96 + 32];
    CHECK(lq_i2s_pack(tr, (uint64_t)rows * cols, 1.0f, ref) >= 0);
    CHECK(memcmp(ref, ms, sizeof ms) == 0);
}

/* Rows that are not whole 128-blocks (1bitLLM 3B's ffn_down, 8640): each row padded to
 * whole blocks with zero trits, what the GGUF loader makes of microsoft's flat packing. */
static void test_repack_padded_rows(void)
{
    static const int shapes[][2] = {{320, 5}, {200, 3}, {8640, 2}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const int cols = shapes[k][0], rows = shapes[k][1], pc = (int)lq_i2s_padded_cols((uint64_t)cols);
        int8_t *tr = malloc((size_t)rows * cols);
        uint8_t *larql = calloc((size_t)rows * cols / 4, 1), *ms = malloc((size_t)rows * pc / 4);
        uint8_t *flat = malloc((size_t)rows * cols / 4 + 32), *ref = malloc((size_t)rows * pc / 4);
        for (int i = 0; i < rows * cols; i++) {
            tr[i] = (int8_t)((int)(rnd() % 3) - 1);
            larql[i / 4] |= (uint8_t)((tr[i] > 0 ? 1 : tr[i] < 0 ? 2 : 0) << (2 * (i % 4)));
        }
        lq_vx_i2s_larql_to_ms(larql, ms, rows, cols);
        int bad = 0;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < pc; c++)
                bad += lq_i2s_get(ms, (uint64_t)r * pc + c) != (c < cols ? tr[r * cols + c] : 0);
        CHECK_MSG(bad == 0, "cols %d: %d trits differ", cols, bad);
        /* byte for byte what the GGUF loader holds for the same trits packed flat */
        if ((size_t)rows * cols % 128 == 0) {
            CHECK(lq_i2s_pack(tr, (uint64_t)rows * cols, 1.0f, flat) >= 0);
            lq_i2s_repack_rows(flat, (uint64_t)rows, (uint64_t)cols, ref);
            CHECK(memcmp(ref, ms, (size_t)rows * pc / 4) == 0);
        }
        free(tr);
        free(larql);
        free(ms);
        free(flat);
        free(ref);
    }
}

static int build(const char *gguf, const char *dir, int level, int dense_only, int f16, lq_err *err)
{
    lq_vindex_build_opts bo;
    lq_vindex_build_opts_init(&bo);
    bo.extracted_at = "2026-01-01T00:00:00Z";
    bo.n_threads = 2;
    bo.level = level;
    bo.keep_quant = level >= LQ_VLEVEL_INFERENCE || dense_only;
    bo.dense_only = dense_only;
    bo.f16 = f16;
    return lq_vindex_build(gguf, dir, &bo, err);
}

/* all-position logits of ids through the model at path, its weights held as `hugepages`
 * says (lq_model_opts); NULL on error (reported) */
static float *logits_of_hp(const char *path, const int32_t *ids, size_t n, int act, int hugepages,
                           int *V)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {.n_threads = 2, .act_mode = act, .hugepages = hugepages};
    if (lq_model_open(path, &mo, &m, &err)) {
        CHECK_MSG(0, "open %s: %s", path, err.msg);
        return NULL;
    }
    *V = lq_model_get_info(m)->n_vocab;
    float *all = malloc(n * (size_t)*V * sizeof *all);
    lq_session *s = NULL;
    int rc = lq_session_create(m, 0, &s, &err);
    if (!rc)
        rc = lq_session_eval(s, ids, n, NULL, all, &err);
    CHECK_MSG(rc == 0, "eval %s: %s", path, err.msg);
    lq_session_free(s);
    lq_model_close(m);
    if (rc) {
        free(all);
        return NULL;
    }
    return all;
}

static float *logits_of(const char *path, const int32_t *ids, size_t n, int act, int *V)
{
    return logits_of_hp(path, ids, n, act, 0, V);
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > d)
            d = fabs((double)a[i] - b[i]);
    return d;
}

/* GGUF vs vindexes built from it: f32 (equal), dense-only (equal), f16 (close) */
static void compare_model(const char *gguf, const char *tag, const int32_t *ids, size_t n,
                          double *f16_diff)
{
    char d32[4400], ddo[4400], d16[4400];
    snprintf(d32, sizeof d32, "%s/%s-inf", harness_tmpdir(), tag);
    snprintf(ddo, sizeof ddo, "%s/%s-do", harness_tmpdir(), tag);
    snprintf(d16, sizeof d16, "%s/%s-f16", harness_tmpdir(), tag);
    lq_err err = {0};
    if (build(gguf, d32, LQ_VLEVEL_INFERENCE, 0, 0, &err) || build(gguf, ddo, 0, 1, 0, &err) ||
        build(gguf, d16, LQ_VLEVEL_ALL, 0, 1, &err)) {
        CHECK_MSG(0, "%s: build: %s", tag, err.msg);
        return;
    }
    for (int act = 0; act < 2; act++) {
        int V = 0, V2 = 0;
        float *g = logits_of(gguf, ids, n, act, &V);
        float *a = logits_of(d32, ids, n, act, &V2);
        float *b = logits_of(ddo, ids, n, act, &V2);
        float *c = logits_of(d16, ids, n, act, &V2);
        if (g && a && b && c) {
            size_t N = n * (size_t)V;
            CHECK_MSG(max_diff(g, a, N) <= 1e-5, "%s act %d: f32 vindex differs by %g", tag, act,
                      max_diff(g, a, N));
            CHECK_MSG(max_diff(g, b, N) <= 1e-5, "%s act %d: dense-only vindex differs by %g", tag,
                      act, max_diff(g, b, N));
            /* f16 norms (truncated as LARQL does) perturb every layer. With f32
             * activations that stays small everywhere; with int8 activations a perturbed
             * value flips roundings, which random weights amplify (measured ~0.1-0.2 at
             * position 0, ~1.5 after 70 positions), so only position 0 is bounded there */
            double d = max_diff(g, c, N), d0 = max_diff(g, c, (size_t)V);
            if (d > *f16_diff)
                *f16_diff = d;
            printf("# %s act %d: f16 vindex max |dlogit| %.3g (position 0: %.3g)\n", tag, act, d, d0);
            if (act == LQ_ACT_F32)
                CHECK_MSG(d < 0.25, "%s f32 act: f16 vindex differs by %g", tag, d);
            else
                CHECK_MSG(d0 < 0.5, "%s int8 act: f16 vindex differs by %g at position 0", tag, d0);
        }
        free(g);
        free(a);
        free(b);
        free(c);
    }
    /* weights in 2 MB-page copies (GGUF and vindex) compute exactly what the mappings do */
    int V = 0, V2 = 0;
    float *gm = logits_of_hp(gguf, ids, n, LQ_ACT_INT8, -1, &V);
    float *gh = logits_of_hp(gguf, ids, n, LQ_ACT_INT8, 1, &V2);
    float *vm = logits_of_hp(d16, ids, n, LQ_ACT_INT8, -1, &V2);
    float *vh = logits_of_hp(d16, ids, n, LQ_ACT_INT8, 1, &V2);
    if (gm && gh && vm && vh) {
        size_t N = n * (size_t)V;
        CHECK_MSG(max_diff(gm, gh, N) == 0, "%s: GGUF huge-page copy differs by %g", tag,
                  max_diff(gm, gh, N));
        CHECK_MSG(max_diff(vm, vh, N) == 0, "%s: vindex huge-page copy differs by %g", tag,
                  max_diff(vm, vh, N));
    }
    free(gm);
    free(gh);
    free(vm);
    free(vh);
}

static void test_fixture_equal(void)
{
    char g[4400];
    snprintf(g, sizeof g, "%s/fx.gguf", harness_tmpdir());
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK(lq_fixture_preset(&o, "tiny", &err) == 0);
    o.emb_type = LQ_GGML_F16;
    o.seed = 7;
    if (lq_fixture_write(&o, g, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    int32_t ids[70];
    for (int i = 0; i < 70; i++) /* > LQ_MAX_BATCH positions: two prefill chunks */
        ids[i] = (int32_t)(rnd() % 300);
    double d16 = 0;
    compare_model(g, "fx", ids, 70, &d16);
    printf("# fixture: f16 vindex max |dlogit| %.3g\n", d16);
}

/* Projections of 1 MiB and more are repacked into 2 MB pages when the weights are copied:
 * a model wide enough for that gives the same logits from the vindex held either way and
 * from its GGUF. */
static void test_huge_repack(void)
{
    char g[4400], d[4400];
    snprintf(g, sizeof g, "%s/wide.gguf", harness_tmpdir());
    snprintf(d, sizeof d, "%s/wide-inf", harness_tmpdir());
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK(lq_fixture_preset(&o, "tiny", &err) == 0);
    o.dim = 1024;
    o.ffn = 4096; /* 1024 x 4096 ternary = 1 MiB per FFN matrix */
    o.layers = 1;
    o.heads = 8;
    o.kv_heads = 4;
    o.seed = 11;
    if (lq_fixture_write(&o, g, &err) || build(g, d, LQ_VLEVEL_INFERENCE, 0, 0, &err)) {
        CHECK_MSG(0, "wide model: %s", err.msg);
        return;
    }
    int32_t ids[12];
    for (int i = 0; i < 12; i++)
        ids[i] = (int32_t)(rnd() % 300);
    int V = 0, V2 = 0;
    float *gg = logits_of_hp(g, ids, 12, LQ_ACT_INT8, -1, &V);
    float *vm = logits_of_hp(d, ids, 12, LQ_ACT_INT8, -1, &V2);
    float *vh = logits_of_hp(d, ids, 12, LQ_ACT_INT8, 1, &V2);
    if (gg && vm && vh) {
        size_t N = 12 * (size_t)V;
        CHECK_MSG(max_diff(vm, vh, N) == 0, "wide: vindex copy differs from its mapping by %g",
                  max_diff(vm, vh, N));
        CHECK_MSG(max_diff(gg, vh, N) <= 1e-5, "wide: vindex differs from the GGUF by %g",
                  max_diff(gg, vh, N));
    }
    free(gg);
    free(vm);
    free(vh);
}

static void test_conformance(void)
{
    const char *cd = harness_conformance_dir();
    if (!cd)
        SKIP("../shared/conformance absent");
    static const char *names[] = {"bitnet-tiny-a", "bitnet-tiny-b"};
    for (int k = 0; k < 2; k++) {
        char gpath[4300], jpath[4300], dir[4400];
        snprintf(gpath, sizeof gpath, "%s/bitnet/%s.gguf", cd, names[k]);
        snprintf(jpath, sizeof jpath, "%s/bitnet/%s.expected.json", cd, names[k]);
        json_error_t je;
        json_t *root = json_load_file(jpath, 0, &je);
        if (!root) {
            printf("# skip %s: %s\n", names[k], je.text);
            continue;
        }
        json_t *jids = json_object_get(root, "ids");
        size_t n = json_array_size(jids);
        int32_t *ids = calloc(n ? n : 1, sizeof *ids);
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        double d16 = 0;
        compare_model(gpath, names[k], ids, n, &d16);
        printf("# %s: f16 vindex max |dlogit| %.3g\n", names[k], d16);
        /* the vindex against the reference logits ("ms" mode, top-10 within 1e-3) and the
         * greedy continuation */
        snprintf(dir, sizeof dir, "%s/%s-inf", harness_tmpdir(), names[k]);
        int V = 0;
        float *lg = logits_of(dir, ids, n, LQ_ACT_INT8, &V);
        json_t *pos = json_object_get(json_object_get(json_object_get(root, "modes"), "ms"), "positions");
        double worst = 0;
        for (size_t p = 0; lg && p < n && p < json_array_size(pos); p++) {
            json_t *top = json_object_get(json_array_get(pos, p), "top");
            for (size_t r = 0; r < json_array_size(top); r++) {
                json_t *e = json_array_get(top, r);
                int id = (int)json_integer_value(json_array_get(e, 0));
                double want = json_number_value(json_array_get(e, 1));
                if (id >= 0 && id < V && fabs(lg[p * (size_t)V + id] - want) > worst)
                    worst = fabs(lg[p * (size_t)V + id] - want);
            }
        }
        CHECK_MSG(lg && worst < 1e-3, "%s: vindex vs reference logits: %g", names[k], worst);
        free(lg);
        /* greedy continuation from the vindex */
        json_t *greedy = json_object_get(json_object_get(json_object_get(root, "modes"), "ms"), "greedy");
        lq_model *m = NULL;
        lq_err err = {0};
        lq_model_opts mo = {.n_threads = 2};
        if (lq_model_open(dir, &mo, &m, &err) == 0) {
            lq_session *s = NULL;
            float *l = malloc((size_t)V * sizeof *l);
            int ok = lq_session_create(m, 0, &s, &err) == 0 && lq_session_eval(s, ids, n, l, NULL, &err) == 0;
            for (size_t g = 0; ok && g < json_array_size(greedy); g++) {
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (l[v] > l[best])
                        best = v;
                ok = best == json_integer_value(json_array_get(greedy, g));
                CHECK_MSG(ok, "%s: greedy token %zu: %d, expected %lld", names[k], g, best,
                          (long long)json_integer_value(json_array_get(greedy, g)));
                if (ok && g + 1 < json_array_size(greedy))
                    ok = lq_session_decode(s, best, l, &err) == 0;
            }
            free(l);
            lq_session_free(s);
            lq_model_close(m);
        } else {
            CHECK_MSG(0, "%s", err.msg);
        }
        free(ids);
        json_decref(root);
    }
}

/* ---- vindexes that cannot run ---- */

static int expect_open_fails(const char *dir, int code, const char *needle)
{
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {.n_threads = 1};
    int rc = lq_model_open(dir, &mo, &m, &err);
    lq_model_close(m);
    CHECK_MSG(rc == code, "%s: rc %d (want %d): %s", dir, rc, code, err.msg);
    CHECK_STR_CONTAINS(err.msg, needle);
    return rc;
}

static void put_bytes(const char *dir, const char *name, long off, const void *b, size_t n)
{
    char p[4500];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, off, SEEK_SET);
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_bad(void)
{
    char g[4400], d[4400];
    lq_err err = {0};
    snprintf(g, sizeof g, "%s/bad.gguf", harness_tmpdir());
    lq_fixture_opts o;
    lq_fixture_preset(&o, "tiny", &err);
    o.seed = 11;
    if (lq_fixture_write(&o, g, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    /* browse vindex: no weights */
    snprintf(d, sizeof d, "%s/b-browse", harness_tmpdir());
    CHECK(build(g, d, LQ_VLEVEL_BROWSE, 0, 0, &err) == 0);
    expect_open_fails(d, LQ_EUNSUPPORTED, "does not contain model weights");
    /* a directory without index.json is not a vindex: the GGUF path reports it */
    char nd[4500];
    snprintf(nd, sizeof nd, "%s/not-a-vindex", harness_tmpdir());
    mkdir(nd, 0755);
    lq_model *m = NULL;
    CHECK(lq_model_open(nd, NULL, &m, &err) != 0 && m == NULL);

    static const struct {
        const char *what, *file;
        long off;
        int truncate_to; /* -1: write bytes instead */
        int code;
        const char *needle;
    } cases[] = {
        {"truncated i2s", "bitnet/layers.0.mlp.down_proj.weight.i2s", 0, 10, LQ_EFORMAT, "expected rows"},
        {"truncated scales", "bitnet/scales.f32", 0, 8, LQ_EFORMAT, "total_scale_count"},
        {"row scales differ", "bitnet/scales.f32", 4, -1, LQ_EUNSUPPORTED, "per-row scales"},
        {"truncated norms", "norms.bin", 0, 16, LQ_EFORMAT, "past the end"},
        {"missing manifest", "weight_manifest.json", 0, -2, LQ_ENOTFOUND, "weight_manifest.json"},
        {"missing i2s", "bitnet/layers.1.self_attn.q_proj.weight.i2s", 0, -2, LQ_ENOTFOUND, "q_proj"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(d, sizeof d, "%s/b-%zu", harness_tmpdir(), i);
        if (build(g, d, LQ_VLEVEL_INFERENCE, 0, 0, &err)) {
            CHECK_MSG(0, "build: %s", err.msg);
            continue;
        }
        char p[4500];
        snprintf(p, sizeof p, "%s/%s", d, cases[i].file);
        if (cases[i].truncate_to >= 0) {
            CHECK(truncate(p, cases[i].truncate_to) == 0);
        } else if (cases[i].truncate_to == -2) {
            CHECK(unlink(p) == 0);
        } else {
            float x = 123.5f;
            put_bytes(d, cases[i].file, cases[i].off, &x, 4);
        }
        printf("# %s\n", cases[i].what);
        expect_open_fails(d, cases[i].code, cases[i].needle);
    }
    /* llama vindexes: browse level has no projections; broken dense files are named */
    lq_fixture_preset(&o, "tiny", &err);
    o.arch = "llama";
    snprintf(g, sizeof g, "%s/llama.gguf", harness_tmpdir());
    CHECK(lq_fixture_write(&o, g, &err) == 0);
    snprintf(d, sizeof d, "%s/b-llama-browse", harness_tmpdir());
    CHECK(build(g, d, LQ_VLEVEL_BROWSE, 0, 0, &err) == 0);
    expect_open_fails(d, LQ_EUNSUPPORTED, "does not contain model weights");
    static const struct {
        const char *what, *file;
        int truncate_to; /* -2: delete */
        int code;
        const char *needle;
    } lcases[] = {
        {"truncated attn_weights", "attn_weights.bin", 100, LQ_EFORMAT, "past the end"},
        {"missing up_weights", "up_weights.bin", -2, LQ_ENOTFOUND, "up_weights.bin"},
        {"truncated down_weights", "down_weights.bin", 0, LQ_EFORMAT, "down_weights.bin"},
    };
    for (size_t i = 0; i < sizeof lcases / sizeof lcases[0]; i++) {
        snprintf(d, sizeof d, "%s/b-llama-%zu", harness_tmpdir(), i);
        if (build(g, d, LQ_VLEVEL_INFERENCE, 0, 0, &err)) {
            CHECK_MSG(0, "build: %s", err.msg);
            continue;
        }
        char p[4500];
        snprintf(p, sizeof p, "%s/%s", d, lcases[i].file);
        if (lcases[i].truncate_to >= 0)
            CHECK(truncate(p, lcases[i].truncate_to) == 0);
        else
            CHECK(unlink(p) == 0);
        printf("# llama: %s\n", lcases[i].what);
        expect_open_fails(d, lcases[i].code, lcases[i].needle);
    }
    /* a manifest shape that disagrees with the model */
    snprintf(d, sizeof d, "%s/b-llama-shape", harness_tmpdir());
    if (build(g, d, LQ_VLEVEL_INFERENCE, 0, 0, &err) == 0) {
        char p[4500];
        snprintf(p, sizeof p, "%s/weight_manifest.json", d);
        json_t *man = json_load_file(p, 0, NULL);
        json_t *e = json_array_get(man, 1); /* layers.0.self_attn.k_proj.weight */
        json_array_set_new(json_object_get(e, "shape"), 0, json_integer(3));
        CHECK(json_dump_file(man, p, JSON_INDENT(2)) == 0);
        json_decref(man);
        expect_open_fails(d, LQ_EFORMAT, "k_proj");
    }
}

/* ---- llama vindexes: the dense projections LARQL writes, run in place ---- */

/* The manifest of an inference vindex in LARQL's write_model_weights order: per layer q, k,
 * v, o (attn_weights.bin); per layer up, down; norms; lm_head. Each dense entry's bytes are
 * the GGUF tensor's values (unit trits for I2_S) in the vindex dtype. */
static void check_manifest(const char *gguf, const char *dir, int f16)
{
    char p[4500];
    snprintf(p, sizeof p, "%s/weight_manifest.json", dir);
    json_t *man = json_load_file(p, 0, NULL);
    lq_gguf *g = NULL;
    lq_err err = {0};
    if (!man || lq_gguf_open(gguf, &g, &err)) {
        CHECK_MSG(0, "%s: %s", p, err.msg);
        json_decref(man);
        return;
    }
    uint64_t L = 0;
    while (1) {
        char n[64];
        snprintf(n, sizeof n, "blk.%llu.attn_q.weight", (unsigned long long)L);
        if (!lq_gguf_find_tensor(g, n))
            break;
        L++;
    }
    static const char *ag[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    static const char *ah[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"};
    size_t idx = 0, bad = 0;
    uint64_t off[3] = {0, 0, 0};
    static const char *files[3] = {"attn_weights.bin", "up_weights.bin", "down_weights.bin"};
    lq_mapfile mf[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        CHECK(lq_mapfile_open(&mf[i], p, &err) == 0);
    }
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t l = 0; l < L; l++)
            for (int j = 0; j < (pass ? 2 : 4); j++) {
                const char *gn = pass ? (j ? "ffn_down" : "ffn_up") : ag[j];
                const char *hn = pass ? (j ? "mlp.down_proj" : "mlp.up_proj") : ah[j];
                int fi = pass ? 1 + j : 0;
                char gname[96], key[96];
                snprintf(gname, sizeof gname, "blk.%llu.%s.weight", (unsigned long long)l, gn);
                snprintf(key, sizeof key, "layers.%llu.%s.weight", (unsigned long long)l, hn);
                const lq_gguf_tensor *t = lq_gguf_find_tensor(g, gname);
                json_t *e = json_array_get(man, idx++);
                const char *k = json_string_value(json_object_get(e, "key"));
                json_t *sh = json_object_get(e, "shape");
                uint64_t n = t ? t->ne[0] * t->ne[1] : 0, es = f16 ? 2 : 4;
                int ok = t && k && !strcmp(k, key) &&
                         !strcmp(json_string_value(json_object_get(e, "kind")), "tensor") &&
                         !strcmp(json_string_value(json_object_get(e, "file")), files[fi]) &&
                         json_integer_value(json_array_get(sh, 0)) == (json_int_t)t->ne[1] &&
                         json_integer_value(json_array_get(sh, 1)) == (json_int_t)t->ne[0] &&
                         json_integer_value(json_object_get(e, "offset")) == (json_int_t)off[fi] &&
                         json_integer_value(json_object_get(e, "length")) == (json_int_t)(n * es);
                CHECK_MSG(ok, "manifest entry %zu: '%s', expected '%s' at %llu", idx - 1, k ? k : "?", key,
                          (unsigned long long)off[fi]);
                if (!ok || !mf[fi].data || off[fi] + n * es > mf[fi].size) {
                    bad++;
                    continue;
                }
                /* values: the GGUF's (unit trits for I2_S), f16 by LARQL's truncation */
                float *row = malloc(t->ne[0] * sizeof *row), s = 1.0f;
                if (t->type == LQ_GGML_I2_S)
                    lq_gguf_i2s_scale(t, &s, NULL);
                for (uint64_t r = 0; r < t->ne[1]; r++) {
                    lq_gguf_tensor_row_f32(t, r, row, NULL);
                    for (uint64_t c = 0; c < t->ne[0]; c++) {
                        float want = t->type == LQ_GGML_I2_S ? row[c] / s : row[c];
                        const uint8_t *q = mf[fi].data + off[fi] + (r * t->ne[0] + c) * es;
                        if (f16) {
                            uint16_t h;
                            memcpy(&h, q, 2);
                            bad += h != lq_vx_f32_to_f16_trunc(want);
                        } else {
                            bad += memcmp(q, &want, 4) != 0;
                        }
                    }
                }
                free(row);
                off[fi] += n * es;
            }
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(mf[i].size == off[i], "%s: %zu bytes, manifest covers %llu", files[i], mf[i].size,
                  (unsigned long long)off[i]);
        lq_mapfile_close(&mf[i]);
    }
    CHECK_MSG(bad == 0, "%s: %zu dense values/entries differ from the GGUF", dir, bad);
    /* then norms, lm_head last */
    const char *last = json_string_value(json_object_get(json_array_get(man, json_array_size(man) - 1), "key"));
    CHECK(last && !strcmp(last, "lm_head.weight"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(man, idx), "file")), "norms.bin"));
    /* the checksums cover the dense files and verify */
    lq_vindex *v = NULL;
    if (lq_vindex_open(dir, NULL, &v, &err) == 0) {
        json_t *cs = json_object_get(v->index, "checksums");
        for (int i = 0; i < 3; i++)
            CHECK_MSG(json_is_string(json_object_get(cs, files[i])), "checksums.%s missing", files[i]);
        CHECK_MSG(lq_vindex_verify_checksums(v, &err) == 0, "%s", err.msg);
        lq_vindex_close(v);
    } else {
        CHECK_MSG(0, "open %s: %s", dir, err.msg);
    }
    lq_gguf_close(g);
    json_decref(man);
}

static void compare_llama(const char *gguf, const char *tag, const int32_t *ids, size_t n)
{
    char d32[4400], d16[4400];
    snprintf(d32, sizeof d32, "%s/%s-inf", harness_tmpdir(), tag);
    snprintf(d16, sizeof d16, "%s/%s-f16", harness_tmpdir(), tag);
    lq_err err = {0};
    if (build(gguf, d32, LQ_VLEVEL_INFERENCE, 0, 0, &err) || build(gguf, d16, LQ_VLEVEL_ALL, 0, 1, &err)) {
        CHECK_MSG(0, "%s: build: %s", tag, err.msg);
        return;
    }
    check_manifest(gguf, d32, 0);
    check_manifest(gguf, d16, 1);
    int V = 0, V2 = 0;
    float *g = logits_of(gguf, ids, n, LQ_ACT_F32, &V);
    float *a = logits_of(d32, ids, n, LQ_ACT_F32, &V2);
    float *c = logits_of(d16, ids, n, LQ_ACT_F32, &V2);
    if (g && a && c) {
        size_t N = n * (size_t)V;
        CHECK_MSG(max_diff(g, a, N) <= 1e-5, "%s: f32 llama vindex differs by %g", tag, max_diff(g, a, N));
        double d = max_diff(g, c, N);
        printf("# %s: f32 vindex max |dlogit| %.3g, f16 vindex %.3g\n", tag, max_diff(g, a, N), d);
        CHECK_MSG(d < 0.5, "%s: f16 llama vindex differs by %g", tag, d);
    }
    free(g);
    free(a);
    free(c);
    /* the model runs the vindex's mapped rows in place */
    lq_model *m = NULL;
    lq_model_opts mo = {.n_threads = 1};
    if (lq_model_open(d32, &mo, &m, &err) == 0) {
        const lq_model_info *in = lq_model_get_info(m);
        CHECK(in->arch == LQ_ARCH_LLAMA && in->proj_type == LQ_GGML_F32);
        lq_model_close(m);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
}

static void test_llama_fixture(void)
{
    char g[4400];
    snprintf(g, sizeof g, "%s/llama-fx.gguf", harness_tmpdir());
    lq_fixture_opts o;
    lq_err err = {0};
    CHECK(lq_fixture_preset(&o, "tiny", &err) == 0);
    o.arch = "llama";
    o.seed = 5;
    if (lq_fixture_write(&o, g, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    int32_t ids[70];
    for (int i = 0; i < 70; i++)
        ids[i] = (int32_t)(rnd() % 300);
    compare_llama(g, "llama-fx", ids, 70);
    /* a BitNet inference vindex holds the projections too, as unit-scale trits */
    char gb[4400], db[4400];
    snprintf(gb, sizeof gb, "%s/bitnet-dense.gguf", harness_tmpdir());
    snprintf(db, sizeof db, "%s/bitnet-dense", harness_tmpdir());
    CHECK(lq_fixture_preset(&o, "tiny", &err) == 0);
    o.seed = 6;
    if (lq_fixture_write(&o, gb, &err) || build(gb, db, LQ_VLEVEL_INFERENCE, 0, 0, &err)) {
        CHECK_MSG(0, "bitnet: %s", err.msg);
        return;
    }
    check_manifest(gb, db, 0);
}

/* stories260K (llama2.c, SentencePiece): vindex logits equal the GGUF's, and the greedy
 * continuation of prompt [B] of stories260K_golden.txt */
static void test_stories(void)
{
    const char *cd = harness_conformance_dir();
    if (!cd)
        SKIP("../shared/conformance absent");
    char gpath[4300];
    snprintf(gpath, sizeof gpath, "%s/llama/stories260K.gguf", cd);
    if (access(gpath, R_OK) != 0)
        SKIP("stories260K.gguf absent");
    static const int32_t prompt[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 400, 428};
    static const int32_t want[] = {395, 392, 412, 444, 426, 392, 412, 444, 401, 396, 267, 337, 335, 345,
                                   267, 422, 419, 269, 352, 379, 261, 420, 277, 264, 426, 385, 328, 432,
                                   392, 412, 444, 394, 261, 370, 268, 414, 444, 322};
    compare_llama(gpath, "stories", prompt, sizeof prompt / sizeof prompt[0]);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/stories-inf", harness_tmpdir());
    lq_model *m = NULL;
    lq_err err = {0};
    lq_model_opts mo = {.n_threads = 2};
    if (lq_model_open(dir, &mo, &m, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    /* the vindex's tokenizer.json (SentencePiece as Unigram) encodes the prompt as llama2.c */
    int32_t *tids = NULL;
    size_t nt = 0;
    const char *text = "Once upon a time, there was a dog";
    CHECK(lq_tokenizer_encode(lq_model_tokenizer(m), text, strlen(text), LQ_TOK_ADD_BOS, &tids, &nt, &err) == 0);
    CHECK_EQ_INT((int)nt, (int)(sizeof prompt / sizeof prompt[0]));
    for (size_t i = 0; tids && i < nt && i < sizeof prompt / sizeof prompt[0]; i++)
        CHECK_EQ_INT(tids[i], prompt[i]);
    free(tids);
    int V = lq_model_get_info(m)->n_vocab;
    lq_session *s = NULL;
    float *l = malloc((size_t)V * sizeof *l);
    int ok = lq_session_create(m, 0, &s, &err) == 0 &&
             lq_session_eval(s, prompt, sizeof prompt / sizeof prompt[0], l, NULL, &err) == 0;
    CHECK_MSG(ok, "%s", err.msg);
    for (size_t i = 0; ok && i < sizeof want / sizeof want[0]; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[best])
                best = v;
        ok = best == want[i];
        CHECK_MSG(ok, "stories greedy token %zu: %d, expected %d", i, best, want[i]);
        if (ok && i + 1 < sizeof want / sizeof want[0])
            ok = lq_session_decode(s, best, l, &err) == 0;
    }
    free(l);
    lq_session_free(s);
    lq_model_close(m);
}

/* ---- infer ---- */

static json_t *infer_body(lq_model *m, const char *prompt, const char *mode, int top,
                          const lq_knn_store *ks)
{
    lq_infer_params p;
    lq_infer_params_init(&p);
    p.prompt = prompt;
    p.mode = mode;
    p.top = top;
    p.knn = ks;
    char *body = NULL;
    lq_err err = {0};
    int rc = lq_infer_json(m, &p, &body, &err);
    CHECK_MSG(rc == 0, "infer %s: %s", mode, err.msg);
    json_error_t je;
    json_t *j = rc ? NULL : json_loads(body, 0, &je);
    CHECK_MSG(rc || j, "infer %s: body is not JSON: %s", mode, body);
    free(body);
    return j;
}

static int keys_are(const json_t *o, const char *const *keys, size_t n)
{
    if (!json_is_object(o) || json_object_size(o) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!json_object_get(o, keys[i]))
            return 0;
    return 1;
}

static int rounded4(const json_t *preds)
{
    size_t i;
    json_t *x;
    json_array_foreach(preds, i, x) {
        double p = json_number_value(json_object_get(x, "probability"));
        if (fabs(p * 1e4 - round(p * 1e4)) > 1e-6 || !json_is_string(json_object_get(x, "token")))
            return 0;
    }
    return 1;
}

static void test_infer(void)
{
    char g[4400], d[4400], ddo[4400];
    lq_err err = {0};
    snprintf(g, sizeof g, "%s/inf.gguf", harness_tmpdir());
    snprintf(d, sizeof d, "%s/inf-v", harness_tmpdir());
    snprintf(ddo, sizeof ddo, "%s/inf-do", harness_tmpdir());
    lq_fixture_opts o;
    lq_fixture_preset(&o, "tiny", &err);
    o.seed = 21;
    if (lq_fixture_write(&o, g, &err) || build(g, d, LQ_VLEVEL_INFERENCE, 0, 0, &err) ||
        build(g, ddo, 0, 1, 0, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_model *m = NULL, *mdo = NULL, *mg = NULL;
    lq_model_opts mo = {.n_threads = 2};
    if (lq_model_open(d, &mo, &m, &err) || lq_model_open(ddo, &mo, &mdo, &err) ||
        lq_model_open(g, &mo, &mg, &err)) {
        CHECK_MSG(0, "open: %s", err.msg);
        goto out;
    }
    CHECK(lq_vindex_of_model(m) != NULL && lq_vindex_of_model(mg) == NULL);
    const char *prompt = "the model reads";
    /* walk (empty store) == dense, field sets as LARQL's */
    json_t *w = infer_body(m, prompt, "walk", 5, NULL), *dn = infer_body(m, prompt, "dense", 5, NULL);
    json_t *c = infer_body(m, prompt, "compare", 5, NULL), *u = infer_body(m, prompt, "bogus", 5, NULL);
    static const char *kw[] = {"prompt", "predictions", "mode", "latency_ms"};
    static const char *kc[] = {"prompt", "walk", "walk_ms", "dense", "dense_ms", "latency_ms"};
    static const char *kd[] = {"prompt", "dense", "dense_ms", "latency_ms"};
    static const char *ku[] = {"prompt", "latency_ms"};
    if (w && dn && c && u) {
        CHECK(keys_are(w, kw, 4) && !strcmp(json_string_value(json_object_get(w, "mode")), "walk"));
        CHECK(keys_are(dn, kw, 4) && !strcmp(json_string_value(json_object_get(dn, "mode")), "bitnet"));
        CHECK(keys_are(c, kc, 6));
        CHECK(keys_are(u, ku, 2));
        CHECK(!strcmp(json_string_value(json_object_get(w, "prompt")), prompt));
        CHECK_EQ_INT((int)json_array_size(json_object_get(w, "predictions")), 5);
        CHECK(json_equal(json_object_get(w, "predictions"), json_object_get(dn, "predictions")));
        CHECK(json_equal(json_object_get(c, "walk"), json_object_get(c, "dense")));
        CHECK(json_equal(json_object_get(c, "walk"), json_object_get(w, "predictions")));
        CHECK(rounded4(json_object_get(w, "predictions")));
        /* sorted by probability, summing to at most 1 */
        double prev = 2, sum = 0;
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(w, "predictions"), i, x) {
            double p = json_number_value(json_object_get(x, "probability"));
            CHECK(p <= prev);
            prev = p;
            sum += p;
        }
        CHECK(sum <= 1.0005);
    }
    json_decref(w);
    json_decref(dn);
    json_decref(c);
    json_decref(u);
    /* the same predictions as the struct API, and as the GGUF (dense; walk coerced) */
    json_t *gw = infer_body(mg, prompt, "walk", 5, NULL), *vw = infer_body(m, prompt, "dense", 5, NULL);
    if (gw && vw) {
        CHECK(!strcmp(json_string_value(json_object_get(gw, "mode")), "bitnet"));
        CHECK(json_equal(json_object_get(gw, "predictions"), json_object_get(vw, "predictions")));
    }
    json_decref(gw);
    json_decref(vw);
    /* dense-only coercion: walk -> bitnet, compare -> dense only */
    json_t *dw = infer_body(mdo, prompt, "walk", 3, NULL), *dc = infer_body(mdo, prompt, "compare", 3, NULL);
    if (dw && dc) {
        CHECK(keys_are(dw, kw, 4) && !strcmp(json_string_value(json_object_get(dw, "mode")), "bitnet"));
        CHECK(keys_are(dc, kd, 4));
        CHECK_EQ_INT((int)json_array_size(json_object_get(dc, "dense")), 3);
    }
    json_decref(dw);
    json_decref(dc);
    /* top 0: no predictions */
    json_t *z = infer_body(m, prompt, "dense", 0, NULL);
    CHECK(z && json_array_size(json_object_get(z, "predictions")) == 0);
    json_decref(z);
    /* bad requests */
    lq_infer_params p;
    lq_infer_params_init(&p);
    char *body = NULL;
    p.prompt = "";
    CHECK(lq_infer_json(m, &p, &body, &err) == LQ_EINVAL && body == NULL);
    CHECK_STR_CONTAINS(err.msg, "empty prompt");
    p.prompt = "x";
    p.top = -1;
    CHECK(lq_infer_json(m, &p, &body, &err) == LQ_EINVAL);

    /* KNN override: a key equal to the residual at layer 1 fires there with cosine 1 */
    const lq_model_info *in = lq_model_get_info(m);
    float *res = malloc((size_t)in->n_layer * in->n_embd * sizeof *res);
    lq_knn_store *ks = NULL;
    CHECK(lq_knn_store_create(in->n_embd, &ks, &err) == 0);
    CHECK(lq_infer_residuals(m, prompt, res, &err) == 0);
    /* a key pointing elsewhere does not fire */
    float *other = malloc((size_t)in->n_embd * sizeof *other);
    for (int i = 0; i < in->n_embd; i++)
        other[i] = (i % 2 ? 1.0f : -1.0f) * (float)(1 + i % 5);
    CHECK(lq_knn_store_add(ks, 0, other, -1, "Nowhere", &err) == 0);
    json_t *nw = infer_body(m, prompt, "walk", 4, ks);
    CHECK(nw && !json_object_get(nw, "knn_override"));
    json_decref(nw);
    CHECK(lq_knn_store_add(ks, 1, res + in->n_embd, -1, "Paris", &err) == 0);
    CHECK_EQ_INT((int)lq_knn_store_count(ks), 2);
    json_t *kw2 = infer_body(m, prompt, "walk", 4, ks), *kd2 = infer_body(m, prompt, "dense", 4, ks);
    json_t *kc2 = infer_body(m, prompt, "compare", 4, ks);
    if (kw2 && kd2 && kc2) {
        json_t *ko = json_object_get(kw2, "knn_override"), *pr = json_object_get(kw2, "predictions");
        CHECK(ko != NULL);
        CHECK(!strcmp(json_string_value(json_object_get(ko, "token")), "Paris"));
        CHECK_EQ_INT((int)json_integer_value(json_object_get(ko, "layer")), 1);
        CHECK_NEAR(json_number_value(json_object_get(ko, "cosine")), 1.0, 1e-5);
        CHECK(!strcmp(json_string_value(json_object_get(ko, "source")), "knn_override"));
        CHECK(!strcmp(json_string_value(json_object_get(ko, "stage")), "post_logits"));
        CHECK(json_is_false(json_object_get(ko, "materialized")));
        json_t *dp = json_object_get(kd2, "predictions");
        CHECK(json_equal(json_object_get(ko, "model_top1"), json_array_get(dp, 0)));
        CHECK_EQ_INT((int)json_array_size(pr), 4);
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(pr, 0), "token")), "Paris"));
        CHECK(json_number_value(json_object_get(json_array_get(pr, 0), "probability")) == 1.0);
        for (size_t i = 1; i < 4; i++)
            CHECK(json_equal(json_array_get(pr, i), json_array_get(dp, i - 1)));
        CHECK(!json_object_get(kd2, "knn_override")); /* dense ignores the store */
        CHECK(json_object_get(kc2, "knn_override") != NULL);
    }
    json_decref(kw2);
    json_decref(kd2);
    json_decref(kc2);
    memset(other, 0, (size_t)in->n_embd * sizeof *other);
    CHECK(lq_knn_store_add(ks, 1, other, -1, "x", &err) == LQ_EINVAL); /* zero key */
    CHECK(lq_knn_store_add(ks, -1, res, -1, "x", &err) == LQ_ERANGE);
    free(other);
    free(res);
    lq_knn_store_free(ks);
out:
    lq_model_close(m);
    lq_model_close(mdo);
    lq_model_close(mg);
}

/* ---- KNN store: INSERT ... MODE KNN, knn_store.bin in LARQL's layout ---- */

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_knn_store(void)
{
    char g[4400], d[4400], kp[4500], kp2[4500], bad[4500];
    lq_err err = {0};
    snprintf(g, sizeof g, "%s/knn.gguf", harness_tmpdir());
    snprintf(d, sizeof d, "%s/knn-v", harness_tmpdir());
    snprintf(kp, sizeof kp, "%s/knn_store.bin", harness_tmpdir());
    snprintf(kp2, sizeof kp2, "%s/knn_store2.bin", harness_tmpdir());
    snprintf(bad, sizeof bad, "%s/knn_bad.bin", harness_tmpdir());
    lq_fixture_opts o;
    lq_fixture_preset(&o, "tiny", &err);
    o.seed = 23;
    lq_model *m = NULL;
    lq_model_opts mo = {.n_threads = 2};
    if (lq_fixture_write(&o, g, &err) || build(g, d, LQ_VLEVEL_INFERENCE, 0, 0, &err) ||
        lq_model_open(d, &mo, &m, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    int D = lq_model_get_info(m)->n_embd, L = lq_model_get_info(m)->n_layer;
    lq_knn_store *s = NULL, *t = NULL;
    CHECK(lq_knn_store_create(D, &s, &err) == 0);
    /* INSERT (France, capital, Paris) MODE KNN: the canonical prompt then fires it */
    lq_knn_insert_params ip;
    lq_knn_insert_params_init(&ip);
    ip.entity = "France";
    ip.relation = "capital";
    ip.target = "Paris";
    CHECK_MSG(lq_knn_insert(m, s, &ip, &err) == 0, "%s", err.msg);
    ip.entity = "";
    CHECK(lq_knn_insert(m, s, &ip, &err) == LQ_EINVAL);
    CHECK_EQ_INT((int)lq_knn_store_count(s), 1);
    lq_knn_entry e0;
    CHECK(lq_knn_store_get(s, 0, &e0) && !strcmp(e0.entity, "France") && !strcmp(e0.relation, "capital") &&
          !strcmp(e0.target_token, "Paris") && e0.confidence == 1.0f && e0.layer >= 0 && e0.layer < L);
    lq_infer_params p;
    lq_infer_params_init(&p);
    p.prompt = "The capital of France is";
    p.knn = s;
    lq_infer_result r;
    if (lq_infer(m, &p, &r, &err) == 0) {
        CHECK(r.knn_fired && r.knn_layer == e0.layer && r.knn_cosine > 0.999f && !strcmp(r.knn_token, "Paris"));
        lq_infer_result_free(&r);
    }
    /* more entries: layers out of order, a confidence that is not exact in f32 */
    float *key = malloc((size_t)D * sizeof *key);
    for (int i = 0; i < D; i++)
        key[i] = (float)((i * 7) % 13) - 6.0f;
    lq_knn_entry e1 = {L - 1, key, 42, "Berlin", "Germany", "capital", 0.9f};
    lq_knn_entry e2 = {0, key, 7, "x\"y", "", "", 1.0f};
    CHECK(lq_knn_store_add_entry(s, &e1, &err) == 0 && lq_knn_store_add_entry(s, &e2, &err) == 0);
    CHECK(lq_knn_store_save(s, kp, &err) == 0);
    size_t n = 0;
    uint8_t *b = slurp(kp, &n);
    CHECK(b && n > 16);
    if (b && n > 16) {
        /* header, then layers ascending: 0 (e2), e0.layer (e0), L-1 (e1) */
        CHECK(!memcmp(b, "LKNN", 4) && rd32(b + 4) == 1 && rd32(b + 8) == (uint32_t)D);
        int nl = e0.layer == 0 || e0.layer == L - 1 ? 2 : 3;
        CHECK_EQ_INT((int)rd32(b + 12), nl);
        CHECK(rd32(b + 16) == 0 && rd32(b + 20) == (uint32_t)(e0.layer == 0 ? 2 : 1));
        /* layer 0's first key (e0's if it went to layer 0, else e2's), normalised then f16
         * (truncating) */
        lq_knn_entry g2;
        lq_knn_store_get(s, e0.layer == 0 ? 0 : 2, &g2);
        int kbad = 0;
        for (int i = 0; i < D; i++) {
            uint16_t h;
            memcpy(&h, b + 24 + 2 * (size_t)i, 2);
            kbad += h != lq_vx_f32_to_f16_trunc(g2.key[i]);
        }
        CHECK_EQ_INT(kbad, 0);
        /* the metadata JSON LARQL writes (serde_json: sorted keys, f32 confidence as f64) */
        const char *want1 = "{\"confidence\":0.8999999761581421,\"entity\":\"Germany\",\"relation\":\"capital\","
                            "\"target_token\":\"Berlin\"}";
        const char *want0 = "{\"confidence\":1.0,\"entity\":\"France\",\"relation\":\"capital\",\"target_token\":\"Paris\"}";
        CHECK(memmem(b, n, want1, strlen(want1)) != NULL);
        CHECK(memmem(b, n, want0, strlen(want0)) != NULL);
        CHECK(memmem(b, n, "\"target_token\":\"x\\\"y\"", 21) != NULL);
    }
    /* load: same entries (layer order ascending, insertion order within a layer), keys back
     * to unit length within f16 precision, and a byte-identical save */
    CHECK_MSG(lq_knn_store_load(kp, D, &t, &err) == 0, "%s", err.msg);
    if (t) {
        CHECK_EQ_INT((int)lq_knn_store_count(t), 3);
        int prev = -1;
        for (size_t i = 0; i < 3; i++) {
            lq_knn_entry a, c;
            lq_knn_store_get(t, i, &a);
            /* the source entry with the same target */
            for (size_t j = 0; j < 3; j++) {
                lq_knn_store_get(s, j, &c);
                if (!strcmp(c.target_token, a.target_token))
                    break;
            }
            double dot = 0;
            for (int k = 0; k < D; k++)
                dot += (double)a.key[k] * c.key[k];
            CHECK(a.layer == c.layer && a.target_id == c.target_id && !strcmp(a.entity, c.entity) &&
                  !strcmp(a.relation, c.relation) && a.confidence == c.confidence && dot > 0.9999);
            CHECK(a.layer >= prev); /* layers ascending */
            prev = a.layer;
        }
        CHECK(lq_knn_store_save(t, kp2, &err) == 0);
        size_t n2 = 0;
        uint8_t *b2 = slurp(kp2, &n2);
        CHECK(b && b2 && n2 == n && !memcmp(b, b2, n));
        free(b2);
        /* the loaded store fires the same override */
        p.knn = t;
        if (lq_infer(m, &p, &r, &err) == 0) {
            CHECK(r.knn_fired && r.knn_layer == e0.layer && !strcmp(r.knn_token, "Paris"));
            lq_infer_result_free(&r);
        }
        lq_knn_store_free(t);
        t = NULL;
    }
    /* bad files: each a clear LQ_EFORMAT (or the I/O error), never a crash */
    CHECK(lq_knn_store_load(kp, D + 1, &t, &err) == LQ_EFORMAT && t == NULL);
    CHECK_STR_CONTAINS(err.msg, "hidden size");
    if (b && n > 40) {
        struct {
            const char *what;
            size_t cut;          /* 0: keep length */
            size_t at;
            uint32_t val;        /* written at `at` when cut == 0 */
        } cases[] = {
            {"truncated header", 10, 0, 0},
            {"truncated keys", 30, 0, 0},
            {"truncated metadata", n - 3, 0, 0},
            {"bad magic", 0, 0, 0x4e4e4b4d},
            {"version 2", 0, 4, 2},
            {"huge layer count", 0, 12, 0x7fffffff},
            {"huge entry count", 0, 20, 0x40000000},
            {"dim 0 with layers", 0, 8, 0},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            uint8_t *c = malloc(n);
            memcpy(c, b, n);
            size_t len = cases[i].cut ? cases[i].cut : n;
            if (!cases[i].cut)
                memcpy(c + cases[i].at, &cases[i].val, 4);
            spit(bad, c, len);
            free(c);
            int rc = lq_knn_store_load(bad, D, &t, &err);
            CHECK_MSG(rc == LQ_EFORMAT && t == NULL, "%s: rc %d (%s)", cases[i].what, rc, err.msg);
            printf("# knn_store.bin %s: %s\n", cases[i].what, err.msg);
            lq_knn_store_free(t);
            t = NULL;
        }
        /* trailing garbage */
        uint8_t *c = malloc(n + 3);
        memcpy(c, b, n);
        memcpy(c + n, "xyz", 3);
        spit(bad, c, n + 3);
        free(c);
        CHECK(lq_knn_store_load(bad, D, &t, &err) == LQ_EFORMAT && t == NULL);
    }
    char missing[4500];
    snprintf(missing, sizeof missing, "%s/no-such-knn.bin", harness_tmpdir());
    CHECK(lq_knn_store_load(missing, D, &t, &err) != 0 && t == NULL);
    /* an empty store round-trips (dim 0, no layers) */
    lq_knn_store *z = NULL;
    CHECK(lq_knn_store_create(D, &z, &err) == 0 && lq_knn_store_save(z, kp2, &err) == 0);
    lq_knn_store_free(z);
    z = NULL;
    CHECK(lq_knn_store_load(kp2, D, &z, &err) == 0 && z && lq_knn_store_count(z) == 0);
    lq_knn_store_free(z);
    z = NULL;
    /* no layers but a key length of 4 billion (a fuzz_vindex find: the key buffer was sized by it,
     * a 16 GiB malloc) is refused before anything is allocated */
    {
        uint8_t h[16] = {'L', 'K', 'N', 'N', 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xcc, 0, 0, 0, 0};
        spit(bad, h, sizeof h);
        CHECK(lq_knn_store_load(bad, D, &z, &err) == LQ_EFORMAT && z == NULL && strstr(err.msg, "dim"));
        printf("# knn_store.bin empty with a huge dim: %s\n", err.msg);
    }
    free(b);
    free(key);
    lq_knn_store_free(s);
    lq_model_close(m);
}

/* A front end's cancel hook (lq_vindex_set_thread_cancel: pg_infer's statement_timeout) stops
 * the forward pass between layers with LQ_ECANCELED; the session does not advance, and the
 * same pass runs once the hook lets go. */
static int polls, stop_after;
static int cancel_after(void *ctx)
{
    (void)ctx;
    return ++polls > stop_after;
}

static void test_forward_cancel(void)
{
    char g[4400];
    lq_err err = {0};
    snprintf(g, sizeof g, "%s/cancel.gguf", harness_tmpdir());
    lq_fixture_opts o;
    lq_fixture_preset(&o, "tiny", &err);
    o.seed = 23;
    lq_model *m = NULL;
    lq_model_opts mo = {.n_threads = 1};
    if (lq_fixture_write(&o, g, &err) || lq_model_open(g, &mo, &m, &err)) {
        CHECK_MSG(0, "fixture: %s", err.msg);
        return;
    }
    lq_session *s = NULL;
    CHECK(lq_session_create(m, 0, &s, &err) == 0);
    int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t V = (size_t)lq_model_get_info(m)->n_vocab;
    float *lg = malloc(V * sizeof *lg);
    polls = 0;
    stop_after = 1; /* the second layer's poll asks to stop */
    lq_vindex_set_thread_cancel(cancel_after, NULL);
    int rc = lq_session_eval(s, ids, 8, lg, NULL, &err);
    lq_vindex_set_thread_cancel(NULL, NULL);
    CHECK_MSG(rc == LQ_ECANCELED && polls >= 2, "rc %d after %d polls: %s", rc, polls, err.msg);
    CHECK_EQ_INT(lq_session_pos(s), 0);
    CHECK(lq_session_eval(s, ids, 8, lg, NULL, &err) == 0 && lq_session_pos(s) == 8);
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = "the model reads";
    ip.mode = "dense";
    lq_infer_result r;
    polls = 0;
    stop_after = 0;
    lq_vindex_set_thread_cancel(cancel_after, NULL);
    rc = lq_infer(m, &ip, &r, &err);
    lq_vindex_set_thread_cancel(NULL, NULL);
    CHECK_MSG(rc == LQ_ECANCELED, "infer under a cancel: rc %d", rc);
    CHECK(lq_infer(m, &ip, &r, &err) == 0);
    lq_infer_result_free(&r);
    free(lg);
    lq_session_free(s);
    lq_model_close(m);
}

int main(void)
{
    RUN(test_repack);
    RUN(test_repack_padded_rows);
    RUN(test_forward_cancel);
    RUN(test_fixture_equal);
    RUN(test_huge_repack);
    RUN(test_conformance);
    RUN(test_bad);
    RUN(test_llama_fixture);
    RUN(test_stories);
    RUN(test_infer);
    RUN(test_knn_store);
    return harness_done();
}
