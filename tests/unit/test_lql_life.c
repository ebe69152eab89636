/* The library under LQL's lifecycle statements, on a planted-knowledge fixture: the residual
 * trace (lq_infer_trace) agrees with inference, DIFF finds exactly the edits and its patch
 * reproduces them, MERGE and COMPILE's ON CONFLICT follow their rules, COMPACT folds the
 * overlay into the directory, the KNN routers (ROUTE VERIFY / FALLBACK) fire and abstain as
 * LARQL's, and a .vlp carries its header fields. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "planted.h"

#include "larql/fixture.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/vindex.h"

static const char corpus[] =
    "The capital of France is Paris . The capital of Germany is Berlin . The capital of Japan is Tokyo . "
    "France Paris Germany Berlin Japan Tokyo Italy Rome Atlantis Poseidonia the model reads the text . ";

static char gguf[4200], dir[4200];
static lq_vindex *V;
static lq_model *M;

static int setup(void)
{
    const char *tmp = harness_tmpdir();
    snprintf(gguf, sizeof gguf, "%s/life.gguf", tmp);
    snprintf(dir, sizeof dir, "%s/life.vindex", tmp);
    lq_fact facts[] = {{" France", "Paris", 1, 17}, {" Germany", "Berlin", 2, 100}};
    return planted_fixture(gguf, dir, corpus, 11, facts, 2, &V, &M);
}

static void test_trace(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_trace_result t;
    lq_err err = {0};
    CHECK_MSG(lq_infer_trace(M, "The capital of France is", "Paris", NULL, &t, &err) == 0, "%s", err.msg);
    CHECK(t.n == 5 && t.n_layers == 4 && t.layers[0].layer == -1 && t.layers[4].layer == 3 && t.answer_id >= 0);
    CHECK(t.layers[0].attn_norm == 0 && t.layers[0].ffn_norm == 0 && t.layers[1].attn_norm > 0);
    /* the last layer's residual through the head is the model's answer */
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = "The capital of France is";
    ip.mode = "dense";
    ip.top = 1;
    lq_infer_result r;
    CHECK(lq_infer(M, &ip, &r, &err) == 0);
    CHECK_MSG(r.n_dense == 1 && r.dense[0].id == t.layers[4].top1_id, "%d vs %d", r.dense[0].id, t.layers[4].top1_id);
    CHECK_NEAR(r.dense[0].probability, t.layers[4].top1_prob, 1e-4);
    lq_infer_result_free(&r);
    for (size_t i = 0; i < t.n; i++) /* the answer's rank and probability agree */
        CHECK(t.layers[i].rank >= 1 && t.layers[i].prob >= 0 && t.layers[i].prob <= t.layers[i].top1_prob + 1e-9 &&
              (t.layers[i].rank == 1) == (t.layers[i].prob >= t.layers[i].top1_prob - 1e-12));
    lq_trace_result_free(&t);
    CHECK(lq_infer_trace(M, "", NULL, NULL, &t, &err) == LQ_EINVAL);
}

static int count_row(void *ctx, const lq_diff_row *r)
{
    int *n = ctx;
    n[r->status]++;
    return 0;
}

static void test_diff_and_patch(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL, *o2 = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.layer = 1;
    w.feature = 17;
    size_t n = 0;
    CHECK(lq_overlay_update(o, &w, "Rome", 0.5f, &n, &err) == 0 && n == 1);
    w.layer = 2;
    w.feature = 100;
    CHECK(lq_overlay_delete(o, &w, &n, &err) == 0 && n == 1);
    int cnt[3] = {0};
    CHECK(lq_vindex_diff(V, lq_overlay_vindex(o), NULL, count_row, cnt, &err) == 0);
    CHECK_MSG(cnt[LQ_DIFF_MODIFIED] == 1 && cnt[LQ_DIFF_REMOVED] == 1 && cnt[LQ_DIFF_ADDED] == 0, "%d %d %d", cnt[0],
              cnt[1], cnt[2]);
    lq_diff_params dp = {2, NULL, NULL};
    memset(cnt, 0, sizeof cnt);
    CHECK(lq_vindex_diff(V, lq_overlay_vindex(o), &dp, count_row, cnt, &err) == 0 && cnt[1] == 1 && cnt[0] == 0);
    dp.layer = 9;
    CHECK(lq_vindex_diff(V, V, &dp, count_row, cnt, &err) == LQ_ERANGE);
    /* the patch of the diff takes the base to the edited view */
    lq_patch *p = NULL;
    CHECK(lq_vindex_diff_patch(V, lq_overlay_vindex(o), NULL, "d", &p, &err) == 0 && lq_patch_n_ops(p) == 2);
    CHECK(lq_overlay_create(V, NULL, &o2, &err) == 0 && lq_overlay_apply(o2, p, &err) == 0);
    memset(cnt, 0, sizeof cnt);
    CHECK(lq_vindex_diff(lq_overlay_vindex(o), lq_overlay_vindex(o2), NULL, count_row, cnt, &err) == 0);
    CHECK_MSG(cnt[0] + cnt[1] + cnt[2] == 0, "%d %d %d", cnt[0], cnt[1], cnt[2]);
    lq_patch_free(p);
    lq_overlay_free(o2);
    lq_overlay_free(o);
}

/* a patch named name writing (1, 17) to target with confidence c */
static lq_patch *slot_patch(const char *name, const char *target, float c)
{
    lq_patch *p = NULL;
    lq_err err = {0};
    lq_patch_create(name, NULL, lq_vindex_get_info(V)->hidden_size, &p, &err);
    lq_patch_op op;
    lq_patch_op_init(&op, LQ_OP_UPDATE);
    op.layer = 1;
    op.feature = 17;
    op.has_down_meta = 1;
    op.dm_token = target;
    op.dm_id = 0;
    op.dm_c = c;
    op.confidence = c;
    lq_patch_add(p, &op, &err);
    return p;
}

static const char *slot_text(const lq_overlay *o)
{
    lq_feature_meta m;
    if (!lq_vindex_feature_meta(lq_overlay_vindex(o), 1, 17, &m))
        return "";
    return m.top_token ? m.top_token : lq_vindex_token_text(lq_overlay_vindex(o), m.top_token_id);
}

static void test_merge_and_conflicts(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL, *r = NULL;
    lq_err err = {0};
    lq_patch *hi = slot_patch("hi", "Rome", 0.9f), *lo = slot_patch("lo", "Tokyo", 0.5f);
    size_t merged = 0, skipped = 0;
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    CHECK(lq_overlay_merge_patch(o, lo, LQ_MERGE_KEEP_TARGET, &merged, &skipped, &err) == 0);
    CHECK(merged == 0 && skipped == 1 && strcmp(slot_text(o), "Tokyo"));
    CHECK(lq_overlay_merge_patch(o, lo, LQ_MERGE_KEEP_SOURCE, &merged, &skipped, &err) == 0);
    CHECK(merged == 1 && skipped == 0 && !strcmp(slot_text(o), "Tokyo"));
    CHECK(lq_overlay_merge_patch(o, hi, LQ_MERGE_HIGHEST_CONFIDENCE, &merged, &skipped, &err) == 0);
    CHECK(merged == 1 && !strcmp(slot_text(o), "Rome")); /* 0.9 over the slot's 0.5 */
    CHECK(lq_overlay_merge_patch(o, lo, LQ_MERGE_HIGHEST_CONFIDENCE, &merged, &skipped, &err) == 0);
    CHECK(merged == 0 && skipped == 1 && !strcmp(slot_text(o), "Rome"));
    lq_overlay_free(o);
    /* COMPILE ON CONFLICT: two applied patches on one slot */
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0 && lq_overlay_apply(o, hi, &err) == 0 &&
          lq_overlay_apply(o, lo, &err) == 0);
    CHECK(!strcmp(slot_text(o), "Tokyo")); /* last wins */
    CHECK(lq_overlay_resolve(o, LQ_CONFLICT_LAST_WINS, &r, &err) == 0 && !r);
    CHECK(lq_overlay_resolve(o, LQ_CONFLICT_FAIL, &r, &err) == LQ_EINVAL && !r);
    CHECK_STR_CONTAINS(err.msg, "L1 F17 is written by patches 'hi' and 'lo'");
    CHECK(lq_overlay_resolve(o, LQ_CONFLICT_HIGHEST_CONFIDENCE, &r, &err) == 0 && r);
    CHECK(r && !strcmp(slot_text(r), "Rome") && !strcmp(slot_text(o), "Tokyo"));
    lq_overlay_free(r);
    lq_overlay_free(o);
    lq_patch_free(hi);
    lq_patch_free(lo);
}

static void test_route(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_knn_store *ks = NULL;
    lq_err err = {0};
    const lq_model_info *mi = lq_model_get_info(M);
    float *res = malloc((size_t)mi->n_layer * mi->n_embd * sizeof *res);
    CHECK(res && lq_knn_store_create(mi->n_embd, &ks, &err) == 0);
    CHECK(lq_infer_residuals(M, "The capital of Atlantis is", res, &err) == 0);
    /* an entry keyed on that prompt's residual at layer 2, named for another entity */
    lq_knn_entry e = {2, res + 2 * mi->n_embd, 5, "Paris", "Lemuria", "capital", 1.0f};
    CHECK(lq_knn_store_add_entry(ks, &e, &err) == 0);
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = "The capital of Atlantis is";
    ip.knn = ks;
    int fired[3];
    for (int route = 0; route < 3; route++) {
        lq_infer_result r;
        ip.route = route;
        CHECK(lq_infer(M, &ip, &r, &err) == 0);
        fired[route] = r.knn_fired;
        lq_infer_result_free(&r);
    }
    CHECK_MSG(fired[LQ_ROUTE_LEGACY] && !fired[LQ_ROUTE_VERIFY] && fired[LQ_ROUTE_FALLBACK], "%d %d %d", fired[0],
              fired[1], fired[2]);
    ip.prompt = "The capital of Atlantis is"; /* named: VERIFY fires */
    lq_knn_store_free(ks);
    CHECK(lq_knn_store_create(mi->n_embd, &ks, &err) == 0);
    e.entity = "atlantis";
    CHECK(lq_knn_store_add_entry(ks, &e, &err) == 0);
    ip.knn = ks;
    ip.route = LQ_ROUTE_VERIFY;
    lq_infer_result r;
    CHECK(lq_infer(M, &ip, &r, &err) == 0 && r.knn_fired && r.knn_layer == 2);
    lq_infer_result_free(&r);
    lq_knn_store_free(ks);
    free(res);
}

static void test_compact_and_header(void)
{
    if (!V)
        SKIP("fixture failed");
    char copy[4300], cmd[13000], side[4400];
    snprintf(copy, sizeof copy, "%s/compact.vindex", harness_tmpdir());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", copy, dir, copy);
    CHECK(system(cmd) == 0);
    lq_vindex *c = NULL;
    lq_overlay *o = NULL;
    lq_err err = {0};
    CHECK(lq_vindex_open(copy, NULL, &c, &err) == 0 && lq_overlay_create(c, NULL, &o, &err) == 0);
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.feature = 100; /* every layer's F100 whose token holds "Berlin": the planted one */
    w.entity = "Berlin";
    size_t n = 0;
    CHECK_MSG(lq_overlay_delete(o, &w, &n, &err) == 0 && n >= 1, "%s", err.msg);
    CHECK(lq_overlay_n_composed(o) == 0);
    CHECK_MSG(lq_overlay_compact(o, copy, &err) == 0, "%s", err.msg);
    lq_overlay_free(o);
    lq_vindex_close(c);
    struct stat st;
    snprintf(side, sizeof side, "%s.compact-old", copy);
    CHECK(stat(side, &st) != 0);
    snprintf(side, sizeof side, "%s.compact-new", copy);
    CHECK(stat(side, &st) != 0);
    lq_feature_meta m;
    CHECK(lq_vindex_open(copy, NULL, &c, &err) == 0);
    CHECK(c && !lq_vindex_feature_meta(c, 2, 100, &m) && lq_vindex_verify_checksums(c, &err) == 0);
    /* a patch of this vindex: created_at, base_checksum, author in the .vlp */
    lq_patch *p = NULL;
    char *js = NULL;
    CHECK(lq_patch_create("h", NULL, 0, &p, &err) == 0);
    CHECK(lq_patch_set_info(p, NULL, lq_vindex_base_checksum(c), "tester", &err) == 0);
    CHECK(lq_patch_json(p, &js, &err) == 0);
    CHECK_STR_CONTAINS(js, "\"author\": \"tester\"");
    CHECK_STR_CONTAINS(js, "\"base_checksum\": \"");
    CHECK(strlen(lq_patch_created_at(p)) == 20 && lq_patch_created_at(p)[10] == 'T');
    free(js);
    lq_patch_free(p);
    lq_vindex_close(c);
    lq_vindex_remove_dir(copy);
    CHECK(stat(copy, &st) != 0);
}

int main(void)
{
    if (setup())
        printf("#   setup failed\n");
    RUN(test_trace);
    RUN(test_diff_and_patch);
    RUN(test_merge_and_conflicts);
    RUN(test_route);
    RUN(test_compact_and_header);
    lq_model_close(M);
    lq_vindex_close(V);
    return harness_done();
}
