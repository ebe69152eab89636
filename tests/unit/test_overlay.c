/* Editing what the model knows (larql/patch.h) on a planted-knowledge fixture: the overlay
 * view answers every read query with the edits, infer's walk mode with the overlay's KNN
 * store, patches round-trip through .vlp, bad patches change nothing, COMPILE bakes it all
 * into a new directory that reads back the same. */
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "planted.h"

#include "larql/fixture.h"
#include "larql/model.h"
#include "larql/patch.h"
#include "larql/scheduler.h"
#include "larql/generate.h"
#include "larql/vindex.h"
#include "vindex/overlay_internal.h"
#include "vindex/vindex_internal.h"

static const char corpus[] =
    "The capital of France is Paris . The capital of Germany is Berlin . The capital of Japan is Tokyo . "
    "France Paris France Paris Germany Berlin Germany Berlin Japan Tokyo Japan Tokyo Italy Rome Italy Rome "
    "Atlantis Atlantis Poseidonia the model reads the text and the model knows the capital . ";

static char gguf[4200], dir[4200];
static lq_vindex *V;
static lq_model *M;

static int setup(void)
{
    const char *tmp = harness_tmpdir();
    snprintf(gguf, sizeof gguf, "%s/ov.gguf", tmp);
    snprintf(dir, sizeof dir, "%s/ov.vindex", tmp);
    lq_fact facts[] = {{" France", "Paris", 1, 17}, {" Germany", "Berlin", 2, 100}};
    return planted_fixture(gguf, dir, corpus, 7, facts, 2, &V, &M);
}

static char *describe(const lq_vindex *v, const char *entity)
{
    lq_describe_params p;
    lq_describe_params_init(&p);
    p.entity = entity;
    p.band = "all";
    p.min_score = -1e9;
    p.limit = 5;
    char *j = NULL;
    lq_err err = {0};
    if (lq_vindex_describe_json(v, &p, &j, &err))
        printf("#   describe: %s\n", err.msg);
    char *lat = j ? strstr(j, ",\"latency_ms\"") : NULL;
    if (lat)
        *lat = 0; /* timings aside */
    return j;
}

/* the top prediction's token of a walk-mode infer with the overlay's edits */
static int infer_top(lq_overlay *o, const char *prompt, char *tok, size_t cap, double *p0, int *fired)
{
    lq_infer_params ip;
    lq_infer_params_init(&ip);
    ip.prompt = prompt;
    ip.top = 3;
    lq_err err = {0};
    ip.edits = lq_overlay_edit_set(o, &err);
    lq_infer_result r;
    int rc = lq_infer(M, &ip, &r, &err);
    lq_edit_set_unref(ip.edits);
    if (rc)
        return printf("#   infer: %s\n", err.msg), rc;
    snprintf(tok, cap, "%s", r.n_walk ? r.walk[0].token : "");
    if (p0)
        *p0 = r.n_walk ? r.walk[0].probability : 0;
    if (fired)
        *fired = r.knn_fired;
    lq_infer_result_free(&r);
    return 0;
}

/* INSERT ("Atlantis", "capital", "Poseidonia") in mode (layer: the default) */
static lq_insert_params atlantis(int mode)
{
    lq_insert_params ip;
    lq_insert_params_init(&ip);
    ip.entity = "Atlantis";
    ip.relation = "capital";
    ip.target = "Poseidonia";
    ip.mode = mode;
    return ip;
}

static void test_knn_insert_and_delete(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    static const char *const prompts[] = {"the model", "The capital of France is", "Paris", "the text",
                                          "Germany Berlin", "reads the", "Japan", "knows the", "Tokyo .", "Italy"};
    char before[10][64], tok[64];
    for (int i = 0; i < 10; i++)
        CHECK(infer_top(o, prompts[i], before[i], sizeof before[i], NULL, NULL) == 0);
    lq_insert_params ip = atlantis(LQ_INSERT_KNN);
    lq_insert_result r;
    CHECK_MSG(lq_overlay_insert(o, M, &ip, &r, &err) == 0, "%s", err.msg);
    CHECK(r.mode == LQ_INSERT_KNN && r.n_layers == 1 && r.weights == 1 && r.knn_total == 1);
    double p = 0;
    int fired = 0;
    CHECK(infer_top(o, "The capital of Atlantis is", tok, sizeof tok, &p, &fired) == 0);
    CHECK_MSG(!strcmp(tok, "Poseidonia") && p == 1.0 && fired, "got '%s' %g", tok, p);
    for (int i = 0; i < 10; i++) { /* unrelated prompts answer as before */
        CHECK(infer_top(o, prompts[i], tok, sizeof tok, NULL, &fired) == 0);
        CHECK_MSG(!strcmp(tok, before[i]) && !fired, "prompt '%s': '%s' vs '%s'", prompts[i], tok, before[i]);
    }
    CHECK(lq_overlay_edits(o) && lq_patch_n_ops(lq_overlay_edits(o)) == 1);
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.entity = "Atlantis";
    size_t n = 0;
    CHECK_MSG(lq_overlay_delete(o, &w, &n, &err) == 0, "%s", err.msg);
    CHECK(n >= 1 && lq_knn_store_count(lq_overlay_knn(o)) == 0);
    CHECK(infer_top(o, "The capital of Atlantis is", tok, sizeof tok, NULL, &fired) == 0);
    CHECK(!fired && strcmp(tok, "Poseidonia"));
    /* no unbounded DELETE; layer and feature ranges are checked */
    lq_edit_where_init(&w);
    CHECK(lq_overlay_delete(o, &w, &n, &err) == LQ_EINVAL);
    w.layer = 99;
    CHECK(lq_overlay_delete(o, &w, &n, &err) == LQ_ERANGE);
    lq_insert_params_init(&ip);
    ip.entity = "Atlantis";
    ip.relation = "capital";
    ip.target = "Poseidonia";
    ip.layer = 99;
    CHECK(lq_overlay_insert(o, M, &ip, &r, &err) == LQ_ERANGE);
    ip.layer = -1;
    ip.entity = "";
    CHECK(lq_overlay_insert(o, M, &ip, &r, &err) == LQ_EINVAL);
    lq_overlay_free(o);
}

static void test_compose_describe_update_delete(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    const lq_vindex *view = lq_overlay_vindex(o);
    char *base_fr = describe(V, " France"), *view_fr = describe(view, " France");
    CHECK(base_fr && view_fr && !strcmp(base_fr, view_fr)); /* no edits: identical answers */
    CHECK(base_fr && strstr(base_fr, "\"Paris\""));
    /* COMPOSE without weights: the gate is the entity's embedding direction, so describe finds it */
    lq_insert_params ip;
    lq_insert_params_init(&ip);
    ip.entity = "Atlantis";
    ip.relation = "capital";
    ip.target = "Poseidonia";
    ip.mode = LQ_INSERT_COMPOSE;
    ip.layer = 2;
    lq_insert_result r;
    CHECK_MSG(lq_overlay_insert(o, NULL, &ip, &r, &err) == 0, "%s", err.msg);
    CHECK(r.n_layers == 1 && r.layers[0] == 2 && r.features[0] >= 0 && r.weights == 0);
    char *at = describe(view, "Atlantis");
    CHECK_MSG(at && strstr(at, "\"target\":\"Poseidonia\"") && strstr(at, "\"relation\":\"capital\""), "%s",
              at ? at : "(null)");
    lq_feature_meta fm;
    CHECK(lq_vindex_feature_meta(view, 2, r.features[0], &fm) == 1 && fm.top_token &&
          !strcmp(fm.top_token, "Poseidonia"));
    /* UPDATE the planted fact's target, then DELETE it */
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.layer = 1;
    w.feature = 17;
    size_t n = 0;
    CHECK_MSG(lq_overlay_update(o, &w, "Lutetia", NAN, &n, &err) == 0 && n == 1, "%s", err.msg);
    char *fr = describe(view, " France");
    CHECK(fr && strstr(fr, "\"Lutetia\"") && !strstr(fr, "\"Paris\""));
    free(fr);
    CHECK(lq_overlay_delete(o, &w, &n, &err) == 0 && n == 1);
    CHECK(lq_vindex_feature_meta(view, 1, 17, &fm) == 0);
    fr = describe(view, " France");
    CHECK(fr && !strstr(fr, "\"Lutetia\"") && !strstr(fr, "\"Paris\""));
    free(fr);
    /* the base never changed; removing the edits patch restores the view */
    char *b2 = describe(V, " France");
    CHECK(b2 && !strcmp(b2, base_fr));
    CHECK(lq_overlay_remove(o, "edits", &err) == 0 && lq_overlay_n_patches(o) == 0);
    fr = describe(view, " France");
    CHECK(fr && !strcmp(fr, base_fr));
    CHECK(lq_overlay_remove(o, "edits", &err) == LQ_ENOTFOUND);
    free(fr);
    free(b2);
    free(at);
    free(base_fr);
    free(view_fr);
    lq_overlay_free(o);
}

static void test_vlp_round_trip_and_compile(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *a = NULL, *b = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &a, &err) == 0 && lq_overlay_create(V, NULL, &b, &err) == 0);
    lq_insert_params ip;
    lq_insert_params_init(&ip);
    ip.entity = "Atlantis";
    ip.relation = "capital";
    ip.target = "Poseidonia";
    CHECK(lq_overlay_insert(a, M, &ip, NULL, &err) == 0); /* KNN */
    ip.mode = LQ_INSERT_COMPOSE;
    ip.layer = 3;
    CHECK(lq_overlay_insert(a, NULL, &ip, NULL, &err) == 0);
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.layer = 2;
    w.feature = 100;
    size_t n;
    CHECK(lq_overlay_delete(a, &w, &n, &err) == 0 && n == 1);
    char *j1 = NULL, *j2 = NULL;
    CHECK(lq_patch_json(lq_overlay_edits(a), &j1, &err) == 0);
    lq_patch *p = NULL;
    CHECK_MSG(j1 && lq_patch_parse(j1, strlen(j1), "copy", lq_vindex_get_info(V)->hidden_size, &p, &err) == 0, "%s",
              err.msg);
    CHECK(p && lq_patch_n_ops(p) == 3 && lq_patch_json(p, &j2, &err) == 0);
    CHECK(j1 && j2 && !strcmp(j1, j2)); /* written, read back, written again: identical */
    CHECK(lq_overlay_apply(b, p, &err) == 0);
    CHECK(lq_overlay_apply(b, p, &err) == LQ_EINVAL); /* the same name twice */
    char *da = describe(lq_overlay_vindex(a), "Atlantis"), *db = describe(lq_overlay_vindex(b), "Atlantis");
    CHECK(da && db && !strcmp(da, db));
    char tok[64];
    int fired = 0;
    CHECK(infer_top(b, "The capital of Atlantis is", tok, sizeof tok, NULL, &fired) == 0 && fired &&
          !strcmp(tok, "Poseidonia"));
    /* COMPILE: a new directory that reads back as the overlay */
    char out[4300];
    snprintf(out, sizeof out, "%s/compiled.vindex", harness_tmpdir());
    CHECK_MSG(lq_overlay_compile(a, out, &err) == 0, "%s", err.msg);
    CHECK(lq_overlay_compile(a, out, &err) == LQ_EINVAL); /* exists */
    lq_vindex *c = NULL;
    CHECK_MSG(lq_vindex_open(out, &(lq_vindex_open_opts){.verify_checksums = 1}, &c, &err) == 0, "%s", err.msg);
    char *dc = c ? describe(c, "Atlantis") : NULL;
    CHECK_MSG(dc && da && !strcmp(dc, da), "compiled %s\nview %s", dc ? dc : "", da ? da : "");
    char *gc = c ? describe(c, " Germany") : NULL, *ga = describe(lq_overlay_vindex(a), " Germany");
    CHECK(gc && ga && !strcmp(gc, ga) && !strstr(gc, "\"Berlin\""));
    lq_vindex_close(c);
    free(dc);
    free(gc);
    free(ga);
    free(da);
    free(db);
    free(j1);
    free(j2);
    lq_patch_free(p);
    lq_overlay_free(a);
    lq_overlay_free(b);
}

/* a mismatched patch is refused whole, the overlay unchanged */
static void test_bad_patches(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    int H = lq_vindex_get_info(V)->hidden_size;
    static const char *const bad[] = {
        "{\"operations\":[{\"op\":\"insert\",\"layer\":1,\"feature\":3,\"entity\":\"a\",\"target\":\"b\"},"
        "{\"op\":\"delete\",\"layer\":40,\"feature\":1}]}",
        "{\"operations\":[{\"op\":\"delete\",\"layer\":1,\"feature\":99999}]}",
        "{\"base_model\":\"someone/else\",\"operations\":[{\"op\":\"delete\",\"layer\":1,\"feature\":1}]}",
        "{\"operations\":[{\"op\":\"teleport\",\"layer\":1}]}",
        "{\"operations\":[{\"op\":\"update\",\"layer\":1,\"feature\":1,\"gate_vector_b64\":\"AAAAAA==\"}]}",
        "{\"operations\":[{\"op\":\"update\",\"layer\":1,\"feature\":1,\"gate_vector_b64\":\"!!!!\"}]}",
        "{\"operations\":[{\"op\":\"insert_knn\",\"layer\":1,\"entity\":\"a\",\"relation\":\"r\",\"target\":\"t\","
        "\"target_id\":5}]}",
        "{\"operations\":{}}",
        "[1,2",
    };
    uint64_t v0 = lq_overlay_version(o);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lq_patch *p = NULL;
        int rc = lq_patch_parse(bad[i], strlen(bad[i]), NULL, H, &p, &err);
        if (!rc)
            rc = lq_overlay_apply(o, p, &err);
        CHECK_MSG(rc != 0, "bad patch %zu accepted", i);
        lq_patch_free(p);
    }
    CHECK(lq_overlay_version(o) == v0 && lq_overlay_n_patches(o) == 0 && lq_overlay_n_features(o) == 0);
    /* a patch in LARQL's own format (format.rs fields) applies */
    const char *larql =
        "{\"version\":1,\"base_model\":\"\",\"created_at\":\"2026-01-01T00:00:00Z\",\"description\":\"hand\","
        "\"author\":\"test\",\"tags\":[\"x\"],\"operations\":["
        "{\"op\":\"insert\",\"layer\":2,\"feature\":7,\"relation\":\"capital\",\"entity\":\"Atlantis\","
        "\"target\":\"Poseidonia\",\"confidence\":0.8},"
        "{\"op\":\"delete\",\"layer\":1,\"feature\":17,\"reason\":\"wrong\"},"
        "{\"op\":\"delete_knn\",\"entity\":\"Nobody\"}]}";
    lq_patch *p = NULL;
    CHECK_MSG(lq_patch_parse(larql, strlen(larql), NULL, H, &p, &err) == 0, "%s", err.msg);
    CHECK(p && !strcmp(lq_patch_name(p), "hand") && lq_overlay_apply(o, p, &err) == 0);
    lq_feature_meta fm;
    CHECK(lq_vindex_feature_meta(lq_overlay_vindex(o), 2, 7, &fm) == 1 && !strcmp(fm.top_token, "Poseidonia") &&
          fabsf(fm.c_score - 0.8f) < 1e-6f);
    CHECK(lq_vindex_feature_meta(lq_overlay_vindex(o), 1, 17, &fm) == 0);
    CHECK(lq_vindex_feature_meta(V, 1, 17, &fm) == 1); /* the base is untouched */
    lq_patch_free(p);
    lq_overlay_free(o);
}

static off_t fsize(const char *p)
{
    struct stat st;
    return stat(p, &st) ? -1 : st.st_size;
}

/* an insert journaled, as the server does: ops recorded, then persisted, undone on failure */
static int journaled_insert(lq_overlay *o, lq_journal *j, const char *entity, const char *target, lq_err *err)
{
    lq_insert_params ip;
    lq_insert_params_init(&ip);
    ip.entity = entity;
    ip.relation = "capital";
    ip.target = target;
    const lq_patch *e = lq_overlay_edits(o);
    size_t n0 = e ? lq_patch_n_ops(e) : 0;
    int rc = lq_overlay_insert(o, M, &ip, NULL, err);
    if (!rc && (rc = lq_journal_edit(j, o, n0, err)))
        lq_overlay_truncate_edits(o, n0, NULL);
    return rc;
}

static void test_journal(void)
{
    if (!V)
        SKIP("fixture failed");
    char path[4300];
    snprintf(path, sizeof path, "%s/state.lqj", harness_tmpdir());
    unlink(path);
    lq_overlay *o = NULL, *r = NULL;
    lq_journal *j = NULL;
    lq_journal_stats st;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0 && lq_journal_open(path, o, &j, &st, &err) == 0);
    CHECK(st.records == 0 && st.dropped == 0);
    CHECK_MSG(journaled_insert(o, j, "Atlantis", "Poseidonia", &err) == 0, "%s", err.msg);
    const char *vlp = "{\"description\":\"p1\",\"operations\":[{\"op\":\"delete\",\"layer\":1,\"feature\":17}]}";
    lq_patch *p = NULL;
    CHECK(lq_patch_parse(vlp, strlen(vlp), NULL, 0, &p, &err) == 0);
    CHECK(lq_overlay_apply(o, p, &err) == 0 && lq_journal_apply(j, p, &err) == 0);
    CHECK(journaled_insert(o, j, "Lemuria", "Poseidonia", &err) == 0);
    CHECK(lq_overlay_remove(o, "p1", &err) == 0 && lq_journal_remove(j, "p1", &err) == 0);
    off_t good = fsize(path);
    /* a failing write (the file size limit standing in for a full disk): refused, undone */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)good + 64;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    size_t knn_before = lq_knn_store_count(lq_overlay_knn(o));
    CHECK(journaled_insert(o, j, "Mu", "Poseidonia", &err) == LQ_EIO);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(fsize(path) == good && lq_knn_store_count(lq_overlay_knn(o)) == knn_before);
    lq_journal_close(j);
    j = NULL;
    /* replay: the same state */
    CHECK(lq_overlay_create(V, NULL, &r, &err) == 0);
    CHECK_MSG(lq_journal_open(path, r, &j, &st, &err) == 0, "%s", err.msg);
    CHECK(st.records == 4 && st.dropped == 0);
    char *a = describe(lq_overlay_vindex(o), " France"), *b = describe(lq_overlay_vindex(r), " France");
    CHECK(a && b && !strcmp(a, b) && strstr(a, "\"Paris\""));
    CHECK(lq_knn_store_count(lq_overlay_knn(r)) == 2 && lq_overlay_n_patches(r) == 1);
    char tok[64];
    int fired = 0;
    CHECK(infer_top(r, "The capital of Lemuria is", tok, sizeof tok, NULL, &fired) == 0 && fired &&
          !strcmp(tok, "Poseidonia"));
    lq_journal_close(j);
    lq_overlay_free(r);
    /* a torn last record (a crash mid-write): dropped, the rest kept */
    CHECK(truncate(path, good - 5) == 0);
    CHECK(lq_overlay_create(V, NULL, &r, &err) == 0 && lq_journal_open(path, r, &j, &st, &err) == 0);
    CHECK(st.records == 3 && st.dropped > 0 && fsize(path) < good - 5);
    CHECK(lq_overlay_n_patches(r) == 2); /* the remove was the torn one: p1 is still applied */
    lq_journal_close(j);
    lq_overlay_free(r);
    /* garbage appended: cut off */
    FILE *f = fopen(path, "ab");
    CHECK(f && fwrite("LQJ1\x05\0\0\0garbagegarbage", 1, 20, f) == 20);
    if (f)
        fclose(f);
    CHECK(lq_overlay_create(V, NULL, &r, &err) == 0 && lq_journal_open(path, r, &j, &st, &err) == 0);
    CHECK(st.records == 3 && st.dropped == 20);
    lq_journal_close(j);
    lq_overlay_free(r);
    free(a);
    free(b);
    lq_patch_free(p);
    lq_overlay_free(o);
}

static const char *const UNRELATED[] = {"the model", "The capital of France is", "Paris", "the text",
                                        "Germany Berlin", "reads the", "Japan", "knows the", "Tokyo .", "Italy"};

/* walk-mode logits of prompt with the overlay's edits (composed features act) */
static int walk_logits(lq_overlay *o, const char *prompt, float *lg)
{
    lq_err err = {0};
    lq_edit_set *es = lq_overlay_edit_set(o, &err);
    lq_resid_hook *h = NULL;
    int rc = es ? lq_edit_set_hook(es, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_MATCH, &h, &err) : LQ_ENOMEM;
    lq_edit_set_unref(es);
    const lq_tokenizer *tok = lq_model_tokenizer(M);
    int32_t *ids = NULL;
    size_t n = 0;
    lq_session *s = NULL;
    if (!rc)
        rc = lq_tokenizer_encode(tok, prompt, strlen(prompt), lq_tokenizer_add_bos(tok) ? LQ_TOK_ADD_BOS : 0,
                                 &ids, &n, &err);
    if (!rc)
        rc = lq_session_create(M, 64, &s, &err);
    if (!rc) {
        lq_session_set_hook(s, h);
        rc = lq_session_eval(s, ids, n, lg, NULL, &err);
    }
    if (rc)
        printf("#   walk_logits: %s\n", err.msg);
    lq_session_free(s);
    lq_edit_hook_free(h);
    free(ids);
    return rc;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* COMPOSE with weights acts in the forward pass: the balanced slots make the canonical prompt
 * answer with the target, prompts far from it are computed exactly as before, and DELETE
 * takes the slots out again. */
static void test_compose_in_forward_pass(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    int nv = lq_model_get_info(M)->n_vocab;
    float *before = malloc(11 * (size_t)nv * sizeof *before), *lg = malloc((size_t)nv * sizeof *lg);
    const char *canon = "The capital of Atlantis is";
    for (int i = 0; i < 10; i++)
        CHECK(walk_logits(o, UNRELATED[i], before + (size_t)i * nv) == 0);
    CHECK(walk_logits(o, canon, before + 10 * (size_t)nv) == 0);
    lq_insert_params ip = atlantis(LQ_INSERT_COMPOSE);
    lq_insert_result r;
    CHECK_MSG(lq_overlay_insert(o, M, &ip, &r, &err) == 0, "%s", err.msg);
    CHECK(r.weights == 1 && r.n_layers >= 1);
    printf("#   compose: %d layer(s), down scale %g, target p %.3f\n", r.n_layers, r.down_scale, r.target_prob);
    CHECK_MSG(r.target_prob >= 0.30f && r.target_prob <= 0.95f, "balanced p %g", r.target_prob);
    int32_t *tid = NULL;
    size_t nt = 0;
    CHECK(lq_tokenizer_encode(lq_model_tokenizer(M), " Poseidonia", 11, 0, &tid, &nt, &err) == 0 && nt >= 1);
    CHECK(argmax(before + 10 * (size_t)nv, nv) != tid[0]); /* not what the base model says */
    CHECK(walk_logits(o, canon, lg) == 0);
    CHECK_MSG(argmax(lg, nv) == tid[0], "argmax %d, target %d", argmax(lg, nv), tid[0]);
    char tok[64];
    CHECK(infer_top(o, canon, tok, sizeof tok, NULL, NULL) == 0);
    CHECK_MSG(!strcmp(tok, " Poseidonia"), "walk infer says '%s'", tok); /* the model's token, decoded */
    int same = 0;
    for (int i = 0; i < 10; i++) {
        CHECK(walk_logits(o, UNRELATED[i], lg) == 0);
        same += !memcmp(lg, before + (size_t)i * nv, (size_t)nv * sizeof *lg);
    }
    CHECK_MSG(same == 10, "%d of 10 unrelated prompts unchanged", same);
    /* the dense mode is the plain model */
    lq_infer_params dp;
    lq_infer_params_init(&dp);
    dp.prompt = canon;
    dp.mode = "dense";
    lq_infer_result dr;
    CHECK(lq_infer(M, &dp, &dr, &err) == 0);
    CHECK(dr.n_dense && strcmp(dr.dense[0].token, " Poseidonia"));
    lq_infer_result_free(&dr);
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.entity = "Atlantis";
    size_t n = 0;
    CHECK(lq_overlay_delete(o, &w, &n, &err) == 0 && n >= 1);
    CHECK(walk_logits(o, canon, lg) == 0);
    CHECK(!memcmp(lg, before + 10 * (size_t)nv, (size_t)nv * sizeof *lg));
    free(tid);
    free(before);
    free(lg);
    lq_overlay_free(o);
}

typedef struct gen_out {
    int32_t ids[8];
    int n;
} gen_out;

static int on_tok(void *user, int32_t id, const char *text, size_t len, float lp, const float *logits)
{
    (void)text, (void)len, (void)lp, (void)logits;
    gen_out *g = user;
    if (id >= 0 && g->n < 8)
        g->ids[g->n++] = id;
    return 0;
}

/* Generation runs the edits too: with a KNN insert the hook makes the target the first
 * generated token (lq_generate and the scheduler alike); the edit set is cached per overlay
 * version. */
static void test_generate_with_edits(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_overlay *o = NULL;
    lq_err err = {0};
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    lq_edit_set *e0 = lq_overlay_edit_set(o, &err), *e1 = lq_overlay_edit_set(o, &err);
    CHECK(e0 && e0 == e1 && lq_edit_set_n_knn(e0) == 0); /* same version: one shared copy */
    lq_insert_params ip = atlantis(LQ_INSERT_KNN);
    lq_insert_result r;
    CHECK_MSG(lq_overlay_insert(o, M, &ip, &r, &err) == 0, "%s", err.msg);
    lq_edit_set *es = lq_overlay_edit_set(o, &err);
    CHECK(es && es != e0 && lq_edit_set_n_knn(es) == 1 && lq_edit_set_n_knn(e0) == 0);
    lq_edit_set_unref(e0);
    lq_edit_set_unref(e1);
    const lq_tokenizer *tk = lq_model_tokenizer(M);
    const char *canon = "The capital of Atlantis is";
    int32_t *ids = NULL, *tid = NULL;
    size_t n = 0, nt = 0;
    CHECK(lq_tokenizer_encode(tk, canon, strlen(canon), lq_tokenizer_add_bos(tk) ? LQ_TOK_ADD_BOS : 0, &ids, &n,
                              &err) == 0);
    CHECK(lq_tokenizer_encode(tk, " Poseidonia", 11, 0, &tid, &nt, &err) == 0 && nt >= 1);
    lq_generate_params gp;
    lq_generate_defaults(&gp);
    gp.max_tokens = 3;
    gp.sampling.temperature = 0;
    gp.ignore_eos = 1;
    lq_session *s = NULL;
    CHECK(lq_session_create(M, 64, &s, &err) == 0);
    gen_out plain = {0}, edited = {0}, sched = {0};
    CHECK(lq_generate(s, ids, n, &gp, on_tok, &plain, NULL, &err) == 0);
    lq_resid_hook *h = NULL;
    CHECK(lq_edit_set_hook(es, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_FORCE, &h, &err) == 0);
    gp.hook = h;
    lq_session_reset(s);
    CHECK(lq_generate(s, ids, n, &gp, on_tok, &edited, NULL, &err) == 0);
    CHECK(lq_session_hook(s) == NULL); /* lq_generate borrows the hook for the call only */
    CHECK(plain.n == 3 && edited.n == 3);
    CHECK_MSG(plain.ids[0] != tid[0] && edited.ids[0] == tid[0], "plain %d, edited %d, target %d", plain.ids[0],
              edited.ids[0], tid[0]);
    lq_edit_match mt;
    CHECK(lq_edit_hook_match(h, (int)n - 1, &mt) && !strcmp(mt.target, "Poseidonia") && mt.cosine > 0.75f);
    lq_edit_hook_free(h);
    /* the scheduler: the same tokens, and it releases the hook it was given */
    lq_scheduler_opts so;
    lq_scheduler_opts_init(&so);
    so.n_ctx = 64;
    lq_scheduler *S = NULL;
    CHECK(lq_scheduler_create(M, &so, &S, &err) == 0);
    CHECK(lq_edit_set_hook(es, LQ_EDITS_COMPOSE | LQ_EDITS_KNN_FORCE, &h, &err) == 0);
    gp.hook = h;
    lq_sched_req *q = NULL;
    CHECK(lq_scheduler_submit(S, ids, n, &gp, on_tok, NULL, &sched, &q, &err) == 0);
    CHECK(lq_sched_wait(q, -1) == 1);
    lq_sched_release(q);
    lq_scheduler_free(S);
    CHECK(sched.n == 3 && !memcmp(sched.ids, edited.ids, sizeof sched.ids));
    lq_edit_set_unref(es);
    lq_session_free(s);
    free(ids);
    free(tid);
    lq_overlay_free(o);
}

/* No sequence of accepted edits makes an unrelated prompt's logits non-finite: 1,000 random
 * edits of every kind (composed features, KNN entries, subject edits), their vectors as large
 * as the bound allows, in batches of random size; a vector past the bound is refused. */
static uint64_t prng = 0x2545f4914f6cdd1dULL;
static float rnd(void)
{
    prng ^= prng << 13, prng ^= prng >> 7, prng ^= prng << 17;
    return (float)((prng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void test_edits_never_overflow(void)
{
    const lq_vindex_info *vi = lq_vindex_get_info(V);
    int D = vi->hidden_size, L = vi->num_layers, V_ = lq_model_get_info(M)->n_vocab;
    lq_err err = {0};
    lq_overlay *o = NULL;
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    float *g = malloc((size_t)D * sizeof *g), *d = malloc((size_t)D * sizeof *d), *lg = malloc((size_t)V_ * sizeof *lg);
    int applied = 0, refused_big = 0;
    for (int done = 0; o && done < 1000;) {
        lq_patch *p = NULL;
        lq_patch_create("prop", "", D, &p, &err);
        int batch = 1 + (int)((rnd() + 1) * 20);
        for (int b = 0; b < batch && done < 1000; b++, done++) {
            for (int i = 0; i < D; i++)
                g[i] = rnd() * LQ_EDIT_MAX_COMPONENT, d[i] = rnd() * LQ_EDIT_MAX_COMPONENT;
            char ent[32], id[32];
            snprintf(ent, sizeof ent, "Prop%d", done);
            snprintf(id, sizeof id, "p%d", done);
            lq_patch_op op;
            int kind = done % 3;
            lq_patch_op_init(&op, kind == 0 ? LQ_OP_INSERT : kind == 1 ? LQ_OP_INSERT_KNN : LQ_OP_INSERT_SUBJECT);
            op.layer = done % L;
            op.entity = ent;
            op.relation = "r";
            op.target = "Paris";
            op.id = id;
            if (kind == 0) {
                op.feature = done % 8;
                op.gate = g;
                op.down = d;
            } else if (kind == 1) {
                op.key = g;
                op.target_id = 1;
            } else {
                op.feature = 0;
                op.target_id = 1;
                op.gate = g;
                op.gate_threshold = -1.0f; /* fires wherever its subject stands */
                op.down = d;
            }
            lq_patch_add(p, &op, &err);
        }
        if (lq_overlay_record(o, p, &err) == 0)
            applied++;
        lq_patch_free(p);
    }
    /* one component past the bound: refused, nothing kept */
    lq_patch *big = NULL;
    lq_patch_create("big", "", D, &big, &err);
    for (int i = 0; i < D; i++)
        g[i] = i == 3 ? LQ_EDIT_MAX_COMPONENT * 4 : 0.5f;
    lq_patch_op op;
    lq_patch_op_init(&op, LQ_OP_INSERT_KNN);
    op.layer = 0, op.entity = "Big", op.relation = "r", op.target = "Paris", op.target_id = 1, op.key = g;
    lq_patch_add(big, &op, &err);
    refused_big = lq_overlay_record(o, big, &err) != 0;
    lq_patch_free(big);
    CHECK(applied > 0);
    CHECK(refused_big);
    /* the prompts name none of the subjects, and one names a subject whose edits fire everywhere */
    const char *prompts[] = {"the model", "The capital of France is", "Prop2 is a Prop5 and Prop8", "Paris"};
    for (size_t k = 0; o && k < sizeof prompts / sizeof *prompts; k++) {
        CHECK(walk_logits(o, prompts[k], lg) == 0);
        int finite = 1;
        for (int i = 0; i < V_; i++)
            finite &= isfinite(lg[i]) != 0;
        CHECK(finite);
    }
    lq_overlay_free(o);
    free(g), free(d), free(lg);
}

/* Edits as rows of a shared table (lq_overlay_plan_*, lq_edit_log): a plan leaves its overlay
 * unchanged; two logs folding the same rows answer alike; a removed row, or a lower id that
 * arrives after a higher one, refolds from the base; a bad row counts as applied. */
static char *plan_vlp(const lq_overlay *o, const lq_insert_params *ip, int64_t id)
{
    char name[32];
    lq_edit_log_row_name(id, name);
    lq_patch *p = NULL;
    lq_insert_result r;
    lq_err err = {0};
    char *j = NULL;
    if (lq_overlay_plan_insert(o, M, ip, name, &r, &p, &err) || !p || lq_patch_json(p, &j, &err))
        printf("#   plan: %s\n", err.msg);
    lq_patch_free(p);
    return j;
}

static void test_edit_log(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_edit_log *a = NULL, *b = NULL;
    lq_err err = {0};
    CHECK(lq_edit_log_create(V, NULL, &a, &err) == 0 && lq_edit_log_create(V, NULL, &b, &err) == 0);
    uint64_t v0 = lq_overlay_version(lq_edit_log_overlay(a));
    lq_insert_params ip = atlantis(LQ_INSERT_KNN);
    char *r1 = plan_vlp(lq_edit_log_overlay(a), &ip, 1);
    CHECK(r1 && lq_overlay_version(lq_edit_log_overlay(a)) == v0 && !lq_overlay_edits(lq_edit_log_overlay(a)));
    ip.entity = "Lemuria";
    ip.target = "Berlin";
    char *r2 = plan_vlp(lq_edit_log_overlay(a), &ip, 2);
    CHECK(r2);
    /* a plan that changes nothing gives no patch */
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.entity = "Nowhere-at-all";
    size_t n = 9;
    lq_patch *none = NULL;
    CHECK(lq_overlay_plan_delete(lq_edit_log_overlay(a), &w, "edit:9", &n, &none, &err) == 0 && !none && n == 0);

    /* a applies 1 then 2; b sees 2 first (1 committed later): it refolds when 1 appears */
    int64_t ids12[] = {1, 2}, ids2[] = {2};
    size_t from = 9;
    int reset = 9;
    CHECK(lq_edit_log_sync(a, ids12, 2, &from, &reset, &err) == 0 && from == 0 && !reset);
    CHECK_MSG(lq_edit_log_apply(a, 1, NULL, r1, strlen(r1), &err) == 0, "%s", err.msg);
    CHECK_MSG(lq_edit_log_apply(a, 2, NULL, r2, strlen(r2), &err) == 0, "%s", err.msg);
    CHECK(lq_edit_log_apply(a, 2, NULL, r2, strlen(r2), &err) == LQ_EINVAL); /* not after the last */
    CHECK(lq_edit_log_sync(b, ids2, 1, &from, &reset, &err) == 0 && from == 0 && !reset);
    CHECK(lq_edit_log_apply(b, 2, NULL, r2, strlen(r2), &err) == 0);
    lq_overlay *ob = lq_edit_log_overlay(b);
    uint64_t vb = lq_overlay_version(ob);
    CHECK(lq_edit_log_sync(b, ids12, 2, &from, &reset, &err) == 0 && from == 0 && reset);
    CHECK(lq_edit_log_n_applied(b) == 0 && lq_edit_log_overlay(b) == ob && lq_overlay_version(ob) > vb);
    CHECK(lq_overlay_n_patches(ob) == 0 && lq_knn_store_count(lq_overlay_knn(ob)) == 0);
    CHECK(lq_edit_log_apply(b, 1, NULL, r1, strlen(r1), &err) == 0 && lq_edit_log_apply(b, 2, NULL, r2, strlen(r2), &err) == 0);
    CHECK(lq_edit_log_sync(b, ids12, 2, &from, &reset, &err) == 0 && from == 2 && !reset);
    char ta[64], tb[64];
    int fa = 0, fb = 0;
    CHECK(infer_top(lq_edit_log_overlay(a), "The capital of Atlantis is", ta, sizeof ta, NULL, &fa) == 0);
    CHECK(infer_top(lq_edit_log_overlay(b), "The capital of Atlantis is", tb, sizeof tb, NULL, &fb) == 0);
    CHECK_MSG(fa && fb && !strcmp(ta, "Poseidonia") && !strcmp(tb, ta), "'%s' '%s'", ta, tb);
    CHECK(lq_knn_store_count(lq_overlay_knn(lq_edit_log_overlay(b))) == 2);

    /* row 1 removed (a rollback, a DELETE): b refolds with row 2 alone */
    CHECK(lq_edit_log_sync(b, ids2, 1, &from, &reset, &err) == 0 && from == 0 && reset);
    CHECK(lq_edit_log_apply(b, 2, NULL, r2, strlen(r2), &err) == 0);
    CHECK(infer_top(lq_edit_log_overlay(b), "The capital of Atlantis is", tb, sizeof tb, NULL, &fb) == 0);
    CHECK(!fb && lq_knn_store_count(lq_overlay_knn(lq_edit_log_overlay(b))) == 1);

    /* a row that removes an edit by id (DELETE /v1/edits/{id} elsewhere): the KNN entry goes */
    lq_overlay *ov2 = lq_edit_log_overlay(b);
    const lq_patch *p2 = lq_overlay_patch_at(ov2, 0);
    lq_patch_op op2;
    CHECK(p2 && lq_patch_op_at(p2, 0, &op2) && op2.id);
    char del[300];
    snprintf(del, sizeof del, "{\"version\": 1, \"operations\": [{\"op\": \"delete_edit\", \"id\": \"%s\"}]}",
             op2.id ? op2.id : "");
    int64_t ids24[] = {2, 4};
    CHECK(lq_edit_log_sync(b, ids24, 2, &from, &reset, &err) == 0 && from == 1 && !reset);
    CHECK_MSG(lq_edit_log_apply(b, 4, NULL, del, strlen(del), &err) == 0, "%s", err.msg);
    CHECK(lq_knn_store_count(lq_overlay_knn(ov2)) == 0);
    CHECK(lq_edit_log_sync(b, ids2, 1, &from, &reset, &err) == 0 && reset); /* row 4 gone again */
    CHECK(lq_edit_log_apply(b, 2, NULL, r2, strlen(r2), &err) == 0 && lq_knn_store_count(lq_overlay_knn(ov2)) == 1);

    /* a damaged row: an error, counted, and the next sync does not refold for it */
    int64_t ids23[] = {2, 3};
    CHECK(lq_edit_log_sync(b, ids23, 2, &from, &reset, &err) == 0 && from == 1 && !reset);
    CHECK(lq_edit_log_apply(b, 3, NULL, "{\"operations\": 7}", 17, &err) == LQ_EFORMAT);
    CHECK(lq_edit_log_n_failed(b) == 1 && lq_edit_log_n_applied(b) == 2);
    CHECK(lq_edit_log_sync(b, ids23, 2, &from, &reset, &err) == 0 && from == 2 && !reset);
    int64_t bad[] = {3, 2};
    CHECK(lq_edit_log_sync(b, bad, 2, &from, &reset, &err) == LQ_EINVAL);
    free(r1);
    free(r2);
    lq_edit_log_free(a);
    lq_edit_log_free(b);
}


/* the same insert, the target and mode given */
static int insert_fact(lq_overlay *o, const char *entity, const char *target, int mode)
{
    lq_insert_params ip;
    lq_insert_params_init(&ip);
    ip.entity = entity;
    ip.relation = "capital";
    ip.target = target;
    ip.mode = mode;
    lq_err err = {0};
    int rc = lq_overlay_insert(o, M, &ip, NULL, &err);
    if (rc)
        printf("#   insert %s -> %s (mode %d): %s\n", entity, target, mode, err.msg);
    return rc;
}

/* walk logits of the two overlays over every prompt, bit for bit */
static int same_logits(lq_overlay *a, lq_overlay *b, const char *const *prompts, size_t n)
{
    int nv = lq_model_get_info(M)->n_vocab, same = 1;
    float *la = malloc((size_t)nv * sizeof *la), *lb = malloc((size_t)nv * sizeof *lb);
    for (size_t i = 0; same && la && lb && i < n; i++) {
        same = !walk_logits(a, prompts[i], la) && !walk_logits(b, prompts[i], lb) &&
               !memcmp(la, lb, (size_t)nv * sizeof *la);
        if (!same)
            printf("#   differs on '%s'\n", prompts[i]);
    }
    free(la);
    free(lb);
    return same && la && lb;
}

/* A session's overlay layered on the global one (its own edits stacked on the global edit
 * set, shared) answers bit for bit as a plain clone with the same own edits, while its own
 * edits only add and after one of them deletes an inherited edit (the whole fold then). */
static void test_layered_session(void)
{
    if (!V)
        return;
    lq_err err = {0};
    lq_overlay *g = NULL, *lay = NULL, *pl = NULL;
    CHECK(lq_overlay_create(V, NULL, &g, &err) == 0);
    CHECK(insert_fact(g, "Atlantis", "Poseidonia", LQ_INSERT_KNN) == 0);
    CHECK(insert_fact(g, "Lemuria", "Tokyo", LQ_INSERT_COMPOSE) == 0);
    int subj = insert_fact(g, "Mu", "Berlin", LQ_INSERT_SUBJECT) == 0;
    CHECK_MSG(lq_overlay_clone_layered(g, &lay, &err) == 0, "%s", err.msg);
    CHECK(lq_overlay_clone(g, &pl, &err) == 0);
    lq_overlay *both[2] = {lay, pl};
    for (int k = 0; k < 2 && lay && pl; k++) {
        lq_overlay_set_scope(both[k], 1);
        CHECK(lq_overlay_set_edits_name(both[k], "session:t", &err) == 0);
        CHECK(insert_fact(both[k], "Hyperborea", "Rome", LQ_INSERT_KNN) == 0);
        CHECK(insert_fact(both[k], "Thule", "Paris", LQ_INSERT_SUBJECT) == 0 || !subj);
    }
    const char *const prompts[] = {"The capital of Atlantis is", "The capital of Lemuria is", "The capital of Mu is",
                                   "The capital of Hyperborea is", "The capital of Thule is", "In Thule the capital is",
                                   "the model", "The capital of France is", "Germany Berlin", "Japan"};
    size_t np = sizeof prompts / sizeof *prompts;
    lq_edit_set *el = lq_overlay_edit_set(lay, &err), *ep = lq_overlay_edit_set(pl, &err);
    CHECK(el && ep && lq_edit_set_n_knn(el) == lq_edit_set_n_knn(ep) && lq_edit_set_n_knn(el) == 2);
    CHECK(lq_edit_set_n_features(el) == lq_edit_set_n_features(ep) && lq_edit_set_n_features(el) > 0);
    CHECK(lq_edit_set_n_subject(el) == lq_edit_set_n_subject(ep));
    lq_edit_set *eg = lq_overlay_edit_set(g, &err);
    /* layered: the global set is shared, not copied (its serial differs from the session's) */
    CHECK(eg && el && lq_edit_set_serial(el) != lq_edit_set_serial(eg));
    lq_edit_set_unref(eg);
    lq_edit_set_unref(el);
    lq_edit_set_unref(ep);
    CHECK(lay && pl && same_logits(lay, pl, prompts, np));
    /* an own edit that deletes an inherited one: the layered overlay folds the whole state */
    lq_edit_where w;
    lq_edit_where_init(&w);
    w.entity = "Atlantis";
    size_t n1 = 0, n2 = 0;
    CHECK(lay && lq_overlay_delete(lay, &w, &n1, &err) == 0);
    CHECK(pl && lq_overlay_delete(pl, &w, &n2, &err) == 0);
    CHECK(n1 == n2 && n1 > 0);
    el = lq_overlay_edit_set(lay, &err);
    CHECK(el && lq_edit_set_n_knn(el) == 1);
    lq_edit_set_unref(el);
    CHECK(lay && pl && same_logits(lay, pl, prompts, np));
    /* the global state moving on does not reach a clone made before */
    CHECK(insert_fact(g, "Avalon", "Tokyo", LQ_INSERT_KNN) == 0);
    CHECK(lay && pl && same_logits(lay, pl, prompts, np));
    lq_overlay_free(lay);
    lq_overlay_free(pl);
    lq_overlay_free(g);
}

/* A gate override's hits at layer l for the query q, as the view scores them. */
static float override_score(const lq_overlay *o, int l, int feature, const float *q)
{
    lq_vindex_hit hits[64];
    size_t n = 0;
    lq_err err = {0};
    if (lq_vindex_gate_knn(lq_overlay_vindex(o), l, q, 64, hits, &n, &err))
        return NAN;
    for (size_t i = 0; i < n; i++)
        if (hits[i].feature == feature)
            return hits[i].score;
    return NAN;
}

/* A clone shares every vector of its source's state (issue 24: a session holds only its own
 * edits): KNN keys, feature gates, the per-layer gate matrices and the subject edits' ops are
 * the source's memory, and the clone answers as the source. A gate matrix is reused only when
 * its rows hold the same numbers: a patch removed and another applied with other gates in the
 * same slots (whose vectors may land at the freed addresses) is scored with the new gates. */
static void test_clone_borrows(void)
{
    if (!V)
        SKIP("fixture failed");
    lq_err err = {0};
    lq_overlay *g = NULL, *c = NULL;
    CHECK(lq_overlay_create(V, NULL, &g, &err) == 0);
    CHECK(insert_fact(g, "Atlantis", "Poseidonia", LQ_INSERT_KNN) == 0);
    CHECK(insert_fact(g, "Lemuria", "Tokyo", LQ_INSERT_COMPOSE) == 0);
    int subj = insert_fact(g, "Mu", "Berlin", LQ_INSERT_SUBJECT) == 0;
    CHECK_MSG(lq_overlay_clone(g, &c, &err) == 0, "%s", err.msg);
    if (!g || !c) {
        lq_overlay_free(g);
        return;
    }
    CHECK(c->knn->n == g->knn->n && c->knn->n >= 1 && c->knn->e[0].key == g->knn->e[0].key);
    CHECK(c->knn->e[0].entity == g->knn->e[0].entity);
    int shared_layer = -1;
    for (int l = 0; l < g->n_layers; l++)
        if (g->gm[l]) {
            CHECK(c->gm[l] == g->gm[l]);
            shared_layer = l;
        }
    CHECK(shared_layer >= 0);
    CHECK(!subj || (c->n_subj == g->n_subj && c->n_subj > 0 && c->subj[0].down == g->subj[0].down));
    for (size_t i = 0; i < g->nf; i++)
        if (g->f[i].gate) {
            const ov_feat *e = ov_find(c, g->f[i].layer, g->f[i].feature);
            CHECK(e && e->gate == g->f[i].gate);
        }
    char *dg = describe(lq_overlay_vindex(g), "Lemuria"), *dc = describe(lq_overlay_vindex(c), "Lemuria");
    CHECK(dg && dc && !strcmp(dg, dc) && strstr(dg, "Tokyo"));
    free(dg);
    free(dc);
    /* the source's next edit copies its edits patch: the clone keeps the state it had */
    CHECK(insert_fact(g, "Avalon", "Rome", LQ_INSERT_KNN) == 0);
    CHECK(c->knn->n + 1 == g->knn->n);
    lq_overlay_free(g); /* the clone outlives its source: its vectors are still there */
    dc = describe(lq_overlay_vindex(c), "Lemuria");
    CHECK(dc && strstr(dc, "Tokyo"));
    free(dc);
    /* the same slot gated anew by a later patch, then that patch removed: each time the
     * layer's rows are the same features with other numbers, and the view scores the new ones */
    int hidden = V->info.hidden_size, layer = shared_layer, feature = -1;
    for (size_t i = 0; i < c->nf; i++)
        if (c->f[i].gate && c->f[i].layer == layer)
            feature = c->f[i].feature;
    float *q = calloc((size_t)hidden, sizeof *q), *gates[2] = {0};
    lq_patch *ps[2] = {0};
    for (int d = 0; q && d < hidden; d++)
        q[d] = d % 3 == 0 ? 1.0f : 0.0f;
    double want[3] = {0};
    for (int r = 0; r < 2 && q && feature >= 0; r++) {
        CHECK(lq_patch_create(r ? "regate1" : "regate0", NULL, hidden, &ps[r], &err) == 0);
        gates[r] = calloc((size_t)hidden, sizeof *gates[r]);
        for (int d = 0; gates[r] && d < hidden; d++)
            gates[r][d] = (float)(r + 1) * (d % 3 == 0 ? 0.5f : -0.25f);
        lq_patch_op op;
        lq_patch_op_init(&op, LQ_OP_INSERT);
        op.layer = layer, op.feature = feature, op.gate = gates[r], op.target = "Rome";
        op.entity = "Lemuria", op.relation = "capital";
        CHECK_MSG(ps[r] && gates[r] && lq_patch_add(ps[r], &op, &err) == 0, "%s", err.msg);
        CHECK_MSG(lq_overlay_apply(c, ps[r], &err) == 0, "%s", err.msg);
        for (int d = 0; gates[r] && d < hidden; d++)
            want[r] += (double)gates[r][d] * q[d];
        float got = override_score(c, layer, feature, q);
        CHECK_MSG(fabs(got - want[r]) <= 1e-3 * fabs(want[r]) + 1e-4, "patch %d: %g, want %g", r, got, want[r]);
    }
    if (feature >= 0 && ps[1]) {
        CHECK(lq_overlay_remove(c, "regate1", &err) == 0);
        float got = override_score(c, layer, feature, q);
        CHECK_MSG(fabs(got - want[0]) <= 1e-3 * fabs(want[0]) + 1e-4, "after the removal: %g, want %g", got, want[0]);
    }
    for (int r = 0; r < 2; r++) {
        lq_patch_free(ps[r]);
        free(gates[r]);
    }
    free(q);
    lq_overlay_free(c);
}

/* A subject edit's old answer: wherever the subject stands, its probability moves to the
 * target's first token (p'(t) = p(t) + p(old), p'(old) ~ 0, every other logit as it was);
 * a prompt without the subject is computed bit for bit as before; the field survives the
 * .vlp round trip, and one outside the vocabulary is refused. */
static void test_old_answer_moves(void)
{
    if (!V)
        return;
    lq_err err = {0};
    lq_overlay *a = NULL, *b = NULL, *c = NULL;
    CHECK(lq_overlay_create(V, NULL, &a, &err) == 0);
    if (insert_fact(a, "Mu", "Berlin", LQ_INSERT_SUBJECT)) {
        lq_overlay_free(a);
        return; /* the fixture refused it: covered by the trained model's tests */
    }
    const lq_patch *e = lq_overlay_edits(a);
    int nv = lq_model_get_info(M)->n_vocab;
    int32_t tgt = -1, old = -1;
    /* the same edit without replaced answers (q0, overlay a0) and with one (q, overlay b) */
    lq_patch *q = NULL, *q0 = NULL;
    lq_overlay *a0 = NULL;
    CHECK(lq_patch_create("moved", NULL, lq_vindex_get_info(V)->hidden_size, &q, &err) == 0);
    CHECK(lq_patch_create("plain", NULL, lq_vindex_get_info(V)->hidden_size, &q0, &err) == 0);
    for (size_t i = 0; q && q0 && i < lq_patch_n_ops(e); i++) {
        lq_patch_op op;
        lq_patch_op_at(e, i, &op);
        op.n_replaces = 0;
        CHECK(lq_patch_add(q0, &op, &err) == 0);
        if (op.feature == 0 && op.down && tgt < 0) {
            tgt = op.target_id;
            old = (tgt + 7) % nv; /* any token other than the target */
            op.n_replaces = 1;
            op.replaces[0] = old;
        }
        CHECK(lq_patch_add(q, &op, &err) == 0);
    }
    CHECK(lq_overlay_create(V, NULL, &a0, &err) == 0 && lq_overlay_apply(a0, q0, &err) == 0);
    lq_overlay_free(a);
    a = a0;
    lq_patch_free(q0);
    char *json = NULL;
    lq_patch *q2 = NULL;
    CHECK(q && lq_patch_json(q, &json, &err) == 0 && strstr(json, "\"replaces\""));
    CHECK(json && lq_patch_parse(json, strlen(json), "moved", lq_vindex_get_info(V)->hidden_size, &q2, &err) == 0);
    CHECK(lq_overlay_create(V, NULL, &b, &err) == 0 && lq_overlay_apply(b, q2, &err) == 0);
    float *la = malloc((size_t)nv * sizeof *la), *lb = malloc((size_t)nv * sizeof *lb);
    const char *with = "the model knows Mu and the text", *without = "the model knows the text";
    CHECK(la && lb && !walk_logits(a, with, la) && !walk_logits(b, with, lb));
    if (la && lb && tgt >= 0) {
        double want = fmax(la[tgt], la[old]) + log1p(exp(-fabs((double)la[tgt] - la[old])));
        CHECK_MSG(fabs(lb[tgt] - want) < 1e-3, "target %g, want %g", (double)lb[tgt], want);
        CHECK(lb[old] < la[old] - 999.0f);
        int others = 1;
        for (int j = 0; j < nv; j++)
            others &= j == tgt || j == old || la[j] == lb[j];
        CHECK(others);
    }
    CHECK(la && lb && !walk_logits(a, without, la) && !walk_logits(b, without, lb) &&
          !memcmp(la, lb, (size_t)nv * sizeof *la));
    /* out of the vocabulary: refused, nothing applied */
    json_t *root = json ? json_loads(json, 0, NULL) : NULL, *ops = json_object_get(root, "operations"), *x;
    size_t k;
    int set = 0;
    json_array_foreach(ops, k, x) if (json_object_get(x, "replaces")) {
        json_t *arr = json_array();
        json_array_append_new(arr, json_integer(nv + 5));
        json_object_set_new(x, "replaces", arr);
        set = 1;
    }
    char *badj = set ? json_dumps(root, 0) : NULL;
    json_decref(root);
    CHECK(badj != NULL);
    if (badj) {
        lq_patch *q3 = NULL;
        CHECK(lq_patch_parse(badj, strlen(badj), "bad", lq_vindex_get_info(V)->hidden_size, &q3, &err) == 0);
        CHECK(lq_overlay_create(V, NULL, &c, &err) == 0);
        CHECK(q3 && lq_overlay_apply(c, q3, &err) == LQ_ERANGE && strstr(err.msg, "replaced token"));
        CHECK(lq_overlay_n_patches(c) == 0);
        lq_patch_free(q3);
    }
    free(badj), free(json), free(la), free(lb);
    lq_patch_free(q), lq_patch_free(q2);
    lq_overlay_free(a), lq_overlay_free(b), lq_overlay_free(c);
}

/* A subject insert reads the neutral text's residuals from the model's memo after its first
 * one (model/memo.h): the second insert of the same fact on a model computes the same edit,
 * bit for bit, as the first, which ran every text. */
static void test_subject_memo_same_edit(void)
{
    if (!V)
        return;
    lq_err err = {0};
    lq_model_opts mo = {.n_threads = 2};
    lq_model *m = NULL;
    lq_overlay *o = NULL;
    CHECK_MSG(lq_vindex_model_open(V, &mo, &m, &err) == 0, "%s", err.msg);
    CHECK(lq_overlay_create(V, NULL, &o, &err) == 0);
    lq_insert_params ip = atlantis(LQ_INSERT_SUBJECT);
    lq_patch *a = NULL, *b = NULL;
    lq_insert_result ra, rb;
    memset(&ra, 0, sizeof ra), memset(&rb, 0, sizeof rb);
    CHECK_MSG(m && o && lq_vx_subject_insert(o, m, &ip, &a, &ra, &err) == 0, "%s", err.msg);
    CHECK_MSG(m && o && lq_vx_subject_insert(o, m, &ip, &b, &rb, &err) == 0, "%s", err.msg);
    int D = lq_vindex_get_info(V)->hidden_size, same = a && b && lq_patch_n_ops(a) == lq_patch_n_ops(b);
    CHECK(a && lq_patch_n_ops(a) > 0);
    for (size_t i = 0; same && i < lq_patch_n_ops(a); i++) {
        lq_patch_op x, y;
        lq_patch_op_at(a, i, &x);
        lq_patch_op_at(b, i, &y);
        same &= x.layer == y.layer && x.target_id == y.target_id && x.gate_threshold == y.gate_threshold &&
                !x.gate == !y.gate && !x.down == !y.down && x.n_replaces == y.n_replaces &&
                !memcmp(x.replaces, y.replaces, sizeof x.replaces);
        same &= !x.gate || !memcmp(x.gate, y.gate, (size_t)D * sizeof *x.gate);
        same &= !x.down || !memcmp(x.down, y.down, (size_t)D * sizeof *x.down);
    }
    CHECK(same);
    CHECK(ra.target_prob == rb.target_prob && ra.n_forced == rb.n_forced);
    lq_patch_free(a), lq_patch_free(b);
    lq_overlay_free(o);
    lq_model_close(m);
}

int main(void)
{
    if (setup())
        printf("#   setup failed\n");
    RUN(test_knn_insert_and_delete);
    RUN(test_compose_describe_update_delete);
    RUN(test_compose_in_forward_pass);
    RUN(test_generate_with_edits);
    RUN(test_vlp_round_trip_and_compile);
    RUN(test_bad_patches);
    RUN(test_journal);
    RUN(test_edits_never_overflow);
    RUN(test_edit_log);
    RUN(test_layered_session);
    RUN(test_old_answer_moves);
    RUN(test_clone_borrows);
    RUN(test_subject_memo_same_edit);
    lq_model_close(M);
    lq_vindex_close(V);
    return harness_done();
}
