/* The edits a GGUF carries (metadata larql.patches, written by COMPILE ... INTO MODEL) as the
 * front ends open them: lq_carried_edits and lq_model_open_edited on the trained model, plain
 * and with a carried KNN patch, and every bad input (a list that is not JSON, an element
 * without a patch, a patch of another width, a missing file, NULL arguments).
 * tests/cli/compile_model.sh checks the answers end to end (logits, run, serve). */
#include "harness.h"
#include "scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "larql/model.h"
#include "larql/patch.h"

#define TRAINED "models/tinystories-ternary.gguf"

static lq_model *g_base;
static const char *g_dir;

static lq_model *open_trained(void)
{
    lq_model_opts o = {.n_threads = 1};
    lq_model *m = NULL;
    lq_err err = {0};
    if (lq_model_open(TRAINED, &o, &m, &err))
        return NULL;
    return m;
}

/* the trained model written again with larql.patches = value */
static int write_carrying(lq_model *m, const char *path, const char *value)
{
    const char *k[] = {"larql.patches"}, *v[] = {value};
    lq_model_save_opts so = {.path = path, .extra_keys = k, .extra_values = v, .n_extra = 1};
    lq_err err = {0};
    return lq_model_save_gguf(m, &so, &err);
}

/* [{"name": "p", "patch": a .vlp of one insert_knn op with a key of `width` values}] */
static char *knn_list(int width)
{
    lq_patch *p = NULL;
    lq_err err = {0};
    if (lq_patch_create("p", "", width, &p, &err))
        return NULL;
    float *key = calloc((size_t)width, sizeof *key);
    key[0] = 1.0f;
    lq_patch_op op;
    lq_patch_op_init(&op, LQ_OP_INSERT_KNN);
    op.layer = 1;
    op.key = key;
    op.target_id = 5;
    op.target = "x";
    op.entity = "Atlantis";
    op.relation = "capital";
    op.confidence = 1.0f;
    char *text = NULL, *out = NULL;
    if (!lq_patch_add(p, &op, &err) && !lq_patch_json(p, &text, &err)) {
        size_t n = strlen(text) + 64;
        out = malloc(n);
        snprintf(out, n, "[{\"name\": \"p\", \"patch\": %s}]", text);
    }
    free(text);
    free(key);
    lq_patch_free(p);
    return out;
}

static void test_bad_arguments(void)
{
    lq_edit_set *es = (lq_edit_set *)1;
    lq_err err = {0};
    CHECK_EQ_INT(lq_carried_edits(NULL, 0, &es, NULL, &err), LQ_EINVAL);
    CHECK_EQ_INT(lq_carried_edits(TRAINED, 0, NULL, NULL, &err), LQ_EINVAL);
    CHECK(lq_carried_edits("no/such/model.gguf", 0, &es, NULL, &err) != 0);
    CHECK(es == NULL);
    lq_model *m = NULL;
    CHECK_EQ_INT(lq_model_open_edited(TRAINED, NULL, 0, &m, NULL, NULL, NULL, &err), LQ_EINVAL);
}

static void test_no_edits(void)
{
    if (!g_base)
        SKIP("%s is missing", TRAINED);
    lq_edit_set *es = NULL;
    size_t n = 7;
    lq_err err = {0};
    CHECK_EQ_INT(lq_carried_edits(TRAINED, 1, &es, &n, &err), 0);
    CHECK(es == NULL);
    CHECK_EQ_INT((int)n, 0);
    lq_model *m = NULL;
    lq_resid_hook *h = (lq_resid_hook *)1;
    lq_model_opts o = {.n_threads = 1};
    CHECK_EQ_INT(lq_model_open_edited(TRAINED, &o, 0, &m, &h, NULL, &n, &err), 0);
    CHECK(m != NULL && h == NULL);
    lq_model_close(m);
}

static void test_carried(void)
{
    if (!g_base || !g_dir)
        SKIP("%s is missing", TRAINED);
    const char *dir = g_dir;
    lq_model *base = g_base;
    int hidden = lq_model_get_info(base)->n_embd;
    char path[600];
    snprintf(path, sizeof path, "%s/knn.gguf", dir);
    char *list = knn_list(hidden);
    CHECK(list != NULL);
    CHECK_EQ_INT(write_carrying(base, path, list), 0);
    free(list);
    lq_edit_set *es = NULL;
    size_t n = 0;
    lq_err err = {0};
    CHECK_MSG(lq_carried_edits(path, 1, &es, &n, &err) == 0, "%s", err.msg);
    CHECK(es != NULL);
    CHECK_EQ_INT((int)n, 1);
    CHECK_EQ_INT((int)lq_edit_set_n_knn(es), 1);
    lq_edit_set_unref(es);
    /* the front ends' way in: a hook, or none with the opt-out */
    lq_model *m = NULL;
    lq_resid_hook *h = NULL;
    lq_model_opts o = {.n_threads = 1};
    lq_edit_set *set = NULL;
    CHECK_EQ_INT(lq_model_open_edited(path, &o, 0, &m, &h, &set, &n, &err), 0);
    CHECK(m != NULL && h != NULL && set != NULL && n == 1);
    CHECK_EQ_INT((int)lq_edit_set_n_knn(set), 1);
    lq_edit_set_unref(set);
    lq_edit_hook_free(h);
    lq_model_close(m);
    h = NULL;
    CHECK_EQ_INT(lq_model_open_edited(path, &o, 1, &m, &h, NULL, &n, &err), 0);
    CHECK(m != NULL && h == NULL && n == 0);
    lq_model_close(m);
}

static void expect_refused(const char *dir, lq_model *base, const char *name, const char *value, const char *msg)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    CHECK_EQ_INT(write_carrying(base, path, value), 0);
    lq_edit_set *es = NULL;
    lq_err err = {0};
    CHECK(lq_carried_edits(path, 1, &es, NULL, &err) != 0);
    CHECK(es == NULL);
    CHECK_STR_CONTAINS(err.msg, msg);
    /* the model is not left open on an error */
    lq_model *m = (lq_model *)1;
    lq_resid_hook *h = NULL;
    CHECK(lq_model_open_edited(path, NULL, 0, &m, &h, NULL, NULL, &err) != 0);
    CHECK(m == NULL && h == NULL);
}

static void test_refused(void)
{
    if (!g_base || !g_dir)
        SKIP("%s is missing", TRAINED);
    expect_refused(g_dir, g_base, "notjson", "{", "larql.patches is not a JSON array");
    expect_refused(g_dir, g_base, "noname", "[{\"patch\": 1}]", "lacks a name or a patch object");
    char *narrow = knn_list(8);
    CHECK(narrow != NULL);
    expect_refused(g_dir, g_base, "narrow", narrow, "hidden size");
    free(narrow);
}

int main(void)
{
    g_base = open_trained();
    g_dir = scratch_dir("larql-carried-test", 0);
    RUN(test_bad_arguments);
    RUN(test_no_edits);
    RUN(test_carried);
    RUN(test_refused);
    lq_model_close(g_base);
    return harness_done();
}
